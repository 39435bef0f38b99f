/*  =========================================================================
    dsh_toolhints - what a tool entry says the tool is, as policies read it
    =========================================================================
*/

#include "dsh_toolhints.h"
#include "dsh_doc.h"
#include "dsh_stage.h"

static bool
s_msgpack_bool (const msgpack_object *value, bool fallback)
{
    return value && value->type == MSGPACK_OBJECT_BOOLEAN? value->via.boolean: fallback;
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

int
dsh_toolhints_allowed (const msgpack_object *tools, dsh_toolhints_judge_fn *judge, void *arg,
                       msgpack_packer *pk)
{
    assert (judge);
    assert (pk);
    if (!tools || tools->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    //  The names let through, as they came, counted before they are packed
    const msgpack_object **allowed = (const msgpack_object **) zmalloc ((tools->via.array.size + 1)
                                                                        * sizeof (msgpack_object *));
    uint32_t count = 0;
    for (uint32_t index = 0; index < tools->via.array.size; index++) {
        const msgpack_object *tool = &tools->via.array.ptr [index];
        const msgpack_object *name = tool->type == MSGPACK_OBJECT_MAP? dsh_map_get (tool, "name"): tool;
        char *text = dsh_stage_strdup (name);
        dsh_toolhints_t hints = dsh_toolhints_from_msgpack (tool);
        if (text && judge (text, &hints, arg))
            allowed [count++] = name;
        zstr_free (&text);
    }
    msgpack_pack_array (pk, count);
    for (uint32_t index = 0; index < count; index++)
        msgpack_pack_object (pk, *allowed [index]);
    free (allowed);
    return 0;
}
