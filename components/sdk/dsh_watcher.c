/*  =========================================================================
    dsh_watcher - a gap-free view of the registry's tool set, kept current

    An actor owns the sockets and the view (dsh_view, which holds the Clone
    rules): a DEALER to the front of the broker it follows, for HELLO (to
    learn the events endpoint), PING (its liveness) and SNAPSHOT, and a SUB
    to that broker's events endpoint. The caller's side of the pipe only
    asks and listens. Pipe traffic, actor -> caller:

        "NOTICE" json-text                 each notice, in order
        COMMAND request-id value           the answer to a command

    and caller -> actor: "$TERM", or COMMAND request-id with COMMAND one of
    TOOLS, SEQ, SYNCS. Notices that arrive while the caller waits for an
    answer are kept for dsh_watcher_recv; the request id lets a late answer
    to a command that timed out be told apart and dropped.

    A new broker is never left to be noticed through an event of a new
    epoch, which may never come (a restarted broker relearns its tools
    before a SUB has reconnected, and then stays quiet). Instead:

    - every connection of the SUB, the first and each one made again, is
      followed by a SNAPSHOT request, so what was published while it was
      down is in the snapshot;
    - the front is PINGed every heartbeat: a PONG from another broker
      instance (its `broker` id changed: it restarted) sends the watcher
      back to HELLO, so endpoints that moved (ephemeral ports) are learnt
      again, then a new SUB and a snapshot;
    - nothing heard from the front for heartbeat x liveness means the
      broker is gone: the watcher follows the next broker of its list (or
      the same one again, with new sockets) from HELLO on.

    When to say HELLO and PING, and when to move on, is a session's to say
    (dsh_link, PROTOCOL.md "Client liveness"); the actor keeps the sockets.

    Each HELLO and SNAPSHOT request carries an id that the broker echoes: a
    request that gets no reply in time is re-sent with the same id, so
    whichever reply comes first is used, while replies to an abandoned
    request (the view was lost again in between) are dropped.
    =========================================================================
*/

#include "dsh_watcher.h"
#include "dsh_log.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_beacon.h"
#include "dsh_curve.h"
#include "dsh_view.h"
#include "dsh_link.h"

#include <inttypes.h>

#define SNAPSHOT_RETRY_MS   2000    //  until a SNAPSHOT reply comes, doubling:
#define SNAPSHOT_RETRY_MAX_MS 16000 //  a broker serves snapshots in turn
#define COMMAND_TIMEOUT_MS  5000    //  the actor answers at once; this is a backstop
#define EVENT_QUEUE_LIMIT   100000  //  events kept while a snapshot is awaited
#define EVENT_HWM           100000  //  a SUB that drops shows it as a gap, then resyncs
#define MAX_REPLY_BYTES     (256 * 1024 * 1024)     //  a snapshot of a large registry is big

//  The subscription has to reach the broker's PUB before the snapshot is
//  taken, or events in between are missed until the next one shows the
//  gap. The SUB's handshake is seen; its subscription, sent right after,
//  is not, so it is given a moment more.
#define SUBSCRIBE_SETTLE_MS 200
//  How often the SUB's handshakes are looked at, at most: libzmq reports
//  them on a monitor socket that the loop reads when it wakes
#define CONNECTION_CHECK_MS 100
#define BATCH               64      //  messages handled per wakeup, at most

struct _dsh_watcher_t {
    zactor_t *actor;
    zlistx_t *notices;          //  JSON texts received while a command waited
    uint64_t command_id;
};

//  What dsh_watcher_new hands to the actor.
typedef struct {
    zlistx_t *brokers;          //  the actor takes it
} s_start_t;

//  The actor's state.
typedef struct {
    zsock_t *pipe;
    dsh_link_t *session;        //  the brokers, followed one at a time: when
                                //  to say HELLO and PING, and to move on
    const char *front;          //  the one followed now (an item of session's)
    zsock_t *front_sock;        //  DEALER to its front; NULL if it cannot connect
    zsock_t *events;            //  SUB, once WELCOME told where
    dsh_handshake_t *events_handshake;
    size_t events_connections;  //  SUB handshakes that were followed by a snapshot
    zpoller_t *poller;
    dsh_view_t *view;
    bool terminated;
    uint64_t hello_id;          //  the HELLO whose WELCOME is awaited
    uint64_t request_id;        //  SNAPSHOT request awaited, 0 = none
    uint64_t last_request_id;   //  ids of HELLO and SNAPSHOT requests
    int64_t request_due;        //  when to (re)send it
    int64_t request_wait;       //  how long to wait for its reply before sending it again
} self_t;

