/*  =========================================================================
    dsh-mcp - a dsh broker's tools, offered as one MCP server on stdio

        dsh-mcp [--broker E[,E...]] [--agent ID] [--timeout-ms N] [-v]

    An MCP client (a coding agent, the MCP inspector) starts this program
    and sees every tool registered with the broker. tools/list is the
    broker's LIST in MCP's shape, in pages of 100; tools/call is a dsh
    CALL through the broker's chain, made as agent ID, so permissions,
    plan mode, hooks and sandboxes apply. Calls are asynchronous: many are
    in flight at once, their results answered as they come. A watcher
    follows the registry and turns every change into
    notifications/tools/list_changed; notifications/cancelled cancels the
    dsh call; a call's dsh progress becomes notifications/progress when
    the request asked for it. stdout carries only MCP messages, one JSON
    line each; logs go to stderr.
    =========================================================================
*/

#include "dsh_curve.h"
#include "dsh_beacon.h"
#include "dsh_client.h"
#include "dsh_json.h"
#include "dsh_jsonrpc.h"
#include "dsh_mcp_extras.h"
#include "dsh_mcp_logs.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_watcher.h"

#include <getopt.h>
#include <stdarg.h>
#include <unistd.h>

#define SERVER_VERSION      "0.1.0"
#define LATEST_VERSION      "2025-11-25"
#define PAGE_SIZE           100
#define MAX_LINE_BYTES      (64 * 1024 * 1024)
#define LIST_TIMEOUT_MS     5000
//  How long we wait past a call's deadline for the broker's answer.
#define DEADLINE_MARGIN_MS  2000
//  How often the loop looks at its calls' own deadlines
#define POLL_TICK_MS        250

//  The revisions this server speaks, newest first.
static const char *s_versions [] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL };

//  A tools/call waiting for its dsh result.
typedef struct {
    json_t *request_id;
    json_t *progress_token;     //  NULL if the client asked for no progress
    char *tool;
    int64_t give_up_at;
    bool extras;                //  extras: a gateway call, answered by dsh_mcp_extras_response
    bool log_poll;              //  extras: a log poll (request_id NULL), for dsh_mcp_logs_answer
} s_pending_t;

typedef struct {
    const char *agent;
    int timeout_ms;
    bool verbose;
    dsh_client_t *client;
    dsh_watcher_t *watcher;
    dsh_jsonrpc_t *rpc;         //  stdin in, stdout out
    zhashx_t *pending;          //  callId -> s_pending_t
    uint64_t call_count;
    bool initialized;           //  the client sent notifications/initialized
    bool synced;                //  the watcher delivered its first snapshot
    bool stdout_gone;
    dsh_mcp_logs_t *logs;       //  extras: the bridged servers' log messages
} self_t;

static void
s_pending_destroy (void **item_p)
{
    s_pending_t *pending = (s_pending_t *) *item_p;
    if (pending) {
        json_decref (pending->request_id);
        json_decref (pending->progress_token);
        zstr_free (&pending->tool);
        free (pending);
        *item_p = NULL;
    }
}

//  Sends and releases message.
static void
s_send (self_t *self, json_t *message)
{
    if (!self->stdout_gone && dsh_jsonrpc_send (self->rpc, message)) {
        zsys_error ("dsh-mcp: stdout is closed");
        self->stdout_gone = true;
    }
    json_decref (message);
}

//  ---------------------------------------------------------------------
//  Lifecycle

