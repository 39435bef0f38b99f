/*  =========================================================================
    dsh_registry - the registry actor

    One zloop drives everything: the pipe, the four sockets, an expiry timer
    (every heartbeat interval) and a deadline timer. Nothing in the loop
    blocks: every send is non-blocking (dsh_sock_send), and a peer that is
    full or gone costs the call it concerns an error reply, never the loop.

    A call's path: front ROUTER -> decode the head of the body -> pick a
    provider -> record it in the dispatch table under a token -> work ROUTER
    with the body frame untouched. The RESULT comes back with the token, is
    checked, and goes out of the front along the recorded envelope, again
    untouched. The dispatch table is the only place a reply can come from,
    so a call is answered once: by its result, its deadline, or its
    component's departure (TOOL_GONE).
    =========================================================================
*/

#include "dsh_registry.h"
#include "dsh_catalog.h"
#include "dsh_chain.h"
#include "dsh_dispatch.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

//  Messages taken from one socket per wakeup, at most
#define S_BATCH 64

typedef struct {
    zsock_t *pipe;
    zloop_t *loop;
    zsock_t *front;             //  ROUTER: clients
    zsock_t *announce;          //  SUB: component announcements, heartbeats
    zsock_t *work;              //  ROUTER: component calls and results
    zsock_t *events;            //  PUB: change events
    dsh_catalog_t *catalog;
    dsh_dispatch_t *dispatch;
    dsh_chain_t *chain;         //  the middleware stages every call runs through
    char *broker_id;
    uint64_t epoch;             //  changes when the broker restarts
    int64_t started_ms;
    char *error;                //  why the actor could not start, or NULL
    bool verbose;
    int heartbeat_ms;
    int liveness;
    int call_timeout_ms;
    int max_call_timeout_ms;
    int max_message_bytes;
    size_t max_in_flight;       //  calls in the chain and at components, at most
    char *endpoints [4];        //  front, announce, work, events as bound
    uint64_t calls;             //  calls routed to a component
    uint64_t late_results;      //  results for calls already answered
    uint64_t dropped_replies;   //  replies to callers that had gone
    uint64_t bad_messages;      //  malformed input, from anyone
} self_t;

static void s_chain_dispatch (void *arg, uint64_t token, zframe_t **body_p);
static void s_chain_reply (void *arg, zmsg_t **envelope_p, const char *command, zframe_t **body_p);
static void s_chain_cancel (void *arg, uint64_t token);

//  Binds a new socket of type to endpoint, with dsh's limits; NULL and an
//  error on failure.
static zsock_t *
s_bind (self_t *self, int type, const char *endpoint, int index, int queue_limit)
{
    zsock_t *sock = zsock_new (type);
    if (!sock) {
        self->error = zsys_sprintf ("cannot create a socket: %s", zmq_strerror (zmq_errno ()));
        return NULL;
    }
    dsh_sock_limit (sock, self->max_message_bytes, queue_limit);
    if (type == ZMQ_ROUTER) {
        zsock_set_router_mandatory (sock, 1);
        //  A component that restarts under the same id takes its route over
        zsock_set_router_handover (sock, 1);
    }
    if (type == ZMQ_SUB)
        zsock_set_subscribe (sock, "");
    if (zsock_bind (sock, "%s", endpoint) == -1) {
        self->error = zsys_sprintf ("cannot bind %s: %s", endpoint, zmq_strerror (zmq_errno ()));
        zsock_destroy (&sock);
        return NULL;
    }
    self->endpoints [index] = strdup (zsock_endpoint (sock));
    return sock;
}

static self_t *
s_self_new (zsock_t *pipe, dsh_config_t *config)
{
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->pipe = pipe;
    self->verbose = config->verbose;
    self->heartbeat_ms = config->heartbeat_ms;
    self->liveness = config->liveness;
    self->call_timeout_ms = config->call_timeout_ms;
    self->max_call_timeout_ms = config->max_call_timeout_ms;
    self->max_message_bytes = config->max_message_bytes;
    self->max_in_flight = (size_t) config->max_in_flight;
    self->catalog = dsh_catalog_new ();
    self->dispatch = dsh_dispatch_new ();
    zuuid_t *uuid = zuuid_new ();
    self->broker_id = strdup (zuuid_str_canonical (uuid));
    zuuid_destroy (&uuid);
    self->started_ms = zclock_time ();
    //  Wall-clock based, so it differs across restarts and reboots
    self->epoch = (uint64_t) zclock_time () * 1000 + (uint64_t) randof (1000);

    dsh_config_derive (config);
    self->front = s_bind (self, ZMQ_ROUTER, config->endpoint, 0, config->queue_limit);
    if (self->front)
        self->announce = s_bind (self, ZMQ_SUB, config->announce, 1, config->queue_limit);
    if (self->announce)
        self->work = s_bind (self, ZMQ_ROUTER, config->work, 2, config->queue_limit);
    if (self->work)
        self->events = s_bind (self, ZMQ_PUB, config->events, 3, config->queue_limit);
    if (self->events) {
        dsh_chain_host_t host = { s_chain_dispatch, s_chain_reply, s_chain_cancel, self };
        char error [512];
        self->chain = dsh_chain_new (config->chain, self->endpoints [0], &host, error, sizeof (error));
        if (!self->chain)
            self->error = strdup (error);
    }
    return self;
}

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        self_t *self = *self_p;
        zloop_destroy (&self->loop);
        dsh_chain_destroy (&self->chain);
        zsock_destroy (&self->front);
        zsock_destroy (&self->announce);
        zsock_destroy (&self->work);
        zsock_destroy (&self->events);
        dsh_catalog_destroy (&self->catalog);
        dsh_dispatch_destroy (&self->dispatch);
        for (int index = 0; index < 4; index++)
            zstr_free (&self->endpoints [index]);
        zstr_free (&self->broker_id);
        zstr_free (&self->error);
        free (self);
        *self_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  Replies

