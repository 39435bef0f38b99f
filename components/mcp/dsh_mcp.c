/*  =========================================================================
    dsh-mcp - a dsh broker's tools, offered as one MCP server on stdio
    and, with --http, over Streamable HTTP

        dsh-mcp [--broker E[,E...]] [--agent ID] [--timeout-ms N]
                [--http HOST:PORT [--http-token-file FILE] [--http-per-address N]
                [--http-header-ms N]] [-v]

    An MCP client (a coding agent, the MCP inspector) starts this program,
    or reaches it over HTTP, and sees every tool registered with the
    broker, and the resources and prompts of bridged MCP servers (their
    gateway tools, dsh_mcp_extras). One core serves every client: stdin
    and stdout are one session, each HTTP session (dsh_mcp_httpd) another,
    each with its own revision, log level and calls. tools/list is the
    registry as the watcher keeps it, in pages of 100, less the tools the
    broker holds quarantined (for --agent, only what the chain could
    allow); tools/call is a dsh CALL through the
    broker's chain, made as agent ID. Calls are asynchronous: many are in
    flight at once, their results answered whole as they come (an MCP
    server's own JSON-RPC error behind a bridge, as that error). Registry
    changes become list_changed notifications; notifications/cancelled
    cancels the dsh call; dsh progress becomes notifications/progress, and
    a call that waits long sends progress of its own. A request's
    params._meta traceparent, tracestate and baggage go on in the CALL's
    meta; with OTEL_EXPORTER_OTLP_ENDPOINT set, each request sent through
    the broker is an MCP server span (dsh_mcp_trace), the parent of the
    broker's. stdout carries only MCP messages, one JSON line each; logs
    go to stderr.
    =========================================================================
*/

#include "dsh_curve.h"
#include "dsh_log.h"
#include "dsh_beacon.h"
#include "dsh_client.h"
#include "dsh_json.h"
#include "dsh_jsonrpc.h"
#include "dsh_mcp_extras.h"
#include "dsh_mcp_gateway.h"
#include "dsh_http.h"
#include "dsh_mcp_httpd.h"
#include "dsh_mcp_logs.h"
#include "dsh_mcp_options.h"
#include "dsh_mcp_trace.h"
#include "dsh_proto.h"
#include "dsh_render.h"
#include "dsh_sock.h"
#include "dsh_watcher.h"

#include <fcntl.h>
#include <unistd.h>

#define SERVER_VERSION      "0.1.0"
#define LATEST_VERSION      "2025-11-25"
#define PAGE_SIZE           100
#define MAX_LINE_BYTES      (64 * 1024 * 1024)
//  Answers held for a stdio client that does not read them.
#define MAX_STDOUT_BACKLOG  (2 * MAX_LINE_BYTES)
#define LIST_TIMEOUT_MS     5000
//  How long we wait past a call's deadline for the broker's answer.
#define DEADLINE_MARGIN_MS  2000
//  How often the loop looks at its calls' own deadlines
#define POLL_TICK_MS        100
//  How often a call that waits tells a client that asked for progress.
#define KEEPALIVE_MS        10000
//  How long a tools/list made before the broker was first reached waits
//  for it, before it is answered with what is known (nothing).
#define FIRST_SYNC_WAIT_MS  1000

//  The revisions this server speaks, newest first.
static const char *s_versions [] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL };
//  Keys of a dsh tool entry that are dsh's own, not MCP's: not shown to
//  MCP clients ("parameters" is shown as "inputSchema").
static const char *s_dsh_keys [] = { "name", "parameters", "concurrencySafe", "strict", NULL };

typedef struct _self_t self_t;

//  One MCP client: stdin/stdout, or an HTTP session.
typedef struct {
    char *id;                   //  the HTTP session id; NULL for stdio
    char version [16];          //  the revision agreed at initialize
    bool initialized;           //  the client sent notifications/initialized
    dsh_mcp_logs_t *logs;       //  the bridged servers' log messages it follows
} s_session_t;

//  A JSON-RPC batch waiting for the answers of its requests: sent as one
//  array once the last comes (JSON-RPC 2.0, MCP 2025-03-26).
typedef struct {
    self_t *owner;
    s_session_t *session;
    json_t *responses;
    size_t waiting;             //  messages of the batch not yet done with
} s_batch_t;

//  Where a request came from, so its answer goes back there.
typedef struct {
    s_session_t *session;
    s_batch_t *batch;           //  NULL unless it came in a batch
} s_origin_t;

//  A tools/list or tools/call that came before the registry was known.
typedef struct {
    s_origin_t origin;
    char *method;
    json_t *request_id;
    json_t *params;
    int64_t answer_at;
} s_early_t;

//  A tools/call waiting for its dsh result.
typedef struct {
    s_origin_t origin;
    json_t *request_id;
    json_t *progress_token;     //  NULL if the client asked for no progress
    char *tool;
    int64_t give_up_at;
    int64_t sent_at;
    int64_t keepalive_at;       //  next progress we send while nothing comes
    bool tool_progress;         //  the tool reports progress itself
    bool extras;                //  a gateway call: answered by dsh_mcp_extras_response
    bool log_poll;              //  a log poll (no request), for dsh_mcp_logs_answer
    dsh_span_t *span;           //  the MCP server span, while tracing
} s_pending_t;

struct _self_t {
    const char *agent;
    int timeout_ms;
    int keepalive_ms;
    int log_wait_ms;            //  how long a log poll waits at a bridge
    bool verbose;
    dsh_client_t *client;
    dsh_watcher_t *watcher;
    dsh_jsonrpc_t *rpc;         //  stdin in, stdout out
    dsh_mcp_httpd_t *httpd;     //  Streamable HTTP clients, with --http
    s_session_t *stdio;         //  NULL once stdin closed
    zhashx_t *sessions;         //  HTTP session id -> s_session_t
    zhashx_t *pending;          //  callId -> s_pending_t
    json_t *entries;            //  the registry's tools: name -> entry, registration order
    zlistx_t *early;            //  s_early_t, requests waiting for the first sync
    bool early_over;            //  replaying those whose wait is over
    uint64_t call_count;
    bool synced;                //  the watcher delivered its first snapshot
    bool stdout_gone;
};

static void
s_session_destroy (s_session_t **self_p)
{
    if (*self_p) {
        zstr_free (&(*self_p)->id);
        dsh_mcp_logs_destroy (&(*self_p)->logs);
        free (*self_p);
        *self_p = NULL;
    }
}

//  For a hash table of sessions.
static void
s_session_free (void **item_p)
{
    s_session_destroy ((s_session_t **) item_p);
}

//  log_wait_ms: how long a log poll may wait at a bridge.
static s_session_t *
s_session_new (const char *id, int log_wait_ms)
{
    s_session_t *self = (s_session_t *) zmalloc (sizeof (s_session_t));
    assert (self);
    self->id = id? strdup (id): NULL;
    strcpy (self->version, LATEST_VERSION);
    self->logs = dsh_mcp_logs_new (log_wait_ms);
    return self;
}

//  Sends message (borrowed) to session; related_id is the request a
//  notification belongs to (HTTP carries it on that request's stream).
static void
s_deliver (self_t *self, s_session_t *session, const json_t *message, const json_t *related_id)
{
    if (session->id)
        dsh_mcp_httpd_send (self->httpd, session->id, message, related_id);
    else
    if (!self->stdout_gone)
        //  Written at the end of the loop's turn, with the turn's others
        dsh_jsonrpc_queue (self->rpc, message);
}