static json_t *
s_capabilities (void)
{
    json_t *capabilities = json_pack ("{s:{s:b}}", "tools", "listChanged", 1);
    json_t *extras = dsh_mcp_extras_capabilities ();        //  extras
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
s_initialize (self_t *self, const json_t *id, const json_t *params)
{
    const char *asked = json_string_value (json_object_get (params, "protocolVersion"));
    const char *version = LATEST_VERSION;
    for (size_t index = 0; asked && s_versions [index]; index++)
        if (streq (asked, s_versions [index]))
            version = s_versions [index];
    json_t *result = json_pack ("{s:s, s:o, s:o, s:s}", "protocolVersion", version,
                                "capabilities", s_capabilities (), "serverInfo", s_server_info (),
                                "instructions", "Tools served by a dsh broker; the set may change "
                                "while you work (watch notifications/tools/list_changed).");
    s_send (self, dsh_jsonrpc_result (id, result));
}

//  2026-07-28 replaced the handshake by discovery; a client that gets
//  no revision of its own here falls back to initialize.
static void
s_discover (self_t *self, const json_t *id)
{
    json_t *versions = json_array ();
    for (size_t index = 0; s_versions [index]; index++)
        json_array_append_new (versions, json_string (s_versions [index]));
    json_t *result = json_pack ("{s:o, s:o, s:o}", "supportedVersions", versions,
                                "capabilities", s_capabilities (), "serverInfo", s_server_info ());
    s_send (self, dsh_jsonrpc_result (id, result));
}

//  ---------------------------------------------------------------------
//  tools/list

//  An MCP Tool for a dsh tool entry.
static json_t *
s_mcp_tool (const json_t *entry)
{
    json_t *tool = json_pack ("{s:O, s:O}", "name", json_object_get (entry, "name"),
                              "inputSchema", json_object_get (entry, "parameters"));
    const char *optional [] = { "title", "description", "outputSchema", "annotations", NULL };
    for (size_t index = 0; optional [index]; index++) {
        json_t *value = json_object_get (entry, optional [index]);
        if (value)
            json_object_set (tool, optional [index], value);
    }
    return tool;
}

//  The entries the agent could be let to call, as the broker's permission
//  stage (if there is one) says; all of them otherwise. Caller owns it.
static json_t *
s_for_agent (self_t *self, const json_t *entries)
{
    if (!self->agent)
        return json_incref ((json_t *) entries);
    json_t *names = json_array ();
    for (size_t index = 0; index < json_array_size (entries); index++)
        json_array_append (names, json_object_get (json_array_get (entries, index), "name"));
    json_t *args = json_pack ("{s:s, s:o}", "agent", self->agent, "tools", names);
    char reason [256];
    dsh_reply_t *reply = dsh_client_control (self->client, "permission", "allowed", args, LIST_TIMEOUT_MS,
                                             reason, sizeof reason);
    json_decref (args);
    json_t *body = reply && !dsh_reply_is_error (reply)? dsh_reply_json (reply): NULL;
    dsh_reply_destroy (&reply);
    json_t *allowed = json_object_get (body, "data");
    if (!json_is_array (allowed)) {
        json_decref (body);
        return json_incref ((json_t *) entries);
    }
    json_t *kept = json_array ();
    for (size_t index = 0; index < json_array_size (entries); index++) {
        json_t *entry = json_array_get (entries, index);
        for (size_t other = 0; other < json_array_size (allowed); other++)
            if (json_equal (json_object_get (entry, "name"), json_array_get (allowed, other))) {
                json_array_append (kept, entry);
                break;
            }
    }
    json_decref (body);
    return kept;
}

static void
s_tools_list (self_t *self, const json_t *id, const json_t *params)
{
    size_t start = 0;
    const json_t *cursor = json_object_get (params, "cursor");
    if (cursor) {
        const char *text = json_string_value (cursor);
        char *end = NULL;
        unsigned long long value = text? strtoull (text, &end, 10): 0;
        if (!text || !*text || *end || value > SIZE_MAX) {
            s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_PARAMS, "Invalid cursor"));
            return;
        }
        start = (size_t) value;
    }
    char reason [256] = "";
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_LIST, NULL, LIST_TIMEOUT_MS,
                                             reason, sizeof reason);
    json_t *body = reply && streq (dsh_reply_command (reply), DSH_TOOLS)? dsh_reply_json (reply): NULL;
    json_t *listed = json_object_get (body, "tools");
    json_t *entries = json_is_array (listed)? s_for_agent (self, listed): NULL;
    for (size_t index = json_array_size (entries); index-- > 0;)   //  extras: a gateway is no MCP tool
        if (dsh_mcp_extras_is_gateway (json_string_value (json_object_get (json_array_get (entries, index), "name"))))
            json_array_remove (entries, index);
    if (!json_is_array (entries)) {
        char *message = zsys_sprintf ("the dsh broker did not list its tools: %s",
                                      *reason? reason: "unexpected reply");
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INTERNAL_ERROR, message));
        zstr_free (&message);
    }
    else
    if (start > json_array_size (entries))
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_PARAMS, "Invalid cursor"));
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
        s_send (self, dsh_jsonrpc_result (id, result));
    }
    json_decref (entries);
    json_decref (body);
    dsh_reply_destroy (&reply);
}

