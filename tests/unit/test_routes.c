/*  =========================================================================
    test_routes - dsh_routes: claims, the two lookups, closed connections
    and the line of waiting connections
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_routes.h"

static void
test_bind_and_lookups (void **state)
{
    (void) state;
    dsh_routes_t *routes = dsh_routes_new ();
    dsh_route_t *route = dsh_routes_bind (routes, "demo", "demo 1", 7, 100, NULL, 1000, 10);
    assert_ptr_equal (dsh_routes_lookup (routes, "demo"), route);
    assert_ptr_equal (dsh_routes_link (routes, "demo 1"), route);
    assert_string_equal (route->routing_id, "demo 1");
    assert_int_equal (route->generation, 100);
    assert_null (route->key);

    //  Another connection takes the id: the old routing id owns nothing
    route = dsh_routes_bind (routes, "demo", "demo 2", 8, 200, "KEY", 2000, 20);
    assert_ptr_equal (dsh_routes_lookup (routes, "demo"), route);
    assert_null (dsh_routes_link (routes, "demo 1"));
    assert_string_equal (route->key, "KEY");
    assert_int_equal (dsh_routes_size (routes), 1);

    //  A connection that claims another id gives up its first
    dsh_routes_bind (routes, "other", "demo 2", 8, 300, NULL, 3000, 30);
    assert_null (dsh_routes_lookup (routes, "demo"));
    assert_string_equal (dsh_routes_link (routes, "demo 2")->component, "other");
    assert_int_equal (dsh_routes_size (routes), 1);
    dsh_routes_destroy (&routes);
    dsh_routes_destroy (&routes);
}

static void
test_closed_frees_ids (void **state)
{
    (void) state;
    dsh_routes_t *routes = dsh_routes_new ();
    dsh_routes_bind (routes, "a", "a 1", 7, 1, NULL, 0, 0);
    dsh_routes_bind (routes, "b", "b 1", 8, 1, NULL, 0, 0);
    zlistx_t *closed = dsh_routes_closed (routes, 7);
    assert_int_equal (zlistx_size (closed), 1);
    assert_string_equal (zlistx_first (closed), "a");
    zlistx_destroy (&closed);
    assert_null (dsh_routes_lookup (routes, "a"));
    assert_null (dsh_routes_link (routes, "a 1"));
    assert_non_null (dsh_routes_lookup (routes, "b"));
    closed = dsh_routes_closed (routes, 99);
    assert_int_equal (zlistx_size (closed), 0);
    zlistx_destroy (&closed);
    dsh_routes_destroy (&routes);
}

//  The latest owner's generation outlives its connection, until forgotten
static void
test_owned_at (void **state)
{
    (void) state;
    dsh_routes_t *routes = dsh_routes_new ();
    assert_int_equal (dsh_routes_owned_at (routes, "a"), 0);
    dsh_route_t *route = dsh_routes_bind (routes, "a", "a 1", 7, 5, NULL, 0, 0);
    assert_int_equal (dsh_routes_owned_at (routes, "a"), 5);
    dsh_routes_set_generation (routes, route, 6);
    dsh_routes_set_generation (routes, route, 0);
    assert_int_equal (route->generation, 6);
    assert_int_equal (dsh_routes_owned_at (routes, "a"), 6);
    dsh_routes_forget (routes, "a");
    assert_int_equal (dsh_routes_owned_at (routes, "a"), 6);
    zlistx_t *closed = dsh_routes_closed (routes, 7);
    zlistx_destroy (&closed);
    assert_int_equal (dsh_routes_owned_at (routes, "a"), 6);
    dsh_routes_forget (routes, "a");
    assert_int_equal (dsh_routes_owned_at (routes, "a"), 0);
    dsh_routes_destroy (&routes);
}

static void
test_waiting_line (void **state)
{
    (void) state;
    dsh_routes_t *routes = dsh_routes_new ();
    dsh_routes_bind (routes, "a", "a 1", 7, 1, NULL, 0, 0);
    assert_null (dsh_routes_promote (routes, "a", 0, 0));
    dsh_routes_wait (routes, "a", "a 2", 8, 2, NULL);
    dsh_routes_wait (routes, "a", "a 3", 9, 3, "KEY");
    dsh_routes_wait (routes, "a", "a 2", 8, 2, NULL);      //  again: to the back
    assert_true (dsh_routes_waits (routes, "a", "a 2"));
    assert_false (dsh_routes_waits (routes, "a", "a 1"));
    //  A waiting connection that closes leaves the line
    zlistx_t *closed = dsh_routes_closed (routes, 9);
    assert_int_equal (zlistx_size (closed), 0);
    zlistx_destroy (&closed);
    closed = dsh_routes_closed (routes, 7);
    assert_int_equal (zlistx_size (closed), 1);
    zlistx_destroy (&closed);
    dsh_route_t *route = dsh_routes_promote (routes, "a", 5000, 50);
    assert_non_null (route);
    assert_string_equal (route->routing_id, "a 2");
    assert_int_equal (route->fd, 8);
    assert_int_equal (route->generation, 2);
    assert_int_equal (route->claimed_ms, 5000);
    assert_ptr_equal (dsh_routes_link (routes, "a 2"), route);
    //  Nobody else waits: the waiting connection that closed left the line
    assert_null (dsh_routes_promote (routes, "a", 0, 0));
    assert_ptr_equal (dsh_routes_lookup (routes, "a"), route);

    //  The line is bounded: the oldest goes
    for (int index = 0; index < DSH_ROUTES_WAITING_MAX + 2; index++) {
        char routing_id [16];
        snprintf (routing_id, sizeof (routing_id), "b %d", index);
        dsh_routes_wait (routes, "b", routing_id, 100 + index, 0, NULL);
    }
    route = dsh_routes_promote (routes, "b", 0, 0);
    assert_string_equal (route->routing_id, "b 2");
    dsh_routes_destroy (&routes);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_bind_and_lookups),
        cmocka_unit_test (test_closed_frees_ids),
        cmocka_unit_test (test_owned_at),
        cmocka_unit_test (test_waiting_line),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
