/*  =========================================================================
    dsh_chain - the execution chain: every call through the configured
    middleware stages, in order, and every result back

    The registry actor owns one chain and drives it from its loop. A call
    in the chain is a record of dsh_inflight: the chain moves it from stage
    to stage (dsh_inflight_to_chain: which stage, which way, and until when
    that stage may hold it, never past the call's own deadline), and keeps
    what else it needs of the call in the record's chain slot.

    Built-in stages (the kinds the host hands in, as dsh-broker's main does
    with the middlewares) run inline, in the registry's thread: a stage's
    pass is a function call, not a socket hop. External stages are
    processes attached to a slot of two sockets the chain binds, found with
    HELLO {stage}; the chain sees every hop they make, so a stage that is
    not connected, gone or silent fails the call closed (or is skipped, if
    fail-open), within its timeout and the call's deadline.

    Bodies cross the chain untouched unless a stage rewrites them; the
    caller's envelope never leaves the record (stages see only the token).
    =========================================================================
*/

#ifndef DSH_CHAIN_H_INCLUDED
#define DSH_CHAIN_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>

#include "dsh_inflight.h"
#include "dsh_stage.h"
#include "dsh_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_chain_t dsh_chain_t;

//  What the chain hands back to its host (the registry actor).
typedef struct {
    //  A call left the bottom of the chain: dispatch it to a tool (body
    //  taken), and run its result back with dsh_chain_result.
    void (*dispatch) (void *arg, dsh_record_t *record, zframe_t **body_p);
    //  A reply to a control command: send it to the caller along envelope.
    void (*control_reply) (void *arg, zmsg_t **envelope_p, zframe_t **body_p);
    void *arg;
    //  Optional: a built-in stage named stage said note (JSON, borrowed)
    //  about a call, after the call's audit trail took it: the host keeps
    //  what outlives the call (a grant an approver gave).
    void (*note) (void *arg, const char *stage, json_t *note);
} dsh_chain_host_t;

//  A chain from the "chain" section of the broker's config (NULL: an empty
//  chain), with built-in stages of the kinds in the table kinds (ended by a
//  row with a NULL kind; NULL: none). Binds every external slot; broker is
//  the front endpoint. Answers go out through inflight. NULL with a reason
//  if the configuration is bad or a slot cannot bind.
dsh_chain_t *
    dsh_chain_new (zconfig_t *config, const dsh_stage_kind_t *kinds, const char *broker,
                   dsh_inflight_t *inflight, const dsh_chain_host_t *host,
                   char *error, size_t error_size);

//  Stop the stages, close the slots. Safe twice.
void
    dsh_chain_destroy (dsh_chain_t **self_p);

//  Start the built-in stages in loop, and register the slots' readers.
//  Returns 0, or -1 with a reason.
int
    dsh_chain_start (dsh_chain_t *self, zloop_t *loop, char *error, size_t error_size);

//  Number of stages.
size_t
    dsh_chain_size (dsh_chain_t *self);

//  Run a call down the chain: its record, its CALL body (taken), and the
//  registry's entry for its tool (NULL if none: the waterfall runs first
//  even for an unknown tool).
void
    dsh_chain_enter (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p, zchunk_t *tool);

//  The same, with FRONT's strict decode of exactly the body's bytes (doc
//  taken, pointing into the body; head read off it): the stages read the
//  call from it, and no stage decodes the body again until one changes it.
void
    dsh_chain_enter_decoded (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p,
                             dsh_doc_t **doc_p, const dsh_call_head_t *head, zchunk_t *tool);

//  The result of a call the chain dispatched (or an error the host made
//  for it): run it back up through the stages it passed.
void
    dsh_chain_result (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p);

//  The span a child of the call hangs from where it leaves the chain:
//  the innermost stage's it passed, else the call's own; NULL when the
//  call is not traced.
dsh_span_t *
    dsh_chain_span (dsh_chain_t *self, dsh_record_t *record);

//  The tool's registry entry the call's stages judged: the one it entered
//  the chain with (empty if its tool was unknown then), or NULL if the
//  call never entered the chain. What runs must still be that entry.
zframe_t *
    dsh_chain_entry (dsh_chain_t *self, dsh_record_t *record);

//  The record's stage held it past its limit: fail it closed (up through
//  the stages passed), or skip the stage if it is fail-open.
void
    dsh_chain_expire (dsh_chain_t *self, dsh_record_t *record);

//  The call is being answered outside the chain (cancelled, past its
//  deadline): every stage that holds it or watches its result lets go.
void
    dsh_chain_release (dsh_chain_t *self, dsh_record_t *record);

//  Act now on what inline stages did from their own handlers (a deferred
//  call resumed), so every record is where it says it is. Call only from
//  the loop, not from inside a stage.
void
    dsh_chain_settle (dsh_chain_t *self);

//  Send a control command (body {stage, command, args?}) to its stage; the
//  reply (CONTROL {id?, ok, message?, data?}) goes to envelope.
void
    dsh_chain_control (dsh_chain_t *self, zmsg_t **envelope_p, zframe_t **body_p);

//  Pack the stages as an array of {name, kind, where, timeoutMs, failOpen,
//  passed, answered, failed}.
void
    dsh_chain_pack (dsh_chain_t *self, msgpack_packer *pk);

//  The chain's configuration version: the first 16 hex digits of the
//  SHA-256 of its config section as ZPL text. Grants are bound to it.
const char *
    dsh_chain_version (dsh_chain_t *self);

//  The kind of the stage name, or NULL if there is none.
const char *
    dsh_chain_kind (dsh_chain_t *self, const char *name);

//  Run a control command (body {command, args?}) on every built-in stage
//  of kind, dropping the replies (the broker applies stored settings).
//  Returns how many stages ran it.
size_t
    dsh_chain_apply (dsh_chain_t *self, const char *kind, zframe_t *body);

//  The slot endpoints of the external stage name, or -1 if there is none.
int
    dsh_chain_slot (dsh_chain_t *self, const char *name, const char **feed, const char **drain);

#ifdef __cplusplus
}
#endif

#endif
