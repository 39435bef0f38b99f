/*  =========================================================================
    test_fairq - dsh_fairq: calls held for busy components go out round
    robin across callers, are taken out when answered, and are bounded per
    caller and in all, in calls and bytes
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_fairq.h"

static int
s_reply (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    (void) arg;
    (void) route;
    (void) route_size;
    zmq_msg_close (body);
    return 0;
}

//  A record from caller (its FRONT routing id) for component.
static dsh_record_t *
s_open (dsh_inflight_t *inflight, const char *caller, const char *call_id, const char *component)
{
    zmq_msg_t route [1];
    zmq_msg_init_size (&route [0], strlen (caller));
    memcpy (zmq_msg_data (&route [0]), caller, strlen (caller));
    dsh_record_t *record = dsh_inflight_open (inflight, route, 1, call_id, "echo", 60000);
    zmq_msg_close (&route [0]);
    snprintf (record->component, sizeof (record->component), "%s", component);
    return record;
}

//  Holds a call with a body of size bytes; returns what push returned.
static int
s_push (dsh_fairq_t *fairq, dsh_record_t *record, size_t size, char *error, size_t error_size)
{
    zmq_msg_t body;
    zmq_msg_init_size (&body, size);
    memset (zmq_msg_data (&body), 'x', size);
    int rc = dsh_fairq_push (fairq, record, &body, error, error_size);
    zmq_msg_close (&body);
    return rc;
}

//  Pops the next call for component and checks its callId (NULL: none).
static void
s_expect_pop (dsh_fairq_t *fairq, const char *component, const char *call_id, size_t size)
{
    zmq_msg_t body;
    zmq_msg_init (&body);
    dsh_record_t *record = dsh_fairq_pop (fairq, component, &body);
    if (call_id) {
        assert_non_null (record);
        assert_string_equal (record->call_id, call_id);
        //  Off the queue: the broker's to send on or answer
        assert_int_equal (dsh_inflight_where (record), DSH_AT_BROKER);
        assert_int_equal (zmq_msg_size (&body), size);
    }
    else
        assert_null (record);
    zmq_msg_close (&body);
}

static const dsh_fairq_limits_t s_roomy = { 1000, 1000000, 1000, 1000000 };

static void
test_round_robin (void **state)
{
    (void) state;
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, NULL);
    dsh_fairq_t *fairq = dsh_fairq_new (&s_roomy);
    char error [256];
    const char *calls [][2] = {
        { "A", "a1" }, { "A", "a2" }, { "A", "a3" }, { "B", "b1" }, { "C", "c1" }, { "C", "c2" }
    };
    for (size_t index = 0; index < 6; index++) {
        dsh_record_t *record = s_open (inflight, calls [index][0], calls [index][1], "comp");
        assert_int_equal (s_push (fairq, record, 10, error, sizeof (error)), 0);
        assert_int_equal (dsh_inflight_where (record), DSH_AT_QUEUE);
    }
    //  Another component's queue is its own
    dsh_record_t *other = s_open (inflight, "A", "o1", "elsewhere");
    assert_int_equal (s_push (fairq, other, 10, error, sizeof (error)), 0);
    assert_int_equal (dsh_fairq_size (fairq), 7);
    zlistx_t *components = dsh_fairq_components (fairq);
    assert_int_equal (zlistx_size (components), 2);
    zlistx_destroy (&components);

    //  One call per caller in turn, each caller's in order
    const char *order [] = { "a1", "b1", "c1", "a2", "c2", "a3" };
    for (size_t index = 0; index < 6; index++)
        s_expect_pop (fairq, "comp", order [index], 10);
    s_expect_pop (fairq, "comp", NULL, 0);
    assert_int_equal (dsh_fairq_size (fairq), 1);
    s_expect_pop (fairq, "elsewhere", "o1", 10);
    assert_int_equal (dsh_fairq_size (fairq), 0);
    components = dsh_fairq_components (fairq);
    assert_int_equal (zlistx_size (components), 0);
    zlistx_destroy (&components);

    dsh_fairq_destroy (&fairq);
    dsh_fairq_destroy (&fairq);
    dsh_inflight_destroy (&inflight);
}

//  A caller that comes back after its lane emptied waits a full turn.
static void
test_newcomer_waits_its_turn (void **state)
{
    (void) state;
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, NULL);
    dsh_fairq_t *fairq = dsh_fairq_new (&s_roomy);
    char error [256];
    assert_int_equal (s_push (fairq, s_open (inflight, "A", "a1", "comp"), 1, error, sizeof (error)), 0);
    assert_int_equal (s_push (fairq, s_open (inflight, "A", "a2", "comp"), 1, error, sizeof (error)), 0);
    assert_int_equal (s_push (fairq, s_open (inflight, "B", "b1", "comp"), 1, error, sizeof (error)), 0);
    s_expect_pop (fairq, "comp", "a1", 1);
    s_expect_pop (fairq, "comp", "b1", 1);
    assert_int_equal (s_push (fairq, s_open (inflight, "B", "b2", "comp"), 1, error, sizeof (error)), 0);
    s_expect_pop (fairq, "comp", "a2", 1);
    s_expect_pop (fairq, "comp", "b2", 1);
    dsh_fairq_destroy (&fairq);
    dsh_inflight_destroy (&inflight);
}

static void
test_remove (void **state)
{
    (void) state;
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, NULL);
    dsh_fairq_t *fairq = dsh_fairq_new (&s_roomy);
    char error [256];
    dsh_record_t *a1 = s_open (inflight, "A", "a1", "comp");
    dsh_record_t *b1 = s_open (inflight, "B", "b1", "comp");
    assert_int_equal (s_push (fairq, a1, 5, error, sizeof (error)), 0);
    assert_int_equal (s_push (fairq, s_open (inflight, "A", "a2", "comp"), 5, error, sizeof (error)), 0);
    assert_int_equal (s_push (fairq, b1, 5, error, sizeof (error)), 0);
    dsh_fairq_remove (fairq, a1);
    assert_int_equal (dsh_inflight_where (a1), DSH_AT_BROKER);
    assert_int_equal (dsh_fairq_size (fairq), 2);
    //  B's only call out: its lane goes, and A's is all that is left
    dsh_fairq_remove (fairq, b1);
    s_expect_pop (fairq, "comp", "a2", 5);
    s_expect_pop (fairq, "comp", NULL, 0);
    //  As the broker does with a cancelled call: out of the queue, answered
    dsh_inflight_answer_error (inflight, &a1, DSH_E_CANCELLED, "Error: the call was cancelled");
    dsh_inflight_answer_error (inflight, &b1, DSH_E_CANCELLED, "Error: the call was cancelled");
    assert_int_equal (dsh_inflight_size (inflight), 1);
    dsh_fairq_destroy (&fairq);
    dsh_inflight_destroy (&inflight);
}

static void
test_bounds (void **state)
{
    (void) state;
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, NULL);
    dsh_fairq_limits_t limits = { 3, 100, 2, 50 };
    dsh_fairq_t *fairq = dsh_fairq_new (&limits);
    char error [256];
    //  Per caller, in calls
    assert_int_equal (s_push (fairq, s_open (inflight, "A", "a1", "comp"), 10, error, sizeof (error)), 0);
    assert_int_equal (s_push (fairq, s_open (inflight, "A", "a2", "other"), 10, error, sizeof (error)), 0);
    dsh_record_t *refused = s_open (inflight, "A", "a3", "comp");
    assert_int_equal (s_push (fairq, refused, 10, error, sizeof (error)), -1);
    assert_non_null (strstr (error, "from this caller"));
    assert_non_null (strstr (error, "its limit is 2 calls"));
    assert_int_equal (dsh_inflight_where (refused), DSH_AT_BROKER);
    //  Per caller, in bytes
    assert_int_equal (s_push (fairq, s_open (inflight, "B", "b1", "comp"), 51, error, sizeof (error)), -1);
    assert_non_null (strstr (error, "50 bytes"));
    //  In all, in calls
    assert_int_equal (s_push (fairq, s_open (inflight, "B", "b2", "comp"), 50, error, sizeof (error)), 0);
    assert_int_equal (s_push (fairq, s_open (inflight, "C", "c1", "comp"), 1, error, sizeof (error)), -1);
    assert_non_null (strstr (error, "its limit is 3 calls"));
    assert_null (strstr (error, "from this caller"));
    //  In all, in bytes: 60 held, 41 more would pass 100
    s_expect_pop (fairq, "other", "a2", 10);
    assert_int_equal (s_push (fairq, s_open (inflight, "C", "c2", "comp"), 41, error, sizeof (error)), -1);
    assert_non_null (strstr (error, "100 bytes"));
    assert_int_equal (s_push (fairq, s_open (inflight, "C", "c3", "comp"), 40, error, sizeof (error)), 0);
    assert_int_equal (dsh_fairq_size (fairq), 3);
    //  Destroyed with calls held: their bodies go with it
    dsh_fairq_destroy (&fairq);
    dsh_inflight_destroy (&inflight);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_round_robin),
        cmocka_unit_test (test_newcomer_waits_its_turn),
        cmocka_unit_test (test_remove),
        cmocka_unit_test (test_bounds),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
