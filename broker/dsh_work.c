/*  =========================================================================
    dsh_work - the work socket: components' results, and who owns an id

    Part of the registry actor (dsh_registry.c; state in
    dsh_registry_priv.h). A message on WORK speaks for the component id
    its connection owns. Whether a claim on an id may have it is
    dsh_owner's decision (PROTOCOL.md, "Component ids are owned"); this
    file carries it out on the socket (REFUSED, the line of waiting
    connections, SYNC) and keeps the routes (dsh_routes). It also checks
    RESULT and PROGRESS and hands them to dispatch.
    =========================================================================
*/

#include "dsh_registry_priv.h"
#include "dsh_owner.h"

//  Applies every WORK disconnection libzmq has reported and the loop has
//  not read yet.
static void
s_work_monitor_drain (self_t *self)
{
    while (self->work_monitor && (zsock_events (self->work_monitor) & ZMQ_POLLIN))
        dsh_work_monitor_recv (self->loop, self->work_monitor, self);
}

//  The WORK connection that owns component's id, or NULL: only a
//  connection that claimed the id (and, under CURVE, spoke with a key
//  allowed for it) gets anything sent to the id.
dsh_route_t *
dsh_work_route (self_t *self, const char *component)
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
const char *
dsh_work_route_link (self_t *self, const char *component)
{
    dsh_route_t *route = dsh_work_route (self, component);
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
int
dsh_work_send (self_t *self, const char *component, const char *command, const uint64_t *token, zframe_t **body_p)
{
    const char *routing_id = dsh_work_route_link (self, component);
    if (!routing_id) {
        zframe_destroy (body_p);
        errno = EHOSTUNREACH;
        return -1;
    }
    return s_send_link (self, routing_id, command, token, body_p);
}

void
dsh_work_send_sync (self_t *self, const char *component)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 0);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    if (dsh_work_send (self, component, DSH_SYNC, NULL, &body)) {
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
void
dsh_work_send_heartbeat (self_t *self, const char *component)
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
    dsh_work_send (self, component, DSH_HEARTBEAT, NULL, &body);
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
    if (!record || dsh_inflight_where (record) != DSH_AT_COMPONENT) {
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
    dsh_dispatch_refill (self, component);
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
        dsh_calltrace_dispatch_result (record, dsh_doc_root (doc));
        dsh_doc_destroy (&doc);
        zmq_msg_t result;
        zmq_msg_init (&result);
        zmq_msg_move (&result, body);
        dsh_dispatch_answer (self, &record, &result);
    }
    else {
        self->bad_messages++;
        char text [DSH_ID_MAX + DSH_CALL_ID_MAX + 128];
        snprintf (text, sizeof (text), "Error: component \"%s\" sent a malformed result: %s", component, error);
        dsh_log_warning ("dsh-broker: %s", text + 7);
        dsh_dispatch_answer_error (self, &record, DSH_E_BAD_RESULT, text);
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
    dsh_dispatch_send_route (self, record->route, record->route_size, false, DSH_PROGRESS, &report);
}

//  The broker's rules for ids, for dsh_owner.
static dsh_owner_rules_t
s_owner_rules (self_t *self)
{
    dsh_owner_rules_t rules = { self->curve, (int64_t) self->heartbeat_ms * self->liveness };
    return rules;
}

//  Sends REFUSED {component, reason} to a WORK connection.
static void
s_send_refused (self_t *self, const char *routing_id, const char *component, const char *reason)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "component", component);
    dsh_packer_kv_str (&packer, "reason", reason);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    s_send_link (self, routing_id, DSH_REFUSED, NULL, &body);
}