//  Writes what stdout takes now. A client that stops reading is not let
//  to hold more than MAX_STDOUT_BACKLOG in us: it is dropped.
static void
s_flush_stdout (self_t *self)
{
    if (self->stdout_gone || !dsh_jsonrpc_backlog (self->rpc))
        return;
    if (dsh_jsonrpc_flush (self->rpc)) {
        zsys_error ("dsh-mcp: stdout is closed");
        self->stdout_gone = true;
    }
    else
    if (dsh_jsonrpc_backlog (self->rpc) > MAX_STDOUT_BACKLOG) {
        zsys_error ("dsh-mcp: the stdio client reads nothing (%zu bytes wait): dropping it",
                    dsh_jsonrpc_backlog (self->rpc));
        self->stdout_gone = true;
    }
}

//  One message of a batch is done with; the last one sends the answers
//  (none if the batch held only notifications, or its calls were
//  cancelled).
static void
s_batch_release (s_batch_t **batch_p)
{
    s_batch_t *batch = *batch_p;
    if (batch && --batch->waiting == 0) {
        if (json_array_size (batch->responses) > 0)
            s_deliver (batch->owner, batch->session, batch->responses, NULL);
        json_decref (batch->responses);
        free (batch);
    }
    *batch_p = NULL;
}

//  Answers a request: response (taken) goes to its session, or into its
//  batch.
static void
s_answer (self_t *self, s_origin_t *origin, json_t *response)
{
    if (origin->batch) {
        json_array_append (origin->batch->responses, response);
        s_batch_release (&origin->batch);
    }
    else
        s_deliver (self, origin->session, response, NULL);
    json_decref (response);
}

static void
s_answer_error (self_t *self, s_origin_t *origin, const json_t *id, int code, const char *message)
{
    s_answer (self, origin, dsh_jsonrpc_error (id, code, message));
}

//  ---------------------------------------------------------------------
//  Tracing: a request that goes through the broker (tools/call, and what
//  dsh_mcp_extras forwards) is an MCP server span, the parent of the
//  broker's call span; the CALL's meta carries its context

//  Starts the span of request id from origin's session; trace holds the
//  context the client sent in _meta, and becomes what the CALL carries.
static dsh_span_t *
s_span_start (s_origin_t *origin, const char *method, const char *target, const json_t *id,
              dsh_mcp_trace_t *trace)
{
    dsh_span_t *span = dsh_mcp_span_start (method, target, DSH_SPAN_SERVER, trace);
    if (!span)
        return NULL;
    if (json_is_string (id))
        dsh_span_set_str (span, "jsonrpc.request.id", json_string_value (id));
    else
    if (json_is_integer (id)) {
        char text [32];
        snprintf (text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value (id));
        dsh_span_set_str (span, "jsonrpc.request.id", text);
    }
    s_session_t *session = origin->session;
    dsh_span_set_str (span, "mcp.protocol.version", session->version);
    if (session->id) {
        dsh_span_set_str (span, "mcp.session.id", session->id);
        dsh_span_set_str (span, "network.transport", "tcp");
        dsh_span_set_str (span, "network.protocol.name", "http");
    }
    else
        dsh_span_set_str (span, "network.transport", "pipe");
    return span;
}

//  Answers a request whose span (may be NULL) ends with the answer;
//  dsh_code is the dsh error code the answer came from, if any.
static void
s_span_answer (self_t *self, s_origin_t *origin, dsh_span_t **span_p, json_t *response, const char *dsh_code)
{
    dsh_mcp_span_end (span_p, response, dsh_code);
    s_answer (self, origin, response);
}

//  Sends a CALL with trace (may be NULL) as its meta; returns the callId
//  (see dsh_client_call_send) or NULL. call_id is made here, into
//  call_id_buf (32 bytes).
static const char *
s_call_send (self_t *self, char *call_id_buf, const char *tool, const msgpack_sbuffer *args,
             const dsh_mcp_trace_t *trace)
{
    snprintf (call_id_buf, 32, "mcp-%" PRIu64, ++self->call_count);
    msgpack_sbuffer meta;
    msgpack_sbuffer_init (&meta);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &meta, msgpack_sbuffer_write);
    //  No context, no meta: the CALL is byte for byte what it was before tracing
    bool traced = trace && dsh_mcp_trace_pack (trace, &pk) == 0;
    const char *sent = dsh_client_call_send (self->client, call_id_buf, tool, args->data, args->size, self->agent,
                                             traced? meta.data: NULL, traced? meta.size: 0, self->timeout_ms);
    msgpack_sbuffer_destroy (&meta);
    return sent;
}

//  Sends notification (taken) to every session that finished initialize.
static void
s_broadcast (self_t *self, json_t *notification)
{
    if (self->stdio && self->stdio->initialized)
        s_deliver (self, self->stdio, notification, NULL);
    for (s_session_t *session = zhashx_first (self->sessions); session; session = zhashx_next (self->sessions))
        if (session->initialized)
            s_deliver (self, session, notification, NULL);
    json_decref (notification);
}

static void
s_pending_destroy (void **item_p)
{
    s_pending_t *pending = (s_pending_t *) *item_p;
    if (pending) {
        s_batch_release (&pending->origin.batch);
        //  Still open: the client cancelled it, or went away
        dsh_mcp_span_fail (&pending->span, DSH_E_CANCELLED, "the MCP client cancelled the call or went away");
        json_decref (pending->request_id);
        json_decref (pending->progress_token);
        zstr_free (&pending->tool);
        free (pending);
        *item_p = NULL;
    }
}

//  The client is gone: its calls need not run on.
static void
s_session_end (self_t *self, s_session_t *session)
{
    zlistx_t *ended = zlistx_new ();
    for (s_pending_t *pending = zhashx_first (self->pending); pending; pending = zhashx_next (self->pending))
        if (pending->origin.session == session)
            zlistx_add_end (ended, (void *) zhashx_cursor (self->pending));
    for (const char *call_id = zlistx_first (ended); call_id; call_id = zlistx_next (ended)) {
        dsh_client_cancel (self->client, call_id);
        zhashx_delete (self->pending, call_id);
    }
    zlistx_destroy (&ended);
    s_early_t *early = zlistx_first (self->early);
    while (early) {
        if (early->origin.session == session) {
            zlistx_delete (self->early, zlistx_cursor (self->early));
            early = zlistx_first (self->early);
        }
        else
            early = zlistx_next (self->early);
    }
}

//  ---------------------------------------------------------------------
//  Lifecycle

static json_t *
s_capabilities (void)
{
    json_t *capabilities = json_pack ("{s:{s:b}}", "tools", "listChanged", 1);
    json_t *extras = dsh_mcp_extras_capabilities ();
    json_object_update (capabilities, extras);
    json_decref (extras);
    return capabilities;
}

static json_t *
s_server_info (void)
{
    return json_pack ("{s:s, s:s, s:s}", "name", "dsh-mcp", "title", "dsh tool broker",
                      "version", SERVER_VERSION);
}

static void
s_initialize (self_t *self, s_origin_t *origin, const json_t *id, const json_t *params)
{
    const char *asked = json_string_value (json_object_get (params, "protocolVersion"));
    const char *version = LATEST_VERSION;
    for (size_t index = 0; asked && s_versions [index]; index++)
        if (streq (asked, s_versions [index]))
            version = s_versions [index];
    snprintf (origin->session->version, sizeof origin->session->version, "%s", version);
    json_t *result = json_pack ("{s:s, s:o, s:o, s:s}", "protocolVersion", version,
                                "capabilities", s_capabilities (), "serverInfo", s_server_info (),
                                "instructions", "Tools served by a dsh broker; the set may change "
                                "while you work (watch notifications/tools/list_changed).");
    s_answer (self, origin, dsh_jsonrpc_result (id, result));
}

