/*  =========================================================================
    dsh_owner - who may own a component id: the policy, decided

    A component id is owned by one WORK connection at a time (PROTOCOL.md,
    "Component ids are owned"). When a connection that holds no id claims
    one, this module decides what happens, from what the registry knows
    of the id (its holder's route, whether its component is in the
    catalog) and of the claim (key, generation, HELLO or not, already
    waiting) at a given time:

    - TAKE       nobody holds the id: the claim takes it
    - TAKE_OVER  the holder is not live, or is the claimant's owner (the
                 same key under CURVE, else the same generation): the
                 claim takes the id, the holder is told why and waits in
                 line for it
    - REFUSE     a live holder keeps the id: the claimant is told why
                 (REFUSED, a log line, a component.refused event) and
                 waits in line
    - IGNORE     the same, for a claimant told once already: nothing more
    - DROP       the same, for a message other than a HELLO: dropped and
                 logged, with no REFUSED and no event

    and whether the new owner is another incarnation, whose predecessor's
    calls will not be answered.

    Pure: no sockets, no catalog, no clock of its own. The registry
    (dsh_work.c) gathers the inputs, asks, and carries the decision out;
    dsh_routes remembers the result (routes and the line of waiting
    connections, at most DSH_ROUTES_WAITING_MAX per id).
    =========================================================================
*/

#ifndef DSH_OWNER_H_INCLUDED
#define DSH_OWNER_H_INCLUDED

#include "dsh_routes.h"
#include "dsh_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The broker's rules for ids.
typedef struct {
    bool curve;                 //  ids follow keys, not generations
    int64_t window_ms;          //  heartbeatMs x liveness: how long a holder counts as live unheard
} dsh_owner_rules_t;

//  What the registry knows of the id claimed.
typedef struct {
    const dsh_route_t *holder;  //  the open connection that holds it, or NULL
    bool cataloged;             //  its component is in the catalog (neither expired nor withdrawn)
    uint64_t catalog_generation;    //  ... at this generation (its last applied ANNOUNCE's)
    uint64_t owned_at;          //  dsh_routes_owned_at: its latest owner's generation, or 0
} dsh_owner_id_t;

//  The claim: the first message on a connection that holds no id.
typedef struct {
    const char *key;            //  under CURVE, the connection's key, or NULL
    uint64_t generation;        //  the generation its HELLO states, 0 if none
    bool hello;                 //  it is a HELLO (else another message, whose routing id is the id)
    bool waiting;               //  the connection waits in line for the id already (told once)
} dsh_owner_claim_t;

typedef enum {
    DSH_OWNER_TAKE,
    DSH_OWNER_TAKE_OVER,
    DSH_OWNER_REFUSE,
    DSH_OWNER_IGNORE,
    DSH_OWNER_DROP
} dsh_owner_verdict_t;

typedef struct {
    dsh_owner_verdict_t verdict;
    //  TAKE, TAKE_OVER: the claimant is another incarnation than the id's
    //  latest owner: the calls that one was given fail (TOOL_GONE or a retry)
    bool restarted;
    //  TAKE_OVER: why the holder lost the id, for the log
    const char *why;
    //  REFUSE: the reason the claimant is sent; TAKE_OVER: the one the
    //  displaced holder is sent
    char reason [DSH_ID_MAX + 256];
} dsh_owner_decision_t;

//  Decide a claim on an id, at now_mono_ms (zclock_mono), into decision.
void
    dsh_owner_decide (const dsh_owner_rules_t *rules, const dsh_owner_id_t *id, const dsh_owner_claim_t *claim,
                      int64_t now_mono_ms, dsh_owner_decision_t *decision);

//  True if the holder still counts as its id's owner: its component is in
//  the catalog, or, before its first ANNOUNCE, it claimed the id within
//  the window.
bool
    dsh_owner_holder_live (const dsh_owner_rules_t *rules, const dsh_route_t *holder, bool cataloged,
                           int64_t now_mono_ms);

//  True if a waiting connection at generation, given the id when its
//  holder went, is another incarnation than the id's latest owner (at
//  owned_at): that owner's calls fail.
bool
    dsh_owner_promotion_restarts (uint64_t owned_at, uint64_t generation);

#ifdef __cplusplus
}
#endif

#endif
