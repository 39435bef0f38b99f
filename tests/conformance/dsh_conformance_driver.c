/*  =========================================================================
    dsh-conformance-c - the C SDK's conformance driver

        dsh-conformance-c ENDPOINT[,ENDPOINT...]

    Speaks the conformance driver protocol (tests/conformance/SCENARIOS.md)
    on stdin/stdout through libdsh's public client API: dsh_client for
    calls (sent with dsh_client_call_send, so many are in flight at once,
    with their progress and cancels) and dsh_watcher for the watch ops.
    Requests are read as they come and answered as they complete, one JSON
    line each, in any order; every answer carries its request's id.

    One zloop serves stdin, the client's socket, the watcher's notices and
    a tick that cancels calls when due, keeps the client's broker watch
    running, and answers calls that passed this driver's own deadline. A
    bench runs in an actor with a client of its own, so a three-second
    bench holds nothing else up.
    =========================================================================
*/

#include "dsh.h"

#include <inttypes.h>
#include <unistd.h>

//  How long a call is waited for beyond its own deadline: the broker's
//  TIMEOUT should come first (what dsh_client_call waits, too).
#define S_CALL_MARGIN_MS    2000
#define S_WATCH_FIRST_MS    10000   //  for the watcher's first snapshot
#define S_QUERY_TIMEOUT_MS  5000    //  for LIST
#define S_TICK_MS           10      //  cancels are due to within this
#define S_MAX_LINE_BYTES    (16 * 1024 * 1024)
#define S_BENCH_WAIT_MS     5000    //  longest wait for one bench reply

//  A call this driver sent and has not answered yet.
typedef struct {
    json_t *id;                 //  the request's id, echoed
    char *call_id;
    int64_t deadline;           //  this driver's own, past the broker's
    int64_t cancel_at;          //  when to cancel it (0: never), for "cancel"
    json_int_t progress;        //  PROGRESS notifications received
    bool wire;                  //  the request asked for the RESULT body too
} s_pending_t;

typedef struct {
    const char *endpoint;
    zloop_t *loop;
    dsh_client_t *client;
    zhashx_t *pending;          //  callId -> s_pending_t *
    dsh_watcher_t *watcher;     //  started by the first "watch"
    size_t snapshots;           //  snapshot notices seen
    json_int_t epoch;           //  the latest snapshot's epoch
    zlistx_t *watch_waiters;    //  json_t * ids of "watch" requests awaiting the first snapshot
    int64_t watch_deadline;
    zlistx_t *benches;          //  s_running_t *: benches running
    char *input;                //  stdin bytes not yet a whole line
    size_t input_size;
    bool input_closed;
} driver_t;

//  --------------------------------------------------------------------------
//  Answers

//  Writes one answer line and takes the answer.
static void
s_answer (json_t **answer_p)
{
    char *text = json_dumps (*answer_p, JSON_COMPACT | JSON_ENCODE_ANY);
    assert (text);
    printf ("%s\n", text);
    fflush (stdout);
    free (text);
    json_decref (*answer_p);
    *answer_p = NULL;
}

//  An answer to id with one more field (takes value).
static json_t *
s_reply_to (json_t *id, const char *key, json_t *value)
{
    json_t *answer = json_object ();
    json_object_set (answer, "id", id? id: json_null ());
    json_object_set_new (answer, key, value);
    return answer;
}

