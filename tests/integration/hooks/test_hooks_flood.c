/*  =========================================================================
    test_hooks_flood - a real broker's hooks stage under a flood of calls

    One caller sends many calls through a PreToolUse hook that holds at a
    gate (gate.sh) while another caller sends one: at most max_processes
    hooks run at once, the calls over the wait queue's bounds are answered
    OVERLOADED at once, the broker's descriptors stay bounded, and the
    other caller's call is served, not failed.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

typedef struct {
    char dir [64];              //  the gate's directory
} flood_t;

static int
s_remove_entry (const char *path, const struct stat *info, int type, struct FTW *walk)
{
    (void) info; (void) type; (void) walk;
    return remove (path);
}

static void
s_touch (flood_t *self, const char *name)
{
    char path [96];
    snprintf (path, sizeof path, "%s/%s", self->dir, name);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    fclose (file);
}

static int
s_setup (void **state)
{
    flood_t *self = (flood_t *) calloc (1, sizeof (flood_t));
    assert_non_null (self);
    strcpy (self->dir, "/tmp/test_hooks_flood.XXXXXX");
    assert_non_null (mkdtemp (self->dir));
    char running [96];
    snprintf (running, sizeof running, "%s/running", self->dir);
    assert_int_equal (mkdir (running, 0700), 0);
    *state = self;
    return 0;
}

//  Opens the gate whatever happened, so no hook is left holding there.
static int
s_teardown (void **state)
{
    flood_t *self = (flood_t *) *state;
    s_touch (self, "release");
    char running [96];
    snprintf (running, sizeof running, "%s/running", self->dir);
    int64_t deadline = zclock_mono () + 10000;
    DIR *dir = NULL;
    while (zclock_mono () < deadline && (dir = opendir (running))) {
        int entries = 0;
        for (struct dirent *entry = readdir (dir); entry; entry = readdir (dir))
            entries += entry->d_name [0] != '.';
        closedir (dir);
        if (entries == 0)
            break;
        zclock_sleep (20);
    }
    int rc = nftw (self->dir, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free (self);
    return rc;
}

static int
s_entries (const char *path)
{
    DIR *dir = opendir (path);
    if (!dir)
        return -1;
    int count = 0;
    for (struct dirent *entry = readdir (dir); entry; entry = readdir (dir))
        if (!streq (entry->d_name, ".") && !streq (entry->d_name, ".."))
            count++;
    closedir (dir);
    return count;
}

static int
s_descriptors (dsh_testproc_t *process)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/fd", (int) dsh_testproc_pid (process));
    return s_entries (path);
}

//  Waits until count hooks hold at the gate; false at the deadline.
static bool
s_wait_gate (flood_t *self, int count, int timeout_ms)
{
    char running [96];
    snprintf (running, sizeof running, "%s/running", self->dir);
    int64_t deadline = zclock_mono () + timeout_ms;
    while (s_entries (running) != count) {
        if (zclock_mono () > deadline)
            return false;
        zclock_sleep (10);
    }
    return true;
}

//  The next reply on client to a call, within timeout_ms, or a failure.
static dsh_reply_t *
s_result (dsh_client_t *client, int timeout_ms)
{
    int64_t deadline = zclock_mono () + timeout_ms;
    while (zclock_mono () < deadline) {
        dsh_reply_t *reply = dsh_client_recv (client, (int) (deadline - zclock_mono ()));
        if (reply && streq (dsh_reply_command (reply), "RESULT"))
            return reply;
        dsh_reply_destroy (&reply);
    }
    fail_msg ("no result within %d ms", timeout_ms);
    return NULL;
}

static void
test_flood (void **state)
{
    flood_t *self = (flood_t *) *state;
    const char *source = getenv ("DSH_SOURCE_DIR");
    char *config = zsys_sprintf (
        "chain\n"
        "    stage\n"
        "        name = \"hooks\"\n"
        "        kind = \"hooks\"\n"
        "        max_processes = 4\n"
        "        queue_calls = 16\n"
        "        queue_calls_per_caller = 12\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"echo\"\n"
        "            command = \"%s/tests/integration/hooks/gate.sh %s\"\n",
        source? source: ".", self->dir);
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker_config (200, config, endpoint, sizeof endpoint);
    assert_non_null (broker);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, endpoint, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *flood = dsh_client_new (endpoint);
    dsh_client_t *other = dsh_client_new (endpoint);
    dsh_reply_t *reply = NULL;
    char error [256];
    //  Both connections are up before the flood (a blocking call each)
    reply = dsh_client_call (flood, "sample_content", "{}", "flood", 10000, error, sizeof error);
    assert_non_null (reply);
    dsh_reply_destroy (&reply);
    reply = dsh_client_call (other, "sample_content", "{}", "other", 10000, error, sizeof error);
    assert_non_null (reply);
    dsh_reply_destroy (&reply);
    int baseline = s_descriptors (broker);
    assert_true (baseline > 0);

    //  40 calls: 4 run, 12 wait (the caller's share), 24 are refused
    const char args [] = { '\x81', '\xa7', 'm', 'e', 's', 's', 'a', 'g', 'e', '\xa1', 'x' };
    for (int index = 0; index < 40; index++) {
        char call_id [16];
        snprintf (call_id, sizeof call_id, "flood-%d", index);
        assert_non_null (dsh_client_call_send (flood, call_id, "echo", args, sizeof args, "flood",
                                               NULL, 0, 60000));
    }
    for (int index = 0; index < 24; index++) {
        reply = s_result (flood, 20000);
        assert_string_equal (dsh_reply_error_code (reply), DSH_E_OVERLOADED);
        assert_non_null (strstr (dsh_reply_text (reply), "(max_processes 4)"));
        assert_non_null (strstr (dsh_reply_text (reply), "queue_calls_per_caller 12"));
        dsh_reply_destroy (&reply);
    }
    assert_non_null (dsh_client_call_send (other, "other-1", "echo", args, sizeof args, "other",
                                           NULL, 0, 60000));
    assert_true (s_wait_gate (self, 4, 20000));
    //  Three descriptors a running hook; a waiting call holds none
    int peak = s_descriptors (broker);
    assert_true (peak <= baseline + 3 * 4 + 8);

    s_touch (self, "release");
    reply = s_result (other, 30000);
    assert_string_equal (dsh_reply_call_id (reply), "other-1");
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "x");
    dsh_reply_destroy (&reply);
    for (int index = 0; index < 16; index++) {
        reply = s_result (flood, 30000);
        assert_false (dsh_reply_is_error (reply));
        dsh_reply_destroy (&reply);
    }

    //  Never more than four at the gate at once; seventeen passed it
    char path [96];
    snprintf (path, sizeof path, "%s/starts", self->dir);
    FILE *file = fopen (path, "r");
    assert_non_null (file);
    int count, starts = 0, most = 0;
    char agent [64];
    while (fscanf (file, "%d %63s", &count, agent) == 2) {
        most = count > most? count: most;
        starts++;
    }
    fclose (file);
    assert_int_equal (starts, 17);
    assert_true (most <= 4);

    dsh_client_destroy (&flood);
    dsh_client_destroy (&other);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker);
    zstr_free (&config);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_flood, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
