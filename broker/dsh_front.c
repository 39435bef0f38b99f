/*  =========================================================================
    dsh_front - FRONT: requests from clients, one function per command

    Part of the registry actor (dsh_registry.c; state in
    dsh_registry_priv.h). A request is split and decoded once, strictly.
    One table (s_front_commands), built from the protocol's definition
    (schemas/dsh_protocol.json, generated into dsh_protocol_def.h), names
    each command's handler and the roles that may send it under CURVE: a
    command cannot be added without a handler, nor without saying who may
    send it. CALL is decided here and goes on to the chain or dispatch;
    the queries (LIST, GET, SNAPSHOT, STATS, PINS, AUDIT, CONTROL, ...)
    are answered here.
    =========================================================================
*/

#include "dsh_registry_priv.h"

//  SNAPSHOT replies: the budget holds this fraction of a second's bytes (a
//  burst), a queue is served this often, and holds this many requests
#define S_SNAPSHOT_BURSTS 10
#define S_SNAPSHOT_TICK_MS 10
#define S_SNAPSHOT_WAITING_MAX 10000

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

//  The SNAPSHOT queue, empty, with a full budget of bytes_per_second.
void
dsh_front_snapshot_init (self_t *self, int64_t bytes_per_second)
{
    self->snapshot.queue = zlistx_new ();
    zlistx_set_destructor (self->snapshot.queue, (zlistx_destructor_fn *) s_snapshot_wait_destroy);
    self->snapshot.waiting = zhashx_new ();
    self->snapshot.rate = bytes_per_second;
    self->snapshot.budget = self->snapshot.rate / S_SNAPSHOT_BURSTS;
    self->snapshot.refilled = zclock_mono ();
}

//  A FRONT request, split.
typedef struct {
    dsh_sock_msg_t *parts;
    zmq_msg_t *body;
    dsh_doc_t *doc;
    const msgpack_object *root;
    const msgpack_object *id;
    dsh_identity_t peer;        //  who sent it, under CURVE
    zframe_t *frame;            //  a CALL for the chain: the body's copy that doc decoded, or NULL
} s_request_t;

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
    dsh_dispatch_send_front (self, &envelope, command, &body);
}

static void
s_request_error (self_t *self, s_request_t *request, const char *code, const char *message)
{
    zmsg_t *envelope = s_route_zmsg (request->parts);
    dsh_dispatch_reply_error (self, &envelope, request->id, code, message);
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
    dsh_dispatch_send_route (self, request->parts->part, request->parts->envelope, false, DSH_RESULT, &body);
}

//  ---------------------------------------------------------------------
//  Rights: what a key's role lets it ask on FRONT, under CURVE. They are a
//  column of the command table (s_front_commands, below), and both come
//  from the protocol's definition (schemas/dsh_protocol.json, generated
//  into dsh_protocol_def.h): the roles that may send each command, and
//  the rules under which its body names others.

typedef void (s_front_fn) (self_t *self, s_request_t *request);

//  A FRONT command, its handler, and who may send it under CURVE.
typedef struct {
    const char *command;
    s_front_fn *handler;
    unsigned rights;            //  DSH_RIGHT_* mask, unless one of its rules matches the body
    const char *need;           //  the role a FORBIDDEN text names; NULL when any key may send it
} s_front_command_t;

//  Where a command's body decides who may send it: the first rule of the
//  command whose field matches (present, absent, or the str value).
typedef struct {
    const char *command;
    const char *field;
    dsh_match_t match;
    const char *value;
    unsigned rights;
    const char *need;
} s_front_rule_t;

#define S_FRONT_RULE(NAME, COMMAND, FIELD, MATCH, VALUE, RIGHTS, NEED) \
    { COMMAND, FIELD, MATCH, VALUE, RIGHTS, NEED },
static const s_front_rule_t s_front_rules [] = {
    DSH_FRONT_RIGHTS_WHEN (S_FRONT_RULE)
};
#undef S_FRONT_RULE

static const s_front_command_t *s_front_command (const char *command);

//  The rights request needs: the first of its command's rules that
//  matches its body, else the command's own; *need the role to name.
static unsigned
s_front_rights (const s_front_command_t *entry, s_request_t *request, const char **need)
{
    for (size_t index = 0; index < sizeof (s_front_rules) / sizeof (s_front_rules [0]); index++) {
        const s_front_rule_t *rule = &s_front_rules [index];
        if (!streq (rule->command, entry->command))
            continue;
        const msgpack_object *value = dsh_map_get (request->root, rule->field);
        bool match = rule->match == DSH_MATCH_PRESENT? value != NULL:
                     rule->match == DSH_MATCH_ABSENT? value == NULL: dsh_str_eq (value, rule->value);
        if (match) {
            *need = rule->need;
            return rule->rights;
        }
    }
    *need = entry->need;
    return entry->rights;
}

