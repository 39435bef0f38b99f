/*  =========================================================================
    dsh_provider - serve tools to dsh brokers from any process

    The provider object is a thin handle on an actor. The actor owns a link
    per broker it follows (a DEALER to the front while it finds the broker,
    a DEALER to the work socket, a PUB to the announce socket), the tool
    table, and one dsh_pool of workers for every link. Its loop only moves messages: it
    decodes a CALL once, finds the tool, and hands the decoded call to a
    worker; the worker validates the arguments (typed tools), runs the
    handler and encodes the result; the loop sends it back on the link the
    call came from. See PROTOCOL.md, "Component lifecycle".

    A link knows its broker is there by hearing from it on WORK: the broker
    answers every HEARTBEAT there. A link that hears nothing for the
    broker's liveness window drops its sockets and finds the broker again
    from its front (it may have restarted on other ports, or moved). When
    to say HELLO and HEARTBEAT, and when silence means the broker is lost,
    is the link's session's to say (dsh_link, PROTOCOL.md "Client
    liveness"); the link keeps the sockets.

    On the call path nothing is copied that can be moved: the CALL body
    stays in the zmq_msg_t it arrived in (the call's strings point into
    it), the result is packed straight into the zmq_msg_t that is sent, and
    calls are found by their link and broker token, no string.
    =========================================================================
*/

#include "dsh_provider.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_pool.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_curve.h"
#include "dsh_beacon.h"
#include "dsh_link.h"
#include "dsh_trace.h"

#include <stdatomic.h>

#define S_QUEUE_LIMIT           10000   //  socket high-water marks
#define S_DEFAULT_WORKERS       4
#define S_DEFAULT_QUEUE_LIMIT   1024    //  calls waiting for a worker
//  A change at run time is announced once changes stop for a moment (the
//  wait starts again at each: a program adding tools in a loop sends one
//  ANNOUNCE, not one per add), but never later than a while after the
//  first change not announced yet, so a steady stream still announces
#define S_ANNOUNCE_QUIET_MS     10
#define S_ANNOUNCE_MAX_WAIT_MS  250
//  A held provider that nobody starts starts by itself once its adds have
//  stopped this long: far longer than a loop of adds pauses between two,
//  even on a loaded machine (each add is one round trip to the actor), and
//  short enough that a program that never calls dsh_provider_start is
//  served within a second of its last add
#define S_HELD_IDLE_MS          500
//  ... or this long after it was made, if nothing is added at all (a
//  program that adds its tools later still joins, with none)
#define S_HELD_UNUSED_MS        2000
#define S_SHUTDOWN_GRACE_MS     1000
#define S_BATCH                 64      //  messages handled per wakeup, at most
//  An ANNOUNCE's body stays this far under the broker's maxMessageBytes:
//  room for what the transport adds to a frame
#define S_ANNOUNCE_MARGIN       256

struct _dsh_provider_t {
    zactor_t *actor;
    char *id;
};

typedef struct {
    char *name;
    zchunk_t *entry;                //  msgpack of the wire tool entry
    const dsh_param_t *params;      //  typed tools: the spec; else NULL
    bool typed;
    dsh_handler_fn *handler;
    void *arg;
} s_tool_t;

//  What workers hand back to the loop: a finished job, or a progress note.
typedef enum { S_JOB = 1, S_NOTE } s_kind_t;

//  Who holds a job: a worker (queued or running its handler), the handler's
//  own code (deferred), or nobody any more (finished: back to the loop).
enum { S_WITH_WORKER = 0, S_DEFERRED, S_FINISHED };

//  A call's key in the running table: tokens are each broker's own, so
//  two links may carry the same one.
typedef struct {
    uint64_t token;                 //  the broker's token for the call (its
                                    //  8 bytes as they came)
    uint32_t link;                  //  index of the link it came on
} s_key_t;

//  One call on its way through a worker.
typedef struct {
    s_kind_t kind;
    s_key_t key;                    //  where the answer goes; key in running
    zmq_msg_t body;                 //  the CALL body: the call points into it
    dsh_call_t *call;
    dsh_result_t *result;           //  lives until the call is finished
    const dsh_param_t *params;
    bool typed;
    dsh_handler_fn *handler;
    void *arg;
    dsh_pool_t *pool;
    atomic_int holder;              //  S_WITH_WORKER, S_DEFERRED, S_FINISHED
    zmq_msg_t encoded;              //  the RESULT body, once finished
    bool is_encoded;
    dsh_span_t *span;               //  its execute_tool span while it runs, or
                                    //  NULL (tracing off, or not sampled)
    bool trace_content;             //  the span records arguments and result
} s_job_t;

//  A progress report of a running call, on its way to the broker.
typedef struct {
    s_kind_t kind;
    s_key_t key;
    zframe_t *body;
} s_note_t;

typedef struct _self_t self_t;

//  An action due at a time that can move: one zloop timer, made again only
//  when the time moves earlier; a timer that fires before a time moved
//  later waits on for the rest.
typedef struct {
    int timer;                      //  zloop timer id, or 0: nothing due
    int64_t fires_ms;               //  when that timer fires
    int64_t due_ms;                 //  when the action is due
} s_deadline_t;

//  One broker this provider follows: finding it, talking to it, and
//  knowing it is still there. A link lives as long as the provider; its
//  sockets are made again whenever the broker is found again.
typedef struct {
    self_t *owner;
    uint32_t index;                 //  in the owner's links
    char *broker;                   //  front endpoint
    zsock_t *front;                 //  DEALER, discovery; NULL once welcomed
    dsh_handshake_t *front_handshake;   //  why discovery gets no WELCOME
    zsock_t *work;                  //  DEALER, calls; NULL until welcomed
    dsh_handshake_t *work_handshake;    //  WORK's connections, made and failed
    size_t work_connections;            //  handshakes on WORK said HELLO for
    zsock_t *announce;              //  PUB; NULL until welcomed
    dsh_link_t *session;            //  when to say HELLO and HEARTBEAT, and
                                    //  when the broker's silence means it is lost
    int max_message_bytes;
    int heartbeat_timer;            //  ticks the session once welcomed
    int discovery_timer;            //  ticks it until then
    bool told_failure;              //  logged the handshake failure already
    bool told_silence;              //  logged the broker's silence, and
                                    //  have not heard from it since
    zlistx_t *retired;              //  zsock_t *, readers dropped in this
                                    //  loop pass, closed in a later one
    //  The broker takes what comes on the announce socket in order, and
    //  answers a HEARTBEAT on WORK after the REFUSEDs of an ANNOUNCE
    //  before it: more answers since the last ANNOUNCE than heartbeats
    //  were unanswered then says that ANNOUNCE is applied, its refusals in
    uint64_t beats;                 //  HEARTBEATs sent on this announce socket
    uint64_t beats_answered;        //  HEARTBEATs the broker sent on WORK
    uint64_t beats_unanswered;      //  at the last ANNOUNCE
    uint64_t beats_answered_then;   //  beats_answered at the last ANNOUNCE
    bool announced;                 //  an ANNOUNCE went on this socket
} s_link_t;

struct _self_t {
    zsock_t *pipe;
    zloop_t *loop;
    char *id;
    s_link_t **links;               //  one per broker, in the list's order
    size_t link_count;
    zlistx_t *tools;                //  s_tool_t *, in the order added
    uint64_t generation;
    bool held;                      //  discovery waits for START
    s_deadline_t start;             //  a held provider starts by itself
    s_deadline_t announce;          //  a coalesced ANNOUNCE is due
    int64_t unannounced_ms;         //  the first change since the last
                                    //  ANNOUNCE was made then, or 0
    bool ready;                     //  a broker asked for our tools
    bool applied;                   //  a broker applied our ANNOUNCE (s_link_t)
    zlistx_t *refusals;             //  char *, "tool: reason"
    dsh_pool_t *pool;
    size_t workers;                 //  the pool's: what ANNOUNCE states as concurrency
    bool inline_handlers;           //  handlers run on this thread, not the pool's
    bool trace_content;             //  spans record arguments and results (opt-in)
    zhashx_t *running;              //  &key -> s_job_t *, queued, running or deferred
};

