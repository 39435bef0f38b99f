/*  =========================================================================
    dsh_registry - the registry actor

    One zloop drives everything: the pipe, the four sockets, the chain's
    slots, an expiry timer (every heartbeat interval) and one deadline
    scan. Nothing in the loop blocks: every send is non-blocking, and a peer
    that is full or gone costs the call it concerns an error reply, never
    the loop.

    WORK routes are the registry's own (dsh_routes): a component id is
    owned by the connection that claimed it with a HELLO, and a claim on a
    live component's id is refused (PROTOCOL.md, "Component ids are
    owned").

    A call's path: FRONT -> the head decoded once, strictly -> a record in
    dsh_inflight (token, route, callId, tool, one deadline) -> the chain's
    stages, if any -> a provider of the tool decided at FRONT -> WORK with
    the body's bytes. The RESULT comes back with the token, is checked, and
    goes back up the chain (or straight out) to dsh_inflight_answer, the
    one place a reply to a call is sent from.

    The hot path works on zmq_msg_t parts, not czmq frames: a call's body
    is received into a zmq_msg_t and moved into libzmq on the way out, and
    the constant frames are libzmq constant messages (no allocation).
    =========================================================================
*/

#include "dsh_registry.h"
#include "dsh_catalog.h"
#include "dsh_chain.h"
#include "dsh_curve.h"
#include "dsh_heap.h"
#include "dsh_fairq.h"
#include "dsh_inflight.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_parts.h"
#include "dsh_proto.h"
#include "dsh_routes.h"
#include "dsh_sock.h"
#include "dsh_stats.h"
#include "dsh_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>

//  Messages taken from one socket per wakeup, at most
#define S_BATCH 64
//  Memory freed since the last trim that is worth giving back
#define S_TRIM_BYTES (4 * 1024 * 1024)
//  How long a change made here (a mode) stands against the stored state,
//  while its own write lands; pins and the permission stage's grants keep
//  theirs as long (a revoked grant 3 s)
#define S_LOCAL_MS          2000
//  How long after the stored state last came it is applied again: past
//  the longest of those windows
#define S_STORED_AGAIN_MS   3500
//  SNAPSHOT replies: the budget holds this fraction of a second's bytes (a
//  burst), a queue is served this often, and holds this many requests
#define S_SNAPSHOT_BURSTS 10
#define S_SNAPSHOT_TICK_MS 10
#define S_SNAPSHOT_WAITING_MAX 10000

typedef struct {
    zsock_t *pipe;
    zloop_t *loop;
    zsock_t *front;             //  ROUTER: clients
    zsock_t *announce;          //  SUB: component announcements, heartbeats
    zsock_t *work;              //  ROUTER: component calls and results
    zsock_t *events;            //  PUB: change events
    zsock_t *work_monitor;      //  PAIR: WORK's disconnections
    bool curve;                 //  every socket authenticated: identities enforced
    zcert_t *cert;              //  the broker's keypair (the config's)
    dsh_routes_t *routes;       //  component id <-> the WORK connection that owns it
    zhashx_t *presence_keys;    //  under CURVE, component id -> the key whose presence it is
    dsh_catalog_t *catalog;
    dsh_parts_t *parts;         //  tool sets announced in parts, until whole
    size_t max_tools;           //  a set comes in at most this many parts
    dsh_inflight_t *inflight;   //  every call, from FRONT to its answer
    dsh_chain_t *chain;         //  the middleware stages every call runs through
    dsh_heap_t *heap;           //  gives freed memory back, after a storm
    dsh_fairq_t *fairq;         //  calls held for busy components, served by caller in turn
    dsh_stats_t *stats;         //  call statistics, or NULL (--no-stats)
    dsh_audit_t *audit;         //  the audit trail and the stored modes, or NULL (off)
    char *name;                 //  the broker's stable id (its audit chain)
    char *store;                //  where the audit goes, for STATS
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
    size_t max_in_flight;       //  calls in the broker, at most
    char *endpoints [4];        //  front, announce, work, events as bound
    uint64_t forbidden;         //  messages refused for their key's rights
    uint64_t calls;             //  calls routed to a component
    uint64_t late_results;      //  results for calls already answered
    uint64_t dropped_replies;   //  replies to callers that had gone
    uint64_t bad_messages;      //  malformed input, from anyone
    int queue_limit;            //  every socket's high-water mark
    //  SNAPSHOT: one encoding per catalog version, sent at a bounded rate
    zchunk_t *snapshot;         //  the reply's entries after the id, or NULL
    uint64_t snapshot_version;  //  the catalog version it shows, plus one
    uint64_t snapshot_seq;      //  ... and the seq
    size_t snapshot_pairs;      //  its entries
    bool snapshot_ticking;      //  the timer that serves the queue runs
    int snapshot_ticking_id;    //  ... its id
    zlistx_t *snapshot_queue;   //  s_snapshot_wait_t, oldest first
    zhashx_t *snapshot_waiting; //  routing id (hex) -> its entry in the queue
    int64_t snapshot_rate;      //  bytes a second
    int64_t snapshot_budget;    //  bytes that may go now (below 0: a debt)
    int64_t snapshot_refilled;  //  when the budget was last refilled
    uint64_t snapshots_queued;  //  requests that had to wait their turn
    int64_t expired_at;         //  when the expiry check last ran
    zhashx_t *modes_set;        //  agent -> when `dsh mode` set it here (int64_t *, zclock_mono)
    dsh_pins_t *pins;           //  pinned tool definitions, or NULL (pins = off)
    //  The stored state as last read (MODES, PINS, GRANTS frames), applied
    //  again once changes made here lately no longer stand against it
    zframe_t *stored [3];
    int64_t stored_due [3];     //  when each is applied again (zclock_mono), or 0
} self_t;

//  A SNAPSHOT request waiting its turn.
typedef struct {
    zmsg_t *envelope;           //  the route back to its sender
    zchunk_t *id;               //  its id as sent (msgpack), or NULL
    char *peer;                 //  the routing id, in hex (snapshot_waiting's key)
} s_snapshot_wait_t;

static void
s_snapshot_wait_destroy (s_snapshot_wait_t **self_p)
{
    if (*self_p) {
        s_snapshot_wait_t *self = *self_p;
        zmsg_destroy (&self->envelope);
        zchunk_destroy (&self->id);
        zstr_free (&self->peer);
        free (self);
        *self_p = NULL;
    }
}

//  A FRONT request, split.
typedef struct {
    dsh_sock_msg_t *parts;
    zmq_msg_t *body;
    dsh_doc_t *doc;
    const msgpack_object *root;
    const msgpack_object *id;
    dsh_identity_t peer;        //  who sent it, under CURVE
} s_request_t;

static void s_chain_dispatch (void *arg, dsh_record_t *record, zframe_t **body_p);
static void s_chain_note (void *arg, const char *stage, json_t *note);
static void s_chain_control_reply (void *arg, zmsg_t **envelope_p, zframe_t **body_p);
static int s_reply_route (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body);
static size_t s_tool_replicas (void *arg, const char *tool);

//  ---------------------------------------------------------------------
//  Frames

//  The route of a request (the frames before the delimiter) as a zmsg, for
//  the replies that are not on the hot path.
static zmsg_t *
s_route_zmsg (dsh_sock_msg_t *parts)
{
    zmsg_t *envelope = zmsg_new ();
    //  With no delimiter the only route we trust is the peer's own identity
    size_t frames = parts->body? parts->envelope: (parts->count? 1: 0);
    for (size_t index = 0; index < frames; index++)
        zmsg_addmem (envelope, zmq_msg_data (&parts->part [index]), zmq_msg_size (&parts->part [index]));
    return envelope;
}

static zframe_t *
s_frame_from_part (zmq_msg_t *part)
{
    return zframe_new (zmq_msg_data (part), zmq_msg_size (part));
}

//  What CURVE adds to a frame on the wire (a MESSAGE command: its name,
//  nonce, flags and MAC), with room to spare
#define S_CURVE_OVERHEAD 64

//  ---------------------------------------------------------------------
//  Construction

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
    if (self->curve) {
        dsh_curve_server (sock, self->cert);
        //  libzmq applies the limit to a frame as it came over the wire,
        //  which CURVE makes 33 bytes longer: room for that, so that a
        //  frame just under the limit is heard under CURVE as without it,
        //  not a dropped connection (FRONT checks the body's own size,
        //  s_front_request)
        zsock_set_maxmsgsize (sock, self->max_message_bytes < INT_MAX - S_CURVE_OVERHEAD?
                                    self->max_message_bytes + S_CURVE_OVERHEAD: INT_MAX);
    }
    if (type == ZMQ_ROUTER) {
        //  No handover: a second connection under a routing id that is
        //  connected already is ignored by libzmq (kept open, never read).
        //  Who owns a component id is the registry's to decide (dsh_routes),
        //  not libzmq's: the SDK gives each WORK socket a routing id of its
        //  own, so a second process under a live id is heard, and told
        zsock_set_router_mandatory (sock, 1);
    }
    //  No ZMTP heartbeats of the broker's own: its peers ping it, and a
    //  silent component expires by its HEARTBEATs (Liveness), so a timer
    //  per connection would only cost (libzmq 4.3 cancels a timer by a scan
    //  of all of them: at 2 000 connections most of the idle broker's CPU).
    //  A connection whose peer's host vanished goes by TCP keepalive
    dsh_sock_keepalive (sock, self->heartbeat_ms, self->liveness);
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

static dsh_route_t *s_route (self_t *self, const char *component);

//  The CURVE key a component's WORK connection has, for the pin of a
//  definition it offers first; NULL on plain connections.
static const char *
s_component_key (void *arg, const char *component)
{
    dsh_route_t *route = s_route ((self_t *) arg, component);
    return route? route->key: NULL;
}

//  The stored pins, read once before any component is heard, so that a
//  definition changed while the broker was down is judged against them.
//  A store that cannot be read now leaves the set unloaded: every
//  definition is quarantined until the audit's reader reads it (PINS).
static void
s_pins_read (dsh_pins_t *pins, const char *location)
{
    char error [512] = "";
    dsh_store_t *store = dsh_store_new (location, error, sizeof (error));
    zlistx_t *stored = store? dsh_store_pins (store, error, sizeof (error)): NULL;
    if (stored)
        dsh_pins_load (pins, &stored, zclock_mono ());
    else
        dsh_log_warning ("dsh-broker: pins: cannot read the stored pins now (%s): every tool is quarantined "
                         "until they are read", error);
    dsh_store_destroy (&store);
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
    self->curve = config->curve && config->cert;
    self->cert = config->cert;
    self->routes = dsh_routes_new ();
    self->presence_keys = zhashx_new ();
    zhashx_set_destructor (self->presence_keys, (zhashx_destructor_fn *) zstr_free);
    zhashx_set_duplicator (self->presence_keys, (zhashx_duplicator_fn *) strdup);
    self->catalog = dsh_catalog_new ();
    dsh_catalog_set_limits (self->catalog, (size_t) config->max_tool_bytes, (size_t) config->max_tools);
    //  A set in parts holds what the catalog could take of it, at most:
    //  max_tools entries of max_tool_bytes
    self->max_tools = (size_t) config->max_tools;
    size_t max_set_bytes = (size_t) config->max_tool_bytes <= SIZE_MAX / self->max_tools?
                           (size_t) config->max_tool_bytes * self->max_tools: SIZE_MAX;
    self->parts = dsh_parts_new (max_set_bytes, (size_t) config->max_announce_parts_bytes);
    self->inflight = dsh_inflight_new (s_reply_route, self);
    if (config->stats) {
        self->stats = dsh_stats_new (s_tool_replicas, self);
        dsh_inflight_set_stats (self->inflight, self->stats);
    }
    self->heap = dsh_heap_new (S_TRIM_BYTES);
    self->queue_limit = config->queue_limit;
    self->snapshot_queue = zlistx_new ();
    zlistx_set_destructor (self->snapshot_queue, (zlistx_destructor_fn *) s_snapshot_wait_destroy);
    self->snapshot_waiting = zhashx_new ();
    self->snapshot_rate = (int64_t) config->snapshot_bytes_per_second;
    self->snapshot_budget = self->snapshot_rate / S_SNAPSHOT_BURSTS;
    self->snapshot_refilled = zclock_mono ();
    self->expired_at = zclock_mono ();
    self->modes_set = zhashx_new ();
    zhashx_set_destructor (self->modes_set, (zhashx_destructor_fn *) zstr_free);
    dsh_fairq_limits_t limits = {
        (size_t) config->max_queued, (size_t) config->max_queued_bytes,
        (size_t) config->max_queued_per_caller, (size_t) config->max_queued_bytes_per_caller
    };
    self->fairq = dsh_fairq_new (&limits);
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
    //  Events queue per subscriber: a subscriber that reads nothing would
    //  otherwise hold up to queue_limit of them in the broker (one that
    //  never read while a peer churned 200 kB entries took the broker to
    //  792 MB), and a queue sized on the largest event the limits allow
    //  (250) lost most of a burst of small ones (a component of 100 tools
    //  leaving is 101 events). So it is sized on a typical event instead
    //  (dsh_config_events_hwm: 8192 by default). A PUB keeps one copy of an
    //  event for all its subscribers, so that bound is shared. The mark is
    //  set once: libzmq 4.3.4 sends a new one to every pipe's peer, and a
    //  pipe whose subscriber is leaving may have none left (a mark that
    //  followed the events' sizes crashed an I/O thread). One that falls
    //  behind still sees a sequence gap and takes a snapshot
    if (self->work)
        self->events = s_bind (self, ZMQ_PUB, config->events, 3, dsh_config_events_hwm (config));
    if (self->events) {
        //  A WORK connection that closes takes its route with it: the id
        //  is free for the next claim at once (a crashed component's
        //  kernel closed its socket), and until one comes the component
        //  counts as unreachable, so it expires within the liveness window
        //  if none does; under CURVE a later connection must speak, with a
        //  key allowed for the id, before a call goes to it
        char endpoint [64];
        snprintf (endpoint, sizeof (endpoint), "inproc://dsh-work-monitor-%p", (void *) self);
        if (zmq_socket_monitor (zsock_resolve (self->work), endpoint, ZMQ_EVENT_DISCONNECTED) == 0) {
            self->work_monitor = zsock_new (ZMQ_PAIR);
            if (self->work_monitor && zsock_connect (self->work_monitor, "%s", endpoint))
                zsock_destroy (&self->work_monitor);
            //  Drained from the hot path too, so its reader may find it
            //  empty: a receive never waits
            if (self->work_monitor)
                zsock_set_rcvtimeo (self->work_monitor, 0);
        }
        if (!self->work_monitor)
            self->error = zsys_sprintf ("cannot monitor the work socket: %s", zmq_strerror (zmq_errno ()));
    }
    if (self->events && !self->error) {
        dsh_chain_host_t host = { s_chain_dispatch, s_chain_control_reply, self, s_chain_note };
        char error [512];
        self->chain = dsh_chain_new (config->chain, config->stage_kinds, self->endpoints [0],
                                     self->inflight, &host, error, sizeof (error));
        if (!self->chain)
            self->error = strdup (error);
    }
    if (self->chain && !self->error) {
        char error [512];
        if (dsh_config_state (config, self->endpoints [0], error, sizeof (error)))
            self->error = strdup (error);
        else {
            self->name = strdup (config->name);
            dsh_audit_config_t audit = {
                .policy = (dsh_audit_policy_t) config->audit, .store = config->store, .broker = config->name,
                .epoch = self->epoch, .arguments = (dsh_audit_args_t) config->audit_arguments,
                .arguments_max_bytes = (size_t) config->audit_arguments_max_bytes,
                .digest_tools = config->audit_digest_tools, .queue_bytes = (size_t) config->audit_queue_bytes,
                .retain_days = config->audit_retain_days, .max_bytes = (uint64_t) config->audit_max_bytes,
                .state = config->pins != DSH_PINS_OFF,
            };
            self->audit = dsh_audit_new (&audit);
            if (self->audit) {
                self->store = strdup (config->store);
                dsh_inflight_set_audit (self->inflight, self->audit);
            }
            if (config->pins != DSH_PINS_OFF) {
                self->pins = dsh_pins_new ((dsh_pins_policy_t) config->pins);
                s_pins_read (self->pins, config->store);
                dsh_catalog_set_pins (self->catalog, self->pins, s_component_key, self);
            }
        }
    }
    return self;
}

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        self_t *self = *self_p;
        //  The stages first: they may still hold timers in the loop
        dsh_chain_destroy (&self->chain);
        zloop_destroy (&self->loop);
        dsh_fairq_destroy (&self->fairq);
        dsh_inflight_destroy (&self->inflight);
        //  What is queued is written before the broker stops, for a while
        dsh_audit_destroy (&self->audit, 5000);
        zstr_free (&self->name);
        zstr_free (&self->store);
        zhashx_destroy (&self->modes_set);
        for (int index = 0; index < 3; index++)
            zframe_destroy (&self->stored [index]);
        dsh_stats_destroy (&self->stats);
        zsock_destroy (&self->work_monitor);
        dsh_routes_destroy (&self->routes);
        zhashx_destroy (&self->presence_keys);
        zsock_destroy (&self->front);
        zsock_destroy (&self->announce);
        zsock_destroy (&self->work);
        zsock_destroy (&self->events);
        dsh_catalog_destroy (&self->catalog);
        dsh_pins_destroy (&self->pins);
        dsh_parts_destroy (&self->parts);
        zhashx_destroy (&self->snapshot_waiting);
        zlistx_destroy (&self->snapshot_queue);
        zchunk_destroy (&self->snapshot);
        dsh_heap_destroy (&self->heap);
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
            dsh_log_info ("dsh-broker: reply %s dropped: %s", command, zmq_strerror (errno));
    }
}

