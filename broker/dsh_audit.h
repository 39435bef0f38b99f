/*  =========================================================================
    dsh_audit - one audit record per answered call, written off the
    broker's loop to the store (dsh_store), and the store read back for
    AUDIT queries and the swarm's durable modes

    The registry actor fills a trail per call as the call goes (who sent
    it, what each stage decided, who approved it, where it ran) and hands
    it over where the call's one answer is sent. Handing over is a push on
    a queue bounded in bytes (no socket, no system call unless the writer
    sleeps); the writer thread takes the queue in batches, builds each
    record's JSON (PROTOCOL.md, "The audit record"), and appends the batch
    in one transaction. The bytes a trail pins (the caller's CALL body and
    the result, shared with libzmq, not copied) count against the bound.

    Policy when the store fails or cannot keep up: required (the default)
    refuses new calls (dsh_audit_admits false: AUDIT_UNAVAILABLE) until a
    batch is written again, so no call runs unrecorded; best-effort drops
    records, counts them, and writes one record saying how many were lost
    once the store takes writes again. Either way the writer tries again,
    backing off to a second, so a store that comes back is used again.

    Reads (AUDIT queries, verify, the modes) run on a second thread with
    its own connection, so a long query never delays the writes; their
    replies come back on dsh_audit_socket for the registry to forward.
    =========================================================================
*/

#ifndef DSH_AUDIT_H_INCLUDED
#define DSH_AUDIT_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DSH_AUDIT_OFF,
    DSH_AUDIT_REQUIRED,
    DSH_AUDIT_BEST_EFFORT
} dsh_audit_policy_t;

typedef enum {
    DSH_AUDIT_ARGS_FULL,            //  the arguments, as Typed JSON, up to a size
    DSH_AUDIT_ARGS_DIGEST,          //  only their SHA-256
    DSH_AUDIT_ARGS_NONE             //  neither
} dsh_audit_args_t;

typedef struct {
    dsh_audit_policy_t policy;
    const char *store;              //  dsh_store location
    const char *broker;             //  the chain: this broker's stable id
    uint64_t epoch;                 //  this run of the broker
    dsh_audit_args_t arguments;
    size_t arguments_max_bytes;     //  full: larger arguments are kept as a digest
    const char *digest_tools;       //  full: tools (comma-separated globs) kept as a digest
    size_t queue_bytes;             //  records waiting, at most
    int retain_days;                //  0: forever
    uint64_t max_bytes;             //  the chain's record bytes, at most (0: no bound)
    int modes_poll_ms;              //  how often the shared state (modes, pins, grants) is read
    bool state;                     //  keep the durable state even when policy is off
} dsh_audit_config_t;

typedef struct _dsh_audit_t dsh_audit_t;
typedef struct _dsh_audit_trail_t dsh_audit_trail_t;

//  Start the writer and the reader on config (copied). Returns NULL only
//  when policy is off and no durable state is kept (config->state); with
//  policy off and state kept, no call is recorded (no trail is made). A store that cannot be opened now is logged and
//  tried again; until then a required audit admits no call.
dsh_audit_t *
    dsh_audit_new (const dsh_audit_config_t *config);

//  Stop: the writer writes what is queued (for at most timeout_ms), then
//  both threads end. Safe twice.
void
    dsh_audit_destroy (dsh_audit_t **self_p, int timeout_ms);

//  True if a new call may run now; else false with why in text (a
//  required audit whose store is failing, or whose queue is full).
bool
    dsh_audit_admits (dsh_audit_t *self, char *text, size_t text_size);

//  A trail for a call received now, from the FRONT message body (its
//  bytes are shared, not copied). NULL if self is NULL.
dsh_audit_trail_t *
    dsh_audit_trail_new (dsh_audit_t *self, zmq_msg_t *body);

//  Destroy a trail not handed over. Safe twice.
void
    dsh_audit_trail_destroy (dsh_audit_trail_t **self_p);

//  Who sent the call: the key's identity under CURVE (NULLs on a plain
//  connection), the connection's peer address, the agent the call claimed.
void
    dsh_audit_trail_caller (dsh_audit_trail_t *self, const char *key, const char *name, const char *role,
                            const char *agent, const char *address, const char *claimed_agent);