//  What the handle gives the actor; read before the actor signals.
typedef struct {
    zlistx_t *fronts;               //  char *, the brokers' front endpoints
    const char *id;
    size_t workers;
    size_t queue_limit;
    bool held;
    bool inline_handlers;
} s_settings_t;

static void
s_tool_destroy (s_tool_t **self_p)
{
    if (*self_p) {
        s_tool_t *self = *self_p;
        zstr_free (&self->name);
        zchunk_destroy (&self->entry);
        free (self);
        *self_p = NULL;
    }
}

static s_job_t *
s_job_new (s_key_t key, zmq_msg_t *body)
{
    s_job_t *self = (s_job_t *) zmalloc (sizeof (s_job_t));
    assert (self);
    self->kind = S_JOB;
    self->key = key;
    zmq_msg_init (&self->body);
    zmq_msg_move (&self->body, body);
    zmq_msg_init (&self->encoded);
    atomic_init (&self->holder, S_WITH_WORKER);
    return self;
}

static void
s_job_destroy (s_job_t **self_p)
{
    if (*self_p) {
        s_job_t *self = *self_p;
        //  A call that never finished (the provider stopped) still ends its span
        dsh_span_end (&self->span, 0);
        dsh_call_destroy (&self->call);
        dsh_result_destroy (&self->result);
        zmq_msg_close (&self->body);
        zmq_msg_close (&self->encoded);
        free (self);
        *self_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  The execute_tool span (the OpenTelemetry GenAI conventions,
//  gen-ai-spans.md "Execute tool span"): one per handler run, kind
//  INTERNAL, a child of the context the broker gave the call, from before
//  the arguments are checked to the result. Off (no span, no cost beyond
//  one test) unless the process's tracer is on (dsh_trace_start).

//  Whether spans record a tool's arguments and result, which the
//  conventions make opt-in (they may be sensitive): DSH_TRACE_TOOL_CONTENT=1,
//  or the conventions' own OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
static bool
s_trace_content (void)
{
    const char *dsh = getenv ("DSH_TRACE_TOOL_CONTENT");
    const char *otel = getenv ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT");
    return (dsh && streq (dsh, "1")) || (otel && strcasecmp (otel, "true") == 0);
}

//  Sets key to obj as JSON text (the conventions allow JSON text where
//  structured values are not supported), in the lossless typed view.
static void
s_span_set_json (dsh_span_t *span, const char *key, const msgpack_object *obj)
{
    json_t *view = obj? dsh_json_view (obj): json_null ();
    char *text = view? json_dumps (view, JSON_COMPACT | JSON_ENCODE_ANY): NULL;
    if (text)
        dsh_span_set_str (span, key, text);
    free (text);
    json_decref (view);
}

//  Starts the job's span, if the call is traced.
static void
s_job_span_start (s_job_t *job)
{
    if (!dsh_trace_enabled ())
        return;
    dsh_trace_ctx_t parent;
    bool has_parent = dsh_call_trace (job->call, &parent) == 0;
    char name [DSH_NAME_MAX + 16];
    snprintf (name, sizeof (name), "execute_tool %s", dsh_call_name (job->call));
    job->span = dsh_span_start (name, DSH_SPAN_INTERNAL, has_parent? &parent: NULL, 0);
    if (!job->span)
        return;
    dsh_span_set_str (job->span, "gen_ai.operation.name", "execute_tool");
    dsh_span_set_str (job->span, "gen_ai.tool.name", dsh_call_name (job->call));
    dsh_span_set_str (job->span, "gen_ai.tool.call.id", dsh_call_id (job->call));
    if (job->trace_content)
        s_span_set_json (job->span, "gen_ai.tool.call.arguments", dsh_call_arguments (job->call));
}

//  Ends the job's span with what the call came to, read from the RESULT
//  body just encoded: a failed result (isError: a handler's error, invalid
//  arguments, a tool's own failure) is status ERROR with error.type its dsh
//  error code and its first text as the message; the result is recorded
//  (opt-in) only when the call succeeded, as the conventions say. A call
//  cancelled meanwhile is an error CANCELLED: nobody gets its result.
static void
s_job_span_end (s_job_t *job)
{
    if (!job->span)
        return;
    if (dsh_call_cancelled (job->call))
        dsh_span_set_error (job->span, DSH_E_CANCELLED, "the call was cancelled");
    else
    if (job->is_encoded && (dsh_result_is_error (job->result) || job->trace_content)) {
        char error [128];
        dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (&job->encoded), zmq_msg_size (&job->encoded),
                                      error, sizeof (error));
        const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
        if (root && dsh_result_is_error (job->result)) {
            const msgpack_object *code = dsh_map_get (dsh_map_get (root, "error"), "code");
            const msgpack_object *content = dsh_map_get (root, "content");
            const msgpack_object *text = content && content->type == MSGPACK_OBJECT_ARRAY
                                      && content->via.array.size? dsh_map_get (content->via.array.ptr, "text"): NULL;
            char *code_text = code? dsh_doc_strdup (doc, code): NULL;
            char *message = text? dsh_doc_strdup (doc, text): NULL;
            dsh_span_set_error (job->span, code_text? code_text: DSH_E_TOOL_FAILED,
                                message? message: "the tool failed");
        }
        else
        if (root) {
            const msgpack_object *structured = dsh_map_get (root, "structuredContent");
            s_span_set_json (job->span, "gen_ai.tool.call.result",
                             structured? structured: dsh_map_get (root, "content"));
        }
        dsh_doc_destroy (&doc);
    }
    dsh_span_end (&job->span, 0);
}

//  Packs the job's result into encoded; from whichever thread finishes it.
static void
s_job_encode (s_job_t *self)
{
    if (self->is_encoded)
        return;                 //  a handler that finished and also returned
    if (dsh_result_encode_msg (self->result, &self->encoded) == 0)
        self->is_encoded = true;
    else {
        zmq_msg_init (&self->encoded);
        zsys_error ("dsh_provider: cannot allocate the result of call %s", dsh_call_id (self->call));
    }
    s_job_span_end (self);
}

//  The running table's key is the job's own s_key_t: nothing to copy.
static size_t
s_key_hash (const void *item)
{
    const s_key_t *key = (const s_key_t *) item;
    return (size_t) ((key->token ^ key->link) * 0x9E3779B97F4A7C15ull);
}

static int
s_key_compare (const void *item1, const void *item2)
{
    const s_key_t *key1 = (const s_key_t *) item1;
    const s_key_t *key2 = (const s_key_t *) item2;
    return key1->token != key2->token? (key1->token < key2->token? -1: 1)
         : key1->link != key2->link? (key1->link < key2->link? -1: 1): 0;
}

static void
s_note_destroy (s_note_t **self_p)
{
    if (*self_p) {
        s_note_t *self = *self_p;
        zframe_destroy (&self->body);
        free (self);
        *self_p = NULL;
    }
}

//  Disposes of whatever the pool held: a job or a note.
static void
s_item_discard (void *item)
{
    if (*(s_kind_t *) item == S_JOB) {
        s_job_t *job = (s_job_t *) item;
        s_job_destroy (&job);
    }
    else {
        s_note_t *note = (s_note_t *) item;
        s_note_destroy (&note);
    }
}

//  The call's hook, from the handler's thread: a PROGRESS for the broker.
static void
s_job_progress (void *context, double progress, double total, const char *message)
{
    s_job_t *job = (s_job_t *) context;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "callId", dsh_call_id (job->call));
    dsh_pack_cstr (&packer.pk, "progress");
    msgpack_pack_double (&packer.pk, progress);
    if (total >= 0) {
        dsh_pack_cstr (&packer.pk, "total");
        msgpack_pack_double (&packer.pk, total);
    }
    if (message)
        dsh_packer_kv_str (&packer, "message", message);
    dsh_packer_map_end (&packer);
    s_note_t *note = (s_note_t *) zmalloc (sizeof (s_note_t));
    assert (note);
    note->kind = S_NOTE;
    note->key = job->key;
    note->body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_pool_post (job->pool, note);
}

//  The call's hook, from any thread: a deferred call is done.
static void
s_job_finish (void *context)
{
    s_job_t *job = (s_job_t *) context;
    s_job_encode (job);
    //  If the worker still has the job, it hands it back when its handler
    //  returns; if the worker let go (deferred), handing it back is ours
    if (atomic_exchange (&job->holder, S_FINISHED) == S_DEFERRED)
        dsh_pool_post (job->pool, job);
}

//  Runs on a worker thread: everything here belongs to the job. Returns
//  false when the handler deferred the call (dsh_call_finish hands it back).
static bool
s_job_run (void *arg)
{
    s_job_t *job = (s_job_t *) arg;
    if (dsh_call_cancelled (job->call))
        return true;            //  answered already: the handler need not run
    s_job_span_start (job);
    //  Counting first builds no list and no text for the calls that pass
    const msgpack_object *arguments = dsh_call_arguments (job->call);
    char *violations = job->typed && dsh_params_validate (job->params, arguments, NULL)?
        dsh_params_check (job->params, arguments): NULL;
    if (violations) {
        //  The check's text is already the whole message, "Error: ..."
        dsh_result_error (job->result, DSH_E_INVALID_ARGS, "%s", violations + strlen ("Error: "));
        zstr_free (&violations);
    }
    else {
        int rc = job->handler (job->call, job->result, job->arg);
        if (rc == DSH_HANDLER_DEFER)
            //  Finished meanwhile (from this thread or another)? Then the
            //  worker hands it back after all, with the finisher's result
            return atomic_exchange (&job->holder, S_DEFERRED) == S_FINISHED;
        if (rc != 0 && !dsh_result_is_error (job->result))
            dsh_result_error (job->result, NULL, "handler failed");
    }
    s_job_encode (job);
    return true;
}

//  ---------------------------------------------------------------------
//  Sending

//  A presence body's fields before its tools: component and generation,
//  and for an ANNOUNCE (announce set) its concurrency, and part and parts
//  when parts is not 0 (a set in parts).
//  The version ANNOUNCE gives: the SDK's (meson's project version)
#define S_SDK_VERSION           "dsh-c/0.1.0"

//  What an operator is shown of us (ANNOUNCE's host, pid, version and
//  uptimeMs, PROTOCOL.md): the uptime counts from the process's first
//  ANNOUNCE, which comes as it starts.
static void
s_pack_presence_details (dsh_packer_t *packer)
{
    static _Atomic int64_t started_ms = 0;
    int64_t now_ms = zclock_mono ();
    int64_t unset = 0;
    atomic_compare_exchange_strong (&started_ms, &unset, now_ms);
    char host [DSH_PRESENCE_HOST_MAX + 1] = "";
    if (gethostname (host, sizeof (host)) == 0 && *host) {
        host [DSH_PRESENCE_HOST_MAX] = 0;
        //  The broker refuses a control character, and bytes that are not
        //  UTF-8: a host name is ASCII (RFC 1123), any other byte goes as '?'
        for (char *cursor = host; *cursor; cursor++)
            if ((unsigned char) *cursor < 0x20 || (unsigned char) *cursor >= 0x7f)
                *cursor = '?';
        dsh_packer_kv_str (packer, "host", host);
    }
    dsh_pack_cstr (&packer->pk, "pid");
    msgpack_pack_uint64 (&packer->pk, (uint64_t) getpid ());
    dsh_packer_kv_str (packer, "version", S_SDK_VERSION);
    dsh_pack_cstr (&packer->pk, "uptimeMs");
    msgpack_pack_uint64 (&packer->pk, (uint64_t) (now_ms - atomic_load (&started_ms)));
}

static void
s_pack_presence_head (dsh_packer_t *packer, self_t *self, bool announce, uint32_t part, uint32_t parts)
{
    dsh_packer_kv_str (packer, "component", self->id);
    dsh_pack_cstr (&packer->pk, "generation");
    msgpack_pack_uint64 (&packer->pk, self->generation);
    if (announce) {
        //  The broker keeps a window of calls at us sized on it, and holds
        //  the rest itself, where it can serve its callers in turn
        dsh_pack_cstr (&packer->pk, "concurrency");
        msgpack_pack_uint64 (&packer->pk, self->workers);
        s_pack_presence_details (packer);
    }
    if (parts) {
        dsh_pack_cstr (&packer->pk, "part");
        msgpack_pack_uint32 (&packer->pk, part);
        dsh_pack_cstr (&packer->pk, "parts");
        msgpack_pack_uint32 (&packer->pk, parts);
    }
}

//  HEARTBEAT or WITHDRAW.
static void
s_publish (s_link_t *link, const char *command)
{
    if (!link->announce)
        return;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    s_pack_presence_head (&packer, link->owner, false, 0, 0);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = dsh_proto_pub_message (command, &body);
    dsh_sock_send (link->announce, &msg);
    if (streq (command, DSH_HEARTBEAT))
        link->beats++;
}

//  An ANNOUNCE was sent on link: a HEARTBEAT right after it is answered
//  once the broker has applied it (s_link_t).
static void
s_announced (s_link_t *link)
{
    link->beats_unanswered = link->beats > link->beats_answered? link->beats - link->beats_answered: 0;
    link->beats_answered_then = link->beats_answered;
    link->announced = true;
    s_publish (link, DSH_HEARTBEAT);
}

//  An ANNOUNCE of count tools from tools, as part of parts (0: the whole
//  set).
static void
s_publish_tools (s_link_t *link, s_tool_t **tools, size_t count, uint32_t part, uint32_t parts)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    s_pack_presence_head (&packer, link->owner, true, part, parts);
    dsh_pack_cstr (&packer.pk, "tools");
    msgpack_pack_array (&packer.pk, (uint32_t) count);
    for (size_t index = 0; index < count; index++)
        dsh_packer_raw (&packer, zchunk_data (tools [index]->entry), zchunk_size (tools [index]->entry));
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = dsh_proto_pub_message (DSH_ANNOUNCE, &body);
    dsh_sock_send (link->announce, &msg);
}

