/*  =========================================================================
    test_fsops - the dsh-fs operations: read, list, write inside a root

    Every test runs twice: with paths opened by openat2, and by the walk
    that stands in for it on kernels without openat2.

    Builds a scratch tree under /tmp:

        base/root/a.txt          "one\ntwo\nthree"      (no final newline)
        base/root/d1/            (empty directory)
        base/root/zeta/inner.txt
        base/root/link_in      -> a.txt
        base/root/link_out     -> base/outside.txt
        base/root/dangling     -> nowhere
        base/root/fifo           (a named pipe)
        base/outside.txt
    =========================================================================
*/

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsh_fsops.h"

typedef struct {
    char base [64];
    char root [128];
    dsh_fspath_t *fspath;
    char error [256];
} fixture_t;

static char *
s_path (const char *dir, const char *name)
{
    char *path = NULL;
    assert_true (asprintf (&path, "%s/%s", dir, name) > 0);
    return path;
}

static void
s_put (const char *dir, const char *name, const void *content, size_t size)
{
    char *path = s_path (dir, name);
    FILE *file = fopen (path, "wb");
    assert_non_null (file);
    assert_int_equal (fwrite (content, 1, size, file), size);
    assert_int_equal (fclose (file), 0);
    free (path);
}

//  The bytes of a file under dir; asserts it exists.
static char *
s_get (const char *dir, const char *name, size_t *size_p)
{
    char *path = s_path (dir, name);
    FILE *file = fopen (path, "rb");
    assert_non_null (file);
    char *content = calloc (1, 1 << 20);
    assert_non_null (content);
    *size_p = fread (content, 1, (1 << 20) - 1, file);
    fclose (file);
    free (path);
    return content;
}

static int
s_remove_entry (const char *path, const struct stat *info, int type, struct FTW *walk)
{
    (void) info; (void) type; (void) walk;
    return remove (path);
}

//  Whether the tests running now open paths by the walk rather than by
//  openat2: main runs every test once each way.
static bool s_walk = false;

