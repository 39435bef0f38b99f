/*  =========================================================================
    dsh_middleware - the built-in middlewares of the execution chain

    A table from kind to setup function and default timeout; everything
    else lives in each middleware's own file pair.
    =========================================================================
*/

#include "dsh_middleware.h"
#include "dsh_hooks.h"
#include "dsh_limit.h"
#include "dsh_pass.h"
#include "dsh_permission.h"
#include "dsh_planmode.h"
#include "dsh_sandbox.h"
#include "dsh_tracemark.h"

const dsh_stage_kind_t dsh_middleware_kinds [] = {
    //  Each default is longer than the stage itself waits (an ask's
    //  approval_timeout_ms, a hook's own timeout), so the stage answers
    //  before the chain gives up on it; the call's deadline comes first
    { "limit", dsh_limit_setup, 5000 },
    { "permission", dsh_permission_setup, 120000 + 10000 },
    { "plan", dsh_planmode_setup, 5000 },
    { "hooks", dsh_hooks_setup, DSH_HOOKS_DEFAULT_TIMEOUT_MS + 5000 },
    { "sandbox", dsh_sandbox_setup, 5000 },
    { "trace", dsh_tracemark_setup, 5000 },
    { "pass", dsh_pass_setup, 5000 },
    { NULL, NULL, 0 }
};

static int
s_kind_index (const char *kind)
{
    for (size_t index = 0; kind && dsh_middleware_kinds [index].kind; index++)
        if (streq (kind, dsh_middleware_kinds [index].kind))
            return (int) index;
    return -1;
}

int
dsh_middleware_setup (const char *kind, zconfig_t *settings, const dsh_middleware_context_t *context,
                      dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    assert (callbacks);
    assert (arg);
    int index = s_kind_index (kind);
    if (index == -1) {
        snprintf (error, error_size, "kind: unknown middleware \"%s\" (limit, permission, plan, hooks, sandbox, trace, pass)",
                  kind? kind: "");
        return -1;
    }
    *arg = NULL;
    return dsh_middleware_kinds [index].setup (settings, context, callbacks, arg, error, error_size);
}

bool
dsh_middleware_known (const char *kind)
{
    return s_kind_index (kind) != -1;
}
