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
    CURVE, where the id follows the key. An owner's tool set is its own
    to change, and a swarm of owners adding their tools in loops on a
    loaded machine joins with one ANNOUNCE each (counted by a relay the
    swarm takes for the broker's announce socket).
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

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

//  A call for a listed component that has no WORK connection waits for one
//  (it never left the broker), and the connection that claims the id runs
//  it: not TOOL_GONE at once, as before (a component reconnecting after its
//  broker stalled lost its calls so).
static void
test_call_waits_for_connection (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ();
    char *announce = s_welcome_endpoint (bed, "announce");
    char *work = s_welcome_endpoint (bed, "work");
    zsock_t *pub = zsock_new (ZMQ_PUB);
    assert_int_equal (zsock_connect (pub, "%s", announce), 0);
    zstr_free (&announce);
    const char *presence = "{\"component\": \"later\", \"generation\": 9, \"tools\": [{\"name\": \"later_tool\","
                           " \"description\": \"answers once connected\", \"parameters\": {\"type\": \"object\"}}]}";
    int listed = -1;
    for (int attempt = 0; attempt < 25 && listed; attempt++) {
        s_publish (pub, DSH_ANNOUNCE, presence);
        listed = dsh_testkit_wait_tools (bed->endpoint, "later_tool", 1, 200);
    }
    assert_int_equal (listed, 0);

    //  Listed, not connected: the call is sent now
    dsh_client_t *caller = dsh_client_new (bed->endpoint);
    const char *call_id = dsh_client_call_send (caller, "waits-1", "later_tool", NULL, 0, NULL, NULL, 0, 10000);
    assert_non_null (call_id);
    assert_null (dsh_client_recv (caller, 300));

    //  A connection claims the id: the call comes to it
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    zsock_set_identity (dealer, "later");
    assert_int_equal (zsock_connect (dealer, "%s", work), 0);
    zstr_free (&work);
    msgpack_sbuffer sbuf;
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"component\": \"later\", \"generation\": 9}", &sbuf,
                                                error, sizeof (error)), 0);
    zmsg_t *hello = zmsg_new ();
    zmsg_addmem (hello, NULL, 0);
    zmsg_addstr (hello, DSH_PROTOCOL);
    zmsg_addstr (hello, DSH_HELLO);
    zmsg_addmem (hello, sbuf.data, sbuf.size);
    zmsg_send (&hello, dealer);
    msgpack_sbuffer_destroy (&sbuf);
    zsock_set_rcvtimeo (dealer, S_HEARTBEAT_MS / 2);
    zmsg_t *call = NULL;
    int64_t give_up = zclock_mono () + 5000;
    while (!call && zclock_mono () < give_up) {
        s_publish (pub, DSH_HEARTBEAT, "{\"component\": \"later\", \"generation\": 9}");
        zmsg_t *msg = zmsg_recv (dealer);
        //  "" DSH1 COMMAND ...: SYNC and HEARTBEAT pass, a CALL stops
        zframe_t *command = NULL;
        if (msg && zmsg_first (msg) && zmsg_next (msg))
            command = zmsg_next (msg);
        if (command && zframe_streq (command, DSH_CALL))
            call = msg;
        else
            zmsg_destroy (&msg);
    }
    if (!call)
        fail_msg ("the call waiting for \"later\" never came to the connection that claimed it");
    //  "" DSH1 CALL token body: answered on its token
    zmsg_t *result = zmsg_new ();
    zmsg_addmem (result, NULL, 0);
    zmsg_addstr (result, DSH_PROTOCOL);
    zmsg_addstr (result, DSH_RESULT);
    zmsg_first (call);
    zmsg_next (call);
    zmsg_next (call);
    zframe_t *token = zmsg_next (call);
    zmsg_addmem (result, zframe_data (token), zframe_size (token));
    assert_int_equal (dsh_json_text_to_msgpack ("{\"callId\": \"waits-1\", \"content\": [{\"type\": \"text\", "
                                                "\"text\": \"connected\"}], \"isError\": false}", &sbuf, error, sizeof (error)), 0);
    zmsg_addmem (result, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    zmsg_send (&result, dealer);
    zmsg_destroy (&call);
    dsh_reply_t *reply = dsh_client_recv (caller, 5000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    if (dsh_reply_is_error (reply))
        fail_msg ("the call that waited: %s", dsh_reply_text (reply));
    assert_string_equal (dsh_reply_text (reply), "connected");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&caller);
    zsock_destroy (&dealer);
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
    dsh_provider_start (provider);
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

//  ---------------------------------------------------------------------
//  A swarm joins with one ANNOUNCE each

#define S_SWARM_COMPONENTS  20
#define S_SWARM_TOOLS       200
#define S_SWARM_LOADERS     2       //  threads that only spin: a loaded machine

//  Between the swarm and the broker: a front that answers each HELLO with
//  the broker's own WELCOME but for its announce endpoint, the relay's SUB,
//  where each ANNOUNCE is counted and, like everything else, passed on to
//  the broker. WORK goes straight to the broker.
typedef struct {
    zsock_t *front;                         //  ROUTER, where the swarm says HELLO
    zsock_t *sub;                           //  SUB, the swarm's PUBs connect here
    zsock_t *pub;                           //  XPUB to the broker's announce socket
    zframe_t *welcome;                      //  the WELCOME body the swarm gets
    size_t announces [S_SWARM_COMPONENTS];  //  how many swarm-NN sent
    size_t tools [S_SWARM_COMPONENTS];      //  in its last one
    size_t bytes;                           //  of every ANNOUNCE's body
} s_relay_t;

static void
s_relay_count (s_relay_t *self, zmsg_t *msg)
{
    //  "DSH1" command body
    zmsg_first (msg);
    zframe_t *command = zmsg_next (msg);
    if (zmsg_size (msg) != 3 || !zframe_streq (command, DSH_ANNOUNCE))
        return;
    zframe_t *body = zmsg_last (msg);
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error));
    dsh_presence_t presence;
    unsigned index;
    if (doc && dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof (error)) == 0
    &&  sscanf (presence.component, "swarm-%u", &index) == 1 && index < S_SWARM_COMPONENTS) {
        self->announces [index]++;
        self->tools [index] = presence.tools->via.array.size;
        self->bytes += zframe_size (body);
    }
    dsh_doc_destroy (&doc);
}