static void
s_reply_error (self_t *self, zmsg_t **envelope_p, const msgpack_object *id,
               const char *code, const char *message)
{
    zframe_t *body = dsh_proto_error_body (id, code, message);
    s_send_front (self, envelope_p, DSH_ERROR, &body);
}

//  Sends route "" DSH1 command body on FRONT; moves the route frames out
//  when move is set, else copies them. Takes the body.
static int
s_send_route (self_t *self, zmq_msg_t *route, size_t route_size, bool move, const char *command, zmq_msg_t *body)
{
    zmq_msg_t parts [DSH_SOCK_PARTS_MAX + 4];
    assert (route_size <= DSH_SOCK_PARTS_MAX);
    size_t count = 0;
    for (size_t index = 0; index < route_size; index++) {
        zmq_msg_init (&parts [count]);
        if (move)
            zmq_msg_move (&parts [count++], &route [index]);
        else
            zmq_msg_copy (&parts [count++], &route [index]);
    }
    dsh_sock_head (&parts [count], command);
    count += 3;
    zmq_msg_init (&parts [count]);
    zmq_msg_move (&parts [count++], body);
    int rc = dsh_sock_send_parts (self->front, parts, count);
    if (rc) {
        self->dropped_replies++;
        if (self->verbose)
            dsh_log_info ("dsh-broker: reply %s dropped: %s", command, zmq_strerror (errno));
    }
    return rc;
}

//  dsh_inflight's way out: a call's one RESULT.
static int
s_reply_route (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    return s_send_route ((self_t *) arg, route, route_size, true, DSH_RESULT, body);
}

//  Answers a call that has a record: back up the chain if there is one
//  (stages see every result, the waterfall's "after"), else to the caller.
static void
s_answer (self_t *self, dsh_record_t **record_p, zmq_msg_t *body)
{
    if (dsh_chain_size (self->chain)) {
        zframe_t *frame = s_frame_from_part (body);
        zmq_msg_close (body);
        dsh_record_t *record = *record_p;
        *record_p = NULL;
        dsh_chain_result (self->chain, record, &frame);
    }
    else
        dsh_inflight_answer (self->inflight, record_p, body);
}

static void
s_answer_error (self_t *self, dsh_record_t **record_p, const char *code, const char *text)
{
    zframe_t *frame = dsh_proto_error_result ((*record_p)->call_id, code, text);
    zmq_msg_t body;
    dsh_sock_part_frame (&body, &frame);
    if (self->stats)
        (*record_p)->outcome = dsh_stats_outcome (code);
    s_answer (self, record_p, &body);
}

static int s_work_monitor_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  Applies every WORK disconnection libzmq has reported and the loop has
//  not read yet.
static void
s_work_monitor_drain (self_t *self)
{
    while (self->work_monitor && (zsock_events (self->work_monitor) & ZMQ_POLLIN))
        s_work_monitor_recv (self->loop, self->work_monitor, self);
}

//  The WORK connection that owns component's id, or NULL: only a
//  connection that claimed the id (and, under CURVE, spoke with a key
//  allowed for it) gets anything sent to the id.
static dsh_route_t *
s_route (self_t *self, const char *component)
{
    //  Under CURVE a disconnection not read yet counts already: its id may
    //  be held by another connection by now
    if (self->curve)
        s_work_monitor_drain (self);
    return dsh_routes_lookup (self->routes, component);
}

//  The routing id a message to component goes to: its route's; without
//  CURVE, for a component that has not spoken on WORK yet, the id itself
//  (a component whose routing id is its id may announce before its HELLO).
//  NULL if there is none.
static const char *
s_route_link (self_t *self, const char *component)
{
    dsh_route_t *route = s_route (self, component);
    return route? route->routing_id: self->curve? NULL: component;
}

//  Sends [routing_id] "" DSH1 command [token] body on the work socket.
static int
s_send_link (self_t *self, const char *routing_id, const char *command, const uint64_t *token, zframe_t **body_p)
{
    zmq_msg_t parts [6];
    size_t count = 0;
    dsh_sock_part_mem (&parts [count++], routing_id, strlen (routing_id));
    dsh_sock_head (&parts [count], command);
    count += 3;
    if (token) {
        byte data [8];
        dsh_be64_put (*token, data);
        dsh_sock_part_mem (&parts [count++], data, sizeof (data));
    }
    dsh_sock_part_frame (&parts [count++], body_p);
    return dsh_sock_send_parts (self->work, parts, count);
}

//  Sends command [token] body to the connection that owns component's id.
static int
s_send_work (self_t *self, const char *component, const char *command, const uint64_t *token, zframe_t **body_p)
{
    const char *routing_id = s_route_link (self, component);
    if (!routing_id) {
        zframe_destroy (body_p);
        errno = EHOSTUNREACH;
        return -1;
    }
    return s_send_link (self, routing_id, command, token, body_p);
}

static void
s_send_sync (self_t *self, const char *component)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 0);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    if (s_send_work (self, component, DSH_SYNC, NULL, &body)) {
        //  A component heartbeating with no WORK route: it expires within
        //  the liveness window unless a connection claims its id again
        if (errno == EHOSTUNREACH)
            dsh_catalog_unreachable (self->catalog, component, zclock_mono ());
        if (self->verbose)
            dsh_log_info ("dsh-broker: SYNC to %s not sent yet: %s", component, zmq_strerror (errno));
    }
}

//  Answers a known component's HEARTBEAT on WORK: a component hears
//  nothing else from an idle broker, and one that hears nothing for its
//  liveness window finds the broker again (it may have moved or restarted
//  on other ports). Not sent yet (no route) is no error: the component's
//  next HELLO on WORK makes one.
static void
s_send_heartbeat (self_t *self, const char *component)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 0);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    //  The connections refused the id and waiting for it hear it too: they
    //  are alive while the broker is, and must not go looking for it
    zlistx_t *waiting = dsh_routes_waiting (self->routes, component);
    for (dsh_route_t *route = waiting? zlistx_first (waiting): NULL; route; route = zlistx_next (waiting)) {
        zframe_t *copy = zframe_dup (body);
        s_send_link (self, route->routing_id, DSH_HEARTBEAT, NULL, &copy);
    }
    s_send_work (self, component, DSH_HEARTBEAT, NULL, &body);
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
    //  What the change pinned (a first sight under tofu) goes to the store
    if (self->pins) {
        zlistx_t *ops = dsh_pins_take_ops (self->pins);
        dsh_audit_pins_write (self->audit, &ops);
    }
    for (dsh_event_t *event = zlistx_first (events); event; event = zlistx_next (events)) {
        zmsg_t *msg = zmsg_new ();
        zmsg_addstr (msg, event->kind);
        dsh_stats_event (self->stats, event->kind);
        zframe_t *body = dsh_event_encode (event, self->epoch);
        zmsg_append (msg, &body);
        dsh_sock_send (self->events, &msg);
        if (self->verbose)
            zsys_info ("dsh-broker: event %" PRIu64 " %s %s%s%s", event->seq, event->kind,
                       event->component, event->name? " ": "", event->name? event->name: "");
    }
}

//  Tells the component a call went to that the broker has answered it
//  (deadline, or the caller cancelled); anything it sends for it is late.
static void
s_send_cancel (self_t *self, dsh_record_t *record, const char *reason)
{
    dsh_catalog_outstanding (self->catalog, record->component, -1);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 2);
    dsh_packer_kv_str (&packer, "callId", record->call_id);
    dsh_packer_kv_str (&packer, "reason", reason);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    s_send_work (self, record->component, DSH_CANCEL, &record->token, &body);
}

//  The call is over for everyone who holds it, whatever answers it next:
//  its component (if it is there) and every stage that holds or watches it.
static void
s_release (self_t *self, dsh_record_t *record, const char *reason)
{
    if (record->where == DSH_AT_COMPONENT)
        s_send_cancel (self, record, reason);
    else
    if (record->where == DSH_AT_QUEUE) {
        dsh_fairq_remove (self->fairq, record);
        dsh_catalog_waiting (self->catalog, record->component, -1);
    }
    dsh_chain_release (self->chain, record);
}

//  ---------------------------------------------------------------------
//  Dispatch: a decided call to a component

//  Sends a CALL to component. On failure (errno EHOSTUNREACH: not
//  connected; EAGAIN: its queue is full) the body is still the caller's,
//  so the call can go elsewhere; on success it has moved into libzmq.
static int
s_send_call (self_t *self, const char *component, uint64_t token, zmq_msg_t *body)
{
    const char *routing_id = s_route_link (self, component);
    if (!routing_id) {
        errno = EHOSTUNREACH;
        return -1;
    }
    zmq_msg_t parts [6];
    dsh_sock_part_mem (&parts [0], routing_id, strlen (routing_id));
    dsh_sock_head (&parts [1], DSH_CALL);
    byte data [8];
    dsh_be64_put (token, data);
    dsh_sock_part_mem (&parts [4], data, sizeof (data));
    void *handle = zsock_resolve (self->work);
    //  libzmq takes or refuses a multipart message at its first frame
    if (zmq_msg_send (&parts [0], handle, ZMQ_SNDMORE | ZMQ_DONTWAIT) == -1) {
        int saved_errno = errno;
        for (size_t index = 0; index < 5; index++)
            zmq_msg_close (&parts [index]);
        errno = saved_errno;
        return -1;
    }
    zmq_msg_init (&parts [5]);
    zmq_msg_move (&parts [5], body);
    return dsh_sock_send_parts (self->work, parts + 1, 5);
}

static void s_hold (self_t *self, dsh_record_t *record, zmq_msg_t *body);
static bool s_quarantined (self_t *self, const char *tool, char *text, size_t size);

//  The host a component's WORK connection comes from (its peer address),
//  read once per connection, for the audit; NULL if unknown.
static const char *
s_component_host (self_t *self, const char *component)
{
    dsh_route_t *route = dsh_routes_lookup (self->routes, component);
    if (!route)
        return NULL;
    if (!route->host [0] && route->fd >= 0) {
        struct sockaddr_storage address;
        socklen_t size = sizeof (address);
        if (getpeername (route->fd, (struct sockaddr *) &address, &size) == 0) {
            if (address.ss_family == AF_INET)
                inet_ntop (AF_INET, &((struct sockaddr_in *) &address)->sin_addr, route->host, sizeof (route->host));
            else
            if (address.ss_family == AF_INET6)
                inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &address)->sin6_addr, route->host, sizeof (route->host));
            else
                snprintf (route->host, sizeof (route->host), "local");
        }
    }
    return route->host [0]? route->host: NULL;
}

//  The audit learns where a call goes, and what it runs with (body, if
//  not NULL: the bytes sent, which may not be the caller's).
static void
s_trail_dispatch (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    if (record->trail)
        dsh_audit_trail_dispatch (record->trail, record->component, s_component_host (self, record->component),
                                  dsh_catalog_replicas (self->catalog, record->tool),
                                  dsh_catalog_tool_digest (self->catalog, record->tool), body);
}

//  Sends a call to the provider in its record, or to another one if that
//  one is not connected (or holds it for that one), or answers it. Takes
//  the body.
static void
s_send_dispatched (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    char text [DSH_NAME_MAX + DSH_ID_MAX + 160];
    int rc;
    int send_errno = 0;
    //  What runs is what the chain passed: the audit keeps those bytes
    if (record->trail)
        s_trail_dispatch (self, record, body);
    while ((rc = s_send_call (self, record->component, record->token, body)) && (send_errno = errno) == EHOSTUNREACH) {
        //  Not connected (it died, and has not expired yet): the call never
        //  left, so any other provider may take it
        dsh_catalog_unreachable (self->catalog, record->component, zclock_mono ());
        const char *other = dsh_catalog_provider (self->catalog, record->tool, record->component);
        if (!other || streq (other, record->component))
            break;
        snprintf (record->component, sizeof (record->component), "%s", other);
    }
    if (rc == 0) {
        if (record->trail)
            s_trail_dispatch (self, record, NULL);
        record->where = DSH_AT_COMPONENT;
        record->hold_until_ms = record->deadline_ms;
        dsh_catalog_outstanding (self->catalog, record->component, +1);
        self->calls++;
        return;
    }
    if (send_errno == EHOSTUNREACH) {
        //  Listed, and no connection now: it is making a new one (its
        //  broker was silent, a link was cut) or it died. The call never
        //  left, so it waits for the component as for a full window: it
        //  goes when a connection claims the id (s_refill), and is
        //  answered TOOL_GONE if the component expires first, TIMEOUT at
        //  its deadline
        s_hold (self, record, body);
        return;
    }
    zmq_msg_close (body);
    if (send_errno == EAGAIN)
        snprintf (text, sizeof (text), "Error: component \"%s\" serving tool \"%s\" is overloaded",
                  record->component, record->tool);
    else
        snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" is not connected",
                  record->tool, record->component);
    s_answer_error (self, &record, send_errno == EAGAIN? DSH_E_OVERLOADED: DSH_E_TOOL_GONE, text);
}

//  Holds a call for its component, whose window is full, or answers it
//  OVERLOADED if the broker holds all it may. Takes the body.
static void
s_hold (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    char reason [256];
    if (dsh_fairq_push (self->fairq, record, body, reason, sizeof (reason)) == 0) {
        record->hold_until_ms = record->deadline_ms;
        dsh_catalog_waiting (self->catalog, record->component, +1);
        return;
    }
    zmq_msg_close (body);
    char text [DSH_NAME_MAX + DSH_ID_MAX + 400];
    snprintf (text, sizeof (text), "Error: component \"%s\" serving tool \"%s\" is busy and %s",
              record->component, record->tool, reason);
    s_answer_error (self, &record, DSH_E_OVERLOADED, text);
}

//  Sends the calls held for a component while it has room in its window,
//  the next caller's first each time.
static void
s_refill (self_t *self, const char *component)
{
    //  Nothing held (the usual case): no lookups on the result's path; and
    //  nothing sent to a component with no connection, whose calls wait
    //  (a send that finds it gone holds the call again, and ends this)
    if (!dsh_fairq_size (self->fairq))
        return;
    while (dsh_fairq_size (self->fairq) && dsh_catalog_reachable (self->catalog, component)
    &&     dsh_catalog_has_room (self->catalog, component)) {
        zmq_msg_t body;
        zmq_msg_init (&body);
        dsh_record_t *record = dsh_fairq_pop (self->fairq, component, &body);
        if (!record) {
            zmq_msg_close (&body);
            break;
        }
        dsh_catalog_waiting (self->catalog, component, -1);
        //  Held a while: its tool may have been quarantined meanwhile
        char text [DSH_NAME_MAX * 3 + 512];
        if (s_quarantined (self, record->tool, text, sizeof (text))) {
            zmq_msg_close (&body);
            s_answer_error (self, &record, DSH_E_QUARANTINED, text);
            continue;
        }
        s_send_dispatched (self, record, &body);
    }
}

//  Sends a decided call to a provider of its tool, holds it until the
//  provider has room, or answers it at once. Takes the body.
static void
s_dispatch (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    const char *provider = dsh_catalog_provider (self->catalog, record->tool, NULL);
    char text [DSH_NAME_MAX + DSH_ID_MAX + 160];
    if (!provider) {
        zmq_msg_close (body);
        snprintf (text, sizeof (text), "Error: unknown tool \"%s\"", record->tool);
        s_answer_error (self, &record, DSH_E_UNKNOWN_TOOL, text);
        return;
    }
    if (zmq_msg_size (body) > (size_t) self->max_message_bytes) {
        //  Only what a stage stamped in can make it so: the front took it
        snprintf (text, sizeof (text), "Error: the call is %zu bytes with what the chain added to it, "
                  "over the %d-byte message limit", zmq_msg_size (body), self->max_message_bytes);
        zmq_msg_close (body);
        s_answer_error (self, &record, DSH_E_BAD_REQUEST, text);
        return;
    }
    if (!record->has_retry_body && dsh_catalog_idempotent (self->catalog, record->tool)) {
        //  Kept so the call can go to another replica if this one dies
        zmq_msg_init (&record->retry_body);
        zmq_msg_copy (&record->retry_body, body);
        record->has_retry_body = true;
    }
    snprintf (record->component, sizeof (record->component), "%s", provider);
    if (dsh_catalog_has_room (self->catalog, provider))
        s_send_dispatched (self, record, body);
    else
        s_hold (self, record, body);
}