//  2026-07-28 replaced the handshake by discovery; a client that gets
//  no revision of its own here falls back to initialize.
static void
s_discover (self_t *self, s_origin_t *origin, const json_t *id)
{
    json_t *versions = json_array ();
    for (size_t index = 0; s_versions [index]; index++)
        json_array_append_new (versions, json_string (s_versions [index]));
    json_t *result = json_pack ("{s:o, s:o, s:o}", "supportedVersions", versions,
                                "capabilities", s_capabilities (), "serverInfo", s_server_info ());
    s_answer (self, origin, dsh_jsonrpc_result (id, result));
}

//  ---------------------------------------------------------------------
//  tools/list

//  An MCP Tool for a dsh tool entry: every field but dsh's own, whatever
//  MCP revision added it (icons, execution, _meta...), kept as it is.
static json_t *
s_mcp_tool (const json_t *entry)
{
    json_t *tool = json_pack ("{s:O, s:O}", "name", json_object_get (entry, "name"),
                              "inputSchema", json_object_get (entry, "parameters"));
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) entry, key, value) {
        bool own = false;
        for (size_t index = 0; s_dsh_keys [index] && !own; index++)
            own = streq (key, s_dsh_keys [index]);
        if (!own)
            json_object_set (tool, key, value);
    }
    return tool;
}

//  The entries the agent could be let to call: never a quarantined one
//  (the broker refuses its calls QUARANTINED until an admin accepts its
//  definition); of the rest, what every stage of the broker's chain says
//  (permission rules, plan mode, the sandbox: a call that would be asked
//  about counts as allowed), or all of them if the chain cannot be asked.
//  Listing only: the chain still decides every call. Caller owns it.
static json_t *
s_for_agent (self_t *self, json_t *entries)
{
    if (self->agent && json_array_size (entries) > 0) {
        char reason [256];
        json_t *kept = dsh_client_allowed (self->client, self->agent, entries, LIST_TIMEOUT_MS,
                                           reason, sizeof reason);
        if (kept)
            return kept;
        if (self->verbose)
            zsys_info ("dsh-mcp: listing every tool: %s", reason);
    }
    json_t *shown = json_array ();
    size_t index;
    json_t *entry;
    json_array_foreach (entries, index, entry)
        if (!dsh_render_quarantined (entry))
            json_array_append (shown, entry);
    return shown;
}

static void
s_early_destroy (void **item_p)
{
    s_early_t *early = (s_early_t *) *item_p;
    if (early) {
        s_batch_release (&early->origin.batch);
        zstr_free (&early->method);
        json_decref (early->request_id);
        json_decref (early->params);
        free (early);
        *item_p = NULL;
    }
}

static void s_on_request (self_t *self, s_origin_t *origin, const char *method, const json_t *id,
                          const json_t *params);

//  Before the broker was first reached, tools/list and tools/call wait
//  for it a little (FIRST_SYNC_WAIT_MS), then are answered with what is
//  known: no tools, and an error result. A list_changed follows when the
//  broker is reached. True if the request was kept for later.
static bool
s_held_early (self_t *self, s_origin_t *origin, const char *method, const json_t *id, const json_t *params)
{
    if (self->synced || self->early_over)
        return false;
    s_early_t *early = (s_early_t *) zmalloc (sizeof (s_early_t));
    assert (early);
    early->origin = *origin;
    origin->batch = NULL;
    early->method = strdup (method);
    early->request_id = json_deep_copy (id);
    early->params = params? json_deep_copy (params): NULL;
    early->answer_at = zclock_mono () + FIRST_SYNC_WAIT_MS;
    zlistx_add_end (self->early, early);
    return true;
}

//  Runs the requests that waited for the first sync: all of them once it
//  came, else those whose wait is over.
static void
s_answer_early (self_t *self)
{
    int64_t now = zclock_mono ();
    s_early_t *early = zlistx_first (self->early);
    while (early) {
        if (self->synced || now >= early->answer_at) {
            self->early_over = true;
            s_on_request (self, &early->origin, early->method, early->request_id, early->params);
            self->early_over = false;
            zlistx_delete (self->early, zlistx_cursor (self->early));
            early = zlistx_first (self->early);
        }
        else
            early = zlistx_next (self->early);
    }
}

//  Answered from the registry as the watcher keeps it.
static void
s_tools_list (self_t *self, s_origin_t *origin, const json_t *id, const json_t *params)
{
    if (s_held_early (self, origin, "tools/list", id, params))
        return;
    size_t start;
    if (dsh_jsonrpc_cursor (params, &start)) {
        s_answer_error (self, origin, id, DSH_JSONRPC_INVALID_PARAMS, "Invalid cursor");
        return;
    }
    //  A gateway (resources and prompts of a bridged server) is no tool
    json_t *known = json_array ();
    const char *name;
    json_t *entry;
    json_object_foreach (self->entries, name, entry)
        if (!dsh_mcp_gateway_named (name))
            json_array_append (known, entry);
    json_t *entries = s_for_agent (self, known);
    json_decref (known);
    if (start > json_array_size (entries))
        s_answer_error (self, origin, id, DSH_JSONRPC_INVALID_PARAMS, "Invalid cursor");
    else {
        json_t *tools = json_array ();
        size_t stop = start + PAGE_SIZE;
        for (size_t index = start; index < stop && index < json_array_size (entries); index++)
            json_array_append_new (tools, s_mcp_tool (json_array_get (entries, index)));
        json_t *result = json_pack ("{s:o}", "tools", tools);
        if (stop < json_array_size (entries)) {
            char next [32];
            snprintf (next, sizeof next, "%zu", stop);
            json_object_set_new (result, "nextCursor", json_string (next));
        }
        s_answer (self, origin, dsh_jsonrpc_result (id, result));
    }
    json_decref (entries);
}

//  ---------------------------------------------------------------------
//  Resources, prompts, completion and logging of bridged servers, planned
//  by dsh_mcp_extras from the registry's entries; a forwarded request is a
//  call to a gateway tool, through the chain like any call

//  Sends one gateway call; with an origin, its answer goes to that
//  request (id); a log poll's to dsh_mcp_logs_answer for session. trace
//  and span_p (NULL: none) are the request's context and span, which the
//  pending call takes.
static void
s_extras_call (self_t *self, s_origin_t *origin, s_session_t *session, const json_t *id,
               const json_t *call, bool log_poll, const dsh_mcp_trace_t *trace, dsh_span_t **span_p)
{
    const char *tool = json_string_value (json_object_get (call, "tool"));
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    const char *sent = NULL;
    char call_id [32];
    if (tool && dsh_json_to_msgpack (&pk, json_object_get (call, "arguments")) == 0)
        sent = s_call_send (self, call_id, tool, &sbuf, trace);
    msgpack_sbuffer_destroy (&sbuf);
    if (!origin && !(log_poll && sent))
        return;                 //  nobody waits for it: its result is dropped as unknown
    if (!sent) {
        s_span_answer (self, origin, span_p, dsh_jsonrpc_error (id, DSH_JSONRPC_INTERNAL_ERROR,
                                                                "cannot send the call to the dsh broker"), NULL);
        return;
    }
    s_pending_t *pending = (s_pending_t *) zmalloc (sizeof (s_pending_t));
    assert (pending);
    if (span_p) {
        pending->span = *span_p;
        *span_p = NULL;
    }
    if (origin) {
        pending->origin = *origin;
        origin->batch = NULL;
    }
    else
        pending->origin.session = session;
    pending->request_id = id? json_deep_copy (id): NULL;
    pending->tool = strdup (tool);
    pending->extras = !log_poll;
    pending->log_poll = log_poll;
    int timeout_ms = self->timeout_ms? self->timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS;
    pending->sent_at = zclock_mono ();
    pending->give_up_at = pending->sent_at + timeout_ms + DEADLINE_MARGIN_MS;
    pending->keepalive_at = INT64_MAX;
    zhashx_insert (self->pending, call_id, pending);
}

