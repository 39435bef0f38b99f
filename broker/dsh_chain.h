/*  =========================================================================
    dsh_chain - the execution chain: the hub that runs every call through
    the configured middleware stages, in order, and every result back

    The registry actor owns one chain and drives it from its loop. For each
    stage the hub binds a slot: a DEALER "feed" (the stage's ROUTER connects
    to it; calls go down it, answers and results come back up it) and a
    ROUTER "drain" (the stage's DEALER connects to it; calls the stage
    passed arrive there, results going back up leave from there). Built-in
    stages are actors on inproc slots; external stages are processes that
    find their slot with HELLO {stage} and connect over tcp or ipc.

    Because every hop passes the hub, it knows where each call is: it gives
    each stage its timeout in both directions, answers MIDDLEWARE_FAILED
    when a stage is gone or silent (or skips it, if the stage is fail-open),
    and counts what each stage passed, answered and failed. Bodies cross the
    hub untouched; the caller's envelope never leaves it (stages see only
    the chain token).
    =========================================================================
*/

#ifndef DSH_CHAIN_H_INCLUDED
#define DSH_CHAIN_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_chain_t dsh_chain_t;

//  What the chain hands back to its host (the registry actor).
typedef struct {
    //  A call left the bottom of the chain: dispatch it to a tool, and
    //  answer it later with dsh_chain_result (token).
    void (*dispatch) (void *arg, uint64_t token, zframe_t **body_p);
    //  A reply left the top: send it to the caller along envelope.
    void (*reply) (void *arg, zmsg_t **envelope_p, const char *command, zframe_t **body_p);
    //  A call the chain dispatched was cancelled: drop it, tell its component.
    void (*cancel) (void *arg, uint64_t token);
    void *arg;
} dsh_chain_host_t;

//  A chain from the "chain" section of the broker's config (NULL: an empty
//  chain). Binds every slot and starts the built-in stages; broker is the
//  front endpoint (for external slots' host and for middlewares). NULL with
//  a reason if the configuration is bad or a slot cannot bind.
dsh_chain_t *
    dsh_chain_new (zconfig_t *config, const char *broker, const dsh_chain_host_t *host,
                   char *error, size_t error_size);

//  Stop the built-in stages, close the slots; calls inside are dropped
//  (the host is stopping). Safe twice.
void
    dsh_chain_destroy (dsh_chain_t **self_p);

//  Register the slots' readers and the deadline timer with loop.
void
    dsh_chain_start (dsh_chain_t *self, zloop_t *loop);

//  Number of stages.
size_t
    dsh_chain_size (dsh_chain_t *self);

//  Run a call down the chain. Takes the caller's envelope and the body;
//  tool is the registry's entry for the name, or NULL.
void
    dsh_chain_enter (dsh_chain_t *self, zmsg_t **envelope_p, const char *call_id,
                     zframe_t **body_p, zchunk_t *tool);

//  The result of a call the chain dispatched (or an error the registry
//  made for it): run it back up. Unknown tokens are dropped.
void
    dsh_chain_result (dsh_chain_t *self, uint64_t token, zframe_t **body_p);

//  Cancel a caller's call if it is in the chain: the stage that holds it
//  is told (CANCEL), or the host if it is at the tool, and nothing more
//  comes out of the chain for it. Returns true if the call was found.
bool
    dsh_chain_cancel (dsh_chain_t *self, zmsg_t *envelope, const char *call_id);

//  Progress of a call the chain dispatched: straight to its caller.
void
    dsh_chain_progress (dsh_chain_t *self, uint64_t token, zframe_t **body_p);

//  Calls and control commands in the chain now.
size_t
    dsh_chain_flows (dsh_chain_t *self);

//  Send a control command (body {stage, command, args?}) to its stage; the
//  reply (CONTROL {ok, message?, data?}) goes to envelope.
void
    dsh_chain_control (dsh_chain_t *self, zmsg_t **envelope_p, zframe_t **body_p);

//  Pack the stages as an array of {name, kind, where, timeoutMs, failOpen,
//  passed, answered, failed}.
void
    dsh_chain_pack (dsh_chain_t *self, msgpack_packer *pk);

//  The slot endpoints of the external stage name, or -1 if there is none.
int
    dsh_chain_slot (dsh_chain_t *self, const char *name, const char **feed, const char **drain);

#ifdef __cplusplus
}
#endif

#endif
