/*  =========================================================================
    test_tooldef - typed tool definitions: JSON Schema conversion and
    argument validation, the original's named behaviours plus seeded
    property tests over thousands of random specs
    =========================================================================
*/

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "dsh_json.h"
#include "dsh_tooldef.h"

//  --------------------------------------------------------------------------
//  Helpers

//  Arguments decoded from JSON text or from packed bytes.
typedef struct {
    msgpack_sbuffer sbuf;
    msgpack_unpacked unpacked;
} args_t;

static const msgpack_object *
s_args_unpack (args_t *args)
{
    msgpack_unpacked_init (&args->unpacked);
    size_t offset = 0;
    int rc = msgpack_unpack_next (&args->unpacked, args->sbuf.data, args->sbuf.size, &offset);
    assert_int_equal (rc, MSGPACK_UNPACK_SUCCESS);
    assert_int_equal (offset, args->sbuf.size);
    return &args->unpacked.data;
}

static const msgpack_object *
s_args_from_json (args_t *args, const char *text)
{
    char error [128];
    int rc = dsh_json_text_to_msgpack (text, &args->sbuf, error, sizeof error);
    if (rc != 0)
        fail_msg ("bad test JSON %s: %s", text, error);
    return s_args_unpack (args);
}

static void
s_args_free (args_t *args)
{
    msgpack_unpacked_destroy (&args->unpacked);
    msgpack_sbuffer_destroy (&args->sbuf);
}

//  All violations joined with " | ", "" when valid. Also checks that the
//  count returned matches the list and the count-only mode.
static char *
s_violations (const dsh_param_t *params, const msgpack_object *obj)
{
    zlistx_t *list = zlistx_new ();
    zlistx_set_destructor (list, (czmq_destructor *) zstr_free);
    size_t count = dsh_params_validate (params, obj, list);
    assert_int_equal (count, zlistx_size (list));
    assert_int_equal (dsh_params_validate (params, obj, NULL), count);
    char *text = strdup ("");
    for (char *line = zlistx_first (list); line; line = zlistx_next (list)) {
        char *next = zsys_sprintf ("%s%s%s", text, *text? " | ": "", line);
        free (text);
        text = next;
    }
    zlistx_destroy (&list);
    return text;
}

//  Validates JSON text and compares all violations with expected.
#define assert_violations(params, json_text, expected) \
    do { \
        args_t args_ = { 0 }; \
        char *got_ = s_violations ((params), s_args_from_json (&args_, (json_text))); \
        assert_string_equal (got_, (expected)); \
        free (got_); \
        s_args_free (&args_); \
    } while (0)

//  Compares a JSON value with JSON text (structurally, key order aside).
static void
s_assert_json (const json_t *value, const char *expected_text)
{
    json_error_t error;
    json_t *expected = json_loads (expected_text, JSON_DECODE_ANY, &error);
    if (!expected)
        fail_msg ("bad expected JSON: %s", error.text);
    if (!json_equal ((json_t *) value, expected)) {
        char *got = json_dumps (value, JSON_COMPACT | JSON_ENCODE_ANY);
        char *want = json_dumps (expected, JSON_COMPACT | JSON_ENCODE_ANY);
        print_error ("got  %s\nwant %s\n", got, want);
        free (got);
        free (want);
        json_decref (expected);
        fail ();
    }
    json_decref (expected);
}

//  --------------------------------------------------------------------------
//  Specs used by the behaviour tests

static const char *const s_colors [] = { "red", "green", NULL };
static const char *const s_levels [] = { "1", "2", NULL };

static const dsh_param_t s_read_file [] = {
    { .name = "path", .type = DSH_TYPE_STRING, .required = true,
      .description = "Absolute file path" },
    { .name = "offset", .type = DSH_TYPE_NUMBER },
    { .name = "limit", .type = DSH_TYPE_NUMBER, .default_json = "100" },
    { .name = NULL }
};

static const dsh_param_t s_primitives [] = {
    { .name = "s", .type = DSH_TYPE_STRING },
    { .name = "n", .type = DSH_TYPE_NUMBER },
    { .name = "i", .type = DSH_TYPE_INTEGER },
    { .name = "b", .type = DSH_TYPE_BOOLEAN },
    { .name = "o", .type = DSH_TYPE_OBJECT },
    { .name = "a", .type = DSH_TYPE_ARRAY },
    { .name = NULL }
};

static const dsh_param_t s_enums [] = {
    { .name = "color", .type = DSH_TYPE_STRING, .enum_values = s_colors },
    { .name = "level", .type = DSH_TYPE_INTEGER, .enum_values = s_levels },
    { .name = NULL }
};

static const dsh_param_t s_host [] = {
    { .name = "host", .type = DSH_TYPE_STRING, .required = true },
    { .name = "port", .type = DSH_TYPE_INTEGER },
    { .name = NULL }
};

static const dsh_param_t s_string_item = { .type = DSH_TYPE_STRING };
static const dsh_param_t s_server_item = { .type = DSH_TYPE_OBJECT, .properties = s_host };
static const dsh_param_t s_number_row = { .type = DSH_TYPE_ARRAY, .items = &(const dsh_param_t) { .type = DSH_TYPE_NUMBER } };

static const dsh_param_t s_nested [] = {
    { .name = "config", .type = DSH_TYPE_OBJECT, .required = true, .properties = s_host },
    { .name = "tags", .type = DSH_TYPE_ARRAY, .items = &s_string_item },
    { .name = "servers", .type = DSH_TYPE_ARRAY, .items = &s_server_item },
    { .name = "matrix", .type = DSH_TYPE_ARRAY, .items = &s_number_row },
    { .name = "free", .type = DSH_TYPE_OBJECT },
    { .name = "any", .type = DSH_TYPE_ARRAY },
    { .name = NULL }
};

