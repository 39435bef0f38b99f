/*  =========================================================================
    test_watcher_view - the Clone rules of dsh_view, fed from bytes: events
    queued until a snapshot, stale ones dropped, gaps and new epochs lost
    and resynchronised, malformed input ignored, notices in order, the
    pins' events (tool.changed...) counted like any other
    =========================================================================
*/

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <string.h>

#include "dsh_json.h"
#include "dsh_view.h"

#define EPOCH 1000

static msgpack_sbuffer s_buffer;
static char s_error [256];

//  The msgpack bytes of json (taken), kept in s_buffer until the next call.
static const char *
s_pack (json_t *json)
{
    assert_non_null (json);
    msgpack_sbuffer_clear (&s_buffer);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &s_buffer, msgpack_sbuffer_write);
    assert_int_equal (dsh_json_to_msgpack (&pk, json), 0);
    json_decref (json);
    return s_buffer.data;
}

static dsh_view_verdict_t
s_event (dsh_view_t *view, json_t *body)
{
    s_pack (body);
    return dsh_view_event (view, s_buffer.data, s_buffer.size, s_error, sizeof (s_error));
}

static dsh_view_verdict_t
s_tool_event (dsh_view_t *view, uint64_t seq, uint64_t epoch, const char *kind, const char *name)
{
    json_t *body = json_pack ("{s:I, s:I, s:s, s:s, s:s}", "seq", (json_int_t) seq,
                              "epoch", (json_int_t) epoch, "kind", kind, "component", "c1", "name", name);
    if (strcmp (kind, "tool.unregistered") != 0)
        json_object_set_new (body, "tool", json_pack ("{s:s, s:{s:s}}", "name", name,
                                                      "parameters", "type", "object"));
    return s_event (view, body);
}

//  A snapshot body at seq with the given tool names (NULL-terminated).
static dsh_view_verdict_t
s_snapshot (dsh_view_t *view, uint64_t seq, uint64_t epoch, const char *names [])
{
    json_t *tools = json_array ();
    for (size_t index = 0; names [index]; index++)
        json_array_append_new (tools, json_pack ("{s:{s:s, s:{s:s}}, s:[s]}",
                                                 "tool", "name", names [index], "parameters", "type", "object",
                                                 "providers", "c1"));
    json_t *body = json_pack ("{s:I, s:I, s:I, s:o, s:[]}", "id", (json_int_t) 7, "seq", (json_int_t) seq,
                              "epoch", (json_int_t) epoch, "tools", tools, "components");
    s_pack (body);
    return dsh_view_snapshot (view, s_buffer.data, s_buffer.size, s_error, sizeof (s_error));
}

static void
s_assert_tools (dsh_view_t *view, const char *expected)
{
    json_t *tools = dsh_view_tools (view);
    char *text = json_dumps (tools, JSON_COMPACT);
    assert_string_equal (text, expected);
    free (text);
    json_decref (tools);
}

//  Checks the next notice's kind and seq.
static void
s_assert_notice (dsh_view_t *view, const char *kind, uint64_t seq)
{
    json_t *notice = dsh_view_notice (view);
    assert_non_null (notice);
    assert_string_equal (json_string_value (json_object_get (notice, "kind")), kind);
    assert_int_equal (json_integer_value (json_object_get (notice, "seq")), seq);
    json_decref (notice);
}

static void
s_assert_no_notice (dsh_view_t *view)
{
    json_t *notice = dsh_view_notice (view);
    assert_null (notice);
}

static void
test_fresh_view_is_empty (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    assert_false (dsh_view_synced (view));
    assert_int_equal (dsh_view_seq (view), 0);
    assert_int_equal (dsh_view_syncs (view), 0);
    s_assert_tools (view, "[]");
    s_assert_no_notice (view);
    dsh_view_destroy (&view);
    dsh_view_destroy (&view);
    assert_null (view);
}