static void
s_send_front (self_t *self, zmsg_t **envelope_p, const char *command, zframe_t **body_p)
{
    zmsg_t *reply = dsh_proto_message (envelope_p, command);
    zmsg_append (reply, body_p);
    if (dsh_sock_send (self->front, &reply)) {
        self->dropped_replies++;
        if (self->verbose)
            zsys_info ("dsh-broker: reply %s dropped: %s", command, zmq_strerror (errno));
    }
}

static void
s_reply_error (self_t *self, zmsg_t **envelope_p, const msgpack_object *id,
               const char *code, const char *message)
{
    zframe_t *body = dsh_proto_error_body (id, code, message);
    s_send_front (self, envelope_p, DSH_ERROR, &body);
}

//  Answers a call: back up the chain if it came down it, else to the caller.
static void
s_answer (self_t *self, zmsg_t **envelope_p, uint64_t chain_token, zframe_t **body_p)
{
    if (chain_token)
        dsh_chain_result (self->chain, chain_token, body_p);
    else
        s_send_front (self, envelope_p, DSH_RESULT, body_p);
}

static void
s_answer_error (self_t *self, zmsg_t **envelope_p, uint64_t chain_token, const char *call_id,
                const char *code, const char *text)
{
    zframe_t *body = dsh_proto_error_result (call_id, code, text);
    s_answer (self, envelope_p, chain_token, &body);
}

//  Sends [component] "" DSH1 command [token] body on the work socket.
static int
s_send_work (self_t *self, const char *component, const char *command, zframe_t **token_p,
             zframe_t **body_p)
{
    zmsg_t *envelope = zmsg_new ();
    zmsg_addstr (envelope, component);
    zmsg_t *msg = dsh_proto_message (&envelope, command);
    if (token_p)
        zmsg_append (msg, token_p);
    zmsg_append (msg, body_p);
    return dsh_sock_send (self->work, &msg);
}

//  Sends a CALL to a component. On failure (errno EHOSTUNREACH: not
//  connected; EAGAIN: its queue is full) the body is still the caller's,
//  so the call can go elsewhere; on success it has moved into libzmq.
static int
s_send_call (self_t *self, const char *component, uint64_t token, zframe_t **body_p)
{
    //  libzmq takes or refuses a multipart message at its first frame
    zframe_t *identity = zframe_from (component);
    if (zframe_send (&identity, self->work, ZFRAME_MORE | ZFRAME_DONTWAIT)) {
        int saved_errno = errno;
        zframe_destroy (&identity);
        errno = saved_errno;
        return -1;
    }
    zmsg_t *msg = dsh_proto_message (NULL, DSH_CALL);
    zframe_t *token_frame = dsh_dispatch_token_frame (token);
    zmsg_append (msg, &token_frame);
    zmsg_append (msg, body_p);
    return dsh_sock_send (self->work, &msg);
}

static void
s_send_sync (self_t *self, const char *component)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 0);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    if (s_send_work (self, component, DSH_SYNC, NULL, &body) && self->verbose)
        zsys_info ("dsh-broker: SYNC to %s not sent yet: %s", component, zmq_strerror (errno));
}

//  Publishes the events of a change, and asks every component that was
//  refused a name the change freed to announce again.
static void
s_publish (self_t *self, zlistx_t *events)
{
    zlistx_t *resync = dsh_catalog_take_resync (self->catalog);
    for (char *component = zlistx_first (resync); component; component = zlistx_next (resync))
        s_send_sync (self, component);
    zlistx_destroy (&resync);
    for (dsh_event_t *event = zlistx_first (events); event; event = zlistx_next (events)) {
        zmsg_t *msg = zmsg_new ();
        zmsg_addstr (msg, event->kind);
        zframe_t *body = dsh_event_encode (event, self->epoch);
        zmsg_append (msg, &body);
        dsh_sock_send (self->events, &msg);
        if (self->verbose)
            zsys_info ("dsh-broker: event %" PRIu64 " %s %s%s%s", event->seq, event->kind,
                       event->component, event->name? " ": "", event->name? event->name: "");
    }
}