//  --------------------------------------------------------------------------
//  Validation: the original's named behaviours

static void
test_validation_is_total_over_malformed_input (void **state)
{
    (void) state;
    //  No arguments at all
    char *got = s_violations (s_read_file, NULL);
    assert_string_equal (got, "\"arguments\" must be an object");
    free (got);
    got = s_violations (NULL, NULL);
    assert_string_equal (got, "\"arguments\" must be an object");
    free (got);

    const char *roots [] = { "null", "[]", "[{\"path\":\"x\"}]", "\"text\"", "42", "-1",
                             "1.5", "true", "false", NULL };
    for (const char **root = roots; *root; root++) {
        assert_violations (s_read_file, *root, "\"arguments\" must be an object");
        assert_violations (s_nested, *root, "\"arguments\" must be an object");
        assert_violations (NULL, *root, "\"arguments\" must be an object");
    }

    //  bin and ext roots, which JSON cannot express
    args_t args = { 0 };
    msgpack_sbuffer_init (&args.sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &args.sbuf, msgpack_sbuffer_write);
    msgpack_pack_bin (&pk, 3);
    msgpack_pack_bin_body (&pk, "abc", 3);
    got = s_violations (s_read_file, s_args_unpack (&args));
    assert_string_equal (got, "\"arguments\" must be an object");
    free (got);
    s_args_free (&args);

    msgpack_sbuffer_init (&args.sbuf);
    msgpack_pack_ext (&pk, 2, 7);
    msgpack_pack_ext_body (&pk, "xy", 2);
    got = s_violations (s_read_file, s_args_unpack (&args));
    assert_string_equal (got, "\"arguments\" must be an object");
    free (got);
    s_args_free (&args);

    //  Wrong types everywhere: each property reports once, nothing crashes
    assert_violations (s_nested,
        "{\"config\":[1],\"tags\":{},\"servers\":\"x\",\"matrix\":7,\"free\":[],\"any\":{}}",
        "\"config\" must be an object | \"tags\" must be an array | "
        "\"servers\" must be an array | \"matrix\" must be an array | "
        "\"free\" must be an object | \"any\" must be an array");
    assert_violations (s_nested,
        "{\"config\":{\"host\":{},\"port\":\"80\"},\"tags\":[null,[],{}],"
        "\"servers\":[1,{\"host\":2}],\"matrix\":[[\"a\"],3]}",
        "\"config.host\" must be a string | \"config.port\" must be an integer | "
        "\"tags[0]\" must be a string | \"tags[1]\" must be a string | \"tags[2]\" must be a string | "
        "\"servers[0]\" must be an object | \"servers[1].host\" must be a string | "
        "\"matrix[0][0]\" must be a number | \"matrix[1]\" must be an array");

    //  A map with keys that are not strings is still a map
    msgpack_sbuffer_init (&args.sbuf);
    msgpack_pack_map (&pk, 2);
    msgpack_pack_int (&pk, 1);
    msgpack_pack_nil (&pk);
    msgpack_pack_nil (&pk);
    msgpack_pack_true (&pk);
    got = s_violations (s_read_file, s_args_unpack (&args));
    assert_string_equal (got, "missing required property \"path\"");
    free (got);
    s_args_free (&args);
}

static void
test_validation_flags_missing_required_keys (void **state)
{
    (void) state;
    assert_violations (s_read_file, "{}", "missing required property \"path\"");
    assert_violations (s_read_file, "{\"offset\":1,\"limit\":2}", "missing required property \"path\"");
    assert_violations (s_read_file, "{\"PATH\":\"x\"}", "missing required property \"path\"");
    assert_violations (s_read_file, "{\"path\":\"/etc/hosts\"}", "");
    //  Nested: required inside a present object, and inside array items
    assert_violations (s_nested, "{}", "missing required property \"config\"");
    assert_violations (s_nested, "{\"config\":{}}", "missing required property \"config.host\"");
    assert_violations (s_nested, "{\"config\":{\"host\":\"h\"},\"servers\":[{\"host\":\"a\"},{},{\"port\":1}]}",
        "missing required property \"servers[1].host\" | missing required property \"servers[2].host\"");

    //  The error text the registry hands back
    args_t args = { 0 };
    char *text = dsh_params_check (s_nested, s_args_from_json (&args, "{\"config\":{\"port\":1.5},\"tags\":[1]}"));
    assert_non_null (text);
    assert_string_equal (text, "Error: invalid arguments: "
        "missing required property \"config.host\"; \"config.port\" must be an integer; "
        "\"tags[0]\" must be a string");
    free (text);
    s_args_free (&args);

    assert_null (dsh_params_check (s_read_file, s_args_from_json (&args, "{\"path\":\"p\"}")));
    s_args_free (&args);
    text = dsh_params_check (s_read_file, NULL);
    assert_string_equal (text, "Error: invalid arguments: \"arguments\" must be an object");
    free (text);
}

static void
test_validation_allows_extra_keys (void **state)
{
    (void) state;
    assert_violations (s_read_file, "{\"path\":\"p\",\"extra\":1,\"more\":{\"deep\":[null]}}", "");
    assert_violations (s_nested, "{\"config\":{\"host\":\"h\",\"tls\":true},\"servers\":[{\"host\":\"a\",\"x\":[]}]}", "");
    assert_violations (NULL, "{\"anything\":\"goes\"}", "");
    assert_violations (NULL, "{}", "");
}

