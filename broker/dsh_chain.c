/*  =========================================================================
    dsh_chain - the execution chain's hub

    A flow is one call (or control command) inside the chain: where it is
    (a stage index, or the tool), which way it is going, until when the
    current stage may hold it, and the stack of stages it has passed, each
    with the two routing frames that lead back to that stage's DEALER.
    Down: enter -> feed_0 -> drain_0 -> feed_1 ... -> drain_last -> tool.
    Up: tool -> drain_last -> (stage's after) -> feed_last -> drain_prev ...
    -> feed_0 -> caller. A stage that answers on its way down (a veto) sends
    the flow up from where it is.
    =========================================================================
*/

#include "dsh_chain.h"
#include "dsh_dispatch.h"
#include "dsh_middleware.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_stage.h"

#define S_TICK_MS               50
#define S_CONTROL_TIMEOUT_MS    5000
#define S_BATCH                 64      //  messages per wakeup, at most

typedef struct _s_slot_t s_slot_t;

struct _s_slot_t {
    dsh_chain_t *chain;
    size_t index;
    char *name;
    char *kind;
    bool external;
    int timeout_ms;
    bool fail_open;
    zsock_t *feed;              //  DEALER: down into the stage, answers up
    zsock_t *drain;             //  ROUTER: passed calls in, results down to the stage
    char *feed_endpoint;
    char *drain_endpoint;
    dsh_stage_t *stage;         //  built-in stages only
    uint64_t passed;
    uint64_t answered;
    uint64_t failed;
};

//  A stage a flow has passed, and the route back to it.
typedef struct {
    size_t index;
    zframe_t *stage_id;         //  the stage's DEALER, as our drain sees it
    zframe_t *feed_id;          //  our feed, as the stage's ROUTER sees it
} s_hop_t;

typedef struct {
    uint64_t token;
    zmsg_t *envelope;           //  the caller's route; never leaves the hub
    char *call_id;
    bool control;
    size_t stage;               //  a slot index, or the stage count: at the tool
    bool down;
    int64_t deadline_ms;        //  of the current stage; 0 at the tool
    zlistx_t *hops;             //  s_hop_t *, the stages passed, innermost last
    zframe_t *tool;
    zframe_t *held;             //  the body, while a fail-open stage holds it
    zchunk_t *id;               //  control: the request's id, packed, or NULL
    char *caller;               //  calls: the caller key, indexed in callers
} s_flow_t;

struct _dsh_chain_t {
    dsh_chain_host_t host;
    s_slot_t **slots;
    size_t slot_count;
    zhashx_t *flows;            //  token hex -> s_flow_t *, owned here
    zhashx_t *callers;          //  caller key -> s_flow_t * (calls only), for cancels
    uint64_t next_token;
    zloop_t *loop;
};

static void
s_hop_destroy (s_hop_t **self_p)
{
    if (*self_p) {
        s_hop_t *self = *self_p;
        zframe_destroy (&self->stage_id);
        zframe_destroy (&self->feed_id);
        free (self);
        *self_p = NULL;
    }
}

static void
s_flow_destroy (s_flow_t **self_p)
{
    if (*self_p) {
        s_flow_t *self = *self_p;
        zmsg_destroy (&self->envelope);
        zstr_free (&self->call_id);
        zlistx_destroy (&self->hops);
        zframe_destroy (&self->tool);
        zframe_destroy (&self->held);
        zchunk_destroy (&self->id);
        zstr_free (&self->caller);
        free (self);
        *self_p = NULL;
    }
}

static void
s_slot_destroy (s_slot_t **self_p)
{
    if (*self_p) {
        s_slot_t *self = *self_p;
        dsh_stage_destroy (&self->stage);
        zsock_destroy (&self->feed);
        zsock_destroy (&self->drain);
        zstr_free (&self->name);
        zstr_free (&self->kind);
        zstr_free (&self->feed_endpoint);
        zstr_free (&self->drain_endpoint);
        free (self);
        *self_p = NULL;
    }
}

