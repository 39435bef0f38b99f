/*  =========================================================================
    dsh_pass - a stage that passes every call on untouched
    =========================================================================
*/

#include "dsh_pass.h"
#include "dsh_settings.h"

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    (void) call;
    (void) arg;
    return DSH_STAGE_PASS;
}

int
dsh_pass_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    (void) context;
    for (zconfig_t *item = settings? zconfig_child (settings): NULL; item; item = zconfig_next (item))
        if (!dsh_settings_chain_key (zconfig_name (item))) {
            snprintf (error, error_size, "unknown setting \"%s\" (a pass stage takes none)", zconfig_name (item));
            return -1;
        }
    memset (callbacks, 0, sizeof (*callbacks));
    callbacks->on_request = s_on_request;
    *arg = NULL;
    return 0;
}