static int
s_setup (void **state)
{
    fixture_t *fixture = calloc (1, sizeof (fixture_t));
    assert_non_null (fixture);
    strcpy (fixture->base, "/tmp/test_fsops.XXXXXX");
    assert_non_null (mkdtemp (fixture->base));
    snprintf (fixture->root, sizeof fixture->root, "%s/root", fixture->base);
    assert_int_equal (mkdir (fixture->root, 0700), 0);

    s_put (fixture->base, "outside.txt", "secret\n", 7);
    s_put (fixture->root, "a.txt", "one\ntwo\nthree", 13);
    char *d1 = s_path (fixture->root, "d1");
    char *zeta = s_path (fixture->root, "zeta");
    assert_int_equal (mkdir (d1, 0700), 0);
    assert_int_equal (mkdir (zeta, 0700), 0);
    s_put (zeta, "inner.txt", "inner\n", 6);
    char *link_in = s_path (fixture->root, "link_in");
    char *link_out = s_path (fixture->root, "link_out");
    char *dangling = s_path (fixture->root, "dangling");
    char *fifo = s_path (fixture->root, "fifo");
    char *outside = s_path (fixture->base, "outside.txt");
    assert_int_equal (symlink ("a.txt", link_in), 0);
    assert_int_equal (symlink (outside, link_out), 0);
    assert_int_equal (symlink ("nowhere", dangling), 0);
    assert_int_equal (mkfifo (fifo, 0600), 0);
    free (d1); free (zeta); free (link_in); free (link_out);
    free (dangling); free (fifo); free (outside);

    fixture->fspath = dsh_fspath_new (fixture->root);
    assert_non_null (fixture->fspath);
    if (s_walk)
        dsh_fspath_force_walk (fixture->fspath);
    *state = fixture;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *fixture = *state;
    dsh_fspath_destroy (&fixture->fspath);
    int rc = nftw (fixture->base, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free (fixture);
    return rc;
}

//  Reads and expects exactly expected (NUL-free).
static void
s_expect_read (fixture_t *fixture, const char *path, int64_t offset, int64_t limit,
               const char *expected)
{
    size_t size = 99;
    char *text = dsh_fsops_read (fixture->fspath, path, offset, limit, &size,
                                 fixture->error, sizeof fixture->error);
    if (!text)
        fail_msg ("read (\"%s\", %lld, %lld) failed: %s", path,
                  (long long) offset, (long long) limit, fixture->error);
    assert_int_equal (size, strlen (expected));
    assert_string_equal (text, expected);
    free (text);
}

//  Reads and expects refusal with an error holding expected_text.
static void
s_expect_read_refused (fixture_t *fixture, const char *path, const char *expected_text)
{
    fixture->error [0] = '\0';
    size_t size = 0;
    char *text = dsh_fsops_read (fixture->fspath, path, 0, -1, &size,
                                 fixture->error, sizeof fixture->error);
    if (text) {
        free (text);
        fail_msg ("read (\"%s\") succeeded, expected refusal", path);
    }
    if (!strstr (fixture->error, expected_text))
        fail_msg ("read (\"%s\"): error \"%s\" lacks \"%s\"", path, fixture->error, expected_text);
}

static void
s_expect_write_refused (fixture_t *fixture, const char *path, const char *expected_text)
{
    fixture->error [0] = '\0';
    int rc = dsh_fsops_write (fixture->fspath, path, "x", 1, fixture->error, sizeof fixture->error);
    if (rc == 0)
        fail_msg ("write (\"%s\") succeeded, expected refusal", path);
    if (!strstr (fixture->error, expected_text))
        fail_msg ("write (\"%s\"): error \"%s\" lacks \"%s\"", path, fixture->error, expected_text);
}

static void
test_read_whole_file (void **state)
{
    fixture_t *fixture = *state;
    s_expect_read (fixture, "a.txt", 0, -1, "one\ntwo\nthree");
    s_expect_read (fixture, "/a.txt", 0, -1, "one\ntwo\nthree");
    s_expect_read (fixture, "zeta/../zeta/inner.txt", 0, -1, "inner\n");
}

static void
test_read_lines (void **state)
{
    fixture_t *fixture = *state;
    s_expect_read (fixture, "a.txt", 0, 1, "one\n");
    s_expect_read (fixture, "a.txt", 1, 1, "two\n");
    s_expect_read (fixture, "a.txt", 1, -1, "two\nthree");
    s_expect_read (fixture, "a.txt", 2, 5, "three");
    s_expect_read (fixture, "a.txt", 0, 2, "one\ntwo\n");
    s_expect_read (fixture, "a.txt", 3, -1, "");
    s_expect_read (fixture, "a.txt", 1000, 10, "");
    s_expect_read (fixture, "a.txt", 0, 0, "");
}

static void
test_read_refusals (void **state)
{
    fixture_t *fixture = *state;
    s_expect_read_refused (fixture, "../outside.txt", "escapes the root");
    s_expect_read_refused (fixture, "missing.txt", "does not exist");
    //  No symlink is followed, even one that stays inside the root.
    s_expect_read_refused (fixture, "link_out", "path \"link_out\" goes through a symlink");
    s_expect_read_refused (fixture, "link_in", "goes through a symlink");
    s_expect_read_refused (fixture, "dangling", "goes through a symlink");
    char *zeta_link = s_path (fixture->root, "zeta_link");
    assert_int_equal (symlink ("zeta", zeta_link), 0);
    free (zeta_link);
    s_expect_read_refused (fixture, "zeta_link/inner.txt", "goes through a symlink");
    s_expect_read_refused (fixture, "d1", "is a directory");
    s_expect_read_refused (fixture, "/", "is a directory");
    //  Must not block waiting for a writer.
    s_expect_read_refused (fixture, "fifo", "is not a regular file");
    s_expect_read_refused (fixture, "", "path is empty");
}

static void
test_read_refuses_binary (void **state)
{
    fixture_t *fixture = *state;
    s_put (fixture->root, "latin1.txt", "caf\xe9\n", 5);
    s_expect_read_refused (fixture, "latin1.txt", "file is not UTF-8 text");
    s_put (fixture->root, "truncated.txt", "ok \xe2\x82", 5);
    s_expect_read_refused (fixture, "truncated.txt", "file is not UTF-8 text");
    //  Multibyte UTF-8 is text.
    s_put (fixture->root, "utf8.txt", "caf\xc3\xa9 \xe2\x82\xac\n", 10);
    s_expect_read (fixture, "utf8.txt", 0, -1, "caf\xc3\xa9 \xe2\x82\xac\n");
}

static void
test_read_size_cap (void **state)
{
    fixture_t *fixture = *state;
    char *big = s_path (fixture->root, "big.txt");
    int fd = open (big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true (fd >= 0);
    assert_int_equal (ftruncate (fd, DSH_FSOPS_READ_MAX + 1), 0);
    close (fd);
    s_expect_read_refused (fixture, "big.txt", "file too large");

    //  Exactly the limit is allowed.
    assert_int_equal (truncate (big, DSH_FSOPS_READ_MAX), 0);
    size_t size = 0;
    char *text = dsh_fsops_read (fixture->fspath, "big.txt", 0, -1, &size,
                                 fixture->error, sizeof fixture->error);
    assert_non_null (text);
    assert_int_equal (size, DSH_FSOPS_READ_MAX);
    free (text);
    free (big);
}

static void
test_list_sorted_with_kinds (void **state)
{
    fixture_t *fixture = *state;
    zlistx_t *entries = dsh_fsops_list (fixture->fspath, "/", fixture->error, sizeof fixture->error);
    assert_non_null (entries);
    const char *expected [][2] = {
        { "a.txt", "file" }, { "d1", "directory" }, { "dangling", "other" },
        { "fifo", "other" }, { "link_in", "other" }, { "link_out", "other" },
        { "zeta", "directory" }
    };
    assert_int_equal (zlistx_size (entries), sizeof expected / sizeof expected [0]);
    size_t index = 0;
    for (dsh_fsops_entry_t *entry = zlistx_first (entries); entry; entry = zlistx_next (entries)) {
        assert_string_equal (entry->name, expected [index][0]);
        assert_string_equal (dsh_fsops_kind_name (entry->kind), expected [index][1]);
        index++;
    }
    zlistx_destroy (&entries);

    entries = dsh_fsops_list (fixture->fspath, "d1", fixture->error, sizeof fixture->error);
    assert_non_null (entries);
    assert_int_equal (zlistx_size (entries), 0);
    zlistx_destroy (&entries);

    entries = dsh_fsops_list (fixture->fspath, "zeta", fixture->error, sizeof fixture->error);
    assert_non_null (entries);
    assert_int_equal (zlistx_size (entries), 1);
    assert_string_equal (((dsh_fsops_entry_t *) zlistx_first (entries))->name, "inner.txt");
    zlistx_destroy (&entries);
}

static void
test_list_names_are_utf8 (void **state)
{
    fixture_t *fixture = *state;
    s_put (fixture->root, "d1/caf\xe9", "", 0);
    s_put (fixture->root, "d1/caf\xc3\xa9", "", 0);
    zlistx_t *entries = dsh_fsops_list (fixture->fspath, "d1", fixture->error, sizeof fixture->error);
    assert_non_null (entries);
    assert_int_equal (zlistx_size (entries), 2);
    //  Sorted as listed: '?' sorts before any multibyte character.
    assert_string_equal (((dsh_fsops_entry_t *) zlistx_first (entries))->name, "caf?");
    assert_string_equal (((dsh_fsops_entry_t *) zlistx_next (entries))->name, "caf\xc3\xa9");
    zlistx_destroy (&entries);
}

static void
test_list_refusals (void **state)
{
    fixture_t *fixture = *state;
    const char *cases [][2] = {
        { "a.txt", "is not a directory" },
        { "..", "escapes the root" },
        { "link_out", "goes through a symlink" },
        { "link_in", "goes through a symlink" },
        { "nope", "does not exist" }
    };
    for (size_t index = 0; index < sizeof cases / sizeof cases [0]; index++) {
        fixture->error [0] = '\0';
        zlistx_t *entries = dsh_fsops_list (fixture->fspath, cases [index][0],
                                            fixture->error, sizeof fixture->error);
        if (entries) {
            zlistx_destroy (&entries);
            fail_msg ("list (\"%s\") succeeded", cases [index][0]);
        }
        if (!strstr (fixture->error, cases [index][1]))
            fail_msg ("list (\"%s\"): \"%s\" lacks \"%s\"", cases [index][0],
                      fixture->error, cases [index][1]);
    }
}

static void
test_write_creates_and_replaces (void **state)
{
    fixture_t *fixture = *state;
    //  Content is bytes: an embedded NUL survives.
    assert_int_equal (dsh_fsops_write (fixture->fspath, "new.txt", "x\0y", 3,
                                       fixture->error, sizeof fixture->error), 0);
    size_t size;
    char *content = s_get (fixture->root, "new.txt", &size);
    assert_int_equal (size, 3);
    assert_memory_equal (content, "x\0y", 3);
    free (content);

    //  Replacing keeps the file's permissions.
    char *a_txt = s_path (fixture->root, "a.txt");
    assert_int_equal (chmod (a_txt, 0640), 0);
    assert_int_equal (dsh_fsops_write (fixture->fspath, "a.txt", "replaced", 8,
                                       fixture->error, sizeof fixture->error), 0);
    s_expect_read (fixture, "a.txt", 0, -1, "replaced");
    struct stat a_stat;
    assert_int_equal (stat (a_txt, &a_stat), 0);
    assert_int_equal (a_stat.st_mode & 07777, 0640);
    free (a_txt);

    //  Not through a symlink, even one inside the root: nothing changes.
    s_expect_write_refused (fixture, "link_in", "path \"link_in\" goes through a symlink");
    s_expect_read (fixture, "a.txt", 0, -1, "replaced");
    char *link_in = s_path (fixture->root, "link_in");
    struct stat link_stat;
    assert_int_equal (lstat (link_in, &link_stat), 0);
    assert_true (S_ISLNK (link_stat.st_mode));
    free (link_in);

    //  Empty content makes an empty file; nested paths work.
    assert_int_equal (dsh_fsops_write (fixture->fspath, "zeta/empty.txt", "", 0,
                                       fixture->error, sizeof fixture->error), 0);
    s_expect_read (fixture, "zeta/empty.txt", 0, -1, "");

    //  No temporary files are left behind.
    zlistx_t *entries = dsh_fsops_list (fixture->fspath, "/", fixture->error, sizeof fixture->error);
    assert_non_null (entries);
    for (dsh_fsops_entry_t *entry = zlistx_first (entries); entry; entry = zlistx_next (entries))
        assert_null (strstr (entry->name, ".tmp"));
    zlistx_destroy (&entries);
}

static void
test_write_refusals (void **state)
{
    fixture_t *fixture = *state;
    s_expect_write_refused (fixture, "../outside.txt", "escapes the root");
    s_expect_write_refused (fixture, "link_out", "goes through a symlink");
    s_expect_write_refused (fixture, "dangling", "goes through a symlink");
    s_expect_write_refused (fixture, "missing_dir/x.txt", "does not exist");
    s_expect_write_refused (fixture, "a.txt/x.txt", "is not a directory");
    s_expect_write_refused (fixture, "zeta/", "does not name a file");
    s_expect_write_refused (fixture, "d1", "is a directory");
    s_expect_write_refused (fixture, "fifo", "is not a regular file");
    s_expect_write_refused (fixture, "", "path is empty");
    char *zeta_link = s_path (fixture->root, "zeta_link");
    assert_int_equal (symlink ("zeta", zeta_link), 0);
    free (zeta_link);
    s_expect_write_refused (fixture, "zeta_link/new.txt", "goes through a symlink");
    //  Nothing leaked out, nothing was created through the links.
    char *dangling_target = s_path (fixture->root, "nowhere");
    char *through_link = s_path (fixture->root, "zeta/new.txt");
    assert_int_not_equal (access (dangling_target, F_OK), 0);
    assert_int_not_equal (access (through_link, F_OK), 0);
    free (dangling_target);
    free (through_link);
    size_t size;
    char *outside = s_get (fixture->base, "outside.txt", &size);
    assert_int_equal (size, 7);
    assert_memory_equal (outside, "secret\n", 7);
    free (outside);
}

typedef struct {
    dsh_fspath_t *fspath;
    volatile bool stop;
    volatile size_t writes;
} writer_t;

static void *
s_writer (void *arg)
{
    writer_t *writer = arg;
    size_t size = 256 * 1024;
    char *a = malloc (size), *b = malloc (size);
    memset (a, 'A', size);
    memset (b, 'B', size);
    char error [256];
    while (!writer->stop) {
        const char *content = writer->writes % 2? b: a;
        if (dsh_fsops_write (writer->fspath, "race.txt", content, size, error, sizeof error) != 0)
            break;
        writer->writes++;
    }
    free (a);
    free (b);
    return NULL;
}

//  A reader never sees a half-written file: a write replaces it at once.
static void
test_write_is_atomic_for_readers (void **state)
{
    fixture_t *fixture = *state;
    char error [256];
    assert_int_equal (dsh_fsops_write (fixture->fspath, "race.txt", "start", 5, error, sizeof error), 0);
    writer_t writer = { fixture->fspath, false, 0 };
    pthread_t thread;
    assert_int_equal (pthread_create (&thread, NULL, s_writer, &writer), 0);
    size_t reads = 0;
    bool torn = false;
    //  Enough reads, and enough writes under them, whichever thread runs first
    time_t give_up = time (NULL) + 20;
    while ((reads < 300 || writer.writes < 20) && !torn && time (NULL) < give_up) {
        size_t size = 0;
        char *text = dsh_fsops_read (fixture->fspath, "race.txt", 0, -1, &size, error, sizeof error);
        assert_non_null (text);
        if (size != 5) {
            torn = size != 256 * 1024;
            for (size_t index = 1; index < size && !torn; index++)
                torn = text [index] != text [0];
        }
        free (text);
        reads++;
    }
    writer.stop = true;
    pthread_join (thread, NULL);
    assert_false (torn);
    assert_true (writer.writes > 0);
}

//  The race from the field: a local process swaps a directory inside the
//  root for a symlink to one outside it, over and over, while dsh-fs reads
//  and writes beneath it. base/root/d is a real directory holding sub/f.txt
//  ("inside"), base/root/d_alt a symlink to base/outside_dir, which holds
//  sub/f.txt ("outside"); the swapper exchanges the two names.
typedef struct {
    char d [192];
    char d_alt [192];
    volatile bool stop;
    size_t swaps;
} swapper_t;

static void *
s_swapper (void *arg)
{
    swapper_t *swapper = arg;
    while (!swapper->stop) {
        if (renameat2 (AT_FDCWD, swapper->d, AT_FDCWD, swapper->d_alt, RENAME_EXCHANGE) != 0) {
            //  A filesystem without RENAME_EXCHANGE: swap in three steps,
            //  which also leaves moments where d does not exist.
            char parked [200];
            snprintf (parked, sizeof parked, "%s.parked", swapper->d);
            if (rename (swapper->d, parked) != 0
            ||  rename (swapper->d_alt, swapper->d) != 0
            ||  rename (parked, swapper->d_alt) != 0)
                break;
        }
        swapper->swaps++;
        //  Under valgrind, which runs one thread at a time, the readers
        //  would otherwise wait out the swapper's whole time slice.
        sched_yield ();
    }
    return NULL;
}

#define RACE_READS  4000
#define RACE_WRITES 1500

static void
s_race (fixture_t *fixture)
{
    char *outside_dir = s_path (fixture->base, "outside_dir");
    char *outside_sub = s_path (fixture->base, "outside_dir/sub");
    char *inside_sub = s_path (fixture->root, "d/sub");
    char *d = s_path (fixture->root, "d");
    assert_int_equal (mkdir (outside_dir, 0700), 0);
    assert_int_equal (mkdir (outside_sub, 0700), 0);
    s_put (outside_sub, "f.txt", "outside\n", 8);
    assert_int_equal (mkdir (d, 0700), 0);
    assert_int_equal (mkdir (inside_sub, 0700), 0);
    s_put (inside_sub, "f.txt", "inside\n", 7);

    swapper_t swapper = { .stop = false };
    snprintf (swapper.d, sizeof swapper.d, "%s", d);
    snprintf (swapper.d_alt, sizeof swapper.d_alt, "%s/d_alt", fixture->root);
    assert_int_equal (symlink (outside_dir, swapper.d_alt), 0);
    pthread_t thread;
    assert_int_equal (pthread_create (&thread, NULL, s_swapper, &swapper), 0);

    size_t reads_ok = 0, reads_out = 0, writes_ok = 0;
    char error [256];
    for (size_t index = 0; index < RACE_READS; index++) {
        size_t size = 0;
        char *text = dsh_fsops_read (fixture->fspath, "d/sub/f.txt", 0, -1, &size,
                                     error, sizeof error);
        if (text) {
            reads_ok++;
            if (strcmp (text, "outside\n") == 0)
                reads_out++;
            else
                assert_string_equal (text, "inside\n");
        }
        free (text);
        if (index < RACE_WRITES
        &&  dsh_fsops_write (fixture->fspath, "d/sub/w.txt", "written\n", 8,
                             error, sizeof error) == 0)
            writes_ok++;
    }
    swapper.stop = true;
    pthread_join (thread, NULL);

    //  Nothing outside changed: sub still holds f.txt alone, as it was.
    DIR *dir = opendir (outside_sub);
    assert_non_null (dir);
    struct dirent *dirent;
    size_t outside_entries = 0;
    while ((dirent = readdir (dir)))
        if (strcmp (dirent->d_name, ".") != 0 && strcmp (dirent->d_name, "..") != 0)
            outside_entries++;
    closedir (dir);
    size_t size;
    char *outside = s_get (outside_sub, "f.txt", &size);
    print_message ("race (%s): %zu swaps, %zu of %d reads succeeded, %zu read outside; "
                   "%zu of %d writes succeeded, %zu entries in outside_dir/sub (1: f.txt alone)\n",
                   dsh_fspath_resolver (fixture->fspath),
                   swapper.swaps, reads_ok, RACE_READS, reads_out,
                   writes_ok, RACE_WRITES, outside_entries);
    assert_int_equal (reads_out, 0);
    assert_int_equal (outside_entries, 1);
    assert_int_equal (size, 8);
    assert_memory_equal (outside, "outside\n", 8);
    free (outside);
    free (outside_dir);
    free (outside_sub);
    free (inside_sub);
    free (d);
}

static void
test_symlink_swap_race (void **state)
{
    s_race (*state);
}

//  The sandbox stamp: read-only refuses writes only; no stamp and
//  danger-full-access leave the root's confinement alone.
static void
test_sandbox_read_only (void **state)
{
    fixture_t *fixture = *state;
    char error [256] = "";
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "new.txt", true, "read-only", NULL,
                                               error, sizeof error), -1);
    assert_string_equal (error, "sandbox policy \"read-only\" forbids writing");
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "a.txt", false, "read-only", NULL,
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "new.txt", true, NULL, NULL,
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "new.txt", true, "danger-full-access", NULL,
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "a.txt", false, "everything", NULL,
                                               error, sizeof error), -1);
    assert_string_equal (error, "unknown sandbox policy \"everything\"");
}

