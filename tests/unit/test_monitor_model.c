/*  =========================================================================
    test_monitor_model - dsh-monitor's model and metrics without sockets:
    the tool set from a snapshot and change events, rates and quantiles
    between polls (and none across a new epoch), the pending approvals as
    polls and the approvals sockets give them (arguments only where they
    belong), a quarantined tool's marks, what a page's decision may say,
    and the Prometheus text with untrusted names escaped, the audit
    trail's writer in it only when the broker keeps one; the history ring
    of rate samples and the latest failed calls
    =========================================================================
*/

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <string.h>

#include "dsh_monitor_approver.h"
#include "dsh_monitor_metrics.h"
#include "dsh_monitor_model.h"

static json_t *
s_json (const char *text)
{
    json_error_t error;
    json_t *json = json_loads (text, 0, &error);
    if (!json)
        fail_msg ("bad JSON in the test: %s", error.text);
    return json;
}

static void
test_quantile (void **state)
{
    (void) state;
    json_t *bounds = s_json ("[100, 250, 500]");
    uint64_t counts [] = { 0, 4, 0, 0 };
    //  rank 2 of 4, all in (100, 250]: halfway
    assert_float_equal (dsh_monitor_quantile (bounds, counts, 0.5), 175, 1e-9);
    uint64_t first [] = { 2, 0, 0, 0 };
    assert_float_equal (dsh_monitor_quantile (bounds, first, 0.5), 50, 1e-9);
    //  In the +Inf bucket: the highest finite bound, as histogram_quantile
    uint64_t slow [] = { 1, 0, 0, 9 };
    assert_float_equal (dsh_monitor_quantile (bounds, slow, 0.99), 500, 1e-9);
    uint64_t none [] = { 0, 0, 0, 0 };
    assert_true (dsh_monitor_quantile (bounds, none, 0.5) < 0);
    json_decref (bounds);
}

static json_t *
s_tool (json_t *tools, const char *name)
{
    size_t index;
    json_t *tool;
    json_array_foreach (json_object_get (tools, "tools"), index, tool)
        if (streq (json_string_value (json_object_get (tool, "name")), name))
            return tool;
    return NULL;
}

static void
test_tool_set (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (2);
    json_t *notice = s_json ("{\"kind\": \"snapshot\", \"seq\": 2, \"epoch\": 7, \"broker\": \"tcp://b:1\","
        " \"tools\": [{\"tool\": {\"name\": \"read\", \"annotations\": {\"readOnlyHint\": true}}, \"providers\": [\"a\", \"b\"]},"
        "             {\"tool\": {\"name\": \"wipe\"}, \"providers\": [\"b\"]},"
        "             {\"tool\": {\"name\": \"add\", \"annotations\": {\"destructiveHint\": false}}, \"providers\": [\"b\"]}],"
        " \"components\": [{\"id\": \"b\", \"generation\": 1, \"tools\": [\"read\", \"wipe\", \"add\"]},"
        "                  {\"id\": \"a\", \"generation\": 1, \"tools\": [\"read\"]}]}");
    assert_null (dsh_monitor_model_notice (model, notice, 1));
    json_decref (notice);
    json_t *tools = dsh_monitor_model_tools (model);
    assert_true (json_is_true (json_object_get (tools, "synced")));
    assert_int_equal (json_integer_value (json_object_get (tools, "epoch")), 7);
    assert_string_equal (json_string_value (json_object_get (json_array_get (json_object_get (tools, "components"), 0), "id")), "a");
    json_t *read = s_tool (tools, "read");
    assert_true (json_is_true (json_object_get (read, "readOnly")));
    assert_true (json_is_false (json_object_get (read, "destructive")));
    assert_int_equal (json_array_size (json_object_get (read, "providers")), 2);
    //  MCP's defaults: a tool that says nothing may destroy
    assert_true (json_is_true (json_object_get (s_tool (tools, "wipe"), "destructive")));
    assert_true (json_is_false (json_object_get (s_tool (tools, "add"), "destructive")));
    assert_true (json_is_false (json_object_get (s_tool (tools, "add"), "readOnly")));
    json_decref (tools);

    const char *events [] = {
        "{\"kind\": \"tool.registered\", \"seq\": 3, \"epoch\": 7, \"component\": \"c\", \"name\": \"new\", \"tool\": {\"name\": \"new\"}}",
        "{\"kind\": \"component.joined\", \"seq\": 4, \"epoch\": 7, \"component\": \"c\", \"tools\": [\"new\", \"read\"]}",
        "{\"kind\": \"tool.unregistered\", \"seq\": 5, \"epoch\": 7, \"component\": \"b\", \"name\": \"wipe\"}",
        NULL
    };
    for (size_t index = 0; events [index]; index++) {
        notice = s_json (events [index]);
        const json_t *kept = dsh_monitor_model_notice (model, notice, 100 + (int64_t) index);
        assert_non_null (kept);
        assert_null (json_object_get (kept, "tool"));
        assert_int_equal (json_integer_value (json_object_get (kept, "at")), 100 + (int64_t) index);
        json_decref (notice);
    }
    tools = dsh_monitor_model_tools (model);
    assert_int_equal (json_array_size (json_object_get (tools, "components")), 3);
    assert_int_equal (json_array_size (json_object_get (s_tool (tools, "read"), "providers")), 3);
    assert_null (s_tool (tools, "wipe"));
    assert_string_equal (json_string_value (json_object_get (json_array_get (json_object_get (tools, "tools"), 2), "name")), "new");
    json_decref (tools);
    notice = s_json ("{\"kind\": \"component.left\", \"seq\": 6, \"epoch\": 7, \"component\": \"c\", \"reason\": \"expired\"}");
    dsh_monitor_model_notice (model, notice, 200);
    json_decref (notice);
    tools = dsh_monitor_model_tools (model);
    assert_int_equal (json_array_size (json_object_get (tools, "components")), 2);
    json_decref (tools);
    //  Only the last two events are kept, stamped, without their entries
    json_t *kept = dsh_monitor_model_events (model);
    assert_int_equal (json_array_size (kept), 2);
    assert_string_equal (json_string_value (json_object_get (json_array_get (kept, 1), "kind")), "component.left");
    assert_int_equal (json_integer_value (json_object_get (json_array_get (kept, 1), "at")), 200);
    json_decref (kept);
    dsh_monitor_model_destroy (&model);
    dsh_monitor_model_destroy (&model);
}

