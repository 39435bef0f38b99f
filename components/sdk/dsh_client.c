/*  =========================================================================
    dsh_client - call tools and query the registry through a broker

    A DEALER to the front. Replies are matched to requests by the id the
    client puts in every query body ("id") and by callId for calls; a
    blocking helper keeps the replies it was not waiting for in a stash that
    dsh_client_recv drains first, so mixing both styles loses nothing.

    The call path moves bytes rather than copying them: a CALL goes out as
    parts (a head that lives inside its zmq_msg_t and the codec's body
    frame, uncopied); a reply is received as parts, and its body stays in
    the zmq_msg_t it arrived in, which its document points into. A reply
    waiting already is taken without a poll.
    =========================================================================
*/

#include "dsh_client.h"
#include "dsh_call.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_proto.h"
#include "dsh_render.h"
#include "dsh_sock.h"
#include "dsh_curve.h"
#include "dsh_beacon.h"
#include "dsh_link.h"

//  Time a blocking call waits beyond the call's own deadline, for the
//  broker's TIMEOUT result to arrive first.
#define S_CALL_MARGIN_MS 2000

//  Time a call sent with dsh_client_call_send is waited for beyond its own
//  deadline before the client answers it TIMEOUT itself: the broker's
//  answer was lost (a broker that restarted knows nothing of it). Longer
//  than S_CALL_MARGIN_MS, so the blocking helpers give up first, as they
//  document.
#define S_OPEN_MARGIN_MS 5000

//  Calls given up on whose late answers are still dropped, at most
#define S_GIVEN_UP_MAX 4096

//  How old the list of tools that may be sent again can get before a call
//  asks for it afresh (with several brokers).
#define S_TOOLS_MAX_AGE_MS 30000

struct _dsh_client_t {
    zsock_t *dealer;
    dsh_handshake_t *handshake; //  why the broker does not answer, if it is the keys
    dsh_link_t *link;           //  the brokers to follow, one at a time, and
                                //  when to PING, move on, or call one gone
    const char *endpoint;       //  the one connected to (an item of link's)
    zlistx_t *stash;            //  dsh_reply_t * received while waiting for another
    zlistx_t *made;             //  dsh_reply_t * made here (BROKER_GONE), delivered first
    zhashx_t *cancelled;        //  callId -> "sent" | "answered": calls this client cancelled
    zhashx_t *open_calls;       //  callId -> int64_t *: sent, not yet answered, and
                                //  when the client gives up on it (zclock_mono)
    int64_t next_due_ms;        //  no open call is due before this
    int64_t looked_ms;          //  when the watch last ran, awaiting something
    zhashx_t *given_up;         //  callIds answered TIMEOUT here: what comes later is dropped
    zhashx_t *retained;         //  callId -> s_retained_t *: with several brokers, what
                                //  a failover needs to send an open call again
    zhashx_t *retryable;        //  tool names whose entries say a repeat is harmless
    int64_t tools_asked_ms;     //  when retryable was last asked for, or 0
    uint64_t sequence;          //  for request ids and call ids
    char *prefix;               //  makes this client's call ids unique
    char call_id [DSH_CALL_ID_MAX + 1];
    size_t waiting;             //  blocking requests awaiting their reply
    size_t failovers;           //  brokers given up on, in all
    bool last_reached;          //  the broker last lost had been reached
    size_t handshakes;          //  the handshake watch's count when the
                                //  current broker was connected to
};

//  An open call as sent, kept to send again to the next broker.
typedef struct {
    zmq_msg_t body;             //  shares the sent body's bytes
    char *tool;
    size_t attempts;            //  brokers it has been sent to
} s_retained_t;

static void
s_retained_destroy (s_retained_t **self_p)
{
    if (*self_p) {
        s_retained_t *self = *self_p;
        zmq_msg_close (&self->body);
        zstr_free (&self->tool);
        free (self);
        *self_p = NULL;
    }
}

struct _dsh_reply_t {
    char command [DSH_COMMAND_MAX + 1];
    zmq_msg_t body;             //  the body's bytes; doc points into them
    zframe_t *frame;            //  a copy of them, made for dsh_reply_frame
    dsh_doc_t *doc;
    const char *call_id;
    const char *code;
    const char *text;
    int64_t retry_after_ms;     //  a RESULT's error.retryAfterMs, or -1
    bool is_error;
};

void
dsh_reply_destroy (dsh_reply_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_reply_t *self = *self_p;
        dsh_doc_destroy (&self->doc);
        zmq_msg_close (&self->body);
        zframe_destroy (&self->frame);
        free (self);
        *self_p = NULL;
    }
}

//  The brokers a spec names, as endpoints (beacon entries replaced by
//  the brokers heard); NULL with a reason.
static zlistx_t *
s_brokers_resolve (const char *spec, char *error, size_t error_size)
{
    zlistx_t *named = dsh_sock_brokers (spec, error, error_size);
    zlistx_t *brokers = named? dsh_beacon_expand (named, 0, error, error_size): NULL;
    zlistx_destroy (&named);
    return brokers;
}

static void
s_free (void **item_p)
{
    free (*item_p);
    *item_p = NULL;
}

dsh_client_t *
dsh_client_new (const char *broker)
{
    char error [512];
    zlistx_t *brokers = s_brokers_resolve (broker, error, sizeof (error));
    if (!brokers) {
        zsys_error ("dsh_client: %s", error);
        return NULL;
    }
    dsh_client_t *self = (dsh_client_t *) zmalloc (sizeof (dsh_client_t));
    assert (self);
    self->link = dsh_link_new (DSH_LINK_CLIENT);
    for (const char *entry = zlistx_first (brokers); entry; entry = zlistx_next (brokers))
        dsh_link_add (self->link, entry);
    zlistx_destroy (&brokers);
    self->dealer = zsock_new (ZMQ_DEALER);
    assert (self->dealer);
    dsh_sock_limit (self->dealer, DSH_MAX_MESSAGE_DEFAULT, 100000);
    dsh_sock_heal (self->dealer, dsh_link_heartbeat_ms (self->link), dsh_link_liveness (self->link));
    dsh_curve_client (self->dealer);
    self->handshake = dsh_handshake_new (self->dealer);
    //  The link's first event: CONNECT to the first broker
    dsh_link_start (self->link, zclock_mono ());
    dsh_link_event_t event;
    dsh_link_next (self->link, &event);
    self->endpoint = event.endpoint;
    if (zsock_connect (self->dealer, "%s", self->endpoint)) {
        zsys_error ("dsh_client: cannot connect to %s: %s", self->endpoint, zmq_strerror (errno));
        dsh_client_destroy (&self);
        return NULL;
    }
    self->stash = zlistx_new ();
    zlistx_set_destructor (self->stash, (zlistx_destructor_fn *) dsh_reply_destroy);
    self->made = zlistx_new ();
    zlistx_set_destructor (self->made, (zlistx_destructor_fn *) dsh_reply_destroy);
    self->cancelled = zhashx_new ();
    self->open_calls = zhashx_new ();
    zhashx_set_destructor (self->open_calls, (zhashx_destructor_fn *) s_free);
    self->next_due_ms = INT64_MAX;
    self->given_up = zhashx_new ();
    self->retained = zhashx_new ();
    zhashx_set_destructor (self->retained, (zhashx_destructor_fn *) s_retained_destroy);
    self->retryable = zhashx_new ();
    zuuid_t *uuid = zuuid_new ();
    self->prefix = zsys_sprintf ("call-%.8s-", zuuid_str (uuid));
    zuuid_destroy (&uuid);
    return self;
}

