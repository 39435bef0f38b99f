/*  =========================================================================
    dsh_mcp_content - an MCP tools/call result, as a dsh result

    The bridge gets results from MCP servers as JSON and hands them on as
    dsh results; this is the one place that knows how each MCP content
    block maps onto the dsh_result calls (binary blocks are decoded from
    base64 and re-encoded by dsh_result, so their bytes are checked on the
    way), and how an MCP server says "no such tool".
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
//  isError?}. A block of an unknown type becomes a text block holding its
//  JSON. Returns 0, or -1 with the reason in error if the result is
//  malformed (result is then unchanged or partly filled: make it an error).
int
    dsh_mcp_content_to_result (const json_t *call_result, dsh_result_t *result,
                               char *error, size_t error_size);

//  True if an MCP error (a JSON-RPC error message, or the text of an
//  isError result) says the tool does not exist: code -32602 with "not
//  found", or "Unknown tool". Input validation errors are not.
bool
    dsh_mcp_content_unknown_tool (int code, const char *message);

//  The text blocks of an MCP result's content joined by newlines (caller
//  frees); "" if there are none.
char *
    dsh_mcp_content_text (const json_t *call_result);

#ifdef __cplusplus
}
#endif

#endif
