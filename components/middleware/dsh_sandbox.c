/*  =========================================================================
    dsh_sandbox - a sandbox policy per agent, stamped on each call

    The stage decides nothing that needs waiting: every call is answered
    (refused under read-only) or passed with its stamp at once.
    =========================================================================
*/

#include "dsh_sandbox.h"
#include "dsh_doc.h"
#include "dsh_permission.h"
#include "dsh_proto.h"

#include <fnmatch.h>
#include <jansson.h>
#include <string.h>

typedef struct {
    char *id;                   //  a glob on the agent id
    dsh_sandbox_policy_t policy;
    char *workspace;            //  or NULL: the default workspace
} s_agent_rule_t;

struct _dsh_sandbox_t {
    dsh_sandbox_policy_t policy;
    char *workspace;            //  or NULL
    char *approval;             //  the permission stage whose approvals count, or NULL
    zlistx_t *agents;           //  s_agent_rule_t, in config order
};

const char *
dsh_sandbox_policy_name (dsh_sandbox_policy_t policy)
{
    return policy == DSH_SANDBOX_READ_ONLY? "read-only"
         : policy == DSH_SANDBOX_WORKSPACE_WRITE? "workspace-write"
         : "danger-full-access";
}

int
dsh_sandbox_policy_parse (const char *name, dsh_sandbox_policy_t *policy_p)
{
    if (!name)
        return -1;
    if (streq (name, "read-only"))
        *policy_p = DSH_SANDBOX_READ_ONLY;
    else
    if (streq (name, "workspace-write"))
        *policy_p = DSH_SANDBOX_WORKSPACE_WRITE;
    else
    if (streq (name, "danger-full-access"))
        *policy_p = DSH_SANDBOX_DANGER_FULL_ACCESS;
    else
        return -1;
    return 0;
}

bool
dsh_sandbox_refuses (dsh_sandbox_policy_t policy, bool read_only_hint, bool destructive_hint)
{
    return policy == DSH_SANDBOX_READ_ONLY && !read_only_hint && destructive_hint;
}

dsh_sandbox_verdict_t
dsh_sandbox_check (dsh_sandbox_policy_t policy, const dsh_toolhints_t *hints, bool approved)
{
    assert (hints);
    if (dsh_sandbox_refuses (policy, hints->read_only, hints->destructive))
        return DSH_SANDBOX_REFUSED;
    //  A tool that may write and does not enforce the stamp could write
    //  anywhere its component can: only a human may let that happen
    if (policy != DSH_SANDBOX_DANGER_FULL_ACCESS && !hints->read_only && !hints->confined && !approved)
        return DSH_SANDBOX_UNCONFINED;
    return DSH_SANDBOX_PASSED;
}

static void
s_agent_rule_destroy (void **item_p)
{
    s_agent_rule_t *rule = (s_agent_rule_t *) *item_p;
    if (rule) {
        zstr_free (&rule->id);
        zstr_free (&rule->workspace);
        free (rule);
        *item_p = NULL;
    }
}

void
dsh_sandbox_destroy (dsh_sandbox_t **self_p)
{
    assert (self_p);
    dsh_sandbox_t *self = *self_p;
    if (self) {
        zlistx_destroy (&self->agents);
        zstr_free (&self->workspace);
        zstr_free (&self->approval);
        free (self);
        *self_p = NULL;
    }
}

static s_agent_rule_t *
s_agent_rule_new (zconfig_t *section, int number, char *error, size_t error_size)
{
    s_agent_rule_t *rule = (s_agent_rule_t *) zmalloc (sizeof (s_agent_rule_t));
    const char *id = NULL, *policy = NULL, *workspace = NULL;
    for (zconfig_t *child = zconfig_child (section); child; child = zconfig_next (child)) {
        const char *key = zconfig_name (child);
        if (streq (key, "id"))
            id = zconfig_value (child);
        else
        if (streq (key, "policy"))
            policy = zconfig_value (child);
        else
        if (streq (key, "workspace"))
            workspace = zconfig_value (child);
        else {
            snprintf (error, error_size, "agent %d: unknown setting \"%s\"", number, key);
            goto failed;
        }
    }
    if (!id || !*id) {
        snprintf (error, error_size, "agent %d: id is required", number);
        goto failed;
    }
    if (dsh_sandbox_policy_parse (policy, &rule->policy) != 0) {
        snprintf (error, error_size,
                  "agent %d: policy must be read-only, workspace-write or danger-full-access", number);
        goto failed;
    }
    rule->id = strdup (id);
    rule->workspace = workspace && *workspace? strdup (workspace): NULL;
    return rule;

failed:
    s_agent_rule_destroy ((void **) &rule);
    return NULL;
}

