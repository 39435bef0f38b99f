/*  =========================================================================
    test_doc - dsh_doc: the bounded msgpack scanner, skipper, decoder and
    canonical packer, against well-formed, hostile, truncated and random input
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "dsh_doc.h"

//  A packer writing into a fresh buffer; the test destroys the buffer.
typedef struct {
    msgpack_sbuffer buffer;
    msgpack_packer packer;
} packed_t;

static void
s_packed_init (packed_t *packed)
{
    msgpack_sbuffer_init (&packed->buffer);
    msgpack_packer_init (&packed->packer, &packed->buffer, msgpack_sbuffer_write);
}

//  Decodes bytes that must be accepted, failing the test with the reason.
static dsh_doc_t *
s_doc_ok (const void *data, size_t size)
{
    char error [256] = "";
    dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof error);
    if (!doc)
        fail_msg ("rejected: %s", error);
    assert_string_equal (error, "");
    return doc;
}

//  Expects bytes to be refused with exactly reason (or any reason if NULL).
static void
s_doc_refused (const void *data, size_t size, const char *reason)
{
    char error [256] = "";
    dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof error);
    assert_null (doc);
    assert_true (strlen (error) > 0);
    assert_null (strchr (error, '\n'));
    if (reason)
        assert_string_equal (error, reason);
}

static void
test_scalars (void **state)
{
    (void) state;
    packed_t packed;
    s_packed_init (&packed);
    msgpack_packer *pk = &packed.packer;
    //  One array of every scalar msgpack-c can produce, in a known order.
    msgpack_pack_array (pk, 21);
    msgpack_pack_nil (pk);
    msgpack_pack_true (pk);
    msgpack_pack_false (pk);
    msgpack_pack_fix_uint8 (pk, 200);
    msgpack_pack_fix_uint16 (pk, 60000);
    msgpack_pack_fix_uint32 (pk, 4000000000u);
    msgpack_pack_fix_uint64 (pk, UINT64_MAX);
    msgpack_pack_fix_int8 (pk, -100);
    msgpack_pack_fix_int16 (pk, -30000);
    msgpack_pack_fix_int32 (pk, -2000000000);
    msgpack_pack_fix_int64 (pk, INT64_MIN);
    msgpack_pack_float (pk, 1.5f);
    msgpack_pack_double (pk, -2.25);
    msgpack_pack_int (pk, 7);           //  positive fixint
    msgpack_pack_int (pk, -7);          //  negative fixint
    msgpack_pack_str_with_body (pk, "hi", 2);
    char long_text [300];
    memset (long_text, 'x', sizeof long_text);
    msgpack_pack_str_with_body (pk, long_text, 40);             //  str8
    msgpack_pack_str_with_body (pk, long_text, sizeof long_text);  //  str16
    msgpack_pack_bin_with_body (pk, "\x00\x01", 2);             //  bin8
    msgpack_pack_bin_with_body (pk, long_text, sizeof long_text);  //  bin16
    msgpack_pack_ext_with_body (pk, "abcd", 4, 5);              //  fixext4
    dsh_doc_t *doc = s_doc_ok (packed.buffer.data, packed.buffer.size);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (root->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (root->via.array.size, 21);
    const msgpack_object *item = root->via.array.ptr;
    assert_int_equal (item [0].type, MSGPACK_OBJECT_NIL);
    assert_int_equal (item [1].type, MSGPACK_OBJECT_BOOLEAN);
    assert_true (item [1].via.boolean);
    assert_false (item [2].via.boolean);
    assert_int_equal (item [3].via.u64, 200);
    assert_int_equal (item [4].via.u64, 60000);
    assert_int_equal (item [5].via.u64, 4000000000u);
    assert_true (item [6].via.u64 == UINT64_MAX);
    assert_int_equal (item [7].via.i64, -100);
    assert_int_equal (item [8].via.i64, -30000);
    assert_int_equal (item [9].via.i64, -2000000000);
    assert_true (item [10].via.i64 == INT64_MIN);
    assert_int_equal (item [11].type, MSGPACK_OBJECT_FLOAT32);
    assert_true (item [11].via.f64 == 1.5);
    assert_int_equal (item [12].type, MSGPACK_OBJECT_FLOAT64);
    assert_true (item [12].via.f64 == -2.25);
    assert_int_equal (item [13].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal (item [13].via.u64, 7);
    assert_int_equal (item [14].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    assert_int_equal (item [14].via.i64, -7);
    assert_true (dsh_str_eq (&item [15], "hi"));
    assert_int_equal (item [16].via.str.size, 40);
    assert_int_equal (item [17].via.str.size, 300);
    assert_int_equal (item [18].type, MSGPACK_OBJECT_BIN);
    assert_memory_equal (item [18].via.bin.ptr, "\x00\x01", 2);
    assert_int_equal (item [19].via.bin.size, 300);
    assert_int_equal (item [20].type, MSGPACK_OBJECT_EXT);
    assert_int_equal (item [20].via.ext.type, 5);
    assert_memory_equal (item [20].via.ext.ptr, "abcd", 4);
    //  Strings are borrowed from the input bytes.
    assert_true (item [15].via.str.ptr >= packed.buffer.data
              && item [15].via.str.ptr < packed.buffer.data + packed.buffer.size);
    dsh_doc_destroy (&doc);
    assert_null (doc);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&packed.buffer);
}

static void
test_wide_headers (void **state)
{
    (void) state;
    //  Headers msgpack-c only writes for large values, built by hand.
    static const uint8_t str32 [] = { 0xdb, 0, 0, 0, 2, 'o', 'k' };
    static const uint8_t bin32 [] = { 0xc6, 0, 0, 0, 1, 0x7f };
    static const uint8_t array16 [] = { 0xdc, 0, 2, 0x01, 0xc0 };
    static const uint8_t array32 [] = { 0xdd, 0, 0, 0, 1, 0xc3 };
    static const uint8_t map16 [] = { 0xde, 0, 1, 0xa1, 'k', 0x02 };
    static const uint8_t map32 [] = { 0xdf, 0, 0, 0, 1, 0xa1, 'k', 0x03 };
    static const uint8_t ext8 [] = { 0xc7, 3, 9, 'a', 'b', 'c' };
    static const uint8_t ext16 [] = { 0xc8, 0, 1, 9, 'a' };
    static const uint8_t ext32 [] = { 0xc9, 0, 0, 0, 0, 9 };
    static const uint8_t fixext16 [] = { 0xd8, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
    static const uint8_t float32 [] = { 0xca, 0x3f, 0xc0, 0, 0 };

    dsh_doc_t *doc = s_doc_ok (str32, sizeof str32);
    assert_true (dsh_str_eq (dsh_doc_root (doc), "ok"));
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (bin32, sizeof bin32);
    assert_int_equal (dsh_doc_root (doc)->via.bin.size, 1);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (array16, sizeof array16);
    assert_int_equal (dsh_doc_root (doc)->via.array.size, 2);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (array32, sizeof array32);
    assert_int_equal (dsh_doc_root (doc)->via.array.size, 1);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (map16, sizeof map16);
    assert_int_equal (dsh_map_get (dsh_doc_root (doc), "k")->via.u64, 2);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (map32, sizeof map32);
    assert_int_equal (dsh_map_get (dsh_doc_root (doc), "k")->via.u64, 3);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (ext8, sizeof ext8);
    assert_int_equal (dsh_doc_root (doc)->via.ext.size, 3);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (ext16, sizeof ext16);
    assert_int_equal (dsh_doc_root (doc)->via.ext.size, 1);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (ext32, sizeof ext32);
    assert_int_equal (dsh_doc_root (doc)->via.ext.size, 0);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (fixext16, sizeof fixext16);
    assert_int_equal (dsh_doc_root (doc)->via.ext.size, 16);
    dsh_doc_destroy (&doc);
    doc = s_doc_ok (float32, sizeof float32);
    assert_true (dsh_doc_root (doc)->via.f64 == 1.5);
    dsh_doc_destroy (&doc);
}

static void
test_nested_and_lookup (void **state)
{
    (void) state;
    packed_t packed;
    s_packed_init (&packed);
    msgpack_packer *pk = &packed.packer;
    msgpack_pack_map (pk, 4);
    dsh_pack_cstr (pk, "name");
    dsh_pack_cstr (pk, "echo");
    dsh_pack_cstr (pk, "args");
    msgpack_pack_array (pk, 2);
    msgpack_pack_map (pk, 1);
    dsh_pack_cstr (pk, "deep");
    msgpack_pack_array (pk, 0);
    msgpack_pack_int (pk, 9);
    msgpack_pack_int (pk, 5);           //  an int key: skipped by dsh_map_get
    dsh_pack_cstr (pk, "five");
    dsh_pack_cstr (pk, "nul");
    msgpack_pack_str_with_body (pk, "a\0b", 3);

    dsh_doc_t *doc = s_doc_ok (packed.buffer.data, packed.buffer.size);
    const msgpack_object *root = dsh_doc_root (doc);
    const msgpack_object *name = dsh_map_get (root, "name");
    assert_non_null (name);
    assert_true (dsh_str_eq (name, "echo"));
    assert_false (dsh_str_eq (name, "ech"));
    assert_false (dsh_str_eq (name, "echoo"));
    assert_false (dsh_str_eq (NULL, "echo"));
    assert_null (dsh_map_get (root, "nam"));
    assert_null (dsh_map_get (root, "names"));
    assert_null (dsh_map_get (root, "five"));
    assert_null (dsh_map_get (name, "name"));
    assert_null (dsh_map_get (NULL, "name"));

    const msgpack_object *args = dsh_map_get (root, "args");
    assert_int_equal (args->type, MSGPACK_OBJECT_ARRAY);
    const msgpack_object *deep = dsh_map_get (&args->via.array.ptr [0], "deep");
    assert_int_equal (deep->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (deep->via.array.size, 0);
    assert_int_equal (args->via.array.ptr [1].via.u64, 9);

    char *copy = dsh_doc_strdup (doc, name);
    assert_string_equal (copy, "echo");
    assert_ptr_not_equal (copy, name->via.str.ptr);
    assert_null (dsh_doc_strdup (doc, args));
    assert_null (dsh_doc_strdup (doc, NULL));
    assert_null (dsh_doc_strdup (doc, dsh_map_get (root, "nul")));
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&packed.buffer);
}

//  n nested arrays (or maps keyed by 0), the innermost one empty.
static size_t
s_nested (uint8_t *bytes, int levels, bool maps)
{
    size_t size = 0;
    for (int level = 0; level < levels - 1; level++) {
        bytes [size++] = maps ? 0x81 : 0x91;
        if (maps)
            bytes [size++] = 0x00;
    }
    bytes [size++] = maps ? 0x80 : 0x90;
    return size;
}

static void
test_depth (void **state)
{
    (void) state;
    uint8_t bytes [128];
    char error [128];
    for (int maps = 0; maps < 2; maps++) {
        size_t size = s_nested (bytes, DSH_DOC_MAX_DEPTH, maps);
        dsh_doc_t *doc = s_doc_ok (bytes, size);
        dsh_doc_destroy (&doc);
        size = s_nested (bytes, DSH_DOC_MAX_DEPTH + 1, maps);
        s_doc_refused (bytes, size, "nesting deeper than 24");
        size = s_nested (bytes, 40, maps);
        s_doc_refused (bytes, size, "nesting deeper than 24");
    }
    //  The scanner's own limit: a scalar root is depth 0, [] is depth 1.
    assert_int_equal (dsh_msgpack_scan ("\x05", 1, 0, error, sizeof error), 0);
    assert_int_equal (dsh_msgpack_scan ("\x90", 1, 0, error, sizeof error), -1);
    assert_string_equal (error, "nesting deeper than 0");
    assert_int_equal (dsh_msgpack_scan ("\x90", 1, 1, error, sizeof error), 0);
    assert_int_equal (dsh_msgpack_scan ("\x91\x90", 2, 1, error, sizeof error), -1);
    //  A larger limit than dsh's own is honoured by the scanner.
    size_t size = s_nested (bytes, 40, false);
    assert_int_equal (dsh_msgpack_scan (bytes, size, 40, error, sizeof error), 0);
    assert_int_equal (dsh_msgpack_scan (bytes, size, 39, error, sizeof error), -1);
}

static void
test_hostile_counts (void **state)
{
    (void) state;
    s_doc_refused ("\xdd\xff\xff\xff\xff", 5,
                   "array of 4294967295 elements exceeds the 0 bytes left");
    s_doc_refused ("\xdf\xff\xff\xff\xff", 5,
                   "map of 4294967295 entries exceeds the 0 bytes left");
    s_doc_refused ("\xdc\xff\xff\x01\x02", 5,
                   "array of 65535 elements exceeds the 2 bytes left");
    //  A map of 2 needs 4 bytes, not 2.
    s_doc_refused ("\x82\x01\x02\x03", 4, "map of 2 entries exceeds the 3 bytes left");
    s_doc_refused ("\xdb\x00\x00\x00\x10" "ab", 7, "truncated msgpack");
    s_doc_refused ("\xdb\xff\xff\xff\xff", 5, "truncated msgpack");
    s_doc_refused ("\xc6\xff\xff\xff\xff" "a", 6, "truncated msgpack");
    s_doc_refused ("\xc9\xff\xff\xff\xff\x01", 6, "truncated msgpack");
    s_doc_refused ("\xc1", 1, "invalid type byte 0xc1");
    s_doc_refused ("\x92\x01\xc1", 3, "invalid type byte 0xc1");
    s_doc_refused ("", 0, "empty input");
    s_doc_refused ("\x01\x02", 2, "trailing bytes after the object");
    s_doc_refused ("\x90\x90", 2, "trailing bytes after the object");
    s_doc_refused ("\x91", 1, "array of 1 elements exceeds the 0 bytes left");
    s_doc_refused ("\xcf\x00", 2, "truncated msgpack");
    //  A small error buffer truncates the reason but does not overflow.
    char tiny [8];
    assert_int_equal (dsh_msgpack_scan ("\xc1", 1, 24, tiny, sizeof tiny), -1);
    assert_string_equal (tiny, "invalid");
    assert_int_equal (dsh_msgpack_scan ("\xc1", 1, 24, NULL, 0), -1);
}

//  A document with one of most kinds of value, for cutting and mutating.
static void
s_pack_sample (packed_t *packed)
{
    s_packed_init (packed);
    msgpack_packer *pk = &packed->packer;
    msgpack_pack_map (pk, 6);
    dsh_pack_cstr (pk, "callId");
    dsh_pack_cstr (pk, "c-123");
    dsh_pack_cstr (pk, "name");
    dsh_pack_cstr (pk, "search");
    dsh_pack_cstr (pk, "arguments");
    msgpack_pack_map (pk, 3);
    dsh_pack_cstr (pk, "query");
    dsh_pack_cstr (pk, "zeromq msgpack");
    dsh_pack_cstr (pk, "limits");
    msgpack_pack_array (pk, 4);
    msgpack_pack_int (pk, 1);
    msgpack_pack_int64 (pk, -70000);
    msgpack_pack_uint64 (pk, UINT64_MAX);
    msgpack_pack_double (pk, 0.125);
    dsh_pack_cstr (pk, "flags");
    msgpack_pack_array (pk, 3);
    msgpack_pack_true (pk);
    msgpack_pack_false (pk);
    msgpack_pack_nil (pk);
    dsh_pack_cstr (pk, "blob");
    msgpack_pack_bin_with_body (pk, "\x00\xff\x10", 3);
    dsh_pack_cstr (pk, "ext");
    msgpack_pack_ext_with_body (pk, "xyz", 3, 1);
    dsh_pack_cstr (pk, "f32");
    msgpack_pack_float (pk, 2.5f);
}

static void
test_truncated_everywhere (void **state)
{
    (void) state;
    packed_t packed;
    s_pack_sample (&packed);
    dsh_doc_t *doc = s_doc_ok (packed.buffer.data, packed.buffer.size);
    dsh_doc_destroy (&doc);
    for (size_t size = 0; size < packed.buffer.size; size++) {
        //  A fresh copy of exactly size bytes, so ASan sees any over-read.
        uint8_t *cut = (uint8_t *) malloc (size ? size : 1);
        memcpy (cut, packed.buffer.data, size);
        s_doc_refused (cut, size, NULL);
        free (cut);
    }
    msgpack_sbuffer_destroy (&packed.buffer);
}

//  Packs a one-entry map {key: 1} after count - 1 other entries, with the
//  key packed by pack_key; the bytes are the test's to free.
static void
s_pack_keys (packed_t *packed, uint32_t count, void (*pack_key) (msgpack_packer *pk))
{
    s_packed_init (packed);
    msgpack_pack_map (&packed->packer, count);
    for (uint32_t index = 0; index + 1 < count; index++) {
        char key [16];
        snprintf (key, sizeof key, "k%u", index);
        dsh_pack_cstr (&packed->packer, key);
        msgpack_pack_true (&packed->packer);
    }
    pack_key (&packed->packer);
    msgpack_pack_int (&packed->packer, 1);
}

static void s_key_k0 (msgpack_packer *pk) { dsh_pack_cstr (pk, "k0"); }
static void s_key_k0_str8 (msgpack_packer *pk) { msgpack_pack_str_with_body (pk, "k0", 2); }
static void s_key_k0_bin (msgpack_packer *pk) { msgpack_pack_bin_with_body (pk, "k0", 2); }
static void s_key_k7 (msgpack_packer *pk) { dsh_pack_cstr (pk, "k7"); }
static void s_key_fresh (msgpack_packer *pk) { dsh_pack_cstr (pk, "fresh"); }

//  Every map of a document, at any depth, is refused when a key repeats:
//  the one rule that keeps a checked message the message that is used
static void
test_repeated_keys (void **state)
{
    (void) state;
    packed_t packed;
    //  At the root, in a nested map, in a map inside an array
    s_pack_keys (&packed, 3, s_key_k0);
    s_doc_refused (packed.buffer.data, packed.buffer.size, "duplicate key \"k0\" in the map at body");
    msgpack_sbuffer_destroy (&packed.buffer);

    s_packed_init (&packed);
    msgpack_pack_map (&packed.packer, 2);
    dsh_pack_cstr (&packed.packer, "callId");
    dsh_pack_cstr (&packed.packer, "c-1");
    dsh_pack_cstr (&packed.packer, "arguments");
    msgpack_pack_map (&packed.packer, 2);
    dsh_pack_cstr (&packed.packer, "path");
    msgpack_pack_array (&packed.packer, 1);
    msgpack_pack_map (&packed.packer, 2);
    dsh_pack_cstr (&packed.packer, "p");
    msgpack_pack_nil (&packed.packer);
    dsh_pack_cstr (&packed.packer, "p");
    msgpack_pack_nil (&packed.packer);
    dsh_pack_cstr (&packed.packer, "content");
    msgpack_pack_nil (&packed.packer);
    s_doc_refused (packed.buffer.data, packed.buffer.size,
                   "duplicate key \"p\" in the map at body.arguments.path[0]");
    msgpack_sbuffer_destroy (&packed.buffer);

    //  One key in two spellings (fixstr and str8), as str and bin, and in
    //  a map large enough to be sorted rather than compared pairwise
    s_pack_keys (&packed, 2, s_key_k0_str8);
    s_doc_refused (packed.buffer.data, packed.buffer.size, NULL);
    msgpack_sbuffer_destroy (&packed.buffer);
    s_pack_keys (&packed, 2, s_key_k0_bin);
    s_doc_refused (packed.buffer.data, packed.buffer.size, NULL);
    msgpack_sbuffer_destroy (&packed.buffer);
    s_pack_keys (&packed, 5000, s_key_k7);
    s_doc_refused (packed.buffer.data, packed.buffer.size, "duplicate key \"k7\" in the map at body");
    msgpack_sbuffer_destroy (&packed.buffer);
    s_pack_keys (&packed, 5000, s_key_fresh);
    dsh_doc_t *doc = s_doc_ok (packed.buffer.data, packed.buffer.size);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&packed.buffer);

    //  Numbers: 1 and 1.0, 1 and "1" read as one key elsewhere; 1 and 2 do not
    static const uint8_t int_and_float [] = { 0x82, 0x01, 0xc0, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xc0 };
    s_doc_refused (int_and_float, sizeof int_and_float, "duplicate key \"1\" in the map at body");
    static const uint8_t int_and_str [] = { 0x82, 0x01, 0xc0, 0xa1, '1', 0xc0 };
    s_doc_refused (int_and_str, sizeof int_and_str, NULL);
    static const uint8_t distinct [] = { 0x83, 0x01, 0xc0, 0x02, 0xc0, 0xa1, '3', 0xc0 };
    doc = s_doc_ok (distinct, sizeof distinct);
    dsh_doc_destroy (&doc);
    //  Floats beyond the integers compare by their digits (found by
    //  fuzz_repeat: the cast to an integer was undefined there)
    static const uint8_t huge_twice [] = { 0x82, 0xcb, 0xe7, 0x4c, 0, 0, 0, 0, 0, 0, 0xc0,
                                           0xcb, 0xe7, 0x4c, 0, 0, 0, 0, 0, 0, 0xc0 };
    s_doc_refused (huge_twice, sizeof huge_twice, NULL);
    static const uint8_t huge_two [] = { 0x82, 0xcb, 0xe7, 0x4c, 0, 0, 0, 0, 0, 0, 0xc0,
                                         0xcb, 0x67, 0x4c, 0, 0, 0, 0, 0, 0, 0xc0 };
    doc = s_doc_ok (huge_two, sizeof huge_two);
    dsh_doc_destroy (&doc);
    //  ext keys of one type and bytes repeat; of two types they do not
    static const uint8_t ext_same [] = { 0x82, 0xd4, 0x05, 0x07, 0xc0, 0xd4, 0x05, 0x07, 0xc0 };
    s_doc_refused (ext_same, sizeof ext_same, NULL);
    static const uint8_t ext_types [] = { 0x82, 0xd4, 0x05, 0x07, 0xc0, 0xd4, 0x06, 0x07, 0xc0 };
    doc = s_doc_ok (ext_types, sizeof ext_types);
    dsh_doc_destroy (&doc);
    //  A container as a key cannot be looked up by anyone
    static const uint8_t array_key [] = { 0x81, 0x90, 0xc0 };
    s_doc_refused (array_key, sizeof array_key, "a key of the map at body is an array or a map");
    //  A hostile key is quoted safely in the reason
    static const uint8_t quoted [] = { 0x82, 0xa2, '"', 0xff, 0xc0, 0xa2, '"', 0xff, 0xc0 };
    s_doc_refused (quoted, sizeof quoted, "duplicate key \"\\x22\\xff\" in the map at body");
}

static void
test_trailing_bytes (void **state)
{
    (void) state;
    packed_t packed;
    s_pack_sample (&packed);
    msgpack_pack_nil (&packed.packer);
    s_doc_refused (packed.buffer.data, packed.buffer.size, "trailing bytes after the object");
    msgpack_sbuffer_destroy (&packed.buffer);
}

//  True if obj holds a map with two keys msgpack-c calls equal, or an array
//  or a map as a key: a plain pairwise check, to hold dsh_doc's to.
static bool
s_object_repeats (const msgpack_object *obj)
{
    if (obj->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t index = 0; index < obj->via.array.size; index++)
            if (s_object_repeats (&obj->via.array.ptr [index]))
                return true;
    }
    else
    if (obj->type == MSGPACK_OBJECT_MAP) {
        const msgpack_object_map *map = &obj->via.map;
        for (uint32_t first = 0; first < map->size; first++) {
            msgpack_object_type type = map->ptr [first].key.type;
            if (type == MSGPACK_OBJECT_ARRAY || type == MSGPACK_OBJECT_MAP)
                return true;
            for (uint32_t second = first + 1; second < map->size; second++)
                if (msgpack_object_equal (map->ptr [first].key, map->ptr [second].key))
                    return true;
            if (s_object_repeats (&map->ptr [first].val))
                return true;
        }
    }
    return false;
}

//  True if bytes (accepted by the scan) decode, by msgpack-c alone, to a
//  tree with a repeated key. A key dsh_doc calls one with another of
//  another type (1 and "1") is not caught here: the caller allows for it.
static bool
s_repeats_a_key (const uint8_t *bytes, size_t size)
{
    msgpack_zone zone;
    msgpack_zone_init (&zone, 1024);
    msgpack_object root;
    size_t offset = 0;
    bool repeats = msgpack_unpack ((const char *) bytes, size, &offset, &zone, &root) == MSGPACK_UNPACK_SUCCESS
                && s_object_repeats (&root);
    msgpack_zone_destroy (&zone);
    return repeats;
}

//  Accepted by the scan means decoded by msgpack-c too (unless a map
//  repeats a key), and the tree it decodes packs back to the same bytes.
static void
s_check_random (const uint8_t *bytes, size_t size, size_t *accepted)
{
    char error [128];
    int rc = dsh_msgpack_scan (bytes, size, DSH_DOC_MAX_DEPTH, error, sizeof error);
    dsh_doc_t *doc = dsh_doc_new (bytes, size, error, sizeof error);
    //  skip agrees with scan: a whole accepted input is one object, and
    //  the object skip finds is accepted on its own
    size_t skipped = dsh_msgpack_skip (bytes, size);
    assert_true (skipped <= size);
    if (rc == 0)
        assert_int_equal (skipped, size);
    if (skipped)
        assert_int_equal (dsh_msgpack_scan (bytes, skipped, DSH_DOC_MAX_DEPTH, error, sizeof error), 0);
    bool repeats = rc == 0 && s_repeats_a_key (bytes, size);
    if (repeats) {
        //  Well-formed, but a map repeats a key: refused, and said so
        assert_null (doc);
        assert_true (strstr (error, "duplicate key") || strstr (error, "is an array or a map"));
    }
    else
    if (rc == 0) {
        if (!doc && (strstr (error, "duplicate key") || strstr (error, "is an array or a map")))
            return;             //  keys of two types that read as one (1 and "1")
        if (!doc)
            fail_msg ("scan accepted but decode refused: %s", error);
        (*accepted)++;
        packed_t repacked;
        s_packed_init (&repacked);
        msgpack_pack_object (&repacked.packer, *dsh_doc_root (doc));
        assert_true (repacked.buffer.size <= size);
        msgpack_sbuffer_destroy (&repacked.buffer);
        dsh_doc_destroy (&doc);
    }
    else
        assert_null (doc);
}

static void
test_random_bytes (void **state)
{
    (void) state;
    srand (20240611);
    uint8_t bytes [24];
    size_t accepted = 0;
    for (int round = 0; round < 200000; round++) {
        size_t size = (size_t) (rand () % (int) sizeof bytes) + 1;
        for (size_t index = 0; index < size; index++)
            bytes [index] = (uint8_t) rand ();
        //  Bias towards container and length headers, the interesting ones.
        if (rand () % 2)
            bytes [0] = (uint8_t) (0xc4 + rand () % 28);
        uint8_t *exact = (uint8_t *) malloc (size);
        memcpy (exact, bytes, size);
        s_check_random (exact, size, &accepted);
        free (exact);
    }
    assert_true (accepted > 1000);
}

static void
test_mutations (void **state)
{
    (void) state;
    srand (1234567);
    packed_t packed;
    s_pack_sample (&packed);
    size_t size = packed.buffer.size;
    uint8_t *mutant = (uint8_t *) malloc (size);
    size_t accepted = 0;
    for (int round = 0; round < 100000; round++) {
        memcpy (mutant, packed.buffer.data, size);
        int changes = 1 + rand () % 3;
        for (int change = 0; change < changes; change++) {
            size_t at = (size_t) rand () % size;
            switch (rand () % 3) {
                case 0: mutant [at] = (uint8_t) rand (); break;
                case 1: mutant [at] ^= (uint8_t) (1 << (rand () % 8)); break;
                default: mutant [at] = (uint8_t) (0xc0 + rand () % 32); break;
            }
        }
        size_t cut = size - (rand () % 4 == 0 ? (size_t) rand () % size : 0);
        s_check_random (mutant, cut, &accepted);
    }
    assert_true (accepted > 100);
    free (mutant);
    msgpack_sbuffer_destroy (&packed.buffer);
}

//  Packs a map of the sample's keys in the order given by order[].
static void
s_pack_permuted (packed_t *packed, const int *order)
{
    static const char *keys [] = { "b", "a", "ab", "", "ba", "aa" };
    s_packed_init (packed);
    msgpack_packer *pk = &packed->packer;
    msgpack_pack_map (pk, 8);
    for (int index = 0; index < 6; index++) {
        int which = order [index];
        dsh_pack_cstr (pk, keys [which]);
        if (which == 0) {
            //  A nested map whose own keys also come permuted.
            msgpack_pack_map (pk, 2);
            dsh_pack_cstr (pk, order [0] == 0 ? "y" : "x");
            msgpack_pack_int (pk, order [0] == 0 ? 2 : 1);
            dsh_pack_cstr (pk, order [0] == 0 ? "x" : "y");
            msgpack_pack_int (pk, order [0] == 0 ? 1 : 2);
        }
        else
            msgpack_pack_int (pk, which);
    }
    //  Non-str keys in an order tied to the permutation.
    if (order [0] % 2) {
        msgpack_pack_int (pk, 7);
        msgpack_pack_int (pk, 70);
        msgpack_pack_int (pk, -3);
        msgpack_pack_int (pk, 99);
    }
    else {
        msgpack_pack_int (pk, -3);
        msgpack_pack_int (pk, 99);
        msgpack_pack_int (pk, 7);
        msgpack_pack_int (pk, 70);
    }
}

static void
s_canonical (const packed_t *packed, msgpack_sbuffer *out)
{
    dsh_doc_t *doc = s_doc_ok (packed->buffer.data, packed->buffer.size);
    msgpack_packer packer;
    msgpack_sbuffer_init (out);
    msgpack_packer_init (&packer, out, msgpack_sbuffer_write);
    assert_int_equal (dsh_pack_canonical (&packer, dsh_doc_root (doc)), 0);
    dsh_doc_destroy (&doc);
}

static void
test_canonical (void **state)
{
    (void) state;
    static const int orders [][6] = {
        { 0, 1, 2, 3, 4, 5 }, { 5, 4, 3, 2, 1, 0 }, { 3, 0, 5, 1, 4, 2 }, { 1, 3, 5, 0, 2, 4 }
    };
    msgpack_sbuffer first;
    packed_t packed;
    s_pack_permuted (&packed, orders [0]);
    s_canonical (&packed, &first);
    msgpack_sbuffer_destroy (&packed.buffer);
    for (size_t index = 1; index < sizeof orders / sizeof orders [0]; index++) {
        s_pack_permuted (&packed, orders [index]);
        msgpack_sbuffer other;
        s_canonical (&packed, &other);
        assert_int_equal (other.size, first.size);
        assert_memory_equal (other.data, first.data, first.size);
        msgpack_sbuffer_destroy (&other);
        msgpack_sbuffer_destroy (&packed.buffer);
    }
    //  The order itself: str keys by bytes, shorter first, then other keys.
    dsh_doc_t *doc = s_doc_ok (first.data, first.size);
    const msgpack_object *root = dsh_doc_root (doc);
    static const char *expected [] = { "", "a", "aa", "ab", "b", "ba" };
    for (int index = 0; index < 6; index++)
        assert_true (dsh_str_eq (&root->via.map.ptr [index].key, expected [index]));
    assert_int_equal (root->via.map.ptr [1].val.via.u64, 1);
    //  Other keys by their packed bytes: 7 (0x07) before -3 (0xfd)
    assert_int_equal (root->via.map.ptr [6].key.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal (root->via.map.ptr [7].key.type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    assert_int_equal (root->via.map.ptr [7].val.via.u64, 99);
    const msgpack_object *nested = dsh_map_get (root, "b");
    assert_true (dsh_str_eq (&nested->via.map.ptr [0].key, "x"));
    assert_true (dsh_str_eq (&nested->via.map.ptr [1].key, "y"));
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&first);
}

static void
test_canonical_depth (void **state)
{
    (void) state;
    //  A tree built in memory, not decoded, so no scan has bounded it.
    msgpack_object levels [DSH_DOC_MAX_DEPTH + 1];
    for (int index = 0; index <= DSH_DOC_MAX_DEPTH; index++) {
        levels [index].type = MSGPACK_OBJECT_ARRAY;
        levels [index].via.array.size = index < DSH_DOC_MAX_DEPTH ? 1 : 0;
        levels [index].via.array.ptr = index < DSH_DOC_MAX_DEPTH ? &levels [index + 1] : NULL;
    }
    packed_t packed;
    s_packed_init (&packed);
    assert_int_equal (dsh_pack_canonical (&packed.packer, &levels [0]), -1);
    assert_int_equal (packed.buffer.size, 0);
    assert_int_equal (dsh_pack_canonical (&packed.packer, &levels [1]), 0);
    assert_int_equal (packed.buffer.size, DSH_DOC_MAX_DEPTH);
    msgpack_sbuffer_destroy (&packed.buffer);
}

static void
test_skip (void **state)
{
    (void) state;
    packed_t packed;
    s_pack_sample (&packed);
    size_t sample_size = packed.buffer.size;
    assert_int_equal (dsh_msgpack_skip (packed.buffer.data, sample_size), sample_size);

    //  Only the first object counts; what follows it is not looked at
    msgpack_pack_nil (&packed.packer);
    msgpack_sbuffer_write (&packed.buffer, "\xc1\xdd\xff", 3);
    assert_int_equal (dsh_msgpack_skip (packed.buffer.data, packed.buffer.size), sample_size);

    //  Every cut of the sample is refused, in a buffer of exactly that size
    for (size_t size = 0; size < sample_size; size++) {
        uint8_t *cut = (uint8_t *) malloc (size? size: 1);
        memcpy (cut, packed.buffer.data, size);
        assert_int_equal (dsh_msgpack_skip (cut, size), 0);
        free (cut);
    }
    msgpack_sbuffer_destroy (&packed.buffer);

    //  Walking a map entry by entry finds each key's and value's bytes
    const char *map = "\x83\xa1" "a" "\x92\x01\xc4\x02xy" "\x07\xc0" "\xa1" "c" "\xd7\x05" "12345678";
    size_t map_size = 1 + 2 + 6 + 2 + 2 + 10;
    uint32_t count = 0;
    size_t offset = dsh_msgpack_map_header (map, map_size, &count);
    assert_int_equal (offset, 1);
    assert_int_equal (count, 3);
    size_t expected [] = { 2, 6, 1, 1, 2, 10 };
    for (size_t index = 0; index < 6; index++) {
        size_t object = dsh_msgpack_skip (map + offset, map_size - offset);
        assert_int_equal (object, expected [index]);
        offset += object;
    }
    assert_int_equal (offset, map_size);
    assert_int_equal (dsh_msgpack_skip (map + offset, 0), 0);

    //  Hostile counts and bad bytes give 0, never a read past the end
    assert_int_equal (dsh_msgpack_skip ("\xdd\xff\xff\xff\xff", 5), 0);
    assert_int_equal (dsh_msgpack_skip ("\xdb\x00\x00\x00\x10" "ab", 7), 0);
    assert_int_equal (dsh_msgpack_skip ("\xc1", 1), 0);
    assert_int_equal (dsh_msgpack_skip ("\x92\x01\xc1", 3), 0);
    assert_int_equal (dsh_msgpack_skip ("", 0), 0);

    //  Nesting is bounded as for a document
    uint8_t bytes [128];
    size_t size = s_nested (bytes, DSH_DOC_MAX_DEPTH, true);
    assert_int_equal (dsh_msgpack_skip (bytes, size), size);
    size = s_nested (bytes, DSH_DOC_MAX_DEPTH + 1, false);
    assert_int_equal (dsh_msgpack_skip (bytes, size), 0);
}

static void
test_map_header (void **state)
{
    (void) state;
    uint32_t count = 99;
    assert_int_equal (dsh_msgpack_map_header ("\x80", 1, &count), 1);
    assert_int_equal (count, 0);
    assert_int_equal (dsh_msgpack_map_header ("\x8f", 1, &count), 1);
    assert_int_equal (count, 15);
    assert_int_equal (dsh_msgpack_map_header ("\xde\x01\x02", 3, &count), 3);
    assert_int_equal (count, 0x0102);
    assert_int_equal (dsh_msgpack_map_header ("\xdf\x01\x02\x03\x04", 5, &count), 5);
    assert_int_equal (count, 0x01020304);
    //  Not a map, or a header cut short
    assert_int_equal (dsh_msgpack_map_header ("\x90", 1, &count), 0);
    assert_int_equal (count, 0);
    assert_int_equal (dsh_msgpack_map_header ("\xa1m", 2, &count), 0);
    assert_int_equal (dsh_msgpack_map_header ("\xde\x01", 2, &count), 0);
    assert_int_equal (dsh_msgpack_map_header ("\xdf\x01\x02\x03", 4, &count), 0);
    assert_int_equal (dsh_msgpack_map_header ("", 0, &count), 0);
}

static void
test_pack_cstr (void **state)
{
    (void) state;
    packed_t packed;
    s_packed_init (&packed);
    dsh_pack_cstr (&packed.packer, "héllo");
    assert_int_equal (packed.buffer.size, 7);
    assert_memory_equal (packed.buffer.data, "\xa6h\xc3\xa9llo", 7);
    msgpack_sbuffer_destroy (&packed.buffer);
    s_packed_init (&packed);
    dsh_pack_cstr (&packed.packer, "");
    assert_int_equal (packed.buffer.size, 1);
    assert_memory_equal (packed.buffer.data, "\xa0", 1);
    msgpack_sbuffer_destroy (&packed.buffer);
}

//  A peer's setting is used only within its bounds, and only as an
//  unsigned integer
static void
test_map_int_in (void **state)
{
    (void) state;
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init (&buffer);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buffer, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 5);
    dsh_pack_cstr (&pk, "ok");
    msgpack_pack_uint64 (&pk, 500);
    dsh_pack_cstr (&pk, "big");
    msgpack_pack_uint64 (&pk, 1ULL << 40);
    dsh_pack_cstr (&pk, "zero");
    msgpack_pack_uint64 (&pk, 0);
    dsh_pack_cstr (&pk, "negative");
    msgpack_pack_int (&pk, -5);
    dsh_pack_cstr (&pk, "text");
    dsh_pack_cstr (&pk, "500");
    dsh_doc_t *doc = s_doc_ok (buffer.data, buffer.size);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (dsh_map_int_in (root, "ok", 1, 1000, 7), 500);
    assert_int_equal (dsh_map_int_in (root, "ok", 501, 1000, 7), 7);
    assert_int_equal (dsh_map_int_in (root, "big", 1, 3600000, 7), 7);
    assert_int_equal (dsh_map_int_in (root, "zero", 1, 10, 7), 7);
    assert_int_equal (dsh_map_int_in (root, "zero", 0, 10, 7), 0);
    assert_int_equal (dsh_map_int_in (root, "negative", 0, 10, 7), 7);
    assert_int_equal (dsh_map_int_in (root, "text", 1, 1000, 7), 7);
    assert_int_equal (dsh_map_int_in (root, "absent", 1, 1000, 7), 7);
    assert_int_equal (dsh_map_int_in (NULL, "ok", 1, 1000, 7), 7);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&buffer);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_scalars),
        cmocka_unit_test (test_wide_headers),
        cmocka_unit_test (test_nested_and_lookup),
        cmocka_unit_test (test_depth),
        cmocka_unit_test (test_hostile_counts),
        cmocka_unit_test (test_truncated_everywhere),
        cmocka_unit_test (test_trailing_bytes),
        cmocka_unit_test (test_repeated_keys),
        cmocka_unit_test (test_random_bytes),
        cmocka_unit_test (test_mutations),
        cmocka_unit_test (test_canonical),
        cmocka_unit_test (test_canonical_depth),
        cmocka_unit_test (test_pack_cstr),
        cmocka_unit_test (test_skip),
        cmocka_unit_test (test_map_header),
        cmocka_unit_test (test_map_int_in),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