static void
test_validation_applies_no_defaults (void **state)
{
    (void) state;
    //  The schema advertises the default ...
    json_t *schema = dsh_params_to_json_schema (s_read_file);
    s_assert_json (json_object_get (json_object_get (json_object_get (schema, "properties"), "limit"), "default"), "100");
    json_decref (schema);

    //  ... but validation neither needs it nor applies it
    args_t args = { 0 };
    const msgpack_object *obj = s_args_from_json (&args, "{\"path\":\"p\"}");
    size_t size = args.sbuf.size;
    char *before = (char *) malloc (size);
    memcpy (before, args.sbuf.data, size);
    msgpack_object copy = *obj;

    assert_int_equal (dsh_params_validate (s_read_file, obj, NULL), 0);
    assert_int_equal (obj->type, MSGPACK_OBJECT_MAP);
    assert_int_equal (obj->via.map.size, 1);
    assert_ptr_equal (obj->via.map.ptr, copy.via.map.ptr);
    assert_int_equal (args.sbuf.size, size);
    assert_memory_equal (args.sbuf.data, before, size);
    free (before);
    s_args_free (&args);
}

static void
test_validation_type_checks_primitives (void **state)
{
    (void) state;
    assert_violations (s_primitives,
        "{\"s\":\"x\",\"n\":1.5,\"i\":-3,\"b\":false,\"o\":{},\"a\":[]}", "");
    assert_violations (s_primitives,
        "{\"s\":1,\"n\":\"1\",\"i\":\"1\",\"b\":0,\"o\":[],\"a\":{}}",
        "\"s\" must be a string | \"n\" must be a number | \"i\" must be an integer | "
        "\"b\" must be a boolean | \"o\" must be an object | \"a\" must be an array");
    assert_violations (s_primitives,
        "{\"s\":true,\"n\":true,\"i\":true,\"b\":\"true\",\"o\":\"{}\",\"a\":\"[]\"}",
        "\"s\" must be a string | \"n\" must be a number | \"i\" must be an integer | "
        "\"b\" must be a boolean | \"o\" must be an object | \"a\" must be an array");

    //  number: any integer or float; integer: no fraction
    assert_violations (s_primitives, "{\"n\":-7}", "");
    assert_violations (s_primitives, "{\"i\":3.0}", "");
    assert_violations (s_primitives, "{\"i\":-3.0}", "");
    assert_violations (s_primitives, "{\"i\":1e300}", "");
    assert_violations (s_primitives, "{\"i\":3.5}", "\"i\" must be an integer");
    assert_violations (s_primitives, "{\"i\":-0.25}", "\"i\" must be an integer");

    //  Floats JSON cannot carry: float32, NaN and infinities
    const double specials [] = { NAN, INFINITY, -INFINITY };
    for (size_t index = 0; index < 3; index++) {
        args_t args = { 0 };
        msgpack_sbuffer_init (&args.sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &args.sbuf, msgpack_sbuffer_write);
        msgpack_pack_map (&pk, 2);
        msgpack_pack_str_with_body (&pk, "n", 1);
        msgpack_pack_double (&pk, specials [index]);
        msgpack_pack_str_with_body (&pk, "i", 1);
        msgpack_pack_double (&pk, specials [index]);
        char *got = s_violations (s_primitives, s_args_unpack (&args));
        assert_string_equal (got, "\"i\" must be an integer");
        free (got);
        s_args_free (&args);
    }
    args_t args = { 0 };
    msgpack_sbuffer_init (&args.sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &args.sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 4);
    msgpack_pack_str_with_body (&pk, "n", 1);
    msgpack_pack_uint64 (&pk, UINT64_MAX);
    msgpack_pack_str_with_body (&pk, "i", 1);
    msgpack_pack_float (&pk, 4.0f);
    msgpack_pack_str_with_body (&pk, "n", 1);
    msgpack_pack_float (&pk, 0.5f);
    msgpack_pack_str_with_body (&pk, "s", 1);
    msgpack_pack_bin_with_body (&pk, "x", 1);
    char *got = s_violations (s_primitives, s_args_unpack (&args));
    assert_string_equal (got, "\"s\" must be a string");
    free (got);
    s_args_free (&args);
}

static void
test_validation_nil_is_not_absent (void **state)
{
    (void) state;
    assert_violations (s_read_file, "{\"path\":null}", "\"path\" must be a string");
    assert_violations (s_read_file, "{\"path\":\"p\",\"offset\":null}", "\"offset\" must be a number");
    assert_violations (s_primitives,
        "{\"s\":null,\"n\":null,\"i\":null,\"b\":null,\"o\":null,\"a\":null}",
        "\"s\" must be a string | \"n\" must be a number | \"i\" must be an integer | "
        "\"b\" must be a boolean | \"o\" must be an object | \"a\" must be an array");
    assert_violations (s_nested, "{\"config\":{\"host\":null}}", "\"config.host\" must be a string");
}

