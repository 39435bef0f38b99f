/*  =========================================================================
    test_owner - component ids are owned (no CURVE)

    Real dsh-broker and dsh-demo processes on loopback. Each dsh-demo runs
    with -v, so its output names every call it served: the test tells the
    two processes under one id apart by whose output holds a call's id.
    A second process under a live id is refused (it is told, a subscriber
    sees component.refused) and gets none of the calls; its going, clean or
    not, changes nothing for the owner; a crashed owner's id goes at once
    to a new process, and the calls the dead one held are answered
    TOOL_GONE, not left to their deadline; a refused process still running
    gets the id when the owner dies; a component whose WORK connection
    closed while it goes on heartbeating expires within the liveness
    window instead of staying listed and unreachable. test_security has
    the same under
    CURVE, where the id follows the key.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#include <signal.h>

//  Expiry and re-announces take about a second, and a loaded machine does
//  not expire a live component
#define S_HEARTBEAT_MS  500
#define S_ID            "demoT"

typedef struct {
    char endpoint [256];
    dsh_testproc_t *broker;
    dsh_client_t *client;
    zsock_t *events;            //  SUB to component.* events
} s_bed_t;

static s_bed_t *
s_bed (void)
{
    s_bed_t *bed = (s_bed_t *) zmalloc (sizeof (s_bed_t));
    bed->broker = dsh_testkit_broker (S_HEARTBEAT_MS, NULL, bed->endpoint, sizeof (bed->endpoint));
    assert_non_null (bed->broker);
    bed->client = dsh_client_new (bed->endpoint);
    //  Its subscription live before anything happens
    bed->events = dsh_testkit_events (bed->endpoint, "component.", NULL, 10000);
    assert_non_null (bed->events);
    return bed;
}

static void
s_bed_destroy (s_bed_t **bed_p)
{
    s_bed_t *bed = *bed_p;
    zsock_destroy (&bed->events);
    dsh_client_destroy (&bed->client);
    dsh_testproc_destroy (&bed->broker);
    free (bed);
    *bed_p = NULL;
}

//  dsh-demo -v under S_ID, its log in its output; once it has started.
static dsh_testproc_t *
s_demo (s_bed_t *bed)
{
    const char *argv [] = { "components/demo/dsh-demo", "--broker", bed->endpoint, "--id", S_ID, "-v", NULL };
    dsh_testproc_t *demo = dsh_testproc_start_merged (argv);
    assert_non_null (demo);
    char *line = dsh_testproc_wait_line (demo, "component " S_ID " serving", 10000);
    assert_non_null (line);
    free (line);
    return demo;
}

//  Waits until process says the broker refused it the id.
static void
s_wait_refused (dsh_testproc_t *process)
{
    //  Anywhere in its output: it may come before the start line
    const char *told = "component id " S_ID " is held by a live component";
    int64_t give_up = zclock_mono () + 10000;
    while (!strstr (dsh_testproc_output (process, 100), told) && zclock_mono () < give_up)
        ;
    if (!strstr (dsh_testproc_output (process, 0), told))
        fail_msg ("not refused; its output:\n%s", dsh_testproc_output (process, 0));
}

//  The next component.* event of kind within timeout_ms, as JSON, or NULL.
static json_t *
s_event (s_bed_t *bed, const char *kind, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    zpoller_t *poller = zpoller_new (bed->events, NULL);
    json_t *found = NULL;
    while (!found && zclock_mono () < give_up
       &&  zpoller_wait (poller, (int) (give_up - zclock_mono ())) == bed->events) {
        zmsg_t *msg = zmsg_recv (bed->events);
        char *got = zmsg_popstr (msg);
        zframe_t *body = zmsg_pop (msg);
        char error [128];
        dsh_doc_t *doc = dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error));
        assert_non_null (doc);
        if (streq (got, kind))
            found = dsh_json_from_msgpack (dsh_doc_root (doc));
        dsh_doc_destroy (&doc);
        zframe_destroy (&body);
        zstr_free (&got);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    return found;
}

//  Calls echo count times; each must succeed, and be served by serving
//  (its output names the call) and not by other (may be NULL).
static void
s_calls_served_by (s_bed_t *bed, int count, dsh_testproc_t *serving, dsh_testproc_t *other)
{
    zlistx_t *call_ids = zlistx_new ();
    zlistx_set_destructor (call_ids, (zlistx_destructor_fn *) zstr_free);
    for (int index = 0; index < count; index++) {
        char error [256];
        dsh_reply_t *reply = dsh_client_call (bed->client, "echo", "{\"message\": \"owned\"}", NULL, 10000,
                                              error, sizeof (error));
        if (!reply)
            fail_msg ("call %d: %s", index, error);
        if (dsh_reply_is_error (reply))
            fail_msg ("call %d: %s %s", index, dsh_reply_error_code (reply), dsh_reply_text (reply));
        zlistx_add_end (call_ids, strdup (dsh_reply_call_id (reply)));
        dsh_reply_destroy (&reply);
    }
    //  The handlers log before they answer: all is in the output already
    const char *served = dsh_testproc_output (serving, 200);
    const char *not_served = other? dsh_testproc_output (other, 0): "";
    for (const char *call_id = zlistx_first (call_ids); call_id; call_id = zlistx_next (call_ids)) {
        if (!strstr (served, call_id))
            fail_msg ("call %s was not served by the process that should have", call_id);
        if (strstr (not_served, call_id))
            fail_msg ("call %s was served by the process that should not have", call_id);
    }
    zlistx_destroy (&call_ids);
}

//  ---------------------------------------------------------------------
//  A second process under a live id is refused, told why, seen by
//  monitors, and gets none of the calls; its clean exit (its WITHDRAW)
//  does not take the owner out of the catalog

static void
test_duplicate_refused (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ();
    dsh_testproc_t *owner = s_demo (bed);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "echo", 1, 5000), 0);
    json_t *joined = s_event (bed, DSH_EV_JOINED, 5000);
    assert_non_null (joined);
    json_decref (joined);

    dsh_testproc_t *second = s_demo (bed);
    s_wait_refused (second);
    json_t *refused = s_event (bed, DSH_EV_REFUSED, 5000);
    assert_non_null (refused);
    assert_string_equal (json_string_value (json_object_get (refused, "component")), S_ID);
    assert_non_null (strstr (json_string_value (json_object_get (refused, "reason")), "choose another id"));
    json_decref (refused);

    s_calls_served_by (bed, 10, owner, second);

    //  It exits cleanly (WITHDRAW at its own generation): the owner stays
    dsh_testproc_signal (second, SIGTERM);
    assert_int_equal (dsh_testproc_wait (second, 5000), 0);
    s_calls_served_by (bed, 10, owner, NULL);
    json_t *left = s_event (bed, DSH_EV_LEFT, 2 * S_HEARTBEAT_MS);
    if (left)
        fail_msg ("the owner left when the refused process exited: %s", json_dumps (left, 0));
    dsh_testproc_destroy (&second);

    //  Another one, killed this time: still nothing changes
    second = s_demo (bed);
    s_wait_refused (second);
    dsh_testproc_signal (second, SIGKILL);
    dsh_testproc_wait (second, 5000);
    dsh_testproc_destroy (&second);
    s_calls_served_by (bed, 10, owner, NULL);

    dsh_testproc_destroy (&owner);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  The owner crashes: a new process under its id takes it at once (not
//  refused), serves the calls, and the call the dead one held is answered
//  TOOL_GONE at once, not at its deadline

static void
test_crash_frees_id (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ();
    dsh_testproc_t *owner = s_demo (bed);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "sleep_ms", 1, 5000), 0);
    s_calls_served_by (bed, 3, owner, NULL);

    //  A call the owner will never answer, with a deadline far away
    const char *sent = dsh_testkit_send_json (bed->client, "held-by-the-dead", "sleep_ms", "{\"ms\": 60000}", 60000);
    assert_non_null (sent);
    char *started = dsh_testproc_wait_line (owner, "held-by-the-dead", 5000);
    assert_non_null (started);
    free (started);
    dsh_testproc_signal (owner, SIGKILL);
    dsh_testproc_wait (owner, 5000);
    int64_t killed = zclock_mono ();

    dsh_testproc_t *restarted = s_demo (bed);
    dsh_reply_t *reply = dsh_client_recv (bed->client, 20000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "held-by-the-dead");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TOOL_GONE);
    dsh_reply_destroy (&reply);
    printf ("      owner killed: its call answered TOOL_GONE after %" PRId64 " ms, a new process under the id "
            "started meanwhile (heartbeat %d ms)\n", zclock_mono () - killed, S_HEARTBEAT_MS);

    s_calls_served_by (bed, 10, restarted, NULL);
    assert_null (strstr (dsh_testproc_output (restarted, 0), "is held by a live component"));

    dsh_testproc_destroy (&restarted);
    dsh_testproc_destroy (&owner);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  A refused process waits in line: when the owner dies, it gets the id
//  without connecting again, and serves the calls

static void
test_refused_takes_over (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ();
    dsh_testproc_t *owner = s_demo (bed);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "echo", 1, 5000), 0);
    dsh_testproc_t *second = s_demo (bed);
    s_wait_refused (second);
    dsh_testproc_signal (owner, SIGKILL);
    dsh_testproc_wait (owner, 5000);
    int64_t killed = zclock_mono ();

    //  Routable again within the liveness window (the test allows more)
    bool served = false;
    for (int attempt = 0; attempt < 50 && !served; attempt++) {
        char error [256];
        dsh_reply_t *reply = dsh_client_call (bed->client, "echo", "{\"message\": \"back\"}", NULL, 2000,
                                              error, sizeof (error));
        served = reply && !dsh_reply_is_error (reply);
        dsh_reply_destroy (&reply);
        if (!served)
            zclock_sleep (100);     //  the poll's interval
    }
    assert_true (served);
    printf ("      owner killed: the refused process served a call after %" PRId64 " ms (heartbeat %d ms)\n",
            zclock_mono () - killed, S_HEARTBEAT_MS);
    s_calls_served_by (bed, 10, second, NULL);

    dsh_testproc_destroy (&second);
    dsh_testproc_destroy (&owner);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  A component whose WORK connection closed, but whose heartbeats go on
//  (a hand-made one, its DEALER closed, its PUB still heartbeating), is
//  never left unreachable: it expires within the liveness window

//  Publishes "DSH1" command body (JSON) on pub.
static void
s_publish (zsock_t *pub, const char *command, const char *json)
{
    msgpack_sbuffer sbuf;
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack (json, &sbuf, error, sizeof (error)), 0);
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    zmsg_send (&msg, pub);
    msgpack_sbuffer_destroy (&sbuf);
}

//  The endpoint WELCOME names for key, resolved against the front.
static char *
s_welcome_endpoint (s_bed_t *bed, const char *key)
{
    char error [256];
    dsh_reply_t *welcome = dsh_client_request (bed->client, DSH_HELLO, NULL, 5000, error, sizeof (error));
    assert_non_null (welcome);
    const msgpack_object *value = dsh_map_get (dsh_reply_body (welcome), key);
    assert_non_null (value);
    char *given = strndup (value->via.str.ptr, value->via.str.size);
    char *endpoint = dsh_sock_resolve (given, bed->endpoint);
    free (given);
    dsh_reply_destroy (&welcome);
    return endpoint;
}

static void
test_lost_route_expires (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ();
    char *announce = s_welcome_endpoint (bed, "announce");
    char *work = s_welcome_endpoint (bed, "work");
    zsock_t *pub = zsock_new (ZMQ_PUB);
    assert_int_equal (zsock_connect (pub, "%s", announce), 0);
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    zsock_set_identity (dealer, "ghost");
    assert_int_equal (zsock_connect (dealer, "%s", work), 0);
    zstr_free (&announce);
    zstr_free (&work);
    msgpack_sbuffer sbuf;
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"component\": \"ghost\", \"generation\": 7}", &sbuf,
                                                error, sizeof (error)), 0);
    zmsg_t *hello = zmsg_new ();
    zmsg_addmem (hello, NULL, 0);
    zmsg_addstr (hello, DSH_PROTOCOL);
    zmsg_addstr (hello, DSH_HELLO);
    zmsg_addmem (hello, sbuf.data, sbuf.size);
    zmsg_send (&hello, dealer);
    msgpack_sbuffer_destroy (&sbuf);
    const char *presence = "{\"component\": \"ghost\", \"generation\": 7, \"tools\": [{\"name\": \"ghost_tool\","
                           " \"description\": \"never answers\", \"parameters\": {\"type\": \"object\"}}]}";
    int listed = -1;
    for (int attempt = 0; attempt < 25 && listed; attempt++) {
        s_publish (pub, DSH_ANNOUNCE, presence);
        listed = dsh_testkit_wait_tools (bed->endpoint, "ghost_tool", 1, 200);
    }
    assert_int_equal (listed, 0);

    //  Its WORK connection goes; its heartbeats do not
    zsock_destroy (&dealer);
    int64_t closed = zclock_mono ();
    json_t *left = NULL;
    int64_t give_up = zclock_mono () + 20 * S_HEARTBEAT_MS;
    while (!left && zclock_mono () < give_up) {
        s_publish (pub, DSH_HEARTBEAT, "{\"component\": \"ghost\", \"generation\": 7}");
        left = s_event (bed, DSH_EV_LEFT, S_HEARTBEAT_MS / 2);
    }
    if (!left)
        fail_msg ("a component with no WORK connection, heartbeating, stayed in the catalog");
    assert_string_equal (json_string_value (json_object_get (left, "component")), "ghost");
    assert_string_equal (json_string_value (json_object_get (left, "reason")), "expired");
    json_decref (left);
    printf ("      WORK connection closed, heartbeats on: expired after %" PRId64 " ms (liveness window %d ms)\n",
            zclock_mono () - closed, 3 * S_HEARTBEAT_MS);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "ghost_tool", 0, 5000), 0);

    zsock_destroy (&pub);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  The owner's tool set changes while it runs: each new generation is
//  taken (the owner states it on WORK), though presence at a generation
//  other than the owner's is not

static int
s_answer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "late");
    return 0;
}

static void
test_owner_changes_tools (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ();
    dsh_provider_t *provider = dsh_provider_new (bed->endpoint, "changing", 1);
    assert_non_null (provider);
    assert_int_equal (dsh_provider_add_raw (provider, "{\"name\": \"late_a\", \"description\": \"a\", "
                                            "\"parameters\": {\"type\": \"object\"}}", s_answer, NULL), 0);
    assert_int_equal (dsh_provider_wait_ready (provider, 10000), 0);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "late_", 1, 10000), 0);
    assert_int_equal (dsh_provider_add_raw (provider, "{\"name\": \"late_b\", \"description\": \"b\", "
                                            "\"parameters\": {\"type\": \"object\"}}", s_answer, NULL), 0);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "late_", 2, 10000), 0);
    assert_int_equal (dsh_provider_remove (provider, "late_a"), 0);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "late_a", 0, 10000), 0);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "late_b", 1, 10000), 0);
    char error [256];
    dsh_reply_t *reply = dsh_client_call (bed->client, "late_b", "{}", NULL, 10000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_text (reply), "late");
    dsh_reply_destroy (&reply);
    dsh_provider_destroy (&provider);
    s_bed_destroy (&bed);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_duplicate_refused),
        cmocka_unit_test (test_crash_frees_id),
        cmocka_unit_test (test_refused_takes_over),
        cmocka_unit_test (test_lost_route_expires),
        cmocka_unit_test (test_owner_changes_tools),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