static void
s_key (uint64_t token, char key [17])
{
    dsh_proto_token_hex (token, key);
}

static s_flow_t *
s_flow_lookup (dsh_chain_t *self, zframe_t *token_frame)
{
    uint64_t token;
    if (dsh_dispatch_token_decode (token_frame, &token))
        return NULL;
    char key [17];
    s_key (token, key);
    return (s_flow_t *) zhashx_lookup (self->flows, key);
}

static void
s_flow_end (dsh_chain_t *self, s_flow_t *flow)
{
    char key [17];
    s_key (flow->token, key);
    zhashx_delete (self->flows, key);
    if (flow->caller && zhashx_lookup (self->callers, flow->caller) == flow)
        zhashx_delete (self->callers, flow->caller);
    s_flow_destroy (&flow);
}

//  Sends frames without giving them up (they are shared, not copied, when
//  large). Returns 0 or -1 with errno.
static int
s_send_frames (zsock_t *sock, zframe_t **frames, size_t count)
{
    for (size_t index = 0; index < count; index++) {
        int flags = ZFRAME_REUSE | ZFRAME_DONTWAIT | (index + 1 < count? ZFRAME_MORE: 0);
        if (zframe_send (&frames [index], sock, flags))
            return -1;
    }
    return 0;
}

//  A MIDDLEWARE_FAILED result for the flow: "Error: stage "<name>" <why>".
static zframe_t *
s_failure (s_flow_t *flow, const char *name, const char *why)
{
    char text [256];
    snprintf (text, sizeof (text), "Error: stage \"%s\" %s", name, why);
    return dsh_proto_error_result (flow->call_id, DSH_E_MIDDLEWARE_FAILED, text);
}

static void s_go_up (dsh_chain_t *self, s_flow_t *flow, zframe_t **body_p);

//  Sends the flow down from stage from; past the last stage, to the tool.
static void
s_go_down (dsh_chain_t *self, s_flow_t *flow, size_t from, zframe_t **body_p)
{
    zframe_t *token = dsh_dispatch_token_frame (flow->token);
    zframe_t *delimiter = zframe_new_empty ();
    zframe_t *protocol = zframe_from (DSH_PROTOCOL);
    zframe_t *command = zframe_from (DSH_CALL);
    for (size_t index = from; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        zframe_t *frames [] = { token, delimiter, protocol, command, *body_p, flow->tool };
        if (s_send_frames (slot->feed, frames, 6) == 0) {
            flow->stage = index;
            flow->down = true;
            flow->deadline_ms = zclock_mono () + slot->timeout_ms;
            if (slot->fail_open)
                flow->held = *body_p;
            else
                zframe_destroy (body_p);
            *body_p = NULL;
            zframe_destroy (&token);
            zframe_destroy (&delimiter);
            zframe_destroy (&protocol);
            zframe_destroy (&command);
            return;
        }
        slot->failed++;
        if (!slot->fail_open) {
            zframe_destroy (body_p);
            zframe_t *failure = s_failure (flow, slot->name, "is not connected");
            zframe_destroy (&token);
            zframe_destroy (&delimiter);
            zframe_destroy (&protocol);
            zframe_destroy (&command);
            s_go_up (self, flow, &failure);
            return;
        }
    }
    zframe_destroy (&token);
    zframe_destroy (&delimiter);
    zframe_destroy (&protocol);
    zframe_destroy (&command);
    flow->stage = self->slot_count;
    flow->down = true;
    flow->deadline_ms = 0;
    self->host.dispatch (self->host.arg, flow->token, body_p);
}

