/*  =========================================================================
    test_parts - dsh_parts: a tool set announced in parts comes back whole,
    in part order, only once every part came; a newer generation replaces
    an assembly, an older one and a repeat are ignored, another count of
    parts or another key is refused; the bounds in bytes drop an assembly
    before it takes the memory they bound; an old assembly expires
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_json.h"
#include "dsh_parts.h"

//  One part as the registry has it once decoded: the bytes, their document
//  and the presence that points into it.
typedef struct {
    msgpack_sbuffer sbuf;
    dsh_doc_t *doc;
    dsh_presence_t presence;
} s_part_t;

//  An ANNOUNCE part of component at generation with a tool per name in
//  names (space-separated, "" for none) whose description is padding bytes.
static s_part_t *
s_part_padded (const char *component, uint64_t generation, int part, int parts, const char *names,
               size_t padding, int concurrency)
{
    s_part_t *self = (s_part_t *) zmalloc (sizeof (s_part_t));
    char *description = (char *) zmalloc (padding + 1);
    memset (description, 'd', padding);
    char *tools = strdup ("");
    char *copy = strdup (names);
    for (char *name = strtok (copy, " "); name; name = strtok (NULL, " ")) {
        char *more = zsys_sprintf ("%s%s{\"name\":\"%s\",\"description\":\"%s\",\"parameters\":{\"type\":\"object\"}}",
                                   tools, *tools? ",": "", name, description);
        free (tools);
        tools = more;
    }
    char *concurrency_field = concurrency? zsys_sprintf (",\"concurrency\":%d", concurrency): strdup ("");
    char *json = zsys_sprintf ("{\"component\":\"%s\",\"generation\":%" PRIu64 ",\"part\":%d,\"parts\":%d%s,"
                               "\"tools\":[%s]}", component, generation, part, parts, concurrency_field, tools);
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (json, &self->sbuf, error, sizeof (error)), 0);
    self->doc = dsh_doc_new (self->sbuf.data, self->sbuf.size, error, sizeof (error));
    assert_non_null (self->doc);
    assert_int_equal (dsh_proto_decode_presence (self->doc, DSH_ANNOUNCE, &self->presence, error, sizeof (error)), 0);
    free (json);
    free (concurrency_field);
    free (copy);
    free (tools);
    free (description);
    return self;
}

static s_part_t *
s_part (const char *component, uint64_t generation, int part, int parts, const char *names)
{
    return s_part_padded (component, generation, part, parts, names, 1, 0);
}

static void
s_part_destroy (s_part_t **self_p)
{
    if (*self_p) {
        dsh_doc_destroy (&(*self_p)->doc);
        msgpack_sbuffer_destroy (&(*self_p)->sbuf);
        free (*self_p);
        *self_p = NULL;
    }
}

//  Adds a part from key (NULL: none); returns the status, and the set's
//  names, space-separated, into names (when whole).
static dsh_parts_status_t
s_add (dsh_parts_t *parts, s_part_t *part, const char *key, int64_t now_ms, char *names, size_t names_size,
       uint64_t *concurrency)
{
    zchunk_t *set = NULL;
    uint64_t stated = 0;
    char reason [256];
    dsh_parts_status_t status = dsh_parts_add (parts, &part->presence, key, now_ms, &set, &stated,
                                               reason, sizeof (reason));
    if (names)
        *names = '\0';
    if (status == DSH_PARTS_WHOLE) {
        assert_non_null (set);
        char error [256];
        dsh_doc_t *doc = dsh_doc_new (zchunk_data (set), zchunk_size (set), error, sizeof (error));
        assert_non_null (doc);
        const msgpack_object *root = dsh_doc_root (doc);
        assert_int_equal (root->type, MSGPACK_OBJECT_ARRAY);
        for (uint32_t index = 0; index < root->via.array.size; index++) {
            const msgpack_object *name = dsh_map_get (&root->via.array.ptr [index], "name");
            assert_non_null (name);
            size_t used = strlen (names);
            snprintf (names + used, names_size - used, "%s%.*s", used? " ": "",
                      (int) name->via.str.size, name->via.str.ptr);
        }
        dsh_doc_destroy (&doc);
        zchunk_destroy (&set);
    }
    else {
        assert_null (set);
        if (status != DSH_PARTS_HELD)
            assert_true (strlen (reason) > 0);
    }
    if (concurrency)
        *concurrency = stated;
    return status;
}

//  Adds a part made of its arguments, and destroys it.
static dsh_parts_status_t
s_add_new (dsh_parts_t *parts, const char *component, uint64_t generation, int part, int count,
           const char *names, char *whole, size_t whole_size)
{
    s_part_t *made = s_part (component, generation, part, count, names);
    dsh_parts_status_t status = s_add (parts, made, NULL, 0, whole, whole_size, NULL);
    s_part_destroy (&made);
    return status;
}

static void
test_whole_in_part_order (void **state)
{
    (void) state;
    dsh_parts_t *parts = dsh_parts_new (1024 * 1024, 16 * 1024 * 1024);
    char names [256];
    //  Parts 0 and 2 of 3: nothing whole yet
    s_part_t *first = s_part_padded ("big", 7, 0, 3, "a b", 1, 12);
    assert_int_equal (s_add (parts, first, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&first);
    assert_int_equal (s_add_new (parts, "big", 7, 2, 3, "e", names, sizeof (names)), DSH_PARTS_HELD);
    assert_int_equal (dsh_parts_size (parts), 1);
    assert_true (dsh_parts_bytes (parts) > 0);
    //  A repeat changes nothing
    assert_int_equal (s_add_new (parts, "big", 7, 2, 3, "x", names, sizeof (names)), DSH_PARTS_IGNORED);
    //  Part 1: the set, in part order, with part 0's concurrency
    s_part_t *middle = s_part_padded ("big", 7, 1, 3, "c d", 1, 99);
    uint64_t concurrency = 0;
    assert_int_equal (s_add (parts, middle, NULL, 0, names, sizeof (names), &concurrency), DSH_PARTS_WHOLE);
    s_part_destroy (&middle);
    assert_string_equal (names, "a b c d e");
    assert_int_equal (concurrency, 12);
    assert_int_equal (dsh_parts_size (parts), 0);
    assert_int_equal (dsh_parts_bytes (parts), 0);
    //  Empty slices are slices: a set of no tools in two parts
    assert_int_equal (s_add_new (parts, "none", 1, 1, 2, "", names, sizeof (names)), DSH_PARTS_HELD);
    assert_int_equal (s_add_new (parts, "none", 1, 0, 2, "", names, sizeof (names)), DSH_PARTS_WHOLE);
    assert_string_equal (names, "");
    //  Components assemble apart
    assert_int_equal (s_add_new (parts, "one", 1, 0, 2, "a", names, sizeof (names)), DSH_PARTS_HELD);
    assert_int_equal (s_add_new (parts, "two", 1, 1, 2, "z", names, sizeof (names)), DSH_PARTS_HELD);
    assert_int_equal (s_add_new (parts, "one", 1, 1, 2, "b", names, sizeof (names)), DSH_PARTS_WHOLE);
    assert_string_equal (names, "a b");
    assert_int_equal (dsh_parts_size (parts), 1);
    dsh_parts_destroy (&parts);
    dsh_parts_destroy (&parts);
}

static void
test_generations_and_counts (void **state)
{
    (void) state;
    dsh_parts_t *parts = dsh_parts_new (1024 * 1024, 16 * 1024 * 1024);
    char names [256];
    //  A newer generation replaces the assembly: the old parts are gone
    assert_int_equal (s_add_new (parts, "c", 5, 0, 2, "old0", names, sizeof (names)), DSH_PARTS_HELD);
    assert_int_equal (s_add_new (parts, "c", 6, 1, 2, "new1", names, sizeof (names)), DSH_PARTS_HELD);
    //  ... and an older one is ignored
    assert_int_equal (s_add_new (parts, "c", 5, 1, 2, "old1", names, sizeof (names)), DSH_PARTS_IGNORED);
    assert_int_equal (s_add_new (parts, "c", 6, 0, 2, "new0", names, sizeof (names)), DSH_PARTS_WHOLE);
    assert_string_equal (names, "new0 new1");

    //  Another count of parts at the same generation drops the assembly
    assert_int_equal (s_add_new (parts, "c", 7, 0, 3, "a", names, sizeof (names)), DSH_PARTS_HELD);
    assert_int_equal (s_add_new (parts, "c", 7, 1, 2, "b", names, sizeof (names)), DSH_PARTS_DROPPED);
    assert_int_equal (dsh_parts_size (parts), 0);
    assert_int_equal (dsh_parts_bytes (parts), 0);
    assert_int_equal (s_add_new (parts, "c", 7, 1, 3, "b", names, sizeof (names)), DSH_PARTS_HELD);

    //  A whole ANNOUNCE (or a WITHDRAW) of the same or a newer generation
    //  forgets it; of an older one, not
    dsh_parts_forget (parts, "c", 6);
    assert_int_equal (dsh_parts_size (parts), 1);
    dsh_parts_forget (parts, "c", 7);
    assert_int_equal (dsh_parts_size (parts), 0);
    assert_int_equal (s_add_new (parts, "c", 8, 1, 3, "b", names, sizeof (names)), DSH_PARTS_HELD);
    dsh_parts_forget (parts, "other", UINT64_MAX);
    assert_int_equal (dsh_parts_size (parts), 1);
    dsh_parts_forget (parts, "c", UINT64_MAX);
    assert_int_equal (dsh_parts_size (parts), 0);
    assert_int_equal (dsh_parts_bytes (parts), 0);
    dsh_parts_destroy (&parts);
}

//  Under CURVE every part of a set comes from the key of its first part
static void
test_one_key (void **state)
{
    (void) state;
    dsh_parts_t *parts = dsh_parts_new (1024 * 1024, 16 * 1024 * 1024);
    char names [256];
    s_part_t *part = s_part ("k", 1, 0, 2, "a");
    assert_int_equal (s_add (parts, part, "KEYA", 0, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    part = s_part ("k", 1, 1, 2, "b");
    assert_int_equal (s_add (parts, part, "KEYB", 0, names, sizeof (names), NULL), DSH_PARTS_FOREIGN);
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_FOREIGN);
    assert_int_equal (s_add (parts, part, "KEYA", 0, names, sizeof (names), NULL), DSH_PARTS_WHOLE);
    assert_string_equal (names, "a b");
    s_part_destroy (&part);
    dsh_parts_destroy (&parts);
}

static void
test_bounds (void **state)
{
    (void) state;
    char names [256];
    //  One set's entries: a part that takes them past the bound drops it
    dsh_parts_t *parts = dsh_parts_new (3000, 1024 * 1024);
    s_part_t *part = s_part_padded ("big", 1, 0, 3, "a", 1000, 0);
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    part = s_part_padded ("big", 1, 1, 3, "b", 1000, 0);
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    part = s_part_padded ("big", 1, 2, 3, "c", 1000, 0);
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_DROPPED);
    s_part_destroy (&part);
    assert_int_equal (dsh_parts_size (parts), 0);
    assert_int_equal (dsh_parts_bytes (parts), 0);
    dsh_parts_destroy (&parts);

    //  All sets together, their slots counted as soon as they begin
    parts = dsh_parts_new (1024 * 1024, 4096);
    part = s_part_padded ("first", 1, 0, 2, "a", 2000, 0);
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    size_t held = dsh_parts_bytes (parts);
    assert_true (held > 2000 && held < 4096);
    part = s_part_padded ("second", 1, 0, 2, "b", 2000, 0);
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_DROPPED);
    s_part_destroy (&part);
    assert_int_equal (dsh_parts_size (parts), 1);
    assert_int_equal (dsh_parts_bytes (parts), held);
    //  So many parts that their slots alone are over the bound
    part = s_part ("slots", 1, 0, 100000, "a");
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_DROPPED);
    s_part_destroy (&part);
    assert_int_equal (dsh_parts_bytes (parts), held);
    //  The first set can still finish, and frees what it held
    part = s_part ("first", 1, 1, 2, "z");
    assert_int_equal (s_add (parts, part, NULL, 0, names, sizeof (names), NULL), DSH_PARTS_WHOLE);
    s_part_destroy (&part);
    assert_string_equal (names, "a z");
    assert_int_equal (dsh_parts_bytes (parts), 0);
    dsh_parts_destroy (&parts);
}

static void
test_expire (void **state)
{
    (void) state;
    dsh_parts_t *parts = dsh_parts_new (1024 * 1024, 16 * 1024 * 1024);
    char names [256];
    s_part_t *part = s_part ("early", 1, 0, 3, "a");
    assert_int_equal (s_add (parts, part, NULL, 1000, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    part = s_part ("late", 1, 0, 2, "a");
    assert_int_equal (s_add (parts, part, NULL, 2500, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    //  A part that comes later does not make its assembly younger
    part = s_part ("early", 1, 1, 3, "b");
    assert_int_equal (s_add (parts, part, NULL, 3400, names, sizeof (names), NULL), DSH_PARTS_HELD);
    s_part_destroy (&part);
    zlistx_t *expired = dsh_parts_expire (parts, 3500, 3000);
    assert_int_equal (zlistx_size (expired), 0);
    zlistx_destroy (&expired);
    expired = dsh_parts_expire (parts, 4001, 3000);
    assert_int_equal (zlistx_size (expired), 1);
    assert_string_equal ((char *) zlistx_first (expired), "early");
    zlistx_destroy (&expired);
    assert_int_equal (dsh_parts_size (parts), 1);
    expired = dsh_parts_expire (parts, 6000, 3000);
    assert_int_equal (zlistx_size (expired), 1);
    zlistx_destroy (&expired);
    assert_int_equal (dsh_parts_size (parts), 0);
    assert_int_equal (dsh_parts_bytes (parts), 0);
    dsh_parts_destroy (&parts);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_whole_in_part_order),
        cmocka_unit_test (test_generations_and_counts),
        cmocka_unit_test (test_one_key),
        cmocka_unit_test (test_bounds),
        cmocka_unit_test (test_expire),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
