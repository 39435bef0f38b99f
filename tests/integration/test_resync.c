/*  =========================================================================
    test_resync - watchers follow brokers that restart and fail

    A broker killed (-9) and started again, 5 times (20 in the long
    suite, DSH_TEST_LONG=1), on its front endpoint, its tools re-announced by a component that kept running: a
    watcher that ran throughout has, after every restart, a snapshot of the
    new broker instance and the new broker's exact tool list. So has a
    `dsh watch` process that was stopped (SIGSTOP) while the broker
    restarted and relearnt its tools, and continued after: a watcher whose
    event connection comes back after the relearning, as on a slow host or
    link, with no event left to show it the new broker. A broker that
    comes back on other (ephemeral) announce, work and events ports is
    found again. A watcher given "A,B" follows A, and when A is killed
    resyncs from B and goes on receiving B's events.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO            "components/demo/dsh-demo"
#define HEARTBEAT       "500"
#define RESTARTS_SHORT  5       //  broker restarts in a row; the long suite's:
#define RESTARTS_LONG   20
#define SETTLE_MS       20000   //  a generous bound for one resync; never a timing assertion

//  A broker's four endpoints, as it printed them.
typedef struct {
    char front [128];
    char announce [128];
    char work [128];
    char events [128];
} endpoints_t;

//  Starts dsh-broker on the given endpoints ("!" ports: any free one) and
//  reads back the ones it bound.
static dsh_testproc_t *
s_broker_start (const endpoints_t *wanted, endpoints_t *bound)
{
    const char *argv [] = { "broker/dsh-broker", "--endpoint", wanted->front, "--announce", wanted->announce,
                            "--work", wanted->work, "--events", wanted->events,
                            "--heartbeat-ms", HEARTBEAT, NULL };
    dsh_testproc_t *broker = dsh_testproc_start (argv);
    assert_non_null (broker);
    char *line = dsh_testproc_wait_line (broker, "listening on ", 10000);
    assert_non_null (line);
    int fields = sscanf (strstr (line, "listening on "), "listening on %127s (announce %127[^,], work %127[^,], "
                         "events %127[^)])", bound->front, bound->announce, bound->work, bound->events);
    assert_int_equal (fields, 4);
    free (line);
    return broker;
}

static void
s_broker_kill (dsh_testproc_t **broker_p)
{
    dsh_testproc_signal (*broker_p, SIGKILL);
    assert_int_equal (dsh_testproc_wait (*broker_p, 5000), 128 + SIGKILL);
    dsh_testproc_destroy (broker_p);
}

//  One request to the broker at front on a fresh client (a restarted broker
//  loses what an old connection had in flight); its body, or NULL.
static json_t *
s_ask (const char *front, const char *command)
{
    dsh_client_t *client = dsh_client_new (front);
    assert_non_null (client);
    char error [256];
    dsh_reply_t *reply = dsh_client_request (client, command, NULL, 2000, error, sizeof (error));
    json_t *body = reply? dsh_reply_json (reply): NULL;
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    return body;
}

//  The broker's tool names (LIST) in order and its latest seq, or NULL.
static json_t *
s_listed (const char *front, json_int_t *seq)
{
    json_t *body = s_ask (front, DSH_LIST);
    if (!body)
        return NULL;
    *seq = json_integer_value (json_object_get (body, "seq"));
    json_t *names = json_array ();
    json_t *tools = json_object_get (body, "tools");
    for (size_t index = 0; index < json_array_size (tools); index++)
        json_array_append (names, json_object_get (json_array_get (tools, index), "name"));
    json_decref (body);
    return names;
}

//  The epoch of the broker at front (WELCOME), or 0 if it does not answer.
static json_int_t
s_epoch (const char *front)
{
    json_t *body = s_ask (front, DSH_HELLO);
    json_int_t epoch = body? json_integer_value (json_object_get (body, "epoch")): 0;
    json_decref (body);
    return epoch;
}

//  What a watcher showed: its latest snapshot's epoch and broker.
typedef struct {
    dsh_watcher_t *watcher;
    json_int_t epoch;
    char broker [128];
    size_t snapshots;
    size_t events;
} watched_t;

static void
s_drain (watched_t *self, int timeout_ms)
{
    json_t *notice = dsh_watcher_recv (self->watcher, timeout_ms);
    while (notice) {
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        if (kind && streq (kind, "snapshot")) {
            self->epoch = json_integer_value (json_object_get (notice, "epoch"));
            const char *broker = json_string_value (json_object_get (notice, "broker"));
            snprintf (self->broker, sizeof (self->broker), "%s", broker? broker: "");
            self->snapshots++;
        }
        else
            self->events++;
        json_decref (notice);
        notice = dsh_watcher_recv (self->watcher, 0);
    }
}

//  Waits until the watcher shows a snapshot of epoch from broker and then
//  holds exactly the broker's tools, with at least count of them. True if
//  it did within SETTLE_MS.
static bool
s_follows (watched_t *self, const char *front, json_int_t epoch, size_t count)
{
    int64_t give_up = zclock_mono () + SETTLE_MS;
    while (zclock_mono () < give_up) {
        s_drain (self, 100);
        if (self->epoch != epoch || !streq (self->broker, front))
            continue;
        json_int_t seq = 0;
        json_t *listed = s_listed (front, &seq);
        json_t *viewed = dsh_watcher_tools (self->watcher);
        bool same = listed && viewed && json_array_size (listed) >= count && json_equal (listed, viewed)
                 && (json_int_t) dsh_watcher_seq (self->watcher) == seq;
        json_decref (listed);
        json_decref (viewed);
        if (same)
            return true;
    }
    return false;
}

//  What a `dsh watch` process showed: its view, rebuilt from its lines.
typedef struct {
    dsh_testproc_t *process;
    json_int_t epoch;           //  of its latest snapshot
    json_t *names;              //  the tool names in its view, in order
} printed_t;

static void
s_names_remove (json_t *names, const char *name)
{
    for (size_t index = 0; index < json_array_size (names); index++)
        if (streq (json_string_value (json_array_get (names, index)), name)) {
            json_array_remove (names, index);
            return;
        }
}

//  Applies the lines printed so far (PROTOCOL.md, the Clone procedure:
//  the watcher has dropped what does not follow on).
static void
s_printed_read (printed_t *self, int timeout_ms)
{
    char *line;
    while ((line = dsh_testproc_wait_line (self->process, "{", timeout_ms))) {
        timeout_ms = 0;
        json_t *notice = json_loads (line, 0, NULL);
        assert_non_null (notice);
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        const char *name = json_string_value (json_object_get (notice, "name"));
        assert_non_null (kind);
        if (streq (kind, "snapshot")) {
            self->epoch = json_integer_value (json_object_get (notice, "epoch"));
            json_array_clear (self->names);
            json_t *tools = json_object_get (notice, "tools");
            for (size_t index = 0; index < json_array_size (tools); index++)
                json_array_append (self->names, json_object_get (json_object_get (json_array_get (tools, index),
                                                                                   "tool"), "name"));
        }
        else
        if (streq (kind, DSH_EV_REGISTERED) || streq (kind, DSH_EV_UPDATED)) {
            assert_non_null (name);
            s_names_remove (self->names, name);
            json_array_append_new (self->names, json_string (name));
        }
        else
        if (streq (kind, DSH_EV_UNREGISTERED)) {
            assert_non_null (name);
            s_names_remove (self->names, name);
        }
        json_decref (notice);
        free (line);
    }
}

//  As s_follows, for the process.
static bool
s_printed_follows (printed_t *self, const char *front, json_int_t epoch, size_t count)
{
    int64_t give_up = zclock_mono () + SETTLE_MS;
    while (zclock_mono () < give_up) {
        s_printed_read (self, 100);
        if (self->epoch != epoch)
            continue;
        json_int_t seq = 0;
        json_t *listed = s_listed (front, &seq);
        bool same = listed && json_array_size (listed) >= count && json_equal (listed, self->names);
        json_decref (listed);
        if (same)
            return true;
    }
    return false;
}

//  Waits until the broker at front lists count tools. True if it did.
static bool
s_relearnt (const char *front, size_t count)
{
    int64_t give_up = zclock_mono () + SETTLE_MS;
    while (zclock_mono () < give_up) {
        json_int_t seq;
        json_t *listed = s_listed (front, &seq);
        size_t size = listed? json_array_size (listed): 0;
        json_decref (listed);
        if (size >= count)
            return true;
        zclock_sleep (50);
    }
    return false;
}

static void
test_restarts_resync (void **state)
{
    (void) state;
    endpoints_t any = { "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!" };
    endpoints_t fixed;
    dsh_testproc_t *broker = s_broker_start (&any, &fixed);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, fixed.front, "steady", NULL);
    assert_non_null (demo);
    watched_t watched = { .watcher = dsh_watcher_new (fixed.front) };
    assert_non_null (watched.watcher);
    const char *argv [] = { "components/cli/dsh", "--broker", fixed.front, "watch", NULL };
    printed_t printed = { .process = dsh_testproc_start (argv), .names = json_array () };
    assert_non_null (printed.process);
    json_int_t epoch = s_epoch (fixed.front);
    assert_true (s_follows (&watched, fixed.front, epoch, DSH_TESTKIT_DEMO_TOOLS));
    assert_true (s_printed_follows (&printed, fixed.front, epoch, DSH_TESTKIT_DEMO_TOOLS));

    //  The same four endpoints each time: the component, still running,
    //  finds the new broker by itself and announces its tools again
    size_t resynced = 0, printed_resynced = 0;
    const int restarts = dsh_testkit_long ()? RESTARTS_LONG: RESTARTS_SHORT;
    for (int cycle = 0; cycle < restarts; cycle++) {
        json_int_t old_epoch = epoch;
        dsh_testproc_signal (printed.process, SIGSTOP);
        s_broker_kill (&broker);
        endpoints_t bound;
        broker = s_broker_start (&fixed, &bound);
        assert_string_equal (bound.events, fixed.events);
        epoch = s_epoch (fixed.front);
        assert_true (epoch != 0 && epoch != old_epoch);
        assert_true (s_relearnt (fixed.front, DSH_TESTKIT_DEMO_TOOLS));
        dsh_testproc_signal (printed.process, SIGCONT);
        if (s_follows (&watched, fixed.front, epoch, DSH_TESTKIT_DEMO_TOOLS))
            resynced++;
        else
            print_message ("restart %d: the watcher did not resync (its epoch %lld, the broker's %lld)\n",
                           cycle + 1, (long long) watched.epoch, (long long) epoch);
        if (s_printed_follows (&printed, fixed.front, epoch, DSH_TESTKIT_DEMO_TOOLS))
            printed_resynced++;
        else
            print_message ("restart %d: dsh watch did not resync (its epoch %lld, the broker's %lld)\n",
                           cycle + 1, (long long) printed.epoch, (long long) epoch);
    }
    print_message ("the watcher resynced after %zu of %d restarts, dsh watch (stopped meanwhile) after %zu\n",
                   resynced, restarts, printed_resynced);
    assert_int_equal (resynced, restarts);
    assert_int_equal (printed_resynced, restarts);

    json_decref (printed.names);
    dsh_testproc_destroy (&printed.process);
    dsh_watcher_destroy (&watched.watcher);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker);
}

//  The next RESULT for call_id on client within wait_ms, or NULL.
static dsh_reply_t *
s_result_for (dsh_client_t *client, const char *call_id, int wait_ms)
{
    int64_t give_up = zclock_mono () + wait_ms;
    while (zclock_mono () < give_up) {
        dsh_reply_t *reply = dsh_client_recv (client, 100);
        if (reply && dsh_reply_call_id (reply) && streq (dsh_reply_call_id (reply), call_id)
        &&  streq (dsh_reply_command (reply), "RESULT"))
            return reply;
        dsh_reply_destroy (&reply);
    }
    return NULL;
}

//  A call in flight when its broker restarts on the same endpoints: the
//  new broker answers PINGs, so the client never finds it silent, and it
//  knows nothing of the call. The client tells the restart by the
//  instance id in PONG and answers the call BROKER_GONE, long before its
//  deadline (60 s): without that the call waited for ever.
static void
test_call_across_restart (void **state)
{
    (void) state;
    endpoints_t any = { "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!" };
    endpoints_t fixed;
    dsh_testproc_t *broker = s_broker_start (&any, &fixed);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, fixed.front, "restart-demo", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (fixed.front, "sleep_ms", 1, 10000), 0);
    dsh_client_t *client = dsh_client_new (fixed.front);
    assert_non_null (client);
    const char *sent = dsh_testkit_send_json (client, "across", "sleep_ms", "{\"ms\": 3000}", 60000);
    assert_non_null (sent);
    //  In flight: at the component when the broker goes
    assert_int_equal (dsh_testkit_wait_in_flight (fixed.front, "restart-demo", 1, 10000), 0);
    s_broker_kill (&broker);
    endpoints_t bound;
    broker = s_broker_start (&fixed, &bound);
    dsh_reply_t *reply = s_result_for (client, "across", 20000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_error_code (reply), "BROKER_GONE");
    assert_non_null (strstr (dsh_reply_text (reply), "restarted"));
    dsh_reply_destroy (&reply);
    //  The client goes on with the new broker
    assert_true (s_relearnt (fixed.front, DSH_TESTKIT_DEMO_TOOLS));
    sent = dsh_testkit_send_json (client, "after", "echo", "{\"message\": \"again\"}", 10000);
    assert_non_null (sent);
    reply = s_result_for (client, "after", 15000);
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker);
}

//  A call sent to a broker that is never reached (one broker: it is
//  waited for, a link may be slow) is answered TIMEOUT by the client past
//  its deadline and a margin, never left open.
static void
test_call_never_reached (void **state)
{
    (void) state;
    dsh_client_t *client = dsh_client_new ("tcp://127.0.0.1:1");
    assert_non_null (client);
    const char *sent = dsh_testkit_send_json (client, "nowhere", "echo", "{\"message\": \"x\"}", 200);
    assert_non_null (sent);
    dsh_reply_t *reply = s_result_for (client, "nowhere", 20000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_error_code (reply), "TIMEOUT");
    dsh_reply_destroy (&reply);
    //  Nothing else comes for it
    reply = dsh_client_recv (client, 300);
    assert_null (reply);
    dsh_client_destroy (&client);
}

static void
test_restart_on_other_ports (void **state)
{
    (void) state;
    endpoints_t any = { "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!" };
    endpoints_t first;
    dsh_testproc_t *broker = s_broker_start (&any, &first);
    watched_t watched = { .watcher = dsh_watcher_new (first.front) };
    assert_non_null (watched.watcher);
    assert_true (s_follows (&watched, first.front, s_epoch (first.front), 0));

    //  Same front, new ports for the rest: the watcher learns them again
    for (int cycle = 0; cycle < 3; cycle++) {
        s_broker_kill (&broker);
        endpoints_t wanted = any, bound;
        snprintf (wanted.front, sizeof (wanted.front), "%s", first.front);
        broker = s_broker_start (&wanted, &bound);
        assert_string_not_equal (bound.events, first.events);
        char id [32], prefix [32];
        snprintf (id, sizeof (id), "moved-%d", cycle);
        snprintf (prefix, sizeof (prefix), "m%d_", cycle);
        dsh_testproc_t *demo = dsh_testkit_component (DEMO, first.front, id,
                                                      (const char *[]) { "--prefix", prefix, NULL });
        assert_non_null (demo);
        assert_int_equal (dsh_testkit_wait_tools (first.front, prefix, DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
        assert_true (s_follows (&watched, first.front, s_epoch (first.front), DSH_TESTKIT_DEMO_TOOLS));
        dsh_testproc_destroy (&demo);
        snprintf (first.events, sizeof (first.events), "%s", bound.events);
    }
    dsh_watcher_destroy (&watched.watcher);
    dsh_testproc_destroy (&broker);
}

static void
test_failover (void **state)
{
    (void) state;
    endpoints_t any = { "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!" };
    endpoints_t a, b;
    dsh_testproc_t *broker_a = s_broker_start (&any, &a);
    dsh_testproc_t *broker_b = s_broker_start (&any, &b);
    dsh_testproc_t *demo_a = dsh_testkit_component (DEMO, a.front, "on-a", (const char *[]) { "--prefix", "a_", NULL });
    dsh_testproc_t *demo_b = dsh_testkit_component (DEMO, b.front, "on-b", (const char *[]) { "--prefix", "b_", NULL });
    assert_non_null (demo_a);
    assert_non_null (demo_b);
    assert_int_equal (dsh_testkit_wait_tools (a.front, "a_", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    assert_int_equal (dsh_testkit_wait_tools (b.front, "b_", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);

    char list [300];
    snprintf (list, sizeof (list), "%s,%s", a.front, b.front);
    watched_t watched = { .watcher = dsh_watcher_new (list) };
    assert_non_null (watched.watcher);
    assert_true (s_follows (&watched, a.front, s_epoch (a.front), DSH_TESTKIT_DEMO_TOOLS));

    //  A is gone: the watcher resyncs from B, and takes B's events after
    s_broker_kill (&broker_a);
    assert_true (s_follows (&watched, b.front, s_epoch (b.front), DSH_TESTKIT_DEMO_TOOLS));
    size_t events = watched.events;
    size_t snapshots = watched.snapshots;
    dsh_testproc_t *late = dsh_testkit_component (DEMO, b.front, "late-on-b", (const char *[]) { "--prefix", "c_", NULL });
    assert_non_null (late);
    assert_int_equal (dsh_testkit_wait_tools (b.front, "c_", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    assert_true (s_follows (&watched, b.front, s_epoch (b.front), 2 * DSH_TESTKIT_DEMO_TOOLS));
    //  B's events reach the watcher (the view may also have resynced on
    //  the way, if B seemed silent on a loaded machine)
    if (watched.events < events + DSH_TESTKIT_DEMO_TOOLS || watched.snapshots != snapshots)
        print_message ("after the failover: %zu events, %zu more snapshots\n", watched.events - events,
                       watched.snapshots - snapshots);
    assert_true (watched.events > events);

    dsh_watcher_destroy (&watched.watcher);
    dsh_testproc_destroy (&late);
    dsh_testproc_destroy (&demo_a);
    dsh_testproc_destroy (&demo_b);
    dsh_testproc_destroy (&broker_b);
}

static void
test_bad_list (void **state)
{
    (void) state;
    assert_null (dsh_watcher_new ("tcp://127.0.0.1:1,nonsense"));
    assert_null (dsh_watcher_new ("tcp://127.0.0.1:1,,tcp://127.0.0.1:2"));
}

int
main (void)
{
    zsys_init ();
    //  The long suite's run is the long restart series, and nothing else
    if (dsh_testkit_long ())
        cmocka_set_test_filter ("test_restarts_resync");
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_bad_list),
        cmocka_unit_test (test_failover),
        cmocka_unit_test (test_restart_on_other_ports),
        cmocka_unit_test (test_restarts_resync),
        cmocka_unit_test (test_call_across_restart),
        cmocka_unit_test (test_call_never_reached),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