//  Sends the flow up to the innermost stage it passed; past the first, to
//  the caller. A stage that cannot take it fails the call (or is skipped,
//  if fail-open).
static void
s_go_up (dsh_chain_t *self, s_flow_t *flow, zframe_t **body_p)
{
    zframe_destroy (&flow->held);
    zframe_t *token = dsh_dispatch_token_frame (flow->token);
    zframe_t *delimiter = zframe_new_empty ();
    zframe_t *protocol = zframe_from (DSH_PROTOCOL);
    zframe_t *command = zframe_from (DSH_RESULT);
    bool sent = false;
    s_hop_t *hop;
    while (!sent && (hop = (s_hop_t *) zlistx_last (flow->hops))) {
        zlistx_detach_cur (flow->hops);
        s_slot_t *slot = self->slots [hop->index];
        zframe_t *frames [] = { hop->stage_id, hop->feed_id, token, delimiter, protocol, command, *body_p };
        if (s_send_frames (slot->drain, frames, 7) == 0) {
            sent = true;
            flow->stage = hop->index;
            flow->down = false;
            flow->deadline_ms = zclock_mono () + slot->timeout_ms;
            if (slot->fail_open)
                flow->held = *body_p;
            else
                zframe_destroy (body_p);
            *body_p = NULL;
        }
        else {
            slot->failed++;
            if (!slot->fail_open) {
                zframe_destroy (body_p);
                *body_p = s_failure (flow, slot->name, "is gone");
            }
        }
        s_hop_destroy (&hop);
    }
    zframe_destroy (&token);
    zframe_destroy (&delimiter);
    zframe_destroy (&protocol);
    zframe_destroy (&command);
    if (!sent) {
        self->host.reply (self->host.arg, &flow->envelope, DSH_RESULT, body_p);
        s_flow_end (self, flow);
    }
}

static s_flow_t *
s_flow_new (dsh_chain_t *self, zmsg_t **envelope_p, const char *call_id)
{
    s_flow_t *flow = (s_flow_t *) zmalloc (sizeof (s_flow_t));
    assert (flow);
    flow->token = ++self->next_token;
    flow->envelope = *envelope_p;
    *envelope_p = NULL;
    flow->call_id = strdup (call_id? call_id: "");
    flow->hops = zlistx_new ();
    zlistx_set_destructor (flow->hops, (zlistx_destructor_fn *) s_hop_destroy);
    char key [17];
    s_key (flow->token, key);
    zhashx_insert (self->flows, key, flow);
    return flow;
}

void
dsh_chain_enter (dsh_chain_t *self, zmsg_t **envelope_p, const char *call_id, zframe_t **body_p, zchunk_t *tool)
{
    assert (self);
    s_flow_t *flow = s_flow_new (self, envelope_p, call_id);
    flow->caller = dsh_proto_caller_key (flow->envelope, flow->call_id);
    zhashx_update (self->callers, flow->caller, flow);
    flow->tool = tool? zframe_new (zchunk_data (tool), zchunk_size (tool)): zframe_new_empty ();
    s_go_down (self, flow, 0, body_p);
}

void
dsh_chain_result (dsh_chain_t *self, uint64_t token, zframe_t **body_p)
{
    assert (self);
    char key [17];
    s_key (token, key);
    s_flow_t *flow = (s_flow_t *) zhashx_lookup (self->flows, key);
    if (flow && flow->stage == self->slot_count)
        s_go_up (self, flow, body_p);
    else
        zframe_destroy (body_p);
}

bool
dsh_chain_cancel (dsh_chain_t *self, zmsg_t *envelope, const char *call_id)
{
    assert (self);
    char *caller = dsh_proto_caller_key (envelope, call_id);
    s_flow_t *flow = (s_flow_t *) zhashx_lookup (self->callers, caller);
    zstr_free (&caller);
    if (!flow)
        return false;
    if (flow->stage == self->slot_count)
        self->host.cancel (self->host.arg, flow->token);
    else {
        //  The stage holding it lets go (a deferred call is dropped)
        zframe_t *token = dsh_dispatch_token_frame (flow->token);
        zframe_t *delimiter = zframe_new_empty ();
        zframe_t *protocol = zframe_from (DSH_PROTOCOL);
        zframe_t *command = zframe_from (DSH_CANCEL);
        zframe_t *frames [] = { token, delimiter, protocol, command };
        if (flow->down)
            s_send_frames (self->slots [flow->stage]->feed, frames, 4);
        zframe_destroy (&token);
        zframe_destroy (&delimiter);
        zframe_destroy (&protocol);
        zframe_destroy (&command);
    }
    s_flow_end (self, flow);
    return true;
}