//  A poll with one tool's outcomes and histogram over bounds [1000, 10000].
static json_t *
s_poll (int epoch, int ok, int failed, int fast, int slow)
{
    return json_pack ("{s:b, s:{s:s, s:i, s:i, s:b, s:[ii], s:i, s:i, s:{}, s:{}, s:[{s:s, s:i, s:i, s:{s:i, s:i},"
                      " s:[iii], s:i}], s:[], s:[]}, s:[], s:[]}",
                      "reachable", 1, "stats", "broker", "x", "epoch", epoch, "uptimeMs", 5, "enabled", 1,
                      "bucketsUs", 1000, 10000, "calls", ok + failed, "inFlight", 0, "refused", "events",
                      "tools", "name", "t\"o\\o\nl", "replicas", 1, "inFlight", 0, "outcomes", "ok", ok,
                      "TOOL_FAILED", failed, "histogram", fast, slow, 0, "sumUs", fast * 500 + slow * 5000,
                      "components", "agents", "chain", "pending");
}

static void
test_rates (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (10);
    json_t *stats = dsh_monitor_model_stats (model);
    assert_true (json_is_false (json_object_get (stats, "reachable")));
    json_decref (stats);
    json_t *poll = s_poll (1, 1, 0, 1, 0);
    dsh_monitor_model_poll (model, poll, 1000, 1);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    assert_true (json_is_null (json_object_get (stats, "rates")));
    json_decref (stats);
    //  Two seconds later: 4 more calls, 2 failed, 2 fast and 2 slow
    poll = s_poll (1, 3, 2, 3, 2);
    dsh_monitor_model_poll (model, poll, 3000, 2);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    json_t *rates = json_object_get (stats, "rates");
    assert_int_equal (json_integer_value (json_object_get (rates, "intervalMs")), 2000);
    assert_float_equal (json_real_value (json_object_get (rates, "calls")), 2.0, 1e-9);
    json_t *tool = json_object_get (json_object_get (rates, "tools"), "t\"o\\o\nl");
    assert_float_equal (json_real_value (json_object_get (tool, "calls")), 2.0, 1e-9);
    assert_float_equal (json_real_value (json_object_get (tool, "errors")), 1.0, 1e-9);
    //  rank 2 of 4: the top of (0, 1 ms]
    assert_float_equal (json_real_value (json_object_get (tool, "p50Ms")), 1.0, 1e-9);
    assert_float_equal (json_real_value (json_object_get (tool, "p99Ms")), 1.0 + 9.0 * (3.96 - 2) / 2, 1e-9);

    //  The metrics: the name escaped, the histogram cumulative in seconds
    json_t *tools = dsh_monitor_model_tools (model);
    char *text = dsh_monitor_metrics (tools, stats);
    assert_non_null (strstr (text, "# TYPE dsh_calls_total counter\n"));
    assert_non_null (strstr (text, "dsh_calls_total{tool=\"t\\\"o\\\\o\\nl\",code=\"TOOL_FAILED\"} 2\n"));
    assert_non_null (strstr (text, "dsh_call_duration_seconds_bucket{tool=\"t\\\"o\\\\o\\nl\",le=\"0.001\"} 3\n"));
    assert_non_null (strstr (text, "dsh_call_duration_seconds_bucket{tool=\"t\\\"o\\\\o\\nl\",le=\"0.01\"} 5\n"));
    assert_non_null (strstr (text, "dsh_call_duration_seconds_bucket{tool=\"t\\\"o\\\\o\\nl\",le=\"+Inf\"} 5\n"));
    assert_non_null (strstr (text, "dsh_call_duration_seconds_count{tool=\"t\\\"o\\\\o\\nl\"} 5\n"));
    assert_non_null (strstr (text, "dsh_up 1\n"));
    free (text);
    json_decref (stats);

    //  A new epoch: no rate across two brokers
    poll = s_poll (2, 1, 0, 1, 0);
    dsh_monitor_model_poll (model, poll, 4000, 3);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    assert_true (json_is_null (json_object_get (stats, "rates")));
    json_decref (stats);

    //  Unreachable: dsh_up 0 and nothing else
    poll = s_json ("{\"reachable\": false, \"error\": \"no reply\"}");
    dsh_monitor_model_poll (model, poll, 5000, 4);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    text = dsh_monitor_metrics (tools, stats);
    assert_string_equal (text, "# HELP dsh_up Whether the broker answered the monitor's last poll.\n"
                               "# TYPE dsh_up gauge\ndsh_up 0\n");
    free (text);
    json_decref (stats);
    json_decref (tools);
    dsh_monitor_model_destroy (&model);
}

