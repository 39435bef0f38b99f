/*  =========================================================================
    dsh_chain - the execution chain

    A call goes down: enter -> stage 0 -> stage 1 ... -> the host's
    dispatch; its result goes up through the stages it passed, innermost
    first (its hops), -> dsh_inflight_answer. A stage that answers on its
    way down (a veto) sends the call up from where it is. Every step is a
    move of the record (dsh_inflight_to_chain, _to_broker at the bottom);
    what the chain keeps of a call for itself (its hops, the body a
    fail-open stage holds) is an s_call_t in the record's chain slot.

    Inline stages report what they did through the host callbacks, which
    only queue a step; the chain acts on its queue when control is back in
    its own hands (at the end of each entry point, or on a 1 ms timer when
    a stage resumes a deferred call from its own handler). So a stage is
    never called back into while it is deciding, and a chain of any length
    costs no recursion.

    External stages sit on slots: a DEALER "feed" (the stage's ROUTER
    connects; calls go down it, answers and results come back up it) and a
    ROUTER "drain" (the stage's DEALER connects; calls the stage passed
    arrive there, results going back up leave from there).
    =========================================================================
*/

#include "dsh_chain.h"
#include "dsh_calltrace.h"
#include "dsh_digest.h"
#include "dsh_curve.h"
#include "dsh_log.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

#include <jansson.h>

#define S_TICK_MS               50
#define S_CONTROL_TIMEOUT_MS    5000
#define S_BATCH                 64      //  messages per wakeup, at most

typedef struct _s_slot_t s_slot_t;

struct _s_slot_t {
    dsh_chain_t *chain;
    size_t index;
    char *name;
    char *kind;
    bool external;
    int timeout_ms;
    bool fail_open;
    dsh_stage_t *stage;         //  built-in: run inline
    zsock_t *feed;              //  external: DEALER, down into the stage, answers up
    zsock_t *drain;             //  external: ROUTER, passed calls in, results down to the stage
    char *feed_endpoint;
    char *drain_endpoint;
    uint64_t passed;
    uint64_t answered;
    uint64_t failed;
};

//  A stage a call has passed, and (external stages) the route back to it.
typedef struct {
    size_t index;
    zframe_t *stage_id;         //  the stage's DEALER, as our drain sees it
    zframe_t *feed_id;          //  our feed, as the stage's ROUTER sees it
} s_hop_t;

//  What the chain keeps of a call, in the record's chain slot. A call
//  passes each stage at most once, going down: its hops fit an array as
//  long as the chain, made once when the call enters.
typedef struct {
    zframe_t *entry;            //  the tool's registry entry the stages judge, or empty
    zframe_t *held;             //  the body a fail-open stage holds, to go on without it
    dsh_span_t **spans;         //  with the call's span on: each stage's span while open, by index
    int64_t stage_started_ns;   //  when the stage that holds the call going down was handed it
    size_t span_count;          //  ... spans has one per stage
    size_t hop_count;
    s_hop_t hops [];            //  the stages passed, innermost last
} s_call_t;

//  What an inline stage did, waiting for the chain to act on it.
typedef struct {
    uint64_t token;
    size_t stage;
    bool pass;                  //  passed down, else sent up
    zframe_t *body;
    dsh_doc_t *doc;             //  passed down: the decode of body the stage handed on, or NULL
    dsh_call_head_t head;       //  ... read off doc
} s_step_t;

//  A control command sent to an external stage, waiting for its reply.
typedef struct {
    uint64_t token;
    zmsg_t *envelope;
    zchunk_t *id;               //  the request's id, packed, or NULL
    size_t stage;
    int64_t deadline_ms;
} s_control_t;

struct _dsh_chain_t {
    dsh_chain_host_t host;
    dsh_inflight_t *inflight;
    s_slot_t **slots;
    size_t slot_count;
    zlistx_t *steps;            //  s_step_t *, in order
    bool running;               //  an entry point is on the stack
    bool scheduled;             //  a timer will run the steps
    zhashx_t *controls;         //  token hex -> s_control_t *
    uint64_t next_control;
    zloop_t *loop;
    char *broker;
    char version [17];          //  the configuration's version (dsh_chain_version)
};

static void
s_hop_clear (s_hop_t *self)
{
    zframe_destroy (&self->stage_id);
    zframe_destroy (&self->feed_id);
}

//  Frees a record's chain slot, with the record (dsh_inflight_set_slot_free).
static void
s_call_free (void **self_p)
{
    s_call_t *self = (s_call_t *) *self_p;
    if (self) {
        zframe_destroy (&self->entry);
        zframe_destroy (&self->held);
        for (size_t index = 0; index < self->hop_count; index++)
            s_hop_clear (&self->hops [index]);
        //  Spans still open (the call was let go, or answered past them)
        //  end innermost first, before the call's
        for (size_t index = self->hop_count; self->spans && index > 0; index--)
            dsh_span_end (&self->spans [self->hops [index - 1].index], 0);
        if (self->spans) {
            for (size_t index = 0; index < self->span_count; index++)
                dsh_span_end (&self->spans [index], 0);
            free (self->spans);
        }
        free (self);
        *self_p = NULL;
    }
}

//  The chain's state of a call, or NULL if it never entered the chain.
static s_call_t *
s_call (dsh_record_t *record)
{
    return (s_call_t *) *dsh_inflight_slot (record, DSH_INFLIGHT_SLOT_CHAIN);
}

//  Whether the stage index holds the call (and, if down_only, on its way
//  down): what a step or a message from a stage must find to act.
static bool
s_held_by (dsh_record_t *record, size_t index, bool down_only)
{
    bool down;
    return dsh_inflight_where (record) == DSH_AT_CHAIN && dsh_inflight_stage (record, &down) == index
        && (down || !down_only);
}

//  Whether a stage holds the call on its way down (else it holds its
//  result on the way up, or no stage holds it).
static bool
s_going_down (dsh_record_t *record)
{
    bool down;
    dsh_inflight_stage (record, &down);
    return dsh_inflight_where (record) == DSH_AT_CHAIN && down;
}

//  Sets the body the stage holding the call may be skipped with (NULL:
//  none; the one before is dropped).
static void
s_set_held (s_call_t *call, zframe_t *body)
{
    zframe_destroy (&call->held);
    call->held = body? zframe_dup (body): NULL;
}

static void
s_step_destroy (s_step_t **self_p)
{
    if (*self_p) {
        //  The decode points into the body: it goes first
        dsh_doc_destroy (&(*self_p)->doc);
        zframe_destroy (&(*self_p)->body);
        free (*self_p);
        *self_p = NULL;
    }
}

static void
s_control_destroy (s_control_t **self_p)
{
    if (*self_p) {
        zmsg_destroy (&(*self_p)->envelope);
        zchunk_destroy (&(*self_p)->id);
        free (*self_p);
        *self_p = NULL;
    }
}

