/*  =========================================================================
    dsh_stage - write a middleware stage of the execution chain as callbacks

    The actor holds one link per broker it is attached to (several when it
    was given a list of brokers): the link's upstream ROUTER, its downstream
    DEALER and a table of the calls it still has business with: deferred
    ones, and passed ones whose result it watches. A call goes down, and
    its answer or result goes up, on the link it came from; tokens are each
    broker's own, so each link has its own table. The table's key is the
    chain token, as an integer: the first envelope frame after the ROUTER's
    own identity on sockets (PROTOCOL.md, "The execution chain"), or the
    host's token when the stage runs inline (one link, with no sockets). A
    result whose call is not in the table goes up frame for frame,
    untouched.
    =========================================================================
*/

#include "dsh_stage.h"
#include "dsh_log.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_beacon.h"
#include "dsh_curve.h"

#include <stdarg.h>

#include "dsh_link.h"

#define S_NAME_MAX 64
#define S_BATCH 64             //  messages per wakeup, at most
#define S_LINK_TICK_MS 100     //  how often attached links look at their broker

//  The stage's attachment to one broker's slot. An attached stage also
//  keeps a DEALER on the broker's front, and a session (dsh_link) that
//  says when to use it: PING every heartbeat shows a broker that restarted
//  (another `broker` id) or went silent, and HELLO {stage} then finds the
//  slot again, wherever it is now; a broker that did not answer when the
//  stage attached is asked the same way.
typedef struct {
    dsh_stage_t *stage;
    char *broker;               //  the broker's front, for logs ("inline" inline)
    zsock_t *upstream;          //  ROUTER, connected to the broker's feed; NULL: no slot yet
    zsock_t *downstream;        //  DEALER, connected to the broker's drain
    char *feed;                 //  the slot's endpoints, as connected
    char *drain;
    zhashx_t *calls;            //  chain token -> s_call_t *
    zsock_t *front;             //  DEALER to the broker's front; NULL: not attached by HELLO
    dsh_link_t *session;        //  following the broker on it, if attached
    char *chain_version;        //  WELCOME's stage `chainVersion`, or NULL
    int heartbeat_ms;           //  WELCOME's, else the defaults: the slot's sockets'
    int liveness;
} s_link_t;

struct _dsh_stage_t {
    char *name;
    dsh_stage_callbacks_t callbacks;
    void *arg;
    zactor_t *actor;
    //  Owned by the actor's thread once it runs
    zsock_t *pipe;
    zloop_t *loop;
    zlistx_t *links;            //  s_link_t *, one per broker; one inline
    bool connected;             //  set by the actor before it signals
    bool inline_mode;           //  run in the host's thread, through host
    dsh_stage_host_t host;
    const char *control_caller; //  while on_control runs: who sent the command
};

//  What the stage holds of a call: the call as callbacks read it (reader,
//  a dsh_call_t whose context is this record), and what the stage does
//  with it.
typedef struct {
    dsh_stage_t *stage;
    s_link_t *link;             //  where it came from, and goes on and back
    uint64_t token;             //  the chain's token for the call: its key
    zmsg_t *envelope;           //  on sockets: everything before the empty delimiter
    zframe_t *body;
    zframe_t *tool;
    dsh_call_t *reader;         //  reads body (decoded on first use)
    bool tool_read;             //  tool decoded into tool_doc (on first use)
    int64_t deadline_ms;        //  the call's deadline (zclock_mono), or 0
    dsh_doc_t *tool_doc;
    //  What the stage changed, spliced into the body as it is passed on:
    //  every byte it did not change stays the caller's
    zframe_t *new_arguments;    //  msgpack, or NULL: unchanged
    zhashx_t *stamps;           //  meta key -> zframe_t * msgpack (empty: remove), or NULL
    bool change_agent;
    char *new_agent;            //  with change_agent; NULL removes it
    zframe_t *answer;           //  RESULT body, or NULL
    bool watch;
    bool deferred;
    bool cancelled;             //  the caller cancelled it while deferred
    zframe_t *result;
    dsh_doc_t *result_doc;      //  result, decoded (on first use)
    bool result_read;
    zframe_t *new_result;       //  RESULT body, or NULL: unchanged
    bool result_deferred;
    void *data;
    void (*data_destructor) (void *);
} s_call_t;

//  A new record for a call whose body is taken, with the host's decode of
//  it (taken) if it has one.
static s_call_t *
s_call_new (dsh_stage_t *stage, s_link_t *link, zframe_t *body, dsh_doc_t **doc_p, const dsh_call_head_t *head)
{
    s_call_t *self = (s_call_t *) zmalloc (sizeof (s_call_t));
    assert (self);
    self->stage = stage;
    self->link = link;
    self->body = body;
    if (body && doc_p && *doc_p)
        self->reader = dsh_call_new_decoded (zframe_data (body), zframe_size (body), doc_p, head);
    else
        self->reader = dsh_call_new_unread (body? zframe_data (body): NULL, body? zframe_size (body): 0);
    dsh_call_hooks_t none = { NULL, NULL };
    dsh_call_set_hooks (self->reader, &none, self);
    return self;
}

//  The record of a call a callback was given.
static s_call_t *
s_record (dsh_call_t *call)
{
    s_call_t *self = (s_call_t *) dsh_call_context (call);
    assert (self);
    return self;
}

static void
s_call_destroy (s_call_t **self_p)
{
    if (*self_p) {
        s_call_t *self = *self_p;
        if (self->data && self->data_destructor)
            self->data_destructor (self->data);
        dsh_call_destroy (&self->reader);
        dsh_doc_destroy (&self->tool_doc);
        dsh_doc_destroy (&self->result_doc);
        zmsg_destroy (&self->envelope);
        zframe_destroy (&self->body);
        zframe_destroy (&self->tool);
        zframe_destroy (&self->result);
        zframe_destroy (&self->new_arguments);
        zhashx_destroy (&self->stamps);
        zstr_free (&self->new_agent);
        zframe_destroy (&self->answer);
        zframe_destroy (&self->new_result);
        free (self);
        *self_p = NULL;
    }
}

static s_link_t *
s_link_new (dsh_stage_t *stage, const char *broker)
{
    s_link_t *self = (s_link_t *) zmalloc (sizeof (s_link_t));
    assert (self);
    self->stage = stage;
    self->broker = strdup (broker);
    self->calls = zhashx_new ();
    dsh_proto_token_keys (self->calls);
    self->heartbeat_ms = DSH_DEFAULT_HEARTBEAT_MS;
    self->liveness = DSH_DEFAULT_LIVENESS;
    return self;
}

//  Closes the slot's sockets (their readers first).
static void
s_link_close (s_link_t *self)
{
    zloop_t *loop = self->stage->loop;
    if (loop && self->upstream)
        zloop_reader_end (loop, self->upstream);
    if (loop && self->downstream)
        zloop_reader_end (loop, self->downstream);
    zsock_destroy (&self->upstream);
    zsock_destroy (&self->downstream);
    zstr_free (&self->feed);
    zstr_free (&self->drain);
}

