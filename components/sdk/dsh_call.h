/*  =========================================================================
    dsh_call - one call as a tool handler or a stage sees it, and the
    result a handler builds

    A handler (dsh_provider) or a stage of the chain (dsh_stage) gets the
    call (callId, tool name, agent, arguments, meta) with typed accessors
    over the one strict decoding of its CALL body, so it never walks
    msgpack by hand; a handler fills a result with content blocks of MCP's
    full set. Everything the call returns is owned by the call and lives as
    long as the handler (or the stage's hold on the call) runs.
    =========================================================================
*/

#ifndef DSH_CALL_H_INCLUDED
#define DSH_CALL_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "dsh_proto.h"
#include "dsh_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_call_t dsh_call_t;
typedef struct _dsh_result_t dsh_result_t;

//  A tool handler: read the call, fill the result, return 0. Returning -1
//  without setting an error makes the result "Error: handler failed".
//  Returning DSH_HANDLER_DEFER finishes the call later, from any thread,
//  with dsh_call_finish (the call and result stay valid until then).
typedef int (dsh_handler_fn) (dsh_call_t *call, dsh_result_t *result, void *arg);

#define DSH_HANDLER_DEFER 1

//  A call decoded from a CALL body (borrowed; keep it alive as long as the
//  call). NULL with a reason if the body is not a valid CALL.
dsh_call_t *
    dsh_call_new (const void *body, size_t size, char *error, size_t error_size);

//  A call over a CALL body the broker has checked already (borrowed, as
//  above), decoded when first read, so that a stage that only passes calls
//  on never pays for decoding them. A body that does not decode reads as a
//  call with an empty callId and name (and is logged).
dsh_call_t *
    dsh_call_new_unread (const void *body, size_t size);

//  A call over a CALL body the broker has checked already (borrowed, as
//  above) together with that check's decode of exactly these bytes: doc
//  (taken; it points into body) and head (read off doc). The call is read
//  from them, never decoded again.
dsh_call_t *
    dsh_call_new_decoded (const void *body, size_t size, dsh_doc_t **doc_p, const dsh_call_head_t *head);

//  Hand on the call's decode of its body, if it has one that was read
//  strictly (a call read from a body that did not decode has none): moves
//  it into *doc_p and *head and returns 0, else -1. The call must not be
//  read afterwards; the decode points into the body, which the caller
//  keeps alive with it.
int
    dsh_call_take_decoded (dsh_call_t *self, dsh_doc_t **doc_p, dsh_call_head_t *head);

//  Destroy; safe twice.
void
    dsh_call_destroy (dsh_call_t **self_p);

//  The caller's id for this call.
const char *
    dsh_call_id (dsh_call_t *self);

//  The tool's name.
const char *
    dsh_call_name (dsh_call_t *self);

//  The calling agent's id, or NULL.
const char *
    dsh_call_agent (dsh_call_t *self);

//  The arguments as sent (any msgpack value), or NULL if none were sent.
const msgpack_object *
    dsh_call_arguments (dsh_call_t *self);

//  The meta map passed through from the caller, or NULL.
const msgpack_object *
    dsh_call_meta (dsh_call_t *self);

//  The call's W3C trace context, read from its meta's traceparent and
//  tracestate (PROTOCOL.md, Trace context): in a handler, the broker's
//  span for the dispatch to this component; in a stage, the broker's span
//  for this stage. Returns 0 with ctx filled (tracestate "" if none or
//  invalid), or -1 with ctx untouched if meta holds no valid traceparent.
int
    dsh_call_trace (dsh_call_t *self, dsh_trace_ctx_t *ctx);

//  The same read of any map holding traceparent and tracestate (a CALL's
//  meta, a RESULT body). Returns 0 with ctx filled, or -1 (ctx untouched).
int
    dsh_call_trace_from (const msgpack_object *map, dsh_trace_ctx_t *ctx);

//  The argument under key, or NULL if absent or the arguments are no map.
const msgpack_object *
    dsh_call_arg (dsh_call_t *self, const char *key);

//  True if the argument is present (nil counts as present).
bool
    dsh_call_has (dsh_call_t *self, const char *key);

//  The string argument under key (a NUL-terminated copy owned by the call),
//  or fallback if absent or not a string.
const char *
    dsh_call_string (dsh_call_t *self, const char *key, const char *fallback);

//  The numeric argument under key (integer or float), or fallback.
double
    dsh_call_number (dsh_call_t *self, const char *key, double fallback);

//  The integer argument under key (or an integral float), or fallback.
int64_t
    dsh_call_integer (dsh_call_t *self, const char *key, int64_t fallback);

//  The boolean argument under key, or fallback.
bool
    dsh_call_bool (dsh_call_t *self, const char *key, bool fallback);

//  True once the caller cancelled the call or its deadline passed (the
//  broker has answered it already; whatever the handler returns is dropped).
//  Safe from any thread.
bool
    dsh_call_cancelled (dsh_call_t *self);

