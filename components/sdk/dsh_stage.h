/*  =========================================================================
    dsh_stage - write a middleware stage of the execution chain as callbacks

    A stage sits in the broker's chain between the front and the tools, the
    distributed form of the tools/execute waterfall of dsh-tools (the
    single-process design dsh grew from), so many calls
    are in flight through it at once. A built-in stage runs inline in the
    broker's own loop (dsh_stage_start_inline: a call goes from stage to
    stage as a function call); an external stage is an actor with a ROUTER
    facing upstream and a DEALER facing downstream (PROTOCOL.md, "The
    execution chain"). For each call coming down, the request callback
    decides:

        DSH_STAGE_PASS    send it on (rewritten or not);
        DSH_STAGE_ANSWER  answer it here (a veto): later stages and the tool
                          never see it; set the answer first;
        DSH_STAGE_DEFER   decide later (waiting for a human, a hook process):
                          the call holds no thread and blocks no other call;
                          finish it with dsh_stage_resume.

    The call is a dsh_call_t, read with dsh_call's accessors; what a stage
    changes (arguments, agent, meta, the answer, a result) it gives as
    msgpack, and control commands come and go as msgpack: one value model,
    the strict decoding of the bytes that came (dsh_doc), with no JSON copy
    that could read differently.

    A stage that asked to (dsh_stage_call_watch_result) gets the result of a
    call it passed on its way back up, and may rewrite it before it goes on,
    at once or later (dsh_stage_call_defer_result).
    Results retrace the path, so stages nest like an onion:
    first:before, second:before, tool, second:after, first:after.

    A call the stage does not touch is forwarded frame for frame, never
    re-encoded. Callbacks run in the stage's own thread (inline: the
    broker's), one at a time, so they need no locks; they must not block
    (use dsh_stage_loop for timers and readers, and DEFER).

    Built-in stages are attached by the broker; an external stage is a
    process that calls dsh_stage_attach with the broker's address (or a
    list of brokers, each of which gets a link) and its name from the
    broker's chain configuration.
    =========================================================================
*/

#ifndef DSH_STAGE_H_INCLUDED
#define DSH_STAGE_H_INCLUDED

#include "dsh_call.h"
#include "dsh_proto.h"

#include <czmq.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_stage_t dsh_stage_t;

typedef enum {
    DSH_STAGE_PASS = 0,
    DSH_STAGE_ANSWER,
    DSH_STAGE_DEFER
} dsh_stage_verdict_t;

//  A call coming down. Read it, rewrite it or set an answer, and decide.
typedef dsh_stage_verdict_t (dsh_stage_request_fn) (dsh_stage_t *stage, dsh_call_t *call, void *arg);

//  The result of a call this stage passed and watched, on its way up. Read
//  it with dsh_stage_call_result, rewrite it with dsh_stage_call_set_result.
typedef void (dsh_stage_result_fn) (dsh_stage_t *stage, dsh_call_t *call, void *arg);

//  A control command for this stage (from `dsh`, through the broker), its
//  args as the CONTROL body carried them (NULL if absent). Returns 0 with
//  the reply's data packed into reply (one msgpack object, or nothing for
//  no data), or -1 with *error set to a new message; -1 with *error left
//  NULL means "unknown command".
typedef int (dsh_stage_control_fn) (dsh_stage_t *stage, const char *command, const msgpack_object *args,
                                    dsh_packer_t *reply, char **error, void *arg);

//  Runs once in the stage's thread before the first call: the place to add
//  readers and timers to dsh_stage_loop.
typedef void (dsh_stage_init_fn) (dsh_stage_t *stage, void *arg);

//  A call this stage holds (deferred, or its result held) was answered
//  without it (cancelled by its caller, or past its deadline): let go of
//  it. Resuming it (or its result) afterwards is allowed and sends nothing.
typedef void (dsh_stage_cancel_fn) (dsh_stage_t *stage, dsh_call_t *call, void *arg);

