/*  =========================================================================
    dsh_pass - a stage that passes every call on untouched

    The cost of a stage and nothing else: what the benchmarks put in the
    chain to measure a hop, and a template for writing a new middleware.
    It takes no settings.
    =========================================================================
*/

#ifndef DSH_PASS_H_INCLUDED
#define DSH_PASS_H_INCLUDED

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Set up a pass-through stage. Returns 0, or -1 if settings hold anything
//  but the chain's own keys.
int
    dsh_pass_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                    dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