//  Sends a plan's answer ({result} or {error}) to the request, ending its
//  span (span_p NULL: none).
static void
s_extras_answer (self_t *self, s_origin_t *origin, const json_t *id, const json_t *answer, dsh_span_t **span_p)
{
    json_t *message = json_pack ("{s:s, s:O}", "jsonrpc", "2.0", "id", id? id: json_null ());
    const char *key = json_object_get (answer, "error")? "error": "result";
    json_object_set (message, key, json_object_get (answer, key));
    if (span_p)
        dsh_mcp_span_end (span_p, message, NULL);
    s_answer (self, origin, message);
}

//  The registry's entries (caller owns them). For a listing, only those
//  the chain could let this agent call: asking it takes round trips, so
//  a forwarded request, which the chain judges as a call anyway, is
//  routed on them all.
static json_t *
s_extras_entries (self_t *self, bool listing)
{
    json_t *known = json_array ();
    const char *name;
    json_t *entry;
    json_object_foreach (self->entries, name, entry)
        json_array_append (known, entry);
    if (!listing)
        return known;
    json_t *entries = s_for_agent (self, known);
    json_decref (known);
    return entries;
}

//  Sends the log polls the session's gateways need.
static void
s_extras_polls (self_t *self, s_session_t *session, const json_t *entries)
{
    json_t *polls = dsh_mcp_logs_polls (session->logs, entries);
    size_t index;
    const json_t *poll;
    json_array_foreach (polls, index, poll)
        s_extras_call (self, NULL, session, NULL, poll, true, NULL, NULL);
    json_decref (polls);
}

//  A log poll came back (body NULL: it never will): its messages go to
//  the client, and the next poll out.
static void
s_extras_logs (self_t *self, s_session_t *session, const char *tool, const json_t *body)
{
    json_t *answer = dsh_mcp_logs_answer (session->logs, tool, body);
    size_t index;
    json_t *params;
    json_array_foreach (json_object_get (answer, "notifications"), index, params) {
        json_t *notification = dsh_jsonrpc_notification ("notifications/message", json_incref (params));
        s_deliver (self, session, notification, NULL);
        json_decref (notification);
    }
    const json_t *poll = json_object_get (answer, "poll");
    if (poll)
        s_extras_call (self, NULL, session, NULL, poll, true, NULL, NULL);
    json_decref (answer);
}

static void
s_extras (self_t *self, s_origin_t *origin, const json_t *id, const char *method, const json_t *params)
{
    if (s_held_early (self, origin, method, id, params))
        return;
    s_session_t *session = origin->session;
    const char *slash = strrchr (method, '/');
    json_t *entries = s_extras_entries (self, slash && streq (slash, "/list"));
    json_t *plan = dsh_mcp_extras_plan (entries, method, params);
    const json_t *call = json_object_get (plan, "call");
    bool level_set = streq (method, "logging/setLevel") && json_object_get (plan, "result")
                  && dsh_mcp_logs_set_level (session->logs,
                                             json_string_value (json_object_get (params, "level"))) == 0;
    if (call) {
        //  Forwarded to a bridged server: traced as a call is. The target
        //  is a prompt's name; a resource's URI is not, as the conventions
        //  say (high cardinality)
        dsh_mcp_trace_t trace;
        dsh_mcp_trace_from_json (&trace, json_object_get (params, "_meta"));
        const char *prompt = streq (method, "prompts/get")? json_string_value (json_object_get (params, "name")): NULL;
        dsh_span_t *span = s_span_start (origin, method, prompt, id, &trace);
        s_extras_call (self, origin, session, id, call, false, &trace, &span);
        dsh_mcp_trace_clear (&trace);
    }
    else
        s_extras_answer (self, origin, id, plan, NULL);
    size_t index;
    const json_t *also;
    json_array_foreach (json_object_get (plan, "also"), index, also)
        s_extras_call (self, NULL, session, NULL, also, false, NULL, NULL);
    if (level_set)
        s_extras_polls (self, session, entries);
    json_decref (plan);
    json_decref (entries);
}

//  ---------------------------------------------------------------------
//  tools/call

//  Sends a well-formed tools/call through the broker: the pending call
//  takes the span. Returns NULL, or the answer when none was sent.
static json_t *
s_tools_call_send (self_t *self, s_origin_t *origin, const json_t *id, const json_t *params,
                   const dsh_mcp_trace_t *trace, dsh_span_t **span_p)
{
    const char *name = json_string_value (json_object_get (params, "name"));
    const json_t *arguments = json_object_get (params, "arguments");
    if (!self->synced) {
        //  Nothing known of the broker yet: say so now, not at the deadline
        char *text = zsys_sprintf ("Error: the dsh broker at %s has not been reached yet, so no tool "
                                   "can be called; tools/list_changed follows once it is",
                                   dsh_client_endpoint (self->client));
        json_t *result = json_pack ("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text,
                                    "isError", 1);
        zstr_free (&text);
        return dsh_jsonrpc_result (id, result);
    }
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    json_t *empty = json_object ();
    int rc = dsh_json_to_msgpack (&pk, arguments? arguments: empty);
    json_decref (empty);
    if (rc) {
        msgpack_sbuffer_destroy (&sbuf);
        return dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_PARAMS, "arguments nest too deep");
    }
    char call_id [32];
    const char *sent = s_call_send (self, call_id, name, &sbuf, trace);
    msgpack_sbuffer_destroy (&sbuf);
    if (!sent)
        return dsh_jsonrpc_error (id, DSH_JSONRPC_INTERNAL_ERROR, "cannot send the call to the dsh broker");
    s_pending_t *pending = (s_pending_t *) zmalloc (sizeof (s_pending_t));
    assert (pending);
    pending->origin = *origin;
    //  The pending call holds the batch's place now
    origin->batch = NULL;
    pending->request_id = json_deep_copy (id);
    const json_t *token = json_object_get (json_object_get (params, "_meta"), "progressToken");
    if (json_is_string (token) || json_is_integer (token))
        pending->progress_token = json_deep_copy (token);
    pending->tool = strdup (name);
    dsh_span_set_str (*span_p, "dsh.call.id", call_id);
    pending->span = *span_p;
    *span_p = NULL;
    int timeout_ms = self->timeout_ms? self->timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS;
    pending->sent_at = zclock_mono ();
    pending->give_up_at = pending->sent_at + timeout_ms + DEADLINE_MARGIN_MS;
    pending->keepalive_at = pending->sent_at + self->keepalive_ms;
    zhashx_insert (self->pending, call_id, pending);
    if (self->verbose)
        zsys_info ("dsh-mcp: tools/call %s as %s", name, call_id);
    return NULL;
}

