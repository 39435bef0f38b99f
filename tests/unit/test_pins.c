/*  =========================================================================
    test_pins - dsh_pins and the catalog's quarantine: the definition digest
    is PROTOCOL.md's (its worked example), covers only the definition's
    keys, and ignores key order; tofu pins a first sight and quarantines a
    change, strict quarantines what no admin accepted, an unread set
    quarantines everything; accept, reject and forget; a stored set does
    not undo a change made here lately; the diff names what changed; the
    catalog serves a quarantined entry with its marks, follows it with
    tool.changed, and releases it when the pins say so
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_catalog.h"
#include "dsh_json.h"
#include "dsh_pins.h"

//  The bytes of the documents s_doc made (a document borrows its bytes),
//  freed at the end
static zlistx_t *s_buffers;

//  A msgpack document of a JSON text.
static dsh_doc_t *
s_doc (const char *json)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack (json, &sbuf, error, sizeof (error)), 0);
    dsh_doc_t *doc = dsh_doc_new ((const byte *) sbuf.data, sbuf.size, error, sizeof (error));
    assert_non_null (doc);
    zlistx_add_end (s_buffers, sbuf.data);
    return doc;
}

static void
s_digest_of (const char *json, char *hex)
{
    dsh_doc_t *doc = s_doc (json);
    assert_int_equal (dsh_digest_definition (dsh_doc_root (doc), hex), 0);
    dsh_doc_destroy (&doc);
}

static void
test_digest (void **state)
{
    (void) state;
    char hex [DSH_DIGEST_SIZE + 1];
    //  PROTOCOL.md's worked example
    s_digest_of ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"strict\":true}", hex);
    assert_string_equal (hex, "6b4d44454a982013e3159be241edafb0af15cb7727df2302bb03b7abab352f46");
    //  Key order does not count; keys outside the definition do not count
    char other [DSH_DIGEST_SIZE + 1];
    s_digest_of ("{\"parameters\":{\"type\":\"object\"},\"name\":\"t\",\"_meta\":{\"x\":1}}", other);
    assert_string_equal (hex, other);
    //  Every covered key does
    const char *changed [] = {
        "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"description\":\"d\"}",
        "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"title\":\"T\"}",
        "{\"name\":\"t\",\"parameters\":{\"type\":\"object\",\"required\":[]}}",
        "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"object\"}}",
        "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"annotations\":{\"readOnlyHint\":true}}",
        "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"confined\":true}",
        "{\"name\":\"u\",\"parameters\":{\"type\":\"object\"}}",
    };
    for (size_t index = 0; index < sizeof (changed) / sizeof (changed [0]); index++) {
        s_digest_of (changed [index], other);
        assert_string_not_equal (hex, other);
    }
    //  The value digest is of the canonical form
    dsh_doc_t *left = s_doc ("{\"a\":1,\"b\":[1,2]}");
    dsh_doc_t *right = s_doc ("{\"b\":[1,2],\"a\":1}");
    assert_int_equal (dsh_digest_value (dsh_doc_root (left), hex), 0);
    assert_int_equal (dsh_digest_value (dsh_doc_root (right), other), 0);
    assert_string_equal (hex, other);
    dsh_doc_destroy (&left);
    dsh_doc_destroy (&right);
    assert_int_equal (dsh_digest_value (NULL, hex), 0);
    dsh_digest_bytes ("\xc0", 1, other);
    assert_string_equal (hex, other);
}

static void
s_judge (dsh_pins_t *pins, const char *json, dsh_pins_verdict_t *verdict)
{
    dsh_doc_t *doc = s_doc (json);
    assert_int_equal (dsh_pins_judge (pins, "t", dsh_doc_root (doc), "c1", "KEY", 0, verdict), 0);
    dsh_doc_destroy (&doc);
}

static void
s_load_empty (dsh_pins_t *pins, int64_t now_ms)
{
    zlistx_t *none = zlistx_new ();
    dsh_pins_load (pins, &none, now_ms);
}

#define S_V1 "{\"name\":\"t\",\"description\":\"one\",\"parameters\":{\"type\":\"object\"}}"
#define S_V2 "{\"name\":\"t\",\"description\":\"two\",\"parameters\":{\"type\":\"object\"}}"

static void
test_tofu (void **state)
{
    (void) state;
    dsh_pins_t *pins = dsh_pins_new (DSH_PINS_TOFU);
    dsh_pins_verdict_t verdict;
    //  Not read yet: quarantined, nothing pinned
    s_judge (pins, S_V1, &verdict);
    assert_true (verdict.quarantined);
    assert_string_equal (verdict.reason, DSH_PINS_UNREAD);
    assert_null (dsh_pins_lookup (pins, "t"));
    s_load_empty (pins, 0);
    //  First sight pins, and is a change for the store
    s_judge (pins, S_V1, &verdict);
    assert_false (verdict.quarantined);
    const dsh_pin_t *pin = dsh_pins_lookup (pins, "t");
    assert_non_null (pin);
    assert_string_equal (pin->digest, verdict.digest);
    assert_string_equal (pin->component, "c1");
    assert_string_equal (pin->key, "KEY");
    assert_non_null (strstr (pin->definition, "\"one\""));
    zlistx_t *ops = dsh_pins_take_ops (pins);
    assert_int_equal (zlistx_size (ops), 1);
    assert_int_equal (((dsh_pin_op_t *) zlistx_first (ops))->kind, DSH_PIN_FIRST);
    zlistx_destroy (&ops);
    //  The same again: released, no change
    s_judge (pins, S_V1, &verdict);
    assert_false (verdict.quarantined);
    ops = dsh_pins_take_ops (pins);
    assert_int_equal (zlistx_size (ops), 0);
    zlistx_destroy (&ops);
    //  A change: quarantined, the pin stays
    char first [DSH_DIGEST_SIZE + 1];
    snprintf (first, sizeof (first), "%s", pin->digest);
    s_judge (pins, S_V2, &verdict);
    assert_true (verdict.quarantined);
    assert_string_equal (verdict.reason, DSH_PINS_CHANGED);
    assert_string_equal (verdict.pinned, first);
    assert_string_not_equal (verdict.digest, first);
    //  Rejected: it stays quarantined, for that reason
    char second [DSH_DIGEST_SIZE + 1];
    snprintf (second, sizeof (second), "%s", verdict.digest);
    assert_int_equal (dsh_pins_reject (pins, "t", second, "admin", 0), 0);
    s_judge (pins, S_V2, &verdict);
    assert_true (verdict.quarantined);
    assert_string_equal (verdict.reason, DSH_PINS_REJECTED);
    //  Accepted: the new definition is the pin; the first offerer stays
    dsh_doc_t *doc = s_doc (S_V2);
    assert_int_equal (dsh_pins_accept (pins, "t", dsh_doc_root (doc), "c2", NULL, "admin", 0), 0);
    dsh_doc_destroy (&doc);
    pin = dsh_pins_lookup (pins, "t");
    assert_string_equal (pin->digest, second);
    assert_string_equal (pin->component, "c1");
    assert_string_equal (pin->accepted_by, "admin");
    s_judge (pins, S_V2, &verdict);
    assert_false (verdict.quarantined);
    s_judge (pins, S_V1, &verdict);
    assert_true (verdict.quarantined);
    //  Forgotten: the next sight pins again
    assert_int_equal (dsh_pins_forget (pins, "t", 0), 0);
    assert_int_equal (dsh_pins_forget (pins, "t", 0), -1);
    s_judge (pins, S_V1, &verdict);
    assert_false (verdict.quarantined);
    ops = dsh_pins_take_ops (pins);
    assert_int_equal (zlistx_size (ops), 4);       //  reject, accept, forget, first
    zlistx_destroy (&ops);
    dsh_pins_destroy (&pins);
}

static void
test_strict (void **state)
{
    (void) state;
    dsh_pins_t *pins = dsh_pins_new (DSH_PINS_STRICT);
    s_load_empty (pins, 0);
    dsh_pins_verdict_t verdict;
    s_judge (pins, S_V1, &verdict);
    assert_true (verdict.quarantined);
    assert_string_equal (verdict.reason, DSH_PINS_UNACCEPTED);
    assert_string_equal (verdict.pinned, "");
    assert_null (dsh_pins_lookup (pins, "t"));
    dsh_doc_t *doc = s_doc (S_V1);
    assert_int_equal (dsh_pins_accept (pins, "t", dsh_doc_root (doc), "c1", NULL, "admin", 0), 0);
    dsh_doc_destroy (&doc);
    s_judge (pins, S_V1, &verdict);
    assert_false (verdict.quarantined);
    s_judge (pins, S_V2, &verdict);
    assert_true (verdict.quarantined);
    assert_string_equal (verdict.reason, DSH_PINS_CHANGED);
    dsh_pins_destroy (&pins);

    pins = dsh_pins_new (DSH_PINS_OFF);
    s_judge (pins, S_V2, &verdict);
    assert_false (verdict.quarantined);
    assert_null (dsh_pins_lookup (pins, "t"));
    dsh_pins_destroy (&pins);
}

//  A stored set replaces the pins, but for names changed here within 5 s
static void
test_load (void **state)
{
    (void) state;
    dsh_pins_t *pins = dsh_pins_new (DSH_PINS_TOFU);
    s_load_empty (pins, 0);
    dsh_pins_verdict_t verdict;
    s_judge (pins, S_V1, &verdict);             //  pinned here at 0
    zlistx_t *stored = zlistx_new ();
    dsh_pin_t *other = dsh_pin_new ("u");
    snprintf (other->digest, sizeof (other->digest), "%064d", 7);
    zlistx_add_end (stored, other);
    dsh_pins_load (pins, &stored, 1000);
    assert_non_null (dsh_pins_lookup (pins, "t"));     //  still landing
    assert_non_null (dsh_pins_lookup (pins, "u"));
    stored = zlistx_new ();
    zlistx_add_end (stored, dsh_pin_new ("u"));
    dsh_pins_load (pins, &stored, 6000);
    assert_null (dsh_pins_lookup (pins, "t"));         //  forgotten elsewhere
    zlistx_t *names = dsh_pins_names (pins);
    assert_int_equal (zlistx_size (names), 1);
    zlistx_add_end (names, strdup ("a"));
    zlistx_sort (names);
    assert_string_equal ((const char *) zlistx_first (names), "a");
    zlistx_destroy (&names);
    dsh_pins_destroy (&pins);
}

static void
test_diff (void **state)
{
    (void) state;
    json_t *pinned = json_loads ("{\"description\":\"one\",\"parameters\":{\"properties\":{\"a\":{\"type\":\"string\"}}},"
                                 "\"name\":\"t\"}", 0, NULL);
    json_t *offered = json_loads ("{\"description\":\"two\",\"parameters\":{\"properties\":{\"a\":{\"type\":\"integer\"},"
                                  "\"b\":{}}},\"name\":\"t\",\"title\":\"T\"}", 0, NULL);
    char *diff = dsh_pins_diff (pinned, offered, 4096);
    assert_string_equal (diff,
        "- description: \"one\"\n"
        "+ description: \"two\"\n"
        "- parameters.properties.a.type: \"string\"\n"
        "+ parameters.properties.a.type: \"integer\"\n"
        "+ parameters.properties.b: {}\n"
        "+ title: \"T\"\n");
    free (diff);
    //  The keys that changed, for the refusal's text
    char keys [64];
    dsh_pins_changed_keys (pinned, offered, keys, sizeof (keys));
    assert_string_equal (keys, "description, parameters, title");
    dsh_pins_changed_keys (pinned, pinned, keys, sizeof (keys));
    assert_string_equal (keys, "");
    dsh_pins_changed_keys (pinned, offered, keys, 16);
    assert_string_equal (keys, "description");
    //  Bounded, and says so
    diff = dsh_pins_diff (pinned, offered, 128);
    assert_non_null (strstr (diff, "more line(s)"));
    assert_true (strlen (diff) <= 128 + 64);
    free (diff);
    //  No pin: every line is new
    diff = dsh_pins_diff (NULL, offered, 4096);
    assert_string_equal (diff, "+ (definition): {\"description\":\"two\",\"name\":\"t\",\"parameters\":{\"properties\":"
                               "{\"a\":{\"type\":\"integer\"},\"b\":{}}},\"title\":\"T\"}\n");
    free (diff);
    json_decref (pinned);
    json_decref (offered);
}

static void
s_announce (dsh_catalog_t *catalog, const char *json, zlistx_t *events)
{
    dsh_doc_t *doc = s_doc (json);
    zlistx_t *refusals = zlistx_new ();
    zlistx_set_destructor (refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
    assert_int_equal (dsh_catalog_announce (catalog, "c1", 1, dsh_doc_root (doc), 0, events, refusals), 0);
    assert_int_equal (zlistx_size (refusals), 0);
    zlistx_destroy (&refusals);
    dsh_doc_destroy (&doc);
}

static zlistx_t *
s_events (void)
{
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    return events;
}

static void
test_catalog_quarantine (void **state)
{
    (void) state;
    dsh_catalog_t *catalog = dsh_catalog_new ();
    dsh_pins_t *pins = dsh_pins_new (DSH_PINS_TOFU);
    s_load_empty (pins, 0);
    dsh_catalog_set_pins (catalog, pins, NULL, NULL);
    zlistx_t *events = s_events ();
    s_announce (catalog, "[" S_V1 "]", events);
    assert_null (dsh_catalog_quarantine (catalog, "t", NULL, NULL));
    zlistx_purge (events);
    //  The sole provider changes it: updated with its marks, then changed
    s_announce (catalog, "[" S_V2 "]", events);
    const char *digest = NULL, *pinned = NULL;
    assert_string_equal (dsh_catalog_quarantine (catalog, "t", &digest, &pinned), DSH_PINS_CHANGED);
    assert_int_equal (zlistx_size (events), 2);
    dsh_event_t *updated = (dsh_event_t *) zlistx_first (events);
    assert_string_equal (updated->kind, DSH_EV_UPDATED);
    char error [64];
    dsh_doc_t *doc = dsh_doc_new (zchunk_data (updated->tool), zchunk_size (updated->tool), error, sizeof (error));
    const msgpack_object *entry = dsh_doc_root (doc);
    assert_true (dsh_map_get (entry, "quarantined")->via.boolean);
    assert_true (dsh_str_eq (dsh_map_get (entry, "description"), "two"));
    assert_true (dsh_str_eq (dsh_map_get (entry, "digest"), digest));
    assert_true (dsh_str_eq (dsh_map_get (entry, "pinnedDigest"), pinned));
    assert_true (dsh_str_eq (dsh_map_get (entry, "quarantineReason"), DSH_PINS_CHANGED));
    //  ... and the marks do not change the digest
    char again [DSH_DIGEST_SIZE + 1];
    assert_int_equal (dsh_digest_definition (entry, again), 0);
    assert_string_equal (again, digest);
    dsh_doc_destroy (&doc);
    dsh_event_t *changed = (dsh_event_t *) zlistx_next (events);
    assert_string_equal (changed->kind, DSH_EV_CHANGED);
    assert_string_equal (changed->digest, digest);
    assert_string_equal (changed->pinned, pinned);
    assert_string_equal (changed->diff, "- description: \"one\"\n+ description: \"two\"\n");
    assert_true (changed->seq == updated->seq + 1);
    //  What LIST serves has the marks too
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_catalog_pack_tools (catalog, &packer.pk);
    assert_non_null (memmem (packer.sbuf.data, packer.sbuf.size, "quarantineReason", 16));
    dsh_packer_release (&packer);
    //  Accepted: judged again, released with its plain entry
    zlistx_purge (events);
    zchunk_t *served = dsh_catalog_tool (catalog, "t");
    doc = dsh_doc_new (zchunk_data (served), zchunk_size (served), error, sizeof (error));
    assert_int_equal (dsh_pins_accept (pins, "t", dsh_doc_root (doc), "c1", NULL, "admin", 0), 0);
    dsh_doc_destroy (&doc);
    dsh_catalog_rejudge (catalog, NULL, events);
    assert_null (dsh_catalog_quarantine (catalog, "t", NULL, NULL));
    assert_int_equal (zlistx_size (events), 1);
    updated = (dsh_event_t *) zlistx_first (events);
    assert_string_equal (updated->kind, DSH_EV_UPDATED);
    assert_null (memmem (zchunk_data (updated->tool), zchunk_size (updated->tool), "quarantined", 11));
    //  Nothing to judge again: no event
    zlistx_purge (events);
    dsh_catalog_rejudge (catalog, NULL, events);
    assert_int_equal (zlistx_size (events), 0);
    zlistx_destroy (&events);
    dsh_catalog_destroy (&catalog);
    dsh_pins_destroy (&pins);
}

//  A component may not send the marks itself
static void
test_marks_refused (void **state)
{
    (void) state;
    dsh_catalog_t *catalog = dsh_catalog_new ();
    zlistx_t *events = s_events ();
    zlistx_t *refusals = zlistx_new ();
    zlistx_set_destructor (refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
    dsh_doc_t *doc = s_doc ("[{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"quarantined\":false}]");
    dsh_catalog_announce (catalog, "c1", 1, dsh_doc_root (doc), 0, events, refusals);
    assert_int_equal (zlistx_size (refusals), 1);
    assert_non_null (strstr (((dsh_refusal_t *) zlistx_first (refusals))->reason, "set by the broker only"));
    assert_null (dsh_catalog_tool (catalog, "t"));
    dsh_doc_destroy (&doc);
    zlistx_destroy (&refusals);
    zlistx_destroy (&events);
    dsh_catalog_destroy (&catalog);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_digest),
        cmocka_unit_test (test_tofu),
        cmocka_unit_test (test_strict),
        cmocka_unit_test (test_load),
        cmocka_unit_test (test_diff),
        cmocka_unit_test (test_catalog_quarantine),
        cmocka_unit_test (test_marks_refused),
    };
    s_buffers = zlistx_new ();
    zlistx_set_destructor (s_buffers, (zlistx_destructor_fn *) zstr_free);
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    zlistx_destroy (&s_buffers);
    return rc;
}
