/*  =========================================================================
    dsh_tracemark - the "trace" stage kind: a stage that marks calls and results, to show the chain work
    =========================================================================
*/

#include "dsh_tracemark.h"
#include "dsh_proto.h"
#include "dsh_settings.h"

typedef struct {
    char *label;
    char *veto;                 //  NULL: none
} self_t;

//  Packs a str with " <label>:<when>" after it.
static void
s_pack_marked (msgpack_packer *pk, const msgpack_object *text, const char *label, const char *when)
{
    size_t label_size = strlen (label);
    size_t when_size = strlen (when);
    msgpack_pack_str (pk, text->via.str.size + 1 + label_size + 1 + when_size);
    msgpack_pack_str_body (pk, text->via.str.ptr, text->via.str.size);
    msgpack_pack_str_body (pk, " ", 1);
    msgpack_pack_str_body (pk, label, label_size);
    msgpack_pack_str_body (pk, ":", 1);
    msgpack_pack_str_body (pk, when, when_size);
}

//  True if map holds a str under key.
static bool
s_has_str (const msgpack_object *map, const char *key)
{
    const msgpack_object *value = dsh_map_get (map, key);
    return value && value->type == MSGPACK_OBJECT_STR;
}

//  Packs a map as it is, but for the str under key, marked.
static void
s_pack_map_marked (msgpack_packer *pk, const msgpack_object *map, const char *key, const char *label,
                   const char *when)
{
    msgpack_pack_map (pk, map->via.map.size);
    for (uint32_t index = 0; index < map->via.map.size; index++) {
        const msgpack_object_kv *entry = &map->via.map.ptr [index];
        msgpack_pack_object (pk, entry->key);
        if (dsh_str_eq (&entry->key, key) && entry->val.type == MSGPACK_OBJECT_STR)
            s_pack_marked (pk, &entry->val, label, when);
        else
            msgpack_pack_object (pk, entry->val);
    }
}

//  Packs meta "trace" with label appended: the labels so far, if an array.
static void
s_pack_trace (msgpack_packer *pk, const msgpack_object *trace, const char *label)
{
    bool is_array = trace && trace->type == MSGPACK_OBJECT_ARRAY;
    uint32_t count = is_array? trace->via.array.size: 0;
    msgpack_pack_array (pk, count + 1);
    for (uint32_t index = 0; index < count; index++)
        msgpack_pack_object (pk, trace->via.array.ptr [index]);
    dsh_pack_cstr (pk, label);
}

//  The index of the result's first text block, or -1.
static int64_t
s_first_text (const msgpack_object *content)
{
    if (!content || content->type != MSGPACK_OBJECT_ARRAY)
        return -1;
    for (uint32_t index = 0; index < content->via.array.size; index++) {
        const msgpack_object *block = &content->via.array.ptr [index];
        if (dsh_str_eq (dsh_map_get (block, "type"), "text") && s_has_str (block, "text"))
            return index;
    }
    return -1;
}

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    self_t *self = (self_t *) arg;
    const char *tool = dsh_call_name (call);
    if (self->veto && streq (tool, self->veto)) {
        dsh_stage_call_answer_error (call, DSH_E_DENIED, "tool \"%s\" vetoed by %s", tool, self->label);
        return DSH_STAGE_ANSWER;
    }
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    const msgpack_object *arguments = dsh_call_arguments (call);
    if (s_has_str (arguments, "message")) {
        s_pack_map_marked (&packer.pk, arguments, "message", self->label, "before");
        dsh_stage_call_set_arguments (call, packer.sbuf.data, packer.sbuf.size);
        msgpack_sbuffer_clear (&packer.sbuf);
    }
    s_pack_trace (&packer.pk, dsh_map_get (dsh_call_meta (call), "trace"), self->label);
    dsh_stage_call_set_meta (call, "trace", packer.sbuf.data, packer.sbuf.size);
    dsh_packer_release (&packer);
    dsh_stage_call_watch_result (call);
    return DSH_STAGE_PASS;
}

static void
s_on_result (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    self_t *self = (self_t *) arg;
    const msgpack_object *result = dsh_stage_call_result (call);
    const msgpack_object *content = dsh_map_get (result, "content");
    int64_t marked = s_first_text (content);
    if (marked < 0)
        return;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, result->via.map.size);
    for (uint32_t index = 0; index < result->via.map.size; index++) {
        const msgpack_object_kv *entry = &result->via.map.ptr [index];
        msgpack_pack_object (&packer.pk, entry->key);
        if (&entry->val != content)
            msgpack_pack_object (&packer.pk, entry->val);
        else {
            msgpack_pack_array (&packer.pk, content->via.array.size);
            for (uint32_t block = 0; block < content->via.array.size; block++)
                if (block == marked)
                    s_pack_map_marked (&packer.pk, &content->via.array.ptr [block], "text", self->label, "after");
                else
                    msgpack_pack_object (&packer.pk, content->via.array.ptr [block]);
        }
    }
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_stage_call_set_result (call, &body);
}

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        zstr_free (&(*self_p)->label);
        zstr_free (&(*self_p)->veto);
        free (*self_p);
        *self_p = NULL;
    }
}

static void
s_on_destroy (void *arg)
{
    self_t *self = (self_t *) arg;
    s_self_destroy (&self);
}

int
dsh_tracemark_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                 dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    assert (callbacks);
    assert (arg);
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    int rc = 0;
    zconfig_t *item = settings? zconfig_child (settings): NULL;
    for (; item && rc == 0; item = zconfig_next (item)) {
        const char *key = zconfig_name (item);
        const char *value = zconfig_value (item)? zconfig_value (item): "";
        if (streq (key, "label") || streq (key, "veto")) {
            //  Labels end up in JSON text (at the edges): they must be UTF-8
            //  (and not empty)
            json_t *check = json_string (value);
            if (!check || !*value) {
                snprintf (error, error_size, "%s: \"%s\" must be non-empty UTF-8 text", key, value);
                rc = -1;
            }
            json_decref (check);
            char **target = streq (key, "label")? &self->label: &self->veto;
            zstr_free (target);
            *target = strdup (value);
        }
        else
        if (!dsh_settings_chain_key (key)) {
            snprintf (error, error_size, "unknown setting \"%s\"", key);
            rc = -1;
        }
    }
    if (rc) {
        s_self_destroy (&self);
        return -1;
    }
    if (!self->label)
        self->label = strdup (context && context->name? context->name: "trace");
    *callbacks = (dsh_stage_callbacks_t) {
        .on_request = s_on_request,
        .on_result = s_on_result,
        .on_destroy = s_on_destroy
    };
    *arg = self;
    return 0;
}
