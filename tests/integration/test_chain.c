/*  =========================================================================
    test_chain - the execution chain end to end: a real broker with its
    configured stages, built-in and external, in front of a real component

    Onion order with three stages; a veto skips later stages and the tool;
    a rewrite reaches the tool; a wrap changes the result; an external stage
    over tcp behaves as a built-in one; a stage killed mid-call fails that
    call and new ones with MIDDLEWARE_FAILED until it returns; a client
    away from its receive calls after a send keeps its broker; a fail-open
    stage that is missing is skipped; `dsh chain` counts what each did.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
    dsh_client_t *client;
} chain_t;

//  A broker with the given chain section and a dsh-demo behind it.
static chain_t *
s_chain_start (const char *chain_section)
{
    chain_t *self = (chain_t *) zmalloc (sizeof (chain_t));
    self->broker = dsh_testkit_broker_config (200, chain_section, self->endpoint, sizeof (self->endpoint));
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

//  Calls name with args and returns the reply (never NULL).
static dsh_reply_t *
s_call (chain_t *chain, const char *name, const char *args)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (chain->client, name, args, NULL, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s: %s", name, error);
    return reply;
}

//  The counters `dsh chain` shows for a stage, by name.
static void
s_stage_counts (chain_t *chain, const char *name, json_int_t *passed, json_int_t *answered, json_int_t *failed)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (chain->client, DSH_CHAIN, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    json_t *stages = json_object_get (body, "stages");
    bool found = false;
    for (size_t index = 0; index < json_array_size (stages); index++) {
        json_t *stage = json_array_get (stages, index);
        if (streq (json_string_value (json_object_get (stage, "name")), name)) {
            *passed = json_integer_value (json_object_get (stage, "passed"));
            *answered = json_integer_value (json_object_get (stage, "answered"));
            *failed = json_integer_value (json_object_get (stage, "failed"));
            found = true;
        }
    }
    assert_true (found);
    json_decref (body);
    dsh_reply_destroy (&reply);
}

static const char *s_three_traces =
    "chain\n"
    "    stage\n"
    "        name = \"first\"\n"
    "        kind = \"trace\"\n"
    "    stage\n"
    "        name = \"second\"\n"
    "        kind = \"trace\"\n"
    "    stage\n"
    "        name = \"third\"\n"
    "        kind = \"trace\"\n";

static void
test_onion_order (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (s_three_traces);
    //  Each stage rewrites the message on the way down (the tool sees the
    //  rewrite) and wraps the result on the way up
    dsh_reply_t *reply = s_call (chain, "echo", "{\"message\":\"m\"}");
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply),
        "m first:before second:before third:before third:after second:after first:after");
    dsh_reply_destroy (&reply);

    //  Many calls at once through every stage, each answered once
    for (int index = 0; index < 50; index++) {
        char args [64];
        snprintf (args, sizeof (args), "{\"message\":\"n%d\"}", index);
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "burst-%d", index);
        assert_non_null (dsh_testkit_send_json (chain->client, call_id, "echo", args, 10000));
    }
    zhashx_t *seen = zhashx_new ();
    for (int index = 0; index < 50; index++) {
        reply = dsh_client_recv (chain->client, 10000);
        assert_non_null (reply);
        assert_false (dsh_reply_is_error (reply));
        assert_null (zhashx_lookup (seen, dsh_reply_call_id (reply)));
        zhashx_insert (seen, dsh_reply_call_id (reply), (void *) 1);
        const char *number = dsh_reply_call_id (reply) + strlen ("burst-");
        char expected [128];
        snprintf (expected, sizeof (expected), "n%s first:before second:before third:before "
                  "third:after second:after first:after", number);
        assert_string_equal (dsh_reply_text (reply), expected);
        dsh_reply_destroy (&reply);
    }
    zhashx_destroy (&seen);
    assert_null (dsh_client_recv (chain->client, 300));

    //  An unknown tool still runs the waterfall first, then comes back
    //  UNKNOWN_TOOL through every stage
    reply = s_call (chain, "nope", "{}");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_UNKNOWN_TOOL);
    assert_string_equal (dsh_reply_text (reply),
        "Error: unknown tool \"nope\" third:after second:after first:after");
    dsh_reply_destroy (&reply);

    json_int_t passed, answered, failed;
    s_stage_counts (chain, "third", &passed, &answered, &failed);
    assert_int_equal (passed, 52);
    assert_int_equal (answered, 0);
    assert_int_equal (failed, 0);
    s_chain_stop (&chain);
}

static void
test_veto_skips_the_rest (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (
        "chain\n"
        "    stage\n"
        "        name = \"first\"\n"
        "        kind = \"trace\"\n"
        "    stage\n"
        "        name = \"second\"\n"
        "        kind = \"trace\"\n"
        "        veto = \"echo\"\n"
        "    stage\n"
        "        name = \"third\"\n"
        "        kind = \"trace\"\n");
    dsh_reply_t *reply = s_call (chain, "echo", "{\"message\":\"m\"}");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    //  The veto went up through the first stage only: no third stage, no tool
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"echo\" vetoed by second first:after");
    dsh_reply_destroy (&reply);
    json_int_t passed, answered, failed;
    s_stage_counts (chain, "second", &passed, &answered, &failed);
    assert_int_equal (passed, 0);
    assert_int_equal (answered, 1);
    s_stage_counts (chain, "third", &passed, &answered, &failed);
    assert_int_equal (passed, 0);
    assert_int_equal (answered, 0);

    //  Another tool passes every stage
    reply = s_call (chain, "sleep_ms", "{\"ms\": 1}");
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    s_stage_counts (chain, "third", &passed, &answered, &failed);
    assert_int_equal (passed, 1);
    s_chain_stop (&chain);
}

static dsh_testproc_t *
s_external_stage (chain_t *chain, const char *name)
{
    const char *argv [] = { "components/middleware/dsh-stage", "--broker", chain->endpoint,
                            "--name", name, "--kind", "trace", NULL };
    dsh_testproc_t *stage = dsh_testproc_start (argv);
    assert_non_null (stage);
    char *line = dsh_testproc_wait_line (stage, "attached", 10000);
    assert_non_null (line);
    free (line);
    return stage;
}

static void
test_external_stage (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (
        "chain\n"
        "    stage\n"
        "        name = \"first\"\n"
        "        kind = \"trace\"\n"
        "    stage\n"
        "        name = \"remote\"\n"
        "        kind = \"external\"\n"
        "        timeout_ms = 3000\n"
        "    stage\n"
        "        name = \"third\"\n"
        "        kind = \"trace\"\n");

    //  Not attached yet: fail closed, at once
    dsh_reply_t *reply = s_call (chain, "echo", "{\"message\":\"m\"}");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_MIDDLEWARE_FAILED);
    assert_string_equal (dsh_reply_text (reply), "Error: stage \"remote\" is not connected first:after");
    dsh_reply_destroy (&reply);

    //  Attached over tcp, it behaves as a built-in stage
    dsh_testproc_t *stage = s_external_stage (chain, "remote");
    int64_t give_up = zclock_mono () + 5000;
    char *text = NULL;
    while (zclock_mono () < give_up) {
        reply = s_call (chain, "echo", "{\"message\":\"m\"}");
        zstr_free (&text);
        text = strdup (dsh_reply_text (reply));
        dsh_reply_destroy (&reply);
        if (!strstr (text, "not connected"))
            break;
        zclock_sleep (50);
    }
    assert_string_equal (text, "m first:before remote:before third:before third:after remote:after first:after");
    zstr_free (&text);

    //  A control command goes to the process and its answer comes back,
    //  twice (the broker once freed the request before answering it)
    for (int round = 0; round < 2; round++) {
        char control_error [256];
        reply = dsh_client_control (chain->client, "remote", "no-such-command", NULL, 5000,
                                    control_error, sizeof (control_error));
        assert_non_null (reply);
        assert_string_equal (dsh_reply_command (reply), DSH_CONTROL);
        dsh_reply_destroy (&reply);
    }

    //  Killed while a call is below it: that call fails on its way back
    msgpack_sbuffer packed;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"ms\": 1500}", &packed, error, sizeof (error)), 0);
    assert_non_null (dsh_client_call_send (chain->client, "in-flight", "sleep_ms", packed.data, packed.size,
                                           NULL, NULL, 0, 10000));
    msgpack_sbuffer_destroy (&packed);
    zclock_sleep (500);
    dsh_testproc_signal (stage, SIGKILL);
    dsh_testproc_wait (stage, 5000);
    reply = dsh_client_recv (chain->client, 10000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "in-flight");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_MIDDLEWARE_FAILED);
    assert_non_null (strstr (dsh_reply_text (reply), "stage \"remote\""));
    dsh_reply_destroy (&reply);
    assert_null (dsh_client_recv (chain->client, 300));

    //  ... and new calls fail until it returns
    reply = s_call (chain, "echo", "{\"message\":\"m\"}");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_MIDDLEWARE_FAILED);
    dsh_reply_destroy (&reply);
    dsh_testproc_destroy (&stage);
    stage = s_external_stage (chain, "remote");
    give_up = zclock_mono () + 5000;
    bool back = false;
    while (!back && zclock_mono () < give_up) {
        reply = s_call (chain, "echo", "{\"message\":\"again\"}");
        back = !dsh_reply_is_error (reply);
        dsh_reply_destroy (&reply);
        if (!back)
            zclock_sleep (50);
    }
    assert_true (back);
    dsh_testproc_destroy (&stage);
    s_chain_stop (&chain);
}

//  A program away from its receive calls for longer than the broker's
//  liveness window (the 200 ms heartbeat's 600 ms) after a send, whose
//  last receive had nothing open, gets its answer: no PING could go
//  meanwhile, so the silence says nothing about the broker
static void
test_away_after_send (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (s_three_traces);
    dsh_reply_t *reply = s_call (chain, "echo", "{\"message\":\"m\"}");
    dsh_reply_destroy (&reply);
    assert_null (dsh_client_recv (chain->client, 100));
    assert_non_null (dsh_testkit_send_json (chain->client, "away", "sleep_ms", "{\"ms\": 1000}", 10000));
    zclock_sleep (700);
    reply = dsh_client_recv (chain->client, 10000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "away");
    if (dsh_reply_is_error (reply))
        fail_msg ("%s: %s", dsh_reply_error_code (reply), dsh_reply_text (reply));
    dsh_reply_destroy (&reply);
    s_chain_stop (&chain);
}

static void
test_fail_open_stage_is_skipped (void **state)
{
    (void) state;
    chain_t *chain = s_chain_start (
        "chain\n"
        "    stage\n"
        "        name = \"audit\"\n"
        "        kind = \"external\"\n"
        "        fail_open = true\n"
        "    stage\n"
        "        name = \"last\"\n"
        "        kind = \"trace\"\n");
    dsh_reply_t *reply = s_call (chain, "echo", "{\"message\":\"m\"}");
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "m last:before last:after");
    dsh_reply_destroy (&reply);
    json_int_t passed, answered, failed;
    s_stage_counts (chain, "audit", &passed, &answered, &failed);
    assert_int_equal (failed, 1);
    s_chain_stop (&chain);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_onion_order),
        cmocka_unit_test (test_veto_skips_the_rest),
        cmocka_unit_test (test_external_stage),
        cmocka_unit_test (test_away_after_send),
        cmocka_unit_test (test_fail_open_stage_is_skipped),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
