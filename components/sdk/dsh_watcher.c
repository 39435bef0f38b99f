/*  =========================================================================
    dsh_watcher - a gap-free view of the registry's tool set, kept current

    An actor owns the sockets and the view (dsh_view, which holds the Clone
    rules): a DEALER to the broker's front for HELLO (to learn the events
    endpoint) and SNAPSHOT, and a SUB to the events endpoint. The caller's
    side of the pipe only asks and listens. Pipe traffic, actor -> caller:

        "NOTICE" json-text                 each notice, in order
        COMMAND request-id value           the answer to a command

    and caller -> actor: "$TERM", or COMMAND request-id with COMMAND one of
    TOOLS, SEQ, SYNCS. Notices that arrive while the caller waits for an
    answer are kept for dsh_watcher_recv; the request id lets a late answer
    to a command that timed out be told apart and dropped.

    Each SNAPSHOT request carries an id that the broker echoes: a request
    that gets no reply in time is re-sent with the same id, so whichever
    reply comes first is used, while replies to an abandoned request (the
    view was lost again in between) are dropped.
    =========================================================================
*/

#include "dsh_watcher.h"
#include "dsh_log.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_curve.h"
#include "dsh_view.h"

#include <inttypes.h>

#define HELLO_RETRY_MS      1000    //  until a WELCOME comes
#define SNAPSHOT_RETRY_MS   2000    //  until a SNAPSHOT reply comes
#define COMMAND_TIMEOUT_MS  5000    //  the actor answers at once; this is a backstop
#define EVENT_QUEUE_LIMIT   100000  //  events kept while a snapshot is awaited
#define EVENT_HWM           100000  //  a SUB that drops shows it as a gap, then resyncs
#define MAX_REPLY_BYTES     (256 * 1024 * 1024)     //  a snapshot of a large registry is big

//  The subscription has to reach the broker's PUB before the snapshot is
//  taken, or events in between are missed until the next one shows the
//  gap; a SUB cannot see when that has happened, so it is given a moment.
#define SUBSCRIBE_SETTLE_MS 200
#define BATCH               64      //  messages handled per wakeup, at most

struct _dsh_watcher_t {
    zactor_t *actor;
    zlistx_t *notices;          //  JSON texts received while a command waited
    uint64_t command_id;
};

//  What dsh_watcher_new hands to the actor, and learns back from it.
typedef struct {
    const char *front;
    int rc;
} s_start_t;

//  The actor's state.
typedef struct {
    zsock_t *pipe;
    char *front;                //  the endpoint the watcher was given
    zsock_t *front_sock;        //  DEALER to the broker's front
    zsock_t *events;            //  SUB, once WELCOME told where
    zpoller_t *poller;
    dsh_view_t *view;
    bool terminated;
    int64_t hello_due;          //  when to send HELLO next; 0 once welcomed
    uint64_t request_id;        //  SNAPSHOT request awaited, 0 = none
    uint64_t last_request_id;
    int64_t request_due;        //  when to (re)send it
} self_t;

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        self_t *self = *self_p;
        zpoller_destroy (&self->poller);
        zsock_destroy (&self->events);
        zsock_destroy (&self->front_sock);
        dsh_view_destroy (&self->view);
        zstr_free (&self->front);
        free (self);
        *self_p = NULL;
    }
}

static self_t *
s_self_new (zsock_t *pipe, const char *front)
{
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->pipe = pipe;
    self->front = strdup (front);
    self->view = dsh_view_new (EVENT_QUEUE_LIMIT);
    self->front_sock = zsock_new (ZMQ_DEALER);
    assert (self->front_sock);
    //  Requests re-sent while the broker is away queue up and are all
    //  answered once it appears: replies to HELLO after the first, and to
    //  SNAPSHOT once the view is synchronised, are ignored.
    dsh_sock_limit (self->front_sock, MAX_REPLY_BYTES, 1000);
    dsh_curve_client (self->front_sock);
    if (zsock_connect (self->front_sock, "%s", front)) {
        zsys_error ("dsh_watcher: cannot connect to \"%s\"", front);
        s_self_destroy (&self);
        return NULL;
    }
    self->poller = zpoller_new (pipe, self->front_sock, NULL);
    assert (self->poller);
    //  The caller's SIGINT is the caller's business: the actor ends on $TERM
    zpoller_set_nonstop (self->poller, true);
    self->hello_due = zclock_mono ();
    return self;
}

//  Sends "" DSH1 command {id?}; a failed send is retried by the timers.
static void
s_send_request (self_t *self, const char *command, uint64_t id)
{
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

//  Starts a new SNAPSHOT request, sent when due.
static void
s_request_snapshot (self_t *self, int64_t due)
{
    self->request_id = ++self->last_request_id;
    self->request_due = due;
}

static void
s_deliver_notices (self_t *self)
{
    json_t *notice;
    while ((notice = dsh_view_notice (self->view))) {
        char *text = json_dumps (notice, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref (notice);
        if (text)
            zstr_sendx (self->pipe, "NOTICE", text, NULL);
        free (text);
    }
}

static void
s_handle_welcome (self_t *self, dsh_doc_t *doc)
{
    if (!self->hello_due)
        return;                 //  an answer to a re-sent HELLO
    char *advertised = dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "events"));
    if (!advertised) {
        dsh_log_warning ("dsh_watcher: WELCOME from \"%s\" names no events endpoint", self->front);
        return;
    }
    char *endpoint = dsh_sock_resolve (advertised, self->front);
    zsock_t *events = zsock_new (ZMQ_SUB);
    assert (events);
    dsh_sock_limit (events, MAX_REPLY_BYTES, EVENT_HWM);
    zsock_set_subscribe (events, "");
    dsh_curve_client (events);
    if (zsock_connect (events, "%s", endpoint)) {
        dsh_log_warning ("dsh_watcher: cannot connect to events endpoint \"%s\"", endpoint);
        zsock_destroy (&events);
    }
    else {
        self->events = events;
        zpoller_add (self->poller, self->events);
        self->hello_due = 0;
        s_request_snapshot (self, zclock_mono () + SUBSCRIBE_SETTLE_MS);
    }
    zstr_free (&endpoint);
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
        s_request_snapshot (self, zclock_mono ());
    s_deliver_notices (self);
}

static int
s_handle_front (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
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
            s_request_snapshot (self, zclock_mono ());
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

//  Sends what is due; returns how long the loop may sleep.
static int
s_run_timers (self_t *self)
{
    int64_t now = zclock_mono ();
    int64_t next = now + HELLO_RETRY_MS;
    if (self->hello_due) {
        if (now >= self->hello_due) {
            s_send_request (self, DSH_HELLO, 0);
            self->hello_due = now + HELLO_RETRY_MS;
        }
        next = self->hello_due;
    }
    if (self->request_id) {
        if (now >= self->request_due) {
            s_send_request (self, DSH_SNAPSHOT, self->request_id);
            self->request_due = now + SNAPSHOT_RETRY_MS;
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
    self_t *self = s_self_new (pipe, start->front);
    start->rc = self? 0: -1;
    zsock_signal (pipe, 0);
    if (!self)
        return;
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
    if (!broker || !*broker)
        broker = getenv ("DSH_BROKER");
    if (!broker || !*broker)
        broker = DSH_DEFAULT_ENDPOINT;
    s_start_t start = { .front = broker, .rc = -1 };
    zactor_t *actor = zactor_new (s_watcher_actor, &start);
    if (!actor)
        return NULL;
    if (start.rc) {
        zactor_destroy (&actor);
        return NULL;
    }
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
