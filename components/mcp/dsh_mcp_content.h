/*  =========================================================================
    dsh_mcp_content - an MCP tools/call answer, as a dsh result

    The bridge gets answers from MCP servers as JSON and hands them on as
    dsh results; this is the one place that knows how. Nothing is lost on
    the way: every field of every content block, the result's
    structuredContent, _meta and any field a later MCP revision adds pass
    as they are; an isError result keeps its own blocks and words; and a
    JSON-RPC error travels whole in the dsh error map (error.mcp), so
    dsh-mcp can answer its own client with the very same error.
    =========================================================================
*/

#ifndef DSH_MCP_CONTENT_H_INCLUDED
#define DSH_MCP_CONTENT_H_INCLUDED

#include "dsh_call.h"

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Fill result from an MCP CallToolResult {content, structuredContent?,
//  isError?, _meta?, ...}. A block of a type dsh does not carry (one from
//  a later MCP revision) becomes a text block holding its JSON. Returns 0,
//  or -1 with the reason in error if the result is malformed (result is
//  then partly filled: make it an error).
int
    dsh_mcp_content_to_result (const json_t *call_result, dsh_result_t *result,
                               char *error, size_t error_size);

//  Fill result from a JSON-RPC error object {code, message, data?} an MCP
//  server answered a tools/call with: a dsh error (INVALID_ARGS for
//  -32602, invalid params; TOOL_FAILED otherwise) whose text is the
//  server's message, and whose error map carries the object whole as
//  "mcp".
void
    dsh_mcp_content_from_error (const json_t *error_object, dsh_result_t *result);

//  True if a JSON-RPC error says the tool does not exist: code -32602
//  with "not found" or "unknown tool" in its message (the bridge then
//  lists the server's tools again).
bool
    dsh_mcp_content_unknown_tool (int code, const char *message);

#ifdef __cplusplus
}
#endif

#endif