void
dsh_client_destroy (dsh_client_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_client_t *self = *self_p;
        dsh_handshake_destroy (&self->handshake);
        zsock_destroy (&self->dealer);
        zlistx_destroy (&self->stash);
        zlistx_destroy (&self->made);
        zhashx_destroy (&self->cancelled);
        zhashx_destroy (&self->open_calls);
        zhashx_destroy (&self->given_up);
        zhashx_destroy (&self->retained);
        zhashx_destroy (&self->retryable);
        dsh_link_destroy (&self->link);
        zstr_free (&self->prefix);
        free (self);
        *self_p = NULL;
    }
}

const char *
dsh_client_endpoint (dsh_client_t *self)
{
    assert (self);
    return self->endpoint;
}

zsock_t *
dsh_client_sock (dsh_client_t *self)
{
    assert (self);
    return self->dealer;
}

//  Sends "" "DSH1" command body; takes the body.
static int
s_send (dsh_client_t *self, const char *command, zframe_t **body_p)
{
    zmq_msg_t parts [4];
    dsh_sock_head (parts, command);
    dsh_sock_part_frame (&parts [3], body_p);
    return dsh_sock_send_parts (self->dealer, parts, 4);
}

//  Writes "call-<prefix>-<sequence>" into call_id: the one id made per call,
//  so without a printf.
static void
s_make_call_id (dsh_client_t *self)
{
    char digits [20];
    size_t count = 0;
    uint64_t number = ++self->sequence;
    do {
        digits [count++] = (char) ('0' + number % 10);
        number /= 10;
    } while (number);
    char *end = stpcpy (self->call_id, self->prefix);
    while (count)
        *end++ = digits [--count];
    *end = 0;
}

//  Sends a query the client makes for itself: id is its prefix plus a
//  number, so its reply is told from the user's.
static void
s_send_own (dsh_client_t *self, const char *command, const char *prefix)
{
    char id [32];
    snprintf (id, sizeof (id), "%s%" PRIu64, prefix, ++self->sequence);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, "id", id);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    s_send (self, command, &body);
}

#define S_LIVE_PREFIX   "live-"     //  liveness PINGs
#define S_TOOLS_PREFIX  "tools-"    //  which tools may be sent again

static void s_follow (dsh_client_t *self);

//  True if the client awaits anything: then the link watches the broker.
static bool
s_awaiting (dsh_client_t *self)
{
    return self->waiting || zhashx_size (self->open_calls);
}

//  Something is about to be awaited: a wait that begins where none was
//  (the link may not have been told the last one ended) counts the
//  broker's silence from now.
static void
s_watch (dsh_client_t *self)
{
    int64_t now = zclock_mono ();
    //  A watch that begins now was last looked at now (s_check_broker): a
    //  program away from its receive calls after this send is not taken
    //  for a broker's silence, though no receive ran since the last wait
    if (!s_awaiting (self))
        self->looked_ms = now;
    dsh_link_watch (self->link, now, s_awaiting (self));
    dsh_link_watch (self->link, now, true);
    s_follow (self);
}

//  With several brokers, learns (again, if force or it is old) which tools
//  a failed-over call may be sent again for.
static void
s_ask_tools (dsh_client_t *self, bool force)
{
    int64_t now = zclock_mono ();
    if (force || !self->tools_asked_ms || now - self->tools_asked_ms > S_TOOLS_MAX_AGE_MS) {
        s_send_own (self, DSH_LIST, S_TOOLS_PREFIX);
        self->tools_asked_ms = now;
    }
}

const char *
dsh_client_call_send (dsh_client_t *self, const char *call_id, const char *name,
                      const void *args, size_t args_size, const char *agent,
                      const void *meta, size_t meta_size, int timeout_ms)
{
    assert (self);
    assert (name);
    if (call_id)
        snprintf (self->call_id, sizeof (self->call_id), "%s", call_id);
    else
        s_make_call_id (self);
    zframe_t *body = dsh_proto_encode_call (self->call_id, name, args, args_size, agent,
                                            meta, meta_size, timeout_ms > 0? (uint64_t) timeout_ms: 0);
    zmq_msg_t parts [4];
    dsh_sock_head (parts, DSH_CALL);
    dsh_sock_part_frame (&parts [3], &body);
    //  Another broker may get the call if this one goes: keep the bytes
    //  (shared with the sent message, not copied)
    s_retained_t *retained = NULL;
    if (dsh_link_size (self->link) > 1) {
        retained = (s_retained_t *) zmalloc (sizeof (s_retained_t));
        assert (retained);
        zmq_msg_init (&retained->body);
        zmq_msg_copy (&retained->body, &parts [3]);
        retained->tool = strdup (name);
        retained->attempts = 1;
    }
    s_watch (self);
    if (dsh_sock_send_parts (self->dealer, parts, 4)) {
        s_retained_destroy (&retained);
        return NULL;
    }
    //  An id already open stays so, with its deadline: one lookup, not
    //  update's two
    int64_t *due = (int64_t *) malloc (sizeof (int64_t));
    assert (due);
    *due = zclock_mono () + (timeout_ms > 0? timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS) + S_OPEN_MARGIN_MS;
    if (zhashx_insert (self->open_calls, self->call_id, due) == 0) {
        if (*due < self->next_due_ms)
            self->next_due_ms = *due;
    }
    else
        free (due);
    if (retained) {
        zhashx_update (self->retained, self->call_id, retained);
        s_ask_tools (self, false);
    }
    return self->call_id;
}