void
dsh_chain_progress (dsh_chain_t *self, uint64_t token, zframe_t **body_p)
{
    assert (self);
    char key [17];
    s_key (token, key);
    s_flow_t *flow = (s_flow_t *) zhashx_lookup (self->flows, key);
    if (flow && !flow->control) {
        zmsg_t *envelope = zmsg_dup (flow->envelope);
        self->host.reply (self->host.arg, &envelope, DSH_PROGRESS, body_p);
    }
    zframe_destroy (body_p);
}

size_t
dsh_chain_flows (dsh_chain_t *self)
{
    assert (self);
    return zhashx_size (self->flows);
}

//  ---------------------------------------------------------------------
//  Control commands

//  Answers a control command: {id?, ok, message?} plus, from a stage's
//  reply, its other fields.
static void
s_control_answer (dsh_chain_t *self, zmsg_t **envelope_p, zchunk_t *id, bool ok, const char *message,
                  const msgpack_object *reply)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    uint32_t extra = 0;
    for (uint32_t index = 0; reply && index < reply->via.map.size; index++) {
        const msgpack_object *key = &reply->via.map.ptr [index].key;
        if (!dsh_str_eq (key, "id") && !dsh_str_eq (key, "ok") && !dsh_str_eq (key, "message"))
            extra++;
    }
    msgpack_pack_map (&packer.pk, 1 + (message != NULL) + (id != NULL) + extra);
    if (id) {
        dsh_pack_cstr (&packer.pk, "id");
        dsh_packer_raw (&packer, zchunk_data (id), zchunk_size (id));
    }
    for (uint32_t index = 0; reply && index < reply->via.map.size; index++) {
        const msgpack_object *key = &reply->via.map.ptr [index].key;
        if (!dsh_str_eq (key, "id") && !dsh_str_eq (key, "ok") && !dsh_str_eq (key, "message")) {
            msgpack_pack_object (&packer.pk, *key);
            msgpack_pack_object (&packer.pk, reply->via.map.ptr [index].val);
        }
    }
    dsh_pack_cstr (&packer.pk, "ok");
    if (ok)
        msgpack_pack_true (&packer.pk);
    else
        msgpack_pack_false (&packer.pk);
    if (message)
        dsh_packer_kv_str (&packer, "message", message);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    self->host.reply (self->host.arg, envelope_p, DSH_CONTROL, &body);
}

//  Passes a stage's control reply on, with the request's id.
static void
s_control_forward (dsh_chain_t *self, s_flow_t *flow, zframe_t *body)
{
    char error [256];
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    const msgpack_object *ok = dsh_map_get (root, "ok");
    char *message = doc? dsh_doc_strdup (doc, dsh_map_get (root, "message")): NULL;
    if (!doc)
        s_control_answer (self, &flow->envelope, flow->id, false, "the stage's reply is malformed", NULL);
    else
        s_control_answer (self, &flow->envelope, flow->id, ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean,
                          message, root);
    dsh_doc_destroy (&doc);
}