static void
s_relay_actor (zsock_t *pipe, void *args)
{
    s_relay_t *self = (s_relay_t *) args;
    zpoller_t *poller = zpoller_new (pipe, self->front, self->sub, NULL);
    zsock_signal (pipe, 0);
    void *which;
    while ((which = zpoller_wait (poller, -1)) && which != pipe) {
        zmsg_t *msg = zmsg_recv (which);
        if (which == self->sub) {
            s_relay_count (self, msg);
            zmsg_send (&msg, self->pub);
            continue;
        }
        //  [routing id] "" "DSH1" "HELLO" body
        zframe_t *routing_id = zmsg_pop (msg);
        zmsg_first (msg);
        zmsg_next (msg);
        zframe_t *verb = zmsg_next (msg);
        if (verb && zframe_streq (verb, DSH_HELLO)) {
            zmsg_t *reply = zmsg_new ();
            zmsg_append (reply, &routing_id);
            zmsg_addmem (reply, "", 0);
            zmsg_addstr (reply, DSH_PROTOCOL);
            zmsg_addstr (reply, DSH_WELCOME);
            zmsg_append (reply, &(zframe_t *) { zframe_dup (self->welcome) });
            zmsg_send (&reply, self->front);
        }
        zframe_destroy (&routing_id);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    char *term = zstr_recv (pipe);
    zstr_free (&term);
}

//  The relay's sockets, and the broker's WELCOME with the relay's SUB as
//  its announce endpoint.
static void
s_relay_init (s_relay_t *self, const char *broker)
{
    memset (self, 0, sizeof (*self));
    self->front = zsock_new_router ("tcp://127.0.0.1:*");
    self->sub = zsock_new_sub ("@tcp://127.0.0.1:*", "");
    assert_non_null (self->front);
    assert_non_null (self->sub);
    dsh_client_t *client = dsh_client_new (broker);
    char error [256];
    dsh_reply_t *welcome = dsh_client_request (client, DSH_HELLO, NULL, 10000, error, sizeof (error));
    assert_non_null (welcome);
    const msgpack_object *root = dsh_reply_body (welcome);
    assert_int_equal (root->type, MSGPACK_OBJECT_MAP);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, root->via.map.size);
    for (uint32_t index = 0; index < root->via.map.size; index++) {
        const msgpack_object_kv *pair = &root->via.map.ptr [index];
        msgpack_pack_object (&packer.pk, pair->key);
        if (pair->key.type == MSGPACK_OBJECT_STR && pair->key.via.str.size == 8
        &&  memcmp (pair->key.via.str.ptr, "announce", 8) == 0) {
            char announce [256];
            snprintf (announce, sizeof (announce), "%.*s", (int) pair->val.via.str.size, pair->val.via.str.ptr);
            self->pub = dsh_testkit_announce_pub (announce, 10000);
            dsh_pack_cstr (&packer.pk, zsock_endpoint (self->sub));
        }
        else
            msgpack_pack_object (&packer.pk, pair->val);
    }
    self->welcome = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    assert_non_null (self->pub);
    dsh_reply_destroy (&welcome);
    dsh_client_destroy (&client);
}