//  A reply decoded from a command and its body (takes the body's content);
//  NULL if it is malformed.
static dsh_reply_t *
s_reply_new (const char *command, zmq_msg_t *body)
{
    char error [256];
    dsh_reply_t *self = (dsh_reply_t *) zmalloc (sizeof (dsh_reply_t));
    assert (self);
    assert (strlen (command) < sizeof (self->command));
    strcpy (self->command, command);
    self->retry_after_ms = -1;
    //  The reply takes the body before decoding: a short body lives inside
    //  its zmq_msg_t, and the document will point into it
    zmq_msg_init (&self->body);
    zmq_msg_move (&self->body, body);
    self->doc = dsh_doc_new (zmq_msg_data (&self->body), zmq_msg_size (&self->body), error, sizeof (error));
    if (self->doc && dsh_doc_root (self->doc)->type != MSGPACK_OBJECT_MAP) {
        dsh_doc_destroy (&self->doc);
        snprintf (error, sizeof (error), "body is not a map");
    }
    if (!self->doc) {
        dsh_log_warning ("dsh_client: malformed reply ignored: %s", error);
        dsh_reply_destroy (&self);
        return NULL;
    }
    const msgpack_object *root = dsh_doc_root (self->doc);
    if (streq (self->command, DSH_PROGRESS))
        self->call_id = dsh_doc_strdup (self->doc, dsh_map_get (root, "callId"));
    else
    if (streq (self->command, DSH_RESULT)) {
        if (dsh_proto_check_result (root, error, sizeof (error))) {
            dsh_log_warning ("dsh_client: malformed result ignored: %s", error);
            dsh_reply_destroy (&self);
            return NULL;
        }
        //  The check has vouched for isError and content; one pass finds
        //  them and the rest, first key winning as in dsh_map_get
        const msgpack_object *call_id = NULL, *is_error = NULL, *error_map = NULL, *content = NULL;
        for (uint32_t index = 0; index < root->via.map.size; index++) {
            const msgpack_object_kv *entry = &root->via.map.ptr [index];
            if (!call_id && dsh_str_eq (&entry->key, "callId"))
                call_id = &entry->val;
            else
            if (!is_error && dsh_str_eq (&entry->key, "isError"))
                is_error = &entry->val;
            else
            if (!error_map && dsh_str_eq (&entry->key, "error"))
                error_map = &entry->val;
            else
            if (!content && dsh_str_eq (&entry->key, "content"))
                content = &entry->val;
        }
        self->call_id = dsh_doc_strdup (self->doc, call_id);
        self->is_error = is_error->via.boolean;
        self->code = dsh_doc_strdup (self->doc, dsh_map_get (error_map, "code"));
        const msgpack_object *retry = dsh_map_get (error_map, "retryAfterMs");
        if (retry && retry->type == MSGPACK_OBJECT_POSITIVE_INTEGER && retry->via.u64 <= INT64_MAX)
            self->retry_after_ms = (int64_t) retry->via.u64;
        for (uint32_t index = 0; index < content->via.array.size && !self->text; index++) {
            const msgpack_object *block = &content->via.array.ptr [index];
            if (dsh_str_eq (dsh_map_get (block, "type"), "text"))
                self->text = dsh_doc_strdup (self->doc, dsh_map_get (block, "text"));
        }
    }
    else
    if (streq (self->command, DSH_CONTROL)) {
        const msgpack_object *ok = dsh_map_get (root, "ok");
        self->is_error = !(ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean);
        self->text = dsh_doc_strdup (self->doc, dsh_map_get (root, "message"));
    }
    else
    if (streq (self->command, DSH_ERROR)) {
        self->is_error = true;
        self->code = dsh_doc_strdup (self->doc, dsh_map_get (root, "code"));
        self->text = dsh_doc_strdup (self->doc, dsh_map_get (root, "message"));
    }
    return self;
}

//  A new reply decoded from a body frame under command; takes the frame.
static dsh_reply_t *
s_reply_from (const char *command, zframe_t **body_p)
{
    zmq_msg_t body;
    dsh_sock_part_frame (&body, body_p);
    dsh_reply_t *reply = s_reply_new (command, &body);
    zmq_msg_close (&body);
    return reply;
}

//  Once a call is cancelled its caller sees exactly one reply, CANCELLED,
//  whichever of the result and the broker's answer to the cancel comes
//  first; the other is dropped, and so is progress. Returns the reply to
//  deliver, or NULL.
static dsh_reply_t *
s_filter_cancelled (dsh_client_t *self, dsh_reply_t *reply)
{
    //  Most clients never cancel: then there is nothing to look up
    const char *state = reply->call_id && zhashx_size (self->cancelled)?
        (const char *) zhashx_lookup (self->cancelled, reply->call_id): NULL;
    if (!state)
        return reply;
    bool from_broker = streq (reply->command, DSH_RESULT) && reply->code && streq (reply->code, DSH_E_CANCELLED);
    bool answered = streq (state, "answered");
    if (streq (reply->command, DSH_RESULT) && !answered && !from_broker) {
        char *call_id = strdup (reply->call_id);
        zframe_t *body = dsh_proto_error_result (call_id, DSH_E_CANCELLED, "Error: the call was cancelled");
        dsh_reply_destroy (&reply);
        reply = s_reply_from (DSH_RESULT, &body);
        zhashx_update (self->cancelled, call_id, "answered");
        zstr_free (&call_id);
        return reply;
    }
    if (from_broker) {
        //  The broker answers a cancel last: nothing more comes for the call
        zhashx_delete (self->cancelled, reply->call_id);
        if (!answered)
            return reply;
    }
    dsh_reply_destroy (&reply);
    return NULL;
}

zchunk_t *
dsh_client_trace_meta (const dsh_trace_ctx_t *ctx, const void *meta, size_t meta_size)
{
    assert (ctx);
    char error [256];
    dsh_doc_t *doc = meta? dsh_doc_new (meta, meta_size, error, sizeof (error)): NULL;
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    if (meta && (!root || root->type != MSGPACK_OBJECT_MAP)) {
        dsh_doc_destroy (&doc);
        return NULL;
    }
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    for (uint32_t index = 0; root && index < root->via.map.size; index++) {
        const msgpack_object_kv *entry = &root->via.map.ptr [index];
        if (dsh_str_eq (&entry->key, "traceparent") || dsh_str_eq (&entry->key, "tracestate"))
            continue;
        msgpack_pack_object (&packer.pk, entry->key);
        msgpack_pack_object (&packer.pk, entry->val);
    }
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (ctx, traceparent);
    dsh_packer_kv_str (&packer, "traceparent", traceparent);
    if (*ctx->tracestate)
        dsh_packer_kv_str (&packer, "tracestate", ctx->tracestate);
    dsh_packer_map_end (&packer);
    zchunk_t *chunk = zchunk_new (packer.sbuf.data, packer.sbuf.size);
    dsh_packer_release (&packer);
    dsh_doc_destroy (&doc);
    return chunk;
}

int
dsh_client_cancel (dsh_client_t *self, const char *call_id)
{
    assert (self);
    assert (call_id);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, "callId", call_id);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    if (s_send (self, DSH_CANCEL, &body))
        return -1;
    //  A call already answered has had its one reply: the broker's answer
    //  to this cancel will be dropped
    zhashx_update (self->cancelled, call_id, zhashx_lookup (self->open_calls, call_id)? "sent": "answered");
    return 0;
}

