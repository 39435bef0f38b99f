/*  =========================================================================
    dsh-mcp-bridge - serve an MCP server's tools to a dsh broker

        dsh-mcp-bridge [--broker E] [--name N] [--prefix P] [--id ID]
                       [--untrusted] [--confined] [--concurrency N] [--ping-ms N] [--root DIR]... [-v]
                       -- COMMAND [ARGS...]
        dsh-mcp-bridge [options] --url URL [--header "NAME: VALUE"]...
                       [--bearer-token-file FILE]

    Starts COMMAND as an MCP server on stdio, does the MCP handshake, lists
    its tools (every page) and announces each one to the broker as a raw
    tool of a dsh component. A dsh call becomes a tools/call on the server's
    stdin; many are in flight at once, told apart by their JSON-RPC ids.

    With --url the server is remote, on MCP's Streamable HTTP transport:
    dsh_mcp_httpc gives this program the same three fds a child's stdio
    would, so everything below holds for both. A session that cannot be
    reached or that the server ends is a server that exited.

    One thread owns the server: this program's main loop polls the server's
    stdout and stderr and a wake pipe, and looks for cancelled calls on a
    100 ms tick. The provider's handler only queues each call for that loop
    and returns DSH_HANDLER_DEFER; it runs on the provider's own thread
    (inline, no worker), and the provider tells the broker it takes
    --concurrency calls at once. The loop finishes each call
    (dsh_call_finish) when its answer comes.

    A server that exits or stops answering pings is withdrawn (its
    provider destroyed, calls in flight answered TOOL_GONE), then started
    again after a back-off that doubles from 100 ms to 10 s.

    A call's meta.traceparent (the broker's dispatch span), tracestate and
    baggage reach the server in params._meta; with OTEL_EXPORTER_OTLP_ENDPOINT
    set, each request is an MCP client span (dsh_mcp_trace) between the two.
    =========================================================================
*/

#include "dsh_curve.h"
#include "dsh_log.h"
#include "dsh_jsonrpc.h"
#include "dsh_mcp_content.h"
#include "dsh_mcp_gateway.h"
#include "dsh_mcp_logs.h"
#include "dsh_mcp_options.h"
#include "dsh_mcp_httpc.h"
#include "dsh_mcp_trace.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_provider.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define PROTOCOL_VERSION        "2025-06-18"
#define BRIDGE_VERSION          "0.1.0"
#define BACKOFF_MIN_MS          100
#define BACKOFF_MAX_MS          10000
//  A server that stayed up this long starts its back-off afresh.
#define STABLE_UPTIME_MS        10000
//  How long a server may take to answer initialize (npx may download it).
#define INITIALIZE_TIMEOUT_MS   30000
//  A server's stdout line may be a whole tool result with images.
#define MAX_LINE_BYTES          (64 * 1024 * 1024)
#define MAX_LOG_LINE_BYTES      (64 * 1024)
#define MAX_LIST_PAGES          1000
//  The largest bearer token file read
#define MAX_TOKEN_BYTES         16384
#define POLL_TICK_MS            100
//  Calls the server may have in flight at once: what the broker is told
//  this component takes (MCP servers take many over one pipe).
#define DEFAULT_CONCURRENCY     64
//  The gateway entry's budget as JSON, under the broker's default
//  max_tool_bytes (65536) for its canonical msgpack, which is smaller.
#define MAX_GATEWAY_BYTES       60000
#define MAX_ROOTS               64
#define MAX_TASK_ID_BYTES       255
//  The server's last log messages kept for dsh-mcp's long polls
#define LOG_RING_SIZE           256
#define MAX_LOG_WAIT_MS         30000

//  The MCP revisions whose tools/* messages this bridge speaks.
static const char *s_versions [] = { "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", NULL };

//  Calls handed over by the provider's workers, for the main loop.
typedef struct {
    pthread_mutex_t mutex;
    zlistx_t *jobs;             //  s_job_t, in arrival order
    int wake_read;              //  readable when jobs were queued
    int wake_write;
    bool closing;               //  the provider is going: answer, do not queue
} s_inbox_t;

typedef struct {
    dsh_call_t *call;
    dsh_result_t *result;
} s_job_t;

//  One announced tool: its dsh name, the server's name for it, and the
//  entry as announced (compact, in the server's key order) to spot changes.
typedef struct {
    char *mcp_name;
    char *entry;
    bool task_required;         //  execution.taskSupport "required"
} s_tool_t;

typedef enum {
    REQUEST_INITIALIZE,
    REQUEST_LIST,
    REQUEST_PING,
    REQUEST_CALL,
    REQUEST_CATALOG,            //  a page of resources, templates or prompts
    REQUEST_IGNORED             //  its answer changes nothing (tasks/cancel)
} s_request_kind_t;

//  What a REQUEST_CALL's answer is: a tool result, or a step on the way.
typedef enum {
    CALL_TOOL,                  //  tools/call or tasks/result: a CallToolResult
    CALL_TASK_CREATE,           //  tools/call with task: a CreateTaskResult
    CALL_GATEWAY,               //  a request forwarded by the gateway tool
    CALL_LOG_POLL               //  a log poll held here, never sent to the server
} s_call_step_t;

//  A request sent to the server and not yet answered.
typedef struct {
    s_request_kind_t kind;
    json_int_t id;
    int64_t sent_at;
    dsh_call_t *call;           //  REQUEST_CALL: the deferred call and its result
    dsh_result_t *result;
    s_call_step_t step;
    char task_id [MAX_TASK_ID_BYTES + 1];   //  "" unless the call runs as a task
    json_int_t log_after;       //  CALL_LOG_POLL: answer with the messages after this one
    int64_t log_due;            //  ... or with none at this time
    dsh_span_t *span;           //  the MCP client span of a call, while tracing
} s_request_t;

typedef enum {
    SERVER_DOWN,                //  not running; restart_at says when to start it
    SERVER_STARTING,            //  handshake and first listing under way
    SERVER_READY                //  tools announced
} s_state_t;

typedef struct {
    //  Settings
    const char *broker;
    const char *name;
    const char *prefix;
    char *component_id;
    bool untrusted;
    bool confined;              //  --confined: the server's roots lie inside the workspace
    size_t concurrency;         //  calls the server may have at once (--concurrency)
    bool verbose;
    int ping_ms;
    char **command;
    const char *url;            //  a remote server instead of command
    zlistx_t *headers;          //  --url: extra HTTP headers
    //  The server process
    s_state_t state;
    pid_t pid;
    dsh_mcp_httpc_t *httpc;     //  --url: the session standing in for the process
    int stdin_fd;
    int stdout_fd;
    int stderr_fd;
    dsh_jsonrpc_t *rpc;         //  stdout in, stdin out
    dsh_jsonrpc_t *log_lines;   //  stderr
    int64_t restart_at;
    int backoff_ms;
    int64_t ready_since;
    json_int_t next_id;
    zhashx_t *requests;         //  id as text -> s_request_t
    json_t *listing;            //  tools gathered by the listing under way, or NULL
    size_t listing_pages;
    bool relist;                //  list_changed came during a listing
    int64_t next_ping_at;
    //  The dsh side
    s_inbox_t inbox;
    dsh_provider_t *provider;
    zhashx_t *tools;            //  dsh name -> s_tool_t
    bool report_due;            //  the "serving N tools" line is not out yet
    int64_t next_refusals_at;
    //  Resources, prompts and the rest: the gateway tool
    const char *roots [MAX_ROOTS + 1];  //  --root directories, NULL-terminated
    json_t *capabilities;       //  the server's, from initialize
    char version [16];          //  the MCP revision the server agreed to
    json_t *catalog;            //  lists gathered by the catalog listing under way, or NULL
    size_t catalog_step;        //  which of s_catalog_lists is being listed
    size_t catalog_pages;
    bool catalog_relist;        //  a list_changed came during a catalog listing
    char *gateway_name;
    char *gateway_entry;        //  as announced (compact, keys sorted), or NULL
    json_t *log_ring;           //  [{seq, params}], the last LOG_RING_SIZE log messages
    json_int_t log_seq;         //  the last message's seq, over every server run
} self_t;

//  ---------------------------------------------------------------------
//  The inbox: the only state the provider's worker threads touch

static int
s_handler (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    s_inbox_t *inbox = (s_inbox_t *) arg;
    pthread_mutex_lock (&inbox->mutex);
    bool closing = inbox->closing;
    if (!closing) {
        s_job_t *job = (s_job_t *) zmalloc (sizeof (s_job_t));
        assert (job);
        job->call = call;
        job->result = result;
        zlistx_add_end (inbox->jobs, job);
    }
    pthread_mutex_unlock (&inbox->mutex);
    if (closing) {
        dsh_result_error (result, DSH_E_TOOL_GONE, "the MCP server is going away");
        return 0;
    }
    //  A full pipe already wakes the loop; the byte itself means nothing
    if (write (inbox->wake_write, "", 1) < 0 && errno != EAGAIN)
        zsys_error ("dsh-mcp-bridge: cannot wake the main loop: %s", strerror (errno));
    return DSH_HANDLER_DEFER;
}