//  While the broker is down the page shows what it last knew, said as
//  such: the chain, the pending approvals and the counters of the last
//  answered poll with its time, not an empty chain and zero calls.
static void
test_last_known (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (10);
    //  Never reached: nothing to keep
    json_t *poll = s_json ("{\"reachable\": false, \"error\": \"no reply\"}");
    dsh_monitor_model_poll (model, poll, 500, 5);
    json_decref (poll);
    json_t *stats = dsh_monitor_model_stats (model);
    assert_null (json_object_get (stats, "lastKnownAt"));
    assert_null (json_object_get (stats, "chain"));
    json_decref (stats);

    poll = s_poll (1, 3, 1, 2, 2);
    json_object_set_new (poll, "chain", s_json ("[{\"name\": \"permission\", \"kind\": \"permission\","
                                                " \"passed\": 4, \"answered\": 1, \"failed\": 0}]"));
    json_object_set_new (poll, "pending", s_json ("[{\"id\": \"p-1\", \"tool\": \"wipe\", \"stage\": \"permission\","
                                                  " \"arguments\": {\"path\": \"/\"}}]"));
    dsh_monitor_model_poll (model, poll, 1000, 100);
    json_decref (poll);

    //  Two polls unanswered: both keep the state of time 100
    for (int64_t at = 200; at <= 300; at += 100) {
        poll = s_json ("{\"reachable\": false, \"error\": \"no reply\"}");
        dsh_monitor_model_poll (model, poll, 1000 + at, at);
        json_decref (poll);
        stats = dsh_monitor_model_stats (model);
        assert_true (json_is_false (json_object_get (stats, "reachable")));
        assert_string_equal (json_string_value (json_object_get (stats, "error")), "no reply");
        assert_int_equal (json_integer_value (json_object_get (stats, "at")), at);
        assert_int_equal (json_integer_value (json_object_get (stats, "lastKnownAt")), 100);
        assert_true (json_is_null (json_object_get (stats, "rates")));
        json_t *chain = json_object_get (stats, "chain");
        assert_int_equal (json_array_size (chain), 1);
        assert_int_equal (json_integer_value (json_object_get (json_array_get (chain, 0), "passed")), 4);
        json_t *pending = json_object_get (stats, "pending");
        assert_int_equal (json_array_size (pending), 1);
        assert_non_null (json_object_get (json_array_get (pending, 0), "argumentsPreview"));
        assert_int_equal (json_integer_value (json_object_get (json_object_get (stats, "stats"), "calls")), 4);
        json_decref (stats);
        //  Still without arguments for the untrusted
        stats = dsh_monitor_model_stats_public (model);
        assert_null (json_object_get (json_array_get (json_object_get (stats, "pending"), 0), "argumentsPreview"));
        assert_int_equal (json_integer_value (json_object_get (stats, "lastKnownAt")), 100);
        //  Prometheus is told the broker is down, not stale counters
        json_t *tools = s_json ("{\"tools\": [], \"components\": []}");
        char *text = dsh_monitor_metrics (tools, stats);
        assert_null (strstr (text, "dsh_answered_calls_total"));
        free (text);
        json_decref (tools);
        json_decref (stats);
    }

    //  Back: the new poll is the truth, and nothing is "last known"
    poll = s_poll (2, 1, 0, 1, 0);
    dsh_monitor_model_poll (model, poll, 2000, 400);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    assert_true (json_is_true (json_object_get (stats, "reachable")));
    assert_null (json_object_get (stats, "lastKnownAt"));
    assert_int_equal (json_array_size (json_object_get (stats, "pending")), 0);
    assert_int_equal (json_array_size (json_object_get (stats, "chain")), 0);
    json_decref (stats);
    dsh_monitor_model_destroy (&model);
}

//  STATS audit as metrics: counters and gauges with HELP and TYPE, the
//  write time in seconds; none of them with the audit off (nil).
static void
test_audit_metrics (void **state)
{
    (void) state;
    json_t *tools = s_json ("{\"tools\": [], \"components\": []}");
    json_t *stats = s_poll (1, 1, 0, 1, 0);
    json_object_set_new (json_object_get (stats, "stats"), "audit",
                         s_json ("{\"name\": \"b\\\"1\", \"store\": \"sqlite\", \"healthy\": true, \"records\": 12,"
                                 " \"dropped\": 3, \"refused\": 4, \"queueBytes\": 2048, \"batches\": 5,"
                                 " \"writeUsTotal\": 2500000, \"writeUsMax\": 1250}"));
    char *text = dsh_monitor_metrics (tools, stats);
    const char *expected [] = {
        "dsh_audit_info{chain=\"b\\\"1\",store=\"sqlite\"} 1\n",
        "# TYPE dsh_audit_healthy gauge\ndsh_audit_healthy 1\n",
        "# TYPE dsh_audit_records_total counter\ndsh_audit_records_total 12\n",
        "# TYPE dsh_audit_dropped_total counter\ndsh_audit_dropped_total 3\n",
        "# TYPE dsh_audit_refused_total counter\ndsh_audit_refused_total 4\n",
        "# TYPE dsh_audit_queue_bytes gauge\ndsh_audit_queue_bytes 2048\n",
        "# TYPE dsh_audit_write_batches_total counter\ndsh_audit_write_batches_total 5\n",
        "# TYPE dsh_audit_write_seconds_total counter\ndsh_audit_write_seconds_total 2.500000\n",
        "# TYPE dsh_audit_write_seconds_max gauge\ndsh_audit_write_seconds_max 0.001250\n",
        "# HELP dsh_audit_write_seconds_total ",
        NULL
    };
    for (size_t index = 0; expected [index]; index++)
        if (!strstr (text, expected [index]))
            fail_msg ("no \"%s\" in:\n%s", expected [index], text);
    free (text);
    //  A store that failed its last write
    json_object_set_new (json_object_get (json_object_get (stats, "stats"), "audit"), "healthy", json_false ());
    text = dsh_monitor_metrics (tools, stats);
    assert_non_null (strstr (text, "\ndsh_audit_healthy 0\n"));
    free (text);
    //  The audit off
    json_object_set_new (json_object_get (stats, "stats"), "audit", json_null ());
    text = dsh_monitor_metrics (tools, stats);
    assert_null (strstr (text, "dsh_audit_"));
    assert_non_null (strstr (text, "dsh_answered_calls_total 1\n"));
    free (text);
    json_decref (stats);
    json_decref (tools);
}