static void
s_link_destroy (s_link_t **self_p)
{
    if (*self_p) {
        s_link_t *self = *self_p;
        for (s_call_t *call = zhashx_first (self->calls); call; call = zhashx_next (self->calls))
            s_call_destroy (&call);
        zhashx_destroy (&self->calls);
        s_link_close (self);
        if (self->front && self->stage->loop)
            zloop_reader_end (self->stage->loop, self->front);
        zsock_destroy (&self->front);
        dsh_link_destroy (&self->session);
        zstr_free (&self->chain_version);
        zstr_free (&self->broker);
        free (self);
        *self_p = NULL;
    }
}

//  The chain token of an envelope (its second frame, 8 bytes); false if
//  the envelope has none.
static bool
s_envelope_token (zmsg_t *envelope, uint64_t *token)
{
    zframe_t *frame = zmsg_first (envelope);
    frame = frame? zmsg_next (envelope): NULL;
    if (!frame || zframe_size (frame) != 8)
        return false;
    *token = dsh_be64_get (zframe_data (frame));
    return true;
}

//  The tool entry, read the first time anything asks for it.
static const msgpack_object *
s_tool (s_call_t *call)
{
    if (!call->tool_read) {
        call->tool_read = true;
        char error [256] = "";
        if (call->tool && zframe_size (call->tool)
        &&  !(call->tool_doc = dsh_proto_decode_body (call->tool, error, sizeof (error))))
            dsh_log_warning ("stage %s: bad CALL: malformed tool frame", call->stage->name);
    }
    return call->tool_doc? dsh_doc_root (call->tool_doc): NULL;
}

//  ---------------------------------------------------------------------
//  Sending

static int
s_send (zsock_t *sock, zmsg_t *envelope, const char *command, zframe_t **body_p, zframe_t **tool_p)
{
    zmsg_t *copy = zmsg_dup (envelope);
    zmsg_t *msg = dsh_proto_message (&copy, command);
    zmsg_append (msg, body_p);
    if (tool_p)
        zmsg_append (msg, tool_p);
    return dsh_sock_send (sock, &msg);
}

//  The answer's body: the stage's RESULT body (taken) with the call's
//  callId, and content and isError if it lacks them; NULL if body is not
//  one msgpack map.
static zframe_t *
s_result_body (s_call_t *call, zframe_t **body_p)
{
    zframe_t *given = *body_p;
    *body_p = NULL;
    char error [128];
    dsh_doc_t *doc = given? dsh_proto_decode_body (given, error, sizeof (error)): NULL;
    zframe_t *body = NULL;
    if (doc) {
        const msgpack_object *root = dsh_doc_root (doc);
        const msgpack_object *content = dsh_map_get (root, "content");
        const msgpack_object *is_error = dsh_map_get (root, "isError");
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_packer_map_begin (&packer);
        dsh_packer_kv_str (&packer, "callId", dsh_call_id (call->reader));
        if (!content || content->type != MSGPACK_OBJECT_ARRAY) {
            dsh_pack_cstr (&packer.pk, "content");
            msgpack_pack_array (&packer.pk, 0);
        }
        if (!is_error || is_error->type != MSGPACK_OBJECT_BOOLEAN) {
            dsh_pack_cstr (&packer.pk, "isError");
            msgpack_pack_false (&packer.pk);
        }
        for (uint32_t index = 0; index < root->via.map.size; index++) {
            const msgpack_object_kv *entry = &root->via.map.ptr [index];
            if (dsh_str_eq (&entry->key, "callId")
            ||  (entry->val.type != MSGPACK_OBJECT_ARRAY && &entry->val == content)
            ||  (entry->val.type != MSGPACK_OBJECT_BOOLEAN && &entry->val == is_error))
                continue;
            msgpack_pack_object (&packer.pk, entry->key);
            msgpack_pack_object (&packer.pk, entry->val);
        }
        if (dsh_packer_map_end (&packer) == 0)
            body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
    }
    dsh_doc_destroy (&doc);
    zframe_destroy (&given);
    return body;
}

static void
s_send_up (dsh_stage_t *self, s_call_t *call, zframe_t **body_p)
{
    if (self->inline_mode)
        self->host.up (self->host.arg, call->token, body_p);
    else
    if (s_send (call->link->upstream, call->envelope, DSH_RESULT, body_p, NULL))
        dsh_log_warning ("stage %s: cannot send a result up to %s: %s", self->name, call->link->broker,
                         zmq_strerror (errno));
}

static void
s_answer (dsh_stage_t *self, s_call_t *call)
{
    zframe_t *body = NULL;
    if (call->answer)
        body = s_result_body (call, &call->answer);
    if (!body) {
        char text [128];
        snprintf (text, sizeof (text), "Error: stage \"%s\" answered without a result", self->name);
        body = dsh_proto_error_result (dsh_call_id (call->reader), DSH_E_MIDDLEWARE_FAILED, text);
    }
    s_send_up (self, call, &body);
}

static bool
s_changed (s_call_t *call)
{
    return call->new_arguments || call->stamps || call->change_agent;
}

//  The body with the stage's changes spliced in, or NULL with a reason.
static zframe_t *
s_splice (s_call_t *call, char *error, size_t error_size)
{
    size_t stamp_count = call->stamps? zhashx_size (call->stamps): 0;
    dsh_meta_stamp_t *stamps = (dsh_meta_stamp_t *) zmalloc ((stamp_count + 1) * sizeof (dsh_meta_stamp_t));
    size_t index = 0;
    for (zframe_t *value = call->stamps? (zframe_t *) zhashx_first (call->stamps): NULL; value;
         value = (zframe_t *) zhashx_next (call->stamps), index++) {
        stamps [index].key = (const char *) zhashx_cursor (call->stamps);
        stamps [index].value = zframe_size (value)? zframe_data (value): NULL;
        stamps [index].value_size = zframe_size (value);
    }
    dsh_call_changes_t changes = {
        call->new_arguments? zframe_data (call->new_arguments): NULL,
        call->new_arguments? zframe_size (call->new_arguments): 0,
        stamps, stamp_count, call->change_agent, call->new_agent
    };
    zframe_t *body = dsh_proto_splice_call (zframe_data (call->body), zframe_size (call->body), &changes,
                                            DSH_MAX_MESSAGE_DEFAULT, error, error_size);
    free (stamps);
    return body;
}