//  A tools/call: its _meta's traceparent, tracestate and baggage go on in
//  the CALL's meta (with our span as the parent, while tracing); the rest
//  of _meta stays here (progressToken is ours to answer).
static void
s_tools_call (self_t *self, s_origin_t *origin, const json_t *id, const json_t *params)
{
    const char *name = json_string_value (json_object_get (params, "name"));
    const json_t *arguments = json_object_get (params, "arguments");
    bool well_formed = name && (!arguments || json_is_object (arguments));
    if (well_formed && s_held_early (self, origin, "tools/call", id, params))
        return;
    dsh_mcp_trace_t trace;
    dsh_mcp_trace_from_json (&trace, json_object_get (params, "_meta"));
    dsh_span_t *span = s_span_start (origin, "tools/call", name, id, &trace);
    json_t *answer = well_formed? s_tools_call_send (self, origin, id, params, &trace, &span)
                   : dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_PARAMS, "tools/call needs a name and an arguments object");
    if (answer)
        s_span_answer (self, origin, &span, answer, NULL);
    dsh_mcp_trace_clear (&trace);
}

//  The client gave up on a request: cancel its dsh call and answer nothing.
static void
s_cancelled (self_t *self, s_session_t *session, const json_t *params)
{
    const json_t *request_id = json_object_get (params, "requestId");
    for (s_pending_t *pending = zhashx_first (self->pending); pending;
         pending = zhashx_next (self->pending))
        if (pending->origin.session == session && json_equal (pending->request_id, (json_t *) request_id)) {
            char *call_id = strdup ((const char *) zhashx_cursor (self->pending));
            dsh_client_cancel (self->client, call_id);
            zhashx_delete (self->pending, call_id);
            if (self->verbose)
                zsys_info ("dsh-mcp: %s cancelled by the client", call_id);
            zstr_free (&call_id);
            return;
        }
}

//  A content block an older revision cannot show becomes text: audio
//  (2025-03-26) and resource_link (2025-06-18).
static void
s_downgrade (json_t *content, const char *version)
{
    size_t index;
    json_t *block;
    json_array_foreach (content, index, block) {
        const char *type = json_string_value (json_object_get (block, "type"));
        char *text = NULL;
        if (type && streq (type, "audio") && strcmp (version, "2025-03-26") < 0)
            text = zsys_sprintf ("[audio, %s, %zu bytes of base64]",
                                 json_string_value (json_object_get (block, "mimeType")),
                                 json_string_length (json_object_get (block, "data")));
        else
        if (type && streq (type, "resource_link") && strcmp (version, "2025-06-18") < 0)
            text = zsys_sprintf ("[resource %s: %s]", json_string_value (json_object_get (block, "name")),
                                 json_string_value (json_object_get (block, "uri")));
        if (text) {
            json_array_set_new (content, index, json_pack ("{s:s, s:s}", "type", "text", "text", text));
            zstr_free (&text);
        }
    }
}

//  The MCP answer for a dsh RESULT body: the result itself, every field
//  kept but dsh's callId and error; an error the MCP server behind a
//  bridge sent, as that same JSON-RPC error; "no such tool" as MCP says it.
//  body (borrowed) is changed into the result: the caller uses it no more.
static json_t *
s_mcp_answer (const json_t *request_id, const char *tool, const char *code, json_t *body,
              const char *version)
{
    const json_t *error = json_object_get (body, "error");
    const json_t *mcp_error = json_object_get (error, "mcp");
    if (json_is_integer (json_object_get (mcp_error, "code"))
    &&  json_is_string (json_object_get (mcp_error, "message"))) {
        json_t *answer = dsh_jsonrpc_error (request_id, 0, "");
        json_object_set (answer, "error", (json_t *) mcp_error);
        return answer;
    }
    if (code && streq (code, DSH_E_UNKNOWN_TOOL)) {
        char *message = zsys_sprintf ("Unknown tool: %s", tool);
        json_t *answer = dsh_jsonrpc_error (request_id, DSH_JSONRPC_INVALID_PARAMS, message);
        zstr_free (&message);
        return answer;
    }
    //  The body is ours and used no more: it becomes the result as it is,
    //  less what is dsh's (the trace context the broker sends back)
    json_object_del (body, "callId");
    json_object_del (body, "error");
    json_object_del (body, "traceparent");
    json_object_del (body, "tracestate");
    if (strcmp (version, "2025-06-18") < 0)
        s_downgrade (json_object_get (body, "content"), version);
    return dsh_jsonrpc_result (request_id, json_incref (body));
}

static void
s_on_result (self_t *self, dsh_reply_t *reply)
{
    const char *call_id = dsh_reply_call_id (reply);
    s_pending_t *pending = call_id? zhashx_lookup (self->pending, call_id): NULL;
    if (!pending)
        return;                 //  cancelled, or past our deadline
    json_t *body = dsh_reply_json (reply);
    if (pending->log_poll)
        s_extras_logs (self, pending->origin.session, pending->tool, body);
    else
    if (pending->extras) {
        json_t *answer = dsh_mcp_extras_response (body);
        s_extras_answer (self, &pending->origin, pending->request_id, answer, &pending->span);
        json_decref (answer);
    }
    else {
        const char *code = dsh_reply_error_code (reply);
        json_t *answer = json_is_array (json_object_get (body, "content"))
                       ? s_mcp_answer (pending->request_id, pending->tool, code, body, pending->origin.session->version)
                       : dsh_jsonrpc_error (pending->request_id, DSH_JSONRPC_INTERNAL_ERROR,
                                            "the tool's result has no JSON form");
        s_span_answer (self, &pending->origin, &pending->span, answer, code);
    }
    json_decref (body);
    zhashx_delete (self->pending, call_id);
}

static void
s_progress (self_t *self, s_pending_t *pending, json_t *params)
{
    json_t *notification = dsh_jsonrpc_notification ("notifications/progress", params);
    s_deliver (self, pending->origin.session, notification, pending->request_id);
    json_decref (notification);
}

static void
s_on_progress (self_t *self, dsh_reply_t *reply)
{
    json_t *body = dsh_reply_json (reply);
    const char *call_id = json_string_value (json_object_get (body, "callId"));
    s_pending_t *pending = call_id? zhashx_lookup (self->pending, call_id): NULL;
    const json_t *progress = json_object_get (body, "progress");
    if (pending && pending->progress_token && json_is_number (progress)) {
        pending->tool_progress = true;
        json_t *params = json_pack ("{s:O, s:O}", "progressToken", pending->progress_token,
                                    "progress", progress);
        const json_t *total = json_object_get (body, "total");
        if (json_is_number (total))
            json_object_set (params, "total", (json_t *) total);
        const json_t *message = json_object_get (body, "message");
        if (json_is_string (message))
            json_object_set (params, "message", (json_t *) message);
        s_progress (self, pending, params);
    }
    json_decref (body);
}

static void
s_on_replies (self_t *self)
{
    dsh_reply_t *reply;
    while ((reply = dsh_client_recv (self->client, 0))) {
        const char *command = dsh_reply_command (reply);
        if (streq (command, DSH_RESULT))
            s_on_result (self, reply);
        else
        if (streq (command, "PROGRESS"))
            s_on_progress (self, reply);
        else
        if (self->verbose)
            zsys_info ("dsh-mcp: ignoring a %s reply", command);
        dsh_reply_destroy (&reply);
    }
}