static void
test_validation_checks_enums (void **state)
{
    (void) state;
    assert_violations (s_enums, "{\"color\":\"red\",\"level\":2}", "");
    assert_violations (s_enums, "{\"color\":\"green\",\"level\":1}", "");
    assert_violations (s_enums, "{\"color\":\"blue\"}", "\"color\" must be one of [\"red\",\"green\"]");
    assert_violations (s_enums, "{\"color\":\"Red\"}", "\"color\" must be one of [\"red\",\"green\"]");
    assert_violations (s_enums, "{\"level\":3}", "\"level\" must be one of [1,2]");
    //  The type check comes first, and a property gets one violation
    assert_violations (s_enums, "{\"color\":1,\"level\":\"1\"}",
        "\"color\" must be a string | \"level\" must be an integer");
    //  Numbers compare by value: 2.0 is the integer 2
    assert_violations (s_enums, "{\"level\":2.0}", "");
    assert_violations (s_enums, "{\"level\":-1}", "\"level\" must be one of [1,2]");

    //  Literal enums of other types, and values that are not JSON are left out
    static const char *const numbers [] = { "2.5", "not json", "-1", NULL };
    static const char *const flags [] = { "true", NULL };
    static const char *const none [] = { NULL };
    static const char *const unicode [] = { "caf\xc3\xa9", "bad\xff", NULL };
    static const dsh_param_t literal [] = {
        { .name = "n", .type = DSH_TYPE_NUMBER, .enum_values = numbers },
        { .name = "b", .type = DSH_TYPE_BOOLEAN, .enum_values = flags },
        { .name = "e", .type = DSH_TYPE_STRING, .enum_values = none },
        { .name = "u", .type = DSH_TYPE_STRING, .enum_values = unicode },
        { .name = NULL }
    };
    assert_violations (literal, "{\"n\":2.5,\"b\":true,\"u\":\"caf\xc3\xa9\"}", "");
    assert_violations (literal, "{\"n\":-1.0}", "");
    assert_violations (literal, "{\"n\":2,\"b\":false,\"e\":\"x\",\"u\":\"cafe\"}",
        "\"n\" must be one of [2.5,-1] | \"b\" must be one of [true] | "
        "\"e\" must be one of [] | \"u\" must be one of [\"caf\xc3\xa9\"]");

    json_t *schema = dsh_params_to_json_schema (literal);
    s_assert_json (schema,
        "{\"type\":\"object\",\"properties\":{"
        "\"n\":{\"type\":\"number\",\"enum\":[2.5,-1]},"
        "\"b\":{\"type\":\"boolean\",\"enum\":[true]},"
        "\"e\":{\"type\":\"string\",\"enum\":[]},"
        "\"u\":{\"type\":\"string\",\"enum\":[\"caf\xc3\xa9\"]}}}");
    json_decref (schema);
}

static void
test_validation_recurses_into_objects_and_arrays (void **state)
{
    (void) state;
    assert_violations (s_nested,
        "{\"config\":{\"host\":\"h\",\"port\":8080},\"tags\":[\"a\",\"b\"],"
        "\"servers\":[{\"host\":\"a\"},{\"host\":\"b\",\"port\":1.0}],\"matrix\":[[1,2.5],[]],"
        "\"free\":{\"x\":[1]},\"any\":[1,\"two\",null]}", "");
    //  Every failing element is reported, with its index
    assert_violations (s_nested, "{\"config\":{\"host\":\"h\"},\"tags\":[\"a\",1,\"c\",false]}",
        "\"tags[1]\" must be a string | \"tags[3]\" must be a string");
    assert_violations (s_nested, "{\"config\":{\"host\":\"h\"},\"servers\":[{\"host\":\"a\"},{\"host\":5}]}",
        "\"servers[1].host\" must be a string");
    assert_violations (s_nested, "{\"config\":{\"host\":\"h\",\"port\":\"80\"}}",
        "\"config.port\" must be an integer");
    assert_violations (s_nested, "{\"config\":{\"host\":\"h\"},\"matrix\":[[1],[2,\"x\",3,\"y\"]]}",
        "\"matrix[1][1]\" must be a number | \"matrix[1][3]\" must be a number");

    //  A key given twice is checked at both places
    args_t args = { 0 };
    msgpack_sbuffer_init (&args.sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &args.sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 2);
    msgpack_pack_str_with_body (&pk, "path", 4);
    msgpack_pack_str_with_body (&pk, "ok", 2);
    msgpack_pack_str_with_body (&pk, "path", 4);
    msgpack_pack_int (&pk, 1);
    char *got = s_violations (s_read_file, s_args_unpack (&args));
    assert_string_equal (got, "\"path\" must be a string");
    free (got);
    s_args_free (&args);
}

//  --------------------------------------------------------------------------
//  Conversion

static void
test_conversion_read_file (void **state)
{
    (void) state;
    json_t *schema = dsh_params_to_json_schema (s_read_file);
    s_assert_json (schema,
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"Absolute file path\"},"
        "\"offset\":{\"type\":\"number\"},"
        "\"limit\":{\"type\":\"number\",\"default\":100}},"
        "\"required\":[\"path\"]}");
    //  Declaration order is kept, in properties and in required
    char *text = json_dumps (schema, JSON_COMPACT);
    assert_string_equal (text,
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"Absolute file path\"},"
        "\"offset\":{\"type\":\"number\"},"
        "\"limit\":{\"type\":\"number\",\"default\":100}},"
        "\"required\":[\"path\"]}");
    free (text);
    json_decref (schema);
}