//  Tells a component to stop a call the broker has answered (deadline, or
//  the caller cancelled); anything it sends for the call is late.
static void
s_send_cancel (self_t *self, dsh_pending_t *entry, const char *reason)
{
    dsh_catalog_outstanding (self->catalog, entry->component, -1);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 2);
    dsh_packer_kv_str (&packer, "callId", entry->call_id);
    dsh_packer_kv_str (&packer, "reason", reason);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zframe_t *token = dsh_dispatch_token_frame (entry->token);
    s_send_work (self, entry->component, DSH_CANCEL, &token, &body);
}

//  Sends a kept call to another provider, once; takes the entry. Returns
//  false (and leaves the entry) if there is no other provider or the send
//  fails.
static bool
s_retry (self_t *self, dsh_pending_t **entry_p, const char *gone)
{
    dsh_pending_t *entry = *entry_p;
    const char *provider = entry->body && !entry->retried?
        dsh_catalog_provider (self->catalog, entry->tool, gone): NULL;
    if (!provider)
        return false;
    uint64_t token = dsh_dispatch_add (self->dispatch, &entry->envelope, entry->chain_token, entry->call_id,
                                       entry->tool, provider, entry->deadline_ms);
    dsh_pending_t *retry = dsh_dispatch_lookup (self->dispatch, token);
    retry->retried = true;
    zframe_t *body = zframe_dup (entry->body);
    zframe_t *token_frame = dsh_dispatch_token_frame (token);
    if (s_send_work (self, provider, DSH_CALL, &token_frame, &body)) {
        //  Back as it was: the caller gets the original failure
        retry = dsh_dispatch_take (self->dispatch, token);
        entry->envelope = retry->envelope;
        retry->envelope = NULL;
        dsh_pending_destroy (&retry);
        return false;
    }
    dsh_catalog_outstanding (self->catalog, provider, +1);
    zsys_info ("dsh-broker: call %s to %s retried on %s (the tool is idempotent)", entry->call_id, gone, provider);
    dsh_pending_destroy (entry_p);
    return true;
}

//  Answers every call in flight to a component that has gone, or retries
//  it once on another replica if the tool says it is idempotent.
static void
s_fail_component_calls (self_t *self, const char *component, const char *why)
{
    zlistx_t *orphans = dsh_dispatch_take_component (self->dispatch, component);
    dsh_pending_t *entry;
    while ((entry = (dsh_pending_t *) zlistx_first (orphans))) {
        zlistx_detach_cur (orphans);
        if (s_retry (self, &entry, component))
            continue;
        char text [512];
        snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" %s",
                  entry->tool, component, why);
        s_answer_error (self, &entry->envelope, entry->chain_token, entry->call_id, DSH_E_TOOL_GONE, text);
        dsh_pending_destroy (&entry);
    }
    zlistx_destroy (&orphans);
}

static void
s_remove_component (self_t *self, const char *component, const char *reason)
{
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    if (dsh_catalog_remove (self->catalog, component, reason, events) == 0) {
        zsys_info ("dsh-broker: component %s %s", component, reason);
        s_fail_component_calls (self, component, reason);
        s_publish (self, events);
    }
    zlistx_destroy (&events);
}

//  ---------------------------------------------------------------------
//  Front: requests from clients

static void
s_pack_id (msgpack_packer *pk, const msgpack_object *id)
{
    if (id) {
        dsh_pack_cstr (pk, "id");
        msgpack_pack_object (pk, *id);
    }
}