//  Tells a connection that claimed a held id that it may not have it: a
//  REFUSED on WORK, a log line and a component.refused event. It waits in
//  line for the id, which it gets if the holder's connection closes.
static void
s_refuse_claim (self_t *self, const char *routing_id, int fd, dsh_route_t *holder, uint64_t generation,
                const char *key, const char *reason)
{
    dsh_log_warning ("dsh-broker: a WORK connection at generation %" PRIu64 " refused: %s", generation, reason);
    dsh_routes_wait (self->routes, holder->component, routing_id, fd, generation, key);
    s_send_refused (self, routing_id, holder->component, reason);
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    dsh_catalog_refuse_id (self->catalog, holder->component, reason, events);
    dsh_registry_publish (self, events);
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

//  A claim on component's id by a connection that holds none, decided by
//  dsh_owner and carried out here. Returns 0 if the connection owns the id
//  now, -1 if its message is dropped.
static int
s_claim (self_t *self, const char *routing_id, int fd, const dsh_identity_t *peer, uint64_t generation,
         const char *command, const char *component)
{
    //  A closed holder is no holder: its disconnection may not be read yet
    s_work_monitor_drain (self);
    dsh_route_t *holder = dsh_routes_lookup (self->routes, component);
    dsh_owner_id_t id = { holder, false, 0, dsh_routes_owned_at (self->routes, component) };
    id.cataloged = dsh_catalog_generation (self->catalog, component, &id.catalog_generation) == 0;
    dsh_owner_claim_t claim = { peer->key, generation, streq (command, DSH_HELLO),
                                dsh_routes_waits (self->routes, component, routing_id) };
    dsh_owner_rules_t rules = s_owner_rules (self);
    dsh_owner_decision_t decision;
    dsh_owner_decide (&rules, &id, &claim, zclock_mono (), &decision);
    switch (decision.verdict) {
        case DSH_OWNER_REFUSE:
            s_refuse_claim (self, routing_id, fd, holder, generation, peer->key, decision.reason);
            return -1;
        case DSH_OWNER_IGNORE:
            return -1;
        case DSH_OWNER_DROP:
            dsh_log_warning ("dsh-broker: %s on a WORK connection that does not own component id %s: dropped",
                             command, component);
            return -1;
        case DSH_OWNER_TAKE_OVER: {
            dsh_log_info ("dsh-broker: component id %s taken over by a new WORK connection: %s",
                          component, decision.why);
            char *displaced = strdup (holder->routing_id);
            dsh_routes_wait (self->routes, component, displaced, holder->fd, holder->generation, holder->key);
            s_send_refused (self, displaced, component, decision.reason);
            zstr_free (&displaced);
            break;
        }
        case DSH_OWNER_TAKE:
            break;
    }
    dsh_routes_bind (self->routes, component, routing_id, fd, generation, peer->key, zclock_time (), zclock_mono ());
    //  The id's presence is its WORK owner's from now on
    if (peer->key)
        zhashx_update (self->presence_keys, component, (void *) peer->key);
    //  Another incarnation has the id now: whatever the old one was given
    //  will not be answered
    if (decision.restarted)
        dsh_dispatch_fail_component_calls (self, component, "restarted");
    return 0;
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
    return s_claim (self, routing_id, fd, &peer, generation, parts->command, component);
}

//  Gives a component's id to the connection that waited longest for it, if
//  one did, and asks it to announce.
void
dsh_work_promote (self_t *self, const char *component)
{
    uint64_t owned_at = dsh_routes_owned_at (self->routes, component);
    dsh_route_t *route = dsh_routes_promote (self->routes, component, zclock_time (), zclock_mono ());
    if (!route)
        return;
    dsh_log_info ("dsh-broker: component id %s goes to the WORK connection that waited longest for it", component);
    if (dsh_owner_promotion_restarts (owned_at, route->generation))
        dsh_dispatch_fail_component_calls (self, component, "restarted");
    dsh_catalog_seen (self->catalog, component, zclock_mono ());
    dsh_work_send_sync (self, component);
}

//  A WORK connection closed: the ids it held are free (to whoever waits
//  for them), and their components unreachable until a connection claims
//  them again.
int
dsh_work_monitor_recv (zloop_t *loop, zsock_t *reader, void *arg)
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
            dsh_work_promote (self, component);
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
        dsh_work_send_sync (self, component);
    else {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: unknown command \"%s\" from component %s", command, component);
    }
}

int
dsh_work_one (zsock_t *reader, void *arg)
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

int
dsh_work_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, DSH_REGISTRY_BATCH, dsh_work_one, arg);
}