//  Calls the broker never answered (it restarted) fail after their
//  deadline and margin. A call that waits long (for a human's approval,
//  most often) tells a client that asked for progress that it is still
//  there, every KEEPALIVE_MS, so a client that resets its timeout on
//  progress keeps waiting.
static void
s_check_pending (self_t *self)
{
    int64_t now = zclock_mono ();
    zlistx_t *expired = zlistx_new ();
    for (s_pending_t *pending = zhashx_first (self->pending); pending;
         pending = zhashx_next (self->pending)) {
        if (now >= pending->give_up_at) {
            //  A log poll has no request to answer; without a body its
            //  gateway is forgotten, and no new poll is sent
            if (pending->log_poll)
                s_extras_logs (self, pending->origin.session, pending->tool, NULL);
            else
                s_span_answer (self, &pending->origin, &pending->span,
                               dsh_jsonrpc_error (pending->request_id, DSH_JSONRPC_INTERNAL_ERROR,
                                                  "no answer from the dsh broker before the call's deadline"),
                               DSH_E_TIMEOUT);
            zlistx_add_end (expired, (void *) zhashx_cursor (self->pending));
        }
        else
        if (now >= pending->keepalive_at && pending->progress_token && !pending->tool_progress) {
            //  The progress is the milliseconds waited: it grows, as MCP asks
            int64_t waited = now - pending->sent_at;
            char *message = zsys_sprintf ("waiting for %s (an approval, or the tool itself) for %.1f s",
                                          pending->tool, waited / 1000.0);
            s_progress (self, pending, json_pack ("{s:O, s:I, s:s}", "progressToken", pending->progress_token,
                                                  "progress", (json_int_t) waited, "message", message));
            zstr_free (&message);
            pending->keepalive_at = now + self->keepalive_ms;
        }
    }
    for (const char *call_id = zlistx_first (expired); call_id; call_id = zlistx_next (expired))
        zhashx_delete (self->pending, call_id);
    zlistx_destroy (&expired);
}

//  ---------------------------------------------------------------------
//  Registry changes

//  What a notice changed.
typedef enum {
    CHANGED_TOOLS = 1,          //  the tools
    CHANGED_GATEWAYS = 2        //  the resources and prompts of bridged servers
} s_changed_t;

//  What name's change changed.
static int
s_change_of (const char *name)
{
    return dsh_mcp_gateway_named (name)? CHANGED_GATEWAYS: CHANGED_TOOLS;
}

//  Applies a watcher notice to the entries; returns what changed.
static int
s_apply_notice (self_t *self, const json_t *notice)
{
    const char *kind = json_string_value (json_object_get (notice, "kind"));
    const char *name = json_string_value (json_object_get (notice, "name"));
    if (!kind)
        return 0;
    if (streq (kind, "snapshot")) {
        json_t *entries = json_object ();
        size_t index;
        const json_t *item;
        json_array_foreach (json_object_get (notice, "tools"), index, item) {
            const json_t *entry = json_object_get (item, "tool");
            const char *tool = json_string_value (json_object_get (entry, "name"));
            if (tool)
                json_object_set (entries, tool, (json_t *) entry);
        }
        //  Whatever differs, either way
        int changed = 0;
        const char *tool;
        json_t *entry;
        json_object_foreach (entries, tool, entry)
            if (!json_equal (entry, json_object_get (self->entries, tool)))
                changed |= s_change_of (tool);
        json_object_foreach (self->entries, tool, entry)
            if (!json_object_get (entries, tool))
                changed |= s_change_of (tool);
        json_decref (self->entries);
        self->entries = entries;
        self->synced = true;
        return changed;
    }
    if (name && (streq (kind, "tool.registered") || streq (kind, "tool.updated"))
    &&  json_is_object (json_object_get (notice, "tool"))) {
        json_object_set (self->entries, name, json_object_get (notice, "tool"));
        return s_change_of (name);
    }
    if (name && streq (kind, "tool.unregistered")) {
        json_object_del (self->entries, name);
        return s_change_of (name);
    }
    return 0;
}

static void
s_on_watcher (self_t *self)
{
    int changed = 0;
    json_t *notice;
    while ((notice = dsh_watcher_recv (self->watcher, 0))) {
        changed |= s_apply_notice (self, notice);
        json_decref (notice);
    }
    if (changed & CHANGED_TOOLS)
        s_broadcast (self, dsh_jsonrpc_notification ("notifications/tools/list_changed", NULL));
    if (changed & CHANGED_GATEWAYS) {
        s_broadcast (self, dsh_jsonrpc_notification ("notifications/resources/list_changed", NULL));
        s_broadcast (self, dsh_jsonrpc_notification ("notifications/prompts/list_changed", NULL));
        //  A new gateway's logs are followed by the sessions that follow logs
        json_t *entries = s_extras_entries (self, false);
        if (self->stdio && dsh_mcp_logs_following (self->stdio->logs))
            s_extras_polls (self, self->stdio, entries);
        for (s_session_t *session = zhashx_first (self->sessions); session; session = zhashx_next (self->sessions))
            if (dsh_mcp_logs_following (session->logs))
                s_extras_polls (self, session, entries);
        json_decref (entries);
    }
}

//  ---------------------------------------------------------------------
//  Messages from a client

static void
s_on_request (self_t *self, s_origin_t *origin, const char *method, const json_t *id, const json_t *params)
{
    if (streq (method, "initialize"))
        s_initialize (self, origin, id, params);
    else
    if (streq (method, "server/discover"))
        s_discover (self, origin, id);
    else
    if (streq (method, "ping"))
        s_answer (self, origin, dsh_jsonrpc_result (id, json_object ()));
    else
    if (streq (method, "tools/list"))
        s_tools_list (self, origin, id, params);
    else
    if (streq (method, "tools/call"))
        s_tools_call (self, origin, id, params);
    else
    if (dsh_mcp_extras_handles (method))
        s_extras (self, origin, id, method, params);
    else
        s_answer_error (self, origin, id, DSH_JSONRPC_METHOD_NOT_FOUND, "Method not found");
}

//  One message, alone or from a batch (origin->batch holds a place for
//  it, which the answer takes).
static void
s_on_message (self_t *self, s_origin_t *origin, const json_t *message)
{
    const char *method = json_string_value (json_object_get (message, "method"));
    const json_t *id = json_object_get (message, "id");
    const json_t *params = json_object_get (message, "params");
    if (!json_is_object (message) || !method) {
        //  A response (we send the client no requests) needs no answer
        if (json_is_object (message) && id && (json_object_get (message, "result") || json_object_get (message, "error")))
            s_batch_release (&origin->batch);
        else
            s_answer_error (self, origin, json_is_string (id) || json_is_integer (id)? id: NULL,
                            DSH_JSONRPC_INVALID_REQUEST, "Invalid Request");
        return;
    }
    if (!id) {
        if (streq (method, "notifications/initialized"))
            origin->session->initialized = true;
        else
        if (streq (method, "notifications/cancelled"))
            s_cancelled (self, origin->session, params);
        s_batch_release (&origin->batch);
        return;
    }
    if (!json_is_string (id) && !json_is_integer (id))
        s_answer_error (self, origin, NULL, DSH_JSONRPC_INVALID_REQUEST, "Invalid Request: bad id");
    else
        s_on_request (self, origin, method, id, params);
}

