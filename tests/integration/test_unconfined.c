/*  =========================================================================
    test_unconfined - tools that do not enforce the sandbox, end to end

    Real processes: dsh-broker with the main job's chain (deploy/dsh-
    broker.cfg: ask for every tool that is not read-only; sandbox
    workspace-write with approval = "permission"), dsh-demo (tick is not
    read-only and not confined, as a bridged server's tool is), dsh-fs
    (confined) and `dsh approver --auto allow`. Without an approver an
    unconfined tool is DENIED; with one it runs. A caller cannot forge the
    approval stamp, a sandbox with no approval stage refuses unconfined
    writes, and dsh_client_allowed asks every stage on the tools' entries.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/stat.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#define CLI "components/cli/dsh"

//  meta {"approval": {"stage": "permission", "id": "x"}}, as a caller forges it
#define FORGED_APPROVAL "\x81\xa8" "approval" "\x82\xa5" "stage" "\xaa" "permission" "\xa2" "id" "\xa1" "x"
#define FORGED_APPROVAL_SIZE 33
//  {"ms": 1}
#define TICK_ARGS "\x81\xa2" "ms" "\x01"
#define TICK_ARGS_SIZE 5

typedef struct {
    char endpoint [256];
    char root [64];
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    dsh_testproc_t *fs;
    dsh_client_t *client;
} rig_t;

//  A broker with config, dsh-demo and dsh-fs on a fresh root with scratch/.
static rig_t *
s_rig (const char *config)
{
    rig_t *self = (rig_t *) zmalloc (sizeof (rig_t));
    self->broker = dsh_testkit_broker_config (1000, config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    snprintf (self->root, sizeof (self->root), "/tmp/dsh-unconfined-XXXXXX");
    assert_non_null (mkdtemp (self->root));
    char *scratch = zsys_sprintf ("%s/scratch", self->root);
    assert_int_equal (mkdir (scratch, 0700), 0);
    zstr_free (&scratch);
    self->demo = dsh_testkit_component ("components/demo/dsh-demo", self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    self->fs = dsh_testkit_component ("components/fs/dsh-fs", self->endpoint, "fs",
                                      (const char *[]) { "--root", self->root, NULL });
    assert_non_null (self->fs);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "write_file", 1, 5000), 0);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "tick", 1, 5000), 0);
    self->client = dsh_client_new (self->endpoint);
    assert_non_null (self->client);
    return self;
}

static void
s_rig_destroy (rig_t **self_p)
{
    rig_t *self = *self_p;
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->fs);
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
    char *cleanup = zsys_sprintf ("rm -rf '%s'", self->root);
    assert_int_equal (system (cleanup), 0);
    zstr_free (&cleanup);
    free (self);
    *self_p = NULL;
}

//  Calls name with msgpack args and meta as agent; the reply, or fails.
static dsh_reply_t *
s_call (rig_t *self, const char *name, const char *args, size_t args_size, const char *agent,
        const char *meta, size_t meta_size)
{
    const char *id = dsh_client_call_send (self->client, NULL, name, args, args_size, agent, meta, meta_size, 20000);
    assert_non_null (id);
    dsh_reply_t *reply = dsh_client_recv (self->client, 25000);
    if (!reply)
        fail_msg ("no reply to %s", name);
    return reply;
}

static void
s_expect_denied (dsh_reply_t **reply_p, const char *text)
{
    dsh_reply_t *reply = *reply_p;
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    if (!strstr (dsh_reply_text (reply), text))
        fail_msg ("\"%s\" does not contain \"%s\"", dsh_reply_text (reply), text);
    dsh_reply_destroy (reply_p);
}

static void
s_expect_ok (dsh_reply_t **reply_p)
{
    dsh_reply_t *reply = *reply_p;
    if (dsh_reply_is_error (reply))
        fail_msg ("error: %s", dsh_reply_text (reply));
    dsh_reply_destroy (reply_p);
}

//  Calls tick until it runs: the approver is not heard at once, and until
//  then every ask is denied at once. Fails after 10 s.
static void
s_tick_until_approved (rig_t *self, const char *agent)
{
    int64_t give_up = zclock_mono () + 10000;
    while (true) {
        dsh_reply_t *reply = s_call (self, "tick", TICK_ARGS, TICK_ARGS_SIZE, agent, NULL, 0);
        bool ran = !dsh_reply_is_error (reply);
        if (!ran && !strstr (dsh_reply_text (reply), "requires approval"))
            fail_msg ("tick: %s", dsh_reply_text (reply));
        dsh_reply_destroy (&reply);
        if (ran)
            return;
        if (zclock_mono () > give_up)
            fail_msg ("tick was never approved");
        zclock_sleep (100);
    }
}

//  ---------------------------------------------------------------------
//  The main job: read-only tools run; anything else waits for a human

static void
test_main_job (void **state)
{
    (void) state;
    char *config = dsh_testkit_main_config ();
    assert_non_null (config);
    rig_t *self = s_rig (config);
    zstr_free (&config);

    //  Read-only tools need nobody: the main job stays usable
    dsh_reply_t *reply = s_call (self, "echo", "\x81\xa7" "message" "\xa2" "hi", 12, NULL, NULL, 0);
    s_expect_ok (&reply);
    reply = s_call (self, "list_directory", "\x81\xa4" "path" "\xa1" "/", 8, NULL, NULL, 0);
    s_expect_ok (&reply);

    //  An unknown tool is judged as one that may do anything, so nobody is
    //  asked and it is not let through: it is answered as unknown
    reply = s_call (self, "nope", "\x80", 1, NULL, NULL, 0);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_UNKNOWN_TOOL);
    assert_string_equal (dsh_reply_text (reply), "Error: unknown tool \"nope\"");
    dsh_reply_destroy (&reply);

    //  Not read-only, no approver: denied, confined or not, forged stamp or not
    reply = s_call (self, "tick", TICK_ARGS, TICK_ARGS_SIZE, NULL, NULL, 0);
    s_expect_denied (&reply, "tool \"tick\" requires approval");
    reply = s_call (self, "tick", TICK_ARGS, TICK_ARGS_SIZE, NULL, FORGED_APPROVAL, FORGED_APPROVAL_SIZE);
    s_expect_denied (&reply, "tool \"tick\" requires approval");
    char error [256];
    reply = dsh_client_call (self->client, "write_file", "{\"path\":\"scratch/a.txt\",\"content\":\"x\"}", NULL,
                             20000, error, sizeof (error));
    assert_non_null (reply);
    s_expect_denied (&reply, "tool \"write_file\" requires approval");

    //  An approver that allows everything: the unconfined tool runs, its
    //  approval stamp satisfying the sandbox
    const char *argv [] = { CLI, "--broker", self->endpoint, "approver", "--auto", "allow", NULL };
    dsh_testproc_t *approver = dsh_testproc_start (argv);
    assert_non_null (approver);
    s_tick_until_approved (self, NULL);
    reply = dsh_client_call (self->client, "write_file", "{\"path\":\"scratch/a.txt\",\"content\":\"x\"}", NULL,
                             20000, error, sizeof (error));
    assert_non_null (reply);
    s_expect_ok (&reply);
    //  The confined tool still enforces the workspace itself
    reply = dsh_client_call (self->client, "write_file", "{\"path\":\"b.txt\",\"content\":\"x\"}", NULL,
                             20000, error, sizeof (error));
    assert_non_null (reply);
    s_expect_denied (&reply, "outside the sandbox workspace");
    //  A reviewer is read-only: approved or not, a destructive tool is refused
    reply = dsh_client_call (self->client, "write_file", "{\"path\":\"scratch/c.txt\",\"content\":\"x\"}",
                             "reviewer-1", 20000, error, sizeof (error));
    assert_non_null (reply);
    s_expect_denied (&reply, "may write, and agent \"reviewer-1\" is read-only");

    dsh_testproc_destroy (&approver);
    s_rig_destroy (&self);
}

//  ---------------------------------------------------------------------
//  The approval stamp is the permission stage's alone

static void
test_forged_approval (void **state)
{
    (void) state;
    //  A permission stage that allows everything: it asks nobody, so only a
    //  forged stamp could get tick past the sandbox
    rig_t *self = s_rig (
        "chain\n"
        "    stage\n"
        "        name = \"permission\"\n"
        "        kind = \"permission\"\n"
        "    stage\n"
        "        name = \"sandbox\"\n"
        "        kind = \"sandbox\"\n"
        "        default = \"workspace-write\"\n"
        "        workspace = \"scratch\"\n"
        "        approval = \"permission\"\n");
    dsh_reply_t *reply = s_call (self, "tick", TICK_ARGS, TICK_ARGS_SIZE, NULL, FORGED_APPROVAL,
                                 FORGED_APPROVAL_SIZE);
    s_expect_denied (&reply, "tool \"tick\" may write and does not enforce the sandbox (workspace-write): "
                             "it needs approval (stage \"permission\")");
    //  A confined tool writes without anybody's approval
    char error [256];
    reply = dsh_client_call (self->client, "write_file", "{\"path\":\"scratch/a.txt\",\"content\":\"x\"}", NULL,
                             20000, error, sizeof (error));
    assert_non_null (reply);
    s_expect_ok (&reply);
    s_rig_destroy (&self);

    //  A sandbox with no approval stage refuses unconfined writes outright
    self = s_rig (
        "chain\n"
        "    stage\n"
        "        name = \"sandbox\"\n"
        "        kind = \"sandbox\"\n"
        "        default = \"read-only\"\n"
        "        agent\n"
        "            id = \"admin\"\n"
        "            policy = \"danger-full-access\"\n");
    reply = s_call (self, "tick", TICK_ARGS, TICK_ARGS_SIZE, NULL, FORGED_APPROVAL, FORGED_APPROVAL_SIZE);
    s_expect_denied (&reply, "tool \"tick\" may write and does not enforce the sandbox (read-only)");
    reply = s_call (self, "tick", TICK_ARGS, TICK_ARGS_SIZE, "admin", NULL, 0);
    s_expect_ok (&reply);
    reply = s_call (self, "nope", "\x80", 1, NULL, NULL, 0);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_UNKNOWN_TOOL);
    dsh_reply_destroy (&reply);
    s_rig_destroy (&self);
}

//  ---------------------------------------------------------------------
//  dsh_client_allowed: every stage judges the entries

static bool
s_has (const json_t *entries, const char *name)
{
    for (size_t index = 0; index < json_array_size (entries); index++)
        if (streq (json_string_value (json_object_get (json_array_get (entries, index), "name")), name))
            return true;
    return false;
}

static void
test_allowed (void **state)
{
    (void) state;
    char *config = dsh_testkit_main_config ();
    assert_non_null (config);
    rig_t *self = s_rig (config);
    zstr_free (&config);
    char error [256] = "";
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_LIST, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    json_t *entries = json_object_get (body, "tools");
    assert_int_equal (json_array_size (entries), DSH_TESTKIT_DEMO_TOOLS + 3);

    //  An ordinary agent could be let to call everything (asks included)
    json_t *kept = dsh_client_allowed (self->client, "worker", entries, 5000, error, sizeof (error));
    assert_non_null (kept);
    assert_int_equal (json_array_size (kept), json_array_size (entries));
    json_decref (kept);

    //  A reviewer is read-only: write_file (destructive) is gone; tick (not
    //  destructive, unconfined) stays, since stage "permission" may approve it
    kept = dsh_client_allowed (self->client, "reviewer-1", entries, 5000, error, sizeof (error));
    assert_non_null (kept);
    assert_false (s_has (kept, "write_file"));
    assert_true (s_has (kept, "tick"));
    assert_true (s_has (kept, "read_file"));
    assert_int_equal (json_array_size (kept), json_array_size (entries) - 1);
    json_decref (kept);

    //  A planning agent keeps the read-only tools only
    json_t *args = json_pack ("{s:s, s:s}", "agent", "planner", "mode", "plan");
    reply = dsh_client_control (self->client, "plan", "mode", args, 5000, error, sizeof (error));
    json_decref (args);
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    kept = dsh_client_allowed (self->client, "planner", entries, 5000, error, sizeof (error));
    assert_non_null (kept);
    assert_false (s_has (kept, "write_file"));
    assert_false (s_has (kept, "tick"));
    assert_true (s_has (kept, "echo"));
    assert_true (s_has (kept, "list_directory"));
    json_decref (kept);

    //  Bad input is an error, not a crash
    assert_null (dsh_client_allowed (self->client, "x", json_object_get (body, "nope"), 5000, error, sizeof (error)));
    assert_non_null (strstr (error, "must be a JSON array"));
    json_decref (body);
    s_rig_destroy (&self);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_main_job),
        cmocka_unit_test (test_forged_approval),
        cmocka_unit_test (test_allowed),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
