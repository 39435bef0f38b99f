/*  =========================================================================
    dsh_registry_priv - the registry actor's state, shared by its files

    The registry is one actor with one loop and one state (self_t), but
    several concepts: FRONT commands, dispatch, the work socket and id
    ownership, presence, the stored state. Each has a file of its own
    (dsh_registry.c lists them); this header is what they share: self_t,
    and the functions one file calls in another, each named after the
    file that has it (dsh_front_*, dsh_dispatch_*, dsh_work_*, ...).

    Why one shared state and not an object per concept: they all send on
    the same sockets, count in the same counters and answer through the
    same call records, so objects of their own would pass the actor to
    each other anyway. Malamute splits its server the same way, into the
    engine and the server's actions over one state; as czmq keeps a
    class's state private, this header is for the registry's files only:
    the rest of the broker sees dsh_registry.h. What is pure policy, with
    no sockets, is a class of its own beside them (dsh_owner, dsh_routes,
    dsh_fairq).
    =========================================================================
*/

#ifndef DSH_REGISTRY_PRIV_H_INCLUDED
#define DSH_REGISTRY_PRIV_H_INCLUDED

#include "dsh_registry.h"
#include "dsh_audit.h"
#include "dsh_calltrace.h"
#include "dsh_catalog.h"
#include "dsh_chain.h"
#include "dsh_config.h"
#include "dsh_curve.h"
#include "dsh_heap.h"
#include "dsh_fairq.h"
#include "dsh_inflight.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_parts.h"
#include "dsh_pins.h"
#include "dsh_proto.h"
#include "dsh_routes.h"
#include "dsh_sock.h"
#include "dsh_stats.h"
#include "dsh_store.h"

//  Messages taken from one socket per wakeup, at most
#define DSH_REGISTRY_BATCH 64

//  SNAPSHOT (dsh_front.c): one encoding per catalog version, sent at a
//  bounded rate
typedef struct {
    zchunk_t *entries;          //  the reply's entries after the id, or NULL
    uint64_t version;           //  the catalog version it shows, plus one
    uint64_t seq;               //  ... and the seq
    size_t pairs;               //  its entries
    bool ticking;               //  the timer that serves the queue runs
    int ticking_id;             //  ... its id
    zlistx_t *queue;            //  s_snapshot_wait_t, oldest first
    zhashx_t *waiting;          //  routing id (hex) -> its entry in the queue
    int64_t rate;               //  bytes a second
    int64_t budget;             //  bytes that may go now (below 0: a debt)
    int64_t refilled;           //  when the budget was last refilled
    uint64_t queued;            //  requests that had to wait their turn
} dsh_front_snapshots_t;

//  The state kept in the store (dsh_stored.c)
typedef struct {
    zhashx_t *modes_set;        //  agent -> when `dsh mode` set it here (int64_t *, zclock_mono)
    //  The stored state as last read (MODES, PINS, GRANTS frames), applied
    //  again once changes made here lately no longer stand against it
    zframe_t *frames [3];
    int64_t due [3];            //  when each is applied again (zclock_mono), or 0
} dsh_stored_state_t;

