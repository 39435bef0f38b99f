/*  =========================================================================
    test_json - dsh_json: msgpack to JSON and back, numbers, text, binaries,
    nesting limits and bad input
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dsh_doc.h"
#include "dsh_json.h"

//  JSON text -> msgpack -> dsh_doc -> JSON, which must equal the parsed text.
static void
s_round_trip (const char *text)
{
    char error [256] = "";
    msgpack_sbuffer sbuf;
    if (dsh_json_text_to_msgpack (text, &sbuf, error, sizeof error))
        fail_msg ("refused %s: %s", text, error);
    dsh_doc_t *doc = dsh_doc_new (sbuf.data, sbuf.size, error, sizeof error);
    if (!doc)
        fail_msg ("doc refused %s: %s", text, error);
    json_t *back = dsh_json_from_msgpack (dsh_doc_root (doc));
    assert_non_null (back);
    json_t *expected = json_loads (text, JSON_DECODE_ANY, NULL);
    assert_non_null (expected);
    if (!json_equal (back, expected)) {
        char *dumped = json_dumps (back, JSON_ENCODE_ANY);
        fail_msg ("%s came back as %s", text, dumped);
    }
    json_decref (expected);
    json_decref (back);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);
}

//  Decodes the msgpack that text packs to, for checking its types.
static dsh_doc_t *
s_doc_from_text (const char *text, msgpack_sbuffer *sbuf)
{
    char error [256] = "";
    assert_int_equal (dsh_json_text_to_msgpack (text, sbuf, error, sizeof error), 0);
    dsh_doc_t *doc = dsh_doc_new (sbuf->data, sbuf->size, error, sizeof error);
    assert_non_null (doc);
    return doc;
}

static void
test_integers (void **state)
{
    (void) state;
    s_round_trip ("[0, 1, -1, 127, 128, -32, -33, 65536, -2147483649]");
    s_round_trip ("[-9223372036854775808, 9223372036854775807]");
    s_round_trip ("{\"n\": -42, \"z\": 0}");

    msgpack_sbuffer sbuf;
    dsh_doc_t *doc = s_doc_from_text ("[-9223372036854775808, 9223372036854775807, 5, -5]", &sbuf);
    const msgpack_object *item = dsh_doc_root (doc)->via.array.ptr;
    assert_int_equal (item [0].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    assert_true (item [0].via.i64 == INT64_MIN);
    assert_int_equal (item [1].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_true (item [1].via.u64 == (uint64_t) INT64_MAX);
    assert_int_equal (item [2].type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    assert_int_equal (item [3].type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    json_t *json = dsh_json_from_msgpack (&item [0]);
    assert_true (json_is_integer (json));
    assert_true (json_integer_value (json) == INT64_MIN);
    json_decref (json);
    json = dsh_json_from_msgpack (&item [1]);
    assert_true (json_is_integer (json));
    assert_true (json_integer_value (json) == INT64_MAX);
    json_decref (json);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);

    //  Unsigned values past INT64_MAX have no JSON integer: they become reals.
    msgpack_object big = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER };
    big.via.u64 = UINT64_MAX;
    json = dsh_json_from_msgpack (&big);
    assert_true (json_is_real (json));
    assert_true (json_real_value (json) == 18446744073709551615.0);
    json_decref (json);
    big.via.u64 = (uint64_t) INT64_MAX + 1;
    json = dsh_json_from_msgpack (&big);
    assert_true (json_is_real (json));
    assert_true (json_real_value (json) == 9223372036854775808.0);
    json_decref (json);
}

static void
test_floats (void **state)
{
    (void) state;
    s_round_trip ("[1.5, 1e300, -2.5e-300, 0.1]");

    msgpack_sbuffer sbuf;
    dsh_doc_t *doc = s_doc_from_text ("[1.5, 1e300, -0.0, 2.0]", &sbuf);
    const msgpack_object *item = dsh_doc_root (doc)->via.array.ptr;
    for (int index = 0; index < 4; index++)
        assert_int_equal (item [index].type, MSGPACK_OBJECT_FLOAT64);
    assert_true (item [1].via.f64 == 1e300);
    assert_true (signbit (item [2].via.f64));
    json_t *json = dsh_json_from_msgpack (dsh_doc_root (doc));
    assert_true (json_is_real (json_array_get (json, 0)));
    assert_true (json_real_value (json_array_get (json, 0)) == 1.5);
    assert_true (json_is_real (json_array_get (json, 2)));
    assert_true (json_real_value (json_array_get (json, 2)) == 0.0);
    assert_true (signbit (json_real_value (json_array_get (json, 2))));
    //  2.0 stays a real, not an integer.
    assert_true (json_is_real (json_array_get (json, 3)));
    json_decref (json);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);

    msgpack_object single = { .type = MSGPACK_OBJECT_FLOAT32 };
    single.via.f64 = 0.25;
    json = dsh_json_from_msgpack (&single);
    assert_true (json_is_real (json));
    assert_true (json_real_value (json) == 0.25);
    json_decref (json);
    //  JSON has no NaN.
    single.via.f64 = NAN;
    assert_null (dsh_json_from_msgpack (&single));
}

static void
test_unicode (void **state)
{
    (void) state;
    s_round_trip ("{\"caf\\u00e9\": \"\\ud83d\\ude00 \xc3\xa9t\xc3\xa9\"}");

    msgpack_sbuffer sbuf;
    dsh_doc_t *doc = s_doc_from_text ("[\"\\u00e9\", \"\\ud83d\\ude00\", \"\xf0\x9f\x8e\x89\"]", &sbuf);
    const msgpack_object *item = dsh_doc_root (doc)->via.array.ptr;
    assert_true (dsh_str_eq (&item [0], "\xc3\xa9"));
    assert_true (dsh_str_eq (&item [1], "\xf0\x9f\x98\x80"));
    assert_true (dsh_str_eq (&item [2], "\xf0\x9f\x8e\x89"));
    json_t *json = dsh_json_from_msgpack (&item [1]);
    assert_string_equal (json_string_value (json), "\xf0\x9f\x98\x80");
    json_decref (json);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);
}

static void
test_nested (void **state)
{
    (void) state;
    s_round_trip ("{\"name\": \"search\", \"arguments\": {\"q\": \"x\", \"limits\": [1, [2, [3, {}]], []],"
                  " \"flags\": [true, false, null]}, \"empty\": \"\"}");
    s_round_trip ("[[[[[[[[[[]]]]]]]]]]");
    //  Scalars are accepted at the root.
    s_round_trip ("42");
    s_round_trip ("\"text\"");
    s_round_trip ("null");

    //  Object keys keep jansson's insertion order in the msgpack map.
    msgpack_sbuffer sbuf;
    dsh_doc_t *doc = s_doc_from_text ("{\"z\": 1, \"a\": 2, \"m\": 3}", &sbuf);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (root->type, MSGPACK_OBJECT_MAP);
    assert_true (dsh_str_eq (&root->via.map.ptr [0].key, "z"));
    assert_true (dsh_str_eq (&root->via.map.ptr [1].key, "a"));
    assert_true (dsh_str_eq (&root->via.map.ptr [2].key, "m"));
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);
}

static json_t *
s_bin_json (const char *bytes, uint32_t size)
{
    msgpack_object bin = { .type = MSGPACK_OBJECT_BIN };
    bin.via.bin.ptr = bytes;
    bin.via.bin.size = size;
    return dsh_json_from_msgpack (&bin);
}

static void
test_bin_as_base64 (void **state)
{
    (void) state;
    static const struct { const char *bytes; uint32_t size; const char *base64; } cases [] = {
        { "hello", 5, "aGVsbG8=" },
        { "hell", 4, "aGVsbA==" },
        { "hel", 3, "aGVs" },
        { "\xff\xfe\xfd", 3, "//79" },
        { "\x00", 1, "AA==" },
        { "", 0, "" },
    };
    for (size_t index = 0; index < sizeof cases / sizeof cases [0]; index++) {
        json_t *json = s_bin_json (cases [index].bytes, cases [index].size);
        assert_true (json_is_string (json));
        assert_string_equal (json_string_value (json), cases [index].base64);
        json_decref (json);
    }
    //  A long binary is one base64 line, with no line breaks.
    char long_bytes [200];
    memset (long_bytes, 0xab, sizeof long_bytes);
    json_t *json = s_bin_json (long_bytes, sizeof long_bytes);
    assert_null (strchr (json_string_value (json), '\n'));
    assert_int_equal (json_string_length (json), 268);
    json_decref (json);
}

static void
test_refused_values (void **state)
{
    (void) state;
    //  Invalid UTF-8 as a value and as a key.
    msgpack_object bad = { .type = MSGPACK_OBJECT_STR };
    bad.via.str.ptr = "\xc3\x28";
    bad.via.str.size = 2;
    assert_null (dsh_json_from_msgpack (&bad));
    bad.via.str.ptr = "\xed\xa0\x80";      //  an encoded surrogate
    bad.via.str.size = 3;
    assert_null (dsh_json_from_msgpack (&bad));

    msgpack_object one = { .type = MSGPACK_OBJECT_POSITIVE_INTEGER };
    one.via.u64 = 1;
    msgpack_object_kv entry = { .key = bad, .val = one };
    msgpack_object map = { .type = MSGPACK_OBJECT_MAP };
    map.via.map.ptr = &entry;
    map.via.map.size = 1;
    assert_null (dsh_json_from_msgpack (&map));
    //  A key that is not a str.
    entry.key = one;
    assert_null (dsh_json_from_msgpack (&map));
    //  The same map with a good key is fine.
    entry.key.type = MSGPACK_OBJECT_STR;
    entry.key.via.str.ptr = "k";
    entry.key.via.str.size = 1;
    json_t *json = dsh_json_from_msgpack (&map);
    assert_int_equal (json_integer_value (json_object_get (json, "k")), 1);
    json_decref (json);

    //  An ext value, also when nested inside an array.
    msgpack_object items [2] = { { .type = MSGPACK_OBJECT_NIL }, { .type = MSGPACK_OBJECT_EXT } };
    items [1].via.ext.type = 1;
    items [1].via.ext.ptr = "x";
    items [1].via.ext.size = 1;
    assert_null (dsh_json_from_msgpack (&items [1]));
    msgpack_object array = { .type = MSGPACK_OBJECT_ARRAY };
    array.via.array.ptr = items;
    array.via.array.size = 2;
    assert_null (dsh_json_from_msgpack (&array));
    entry.val = array;
    assert_null (dsh_json_from_msgpack (&map));
}

static char *
s_nested_text (int levels)
{
    char *text = (char *) malloc ((size_t) levels * 2 + 1);
    for (int index = 0; index < levels; index++) {
        text [index] = '[';
        text [levels * 2 - 1 - index] = ']';
    }
    text [levels * 2] = '\0';
    return text;
}

static void
test_depth (void **state)
{
    (void) state;
    char error [256];
    msgpack_sbuffer sbuf;
    char *text = s_nested_text (DSH_DOC_MAX_DEPTH);
    assert_int_equal (dsh_json_text_to_msgpack (text, &sbuf, error, sizeof error), 0);
    assert_int_equal (sbuf.size, DSH_DOC_MAX_DEPTH);
    msgpack_sbuffer_destroy (&sbuf);
    free (text);

    text = s_nested_text (DSH_DOC_MAX_DEPTH + 1);
    assert_int_equal (dsh_json_text_to_msgpack (text, &sbuf, error, sizeof error), -1);
    assert_string_equal (error, "JSON nests deeper than 24");
    assert_int_equal (sbuf.size, 0);
    msgpack_sbuffer_destroy (&sbuf);
    free (text);

    text = s_nested_text (1000);
    assert_int_equal (dsh_json_text_to_msgpack (text, &sbuf, error, sizeof error), -1);
    assert_string_equal (error, "JSON nests deeper than 24");
    msgpack_sbuffer_destroy (&sbuf);
    free (text);

    //  Objects count as levels too; a refusal packs nothing.
    json_t *json = json_object ();
    json_t *inner = json;
    for (int level = 1; level < DSH_DOC_MAX_DEPTH + 1; level++) {
        json_t *child = json_object ();
        json_object_set_new (inner, "k", child);
        inner = child;
    }
    msgpack_packer packer;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer_init (&packer, &sbuf, msgpack_sbuffer_write);
    assert_int_equal (dsh_json_to_msgpack (&packer, json), -1);
    assert_int_equal (sbuf.size, 0);
    assert_int_equal (dsh_json_to_msgpack (&packer, json_object_get (json, "k")), 0);
    assert_true (sbuf.size > 0);
    msgpack_sbuffer_destroy (&sbuf);
    json_decref (json);
}

static void
test_bad_text (void **state)
{
    (void) state;
    char error [256];
    msgpack_sbuffer sbuf;
    assert_int_equal (dsh_json_text_to_msgpack ("{\"a\": }", &sbuf, error, sizeof error), -1);
    assert_memory_equal (error, "invalid JSON at line 1 column 7: ", 33);
    assert_null (strchr (error, '\n'));
    msgpack_sbuffer_destroy (&sbuf);

    assert_int_equal (dsh_json_text_to_msgpack ("", &sbuf, error, sizeof error), -1);
    assert_memory_equal (error, "invalid JSON at line ", 21);
    assert_int_equal (dsh_json_text_to_msgpack ("[1, 2] 3", &sbuf, error, sizeof error), -1);
    assert_int_equal (dsh_json_text_to_msgpack ("{\"a\": 1, \"a\": 2}", &sbuf, error, sizeof error), -1);
    assert_non_null (strstr (error, "duplicate"));
    assert_int_equal (dsh_json_text_to_msgpack ("\"\xc3\x28\"", &sbuf, error, sizeof error), -1);
    assert_memory_equal (error, "invalid JSON at line ", 21);
    //  A tiny buffer is truncated, never overrun.
    char tiny [8];
    assert_int_equal (dsh_json_text_to_msgpack ("nope", &sbuf, tiny, sizeof tiny), -1);
    assert_string_equal (tiny, "invalid");
    assert_int_equal (dsh_json_text_to_msgpack ("nope", &sbuf, NULL, 0), -1);
    msgpack_sbuffer_destroy (&sbuf);
}

//  Valid JSON that jansson alone refuses: NUL in a string, integers past
//  int64, numbers past the double range. Strings that look like numbers
//  stay strings.
static void
test_any_valid_json (void **state)
{
    (void) state;
    const char nul [] = "{\"a\": \"x\\u0000y\"}";
    json_t *json = dsh_json_parse (nul, strlen (nul), 0, NULL);
    assert_non_null (json);
    json_t *a = json_object_get (json, "a");
    assert_int_equal (json_string_length (a), 3);
    assert_memory_equal (json_string_value (a), "x\0y", 3);
    char *dumped = json_dumps (json, JSON_COMPACT);
    assert_string_equal (dumped, "{\"a\":\"x\\u0000y\"}");
    free (dumped);
    json_decref (json);

    const char big [] = "[123456789012345678901234, -99999999999999999999, 9223372036854775807, "
                        "1.5e400, -2e999, 1e-400, \"123456789012345678901234\", \"1.5e400\\\"\"]";
    json = dsh_json_parse (big, strlen (big), 0, NULL);
    assert_non_null (json);
    assert_true (json_is_real (json_array_get (json, 0)));
    assert_true (json_real_value (json_array_get (json, 0)) == 123456789012345678901234.0);
    assert_true (json_real_value (json_array_get (json, 1)) == -99999999999999999999.0);
    assert_true (json_is_integer (json_array_get (json, 2)));
    assert_true (json_integer_value (json_array_get (json, 2)) == INT64_MAX);
    assert_true (json_real_value (json_array_get (json, 3)) == DBL_MAX);
    assert_true (json_real_value (json_array_get (json, 4)) == -DBL_MAX);
    assert_true (json_real_value (json_array_get (json, 5)) == 0.0);
    assert_string_equal (json_string_value (json_array_get (json, 6)), "123456789012345678901234");
    assert_string_equal (json_string_value (json_array_get (json, 7)), "1.5e400\"");
    json_decref (json);

    //  Still refused: bad JSON, and a key twice
    json_error_t error;
    assert_null (dsh_json_parse ("[1e400", 6, 0, &error));
    assert_null (dsh_json_parse ("{\"a\": 1, \"a\": 2}", 16, 0, &error));
    assert_non_null (strstr (error.text, "duplicate"));
    msgpack_sbuffer sbuf;
    char reason [256];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"n\": 1e999, \"s\": \"\\u0000\"}", &sbuf, reason, sizeof reason), 0);
    msgpack_sbuffer_destroy (&sbuf);
}

static void
test_json_values_to_msgpack (void **state)
{
    (void) state;
    //  Built in memory: a string holding a NUL byte keeps its length.
    json_t *json = json_pack ("{s:s#, s:b, s:n, s:I, s:f}", "nul", "a\0b", (size_t) 3, "yes", 1,
                              "none", "count", (json_int_t) -7, "ratio", 0.5);
    assert_non_null (json);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer packer;
    msgpack_packer_init (&packer, &sbuf, msgpack_sbuffer_write);
    assert_int_equal (dsh_json_to_msgpack (&packer, json), 0);
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (sbuf.data, sbuf.size, error, sizeof error);
    assert_non_null (doc);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (root->via.map.size, 5);
    const msgpack_object *nul = dsh_map_get (root, "nul");
    assert_int_equal (nul->via.str.size, 3);
    assert_memory_equal (nul->via.str.ptr, "a\0b", 3);
    assert_int_equal (dsh_map_get (root, "yes")->type, MSGPACK_OBJECT_BOOLEAN);
    assert_int_equal (dsh_map_get (root, "none")->type, MSGPACK_OBJECT_NIL);
    assert_int_equal (dsh_map_get (root, "count")->via.i64, -7);
    assert_true (dsh_map_get (root, "ratio")->via.f64 == 0.5);
    json_t *back = dsh_json_from_msgpack (root);
    assert_true (json_equal (back, json));
    json_decref (back);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);
    json_decref (json);
}

//  bytes -> view -> text -> view back -> bytes: what a hook is shown packs
//  back to the very value that runs, and the view reads as expected_text
static void
s_view_round_trip (const void *bytes, size_t size, const char *expected_text, bool plain)
{
    char error [256] = "";
    dsh_doc_t *doc = dsh_doc_new (bytes, size, error, sizeof error);
    if (!doc)
        fail_msg ("doc refused: %s", error);
    assert_int_equal (dsh_json_is_plain (dsh_doc_root (doc)), plain);
    json_t *view = dsh_json_view (dsh_doc_root (doc));
    assert_non_null (view);
    char *text = json_dumps (view, JSON_ENCODE_ANY | JSON_COMPACT);
    if (expected_text && strcmp (text, expected_text))
        fail_msg ("view %s, expected %s", text, expected_text);
    json_t *parsed = json_loads (text, JSON_DECODE_ANY, NULL);
    msgpack_sbuffer back;
    msgpack_sbuffer_init (&back);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &back, msgpack_sbuffer_write);
    if (dsh_json_view_to_msgpack (&pk, parsed, error, sizeof error))
        fail_msg ("view %s refused: %s", text, error);
    dsh_doc_t *again = dsh_doc_new (back.data, back.size, error, sizeof error);
    assert_non_null (again);
    //  Compared as packed by one packer, so that a NaN equals itself
    msgpack_sbuffer first, second;
    msgpack_sbuffer_init (&first);
    msgpack_sbuffer_init (&second);
    msgpack_packer first_pk, second_pk;
    msgpack_packer_init (&first_pk, &first, msgpack_sbuffer_write);
    msgpack_packer_init (&second_pk, &second, msgpack_sbuffer_write);
    msgpack_pack_object (&first_pk, *dsh_doc_root (doc));
    msgpack_pack_object (&second_pk, *dsh_doc_root (again));
    if (first.size != second.size || memcmp (first.data, second.data, first.size))
        fail_msg ("view %s packed back to another value", text);
    msgpack_sbuffer_destroy (&first);
    msgpack_sbuffer_destroy (&second);
    dsh_doc_destroy (&again);
    msgpack_sbuffer_destroy (&back);
    json_decref (parsed);
    free (text);
    json_decref (view);
    dsh_doc_destroy (&doc);
}

#define S_RAW(text) text, sizeof (text) - 1

static void
test_view_lossless (void **state)
{
    (void) state;
    //  Plain values are plain JSON, a "$ref" key among them
    s_view_round_trip (S_RAW ("\x83\xa4" "path" "\xa9" "scratch/x" "\xa1" "n" "\x07" "\xa4" "$ref" "\xa1" "#"),
                       "{\"path\":\"scratch/x\",\"n\":7,\"$ref\":\"#\"}", true);
    //  An integer key (issue 22: the approver was shown null)
    s_view_round_trip (S_RAW ("\x82\xa4" "path" "\xa9" "hello.txt" "\x07" "\xa1" "x"),
                       "{\"$map\":[[\"path\",\"hello.txt\"],[7,\"x\"]]}", false);
    //  A str that is not UTF-8, in a value and in a key
    s_view_round_trip (S_RAW ("\x81\xa4" "path" "\xa3" "a\xff" "b"),
                       "{\"path\":{\"$str\":\"Yf9i\"}}", false);
    s_view_round_trip (S_RAW ("\x81\xa2" "\xc3\x28" "\x01"), "{\"$map\":[[{\"$str\":\"wyg=\"},1]]}", false);
    //  bin, ext, a uint64 past INT64_MAX, a NaN
    s_view_round_trip (S_RAW ("\x81\xa1" "b" "\xc4\x03" "abc"), "{\"b\":{\"$bin\":\"YWJj\"}}", false);
    s_view_round_trip (S_RAW ("\x81\xa1" "e" "\xd4\x05\x07"), "{\"e\":{\"$ext\":[5,\"Bw==\"]}}", false);
    s_view_round_trip (S_RAW ("\x91\xcf\xff\xff\xff\xff\xff\xff\xff\xff"),
                       "[{\"$u64\":\"18446744073709551615\"}]", false);
    s_view_round_trip (S_RAW ("\x91\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"), "[{\"$float\":\"nan\"}]", false);
    //  A real map whose one key is a typed key is not mistaken for a form
    s_view_round_trip (S_RAW ("\x81\xa4" "$bin" "\xa1" "x"), "{\"$map\":[[\"$bin\",\"x\"]]}", false);
    //  Empty and nested
    s_view_round_trip (S_RAW ("\x80"), "{}", true);
    s_view_round_trip (S_RAW ("\x92\x80\x91\xc4\x00"), "[{},[{\"$bin\":\"\"}]]", false);

    //  Malformed typed forms are refused, naming the form, and pack nothing
    static const char *bad [] = {
        "{\"$bin\":7}", "{\"$ext\":[300,\"\"]}", "{\"$u64\":\"-1\"}", "{\"$u64\":\"99999999999999999999\"}",
        "{\"$float\":\"x\"}", "{\"$map\":[[1]]}", "{\"$map\":{}}", "[{\"$str\":\"!!!\"}]"
    };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++) {
        json_t *json = json_loads (bad [index], JSON_DECODE_ANY, NULL);
        assert_non_null (json);
        msgpack_sbuffer sbuf;
        msgpack_sbuffer_init (&sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
        char error [256] = "";
        if (dsh_json_view_to_msgpack (&pk, json, error, sizeof error) == 0)
            fail_msg ("%s was accepted", bad [index]);
        assert_non_null (strstr (error, "malformed typed value"));
        assert_int_equal (sbuf.size, 0);
        msgpack_sbuffer_destroy (&sbuf);
        json_decref (json);
    }
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_integers),
        cmocka_unit_test (test_floats),
        cmocka_unit_test (test_unicode),
        cmocka_unit_test (test_nested),
        cmocka_unit_test (test_bin_as_base64),
        cmocka_unit_test (test_refused_values),
        cmocka_unit_test (test_depth),
        cmocka_unit_test (test_bad_text),
        cmocka_unit_test (test_json_values_to_msgpack),
        cmocka_unit_test (test_any_valid_json),
        cmocka_unit_test (test_view_lossless),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