//  A line or an HTTP body from session: one message, or a batch.
static void
s_on_input (self_t *self, s_session_t *session, const json_t *input)
{
    s_origin_t origin = { session, NULL };
    if (!json_is_array (input)) {
        s_on_message (self, &origin, input);
        return;
    }
    //  Batches are JSON-RPC's, which MCP 2025-03-26 requires and
    //  2025-06-18 dropped
    if (json_array_size (input) == 0 || strcmp (session->version, "2025-03-26") > 0) {
        s_answer_error (self, &origin, NULL, DSH_JSONRPC_INVALID_REQUEST,
                        json_array_size (input)? "Invalid Request: batches are not part of this MCP revision"
                                               : "Invalid Request: empty batch");
        return;
    }
    s_batch_t *batch = (s_batch_t *) zmalloc (sizeof (s_batch_t));
    assert (batch);
    batch->owner = self;
    batch->session = session;
    batch->responses = json_array ();
    //  One place per message, and one for this loop, so the batch is not
    //  sent before every message had its turn
    batch->waiting = json_array_size (input) + 1;
    size_t index;
    const json_t *message;
    json_array_foreach (input, index, message) {
        origin.batch = batch;
        s_on_message (self, &origin, message);
    }
    origin.batch = batch;
    s_batch_release (&origin.batch);
}

//  Returns 0, or -1 once stdin is closed.
static int
s_on_stdin (self_t *self)
{
    int rc = dsh_jsonrpc_read (self->rpc);
    json_t *input;
    json_t *id;
    bool bad;
    char reason [256];
    while ((input = dsh_jsonrpc_recv (self->rpc, &bad, &id, reason, sizeof reason)) || bad) {
        if (input)
            s_on_input (self, self->stdio, input);
        else {
            zsys_warning ("dsh-mcp: bad message on stdin: %s", reason);
            s_origin_t origin = { self->stdio, NULL };
            s_answer_error (self, &origin, id, DSH_JSONRPC_PARSE_ERROR, "Parse error");
        }
        json_decref (input);
        json_decref (id);
    }
    return rc;
}

//  Messages from HTTP clients, and sessions that ended.
static void
s_on_http (self_t *self)
{
    char *id;
    json_t *input;
    while ((input = dsh_mcp_httpd_recv (self->httpd, &id)) || id) {
        s_session_t *session = zhashx_lookup (self->sessions, id);
        if (input && !session) {
            session = s_session_new (id, self->log_wait_ms);
            zhashx_insert (self->sessions, id, session);
        }
        if (input)
            s_on_input (self, session, input);
        else
        if (session) {
            s_session_end (self, session);
            zhashx_delete (self->sessions, id);
        }
        json_decref (input);
        zstr_free (&id);
    }
}

static void
s_run (self_t *self)
{
    zmq_pollitem_t items [] = {
        { zsock_resolve (dsh_client_sock (self->client)), 0, ZMQ_POLLIN, 0 },
        { NULL, STDIN_FILENO, ZMQ_POLLIN, 0 },
        { zsock_resolve (dsh_watcher_sock (self->watcher)), 0, ZMQ_POLLIN, 0 },
        { NULL, self->httpd? dsh_mcp_httpd_fd (self->httpd): -1, ZMQ_POLLIN, 0 },
        { NULL, -1, ZMQ_POLLOUT, 0 }    //  stdout, while answers wait for it
    };
    int64_t next_tick = zclock_mono ();
    while (!zsys_interrupted && (self->stdio || self->httpd)) {
        items [4].fd = self->stdio && dsh_jsonrpc_backlog (self->rpc)? STDOUT_FILENO: -1;
        if (zmq_poll (items, 5, POLL_TICK_MS) < 0 && errno != EINTR)
            break;
        //  The client socket's fd is edge-triggered: drain on every turn
        s_on_replies (self);
        if (self->httpd && (items [3].revents & ZMQ_POLLIN))
            s_on_http (self);
        bool stdin_closed = self->stdio && (items [1].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) && s_on_stdin (self);
        //  A CONTROL while handling stdin may have kept replies aside
        s_on_replies (self);
        if (items [2].revents & ZMQ_POLLIN) {
            s_on_watcher (self);
            s_answer_early (self);
        }
        //  Deadlines and keepalives are coarse: not looked at per message
        int64_t now = zclock_mono ();
        if (now >= next_tick) {
            s_answer_early (self);
            s_check_pending (self);
            next_tick = now + POLL_TICK_MS;
        }
        //  What this turn answered goes out in as few writes as stdout takes
        if (self->stdio)
            s_flush_stdout (self);
        if (self->stdio && (stdin_closed || self->stdout_gone)) {
            //  The stdio client is gone; HTTP clients may go on
            s_session_end (self, self->stdio);
            s_session_destroy (&self->stdio);
            items [1].fd = -1;
        }
    }
    if (self->stdio)
        s_session_end (self, self->stdio);
    for (s_session_t *session = zhashx_first (self->sessions); session; session = zhashx_next (self->sessions))
        s_session_end (self, session);
}

//  ---------------------------------------------------------------------
//  Start and options

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-mcp [--broker ENDPOINT[,ENDPOINT...]] [--agent ID] [--timeout-ms N] [-v]\n"
        "Serve a dsh broker's tools as an MCP server on stdin/stdout.\n"
        "  --broker ENDPOINT[,ENDPOINT...]\n"
        "                     the broker's front endpoint, or a list of brokers used one at a\n"
        "                     time (default: $DSH_BROKER, else %s)\n"
        "  --agent ID         the agent id every call is made as (policies apply to it);\n"
        "                     tools/list shows only what the permission stage could allow it\n"
        "  --timeout-ms N     each call's deadline (default: the broker's, 60000)\n"
        "  --keepalive-ms N   a call still waiting after N ms (for an approval, say) sends\n"
        "                     progress every N ms when the client gave a progressToken\n"
        "                     (default 10000)\n"
        "  --cert FILE        our CURVE keypair (default: $DSH_CERT)\n"
        "  --broker-cert FILE the broker's public certificate (default: $DSH_BROKER_CERT)\n"
        "  --http HOST:PORT   also serve MCP over Streamable HTTP at http://HOST:PORT/mcp\n"
        "                     (port 0: any free one; the URL is logged once bound)\n"
        "  --http-token-file FILE\n"
        "                     the bearer token HTTP clients must send (its first line);\n"
        "                     required when --http is bound beyond loopback\n"
        "  --http-per-address N\n"
        "                     HTTP connections open at once from one IP address, 0 for no\n"
        "                     limit, up to %d (default %d)\n"
        "  --http-header-ms N a request's headers must all be in within N ms of its\n"
        "                     connection's accept (or of its previous request's end), else\n"
        "                     the connection is closed, %d to %d (default %d)\n"
        "  -v, --verbose      log every call on stderr\n"
        "  -h, --help         show this help\n"
        "Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT set (and the other OTEL_* variables),\n"
        "each tools/call is an MCP server span, continuing the client's _meta.traceparent.\n",
        DSH_DEFAULT_ENDPOINT, DSH_HTTP_PER_ADDRESS_MAX, DSH_MCP_HTTPD_PER_ADDRESS,
        DSH_HTTP_HEADER_TIMEOUT_MS_MIN, DSH_HTTP_HEADER_TIMEOUT_MS_MAX, DSH_HTTP_HEADER_TIMEOUT_MS);
}

//  What main learns from the command line besides self's fields.
typedef struct {
    self_t *self;
    dsh_mcp_options_t *options;
    const char *http;           //  --http HOST:PORT
    const char *token_file;     //  --http-token-file
    dsh_http_limits_t limits;   //  --http-per-address, --http-header-ms
    bool limits_given;
} s_start_t;