//  Takes every queued job; returns a list the caller destroys. closing:
//  whether later calls are answered at once instead of queued.
static zlistx_t *
s_inbox_take (s_inbox_t *inbox, bool closing)
{
    char drain [256];
    while (read (inbox->wake_read, drain, sizeof drain) > 0)
        ;
    zlistx_t *fresh = zlistx_new ();
    pthread_mutex_lock (&inbox->mutex);
    zlistx_t *jobs = inbox->jobs;
    inbox->jobs = fresh;
    inbox->closing = closing;
    pthread_mutex_unlock (&inbox->mutex);
    return jobs;
}

//  ---------------------------------------------------------------------
//  Tools

static void
s_tool_destroy (void **item_p)
{
    s_tool_t *tool = (s_tool_t *) *item_p;
    if (tool) {
        zstr_free (&tool->mcp_name);
        zstr_free (&tool->entry);
        free (tool);
        *item_p = NULL;
    }
}

//  prefix + the MCP name with every character outside [A-Za-z0-9_.-]
//  made '_', cut to DSH_NAME_MAX bytes.
static char *
s_dsh_name (const char *prefix, const char *mcp_name)
{
    char *name = zsys_sprintf ("%s%s", prefix, mcp_name);
    for (char *cursor = name + strlen (prefix); *cursor; cursor++)
        if (!isalnum ((unsigned char) *cursor) && *cursor != '_' && *cursor != '.' && *cursor != '-')
            *cursor = '_';
    if (strlen (name) > DSH_NAME_MAX)
        name [DSH_NAME_MAX] = 0;
    return name;
}

//  The dsh tool entry for an MCP tool, or NULL (with a log line) if the
//  tool cannot be served.
static json_t *
s_tool_entry (self_t *self, const json_t *tool, const char *dsh_name)
{
    const json_t *input_schema = json_object_get (tool, "inputSchema");
    if (!json_is_object (input_schema)
    || !json_is_string (json_object_get (input_schema, "type"))
    || strneq (json_string_value (json_object_get (input_schema, "type")), "object")) {
        zsys_warning ("%s: tool %s has no object inputSchema; not served", self->name, dsh_name);
        return NULL;
    }
    //  Every field the server sent is kept, known to dsh or not (icons,
    //  execution, _meta...): inputSchema goes as dsh's "parameters"
    json_t *entry = json_pack ("{s:s, s:O}", "name", dsh_name, "parameters", input_schema);
    const char *key;
    const json_t *value;
    json_object_foreach ((json_t *) tool, key, value)
        if (!streq (key, "name") && !streq (key, "inputSchema") && !streq (key, "annotations")
        &&  !streq (key, "parameters") && !streq (key, "concurrencySafe") && !streq (key, "strict"))
            json_object_set (entry, key, (json_t *) value);
    const json_t *output_schema = json_object_get (tool, "outputSchema");
    if (output_schema && !json_is_object (output_schema))
        json_object_del (entry, "outputSchema");
    if (json_object_get (entry, "description") && !json_is_string (json_object_get (entry, "description")))
        json_object_del (entry, "description");
    if (json_object_get (entry, "title") && !json_is_string (json_object_get (entry, "title")))
        json_object_del (entry, "title");
    //  A tool that must run as an MCP task is run so by this bridge (a
    //  task-augmented call it waits on): to dsh callers it is a plain call
    const json_t *execution = json_object_get (tool, "execution");
    const char *support = json_string_value (json_object_get (execution, "taskSupport"));
    if (support && streq (support, "required")) {
        json_t *plain = json_deep_copy (execution);
        json_object_set_new (plain, "taskSupport", json_string ("forbidden"));
        json_object_set_new (entry, "execution", plain);
    }

    //  Hints that would loosen a policy (read-only, not destructive) are
    //  claims; an untrusted server's claims are not passed on. Other
    //  annotations (title...) pass as they are.
    const json_t *annotations = json_object_get (tool, "annotations");
    json_t *kept = json_is_object (annotations)? json_deep_copy (annotations): json_object ();
    bool read_only = json_is_true (json_object_get (kept, "readOnlyHint"));
    if (self->untrusted) {
        if (read_only)
            json_object_del (kept, "readOnlyHint");
        if (json_is_false (json_object_get (kept, "destructiveHint")))
            json_object_del (kept, "destructiveHint");
        read_only = false;
    }
    if (read_only)
        json_object_set_new (entry, "concurrencySafe", json_true ());
    if (json_object_size (kept) > 0)
        json_object_set_new (entry, "annotations", kept);
    else
        json_decref (kept);
    //  Only the operator's flag says so, never the server's own entry
    json_object_del (entry, "confined");
    if (self->confined)
        json_object_set_new (entry, "confined", json_true ());
    return entry;
}

//  Makes the announced tools those of listing: only names that appeared,
//  went, or changed touch the provider. Tools are added in the server's
//  order and each entry keeps the server's key order (properties as the
//  author wrote them), so that a prompt reads as the server meant it.
static void
s_apply_listing (self_t *self, const json_t *listing)
{
    zhashx_t *fresh = zhashx_new ();
    zhashx_set_destructor (fresh, s_tool_destroy);
    zlistx_t *order = zlistx_new ();       //  the dsh names of fresh, in the server's order
    zlistx_set_destructor (order, (zlistx_destructor_fn *) zstr_free);
    size_t index;
    const json_t *tool;
    json_array_foreach (listing, index, tool) {
        const char *mcp_name = json_string_value (json_object_get (tool, "name"));
        if (!mcp_name || !*mcp_name) {
            zsys_warning ("%s: a tool without a name; not served", self->name);
            continue;
        }
        char *dsh_name = s_dsh_name (self->prefix, mcp_name);
        json_t *entry = zhashx_lookup (fresh, dsh_name)? NULL: s_tool_entry (self, tool, dsh_name);
        if (entry) {
            s_tool_t *item = (s_tool_t *) zmalloc (sizeof (s_tool_t));
            assert (item);
            item->mcp_name = strdup (mcp_name);
            item->entry = json_dumps (entry, JSON_COMPACT);
            const char *support = json_string_value (json_object_get (json_object_get (tool, "execution"),
                                                                      "taskSupport"));
            item->task_required = support && streq (support, "required");
            zhashx_insert (fresh, dsh_name, item);
            zlistx_add_end (order, strdup (dsh_name));
            json_decref (entry);
        }
        else
        if (zhashx_lookup (fresh, dsh_name))
            zsys_warning ("%s: tool \"%s\" has the same dsh name as another (%s); not served",
                          self->name, mcp_name, dsh_name);
        zstr_free (&dsh_name);
    }
    if (!self->provider) {
        //  The handler only queues the call for this loop: it runs on the
        //  provider's thread, and the broker may send as many calls at once
        //  as the server is let to have. Held until the first listing is in
        dsh_provider_options_t options = {
            .broker = self->broker, .id = self->component_id, .workers = self->concurrency,
            .inline_handlers = true
        };
        self->provider = dsh_provider_new_options (&options);
        assert (self->provider);   //  the id and endpoint were checked at start
    }
    size_t added = 0, removed = 0;
    for (s_tool_t *old = zhashx_first (self->tools); old; old = zhashx_next (self->tools)) {
        const char *dsh_name = (const char *) zhashx_cursor (self->tools);
        s_tool_t *now = zhashx_lookup (fresh, dsh_name);
        if (!now || strneq (now->entry, old->entry)) {
            dsh_provider_remove (self->provider, dsh_name);
            removed++;
        }
    }
    for (const char *dsh_name = (const char *) zlistx_first (order); dsh_name;
         dsh_name = (const char *) zlistx_next (order)) {
        s_tool_t *now = (s_tool_t *) zhashx_lookup (fresh, dsh_name);
        s_tool_t *old = zhashx_lookup (self->tools, dsh_name);
        if (old && streq (now->entry, old->entry))
            continue;
        if (dsh_provider_add_raw (self->provider, now->entry, s_handler, &self->inbox) == 0)
            added++;
        else {
            zsys_warning ("%s: the provider refused tool %s", self->name, dsh_name);
            zhashx_delete (fresh, dsh_name);
        }
    }
    zlistx_destroy (&order);
    zhashx_destroy (&self->tools);
    self->tools = fresh;
    //  The first listing's tools go in one ANNOUNCE; later listings are
    //  changes, announced together
    dsh_provider_start (self->provider);
    if (self->verbose || added || removed)
        zsys_info ("%s: %zu tools served (%zu added, %zu removed) as component %s",
                   self->name, zhashx_size (self->tools), added, removed, self->component_id);
}

//  ---------------------------------------------------------------------
//  Requests to the server

//  Queues message (taken) for the server; the loop writes a turn's
//  messages together at its end.
static void
s_send (self_t *self, json_t *message)
{
    if (self->rpc)
        dsh_jsonrpc_queue (self->rpc, message);
    json_decref (message);
}

static s_request_t *
s_request (self_t *self, s_request_kind_t kind, const char *method, json_t *params)
{
    s_request_t *request = (s_request_t *) zmalloc (sizeof (s_request_t));
    assert (request);
    request->kind = kind;
    request->id = ++self->next_id;
    request->sent_at = zclock_mono ();
    char key [32];
    snprintf (key, sizeof key, "%" JSON_INTEGER_FORMAT, request->id);
    zhashx_insert (self->requests, key, request);
    s_send (self, dsh_jsonrpc_request (request->id, method, params));
    return request;
}

