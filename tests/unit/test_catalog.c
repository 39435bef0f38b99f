/*  =========================================================================
    test_catalog - dsh_catalog: announcements, replicas, refusals, removal,
    liveness, provider choice, and what the catalog packs and publishes
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_catalog.h"
#include "dsh_doc.h"
#include "dsh_json.h"

//  State of one test: the catalog, the lists the last call filled, the
//  sequence number every event must follow, and the documents to free.
static dsh_catalog_t *s_catalog;
static zlistx_t *s_events;
static zlistx_t *s_refusals;
static uint64_t s_last_seq;
static zlistx_t *s_held;

typedef struct {
    msgpack_sbuffer sbuf;
    dsh_doc_t *doc;
} held_t;

static void
s_held_destroy (held_t **held_p)
{
    if (*held_p) {
        dsh_doc_destroy (&(*held_p)->doc);
        msgpack_sbuffer_destroy (&(*held_p)->sbuf);
        free (*held_p);
        *held_p = NULL;
    }
}

static int
s_setup (void **state)
{
    (void) state;
    s_catalog = dsh_catalog_new ();
    s_events = zlistx_new ();
    zlistx_set_destructor (s_events, (zlistx_destructor_fn *) dsh_event_destroy);
    s_refusals = zlistx_new ();
    zlistx_set_destructor (s_refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
    s_held = zlistx_new ();
    zlistx_set_destructor (s_held, (zlistx_destructor_fn *) s_held_destroy);
    s_last_seq = 0;
    return 0;
}

static int
s_teardown (void **state)
{
    (void) state;
    dsh_catalog_destroy (&s_catalog);
    zlistx_destroy (&s_events);
    zlistx_destroy (&s_refusals);
    zlistx_destroy (&s_held);
    return 0;
}

//  The root object of JSON text (freed at teardown).
static const msgpack_object *
s_obj (const char *json)
{
    held_t *held = (held_t *) calloc (1, sizeof (held_t));
    assert_non_null (held);
    zlistx_add_end (s_held, held);
    char error [256] = "";
    if (dsh_json_text_to_msgpack (json, &held->sbuf, error, sizeof error))
        fail_msg ("bad test JSON %s: %s", json, error);
    held->doc = dsh_doc_new (held->sbuf.data, held->sbuf.size, error, sizeof error);
    if (!held->doc)
        fail_msg ("doc refused %s: %s", json, error);
    return dsh_doc_root (held->doc);
}

//  The document of some msgpack bytes (copied; freed at teardown).
static const msgpack_object *
s_decode (const void *data, size_t size)
{
    held_t *held = (held_t *) calloc (1, sizeof (held_t));
    assert_non_null (held);
    zlistx_add_end (s_held, held);
    msgpack_sbuffer_init (&held->sbuf);
    msgpack_sbuffer_write (&held->sbuf, (const char *) data, size);
    char error [256] = "";
    held->doc = dsh_doc_new (held->sbuf.data, held->sbuf.size, error, sizeof error);
    if (!held->doc)
        fail_msg ("packed bytes do not decode: %s", error);
    return dsh_doc_root (held->doc);
}

//  Every new event must carry the next sequence number, with no gap.
static void
s_check_seq (void)
{
    for (dsh_event_t *event = zlistx_first (s_events); event; event = zlistx_next (s_events)) {
        if (event->seq != s_last_seq + 1)
            fail_msg ("event %s has seq %" PRIu64 " after %" PRIu64, event->kind, event->seq, s_last_seq);
        s_last_seq = event->seq;
    }
    assert_int_equal (dsh_catalog_seq (s_catalog), s_last_seq);
}

//  Announces a JSON array of tools; the events and refusals it caused are
//  in s_events and s_refusals.
static void
s_announce (const char *component, uint64_t generation, const char *tools, int64_t now_ms)
{
    zlistx_purge (s_events);
    zlistx_purge (s_refusals);
    assert_int_equal (dsh_catalog_announce (s_catalog, component, generation, s_obj (tools), now_ms,
                                            s_events, s_refusals), 0);
    s_check_seq ();
}

static void
s_remove (const char *component, const char *reason)
{
    zlistx_purge (s_events);
    zlistx_purge (s_refusals);
    assert_int_equal (dsh_catalog_remove (s_catalog, component, reason, s_events), 0);
    s_check_seq ();
}

//  The index-th event (0-based) of the last call.
static dsh_event_t *
s_event (size_t index)
{
    dsh_event_t *event = zlistx_first (s_events);
    while (event && index--)
        event = zlistx_next (s_events);
    if (!event)
        fail_msg ("no event %zu", index);
    return event;
}

static void
s_assert_event (size_t index, const char *kind, const char *component, const char *name)
{
    dsh_event_t *event = s_event (index);
    assert_string_equal (event->kind, kind);
    assert_string_equal (event->component, component);
    if (name) {
        assert_non_null (event->name);
        assert_string_equal (event->name, name);
    }
    else
        assert_null (event->name);
}

//  True if the names list holds exactly the given names, in order.
static void
s_assert_names (zlistx_t *names, const char *const *expected, size_t count)
{
    assert_non_null (names);
    assert_int_equal (zlistx_size (names), count);
    size_t index = 0;
    for (char *name = zlistx_first (names); name; name = zlistx_next (names))
        assert_string_equal (name, expected [index++]);
}

//  The ids a tool's providers pack as, checked against expected.
static void
s_assert_providers (const char *tool, const char *const *expected, size_t count)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    dsh_catalog_pack_providers (s_catalog, tool, &pk);
    const msgpack_object *providers = s_decode (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    assert_int_equal (providers->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (providers->via.array.size, count);
    for (size_t index = 0; index < count; index++)
        assert_true (dsh_str_eq (&providers->via.array.ptr [index], expected [index]));
}

//  The entry the catalog holds for a tool is JSON text's, as written: keys
//  in the author's order.
static void
s_assert_entry (const char *tool, const char *json)
{
    zchunk_t *entry = dsh_catalog_tool (s_catalog, tool);
    assert_non_null (entry);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_object (&pk, *s_obj (json));
    assert_int_equal (zchunk_size (entry), sbuf.size);
    assert_memory_equal (zchunk_data (entry), sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
}

#define T1      "{\"name\":\"t1\",\"parameters\":{\"type\":\"object\"}}"
#define T1_BIS  "{\"name\":\"t1\",\"description\":\"new\",\"parameters\":{\"type\":\"object\"}}"
#define T2      "{\"name\":\"t2\",\"description\":\"two\",\"parameters\":{\"type\":\"object\"," \
                "\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"}}}}"
//  T2 with every map's keys in another order
#define T2_SHUFFLED "{\"parameters\":{\"properties\":{\"b\":{\"type\":\"integer\"},\"a\":{\"type\":\"string\"}}," \
                "\"type\":\"object\"},\"description\":\"two\",\"name\":\"t2\"}"
#define T3      "{\"name\":\"t3\",\"parameters\":{\"type\":\"object\"}}"
#define T4      "{\"name\":\"t4\",\"parameters\":{\"type\":\"object\"}}"

// ---------------------------------------------------------------------------

static void
test_announce_registers (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "," T2 "]", 1000);
    assert_int_equal (zlistx_size (s_events), 3);
    assert_int_equal (zlistx_size (s_refusals), 0);
    s_assert_event (0, DSH_EV_REGISTERED, "a", "t1");
    s_assert_event (1, DSH_EV_REGISTERED, "a", "t2");
    s_assert_event (2, DSH_EV_JOINED, "a", NULL);
    assert_int_equal (s_event (0)->seq, 1);
    assert_int_equal (s_event (2)->seq, 3);
    //  Registered events carry the canonical entry
    zchunk_t *entry = dsh_catalog_tool (s_catalog, "t1");
    assert_non_null (s_event (0)->tool);
    assert_true (zchunk_size (s_event (0)->tool) == zchunk_size (entry));
    assert_memory_equal (zchunk_data (s_event (0)->tool), zchunk_data (entry), zchunk_size (entry));
    assert_null (s_event (0)->tools);
    //  component.joined names its tools
    s_assert_names (s_event (2)->tools, (const char *[]) { "t1", "t2" }, 2);
    assert_null (s_event (2)->tool);
    assert_null (s_event (2)->reason);
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 2);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 1);
    s_assert_entry ("t2", T2);
    assert_null (dsh_catalog_tool (s_catalog, "t9"));

    //  A component with no tools still joins
    s_announce ("empty", 1, "[]", 1000);
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_JOINED, "empty", NULL);
    assert_int_equal (zlistx_size (s_event (0)->tools), 0);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 2);
}

static void
test_announce_idempotent (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "," T2 "]", 1000);
    uint64_t seq = dsh_catalog_seq (s_catalog);
    s_announce ("a", 1, "[" T1 "," T2 "]", 2000);
    assert_int_equal (zlistx_size (s_events), 0);
    assert_int_equal (zlistx_size (s_refusals), 0);
    //  Also with a new generation: the set did not change
    s_announce ("a", 2, "[" T1 "," T2 "]", 3000);
    assert_int_equal (zlistx_size (s_events), 0);
    //  And with every map's keys in another order: equal entries (their
    //  canonical bytes are equal), so nothing changes, the order served
    //  included
    s_announce ("a", 3, "[" T1 "," T2_SHUFFLED "]", 4000);
    assert_int_equal (zlistx_size (s_events), 0);
    assert_int_equal (zlistx_size (s_refusals), 0);
    assert_int_equal (dsh_catalog_seq (s_catalog), seq);
    s_assert_entry ("t2", T2);
}

static void
test_announce_removes (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "," T2 "," T3 "," T4 "]", 1000);
    s_announce ("a", 2, "[" T1 "," T3 "," T4 "]", 1000);
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_UNREGISTERED, "a", "t2");
    assert_null (s_event (0)->tool);
    assert_null (dsh_catalog_tool (s_catalog, "t2"));
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 3);

    //  Several tools dropped at once, side by side
    s_announce ("a", 3, "[" T4 "]", 1000);
    assert_int_equal (zlistx_size (s_events), 2);
    s_assert_event (0, DSH_EV_UNREGISTERED, "a", "t1");
    s_assert_event (1, DSH_EV_UNREGISTERED, "a", "t3");
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 1);

    //  All of them
    s_announce ("a", 4, "[]", 1000);
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_UNREGISTERED, "a", "t4");
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 0);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 1);

    //  And back: registered again, in the new order
    s_announce ("a", 5, "[" T3 "," T1 "]", 1000);
    assert_int_equal (zlistx_size (s_events), 2);
    s_assert_event (0, DSH_EV_REGISTERED, "a", "t3");
    s_assert_event (1, DSH_EV_REGISTERED, "a", "t1");
}

static void
test_sole_provider_updates (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "," T2 "]", 1000);
    s_announce ("a", 2, "[" T1_BIS "," T2 "]", 1000);
    assert_int_equal (zlistx_size (s_events), 1);
    assert_int_equal (zlistx_size (s_refusals), 0);
    s_assert_event (0, DSH_EV_UPDATED, "a", "t1");
    s_assert_entry ("t1", T1_BIS);
    zchunk_t *entry = dsh_catalog_tool (s_catalog, "t1");
    assert_non_null (s_event (0)->tool);
    assert_true (zchunk_size (s_event (0)->tool) == zchunk_size (entry));
    assert_memory_equal (zchunk_data (s_event (0)->tool), zchunk_data (entry), zchunk_size (entry));
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 2);
}

static void
test_replica (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    s_announce ("b", 1, "[" T1 "]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 0);
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_JOINED, "b", NULL);
    s_assert_names (s_event (0)->tools, (const char *[]) { "t1" }, 1);
    s_assert_providers ("t1", (const char *[]) { "a", "b" }, 2);
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 1);

    //  One replica leaving its tool set: the tool stays with the other
    s_announce ("a", 2, "[]", 1000);
    assert_int_equal (zlistx_size (s_events), 0);
    s_assert_providers ("t1", (const char *[]) { "b" }, 1);
    //  ... and now b is the sole provider and may change it
    s_announce ("b", 2, "[" T1_BIS "]", 1000);
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_UPDATED, "b", "t1");
}

static void
test_conflict_refused (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    s_announce ("b", 1, "[" T1_BIS "," T2 "]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 1);
    dsh_refusal_t *refusal = zlistx_first (s_refusals);
    assert_string_equal (refusal->component, "b");
    assert_string_equal (refusal->name, "t1");
    assert_string_equal (refusal->reason,
                         "tool \"t1\" is already registered by component \"a\" with a different schema");
    //  b's other tool is taken; b joins without t1
    assert_int_equal (zlistx_size (s_events), 2);
    s_assert_event (0, DSH_EV_REGISTERED, "b", "t2");
    s_assert_event (1, DSH_EV_JOINED, "b", NULL);
    s_assert_names (s_event (1)->tools, (const char *[]) { "t2" }, 1);
    //  The first owner keeps it
    s_assert_entry ("t1", T1);
    s_assert_providers ("t1", (const char *[]) { "a" }, 1);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "a");

    //  Re-announcing the refused set refuses again, with no events
    s_announce ("b", 1, "[" T1_BIS "," T2 "]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 1);
    assert_int_equal (zlistx_size (s_events), 0);

    //  When the owner leaves, b may take the name
    s_remove ("a", "withdrawn");
    s_announce ("b", 2, "[" T1_BIS "," T2 "]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 0);
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_REGISTERED, "b", "t1");
    s_assert_entry ("t1", T1_BIS);
}

static void
test_replica_changes_schema (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    s_announce ("b", 1, "[" T1 "]", 1000);
    s_announce ("b", 2, "[" T1_BIS "]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 1);
    dsh_refusal_t *refusal = zlistx_first (s_refusals);
    assert_string_equal (refusal->component, "b");
    assert_string_equal (refusal->name, "t1");
    assert_non_null (strstr (refusal->reason, "tool \"t1\""));
    assert_non_null (strstr (refusal->reason, "refused"));
    //  a still serves the old entry: no tool event, b dropped as provider
    assert_int_equal (zlistx_size (s_events), 0);
    s_assert_entry ("t1", T1);
    s_assert_providers ("t1", (const char *[]) { "a" }, 1);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "a");
    assert_null (dsh_catalog_provider (s_catalog, "t1", "a"));

    //  b does not count as providing t1: its removal leaves t1 alone
    s_remove ("b", "expired");
    assert_int_equal (zlistx_size (s_events), 1);
    s_assert_event (0, DSH_EV_LEFT, "b", NULL);
    assert_int_equal (zlistx_size (s_event (0)->tools), 0);
    s_assert_providers ("t1", (const char *[]) { "a" }, 1);
}

static void
test_duplicate_in_one_announce (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "," T2 "," T1_BIS "]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 1);
    dsh_refusal_t *refusal = zlistx_first (s_refusals);
    assert_string_equal (refusal->component, "a");
    assert_string_equal (refusal->name, "t1");
    assert_non_null (strstr (refusal->reason, "announced twice"));
    assert_int_equal (zlistx_size (s_events), 3);
    s_assert_event (0, DSH_EV_REGISTERED, "a", "t1");
    s_assert_event (1, DSH_EV_REGISTERED, "a", "t2");
    s_assert_entry ("t1", T1);
}

static void
test_invalid_entry_refused (void **state)
{
    (void) state;
    s_announce ("a", 1, "[{\"name\":\"bad\",\"parameters\":{\"type\":\"string\"}}," T2 ","
                "{\"parameters\":{\"type\":\"object\"}}, 17]", 1000);
    assert_int_equal (zlistx_size (s_refusals), 3);
    dsh_refusal_t *refusal = zlistx_first (s_refusals);
    assert_string_equal (refusal->component, "a");
    assert_non_null (strstr (refusal->reason, "tool \"bad\""));
    assert_non_null (strstr (refusal->reason, "parameters"));
    //  REFUSED names the tool whenever its name is readable; not otherwise
    assert_string_equal (refusal->name, "bad");
    refusal = zlistx_next (s_refusals);
    assert_null (refusal->name);
    refusal = zlistx_next (s_refusals);
    assert_null (refusal->name);
    assert_int_equal (zlistx_size (s_events), 2);
    s_assert_event (0, DSH_EV_REGISTERED, "a", "t2");
    s_assert_event (1, DSH_EV_JOINED, "a", NULL);
    s_assert_names (s_event (1)->tools, (const char *[]) { "t2" }, 1);
    assert_null (dsh_catalog_tool (s_catalog, "bad"));
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 1);
}

static void
test_remove_component (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "," T2 "," T3 "]", 1000);
    s_announce ("b", 1, "[" T2 "]", 1000);
    s_remove ("a", "withdrawn");
    //  t1 and t3 have no provider left; t2 stays with b
    assert_int_equal (zlistx_size (s_events), 3);
    s_assert_event (0, DSH_EV_UNREGISTERED, "a", "t1");
    s_assert_event (1, DSH_EV_UNREGISTERED, "a", "t3");
    s_assert_event (2, DSH_EV_LEFT, "a", NULL);
    assert_string_equal (s_event (2)->reason, "withdrawn");
    s_assert_names (s_event (2)->tools, (const char *[]) { "t1", "t2", "t3" }, 3);
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 1);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 1);
    s_assert_providers ("t2", (const char *[]) { "b" }, 1);

    s_remove ("b", "expired");
    assert_int_equal (zlistx_size (s_events), 2);
    s_assert_event (0, DSH_EV_UNREGISTERED, "b", "t2");
    s_assert_event (1, DSH_EV_LEFT, "b", NULL);
    assert_string_equal (s_event (1)->reason, "expired");
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 0);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 0);

    //  Unknown components: nothing happens
    zlistx_purge (s_events);
    assert_int_equal (dsh_catalog_remove (s_catalog, "a", "withdrawn", s_events), -1);
    assert_int_equal (zlistx_size (s_events), 0);
    assert_int_equal (dsh_catalog_seq (s_catalog), s_last_seq);

    //  A component that left joins again as new
    s_announce ("a", 7, "[" T1 "]", 1000);
    s_assert_event (0, DSH_EV_REGISTERED, "a", "t1");
    s_assert_event (1, DSH_EV_JOINED, "a", NULL);
}

static void
test_touch_and_seen (void **state)
{
    (void) state;
    assert_int_equal (dsh_catalog_touch (s_catalog, "a", 1, 1000), 1);
    assert_int_equal (dsh_catalog_seen (s_catalog, "a", 1000), -1);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 0);
    s_announce ("a", 4, "[" T1 "]", 1000);
    assert_int_equal (dsh_catalog_touch (s_catalog, "a", 4, 2000), 0);
    assert_int_equal (dsh_catalog_touch (s_catalog, "a", 5, 2000), 1);
    assert_int_equal (dsh_catalog_touch (s_catalog, "a", 3, 2000), 1);
    assert_int_equal (dsh_catalog_seen (s_catalog, "a", 2000), 0);
    //  Touching changes no state anyone sees
    assert_int_equal (dsh_catalog_seq (s_catalog), s_last_seq);
}

static bool
s_contains (zlistx_t *list, const char *text)
{
    for (char *item = zlistx_first (list); item; item = zlistx_next (list))
        if (streq (item, text))
            return true;
    return false;
}

static void
test_silent (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    s_announce ("b", 1, "[" T1 "]", 2000);
    s_announce ("c", 1, "[]", 3000);

    zlistx_t *silent = dsh_catalog_silent (s_catalog, 4000, 5000);
    assert_int_equal (zlistx_size (silent), 0);
    zlistx_destroy (&silent);

    silent = dsh_catalog_silent (s_catalog, 4000, 2500);
    assert_int_equal (zlistx_size (silent), 1);
    assert_true (s_contains (silent, "a"));
    zlistx_destroy (&silent);

    silent = dsh_catalog_silent (s_catalog, 4000, 1500);
    assert_int_equal (zlistx_size (silent), 2);
    assert_true (s_contains (silent, "a"));
    assert_true (s_contains (silent, "b"));
    zlistx_destroy (&silent);

    //  A heartbeat (touch) or any message (seen) counts as alive
    assert_int_equal (dsh_catalog_touch (s_catalog, "a", 1, 3900), 0);
    assert_int_equal (dsh_catalog_seen (s_catalog, "b", 3950), 0);
    silent = dsh_catalog_silent (s_catalog, 4000, 500);
    assert_int_equal (zlistx_size (silent), 1);
    assert_true (s_contains (silent, "c"));
    zlistx_destroy (&silent);

    //  Listing removes nothing
    assert_int_equal (dsh_catalog_component_count (s_catalog), 3);
}

//  A refused claim is an event of its own, numbered, that changes nothing
static void
test_refused_id (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    zlistx_purge (s_events);
    dsh_catalog_refuse_id (s_catalog, "a", "component id a is held", s_events);
    s_check_seq ();
    assert_int_equal (zlistx_size (s_events), 1);
    dsh_event_t *event = (dsh_event_t *) zlistx_first (s_events);
    assert_string_equal (event->kind, DSH_EV_REFUSED);
    assert_string_equal (event->component, "a");
    assert_string_equal (event->reason, "component id a is held");
    assert_null (event->tools);
    assert_int_equal (dsh_catalog_component_count (s_catalog), 1);
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 1);
}

static void
test_provider_choice (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    s_announce ("b", 1, "[" T1 "]", 1000);
    s_announce ("c", 1, "[" T1 "]", 1000);
    assert_null (dsh_catalog_provider (s_catalog, "nope", NULL));

    //  All idle: the earliest
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "a");
    dsh_catalog_outstanding (s_catalog, "a", 1);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "b");
    dsh_catalog_outstanding (s_catalog, "b", 1);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "c");
    dsh_catalog_outstanding (s_catalog, "c", 1);
    //  All at one: the earliest again
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "a");
    //  except skips one; ties still go to the earliest of the rest
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", "a"), "b");
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", "b"), "a");
    dsh_catalog_outstanding (s_catalog, "a", 1);
    dsh_catalog_outstanding (s_catalog, "b", 1);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "c");
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", "c"), "a");
    //  Finished calls count down (never below zero)
    dsh_catalog_outstanding (s_catalog, "b", -1);
    dsh_catalog_outstanding (s_catalog, "b", -1);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "b");
    dsh_catalog_outstanding (s_catalog, "b", -5);
    dsh_catalog_outstanding (s_catalog, "b", 1);
    //  b is at 1 now (clamped to 0, then +1), a at 2, c at 1: b comes before c
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "b");
    //  Unknown components are ignored
    dsh_catalog_outstanding (s_catalog, "zzz", 1);

    //  The only provider excluded: nobody
    s_announce ("d", 1, "[" T2 "]", 1000);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t2", NULL), "d");
    assert_null (dsh_catalog_provider (s_catalog, "t2", "d"));
}

//  Fills a component's window with calls; returns how many it took.
static size_t
s_fill (const char *component)
{
    size_t sent = 0;
    while (dsh_catalog_has_room (s_catalog, component) && sent < 100000) {
        dsh_catalog_outstanding (s_catalog, component, 1);
        sent++;
    }
    return sent;
}

//  A component's window: its workers plus what it answers in 100 ms at its
//  pace (one at least, 256 in all at most); providers with room come
//  first, then the fewest calls sent and held for them.
static void
test_window (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T1 "]", 1000);
    s_announce ("b", 1, "[" T1 "]", 1000);
    //  Not paced yet: its workers and one more
    dsh_catalog_set_concurrency (s_catalog, "a", 2);
    assert_int_equal (s_fill ("a"), 3);
    //  b states nothing: taken to have 8
    assert_int_equal (s_fill ("b"), 9);
    dsh_catalog_outstanding (s_catalog, "b", -1);
    //  b has more calls outstanding, but a has no room
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "b");
    dsh_catalog_outstanding (s_catalog, "b", 1);
    //  Neither has room: the fewest sent and held, and held calls count
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "a");
    dsh_catalog_waiting (s_catalog, "a", 7);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "b");
    dsh_catalog_waiting (s_catalog, "a", -100);
    assert_string_equal (dsh_catalog_provider (s_catalog, "t1", NULL), "a");

    //  a answers 100 calls in 50 ms: 2 000 a second, smoothed to 1 000, so
    //  100 calls' work in 100 ms, and the window is 2 + 101
    dsh_catalog_outstanding (s_catalog, "a", 97);
    dsh_catalog_outstanding (s_catalog, "a", -100);
    dsh_catalog_pace (s_catalog, 1050);
    assert_int_equal (s_fill ("a"), 103);
    //  Faster still (10 000 calls in 50 ms): the window stops at 256
    dsh_catalog_outstanding (s_catalog, "a", 10000 - 103);
    dsh_catalog_outstanding (s_catalog, "a", -10000);
    dsh_catalog_pace (s_catalog, 1100);
    assert_int_equal (s_fill ("a"), 256);
    //  Idle, its pace decays and the window shrinks back to 2 + 1
    dsh_catalog_outstanding (s_catalog, "a", -100000);
    for (int64_t now = 1150; now < 3000; now += 50)
        dsh_catalog_pace (s_catalog, now);
    assert_int_equal (s_fill ("a"), 3);
    //  More workers than the cap: all of them busy, and one more
    dsh_catalog_outstanding (s_catalog, "a", -100000);
    dsh_catalog_set_concurrency (s_catalog, "a", 1000);
    assert_int_equal (s_fill ("a"), 1001);
    //  A new ANNOUNCE without concurrency gives the default back
    dsh_catalog_outstanding (s_catalog, "a", -100000);
    dsh_catalog_set_concurrency (s_catalog, "a", 0);
    assert_int_equal (s_fill ("a"), 9);
    //  Unknown components have room: nothing to hold a call for
    assert_true (dsh_catalog_has_room (s_catalog, "zzz"));
    dsh_catalog_set_concurrency (s_catalog, "zzz", 4);
    dsh_catalog_waiting (s_catalog, "zzz", 1);
}

//  Packs with a fresh packer and decodes; the caller reads the result.
static const msgpack_object *
s_pack_tools (void)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    dsh_catalog_pack_tools (s_catalog, &pk);
    const msgpack_object *tools = s_decode (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    return tools;
}

//  The keys of map are keys, in that order.
static void
s_assert_keys (const msgpack_object *map, const char *const *keys, uint32_t count)
{
    assert_int_equal (map->type, MSGPACK_OBJECT_MAP);
    assert_int_equal (map->via.map.size, count);
    for (uint32_t index = 0; index < count; index++)
        if (!dsh_str_eq (&map->via.map.ptr [index].key, keys [index]))
            fail_msg ("key %u is not \"%s\"", index, keys [index]);
}

static void
test_pack_tools_order (void **state)
{
    (void) state;
    const msgpack_object *tools = s_pack_tools ();
    assert_int_equal (tools->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (tools->via.array.size, 0);

    s_announce ("a", 1, "[" T3 "," T1 "]", 1000);
    s_announce ("b", 1, "[" T2_SHUFFLED "," T1 "]", 1000);
    s_announce ("a", 2, "[" T3 "," T1 "," T4 "]", 1000);
    tools = s_pack_tools ();
    assert_int_equal (tools->via.array.size, 4);
    const char *order [] = { "t3", "t1", "t2", "t4" };
    for (size_t index = 0; index < 4; index++) {
        const msgpack_object *entry = &tools->via.array.ptr [index];
        if (!dsh_str_eq (dsh_map_get (entry, "name"), order [index]))
            fail_msg ("tool %zu is not %s", index, order [index]);
    }
    //  Each entry keeps its author's key order, nested maps too: t2 as b
    //  announced it (the order a prompt reads a schema in)
    s_assert_keys (&tools->via.array.ptr [0], (const char *[]) { "name", "parameters" }, 2);
    s_assert_keys (&tools->via.array.ptr [2], (const char *[]) { "parameters", "description", "name" }, 3);
    const msgpack_object *parameters = dsh_map_get (&tools->via.array.ptr [2], "parameters");
    s_assert_keys (parameters, (const char *[]) { "properties", "type" }, 2);
    s_assert_keys (dsh_map_get (parameters, "properties"), (const char *[]) { "b", "a" }, 2);

    //  A removed tool leaves the order; the rest keep theirs
    s_announce ("a", 3, "[" T3 "," T4 "]", 1000);       //  t1 stays with b
    s_announce ("b", 2, "[" T1 "]", 1000);              //  t2 goes
    tools = s_pack_tools ();
    assert_int_equal (tools->via.array.size, 3);
    assert_true (dsh_str_eq (dsh_map_get (&tools->via.array.ptr [0], "name"), "t3"));
    assert_true (dsh_str_eq (dsh_map_get (&tools->via.array.ptr [1], "name"), "t1"));
    assert_true (dsh_str_eq (dsh_map_get (&tools->via.array.ptr [2], "name"), "t4"));
}

static void
test_pack_snapshot (void **state)
{
    (void) state;
    s_announce ("zed", 5, "[" T2 "," T1 "]", 1000);
    s_announce ("amy", 2, "[" T1 "]", 1000);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 2);
    dsh_catalog_pack_snapshot (s_catalog, &pk);
    const msgpack_object *root = s_decode (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);

    const msgpack_object *tools = dsh_map_get (root, "tools");
    assert_non_null (tools);
    assert_int_equal (tools->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (tools->via.array.size, 2);
    const msgpack_object *first = &tools->via.array.ptr [0];
    assert_int_equal (first->via.map.size, 2);
    assert_true (dsh_str_eq (dsh_map_get (dsh_map_get (first, "tool"), "name"), "t2"));
    const msgpack_object *providers = dsh_map_get (first, "providers");
    assert_int_equal (providers->via.array.size, 1);
    assert_true (dsh_str_eq (&providers->via.array.ptr [0], "zed"));
    const msgpack_object *second = &tools->via.array.ptr [1];
    assert_true (dsh_str_eq (dsh_map_get (dsh_map_get (second, "tool"), "name"), "t1"));
    providers = dsh_map_get (second, "providers");
    assert_int_equal (providers->via.array.size, 2);
    assert_true (dsh_str_eq (&providers->via.array.ptr [0], "zed"));
    assert_true (dsh_str_eq (&providers->via.array.ptr [1], "amy"));

    //  Components in id order
    const msgpack_object *components = dsh_map_get (root, "components");
    assert_non_null (components);
    assert_int_equal (components->via.array.size, 2);
    const msgpack_object *amy = &components->via.array.ptr [0];
    assert_int_equal (amy->via.map.size, 3);
    assert_true (dsh_str_eq (dsh_map_get (amy, "id"), "amy"));
    assert_int_equal (dsh_map_get (amy, "generation")->via.u64, 2);
    assert_int_equal (dsh_map_get (amy, "tools")->via.array.size, 1);
    const msgpack_object *zed = &components->via.array.ptr [1];
    assert_true (dsh_str_eq (dsh_map_get (zed, "id"), "zed"));
    assert_int_equal (dsh_map_get (zed, "generation")->via.u64, 5);
    const msgpack_object *names = dsh_map_get (zed, "tools");
    assert_int_equal (names->via.array.size, 2);
    assert_true (dsh_str_eq (&names->via.array.ptr [0], "t2"));
    assert_true (dsh_str_eq (&names->via.array.ptr [1], "t1"));
}

//  The decoded body of an event.
static const msgpack_object *
s_encode (dsh_event_t *event, uint64_t epoch)
{
    zframe_t *frame = dsh_event_encode (event, epoch);
    const msgpack_object *body = s_decode (zframe_data (frame), zframe_size (frame));
    zframe_destroy (&frame);
    return body;
}

static void
test_event_encode (void **state)
{
    (void) state;
    s_announce ("a", 1, "[" T2 "]", 1000);
    const msgpack_object *body = s_encode (s_event (0), 77);
    assert_int_equal (body->via.map.size, 6);
    assert_int_equal (dsh_map_get (body, "seq")->via.u64, 1);
    assert_int_equal (dsh_map_get (body, "epoch")->via.u64, 77);
    assert_true (dsh_str_eq (dsh_map_get (body, "kind"), DSH_EV_REGISTERED));
    assert_true (dsh_str_eq (dsh_map_get (body, "component"), "a"));
    assert_true (dsh_str_eq (dsh_map_get (body, "name"), "t2"));
    const msgpack_object *tool = dsh_map_get (body, "tool");
    assert_int_equal (tool->type, MSGPACK_OBJECT_MAP);
    assert_true (dsh_str_eq (dsh_map_get (tool, "description"), "two"));
    assert_null (dsh_map_get (body, "tools"));
    assert_null (dsh_map_get (body, "reason"));

    body = s_encode (s_event (1), 77);
    assert_int_equal (body->via.map.size, 5);
    assert_true (dsh_str_eq (dsh_map_get (body, "kind"), DSH_EV_JOINED));
    const msgpack_object *tools = dsh_map_get (body, "tools");
    assert_int_equal (tools->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (tools->via.array.size, 1);
    assert_true (dsh_str_eq (&tools->via.array.ptr [0], "t2"));
    assert_null (dsh_map_get (body, "name"));

    s_remove ("a", "expired");
    body = s_encode (s_event (0), 78);
    assert_int_equal (body->via.map.size, 5);
    assert_true (dsh_str_eq (dsh_map_get (body, "kind"), DSH_EV_UNREGISTERED));
    assert_true (dsh_str_eq (dsh_map_get (body, "name"), "t2"));
    assert_null (dsh_map_get (body, "tool"));
    assert_int_equal (dsh_map_get (body, "seq")->via.u64, 3);
    body = s_encode (s_event (1), 78);
    assert_int_equal (body->via.map.size, 6);
    assert_true (dsh_str_eq (dsh_map_get (body, "kind"), DSH_EV_LEFT));
    assert_true (dsh_str_eq (dsh_map_get (body, "reason"), "expired"));
    assert_int_equal (dsh_map_get (body, "tools")->via.array.size, 1);
    assert_int_equal (dsh_map_get (body, "epoch")->via.u64, 78);

    //  Events and refusals are safe to destroy twice
    dsh_event_t *event = zlistx_detach (s_events, NULL);
    dsh_event_destroy (&event);
    assert_null (event);
    dsh_event_destroy (&event);
}

//  A component's entries over max_tool_bytes, or past max_tools, are
//  refused by name; the others register. An update over the limit is
//  refused like any invalid entry: the component no longer provides it.
static void
test_limits (void **state)
{
    (void) state;
    dsh_catalog_set_limits (s_catalog, 64, 2);
    s_announce ("c", 1, "[{\"name\":\"a\",\"parameters\":{\"type\":\"object\"}},"
                       "{\"name\":\"big\",\"description\":\"0123456789012345678901234567890123456789\","
                       "\"parameters\":{\"type\":\"object\"}},"
                       "{\"name\":\"b\",\"parameters\":{\"type\":\"object\"}},"
                       "{\"name\":\"c\",\"parameters\":{\"type\":\"object\"}}]", 0);
    assert_int_equal (zlistx_size (s_refusals), 2);
    dsh_refusal_t *refusal = zlistx_first (s_refusals);
    assert_string_equal (refusal->name, "big");
    assert_non_null (strstr (refusal->reason, "over the broker's 64-byte limit on a tool entry (max_tool_bytes)"));
    refusal = zlistx_next (s_refusals);
    assert_string_equal (refusal->name, "c");
    assert_string_equal (refusal->reason,
                         "tool \"c\" is over the broker's limit of 2 tools a component may provide (max_tools)");
    assert_int_equal (dsh_catalog_tool_count (s_catalog), 2);
    assert_non_null (dsh_catalog_tool (s_catalog, "a"));
    assert_non_null (dsh_catalog_tool (s_catalog, "b"));
    //  An update past the limit: refused, and the old entry goes
    s_announce ("c", 1, "[{\"name\":\"a\",\"description\":\"0123456789012345678901234567890123456789\","
                       "\"parameters\":{\"type\":\"object\"}},"
                       "{\"name\":\"b\",\"parameters\":{\"type\":\"object\"}}]", 1);
    assert_int_equal (zlistx_size (s_refusals), 1);
    s_assert_event (0, DSH_EV_UNREGISTERED, "c", "a");
    assert_null (dsh_catalog_tool (s_catalog, "a"));
    assert_non_null (dsh_catalog_tool (s_catalog, "b"));
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_limits, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_announce_registers, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_announce_idempotent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_announce_removes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sole_provider_updates, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_replica, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_conflict_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_replica_changes_schema, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_duplicate_in_one_announce, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_invalid_entry_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_remove_component, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_touch_and_seen, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_silent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_provider_choice, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_window, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_pack_tools_order, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_pack_snapshot, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_event_encode, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_refused_id, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
