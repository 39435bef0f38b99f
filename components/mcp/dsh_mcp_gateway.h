/*  =========================================================================
    dsh_mcp_gateway - a bridged MCP server's gateway tool: its entry and its rules

    Besides one tool entry per MCP tool, dsh-mcp-bridge announces one
    gateway tool per server (PROTOCOL.md, MCP gateway tools). Its entry
    carries the server's resources, resource templates and prompts under
    the key "mcpGateway"; a call to it forwards one MCP request {method,
    params} to the server and answers with the server's result whole.
    This module is what the bridge needs to know about that entry: how to
    build it within the broker's size limit, which methods may pass, and
    the roots the bridge offers; and, for dsh-mcp, which tools are
    gateways. dsh_mcp_extras and dsh_mcp_logs are the other side.
    =========================================================================
*/

#ifndef DSH_MCP_GATEWAY_H_INCLUDED
#define DSH_MCP_GATEWAY_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Every gateway tool's name starts with this.
#define DSH_MCP_GATEWAY_PREFIX  "mcp-gateway."
//  The namespaced key of a tool entry that makes it a gateway.
#define DSH_MCP_GATEWAY_KEY     "mcpGateway"

//  True if a tool of this name is a gateway (dsh-mcp hides it from
//  tools/list, and turns its changes into resources and prompts
//  list_changed).
bool
    dsh_mcp_gateway_named (const char *tool_name);

//  The gateway entry for a server: name (a valid tool name), the server's
//  name, the prefix its tools and prompts get, its capabilities (from
//  initialize) and catalog {resources, resourceTemplates, prompts} (each
//  an array, or absent). Lists are cut from their ends until the entry's
//  JSON is at most max_bytes; the lists cut are named in "truncated".
//  Caller owns the result.
json_t *
    dsh_mcp_gateway_entry (const char *name, const char *server, const char *prefix,
                           const json_t *capabilities, const json_t *catalog, size_t max_bytes);

//  The capability (a key of the server's capabilities) a forwarded method
//  needs, or NULL if the gateway does not forward that method.
const char *
    dsh_mcp_gateway_capability (const char *method);

//  A roots/list result for the directories in dirs (NULL-terminated):
//  {roots: [{uri: "file://...", name}]}. A directory that does not exist
//  is left out, with a log line. Caller owns it.
json_t *
    dsh_mcp_gateway_roots (const char **dirs);

#ifdef __cplusplus
}
#endif

#endif
