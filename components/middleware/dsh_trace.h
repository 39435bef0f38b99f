/*  =========================================================================
    dsh_trace - a stage that marks calls and results, to show the chain work

    For tests and demos. On the way down it appends its label to the call's
    meta "trace" (an array: the labels of the stages passed so far), and if
    the arguments are a map with a str "message", rewrites it to
    message + " " + label + ":before"; on the way back it appends
    " " + label + ":after" to the result's first text block. Two trace
    stages around an echo tool thus give
        "hi first:before second:before second:after first:after"
    the original's onion. Settings (the stage's ZPL section):

        label = "first"         the mark (default: the stage's name)
        veto = "toolname"       answer calls of this tool here, DENIED
                                `tool "X" vetoed by <label>`
    =========================================================================
*/

#ifndef DSH_TRACE_H_INCLUDED
#define DSH_TRACE_H_INCLUDED

#include <czmq.h>
#include <jansson.h>

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Mark arguments (taken): if a map with a str "message", the message gets
//  " <label>:before". Returns the arguments, marked or as they were.
json_t *
    dsh_trace_mark_arguments (json_t *arguments, const char *label);

//  Mark a result object in place: its first text block gets " <label>:after".
//  Returns 0, or -1 if it has no text block.
int
    dsh_trace_mark_result (json_t *result, const char *label);

//  Set up a trace stage (see dsh_middleware_setup).
int
    dsh_trace_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                     dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