//  The registry actor's state.
typedef struct {
    zsock_t *pipe;
    zloop_t *loop;
    zsock_t *front;             //  ROUTER: clients
    zsock_t *announce;          //  SUB: component announcements, heartbeats
    zsock_t *work;              //  ROUTER: component calls and results
    zsock_t *events;            //  PUB: change events
    zsock_t *work_monitor;      //  PAIR: WORK's disconnections
    bool curve;                 //  every socket authenticated: identities enforced
    zcert_t *cert;              //  the broker's keypair (the config's)
    dsh_routes_t *routes;       //  component id <-> the WORK connection that owns it
    zhashx_t *presence_keys;    //  under CURVE, component id -> the key whose presence it is
    dsh_catalog_t *catalog;
    dsh_parts_t *parts;         //  tool sets announced in parts, until whole
    size_t max_tools;           //  a set comes in at most this many parts
    dsh_inflight_t *inflight;   //  every call, from FRONT to its answer
    dsh_chain_t *chain;         //  the middleware stages every call runs through
    dsh_heap_t *heap;           //  gives freed memory back, after a storm
    dsh_fairq_t *fairq;         //  calls held for busy components, served by caller in turn
    dsh_stats_t *stats;         //  call statistics, or NULL (--no-stats)
    dsh_audit_t *audit;         //  the audit trail and the stored modes, or NULL (off)
    char *name;                 //  the broker's stable id (its audit chain)
    char *store;                //  where the audit goes, for STATS
    char *broker_id;
    uint64_t epoch;             //  changes when the broker restarts
    int64_t started_ms;
    char *error;                //  why the actor could not start, or NULL
    bool verbose;
    int heartbeat_ms;
    int liveness;
    int call_timeout_ms;
    int max_call_timeout_ms;
    int max_message_bytes;
    size_t max_in_flight;       //  calls in the broker, at most
    char *endpoints [4];        //  front, announce, work, events as bound
    uint64_t forbidden;         //  messages refused for their key's rights
    uint64_t calls;             //  calls routed to a component
    uint64_t late_results;      //  results for calls already answered
    uint64_t dropped_replies;   //  replies to callers that had gone
    uint64_t bad_messages;      //  malformed input, from anyone
    int queue_limit;            //  every socket's high-water mark
    dsh_front_snapshots_t snapshot; //  SNAPSHOT replies (dsh_front.c)
    int64_t expired_at;         //  when the expiry check last ran
    dsh_pins_t *pins;           //  pinned tool definitions, or NULL (pins = off)
    dsh_stored_state_t stored;  //  the state kept in the store (dsh_stored.c)
} self_t;

//  ---------------------------------------------------------------------
//  The actor (dsh_registry.c)

//  The CURVE key a component's WORK connection has, for the pin of a
//  definition it offers first; NULL on plain connections.
const char *
    dsh_registry_component_key (void *arg, const char *component);

//  Publishes the events of a change, and asks every component that was
//  refused a name the change freed to announce again.
void
    dsh_registry_publish (self_t *self, zlistx_t *events);

//  ---------------------------------------------------------------------
//  Dispatch (dsh_dispatch.c)

//  A frame holding a copy of a part's bytes.
zframe_t *
    dsh_dispatch_frame_of (zmq_msg_t *part);

//  Sends command body on FRONT along the envelope; takes both.
void
    dsh_dispatch_send_front (self_t *self, zmsg_t **envelope_p, const char *command, zframe_t **body_p);

//  Sends ERROR {id?, code, message} on FRONT along the envelope; takes it.
void
    dsh_dispatch_reply_error (self_t *self, zmsg_t **envelope_p, const msgpack_object *id, const char *code, const
        char *message);

//  Sends route "" DSH1 command body on FRONT; moves the route frames out
//  when move is set, else copies them. Takes the body.
int
    dsh_dispatch_send_route (self_t *self, zmq_msg_t *route, size_t route_size, bool move, const char *command,
        zmq_msg_t *body);

//  dsh_inflight's way out: a call's one RESULT.
int
    dsh_dispatch_reply_route (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body);

//  Answers a call that has a record: back up the chain if there is one
//  (stages see every result, the waterfall's "after"), else to the caller.
void
    dsh_dispatch_answer (self_t *self, dsh_record_t **record_p, zmq_msg_t *body);

//  Answers a call that has a record with an error RESULT (code, text).
void
    dsh_dispatch_answer_error (self_t *self, dsh_record_t **record_p, const char *code, const char *text);

//  The call is over for everyone who holds it, whatever answers it next:
//  its component (if it is there) and every stage that holds or watches it.
void
    dsh_dispatch_release (self_t *self, dsh_record_t *record, const char *reason);

//  Sends the calls held for a component while it has room in its window,
//  the next caller's first each time.
void
    dsh_dispatch_refill (self_t *self, const char *component);

//  Sends a decided call to a provider of its tool, holds it until the
//  provider has room, or answers it at once. Takes the body.
void
    dsh_dispatch_call (self_t *self, dsh_record_t *record, zmq_msg_t *body);

//  Writes why tool may not run now into text and returns true, or
//  returns false: its definition is quarantined (pins).
bool
    dsh_dispatch_quarantined (self_t *self, const char *tool, char *text, size_t size);

//  The chain host: a call leaves the bottom of the chain. What the stages
//  judged is what runs: a tool quarantined meanwhile, or whose entry
//  changed since the call entered the chain, is not called.
void
    dsh_dispatch_chain_out (void *arg, dsh_record_t *record, zframe_t **body_p);

