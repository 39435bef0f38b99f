/*  =========================================================================
    dsh_provider - serve tools to a dsh broker from any process

    The provider object is a thin handle on an actor. The actor owns the
    sockets (a DEALER to the front for discovery, a DEALER to the work
    socket, a PUB to the announce socket), the tool table, and a dsh_pool of
    workers. Its loop only moves messages: it decodes a CALL once, finds the
    tool, and hands the decoded call to a worker; the worker validates the
    arguments (typed tools), runs the handler and encodes the result; the
    loop sends it back. See PROTOCOL.md, "Component lifecycle".

    On the call path nothing is copied that can be moved: the CALL body
    stays in the zmq_msg_t it arrived in (the call's strings point into
    it), the result is packed straight into the zmq_msg_t that is sent, and
    calls are found by their broker token as a 64-bit key.
    =========================================================================
*/

#include "dsh_provider.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_pool.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_curve.h"

#include <stdatomic.h>

#define S_DISCOVERY_RETRY_MS    1000
#define S_QUEUE_LIMIT           10000   //  socket high-water marks
#define S_DEFAULT_WORKERS       4
#define S_DEFAULT_QUEUE_LIMIT   1024    //  calls waiting for a worker
#define S_ANNOUNCE_DELAY_MS     10      //  changes within this go in one ANNOUNCE
#define S_SHUTDOWN_GRACE_MS     1000
#define S_BATCH                 64      //  messages handled per wakeup, at most

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

//  One call on its way through a worker.
typedef struct {
    s_kind_t kind;
    uint64_t token;                 //  the broker's token for the call (its
                                    //  8 bytes as they came), key in running
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
} s_job_t;

//  A progress report of a running call, on its way to the broker.
typedef struct {
    s_kind_t kind;
    uint64_t token;
    zframe_t *body;
} s_note_t;

typedef struct {
    zsock_t *pipe;
    zloop_t *loop;
    char *id;
    char *broker;                   //  front endpoint
    zsock_t *front;                 //  DEALER, discovery
    zsock_t *work;                  //  DEALER, calls; NULL until welcomed
    zsock_t *announce;              //  PUB; NULL until welcomed
    zlistx_t *tools;                //  s_tool_t *, in the order added
    uint64_t generation;
    int heartbeat_ms;
    int liveness;                   //  heartbeats of silence the broker allows
    int heartbeat_timer;
    int discovery_timer;
    dsh_handshake_t *work_handshake;    //  WORK's connections, made and failed
    size_t work_connections;            //  handshakes on WORK said HELLO for
    char *work_endpoint;                //  WORK as resolved, to connect again
    int64_t hello_unanswered_ms;        //  when WORK said a HELLO nothing has
                                        //  answered yet; 0 once anything came
    dsh_handshake_t *front_handshake;   //  why discovery gets no WELCOME
    bool told_failure;                  //  logged the handshake failure already
    bool held;                      //  discovery waits for START
    int announce_timer;             //  a coalesced ANNOUNCE is due, or 0
    int max_message_bytes;
    bool ready;                     //  the broker asked for our tools
    zlistx_t *refusals;             //  char *, "tool: reason"
    dsh_pool_t *pool;
    size_t workers;                 //  the pool's: what ANNOUNCE states as concurrency
    zhashx_t *running;              //  &token -> s_job_t *, queued, running or deferred
} self_t;

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
s_job_new (uint64_t token, zmq_msg_t *body)
{
    s_job_t *self = (s_job_t *) zmalloc (sizeof (s_job_t));
    assert (self);
    self->kind = S_JOB;
    self->token = token;
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
        dsh_call_destroy (&self->call);
        dsh_result_destroy (&self->result);
        zmq_msg_close (&self->body);
        zmq_msg_close (&self->encoded);
        free (self);
        *self_p = NULL;
    }
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
}

//  The running table's key is the job's token: 64 bits, no string.
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
    note->token = job->token;
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

static void
s_publish (self_t *self, const char *command, bool with_tools)
{
    if (!self->announce)
        return;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "component", self->id);
    dsh_pack_cstr (&packer.pk, "generation");
    msgpack_pack_uint64 (&packer.pk, self->generation);
    if (with_tools) {
        //  The broker keeps a window of calls at us sized on it, and holds
        //  the rest itself, where it can serve its callers in turn
        dsh_pack_cstr (&packer.pk, "concurrency");
        msgpack_pack_uint64 (&packer.pk, self->workers);
        dsh_pack_cstr (&packer.pk, "tools");
        msgpack_pack_array (&packer.pk, zlistx_size (self->tools));
        for (s_tool_t *tool = zlistx_first (self->tools); tool; tool = zlistx_next (self->tools))
            dsh_packer_raw (&packer, zchunk_data (tool->entry), zchunk_size (tool->entry));
    }
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = dsh_proto_pub_message (command, &body);
    dsh_sock_send (self->announce, &msg);
}

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