//  The bytes of a body's fields before its tools at most, with the tools'
//  key and the largest array header.
static size_t
s_announce_head_bytes (self_t *self, uint32_t parts)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 7);
    s_pack_presence_head (&packer, self, true, parts, parts);
    dsh_pack_cstr (&packer.pk, "tools");
    msgpack_pack_array (&packer.pk, UINT32_MAX);
    size_t size = packer.sbuf.size;
    dsh_packer_release (&packer);
    return size;
}

//  The tool set, in one ANNOUNCE if it fits in a message to the broker,
//  else in the fewest parts that each fit, in order, back to back, at one
//  generation (PROTOCOL.md, The announce channel). A tool too large for a
//  message of its own is not sent: the broker could not take it.
static void
s_announce (s_link_t *link)
{
    if (!link->announce)
        return;
    self_t *self = link->owner;
    size_t limit = link->max_message_bytes > S_ANNOUNCE_MARGIN? (size_t) link->max_message_bytes - S_ANNOUNCE_MARGIN: 0;
    size_t tool_count = zlistx_size (self->tools);
    s_tool_t **tools = (s_tool_t **) zmalloc ((tool_count + 1) * sizeof (s_tool_t *));
    assert (tools);
    size_t set_bytes = s_announce_head_bytes (self, 0), count = 0;
    for (s_tool_t *tool = zlistx_first (self->tools); tool; tool = zlistx_next (self->tools)) {
        tools [count++] = tool;
        set_bytes += zchunk_size (tool->entry);
    }
    if (set_bytes <= limit) {
        s_publish_tools (link, tools, count, 0, 0);
        free (tools);
        s_announced (link);
        return;
    }
    //  Slices of what fits, each as long as a message takes: no fewer
    //  parts can hold the tools in order
    size_t room = s_announce_head_bytes (self, UINT32_MAX);
    room = limit > room? limit - room: 0;
    size_t *starts = (size_t *) zmalloc ((tool_count + 1) * sizeof (size_t));
    assert (starts);
    size_t sendable = 0, parts = 0, part_bytes = 0;
    for (size_t index = 0; index < count; index++) {
        size_t size = zchunk_size (tools [index]->entry);
        if (size > room) {
            dsh_log_warning ("%s: tool %s is %zu bytes, more than an ANNOUNCE to the broker at %s can carry "
                             "(its messages are at most %d bytes): it is not announced there",
                             self->id, tools [index]->name, size, link->broker, link->max_message_bytes);
            continue;
        }
        if (parts == 0 || part_bytes + size > room) {
            starts [parts++] = sendable;
            part_bytes = 0;
        }
        tools [sendable++] = tools [index];
        part_bytes += size;
    }
    if (parts <= 1)
        s_publish_tools (link, tools, sendable, 0, 0);
    for (size_t part = 0; parts > 1 && part < parts; part++) {
        size_t end = part + 1 < parts? starts [part + 1]: sendable;
        s_publish_tools (link, tools + starts [part], end - starts [part], (uint32_t) part, (uint32_t) parts);
    }
    free (starts);
    free (tools);
    s_announced (link);
}

