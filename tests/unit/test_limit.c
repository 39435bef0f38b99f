/*  =========================================================================
    test_limit - dsh_limit: the token bucket on a controlled clock, burst,
    calls in flight, globs, every matching rule applying, the bound on
    entries, bad settings refused, and the stage's control commands
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_limit.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "stage_control.h"

static dsh_limit_t *
s_limit (const char *text)
{
    zconfig_t *settings = text? zconfig_str_load (text): NULL;
    char error [256] = "";
    dsh_limit_t *limit = dsh_limit_new (settings, error, sizeof error);
    if (!limit)
        fail_msg ("settings refused: %s", error);
    zconfig_destroy (&settings);
    return limit;
}

//  The settings' refusal, or "" if they were taken.
static char *
s_refusal (const char *text)
{
    zconfig_t *settings = zconfig_str_load (text);
    assert_non_null (settings);
    char error [256] = "";
    dsh_limit_t *limit = dsh_limit_new (settings, error, sizeof error);
    dsh_limit_destroy (&limit);
    zconfig_destroy (&settings);
    return strdup (error);
}

//  Admits or refuses; on refusal *retry and the text are checked by the
//  caller through the returned text (NULL: admitted). Tickets go to *ticket.
static char *
s_admit (dsh_limit_t *limit, const char *agent, const char *tool, int64_t now_ms, int64_t *retry,
         dsh_limit_ticket_t **ticket)
{
    dsh_limit_ticket_t *held = NULL;
    char *refusal = NULL;
    int64_t retry_ms = -2;
    int rc = dsh_limit_admit (limit, agent, tool, now_ms, &held, &refusal, &retry_ms);
    assert_int_equal (rc == 0, refusal == NULL);
    if (retry)
        *retry = retry_ms;
    if (ticket)
        *ticket = held;
    else
        dsh_limit_release (&held);
    return refusal;
}

static void
test_bucket (void **state)
{
    (void) state;
    dsh_limit_bucket_t bucket;
    dsh_limit_bucket_init (&bucket, 2, 1000);
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 1000), 0);
    bucket.tokens -= 1;
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 1000), 0);
    bucket.tokens -= 1;
    //  Empty: 4 per second is one every 250 ms
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 1000), 250);
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 1100), 150);
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 1250), 0);
    //  Never more than burst, however long it waited
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 100000), 0);
    assert_true (bucket.tokens == 2);
    //  A clock that goes back adds nothing
    bucket.tokens = 0;
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 4, 2, 50), 250);
    //  Fractional rate: one call in 2 s
    dsh_limit_bucket_init (&bucket, 1, 0);
    bucket.tokens = 0;
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 0.5, 1, 0), 2000);
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 0.5, 1, 1999), 1);
    assert_int_equal (dsh_limit_bucket_refill (&bucket, 0.5, 1, 2000), 0);
}

static void
test_rate_and_burst (void **state)
{
    (void) state;
    dsh_limit_t *limit = s_limit ("rule\n    tool = \"write_*\"\n    rate = 10\n    burst = 20\n");
    //  A full bucket: 20 at once, then one every 100 ms
    for (int index = 0; index < 20; index++)
        assert_null (s_admit (limit, "a", "write_file", 0, NULL, NULL));
    int64_t retry = 0;
    char *refusal = s_admit (limit, "a", "write_file", 0, &retry, NULL);
    assert_non_null (refusal);
    assert_string_equal (refusal,
        "agent \"a\" is over its limit for \"write_file\" (10/s, burst 20); retry after 100 ms");
    assert_int_equal (retry, 100);
    zstr_free (&refusal);
    //  A refused call took no token
    refusal = s_admit (limit, "a", "write_file", 65, &retry, NULL);
    assert_int_equal (retry, 35);
    zstr_free (&refusal);
    assert_null (s_admit (limit, "a", "write_file", 100, NULL, NULL));
    refusal = s_admit (limit, "a", "write_file", 100, &retry, NULL);
    assert_non_null (refusal);
    zstr_free (&refusal);
    //  Another agent has a bucket of its own; another tool is not limited
    assert_null (s_admit (limit, "b", "write_file", 100, NULL, NULL));
    assert_null (s_admit (limit, "a", "read_file", 100, NULL, NULL));
    //  No agent is agent ""
    for (int index = 0; index < 20; index++)
        assert_null (s_admit (limit, NULL, "write_x", 0, NULL, NULL));
    refusal = s_admit (limit, NULL, "write_x", 0, NULL, NULL);
    assert_string_equal (refusal,
        "agent \"\" is over its limit for \"write_x\" (10/s, burst 20); retry after 100 ms");
    zstr_free (&refusal);
    dsh_limit_destroy (&limit);

    //  burst defaults to max (1, rate)
    limit = s_limit ("rule\n    rate = 0.5\n");
    assert_null (s_admit (limit, "a", "t", 0, NULL, NULL));
    refusal = s_admit (limit, "a", "t", 0, &retry, NULL);
    assert_string_equal (refusal, "agent \"a\" is over its limit for \"t\" (0.5/s, burst 1); retry after 2000 ms");
    zstr_free (&refusal);
    dsh_limit_destroy (&limit);
    limit = s_limit ("rule\n    rate = 3\n");
    for (int index = 0; index < 3; index++)
        assert_null (s_admit (limit, "a", "t", 0, NULL, NULL));
    refusal = s_admit (limit, "a", "t", 0, NULL, NULL);
    assert_non_null (refusal);
    zstr_free (&refusal);
    dsh_limit_destroy (&limit);
}

static void
test_in_flight (void **state)
{
    (void) state;
    dsh_limit_t *limit = s_limit ("rule\n    agent = \"bot-*\"\n    in_flight = 2\n");
    dsh_limit_ticket_t *first = NULL, *second = NULL, *third = NULL;
    assert_null (s_admit (limit, "bot-1", "t", 0, NULL, &first));
    assert_non_null (first);
    assert_null (s_admit (limit, "bot-1", "u", 0, NULL, &second));
    assert_int_equal (dsh_limit_in_flight (limit, 0, "bot-1"), 2);
    int64_t retry = 0;
    char *refusal = s_admit (limit, "bot-1", "v", 0, &retry, &third);
    assert_string_equal (refusal,
        "agent \"bot-1\" is over its limit for \"v\" (2 calls in flight, at most 2); retry when one of them ends");
    assert_int_equal (retry, -1);
    assert_null (third);
    zstr_free (&refusal);
    //  Agents the glob does not match get no ticket at all
    assert_null (s_admit (limit, "human", "t", 0, NULL, &third));
    assert_null (third);
    dsh_limit_release (&first);
    assert_null (first);
    dsh_limit_release (&first);
    assert_int_equal (dsh_limit_in_flight (limit, 0, "bot-1"), 1);
    assert_null (s_admit (limit, "bot-1", "v", 0, NULL, &third));
    dsh_limit_release (&second);
    dsh_limit_release (&third);
    assert_int_equal (dsh_limit_in_flight (limit, 0, "bot-1"), 0);
    dsh_limit_destroy (&limit);
}

static void
test_every_rule_applies (void **state)
{
    (void) state;
    //  A general rule and a tighter one on write tools: a write takes from
    //  both, and passes only if both admit it
    dsh_limit_t *limit = s_limit (
        "rule\n    rate = 5\n    burst = 5\n"
        "rule\n    tool = \"write_*\"\n    rate = 1\n    burst = 2\n    in_flight = 1\n");
    dsh_limit_ticket_t *ticket = NULL;
    assert_null (s_admit (limit, "a", "write_file", 0, NULL, &ticket));
    assert_non_null (ticket);
    //  The write rule's cap refuses; the general bucket keeps its token
    char *refusal = s_admit (limit, "a", "write_file", 0, NULL, NULL);
    assert_non_null (strstr (refusal, "(1 calls in flight, at most 1)"));
    zstr_free (&refusal);
    dsh_limit_release (&ticket);
    assert_null (s_admit (limit, "a", "write_file", 0, NULL, NULL));
    //  The write bucket is empty now: 3 more reads pass (5 - 2 taken)
    int64_t retry = 0;
    refusal = s_admit (limit, "a", "write_file", 0, &retry, NULL);
    assert_string_equal (refusal,
        "agent \"a\" is over its limit for \"write_file\" (1/s, burst 2); retry after 1000 ms");
    assert_int_equal (retry, 1000);
    zstr_free (&refusal);
    for (int index = 0; index < 3; index++)
        assert_null (s_admit (limit, "a", "read_file", 0, NULL, NULL));
    //  Both refuse: the first rule's words, the longest wait
    refusal = s_admit (limit, "a", "write_file", 0, &retry, NULL);
    assert_string_equal (refusal,
        "agent \"a\" is over its limit for \"write_file\" (5/s, burst 5); retry after 200 ms");
    assert_int_equal (retry, 1000);
    zstr_free (&refusal);
    dsh_limit_destroy (&limit);
}

static void
test_globs (void **state)
{
    (void) state;
    dsh_limit_t *limit = s_limit (
        "rule\n    agent = \"team-[ab]?\"\n    tool = \"fs.*\"\n    rate = 1\n");
    assert_null (s_admit (limit, "team-a1", "fs.write", 0, NULL, NULL));
    char *refusal = s_admit (limit, "team-a1", "fs.read", 0, NULL, NULL);
    assert_non_null (refusal);
    zstr_free (&refusal);
    assert_null (s_admit (limit, "team-c1", "fs.write", 0, NULL, NULL));
    assert_null (s_admit (limit, "team-c1", "fs.write", 0, NULL, NULL));
    assert_null (s_admit (limit, "team-b2", "other", 0, NULL, NULL));
    assert_null (s_admit (limit, "team-b2", "other", 0, NULL, NULL));
    dsh_limit_destroy (&limit);
}

static void
test_eviction_bound (void **state)
{
    (void) state;
    dsh_limit_t *limit = s_limit ("max_keys = 100\nrule\n    rate = 1\nrule\n    tool = \"t*\"\n    in_flight = 1\n");
    //  An attacker cycling agent ids: never more than max_keys entries
    for (int index = 0; index < 5000; index++) {
        char agent [32];
        snprintf (agent, sizeof agent, "agent-%d", index);
        assert_null (s_admit (limit, agent, "t", 0, NULL, NULL));
        assert_true (dsh_limit_keys (limit) <= 100);
    }
    //  The least recently used went: agent-0 has a full bucket again, the
    //  latest still has an empty one
    assert_null (s_admit (limit, "agent-0", "t", 0, NULL, NULL));
    char *refusal = s_admit (limit, "agent-4999", "t", 0, NULL, NULL);
    assert_non_null (refusal);
    zstr_free (&refusal);
    //  An entry with a call in flight is never evicted: its count stays
    dsh_limit_ticket_t *ticket = NULL;
    assert_null (s_admit (limit, "busy", "t", 0, NULL, &ticket));
    for (int index = 0; index < 500; index++) {
        char agent [32];
        snprintf (agent, sizeof agent, "other-%d", index);
        assert_null (s_admit (limit, agent, "t", 0, NULL, NULL));
    }
    assert_int_equal (dsh_limit_in_flight (limit, 1, "busy"), 1);
    refusal = s_admit (limit, "busy", "t2", 5000, NULL, NULL);
    assert_non_null (strstr (refusal, "calls in flight"));
    zstr_free (&refusal);
    assert_true (dsh_limit_keys (limit) <= 100 + 2);
    dsh_limit_release (&ticket);
    dsh_limit_destroy (&limit);

    //  max_keys 1 and two rules: an admission never evicts its own entries
    limit = s_limit ("max_keys = 1\nrule\n    rate = 1\nrule\n    tool = \"t\"\n    in_flight = 1\n");
    assert_null (s_admit (limit, "a", "t", 0, NULL, &ticket));
    assert_int_equal (dsh_limit_in_flight (limit, 1, "a"), 1);
    dsh_limit_release (&ticket);
    assert_null (s_admit (limit, "b", "t", 0, NULL, NULL));
    dsh_limit_destroy (&limit);
}

static void
test_bad_settings (void **state)
{
    (void) state;
    struct { const char *settings; const char *refusal; } cases [] = {
        { "rule\n    rate = -1\n", "rule 1: rate must be a number above 0, not \"-1\"" },
        { "rule\n    rate = 0\n", "rule 1: rate must be a number above 0, not \"0\"" },
        { "rule\n    rate = fast\n", "rule 1: rate must be a number above 0, not \"fast\"" },
        { "rule\n    rate = 1\nrule\n    rat = 1\n",
          "rule 2: unknown setting \"rat\" (agent, tool, rate, burst, in_flight)" },
        { "rule\n    tool = \"write_[\"\n    rate = 1\n",
          "rule 1: tool \"write_[\" is not a valid glob: it has a [ that is not closed" },
        { "rule\n    agent = \"\"\n    rate = 1\n", "rule 1: agent \"\" is not a valid glob: it is empty" },
        { "rule\n    in_flight = 1.5\n", "rule 1: in_flight must be a whole number, not \"1.5\"" },
        { "rule\n    burst = 5\n", "rule 1: burst needs a rate" },
        { "rule\n    agent = \"x\"\n", "rule 1: a rule needs rate or in_flight" },
        { "rule\n    rate = 1\n    burst = 0.5\n", "rule 1: burst must be a number from 1 to 1000000" },
        { "rule\n    rate = 2000000\n", "rule 1: rate must be a number of calls per second above 0, at most 1000000" },
        { "rule\n    rate = 1\nrule\n    rate = 2\n", "rule 2: agent \"*\" and tool \"*\" are an earlier rule's" },
        { "max_keys = 0\n", "max_keys: \"0\" is not a whole number from 1 to 1000000" },
        { "rules = 1\n", "unknown setting \"rules\" (rule, max_keys)" },
    };
    for (size_t index = 0; index < sizeof cases / sizeof cases [0]; index++) {
        char *refusal = s_refusal (cases [index].settings);
        if (!streq (refusal, cases [index].refusal))
            fail_msg ("case %zu: got \"%s\", wanted \"%s\"", index, refusal, cases [index].refusal);
        zstr_free (&refusal);
    }
    //  A \ escapes the next byte, so one at the end escapes nothing
    dsh_limit_t *limit = s_limit (NULL);
    char error [256] = "";
    assert_int_equal (dsh_limit_set (limit, "a\\", NULL, 1, 0, 0, error, sizeof error), -1);
    assert_string_equal (error, "agent \"a\\\" is not a valid glob: it ends in a \\");
    assert_int_equal (dsh_limit_set (limit, "a\\\\", "[!]x]", 1, 0, 0, error, sizeof error), 0);
    assert_int_equal (dsh_limit_set (limit, "*", "*", 0, 0, 0, error, sizeof error), -1);
    assert_string_equal (error, "a rule needs rate or in_flight");
    dsh_limit_destroy (&limit);
    //  The chain's own keys are the chain's
    char *refusal = s_refusal ("name = \"limit\"\nkind = \"limit\"\ntimeout_ms = 100\n");
    assert_string_equal (refusal, "");
    zstr_free (&refusal);
}

static void
test_control (void **state)
{
    (void) state;
    zconfig_t *settings = zconfig_str_load ("rule\n    rate = 2\n    burst = 2\n");
    dsh_stage_callbacks_t callbacks;
    void *arg = NULL;
    char error [256] = "";
    dsh_middleware_context_t context = { "limit", "tcp://127.0.0.1:1", NULL };
    assert_int_equal (dsh_limit_setup (settings, &context, &callbacks, &arg, error, sizeof error), 0);
    zconfig_destroy (&settings);
    dsh_limit_t *limit = (dsh_limit_t *) arg;
    assert_null (s_admit (limit, "a", "t", zclock_mono (), NULL, NULL));

    char *reason = NULL;
    json_t *reply = stage_control (&callbacks, "limits", NULL, &reason, arg);
    assert_non_null (reply);
    assert_int_equal (json_integer_value (json_object_get (reply, "maxKeys")), 10000);
    assert_int_equal (json_integer_value (json_object_get (reply, "keys")), 1);
    json_t *rule = json_array_get (json_object_get (reply, "rules"), 0);
    assert_string_equal (json_string_value (json_object_get (rule, "agent")), "*");
    assert_true (json_number_value (json_object_get (rule, "rate")) == 2);
    assert_true (json_number_value (json_object_get (rule, "burst")) == 2);
    assert_null (json_object_get (rule, "inFlight"));
    json_t *entry = json_array_get (json_object_get (reply, "agents"), 0);
    assert_string_equal (json_string_value (json_object_get (entry, "agent")), "a");
    assert_int_equal (json_integer_value (json_object_get (entry, "rule")), 0);
    assert_true (json_number_value (json_object_get (entry, "tokens")) < 1.5);
    assert_int_equal (json_integer_value (json_object_get (entry, "inFlight")), 0);
    json_decref (reply);

    //  set: a new rule, then the same globs again replace it
    json_t *args = json_pack ("{s:s, s:s, s:i}", "agent", "bot", "tool", "write_*", "inFlight", 3);
    reply = stage_control (&callbacks, "set", args, &reason, arg);
    json_decref (args);
    assert_non_null (reply);
    assert_int_equal (json_integer_value (json_object_get (reply, "inFlight")), 3);
    json_decref (reply);
    //  A rule is replaced whole: what set does not name, it has not
    args = json_pack ("{s:s, s:s, s:f, s:i, s:i}", "agent", "bot", "tool", "write_*", "rate", 1.5, "burst", 4,
                      "inFlight", 2);
    reply = stage_control (&callbacks, "set", args, &reason, arg);
    json_decref (args);
    assert_non_null (reply);
    assert_true (json_number_value (json_object_get (reply, "rate")) == 1.5);
    assert_true (json_number_value (json_object_get (reply, "burst")) == 4);
    json_decref (reply);
    assert_int_equal (dsh_limit_rules (limit), 2);
    //  The default globs are "*": this replaces the config's rule
    args = json_pack ("{s:i}", "rate", 100);
    reply = stage_control (&callbacks, "set", args, &reason, arg);
    json_decref (args);
    assert_true (json_number_value (json_object_get (reply, "burst")) == 100);
    json_decref (reply);
    assert_int_equal (dsh_limit_rules (limit), 2);

    //  Bad set args: a reason, nothing changed
    const char *bad [] = {
        "{\"rate\": -1}", "{\"rate\": \"fast\"}", "{\"agent\": 7, \"rate\": 1}", "{}",
        "{\"tool\": \"[\", \"rate\": 1}", "{\"inFlight\": 1.5}",
    };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++) {
        args = json_loads (bad [index], 0, NULL);
        reply = stage_control (&callbacks, "set", args, &reason, arg);
        json_decref (args);
        if (reply || !reason)
            fail_msg ("set %s was taken", bad [index]);
        zstr_free (&reason);
    }
    reply = stage_control (&callbacks, "set", NULL, &reason, arg);
    assert_null (reply);
    assert_non_null (strstr (reason, "set needs"));
    zstr_free (&reason);
    assert_int_equal (dsh_limit_rules (limit), 2);

    //  reset: buckets full again
    char *refusal = NULL;
    for (int index = 0; index < 10000 && !refusal; index++)
        refusal = s_admit (limit, "a", "t", zclock_mono (), NULL, NULL);
    assert_non_null (refusal);
    zstr_free (&refusal);
    args = json_pack ("{s:s}", "agent", "a");
    reply = stage_control (&callbacks, "reset", args, &reason, arg);
    json_decref (args);
    assert_int_equal (json_integer_value (json_object_get (reply, "forgot")), 1);
    json_decref (reply);
    assert_null (s_admit (limit, "a", "t", zclock_mono (), NULL, NULL));
    reply = stage_control (&callbacks, "reset", NULL, &reason, arg);
    assert_int_equal (json_integer_value (json_object_get (reply, "forgot")), 1);
    json_decref (reply);
    assert_int_equal (dsh_limit_keys (limit), 0);
    //  A ticket held through a reset keeps its count and comes back down
    dsh_limit_ticket_t *ticket = NULL;
    assert_null (s_admit (limit, "bot", "write_file", zclock_mono (), NULL, &ticket));
    reply = stage_control (&callbacks, "reset", NULL, &reason, arg);
    json_decref (reply);
    assert_int_equal (dsh_limit_in_flight (limit, 1, "bot"), 1);
    dsh_limit_release (&ticket);
    assert_int_equal (dsh_limit_in_flight (limit, 1, "bot"), 0);

    reply = stage_control (&callbacks, "nonsense", NULL, &reason, arg);
    assert_null (reply);
    assert_null (reason);
    callbacks.on_destroy (arg);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_bucket),
        cmocka_unit_test (test_rate_and_burst),
        cmocka_unit_test (test_in_flight),
        cmocka_unit_test (test_every_rule_applies),
        cmocka_unit_test (test_globs),
        cmocka_unit_test (test_eviction_bound),
        cmocka_unit_test (test_bad_settings),
        cmocka_unit_test (test_control),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