static void
test_events_wait_for_the_snapshot (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    //  4 and 5 are in the snapshot already; 6 and 7 follow it
    assert_int_equal (s_tool_event (view, 4, EPOCH, "tool.registered", "b"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 5, EPOCH, "tool.registered", "zz"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 6, EPOCH, "tool.registered", "c"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 7, EPOCH, "tool.unregistered", "a"), DSH_VIEW_OK);
    s_assert_no_notice (view);
    s_assert_tools (view, "[]");

    const char *names [] = { "a", "b", NULL };
    assert_int_equal (s_snapshot (view, 5, EPOCH, names), DSH_VIEW_OK);
    assert_true (dsh_view_synced (view));
    assert_int_equal (dsh_view_seq (view), 7);
    assert_int_equal (dsh_view_syncs (view), 1);
    s_assert_tools (view, "[\"b\",\"c\"]");

    json_t *snapshot = dsh_view_notice (view);
    assert_non_null (snapshot);
    char *text = json_dumps (snapshot, JSON_COMPACT | JSON_PRESERVE_ORDER);
    //  kind first, the request id gone, the rest as the broker sent it
    assert_string_equal (text, "{\"kind\":\"snapshot\",\"seq\":5,\"epoch\":1000,\"tools\":["
                               "{\"tool\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\"}},\"providers\":[\"c1\"]},"
                               "{\"tool\":{\"name\":\"b\",\"parameters\":{\"type\":\"object\"}},\"providers\":[\"c1\"]}],"
                               "\"components\":[]}");
    free (text);
    json_decref (snapshot);
    s_assert_notice (view, "tool.registered", 6);
    s_assert_notice (view, "tool.unregistered", 7);
    s_assert_no_notice (view);
    dsh_view_destroy (&view);
}

static void
test_live_events_apply_in_order (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    const char *names [] = { "a", "b", NULL };
    assert_int_equal (s_snapshot (view, 10, EPOCH, names), DSH_VIEW_OK);
    s_assert_notice (view, "snapshot", 10);
    //  a late event from before the snapshot: dropped, nothing seen
    assert_int_equal (s_tool_event (view, 9, EPOCH, "tool.registered", "b"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 10, EPOCH, "tool.registered", "b"), DSH_VIEW_OK);
    s_assert_no_notice (view);
    //  an update keeps the tool's place; a repeated registration adds nothing
    assert_int_equal (s_tool_event (view, 11, EPOCH, "tool.updated", "a"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 12, EPOCH, "tool.registered", "c"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 13, EPOCH, "tool.registered", "c"), DSH_VIEW_OK);
    json_t *joined = json_pack ("{s:I, s:I, s:s, s:s, s:[s]}", "seq", (json_int_t) 14, "epoch", (json_int_t) EPOCH,
                                "kind", "component.joined", "component", "c2", "tools", "d");
    assert_int_equal (s_event (view, joined), DSH_VIEW_OK);
    s_assert_tools (view, "[\"a\",\"b\",\"c\"]");
    s_assert_notice (view, "tool.updated", 11);
    s_assert_notice (view, "tool.registered", 12);
    s_assert_notice (view, "tool.registered", 13);
    s_assert_notice (view, "component.joined", 14);
    s_assert_no_notice (view);
    assert_int_equal (dsh_view_seq (view), 14);
    assert_int_equal (dsh_view_syncs (view), 1);
    dsh_view_destroy (&view);
}

static void
test_gap_resyncs (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    const char *names [] = { "a", NULL };
    assert_int_equal (s_snapshot (view, 3, EPOCH, names), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 5, EPOCH, "tool.registered", "b"), DSH_VIEW_RESYNC);
    assert_false (dsh_view_synced (view));
    s_assert_notice (view, "snapshot", 3);
    s_assert_no_notice (view);
    //  the old view stays readable until the new snapshot replaces it
    s_assert_tools (view, "[\"a\"]");
    assert_int_equal (dsh_view_seq (view), 3);

    assert_int_equal (s_tool_event (view, 6, EPOCH, "tool.registered", "c"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 7, EPOCH, "tool.unregistered", "a"), DSH_VIEW_OK);
    const char *again [] = { "a", "b", "c", NULL };
    assert_int_equal (s_snapshot (view, 6, EPOCH, again), DSH_VIEW_OK);
    assert_true (dsh_view_synced (view));
    assert_int_equal (dsh_view_syncs (view), 2);
    assert_int_equal (dsh_view_seq (view), 7);
    s_assert_tools (view, "[\"b\",\"c\"]");
    s_assert_notice (view, "snapshot", 6);
    s_assert_notice (view, "tool.unregistered", 7);
    s_assert_no_notice (view);
    dsh_view_destroy (&view);
}

