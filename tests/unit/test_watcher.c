/*  =========================================================================
    test_watcher - the watcher actor against a fake broker on loopback

    The fake broker (fake_broker.h) answers HELLO with a WELCOME that names
    its PUB as the events endpoint, answers SNAPSHOT with the tools it is
    told of, and publishes the events the test asks for. So the watcher is
    checked through its public API alone, against PROTOCOL.md's Clone
    procedure: a snapshot notice first, then every event in order; a gap
    in the events' seq answered by a new snapshot, with the event that
    showed the gap (already in the snapshot) not delivered; an event at or
    below the view's seq dropped; a new epoch answered by a new snapshot.

    Every wait has a timeout, so a broken watcher fails instead of hanging.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_watcher.h"
#include "fake_broker.h"

//  The next notice, within FAKE_WAIT_MS.
static json_t *
s_next (dsh_watcher_t *watcher)
{
    json_t *notice = dsh_watcher_recv (watcher, FAKE_WAIT_MS);
    assert_non_null (notice);
    return notice;
}

//  Asserts the watcher's view holds exactly names ("a,b", in order).
static void
s_assert_tools (dsh_watcher_t *watcher, const char *names)
{
    json_t *tools = dsh_watcher_tools (watcher);
    char *joined = strdup ("");
    size_t index;
    json_t *name;
    json_array_foreach (tools, index, name) {
        char *longer = zsys_sprintf ("%s%s%s", joined, index? ",": "", json_string_value (name));
        zstr_free (&joined);
        joined = longer;
    }
    assert_string_equal (joined, names);
    zstr_free (&joined);
    json_decref (tools);
}

//  Asserts notice is a snapshot at seq with count tools, from broker.
static void
s_assert_snapshot (json_t *notice, uint64_t seq, size_t count, const char *broker)
{
    assert_string_equal (json_string_value (json_object_get (notice, "kind")), "snapshot");
    assert_int_equal (json_integer_value (json_object_get (notice, "seq")), seq);
    assert_int_equal (json_array_size (json_object_get (notice, "tools")), count);
    assert_string_equal (json_string_value (json_object_get (notice, "broker")), broker);
}

//  Asserts notice is the event kind of name at seq.
static void
s_assert_event (json_t *notice, const char *kind, const char *name, uint64_t seq)
{
    assert_string_equal (json_string_value (json_object_get (notice, "kind")), kind);
    assert_string_equal (json_string_value (json_object_get (notice, "name")), name);
    assert_int_equal (json_integer_value (json_object_get (notice, "seq")), seq);
}

static void
test_snapshot_then_events (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    fake_broker_tell (broker, "TOOLS", "2", "alpha,beta", NULL);
    dsh_watcher_t *watcher = dsh_watcher_new (broker->front);
    assert_non_null (watcher);

    json_t *notice = s_next (watcher);
    s_assert_snapshot (notice, 2, 2, broker->front);
    json_decref (notice);
    assert_int_equal (dsh_watcher_seq (watcher), 2);
    assert_int_equal (dsh_watcher_syncs (watcher), 1);
    s_assert_tools (watcher, "alpha,beta");

    //  The snapshot came after the SUB was subscribed: every event after
    //  it comes through, in order
    fake_broker_tell (broker, "EVENT", "tool.registered", "gamma", "3");
    fake_broker_tell (broker, "EVENT", "tool.unregistered", "alpha", "4");
    notice = s_next (watcher);
    s_assert_event (notice, "tool.registered", "gamma", 3);
    assert_string_equal (json_string_value (json_object_get (json_object_get (notice, "tool"), "name")), "gamma");
    json_decref (notice);
    notice = s_next (watcher);
    s_assert_event (notice, "tool.unregistered", "alpha", 4);
    json_decref (notice);
    assert_int_equal (dsh_watcher_seq (watcher), 4);
    s_assert_tools (watcher, "beta,gamma");

    //  A kind the watcher does not know still counts its seq
    fake_broker_tell (broker, "EVENT", "tool.forgotten", "beta", "5");
    notice = s_next (watcher);
    s_assert_event (notice, "tool.forgotten", "beta", 5);
    json_decref (notice);
    assert_int_equal (dsh_watcher_seq (watcher), 5);
    assert_int_equal (dsh_watcher_syncs (watcher), 1);
    assert_int_equal (fake_broker_count (broker, "SNAPSHOT"), 1);

    dsh_watcher_destroy (&watcher);
    dsh_watcher_destroy (&watcher);
    fake_broker_destroy (&broker);
}

static void
test_gap_resyncs (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    fake_broker_tell (broker, "TOOLS", "1", "alpha", NULL);
    dsh_watcher_t *watcher = dsh_watcher_new (broker->front);
    json_t *notice = s_next (watcher);
    s_assert_snapshot (notice, 1, 1, broker->front);
    json_decref (notice);

    //  Events 2 and 3 were lost (a PUB drops for a slow subscriber): 4
    //  shows the gap, and the watcher takes a new snapshot, which has them
    fake_broker_tell (broker, "TOOLS", "4", "alpha,beta,gamma,delta", NULL);
    fake_broker_tell (broker, "EVENT", "tool.registered", "delta", "4");
    notice = s_next (watcher);
    s_assert_snapshot (notice, 4, 4, broker->front);
    json_decref (notice);
    assert_int_equal (dsh_watcher_syncs (watcher), 2);
    assert_int_equal (dsh_watcher_seq (watcher), 4);
    s_assert_tools (watcher, "alpha,beta,gamma,delta");
    assert_int_equal (fake_broker_count (broker, "SNAPSHOT"), 2);

    //  An event the view already has is dropped; the next one comes
    fake_broker_tell (broker, "EVENT", "tool.registered", "delta", "4");
    fake_broker_tell (broker, "EVENT", "tool.unregistered", "beta", "5");
    notice = s_next (watcher);
    s_assert_event (notice, "tool.unregistered", "beta", 5);
    json_decref (notice);
    s_assert_tools (watcher, "alpha,gamma,delta");
    assert_int_equal (dsh_watcher_syncs (watcher), 2);

    dsh_watcher_destroy (&watcher);
    fake_broker_destroy (&broker);
}

static void
test_new_epoch_resyncs (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    fake_broker_tell (broker, "TOOLS", "7", "alpha", NULL);
    dsh_watcher_t *watcher = dsh_watcher_new (broker->front);
    json_t *notice = s_next (watcher);
    s_assert_snapshot (notice, 7, 1, broker->front);
    json_decref (notice);

    //  An event of another epoch: the broker's state is not the view's,
    //  whatever the seq says
    fake_broker_tell (broker, "EPOCH", "2000", NULL, NULL);
    fake_broker_tell (broker, "TOOLS", "1", "omega", NULL);
    fake_broker_tell (broker, "EVENT", "tool.registered", "omega", "1");
    notice = s_next (watcher);
    s_assert_snapshot (notice, 1, 1, broker->front);
    assert_int_equal (json_integer_value (json_object_get (notice, "epoch")), 2000);
    json_decref (notice);
    assert_int_equal (dsh_watcher_syncs (watcher), 2);
    s_assert_tools (watcher, "omega");

    dsh_watcher_destroy (&watcher);
    fake_broker_destroy (&broker);
}

int
main (void)
{
    zsys_init ();
    zsys_set_logstream (stderr);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_snapshot_then_events),
        cmocka_unit_test (test_gap_resyncs),
        cmocka_unit_test (test_new_epoch_resyncs),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