static void
s_slot_destroy (s_slot_t **self_p)
{
    if (*self_p) {
        s_slot_t *self = *self_p;
        dsh_stage_destroy (&self->stage);
        zsock_destroy (&self->feed);
        zsock_destroy (&self->drain);
        zstr_free (&self->name);
        zstr_free (&self->kind);
        zstr_free (&self->feed_endpoint);
        zstr_free (&self->drain_endpoint);
        free (self);
        *self_p = NULL;
    }
}

//  Sends frames without giving them up. Returns 0 or -1 with errno.
static int
s_send_frames (zsock_t *sock, zframe_t **frames, size_t count)
{
    for (size_t index = 0; index < count; index++) {
        int flags = ZFRAME_REUSE | ZFRAME_DONTWAIT | (index + 1 < count? ZFRAME_MORE: 0);
        if (zframe_send (&frames [index], sock, flags))
            return -1;
    }
    return 0;
}

//  Sends [token] "" DSH1 command (body) (more...) on an external slot's feed.
static int
s_send_feed (s_slot_t *slot, uint64_t token, const char *command, zframe_t **extra, size_t extra_count)
{
    zframe_t *frames [8];
    assert (extra_count + 4 <= 8);
    frames [0] = dsh_inflight_token_frame (token);
    frames [1] = zframe_new_empty ();
    frames [2] = zframe_from (DSH_PROTOCOL);
    frames [3] = zframe_from (command);
    for (size_t index = 0; index < extra_count; index++)
        frames [4 + index] = extra [index];
    int rc = s_send_frames (slot->feed, frames, 4 + extra_count);
    for (size_t index = 0; index < 4; index++)
        zframe_destroy (&frames [index]);
    return rc;
}

//  ---------------------------------------------------------------------
//  The audit: what each stage did with a call

//  The text of an answer's error (its code, and its first text content).
static void
s_answer_reason (zframe_t *body, char *reason, size_t size)
{
    char error [128];
    snprintf (reason, size, "answered");
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    if (!doc)
        return;
    const msgpack_object *root = dsh_doc_root (doc);
    const msgpack_object *code = dsh_map_get (dsh_map_get (root, "error"), "code");
    const msgpack_object *content = dsh_map_get (root, "content");
    const msgpack_object *text = content && content->type == MSGPACK_OBJECT_ARRAY && content->via.array.size
                               ? dsh_map_get (&content->via.array.ptr [0], "text"): NULL;
    snprintf (reason, size, "%.*s%s%.*s",
              code && code->type == MSGPACK_OBJECT_STR? (int) code->via.str.size: 0,
              code && code->type == MSGPACK_OBJECT_STR? code->via.str.ptr: "",
              code && text? ": ": "",
              text && text->type == MSGPACK_OBJECT_STR? (int) text->via.str.size: 0,
              text && text->type == MSGPACK_OBJECT_STR? text->via.str.ptr: "");
    dsh_doc_destroy (&doc);
}

//  ---------------------------------------------------------------------
//  Spans: one per stage a traced call goes into, from when the stage is
//  handed the call until its result leaves the stage going up (or the
//  stage answers, fails or is skipped), so that the stages nest as the
//  call passes them, the dispatch innermost

//  The open span of stage index, or NULL (the call is not traced).
static dsh_span_t *
s_span (dsh_record_t *record, size_t index)
{
    s_call_t *call = s_call (record);
    return call && call->spans && index < call->span_count? call->spans [index]: NULL;
}

//  The span a child of the call at this point hangs from: the innermost
//  stage it passed whose span is open, else the call's.
static dsh_span_t *
s_parent_span (dsh_record_t *record)
{
    s_call_t *call = s_call (record);
    for (size_t index = call? call->hop_count: 0; call && call->spans && index > 0; index--) {
        dsh_span_t *span = call->spans [call->hops [index - 1].index];
        if (span)
            return span;
    }
    return record->trace.call;
}

//  Starts the span of stage slot, which is handed the call going down,
//  and gives the body its context (dropping the decode of the body at
//  doc_p, if any).
static void
s_span_start (dsh_record_t *record, s_slot_t *slot, zframe_t **body_p, dsh_doc_t **doc_p)
{
    s_call_t *call = s_call (record);
    if (!call->spans)
        return;
    dsh_trace_ctx_t parent;
    if (dsh_span_context (s_parent_span (record), &parent))
        return;
    char name [128];
    snprintf (name, sizeof (name), "dsh.stage %s", slot->name);
    call->stage_started_ns = dsh_trace_now_ns ();
    //  An external stage is another process: a client span, as a call out
    dsh_span_t *span = dsh_span_start (name, slot->external? DSH_SPAN_CLIENT: DSH_SPAN_INTERNAL, &parent,
                                       call->stage_started_ns);
    dsh_span_set_str (span, "dsh.stage.name", slot->name);
    dsh_span_set_str (span, "dsh.stage.kind", slot->kind);
    dsh_span_set_int (span, "dsh.stage.index", (int64_t) slot->index);
    dsh_span_set_str (span, "gen_ai.tool.name", record->tool);
    dsh_span_end (&call->spans [slot->index], 0);
    call->spans [slot->index] = span;
    if (span) {
        //  The stamp rewrites the body (in place or into new bytes): a
        //  decode of it would no longer be of exactly these bytes
        if (doc_p)
            dsh_doc_destroy (doc_p);
        dsh_calltrace_stamp_frame (record, span, body_p);
    }
}

//  Says what stage slot did, on its span: attribute key = what, and an
//  event named what with the reason, if there is one.
static void
s_span_says (dsh_record_t *record, s_slot_t *slot, const char *key, const char *what, const char *reason)
{
    dsh_span_t *span = s_span (record, slot->index);
    dsh_span_set_str (span, key, what);
    if (reason)
        dsh_span_add_event (span, what, 0, "dsh.reason", reason);
}

//  The call or its result left stage slot: its span ends.
static void
s_span_end (dsh_record_t *record, s_slot_t *slot)
{
    s_call_t *call = s_call (record);
    if (call && call->spans && slot->index < call->span_count)
        dsh_span_end (&call->spans [slot->index], 0);
}

//  ---------------------------------------------------------------------
//  The audit and the spans: what each stage did with a call

//  Notes a stage's verdict on the record's trail (with the audit on), and
//  on its span (traced).
static void
s_note (dsh_record_t *record, s_slot_t *slot, const char *verdict, const char *reason)
{
    if (record->trail)
        dsh_audit_trail_stage (record->trail, slot->name, slot->kind, verdict, reason);
    s_span_says (record, slot, "dsh.stage.decision", verdict, reason);
}

//  Whether the body handed to a stage is kept, to tell whether it changed
//  it: for the audit, or the stage's span.
static bool
s_keeps_sent (dsh_record_t *record)
{
    s_call_t *call = s_call (record);
    return record->trail || (call && call->spans);
}

//  The body a stage is handed, kept to tell whether it changed it.
static void
s_note_sent (dsh_record_t *record, zframe_t *body)
{
    if (s_keeps_sent (record)) {
        zframe_destroy (&record->audit_sent);
        record->audit_sent = zframe_dup (body);
    }
}