void
dsh_chain_control (dsh_chain_t *self, zmsg_t **envelope_p, zframe_t **body_p)
{
    assert (self);
    char error [256];
    dsh_doc_t *doc = dsh_proto_decode_body (*body_p, error, sizeof (error));
    char *name = doc? dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "stage")): NULL;
    zchunk_t *id = NULL;
    const msgpack_object *id_object = doc? dsh_map_get (dsh_doc_root (doc), "id"): NULL;
    if (id_object) {
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        msgpack_pack_object (&packer.pk, *id_object);
        id = zchunk_new (packer.sbuf.data, packer.sbuf.size);
        dsh_packer_release (&packer);
    }
    s_slot_t *slot = NULL;
    for (size_t index = 0; name && index < self->slot_count; index++)
        if (streq (self->slots [index]->name, name))
            slot = self->slots [index];
    if (!slot) {
        char message [300];
        snprintf (message, sizeof (message), "no stage named \"%s\" in the chain", name? name: "");
        s_control_answer (self, envelope_p, id, false, message, NULL);
        zchunk_destroy (&id);
    }
    else {
        s_flow_t *flow = s_flow_new (self, envelope_p, NULL);
        flow->control = true;
        flow->id = id;
        flow->stage = slot->index;
        flow->deadline_ms = zclock_mono () + S_CONTROL_TIMEOUT_MS;
        zframe_t *token = dsh_dispatch_token_frame (flow->token);
        zframe_t *delimiter = zframe_new_empty ();
        zframe_t *protocol = zframe_from (DSH_PROTOCOL);
        zframe_t *command = zframe_from (DSH_CONTROL);
        zframe_t *frames [] = { token, delimiter, protocol, command, *body_p };
        if (s_send_frames (slot->feed, frames, 5)) {
            snprintf (error, sizeof (error), "stage \"%s\" is not connected", slot->name);
            s_control_answer (self, &flow->envelope, flow->id, false, error, NULL);
            s_flow_end (self, flow);
        }
        zframe_destroy (&token);
        zframe_destroy (&delimiter);
        zframe_destroy (&protocol);
        zframe_destroy (&command);
    }
    dsh_doc_destroy (&doc);
    zframe_destroy (body_p);
}

//  ---------------------------------------------------------------------
//  Slot sockets

//  feed: [token] "" DSH1 (RESULT|CONTROL) body, from stage slot->index.
static int
s_feed_recv_one (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    s_slot_t *slot = (s_slot_t *) arg;
    dsh_chain_t *self = slot->chain;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    s_flow_t *flow = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  zmsg_size (envelope) == 1 && zmsg_size (msg) == 1)
        flow = s_flow_lookup (self, zmsg_first (envelope));
    if (!flow || flow->stage != slot->index
    ||  (flow->control? !streq (command, DSH_CONTROL): !streq (command, DSH_RESULT)))
        ;                       //  late (the stage timed out) or not ours: dropped
    else {
        zframe_t *body = zmsg_pop (msg);
        if (flow->control) {
            s_control_forward (self, flow, body);
            zframe_destroy (&body);
            s_flow_end (self, flow);
        }
        else {
            if (flow->down)
                slot->answered++;
            s_go_up (self, flow, &body);
        }
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

//  Drains a busy socket without a poll per message, yet gives the others
//  their turn.
static int
s_feed_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    for (int count = 0; count < S_BATCH && (zsock_events (reader) & ZMQ_POLLIN); count++)
        s_feed_recv_one (loop, reader, arg);
    return 0;
}

//  drain: [stage id] [feed id] [token] "" DSH1 CALL body tool, passed on by
//  stage slot->index.
static int
s_drain_recv_one (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    s_slot_t *slot = (s_slot_t *) arg;
    dsh_chain_t *self = slot->chain;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    s_flow_t *flow = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  streq (command, DSH_CALL) && zmsg_size (envelope) == 3 && zmsg_size (msg) == 2) {
        zframe_t *token = zmsg_last (envelope);
        flow = s_flow_lookup (self, token);
    }
    if (flow && !flow->control && flow->down && flow->stage == slot->index) {
        slot->passed++;
        s_hop_t *hop = (s_hop_t *) zmalloc (sizeof (s_hop_t));
        assert (hop);
        hop->index = slot->index;
        hop->stage_id = zmsg_pop (envelope);
        hop->feed_id = zmsg_pop (envelope);
        zlistx_add_end (flow->hops, hop);
        zframe_destroy (&flow->held);
        zframe_t *body = zmsg_pop (msg);
        s_go_down (self, flow, slot->index + 1, &body);
    }
    else
    if (!flow)
        zsys_warning ("dsh-broker: stage %s sent something that is not a call of the chain", slot->name);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