//  Sends a call to a provider of its tool, or answers it at once. The call
//  came from the front (envelope) or out of the chain (chain_token).
static void
s_dispatch (self_t *self, zmsg_t **envelope_p, uint64_t chain_token, dsh_doc_t **doc_p,
            dsh_call_head_t *head, zframe_t **body_p)
{
    const char *provider = dsh_catalog_provider (self->catalog, head->name, NULL);
    if (!provider) {
        char text [DSH_NAME_MAX + 64];
        snprintf (text, sizeof (text), "Error: unknown tool \"%s\"", head->name);
        s_answer_error (self, envelope_p, chain_token, head->call_id, DSH_E_UNKNOWN_TOOL, text);
        return;
    }
    if (dsh_dispatch_size (self->dispatch) >= self->max_in_flight) {
        char text [DSH_NAME_MAX + 96];
        snprintf (text, sizeof (text), "Error: the broker is overloaded (%zu calls in flight)",
                  dsh_dispatch_size (self->dispatch));
        s_answer_error (self, envelope_p, chain_token, head->call_id, DSH_E_OVERLOADED, text);
        return;
    }
    uint64_t timeout_ms = head->timeout_ms? head->timeout_ms: (uint64_t) self->call_timeout_ms;
    if (timeout_ms > (uint64_t) self->max_call_timeout_ms)
        timeout_ms = (uint64_t) self->max_call_timeout_ms;
    uint64_t token = dsh_dispatch_add (self->dispatch, envelope_p, chain_token, head->call_id, head->name,
                                       provider, zclock_mono () + (int64_t) timeout_ms);
    char *component = strdup (provider);
    dsh_pending_t *pending = dsh_dispatch_lookup (self->dispatch, token);
    if (dsh_catalog_idempotent (self->catalog, head->name))
        //  Kept so the call can go to another replica if this one dies
        pending->body = zframe_dup (*body_p);
    //  The head points into the body's frame; done with it before it moves on
    dsh_doc_destroy (doc_p);
    int rc;
    int send_errno = 0;
    while ((rc = s_send_call (self, component, token, body_p)) && (send_errno = errno) == EHOSTUNREACH) {
        //  Not connected (it died, and has not expired yet): the call never
        //  left, so any other provider may take it
        dsh_catalog_unreachable (self->catalog, component);
        const char *other = dsh_catalog_provider (self->catalog, pending->tool, component);
        if (!other || streq (other, component))
            break;
        zstr_free (&component);
        component = strdup (other);
        zstr_free (&pending->component);
        pending->component = strdup (other);
    }
    if (rc == 0) {
        dsh_catalog_outstanding (self->catalog, component, +1);
        self->calls++;
    }
    else {
        bool full = send_errno == EAGAIN;
        zframe_destroy (body_p);
        dsh_pending_t *entry = dsh_dispatch_take (self->dispatch, token);
        char text [DSH_NAME_MAX + DSH_ID_MAX + 128];
        if (full)
            snprintf (text, sizeof (text), "Error: component \"%s\" serving tool \"%s\" is overloaded",
                      component, entry->tool);
        else
            snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" is not connected",
                      entry->tool, component);
        s_answer_error (self, &entry->envelope, entry->chain_token, entry->call_id,
                        full? DSH_E_OVERLOADED: DSH_E_TOOL_GONE, text);
        dsh_pending_destroy (&entry);
    }
    zstr_free (&component);
}

static void
s_handle_call (self_t *self, zmsg_t **envelope_p, dsh_doc_t **doc_p, zframe_t **body_p)
{
    char error [256];
    dsh_call_head_t head;
    if (dsh_proto_decode_call (*doc_p, &head, error, sizeof (error))) {
        self->bad_messages++;
        if (head.call_id)
            s_answer_error (self, envelope_p, 0, head.call_id, DSH_E_BAD_REQUEST, error);
        else
            s_reply_error (self, envelope_p, dsh_map_get (dsh_doc_root (*doc_p), "id"),
                           DSH_E_BAD_REQUEST, error);
        return;
    }
    if (dsh_chain_size (self->chain) && dsh_chain_flows (self->chain) >= self->max_in_flight) {
        char text [96];
        snprintf (text, sizeof (text), "Error: the broker is overloaded (%zu calls in the chain)",
                  dsh_chain_flows (self->chain));
        s_answer_error (self, envelope_p, 0, head.call_id, DSH_E_OVERLOADED, text);
    }
    else
    if (dsh_chain_size (self->chain)) {
        //  The waterfall runs first, even for a tool nobody serves
        char *call_id = strdup (head.call_id);
        zchunk_t *tool = dsh_catalog_tool (self->catalog, head.name);
        dsh_doc_destroy (doc_p);
        dsh_chain_enter (self->chain, envelope_p, call_id, body_p, tool);
        zstr_free (&call_id);
    }
    else
        s_dispatch (self, envelope_p, 0, doc_p, &head, body_p);
}

//  The chain host: a call leaves the bottom of the chain.
static void
s_chain_dispatch (void *arg, uint64_t token, zframe_t **body_p)
{
    self_t *self = (self_t *) arg;
    char error [256];
    dsh_call_head_t head;
    dsh_doc_t *doc = dsh_proto_decode_body (*body_p, error, sizeof (error));
    if (!doc || dsh_proto_decode_call (doc, &head, error, sizeof (error))) {
        //  A stage rewrote the call into something that is not one
        char text [320];
        snprintf (text, sizeof (text), "Error: the chain passed on a malformed call: %s", error);
        s_answer_error (self, NULL, token, doc? head.call_id: NULL, DSH_E_MIDDLEWARE_FAILED, text);
        zframe_destroy (body_p);
    }
    else
        s_dispatch (self, NULL, token, &doc, &head, body_p);
    dsh_doc_destroy (&doc);
}

//  The chain host: a call it dispatched was cancelled.
static void
s_chain_cancel (void *arg, uint64_t token)
{
    self_t *self = (self_t *) arg;
    dsh_pending_t *entry = dsh_dispatch_take_chain (self->dispatch, token);
    if (entry)
        s_send_cancel (self, entry, "cancelled");
    dsh_pending_destroy (&entry);
}

