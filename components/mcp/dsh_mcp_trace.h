/*  =========================================================================
    dsh_mcp_trace - W3C trace context across MCP, and MCP spans

    MCP carries trace context in a request's params._meta (traceparent,
    tracestate, baggage), as the OpenTelemetry MCP conventions recommend;
    dsh carries it in a CALL's meta under the same keys. dsh-mcp reads it
    from its MCP clients and sends it in the CALL; dsh-mcp-bridge reads it
    from the call and sends it to its MCP server. Both emit the MCP spans
    of the conventions (semantic-conventions-genai, docs/gen-ai/mcp.md):
    named "{mcp.method.name} {target}", with mcp.method.name,
    gen_ai.tool.name, jsonrpc.request.id and, on failure, error.type as
    the conventions define it (the JSON-RPC error code, or "tool_error"
    for an isError result) with the dsh error code as dsh.error.code.
    Everything here is a no-op when tracing is off (dsh_trace).
    =========================================================================
*/

#ifndef DSH_MCP_TRACE_H_INCLUDED
#define DSH_MCP_TRACE_H_INCLUDED

#include "dsh_trace.h"

#include <jansson.h>
#include <msgpack.h>

#ifdef __cplusplus
extern "C" {
#endif

//  W3C Baggage: what an implementation must take at least; longer is dropped
#define DSH_MCP_BAGGAGE_MAX 8192

//  The trace context a message carried.
typedef struct {
    bool valid;                 //  a traceparent that parses: ctx holds it
    dsh_trace_ctx_t ctx;        //  with tracestate ("" when none or too long)
    char tracestate [DSH_TRACESTATE_MAX + 1];   //  as read, whatever the key order
    char *baggage;              //  as given, or NULL
} dsh_mcp_trace_t;

//  Reads traceparent, tracestate and baggage (strings) from an MCP
//  params._meta object (may be NULL). Clean up with dsh_mcp_trace_clear.
void
    dsh_mcp_trace_from_json (dsh_mcp_trace_t *trace, const json_t *meta);

//  The same from a dsh call's meta map (msgpack, may be NULL).
void
    dsh_mcp_trace_from_msgpack (dsh_mcp_trace_t *trace, const msgpack_object *meta);

//  Frees the baggage; the trace reads as empty after.
void
    dsh_mcp_trace_clear (dsh_mcp_trace_t *trace);

//  Starts an MCP span "{method} {target}" (target NULL: "{method}") of
//  kind (DSH_SPAN_SERVER, DSH_SPAN_CLIENT), child of the received context
//  if valid, else a new root under the sampler, with mcp.method.name set
//  (and for tools/call gen_ai.tool.name = target, gen_ai.operation.name
//  execute_tool). Makes trace->ctx what to send on: the span's own
//  context; without a span (sampled out), the received one as it was,
//  or, for a root the sampler refused, a new unsampled one, so the hops
//  after follow the decision. NULL when tracing is off or not sampled.
dsh_span_t *
    dsh_mcp_span_start (const char *method, const char *target, int kind, dsh_mcp_trace_t *trace);

//  Ends the span with what the request was answered: answer is the
//  JSON-RPC message ({error} or {result}). An error sets error.type and
//  rpc.response.status_code to its code; a result with isError true sets
//  error.type "tool_error". dsh_code (may be NULL): the dsh error code,
//  as dsh.error.code. Nulls *span_p; safe with NULL.
void
    dsh_mcp_span_end (dsh_span_t **span_p, const json_t *answer, const char *dsh_code);

//  Ends the span as failed with no answer from the peer: error.type is
//  error_type (a dsh code such as TOOL_GONE, or "timeout").
void
    dsh_mcp_span_fail (dsh_span_t **span_p, const char *error_type, const char *message);

//  Packs the context to send on as a meta map {traceparent, tracestate?,
//  baggage?}; nothing is packed, and -1 returned, if there is none.
int
    dsh_mcp_trace_pack (const dsh_mcp_trace_t *trace, msgpack_packer *pk);

//  Sets traceparent, tracestate and baggage in an MCP _meta object, if
//  there is a context to send on.
void
    dsh_mcp_trace_to_json (const dsh_mcp_trace_t *trace, json_t *meta);

#ifdef __cplusplus
}
#endif

#endif