static void
s_request_forget (self_t *self, s_request_t *request)
{
    char key [32];
    snprintf (key, sizeof key, "%" JSON_INTEGER_FORMAT, request->id);
    zhashx_delete (self->requests, key);
    free (request);
}

static void
s_list_start (self_t *self)
{
    if (self->listing) {
        self->relist = true;
        return;
    }
    self->listing = json_array ();
    self->listing_pages = 0;
    s_request (self, REQUEST_LIST, "tools/list", json_object ());
}

//  Finishes a deferred call with an error.
static void
s_finish_error (dsh_call_t *call, dsh_result_t *result, const char *code, const char *message)
{
    dsh_result_error (result, code, "%s", message);
    dsh_call_finish (call);
}

//  Finishes a call sent to the server that got no answer from it: its
//  span ends failed with the dsh code.
static void
s_request_fail (s_request_t *request, const char *code, const char *message)
{
    dsh_mcp_span_fail (&request->span, code, message);
    s_finish_error (request->call, request->result, code, message);
}

//  Starts the MCP client span of a request for call, child of the context
//  the broker gave the call (its meta); trace becomes what the server is
//  sent in _meta.
static dsh_span_t *
s_span_start (self_t *self, const char *method, const char *target, dsh_call_t *call, dsh_mcp_trace_t *trace)
{
    dsh_mcp_trace_from_msgpack (trace, dsh_call_meta (call));
    dsh_span_t *span = dsh_mcp_span_start (method, target, DSH_SPAN_CLIENT, trace);
    if (!span)
        return NULL;
    dsh_span_set_str (span, "mcp.protocol.version", self->version);
    dsh_span_set_str (span, "network.transport", self->url? "tcp": "pipe");
    if (self->url)
        dsh_span_set_str (span, "network.protocol.name", "http");
    char session [1025] = "";          //  dsh_mcp_httpc takes ids up to 1024 bytes
    if (self->httpc)
        dsh_mcp_httpc_session_id (self->httpc, session, sizeof session);
    if (*session)
        dsh_span_set_str (span, "mcp.session.id", session);
    dsh_span_set_str (span, "gen_ai.tool.call.id", dsh_call_id (call));
    if (target && strneq (target, dsh_call_name (call)))
        dsh_span_set_str (span, "dsh.tool.name", dsh_call_name (call));
    return span;
}

//  The request's JSON-RPC id, on its span.
static void
s_span_request_id (s_request_t *request)
{
    char text [32];
    snprintf (text, sizeof text, "%" JSON_INTEGER_FORMAT, request->id);
    dsh_span_set_str (request->span, "jsonrpc.request.id", text);
}

//  ---------------------------------------------------------------------
//  Resources, prompts, completions, log levels and roots: the gateway
//  tool (dsh_mcp_gateway.h) and the client side of MCP the bridge plays

//  The lists a catalog listing gathers, in order, and the capability that
//  makes the server offer each.
static const struct {
    const char *method;
    const char *list;
    const char *capability;
} s_catalog_lists [] = {
    { "resources/list", "resources", "resources" },
    { "resources/templates/list", "resourceTemplates", "resources" },
    { "prompts/list", "prompts", "prompts" },
    { NULL, NULL, NULL }
};

//  initialize's params: the bridge offers roots (the workspace) and
//  nothing else; it has no model to sample and no human to elicit from.
static json_t *
s_initialize_params (self_t *self)
{
    //  Roots only when asked for: a server such as server-filesystem takes
    //  the client's roots instead of the directories it was started with,
    //  so offering some unasked could widen what it reaches
    json_t *capabilities = self->roots [0]? json_pack ("{s:{s:b}}", "roots", "listChanged", 0): json_object ();
    return json_pack ("{s:s, s:o, s:{s:s, s:s}}", "protocolVersion", PROTOCOL_VERSION,
                      "capabilities", capabilities,
                      "clientInfo", "name", "dsh-mcp-bridge", "version", BRIDGE_VERSION);
}

