/*  =========================================================================
    dsh_owner - who may own a component id: the policy, decided

    The rules of PROTOCOL.md, "Component ids are owned", as one decision
    (dsh_owner.h); the registry carries it out on its sockets.
    =========================================================================
*/

#include "dsh_owner.h"

//  Not the last heartbeat's age itself: on a loaded host one late
//  heartbeat would hand a live owner's id to a duplicate, where expiry,
//  a tick later, allows for it. A closed connection has no route any
//  more, so it is never asked about.
bool
dsh_owner_holder_live (const dsh_owner_rules_t *rules, const dsh_route_t *holder, bool cataloged,
                       int64_t now_mono_ms)
{
    assert (rules);
    assert (holder);
    return cataloged || now_mono_ms - holder->claimed_mono_ms <= rules->window_ms;
}

//  True if a claim comes from whoever holds the id: under CURVE the same
//  key (a restart elsewhere with the key takes its id over); without it
//  the same incarnation (the generation its HELLOs stated), i.e. a
//  connection made again. Not the catalog's generation: an ANNOUNCE on the
//  announce channel is anyone's.
static bool
s_same_owner (const dsh_owner_rules_t *rules, const dsh_route_t *holder, const dsh_owner_claim_t *claim)
{
    if (rules->curve)
        return holder->key && claim->key && streq (holder->key, claim->key);
    return claim->generation && claim->generation == holder->generation;
}

//  True if a claim comes from another process than the one that owned the
//  id last (its connection may have closed already): the calls that one
//  was given will not be answered. Its generation as its HELLO stated it,
//  not the catalog's: an ANNOUNCE from the new process may have overtaken
//  its HELLO.
static bool
s_new_incarnation (const dsh_owner_id_t *id, const dsh_owner_claim_t *claim)
{
    uint64_t owned_at = id->owned_at;
    if (!owned_at) {
        if (!id->cataloged)
            return false;
        owned_at = id->catalog_generation;
    }
    return claim->generation && claim->generation != owned_at;
}

//  The claimant's REFUSED: who holds the id, since when.
static void
s_refusal (const dsh_owner_rules_t *rules, const dsh_route_t *holder, char *reason, size_t size)
{
    time_t since = (time_t) (holder->claimed_ms / 1000);
    struct tm utc;
    char stamp [32];
    strftime (stamp, sizeof (stamp), "%Y-%m-%dT%H:%M:%SZ", gmtime_r (&since, &utc));
    if (rules->curve)
        snprintf (reason, size, "component id %s is held by a live component (key %.8s...) since %s; "
                  "choose another id", holder->component, holder->key? holder->key: "?", stamp);
    else
        snprintf (reason, size, "component id %s is held by a live component (generation %" PRIu64
                  ") since %s; choose another id", holder->component, holder->generation, stamp);
}

void
dsh_owner_decide (const dsh_owner_rules_t *rules, const dsh_owner_id_t *id, const dsh_owner_claim_t *claim,
                  int64_t now_mono_ms, dsh_owner_decision_t *decision)
{
    assert (rules);
    assert (id);
    assert (claim);
    assert (decision);
    memset (decision, 0, sizeof (*decision));
    const dsh_route_t *holder = id->holder;
    bool live = holder && dsh_owner_holder_live (rules, holder, id->cataloged, now_mono_ms);
    if (live && !s_same_owner (rules, holder, claim)) {
        //  A connection is told once, at its first HELLO; anything else
        //  from it is not a claim worth an event each time
        if (claim->hello && !claim->waiting) {
            decision->verdict = DSH_OWNER_REFUSE;
            s_refusal (rules, holder, decision->reason, sizeof (decision->reason));
        }
        else
            decision->verdict = claim->hello? DSH_OWNER_IGNORE: DSH_OWNER_DROP;
        return;
    }
    decision->restarted = s_new_incarnation (id, claim);
    if (!holder) {
        decision->verdict = DSH_OWNER_TAKE;
        return;
    }
    //  Its connection is open: it waits in line, and is told why
    decision->verdict = DSH_OWNER_TAKE_OVER;
    decision->why = !live? "this connection's component had expired or withdrawn":
                    rules->curve? "it has the same key": "it is of the same generation";
    snprintf (decision->reason, sizeof (decision->reason), "component id taken over by a new connection (%s); "
              "this one gets it back if that one goes", decision->why);
}

bool
dsh_owner_promotion_restarts (uint64_t owned_at, uint64_t generation)
{
    return generation && owned_at && generation != owned_at;
}
