/*  =========================================================================
    dsh_fairq - the calls the broker holds back for busy components, and
    the order they go out in: round robin across callers

    A component takes at most a window of calls at a time (dsh_catalog
    says when it has room). A call for a component that has none waits
    here, in its caller's lane of that component's queue; as results free
    the window, the registry takes the next call from the next caller in
    turn, so a caller with thousands of calls waiting gets one slot in
    turn like a caller with one, and cannot starve it.

    A held call keeps its one record in dsh_inflight (DSH_AT_QUEUE, its
    place in the record's fair-queue slot): the deadline scan, CANCEL and a
    component's departure find it there and take it out of its lane with
    dsh_fairq_remove or dsh_fairq_pop, which give it back to the broker
    (DSH_AT_BROKER).
    The queue is bounded per caller and in total, in calls and in bytes;
    a call over a bound is not taken, and the registry answers it
    OVERLOADED.
    =========================================================================
*/

#ifndef DSH_FAIRQ_H_INCLUDED
#define DSH_FAIRQ_H_INCLUDED

#include "dsh_inflight.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_fairq_t dsh_fairq_t;

//  How much the broker holds back, at most.
typedef struct {
    size_t max_calls;           //  calls held, all callers together
    size_t max_bytes;           //  their bodies' bytes
    size_t max_caller_calls;    //  calls held for one caller (dsh_inflight_caller)
    size_t max_caller_bytes;    //  their bodies' bytes
} dsh_fairq_limits_t;

//  An empty queue with these bounds.
dsh_fairq_t *
    dsh_fairq_new (const dsh_fairq_limits_t *limits);

//  Destroy the queue and the bodies it holds (not the records: they are
//  dsh_inflight's). Safe twice.
void
    dsh_fairq_destroy (dsh_fairq_t **self_p);

//  Hold a call for the component its record names (record->component),
//  at the end of its caller's lane: moves the body in and the record to
//  DSH_AT_QUEUE. Returns 0, or -1 with a reason if that would pass a bound
//  (the body and the record are untouched).
int
    dsh_fairq_push (dsh_fairq_t *self, dsh_record_t *record, zmq_msg_t *body,
                    char *error, size_t error_size);

//  The next call held for component, from the next caller in turn: out of
//  the queue, its body moved into body (an initialised message), and back
//  in the broker's hands (DSH_AT_BROKER): the caller sends it on or
//  answers it. NULL if nothing is held for component.
dsh_record_t *
    dsh_fairq_pop (dsh_fairq_t *self, const char *component, zmq_msg_t *body);

//  Take a held call out of the queue, back to DSH_AT_BROKER, and close its
//  body (the call is answered from here: deadline, cancel).
void
    dsh_fairq_remove (dsh_fairq_t *self, dsh_record_t *record);

//  The components that have calls held for them, in a new list of char *
//  (caller destroys).
zlistx_t *
    dsh_fairq_components (dsh_fairq_t *self);

//  Number of calls held.
size_t
    dsh_fairq_size (dsh_fairq_t *self);

//  Bytes of the calls held (their bodies), as the bounds count them.
size_t
    dsh_fairq_bytes (dsh_fairq_t *self);

#ifdef __cplusplus
}
#endif

#endif