//  A caller cancels a call: wherever it is (in the chain, at a component)
//  it is dropped and told, and the caller gets CANCELLED. A cancel that
//  finds nothing (the result went out already) is answered the same way:
//  the client library keeps exactly one reply per call.
static void
s_handle_cancel (self_t *self, zmsg_t **envelope_p, dsh_doc_t *doc)
{
    const char *call_id = dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "callId"));
    if (!call_id || !*call_id || strlen (call_id) > DSH_CALL_ID_MAX) {
        self->bad_messages++;
        s_reply_error (self, envelope_p, dsh_map_get (dsh_doc_root (doc), "id"), DSH_E_BAD_REQUEST,
                       "CANCEL wants a string \"callId\"");
        return;
    }
    if (!dsh_chain_cancel (self->chain, *envelope_p, call_id)) {
        dsh_pending_t *entry = dsh_dispatch_take_caller (self->dispatch, *envelope_p, call_id);
        if (entry)
            s_send_cancel (self, entry, "cancelled");
        dsh_pending_destroy (&entry);
    }
    s_answer_error (self, envelope_p, 0, call_id, DSH_E_CANCELLED, "Error: the call was cancelled");
}

//  The chain host: a reply leaves the top of the chain.
static void
s_chain_reply (void *arg, zmsg_t **envelope_p, const char *command, zframe_t **body_p)
{
    s_send_front ((self_t *) arg, envelope_p, command, body_p);
}

//  Replies with a body packed by the caller: {id?, ...}.
static void
s_reply_packed (self_t *self, zmsg_t **envelope_p, const char *command, dsh_packer_t *packer)
{
    zframe_t *body = dsh_packer_frame (packer);
    dsh_packer_release (packer);
    s_send_front (self, envelope_p, command, &body);
}

static void
s_handle_query (self_t *self, const char *command, zmsg_t **envelope_p, dsh_doc_t *doc)
{
    const msgpack_object *root = dsh_doc_root (doc);
    const msgpack_object *id = dsh_map_get (root, "id");
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_packer *pk = &packer.pk;
    if (streq (command, DSH_HELLO)) {
        //  An external stage asks for its slot by name
        char *stage = dsh_doc_strdup (doc, dsh_map_get (root, "stage"));
        const char *feed = NULL, *drain = NULL;
        bool slot = stage && dsh_chain_slot (self->chain, stage, &feed, &drain) == 0;
        msgpack_pack_map (pk, 9 + (id != NULL) + slot);
        if (slot) {
            dsh_pack_cstr (pk, "stage");
            msgpack_pack_map (pk, 2);
            dsh_packer_kv_str (&packer, "feed", feed);
            dsh_packer_kv_str (&packer, "drain", drain);
        }
        s_pack_id (pk, id);
        dsh_pack_cstr (pk, "protocol");
        msgpack_pack_uint32 (pk, DSH_PROTOCOL_VERSION);
        dsh_packer_kv_str (&packer, "broker", self->broker_id);
        dsh_pack_cstr (pk, "epoch");
        msgpack_pack_uint64 (pk, self->epoch);
        dsh_packer_kv_str (&packer, "announce", self->endpoints [1]);
        dsh_packer_kv_str (&packer, "work", self->endpoints [2]);
        dsh_packer_kv_str (&packer, "events", self->endpoints [3]);
        dsh_pack_cstr (pk, "heartbeatMs");
        msgpack_pack_uint32 (pk, (uint32_t) self->heartbeat_ms);
        dsh_pack_cstr (pk, "liveness");
        msgpack_pack_uint32 (pk, (uint32_t) self->liveness);
        dsh_pack_cstr (pk, "maxMessageBytes");
        msgpack_pack_uint32 (pk, (uint32_t) self->max_message_bytes);
        s_reply_packed (self, envelope_p, DSH_WELCOME, &packer);
    }
    else
    if (streq (command, DSH_PING)) {
        msgpack_pack_map (pk, 6 + (id != NULL));
        s_pack_id (pk, id);
        dsh_packer_kv_str (&packer, "broker", self->broker_id);
        dsh_pack_cstr (pk, "uptimeMs");
        msgpack_pack_uint64 (pk, (uint64_t) (zclock_time () - self->started_ms));
        dsh_pack_cstr (pk, "tools");
        msgpack_pack_uint64 (pk, dsh_catalog_tool_count (self->catalog));
        dsh_pack_cstr (pk, "components");
        msgpack_pack_uint64 (pk, dsh_catalog_component_count (self->catalog));
        dsh_pack_cstr (pk, "inFlight");
        msgpack_pack_uint64 (pk, dsh_dispatch_size (self->dispatch));
        dsh_pack_cstr (pk, "seq");
        msgpack_pack_uint64 (pk, dsh_catalog_seq (self->catalog));
        s_reply_packed (self, envelope_p, DSH_PONG, &packer);
    }
    else
    if (streq (command, DSH_CHAIN)) {
        msgpack_pack_map (pk, 1 + (id != NULL));
        s_pack_id (pk, id);
        dsh_pack_cstr (pk, "stages");
        dsh_chain_pack (self->chain, pk);
        s_reply_packed (self, envelope_p, DSH_CHAIN, &packer);
    }
    else
    if (streq (command, DSH_LIST)) {
        msgpack_pack_map (pk, 2 + (id != NULL));
        s_pack_id (pk, id);
        dsh_pack_cstr (pk, "seq");
        msgpack_pack_uint64 (pk, dsh_catalog_seq (self->catalog));
        dsh_pack_cstr (pk, "tools");
        dsh_catalog_pack_tools (self->catalog, pk);
        s_reply_packed (self, envelope_p, DSH_TOOLS, &packer);
    }
    else
    if (streq (command, DSH_SNAPSHOT)) {
        msgpack_pack_map (pk, 4 + (id != NULL));
        s_pack_id (pk, id);
        dsh_pack_cstr (pk, "seq");
        msgpack_pack_uint64 (pk, dsh_catalog_seq (self->catalog));
        dsh_pack_cstr (pk, "epoch");
        msgpack_pack_uint64 (pk, self->epoch);
        dsh_catalog_pack_snapshot (self->catalog, pk);
        s_reply_packed (self, envelope_p, DSH_SNAPSHOT, &packer);
    }
    else
    if (streq (command, DSH_GET)) {
        const msgpack_object *name = dsh_map_get (root, "name");
        char *text = dsh_doc_strdup (doc, name);
        zchunk_t *entry = text? dsh_catalog_tool (self->catalog, text): NULL;
        if (entry) {
            msgpack_pack_map (pk, 2 + (id != NULL));
            s_pack_id (pk, id);
            dsh_pack_cstr (pk, "tool");
            dsh_packer_raw (&packer, zchunk_data (entry), zchunk_size (entry));
            dsh_pack_cstr (pk, "providers");
            dsh_catalog_pack_providers (self->catalog, text, pk);
            s_reply_packed (self, envelope_p, DSH_TOOL, &packer);
        }
        else {
            dsh_packer_release (&packer);
            char message [DSH_NAME_MAX + 64];
            if (text && dsh_proto_valid_name (text, strlen (text)))
                snprintf (message, sizeof (message), "unknown tool \"%s\"", text);
            else
                snprintf (message, sizeof (message), "field \"name\" must be a valid tool name");
            s_reply_error (self, envelope_p, id, text? DSH_E_UNKNOWN_TOOL: DSH_E_BAD_REQUEST, message);
        }
    }
    else {
        dsh_packer_release (&packer);
        self->bad_messages++;
        char message [64];
        snprintf (message, sizeof (message), "unknown command \"%s\"", command);
        s_reply_error (self, envelope_p, id, DSH_E_BAD_REQUEST, message);
    }
}