//  A stage passed the call on (body): as it was handed, or rewritten.
static void
s_note_passed (dsh_record_t *record, s_slot_t *slot, zframe_t *body)
{
    if (s_keeps_sent (record)) {
        bool same = record->audit_sent && body && zframe_eq (record->audit_sent, body);
        s_note (record, slot, same? "passed": "rewrote", NULL);
        zframe_destroy (&record->audit_sent);
    }
}

//  A stage sent a result up: its answer (on the way down: a veto), or the
//  result it watched, changed or not. Its span ends.
static void
s_note_up (dsh_record_t *record, s_slot_t *slot, zframe_t *body)
{
    if (!s_keeps_sent (record))
        return;
    if (s_going_down (record)) {
        char reason [320];
        s_answer_reason (body, reason, sizeof (reason));
        s_note (record, slot, "answered", reason);
    }
    else {
        bool same = record->audit_sent && body && zframe_eq (record->audit_sent, body);
        if (!same && record->trail)
            dsh_audit_trail_stage (record->trail, slot->name, slot->kind, "rewrote-result", NULL);
        s_span_says (record, slot, "dsh.stage.result", same? "passed": "rewrote", NULL);
    }
    s_span_end (record, slot);
    zframe_destroy (&record->audit_sent);
}

//  A MIDDLEWARE_FAILED result for the record: "Error: stage "<name>" <why>".
//  The stage's span ends with it.
static zframe_t *
s_failure (dsh_record_t *record, s_slot_t *slot, const char *why)
{
    char text [256];
    snprintf (text, sizeof (text), "Error: stage \"%s\" %s", slot->name, why);
    s_note (record, slot, "failed", text);
    dsh_span_set_error (s_span (record, slot->index), DSH_E_MIDDLEWARE_FAILED, text);
    s_span_end (record, slot);
    return dsh_proto_error_result (record->call_id, DSH_E_MIDDLEWARE_FAILED, text);
}

//  Puts the record in stage slot, going down or up, until the stage's
//  limit or the call's deadline, whichever is first.
static void
s_hold (dsh_record_t *record, s_slot_t *slot, bool down)
{
    dsh_inflight_to_chain (record, slot->index, down, zclock_mono () + slot->timeout_ms);
}

//  Tells the stage of slot that the call is over for it.
static void
s_let_go (s_slot_t *slot, uint64_t token)
{
    if (slot->stage)
        dsh_stage_inline_cancel (slot->stage, token);
    else
        s_send_feed (slot, token, DSH_CANCEL, NULL, 0);
}

static void s_up (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p);
static void s_up_from (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p, bool dispatched);

//  Checks the call about to leave the chain: the name and callId it was
//  decided for at FRONT, whatever a stage did to the body. With the decode
//  of exactly these bytes (doc, head: the last stage handed it on), read
//  off that; else the body is decoded. Returns 0, or -1 with a reason.
static int
s_check_decided (dsh_record_t *record, zframe_t *body, dsh_doc_t *doc, const dsh_call_head_t *decoded,
                 char *error, size_t error_size)
{
    dsh_doc_t *own = NULL;
    dsh_call_head_t head;
    int rc = 0;
    if (doc)
        head = *decoded;
    else {
        own = dsh_proto_decode_body (body, error, error_size);
        rc = own? dsh_proto_decode_call (own, &head, error, error_size): -1;
    }
    if (rc == 0 && (!streq (head.name, record->tool) || !streq (head.call_id, record->call_id))) {
        snprintf (error, error_size, "a stage changed the call's %s",
                  streq (head.name, record->tool)? "callId": "tool name");
        rc = -1;
    }
    dsh_doc_destroy (&own);
    return rc;
}

//  Sends the call down from stage from; past the last stage, to dispatch.
//  doc_p (NULL, or NULL there: none) holds the strict decode of exactly
//  the body's bytes, taken: an inline stage is handed it, so that no stage
//  decodes a body the chain has decoded already.
static void
s_down (dsh_chain_t *self, dsh_record_t *record, size_t from, zframe_t **body_p,
        dsh_doc_t **doc_p, const dsh_call_head_t *head)
{
    s_call_t *call = s_call (record);
    dsh_doc_t *doc = doc_p? *doc_p: NULL;
    if (doc_p)
        *doc_p = NULL;
    for (size_t index = from; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        s_hold (record, slot, true);
        s_span_start (record, slot, body_p, &doc);
        s_set_held (call, slot->fail_open? *body_p: NULL);
        s_note_sent (record, *body_p);
        if (slot->stage) {
            dsh_stage_inline_call_decoded (slot->stage, record->token, body_p, &doc, head, call->entry,
                                           record->deadline_ms);
            return;
        }
        //  Another process reads its own copy
        dsh_doc_destroy (&doc);
        int64_t left = record->deadline_ms - zclock_mono ();
        byte budget [8];
        dsh_be64_put ((uint64_t) (left > 0? left: 1), budget);
        zframe_t *budget_frame = zframe_new (budget, sizeof (budget));
        zframe_t *frames [] = { *body_p, call->entry, budget_frame };
        int rc = s_send_feed (slot, record->token, DSH_CALL, frames, 3);
        zframe_destroy (&budget_frame);
        if (rc == 0) {
            zframe_destroy (body_p);
            return;
        }
        slot->failed++;
        s_set_held (call, NULL);
        if (!slot->fail_open) {
            zframe_destroy (body_p);
            zframe_t *failure = s_failure (record, slot, "is not connected");
            s_up (self, record, &failure);
            return;
        }
        s_note (record, slot, "skipped", "is not connected (fail-open)");
        s_span_end (record, slot);
    }
    s_set_held (call, NULL);
    //  Past the last stage: the broker's again (an empty chain never had it)
    if (dsh_inflight_where (record) == DSH_AT_CHAIN)
        dsh_inflight_to_broker (record);
    char error [256];
    int rc = self->slot_count? s_check_decided (record, *body_p, doc, head, error, sizeof (error)): 0;
    dsh_doc_destroy (&doc);
    if (rc) {
        zframe_destroy (body_p);
        char text [320];
        snprintf (text, sizeof (text), "Error: the chain passed on a call that is not the one decided: %s", error);
        zframe_t *failure = dsh_proto_error_result (record->call_id, DSH_E_MIDDLEWARE_FAILED, text);
        s_up (self, record, &failure);
        return;
    }
    self->host.dispatch (self->host.arg, record, body_p);
}

//  Sends the result up to the innermost stage the call passed; past the
//  first, to the caller. A stage that cannot take it fails the call (or is
//  skipped, if fail-open).
static void
s_up (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p)
{
    s_up_from (self, record, body_p, false);
}