static void
s_answer_error (json_t *id, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

static void
s_answer_error (json_t *id, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    char *text = zsys_vprintf (format, args);
    va_end (args);
    json_t *answer = s_reply_to (id, "error", json_string (text));
    zstr_free (&text);
    s_answer (&answer);
}

//  The answer to a call: isError, code, text (every text block, joined with
//  "\n"), structured and progress, from a RESULT body.
static json_t *
s_call_answer (json_t *id, json_t *body, json_int_t progress)
{
    json_t *answer = s_reply_to (id, "isError", json_boolean (json_is_true (json_object_get (body, "isError"))));
    json_t *code = json_object_get (json_object_get (body, "error"), "code");
    json_object_set (answer, "code", json_is_string (code)? code: json_null ());
    char *text = NULL;
    size_t index;
    json_t *block;
    json_array_foreach (json_object_get (body, "content"), index, block) {
        const char *type = json_string_value (json_object_get (block, "type"));
        const char *part = json_string_value (json_object_get (block, "text"));
        if (type && streq (type, "text") && part) {
            char *joined = text? zsys_sprintf ("%s\n%s", text, part): strdup (part);
            zstr_free (&text);
            text = joined;
        }
    }
    json_object_set_new (answer, "text", json_string (text? text: ""));
    zstr_free (&text);
    json_t *structured = json_object_get (body, "structuredContent");
    json_object_set (answer, "structured", structured? structured: json_null ());
    json_object_set_new (answer, "progress", json_integer (progress));
    return answer;
}

//  An error result made here, in the shape dsh makes them.
static json_t *
s_made_result (const char *code, const char *text)
{
    return json_pack ("{s:[{s:s,s:s}],s:b,s:{s:s}}", "content", "type", "text", "text", text,
                      "isError", 1, "error", "code", code);
}

//  --------------------------------------------------------------------------
//  Calls

static void
s_pending_destroy (s_pending_t **self_p)
{
    if (*self_p) {
        s_pending_t *self = *self_p;
        json_decref (self->id);
        zstr_free (&self->call_id);
        free (self);
        *self_p = NULL;
    }
}

static void
s_pending_free (void **item_p)
{
    s_pending_destroy ((s_pending_t **) item_p);
}

//  Answers a pending call from a RESULT body and forgets it. A body the
//  library received (not one made here) goes with the answer as
//  wire.result, for the harness to check against the protocol definition.
static void
s_finish (driver_t *self, s_pending_t *pending, json_t *body, bool received)
{
    json_t *answer = s_call_answer (pending->id, body, pending->progress);
    if (received && pending->wire)
        json_object_set_new (answer, "wire", json_pack ("{s:O}", "result", body));
    s_answer (&answer);
    zhashx_delete (self->pending, pending->call_id);
}

//  One reply from the client: progress counts towards its call, a result
//  answers it; anything else (a reply for a call already answered) is
//  dropped.
static void
s_on_reply (driver_t *self, dsh_reply_t *reply)
{
    const char *command = dsh_reply_command (reply);
    json_t *body = dsh_reply_json (reply);
    const char *call_id = json_string_value (json_object_get (body, "callId"));
    s_pending_t *pending = call_id? (s_pending_t *) zhashx_lookup (self->pending, call_id): NULL;
    if (pending && streq (command, DSH_PROGRESS))
        pending->progress++;
    else
    if (pending && streq (command, DSH_RESULT)) {
        //  A result that has no JSON form (bytes that are not text) still
        //  has its verdict
        bool received = body != NULL;
        if (!body)
            body = s_made_result (dsh_reply_error_code (reply)? dsh_reply_error_code (reply): "",
                                  dsh_reply_text (reply)? dsh_reply_text (reply): "");
        s_finish (self, pending, body, received);
    }
    json_decref (body);
}

//  Takes every reply the client has now, including any it kept aside while
//  a blocking request waited.
static void
s_drain_client (driver_t *self)
{
    dsh_reply_t *reply;
    while ((reply = dsh_client_recv (self->client, 0))) {
        s_on_reply (self, reply);
        dsh_reply_destroy (&reply);
    }
}

static int
s_on_client (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    (void) reader;
    s_drain_client ((driver_t *) arg);
    return 0;
}

//  Sends the call a "call" or "cancel" request names; answers at once if it
//  cannot be sent. cancel_after_ms < 0: no cancel.
static void
s_send_call (driver_t *self, json_t *id, json_t *request, int64_t cancel_after_ms)
{
    const char *name = json_string_value (json_object_get (request, "name"));
    if (!name) {
        s_answer_error (id, "field \"name\" is required");
        return;
    }
    json_t *arguments = json_object_get (request, "arguments");
    json_t *timeout = json_object_get (request, "timeoutMs");
    json_t *agent = json_object_get (request, "agent");
    if ((timeout && (!json_is_integer (timeout) || json_integer_value (timeout) < 0
                     || json_integer_value (timeout) > INT32_MAX))
    ||  (agent && !json_is_string (agent))) {
        s_answer_error (id, "\"timeoutMs\" must be a non-negative integer and \"agent\" a string");
        return;
    }
    int timeout_ms = timeout? (int) json_integer_value (timeout): 0;
    msgpack_sbuffer args;
    msgpack_sbuffer_init (&args);
    msgpack_packer packer;
    msgpack_packer_init (&packer, &args, msgpack_sbuffer_write);
    json_t *empty = json_object ();
    int rc = dsh_json_to_msgpack (&packer, arguments? arguments: empty);
    json_decref (empty);
    const char *call_id = rc? NULL: dsh_client_call_send (self->client, NULL, name, args.data, args.size,
                                                          json_string_value (agent), NULL, 0, timeout_ms);
    msgpack_sbuffer_destroy (&args);
    if (rc) {
        s_answer_error (id, "\"arguments\" cannot be sent as msgpack");
        return;
    }
    if (!call_id) {
        s_answer_error (id, "the call could not be sent: %s", zmq_strerror (errno));
        return;
    }
    s_pending_t *pending = (s_pending_t *) zmalloc (sizeof (s_pending_t));
    assert (pending);
    pending->id = json_incref (id);
    pending->wire = json_is_true (json_object_get (request, "wire"));
    pending->call_id = strdup (call_id);
    int64_t now = zclock_mono ();
    pending->deadline = now + (timeout_ms > 0? timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS) + S_CALL_MARGIN_MS;
    pending->cancel_at = cancel_after_ms < 0? 0: now + cancel_after_ms;
    zhashx_update (self->pending, pending->call_id, pending);
}

//  Cancels calls that are due, and answers those whose own deadline passed
//  (a broker that restarted lost them, and says nothing).
static void
s_check_calls (driver_t *self, int64_t now)
{
    zlistx_t *expired = zlistx_new ();
    s_pending_t *pending = (s_pending_t *) zhashx_first (self->pending);
    while (pending) {
        if (pending->cancel_at && now >= pending->cancel_at) {
            pending->cancel_at = 0;
            dsh_client_cancel (self->client, pending->call_id);
        }
        if (now >= pending->deadline)
            zlistx_add_end (expired, pending);
        pending = (s_pending_t *) zhashx_next (self->pending);
    }
    for (pending = (s_pending_t *) zlistx_first (expired); pending; pending = (s_pending_t *) zlistx_next (expired)) {
        json_t *body = s_made_result (DSH_E_TIMEOUT, "Error: no answer to the call by its deadline");
        s_finish (self, pending, body, false);
        json_decref (body);
    }
    zlistx_destroy (&expired);
}

//  --------------------------------------------------------------------------
//  The watcher

//  Answers every "watch" waiting for the first snapshot: ok, or not if
//  there is none.
static void
s_answer_watchers (driver_t *self, bool ok)
{
    json_t *id;
    while ((id = (json_t *) zlistx_detach (self->watch_waiters, NULL))) {
        json_t *answer = s_reply_to (id, "ok", json_boolean (ok));
        if (!ok)
            json_object_set_new (answer, "error", json_string ("no snapshot within 10 s"));
        s_answer (&answer);
        json_decref (id);
    }
}

//  Takes the notices the watcher has now: snapshots are counted (with
//  their epoch); events need nothing, since the view is the watcher's.
static void
s_drain_watcher (driver_t *self)
{
    json_t *notice;
    while ((notice = dsh_watcher_recv (self->watcher, 0))) {
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        if (kind && streq (kind, "snapshot")) {
            self->snapshots++;
            self->epoch = json_integer_value (json_object_get (notice, "epoch"));
        }
        json_decref (notice);
    }
    if (self->snapshots)
        s_answer_watchers (self, true);
}

static int
s_on_watcher (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    (void) reader;
    s_drain_watcher ((driver_t *) arg);
    return 0;
}

//  Names as a sorted JSON array (takes names).
static json_t *
s_sorted (json_t *names)
{
    zlistx_t *list = zlistx_new ();
    zlistx_set_comparator (list, (zlistx_comparator_fn *) strcmp);
    size_t index;
    json_t *name;
    json_array_foreach (names, index, name)
        if (json_is_string (name))
            zlistx_add_end (list, (void *) json_string_value (name));
    zlistx_sort (list);
    json_t *sorted = json_array ();
    for (const char *item = (const char *) zlistx_first (list); item; item = (const char *) zlistx_next (list))
        json_array_append_new (sorted, json_string (item));
    zlistx_destroy (&list);
    json_decref (names);
    return sorted;
}

//  --------------------------------------------------------------------------
//  The bench: its own client in an actor, calls kept `inflight` deep until
//  the time is up, then the open ones collected. Pipe: "RESULT" json-text.

typedef struct {
    char *endpoint;
    char *name;
    msgpack_sbuffer args;
    int inflight;
    int seconds;
} s_bench_t;

static void
s_bench_destroy (s_bench_t **self_p)
{
    if (*self_p) {
        s_bench_t *self = *self_p;
        zstr_free (&self->endpoint);
        zstr_free (&self->name);
        msgpack_sbuffer_destroy (&self->args);
        free (self);
        *self_p = NULL;
    }
}

//  calls completed (ok or not), errors, and calls completed per second over
//  the whole run (the final collection included, as dsh-bench --drive).
static json_t *
s_bench_run (s_bench_t *self)
{
    dsh_client_t *client = dsh_client_new (self->endpoint);
    if (!client)
        return json_pack ("{s:s}", "error", "no client for the endpoint");
    int64_t started = zclock_mono ();
    int64_t stop_sending = started + (int64_t) self->seconds * 1000;
    json_int_t sent = 0, done = 0, errors = 0;
    const char *failure = NULL;
    for (; sent < self->inflight; sent++)
        if (!dsh_client_call_send (client, NULL, self->name, self->args.data, self->args.size, NULL, NULL, 0, 0)) {
            failure = "a call could not be sent";
            break;
        }
    while (!failure && done < sent) {
        dsh_reply_t *reply = dsh_client_recv (client, S_BENCH_WAIT_MS);
        if (!reply) {
            failure = "no reply within 5 s";
            break;
        }
        if (streq (dsh_reply_command (reply), DSH_RESULT)) {
            done++;
            errors += dsh_reply_is_error (reply);
            if (zclock_mono () < stop_sending) {
                if (dsh_client_call_send (client, NULL, self->name, self->args.data, self->args.size,
                                          NULL, NULL, 0, 0))
                    sent++;
                else
                    failure = "a call could not be sent";
            }
        }
        dsh_reply_destroy (&reply);
    }
    int64_t elapsed_ms = zclock_mono () - started;
    dsh_client_destroy (&client);
    if (failure) {
        char *text = zsys_sprintf ("%s, after %" PRId64 " calls", failure, (int64_t) done);
        json_t *outcome = json_pack ("{s:s}", "error", text);
        zstr_free (&text);
        return outcome;
    }
    return json_pack ("{s:I,s:I,s:f}", "calls", done, "errors", errors,
                      "callsPerS", elapsed_ms > 0? (double) done * 1000.0 / (double) elapsed_ms: 0.0);
}

static void
s_bench_actor (zsock_t *pipe, void *args)
{
    s_bench_t *bench = (s_bench_t *) args;
    zsock_signal (pipe, 0);
    json_t *outcome = s_bench_run (bench);
    s_bench_destroy (&bench);
    char *text = json_dumps (outcome, JSON_COMPACT);
    json_decref (outcome);
    zstr_sendx (pipe, "RESULT", text, NULL);
    free (text);
    //  Until the driver takes the result and lets go
    char *command;
    while ((command = zstr_recv (pipe)) && !streq (command, "$TERM"))
        zstr_free (&command);
    zstr_free (&command);
}

//  A bench running, and the request it answers.
typedef struct {
    zactor_t *actor;
    json_t *id;
} s_running_t;

static void
s_running_destroy (s_running_t **self_p)
{
    if (*self_p) {
        s_running_t *self = *self_p;
        zactor_destroy (&self->actor);
        json_decref (self->id);
        free (self);
        *self_p = NULL;
    }
}

//  A bench's outcome: answered, and its actor let go.
static int
s_on_bench (zloop_t *loop, zsock_t *reader, void *arg)
{
    driver_t *self = (driver_t *) arg;
    s_running_t *running = (s_running_t *) zlistx_first (self->benches);
    while (running && zactor_sock (running->actor) != reader)
        running = (s_running_t *) zlistx_next (self->benches);
    assert (running);
    zlistx_detach_cur (self->benches);
    zloop_reader_end (loop, reader);
    char *kind = NULL, *text = NULL;
    zstr_recvx (reader, &kind, &text, NULL);
    json_t *outcome = text? json_loads (text, 0, NULL): NULL;
    if (!json_is_object (outcome)) {
        json_decref (outcome);
        outcome = json_pack ("{s:s}", "error", "the bench died");
    }
    json_t *answer = json_object ();
    json_object_set (answer, "id", running->id);
    json_object_update (answer, outcome);
    json_decref (outcome);
    s_answer (&answer);
    zstr_free (&kind);
    zstr_free (&text);
    s_running_destroy (&running);
    return 0;
}

//  --------------------------------------------------------------------------
//  Ops

static void
s_op_tools (driver_t *self, json_t *id, json_t *request)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_LIST, NULL, S_QUERY_TIMEOUT_MS, error, sizeof (error));
    json_t *body = reply? dsh_reply_json (reply): NULL;
    dsh_reply_destroy (&reply);
    if (!body)
        s_answer_error (id, "LIST failed: %s", error);
    else {
        json_t *names = json_array ();
        size_t index;
        json_t *entry;
        json_array_foreach (json_object_get (body, "tools"), index, entry)
            json_array_append (names, json_object_get (entry, "name"));
        json_t *answer = s_reply_to (id, "tools", s_sorted (names));
        if (json_is_true (json_object_get (request, "wire")))
            json_object_set_new (answer, "wire", json_pack ("{s:O}", "tools", json_object_get (body, "tools")));
        s_answer (&answer);
        json_decref (body);
    }
    //  Replies to calls that came while LIST waited were kept aside
    s_drain_client (self);
}