//  The pending approvals: a poll's, then what the approvals sockets say
//  (a request opened, one resolved) at once; the full arguments for the
//  page's session, a preview for the token's stats, none for the others.
static void
test_pending (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (10);
    json_t *poll = s_json ("{\"reachable\": true, \"pending\": [{\"id\": \"a1\", \"stage\": \"permission\", "
                           "\"tool\": \"tick\", \"arguments\": {\"ms\": 4242}}]}");
    dsh_monitor_model_poll (model, poll, 1000, 1000);
    json_decref (poll);
    json_t *request = s_json ("{\"id\": \"b2\", \"tool\": \"write\", \"arguments\": {\"text\": \"x\"}, "
                              "\"closesMs\": 5000, \"argumentsDigest\": \"feedface\"}");
    dsh_monitor_model_pending_open (model, "permission", request);
    //  The same id again replaces it
    dsh_monitor_model_pending_open (model, "permission", request);
    json_decref (request);
    json_t *pending = dsh_monitor_model_pending (model);
    assert_int_equal (json_array_size (pending), 2);
    json_t *opened = json_array_get (pending, 1);
    assert_string_equal (json_string_value (json_object_get (opened, "stage")), "permission");
    assert_string_equal (json_string_value (json_object_get (json_object_get (opened, "arguments"), "text")), "x");
    json_decref (pending);
    json_t *stats = dsh_monitor_model_stats (model);
    json_t *brief = json_array_get (json_object_get (stats, "pending"), 1);
    assert_string_equal (json_string_value (json_object_get (brief, "argumentsPreview")), "{\"text\":\"x\"}");
    assert_null (json_object_get (brief, "arguments"));
    assert_int_equal (json_integer_value (json_object_get (brief, "closesMs")), 5000);
    json_decref (stats);
    stats = dsh_monitor_model_stats_public (model);
    char *text = json_dumps (stats, JSON_COMPACT);
    assert_null (strstr (text, "4242"));
    assert_null (strstr (text, "\"text\""));
    assert_null (strstr (text, "feedface"));
    assert_non_null (strstr (text, "\"closesMs\":5000"));
    free (text);
    json_decref (stats);
    //  Resolved: gone; another stage's id is another request
    dsh_monitor_model_pending_close (model, "other", "a1");
    dsh_monitor_model_pending_close (model, "permission", "a1");
    pending = dsh_monitor_model_pending (model);
    assert_int_equal (json_array_size (pending), 1);
    assert_string_equal (json_string_value (json_object_get (json_array_get (pending, 0), "id")), "b2");
    json_decref (pending);
    stats = dsh_monitor_model_stats (model);
    assert_int_equal (json_array_size (json_object_get (stats, "pending")), 1);
    json_decref (stats);
    //  The next poll says what is open
    poll = s_json ("{\"reachable\": true, \"pending\": []}");
    dsh_monitor_model_poll (model, poll, 2000, 2000);
    json_decref (poll);
    pending = dsh_monitor_model_pending (model);
    assert_int_equal (json_array_size (pending), 0);
    json_decref (pending);
    dsh_monitor_model_destroy (&model);
}

//  A quarantined tool keeps its place, with the broker's marks.
static void
test_quarantined_marks (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (10);
    json_t *snapshot = s_json ("{\"kind\": \"snapshot\", \"epoch\": 1, \"seq\": 1, \"tools\": ["
        "{\"tool\": {\"name\": \"echo\"}}, {\"tool\": {\"name\": \"note\", \"quarantined\": true, "
        "\"digest\": \"bb\", \"pinnedDigest\": \"aa\", "
        "\"quarantineReason\": \"definition changed since it was pinned\"}}],"
        " \"components\": [{\"id\": \"c\", \"tools\": [\"echo\", \"note\"]}]}");
    assert_null (dsh_monitor_model_notice (model, snapshot, 1));
    json_decref (snapshot);
    json_t *tools = dsh_monitor_model_tools (model);
    json_t *echo = json_array_get (json_object_get (tools, "tools"), 0);
    json_t *note = json_array_get (json_object_get (tools, "tools"), 1);
    assert_null (json_object_get (echo, "quarantined"));
    assert_true (json_is_true (json_object_get (note, "quarantined")));
    assert_string_equal (json_string_value (json_object_get (note, "digest")), "bb");
    assert_string_equal (json_string_value (json_object_get (note, "pinnedDigest")), "aa");
    assert_string_equal (json_string_value (json_object_get (note, "quarantineReason")),
                         "definition changed since it was pinned");
    json_decref (tools);
    dsh_monitor_model_destroy (&model);
}

