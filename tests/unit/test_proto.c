/*  =========================================================================
    test_proto - dsh_proto: frame splitting, message builders, name and id
    rules, CALL bodies, error bodies, result, content and tool checks, and
    presence bodies
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"

//  Documents built from JSON text in one test; the teardown frees them, so
//  a failed assertion leaks nothing.
typedef struct {
    msgpack_sbuffer sbuf;
    dsh_doc_t *doc;
} held_t;

static zlistx_t *s_held;

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
    s_held = zlistx_new ();
    zlistx_set_destructor (s_held, (zlistx_destructor_fn *) s_held_destroy);
    return 0;
}

static int
s_teardown (void **state)
{
    (void) state;
    zlistx_destroy (&s_held);
    return 0;
}

//  The decoded document of JSON text (freed at teardown).
static dsh_doc_t *
s_doc (const char *json)
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
    return held->doc;
}

//  The root object of JSON text.
static const msgpack_object *
s_obj (const char *json)
{
    return dsh_doc_root (s_doc (json));
}

//  The document decoded from a frame's bytes (the frame must outlive it).
static dsh_doc_t *
s_frame_doc (zframe_t *frame)
{
    char error [256] = "";
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), error, sizeof error);
    if (!doc)
        fail_msg ("frame does not decode: %s", error);
    return doc;
}

static void
s_assert_str (const msgpack_object *obj, const char *text)
{
    assert_non_null (obj);
    assert_int_equal (obj->type, MSGPACK_OBJECT_STR);
    assert_int_equal (obj->via.str.size, strlen (text));
    assert_memory_equal (obj->via.str.ptr, text, strlen (text));
}

static void
s_assert_contains (const char *text, const char *part)
{
    if (!strstr (text, part))
        fail_msg ("\"%s\" does not contain \"%s\"", text, part);
}

// ---------------------------------------------------------------------------
//  Split

static zmsg_t *
s_msg (const char *const *frames, size_t count)
{
    zmsg_t *msg = zmsg_new ();
    for (size_t index = 0; index < count; index++)
        zmsg_addstr (msg, frames [index]);
    return msg;
}

static void
s_split_ok (size_t envelope_frames)
{
    const char *frames [] = { "peer1", "peer2", "peer3" };
    zmsg_t *msg = zmsg_new ();
    for (size_t index = 0; index < envelope_frames; index++)
        zmsg_addstr (msg, frames [index]);
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "PING");
    zmsg_addstr (msg, "body");

    zmsg_t *envelope = (zmsg_t *) 0x1;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), 0);
    assert_string_equal (command, "PING");
    assert_non_null (envelope);
    assert_int_equal (zmsg_size (envelope), envelope_frames);
    size_t index = 0;
    for (zframe_t *frame = zmsg_first (envelope); frame; frame = zmsg_next (envelope))
        assert_true (zframe_streq (frame, frames [index++]));
    assert_int_equal (zmsg_size (msg), 1);
    assert_true (zframe_streq (zmsg_first (msg), "body"));
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
}

static void
test_split_envelopes (void **state)
{
    (void) state;
    s_split_ok (0);
    s_split_ok (1);
    s_split_ok (3);
}

//  Expects a refusal; returns the envelope handed back (caller destroys).
static zmsg_t *
s_split_refused (zmsg_t *msg, const char *reason)
{
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), -1);
    s_assert_contains (error, reason);
    zmsg_destroy (&msg);
    return envelope;
}

static void
test_split_refusals (void **state)
{
    (void) state;
    //  No delimiter: no envelope is handed back, nothing is trusted
    zmsg_t *envelope = s_split_refused (s_msg ((const char *[]) { "DSH1", "PING", "x" }, 3),
                                        "delimiter");
    assert_null (envelope);

    //  Wrong protocol: the envelope still comes back so a reply can be routed
    zmsg_t *msg = s_msg ((const char *[]) { "peer" }, 1);
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH2");
    zmsg_addstr (msg, "PING");
    envelope = s_split_refused (msg, "protocol");
    assert_non_null (envelope);
    assert_int_equal (zmsg_size (envelope), 1);
    assert_true (zframe_streq (zmsg_first (envelope), "peer"));
    zmsg_destroy (&envelope);

    //  Protocol frame missing altogether
    msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    envelope = s_split_refused (msg, "protocol");
    assert_non_null (envelope);
    assert_int_equal (zmsg_size (envelope), 0);
    zmsg_destroy (&envelope);

    //  Missing command
    msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    envelope = s_split_refused (msg, "command");
    zmsg_destroy (&envelope);

    //  Empty command
    msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    zmsg_addmem (msg, NULL, 0);
    envelope = s_split_refused (msg, "command");
    zmsg_destroy (&envelope);

    //  Oversized command (17 bytes)
    msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "ABCDEFGHIJKLMNOPQ");
    envelope = s_split_refused (msg, "command");
    zmsg_destroy (&envelope);

    //  Lower-case command
    msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "ping");
    envelope = s_split_refused (msg, "upper-case");
    zmsg_destroy (&envelope);

    //  A 16-byte command is the longest accepted
    msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "ABCDEFGHIJKLMNOP");
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), 0);
    assert_string_equal (command, "ABCDEFGHIJKLMNOP");
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
}

static void
test_split_keeps_following_frames (void **state)
{
    (void) state;
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, "worker");
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "CALL");
    zframe_t *token = zframe_new ("\x00\x01\x02\x03\x04\x05\x06\x07", 8);
    zmsg_append (msg, &token);
    zmsg_addstr (msg, "body");
    zmsg_addmem (msg, NULL, 0);            //  an empty frame after the command stays too

    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), 0);
    assert_string_equal (command, "CALL");
    assert_int_equal (zmsg_size (envelope), 1);
    assert_int_equal (zmsg_size (msg), 3);
    zframe_t *frame = zmsg_first (msg);
    assert_int_equal (zframe_size (frame), 8);
    assert_memory_equal (zframe_data (frame), "\x00\x01\x02\x03\x04\x05\x06\x07", 8);
    assert_true (zframe_streq (zmsg_next (msg), "body"));
    assert_int_equal (zframe_size (zmsg_next (msg)), 0);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
}

// ---------------------------------------------------------------------------
//  Builders

static void
test_message_builders (void **state)
{
    (void) state;
    //  With an envelope: it is taken and leads the message
    zmsg_t *envelope = s_msg ((const char *[]) { "a", "b" }, 2);
    zmsg_t *msg = dsh_proto_message (&envelope, DSH_PONG);
    assert_null (envelope);
    assert_int_equal (zmsg_size (msg), 5);
    assert_true (zframe_streq (zmsg_first (msg), "a"));
    assert_true (zframe_streq (zmsg_next (msg), "b"));
    assert_int_equal (zframe_size (zmsg_next (msg)), 0);
    assert_true (zframe_streq (zmsg_next (msg), "DSH1"));
    assert_true (zframe_streq (zmsg_next (msg), "PONG"));

    //  ...and splits back into the same parts
    zmsg_addstr (msg, "body");
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), 0);
    assert_string_equal (command, "PONG");
    assert_int_equal (zmsg_size (envelope), 2);
    assert_int_equal (zmsg_size (msg), 1);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);

    //  Without one (a DEALER's own message), and with a NULL pointer
    zmsg_t *none = NULL;
    msg = dsh_proto_message (&none, DSH_HELLO);
    assert_int_equal (zmsg_size (msg), 3);
    assert_int_equal (zframe_size (zmsg_first (msg)), 0);
    assert_true (zframe_streq (zmsg_next (msg), "DSH1"));
    assert_true (zframe_streq (zmsg_next (msg), "HELLO"));
    zmsg_destroy (&msg);
    msg = dsh_proto_message (NULL, DSH_HELLO);
    assert_int_equal (zmsg_size (msg), 3);
    zmsg_destroy (&msg);

    //  PUB message: "DSH1" command body, body taken
    zframe_t *body = zframe_new ("\x80", 1);
    msg = dsh_proto_pub_message (DSH_HEARTBEAT, &body);
    assert_null (body);
    assert_int_equal (zmsg_size (msg), 3);
    assert_true (zframe_streq (zmsg_first (msg), "DSH1"));
    assert_true (zframe_streq (zmsg_next (msg), "HEARTBEAT"));
    zframe_t *frame = zmsg_next (msg);
    assert_int_equal (zframe_size (frame), 1);
    assert_int_equal (zframe_data (frame) [0], 0x80);
    zmsg_destroy (&msg);
}

static void
test_decode_body (void **state)
{
    (void) state;
    char error [256] = "";
    zframe_t *frame = zframe_new ("\x81\xa1" "a\x01", 4);     //  {"a": 1}
    dsh_doc_t *doc = dsh_proto_decode_body (frame, error, sizeof error);
    assert_non_null (doc);
    assert_int_equal (dsh_doc_root (doc)->type, MSGPACK_OBJECT_MAP);
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);

    frame = zframe_new ("\x91\x01", 2);                       //  [1]
    assert_null (dsh_proto_decode_body (frame, error, sizeof error));
    s_assert_contains (error, "not a map");
    zframe_destroy (&frame);

    frame = zframe_new ("\x82\xa1" "a", 3);                   //  truncated
    error [0] = 0;
    assert_null (dsh_proto_decode_body (frame, error, sizeof error));
    assert_true (strlen (error) > 0);
    zframe_destroy (&frame);

    error [0] = 0;
    assert_null (dsh_proto_decode_body (NULL, error, sizeof error));
    assert_true (strlen (error) > 0);
}

// ---------------------------------------------------------------------------
//  Names and ids

static void
test_valid_name (void **state)
{
    (void) state;
    char text [DSH_NAME_MAX + 2];
    memset (text, 'a', sizeof text);
    assert_true (dsh_proto_valid_name (text, 1));
    assert_true (dsh_proto_valid_name (text, 128));
    assert_false (dsh_proto_valid_name (text, 129));
    assert_false (dsh_proto_valid_name (text, 0));
    assert_false (dsh_proto_valid_name (NULL, 3));
    assert_true (dsh_proto_valid_name ("fs.read_file-2", 14));
    assert_true (dsh_proto_valid_name ("ABC.xyz_09-", 11));
    const char *bad [] = { "a b", "a/b", "a:b", "a\"b", "caf\xc3\xa9", "a\tb", "a@b" };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++)
        if (dsh_proto_valid_name (bad [index], strlen (bad [index])))
            fail_msg ("name \"%s\" accepted", bad [index]);
    assert_false (dsh_proto_valid_name ("a\0b", 3));
}

static void
test_valid_id (void **state)
{
    (void) state;
    char text [DSH_ID_MAX + 2];
    memset (text, 'x', sizeof text);
    assert_true (dsh_proto_valid_id (text, 128));
    assert_false (dsh_proto_valid_id (text, 129));
    assert_false (dsh_proto_valid_id (text, 0));
    assert_false (dsh_proto_valid_id (NULL, 1));
    assert_true (dsh_proto_valid_id ("agent:7@host/x#1", 16));
    const char *bad [] = { "a b", "a\tb", "a\nb", "a\x7f" "b", "caf\xc3\xa9", " a" };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++)
        if (dsh_proto_valid_id (bad [index], strlen (bad [index])))
            fail_msg ("id \"%s\" accepted", bad [index]);
    assert_false (dsh_proto_valid_id ("\0ab", 3));
}

// ---------------------------------------------------------------------------
//  CALL bodies

static void
test_decode_call_ok (void **state)
{
    (void) state;
    dsh_doc_t *doc = s_doc ("{\"callId\":\"c-1\",\"name\":\"echo\",\"arguments\":{\"a\":1},"
                            "\"agent\":\"agent-7\",\"meta\":{\"trace\":\"t\"},\"timeoutMs\":1500}");
    dsh_call_head_t head;
    char error [256] = "";
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_string_equal (head.call_id, "c-1");
    assert_string_equal (head.name, "echo");
    assert_string_equal (head.agent, "agent-7");
    assert_int_equal (head.timeout_ms, 1500);
    assert_non_null (head.arguments);
    assert_int_equal (head.arguments->type, MSGPACK_OBJECT_MAP);
    assert_int_equal (dsh_map_get (head.arguments, "a")->via.u64, 1);
    assert_non_null (head.meta);
    s_assert_str (dsh_map_get (head.meta, "trace"), "t");

    //  Only the required fields: the rest are absent, not defaulted
    doc = s_doc ("{\"callId\":\"c\",\"name\":\"n\"}");
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_null (head.agent);
    assert_null (head.arguments);
    assert_null (head.meta);
    assert_int_equal (head.timeout_ms, 0);

    //  Arguments may be any value; the tool's schema decides
    doc = s_doc ("{\"callId\":\"c\",\"name\":\"n\",\"arguments\":[1,2]}");
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_int_equal (head.arguments->type, MSGPACK_OBJECT_ARRAY);

    //  A callId of exactly 256 bytes is the longest accepted
    char json [400];
    snprintf (json, sizeof json, "{\"callId\":\"%0256d\",\"name\":\"n\"}", 0);
    doc = s_doc (json);
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_int_equal (strlen (head.call_id), 256);
}

//  Expects the CALL body to be refused with a reason containing part;
//  returns the call id that was still read (may be NULL).
static const char *
s_call_refused (const char *json, const char *part)
{
    dsh_doc_t *doc = s_doc (json);
    dsh_call_head_t head;
    char error [256] = "";
    if (dsh_proto_decode_call (doc, &head, error, sizeof error) != -1)
        fail_msg ("CALL %s accepted", json);
    s_assert_contains (error, part);
    return head.call_id;
}

static void
test_decode_call_refused (void **state)
{
    (void) state;
    assert_null (s_call_refused ("{\"name\":\"n\"}", "callId"));
    assert_null (s_call_refused ("{\"callId\":42,\"name\":\"n\"}", "callId"));
    assert_null (s_call_refused ("{\"callId\":\"\",\"name\":\"n\"}", "callId"));
    char json [400];
    snprintf (json, sizeof json, "{\"callId\":\"%0257d\",\"name\":\"n\"}", 0);
    assert_null (s_call_refused (json, "callId"));

    //  Once the callId is read it is kept, so the refusal can be answered by id
    const char *call_id = s_call_refused ("{\"callId\":\"c9\"}", "name");
    assert_non_null (call_id);
    assert_string_equal (call_id, "c9");
    call_id = s_call_refused ("{\"callId\":\"c9\",\"name\":[\"x\"]}", "name");
    assert_string_equal (call_id, "c9");
    call_id = s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"agent\":5}", "agent");
    assert_string_equal (call_id, "c9");
    s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"agent\":\"\"}", "agent");
    call_id = s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"meta\":[1]}", "meta");
    assert_string_equal (call_id, "c9");
    s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"meta\":\"m\"}", "meta");
    s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"timeoutMs\":-5}", "timeoutMs");
    s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"timeoutMs\":\"100\"}", "timeoutMs");
    s_call_refused ("{\"callId\":\"c9\",\"name\":\"n\",\"timeoutMs\":1.5}", "timeoutMs");
}

//  The document of raw msgpack bytes (freed at teardown): JSON cannot say
//  a repeated key or a key that is not a string.
static dsh_doc_t *
s_raw_doc (const void *data, size_t size)
{
    held_t *held = (held_t *) calloc (1, sizeof (held_t));
    assert_non_null (held);
    zlistx_add_end (s_held, held);
    msgpack_sbuffer_init (&held->sbuf);
    msgpack_sbuffer_write (&held->sbuf, (const char *) data, size);
    char error [256] = "";
    held->doc = dsh_doc_new (held->sbuf.data, held->sbuf.size, error, sizeof error);
    if (!held->doc)
        fail_msg ("doc refused: %s", error);
    return held->doc;
}

//  Expects the raw CALL body to be refused with exactly reason; returns the
//  call id that was still read (may be NULL).
static const char *
s_raw_call_refused (const void *data, size_t size, const char *reason)
{
    dsh_call_head_t head;
    char error [256] = "";
    assert_int_equal (dsh_proto_decode_call (s_raw_doc (data, size), &head, error, sizeof error), -1);
    assert_string_equal (error, reason);
    return head.call_id;
}

#define S_RAW(text) text, sizeof (text) - 1

//  A CALL body that the decoder refuses whole (a repeated key, anywhere):
//  the reason is reason, and the call id the refusal is answered by is
//  returned (NULL when there is none to trust).
static const char *
s_raw_body_refused (const void *data, size_t size, const char *reason)
{
    char error [256] = "";
    assert_null (dsh_doc_new (data, size, error, sizeof error));
    assert_string_equal (error, reason);
    static char call_id [DSH_CALL_ID_MAX + 1];
    return dsh_proto_refused_str (data, size, "callId", call_id, sizeof call_id);
}

static void
test_decode_call_strict (void **state)
{
    (void) state;
    //  The attack of issue 10: stages that read the first name saw
    //  read_file, a JSON round trip kept the last, write_file ran
    const char *call_id = s_raw_body_refused (S_RAW (
        "\x85\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa9" "read_file"
        "\xa9" "arguments" "\x82\xa4" "path" "\xa9" "scratch/x" "\xa7" "content" "\xa1" "x"
        "\xa9" "timeoutMs" "\xcd\x13\x88" "\xa4" "name" "\xaa" "write_file"),
        "duplicate key \"name\" in the map at body");
    assert_string_equal (call_id, "c1");

    //  Any repeated key of the head, even one that agrees with itself
    s_raw_body_refused (S_RAW ("\x84\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xa9" "arguments" "\x80" "\xa9" "arguments" "\x80"),
                        "duplicate key \"arguments\" in the map at body");
    //  A repeated callId cannot answer the refusal: which one?
    call_id = s_raw_body_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                                         "\xa6" "callId" "\xa2" "c2"),
                                  "duplicate key \"callId\" in the map at body");
    assert_null (call_id);
    //  Issue 22: the arguments the approver saw were the last of each key,
    //  the ones dsh-fs wrote were the first; now neither runs
    call_id = s_raw_body_refused (S_RAW (
        "\x83\xa6" "callId" "\xa2" "c3" "\xa4" "name" "\xaa" "write_file"
        "\xa9" "arguments" "\x84\xa4" "path" "\xb2" "scratch/victim.txt" "\xa7" "content" "\xa4" "EVIL"
        "\xa4" "path" "\xb4" "scratch/harmless.txt" "\xa7" "content" "\xa5" "hello"),
        "duplicate key \"path\" in the map at body.arguments");
    assert_string_equal (call_id, "c3");
    //  Inside meta values too: no map anywhere is the tool's business alone
    s_raw_body_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xa4" "meta" "\x81\xa1" "m" "\x82\x01\x01\x01\x01"),
                        "duplicate key \"1\" in the map at body.meta.m");
    s_raw_body_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xa4" "meta" "\x82\xa1" "x" "\x01\xa1" "x" "\x02"),
                        "duplicate key \"x\" in the map at body.meta");
    //  Not a body to answer by id at all
    char text [DSH_CALL_ID_MAX + 1];
    assert_null (dsh_proto_refused_str (S_RAW ("\x91\xa2" "c1"), "callId", text, sizeof text));
    assert_null (dsh_proto_refused_str (S_RAW ("\x81\xa6" "callId" "\x01"), "callId", text, sizeof text));
    assert_null (dsh_proto_refused_str (S_RAW ("\x81\xa6" "callId"), "callId", text, sizeof text));
    assert_null (dsh_proto_refused_str (S_RAW ("\x81\xa6" "callId" "\xa3" "abc"), "callId", text, 3));
    assert_string_equal (dsh_proto_refused_str (S_RAW ("\x82\xa2" "id" "\xa2" "q1" "\xa1" "x" "\x01"),
                                                "id", text, sizeof text), "q1");

    //  A key that is not a string, in the head or in meta
    call_id = s_raw_call_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                                         "\x07" "\xa1" "x"),
                                  "a key of the CALL body is not a string");
    assert_string_equal (call_id, "c1");
    s_raw_call_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xc4\x01" "k" "\xa1" "x"),
                        "a key of the CALL body is not a string");
    s_raw_call_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xa4" "meta" "\x81\x05" "\x01"),
                        "a key of meta is not a string");
    //  The existing checks keep their reasons
    s_raw_call_refused (S_RAW ("\x83\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xa4" "meta" "\x91\x01"),
                        "field \"meta\" must be a map");

    //  A key in a reason is quoted safely and cut short
    s_raw_body_refused (S_RAW ("\x84\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
                               "\xa3" "a\"\xff" "\x01" "\xa3" "a\"\xff" "\x01"),
                        "duplicate key \"a\\x22\\xff\" in the map at body");
    char long_key [60];
    memset (long_key, 'k', sizeof long_key);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 4);
    dsh_pack_cstr (&pk, "callId");
    dsh_pack_cstr (&pk, "c1");
    dsh_pack_cstr (&pk, "name");
    dsh_pack_cstr (&pk, "n");
    for (int copy = 0; copy < 2; copy++) {
        msgpack_pack_str_with_body (&pk, long_key, sizeof long_key);
        msgpack_pack_nil (&pk);
    }
    s_raw_body_refused (sbuf.data, sbuf.size,
                        "duplicate key \"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...\" in the map at body");
    msgpack_sbuffer_destroy (&sbuf);

    //  Inside arguments, keys of other types are the tool's business
    dsh_call_head_t head;
    char error [256] = "";
    assert_int_equal (dsh_proto_decode_call (s_raw_doc (S_RAW (
        "\x84\xa6" "callId" "\xa2" "c1" "\xa4" "name" "\xa1" "n"
        "\xa9" "arguments" "\x82\xa1" "a" "\x01\x07\x03"
        "\xa4" "meta" "\x81\xa1" "m" "\x82\x01\x01\x02\x01")), &head, error, sizeof error), 0);
}

//  A CALL whose meta has keys entries, and then one more that repeats
//  the eighth, if repeat.
static void
s_pack_large_meta_call (msgpack_sbuffer *sbuf, uint32_t keys, bool repeat)
{
    msgpack_sbuffer_init (sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 3);
    dsh_pack_cstr (&pk, "callId");
    dsh_pack_cstr (&pk, "big");
    dsh_pack_cstr (&pk, "name");
    dsh_pack_cstr (&pk, "n");
    dsh_pack_cstr (&pk, "meta");
    msgpack_pack_map (&pk, keys + repeat);
    char key [32];
    for (uint32_t index = 0; index < keys; index++) {
        snprintf (key, sizeof key, "key-%u", index);
        dsh_pack_cstr (&pk, key);
        msgpack_pack_uint32 (&pk, index);
    }
    if (repeat) {
        dsh_pack_cstr (&pk, "key-7");
        msgpack_pack_nil (&pk);
    }
}

//  A meta of 100 000 keys whose last one repeats one near the start: found
//  by sorting, not by comparing every pair (5 * 10^9 comparisons)
static void
test_decode_call_large_meta (void **state)
{
    (void) state;
    msgpack_sbuffer sbuf;
    s_pack_large_meta_call (&sbuf, 100000, true);
    char error [256] = "";
    int64_t started = zclock_usecs ();
    assert_int_equal (dsh_msgpack_scan (sbuf.data, sbuf.size, DSH_DOC_MAX_DEPTH, error, sizeof error), 0);
    int64_t scanned = zclock_usecs ();
    const char *call_id = s_raw_body_refused (sbuf.data, sbuf.size,
                                              "duplicate key \"key-7\" in the map at body.meta");
    int64_t checked = zclock_usecs ();
    assert_string_equal (call_id, "big");
    //  Timed against scanning the same bytes, which a slow machine or
    //  valgrind slows alike; a quadratic check is thousands of times slower
    if (checked - scanned > 200 * (scanned - started) + 200000)
        fail_msg ("decoding with the key check took %" PRId64 " us, the scan %" PRId64 " us",
                  checked - scanned, scanned - started);
    msgpack_sbuffer_destroy (&sbuf);

    //  Without the repeat the same meta passes
    dsh_call_head_t head;
    s_pack_large_meta_call (&sbuf, 100000, false);
    dsh_doc_t *doc = s_raw_doc (sbuf.data, sbuf.size);
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_int_equal (head.meta->via.map.size, 100000);
    msgpack_sbuffer_destroy (&sbuf);
}

static void
test_encode_call_round_trip (void **state)
{
    (void) state;
    msgpack_sbuffer args, meta;
    char error [256] = "";
    assert_int_equal (dsh_json_text_to_msgpack ("{\"path\":\"/tmp\",\"n\":3}", &args, error, sizeof error), 0);
    assert_int_equal (dsh_json_text_to_msgpack ("{\"trace\":\"abc\"}", &meta, error, sizeof error), 0);
    zframe_t *frame = dsh_proto_encode_call ("call-1", "fs.list", args.data, args.size, "agent-1",
                                             meta.data, meta.size, 2500);
    msgpack_sbuffer_destroy (&args);
    msgpack_sbuffer_destroy (&meta);
    dsh_doc_t *doc = s_frame_doc (frame);
    assert_int_equal (dsh_doc_root (doc)->via.map.size, 6);
    dsh_call_head_t head;
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_string_equal (head.call_id, "call-1");
    assert_string_equal (head.name, "fs.list");
    assert_string_equal (head.agent, "agent-1");
    assert_int_equal (head.timeout_ms, 2500);
    s_assert_str (dsh_map_get (head.arguments, "path"), "/tmp");
    assert_int_equal (dsh_map_get (head.arguments, "n")->via.u64, 3);
    s_assert_str (dsh_map_get (head.meta, "trace"), "abc");
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);

    //  Nothing optional: arguments default to an empty map, nothing else is sent
    frame = dsh_proto_encode_call ("c", "n", NULL, 0, NULL, NULL, 0, 0);
    doc = s_frame_doc (frame);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (root->via.map.size, 3);
    assert_int_equal (dsh_proto_decode_call (doc, &head, error, sizeof error), 0);
    assert_non_null (head.arguments);
    assert_int_equal (head.arguments->type, MSGPACK_OBJECT_MAP);
    assert_int_equal (head.arguments->via.map.size, 0);
    assert_null (head.agent);
    assert_null (head.meta);
    assert_null (dsh_map_get (root, "timeoutMs"));
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);
}

// ---------------------------------------------------------------------------
//  Splicing CALL bodies

//  One entry of a test map: a str key and a value already in msgpack.
typedef struct {
    const char *key;
    const void *value;
    size_t size;
} s_entry_t;

#define S_ENTRY(key, literal) { key, literal, sizeof (literal) - 1 }

//  Packs the map {key: value...} of entries into sbuf, which it initialises.
static void
s_pack_entries (msgpack_sbuffer *sbuf, const s_entry_t *entries, size_t count)
{
    msgpack_sbuffer_init (sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, (uint32_t) count);
    for (size_t index = 0; index < count; index++) {
        dsh_pack_cstr (&pk, entries [index].key);
        msgpack_sbuffer_write (sbuf, (const char *) entries [index].value, entries [index].size);
    }
}

//  Arguments that no JSON round trip keeps: bin, ext, float32, a str that
//  is not UTF-8, an integer key, an integer key in a nested map
static const char s_arguments [] =
    "\x86"
    "\xa3" "bin" "\xc4\x02\x00\xff"
    "\xa3" "ext" "\xc7\x03\x05" "abc"
    "\xa3" "f32" "\xca\x3f\xc0\x00\x00"
    "\xa3" "raw" "\xa2\xff\xfe"
    "\x07" "\xa2" "ik"
    "\xa4" "deep" "\x81\x01\x92\x01\x02";

static const char s_read_only [] = "\x81\xa6" "policy" "\xa9" "read-only";

//  The meta of the sample call, with its entries changed by the caller:
//  with_* false leaves one out, sandbox NULL leaves it out, extra (if not
//  NULL) is appended.
static void
s_pack_meta (msgpack_sbuffer *sbuf, bool with_trace, bool with_blob, const char *sandbox,
             size_t sandbox_size, const s_entry_t *extra)
{
    s_entry_t entries [5];
    size_t count = 0;
    if (with_trace)
        entries [count++] = (s_entry_t) S_ENTRY ("trace", "\xa3" "t-1");
    if (with_blob)
        entries [count++] = (s_entry_t) S_ENTRY ("blob", "\xc4\x01\x80");
    //  A meta value with an integer key and non-UTF-8 bytes
    entries [count++] = (s_entry_t) S_ENTRY ("intkeys", "\x81\x05\xa2\xc3\x28");
    if (sandbox)
        entries [count++] = (s_entry_t) { "sandbox", sandbox, sandbox_size };
    if (extra)
        entries [count++] = *extra;
    s_pack_entries (sbuf, entries, count);
}

//  The caller's own sandbox claim, which a stage replaces
static const char s_fake_sandbox [] = "\x81\xa6" "policy" "\xb2" "danger-full-access";

//  The sample call with meta (NULL: none) and agent (NULL: none), then
//  extra (if not NULL) as the last entry; meta is not the last entry.
static void
s_pack_call (msgpack_sbuffer *sbuf, const msgpack_sbuffer *meta, const char *agent,
             const s_entry_t *extra)
{
    s_entry_t entries [8];
    size_t count = 0;
    entries [count++] = (s_entry_t) S_ENTRY ("callId", "\xa2" "c1");
    entries [count++] = (s_entry_t) S_ENTRY ("name", "\xa4" "echo");
    entries [count++] = (s_entry_t) S_ENTRY ("arguments", s_arguments);
    if (meta)
        entries [count++] = (s_entry_t) { "meta", meta->data, meta->size };
    char agent_bytes [64];
    if (agent) {
        agent_bytes [0] = (char) (0xa0 | strlen (agent));
        memcpy (agent_bytes + 1, agent, strlen (agent));
        entries [count++] = (s_entry_t) { "agent", agent_bytes, strlen (agent) + 1 };
    }
    entries [count++] = (s_entry_t) S_ENTRY ("timeoutMs", "\xcd\x13\x88");
    entries [count++] = (s_entry_t) S_ENTRY ("extra", "\xd4\x07\x01");
    if (extra)
        entries [count++] = *extra;
    s_pack_entries (sbuf, entries, count);
}

//  Splices, expecting success, and checks the new body against expected
//  byte for byte and against decode_call.
static void
s_splice_expect (const msgpack_sbuffer *body, const dsh_call_changes_t *changes,
                 const msgpack_sbuffer *expected)
{
    char error [256] = "";
    zframe_t *frame = dsh_proto_splice_call (body->data, body->size, changes, SIZE_MAX,
                                             error, sizeof error);
    if (!frame)
        fail_msg ("splice refused: %s", error);
    if (zframe_size (frame) != expected->size
    ||  memcmp (zframe_data (frame), expected->data, expected->size)) {
        char *got = zframe_strhex (frame);
        fail_msg ("spliced %zu bytes, expected %zu: %s", zframe_size (frame), expected->size, got);
    }
    dsh_doc_t *doc = s_frame_doc (frame);
    dsh_call_head_t head;
    if (dsh_proto_decode_call (doc, &head, error, sizeof error))
        fail_msg ("spliced call refused: %s", error);
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);
}

//  Splices, expecting a refusal with exactly reason.
static void
s_splice_refused (const void *body, size_t size, const dsh_call_changes_t *changes,
                  size_t max_bytes, const char *reason)
{
    char error [256] = "";
    zframe_t *frame = dsh_proto_splice_call (body, size, changes, max_bytes, error, sizeof error);
    if (frame)
        fail_msg ("splice accepted, expected: %s", reason);
    assert_string_equal (error, reason);
}

static void
test_splice_nothing (void **state)
{
    (void) state;
    msgpack_sbuffer meta, body;
    s_pack_meta (&meta, true, true, s_fake_sandbox, sizeof s_fake_sandbox - 1, NULL);
    s_pack_call (&body, &meta, "agent-1", NULL);
    dsh_call_changes_t changes = { 0 };
    s_splice_expect (&body, &changes, &body);

    //  Removing what is not there changes nothing either
    dsh_meta_stamp_t stamps [] = { { "absent", NULL, 0 } };
    changes.stamps = stamps;
    changes.stamp_count = 1;
    s_splice_expect (&body, &changes, &body);
    msgpack_sbuffer_destroy (&body);
    s_pack_call (&body, NULL, NULL, NULL);
    changes.change_agent = true;
    s_splice_expect (&body, &changes, &body);
    msgpack_sbuffer_destroy (&body);

    //  Headers wider than needed are kept while their count stays
    const char wide [] = "\xde\x00\x02\xa6" "callId" "\xa1" "c" "\xa4" "meta" "\xdf\x00\x00\x00\x01\xa1" "k" "\xc0";
    char error [256] = "";
    changes = (dsh_call_changes_t) { 0 };
    dsh_meta_stamp_t replace [] = { { "k", "\x01", 1 } };
    changes.stamps = replace;
    changes.stamp_count = 1;
    zframe_t *frame = dsh_proto_splice_call (wide, sizeof wide - 1, &changes, SIZE_MAX, error, sizeof error);
    assert_non_null (frame);
    assert_int_equal (zframe_size (frame), sizeof wide - 1);
    assert_memory_equal (zframe_data (frame), "\xde\x00\x02\xa6" "callId" "\xa1" "c" "\xa4" "meta" "\xdf\x00\x00\x00\x01\xa1" "k" "\x01",
                         sizeof wide - 1);
    zframe_destroy (&frame);
    //  and rewritten at their smallest when it changes
    dsh_meta_stamp_t add [] = { { "l", "\x02", 1 } };
    changes.stamps = add;
    frame = dsh_proto_splice_call (wide, sizeof wide - 1, &changes, SIZE_MAX, error, sizeof error);
    assert_non_null (frame);
    const char grown [] = "\xde\x00\x02\xa6" "callId" "\xa1" "c" "\xa4" "meta" "\x82\xa1" "k" "\xc0\xa1" "l" "\x02";
    assert_int_equal (zframe_size (frame), sizeof grown - 1);
    assert_memory_equal (zframe_data (frame), grown, sizeof grown - 1);
    zframe_destroy (&frame);
    msgpack_sbuffer_destroy (&meta);
}

static void
test_splice_stamps (void **state)
{
    (void) state;
    msgpack_sbuffer meta, body, new_meta, expected;
    s_pack_meta (&meta, true, true, s_fake_sandbox, sizeof s_fake_sandbox - 1, NULL);
    s_pack_call (&body, &meta, "agent-1", NULL);

    //  A stamp replaces the caller's value where it is; the rest keep
    //  their bytes, bin, ext, float32, non-UTF-8 and integer keys included
    dsh_meta_stamp_t sandbox [] = { { "sandbox", s_read_only, sizeof s_read_only - 1 } };
    dsh_call_changes_t changes = { .stamps = sandbox, .stamp_count = 1 };
    s_pack_meta (&new_meta, true, true, s_read_only, sizeof s_read_only - 1, NULL);
    s_pack_call (&expected, &new_meta, "agent-1", NULL);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&new_meta);
    msgpack_sbuffer_destroy (&expected);

    //  A new key goes at meta's end; a removal takes its entry out; of two
    //  stamps of one key the later counts
    dsh_meta_stamp_t several [] = {
        { "mode", "\xa4" "plan", 5 },
        { "trace", NULL, 0 },
        { "mode", "\xa6" "normal", 7 },
    };
    changes = (dsh_call_changes_t) { .stamps = several, .stamp_count = 3 };
    s_entry_t mode = S_ENTRY ("mode", "\xa6" "normal");
    s_pack_meta (&new_meta, false, true, s_fake_sandbox, sizeof s_fake_sandbox - 1, &mode);
    s_pack_call (&expected, &new_meta, "agent-1", NULL);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&new_meta);
    msgpack_sbuffer_destroy (&expected);

    //  Removing every entry leaves an empty meta
    dsh_meta_stamp_t all [] = { { "trace", NULL, 0 }, { "blob", NULL, 0 },
                                { "intkeys", NULL, 0 }, { "sandbox", NULL, 0 } };
    changes = (dsh_call_changes_t) { .stamps = all, .stamp_count = 4 };
    msgpack_sbuffer_init (&new_meta);
    msgpack_sbuffer_write (&new_meta, "\x80", 1);
    s_pack_call (&expected, &new_meta, "agent-1", NULL);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&new_meta);
    msgpack_sbuffer_destroy (&expected);
    msgpack_sbuffer_destroy (&body);

    //  No meta: one is made, as the head's last entry
    s_pack_call (&body, NULL, "agent-1", NULL);
    changes = (dsh_call_changes_t) { .stamps = sandbox, .stamp_count = 1 };
    s_entry_t made = { "meta", "\x81\xa7" "sandbox" "\x81\xa6" "policy" "\xa9" "read-only",
                       1 + 8 + sizeof s_read_only - 1 };
    s_pack_call (&expected, NULL, "agent-1", &made);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&expected);
    msgpack_sbuffer_destroy (&body);

    //  Meta as the head's last entry: its new entries come before the
    //  head's new ones
    s_entry_t last_meta = { "meta", meta.data, meta.size };
    s_pack_call (&body, NULL, NULL, &last_meta);
    dsh_meta_stamp_t mode_stamp [] = { { "mode", "\xa4" "plan", 5 } };
    changes = (dsh_call_changes_t) { .stamps = mode_stamp, .stamp_count = 1,
                                     .change_agent = true, .agent = "agent-2" };
    s_entry_t plan = S_ENTRY ("mode", "\xa4" "plan");
    s_pack_meta (&new_meta, true, true, s_fake_sandbox, sizeof s_fake_sandbox - 1, &plan);
    last_meta = (s_entry_t) { "meta", new_meta.data, new_meta.size };
    msgpack_sbuffer head;
    s_pack_call (&head, NULL, NULL, &last_meta);
    //  The expected head has one more entry: the agent, after meta
    msgpack_sbuffer_init (&expected);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &expected, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, (uint8_t) head.data [0] - 0x80 + 1);
    msgpack_sbuffer_write (&expected, head.data + 1, head.size - 1);
    dsh_pack_cstr (&pk, "agent");
    dsh_pack_cstr (&pk, "agent-2");
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&head);
    msgpack_sbuffer_destroy (&new_meta);
    msgpack_sbuffer_destroy (&expected);
    msgpack_sbuffer_destroy (&body);
    msgpack_sbuffer_destroy (&meta);

    //  A meta of 15 entries that gains one needs a map16 header
    s_entry_t entries [16];
    char keys [16][8];
    for (int index = 0; index < 16; index++) {
        snprintf (keys [index], sizeof keys [index], "k%02d", index);
        entries [index] = (s_entry_t) { keys [index], "\xc3", 1 };
    }
    s_pack_entries (&meta, entries, 15);
    s_pack_call (&body, &meta, NULL, NULL);
    s_pack_entries (&new_meta, entries, 16);
    s_pack_call (&expected, &new_meta, NULL, NULL);
    dsh_meta_stamp_t sixteenth [] = { { "k15", "\xc3", 1 } };
    changes = (dsh_call_changes_t) { .stamps = sixteenth, .stamp_count = 1 };
    s_splice_expect (&body, &changes, &expected);
    assert_int_equal ((uint8_t) new_meta.data [0], 0xde);
    msgpack_sbuffer_destroy (&meta);
    msgpack_sbuffer_destroy (&new_meta);
    msgpack_sbuffer_destroy (&body);
    msgpack_sbuffer_destroy (&expected);
}

static void
test_splice_arguments_and_agent (void **state)
{
    (void) state;
    msgpack_sbuffer meta, body, expected;
    s_pack_meta (&meta, true, false, NULL, 0, NULL);
    s_pack_call (&body, &meta, "agent-1", NULL);

    //  New arguments replace the old where they are, as given
    const char rewritten [] = "\x82\xa4" "path" "\xa3" "a/b" "\x09\xc4\x00";
    dsh_call_changes_t changes = { .arguments = rewritten, .arguments_size = sizeof rewritten - 1 };
    s_entry_t entries [] = {
        S_ENTRY ("callId", "\xa2" "c1"), S_ENTRY ("name", "\xa4" "echo"),
        S_ENTRY ("arguments", rewritten), { "meta", meta.data, meta.size },
        S_ENTRY ("agent", "\xa7" "agent-1"), S_ENTRY ("timeoutMs", "\xcd\x13\x88"),
        S_ENTRY ("extra", "\xd4\x07\x01"),
    };
    s_pack_entries (&expected, entries, 7);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&expected);

    //  Any value will do, even one that is not a map
    changes.arguments = "\x92\x01\xa1" "x";
    changes.arguments_size = 4;
    entries [2] = (s_entry_t) S_ENTRY ("arguments", "\x92\x01\xa1" "x");
    s_pack_entries (&expected, entries, 7);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&expected);
    entries [2] = (s_entry_t) S_ENTRY ("arguments", s_arguments);

    //  The agent is replaced where it is, or removed with its key
    changes = (dsh_call_changes_t) { .change_agent = true, .agent = "a-much-longer-agent-id-than-31-bytes" };
    entries [4] = (s_entry_t) S_ENTRY ("agent", "\xd9\x24" "a-much-longer-agent-id-than-31-bytes");
    s_pack_entries (&expected, entries, 7);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&expected);
    changes.agent = NULL;
    s_entry_t without_agent [] = { entries [0], entries [1], entries [2], entries [3], entries [5], entries [6] };
    s_pack_entries (&expected, without_agent, 6);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&expected);
    msgpack_sbuffer_destroy (&body);

    //  Absent arguments and agent are added at the head's end, arguments
    //  first, then agent, then meta
    s_entry_t bare [] = { S_ENTRY ("callId", "\xa2" "c1"), S_ENTRY ("name", "\xa4" "echo") };
    s_pack_entries (&body, bare, 2);
    dsh_meta_stamp_t stamp [] = { { "trace", "\xa3" "t-1", 4 } };
    changes = (dsh_call_changes_t) { .arguments = s_arguments, .arguments_size = sizeof s_arguments - 1,
                                     .stamps = stamp, .stamp_count = 1,
                                     .change_agent = true, .agent = "agent-1" };
    s_entry_t full [] = {
        S_ENTRY ("callId", "\xa2" "c1"), S_ENTRY ("name", "\xa4" "echo"),
        S_ENTRY ("arguments", s_arguments), S_ENTRY ("agent", "\xa7" "agent-1"),
        S_ENTRY ("meta", "\x81\xa5" "trace" "\xa3" "t-1"),
    };
    s_pack_entries (&expected, full, 5);
    s_splice_expect (&body, &changes, &expected);
    msgpack_sbuffer_destroy (&expected);
    msgpack_sbuffer_destroy (&body);
    msgpack_sbuffer_destroy (&meta);
}

static void
test_splice_limit (void **state)
{
    (void) state;
    msgpack_sbuffer body;
    s_pack_call (&body, NULL, NULL, NULL);
    dsh_meta_stamp_t stamp [] = { { "sandbox", s_read_only, sizeof s_read_only - 1 } };
    dsh_call_changes_t changes = { .stamps = stamp, .stamp_count = 1 };
    char error [256] = "";
    zframe_t *frame = dsh_proto_splice_call (body.data, body.size, &changes, SIZE_MAX, error, sizeof error);
    assert_non_null (frame);
    size_t size = zframe_size (frame);
    assert_int_equal (size, body.size + 5 + 1 + 8 + sizeof s_read_only - 1);
    zframe_destroy (&frame);

    //  Exactly at the limit is allowed; one byte over is refused, with
    //  both sizes, before anything is allocated for it
    frame = dsh_proto_splice_call (body.data, body.size, &changes, size, error, sizeof error);
    assert_non_null (frame);
    zframe_destroy (&frame);
    char reason [256];
    snprintf (reason, sizeof reason, "the call with its stamps would be %zu bytes, over the %zu-byte limit",
              size, size - 1);
    s_splice_refused (body.data, body.size, &changes, size - 1, reason);

    msgpack_sbuffer_destroy (&body);

    //  Issue 10's case: a call just under the 16 MiB frame limit, which the
    //  sandbox's stamp pushes over
    s_entry_t arguments = { "arguments", NULL, DSH_MAX_MESSAGE_DEFAULT - 40 };
    char *text = (char *) malloc (arguments.size);
    assert_non_null (text);
    memset (text, 'x', arguments.size);
    text [0] = (char) 0xdb;
    size_t length = arguments.size - 5;
    for (int index = 0; index < 4; index++)
        text [1 + index] = (char) (length >> (24 - 8 * index));
    arguments.value = text;
    s_entry_t head [] = { S_ENTRY ("callId", "\xa2" "c1"), S_ENTRY ("name", "\xa4" "echo"), arguments };
    s_pack_entries (&body, head, 3);
    free (text);
    assert_true (body.size < DSH_MAX_MESSAGE_DEFAULT);
    size = body.size + 5 + 1 + 8 + sizeof s_read_only - 1;
    snprintf (reason, sizeof reason, "the call with its stamps would be %zu bytes, over the %d-byte limit",
              size, DSH_MAX_MESSAGE_DEFAULT);
    s_splice_refused (body.data, body.size, &changes, DSH_MAX_MESSAGE_DEFAULT, reason);
    msgpack_sbuffer_destroy (&body);
}

static void
test_splice_refused (void **state)
{
    (void) state;
    dsh_meta_stamp_t stamp [] = { { "sandbox", s_read_only, sizeof s_read_only - 1 } };
    dsh_call_changes_t changes = { .stamps = stamp, .stamp_count = 1 };
    s_splice_refused (S_RAW ("\x91\x01"), &changes, SIZE_MAX, "the CALL body is not a map");
    s_splice_refused (S_RAW ("\x81\xa1" "a"), &changes, SIZE_MAX, "the CALL body is not well-formed msgpack");
    s_splice_refused (S_RAW ("\x81\xa1" "a\x01\x02"), &changes, SIZE_MAX, "trailing bytes after the CALL body");
    s_splice_refused (S_RAW ("\x81\x01\x02"), &changes, SIZE_MAX, "a key of the CALL body is not a string");
    s_splice_refused (S_RAW ("\x82\xa4" "meta" "\x80\xa4" "meta" "\x80"), &changes, SIZE_MAX,
                      "duplicate key \"meta\" in the CALL body");
    s_splice_refused (S_RAW ("\x81\xa4" "meta" "\x82\xa7" "sandbox" "\x01\xa7" "sandbox" "\x02"), &changes,
                      SIZE_MAX, "duplicate key \"sandbox\" in meta");
    s_splice_refused (S_RAW ("\x81\xa4" "meta" "\x91\x01"), &changes, SIZE_MAX, "field \"meta\" must be a map");

    //  Changes that are not one msgpack object each
    dsh_meta_stamp_t cut [] = { { "sandbox", "\xa5" "ab", 3 } };
    changes.stamps = cut;
    s_splice_refused (S_RAW ("\x80"), &changes, SIZE_MAX, "the meta stamp \"sandbox\" is not one msgpack object");
    changes = (dsh_call_changes_t) { .arguments = "\x01\x02", .arguments_size = 2 };
    s_splice_refused (S_RAW ("\x80"), &changes, SIZE_MAX, "the new arguments are not one msgpack object");
    changes = (dsh_call_changes_t) { .arguments = "\x92\x01", .arguments_size = 2 };
    s_splice_refused (S_RAW ("\x80"), &changes, SIZE_MAX, "the new arguments are not one msgpack object");
    changes = (dsh_call_changes_t) { .change_agent = true, .agent = "" };
    s_splice_refused (S_RAW ("\x80"), &changes, SIZE_MAX, "the new agent must be 1 to 128 bytes");
    char long_agent [DSH_ID_MAX + 2];
    memset (long_agent, 'a', sizeof long_agent - 1);
    long_agent [sizeof long_agent - 1] = 0;
    changes.agent = long_agent;
    s_splice_refused (S_RAW ("\x80"), &changes, SIZE_MAX, "the new agent must be 1 to 128 bytes");
    long_agent [DSH_ID_MAX] = 0;
    char error [256] = "";
    zframe_t *frame = dsh_proto_splice_call (S_RAW ("\x80"), &changes, SIZE_MAX, error, sizeof error);
    assert_non_null (frame);
    zframe_destroy (&frame);

    //  Every cut of a call is refused, in a buffer of exactly that size
    msgpack_sbuffer meta, body;
    s_pack_meta (&meta, true, true, s_fake_sandbox, sizeof s_fake_sandbox - 1, NULL);
    s_pack_call (&body, &meta, "agent-1", NULL);
    changes = (dsh_call_changes_t) { .stamps = stamp, .stamp_count = 1,
                                     .arguments = "\x80", .arguments_size = 1,
                                     .change_agent = true, .agent = "agent-2" };
    for (size_t size = 0; size < body.size; size++) {
        uint8_t *bytes = (uint8_t *) malloc (size? size: 1);
        memcpy (bytes, body.data, size);
        assert_null (dsh_proto_splice_call (bytes, size, &changes, SIZE_MAX, error, sizeof error));
        free (bytes);
    }
    msgpack_sbuffer_destroy (&body);
    msgpack_sbuffer_destroy (&meta);
}

//  Mutated calls: a splice never reads past the body, and what it accepts
//  from a well-formed body is well-formed, with the stamp in place.
static void
test_splice_mutations (void **state)
{
    (void) state;
    srand (424242);
    msgpack_sbuffer meta, body;
    s_pack_meta (&meta, true, true, s_fake_sandbox, sizeof s_fake_sandbox - 1, NULL);
    s_pack_call (&body, &meta, "agent-1", NULL);
    dsh_meta_stamp_t stamp [] = { { "sandbox", s_read_only, sizeof s_read_only - 1 } };
    dsh_call_changes_t changes = { .stamps = stamp, .stamp_count = 1 };
    uint8_t *mutant = (uint8_t *) malloc (body.size);
    size_t spliced = 0;
    for (int round = 0; round < 20000; round++) {
        memcpy (mutant, body.data, body.size);
        int flips = 1 + rand () % 3;
        for (int flip = 0; flip < flips; flip++)
            mutant [(size_t) rand () % body.size] = (uint8_t) rand ();
        char error [256] = "";
        //  As the front accepts bodies: well-formed, no key repeated
        dsh_doc_t *strict = dsh_doc_new (mutant, body.size, error, sizeof error);
        bool well_formed = strict
                        && dsh_msgpack_scan (mutant, body.size, DSH_DOC_MAX_DEPTH - 2, error, sizeof error) == 0;
        dsh_doc_destroy (&strict);
        zframe_t *frame = dsh_proto_splice_call (mutant, body.size, &changes, SIZE_MAX, error, sizeof error);
        if (frame && well_formed) {
            spliced++;
            dsh_doc_t *doc = s_frame_doc (frame);
            const msgpack_object *sandbox = dsh_map_get (dsh_map_get (dsh_doc_root (doc), "meta"), "sandbox");
            assert_non_null (sandbox);
            s_assert_str (dsh_map_get (sandbox, "policy"), "read-only");
            dsh_doc_destroy (&doc);
        }
        zframe_destroy (&frame);
    }
    assert_true (spliced > 1000);
    free (mutant);
    msgpack_sbuffer_destroy (&body);
    msgpack_sbuffer_destroy (&meta);
}

// ---------------------------------------------------------------------------
//  Error bodies

static void
test_error_names (void **state)
{
    (void) state;
    assert_string_equal (dsh_proto_error_name (DSH_E_BAD_REQUEST), "BadRequestError");
    assert_string_equal (dsh_proto_error_name (DSH_E_UNKNOWN_TOOL), "UnknownToolError");
    assert_string_equal (dsh_proto_error_name (DSH_E_INVALID_ARGS), "ToolArgsError");
    assert_string_equal (dsh_proto_error_name (DSH_E_TOOL_FAILED), "ToolError");
    assert_string_equal (dsh_proto_error_name (DSH_E_TOOL_GONE), "ToolGoneError");
    assert_string_equal (dsh_proto_error_name (DSH_E_TIMEOUT), "ToolTimeoutError");
    assert_string_equal (dsh_proto_error_name (DSH_E_OVERLOADED), "OverloadedError");
    assert_string_equal (dsh_proto_error_name (DSH_E_BAD_RESULT), "BadResultError");
    assert_string_equal (dsh_proto_error_name ("SOMETHING_ELSE"), "Error");
}

static void
test_error_result (void **state)
{
    (void) state;
    zframe_t *frame = dsh_proto_error_result ("c-7", DSH_E_UNKNOWN_TOOL, "Error: unknown tool \"x\"");
    dsh_doc_t *doc = s_frame_doc (frame);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (root->type, MSGPACK_OBJECT_MAP);
    assert_int_equal (root->via.map.size, 4);
    s_assert_str (dsh_map_get (root, "callId"), "c-7");
    const msgpack_object *content = dsh_map_get (root, "content");
    assert_int_equal (content->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (content->via.array.size, 1);
    s_assert_str (dsh_map_get (&content->via.array.ptr [0], "type"), "text");
    s_assert_str (dsh_map_get (&content->via.array.ptr [0], "text"), "Error: unknown tool \"x\"");
    const msgpack_object *is_error = dsh_map_get (root, "isError");
    assert_int_equal (is_error->type, MSGPACK_OBJECT_BOOLEAN);
    assert_true (is_error->via.boolean);
    const msgpack_object *failure = dsh_map_get (root, "error");
    assert_int_equal (failure->type, MSGPACK_OBJECT_MAP);
    s_assert_str (dsh_map_get (failure, "name"), "UnknownToolError");
    s_assert_str (dsh_map_get (failure, "code"), "UNKNOWN_TOOL");
    char error [256] = "";
    assert_int_equal (dsh_proto_check_result (root, error, sizeof error), 0);
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);

    //  No callId known: an empty one, still a valid result
    frame = dsh_proto_error_result (NULL, DSH_E_BAD_REQUEST, "Error: bad");
    doc = s_frame_doc (frame);
    root = dsh_doc_root (doc);
    s_assert_str (dsh_map_get (root, "callId"), "");
    s_assert_str (dsh_map_get (dsh_map_get (root, "error"), "name"), "BadRequestError");
    assert_int_equal (dsh_proto_check_result (root, error, sizeof error), 0);
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);
}

static void
test_error_body (void **state)
{
    (void) state;
    const msgpack_object *id = s_obj ("{\"id\":[7,\"x\"]}");
    zframe_t *frame = dsh_proto_error_body (dsh_map_get (id, "id"), DSH_E_BAD_REQUEST, "no such command");
    dsh_doc_t *doc = s_frame_doc (frame);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_int_equal (root->via.map.size, 3);
    const msgpack_object *echoed = dsh_map_get (root, "id");
    assert_non_null (echoed);
    assert_int_equal (echoed->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (echoed->via.array.size, 2);
    assert_int_equal (echoed->via.array.ptr [0].via.u64, 7);
    s_assert_str (&echoed->via.array.ptr [1], "x");
    s_assert_str (dsh_map_get (root, "code"), "BAD_REQUEST");
    s_assert_str (dsh_map_get (root, "message"), "no such command");
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);

    frame = dsh_proto_error_body (NULL, DSH_E_UNKNOWN_TOOL, "unknown tool \"x\"");
    doc = s_frame_doc (frame);
    root = dsh_doc_root (doc);
    assert_int_equal (root->via.map.size, 2);
    assert_null (dsh_map_get (root, "id"));
    s_assert_str (dsh_map_get (root, "code"), "UNKNOWN_TOOL");
    s_assert_str (dsh_map_get (root, "message"), "unknown tool \"x\"");
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);
}

// ---------------------------------------------------------------------------
//  Results and content

static void
s_result_ok (const char *json)
{
    char error [256] = "";
    if (dsh_proto_check_result (s_obj (json), error, sizeof error))
        fail_msg ("result %s refused: %s", json, error);
}

static void
s_result_refused (const char *json, const char *part)
{
    char error [256] = "";
    if (dsh_proto_check_result (s_obj (json), error, sizeof error) != -1)
        fail_msg ("result %s accepted", json);
    s_assert_contains (error, part);
}

static void
test_check_result (void **state)
{
    (void) state;
    s_result_ok ("{\"content\":[],\"isError\":false}");
    s_result_ok ("{\"callId\":\"c\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"isError\":false,"
                 "\"structuredContent\":{\"a\":1}}");
    s_result_ok ("{\"content\":[{\"type\":\"text\",\"text\":\"Error: x\"}],\"isError\":true,"
                 "\"error\":{\"name\":\"ToolError\",\"code\":\"TOOL_FAILED\"}}");
    s_result_refused ("[1]", "not a map");
    s_result_refused ("{\"isError\":false}", "content");
    s_result_refused ("{\"content\":{},\"isError\":false}", "content");
    s_result_refused ("{\"content\":[{\"type\":\"text\"}],\"isError\":false}", "text");
    s_result_refused ("{\"content\":[{\"type\":\"text\",\"text\":\"ok\"},7],\"isError\":false}", "not a map");
    s_result_refused ("{\"content\":[]}", "isError");
    s_result_refused ("{\"content\":[],\"isError\":\"no\"}", "isError");
    s_result_refused ("{\"content\":[],\"isError\":0}", "isError");
    s_result_refused ("{\"content\":[],\"isError\":true,\"error\":{\"name\":\"ToolError\"}}", "code");
    s_result_refused ("{\"content\":[],\"isError\":true,\"error\":{\"code\":5}}", "code");
    s_result_refused ("{\"content\":[],\"isError\":true,\"error\":\"TOOL_FAILED\"}", "error");
}

static void
s_content_ok (const char *json)
{
    char error [256] = "";
    if (dsh_proto_check_content (s_obj (json), error, sizeof error))
        fail_msg ("block %s refused: %s", json, error);
}

static void
s_content_refused (const char *json, const char *part)
{
    char error [256] = "";
    if (dsh_proto_check_content (s_obj (json), error, sizeof error) != -1)
        fail_msg ("block %s accepted", json);
    s_assert_contains (error, part);
}

static void
test_check_content (void **state)
{
    (void) state;
    //  text
    s_content_ok ("{\"type\":\"text\",\"text\":\"\"}");
    s_content_refused ("{\"type\":\"text\"}", "text");
    s_content_refused ("{\"type\":\"text\",\"text\":5}", "text");
    //  image and audio
    s_content_ok ("{\"type\":\"image\",\"data\":\"iVBORw0=\",\"mimeType\":\"image/png\"}");
    s_content_ok ("{\"type\":\"audio\",\"data\":\"UklGRg==\",\"mimeType\":\"audio/wav\"}");
    s_content_refused ("{\"type\":\"image\",\"data\":\"iVBORw0=\"}", "image block");
    s_content_refused ("{\"type\":\"image\",\"mimeType\":\"image/png\"}", "image block");
    s_content_refused ("{\"type\":\"audio\",\"data\":7,\"mimeType\":\"audio/wav\"}", "audio block");
    s_content_refused ("{\"type\":\"audio\",\"data\":\"x\",\"mimeType\":null}", "audio block");
    //  resource_link
    s_content_ok ("{\"type\":\"resource_link\",\"uri\":\"file:///a\",\"name\":\"a\"}");
    s_content_ok ("{\"type\":\"resource_link\",\"uri\":\"file:///a\",\"name\":\"a\","
                  "\"mimeType\":\"text/plain\",\"description\":\"d\"}");
    s_content_refused ("{\"type\":\"resource_link\",\"uri\":\"file:///a\"}", "resource_link");
    s_content_refused ("{\"type\":\"resource_link\",\"name\":\"a\"}", "resource_link");
    s_content_refused ("{\"type\":\"resource_link\",\"uri\":1,\"name\":\"a\"}", "resource_link");
    //  resource: a uri and exactly one of text or blob
    s_content_ok ("{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\",\"text\":\"hi\"}}");
    s_content_ok ("{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\",\"mimeType\":\"x/y\","
                  "\"blob\":\"AAE=\"}}");
    s_content_refused ("{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\",\"text\":\"hi\","
                       "\"blob\":\"AAE=\"}}", "exactly one");
    s_content_refused ("{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\"}}", "exactly one");
    s_content_refused ("{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\",\"text\":3}}",
                       "exactly one");
    s_content_refused ("{\"type\":\"resource\",\"resource\":{\"uri\":\"file:///a\",\"blob\":[1]}}",
                       "exactly one");
    s_content_refused ("{\"type\":\"resource\",\"resource\":{\"text\":\"hi\"}}", "uri");
    s_content_refused ("{\"type\":\"resource\",\"resource\":\"file:///a\"}", "resource");
    s_content_refused ("{\"type\":\"resource\"}", "resource");
    //  no known type
    s_content_refused ("{\"type\":\"video\",\"data\":\"x\",\"mimeType\":\"video/mp4\"}", "type");
    s_content_refused ("{\"text\":\"hi\"}", "type");
    s_content_refused ("{\"type\":7}", "type");
    s_content_refused ("[\"text\"]", "not a map");
    char error [256] = "";
    assert_int_equal (dsh_proto_check_content (NULL, error, sizeof error), -1);
}

// ---------------------------------------------------------------------------
//  Tool entries

static void
s_tool_ok (const char *json)
{
    char error [256] = "";
    if (dsh_proto_check_tool (s_obj (json), error, sizeof error))
        fail_msg ("tool %s refused: %s", json, error);
}

static void
s_tool_refused (const char *json, const char *part)
{
    char error [512] = "";
    if (dsh_proto_check_tool (s_obj (json), error, sizeof error) != -1)
        fail_msg ("tool %s accepted", json);
    s_assert_contains (error, part);
}

static void
test_check_tool (void **state)
{
    (void) state;
    s_tool_ok ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"}}");
    s_tool_ok ("{\"name\":\"fs.read_file-2\",\"description\":\"reads\",\"title\":\"Read\","
               "\"parameters\":{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\"}},"
               "\"required\":[\"p\"]},"
               "\"annotations\":{\"readOnlyHint\":true,\"destructiveHint\":false,"
               "\"idempotentHint\":true,\"openWorldHint\":false,\"title\":\"anything\"},"
               "\"outputSchema\":{\"type\":\"object\"},\"strict\":true,\"concurrencySafe\":false}");

    //  Name rules
    char name [DSH_NAME_MAX + 2];
    memset (name, 'n', sizeof name);
    char json [512];
    snprintf (json, sizeof json, "{\"name\":\"%.*s\",\"parameters\":{\"type\":\"object\"}}", 128, name);
    s_tool_ok (json);
    snprintf (json, sizeof json, "{\"name\":\"%.*s\",\"parameters\":{\"type\":\"object\"}}", 129, name);
    s_tool_refused (json, "is not 1-128");
    s_tool_refused ("{\"parameters\":{\"type\":\"object\"}}", "name");
    s_tool_refused ("{\"name\":5,\"parameters\":{\"type\":\"object\"}}", "name");
    s_tool_refused ("{\"name\":\"\",\"parameters\":{\"type\":\"object\"}}", "is not 1-128");
    s_tool_refused ("{\"name\":\"bad name\",\"parameters\":{\"type\":\"object\"}}", "\"bad name\"");
    s_tool_refused ("{\"name\":\"a/b\",\"parameters\":{\"type\":\"object\"}}", "is not 1-128");
    s_tool_refused ("[\"t\"]", "not a map");

    //  Strings, and every reason names the tool
    s_tool_refused ("{\"name\":\"t\",\"description\":5,\"parameters\":{\"type\":\"object\"}}",
                    "tool \"t\": description");
    s_tool_refused ("{\"name\":\"t\",\"title\":[],\"parameters\":{\"type\":\"object\"}}", "tool \"t\"");

    //  parameters must be {type:"object", ...}
    s_tool_refused ("{\"name\":\"t\"}", "tool \"t\": parameters");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{}}", "parameters");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"string\"}}", "parameters");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":[{\"type\":\"object\"}]}", "parameters");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":\"object\"}", "parameters");

    //  annotations hints must be booleans
    const char *hints [] = { "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint" };
    for (size_t index = 0; index < 4; index++) {
        snprintf (json, sizeof json, "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},"
                                     "\"annotations\":{\"%s\":\"yes\"}}", hints [index]);
        s_tool_refused (json, hints [index]);
        snprintf (json, sizeof json, "{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},"
                                     "\"annotations\":{\"%s\":1}}", hints [index]);
        s_tool_refused (json, hints [index]);
    }
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"annotations\":[]}", "annotations");

    //  outputSchema must be an object schema
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"outputSchema\":{\"type\":\"array\"}}",
                    "outputSchema");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"outputSchema\":\"object\"}",
                    "outputSchema");

    //  strict and concurrencySafe must be booleans
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"strict\":\"true\"}", "strict");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"strict\":1}", "strict");
    s_tool_refused ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"concurrencySafe\":null}",
                    "concurrencySafe");
    s_tool_ok ("{\"name\":\"t\",\"parameters\":{\"type\":\"object\"},\"strict\":false,\"concurrencySafe\":true}");
}

// ---------------------------------------------------------------------------
//  Presence

static void
test_decode_presence (void **state)
{
    (void) state;
    dsh_presence_t presence;
    char error [256] = "";
    dsh_doc_t *doc = s_doc ("{\"component\":\"demo-1\",\"generation\":3,"
                            "\"tools\":[{\"name\":\"t\",\"parameters\":{\"type\":\"object\"}}]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_string_equal (presence.component, "demo-1");
    assert_int_equal (presence.generation, 3);
    assert_non_null (presence.tools);
    assert_int_equal (presence.tools->type, MSGPACK_OBJECT_ARRAY);
    assert_int_equal (presence.tools->via.array.size, 1);

    //  concurrency is optional (0 when absent), from 1 to DSH_CONCURRENCY_MAX
    assert_int_equal (presence.concurrency, 0);
    doc = s_doc ("{\"component\":\"demo-1\",\"generation\":3,\"concurrency\":4,\"tools\":[]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_int_equal (presence.concurrency, 4);
    const char *bad_concurrency [] = {
        "{\"component\":\"c\",\"generation\":1,\"concurrency\":0,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"concurrency\":65537,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"concurrency\":-1,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"concurrency\":\"4\",\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"concurrency\":2.5,\"tools\":[]}",
    };
    for (size_t index = 0; index < sizeof bad_concurrency / sizeof bad_concurrency [0]; index++) {
        doc = s_doc (bad_concurrency [index]);
        assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), -1);
        s_assert_contains (error, "concurrency");
    }

    //  ANNOUNCE needs a tools array
    doc = s_doc ("{\"component\":\"demo-1\",\"generation\":3}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), -1);
    s_assert_contains (error, "tools");
    doc = s_doc ("{\"component\":\"demo-1\",\"generation\":3,\"tools\":{}}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), -1);
    s_assert_contains (error, "tools");

    //  HEARTBEAT and WITHDRAW need no tools, and tools are not reported
    doc = s_doc ("{\"component\":\"demo-1\",\"generation\":4}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_HEARTBEAT, &presence, error, sizeof error), 0);
    assert_string_equal (presence.component, "demo-1");
    assert_int_equal (presence.generation, 4);
    assert_null (presence.tools);
    doc = s_doc ("{\"component\":\"demo-1\",\"generation\":5,\"tools\":[]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_WITHDRAW, &presence, error, sizeof error), 0);
    assert_int_equal (presence.generation, 5);
    assert_null (presence.tools);

    //  Bad component ids and generations
    const char *bad [] = {
        "{\"generation\":1,\"tools\":[]}",
        "{\"component\":\"has space\",\"generation\":1,\"tools\":[]}",
        "{\"component\":\"\",\"generation\":1,\"tools\":[]}",
        "{\"component\":7,\"generation\":1,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":\"1\",\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":-1,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1.5,\"tools\":[]}",
    };
    const char *commands [] = { DSH_ANNOUNCE, DSH_HEARTBEAT, DSH_WITHDRAW };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++)
        for (size_t command = 0; command < 3; command++) {
            doc = s_doc (bad [index]);
            if (dsh_proto_decode_presence (doc, commands [command], &presence, error, sizeof error) != -1)
                fail_msg ("%s %s accepted", commands [command], bad [index]);
        }
    char json [300];
    snprintf (json, sizeof json, "{\"component\":\"%0129d\",\"generation\":1}", 0);
    doc = s_doc (json);
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_HEARTBEAT, &presence, error, sizeof error), -1);
    snprintf (json, sizeof json, "{\"component\":\"%0128d\",\"generation\":1}", 0);
    doc = s_doc (json);
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_HEARTBEAT, &presence, error, sizeof error), 0);
}

//  An ANNOUNCE in parts: part and parts both or neither, parts 2 or more,
//  part below it; without them the ANNOUNCE is the whole set (parts 0)
//  ANNOUNCE's details for an operator (host, pid, version, uptimeMs): all
//  optional, each bounded and typed, a bad one refused by name.
static void
test_decode_presence_details (void **state)
{
    (void) state;
    dsh_presence_t presence;
    char error [256] = "";
    dsh_doc_t *doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"tools\":[]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_null (presence.host);
    assert_null (presence.version);
    assert_int_equal (presence.pid, 0);
    assert_false (presence.has_uptime);
    doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"tools\":[],\"host\":\"node-7\",\"pid\":4242,"
                 "\"version\":\"dsh-c/0.1.0\",\"uptimeMs\":0}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_string_equal (presence.host, "node-7");
    assert_string_equal (presence.version, "dsh-c/0.1.0");
    assert_int_equal (presence.pid, 4242);
    assert_true (presence.has_uptime);
    assert_int_equal (presence.uptime_ms, 0);
    char long_host [300];
    memset (long_host, 'h', sizeof long_host - 1);
    long_host [sizeof long_host - 1] = 0;
    char *too_long = zsys_sprintf ("{\"component\":\"c\",\"generation\":1,\"tools\":[],\"host\":\"%s\"}", long_host);
    const struct { const char *json; const char *reason; } bad [] = {
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"host\":7}", "field \"host\" must be a string" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"host\":\"\"}", "field \"host\" must be 1 to 255 bytes" },
        { too_long, "field \"host\" must be 1 to 255 bytes" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"host\":\"a\\nb\"}", "field \"host\" holds a control" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"version\":\"\\u001b[31m\"}", "field \"version\" holds a control" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"pid\":0}", "field \"pid\" must be from 1 to 4294967295" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"pid\":4294967296}", "field \"pid\" must be from 1" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"pid\":-3}", "field \"pid\" must be a non-negative integer" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"uptimeMs\":\"5\"}", "field \"uptimeMs\" must be a non-negative" },
        { "{\"component\":\"c\",\"generation\":1,\"tools\":[],\"uptimeMs\":9007199254740992}", "field \"uptimeMs\" must be at most" },
    };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++) {
        doc = s_doc (bad [index].json);
        assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), -1);
        s_assert_contains (error, bad [index].reason);
    }
    zstr_free (&too_long);
    //  Bytes that are not UTF-8 are refused: STATS carries them, and its
    //  JSON form (the monitor's, the SDKs') must hold for every component
    const char *not_utf8 [] = { "h\xff", "\xc0\xaf", "\xed\xa0\x80", "ab\xe2\x82", "\xf4\x90\x80\x80" };
    for (size_t index = 0; index < sizeof not_utf8 / sizeof not_utf8 [0]; index++)
        for (int field = 0; field < 2; field++) {
            dsh_packer_t packer;
            dsh_packer_init (&packer);
            msgpack_pack_map (&packer.pk, 4);
            dsh_packer_kv_str (&packer, "component", "c");
            dsh_pack_cstr (&packer.pk, "generation");
            msgpack_pack_uint64 (&packer.pk, 1);
            dsh_pack_cstr (&packer.pk, "tools");
            msgpack_pack_array (&packer.pk, 0);
            dsh_packer_kv_str (&packer, field? "version": "host", not_utf8 [index]);
            zframe_t *frame = dsh_packer_frame (&packer);
            dsh_packer_release (&packer);
            doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), error, sizeof error);
            assert_non_null (doc);
            assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), -1);
            s_assert_contains (error, field? "field \"version\" is not UTF-8": "field \"host\" is not UTF-8");
            dsh_doc_destroy (&doc);
            zframe_destroy (&frame);
        }
    //  ... and UTF-8 beyond ASCII is kept
    doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"tools\":[],\"host\":\"n\\u00f6de-\\u6771\\ud83d\\ude00\"}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_string_equal (presence.host, "n\xc3\xb6" "de-\xe6\x9d\xb1\xf0\x9f\x98\x80");
    //  A HEARTBEAT's are not read
    doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"pid\":0}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_HEARTBEAT, &presence, error, sizeof error), 0);
}

static void
test_decode_presence_parts (void **state)
{
    (void) state;
    dsh_presence_t presence;
    char error [256] = "";
    dsh_doc_t *doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"tools\":[]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_int_equal (presence.parts, 0);
    assert_int_equal (presence.part, 0);
    doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"part\":2,\"parts\":3,\"tools\":[]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_int_equal (presence.part, 2);
    assert_int_equal (presence.parts, 3);
    doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"part\":0,\"parts\":2,\"tools\":[]}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error), 0);
    assert_int_equal (presence.parts, 2);
    const char *bad [] = {
        "{\"component\":\"c\",\"generation\":1,\"part\":0,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"parts\":3,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":0,\"parts\":1,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":0,\"parts\":0,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":3,\"parts\":3,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":-1,\"parts\":3,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":\"0\",\"parts\":3,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":0,\"parts\":2.0,\"tools\":[]}",
        "{\"component\":\"c\",\"generation\":1,\"part\":null,\"parts\":2,\"tools\":[]}",
    };
    for (size_t index = 0; index < sizeof bad / sizeof bad [0]; index++) {
        doc = s_doc (bad [index]);
        if (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof error) != -1)
            fail_msg ("ANNOUNCE %s accepted", bad [index]);
        s_assert_contains (error, "part");
    }
    //  HEARTBEAT and WITHDRAW read no parts
    doc = s_doc ("{\"component\":\"c\",\"generation\":1,\"part\":5}");
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_HEARTBEAT, &presence, error, sizeof error), 0);
    assert_int_equal (presence.parts, 0);
}

// ---------------------------------------------------------------------------
//  Packer

static void
test_packer (void **state)
{
    (void) state;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, "k", "v");
    zframe_t *frame = dsh_packer_frame (&packer);
    assert_int_equal (zframe_size (frame), 5);
    assert_memory_equal (zframe_data (frame), "\x81\xa1k\xa1v", 5);
    //  The buffer is empty again and reusable
    dsh_packer_raw (&packer, "\xc3", 1);
    zframe_t *second = dsh_packer_frame (&packer);
    assert_int_equal (zframe_size (second), 1);
    assert_int_equal (zframe_data (second) [0], 0xc3);
    dsh_packer_release (&packer);
    zframe_destroy (&frame);
    zframe_destroy (&second);
}

//  Packs what a builder map should hold, the same way with both packers
static void
s_pack_nested_entries (msgpack_packer *pk, dsh_packer_t *builder)
{
    dsh_pack_cstr (pk, "a");
    if (builder)
        dsh_packer_map_begin (builder);
    else
        msgpack_pack_map (pk, 2);
    dsh_pack_cstr (pk, "b");
    msgpack_pack_int (pk, 1);
    dsh_pack_cstr (pk, "c");
    msgpack_pack_array (pk, 2);
    msgpack_pack_nil (pk);
    msgpack_pack_bin_with_body (pk, "\x00\xff", 2);
    if (builder)
        assert_int_equal (dsh_packer_map_end (builder), 0);
    dsh_pack_cstr (pk, "d");
    msgpack_pack_ext_with_body (pk, "xyz", 3, 4);
}

static void
test_packer_map (void **state)
{
    (void) state;
    dsh_packer_t packer;
    dsh_packer_init (&packer);

    //  An empty map gets the one-byte header
    dsh_packer_map_begin (&packer);
    assert_int_equal (dsh_packer_map_end (&packer), 0);
    zframe_t *frame = dsh_packer_frame (&packer);
    assert_int_equal (zframe_size (frame), 1);
    assert_int_equal (zframe_data (frame) [0], 0x80);
    zframe_destroy (&frame);

    //  Nested maps give the bytes of maps counted by hand
    dsh_packer_map_begin (&packer);
    s_pack_nested_entries (&packer.pk, &packer);
    assert_int_equal (dsh_packer_map_end (&packer), 0);
    msgpack_sbuffer expected;
    msgpack_sbuffer_init (&expected);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &expected, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 2);
    s_pack_nested_entries (&pk, NULL);
    assert_int_equal (packer.sbuf.size, expected.size);
    assert_memory_equal (packer.sbuf.data, expected.data, expected.size);
    packer.sbuf.size = 0;
    msgpack_sbuffer_clear (&expected);

    //  Entries written as raw bytes count too; 16 entries need a map16,
    //  65536 a map32, as msgpack_pack_map would write them
    uint32_t sizes [] = { 15, 16, 65535, 65536 };
    for (size_t index = 0; index < 4; index++) {
        dsh_packer_map_begin (&packer);
        msgpack_pack_map (&pk, sizes [index]);
        for (uint32_t entry = 0; entry < sizes [index]; entry++) {
            msgpack_pack_uint32 (&packer.pk, entry);
            dsh_packer_raw (&packer, "\xc0", 1);
            msgpack_pack_uint32 (&pk, entry);
            msgpack_pack_nil (&pk);
        }
        assert_int_equal (dsh_packer_map_end (&packer), 0);
        assert_int_equal (packer.sbuf.size, expected.size);
        assert_memory_equal (packer.sbuf.data, expected.data, expected.size);
        packer.sbuf.size = 0;
        msgpack_sbuffer_clear (&expected);
    }
    msgpack_sbuffer_destroy (&expected);

    //  Maps nest as deep as the packer allows, each closed in turn
    for (int depth = 0; depth < DSH_PACKER_MAX_OPEN; depth++) {
        dsh_packer_map_begin (&packer);
        dsh_pack_cstr (&packer.pk, "k");
    }
    msgpack_pack_true (&packer.pk);
    for (int depth = 0; depth < DSH_PACKER_MAX_OPEN; depth++)
        assert_int_equal (dsh_packer_map_end (&packer), 0);
    frame = dsh_packer_frame (&packer);
    assert_int_equal (zframe_size (frame), 3 * DSH_PACKER_MAX_OPEN + 1);
    assert_memory_equal (zframe_data (frame), "\x81\xa1k\x81\xa1k", 6);
    char error [256] = "";
    assert_int_equal (dsh_msgpack_scan (zframe_data (frame), zframe_size (frame), DSH_DOC_MAX_DEPTH,
                                        error, sizeof error), 0);
    zframe_destroy (&frame);

    //  A key without a value, or bytes that are not msgpack, cannot be
    //  counted: the map stays a map32 of nothing, which no receiver takes
    dsh_packer_map_begin (&packer);
    dsh_pack_cstr (&packer.pk, "lonely");
    assert_int_equal (dsh_packer_map_end (&packer), -1);
    assert_memory_equal (packer.sbuf.data, "\xdf\x00\x00\x00\x00", 5);
    assert_int_equal (dsh_msgpack_scan (packer.sbuf.data, packer.sbuf.size, DSH_DOC_MAX_DEPTH,
                                        error, sizeof error), -1);
    packer.sbuf.size = 0;
    dsh_packer_map_begin (&packer);
    dsh_pack_cstr (&packer.pk, "cut");
    dsh_packer_raw (&packer, "\xa5" "ab", 3);
    assert_int_equal (dsh_packer_map_end (&packer), -1);
    packer.sbuf.size = 0;
    dsh_packer_release (&packer);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_split_envelopes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_split_refusals, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_split_keeps_following_frames, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_message_builders, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_body, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_valid_name, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_valid_id, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_call_ok, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_call_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_call_strict, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_call_large_meta, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_encode_call_round_trip, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_splice_nothing, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_splice_stamps, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_splice_arguments_and_agent, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_splice_limit, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_splice_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_splice_mutations, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_error_names, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_error_result, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_error_body, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_check_result, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_check_content, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_check_tool, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_presence, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_presence_parts, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_decode_presence_details, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_packer, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_packer_map, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