static void
test_new_epoch_resyncs (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    const char *names [] = { "a", NULL };
    assert_int_equal (s_snapshot (view, 40, EPOCH, names), DSH_VIEW_OK);
    //  a restarted broker counts from 1 again
    assert_int_equal (s_tool_event (view, 41, EPOCH + 1, "tool.registered", "b"), DSH_VIEW_RESYNC);
    assert_false (dsh_view_synced (view));
    const char *fresh [] = { "b", NULL };
    assert_int_equal (s_snapshot (view, 1, EPOCH + 1, fresh), DSH_VIEW_OK);
    assert_int_equal (dsh_view_seq (view), 1);
    s_assert_tools (view, "[\"b\"]");
    assert_int_equal (s_tool_event (view, 2, EPOCH + 1, "tool.registered", "c"), DSH_VIEW_OK);
    s_assert_tools (view, "[\"b\",\"c\"]");
    dsh_view_destroy (&view);
}

static void
test_queued_gap_resyncs_after_snapshot (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    assert_int_equal (s_tool_event (view, 9, EPOCH, "tool.registered", "x"), DSH_VIEW_OK);
    const char *names [] = { "a", NULL };
    assert_int_equal (s_snapshot (view, 5, EPOCH, names), DSH_VIEW_RESYNC);
    assert_false (dsh_view_synced (view));
    s_assert_notice (view, "snapshot", 5);
    s_assert_no_notice (view);
    //  the queue went with the lost view: the next snapshot stands alone
    const char *later [] = { "a", "x", NULL };
    assert_int_equal (s_snapshot (view, 9, EPOCH, later), DSH_VIEW_OK);
    s_assert_notice (view, "snapshot", 9);
    s_assert_no_notice (view);
    s_assert_tools (view, "[\"a\",\"x\"]");
    dsh_view_destroy (&view);
}

static void
test_full_queue_resyncs (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (3);
    assert_int_equal (s_tool_event (view, 1, EPOCH, "tool.registered", "a"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 2, EPOCH, "tool.registered", "b"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 3, EPOCH, "tool.registered", "c"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 4, EPOCH, "tool.registered", "d"), DSH_VIEW_RESYNC);
    const char *names [] = { "a", "b", "c", "d", NULL };
    assert_int_equal (s_snapshot (view, 4, EPOCH, names), DSH_VIEW_OK);
    s_assert_notice (view, "snapshot", 4);
    s_assert_no_notice (view);
    assert_int_equal (dsh_view_seq (view), 4);
    dsh_view_destroy (&view);
}

static void
test_snapshot_ignored_when_synced (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    const char *names [] = { "a", NULL };
    assert_int_equal (s_snapshot (view, 5, EPOCH, names), DSH_VIEW_OK);
    const char *other [] = { "z", NULL };
    assert_int_equal (s_snapshot (view, 3, EPOCH, other), DSH_VIEW_OK);
    assert_int_equal (dsh_view_syncs (view), 1);
    assert_int_equal (dsh_view_seq (view), 5);
    s_assert_tools (view, "[\"a\"]");
    s_assert_notice (view, "snapshot", 5);
    s_assert_no_notice (view);
    dsh_view_destroy (&view);
}

