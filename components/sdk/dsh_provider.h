/*  =========================================================================
    dsh_provider - serve tools to dsh brokers from any process

    A provider is a component: it finds each broker it follows from one
    address, announces its tools to each, heartbeats, takes calls from any
    of them and answers each on the connection it came on. A broker silent
    for its liveness window is found again from its address, so a broker
    that restarted (even on other ports) or moved gets the tools back with
    no help from the program. Handlers
    run on a pool of worker threads, so a slow call never holds up a fast
    one or the heartbeat. Destroying the provider withdraws every tool (the
    C counterpart of "disposed with the calling fiber").

        dsh_provider_t *provider = dsh_provider_new (NULL, "demo", 0);
        dsh_provider_add (provider, &echo_def, s_echo, NULL);
        ...
        dsh_provider_start (provider);
        ...
        dsh_provider_destroy (&provider);

    A provider is held when made: it looks for its brokers only on
    dsh_provider_start, so the tools added before it, however many and
    however slowly (a loaded machine), go in one ANNOUNCE, the one each
    broker asks for when it finds the provider. A program that never calls
    it is started all the same, 500 ms after its last add (2 s after it was
    made if it adds nothing); start_now in the options skips the wait.
    Tools can be added and removed at any time after; those changes are
    announced together once they stop for 10 ms, and at most 250 ms after
    the first one not announced yet (a steady stream of adds announces
    every 250 ms, not at every add).

    Typed tools (dsh_provider_add) have their arguments checked against
    their spec before the handler runs; raw tools (dsh_provider_add_raw)
    validate their own input.
    =========================================================================
*/

#ifndef DSH_PROVIDER_H_INCLUDED
#define DSH_PROVIDER_H_INCLUDED

#include "dsh_call.h"
#include "dsh_tooldef.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_provider_t dsh_provider_t;

//  How a provider runs.
typedef struct {
    const char *broker;         //  front endpoint, or a comma list of them
                                //  (NULL: $DSH_BROKER, else the default)
    const char *id;             //  component id (NULL: a fresh UUID-based one)
    size_t workers;             //  handler threads (0: 4)
    size_t queue_limit;         //  calls waiting for a worker before new ones
                                //  are answered OVERLOADED (0: 1024)
    bool start_now;             //  find the brokers at once, not on
                                //  dsh_provider_start: adds are then changes
                                //  at run time (a loop of them may take a few
                                //  ANNOUNCEs, not one)
    bool inline_handlers;       //  run handlers on the provider's own thread, no
                                //  worker: for handlers that never block (they
                                //  answer at once or defer); workers is then only
                                //  the concurrency ANNOUNCE states
} dsh_provider_options_t;

//  Make a provider, held (see above), with default options but these. NULL
//  if the arguments are bad (an invalid id or broker list; the reason is
//  logged).
dsh_provider_t *
    dsh_provider_new (const char *broker, const char *id, size_t workers);

//  Make a provider with options (zeroed: the defaults, held). NULL if they
//  are bad (logged).
dsh_provider_t *
    dsh_provider_new_options (const dsh_provider_options_t *options);

//  Start finding the brokers, once every tool is added: the first ANNOUNCE
//  has them all. Does nothing the second time, nor for a provider made
//  with start_now or one that started by itself (see above).
void
    dsh_provider_start (dsh_provider_t *self);

//  Withdraw every tool, stop, and destroy; safe twice.
void
    dsh_provider_destroy (dsh_provider_t **self_p);

//  The component id.
const char *
    dsh_provider_id (dsh_provider_t *self);

//  Add a typed tool. def (and every spec it points to) must outlive the
//  tool: static data is the intended use. Returns 0, or -1 if the name is
//  invalid or already added here.
int
    dsh_provider_add (dsh_provider_t *self, const dsh_tooldef_t *def,
                      dsh_handler_fn *handler, void *arg);

//  Add a tool from a raw JSON tool entry ({name, description, parameters,
//  ...}); its arguments are not validated by dsh. Returns 0 or -1.
int
    dsh_provider_add_raw (dsh_provider_t *self, const char *tool_json,
                          dsh_handler_fn *handler, void *arg);

//  Remove a tool; calls already running finish. Returns 0, or -1 if no
//  such tool. Removing twice is harmless.
int
    dsh_provider_remove (dsh_provider_t *self, const char *name);

//  Wait until a broker has acknowledged this provider (it asked for and
//  got an announcement) or timeout_ms passed: with several brokers, the
//  first one to ask makes it ready, since calls can come from then on; the
//  others get the tools as they answer. Returns 0 or -1.
int
    dsh_provider_wait_ready (dsh_provider_t *self, int timeout_ms);

//  Wait until a broker has applied an ANNOUNCE of this provider (it
//  answered a HEARTBEAT sent after it) or timeout_ms passed: every refusal
//  of that ANNOUNCE is in (dsh_provider_refusal) by then. Returns 0 or -1.
int
    dsh_provider_wait_applied (dsh_provider_t *self, int timeout_ms);

//  The next refusal the broker sent ("tool: reason"), or NULL if none came
//  within timeout_ms. Caller frees it.
char *
    dsh_provider_refusal (dsh_provider_t *self, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
