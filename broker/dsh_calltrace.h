/*  =========================================================================
    dsh_calltrace - a call's trace context in the broker, and its call span

    The broker's side of W3C trace context (PROTOCOL.md, "Trace context"):
    FRONT reads a CALL's meta.traceparent and meta.tracestate in its one
    strict decode of the call, and opens the call's trace here: the
    caller's context if it is valid, else (tracing on) a new trace under
    the sampler. With tracing on, each hop the broker sends the call to (a
    stage, the component) gets the context of the broker's span that
    called it, written into meta.traceparent, and the RESULT the caller
    gets carries the call span's context back in its traceparent.

    With tracing off (no exporter configured) a call costs nothing here
    but reading meta's two keys: a caller's context passes on untouched,
    no span is made and nothing is stamped.

    The spans themselves are components/sdk/dsh_trace's; dsh_chain and
    dispatch start the stage and dispatch spans, this module the call's.
    =========================================================================
*/

#ifndef DSH_CALLTRACE_H_INCLUDED
#define DSH_CALLTRACE_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>

#include "dsh_inflight.h"
#include "dsh_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Start the process's tracer from the standard OTEL_* variables, as the
//  service "dsh-broker" unless OTEL_SERVICE_NAME names another. Returns 0,
//  or -1 with a bad variable's value named in error.
int
    dsh_calltrace_start (char *error, size_t error_size);

//  Flush what is queued (at most timeout_ms) and stop the export thread.
void
    dsh_calltrace_stop (int timeout_ms);

//  True when the broker exports spans.
bool
    dsh_calltrace_on (void);

//  Open the trace of a call decided at FRONT, from meta (the CALL's meta
//  as decoded there, NULL if absent): a valid meta.traceparent is the
//  call's context (one that is invalid or not a str is ignored, and a new
//  trace starts, as W3C says). With tracing on, starts the call's span
//  (SERVER, "dsh.call {tool}") if the sampler says so. agent is the
//  agent the call runs as (NULL: none). Returns true if the broker
//  started a trace it does not record: the body must carry that context
//  from here on (dsh_calltrace_stamp_msg), as no span will stamp it.
bool
    dsh_calltrace_open (dsh_record_t *record, const msgpack_object *meta, const char *agent);

//  The call's trace id as 32 hex digits into text (33 bytes); "" when
//  the call has no context.
void
    dsh_calltrace_id_hex (dsh_record_t *record, char *text);

//  Write the traceparent of span (NULL: the record's own context) into
//  the CALL body's meta, and drop its tracestate if the broker restarted
//  the trace. A frame is the broker's own: the traceparent the broker
//  wrote last is overwritten in place (it has a fixed size) when the body
//  still holds it, else the body is spliced (dsh_proto_splice_call, every
//  other byte kept). Returns 0, or -1 with the body unchanged (a body the
//  splice refuses, which the chain's check refuses after).
int
    dsh_calltrace_stamp_frame (dsh_record_t *record, dsh_span_t *span, zframe_t **body_p);

//  The same for a message, always into a new body (a message's bytes may
//  be shared with the audit), at most max_bytes.
int
    dsh_calltrace_stamp_msg (dsh_record_t *record, dsh_span_t *span, zmq_msg_t *body, size_t max_bytes);

//  The call is answered with body: with tracing on, the answer's error
//  code (if it is an error) goes on the dispatch span, if it is still
//  open, and the call's span, and body gets the top-level traceparent of
//  the call's span (or of the context the call ran under).
void
    dsh_calltrace_answer (dsh_record_t *record, zmq_msg_t *body);

//  Sets the dispatch span's error from a component's RESULT (root, as
//  decoded once on WORK), if it is an error.
void
    dsh_calltrace_dispatch_result (dsh_record_t *record, const msgpack_object *root);

//  Ends the dispatch span, if open.
void
    dsh_calltrace_dispatch_end (dsh_record_t *record);

//  Ends the call's spans (the record goes).
void
    dsh_calltrace_close (dsh_record_t *record);

//  Self test
void
    dsh_calltrace_test (bool verbose);

#ifdef __cplusplus
}
#endif

#endif
