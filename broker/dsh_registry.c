/*  =========================================================================
    dsh_registry - the registry actor

    One zloop drives everything: the pipe, the four sockets, the chain's
    slots, an expiry timer (every heartbeat interval) and one deadline
    scan. Nothing in the loop blocks: every send is non-blocking, and a peer
    that is full or gone costs the call it concerns an error reply, never
    the loop.

    This file is the actor itself: its state (self_t, in
    dsh_registry_priv.h), its construction, the events it publishes, the
    timers and the pipe. What the loop does with each socket is in a file
    per concept, all of them sharing self_t:

    - dsh_front.c     FRONT: one handler per client command, and the role
                      under CURVE each command needs (one table)
    - dsh_dispatch.c  a decided call's way to a component, flow control,
                      and the one way back to its caller
    - dsh_work.c      WORK: results and progress from components, and who
                      owns a component id (decided by dsh_owner)
    - dsh_presence.c  the announce channel: components joining, staying,
                      leaving
    - dsh_stored.c    the state kept in the store (modes, grants, pins),
                      applied here and kept there

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

#include "dsh_registry_priv.h"

//  Memory freed since the last trim that is worth giving back
#define S_TRIM_BYTES (4 * 1024 * 1024)

static size_t s_tool_replicas (void *arg, const char *tool);

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
        //  not a dropped connection (FRONT checks the body's own size:
        //  s_front_request, dsh_front.c)
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

//  The CURVE key a component's WORK connection has, for the pin of a
//  definition it offers first; NULL on plain connections.
const char *
dsh_registry_component_key (void *arg, const char *component)
{
    dsh_route_t *route = dsh_work_route ((self_t *) arg, component);
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

//  Binds the four sockets, watches WORK's disconnections, and makes the
//  chain; on failure self->error says why.
static void
s_self_bind (self_t *self, dsh_config_t *config)
{
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
        dsh_chain_host_t host = { dsh_dispatch_chain_out, dsh_dispatch_chain_control_reply, self,
                                  dsh_stored_chain_note };
        char error [512];
        self->chain = dsh_chain_new (config->chain, config->stage_kinds, self->endpoints [0],
                                     self->inflight, &host, error, sizeof (error));
        if (!self->chain)
            self->error = strdup (error);
    }
}

//  The audit and the pins, with the state the store holds (needs the
//  chain: its stages apply the stored modes and grants).
static void
s_self_state (self_t *self, dsh_config_t *config)
{
    char error [512];
    if (dsh_config_state (config, self->endpoints [0], error, sizeof (error))) {
        self->error = strdup (error);
        return;
    }
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
        dsh_catalog_set_pins (self->catalog, self->pins, dsh_registry_component_key, self);
    }
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
    self->inflight = dsh_inflight_new (dsh_dispatch_reply_route, self);
    if (config->stats) {
        self->stats = dsh_stats_new (s_tool_replicas, self);
        dsh_inflight_set_stats (self->inflight, self->stats);
    }
    self->heap = dsh_heap_new (S_TRIM_BYTES);
    self->queue_limit = config->queue_limit;
    dsh_front_snapshot_init (self, (int64_t) config->snapshot_bytes_per_second);
    self->expired_at = zclock_mono ();
    self->stored.modes_set = zhashx_new ();
    zhashx_set_destructor (self->stored.modes_set, (zhashx_destructor_fn *) zstr_free);
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
    s_self_bind (self, config);
    if (self->chain && !self->error)
        s_self_state (self, config);
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
        zhashx_destroy (&self->stored.modes_set);
        for (int index = 0; index < 3; index++)
            zframe_destroy (&self->stored.frames [index]);
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
        zhashx_destroy (&self->snapshot.waiting);
        zlistx_destroy (&self->snapshot.queue);
        zchunk_destroy (&self->snapshot.entries);
        dsh_heap_destroy (&self->heap);
        for (int index = 0; index < 4; index++)
            zstr_free (&self->endpoints [index]);
        zstr_free (&self->broker_id);
        zstr_free (&self->error);
        free (self);
        *self_p = NULL;
    }
}

//  Publishes the events of a change, and asks every component that was
//  refused a name the change freed to announce again.
void
dsh_registry_publish (self_t *self, zlistx_t *events)
{
    zlistx_t *resync = dsh_catalog_take_resync (self->catalog);
    for (char *component = zlistx_first (resync); component; component = zlistx_next (resync))
        dsh_work_send_sync (self, component);
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

//  dsh_stats' view of the catalog: who provides a tool now.
static size_t
s_tool_replicas (void *arg, const char *tool)
{
    return dsh_catalog_replicas (((self_t *) arg)->catalog, tool);
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
    dsh_sock_drain (self->announce, self->queue_limit, dsh_presence_announce_one, self);
    dsh_sock_drain (self->work, self->queue_limit, dsh_work_one, self);
    int64_t now = zclock_mono ();
    int64_t late = now - self->expired_at - self->heartbeat_ms;
    self->expired_at = now;
    int64_t window = (int64_t) self->heartbeat_ms * self->liveness + (late > 0? late: 0);
    zlistx_t *silent = dsh_catalog_silent (self->catalog, now, window);
    for (char *component = zlistx_first (silent); component; component = zlistx_next (silent)) {
        dsh_presence_remove_component (self, component, "expired");
        //  A silent owner whose connection is open still holds the id:
        //  whoever waits for it takes it
        if (dsh_routes_lookup (self->routes, component))
            dsh_work_promote (self, component);
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
            if (dsh_inflight_where (record) == DSH_AT_CHAIN)
                snprintf (text, sizeof (text), "Error: the call to tool \"%s\" reached its deadline "
                          "while a middleware stage held it", record->tool);
            else
            if (dsh_inflight_where (record) == DSH_AT_QUEUE && !dsh_catalog_reachable (self->catalog, record->component))
                snprintf (text, sizeof (text), "Error: the call to tool \"%s\" reached its deadline "
                          "waiting for component \"%s\" to connect again", record->tool, record->component);
            else
            if (dsh_inflight_where (record) == DSH_AT_QUEUE)
                snprintf (text, sizeof (text), "Error: the call to tool \"%s\" reached its deadline "
                          "waiting for a busy component", record->tool);
            else
                snprintf (text, sizeof (text), "Error: tool \"%s\" did not answer before the call's deadline",
                          record->tool);
            dsh_dispatch_release (self, record, "deadline");
            dsh_inflight_answer_error (self->inflight, &record, DSH_E_TIMEOUT, text);
        }
        else
        if (dsh_inflight_where (record) == DSH_AT_CHAIN)
            dsh_chain_expire (self->chain, record);
    }
    zlistx_destroy (&due);
    //  Calls answered here freed slots in their components' windows, and
    //  windows grew with their components' pace: the held calls take the
    //  room now, not with the components' next results
    if (dsh_fairq_size (self->fairq)) {
        zlistx_t *busy = dsh_fairq_components (self->fairq);
        for (const char *component = zlistx_first (busy); component; component = zlistx_next (busy))
            dsh_dispatch_refill (self, component);
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
                  dsh_inflight_where (record) == DSH_AT_COMPONENT? "at its component (it may have run there)": "not yet sent");
        dsh_dispatch_release (self, record, "cancelled");
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
                dsh_stored_apply_modes (self, modes);
                dsh_stored_apply_grants (self, grants);
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
        zloop_reader (self->loop, self->front, dsh_front_recv, self);
        zloop_reader (self->loop, self->announce, dsh_presence_announce_recv, self);
        zloop_reader (self->loop, self->work, dsh_work_recv, self);
        if (self->work_monitor)
            zloop_reader (self->loop, self->work_monitor, dsh_work_monitor_recv, self);
        if (self->audit) {
            zloop_reader (self->loop, dsh_audit_socket (self->audit), dsh_stored_audit_recv, self);
            zloop_timer (self->loop, 1000, 0, dsh_stored_again, self);
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