//  The chain host: a call leaves the bottom of the chain.
//  Why a call to a quarantined tool is refused, and how to release it.
static void
s_quarantine_text (const char *tool, const char *reason, const char *offered, const char *pinned,
                   const char *changes, char *text, size_t size)
{
    if (streq (reason, DSH_PINS_CHANGED))
        snprintf (text, size, "Error: tool \"%s\" is quarantined: its definition changed since it was pinned "
                  "(%s%s%spinned %.12s, now %.12s); review it with `dsh pins show %s`, release it with "
                  "`dsh pins accept %s`", tool, *changes? "changed: ": "", changes, *changes? "; ": "",
                  pinned, offered, tool, tool);
    else
    if (streq (reason, DSH_PINS_UNACCEPTED))
        snprintf (text, size, "Error: tool \"%s\" is quarantined: pins are strict and its definition %.12s "
                  "has not been accepted; review it with `dsh pins show %s`, accept it with `dsh pins accept %s`",
                  tool, offered, tool, tool);
    else
    if (streq (reason, DSH_PINS_REJECTED))
        snprintf (text, size, "Error: tool \"%s\" is quarantined: its definition %.12s was rejected by an admin "
                  "(`dsh pins show %s`)", tool, offered, tool);
    else
        snprintf (text, size, "Error: tool \"%s\" is quarantined: the broker could not read its pins yet, so it "
                  "cannot tell whether the definition changed (the broker's log says why)", tool);
}

//  Writes why tool may not run now into text and returns true, or
//  returns false: its definition is quarantined (pins).
static bool
s_quarantined (self_t *self, const char *tool, char *text, size_t size)
{
    const char *offered = NULL, *pinned = NULL;
    const char *reason = self->pins? dsh_catalog_quarantine (self->catalog, tool, &offered, &pinned): NULL;
    if (reason)
        s_quarantine_text (tool, reason, offered, pinned, dsh_catalog_quarantine_changes (self->catalog, tool),
                           text, size);
    return reason != NULL;
}

//  The chain host: a call leaves the bottom of the chain. What the stages
//  judged is what runs: a tool quarantined meanwhile, or whose entry
//  changed since the call entered the chain, is not called.
static void
s_chain_dispatch (void *arg, dsh_record_t *record, zframe_t **body_p)
{
    self_t *self = (self_t *) arg;
    char text [DSH_NAME_MAX * 3 + 512];
    zchunk_t *now = dsh_catalog_tool (self->catalog, record->tool);
    if (now && s_quarantined (self, record->tool, text, sizeof (text))) {
        zframe_destroy (body_p);
        s_answer_error (self, &record, DSH_E_QUARANTINED, text);
        return;
    }
    if (now && record->entry && zframe_size (record->entry)
    &&  !(zchunk_size (now) == zframe_size (record->entry)
          && memcmp (zchunk_data (now), zframe_data (record->entry), zchunk_size (now)) == 0)) {
        zframe_destroy (body_p);
        snprintf (text, sizeof (text), "Error: tool \"%s\" changed while the call was in the chain: what its "
                  "stages judged is not what would run; call it again", record->tool);
        s_answer_error (self, &record, DSH_E_DENIED, text);
        return;
    }
    zmq_msg_t body;
    dsh_sock_part_frame (&body, body_p);
    s_dispatch (self, record, &body);
}

static void
s_chain_control_reply (void *arg, zmsg_t **envelope_p, zframe_t **body_p)
{
    s_send_front ((self_t *) arg, envelope_p, DSH_CONTROL, body_p);
}

//  Sends a call to another replica, once. Returns false if there is no
//  other provider, the call was retried already, or the send fails.
static bool
s_retry (self_t *self, dsh_record_t *record, const char *gone)
{
    const char *provider = record->has_retry_body && !record->retried?
        dsh_catalog_provider (self->catalog, record->tool, gone): NULL;
    if (!provider)
        return false;
    zmq_msg_t body;
    zmq_msg_init (&body);
    zmq_msg_copy (&body, &record->retry_body);
    if (s_send_call (self, provider, record->token, &body)) {
        zmq_msg_close (&body);
        return false;
    }
    record->retried = true;
    snprintf (record->component, sizeof (record->component), "%s", provider);
    dsh_catalog_outstanding (self->catalog, provider, +1);
    dsh_log_info ("dsh-broker: call %s to %s retried on %s (the tool is idempotent)", record->call_id, gone, provider);
    return true;
}

//  Answers every call in flight to a component that has gone, or retries
//  it once on another replica if the tool says it is idempotent. The calls
//  held for it never reached it: they go to another provider, if there is
//  one, like new calls.
static void
s_fail_component_calls (self_t *self, const char *component, const char *why)
{
    zmq_msg_t body;
    zmq_msg_init (&body);
    dsh_record_t *held;
    while ((held = dsh_fairq_pop (self->fairq, component, &body))) {
        dsh_catalog_waiting (self->catalog, component, -1);
        if (dsh_catalog_provider (self->catalog, held->tool, NULL))
            s_dispatch (self, held, &body);
        else {
            zmq_msg_close (&body);
            char text [DSH_NAME_MAX + DSH_ID_MAX + 96];
            snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" %s",
                      held->tool, component, why);
            s_answer_error (self, &held, DSH_E_TOOL_GONE, text);
        }
        zmq_msg_init (&body);
    }
    zmq_msg_close (&body);
    zlistx_t *orphans = dsh_inflight_at_component (self->inflight, component);
    for (dsh_record_t *record = zlistx_first (orphans); record; record = zlistx_next (orphans)) {
        if (s_retry (self, record, component))
            continue;
        char text [DSH_NAME_MAX + DSH_ID_MAX + 96];
        snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" %s",
                  record->tool, component, why);
        dsh_catalog_outstanding (self->catalog, component, -1);
        dsh_record_t *orphan = record;
        s_answer_error (self, &orphan, DSH_E_TOOL_GONE, text);
    }
    zlistx_destroy (&orphans);
}

static void
s_remove_component (self_t *self, const char *component, const char *reason)
{
    dsh_parts_forget (self->parts, component, UINT64_MAX);
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    if (dsh_catalog_remove (self->catalog, component, reason, events) == 0) {
        dsh_routes_forget (self->routes, component);
        zhashx_delete (self->presence_keys, component);
        dsh_log_info ("dsh-broker: component %s %s", component, reason);
        s_fail_component_calls (self, component, reason);
        dsh_stats_component_gone (self->stats, component);
        s_publish (self, events);
    }
    zlistx_destroy (&events);
}

//  ---------------------------------------------------------------------
//  Front: requests from clients, one function per command

static void
s_pack_id (msgpack_packer *pk, const msgpack_object *id)
{
    if (id) {
        dsh_pack_cstr (pk, "id");
        msgpack_pack_object (pk, *id);
    }
}

//  Begins a reply to a request: a map, with the request's id if it had one.
static void
s_reply_begin (dsh_packer_t *packer, s_request_t *request)
{
    dsh_packer_init (packer);
    dsh_packer_map_begin (packer);
    s_pack_id (&packer->pk, request->id);
}

//  Ends the reply s_reply_begin began, and sends it.
static void
s_reply_packed (self_t *self, s_request_t *request, const char *command, dsh_packer_t *packer)
{
    dsh_packer_map_end (packer);
    zframe_t *body = dsh_packer_frame (packer);
    dsh_packer_release (packer);
    zmsg_t *envelope = s_route_zmsg (request->parts);
    s_send_front (self, &envelope, command, &body);
}

static void
s_request_error (self_t *self, s_request_t *request, const char *code, const char *message)
{
    zmsg_t *envelope = s_route_zmsg (request->parts);
    s_reply_error (self, &envelope, request->id, code, message);
}

//  A trail for the audit of a call from request (NULL with the audit
//  off): who sent it, the agent it claimed.
static dsh_audit_trail_t *
s_trail (self_t *self, s_request_t *request, const char *claimed_agent)
{
    if (!dsh_audit_records (self->audit))
        return NULL;
    dsh_audit_trail_t *trail = dsh_audit_trail_new (self->audit, request->body);
    dsh_identity_t *peer = &request->peer;
    dsh_audit_trail_caller (trail, peer->key, peer->name, peer->role, peer->agent,
                            zmq_msg_gets (request->body, "Peer-Address"), claimed_agent);
    return trail;
}

//  An error RESULT for a call that has no record (refused at FRONT); a
//  call (tool not NULL, "" if unreadable) is recorded with it, a cancel
//  is not.
static void
s_refuse_call (self_t *self, s_request_t *request, const char *call_id, const char *tool, const char *agent,
               const char *code, const char *text)
{
    zframe_t *frame = dsh_proto_error_result (call_id, code, text);
    zmq_msg_t body;
    dsh_sock_part_frame (&body, &frame);
    dsh_audit_trail_t *trail = tool? s_trail (self, request, agent): NULL;
    if (trail) {
        dsh_audit_trail_call (trail, call_id, tool);
        dsh_audit_submit (self->audit, &trail, &body);
    }
    s_send_route (self, request->parts->part, request->parts->envelope, false, DSH_RESULT, &body);
}

//  ---------------------------------------------------------------------
//  Rights: what a key's role lets it ask on FRONT, under CURVE

//  Stage control commands that need less than an admin key, and the role.
static const struct {
    const char *command;
    const char *role;
} s_control_rights [] = {
    { "approve", DSH_ROLE_APPROVER }, { "deny", DSH_ROLE_APPROVER },
    { "pending", DSH_ROLE_APPROVER }, { "approvals", DSH_ROLE_APPROVER },
    { "allowed", DSH_ROLE_AGENT }, { "modes", DSH_ROLE_AGENT },
    { "grants", DSH_ROLE_APPROVER }, { "revoke", DSH_ROLE_APPROVER },
};

//  The role a request needs beyond being in the allow-list, or NULL.
static const char *
s_front_role (s_request_t *request, const char *command)
{
    if (streq (command, DSH_CALL) || streq (command, DSH_CANCEL))
        return DSH_ROLE_AGENT;
    if (streq (command, DSH_AUDIT))
        return DSH_ROLE_AUDITOR;
    if (streq (command, DSH_PINS)) {
        //  Reading the pins is an auditor's or an approver's (s_front_forbidden);
        //  changing them an admin's
        const msgpack_object *op = dsh_map_get (request->root, "op");
        return !op || dsh_str_eq (op, "list") || dsh_str_eq (op, "show")? DSH_ROLE_AUDITOR: DSH_ROLE_ADMIN;
    }
    if (streq (command, DSH_HELLO) && dsh_map_get (request->root, "stage"))
        return DSH_ROLE_STAGE;
    if (streq (command, DSH_CONTROL)) {
        const msgpack_object *control = dsh_map_get (request->root, "command");
        for (size_t index = 0; index < sizeof (s_control_rights) / sizeof (s_control_rights [0]); index++)
            if (dsh_str_eq (control, s_control_rights [index].command))
                return s_control_rights [index].role;
        return DSH_ROLE_ADMIN;
    }
    return NULL;
}

//  Writes why the request's key may not make it into text and returns
//  true, or returns false if it may.
static bool
s_front_forbidden (self_t *self, s_request_t *request, const char *command, char *text, size_t text_size)
{
    const char *role = self->curve? s_front_role (request, command): NULL;
    if (!role || dsh_identity_is (&request->peer, role))
        return false;
    if (streq (command, DSH_PINS) && streq (role, DSH_ROLE_AUDITOR) && dsh_identity_is (&request->peer, DSH_ROLE_APPROVER))
        return false;           //  an approver is shown whether what it approves is pinned
    self->forbidden++;
    snprintf (text, text_size, "Error: key %.8s... (role %s) may not send %s%s: it needs a%s %s key",
              request->peer.key? request->peer.key: "?", request->peer.role? request->peer.role: "none",
              command, streq (command, DSH_HELLO)? " for a stage slot": "",
              streq (role, DSH_ROLE_AGENT) || streq (role, DSH_ROLE_APPROVER) || streq (role, DSH_ROLE_ADMIN)
              || streq (role, DSH_ROLE_AUDITOR)? "n": "",
              streq (role, DSH_ROLE_ADMIN)? "admin": role);
    return true;
}

//  Under CURVE the agent a call runs as is the key's, never the body's: a
//  call without one gets it spliced in; a call claiming another is refused.
//  Returns 0 with *stamped NULL (nothing to change) or a new body, or -1
//  with text.
static int
s_call_agent (self_t *self, s_request_t *request, dsh_call_head_t *head, zframe_t **stamped,
              char *text, size_t text_size)
{
    *stamped = NULL;
    if (!self->curve)
        return 0;
    const char *agent = request->peer.agent;
    if (head->agent && (!agent || !streq (head->agent, agent))) {
        self->forbidden++;
        snprintf (text, text_size, "Error: the call claims agent \"%.64s\", but key %.8s... is %s%.64s%s",
                  head->agent, request->peer.key, agent? "agent \"": "no agent", agent? agent: "", agent? "\"": "");
        return -1;
    }
    if (!agent || head->agent)
        return 0;
    dsh_call_changes_t changes = { .change_agent = true, .agent = agent };
    char reason [256];
    *stamped = dsh_proto_splice_call (zmq_msg_data (request->body), zmq_msg_size (request->body), &changes,
                                      (size_t) self->max_message_bytes, reason, sizeof (reason));
    if (!*stamped) {
        snprintf (text, text_size, "%s", reason);
        return -1;
    }
    return 0;
}

static void
s_handle_call (self_t *self, s_request_t *request)
{
    char error [256];
    dsh_call_head_t head;
    if (dsh_proto_decode_call (request->doc, &head, error, sizeof (error))) {
        self->bad_messages++;
        dsh_stats_refused (self->stats, DSH_E_BAD_REQUEST);
        if (head.call_id)
            s_refuse_call (self, request, head.call_id, head.name? head.name: "", head.agent, DSH_E_BAD_REQUEST, error);
        else
            s_request_error (self, request, DSH_E_BAD_REQUEST, error);
        return;
    }
    if (request->parts->envelope > DSH_ROUTE_MAX) {
        self->bad_messages++;
        snprintf (error, sizeof (error), "the envelope has %zu frames, more than %d",
                  request->parts->envelope, DSH_ROUTE_MAX);
        dsh_stats_refused (self->stats, DSH_E_BAD_REQUEST);
        s_refuse_call (self, request, head.call_id, head.name, head.agent, DSH_E_BAD_REQUEST, error);
        return;
    }
    char forbidden [DSH_ID_MAX * 2 + DSH_NAME_MAX * 3 + 512];
    zframe_t *stamped = NULL;
    if (s_front_forbidden (self, request, DSH_CALL, forbidden, sizeof (forbidden))) {
        dsh_stats_refused (self->stats, DSH_E_FORBIDDEN);
        s_refuse_call (self, request, head.call_id, head.name, head.agent, DSH_E_FORBIDDEN, forbidden);
        return;
    }
    if (s_call_agent (self, request, &head, &stamped, forbidden, sizeof (forbidden))) {
        const char *code = strncmp (forbidden, "Error:", 6)? DSH_E_BAD_REQUEST: DSH_E_FORBIDDEN;
        dsh_stats_refused (self->stats, code);
        s_refuse_call (self, request, head.call_id, head.name, head.agent, code, forbidden);
        return;
    }
    //  A changed definition is not offered to agents, nor run (pins)
    if (s_quarantined (self, head.name, forbidden, sizeof (forbidden))) {
        zframe_destroy (&stamped);
        dsh_stats_refused (self->stats, DSH_E_QUARANTINED);
        s_refuse_call (self, request, head.call_id, head.name, head.agent, DSH_E_QUARANTINED, forbidden);
        return;
    }
    //  A required audit that cannot record runs nothing
    if (!dsh_audit_admits (self->audit, forbidden, sizeof (forbidden))) {
        zframe_destroy (&stamped);
        dsh_audit_refused (self->audit);
        dsh_stats_refused (self->stats, DSH_E_AUDIT_UNAVAILABLE);
        s_refuse_call (self, request, head.call_id, NULL, NULL, DSH_E_AUDIT_UNAVAILABLE, forbidden);
        return;
    }
    if (dsh_inflight_size (self->inflight) >= self->max_in_flight) {
        zframe_destroy (&stamped);
        char text [96];
        snprintf (text, sizeof (text), "Error: the broker is overloaded (%zu calls in flight)",
                  dsh_inflight_size (self->inflight));
        dsh_stats_refused (self->stats, DSH_E_OVERLOADED);
        s_refuse_call (self, request, head.call_id, head.name, head.agent, DSH_E_OVERLOADED, text);
        return;
    }
    uint64_t timeout_ms = head.timeout_ms? head.timeout_ms: (uint64_t) self->call_timeout_ms;
    if (timeout_ms > (uint64_t) self->max_call_timeout_ms)
        timeout_ms = (uint64_t) self->max_call_timeout_ms;
    //  The call is decided here, once: this name is what the stages see and
    //  what is dispatched, and the deadline holds from now on, wherever the
    //  call is
    dsh_record_t *record = dsh_inflight_open (self->inflight, request->parts->part, request->parts->envelope,
                                              head.call_id, head.name, zclock_mono () + (int64_t) timeout_ms);
    if (self->curve && request->peer.key)
        snprintf (record->caller, sizeof (record->caller), "%s", request->peer.key);
    //  The caller's bytes, before a stamped agent replaces them
    record->trail = s_trail (self, request, head.agent);
    dsh_audit_trail_call (record->trail, head.call_id, head.name);
    //  Under CURVE the key's agent, which the body's must be if it names one
    dsh_stats_open (self->stats, record->tool, head.agent? head.agent: self->curve? request->peer.agent: NULL,
                    &record->stats_tool, &record->stats_agent);
    //  The head points into the body; done with it before the body moves
    dsh_doc_destroy (&request->doc);
    if (stamped) {
        zmq_msg_close (request->body);
        dsh_sock_part_frame (request->body, &stamped);
    }
    if (dsh_chain_size (self->chain)) {
        //  The waterfall runs first, even for a tool nobody serves
        zframe_t *body = s_frame_from_part (request->body);
        dsh_chain_enter (self->chain, record, &body, dsh_catalog_tool (self->catalog, record->tool));
    }
    else {
        zmq_msg_t body;
        zmq_msg_init (&body);
        zmq_msg_move (&body, request->body);
        s_dispatch (self, record, &body);
    }
}

