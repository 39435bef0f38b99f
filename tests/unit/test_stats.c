/*  =========================================================================
    test_stats - dsh_stats: the histogram's buckets, outcomes from codes and
    result bodies, the bounds on tool rows (eviction of gone tools, least
    recently called first; "*" past them) and agent rows ("*" past them),
    and answers counted where dsh_inflight answers them
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_inflight.h"
#include "dsh_json.h"
#include "dsh_stats.h"

//  Tools whose names start with "live" have two providers; others none.
static size_t
s_replicas (void *arg, const char *tool)
{
    (void) arg;
    return strncmp (tool, "live", 4) == 0? 2: 0;
}

//  STATS' entries as JSON (tools: the live ones given, in that order).
static json_t *
s_pack (dsh_stats_t *stats, const char *const *live)
{
    zlistx_t *tools = zlistx_new ();
    for (size_t index = 0; live && live [index]; index++)
        zlistx_add_end (tools, (void *) live [index]);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_stats_pack (stats, &packer, tools);
    assert_int_equal (dsh_packer_map_end (&packer), 0);
    zlistx_destroy (&tools);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), error, sizeof (error));
    assert_non_null (doc);
    json_t *json = dsh_json_from_msgpack (dsh_doc_root (doc));
    assert_non_null (json);
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);
    return json;
}

static json_t *
s_tool (json_t *stats, const char *name)
{
    json_t *tools = json_object_get (stats, "tools");
    for (size_t index = 0; index < json_array_size (tools); index++)
        if (streq (json_string_value (json_object_get (json_array_get (tools, index), "name")), name))
            return json_array_get (tools, index);
    return NULL;
}

static json_int_t
s_int (json_t *object, const char *key)
{
    json_t *value = json_object_get (object, key);
    assert_true (json_is_integer (value));
    return json_integer_value (value);
}

//  One call to tool from agent, answered with outcome after latency_us.
static void
s_call (dsh_stats_t *stats, const char *tool, const char *agent, const char *code, uint64_t latency_us)
{
    dsh_stats_tool_t *row;
    dsh_stats_agent_t *agent_row;
    dsh_stats_open (stats, tool, agent, &row, &agent_row);
    dsh_stats_answer (stats, row, agent_row, dsh_stats_outcome (code), latency_us);
}

static void
test_buckets (void **state)
{
    (void) state;
    dsh_stats_t *stats = dsh_stats_new (s_replicas, NULL);
    const uint64_t *bounds = dsh_stats_buckets_us ();
    assert_int_equal (bounds [0], 100);
    assert_int_equal (bounds [DSH_STATS_BUCKETS - 1], 60000000);
    //  Bounds are inclusive; past the last is the implicit +Inf bucket
    uint64_t latencies [] = { 0, 100, 101, 250, 999, 60000000, 60000001, UINT32_MAX };
    for (size_t index = 0; index < sizeof (latencies) / sizeof (latencies [0]); index++)
        s_call (stats, "live_echo", NULL, NULL, latencies [index]);
    const char *live [] = { "live_echo", "live_idle", NULL };
    json_t *json = s_pack (stats, live);
    assert_true (json_is_true (json_object_get (json, "enabled")));
    assert_int_equal (json_array_size (json_object_get (json, "bucketsUs")), DSH_STATS_BUCKETS);
    assert_int_equal (s_int (json, "calls"), 8);
    json_t *echo = s_tool (json, "live_echo");
    assert_non_null (echo);
    json_t *histogram = json_object_get (echo, "histogram");
    assert_int_equal (json_array_size (histogram), DSH_STATS_BUCKETS + 1);
    json_int_t expected [DSH_STATS_BUCKETS + 1] = { 0 };
    expected [0] = 2;           //  0, 100
    expected [1] = 2;           //  101, 250
    expected [3] = 1;           //  999
    expected [DSH_STATS_BUCKETS - 1] = 1;
    expected [DSH_STATS_BUCKETS] = 2;
    for (size_t index = 0; index <= DSH_STATS_BUCKETS; index++)
        assert_int_equal (json_integer_value (json_array_get (histogram, index)), expected [index]);
    assert_int_equal (s_int (echo, "sumUs"), 0 + 100 + 101 + 250 + 999 + 60000000 + 60000001 + (json_int_t) UINT32_MAX);
    assert_int_equal (s_int (echo, "replicas"), 2);
    assert_int_equal (s_int (echo, "inFlight"), 0);
    //  A tool that exists and was never called has a row of zeros
    json_t *idle = s_tool (json, "live_idle");
    assert_non_null (idle);
    assert_int_equal (s_int (json_object_get (idle, "outcomes"), "ok"), 0);
    assert_int_equal (json_object_size (json_object_get (idle, "outcomes")), 1);
    json_decref (json);
    dsh_stats_destroy (&stats);
    dsh_stats_destroy (&stats);
}

static void
test_outcomes (void **state)
{
    (void) state;
    assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome (NULL)), "ok");
    assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome (DSH_E_TIMEOUT)), "TIMEOUT");
    assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome (DSH_E_FORBIDDEN)), "FORBIDDEN");
    assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome ("NOT_A_CODE")), "TOOL_FAILED");
    //  From bodies: an error result, a success, one with no code, garbage
    zframe_t *error = dsh_proto_error_result ("c1", DSH_E_INVALID_ARGS, "bad");
    assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome_decode (zframe_data (error), zframe_size (error))),
                         "INVALID_ARGS");
    zframe_destroy (&error);
    const char *bodies [][2] = {
        { "{\"callId\":\"c\",\"content\":[],\"isError\":false}", "ok" },
        { "{\"callId\":\"c\",\"content\":[],\"isError\":true}", "TOOL_FAILED" },
        { "{\"callId\":\"c\",\"isError\":true,\"error\":{\"code\":\"WHATEVER\"}}", "TOOL_FAILED" },
        { "{\"callId\":\"c\",\"isError\":true,\"error\":{\"code\":\"DENIED\"}}", "DENIED" },
        { "{\"callId\":\"c\",\"isError\":false,\"error\":{\"code\":\"DENIED\"}}", "ok" },
    };
    for (size_t index = 0; index < sizeof (bodies) / sizeof (bodies [0]); index++) {
        msgpack_sbuffer sbuf;
        char reason [128];
        assert_int_equal (dsh_json_text_to_msgpack (bodies [index][0], &sbuf, reason, sizeof (reason)), 0);
        assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome_decode (sbuf.data, sbuf.size)),
                             bodies [index][1]);
        msgpack_sbuffer_destroy (&sbuf);
    }
    assert_string_equal (dsh_stats_outcome_name (dsh_stats_outcome_decode ("\xc1", 1)), "TOOL_FAILED");

    //  Outcomes, refusals and events as STATS gives them
    dsh_stats_t *stats = dsh_stats_new (s_replicas, NULL);
    s_call (stats, "live_a", "x", NULL, 10);
    s_call (stats, "live_a", "x", DSH_E_TIMEOUT, 10);
    s_call (stats, "live_a", "y", "ODD", 10);
    dsh_stats_refused (stats, DSH_E_BAD_REQUEST);
    dsh_stats_refused (stats, DSH_E_BAD_REQUEST);
    dsh_stats_refused (stats, DSH_E_OVERLOADED);
    dsh_stats_event (stats, "tool.registered");
    dsh_stats_event (stats, "tool.registered");
    dsh_stats_event (stats, "component.joined");
    dsh_stats_served (stats, "demo");
    dsh_stats_served (stats, "demo");
    assert_int_equal (dsh_stats_served_count (stats, "demo"), 2);
    dsh_stats_component_gone (stats, "demo");
    assert_int_equal (dsh_stats_served_count (stats, "demo"), 0);
    const char *live [] = { "live_a", NULL };
    json_t *json = s_pack (stats, live);
    json_t *outcomes = json_object_get (s_tool (json, "live_a"), "outcomes");
    assert_int_equal (json_object_size (outcomes), 3);
    assert_int_equal (s_int (outcomes, "ok"), 1);
    assert_int_equal (s_int (outcomes, "TIMEOUT"), 1);
    assert_int_equal (s_int (outcomes, "TOOL_FAILED"), 1);
    json_t *refused = json_object_get (json, "refused");
    assert_int_equal (json_object_size (refused), 2);
    assert_int_equal (s_int (refused, "BAD_REQUEST"), 2);
    assert_int_equal (s_int (refused, "OVERLOADED"), 1);
    json_t *events = json_object_get (json, "events");
    assert_int_equal (s_int (events, "tool.registered"), 2);
    assert_int_equal (s_int (events, "component.joined"), 1);
    //  Agents by calls, most first; errors are answers that are not ok
    json_t *agents = json_object_get (json, "agents");
    assert_int_equal (json_array_size (agents), 2);
    assert_string_equal (json_string_value (json_object_get (json_array_get (agents, 0), "agent")), "x");
    assert_int_equal (s_int (json_array_get (agents, 0), "calls"), 2);
    assert_int_equal (s_int (json_array_get (agents, 0), "errors"), 1);
    assert_string_equal (json_string_value (json_object_get (json_array_get (agents, 1), "agent")), "y");
    assert_int_equal (s_int (json_array_get (agents, 1), "errors"), 1);
    json_decref (json);
    dsh_stats_destroy (&stats);
}

static void
test_tool_bound (void **state)
{
    (void) state;
    dsh_stats_t *stats = dsh_stats_new (s_replicas, NULL);
    //  Rows of gone tools up to the bound, one kept in flight
    char name [32];
    for (int index = 0; index < DSH_STATS_TOOLS_MAX - 1; index++) {
        snprintf (name, sizeof (name), "gone-%d", index);
        s_call (stats, name, NULL, DSH_E_UNKNOWN_TOOL, 5);
    }
    dsh_stats_tool_t *busy;
    dsh_stats_agent_t *agent;
    dsh_stats_open (stats, "gone-0", NULL, &busy, &agent);
    s_call (stats, "gone-1", NULL, NULL, 5);
    //  gone-2 is the least recently called row no call holds: it goes
    s_call (stats, "gone-new", NULL, NULL, 5);
    json_t *json = s_pack (stats, NULL);
    assert_int_equal (json_array_size (json_object_get (json, "tools")), DSH_STATS_TOOLS_MAX - 1);
    assert_null (s_tool (json, "gone-2"));
    assert_non_null (s_tool (json, "gone-new"));
    assert_int_equal (s_int (s_tool (json, "gone-0"), "inFlight"), 1);
    assert_int_equal (s_int (s_tool (json, "gone-0"), "replicas"), 0);
    //  Gone tools last, the latest called first
    json_t *first = json_array_get (json_object_get (json, "tools"), 0);
    assert_string_equal (json_string_value (json_object_get (first, "name")), "gone-new");
    json_decref (json);
    dsh_stats_answer (stats, busy, agent, dsh_stats_outcome (NULL), 5);

    //  Every row a live tool: a new one counts under "*"
    dsh_stats_destroy (&stats);
    stats = dsh_stats_new (s_replicas, NULL);
    for (int index = 0; index < DSH_STATS_TOOLS_MAX - 1; index++) {
        snprintf (name, sizeof (name), "live-%d", index);
        s_call (stats, name, NULL, NULL, 5);
    }
    s_call (stats, "gone-a", NULL, NULL, 5);
    s_call (stats, "gone-b", NULL, DSH_E_UNKNOWN_TOOL, 5);
    json = s_pack (stats, NULL);
    //  No live tools given to the pack: only "*" is listed, gone
    assert_int_equal (json_array_size (json_object_get (json, "tools")), 1);
    json_t *other = s_tool (json, "*");
    assert_non_null (other);
    assert_int_equal (s_int (json_object_get (other, "outcomes"), "ok"), 1);
    assert_int_equal (s_int (json_object_get (other, "outcomes"), "UNKNOWN_TOOL"), 1);
    assert_int_equal (s_int (json, "calls"), DSH_STATS_TOOLS_MAX + 1);
    json_decref (json);
    dsh_stats_destroy (&stats);
}

static void
test_agent_bound (void **state)
{
    (void) state;
    dsh_stats_t *stats = dsh_stats_new (s_replicas, NULL);
    s_call (stats, "live", NULL, NULL, 5);
    char name [32];
    for (int index = 0; index < DSH_STATS_AGENTS_MAX + 10; index++) {
        snprintf (name, sizeof (name), "agent-%d", index);
        s_call (stats, "live", name, index % 2? DSH_E_DENIED: NULL, 5);
    }
    //  A known agent keeps its row past the bound
    s_call (stats, "live", "agent-0", NULL, 5);
    s_call (stats, "live", "agent-0", NULL, 5);
    json_t *json = s_pack (stats, NULL);
    json_t *agents = json_object_get (json, "agents");
    assert_int_equal (json_array_size (agents), DSH_STATS_AGENTS_MAX);
    //  "" and agent-0 .. agent-1021 have rows; the other 12 count as "*"
    json_t *other = json_array_get (agents, 0);
    assert_string_equal (json_string_value (json_object_get (other, "agent")), "*");
    assert_int_equal (s_int (other, "calls"), 12);
    assert_int_equal (s_int (other, "errors"), 6);
    json_t *second = json_array_get (agents, 1);
    assert_string_equal (json_string_value (json_object_get (second, "agent")), "agent-0");
    assert_int_equal (s_int (second, "calls"), 3);
    json_decref (json);
    dsh_stats_destroy (&stats);
}

static int
s_reply (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    (void) arg;
    (void) route;
    (void) route_size;
    zmq_msg_close (body);
    return 0;
}

static dsh_record_t *
s_open (dsh_inflight_t *inflight, dsh_stats_t *stats, const char *call_id, const char *agent)
{
    zmq_msg_t route [1];
    zmq_msg_init_size (&route [0], 2);
    memcpy (zmq_msg_data (&route [0]), "c1", 2);
    dsh_record_t *record = dsh_inflight_open (inflight, route, 1, call_id, "live_echo", zclock_mono () + 60000);
    zmq_msg_close (&route [0]);
    dsh_stats_open (stats, record->tool, agent, &record->stats_tool, &record->stats_agent);
    return record;
}

static void
test_inflight_answers (void **state)
{
    (void) state;
    dsh_stats_t *stats = dsh_stats_new (s_replicas, NULL);
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, NULL);
    dsh_inflight_set_stats (inflight, stats);
    //  An error the broker makes knows its code; a body's is read off it;
    //  a record set with an outcome is counted with it, whatever the body
    dsh_record_t *timed_out = s_open (inflight, stats, "a", "w");
    dsh_record_t *result = s_open (inflight, stats, "b", "w");
    dsh_record_t *known = s_open (inflight, stats, "c", NULL);
    json_t *json = s_pack (stats, (const char *[]) { "live_echo", NULL });
    assert_int_equal (s_int (s_tool (json, "live_echo"), "inFlight"), 3);
    json_decref (json);
    dsh_inflight_answer_error (inflight, &timed_out, DSH_E_TIMEOUT, "late");
    zframe_t *body = dsh_proto_error_result ("b", DSH_E_INVALID_ARGS, "bad");
    dsh_inflight_answer_frame (inflight, &result, &body);
    known->outcome = dsh_stats_outcome (DSH_E_DENIED);
    body = dsh_proto_error_result ("c", DSH_E_INVALID_ARGS, "rewritten");
    dsh_inflight_answer_frame (inflight, &known, &body);
    json = s_pack (stats, (const char *[]) { "live_echo", NULL });
    json_t *echo = s_tool (json, "live_echo");
    assert_int_equal (s_int (echo, "inFlight"), 0);
    json_t *outcomes = json_object_get (echo, "outcomes");
    assert_int_equal (s_int (outcomes, "TIMEOUT"), 1);
    assert_int_equal (s_int (outcomes, "INVALID_ARGS"), 1);
    assert_int_equal (s_int (outcomes, "DENIED"), 1);
    assert_int_equal (s_int (json, "calls"), 3);
    json_int_t total = 0;
    json_t *histogram = json_object_get (echo, "histogram");
    for (size_t index = 0; index < json_array_size (histogram); index++)
        total += json_integer_value (json_array_get (histogram, index));
    assert_int_equal (total, 3);
    json_decref (json);
    dsh_inflight_destroy (&inflight);
    dsh_stats_destroy (&stats);
}

static void
test_off (void **state)
{
    (void) state;
    //  No table: every hook does nothing, and STATS says so
    dsh_stats_tool_t *row = (dsh_stats_tool_t *) 1;
    dsh_stats_agent_t *agent = (dsh_stats_agent_t *) 1;
    dsh_stats_open (NULL, "live", "a", &row, &agent);
    assert_null (row);
    assert_null (agent);
    dsh_stats_answer (NULL, row, agent, dsh_stats_outcome (NULL), 5);
    dsh_stats_refused (NULL, DSH_E_BAD_REQUEST);
    dsh_stats_event (NULL, "tool.registered");
    dsh_stats_served (NULL, "demo");
    json_t *json = s_pack (NULL, (const char *[]) { "live", NULL });
    assert_true (json_is_false (json_object_get (json, "enabled")));
    assert_int_equal (s_int (json, "calls"), 0);
    assert_int_equal (json_array_size (json_object_get (json, "bucketsUs")), DSH_STATS_BUCKETS);
    assert_int_equal (json_array_size (json_object_get (json, "tools")), 0);
    assert_int_equal (json_array_size (json_object_get (json, "agents")), 0);
    assert_int_equal (json_object_size (json_object_get (json, "refused")), 0);
    assert_int_equal (json_object_size (json_object_get (json, "events")), 0);
    json_decref (json);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_buckets),
        cmocka_unit_test (test_outcomes),
        cmocka_unit_test (test_tool_bound),
        cmocka_unit_test (test_agent_bound),
        cmocka_unit_test (test_inflight_answers),
        cmocka_unit_test (test_off),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