//  workspace-write reads anywhere and keeps writes inside the workspace,
//  symlinks resolved; a relative workspace lies under the root.
static void
test_sandbox_workspace (void **state)
{
    fixture_t *fixture = *state;
    char error [256] = "";
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/new.txt", true, "workspace-write", "zeta",
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "/zeta/inner.txt", true, "workspace-write", "zeta",
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "a.txt", true, "workspace-write", "zeta",
                                               error, sizeof error), -1);
    assert_string_equal (error, "path \"a.txt\" is outside the sandbox workspace");
    //  Reading outside the workspace is allowed
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "a.txt", false, "workspace-write", "zeta",
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/../a.txt", true, "workspace-write", "zeta",
                                               error, sizeof error), -1);
    //  A link inside the workspace that leads out of it: its name is in the
    //  workspace, and the write refuses to follow it
    char *link = s_path (fixture->root, "zeta/up");
    assert_int_equal (symlink ("../a.txt", link), 0);
    free (link);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/up", true, "workspace-write", "zeta",
                                               error, sizeof error), 0);
    s_expect_write_refused (fixture, "zeta/up", "goes through a symlink");
    s_expect_read (fixture, "a.txt", 0, -1, "one\ntwo\nthree");
    //  A workspace that is a symlink under the root holds nothing: no path
    //  through it is ever opened
    char *workspace_link = s_path (fixture->root, "zeta_link");
    assert_int_equal (symlink ("zeta", workspace_link), 0);
    free (workspace_link);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/inner.txt", true, "workspace-write",
                                               "zeta_link", error, sizeof error), -1);
    //  An absolute workspace
    char *zeta = s_path (fixture->root, "zeta");
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/inner.txt", true, "workspace-write", zeta,
                                               error, sizeof error), 0);
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "d1/new.txt", true, "workspace-write", zeta,
                                               error, sizeof error), -1);
    free (zeta);
    //  No workspace, or one that does not exist: nothing is inside
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/inner.txt", true, "workspace-write", NULL,
                                               error, sizeof error), -1);
    assert_string_equal (error, "sandbox policy \"workspace-write\" names no workspace");
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "zeta/inner.txt", true, "workspace-write", "nope",
                                               error, sizeof error), -1);
    //  A path the root refuses is left to the operation to report
    assert_int_equal (dsh_fsops_check_sandbox (fixture->fspath, "../outside.txt", false, "workspace-write", "zeta",
                                               error, sizeof error), 0);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_read_whole_file, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_read_lines, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_read_refusals, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_read_refuses_binary, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_read_size_cap, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_list_sorted_with_kinds, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_list_names_are_utf8, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_list_refusals, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_write_creates_and_replaces, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_write_refusals, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_write_is_atomic_for_readers, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_symlink_swap_race, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sandbox_read_only, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sandbox_workspace, s_setup, s_teardown),
    };
    s_walk = false;
    int failed = cmocka_run_group_tests_name ("openat2", tests, NULL, NULL);
    s_walk = true;
    failed += cmocka_run_group_tests_name ("walk", tests, NULL, NULL);
    return failed;
}