static void
test_conversion_is_total_and_required_at_every_level (void **state)
{
    (void) state;
    json_t *schema = dsh_params_to_json_schema (s_nested);
    s_assert_json (schema,
        "{\"type\":\"object\",\"properties\":{"
        "\"config\":{\"type\":\"object\",\"properties\":{\"host\":{\"type\":\"string\"},"
        "\"port\":{\"type\":\"integer\"}},\"required\":[\"host\"]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
        "\"servers\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
        "{\"host\":{\"type\":\"string\"},\"port\":{\"type\":\"integer\"}},\"required\":[\"host\"]}},"
        "\"matrix\":{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},"
        "\"free\":{\"type\":\"object\"},"
        "\"any\":{\"type\":\"array\"}},"
        "\"required\":[\"config\"]}");
    json_decref (schema);

    //  No parameters, an empty list, NULL param
    schema = dsh_params_to_json_schema (NULL);
    s_assert_json (schema, "{\"type\":\"object\",\"properties\":{}}");
    json_decref (schema);
    static const dsh_param_t empty [] = { { .name = NULL } };
    schema = dsh_params_to_json_schema (empty);
    s_assert_json (schema, "{\"type\":\"object\",\"properties\":{}}");
    json_decref (schema);
    schema = dsh_param_to_json_schema (NULL);
    s_assert_json (schema, "{}");
    json_decref (schema);

    //  Description only when non-empty; required omitted when empty; bad
    //  literals and unknown types left out
    static const dsh_param_t odd [] = {
        { .name = "a", .type = DSH_TYPE_STRING, .description = "" },
        { .name = "b", .type = DSH_TYPE_STRING, .description = NULL, .default_json = "\"x\"" },
        { .name = "c", .type = DSH_TYPE_NUMBER, .default_json = "{broken" },
        { .name = "d", .type = (dsh_type_t) 99, .description = "anything" },
        { .name = "e", .type = DSH_TYPE_OBJECT, .properties = empty },
        { .name = "f", .type = DSH_TYPE_STRING, .properties = s_host, .items = &s_string_item },
        { .name = NULL }
    };
    schema = dsh_params_to_json_schema (odd);
    s_assert_json (schema,
        "{\"type\":\"object\",\"properties\":{"
        "\"a\":{\"type\":\"string\"},"
        "\"b\":{\"type\":\"string\",\"default\":\"x\"},"
        "\"c\":{\"type\":\"number\"},"
        "\"d\":{\"description\":\"anything\"},"
        "\"e\":{\"type\":\"object\",\"properties\":{}},"
        "\"f\":{\"type\":\"string\"}}}");
    json_decref (schema);
    //  An unknown type is not type-checked
    assert_violations (odd, "{\"d\":[1],\"e\":{\"z\":1}}", "");
    assert_violations (odd, "{\"f\":7}", "\"f\" must be a string");
}

static void
test_tooldef_to_json (void **state)
{
    (void) state;
    dsh_tooldef_t def = {
        .name = "read_file", .description = "Read a file from disk.",
        .params = s_read_file, .title = "Read File",
        .read_only = DSH_HINT_TRUE, .open_world = DSH_HINT_FALSE
    };
    json_t *entry = dsh_tooldef_to_json (&def);
    s_assert_json (entry,
        "{\"name\":\"read_file\",\"description\":\"Read a file from disk.\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"Absolute file path\"},"
        "\"offset\":{\"type\":\"number\"},\"limit\":{\"type\":\"number\",\"default\":100}},"
        "\"required\":[\"path\"]},"
        "\"title\":\"Read File\","
        "\"annotations\":{\"readOnlyHint\":true,\"openWorldHint\":false},"
        "\"concurrencySafe\":true}");
    json_decref (entry);

    //  Minimal: description always, no title/annotations/concurrencySafe
    dsh_tooldef_t bare = { .name = "noop" };
    entry = dsh_tooldef_to_json (&bare);
    s_assert_json (entry,
        "{\"name\":\"noop\",\"description\":\"\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}");
    json_decref (entry);

    //  Empty title is no title; read_only FALSE is not concurrency-safe;
    //  the explicit flag is
    dsh_tooldef_t writer = { .name = "write", .description = "w", .title = "",
                             .read_only = DSH_HINT_FALSE, .destructive = DSH_HINT_TRUE,
                             .idempotent = DSH_HINT_TRUE };
    entry = dsh_tooldef_to_json (&writer);
    s_assert_json (entry,
        "{\"name\":\"write\",\"description\":\"w\",\"parameters\":{\"type\":\"object\",\"properties\":{}},"
        "\"annotations\":{\"readOnlyHint\":false,\"destructiveHint\":true,\"idempotentHint\":true}}");
    json_decref (entry);
    writer.concurrency_safe = true;
    entry = dsh_tooldef_to_json (&writer);
    assert_true (json_is_true (json_object_get (entry, "concurrencySafe")));
    json_decref (entry);
}

//  --------------------------------------------------------------------------
//  Property tests over seeded random specs

#define PROPERTY_SPECS      2500
#define PROPERTY_SEED       0x9E3779B97F4A7C15ull
#define SPEC_MAX_DEPTH      4
#define SPEC_MAX_PROPS      5

static uint64_t s_rng = PROPERTY_SEED;

static uint64_t
s_next (void)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return s_rng;
}

static unsigned
s_below (unsigned limit)
{
    return (unsigned) (s_next () % limit);
}

static const char *const s_prop_names [] = { "p0", "p1", "p2", "p3", "p4", "p5" };
static const char *const s_string_enum [] = { "alpha", "beta", "gam\"ma", "d\xc3\xa9lta", NULL };
static const char *const s_number_enum [] = { "1", "2.5", "oops", "-7", "1e3", NULL };
static const char *const s_integer_enum [] = { "3", "{bad", "-4", "5.0", "9007199254740993", NULL };
static const char *const s_boolean_enum [] = { "true", "false", NULL };
static const char *const s_defaults [] = { "1", "\"x\"", "true", "null", "[1,2]", "{\"a\":1}", "{bad", "" };

//  Enum choices: a non-empty tail of each list that holds a valid literal.
static const char *const *
s_random_enum (dsh_type_t type)
{
    switch (type) {
        case DSH_TYPE_STRING:  return s_string_enum + s_below (4);
        case DSH_TYPE_NUMBER:  return s_number_enum + s_below (5);
        case DSH_TYPE_INTEGER: return s_integer_enum + s_below (4);
        case DSH_TYPE_BOOLEAN: return s_boolean_enum + s_below (2);
        default:               return NULL;
    }
}

