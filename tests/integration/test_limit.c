/*  =========================================================================
    test_limit - the limit stage in a real broker's chain, first: a rate
    over its bucket answered RATE_LIMITED with retryAfterMs (and the C
    client's accessor), a cap on calls in flight released exactly once on
    every way a call ends (its result, an error result, a veto below, the
    deadline, a cancel, the broker answering it, its component gone),
    the outcome in STATS per tool and per agent and in the audit record,
    `dsh limit` list, set and reset, and two brokers counting each for
    itself
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/stat.h>

#include "dsh.h"
#include "dsh_curve.h"
#include "dsh_monitor_metrics.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

static const char *s_config =
    "chain\n"
    "    stage\n"
    "        name = \"limit\"\n"
    "        kind = \"limit\"\n"
    "        rule\n"
    "            tool = \"echo\"\n"
    "            rate = 5\n"
    "            burst = 5\n"
    "        rule\n"
    "            agent = \"slow-*\"\n"
    "            in_flight = 1\n"
    "    stage\n"
    "        name = \"plan\"\n"
    "        kind = \"plan\"\n";

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
    dsh_client_t *client;
} fixture_t;

static fixture_t *
s_start (const char *config)
{
    fixture_t *self = (fixture_t *) zmalloc (sizeof (fixture_t));
    self->broker = dsh_testkit_broker_config (200, config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    self->client = dsh_client_new (self->endpoint);
    return self;
}

static void
s_stop (fixture_t **self_p)
{
    fixture_t *self = *self_p;
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
    free (self);
    *self_p = NULL;
}

static dsh_reply_t *
s_call (fixture_t *self, const char *name, const char *args, const char *agent, int timeout_ms)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (self->client, name, args, agent, timeout_ms, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s: %s", name, error);
    return reply;
}

//  The code of the call's answer ("ok" for success); destroys the reply.
static char *
s_outcome (dsh_reply_t **reply_p)
{
    dsh_reply_t *reply = *reply_p;
    char *code = strdup (dsh_reply_is_error (reply)? dsh_reply_error_code (reply): "ok");
    dsh_reply_destroy (reply_p);
    return code;
}

static void
s_expect_outcome (fixture_t *self, const char *name, const char *args, const char *agent, const char *expected)
{
    dsh_reply_t *reply = s_call (self, name, args, agent, 10000);
    char *code = s_outcome (&reply);
    if (!streq (code, expected))
        fail_msg ("%s as %s: %s, expected %s", name, agent, code, expected);
    zstr_free (&code);
}

//  The stage's "limits" data.
static json_t *
s_limits (fixture_t *self)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_control (self->client, "limit", "limits", NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    json_t *body = dsh_reply_json (reply);
    json_t *data = json_incref (json_object_get (body, "data"));
    json_decref (body);
    dsh_reply_destroy (&reply);
    return data;
}

//  The calls in flight the stage counts for agent (under the in_flight
//  rule, index 1); -1 if it has no entry.
static json_int_t
s_in_flight (fixture_t *self, const char *agent)
{
    json_t *limits = s_limits (self);
    json_int_t count = -1;
    json_t *entry;
    size_t index;
    json_array_foreach (json_object_get (limits, "agents"), index, entry)
        if (streq (json_string_value (json_object_get (entry, "agent")), agent)
        &&  json_integer_value (json_object_get (entry, "rule")) == 1)
            count = json_integer_value (json_object_get (entry, "inFlight"));
    json_decref (limits);
    return count;
}

//  The one reply to call_id, waiting up to timeout_ms.
static dsh_reply_t *
s_reply_to (fixture_t *self, const char *call_id, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (zclock_mono () < give_up) {
        dsh_reply_t *reply = dsh_client_recv (self->client, 500);
        if (reply && streq (dsh_reply_command (reply), DSH_RESULT)
        &&  dsh_reply_call_id (reply) && streq (dsh_reply_call_id (reply), call_id))
            return reply;
        dsh_reply_destroy (&reply);
    }
    fail_msg ("no reply to %s", call_id);
    return NULL;
}

static const char *
s_send (fixture_t *self, const char *call_id, const char *name, const char *args, const char *agent,
        int timeout_ms)
{
    msgpack_sbuffer packed;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (args, &packed, error, sizeof (error)), 0);
    const char *sent = dsh_client_call_send (self->client, call_id, name, packed.data, packed.size, agent,
                                             NULL, 0, timeout_ms);
    msgpack_sbuffer_destroy (&packed);
    assert_non_null (sent);
    return sent;
}

static void
test_rate (void **state)
{
    (void) state;
    fixture_t *self = s_start (s_config);
    for (int index = 0; index < 5; index++)
        s_expect_outcome (self, "echo", "{\"message\": \"hi\"}", "r", "ok");
    dsh_reply_t *reply = s_call (self, "echo", "{\"message\": \"hi\"}", "r", 10000);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), "RATE_LIMITED");
    const char *prefix = "Error: agent \"r\" is over its limit for \"echo\" (5/s, burst 5); retry after ";
    assert_memory_equal (dsh_reply_text (reply), prefix, strlen (prefix));
    int64_t retry = dsh_reply_retry_after_ms (reply);
    assert_true (retry >= 1 && retry <= 200);
    json_t *body = dsh_reply_json (reply);
    json_t *error = json_object_get (body, "error");
    assert_string_equal (json_string_value (json_object_get (error, "name")), "RateLimitedError");
    assert_int_equal (json_integer_value (json_object_get (error, "retryAfterMs")), retry);
    json_decref (body);
    dsh_reply_destroy (&reply);
    //  After the wait, a token again; other agents and tools were never limited
    zclock_sleep ((int) retry + 20);
    s_expect_outcome (self, "echo", "{\"message\": \"hi\"}", "r", "ok");
    s_expect_outcome (self, "echo", "{\"message\": \"hi\"}", "other", "ok");
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", "r", "ok");
    //  A successful reply has no retryAfterMs
    reply = s_call (self, "sleep_ms", "{\"ms\": 0}", "r", 10000);
    assert_int_equal (dsh_reply_retry_after_ms (reply), -1);
    dsh_reply_destroy (&reply);

    //  STATS: its own outcome, per tool and per agent
    reply = NULL;
    for (int index = 0; index < 10; index++) {
        reply = s_call (self, "echo", "{\"message\": \"hi\"}", "flood", 10000);
        char *code = s_outcome (&reply);
        bool limited = streq (code, "RATE_LIMITED");
        zstr_free (&code);
        if (limited)
            break;
    }
    char why [256];
    reply = dsh_client_request (self->client, DSH_STATS, NULL, 5000, why, sizeof (why));
    assert_non_null (reply);
    json_t *stats = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    json_t *row;
    size_t index;
    json_int_t echo_limited = 0, flood_limited = 0, r_limited = 0;
    json_array_foreach (json_object_get (stats, "tools"), index, row)
        if (streq (json_string_value (json_object_get (row, "name")), "echo"))
            echo_limited = json_integer_value (json_object_get (json_object_get (row, "outcomes"), "RATE_LIMITED"));
    json_array_foreach (json_object_get (stats, "agents"), index, row) {
        json_int_t limited = json_integer_value (json_object_get (json_object_get (row, "outcomes"), "RATE_LIMITED"));
        if (streq (json_string_value (json_object_get (row, "agent")), "flood"))
            flood_limited = limited;
        if (streq (json_string_value (json_object_get (row, "agent")), "r"))
            r_limited = limited;
    }
    //  The monitor's /metrics, made from this STATS, counts it by code
    //  (the model's stats: whether the broker answered, and its STATS body)
    json_t *model = json_pack ("{s:b, s:O}", "reachable", 1, "stats", stats);
    char *metrics = dsh_monitor_metrics (NULL, model);
    json_decref (model);
    assert_non_null (strstr (metrics, "dsh_calls_total{tool=\"echo\",code=\"RATE_LIMITED\"} 2\n"));
    free (metrics);
    json_decref (stats);
    assert_int_equal (flood_limited, 1);
    assert_int_equal (r_limited, 1);
    assert_int_equal (echo_limited, 2);

    //  The audit record: the stage's veto with its code, no component
    const char *audit [] = { "audit", "--json", "--outcome", "RATE_LIMITED", "--agent", "r", NULL };
    char *output = NULL;
    json_t *record = NULL;
    for (int attempt = 0; attempt < 100 && !record; attempt++) {
        zstr_free (&output);
        if (dsh_testkit_cli (self->endpoint, audit, 10000, &output) == 0 && output && *output)
            record = json_loads (output, JSON_DISABLE_EOF_CHECK, NULL);
        else
            zclock_sleep (100);
    }
    zstr_free (&output);
    assert_non_null (record);
    assert_string_equal (json_string_value (json_object_get (record, "outcome")), "RATE_LIMITED");
    assert_null (json_object_get (record, "component"));
    json_t *stage = json_array_get (json_object_get (record, "stages"), 0);
    assert_string_equal (json_string_value (json_object_get (stage, "stage")), "limit");
    assert_string_equal (json_string_value (json_object_get (stage, "kind")), "limit");
    assert_string_equal (json_string_value (json_object_get (stage, "verdict")), "answered");
    assert_non_null (strstr (json_string_value (json_object_get (stage, "reason")), "RATE_LIMITED"));
    assert_int_equal (json_array_size (json_object_get (record, "stages")), 1);
    json_decref (record);
    s_stop (&self);
}

//  One call of agent ends by the way the caller makes it end; then the
//  agent's count is 0 and its next call is admitted.
static void
s_expect_released (fixture_t *self, const char *agent)
{
    assert_int_equal (s_in_flight (self, agent), 0);
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", agent, "ok");
    assert_int_equal (s_in_flight (self, agent), 0);
}

static void
test_in_flight_released (void **state)
{
    (void) state;
    fixture_t *self = s_start (s_config);

    //  Its result coming up; meanwhile a second call is over the cap
    s_send (self, "held-1", "sleep_ms", "{\"ms\": 400}", "slow-result", 10000);
    assert_int_equal (dsh_testkit_wait_in_flight (self->endpoint, "demo", 1, 5000), 0);
    assert_int_equal (s_in_flight (self, "slow-result"), 1);
    dsh_reply_t *reply = s_call (self, "sleep_ms", "{\"ms\": 0}", "slow-result", 10000);
    assert_string_equal (dsh_reply_error_code (reply), "RATE_LIMITED");
    assert_string_equal (dsh_reply_text (reply),
        "Error: agent \"slow-result\" is over its limit for \"sleep_ms\" (1 calls in flight, at most 1); "
        "retry when one of them ends");
    assert_int_equal (dsh_reply_retry_after_ms (reply), -1);
    dsh_reply_destroy (&reply);
    reply = s_reply_to (self, "held-1", 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    s_expect_released (self, "slow-result");

    //  An error result from the tool
    s_expect_outcome (self, "fail", "{}", "slow-fail", "TOOL_FAILED");
    s_expect_released (self, "slow-fail");

    //  A veto below: plan mode refuses a tool that is not read-only
    char error [256];
    json_t *args = json_pack ("{s:s, s:s}", "agent", "slow-veto", "mode", "plan");
    reply = dsh_client_control (self->client, "plan", "mode", args, 5000, error, sizeof (error));
    json_decref (args);
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    s_expect_outcome (self, "tick", "{\"ms\": 0}", "slow-veto", "DENIED");
    s_expect_outcome (self, "tick", "{\"ms\": 0}", "slow-veto", "DENIED");
    s_expect_released (self, "slow-veto");

    //  The broker answering it: no such tool
    s_expect_outcome (self, "nope", "{}", "slow-unknown", "UNKNOWN_TOOL");
    s_expect_outcome (self, "nope", "{}", "slow-unknown", "UNKNOWN_TOOL");
    s_expect_released (self, "slow-unknown");

    //  The deadline
    reply = s_call (self, "sleep_ms", "{\"ms\": 3000}", "slow-deadline", 300);
    char *code = s_outcome (&reply);
    assert_string_equal (code, "TIMEOUT");
    zstr_free (&code);
    s_expect_released (self, "slow-deadline");

    //  A cancel
    s_send (self, "held-2", "sleep_ms", "{\"ms\": 5000}", "slow-cancel", 10000);
    assert_int_equal (dsh_testkit_wait_in_flight (self->endpoint, "demo", 1, 5000), 0);
    assert_int_equal (s_in_flight (self, "slow-cancel"), 1);
    assert_int_equal (dsh_client_cancel (self->client, "held-2"), 0);
    reply = s_reply_to (self, "held-2", 10000);
    assert_string_equal (dsh_reply_error_code (reply), "CANCELLED");
    dsh_reply_destroy (&reply);
    s_expect_released (self, "slow-cancel");

    //  Its component gone: the broker answers TOOL_GONE
    s_send (self, "held-3", "sleep_ms", "{\"ms\": 30000}", "slow-gone", 20000);
    assert_int_equal (dsh_testkit_wait_in_flight (self->endpoint, "demo", 1, 5000), 0);
    dsh_testproc_signal (self->demo, SIGKILL);
    reply = s_reply_to (self, "held-3", 15000);
    assert_string_equal (dsh_reply_error_code (reply), "TOOL_GONE");
    dsh_reply_destroy (&reply);
    dsh_testproc_destroy (&self->demo);
    assert_int_equal (s_in_flight (self, "slow-gone"), 0);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    s_expect_released (self, "slow-gone");

    //  Many at once, ended every way, leave nothing counted
    for (int round = 0; round < 20; round++) {
        char agent [32];
        snprintf (agent, sizeof agent, "slow-many-%d", round);
        s_send (self, NULL, "sleep_ms", round % 2? "{\"ms\": 2000}": "{\"ms\": 1}", agent, round % 3? 10000: 100);
    }
    int answered = 0;
    int64_t give_up = zclock_mono () + 15000;
    while (answered < 20 && zclock_mono () < give_up) {
        reply = dsh_client_recv (self->client, 500);
        if (reply && streq (dsh_reply_command (reply), DSH_RESULT))
            answered++;
        dsh_reply_destroy (&reply);
    }
    assert_int_equal (answered, 20);
    json_t *limits = s_limits (self);
    json_t *entry;
    size_t index;
    json_array_foreach (json_object_get (limits, "agents"), index, entry)
        assert_int_equal (json_integer_value (json_object_get (entry, "inFlight")), 0);
    json_decref (limits);
    s_stop (&self);
}

static void
test_cli (void **state)
{
    (void) state;
    fixture_t *self = s_start (s_config);
    char *output = NULL;
    const char *list [] = { "limit", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, list, 10000, &output), 0);
    json_t *data = json_loads (output, 0, NULL);
    zstr_free (&output);
    assert_non_null (data);
    assert_int_equal (json_array_size (json_object_get (data, "rules")), 2);
    assert_int_equal (json_integer_value (json_object_get (data, "maxKeys")), 10000);
    json_decref (data);

    //  set: a tighter rule at run time, for one agent
    const char *set [] = { "limit", "limit", "set", "tight", "sleep_*", "--rate", "1", "--burst", "2", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, set, 10000, &output), 0);
    data = json_loads (output, 0, NULL);
    zstr_free (&output);
    assert_string_equal (json_string_value (json_object_get (data, "agent")), "tight");
    assert_string_equal (json_string_value (json_object_get (data, "tool")), "sleep_*");
    assert_true (json_number_value (json_object_get (data, "rate")) == 1);
    json_decref (data);
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", "tight", "ok");
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", "tight", "ok");
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", "tight", "RATE_LIMITED");
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", "loose", "ok");
    //  reset: the bucket is full again
    const char *reset [] = { "limit", "reset", "tight", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, reset, 10000, &output), 0);
    zstr_free (&output);
    s_expect_outcome (self, "sleep_ms", "{\"ms\": 0}", "tight", "ok");

    //  Usage errors: exit 2, nothing sent
    const char *no_number [] = { "limit", "set", "a", "t", NULL };
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, no_number, 10000, &output), 2);
    assert_non_null (strstr (output, "limit set needs --rate or --in-flight"));
    zstr_free (&output);
    const char *bad_rate [] = { "limit", "set", "a", "t", "--rate", "-3", NULL };
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, bad_rate, 10000, &output), 2);
    zstr_free (&output);
    const char *bad_op [] = { "limit", "limit", "drop", NULL };
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, bad_op, 10000, &output), 2);
    zstr_free (&output);
    //  The stage refuses a bad glob, and says why
    const char *bad_glob [] = { "limit", "set", "a", "[x", "--in-flight", "2", NULL };
    assert_int_not_equal (dsh_testkit_cli_merged (self->endpoint, bad_glob, 10000, &output), 0);
    assert_non_null (strstr (output, "is not a valid glob"));
    zstr_free (&output);
    //  No such stage
    const char *no_stage [] = { "limit", "quota", "list", NULL };
    assert_int_not_equal (dsh_testkit_cli_merged (self->endpoint, no_stage, 10000, &output), 0);
    assert_non_null (strstr (output, "no stage named"));
    zstr_free (&output);
    s_stop (&self);
}

//  Two brokers with one config: each counts for itself (PROTOCOL.md: per
//  broker, no store round trip per call), so an agent gets a burst at each;
//  `dsh limit set` with both in the list changes both.
static void
test_two_brokers (void **state)
{
    (void) state;
    const char *config =
        "chain\n"
        "    stage\n"
        "        name = \"limit\"\n"
        "        kind = \"limit\"\n"
        "        rule\n"
        "            tool = \"echo\"\n"
        "            rate = 0.1\n"
        "            burst = 3\n";
    fixture_t *first = s_start (config);
    fixture_t *second = s_start (config);
    for (int index = 0; index < 3; index++)
        s_expect_outcome (first, "echo", "{\"message\": \"x\"}", "twin", "ok");
    s_expect_outcome (first, "echo", "{\"message\": \"x\"}", "twin", "RATE_LIMITED");
    for (int index = 0; index < 3; index++)
        s_expect_outcome (second, "echo", "{\"message\": \"x\"}", "twin", "ok");
    s_expect_outcome (second, "echo", "{\"message\": \"x\"}", "twin", "RATE_LIMITED");

    char both [600];
    snprintf (both, sizeof both, "%s,%s", first->endpoint, second->endpoint);
    const char *set [] = { "limit", "set", "twin", "echo", "--in-flight", "5", NULL };
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli (both, set, 10000, &output), 0);
    json_t *answers = json_loads (output, 0, NULL);
    zstr_free (&output);
    assert_int_equal (json_array_size (answers), 2);
    for (size_t index = 0; index < 2; index++)
        assert_true (json_is_true (json_object_get (json_array_get (answers, index), "ok")));
    json_decref (answers);
    json_t *limits = s_limits (second);
    assert_int_equal (json_array_size (json_object_get (limits, "rules")), 2);
    json_decref (limits);
    s_stop (&second);
    s_stop (&first);
}

//  Under CURVE: the agent a limit counts is the key's (stamped in by the
//  broker though the call names none), and `limits` is open to an
//  auditor, `set` to an admin only. Last: it sets the test's own keys.
static void
test_curve (void **state)
{
    (void) state;
    char root [] = "/tmp/dsh-limit-curve-XXXXXX";
    assert_non_null (mkdtemp (root));
    char *allow = zsys_sprintf ("%s/allow", root);
    assert_int_equal (mkdir (allow, 0700), 0);
    struct { const char *name; const char *role; const char *components; const char *agent; } keys [] = {
        { "broker", DSH_ROLE_ADMIN, NULL, NULL },
        { "demo", DSH_ROLE_COMPONENT, "demo", NULL },
        { "alice", DSH_ROLE_AGENT, NULL, "alice" },
        { "admin", DSH_ROLE_ADMIN, NULL, NULL },
        { "auditor", DSH_ROLE_AUDITOR, NULL, NULL },
    };
    for (size_t index = 0; index < sizeof keys / sizeof keys [0]; index++) {
        char *path = zsys_sprintf ("%s/%s", root, keys [index].name);
        char error [256];
        if (dsh_curve_keygen (path, keys [index].role, keys [index].components, NULL, keys [index].agent,
                              keys [index].name, error, sizeof (error)))
            fail_msg ("keygen %s: %s", keys [index].name, error);
        if (index) {
            zcert_t *cert = zcert_load (path);
            assert_non_null (cert);
            char *target = zsys_sprintf ("%s/%s", allow, keys [index].name);
            assert_int_equal (zcert_save_public (cert, target), 0);
            zstr_free (&target);
            zcert_destroy (&cert);
        }
        zstr_free (&path);
    }
    char *broker_cert = zsys_sprintf ("%s/broker", root);
    char *admin_cert = zsys_sprintf ("%s/admin", root);
    char *demo_cert = zsys_sprintf ("%s/demo", root);
    char *alice_cert = zsys_sprintf ("%s/alice", root);
    char *auditor_cert = zsys_sprintf ("%s/auditor", root);
    char error [256];
    assert_int_equal (dsh_curve_setup (admin_cert, broker_cert, error, sizeof (error)), 0);
    char *config = zsys_sprintf (
        "security\n    certificate = \"%s\"\n    allow = \"%s\"\n"
        "chain\n    stage\n        name = \"limit\"\n        kind = \"limit\"\n"
        "        rule\n            agent = \"alice\"\n            tool = \"echo\"\n"
        "            rate = 0.1\n            burst = 1\n", broker_cert, allow);
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker_config (200, config, endpoint, sizeof (endpoint));
    zstr_free (&config);
    assert_non_null (broker);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, endpoint, "demo",
        (const char *[]) { "--cert", demo_cert, "--broker-cert", broker_cert, NULL });
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "echo", 1, 10000), 0);

    //  alice names no agent: the key's is stamped in, and counted
    const char *call [] = { "call", "echo", "{\"message\": \"x\"}", "--cert", alice_cert,
                            "--broker-cert", broker_cert, NULL };
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli_merged (endpoint, call, 10000, &output), 0);
    zstr_free (&output);
    assert_int_equal (dsh_testkit_cli_merged (endpoint, call, 10000, &output), 1);
    //  (the result, as JSON: its quotes escaped)
    if (!strstr (output, "RATE_LIMITED") || !strstr (output, "agent \\\"alice\\\" is over its limit for \\\"echo\\\""))
        fail_msg ("not refused as alice: %s", output);
    zstr_free (&output);

    //  limits: an auditor may read them, not change them; an agent neither
    const char *list [] = { "limit", "--cert", auditor_cert, "--broker-cert", broker_cert, NULL };
    assert_int_equal (dsh_testkit_cli_merged (endpoint, list, 10000, &output), 0);
    assert_non_null (strstr (output, "\"alice\""));
    zstr_free (&output);
    const char *set [] = { "limit", "set", "alice", "echo", "--rate", "100", "--cert", auditor_cert,
                           "--broker-cert", broker_cert, NULL };
    assert_int_equal (dsh_testkit_cli_merged (endpoint, set, 10000, &output), 1);
    assert_non_null (strstr (output, "may not send CONTROL"));
    zstr_free (&output);
    const char *agent_list [] = { "limit", "--cert", alice_cert, "--broker-cert", broker_cert, NULL };
    assert_int_equal (dsh_testkit_cli_merged (endpoint, agent_list, 10000, &output), 1);
    assert_non_null (strstr (output, "may not send CONTROL"));
    zstr_free (&output);
    //  The admin may: alice is let through again
    const char *admin_set [] = { "limit", "set", "alice", "echo", "--rate", "100", "--cert", admin_cert,
                                 "--broker-cert", broker_cert, NULL };
    assert_int_equal (dsh_testkit_cli_merged (endpoint, admin_set, 10000, &output), 0);
    zstr_free (&output);
    assert_int_equal (dsh_testkit_cli_merged (endpoint, call, 10000, &output), 0);
    zstr_free (&output);

    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker);
    zstr_free (&broker_cert);
    zstr_free (&admin_cert);
    zstr_free (&demo_cert);
    zstr_free (&alice_cert);
    zstr_free (&auditor_cert);
    zdir_t *dir = zdir_new (root, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
    zstr_free (&allow);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_rate),
        cmocka_unit_test (test_in_flight_released),
        cmocka_unit_test (test_cli),
        cmocka_unit_test (test_two_brokers),
        cmocka_unit_test (test_curve),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