//  Handles a reply to a query the client made for itself (s_send_own);
//  returns false for anything else.
static bool
s_own_reply (dsh_client_t *self, dsh_reply_t *reply)
{
    bool pong = streq (reply->command, DSH_PONG);
    bool tools = streq (reply->command, DSH_TOOLS);
    if (!pong && !tools)
        return false;
    const msgpack_object *root = dsh_doc_root (reply->doc);
    const msgpack_object *id = dsh_map_get (root, "id");
    const char *prefix = pong? S_LIVE_PREFIX: S_TOOLS_PREFIX;
    if (!id || id->type != MSGPACK_OBJECT_STR || id->via.str.size < strlen (prefix)
    ||  memcmp (id->via.str.ptr, prefix, strlen (prefix)) != 0)
        return false;
    if (pong) {
        //  The broker's own heartbeat and liveness, as components use, and
        //  its instance: another than the first means it restarted
        dsh_link_pong (self->link, zclock_mono (), dsh_doc_strdup (reply->doc, dsh_map_get (root, "broker")),
                       dsh_map_int_in (root, "heartbeatMs", 10, 3600000, 0),
                       dsh_map_int_in (root, "liveness", 1, 1000, 0));
        s_follow (self);
        return true;
    }
    //  A repeat is harmless for a read-only tool, and for one that says so
    zhashx_purge (self->retryable);
    const msgpack_object *list = dsh_map_get (root, "tools");
    for (uint32_t index = 0; list && list->type == MSGPACK_OBJECT_ARRAY && index < list->via.array.size; index++) {
        const msgpack_object *tool = &list->via.array.ptr [index];
        const msgpack_object *annotations = dsh_map_get (tool, "annotations");
        const msgpack_object *read_only = dsh_map_get (annotations, "readOnlyHint");
        const msgpack_object *idempotent = dsh_map_get (annotations, "idempotentHint");
        bool yes = (read_only && read_only->type == MSGPACK_OBJECT_BOOLEAN && read_only->via.boolean)
                || (idempotent && idempotent->type == MSGPACK_OBJECT_BOOLEAN && idempotent->via.boolean);
        char *name = dsh_doc_strdup (reply->doc, dsh_map_get (tool, "name"));
        if (yes && name)
            zhashx_insert (self->retryable, name, (void *) 1);
    }
    return true;
}

//  UNKNOWN_TOOL from one of several brokers: its view may lack what
//  another's has (it restarted, or lost the component for a while), and
//  nothing ran, so the call may go to the next broker. Done only for the
//  only thing awaited, since moving drops what else is in flight there.
//  True if the call went on (the reply is to be dropped).
static void s_move_calls (dsh_client_t *self, bool resend_all, const char *code, const char *text);

static bool
s_try_elsewhere (dsh_client_t *self, dsh_reply_t *reply)
{
    if (!reply->code || !streq (reply->code, DSH_E_UNKNOWN_TOOL) || !reply->call_id
    ||  dsh_link_size (self->link) < 2 || zhashx_size (self->open_calls) != 1 || self->waiting)
        return false;
    s_retained_t *retained = (s_retained_t *) zhashx_lookup (self->retained, reply->call_id);
    if (!retained || retained->attempts >= dsh_link_size (self->link))
        return false;
    const char *was = self->endpoint;
    char *tool = strdup (retained->tool);
    dsh_link_move (self->link, zclock_mono ());
    s_follow (self);
    s_move_calls (self, true, reply->code, reply->text? reply->text: "Error: unknown tool");
    dsh_log_info ("dsh_client: the broker at %s does not know tool \"%s\"; trying %s", was, tool, self->endpoint);
    zstr_free (&tool);
    return true;
}

//  Takes one message waiting on the socket, if any, as a reply to deliver.
//  Returns 0 with *reply_p set, or NULL if the message was dropped
//  (malformed, or not to be delivered); -1 if nothing was waiting.
static int
s_take_one (dsh_client_t *self, dsh_reply_t **reply_p)
{
    *reply_p = NULL;
    dsh_sock_msg_t msg;
    char error [256];
    int rc = dsh_sock_recv_msg (self->dealer, &msg, error, sizeof (error));
    if (rc && !*error)
        return -1;              //  nothing waiting; errno says why
    //  Anything at all from the broker shows it is there
    dsh_link_heard (self->link, zclock_mono ());
    s_follow (self);
    dsh_reply_t *reply = NULL;
    if (rc == 0 && msg.count - msg.body != 1)
        snprintf (error, sizeof (error), "%s with %zu body frames", msg.command, msg.count - msg.body);
    else
    if (rc == 0)
        reply = s_reply_new (msg.command, &msg.part [msg.body]);
    if (*error)
        dsh_log_warning ("dsh_client: malformed reply ignored: %s", error);
    dsh_sock_msg_close (&msg);
    if (reply && s_own_reply (self, reply))
        dsh_reply_destroy (&reply);
    if (reply && reply->call_id && zhashx_size (self->given_up) && zhashx_lookup (self->given_up, reply->call_id)) {
        //  Answered TIMEOUT here already: its one reply has gone out
        if (streq (reply->command, DSH_RESULT))
            zhashx_delete (self->given_up, reply->call_id);
        dsh_reply_destroy (&reply);
    }
    if (reply)
        reply = s_filter_cancelled (self, reply);
    if (reply && s_try_elsewhere (self, reply))
        dsh_reply_destroy (&reply);
    if (reply && reply->call_id && streq (reply->command, DSH_RESULT)) {
        zhashx_delete (self->open_calls, reply->call_id);
        if (zhashx_size (self->retained))
            zhashx_delete (self->retained, reply->call_id);
    }
    *reply_p = reply;
    return 0;
}

//  The result made here for an open call the broker will not answer.
static dsh_reply_t *
s_made_result (const char *call_id, const char *code, const char *text)
{
    zframe_t *body = dsh_proto_error_result (call_id, code, text);
    return s_reply_from (DSH_RESULT, &body);
}

//  True if a connection to the current broker has been made since the
//  client connected to it: until then nothing sent can have reached it.
//  The link counts the broker's silence from when the connection is seen
//  to come up, not from the send: on a lossy link the TCP and ZMTP
//  handshakes alone may take longer than the liveness window.
static bool
s_reached (dsh_client_t *self)
{
    if (!dsh_link_reached (self->link)
    &&  (!self->handshake || dsh_handshake_successes (self->handshake) > self->handshakes)) {
        dsh_link_connected (self->link, zclock_mono ());
        s_follow (self);
    }
    return dsh_link_reached (self->link);
}