static dsh_param_t *s_random_params (int depth);

static void
s_random_param (dsh_param_t *param, int depth)
{
    param->type = (dsh_type_t) (DSH_TYPE_STRING + s_below (6));
    param->required = s_below (2);
    param->description = s_below (3) == 0? "": s_below (2)? "some text": NULL;
    if (param->type < DSH_TYPE_OBJECT && s_below (3) == 0)
        param->enum_values = s_random_enum (param->type);
    if (s_below (4) == 0)
        param->default_json = s_defaults [s_below (8)];
    if (param->type == DSH_TYPE_OBJECT && depth < SPEC_MAX_DEPTH && s_below (4))
        param->properties = s_random_params (depth + 1);
    if (param->type == DSH_TYPE_ARRAY && depth < SPEC_MAX_DEPTH && s_below (4)) {
        dsh_param_t *items = (dsh_param_t *) calloc (1, sizeof *items);
        s_random_param (items, depth + 1);
        param->items = items;
    }
}

static dsh_param_t *
s_random_params (int depth)
{
    unsigned count = s_below (SPEC_MAX_PROPS + 1);
    dsh_param_t *params = (dsh_param_t *) calloc (count + 1, sizeof *params);
    for (unsigned index = 0; index < count; index++) {
        params [index].name = s_prop_names [index];
        s_random_param (&params [index], depth);
    }
    return params;
}

static void s_free_params (dsh_param_t *params);

static void
s_free_param (const dsh_param_t *param)
{
    s_free_params ((dsh_param_t *) param->properties);
    if (param->items) {
        s_free_param (param->items);
        free ((dsh_param_t *) param->items);
    }
}

static void
s_free_params (dsh_param_t *params)
{
    for (dsh_param_t *param = params; param && param->name; param++)
        s_free_param (param);
    free (params);
}

//  Conversion: every level's required list is exactly the required keys in
//  declaration order, absent when there are none; properties likewise.
static void
s_check_schema_params (const json_t *schema, const dsh_param_t *params);

static void
s_check_schema_param (const json_t *schema, const dsh_param_t *param)
{
    assert_true (json_is_object (schema));
    const char *type = json_string_value (json_object_get (schema, "type"));
    assert_non_null (type);
    const char *description = json_string_value (json_object_get (schema, "description"));
    if (param->description && *param->description)
        assert_string_equal (description, param->description);
    else
        assert_null (json_object_get (schema, "description"));
    assert_int_equal (json_object_get (schema, "enum") != NULL, param->enum_values != NULL);
    json_t *fallback = json_object_get (schema, "default");
    json_t *literal = param->default_json? json_loads (param->default_json, JSON_DECODE_ANY, NULL): NULL;
    assert_int_equal (fallback != NULL, literal != NULL);
    if (literal)
        assert_true (json_equal (fallback, literal));
    json_decref (literal);

    if (param->type == DSH_TYPE_OBJECT && param->properties) {
        assert_string_equal (type, "object");
        s_check_schema_params (schema, param->properties);
    }
    else {
        assert_null (json_object_get (schema, "properties"));
        assert_null (json_object_get (schema, "required"));
    }
    if (param->type == DSH_TYPE_ARRAY && param->items) {
        assert_string_equal (type, "array");
        s_check_schema_param (json_object_get (schema, "items"), param->items);
    }
    else
        assert_null (json_object_get (schema, "items"));
}

static void
s_check_schema_params (const json_t *schema, const dsh_param_t *params)
{
    json_t *properties = json_object_get (schema, "properties");
    assert_true (json_is_object (properties));
    json_t *required = json_object_get (schema, "required");
    size_t required_count = 0;
    const char *key;
    json_t *property;
    const dsh_param_t *param = params;
    json_object_foreach (properties, key, property) {
        assert_non_null (param->name);
        assert_string_equal (key, param->name);
        s_check_schema_param (property, param);
        if (param->required) {
            assert_true (json_is_array (required));
            assert_string_equal (json_string_value (json_array_get (required, required_count)), param->name);
            required_count++;
        }
        param++;
    }
    assert_null (param->name);
    if (required_count == 0)
        assert_null (required);
    else
        assert_int_equal (json_array_size (required), required_count);
}

//  Packs a random msgpack value; keys are often the spec's names.
static void
s_pack_random (msgpack_packer *pk, int depth)
{
    unsigned kind = s_below (depth < 5? 13: 9);
    char bytes [8];
    unsigned length = s_below (8);
    for (unsigned index = 0; index < length; index++)
        bytes [index] = (char) s_next ();
    switch (kind) {
        case 0: msgpack_pack_nil (pk); break;
        case 1: s_below (2)? msgpack_pack_true (pk): msgpack_pack_false (pk); break;
        case 2: msgpack_pack_uint64 (pk, s_next () >> s_below (64)); break;
        case 3: msgpack_pack_int64 (pk, -(int64_t) (s_next () >> (1 + s_below (63))) - 1); break;
        case 4: {
            const double doubles [] = { 0.0, -0.0, 1.0, 2.5, -7.0, 1e300, NAN, INFINITY, 3.0, 1e3 };
            msgpack_pack_double (pk, doubles [s_below (10)]);
            break;
        }
        case 5: msgpack_pack_float (pk, (float) s_below (5) / 2.0f); break;
        case 6: {
            const char *texts [] = { "alpha", "beta", "", "d\xc3\xa9lta", "\xff\xfe" };
            const char *text = texts [s_below (5)];
            msgpack_pack_str_with_body (pk, text, strlen (text));
            break;
        }
        case 7: msgpack_pack_bin_with_body (pk, bytes, length); break;
        case 8:
            msgpack_pack_ext (pk, length, (int8_t) s_below (100));
            msgpack_pack_ext_body (pk, bytes, length);
            break;
        case 9:
        case 10: {
            unsigned count = s_below (4);
            msgpack_pack_array (pk, count);
            for (unsigned index = 0; index < count; index++)
                s_pack_random (pk, depth + 1);
            break;
        }
        default: {
            unsigned count = s_below (5);
            msgpack_pack_map (pk, count);
            for (unsigned index = 0; index < count; index++) {
                if (s_below (8) == 0)
                    msgpack_pack_int (pk, (int) s_below (3));
                else {
                    const char *name = s_below (6)? s_prop_names [s_below (6)]: "zz";
                    msgpack_pack_str_with_body (pk, name, strlen (name));
                }
                s_pack_random (pk, depth + 1);
            }
            break;
        }
    }
}