//  The call's callId and tool.
void
    dsh_audit_trail_call (dsh_audit_trail_t *self, const char *call_id, const char *tool);

//  The call's trace id (32 hex digits), when it had a trace context.
void
    dsh_audit_trail_trace (dsh_audit_trail_t *self, const char *trace_id);

//  One stage's decision, in order: verdict is "passed", "rewrote",
//  "answered", "failed", "skipped" or "rewrote-result"; reason may be NULL.
void
    dsh_audit_trail_stage (dsh_audit_trail_t *self, const char *stage, const char *kind, const char *verdict,
                           const char *reason);

//  An approval: its request id, the approver, the decision, when.
void
    dsh_audit_trail_approval (dsh_audit_trail_t *self, const char *request, const char *approver,
                              const char *decision, int64_t at_ms, const char *grant);

//  Where the call went: the component, its host, how many providers the
//  tool had, the digest of the tool's entry (NULL if none), and the body
//  sent, kept if it is not the caller's (shared, not copied; NULL: the
//  one given before, if any, stands).
void
    dsh_audit_trail_dispatch (dsh_audit_trail_t *self, const char *component, const char *host,
                              size_t providers, const char *tool_digest, zmq_msg_t *body);

//  The call is answered with body (shared, not copied): hand the trail
//  over (taken). With a best-effort audit that cannot take it, it is
//  dropped and counted.
void
    dsh_audit_submit (dsh_audit_t *self, dsh_audit_trail_t **trail_p, zmq_msg_t *body);

//  An AUDIT request (its body, already checked by the registry) with the
//  envelope to answer along (both taken). The reply comes back on
//  dsh_audit_socket as REPLY|ERROR body envelope... Returns 0, or -1 if
//  the reader has too many queries waiting (never blocks).
int
    dsh_audit_query (dsh_audit_t *self, zmsg_t **envelope_p, zframe_t **body_p);

//  Store agent's mode (NULL: cleared), set by whom.
void
    dsh_audit_mode_set (dsh_audit_t *self, const char *agent, const char *mode, const char *set_by);

//  Write pin changes (dsh_pins_take_ops; the list is taken).
void
    dsh_audit_pins_write (dsh_audit_t *self, zlistx_t **ops_p);

//  Keep a grant (its JSON text) made by stage until expires_ms (wall
//  clock), and revoke one.
void
    dsh_audit_grant_keep (dsh_audit_t *self, const char *id, const char *stage, const char *grant,
                          int64_t expires_ms);

void
    dsh_audit_grant_revoke (dsh_audit_t *self, const char *id);

//  Read the stored modes and grants at location now, as the frames the
//  reader sends (below), blocking: for a broker that starts, so that no
//  call runs before they hold. Returns 0, or -1 with a reason (both NULL).
int
    dsh_audit_read_state (const char *location, zframe_t **modes_p, zframe_t **grants_p,
                          char *error, size_t error_size);

//  True if calls are recorded (policy is not off).
bool
    dsh_audit_records (dsh_audit_t *self);

//  The socket the reader answers on: query replies (as above), and, when
//  what is stored differs from what was last sent (the first time at
//  start): "MODES" frames with a packed map agent -> mode; "PINS" with a
//  packed array of pins {name, digest, definition, component, key,
//  firstMs, acceptedBy, acceptedMs, rejected}; "GRANTS" with a packed
//  array of the live grants (maps, as their stages made them).
zsock_t *
    dsh_audit_socket (dsh_audit_t *self);

//  Counters, for STATS and the metrics.
typedef struct {
    uint64_t records;               //  written
    uint64_t dropped;               //  best-effort: never written
    uint64_t refused;               //  required: calls refused AUDIT_UNAVAILABLE
    uint64_t queue_bytes;           //  waiting now
    uint64_t batches;
    uint64_t write_us_total;        //  time in append, all batches
    uint64_t write_us_max;
    bool healthy;                   //  the last write succeeded
    char store_kind [16];
} dsh_audit_counts_t;

void
    dsh_audit_counts (dsh_audit_t *self, dsh_audit_counts_t *counts);

//  Note a call refused AUDIT_UNAVAILABLE.
void
    dsh_audit_refused (dsh_audit_t *self);

#ifdef __cplusplus
}
#endif

#endif
