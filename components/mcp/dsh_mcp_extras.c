/*  =========================================================================
    dsh_mcp_extras - resources, prompts, completions and log levels of
    bridged MCP servers, for dsh-mcp's clients
    =========================================================================
*/

#include "dsh_mcp_extras.h"
#include "dsh_mcp_gateway.h"
#include "dsh_mcp_logs.h"
#include "dsh_jsonrpc.h"

#include <czmq.h>

#define PAGE_SIZE               100
//  MCP's code for a resource no server has.
#define RESOURCE_NOT_FOUND      -32002

//  The lists served from the entries: the method, the catalog list, and
//  whether item names take the gateway's prefix (prompts, as tools do).
static const struct {
    const char *method;
    const char *list;
    bool prefixed;
} s_lists [] = {
    { "resources/list", "resources", false },
    { "resources/templates/list", "resourceTemplates", false },
    { "prompts/list", "prompts", true },
    { NULL, NULL, false }
};

static const char *s_forwarded [] = { "resources/read", "prompts/get", "completion/complete",
                                      "logging/setLevel", NULL };

bool
dsh_mcp_extras_handles (const char *method)
{
    for (size_t index = 0; method && s_lists [index].method; index++)
        if (streq (method, s_lists [index].method))
            return true;
    for (size_t index = 0; method && s_forwarded [index]; index++)
        if (streq (method, s_forwarded [index]))
            return true;
    return false;
}

json_t *
dsh_mcp_extras_capabilities (void)
{
    return json_pack ("{s:{s:b}, s:{s:b}, s:{}, s:{}}", "resources", "listChanged", 1,
                      "prompts", "listChanged", 1, "completions", "logging");
}

//  The gateway part of entry, or NULL if entry is no gateway.
static const json_t *
s_gateway (const json_t *entry)
{
    const json_t *gateway = json_object_get (entry, DSH_MCP_GATEWAY_KEY);
    if (!dsh_mcp_gateway_named (json_string_value (json_object_get (entry, "name")))
    || !json_is_object (gateway))
        return NULL;
    return gateway;
}

static const char *
s_prefix (const json_t *gateway)
{
    const char *prefix = json_string_value (json_object_get (gateway, "prefix"));
    return prefix? prefix: "";
}

static bool
s_offers (const json_t *gateway, const char *capability)
{
    return json_object_get (json_object_get (gateway, "capabilities"), capability) != NULL;
}

static json_t *
s_error (int code, const char *message)
{
    return json_pack ("{s:{s:i, s:s}}", "error", "code", code, "message", message);
}

static json_t *
s_call (const json_t *entry, const char *method, json_t *params)
{
    return json_pack ("{s:{s:O, s:{s:s, s:o}}}", "call", "tool", json_object_get (entry, "name"),
                      "arguments", "method", method, "params", params);
}

//  One page of a list gathered from every gateway.
static json_t *
s_list (const json_t *entries, size_t which, const json_t *params)
{
    size_t start;
    if (dsh_jsonrpc_cursor (params, &start))
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "Invalid cursor");
    json_t *all = json_array ();
    size_t index;
    const json_t *entry;
    json_array_foreach (entries, index, entry) {
        const json_t *gateway = s_gateway (entry);
        const json_t *list = json_object_get (gateway, s_lists [which].list);
        size_t item_index;
        const json_t *item;
        json_array_foreach (list, item_index, item) {
            if (!json_is_object (item))
                continue;
            json_t *copy = json_copy ((json_t *) item);
            const char *name = json_string_value (json_object_get (item, "name"));
            if (s_lists [which].prefixed && name) {
                char *full = zsys_sprintf ("%s%s", s_prefix (gateway), name);
                json_object_set_new (copy, "name", json_string (full));
                zstr_free (&full);
            }
            json_array_append_new (all, copy);
        }
    }
    json_t *plan;
    if (start > json_array_size (all))
        plan = s_error (DSH_JSONRPC_INVALID_PARAMS, "Invalid cursor");
    else {
        json_t *page = json_array ();
        size_t stop = start + PAGE_SIZE;
        for (index = start; index < stop && index < json_array_size (all); index++)
            json_array_append (page, json_array_get (all, index));
        json_t *result = json_pack ("{s:o}", s_lists [which].list, page);
        if (stop < json_array_size (all)) {
            char next [32];
            snprintf (next, sizeof next, "%zu", stop);
            json_object_set_new (result, "nextCursor", json_string (next));
        }
        plan = json_pack ("{s:o}", "result", result);
    }
    json_decref (all);
    return plan;
}