//  Packs a JSON literal (an enum entry) the way the spec reads it.
static void
s_pack_literal (msgpack_packer *pk, dsh_type_t type, const char *entry)
{
    if (type == DSH_TYPE_STRING) {
        msgpack_pack_str_with_body (pk, entry, strlen (entry));
        return;
    }
    json_t *value = json_loads (entry, JSON_DECODE_ANY, NULL);
    assert_non_null (value);
    assert_int_equal (dsh_json_to_msgpack (pk, value), 0);
    json_decref (value);
}

//  The param whose key a valid value leaves out (NULL: none).
static const dsh_param_t *s_dropped = NULL;

static void s_pack_valid_object (msgpack_packer *pk, const dsh_param_t *params);

//  Packs a value that satisfies param.
static void
s_pack_valid (msgpack_packer *pk, const dsh_param_t *param)
{
    if (param->enum_values) {
        //  Pick one of the entries that survive conversion
        const char *usable [8];
        unsigned count = 0;
        for (const char *const *entry = param->enum_values; *entry; entry++) {
            json_t *value = param->type == DSH_TYPE_STRING? json_string (*entry)
                          : json_loads (*entry, JSON_DECODE_ANY, NULL);
            if (value)
                usable [count++] = *entry;
            json_decref (value);
        }
        assert_true (count > 0);
        s_pack_literal (pk, param->type, usable [s_below (count)]);
        return;
    }
    switch (param->type) {
        case DSH_TYPE_STRING:
            msgpack_pack_str_with_body (pk, "v", 1);
            break;
        case DSH_TYPE_NUMBER:
            if (s_below (2))
                msgpack_pack_double (pk, 0.5 * (int) s_below (9));
            else
                msgpack_pack_int64 (pk, (int64_t) s_below (100) - 50);
            break;
        case DSH_TYPE_INTEGER:
            if (s_below (4) == 0)
                msgpack_pack_double (pk, (double) s_below (10));
            else
                msgpack_pack_int64 (pk, (int64_t) s_below (100) - 50);
            break;
        case DSH_TYPE_BOOLEAN:
            s_below (2)? msgpack_pack_true (pk): msgpack_pack_false (pk);
            break;
        case DSH_TYPE_OBJECT:
            if (param->properties)
                s_pack_valid_object (pk, param->properties);
            else {
                msgpack_pack_map (pk, 1);
                msgpack_pack_str_with_body (pk, "free", 4);
                s_pack_random (pk, 3);
            }
            break;
        case DSH_TYPE_ARRAY: {
            //  While a key is dropped, arrays are never empty so that the
            //  dropped key's container exists
            unsigned count = s_below (4) + (s_dropped? 1: 0);
            msgpack_pack_array (pk, count);
            for (unsigned index = 0; index < count; index++) {
                if (param->items)
                    s_pack_valid (pk, param->items);
                else
                    s_pack_random (pk, 3);
            }
            break;
        }
    }
}

//  Packs a map holding every required key (but s_dropped), some optional
//  ones, and sometimes an extra key.
static void
s_pack_valid_object (msgpack_packer *pk, const dsh_param_t *params)
{
    bool present [SPEC_MAX_PROPS + 1] = { false };
    unsigned count = 0;
    for (unsigned index = 0; params [index].name; index++) {
        const dsh_param_t *param = &params [index];
        present [index] = param != s_dropped && (param->required || s_below (2));
        count += present [index];
    }
    bool extra = s_below (3) == 0;
    msgpack_pack_map (pk, count + extra);
    if (extra) {
        msgpack_pack_str_with_body (pk, "extra", 5);
        s_pack_random (pk, 3);
    }
    for (unsigned index = 0; params [index].name; index++) {
        if (!present [index])
            continue;
        msgpack_pack_str_with_body (pk, params [index].name, strlen (params [index].name));
        s_pack_valid (pk, &params [index]);
    }
}

typedef struct {
    const dsh_param_t *param;
    char *path;
} drop_candidate_t;

//  Collects required keys reachable through required containers, with the
//  path of their first occurrence (element 0 of any array on the way).
static void
s_collect_drops (zlistx_t *candidates, const dsh_param_t *params, const char *prefix)
{
    for (const dsh_param_t *param = params; param && param->name; param++) {
        if (!param->required)
            continue;
        char *path = prefix? zsys_sprintf ("%s.%s", prefix, param->name): strdup (param->name);
        drop_candidate_t *candidate = (drop_candidate_t *) malloc (sizeof *candidate);
        candidate->param = param;
        candidate->path = strdup (path);
        zlistx_add_end (candidates, candidate);

        //  Descend through a chain of array items into an object
        const dsh_param_t *inner = param;
        char *inner_path = strdup (path);
        while (inner->type == DSH_TYPE_ARRAY && inner->items && !inner->items->enum_values) {
            char *next = zsys_sprintf ("%s[0]", inner_path);
            free (inner_path);
            inner_path = next;
            inner = inner->items;
        }
        if (inner->type == DSH_TYPE_OBJECT && inner->properties)
            s_collect_drops (candidates, inner->properties, inner_path);
        free (inner_path);
        free (path);
    }
}