//  Drains a busy socket without a poll per message, yet gives the others
//  their turn.
static int
s_drain_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    for (int count = 0; count < S_BATCH && (zsock_events (reader) & ZMQ_POLLIN); count++)
        s_drain_recv_one (loop, reader, arg);
    return 0;
}

static int
s_expire (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    dsh_chain_t *self = (dsh_chain_t *) arg;
    int64_t now = zclock_mono ();
    zlistx_t *late = zlistx_new ();
    for (s_flow_t *flow = zhashx_first (self->flows); flow; flow = zhashx_next (self->flows))
        if (flow->deadline_ms && flow->deadline_ms <= now)
            zlistx_add_end (late, flow);
    for (s_flow_t *flow = zlistx_first (late); flow; flow = zlistx_next (late)) {
        s_slot_t *slot = self->slots [flow->stage];
        slot->failed++;
        if (flow->control) {
            char message [128];
            snprintf (message, sizeof (message), "stage \"%s\" did not answer", slot->name);
            s_control_answer (self, &flow->envelope, flow->id, false, message, NULL);
            s_flow_end (self, flow);
        }
        else
        if (slot->fail_open && flow->held) {
            //  Go on as if the stage were not there
            zframe_t *body = flow->held;
            flow->held = NULL;
            if (flow->down)
                s_go_down (self, flow, flow->stage + 1, &body);
            else
                s_go_up (self, flow, &body);
        }
        else {
            char why [64];
            snprintf (why, sizeof (why), "did not answer within %d ms", slot->timeout_ms);
            zframe_t *failure = s_failure (flow, slot->name, why);
            s_go_up (self, flow, &failure);
        }
    }
    zlistx_destroy (&late);
    return 0;
}

//  ---------------------------------------------------------------------
//  Construction

//  The endpoint an external slot binds when its config names none: the
//  front's host on an ephemeral port, or an ipc path beside the front's.
static char *
s_external_endpoint (const char *broker, const char *name, const char *which)
{
    if (strncmp (broker, "tcp://", 6) == 0) {
        const char *colon = strrchr (broker, ':');
        return zsys_sprintf ("%.*s:*", (int) (colon - broker), broker);
    }
    return zsys_sprintf ("%s-stage-%s-%s", broker, name, which);
}