dsh_sandbox_t *
dsh_sandbox_new (zconfig_t *settings, char *error, size_t error_size)
{
    dsh_sandbox_t *self = (dsh_sandbox_t *) zmalloc (sizeof (dsh_sandbox_t));
    self->policy = DSH_SANDBOX_READ_ONLY;
    self->agents = zlistx_new ();
    zlistx_set_destructor (self->agents, s_agent_rule_destroy);
    const char *policy = settings? zconfig_get (settings, "default", NULL): NULL;
    if (policy && dsh_sandbox_policy_parse (policy, &self->policy) != 0) {
        snprintf (error, error_size,
                  "default must be read-only, workspace-write or danger-full-access, not \"%s\"", policy);
        dsh_sandbox_destroy (&self);
        return NULL;
    }
    const char *workspace = settings? zconfig_get (settings, "workspace", NULL): NULL;
    if (workspace && *workspace)
        self->workspace = strdup (workspace);
    if (self->policy == DSH_SANDBOX_WORKSPACE_WRITE && !self->workspace) {
        snprintf (error, error_size, "default workspace-write needs a workspace");
        dsh_sandbox_destroy (&self);
        return NULL;
    }
    const char *approval = settings? zconfig_get (settings, "approval", NULL): NULL;
    if (approval && *approval) {
        //  The stamp is trusted only if that stage removed the caller's
        //  own before: one that comes after this stage (a later sibling
        //  in the chain's section) would pass the caller's through
        const char *name = zconfig_get (settings, "name", "");
        bool later = streq (approval, name);
        for (zconfig_t *stage = zconfig_next (settings); stage && !later; stage = zconfig_next (stage))
            later = streq (zconfig_get (stage, "name", ""), approval);
        if (later) {
            snprintf (error, error_size, "approval: stage \"%s\" must come before this stage in the chain",
                      approval);
            dsh_sandbox_destroy (&self);
            return NULL;
        }
        self->approval = strdup (approval);
    }
    else
    if (approval) {
        snprintf (error, error_size, "approval: a stage name is required");
        dsh_sandbox_destroy (&self);
        return NULL;
    }
    int number = 0;
    for (zconfig_t *child = settings? zconfig_child (settings): NULL; child; child = zconfig_next (child)) {
        if (!streq (zconfig_name (child), "agent"))
            continue;           //  the broker's own settings for the stage
        s_agent_rule_t *rule = s_agent_rule_new (child, ++number, error, error_size);
        if (rule && rule->policy == DSH_SANDBOX_WORKSPACE_WRITE && !rule->workspace && !self->workspace) {
            snprintf (error, error_size, "agent %d: workspace-write needs a workspace", number);
            s_agent_rule_destroy ((void **) &rule);
        }
        if (!rule) {
            dsh_sandbox_destroy (&self);
            return NULL;
        }
        zlistx_add_end (self->agents, rule);
    }
    return self;
}

dsh_sandbox_policy_t
dsh_sandbox_policy_for (dsh_sandbox_t *self, const char *agent, const char **workspace_p)
{
    assert (self);
    for (s_agent_rule_t *rule = (s_agent_rule_t *) zlistx_first (self->agents); rule;
         rule = (s_agent_rule_t *) zlistx_next (self->agents))
        if (fnmatch (rule->id, agent? agent: "", 0) == 0) {
            if (workspace_p)
                *workspace_p = rule->workspace? rule->workspace: self->workspace;
            return rule->policy;
        }
    if (workspace_p)
        *workspace_p = self->workspace;
    return self->policy;
}

const char *
dsh_sandbox_approval (dsh_sandbox_t *self)
{
    assert (self);
    return self->approval;
}

