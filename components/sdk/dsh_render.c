/*  =========================================================================
    dsh_render - the tool list in the shapes model providers expect

    JSON formats are printed with two-space indentation and keys in the order
    they are built (or, for copied schemas, in the order they arrived), so
    the same list always renders to the same bytes. Entries render as:

      openai     {type:"function", function:{name, description, parameters,
                 strict: true when the entry says so}}
      anthropic  {name, description, input_schema}
      mcp        {name, title?, description, inputSchema, outputSchema?,
                 annotations?} inside {tools:[...]}

    A missing description renders as "", and missing parameters as the empty
    object schema, since providers insist on both. Quarantined entries are
    left out of every format, json too: it is what an agent is given.

    Markdown is a "## Tools" section: per tool a "### name (title)" heading,
    the description, the hints that are true as bullets, and the parameters
    as nested bullets. When a schema says more than the bullets can (any
    keyword but type, description, enum, default, properties, required and
    items, or nesting past MARKDOWN_MAX_DEPTH), the full schema follows in
    a fenced json block, so nothing a model needs is lost.
    =========================================================================
*/

#include "dsh_render.h"

#include <czmq.h>
#include <string.h>

//  Deepest nesting of parameters shown as bullets.
#define MARKDOWN_MAX_DEPTH 8

#define RENDER_JSON_FLAGS (JSON_INDENT (2) | JSON_PRESERVE_ORDER)

//  The MCP annotation hints in display order, with their bullets.
static const struct {
    const char *key;
    const char *bullet;
} s_hints [] = {
    { "readOnlyHint",    "read-only" },
    { "destructiveHint", "destructive" },
    { "idempotentHint",  "idempotent" },
    { "openWorldHint",   "open world" },
};

dsh_render_format_t
dsh_render_format_from_name (const char *text)
{
    if (!text)
        return 0;
    if (streq (text, "json"))
        return DSH_RENDER_JSON;
    if (streq (text, "openai"))
        return DSH_RENDER_OPENAI;
    if (streq (text, "anthropic"))
        return DSH_RENDER_ANTHROPIC;
    if (streq (text, "mcp"))
        return DSH_RENDER_MCP;
    if (streq (text, "markdown"))
        return DSH_RENDER_MARKDOWN;
    return 0;
}

//  The entry's name, or NULL if the entry is not a tool entry at all.
static const char *
s_entry_name (const json_t *entry)
{
    return json_is_object (entry)
         ? json_string_value (json_object_get (entry, "name"))
         : NULL;
}

bool
dsh_render_quarantined (const json_t *entry)
{
    return json_is_true (json_object_get (entry, "quarantined"));
}

//  True if the entry is a tool entry an agent may be shown.
static bool
s_entry_shown (const json_t *entry)
{
    return s_entry_name (entry) && !dsh_render_quarantined (entry);
}

//  A string member, or "" when missing or not a string.
static const char *
s_text_member (const json_t *entry, const char *key)
{
    const char *text = json_string_value (json_object_get (entry, key));
    return text? text: "";
}

//  A copy of the entry's parameters, or the empty object schema.
static json_t *
s_parameters (const json_t *entry)
{
    json_t *parameters = json_object_get (entry, "parameters");
    if (json_is_object (parameters))
        return json_deep_copy (parameters);
    return json_pack ("{s:s, s:{}}", "type", "object", "properties");
}

//  Copies member key of from into to when it is of the wanted kind.
static void
s_copy_object (json_t *to, const char *to_key, const json_t *from, const char *key)
{
    json_t *value = json_object_get (from, key);
    if (json_is_object (value))
        json_object_set_new (to, to_key, json_deep_copy (value));
}

static json_t *
s_entry_openai (const json_t *entry)
{
    json_t *function = json_object ();
    json_object_set_new (function, "name", json_string (s_entry_name (entry)));
    json_object_set_new (function, "description", json_string (s_text_member (entry, "description")));
    json_object_set_new (function, "parameters", s_parameters (entry));
    if (json_is_true (json_object_get (entry, "strict")))
        json_object_set_new (function, "strict", json_true ());
    json_t *tool = json_object ();
    json_object_set_new (tool, "type", json_string ("function"));
    json_object_set_new (tool, "function", function);
    return tool;
}

static json_t *
s_entry_anthropic (const json_t *entry)
{
    json_t *tool = json_object ();
    json_object_set_new (tool, "name", json_string (s_entry_name (entry)));
    json_object_set_new (tool, "description", json_string (s_text_member (entry, "description")));
    json_object_set_new (tool, "input_schema", s_parameters (entry));
    return tool;
}