//  A caller cancels a call: wherever it is (in the chain, at a component)
//  it is let go and the caller gets CANCELLED. A cancel that finds nothing
//  (the result went out already) is answered the same way: the client
//  library keeps exactly one reply per call.
static void
s_handle_cancel (self_t *self, s_request_t *request)
{
    const char *call_id = dsh_doc_strdup (request->doc, dsh_map_get (request->root, "callId"));
    if (!call_id || !*call_id || strlen (call_id) > DSH_CALL_ID_MAX) {
        self->bad_messages++;
        s_request_error (self, request, DSH_E_BAD_REQUEST, "CANCEL wants a string \"callId\"");
        return;
    }
    char forbidden [256];
    if (s_front_forbidden (self, request, DSH_CANCEL, forbidden, sizeof (forbidden))) {
        //  As a refused CALL is: a RESULT under its callId
        s_refuse_call (self, request, call_id, NULL, NULL, DSH_E_FORBIDDEN, forbidden);
        return;
    }
    dsh_chain_settle (self->chain);
    dsh_record_t *record = dsh_inflight_find_caller (self->inflight, request->parts->part,
                                                     request->parts->envelope, call_id);
    if (record) {
        char component [DSH_ID_MAX + 1] = "";
        if (record->where == DSH_AT_COMPONENT)
            snprintf (component, sizeof (component), "%s", record->component);
        s_release (self, record, "cancelled");
        dsh_inflight_answer_error (self->inflight, &record, DSH_E_CANCELLED, "Error: the call was cancelled");
        //  Its slot in the component's window is free
        if (*component)
            s_refill (self, component);
    }
    else
        s_refuse_call (self, request, call_id, NULL, NULL, DSH_E_CANCELLED, "Error: the call was cancelled");
}

//  heartbeatMs and liveness, as WELCOME, PONG and STATS give them.
static void
s_pack_liveness (self_t *self, msgpack_packer *pk)
{
    dsh_pack_cstr (pk, "heartbeatMs");
    msgpack_pack_uint32 (pk, (uint32_t) self->heartbeat_ms);
    dsh_pack_cstr (pk, "liveness");
    msgpack_pack_uint32 (pk, (uint32_t) self->liveness);
}

//  Who sent a request, for the audit: the key's name, else its key, else
//  the connection's peer address.
static void
s_caller_id (s_request_t *request, char *text, size_t size)
{
    const char *address = zmq_msg_gets (request->body, "Peer-Address");
    snprintf (text, size, "%s", request->peer.name? request->peer.name: request->peer.key? request->peer.key:
                               address? address: "unknown");
}

//  Packs {command: "mode", args: {agent?, mode}}: what a plan stage is
//  told to set an agent's mode ("" is the default for every agent).
static zframe_t *
s_mode_command (const char *agent, const char *mode)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "command", "mode");
    dsh_pack_cstr (&packer.pk, "args");
    dsh_packer_map_begin (&packer);
    if (*agent)
        dsh_packer_kv_str (&packer, "agent", agent);
    dsh_packer_kv_str (&packer, "mode", mode);
    dsh_packer_map_end (&packer);
    dsh_packer_map_end (&packer);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

//  `dsh mode` on a plan stage is kept in the store: it survives a restart,
//  and every broker on the same store follows it.
static void
s_keep_mode (self_t *self, const msgpack_object *stage, const msgpack_object *command, const msgpack_object *args,
             const char *caller)
{
    if (!self->audit || !dsh_str_eq (command, "mode"))
        return;
    char name [DSH_NAME_MAX + 1];
    if (stage->via.str.size > DSH_NAME_MAX)
        return;
    memcpy (name, stage->via.str.ptr, stage->via.str.size);
    name [stage->via.str.size] = 0;
    const char *kind = dsh_chain_kind (self->chain, name);
    if (!kind || !streq (kind, "plan"))
        return;
    const msgpack_object *agent = dsh_map_get (args, "agent");
    const msgpack_object *mode = dsh_map_get (args, "mode");
    if ((agent && (agent->type != MSGPACK_OBJECT_STR || agent->via.str.size > DSH_ID_MAX))
    ||  !(dsh_str_eq (mode, "plan") || dsh_str_eq (mode, "normal")))
        return;             //  the stage refuses it: nothing to keep
    char agent_id [DSH_ID_MAX + 1] = "";
    if (agent) {
        memcpy (agent_id, agent->via.str.ptr, agent->via.str.size);
        agent_id [agent->via.str.size] = 0;
    }
    dsh_audit_mode_set (self->audit, agent_id, dsh_str_eq (mode, "plan")? "plan": "normal", caller);
    zhashx_update (self->modes_set, agent_id, zsys_sprintf ("%" PRId64, zclock_mono ()));
}

//  A grant revoked on a permission stage is revoked in the store as well:
//  no broker on the store lets it through again.
static void
s_keep_revoke (self_t *self, const msgpack_object *stage, const msgpack_object *command, const msgpack_object *args)
{
    if (!self->audit || !dsh_str_eq (command, "revoke") || stage->via.str.size > DSH_NAME_MAX)
        return;
    char name [DSH_NAME_MAX + 1];
    memcpy (name, stage->via.str.ptr, stage->via.str.size);
    name [stage->via.str.size] = 0;
    const char *kind = dsh_chain_kind (self->chain, name);
    const msgpack_object *id = dsh_map_get (args, "id");
    if (!kind || !streq (kind, "permission") || !id || id->type != MSGPACK_OBJECT_STR || id->via.str.size > 64)
        return;
    char grant [65];
    memcpy (grant, id->via.str.ptr, id->via.str.size);
    grant [id->via.str.size] = 0;
    dsh_audit_grant_revoke (self->audit, grant);
}

//  A built-in stage's note on a call: a grant an approver gave is kept in
//  the store, so it outlives this broker and reaches the others on it.
static void
s_chain_note (void *arg, const char *stage, json_t *note)
{
    self_t *self = (self_t *) arg;
    json_t *grant = json_object_get (json_object_get (note, "approval"), "grant");
    const char *id = json_string_value (json_object_get (grant, "id"));
    json_int_t expires = json_integer_value (json_object_get (grant, "expiresMs"));
    if (!self->audit || !json_is_object (grant) || !id || expires <= 0)
        return;
    char *text = json_dumps (grant, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (text)
        dsh_audit_grant_keep (self->audit, id, stage, text, (int64_t) expires);
    free (text);
}

//  The stored grants (a packed array of grant maps), handed to every
//  permission stage: at start, and when another broker on the store made
//  or revoked one.
static void
s_apply_grants (self_t *self, zframe_t *frame)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "command", "grants.load");
    dsh_pack_cstr (&packer.pk, "args");
    dsh_packer_map_begin (&packer);
    dsh_pack_cstr (&packer.pk, "grants");
    dsh_packer_raw (&packer, zframe_data (frame), zframe_size (frame));
    dsh_packer_map_end (&packer);
    dsh_packer_map_end (&packer);
    zframe_t *command = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_chain_apply (self->chain, "permission", command);
    zframe_destroy (&command);
}

//  The stored pins (a packed array of pins), loaded, and every tool
//  judged again: what another broker on the store pinned, accepted or
//  forgot holds here too.
static void
s_apply_pins (self_t *self, zframe_t *frame)
{
    if (!self->pins)
        return;
    //  An array, not a message body (dsh_proto_decode_body wants a map)
    char reason [128];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), reason, sizeof (reason));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    if (!root || root->type != MSGPACK_OBJECT_ARRAY) {
        dsh_doc_destroy (&doc);
        return;
    }
    zlistx_t *pins = zlistx_new ();
    zlistx_set_destructor (pins, (zlistx_destructor_fn *) dsh_pin_destroy);
    for (uint32_t index = 0; index < root->via.array.size; index++) {
        const msgpack_object *item = &root->via.array.ptr [index];
        //  Strings copied in the document's zone, freed with it
        const char *name = dsh_doc_strdup (doc, dsh_map_get (item, "name"));
        if (!name)
            continue;
        dsh_pin_t *pin = dsh_pin_new (name);
        const char *text = dsh_doc_strdup (doc, dsh_map_get (item, "digest"));
        snprintf (pin->digest, sizeof (pin->digest), "%s", text? text: "");
        text = dsh_doc_strdup (doc, dsh_map_get (item, "rejected"));
        snprintf (pin->rejected, sizeof (pin->rejected), "%s", text? text: "");
        char **fields [] = { &pin->definition, &pin->component, &pin->key, &pin->accepted_by };
        const char *keys [] = { "definition", "component", "key", "acceptedBy" };
        for (size_t field = 0; field < 4; field++) {
            const char *value = dsh_doc_strdup (doc, dsh_map_get (item, keys [field]));
            if (value) {
                zstr_free (fields [field]);
                *fields [field] = strdup (value);
            }
        }
        const msgpack_object *first = dsh_map_get (item, "firstMs");
        const msgpack_object *accepted = dsh_map_get (item, "acceptedMs");
        pin->first_ms = first && first->type == MSGPACK_OBJECT_POSITIVE_INTEGER? (int64_t) first->via.u64: 0;
        pin->accepted_ms = accepted && accepted->type == MSGPACK_OBJECT_POSITIVE_INTEGER?
                           (int64_t) accepted->via.u64: 0;
        zlistx_add_end (pins, pin);
    }
    dsh_doc_destroy (&doc);
    dsh_pins_load (self->pins, &pins, zclock_mono ());
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    dsh_catalog_rejudge (self->catalog, NULL, events);
    s_publish (self, events);
    zlistx_destroy (&events);
}

//  The stored modes (a packed map agent -> mode), applied to the plan
//  stages: at start, and when another broker on the store changed one. A
//  mode set here in the last few seconds stands until the store has it.
static void
s_apply_modes (self_t *self, zframe_t *frame)
{
    char reason [128];
    dsh_doc_t *doc = dsh_proto_decode_body (frame, reason, sizeof (reason));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    for (uint32_t index = 0; root && root->type == MSGPACK_OBJECT_MAP && index < root->via.map.size; index++) {
        const msgpack_object *key = &root->via.map.ptr [index].key;
        const msgpack_object *value = &root->via.map.ptr [index].val;
        if (key->type != MSGPACK_OBJECT_STR || key->via.str.size > DSH_ID_MAX || value->type != MSGPACK_OBJECT_STR)
            continue;
        char agent [DSH_ID_MAX + 1];
        memcpy (agent, key->via.str.ptr, key->via.str.size);
        agent [key->via.str.size] = 0;
        const char *set = (const char *) zhashx_lookup (self->modes_set, agent);
        if (set && zclock_mono () - strtoll (set, NULL, 10) < S_LOCAL_MS)
            continue;
        zframe_t *command = s_mode_command (agent, dsh_str_eq (value, "plan")? "plan": "normal");
        dsh_chain_apply (self->chain, "plan", command);
        zframe_destroy (&command);
    }
    dsh_doc_destroy (&doc);
}

//  The stored state, as the reader last sent it, applied.
static void
s_apply_stored (self_t *self, int which)
{
    if (!self->stored [which])
        return;
    if (which == 0)
        s_apply_modes (self, self->stored [which]);
    else
    if (which == 1)
        s_apply_pins (self, self->stored [which]);
    else
        s_apply_grants (self, self->stored [which]);
}

//  A change made here stands against the stored state for a few seconds
//  (a mode, a pin or a grant made 2 s, a grant revoked 3 s), while its
//  own write lands; the reader sends the stored state only when it changes,
//  so what it sent meanwhile is applied again once those windows passed:
//  else a change another broker made in them would never hold here.
static int
s_stored_again (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    for (int which = 0; which < 3; which++)
        if (self->stored_due [which] && zclock_mono () >= self->stored_due [which]) {
            self->stored_due [which] = 0;
            s_apply_stored (self, which);
        }
    return 0;
}

//  The audit's reader: a query's reply to send on FRONT, or the stored
//  state (modes, pins, grants).
static int
s_audit_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    char *command = zmsg_popstr (msg);
    zframe_t *body = zmsg_pop (msg);
    int which = !command || !body? -1: streq (command, "MODES")? 0: streq (command, "PINS")? 1:
                streq (command, "GRANTS")? 2: -1;
    if (which >= 0) {
        zframe_destroy (&self->stored [which]);
        self->stored [which] = body;
        body = NULL;
        s_apply_stored (self, which);
        self->stored_due [which] = zclock_mono () + S_STORED_AGAIN_MS;
    }
    else
    if (command && body && (streq (command, "REPLY") || streq (command, "ERROR"))) {
        //  What is left is the envelope
        zmsg_t *envelope = msg;
        msg = NULL;
        s_send_front (self, &envelope, streq (command, "REPLY")? DSH_AUDIT: DSH_ERROR, &body);
    }
    zframe_destroy (&body);
    zstr_free (&command);
    zmsg_destroy (&msg);
    return 0;
}

//  AUDIT {id?, agent?, tool?, outcome?, callId?, broker?, since?, until?,
//  limit?, order?, verify?}: checked here, answered by the audit's reader.
static void
s_handle_audit (self_t *self, s_request_t *request)
{
    if (!dsh_audit_records (self->audit)) {
        s_request_error (self, request, DSH_E_AUDIT_UNAVAILABLE, "this broker keeps no audit (audit = off)");
        return;
    }
    static const char *strings [] = { "agent", "tool", "outcome", "callId", "broker", "order" };
    static const char *numbers [] = { "since", "until", "limit" };
    char error [160] = "";
    for (size_t index = 0; index < sizeof (strings) / sizeof (strings [0]) && !*error; index++) {
        const msgpack_object *value = dsh_map_get (request->root, strings [index]);
        if (value && (value->type != MSGPACK_OBJECT_STR || value->via.str.size > 255))
            snprintf (error, sizeof (error), "AUDIT: %s must be a string of at most 255 bytes", strings [index]);
    }
    for (size_t index = 0; index < sizeof (numbers) / sizeof (numbers [0]) && !*error; index++) {
        const msgpack_object *value = dsh_map_get (request->root, numbers [index]);
        if (value && (value->type != MSGPACK_OBJECT_POSITIVE_INTEGER || value->via.u64 > INT64_MAX))
            snprintf (error, sizeof (error), "AUDIT: %s must be a whole number (ms since 1970 for since and until)",
                      numbers [index]);
    }
    const msgpack_object *order = dsh_map_get (request->root, "order");
    if (!*error && order && !dsh_str_eq (order, "oldest") && !dsh_str_eq (order, "newest"))
        snprintf (error, sizeof (error), "AUDIT: order must be \"oldest\" or \"newest\"");
    const msgpack_object *verify = dsh_map_get (request->root, "verify");
    if (!*error && verify && verify->type != MSGPACK_OBJECT_BOOLEAN)
        snprintf (error, sizeof (error), "AUDIT: verify must be true or false");
    if (*error) {
        self->bad_messages++;
        s_request_error (self, request, DSH_E_BAD_REQUEST, error);
        return;
    }
    zframe_t *body = zframe_new (zmq_msg_data (request->body), zmq_msg_size (request->body));
    zmsg_t *envelope = s_route_zmsg (request->parts);
    if (dsh_audit_query (self->audit, &envelope, &body))
        s_request_error (self, request, DSH_E_OVERLOADED, "the audit's reader has too many queries waiting: "
                         "try again shortly");
}

