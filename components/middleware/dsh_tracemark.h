/*  =========================================================================
    dsh_tracemark - the "trace" stage kind: a stage that marks calls and results, to show the chain work

    For tests and demos. On the way down it appends its label to the call's
    meta "trace" (an array: the labels of the stages passed so far), and if
    the arguments are a map with a str "message", rewrites it to
    message + " " + label + ":before"; on the way back it appends
    " " + label + ":after" to the result's first text block. Two trace
    stages around an echo tool thus give
        "hi first:before second:before second:after first:after"
    the onion of the tools/execute waterfall in dsh-tools (the
    single-process design dsh grew from). Settings (the stage's ZPL section):

        label = "first"         the mark (default: the stage's name)
        veto = "toolname"       answer calls of this tool here, DENIED
                                `tool "X" vetoed by <label>`
    =========================================================================
*/

#ifndef DSH_TRACEMARK_H_INCLUDED
#define DSH_TRACEMARK_H_INCLUDED

#include <czmq.h>

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Set up a trace stage (see dsh_middleware_setup).
int
    dsh_tracemark_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                     dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
