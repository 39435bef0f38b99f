/*  =========================================================================
    test_parallel - many calls at once, end to end: a real broker and real
    dsh-demo processes on loopback

    Batches run concurrency-safe calls together and anything else alone,
    in order; cancellation before, during and after a handler, and racing
    the result; deadlines; a replica killed mid-call (idempotent calls are
    retried, others get TOOL_GONE); component backpressure; progress, also
    through a chain; and the soak: 10 000 calls with a replica killed and
    restarted, exactly one reply each, the broker's memory flat. The long
    suite (DSH_TEST_LONG=1, see dsh_testkit_long) runs the soak alone, with
    100 000 calls.

    The machine is shared and small: durations are asserted only against
    wide bounds that show parallel or exclusive execution, never speed.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <inttypes.h>
#include <signal.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

//  The soak: calls (the long suite's, the normal suite's), calls in
//  flight, replicas, and the warm-up it is measured against.
#define SOAK_CALLS_LONG     100000
#define SOAK_WARMUP_LONG    10000
#define SOAK_CALLS_SHORT    10000
#define SOAK_WARMUP_SHORT   2000
#define SOAK_IN_FLIGHT      64
#define SOAK_REPLICAS       4
#define SOAK_LIMIT_MS       240000
#define SOAK_RSS_SLACK_KB   (16 * 1024)

typedef struct {
    dsh_testproc_t *broker;
    char endpoint [256];
    dsh_client_t *client;
    //  Every component started, killed in teardown even when an assertion
    //  ends the test early (a leftover would join the next test's broker
    //  if that one got the same ephemeral port)
    dsh_testproc_t *components [16];
    size_t component_count;
} fixture_t;

//  A broker with a 200 ms heartbeat (expiry after 3 silent intervals),
//  and a client.
static int
s_setup (void **state)
{
    fixture_t *fixture = (fixture_t *) zmalloc (sizeof (fixture_t));
    fixture->broker = dsh_testkit_broker (200, NULL, fixture->endpoint, sizeof (fixture->endpoint));
    assert_non_null (fixture->broker);
    fixture->client = dsh_client_new (fixture->endpoint);
    assert_non_null (fixture->client);
    *state = fixture;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_client_destroy (&fixture->client);
    for (size_t index = 0; index < fixture->component_count; index++)
        dsh_testproc_destroy (&fixture->components [index]);
    dsh_testproc_destroy (&fixture->broker);
    free (fixture);
    return 0;
}

//  A dsh-demo with the given id and extra flags, owned by the fixture.
static dsh_testproc_t *
s_demo (fixture_t *fixture, const char *id, const char *const *extra)
{
    assert_true (fixture->component_count < sizeof (fixture->components) / sizeof (fixture->components [0]));
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, fixture->endpoint, id, extra);
    assert_non_null (demo);
    fixture->components [fixture->component_count++] = demo;
    return demo;
}

//  Waits until tool name has providers providers.
static void
s_wait_providers (fixture_t *fixture, const char *name, size_t providers)
{
    char error [256];
    int64_t give_up = zclock_mono () + 10000;
    size_t have = 0;
    while (have != providers && zclock_mono () < give_up) {
        dsh_reply_t *reply = dsh_client_request (fixture->client, DSH_GET, name, 1000, error, sizeof (error));
        if (reply && streq (dsh_reply_command (reply), DSH_TOOL))
            have = dsh_map_get (dsh_reply_body (reply), "providers")->via.array.size;
        dsh_reply_destroy (&reply);
        if (have != providers)
            zclock_sleep (50);
    }
    assert_int_equal (have, providers);
}

//  Sends a call with JSON arguments; returns its callId (caller frees).
static char *
s_send (dsh_client_t *client, const char *call_id, const char *name, const char *args, int timeout_ms)
{
    const char *sent = dsh_testkit_send_json (client, call_id, name, args, timeout_ms);
    assert_non_null (sent);
    return strdup (sent);
}

//  The next reply within timeout_ms, which must come.
static dsh_reply_t *
s_recv (dsh_client_t *client, int timeout_ms)
{
    dsh_reply_t *reply = dsh_client_recv (client, timeout_ms);
    if (!reply)
        fail_msg ("no reply within %d ms", timeout_ms);
    return reply;
}

//  A batch run, with its wall time.
static json_t *
s_batch (fixture_t *fixture, const char *calls_json, int64_t *elapsed_ms)
{
    json_error_t parse_error;
    json_t *calls = json_loads (calls_json, 0, &parse_error);
    assert_non_null (calls);
    char error [256];
    int64_t started = zclock_mono ();
    json_t *results = dsh_client_batch (fixture->client, calls, NULL, 20000, error, sizeof (error));
    if (elapsed_ms)
        *elapsed_ms = zclock_mono () - started;
    if (!results)
        fail_msg ("batch: %s", error);
    assert_int_equal (json_array_size (results), json_array_size (calls));
    json_decref (calls);
    return results;
}

static const char *
s_result_code (json_t *result)
{
    return json_string_value (json_object_get (json_object_get (result, "error"), "code"));
}

static const char *
s_result_text (json_t *result)
{
    return json_string_value (json_object_get (json_array_get (json_object_get (result, "content"), 0), "text"));
}

//  ---------------------------------------------------------------------
//  1. Batches

static void
test_batch_parallel_and_exclusive (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "batcher", (const char *[]) { "--workers", "8", NULL });
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);

    //  Eight concurrency-safe sleeps of a second run side by side: in a
    //  row they would take eight
    int64_t elapsed;
    json_t *results = s_batch (fixture,
        "[{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},"
        " {\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},"
        " {\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},"
        " {\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}},{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1000}}]",
        &elapsed);
    printf ("      batch of 8 x sleep_ms 1000 ms: %" PRId64 " ms\n", elapsed);
    assert_true (elapsed < 4000);
    assert_true (elapsed >= 900);
    unsigned long previous = 0;
    for (size_t index = 0; index < 8; index++) {
        json_t *result = json_array_get (results, index);
        assert_true (json_is_false (json_object_get (result, "isError")));
        assert_string_equal (s_result_text (result), "slept 1000 ms");
        //  Call order: the client numbers its call ids as it sends them
        const char *call_id = json_string_value (json_object_get (result, "callId"));
        assert_non_null (call_id);
        assert_non_null (strrchr (call_id, '-'));
        unsigned long sequence = strtoul (strrchr (call_id, '-') + 1, NULL, 10);
        assert_true (sequence > previous);
        previous = sequence;
    }
    json_decref (results);

    //  Ticks are not concurrency-safe: one at a time, in order, so their
    //  [start, end] intervals (one process's monotonic clock) never overlap
    results = s_batch (fixture,
        "[{\"name\":\"tick\",\"arguments\":{\"ms\":300}},{\"name\":\"tick\",\"arguments\":{\"ms\":300}},"
        " {\"name\":\"tick\",\"arguments\":{\"ms\":300}},{\"name\":\"tick\",\"arguments\":{\"ms\":300}}]",
        &elapsed);
    printf ("      batch of 4 x tick 300 ms: %" PRId64 " ms\n", elapsed);
    int64_t previous_end = 0;
    for (size_t index = 0; index < 4; index++) {
        json_t *result = json_array_get (results, index);
        assert_true (json_is_false (json_object_get (result, "isError")));
        int64_t start, end;
        assert_int_equal (sscanf (s_result_text (result), "%" SCNd64 " %" SCNd64, &start, &end), 2);
        assert_true (end - start >= 300);
        assert_true (start >= previous_end);
        previous_end = end;
    }
    json_decref (results);

    //  A mixed turn: one result per call, in order, whatever the others did
    results = s_batch (fixture,
        "[{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":100}},{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":50}},"
        " {\"name\":\"tick\",\"arguments\":{\"ms\":10}},{\"name\":\"sleep_ms\",\"arguments\":{\"ms\":20}},"
        " {\"name\":\"nope\",\"arguments\":{}},{\"name\":\"echo\",\"arguments\":{}}]",
        NULL);
    assert_string_equal (s_result_text (json_array_get (results, 0)), "slept 100 ms");
    assert_string_equal (s_result_text (json_array_get (results, 1)), "slept 50 ms");
    assert_true (json_is_false (json_object_get (json_array_get (results, 2), "isError")));
    int64_t start, end;
    assert_int_equal (sscanf (s_result_text (json_array_get (results, 2)), "%" SCNd64 " %" SCNd64,
                              &start, &end), 2);
    assert_string_equal (s_result_text (json_array_get (results, 3)), "slept 20 ms");
    assert_true (json_is_true (json_object_get (json_array_get (results, 4), "isError")));
    assert_string_equal (s_result_code (json_array_get (results, 4)), DSH_E_UNKNOWN_TOOL);
    assert_true (json_is_true (json_object_get (json_array_get (results, 5), "isError")));
    assert_string_equal (s_result_code (json_array_get (results, 5)), DSH_E_INVALID_ARGS);
    json_decref (results);
    //  Nothing left over for the caller
    assert_null (dsh_client_recv (fixture->client, 300));
}

//  ---------------------------------------------------------------------
//  2. Cancellation

static void
test_cancel_before_and_during (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "single", (const char *[]) { "--workers", "1", NULL });
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *client = fixture->client;

    //  Before: the only worker is busy, the second call waits in the queue
    //  and is cancelled there
    char *busy = s_send (client, "busy", "sleep_ms", "{\"ms\": 1500}", 20000);
    char *queued = s_send (client, "queued", "sleep_ms", "{\"ms\": 1000}", 20000);
    assert_int_equal (dsh_client_cancel (client, queued), 0);
    int64_t started = zclock_mono ();
    size_t queued_replies = 0;
    bool busy_done = false;
    while (!busy_done || queued_replies == 0) {
        dsh_reply_t *reply = s_recv (client, 10000);
        assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
        if (streq (dsh_reply_call_id (reply), "queued")) {
            assert_string_equal (dsh_reply_error_code (reply), DSH_E_CANCELLED);
            queued_replies++;
        }
        else {
            assert_string_equal (dsh_reply_call_id (reply), "busy");
            assert_false (dsh_reply_is_error (reply));
            assert_string_equal (dsh_reply_text (reply), "slept 1500 ms");
            busy_done = true;
        }
        dsh_reply_destroy (&reply);
    }
    assert_int_equal (queued_replies, 1);
    printf ("      cancel before the handler: first call done after %" PRId64 " ms\n",
            zclock_mono () - started);
    //  The cancelled call is never answered again
    assert_null (dsh_client_recv (client, 1000));
    zstr_free (&busy);
    zstr_free (&queued);

    //  During: the handler is running and stops
    char *running = s_send (client, "running", "sleep_ms", "{\"ms\": 5000}", 20000);
    assert_int_equal (dsh_testkit_wait_in_flight (fixture->endpoint, "single", 1, 10000), 0);
    started = zclock_mono ();
    assert_int_equal (dsh_client_cancel (client, running), 0);
    dsh_reply_t *reply = s_recv (client, 3000);
    printf ("      cancel during the handler: answered after %" PRId64 " ms\n", zclock_mono () - started);
    assert_string_equal (dsh_reply_call_id (reply), "running");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_CANCELLED);
    dsh_reply_destroy (&reply);
    assert_null (dsh_client_recv (client, 1000));
    zstr_free (&running);
    //  The worker is free again: the handler saw the cancel and returned
    char error [256];
    reply = dsh_client_call (client, "echo", "{\"message\":\"free\"}", NULL, 3000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_text (reply), "free");
    dsh_reply_destroy (&reply);
}

static void
test_cancel_after_result (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "answerer", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *client = fixture->client;

    //  The call was answered; the broker answers the late cancel
    //  CANCELLED and the client library drops that, so the caller sees one
    //  reply only
    char *done = s_send (client, "done", "echo", "{\"message\":\"answered\"}", 5000);
    dsh_reply_t *reply = s_recv (client, 5000);
    assert_string_equal (dsh_reply_call_id (reply), "done");
    assert_string_equal (dsh_reply_text (reply), "answered");
    dsh_reply_destroy (&reply);
    assert_int_equal (dsh_client_cancel (client, done), 0);
    reply = dsh_client_recv (client, 1000);
    if (reply)
        fail_msg ("a second reply for an answered call: %s %s %s", dsh_reply_command (reply),
                  dsh_reply_call_id (reply)? dsh_reply_call_id (reply): "-",
                  dsh_reply_error_code (reply)? dsh_reply_error_code (reply): "-");
    zstr_free (&done);
}

static void
test_cancel_races_result (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "racer", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *client = fixture->client;
    #define RACES 50
    size_t replies [RACES] = { 0 };
    for (int index = 0; index < RACES; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "race-%d", index);
        char *sent = s_send (client, call_id, "sleep_ms", "{\"ms\": 0}", 10000);
        assert_int_equal (dsh_client_cancel (client, sent), 0);
        zstr_free (&sent);
    }
    size_t answered = 0;
    while (answered < RACES) {
        dsh_reply_t *reply = s_recv (client, 10000);
        int index = -1;
        assert_int_equal (sscanf (dsh_reply_call_id (reply), "race-%d", &index), 1);
        assert_true (index >= 0 && index < RACES);
        if (replies [index]++ == 0)
            answered++;
        //  Whichever came first, the caller sees the cancel
        assert_string_equal (dsh_reply_error_code (reply), DSH_E_CANCELLED);
        dsh_reply_destroy (&reply);
    }
    //  Late duplicates would arrive now
    dsh_reply_t *reply;
    while ((reply = dsh_client_recv (client, 1000))) {
        int index = -1;
        if (sscanf (dsh_reply_call_id (reply)? dsh_reply_call_id (reply): "", "race-%d", &index) == 1
        &&  index >= 0 && index < RACES)
            replies [index]++;
        else
            fail_msg ("unexpected reply %s", dsh_reply_command (reply));
        dsh_reply_destroy (&reply);
    }
    for (int index = 0; index < RACES; index++)
        if (replies [index] != 1)
            fail_msg ("race-%d got %zu replies", index, replies [index]);
}

//  ---------------------------------------------------------------------
//  3. Deadlines

static void
test_deadline (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "slowpoke", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    int64_t started = zclock_mono ();
    char *late = s_send (fixture->client, "late", "sleep_ms", "{\"ms\": 5000}", 300);
    dsh_reply_t *reply = s_recv (fixture->client, 3000);
    printf ("      deadline 300 ms: TIMEOUT after %" PRId64 " ms\n", zclock_mono () - started);
    assert_string_equal (dsh_reply_call_id (reply), "late");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TIMEOUT);
    dsh_reply_destroy (&reply);
    //  The component was told to stop; whatever it sends is dropped
    assert_null (dsh_client_recv (fixture->client, 1500));
    zstr_free (&late);
}

//  ---------------------------------------------------------------------
//  4. A replica killed mid-call

static void
test_replica_killed_idempotent (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    const char *workers [] = { "--workers", "8", NULL };
    dsh_testproc_t *first = s_demo (fixture, "r1", workers);
    s_demo (fixture, "r2", workers);
    s_wait_providers (fixture, "sleep_ms", 2);

    //  Least outstanding spreads them over both replicas
    for (int index = 0; index < 6; index++) {
        char call_id [16];
        snprintf (call_id, sizeof (call_id), "idem-%d", index);
        char *sent = s_send (fixture->client, call_id, "sleep_ms", "{\"ms\": 2000}", 30000);
        zstr_free (&sent);
    }
    //  All six at the replicas, some of them at r1
    int64_t give_up = zclock_mono () + 10000;
    int64_t at_r1 = 0, at_r2 = 0;
    while ((at_r1 < 1 || at_r1 + at_r2 < 6) && zclock_mono () < give_up) {
        at_r1 = dsh_testkit_in_flight (fixture->endpoint, "r1");
        at_r2 = dsh_testkit_in_flight (fixture->endpoint, "r2");
        if (at_r1 < 1 || at_r1 + at_r2 < 6)
            zclock_sleep (20);      //  the poll's interval
    }
    assert_true (at_r1 >= 1 && at_r1 + at_r2 == 6);
    int64_t killed = zclock_mono ();
    dsh_testproc_signal (first, SIGKILL);

    //  Those on r1 are sent again to r2 once r1 expires: all succeed
    size_t replies [6] = { 0 };
    for (int count = 0; count < 6; count++) {
        dsh_reply_t *reply = s_recv (fixture->client, 15000);
        int index = -1;
        assert_int_equal (sscanf (dsh_reply_call_id (reply), "idem-%d", &index), 1);
        assert_true (index >= 0 && index < 6);
        replies [index]++;
        if (dsh_reply_is_error (reply))
            fail_msg ("idem-%d: %s", index, dsh_reply_text (reply));
        assert_string_equal (dsh_reply_text (reply), "slept 2000 ms");
        dsh_reply_destroy (&reply);
    }
    printf ("      idempotent calls on a killed replica: all 6 answered %" PRId64 " ms after the kill\n",
            zclock_mono () - killed);
    for (int index = 0; index < 6; index++)
        assert_int_equal (replies [index], 1);
    assert_null (dsh_client_recv (fixture->client, 1000));
}

static void
test_replica_killed_not_idempotent (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_testproc_t *first = s_demo (fixture, "r1", NULL);
    s_demo (fixture, "r2", NULL);
    s_wait_providers (fixture, "tick", 2);

    //  Two ticks: one lands on each replica; r1 dies with its tick running
    char *one = s_send (fixture->client, "tick-1", "tick", "{\"ms\": 3000}", 30000);
    char *two = s_send (fixture->client, "tick-2", "tick", "{\"ms\": 3000}", 30000);
    assert_int_equal (dsh_testkit_wait_in_flight (fixture->endpoint, "r1", 1, 10000), 0);
    assert_int_equal (dsh_testkit_wait_in_flight (fixture->endpoint, "r2", 1, 10000), 0);
    dsh_testproc_signal (first, SIGKILL);

    //  The tick on r1 cannot be run again: TOOL_GONE once r1 expires
    dsh_reply_t *reply = s_recv (fixture->client, 10000);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TOOL_GONE);
    assert_non_null (strstr (dsh_reply_text (reply), "\"r1\" expired"));
    char *gone = strdup (dsh_reply_call_id (reply));
    dsh_reply_destroy (&reply);

    //  r2 serves new calls at once, its own tick still running
    int64_t started = zclock_mono ();
    for (int count = 0; count < 20; count++) {
        char error [256];
        reply = dsh_client_call (fixture->client, "echo", "{\"message\":\"still here\"}", NULL, 2000,
                                 error, sizeof (error));
        if (!reply)
            fail_msg ("echo %d: %s", count, error);
        assert_false (dsh_reply_is_error (reply));
        assert_string_equal (dsh_reply_text (reply), "still here");
        dsh_reply_destroy (&reply);
    }
    printf ("      20 echo calls to r2 beside its running tick: %" PRId64 " ms\n", zclock_mono () - started);

    //  The other tick ends normally, and nothing more comes
    reply = s_recv (fixture->client, 10000);
    assert_string_equal (dsh_reply_call_id (reply), streq (gone, "tick-1")? "tick-2": "tick-1");
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    assert_null (dsh_client_recv (fixture->client, 1000));
    zstr_free (&gone);
    zstr_free (&one);
    zstr_free (&two);
}

//  ---------------------------------------------------------------------
//  5. Overload

static void
test_overload (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "narrow", (const char *[]) { "--workers", "1", "--queue", "2", NULL });
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    //  The broker sends a component no more than its window (twice the one
    //  worker it announces), which its queue of 2 holds: the rest wait in
    //  the broker, and none is refused by the component (the broker's own
    //  bounds are test_fair's)
    #define FLOOD 10
    for (int index = 0; index < FLOOD; index++) {
        char call_id [16];
        snprintf (call_id, sizeof (call_id), "flood-%d", index);
        char *sent = s_send (fixture->client, call_id, "sleep_ms", "{\"ms\": 500}", 30000);
        zstr_free (&sent);
    }
    size_t replies [FLOOD] = { 0 };
    size_t overloaded = 0, succeeded = 0;
    for (int count = 0; count < FLOOD; count++) {
        dsh_reply_t *reply = s_recv (fixture->client, 20000);
        int index = -1;
        assert_int_equal (sscanf (dsh_reply_call_id (reply), "flood-%d", &index), 1);
        assert_true (index >= 0 && index < FLOOD);
        replies [index]++;
        if (dsh_reply_is_error (reply)) {
            assert_string_equal (dsh_reply_error_code (reply), DSH_E_OVERLOADED);
            overloaded++;
        }
        else {
            assert_string_equal (dsh_reply_text (reply), "slept 500 ms");
            succeeded++;
        }
        dsh_reply_destroy (&reply);
    }
    printf ("      10 calls to 1 worker + 2 queued: %zu succeeded, %zu OVERLOADED\n", succeeded, overloaded);
    assert_int_equal (overloaded, 0);
    assert_int_equal (succeeded, FLOOD);
    for (int index = 0; index < FLOOD; index++)
        assert_int_equal (replies [index], 1);
    assert_null (dsh_client_recv (fixture->client, 1000));
}

//  ---------------------------------------------------------------------
//  6. Progress

//  Calls count {to: 5} and checks five PROGRESS replies, in order, then
//  the RESULT with text result_text.
static void
s_check_progress (dsh_client_t *client, const char *call_id, const char *result_text)
{
    char *sent = s_send (client, call_id, "count", "{\"to\": 5, \"step_ms\": 50}", 10000);
    for (int step = 1; step <= 5; step++) {
        dsh_reply_t *reply = s_recv (client, 5000);
        assert_string_equal (dsh_reply_command (reply), DSH_PROGRESS);
        assert_string_equal (dsh_reply_call_id (reply), call_id);
        json_t *body = dsh_reply_json (reply);
        assert_non_null (body);
        assert_true (json_number_value (json_object_get (body, "progress")) == (double) step);
        assert_true (json_number_value (json_object_get (body, "total")) == 5.0);
        char message [16];
        snprintf (message, sizeof (message), "step %d", step);
        assert_string_equal (json_string_value (json_object_get (body, "message")), message);
        json_decref (body);
        dsh_reply_destroy (&reply);
    }
    dsh_reply_t *reply = s_recv (client, 5000);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    assert_string_equal (dsh_reply_call_id (reply), call_id);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), result_text);
    dsh_reply_destroy (&reply);
    assert_null (dsh_client_recv (client, 300));
    zstr_free (&sent);
}

static void
test_progress (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "counter", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    s_check_progress (fixture->client, "count-direct", "counted to 5");
}

static int
s_setup_chain (void **state)
{
    fixture_t *fixture = (fixture_t *) zmalloc (sizeof (fixture_t));
    const char *config =
        "chain\n"
        "    stage\n"
        "        name = \"only\"\n"
        "        kind = \"trace\"\n";
    fixture->broker = dsh_testkit_broker_config (200, config, fixture->endpoint, sizeof (fixture->endpoint));
    assert_non_null (fixture->broker);
    fixture->client = dsh_client_new (fixture->endpoint);
    *state = fixture;
    return 0;
}

static void
test_progress_through_chain (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "counter", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    //  The call really went through the stage
    char error [256];
    dsh_reply_t *reply = dsh_client_request (fixture->client, DSH_CHAIN, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    assert_int_equal (json_array_size (json_object_get (body, "stages")), 1);
    json_decref (body);
    dsh_reply_destroy (&reply);

    //  The trace stage marks the result on its way up
    s_check_progress (fixture->client, "count-chained", "counted to 5 only:after");

    reply = dsh_client_request (fixture->client, DSH_CHAIN, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    body = dsh_reply_json (reply);
    json_t *stage = json_array_get (json_object_get (body, "stages"), 0);
    assert_string_equal (json_string_value (json_object_get (stage, "name")), "only");
    assert_int_equal (json_integer_value (json_object_get (stage, "passed")), 1);
    json_decref (body);
    dsh_reply_destroy (&reply);
}

//  ---------------------------------------------------------------------
//  7. The soak

typedef struct {
    fixture_t *fixture;
    dsh_testproc_t *replicas [SOAK_REPLICAS];
    uint8_t *replies;           //  per call index, how many replies came
    size_t errors;              //  error results (any code)
    size_t expired;             //  of which TOOL_GONE, "... expired"
    size_t unconnected;         //  of which TOOL_GONE, "... is not connected"
    size_t timeouts;            //  of which TIMEOUT
} soak_t;

//  The broker's resident memory in KiB, from /proc.
static long
s_rss_kb (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof (path), "/proc/%d/status", (int) pid);
    FILE *file = fopen (path, "r");
    assert_non_null (file);
    char line [256];
    long rss = -1;
    while (fgets (line, sizeof (line), file))
        if (sscanf (line, "VmRSS: %ld kB", &rss) == 1)
            break;
    fclose (file);
    assert_true (rss > 0);
    return rss;
}

//  Runs total echo calls named prefix-N, SOAK_IN_FLIGHT at a time; if
//  kill_at is not 0, kills the last replica (SIGKILL) once that many calls
//  are answered and restarts it under the same id a second later (it has
//  expired by then), holding the last calls back until it has, so the
//  restart is always mid-run. Checks that each call gets exactly one
//  reply, its own. Returns the wall time in ms.
static int64_t
s_pump (soak_t *soak, char prefix, size_t total, size_t kill_at)
{
    dsh_client_t *client = soak->fixture->client;
    memset (soak->replies, 0, total);
    size_t sent = 0, answered = 0, in_flight = 0;
    int64_t started = zclock_mono ();
    int64_t killed = 0;
    bool restarted = false;
    dsh_packer_t packer;
    while (answered < total) {
        if (killed && !restarted && zclock_mono () - killed >= 1000) {
            char id [16];
            snprintf (id, sizeof (id), "soak-%d", SOAK_REPLICAS);
            soak->replicas [SOAK_REPLICAS - 1] = s_demo (soak->fixture, id, NULL);
            restarted = true;
        }
        size_t limit = killed && !restarted? total - SOAK_IN_FLIGHT: total;
        while (in_flight < SOAK_IN_FLIGHT && sent < limit) {
            char call_id [32];
            snprintf (call_id, sizeof (call_id), "%c-%zu", prefix, sent);
            dsh_packer_init (&packer);
            msgpack_pack_map (&packer.pk, 1);
            dsh_packer_kv_str (&packer, "message", call_id);
            const char *id = dsh_client_call_send (client, call_id, "echo", packer.sbuf.data, packer.sbuf.size,
                                                   NULL, NULL, 0, 10000);
            dsh_packer_release (&packer);
            assert_non_null (id);
            sent++;
            in_flight++;
        }
        if (zclock_mono () - started > SOAK_LIMIT_MS)
            fail_msg ("soak: only %zu of %zu calls answered in %d s", answered, total, SOAK_LIMIT_MS / 1000);
        //  Short waits while a restart is due, so it is not late
        bool waiting = killed && !restarted;
        dsh_reply_t *reply = dsh_client_recv (client, waiting? 50: 15000);
        if (!reply && waiting)
            continue;
        if (!reply)
            fail_msg ("soak: no reply in 15 s with %zu of %zu answered", answered, total);
        if (!streq (dsh_reply_command (reply), DSH_RESULT) || !dsh_reply_call_id (reply))
            fail_msg ("soak: a %s reply (%s)", dsh_reply_command (reply),
                      dsh_reply_text (reply)? dsh_reply_text (reply): "-");
        char got_prefix = 0;
        size_t index = SIZE_MAX;
        if (sscanf (dsh_reply_call_id (reply), "%c-%zu", &got_prefix, &index) != 2
        ||  got_prefix != prefix || index >= total)
            fail_msg ("soak: a reply for a call never sent: %s", dsh_reply_call_id (reply));
        if (++soak->replies [index] != 1)
            fail_msg ("soak: a second reply for %s", dsh_reply_call_id (reply));
        if (dsh_reply_is_error (reply)) {
            soak->errors++;
            const char *code = dsh_reply_error_code (reply);
            if (code && streq (code, DSH_E_TOOL_GONE) && strstr (dsh_reply_text (reply), "expired"))
                soak->expired++;
            else
            if (code && streq (code, DSH_E_TOOL_GONE) && strstr (dsh_reply_text (reply), "not connected"))
                soak->unconnected++;
            else
            if (code && streq (code, DSH_E_TIMEOUT))
                soak->timeouts++;
            else
                fail_msg ("soak: %s: %s", dsh_reply_call_id (reply), dsh_reply_text (reply));
        }
        else
        if (!streq (dsh_reply_text (reply), dsh_reply_call_id (reply)))
            fail_msg ("soak: %s answered \"%s\"", dsh_reply_call_id (reply), dsh_reply_text (reply));
        dsh_reply_destroy (&reply);
        answered++;
        in_flight--;

        if (kill_at && !killed && answered >= kill_at) {
            dsh_testproc_signal (soak->replicas [SOAK_REPLICAS - 1], SIGKILL);
            killed = zclock_mono ();
        }
    }
    if (kill_at)
        assert_true (restarted);
    //  A late duplicate would be here now
    dsh_reply_t *reply = dsh_client_recv (client, 1000);
    if (reply)
        fail_msg ("soak: an extra %s for %s", dsh_reply_command (reply),
                  dsh_reply_call_id (reply)? dsh_reply_call_id (reply): "-");
    for (size_t index = 0; index < total; index++)
        if (soak->replies [index] != 1)
            fail_msg ("soak: %c-%zu got %d replies", prefix, index, soak->replies [index]);
    return zclock_mono () - started;
}

static void
test_soak (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    soak_t soak = { fixture, { NULL }, NULL, 0, 0, 0, 0 };
    for (int index = 0; index < SOAK_REPLICAS; index++) {
        char id [16];
        snprintf (id, sizeof (id), "soak-%d", index + 1);
        soak.replicas [index] = s_demo (fixture, id, NULL);
    }
    s_wait_providers (fixture, "echo", SOAK_REPLICAS);
    size_t calls = dsh_testkit_long ()? SOAK_CALLS_LONG: SOAK_CALLS_SHORT;
    size_t warmup = dsh_testkit_long ()? SOAK_WARMUP_LONG: SOAK_WARMUP_SHORT;
    soak.replies = (uint8_t *) zmalloc (calls);
    pid_t broker = dsh_testproc_pid (fixture->broker);

    int64_t warmup_ms = s_pump (&soak, 'w', warmup, 0);
    assert_int_equal (soak.errors, 0);
    long warm_rss = s_rss_kb (broker);

    int64_t soak_ms = s_pump (&soak, 's', calls, calls * 2 / 5);
    long soak_rss = s_rss_kb (broker);
    printf ("      soak: warm-up %zu calls in %" PRId64 " ms; %zu calls (%d in flight, %d replicas, one killed "
            "and restarted) in %" PRId64 " ms = %.0f calls/s; %zu errors: TOOL_GONE %zu expired, %zu not "
            "connected; TIMEOUT %zu\n",
            warmup, warmup_ms, calls, SOAK_IN_FLIGHT, SOAK_REPLICAS, soak_ms,
            (double) calls * 1000.0 / (double) (soak_ms? soak_ms: 1), soak.errors, soak.expired,
            soak.unconnected, soak.timeouts);
    printf ("      broker VmRSS: %ld KiB after the warm-up, %ld KiB after the soak (%+ld KiB)\n",
            warm_rss, soak_rss, soak_rss - warm_rss);
#ifndef __SANITIZE_ADDRESS__
    //  (AddressSanitizer holds freed memory in quarantine: there, the
    //  broker's resident size says nothing about leaks, LeakSanitizer does)
    assert_true (soak_rss - warm_rss <= SOAK_RSS_SLACK_KB);
#endif
    //  Echo is not idempotent: only the calls in flight on the killed
    //  replica may fail (TOOL_GONE, expired); calls sent after it died go to
    //  the others, never "not connected"
    assert_true (soak.errors <= SOAK_IN_FLIGHT);
    assert_int_equal (soak.unconnected, 0);

    //  Everything is served again afterwards, by all four
    s_wait_providers (fixture, "echo", SOAK_REPLICAS);
    free (soak.replies);
}

int
main (void)
{
    zsys_init ();
    //  The long suite's run is the full soak, and nothing the normal suite ran
    if (dsh_testkit_long ())
        cmocka_set_test_filter ("test_soak");
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_batch_parallel_and_exclusive, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_before_and_during, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_after_result, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_cancel_races_result, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_deadline, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_replica_killed_idempotent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_replica_killed_not_idempotent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_overload, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_progress, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_progress_through_chain, s_setup_chain, s_teardown),
        cmocka_unit_test_setup_teardown (test_soak, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