//  The same to every broker.
static void
s_publish_all (self_t *self, const char *command)
{
    for (size_t index = 0; index < self->link_count; index++)
        s_publish (self->links [index], command);
}

//  HELLO on a front (id NULL) or on WORK, where it claims the id at this
//  generation (the broker refuses a claim to an id a live component holds)
static void
s_send_hello (zsock_t *sock, const char *id, uint64_t generation)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id) {
        dsh_packer_kv_str (&packer, "component", id);
        dsh_pack_cstr (&packer.pk, "generation");
        msgpack_pack_uint64 (&packer.pk, generation);
    }
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = dsh_proto_message (NULL, DSH_HELLO);
    zmsg_append (msg, &body);
    dsh_sock_send (sock, &msg);
}

//  Sends a RESULT or PROGRESS for a call on the link it came on: "" "DSH1"
//  command token body. Takes the body's content. A link that is finding
//  its broker again has no WORK: the broker the call came from has gone,
//  or will have answered the call itself by the time it hears from us.
static void
s_send_work (s_link_t *link, const char *command, uint64_t token, zmq_msg_t *body)
{
    if (!link->work)
        return;
    zmq_msg_t parts [5];
    dsh_sock_head (parts, command);
    dsh_sock_part_mem (&parts [3], &token, sizeof (token));
    zmq_msg_init (&parts [4]);
    zmq_msg_move (&parts [4], body);
    if (dsh_sock_send_parts (link->work, parts, 5))
        dsh_log_warning ("%s: a %s to %s could not be sent: %s", link->owner->id, command, link->broker,
                         zmq_strerror (errno));
}

//  The same with a body from the codec; takes the frame.
static void
s_send_work_frame (s_link_t *link, const char *command, uint64_t token, zframe_t **body_p)
{
    zmq_msg_t body;
    dsh_sock_part_frame (&body, body_p);
    s_send_work (link, command, token, &body);
    zmq_msg_close (&body);
}

//  ---------------------------------------------------------------------
//  Finding a broker, and finding it again

//  Logs a handshake failure once, until the handshake succeeds again.
static void
s_tell_failure (s_link_t *link, dsh_handshake_t *handshake)
{
    const char *failure = handshake? dsh_handshake_failure (handshake): NULL;
    if (failure && !link->told_failure)
        zsys_error ("%s: cannot talk to broker at %s: %s", link->owner->id, link->broker, failure);
    link->told_failure = failure != NULL;
}

static int s_front_recv (zloop_t *loop, zsock_t *reader, void *arg);
static int s_work_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  A new front connection. Before a WELCOME nothing says how the broker
//  heartbeats: the defaults heal it.
static void
s_link_front (s_link_t *link)
{
    link->front = zsock_new (ZMQ_DEALER);
    assert (link->front);
    dsh_sock_limit (link->front, DSH_MAX_MESSAGE_DEFAULT, 100);
    //  No ZMTP heartbeats on a component's sockets: its HEARTBEATs and the
    //  broker's answers on WORK tell both sides all they need (Liveness),
    //  and the broker would answer three PINGs a second more for each of
    //  a thousand components (PROTOCOL.md, Liveness: connections)
    dsh_sock_keepalive (link->front, DSH_DEFAULT_HEARTBEAT_MS, DSH_DEFAULT_LIVENESS);
    dsh_curve_client (link->front);
    link->front_handshake = dsh_handshake_new (link->front);
    zsock_connect (link->front, "%s", link->broker);
    zloop_reader (link->owner->loop, link->front, s_front_recv, link);
}

//  Stops watching a socket's handshakes. The monitor goes first: libzmq's
//  I/O thread sends every event to it blocking, so a socket still
//  monitored once the watcher's end is closed hangs every socket of the
//  process at its next handshake.
static void
s_unwatch (zsock_t *sock, dsh_handshake_t **handshake_p)
{
    if (sock)
        zmq_socket_monitor (zsock_resolve (sock), NULL, 0);
    dsh_handshake_destroy (handshake_p);
}

//  Ends the socket's reader and leaves it to be closed in a later loop
//  pass: the loop may still hold this pass's events of the reader.
static void
s_retire (s_link_t *link, zsock_t **sock_p, dsh_handshake_t **handshake_p)
{
    zloop_reader_end (link->owner->loop, *sock_p);
    s_unwatch (*sock_p, handshake_p);
    zlistx_add_end (link->retired, *sock_p);
    *sock_p = NULL;
}

//  Closes the front connection: once welcomed a link needs it no more
//  (an idle connection costs a ZMTP heartbeat each way per interval), and
//  finding the broker again makes a new one.
static void
s_link_front_close (s_link_t *link)
{
    if (link->front)
        s_retire (link, &link->front, &link->front_handshake);
}

static void s_link_follow (s_link_t *link);

static int
s_discover (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    s_link_t *link = (s_link_t *) arg;
    if (timer_id != link->discovery_timer)
        return 0;               //  ended (see s_heartbeat)
    zlistx_purge (link->retired);
    dsh_link_tick (link->session, zclock_mono ());
    s_link_follow (link);
    s_tell_failure (link, link->front_handshake);
    return 0;
}

//  Asks the broker for the endpoints (the session says HELLO again every
//  DSH_LINK_HELLO_RETRY_MS until it answers).
static void
s_link_hello (s_link_t *link)
{
    s_send_hello (link->front, NULL, 0);
    if (!link->discovery_timer)
        link->discovery_timer = zloop_timer (link->owner->loop, DSH_LINK_HELLO_RETRY_MS, 0, s_discover, link);
}

//  The broker is lost to this link (event): the broker answers every
//  HEARTBEAT on WORK, so silence there for its liveness window means we
//  cannot reach it, or it cannot reach us: it died, stopped, restarted on
//  other ports, moved, or a link is cut; or its ROUTER gives our id to
//  another connection (a second process under this id, or an old
//  connection of ours not yet gone) and ignores this one. In each case
//  only finding the broker again from its front, with new connections,
//  helps: every socket goes, and the session's CONNECT makes a new front.
//  Calls running for it are answered on the next WORK connection if there
//  is one by then.
static void
s_link_lost (s_link_t *link, const dsh_link_event_t *event)
{
    //  Once per loss: a broker that welcomes us but never answers on WORK
    //  would otherwise be logged every window
    if (!link->told_silence)
        zsys_warning ("%s: the broker at %s has been silent on WORK for %" PRId64 " ms; finding it again",
                      link->owner->id, link->broker, event->silence_ms);
    link->told_silence = true;
    zloop_t *loop = link->owner->loop;
    zloop_timer_end (loop, link->heartbeat_timer);
    link->heartbeat_timer = 0;
    s_retire (link, &link->work, &link->work_handshake);
    //  Nothing queued for a broker that is gone may hold up the exit
    zsock_set_linger (link->announce, 0);
    zsock_destroy (&link->announce);
}

//  Does what the session says, in order.
static void
s_link_follow (s_link_t *link)
{
    dsh_link_event_t event;
    while (dsh_link_next (link->session, &event) == 0) {
        if (event.type == DSH_LINK_DOWN)
            s_link_lost (link, &event);
        else
        if (event.type == DSH_LINK_CONNECT)
            s_link_front (link);
        else
        if (event.type == DSH_LINK_SEND_HELLO)
            s_link_hello (link);
        else
        if (event.type == DSH_LINK_SEND_PING)
            s_publish (link, DSH_HEARTBEAT);
    }
}