static void
s_events_close (self_t *self)
{
    if (self->events)
        zpoller_remove (self->poller, self->events);
    dsh_handshake_destroy (&self->events_handshake);
    zsock_destroy (&self->events);
    self->events_connections = 0;
}

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        self_t *self = *self_p;
        s_events_close (self);
        zpoller_destroy (&self->poller);
        zsock_destroy (&self->front_sock);
        dsh_view_destroy (&self->view);
        dsh_link_destroy (&self->session);
        free (self);
        *self_p = NULL;
    }
}

//  Back to HELLO with the broker followed (the session sends it): its
//  endpoints may have moved. The view is lost until a snapshot comes from
//  the new SUB.
static void
s_rediscover (self_t *self)
{
    s_events_close (self);
    dsh_view_lose (self->view);
    self->request_id = 0;
    self->hello_id = ++self->last_request_id;
}

//  Follow the broker at front (an item of brokers), with new sockets:
//  nothing queued for, or from, the one before is kept.
static void
s_follow (self_t *self, const char *front)
{
    self->front = front;
    if (self->front_sock)
        zpoller_remove (self->poller, self->front_sock);
    zsock_destroy (&self->front_sock);
    s_rediscover (self);
    zsock_t *front_sock = zsock_new (ZMQ_DEALER);
    assert (front_sock);
    //  Requests re-sent while the broker is away queue up and are all
    //  answered once it appears: replies to a HELLO or SNAPSHOT other than
    //  the one awaited are ignored
    dsh_sock_limit (front_sock, MAX_REPLY_BYTES, 1000);
    //  No ZMTP heartbeats: PING and PONG on FRONT are the watcher's
    //  liveness (the Clone procedure, rule 7), and a silent broker makes
    //  new sockets
    dsh_sock_keepalive (front_sock, dsh_link_heartbeat_ms (self->session), dsh_link_liveness (self->session));
    dsh_curve_client (front_sock);
    if (zsock_connect (front_sock, "%s", front)) {
        //  Not an endpoint this process can connect to: the silence rule
        //  moves on to the next broker
        dsh_log_warning ("dsh_watcher: cannot connect to \"%s\"", front);
        zsock_destroy (&front_sock);
        return;
    }
    self->front_sock = front_sock;
    zpoller_add (self->poller, self->front_sock);
}

static void s_send_request (self_t *self, const char *command, uint64_t id);

//  Does what the session says, in order. A broker silent for the window
//  (or never answering at all) is left for the next one in the list (the
//  same one, if it is alone, on new sockets); one that answers PING under
//  another instance id than its WELCOME's restarted, and is asked for its
//  endpoints again.
static void
s_session_follow (self_t *self)
{
    dsh_link_event_t event;
    while (dsh_link_next (self->session, &event) == 0) {
        if (event.type == DSH_LINK_CONNECT)
            s_follow (self, event.endpoint);
        else
        if (event.type == DSH_LINK_SEND_HELLO)
            s_send_request (self, DSH_HELLO, self->hello_id);
        else
        if (event.type == DSH_LINK_SEND_PING)
            s_send_request (self, DSH_PING, 0);
        else
        if (event.type == DSH_LINK_DOWN && dsh_link_size (self->session) > 1)
            dsh_log_warning ("dsh_watcher: no answer from \"%s\" for %" PRId64 " ms; following the next broker",
                             event.endpoint, event.silence_ms);
        else
        if (event.type == DSH_LINK_DOWN)
            dsh_log_info ("dsh_watcher: no answer from \"%s\" for %" PRId64 " ms; connecting again",
                          event.endpoint, event.silence_ms);
        else
        if (event.type == DSH_LINK_RESTARTED) {
            dsh_log_info ("dsh_watcher: the broker at \"%s\" restarted; resynchronising", event.endpoint);
            s_rediscover (self);
        }
    }
}