//  The same; dispatched: the body is the result dispatch answered with,
//  whose outcome the record holds, so far as no stage takes it.
static void
s_up_from (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p, bool dispatched)
{
    s_call_t *call = s_call (record);
    if (call)
        s_set_held (call, NULL);
    //  A stage it goes up through may change the result: its outcome is
    //  read off the answer (dsh_inflight_answer). One that goes up through
    //  stages that do not watch it is the result dispatch read it off.
    if (call && call->hop_count && !dispatched)
        record->outcome = DSH_STATS_OUTCOME_UNKNOWN;
    while (call && call->hop_count) {
        //  Taken off the way back: a stage sees the result once
        s_hop_t hop = call->hops [--call->hop_count];
        s_slot_t *slot = self->slots [hop.index];
        s_hold (record, slot, false);
        if (slot->fail_open)
            s_set_held (call, *body_p);
        s_note_sent (record, *body_p);
        bool taken = false;
        bool replaced = false;
        if (slot->stage)
            taken = dsh_stage_inline_result (slot->stage, record->token, body_p);
        else {
            zframe_t *token = dsh_inflight_token_frame (record->token);
            zframe_t *delimiter = zframe_new_empty ();
            zframe_t *protocol = zframe_from (DSH_PROTOCOL);
            zframe_t *command = zframe_from (DSH_RESULT);
            zframe_t *frames [] = { hop.stage_id, hop.feed_id, token, delimiter, protocol, command, *body_p };
            taken = s_send_frames (slot->drain, frames, 7) == 0;
            zframe_destroy (&token);
            zframe_destroy (&delimiter);
            zframe_destroy (&protocol);
            zframe_destroy (&command);
            if (taken)
                zframe_destroy (body_p);
            else {
                slot->failed++;
                if (!slot->fail_open) {
                    zframe_destroy (body_p);
                    *body_p = s_failure (record, slot, "is gone");
                    replaced = true;
                }
            }
        }
        s_hop_clear (&hop);
        //  Taken (it may come back changed) or failed here: not dispatch's
        if (taken || replaced)
            record->outcome = DSH_STATS_OUTCOME_UNKNOWN;
        if (taken)
            return;
        //  Past a stage that does not watch results, or is gone
        s_span_end (record, slot);
        s_set_held (call, NULL);
    }
    dsh_inflight_answer_frame (self->inflight, &record, body_p);
}

//  Acts on one queued step, if its record is still where the step says.
static void
s_step (dsh_chain_t *self, s_step_t *step)
{
    dsh_record_t *record = dsh_inflight_lookup (self->inflight, step->token);
    if (!record || !s_held_by (record, step->stage, step->pass))
        return;                 //  it moved on (timed out, cancelled): stale
    s_slot_t *slot = self->slots [step->stage];
    if (step->pass) {
        slot->passed++;
        s_note_passed (record, slot, step->body);
        s_call_t *call = s_call (record);
        assert (call->hop_count < self->slot_count);
        call->hops [call->hop_count++] = (s_hop_t) { step->stage, NULL, NULL };
        s_down (self, record, step->stage + 1, &step->body, &step->doc, &step->head);
    }
    else {
        if (s_going_down (record))
            slot->answered++;
        s_note_up (record, slot, step->body);
        s_up (self, record, &step->body);
    }
}

static void
s_run (dsh_chain_t *self)
{
    s_step_t *step;
    while ((step = (s_step_t *) zlistx_first (self->steps))) {
        zlistx_detach_cur (self->steps);
        s_step (self, step);
        s_step_destroy (&step);
    }
}

//  Every entry point runs inside these two: steps queued meanwhile are
//  acted on before control goes back to the loop.
static bool
s_enter (dsh_chain_t *self)
{
    bool outer = !self->running;
    self->running = true;
    return outer;
}

static void
s_leave (dsh_chain_t *self, bool outer)
{
    if (outer) {
        s_run (self);
        self->running = false;
    }
}

static int
s_run_timer (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    dsh_chain_t *self = (dsh_chain_t *) arg;
    self->scheduled = false;
    bool outer = s_enter (self);
    s_leave (self, outer);
    return 0;
}

static void
s_post (dsh_chain_t *self, uint64_t token, s_slot_t *slot, bool pass, zframe_t **body_p,
        dsh_doc_t **doc_p, const dsh_call_head_t *head)
{
    s_step_t *step = (s_step_t *) zmalloc (sizeof (s_step_t));
    assert (step);
    step->token = token;
    step->stage = slot->index;
    step->pass = pass;
    step->body = *body_p;
    *body_p = NULL;
    if (doc_p && *doc_p) {
        step->doc = *doc_p;
        step->head = *head;
        *doc_p = NULL;
    }
    zlistx_add_end (self->steps, step);
    if (!self->running && !self->scheduled && self->loop) {
        //  A stage resumed a call from its own handler: act soon, not now
        zloop_timer (self->loop, 1, 1, s_run_timer, self);
        self->scheduled = true;
    }
}

static void
s_inline_pass (void *arg, uint64_t token, zframe_t **body_p)
{
    s_slot_t *slot = (s_slot_t *) arg;
    s_post (slot->chain, token, slot, true, body_p, NULL, NULL);
}

static void
s_inline_pass_decoded (void *arg, uint64_t token, zframe_t **body_p, dsh_doc_t **doc_p,
                       const dsh_call_head_t *head)
{
    s_slot_t *slot = (s_slot_t *) arg;
    s_post (slot->chain, token, slot, true, body_p, doc_p, head);
}

static void
s_inline_up (void *arg, uint64_t token, zframe_t **body_p)
{
    s_slot_t *slot = (s_slot_t *) arg;
    s_post (slot->chain, token, slot, false, body_p, NULL, NULL);
}

//  An approval a traced call waited for, as a span under its stage's:
//  from the ask (askedMs, if the stage says; else when the stage was
//  handed the call, which asks at once) to the decision (atMs). A call a
//  standing grant let through waited for no one: an event says which.
static void
s_span_approval (dsh_record_t *record, dsh_span_t *stage_span, json_t *approval)
{
    const char *request = json_string_value (json_object_get (approval, "request"));
    json_t *grant = json_object_get (approval, "grant");
    const char *grant_id = json_is_object (grant)? json_string_value (json_object_get (grant, "id")):
                           json_string_value (grant);
    if (!request) {
        dsh_span_add_event (stage_span, "dsh.grant", 0, "dsh.approval.grant", grant_id);
        return;
    }
    dsh_trace_ctx_t parent;
    if (dsh_span_context (stage_span, &parent))
        return;
    int64_t asked_ms = (int64_t) json_integer_value (json_object_get (approval, "askedMs"));
    int64_t at_ms = (int64_t) json_integer_value (json_object_get (approval, "atMs"));
    int64_t start_ns = asked_ms > 0? asked_ms * 1000000: s_call (record)->stage_started_ns;
    int64_t end_ns = at_ms > 0? at_ms * 1000000: dsh_trace_now_ns ();
    if (end_ns < start_ns)
        end_ns = start_ns;
    char name [DSH_NAME_MAX + 16];
    snprintf (name, sizeof (name), "dsh.approval %s", record->tool);
    dsh_span_t *span = dsh_span_start (name, DSH_SPAN_INTERNAL, &parent, start_ns);
    dsh_span_set_str (span, "gen_ai.tool.name", record->tool);
    dsh_span_set_str (span, "dsh.approval.request", request);
    const char *approver = json_string_value (json_object_get (approval, "approver"));
    if (approver)
        dsh_span_set_str (span, "dsh.approval.approver", approver);
    const char *decision = json_string_value (json_object_get (approval, "decision"));
    if (decision)
        dsh_span_set_str (span, "dsh.approval.decision", decision);
    if (grant_id)
        dsh_span_set_str (span, "dsh.approval.grant", grant_id);
    dsh_span_end (&span, end_ns);
}