//  A new WORK connection under our id, that says HELLO; the broker
//  answers SYNC.
static void
s_work_connect (s_link_t *link, const char *endpoint)
{
    self_t *self = link->owner;
    link->work = zsock_new (ZMQ_DEALER);
    assert (link->work);
    dsh_sock_limit (link->work, link->max_message_bytes, S_QUEUE_LIMIT);
    dsh_sock_keepalive (link->work, dsh_link_heartbeat_ms (link->session), dsh_link_liveness (link->session));
    //  A routing id of this connection's own (the id, a space, a random
    //  tag): the broker hears a second process under the id, and can
    //  tell it the id is taken, instead of libzmq ignoring its connection
    zuuid_t *tag = zuuid_new ();
    char routing_id [DSH_ID_MAX + 34];
    snprintf (routing_id, sizeof (routing_id), "%s %s", self->id, zuuid_str (tag));
    zuuid_destroy (&tag);
    zsock_set_identity (link->work, routing_id);
    dsh_curve_client (link->work);
    link->work_handshake = dsh_handshake_new (link->work);
    link->work_connections = 0;
    zsock_connect (link->work, "%s", endpoint);
    zloop_reader (self->loop, link->work, s_work_recv, link);
    s_send_hello (link->work, self->id, self->generation);
}

static int
s_heartbeat (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    s_link_t *link = (s_link_t *) arg;
    self_t *self = link->owner;
    //  czmq's zloop (4.2) may run an ended timer once more when the pass
    //  that ended it also changed readers, as s_link_lost does: only the
    //  link's current timer acts
    if (timer_id != link->heartbeat_timer)
        return 0;
    zlistx_purge (link->retired);
    //  HEARTBEAT on the beat, or the broker lost (s_link_lost)
    dsh_link_tick (link->session, zclock_mono ());
    s_link_follow (link);
    if (!link->work)
        return 0;
    //  A WORK connection made again (the broker restarted on the same
    //  ports, or libzmq closed a silent connection and made a new one)
    //  says HELLO again: under CURVE the broker sends nothing, not even
    //  its heartbeat, on a connection that has not spoken
    size_t connections = dsh_handshake_successes (link->work_handshake);
    if (connections > link->work_connections) {
        //  Also at the first look if the connection was made more than
        //  once: the broker may have restarted meanwhile, and a HELLO is
        //  what gives the new one our route (one too many costs an ANNOUNCE)
        if (link->work_connections || connections > 1)
            s_send_hello (link->work, self->id, self->generation);
        link->work_connections = connections;
    }
    s_tell_failure (link, link->work_handshake);
    //  A flood of bad messages that stopped still gets its count logged
    dsh_log_tick ();
    return 0;
}

//  The broker told us where everything is: connect and say hello.
static void
s_welcomed (s_link_t *link, dsh_doc_t *doc)
{
    self_t *self = link->owner;
    const msgpack_object *root = dsh_doc_root (doc);
    char *announce = dsh_doc_strdup (doc, dsh_map_get (root, "announce"));
    char *work = dsh_doc_strdup (doc, dsh_map_get (root, "work"));
    const msgpack_object *heartbeat = dsh_map_get (root, "heartbeatMs");
    const msgpack_object *max_bytes = dsh_map_get (root, "maxMessageBytes");
    const msgpack_object *protocol = dsh_map_get (root, "protocol");
    if (!protocol || protocol->type != MSGPACK_OBJECT_POSITIVE_INTEGER || protocol->via.u64 != DSH_PROTOCOL_VERSION) {
        zsys_error ("%s: the broker at %s does not speak dsh/%d; still asking", self->id, link->broker,
                    DSH_PROTOCOL_VERSION);
        return;
    }
    if (!announce || !work || !heartbeat || heartbeat->type != MSGPACK_OBJECT_POSITIVE_INTEGER
    ||  heartbeat->via.u64 == 0 || heartbeat->via.u64 > 3600000) {
        dsh_log_warning ("%s: malformed WELCOME from %s; asking again", self->id, link->broker);
        return;
    }
    if (link->work)
        return;                 //  a late second WELCOME; already connected
    //  The window starts now: the broker answers the HELLO on WORK with SYNC
    int64_t now = zclock_mono ();
    dsh_link_welcome (link->session, now, NULL, (int) heartbeat->via.u64,
                      dsh_map_int_in (root, "liveness", 1, 1000, DSH_DEFAULT_LIVENESS));
    s_link_follow (link);
    int heartbeat_ms = dsh_link_heartbeat_ms (link->session);
    int liveness = dsh_link_liveness (link->session);
    link->max_message_bytes = DSH_MAX_MESSAGE_DEFAULT;
    if (max_bytes && max_bytes->type == MSGPACK_OBJECT_POSITIVE_INTEGER && max_bytes->via.u64 <= INT_MAX)
        link->max_message_bytes = (int) max_bytes->via.u64;
    zloop_timer_end (self->loop, link->discovery_timer);
    link->discovery_timer = 0;
    s_link_front_close (link);

    char *announce_endpoint = dsh_sock_resolve (announce, link->broker);
    char *work_endpoint = dsh_sock_resolve (work, link->broker);
    link->announce = zsock_new (ZMQ_PUB);
    assert (link->announce);
    link->beats = link->beats_answered = link->beats_unanswered = link->beats_answered_then = 0;
    link->announced = false;
    dsh_sock_limit (link->announce, link->max_message_bytes, S_QUEUE_LIMIT);
    dsh_sock_keepalive (link->announce, heartbeat_ms, liveness);
    //  A clean exit's WITHDRAW must get out before the socket closes
    zsock_set_linger (link->announce, 1000);
    dsh_curve_client (link->announce);
    zsock_connect (link->announce, "%s", announce_endpoint);
    s_work_connect (link, work_endpoint);
    link->heartbeat_timer = zloop_timer (self->loop, (size_t) heartbeat_ms, 0, s_heartbeat, link);
    zstr_free (&announce_endpoint);
    zstr_free (&work_endpoint);
}