//  Sends the call down; returns false (and answers it) if it cannot go.
static bool
s_pass (dsh_stage_t *self, s_call_t *call)
{
    //  The DEALER's queue is full: fail before the frames move, while the
    //  call can still be read for its callId
    bool writable = self->inline_mode || (zsock_events (call->link->downstream) & ZMQ_POLLOUT) != 0;
    zframe_t *body = NULL;
    zframe_t *tool = NULL;
    char error [256] = "";
    if (writable) {
        if (s_changed (call)) {
            if (!(body = s_splice (call, error, sizeof (error)))) {
                //  Over the limit, or a change that is not msgpack: the call
                //  cannot go on as the stage wants it, and must not go on as
                //  it was
                char text [320];
                snprintf (text, sizeof (text), "Error: stage \"%s\" cannot pass the call on: %s", self->name, error);
                zframe_t *failure = dsh_proto_error_result (dsh_call_id (call->reader), DSH_E_BAD_REQUEST, text);
                s_send_up (self, call, &failure);
                return false;
            }
        }
        else
        if (call->watch)
            //  The decoded call points into the body, and on_result may read it
            body = zframe_dup (call->body);
        else {
            //  Untouched: the same frame goes on, not a re-encoding of it
            body = call->body;
            call->body = NULL;
        }
        if (call->watch)
            tool = zframe_dup (call->tool);
        else {
            tool = call->tool;
            call->tool = NULL;
        }
        if (body && self->inline_mode) {
            zframe_destroy (&tool);
            //  The same frame goes on: so may its one decode, if this stage
            //  made it or was handed it (a rewritten or copied body is
            //  new bytes, decoded when first read)
            dsh_doc_t *doc = NULL;
            dsh_call_head_t head;
            if (!self->host.pass_decoded || s_changed (call) || call->watch
            ||  dsh_call_take_decoded (call->reader, &doc, &head))
                self->host.pass (self->host.arg, call->token, &body);
            else
                self->host.pass_decoded (self->host.arg, call->token, &body, &doc, &head);
            return true;
        }
        if (body && s_send (call->link->downstream, call->envelope, DSH_CALL, &body, &tool) == 0)
            return true;
    }
    //  An untouched body went on unread, and is gone once sent: its
    //  callId is not read from freed bytes
    const char *call_id = call->body? dsh_call_id (call->reader): NULL;
    zframe_destroy (&body);
    zframe_destroy (&tool);
    char text [160];
    snprintf (text, sizeof (text), "Error: stage \"%s\" cannot pass the call on", self->name);
    zframe_t *failure = dsh_proto_error_result (call_id, DSH_E_MIDDLEWARE_FAILED, text);
    s_send_up (self, call, &failure);
    return false;
}

//  Acts on a verdict; takes the call (keeps it in the table if needed).
static void
s_decide (dsh_stage_t *self, s_call_t *call, dsh_stage_verdict_t verdict)
{
    if (call->cancelled) {
        //  Answered already, upstream: nothing goes anywhere
        zhashx_delete (call->link->calls, &call->token);
        s_call_destroy (&call);
        return;
    }
    call->deferred = false;
    bool keep = false;
    if (verdict == DSH_STAGE_DEFER) {
        call->deferred = true;
        keep = true;
    }
    else
    if (verdict == DSH_STAGE_ANSWER)
        s_answer (self, call);
    else
        keep = s_pass (self, call) && call->watch;
    zhashx_t *calls = call->link->calls;
    if (keep) {
        if (!zhashx_lookup (calls, &call->token))
            zhashx_insert (calls, &call->token, call);
    }
    else {
        zhashx_delete (calls, &call->token);
        s_call_destroy (&call);
    }
}

//  ---------------------------------------------------------------------
//  Receiving

static void
s_handle_call (s_link_t *link, zmsg_t **envelope_p, zmsg_t *msg)
{
    dsh_stage_t *self = link->stage;
    s_call_t *call = s_call_new (self, link, zmsg_pop (msg), NULL, NULL);
    call->envelope = *envelope_p;
    *envelope_p = NULL;
    call->tool = zmsg_pop (msg);
    //  The time the call has left, in ms, as the hub saw it: made a
    //  deadline on this machine's own clock
    zframe_t *budget = zmsg_pop (msg);
    uint64_t budget_ms = 0;
    if (budget && zframe_size (budget) == 8)
        budget_ms = dsh_be64_get (zframe_data (budget));
    if (budget_ms && budget_ms < INT32_MAX)
        call->deadline_ms = zclock_mono () + (int64_t) budget_ms;
    char error [256] = "";
    bool tokened = s_envelope_token (call->envelope, &call->token);
    if (!tokened)
        snprintf (error, sizeof (error), "no chain token in the envelope");
    else
    if (!call->body || !call->tool || (budget && zframe_size (budget) != 8) || zmsg_size (msg))
        snprintf (error, sizeof (error), "CALL wants a body, a tool frame and a deadline frame");
    zframe_destroy (&budget);
    if (*error) {
        dsh_log_warning ("stage %s: bad CALL: %s", self->name, error);
        if (tokened) {
            zframe_t *failure = dsh_proto_error_result (NULL, DSH_E_BAD_REQUEST, error);
            s_send_up (self, call, &failure);
        }
        s_call_destroy (&call);
        return;
    }
    if (zhashx_lookup (link->calls, &call->token)) {
        dsh_log_warning ("stage %s: a second call with one chain token; dropped", self->name);
        s_call_destroy (&call);
        return;
    }
    s_decide (self, call, self->callbacks.on_request (self, call->reader, self->arg));
}

//  The reply body to a CONTROL body {command, args?, caller?}: {ok,
//  message?, data?}; NULL if the stage's data is not one msgpack object.
static zframe_t *
s_control_reply (dsh_stage_t *self, zframe_t *request_body)
{
    char error_text [256] = "";
    char *error = NULL;
    dsh_doc_t *doc = request_body? dsh_proto_decode_body (request_body, error_text, sizeof (error_text)): NULL;
    const msgpack_object *request = doc? dsh_doc_root (doc): NULL;
    const char *command = doc? dsh_doc_strdup (doc, dsh_map_get (request, "command")): NULL;
    dsh_packer_t data;
    dsh_packer_init (&data);
    if (!command)
        error = strdup (*error_text? error_text: "CONTROL wants {command, args?}");
    else
    if (!self->callbacks.on_control)
        error = zsys_sprintf ("stage \"%s\" takes no commands", self->name);
    else {
        self->control_caller = dsh_doc_strdup (doc, dsh_map_get (request, "caller"));
        int rc = self->callbacks.on_control (self, command, dsh_map_get (request, "args"), &data, &error,
                                             self->arg);
        self->control_caller = NULL;
        if (rc && !error)
            error = zsys_sprintf ("stage \"%s\" has no command \"%s\"", self->name, command);
    }
    const char *data_bytes = data.sbuf.data;
    size_t data_size = error? 0: data.sbuf.size;
    zframe_t *frame = NULL;
    if (data_size == 0 || dsh_msgpack_skip (data_bytes, data_size) == data_size) {
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_packer_map_begin (&packer);
        dsh_pack_cstr (&packer.pk, "ok");
        if (error)
            msgpack_pack_false (&packer.pk);
        else
            msgpack_pack_true (&packer.pk);
        if (error)
            dsh_packer_kv_str (&packer, "message", error);
        if (data_size) {
            dsh_pack_cstr (&packer.pk, "data");
            dsh_packer_raw (&packer, data_bytes, data_size);
        }
        dsh_packer_map_end (&packer);
        frame = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
    }
    dsh_packer_release (&data);
    dsh_doc_destroy (&doc);
    zstr_free (&error);
    return frame;
}

