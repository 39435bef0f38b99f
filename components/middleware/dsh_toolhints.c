/*  =========================================================================
    dsh_toolhints - what a tool entry says the tool is, as policies read it
    =========================================================================
*/

#include "dsh_toolhints.h"
#include "dsh_doc.h"

static bool
s_msgpack_bool (const msgpack_object *value, bool fallback)
{
    return value && value->type == MSGPACK_OBJECT_BOOLEAN? value->via.boolean: fallback;
}

static bool
s_json_bool (const json_t *value, bool fallback)
{
    return json_is_boolean (value)? json_is_true (value): fallback;
}

dsh_toolhints_t
dsh_toolhints_from_msgpack (const msgpack_object *entry)
{
    const msgpack_object *annotations = dsh_map_get (entry, "annotations");
    return (dsh_toolhints_t) {
        .read_only = s_msgpack_bool (dsh_map_get (annotations, "readOnlyHint"), false),
        .destructive = s_msgpack_bool (dsh_map_get (annotations, "destructiveHint"), true),
        .open_world = s_msgpack_bool (dsh_map_get (annotations, "openWorldHint"), true),
        .confined = s_msgpack_bool (dsh_map_get (entry, DSH_TOOLHINTS_CONFINED), false)
    };
}

dsh_toolhints_t
dsh_toolhints_from_json (const json_t *entry)
{
    const json_t *annotations = json_object_get (entry, "annotations");
    return (dsh_toolhints_t) {
        .read_only = s_json_bool (json_object_get (annotations, "readOnlyHint"), false),
        .destructive = s_json_bool (json_object_get (annotations, "destructiveHint"), true),
        .open_world = s_json_bool (json_object_get (annotations, "openWorldHint"), true),
        .confined = s_json_bool (json_object_get (entry, DSH_TOOLHINTS_CONFINED), false)
    };
}