static self_t *
s_self_new (zsock_t *pipe, zlistx_t **brokers_p)
{
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->pipe = pipe;
    self->session = dsh_link_new (DSH_LINK_WATCHER);
    for (const char *broker = zlistx_first (*brokers_p); broker; broker = zlistx_next (*brokers_p))
        dsh_link_add (self->session, broker);
    zlistx_destroy (brokers_p);
    self->view = dsh_view_new (EVENT_QUEUE_LIMIT);
    self->poller = zpoller_new (pipe, NULL);
    assert (self->poller);
    //  The caller's SIGINT is the caller's business: the actor ends on $TERM
    zpoller_set_nonstop (self->poller, true);
    dsh_link_start (self->session, zclock_mono ());
    s_session_follow (self);
    return self;
}

//  Sends "" DSH1 command {id?}; a failed send is retried by the timers.
static void
s_send_request (self_t *self, const char *command, uint64_t id)
{
    if (!self->front_sock)
        return;
    zmsg_t *msg = dsh_proto_message (NULL, command);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id) {
        dsh_pack_cstr (&packer.pk, "id");
        msgpack_pack_uint64 (&packer.pk, id);
    }
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_append (msg, &body);
    dsh_sock_send (self->front_sock, &msg);
}

//  Starts a new SNAPSHOT request, sent when due. After a gap (not fresh),
//  one request awaited is enough: the broker answers in turn, and any
//  snapshot it takes from now on is all the view needs. A fresh one (the
//  SUB connected again) must be taken after now.
static void
s_request_snapshot (self_t *self, int64_t due, bool fresh)
{
    if (!fresh && self->request_id && self->request_wait)
        return;
    self->request_id = ++self->last_request_id;
    self->request_due = due;
    self->request_wait = 0;
}