//  An inline stage's note on a call for the audit: an approval.
static void
s_inline_note (void *arg, uint64_t token, const char *note)
{
    s_slot_t *slot = (s_slot_t *) arg;
    dsh_record_t *record = dsh_inflight_lookup (slot->chain->inflight, token);
    dsh_span_t *span = record? s_span (record, slot->index): NULL;
    //  The host keeps what outlives the call (a grant) whether or not the
    //  call is recorded
    if (!record || (!record->trail && !slot->chain->host.note && !span))
        return;
    //  Unrecorded, only a grant's making matters: a call a grant let
    //  through (every granted call) is not parsed for nothing
    if (!record->trail && !span && !strstr (note, "\"expiresMs\""))
        return;
    json_t *json = json_loads (note, 0, NULL);
    json_t *approval = json_object_get (json, "approval");
    if (span && json_is_object (approval))
        s_span_approval (record, span, approval);
    if (record->trail && json_is_object (approval)) {
        //  grant: the id of the grant that let the call through, or the
        //  grant this decision made
        json_t *grant = json_object_get (approval, "grant");
        const char *grant_id = json_is_object (grant)? json_string_value (json_object_get (grant, "id")):
                               json_string_value (grant);
        dsh_audit_trail_approval (record->trail, json_string_value (json_object_get (approval, "request")),
                                  json_string_value (json_object_get (approval, "approver")),
                                  json_string_value (json_object_get (approval, "decision")),
                                  (int64_t) json_integer_value (json_object_get (approval, "atMs")), grant_id);
    }
    if (json && slot->chain->host.note)
        slot->chain->host.note (slot->chain->host.arg, slot->name, json);
    json_decref (json);
}

//  ---------------------------------------------------------------------
//  Entry points

void
dsh_chain_enter (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p, zchunk_t *tool)
{
    dsh_chain_enter_decoded (self, record, body_p, NULL, NULL, tool);
}

void
dsh_chain_enter_decoded (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p,
                         dsh_doc_t **doc_p, const dsh_call_head_t *head, zchunk_t *tool)
{
    assert (self);
    assert (record && body_p && *body_p);
    bool outer = s_enter (self);
    void **slot = dsh_inflight_slot (record, DSH_INFLIGHT_SLOT_CHAIN);
    assert (*slot == NULL);     //  a call enters the chain once
    s_call_t *call = (s_call_t *) zmalloc (sizeof (s_call_t) + self->slot_count * sizeof (s_hop_t));
    assert (call);
    *slot = call;
    call->entry = tool? zframe_new (zchunk_data (tool), zchunk_size (tool)): zframe_new_empty ();
    if (record->trace.call && self->slot_count) {
        //  Only a traced call pays for its stages' spans
        call->spans = (dsh_span_t **) zmalloc (self->slot_count * sizeof (dsh_span_t *));
        assert (call->spans);
        call->span_count = self->slot_count;
    }
    s_down (self, record, 0, body_p, doc_p, head);
    s_leave (self, outer);
}

void
dsh_chain_result (dsh_chain_t *self, dsh_record_t *record, zframe_t **body_p)
{
    assert (self);
    assert (record);
    bool outer = s_enter (self);
    s_up_from (self, record, body_p, true);
    s_leave (self, outer);
}

dsh_span_t *
dsh_chain_span (dsh_chain_t *self, dsh_record_t *record)
{
    assert (self);
    assert (record);
    return s_parent_span (record);
}

zframe_t *
dsh_chain_entry (dsh_chain_t *self, dsh_record_t *record)
{
    assert (self);
    assert (record);
    s_call_t *call = s_call (record);
    return call? call->entry: NULL;
}

void
dsh_chain_expire (dsh_chain_t *self, dsh_record_t *record)
{
    assert (self);
    assert (record && dsh_inflight_where (record) == DSH_AT_CHAIN);
    bool down;
    size_t stage = dsh_inflight_stage (record, &down);
    assert (stage < self->slot_count);
    bool outer = s_enter (self);
    s_slot_t *slot = self->slots [stage];
    s_call_t *call = s_call (record);
    slot->failed++;
    if (down || slot->stage)
        s_let_go (slot, record->token);
    if (slot->fail_open && call->held) {
        char why [64];
        snprintf (why, sizeof (why), "did not answer within %d ms (fail-open)", slot->timeout_ms);
        s_note (record, slot, "skipped", why);
        dsh_span_set_bool (s_span (record, slot->index), "dsh.stage.timeout", true);
        s_span_end (record, slot);
        //  Go on as if the stage were not there
        zframe_t *body = call->held;
        call->held = NULL;
        if (down)
            s_down (self, record, stage + 1, &body, NULL, NULL);
        else
            s_up (self, record, &body);
    }
    else {
        char why [64];
        snprintf (why, sizeof (why), "did not answer within %d ms", slot->timeout_ms);
        dsh_span_set_bool (s_span (record, slot->index), "dsh.stage.timeout", true);
        zframe_t *failure = s_failure (record, slot, why);
        s_up (self, record, &failure);
    }
    s_leave (self, outer);
}

void
dsh_chain_release (dsh_chain_t *self, dsh_record_t *record)
{
    assert (self);
    assert (record);
    size_t stage = dsh_inflight_stage (record, NULL);
    if (dsh_inflight_where (record) == DSH_AT_CHAIN && stage < self->slot_count)
        s_let_go (self->slots [stage], record->token);
    s_call_t *call = s_call (record);
    for (size_t index = 0; call && index < call->hop_count; index++)
        s_let_go (self->slots [call->hops [index].index], record->token);
}

void
dsh_chain_settle (dsh_chain_t *self)
{
    assert (self);
    bool outer = s_enter (self);
    s_leave (self, outer);
}

//  ---------------------------------------------------------------------
//  Control commands

