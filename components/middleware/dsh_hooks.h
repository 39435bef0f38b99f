/*  =========================================================================
    dsh_hooks - Claude Code compatible command hooks as a chain stage

    Settings (the stage's config section): the stage's own, then one
    section per hook:

        max_processes = 16          hook processes running at once
        queue_calls = 256           calls waiting for a turn, at most
        queue_calls_per_caller = 64 of them from one caller (agent id)
        queue_bytes = 16777216      event JSON waiting, at most
        typed_input = "render"      render | refuse: see tool_input below
        hook
            event = "PreToolUse"        PreToolUse | PostToolUse
            matcher = "Edit|Write"      a tool name, an anchored POSIX extended
                                        regex, or "*" / empty for every tool
            command = "/path/to/hook"   run with /bin/sh -c
            timeout_ms = 60000          per hook run

    Each matching hook gets the event as JSON on stdin and answers with its
    exit code and stdout, as Claude Code's hooks do: exit 0 with optional
    JSON ({"hookSpecificOutput": {"permissionDecision", ...}} or the legacy
    {"decision": "block" | "approve", "reason"}), exit 2 to block with
    stderr as the reason, any other exit a logged, non-blocking error.
    Matching hooks run in parallel; their decisions merge deny > ask > allow.

    A hook's tool_input is the call's arguments as they run, in Typed JSON
    (dsh_json_view): plain JSON where JSON holds the value, a one-key typed
    form ({"$str": base64}, {"$bin": ...}, {"$map": [[key, value], ...]},
    ...) where it cannot, so a guard never reads a value other than the one
    the tool gets. typed_input = refuse denies instead every call (that some
    hook matches) whose arguments need a typed form. An updatedInput is read
    the same way (typed forms become the values they stand for); one that
    changes the arguments to values plain JSON cannot hold fails the call
    (PROTOCOL.md says so; the stage SDK itself takes any msgpack).

    Hooks run as child processes watched from the stage's loop: a call waits
    for its hooks (deferred) without blocking any other call. A hook that
    outlives its timeout is killed with its process group, and the call
    fails closed.

    At most max_processes hook processes run at once. A call that finds no
    room waits in a queue served round robin by caller (the call's agent;
    calls without one are one caller): one run per caller per turn, so a
    caller's flood delays another caller's call by one turn at most. A call
    the queue cannot take (any of its three bounds) is answered OVERLOADED
    at once; one cancelled or past its deadline while it waits leaves the
    queue (TIMEOUT for the deadline). A call answered without the stage
    (cancelled, past its deadline) while its hooks run has them killed.

    The decision functions below are pure, for tests.
    =========================================================================
*/

#ifndef DSH_HOOKS_H_INCLUDED
#define DSH_HOOKS_H_INCLUDED

#include <czmq.h>
#include <jansson.h>
#include <stdbool.h>

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The longest a hook may write on stdout or stderr; the rest is dropped.
#define DSH_HOOKS_OUTPUT_MAX (1024 * 1024)

//  A hook's timeout when its section sets none.
#define DSH_HOOKS_DEFAULT_TIMEOUT_MS 60000

//  The defaults of the stage's cap and its wait queue.
#define DSH_HOOKS_DEFAULT_MAX_PROCESSES 16
#define DSH_HOOKS_DEFAULT_QUEUE_CALLS 256
#define DSH_HOOKS_DEFAULT_QUEUE_CALLS_PER_CALLER 64
#define DSH_HOOKS_DEFAULT_QUEUE_BYTES (16 * 1024 * 1024)

typedef enum {
    DSH_HOOKS_PRE_TOOL_USE,
    DSH_HOOKS_POST_TOOL_USE
} dsh_hooks_event_t;

//  What a hook decided, weakest first (merging keeps the strongest).
typedef enum {
    DSH_HOOKS_NO_DECISION = 0,  //  no opinion: the call goes on
    DSH_HOOKS_ALLOW,
    DSH_HOOKS_ASK,
    DSH_HOOKS_DENY              //  deny, block, or exit code 2
} dsh_hooks_verdict_t;

//  One hook's answer, or the merge of several.
typedef struct {
    dsh_hooks_verdict_t verdict;
    char *reason;               //  why (decision reason or stderr), or NULL
    json_t *updated_input;      //  PreToolUse: replacement arguments, or NULL
    char *additional_context;   //  text for the agent, or NULL
    char *problem;              //  why the answer was ignored (for the log), or NULL
} dsh_hooks_decision_t;

//  Fill callbacks and *arg for a hooks stage from settings (NULL: no
//  hooks). Returns 0, or -1 with a reason naming the setting.
int
    dsh_hooks_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                     dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

//  The event's name as Claude Code spells it ("PreToolUse").
const char *
    dsh_hooks_event_name (dsh_hooks_event_t event);

//  The event named name. Returns 0, or -1 if name is no hook event.
int
    dsh_hooks_event_parse (const char *name, dsh_hooks_event_t *event_p);

//  True if matcher is usable: empty, "*", or a valid extended regex.
bool
    dsh_hooks_matcher_valid (const char *matcher);

//  True if matcher selects tool_name: empty or "*" selects every tool; else
//  an exact name, or a regex that matches the whole name.
bool
    dsh_hooks_match (const char *matcher, const char *tool_name);

//  The event a hook reads on stdin: hook_event_name, session_id, cwd,
//  tool_name, tool_input (NULL: {}), and tool_response for PostToolUse
//  (NULL: null). Returns a new object; the inputs are borrowed.
json_t *
    dsh_hooks_event_json (dsh_hooks_event_t event, const char *session_id, const char *cwd,
                          const char *tool_name, json_t *tool_input, json_t *tool_response);

//  A new decision with no verdict.
dsh_hooks_decision_t *
    dsh_hooks_decision_new (void);

//  Destroy; safe twice.
void
    dsh_hooks_decision_destroy (dsh_hooks_decision_t **self_p);

//  Read one hook's answer from its exit code (128 + N for death by signal
//  N), stdout and stderr (not NUL-terminated). Never fails: an answer that
//  cannot be used is NO_DECISION with problem set.
dsh_hooks_decision_t *
    dsh_hooks_decision_parse (dsh_hooks_event_t event, int exit_code,
                              const char *output, size_t output_size,
                              const char *errors, size_t errors_size);

//  Merge the answers of the hooks that ran for one call, given in config
//  order: the strongest verdict wins, with the reasons of every hook that
//  gave it; updated_input comes from the last hook that allowed (or had no
//  opinion) and is dropped unless the merge allows; additional_context
//  joins all, one per line. Returns a new decision.
dsh_hooks_decision_t *
    dsh_hooks_decision_merge (dsh_hooks_decision_t **decisions, size_t count);

#ifdef __cplusplus
}
#endif

#endif