//  A file descriptor that becomes readable when the call is cancelled, for
//  handlers that poll. Valid until the call ends. -1 if none could be made.
int
    dsh_call_cancel_fd (dsh_call_t *self);

//  Report progress to the caller (MCP's notifications/progress): progress
//  so far, total (< 0: unknown), message (may be NULL). Safe from any
//  thread while the call runs; dropped once it has ended.
void
    dsh_call_progress (dsh_call_t *self, double progress, double total, const char *message);

//  Finish a deferred call (its handler returned DSH_HANDLER_DEFER) with its
//  result. Safe from any thread, once.
void
    dsh_call_finish (dsh_call_t *self);

//  What runs a call does for it (dsh_provider sets these, dsh_stage sets
//  the context; a handler never needs them): carry progress to the
//  caller, and take a deferred call's result when it is finished.
typedef struct {
    void (*progress) (void *context, double progress, double total, const char *message);
    void (*finish) (void *context);
} dsh_call_hooks_t;

//  Set the hooks and their context.
void
    dsh_call_set_hooks (dsh_call_t *self, const dsh_call_hooks_t *hooks, void *context);

//  The context its runner set with dsh_call_set_hooks, or NULL.
void *
    dsh_call_context (dsh_call_t *self);

//  Mark the call cancelled and wake dsh_call_cancel_fd. Safe from any thread.
void
    dsh_call_cancel (dsh_call_t *self);

//  A new, empty, successful result for call_id.
dsh_result_t *
    dsh_result_new (const char *call_id);

//  Destroy; safe twice.
void
    dsh_result_destroy (dsh_result_t **self_p);

//  Add a text block.
void
    dsh_result_text (dsh_result_t *self, const char *text);

//  Add a text block from a printf format.
void
    dsh_result_textf (dsh_result_t *self, const char *format, ...) CHECK_PRINTF (2);

//  Add a text block of size bytes (need not be NUL-terminated).
void
    dsh_result_text_n (dsh_result_t *self, const char *text, size_t size);

//  Add an image block: data is raw bytes, sent base64-encoded.
void
    dsh_result_image (dsh_result_t *self, const char *mime_type, const void *data, size_t size);

//  Add an audio block: data is raw bytes, sent base64-encoded.
void
    dsh_result_audio (dsh_result_t *self, const char *mime_type, const void *data, size_t size);

//  Add a resource_link block; mime_type and description may be NULL.
void
    dsh_result_resource_link (dsh_result_t *self, const char *uri, const char *name,
                              const char *mime_type, const char *description);

//  Add an embedded text resource block; mime_type may be NULL.
void
    dsh_result_resource_text (dsh_result_t *self, const char *uri, const char *mime_type,
                              const char *text);

//  Add an embedded binary resource block (sent base64); mime_type may be NULL.
void
    dsh_result_resource_blob (dsh_result_t *self, const char *uri, const char *mime_type,
                              const void *data, size_t size);

//  Set structuredContent from msgpack bytes of a map (copied).
void
    dsh_result_structured (dsh_result_t *self, const void *data, size_t size);

//  Add a content block given as the msgpack bytes of one map (copied as
//  they are: fields the SDK does not know, such as MCP's annotations and
//  _meta, are kept). The broker checks the block.
void
    dsh_result_block (dsh_result_t *self, const void *data, size_t size);

//  Add a top-level field of the RESULT body, its value given as msgpack
//  bytes (copied), e.g. MCP's "_meta". Set each key once. Returns 0, or -1
//  for a key the body has already (callId, content, isError, error,
//  structuredContent).
int
    dsh_result_field (dsh_result_t *self, const char *key, const void *data, size_t size);

//  Make the result a failure with error code (NULL: TOOL_FAILED) keeping
//  its content as it is: for a tool that reports its own failure in its
//  own words and blocks (an MCP isError result).
void
    dsh_result_fail (dsh_result_t *self, const char *code);

//  Add a field to a failed result's error map, its value as msgpack bytes
//  (copied), e.g. "mcp" for the JSON-RPC error an MCP server sent. Call
//  after dsh_result_error or dsh_result_fail. Returns 0, or -1 if the
//  result has not failed or key is "name" or "code".
int
    dsh_result_error_field (dsh_result_t *self, const char *key, const void *data, size_t size);

//  Make the result an error: replaces the content with one text block
//  "Error: <message>", sets isError, and error {name, code} (code may be
//  NULL for a plain tool failure, TOOL_FAILED).
void
    dsh_result_error (dsh_result_t *self, const char *code, const char *format, ...) CHECK_PRINTF (3);

//  True once dsh_result_error was called.
bool
    dsh_result_is_error (dsh_result_t *self);

//  The RESULT body: {callId, content, isError, error?, structuredContent?}.
zframe_t *
    dsh_result_encode (dsh_result_t *self);

//  The same body, packed straight into msg (an uninitialised zmq_msg_t),
//  with no buffer to grow and no copy. Returns 0, or -1 if msg cannot be
//  allocated.
int
    dsh_result_encode_msg (dsh_result_t *self, zmq_msg_t *msg);

#ifdef __cplusplus
}
#endif

#endif
