/*  =========================================================================
    dsh_inflight - every call in the broker, one record each, from the
    moment FRONT receives it to its one answer

    A record holds what the broker needs to answer the call without anyone
    else: the caller's route, the callId, the tool name the call was decided
    for, one deadline (the call's timeoutMs from receipt, capped by the
    broker), and where the call is now. Its token is an unguessable 64-bit
    value: the only key a stage or a component ever sees.

    Where a call is belongs to this table alone. A record is opened in the
    broker's hands (DSH_AT_BROKER) and moves only through the moves below
    (dsh_inflight_to_chain, _to_broker, _to_queue, _to_component), which
    assert that the move is legal; no one else writes it. What a module
    keeps on a call for itself (the chain's stages passed, the fair queue's
    place) is in that module's own slot (dsh_inflight_slot), out of the
    public record.

    The table is the one place a reply can come from: dsh_inflight_answer
    sends the call's RESULT to its caller and takes the record out, so a
    call is answered once, whoever (the chain's top, a component's result,
    a deadline, a departure) finishes it. Records are found by token, by
    caller (route and callId, for CANCEL), and by when they fall due: a
    min-heap on each record's due time (its stage's limit while a chain
    stage holds it, else its deadline), so finding what is due costs what
    is due, not what is in flight.
    =========================================================================
*/

#ifndef DSH_INFLIGHT_H_INCLUDED
#define DSH_INFLIGHT_H_INCLUDED

#include <czmq.h>

#include "dsh_proto.h"
#include "dsh_stats.h"
#include "dsh_audit.h"
#include "dsh_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Routing frames a caller's envelope may have; deeper ones are refused.
#define DSH_ROUTE_MAX 8

//  Where a call is. The legal moves (dsh_inflight.c's s_legal), from -> to:
//      BROKER     -> CHAIN (down into stage 0, or up from past the last
//                    stage), COMPONENT (sent), QUEUE (held)
//      CHAIN      -> CHAIN (down to a deeper stage, or up to an outer one;
//                    never down again once up), BROKER (past the last stage)
//      COMPONENT  -> CHAIN (up, with its result), COMPONENT (another replica)
//      QUEUE      -> BROKER (taken off the queue)
//  and from anywhere out of the table, answered.
typedef enum {
    DSH_AT_BROKER,              //  in the broker's hands: just opened, past the chain's
                                //  last stage, or off the queue; sent, held or answered next
    DSH_AT_CHAIN,               //  in a chain stage, going down or up (dsh_inflight_stage)
    DSH_AT_COMPONENT,           //  sent to `component`, waiting for its RESULT
    DSH_AT_QUEUE,               //  held in the broker (dsh_fairq) until `component` has room
    DSH_WHERE_COUNT
} dsh_where_t;

//  The modules that keep private state on a record, one slot each: a
//  pointer only that module reads or writes.
typedef enum {
    DSH_INFLIGHT_SLOT_CHAIN,    //  dsh_chain: the stages a call passed, the body a fail-open stage holds
    DSH_INFLIGHT_SLOT_FAIRQ,    //  dsh_fairq: the call's place in its lane
    DSH_INFLIGHT_SLOTS
} dsh_inflight_slot_t;

typedef struct _dsh_inflight_t dsh_inflight_t;

//  A call's trace context and the broker's spans on it (dsh_calltrace).
//  All zero when the call has no context and tracing is off.
typedef struct {
    byte trace_id [16];                 //  with known: the call's trace
    byte span_id [8];                   //  ... the id its hops continue from (a span's of
                                        //  the broker's, or the caller's parent id)
    byte flags;                         //  ... W3C trace flags (bit 0: sampled)
    bool known;                         //  it has a valid context, the caller's or the broker's
    bool stamps;                        //  the broker writes its context into what it sends on
    bool restarted;                     //  the broker started the trace: the caller's context
                                        //  was absent or invalid (its tracestate is dropped)
    char stamped [56];                  //  the traceparent last written into the body, or ""
    dsh_span_t *call;                   //  the call's span, or NULL (not recorded)
    dsh_span_t *dispatch;               //  the dispatch to a component, while it runs
} dsh_call_trace_t;