//  Sends a RESULT or PROGRESS for a call: "" "DSH1" command token body.
//  Takes the body's content.
static void
s_send_work (self_t *self, const char *command, uint64_t token, zmq_msg_t *body)
{
    zmq_msg_t parts [5];
    dsh_sock_head (parts, command);
    dsh_sock_part_mem (&parts [3], &token, sizeof (token));
    zmq_msg_init (&parts [4]);
    zmq_msg_move (&parts [4], body);
    if (dsh_sock_send_parts (self->work, parts, 5))
        dsh_log_warning ("%s: a %s could not be sent: %s", self->id, command, zmq_strerror (errno));
}

//  The same with a body from the codec; takes the frame.
static void
s_send_work_frame (self_t *self, const char *command, uint64_t token, zframe_t **body_p)
{
    zmq_msg_t body;
    dsh_sock_part_frame (&body, body_p);
    s_send_work (self, command, token, &body);
    zmq_msg_close (&body);
}

//  ---------------------------------------------------------------------
//  Discovery

//  Logs a handshake failure once, until the handshake succeeds again.
static void
s_tell_failure (self_t *self, dsh_handshake_t *handshake)
{
    const char *failure = handshake? dsh_handshake_failure (handshake): NULL;
    if (failure && !self->told_failure)
        zsys_error ("%s: cannot talk to broker at %s: %s", self->id, self->broker, failure);
    self->told_failure = failure != NULL;
}

static int s_work_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  Says HELLO on WORK; the broker answers SYNC.
static void
s_work_hello (self_t *self)
{
    s_send_hello (self->work, self->id, self->generation);
    if (!self->hello_unanswered_ms)
        self->hello_unanswered_ms = zclock_mono ();
}

//  A new WORK connection under our id, that says HELLO.
static void
s_work_connect (self_t *self)
{
    self->work = zsock_new (ZMQ_DEALER);
    dsh_sock_limit (self->work, self->max_message_bytes, S_QUEUE_LIMIT);
    //  A routing id of this connection's own (the id, a space, a random
    //  tag): the broker hears a second process under the id, and can
    //  tell it the id is taken, instead of libzmq ignoring its connection
    zuuid_t *tag = zuuid_new ();
    char routing_id [DSH_ID_MAX + 34];
    snprintf (routing_id, sizeof (routing_id), "%s %s", self->id, zuuid_str (tag));
    zuuid_destroy (&tag);
    zsock_set_identity (self->work, routing_id);
    dsh_curve_client (self->work);
    self->work_handshake = dsh_handshake_new (self->work);
    self->work_connections = 0;
    zsock_connect (self->work, "%s", self->work_endpoint);
    zloop_reader (self->loop, self->work, s_work_recv, self);
    self->hello_unanswered_ms = 0;
    s_work_hello (self);
}

static int
s_heartbeat (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    s_publish (self, DSH_HEARTBEAT, false);
    //  A WORK connection made again (the broker restarted, the link was
    //  cut, or the broker dropped it) says HELLO again: under CURVE the
    //  broker sends calls only on a connection that has spoken
    size_t connections = dsh_handshake_successes (self->work_handshake);
    if (connections > self->work_connections) {
        //  Also when this is the first look: the broker may have restarted
        //  since the first connection, and a HELLO is what gives the new
        //  one our route (one too many only costs an ANNOUNCE)
        if (self->work_connections || connections > 1)
            s_work_hello (self);
        //  The answer is due from when the connection is made, not from
        //  when the HELLO was queued for it
        if (self->hello_unanswered_ms)
            self->hello_unanswered_ms = zclock_mono ();
        self->work_connections = connections;
    }
    //  Connected, and the HELLO unanswered past the liveness window: the
    //  broker's ROUTER has our id on another connection (a second process
    //  under this id) and ignores this one, and goes on ignoring it once
    //  the other has gone. Only a new connection can take the id then.
    int64_t silence_ms = (int64_t) self->heartbeat_ms * self->liveness;
    if (connections && self->hello_unanswered_ms && zclock_mono () - self->hello_unanswered_ms > silence_ms) {
        zsys_warning ("%s: the broker at %s has not answered on WORK for %" PRId64 " ms (another process may "
                      "serve id %s, or this key may not); connecting again", self->id, self->broker, silence_ms,
                      self->id);
        zloop_reader_end (self->loop, self->work);
        dsh_handshake_destroy (&self->work_handshake);
        zsock_destroy (&self->work);
        s_work_connect (self);
    }
    s_tell_failure (self, self->work_handshake);
    //  A flood of bad messages that stopped still gets its count logged
    dsh_log_tick ();
    return 0;
}