static void
s_handle_control (s_link_t *link, zmsg_t **envelope_p, zmsg_t *msg)
{
    zframe_t *frame = s_control_reply (link->stage, zmsg_first (msg));
    if (frame && s_send (link->upstream, *envelope_p, DSH_CONTROL, &frame, NULL))
        dsh_log_warning ("stage %s: cannot answer a control command from %s", link->stage->name, link->broker);
    zframe_destroy (&frame);
}

//  The call with token was answered without this stage: let go of it.
static void
s_cancel (s_link_t *link, uint64_t token)
{
    dsh_stage_t *self = link->stage;
    s_call_t *call = (s_call_t *) zhashx_lookup (link->calls, &token);
    if (!call || call->cancelled)
        return;
    if (call->deferred || call->result_deferred) {
        //  The stage still holds it (a request or a result it is working
        //  on): it stays until the stage resumes it, which then sends nothing
        call->cancelled = true;
        if (self->callbacks.on_cancel)
            self->callbacks.on_cancel (self, call->reader, self->arg);
    }
    else {
        //  Passed and watched: its result will never come back
        zhashx_delete (link->calls, &call->token);
        s_call_destroy (&call);
    }
}

//  The caller cancelled a call this stage holds.
static void
s_handle_cancel (s_link_t *link, zmsg_t *envelope)
{
    uint64_t token;
    if (s_envelope_token (envelope, &token))
        s_cancel (link, token);
}

static int
s_upstream_recv_one (zsock_t *reader, void *arg)
{
    s_link_t *link = (s_link_t *) arg;
    dsh_stage_t *self = link->stage;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)))
        dsh_log_warning ("stage %s: malformed message from upstream: %s", self->name, error);
    else
    if (streq (command, DSH_CALL))
        s_handle_call (link, &envelope, msg);
    else
    if (streq (command, DSH_CONTROL))
        s_handle_control (link, &envelope, msg);
    else
    if (streq (command, DSH_CANCEL))
        s_handle_cancel (link, envelope);
    else
        dsh_log_warning ("stage %s: unknown command \"%s\" from upstream", self->name, command);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

//  Drains a busy socket without a poll per message, yet gives the others
//  their turn.
static int
s_upstream_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_upstream_recv_one, arg);
}

static void
s_finish_result (dsh_stage_t *self, s_call_t *call)
{
    if (call->cancelled) {
        //  Answered already, without this stage
        zhashx_delete (call->link->calls, &call->token);
        s_call_destroy (&call);
        return;
    }
    zframe_t *body = NULL;
    if (call->new_result)
        body = s_result_body (call, &call->new_result);
    if (!body) {
        body = call->result;
        call->result = NULL;
    }
    s_send_up (self, call, &body);
    zhashx_delete (call->link->calls, &call->token);
    s_call_destroy (&call);
}

//  The result of a watched call comes back: the stage reads it (and may
//  rewrite or hold it), then it goes up.
static void
s_take_result (dsh_stage_t *self, s_call_t *call, zframe_t **result_p)
{
    call->result = *result_p;
    *result_p = NULL;
    if (self->callbacks.on_result)
        self->callbacks.on_result (self, call->reader, self->arg);
    if (!call->result_deferred)
        s_finish_result (self, call);
}

static int
s_downstream_recv_one (zsock_t *reader, void *arg)
{
    s_link_t *link = (s_link_t *) arg;
    dsh_stage_t *self = link->stage;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    uint64_t token;
    s_call_t *call = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  streq (command, DSH_RESULT) && zmsg_size (msg) == 1
    &&  s_envelope_token (envelope, &token))
        call = (s_call_t *) zhashx_lookup (link->calls, &token);
    if (call && call->watch && !call->deferred && !call->result) {
        zframe_t *result = zmsg_pop (msg);
        s_take_result (self, call, &result);
    }
    else
    if (envelope) {
        //  Not ours to look at: up it goes, as it came
        zmsg_t *copy = dsh_proto_message (&envelope, command);
        while (zmsg_size (msg)) {
            zframe_t *frame = zmsg_pop (msg);
            zmsg_append (copy, &frame);
        }
        dsh_sock_send (link->upstream, &copy);
    }
    else
        dsh_log_warning ("stage %s: malformed message from downstream: %s", self->name, error);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

//  Drains a busy socket without a poll per message, yet gives the others
//  their turn.
static int
s_downstream_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_downstream_recv_one, arg);
}

static int
s_self_handle_pipe (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    (void) arg;
    char *command = zstr_recv (reader);
    int rc = (!command || streq (command, "$TERM"))? -1: 0;
    zstr_free (&command);
    return rc;
}

//  One broker's slot, as attach found it.
typedef struct {
    char *broker;
    char *feed;                 //  NULL: the broker did not answer yet
    char *drain;
    char *broker_id;            //  WELCOME's, when attached by HELLO
    char *chain_version;        //  WELCOME's stage `chainVersion`, or NULL
    bool attached;              //  by HELLO: the link follows the broker's front
    int heartbeat_ms;           //  the broker's (WELCOME), for dsh_sock_heal
    int liveness;
} s_slot_t;

static void
s_slot_destroy (s_slot_t **self_p)
{
    if (*self_p) {
        s_slot_t *self = *self_p;
        zstr_free (&self->broker);
        zstr_free (&self->feed);
        zstr_free (&self->drain);
        zstr_free (&self->broker_id);
        zstr_free (&self->chain_version);
        free (self);
        *self_p = NULL;
    }
}

static s_slot_t *
s_slot_new (const char *broker, const char *feed, const char *drain, int heartbeat_ms, int liveness)
{
    s_slot_t *self = (s_slot_t *) zmalloc (sizeof (s_slot_t));
    assert (self);
    self->broker = strdup (broker);
    self->feed = feed? strdup (feed): NULL;
    self->drain = drain? strdup (drain): NULL;
    self->heartbeat_ms = heartbeat_ms;
    self->liveness = liveness;
    return self;
}

typedef struct {
    dsh_stage_t *stage;
    zlistx_t *slots;            //  s_slot_t *
} s_start_t;

//  Connects the link to the slot at feed and drain (the loop reads them,
//  once it runs). Returns 0, or -1 if an endpoint is not one.
static int
s_link_open (s_link_t *self, const char *feed, const char *drain)
{
    self->upstream = zsock_new (ZMQ_ROUTER);
    self->downstream = zsock_new (ZMQ_DEALER);
    dsh_sock_limit (self->upstream, DSH_MAX_MESSAGE_DEFAULT, 100000);
    dsh_sock_limit (self->downstream, DSH_MAX_MESSAGE_DEFAULT, 100000);
    dsh_sock_heal (self->upstream, self->heartbeat_ms, self->liveness);
    dsh_sock_heal (self->downstream, self->heartbeat_ms, self->liveness);
    zsock_set_router_mandatory (self->upstream, 1);
    //  Downstream first, so that calls arriving the moment the feed is up
    //  have somewhere to go. The DEALER queues while its connection comes
    //  up (drain and feed belong to one broker: if it is gone, no call can
    //  reach this link either, and the broker times out what it sent)
    dsh_curve_client (self->upstream);
    dsh_curve_client (self->downstream);
    if (zsock_connect (self->downstream, "%s", drain)
    ||  zsock_connect (self->upstream, "%s", feed)) {
        zsys_error ("stage %s: cannot connect to the slot at %s (feed %s, drain %s)", self->stage->name,
                    self->broker, feed, drain);
        s_link_close (self);
        return -1;
    }
    self->feed = strdup (feed);
    self->drain = strdup (drain);
    if (self->stage->loop) {
        zloop_reader (self->stage->loop, self->upstream, s_upstream_recv, self);
        zloop_reader (self->stage->loop, self->downstream, s_downstream_recv, self);
    }
    return 0;
}