//  The client has left its broker for the next in its list (or, with one
//  broker, connected to it afresh), having said why. Each open call is sent
//  again to the next broker if that is safe, else answered here: safe is
//  a call that cannot have run (resend_all: the broker was never reached,
//  or it answered UNKNOWN_TOOL to the only call open) or one to a tool
//  whose entry says it is read-only or idempotent; and only until every
//  broker has had it. The others get code, with text.
static void
s_move_calls (dsh_client_t *self, bool resend_all, const char *code, const char *text)
{
    size_t count = dsh_link_size (self->link);
    self->failovers++;
    zlistx_t *call_ids = zhashx_keys (self->open_calls);
    for (const char *call_id = zlistx_first (call_ids); call_id; call_id = zlistx_next (call_ids)) {
        s_retained_t *retained = (s_retained_t *) zhashx_lookup (self->retained, call_id);
        if (retained && retained->attempts < count && !zhashx_lookup (self->cancelled, call_id)
        &&  (resend_all || zhashx_lookup (self->retryable, retained->tool))) {
            zmq_msg_t parts [4];
            dsh_sock_head (parts, DSH_CALL);
            zmq_msg_init (&parts [3]);
            zmq_msg_copy (&parts [3], &retained->body);
            if (dsh_sock_send_parts (self->dealer, parts, 4) == 0) {
                retained->attempts++;
                continue;
            }
        }
        bool cancelled = zhashx_lookup (self->cancelled, call_id) != NULL;
        dsh_reply_t *reply = cancelled?
            s_made_result (call_id, DSH_E_CANCELLED, "Error: the call was cancelled"):
            s_made_result (call_id, code, text);
        if (reply)
            zlistx_add_end (self->made, reply);
        zhashx_delete (self->open_calls, call_id);
        zhashx_delete (self->retained, call_id);
    }
    zlistx_destroy (&call_ids);
    //  The old broker's answers to cancels, and to calls given up on, will
    //  never come
    zhashx_purge (self->cancelled);
    zhashx_purge (self->given_up);
    if (count > 1)
        s_ask_tools (self, true);
}

//  The broker was given up on (event): silent past the liveness window
//  (or, with other brokers to go to, never reached within a heartbeat):
//  it died, its host or the link went, or it is wedged; or it answered
//  PING under another instance id than it did first on this connection:
//  it restarted since. Its calls will get no answer: each is sent again
//  or answered BROKER_GONE (s_move_calls), now that the link has moved.
static void
s_broker_lost (dsh_client_t *self, const dsh_link_event_t *event)
{
    char text [400];
    size_t open = zhashx_size (self->open_calls);
    self->last_reached = event->type == DSH_LINK_RESTARTED || event->reached;
    if (event->type == DSH_LINK_RESTARTED) {
        snprintf (text, sizeof (text), "Error: the broker at %.200s restarted with the call in flight",
                  event->endpoint);
        dsh_log_warning ("dsh_client: the broker at %s restarted (instance %.36s, was %.36s); %zu call(s) were open",
                         event->endpoint, event->instance, event->was, open);
        s_move_calls (self, false, DSH_E_BROKER_GONE, text);
        return;
    }
    snprintf (text, sizeof (text), "Error: the broker at %.200s went silent (no answer for %" PRId64
              " ms) with the call in flight", event->endpoint, event->silence_ms);
    s_move_calls (self, !event->reached, DSH_E_BROKER_GONE, text);
    dsh_log_warning ("dsh_client: %s the broker at %s for %" PRId64 " ms; %zu call(s) were open; now using %s",
                     event->reached? "no answer from": "no connection to", event->endpoint, event->silence_ms,
                     open, self->endpoint);
}

//  Does what the link says, in order. A broker lost is dealt with once
//  the link's events are all done, on the connection to the next one.
static void
s_follow (dsh_client_t *self)
{
    dsh_link_event_t event, lost = { 0 };
    while (dsh_link_next (self->link, &event) == 0) {
        if (event.type == DSH_LINK_CONNECT) {
            zsock_disconnect (self->dealer, "%s", self->endpoint);
            self->endpoint = event.endpoint;
            self->handshakes = self->handshake? dsh_handshake_successes (self->handshake): 0;
            zsock_connect (self->dealer, "%s", self->endpoint);
        }
        else
        if (event.type == DSH_LINK_SEND_PING)
            s_send_own (self, DSH_PING, S_LIVE_PREFIX);
        else
        if (event.type == DSH_LINK_DOWN || event.type == DSH_LINK_RESTARTED)
            lost = event;
    }
    if (lost.type)
        s_broker_lost (self, &lost);
}

//  Answers TIMEOUT here each call past its own deadline and the margin
//  (S_OPEN_MARGIN_MS): the broker's answer is not coming. Returns when the
//  next open call is due.
static int64_t
s_expire_calls (dsh_client_t *self, int64_t now)
{
    if (now < self->next_due_ms)
        return self->next_due_ms;
    self->next_due_ms = INT64_MAX;
    zlistx_t *call_ids = zhashx_keys (self->open_calls);
    for (const char *call_id = zlistx_first (call_ids); call_id; call_id = zlistx_next (call_ids)) {
        int64_t due = *(int64_t *) zhashx_lookup (self->open_calls, call_id);
        if (due > now) {
            if (due < self->next_due_ms)
                self->next_due_ms = due;
            continue;
        }
        //  A call cancelled is answered as one, here as in s_move
        bool cancelled = zhashx_lookup (self->cancelled, call_id) != NULL;
        dsh_reply_t *reply = cancelled?
            s_made_result (call_id, DSH_E_CANCELLED, "Error: the call was cancelled"):
            s_made_result (call_id, DSH_E_TIMEOUT, "Error: no answer from the broker by the call's deadline");
        zhashx_delete (self->cancelled, call_id);
        if (reply)
            zlistx_add_end (self->made, reply);
        if (zhashx_size (self->given_up) >= S_GIVEN_UP_MAX)
            zhashx_purge (self->given_up);
        zhashx_insert (self->given_up, call_id, (void *) 1);
        zhashx_delete (self->open_calls, call_id);
        zhashx_delete (self->retained, call_id);
    }
    zlistx_destroy (&call_ids);
    return self->next_due_ms;
}

//  Keeps an eye on the broker while anything is awaited (the link PINGs
//  it after a heartbeat of silence, gives it up after the liveness
//  window), and gives up on calls past their deadlines. Returns when it
//  next needs to look.
static int64_t
s_check_broker (dsh_client_t *self, int64_t now)
{
    if (!s_awaiting (self)) {
        dsh_link_watch (self->link, now, false);
        self->looked_ms = 0;
        return INT64_MAX;
    }
    //  The watch runs inside the receive calls. A program that was away
    //  from them for more than a heartbeat sent no PING meanwhile, so the
    //  silence says nothing about the broker: the watch begins afresh, and
    //  the broker has its whole window to answer
    if (self->looked_ms && now - self->looked_ms > dsh_link_heartbeat_ms (self->link)) {
        dsh_link_watch (self->link, now, false);
        dsh_link_watch (self->link, now, true);
    }
    self->looked_ms = now;
    int64_t expiry_due = s_expire_calls (self, now);
    if (zlistx_size (self->made))
        return now;
    s_reached (self);
    int64_t due = dsh_link_tick (self->link, now);
    s_follow (self);
    if (zlistx_size (self->made))
        return now;
    return due < expiry_due? due: expiry_due;
}