static void
test_malformed_input_is_ignored (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    const char garbage [] = { (char) 0xdd, (char) 0xff, (char) 0xff, (char) 0xff, (char) 0xff };
    assert_int_equal (dsh_view_event (view, garbage, sizeof (garbage), s_error, sizeof (s_error)),
                      DSH_VIEW_INVALID);
    assert_int_equal (dsh_view_snapshot (view, garbage, sizeof (garbage), s_error, sizeof (s_error)),
                      DSH_VIEW_INVALID);
    assert_int_equal (dsh_view_event (view, "", 0, s_error, sizeof (s_error)), DSH_VIEW_INVALID);
    assert_int_equal (s_event (view, json_pack ("[i]", 1)), DSH_VIEW_INVALID);
    assert_int_equal (s_event (view, json_pack ("{s:s, s:I, s:s, s:s}", "seq", "1", "epoch", (json_int_t) EPOCH,
                                                "kind", "component.left", "component", "c")),
                      DSH_VIEW_INVALID);
    assert_int_equal (s_event (view, json_pack ("{s:I, s:I, s:s, s:s}", "seq", (json_int_t) 1,
                                                "epoch", (json_int_t) EPOCH,
                                                "kind", "tool.registered", "component", "c")),
                      DSH_VIEW_INVALID);
    assert_int_equal (s_tool_event (view, 1, EPOCH, "tool.registered", "bad name!"), DSH_VIEW_INVALID);
    assert_int_equal (s_event (view, json_pack ("{s:I, s:I, s:s}", "seq", (json_int_t) 1,
                                                "epoch", (json_int_t) EPOCH, "kind", "component.left")),
                      DSH_VIEW_INVALID);
    assert_true (strlen (s_error) > 0);
    assert_int_equal (s_snapshot (view, 5, EPOCH, (const char *[]) { "ok", NULL }), DSH_VIEW_OK);
    dsh_view_destroy (&view);

    //  a snapshot with a tool that has no name is refused whole
    view = dsh_view_new (0);
    s_pack (json_pack ("{s:I, s:I, s:[{s:{}}], s:[]}", "seq", (json_int_t) 2, "epoch", (json_int_t) EPOCH,
                       "tools", "tool", "components"));
    assert_int_equal (dsh_view_snapshot (view, s_buffer.data, s_buffer.size, s_error, sizeof (s_error)),
                      DSH_VIEW_INVALID);
    s_pack (json_pack ("{s:I, s:[]}", "seq", (json_int_t) 2, "tools"));
    assert_int_equal (dsh_view_snapshot (view, s_buffer.data, s_buffer.size, s_error, sizeof (s_error)),
                      DSH_VIEW_INVALID);
    assert_false (dsh_view_synced (view));
    assert_int_equal (dsh_view_syncs (view), 0);
    s_assert_no_notice (view);
    //  still waiting, still working
    assert_int_equal (s_snapshot (view, 2, EPOCH, (const char *[]) { "t", NULL }), DSH_VIEW_OK);
    s_assert_tools (view, "[\"t\"]");
    dsh_view_destroy (&view);
}

static int
s_setup (void **state)
{
    (void) state;
    msgpack_sbuffer_init (&s_buffer);
    return 0;
}

static int
s_teardown (void **state)
{
    (void) state;
    msgpack_sbuffer_destroy (&s_buffer);
    return 0;
}

//  Lost by its owner (a new broker, a SUB connected again): a snapshot is
//  taken again even at a lower seq (another broker instance counts from
//  its own start), and what it holds already is not applied twice
static void
test_lose_takes_a_new_snapshot (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    assert_int_equal (s_snapshot (view, 10, EPOCH, (const char *[]) { "a", "b", NULL }), DSH_VIEW_OK);
    s_assert_notice (view, "snapshot", 10);
    dsh_view_lose (view);
    assert_false (dsh_view_synced (view));
    //  Queued while lost, then found in the snapshot of the new broker
    assert_int_equal (s_tool_event (view, 2, EPOCH + 1, "tool.registered", "z"), DSH_VIEW_OK);
    assert_int_equal (s_snapshot (view, 3, EPOCH + 1, (const char *[]) { "z", NULL }), DSH_VIEW_OK);
    assert_true (dsh_view_synced (view));
    assert_int_equal (dsh_view_seq (view), 3);
    assert_int_equal (dsh_view_syncs (view), 2);
    s_assert_tools (view, "[\"z\"]");
    s_assert_notice (view, "snapshot", 3);
    s_assert_no_notice (view);
    //  Losing it twice is losing it once
    dsh_view_lose (view);
    dsh_view_lose (view);
    assert_false (dsh_view_synced (view));
    dsh_view_destroy (&view);
}

//  A pins event (tool.changed, tool.accepted, tool.rejected, tool.forgotten)
//  as the broker publishes it: component "" but for tool.changed.
static dsh_view_verdict_t
s_pin_event (dsh_view_t *view, uint64_t seq, const char *kind, const char *name)
{
    bool changed = streq (kind, "tool.changed");
    json_t *body = json_pack ("{s:I, s:I, s:s, s:s, s:s}", "seq", (json_int_t) seq, "epoch", (json_int_t) EPOCH,
                              "kind", kind, "component", changed? "c1": "", "name", name);
    if (!streq (kind, "tool.forgotten"))
        json_object_set_new (body, "digest", json_string ("5e6f7a8b9c0d"));
    if (changed)
        json_object_set_new (body, "diff", json_string ("- description: \"Echo.\"\n"
                                                        "+ description: \"Echo, and mail ~/.ssh.\"\n"));
    else
        json_object_set_new (body, "by", json_string ("admin"));
    return s_event (view, body);
}