static void
s_deliver_notices (self_t *self)
{
    json_t *notice;
    while ((notice = dsh_view_notice (self->view))) {
        //  After a failover the user can tell whose view this is
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        if (kind && streq (kind, "snapshot"))
            json_object_set_new (notice, "broker", json_string (self->front));
        char *text = json_dumps (notice, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref (notice);
        if (text)
            zstr_sendx (self->pipe, "NOTICE", text, NULL);
        free (text);
    }
}

//  True if the reply's id is id.
static bool
s_answers (dsh_doc_t *doc, uint64_t id)
{
    const msgpack_object *echoed = dsh_map_get (dsh_doc_root (doc), "id");
    return echoed && echoed->type == MSGPACK_OBJECT_POSITIVE_INTEGER && echoed->via.u64 == id;
}

static void
s_handle_welcome (self_t *self, dsh_doc_t *doc)
{
    if (dsh_link_state (self->session) != DSH_LINK_HELLO || !s_answers (doc, self->hello_id))
        return;                 //  an answer to a re-sent or abandoned HELLO
    const msgpack_object *root = dsh_doc_root (doc);
    const char *advertised = dsh_doc_strdup (doc, dsh_map_get (root, "events"));
    const char *broker_id = dsh_doc_strdup (doc, dsh_map_get (root, "broker"));
    if (!advertised || !broker_id) {
        dsh_log_warning ("dsh_watcher: WELCOME from \"%s\" names no events endpoint or broker id", self->front);
        return;
    }
    int heartbeat_ms = dsh_map_int_in (root, "heartbeatMs", 1, 3600000, DSH_DEFAULT_HEARTBEAT_MS);
    int liveness = dsh_map_int_in (root, "liveness", 1, 1000, DSH_DEFAULT_LIVENESS);
    char *endpoint = dsh_sock_resolve (advertised, self->front);
    zsock_t *events = zsock_new (ZMQ_SUB);
    assert (events);
    dsh_sock_limit (events, MAX_REPLY_BYTES, EVENT_HWM);
    dsh_sock_keepalive (events, heartbeat_ms, liveness);
    zsock_set_subscribe (events, "");
    dsh_curve_client (events);
    dsh_handshake_t *handshake = dsh_handshake_new (events);
    if (zsock_connect (events, "%s", endpoint)) {
        dsh_log_warning ("dsh_watcher: cannot connect to events endpoint \"%s\"", endpoint);
        dsh_handshake_destroy (&handshake);
        zsock_destroy (&events);
    }
    else {
        //  The snapshot is asked for once the SUB has connected (s_run_timers)
        self->events = events;
        self->events_handshake = handshake;
        self->events_connections = 0;
        zpoller_add (self->poller, self->events);
        dsh_link_welcome (self->session, zclock_mono (), broker_id, heartbeat_ms, liveness);
        s_session_follow (self);
    }
    zstr_free (&endpoint);
}

//  Another instance id than the WELCOME's: the broker restarted
//  (s_session_follow)
static void
s_handle_pong (self_t *self, dsh_doc_t *doc)
{
    const msgpack_object *root = dsh_doc_root (doc);
    dsh_link_pong (self->session, zclock_mono (), dsh_doc_strdup (doc, dsh_map_get (root, "broker")),
                   dsh_map_int_in (root, "heartbeatMs", 1, 3600000, 0), dsh_map_int_in (root, "liveness", 1, 1000, 0));
    s_session_follow (self);
}

static void
s_handle_snapshot (self_t *self, zframe_t *body, dsh_doc_t *doc)
{
    const msgpack_object *id = dsh_map_get (dsh_doc_root (doc), "id");
    if (!self->request_id
    ||  (id && !(id->type == MSGPACK_OBJECT_POSITIVE_INTEGER && id->via.u64 == self->request_id)))
        return;                 //  an answer to an abandoned request
    char error [256];
    dsh_view_verdict_t verdict = dsh_view_snapshot (self->view, zframe_data (body), zframe_size (body),
                                                    error, sizeof (error));
    if (verdict == DSH_VIEW_INVALID) {
        dsh_log_warning ("dsh_watcher: bad SNAPSHOT from \"%s\": %s", self->front, error);
        return;                 //  the request is re-sent when due
    }
    self->request_id = 0;
    if (verdict == DSH_VIEW_RESYNC)
        s_request_snapshot (self, zclock_mono (), false);
    s_deliver_notices (self);
}

static int
s_handle_front (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    //  Any reply at all shows the broker is there
    dsh_link_heard (self->session, zclock_mono ());
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    dsh_doc_t *doc = NULL;
    zframe_t *body = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0) {
        body = zmsg_size (msg) == 1? zmsg_first (msg): NULL;
        if (body)
            doc = dsh_proto_decode_body (body, error, sizeof (error));
        else
            snprintf (error, sizeof (error), "%s has %zu body frames", command, zmsg_size (msg));
    }
    if (!doc)
        dsh_log_warning ("dsh_watcher: bad reply from \"%s\": %s", self->front, error);
    else
    if (streq (command, DSH_WELCOME))
        s_handle_welcome (self, doc);
    else
    if (streq (command, DSH_PONG))
        s_handle_pong (self, doc);
    else
    if (streq (command, DSH_SNAPSHOT))
        s_handle_snapshot (self, body, doc);
    else
    if (streq (command, DSH_ERROR)) {
        char *message = dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "message"));
        dsh_log_warning ("dsh_watcher: broker \"%s\" says: %s", self->front, message? message: "(no message)");
    }
    dsh_doc_destroy (&doc);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

static int
s_handle_events (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    char error [256];
    if (zmsg_size (msg) != 2)
        dsh_log_warning ("dsh_watcher: event with %zu frames ignored", zmsg_size (msg));
    else {
        zframe_t *body = zmsg_last (msg);
        dsh_view_verdict_t verdict = dsh_view_event (self->view, zframe_data (body), zframe_size (body),
                                                     error, sizeof (error));
        if (verdict == DSH_VIEW_INVALID)
            dsh_log_warning ("dsh_watcher: bad event ignored: %s", error);
        else
        if (verdict == DSH_VIEW_RESYNC)
            s_request_snapshot (self, zclock_mono (), false);
        s_deliver_notices (self);
    }
    zmsg_destroy (&msg);
    return 0;
}