static void
s_op_call (driver_t *self, json_t *id, json_t *request)
{
    s_send_call (self, id, request, -1);
}

static void
s_op_cancel (driver_t *self, json_t *id, json_t *request)
{
    json_t *after = json_object_get (request, "afterMs");
    if (!json_is_integer (after) || json_integer_value (after) < 0)
        s_answer_error (id, "field \"afterMs\" must be a non-negative integer");
    else
        s_send_call (self, id, request, json_integer_value (after));
}

static void
s_op_watch (driver_t *self, json_t *id, json_t *request)
{
    (void) request;
    if (!self->watcher) {
        self->watcher = dsh_watcher_new (self->endpoint);
        if (!self->watcher) {
            s_answer_error (id, "no watcher for %s", self->endpoint);
            return;
        }
        zloop_reader (self->loop, dsh_watcher_sock (self->watcher), s_on_watcher, self);
        self->watch_deadline = zclock_mono () + S_WATCH_FIRST_MS;
    }
    zlistx_add_end (self->watch_waiters, json_incref (id));
    s_drain_watcher (self);
}

static void
s_op_watched (driver_t *self, json_t *id, json_t *request)
{
    (void) request;
    if (!self->watcher) {
        s_answer_error (id, "no watcher: send \"watch\" first");
        return;
    }
    json_t *tools = dsh_watcher_tools (self->watcher);
    //  Notices that came while the watcher was asked were kept aside
    s_drain_watcher (self);
    if (!tools) {
        s_answer_error (id, "the watcher did not say its tools");
        return;
    }
    json_t *answer = s_reply_to (id, "tools", s_sorted (tools));
    json_object_set_new (answer, "resyncs", json_integer (self->snapshots? (json_int_t) self->snapshots - 1: 0));
    json_object_set_new (answer, "epoch", json_integer (self->epoch));
    s_answer (&answer);
}