//  The callbacks of a stage; any but on_request may be NULL.
typedef struct {
    dsh_stage_request_fn *on_request;
    dsh_stage_result_fn *on_result;
    dsh_stage_control_fn *on_control;
    dsh_stage_init_fn *on_init;
    dsh_stage_cancel_fn *on_cancel;
    //  Called in the stage's thread as it stops; frees what arg owns.
    void (*on_destroy) (void *arg);
} dsh_stage_callbacks_t;

//  What a built-in stage knows of where it runs.
typedef struct {
    const char *name;           //  the stage's name in the chain
    const char *broker;         //  the broker's front endpoint
    //  The chain's configuration version (CHAIN's version: 16 hex of the
    //  chain section's digest), NULL or "" if unknown; what the permission
    //  stage binds its grants to, so that a changed chain ends them
    const char *chain_version;
} dsh_stage_context_t;

//  A kind of built-in stage: fills in callbacks and *arg from the stage's
//  config section (settings; NULL for defaults). Returns 0, or -1 with a
//  reason naming the setting.
typedef int (dsh_stage_setup_fn) (zconfig_t *settings, const dsh_stage_context_t *context,
                                  dsh_stage_callbacks_t *callbacks, void **arg,
                                  char *error, size_t error_size);

//  One row of a table of built-in stage kinds, which a host (dsh-broker's
//  main) hands to its chain; a table ends with a row whose kind is NULL.
typedef struct {
    const char *kind;
    dsh_stage_setup_fn *setup;
    //  How long a stage of this kind may hold a call, when its config sets
    //  no timeout_ms (the call's own deadline still comes first)
    int default_timeout_ms;
} dsh_stage_kind_t;

//  A stage named name (1-64 of [A-Za-z0-9_.-]) with its callbacks. It does
//  nothing until connected or attached. NULL if the name is invalid.
dsh_stage_t *
    dsh_stage_new (const char *name, const dsh_stage_callbacks_t *callbacks, void *arg);

//  Stop and destroy; calls still inside are dropped (the broker answers
//  them MIDDLEWARE_FAILED). Safe twice.
void
    dsh_stage_destroy (dsh_stage_t **self_p);

//  Start: connect the upstream ROUTER to feed and the downstream DEALER to
//  drain (the broker's slot endpoints). Returns 0 or -1.
int
    dsh_stage_connect (dsh_stage_t *self, const char *feed, const char *drain);

//  Start as an external stage: ask the broker at broker, or each broker of
//  a comma list (NULL: $DSH_BROKER, else the default), for this stage's
//  slot, waiting up to timeout_ms, then connect to every slot: one link per
//  broker, each call answered on the link it came from. The stage then
//  follows each broker (PING every heartbeat): one that restarted, went
//  silent or did not answer in time is asked for its slot again, and the
//  link moves there. Returns 0, or -1 if the list is not valid, a broker
//  that answered has no external stage of this name, or no broker
//  answered.
int
    dsh_stage_attach (dsh_stage_t *self, const char *broker, int timeout_ms);

//  --- A stage run inside its host's thread ----------------------------
//  The broker runs built-in stages in its own loop: a call goes from stage
//  to stage as a function call, with no socket and no thread hop. The host
//  hands calls in with the dsh_stage_inline_ functions and hears back
//  through these callbacks. They may come from inside a dsh_stage_inline_
//  call or from a handler on the loop (a deferred call resumed); a host
//  must not call back into the stage from them (queue, then act).
typedef struct {
    //  The stage passed the call on down (body taken).
    void (*pass) (void *arg, uint64_t token, zframe_t **body_p);
    //  The stage sends a result up: its answer (a veto), or the result of
    //  a call it passed and watched, as it goes on (body taken).
    void (*up) (void *arg, uint64_t token, zframe_t **body_p);
    void *arg;
    //  Optional: what the stage tells the broker's audit about a call
    //  (dsh_stage_call_note), as JSON text.
    void (*note) (void *arg, uint64_t token, const char *note);
    //  Optional: the stage passed the call on down untouched (body taken)
    //  with the strict decode of exactly those bytes (doc taken, pointing
    //  into body; head read off it), for the next stage to read instead of
    //  decoding the body again. Without it, pass is used.
    void (*pass_decoded) (void *arg, uint64_t token, zframe_t **body_p, dsh_doc_t **doc_p,
                          const dsh_call_head_t *head);
} dsh_stage_host_t;