//  A stage is handed the control command the broker authorised, packed
//  from the values it checked (id, stage, command, args), never the
//  sender's bytes: nothing the broker did not read reaches the stage.
static void
s_handle_control (self_t *self, s_request_t *request)
{
    const msgpack_object *stage = dsh_map_get (request->root, "stage");
    const msgpack_object *command = dsh_map_get (request->root, "command");
    const msgpack_object *args = dsh_map_get (request->root, "args");
    if (!stage || stage->type != MSGPACK_OBJECT_STR || !command || command->type != MSGPACK_OBJECT_STR) {
        self->bad_messages++;
        s_request_error (self, request, DSH_E_BAD_REQUEST, "CONTROL wants {stage, command, args?}: strings");
        return;
    }
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    s_pack_id (&packer.pk, request->id);
    dsh_pack_cstr (&packer.pk, "stage");
    msgpack_pack_object (&packer.pk, *stage);
    dsh_pack_cstr (&packer.pk, "command");
    msgpack_pack_object (&packer.pk, *command);
    if (args) {
        dsh_pack_cstr (&packer.pk, "args");
        msgpack_pack_object (&packer.pk, *args);
    }
    //  Who asks, as the broker knows it (an approval's approver): never
    //  the sender's word
    char caller [128];
    s_caller_id (request, caller, sizeof (caller));
    dsh_packer_kv_str (&packer, "caller", caller);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *envelope = s_route_zmsg (request->parts);
    dsh_chain_control (self->chain, &envelope, &body);
    zmsg_destroy (&envelope);
    s_keep_mode (self, stage, command, args, caller);
    s_keep_revoke (self, stage, command, args);
}

static void
s_handle_hello (self_t *self, s_request_t *request)
{
    //  An external stage asks for its slot by name
    char *stage = dsh_doc_strdup (request->doc, dsh_map_get (request->root, "stage"));
    const char *feed = NULL, *drain = NULL;
    bool slot = stage && dsh_chain_slot (self->chain, stage, &feed, &drain) == 0;
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    msgpack_packer *pk = &packer.pk;
    if (slot) {
        //  The chain's version too: what an external permission stage
        //  binds its grants to
        dsh_pack_cstr (pk, "stage");
        msgpack_pack_map (pk, 3);
        dsh_packer_kv_str (&packer, "feed", feed);
        dsh_packer_kv_str (&packer, "drain", drain);
        dsh_packer_kv_str (&packer, "chainVersion", dsh_chain_version (self->chain));
    }
    dsh_pack_cstr (pk, "protocol");
    msgpack_pack_uint32 (pk, DSH_PROTOCOL_VERSION);
    dsh_packer_kv_str (&packer, "broker", self->broker_id);
    dsh_pack_cstr (pk, "epoch");
    msgpack_pack_uint64 (pk, self->epoch);
    dsh_packer_kv_str (&packer, "announce", self->endpoints [1]);
    dsh_packer_kv_str (&packer, "work", self->endpoints [2]);
    dsh_packer_kv_str (&packer, "events", self->endpoints [3]);
    s_pack_liveness (self, pk);
    dsh_pack_cstr (pk, "maxMessageBytes");
    msgpack_pack_uint32 (pk, (uint32_t) self->max_message_bytes);
    s_reply_packed (self, request, DSH_WELCOME, &packer);
}

static void
s_handle_ping (self_t *self, s_request_t *request)
{
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    msgpack_packer *pk = &packer.pk;
    dsh_packer_kv_str (&packer, "broker", self->broker_id);
    dsh_pack_cstr (pk, "uptimeMs");
    msgpack_pack_uint64 (pk, (uint64_t) (zclock_time () - self->started_ms));
    dsh_pack_cstr (pk, "tools");
    msgpack_pack_uint64 (pk, dsh_catalog_tool_count (self->catalog));
    dsh_pack_cstr (pk, "components");
    msgpack_pack_uint64 (pk, dsh_catalog_component_count (self->catalog));
    dsh_pack_cstr (pk, "inFlight");
    msgpack_pack_uint64 (pk, dsh_inflight_size (self->inflight));
    dsh_pack_cstr (pk, "seq");
    msgpack_pack_uint64 (pk, dsh_catalog_seq (self->catalog));
    //  What a client watching this broker's liveness needs to know
    dsh_pack_cstr (pk, "epoch");
    msgpack_pack_uint64 (pk, self->epoch);
    s_pack_liveness (self, pk);
    s_reply_packed (self, request, DSH_PONG, &packer);
}

static void
s_handle_chain (self_t *self, s_request_t *request)
{
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    dsh_pack_cstr (&packer.pk, "stages");
    dsh_chain_pack (self->chain, &packer.pk);
    dsh_packer_kv_str (&packer, "version", dsh_chain_version (self->chain));
    s_reply_packed (self, request, DSH_CHAIN, &packer);
}

static void
s_handle_list (self_t *self, s_request_t *request)
{
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    dsh_pack_cstr (&packer.pk, "seq");
    msgpack_pack_uint64 (&packer.pk, dsh_catalog_seq (self->catalog));
    dsh_pack_cstr (&packer.pk, "tools");
    dsh_catalog_pack_tools (self->catalog, &packer.pk);
    s_reply_packed (self, request, DSH_TOOLS, &packer);
}

