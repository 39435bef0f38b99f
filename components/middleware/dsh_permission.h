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
        grants = true               false: approvers decide one call at a
                                    time, never grant
        grant_minutes = 15          a grant's length when the decision
                                    names none
        grant_max_minutes = 1440    the longest grant a decision may make

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

    A request is bound to what its approver is shown: the digests
    (dsh_digest) of the tool's definition and of the arguments, and the
    chain's version. A decision may name them back, and is refused if they
    differ. An allow may also grant (scope "tool": this agent may call this
    tool with any arguments; scope "arguments": with these exact arguments)
    for some minutes. A grant applies to a later call only if stage, agent
    ("" if none), tool, definition digest, chain version and (scope
    arguments) arguments digest are the same and it has not expired: a
    changed definition or chain ends it. Grants are looked up only where
    the policy says ask, after deny and the unknown tool; a call a grant
    covers passes at once, with meta "approval" = {stage, id, grant} (id
    and grant: the grant's id), and so do the asks still open that a new
    grant covers. The stage keeps grants in memory; the broker keeps them
    in its store (the audit note of the deciding call carries the whole
    grant) and hands the stored set back with grants.load.

    Approvers (`dsh approver`) speak on a DEALER connected to the approvals
    ROUTER, frames "" "DSH1" COMMAND BODY (msgpack map):

        approver -> stage   APPROVER {}                 hello; heartbeat every
                                                        1 s; silent 3 s = gone
                            DECIDE {id, outcome, scope?, minutes?, seconds?,
                                    by?, argumentsDigest?, definitionDigest?}
                                                        outcome "allow" | "deny";
                                                        scope "once" (default) |
                                                        "tool" | "arguments";
                                                        minutes 1..grant_max_minutes
                                                        or seconds (not both;
                                                        default grant_minutes);
                                                        by: who used this approver
                                                        (<= 128 printable bytes)
                            GOODBYE {}                  leaving: gone at once
        stage -> approver   PENDING {id, callId, tool, agent?, arguments,
                                     definitionDigest, argumentsDigest,
                                     chainVersion, receivedMs, closesMs,
                                     grants, grantMinutes, grantMaxMinutes}
                                                        on ask, and every request
                                                        still open on hello; times
                                                        in wall ms; grants: whether
                                                        this request may be granted
                            RESOLVED {id, outcome, grant?}
                                                        allowed | rejected |
                                                        unavailable | cancelled;
                                                        grant: the grant's id
                            HEARTBEAT {}                every 0.5 s; a probe: an
                                                        approver whose connection
                                                        is gone is dropped at once
                            ERROR {code, message, id?}  a DECIDE for no open
                                                        request, a bad value
                                                        (the request stays open),
                                                        a bad message

    Control commands (through the broker): allowed {agent, tools: [tool
    entries or names]} -> the names the agent could be let to call (not
    denied; a bare name is judged as an unknown tool); approvals -> {endpoint};
    pending -> [PENDING bodies]; approve {id, scope?, minutes?, seconds?,
    by?, argumentsDigest?, definitionDigest?} / deny {id} -> {id, outcome,
    grant?}, decided as an approver would (the approver: the caller);
    grants -> [grant, ...] (the live ones); revoke {id} -> {id, revoked:
    true}; grants.load {grants: [grant, ...]} -> {loaded, skipped}: the
    broker's stored set replaces the stage's, but for grants the stage made
    in the last 2 s (kept) and ones it revoked in the last 3 s (dropped).
    A control command is not a live approver: only approvers on the socket
    keep an ask from being denied at once.

    A grant (a map; JSON in the audit and the broker's store): {id (8
    hex), stage, agent, tool, definitionDigest, argumentsDigest? (scope
    arguments), chainVersion, scope: "tool" | "arguments", createdMs,
    expiresMs (wall ms), by: the approver}.
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

//  Whether approvers may grant (the grants setting).
bool
    dsh_permission_policy_grants (dsh_permission_policy_t *self);

