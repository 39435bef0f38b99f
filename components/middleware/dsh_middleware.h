/*  =========================================================================
    dsh_middleware - the built-in middlewares of the execution chain

    The six built-in kinds of stage (the middlewares of the tools/execute
    waterfall of dsh-tools, the single-process design dsh grew from, as
    dsh stages): four policies, a tracing stage for tests and demos, and a
    stage that passes every call. Each kind reads its settings from its
    stage section of the broker's config (ZPL; see deploy/dsh-chain.cfg)
    and fills in the stage callbacks (dsh_stage.h: the call is a
    dsh_call_t; what a stage changes and answers is msgpack):

        permission  ordered rules on tool and agent -> allow, deny or ask;
                    asks go to connected approvers (dsh approver; dsh approve
                    / dsh deny ID); no approver -> denied
        plan        per-agent plan mode: only read-only tools (or an
                    allow-list) pass while an agent plans
        hooks       Claude Code compatible PreToolUse / PostToolUse command
                    hooks, run asynchronously
        sandbox     a policy per agent, stamped into the call's meta for
                    tools to enforce; writes refused under read-only
        trace       marks each call on its way down and each result on its
                    way up with the stage's name (shows the onion)
        pass        passes every call on untouched (benchmarks, a template)

    The same code runs inside dsh-broker (inline, in the broker's loop) or
    as an external process (dsh-stage --kind KIND --name NAME).
    =========================================================================
*/

#ifndef DSH_MIDDLEWARE_H_INCLUDED
#define DSH_MIDDLEWARE_H_INCLUDED

#include <czmq.h>

#include "dsh_stage.h"

#ifdef __cplusplus
extern "C" {
#endif

//  What a middleware knows of where it runs.
typedef dsh_stage_context_t dsh_middleware_context_t;

//  The built-in kinds, for a host's chain (dsh-broker's main hands it in);
//  the last row's kind is NULL.
extern const dsh_stage_kind_t dsh_middleware_kinds [];

//  Fill callbacks and *arg for a middleware of kind, from settings (the
//  stage's config section; may be NULL for defaults). Returns 0, or -1
//  with a reason naming the setting (unknown kind, bad rule, ...).
int
    dsh_middleware_setup (const char *kind, zconfig_t *settings, const dsh_middleware_context_t *context,
                          dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

//  True if kind names a built-in middleware.
bool
    dsh_middleware_known (const char *kind);


#ifdef __cplusplus
}
#endif

#endif