//  Receives one reply from the socket, waiting at most timeout_ms, and
//  watches the broker meanwhile (s_check_broker): a reply made for a call
//  the broker will not answer comes out here like any other.
static dsh_reply_t *
s_recv_socket (dsh_client_t *self, int timeout_ms)
{
    int64_t give_up = 0;
    while (true) {
        dsh_reply_t *reply = (dsh_reply_t *) zlistx_first (self->made);
        if (reply) {
            zlistx_detach_cur (self->made);
            return reply;
        }
        //  A reply that is waiting already needs no poll
        if (s_take_one (self, &reply) == 0) {
            if (reply)
                return reply;
            continue;
        }
        if (errno != EAGAIN)
            return NULL;
        int64_t now = zclock_mono ();
        if (!give_up)
            give_up = now + timeout_ms;
        int64_t check = s_check_broker (self, now);
        if (zlistx_size (self->made))
            continue;
        int64_t left = give_up - now;
        if (left <= 0)
            return NULL;
        if (check - now < left)
            left = check - now > 0? check - now: 0;
        zmq_pollitem_t item = { zsock_resolve (self->dealer), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, (long) left) < 0)
            return NULL;
    }
}

dsh_reply_t *
dsh_client_recv (dsh_client_t *self, int timeout_ms)
{
    assert (self);
    dsh_reply_t *reply = (dsh_reply_t *) zlistx_first (self->stash);
    if (reply) {
        zlistx_detach_cur (self->stash);
        return reply;
    }
    return s_recv_socket (self, timeout_ms);
}

const char *
dsh_client_handshake_failure (dsh_client_t *self)
{
    assert (self);
    return self->handshake? dsh_handshake_failure (self->handshake): NULL;
}

bool
dsh_client_connected (dsh_client_t *self)
{
    assert (self);
    return s_reached (self);
}

void
dsh_client_explain_silence (dsh_client_t *self, int wait_ms, char *error, size_t error_size)
{
    assert (self);
    const char *failure = dsh_client_handshake_failure (self);
    const char *progress = self->handshake && !s_reached (self)? dsh_handshake_progress (self->handshake): NULL;
    if (failure)
        snprintf (error, error_size, "cannot talk to broker at %s: %s", self->endpoint, failure);
    else
    if (progress)
        snprintf (error, error_size, "no reply from broker at %s within %d ms: %s", self->endpoint, wait_ms, progress);
    else
        snprintf (error, error_size, "no reply from broker at %s within %d ms", self->endpoint, wait_ms);
}

//  Waits until give_up (a zclock_mono time) for the reply that match
//  accepts, stashing the others. Gives up early if the handshake with the
//  broker failed (no reply can come), and, if until_failover, as soon as
//  the client gives up on its broker.
static dsh_reply_t *
s_wait_for (dsh_client_t *self, bool (*match) (dsh_reply_t *, const char *), const char *key,
            int64_t give_up, bool until_failover)
{
    size_t failovers = self->failovers;
    while (true) {
        int64_t left = give_up - zclock_mono ();
        if (left < 0 || dsh_client_handshake_failure (self) || (until_failover && self->failovers != failovers))
            return NULL;
        dsh_reply_t *reply = s_recv_socket (self, left < 250? (int) left: 250);
        if (!reply)
            continue;
        if (match (reply, key))
            return reply;
        if (streq (reply->command, DSH_PROGRESS) && reply->call_id && streq (reply->call_id, key))
            //  A blocking call has nobody to show its progress to
            dsh_reply_destroy (&reply);
        else
            zlistx_add_end (self->stash, reply);
    }
}

static bool
s_match_call (dsh_reply_t *reply, const char *call_id)
{
    if (streq (reply->command, DSH_RESULT))
        return reply->call_id && streq (reply->call_id, call_id);
    //  An ERROR to a CALL carries no callId: the only calls that get one
    //  are ones the broker could not read, and ours are always readable
    return false;
}

static bool
s_match_id (dsh_reply_t *reply, const char *id)
{
    return dsh_str_eq (dsh_map_get (dsh_doc_root (reply->doc), "id"), id);
}

dsh_reply_t *
dsh_client_call (dsh_client_t *self, const char *name, const char *args_json, const char *agent,
                 int timeout_ms, char *error, size_t error_size)
{
    assert (self);
    assert (name);
    msgpack_sbuffer args;
    if (dsh_json_text_to_msgpack (args_json? args_json: "{}", &args, error, error_size)) {
        msgpack_sbuffer_destroy (&args);
        return NULL;
    }
    const char *call_id = dsh_client_call_send (self, NULL, name, args.data, args.size, agent,
                                                NULL, 0, timeout_ms);
    msgpack_sbuffer_destroy (&args);
    if (!call_id) {
        snprintf (error, error_size, "cannot send to broker at %s: %s", self->endpoint, zmq_strerror (errno));
        return NULL;
    }
    char *waiting_for = strdup (call_id);
    int wait_ms = (timeout_ms > 0? timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS) + S_CALL_MARGIN_MS;
    dsh_reply_t *reply = s_wait_for (self, s_match_call, waiting_for, zclock_mono () + wait_ms, false);
    if (!reply) {
        //  Given up on: whatever comes for it later is a stray
        zhashx_delete (self->open_calls, waiting_for);
        dsh_client_explain_silence (self, wait_ms, error, error_size);
    }
    zstr_free (&waiting_for);
    return reply;
}

//  The answer made here to a command that decides (a CONTROL, a PINS
//  accept, reject or forget) whose broker was lost (silent or restarted)
//  once reached: it may have applied there, so it is not sent again, where
//  it could apply twice.
static dsh_reply_t *
s_decision_lost (const char *command, const char *endpoint, const char *id)
{
    char text [400];
    snprintf (text, sizeof (text), "Error: the broker at %.200s was lost with the %s in flight; "
              "it may or may not have been applied", endpoint, command);
    msgpack_object id_object = { .type = MSGPACK_OBJECT_STR };
    id_object.via.str.ptr = id;
    id_object.via.str.size = (uint32_t) strlen (id);
    zframe_t *body = dsh_proto_error_body (&id_object, DSH_E_BROKER_GONE, text);
    return s_reply_from (DSH_ERROR, &body);
}

//  Sends a query whose body carries id, and waits at most timeout_ms for
//  its reply. A query that only reads is harmless to repeat, so if the
//  broker goes silent meanwhile it is sent to the next broker, until every
//  broker has had it; one that decides is not, unless that broker was
//  never reached (s_decision_lost). Takes the body.
static dsh_reply_t *
s_query (dsh_client_t *self, const char *command, bool decides, zframe_t **body_p, const char *id,
         int timeout_ms, char *error, size_t error_size)
{
    zframe_t *body = *body_p;
    *body_p = NULL;
    s_watch (self);
    self->waiting++;
    int64_t give_up = zclock_mono () + timeout_ms;
    size_t count = dsh_link_size (self->link);
    dsh_reply_t *reply = NULL;
    for (size_t attempt = 0; !reply && attempt < count; attempt++) {
        zframe_t *copy = zframe_dup (body);
        int rc = s_send (self, command, &copy);
        //  No connection up yet (its handshake still runs, or failed): wait
        //  a little for one, hearing what the socket says, and try again,
        //  so a refusal is told as one (the broker requires CURVE, ...),
        //  not as "cannot send"
        while (rc && errno == EAGAIN && zclock_mono () < give_up && !dsh_client_handshake_failure (self)) {
            int64_t pause = zclock_mono () + 50;
            dsh_reply_t *early = s_wait_for (self, s_match_id, id, pause < give_up? pause: give_up, false);
            if (early)
                zlistx_add_end (self->stash, early);
            copy = zframe_dup (body);
            rc = s_send (self, command, &copy);
        }
        if (rc) {
            if (dsh_client_handshake_failure (self))
                dsh_client_explain_silence (self, timeout_ms, error, error_size);
            else
                snprintf (error, error_size, "cannot send to broker at %s: %s", self->endpoint, zmq_strerror (errno));
            break;
        }
        size_t failovers = self->failovers;
        const char *sent_to = self->endpoint;
        reply = s_wait_for (self, s_match_id, id, give_up, true);
        if (!reply && self->failovers == failovers) {
            dsh_client_explain_silence (self, timeout_ms, error, error_size);
            break;
        }
        if (!reply && self->last_reached && decides) {
            reply = s_decision_lost (command, sent_to, id);
            break;
        }
        if (!reply && attempt + 1 == count)
            snprintf (error, error_size, "no answer from %s: silent past the liveness window",
                      count > 1? "any broker in the list": self->endpoint);
    }
    self->waiting--;
    zframe_destroy (&body);
    return reply;
}

