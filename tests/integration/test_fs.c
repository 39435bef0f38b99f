/*  =========================================================================
    test_fs - dsh-fs as agents see it: a real dsh-fs process serving a
    temporary directory, called through a real broker

    read_file with offset and limit; list_directory as text and as
    structuredContent; write_file then read back; and the confinement:
    ".." escapes, an absolute symlink planted inside the root that points
    outside, a symlink that stays inside (dsh-fs follows none), and a file
    over the 10 MiB read limit are refused.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "dsh.h"
#include "dsh_testkit.h"

typedef struct {
    char root [64];
    dsh_testproc_t *broker;
    dsh_testproc_t *fs;
    char endpoint [256];
    dsh_client_t *client;
} fixture_t;

//  Writes text to root/relative.
static void
s_write (fixture_t *fixture, const char *relative, const char *text)
{
    char *path = zsys_sprintf ("%s/%s", fixture->root, relative);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    assert_int_equal (fputs (text, file) >= 0, 1);
    assert_int_equal (fclose (file), 0);
    zstr_free (&path);
}

static int
s_setup (void **state)
{
    fixture_t *fixture = (fixture_t *) zmalloc (sizeof (fixture_t));
    snprintf (fixture->root, sizeof (fixture->root), "/tmp/dsh-fs-XXXXXX");
    assert_non_null (mkdtemp (fixture->root));
    s_write (fixture, "lines.txt", "one\ntwo\nthree\nfour\nfive\n");
    char *path = zsys_sprintf ("%s/sub", fixture->root);
    assert_int_equal (mkdir (path, 0755), 0);
    zstr_free (&path);
    path = zsys_sprintf ("%s/sub/inner", fixture->root);
    assert_int_equal (mkdir (path, 0755), 0);
    zstr_free (&path);
    s_write (fixture, "sub/a.txt", "a");
    //  Absolute symlinks inside the root, pointing outside it
    path = zsys_sprintf ("%s/etc-link", fixture->root);
    assert_int_equal (symlink ("/etc", path), 0);
    zstr_free (&path);
    path = zsys_sprintf ("%s/passwd-link", fixture->root);
    assert_int_equal (symlink ("/etc/passwd", path), 0);
    zstr_free (&path);
    //  One byte over the read limit (sparse: costs no disk)
    path = zsys_sprintf ("%s/big.txt", fixture->root);
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true (fd >= 0);
    assert_int_equal (ftruncate (fd, 10 * 1024 * 1024 + 1), 0);
    close (fd);
    zstr_free (&path);

    fixture->broker = dsh_testkit_broker (200, NULL, fixture->endpoint, sizeof (fixture->endpoint));
    assert_non_null (fixture->broker);
    fixture->fs = dsh_testkit_component ("components/fs/dsh-fs", fixture->endpoint, "fs",
                                         (const char *[]) { "--root", fixture->root, NULL });
    assert_non_null (fixture->fs);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "_", 3, 5000), 0);
    fixture->client = dsh_client_new (fixture->endpoint);
    *state = fixture;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_client_destroy (&fixture->client);
    dsh_testproc_destroy (&fixture->fs);
    dsh_testproc_destroy (&fixture->broker);
    char *cleanup = zsys_sprintf ("rm -rf '%s'", fixture->root);
    assert_int_equal (system (cleanup), 0);
    zstr_free (&cleanup);
    free (fixture);
    return 0;
}

static dsh_reply_t *
s_call (fixture_t *fixture, const char *name, const char *args)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (fixture->client, name, args, NULL, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s: %s", name, error);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    return reply;
}

//  Calls and checks the result's first text block (NULL: not checked).
static void
s_expect (fixture_t *fixture, const char *name, const char *args, bool is_error, const char *text)
{
    dsh_reply_t *reply = s_call (fixture, name, args);
    if (dsh_reply_is_error (reply) != is_error)
        fail_msg ("%s %s: %s", name, args, dsh_reply_text (reply));
    if (text)
        assert_string_equal (dsh_reply_text (reply), text);
    dsh_reply_destroy (&reply);
}

//  Calls, expects an error whose text contains part.
static void
s_expect_refusal (fixture_t *fixture, const char *name, const char *args, const char *part)
{
    dsh_reply_t *reply = s_call (fixture, name, args);
    assert_true (dsh_reply_is_error (reply));
    const char *text = dsh_reply_text (reply);
    assert_non_null (text);
    if (!strstr (text, part))
        fail_msg ("%s %s: \"%s\" does not say \"%s\"", name, args, text, part);
    //  Nothing of the file outside leaks into the refusal
    assert_null (strstr (text, "root:"));
    dsh_reply_destroy (&reply);
}

static void
test_read_file (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_expect (fixture, "read_file", "{\"path\":\"lines.txt\"}", false, "one\ntwo\nthree\nfour\nfive\n");
    s_expect (fixture, "read_file", "{\"path\":\"lines.txt\",\"offset\":1,\"limit\":2}", false, "two\nthree\n");
    s_expect (fixture, "read_file", "{\"path\":\"lines.txt\",\"offset\":3}", false, "four\nfive\n");
    s_expect (fixture, "read_file", "{\"path\":\"lines.txt\",\"limit\":1}", false, "one\n");
    s_expect (fixture, "read_file", "{\"path\":\"lines.txt\",\"offset\":99}", false, NULL);
    s_expect (fixture, "read_file", "{\"path\":\"/sub/a.txt\"}", false, "a");
    s_expect_refusal (fixture, "read_file", "{\"path\":\"lines.txt\",\"offset\":-1}", "0 or more");
    s_expect_refusal (fixture, "read_file", "{\"path\":\"lines.txt\",\"limit\":\"2\"}", "\"limit\" must be an integer");
    s_expect_refusal (fixture, "read_file", "{\"path\":\"missing.txt\"}", "missing.txt");
    s_expect_refusal (fixture, "read_file", "{\"path\":\"sub\"}", "is a directory");
}

static void
test_list_directory (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_reply_t *reply = s_call (fixture, "list_directory", "{\"path\":\"sub\"}");
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "[FILE] a.txt\n[DIR] inner");
    json_t *body = dsh_reply_json (reply);
    json_t *expected = json_loads ("{\"entries\":[{\"name\":\"a.txt\",\"type\":\"file\"},"
                                   "{\"name\":\"inner\",\"type\":\"directory\"}]}", 0, NULL);
    assert_non_null (expected);
    assert_true (json_equal (json_object_get (body, "structuredContent"), expected));
    json_decref (expected);
    json_decref (body);
    dsh_reply_destroy (&reply);

    //  The root: sorted by name; symlinks are listed, not followed
    reply = s_call (fixture, "list_directory", "{\"path\":\".\"}");
    assert_false (dsh_reply_is_error (reply));
    body = dsh_reply_json (reply);
    json_t *entries = json_object_get (json_object_get (body, "structuredContent"), "entries");
    assert_int_equal (json_array_size (entries), 5);
    const char *names [] = { "big.txt", "etc-link", "lines.txt", "passwd-link", "sub" };
    const char *types [] = { "file", "other", "file", "other", "directory" };
    for (size_t index = 0; index < 5; index++) {
        json_t *entry = json_array_get (entries, index);
        assert_string_equal (json_string_value (json_object_get (entry, "name")), names [index]);
        assert_string_equal (json_string_value (json_object_get (entry, "type")), types [index]);
    }
    json_decref (body);
    dsh_reply_destroy (&reply);
    s_expect_refusal (fixture, "list_directory", "{\"path\":\"lines.txt\"}", "lines.txt");
}

static void
test_write_then_read (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_expect (fixture, "write_file", "{\"path\":\"sub/new.txt\",\"content\":\"written\\nby an agent\\n\"}", false,
              NULL);
    s_expect (fixture, "read_file", "{\"path\":\"sub/new.txt\"}", false, "written\nby an agent\n");
    //  Overwrite
    s_expect (fixture, "write_file", "{\"path\":\"sub/new.txt\",\"content\":\"again\"}", false, NULL);
    s_expect (fixture, "read_file", "{\"path\":\"sub/new.txt\"}", false, "again");
    char *path = zsys_sprintf ("%s/sub/new.txt", fixture->root);
    struct stat status;
    assert_int_equal (stat (path, &status), 0);
    assert_int_equal (status.st_size, 5);
    zstr_free (&path);
    //  Missing content: refused before the handler, nothing written
    s_expect_refusal (fixture, "write_file", "{\"path\":\"sub/none.txt\"}", "missing required property \"content\"");
    path = zsys_sprintf ("%s/sub/none.txt", fixture->root);
    assert_int_equal (stat (path, &status), -1);
    zstr_free (&path);
}

static void
test_confinement (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    //  ".." out of the root
    s_expect_refusal (fixture, "read_file", "{\"path\":\"../../../../etc/passwd\"}", "escapes the root");
    s_expect_refusal (fixture, "read_file", "{\"path\":\"sub/../../x\"}", "escapes the root");
    s_expect_refusal (fixture, "list_directory", "{\"path\":\"..\"}", "escapes the root");
    s_expect_refusal (fixture, "write_file", "{\"path\":\"../escaped.txt\",\"content\":\"x\"}", "escapes the root");
    char *escaped = zsys_sprintf ("%s/../escaped.txt", fixture->root);
    struct stat status;
    assert_int_equal (stat (escaped, &status), -1);
    zstr_free (&escaped);

    //  An absolute symlink inside the root that points outside
    s_expect_refusal (fixture, "read_file", "{\"path\":\"passwd-link\"}", "passwd-link");
    s_expect_refusal (fixture, "read_file", "{\"path\":\"etc-link/passwd\"}", "etc-link/passwd");
    s_expect_refusal (fixture, "list_directory", "{\"path\":\"etc-link\"}", "etc-link");
    s_expect_refusal (fixture, "write_file", "{\"path\":\"etc-link/dsh-test\",\"content\":\"x\"}", "etc-link");

    //  A symlink that stays inside the root is not followed either: dsh-fs
    //  follows none, so none can be swapped to lead out mid-call
    char *link = zsys_sprintf ("%s/sub-link", fixture->root);
    assert_int_equal (symlink ("sub", link), 0);
    zstr_free (&link);
    s_expect_refusal (fixture, "read_file", "{\"path\":\"sub-link/a.txt\"}",
                      "path \"sub-link/a.txt\" goes through a symlink (dsh-fs follows none)");
    s_expect_refusal (fixture, "list_directory", "{\"path\":\"sub-link\"}", "goes through a symlink");
    s_expect_refusal (fixture, "write_file", "{\"path\":\"sub-link/new.txt\",\"content\":\"x\"}",
                      "goes through a symlink");
    char *created = zsys_sprintf ("%s/sub/new.txt", fixture->root);
    assert_int_equal (stat (created, &status), -1);
    zstr_free (&created);

    //  A file over the read limit
    s_expect_refusal (fixture, "read_file", "{\"path\":\"big.txt\"}", "file too large");
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_read_file, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_list_directory, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_write_then_read, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_confinement, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
