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

    Every call passes with meta "sandbox" = {policy, workspace?}, replacing
    whatever the caller sent: a caller cannot grant itself a policy. Tools
    enforce it (dsh-fs does). Under read-only the stage also refuses at
    once a tool that may write: one not annotated readOnlyHint true, unless
    it is annotated destructiveHint false. Unknown tools pass (the registry
    answers UNKNOWN_TOOL).
    =========================================================================
*/

#ifndef DSH_SANDBOX_H_INCLUDED
#define DSH_SANDBOX_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif

#endif