//  The snapshot's entries after the id (seq, epoch, tools, components),
//  encoded once per state of the catalog: a storm of SNAPSHOT requests
//  costs a copy each, not an encoding of every tool each.
static zchunk_t *
s_snapshot_entries (self_t *self)
{
    uint64_t version = dsh_catalog_version (self->catalog) + 1;
    uint64_t seq = dsh_catalog_seq (self->catalog);
    if (self->snapshot && self->snapshot_version == version && self->snapshot_seq == seq)
        return self->snapshot;
    zchunk_destroy (&self->snapshot);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    dsh_pack_cstr (&pk, "seq");
    msgpack_pack_uint64 (&pk, seq);
    dsh_pack_cstr (&pk, "epoch");
    msgpack_pack_uint64 (&pk, self->epoch);
    dsh_catalog_pack_snapshot (self->catalog, &pk);
    size_t objects = 0;
    for (size_t offset = 0; offset < sbuf.size; objects++) {
        size_t size = dsh_msgpack_skip (sbuf.data + offset, sbuf.size - offset);
        assert (size);
        offset += size;
    }
    assert (objects % 2 == 0 && objects / 2 < 15);
    self->snapshot = zchunk_new (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    self->snapshot_pairs = objects / 2;
    self->snapshot_version = version;
    self->snapshot_seq = seq;
    return self->snapshot;
}

//  Sends the SNAPSHOT reply wait asked for, and takes its bytes from the
//  budget.
static void
s_snapshot_send (self_t *self, s_snapshot_wait_t *wait)
{
    zchunk_t *entries = s_snapshot_entries (self);
    static const byte id_key [] = { 0xa2, 'i', 'd' };
    size_t id_size = wait->id? sizeof (id_key) + zchunk_size (wait->id): 0;
    size_t size = 1 + id_size + zchunk_size (entries);
    zframe_t *body = zframe_new (NULL, size);
    byte *data = zframe_data (body);
    //  A fixmap: the pairs are fewer than 16
    data [0] = (byte) (0x80 | (self->snapshot_pairs + (wait->id != NULL)));
    if (wait->id) {
        memcpy (data + 1, id_key, sizeof (id_key));
        memcpy (data + 1 + sizeof (id_key), zchunk_data (wait->id), zchunk_size (wait->id));
    }
    memcpy (data + 1 + id_size, zchunk_data (entries), zchunk_size (entries));
    s_send_front (self, &wait->envelope, DSH_SNAPSHOT, &body);
    self->snapshot_budget -= (int64_t) size;
}

static int s_snapshot_tick (zloop_t *loop, int timer_id, void *arg);

//  Sends the SNAPSHOTs waiting, oldest first, while the budget lasts: at
//  most snapshot_bytes_per_second, in bursts of a tenth of a second's, so
//  that a storm of resynchronising watchers neither takes the broker's
//  thread from heartbeats and calls nor fills its memory with replies
//  queued for sending. The budget may go below zero by one reply (a
//  snapshot larger than a burst still goes); the debt is paid first.
static void
s_snapshot_serve (self_t *self)
{
    int64_t now = zclock_mono ();
    int64_t burst = self->snapshot_rate / S_SNAPSHOT_BURSTS;
    self->snapshot_budget += (now - self->snapshot_refilled) * self->snapshot_rate / 1000;
    if (self->snapshot_budget > burst)
        self->snapshot_budget = burst;
    self->snapshot_refilled = now;
    s_snapshot_wait_t *wait;
    while (self->snapshot_budget > 0 && (wait = (s_snapshot_wait_t *) zlistx_first (self->snapshot_queue))) {
        zhashx_delete (self->snapshot_waiting, wait->peer);
        s_snapshot_send (self, wait);
        zlistx_delete (self->snapshot_queue, zlistx_cursor (self->snapshot_queue));
    }
    bool waiting = zlistx_size (self->snapshot_queue) > 0;
    if (waiting && !self->snapshot_ticking) {
        self->snapshot_ticking_id = zloop_timer (self->loop, S_SNAPSHOT_TICK_MS, 0, s_snapshot_tick, self);
        assert (self->snapshot_ticking_id != -1);
        self->snapshot_ticking = true;
    }
    else
    if (!waiting && self->snapshot_ticking) {
        zloop_timer_end (self->loop, self->snapshot_ticking_id);
        self->snapshot_ticking = false;
    }
}

static int
s_snapshot_tick (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_snapshot_serve ((self_t *) arg);
    return 0;
}

//  SNAPSHOT: answered in turn (s_snapshot_serve). A peer has one request
//  in the queue at most: a newer one takes the older's place, which is
//  answered OVERLOADED, so a watcher that asks again while it waits does
//  not lengthen the queue.
static void
s_handle_snapshot (self_t *self, s_request_t *request)
{
    char *peer = (char *) zmalloc (request->parts->envelope * 2 * 256 + 1);
    assert (peer);
    for (size_t index = 0, at = 0; index < request->parts->envelope; index++) {
        zmq_msg_t *part = &request->parts->part [index];
        const byte *data = (const byte *) zmq_msg_data (part);
        for (size_t offset = 0; offset < zmq_msg_size (part) && offset < 255; offset++, at += 2)
            snprintf (peer + at, 3, "%02x", data [offset]);
        if (index + 1 < request->parts->envelope)
            peer [at++] = '.';
    }
    s_snapshot_wait_t *older = (s_snapshot_wait_t *) zhashx_lookup (self->snapshot_waiting, peer);
    if (!older && zlistx_size (self->snapshot_queue) >= S_SNAPSHOT_WAITING_MAX) {
        free (peer);
        s_request_error (self, request, DSH_E_OVERLOADED,
                         "too many SNAPSHOT requests are waiting their turn; ask again later");
        return;
    }
    zchunk_t *id = NULL;
    if (request->id) {
        msgpack_sbuffer sbuf;
        msgpack_sbuffer_init (&sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
        msgpack_pack_object (&pk, *request->id);
        id = zchunk_new (sbuf.data, sbuf.size);
        msgpack_sbuffer_destroy (&sbuf);
    }
    if (older) {
        //  The older request is answered now, and this one waits in its place
        zmsg_t *envelope = older->envelope;
        older->envelope = s_route_zmsg (request->parts);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_packer_map_begin (&packer);
        if (older->id) {
            dsh_pack_cstr (&packer.pk, "id");
            dsh_packer_raw (&packer, zchunk_data (older->id), zchunk_size (older->id));
        }
        dsh_packer_kv_str (&packer, "code", DSH_E_OVERLOADED);
        dsh_packer_kv_str (&packer, "message", "a newer SNAPSHOT request from this peer took this one's turn");
        dsh_packer_map_end (&packer);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        s_send_front (self, &envelope, DSH_ERROR, &body);
        zchunk_destroy (&older->id);
        older->id = id;
        free (peer);
    }
    else {
        s_snapshot_wait_t *wait = (s_snapshot_wait_t *) zmalloc (sizeof (s_snapshot_wait_t));
        assert (wait);
        wait->envelope = s_route_zmsg (request->parts);
        wait->id = id;
        wait->peer = peer;
        zlistx_add_end (self->snapshot_queue, wait);
        zhashx_insert (self->snapshot_waiting, peer, wait);
        if (zlistx_size (self->snapshot_queue) > 1 || self->snapshot_budget <= 0)
            self->snapshots_queued++;
    }
    s_snapshot_serve (self);
}

static void
s_handle_get (self_t *self, s_request_t *request)
{
    char *name = dsh_doc_strdup (request->doc, dsh_map_get (request->root, "name"));
    zchunk_t *entry = name? dsh_catalog_tool (self->catalog, name): NULL;
    if (entry) {
        dsh_packer_t packer;
        s_reply_begin (&packer, request);
        dsh_pack_cstr (&packer.pk, "tool");
        dsh_packer_raw (&packer, zchunk_data (entry), zchunk_size (entry));
        dsh_pack_cstr (&packer.pk, "providers");
        dsh_catalog_pack_providers (self->catalog, name, &packer.pk);
        s_reply_packed (self, request, DSH_TOOL, &packer);
    }
    else {
        char message [DSH_NAME_MAX + 64];
        if (name && dsh_proto_valid_name (name, strlen (name)))
            snprintf (message, sizeof (message), "unknown tool \"%s\"", name);
        else
            snprintf (message, sizeof (message), "field \"name\" must be a valid tool name");
        s_request_error (self, request, name? DSH_E_UNKNOWN_TOOL: DSH_E_BAD_REQUEST, message);
    }
}

//  One pin as PINS shows it: {name, state, digest?, offeredDigest?,
//  reason?, component?, key?, firstMs?, acceptedBy?, acceptedMs?,
//  rejected?, registered}; full adds definition, and offered and diff when
//  the tool is quarantined.
static void
s_pack_pin (self_t *self, dsh_packer_t *packer, const char *name, bool full)
{
    const dsh_pin_t *pin = dsh_pins_lookup (self->pins, name);
    const char *offered = NULL, *pinned = NULL;
    const char *reason = dsh_catalog_quarantine (self->catalog, name, &offered, &pinned);
    zchunk_t *entry = dsh_catalog_tool (self->catalog, name);
    dsh_packer_map_begin (packer);
    dsh_packer_kv_str (packer, "name", name);
    dsh_packer_kv_str (packer, "state", reason? "quarantined": pin && *pin->digest? "pinned": "unpinned");
    if (pin && *pin->digest)
        dsh_packer_kv_str (packer, "digest", pin->digest);
    if (reason) {
        dsh_packer_kv_str (packer, "offeredDigest", offered);
        dsh_packer_kv_str (packer, "reason", reason);
    }
    if (pin && *pin->digest) {
        dsh_packer_kv_str (packer, "component", pin->component);
        if (*pin->key)
            dsh_packer_kv_str (packer, "key", pin->key);
        dsh_pack_cstr (&packer->pk, "firstMs");
        msgpack_pack_int64 (&packer->pk, pin->first_ms);
    }
    if (pin && *pin->accepted_by) {
        dsh_packer_kv_str (packer, "acceptedBy", pin->accepted_by);
        dsh_pack_cstr (&packer->pk, "acceptedMs");
        msgpack_pack_int64 (&packer->pk, pin->accepted_ms);
    }
    if (pin && *pin->rejected)
        dsh_packer_kv_str (packer, "rejected", pin->rejected);
    dsh_pack_cstr (&packer->pk, "registered");
    if (entry)
        msgpack_pack_true (&packer->pk);
    else
        msgpack_pack_false (&packer->pk);
    if (full) {
        json_t *definition = pin && *pin->digest? json_loads (pin->definition, JSON_DECODE_ANY, NULL): NULL;
        if (definition) {
            dsh_pack_cstr (&packer->pk, "definition");
            if (dsh_json_to_msgpack (&packer->pk, definition))
                msgpack_pack_nil (&packer->pk);
        }
        char error [64];
        dsh_doc_t *doc = reason && entry? dsh_doc_new (zchunk_data (entry), zchunk_size (entry), error, sizeof (error)):
                         NULL;
        json_t *offered_json = doc? dsh_pins_definition_json (dsh_doc_root (doc)): NULL;
        if (offered_json) {
            dsh_pack_cstr (&packer->pk, "offered");
            if (dsh_json_to_msgpack (&packer->pk, offered_json))
                msgpack_pack_nil (&packer->pk);
            char *diff = dsh_pins_diff (definition, offered_json, 65536);
            dsh_packer_kv_str (packer, "diff", diff);
            free (diff);
        }
        json_decref (offered_json);
        json_decref (definition);
        dsh_doc_destroy (&doc);
    }
    dsh_packer_map_end (packer);
}

//  PINS {id?, op?, name?, digest?}: the pinned definitions and the
//  quarantined tools, and an admin's decisions on them (PROTOCOL.md,
//  "Pins"). op is list (the default), show, accept, reject or forget.
static void
s_handle_pins (self_t *self, s_request_t *request)
{
    const msgpack_object *op = dsh_map_get (request->root, "op");
    const msgpack_object *digest_obj = dsh_map_get (request->root, "digest");
    const char *verbs [] = { "list", "show", "accept", "reject", "forget" };
    const char *verb = op? NULL: "list";
    for (size_t index = 0; op && index < sizeof (verbs) / sizeof (verbs [0]); index++)
        if (dsh_str_eq (op, verbs [index]))
            verb = verbs [index];
    //  In the request's document, freed with it
    const char *name = dsh_doc_strdup (request->doc, dsh_map_get (request->root, "name"));
    const char *digest = dsh_doc_strdup (request->doc, digest_obj);
    char message [DSH_NAME_MAX * 2 + 256] = "";
    if (!verb)
        snprintf (message, sizeof (message), "PINS op must be list, show, accept, reject or forget");
    else
    if (!streq (verb, "list") && !(name && dsh_proto_valid_name (name, strlen (name))))
        snprintf (message, sizeof (message), "PINS %s needs \"name\": a valid tool name", verb);
    else
    if (digest_obj && (!digest || strlen (digest) != DSH_DIGEST_SIZE))
        snprintf (message, sizeof (message), "PINS \"digest\" must be a definition digest (64 hex digits)");
    else
    if (!self->pins && !streq (verb, "list"))
        snprintf (message, sizeof (message), "pins are off on this broker (pins = off): nothing is pinned");
    if (*message) {
        self->bad_messages++;
        s_request_error (self, request, DSH_E_BAD_REQUEST, message);
        return;
    }
    char caller [128];
    s_caller_id (request, caller, sizeof (caller));
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    const char *offered = NULL, *pinned = NULL;
    const char *reason = self->pins && name? dsh_catalog_quarantine (self->catalog, name, &offered, &pinned): NULL;
    zchunk_t *entry = name? dsh_catalog_tool (self->catalog, name): NULL;
    const char *kind = NULL;
    char current [DSH_DIGEST_SIZE + 1] = "";
    if (entry) {
        char error [64];
        dsh_doc_t *doc = dsh_doc_new (zchunk_data (entry), zchunk_size (entry), error, sizeof (error));
        if (doc && dsh_digest_definition (dsh_doc_root (doc), current))
            *current = 0;
        dsh_doc_destroy (&doc);
    }
    if (streq (verb, "show") && !dsh_pins_lookup (self->pins, name) && !reason)
        snprintf (message, sizeof (message), "no pin and no quarantined tool named \"%s\"", name);
    else
    if (streq (verb, "accept")) {
        char error [64];
        dsh_doc_t *doc = entry? dsh_doc_new (zchunk_data (entry), zchunk_size (entry), error, sizeof (error)): NULL;
        const char *owner = dsh_catalog_owner (self->catalog, name);
        if (!doc)
            snprintf (message, sizeof (message), "tool \"%s\" is not registered: there is no definition to accept",
                      name);
        else
        if (digest && !streq (digest, current))
            snprintf (message, sizeof (message), "the offered definition of \"%s\" is now %.12s, not %.12s: "
                      "show it again before accepting it", name, current, digest);
        else
        if (dsh_pins_accept (self->pins, name, dsh_doc_root (doc), owner, s_component_key (self, owner), caller,
                             zclock_mono ()))
            snprintf (message, sizeof (message), "the definition of \"%s\" cannot be pinned", name);
        else
            kind = DSH_EV_ACCEPTED;
        dsh_doc_destroy (&doc);
    }
    else
    if (streq (verb, "reject")) {
        if (!reason)
            snprintf (message, sizeof (message), "tool \"%s\" is not quarantined: there is nothing to reject", name);
        else
        if (digest && !streq (digest, offered))
            snprintf (message, sizeof (message), "the offered definition of \"%s\" is now %.12s, not %.12s: "
                      "show it again before rejecting it", name, offered, digest);
        else {
            snprintf (current, sizeof (current), "%s", offered);
            dsh_pins_reject (self->pins, name, current, caller, zclock_mono ());
            kind = DSH_EV_REJECTED;
        }
    }
    else
    if (streq (verb, "forget")) {
        if (dsh_pins_forget (self->pins, name, zclock_mono ()))
            snprintf (message, sizeof (message), "no pin for \"%s\": there is nothing to forget", name);
        else
            kind = DSH_EV_FORGOTTEN;
    }
    if (*message) {
        s_request_error (self, request, DSH_E_BAD_REQUEST, message);
        zlistx_destroy (&events);
        return;
    }
    if (kind) {
        //  The decision, then what it changes (a release is a tool.updated)
        dsh_event_t *event = dsh_catalog_event (self->catalog, kind, name);
        if (*current && !streq (kind, DSH_EV_FORGOTTEN))
            event->digest = strdup (current);
        event->by = strdup (caller);
        zlistx_add_end (events, event);
        dsh_catalog_rejudge (self->catalog, name, events);
        dsh_log_info ("dsh-broker: pins: %s %s tool \"%s\" (%.12s)", caller,
                      streq (kind, DSH_EV_ACCEPTED)? "accepted": streq (kind, DSH_EV_REJECTED)? "rejected": "forgot",
                      name, *current? current: "-");
    }
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    dsh_packer_kv_str (&packer, "policy", dsh_pins_policy_name (self->pins? dsh_pins_policy (self->pins): DSH_PINS_OFF));
    if (streq (verb, "list")) {
        dsh_pack_cstr (&packer.pk, "pins");
        zlistx_t *names = self->pins? dsh_pins_names (self->pins): zlistx_new ();
        zlistx_t *quarantined = dsh_catalog_quarantined (self->catalog);
        for (const char *other = (const char *) zlistx_first (quarantined); other;
             other = (const char *) zlistx_next (quarantined))
            if (!self->pins || !dsh_pins_lookup (self->pins, other))
                zlistx_add_end (names, strdup (other));
        zlistx_set_destructor (names, (zlistx_destructor_fn *) zstr_free);
        zlistx_set_comparator (names, (zlistx_comparator_fn *) strcmp);
        zlistx_sort (names);
        msgpack_pack_array (&packer.pk, (uint32_t) zlistx_size (names));
        for (const char *each = (const char *) zlistx_first (names); each; each = (const char *) zlistx_next (names))
            s_pack_pin (self, &packer, each, false);
        zlistx_destroy (&quarantined);
        zlistx_destroy (&names);
    }
    else {
        dsh_pack_cstr (&packer.pk, "ok");
        msgpack_pack_true (&packer.pk);
        if (dsh_pins_lookup (self->pins, name) || dsh_catalog_quarantine (self->catalog, name, NULL, NULL)) {
            dsh_pack_cstr (&packer.pk, "pin");
            s_pack_pin (self, &packer, name, true);
        }
    }
    s_reply_packed (self, request, DSH_PINS, &packer);
    s_publish (self, events);
    zlistx_destroy (&events);
}

//  The statistics (PROTOCOL.md, "STATS"): the table's, and what the
//  catalog and the in-flight table know now.
static void
s_handle_stats (self_t *self, s_request_t *request)
{
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    msgpack_packer *pk = &packer.pk;
    dsh_packer_kv_str (&packer, "broker", self->broker_id);
    dsh_pack_cstr (pk, "epoch");
    msgpack_pack_uint64 (pk, self->epoch);
    dsh_pack_cstr (pk, "uptimeMs");
    msgpack_pack_uint64 (pk, (uint64_t) (zclock_time () - self->started_ms));
    dsh_pack_cstr (pk, "inFlight");
    msgpack_pack_uint64 (pk, dsh_inflight_size (self->inflight));
    //  What a component's heartbeatAgeMs is read against
    s_pack_liveness (self, pk);
    dsh_pack_cstr (pk, "audit");
    if (dsh_audit_records (self->audit)) {
        dsh_audit_counts_t counts;
        dsh_audit_counts (self->audit, &counts);
        dsh_packer_map_begin (&packer);
        dsh_packer_kv_str (&packer, "name", self->name);
        dsh_packer_kv_str (&packer, "store", counts.store_kind);
        dsh_pack_cstr (pk, "healthy");
        counts.healthy? msgpack_pack_true (pk): msgpack_pack_false (pk);
        const char *names [] = { "records", "dropped", "refused", "queueBytes", "batches", "writeUsTotal", "writeUsMax" };
        uint64_t values [] = { counts.records, counts.dropped, counts.refused, counts.queue_bytes, counts.batches,
                               counts.write_us_total, counts.write_us_max };
        for (size_t index = 0; index < sizeof (values) / sizeof (values [0]); index++) {
            dsh_pack_cstr (pk, names [index]);
            msgpack_pack_uint64 (pk, values [index]);
        }
        dsh_packer_map_end (&packer);
    }
    else
        msgpack_pack_nil (pk);
    zlistx_t *tools = dsh_catalog_tool_names (self->catalog);
    dsh_stats_pack (self->stats, &packer, tools);
    zlistx_destroy (&tools);
    zlistx_t *ids = dsh_catalog_component_ids (self->catalog);
    dsh_pack_cstr (pk, "components");
    msgpack_pack_array (pk, self->stats? (uint32_t) zlistx_size (ids): 0);
    int64_t now_ms = zclock_mono ();
    for (const char *id = zlistx_first (ids); id && self->stats; id = zlistx_next (ids)) {
        size_t outstanding = 0;
        int64_t last_seen_ms = now_ms;
        dsh_catalog_component_load (self->catalog, id, &outstanding, &last_seen_ms);
        dsh_packer_map_begin (&packer);
        dsh_packer_kv_str (&packer, "id", id);
        dsh_pack_cstr (pk, "served");
        msgpack_pack_uint64 (pk, dsh_stats_served_count (self->stats, id));
        dsh_pack_cstr (pk, "inFlight");
        msgpack_pack_uint64 (pk, outstanding);
        dsh_pack_cstr (pk, "heartbeatAgeMs");
        msgpack_pack_uint64 (pk, (uint64_t) (now_ms > last_seen_ms? now_ms - last_seen_ms: 0));
        dsh_packer_map_end (&packer);
    }
    zlistx_destroy (&ids);
    s_reply_packed (self, request, DSH_STATS, &packer);
}

//  dsh_stats' view of the catalog: who provides a tool now.
static size_t
s_tool_replicas (void *arg, const char *tool)
{
    return dsh_catalog_replicas (((self_t *) arg)->catalog, tool);
}

typedef void (s_front_fn) (self_t *self, s_request_t *request);

//  The FRONT commands, and who handles each.
static const struct {
    const char *command;
    s_front_fn *handler;
} s_front_commands [] = {
    { DSH_CALL, s_handle_call },
    { DSH_CANCEL, s_handle_cancel },
    { DSH_HELLO, s_handle_hello },
    { DSH_PING, s_handle_ping },
    { DSH_LIST, s_handle_list },
    { DSH_GET, s_handle_get },
    { DSH_SNAPSHOT, s_handle_snapshot },
    { DSH_CHAIN, s_handle_chain },
    { DSH_STATS, s_handle_stats },
    { DSH_CONTROL, s_handle_control },
    { DSH_AUDIT, s_handle_audit },
    { DSH_PINS, s_handle_pins },
};

static s_front_fn *
s_front_lookup (const char *command)
{
    for (size_t index = 0; index < sizeof (s_front_commands) / sizeof (s_front_commands [0]); index++)
        if (streq (command, s_front_commands [index].command))
            return s_front_commands [index].handler;
    return NULL;
}

//  Refuses a request that could not be read: ERROR along its route, or,
//  with no delimiter, to the peer's own identity, the one route we trust.
static void
s_front_refuse (self_t *self, dsh_sock_msg_t *parts, const char *message)
{
    self->bad_messages++;
    zmsg_t *envelope = s_route_zmsg (parts);
    s_reply_error (self, &envelope, NULL, DSH_E_BAD_REQUEST, message);
}

//  A body the decoder refused (a repeated key, say) is still answered by
//  its id where it names one once: a CALL by a RESULT under its callId, a
//  query by an ERROR under its id, so that no sender waits out a deadline.
static void
s_front_refuse_body (self_t *self, s_request_t *request, const char *message)
{
    bool is_call = streq (request->parts->command, DSH_CALL);
    char id [DSH_CALL_ID_MAX + 1];
    if (!dsh_proto_refused_str (zmq_msg_data (request->body), zmq_msg_size (request->body),
                                is_call? "callId": "id", id, sizeof id)) {
        s_front_refuse (self, request->parts, message);
        return;
    }
    self->bad_messages++;
    if (is_call) {
        dsh_stats_refused (self->stats, DSH_E_BAD_REQUEST);
        s_refuse_call (self, request, id, "", NULL, DSH_E_BAD_REQUEST, message);
        return;
    }
    msgpack_object id_object = { .type = MSGPACK_OBJECT_STR };
    id_object.via.str.ptr = id;
    id_object.via.str.size = (uint32_t) strlen (id);
    request->id = &id_object;
    s_request_error (self, request, DSH_E_BAD_REQUEST, message);
    request->id = NULL;
}

static void
s_front_request (self_t *self, dsh_sock_msg_t *parts)
{
    char error [300];
    size_t bodies = parts->count - parts->body;
    if (bodies != 1) {
        snprintf (error, sizeof (error), "%s takes one body frame, not %zu", parts->command, bodies);
        s_front_refuse (self, parts, error);
        return;
    }
    if (zmq_msg_size (&parts->part [parts->body]) > (size_t) self->max_message_bytes) {
        snprintf (error, sizeof (error), "a %s body of %zu bytes is over the %d-byte limit", parts->command,
                  zmq_msg_size (&parts->part [parts->body]), self->max_message_bytes);
        s_front_refuse (self, parts, error);
        return;
    }
    s_request_t request = { parts, &parts->part [parts->body], NULL, NULL, NULL, { NULL, NULL, NULL, NULL, NULL, NULL } };
    char reason [256];
    request.doc = dsh_doc_new (zmq_msg_data (request.body), zmq_msg_size (request.body), reason, sizeof (reason));
    if (!request.doc || dsh_doc_root (request.doc)->type != MSGPACK_OBJECT_MAP) {
        snprintf (error, sizeof (error), "malformed %s body: %s", parts->command,
                  request.doc? "the body is not a map": reason);
        if (request.doc)
            s_front_refuse (self, parts, error);
        else
            s_front_refuse_body (self, &request, error);
        dsh_doc_destroy (&request.doc);
        return;
    }
    request.root = dsh_doc_root (request.doc);
    request.id = dsh_map_get (request.root, "id");
    //  Off a frame that came over the wire: libzmq 4.3.4 leaves the
    //  routing id frame a ROUTER makes without metadata when it was polled
    if (self->curve)
        dsh_identity_read (&request.peer, &parts->part [parts->count - 1]);
    s_front_fn *handler = s_front_lookup (parts->command);
    char forbidden [256];
    if (handler && !streq (parts->command, DSH_CALL) && !streq (parts->command, DSH_CANCEL)
    &&  s_front_forbidden (self, &request, parts->command, forbidden, sizeof (forbidden)))
        //  CALL and CANCEL answer with a RESULT by callId, in their handlers
        s_request_error (self, &request, DSH_E_FORBIDDEN, forbidden + 7);
    else
    if (handler)
        handler (self, &request);
    else {
        self->bad_messages++;
        snprintf (error, sizeof (error), "unknown command \"%s\"", parts->command);
        s_request_error (self, &request, DSH_E_BAD_REQUEST, error);
    }
    dsh_doc_destroy (&request.doc);
}

static int
s_front_one (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    dsh_sock_msg_t parts;
    char error [256];
    if (dsh_sock_recv_msg (reader, &parts, error, sizeof (error)) == 0)
        s_front_request (self, &parts);
    else
    if (*error && parts.count)
        s_front_refuse (self, &parts, error);
    else
    if (*error)
        self->bad_messages++;
    dsh_sock_msg_close (&parts);
    return 0;
}

static int
s_front_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_front_one, arg);
}

//  ---------------------------------------------------------------------
//  Work socket: results and hellos from components

//  The record of the call a RESULT or PROGRESS from component names, if
//  the call went to that component; NULL (and a warning) otherwise.
static dsh_record_t *
s_work_record (self_t *self, const char *component, zmq_msg_t *token_part, const char *command)
{
    uint64_t token;
    if (dsh_inflight_token_decode (zmq_msg_data (token_part), zmq_msg_size (token_part), &token)) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: malformed %s from %s: want token and body frames", command, component);
        return NULL;
    }
    dsh_record_t *record = dsh_inflight_lookup (self->inflight, token);
    if (!record || record->where != DSH_AT_COMPONENT) {
        if (streq (command, DSH_RESULT))
            self->late_results++;
        return NULL;
    }
    if (!streq (record->component, component)) {
        //  Only the component a call went to may speak for it
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: %s sent a %s for a call it was not given", component, command);
        return NULL;
    }
    return record;
}

