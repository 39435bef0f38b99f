/*  =========================================================================
    dsh_trace - a stage that marks calls and results, to show the chain work
    =========================================================================
*/

#include "dsh_trace.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_settings.h"

typedef struct {
    char *label;
    char *veto;                 //  NULL: none
} self_t;

json_t *
dsh_trace_mark_arguments (json_t *arguments, const char *label)
{
    assert (label);
    const char *message = json_string_value (json_object_get (arguments, "message"));
    if (message) {
        char *marked = zsys_sprintf ("%s %s:before", message, label);
        json_object_set_new (arguments, "message", json_string (marked));
        zstr_free (&marked);
    }
    return arguments;
}

int
dsh_trace_mark_result (json_t *result, const char *label)
{
    assert (label);
    size_t index;
    json_t *block;
    json_array_foreach (json_object_get (result, "content"), index, block) {
        const char *text = json_string_value (json_object_get (block, "text"));
        const char *type = json_string_value (json_object_get (block, "type"));
        if (type && streq (type, "text") && text) {
            char *marked = zsys_sprintf ("%s %s:after", text, label);
            json_object_set_new (block, "text", json_string (marked));
            zstr_free (&marked);
            return 0;
        }
    }
    return -1;
}

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_stage_call_t *call, void *arg)
{
    (void) stage;
    self_t *self = (self_t *) arg;
    const char *tool = dsh_stage_call_name (call);
    if (self->veto && streq (tool, self->veto)) {
        dsh_stage_call_answer_error (call, DSH_E_DENIED, "tool \"%s\" vetoed by %s", tool, self->label);
        return DSH_STAGE_ANSWER;
    }
    const msgpack_object *arguments = dsh_stage_call_arguments (call);
    const msgpack_object *message = arguments? dsh_map_get (arguments, "message"): NULL;
    if (message && message->type == MSGPACK_OBJECT_STR) {
        json_t *json = dsh_json_from_msgpack (arguments);
        if (json)
            dsh_stage_call_set_arguments (call, dsh_trace_mark_arguments (json, self->label));
    }
    const msgpack_object *trace = dsh_map_get (dsh_stage_call_meta (call), "trace");
    json_t *labels = trace? dsh_json_from_msgpack (trace): NULL;
    if (!json_is_array (labels)) {
        json_decref (labels);
        labels = json_array ();
    }
    json_array_append_new (labels, json_string (self->label));
    dsh_stage_call_set_meta (call, "trace", labels);
    dsh_stage_call_watch_result (call);
    return DSH_STAGE_PASS;
}

static void
s_on_result (dsh_stage_t *stage, dsh_stage_call_t *call, void *arg)
{
    (void) stage;
    self_t *self = (self_t *) arg;
    json_t *result = dsh_stage_call_result (call);
    if (result && dsh_trace_mark_result (result, self->label) == 0)
        dsh_stage_call_set_result (call, result);
    else
        json_decref (result);
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
dsh_trace_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
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
            //  Labels end up in JSON text: they must be UTF-8 (and not empty)
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