//  The broker's slot moved (it restarted on other ports): the calls this
//  link holds went with the old broker, so they are let go of (as when
//  cancelled), and the link connects to the new slot.
static void
s_link_move (s_link_t *self, const char *feed, const char *drain)
{
    zlistx_t *tokens = zlistx_new ();
    for (s_call_t *call = zhashx_first (self->calls); call; call = zhashx_next (self->calls))
        zlistx_add_end (tokens, call);
    for (s_call_t *call = zlistx_first (tokens); call; call = zlistx_next (tokens))
        s_cancel (self, call->token);
    zlistx_destroy (&tokens);
    s_link_close (self);
    if (s_link_open (self, feed, drain) == 0)
        zsys_info ("stage %s: attached to %s (feed %s, drain %s)", self->stage->name, self->broker, feed, drain);
}

//  Sends HELLO {stage} or PING on the link's front.
static void
s_link_ask (s_link_t *self, const char *command)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, streq (command, DSH_HELLO)? 1: 0);
    if (streq (command, DSH_HELLO))
        dsh_packer_kv_str (&packer, "stage", self->stage->name);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = dsh_proto_message (NULL, command);
    zmsg_append (msg, &body);
    dsh_sock_send (self->front, &msg);
}

static void s_link_follow (s_link_t *self);

static void
s_link_welcome (s_link_t *self, dsh_doc_t *doc)
{
    if (dsh_link_state (self->session) != DSH_LINK_HELLO)
        return;                 //  an answer to a HELLO re-sent before
    const msgpack_object *root = dsh_doc_root (doc);
    const msgpack_object *slot = dsh_map_get (root, "stage");
    const char *feed = dsh_doc_strdup (doc, dsh_map_get (slot, "feed"));
    const char *drain = dsh_doc_strdup (doc, dsh_map_get (slot, "drain"));
    const char *broker_id = dsh_doc_strdup (doc, dsh_map_get (root, "broker"));
    if (!feed || !drain || !broker_id) {
        dsh_log_warning ("stage %s: the broker at %s has no external stage of that name", self->stage->name,
                         self->broker);
        return;                 //  asked again when due: its config may change
    }
    self->heartbeat_ms = dsh_map_int_in (dsh_doc_root (doc), "heartbeatMs", 1, 3600000, DSH_DEFAULT_HEARTBEAT_MS);
    self->liveness = dsh_map_int_in (dsh_doc_root (doc), "liveness", 1, 1000, DSH_DEFAULT_LIVENESS);
    dsh_link_welcome (self->session, zclock_mono (), broker_id, self->heartbeat_ms, self->liveness);
    char *feed_endpoint = dsh_sock_resolve (feed, self->broker);
    char *drain_endpoint = dsh_sock_resolve (drain, self->broker);
    if (!self->upstream || !streq (self->feed, feed_endpoint) || !streq (self->drain, drain_endpoint))
        s_link_move (self, feed_endpoint, drain_endpoint);
    zstr_free (&feed_endpoint);
    zstr_free (&drain_endpoint);
    const char *version = dsh_doc_strdup (doc, dsh_map_get (slot, "chainVersion"));
    zstr_free (&self->chain_version);
    self->chain_version = version? strdup (version): NULL;
}

static int
s_link_front_recv_one (zsock_t *reader, void *arg)
{
    s_link_t *self = (s_link_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    dsh_link_heard (self->session, zclock_mono ());
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    dsh_doc_t *doc = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  zmsg_size (msg) == 1
    &&  (doc = dsh_proto_decode_body (zmsg_first (msg), error, sizeof (error)))) {
        if (streq (command, DSH_WELCOME))
            s_link_welcome (self, doc);
        else
        if (streq (command, DSH_PONG)) {
            //  Another instance id than the WELCOME's: restarted (s_link_follow)
            const msgpack_object *root = dsh_doc_root (doc);
            dsh_link_pong (self->session, zclock_mono (), dsh_doc_strdup (doc, dsh_map_get (root, "broker")),
                           dsh_map_int_in (root, "heartbeatMs", 1, 3600000, 0),
                           dsh_map_int_in (root, "liveness", 1, 1000, 0));
        }
    }
    dsh_doc_destroy (&doc);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    s_link_follow (self);
    return 0;
}

static int
s_link_front_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_link_front_recv_one, arg);
}

//  Does what the link's session says, in order. The front stays: each
//  link has its one broker, and HELLO on it finds the slot wherever it is
//  now.
static void
s_link_follow (s_link_t *self)
{
    dsh_link_event_t event;
    while (dsh_link_next (self->session, &event) == 0) {
        if (event.type == DSH_LINK_SEND_HELLO)
            s_link_ask (self, DSH_HELLO);
        else
        if (event.type == DSH_LINK_SEND_PING)
            s_link_ask (self, DSH_PING);
        else
        if (event.type == DSH_LINK_DOWN)
            dsh_log_info ("stage %s: no answer from the broker at %s for %" PRId64 " ms; asking for its slot again",
                          self->stage->name, self->broker, event.silence_ms);
        else
        if (event.type == DSH_LINK_RESTARTED)
            //  Its slot may be elsewhere now
            dsh_log_info ("stage %s: the broker at %s restarted; asking for its slot again",
                          self->stage->name, self->broker);
    }
}

//  Follows the broker of each attached link: HELLO until its slot is
//  known, then PING; silence for its liveness window means asking again.
static int
s_links_tick (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    dsh_stage_t *stage = (dsh_stage_t *) arg;
    int64_t now = zclock_mono ();
    for (s_link_t *link = zlistx_first (stage->links); link; link = zlistx_next (stage->links))
        if (link->session) {
            dsh_link_tick (link->session, now);
            s_link_follow (link);
        }
    return 0;
}