static void
s_op_bench (driver_t *self, json_t *id, json_t *request)
{
    const char *name = json_string_value (json_object_get (request, "name"));
    json_t *inflight = json_object_get (request, "inflight");
    json_t *seconds = json_object_get (request, "seconds");
    if (!name || !json_is_integer (inflight) || !json_is_integer (seconds)
    ||  json_integer_value (inflight) < 1 || json_integer_value (inflight) > 10000
    ||  json_integer_value (seconds) < 1 || json_integer_value (seconds) > 600) {
        s_answer_error (id, "bench needs \"name\", \"inflight\" (1-10000) and \"seconds\" (1-600)");
        return;
    }
    s_bench_t *bench = (s_bench_t *) zmalloc (sizeof (s_bench_t));
    assert (bench);
    bench->endpoint = strdup (self->endpoint);
    bench->name = strdup (name);
    bench->inflight = (int) json_integer_value (inflight);
    bench->seconds = (int) json_integer_value (seconds);
    msgpack_sbuffer_init (&bench->args);
    msgpack_packer packer;
    msgpack_packer_init (&packer, &bench->args, msgpack_sbuffer_write);
    json_t *arguments = json_object_get (request, "arguments");
    json_t *empty = json_object ();
    int rc = dsh_json_to_msgpack (&packer, arguments? arguments: empty);
    json_decref (empty);
    if (rc) {
        s_bench_destroy (&bench);
        s_answer_error (id, "\"arguments\" cannot be sent");
        return;
    }
    s_running_t *running = (s_running_t *) zmalloc (sizeof (s_running_t));
    assert (running);
    running->actor = zactor_new (s_bench_actor, bench);
    assert (running->actor);
    running->id = json_incref (id);
    zlistx_add_end (self->benches, running);
    zloop_reader (self->loop, zactor_sock (running->actor), s_on_bench, self);
}

