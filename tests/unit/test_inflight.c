/*  =========================================================================
    test_inflight - dsh_inflight: one record per call, found by token, by
    caller and by deadline, answered exactly once through the reply function
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_inflight.h"

//  What the reply function saw: one entry per answer.
typedef struct {
    int answers;
    char route [64];            //  the last answer's route, frames joined by '|'
    char call_id [64];          //  the last answer's callId
    char code [32];             //  its error code, or ""
} s_replies_t;

static int
s_reply (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    s_replies_t *replies = (s_replies_t *) arg;
    replies->answers++;
    replies->route [0] = 0;
    for (size_t index = 0; index < route_size; index++) {
        size_t used = strlen (replies->route);
        snprintf (replies->route + used, sizeof (replies->route) - used, "%s%.*s", index? "|": "",
                  (int) zmq_msg_size (&route [index]), (const char *) zmq_msg_data (&route [index]));
    }
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
    assert_non_null (doc);
    const msgpack_object *root = dsh_doc_root (doc);
    char *call_id = dsh_doc_strdup (doc, dsh_map_get (root, "callId"));
    char *code = dsh_doc_strdup (doc, dsh_map_get (dsh_map_get (root, "error"), "code"));
    snprintf (replies->call_id, sizeof (replies->call_id), "%s", call_id? call_id: "");
    snprintf (replies->code, sizeof (replies->code), "%s", code? code: "");
    dsh_doc_destroy (&doc);
    zmq_msg_close (body);
    return 0;
}

//  A route of one or two frames, as FRONT would have it.
static size_t
s_route (zmq_msg_t *route, const char *first, const char *second)
{
    zmq_msg_init_size (&route [0], strlen (first));
    memcpy (zmq_msg_data (&route [0]), first, strlen (first));
    if (!second)
        return 1;
    zmq_msg_init_size (&route [1], strlen (second));
    memcpy (zmq_msg_data (&route [1]), second, strlen (second));
    return 2;
}

static dsh_record_t *
s_open (dsh_inflight_t *inflight, const char *peer, const char *call_id, int64_t deadline_ms)
{
    zmq_msg_t route [2];
    size_t size = s_route (route, peer, NULL);
    dsh_record_t *record = dsh_inflight_open (inflight, route, size, call_id, "echo", deadline_ms);
    for (size_t index = 0; index < size; index++)
        zmq_msg_close (&route [index]);
    return record;
}

static void
test_open_lookup_answer_once (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    zmq_msg_t route [2];
    size_t size = s_route (route, "peer-A", "proxy-1");
    dsh_record_t *record = dsh_inflight_open (inflight, route, size, "call-1", "read_file", 5000);
    //  The route frames moved into the record
    assert_int_equal (zmq_msg_size (&route [0]), 0);
    assert_non_null (record);
    assert_true (record->token != 0);
    assert_string_equal (record->tool, "read_file");
    assert_int_equal (record->deadline_ms, 5000);
    assert_int_equal (record->hold_until_ms, 5000);
    assert_int_equal (dsh_inflight_size (inflight), 1);
    assert_ptr_equal (dsh_inflight_lookup (inflight, record->token), record);
    assert_null (dsh_inflight_lookup (inflight, record->token + 1));

    uint64_t token = record->token;
    dsh_inflight_answer_error (inflight, &record, "TIMEOUT", "Error: late");
    assert_null (record);
    assert_int_equal (replies.answers, 1);
    assert_string_equal (replies.route, "peer-A|proxy-1");
    assert_string_equal (replies.call_id, "call-1");
    assert_string_equal (replies.code, "TIMEOUT");
    //  Gone from every index: nothing can answer it a second time
    assert_null (dsh_inflight_lookup (inflight, token));
    assert_int_equal (dsh_inflight_size (inflight), 0);
    for (size_t index = 0; index < size; index++)
        zmq_msg_close (&route [index]);
    dsh_inflight_destroy (&inflight);
    dsh_inflight_destroy (&inflight);
}

static void
test_tokens_are_random_and_unique (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    zhashx_t *seen = zhashx_new ();
    uint64_t previous = 0;
    int sequential = 0;
    for (int index = 0; index < 5000; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "call-%d", index);
        dsh_record_t *record = s_open (inflight, "peer", call_id, 1000);
        char key [17];
        dsh_proto_token_hex (record->token, key);
        assert_int_equal (zhashx_insert (seen, key, (void *) 1), 0);
        if (record->token == previous + 1)
            sequential++;
        previous = record->token;
    }
    //  A component that sees one token cannot guess the next
    assert_true (sequential < 5);
    assert_int_equal (dsh_inflight_size (inflight), 5000);
    zhashx_destroy (&seen);
    //  Destroying the table with records in it frees them, answering none
    dsh_inflight_destroy (&inflight);
    assert_int_equal (replies.answers, 0);
}

static void
test_find_caller_newest_wins (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_record_t *first = s_open (inflight, "peer-A", "same", 1000);
    dsh_record_t *other_peer = s_open (inflight, "peer-B", "same", 1000);
    zmq_msg_t route [1];
    s_route (route, "peer-A", NULL);
    assert_ptr_equal (dsh_inflight_find_caller (inflight, route, 1, "same"), first);
    //  The probe gives the route back unchanged
    assert_int_equal (zmq_msg_size (&route [0]), 6);
    assert_null (dsh_inflight_find_caller (inflight, route, 1, "other"));

    //  The same caller reuses a callId still in flight: CANCEL finds the
    //  newest, and the older one is still answerable by token
    dsh_record_t *second = s_open (inflight, "peer-A", "same", 1000);
    assert_ptr_equal (dsh_inflight_find_caller (inflight, route, 1, "same"), second);
    dsh_inflight_answer_error (inflight, &second, "CANCELLED", "Error: cancelled");
    assert_null (dsh_inflight_find_caller (inflight, route, 1, "same"));
    assert_ptr_equal (dsh_inflight_lookup (inflight, first->token), first);
    dsh_inflight_drop (inflight, &first);
    assert_null (first);
    assert_int_equal (replies.answers, 1);

    zmq_msg_t route_b [1];
    s_route (route_b, "peer-B", NULL);
    assert_ptr_equal (dsh_inflight_find_caller (inflight, route_b, 1, "same"), other_peer);
    zmq_msg_close (&route [0]);
    zmq_msg_close (&route_b [0]);
    dsh_inflight_destroy (&inflight);
}

static void
test_due_and_at_component (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_record_t *late = s_open (inflight, "p", "late", 100);
    dsh_record_t *held = s_open (inflight, "p", "held", 10000);
    dsh_record_t *fine = s_open (inflight, "p", "fine", 10000);
    held->where = DSH_AT_CHAIN;
    held->hold_until_ms = 150;
    fine->where = DSH_AT_COMPONENT;
    snprintf (fine->component, sizeof (fine->component), "fs-1");
    late->where = DSH_AT_COMPONENT;
    snprintf (late->component, sizeof (late->component), "fs-2");

    zlistx_t *due = dsh_inflight_due (inflight, 99);
    assert_int_equal (zlistx_size (due), 0);
    zlistx_destroy (&due);
    due = dsh_inflight_due (inflight, 200);
    assert_int_equal (zlistx_size (due), 2);
    for (dsh_record_t *record = zlistx_first (due); record; record = zlistx_next (due))
        assert_true (record == late || record == held);
    zlistx_destroy (&due);

    zlistx_t *at = dsh_inflight_at_component (inflight, "fs-1");
    assert_int_equal (zlistx_size (at), 1);
    assert_ptr_equal (zlistx_first (at), fine);
    zlistx_destroy (&at);
    at = dsh_inflight_at_component (inflight, "nobody");
    assert_int_equal (zlistx_size (at), 0);
    zlistx_destroy (&at);
    dsh_inflight_destroy (&inflight);
}

static void
test_token_frames (void **state)
{
    (void) state;
    zframe_t *frame = dsh_inflight_token_frame (0x0102030405060708ULL);
    assert_int_equal (zframe_size (frame), 8);
    assert_int_equal (zframe_data (frame) [0], 1);
    uint64_t token = 0;
    assert_int_equal (dsh_inflight_token_decode (zframe_data (frame), 8, &token), 0);
    assert_true (token == 0x0102030405060708ULL);
    assert_int_equal (dsh_inflight_token_decode (zframe_data (frame), 7, &token), -1);
    assert_int_equal (dsh_inflight_token_decode (NULL, 8, &token), -1);
    zframe_destroy (&frame);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_open_lookup_answer_once),
        cmocka_unit_test (test_tokens_are_random_and_unique),
        cmocka_unit_test (test_find_caller_newest_wins),
        cmocka_unit_test (test_due_and_at_component),
        cmocka_unit_test (test_token_frames),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