//  One of dsh-mcp's own options (dsh_mcp_options_parse has the shared ones).
static int
s_option (int option, const char *value, void *arg)
{
    s_start_t *start = (s_start_t *) arg;
    long number;
    switch (option) {
        case 'a': start->self->agent = value; break;
        case 'H': start->http = value; break;
        case 'T': start->token_file = value; break;
        case 't':
            if (dsh_mcp_options_number (start->options, "--timeout-ms", value, 1, 600000, &number))
                return DSH_MCP_EXIT_USAGE;
            start->self->timeout_ms = (int) number;
            break;
        case 'A':
            if (dsh_mcp_options_number (start->options, "--http-per-address", value, 0, DSH_HTTP_PER_ADDRESS_MAX,
                                        &number))
                return DSH_MCP_EXIT_USAGE;
            start->limits.per_address = (unsigned int) number;
            start->limits_given = true;
            break;
        case 'D':
            if (dsh_mcp_options_number (start->options, "--http-header-ms", value, DSH_HTTP_HEADER_TIMEOUT_MS_MIN,
                                        DSH_HTTP_HEADER_TIMEOUT_MS_MAX, &number))
                return DSH_MCP_EXIT_USAGE;
            start->limits.header_timeout_ms = (unsigned int) number;
            start->limits_given = true;
            break;
        case 'k':
            if (dsh_mcp_options_number (start->options, "--keepalive-ms", value, 100, 600000, &number))
                return DSH_MCP_EXIT_USAGE;
            start->self->keepalive_ms = (int) number;
            break;
    }
    return 0;
}

int
main (int argc, char *argv [])
{
    static const struct option own [] = {
        { "agent", required_argument, NULL, 'a' },
        { "timeout-ms", required_argument, NULL, 't' },
        { "keepalive-ms", required_argument, NULL, 'k' },
        { "http", required_argument, NULL, 'H' },
        { "http-token-file", required_argument, NULL, 'T' },
        { "http-per-address", required_argument, NULL, 'A' },
        { "http-header-ms", required_argument, NULL, 'D' },
        { NULL, 0, NULL, 0 }
    };
    self_t self = { .agent = NULL, .keepalive_ms = KEEPALIVE_MS };
    dsh_mcp_options_t options = { .program = "dsh-mcp" };
    s_start_t start = { .self = &self, .options = &options,
                        .limits = { .per_address = DSH_MCP_HTTPD_PER_ADDRESS,
                                    .header_timeout_ms = DSH_HTTP_HEADER_TIMEOUT_MS } };
    int exit_code = dsh_mcp_options_parse (&options, argc, argv, own, false, s_option, s_usage, &start);
    if (exit_code >= 0)
        return exit_code;
    self.verbose = options.verbose;
    const char *http = start.http, *token_file = start.token_file;
    if (optind < argc)
        return dsh_mcp_options_bad_usage (&options, "unexpected argument \"%s\"", argv [optind]);
    if (self.agent && (!*self.agent || strlen (self.agent) > DSH_ID_MAX))
        return dsh_mcp_options_bad_usage (&options, "invalid agent id \"%s\"", self.agent);
    exit_code = dsh_mcp_options_finish (&options);
    if (exit_code)
        return exit_code;
    const char *broker = options.broker;
    char list_error [512];
    //  Beacon entries become the brokers heard now, once for the client
    //  and the watcher alike
    char *resolved = NULL;
    if (broker && strstr (broker, "beacon")) {
        resolved = dsh_beacon_resolve (broker, 0, list_error, sizeof (list_error));
        if (!resolved) {
            fprintf (stderr, "dsh-mcp: %s\n", list_error);
            return 3;
        }
        broker = resolved;
    }
    //  stdout is the MCP channel: nothing else may write there
    zsys_set_logstream (dsh_log_stream (stderr));
    zsys_init ();
    zsys_set_logstream (dsh_log_stream (stderr));
    if (token_file && !http)
        return dsh_mcp_options_bad_usage (&options, "--http-token-file needs --http");
    if (start.limits_given && !http)
        return dsh_mcp_options_bad_usage (&options, "--http-per-address and --http-header-ms need --http");
    if (http) {
        char http_error [512];
        char *token = token_file? dsh_http_read_token (token_file, http_error, sizeof http_error): NULL;
        self.httpd = !token_file || token? dsh_mcp_httpd_new_limited (http, token, &start.limits, http_error,
                                                                           sizeof http_error): NULL;
        zstr_free (&token);
        if (!self.httpd) {
            fprintf (stderr, "dsh-mcp: --http %s: %s\n", http, http_error);
            zstr_free (&resolved);
            return 2;
        }
        //  The host as given, the port as bound
        const char *colon = strrchr (http, ':');
        fprintf (stderr, "dsh-mcp: serving MCP over HTTP at http://%.*s:%d/mcp\n",
                 (int) (colon - http), http, dsh_mcp_httpd_port (self.httpd));
    }
    self.client = dsh_client_new (broker);
    self.watcher = self.client? dsh_watcher_new (broker): NULL;
    if (!self.watcher) {
        fprintf (stderr, "dsh-mcp: cannot connect to the broker\n");
        dsh_client_destroy (&self.client);
        dsh_mcp_httpd_destroy (&self.httpd);
        zstr_free (&resolved);
        return 1;
    }
    self.rpc = dsh_jsonrpc_new (STDIN_FILENO, STDOUT_FILENO, MAX_LINE_BYTES);
    //  A client that stops reading must not stop the loop (HTTP sessions
    //  share it): stdout is written as far as it takes. Not a terminal,
    //  whose file description stderr may share
    if (!isatty (STDOUT_FILENO))
        fcntl (STDOUT_FILENO, F_SETFL, fcntl (STDOUT_FILENO, F_GETFL) | O_NONBLOCK);
    self.pending = zhashx_new ();
    zhashx_set_destructor (self.pending, s_pending_destroy);
    self.sessions = zhashx_new ();
    zhashx_set_destructor (self.sessions, s_session_free);
    self.early = zlistx_new ();
    zlistx_set_destructor (self.early, s_early_destroy);
    self.entries = json_object ();
    //  A log poll waits at the bridge under half the call deadline
    int call_timeout_ms = self.timeout_ms? self.timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS;
    self.log_wait_ms = call_timeout_ms / 2 < 20000? call_timeout_ms / 2: 20000;
    self.stdio = s_session_new (NULL, self.log_wait_ms);
    zsys_info ("dsh-mcp: serving the tools of %s%s%s", dsh_client_endpoint (self.client),
               self.agent? " as agent ": "", self.agent? self.agent: "");
    //  Spans go out over OTLP when the standard variables say where; a bad
    //  value leaves tracing off and says why, it does not stop the server
    char trace_error [256];
    if (dsh_trace_start ("dsh-mcp", trace_error, sizeof trace_error))
        zsys_warning ("dsh-mcp: tracing is off: %s", trace_error);

    s_run (&self);

    zhashx_destroy (&self.pending);
    dsh_trace_stop (2000);
    zlistx_destroy (&self.early);
    s_session_destroy (&self.stdio);
    zhashx_destroy (&self.sessions);
    dsh_mcp_httpd_destroy (&self.httpd);
    json_decref (self.entries);
    dsh_jsonrpc_destroy (&self.rpc);
    dsh_watcher_destroy (&self.watcher);
    dsh_client_destroy (&self.client);
    zstr_free (&resolved);
    return 0;
}
