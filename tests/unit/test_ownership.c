/*  =========================================================================
    test_ownership - dsh_owner: who may own a component id (PROTOCOL.md,
    "Component ids are owned"), every branch of the decision, and the
    decisions carried out on dsh_routes as the registry does: the line of
    waiting connections (its 9th), the displaced owner, promotion
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_owner.h"

#define WINDOW_MS 3000

static const dsh_owner_rules_t s_plain = { false, WINDOW_MS };
static const dsh_owner_rules_t s_curve = { true, WINDOW_MS };

//  A holder's route, claimed at claimed_ms (wall) and claimed_mono_ms.
static dsh_route_t
s_holder (const char *key, uint64_t generation, int64_t claimed_ms, int64_t claimed_mono_ms)
{
    dsh_route_t route = { (char *) "demo", (char *) "demo 1", 7, generation, (char *) key,
                          claimed_ms, claimed_mono_ms, "" };
    return route;
}

static dsh_owner_decision_t
s_decide (const dsh_owner_rules_t *rules, const dsh_route_t *holder, bool cataloged, uint64_t owned_at,
          const char *key, uint64_t generation, bool hello, bool waiting, int64_t now)
{
    dsh_owner_id_t id = { holder, cataloged, holder? holder->generation: 0, owned_at };
    dsh_owner_claim_t claim = { key, generation, hello, waiting };
    dsh_owner_decision_t decision;
    dsh_owner_decide (rules, &id, &claim, now, &decision);
    return decision;
}

//  Nobody holds the id: the claim takes it; another incarnation than the
//  latest owner's makes its calls fail
static void
test_free_id (void **state)
{
    (void) state;
    dsh_owner_decision_t decision = s_decide (&s_plain, NULL, false, 0, NULL, 5, true, false, 0);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE);
    assert_false (decision.restarted);
    //  The id's latest owner (its connection closed) was at 5
    decision = s_decide (&s_plain, NULL, false, 5, NULL, 5, true, false, 0);
    assert_false (decision.restarted);
    decision = s_decide (&s_plain, NULL, false, 5, NULL, 6, true, false, 0);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE);
    assert_true (decision.restarted);
    //  A claim that states no generation is no other incarnation
    decision = s_decide (&s_plain, NULL, false, 5, NULL, 0, false, false, 0);
    assert_false (decision.restarted);
    //  No owner known: the catalog's generation, if the component is there
    dsh_owner_id_t id = { NULL, true, 7, 0 };
    dsh_owner_claim_t claim = { NULL, 8, true, false };
    dsh_owner_decide (&s_plain, &id, &claim, 0, &decision);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE);
    assert_true (decision.restarted);
    claim.generation = 7;
    dsh_owner_decide (&s_plain, &id, &claim, 0, &decision);
    assert_false (decision.restarted);
    //  Nothing known at all: nothing to fail
    id.cataloged = false;
    claim.generation = 8;
    dsh_owner_decide (&s_plain, &id, &claim, 0, &decision);
    assert_false (decision.restarted);
}

//  A live holder keeps the id: a HELLO is refused, with who holds it since
//  when; told once, the same connection hears nothing more; a message
//  other than a HELLO is dropped
static void
test_live_holder_refuses (void **state)
{
    (void) state;
    dsh_route_t holder = s_holder (NULL, 1, 86400000, 0);
    dsh_owner_decision_t decision = s_decide (&s_plain, &holder, true, 1, NULL, 2, true, false, 100000);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
    assert_string_equal (decision.reason, "component id demo is held by a live component (generation 1) since "
                                          "1970-01-02T00:00:00Z; choose another id");
    assert_false (decision.restarted);
    decision = s_decide (&s_plain, &holder, true, 1, NULL, 2, true, true, 100000);
    assert_int_equal (decision.verdict, DSH_OWNER_IGNORE);
    decision = s_decide (&s_plain, &holder, true, 1, NULL, 2, false, false, 100000);
    assert_int_equal (decision.verdict, DSH_OWNER_DROP);
    decision = s_decide (&s_plain, &holder, true, 1, NULL, 2, false, true, 100000);
    assert_int_equal (decision.verdict, DSH_OWNER_DROP);
    //  No generation on either side is no proof of the same owner
    holder.generation = 0;
    decision = s_decide (&s_plain, &holder, true, 0, NULL, 0, true, false, 100000);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
}

//  Without CURVE, the holder's own incarnation (its generation) takes the
//  id over: a connection made again; the holder is told why
static void
test_same_generation_takes_over (void **state)
{
    (void) state;
    dsh_route_t holder = s_holder (NULL, 4, 0, 0);
    dsh_owner_decision_t decision = s_decide (&s_plain, &holder, true, 4, NULL, 4, true, false, 10);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE_OVER);
    assert_string_equal (decision.why, "it is of the same generation");
    assert_string_equal (decision.reason, "component id taken over by a new connection (it is of the same "
                                          "generation); this one gets it back if that one goes");
    assert_false (decision.restarted);
    //  Its key counts for nothing without CURVE
    decision = s_decide (&s_plain, &holder, true, 4, "KEY", 5, true, false, 10);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
    //  Nor does the catalog's generation (its last applied ANNOUNCE): an
    //  ANNOUNCE is anyone's; only the generation the holder's HELLO stated
    holder.generation = 0;
    dsh_owner_id_t id = { &holder, true, 4, 4 };
    dsh_owner_claim_t claim = { NULL, 4, true, false };
    dsh_owner_decide (&s_plain, &id, &claim, 10, &decision);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
}

//  Under CURVE the id follows the key: the owner's key takes it over at
//  any generation (a restart elsewhere); another key is refused
static void
test_curve_follows_key (void **state)
{
    (void) state;
    dsh_route_t holder = s_holder ("OWNERKEY12345", 4, 0, 0);
    dsh_owner_decision_t decision = s_decide (&s_curve, &holder, true, 4, "OWNERKEY12345", 9, true, false, 10);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE_OVER);
    assert_string_equal (decision.why, "it has the same key");
    assert_true (decision.restarted);
    decision = s_decide (&s_curve, &holder, true, 4, "OTHERKEY", 4, true, false, 10);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
    assert_string_equal (decision.reason, "component id demo is held by a live component (key OWNERKEY...) since "
                                          "1970-01-01T00:00:00Z; choose another id");
    decision = s_decide (&s_curve, &holder, true, 4, NULL, 4, true, false, 10);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
    //  A holder with no key is matched by nobody
    holder.key = NULL;
    decision = s_decide (&s_curve, &holder, true, 4, "OTHERKEY", 4, true, false, 10);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
    assert_non_null (strstr (decision.reason, "(key ?...)"));
}

//  A holder whose component is not in the catalog (expired, withdrawn) is
//  live only within the window after its claim; then any claim takes the
//  id over, and the holder waits in line
static void
test_holder_liveness (void **state)
{
    (void) state;
    dsh_route_t holder = s_holder (NULL, 1, 0, 1000);
    assert_true (dsh_owner_holder_live (&s_plain, &holder, true, 1000000));
    assert_true (dsh_owner_holder_live (&s_plain, &holder, false, 1000 + WINDOW_MS));
    assert_false (dsh_owner_holder_live (&s_plain, &holder, false, 1000 + WINDOW_MS + 1));
    dsh_owner_decision_t decision = s_decide (&s_plain, &holder, false, 1, NULL, 2, true, false, 1000 + WINDOW_MS);
    assert_int_equal (decision.verdict, DSH_OWNER_REFUSE);
    decision = s_decide (&s_plain, &holder, false, 1, NULL, 2, true, false, 1000 + WINDOW_MS + 1);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE_OVER);
    assert_string_equal (decision.why, "this connection's component had expired or withdrawn");
    assert_true (decision.restarted);
    //  Even a message other than a HELLO takes an id from a holder gone silent
    decision = s_decide (&s_curve, &holder, false, 1, "KEY", 0, false, false, 1000 + WINDOW_MS + 1);
    assert_int_equal (decision.verdict, DSH_OWNER_TAKE_OVER);
    assert_false (decision.restarted);
}

static void
test_promotion (void **state)
{
    (void) state;
    assert_false (dsh_owner_promotion_restarts (0, 5));
    assert_false (dsh_owner_promotion_restarts (5, 0));
    assert_false (dsh_owner_promotion_restarts (5, 5));
    assert_true (dsh_owner_promotion_restarts (5, 6));
}

//  A claim decided and carried out on the routes, as dsh_work.c does.
//  Returns the verdict.
static dsh_owner_verdict_t
s_claim (dsh_routes_t *routes, const char *routing_id, int fd, uint64_t generation, bool cataloged, int64_t now)
{
    dsh_route_t *holder = dsh_routes_lookup (routes, "demo");
    dsh_owner_id_t id = { holder, cataloged, 1, dsh_routes_owned_at (routes, "demo") };
    dsh_owner_claim_t claim = { NULL, generation, true, dsh_routes_waits (routes, "demo", routing_id) };
    dsh_owner_decision_t decision;
    dsh_owner_decide (&s_plain, &id, &claim, now, &decision);
    if (decision.verdict == DSH_OWNER_REFUSE)
        dsh_routes_wait (routes, "demo", routing_id, fd, generation, NULL);
    if (decision.verdict == DSH_OWNER_TAKE_OVER) {
        char *displaced = strdup (holder->routing_id);
        dsh_routes_wait (routes, "demo", displaced, holder->fd, holder->generation, holder->key);
        zstr_free (&displaced);
    }
    if (decision.verdict == DSH_OWNER_TAKE || decision.verdict == DSH_OWNER_TAKE_OVER)
        dsh_routes_bind (routes, "demo", routing_id, fd, generation, NULL, now, now);
    return decision.verdict;
}

//  Nine connections refused one id: the line keeps eight, the one that
//  waited longest leaves it (it is told again at its next HELLO); when the
//  holder's connection closes, the longest waiting of the eight gets it
static void
test_ninth_waiting_connection (void **state)
{
    (void) state;
    dsh_routes_t *routes = dsh_routes_new ();
    assert_int_equal (s_claim (routes, "owner", 7, 1, true, 0), DSH_OWNER_TAKE);
    for (int index = 0; index < DSH_ROUTES_WAITING_MAX + 1; index++) {
        char routing_id [16];
        snprintf (routing_id, sizeof (routing_id), "dup %d", index);
        assert_int_equal (s_claim (routes, routing_id, 100 + index, 10 + (uint64_t) index, true, 10),
                          DSH_OWNER_REFUSE);
        //  Told once: its next HELLO while it waits is ignored
        assert_int_equal (s_claim (routes, routing_id, 100 + index, 10 + (uint64_t) index, true, 10),
                          DSH_OWNER_IGNORE);
    }
    assert_int_equal (zlistx_size (dsh_routes_waiting (routes, "demo")), DSH_ROUTES_WAITING_MAX);
    assert_false (dsh_routes_waits (routes, "demo", "dup 0"));
    assert_true (dsh_routes_waits (routes, "demo", "dup 8"));
    //  The first refused, out of the line, is refused again, and waits at its end
    assert_int_equal (s_claim (routes, "dup 0", 100, 10, true, 20), DSH_OWNER_REFUSE);
    assert_false (dsh_routes_waits (routes, "demo", "dup 1"));
    assert_true (dsh_routes_waits (routes, "demo", "dup 0"));
    //  The owner's connection closes: the longest waiting takes the id, at
    //  another generation than the owner's
    zlistx_t *closed = dsh_routes_closed (routes, 7);
    zlistx_destroy (&closed);
    uint64_t owned_at = dsh_routes_owned_at (routes, "demo");
    dsh_route_t *route = dsh_routes_promote (routes, "demo", 30, 30);
    assert_non_null (route);
    assert_string_equal (route->routing_id, "dup 2");
    assert_true (dsh_owner_promotion_restarts (owned_at, route->generation));
    dsh_routes_destroy (&routes);
}

//  The owner's connection made again (same generation) displaces the old
//  one, which waits in line and gets the id back if the new one goes, as
//  the same incarnation
static void
test_displaced_owner (void **state)
{
    (void) state;
    dsh_routes_t *routes = dsh_routes_new ();
    assert_int_equal (s_claim (routes, "old", 7, 4, true, 0), DSH_OWNER_TAKE);
    assert_int_equal (s_claim (routes, "new", 8, 4, true, 10), DSH_OWNER_TAKE_OVER);
    assert_string_equal (dsh_routes_lookup (routes, "demo")->routing_id, "new");
    assert_null (dsh_routes_link (routes, "old"));
    assert_true (dsh_routes_waits (routes, "demo", "old"));
    //  Another process now is refused, behind the displaced owner
    assert_int_equal (s_claim (routes, "other", 9, 5, true, 20), DSH_OWNER_REFUSE);
    zlistx_t *closed = dsh_routes_closed (routes, 8);
    assert_int_equal (zlistx_size (closed), 1);
    zlistx_destroy (&closed);
    uint64_t owned_at = dsh_routes_owned_at (routes, "demo");
    dsh_route_t *route = dsh_routes_promote (routes, "demo", 30, 30);
    assert_string_equal (route->routing_id, "old");
    assert_int_equal (route->fd, 7);
    assert_false (dsh_owner_promotion_restarts (owned_at, route->generation));
    //  A holder gone silent (its component expired) loses the id to any
    //  claim; the holder waits in line
    assert_int_equal (s_claim (routes, "late", 10, 6, false, 30 + WINDOW_MS + 1), DSH_OWNER_TAKE_OVER);
    assert_true (dsh_routes_waits (routes, "demo", "old"));
    dsh_routes_destroy (&routes);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_free_id),
        cmocka_unit_test (test_live_holder_refuses),
        cmocka_unit_test (test_same_generation_takes_over),
        cmocka_unit_test (test_curve_follows_key),
        cmocka_unit_test (test_holder_liveness),
        cmocka_unit_test (test_promotion),
        cmocka_unit_test (test_ninth_waiting_connection),
        cmocka_unit_test (test_displaced_owner),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
