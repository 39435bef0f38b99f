/*  =========================================================================
    test_call - dsh_call: a CALL as a handler reads it (typed accessors and
    their fallbacks) and the RESULT it builds (every content block kind,
    base64 data, structured content, errors)
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_call.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"

//  One CALL body frame and the call decoded from it (the call borrows the
//  frame's bytes).
typedef struct {
    zframe_t *body;
    dsh_call_t *call;
} s_call_t;

static s_call_t s_held;

static int
s_teardown (void **state)
{
    (void) state;
    dsh_call_destroy (&s_held.call);
    zframe_destroy (&s_held.body);
    return 0;
}

//  A call to tool "echo" with arguments and meta given as JSON (NULL: not
//  sent); freed by the next call or the teardown.
static dsh_call_t *
s_call (const char *json, const char *agent, const char *meta_json)
{
    s_teardown (NULL);
    msgpack_sbuffer args, meta;
    char error [256] = "";
    if (json)
        assert_int_equal (dsh_json_text_to_msgpack (json, &args, error, sizeof error), 0);
    if (meta_json)
        assert_int_equal (dsh_json_text_to_msgpack (meta_json, &meta, error, sizeof error), 0);
    s_held.body = dsh_proto_encode_call ("call-1", "echo", json? args.data: NULL, json? args.size: 0,
                                         agent, meta_json? meta.data: NULL, meta_json? meta.size: 0, 0);
    if (json)
        msgpack_sbuffer_destroy (&args);
    if (meta_json)
        msgpack_sbuffer_destroy (&meta);
    s_held.call = dsh_call_new (zframe_data (s_held.body), zframe_size (s_held.body), error, sizeof error);
    if (!s_held.call)
        fail_msg ("call refused: %s", error);
    return s_held.call;
}

static void
test_call_new (void **state)
{
    (void) state;
    dsh_call_t *call = s_call ("{\"a\":1}", "agent-9", "{\"trace\":\"t-1\"}");
    assert_string_equal (dsh_call_id (call), "call-1");
    assert_string_equal (dsh_call_name (call), "echo");
    assert_string_equal (dsh_call_agent (call), "agent-9");
    const msgpack_object *arguments = dsh_call_arguments (call);
    assert_non_null (arguments);
    assert_int_equal (arguments->type, MSGPACK_OBJECT_MAP);
    const msgpack_object *meta = dsh_call_meta (call);
    assert_non_null (meta);
    assert_true (dsh_str_eq (dsh_map_get (meta, "trace"), "t-1"));

    //  No agent, no meta; encode_call sends an empty arguments map
    call = s_call (NULL, NULL, NULL);
    assert_null (dsh_call_agent (call));
    assert_null (dsh_call_meta (call));
    assert_non_null (dsh_call_arguments (call));
    assert_int_equal (dsh_call_arguments (call)->via.map.size, 0);
    assert_false (dsh_call_has (call, "a"));
    assert_string_equal (dsh_call_string (call, "a", "dflt"), "dflt");
}

static void
s_call_refused (const void *data, size_t size, const char *part)
{
    char error [256] = "";
    dsh_call_t *call = dsh_call_new (data, size, error, sizeof error);
    assert_null (call);
    if (!strstr (error, part))
        fail_msg ("\"%s\" does not contain \"%s\"", error, part);
}

static void
test_call_new_refused (void **state)
{
    (void) state;
#define BYTES(text) text, sizeof (text) - 1
    s_call_refused (BYTES ("\x92\x01\x02"), "not a map");                      //  [1, 2]
    s_call_refused (BYTES ("\x81\xa4name\xa1x"), "callId");                    //  {"name": "x"}
    s_call_refused (BYTES ("\x82\xa6" "callId\xa1" "c\xa4name\x05"), "name");  //  {"callId":"c","name":5}
    char error [256] = "";
    assert_null (dsh_call_new ("\xc1", 1, error, sizeof error));          //  never-used byte
    assert_true (strlen (error) > 0);
    assert_null (dsh_call_new ("\x82\xa1", 2, error, sizeof error));      //  truncated
    dsh_call_t *call = NULL;
    dsh_call_destroy (&call);
}

//  An unread call (a stage's) decodes on its first read, and one whose
//  body does not decode reads as an empty call rather than failing.
static void
test_call_new_unread (void **state)
{
    (void) state;
    const char body [] = "\x84\xa6" "callId\xa2" "c1\xa4name\xa4" "echo\xa5" "agent\xa1" "a"
                         "\xa9" "arguments\x81\xa1" "x\x07";
    dsh_call_t *call = dsh_call_new_unread (body, sizeof (body) - 1);
    assert_non_null (call);
    assert_null (dsh_call_context (call));
    int context = 0;
    dsh_call_hooks_t none = { NULL, NULL };
    dsh_call_set_hooks (call, &none, &context);
    assert_ptr_equal (dsh_call_context (call), &context);
    assert_string_equal (dsh_call_id (call), "c1");
    assert_string_equal (dsh_call_name (call), "echo");
    assert_string_equal (dsh_call_agent (call), "a");
    assert_int_equal (dsh_call_integer (call, "x", 0), 7);
    assert_null (dsh_call_meta (call));
    dsh_call_destroy (&call);

    call = dsh_call_new_unread ("\x82\xa1", 2);
    assert_string_equal (dsh_call_id (call), "");
    assert_string_equal (dsh_call_name (call), "");
    assert_null (dsh_call_arguments (call));
    assert_string_equal (dsh_call_string (call, "x", "dflt"), "dflt");
    dsh_call_destroy (&call);
    dsh_call_destroy (&call);
}

static void
test_string_accessor (void **state)
{
    (void) state;
    dsh_call_t *call = s_call ("{\"s\":\"hello\",\"e\":\"\",\"n\":5,\"nil\":null,\"u\":\"caf\\u00e9\"}",
                               NULL, NULL);
    assert_string_equal (dsh_call_string (call, "s", NULL), "hello");
    assert_string_equal (dsh_call_string (call, "e", "x"), "");
    assert_string_equal (dsh_call_string (call, "u", NULL), "caf\xc3\xa9");
    assert_string_equal (dsh_call_string (call, "n", "fallback"), "fallback");
    assert_string_equal (dsh_call_string (call, "nil", "fallback"), "fallback");
    assert_string_equal (dsh_call_string (call, "absent", "fallback"), "fallback");
    assert_null (dsh_call_string (call, "absent", NULL));
    //  Copies live as long as the call, and each call gets one
    const char *first = dsh_call_string (call, "s", NULL);
    const char *second = dsh_call_string (call, "s", NULL);
    assert_string_equal (first, "hello");
    assert_string_equal (second, "hello");

    //  has: present (nil counts), absent
    assert_true (dsh_call_has (call, "s"));
    assert_true (dsh_call_has (call, "nil"));
    assert_false (dsh_call_has (call, "absent"));
    assert_non_null (dsh_call_arg (call, "n"));
    assert_null (dsh_call_arg (call, "absent"));
}

static void
test_number_accessors (void **state)
{
    (void) state;
    dsh_call_t *call = s_call ("{\"i\":42,\"neg\":-7,\"f\":2.5,\"whole\":5.0,\"negwhole\":-3.0,"
                               "\"big\":1e30,\"s\":\"12\",\"b\":true,\"nil\":null,\"zero\":0}", NULL, NULL);
    //  number: any integer or float
    assert_true (dsh_call_number (call, "i", -1) == 42.0);
    assert_true (dsh_call_number (call, "neg", -1) == -7.0);
    assert_true (dsh_call_number (call, "f", -1) == 2.5);
    assert_true (dsh_call_number (call, "big", -1) == 1e30);
    assert_true (dsh_call_number (call, "s", -1) == -1);
    assert_true (dsh_call_number (call, "b", -1) == -1);
    assert_true (dsh_call_number (call, "nil", -1) == -1);
    assert_true (dsh_call_number (call, "absent", 0.25) == 0.25);
    assert_true (dsh_call_number (call, "zero", -1) == 0);

    //  integer: integers and integral floats only
    assert_int_equal (dsh_call_integer (call, "i", -1), 42);
    assert_int_equal (dsh_call_integer (call, "neg", -1), -7);
    assert_int_equal (dsh_call_integer (call, "whole", -1), 5);
    assert_int_equal (dsh_call_integer (call, "negwhole", -1), -3);
    assert_int_equal (dsh_call_integer (call, "zero", -1), 0);
    assert_int_equal (dsh_call_integer (call, "f", -1), -1);
    assert_int_equal (dsh_call_integer (call, "big", -1), -1);
    assert_int_equal (dsh_call_integer (call, "s", -1), -1);
    assert_int_equal (dsh_call_integer (call, "b", -1), -1);
    assert_int_equal (dsh_call_integer (call, "absent", 99), 99);

    //  bool: booleans only
    call = s_call ("{\"t\":true,\"f\":false,\"one\":1,\"s\":\"true\"}", NULL, NULL);
    assert_true (dsh_call_bool (call, "t", false));
    assert_false (dsh_call_bool (call, "f", true));
    assert_true (dsh_call_bool (call, "one", true));
    assert_false (dsh_call_bool (call, "one", false));
    assert_false (dsh_call_bool (call, "s", false));
    assert_true (dsh_call_bool (call, "absent", true));
}

static void
test_packed_limits (void **state)
{
    (void) state;
    //  Arguments JSON text cannot give: huge integers, float32, a NUL byte
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 5);
    dsh_pack_cstr (&pk, "nul");
    msgpack_pack_str (&pk, 3);
    msgpack_pack_str_body (&pk, "a\0b", 3);
    dsh_pack_cstr (&pk, "umax");
    msgpack_pack_uint64 (&pk, UINT64_MAX);
    dsh_pack_cstr (&pk, "imax");
    msgpack_pack_int64 (&pk, INT64_MAX);
    dsh_pack_cstr (&pk, "imin");
    msgpack_pack_int64 (&pk, INT64_MIN);
    dsh_pack_cstr (&pk, "f32");
    msgpack_pack_float (&pk, 8.0f);
    s_teardown (NULL);
    s_held.body = dsh_proto_encode_call ("c", "n", sbuf.data, sbuf.size, NULL, NULL, 0, 0);
    msgpack_sbuffer_destroy (&sbuf);
    char error [256] = "";
    s_held.call = dsh_call_new (zframe_data (s_held.body), zframe_size (s_held.body), error, sizeof error);
    assert_non_null (s_held.call);
    dsh_call_t *call = s_held.call;
    assert_int_equal (dsh_call_integer (call, "umax", -1), -1);
    assert_true (dsh_call_integer (call, "imax", -1) == INT64_MAX);
    assert_true (dsh_call_integer (call, "imin", -1) == INT64_MIN);
    assert_int_equal (dsh_call_integer (call, "f32", -1), 8);
    assert_true (dsh_call_number (call, "f32", -1) == 8.0);
    assert_true (dsh_call_number (call, "umax", -1) == (double) UINT64_MAX);
    //  A string with a NUL byte cannot be a C string
    assert_string_equal (dsh_call_string (call, "nul", "fallback"), "fallback");
    assert_true (dsh_call_has (call, "nul"));
}

static void
test_arguments_not_a_map (void **state)
{
    (void) state;
    dsh_call_t *call = s_call ("[1,2,3]", NULL, NULL);
    assert_non_null (dsh_call_arguments (call));
    assert_int_equal (dsh_call_arguments (call)->type, MSGPACK_OBJECT_ARRAY);
    assert_null (dsh_call_arg (call, "0"));
    assert_false (dsh_call_has (call, "0"));
    assert_string_equal (dsh_call_string (call, "x", "f"), "f");
    assert_int_equal (dsh_call_integer (call, "x", 3), 3);
}

// ---------------------------------------------------------------------------
//  Results

//  A result encoded (both ways) and decoded; checked against the protocol's rules.
typedef struct {
    zframe_t *frame;
    dsh_doc_t *doc;
    const msgpack_object *root;
    const msgpack_object *content;
} s_encoded_t;

static s_encoded_t
s_encode (dsh_result_t *result)
{
    s_encoded_t encoded;
    encoded.frame = dsh_result_encode (result);
    //  Packed straight into a message, the bytes are the same
    zmq_msg_t msg;
    assert_int_equal (dsh_result_encode_msg (result, &msg), 0);
    assert_int_equal (zmq_msg_size (&msg), zframe_size (encoded.frame));
    assert_memory_equal (zmq_msg_data (&msg), zframe_data (encoded.frame), zframe_size (encoded.frame));
    zmq_msg_close (&msg);
    char error [256] = "";
    encoded.doc = dsh_doc_new (zframe_data (encoded.frame), zframe_size (encoded.frame), error, sizeof error);
    if (!encoded.doc)
        fail_msg ("result does not decode: %s", error);
    encoded.root = dsh_doc_root (encoded.doc);
    if (dsh_proto_check_result (encoded.root, error, sizeof error))
        fail_msg ("result is not valid: %s", error);
    encoded.content = dsh_map_get (encoded.root, "content");
    return encoded;
}

static void
s_encoded_destroy (s_encoded_t *encoded)
{
    dsh_doc_destroy (&encoded->doc);
    zframe_destroy (&encoded->frame);
}

static const msgpack_object *
s_block (s_encoded_t *encoded, uint32_t index)
{
    assert_true (index < encoded->content->via.array.size);
    return &encoded->content->via.array.ptr [index];
}

static void
s_assert_str (const msgpack_object *obj, const char *text)
{
    assert_non_null (obj);
    assert_int_equal (obj->type, MSGPACK_OBJECT_STR);
    assert_int_equal (obj->via.str.size, strlen (text));
    assert_memory_equal (obj->via.str.ptr, text, strlen (text));
}

//  Decodes a base64 str object and compares it with data.
static void
s_assert_base64 (const msgpack_object *obj, const void *data, size_t size)
{
    assert_non_null (obj);
    assert_int_equal (obj->type, MSGPACK_OBJECT_STR);
    char *text = (char *) malloc (obj->via.str.size + 1);
    memcpy (text, obj->via.str.ptr, obj->via.str.size);
    text [obj->via.str.size] = 0;
    assert_null (strchr (text, '\n'));
    zarmour_t *armour = zarmour_new ();
    zarmour_set_mode (armour, ZARMOUR_MODE_BASE64_STD);
    zchunk_t *chunk = zarmour_decode (armour, text);
    assert_non_null (chunk);
    //  zarmour NUL-terminates what it decodes, and may count the NUL
    assert_true (zchunk_size (chunk) == size || zchunk_size (chunk) == size + 1);
    if (zchunk_size (chunk) == size + 1)
        assert_int_equal (zchunk_data (chunk) [size], 0);
    if (size)
        assert_memory_equal (zchunk_data (chunk), data, size);
    zchunk_destroy (&chunk);
    zarmour_destroy (&armour);
    free (text);
}

static void
test_result_empty (void **state)
{
    (void) state;
    dsh_result_t *result = dsh_result_new ("c-1");
    assert_false (dsh_result_is_error (result));
    s_encoded_t encoded = s_encode (result);
    assert_int_equal (encoded.root->via.map.size, 3);
    s_assert_str (dsh_map_get (encoded.root, "callId"), "c-1");
    assert_int_equal (encoded.content->via.array.size, 0);
    const msgpack_object *is_error = dsh_map_get (encoded.root, "isError");
    assert_int_equal (is_error->type, MSGPACK_OBJECT_BOOLEAN);
    assert_false (is_error->via.boolean);
    assert_null (dsh_map_get (encoded.root, "error"));
    assert_null (dsh_map_get (encoded.root, "structuredContent"));
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);
    assert_null (result);
    dsh_result_destroy (&result);

    result = dsh_result_new (NULL);
    encoded = s_encode (result);
    s_assert_str (dsh_map_get (encoded.root, "callId"), "");
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);
}

static void
test_result_blocks (void **state)
{
    (void) state;
    const byte image [] = { 0x89, 'P', 'N', 'G', 0x00, 0x0d, 0x0a, 0x1a, 0xff, 0x00 };
    const byte audio [] = { 'R', 'I', 'F', 'F', 0x00 };
    const byte blob [] = { 0x00, 0x01, 0x02, 0xfe };
    dsh_result_t *result = dsh_result_new ("c-2");
    dsh_result_text (result, "plain");
    dsh_result_textf (result, "%d items in %s", 3, "dir");
    dsh_result_text_n (result, "ab\0cd", 5);
    dsh_result_image (result, "image/png", image, sizeof image);
    dsh_result_audio (result, "audio/wav", audio, sizeof audio);
    dsh_result_resource_link (result, "file:///a.txt", "a.txt", NULL, NULL);
    dsh_result_resource_link (result, "file:///b.txt", "b.txt", "text/plain", "the b file");
    dsh_result_resource_text (result, "file:///c.txt", "text/plain", "see");
    dsh_result_resource_text (result, "file:///d.txt", NULL, "dee");
    dsh_result_resource_blob (result, "file:///e.bin", "application/octet-stream", blob, sizeof blob);
    dsh_result_resource_blob (result, "file:///f.bin", NULL, blob, 1);
    dsh_result_image (result, "image/gif", NULL, 0);
    assert_false (dsh_result_is_error (result));

    s_encoded_t encoded = s_encode (result);
    assert_int_equal (encoded.content->via.array.size, 12);
    const msgpack_object *block = s_block (&encoded, 0);
    s_assert_str (dsh_map_get (block, "type"), "text");
    s_assert_str (dsh_map_get (block, "text"), "plain");
    s_assert_str (dsh_map_get (s_block (&encoded, 1), "text"), "3 items in dir");
    const msgpack_object *text = dsh_map_get (s_block (&encoded, 2), "text");
    assert_int_equal (text->via.str.size, 5);
    assert_memory_equal (text->via.str.ptr, "ab\0cd", 5);

    block = s_block (&encoded, 3);
    assert_int_equal (block->via.map.size, 3);
    s_assert_str (dsh_map_get (block, "type"), "image");
    s_assert_str (dsh_map_get (block, "mimeType"), "image/png");
    s_assert_base64 (dsh_map_get (block, "data"), image, sizeof image);
    block = s_block (&encoded, 4);
    s_assert_str (dsh_map_get (block, "type"), "audio");
    s_assert_str (dsh_map_get (block, "mimeType"), "audio/wav");
    s_assert_base64 (dsh_map_get (block, "data"), audio, sizeof audio);

    block = s_block (&encoded, 5);
    assert_int_equal (block->via.map.size, 3);
    s_assert_str (dsh_map_get (block, "type"), "resource_link");
    s_assert_str (dsh_map_get (block, "uri"), "file:///a.txt");
    s_assert_str (dsh_map_get (block, "name"), "a.txt");
    assert_null (dsh_map_get (block, "mimeType"));
    assert_null (dsh_map_get (block, "description"));
    block = s_block (&encoded, 6);
    assert_int_equal (block->via.map.size, 5);
    s_assert_str (dsh_map_get (block, "mimeType"), "text/plain");
    s_assert_str (dsh_map_get (block, "description"), "the b file");

    block = s_block (&encoded, 7);
    s_assert_str (dsh_map_get (block, "type"), "resource");
    const msgpack_object *resource = dsh_map_get (block, "resource");
    assert_int_equal (resource->via.map.size, 3);
    s_assert_str (dsh_map_get (resource, "uri"), "file:///c.txt");
    s_assert_str (dsh_map_get (resource, "mimeType"), "text/plain");
    s_assert_str (dsh_map_get (resource, "text"), "see");
    assert_null (dsh_map_get (resource, "blob"));
    resource = dsh_map_get (s_block (&encoded, 8), "resource");
    assert_int_equal (resource->via.map.size, 2);
    s_assert_str (dsh_map_get (resource, "text"), "dee");
    assert_null (dsh_map_get (resource, "mimeType"));

    resource = dsh_map_get (s_block (&encoded, 9), "resource");
    assert_int_equal (resource->via.map.size, 3);
    s_assert_str (dsh_map_get (resource, "uri"), "file:///e.bin");
    s_assert_str (dsh_map_get (resource, "mimeType"), "application/octet-stream");
    s_assert_base64 (dsh_map_get (resource, "blob"), blob, sizeof blob);
    assert_null (dsh_map_get (resource, "text"));
    resource = dsh_map_get (s_block (&encoded, 10), "resource");
    assert_int_equal (resource->via.map.size, 2);
    s_assert_base64 (dsh_map_get (resource, "blob"), blob, 1);

    //  No bytes: an empty base64 string
    s_assert_str (dsh_map_get (s_block (&encoded, 11), "data"), "");

    //  Every block on its own is valid too
    char error [256] = "";
    for (uint32_t index = 0; index < 12; index++)
        assert_int_equal (dsh_proto_check_content (s_block (&encoded, index), error, sizeof error), 0);
    s_encoded_destroy (&encoded);

    //  Encoding twice gives the same bytes
    zframe_t *first = dsh_result_encode (result);
    zframe_t *second = dsh_result_encode (result);
    assert_true (zframe_eq (first, second));
    zframe_destroy (&first);
    zframe_destroy (&second);
    dsh_result_destroy (&result);
}

static void
test_base64_sizes (void **state)
{
    (void) state;
    //  Every padding case, and a payload with every byte value
    byte data [300];
    for (size_t index = 0; index < sizeof data; index++)
        data [index] = (byte) (index * 7);
    const size_t sizes [] = { 1, 2, 3, 4, 5, 256, 300 };
    for (size_t index = 0; index < sizeof sizes / sizeof sizes [0]; index++) {
        dsh_result_t *result = dsh_result_new ("c");
        dsh_result_image (result, "image/x", data, sizes [index]);
        s_encoded_t encoded = s_encode (result);
        s_assert_base64 (dsh_map_get (s_block (&encoded, 0), "data"), data, sizes [index]);
        s_encoded_destroy (&encoded);
        dsh_result_destroy (&result);
    }
}

static void
test_result_grows (void **state)
{
    (void) state;
    //  Blocks start inside the result and move to the heap as they grow:
    //  every one of them survives each move, in order
    dsh_result_t *result = dsh_result_new ("c-grow");
    char text [200];
    for (int index = 0; index < 100; index++) {
        snprintf (text, sizeof text, "%03d:", index);
        memset (text + 4, 'a' + index % 26, sizeof text - 5);
        text [sizeof text - 1] = 0;
        dsh_result_text (result, text);
        if (index == 0 || index == 1 || index == 99) {
            s_encoded_t encoded = s_encode (result);
            assert_int_equal (encoded.content->via.array.size, index + 1);
            s_encoded_destroy (&encoded);
        }
    }
    dsh_result_text (result, "");
    s_encoded_t encoded = s_encode (result);
    assert_int_equal (encoded.content->via.array.size, 101);
    for (int index = 0; index < 100; index++) {
        snprintf (text, sizeof text, "%03d:", index);
        memset (text + 4, 'a' + index % 26, sizeof text - 5);
        text [sizeof text - 1] = 0;
        s_assert_str (dsh_map_get (s_block (&encoded, (uint32_t) index), "text"), text);
    }
    s_assert_str (dsh_map_get (s_block (&encoded, 100), "text"), "");
    s_encoded_destroy (&encoded);

    //  An error result starts its blocks over, wherever they live
    dsh_result_error (result, NULL, "gone");
    encoded = s_encode (result);
    assert_int_equal (encoded.content->via.array.size, 1);
    s_assert_str (dsh_map_get (s_block (&encoded, 0), "text"), "Error: gone");
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);

    //  A callId and an error code too long for the encoder's stack space
    char long_id [1000];
    memset (long_id, 'i', sizeof long_id - 1);
    long_id [sizeof long_id - 1] = 0;
    char long_code [500];
    memset (long_code, 'C', sizeof long_code - 1);
    long_code [sizeof long_code - 1] = 0;
    result = dsh_result_new (long_id);
    dsh_result_error (result, long_code, "long");
    dsh_result_structured (result, "\x81\xa1k\x01", 4);
    encoded = s_encode (result);
    s_assert_str (dsh_map_get (encoded.root, "callId"), long_id);
    s_assert_str (dsh_map_get (dsh_map_get (encoded.root, "error"), "code"), long_code);
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);
}

static void
test_result_structured (void **state)
{
    (void) state;
    msgpack_sbuffer sbuf;
    char error [256] = "";
    assert_int_equal (dsh_json_text_to_msgpack ("{\"count\":3,\"names\":[\"a\",\"b\"]}", &sbuf,
                                                error, sizeof error), 0);
    dsh_result_t *result = dsh_result_new ("c");
    dsh_result_text (result, "3 names");
    dsh_result_structured (result, "\x81\xa1x\x01", 4);         //  replaced below
    dsh_result_structured (result, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);                             //  it was copied
    s_encoded_t encoded = s_encode (result);
    assert_int_equal (encoded.root->via.map.size, 4);
    const msgpack_object *structured = dsh_map_get (encoded.root, "structuredContent");
    assert_non_null (structured);
    assert_int_equal (structured->type, MSGPACK_OBJECT_MAP);
    assert_int_equal (structured->via.map.size, 2);
    assert_int_equal (dsh_map_get (structured, "count")->via.u64, 3);
    assert_int_equal (dsh_map_get (structured, "names")->via.array.size, 2);
    assert_null (dsh_map_get (structured, "x"));
    assert_int_equal (encoded.content->via.array.size, 1);
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);
}

static void
test_result_error (void **state)
{
    (void) state;
    dsh_result_t *result = dsh_result_new ("c-3");
    dsh_result_text (result, "partial output");
    dsh_result_image (result, "image/png", "x", 1);
    dsh_result_structured (result, "\x81\xa1x\x01", 4);
    dsh_result_error (result, NULL, "disk %s at %d%%", "full", 100);
    assert_true (dsh_result_is_error (result));

    s_encoded_t encoded = s_encode (result);
    assert_int_equal (encoded.root->via.map.size, 4);
    //  The content is replaced by the one error text
    assert_int_equal (encoded.content->via.array.size, 1);
    s_assert_str (dsh_map_get (s_block (&encoded, 0), "type"), "text");
    s_assert_str (dsh_map_get (s_block (&encoded, 0), "text"), "Error: disk full at 100%");
    assert_true (dsh_map_get (encoded.root, "isError")->via.boolean);
    const msgpack_object *failure = dsh_map_get (encoded.root, "error");
    assert_non_null (failure);
    s_assert_str (dsh_map_get (failure, "code"), "TOOL_FAILED");
    s_assert_str (dsh_map_get (failure, "name"), "ToolError");
    assert_null (dsh_map_get (encoded.root, "structuredContent"));
    s_assert_str (dsh_map_get (encoded.root, "callId"), "c-3");
    s_encoded_destroy (&encoded);

    //  A second error replaces the first
    dsh_result_error (result, DSH_E_INVALID_ARGS, "invalid arguments: %s", "path is required");
    encoded = s_encode (result);
    assert_int_equal (encoded.content->via.array.size, 1);
    s_assert_str (dsh_map_get (s_block (&encoded, 0), "text"), "Error: invalid arguments: path is required");
    failure = dsh_map_get (encoded.root, "error");
    s_assert_str (dsh_map_get (failure, "code"), "INVALID_ARGS");
    s_assert_str (dsh_map_get (failure, "name"), "ToolArgsError");
    s_encoded_destroy (&encoded);

    //  Blocks added after the error follow it
    dsh_result_text (result, "hint: pass a path");
    encoded = s_encode (result);
    assert_int_equal (encoded.content->via.array.size, 2);
    s_assert_str (dsh_map_get (s_block (&encoded, 1), "text"), "hint: pass a path");
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);

    //  Other codes get their names
    result = dsh_result_new ("c-4");
    dsh_result_error (result, DSH_E_TIMEOUT, "too slow");
    encoded = s_encode (result);
    s_assert_str (dsh_map_get (dsh_map_get (encoded.root, "error"), "name"), "ToolTimeoutError");
    s_encoded_destroy (&encoded);
    dsh_result_destroy (&result);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_teardown (test_call_new, s_teardown),
        cmocka_unit_test_teardown (test_call_new_refused, s_teardown),
        cmocka_unit_test (test_call_new_unread),
        cmocka_unit_test_teardown (test_string_accessor, s_teardown),
        cmocka_unit_test_teardown (test_number_accessors, s_teardown),
        cmocka_unit_test_teardown (test_packed_limits, s_teardown),
        cmocka_unit_test_teardown (test_arguments_not_a_map, s_teardown),
        cmocka_unit_test (test_result_empty),
        cmocka_unit_test (test_result_blocks),
        cmocka_unit_test (test_base64_sizes),
        cmocka_unit_test (test_result_grows),
        cmocka_unit_test (test_result_structured),
        cmocka_unit_test (test_result_error),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