typedef void (s_op_fn) (driver_t *self, json_t *id, json_t *request);

static const struct {
    const char *name;
    s_op_fn *handler;
} s_ops [] = {
    { "tools", s_op_tools },
    { "call", s_op_call },
    { "cancel", s_op_cancel },
    { "watch", s_op_watch },
    { "watched", s_op_watched },
    { "bench", s_op_bench }
};

static void
s_handle_line (driver_t *self, const char *line, size_t size)
{
    json_error_t error;
    json_t *request = json_loadb (line, size, 0, &error);
    json_t *id = json_object_get (request, "id");
    const char *op = json_string_value (json_object_get (request, "op"));
    if (!json_is_object (request))
        s_answer_error (NULL, "a request is a JSON object on one line: %s", request? "not an object": error.text);
    else
    if (!op)
        s_answer_error (id, "field \"op\" is required");
    else {
        size_t index = 0;
        while (index < sizeof s_ops / sizeof s_ops [0] && !streq (s_ops [index].name, op))
            index++;
        if (index < sizeof s_ops / sizeof s_ops [0])
            s_ops [index].handler (self, id, request);
        else
            s_answer_error (id, "unknown op \"%s\"", op);
    }
    json_decref (request);
}

//  --------------------------------------------------------------------------
//  The loop

