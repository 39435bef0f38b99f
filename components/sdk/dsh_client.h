/*  =========================================================================
    dsh_client - call tools and query the registry through a broker

    One DEALER to the broker's front, so many calls can be in flight at
    once: send them with dsh_client_call_send and collect replies with
    dsh_client_recv, or use the blocking helpers (list, get, snapshot,
    ping, call) which wait at most their timeout and keep any other reply
    that arrives meanwhile for dsh_client_recv. No call ever waits forever:
    no reply in time gives NULL and a reason.

    The client watches its broker while anything is awaited: after a
    heartbeat of silence it sends a PING; after the liveness window of
    silence (the broker's heartbeatMs x liveness, learnt from its PONG;
    1000 ms x 3 until then) the broker is gone. Each call in flight is then
    answered here with error BROKER_GONE, within the window, not at its
    deadline, and the connection is made afresh; so is each call when a
    PONG names another broker instance than the first did (the broker
    restarted on the same endpoint and lost them). A call sent with
    dsh_client_call_send and not answered by its timeout plus 5 s is
    answered TIMEOUT here. Given several brokers
    ("A,B"), the client uses one at a time and moves to the next when its
    broker is gone: a call in flight to a tool whose entry says it is
    read-only or idempotent is sent again there (until every broker has
    had it); any other is answered BROKER_GONE; a query is sent again.
    The watch runs inside dsh_client_recv and the blocking helpers, so a
    program polling dsh_client_sock itself calls dsh_client_recv at least
    once a heartbeat (a timeout of 0 is enough).
    =========================================================================
*/

#ifndef DSH_CLIENT_H_INCLUDED
#define DSH_CLIENT_H_INCLUDED

#include <czmq.h>
#include <jansson.h>
#include <msgpack.h>

#include "dsh_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_client_t dsh_client_t;
typedef struct _dsh_reply_t dsh_reply_t;

//  Connect to a broker's front, or to the first of a comma list of them
//  (NULL: $DSH_BROKER, else the default). NULL, with the reason logged, if
//  the list is malformed (see dsh_sock_brokers).
dsh_client_t *
    dsh_client_new (const char *broker);

//  Destroy; safe twice.
void
    dsh_client_destroy (dsh_client_t **self_p);

//  Why the broker cannot answer this client, if its handshake failed (the
//  key was refused, or only one side speaks CURVE), or NULL.
const char *
    dsh_client_handshake_failure (dsh_client_t *self);

//  True once a connection to the current broker has been made (its
//  handshake succeeded, or it was heard): until then nothing sent can have
//  reached it.
bool
    dsh_client_connected (dsh_client_t *self);

//  Writes into error, in one line, why nothing came from the broker within
//  wait_ms: the handshake's failure if the keys are why, else what became
//  of the connection if none was made (nothing listens there, no answer
//  to the handshake, the connection closed in it), else the silence.
void
    dsh_client_explain_silence (dsh_client_t *self, int wait_ms, char *error, size_t error_size);

//  The front endpoint in use (with several brokers: the current one).
const char *
    dsh_client_endpoint (dsh_client_t *self);

//  The socket, for a poller (readable when a reply is waiting; call
//  dsh_client_recv with timeout 0).
zsock_t *
    dsh_client_sock (dsh_client_t *self);

//  Send a CALL without waiting. args is msgpack (NULL = {}); agent and
//  meta (msgpack of a map) may be NULL; timeout_ms 0 = the broker's default.
//  call_id NULL: one is made up. Returns the callId (valid until the next
//  call_send), or NULL if the message could not be sent.
const char *
    dsh_client_call_send (dsh_client_t *self, const char *call_id, const char *name,
                          const void *args, size_t args_size, const char *agent,
                          const void *meta, size_t meta_size, int timeout_ms);

//  A CALL meta for dsh_client_call_send that carries ctx (PROTOCOL.md,
//  Trace context): the entries of meta (msgpack of a map; NULL: none) with
//  traceparent set to ctx's, and tracestate to ctx's if it has one (else
//  removed), so that the broker's span for the call is a child of ctx.
//  Returns the new map's msgpack (caller destroys), or NULL if meta is not
//  one msgpack map.
zchunk_t *
    dsh_client_trace_meta (const dsh_trace_ctx_t *ctx, const void *meta, size_t meta_size);

//  Cancel a call in flight by its callId: the broker answers it CANCELLED
//  (exactly one reply, even if the cancel races the result) and tells the
//  component. Returns 0, or -1 if the message could not be sent.
int
    dsh_client_cancel (dsh_client_t *self, const char *call_id);

//  The next reply of any kind, or NULL if none within timeout_ms. A call's
//  progress arrives as replies with command PROGRESS {callId, progress,
//  total?, message?} before its RESULT.
dsh_reply_t *
    dsh_client_recv (dsh_client_t *self, int timeout_ms);

