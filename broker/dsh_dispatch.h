/*  =========================================================================
    dsh_dispatch - the calls the broker has sent to components and not yet
    answered

    Each call sent to a component gets a token, the 8-byte key the component
    echoes in its RESULT. The entry keeps what the broker needs to answer the
    caller without the component: the return envelope, the callId, the tool,
    the component and the deadline. Taking an entry out of the table is the
    one place a reply can come from, so each call is answered exactly once:
    by its result, by its deadline, or by its component's departure.
    =========================================================================
*/

#ifndef DSH_DISPATCH_H_INCLUDED
#define DSH_DISPATCH_H_INCLUDED

#include "dsh_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_dispatch_t dsh_dispatch_t;

//  One call in flight.
typedef struct {
    uint64_t token;
    zmsg_t *envelope;           //  the route back to the caller, or NULL
    uint64_t chain_token;       //  or the chain flow to answer, when not 0
    char *call_id;
    char *tool;
    char *component;
    int64_t deadline_ms;
    zframe_t *body;             //  kept for a retry (idempotent tools), or NULL
    char *caller;               //  the key a cancel finds the call by
    bool retried;               //  already sent to a second provider
} dsh_pending_t;

//  Destroy a pending entry; safe twice.
void
    dsh_pending_destroy (dsh_pending_t **self_p);

//  Create an empty table.
dsh_dispatch_t *
    dsh_dispatch_new (void);

//  Destroy the table and every entry; safe twice.
void
    dsh_dispatch_destroy (dsh_dispatch_t **self_p);

//  Add a call; takes the envelope (NULL for a call from the chain, which
//  is answered by chain_token). Returns the new entry's token.
uint64_t
    dsh_dispatch_add (dsh_dispatch_t *self, zmsg_t **envelope_p, uint64_t chain_token,
                      const char *call_id, const char *tool, const char *component, int64_t deadline_ms);

//  Take the entry for a token out of the table (caller destroys it), or
//  NULL if there is none (answered already, or never sent).
dsh_pending_t *
    dsh_dispatch_take (dsh_dispatch_t *self, uint64_t token);

//  The entry for a token, left in the table, or NULL.
dsh_pending_t *
    dsh_dispatch_lookup (dsh_dispatch_t *self, uint64_t token);

//  Take the entry of a caller's call (envelope and callId), or NULL.
dsh_pending_t *
    dsh_dispatch_take_caller (dsh_dispatch_t *self, zmsg_t *envelope, const char *call_id);

//  Take the entry of a call that came out of the chain as chain_token, or NULL.
dsh_pending_t *
    dsh_dispatch_take_chain (dsh_dispatch_t *self, uint64_t chain_token);

//  Take every entry sent to component, in a new list (caller destroys; the
//  list destroys its entries).
zlistx_t *
    dsh_dispatch_take_component (dsh_dispatch_t *self, const char *component);

//  Take every entry whose deadline is at or before now_ms, in a new list.
zlistx_t *
    dsh_dispatch_take_expired (dsh_dispatch_t *self, int64_t now_ms);

//  Number of calls in flight.
size_t
    dsh_dispatch_size (dsh_dispatch_t *self);

//  Encode a token as its 8-byte frame.
zframe_t *
    dsh_dispatch_token_frame (uint64_t token);

//  Decode an 8-byte token frame; returns 0 or -1 if the frame is not one.
int
    dsh_dispatch_token_decode (zframe_t *frame, uint64_t *token);

#ifdef __cplusplus
}
#endif

#endif