static int
s_discover (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    s_send_hello (self->front, NULL, 0);
    s_tell_failure (self, self->front_handshake);
    return 0;
}

//  The broker told us where everything is: connect and say hello.
static void
s_welcomed (self_t *self, dsh_doc_t *doc)
{
    const msgpack_object *root = dsh_doc_root (doc);
    char *announce = dsh_doc_strdup (doc, dsh_map_get (root, "announce"));
    char *work = dsh_doc_strdup (doc, dsh_map_get (root, "work"));
    const msgpack_object *heartbeat = dsh_map_get (root, "heartbeatMs");
    const msgpack_object *liveness = dsh_map_get (root, "liveness");
    const msgpack_object *max_bytes = dsh_map_get (root, "maxMessageBytes");
    const msgpack_object *protocol = dsh_map_get (root, "protocol");
    if (!protocol || protocol->type != MSGPACK_OBJECT_POSITIVE_INTEGER || protocol->via.u64 != DSH_PROTOCOL_VERSION) {
        zsys_error ("%s: the broker at %s does not speak dsh/%d; still asking", self->id, self->broker,
                    DSH_PROTOCOL_VERSION);
        return;
    }
    if (!announce || !work || !heartbeat || heartbeat->type != MSGPACK_OBJECT_POSITIVE_INTEGER
    ||  heartbeat->via.u64 == 0 || heartbeat->via.u64 > 3600000) {
        dsh_log_warning ("%s: malformed WELCOME from %s; asking again", self->id, self->broker);
        return;
    }
    if (self->work)
        return;                 //  a late second WELCOME; already connected
    self->heartbeat_ms = (int) heartbeat->via.u64;
    self->liveness = liveness && liveness->type == MSGPACK_OBJECT_POSITIVE_INTEGER && liveness->via.u64 > 0
                  && liveness->via.u64 <= 1000? (int) liveness->via.u64: DSH_DEFAULT_LIVENESS;
    if (max_bytes && max_bytes->type == MSGPACK_OBJECT_POSITIVE_INTEGER && max_bytes->via.u64 <= INT_MAX)
        self->max_message_bytes = (int) max_bytes->via.u64;
    zloop_timer_end (self->loop, self->discovery_timer);

    char *announce_endpoint = dsh_sock_resolve (announce, self->broker);
    self->work_endpoint = dsh_sock_resolve (work, self->broker);
    self->announce = zsock_new (ZMQ_PUB);
    dsh_sock_limit (self->announce, self->max_message_bytes, S_QUEUE_LIMIT);
    //  A clean exit's WITHDRAW must get out before the socket closes
    zsock_set_linger (self->announce, 1000);
    dsh_curve_client (self->announce);
    zsock_connect (self->announce, "%s", announce_endpoint);
    s_work_connect (self);
    self->heartbeat_timer = zloop_timer (self->loop, (size_t) self->heartbeat_ms, 0, s_heartbeat, self);
    zstr_free (&announce_endpoint);
}

static int
s_front_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
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
            s_welcomed (self, doc);
        dsh_doc_destroy (&doc);
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
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

static void
s_handle_call (self_t *self, dsh_sock_msg_t *msg)
{
    if (msg->count - msg->body < 2 || zmq_msg_size (&msg->part [msg->body]) != 8) {
        dsh_log_warning ("%s: CALL without token and body", self->id);
        return;
    }
    uint64_t token;
    memcpy (&token, zmq_msg_data (&msg->part [msg->body]), sizeof (token));
    //  The job takes the body first: the call's strings point into it, and
    //  a short body lives inside its zmq_msg_t, which must not move again
    s_job_t *job = s_job_new (token, &msg->part [msg->body + 1]);
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
        s_send_work_frame (self, DSH_RESULT, token, &reply);
        s_job_destroy (&job);
        return;
    }
    job->result = dsh_result_new (dsh_call_id (job->call));
    job->params = tool->params;
    job->typed = tool->typed;
    job->handler = tool->handler;
    job->arg = tool->arg;
    job->pool = self->pool;
    dsh_call_hooks_t hooks = { s_job_progress, s_job_finish };
    dsh_call_set_hooks (job->call, &hooks, job);
    //  In the table before a worker can have it; the token is the key
    if (zhashx_insert (self->running, &job->token, job)) {
        //  The broker never reuses a token while its call is open
        dsh_log_warning ("%s: a CALL repeats a running call's token; dropped", self->id);
        s_job_destroy (&job);
        return;
    }
    if (dsh_pool_submit (self->pool, job)) {
        zhashx_delete (self->running, &job->token);
        char text [128];
        snprintf (text, sizeof (text), "Error: component \"%.64s\" is overloaded", self->id);
        reply = dsh_proto_error_result (dsh_call_id (job->call), DSH_E_OVERLOADED, text);
        s_send_work_frame (self, DSH_RESULT, token, &reply);
        s_job_destroy (&job);
    }
}

