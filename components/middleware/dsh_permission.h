/*  =========================================================================
    dsh_permission - the permission middleware: allow, deny or ask a human

    Rules on the tool's name, what its entry says it is, and the agent id
    give an action. Every rule that matches counts, and deny beats ask
    beats allow, so a rule can only make a call safer, never open one that
    another rule closed. Settings (the stage's ZPL section):

        rule                        repeatable; matches when all its
                                    conditions hold
            tool = "write_*"        name or fnmatch glob (default "*")
            agent = "planner-*"     glob on the agent id (default "*"; a
                                    call without agent has agent "")
            read_only = false       the entry's annotations.readOnlyHint,
                                    true | false (absent hint: false)
            destructive = true      destructiveHint (absent: true)
            open_world = true       openWorldHint (absent: true); a tool
                                    not registered has every default,
                                    and is answered UNKNOWN_TOOL where
                                    it would be asked about
            action = "deny"         allow | deny | ask (required)
        default = "allow"           when no rule matches
        approvals = "tcp://127.0.0.1:*"     where approvers connect
        approval_timeout_ms = 120000        how long an ask waits

    deny answers DENIED `tool "X" is denied by policy`. ask holds the call
    (no thread, no other call waits) and sends it to every approver present;
    the first decision wins: allowed -> the call goes on; rejected ->
    DENIED `tool "X" was rejected by the approver`. With no approver
    present (none connected, or none the request could be sent to) the
    call is DENIED `tool "X" requires approval` at once. An open ask is
    DENIED `tool "X" requires approval (<why>)` when nobody decides: every
    approver went away, no decision within approval_timeout_ms, or none
    came before the call's deadline (it closes a little before it, so the
    caller hears why instead of a TIMEOUT). A call an approver allowed goes
    on with meta "approval" = {stage, id} (this stage's name, the request
    id); the stage removes "approval" from every other call it passes, so
    a later stage (the sandbox) can trust it.

    Approvers (`dsh approver`) speak on a DEALER connected to the approvals
    ROUTER, frames "" "DSH1" COMMAND BODY (msgpack map):

        approver -> stage   APPROVER {}                 hello; heartbeat every
                                                        1 s; silent 3 s = gone
                            DECIDE {id, outcome}        outcome "allow" | "deny"
                            GOODBYE {}                  leaving: gone at once
        stage -> approver   PENDING {id, callId, tool, agent?, arguments}
                                                        on ask, and every request
                                                        still open on hello
                            RESOLVED {id, outcome}      allowed | rejected |
                                                        unavailable | cancelled
                            HEARTBEAT {}                every 0.5 s; a probe: an
                                                        approver whose connection
                                                        is gone is dropped at once
                            ERROR {code, message}       a DECIDE for no open
                                                        request, a bad message

    Control commands (through the broker): allowed {agent, tools: [tool
    entries or names]} -> the names the agent could be let to call (not
    denied; a bare name is judged as an unknown tool); approvals -> {endpoint};
    pending -> [{id, callId, tool, agent?, arguments}]; approve {id} /
    deny {id} -> {id, outcome}, decided as an approver would. A control
    command is not a live approver: only approvers on the socket keep an
    ask from being denied at once.
    =========================================================================
*/

#ifndef DSH_PERMISSION_H_INCLUDED
#define DSH_PERMISSION_H_INCLUDED

#include <czmq.h>

#include "dsh_middleware.h"
#include "dsh_toolhints.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Ordered by strength: the strongest action of the matching rules wins.
typedef enum {
    DSH_PERMISSION_ALLOW = 0,
    DSH_PERMISSION_ASK,
    DSH_PERMISSION_DENY
} dsh_permission_action_t;

//  How an ask ended.
typedef enum {
    DSH_APPROVAL_ALLOWED = 0,       //  allowed once
    DSH_APPROVAL_REJECTED,
    DSH_APPROVAL_CANCELLED,         //  the call went away
    DSH_APPROVAL_UNAVAILABLE        //  no approver, or none decided in time
} dsh_approval_outcome_t;

typedef struct _dsh_permission_policy_t dsh_permission_policy_t;

//  Read a policy from a stage section (NULL: no rules, default allow).
//  Returns NULL with a reason naming the setting on bad input.
dsh_permission_policy_t *
    dsh_permission_policy_new (zconfig_t *settings, char *error, size_t error_size);

//  Destroy; safe twice.
void
    dsh_permission_policy_destroy (dsh_permission_policy_t **self_p);

//  The meta key of the stamp an approved call carries on down the chain.
#define DSH_PERMISSION_APPROVAL_META "approval"

//  The usage text of the allowed control command (every stage that answers
//  it takes the same arguments).
#define DSH_PERMISSION_ALLOWED_USAGE \
    "allowed needs {\"agent\": \"<id>\", \"tools\": [<tool entry or name>, ...]}"

//  The action for a call of tool, whose entry says hints (NULL: an unknown
//  tool, judged by MCP's defaults), by agent (NULL: no agent).
dsh_permission_action_t
    dsh_permission_policy_decide (dsh_permission_policy_t *self, const char *tool, const dsh_toolhints_t *hints,
                                  const char *agent);

//  The number of rules.
size_t
    dsh_permission_policy_rules (dsh_permission_policy_t *self);

//  The action when no rule matches.
dsh_permission_action_t
    dsh_permission_policy_default (dsh_permission_policy_t *self);

//  The endpoint the approvals socket binds.
const char *
    dsh_permission_policy_approvals (dsh_permission_policy_t *self);

//  How long an ask waits for a decision.
int
    dsh_permission_policy_approval_timeout_ms (dsh_permission_policy_t *self);

//  Parse "allow", "deny" or "ask". Returns 0, or -1 for anything else.
int
    dsh_permission_action_parse (const char *text, dsh_permission_action_t *action);

//  "allow", "ask" or "deny".
const char *
    dsh_permission_action_name (dsh_permission_action_t action);

//  "allowed", "rejected", "cancelled" or "unavailable".
const char *
    dsh_approval_outcome_name (dsh_approval_outcome_t outcome);

//  When an ask opened at now closes if nobody decides (times on
//  zclock_mono's clock): timeout_ms after now, or a little before the
//  call's deadline (0: unknown), whichever comes first; *by_deadline says
//  which. A time <= now means there is no time left to ask.
int64_t
    dsh_permission_ask_closes_at (int64_t now, int64_t deadline, int timeout_ms, bool *by_deadline);

//  Set up a permission stage (see dsh_middleware_setup).
int
    dsh_permission_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                          dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