static void
s_relay_destroy (s_relay_t *self)
{
    zframe_destroy (&self->welcome);
    zsock_destroy (&self->front);
    zsock_destroy (&self->sub);
    zsock_destroy (&self->pub);
}

typedef struct {
    const char *front;
    unsigned index;
    dsh_provider_t *provider;
    size_t added;
} s_member_t;

//  A component that adds its tools one by one, then starts (on its own
//  thread: the test's asserts are the main thread's).
static void *
s_member_join (void *arg)
{
    s_member_t *member = (s_member_t *) arg;
    char id [32];
    snprintf (id, sizeof (id), "swarm-%02u", member->index);
    member->provider = dsh_provider_new (member->front, id, 1);
    for (unsigned tool = 0; member->provider && tool < S_SWARM_TOOLS; tool++) {
        char entry [160];
        snprintf (entry, sizeof (entry), "{\"name\": \"swarm_%02u_%03u\", \"description\": \"one of many\", "
                  "\"parameters\": {\"type\": \"object\"}}", member->index, tool);
        if (dsh_provider_add_raw (member->provider, entry, s_answer, NULL) == 0)
            member->added++;
    }
    if (member->provider)
        dsh_provider_start (member->provider);
    return NULL;
}

static atomic_bool s_loaded;

static void *
s_load (void *arg)
{
    (void) arg;
    volatile uint64_t spins = 0;
    while (atomic_load (&s_loaded))
        spins++;
    return NULL;
}

//  Twenty components, each in a thread adding 200 tools with one call a
//  tool, on a machine two threads keep busy: each joins with one ANNOUNCE
//  (two at most: a SYNC may ask again), and it has every tool.
static void
test_swarm_announces_once (void **state)
{
    (void) state;
    char endpoint [256];
    //  A long liveness window: no component of a loaded swarm expires,
    //  which would make it announce again
    dsh_testproc_t *broker = dsh_testkit_broker (1000, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    s_relay_t relay;
    s_relay_init (&relay, endpoint);
    zactor_t *relay_actor = zactor_new (s_relay_actor, &relay);
    atomic_store (&s_loaded, true);
    pthread_t loaders [S_SWARM_LOADERS];
    for (size_t index = 0; index < S_SWARM_LOADERS; index++)
        assert_int_equal (pthread_create (&loaders [index], NULL, s_load, NULL), 0);
    s_member_t members [S_SWARM_COMPONENTS];
    pthread_t threads [S_SWARM_COMPONENTS];
    for (unsigned index = 0; index < S_SWARM_COMPONENTS; index++) {
        members [index] = (s_member_t) { zsock_endpoint (relay.front), index, NULL, 0 };
        assert_int_equal (pthread_create (&threads [index], NULL, s_member_join, &members [index]), 0);
    }
    for (size_t index = 0; index < S_SWARM_COMPONENTS; index++) {
        pthread_join (threads [index], NULL);
        assert_int_equal (members [index].added, S_SWARM_TOOLS);
    }
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "swarm_", S_SWARM_COMPONENTS * S_SWARM_TOOLS, 60000), 0);
    atomic_store (&s_loaded, false);
    for (size_t index = 0; index < S_SWARM_LOADERS; index++)
        pthread_join (loaders [index], NULL);
    zactor_destroy (&relay_actor);

    size_t total = 0, most = 0;
    for (size_t index = 0; index < S_SWARM_COMPONENTS; index++) {
        total += relay.announces [index];
        most = relay.announces [index] > most? relay.announces [index]: most;
    }
    print_message ("%d components x %d tools: %zu ANNOUNCEs (at most %zu from one), %zu bytes\n",
                   S_SWARM_COMPONENTS, S_SWARM_TOOLS, total, most, relay.bytes);
    for (size_t index = 0; index < S_SWARM_COMPONENTS; index++) {
        if (relay.announces [index] < 1 || relay.announces [index] > 2)
            fail_msg ("swarm-%02zu sent %zu ANNOUNCEs to join", index, relay.announces [index]);
        assert_int_equal (relay.tools [index], S_SWARM_TOOLS);
    }
    for (size_t index = 0; index < S_SWARM_COMPONENTS; index++)
        dsh_provider_destroy (&members [index].provider);
    s_relay_destroy (&relay);
    dsh_testproc_destroy (&broker);
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
        cmocka_unit_test (test_call_waits_for_connection),
        cmocka_unit_test (test_owner_changes_tools),
        cmocka_unit_test (test_swarm_announces_once),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
