/*  =========================================================================
    dsh_mcp_extras - resources, prompts, completions and log levels of
    bridged MCP servers, for dsh-mcp's clients

    A bridged server's resources, resource templates and prompts live in
    the registry inside its gateway tool's entry (dsh_mcp_gateway.h,
    PROTOCOL.md "MCP gateway tools"). Given the registry's entries as
    dsh-mcp has them, this module plans the answer to one MCP request:
    lists are answered from the entries; resources/read, prompts/get and
    completion/complete are forwarded to the one gateway that owns the
    URI or prompt; logging/setLevel is answered at once and sent to every
    gateway whose server logs. It makes no calls and holds no state: the
    caller makes the dsh calls and turns the gateway's result into the
    JSON-RPC response with dsh_mcp_extras_response.
    =========================================================================
*/

#ifndef DSH_MCP_EXTRAS_H_INCLUDED
#define DSH_MCP_EXTRAS_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  True if method is one this module plans (resources/*, prompts/*,
//  completion/complete, logging/setLevel).
bool
    dsh_mcp_extras_handles (const char *method);

//  The capabilities to merge into initialize's: resources and prompts
//  (listChanged), completions, logging. Caller owns it.
json_t *
    dsh_mcp_extras_capabilities (void);

//  The plan for one request, given the registry's tool entries (a JSON
//  array, as LIST or the watcher has them; entries that are not gateways
//  are skipped). Caller owns the plan, an object with one of:
//    "result": R                     answer now with result R;
//    "error": {code, message}        answer now with this JSON-RPC error;
//    "call": {tool, arguments}       call the gateway tool, then answer
//                                    with dsh_mcp_extras_response;
//  and, with "result", maybe "also": [{tool, arguments}...], calls to send
//  whose results nobody waits for.
json_t *
    dsh_mcp_extras_plan (const json_t *entries, const char *method, const json_t *params);

//  The JSON-RPC answer to a forwarded request, from the gateway call's
//  dsh RESULT body (as JSON; NULL if it had none): {"result": R} or
//  {"error": {code, message, data?}}, the server's own. Caller owns it.
json_t *
    dsh_mcp_extras_response (const json_t *body);

#ifdef __cplusplus
}
#endif

#endif