//  The link to slot's broker; NULL if an endpoint is not one.
static s_link_t *
s_link_connect (dsh_stage_t *stage, s_slot_t *slot)
{
    s_link_t *self = s_link_new (stage, slot->broker);
    self->heartbeat_ms = slot->heartbeat_ms;
    self->liveness = slot->liveness;
    if (slot->feed && s_link_open (self, slot->feed, slot->drain)) {
        s_link_destroy (&self);
        return NULL;
    }
    if (slot->attached) {
        self->front = zsock_new (ZMQ_DEALER);
        assert (self->front);
        dsh_sock_heal (self->front, self->heartbeat_ms, self->liveness);
        dsh_curve_client (self->front);
        if (zsock_connect (self->front, "%s", slot->broker)) {
            s_link_destroy (&self);
            return NULL;
        }
        zloop_reader (stage->loop, self->front, s_link_front_recv, self);
        self->chain_version = slot->chain_version? strdup (slot->chain_version): NULL;
        //  Connected above; a slot known is the WELCOME to the HELLO that
        //  dsh_stage_attach sent, else the session asks now
        int64_t now = zclock_mono ();
        self->session = dsh_link_new (DSH_LINK_COMPONENT);
        dsh_link_add (self->session, slot->broker);
        dsh_link_start (self->session, now);
        dsh_link_event_t event;
        while (dsh_link_next (self->session, &event) == 0)
            if (event.type == DSH_LINK_SEND_HELLO && !slot->feed)
                s_link_ask (self, DSH_HELLO);
        if (slot->feed) {
            dsh_link_welcome (self->session, now, slot->broker_id, self->heartbeat_ms, self->liveness);
            s_link_follow (self);
        }
    }
    return self;
}

static void
s_stage_actor (zsock_t *pipe, void *args)
{
    s_start_t *start = (s_start_t *) args;
    dsh_stage_t *self = start->stage;
    self->pipe = pipe;
    self->links = zlistx_new ();
    self->loop = zloop_new ();
    zloop_set_nonstop (self->loop, true);
    int rc = 0;
    bool attached = false;
    for (s_slot_t *slot = zlistx_first (start->slots); slot && rc == 0; slot = zlistx_next (start->slots)) {
        s_link_t *link = s_link_connect (self, slot);
        if (link)
            zlistx_add_end (self->links, link);
        else
            rc = -1;
        attached = attached || slot->attached;
    }
    self->connected = rc == 0;
    zsock_signal (pipe, rc == 0? 0: 1);
    if (rc == 0) {
        zloop_reader (self->loop, pipe, s_self_handle_pipe, self);
        if (attached)
            zloop_timer (self->loop, S_LINK_TICK_MS, 0, s_links_tick, self);
        if (self->callbacks.on_init)
            self->callbacks.on_init (self, self->arg);
        zloop_start (self->loop);
    }
    for (s_link_t *link = zlistx_first (self->links); link; link = zlistx_next (self->links))
        s_link_destroy (&link);
    zlistx_destroy (&self->links);
    zloop_destroy (&self->loop);
    //  A stage that never ran leaves its arg to the handle's destroy
    if (rc == 0 && self->callbacks.on_destroy)
        self->callbacks.on_destroy (self->arg);
}

//  Starts the actor on slots (taken). Returns 0 or -1.
static int
s_stage_start (dsh_stage_t *self, zlistx_t **slots_p)
{
    s_start_t start = { self, *slots_p };
    *slots_p = NULL;
    self->actor = zactor_new (s_stage_actor, &start);
    zlistx_destroy (&start.slots);
    if (!self->connected) {
        zactor_destroy (&self->actor);
        return -1;
    }
    return 0;
}

static zlistx_t *
s_slots_new (void)
{
    zlistx_t *slots = zlistx_new ();
    zlistx_set_destructor (slots, (zlistx_destructor_fn *) s_slot_destroy);
    return slots;
}

//  ---------------------------------------------------------------------
//  The handle

dsh_stage_t *
dsh_stage_new (const char *name, const dsh_stage_callbacks_t *callbacks, void *arg)
{
    assert (callbacks && callbacks->on_request);
    if (!name || strlen (name) > S_NAME_MAX || !dsh_proto_valid_name (name, strlen (name)))
        return NULL;
    dsh_stage_t *self = (dsh_stage_t *) zmalloc (sizeof (dsh_stage_t));
    assert (self);
    self->name = strdup (name);
    self->callbacks = *callbacks;
    self->arg = arg;
    return self;
}

void
dsh_stage_destroy (dsh_stage_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_stage_t *self = *self_p;
        if (self->actor)
            zactor_destroy (&self->actor);
        else {
            //  Inline or never started: the calls and arg are ours to free
            if (self->links)
                for (s_link_t *link = zlistx_first (self->links); link; link = zlistx_next (self->links))
                    s_link_destroy (&link);
            zlistx_destroy (&self->links);
            if (self->callbacks.on_destroy)
                self->callbacks.on_destroy (self->arg);
        }
        zstr_free (&self->name);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_stage_connect (dsh_stage_t *self, const char *feed, const char *drain)
{
    assert (self);
    assert (feed && drain);
    if (self->actor)
        return -1;
    zlistx_t *slots = s_slots_new ();
    zlistx_add_end (slots, s_slot_new (feed, feed, drain, DSH_DEFAULT_HEARTBEAT_MS, DSH_DEFAULT_LIVENESS));
    return s_stage_start (self, &slots);
}

//  The slot a WELCOME from broker names for this stage, or NULL (said why).
static s_slot_t *
s_welcome_slot (dsh_stage_t *self, const char *broker, zmsg_t *reply)
{
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    dsh_doc_t *doc = NULL;
    s_slot_t *slot = NULL;
    if (dsh_proto_split (reply, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  streq (command, DSH_WELCOME)
    &&  (doc = dsh_proto_decode_body (zmsg_first (reply), error, sizeof (error)))) {
        const msgpack_object *stage = dsh_map_get (dsh_doc_root (doc), "stage");
        const char *feed = dsh_doc_strdup (doc, dsh_map_get (stage, "feed"));
        const char *drain = dsh_doc_strdup (doc, dsh_map_get (stage, "drain"));
        if (feed && drain) {
            char *feed_endpoint = dsh_sock_resolve (feed, broker);
            char *drain_endpoint = dsh_sock_resolve (drain, broker);
            slot = s_slot_new (broker, feed_endpoint, drain_endpoint,
                               dsh_map_int_in (dsh_doc_root (doc), "heartbeatMs", 1, 3600000, DSH_DEFAULT_HEARTBEAT_MS),
                               dsh_map_int_in (dsh_doc_root (doc), "liveness", 1, 1000, DSH_DEFAULT_LIVENESS));
            const char *broker_id = dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "broker"));
            slot->broker_id = broker_id? strdup (broker_id): NULL;
            const char *version = dsh_doc_strdup (doc, dsh_map_get (stage, "chainVersion"));
            slot->chain_version = version? strdup (version): NULL;
            slot->attached = true;
            zstr_free (&feed_endpoint);
            zstr_free (&drain_endpoint);
        }
        else
            zsys_error ("stage %s: the broker at %s has no external stage of that name", self->name, broker);
    }
    else
        zsys_error ("stage %s: bad answer to HELLO from the broker at %s: %s", self->name, broker,
                    *error? error: command);
    dsh_doc_destroy (&doc);
    zmsg_destroy (&envelope);
    return slot;
}