//  Answers a control command: {id?, ok, message?} plus, from a stage's
//  reply, its other fields.
static void
s_control_answer (dsh_chain_t *self, zmsg_t **envelope_p, zchunk_t *id, bool ok, const char *message,
                  const msgpack_object *reply)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id) {
        dsh_pack_cstr (&packer.pk, "id");
        dsh_packer_raw (&packer, zchunk_data (id), zchunk_size (id));
    }
    for (uint32_t index = 0; reply && index < reply->via.map.size; index++) {
        const msgpack_object *key = &reply->via.map.ptr [index].key;
        if (!dsh_str_eq (key, "id") && !dsh_str_eq (key, "ok") && !dsh_str_eq (key, "message")) {
            msgpack_pack_object (&packer.pk, *key);
            msgpack_pack_object (&packer.pk, reply->via.map.ptr [index].val);
        }
    }
    dsh_pack_cstr (&packer.pk, "ok");
    if (ok)
        msgpack_pack_true (&packer.pk);
    else
        msgpack_pack_false (&packer.pk);
    if (message)
        dsh_packer_kv_str (&packer, "message", message);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    self->host.control_reply (self->host.arg, envelope_p, &body);
}

//  Passes a stage's control reply on, with the request's id.
static void
s_control_forward (dsh_chain_t *self, zmsg_t **envelope_p, zchunk_t *id, zframe_t *body)
{
    char error [256];
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    const msgpack_object *ok = dsh_map_get (root, "ok");
    char *message = doc? dsh_doc_strdup (doc, dsh_map_get (root, "message")): NULL;
    if (!doc)
        s_control_answer (self, envelope_p, id, false, "the stage's reply is malformed", NULL);
    else
        s_control_answer (self, envelope_p, id, ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean,
                          message, root);
    dsh_doc_destroy (&doc);
}

void
dsh_chain_control (dsh_chain_t *self, zmsg_t **envelope_p, zframe_t **body_p)
{
    assert (self);
    char error [256];
    dsh_doc_t *doc = dsh_proto_decode_body (*body_p, error, sizeof (error));
    char *name = doc? dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "stage")): NULL;
    zchunk_t *id = NULL;
    const msgpack_object *id_object = doc? dsh_map_get (dsh_doc_root (doc), "id"): NULL;
    if (id_object) {
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        msgpack_pack_object (&packer.pk, *id_object);
        id = zchunk_new (packer.sbuf.data, packer.sbuf.size);
        dsh_packer_release (&packer);
    }
    s_slot_t *slot = NULL;
    for (size_t index = 0; name && index < self->slot_count; index++)
        if (streq (self->slots [index]->name, name))
            slot = self->slots [index];
    if (!slot) {
        char message [300];
        snprintf (message, sizeof (message), "no stage named \"%s\" in the chain", name? name: "");
        s_control_answer (self, envelope_p, id, false, message, NULL);
        zchunk_destroy (&id);
    }
    else
    if (slot->stage) {
        bool outer = s_enter (self);
        zframe_t *reply = dsh_stage_inline_control (slot->stage, *body_p);
        s_control_forward (self, envelope_p, id, reply);
        zframe_destroy (&reply);
        zchunk_destroy (&id);
        s_leave (self, outer);
    }
    else {
        s_control_t *control = (s_control_t *) zmalloc (sizeof (s_control_t));
        assert (control);
        control->token = ++self->next_control;
        control->envelope = *envelope_p;
        *envelope_p = NULL;
        control->id = id;
        control->stage = slot->index;
        control->deadline_ms = zclock_mono () + S_CONTROL_TIMEOUT_MS;
        if (s_send_feed (slot, control->token, DSH_CONTROL, body_p, 1)) {
            snprintf (error, sizeof (error), "stage \"%s\" is not connected", slot->name);
            s_control_answer (self, &control->envelope, control->id, false, error, NULL);
            s_control_destroy (&control);
        }
        else {
            char key [17];
            dsh_proto_token_hex (control->token, key);
            zhashx_insert (self->controls, key, control);
        }
    }
    dsh_doc_destroy (&doc);
    zframe_destroy (body_p);
}

//  ---------------------------------------------------------------------
//  External slots

//  Receives a message from a slot, or NULL if there is none or its key is
//  not a stage's: under CURVE only stage (and admin) keys work a slot.
static zmsg_t *
s_slot_recv (s_slot_t *slot, zsock_t *reader)
{
    zmsg_t *msg = zmsg_recv (reader);
    dsh_identity_t peer = { NULL, NULL, NULL, NULL, NULL, NULL };
    //  The last frame came over the wire, unless the drain ROUTER's routing
    //  id frame is all there is (it carries no metadata): such a message
    //  says nothing of its key, and under CURVE only a known stage key works
    //  a slot
    bool wire_frame = msg && zmsg_size (msg) >= (reader == slot->drain? 2: 1);
    if (wire_frame)
        dsh_identity_read_frame (&peer, zmsg_last (msg));
    bool curve = dsh_curve_server_key () != NULL;
    if (msg && (!wire_frame || (curve && !dsh_identity_known (&peer))
                || (dsh_identity_known (&peer) && !dsh_identity_is (&peer, DSH_ROLE_STAGE)))) {
        dsh_log_warning ("dsh-broker: a key that is not a stage's (%.8s..., role %s) sent to slot %s: dropped",
                         peer.key, peer.role? peer.role: "none", slot->name);
        zmsg_destroy (&msg);
    }
    return msg;
}

//  feed: [token] "" DSH1 (RESULT|CONTROL) body, from stage slot->index.
static int
s_feed_recv_one (zsock_t *reader, void *arg)
{
    s_slot_t *slot = (s_slot_t *) arg;
    dsh_chain_t *self = slot->chain;
    zmsg_t *msg = s_slot_recv (slot, reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    uint64_t token = 0;
    bool framed = dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
               && zmsg_size (envelope) == 1 && zmsg_size (msg) == 1
               && dsh_inflight_token_decode (zframe_data (zmsg_first (envelope)),
                                             zframe_size (zmsg_first (envelope)), &token) == 0;
    if (framed && streq (command, DSH_CONTROL)) {
        char key [17];
        dsh_proto_token_hex (token, key);
        s_control_t *control = (s_control_t *) zhashx_lookup (self->controls, key);
        if (control && control->stage == slot->index) {
            s_control_forward (self, &control->envelope, control->id, zmsg_first (msg));
            //  The table owns the control: this destroys it
            zhashx_delete (self->controls, key);
        }
    }
    else
    if (framed && streq (command, DSH_RESULT)) {
        dsh_record_t *record = dsh_inflight_lookup (self->inflight, token);
        //  Anything else is late (the stage timed out) or not ours: dropped
        if (record && s_held_by (record, slot->index, false)) {
            zframe_t *body = zmsg_pop (msg);
            bool outer = s_enter (self);
            if (s_going_down (record))
                slot->answered++;
            s_note_up (record, slot, body);
            s_up (self, record, &body);
            s_leave (self, outer);
        }
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

static int
s_feed_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_feed_recv_one, arg);
}

//  drain: [stage id] [feed id] [token] "" DSH1 CALL body tool [budget],
//  passed on by stage slot->index.
static int
s_drain_recv_one (zsock_t *reader, void *arg)
{
    s_slot_t *slot = (s_slot_t *) arg;
    dsh_chain_t *self = slot->chain;
    zmsg_t *msg = s_slot_recv (slot, reader);
    if (!msg)
        return 0;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    dsh_record_t *record = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  streq (command, DSH_CALL) && zmsg_size (envelope) == 3 && zmsg_size (msg) >= 1) {
        zframe_t *token_frame = zmsg_last (envelope);
        uint64_t token;
        if (dsh_inflight_token_decode (zframe_data (token_frame), zframe_size (token_frame), &token) == 0)
            record = dsh_inflight_lookup (self->inflight, token);
    }
    if (record && s_held_by (record, slot->index, true)) {
        bool outer = s_enter (self);
        slot->passed++;
        s_call_t *call = s_call (record);
        assert (call->hop_count < self->slot_count);
        s_hop_t *hop = &call->hops [call->hop_count++];
        hop->index = slot->index;
        hop->stage_id = zmsg_pop (envelope);
        hop->feed_id = zmsg_pop (envelope);
        zframe_t *body = zmsg_pop (msg);
        s_note_passed (record, slot, body);
        s_down (self, record, slot->index + 1, &body, NULL, NULL);
        s_leave (self, outer);
    }
    else
    if (!record)
        dsh_log_warning ("dsh-broker: stage %s sent something that is not a call of the chain", slot->name);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

static int
s_drain_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, S_BATCH, s_drain_recv_one, arg);
}