static json_t *
s_entry_mcp (const json_t *entry)
{
    json_t *tool = json_object ();
    json_object_set_new (tool, "name", json_string (s_entry_name (entry)));
    const char *title = s_text_member (entry, "title");
    if (*title)
        json_object_set_new (tool, "title", json_string (title));
    json_object_set_new (tool, "description", json_string (s_text_member (entry, "description")));
    json_object_set_new (tool, "inputSchema", s_parameters (entry));
    s_copy_object (tool, "outputSchema", entry, "outputSchema");
    s_copy_object (tool, "annotations", entry, "annotations");
    return tool;
}

static void
s_append (zchunk_t *out, const char *text)
{
    zchunk_extend (out, text, strlen (text));
}

//  A JSON value as it reads in a bullet: strings bare, the rest as JSON.
static char *
s_value_text (const json_t *value)
{
    if (json_is_string (value))
        return strdup (json_string_value (value));
    return json_dumps (value, JSON_COMPACT | JSON_ENCODE_ANY);
}

//  The type of a schema as it reads in a bullet: "string", "array of
//  integer", "string or null", or "any".
static char *
s_type_text (const json_t *schema)
{
    json_t *type = json_object_get (schema, "type");
    if (json_is_string (type)) {
        json_t *items = json_object_get (schema, "items");
        if (streq (json_string_value (type), "array") && json_is_object (items)
        &&  json_object_get (items, "type")) {
            char *item_type = s_type_text (items);
            char *text = zsys_sprintf ("array of %s", item_type);
            free (item_type);
            return text;
        }
        return strdup (json_string_value (type));
    }
    if (json_is_array (type) && json_array_size (type) > 0) {
        char *text = strdup ("");
        size_t index;
        json_t *member;
        json_array_foreach (type, index, member) {
            char *next = zsys_sprintf ("%s%s%s", text, index? " or ": "",
                                       json_is_string (member)? json_string_value (member): "?");
            free (text);
            text = next;
        }
        return text;
    }
    return strdup ("any");
}

static bool
s_is_required (const json_t *schema, const char *name)
{
    size_t index;
    json_t *member;
    json_array_foreach (json_object_get (schema, "required"), index, member)
        if (json_is_string (member) && streq (json_string_value (member), name))
            return true;
    return false;
}

//  True if the bullets show everything schema says.
static bool
s_bullets_suffice (const json_t *schema, int depth)
{
    if (!json_is_object (schema) || depth > MARKDOWN_MAX_DEPTH)
        return false;
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) schema, key, value) {
        if (streq (key, "type")) {
            if (!json_is_string (value))
                return false;
        }
        else
        if (streq (key, "description")) {
            if (!json_is_string (value))
                return false;
        }
        else
        if (streq (key, "enum")) {
            if (!json_is_array (value))
                return false;
        }
        else
        if (streq (key, "required")) {
            size_t index;
            json_t *member;
            if (!json_is_array (value))
                return false;
            json_array_foreach (value, index, member)
                if (!json_is_string (member))
                    return false;
        }
        else
        if (streq (key, "properties")) {
            const char *name;
            json_t *property;
            if (!json_is_object (value))
                return false;
            json_object_foreach (value, name, property)
                if (!s_bullets_suffice (property, depth + 1))
                    return false;
        }
        else
        if (streq (key, "items")) {
            if (!s_bullets_suffice (value, depth + 1))
                return false;
        }
        else
        if (!streq (key, "default"))
            return false;
    }
    return true;
}

//  Appends the bullets for the properties of schema, indented by depth.
static void
s_markdown_properties (zchunk_t *out, const json_t *schema, int depth)
{
    const char *name;
    json_t *property;
    json_t *properties = json_object_get (schema, "properties");
    if (!json_is_object (properties) || depth > MARKDOWN_MAX_DEPTH)
        return;
    json_object_foreach (properties, name, property) {
        char *type = s_type_text (property);
        for (int level = 0; level < depth; level++)
            s_append (out, "  ");
        char *head = zsys_sprintf ("- `%s` (%s%s)", name, type,
                                   s_is_required (schema, name)? ", required": "");
        s_append (out, head);
        free (head);
        free (type);

        const char *separator = ": ";
        const char *description = s_text_member (property, "description");
        if (*description) {
            s_append (out, separator);
            s_append (out, description);
            separator = "; ";
        }
        json_t *values = json_object_get (property, "enum");
        if (json_is_array (values)) {
            s_append (out, separator);
            s_append (out, "one of: ");
            size_t index;
            json_t *value;
            json_array_foreach (values, index, value) {
                char *text = s_value_text (value);
                if (index)
                    s_append (out, ", ");
                if (text)
                    s_append (out, text);
                free (text);
            }
            separator = "; ";
        }
        json_t *fallback = json_object_get (property, "default");
        if (fallback) {
            char *text = s_value_text (fallback);
            s_append (out, separator);
            s_append (out, "default: ");
            if (text)
                s_append (out, text);
            free (text);
        }
        s_append (out, "\n");

        //  An array's item fields read as the array's own children.
        json_t *items = json_object_get (property, "items");
        s_markdown_properties (out, json_is_object (items)? items: property, depth + 1);
    }
}