//  What a page's decision may say, and what it may not.
static void
test_decision_check (void **state)
{
    (void) state;
    char error [256];
    const char *taken [] = {
        "{\"stage\": \"permission\", \"id\": \"a1b2c3d4\", \"outcome\": \"deny\"}",
        "{\"stage\": \"permission\", \"id\": \"a1\", \"outcome\": \"allow\", \"scope\": \"once\"}",
        "{\"stage\": \"p\", \"id\": \"a1\", \"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 5, "
        "\"argumentsDigest\": \"ab12\", \"definitionDigest\": \"cd34\"}",
        "{\"stage\": \"p\", \"id\": \"a1\", \"outcome\": \"allow\", \"scope\": \"arguments\"}",
    };
    for (size_t index = 0; index < sizeof taken / sizeof taken [0]; index++) {
        json_t *body = s_json (taken [index]);
        json_t *decision = dsh_monitor_approver_check_decision (body, error, sizeof error);
        if (!decision)
            fail_msg ("%s: %s", taken [index], error);
        assert_true (json_equal (decision, body));
        json_decref (decision);
        json_decref (body);
    }
    //  Bodies with ' for ", for reading
    const char *refused [][2] = {
        { "{'id': 'a1', 'outcome': 'allow'}", "names its stage" },
        { "{'stage': 'p', 'outcome': 'allow'}", "names its request" },
        { "{'stage': 'p', 'id': 'a\\u0001', 'outcome': 'allow'}", "names its request" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'yes'}", "'allow' or 'deny'" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'deny', 'scope': 'tool'}", "a grant (scope tool) allows" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'allow', 'scope': 'forever'}", "scope is" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'allow', 'scope': 'tool', 'minutes': 0}", "minutes is" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'allow', 'scope': 'tool', 'minutes': 1.5}", "minutes is" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'allow', 'minutes': 5}", "minutes are for a grant" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'allow', 'argumentsDigest': 'XYZ'}", "hex digits" },
        { "{'stage': 'p', 'id': 'a1', 'outcome': 'allow', 'by': 'mallory'}", "a decision has no 'by'" },
    };
    for (size_t index = 0; index < sizeof refused / sizeof refused [0]; index++) {
        char *text = strdup (refused [index][0]);
        char *why = strdup (refused [index][1]);
        for (char *quote = strchr (text, '\''); quote; quote = strchr (quote, '\''))
            *quote = '"';
        for (char *quote = strchr (why, '\''); quote; quote = strchr (quote, '\''))
            *quote = '"';
        json_t *body = s_json (text);
        error [0] = 0;
        assert_null (dsh_monitor_approver_check_decision (body, error, sizeof error));
        if (!strstr (error, why))
            fail_msg ("%s: %s", text, error);
        json_decref (body);
        free (text);
        free (why);
    }
}

//  The metrics count the quarantined tools
static void
test_metrics_quarantined (void **state)
{
    (void) state;
    json_t *tools = json_loads ("{\"tools\": [{\"name\": \"a\", \"quarantined\": true}, {\"name\": \"b\"},"
                                " {\"name\": \"c\", \"quarantined\": false}], \"components\": []}", 0, NULL);
    json_t *stats = json_loads ("{\"reachable\": true, \"ping\": {\"uptimeMs\": 1000, \"inFlight\": 0}}", 0, NULL);
    assert_non_null (tools);
    assert_non_null (stats);
    char *text = dsh_monitor_metrics (tools, stats);
    assert_non_null (strstr (text, "# TYPE dsh_tools_quarantined gauge\ndsh_tools_quarantined 1\n"));
    assert_non_null (strstr (text, "dsh_tools 3\n"));
    free (text);
    json_decref (tools);
    json_decref (stats);
}