//  ---------------------------------------------------------------------
//  extras: resources, prompts, completion and logging of bridged servers,
//  planned by dsh_mcp_extras from the registry's entries; a forwarded
//  request is a call to a gateway tool, through the chain like any call

//  Sends one gateway call; with an id, its answer goes to that request;
//  a log poll's to dsh_mcp_logs_answer.
static void
s_extras_call (self_t *self, const json_t *id, const json_t *call, bool log_poll)
{
    const char *tool = json_string_value (json_object_get (call, "tool"));
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    const char *sent = NULL;
    char call_id [32];
    snprintf (call_id, sizeof call_id, "mcp-%" PRIu64, ++self->call_count);
    if (tool && dsh_json_to_msgpack (&pk, json_object_get (call, "arguments")) == 0)
        sent = dsh_client_call_send (self->client, call_id, tool, sbuf.data, sbuf.size,
                                     self->agent, NULL, 0, self->timeout_ms);
    msgpack_sbuffer_destroy (&sbuf);
    if (log_poll && !sent) {
        json_decref (dsh_mcp_logs_answer (self->logs, tool, NULL));    //  no longer in flight
        return;
    }
    if (!id && !log_poll)
        return;                 //  nobody waits for it: its result is dropped as unknown
    if (!sent) {
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INTERNAL_ERROR, "cannot send the call to the dsh broker"));
        return;
    }
    s_pending_t *pending = (s_pending_t *) zmalloc (sizeof (s_pending_t));
    assert (pending);
    pending->request_id = id? json_deep_copy (id): NULL;
    pending->tool = strdup (tool);
    pending->extras = !log_poll;
    pending->log_poll = log_poll;
    int timeout_ms = self->timeout_ms? self->timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS;
    pending->give_up_at = zclock_mono () + timeout_ms + DEADLINE_MARGIN_MS;
    zhashx_insert (self->pending, call_id, pending);
}

//  Sends a plan's answer ({result} or {error}) to request id.
static void
s_extras_answer (self_t *self, const json_t *id, const json_t *answer)
{
    json_t *message = json_pack ("{s:s, s:O}", "jsonrpc", "2.0", "id", id? id: json_null ());
    const char *key = json_object_get (answer, "error")? "error": "result";
    json_object_set (message, key, json_object_get (answer, key));
    s_send (self, message);
}

//  The registry's entries this session may see (caller owns them).
static json_t *
s_extras_entries (self_t *self)
{
    char reason [256] = "";
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_LIST, NULL, LIST_TIMEOUT_MS,
                                             reason, sizeof reason);
    json_t *body = reply && streq (dsh_reply_command (reply), DSH_TOOLS)? dsh_reply_json (reply): NULL;
    dsh_reply_destroy (&reply);
    json_t *listed = json_object_get (body, "tools");
    json_t *entries = json_is_array (listed)? s_for_agent (self, listed): json_array ();
    json_decref (body);
    return entries;
}

//  Sends the log polls the session's gateways need.
static void
s_extras_polls (self_t *self, const json_t *entries)
{
    json_t *polls = dsh_mcp_logs_polls (self->logs, entries);
    size_t index;
    const json_t *poll;
    json_array_foreach (polls, index, poll)
        s_extras_call (self, NULL, poll, true);
    json_decref (polls);
}

//  A log poll came back (body NULL: it never will): its messages go to
//  the client, and the next poll out.
static void
s_extras_logs (self_t *self, const char *tool, const json_t *body)
{
    json_t *answer = dsh_mcp_logs_answer (self->logs, tool, body);
    size_t index;
    json_t *params;
    json_array_foreach (json_object_get (answer, "notifications"), index, params)
        s_send (self, dsh_jsonrpc_notification ("notifications/message", json_incref (params)));
    const json_t *poll = json_object_get (answer, "poll");
    if (poll)
        s_extras_call (self, NULL, poll, true);
    json_decref (answer);
}