static void
s_front_one (self_t *self, zsock_t *reader)
{
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error))) {
        self->bad_messages++;
        if (!envelope) {
            //  Without a delimiter the only route we trust is the peer's own
            envelope = zmsg_new ();
            zframe_t *identity = zmsg_pop (msg);
            zmsg_append (envelope, &identity);
        }
        s_reply_error (self, &envelope, NULL, DSH_E_BAD_REQUEST, error);
        zmsg_destroy (&msg);
        return;
    }
    if (zmsg_size (msg) != 1) {
        self->bad_messages++;
        snprintf (error, sizeof (error), "%s takes one body frame, not %zu", command, zmsg_size (msg));
        s_reply_error (self, &envelope, NULL, DSH_E_BAD_REQUEST, error);
        zmsg_destroy (&msg);
        return;
    }
    zframe_t *body = zmsg_pop (msg);
    zmsg_destroy (&msg);
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    if (!doc) {
        self->bad_messages++;
        char message [300];
        snprintf (message, sizeof (message), "malformed %s body: %s", command, error);
        s_reply_error (self, &envelope, NULL, DSH_E_BAD_REQUEST, message);
    }
    else
    if (streq (command, DSH_CALL))
        s_handle_call (self, &envelope, &doc, &body);
    else
    if (streq (command, DSH_CANCEL))
        s_handle_cancel (self, &envelope, doc);
    else
    if (streq (command, DSH_CONTROL)) {
        dsh_doc_destroy (&doc);
        dsh_chain_control (self->chain, &envelope, &body);
    }
    else
        s_handle_query (self, command, &envelope, doc);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    zmsg_destroy (&envelope);
}

static int
s_front_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    //  Drain a busy socket without a poll per message, yet give the other
    //  sockets their turn
    for (int count = 0; count < S_BATCH && (zsock_events (reader) & ZMQ_POLLIN); count++)
        s_front_one ((self_t *) arg, reader);
    return 0;
}

//  ---------------------------------------------------------------------
//  Work socket: results and hellos from components