//  The history ring: a sample a step, from the poll that ended the
//  previous one; the oldest dropped past the bound; a gap where the broker
//  did not answer or a new epoch began; at most 16 tools a sample.
static void
test_history (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (10);
    dsh_monitor_model_set_history (model, 1000, 3);
    json_t *history = dsh_monitor_model_history (model);
    assert_int_equal (json_integer_value (json_object_get (history, "stepMs")), 1000);
    assert_int_equal (json_integer_value (json_object_get (history, "kept")), 3);
    assert_int_equal (json_array_size (json_object_get (history, "samples")), 0);
    json_decref (history);

    //  The first poll is the base; half a step later nothing yet
    json_t *poll = s_poll (1, 1, 0, 1, 0);
    dsh_monitor_model_poll (model, poll, 10000, 100);
    json_decref (poll);
    assert_null (dsh_monitor_model_history_added (model));
    poll = s_poll (1, 2, 0, 2, 0);
    dsh_monitor_model_poll (model, poll, 10500, 101);
    json_decref (poll);
    assert_null (dsh_monitor_model_history_added (model));
    //  A step after the base: 4 more calls (1 failed, 2 slow) over 2 s
    poll = s_poll (1, 4, 1, 3, 2);
    dsh_monitor_model_poll (model, poll, 12000, 102);
    json_decref (poll);
    const json_t *added = dsh_monitor_model_history_added (model);
    assert_non_null (added);
    assert_int_equal (json_integer_value (json_object_get (added, "at")), 102);
    assert_int_equal (json_integer_value (json_object_get (added, "intervalMs")), 2000);
    assert_float_equal (json_real_value (json_object_get (added, "calls")), 2.0, 1e-9);
    assert_float_equal (json_real_value (json_object_get (added, "errors")), 0.5, 1e-9);
    //  rank 3.96 of 4, 2 in (1, 10 ms]: the total's p99 is the one tool's
    assert_float_equal (json_real_value (json_object_get (added, "p99Ms")), 1.0 + 9.0 * (3.96 - 2) / 2, 1e-9);
    json_t *tool = json_object_get (json_object_get (added, "tools"), "t\"o\\o\nl");
    assert_float_equal (json_real_value (json_object_get (tool, "calls")), 2.0, 1e-9);
    assert_float_equal (json_real_value (json_object_get (tool, "errors")), 0.5, 1e-9);
    assert_true (json_is_real (json_object_get (tool, "p99Ms")));
    //  A poll within the step of that one adds nothing
    poll = s_poll (1, 4, 1, 3, 2);
    dsh_monitor_model_poll (model, poll, 12100, 103);
    json_decref (poll);
    assert_null (dsh_monitor_model_history_added (model));

    //  Three more samples: the ring keeps the last three; a quiet one has
    //  no calls, no p99 and no tools
    for (int index = 0; index < 3; index++) {
        poll = s_poll (1, 4, 1, 3, 2);
        dsh_monitor_model_poll (model, poll, 13100 + 1000 * index, 200 + index);
        json_decref (poll);
        assert_non_null (dsh_monitor_model_history_added (model));
    }
    history = dsh_monitor_model_history (model);
    json_t *samples = json_object_get (history, "samples");
    assert_int_equal (json_array_size (samples), 3);
    assert_int_equal (json_integer_value (json_object_get (json_array_get (samples, 0), "at")), 200);
    assert_int_equal (json_integer_value (json_object_get (json_array_get (samples, 2), "at")), 202);
    json_t *quiet = json_array_get (samples, 2);
    assert_float_equal (json_real_value (json_object_get (quiet, "calls")), 0.0, 1e-9);
    assert_true (json_is_null (json_object_get (quiet, "p99Ms")));
    assert_int_equal (json_object_size (json_object_get (quiet, "tools")), 0);
    json_decref (history);

    //  A poll that did not reach the broker is a gap: the next answered
    //  one is a base, and a sample comes a step after it
    poll = s_json ("{\"reachable\": false, \"error\": \"no reply\"}");
    dsh_monitor_model_poll (model, poll, 16100, 300);
    json_decref (poll);
    assert_null (dsh_monitor_model_history_added (model));
    poll = s_poll (1, 5, 1, 4, 2);
    dsh_monitor_model_poll (model, poll, 20000, 301);
    json_decref (poll);
    assert_null (dsh_monitor_model_history_added (model));
    poll = s_poll (1, 7, 1, 6, 2);
    dsh_monitor_model_poll (model, poll, 21000, 302);
    json_decref (poll);
    added = dsh_monitor_model_history_added (model);
    assert_non_null (added);
    assert_int_equal (json_integer_value (json_object_get (added, "intervalMs")), 1000);
    assert_float_equal (json_real_value (json_object_get (added, "calls")), 2.0, 1e-9);
    //  A new epoch: no sample across two brokers
    poll = s_poll (2, 1, 0, 1, 0);
    dsh_monitor_model_poll (model, poll, 22000, 303);
    json_decref (poll);
    assert_null (dsh_monitor_model_history_added (model));

    //  Fewer kept drops the oldest at once
    dsh_monitor_model_set_history (model, 1000, 1);
    history = dsh_monitor_model_history (model);
    samples = json_object_get (history, "samples");
    assert_int_equal (json_array_size (samples), 1);
    assert_int_equal (json_integer_value (json_object_get (json_array_get (samples, 0), "at")), 302);
    json_decref (history);
    //  Below the smallest step: the smallest
    dsh_monitor_model_set_history (model, 1, 0);
    history = dsh_monitor_model_history (model);
    assert_int_equal (json_integer_value (json_object_get (history, "stepMs")), DSH_MONITOR_HISTORY_STEP_MS_MIN);
    assert_int_equal (json_integer_value (json_object_get (history, "kept")), 1);
    json_decref (history);
    dsh_monitor_model_destroy (&model);

    //  Defaults: 15 minutes of 5 s samples
    model = dsh_monitor_model_new (1);
    history = dsh_monitor_model_history (model);
    assert_int_equal (json_integer_value (json_object_get (history, "stepMs")), 5000);
    assert_int_equal (json_integer_value (json_object_get (history, "kept")), 180);
    json_decref (history);
    dsh_monitor_model_destroy (&model);
}