//  Reads what stdin has and handles each whole line.
static int
s_on_stdin (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    driver_t *self = (driver_t *) arg;
    char chunk [65536];
    ssize_t got = read (item->fd, chunk, sizeof chunk);
    if (got <= 0) {
        //  A last line with no newline is still a request
        if (self->input_size)
            s_handle_line (self, self->input, self->input_size);
        self->input_size = 0;
        self->input_closed = true;
        zloop_poller_end (loop, item);
        return 0;
    }
    self->input = (char *) realloc (self->input, self->input_size + (size_t) got);
    assert (self->input);
    memcpy (self->input + self->input_size, chunk, (size_t) got);
    self->input_size += (size_t) got;
    size_t start = 0;
    for (size_t end = start; end < self->input_size; end++)
        if (self->input [end] == '\n') {
            if (end > start)
                s_handle_line (self, self->input + start, end - start);
            start = end + 1;
        }
    memmove (self->input, self->input + start, self->input_size - start);
    self->input_size -= start;
    if (self->input_size > S_MAX_LINE_BYTES) {
        s_answer_error (NULL, "a request line is over %d bytes", S_MAX_LINE_BYTES);
        self->input_size = 0;
    }
    return 0;
}

//  Cancels, deadlines, the client's broker watch and the watcher's first
//  snapshot; once stdin is closed and nothing is left to answer, the end.
static int
s_on_tick (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    driver_t *self = (driver_t *) arg;
    s_drain_client (self);
    int64_t now = zclock_mono ();
    s_check_calls (self, now);
    if (zlistx_size (self->watch_waiters) && now >= self->watch_deadline)
        s_answer_watchers (self, false);
    bool idle = zhashx_size (self->pending) == 0 && zlistx_size (self->watch_waiters) == 0
             && zlistx_size (self->benches) == 0;
    return self->input_closed && idle? -1: 0;
}

