/*  =========================================================================
    dsh_planmode - the plan-mode middleware: only read-only tools while planning
    =========================================================================
*/

#include "dsh_planmode.h"
#include "dsh_doc.h"
#include "dsh_permission.h"
#include "dsh_proto.h"
#include "dsh_settings.h"
#include "dsh_toolhints.h"

//  The original's words, with the way out that exists here: nothing serves
//  an exit_plan_mode tool, and a sticky mode is a human's to end
#define REFUSAL_FORMAT \
    "tool \"%s\" is not available in plan mode; continue planning and present your plan " \
    "when ready (%s)"
#define STICKY_WAY_OUT "plan mode ends when the operator runs `dsh mode %s%s%s normal`"
#define CALL_WAY_OUT "this call asked for plan mode: its meta says \"mode\": \"plan\""

struct _dsh_planmode_t {
    zlistx_t *allow;            //  tool names
    zhashx_t *planning;         //  agent id -> itself: only agents in plan mode
};

dsh_planmode_t *
dsh_planmode_new (zconfig_t *settings, char *error, size_t error_size)
{
    dsh_planmode_t *self = (dsh_planmode_t *) zmalloc (sizeof (dsh_planmode_t));
    assert (self);
    self->allow = dsh_settings_names (NULL);
    self->planning = zhashx_new ();
    assert (self->planning);
    int rc = 0;
    zconfig_t *item = settings? zconfig_child (settings): NULL;
    for (; item && rc == 0; item = zconfig_next (item)) {
        const char *key = zconfig_name (item);
        if (streq (key, "allow")) {
            zlistx_destroy (&self->allow);
            self->allow = dsh_settings_names (zconfig_value (item));
        }
        else
        if (!dsh_settings_chain_key (key)) {
            snprintf (error, error_size, "unknown setting \"%s\"", key);
            rc = -1;
        }
    }
    if (rc)
        dsh_planmode_destroy (&self);
    return self;
}

void
dsh_planmode_destroy (dsh_planmode_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_planmode_t *self = *self_p;
        zlistx_destroy (&self->allow);
        zhashx_destroy (&self->planning);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_planmode_set (dsh_planmode_t *self, const char *agent, const char *mode,
                  char *error, size_t error_size)
{
    assert (self);
    if (!agent)
        agent = "";
    //  "" is allowed: it is the agent of calls that name none
    if (*agent && !dsh_proto_valid_id (agent, strlen (agent))) {
        snprintf (error, error_size, "\"%.*s\" is not a valid agent id", DSH_ID_MAX, agent);
        return -1;
    }
    if (mode && streq (mode, "plan"))
        zhashx_update (self->planning, agent, (void *) "plan");
    else
    if (mode && streq (mode, "normal"))
        zhashx_delete (self->planning, agent);
    else {
        snprintf (error, error_size, "mode must be \"plan\" or \"normal\"");
        return -1;
    }
    return 0;
}

bool
dsh_planmode_planning (dsh_planmode_t *self, const char *agent)
{
    assert (self);
    return zhashx_lookup (self->planning, agent? agent: "") != NULL;
}

bool
dsh_planmode_call_planning (dsh_planmode_t *self, const char *agent, const char *meta_mode)
{
    assert (self);
    if (meta_mode && streq (meta_mode, "plan"))
        return true;
    return dsh_planmode_planning (self, agent);
}

bool
dsh_planmode_allows (dsh_planmode_t *self, const char *tool, bool read_only)
{
    assert (self);
    assert (tool);
    return read_only || zlistx_find (self->allow, (void *) tool) != NULL;
}

size_t
dsh_planmode_allow_size (dsh_planmode_t *self)
{
    assert (self);
    return zlistx_size (self->allow);
}

void
dsh_planmode_modes (dsh_planmode_t *self, msgpack_packer *pk)
{
    assert (self);
    assert (pk);
    msgpack_pack_map (pk, zhashx_size (self->planning));
    for (void *mode = zhashx_first (self->planning); mode; mode = zhashx_next (self->planning)) {
        dsh_pack_cstr (pk, (const char *) zhashx_cursor (self->planning));
        dsh_pack_cstr (pk, "plan");
    }
}

char *
dsh_planmode_refusal (const char *tool, const char *agent, bool sticky)
{
    assert (tool);
    if (!agent)
        agent = "";
    //  An empty agent id is typed as "" on a shell line
    const char *quote = *agent? "": "\"";
    char *way_out = sticky? zsys_sprintf (STICKY_WAY_OUT, quote, agent, quote): strdup (CALL_WAY_OUT);
    char *refusal = zsys_sprintf (REFUSAL_FORMAT, tool, way_out);
    zstr_free (&way_out);
    return refusal;
}

//  --- The stage -----------------------------------------------------------

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    dsh_planmode_t *self = (dsh_planmode_t *) arg;
    const msgpack_object *mode = dsh_map_get (dsh_call_meta (call), "mode");
    const char *meta_mode = dsh_str_eq (mode, "plan")? "plan": NULL;
    if (!dsh_planmode_call_planning (self, dsh_call_agent (call), meta_mode))
        return DSH_STAGE_PASS;
    const char *tool = dsh_call_name (call);
    if (dsh_planmode_allows (self, tool, dsh_stage_call_annotation (call, "readOnlyHint", false)))
        return DSH_STAGE_PASS;
    const char *agent = dsh_call_agent (call);
    char *refusal = dsh_planmode_refusal (tool, agent, dsh_planmode_planning (self, agent));
    dsh_stage_call_answer_error (call, DSH_E_DENIED, "%s", refusal);
    zstr_free (&refusal);
    return DSH_STAGE_ANSWER;
}