//  One call. The table owns it. Where it is, and until when its place may
//  hold it, are the table's: read them with dsh_inflight_where and
//  dsh_inflight_stage, change them with the moves. The registry sets
//  component (where dispatch sends it), caller, the retry and the rows.
typedef struct {
    uint64_t token;
    zmq_msg_t route [DSH_ROUTE_MAX];    //  the caller's envelope, frame by frame
    size_t route_size;
    char call_id [DSH_CALL_ID_MAX + 1];
    char tool [DSH_NAME_MAX + 1];       //  decided at FRONT; what is dispatched
    char caller [41];           //  the caller's public key under CURVE, else ""
    int64_t deadline_ms;                //  the call's own, zclock_mono
    char component [DSH_ID_MAX + 1];    //  DSH_AT_COMPONENT: where it went; DSH_AT_QUEUE: where it goes
    zmq_msg_t retry_body;               //  kept for an idempotent tool's retry
    bool has_retry_body;
    bool retried;                       //  already sent to a second replica
    bool indexed;                       //  in the caller index (the newest of its callId)
    int64_t arrival_us;                 //  zclock_usecs at FRONT, with statistics on
    dsh_stats_tool_t *stats_tool;       //  the rows its answer is counted in (dsh_stats_open)
    dsh_stats_agent_t *stats_agent;
    int outcome;                        //  its answer's, once known (dsh_stats_outcome); else 0
    dsh_audit_trail_t *trail;           //  with the audit on: what the record of it says so far
    zframe_t *audit_sent;               //  with the audit or a span on: the body its stage was handed
    dsh_call_trace_t trace;             //  its trace context and spans (dsh_calltrace)
} dsh_record_t;

//  Frees what a module keeps in its slot of a record, when the record goes.
typedef void (dsh_inflight_slot_free_fn) (void **state_p);

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

//  Where the call is now.
dsh_where_t
    dsh_inflight_where (dsh_record_t *record);

//  The stage that holds the call (DSH_AT_CHAIN only), and in down whether
//  it is on its way down (NULL: not wanted).
size_t
    dsh_inflight_stage (dsh_record_t *record, bool *down);

//  When the call next falls due: its stage's limit while a chain stage
//  holds it, else its deadline.
int64_t
    dsh_inflight_due_ms (dsh_record_t *record);

//  Move the call into chain stage `stage`, going down or up, until
//  hold_until_ms (the stage's limit; the call's deadline if that is first).
//  Down is into stage 0 from the broker, or a stage deeper; up is to a
//  stage outer than the one that holds it.
void
    dsh_inflight_to_chain (dsh_record_t *record, size_t stage, bool down, int64_t hold_until_ms);

//  Move the call into the broker's hands: past the chain's last stage, or
//  off the queue. Due at its deadline.
void
    dsh_inflight_to_broker (dsh_record_t *record);

//  Move the call onto the queue for record->component (dsh_fairq's push).
//  Due at its deadline.
void
    dsh_inflight_to_queue (dsh_record_t *record);

//  Move the call to record->component, where it was sent (or, already at
//  a component, to the replica it was sent again to). Due at its deadline.
void
    dsh_inflight_to_component (dsh_record_t *record);

//  Set how the state modules keep in slot is freed with its record (NULL:
//  it needs no freeing). The module that owns the slot calls this once.
void
    dsh_inflight_set_slot_free (dsh_inflight_t *self, dsh_inflight_slot_t slot,
                                dsh_inflight_slot_free_fn *free_fn);

//  The slot of a record that module slot keeps its state in (NULL until it
//  sets it). Only that module reads or writes it.
void **
    dsh_inflight_slot (dsh_record_t *record, dsh_inflight_slot_t slot);

//  The records due at or before now_ms (deadline, or a stage's limit),
//  soonest first, in a new list (the records stay in the table; the list
//  does not own them). Costs what is due, not what is in flight.
zlistx_t *
    dsh_inflight_due (dsh_inflight_t *self, int64_t now_ms);

//  When the soonest record falls due, or INT64_MAX if the table is empty.
int64_t
    dsh_inflight_next_due (dsh_inflight_t *self);

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