dsh_reply_t *
dsh_client_request (dsh_client_t *self, const char *command, const char *name, int timeout_ms,
                    char *error, size_t error_size)
{
    assert (self);
    assert (command);
    char id [32];
    snprintf (id, sizeof (id), "q%" PRIu64, ++self->sequence);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "id", id);
    if (name)
        dsh_packer_kv_str (&packer, "name", name);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return s_query (self, command, false, &body, id, timeout_ms, error, error_size);
}

dsh_reply_t *
dsh_client_query (dsh_client_t *self, const char *command, const json_t *body, int timeout_ms,
                  char *error, size_t error_size)
{
    assert (self);
    assert (command && json_is_object (body));
    char id [32];
    snprintf (id, sizeof (id), "q%" PRIu64, ++self->sequence);
    json_t *request = json_deep_copy (body);
    json_object_set_new (request, "id", json_string (id));
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    int rc = request? dsh_json_to_msgpack (&packer.pk, request): -1;
    json_decref (request);
    zframe_t *frame = rc == 0? dsh_packer_frame (&packer): NULL;
    dsh_packer_release (&packer);
    if (!frame) {
        snprintf (error, error_size, "the %s request cannot be encoded", command);
        return NULL;
    }
    //  A CONTROL, and a PINS that is not a list or show, change state
    const char *op = json_string_value (json_object_get (body, "op"));
    bool decides = streq (command, DSH_CONTROL)
                || (streq (command, DSH_PINS) && op && !streq (op, "list") && !streq (op, "show"));
    return s_query (self, command, decides, &frame, id, timeout_ms, error, error_size);
}

dsh_reply_t *
dsh_client_control (dsh_client_t *self, const char *stage, const char *command, json_t *args,
                    int timeout_ms, char *error, size_t error_size)
{
    assert (self);
    assert (stage && command);
    json_t *body = json_pack ("{s:s, s:s, s:O}", "stage", stage, "command", command, "args", args? args: json_null ());
    if (!body) {
        snprintf (error, error_size, "the control command's arguments cannot be encoded");
        return NULL;
    }
    dsh_reply_t *reply = dsh_client_query (self, DSH_CONTROL, body, timeout_ms, error, error_size);
    json_decref (body);
    return reply;
}

//  The time left until deadline, at least 1 ms so a late query still
//  answers with a timeout rather than waiting for nothing.
static int
s_time_left (int64_t deadline)
{
    int64_t left = deadline - zclock_mono ();
    return left > 0? (int) left: 1;
}

json_t *
dsh_client_allowed (dsh_client_t *self, const char *agent, const json_t *entries, int timeout_ms,
                    char *error, size_t error_size)
{
    assert (self);
    if (!json_is_array (entries)) {
        snprintf (error, error_size, "the tool entries must be a JSON array");
        return NULL;
    }
    int64_t deadline = zclock_mono () + (timeout_ms > 0? timeout_ms: 5000);
    dsh_reply_t *reply = dsh_client_request (self, DSH_CHAIN, NULL, s_time_left (deadline), error, error_size);
    json_t *chain = reply? dsh_reply_json (reply): NULL;
    dsh_reply_destroy (&reply);
    json_t *stages = json_object_get (chain, "stages");
    if (!json_is_array (stages)) {
        if (chain)
            snprintf (error, error_size, "the broker's CHAIN reply has no stages");
        json_decref (chain);
        return NULL;
    }
    //  A quarantined tool is no stage's to offer: an admin has not
    //  accepted what it says it is
    json_t *kept = json_array ();
    for (size_t entry = 0; entry < json_array_size (entries); entry++)
        if (!dsh_render_quarantined (json_array_get (entries, entry)))
            json_array_append (kept, json_array_get (entries, entry));
    //  In chain order, each stage judges what the ones before it kept. A
    //  stage that does not answer "allowed" (no such command, another kind)
    //  judges nothing: this is for listing, and the chain still decides
    //  every call
    for (size_t index = 0; index < json_array_size (stages) && json_array_size (kept); index++) {
        const char *stage = json_string_value (json_object_get (json_array_get (stages, index), "name"));
        if (!stage)
            continue;
        json_t *args = json_pack ("{s:O}", "tools", kept);
        if (agent)
            json_object_set_new (args, "agent", json_string (agent));
        char reason [256];
        reply = dsh_client_control (self, stage, "allowed", args, s_time_left (deadline), reason, sizeof (reason));
        json_decref (args);
        json_t *answer = reply && !dsh_reply_is_error (reply)? dsh_reply_json (reply): NULL;
        dsh_reply_destroy (&reply);
        json_t *names = json_object_get (answer, "data");
        if (json_is_true (json_object_get (answer, "ok")) && json_is_array (names)) {
            json_t *still = json_array ();
            for (size_t entry = 0; entry < json_array_size (kept); entry++) {
                json_t *tool = json_array_get (kept, entry);
                json_t *name = json_object_get (tool, "name");
                for (size_t other = 0; other < json_array_size (names); other++)
                    if (json_equal (name, json_array_get (names, other))) {
                        json_array_append (still, tool);
                        break;
                    }
            }
            json_decref (kept);
            kept = still;
        }
        json_decref (answer);
    }
    json_decref (chain);
    return kept;
}