typedef struct {
    dsh_planmode_t *planmode;
    bool planning;              //  the asking agent plans now
} s_allowed_t;

static bool
s_allowed (const char *name, const dsh_toolhints_t *hints, void *arg)
{
    s_allowed_t *query = (s_allowed_t *) arg;
    return !query->planning || dsh_planmode_allows (query->planmode, name, hints->read_only);
}

static int
s_on_control (dsh_stage_t *stage, const char *command, const msgpack_object *args, dsh_packer_t *reply,
              char **error, void *arg)
{
    (void) stage;
    dsh_planmode_t *self = (dsh_planmode_t *) arg;
    if (streq (command, "modes")) {
        dsh_planmode_modes (self, &reply->pk);
        return 0;
    }
    if (streq (command, "allowed")) {
        //  The names of the tools the agent may call in its mode now
        char *agent = dsh_stage_strdup (dsh_map_get (args, "agent"));
        s_allowed_t query = { self, dsh_planmode_planning (self, agent) };
        zstr_free (&agent);
        if (dsh_toolhints_allowed (dsh_map_get (args, "tools"), s_allowed, &query, &reply->pk) == 0)
            return 0;
        *error = strdup (DSH_PERMISSION_ALLOWED_USAGE);
        return -1;
    }
    if (streq (command, "mode")) {
        const msgpack_object *agent_value = dsh_map_get (args, "agent");
        char *agent = dsh_stage_strdup (agent_value);
        char *mode = dsh_stage_strdup (dsh_map_get (args, "mode"));
        char reason [256];
        int rc = -1;
        if ((agent_value && !agent) || !mode)
            *error = strdup ("mode needs {\"agent\": \"<agent id>\", \"mode\": \"plan\" | \"normal\"}");
        else
        if (dsh_planmode_set (self, agent, mode, reason, sizeof (reason)))
            *error = strdup (reason);
        else {
            msgpack_pack_map (&reply->pk, 2);
            dsh_packer_kv_str (reply, "agent", agent? agent: "");
            dsh_packer_kv_str (reply, "mode", mode);
            rc = 0;
        }
        zstr_free (&agent);
        zstr_free (&mode);
        return rc;
    }
    return -1;
}

static void
s_on_destroy (void *arg)
{
    dsh_planmode_t *self = (dsh_planmode_t *) arg;
    dsh_planmode_destroy (&self);
}

int
dsh_planmode_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                    dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    assert (callbacks);
    assert (arg);
    (void) context;
    dsh_planmode_t *self = dsh_planmode_new (settings, error, error_size);
    if (!self)
        return -1;
    *callbacks = (dsh_stage_callbacks_t) {
        .on_request = s_on_request,
        .on_control = s_on_control,
        .on_destroy = s_on_destroy
    };
    *arg = self;
    return 0;
}
