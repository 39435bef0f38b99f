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

//  Decodes base64 text; NULL if it is not valid base64.
static zchunk_t *
s_base64_decode (const char *text)
{
    size_t length = strlen (text);
    if (length == 0)
        return zchunk_new (NULL, 0);
    if (length % 4)
        return NULL;
    zarmour_t *armour = zarmour_new ();
    zarmour_set_mode (armour, ZARMOUR_MODE_BASE64_STD);
    zarmour_set_line_breaks (armour, false);
    zchunk_t *decoded = zarmour_decode (armour, text);
    zarmour_destroy (&armour);
    //  czmq's decoder adds a NUL after the bytes (for text): cut to the
    //  length the base64 says
    size_t size = length / 4 * 3 - (text [length - 1] == '=') - (text [length - 2] == '=');
    zchunk_t *bytes = decoded && zchunk_size (decoded) >= size? zchunk_new (zchunk_data (decoded), size): NULL;
    zchunk_destroy (&decoded);
    return bytes;
}

static int
s_media_block (const json_t *block, const char *type, dsh_result_t *result,
               char *error, size_t error_size)
{
    const char *data = s_member (block, "data");
    const char *mime_type = s_member (block, "mimeType");
    if (!data || !mime_type) {
        snprintf (error, error_size, "%s block without data or mimeType", type);
        return -1;
    }
    zchunk_t *bytes = s_base64_decode (data);
    if (!bytes) {
        snprintf (error, error_size, "%s block whose data is not base64", type);
        return -1;
    }
    if (streq (type, "image"))
        dsh_result_image (result, mime_type, zchunk_data (bytes), zchunk_size (bytes));
    else
        dsh_result_audio (result, mime_type, zchunk_data (bytes), zchunk_size (bytes));
    zchunk_destroy (&bytes);
    return 0;
}

static int
s_resource_block (const json_t *block, dsh_result_t *result, char *error, size_t error_size)
{
    const json_t *resource = json_object_get (block, "resource");
    const char *uri = s_member (resource, "uri");
    const char *mime_type = s_member (resource, "mimeType");
    const json_t *text = json_object_get (resource, "text");
    const char *blob = s_member (resource, "blob");
    if (!uri || (json_is_string (text) == (blob != NULL))) {
        snprintf (error, error_size, "resource block needs a uri and exactly one of text or blob");
        return -1;
    }
    if (text) {
        dsh_result_resource_text (result, uri, mime_type, json_string_value (text));
        return 0;
    }
    zchunk_t *bytes = s_base64_decode (blob);
    if (!bytes) {
        snprintf (error, error_size, "resource block whose blob is not base64");
        return -1;
    }
    dsh_result_resource_blob (result, uri, mime_type, zchunk_data (bytes), zchunk_size (bytes));
    zchunk_destroy (&bytes);
    return 0;
}

static int
s_block (const json_t *block, dsh_result_t *result, char *error, size_t error_size)
{
    const char *type = s_member (block, "type");
    if (!type) {
        snprintf (error, error_size, "content block without a type");
        return -1;
    }
    if (streq (type, "text")) {
        const json_t *text = json_object_get (block, "text");
        if (!json_is_string (text)) {
            snprintf (error, error_size, "text block without text");
            return -1;
        }
        dsh_result_text_n (result, json_string_value (text), json_string_length (text));
        return 0;
    }
    if (streq (type, "image") || streq (type, "audio"))
        return s_media_block (block, type, result, error, error_size);
    if (streq (type, "resource_link")) {
        const char *uri = s_member (block, "uri");
        const char *name = s_member (block, "name");
        if (!uri || !name) {
            snprintf (error, error_size, "resource_link block without uri or name");
            return -1;
        }
        dsh_result_resource_link (result, uri, name, s_member (block, "mimeType"),
                                  s_member (block, "description"));
        return 0;
    }
    if (streq (type, "resource"))
        return s_resource_block (block, result, error, error_size);
    //  A kind from a later MCP revision: dsh cannot carry it as such, but
    //  the model can still read it
    char *json = json_dumps (block, JSON_COMPACT);
    dsh_result_text (result, json? json: "");
    free (json);
    return 0;
}

char *
dsh_mcp_content_text (const json_t *call_result)
{
    const json_t *content = json_object_get (call_result, "content");
    zchunk_t *joined = zchunk_new (NULL, 0);
    size_t index;
    const json_t *block;
    json_array_foreach (content, index, block) {
        const char *type = s_member (block, "type");
        const json_t *text = json_object_get (block, "text");
        if (!type || !streq (type, "text") || !json_is_string (text))
            continue;
        if (zchunk_size (joined) > 0)
            zchunk_extend (joined, "\n", 1);
        zchunk_extend (joined, json_string_value (text), json_string_length (text));
    }
    zchunk_extend (joined, "", 1);
    char *text = strdup ((const char *) zchunk_data (joined));
    zchunk_destroy (&joined);
    return text;
}

bool
dsh_mcp_content_unknown_tool (int code, const char *message)
{
    if (!message)
        return false;
    if (strcasestr (message, "unknown tool"))
        return true;
    //  The TypeScript SDK says "MCP error -32602: Tool X not found"
    bool invalid_params = code == -32602 || strstr (message, "-32602");
    return invalid_params && strcasestr (message, "not found") && !strcasestr (message, "validation");
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
    if (json_is_true (json_object_get (call_result, "isError"))) {
        //  A dsh error result is one "Error: ..." text block: keep every
        //  text the server sent, once prefixed
        char *text = dsh_mcp_content_text (call_result);
        const char *message = strncmp (text, "Error: ", 7) == 0? text + 7: text;
        const char *code = DSH_E_TOOL_FAILED;
        if (dsh_mcp_content_unknown_tool (0, text))
            code = DSH_E_UNKNOWN_TOOL;
        else
        if (strstr (text, "-32602") && strcasestr (text, "validation"))
            code = DSH_E_INVALID_ARGS;
        dsh_result_error (result, code, "%s", *message? message: "the tool failed");
        free (text);
        return 0;
    }
    size_t index;
    const json_t *block;
    json_array_foreach (content, index, block)
        if (s_block (block, result, error, error_size))
            return -1;
    const json_t *structured = json_object_get (call_result, "structuredContent");
    if (structured && !json_is_null (structured)) {
        msgpack_sbuffer sbuf;
        msgpack_sbuffer_init (&sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
        int rc = dsh_json_to_msgpack (&pk, structured);
        if (rc == 0)
            dsh_result_structured (result, sbuf.data, sbuf.size);
        else
            snprintf (error, error_size, "structuredContent nests too deep");
        msgpack_sbuffer_destroy (&sbuf);
        if (rc)
            return -1;
    }
    return 0;
}
