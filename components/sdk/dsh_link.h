/*  =========================================================================
    dsh_link - following a broker: one broker-session state machine

    What every party that follows a broker has to decide, written once:
    which broker to use (round robin over a list), when to say HELLO and
    PING, when the broker's silence means it is gone, and when its instance
    id says it restarted. The client, the provider, the stage and the
    watcher keep their own sockets; they tell the link what they saw and do
    what its events say. PROTOCOL.md, "Client liveness", holds the table
    this class implements; tests/conformance/link_cases.json holds the
    cases every language's copy of it passes.

    The link is pure: it owns no socket and never reads the clock. Every
    input takes `now` (ms, zclock_mono () in the SDK), so a test drives it
    with a fake clock. After each input the owner takes the events it made
    with dsh_link_next, in order, and calls dsh_link_tick again by the time
    it returned.
    =========================================================================
*/

#ifndef DSH_LINK_H_INCLUDED
#define DSH_LINK_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_link_t dsh_link_t;

//  Who follows the broker; each profile is one column of the table.
typedef enum {
    DSH_LINK_CLIENT = 1,        //  no HELLO; watches only while it awaits
                                //  something; PINGs after a heartbeat of
                                //  silence; a restart is a broker gone
    DSH_LINK_COMPONENT,         //  provider, stage: HELLO until WELCOME, then
                                //  a PING (HEARTBEAT) every heartbeat; silence
                                //  counts only once welcomed
    DSH_LINK_WATCHER            //  as a component, but silence also counts
                                //  while it says HELLO
} dsh_link_profile_t;

typedef enum {
    DSH_LINK_CONNECTING = 1,    //  client: connection asked for, none seen
    DSH_LINK_HELLO,             //  component, watcher: HELLO sent, no WELCOME
    DSH_LINK_LIVE               //  reached (client) or welcomed
} dsh_link_state_t;

typedef enum {
    DSH_LINK_CONNECT = 1,       //  connect (afresh) to endpoint
    DSH_LINK_SEND_HELLO,        //  send HELLO on the connection
    DSH_LINK_SEND_PING,         //  send PING (a component: HEARTBEAT)
    DSH_LINK_UP,                //  the broker is reached (client) or welcomed
    DSH_LINK_DOWN,              //  the broker at endpoint is gone: silent
                                //  for silence_ms, reached or never reached
    DSH_LINK_RESTARTED          //  the broker at endpoint answered under a
                                //  new instance id
} dsh_link_event_type_t;

#define DSH_LINK_INSTANCE_MAX 64

//  One event, copied out by dsh_link_next. endpoint points into the link's
//  list of brokers: it lives as long as the link.
typedef struct {
    dsh_link_event_type_t type;
    const char *endpoint;       //  CONNECT: the one to use; DOWN, RESTARTED:
                                //  the one left
    bool reached;               //  DOWN: a connection to it was seen
    int64_t silence_ms;         //  DOWN: how long it had been silent
    char instance [DSH_LINK_INSTANCE_MAX + 1];  //  RESTARTED: the new id
    char was [DSH_LINK_INSTANCE_MAX + 1];       //  RESTARTED: the old one
} dsh_link_event_t;

//  How often a HELLO is sent again until WELCOME comes.
#define DSH_LINK_HELLO_RETRY_MS 1000

//  A link with no brokers yet, under the defaults (heartbeat 1000 ms,
//  liveness 3) until the broker gives its own.
dsh_link_t *
    dsh_link_new (dsh_link_profile_t profile);

//  Destroys the link; nulls the pointer. Safe twice.
void
    dsh_link_destroy (dsh_link_t **self_p);

//  Adds a broker's endpoint at the end of the list, before dsh_link_start.
void
    dsh_link_add (dsh_link_t *self, const char *endpoint);

//  Starts with the first broker: CONNECT (and SEND_HELLO but for a client).
void
    dsh_link_start (dsh_link_t *self, int64_t now);

//  The owner saw the connection come up (the ZMTP handshake): silence
//  counts from now, and a client's broker is reached.
void
    dsh_link_connected (dsh_link_t *self, int64_t now);

//  Anything at all came from the broker.
void
    dsh_link_heard (dsh_link_t *self, int64_t now);

//  A WELCOME came (the owner found it usable): instance may be NULL,
//  heartbeat_ms and liveness 0 where it names none.
void
    dsh_link_welcome (dsh_link_t *self, int64_t now, const char *instance, int heartbeat_ms, int liveness);

//  A PONG came: instance may be NULL, heartbeat_ms and liveness 0 where it
//  names none. An instance other than the first on this connection means
//  the broker restarted.
void
    dsh_link_pong (dsh_link_t *self, int64_t now, const char *instance, int heartbeat_ms, int liveness);

//  A client awaits something (on) or nothing (off). A watch that begins
//  counts silence from now. Other profiles always watch.
void
    dsh_link_watch (dsh_link_t *self, int64_t now, bool on);

//  A client leaves its broker for the next one (UNKNOWN_TOOL with other
//  brokers to try): CONNECT, SEND_PING.
void
    dsh_link_move (dsh_link_t *self, int64_t now);

//  Applies the clock: HELLO or PING when due, DOWN when silent too long.
//  Returns when it next needs a tick, INT64_MAX for not until an input.
int64_t
    dsh_link_tick (dsh_link_t *self, int64_t now);

//  Takes the oldest event not taken yet: 0, or -1 if there is none.
int
    dsh_link_next (dsh_link_t *self, dsh_link_event_t *event);

//  The state.
dsh_link_state_t
    dsh_link_state (dsh_link_t *self);

//  The endpoint in use (an item of the list); NULL before dsh_link_start.
const char *
    dsh_link_endpoint (dsh_link_t *self);

//  How many brokers are in the list.
size_t
    dsh_link_size (dsh_link_t *self);

//  True if the broker in use was reached: a connection or a message seen.
bool
    dsh_link_reached (dsh_link_t *self);

//  The broker's heartbeat interval, or the default until it gave one.
int
    dsh_link_heartbeat_ms (dsh_link_t *self);

//  The broker's liveness, or the default until it gave one.
int
    dsh_link_liveness (dsh_link_t *self);

//  The instance id the broker first gave on this connection, or NULL.
const char *
    dsh_link_instance (dsh_link_t *self);

//  The name of a state or an event type, as the case file spells it.
const char *
    dsh_link_state_name (dsh_link_state_t state);
const char *
    dsh_link_event_name (dsh_link_event_type_t type);

#ifdef __cplusplus
}
#endif

#endif