static void
s_handle_pipe (self_t *self)
{
    zmsg_t *msg = zmsg_recv (self->pipe);
    if (!msg)
        return;
    char *command = zmsg_popstr (msg);
    char *request = zmsg_popstr (msg);
    if (!command)
        zsys_error ("dsh_watcher: empty pipe message");
    else
    if (streq (command, "$TERM"))
        self->terminated = true;
    else
    if (request && streq (command, "TOOLS")) {
        json_t *tools = dsh_view_tools (self->view);
        char *text = json_dumps (tools, JSON_COMPACT);
        json_decref (tools);
        zstr_sendx (self->pipe, command, request, text, NULL);
        free (text);
    }
    else
    if (request && streq (command, "SEQ")) {
        char value [24];
        snprintf (value, sizeof (value), "%" PRIu64, dsh_view_seq (self->view));
        zstr_sendx (self->pipe, command, request, value, NULL);
    }
    else
    if (request && streq (command, "SYNCS")) {
        char value [24];
        snprintf (value, sizeof (value), "%zu", dsh_view_syncs (self->view));
        zstr_sendx (self->pipe, command, request, value, NULL);
    }
    else
        zsys_error ("dsh_watcher: invalid pipe command \"%s\"", command);
    zstr_free (&command);
    zstr_free (&request);
    zmsg_destroy (&msg);
}

//  Sends what is due, follows the SUB's connections and the broker's
//  liveness; returns how long the loop may sleep.
static int
s_run_timers (self_t *self)
{
    //  HELLO until WELCOME, PING every heartbeat, and the silence rule
    int64_t now = zclock_mono ();
    int64_t next = dsh_link_tick (self->session, now);
    s_session_follow (self);
    if (self->events) {
        //  Each connection of the SUB, the first one too, may follow events
        //  it never got (the broker restarted, the link was cut): only a
        //  snapshot taken after it is whole
        size_t connections = dsh_handshake_successes (self->events_handshake);
        if (connections > self->events_connections) {
            if (self->events_connections)
                dsh_log_info ("dsh_watcher: events from \"%s\" connected again; resynchronising", self->front);
            self->events_connections = connections;
            dsh_view_lose (self->view);
            s_request_snapshot (self, now + SUBSCRIBE_SETTLE_MS, true);
        }
        if (now + CONNECTION_CHECK_MS < next)
            next = now + CONNECTION_CHECK_MS;
    }
    if (self->request_id) {
        if (now >= self->request_due) {
            s_send_request (self, DSH_SNAPSHOT, self->request_id);
            self->request_wait = self->request_wait? self->request_wait * 2: SNAPSHOT_RETRY_MS;
            if (self->request_wait > SNAPSHOT_RETRY_MAX_MS)
                self->request_wait = SNAPSHOT_RETRY_MAX_MS;
            self->request_due = now + self->request_wait;
        }
        if (self->request_due < next)
            next = self->request_due;
    }
    return (int) (next > now? next - now: 0);
}

static void
s_watcher_actor (zsock_t *pipe, void *args)
{
    s_start_t *start = (s_start_t *) args;
    self_t *self = s_self_new (pipe, &start->brokers);
    zsock_signal (pipe, 0);
    while (!self->terminated) {
        int timeout = s_run_timers (self);
        void *which = zpoller_wait (self->poller, timeout);
        if (which == self->pipe)
            s_handle_pipe (self);
        else
        if (which && which == self->front_sock)
            dsh_sock_drain (self->front_sock, BATCH, s_handle_front, self);
        else
        if (which && which == self->events)
            //  A burst of changes (a component announcing many tools) is
            //  taken a batch per wakeup, not a poll per event
            dsh_sock_drain (self->events, BATCH, s_handle_events, self);
    }
    s_self_destroy (&self);
}

dsh_watcher_t *
dsh_watcher_new (const char *broker)
{
    char error [512];
    //  Beacon entries become the brokers heard now, once
    zlistx_t *named = dsh_sock_brokers (broker, error, sizeof (error));
    zlistx_t *brokers = named? dsh_beacon_expand (named, 0, error, sizeof (error)): NULL;
    zlistx_destroy (&named);
    if (!brokers) {
        zsys_error ("dsh_watcher: %s", error);
        return NULL;
    }
    s_start_t start = { .brokers = brokers };
    zactor_t *actor = zactor_new (s_watcher_actor, &start);
    zlistx_destroy (&start.brokers);
    if (!actor)
        return NULL;
    dsh_watcher_t *self = (dsh_watcher_t *) zmalloc (sizeof (dsh_watcher_t));
    assert (self);
    self->actor = actor;
    self->notices = zlistx_new ();
    zlistx_set_destructor (self->notices, (zlistx_destructor_fn *) zstr_free);
    return self;
}