//  True if list (of objects) has one whose key is value.
static bool
s_has (const json_t *list, const char *key, const char *value)
{
    size_t index;
    const json_t *item;
    json_array_foreach (list, index, item)
        if (json_is_string (json_object_get (item, key))
        &&  streq (json_string_value (json_object_get (item, key)), value))
            return true;
    return false;
}

//  The entry of the gateway that serves uri: one that lists it, else the
//  one whose template's literal start is the longest match, else one
//  whose resources list was cut, else the only one with resources.
static const json_t *
s_owner_of_uri (const json_t *entries, const char *uri)
{
    const json_t *best = NULL, *cut = NULL, *only = NULL;
    size_t best_length = 0, with_resources = 0;
    size_t index;
    const json_t *entry;
    json_array_foreach (entries, index, entry) {
        const json_t *gateway = s_gateway (entry);
        if (!gateway || !s_offers (gateway, "resources"))
            continue;
        if (s_has (json_object_get (gateway, "resources"), "uri", uri))
            return entry;
        with_resources++;
        only = entry;
        const json_t *templates = json_object_get (gateway, "resourceTemplates");
        size_t template_index;
        const json_t *template;
        json_array_foreach (templates, template_index, template) {
            const char *pattern = json_string_value (json_object_get (template, "uriTemplate"));
            if (!pattern)
                continue;
            size_t length = strcspn (pattern, "{");
            if (length > best_length && strncmp (pattern, uri, length) == 0) {
                best = entry;
                best_length = length;
            }
        }
        const json_t *truncated = json_object_get (gateway, "truncated");
        size_t cut_index;
        const json_t *list;
        json_array_foreach (truncated, cut_index, list)
            if (json_is_string (list) && streq (json_string_value (list), "resources"))
                cut = entry;
    }
    if (best)
        return best;
    if (cut)
        return cut;
    return with_resources == 1? only: NULL;
}

//  The entry of the gateway that has the prompt the client knows as name,
//  and the server's own name for it in *server_name.
static const json_t *
s_owner_of_prompt (const json_t *entries, const char *name, const char **server_name)
{
    size_t index;
    const json_t *entry;
    json_array_foreach (entries, index, entry) {
        const json_t *gateway = s_gateway (entry);
        const char *prefix = s_prefix (gateway);
        if (!gateway || strncmp (name, prefix, strlen (prefix)) != 0)
            continue;
        if (s_has (json_object_get (gateway, "prompts"), "name", name + strlen (prefix))) {
            *server_name = name + strlen (prefix);
            return entry;
        }
    }
    return NULL;
}

static json_t *
s_read (const json_t *entries, const json_t *params)
{
    const char *uri = json_string_value (json_object_get (params, "uri"));
    if (!uri)
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "resources/read needs a uri");
    const json_t *owner = s_owner_of_uri (entries, uri);
    if (!owner) {
        char *message = zsys_sprintf ("Resource not found: %s", uri);
        json_t *plan = s_error (RESOURCE_NOT_FOUND, message);
        json_object_set_new (json_object_get (plan, "error"), "data", json_pack ("{s:s}", "uri", uri));
        zstr_free (&message);
        return plan;
    }
    return s_call (owner, "resources/read", json_deep_copy (params));
}

static json_t *
s_get_prompt (const json_t *entries, const json_t *params)
{
    const char *name = json_string_value (json_object_get (params, "name"));
    if (!name)
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "prompts/get needs a name");
    const char *server_name = NULL;
    const json_t *owner = s_owner_of_prompt (entries, name, &server_name);
    if (!owner) {
        char *message = zsys_sprintf ("Unknown prompt: %s", name);
        json_t *plan = s_error (DSH_JSONRPC_INVALID_PARAMS, message);
        zstr_free (&message);
        return plan;
    }
    json_t *forwarded = json_deep_copy (params);
    json_object_set_new (forwarded, "name", json_string (server_name));
    return s_call (owner, "prompts/get", forwarded);
}

