/*  =========================================================================
    dsh_sandbox - a sandbox policy per agent, stamped on each call

    Settings (the stage's config section):

        default = "read-only"           read-only | workspace-write |
                                        danger-full-access (default read-only)
        workspace = "/srv/ws"           required by workspace-write
        agent                           repeatable; the first whose id
            id = "planner-*"            (a glob) matches the caller wins
            policy = "workspace-write"
            workspace = "/srv/planner"  optional override

        approval = "permission"         the permission stage, earlier in
                                        the chain, whose approvals let an
                                        unconfined tool write (default none)

    Every call passes with meta "sandbox" = {policy, workspace?}, replacing
    whatever the caller sent: a caller cannot grant itself a policy. Tools
    enforce it (dsh-fs does). Under read-only the stage also refuses at
    once a tool that may write: one not annotated readOnlyHint true, unless
    it is annotated destructiveHint false. Under read-only and
    workspace-write a tool that is not read-only and whose entry does not
    say "confined": true (its component enforces the stamp) is refused
    unless the call carries the approval stamp of the stage named by
    approval (meta "approval" {stage}, which that stage removes from every
    call it did not approve); with no approval setting it is always
    refused. A tool that is not registered is judged by MCP's defaults
    (dsh_toolhints): it may write and is not confined, so where it would
    be refused it is answered UNKNOWN_TOOL.
    =========================================================================
*/

#ifndef DSH_SANDBOX_H_INCLUDED
#define DSH_SANDBOX_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

#include "dsh_middleware.h"
#include "dsh_toolhints.h"

#ifdef __cplusplus
extern "C" {
#endif

//  What the sandbox makes of a call.
typedef enum {
    DSH_SANDBOX_PASSED,
    DSH_SANDBOX_REFUSED,            //  may write, and the policy is read-only
    DSH_SANDBOX_UNCONFINED          //  may write, does not enforce the policy, not approved
} dsh_sandbox_verdict_t;

typedef enum {
    DSH_SANDBOX_READ_ONLY,
    DSH_SANDBOX_WORKSPACE_WRITE,
    DSH_SANDBOX_DANGER_FULL_ACCESS
} dsh_sandbox_policy_t;

//  The parsed settings.
typedef struct _dsh_sandbox_t dsh_sandbox_t;

//  Fill callbacks and *arg for a sandbox stage from settings (NULL: every
//  agent read-only). Returns 0, or -1 with a reason naming the setting.
int
    dsh_sandbox_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                       dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

//  The settings of a sandbox stage, or NULL with a reason.
dsh_sandbox_t *
    dsh_sandbox_new (zconfig_t *settings, char *error, size_t error_size);

//  Destroy; safe twice.
void
    dsh_sandbox_destroy (dsh_sandbox_t **self_p);

//  The policy for agent (NULL: no agent, matched as ""), and in
//  *workspace_p (may be NULL) its workspace or NULL if none is set.
dsh_sandbox_policy_t
    dsh_sandbox_policy_for (dsh_sandbox_t *self, const char *agent, const char **workspace_p);

//  The policy's name ("workspace-write").
const char *
    dsh_sandbox_policy_name (dsh_sandbox_policy_t policy);

//  The policy named name. Returns 0, or -1 if name is no policy.
int
    dsh_sandbox_policy_parse (const char *name, dsh_sandbox_policy_t *policy_p);

//  True if a call to a tool with these annotations is refused under
//  policy. Pass the annotations with MCP's defaults for absent ones
//  (readOnlyHint false, destructiveHint true).
bool
    dsh_sandbox_refuses (dsh_sandbox_policy_t policy, bool read_only_hint, bool destructive_hint);

//  What the sandbox makes of a call to a tool with these hints under
//  policy, approved or not by a human.
dsh_sandbox_verdict_t
    dsh_sandbox_check (dsh_sandbox_policy_t policy, const dsh_toolhints_t *hints, bool approved);

//  The name of the stage whose approvals count, or NULL.
const char *
    dsh_sandbox_approval (dsh_sandbox_t *self);

//  True if a call's meta carries the approval stamp of that stage.
bool
    dsh_sandbox_approved (dsh_sandbox_t *self, const msgpack_object *meta);

#ifdef __cplusplus
}
#endif

#endif
