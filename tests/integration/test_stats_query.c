/*  =========================================================================
    test_stats_query - STATS end to end: a real broker and dsh-demo, calls with
    every kind of outcome from two agents and none, and the counters read
    back over a DEALER on FRONT: outcomes per tool, the histogram, in
    flight (during a call and after), refusals, events, the component's
    served count, agents; a chain stage's veto counted as its answer; and
    a broker with --no-stats that counts nothing
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
    dsh_client_t *client;
    zsock_t *dealer;            //  a raw FRONT connection
    int queries;
} fixture_t;

static fixture_t *
s_start (const char *config, const char *const *flags)
{
    fixture_t *self = (fixture_t *) zmalloc (sizeof (fixture_t));
    self->broker = config? dsh_testkit_broker_config (200, config, self->endpoint, sizeof (self->endpoint))
                         : dsh_testkit_broker (200, flags, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    self->client = dsh_client_new (self->endpoint);
    self->dealer = zsock_new_dealer (self->endpoint);
    assert_non_null (self->dealer);
    return self;
}

static void
s_stop (fixture_t **self_p)
{
    fixture_t *self = *self_p;
    zsock_destroy (&self->dealer);
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
    free (self);
    *self_p = NULL;
}

//  Sends "" DSH1 command and the msgpack of JSON text on the raw DEALER.
static void
s_send (fixture_t *self, const char *command, const char *json)
{
    msgpack_sbuffer sbuf;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (json, &sbuf, error, sizeof (error)), 0);
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    assert_int_equal (zmsg_send (&msg, self->dealer), 0);
}

//  The next reply on the raw DEALER with this command, as JSON, within 10 s.
static json_t *
s_expect (fixture_t *self, const char *command)
{
    zpoller_t *poller = zpoller_new (self->dealer, NULL);
    json_t *json = NULL;
    int64_t deadline = zclock_mono () + 10000;
    while (!json && zclock_mono () < deadline) {
        if (zpoller_wait (poller, (int) (deadline - zclock_mono ())) != self->dealer)
            break;
        zmsg_t *reply = zmsg_recv (self->dealer);
        zmsg_t *envelope = NULL;
        char name [32], error [256];
        assert_int_equal (dsh_proto_split (reply, &envelope, name, sizeof (name), error, sizeof (error)), 0);
        if (streq (name, command)) {
            zframe_t *body = zmsg_pop (reply);
            dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
            assert_non_null (doc);
            json = dsh_json_from_msgpack (dsh_doc_root (doc));
            dsh_doc_destroy (&doc);
            zframe_destroy (&body);
        }
        zmsg_destroy (&envelope);
        zmsg_destroy (&reply);
    }
    zpoller_destroy (&poller);
    if (!json)
        fail_msg ("no %s within 10 s", command);
    return json;
}

//  STATS, asked on the raw DEALER; its id is echoed.
static json_t *
s_stats (fixture_t *self)
{
    char body [64];
    snprintf (body, sizeof (body), "{\"id\": %d}", ++self->queries);
    s_send (self, DSH_STATS, body);
    json_t *stats = s_expect (self, DSH_STATS);
    assert_int_equal (json_integer_value (json_object_get (stats, "id")), self->queries);
    return stats;
}

static json_int_t
s_int (json_t *object, const char *key)
{
    json_t *value = json_object_get (object, key);
    if (!json_is_integer (value))
        fail_msg ("\"%s\" is not an integer", key);
    return json_integer_value (value);
}

static json_t *
s_find (json_t *array, const char *key, const char *value)
{
    for (size_t index = 0; index < json_array_size (array); index++)
        if (streq (json_string_value (json_object_get (json_array_get (array, index), key)), value))
            return json_array_get (array, index);
    fail_msg ("no row with %s \"%s\"", key, value);
    return NULL;
}

//  Checks a tool's row: in flight, outcomes exactly (NULL-terminated
//  name/count pairs), and a histogram that counts every answered call.
static void
s_expect_tool (json_t *stats, const char *name, json_int_t replicas, json_int_t in_flight, ...)
{
    json_t *tool = s_find (json_object_get (stats, "tools"), "name", name);
    assert_int_equal (s_int (tool, "replicas"), replicas);
    assert_int_equal (s_int (tool, "inFlight"), in_flight);
    json_t *outcomes = json_object_get (tool, "outcomes");
    va_list args;
    va_start (args, in_flight);
    size_t expected = 0;
    json_int_t answered = 0;
    const char *outcome;
    while ((outcome = va_arg (args, const char *))) {
        json_int_t count = va_arg (args, int);
        if (s_int (outcomes, outcome) != count)
            fail_msg ("%s: %s is %lld, not %lld", name, outcome, (long long) s_int (outcomes, outcome),
                      (long long) count);
        expected++;
        answered += count;
    }
    va_end (args);
    assert_int_equal (json_object_size (outcomes), expected);
    json_t *histogram = json_object_get (tool, "histogram");
    assert_int_equal (json_array_size (histogram), json_array_size (json_object_get (stats, "bucketsUs")) + 1);
    json_int_t total = 0;
    for (size_t index = 0; index < json_array_size (histogram); index++)
        total += json_integer_value (json_array_get (histogram, index));
    assert_int_equal (total, answered);
}

static void
s_call (fixture_t *self, const char *name, const char *args, const char *agent, const char *code)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (self->client, name, args, agent, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s: %s", name, error);
    if (code) {
        assert_true (dsh_reply_is_error (reply));
        assert_string_equal (dsh_reply_error_code (reply), code);
    }
    else
        assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
}

static void
test_counts (void **state)
{
    (void) state;
    fixture_t *self = s_start (NULL, NULL);
    json_t *stats = s_stats (self);
    assert_true (json_is_true (json_object_get (stats, "enabled")));
    assert_int_equal (s_int (stats, "calls"), 0);
    json_decref (stats);

    for (int index = 0; index < 3; index++)
        s_call (self, "echo", "{\"message\":\"hi\"}", "alice", NULL);
    s_call (self, "echo", "{}", "alice", DSH_E_INVALID_ARGS);
    s_call (self, "fail", "{}", "bob", DSH_E_TOOL_FAILED);
    s_call (self, "no_such_tool", "{}", "bob", DSH_E_UNKNOWN_TOOL);
    //  Refused at FRONT: no tool name, so no record
    s_send (self, DSH_CALL, "{\"callId\":\"bad\"}");
    json_t *refused = s_expect (self, DSH_RESULT);
    json_decref (refused);
    //  A slow call, open while STATS is asked on the same connection
    s_send (self, DSH_CALL, "{\"callId\":\"slow\",\"name\":\"sleep_ms\",\"arguments\":{\"ms\":30000},"
                            "\"timeoutMs\":1500}");
    stats = s_stats (self);
    assert_int_equal (s_int (stats, "inFlight"), 1);
    s_expect_tool (stats, "sleep_ms", 1, 1, "ok", 0, NULL);
    assert_int_equal (s_int (s_find (json_object_get (stats, "components"), "id", "demo"), "inFlight"), 1);
    json_decref (stats);
    json_t *timeout = s_expect (self, DSH_RESULT);
    assert_string_equal (json_string_value (json_object_get (json_object_get (timeout, "error"), "code")),
                         DSH_E_TIMEOUT);
    json_decref (timeout);

    stats = s_stats (self);
    assert_true (json_is_string (json_object_get (stats, "broker")));
    assert_true (json_is_integer (json_object_get (stats, "epoch")));
    assert_true (json_is_integer (json_object_get (stats, "uptimeMs")));
    //  What heartbeat ages are read against: this broker's --heartbeat-ms
    //  and the default liveness
    assert_int_equal (s_int (stats, "heartbeatMs"), 200);
    assert_int_equal (s_int (stats, "liveness"), DSH_DEFAULT_LIVENESS);
    assert_int_equal (s_int (stats, "calls"), 7);
    assert_int_equal (s_int (stats, "inFlight"), 0);
    json_t *refusals = json_object_get (stats, "refused");
    assert_int_equal (json_object_size (refusals), 1);
    assert_int_equal (s_int (refusals, DSH_E_BAD_REQUEST), 1);
    assert_int_equal (s_int (json_object_get (stats, "events"), "tool.registered"), DSH_TESTKIT_DEMO_TOOLS);

    //  The demo's tools, in registration order, then the unknown one
    json_t *tools = json_object_get (stats, "tools");
    assert_int_equal (json_array_size (tools), DSH_TESTKIT_DEMO_TOOLS + 1);
    assert_string_equal (json_string_value (json_object_get (json_array_get (tools, 0), "name")), "echo");
    assert_string_equal (json_string_value (json_object_get (json_array_get (tools, DSH_TESTKIT_DEMO_TOOLS),
                                                             "name")), "no_such_tool");
    s_expect_tool (stats, "echo", 1, 0, "ok", 3, DSH_E_INVALID_ARGS, 1, NULL);
    s_expect_tool (stats, "fail", 1, 0, "ok", 0, DSH_E_TOOL_FAILED, 1, NULL);
    s_expect_tool (stats, "sleep_ms", 1, 0, "ok", 0, DSH_E_TIMEOUT, 1, NULL);
    s_expect_tool (stats, "no_such_tool", 0, 0, "ok", 0, DSH_E_UNKNOWN_TOOL, 1, NULL);
    s_expect_tool (stats, "count", 1, 0, "ok", 0, NULL);
    //  A call answered at its deadline took at least that long, less the
    //  deadline's millisecond granularity (the broker's clock is in ms)
    assert_true (s_int (s_find (tools, "name", "sleep_ms"), "sumUs") >= 1499000);

    //  The component served the five calls it answered in time (its answer
    //  to the cancelled sleep came late)
    json_t *components = json_object_get (stats, "components");
    assert_int_equal (json_array_size (components), 1);
    json_t *demo = s_find (components, "id", "demo");
    assert_int_equal (s_int (demo, "served"), 5);
    assert_int_equal (s_int (demo, "inFlight"), 0);
    assert_true (s_int (demo, "heartbeatAgeMs") >= 0);

    //  Agents, most calls first
    json_t *agents = json_object_get (stats, "agents");
    assert_int_equal (json_array_size (agents), 3);
    assert_string_equal (json_string_value (json_object_get (json_array_get (agents, 0), "agent")), "alice");
    json_t *alice = s_find (agents, "agent", "alice");
    assert_int_equal (s_int (alice, "calls"), 4);
    assert_int_equal (s_int (alice, "errors"), 1);
    json_t *bob = s_find (agents, "agent", "bob");
    assert_int_equal (s_int (bob, "calls"), 2);
    assert_int_equal (s_int (bob, "errors"), 2);
    json_t *nobody = s_find (agents, "agent", "");
    assert_int_equal (s_int (nobody, "calls"), 1);
    assert_int_equal (s_int (nobody, "errors"), 1);
    json_decref (stats);
    s_stop (&self);
}

static const char *s_deny_fail =
    "chain\n"
    "    stage\n"
    "        name = \"permission\"\n"
    "        kind = \"permission\"\n"
    "        rule\n"
    "            tool = \"fail\"\n"
    "            action = \"deny\"\n";

static void
test_chain_veto (void **state)
{
    (void) state;
    fixture_t *self = s_start (s_deny_fail, NULL);
    s_call (self, "fail", "{}", "carol", DSH_E_DENIED);
    s_call (self, "echo", "{\"message\":\"hi\"}", "carol", NULL);
    s_call (self, "echo", "{}", "carol", DSH_E_INVALID_ARGS);
    json_t *stats = s_stats (self);
    assert_int_equal (s_int (stats, "calls"), 3);
    //  The stage's answer is the call's outcome; results that passed it
    //  up keep theirs
    s_expect_tool (stats, "fail", 1, 0, "ok", 0, DSH_E_DENIED, 1, NULL);
    s_expect_tool (stats, "echo", 1, 0, "ok", 1, DSH_E_INVALID_ARGS, 1, NULL);
    assert_int_equal (s_int (s_find (json_object_get (stats, "components"), "id", "demo"), "served"), 2);
    json_t *carol = s_find (json_object_get (stats, "agents"), "agent", "carol");
    assert_int_equal (s_int (carol, "calls"), 3);
    assert_int_equal (s_int (carol, "errors"), 2);
    json_decref (stats);
    s_stop (&self);
}

static void
test_off (void **state)
{
    (void) state;
    const char *flags [] = { "--no-stats", NULL };
    fixture_t *self = s_start (NULL, flags);
    s_call (self, "echo", "{\"message\":\"hi\"}", "alice", NULL);
    s_call (self, "no_such_tool", "{}", NULL, DSH_E_UNKNOWN_TOOL);
    json_t *stats = s_stats (self);
    assert_true (json_is_false (json_object_get (stats, "enabled")));
    assert_int_equal (s_int (stats, "calls"), 0);
    assert_int_equal (s_int (stats, "inFlight"), 0);
    assert_int_equal (json_array_size (json_object_get (stats, "bucketsUs")), 18);
    assert_int_equal (json_array_size (json_object_get (stats, "tools")), 0);
    assert_int_equal (json_array_size (json_object_get (stats, "components")), 0);
    assert_int_equal (json_array_size (json_object_get (stats, "agents")), 0);
    assert_int_equal (json_object_size (json_object_get (stats, "events")), 0);
    assert_int_equal (json_object_size (json_object_get (stats, "refused")), 0);
    json_decref (stats);
    s_stop (&self);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_counts),
        cmocka_unit_test (test_chain_veto),
        cmocka_unit_test (test_off),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