bool
dsh_sandbox_approved (dsh_sandbox_t *self, const msgpack_object *meta)
{
    assert (self);
    const msgpack_object *stage = dsh_map_get (dsh_map_get (meta, DSH_PERMISSION_APPROVAL_META), "stage");
    return self->approval && dsh_str_eq (stage, self->approval);
}

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    dsh_sandbox_t *self = (dsh_sandbox_t *) arg;
    const char *agent = dsh_call_agent (call);
    const char *workspace = NULL;
    dsh_sandbox_policy_t policy = dsh_sandbox_policy_for (self, agent, &workspace);
    dsh_toolhints_t hints = dsh_toolhints_from_msgpack (dsh_stage_call_tool (call));
    dsh_sandbox_verdict_t verdict = dsh_sandbox_check (policy, &hints,
                                                       dsh_sandbox_approved (self, dsh_call_meta (call)));
    if (verdict != DSH_SANDBOX_PASSED && !dsh_stage_call_tool (call)) {
        //  Judged as the least safe tool it could be, and refused as what
        //  it is at this moment: a tool nobody serves
        dsh_stage_call_answer_error (call, DSH_E_UNKNOWN_TOOL, "unknown tool \"%s\"", dsh_call_name (call));
        return DSH_STAGE_ANSWER;
    }
    if (verdict == DSH_SANDBOX_REFUSED) {
        dsh_stage_call_answer_error (call, DSH_E_DENIED, "tool \"%s\" may write, and agent \"%s\" is read-only",
                                     dsh_call_name (call), agent? agent: "");
        return DSH_STAGE_ANSWER;
    }
    if (verdict == DSH_SANDBOX_UNCONFINED) {
        if (self->approval)
            dsh_stage_call_answer_error (call, DSH_E_DENIED,
                                         "tool \"%s\" may write and does not enforce the sandbox (%s): "
                                         "it needs approval (stage \"%s\")",
                                         dsh_call_name (call), dsh_sandbox_policy_name (policy), self->approval);
        else
            dsh_stage_call_answer_error (call, DSH_E_DENIED,
                                         "tool \"%s\" may write and does not enforce the sandbox (%s)",
                                         dsh_call_name (call), dsh_sandbox_policy_name (policy));
        return DSH_STAGE_ANSWER;
    }
    dsh_packer_t stamp;
    dsh_packer_init (&stamp);
    msgpack_pack_map (&stamp.pk, workspace? 2: 1);
    dsh_packer_kv_str (&stamp, "policy", dsh_sandbox_policy_name (policy));
    if (workspace)
        dsh_packer_kv_str (&stamp, "workspace", workspace);
    dsh_stage_call_set_meta (call, "sandbox", stamp.sbuf.data, stamp.sbuf.size);
    dsh_packer_release (&stamp);
    return DSH_STAGE_PASS;
}

typedef struct {
    dsh_sandbox_t *sandbox;
    dsh_sandbox_policy_t policy;    //  the asking agent's
} s_allowed_t;

static bool
s_allowed (const char *name, const dsh_toolhints_t *hints, void *arg)
{
    (void) name;
    s_allowed_t *query = (s_allowed_t *) arg;
    return dsh_sandbox_check (query->policy, hints, query->sandbox->approval != NULL) == DSH_SANDBOX_PASSED;
}

//  allowed {agent, tools}: the names of the tools the agent could be let
//  to call here (an unconfined tool only if an approval can let it).
static int
s_on_control (dsh_stage_t *stage, const char *command, const msgpack_object *args, dsh_packer_t *reply,
              char **error, void *arg)
{
    (void) stage;
    dsh_sandbox_t *self = (dsh_sandbox_t *) arg;
    if (!streq (command, "allowed"))
        return -1;
    char *agent = dsh_stage_strdup (dsh_map_get (args, "agent"));
    s_allowed_t query = { self, dsh_sandbox_policy_for (self, agent, NULL) };
    zstr_free (&agent);
    if (dsh_toolhints_allowed (dsh_map_get (args, "tools"), s_allowed, &query, &reply->pk) == 0)
        return 0;
    *error = strdup (DSH_PERMISSION_ALLOWED_USAGE);
    return -1;
}

static void
s_on_destroy (void *arg)
{
    dsh_sandbox_t *self = (dsh_sandbox_t *) arg;
    dsh_sandbox_destroy (&self);
}

int
dsh_sandbox_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                   dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    (void) context;
    assert (callbacks);
    assert (arg);
    dsh_sandbox_t *self = dsh_sandbox_new (settings, error, error_size);
    if (!self)
        return -1;
    memset (callbacks, 0, sizeof *callbacks);
    callbacks->on_request = s_on_request;
    callbacks->on_control = s_on_control;
    callbacks->on_destroy = s_on_destroy;
    *arg = self;
    return 0;
}