static void
s_extras (self_t *self, const json_t *id, const char *method, const json_t *params)
{
    json_t *entries = s_extras_entries (self);
    json_t *plan = dsh_mcp_extras_plan (entries, method, params);
    const json_t *call = json_object_get (plan, "call");
    if (call)
        s_extras_call (self, id, call, false);
    else
        s_extras_answer (self, id, plan);
    size_t index;
    const json_t *also;
    json_array_foreach (json_object_get (plan, "also"), index, also)
        s_extras_call (self, NULL, also, false);
    if (streq (method, "logging/setLevel") && json_object_get (plan, "result")
    &&  dsh_mcp_logs_set_level (self->logs, json_string_value (json_object_get (params, "level"))) == 0)
        s_extras_polls (self, entries);
    json_decref (plan);
    json_decref (entries);
}

//  ---------------------------------------------------------------------
//  tools/call

static void
s_tools_call (self_t *self, const json_t *id, const json_t *params)
{
    const char *name = json_string_value (json_object_get (params, "name"));
    const json_t *arguments = json_object_get (params, "arguments");
    if (!name || (arguments && !json_is_object (arguments))) {
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_PARAMS,
                                         "tools/call needs a name and an arguments object"));
        return;
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
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_PARAMS, "arguments nest too deep"));
        return;
    }
    char call_id [32];
    snprintf (call_id, sizeof call_id, "mcp-%" PRIu64, ++self->call_count);
    const char *sent = dsh_client_call_send (self->client, call_id, name, sbuf.data, sbuf.size,
                                             self->agent, NULL, 0, self->timeout_ms);
    msgpack_sbuffer_destroy (&sbuf);
    if (!sent) {
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INTERNAL_ERROR,
                                         "cannot send the call to the dsh broker"));
        return;
    }
    s_pending_t *pending = (s_pending_t *) zmalloc (sizeof (s_pending_t));
    assert (pending);
    pending->request_id = json_deep_copy (id);
    const json_t *token = json_object_get (json_object_get (params, "_meta"), "progressToken");
    if (json_is_string (token) || json_is_integer (token))
        pending->progress_token = json_deep_copy (token);
    pending->tool = strdup (name);
    int timeout_ms = self->timeout_ms? self->timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS;
    pending->give_up_at = zclock_mono () + timeout_ms + DEADLINE_MARGIN_MS;
    zhashx_insert (self->pending, call_id, pending);
    if (self->verbose)
        zsys_info ("dsh-mcp: tools/call %s as %s", name, call_id);
}

//  The client gave up on a request: cancel its dsh call and answer nothing.
static void
s_cancelled (self_t *self, const json_t *params)
{
    const json_t *request_id = json_object_get (params, "requestId");
    for (s_pending_t *pending = zhashx_first (self->pending); pending;
         pending = zhashx_next (self->pending))
        if (json_equal (pending->request_id, (json_t *) request_id)) {
            char *call_id = strdup ((const char *) zhashx_cursor (self->pending));
            dsh_client_cancel (self->client, call_id);
            zhashx_delete (self->pending, call_id);
            if (self->verbose)
                zsys_info ("dsh-mcp: %s cancelled by the client", call_id);
            zstr_free (&call_id);
            return;
        }
}