static void
s_free_candidate (drop_candidate_t **self_p)
{
    if (*self_p) {
        free ((*self_p)->path);
        free (*self_p);
        *self_p = NULL;
    }
}

static const msgpack_object *
s_pack_args (args_t *args, const dsh_param_t *params, bool valid)
{
    msgpack_sbuffer_init (&args->sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &args->sbuf, msgpack_sbuffer_write);
    if (valid)
        s_pack_valid_object (&pk, params);
    else
        s_pack_random (&pk, 0);
    return s_args_unpack (args);
}

static bool
s_list_contains (zlistx_t *list, const char *text)
{
    for (char *line = zlistx_first (list); line; line = zlistx_next (list))
        if (streq (line, text))
            return true;
    return false;
}

static void
test_property_random_specs (void **state)
{
    (void) state;
    s_rng = PROPERTY_SEED;
    size_t drops_checked = 0, nested_drops = 0, random_valid = 0, non_object_roots = 0;
    for (int round = 0; round < PROPERTY_SPECS; round++) {
        dsh_param_t *params = s_random_params (1);

        //  Conversion: required equals the required keys at every level
        json_t *schema = dsh_params_to_json_schema (params);
        assert_string_equal (json_string_value (json_object_get (schema, "type")), "object");
        s_check_schema_params (schema, params);
        json_decref (schema);

        //  Random input never crashes, and counts agree with the list
        for (int sample = 0; sample < 8; sample++) {
            args_t args = { 0 };
            const msgpack_object *obj = s_pack_args (&args, params, false);
            zlistx_t *list = zlistx_new ();
            zlistx_set_destructor (list, (czmq_destructor *) zstr_free);
            size_t count = dsh_params_validate (params, obj, list);
            assert_int_equal (count, zlistx_size (list));
            if (obj->type != MSGPACK_OBJECT_MAP) {
                //  A non-object root fails with exactly the one message
                assert_int_equal (count, 1);
                assert_string_equal (zlistx_first (list), "\"arguments\" must be an object");
                non_object_roots++;
            }
            else
            if (count == 0)
                random_valid++;
            char *text = dsh_params_check (params, obj);
            assert_int_equal (text != NULL, count > 0);
            free (text);
            zlistx_destroy (&list);
            s_args_free (&args);
        }

        //  Arguments built to satisfy the spec always pass
        for (int sample = 0; sample < 4; sample++) {
            args_t args = { 0 };
            const msgpack_object *obj = s_pack_args (&args, params, true);
            char *got = s_violations (params, obj);
            if (*got)
                fail_msg ("round %d: valid arguments rejected: %s", round, got);
            free (got);
            assert_null (dsh_params_check (params, obj));
            s_args_free (&args);
        }

        //  Dropping one required key always fails, naming its path
        zlistx_t *candidates = zlistx_new ();
        zlistx_set_destructor (candidates, (czmq_destructor *) s_free_candidate);
        s_collect_drops (candidates, params, NULL);
        if (zlistx_size (candidates) > 0) {
            unsigned pick = s_below ((unsigned) zlistx_size (candidates));
            drop_candidate_t *candidate = (drop_candidate_t *) zlistx_first (candidates);
            while (pick--)
                candidate = (drop_candidate_t *) zlistx_next (candidates);
            s_dropped = candidate->param;
            args_t args = { 0 };
            const msgpack_object *obj = s_pack_args (&args, params, true);
            s_dropped = NULL;
            zlistx_t *list = zlistx_new ();
            zlistx_set_destructor (list, (czmq_destructor *) zstr_free);
            assert_true (dsh_params_validate (params, obj, list) > 0);
            char *expected = zsys_sprintf ("missing required property \"%s\"", candidate->path);
            if (!s_list_contains (list, expected))
                fail_msg ("round %d: no \"%s\" among %zu violations", round, expected, zlistx_size (list));
            free (expected);
            drops_checked++;
            nested_drops += strchr (candidate->path, '.') != NULL;
            zlistx_destroy (&list);
            s_args_free (&args);
        }
        zlistx_destroy (&candidates);
        s_free_params (params);
    }
    //  The generator really covered the cases it claims to
    print_message ("%d specs: %zu drops (%zu nested), %zu non-object roots, %zu random maps valid\n",
                   PROPERTY_SPECS, drops_checked, nested_drops, non_object_roots, random_valid);
    assert_true (drops_checked > PROPERTY_SPECS / 2);
    assert_true (nested_drops > 100);
    assert_true (non_object_roots > 1000);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_validation_is_total_over_malformed_input),
        cmocka_unit_test (test_validation_flags_missing_required_keys),
        cmocka_unit_test (test_validation_allows_extra_keys),
        cmocka_unit_test (test_validation_applies_no_defaults),
        cmocka_unit_test (test_validation_type_checks_primitives),
        cmocka_unit_test (test_validation_nil_is_not_absent),
        cmocka_unit_test (test_validation_checks_enums),
        cmocka_unit_test (test_validation_recurses_into_objects_and_arrays),
        cmocka_unit_test (test_conversion_read_file),
        cmocka_unit_test (test_conversion_is_total_and_required_at_every_level),
        cmocka_unit_test (test_tooldef_to_json),
        cmocka_unit_test (test_property_random_specs),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