static void
s_handle_result (self_t *self, const char *component, zmq_msg_t *token_part, zmq_msg_t *body)
{
    dsh_record_t *record = s_work_record (self, component, token_part, DSH_RESULT);
    if (!record)
        return;
    dsh_catalog_outstanding (self->catalog, record->component, -1);
    dsh_stats_served (self->stats, component);
    s_refill (self, component);
    char error [DSH_CALL_ID_MAX + 64];
    dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
    if (doc && dsh_proto_check_result (dsh_doc_root (doc), error, sizeof (error)))
        dsh_doc_destroy (&doc);
    if (doc && !dsh_str_eq (dsh_map_get (dsh_doc_root (doc), "callId"), record->call_id)) {
        snprintf (error, sizeof (error), "its callId is not the call's \"%s\"", record->call_id);
        dsh_doc_destroy (&doc);
    }
    if (doc) {
        //  Read here, where the body is decoded anyway; a stage the result
        //  goes up through may change it (dsh_chain then forgets it)
        if (self->stats)
            record->outcome = dsh_stats_outcome_of (dsh_doc_root (doc));
        dsh_doc_destroy (&doc);
        zmq_msg_t result;
        zmq_msg_init (&result);
        zmq_msg_move (&result, body);
        s_answer (self, &record, &result);
    }
    else {
        self->bad_messages++;
        char text [DSH_ID_MAX + DSH_CALL_ID_MAX + 128];
        snprintf (text, sizeof (text), "Error: component \"%s\" sent a malformed result: %s", component, error);
        dsh_log_warning ("dsh-broker: %s", text + 7);
        s_answer_error (self, &record, DSH_E_BAD_RESULT, text);
    }
}

//  A component reports progress of a call: checked like a RESULT (its own
//  call's callId, a number for progress), then on to the caller, untouched.
static void
s_handle_progress (self_t *self, const char *component, zmq_msg_t *token_part, zmq_msg_t *body)
{
    dsh_record_t *record = s_work_record (self, component, token_part, DSH_PROGRESS);
    if (!record)
        return;
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
    const msgpack_object *progress = doc? dsh_map_get (dsh_doc_root (doc), "progress"): NULL;
    bool valid = doc && dsh_str_eq (dsh_map_get (dsh_doc_root (doc), "callId"), record->call_id)
              && progress && (progress->type == MSGPACK_OBJECT_POSITIVE_INTEGER
                              || progress->type == MSGPACK_OBJECT_FLOAT32 || progress->type == MSGPACK_OBJECT_FLOAT64);
    dsh_doc_destroy (&doc);
    if (!valid) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: %s sent a PROGRESS that is not its call's {callId, progress: number}", component);
        return;
    }
    zmq_msg_t report;
    zmq_msg_init (&report);
    zmq_msg_move (&report, body);
    s_send_route (self, record->route, record->route_size, false, DSH_PROGRESS, &report);
}

//  True if the connection that holds a route still counts as its id's
//  owner: its connection is open (a closed one has no route any more, and
//  libzmq's heartbeats close a silent one within the liveness window), and
//  its component is in the catalog, i.e. has not expired (was heard from
//  within the window) nor withdrawn; before its first ANNOUNCE, if it
//  claimed the id within the window. Not the last heartbeat's age itself:
//  on a loaded host one late heartbeat would hand a live owner's id to a
//  duplicate, where expiry, a tick later, allows for it.
static bool
s_holder_live (self_t *self, dsh_route_t *holder)
{
    uint64_t generation;
    if (dsh_catalog_generation (self->catalog, holder->component, &generation) == 0)
        return true;
    int64_t window_ms = (int64_t) self->heartbeat_ms * self->liveness;
    return zclock_mono () - holder->claimed_mono_ms <= window_ms;
}

//  True if a claim at generation comes from another process than the one
//  that owned the id last (its connection may have closed already): the
//  calls that one was given will not be answered. Its generation as its
//  HELLO stated it, not the catalog's: an ANNOUNCE from the new process may
//  have overtaken its HELLO.
static bool
s_new_incarnation (self_t *self, const char *component, uint64_t generation)
{
    uint64_t owned_at = dsh_routes_owned_at (self->routes, component);
    if (!owned_at && dsh_catalog_generation (self->catalog, component, &owned_at))
        return false;
    return generation && generation != owned_at;
}

//  True if a claim comes from whoever holds the id: under CURVE the same
//  key (a restart elsewhere with the key takes its id over); without it
//  the same incarnation (the generation its HELLOs stated), i.e. a
//  connection made again. Not the catalog's generation: an ANNOUNCE on the
//  announce channel is anyone's.
static bool
s_same_owner (self_t *self, dsh_route_t *holder, dsh_identity_t *peer, uint64_t generation)
{
    if (self->curve)
        return holder->key && peer->key && streq (holder->key, peer->key);
    return generation && generation == holder->generation;
}

//  Tells a connection that claimed a held id that it may not have it: a
//  REFUSED on WORK, a log line and a component.refused event. It waits in
//  line for the id, which it gets if the holder's connection closes.
static void
s_refuse_claim (self_t *self, const char *routing_id, int fd, dsh_route_t *holder, uint64_t generation,
                const char *key)
{
    time_t since = (time_t) (holder->claimed_ms / 1000);
    struct tm utc;
    char stamp [32];
    strftime (stamp, sizeof (stamp), "%Y-%m-%dT%H:%M:%SZ", gmtime_r (&since, &utc));
    char reason [DSH_ID_MAX + 256];
    if (self->curve)
        snprintf (reason, sizeof (reason), "component id %s is held by a live component (key %.8s...) since %s; "
                  "choose another id", holder->component, holder->key? holder->key: "?", stamp);
    else
        snprintf (reason, sizeof (reason), "component id %s is held by a live component (generation %" PRIu64
                  ") since %s; choose another id", holder->component, holder->generation, stamp);
    dsh_log_warning ("dsh-broker: a WORK connection at generation %" PRIu64 " refused: %s", generation, reason);
    dsh_routes_wait (self->routes, holder->component, routing_id, fd, generation, key);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "component", holder->component);
    dsh_packer_kv_str (&packer, "reason", reason);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    s_send_link (self, routing_id, DSH_REFUSED, NULL, &body);
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    dsh_catalog_refuse_id (self->catalog, holder->component, reason, events);
    s_publish (self, events);
    zlistx_destroy (&events);
}

//  The id a WORK message from a connection that holds none claims, and the
//  generation it claims it at: a HELLO's component and generation, else
//  (a component whose routing id is its id, speaking before its HELLO)
//  the routing id. Returns 0, or -1 if it names no valid id.
static int
s_claimed_id (dsh_sock_msg_t *parts, const char *routing_id, char *component, uint64_t *generation)
{
    *generation = 0;
    *component = 0;
    if (streq (parts->command, DSH_HELLO) && parts->body < parts->count) {
        zmq_msg_t *body = &parts->part [parts->body];
        char error [128];
        dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
        const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
        const msgpack_object *id = root? dsh_map_get (root, "component"): NULL;
        const msgpack_object *number = root? dsh_map_get (root, "generation"): NULL;
        if (id && id->type == MSGPACK_OBJECT_STR && dsh_proto_valid_id (id->via.str.ptr, id->via.str.size))
            snprintf (component, DSH_ID_MAX + 1, "%.*s", (int) id->via.str.size, id->via.str.ptr);
        if (number && number->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            *generation = number->via.u64;
        dsh_doc_destroy (&doc);
    }
    if (!*component && dsh_proto_valid_id (routing_id, strlen (routing_id)))
        snprintf (component, DSH_ID_MAX + 1, "%s", routing_id);
    return *component? 0: -1;
}

//  Who a WORK message speaks for (component, DSH_ID_MAX + 1 bytes): the id
//  its connection holds, or the one it claims if it may have it. An id is
//  owned (PROTOCOL.md, "Component ids are owned"): a claim on an id held by
//  a live component is refused unless it comes from the holder's key
//  (CURVE) or incarnation; a closed or silent holder loses it to the claim.
//  Under CURVE a message is heard only if its key may serve the id.
//  Returns 0 if the message may be heard, -1 if it is dropped.
static int
s_work_claim (self_t *self, const char *routing_id, dsh_sock_msg_t *parts, char *component)
{
    zmq_msg_t *part = &parts->part [parts->count - 1];
    dsh_identity_t peer = { NULL, NULL, NULL, NULL, NULL, NULL };
    if (self->curve)
        dsh_identity_read (&peer, part);
    int fd = zmq_msg_get (part, ZMQ_SRCFD);
    dsh_route_t *route = dsh_routes_link (self->routes, routing_id);
    if (route && route->fd != fd) {
        //  The same routing id on a new connection: the old one's
        //  disconnection first, which may have taken the route
        s_work_monitor_drain (self);
        route = dsh_routes_link (self->routes, routing_id);
        if (route)
            dsh_routes_set_fd (self->routes, route, fd);
    }
    uint64_t generation = 0;
    if (route) {
        snprintf (component, DSH_ID_MAX + 1, "%s", route->component);
        //  The owner's HELLO states its generation when it changes
        char named [DSH_ID_MAX + 1];
        if (streq (parts->command, DSH_HELLO) && s_claimed_id (parts, routing_id, named, &generation) == 0
        &&  generation && streq (named, component))
            dsh_routes_set_generation (self->routes, route, generation);
    }
    else
    if (s_claimed_id (parts, routing_id, component, &generation)) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: a WORK connection whose routing id is not a component id sent %s "
                         "before a HELLO naming its component: dropped", parts->command);
        return -1;
    }
    if (self->curve && !dsh_identity_serves (&peer, component)) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: key %.8s... (role %s) may not serve component %s: its WORK message is dropped",
                         peer.key? peer.key: "?", peer.role? peer.role: "none", component);
        return -1;
    }
    if (route)
        return 0;
    //  A closed holder is no holder: its disconnection may not be read yet
    s_work_monitor_drain (self);
    dsh_route_t *holder = dsh_routes_lookup (self->routes, component);
    if (holder && s_holder_live (self, holder) && !s_same_owner (self, holder, &peer, generation)) {
        //  A connection is told once, at its first HELLO; anything else
        //  from it is not a claim worth an event each time
        if (streq (parts->command, DSH_HELLO) && !dsh_routes_waits (self->routes, component, routing_id))
            s_refuse_claim (self, routing_id, fd, holder, generation, peer.key);
        else
        if (!streq (parts->command, DSH_HELLO))
            dsh_log_warning ("dsh-broker: %s on a WORK connection that does not own component id %s: dropped",
                             parts->command, component);
        return -1;
    }
    bool restarted = s_new_incarnation (self, component, generation);
    if (holder) {
        //  Its connection is open: it waits in line, and is told why
        const char *why = !s_holder_live (self, holder)? "this connection's component had expired or withdrawn":
                          self->curve? "it has the same key": "it is of the same generation";
        dsh_log_info ("dsh-broker: component id %s taken over by a new WORK connection: %s", component, why);
        char *displaced = strdup (holder->routing_id);
        dsh_routes_wait (self->routes, component, displaced, holder->fd, holder->generation, holder->key);
        char reason [256];
        snprintf (reason, sizeof (reason), "component id taken over by a new connection (%s); this one gets it "
                  "back if that one goes", why);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_packer_map_begin (&packer);
        dsh_packer_kv_str (&packer, "component", component);
        dsh_packer_kv_str (&packer, "reason", reason);
        dsh_packer_map_end (&packer);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        s_send_link (self, displaced, DSH_REFUSED, NULL, &body);
        zstr_free (&displaced);
    }
    dsh_routes_bind (self->routes, component, routing_id, fd, generation, peer.key, zclock_time (), zclock_mono ());
    //  The id's presence is its WORK owner's from now on
    if (peer.key)
        zhashx_update (self->presence_keys, component, (void *) peer.key);
    //  Another incarnation has the id now: whatever the old one was given
    //  will not be answered
    if (restarted)
        s_fail_component_calls (self, component, "restarted");
    return 0;
}

//  Gives a component's id to the connection that waited longest for it, if
//  one did, and asks it to announce.
static void
s_promote (self_t *self, const char *component)
{
    uint64_t owned_at = dsh_routes_owned_at (self->routes, component);
    dsh_route_t *route = dsh_routes_promote (self->routes, component, zclock_time (), zclock_mono ());
    if (!route)
        return;
    dsh_log_info ("dsh-broker: component id %s goes to the WORK connection that waited longest for it", component);
    if (route->generation && owned_at && route->generation != owned_at)
        s_fail_component_calls (self, component, "restarted");
    dsh_catalog_seen (self->catalog, component, zclock_mono ());
    s_send_sync (self, component);
}

//  A WORK connection closed: the ids it held are free (to whoever waits
//  for them), and their components unreachable until a connection claims
//  them again.
static int
s_work_monitor_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    zframe_t *event = msg? zmsg_first (msg): NULL;
    if (event && zframe_size (event) == 6) {
        uint32_t fd;
        memcpy (&fd, zframe_data (event) + 2, 4);
        zlistx_t *gone = dsh_routes_closed (self->routes, (int) fd);
        for (const char *component = zlistx_first (gone); component; component = zlistx_next (gone)) {
            uint64_t generation;
            if (dsh_catalog_generation (self->catalog, component, &generation))
                zhashx_delete (self->presence_keys, component);
            dsh_catalog_unreachable (self->catalog, component, zclock_mono ());
            s_promote (self, component);
        }
        zlistx_destroy (&gone);
    }
    zmsg_destroy (&msg);
    return 0;
}

static void
s_work_message (self_t *self, dsh_sock_msg_t *parts)
{
    //  [routing id] "" DSH1 command (token body)
    size_t id_size = parts->envelope == 1? zmq_msg_size (&parts->part [0]): 0;
    if (parts->envelope != 1 || id_size == 0 || id_size > 255
    ||  memchr (zmq_msg_data (&parts->part [0]), 0, id_size)) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: malformed message on the work socket: the envelope is not one routing id "
                         "(a component sets its own, without zero bytes)");
        return;
    }
    char routing_id [256];
    memcpy (routing_id, zmq_msg_data (&parts->part [0]), id_size);
    routing_id [id_size] = 0;
    char component [DSH_ID_MAX + 1];
    if (s_work_claim (self, routing_id, parts, component))
        return;
    dsh_catalog_seen (self->catalog, component, zclock_mono ());
    const char *command = parts->command;
    bool reply = streq (command, DSH_RESULT) || streq (command, DSH_PROGRESS);
    if (reply && parts->count != parts->body + 2) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: malformed %s from %s: want token and body frames", command, component);
    }
    else
    if (streq (command, DSH_RESULT))
        s_handle_result (self, component, &parts->part [parts->body], &parts->part [parts->body + 1]);
    else
    if (streq (command, DSH_PROGRESS))
        s_handle_progress (self, component, &parts->part [parts->body], &parts->part [parts->body + 1]);
    else
    if (streq (command, DSH_HELLO))
        s_send_sync (self, component);
    else {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: unknown command \"%s\" from component %s", command, component);
    }
}

static int
s_work_one (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    dsh_sock_msg_t parts;
    char error [256];
    if (dsh_sock_recv_msg (reader, &parts, error, sizeof (error)) == 0)
        s_work_message (self, &parts);
    else
    if (*error) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: malformed message on the work socket: %s", error);
    }
    dsh_sock_msg_close (&parts);
    return 0;
}

static int
s_work_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_work_one, arg);
}

//  ---------------------------------------------------------------------
//  Announce socket: presence of components

//  Under CURVE, a component key whose certificate lists tool names may
//  announce only those: fills offered with the entries it may (pointing
//  into presence's document) and refusals with the others.
static void
s_offered_tools (self_t *self, dsh_identity_t *peer, dsh_presence_t *presence,
                 msgpack_object *offered, zlistx_t *refusals)
{
    const msgpack_object_array *tools = &presence->tools->via.array;
    *offered = *presence->tools;
    if (!self->curve || !peer->tools)
        return;
    offered->via.array.ptr = (msgpack_object *) zmalloc ((tools->size + 1) * sizeof (msgpack_object));
    offered->via.array.size = 0;
    for (uint32_t index = 0; index < tools->size; index++) {
        const msgpack_object *name = dsh_map_get (&tools->ptr [index], "name");
        char text [DSH_NAME_MAX + 1] = "";
        if (name && name->type == MSGPACK_OBJECT_STR && name->via.str.size <= DSH_NAME_MAX)
            snprintf (text, sizeof (text), "%.*s", (int) name->via.str.size, name->via.str.ptr);
        if (!*text || dsh_identity_offers (peer, text))
            offered->via.array.ptr [offered->via.array.size++] = tools->ptr [index];
        else {
            self->forbidden++;
            dsh_refusal_t *refusal = (dsh_refusal_t *) zmalloc (sizeof (dsh_refusal_t));
            assert (refusal);
            refusal->component = strdup (presence->component);
            refusal->name = strdup (text);
            refusal->reason = zsys_sprintf ("tool \"%s\": key %.8s... may not offer it (its certificate's "
                                            "tools are %s)", text, peer->key, peer->tools);
            zlistx_add_end (refusals, refusal);
        }
    }
}