static s_slot_t *
s_slot_new (dsh_chain_t *self, zconfig_t *section, const char *broker, char *error, size_t error_size)
{
    s_slot_t *slot = (s_slot_t *) zmalloc (sizeof (s_slot_t));
    assert (slot);
    slot->chain = self;
    slot->index = self->slot_count;
    slot->name = strdup (zconfig_get (section, "name", ""));
    slot->kind = strdup (zconfig_get (section, "kind", ""));
    slot->external = streq (slot->kind, "external");
    const char *timeout = zconfig_get (section, "timeout_ms", NULL);
    const char *fail_open = zconfig_get (section, "fail_open", "false");
    slot->fail_open = streq (fail_open, "true") || streq (fail_open, "1");
    slot->timeout_ms = timeout? atoi (timeout): dsh_middleware_default_timeout_ms (slot->kind);
    if (!*slot->name || !dsh_proto_valid_name (slot->name, strlen (slot->name)) || strlen (slot->name) > 64)
        snprintf (error, error_size, "chain: stage %zu needs a name of 1-64 [A-Za-z0-9_.-]", slot->index + 1);
    else
    if (!slot->external && !dsh_middleware_known (slot->kind))
        snprintf (error, error_size, "chain/%s: unknown kind \"%s\"", slot->name, slot->kind);
    else
    if (timeout && (slot->timeout_ms <= 0 || strspn (timeout, "0123456789") != strlen (timeout)))
        snprintf (error, error_size, "chain/%s: timeout_ms \"%s\" is not a positive number", slot->name, timeout);
    else
    if (!streq (fail_open, "true") && !streq (fail_open, "false") && !streq (fail_open, "1") && !streq (fail_open, "0"))
        snprintf (error, error_size, "chain/%s: fail_open \"%s\" is not true or false", slot->name, fail_open);
    for (size_t index = 0; index < self->slot_count && !*error; index++)
        if (streq (self->slots [index]->name, slot->name))
            snprintf (error, error_size, "chain: two stages named \"%s\"", slot->name);
    if (*error) {
        s_slot_destroy (&slot);
        return NULL;
    }
    if (slot->external) {
        const char *feed = zconfig_get (section, "feed", NULL);
        const char *drain = zconfig_get (section, "drain", NULL);
        slot->feed_endpoint = feed? strdup (feed): s_external_endpoint (broker, slot->name, "feed");
        slot->drain_endpoint = drain? strdup (drain): s_external_endpoint (broker, slot->name, "drain");
    }
    else {
        slot->feed_endpoint = zsys_sprintf ("inproc://dsh-chain-%p-%s-feed", (void *) self, slot->name);
        slot->drain_endpoint = zsys_sprintf ("inproc://dsh-chain-%p-%s-drain", (void *) self, slot->name);
    }
    slot->feed = zsock_new (ZMQ_DEALER);
    slot->drain = zsock_new (ZMQ_ROUTER);
    dsh_sock_limit (slot->feed, DSH_MAX_MESSAGE_DEFAULT, 100000);
    dsh_sock_limit (slot->drain, DSH_MAX_MESSAGE_DEFAULT, 100000);
    //  A stage that is not there must fail calls at once, not queue them
    zsock_set_immediate (slot->feed, 1);
    zsock_set_router_mandatory (slot->drain, 1);
    if (zsock_bind (slot->feed, "%s", slot->feed_endpoint) == -1
    ||  zsock_bind (slot->drain, "%s", slot->drain_endpoint) == -1) {
        snprintf (error, error_size, "chain/%s: cannot bind %s / %s: %s", slot->name,
                  slot->feed_endpoint, slot->drain_endpoint, zmq_strerror (zmq_errno ()));
        s_slot_destroy (&slot);
        return NULL;
    }
    zstr_free (&slot->feed_endpoint);
    zstr_free (&slot->drain_endpoint);
    slot->feed_endpoint = strdup (zsock_endpoint (slot->feed));
    slot->drain_endpoint = strdup (zsock_endpoint (slot->drain));

    if (!slot->external) {
        dsh_middleware_context_t context = { slot->name, broker };
        dsh_stage_callbacks_t callbacks;
        memset (&callbacks, 0, sizeof (callbacks));
        void *arg = NULL;
        char reason [256] = "";
        if (dsh_middleware_setup (slot->kind, section, &context, &callbacks, &arg, reason, sizeof (reason)))
            snprintf (error, error_size, "chain/%s: %s", slot->name, reason);
        else
        if (!(slot->stage = dsh_stage_new (slot->name, &callbacks, arg))) {
            if (callbacks.on_destroy)
                callbacks.on_destroy (arg);
        }
        else
        if (dsh_stage_connect (slot->stage, slot->feed_endpoint, slot->drain_endpoint) == 0)
            return slot;
        if (!*error)
            snprintf (error, error_size, "chain/%s: the stage did not start", slot->name);
        s_slot_destroy (&slot);
        return NULL;
    }
    return slot;
}