//  Call a tool and wait for its result: at most the call's timeout plus a
//  margin (timeout_ms 0 = the broker's default of 60 s). args_json is JSON
//  text of the arguments (NULL = {}). NULL with a reason in error if the
//  JSON is bad or no reply came.
dsh_reply_t *
    dsh_client_call (dsh_client_t *self, const char *name, const char *args_json,
                     const char *agent, int timeout_ms, char *error, size_t error_size);

//  Run the calls of one model turn, calls being a JSON array of {name,
//  arguments?}, the way coding agents do: consecutive calls to tools whose
//  registry entries say they are concurrency-safe (concurrencySafe, or
//  annotations.readOnlyHint) run in parallel; any other call runs alone, in
//  order. The caller cannot claim safety: only the tool's entry counts.
//  Returns a JSON array with one RESULT body per call, in call order,
//  whatever happened to the others (a call with no reply in time gets a
//  TIMEOUT error result made here). timeout_ms bounds each call (0: the
//  broker's default). NULL with a reason if calls is malformed or the tool
//  list cannot be had.
json_t *
    dsh_client_batch (dsh_client_t *self, const json_t *calls, const char *agent, int timeout_ms,
                      char *error, size_t error_size);

//  Send a query (HELLO, PING, LIST, GET, SNAPSHOT) with an optional name
//  (for GET) and wait at most timeout_ms for its reply. NULL with a reason.
dsh_reply_t *
    dsh_client_request (dsh_client_t *self, const char *command, const char *name,
                        int timeout_ms, char *error, size_t error_size);

//  Send command with body (a JSON object; its "id" is set to a fresh one)
//  and wait at most timeout_ms for its reply, as dsh_client_request does
//  (AUDIT, for one). NULL with a reason if no reply came.
dsh_reply_t *
    dsh_client_query (dsh_client_t *self, const char *command, const json_t *body,
                      int timeout_ms, char *error, size_t error_size);

//  Send a control command to a stage of the broker's chain (args: a JSON
//  object or NULL) and wait at most timeout_ms for its CONTROL reply
//  {ok, message?, data?}. NULL with a reason if no reply came.
dsh_reply_t *
    dsh_client_control (dsh_client_t *self, const char *stage, const char *command, json_t *args,
                        int timeout_ms, char *error, size_t error_size);

//  The tools of entries (a JSON array of tool entries, as LIST gives them)
//  that agent (NULL: none) could be let to call. Quarantined ones are left
//  out (dsh_render_quarantined); then every stage of the
//  broker's chain (CHAIN) is asked, in order, with the control command
//  "allowed" {agent, tools}, and each keeps the names it would not refuse
//  (permission: not denied, asks included; plan: what the agent's mode
//  allows now; sandbox: what its policy could let run). A stage that does
//  not answer "allowed" keeps every tool. Returns a new array of the kept
//  entries, in their order, or NULL with a reason if the chain cannot be
//  had within timeout_ms (0: 5000). For an agent's prompt or an MCP
//  tools/list; the chain still decides every call.
json_t *
    dsh_client_allowed (dsh_client_t *self, const char *agent, const json_t *entries, int timeout_ms,
                        char *error, size_t error_size);

//  Destroy a reply; safe twice.
void
    dsh_reply_destroy (dsh_reply_t **self_p);

//  The reply's command (RESULT, TOOLS, TOOL, SNAPSHOT, PONG, WELCOME, ERROR).
const char *
    dsh_reply_command (dsh_reply_t *self);

//  The decoded body (a map).
const msgpack_object *
    dsh_reply_body (dsh_reply_t *self);

//  The body's bytes.
zframe_t *
    dsh_reply_frame (dsh_reply_t *self);

//  The body as JSON (caller owns), or NULL if it holds no JSON equivalent.
json_t *
    dsh_reply_json (dsh_reply_t *self);

//  For a RESULT: its callId; else NULL.
const char *
    dsh_reply_call_id (dsh_reply_t *self);

//  True for a RESULT with isError, and for an ERROR.
bool
    dsh_reply_is_error (dsh_reply_t *self);

//  The error code of a failed RESULT or an ERROR, or NULL.
const char *
    dsh_reply_error_code (dsh_reply_t *self);

//  A RATE_LIMITED RESULT's error.retryAfterMs: the ms until the limit
//  that refused the call admits one again; -1 if the reply carries none.
int64_t
    dsh_reply_retry_after_ms (dsh_reply_t *self);

//  For a RESULT: the trace context it carries back (its traceparent, and
//  tracestate if any: the broker's span for the call, in the caller's
//  trace or the one the broker started). Returns 0 with ctx filled, or -1
//  (ctx untouched) if it carries none or the reply is no RESULT.
int
    dsh_reply_trace (dsh_reply_t *self, dsh_trace_ctx_t *ctx);

//  The text of the first text block of a RESULT, or the message of an
//  ERROR, or NULL.
const char *
    dsh_reply_text (dsh_reply_t *self);

#ifdef __cplusplus
}
#endif

#endif
