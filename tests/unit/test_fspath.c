/*  =========================================================================
    test_fspath - dsh_fspath opens paths beneath a root, following no symlink

    Builds a scratch tree under /tmp:

        base/root/a.txt
        base/root/d1/d2/deep.txt
        base/root/link_in      -> a.txt               (stays inside)
        base/root/dirlink_in   -> d1                  (stays inside)
        base/root/link_out     -> base/outside.txt    (leads out)
        base/root/dirlink_out  -> base/outside_dir    (leads out)
        base/root/sibling      -> ../rootX/x.txt      (shares the root's prefix)
        base/root/dangling     -> nowhere
        base/root/loop         -> loop
        base/rootlink          -> root                (the root, spelled another way)
        base/rootX/x.txt
        base/outside.txt
        base/outside_dir/secret.txt
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

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsh_fspath.h"

#include <jansson.h>

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
s_write_file (const char *dir, const char *name)
{
    char *path = s_path (dir, name);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    fputs ("content\n", file);
    fclose (file);
    free (path);
}

static void
s_mkdir (const char *dir, const char *name)
{
    char *path = s_path (dir, name);
    assert_int_equal (mkdir (path, 0700), 0);
    free (path);
}

static void
s_symlink (const char *target, const char *dir, const char *name)
{
    char *path = s_path (dir, name);
    assert_int_equal (symlink (target, path), 0);
    free (path);
}

static int
s_remove_entry (const char *path, const struct stat *info, int type, struct FTW *walk)
{
    (void) info; (void) type; (void) walk;
    return remove (path);
}

//  The tree, and a confinement to base/root opened by openat2 where the
//  kernel has it (walk false) or by the walk.
static int
s_setup (void **state, bool walk)
{
    fixture_t *fixture = calloc (1, sizeof (fixture_t));
    assert_non_null (fixture);
    strcpy (fixture->base, "/tmp/test_fspath.XXXXXX");
    assert_non_null (mkdtemp (fixture->base));
    snprintf (fixture->root, sizeof fixture->root, "%s/root", fixture->base);

    s_mkdir (fixture->base, "root");
    s_mkdir (fixture->base, "rootX");
    s_mkdir (fixture->base, "outside_dir");
    s_write_file (fixture->base, "outside.txt");
    s_write_file (fixture->base, "outside_dir/secret.txt");
    s_write_file (fixture->base, "rootX/x.txt");

    s_write_file (fixture->root, "a.txt");
    s_mkdir (fixture->root, "d1");
    s_mkdir (fixture->root, "d1/d2");
    s_write_file (fixture->root, "d1/d2/deep.txt");
    s_symlink ("a.txt", fixture->root, "link_in");
    s_symlink ("d1", fixture->root, "dirlink_in");
    char *outside_file = s_path (fixture->base, "outside.txt");
    char *outside_dir = s_path (fixture->base, "outside_dir");
    s_symlink (outside_file, fixture->root, "link_out");
    s_symlink (outside_dir, fixture->root, "dirlink_out");
    free (outside_file);
    free (outside_dir);
    s_symlink ("../rootX/x.txt", fixture->root, "sibling");
    s_symlink ("nowhere", fixture->root, "dangling");
    s_symlink ("loop", fixture->root, "loop");
    s_symlink ("root", fixture->base, "rootlink");

    fixture->fspath = dsh_fspath_new (fixture->root);
    assert_non_null (fixture->fspath);
    if (walk)
        dsh_fspath_force_walk (fixture->fspath);
    *state = fixture;
    return 0;
}

static int
s_setup_openat2 (void **state)
{
    return s_setup (state, false);
}

static int
s_setup_walk (void **state)
{
    return s_setup (state, true);
}

static int
s_teardown (void **state)
{
    fixture_t *fixture = *state;
    dsh_fspath_destroy (&fixture->fspath);
    //  FTW_PHYS so the walk removes our symlinks, never what they point to.
    int rc = nftw (fixture->base, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    struct stat gone;
    bool removed = stat (fixture->base, &gone) != 0;
    free (fixture);
    return rc == 0 && removed? 0: -1;
}

//  Whether fd is the file at root/relative ("" for the root).
static void
s_assert_is (fixture_t *fixture, int fd, const char *relative)
{
    char *expected = *relative? s_path (fixture->root, relative): strdup (fixture->root);
    struct stat expected_stat, fd_stat;
    assert_int_equal (lstat (expected, &expected_stat), 0);
    assert_int_equal (fstat (fd, &fd_stat), 0);
    if (expected_stat.st_dev != fd_stat.st_dev || expected_stat.st_ino != fd_stat.st_ino)
        fail_msg ("opened something other than %s", expected);
    free (expected);
}

//  Opens path and expects the file at root/expected_relative.
static void
s_expect_opens (fixture_t *fixture, const char *path, const char *expected_relative)
{
    fixture->error [0] = '\0';
    int fd = dsh_fspath_open (fixture->fspath, path, O_RDONLY | O_NONBLOCK,
                              fixture->error, sizeof fixture->error);
    if (fd < 0)
        fail_msg ("open (\"%s\") by %s failed: %s", path,
                  dsh_fspath_resolver (fixture->fspath), fixture->error);
    s_assert_is (fixture, fd, expected_relative);
    close (fd);
}

//  Opens path and expects refusal with an error holding expected_text.
static void
s_expect_refused (fixture_t *fixture, const char *path, const char *expected_text)
{
    fixture->error [0] = '\0';
    int fd = dsh_fspath_open (fixture->fspath, path, O_RDONLY | O_NONBLOCK,
                              fixture->error, sizeof fixture->error);
    if (fd >= 0) {
        close (fd);
        fail_msg ("open (\"%s\") by %s succeeded, expected refusal", path,
                  dsh_fspath_resolver (fixture->fspath));
    }
    if (!strstr (fixture->error, expected_text))
        fail_msg ("open (\"%s\") by %s: error \"%s\" lacks \"%s\"", path,
                  dsh_fspath_resolver (fixture->fspath), fixture->error, expected_text);
    assert_null (strchr (fixture->error, '\n'));
}

//  Opens the parent of path and expects root/expected_parent and name.
static void
s_expect_parent (fixture_t *fixture, const char *path, const char *expected_parent,
                 const char *expected_name)
{
    char *name = NULL;
    int dir_fd = dsh_fspath_open_parent (fixture->fspath, path, &name,
                                         fixture->error, sizeof fixture->error);
    if (dir_fd < 0)
        fail_msg ("open_parent (\"%s\") by %s failed: %s", path,
                  dsh_fspath_resolver (fixture->fspath), fixture->error);
    s_assert_is (fixture, dir_fd, expected_parent);
    assert_string_equal (name, expected_name);
    free (name);
    close (dir_fd);
}

static void
s_expect_parent_refused (fixture_t *fixture, const char *path, const char *expected_text)
{
    fixture->error [0] = '\0';
    char *name = (char *) "unset";
    int dir_fd = dsh_fspath_open_parent (fixture->fspath, path, &name,
                                         fixture->error, sizeof fixture->error);
    if (dir_fd >= 0) {
        close (dir_fd);
        free (name);
        fail_msg ("open_parent (\"%s\") by %s succeeded, expected refusal", path,
                  dsh_fspath_resolver (fixture->fspath));
    }
    assert_null (name);
    if (!strstr (fixture->error, expected_text))
        fail_msg ("open_parent (\"%s\") by %s: error \"%s\" lacks \"%s\"", path,
                  dsh_fspath_resolver (fixture->fspath), fixture->error, expected_text);
}

static void
test_new_requires_directory (void **state)
{
    fixture_t *fixture = *state;
    char *file = s_path (fixture->root, "a.txt");
    char *missing = s_path (fixture->root, "missing");
    assert_null (dsh_fspath_new (file));
    assert_null (dsh_fspath_new (missing));
    assert_null (dsh_fspath_new (NULL));
    free (file);
    free (missing);

    //  The root is stored resolved, whatever way it was spelled.
    char *roundabout = s_path (fixture->root, "d1/../dirlink_in/..");
    dsh_fspath_t *fspath = dsh_fspath_new (roundabout);
    assert_non_null (fspath);
    assert_string_equal (dsh_fspath_root (fspath), fixture->root);
    dsh_fspath_destroy (&fspath);
    assert_null (fspath);
    dsh_fspath_destroy (&fspath);
    free (roundabout);
    assert_string_equal (dsh_fspath_root (fixture->fspath), fixture->root);
    const char *resolver = dsh_fspath_resolver (fixture->fspath);
    assert_true (strcmp (resolver, "openat2") == 0 || strcmp (resolver, "walk") == 0);
}

static void
test_plain_and_nested (void **state)
{
    fixture_t *fixture = *state;
    s_expect_opens (fixture, "a.txt", "a.txt");
    s_expect_opens (fixture, "d1/d2/deep.txt", "d1/d2/deep.txt");
    s_expect_opens (fixture, "d1//d2/./deep.txt", "d1/d2/deep.txt");
    s_expect_opens (fixture, "d1/d2", "d1/d2");
    s_expect_opens (fixture, "d1/d2/", "d1/d2");
    s_expect_opens (fixture, "d1/d2/../../a.txt", "a.txt");
    s_expect_opens (fixture, "/d1/d2/deep.txt", "d1/d2/deep.txt");
    s_expect_refused (fixture, "missing.txt", "path \"missing.txt\" does not exist");
    s_expect_refused (fixture, "a.txt/x", "is not a directory");
    s_expect_refused (fixture, "a.txt/", "is not a directory");
    s_expect_refused (fixture, "a.txt/.", "is not a directory");
    s_expect_refused (fixture, "d1/missing/x", "does not exist");
}

static void
test_root_itself (void **state)
{
    fixture_t *fixture = *state;
    s_expect_opens (fixture, ".", "");
    s_expect_opens (fixture, "/", "");
    s_expect_opens (fixture, "//", "");
    s_expect_opens (fixture, "./", "");
    s_expect_opens (fixture, "d1/..", "");
    s_expect_refused (fixture, "", "path is empty");
    s_expect_refused (fixture, NULL, "path is empty");
    s_expect_parent_refused (fixture, "", "path is empty");
}

static void
test_dotdot_escapes (void **state)
{
    fixture_t *fixture = *state;
    //  Refused as escapes whether or not the target exists, so existence
    //  outside the root cannot be probed.
    s_expect_refused (fixture, "..", "path \"..\" escapes the root");
    s_expect_refused (fixture, "../outside.txt", "escapes the root");
    s_expect_refused (fixture, "../no_such_file", "escapes the root");
    s_expect_refused (fixture, "a/../../x", "path \"a/../../x\" escapes the root");
    s_expect_refused (fixture, "/../outside.txt", "escapes the root");
    s_expect_refused (fixture, "d1/d2/../../../root/a.txt", "escapes the root");
    s_expect_parent_refused (fixture, "..", "escapes the root");
    s_expect_parent_refused (fixture, "a/../../x", "escapes the root");
    s_expect_parent_refused (fixture, "../rootX/new.txt", "escapes the root");
}

static void
test_absolute_looking_path_is_relative (void **state)
{
    fixture_t *fixture = *state;
    //  The real /etc/passwd exists; root/etc/passwd does not.
    if (access ("/etc/passwd", F_OK) != 0)
        skip ();
    s_expect_refused (fixture, "/etc/passwd", "path \"/etc/passwd\" does not exist");
    s_expect_parent_refused (fixture, "/etc/passwd", "parent of \"/etc/passwd\" does not exist");
}

//  No symlink is followed, wherever it points and wherever it sits in the
//  path: one that stays inside the root is refused like one that leads out.
static void
test_symlinks_refused (void **state)
{
    fixture_t *fixture = *state;
    const char *paths [] = {
        "link_in", "/link_in", "dirlink_in", "dirlink_in/d2/deep.txt", "dirlink_in/",
        "link_out", "dirlink_out", "dirlink_out/secret.txt", "sibling", "dangling", "loop"
    };
    for (size_t index = 0; index < sizeof paths / sizeof paths [0]; index++)
        s_expect_refused (fixture, paths [index], "goes through a symlink");
    s_expect_refused (fixture, "dirlink_out/secret.txt",
                      "path \"dirlink_out/secret.txt\" goes through a symlink (dsh-fs follows none)");
    //  Opening a directory, as listing does
    fixture->error [0] = '\0';
    assert_int_equal (dsh_fspath_open (fixture->fspath, "dirlink_in", O_RDONLY | O_DIRECTORY,
                                       fixture->error, sizeof fixture->error), -1);
    assert_non_null (strstr (fixture->error, "goes through a symlink"));

    //  A parent that is or goes through a symlink; the final name itself is
    //  the caller's to look at (without following it)
    s_expect_parent_refused (fixture, "dirlink_in/new.txt", "goes through a symlink");
    s_expect_parent_refused (fixture, "dirlink_out/new.txt",
                             "path \"dirlink_out/new.txt\" goes through a symlink");
    s_expect_parent_refused (fixture, "dirlink_in/d2/new.txt", "goes through a symlink");
    s_expect_parent_refused (fixture, "dangling/x", "goes through a symlink");
    s_expect_parent (fixture, "link_out", "", "link_out");
    //  Nothing was created by asking.
    char *created = s_path (fixture->base, "outside_dir/new.txt");
    assert_int_not_equal (access (created, F_OK), 0);
    free (created);
}

static void
test_parents (void **state)
{
    fixture_t *fixture = *state;
    s_expect_parent (fixture, "new.txt", "", "new.txt");
    s_expect_parent (fixture, "/new.txt", "", "new.txt");
    s_expect_parent (fixture, "a.txt", "", "a.txt");
    s_expect_parent (fixture, "d1/d2/new.txt", "d1/d2", "new.txt");
    s_expect_parent (fixture, "d1/../d1/./new.txt", "d1", "new.txt");
    s_expect_parent (fixture, "d1//d2", "d1", "d2");
    s_expect_parent_refused (fixture, "missing_dir/new.txt",
                             "parent of \"missing_dir/new.txt\" does not exist");
    s_expect_parent_refused (fixture, "d1/missing/deeper/new.txt", "does not exist");
    s_expect_parent_refused (fixture, "a.txt/new.txt", "is not a directory");
    s_expect_parent_refused (fixture, "d1/newdir/", "path \"d1/newdir/\" does not name a file");
    s_expect_parent_refused (fixture, "d1/.", "does not name a file");
    s_expect_parent_refused (fixture, "d1/d2/..", "does not name a file");
    s_expect_parent_refused (fixture, "/", "does not name a file");
    s_expect_parent_refused (fixture, ".", "does not name a file");
}

static void
test_normal_form (void **state)
{
    fixture_t *fixture = *state;
    const char *cases [][2] = {
        { "a.txt", "a.txt" }, { "/a.txt", "a.txt" }, { "d1//d2/./x", "d1/d2/x" },
        { "d1/d2/", "d1/d2" }, { "/", "" }, { ".", "" }, { "a/../b", "b" },
        { "a/b/../../c/", "c" }, { "missing/../a.txt", "a.txt" }
    };
    for (size_t index = 0; index < sizeof cases / sizeof cases [0]; index++) {
        char *normal = dsh_fspath_normal (fixture->fspath, cases [index][0],
                                          fixture->error, sizeof fixture->error);
        assert_non_null (normal);
        assert_string_equal (normal, cases [index][1]);
        free (normal);
    }
    assert_null (dsh_fspath_normal (fixture->fspath, "a/../..", fixture->error, sizeof fixture->error));
    assert_string_equal (fixture->error, "path \"a/../..\" escapes the root");
    assert_null (dsh_fspath_normal (fixture->fspath, "", NULL, 0));
}

static void
test_bad_input (void **state)
{
    fixture_t *fixture = *state;
    size_t long_size = PATH_MAX + 2;
    char *long_path = malloc (long_size);
    assert_non_null (long_path);
    memset (long_path, 'a', long_size - 1);
    long_path [long_size - 1] = '\0';
    s_expect_refused (fixture, long_path, "path is too long");
    s_expect_parent_refused (fixture, long_path, "path is too long");
    //  Under PATH_MAX, but one name longer than a name may be.
    long_path [PATH_MAX - 1] = '\0';
    s_expect_refused (fixture, long_path, "too long");
    assert_non_null (strstr (fixture->error, "aaa...\" is too long"));
    long_path [300] = '/';
    s_expect_refused (fixture, long_path, "too long");
    free (long_path);

    //  A newline in the request must not split the one-line error.
    s_expect_refused (fixture, "no\nsuch", "does not exist");

    //  No error buffer, or a tiny one, is fine.
    assert_int_equal (dsh_fspath_open (fixture->fspath, "..", O_RDONLY, NULL, 0), -1);
    assert_int_equal (dsh_fspath_open (fixture->fspath, "link_out", O_RDONLY, NULL, 0), -1);
    char tiny [8];
    assert_int_equal (dsh_fspath_open (fixture->fspath, "..", O_RDONLY, tiny, sizeof tiny), -1);
    assert_string_equal (tiny, "path \".");
}

static void
test_is_within (void **state)
{
    fixture_t *fixture = *state;
    dsh_fspath_t *fspath = fixture->fspath;
    char *d1 = s_path (fixture->root, "d1");
    char *d1_up = s_path (fixture->root, "d1/..");
    char *sibling = s_path (fixture->base, "rootX");
    char *missing = s_path (fixture->base, "missing");
    char *via_rootlink = s_path (fixture->base, "rootlink/d1");

    assert_true (dsh_fspath_is_within (fspath, "d1/new.txt", "d1"));
    assert_true (dsh_fspath_is_within (fspath, "d1", "d1"));
    assert_true (dsh_fspath_is_within (fspath, "d1/d2/deep.txt", "d1/"));
    assert_true (dsh_fspath_is_within (fspath, "d1/new.txt", d1));
    assert_true (dsh_fspath_is_within (fspath, "a.txt", d1_up));
    assert_true (dsh_fspath_is_within (fspath, "a.txt", fixture->root));
    assert_true (dsh_fspath_is_within (fspath, "", fixture->root));
    assert_true (dsh_fspath_is_within (fspath, "a.txt", fixture->base));
    assert_true (dsh_fspath_is_within (fspath, "a.txt", "/"));
    assert_true (dsh_fspath_is_within (fspath, "a.txt", "."));
    //  A dir spelled through a symlink outside the root is compared resolved
    assert_true (dsh_fspath_is_within (fspath, "d1/new.txt", via_rootlink));
    assert_false (dsh_fspath_is_within (fspath, "a.txt", via_rootlink));

    assert_false (dsh_fspath_is_within (fspath, "a.txt", "d1"));
    assert_false (dsh_fspath_is_within (fspath, "", "d1"));
    assert_false (dsh_fspath_is_within (fspath, "d10/x", "d1"));
    assert_false (dsh_fspath_is_within (fspath, "d1/new.txt", "d1/d2"));
    assert_false (dsh_fspath_is_within (fspath, "a.txt", sibling));
    assert_false (dsh_fspath_is_within (fspath, "a.txt", missing));
    assert_false (dsh_fspath_is_within (fspath, "a.txt", "/etc"));
    //  Names under the root are not resolved: dirlink_in holds no path,
    //  since no path through it is ever opened.
    assert_false (dsh_fspath_is_within (fspath, "d1/new.txt", "dirlink_in"));
    assert_false (dsh_fspath_is_within (fspath, NULL, "d1"));
    assert_false (dsh_fspath_is_within (fspath, "a.txt", NULL));
    assert_false (dsh_fspath_is_within (fspath, "a.txt", ""));

    free (d1);
    free (d1_up);
    free (sibling);
    free (missing);
    free (via_rootlink);
}

//  A path a reason shows is valid UTF-8 whatever bytes the caller sent
//  (issue 22: dsh-fs echoed a non-UTF-8 path inside a msgpack str, and the
//  Python client dropped the result as malformed)
static void
test_shown_is_utf8 (void **state)
{
    (void) state;
    char shown [DSH_FSPATH_SHOWN_MAX + 1];
    dsh_fspath_shown ("scratch/caf\xc3\xa9.txt", shown, sizeof shown);
    assert_string_equal (shown, "scratch/caf\xc3\xa9.txt");
    dsh_fspath_shown ("a\xff" "b\xc3(\xed\xa0\x80", shown, sizeof shown);
    assert_string_equal (shown, "a\\xffb\\xc3(\\xed\\xa0\\x80");
    char long_path [300];
    memset (long_path, 'p', sizeof long_path - 1);
    long_path [sizeof long_path - 1] = 0;
    long_path [75] = '\xe2';
    long_path [76] = '\x82';
    long_path [77] = '\xac';
    dsh_fspath_shown (long_path, shown, sizeof shown);
    assert_true (strlen (shown) <= DSH_FSPATH_SHOWN_MAX);
    assert_string_equal (shown + strlen (shown) - 3, "...");
    json_t *text = json_string (shown);
    assert_non_null (text);
    json_decref (text);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_new_requires_directory),
        cmocka_unit_test (test_shown_is_utf8),
        cmocka_unit_test (test_plain_and_nested),
        cmocka_unit_test (test_root_itself),
        cmocka_unit_test (test_dotdot_escapes),
        cmocka_unit_test (test_absolute_looking_path_is_relative),
        cmocka_unit_test (test_symlinks_refused),
        cmocka_unit_test (test_parents),
        cmocka_unit_test (test_normal_form),
        cmocka_unit_test (test_bad_input),
        cmocka_unit_test (test_is_within),
    };
    int failed = cmocka_run_group_tests_name ("openat2", tests, s_setup_openat2, s_teardown);
    failed += cmocka_run_group_tests_name ("walk", tests, s_setup_walk, s_teardown);
    return failed;
}
