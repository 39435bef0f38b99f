/*  =========================================================================
    test_chain_host - dsh_chain with a fake host and stages made for the
    test: veto, the onion, fail-open and fail-closed holds, a timeout on the
    way up, a cancel while deferred, a deferred call resumed from the
    stage's own handler, a stage that is not there, and a call whose name
    changed on its way down
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_chain.h"
#include "dsh_json.h"

//  ---------------------------------------------------------------------
//  Test stages

static int s_cancels;                   //  on_cancel calls, any stage
static dsh_call_t *s_parked;      //  the call a "park" stage holds
static dsh_stage_t *s_parked_stage;

static dsh_stage_verdict_t
s_veto_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) arg;
    dsh_stage_call_answer_error (call, DSH_E_DENIED, "vetoed by %s", dsh_stage_name (stage));
    return DSH_STAGE_ANSWER;
}

static dsh_stage_verdict_t
s_wrap_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    (void) arg;
    dsh_stage_call_watch_result (call);
    return DSH_STAGE_PASS;
}

//  Appends the stage's name as a text block: the onion shows in the order.
static void
s_wrap_result (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) arg;
    assert_non_null (dsh_map_get (dsh_stage_call_result (call), "content"));
    dsh_stage_call_add_result_text (call, dsh_stage_name (stage));
}

static dsh_stage_verdict_t
s_hold_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) call;
    (void) arg;
    if (streq (dsh_stage_name (stage), "park")) {
        s_parked = call;
        s_parked_stage = stage;
    }
    return DSH_STAGE_DEFER;
}

static void
s_hold_cancel (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) arg;
    s_cancels++;
    if (call == s_parked)
        s_parked = NULL;
    //  Resuming a cancelled call is allowed and sends nothing
    dsh_stage_resume (stage, call, DSH_STAGE_PASS);
}

static void
s_holdup_result (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) arg;
    s_parked = call;
    s_parked_stage = stage;
    dsh_stage_call_defer_result (call);
}

static int
s_setup (zconfig_t *settings, const dsh_stage_context_t *context, dsh_stage_callbacks_t *callbacks,
         void **arg, char *error, size_t error_size)
{
    (void) context;
    (void) arg;
    (void) error;
    (void) error_size;
    const char *kind = zconfig_get (settings, "kind", "");
    if (streq (kind, "veto"))
        callbacks->on_request = s_veto_request;
    else
    if (streq (kind, "wrap")) {
        callbacks->on_request = s_wrap_request;
        callbacks->on_result = s_wrap_result;
    }
    else
    if (streq (kind, "hold")) {
        callbacks->on_request = s_hold_request;
        callbacks->on_cancel = s_hold_cancel;
    }
    else {
        callbacks->on_request = s_wrap_request;
        callbacks->on_result = s_holdup_result;
    }
    return 0;
}

static const dsh_stage_kind_t s_kinds [] = {
    { "veto", s_setup, 1000 },
    { "wrap", s_setup, 1000 },
    { "hold", s_setup, 1000 },
    { "holdup", s_setup, 1000 },
    { NULL, NULL, 0 }
};

//  ---------------------------------------------------------------------
//  The fake host

typedef struct {
    int dispatched;
    dsh_record_t *record;       //  the last call dispatched
    zframe_t *body;             //  its body
    int answers;
    char text [256];            //  the last answer's text blocks, joined by '+'
    char code [32];             //  its error code, or ""
} s_host_t;

static s_host_t s_host;

static void
s_dispatch (void *arg, dsh_record_t *record, zframe_t **body_p)
{
    (void) arg;
    s_host.dispatched++;
    s_host.record = record;
    zframe_destroy (&s_host.body);
    s_host.body = *body_p;
    *body_p = NULL;
}

static void
s_control_reply (void *arg, zmsg_t **envelope_p, zframe_t **body_p)
{
    (void) arg;
    zmsg_destroy (envelope_p);
    zframe_destroy (body_p);
}

static int
s_reply (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    (void) arg;
    (void) route;
    (void) route_size;
    s_host.answers++;
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
    assert_non_null (doc);
    json_t *result = dsh_json_from_msgpack (dsh_doc_root (doc));
    s_host.text [0] = 0;
    json_t *block;
    size_t index;
    json_array_foreach (json_object_get (result, "content"), index, block) {
        size_t used = strlen (s_host.text);
        snprintf (s_host.text + used, sizeof (s_host.text) - used, "%s%s", index? "+": "",
                  json_string_value (json_object_get (block, "text")));
    }
    const char *code = json_string_value (json_object_get (json_object_get (result, "error"), "code"));
    snprintf (s_host.code, sizeof (s_host.code), "%s", code? code: "");
    json_decref (result);
    dsh_doc_destroy (&doc);
    zmq_msg_close (body);
    return 0;
}

typedef struct {
    zloop_t *loop;
    dsh_inflight_t *inflight;
    dsh_chain_t *chain;
} s_fixture_t;

//  A chain from ZPL stage sections ("name kind [timeout_ms] [fail_open]"
//  lines turned into sections by the caller).
static s_fixture_t *
s_fixture (const char *stages)
{
    memset (&s_host, 0, sizeof (s_host));
    s_cancels = 0;
    s_parked = NULL;
    s_fixture_t *fixture = (s_fixture_t *) zmalloc (sizeof (s_fixture_t));
    char *text = zsys_sprintf ("chain\n%s", stages);
    zconfig_t *config = zconfig_str_load (text);
    zstr_free (&text);
    assert_non_null (config);
    fixture->loop = zloop_new ();
    fixture->inflight = dsh_inflight_new (s_reply, NULL);
    dsh_chain_host_t host = { s_dispatch, s_control_reply, NULL, NULL };
    char error [256] = "";
    fixture->chain = dsh_chain_new (zconfig_locate (config, "chain"), s_kinds, "tcp://127.0.0.1:7570",
                                    fixture->inflight, &host, error, sizeof (error));
    if (!fixture->chain)
        fail_msg ("chain: %s", error);
    assert_int_equal (dsh_chain_start (fixture->chain, fixture->loop, error, sizeof (error)), 0);
    zconfig_destroy (&config);
    return fixture;
}

static void
s_fixture_destroy (s_fixture_t **fixture_p)
{
    s_fixture_t *fixture = *fixture_p;
    dsh_chain_destroy (&fixture->chain);
    zloop_destroy (&fixture->loop);
    dsh_inflight_destroy (&fixture->inflight);
    zframe_destroy (&s_host.body);
    free (fixture);
    *fixture_p = NULL;
}

//  Opens a record for a call to tool named, and runs it into the chain.
static dsh_record_t *
s_enter (s_fixture_t *fixture, const char *tool, const char *body_name, int64_t deadline_ms)
{
    zmq_msg_t route [1];
    zmq_msg_init_size (&route [0], 4);
    memcpy (zmq_msg_data (&route [0]), "peer", 4);
    dsh_record_t *record = dsh_inflight_open (fixture->inflight, route, 1, "call-1", tool, deadline_ms);
    zmq_msg_close (&route [0]);
    zframe_t *body = dsh_proto_encode_call ("call-1", body_name, NULL, 0, "agent-1", NULL, 0, 0);
    dsh_chain_enter (fixture->chain, record, &body, NULL);
    return record;
}

//  The tool answers the dispatched call with one text block.
static void
s_tool_answers (s_fixture_t *fixture, const char *text)
{
    assert_non_null (s_host.record);
    zframe_t *result = dsh_proto_error_result ("call-1", DSH_E_TOOL_FAILED, text);
    dsh_chain_result (fixture->chain, s_host.record, &result);
}

//  ---------------------------------------------------------------------
//  Tests

static void
test_veto_answers_without_dispatch (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"v\"\n        kind = \"veto\"\n"
                                      "    stage\n        name = \"w\"\n        kind = \"wrap\"\n");
    s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_int_equal (s_host.dispatched, 0);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_DENIED);
    assert_string_equal (s_host.text, "Error: vetoed by v");
    assert_int_equal (dsh_inflight_size (fixture->inflight), 0);
    s_fixture_destroy (&fixture);
}

static void
test_onion_order (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"first\"\n        kind = \"wrap\"\n"
                                      "    stage\n        name = \"second\"\n        kind = \"wrap\"\n");
    s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_int_equal (s_host.dispatched, 1);
    assert_int_equal (s_host.answers, 0);
    s_tool_answers (fixture, "tool");
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.text, "tool+second+first");
    s_fixture_destroy (&fixture);
}

static void
test_fail_open_hold_is_skipped (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"h\"\n        kind = \"hold\"\n"
                                      "        fail_open = \"true\"\n"
                                      "    stage\n        name = \"w\"\n        kind = \"wrap\"\n");
    dsh_record_t *record = s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_int_equal (s_host.dispatched, 0);
    bool down;
    assert_int_equal (dsh_inflight_where (record), DSH_AT_CHAIN);
    assert_int_equal (dsh_inflight_stage (record, &down), 0);
    assert_true (down);
    assert_true (dsh_inflight_due_ms (record) <= zclock_mono () + 1000);
    dsh_chain_expire (fixture->chain, record);
    //  Told to let go, and the call went on as if the stage were not there
    assert_int_equal (s_cancels, 1);
    assert_int_equal (s_host.dispatched, 1);
    s_tool_answers (fixture, "tool");
    assert_string_equal (s_host.text, "tool+w");
    s_fixture_destroy (&fixture);
}

static void
test_fail_closed_hold (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"w\"\n        kind = \"wrap\"\n"
                                      "    stage\n        name = \"h\"\n        kind = \"hold\"\n");
    dsh_record_t *record = s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_int_equal (dsh_inflight_stage (record, NULL), 1);
    dsh_chain_expire (fixture->chain, record);
    assert_int_equal (s_cancels, 1);
    assert_int_equal (s_host.dispatched, 0);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_MIDDLEWARE_FAILED);
    //  The failure still goes up through the stage passed before
    assert_string_equal (s_host.text, "Error: stage \"h\" did not answer within 1000 ms+w");
    s_fixture_destroy (&fixture);
}

static void
test_hold_never_outlives_deadline (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"h\"\n        kind = \"hold\"\n"
                                      "        timeout_ms = \"60000\"\n");
    int64_t deadline = zclock_mono () + 300;
    dsh_record_t *record = s_enter (fixture, "echo", "echo", deadline);
    assert_true (dsh_inflight_due_ms (record) == deadline);
    //  What the broker does at the deadline: release, then answer TIMEOUT
    dsh_chain_release (fixture->chain, record);
    assert_int_equal (s_cancels, 1);
    dsh_inflight_answer_error (fixture->inflight, &record, DSH_E_TIMEOUT, "Error: deadline");
    assert_int_equal (s_host.answers, 1);
    s_fixture_destroy (&fixture);
}

static void
test_timeout_on_the_way_up (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"w\"\n        kind = \"wrap\"\n"
                                      "    stage\n        name = \"u\"\n        kind = \"holdup\"\n");
    s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_int_equal (s_host.dispatched, 1);
    dsh_record_t *record = s_host.record;
    s_tool_answers (fixture, "tool");
    assert_int_equal (s_host.answers, 0);
    bool down;
    assert_int_equal (dsh_inflight_where (record), DSH_AT_CHAIN);
    assert_int_equal (dsh_inflight_stage (record, &down), 1);
    assert_false (down);
    dsh_chain_expire (fixture->chain, record);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_MIDDLEWARE_FAILED);
    assert_string_equal (s_host.text, "Error: stage \"u\" did not answer within 1000 ms+w");
    s_fixture_destroy (&fixture);
}

static void
test_deadline_while_result_held (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"u\"\n        kind = \"holdup\"\n");
    s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    dsh_record_t *record = s_host.record;
    s_tool_answers (fixture, "tool");
    assert_non_null (s_parked);
    //  The broker answers TIMEOUT while the stage holds the result (a post
    //  hook still running): the stage is told, and when it finishes later
    //  nothing more goes up
    dsh_chain_release (fixture->chain, record);
    dsh_inflight_answer_error (fixture->inflight, &record, DSH_E_TIMEOUT, "Error: deadline");
    assert_int_equal (s_host.answers, 1);
    assert_int_equal (dsh_stage_resume_result (s_parked_stage, s_parked), 0);
    dsh_chain_settle (fixture->chain);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_TIMEOUT);
    s_fixture_destroy (&fixture);
}

static void
test_cancel_while_deferred (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"w\"\n        kind = \"wrap\"\n"
                                      "    stage\n        name = \"h\"\n        kind = \"hold\"\n");
    dsh_record_t *record = s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    dsh_chain_release (fixture->chain, record);
    //  The holder lets go (and its resume after the cancel sends nothing);
    //  the stage that watched the result forgets it
    assert_int_equal (s_cancels, 1);
    dsh_chain_settle (fixture->chain);
    assert_int_equal (s_host.dispatched, 0);
    dsh_inflight_answer_error (fixture->inflight, &record, DSH_E_CANCELLED, "Error: the call was cancelled");
    dsh_chain_settle (fixture->chain);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_CANCELLED);
    s_fixture_destroy (&fixture);
}

static void
test_resumed_from_own_handler (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"park\"\n        kind = \"hold\"\n"
                                      "    stage\n        name = \"w\"\n        kind = \"wrap\"\n");
    s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_non_null (s_parked);
    //  As an approval arriving on the stage's own socket would: the chain
    //  does not act inside the stage, only when it has control back
    assert_int_equal (dsh_stage_resume (s_parked_stage, s_parked, DSH_STAGE_PASS), 0);
    assert_int_equal (s_host.dispatched, 0);
    dsh_chain_settle (fixture->chain);
    assert_int_equal (s_host.dispatched, 1);
    s_tool_answers (fixture, "tool");
    assert_string_equal (s_host.text, "tool+w");
    s_fixture_destroy (&fixture);
}

static void
test_external_stage_not_there (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"w\"\n        kind = \"wrap\"\n"
                                      "    stage\n        name = \"x\"\n        kind = \"external\"\n"
                                      "        feed = \"inproc://test-x-feed\"\n"
                                      "        drain = \"inproc://test-x-drain\"\n");
    s_enter (fixture, "echo", "echo", zclock_mono () + 5000);
    assert_int_equal (s_host.dispatched, 0);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_MIDDLEWARE_FAILED);
    assert_string_equal (s_host.text, "Error: stage \"x\" is not connected+w");
    s_fixture_destroy (&fixture);
}

static void
test_body_must_be_the_call_decided (void **state)
{
    (void) state;
    s_fixture_t *fixture = s_fixture ("    stage\n        name = \"w\"\n        kind = \"wrap\"\n");
    //  Decided as read_file, but the body leaving the chain names another
    s_enter (fixture, "read_file", "write_file", zclock_mono () + 5000);
    assert_int_equal (s_host.dispatched, 0);
    assert_int_equal (s_host.answers, 1);
    assert_string_equal (s_host.code, DSH_E_MIDDLEWARE_FAILED);
    assert_non_null (strstr (s_host.text, "a stage changed the call's tool name"));
    s_fixture_destroy (&fixture);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_veto_answers_without_dispatch),
        cmocka_unit_test (test_onion_order),
        cmocka_unit_test (test_fail_open_hold_is_skipped),
        cmocka_unit_test (test_fail_closed_hold),
        cmocka_unit_test (test_hold_never_outlives_deadline),
        cmocka_unit_test (test_timeout_on_the_way_up),
        cmocka_unit_test (test_cancel_while_deferred),
        cmocka_unit_test (test_deadline_while_result_held),
        cmocka_unit_test (test_resumed_from_own_handler),
        cmocka_unit_test (test_external_stage_not_there),
        cmocka_unit_test (test_body_must_be_the_call_decided),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
