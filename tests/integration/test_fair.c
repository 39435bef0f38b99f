/*  =========================================================================
    test_fair - callers share a component fairly, end to end: a real broker
    and real dsh-demo processes on loopback

    One client floods a component with thousands of slow calls; another
    client's quick call to the same component is still answered before its
    deadline. The calls the broker holds back for a busy component: one
    past its deadline is answered TIMEOUT from the broker's queue, one
    cancelled is answered CANCELLED there, all of them are answered
    TOOL_GONE when the component dies, and the broker holds only so many
    per caller and in all, answering the rest OVERLOADED at once.

    No timing is asserted beyond "answered before its deadline".
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

//  The flood: calls from one client, each a sleep of half a second
#define FLOOD_CALLS     5000
//  The other client's call: its deadline
#define QUICK_DEADLINE_MS 5000

typedef struct {
    dsh_testproc_t *broker;
    char endpoint [256];
    dsh_client_t *client;
    dsh_testproc_t *demo;
} fixture_t;

//  Short, so a killed component expires soon; not so short that a loaded
//  machine (a sanitizer build beside other jobs) expires a live one
#define S_HEARTBEAT_MS 500

static fixture_t *
s_fixture (const char *config)
{
    fixture_t *fixture = (fixture_t *) zmalloc (sizeof (fixture_t));
    if (config)
        fixture->broker = dsh_testkit_broker_config (S_HEARTBEAT_MS, config, fixture->endpoint, sizeof (fixture->endpoint));
    else
        fixture->broker = dsh_testkit_broker (S_HEARTBEAT_MS, NULL, fixture->endpoint, sizeof (fixture->endpoint));
    assert_non_null (fixture->broker);
    fixture->client = dsh_client_new (fixture->endpoint);
    assert_non_null (fixture->client);
    return fixture;
}

static int
s_setup (void **state)
{
    *state = s_fixture (NULL);
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_client_destroy (&fixture->client);
    dsh_testproc_destroy (&fixture->demo);
    dsh_testproc_destroy (&fixture->broker);
    free (fixture);
    return 0;
}

//  A dsh-demo with workers workers and room for queue calls waiting for
//  them, its tools registered.
static void
s_demo (fixture_t *fixture, const char *workers, const char *queue)
{
    fixture->demo = dsh_testkit_component (DEMO, fixture->endpoint, "shared",
                                           (const char *[]) { "--workers", workers, "--queue", queue, NULL });
    assert_non_null (fixture->demo);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
}

//  Sends a call with JSON arguments under call_id.
static void
s_send (dsh_client_t *client, const char *call_id, const char *name, const char *args, int timeout_ms)
{
    assert_non_null (dsh_testkit_send_json (client, call_id, name, args, timeout_ms));
}

//  The next RESULT within timeout_ms, which must come.
static dsh_reply_t *
s_recv (dsh_client_t *client, int timeout_ms)
{
    dsh_reply_t *reply = dsh_client_recv (client, timeout_ms);
    if (!reply)
        fail_msg ("no reply within %d ms", timeout_ms);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    return reply;
}

//  The broker's count of calls in flight, from PING.
static uint64_t
s_in_flight (fixture_t *fixture)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (fixture->client, DSH_PING, NULL, 2000, error, sizeof (error));
    if (!reply)
        fail_msg ("PING: %s", error);
    const msgpack_object *count = dsh_map_get (dsh_reply_body (reply), "inFlight");
    assert_non_null (count);
    uint64_t in_flight = count->via.u64;
    dsh_reply_destroy (&reply);
    return in_flight;
}

//  ---------------------------------------------------------------------
//  1. A flood from one caller does not starve another

static void
test_flood_does_not_starve (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    //  Its own queue takes the whole flood, as in issue 11's measurement:
    //  without fairness in the broker the quick call waits behind it all
    s_demo (fixture, "4", "10000");
    dsh_client_t *flooder = dsh_client_new (fixture->endpoint);
    assert_non_null (flooder);
    for (int index = 0; index < FLOOD_CALLS; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "flood-%d", index);
        s_send (flooder, call_id, "sleep_ms", "{\"ms\": 500}", 600000);
    }
    //  The flood is in the broker (or at the component) before the quick
    //  call is sent (the few first calls may be done already)
    int64_t give_up = zclock_mono () + 30000;
    while (s_in_flight (fixture) < FLOOD_CALLS * 9 / 10 && zclock_mono () < give_up)
        zclock_sleep (50);          //  the poll's interval
    assert_true (s_in_flight (fixture) >= FLOOD_CALLS * 9 / 10);

    s_send (fixture->client, "quick", "echo", "{\"message\": \"still served\"}", QUICK_DEADLINE_MS);
    //  Its one reply, before its deadline (the margin is for the reply's
    //  way back): the result, not TIMEOUT
    dsh_reply_t *reply = s_recv (fixture->client, QUICK_DEADLINE_MS + 2000);
    assert_string_equal (dsh_reply_call_id (reply), "quick");
    if (dsh_reply_is_error (reply))
        fail_msg ("the quick call failed: %s %s", dsh_reply_error_code (reply), dsh_reply_text (reply));
    assert_string_equal (dsh_reply_text (reply), "still served");
    dsh_reply_destroy (&reply);

    //  The flooder's calls go on: the first of them are answered, slept
    reply = s_recv (flooder, 10000);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "slept 500 ms");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&flooder);
}

//  ---------------------------------------------------------------------
//  2. A held call: deadline, cancel

//  One worker, so a window of two calls: two long sleeps fill it, and any
//  call after them is held in the broker.
static void
s_fill_window (fixture_t *fixture, int sleep_ms)
{
    s_demo (fixture, "1", "1024");
    char args [64];
    snprintf (args, sizeof (args), "{\"ms\": %d}", sleep_ms);
    s_send (fixture->client, "busy-1", "sleep_ms", args, 60000);
    s_send (fixture->client, "busy-2", "sleep_ms", args, 60000);
}

static void
test_held_call_times_out (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_fill_window (fixture, 3000);
    s_send (fixture->client, "held", "echo", "{\"message\": \"late\"}", 500);
    dsh_reply_t *reply = s_recv (fixture->client, 2500);
    assert_string_equal (dsh_reply_call_id (reply), "held");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TIMEOUT);
    //  Answered from the broker's queue, not by the component
    assert_non_null (strstr (dsh_reply_text (reply), "waiting for a busy component"));
    dsh_reply_destroy (&reply);
    //  The two sleeps finish; the timed-out call is never answered again
    for (int count = 0; count < 2; count++) {
        reply = s_recv (fixture->client, 10000);
        assert_non_null (strstr (dsh_reply_call_id (reply), "busy-"));
        assert_false (dsh_reply_is_error (reply));
        dsh_reply_destroy (&reply);
    }
    assert_null (dsh_client_recv (fixture->client, 500));
}

static void
test_held_call_cancelled (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_fill_window (fixture, 1000);
    s_send (fixture->client, "held", "sleep_ms", "{\"ms\": 1000}", 60000);
    s_send (fixture->client, "after", "echo", "{\"message\": \"after\"}", 60000);
    //  Both are held behind the sleeps before the cancel arrives
    int64_t give_up = zclock_mono () + 10000;
    bool held = false;
    while (!held && zclock_mono () < give_up) {
        held = s_in_flight (fixture) >= 4;
        if (!held)
            zclock_sleep (20);      //  the poll's interval
    }
    assert_true (held);
    assert_int_equal (dsh_client_cancel (fixture->client, "held"), 0);
    dsh_reply_t *reply = s_recv (fixture->client, 2000);
    assert_string_equal (dsh_reply_call_id (reply), "held");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_CANCELLED);
    dsh_reply_destroy (&reply);
    //  The rest are answered once each, the call behind the cancelled one
    //  too; nothing more comes for the cancelled call
    bool seen [3] = { false, false, false };
    for (int count = 0; count < 3; count++) {
        reply = s_recv (fixture->client, 10000);
        const char *call_id = dsh_reply_call_id (reply);
        int index = streq (call_id, "busy-1")? 0: streq (call_id, "busy-2")? 1: streq (call_id, "after")? 2: -1;
        if (index < 0)
            fail_msg ("unexpected reply for %s", call_id);
        assert_false (seen [index]);
        seen [index] = true;
        assert_false (dsh_reply_is_error (reply));
        dsh_reply_destroy (&reply);
    }
    assert_null (dsh_client_recv (fixture->client, 1500));
}

//  ---------------------------------------------------------------------
//  3. The component dies with calls held for it

static void
test_component_dies_with_calls_held (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_fill_window (fixture, 10000);
    for (int index = 0; index < 3; index++) {
        char call_id [16];
        snprintf (call_id, sizeof (call_id), "held-%d", index);
        s_send (fixture->client, call_id, "sleep_ms", "{\"ms\": 10}", 60000);
    }
    int64_t give_up = zclock_mono () + 10000;
    while (s_in_flight (fixture) < 5 && zclock_mono () < give_up)
        zclock_sleep (20);          //  the poll's interval
    assert_int_equal (s_in_flight (fixture), 5);
    dsh_testproc_signal (fixture->demo, SIGKILL);
    //  It expires (three silent heartbeats): the two at it and the
    //  three held for it are answered TOOL_GONE, once each
    for (int count = 0; count < 5; count++) {
        dsh_reply_t *reply = s_recv (fixture->client, 10000);
        assert_string_equal (dsh_reply_error_code (reply), DSH_E_TOOL_GONE);
        dsh_reply_destroy (&reply);
    }
    assert_null (dsh_client_recv (fixture->client, 500));
    assert_int_equal (s_in_flight (fixture), 0);
}

//  ---------------------------------------------------------------------
//  4. The broker holds only so many

static void
test_held_calls_are_bounded (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    s_demo (fixture, "1", "1024");
    //  Two calls go to the component (its window); of the rest, the broker
    //  holds five per caller and seven in all
    //  The first two take long enough that nothing held moves on while
    //  the bounds are checked
    for (int index = 0; index < 10; index++) {
        char call_id [16];
        snprintf (call_id, sizeof (call_id), "a-%d", index);
        s_send (fixture->client, call_id, "sleep_ms", index < 2? "{\"ms\": 2000}": "{\"ms\": 100}", 60000);
    }
    size_t overloaded = 0, slept = 0;
    int64_t give_up = zclock_mono () + 20000;
    //  The three over the caller's bound are answered at once, before any
    //  of the others
    while (overloaded < 3 && zclock_mono () < give_up) {
        dsh_reply_t *reply = s_recv (fixture->client, 10000);
        assert_true (dsh_reply_is_error (reply));
        assert_string_equal (dsh_reply_error_code (reply), DSH_E_OVERLOADED);
        assert_non_null (strstr (dsh_reply_text (reply), "from this caller"));
        overloaded++;
        dsh_reply_destroy (&reply);
    }
    //  Another caller has the total's last two places, and no third
    dsh_client_t *other = dsh_client_new (fixture->endpoint);
    assert_non_null (other);
    for (int index = 0; index < 3; index++) {
        char call_id [16];
        snprintf (call_id, sizeof (call_id), "b-%d", index);
        s_send (other, call_id, "sleep_ms", "{\"ms\": 100}", 60000);
    }
    dsh_reply_t *reply = s_recv (other, 10000);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_OVERLOADED);
    assert_non_null (strstr (dsh_reply_text (reply), "limit is 7 calls"));
    dsh_reply_destroy (&reply);
    //  Everything held is served, once each
    for (int count = 0; count < 7; count++) {
        reply = s_recv (fixture->client, 10000);
        assert_false (dsh_reply_is_error (reply));
        slept++;
        dsh_reply_destroy (&reply);
    }
    for (int count = 0; count < 2; count++) {
        reply = s_recv (other, 10000);
        assert_false (dsh_reply_is_error (reply));
        dsh_reply_destroy (&reply);
    }
    assert_int_equal (slept, 7);
    assert_null (dsh_client_recv (fixture->client, 300));
    assert_null (dsh_client_recv (other, 300));
    dsh_client_destroy (&other);
}

static int
s_setup_bounded (void **state)
{
    *state = s_fixture ("broker\n"
                        "    max_queued = 7\n"
                        "    max_queued_per_caller = 5\n");
    return 0;
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_flood_does_not_starve, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_held_call_times_out, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_held_call_cancelled, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_component_dies_with_calls_held, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_held_calls_are_bounded, s_setup_bounded, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