static void
s_markdown_tool (zchunk_t *out, const json_t *entry)
{
    const char *title = s_text_member (entry, "title");
    char *heading = *title
        ? zsys_sprintf ("### %s (%s)\n\n", s_entry_name (entry), title)
        : zsys_sprintf ("### %s\n\n", s_entry_name (entry));
    s_append (out, heading);
    free (heading);

    const char *description = s_text_member (entry, "description");
    if (*description) {
        s_append (out, description);
        s_append (out, "\n\n");
    }

    bool any_hint = false;
    json_t *annotations = json_object_get (entry, "annotations");
    for (size_t index = 0; index < sizeof (s_hints) / sizeof (s_hints [0]); index++) {
        if (json_is_true (json_object_get (annotations, s_hints [index].key))) {
            s_append (out, "- ");
            s_append (out, s_hints [index].bullet);
            s_append (out, "\n");
            any_hint = true;
        }
    }
    if (json_is_true (json_object_get (entry, "concurrencySafe"))) {
        s_append (out, "- concurrency-safe\n");
        any_hint = true;
    }
    if (any_hint)
        s_append (out, "\n");

    json_t *parameters = json_object_get (entry, "parameters");
    json_t *properties = json_object_get (parameters, "properties");
    if (json_is_object (properties) && json_object_size (properties) > 0) {
        s_append (out, "Parameters:\n\n");
        s_markdown_properties (out, parameters, 0);
        s_append (out, "\n");
    }
    else
        s_append (out, "Parameters: none\n\n");

    if (json_is_object (parameters) && !s_bullets_suffice (parameters, 0)) {
        char *schema = json_dumps (parameters, RENDER_JSON_FLAGS);
        s_append (out, "Full parameters schema:\n\n```json\n");
        if (schema)
            s_append (out, schema);
        s_append (out, "\n```\n\n");
        free (schema);
    }
}

static char *
s_render_markdown (const json_t *tools)
{
    zchunk_t *out = zchunk_new (NULL, 1024);
    s_append (out, "## Tools\n\n");
    size_t index;
    json_t *entry;
    size_t shown = 0;
    json_array_foreach (tools, index, entry) {
        if (s_entry_shown (entry)) {
            s_markdown_tool (out, entry);
            shown++;
        }
    }
    if (shown == 0)
        s_append (out, "No tools.\n\n");
    //  One trailing newline, not the blank line between sections.
    size_t size = zchunk_size (out) - 1;
    char *text = (char *) malloc (size + 1);
    if (text) {
        memcpy (text, zchunk_data (out), size);
        text [size] = 0;
    }
    zchunk_destroy (&out);
    return text;
}

char *
dsh_render (const json_t *tools, dsh_render_format_t format)
{
    if (!json_is_array (tools))
        return NULL;
    if (format == DSH_RENDER_MARKDOWN)
        return s_render_markdown (tools);
    if (format != DSH_RENDER_JSON && format != DSH_RENDER_OPENAI
    &&  format != DSH_RENDER_ANTHROPIC && format != DSH_RENDER_MCP)
        return NULL;

    json_t *list = json_array ();
    size_t index;
    json_t *entry;
    json_array_foreach (tools, index, entry) {
        if (!s_entry_shown (entry))
            continue;
        json_t *rendered = format == DSH_RENDER_OPENAI?    s_entry_openai (entry)
                         : format == DSH_RENDER_ANTHROPIC? s_entry_anthropic (entry)
                         : format == DSH_RENDER_MCP?       s_entry_mcp (entry)
                         :                                 json_deep_copy (entry);
        json_array_append_new (list, rendered);
    }
    json_t *output = format == DSH_RENDER_MCP? json_pack ("{s:o}", "tools", list): list;
    char *text = json_dumps (output, RENDER_JSON_FLAGS);
    json_decref (output);
    return text;
}
