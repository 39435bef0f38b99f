/*  =========================================================================
    dsh_render - the tool list in the shapes model providers expect

    Takes the registry's tool list as JSON (an array of wire tool entries:
    {name, description, parameters, title?, annotations?, outputSchema?,
    concurrencySafe?}) and renders it for a prompt or a provider API. Order
    is kept as given (the registry's order is deterministic); handlers never
    appear, there are none on the wire.
    =========================================================================
*/

#ifndef DSH_RENDER_H_INCLUDED
#define DSH_RENDER_H_INCLUDED

#include <jansson.h>

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
//  Entries that are not objects with a string name are skipped.
char *
    dsh_render (const json_t *tools, dsh_render_format_t format);

#ifdef __cplusplus
}
#endif

#endif
