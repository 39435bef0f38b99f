/*  =========================================================================
    dsh_render - the tool list in the shapes model providers expect

    Takes the registry's tool list as JSON (an array of wire tool entries:
    {name, description, parameters, title?, annotations?, outputSchema?,
    concurrencySafe?}) and renders it for a prompt or a provider API. Order
    is kept as given (the registry's order is deterministic); handlers never
    appear, there are none on the wire. A tool the broker marked
    quarantined (its definition is not the pinned one) is never rendered:
    its new description must not reach an agent before an admin accepts it.
    =========================================================================
*/

#ifndef DSH_RENDER_H_INCLUDED
#define DSH_RENDER_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Render formats.
typedef enum {
    DSH_RENDER_JSON = 1,        //  the wire entries themselves
    DSH_RENDER_OPENAI,          //  [{type:"function", function:{name, description, parameters, strict?}}]
    DSH_RENDER_ANTHROPIC,       //  [{name, description, input_schema}]
    DSH_RENDER_MCP,             //  {tools:[{name, title?, description, inputSchema, outputSchema?, annotations?}]}
    DSH_RENDER_MARKDOWN         //  a "## Tools" section for a system prompt
} dsh_render_format_t;

//  The format named by text ("json", "openai", "anthropic", "mcp",
//  "markdown"), or 0 if unknown.
dsh_render_format_t
    dsh_render_format_from_name (const char *text);

//  Render tools (a JSON array of wire entries) in format. Returns a new
//  string (JSON text, or markdown), or NULL if tools is not an array.
//  Entries that are not objects with a string name are skipped, and so are
//  quarantined ones (dsh_render_quarantined).
char *
    dsh_render (const json_t *tools, dsh_render_format_t format);

//  True if the broker marked entry quarantined (`quarantined: true`,
//  PROTOCOL.md, Pins): listed for operators, left out of everything an
//  agent is shown (renderings, MCP tools/list, dsh_client_allowed).
bool
    dsh_render_quarantined (const json_t *entry);

#ifdef __cplusplus
}
#endif

#endif