static void
s_on_result (self_t *self, dsh_reply_t *reply)
{
    const char *call_id = dsh_reply_call_id (reply);
    s_pending_t *pending = call_id? zhashx_lookup (self->pending, call_id): NULL;
    if (!pending)
        return;                 //  cancelled, or past our deadline
    const char *code = dsh_reply_error_code (reply);
    json_t *body = dsh_reply_json (reply);
    if (pending->log_poll)                                      //  extras
        s_extras_logs (self, pending->tool, body);
    else
    if (pending->extras) {                                      //  extras
        json_t *answer = dsh_mcp_extras_response (body);
        s_extras_answer (self, pending->request_id, answer);
        json_decref (answer);
    }
    else
    if (code && streq (code, DSH_E_UNKNOWN_TOOL)) {
        char *message = zsys_sprintf ("Unknown tool: %s", pending->tool);
        s_send (self, dsh_jsonrpc_error (pending->request_id, DSH_JSONRPC_INVALID_PARAMS, message));
        zstr_free (&message);
    }
    else
    if (!body)
        s_send (self, dsh_jsonrpc_error (pending->request_id, DSH_JSONRPC_INTERNAL_ERROR,
                                         "the tool's result has no JSON form"));
    else {
        json_t *result = json_pack ("{s:O, s:b}", "content", json_object_get (body, "content"),
                                    "isError", json_is_true (json_object_get (body, "isError")));
        json_t *structured = json_object_get (body, "structuredContent");
        if (structured)
            json_object_set (result, "structuredContent", structured);
        s_send (self, dsh_jsonrpc_result (pending->request_id, result));
    }
    json_decref (body);
    zhashx_delete (self->pending, call_id);
}

static void
s_on_progress (self_t *self, dsh_reply_t *reply)
{
    json_t *body = dsh_reply_json (reply);
    const char *call_id = json_string_value (json_object_get (body, "callId"));
    s_pending_t *pending = call_id? zhashx_lookup (self->pending, call_id): NULL;
    const json_t *progress = json_object_get (body, "progress");
    if (pending && pending->progress_token && json_is_number (progress)) {
        json_t *params = json_pack ("{s:O, s:O}", "progressToken", pending->progress_token,
                                    "progress", progress);
        const json_t *total = json_object_get (body, "total");
        if (json_is_number (total))
            json_object_set (params, "total", (json_t *) total);
        const json_t *message = json_object_get (body, "message");
        if (json_is_string (message))
            json_object_set (params, "message", (json_t *) message);
        s_send (self, dsh_jsonrpc_notification ("notifications/progress", params));
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
//  deadline and margin.
static void
s_check_deadlines (self_t *self)
{
    int64_t now = zclock_mono ();
    zlistx_t *expired = zlistx_new ();
    zlistx_set_destructor (expired, (zlistx_destructor_fn *) zstr_free);
    for (s_pending_t *pending = zhashx_first (self->pending); pending;
         pending = zhashx_next (self->pending))
        if (now >= pending->give_up_at) {
            //  extras: a log poll has no request to answer; without a
            //  body its gateway is forgotten, and no new poll is sent
            if (pending->log_poll)
                s_extras_logs (self, pending->tool, NULL);
            else
                s_send (self, dsh_jsonrpc_error (pending->request_id, DSH_JSONRPC_INTERNAL_ERROR,
                                                 "no answer from the dsh broker before the call's deadline"));
            zlistx_add_end (expired, strdup ((const char *) zhashx_cursor (self->pending)));
        }
    for (char *call_id = zlistx_first (expired); call_id; call_id = zlistx_next (expired))
        zhashx_delete (self->pending, call_id);
    zlistx_destroy (&expired);
}

//  ---------------------------------------------------------------------
//  Registry changes

static void
s_on_watcher (self_t *self)
{
    bool changed = false;
    bool extras_changed = false;                                //  extras
    json_t *notice;
    while ((notice = dsh_watcher_recv (self->watcher, 0))) {
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        if (kind && streq (kind, "snapshot")) {
            //  A resync may hide changes; the first sync is the start
            changed |= self->synced;
            self->synced = true;
        }
        else
        if (kind && strncmp (kind, "tool.", 5) == 0)
            changed = true;
        extras_changed |= changed && dsh_mcp_extras_is_gateway (json_string_value (json_object_get (notice, "name")));
        extras_changed |= changed && kind && streq (kind, "snapshot");
        json_decref (notice);
    }
    if (changed && self->initialized)
        s_send (self, dsh_jsonrpc_notification ("notifications/tools/list_changed", NULL));
    if (extras_changed && self->initialized) {                  //  extras
        s_send (self, dsh_jsonrpc_notification ("notifications/resources/list_changed", NULL));
        s_send (self, dsh_jsonrpc_notification ("notifications/prompts/list_changed", NULL));
        if (dsh_mcp_logs_following (self->logs)) {
            json_t *entries = s_extras_entries (self);
            s_extras_polls (self, entries);
            json_decref (entries);
        }
    }
}

//  ---------------------------------------------------------------------
//  Messages from the client

static void
s_on_message (self_t *self, const json_t *message)
{
    const char *method = json_string_value (json_object_get (message, "method"));
    const json_t *id = json_object_get (message, "id");
    const json_t *params = json_object_get (message, "params");
    if (!method) {
        //  A response: we send the client no requests
        if (!id || !(json_object_get (message, "result") || json_object_get (message, "error")))
            s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_INVALID_REQUEST, "Invalid Request"));
        return;
    }
    if (!id) {
        if (streq (method, "notifications/initialized"))
            self->initialized = true;
        else
        if (streq (method, "notifications/cancelled"))
            s_cancelled (self, params);
        return;
    }
    if (!json_is_string (id) && !json_is_integer (id))
        s_send (self, dsh_jsonrpc_error (NULL, DSH_JSONRPC_INVALID_REQUEST, "Invalid Request: bad id"));
    else
    if (streq (method, "initialize"))
        s_initialize (self, id, params);
    else
    if (streq (method, "server/discover"))
        s_discover (self, id);
    else
    if (streq (method, "ping"))
        s_send (self, dsh_jsonrpc_result (id, json_object ()));
    else
    if (streq (method, "tools/list"))
        s_tools_list (self, id, params);
    else
    if (streq (method, "tools/call"))
        s_tools_call (self, id, params);
    else
    if (dsh_mcp_extras_handles (method))                        //  extras
        s_extras (self, id, method, params);
    else
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_METHOD_NOT_FOUND, "Method not found"));
}