static int
s_front_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    s_link_t *link = (s_link_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  streq (command, DSH_WELCOME)) {
        zframe_t *body = zmsg_first (msg);
        dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
        if (doc)
            s_welcomed (link, doc);
        dsh_doc_destroy (&doc);
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

static s_link_t *
s_link_new (self_t *self, uint32_t index, const char *broker)
{
    s_link_t *link = (s_link_t *) zmalloc (sizeof (s_link_t));
    assert (link);
    link->owner = self;
    link->index = index;
    link->broker = strdup (broker);
    //  Each link follows its one broker: a lost one is found again
    link->session = dsh_link_new (DSH_LINK_COMPONENT);
    dsh_link_add (link->session, broker);
    link->max_message_bytes = DSH_MAX_MESSAGE_DEFAULT;
    link->retired = zlistx_new ();
    zlistx_set_destructor (link->retired, (zlistx_destructor_fn *) zsock_destroy);
    return link;
}

//  Closes the link's sockets; the loop is gone by now.
static void
s_link_destroy (s_link_t **link_p)
{
    if (*link_p) {
        s_link_t *link = *link_p;
        s_unwatch (link->front, &link->front_handshake);
        s_unwatch (link->work, &link->work_handshake);
        zsock_destroy (&link->front);
        zsock_destroy (&link->work);
        zsock_destroy (&link->announce);
        zlistx_destroy (&link->retired);
        dsh_link_destroy (&link->session);
        zstr_free (&link->broker);
        free (link);
        *link_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  Calls

static s_tool_t *
s_tool_find (self_t *self, const char *name)
{
    for (s_tool_t *tool = zlistx_first (self->tools); tool; tool = zlistx_next (self->tools))
        if (streq (tool->name, name))
            return tool;
    return NULL;
}

//  A job's handler is done with it: its RESULT goes, unless the broker
//  answered the call already.
static void
s_job_done (self_t *self, s_job_t *job)
{
    zhashx_delete (self->running, &job->key);
    if (!dsh_call_cancelled (job->call) && job->is_encoded)
        s_send_work (self->links [job->key.link], DSH_RESULT, job->key.token, &job->encoded);
    s_job_destroy (&job);
}

static void
s_handle_call (s_link_t *link, dsh_sock_msg_t *msg)
{
    self_t *self = link->owner;
    if (msg->count - msg->body < 2 || zmq_msg_size (&msg->part [msg->body]) != 8) {
        dsh_log_warning ("%s: CALL without token and body from %s", self->id, link->broker);
        return;
    }
    s_key_t key = { 0, link->index };
    memcpy (&key.token, zmq_msg_data (&msg->part [msg->body]), sizeof (key.token));
    uint64_t token = key.token;
    //  The job takes the body first: the call's strings point into it, and
    //  a short body lives inside its zmq_msg_t, which must not move again
    s_job_t *job = s_job_new (key, &msg->part [msg->body + 1]);
    char error [256];
    job->call = dsh_call_new (zmq_msg_data (&job->body), zmq_msg_size (&job->body), error, sizeof (error));
    s_tool_t *tool = job->call? s_tool_find (self, dsh_call_name (job->call)): NULL;
    zframe_t *reply = NULL;
    if (!job->call)
        reply = dsh_proto_error_result (NULL, DSH_E_BAD_REQUEST, error);
    else
    if (!tool) {
        char text [DSH_NAME_MAX + 64];
        snprintf (text, sizeof (text), "Error: unknown tool \"%s\"", dsh_call_name (job->call));
        reply = dsh_proto_error_result (dsh_call_id (job->call), DSH_E_UNKNOWN_TOOL, text);
    }
    if (reply) {
        s_send_work_frame (link, DSH_RESULT, token, &reply);
        s_job_destroy (&job);
        return;
    }
    job->result = dsh_result_new (dsh_call_id (job->call));
    job->params = tool->params;
    job->typed = tool->typed;
    job->handler = tool->handler;
    job->arg = tool->arg;
    job->pool = self->pool;
    job->trace_content = self->trace_content;
    dsh_call_hooks_t hooks = { s_job_progress, s_job_finish };
    dsh_call_set_hooks (job->call, &hooks, job);
    //  In the table before a worker can have it
    if (zhashx_insert (self->running, &job->key, job)) {
        //  The broker never reuses a token while its call is open
        dsh_log_warning ("%s: a CALL repeats a running call's token; dropped", self->id);
        s_job_destroy (&job);
        return;
    }
    if (self->inline_handlers) {
        //  The handler answers or defers without blocking: no thread hop.
        //  Its result goes through the pool's queue all the same, behind
        //  the progress it reported
        if (s_job_run (job))
            dsh_pool_post (self->pool, job);
        return;
    }
    if (dsh_pool_submit (self->pool, job)) {
        zhashx_delete (self->running, &job->key);
        char text [128];
        snprintf (text, sizeof (text), "Error: component \"%.64s\" is overloaded", self->id);
        reply = dsh_proto_error_result (dsh_call_id (job->call), DSH_E_OVERLOADED, text);
        s_send_work_frame (link, DSH_RESULT, token, &reply);
        s_job_destroy (&job);
    }
}

//  The broker answered a call already (deadline, or the caller cancelled):
//  tell its handler, and send nothing for it.
static void
s_handle_cancel (s_link_t *link, dsh_sock_msg_t *msg)
{
    if (msg->count == msg->body || zmq_msg_size (&msg->part [msg->body]) != 8)
        return;
    s_key_t key = { 0, link->index };
    memcpy (&key.token, zmq_msg_data (&msg->part [msg->body]), sizeof (key.token));
    s_job_t *job = (s_job_t *) zhashx_lookup (link->owner->running, &key);
    if (job)
        dsh_call_cancel (job->call);
}

static int
s_pool_done (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    (void) item;
    self_t *self = (self_t *) arg;
    void *done;
    while ((done = dsh_pool_done (self->pool))) {
        if (*(s_kind_t *) done == S_NOTE) {
            s_note_t *note = (s_note_t *) done;
            s_send_work_frame (self->links [note->key.link], DSH_PROGRESS, note->key.token, &note->body);
            s_note_destroy (&note);
            continue;
        }
        s_job_done (self, (s_job_t *) done);
    }
    return 0;
}

static void
s_handle_refused (s_link_t *link, dsh_sock_msg_t *msg)
{
    self_t *self = link->owner;
    //  Rare: the codec's own checks on a frame copy, which the document
    //  points into
    char error [256];
    zframe_t *body = msg->body < msg->count?
        zframe_new (zmq_msg_data (&msg->part [msg->body]), zmq_msg_size (&msg->part [msg->body])): NULL;
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    if (doc) {
        const msgpack_object *root = dsh_doc_root (doc);
        const char *tool = dsh_doc_strdup (doc, dsh_map_get (root, "tool"));
        const char *component = dsh_doc_strdup (doc, dsh_map_get (root, "component"));
        const char *reason = dsh_doc_strdup (doc, dsh_map_get (root, "reason"));
        //  An id refused: this connection waits in line for it, and the
        //  broker sends SYNC if the holder goes
        char *refusal = tool || !component?
            zsys_sprintf ("%s: %s", tool? tool: "(unnamed)", reason? reason: "refused"):
            zsys_sprintf ("component id %s: %s (waiting until it is free)", component, reason? reason: "refused");
        dsh_log_warning ("%s: the broker at %s refused %s", self->id, link->broker, refusal);
        if (zlistx_size (self->refusals) < 1000)
            zlistx_add_end (self->refusals, refusal);
        else
            zstr_free (&refusal);
        dsh_doc_destroy (&doc);
    }
    zframe_destroy (&body);
}

static int
s_work_recv_one (zsock_t *reader, void *arg)
{
    s_link_t *link = (s_link_t *) arg;
    dsh_sock_msg_t msg;
    char error [256];
    if (dsh_sock_recv_msg (reader, &msg, error, sizeof (error))) {
        if (*error)
            dsh_log_warning ("%s: malformed message from the broker at %s: %s", link->owner->id, link->broker,
                             error);
    }
    else
    if (streq (msg.command, DSH_CALL))
        s_handle_call (link, &msg);
    else
    if (streq (msg.command, DSH_CANCEL))
        s_handle_cancel (link, &msg);
    else
    if (streq (msg.command, DSH_SYNC)) {
        s_announce (link);
        link->owner->ready = true;
    }
    else
    if (streq (msg.command, DSH_REFUSED))
        s_handle_refused (link, &msg);
    else
    if (streq (msg.command, DSH_HEARTBEAT)) {
        link->beats_answered++;
        if (link->announced && link->beats_answered - link->beats_answered_then > link->beats_unanswered)
            link->owner->applied = true;
    }
    else
        dsh_log_warning ("%s: unknown command \"%s\" from the broker at %s", link->owner->id, msg.command,
                         link->broker);
    dsh_sock_msg_close (&msg);
    return 0;
}

static int
s_work_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    //  Anything on WORK says the broker is there; its HEARTBEAT says
    //  nothing more
    s_link_t *link = (s_link_t *) arg;
    dsh_link_heard (link->session, zclock_mono ());
    link->told_silence = false;
    return dsh_sock_drain (reader, S_BATCH, s_work_recv_one, arg);
}

//  ---------------------------------------------------------------------
//  Deadlines

static void
s_deadline_arm (self_t *self, s_deadline_t *deadline, zloop_timer_fn *handler)
{
    int64_t now = zclock_mono ();
    int64_t delay_ms = deadline->due_ms > now? deadline->due_ms - now: 1;
    deadline->timer = zloop_timer (self->loop, (size_t) delay_ms, 1, handler, self);
    deadline->fires_ms = now + delay_ms;
}

static void
s_deadline_end (self_t *self, s_deadline_t *deadline)
{
    if (deadline->timer)
        zloop_timer_end (self->loop, deadline->timer);
    deadline->timer = 0;
}

//  The action is due at due_ms, whenever it was due before.
static void
s_deadline_set (self_t *self, s_deadline_t *deadline, int64_t due_ms, zloop_timer_fn *handler)
{
    deadline->due_ms = due_ms;
    if (deadline->timer && deadline->fires_ms <= due_ms)
        return;                 //  the timer fires in time, and waits on
    s_deadline_end (self, deadline);
    s_deadline_arm (self, deadline, handler);
}

//  For the handler: true if the action is due now. False for a timer
//  ended meanwhile (zloop may run one once more, see s_heartbeat) and for
//  one that fired before a due time that moved later (armed again for it).
static bool
s_deadline_reached (self_t *self, s_deadline_t *deadline, int timer_id, zloop_timer_fn *handler)
{
    if (timer_id != deadline->timer)
        return false;
    deadline->timer = 0;
    if (zclock_mono () < deadline->due_ms) {
        s_deadline_arm (self, deadline, handler);
        return false;
    }
    return true;
}

//  ---------------------------------------------------------------------
//  Pipe

static int
s_announce_due (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    if (!s_deadline_reached (self, &self->announce, timer_id, s_announce_due))
        return 0;
    self->unannounced_ms = 0;
    //  A broker takes presence at a new generation only once our WORK
    //  connection has stated it (another process could announce under our
    //  id); the SYNC it answers with brings the ANNOUNCE again if this one
    //  gets there first
    for (size_t index = 0; index < self->link_count; index++)
        if (self->links [index]->work)
            s_send_hello (self->links [index]->work, self->id, self->generation);
    for (size_t index = 0; index < self->link_count; index++)
        s_announce (self->links [index]);
    return 0;
}

//  Every link asks its broker for the endpoints.
static void
s_start_discovery (self_t *self)
{
    for (size_t index = 0; index < self->link_count; index++) {
        dsh_link_start (self->links [index]->session, zclock_mono ());
        s_link_follow (self->links [index]);
    }
}

//  A held provider starts finding its brokers: the ANNOUNCE each asks for
//  (SYNC) has every tool added so far.
static void
s_start (self_t *self)
{
    if (self->held) {
        self->held = false;
        s_deadline_end (self, &self->start);
        s_start_discovery (self);
    }
}

static int
s_start_due (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    if (s_deadline_reached (self, &self->start, timer_id, s_start_due))
        s_start (self);
    return 0;
}

//  The tool set changed: a new generation. Held, the provider waits on
//  (the ANNOUNCE its start brings has every change); started, the change
//  is announced once changes stop for S_ANNOUNCE_QUIET_MS, and at most
//  S_ANNOUNCE_MAX_WAIT_MS after the first one not announced yet, so that a
//  component adding a thousand tools sends one ANNOUNCE, or a few, not a
//  thousand ever larger ones.
static void
s_tools_changed (self_t *self)
{
    self->generation++;
    int64_t now = zclock_mono ();
    if (self->held) {
        s_deadline_set (self, &self->start, now + S_HELD_IDLE_MS, s_start_due);
        return;
    }
    if (!self->unannounced_ms)
        self->unannounced_ms = now;
    int64_t due_ms = now + S_ANNOUNCE_QUIET_MS;
    if (due_ms > self->unannounced_ms + S_ANNOUNCE_MAX_WAIT_MS)
        due_ms = self->unannounced_ms + S_ANNOUNCE_MAX_WAIT_MS;
    s_deadline_set (self, &self->announce, due_ms, s_announce_due);
}

//  What dsh_provider_add hands the actor, by pointer on the pipe. It lives
//  on the caller's stack: the caller waits for the answer.
typedef struct {
    const void *entry;              //  msgpack of the wire tool entry
    size_t entry_size;
    const dsh_param_t *params;      //  typed tools: the spec; else NULL
    bool typed;
    dsh_handler_fn *handler;
    void *arg;
} s_add_t;

//  Adds a tool; returns 0 or -1 with a reason.
static int
s_add_tool (self_t *self, const s_add_t *add, char *error, size_t error_size)
{
    dsh_doc_t *doc = dsh_doc_new (add->entry, add->entry_size, error, error_size);
    if (!doc)
        return -1;
    int rc = dsh_proto_check_tool (dsh_doc_root (doc), error, error_size);
    char *name = rc == 0? dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "name")): NULL;
    if (rc == 0 && s_tool_find (self, name)) {
        snprintf (error, error_size, "tool \"%s\" is already registered", name);
        rc = -1;
    }
    if (rc == 0) {
        s_tool_t *tool = (s_tool_t *) zmalloc (sizeof (s_tool_t));
        assert (tool);
        tool->name = strdup (name);
        tool->entry = zchunk_new (add->entry, add->entry_size);
        tool->params = add->params;
        tool->typed = add->typed;
        tool->handler = add->handler;
        tool->arg = add->arg;
        zlistx_add_end (self->tools, tool);
        s_tools_changed (self);
    }
    dsh_doc_destroy (&doc);
    return rc;
}