//  Announces the gateway entry for the catalog gathered (or withdraws the
//  gateway of a server that offers none of what it forwards).
static void
s_catalog_apply (self_t *self)
{
    bool offers = false;
    for (const char **key = (const char *[]) { "resources", "prompts", "completions", "logging", NULL };
         *key; key++)
        offers |= json_object_get (self->capabilities, *key) != NULL;
    char *text = NULL;
    if (offers) {
        json_t *entry = dsh_mcp_gateway_entry (self->gateway_name, self->name, self->prefix,
                                               self->capabilities, self->catalog, MAX_GATEWAY_BYTES);
        const json_t *truncated = json_object_get (json_object_get (entry, DSH_MCP_GATEWAY_KEY), "truncated");
        if (truncated) {
            char *lists = json_dumps (truncated, JSON_COMPACT);
            zsys_warning ("%s: the gateway entry is cut to fit %d bytes: %s lists only their first items",
                          self->name, MAX_GATEWAY_BYTES, lists);
            free (lists);
        }
        text = json_dumps (entry, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref (entry);
    }
    if (self->provider && (text? !self->gateway_entry || strneq (text, self->gateway_entry): !!self->gateway_entry)) {
        if (self->gateway_entry)
            dsh_provider_remove (self->provider, self->gateway_name);
        zstr_free (&self->gateway_entry);
        if (text && dsh_provider_add_raw (self->provider, text, s_handler, &self->inbox) == 0) {
            self->gateway_entry = strdup (text);
            zsys_info ("%s: gateway %s serves %zu resources, %zu templates, %zu prompts", self->name,
                       self->gateway_name, json_array_size (json_object_get (self->catalog, "resources")),
                       json_array_size (json_object_get (self->catalog, "resourceTemplates")),
                       json_array_size (json_object_get (self->catalog, "prompts")));
        }
        else
        if (text)
            zsys_warning ("%s: the provider refused gateway %s", self->name, self->gateway_name);
    }
    zstr_free (&text);
}

//  Asks for the next page, or the next list the server offers; applies
//  the catalog when every list is in.
static void
s_catalog_next (self_t *self, const json_t *cursor)
{
    if (cursor) {
        s_request (self, REQUEST_CATALOG, s_catalog_lists [self->catalog_step].method,
                   json_pack ("{s:O}", "cursor", cursor));
        return;
    }
    self->catalog_step++;
    while (s_catalog_lists [self->catalog_step].method
       && !json_object_get (self->capabilities, s_catalog_lists [self->catalog_step].capability))
        self->catalog_step++;
    if (s_catalog_lists [self->catalog_step].method) {
        self->catalog_pages = 0;
        s_request (self, REQUEST_CATALOG, s_catalog_lists [self->catalog_step].method, json_object ());
        return;
    }
    s_catalog_apply (self);
    json_decref (self->catalog);
    self->catalog = NULL;
    if (self->catalog_relist) {
        self->catalog_relist = false;
        self->catalog = json_object ();
        self->catalog_step = (size_t) -1;
        s_catalog_next (self, NULL);
    }
}

//  Lists the server's resources, templates and prompts (what it offers).
static void
s_catalog_start (self_t *self)
{
    if (self->catalog) {
        self->catalog_relist = true;
        return;
    }
    self->catalog = json_object ();
    self->catalog_step = (size_t) -1;   //  the first s_catalog_next goes to 0
    s_catalog_next (self, NULL);
}

static void
s_on_catalog (self_t *self, const json_t *message)
{
    if (!self->catalog)
        return;                 //  the server was lost and came back
    const char *list = s_catalog_lists [self->catalog_step].list;
    const json_t *result = json_object_get (message, "result");
    const json_t *items = json_object_get (result, list);
    if (!json_is_array (items)) {
        //  A server may offer a capability and not every list of it
        //  (resource templates): the list is empty, the rest still served
        zsys_warning ("%s: %s failed; serving no %s", self->name, s_catalog_lists [self->catalog_step].method,
                      list);
        s_catalog_next (self, NULL);
        return;
    }
    json_t *gathered = json_object_get (self->catalog, list);
    if (!gathered) {
        gathered = json_array ();
        json_object_set_new (self->catalog, list, gathered);
    }
    json_array_extend (gathered, (json_t *) items);
    const json_t *cursor = json_object_get (result, "nextCursor");
    s_catalog_next (self, json_is_string (cursor) && ++self->catalog_pages < MAX_LIST_PAGES? cursor: NULL);
}

//  Finishes a gateway call with the server's error as structuredContent.
static void
s_gateway_error (dsh_call_t *call, dsh_result_t *result, const json_t *error)
{
    const char *text = json_string_value (json_object_get (error, "message"));
    dsh_result_error (result, DSH_E_TOOL_FAILED, "%s", text? text: "the MCP server failed the request");
    json_t *structured = json_pack ("{s:O}", "error", error);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    if (dsh_json_to_msgpack (&pk, structured) == 0)
        dsh_result_structured (result, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    json_decref (structured);
    dsh_call_finish (call);
}

//  Answers a log poll with the messages after its cursor (maybe none).
static void
s_log_poll_answer (self_t *self, dsh_call_t *call, dsh_result_t *result, json_int_t after)
{
    //  A cursor from the future is from a bridge before ours: start over
    if (after > self->log_seq)
        after = 0;
    json_t *messages = json_array ();
    json_int_t missed = 0;
    size_t index;
    const json_t *message;
    json_array_foreach (self->log_ring, index, message) {
        json_int_t seq = json_integer_value (json_object_get (message, "seq"));
        if (index == 0 && seq > after + 1)
            missed = seq - after - 1;
        if (seq > after)
            json_array_append (messages, (json_t *) message);
    }
    json_t *answer = json_pack ("{s:o, s:I, s:I}", "messages", messages, "next", self->log_seq, "missed", missed);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    if (dsh_json_to_msgpack (&pk, answer) == 0) {
        dsh_result_text (result, "the log messages are the structuredContent");
        dsh_result_structured (result, sbuf.data, sbuf.size);
    }
    else
        dsh_result_error (result, DSH_E_TOOL_FAILED, "a log message nests too deep");
    msgpack_sbuffer_destroy (&sbuf);
    json_decref (answer);
    dsh_call_finish (call);
}

//  A log poll: answered now if there is news, else held until there is
//  or its wait ends (s_log_polls_answer).
static void
s_log_poll_start (self_t *self, dsh_call_t *call, dsh_result_t *result, const json_t *params)
{
    const json_t *after = json_object_get (params, "after");
    const json_t *wait = json_object_get (params, "waitMs");
    json_int_t cursor = json_is_integer (after) && json_integer_value (after) > 0? json_integer_value (after): 0;
    json_int_t wait_ms = json_is_integer (wait)? json_integer_value (wait): MAX_LOG_WAIT_MS;
    if (wait_ms > MAX_LOG_WAIT_MS)
        wait_ms = MAX_LOG_WAIT_MS;
    if (cursor == self->log_seq && wait_ms > 0) {
        s_request_t *request = (s_request_t *) zmalloc (sizeof (s_request_t));
        assert (request);
        request->kind = REQUEST_CALL;
        request->step = CALL_LOG_POLL;
        request->id = ++self->next_id;
        request->sent_at = zclock_mono ();
        request->call = call;
        request->result = result;
        request->log_after = cursor;
        request->log_due = request->sent_at + wait_ms;
        char key [32];
        snprintf (key, sizeof key, "%" JSON_INTEGER_FORMAT, request->id);
        zhashx_insert (self->requests, key, request);
    }
    else
        s_log_poll_answer (self, call, result, cursor);
}

//  Answers the held polls that have news (every one, if all), or whose
//  wait is over.
static void
s_log_polls_answer (self_t *self, bool all)
{
    int64_t now = zclock_mono ();
    zlistx_t *done = zlistx_new ();
    for (s_request_t *request = zhashx_first (self->requests); request; request = zhashx_next (self->requests))
        if (request->kind == REQUEST_CALL && request->step == CALL_LOG_POLL && (all || now >= request->log_due))
            zlistx_add_end (done, request);
    for (s_request_t *request = zlistx_first (done); request; request = zlistx_next (done)) {
        s_log_poll_answer (self, request->call, request->result, request->log_after);
        s_request_forget (self, request);
    }
    zlistx_destroy (&done);
}

//  A log message from the server: kept for the polls, and logged here.
static void
s_on_log_message (self_t *self, const json_t *params)
{
    char *text = json_dumps (json_object_get (params, "data"), JSON_COMPACT | JSON_ENCODE_ANY);
    const char *level = json_string_value (json_object_get (params, "level"));
    zsys_info ("%s: log %s: %s", self->name, level? level: "?", text? text: "");
    free (text);
    if (!json_is_object (params))
        return;
    json_array_append_new (self->log_ring, json_pack ("{s:I, s:O}", "seq", ++self->log_seq, "params", params));
    if (json_array_size (self->log_ring) > LOG_RING_SIZE)
        json_array_remove (self->log_ring, 0);
    s_log_polls_answer (self, true);
}

//  A call to the gateway tool: forward {method, params} to the server.
static void
s_gateway_start (self_t *self, dsh_call_t *call, dsh_result_t *result)
{
    const msgpack_object *args = dsh_call_arguments (call);
    json_t *arguments = args? dsh_json_from_msgpack (args): json_object ();
    const char *method = json_string_value (json_object_get (arguments, "method"));
    const json_t *params = json_object_get (arguments, "params");
    const char *capability = dsh_mcp_gateway_capability (method);
    json_t *error = NULL;
    if (!method || (params && !json_is_object (params)))
        error = json_pack ("{s:i, s:s}", "code", DSH_JSONRPC_INVALID_PARAMS,
                           "message", "the gateway needs {method, params}");
    else
    if (!capability || !json_object_get (self->capabilities, capability))
        error = json_pack ("{s:i, s:s}", "code", DSH_JSONRPC_METHOD_NOT_FOUND, "message", "Method not found");
    if (error) {
        s_gateway_error (call, result, error);
        json_decref (error);
    }
    else
    if (streq (method, DSH_MCP_LOGS_POLL))
        s_log_poll_start (self, call, result, params);
    else {
        //  The server is told our span as its parent, in place of whatever
        //  context the MCP client put in these params
        dsh_mcp_trace_t trace;
        const char *prompt = streq (method, "prompts/get")? json_string_value (json_object_get (params, "name")): NULL;
        dsh_span_t *span = s_span_start (self, method, prompt, call, &trace);
        json_t *forwarded = params? json_deep_copy (params): json_object ();
        json_t *meta = json_object_get (forwarded, "_meta");
        if (trace.valid && !meta) {
            meta = json_object ();
            json_object_set_new (forwarded, "_meta", meta);
        }
        if (json_is_object (meta))
            dsh_mcp_trace_to_json (&trace, meta);
        dsh_mcp_trace_clear (&trace);
        s_request_t *request = s_request (self, REQUEST_CALL, method, forwarded);
        request->call = call;
        request->result = result;
        request->step = CALL_GATEWAY;
        request->span = span;
        s_span_request_id (request);
        if (self->verbose)
            zsys_info ("%s: call %s -> %s (id %" JSON_INTEGER_FORMAT ")", self->name, dsh_call_id (call),
                       method, request->id);
    }
    json_decref (arguments);
}

//  The server's answer to a forwarded request: its result whole, as
//  structuredContent, or its error.
static void
s_gateway_answered (self_t *self, s_request_t *request, const json_t *message)
{
    const json_t *error = json_object_get (message, "error");
    const json_t *answer = json_object_get (message, "result");
    if (json_is_object (error) || !json_is_object (answer)) {
        json_t *made = json_is_object (error)? NULL:
            json_pack ("{s:i, s:s}", "code", DSH_JSONRPC_INTERNAL_ERROR, "message", "the MCP server sent no result");
        if (made)
            dsh_mcp_span_fail (&request->span, DSH_E_TOOL_FAILED, "the MCP server sent no result");
        else
            dsh_mcp_span_end (&request->span, message, NULL);
        s_gateway_error (request->call, request->result, made? made: error);
        json_decref (made);
        return;
    }
    dsh_mcp_span_end (&request->span, message, NULL);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    if (dsh_json_to_msgpack (&pk, answer) == 0) {
        dsh_result_text (request->result, "the MCP server's result is the structuredContent");
        dsh_result_structured (request->result, sbuf.data, sbuf.size);
    }
    else
        dsh_result_error (request->result, DSH_E_TOOL_FAILED, "the MCP server \"%s\" sent a result nested too deep",
                          self->name);
    msgpack_sbuffer_destroy (&sbuf);
    dsh_call_finish (request->call);
}

//  A task-augmented tools/call was accepted: fetch its result, which the
//  server sends once the task ends (tasks/result blocks until then).
static void
s_task_created (self_t *self, s_request_t *request, const json_t *message)
{
    const json_t *task = json_object_get (json_object_get (message, "result"), "task");
    const char *task_id = json_string_value (json_object_get (task, "taskId"));
    if (!task_id || strlen (task_id) > MAX_TASK_ID_BYTES) {
        s_request_fail (request, DSH_E_TOOL_FAILED, "the MCP server did not create the task the tool requires");
        return;
    }
    s_request_t *fetch = s_request (self, REQUEST_CALL, "tasks/result", json_pack ("{s:s}", "taskId", task_id));
    fetch->call = request->call;
    fetch->result = request->result;
    fetch->step = CALL_TOOL;
    //  One span for the tool call, over both requests
    fetch->span = request->span;
    request->span = NULL;
    dsh_span_set_str (fetch->span, "dsh.mcp.task.id", task_id);
    snprintf (fetch->task_id, sizeof fetch->task_id, "%s", task_id);
    if (self->verbose)
        zsys_info ("%s: call %s runs as task %s", self->name, dsh_call_id (request->call), task_id);
}

//  A REQUEST_CALL's answer that is not (yet) the tool's result. Returns
//  true if it was handled here.
static bool
s_call_step (self_t *self, s_request_t *request, const json_t *message)
{
    if (request->step == CALL_GATEWAY)
        s_gateway_answered (self, request, message);
    else
    if (request->step == CALL_TASK_CREATE && json_object_get (message, "result")
    &&  json_object_get (json_object_get (message, "result"), "task"))
        s_task_created (self, request, message);
    else
        return false;
    return true;
}

//  A request from the server. roots/list gets the workspace; ping a
//  pong; sampling and elicitation were not offered.
static void
s_on_server_request (self_t *self, const char *method, const json_t *id)
{
    if (streq (method, "ping"))
        s_send (self, dsh_jsonrpc_result (id, json_object ()));
    else
    if (streq (method, "roots/list"))
        s_send (self, dsh_jsonrpc_result (id, dsh_mcp_gateway_roots (self->roots)));
    else
        s_send (self, dsh_jsonrpc_error (id, DSH_JSONRPC_METHOD_NOT_FOUND, "Method not found"));
}

//  ---------------------------------------------------------------------
//  The server process

//  Starts the server process with its stdio on pipes. Returns 0, or -1
//  (logged, restart planned).
static int
s_spawn (self_t *self)
{
    int in [2] = { -1, -1 }, out [2] = { -1, -1 }, err [2] = { -1, -1 };
    if (pipe2 (in, O_CLOEXEC) || pipe2 (out, O_CLOEXEC) || pipe2 (err, O_CLOEXEC)) {
        zsys_error ("%s: cannot make pipes: %s", self->name, strerror (errno));
        for (int index = 0; index < 2; index++) {
            if (in [index] >= 0) close (in [index]);
            if (out [index] >= 0) close (out [index]);
            if (err [index] >= 0) close (err [index]);
        }
        self->restart_at = zclock_mono () + self->backoff_ms;
        return -1;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init (&actions);
    posix_spawn_file_actions_adddup2 (&actions, in [0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2 (&actions, out [1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2 (&actions, err [1], STDERR_FILENO);
    posix_spawnattr_t attributes;
    posix_spawnattr_init (&attributes);
    //  Its own process group, so a wrapper (npx, a shell) goes with it;
    //  default signal handling, whatever czmq set up here
    sigset_t defaults;
    sigemptyset (&defaults);
    sigaddset (&defaults, SIGPIPE);
    sigaddset (&defaults, SIGINT);
    sigaddset (&defaults, SIGTERM);
    posix_spawnattr_setsigdefault (&attributes, &defaults);
    posix_spawnattr_setpgroup (&attributes, 0);
    posix_spawnattr_setflags (&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawnp (&self->pid, self->command [0], &actions, &attributes, self->command, environ);
    posix_spawn_file_actions_destroy (&actions);
    posix_spawnattr_destroy (&attributes);
    close (in [0]);
    close (out [1]);
    close (err [1]);
    if (rc != 0) {
        zsys_error ("%s: cannot start %s: %s", self->name, self->command [0], strerror (rc));
        close (in [1]);
        close (out [0]);
        close (err [0]);
        self->pid = 0;
        self->restart_at = zclock_mono () + self->backoff_ms;
        self->backoff_ms = self->backoff_ms * 2 > BACKOFF_MAX_MS? BACKOFF_MAX_MS: self->backoff_ms * 2;
        return -1;
    }
    self->stdin_fd = in [1];
    self->stdout_fd = out [0];
    self->stderr_fd = err [0];
    zsys_info ("%s: started %s (pid %d)", self->name, self->command [0], (int) self->pid);
    return 0;
}

//  Opens a Streamable HTTP session to --url. Returns 0, or -1 (logged,
//  restart planned).
static int
s_connect (self_t *self)
{
    self->httpc = dsh_mcp_httpc_new (self->url, self->headers, MAX_LINE_BYTES,
                                     &self->stdin_fd, &self->stdout_fd, &self->stderr_fd);
    if (!self->httpc) {
        self->restart_at = zclock_mono () + self->backoff_ms;
        self->backoff_ms = self->backoff_ms * 2 > BACKOFF_MAX_MS? BACKOFF_MAX_MS: self->backoff_ms * 2;
        return -1;
    }
    zsys_info ("%s: started a session with %s", self->name, self->url);
    return 0;
}

static void
s_server_start (self_t *self)
{
    if (self->url? s_connect (self): s_spawn (self))
        return;
    fcntl (self->stdin_fd, F_SETFL, O_NONBLOCK);
    fcntl (self->stdout_fd, F_SETFL, O_NONBLOCK);
    fcntl (self->stderr_fd, F_SETFL, O_NONBLOCK);
    self->rpc = dsh_jsonrpc_new (self->stdout_fd, self->stdin_fd, MAX_LINE_BYTES);
    self->log_lines = dsh_jsonrpc_new (self->stderr_fd, -1, MAX_LOG_LINE_BYTES);
    self->state = SERVER_STARTING;
    s_request (self, REQUEST_INITIALIZE, "initialize", s_initialize_params (self));
}

static bool
s_process_gone (pid_t pid, int wait_ms)
{
    int64_t give_up = zclock_mono () + wait_ms;
    while (true) {
        pid_t done = waitpid (pid, NULL, WNOHANG);
        if (done == pid || (done < 0 && errno == ECHILD))
            return true;
        if (zclock_mono () >= give_up)
            return false;
        zclock_sleep (10);
    }
}

//  Ends the process: EOF on its stdin first (the MCP way to ask a stdio
//  server to stop), then SIGTERM, then SIGKILL. A session ends with its
//  DELETE.
static void
s_server_stop (self_t *self, int grace_ms)
{
    dsh_jsonrpc_destroy (&self->rpc);
    dsh_jsonrpc_destroy (&self->log_lines);
    if (self->stdin_fd >= 0)
        close (self->stdin_fd);
    dsh_mcp_httpc_destroy (&self->httpc);
    if (self->pid > 0 && !s_process_gone (self->pid, grace_ms)) {
        kill (-self->pid, SIGTERM);
        if (!s_process_gone (self->pid, 500)) {
            kill (-self->pid, SIGKILL);
            waitpid (self->pid, NULL, 0);
        }
    }
    if (self->stdout_fd >= 0)
        close (self->stdout_fd);
    if (self->stderr_fd >= 0)
        close (self->stderr_fd);
    self->stdin_fd = self->stdout_fd = self->stderr_fd = -1;
    self->pid = 0;
}

//  Answers every call the loop holds (in flight or queued) with error code.
//  A deferred call must be finished while its provider lives, so before
//  a provider goes the inbox is closed (closing true) and emptied here.
static void
s_fail_calls (self_t *self, const char *code, const char *message, bool closing)
{
    s_request_t *request = zhashx_first (self->requests);
    while (request) {
        if (request->kind == REQUEST_CALL)
            s_request_fail (request, code, message);
        free (request);
        request = zhashx_next (self->requests);
    }
    zhashx_purge (self->requests);
    zlistx_t *jobs = s_inbox_take (&self->inbox, closing);
    for (s_job_t *job = zlistx_first (jobs); job; job = zlistx_next (jobs)) {
        s_finish_error (job->call, job->result, code, message);
        free (job);
    }
    zlistx_destroy (&jobs);
}

//  The server is gone or useless: withdraw its tools, end it, and plan
//  the next start.
static void
s_server_lost (self_t *self, const char *reason)
{
    zsys_warning ("%s: the MCP server %s; withdrawing its tools", self->name, reason);
    char *message = zsys_sprintf ("the MCP server \"%s\" %s", self->name, reason);
    s_fail_calls (self, DSH_E_TOOL_GONE, message, true);
    zstr_free (&message);
    dsh_provider_destroy (&self->provider);
    //  Nothing is queued now; this reopens the inbox for the next provider
    s_fail_calls (self, DSH_E_TOOL_GONE, "the MCP server is restarting", false);
    zhashx_purge (self->tools);
    zstr_free (&self->gateway_entry);   //  went with the provider
    json_decref (self->catalog);
    self->catalog = NULL;
    self->catalog_relist = false;
    json_decref (self->listing);
    self->listing = NULL;
    self->relist = false;
    s_server_stop (self, 200);
    int64_t now = zclock_mono ();
    if (self->state == SERVER_READY && now - self->ready_since >= STABLE_UPTIME_MS)
        self->backoff_ms = BACKOFF_MIN_MS;
    self->state = SERVER_DOWN;
    self->restart_at = now + self->backoff_ms;
    zsys_info ("%s: restarting in %d ms", self->name, self->backoff_ms);
    self->backoff_ms = self->backoff_ms * 2 > BACKOFF_MAX_MS? BACKOFF_MAX_MS: self->backoff_ms * 2;
}

//  ---------------------------------------------------------------------
//  Calls

static void
s_call_start (self_t *self, dsh_call_t *call, dsh_result_t *result)
{
    if (self->gateway_entry && streq (dsh_call_name (call), self->gateway_name)) {
        s_gateway_start (self, call, result);
        return;
    }
    s_tool_t *tool = self->state == SERVER_READY? zhashx_lookup (self->tools, dsh_call_name (call)): NULL;
    if (!tool) {
        char *message = zsys_sprintf ("unknown tool \"%s\"", dsh_call_name (call));
        s_finish_error (call, result, DSH_E_UNKNOWN_TOOL, message);
        zstr_free (&message);
        return;
    }
    const msgpack_object *args = dsh_call_arguments (call);
    json_t *arguments = args? dsh_json_from_msgpack (args): json_object ();
    if (!arguments) {
        s_finish_error (call, result, DSH_E_INVALID_ARGS, "invalid arguments: not expressible in JSON");
        return;
    }
    json_t *params = json_pack ("{s:s, s:o}", "name", tool->mcp_name, "arguments", arguments);
    //  The progress token is the request id: one lookup serves both
    json_int_t token = self->next_id + 1;
    json_t *meta = json_pack ("{s:I}", "progressToken", token);
    //  The trace context goes on with our span as the parent
    dsh_mcp_trace_t trace;
    dsh_span_t *span = s_span_start (self, "tools/call", tool->mcp_name, call, &trace);
    dsh_mcp_trace_to_json (&trace, meta);
    dsh_mcp_trace_clear (&trace);
    json_object_set_new (params, "_meta", meta);
    if (tool->task_required)
        json_object_set_new (params, "task", json_object ());
    s_request_t *request = s_request (self, REQUEST_CALL, "tools/call", params);
    request->call = call;
    request->result = result;
    request->step = tool->task_required? CALL_TASK_CREATE: CALL_TOOL;
    request->span = span;
    s_span_request_id (request);
    if (self->verbose)
        zsys_info ("%s: call %s -> tools/call %s (id %" JSON_INTEGER_FORMAT ")", self->name,
                   dsh_call_id (call), tool->mcp_name, request->id);
}

static void
s_call_answered (self_t *self, s_request_t *request, const json_t *message)
{
    const json_t *error = json_object_get (message, "error");
    const json_t *call_result = json_object_get (message, "result");
    if (error) {
        //  The server's error, exactly: code, message and data go on in
        //  the dsh error (error.mcp) for dsh-mcp to answer with
        dsh_mcp_span_end (&request->span, message, NULL);
        dsh_mcp_content_from_error (error, request->result);
        if (dsh_mcp_content_unknown_tool ((int) json_integer_value (json_object_get (error, "code")),
                                          json_string_value (json_object_get (error, "message")))
        &&  self->state == SERVER_READY)
            s_list_start (self);
    }
    else {
        char reason [256] = "";
        if (dsh_mcp_content_to_result (call_result, request->result, reason, sizeof reason)) {
            dsh_result_error (request->result, DSH_E_TOOL_FAILED,
                              "the MCP server \"%s\" sent a malformed result: %s", self->name, reason);
            dsh_mcp_span_fail (&request->span, DSH_E_TOOL_FAILED, reason);
        }
        else
            dsh_mcp_span_end (&request->span, message, NULL);
    }
    dsh_call_finish (request->call);
}

//  Calls whose caller gave up: tell the server, and finish them (the
//  broker has answered them already and drops what we send).
static void
s_calls_check_cancelled (self_t *self)
{
    zlistx_t *cancelled = zlistx_new ();
    for (s_request_t *request = zhashx_first (self->requests); request;
         request = zhashx_next (self->requests))
        if (request->kind == REQUEST_CALL && dsh_call_cancelled (request->call))
            zlistx_add_end (cancelled, request);
    for (s_request_t *request = zlistx_first (cancelled); request; request = zlistx_next (cancelled)) {
        json_t *params = json_pack ("{s:I, s:s}", "requestId", request->id,
                                    "reason", "the dsh caller cancelled the call");
        if (request->step == CALL_LOG_POLL)
            json_decref (params);           //  held here: the server never saw it
        else
            s_send (self, dsh_jsonrpc_notification ("notifications/cancelled", params));
        if (*request->task_id)
            s_request (self, REQUEST_IGNORED, "tasks/cancel", json_pack ("{s:s}", "taskId", request->task_id));
        if (self->verbose)
            zsys_info ("%s: call %s cancelled", self->name, dsh_call_id (request->call));
        s_request_fail (request, DSH_E_CANCELLED, "the call was cancelled");
        s_request_forget (self, request);
    }
    zlistx_destroy (&cancelled);
}

//  ---------------------------------------------------------------------
//  Messages from the server

static void
s_on_initialize (self_t *self, const json_t *message)
{
    const json_t *result = json_object_get (message, "result");
    const char *version = json_string_value (json_object_get (result, "protocolVersion"));
    bool known = false;
    for (size_t index = 0; version && s_versions [index]; index++)
        known |= streq (version, s_versions [index]);
    if (!known) {
        char *reason = zsys_sprintf ("refused the handshake (%s)",
                                     version? version: "no protocolVersion in its answer");
        s_server_lost (self, reason);
        zstr_free (&reason);
        return;
    }
    const char *server = json_string_value (json_object_get (json_object_get (result, "serverInfo"), "name"));
    zsys_info ("%s: MCP %s, server %s", self->name, version, server? server: "(unnamed)");
    snprintf (self->version, sizeof self->version, "%s", version);
    json_decref (self->capabilities);
    self->capabilities = json_deep_copy (json_object_get (result, "capabilities"));
    s_send (self, dsh_jsonrpc_notification ("notifications/initialized", NULL));
    s_list_start (self);
}

static void
s_on_list (self_t *self, const json_t *message)
{
    const json_t *result = json_object_get (message, "result");
    const json_t *tools = json_object_get (result, "tools");
    if (!json_is_array (tools)) {
        s_server_lost (self, "did not answer tools/list");
        return;
    }
    json_array_extend (self->listing, (json_t *) tools);
    const json_t *cursor = json_object_get (result, "nextCursor");
    if (json_is_string (cursor) && ++self->listing_pages < MAX_LIST_PAGES) {
        s_request (self, REQUEST_LIST, "tools/list", json_pack ("{s:O}", "cursor", cursor));
        return;
    }
    s_apply_listing (self, self->listing);
    json_decref (self->listing);
    self->listing = NULL;
    if (self->state == SERVER_STARTING) {
        self->state = SERVER_READY;
        self->ready_since = zclock_mono ();
        self->next_ping_at = self->ready_since + self->ping_ms;
        self->report_due = true;
        s_catalog_start (self);
    }
    if (self->relist) {
        self->relist = false;
        s_list_start (self);
    }
}

static void
s_on_progress (self_t *self, const json_t *params)
{
    const json_t *token = json_object_get (params, "progressToken");
    if (!json_is_integer (token))
        return;
    char key [32];
    snprintf (key, sizeof key, "%" JSON_INTEGER_FORMAT, json_integer_value (token));
    s_request_t *request = zhashx_lookup (self->requests, key);
    const json_t *progress = json_object_get (params, "progress");
    if (!request || request->kind != REQUEST_CALL || !json_is_number (progress))
        return;
    const json_t *total = json_object_get (params, "total");
    dsh_call_progress (request->call, json_number_value (progress),
                       json_is_number (total)? json_number_value (total): -1,
                       json_string_value (json_object_get (params, "message")));
}

static void
s_on_message (self_t *self, const json_t *message)
{
    const char *method = json_string_value (json_object_get (message, "method"));
    const json_t *id = json_object_get (message, "id");
    const json_t *params = json_object_get (message, "params");
    if (method && id)
        s_on_server_request (self, method, id);
    else
    if (method) {
        if (streq (method, "notifications/tools/list_changed")) {
            if (self->state == SERVER_READY)
                s_list_start (self);
        }
        else
        if (streq (method, "notifications/resources/list_changed")
        ||  streq (method, "notifications/prompts/list_changed")) {
            if (self->state == SERVER_READY)
                s_catalog_start (self);
        }
        else
        if (streq (method, "notifications/progress"))
            s_on_progress (self, params);
        else
        if (streq (method, "notifications/message"))
            s_on_log_message (self, params);
    }
    else
    if (json_is_integer (id)) {
        char key [32];
        snprintf (key, sizeof key, "%" JSON_INTEGER_FORMAT, json_integer_value (id));
        s_request_t *request = zhashx_lookup (self->requests, key);
        if (!request)
            return;             //  answered after we gave up on it
        zhashx_delete (self->requests, key);
        switch (request->kind) {
            case REQUEST_INITIALIZE: s_on_initialize (self, message); break;
            case REQUEST_LIST:       s_on_list (self, message); break;
            case REQUEST_CALL:
                if (!s_call_step (self, request, message))
                    s_call_answered (self, request, message);
                break;
            case REQUEST_CATALOG:    s_on_catalog (self, message); break;
            case REQUEST_PING:       break;
            case REQUEST_IGNORED:    break;
        }
        free (request);
    }
}

//  A line that is not JSON-RPC: if it answers a call (its id can be
//  read), that call fails now rather than at its deadline.
static void
s_on_unreadable (self_t *self, const json_t *id, const char *reason)
{
    zsys_warning ("%s: ignoring a line on stdout: %s", self->name, reason);
    if (!json_is_integer (id))
        return;
    char key [32];
    snprintf (key, sizeof key, "%" JSON_INTEGER_FORMAT, json_integer_value (id));
    s_request_t *request = zhashx_lookup (self->requests, key);
    if (!request || request->kind != REQUEST_CALL)
        return;
    zhashx_delete (self->requests, key);
    dsh_mcp_span_fail (&request->span, DSH_E_TOOL_FAILED, "the MCP server sent an answer that is not JSON-RPC");
    dsh_result_error (request->result, DSH_E_TOOL_FAILED,
                      "the MCP server \"%s\" sent an answer that is not JSON-RPC: %s", self->name, reason);
    dsh_call_finish (request->call);
    free (request);
}

//  ---------------------------------------------------------------------
//  What the broker took

static void
s_report (self_t *self)
{
    printf ("dsh-mcp-bridge: %s: component %s serving %zu tools via %s\n", self->name,
            self->component_id, zhashx_size (self->tools), self->broker? self->broker: DSH_DEFAULT_ENDPOINT);
    fflush (stdout);
}

//  Tools the broker refused are not served (a call for one is answered
//  UNKNOWN_TOOL); the ready line counts only the rest, so it waits until
//  a broker has applied our ANNOUNCE. Its refusals came before it said
//  so: asked first, then the refusals taken, the line has them all.
static void
s_check_refusals (self_t *self, int64_t now)
{
    if (!self->provider || now < self->next_refusals_at)
        return;
    self->next_refusals_at = now + POLL_TICK_MS;
    bool applied = self->report_due && dsh_provider_wait_applied (self->provider, 0) == 0;
    size_t refused = 0;
    char *refusal;
    while ((refusal = dsh_provider_refusal (self->provider, 0))) {
        char *colon = strstr (refusal, ": ");
        if (colon) {
            *colon = 0;
            if (zhashx_lookup (self->tools, refusal)) {
                zhashx_delete (self->tools, refusal);
                refused++;
            }
        }
        zstr_free (&refusal);
    }
    if (applied) {
        self->report_due = false;
        s_report (self);
    }
    else
    if (refused && !self->report_due)
        s_report (self);
}

//  ---------------------------------------------------------------------
//  The loop

//  True if a request other than a call waited longer than it may: the
//  server hangs.
static bool
s_server_hangs (self_t *self, int64_t now)
{
    for (s_request_t *request = zhashx_first (self->requests); request;
         request = zhashx_next (self->requests)) {
        int limit = request->kind == REQUEST_INITIALIZE? INITIALIZE_TIMEOUT_MS: self->ping_ms;
        if (request->kind != REQUEST_CALL && now - request->sent_at > limit)
            return true;
    }
    return false;
}

static void
s_read_server (self_t *self, short revents_out, short revents_err)
{
    if (revents_err && self->log_lines) {
        int rc = dsh_jsonrpc_read (self->log_lines);
        char *line;
        while ((line = dsh_jsonrpc_line (self->log_lines))) {
            zsys_info ("%s: %s", self->name, line);
            zstr_free (&line);
        }
        if (rc) {
            dsh_jsonrpc_destroy (&self->log_lines);
            close (self->stderr_fd);
            self->stderr_fd = -1;
        }
    }
    if (revents_out && self->rpc) {
        int rc = dsh_jsonrpc_read (self->rpc);
        json_t *input;
        json_t *id;
        bool bad;
        char reason [256];
        while (self->rpc && ((input = dsh_jsonrpc_recv (self->rpc, &bad, &id, reason, sizeof reason)) || bad)) {
            if (json_is_array (input)) {
                size_t index;
                json_t *message;
                json_array_foreach (input, index, message)
                    if (self->rpc && json_is_object (message))
                        s_on_message (self, message);
            }
            else
            if (input)
                s_on_message (self, input);
            else
                s_on_unreadable (self, id, reason);
            json_decref (input);
            json_decref (id);
        }
        if (rc && self->rpc)
            s_server_lost (self, self->url? "session ended": "exited");
    }
}

static int
s_run (self_t *self)
{
    self->restart_at = zclock_mono ();
    int64_t next_tick = 0;
    while (!zsys_interrupted) {
        int64_t now = zclock_mono ();
        if (self->state == SERVER_DOWN && now >= self->restart_at)
            s_server_start (self);
        //  What looks at every call in flight runs on a tick, not per
        //  message: a busy bridge does not scan its calls per answer
        bool tick = now >= next_tick;
        if (tick) {
            next_tick = now + POLL_TICK_MS;
            if (self->state != SERVER_DOWN && s_server_hangs (self, now)) {
                char *reason = zsys_sprintf ("did not answer within %d ms", self->ping_ms);
                s_server_lost (self, reason);
                zstr_free (&reason);
            }
        }
        if (self->state == SERVER_READY)
            s_check_refusals (self, now);
        if (self->state == SERVER_READY && now >= self->next_ping_at) {
            s_request (self, REQUEST_PING, "ping", NULL);
            self->next_ping_at = now + self->ping_ms;
        }
        //  This turn's messages to the server, in as few writes as it takes
        if (self->rpc && dsh_jsonrpc_backlog (self->rpc) && dsh_jsonrpc_flush (self->rpc))
            s_server_lost (self, "closed its stdin");

        //  Cancelled calls are found on the tick too (dsh_call_cancelled),
        //  so the poll set stays four fds whatever is in flight
        struct pollfd fds [4] = {
            { .fd = self->inbox.wake_read, .events = POLLIN },
            { .fd = self->rpc? self->stdout_fd: -1, .events = POLLIN },
            { .fd = self->log_lines? self->stderr_fd: -1, .events = POLLIN },
            { .fd = self->rpc && dsh_jsonrpc_backlog (self->rpc)? self->stdin_fd: -1, .events = POLLOUT }
        };
        int timeout = (int) (next_tick - now);
        if (poll (fds, 4, timeout < 0? 0: timeout) < 0)
            continue;           //  EINTR: the loop checks zsys_interrupted
        if (fds [3].revents && self->rpc && dsh_jsonrpc_flush (self->rpc))
            s_server_lost (self, "closed its stdin");
        s_read_server (self, fds [1].revents, fds [2].revents);
        if (fds [0].revents) {
            zlistx_t *jobs = s_inbox_take (&self->inbox, false);
            for (s_job_t *job = zlistx_first (jobs); job; job = zlistx_next (jobs)) {
                s_call_start (self, job->call, job->result);
                free (job);
            }
            zlistx_destroy (&jobs);
        }
        if (zclock_mono () >= next_tick) {
            s_calls_check_cancelled (self);
            s_log_polls_answer (self, false);
        }
        if (self->rpc && dsh_jsonrpc_backlog (self->rpc) && dsh_jsonrpc_flush (self->rpc))
            s_server_lost (self, "closed its stdin");
    }
    zsys_info ("%s: stopping", self->name);
    s_fail_calls (self, DSH_E_TOOL_GONE, "the MCP bridge is stopping", true);
    dsh_provider_destroy (&self->provider);
    s_server_stop (self, 1000);
    return 0;
}

//  ---------------------------------------------------------------------
//  Start and options

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-mcp-bridge [options] -- COMMAND [ARGS...]\n"
        "       dsh-mcp-bridge [options] --url URL\n"
        "Start an MCP server on stdio, or reach one over Streamable HTTP at URL, and serve\n"
        "its tools to a dsh broker.\n"
        "  --broker ENDPOINT[,ENDPOINT...]\n"
        "                     the broker's front endpoint, or a list of brokers, each served\n"
        "                     (default: $DSH_BROKER, else %s)\n"
        "  --name NAME        the server's name in logs (default: the command's basename,\n"
        "                     or the URL's host)\n"
        "  --prefix P         prefix every tool name with P (e.g. \"everything__\")\n"
        "  --id ID            the component id (default: mcp-NAME)\n"
        "  --untrusted        do not pass on hints that loosen policies (readOnlyHint true,\n"
        "                     destructiveHint false), and mark no tool concurrency-safe\n"
        "  --root DIR         offer DIR to the server as a root (roots/list), repeatable;\n"
        "                     without it the bridge offers no roots, and the server keeps\n"
        "                     the directories it was started with\n"
        "  --confined         declare every tool confined: the server can reach nothing outside\n"
        "                     the sandbox workspace (its roots), so the sandbox stage lets its\n"
        "                     tools write without a human's approval\n"
        "  --concurrency N    calls the server may have in flight at once, what the broker\n"
        "                     is told it may send (default %d)\n"
        "  --ping-ms N        ping the server every N ms; no answer within N ms = hung\n"
        "                     (default 5000)\n"
        "  --url URL          an MCP server on Streamable HTTP (http or https), instead of\n"
        "                     a command\n"
        "  --header \"NAME: VALUE\"\n"
        "                     with --url: send this header on every request (repeatable)\n"
        "  --bearer-token-file FILE\n"
        "                     with --url: send \"Authorization: Bearer TOKEN\", TOKEN being\n"
        "                     FILE's content without surrounding white space\n"
        "  --cert FILE        our CURVE keypair (default: $DSH_CERT)\n"
        "  --broker-cert FILE the broker's public certificate (default: $DSH_BROKER_CERT)\n"
        "  -v, --verbose      log every call\n"
        "  -h, --help         show this help\n"
        "Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT set (and the other OTEL_* variables),\n"
        "each call is an MCP client span, whose context the server gets in _meta.\n",
        DSH_DEFAULT_ENDPOINT, DEFAULT_CONCURRENCY);
}

//  0 if header is "NAME: VALUE" on one line, else -1.
static int
s_header_check (const char *header)
{
    const char *colon = strchr (header, ':');
    if (!colon || colon == header || strpbrk (header, "\r\n"))
        return -1;
    for (const char *cursor = header; cursor < colon; cursor++)
        if ((unsigned char) *cursor <= 0x20 || (unsigned char) *cursor >= 0x7f)
            return -1;
    return 0;
}

//  Writes "Authorization: Bearer TOKEN" into header (MAX_TOKEN_BYTES + 32
//  bytes) from a file holding TOKEN. Returns 0, or -1 if the file cannot
//  be read or holds no single token.
static int
s_bearer_header (const char *path, char *header)
{
    FILE *file = fopen (path, "r");
    if (!file)
        return -1;
    char token [MAX_TOKEN_BYTES + 2];
    size_t size = fread (token, 1, MAX_TOKEN_BYTES + 1, file);
    fclose (file);
    while (size > 0 && isspace ((unsigned char) token [size - 1]))
        size--;
    token [size] = 0;
    char *start = token;
    while (isspace ((unsigned char) *start))
        start++;
    bool visible = *start && size <= MAX_TOKEN_BYTES;
    for (const char *cursor = start; visible && *cursor; cursor++)
        visible = (unsigned char) *cursor > 0x20 && (unsigned char) *cursor < 0x7f;
    if (!visible)
        return -1;
    snprintf (header, MAX_TOKEN_BYTES + 32, "Authorization: Bearer %s", start);
    return 0;
}

//  What main learns from the command line besides self's fields.
typedef struct {
    self_t *self;
    dsh_mcp_options_t *options;
    const char *id;             //  --id
    size_t root_count;
    const char *token_file;     //  --bearer-token-file
    const char **header_args;   //  --header values, for --url
    int header_count;
} s_start_t;

//  One of dsh-mcp-bridge's own options (dsh_mcp_options_parse has the
//  shared ones).
static int
s_option (int option, const char *value, void *arg)
{
    s_start_t *start = (s_start_t *) arg;
    self_t *self = start->self;
    long number;
    switch (option) {
        case 'n': self->name = value; break;
        case 'p': self->prefix = value; break;
        case 'i': start->id = value; break;
        case 'u': self->untrusted = true; break;
        case 'c': self->confined = true; break;
        case 'U': self->url = value; break;
        case 'T': start->token_file = value; break;
        case 'N':
            if (dsh_mcp_options_number (start->options, "--concurrency", value, 1, 65536, &number))
                return DSH_MCP_EXIT_USAGE;
            self->concurrency = (size_t) number;
            break;
        case 'H':
            if (s_header_check (value))
                return dsh_mcp_options_bad_usage (start->options,
                                                  "--header needs \"NAME: VALUE\" on one line, not \"%s\"", value);
            start->header_args [start->header_count++] = value;
            break;
        case 'R':
            if (start->root_count == MAX_ROOTS)
                return dsh_mcp_options_bad_usage (start->options, "at most %d --root options", MAX_ROOTS);
            self->roots [start->root_count++] = value;
            break;
        case 'P':
            if (dsh_mcp_options_number (start->options, "--ping-ms", value, 10, 3600000, &number))
                return DSH_MCP_EXIT_USAGE;
            self->ping_ms = (int) number;
            break;
    }
    return 0;
}

int
main (int argc, char *argv [])
{
    static const struct option own [] = {
        { "name", required_argument, NULL, 'n' },
        { "prefix", required_argument, NULL, 'p' },
        { "id", required_argument, NULL, 'i' },
        { "untrusted", no_argument, NULL, 'u' },
        { "confined", no_argument, NULL, 'c' },
        { "concurrency", required_argument, NULL, 'N' },
        { "ping-ms", required_argument, NULL, 'P' },
        { "root", required_argument, NULL, 'R' },
        { "url", required_argument, NULL, 'U' },
        { "header", required_argument, NULL, 'H' },
        { "bearer-token-file", required_argument, NULL, 'T' },
        { NULL, 0, NULL, 0 }
    };
    self_t self = { .prefix = "", .ping_ms = 5000, .concurrency = DEFAULT_CONCURRENCY, .backoff_ms = BACKOFF_MIN_MS,
                    .stdin_fd = -1, .stdout_fd = -1, .stderr_fd = -1 };
    dsh_mcp_options_t options = { .program = "dsh-mcp-bridge" };
    //  --url: the --header values, and the bearer header if any
    const char *header_args [argc];
    s_start_t start = { .self = &self, .options = &options, .header_args = header_args };
    char bearer [MAX_TOKEN_BYTES + 32] = "";
    //  Stop at the first non-option, so COMMAND's own options stay its
    int exit_code = dsh_mcp_options_parse (&options, argc, argv, own, true, s_option, s_usage, &start);
    if (exit_code >= 0)
        return exit_code;
    self.verbose = options.verbose;
    const char *id = start.id, *token_file = start.token_file;
    int header_count = start.header_count;
    if (optind >= argc && !self.url)
        return dsh_mcp_options_bad_usage (&options, "no MCP server command or --url given");
    if (optind < argc && self.url)
        return dsh_mcp_options_bad_usage (&options, "give an MCP server command or --url, not both");
    if (!self.url && (header_count || token_file))
        return dsh_mcp_options_bad_usage (&options, "--header and --bearer-token-file need --url");
    char host [256] = "";
    if (self.url) {
        char *url_host = dsh_mcp_httpc_host (self.url);
        if (!url_host)
            return dsh_mcp_options_bad_usage (&options, "--url needs an http or https URL, not \"%s\"", self.url);
        snprintf (host, sizeof host, "%s", url_host);
        free (url_host);
    }
    if (token_file && s_bearer_header (token_file, bearer))
        return dsh_mcp_options_bad_usage (&options, "--bearer-token-file %s: not a readable file holding one token",
                                          token_file);
    self.command = self.url? NULL: argv + optind;
    if (!self.name && self.url)
        self.name = host;
    if (!self.name) {
        const char *slash = strrchr (self.command [0], '/');
        self.name = slash? slash + 1: self.command [0];
    }
    char *probe = zsys_sprintf ("%sx", self.prefix);
    bool prefix_ok = dsh_proto_valid_name (probe, strlen (probe));
    zstr_free (&probe);
    if (!prefix_ok)
        return dsh_mcp_options_bad_usage (&options, "prefix \"%s\" makes invalid tool names", self.prefix);
    self.component_id = id? strdup (id): zsys_sprintf ("mcp-%s", self.name);
    for (char *cursor = self.component_id; *cursor; cursor++)
        if (*cursor < 0x21 || *cursor > 0x7e)
            *cursor = '_';
    if (strlen (self.component_id) > DSH_ID_MAX)
        self.component_id [DSH_ID_MAX] = 0;
    if (id && strneq (id, self.component_id)) {
        zstr_free (&self.component_id);
        return dsh_mcp_options_bad_usage (&options, "invalid component id \"%s\"", id);
    }
    exit_code = dsh_mcp_options_finish (&options);
    if (exit_code) {
        zstr_free (&self.component_id);
        return exit_code;
    }
    self.broker = options.broker;

    zsys_init ();
    //  stdout carries only the ready lines, for whoever launched us
    zsys_set_logstream (dsh_log_stream (stderr));
    //  A server that dies while we write to it must not take us with it
    signal (SIGPIPE, SIG_IGN);
    int wake [2];
    if (pipe2 (wake, O_CLOEXEC | O_NONBLOCK)) {
        fprintf (stderr, "dsh-mcp-bridge: cannot make a pipe: %s\n", strerror (errno));
        zstr_free (&self.component_id);
        return 1;
    }
    self.gateway_name = s_dsh_name (DSH_MCP_GATEWAY_PREFIX, self.component_id);
    pthread_mutex_init (&self.inbox.mutex, NULL);
    self.inbox.jobs = zlistx_new ();
    self.inbox.wake_read = wake [0];
    self.inbox.wake_write = wake [1];
    self.requests = zhashx_new ();
    self.log_ring = json_array ();
    self.tools = zhashx_new ();
    zhashx_set_destructor (self.tools, s_tool_destroy);
    self.headers = zlistx_new ();
    for (int index = 0; index < header_count; index++)
        zlistx_add_end (self.headers, (void *) header_args [index]);
    if (*bearer)
        zlistx_add_end (self.headers, bearer);

    //  Spans go out over OTLP when the standard variables say where; a bad
    //  value leaves tracing off and says why
    char trace_error [256];
    if (dsh_trace_start ("dsh-mcp-bridge", trace_error, sizeof trace_error))
        zsys_warning ("dsh-mcp-bridge: tracing is off: %s", trace_error);

    int status = s_run (&self);
    dsh_trace_stop (2000);

    zhashx_destroy (&self.tools);
    zhashx_destroy (&self.requests);
    json_decref (self.listing);
    json_decref (self.catalog);
    json_decref (self.capabilities);
    json_decref (self.log_ring);
    zstr_free (&self.gateway_entry);
    zstr_free (&self.gateway_name);
    zlistx_destroy (&self.inbox.jobs);
    pthread_mutex_destroy (&self.inbox.mutex);
    close (wake [0]);
    close (wake [1]);
    zstr_free (&self.component_id);
    zlistx_destroy (&self.headers);
    return status;
}