//  Returns 0, or -1 once stdin is closed.
static int
s_on_stdin (self_t *self)
{
    int rc = dsh_jsonrpc_read (self->rpc);
    json_t *message;
    bool bad;
    char reason [256];
    while ((message = dsh_jsonrpc_recv (self->rpc, &bad, reason, sizeof reason)) || bad) {
        if (message)
            s_on_message (self, message);
        else {
            zsys_warning ("dsh-mcp: bad message on stdin: %s", reason);
            s_send (self, dsh_jsonrpc_error (NULL, DSH_JSONRPC_PARSE_ERROR, "Parse error"));
        }
        json_decref (message);
    }
    return rc;
}

static void
s_run (self_t *self)
{
    zmq_pollitem_t items [] = {
        { zsock_resolve (dsh_client_sock (self->client)), 0, ZMQ_POLLIN, 0 },
        { NULL, STDIN_FILENO, ZMQ_POLLIN, 0 },
        { zsock_resolve (dsh_watcher_sock (self->watcher)), 0, ZMQ_POLLIN, 0 }
    };
    while (!zsys_interrupted && !self->stdout_gone) {
        if (zmq_poll (items, 3, POLL_TICK_MS) < 0 && errno != EINTR)
            break;
        //  The client socket's fd is edge-triggered: drain on every turn
        s_on_replies (self);
        if ((items [1].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) && s_on_stdin (self))
            break;
        //  A LIST or CONTROL while handling stdin may have kept replies aside
        s_on_replies (self);
        s_on_watcher (self);
        s_check_deadlines (self);
    }
    //  Whoever started us is gone: its calls need not run on
    for (s_pending_t *pending = zhashx_first (self->pending); pending;
         pending = zhashx_next (self->pending))
        dsh_client_cancel (self->client, (const char *) zhashx_cursor (self->pending));
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
        "  --cert FILE        our CURVE keypair (default: $DSH_CERT)\n"
        "  --broker-cert FILE the broker's public certificate (default: $DSH_BROKER_CERT)\n"
        "  -v, --verbose      log every call on stderr\n"
        "  -h, --help         show this help\n",
        DSH_DEFAULT_ENDPOINT);
}