static void
s_handle_result (self_t *self, const char *component, zmsg_t *msg)
{
    uint64_t token;
    zframe_t *token_frame = zmsg_pop (msg);
    zframe_t *body = zmsg_pop (msg);
    if (dsh_dispatch_token_decode (token_frame, &token) || !body || zmsg_size (msg) != 0) {
        self->bad_messages++;
        zsys_warning ("dsh-broker: malformed RESULT from %s: want token and body frames", component);
    }
    else {
        dsh_pending_t *entry = dsh_dispatch_lookup (self->dispatch, token);
        if (entry && !streq (entry->component, component)) {
            //  Only the component a call went to may answer it
            self->bad_messages++;
            zsys_warning ("dsh-broker: %s sent a RESULT for a call it was not given", component);
            entry = NULL;
        }
        else
        if (entry)
            entry = dsh_dispatch_take (self->dispatch, token);
        else
            self->late_results++;
        if (entry) {
            dsh_catalog_outstanding (self->catalog, entry->component, -1);
            char error [256];
            dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
            if (doc && dsh_proto_check_result (dsh_doc_root (doc), error, sizeof (error)))
                dsh_doc_destroy (&doc);
            if (doc && !dsh_str_eq (dsh_map_get (dsh_doc_root (doc), "callId"), entry->call_id)) {
                snprintf (error, sizeof (error), "its callId is not the call's \"%s\"", entry->call_id);
                dsh_doc_destroy (&doc);
            }
            if (doc)
                s_answer (self, &entry->envelope, entry->chain_token, &body);
            else {
                self->bad_messages++;
                char text [512];
                snprintf (text, sizeof (text), "Error: component \"%s\" sent a malformed result: %s",
                          component, error);
                zsys_warning ("dsh-broker: %s", text + 7);
                s_answer_error (self, &entry->envelope, entry->chain_token, entry->call_id, DSH_E_BAD_RESULT, text);
            }
            dsh_doc_destroy (&doc);
            dsh_pending_destroy (&entry);
        }
    }
    zframe_destroy (&token_frame);
    zframe_destroy (&body);
}

//  A component reports progress of a call: on to its caller, untouched.
static void
s_handle_progress (self_t *self, const char *component, zmsg_t *msg)
{
    uint64_t token;
    zframe_t *token_frame = zmsg_pop (msg);
    zframe_t *body = zmsg_pop (msg);
    dsh_pending_t *entry = dsh_dispatch_token_decode (token_frame, &token) == 0 && body?
        dsh_dispatch_lookup (self->dispatch, token): NULL;
    if (entry && streq (entry->component, component)) {
        if (entry->chain_token)
            dsh_chain_progress (self->chain, entry->chain_token, &body);
        else {
            zmsg_t *envelope = zmsg_dup (entry->envelope);
            s_send_front (self, &envelope, DSH_PROGRESS, &body);
        }
    }
    zframe_destroy (&token_frame);
    zframe_destroy (&body);
}

static void
s_work_one (self_t *self, zsock_t *reader)
{
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    char *component = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error))
    ||  zmsg_size (envelope) != 1) {
        self->bad_messages++;
        zsys_warning ("dsh-broker: malformed message on the work socket: %s",
                      *error? error: "the envelope is not one component id");
    }
    else {
        component = zframe_strdup (zmsg_first (envelope));
        dsh_catalog_seen (self->catalog, component, zclock_mono ());
        if (streq (command, DSH_RESULT))
            s_handle_result (self, component, msg);
        else
        if (streq (command, DSH_PROGRESS))
            s_handle_progress (self, component, msg);
        else
        if (streq (command, DSH_HELLO))
            s_send_sync (self, component);
        else {
            self->bad_messages++;
            zsys_warning ("dsh-broker: unknown command \"%s\" from component %s", command, component);
        }
    }
    zstr_free (&component);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
}

static int
s_work_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    //  Drain a busy socket without a poll per message, yet give the other
    //  sockets their turn
    for (int count = 0; count < S_BATCH && (zsock_events (reader) & ZMQ_POLLIN); count++)
        s_work_one ((self_t *) arg, reader);
    return 0;
}

//  ---------------------------------------------------------------------
//  Announce socket: presence of components

static void
s_handle_announce (self_t *self, dsh_presence_t *presence)
{
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    zlistx_t *refusals = zlistx_new ();
    zlistx_set_destructor (refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
    dsh_catalog_announce (self->catalog, presence->component, presence->generation,
                          presence->tools, zclock_mono (), events, refusals);
    s_publish (self, events);
    for (dsh_refusal_t *refusal = zlistx_first (refusals); refusal; refusal = zlistx_next (refusals)) {
        zsys_warning ("dsh-broker: refused from component %s: %s", refusal->component, refusal->reason);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        msgpack_pack_map (&packer.pk, 1 + (refusal->name != NULL));
        if (refusal->name)
            dsh_packer_kv_str (&packer, "tool", refusal->name);
        dsh_packer_kv_str (&packer, "reason", refusal->reason);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        s_send_work (self, refusal->component, DSH_REFUSED, NULL, &body);
    }
    zlistx_destroy (&refusals);
    zlistx_destroy (&events);
}

static void
s_announce_one (self_t *self, zsock_t *reader)
{
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return;
    char error [256] = "";
    zframe_t *protocol = zmsg_pop (msg);
    char *command = zmsg_popstr (msg);
    zframe_t *body = zmsg_pop (msg);
    dsh_doc_t *doc = NULL;
    dsh_presence_t presence;
    if (!protocol || !zframe_streq (protocol, DSH_PROTOCOL) || !command || zmsg_size (msg) != 0)
        snprintf (error, sizeof (error), "want \"%s\", a command and a body", DSH_PROTOCOL);
    else
    if (!streq (command, DSH_ANNOUNCE) && !streq (command, DSH_HEARTBEAT) && !streq (command, DSH_WITHDRAW))
        snprintf (error, sizeof (error), "unknown command \"%.16s\"", command);
    else
    if ((doc = dsh_proto_decode_body (body, error, sizeof (error))))
        dsh_proto_decode_presence (doc, command, &presence, error, sizeof (error));

    if (*error) {
        self->bad_messages++;
        zsys_warning ("dsh-broker: malformed message on the announce socket: %s", error);
    }
    else
    if (streq (command, DSH_ANNOUNCE))
        s_handle_announce (self, &presence);
    else
    if (streq (command, DSH_HEARTBEAT)) {
        if (dsh_catalog_touch (self->catalog, presence.component, presence.generation, zclock_mono ()))
            s_send_sync (self, presence.component);
    }
    else {
        uint64_t generation;
        //  A WITHDRAW from an older incarnation must not remove a newer one
        //  (generations start from the clock, so they grow across restarts)
        if (dsh_catalog_generation (self->catalog, presence.component, &generation) == 0
        &&  presence.generation >= generation)
            s_remove_component (self, presence.component, "withdrawn");
    }

    dsh_doc_destroy (&doc);
    zframe_destroy (&protocol);
    zframe_destroy (&body);
    zstr_free (&command);
    zmsg_destroy (&msg);
}

static int
s_announce_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    //  Drain a busy socket without a poll per message, yet give the other
    //  sockets their turn
    for (int count = 0; count < S_BATCH && (zsock_events (reader) & ZMQ_POLLIN); count++)
        s_announce_one ((self_t *) arg, reader);
    return 0;
}