//  The broker answered a call already (deadline, or the caller cancelled):
//  tell its handler, and send nothing for it.
static void
s_handle_cancel (self_t *self, dsh_sock_msg_t *msg)
{
    if (msg->count == msg->body || zmq_msg_size (&msg->part [msg->body]) != 8)
        return;
    uint64_t token;
    memcpy (&token, zmq_msg_data (&msg->part [msg->body]), sizeof (token));
    s_job_t *job = (s_job_t *) zhashx_lookup (self->running, &token);
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
            s_send_work_frame (self, DSH_PROGRESS, note->token, &note->body);
            s_note_destroy (&note);
            continue;
        }
        s_job_t *job = (s_job_t *) done;
        zhashx_delete (self->running, &job->token);
        if (!dsh_call_cancelled (job->call) && job->is_encoded)
            s_send_work (self, DSH_RESULT, job->token, &job->encoded);
        s_job_destroy (&job);
    }
    return 0;
}

static void
s_handle_refused (self_t *self, dsh_sock_msg_t *msg)
{
    //  Rare: the codec's own checks on a frame copy, which the document
    //  points into
    char error [256];
    zframe_t *body = msg->body < msg->count?
        zframe_new (zmq_msg_data (&msg->part [msg->body]), zmq_msg_size (&msg->part [msg->body])): NULL;
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    if (doc) {
        const msgpack_object *root = dsh_doc_root (doc);
        const char *tool = dsh_doc_strdup (doc, dsh_map_get (root, "tool"));
        const char *reason = dsh_doc_strdup (doc, dsh_map_get (root, "reason"));
        char *refusal = zsys_sprintf ("%s: %s", tool? tool: "(unnamed)", reason? reason: "refused");
        dsh_log_warning ("%s: the broker refused %s", self->id, refusal);
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
    self_t *self = (self_t *) arg;
    dsh_sock_msg_t msg;
    char error [256];
    if (dsh_sock_recv_msg (reader, &msg, error, sizeof (error))) {
        if (*error)
            dsh_log_warning ("%s: malformed message from the broker: %s", self->id, error);
    }
    else
    if (streq (msg.command, DSH_CALL))
        s_handle_call (self, &msg);
    else
    if (streq (msg.command, DSH_CANCEL))
        s_handle_cancel (self, &msg);
    else
    if (streq (msg.command, DSH_SYNC)) {
        s_publish (self, DSH_ANNOUNCE, true);
        self->ready = true;
    }
    else
    if (streq (msg.command, DSH_REFUSED))
        s_handle_refused (self, &msg);
    else
        dsh_log_warning ("%s: unknown command \"%s\" from the broker", self->id, msg.command);
    dsh_sock_msg_close (&msg);
    return 0;
}

static int
s_work_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    //  Anything from the broker answers the HELLO
    ((self_t *) arg)->hello_unanswered_ms = 0;
    return dsh_sock_drain (reader, S_BATCH, s_work_recv_one, arg);
}

//  ---------------------------------------------------------------------
//  Pipe

static int
s_announce_due (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    self->announce_timer = 0;
    //  The broker takes presence at a new generation only once our WORK
    //  connection has stated it (another process could announce under our
    //  id); the SYNC it answers with brings the ANNOUNCE again if this one
    //  gets there first
    if (self->work)
        s_work_hello (self);
    s_publish (self, DSH_ANNOUNCE, true);
    return 0;
}