//  A grant's length, in minutes, when the decision names none.
int
    dsh_permission_policy_grant_minutes (dsh_permission_policy_t *self);

//  The longest grant a decision may make, in minutes.
int
    dsh_permission_policy_grant_max_minutes (dsh_permission_policy_t *self);

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

//  --- Grants ------------------------------------------------------------

//  What a decision covers: this call only, or a grant.
typedef enum {
    DSH_PERMISSION_SCOPE_ONCE = 0,
    DSH_PERMISSION_SCOPE_TOOL,          //  the agent may call the tool, any arguments
    DSH_PERMISSION_SCOPE_ARGUMENTS      //  only with these exact arguments
} dsh_permission_scope_t;

//  Parse "once", "tool" or "arguments". Returns 0, or -1 for anything else.
int
    dsh_permission_scope_parse (const char *text, dsh_permission_scope_t *scope);

//  "once", "tool" or "arguments".
const char *
    dsh_permission_scope_name (dsh_permission_scope_t scope);

//  A call as a grant sees it (every string borrowed, none NULL).
typedef struct {
    const char *stage;
    const char *agent;                  //  "" if the call has none
    const char *tool;
    const char *definition_digest;      //  of the call's TOOL entry
    const char *arguments_digest;       //  of its arguments (dsh_digest_value)
    const char *chain_version;          //  "" if unknown
} dsh_permission_subject_t;

typedef struct _dsh_permission_grant_t dsh_permission_grant_t;

//  The length of a grant's id: hex digits.
#define DSH_PERMISSION_GRANT_ID_SIZE 8

//  A grant with id (8 hex) for subject's agent and tool (and arguments,
//  for scope arguments), from created_ms until expires_ms (wall ms), made
//  by approver by. scope must not be once.
dsh_permission_grant_t *
    dsh_permission_grant_new (const char *id, const dsh_permission_subject_t *subject,
                              dsh_permission_scope_t scope, int64_t created_ms, int64_t expires_ms,
                              const char *by);

//  A grant from its map (as the grants control command lists it, and the
//  broker stores and loads it: grants.load). NULL with a reason if a key
//  is missing or wrong.
dsh_permission_grant_t *
    dsh_permission_grant_from_msgpack (const msgpack_object *map, char *error, size_t error_size);

//  A copy.
dsh_permission_grant_t *
    dsh_permission_grant_dup (const dsh_permission_grant_t *self);

//  Destroy; safe twice.
void
    dsh_permission_grant_destroy (dsh_permission_grant_t **self_p);

//  Pack the grant's map {id, stage, agent, tool, definitionDigest,
//  chainVersion, scope, createdMs, expiresMs, by, argumentsDigest?}.
void
    dsh_permission_grant_pack (const dsh_permission_grant_t *self, msgpack_packer *pk);

//  The same map as JSON (caller owns), for the audit's note of a grant.
json_t *
    dsh_permission_grant_json (const dsh_permission_grant_t *self);

//  True if the grant lets subject's call through at now_ms (wall): same
//  stage, agent, tool, definition digest, chain version, (scope arguments)
//  arguments digest, and now_ms < its expiry.
bool
    dsh_permission_grant_applies (const dsh_permission_grant_t *self, const dsh_permission_subject_t *subject,
                                  int64_t now_ms);

//  The grant's id.
const char *
    dsh_permission_grant_id (const dsh_permission_grant_t *self);

//  The name of the stage that made it.
const char *
    dsh_permission_grant_stage (const dsh_permission_grant_t *self);

//  What it covers: a tool (any arguments) or these arguments.
dsh_permission_scope_t
    dsh_permission_grant_scope (const dsh_permission_grant_t *self);

//  Who made it: the approver as its decision recorded it.
const char *
    dsh_permission_grant_by (const dsh_permission_grant_t *self);

//  When it ends (wall ms).
int64_t
    dsh_permission_grant_expires_ms (const dsh_permission_grant_t *self);

//  Set up a permission stage (see dsh_middleware_setup).
int
    dsh_permission_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                          dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