//  Start the stage inside loop (its on_init runs now, with this loop as
//  dsh_stage_loop). Returns 0, or -1 if the stage was started already.
int
    dsh_stage_start_inline (dsh_stage_t *self, zloop_t *loop, const dsh_stage_host_t *host);

//  A call coming down to an inline stage: its token, its CALL body (taken),
//  the registry entry of its tool (copied; an empty frame if none) and its
//  deadline (zclock_mono).
void
    dsh_stage_inline_call (dsh_stage_t *self, uint64_t token, zframe_t **body_p,
                           zframe_t *tool, int64_t deadline_ms);

//  The same, with the strict decode the host holds of exactly the body's
//  bytes (doc taken, pointing into the body; head read off it; NULL *doc_p:
//  none), so that the stage reads the call without decoding it again.
void
    dsh_stage_inline_call_decoded (dsh_stage_t *self, uint64_t token, zframe_t **body_p,
                                   dsh_doc_t **doc_p, const dsh_call_head_t *head,
                                   zframe_t *tool, int64_t deadline_ms);

//  The result of a call this inline stage passed, coming up. Returns true
//  if the stage took it (it will send it up through host->up), false if
//  the stage did not watch this call (the body is left to the host).
bool
    dsh_stage_inline_result (dsh_stage_t *self, uint64_t token, zframe_t **body_p);

//  The call with token has been answered without this stage (cancelled,
//  past its deadline, failed elsewhere): let go of it, send nothing more.
void
    dsh_stage_inline_cancel (dsh_stage_t *self, uint64_t token);

//  Who sent the control command being handled now (from inside
//  on_control): the "caller" the broker put in the CONTROL body, the key's
//  name (else its key) under CURVE, else its peer address; NULL if none.
const char *
    dsh_stage_control_caller (dsh_stage_t *self);

//  A NUL-terminated copy of a str value, e.g. from a control command's
//  args (caller frees), or NULL if value is NULL, not a str, or holds a
//  NUL byte.
char *
    dsh_stage_strdup (const msgpack_object *value);

//  Tell the broker's audit about a call (an approval: {"approval":
//  {request, approver, decision, atMs}}); takes note. Inline stages only;
//  elsewhere nothing is sent.
void
    dsh_stage_call_note (dsh_call_t *call, json_t *note);

//  The same, as JSON text already made (borrowed): for a note made on
//  every call, without building it as JSON each time.
void
    dsh_stage_call_note_text (dsh_call_t *call, const char *note);

//  A control command for an inline stage (body {command, args?}); returns
//  the reply body {ok, message?, data?}.
zframe_t *
    dsh_stage_inline_control (dsh_stage_t *self, zframe_t *body);

//  The stage's name.
const char *
    dsh_stage_name (dsh_stage_t *self);

//  The stage's loop, for readers and timers (use only from the stage's
//  thread: in callbacks, or in on_init).
zloop_t *
    dsh_stage_loop (dsh_stage_t *self);

//  Finish a deferred call: PASS or ANSWER (set the answer first). Only from
//  the stage's thread. Returns 0, or -1 if the call was not deferred.
int
    dsh_stage_resume (dsh_stage_t *self, dsh_call_t *call, dsh_stage_verdict_t verdict);

//  --- The call, in callbacks ------------------------------------------
//  Read the call with dsh_call's accessors (dsh_call_id, dsh_call_name,
//  dsh_call_agent, dsh_call_arguments, dsh_call_meta, dsh_call_string, ...):
//  they read it as it came to this stage, before this stage's changes.
//  dsh_call_trace gives the call's trace context as it came to this stage
//  (an external stage's: the broker's span for this stage, the parent of
//  any span the stage makes; PROTOCOL.md, Trace context). A stage leaves
//  meta's traceparent as it is: the broker gives each hop its own.

//  The called tool's registry entry (name, parameters, annotations, ...),
//  or NULL if no such tool is registered.
const msgpack_object *
    dsh_stage_call_tool (dsh_call_t *call);