//  Which tools may run side by side, from the registry's own entries.
static zhashx_t *
s_safe_tools (dsh_client_t *self, char *error, size_t error_size)
{
    dsh_reply_t *reply = dsh_client_request (self, DSH_LIST, NULL, 5000, error, error_size);
    if (!reply)
        return NULL;
    zhashx_t *safe = zhashx_new ();
    const msgpack_object *tools = dsh_map_get (dsh_reply_body (reply), "tools");
    for (uint32_t index = 0; tools && tools->type == MSGPACK_OBJECT_ARRAY && index < tools->via.array.size; index++) {
        const msgpack_object *tool = &tools->via.array.ptr [index];
        const msgpack_object *flag = dsh_map_get (tool, "concurrencySafe");
        const msgpack_object *read_only = dsh_map_get (dsh_map_get (tool, "annotations"), "readOnlyHint");
        bool yes = (flag && flag->type == MSGPACK_OBJECT_BOOLEAN && flag->via.boolean)
                || (read_only && read_only->type == MSGPACK_OBJECT_BOOLEAN && read_only->via.boolean);
        char *name = dsh_doc_strdup (reply->doc, dsh_map_get (tool, "name"));
        if (yes && name)
            zhashx_insert (safe, name, (void *) 1);
    }
    dsh_reply_destroy (&reply);
    return safe;
}

//  Sends calls [first, last) at once and collects their results into
//  results, by position.
static void
s_run_group (dsh_client_t *self, const json_t *calls, size_t first, size_t last, const char *agent,
             int timeout_ms, json_t *results)
{
    zhashx_t *waiting = zhashx_new ();         //  callId -> position + 1
    for (size_t index = first; index < last; index++) {
        json_t *call = json_array_get (calls, index);
        const char *name = json_string_value (json_object_get (call, "name"));
        json_t *arguments = json_object_get (call, "arguments");
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        if (arguments)
            dsh_json_to_msgpack (&packer.pk, arguments);
        else
            msgpack_pack_map (&packer.pk, 0);
        const char *call_id = dsh_client_call_send (self, NULL, name, packer.sbuf.data, packer.sbuf.size,
                                                    agent, NULL, 0, timeout_ms);
        dsh_packer_release (&packer);
        if (call_id)
            zhashx_insert (waiting, call_id, (void *) (index + 1));
    }
    int wait_ms = (timeout_ms > 0? timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS) + S_CALL_MARGIN_MS;
    int64_t give_up = zclock_mono () + wait_ms;
    //  Replies stashed by an earlier wait may be ours
    dsh_reply_t *reply = (dsh_reply_t *) zlistx_first (self->stash);
    while (reply) {
        size_t position = reply->call_id && streq (reply->command, DSH_RESULT)?
            (size_t) zhashx_lookup (waiting, reply->call_id): 0;
        if (position) {
            json_array_set_new (results, position - 1, dsh_reply_json (reply));
            zhashx_delete (waiting, reply->call_id);
            //  Deleting at the cursor is safe while walking forward
            zlistx_delete (self->stash, zlistx_cursor (self->stash));
        }
        reply = (dsh_reply_t *) zlistx_next (self->stash);
    }
    while (zhashx_size (waiting) && zclock_mono () < give_up) {
        reply = s_recv_socket (self, (int) (give_up - zclock_mono ()));
        if (!reply)
            break;
        size_t position = reply->call_id && streq (reply->command, DSH_RESULT)?
            (size_t) zhashx_lookup (waiting, reply->call_id): 0;
        if (position) {
            json_array_set_new (results, position - 1, dsh_reply_json (reply));
            zhashx_delete (waiting, reply->call_id);
            dsh_reply_destroy (&reply);
        }
        else
        if (streq (reply->command, DSH_PROGRESS) && reply->call_id && zhashx_lookup (waiting, reply->call_id))
            dsh_reply_destroy (&reply);
        else
            zlistx_add_end (self->stash, reply);
    }
    zhashx_destroy (&waiting);
}

json_t *
dsh_client_batch (dsh_client_t *self, const json_t *calls, const char *agent, int timeout_ms,
                  char *error, size_t error_size)
{
    assert (self);
    if (!json_is_array (calls)) {
        snprintf (error, error_size, "a batch is a JSON array of {\"name\": ..., \"arguments\": {...}}");
        return NULL;
    }
    for (size_t index = 0; index < json_array_size (calls); index++) {
        json_t *call = json_array_get (calls, index);
        const char *name = json_string_value (json_object_get (call, "name"));
        json_t *arguments = json_object_get (call, "arguments");
        if (!json_is_object (call) || !name || (arguments && !json_is_object (arguments))) {
            snprintf (error, error_size, "batch entry %zu needs a string \"name\" and an object \"arguments\"",
                      index + 1);
            return NULL;
        }
    }
    zhashx_t *safe = s_safe_tools (self, error, error_size);
    if (!safe)
        return NULL;
    json_t *results = json_array ();
    for (size_t index = 0; index < json_array_size (calls); index++)
        json_array_append_new (results, json_null ());
    size_t first = 0;
    while (first < json_array_size (calls)) {
        //  A run of concurrency-safe calls goes at once; anything else alone
        size_t last = first + 1;
        const char *name = json_string_value (json_object_get (json_array_get (calls, first), "name"));
        if (zhashx_lookup (safe, name))
            while (last < json_array_size (calls)
            &&     zhashx_lookup (safe, json_string_value (json_object_get (json_array_get (calls, last), "name"))))
                last++;
        s_run_group (self, calls, first, last, agent, timeout_ms, results);
        first = last;
    }
    for (size_t index = 0; index < json_array_size (results); index++)
        if (json_is_null (json_array_get (results, index)))
            json_array_set_new (results, index, json_pack ("{s:s, s:[{s:s, s:s}], s:b, s:{s:s, s:s}}",
                "callId", "", "content", "type", "text", "text", "Error: no answer from the broker by the call's deadline",
                "isError", 1, "error", "name", dsh_proto_error_name (DSH_E_TIMEOUT), "code", DSH_E_TIMEOUT));
    zhashx_destroy (&safe);
    return results;
}

const char *
dsh_reply_command (dsh_reply_t *self)
{
    assert (self);
    return self->command;
}

const msgpack_object *
dsh_reply_body (dsh_reply_t *self)
{
    assert (self);
    return dsh_doc_root (self->doc);
}

zframe_t *
dsh_reply_frame (dsh_reply_t *self)
{
    assert (self);
    if (!self->frame)
        self->frame = zframe_new (zmq_msg_data (&self->body), zmq_msg_size (&self->body));
    return self->frame;
}

json_t *
dsh_reply_json (dsh_reply_t *self)
{
    assert (self);
    return dsh_json_from_msgpack (dsh_doc_root (self->doc));
}

const char *
dsh_reply_call_id (dsh_reply_t *self)
{
    assert (self);
    return self->call_id;
}

bool
dsh_reply_is_error (dsh_reply_t *self)
{
    assert (self);
    return self->is_error;
}

const char *
dsh_reply_error_code (dsh_reply_t *self)
{
    assert (self);
    return self->code;
}

int64_t
dsh_reply_retry_after_ms (dsh_reply_t *self)
{
    assert (self);
    return self->retry_after_ms;
}

int
dsh_reply_trace (dsh_reply_t *self, dsh_trace_ctx_t *ctx)
{
    assert (self);
    assert (ctx);
    if (!streq (self->command, DSH_RESULT))
        return -1;
    return dsh_call_trace_from (dsh_doc_root (self->doc), ctx);
}

const char *
dsh_reply_text (dsh_reply_t *self)
{
    assert (self);
    return self->text;
}