//  The pipe speaks pictures, "sp": a command and, for ADD and REMOVE, a
//  pointer to the caller's argument (an s_add_t, a tool name), valid while
//  the caller waits for the answer.
static int
s_self_handle_pipe (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    char *command = NULL;
    void *argument = NULL;
    if (zsock_recv (reader, "sp", &command, &argument) || !command) {
        zstr_free (&command);
        return -1;              //  interrupted
    }
    int rc = 0;
    if (streq (command, "$TERM"))
        rc = -1;
    else
    if (streq (command, "ADD") && argument) {
        char error [256] = "";
        int status = s_add_tool (self, (const s_add_t *) argument, error, sizeof (error));
        zsock_send (self->pipe, "ss", status? "ERROR": "OK", error);
    }
    else
    if (streq (command, "REMOVE") && argument) {
        s_tool_t *tool = s_tool_find (self, (const char *) argument);
        if (tool) {
            zlistx_delete (self->tools, zlistx_cursor (self->tools));
            s_tools_changed (self);
        }
        zsock_signal (self->pipe, tool? 0: 1);
    }
    else
    if (streq (command, "START")) {
        s_start (self);
        zsock_signal (self->pipe, 0);
    }
    else
    if (streq (command, "READY"))
        zsock_signal (self->pipe, self->ready? 0: 1);
    else
    if (streq (command, "APPLIED"))
        zsock_signal (self->pipe, self->applied? 0: 1);
    else
    if (streq (command, "REFUSAL")) {
        char *refusal = (char *) zlistx_first (self->refusals);
        zsock_send (self->pipe, "s", refusal? refusal: "");
        if (refusal)
            zlistx_delete (self->refusals, zlistx_cursor (self->refusals));
    }
    else
        zsys_error ("dsh_provider: invalid pipe command \"%s\"", command);
    zstr_free (&command);
    return rc;
}

static void
s_provider_actor (zsock_t *pipe, void *args)
{
    s_settings_t *settings = (s_settings_t *) args;
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->pipe = pipe;
    //  settings live on the caller's stack only until we signal: read it all now
    self->held = settings->held;
    self->id = strdup (settings->id);
    self->tools = zlistx_new ();
    zlistx_set_destructor (self->tools, (zlistx_destructor_fn *) s_tool_destroy);
    self->refusals = zlistx_new ();
    zlistx_set_destructor (self->refusals, (zlistx_destructor_fn *) zstr_free);
    //  Generations start from the clock, so a restarted component never
    //  repeats one its predecessor used
    self->generation = (uint64_t) zclock_time ();
    //  Inline handlers need no worker; the pool still hands deferred
    //  calls back from whichever thread finishes them
    self->pool = dsh_pool_new (settings->inline_handlers? 1: settings->workers, settings->queue_limit, s_job_run);
    assert (self->pool);
    self->workers = settings->workers;
    self->inline_handlers = settings->inline_handlers;
    self->trace_content = s_trace_content ();
    self->running = zhashx_new ();
    //  Keys are the jobs' own key fields: nothing to copy or free
    zhashx_set_key_hasher (self->running, s_key_hash);
    zhashx_set_key_comparator (self->running, s_key_compare);
    zhashx_set_key_duplicator (self->running, NULL);
    zhashx_set_key_destructor (self->running, NULL);
    self->loop = zloop_new ();
    zloop_set_nonstop (self->loop, true);
    self->link_count = zlistx_size (settings->fronts);
    self->links = (s_link_t **) zmalloc (self->link_count * sizeof (s_link_t *));
    assert (self->links);
    uint32_t index = 0;
    for (const char *front = zlistx_first (settings->fronts); front; front = zlistx_next (settings->fronts)) {
        self->links [index] = s_link_new (self, index, front);
        index++;
    }
    zsock_signal (pipe, 0);

    zloop_reader (self->loop, pipe, s_self_handle_pipe, self);
    zmq_pollitem_t pool_item = { NULL, dsh_pool_fd (self->pool), ZMQ_POLLIN, 0 };
    zloop_poller (self->loop, &pool_item, s_pool_done, self);
    if (self->held)
        s_deadline_set (self, &self->start, zclock_mono () + S_HELD_UNUSED_MS, s_start_due);
    else
        s_start_discovery (self);
    zloop_start (self->loop);

    s_publish_all (self, DSH_WITHDRAW);
    zloop_destroy (&self->loop);
    //  Calls still here will not be answered by us: tell their handlers, and
    //  give them a moment to let go of their calls
    for (s_job_t *job = zhashx_first (self->running); job; job = zhashx_next (self->running))
        dsh_call_cancel (job->call);
    int64_t give_up = zclock_mono () + S_SHUTDOWN_GRACE_MS;
    while (zhashx_size (self->running) && zclock_mono () < give_up) {
        zmq_pollitem_t wake = { NULL, dsh_pool_fd (self->pool), ZMQ_POLLIN, 0 };
        zmq_poll (&wake, 1, 10);
        s_pool_done (NULL, NULL, self);
    }
    if (zhashx_size (self->running) == 0)
        dsh_pool_destroy (&self->pool, S_SHUTDOWN_GRACE_MS, s_item_discard);
    else
        //  A handler still holds a call and may finish it later: the pool
        //  must outlive it, so it stays with the process
        zsys_warning ("%s: %zu call(s) still held by handlers at exit", self->id, zhashx_size (self->running));
    zhashx_destroy (&self->running);
    for (size_t link = 0; link < self->link_count; link++)
        s_link_destroy (&self->links [link]);
    free (self->links);
    zlistx_destroy (&self->tools);
    zlistx_destroy (&self->refusals);
    zstr_free (&self->id);
    free (self);
}