int
main (int argc, char *argv [])
{
    if (argc != 2 || streq (argv [1], "--help") || streq (argv [1], "-h")) {
        fprintf (argc == 2? stdout: stderr,
                 "usage: dsh-conformance-c ENDPOINT[,ENDPOINT...]\n"
                 "Answer conformance requests (JSON lines on stdin) through the C SDK; see "
                 "tests/conformance/SCENARIOS.md.\n");
        return argc == 2? 0: 2;
    }
    //  stdout is the answers' channel: the SDK's log lines go to stderr
    zsys_set_logstream (stderr);
    zsys_init ();
    zsys_set_logstream (stderr);
    driver_t self = { .endpoint = argv [1] };
    self.client = dsh_client_new (self.endpoint);
    if (!self.client)
        return 2;
    self.pending = zhashx_new ();
    zhashx_set_destructor (self.pending, s_pending_free);
    self.watch_waiters = zlistx_new ();
    self.benches = zlistx_new ();
    self.loop = zloop_new ();
    zloop_reader (self.loop, dsh_client_sock (self.client), s_on_client, &self);
    zmq_pollitem_t input = { NULL, STDIN_FILENO, ZMQ_POLLIN, 0 };
    zloop_poller (self.loop, &input, s_on_stdin, &self);
    //  A closed pipe polls as an error as well as readable: it is read, to
    //  its end, rather than dropped by the loop unread
    zloop_poller_set_tolerant (self.loop, &input);
    zloop_timer (self.loop, S_TICK_MS, 0, s_on_tick, &self);
    zloop_start (self.loop);

    zloop_destroy (&self.loop);
    s_running_t *running;
    while ((running = (s_running_t *) zlistx_detach (self.benches, NULL)))
        s_running_destroy (&running);
    zlistx_destroy (&self.benches);
    json_t *id;
    while ((id = (json_t *) zlistx_detach (self.watch_waiters, NULL)))
        json_decref (id);
    zlistx_destroy (&self.watch_waiters);
    dsh_watcher_destroy (&self.watcher);
    zhashx_destroy (&self.pending);
    dsh_client_destroy (&self.client);
    free (self.input);
    return 0;
}