//  The same entry's bytes (msgpack) as the broker sent them, their size in
//  *size; NULL (size 0) if no such tool is registered. For a stage that
//  keeps what it computed of an entry until the entry changes.
const byte *
    dsh_stage_call_tool_bytes (dsh_call_t *call, size_t *size);

//  The call's own deadline, on zclock_mono's clock: the broker answers
//  the call TIMEOUT then, whatever the stage does. 0 if unknown. A stage
//  that waits (for a human, a process) should finish before it.
int64_t
    dsh_stage_call_deadline (dsh_call_t *call);

//  The version of the configuration of the chain the call came down, as
//  the broker of its link said at attach (WELCOME's stage chainVersion),
//  or NULL (an inline stage: its context's chain_version says it).
const char *
    dsh_stage_call_chain_version (dsh_call_t *call);

//  The boolean annotation of the called tool (e.g. "readOnlyHint"), or
//  fallback if the tool is unknown or the annotation is absent.
bool
    dsh_stage_call_annotation (dsh_call_t *call, const char *hint, bool fallback);

//  Rewrite the arguments: size bytes of one msgpack object (copied), an
//  explicit rewrite, which every later stage and the tool see. Spliced
//  into the body when the call is passed; every other byte of the body
//  stays the caller's.
void
    dsh_stage_call_set_arguments (dsh_call_t *call, const void *arguments, size_t size);

//  Rewrite the agent id (NULL removes it), when the call is passed.
void
    dsh_stage_call_set_agent (dsh_call_t *call, const char *agent);

//  Set one meta entry to size bytes of one msgpack object (copied); a NULL
//  value removes the entry. Spliced into meta when the call is passed
//  (other meta entries keep their bytes); it counts against the message
//  limit, and a call it would take over the limit is answered BAD_REQUEST
//  instead of being passed.
void
    dsh_stage_call_set_meta (dsh_call_t *call, const char *key, const void *value, size_t size);

//  Answer with an error result: "Error: <message>", isError, error {name,
//  code}. The verdict must then be ANSWER.
void
    dsh_stage_call_answer_error (dsh_call_t *call, const char *code, const char *format, ...)
        CHECK_PRINTF (3);

//  Answer with a whole RESULT body (a msgpack map {content, isError, ...},
//  as dsh_result_encode makes; taken). Its callId becomes the call's, and
//  a missing content or isError is added (empty, false).
void
    dsh_stage_call_answer (dsh_call_t *call, zframe_t **result_p);

//  Ask for this call's result on its way back (call from on_request).
void
    dsh_stage_call_watch_result (dsh_call_t *call);

//  In on_result (and while the result is held): the result as it came up
//  (a map), or NULL if it is not one msgpack map. Owned by the call.
const msgpack_object *
    dsh_stage_call_result (dsh_call_t *call);

//  In on_result: replace the result with a RESULT body (taken), as for
//  dsh_stage_call_answer; the result read stays the one that came up.
void
    dsh_stage_call_set_result (dsh_call_t *call, zframe_t **result_p);

//  In on_result: replace the result with the same result and one more text
//  block at the end of its content (a new content array if it had none),
//  packed with the SDK's builder; a result that is not a map is left as
//  it is. What a hook's additionalContext, or a stage wrapping results,
//  adds.
void
    dsh_stage_call_add_result_text (dsh_call_t *call, const char *text);

//  In on_result: hold the result (to finish it later, e.g. when a hook
//  process has answered); finish with dsh_stage_resume_result.
void
    dsh_stage_call_defer_result (dsh_call_t *call);

//  Send a held result up (possibly rewritten meanwhile). Only from the
//  stage's thread. Returns 0, or -1 if the call's result was not held.
int
    dsh_stage_resume_result (dsh_stage_t *self, dsh_call_t *call);

//  Attach data to the call for later callbacks; destructor may be NULL.
void
    dsh_stage_call_set_data (dsh_call_t *call, void *data, void (*destructor) (void *));

//  The data attached to the call, or NULL.
void *
    dsh_stage_call_data (dsh_call_t *call);

#ifdef __cplusplus
}
#endif

#endif
