/*  =========================================================================
    dsh_mcp_gateway - a bridged MCP server's gateway tool: its entry and its rules
    =========================================================================
*/

#include "dsh_mcp_gateway.h"

#include <czmq.h>
#include <limits.h>
#include <stdlib.h>

//  The methods a gateway forwards, and the server capability each needs.
static const struct {
    const char *method;
    const char *capability;
} s_forwarded [] = {
    { "resources/list", "resources" },
    { "resources/templates/list", "resources" },
    { "resources/read", "resources" },
    { "prompts/list", "prompts" },
    { "prompts/get", "prompts" },
    { "completion/complete", "completions" },
    { "logging/setLevel", "logging" },
    //  Not MCP's: the bridge answers it from its own record of the
    //  server's log messages (dsh_mcp_logs.h)
    { "dsh/logging/poll", "logging" },
    { NULL, NULL }
};

//  The catalog's lists, in the order they are cut when the entry is too
//  big: resources first, the list that grows with the data (a file
//  server's files) and the one whose cut items stay readable.
static const char *s_lists [] = { "resources", "resourceTemplates", "prompts", NULL };

bool
dsh_mcp_gateway_named (const char *tool_name)
{
    return tool_name && strncmp (tool_name, DSH_MCP_GATEWAY_PREFIX, strlen (DSH_MCP_GATEWAY_PREFIX)) == 0;
}

const char *
dsh_mcp_gateway_capability (const char *method)
{
    for (size_t index = 0; method && s_forwarded [index].method; index++)
        if (streq (method, s_forwarded [index].method))
            return s_forwarded [index].capability;
    return NULL;
}

static size_t
s_json_size (const json_t *value)
{
    return json_dumpb (value, NULL, 0, JSON_COMPACT);
}

json_t *
dsh_mcp_gateway_entry (const char *name, const char *server, const char *prefix,
                       const json_t *capabilities, const json_t *catalog, size_t max_bytes)
{
    json_t *methods = json_array ();
    for (size_t index = 0; s_forwarded [index].method; index++)
        if (json_object_get (capabilities, s_forwarded [index].capability))
            json_array_append_new (methods, json_string (s_forwarded [index].method));
    char *description = zsys_sprintf (
        "The MCP server \"%s\": its resources, prompts, completions and log level. Call with "
        "{method, params}, an MCP request of one of the listed methods; the result is the "
        "server's result as structuredContent, or its error as {error: {code, message}}.", server);
    json_t *gateway = json_pack ("{s:s, s:s, s:O}", "server", server, "prefix", prefix,
                                 "capabilities", capabilities);
    json_t *entry = json_pack ("{s:s, s:s, s:{s:s, s:{s:{s:s, s:o}, s:{s:s}}, s:[s], s:b},"
                               " s:{s:b, s:b, s:b}, s:o}",
                               "name", name, "description", description,
                               "parameters", "type", "object", "properties",
                               "method", "type", "string", "enum", methods,
                               "params", "type", "object",
                               "required", "method", "additionalProperties", 0,
                               "annotations", "readOnlyHint", 1, "destructiveHint", 0, "openWorldHint", 0,
                               DSH_MCP_GATEWAY_KEY, gateway);
    zstr_free (&description);
    assert (entry);
    for (size_t index = 0; s_lists [index]; index++) {
        const json_t *list = json_object_get (catalog, s_lists [index]);
        if (json_is_array (list))
            json_object_set_new (gateway, s_lists [index], json_deep_copy (list));
    }
    json_t *truncated = json_array ();
    for (size_t index = 0; s_lists [index] && s_json_size (entry) > max_bytes; index++) {
        json_t *list = json_object_get (gateway, s_lists [index]);
        if (!json_is_array (list) || json_array_size (list) == 0)
            continue;
        json_array_append_new (truncated, json_string (s_lists [index]));
        //  The longest prefix of the list that fits, by bisection: a server
        //  with thousands of resources costs O(n log n), not O(n^2)
        size_t low = 0, high = json_array_size (list);
        json_t *whole = json_deep_copy (list);
        while (low < high) {
            size_t middle = (low + high + 1) / 2;
            json_t *part = json_array ();
            for (size_t item = 0; item < middle; item++)
                json_array_append (part, json_array_get (whole, item));
            json_object_set_new (gateway, s_lists [index], part);
            if (s_json_size (entry) + 64 <= max_bytes)
                low = middle;
            else
                high = middle - 1;
        }
        json_t *kept = json_array ();
        for (size_t item = 0; item < low; item++)
            json_array_append (kept, json_array_get (whole, item));
        json_object_set_new (gateway, s_lists [index], kept);
        json_decref (whole);
    }
    if (json_array_size (truncated) > 0)
        json_object_set_new (gateway, "truncated", truncated);
    else
        json_decref (truncated);
    return entry;
}

//  uri with every byte outside RFC 3986's unreserved set and '/' escaped.
static char *
s_file_uri (const char *path)
{
    char *uri = (char *) zmalloc (strlen ("file://") + 3 * strlen (path) + 1);
    assert (uri);
    char *cursor = uri + sprintf (uri, "file://");
    for (const unsigned char *byte = (const unsigned char *) path; *byte; byte++)
        if (isalnum (*byte) || strchr ("-._~/", *byte))
            *cursor++ = (char) *byte;
        else
            cursor += sprintf (cursor, "%%%02X", *byte);
    *cursor = 0;
    return uri;
}

json_t *
dsh_mcp_gateway_roots (const char **dirs)
{
    json_t *roots = json_array ();
    for (size_t index = 0; dirs && dirs [index]; index++) {
        char *real = realpath (dirs [index], NULL);
        if (!real) {
            zsys_warning ("dsh-mcp-bridge: root %s: %s; not offered", dirs [index], strerror (errno));
            continue;
        }
        char *uri = s_file_uri (real);
        const char *slash = strrchr (real, '/');
        const char *name = slash && slash [1]? slash + 1: real;
        json_array_append_new (roots, json_pack ("{s:s, s:s}", "uri", uri, "name", name));
        zstr_free (&uri);
        free (real);
    }
    return json_pack ("{s:o}", "roots", roots);
}