//  ---------------------------------------------------------------------
//  Timers

static int
s_expire_components (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    zlistx_t *silent = dsh_catalog_silent (self->catalog, zclock_mono (),
                                           (int64_t) self->heartbeat_ms * self->liveness);
    for (char *component = zlistx_first (silent); component; component = zlistx_next (silent))
        s_remove_component (self, component, "expired");
    zlistx_destroy (&silent);
    return 0;
}

static int
s_expire_calls (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    zlistx_t *expired = dsh_dispatch_take_expired (self->dispatch, zclock_mono ());
    for (dsh_pending_t *entry = zlistx_first (expired); entry; entry = zlistx_next (expired)) {
        char text [DSH_NAME_MAX + 128];
        snprintf (text, sizeof (text), "Error: tool \"%s\" did not answer before the call's deadline",
                  entry->tool);
        s_answer_error (self, &entry->envelope, entry->chain_token, entry->call_id, DSH_E_TIMEOUT, text);
        s_send_cancel (self, entry, "deadline");
    }
    zlistx_destroy (&expired);
    return 0;
}

//  ---------------------------------------------------------------------
//  Pipe

static int
s_self_handle_pipe (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    zmsg_t *request = zmsg_recv (reader);
    if (!request)
        return -1;
    char *command = zmsg_popstr (request);
    int rc = 0;
    if (!command || streq (command, "$TERM"))
        rc = -1;
    else
    if (streq (command, "ENDPOINTS")) {
        if (self->error)
            zstr_sendx (self->pipe, "ERROR", self->error, NULL);
        else
            zstr_sendx (self->pipe, self->endpoints [0], self->endpoints [1],
                        self->endpoints [2], self->endpoints [3], NULL);
    }
    else
    if (streq (command, "STATS"))
        zstr_sendf (self->pipe,
                    "tools=%zu components=%zu in_flight=%zu calls=%" PRIu64 " late_results=%" PRIu64
                    " dropped_replies=%" PRIu64 " bad_messages=%" PRIu64,
                    dsh_catalog_tool_count (self->catalog), dsh_catalog_component_count (self->catalog),
                    dsh_dispatch_size (self->dispatch), self->calls, self->late_results,
                    self->dropped_replies, self->bad_messages);
    else
        zsys_error ("dsh-broker: invalid pipe command \"%s\"", command);
    zstr_free (&command);
    zmsg_destroy (&request);
    return rc;
}

void
dsh_registry_actor (zsock_t *pipe, void *args)
{
    self_t *self = s_self_new (pipe, (dsh_config_t *) args);
    zsock_signal (pipe, 0);
    self->loop = zloop_new ();
    //  The host decides when the actor ends ($TERM), not a signal
    zloop_set_nonstop (self->loop, true);
    zloop_reader (self->loop, pipe, s_self_handle_pipe, self);
    if (!self->error) {
        zloop_reader (self->loop, self->front, s_front_recv, self);
        zloop_reader (self->loop, self->announce, s_announce_recv, self);
        zloop_reader (self->loop, self->work, s_work_recv, self);
        dsh_chain_start (self->chain, self->loop);
        zloop_timer (self->loop, (size_t) self->heartbeat_ms, 0, s_expire_components, self);
        int tick_ms = self->heartbeat_ms < 50? self->heartbeat_ms: 50;
        zloop_timer (self->loop, (size_t) tick_ms, 0, s_expire_calls, self);
    }
    zloop_start (self->loop);
    s_self_destroy (&self);
}