//  The chain host: a stage's reply to a CONTROL, on FRONT.
void
    dsh_dispatch_chain_control_reply (void *arg, zmsg_t **envelope_p, zframe_t **body_p);

//  Answers every call in flight to a component that has gone, or retries
//  it once on another replica if the tool says it is idempotent. The calls
//  held for it never reached it: they go to another provider, if there is
//  one, like new calls.
void
    dsh_dispatch_fail_component_calls (self_t *self, const char *component, const char *why);

//  ---------------------------------------------------------------------
//  The work socket (dsh_work.c)

//  The WORK connection that owns component's id, or NULL: only a
//  connection that claimed the id (and, under CURVE, spoke with a key
//  allowed for it) gets anything sent to the id.
dsh_route_t *
    dsh_work_route (self_t *self, const char *component);

//  The routing id a message to component goes to: its route's; without
//  CURVE, for a component that has not spoken on WORK yet, the id itself
//  (a component whose routing id is its id may announce before its HELLO).
const char *
    dsh_work_route_link (self_t *self, const char *component);

//  Sends command [token] body to the connection that owns component's id.
int
    dsh_work_send (self_t *self, const char *component, const char *command, const uint64_t *token, zframe_t
        **body_p);

//  Asks a component to ANNOUNCE now (SYNC on WORK).
void
    dsh_work_send_sync (self_t *self, const char *component);

void
    dsh_work_send_heartbeat (self_t *self, const char *component);

//  Gives a component's id to the connection that waited longest for it, if
//  one did, and asks it to announce.
void
    dsh_work_promote (self_t *self, const char *component);

//  A WORK connection closed: the ids it held are free (to whoever waits
//  for them), and their components unreachable until a connection claims
//  them again.
int
    dsh_work_monitor_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  Reads and handles one message on WORK (a dsh_sock_drain callback).
int
    dsh_work_one (zsock_t *reader, void *arg);

//  The loop's reader of WORK: a batch of messages.
int
    dsh_work_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  ---------------------------------------------------------------------
//  Presence (dsh_presence.c)

//  Removes a component from the catalog (withdrawn, expired), and answers or moves its calls.
void
    dsh_presence_remove_component (self_t *self, const char *component, const char *reason);

//  Reads and handles one message on the announce channel (a dsh_sock_drain callback).
int
    dsh_presence_announce_one (zsock_t *reader, void *arg);

//  The loop's reader of the announce channel: a batch of messages.
int
    dsh_presence_announce_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  ---------------------------------------------------------------------
//  FRONT (dsh_front.c)

//  The SNAPSHOT queue, empty, with a full budget of bytes_per_second.
void
    dsh_front_snapshot_init (self_t *self, int64_t bytes_per_second);

//  The loop's reader of FRONT: a batch of requests.
int
    dsh_front_recv (zloop_t *loop, zsock_t *reader, void *arg);

//  ---------------------------------------------------------------------
//  The stored state (dsh_stored.c)

//  `dsh mode` on a plan stage is kept in the store: it survives a restart,
//  and every broker on the same store follows it.
void
    dsh_stored_keep_mode (self_t *self, const msgpack_object *stage, const msgpack_object *command, const
        msgpack_object *args, const char *caller);

//  A grant revoked on a permission stage is revoked in the store as well:
//  no broker on the store lets it through again.
void
    dsh_stored_keep_revoke (self_t *self, const msgpack_object *stage, const msgpack_object *command, const
        msgpack_object *args);

//  A built-in stage's note on a call: a grant an approver gave is kept in
//  the store, so it outlives this broker and reaches the others on it.
void
    dsh_stored_chain_note (void *arg, const char *stage, json_t *note);

//  The stored grants (a packed array of grant maps), handed to every
//  permission stage: at start, and when another broker on the store made
//  or revoked one.
void
    dsh_stored_apply_grants (self_t *self, zframe_t *frame);

//  The stored modes (a packed map agent -> mode), applied to the plan
//  stages: at start, and when another broker on the store changed one. A
//  mode set here in the last few seconds stands until the store has it.
void
    dsh_stored_apply_modes (self_t *self, zframe_t *frame);

int
    dsh_stored_again (zloop_t *loop, int timer_id, void *arg);

//  The audit's reader: a query's reply to send on FRONT, or the stored
//  state (modes, pins, grants).
int
    dsh_stored_audit_recv (zloop_t *loop, zsock_t *reader, void *arg);

#endif