int
dsh_stage_attach (dsh_stage_t *self, const char *broker, int timeout_ms)
{
    assert (self);
    if (self->actor)
        return -1;
    char error [512];
    //  Beacon entries become the brokers heard now, once
    zlistx_t *named = dsh_sock_brokers (broker, error, sizeof (error));
    zlistx_t *brokers = named? dsh_beacon_expand (named, 0, error, sizeof (error)): NULL;
    zlistx_destroy (&named);
    if (!brokers) {
        zsys_error ("stage %s: %s", self->name, error);
        return -1;
    }
    //  HELLO {stage} to every broker at once, each on its own DEALER
    size_t count = zlistx_size (brokers);
    zsock_t *fronts [DSH_BROKERS_MAX] = { NULL };
    const char *names [DSH_BROKERS_MAX] = { NULL };
    s_slot_t *found [DSH_BROKERS_MAX] = { NULL };
    zpoller_t *poller = zpoller_new (NULL);
    size_t index = 0;
    for (const char *name = zlistx_first (brokers); name; name = zlistx_next (brokers), index++) {
        names [index] = name;
        fronts [index] = zsock_new (ZMQ_DEALER);
        dsh_sock_heal (fronts [index], 0, 0);
        dsh_curve_client (fronts [index]);
        if (zsock_connect (fronts [index], "%s", name)) {
            zsys_error ("stage %s: cannot connect to the broker at %s", self->name, name);
            zsock_destroy (&fronts [index]);
            continue;
        }
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        msgpack_pack_map (&packer.pk, 1);
        dsh_packer_kv_str (&packer, "stage", self->name);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        zmsg_t *hello = dsh_proto_message (NULL, DSH_HELLO);
        zmsg_append (hello, &body);
        dsh_sock_send (fronts [index], &hello);
        zpoller_add (poller, fronts [index]);
    }
    size_t answered = 0;
    bool refused = false;
    int64_t deadline = zclock_mono () + timeout_ms;
    while (answered < count && !refused) {
        int64_t left = deadline - zclock_mono ();
        void *which = left > 0? zpoller_wait (poller, (int) left): NULL;
        if (!which)
            break;
        for (index = 0; index < count; index++)
            if (which == fronts [index]) {
                zmsg_t *reply = zmsg_recv (fronts [index]);
                found [index] = reply? s_welcome_slot (self, names [index], reply): NULL;
                zmsg_destroy (&reply);
                refused = found [index] == NULL;
                zpoller_remove (poller, fronts [index]);
                answered++;
            }
    }
    //  A broker that answered without a slot for this stage is a mistake in
    //  the list or the config: no attaching then. One that did not answer
    //  (down, or a standby not up yet) is asked again by the stage, which
    //  attaches there once it answers; the others are served meanwhile
    zlistx_t *slots = s_slots_new ();
    int rc = refused? -1: 0;
    size_t attached = 0;
    for (index = 0; index < count; index++) {
        if (found [index]) {
            zlistx_add_end (slots, found [index]);
            attached++;
        }
        else
        if (!refused && fronts [index]) {
            zsys_warning ("stage %s: no answer from the broker at %s within %d ms; attaching there when it "
                          "answers", self->name, names [index], timeout_ms);
            s_slot_t *later = s_slot_new (names [index], NULL, NULL, DSH_DEFAULT_HEARTBEAT_MS,
                                          DSH_DEFAULT_LIVENESS);
            later->attached = true;
            zlistx_add_end (slots, later);
        }
        zsock_destroy (&fronts [index]);
    }
    if (attached == 0)
        rc = -1;
    zpoller_destroy (&poller);
    if (rc == 0)
        rc = s_stage_start (self, &slots);
    zlistx_destroy (&slots);
    zlistx_destroy (&brokers);
    return rc;
}

int
dsh_stage_start_inline (dsh_stage_t *self, zloop_t *loop, const dsh_stage_host_t *host)
{
    assert (self);
    assert (loop);
    assert (host && host->pass && host->up);
    if (self->actor || self->inline_mode)
        return -1;
    self->inline_mode = true;
    self->host = *host;
    self->loop = loop;
    self->links = zlistx_new ();
    zlistx_add_end (self->links, s_link_new (self, "inline"));
    if (self->callbacks.on_init)
        self->callbacks.on_init (self, self->arg);
    return 0;
}

void
dsh_stage_inline_call (dsh_stage_t *self, uint64_t token, zframe_t **body_p, zframe_t *tool, int64_t deadline_ms)
{
    dsh_stage_inline_call_decoded (self, token, body_p, NULL, NULL, tool, deadline_ms);
}

void
dsh_stage_inline_call_decoded (dsh_stage_t *self, uint64_t token, zframe_t **body_p,
                               dsh_doc_t **doc_p, const dsh_call_head_t *head,
                               zframe_t *tool, int64_t deadline_ms)
{
    assert (self && self->inline_mode);
    assert (body_p && *body_p);
    assert (!doc_p || !*doc_p || head);
    s_call_t *call = s_call_new (self, (s_link_t *) zlistx_first (self->links), *body_p, doc_p, head);
    *body_p = NULL;
    //  A decode the call did not take (none to take) is the host's to free
    if (doc_p)
        dsh_doc_destroy (doc_p);
    call->token = token;
    call->tool = tool? zframe_dup (tool): zframe_new_empty ();
    call->deadline_ms = deadline_ms;
    if (zhashx_lookup (call->link->calls, &call->token)) {
        dsh_log_warning ("stage %s: a second call with one token; dropped", self->name);
        s_call_destroy (&call);
        return;
    }
    s_decide (self, call, self->callbacks.on_request (self, call->reader, self->arg));
}

bool
dsh_stage_inline_result (dsh_stage_t *self, uint64_t token, zframe_t **body_p)
{
    assert (self && self->inline_mode);
    s_link_t *link = (s_link_t *) zlistx_first (self->links);
    s_call_t *call = (s_call_t *) zhashx_lookup (link->calls, &token);
    if (!call || !call->watch || call->deferred || call->result)
        return false;
    s_take_result (self, call, body_p);
    return true;
}

void
dsh_stage_inline_cancel (dsh_stage_t *self, uint64_t token)
{
    assert (self && self->inline_mode);
    s_cancel ((s_link_t *) zlistx_first (self->links), token);
}

zframe_t *
dsh_stage_inline_control (dsh_stage_t *self, zframe_t *body)
{
    assert (self);
    zframe_t *reply = s_control_reply (self, body);
    if (!reply)
        reply = dsh_proto_error_body (NULL, DSH_E_MIDDLEWARE_FAILED, "the stage could not encode its reply");
    return reply;
}

const char *
dsh_stage_name (dsh_stage_t *self)
{
    assert (self);
    return self->name;
}

zloop_t *
dsh_stage_loop (dsh_stage_t *self)
{
    assert (self);
    return self->loop;
}

int
dsh_stage_resume (dsh_stage_t *self, dsh_call_t *call, dsh_stage_verdict_t verdict)
{
    assert (self);
    s_call_t *record = call? s_record (call): NULL;
    if (!record || !record->deferred || verdict == DSH_STAGE_DEFER)
        return -1;
    s_decide (self, record, verdict);
    return 0;
}

int
dsh_stage_resume_result (dsh_stage_t *self, dsh_call_t *call)
{
    assert (self);
    s_call_t *record = call? s_record (call): NULL;
    if (!record || !record->result_deferred)
        return -1;
    s_finish_result (self, record);
    return 0;
}