//  ---------------------------------------------------------------------
//  The handle

//  Turns the broker list into the front endpoints the links connect to:
//  an entry "beacon" or "beacon:PORT" becomes the brokers heard there now
//  (dsh_beacon_expand). Returns a list (caller destroys), or NULL with a
//  reason.
static zlistx_t *
s_front_endpoints (const char *spec, char *error, size_t error_size)
{
    zlistx_t *named = dsh_sock_brokers (spec, error, error_size);
    //  Beacon entries become the brokers heard now, once
    zlistx_t *brokers = named? dsh_beacon_expand (named, 0, error, error_size): NULL;
    zlistx_destroy (&named);
    if (!brokers)
        return NULL;
    zlistx_t *fronts = zlistx_new ();
    zlistx_set_destructor (fronts, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_comparator (fronts, (zlistx_comparator_fn *) strcmp);
    for (const char *entry = zlistx_first (brokers); entry; entry = zlistx_next (brokers)) {
        //  Two links to one broker would both take calls under one id: its
        //  ROUTER would ignore the second, which would never be heard
        if (zlistx_find (fronts, (void *) entry)) {
            snprintf (error, error_size, "broker \"%s\" is listed twice", entry);
            zlistx_destroy (&fronts);
            break;
        }
        zlistx_add_end (fronts, strdup (entry));
    }
    zlistx_destroy (&brokers);
    return fronts;
}

dsh_provider_t *
dsh_provider_new (const char *broker, const char *id, size_t workers)
{
    dsh_provider_options_t options = { .broker = broker, .id = id, .workers = workers };
    return dsh_provider_new_options (&options);
}

dsh_provider_t *
dsh_provider_new_options (const dsh_provider_options_t *options)
{
    assert (options);
    const char *id = options->id;
    if (id && !dsh_proto_valid_id (id, strlen (id))) {
        zsys_error ("dsh_provider: invalid component id \"%s\"", id);
        return NULL;
    }
    char error [512];
    zlistx_t *fronts = s_front_endpoints (options->broker, error, sizeof (error));
    if (!fronts) {
        zsys_error ("dsh_provider: %s", error);
        return NULL;
    }
    dsh_provider_t *self = (dsh_provider_t *) zmalloc (sizeof (dsh_provider_t));
    assert (self);
    if (id)
        self->id = strdup (id);
    else {
        zuuid_t *uuid = zuuid_new ();
        self->id = zsys_sprintf ("c-%.12s", zuuid_str (uuid));
        zuuid_destroy (&uuid);
    }
    s_settings_t settings = {
        fronts, self->id,
        options->workers? options->workers: S_DEFAULT_WORKERS,
        options->queue_limit? options->queue_limit: S_DEFAULT_QUEUE_LIMIT,
        !options->start_now,
        options->inline_handlers
    };
    self->actor = zactor_new (s_provider_actor, &settings);
    zlistx_destroy (&fronts);
    return self;
}

void
dsh_provider_start (dsh_provider_t *self)
{
    assert (self);
    zsock_send (self->actor, "s", "START");
    zsock_wait (self->actor);
}

void
dsh_provider_destroy (dsh_provider_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_provider_t *self = *self_p;
        zactor_destroy (&self->actor);
        zstr_free (&self->id);
        free (self);
        *self_p = NULL;
    }
}

const char *
dsh_provider_id (dsh_provider_t *self)
{
    assert (self);
    return self->id;
}

static int
s_send_add (dsh_provider_t *self, const s_add_t *add)
{
    zsock_send (self->actor, "sp", "ADD", add);
    char *status = NULL, *reason = NULL;
    zsock_recv (self->actor, "ss", &status, &reason);
    int rc = status && streq (status, "OK")? 0: -1;
    if (rc)
        zsys_error ("%s: cannot add tool: %s", self->id, reason? reason: "no reply");
    zstr_free (&status);
    zstr_free (&reason);
    return rc;
}

int
dsh_provider_add (dsh_provider_t *self, const dsh_tooldef_t *def, dsh_handler_fn *handler, void *arg)
{
    assert (self);
    assert (def);
    assert (handler);
    json_t *entry = dsh_tooldef_to_json (def);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    int rc = entry? dsh_json_to_msgpack (&pk, entry): -1;
    if (rc == 0) {
        s_add_t add = { sbuf.data, sbuf.size, def->params, true, handler, arg };
        rc = s_send_add (self, &add);
    }
    msgpack_sbuffer_destroy (&sbuf);
    json_decref (entry);
    return rc;
}

int
dsh_provider_add_raw (dsh_provider_t *self, const char *tool_json, dsh_handler_fn *handler, void *arg)
{
    assert (self);
    assert (tool_json);
    assert (handler);
    msgpack_sbuffer sbuf;
    char error [256];
    int rc = dsh_json_text_to_msgpack (tool_json, &sbuf, error, sizeof (error));
    if (rc)
        zsys_error ("%s: cannot add raw tool: %s", self->id, error);
    else {
        s_add_t add = { sbuf.data, sbuf.size, NULL, false, handler, arg };
        rc = s_send_add (self, &add);
    }
    msgpack_sbuffer_destroy (&sbuf);
    return rc;
}

int
dsh_provider_remove (dsh_provider_t *self, const char *name)
{
    assert (self);
    assert (name);
    zsock_send (self->actor, "sp", "REMOVE", name);
    return zsock_wait (self->actor) == 0? 0: -1;
}

int
dsh_provider_wait_ready (dsh_provider_t *self, int timeout_ms)
{
    assert (self);
    int64_t give_up = zclock_mono () + timeout_ms;
    while (true) {
        zsock_send (self->actor, "s", "READY");
        if (zsock_wait (self->actor) == 0)
            return 0;
        if (zclock_mono () >= give_up)
            return -1;
        zclock_sleep (20);
    }
}

int
dsh_provider_wait_applied (dsh_provider_t *self, int timeout_ms)
{
    assert (self);
    int64_t give_up = zclock_mono () + timeout_ms;
    while (true) {
        zsock_send (self->actor, "s", "APPLIED");
        if (zsock_wait (self->actor) == 0)
            return 0;
        if (zclock_mono () >= give_up)
            return -1;
        zclock_sleep (20);
    }
}

char *
dsh_provider_refusal (dsh_provider_t *self, int timeout_ms)
{
    assert (self);
    int64_t give_up = zclock_mono () + timeout_ms;
    while (true) {
        zsock_send (self->actor, "s", "REFUSAL");
        char *refusal = NULL;
        zsock_recv (self->actor, "s", &refusal);
        if (refusal && *refusal)
            return refusal;
        zstr_free (&refusal);
        if (zclock_mono () >= give_up)
            return NULL;
        zclock_sleep (20);
    }
}