//  A poll of count tools "t0", "t1", ..., tool i with calls of its own
//  (i + 1) * scale, all ok and fast.
static json_t *
s_poll_tools (int count, int scale)
{
    json_t *tools = json_array ();
    int calls = 0;
    for (int index = 0; index < count; index++) {
        char name [16];
        snprintf (name, sizeof name, "t%d", index);
        int its = (index + 1) * scale;
        calls += its;
        json_array_append_new (tools, json_pack ("{s:s, s:i, s:i, s:{s:i}, s:[iii], s:i}", "name", name,
                                                 "replicas", 1, "inFlight", 0, "outcomes", "ok", its,
                                                 "histogram", its, 0, 0, "sumUs", its * 500));
    }
    return json_pack ("{s:b, s:{s:s, s:i, s:i, s:b, s:[ii], s:i, s:i, s:{}, s:{}, s:o, s:[], s:[]}}",
                      "reachable", 1, "stats", "broker", "x", "epoch", 1, "uptimeMs", 5, "enabled", 1,
                      "bucketsUs", 1000, 10000, "calls", calls, "inFlight", 0, "refused", "events",
                      "tools", tools, "components", "agents");
}

static void
test_history_tools_bound (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (1);
    dsh_monitor_model_set_history (model, 1000, 10);
    json_t *poll = s_poll_tools (40, 0);
    dsh_monitor_model_poll (model, poll, 1000, 1);
    json_decref (poll);
    poll = s_poll_tools (40, 1);
    dsh_monitor_model_poll (model, poll, 2000, 2);
    json_decref (poll);
    const json_t *added = dsh_monitor_model_history_added (model);
    assert_non_null (added);
    json_t *tools = json_object_get (added, "tools");
    assert_int_equal (json_object_size (tools), DSH_MONITOR_HISTORY_TOOLS);
    //  The busiest: t39 down to t24
    assert_non_null (json_object_get (tools, "t39"));
    assert_non_null (json_object_get (tools, "t24"));
    assert_null (json_object_get (tools, "t23"));
    assert_float_equal (json_real_value (json_object_get (json_object_get (tools, "t39"), "calls")), 40.0, 1e-9);
    //  The total counts every tool
    assert_float_equal (json_real_value (json_object_get (added, "calls")), 40.0 * 41 / 2, 1e-9);
    dsh_monitor_model_destroy (&model);
}

//  The latest failed calls: from the audit rows a poll brings, the failed
//  ones only, each once, newest first, bounded, without arguments, and
//  kept while the broker does not answer.
static void
test_failures (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (1);
    json_t *poll = s_poll (1, 1, 0, 1, 0);
    json_object_set_new (poll, "latestCalls", s_json (
        "[{\"broker\": \"b\", \"seq\": 3, \"record\": {\"outcome\": \"RATE_LIMITED\", \"tool\": \"write_file\","
        "  \"agent\": \"loop\", \"callId\": \"c3\", \"traceId\": \"0af7651916cd43dd8448eb211c80319c\","
        "  \"answeredMs\": 30, \"arguments\": {\"secret\": 1}}},"
        " {\"broker\": \"b\", \"seq\": 2, \"record\": {\"outcome\": \"ok\", \"tool\": \"echo\"}},"
        " {\"broker\": \"b\", \"seq\": 1, \"record\": {\"outcome\": \"TOOL_FAILED\", \"tool\": \"fail\"}},"
        " {\"broker\": \"b\", \"seq\": 0, \"record\": null}]"));
    dsh_monitor_model_poll (model, poll, 1000, 1);
    json_decref (poll);
    json_t *stats = dsh_monitor_model_stats (model);
    assert_null (json_object_get (stats, "latestCalls"));
    json_t *failures = json_object_get (stats, "failures");
    assert_int_equal (json_array_size (failures), 2);
    json_t *first = json_array_get (failures, 0);
    assert_string_equal (json_string_value (json_object_get (first, "outcome")), "RATE_LIMITED");
    assert_string_equal (json_string_value (json_object_get (first, "traceId")), "0af7651916cd43dd8448eb211c80319c");
    assert_string_equal (json_string_value (json_object_get (first, "callId")), "c3");
    assert_int_equal (json_integer_value (json_object_get (first, "seq")), 3);
    assert_null (json_object_get (first, "arguments"));
    assert_string_equal (json_string_value (json_object_get (json_array_get (failures, 1), "tool")), "fail");
    json_decref (stats);

    //  The same rows again, and a newer failure: each once, newest first
    poll = s_poll (1, 1, 0, 1, 0);
    json_object_set_new (poll, "latestCalls", s_json (
        "[{\"broker\": \"b\", \"seq\": 4, \"record\": {\"outcome\": \"DENIED\", \"tool\": \"tick\"}},"
        " {\"broker\": \"b\", \"seq\": 3, \"record\": {\"outcome\": \"RATE_LIMITED\", \"tool\": \"write_file\"}}]"));
    dsh_monitor_model_poll (model, poll, 2000, 2);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    failures = json_object_get (stats, "failures");
    assert_int_equal (json_array_size (failures), 3);
    assert_string_equal (json_string_value (json_object_get (json_array_get (failures, 0), "outcome")), "DENIED");
    assert_int_equal (json_integer_value (json_object_get (json_array_get (failures, 1), "seq")), 3);
    json_decref (stats);

    //  Kept while the broker does not answer
    poll = s_json ("{\"reachable\": false, \"error\": \"no reply\"}");
    dsh_monitor_model_poll (model, poll, 3000, 3);
    json_decref (poll);
    stats = dsh_monitor_model_stats_public (model);
    assert_int_equal (json_array_size (json_object_get (stats, "failures")), 3);
    json_decref (stats);

    //  At most DSH_MONITOR_FAILURES_KEPT, the newest
    json_t *rows = json_array ();
    for (int seq = 100; seq > 60; seq--)
        json_array_append_new (rows, json_pack ("{s:s, s:i, s:{s:s}}", "broker", "b", "seq", seq,
                                                "record", "outcome", "TIMEOUT"));
    poll = s_poll (1, 1, 0, 1, 0);
    json_object_set_new (poll, "latestCalls", rows);
    dsh_monitor_model_poll (model, poll, 4000, 4);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    failures = json_object_get (stats, "failures");
    assert_int_equal (json_array_size (failures), DSH_MONITOR_FAILURES_KEPT);
    assert_int_equal (json_integer_value (json_object_get (json_array_get (failures, 0), "seq")), 100);
    assert_int_equal (json_integer_value (json_object_get (json_array_get (failures, DSH_MONITOR_FAILURES_KEPT - 1),
                                                           "seq")), 100 - DSH_MONITOR_FAILURES_KEPT + 1);
    json_decref (stats);
    //  Read again (the monitor reads from a little before the newest), with
    //  rows long out of the ring: none comes back; another broker's are its own
    poll = s_poll (1, 1, 0, 1, 0);
    json_object_set_new (poll, "latestCalls", s_json (
        "[{\"broker\": \"other\", \"seq\": 7, \"record\": {\"outcome\": \"TIMEOUT\"}},"
        " {\"broker\": \"b\", \"seq\": 70, \"record\": {\"outcome\": \"TIMEOUT\"}},"
        " {\"broker\": \"b\", \"seq\": 61, \"record\": {\"outcome\": \"TIMEOUT\"}}]"));
    dsh_monitor_model_poll (model, poll, 5000, 5);
    json_decref (poll);
    stats = dsh_monitor_model_stats (model);
    failures = json_object_get (stats, "failures");
    assert_int_equal (json_array_size (failures), DSH_MONITOR_FAILURES_KEPT);
    assert_string_equal (json_string_value (json_object_get (json_array_get (failures, 0), "broker")), "other");
    assert_int_equal (json_integer_value (json_object_get (json_array_get (failures, 1), "seq")), 100);
    json_decref (stats);
    dsh_monitor_model_destroy (&model);
}

