/*  =========================================================================
    test_middleware - the original's middlewares as real stages of a real
    broker: every decision and its exact message

    permission: deny beats ask beats allow; ask with no approver is denied;
    an approver allows once or rejects; while one call waits for approval a
    hundred others complete. plan mode: per agent, switched at run time, or
    per call from meta; only read-only tools pass. hooks: Claude Code
    compatible command hooks (exit codes, stdout JSON, timeouts, merges).
    sandbox: the policy stamped into the call, writes refused under
    read-only, and dsh-fs enforcing the stamp.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/stat.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
    dsh_client_t *client;
} chain_t;

static chain_t *
s_chain_start (const char *config)
{
    chain_t *self = (chain_t *) zmalloc (sizeof (chain_t));
    self->broker = dsh_testkit_broker_config (200, config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    self->client = dsh_client_new (self->endpoint);
    return self;
}

static void
s_chain_stop (chain_t **self_p)
{
    chain_t *self = *self_p;
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
    free (self);
    *self_p = NULL;
}

static dsh_reply_t *
s_call_as (chain_t *chain, const char *name, const char *args, const char *agent)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (chain->client, name, args, agent, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s: %s", name, error);
    return reply;
}

static void
s_expect (dsh_reply_t **reply_p, const char *code, const char *text)
{
    dsh_reply_t *reply = *reply_p;
    if (code) {
        assert_true (dsh_reply_is_error (reply));
        assert_string_equal (dsh_reply_error_code (reply), code);
    }
    else
        assert_false (dsh_reply_is_error (reply));
    if (text)
        assert_string_equal (dsh_reply_text (reply), text);
    dsh_reply_destroy (reply_p);
}

//  ---------------------------------------------------------------------
//  permission

static const char *s_permission =
    "chain\n"
    "    stage\n"
    "        name = \"permission\"\n"
    "        kind = \"permission\"\n"
    "        timeout_ms = 20000\n"
    "        approval_timeout_ms = 10000\n"
    "        rule\n"
    "            tool = \"fail\"\n"
    "            action = \"deny\"\n"
    "        rule\n"
    "            tool = \"sample_*\"\n"
    "            action = \"ask\"\n"
    "        rule\n"
    "            tool = \"sample_content\"\n"
    "            agent = \"trusted\"\n"
    "            action = \"allow\"\n"
    "        rule\n"
    "            tool = \"echo\"\n"
    "            agent = \"intruder-*\"\n"
    "            action = \"deny\"\n";

//  A raw approver on the stage's approvals socket, found through the broker.
static zsock_t *
s_approver (chain_t *chain)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_control (chain->client, "permission", "approvals", NULL, 5000,
                                             error, sizeof (error));
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    json_t *body = dsh_reply_json (reply);
    const char *endpoint = json_string_value (json_object_get (json_object_get (body, "data"), "endpoint"));
    assert_non_null (endpoint);
    zsock_t *approver = zsock_new_dealer (endpoint);
    json_decref (body);
    dsh_reply_destroy (&reply);
    return approver;
}

static void
s_approver_send (zsock_t *approver, const char *command, const char *json)
{
    msgpack_sbuffer body;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (json, &body, error, sizeof (error)), 0);
    zmsg_t *msg = dsh_proto_message (NULL, command);
    zmsg_addmem (msg, body.data, body.size);
    msgpack_sbuffer_destroy (&body);
    zmsg_send (&msg, approver);
}

//  The next message of command on the approver's socket, as JSON.
static json_t *
s_approver_expect (zsock_t *approver, const char *command)
{
    zpoller_t *poller = zpoller_new (approver, NULL);
    json_t *body = NULL;
    while (!body && zpoller_wait (poller, 5000) == approver) {
        zmsg_t *msg = zmsg_recv (approver);
        zmsg_t *envelope = NULL;
        char verb [32], error [256];
        if (dsh_proto_split (msg, &envelope, verb, sizeof (verb), error, sizeof (error)) == 0
        &&  streq (verb, command)) {
            zframe_t *frame = zmsg_first (msg);
            dsh_doc_t *doc = dsh_proto_decode_body (frame, error, sizeof (error));
            body = dsh_json_from_msgpack (dsh_doc_root (doc));
            dsh_doc_destroy (&doc);
        }
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    assert_non_null (body);
    return body;
}

static void
test_permission_rules (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (s_permission);
    dsh_reply_t *reply = s_call_as (chain, "fail", "{}", NULL);
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"fail\" is denied by policy");
    reply = s_call_as (chain, "echo", "{\"message\":\"hi\"}", NULL);
    s_expect (&reply, NULL, "hi");
    reply = s_call_as (chain, "echo", "{\"message\":\"hi\"}", "intruder-3");
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"echo\" is denied by policy");
    //  ask and allow both match: ask wins; no approver is connected
    reply = s_call_as (chain, "sample_content", "{}", "trusted");
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"sample_content\" requires approval");
    reply = s_call_as (chain, "sample_content", "{}", NULL);
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"sample_content\" requires approval");
    s_chain_stop (&chain);
}

static void
test_permission_approvals (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (s_permission);
    zsock_t *approver = s_approver (chain);
    s_approver_send (approver, "APPROVER", "{}");
    zclock_sleep (300);

    //  One call waits for a human ...
    assert_non_null (dsh_client_call_send (chain->client, "needs-approval", "sample_content", NULL, 0,
                                           "worker-1", NULL, 0, 30000));
    json_t *pending = s_approver_expect (approver, "PENDING");
    assert_string_equal (json_string_value (json_object_get (pending, "tool")), "sample_content");
    assert_string_equal (json_string_value (json_object_get (pending, "callId")), "needs-approval");
    assert_string_equal (json_string_value (json_object_get (pending, "agent")), "worker-1");
    char *id = strdup (json_string_value (json_object_get (pending, "id")));
    json_decref (pending);

    //  ... while a hundred others complete
    for (int index = 0; index < 100; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "quick-%d", index);
        assert_non_null (dsh_client_call_send (chain->client, call_id, "echo", "\x81\xa7message\xa1x", 11,
                                               NULL, NULL, 0, 10000));
    }
    for (int index = 0; index < 100; index++) {
        dsh_reply_t *reply = dsh_client_recv (chain->client, 10000);
        assert_non_null (reply);
        assert_memory_equal (dsh_reply_call_id (reply), "quick-", 6);
        s_expect (&reply, NULL, "x");
    }
    s_approver_send (approver, "APPROVER", "{}");

    //  Allowed once: the held call goes on to the tool
    char decide [128];
    snprintf (decide, sizeof (decide), "{\"id\":\"%s\",\"outcome\":\"allow\"}", id);
    s_approver_send (approver, "DECIDE", decide);
    dsh_reply_t *reply = dsh_client_recv (chain->client, 10000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "needs-approval");
    s_expect (&reply, NULL, "sample text");
    json_t *resolved = s_approver_expect (approver, "RESOLVED");
    assert_string_equal (json_string_value (json_object_get (resolved, "outcome")), "allowed");
    json_decref (resolved);
    zstr_free (&id);

    //  Rejected from a terminal (dsh deny ID goes through the broker)
    assert_non_null (dsh_client_call_send (chain->client, "second", "sample_content", NULL, 0,
                                           NULL, NULL, 0, 30000));
    pending = s_approver_expect (approver, "PENDING");
    id = strdup (json_string_value (json_object_get (pending, "id")));
    json_decref (pending);
    char error [256];
    json_t *args = json_pack ("{s:s}", "id", id);
    reply = dsh_client_control (chain->client, "permission", "deny", args, 5000, error, sizeof (error));
    json_decref (args);
    assert_non_null (reply);
    //  The held call's result may arrive before the control reply
    dsh_reply_t *first = reply;
    if (streq (dsh_reply_command (first), DSH_CONTROL)) {
        assert_false (dsh_reply_is_error (first));
        dsh_reply_destroy (&first);
        reply = dsh_client_recv (chain->client, 5000);
    }
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "second");
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"sample_content\" was rejected by the approver");
    zstr_free (&id);

    //  Cancelled by its caller while it waits: one CANCELLED for the caller,
    //  and the approvers hear the request is closed
    s_approver_send (approver, "APPROVER", "{}");
    assert_non_null (dsh_client_call_send (chain->client, "changed-my-mind", "sample_content", NULL, 0,
                                           NULL, NULL, 0, 30000));
    pending = s_approver_expect (approver, "PENDING");
    json_decref (pending);
    assert_int_equal (dsh_client_cancel (chain->client, "changed-my-mind"), 0);
    reply = dsh_client_recv (chain->client, 5000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "changed-my-mind");
    s_expect (&reply, DSH_E_CANCELLED, NULL);
    resolved = s_approver_expect (approver, "RESOLVED");
    assert_string_equal (json_string_value (json_object_get (resolved, "outcome")), "cancelled");
    json_decref (resolved);
    assert_null (dsh_client_recv (chain->client, 500));
    zsock_destroy (&approver);
    s_chain_stop (&chain);
}

//  ---------------------------------------------------------------------
//  plan mode

//  The refusal names the way out there is: the operator's command for an
//  agent in plan mode, the call's own meta for a call that asked for it
static const char *s_plan_refusal =
    "Error: tool \"tick\" is not available in plan mode; continue planning and present your plan "
    "when ready (plan mode ends when the operator runs `dsh mode planner normal`)";
static const char *s_plan_refusal_meta =
    "Error: tool \"tick\" is not available in plan mode; continue planning and present your plan "
    "when ready (this call asked for plan mode: its meta says \"mode\": \"plan\")";

static void
test_plan_mode (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (
        "chain\n"
        "    stage\n"
        "        name = \"plan\"\n"
        "        kind = \"plan\"\n"
        "        allow = \"fail\"\n");
    char error [256];
    json_t *args = json_pack ("{s:s, s:s}", "agent", "planner", "mode", "plan");
    dsh_reply_t *reply = dsh_client_control (chain->client, "plan", "mode", args, 5000, error, sizeof (error));
    json_decref (args);
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);

    //  tick is not read-only (echo is)
    reply = s_call_as (chain, "tick", "{\"ms\":1}", "planner");
    s_expect (&reply, DSH_E_DENIED, s_plan_refusal);
    reply = s_call_as (chain, "echo", "{\"message\":\"m\"}", "planner");
    s_expect (&reply, NULL, "m");
    //  Read-only tools pass, and so does the allow-list
    reply = s_call_as (chain, "sleep_ms", "{\"ms\":1}", "planner");
    s_expect (&reply, NULL, NULL);
    reply = s_call_as (chain, "fail", "{}", "planner");
    s_expect (&reply, DSH_E_TOOL_FAILED, "Error: requested failure");
    //  Another agent is not planning ...
    reply = s_call_as (chain, "echo", "{\"message\":\"m\"}", "builder");
    s_expect (&reply, NULL, "m");
    //  ... unless its call says so
    assert_non_null (dsh_client_call_send (chain->client, "planned", "tick", "\x81\xa2ms\x01", 5,
                                           "builder", "\x81\xa4mode\xa4plan", 11, 10000));
    reply = dsh_client_recv (chain->client, 5000);
    assert_non_null (reply);
    s_expect (&reply, DSH_E_DENIED, s_plan_refusal_meta);

    args = json_pack ("{s:s, s:s}", "agent", "planner", "mode", "normal");
    reply = dsh_client_control (chain->client, "plan", "mode", args, 5000, error, sizeof (error));
    json_decref (args);
    dsh_reply_destroy (&reply);
    reply = s_call_as (chain, "echo", "{\"message\":\"m\"}", "planner");
    s_expect (&reply, NULL, "m");

    //  A control command for a stage that is not there
    reply = dsh_client_control (chain->client, "nosuch", "mode", NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "no stage named \"nosuch\" in the chain");
    dsh_reply_destroy (&reply);
    s_chain_stop (&chain);
}

//  ---------------------------------------------------------------------
//  hooks

static char *
s_hook (const char *script)
{
    const char *source = getenv ("DSH_SOURCE_DIR");
    return zsys_sprintf ("%s/tests/integration/hooks/%s", source? source: ".", script);
}

static void
test_hooks (void **state)
{
    (void) state;
    char *deny_write = s_hook ("deny-write.sh");
    char *exit2 = s_hook ("block-exit2.sh");
    char *rewrite = s_hook ("rewrite-input.sh");
    char *slow = s_hook ("slow.sh");
    char *post = s_hook ("post-context.sh");
    char *config = zsys_sprintf (
        "chain\n"
        "    stage\n"
        "        name = \"hooks\"\n"
        "        kind = \"hooks\"\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"echo|write_file\"\n"
        "            command = \"%s\"\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"echo\"\n"
        "            command = \"%s\"\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"fail\"\n"
        "            command = \"%s\"\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"sleep_.*\"\n"
        "            command = \"%s\"\n"
        "            timeout_ms = 300\n"
        "        hook\n"
        "            event = \"PostToolUse\"\n"
        "            matcher = \"*\"\n"
        "            command = \"%s\"\n",
        deny_write, rewrite, exit2, slow, post);
    chain_t *chain = s_chain_start (config);

    //  Two PreToolUse hooks allow echo, one of them rewriting its input; the
    //  PostToolUse hook adds context to the result
    dsh_reply_t *reply = s_call_as (chain, "echo", "{\"message\":\"original\"}", NULL);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "rewritten by hook");
    json_t *body = dsh_reply_json (reply);
    json_t *content = json_object_get (body, "content");
    assert_int_equal (json_array_size (content), 2);
    assert_string_equal (json_string_value (json_object_get (json_array_get (content, 1), "text")),
                         "checked by post hook");
    json_decref (body);
    dsh_reply_destroy (&reply);

    //  Exit code 2 blocks, with stderr as the reason
    reply = s_call_as (chain, "fail", "{}", NULL);
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"fail\" was blocked by a PreToolUse hook: blocked by exit code");

    //  A hook that does not answer in time: killed, and the call fails closed
    int64_t started = zclock_mono ();
    reply = s_call_as (chain, "sleep_ms", "{\"ms\":1}", NULL);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_MIDDLEWARE_FAILED);
    char *expected = zsys_sprintf ("Error: hook \"%s\" timed out after 300 ms", slow);
    assert_string_equal (dsh_reply_text (reply), expected);
    zstr_free (&expected);
    dsh_reply_destroy (&reply);
    assert_true (zclock_mono () - started < 10000);

    //  A tool no PreToolUse hook matches still gets the PostToolUse one
    reply = s_call_as (chain, "sample_content", "{}", NULL);
    assert_false (dsh_reply_is_error (reply));
    body = dsh_reply_json (reply);
    assert_int_equal (json_array_size (json_object_get (body, "content")), 7);
    json_decref (body);
    dsh_reply_destroy (&reply);
    s_chain_stop (&chain);

    //  A deny from stdout JSON wins over another hook's allow
    zstr_free (&config);
    config = zsys_sprintf (
        "chain\n"
        "    stage\n"
        "        name = \"hooks\"\n"
        "        kind = \"hooks\"\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"*\"\n"
        "            command = \"%s\"\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"*\"\n"
        "            command = \"%s\"\n",
        rewrite, exit2);
    chain = s_chain_start (config);
    reply = s_call_as (chain, "echo", "{\"message\":\"m\"}", NULL);
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"echo\" was blocked by a PreToolUse hook: blocked by exit code");
    s_chain_stop (&chain);

    zstr_free (&config);
    zstr_free (&deny_write);
    zstr_free (&exit2);
    zstr_free (&rewrite);
    zstr_free (&slow);
    zstr_free (&post);
}

//  ---------------------------------------------------------------------
//  sandbox, enforced by the stage and by dsh-fs

static void
test_sandbox (void **state)
{
    (void) state;
    char root [] = "/tmp/dsh-sandbox-XXXXXX";
    assert_non_null (mkdtemp (root));
    char *workspace = zsys_sprintf ("%s/ws", root);
    assert_int_equal (mkdir (workspace, 0755), 0);
    char *config = zsys_sprintf (
        "chain\n"
        "    stage\n"
        "        name = \"sandbox\"\n"
        "        kind = \"sandbox\"\n"
        "        default = \"read-only\"\n"
        "        agent\n"
        "            id = \"builder-*\"\n"
        "            policy = \"workspace-write\"\n"
        "            workspace = \"%s\"\n"
        "        agent\n"
        "            id = \"admin\"\n"
        "            policy = \"danger-full-access\"\n",
        workspace);
    chain_t *chain = s_chain_start (config);
    dsh_testproc_t *fs = dsh_testkit_component ("components/fs/dsh-fs", chain->endpoint, "fs",
                                                (const char *[]) { "--root", root, NULL });
    assert_non_null (fs);
    assert_int_equal (dsh_testkit_wait_tools (chain->endpoint, "write_file", 1, 5000), 0);

    //  Read-only: the stage refuses a tool that writes; reads pass
    dsh_reply_t *reply = s_call_as (chain, "write_file", "{\"path\":\"a.txt\",\"content\":\"x\"}", NULL);
    s_expect (&reply, DSH_E_DENIED, "Error: tool \"write_file\" may write, and agent \"\" is read-only");
    reply = s_call_as (chain, "list_directory", "{\"path\":\"/\"}", NULL);
    s_expect (&reply, NULL, "[DIR] ws");

    //  Workspace-write: writes inside the workspace only, enforced by dsh-fs
    reply = s_call_as (chain, "write_file", "{\"path\":\"ws/a.txt\",\"content\":\"inside\"}", "builder-1");
    s_expect (&reply, NULL, NULL);
    reply = s_call_as (chain, "write_file", "{\"path\":\"b.txt\",\"content\":\"outside\"}", "builder-1");
    s_expect (&reply, DSH_E_DENIED, "Error: path \"b.txt\" is outside the sandbox workspace");
    reply = s_call_as (chain, "read_file", "{\"path\":\"ws/a.txt\"}", "builder-1");
    s_expect (&reply, NULL, "inside");

    //  Reads may go outside the workspace
    reply = s_call_as (chain, "list_directory", "{\"path\":\"/\"}", "builder-1");
    s_expect (&reply, NULL, NULL);

    //  A caller cannot grant itself a policy: the stage replaces the stamp
    assert_non_null (dsh_client_call_send (chain->client, "sneaky", "write_file",
                                           "\x82\xa4path\xa5" "b.txt" "\xa7" "content\xa1x", 22,
                                           "builder-2", "\x81\xa7sandbox\x81\xa6policy\xb2" "danger-full-access",
                                           36, 10000));
    reply = dsh_client_recv (chain->client, 5000);
    assert_non_null (reply);
    s_expect (&reply, DSH_E_DENIED, "Error: path \"b.txt\" is outside the sandbox workspace");

    //  Full access: only the component's own root applies
    reply = s_call_as (chain, "write_file", "{\"path\":\"b.txt\",\"content\":\"admin\"}", "admin");
    s_expect (&reply, NULL, NULL);
    reply = s_call_as (chain, "read_file", "{\"path\":\"../etc/passwd\"}", "admin");
    assert_true (dsh_reply_is_error (reply));
    assert_non_null (strstr (dsh_reply_text (reply), "escapes the root"));
    dsh_reply_destroy (&reply);

    dsh_testproc_destroy (&fs);
    s_chain_stop (&chain);
    char *cleanup = zsys_sprintf ("rm -rf '%s'", root);
    assert_int_equal (system (cleanup), 0);
    zstr_free (&cleanup);
    zstr_free (&config);
    zstr_free (&workspace);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_permission_rules),
        cmocka_unit_test (test_permission_approvals),
        cmocka_unit_test (test_plan_mode),
        cmocka_unit_test (test_hooks),
        cmocka_unit_test (test_sandbox),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