void
dsh_watcher_destroy (dsh_watcher_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_watcher_t *self = *self_p;
        zactor_destroy (&self->actor);
        zlistx_destroy (&self->notices);
        free (self);
        *self_p = NULL;
    }
}

//  The next message from the actor, or NULL if none within timeout_ms
//  (negative: no limit) or on a signal.
static zmsg_t *
s_pipe_recv (dsh_watcher_t *self, int timeout_ms)
{
    zmq_pollitem_t item = { zsock_resolve (self->actor), 0, ZMQ_POLLIN, 0 };
    if (zmq_poll (&item, 1, timeout_ms) <= 0)
        return NULL;
    return zmsg_recv (self->actor);
}

static json_t *
s_parse_notice (char **text_p)
{
    json_t *notice = json_loads (*text_p, 0, NULL);
    zstr_free (text_p);
    return notice;
}

zsock_t *
dsh_watcher_sock (dsh_watcher_t *self)
{
    assert (self);
    return zactor_sock (self->actor);
}

json_t *
dsh_watcher_recv (dsh_watcher_t *self, int timeout_ms)
{
    assert (self);
    char *text = (char *) zlistx_detach (self->notices, NULL);
    if (text)
        return s_parse_notice (&text);
    int64_t deadline = zclock_mono () + (timeout_ms > 0? timeout_ms: 0);
    while (true) {
        int64_t left = deadline - zclock_mono ();
        zmsg_t *msg = s_pipe_recv (self, timeout_ms < 0? -1: (int) (left > 0? left: 0));
        if (msg) {
            char *kind = zmsg_popstr (msg);
            if (kind && streq (kind, "NOTICE"))
                text = zmsg_popstr (msg);
            zstr_free (&kind);
            zmsg_destroy (&msg);
            if (text)
                return s_parse_notice (&text);
        }
        else
        if (timeout_ms >= 0 && zclock_mono () >= deadline)
            return NULL;
        else
        if (zsys_interrupted)
            return NULL;
    }
}

//  Asks the actor a command; returns its answer (caller frees), or NULL if
//  none came in time. Notices that arrive meanwhile are kept.
static char *
s_ask (dsh_watcher_t *self, const char *command)
{
    char request [24];
    snprintf (request, sizeof (request), "%" PRIu64, ++self->command_id);
    if (zstr_sendx (self->actor, command, request, NULL))
        return NULL;
    char *answer = NULL;
    int64_t deadline = zclock_mono () + COMMAND_TIMEOUT_MS;
    while (!answer) {
        int64_t left = deadline - zclock_mono ();
        if (left <= 0)
            break;
        zmsg_t *msg = s_pipe_recv (self, (int) left);
        if (!msg)
            continue;
        char *kind = zmsg_popstr (msg);
        char *second = zmsg_popstr (msg);
        if (kind && second && streq (kind, "NOTICE")) {
            zlistx_add_end (self->notices, second);
            second = NULL;
        }
        else
        if (kind && second && streq (kind, command) && streq (second, request))
            answer = zmsg_popstr (msg);
        zstr_free (&kind);
        zstr_free (&second);
        zmsg_destroy (&msg);
    }
    return answer;
}

json_t *
dsh_watcher_tools (dsh_watcher_t *self)
{
    assert (self);
    char *answer = s_ask (self, "TOOLS");
    json_t *tools = answer? json_loads (answer, 0, NULL): NULL;
    zstr_free (&answer);
    return tools;
}

uint64_t
dsh_watcher_seq (dsh_watcher_t *self)
{
    assert (self);
    char *answer = s_ask (self, "SEQ");
    uint64_t seq = answer? strtoull (answer, NULL, 10): 0;
    zstr_free (&answer);
    return seq;
}

size_t
dsh_watcher_syncs (dsh_watcher_t *self)
{
    assert (self);
    char *answer = s_ask (self, "SYNCS");
    size_t syncs = answer? (size_t) strtoull (answer, NULL, 10): 0;
    zstr_free (&answer);
    return syncs;
}