//  The broker's own figures, agents' calls in flight and components'
//  workers and queue in /metrics; a broker that gives no figure, none.
static void
test_metrics_figures (void **state)
{
    (void) state;
    dsh_monitor_model_t *model = dsh_monitor_model_new (1);
    json_t *poll = s_poll (1, 1, 0, 1, 0);
    json_t *stats = json_object_get (poll, "stats");
    json_object_set_new (stats, "rssBytes", json_integer (20971520));
    json_object_set_new (stats, "connections", json_integer (3));
    json_object_set_new (stats, "queued", json_integer (2));
    json_object_set_new (stats, "queueBytes", json_integer (512));
    json_array_append_new (json_object_get (stats, "agents"), s_json (
        "{\"agent\": \"loop\", \"calls\": 9, \"errors\": 4, \"inFlight\": 2, \"outcomes\": {\"RATE_LIMITED\": 4}}"));
    json_array_append_new (json_object_get (stats, "components"), s_json (
        "{\"id\": \"c\", \"served\": 1, \"inFlight\": 0, \"heartbeatAgeMs\": 5, \"workers\": 8, \"queued\": 1,"
        " \"host\": \"h\", \"pid\": 7, \"version\": \"dsh-c/0.1.0\", \"uptimeMs\": 100}"));
    dsh_monitor_model_poll (model, poll, 1000, 1);
    json_decref (poll);
    json_t *tools = dsh_monitor_model_tools (model);
    json_t *last = dsh_monitor_model_stats (model);
    char *text = dsh_monitor_metrics (tools, last);
    assert_non_null (strstr (text, "# TYPE dsh_broker_resident_memory_bytes gauge\ndsh_broker_resident_memory_bytes 20971520\n"));
    assert_non_null (strstr (text, "dsh_broker_connections 3\n"));
    assert_non_null (strstr (text, "dsh_broker_queued_calls 2\n"));
    assert_non_null (strstr (text, "dsh_broker_queue_bytes 512\n"));
    assert_non_null (strstr (text, "dsh_agent_inflight{agent=\"loop\"} 2\n"));
    assert_non_null (strstr (text, "dsh_component_workers{component=\"c\"} 8\n"));
    assert_non_null (strstr (text, "dsh_component_queued{component=\"c\"} 1\n"));
    free (text);
    json_decref (last);
    //  An older broker: no figures, no families
    poll = s_poll (1, 1, 0, 1, 0);
    dsh_monitor_model_poll (model, poll, 2000, 2);
    json_decref (poll);
    last = dsh_monitor_model_stats (model);
    text = dsh_monitor_metrics (tools, last);
    assert_null (strstr (text, "dsh_broker_resident_memory_bytes"));
    assert_null (strstr (text, "dsh_broker_queue_bytes"));
    free (text);
    json_decref (last);
    json_decref (tools);
    dsh_monitor_model_destroy (&model);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_metrics_quarantined),
        cmocka_unit_test (test_quantile),
        cmocka_unit_test (test_tool_set),
        cmocka_unit_test (test_rates),
        cmocka_unit_test (test_last_known),
        cmocka_unit_test (test_audit_metrics),
        cmocka_unit_test (test_pending),
        cmocka_unit_test (test_quarantined_marks),
        cmocka_unit_test (test_decision_check),
        cmocka_unit_test (test_history),
        cmocka_unit_test (test_history_tools_bound),
        cmocka_unit_test (test_failures),
        cmocka_unit_test (test_metrics_figures),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
