/*  =========================================================================
    stage_control - runs a stage's control commands from a unit test, as the
    stage runtime does: args as a strict msgpack document, the reply packed

    The middleware tests (permission, plan mode) write args and read
    replies as JSON, which is easier to read in a test; this is the one
    place that converts, so the stage itself sees only msgpack.
    =========================================================================
*/

#ifndef STAGE_CONTROL_H_INCLUDED
#define STAGE_CONTROL_H_INCLUDED

#include <czmq.h>
#include <jansson.h>

#include "dsh_doc.h"
#include "dsh_stage.h"

//  The msgpack document of a JSON value (NULL: none), as a stage is given
//  control args and tool entries; *bytes keeps the bytes it reads (the
//  caller destroys both).
dsh_doc_t *
    stage_control_doc (const json_t *json, msgpack_sbuffer *bytes);

//  Runs a control command as the stage does, its args given as JSON (NULL:
//  none). Returns the reply's data as JSON, or NULL if the command failed
//  (with *reason set) or is unknown (*reason left NULL).
json_t *
    stage_control (dsh_stage_callbacks_t *callbacks, const char *command, const json_t *args,
                   char **reason, void *arg);

#endif
