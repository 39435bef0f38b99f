/*  =========================================================================
    dsh_inflight - every call in the broker, one record each, from the
    moment FRONT receives it to its one answer

    A record holds what the broker needs to answer the call without anyone
    else: the caller's route, the callId, the tool name the call was decided
    for, one deadline (the call's timeoutMs from receipt, capped by the
    broker), and where the call is now: in a chain stage (going down or
    coming back up) or at a component. Its token is an unguessable 64-bit
    value: the only key a stage or a component ever sees.

    The table is the one place a reply can come from: dsh_inflight_answer
    sends the call's RESULT to its caller and takes the record out, so a
    call is answered once, whoever (the chain's top, a component's result,
    a deadline, a departure) finishes it. Records are found by token, by
    caller (route and callId, for CANCEL), and by deadline, in one scan.
    =========================================================================
*/

#ifndef DSH_INFLIGHT_H_INCLUDED
#define DSH_INFLIGHT_H_INCLUDED

#include <czmq.h>

#include "dsh_proto.h"
#include "dsh_stats.h"
#include "dsh_audit.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Routing frames a caller's envelope may have; deeper ones are refused.
#define DSH_ROUTE_MAX 8

typedef enum {
    DSH_AT_CHAIN,               //  in stage `stage`, going `down` or up
    DSH_AT_COMPONENT,           //  sent to `component`, waiting for its RESULT
    DSH_AT_QUEUE                //  held in the broker (dsh_fairq) until `component` has room
} dsh_where_t;

typedef struct _dsh_inflight_t dsh_inflight_t;

//  One call. The table owns it; its fields are the broker's to read and
//  move along (the chain sets where/stage/down/hold_until_ms, the registry
//  component/retry).
typedef struct {
    uint64_t token;
    zmq_msg_t route [DSH_ROUTE_MAX];    //  the caller's envelope, frame by frame
    size_t route_size;
    char call_id [DSH_CALL_ID_MAX + 1];
    char tool [DSH_NAME_MAX + 1];       //  decided at FRONT; what is dispatched
    char caller [41];           //  the caller's public key under CURVE, else ""
    int64_t deadline_ms;                //  the call's own, zclock_mono
    dsh_where_t where;
    size_t stage;                       //  DSH_AT_CHAIN: the stage holding it
    bool down;                          //  DSH_AT_CHAIN: on its way down
    int64_t hold_until_ms;              //  DSH_AT_CHAIN: the stage's limit, <= deadline_ms
    zlistx_t *hops;                     //  the chain's: stages passed, innermost last
    zframe_t *held;                     //  the chain's: the body a fail-open stage holds
    zframe_t *entry;                    //  the chain's: the tool's registry entry, or empty
    char component [DSH_ID_MAX + 1];    //  DSH_AT_COMPONENT: where it went; DSH_AT_QUEUE: where it goes
    void *queued;                       //  DSH_AT_QUEUE: its place in dsh_fairq
    zmq_msg_t retry_body;               //  kept for an idempotent tool's retry
    bool has_retry_body;
    bool retried;                       //  already sent to a second replica
    bool indexed;                       //  in the caller index (the newest of its callId)
    int64_t arrival_us;                 //  zclock_usecs at FRONT, with statistics on
    dsh_stats_tool_t *stats_tool;       //  the rows its answer is counted in (dsh_stats_open)
    dsh_stats_agent_t *stats_agent;
    int outcome;                        //  its answer's, once known (dsh_stats_outcome); else 0
    dsh_audit_trail_t *trail;           //  with the audit on: what the record of it says so far
    zframe_t *audit_sent;               //  with the audit on: the body its stage was handed
} dsh_record_t;

//  Sends a RESULT body to a caller along route (route_size frames, which
//  it may move out: the record is done with them). Takes the body (moves
//  it into libzmq, or closes it). Returns 0, or -1 if it was dropped.
typedef int (dsh_inflight_reply_fn) (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body);

//  An empty table; reply sends every answer.
dsh_inflight_t *
    dsh_inflight_new (dsh_inflight_reply_fn *reply, void *arg);

//  Destroy the table and every record in it, unanswered (the broker is
//  stopping). Safe twice.
void
    dsh_inflight_destroy (dsh_inflight_t **self_p);

//  Count every answer in stats (borrowed; NULL: statistics off). A
//  record's rows are its own to set (dsh_stats_open), after it is opened.
void
    dsh_inflight_set_stats (dsh_inflight_t *self, dsh_stats_t *stats);

//  Hand every answered call's trail to audit (borrowed; NULL: off), with
//  the answer, where the answer is sent.
void
    dsh_inflight_set_audit (dsh_inflight_t *self, dsh_audit_t *audit);

//  Open a record for a call: moves the route frames in (they are closed
//  in the caller's array), copies call_id and tool, gives it a fresh token.
//  The newest call of a caller with a callId is the one CANCEL finds.
dsh_record_t *
    dsh_inflight_open (dsh_inflight_t *self, zmq_msg_t *route, size_t route_size,
                       const char *call_id, const char *tool, int64_t deadline_ms);

//  Who a call is from, as the bytes fairness between callers is computed
//  on (dsh_fairq): the one definition of a caller. Under CURVE the
//  caller's public key (record->caller, set at FRONT), so one key is one
//  caller however many connections it opens; without it the FRONT
//  connection the call came in on (its routing id, the route's first
//  frame). Points into the record.
const void *
    dsh_inflight_caller (dsh_record_t *record, size_t *size);

//  The record of token, or NULL.
dsh_record_t *
    dsh_inflight_lookup (dsh_inflight_t *self, uint64_t token);

//  The newest record of a caller's call (route and callId), or NULL.
dsh_record_t *
    dsh_inflight_find_caller (dsh_inflight_t *self, zmq_msg_t *route, size_t route_size,
                              const char *call_id);

//  Answer a call: send body (taken) to its caller, take the record out of
//  the table and destroy it. The one place a call's RESULT is sent from,
//  and so where it is counted: with the record's outcome if set, else
//  the body's.
void
    dsh_inflight_answer (dsh_inflight_t *self, dsh_record_t **record_p, zmq_msg_t *body);

//  The same with a body in a frame (taken).
void
    dsh_inflight_answer_frame (dsh_inflight_t *self, dsh_record_t **record_p, zframe_t **body_p);

//  Answer a call with an error result {callId, content:[text], isError,
//  error:{name, code}}.
void
    dsh_inflight_answer_error (dsh_inflight_t *self, dsh_record_t **record_p, const char *code,
                               const char *text);

//  Take a record out of the table without answering it, and destroy it
//  (the caller cancelled it and was answered by the broker already).
void
    dsh_inflight_drop (dsh_inflight_t *self, dsh_record_t **record_p);

//  The records whose deadline or hold limit is at or before now_ms, in a
//  new list (the records stay in the table; the list does not own them).
zlistx_t *
    dsh_inflight_due (dsh_inflight_t *self, int64_t now_ms);

//  The records at component, in a new list (not owning them).
zlistx_t *
    dsh_inflight_at_component (dsh_inflight_t *self, const char *component);

//  Number of calls in the table.
size_t
    dsh_inflight_size (dsh_inflight_t *self);

//  Encode a token as its 8-byte frame (big-endian).
zframe_t *
    dsh_inflight_token_frame (uint64_t token);

//  Decode an 8-byte token; returns 0, or -1 if size is not 8.
int
    dsh_inflight_token_decode (const void *data, size_t size, uint64_t *token);

#ifdef __cplusplus
}
#endif

#endif