static json_t *
s_complete (const json_t *entries, const json_t *params)
{
    const json_t *ref = json_object_get (params, "ref");
    const char *type = json_string_value (json_object_get (ref, "type"));
    const json_t *owner = NULL;
    json_t *forwarded = json_deep_copy (params);
    if (type && streq (type, "ref/prompt") && json_is_string (json_object_get (ref, "name"))) {
        const char *server_name = NULL;
        owner = s_owner_of_prompt (entries, json_string_value (json_object_get (ref, "name")), &server_name);
        if (owner)
            json_object_set_new (json_object_get (forwarded, "ref"), "name", json_string (server_name));
    }
    else
    if (type && streq (type, "ref/resource") && json_is_string (json_object_get (ref, "uri"))) {
        const char *uri = json_string_value (json_object_get (ref, "uri"));
        size_t index;
        const json_t *entry;
        json_array_foreach (entries, index, entry) {
            const json_t *gateway = s_gateway (entry);
            if (s_has (json_object_get (gateway, "resourceTemplates"), "uriTemplate", uri)
            ||  s_has (json_object_get (gateway, "resources"), "uri", uri)) {
                owner = entry;
                break;
            }
        }
    }
    else {
        json_decref (forwarded);
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "completion/complete needs a ref/prompt or ref/resource");
    }
    if (!owner) {
        json_decref (forwarded);
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "completion/complete: no server has that reference");
    }
    if (!s_offers (s_gateway (owner), "completions")) {
        json_decref (forwarded);
        return json_pack ("{s:{s:{s:[], s:i, s:b}}}", "result", "completion", "values", "total", 0,
                          "hasMore", 0);
    }
    return s_call (owner, "completion/complete", forwarded);
}

static json_t *
s_set_level (const json_t *entries, const json_t *params)
{
    if (dsh_mcp_logs_level (json_string_value (json_object_get (params, "level"))) < 0)
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "logging/setLevel needs a level: debug, info, notice, "
                        "warning, error, critical, alert or emergency");
    json_t *also = json_array ();
    size_t index;
    const json_t *entry;
    json_array_foreach (entries, index, entry) {
        const json_t *gateway = s_gateway (entry);
        if (gateway && s_offers (gateway, "logging")) {
            json_t *call = s_call (entry, "logging/setLevel", json_deep_copy (params));
            json_array_append (also, json_object_get (call, "call"));
            json_decref (call);
        }
    }
    return json_pack ("{s:{}, s:o}", "result", "also", also);
}

json_t *
dsh_mcp_extras_plan (const json_t *entries, const char *method, const json_t *params)
{
    if (params && !json_is_object (params))
        return s_error (DSH_JSONRPC_INVALID_PARAMS, "params must be an object");
    for (size_t which = 0; method && s_lists [which].method; which++)
        if (streq (method, s_lists [which].method))
            return s_list (entries, which, params);
    if (method && streq (method, "resources/read"))
        return s_read (entries, params);
    if (method && streq (method, "prompts/get"))
        return s_get_prompt (entries, params);
    if (method && streq (method, "completion/complete"))
        return s_complete (entries, params);
    if (method && streq (method, "logging/setLevel"))
        return s_set_level (entries, params);
    return s_error (DSH_JSONRPC_METHOD_NOT_FOUND, "Method not found");
}

json_t *
dsh_mcp_extras_response (const json_t *body)
{
    const json_t *structured = json_object_get (body, "structuredContent");
    const json_t *error = json_object_get (structured, "error");
    if (json_is_true (json_object_get (body, "isError"))) {
        if (json_is_object (error) && json_is_integer (json_object_get (error, "code"))
        &&  json_is_string (json_object_get (error, "message")))
            return json_pack ("{s:O}", "error", error);
        //  The call failed before the server had it (denied, gone, timed
        //  out): the dsh error's text is all there is
        const json_t *block = json_array_get (json_object_get (body, "content"), 0);
        const char *text = json_string_value (json_object_get (block, "text"));
        return s_error (DSH_JSONRPC_INTERNAL_ERROR, text? text: "the MCP gateway call failed");
    }
    if (!json_is_object (structured))
        return s_error (DSH_JSONRPC_INTERNAL_ERROR, "the MCP gateway sent no result");
    return json_pack ("{s:O}", "result", structured);
}