static void
s_handle_announce (self_t *self, dsh_presence_t *presence, dsh_identity_t *peer)
{
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    zlistx_t *refusals = zlistx_new ();
    zlistx_set_destructor (refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
    msgpack_object offered;
    s_offered_tools (self, peer, presence, &offered, refusals);
    dsh_catalog_announce (self->catalog, presence->component, presence->generation,
                          &offered, zclock_mono (), events, refusals);
    if (offered.via.array.ptr != presence->tools->via.array.ptr)
        free (offered.via.array.ptr);
    dsh_catalog_set_concurrency (self->catalog, presence->component, (size_t) presence->concurrency);
    s_publish (self, events);
    for (dsh_refusal_t *refusal = zlistx_first (refusals); refusal; refusal = zlistx_next (refusals)) {
        dsh_log_warning ("dsh-broker: refused from component %s: %s", refusal->component, refusal->reason);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_packer_map_begin (&packer);
        if (refusal->name)
            dsh_packer_kv_str (&packer, "tool", refusal->name);
        dsh_packer_kv_str (&packer, "reason", refusal->reason);
        dsh_packer_map_end (&packer);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        s_send_work (self, refusal->component, DSH_REFUSED, NULL, &body);
    }
    zlistx_destroy (&refusals);
    zlistx_destroy (&events);
    //  Held only while the catalog holds the component, whose removal
    //  forgets it
    uint64_t generation;
    if (self->curve && peer->key && !zhashx_lookup (self->presence_keys, presence->component)
    &&  dsh_catalog_generation (self->catalog, presence->component, &generation) == 0)
        zhashx_insert (self->presence_keys, presence->component, (void *) peer->key);
}

//  One part of a set announced in parts, past the checks every ANNOUNCE
//  gets: held until the set is whole, then applied as one ANNOUNCE of the
//  whole set (its concurrency part 0's). Every part counts as a sign of
//  life, as an ANNOUNCE does.
static void
s_handle_announce_part (self_t *self, dsh_presence_t *presence, dsh_identity_t *peer)
{
    int64_t now = zclock_mono ();
    dsh_catalog_touch (self->catalog, presence->component, presence->generation, now);
    zchunk_t *set = NULL;
    uint64_t concurrency = 0;
    char reason [256];
    dsh_parts_status_t status = dsh_parts_add (self->parts, presence, peer->key, now, &set, &concurrency,
                                               reason, sizeof (reason));
    if (status == DSH_PARTS_FOREIGN) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: ANNOUNCE of component %s in parts: %s: dropped", presence->component, reason);
    }
    else
    if (status == DSH_PARTS_DROPPED)
        dsh_log_warning ("dsh-broker: ANNOUNCE of component %s in parts: %s", presence->component, reason);
    else
    if (status == DSH_PARTS_IGNORED && self->verbose)
        dsh_log_info ("dsh-broker: ANNOUNCE of component %s in parts: %s: ignored", presence->component, reason);
    else
    if (status == DSH_PARTS_WHOLE) {
        //  The broker's own encoding of the entries the parts' decode gave
        char error [256];
        dsh_doc_t *doc = dsh_doc_new (zchunk_data (set), zchunk_size (set), error, sizeof (error));
        if (doc) {
            dsh_presence_t whole = *presence;
            whole.tools = dsh_doc_root (doc);
            whole.concurrency = concurrency;
            whole.part = whole.parts = 0;
            s_handle_announce (self, &whole, peer);
        }
        else
            dsh_log_error ("dsh-broker: the ANNOUNCE of component %s in parts, joined, does not decode: %s",
                           presence->component, error);
        dsh_doc_destroy (&doc);
        zchunk_destroy (&set);
    }
}

//  True if a presence message is not the owner's: while a WORK connection
//  owns the id at a generation its HELLO stated, presence at any other
//  generation comes from another process (refused the id, or not heard on
//  WORK yet), and is dropped. The owner says HELLO with its new
//  generation when its tool set changes; an ANNOUNCE that overtakes that
//  HELLO is dropped, and the SYNC the HELLO brings repairs it.
//  Under CURVE, presence also follows the key (issue 22): while an id is
//  owned, by a WORK connection or by the key that first announced it, no
//  other key may announce, heartbeat or withdraw for it, whatever ids its
//  certificate's patterns cover; otherwise such a key could read the
//  owner's generation off SNAPSHOT and speak for it.
static bool
s_foreign_presence (self_t *self, dsh_presence_t *presence, const dsh_identity_t *peer, const char *command)
{
    dsh_route_t *route = dsh_routes_lookup (self->routes, presence->component);
    const char *owner = self->curve? route && route->key? route->key:
                        (const char *) zhashx_lookup (self->presence_keys, presence->component): NULL;
    if (owner && (!peer->key || !streq (owner, peer->key))) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: key %.8s... sent %s for component %s, whose id key %.8s... owns: dropped",
                         peer->key? peer->key: "?", command, presence->component, owner);
        return true;
    }
    if (!route || !route->generation || presence->generation == route->generation)
        return false;
    if (self->verbose && !streq (command, DSH_HEARTBEAT))
        dsh_log_info ("dsh-broker: %s of %s at generation %" PRIu64 " dropped: the id's owner is at generation %"
                      PRIu64, command, presence->component, presence->generation, route->generation);
    return true;
}

static int
s_announce_one (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
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
    if ((doc = dsh_proto_decode_body (body, error, sizeof (error)))
    &&  dsh_proto_decode_presence (doc, command, &presence, error, sizeof (error)) == 0
    &&  presence.parts > self->max_tools)
        snprintf (error, sizeof (error), "field \"parts\" (%" PRIu64 ") is over the broker's limit of %zu tools "
                  "a component may provide (max_tools)", presence.parts, self->max_tools);

    dsh_identity_t peer = { NULL, NULL, NULL, NULL, NULL, NULL };
    if (protocol)
        dsh_identity_read_frame (&peer, protocol);
    if (*error) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: malformed message on the announce socket: %s", error);
    }
    else
    if (self->curve && !dsh_identity_serves (&peer, presence.component)) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: key %.8s... (role %s) may not speak for component %s: its %s is dropped",
                         peer.key? peer.key: "?", peer.role? peer.role: "none", presence.component, command);
    }
    else
    if (s_foreign_presence (self, &presence, &peer, command)) {
        //  Another process's, under an id it does not own
    }
    else
    if (streq (command, DSH_ANNOUNCE) && presence.parts)
        s_handle_announce_part (self, &presence, &peer);
    else
    if (streq (command, DSH_ANNOUNCE)) {
        //  The whole set, at once: a set of this generation or an older
        //  one still in parts is behind it
        dsh_parts_forget (self->parts, presence.component, presence.generation);
        s_handle_announce (self, &presence, &peer);
    }
    else
    if (streq (command, DSH_HEARTBEAT)) {
        if (dsh_catalog_touch (self->catalog, presence.component, presence.generation, zclock_mono ()))
            s_send_sync (self, presence.component);
        else
            s_send_heartbeat (self, presence.component);
    }
    else {
        dsh_parts_forget (self->parts, presence.component, presence.generation);
        uint64_t generation;
        //  A WITHDRAW from an older incarnation must not remove a newer one
        //  (generations start from the clock, so they grow across restarts),
        //  nor one from another process under the id, unheard on WORK, the
        //  owner whose connection is open: only the owner's generation, or
        //  a newer one once no connection holds the id
        if (dsh_catalog_generation (self->catalog, presence.component, &generation) == 0
        &&  (presence.generation == generation
             || (presence.generation > generation && !s_route (self, presence.component))))
            s_remove_component (self, presence.component, "withdrawn");
        else
        if (self->verbose)
            dsh_log_info ("dsh-broker: WITHDRAW of %s at generation %" PRIu64 " ignored: not its owner's",
                          presence.component, presence.generation);
    }

    dsh_doc_destroy (&doc);
    zframe_destroy (&protocol);
    zframe_destroy (&body);
    zstr_free (&command);
    zmsg_destroy (&msg);
    return 0;
}

static int
s_announce_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_announce_one, arg);
}

//  ---------------------------------------------------------------------
//  Timers

static int
s_expire_components (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    //  What components said before now counts first: a broker that was
    //  busy (a storm of snapshots, a burst of calls) has their heartbeats
    //  still queued, and they are live. So the announce and work sockets
    //  are read to the end of what they hold (their high-water marks bound
    //  it), and a check that comes late, the loop having been held up,
    //  gives every component as much more time as it was late
    dsh_sock_drain (self->announce, self->queue_limit, s_announce_one, self);
    dsh_sock_drain (self->work, self->queue_limit, s_work_one, self);
    int64_t now = zclock_mono ();
    int64_t late = now - self->expired_at - self->heartbeat_ms;
    self->expired_at = now;
    int64_t window = (int64_t) self->heartbeat_ms * self->liveness + (late > 0? late: 0);
    zlistx_t *silent = dsh_catalog_silent (self->catalog, now, window);
    for (char *component = zlistx_first (silent); component; component = zlistx_next (silent)) {
        s_remove_component (self, component, "expired");
        //  A silent owner whose connection is open still holds the id:
        //  whoever waits for it takes it
        if (dsh_routes_lookup (self->routes, component))
            s_promote (self, component);
    }
    zlistx_destroy (&silent);
    //  A set in parts not whole within the window: its component sends
    //  every part again when a heartbeat brings it a SYNC
    zlistx_t *stale = dsh_parts_expire (self->parts, now, (int64_t) self->heartbeat_ms * self->liveness);
    for (char *component = zlistx_first (stale); component; component = zlistx_next (stale))
        dsh_log_warning ("dsh-broker: the ANNOUNCE of component %s in parts was not whole within %d ms: dropped",
                         component, self->heartbeat_ms * self->liveness);
    zlistx_destroy (&stale);
    //  Here, not on timers of their own: once a heartbeat is often enough
    //  to give back what a subscriber or a connection storm left free, and
    //  to log the count of a flood of bad messages that stopped
    dsh_heap_trim (self->heap);
    dsh_log_tick ();
    return 0;
}

//  The one deadline scan: a call past its deadline is answered TIMEOUT
//  wherever it is (and whoever holds it is told to let go); a call a stage
//  held past the stage's own limit is failed (or skipped) by the chain.
static int
s_expire_calls (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    dsh_chain_settle (self->chain);
    int64_t now = zclock_mono ();
    dsh_catalog_pace (self->catalog, now);
    zlistx_t *due = dsh_inflight_due (self->inflight, now);
    for (dsh_record_t *record = zlistx_first (due); record; record = zlistx_next (due)) {
        if (record->deadline_ms <= now) {
            char text [DSH_NAME_MAX + DSH_ID_MAX + 160];
            if (record->where == DSH_AT_CHAIN)
                snprintf (text, sizeof (text), "Error: the call to tool \"%s\" reached its deadline "
                          "while a middleware stage held it", record->tool);
            else
            if (record->where == DSH_AT_QUEUE && !dsh_catalog_reachable (self->catalog, record->component))
                snprintf (text, sizeof (text), "Error: the call to tool \"%s\" reached its deadline "
                          "waiting for component \"%s\" to connect again", record->tool, record->component);
            else
            if (record->where == DSH_AT_QUEUE)
                snprintf (text, sizeof (text), "Error: the call to tool \"%s\" reached its deadline "
                          "waiting for a busy component", record->tool);
            else
                snprintf (text, sizeof (text), "Error: tool \"%s\" did not answer before the call's deadline",
                          record->tool);
            s_release (self, record, "deadline");
            dsh_inflight_answer_error (self->inflight, &record, DSH_E_TIMEOUT, text);
        }
        else
        if (record->where == DSH_AT_CHAIN)
            dsh_chain_expire (self->chain, record);
    }
    zlistx_destroy (&due);
    //  Calls answered here freed slots in their components' windows, and
    //  windows grew with their components' pace: the held calls take the
    //  room now, not with the components' next results
    if (dsh_fairq_size (self->fairq)) {
        zlistx_t *busy = dsh_fairq_components (self->fairq);
        for (const char *component = zlistx_first (busy); component; component = zlistx_next (busy))
            s_refill (self, component);
        zlistx_destroy (&busy);
    }
    return 0;
}

//  ---------------------------------------------------------------------
//  Pipe

//  The broker stops: every call still open is answered now, so its caller
//  hears at once (not at its SDK's liveness window) and its record is
//  written. A call a component holds may still run there: TOOL_GONE, whose
//  outcome is unknown. The replies get a second to leave.
static void
s_answer_open_calls (self_t *self)
{
    if (!self->inflight || !dsh_inflight_size (self->inflight))
        return;
    dsh_chain_settle (self->chain);
    zlistx_t *open = dsh_inflight_due (self->inflight, INT64_MAX);
    for (dsh_record_t *record = zlistx_first (open); record; record = zlistx_next (open)) {
        char text [DSH_NAME_MAX + DSH_ID_MAX + 160];
        snprintf (text, sizeof (text), "Error: the broker stopped with the call to tool \"%s\" %s", record->tool,
                  record->where == DSH_AT_COMPONENT? "at its component (it may have run there)": "not yet sent");
        s_release (self, record, "cancelled");
        dsh_inflight_answer_error (self->inflight, &record, DSH_E_TOOL_GONE, text);
    }
    zlistx_destroy (&open);
    if (self->front)
        zsock_set_linger (self->front, 1000);
}

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
    if (!command || streq (command, "$TERM")) {
        s_answer_open_calls (self);
        rc = -1;
    }
    else
    if (streq (command, "ENDPOINTS")) {
        if (self->error)
            zstr_sendx (self->pipe, "ERROR", self->error, NULL);
        else
            zstr_sendx (self->pipe, self->endpoints [0], self->endpoints [1],
                        self->endpoints [2], self->endpoints [3], NULL);
    }
    else
    if (streq (command, "EPOCH"))
        zstr_sendf (self->pipe, "%" PRIu64, self->epoch);
    else
    if (streq (command, "STATS"))
        zstr_sendf (self->pipe,
                    "tools=%zu components=%zu in_flight=%zu calls=%" PRIu64 " late_results=%" PRIu64
                    " dropped_replies=%" PRIu64 " bad_messages=%" PRIu64 " forbidden=%" PRIu64,
                    dsh_catalog_tool_count (self->catalog), dsh_catalog_component_count (self->catalog),
                    dsh_inflight_size (self->inflight), self->calls, self->late_results,
                    self->dropped_replies, self->bad_messages, self->forbidden);
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
    self->loop = zloop_new ();
    //  The host decides when the actor ends ($TERM), not a signal
    zloop_set_nonstop (self->loop, true);
    if (!self->error) {
        char error [512];
        if (dsh_chain_start (self->chain, self->loop, error, sizeof (error)))
            self->error = strdup (error);
        else
        if (self->audit && self->store) {
            //  The stored modes and grants hold from the first call: an
            //  agent in plan mode is not let out by a restart. The reader
            //  sends them again within a second (applied then as well)
            zframe_t *modes = NULL, *grants = NULL;
            if (dsh_audit_read_state (self->store, &modes, &grants, error, sizeof (error)) == 0) {
                s_apply_modes (self, modes);
                s_apply_grants (self, grants);
            }
            else
                dsh_log_warning ("dsh-broker: cannot read the stored modes and grants now (%s): they hold "
                                 "once the store answers", error);
            zframe_destroy (&modes);
            zframe_destroy (&grants);
        }
    }
    zsock_signal (pipe, 0);
    zloop_reader (self->loop, pipe, s_self_handle_pipe, self);
    if (!self->error) {
        zloop_reader (self->loop, self->front, s_front_recv, self);
        zloop_reader (self->loop, self->announce, s_announce_recv, self);
        zloop_reader (self->loop, self->work, s_work_recv, self);
        if (self->work_monitor)
            zloop_reader (self->loop, self->work_monitor, s_work_monitor_recv, self);
        if (self->audit) {
            zloop_reader (self->loop, dsh_audit_socket (self->audit), s_audit_recv, self);
            zloop_timer (self->loop, 1000, 0, s_stored_again, self);
        }
        zloop_timer (self->loop, (size_t) self->heartbeat_ms, 0, s_expire_components, self);
        int tick_ms = self->heartbeat_ms < 50? self->heartbeat_ms: 50;
        zloop_timer (self->loop, (size_t) tick_ms, 0, s_expire_calls, self);
    }
    zloop_start (self->loop);
    s_self_destroy (&self);
    //  The catalog's digests used OpenSSL on this thread (dsh_store.c)
    dsh_store_thread_end ();
}