dsh_chain_t *
dsh_chain_new (zconfig_t *config, const char *broker, const dsh_chain_host_t *host, char *error, size_t error_size)
{
    assert (broker);
    assert (host && host->dispatch && host->reply && host->cancel);
    dsh_chain_t *self = (dsh_chain_t *) zmalloc (sizeof (dsh_chain_t));
    assert (self);
    self->host = *host;
    self->flows = zhashx_new ();
    self->callers = zhashx_new ();
    self->next_token = ((uint64_t) randof (INT32_MAX) << 32) | (uint64_t) randof (INT32_MAX);
    *error = 0;
    size_t stages = 0;
    for (zconfig_t *section = config? zconfig_child (config): NULL; section; section = zconfig_next (section))
        stages++;
    self->slots = (s_slot_t **) zmalloc ((stages + 1) * sizeof (s_slot_t *));
    for (zconfig_t *section = config? zconfig_child (config): NULL; section; section = zconfig_next (section)) {
        if (!streq (zconfig_name (section), "stage")) {
            snprintf (error, error_size, "chain: unknown entry \"%s\" (want \"stage\")", zconfig_name (section));
            break;
        }
        s_slot_t *slot = s_slot_new (self, section, broker, error, error_size);
        if (!slot)
            break;
        self->slots [self->slot_count++] = slot;
    }
    if (*error)
        dsh_chain_destroy (&self);
    return self;
}

void
dsh_chain_destroy (dsh_chain_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_chain_t *self = *self_p;
        for (s_flow_t *flow = zhashx_first (self->flows); flow; flow = zhashx_next (self->flows))
            s_flow_destroy (&flow);
        zhashx_destroy (&self->flows);
        zhashx_destroy (&self->callers);
        for (size_t index = 0; index < self->slot_count; index++)
            s_slot_destroy (&self->slots [index]);
        free (self->slots);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_chain_start (dsh_chain_t *self, zloop_t *loop)
{
    assert (self);
    self->loop = loop;
    for (size_t index = 0; index < self->slot_count; index++) {
        zloop_reader (loop, self->slots [index]->feed, s_feed_recv, self->slots [index]);
        zloop_reader (loop, self->slots [index]->drain, s_drain_recv, self->slots [index]);
    }
    if (self->slot_count)
        zloop_timer (loop, S_TICK_MS, 0, s_expire, self);
}

size_t
dsh_chain_size (dsh_chain_t *self)
{
    assert (self);
    return self->slot_count;
}

void
dsh_chain_pack (dsh_chain_t *self, msgpack_packer *pk)
{
    assert (self);
    msgpack_pack_array (pk, self->slot_count);
    for (size_t index = 0; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        msgpack_pack_map (pk, 8);
        dsh_pack_cstr (pk, "name");
        dsh_pack_cstr (pk, slot->name);
        dsh_pack_cstr (pk, "kind");
        dsh_pack_cstr (pk, slot->kind);
        dsh_pack_cstr (pk, "where");
        dsh_pack_cstr (pk, slot->external? slot->feed_endpoint: "inproc");
        dsh_pack_cstr (pk, "timeoutMs");
        msgpack_pack_int (pk, slot->timeout_ms);
        dsh_pack_cstr (pk, "failOpen");
        if (slot->fail_open)
            msgpack_pack_true (pk);
        else
            msgpack_pack_false (pk);
        dsh_pack_cstr (pk, "passed");
        msgpack_pack_uint64 (pk, slot->passed);
        dsh_pack_cstr (pk, "answered");
        msgpack_pack_uint64 (pk, slot->answered);
        dsh_pack_cstr (pk, "failed");
        msgpack_pack_uint64 (pk, slot->failed);
    }
}

int
dsh_chain_slot (dsh_chain_t *self, const char *name, const char **feed, const char **drain)
{
    assert (self);
    for (size_t index = 0; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        if (slot->external && streq (slot->name, name)) {
            *feed = slot->feed_endpoint;
            *drain = slot->drain_endpoint;
            return 0;
        }
    }
    return -1;
}