//  The tool set changed: a new generation, announced a moment later, so
//  that a component adding a thousand tools sends one ANNOUNCE, not a
//  thousand ever larger ones.
static void
s_tools_changed (self_t *self)
{
    self->generation++;
    if (!self->announce_timer)
        self->announce_timer = zloop_timer (self->loop, S_ANNOUNCE_DELAY_MS, 1, s_announce_due, self);
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

//  Asks the broker for the endpoints, and again until it answers.
static void
s_start_discovery (self_t *self)
{
    s_send_hello (self->front, NULL, 0);
    self->discovery_timer = zloop_timer (self->loop, S_DISCOVERY_RETRY_MS, 0, s_discover, self);
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
        if (self->held) {
            self->held = false;
            s_start_discovery (self);
        }
        zsock_signal (self->pipe, 0);
    }
    else
    if (streq (command, "READY"))
        zsock_signal (self->pipe, self->ready? 0: 1);
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
    dsh_provider_options_t *settings = (dsh_provider_options_t *) args;
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->pipe = pipe;
    //  settings live on the caller's stack only until we signal: read it all now
    self->held = settings->held;
    self->id = strdup (settings->id);
    self->broker = strdup (settings->broker);
    self->max_message_bytes = DSH_MAX_MESSAGE_DEFAULT;
    self->tools = zlistx_new ();
    zlistx_set_destructor (self->tools, (zlistx_destructor_fn *) s_tool_destroy);
    self->refusals = zlistx_new ();
    zlistx_set_destructor (self->refusals, (zlistx_destructor_fn *) zstr_free);
    //  Generations start from the clock, so a restarted component never
    //  repeats one its predecessor used
    self->generation = (uint64_t) zclock_time ();
    self->pool = dsh_pool_new (settings->workers, settings->queue_limit, s_job_run);
    self->workers = settings->workers;
    self->running = zhashx_new ();
    //  Keys are the jobs' own token fields: nothing to copy or free
    dsh_proto_token_keys (self->running);
    assert (self->pool);
    self->front = zsock_new (ZMQ_DEALER);
    dsh_sock_limit (self->front, DSH_MAX_MESSAGE_DEFAULT, 100);
    dsh_curve_client (self->front);
    self->front_handshake = dsh_handshake_new (self->front);
    zsock_connect (self->front, "%s", self->broker);
    zsock_signal (pipe, 0);

    self->loop = zloop_new ();
    zloop_set_nonstop (self->loop, true);
    zloop_reader (self->loop, pipe, s_self_handle_pipe, self);
    zloop_reader (self->loop, self->front, s_front_recv, self);
    zmq_pollitem_t pool_item = { NULL, dsh_pool_fd (self->pool), ZMQ_POLLIN, 0 };
    zloop_poller (self->loop, &pool_item, s_pool_done, self);
    if (!self->held)
        s_start_discovery (self);
    zloop_start (self->loop);

    s_publish (self, DSH_WITHDRAW, false);
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
    dsh_handshake_destroy (&self->front_handshake);
    dsh_handshake_destroy (&self->work_handshake);
    zstr_free (&self->work_endpoint);
    zsock_destroy (&self->front);
    zsock_destroy (&self->work);
    zsock_destroy (&self->announce);
    zlistx_destroy (&self->tools);
    zlistx_destroy (&self->refusals);
    zstr_free (&self->id);
    zstr_free (&self->broker);
    free (self);
}

//  ---------------------------------------------------------------------
//  The handle

dsh_provider_t *
dsh_provider_new (const char *broker, const char *id, size_t workers)
{
    dsh_provider_options_t options = { broker, id, workers, 0, false };
    return dsh_provider_new_options (&options);
}

dsh_provider_t *
dsh_provider_new_options (const dsh_provider_options_t *options)
{
    assert (options);
    const char *broker = options->broker;
    const char *id = options->id;
    if (!broker)
        broker = getenv ("DSH_BROKER");
    if (!broker || !*broker)
        broker = DSH_DEFAULT_ENDPOINT;
    if (id && !dsh_proto_valid_id (id, strlen (id)))
        return NULL;
    dsh_provider_t *self = (dsh_provider_t *) zmalloc (sizeof (dsh_provider_t));
    assert (self);
    if (id)
        self->id = strdup (id);
    else {
        zuuid_t *uuid = zuuid_new ();
        self->id = zsys_sprintf ("c-%.12s", zuuid_str (uuid));
        zuuid_destroy (&uuid);
    }
    dsh_provider_options_t settings = {
        broker, self->id,
        options->workers? options->workers: S_DEFAULT_WORKERS,
        options->queue_limit? options->queue_limit: S_DEFAULT_QUEUE_LIMIT,
        options->held
    };
    self->actor = zactor_new (s_provider_actor, &settings);
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