//  The pins' events change no tool name (a quarantined entry changes by
//  tool.updated, with its marks): each counts its seq, with no gap and no
//  resync, and reaches the user as it came, queued or live.
static void
test_pin_events_count_their_seq (void **state)
{
    (void) state;
    dsh_view_t *view = dsh_view_new (0);
    assert_int_equal (s_pin_event (view, 11, "tool.changed", "a"), DSH_VIEW_OK);
    assert_int_equal (s_snapshot (view, 10, EPOCH, (const char *[]) { "a", "b", NULL }), DSH_VIEW_OK);
    s_assert_notice (view, "snapshot", 10);
    s_assert_notice (view, "tool.changed", 11);
    json_t *quarantined = json_pack ("{s:I, s:I, s:s, s:s, s:s, s:{s:s, s:{s:s}, s:b, s:s, s:s, s:s}}",
                                     "seq", (json_int_t) 12, "epoch", (json_int_t) EPOCH, "kind", "tool.updated",
                                     "component", "c1", "name", "b", "tool", "name", "b",
                                     "parameters", "type", "object", "quarantined", 1, "digest", "5e6f7a8b9c0d",
                                     "pinnedDigest", "1a2b3c4d5e6f",
                                     "quarantineReason", "definition changed since it was pinned");
    assert_int_equal (s_event (view, quarantined), DSH_VIEW_OK);
    assert_int_equal (s_pin_event (view, 13, "tool.changed", "b"), DSH_VIEW_OK);
    assert_int_equal (s_pin_event (view, 14, "tool.rejected", "b"), DSH_VIEW_OK);
    assert_int_equal (s_pin_event (view, 15, "tool.accepted", "b"), DSH_VIEW_OK);
    assert_int_equal (s_tool_event (view, 16, EPOCH, "tool.updated", "b"), DSH_VIEW_OK);
    assert_int_equal (s_pin_event (view, 17, "tool.forgotten", "gone"), DSH_VIEW_OK);
    //  A pin event for a name the view does not hold is no tool either
    s_assert_tools (view, "[\"a\",\"b\"]");
    s_assert_notice (view, "tool.updated", 12);
    json_t *notice = dsh_view_notice (view);
    assert_string_equal (json_string_value (json_object_get (notice, "kind")), "tool.changed");
    assert_non_null (strstr (json_string_value (json_object_get (notice, "diff")), "+ description:"));
    json_decref (notice);
    s_assert_notice (view, "tool.rejected", 14);
    s_assert_notice (view, "tool.accepted", 15);
    s_assert_notice (view, "tool.updated", 16);
    s_assert_notice (view, "tool.forgotten", 17);
    s_assert_no_notice (view);
    assert_true (dsh_view_synced (view));
    assert_int_equal (dsh_view_seq (view), 17);
    assert_int_equal (dsh_view_syncs (view), 1);
    //  ...and a missed one is a gap like any other
    assert_int_equal (s_pin_event (view, 19, "tool.accepted", "a"), DSH_VIEW_RESYNC);
    dsh_view_destroy (&view);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_fresh_view_is_empty),
        cmocka_unit_test (test_events_wait_for_the_snapshot),
        cmocka_unit_test (test_live_events_apply_in_order),
        cmocka_unit_test (test_gap_resyncs),
        cmocka_unit_test (test_new_epoch_resyncs),
        cmocka_unit_test (test_queued_gap_resyncs_after_snapshot),
        cmocka_unit_test (test_full_queue_resyncs),
        cmocka_unit_test (test_snapshot_ignored_when_synced),
        cmocka_unit_test (test_malformed_input_is_ignored),
        cmocka_unit_test (test_lose_takes_a_new_snapshot),
        cmocka_unit_test (test_pin_events_count_their_seq),
    };
    zsys_init ();
    return cmocka_run_group_tests (tests, s_setup, s_teardown);
}
