/*  =========================================================================
    dsh_planmode - the plan-mode middleware: only read-only tools while planning

    An agent in plan mode may look but not touch: a call passes only if the
    tool's registry entry says annotations.readOnlyHint, or if the tool is in
    the stage's allow list. Any other call is answered DENIED with the
    original's refusal and the way out that exists here (nothing serves an
    exit_plan_mode tool; the agent presents its plan in its answer):

        tool "X" is not available in plan mode; continue planning and
        present your plan when ready (plan mode ends when the operator
        runs `dsh mode AGENT normal`)

    or, for a call planned by its meta alone, "(this call asked for plan
    mode: its meta says "mode": "plan")". In a chain, plan mode comes
    before permission, so a call it refuses never waits for a human.

    Settings (the stage's ZPL section):

        allow = "read_file,list_directory"  names that pass besides read-only tools

    Modes are per agent and sticky, set by a human through the broker:
    control "mode" {agent, mode: "plan" | "normal"} -> {agent, mode}, and
    "modes" -> {agent: "plan", ...} (the agents in plan mode), and
    "allowed" {agent, tools: [tool entries or names]} -> the names the agent
    may call in its mode now (a bare name counts as not read-only). A call whose
    meta has "mode": "plan" is planned for that call alone even if its
    agent is normal; "mode": "normal" in meta never lifts a sticky plan.
    A call without an agent is agent "" (so `dsh mode "" plan` works, but
    clients normally name their agent).

    The mode table and the decision are plain functions for unit tests.
    =========================================================================
*/

#ifndef DSH_PLANMODE_H_INCLUDED
#define DSH_PLANMODE_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_planmode_t dsh_planmode_t;

//  Read the settings (NULL: defaults) into a new table with every agent
//  normal. NULL with a reason naming the setting on bad input.
dsh_planmode_t *
    dsh_planmode_new (zconfig_t *settings, char *error, size_t error_size);

//  Destroy; safe twice.
void
    dsh_planmode_destroy (dsh_planmode_t **self_p);

//  Set agent's mode ("plan" or "normal"; agent NULL means ""). Returns 0,
//  or -1 with a reason.
int
    dsh_planmode_set (dsh_planmode_t *self, const char *agent, const char *mode,
                      char *error, size_t error_size);

//  True if agent (NULL means "") is in plan mode.
bool
    dsh_planmode_planning (dsh_planmode_t *self, const char *agent);

//  True if a call by agent with meta mode meta_mode (NULL: none) is planned.
bool
    dsh_planmode_call_planning (dsh_planmode_t *self, const char *agent, const char *meta_mode);

//  True if tool may run in plan mode; read_only is its readOnlyHint.
bool
    dsh_planmode_allows (dsh_planmode_t *self, const char *tool, bool read_only);

//  The number of names in the allow list.
size_t
    dsh_planmode_allow_size (dsh_planmode_t *self);

//  Pack the map {agent: "plan", ...} of the agents in plan mode.
void
    dsh_planmode_modes (dsh_planmode_t *self, msgpack_packer *pk);

//  The refusal for agent's call of tool in plan mode (caller frees); sticky:
//  the agent's mode is plan (else only the call's meta asked for it).
char *
    dsh_planmode_refusal (const char *tool, const char *agent, bool sticky);

//  Set up a plan-mode stage (see dsh_middleware_setup).
int
    dsh_planmode_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                        dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
