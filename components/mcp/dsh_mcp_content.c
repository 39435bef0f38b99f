/*  =========================================================================
    dsh_mcp_content - an MCP tools/call result, as a dsh result
    =========================================================================
*/

#include "dsh_mcp_content.h"
#include "dsh_json.h"
#include "dsh_proto.h"

#include <strings.h>

//  The string member key of block, or NULL if absent or not a string.
static const char *
s_member (const json_t *block, const char *key)
{
    return json_string_value (json_object_get (block, key));
}

//  Packs json and hands the bytes to add; -1 if it nests too deep.
static int
s_packed (const json_t *json, void (*add) (dsh_result_t *, const char *, const void *, size_t),
          dsh_result_t *result, const char *key)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    int rc = dsh_json_to_msgpack (&pk, json);
    if (rc == 0)
        add (result, key, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    return rc;
}

static void
s_add_block (dsh_result_t *result, const char *key, const void *data, size_t size)
{
    (void) key;
    dsh_result_block (result, data, size);
}

static void
s_add_structured (dsh_result_t *result, const char *key, const void *data, size_t size)
{
    (void) key;
    dsh_result_structured (result, data, size);
}

static void
s_add_field (dsh_result_t *result, const char *key, const void *data, size_t size)
{
    dsh_result_field (result, key, data, size);
}

static void
s_add_error_field (dsh_result_t *result, const char *key, const void *data, size_t size)
{
    dsh_result_error_field (result, key, data, size);
}

//  Checks block the way the broker will, so a bad block is the server's
//  fault, said here, not a BAD_RESULT later. Returns 1 for a type dsh does
//  not carry, 0 for a good block, -1 for a bad one.
static int
s_check_block (const json_t *block, char *error, size_t error_size)
{
    const char *type = s_member (block, "type");
    if (!json_is_object (block) || !type) {
        snprintf (error, error_size, "content block without a type");
        return -1;
    }
    const json_t *resource = json_object_get (block, "resource");
    bool good;
    if (streq (type, "text"))
        good = json_is_string (json_object_get (block, "text"));
    else
    if (streq (type, "image") || streq (type, "audio"))
        good = s_member (block, "data") && s_member (block, "mimeType");
    else
    if (streq (type, "resource_link"))
        good = s_member (block, "uri") && s_member (block, "name");
    else
    if (streq (type, "resource"))
        good = s_member (resource, "uri")
            && json_is_string (json_object_get (resource, "text")) != json_is_string (json_object_get (resource, "blob"))
            && (!json_object_get (resource, "text") || json_is_string (json_object_get (resource, "text")))
            && (!json_object_get (resource, "blob") || json_is_string (json_object_get (resource, "blob")));
    else
        return 1;
    if (!good)
        snprintf (error, error_size, "%s block without the fields MCP requires of it", type);
    return good? 0: -1;
}

bool
dsh_mcp_content_unknown_tool (int code, const char *message)
{
    return code == -32602 && message
        && (strcasestr (message, "unknown tool") || strcasestr (message, "not found"));
}

void
dsh_mcp_content_from_error (const json_t *error_object, dsh_result_t *result)
{
    assert (result);
    json_int_t code = json_integer_value (json_object_get (error_object, "code"));
    const char *message = json_string_value (json_object_get (error_object, "message"));
    dsh_result_error (result, code == -32602? DSH_E_INVALID_ARGS: DSH_E_TOOL_FAILED, "%s",
                      message? message: "the MCP server failed the call");
    if (json_is_object (error_object) && json_is_integer (json_object_get (error_object, "code")) && message)
        s_packed (error_object, s_add_error_field, result, "mcp");
}

int
dsh_mcp_content_to_result (const json_t *call_result, dsh_result_t *result,
                           char *error, size_t error_size)
{
    assert (result);
    const json_t *content = json_object_get (call_result, "content");
    if (!json_is_object (call_result) || !json_is_array (content)) {
        snprintf (error, error_size, "tools/call result without a content array");
        return -1;
    }
    size_t index;
    const json_t *block;
    json_array_foreach (content, index, block) {
        int known = s_check_block (block, error, error_size);
        if (known < 0)
            return -1;
        if (known == 1) {
            //  A kind from a later MCP revision: dsh cannot carry it as
            //  such, but the model can still read it
            char *json = json_dumps (block, JSON_COMPACT);
            dsh_result_text (result, json? json: "");
            free (json);
        }
        else
        if (s_packed (block, s_add_block, result, NULL)) {
            snprintf (error, error_size, "a content block nests too deep");
            return -1;
        }
    }
    const char *key;
    const json_t *value;
    json_object_foreach ((json_t *) call_result, key, value) {
        if (streq (key, "content") || streq (key, "isError"))
            continue;
        if (streq (key, "structuredContent") && json_is_null (value))
            continue;
        int rc = streq (key, "structuredContent")? s_packed (value, s_add_structured, result, NULL)
                                                : s_packed (value, s_add_field, result, key);
        if (rc) {
            snprintf (error, error_size, "\"%s\" nests too deep", key);
            return -1;
        }
    }
    //  The server's own words and blocks say what failed: no prefix added.
    //  The TypeScript SDK reports bad arguments so ("MCP error -32602:
    //  Input validation error: ..."): dsh's code says so too
    if (json_is_true (json_object_get (call_result, "isError"))) {
        const char *text = json_string_value (json_object_get (json_array_get (content, 0), "text"));
        bool invalid = text && strstr (text, "-32602") && strcasestr (text, "validation");
        dsh_result_fail (result, invalid? DSH_E_INVALID_ARGS: DSH_E_TOOL_FAILED);
    }
    return 0;
}