//  ---------------------------------------------------------------------
//  The call

const msgpack_object *
dsh_stage_call_tool (dsh_call_t *call)
{
    return s_tool (s_record (call));
}

const byte *
dsh_stage_call_tool_bytes (dsh_call_t *call, size_t *size)
{
    assert (size);
    s_call_t *record = s_record (call);
    *size = record->tool? zframe_size (record->tool): 0;
    return *size? zframe_data (record->tool): NULL;
}

int64_t
dsh_stage_call_deadline (dsh_call_t *call)
{
    return s_record (call)->deadline_ms;
}

const char *
dsh_stage_call_chain_version (dsh_call_t *call)
{
    s_call_t *record = s_record (call);
    return record->link? record->link->chain_version: NULL;
}

bool
dsh_stage_call_annotation (dsh_call_t *call, const char *hint, bool fallback)
{
    const msgpack_object *value = dsh_map_get (dsh_map_get (dsh_stage_call_tool (call), "annotations"), hint);
    return value && value->type == MSGPACK_OBJECT_BOOLEAN? value->via.boolean: fallback;
}

void
dsh_stage_call_set_arguments (dsh_call_t *call, const void *arguments, size_t size)
{
    assert (arguments && size);
    s_call_t *record = s_record (call);
    zframe_destroy (&record->new_arguments);
    record->new_arguments = zframe_new (arguments, size);
}

void
dsh_stage_call_set_agent (dsh_call_t *call, const char *agent)
{
    s_call_t *record = s_record (call);
    zstr_free (&record->new_agent);
    record->change_agent = true;
    record->new_agent = agent? strdup (agent): NULL;
}

void
dsh_stage_call_note (dsh_call_t *call, json_t *note)
{
    dsh_stage_t *self = s_record (call)->stage;
    if (note && self->host.note) {
        char *text = json_dumps (note, JSON_COMPACT);
        if (text)
            self->host.note (self->host.arg, s_record (call)->token, text);
        free (text);
    }
    json_decref (note);
}

void
dsh_stage_call_note_text (dsh_call_t *call, const char *note)
{
    assert (note);
    dsh_stage_t *self = s_record (call)->stage;
    if (self->host.note)
        self->host.note (self->host.arg, s_record (call)->token, note);
}

const char *
dsh_stage_control_caller (dsh_stage_t *self)
{
    //  A stage's handler may be driven without a stage (its unit tests)
    return self? self->control_caller: NULL;
}

char *
dsh_stage_strdup (const msgpack_object *value)
{
    if (!value || value->type != MSGPACK_OBJECT_STR || memchr (value->via.str.ptr, 0, value->via.str.size))
        return NULL;
    char *text = (char *) malloc (value->via.str.size + 1);
    assert (text);
    memcpy (text, value->via.str.ptr, value->via.str.size);
    text [value->via.str.size] = 0;
    return text;
}

void
dsh_stage_call_set_meta (dsh_call_t *call, const char *key, const void *value, size_t size)
{
    assert (key);
    assert (!value || size);
    s_call_t *record = s_record (call);
    if (!record->stamps) {
        record->stamps = zhashx_new ();
        zhashx_set_destructor (record->stamps, (zhashx_destructor_fn *) zframe_destroy);
    }
    //  An empty frame stands for a removal
    zhashx_update (record->stamps, key, value? zframe_new (value, size): zframe_new_empty ());
}

void
dsh_stage_call_answer_error (dsh_call_t *call, const char *code, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    char *message = zsys_vprintf (format, args);
    va_end (args);
    char *text = zsys_sprintf ("Error: %s", message? message: "");
    s_call_t *record = s_record (call);
    zframe_destroy (&record->answer);
    record->answer = dsh_proto_error_result (dsh_call_id (call), code, text);
    zstr_free (&text);
    zstr_free (&message);
}

void
dsh_stage_call_answer (dsh_call_t *call, zframe_t **result_p)
{
    assert (result_p);
    s_call_t *record = s_record (call);
    zframe_destroy (&record->answer);
    record->answer = *result_p;
    *result_p = NULL;
}

void
dsh_stage_call_watch_result (dsh_call_t *call)
{
    s_record (call)->watch = true;
}

const msgpack_object *
dsh_stage_call_result (dsh_call_t *call)
{
    s_call_t *record = s_record (call);
    zframe_t *body = record->new_result? record->new_result: record->result;
    if (!record->result_read && body) {
        record->result_read = true;
        char error [128];
        record->result_doc = dsh_proto_decode_body (body, error, sizeof (error));
    }
    return record->result_doc? dsh_doc_root (record->result_doc): NULL;
}

void
dsh_stage_call_set_result (dsh_call_t *call, zframe_t **result_p)
{
    assert (result_p);
    s_call_t *record = s_record (call);
    //  What was read of the result it replaces goes with it
    dsh_doc_destroy (&record->result_doc);
    record->result_read = false;
    zframe_destroy (&record->new_result);
    record->new_result = *result_p;
    *result_p = NULL;
}

void
dsh_stage_call_add_result_text (dsh_call_t *call, const char *text)
{
    const msgpack_object *result = dsh_stage_call_result (call);
    if (!result)
        return;
    const msgpack_object *content = dsh_map_get (result, "content");
    bool has_content = content && content->type == MSGPACK_OBJECT_ARRAY;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    for (uint32_t index = 0; index < result->via.map.size; index++) {
        const msgpack_object_kv *entry = &result->via.map.ptr [index];
        if (&entry->val == content && !has_content)
            continue;           //  not an array: a new one takes its place
        msgpack_pack_object (&packer.pk, entry->key);
        if (&entry->val != content)
            msgpack_pack_object (&packer.pk, entry->val);
        else {
            msgpack_pack_array (&packer.pk, content->via.array.size + 1);
            for (uint32_t block = 0; block < content->via.array.size; block++)
                msgpack_pack_object (&packer.pk, content->via.array.ptr [block]);
            msgpack_pack_map (&packer.pk, 2);
            dsh_packer_kv_str (&packer, "type", "text");
            dsh_packer_kv_str (&packer, "text", text);
        }
    }
    if (!has_content) {
        dsh_pack_cstr (&packer.pk, "content");
        msgpack_pack_array (&packer.pk, 1);
        msgpack_pack_map (&packer.pk, 2);
        dsh_packer_kv_str (&packer, "type", "text");
        dsh_packer_kv_str (&packer, "text", text);
    }
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_stage_call_set_result (call, &body);
}

void
dsh_stage_call_defer_result (dsh_call_t *call)
{
    s_record (call)->result_deferred = true;
}

void
dsh_stage_call_set_data (dsh_call_t *call, void *data, void (*destructor) (void *))
{
    s_call_t *record = s_record (call);
    if (record->data && record->data_destructor)
        record->data_destructor (record->data);
    record->data = data;
    record->data_destructor = destructor;
}

void *
dsh_stage_call_data (dsh_call_t *call)
{
    return s_record (call)->data;
}