//  Control commands an external stage never answered.
static int
s_expire_controls (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    dsh_chain_t *self = (dsh_chain_t *) arg;
    int64_t now = zclock_mono ();
    zlistx_t *late = zlistx_new ();
    for (s_control_t *control = zhashx_first (self->controls); control; control = zhashx_next (self->controls))
        if (control->deadline_ms <= now)
            zlistx_add_end (late, control);
    for (s_control_t *control = zlistx_first (late); control; control = zlistx_next (late)) {
        char key [17];
        dsh_proto_token_hex (control->token, key);
        char message [128];
        snprintf (message, sizeof (message), "stage \"%s\" did not answer", self->slots [control->stage]->name);
        s_control_answer (self, &control->envelope, control->id, false, message, NULL);
        //  The table owns the control: this destroys it
        zhashx_delete (self->controls, key);
    }
    zlistx_destroy (&late);
    return 0;
}

//  ---------------------------------------------------------------------
//  Construction

static const dsh_stage_kind_t *
s_kind (const dsh_stage_kind_t *kinds, const char *kind)
{
    for (size_t index = 0; kinds && kinds [index].kind; index++)
        if (streq (kinds [index].kind, kind))
            return &kinds [index];
    return NULL;
}

//  The endpoint an external slot binds when its config names none: the
//  front's host on an ephemeral port, or an ipc path beside the front's.
static char *
s_external_endpoint (const char *broker, const char *name, const char *which)
{
    if (strncmp (broker, "tcp://", 6) == 0) {
        const char *colon = strrchr (broker, ':');
        return zsys_sprintf ("%.*s:*", (int) (colon - broker), broker);
    }
    return zsys_sprintf ("%s-stage-%s-%s", broker, name, which);
}

static int
s_slot_bind (s_slot_t *slot, zconfig_t *section, const char *broker, char *error, size_t error_size)
{
    const char *feed = zconfig_get (section, "feed", NULL);
    const char *drain = zconfig_get (section, "drain", NULL);
    slot->feed_endpoint = feed? strdup (feed): s_external_endpoint (broker, slot->name, "feed");
    slot->drain_endpoint = drain? strdup (drain): s_external_endpoint (broker, slot->name, "drain");
    slot->feed = zsock_new (ZMQ_DEALER);
    slot->drain = zsock_new (ZMQ_ROUTER);
    dsh_sock_limit (slot->feed, DSH_MAX_MESSAGE_DEFAULT, 100000);
    dsh_sock_limit (slot->drain, DSH_MAX_MESSAGE_DEFAULT, 100000);
    //  A stage that is not there must fail calls at once, not queue them
    zsock_set_immediate (slot->feed, 1);
    zsock_set_router_mandatory (slot->drain, 1);
    //  A stage's host that vanished is noticed by libzmq, not left to TCP;
    //  the chain does not know the broker's heartbeat, the default serves
    dsh_sock_heal (slot->feed, 0, 0);
    dsh_sock_heal (slot->drain, 0, 0);
    //  The broker's keypair, when its main set one: CURVE on slots too
    dsh_curve_server (slot->feed, NULL);
    dsh_curve_server (slot->drain, NULL);
    if (zsock_bind (slot->feed, "%s", slot->feed_endpoint) == -1
    ||  zsock_bind (slot->drain, "%s", slot->drain_endpoint) == -1) {
        snprintf (error, error_size, "chain/%s: cannot bind %s / %s: %s", slot->name,
                  slot->feed_endpoint, slot->drain_endpoint, zmq_strerror (zmq_errno ()));
        return -1;
    }
    zstr_free (&slot->feed_endpoint);
    zstr_free (&slot->drain_endpoint);
    slot->feed_endpoint = strdup (zsock_endpoint (slot->feed));
    slot->drain_endpoint = strdup (zsock_endpoint (slot->drain));
    return 0;
}

static s_slot_t *
s_slot_new (dsh_chain_t *self, zconfig_t *section, const dsh_stage_kind_t *kinds, const char *broker,
            char *error, size_t error_size)
{
    s_slot_t *slot = (s_slot_t *) zmalloc (sizeof (s_slot_t));
    assert (slot);
    slot->chain = self;
    slot->index = self->slot_count;
    slot->name = strdup (zconfig_get (section, "name", ""));
    slot->kind = strdup (zconfig_get (section, "kind", ""));
    slot->external = streq (slot->kind, "external");
    const dsh_stage_kind_t *kind = slot->external? NULL: s_kind (kinds, slot->kind);
    const char *timeout = zconfig_get (section, "timeout_ms", NULL);
    const char *fail_open = zconfig_get (section, "fail_open", "false");
    slot->fail_open = streq (fail_open, "true") || streq (fail_open, "1");
    slot->timeout_ms = timeout? atoi (timeout): kind? kind->default_timeout_ms: 5000;
    if (!*slot->name || !dsh_proto_valid_name (slot->name, strlen (slot->name)) || strlen (slot->name) > 64)
        snprintf (error, error_size, "chain: stage %zu needs a name of 1-64 [A-Za-z0-9_.-]", slot->index + 1);
    else
    if (!slot->external && !kind)
        snprintf (error, error_size, "chain/%s: unknown kind \"%s\"", slot->name, slot->kind);
    else
    if (timeout && (slot->timeout_ms <= 0 || strspn (timeout, "0123456789") != strlen (timeout)))
        snprintf (error, error_size, "chain/%s: timeout_ms \"%s\" is not a positive number", slot->name, timeout);
    else
    if (!streq (fail_open, "true") && !streq (fail_open, "false") && !streq (fail_open, "1") && !streq (fail_open, "0"))
        snprintf (error, error_size, "chain/%s: fail_open \"%s\" is not true or false", slot->name, fail_open);
    for (size_t index = 0; index < self->slot_count && !*error; index++)
        if (streq (self->slots [index]->name, slot->name))
            snprintf (error, error_size, "chain: two stages named \"%s\"", slot->name);
    if (!*error && slot->external)
        s_slot_bind (slot, section, broker, error, error_size);
    else
    if (!*error) {
        dsh_stage_context_t context = { slot->name, broker, self->version };
        dsh_stage_callbacks_t callbacks;
        memset (&callbacks, 0, sizeof (callbacks));
        void *arg = NULL;
        char reason [256] = "";
        if (kind->setup (section, &context, &callbacks, &arg, reason, sizeof (reason)))
            snprintf (error, error_size, "chain/%s: %s", slot->name, reason);
        else
        if (!(slot->stage = dsh_stage_new (slot->name, &callbacks, arg))) {
            if (callbacks.on_destroy)
                callbacks.on_destroy (arg);
            snprintf (error, error_size, "chain/%s: the stage could not be made", slot->name);
        }
    }
    if (*error)
        s_slot_destroy (&slot);
    return slot;
}

