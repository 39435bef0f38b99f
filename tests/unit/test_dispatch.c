/*  =========================================================================
    test_dispatch - dsh_dispatch: calls in flight are taken exactly once, by
    token, by component or by deadline; token frames
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_dispatch.h"

//  An envelope of one routing frame.
static zmsg_t *
s_envelope (const char *peer)
{
    zmsg_t *envelope = zmsg_new ();
    zmsg_addstr (envelope, peer);
    return envelope;
}

static uint64_t
s_add (dsh_dispatch_t *dispatch, const char *call_id, const char *component, int64_t deadline_ms)
{
    zmsg_t *envelope = s_envelope (call_id);
    uint64_t token = dsh_dispatch_add (dispatch, &envelope, 0, call_id, "tool", component, deadline_ms);
    assert_null (envelope);
    return token;
}

static bool
s_has_call (zlistx_t *taken, const char *call_id)
{
    for (dsh_pending_t *entry = zlistx_first (taken); entry; entry = zlistx_next (taken))
        if (streq (entry->call_id, call_id))
            return true;
    return false;
}

static void
test_add_take_once (void **state)
{
    (void) state;
    dsh_dispatch_t *dispatch = dsh_dispatch_new ();
    assert_int_equal (dsh_dispatch_size (dispatch), 0);
    zmsg_t *envelope = s_envelope ("client-1");
    uint64_t token = dsh_dispatch_add (dispatch, &envelope, 0, "call-1", "fs.read", "fs-1", 5000);
    assert_null (envelope);
    uint64_t other = s_add (dispatch, "call-2", "fs-1", 6000);
    assert_true (token != other);
    assert_int_equal (dsh_dispatch_size (dispatch), 2);

    dsh_pending_t *entry = dsh_dispatch_take (dispatch, token);
    assert_non_null (entry);
    assert_true (entry->token == token);
    assert_string_equal (entry->call_id, "call-1");
    assert_string_equal (entry->tool, "fs.read");
    assert_string_equal (entry->component, "fs-1");
    assert_int_equal (entry->deadline_ms, 5000);
    assert_non_null (entry->envelope);
    assert_int_equal (zmsg_size (entry->envelope), 1);
    assert_true (zframe_streq (zmsg_first (entry->envelope), "client-1"));
    assert_int_equal (dsh_dispatch_size (dispatch), 1);

    //  Exactly once
    assert_null (dsh_dispatch_take (dispatch, token));
    assert_int_equal (dsh_dispatch_size (dispatch), 1);
    dsh_pending_destroy (&entry);
    assert_null (entry);
    dsh_pending_destroy (&entry);

    //  Tokens never sent
    assert_null (dsh_dispatch_take (dispatch, 0));
    assert_null (dsh_dispatch_take (dispatch, other + 1000));
    assert_null (dsh_dispatch_take (dispatch, UINT64_MAX));
    assert_int_equal (dsh_dispatch_size (dispatch), 1);

    entry = dsh_dispatch_take (dispatch, other);
    assert_non_null (entry);
    assert_string_equal (entry->call_id, "call-2");
    dsh_pending_destroy (&entry);
    assert_int_equal (dsh_dispatch_size (dispatch), 0);
    dsh_dispatch_destroy (&dispatch);
    assert_null (dispatch);
    dsh_dispatch_destroy (&dispatch);
}

static void
test_tokens_unique (void **state)
{
    (void) state;
    dsh_dispatch_t *dispatch = dsh_dispatch_new ();
    zhashx_t *seen = zhashx_new ();
    for (int index = 0; index < 200; index++) {
        uint64_t token = s_add (dispatch, "c", "x", 0);
        char key [17];
        snprintf (key, sizeof key, "%016" PRIx64, token);
        assert_int_equal (zhashx_insert (seen, key, (void *) 1), 0);
    }
    assert_int_equal (dsh_dispatch_size (dispatch), 200);
    zhashx_destroy (&seen);
    dsh_dispatch_destroy (&dispatch);
}

static void
test_take_component (void **state)
{
    (void) state;
    dsh_dispatch_t *dispatch = dsh_dispatch_new ();
    uint64_t a1 = s_add (dispatch, "a1", "alpha", 1000);
    s_add (dispatch, "b1", "beta", 1000);
    uint64_t a2 = s_add (dispatch, "a2", "alpha", 2000);
    s_add (dispatch, "b2", "beta", 2000);
    s_add (dispatch, "g1", "alphabet", 2000);        //  a longer id is another component

    zlistx_t *taken = dsh_dispatch_take_component (dispatch, "alpha");
    assert_non_null (taken);
    assert_int_equal (zlistx_size (taken), 2);
    assert_true (s_has_call (taken, "a1"));
    assert_true (s_has_call (taken, "a2"));
    for (dsh_pending_t *entry = zlistx_first (taken); entry; entry = zlistx_next (taken))
        assert_string_equal (entry->component, "alpha");
    zlistx_destroy (&taken);               //  the list destroys its entries
    assert_int_equal (dsh_dispatch_size (dispatch), 3);
    //  Taken means gone
    assert_null (dsh_dispatch_take (dispatch, a1));
    assert_null (dsh_dispatch_take (dispatch, a2));

    taken = dsh_dispatch_take_component (dispatch, "alpha");
    assert_int_equal (zlistx_size (taken), 0);
    zlistx_destroy (&taken);
    taken = dsh_dispatch_take_component (dispatch, "nobody");
    assert_int_equal (zlistx_size (taken), 0);
    zlistx_destroy (&taken);
    assert_int_equal (dsh_dispatch_size (dispatch), 3);
    dsh_dispatch_destroy (&dispatch);
}

static void
test_take_expired (void **state)
{
    (void) state;
    dsh_dispatch_t *dispatch = dsh_dispatch_new ();
    s_add (dispatch, "early", "x", 1000);
    s_add (dispatch, "edge", "y", 2000);
    uint64_t late = s_add (dispatch, "late", "x", 3000);

    zlistx_t *taken = dsh_dispatch_take_expired (dispatch, 999);
    assert_int_equal (zlistx_size (taken), 0);
    zlistx_destroy (&taken);

    //  At the deadline counts as expired
    taken = dsh_dispatch_take_expired (dispatch, 2000);
    assert_int_equal (zlistx_size (taken), 2);
    assert_true (s_has_call (taken, "early"));
    assert_true (s_has_call (taken, "edge"));
    zlistx_destroy (&taken);
    assert_int_equal (dsh_dispatch_size (dispatch), 1);

    //  Once only
    taken = dsh_dispatch_take_expired (dispatch, 2500);
    assert_int_equal (zlistx_size (taken), 0);
    zlistx_destroy (&taken);

    dsh_pending_t *entry = dsh_dispatch_take (dispatch, late);
    assert_non_null (entry);
    dsh_pending_destroy (&entry);
    taken = dsh_dispatch_take_expired (dispatch, 10000);
    assert_int_equal (zlistx_size (taken), 0);
    zlistx_destroy (&taken);
    dsh_dispatch_destroy (&dispatch);
}

static void
test_token_frames (void **state)
{
    (void) state;
    const uint64_t tokens [] = { 0, 1, 0x0102030405060708ULL, 0xFF00000000000000ULL, UINT64_MAX };
    for (size_t index = 0; index < sizeof tokens / sizeof tokens [0]; index++) {
        zframe_t *frame = dsh_dispatch_token_frame (tokens [index]);
        assert_int_equal (zframe_size (frame), 8);
        uint64_t token = 12345;
        assert_int_equal (dsh_dispatch_token_decode (frame, &token), 0);
        assert_true (token == tokens [index]);
        zframe_destroy (&frame);
    }
    //  Network byte order
    zframe_t *frame = dsh_dispatch_token_frame (0x0102030405060708ULL);
    assert_memory_equal (zframe_data (frame), "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    zframe_destroy (&frame);

    //  Anything not 8 bytes is not a token
    uint64_t token = 42;
    const size_t sizes [] = { 0, 1, 7, 9, 16 };
    for (size_t index = 0; index < sizeof sizes / sizeof sizes [0]; index++) {
        frame = zframe_new ("0123456789abcdef", sizes [index]);
        assert_int_equal (dsh_dispatch_token_decode (frame, &token), -1);
        zframe_destroy (&frame);
    }
    assert_int_equal (dsh_dispatch_token_decode (NULL, &token), -1);
    assert_int_equal (token, 42);

    //  A real token goes round the table through its frame
    dsh_dispatch_t *dispatch = dsh_dispatch_new ();
    uint64_t sent = s_add (dispatch, "c", "x", 0);
    frame = dsh_dispatch_token_frame (sent);
    assert_int_equal (dsh_dispatch_token_decode (frame, &token), 0);
    zframe_destroy (&frame);
    dsh_pending_t *entry = dsh_dispatch_take (dispatch, token);
    assert_non_null (entry);
    assert_string_equal (entry->call_id, "c");
    dsh_pending_destroy (&entry);
    dsh_dispatch_destroy (&dispatch);
}

static void
test_destroy_with_entries (void **state)
{
    (void) state;
    //  Everything still in flight is freed with the table (valgrind checks)
    dsh_dispatch_t *dispatch = dsh_dispatch_new ();
    for (int index = 0; index < 50; index++) {
        char call_id [16];
        snprintf (call_id, sizeof call_id, "call-%d", index);
        s_add (dispatch, call_id, index % 2? "odd": "even", index);
    }
    zmsg_t *envelope = zmsg_new ();            //  an empty envelope is fine too
    dsh_dispatch_add (dispatch, &envelope, 0, "empty", "t", "c", 0);
    assert_int_equal (dsh_dispatch_size (dispatch), 51);
    dsh_dispatch_destroy (&dispatch);
    assert_null (dispatch);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_add_take_once),
        cmocka_unit_test (test_tokens_unique),
        cmocka_unit_test (test_take_component),
        cmocka_unit_test (test_take_expired),
        cmocka_unit_test (test_token_frames),
        cmocka_unit_test (test_destroy_with_entries),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