//  Writes why the request's key may not make it into text and returns
//  true, or returns false if it may. Every mask that names a role names
//  admin too, so an admin key may send anything but a component's.
static bool
s_front_forbidden (self_t *self, s_request_t *request, const char *command, char *text, size_t text_size)
{
    if (!self->curve)
        return false;
    const s_front_command_t *entry = s_front_command (command);
    assert (entry);
    const char *need;
    unsigned rights = s_front_rights (entry, request, &need);
    if (dsh_rights_allow (rights, request->peer.role))
        return false;
    self->forbidden++;
    snprintf (text, text_size, "Error: key %.8s... (role %s) may not send %s%s: it needs a%s %s key",
              request->peer.key? request->peer.key: "?", request->peer.role? request->peer.role: "none",
              command, streq (command, DSH_HELLO)? " for a stage slot": "",
              streq (need, DSH_ROLE_AGENT) || streq (need, DSH_ROLE_APPROVER) || streq (need, DSH_ROLE_ADMIN)
              || streq (need, DSH_ROLE_AUDITOR)? "n": "", need);
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

//  Decodes a CALL and decides whether the broker takes it: each refusal
//  (malformed, the key's rights or agent, quarantined, no audit, too many
//  calls) is answered here. Returns 0 with head read and *stamped_p the
//  body with the key's agent spliced in (or NULL: the caller's), or -1
//  once the call is refused.
static int
s_call_admit (self_t *self, s_request_t *request, dsh_call_head_t *head, zframe_t **stamped_p)
{
    char error [256];
    if (dsh_proto_decode_call (request->doc, head, error, sizeof (error))) {
        self->bad_messages++;
        dsh_stats_refused (self->stats, DSH_E_BAD_REQUEST);
        if (head->call_id)
            s_refuse_call (self, request, head->call_id, head->name? head->name: "", head->agent,
                           DSH_E_BAD_REQUEST, error);
        else
            s_request_error (self, request, DSH_E_BAD_REQUEST, error);
        return -1;
    }
    if (request->parts->envelope > DSH_ROUTE_MAX) {
        self->bad_messages++;
        snprintf (error, sizeof (error), "the envelope has %zu frames, more than %d",
                  request->parts->envelope, DSH_ROUTE_MAX);
        dsh_stats_refused (self->stats, DSH_E_BAD_REQUEST);
        s_refuse_call (self, request, head->call_id, head->name, head->agent, DSH_E_BAD_REQUEST, error);
        return -1;
    }
    char forbidden [DSH_ID_MAX * 2 + DSH_NAME_MAX * 3 + 512];
    zframe_t *stamped = NULL;
    if (s_front_forbidden (self, request, DSH_CALL, forbidden, sizeof (forbidden))) {
        dsh_stats_refused (self->stats, DSH_E_FORBIDDEN);
        s_refuse_call (self, request, head->call_id, head->name, head->agent, DSH_E_FORBIDDEN, forbidden);
        return -1;
    }
    if (s_call_agent (self, request, head, &stamped, forbidden, sizeof (forbidden))) {
        const char *code = strncmp (forbidden, "Error:", 6)? DSH_E_BAD_REQUEST: DSH_E_FORBIDDEN;
        dsh_stats_refused (self->stats, code);
        s_refuse_call (self, request, head->call_id, head->name, head->agent, code, forbidden);
        return -1;
    }
    //  A changed definition is not offered to agents, nor run (pins)
    if (dsh_dispatch_quarantined (self, head->name, forbidden, sizeof (forbidden))) {
        zframe_destroy (&stamped);
        dsh_stats_refused (self->stats, DSH_E_QUARANTINED);
        s_refuse_call (self, request, head->call_id, head->name, head->agent, DSH_E_QUARANTINED, forbidden);
        return -1;
    }
    //  A required audit that cannot record runs nothing
    if (!dsh_audit_admits (self->audit, forbidden, sizeof (forbidden))) {
        zframe_destroy (&stamped);
        dsh_audit_refused (self->audit);
        dsh_stats_refused (self->stats, DSH_E_AUDIT_UNAVAILABLE);
        s_refuse_call (self, request, head->call_id, NULL, NULL, DSH_E_AUDIT_UNAVAILABLE, forbidden);
        return -1;
    }
    if (dsh_inflight_size (self->inflight) >= self->max_in_flight) {
        zframe_destroy (&stamped);
        char text [96];
        snprintf (text, sizeof (text), "Error: the broker is overloaded (%zu calls in flight)",
                  dsh_inflight_size (self->inflight));
        dsh_stats_refused (self->stats, DSH_E_OVERLOADED);
        s_refuse_call (self, request, head->call_id, head->name, head->agent, DSH_E_OVERLOADED, text);
        return -1;
    }
    *stamped_p = stamped;
    return 0;
}

static void
s_handle_call (self_t *self, s_request_t *request)
{
    dsh_call_head_t head;
    zframe_t *stamped;
    if (s_call_admit (self, request, &head, &stamped))
        return;
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
    const char *agent = head.agent? head.agent: self->curve? request->peer.agent: NULL;
    dsh_stats_open (self->stats, record->tool, agent, &record->stats_tool, &record->stats_agent);
    //  Its trace context, read off the one decode of the call
    bool stamp_trace = dsh_calltrace_open (record, head.meta, agent);
    if (record->trail && record->trace.known) {
        char trace_id [33];
        dsh_calltrace_id_hex (record, trace_id);
        dsh_audit_trail_trace (record->trail, trace_id);
    }
    //  A body that goes into the chain as it came goes with its decode:
    //  no stage decodes it again
    if (request->frame && !stamped && !stamp_trace) {
        dsh_doc_t *doc = request->doc;
        zframe_t *body = request->frame;
        request->doc = NULL;
        request->frame = NULL;
        dsh_chain_enter_decoded (self->chain, record, &body, &doc, &head,
                                 dsh_catalog_tool (self->catalog, record->tool));
        return;
    }
    //  The head points into the body; done with it before the body moves
    dsh_doc_destroy (&request->doc);
    zframe_destroy (&request->frame);
    if (stamped) {
        zmq_msg_close (request->body);
        dsh_sock_part_frame (request->body, &stamped);
    }
    //  A trace the broker started and records no span of: the hops get it
    //  as it is, once, here (a body the splice refuses goes on without it)
    if (stamp_trace)
        dsh_calltrace_stamp_msg (record, NULL, request->body, (size_t) self->max_message_bytes);
    if (dsh_chain_size (self->chain)) {
        //  The waterfall runs first, even for a tool nobody serves
        zframe_t *body = dsh_dispatch_frame_of (request->body);
        dsh_chain_enter (self->chain, record, &body, dsh_catalog_tool (self->catalog, record->tool));
    }
    else {
        zmq_msg_t body;
        zmq_msg_init (&body);
        zmq_msg_move (&body, request->body);
        dsh_dispatch_call (self, record, &body);
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
        if (dsh_inflight_where (record) == DSH_AT_COMPONENT)
            snprintf (component, sizeof (component), "%s", record->component);
        dsh_dispatch_release (self, record, "cancelled");
        dsh_inflight_answer_error (self->inflight, &record, DSH_E_CANCELLED, "Error: the call was cancelled");
        //  Its slot in the component's window is free
        if (*component)
            dsh_dispatch_refill (self, component);
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
    dsh_stored_keep_mode (self, stage, command, args, caller);
    dsh_stored_keep_revoke (self, stage, command, args);
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
    if (self->snapshot.entries && self->snapshot.version == version && self->snapshot.seq == seq)
        return self->snapshot.entries;
    zchunk_destroy (&self->snapshot.entries);
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
    self->snapshot.entries = zchunk_new (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    self->snapshot.pairs = objects / 2;
    self->snapshot.version = version;
    self->snapshot.seq = seq;
    return self->snapshot.entries;
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
    data [0] = (byte) (0x80 | (self->snapshot.pairs + (wait->id != NULL)));
    if (wait->id) {
        memcpy (data + 1, id_key, sizeof (id_key));
        memcpy (data + 1 + sizeof (id_key), zchunk_data (wait->id), zchunk_size (wait->id));
    }
    memcpy (data + 1 + id_size, zchunk_data (entries), zchunk_size (entries));
    dsh_dispatch_send_front (self, &wait->envelope, DSH_SNAPSHOT, &body);
    self->snapshot.budget -= (int64_t) size;
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
    int64_t burst = self->snapshot.rate / S_SNAPSHOT_BURSTS;
    self->snapshot.budget += (now - self->snapshot.refilled) * self->snapshot.rate / 1000;
    if (self->snapshot.budget > burst)
        self->snapshot.budget = burst;
    self->snapshot.refilled = now;
    s_snapshot_wait_t *wait;
    while (self->snapshot.budget > 0 && (wait = (s_snapshot_wait_t *) zlistx_first (self->snapshot.queue))) {
        zhashx_delete (self->snapshot.waiting, wait->peer);
        s_snapshot_send (self, wait);
        zlistx_delete (self->snapshot.queue, zlistx_cursor (self->snapshot.queue));
    }
    bool waiting = zlistx_size (self->snapshot.queue) > 0;
    if (waiting && !self->snapshot.ticking) {
        self->snapshot.ticking_id = zloop_timer (self->loop, S_SNAPSHOT_TICK_MS, 0, s_snapshot_tick, self);
        assert (self->snapshot.ticking_id != -1);
        self->snapshot.ticking = true;
    }
    else
    if (!waiting && self->snapshot.ticking) {
        zloop_timer_end (self->loop, self->snapshot.ticking_id);
        self->snapshot.ticking = false;
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
    s_snapshot_wait_t *older = (s_snapshot_wait_t *) zhashx_lookup (self->snapshot.waiting, peer);
    if (!older && zlistx_size (self->snapshot.queue) >= S_SNAPSHOT_WAITING_MAX) {
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
        dsh_dispatch_send_front (self, &envelope, DSH_ERROR, &body);
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
        zlistx_add_end (self->snapshot.queue, wait);
        zhashx_insert (self->snapshot.waiting, peer, wait);
        if (zlistx_size (self->snapshot.queue) > 1 || self->snapshot.budget <= 0)
            self->snapshot.queued++;
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

//  Reads a PINS request {op?, name?, digest?}: the verb (list by default),
//  the tool's name and the digest it names, if any (in the request's
//  document, freed with it). Returns 0, or -1 once it has answered a bad
//  request.
static int
s_pins_request (self_t *self, s_request_t *request, const char **verb_p, const char **name_p,
                const char **digest_p)
{
    const msgpack_object *op = dsh_map_get (request->root, "op");
    const msgpack_object *digest_obj = dsh_map_get (request->root, "digest");
    const char *verbs [] = { "list", "show", "accept", "reject", "forget" };
    const char *verb = op? NULL: "list";
    for (size_t index = 0; op && index < sizeof (verbs) / sizeof (verbs [0]); index++)
        if (dsh_str_eq (op, verbs [index]))
            verb = verbs [index];
    const char *name = dsh_doc_strdup (request->doc, dsh_map_get (request->root, "name"));
    const char *digest = dsh_doc_strdup (request->doc, digest_obj);
    char message [256] = "";
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
        return -1;
    }
    *verb_p = verb;
    *name_p = name;
    *digest_p = digest;
    return 0;
}

//  PINS list: every pin and every quarantined tool, by name.
static void
s_pack_pins (self_t *self, dsh_packer_t *packer)
{
    dsh_pack_cstr (&packer->pk, "pins");
    zlistx_t *names = self->pins? dsh_pins_names (self->pins): zlistx_new ();
    zlistx_t *quarantined = dsh_catalog_quarantined (self->catalog);
    for (const char *other = (const char *) zlistx_first (quarantined); other;
         other = (const char *) zlistx_next (quarantined))
        if (!self->pins || !dsh_pins_lookup (self->pins, other))
            zlistx_add_end (names, strdup (other));
    zlistx_set_destructor (names, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_comparator (names, (zlistx_comparator_fn *) strcmp);
    zlistx_sort (names);
    msgpack_pack_array (&packer->pk, (uint32_t) zlistx_size (names));
    for (const char *each = (const char *) zlistx_first (names); each; each = (const char *) zlistx_next (names))
        s_pack_pin (self, packer, each, false);
    zlistx_destroy (&quarantined);
    zlistx_destroy (&names);
}

//  PINS accept: pins the definition offered now, if it is the one the
//  request names (digest, if given). Returns the event's kind, or NULL
//  with why in message.
static const char *
s_pins_accept (self_t *self, const char *name, const char *digest, zchunk_t *entry, const char *current,
               const char *caller, char *message, size_t size)
{
    const char *kind = NULL;
    char error [64];
    dsh_doc_t *doc = entry? dsh_doc_new (zchunk_data (entry), zchunk_size (entry), error, sizeof (error)): NULL;
    const char *owner = dsh_catalog_owner (self->catalog, name);
    if (!doc)
        snprintf (message, size, "tool \"%s\" is not registered: there is no definition to accept", name);
    else
    if (digest && !streq (digest, current))
        snprintf (message, size, "the offered definition of \"%s\" is now %.12s, not %.12s: "
                  "show it again before accepting it", name, current, digest);
    else
    if (dsh_pins_accept (self->pins, name, dsh_doc_root (doc), owner, dsh_registry_component_key (self, owner),
                         caller, zclock_mono ()))
        snprintf (message, size, "the definition of \"%s\" cannot be pinned", name);
    else
        kind = DSH_EV_ACCEPTED;
    dsh_doc_destroy (&doc);
    return kind;
}

//  An admin's decision on a tool's pin (kind: accepted, rejected,
//  forgotten): its event, then what it changes (a release is a
//  tool.updated), into events.
static void
s_pins_decided (self_t *self, const char *kind, const char *name, const char *current, const char *caller,
                zlistx_t *events)
{
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

//  PINS {id?, op?, name?, digest?}: the pinned definitions and the
//  quarantined tools, and an admin's decisions on them (PROTOCOL.md,
//  "Pins"). op is list (the default), show, accept, reject or forget.
static void
s_handle_pins (self_t *self, s_request_t *request)
{
    const char *verb, *name, *digest;
    if (s_pins_request (self, request, &verb, &name, &digest))
        return;
    char message [DSH_NAME_MAX * 2 + 256] = "";
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
    if (streq (verb, "accept"))
        kind = s_pins_accept (self, name, digest, entry, current, caller, message, sizeof (message));
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
    if (kind)
        s_pins_decided (self, kind, name, current, caller, events);
    dsh_packer_t packer;
    s_reply_begin (&packer, request);
    dsh_packer_kv_str (&packer, "policy",
                       dsh_pins_policy_name (self->pins? dsh_pins_policy (self->pins): DSH_PINS_OFF));
    if (streq (verb, "list"))
        s_pack_pins (self, &packer);
    else {
        dsh_pack_cstr (&packer.pk, "ok");
        msgpack_pack_true (&packer.pk);
        if (dsh_pins_lookup (self->pins, name) || dsh_catalog_quarantine (self->catalog, name, NULL, NULL)) {
            dsh_pack_cstr (&packer.pk, "pin");
            s_pack_pin (self, &packer, name, true);
        }
    }
    s_reply_packed (self, request, DSH_PINS, &packer);
    dsh_registry_publish (self, events);
    zlistx_destroy (&events);
}

//  The broker's resident set in bytes (VmRSS of /proc/self/status), or 0
//  where there is none.
static uint64_t
s_rss_bytes (void)
{
    FILE *status = fopen ("/proc/self/status", "r");
    if (!status)
        return 0;
    char line [256];
    unsigned long long kib = 0;
    while (fgets (line, sizeof (line), status))
        if (sscanf (line, "VmRSS: %llu kB", &kib) == 1)
            break;
    fclose (status);
    return (uint64_t) kib * 1024;
}

//  STATS tracing: the span exporter's counters, or nil with tracing off.
static void
s_pack_tracing (msgpack_packer *pk)
{
    dsh_pack_cstr (pk, "tracing");
    if (!dsh_calltrace_on ()) {
        msgpack_pack_nil (pk);
        return;
    }
    dsh_trace_stats_t counts;
    dsh_trace_stats (&counts);
    const char *names [] = { "spansEnded", "spansExported", "spansDropped", "queueBytes", "exportFailures" };
    uint64_t values [] = { counts.spans_ended, counts.spans_exported, counts.spans_dropped, counts.queue_bytes,
                           counts.export_failures };
    msgpack_pack_map (pk, sizeof (values) / sizeof (values [0]));
    for (size_t index = 0; index < sizeof (values) / sizeof (values [0]); index++) {
        dsh_pack_cstr (pk, names [index]);
        msgpack_pack_uint64 (pk, values [index]);
    }
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
    //  The broker's own figures: its memory, the WORK connections it routes
    //  to (one a component), and the calls it holds for busy components
    dsh_pack_cstr (pk, "rssBytes");
    msgpack_pack_uint64 (pk, s_rss_bytes ());
    dsh_pack_cstr (pk, "connections");
    msgpack_pack_uint64 (pk, dsh_routes_size (self->routes));
    dsh_pack_cstr (pk, "queued");
    msgpack_pack_uint64 (pk, self->fairq? dsh_fairq_size (self->fairq): 0);
    dsh_pack_cstr (pk, "queueBytes");
    msgpack_pack_uint64 (pk, self->fairq? dsh_fairq_bytes (self->fairq): 0);
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
    s_pack_tracing (pk);
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
        dsh_catalog_pack_details (self->catalog, id, &packer, now_ms);
        dsh_packer_map_end (&packer);
    }
    zlistx_destroy (&ids);
    s_reply_packed (self, request, DSH_STATS, &packer);
}

//  The FRONT commands as the protocol's definition lists them, each with
//  its handler, s_handle_<name> (a command the definition adds and nobody
//  wrote a handler for does not compile), and its rights (the generator
//  fails the build for a command with no roles).
#define S_FRONT_ENTRY(NAME, name, COMMAND, RIGHTS, NEED) { COMMAND, s_handle_##name, RIGHTS, NEED },
static const s_front_command_t s_front_commands [] = {
    DSH_FRONT_REQUESTS (S_FRONT_ENTRY)
};
#undef S_FRONT_ENTRY

//  The entry of a FRONT command, or NULL if there is none.
static const s_front_command_t *
s_front_command (const char *command)
{
    for (size_t index = 0; index < sizeof (s_front_commands) / sizeof (s_front_commands [0]); index++)
        if (streq (command, s_front_commands [index].command))
            return &s_front_commands [index];
    return NULL;
}

//  Refuses a request that could not be read: ERROR along its route, or,
//  with no delimiter, to the peer's own identity, the one route we trust.
static void
s_front_refuse (self_t *self, dsh_sock_msg_t *parts, const char *message)
{
    self->bad_messages++;
    zmsg_t *envelope = s_route_zmsg (parts);
    dsh_dispatch_reply_error (self, &envelope, NULL, DSH_E_BAD_REQUEST, message);
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
    s_request_t request = { parts, &parts->part [parts->body], NULL, NULL, NULL, { NULL, NULL, NULL, NULL, NULL, NULL }, NULL };
    char reason [256];
    if (streq (parts->command, DSH_CALL) && dsh_chain_size (self->chain)) {
        //  The chain takes the body as a frame of its own: decoded there, the
        //  one decode goes into the chain with it
        request.frame = dsh_dispatch_frame_of (request.body);
        request.doc = dsh_doc_new (zframe_data (request.frame), zframe_size (request.frame), reason, sizeof (reason));
    }
    else
        request.doc = dsh_doc_new (zmq_msg_data (request.body), zmq_msg_size (request.body), reason, sizeof (reason));
    if (!request.doc || dsh_doc_root (request.doc)->type != MSGPACK_OBJECT_MAP) {
        snprintf (error, sizeof (error), "malformed %s body: %s", parts->command,
                  request.doc? "the body is not a map": reason);
        if (request.doc)
            s_front_refuse (self, parts, error);
        else
            s_front_refuse_body (self, &request, error);
        dsh_doc_destroy (&request.doc);
        zframe_destroy (&request.frame);
        return;
    }
    request.root = dsh_doc_root (request.doc);
    request.id = dsh_map_get (request.root, "id");
    //  Off a frame that came over the wire: libzmq 4.3.4 leaves the
    //  routing id frame a ROUTER makes without metadata when it was polled
    if (self->curve)
        dsh_identity_read (&request.peer, &parts->part [parts->count - 1]);
    const s_front_command_t *entry = s_front_command (parts->command);
    char forbidden [256];
    if (entry && !streq (parts->command, DSH_CALL) && !streq (parts->command, DSH_CANCEL)
    &&  s_front_forbidden (self, &request, parts->command, forbidden, sizeof (forbidden)))
        //  CALL and CANCEL answer with a RESULT by callId, in their handlers
        s_request_error (self, &request, DSH_E_FORBIDDEN, forbidden + 7);
    else
    if (entry)
        entry->handler (self, &request);
    else {
        self->bad_messages++;
        snprintf (error, sizeof (error), "unknown command \"%s\"", parts->command);
        s_request_error (self, &request, DSH_E_BAD_REQUEST, error);
    }
    dsh_doc_destroy (&request.doc);
    zframe_destroy (&request.frame);
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

int
dsh_front_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, DSH_REGISTRY_BATCH, s_front_one, arg);
}