static int
s_bad_usage (const char *format, ...) __attribute__ ((format (printf, 1, 2)));

static int
s_bad_usage (const char *format, ...)
{
    va_list args;
    va_start (args, format);
    fprintf (stderr, "dsh-mcp: ");
    vfprintf (stderr, format, args);
    fprintf (stderr, " (try --help)\n");
    va_end (args);
    return 2;
}

int
main (int argc, char *argv [])
{
    static const struct option options [] = {
        { "broker", required_argument, NULL, 'b' },
        { "agent", required_argument, NULL, 'a' },
        { "timeout-ms", required_argument, NULL, 't' },
        { "cert", required_argument, NULL, 'C' },
        { "broker-cert", required_argument, NULL, 'K' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    self_t self = { .agent = NULL };
    const char *broker = NULL;
    const char *cert = NULL, *broker_cert = NULL;
    opterr = 0;
    int option;
    while ((option = getopt_long (argc, argv, ":vh", options, NULL)) != -1) {
        switch (option) {
            case 'b': broker = optarg; break;
            case 'a': self.agent = optarg; break;
            case 'v': self.verbose = true; break;
            case 'C': cert = optarg; break;
            case 'K': broker_cert = optarg; break;
            case 'h': s_usage (stdout); return 0;
            case 't': {
                char *end = NULL;
                long value = strtol (optarg, &end, 10);
                if (end == optarg || *end || value < 1 || value > 600000)
                    return s_bad_usage ("--timeout-ms needs a number from 1 to 600000, not \"%s\"", optarg);
                self.timeout_ms = (int) value;
                break;
            }
            case ':':
                return s_bad_usage ("option %s needs a value", argv [optind - 1]);
            default:
                if (optopt)
                    return s_bad_usage ("unknown option -%c", optopt);
                return s_bad_usage ("unknown option %s", argv [optind - 1]);
        }
    }
    if (optind < argc)
        return s_bad_usage ("unexpected argument \"%s\"", argv [optind]);
    if (self.agent && (!*self.agent || strlen (self.agent) > DSH_ID_MAX))
        return s_bad_usage ("invalid agent id \"%s\"", self.agent);
    char curve_error [512];
    if (dsh_curve_setup (cert, broker_cert, curve_error, sizeof (curve_error)))
        return s_bad_usage ("%s", curve_error);
    if (!broker) {
        broker = getenv ("DSH_BROKER");
        if (broker && !*broker)
            broker = NULL;
    }
    char list_error [512];
    zlistx_t *brokers = dsh_sock_brokers (broker, list_error, sizeof (list_error));
    if (!brokers)
        return s_bad_usage ("%s", list_error);
    zlistx_destroy (&brokers);
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
    zsys_set_logstream (stderr);
    zsys_init ();
    zsys_set_logstream (stderr);
    self.client = dsh_client_new (broker);
    self.watcher = self.client? dsh_watcher_new (broker): NULL;
    if (!self.watcher) {
        fprintf (stderr, "dsh-mcp: cannot connect to the broker\n");
        dsh_client_destroy (&self.client);
        zstr_free (&resolved);
        return 1;
    }
    self.rpc = dsh_jsonrpc_new (STDIN_FILENO, STDOUT_FILENO, MAX_LINE_BYTES);
    self.pending = zhashx_new ();
    zhashx_set_destructor (self.pending, s_pending_destroy);
    //  extras: a log poll waits at the bridge under half the call deadline
    int call_timeout_ms = self.timeout_ms? self.timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS;
    self.logs = dsh_mcp_logs_new (call_timeout_ms / 2 < 20000? call_timeout_ms / 2: 20000);
    zsys_info ("dsh-mcp: serving the tools of %s%s%s", dsh_client_endpoint (self.client),
               self.agent? " as agent ": "", self.agent? self.agent: "");

    s_run (&self);

    zhashx_destroy (&self.pending);
    dsh_mcp_logs_destroy (&self.logs);
    dsh_jsonrpc_destroy (&self.rpc);
    dsh_watcher_destroy (&self.watcher);
    dsh_client_destroy (&self.client);
    zstr_free (&resolved);
    return 0;
}
