/*  =========================================================================
    test_fspath - dsh_fspath confines paths to a root, symlinks included

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

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsh_fspath.h"

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

static int
s_setup (void **state)
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

    fixture->fspath = dsh_fspath_new (fixture->root);
    assert_non_null (fixture->fspath);
    *state = fixture;
    return 0;
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

//  Resolves and expects success at root/expected_relative ("" for the root).
static void
s_expect_ok (fixture_t *fixture, const char *path, bool must_exist,
             const char *expected_relative)
{
    fixture->error [0] = '\0';
    char *resolved = dsh_fspath_resolve (fixture->fspath, path, must_exist,
                                         fixture->error, sizeof fixture->error);
    if (!resolved)
        fail_msg ("resolve (\"%s\", %d) failed: %s", path, must_exist, fixture->error);
    char expected [PATH_MAX];
    if (*expected_relative)
        snprintf (expected, sizeof expected, "%s/%s", fixture->root, expected_relative);
    else
        snprintf (expected, sizeof expected, "%s", fixture->root);
    assert_string_equal (resolved, expected);
    free (resolved);
}

//  Resolves and expects refusal with an error holding expected_text.
static void
s_expect_refused (fixture_t *fixture, const char *path, bool must_exist,
                  const char *expected_text)
{
    fixture->error [0] = '\0';
    char *resolved = dsh_fspath_resolve (fixture->fspath, path, must_exist,
                                         fixture->error, sizeof fixture->error);
    if (resolved) {
        char shown [PATH_MAX];
        snprintf (shown, sizeof shown, "%s", resolved);
        free (resolved);
        fail_msg ("resolve (\"%s\", %d) gave \"%s\", expected refusal", path, must_exist, shown);
    }
    if (!strstr (fixture->error, expected_text))
        fail_msg ("resolve (\"%s\", %d): error \"%s\" lacks \"%s\"",
                  path, must_exist, fixture->error, expected_text);
    assert_null (strchr (fixture->error, '\n'));
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
}

static void
test_plain_and_nested (void **state)
{
    fixture_t *fixture = *state;
    s_expect_ok (fixture, "a.txt", true, "a.txt");
    s_expect_ok (fixture, "a.txt", false, "a.txt");
    s_expect_ok (fixture, "d1/d2/deep.txt", true, "d1/d2/deep.txt");
    s_expect_ok (fixture, "d1//d2/./deep.txt", true, "d1/d2/deep.txt");
    s_expect_ok (fixture, "d1/d2", true, "d1/d2");
    s_expect_ok (fixture, "d1/d2/", true, "d1/d2");
    s_expect_ok (fixture, "d1/d2/../../a.txt", true, "a.txt");
    s_expect_ok (fixture, "/d1/d2/deep.txt", true, "d1/d2/deep.txt");
    s_expect_refused (fixture, "missing.txt", true, "path \"missing.txt\" does not exist");
    s_expect_refused (fixture, "a.txt/x", true, "is not a directory");
}

static void
test_root_itself (void **state)
{
    fixture_t *fixture = *state;
    s_expect_ok (fixture, ".", true, "");
    s_expect_ok (fixture, "/", true, "");
    s_expect_ok (fixture, "//", true, "");
    s_expect_ok (fixture, "./", true, "");
    s_expect_ok (fixture, "d1/..", true, "");
    s_expect_ok (fixture, ".", false, "");
    s_expect_ok (fixture, "/", false, "");
    s_expect_refused (fixture, "", true, "path is empty");
    s_expect_refused (fixture, "", false, "path is empty");
    s_expect_refused (fixture, NULL, true, "path is empty");
}

static void
test_dotdot_escapes (void **state)
{
    fixture_t *fixture = *state;
    //  Refused as escapes whether or not the target exists, so existence
    //  outside the root cannot be probed.
    s_expect_refused (fixture, "..", true, "path \"..\" escapes the root");
    s_expect_refused (fixture, "..", false, "escapes the root");
    s_expect_refused (fixture, "../outside.txt", true, "escapes the root");
    s_expect_refused (fixture, "../no_such_file", true, "escapes the root");
    s_expect_refused (fixture, "a/../../x", true, "path \"a/../../x\" escapes the root");
    s_expect_refused (fixture, "a/../../x", false, "escapes the root");
    s_expect_refused (fixture, "/../outside.txt", true, "escapes the root");
    s_expect_refused (fixture, "d1/d2/../../../root/a.txt", true, "escapes the root");
    s_expect_refused (fixture, "../rootX/new.txt", false, "escapes the root");
}

static void
test_absolute_looking_path_is_relative (void **state)
{
    fixture_t *fixture = *state;
    //  The real /etc/passwd exists; root/etc/passwd does not.
    if (access ("/etc/passwd", F_OK) != 0)
        skip ();
    s_expect_refused (fixture, "/etc/passwd", true, "path \"/etc/passwd\" does not exist");
    s_expect_refused (fixture, "/etc/passwd", false, "parent of \"/etc/passwd\" does not exist");
}

static void
test_symlink_inside (void **state)
{
    fixture_t *fixture = *state;
    s_expect_ok (fixture, "link_in", true, "a.txt");
    s_expect_ok (fixture, "link_in", false, "a.txt");
    s_expect_ok (fixture, "dirlink_in/d2/deep.txt", true, "d1/d2/deep.txt");
    s_expect_ok (fixture, "dirlink_in/new.txt", false, "d1/new.txt");
}

static void
test_symlink_to_outside_file (void **state)
{
    fixture_t *fixture = *state;
    s_expect_refused (fixture, "link_out", true, "path \"link_out\" escapes the root");
    s_expect_refused (fixture, "link_out", false, "escapes the root");
    s_expect_refused (fixture, "/link_out", true, "escapes the root");
}

static void
test_symlinked_dir_to_outside (void **state)
{
    fixture_t *fixture = *state;
    s_expect_refused (fixture, "dirlink_out", true, "escapes the root");
    s_expect_refused (fixture, "dirlink_out", false, "escapes the root");
    s_expect_refused (fixture, "dirlink_out/secret.txt", true, "escapes the root");
    s_expect_refused (fixture, "dirlink_out/secret.txt", false, "escapes the root");
    s_expect_refused (fixture, "dirlink_out/new.txt", false,
                      "path \"dirlink_out/new.txt\" escapes the root");
    s_expect_refused (fixture, "dirlink_out/", false, "escapes the root");
    //  Nothing was created by asking.
    char *created = s_path (fixture->base, "outside_dir/new.txt");
    assert_int_not_equal (access (created, F_OK), 0);
    free (created);
}

static void
test_dangling_and_looping_symlinks (void **state)
{
    fixture_t *fixture = *state;
    s_expect_refused (fixture, "dangling", true, "does not exist");
    s_expect_refused (fixture, "dangling", false, "path \"dangling\" is a dangling symlink");
    s_expect_refused (fixture, "/dangling", false, "dangling symlink");
    s_expect_refused (fixture, "dangling/x", false, "parent of \"dangling/x\" does not exist");
    s_expect_refused (fixture, "loop", true, "too many symlinks");
    s_expect_refused (fixture, "loop", false, "too many symlinks");
}

static void
test_sibling_prefix_directory (void **state)
{
    fixture_t *fixture = *state;
    //  base/rootX starts with the text of base/root but is not inside it.
    s_expect_refused (fixture, "sibling", true, "escapes the root");
    s_expect_refused (fixture, "sibling", false, "escapes the root");

    char *sibling_dir = s_path (fixture->base, "rootX");
    dsh_fspath_t *sibling_fspath = dsh_fspath_new (sibling_dir);
    assert_non_null (sibling_fspath);
    char error [128];
    char *resolved = dsh_fspath_resolve (sibling_fspath, "x.txt", true, error, sizeof error);
    assert_non_null (resolved);
    assert_false (dsh_fspath_is_within (resolved, fixture->root));
    assert_true (dsh_fspath_is_within (resolved, sibling_dir));
    free (resolved);
    dsh_fspath_destroy (&sibling_fspath);
    free (sibling_dir);
}

static void
test_new_files (void **state)
{
    fixture_t *fixture = *state;
    s_expect_ok (fixture, "new.txt", false, "new.txt");
    s_expect_ok (fixture, "/new.txt", false, "new.txt");
    s_expect_ok (fixture, "d1/d2/new.txt", false, "d1/d2/new.txt");
    s_expect_ok (fixture, "d1/../d1/./new.txt", false, "d1/new.txt");
    s_expect_refused (fixture, "new.txt", true, "does not exist");
    s_expect_refused (fixture, "missing_dir/new.txt", false,
                      "parent of \"missing_dir/new.txt\" does not exist");
    s_expect_refused (fixture, "d1/missing/deeper/new.txt", false, "does not exist");
    s_expect_refused (fixture, "a.txt/new.txt", false, "is not a directory");
    s_expect_refused (fixture, "d1/newdir/", false, "does not name a file");
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
    s_expect_refused (fixture, long_path, true, "path is too long");
    s_expect_refused (fixture, long_path, false, "path is too long");
    //  Just under PATH_MAX in total, but too long once joined to the root.
    long_path [PATH_MAX - 1] = '\0';
    s_expect_refused (fixture, long_path, false, "too long");
    assert_non_null (strstr (fixture->error, "aaa...\" is too long"));
    free (long_path);

    //  A newline in the request must not split the one-line error.
    s_expect_refused (fixture, "no\nsuch", true, "does not exist");

    //  No error buffer, or a tiny one, is fine.
    assert_null (dsh_fspath_resolve (fixture->fspath, "..", true, NULL, 0));
    char tiny [8];
    assert_null (dsh_fspath_resolve (fixture->fspath, "..", true, tiny, sizeof tiny));
    assert_string_equal (tiny, "path \".");
}

static void
test_is_within (void **state)
{
    fixture_t *fixture = *state;
    char *a_txt = s_path (fixture->root, "a.txt");
    char *new_txt = s_path (fixture->root, "d1/new.txt");
    char *link_out = s_path (fixture->root, "link_out");
    char *link_in = s_path (fixture->root, "link_in");
    char *via_dotdot = s_path (fixture->root, "d1/../a.txt");
    char *up = s_path (fixture->root, "..");
    char *sibling_new = s_path (fixture->base, "rootX/new.txt");
    char *under_dirlink_out = s_path (fixture->root, "dirlink_out/new.txt");
    char *missing_dir = s_path (fixture->base, "missing");
    char *missing_parent = s_path (fixture->root, "missing/new.txt");

    assert_true (dsh_fspath_is_within (a_txt, fixture->root));
    assert_true (dsh_fspath_is_within (fixture->root, fixture->root));
    assert_true (dsh_fspath_is_within (new_txt, fixture->root));
    assert_true (dsh_fspath_is_within (link_in, fixture->root));
    assert_true (dsh_fspath_is_within (via_dotdot, fixture->root));
    assert_true (dsh_fspath_is_within (a_txt, "/"));
    assert_false (dsh_fspath_is_within (link_out, fixture->root));
    assert_false (dsh_fspath_is_within (up, fixture->root));
    assert_false (dsh_fspath_is_within (sibling_new, fixture->root));
    assert_false (dsh_fspath_is_within (under_dirlink_out, fixture->root));
    assert_false (dsh_fspath_is_within (a_txt, missing_dir));
    assert_false (dsh_fspath_is_within (missing_parent, fixture->root));
    assert_false (dsh_fspath_is_within ("/etc/passwd", fixture->root));
    assert_false (dsh_fspath_is_within (NULL, fixture->root));
    assert_false (dsh_fspath_is_within (a_txt, NULL));

    free (a_txt);
    free (new_txt);
    free (link_out);
    free (link_in);
    free (via_dotdot);
    free (up);
    free (sibling_new);
    free (under_dirlink_out);
    free (missing_dir);
    free (missing_parent);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_new_requires_directory),
        cmocka_unit_test (test_plain_and_nested),
        cmocka_unit_test (test_root_itself),
        cmocka_unit_test (test_dotdot_escapes),
        cmocka_unit_test (test_absolute_looking_path_is_relative),
        cmocka_unit_test (test_symlink_inside),
        cmocka_unit_test (test_symlink_to_outside_file),
        cmocka_unit_test (test_symlinked_dir_to_outside),
        cmocka_unit_test (test_dangling_and_looping_symlinks),
        cmocka_unit_test (test_sibling_prefix_directory),
        cmocka_unit_test (test_new_files),
        cmocka_unit_test (test_bad_input),
        cmocka_unit_test (test_is_within),
    };
    return cmocka_run_group_tests (tests, s_setup, s_teardown);
}