dsh_chain_t *
dsh_chain_new (zconfig_t *config, const dsh_stage_kind_t *kinds, const char *broker,
               dsh_inflight_t *inflight, const dsh_chain_host_t *host, char *error, size_t error_size)
{
    assert (broker);
    assert (inflight);
    assert (host && host->dispatch && host->control_reply);
    dsh_chain_t *self = (dsh_chain_t *) zmalloc (sizeof (dsh_chain_t));
    assert (self);
    self->host = *host;
    self->inflight = inflight;
    dsh_inflight_set_slot_free (inflight, DSH_INFLIGHT_SLOT_CHAIN, s_call_free);
    self->broker = strdup (broker);
    self->steps = zlistx_new ();
    zlistx_set_destructor (self->steps, (zlistx_destructor_fn *) s_step_destroy);
    self->controls = zhashx_new ();
    zhashx_set_destructor (self->controls, (zhashx_destructor_fn *) s_control_destroy);
    *error = 0;
    //  The version grants are bound to: any change to the chain's settings
    //  (a stage, a rule, an order) makes another
    char *text = config? zconfig_str_save (config): NULL;
    char digest [DSH_DIGEST_SIZE + 1];
    dsh_digest_bytes (text? text: "", text? strlen (text): 0, digest);
    zstr_free (&text);
    snprintf (self->version, sizeof (self->version), "%.16s", digest);
    size_t stages = 0;
    for (zconfig_t *section = config? zconfig_child (config): NULL; section; section = zconfig_next (section))
        stages++;
    self->slots = (s_slot_t **) zmalloc ((stages + 1) * sizeof (s_slot_t *));
    for (zconfig_t *section = config? zconfig_child (config): NULL; section; section = zconfig_next (section)) {
        if (!streq (zconfig_name (section), "stage")) {
            snprintf (error, error_size, "chain: unknown entry \"%s\" (want \"stage\")", zconfig_name (section));
            break;
        }
        s_slot_t *slot = s_slot_new (self, section, kinds, broker, error, error_size);
        if (!slot)
            break;
        self->slots [self->slot_count++] = slot;
    }
    if (*error)
        dsh_chain_destroy (&self);
    return self;
}

const char *
dsh_chain_version (dsh_chain_t *self)
{
    assert (self);
    return self->version;
}

void
dsh_chain_destroy (dsh_chain_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_chain_t *self = *self_p;
        zlistx_destroy (&self->steps);
        zhashx_destroy (&self->controls);
        for (size_t index = 0; index < self->slot_count; index++)
            s_slot_destroy (&self->slots [index]);
        free (self->slots);
        zstr_free (&self->broker);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_chain_start (dsh_chain_t *self, zloop_t *loop, char *error, size_t error_size)
{
    assert (self);
    self->loop = loop;
    for (size_t index = 0; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        if (slot->stage) {
            dsh_stage_host_t host = { s_inline_pass, s_inline_up, slot, s_inline_note, s_inline_pass_decoded };
            if (dsh_stage_start_inline (slot->stage, loop, &host)) {
                snprintf (error, error_size, "chain/%s: the stage did not start", slot->name);
                return -1;
            }
        }
        else {
            zloop_reader (loop, slot->feed, s_feed_recv, slot);
            zloop_reader (loop, slot->drain, s_drain_recv, slot);
        }
    }
    zloop_timer (loop, S_TICK_MS, 0, s_expire_controls, self);
    return 0;
}

size_t
dsh_chain_size (dsh_chain_t *self)
{
    assert (self);
    return self->slot_count;
}

void
dsh_chain_pack (dsh_chain_t *self, msgpack_packer *pk)
{
    assert (self);
    msgpack_pack_array (pk, self->slot_count);
    for (size_t index = 0; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        msgpack_pack_map (pk, 8);
        dsh_pack_cstr (pk, "name");
        dsh_pack_cstr (pk, slot->name);
        dsh_pack_cstr (pk, "kind");
        dsh_pack_cstr (pk, slot->kind);
        dsh_pack_cstr (pk, "where");
        dsh_pack_cstr (pk, slot->external? slot->feed_endpoint: "inproc");
        dsh_pack_cstr (pk, "timeoutMs");
        msgpack_pack_int (pk, slot->timeout_ms);
        dsh_pack_cstr (pk, "failOpen");
        if (slot->fail_open)
            msgpack_pack_true (pk);
        else
            msgpack_pack_false (pk);
        dsh_pack_cstr (pk, "passed");
        msgpack_pack_uint64 (pk, slot->passed);
        dsh_pack_cstr (pk, "answered");
        msgpack_pack_uint64 (pk, slot->answered);
        dsh_pack_cstr (pk, "failed");
        msgpack_pack_uint64 (pk, slot->failed);
    }
}

const char *
dsh_chain_kind (dsh_chain_t *self, const char *name)
{
    assert (self);
    for (size_t index = 0; index < self->slot_count; index++)
        if (streq (self->slots [index]->name, name))
            return self->slots [index]->kind;
    return NULL;
}

size_t
dsh_chain_apply (dsh_chain_t *self, const char *kind, zframe_t *body)
{
    assert (self);
    assert (kind && body);
    size_t count = 0;
    for (size_t index = 0; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        if (slot->stage && streq (slot->kind, kind)) {
            zframe_t *reply = dsh_stage_inline_control (slot->stage, body);
            zframe_destroy (&reply);
            count++;
        }
    }
    return count;
}

int
dsh_chain_slot (dsh_chain_t *self, const char *name, const char **feed, const char **drain)
{
    assert (self);
    for (size_t index = 0; index < self->slot_count; index++) {
        s_slot_t *slot = self->slots [index];
        if (slot->external && streq (slot->name, name)) {
            *feed = slot->feed_endpoint;
            *drain = slot->drain_endpoint;
            return 0;
        }
    }
    return -1;
}
