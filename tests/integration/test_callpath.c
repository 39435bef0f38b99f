/*  =========================================================================
    test_callpath - the execution path as an attacker and a strict peer see
    it, through the main job's chain (deploy/dsh-broker.cfg) where it
    matters: a call is decided once, arguments reach the component as the
    caller's bytes, a stage cannot hold a call past its deadline, and a
    stamp that would push a call over the message limit gets an error result
    without cutting the component off.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

//  ---------------------------------------------------------------------
//  A raw client: what any peer can put on FRONT

typedef struct {
    char endpoint [256];
    dsh_testproc_t *broker;
    zsock_t *client;
} s_bed_t;

//  A broker with config (ZPL text); its heartbeat is long enough for a
//  test's hand-made component to stay alive without heartbeating.
static s_bed_t *
s_bed (const char *config)
{
    s_bed_t *bed = (s_bed_t *) zmalloc (sizeof (s_bed_t));
    bed->broker = dsh_testkit_broker_config (3000, config, bed->endpoint, sizeof (bed->endpoint));
    assert_non_null (bed->broker);
    bed->client = zsock_new_dealer (bed->endpoint);
    assert_non_null (bed->client);
    return bed;
}

static void
s_bed_destroy (s_bed_t **bed_p)
{
    s_bed_t *bed = *bed_p;
    zsock_destroy (&bed->client);
    dsh_testproc_destroy (&bed->broker);
    free (bed);
    *bed_p = NULL;
}

static void
s_send (zsock_t *sock, const char *command, const void *body, size_t size)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    zmsg_addmem (msg, body, size);
    assert_int_equal (zmsg_send (&msg, sock), 0);
}

//  The next reply's command and body, or fails the test after timeout_ms.
static dsh_doc_t *
s_recv (zsock_t *sock, char *command, zframe_t **body_p, int timeout_ms)
{
    zpoller_t *poller = zpoller_new (sock, NULL);
    void *ready = zpoller_wait (poller, timeout_ms);
    zpoller_destroy (&poller);
    if (!ready)
        fail_msg ("no reply within %d ms", timeout_ms);
    zmsg_t *reply = zmsg_recv (sock);
    zmsg_t *envelope = NULL;
    char error [256];
    assert_int_equal (dsh_proto_split (reply, &envelope, command, DSH_COMMAND_MAX + 1, error, sizeof (error)), 0);
    *body_p = zmsg_pop (reply);
    zmsg_destroy (&envelope);
    zmsg_destroy (&reply);
    dsh_doc_t *doc = dsh_proto_decode_body (*body_p, error, sizeof (error));
    assert_non_null (doc);
    return doc;
}

//  The first text block of a result, or "".
static const char *
s_text (dsh_doc_t *doc)
{
    const msgpack_object *content = dsh_map_get (dsh_doc_root (doc), "content");
    if (!content || content->type != MSGPACK_OBJECT_ARRAY || content->via.array.size == 0)
        return "";
    char *text = dsh_doc_strdup (doc, dsh_map_get (&content->via.array.ptr [0], "text"));
    return text? text: "";
}

static const char *
s_code (dsh_doc_t *doc)
{
    char *code = dsh_doc_strdup (doc, dsh_map_get (dsh_map_get (dsh_doc_root (doc), "error"), "code"));
    if (!code)
        code = dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "code"));
    return code? code: "";
}

//  The next reply must be a RESULT with error code code ("" for success)
//  whose first text block contains text.
static void
s_expect_result (s_bed_t *bed, int timeout_ms, const char *code, const char *text)
{
    char command [DSH_COMMAND_MAX + 1];
    zframe_t *body = NULL;
    dsh_doc_t *doc = s_recv (bed->client, command, &body, timeout_ms);
    assert_string_equal (command, DSH_RESULT);
    if (!streq (s_code (doc), code) || !strstr (s_text (doc), text))
        fail_msg ("want %s \"%s\", got %s \"%s\"", *code? code: "success", text,
                  *s_code (doc)? s_code (doc): "success", s_text (doc));
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
}

//  Calls echo {message: "hi"}; it must answer "hi".
static void
s_echo_ok (s_bed_t *bed, const char *call_id)
{
    zframe_t *call = dsh_proto_encode_call (call_id, "echo", "\x81\xa7message\xa2hi", 12, NULL, NULL, 0, 2000);
    s_send (bed->client, DSH_CALL, zframe_data (call), zframe_size (call));
    zframe_destroy (&call);
    s_expect_result (bed, 5000, "", "hi");
}

static void
s_pack_str (msgpack_packer *pk, const char *text)
{
    msgpack_pack_str (pk, strlen (text));
    msgpack_pack_str_body (pk, text, strlen (text));
}

//  ---------------------------------------------------------------------
//  A call with two "name" keys: the stages must not see one tool while
//  another runs

static void
test_duplicate_name_keys (void **state)
{
    (void) state;
    char *config = dsh_testkit_main_config ();
    assert_non_null (config);
    s_bed_t *bed = s_bed (config);
    zstr_free (&config);
    char root [] = "/tmp/dsh-callpath-XXXXXX";
    assert_non_null (mkdtemp (root));
    char *scratch = zsys_sprintf ("%s/scratch", root);
    assert_int_equal (mkdir (scratch, 0700), 0);
    dsh_testproc_t *fs = dsh_testkit_component ("components/fs/dsh-fs", bed->endpoint, "fs",
                                                (const char *[]) { "--root", root, NULL });
    assert_non_null (fs);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "_file", 2, 5000), 0);

    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 5);
    s_pack_str (&pk, "callId");
    s_pack_str (&pk, "dup-1");
    s_pack_str (&pk, "name");
    s_pack_str (&pk, "read_file");
    s_pack_str (&pk, "arguments");
    msgpack_pack_map (&pk, 2);
    s_pack_str (&pk, "path");
    s_pack_str (&pk, "scratch/x.txt");
    s_pack_str (&pk, "content");
    s_pack_str (&pk, "written behind the approver's back");
    s_pack_str (&pk, "timeoutMs");
    msgpack_pack_uint32 (&pk, 5000);
    s_pack_str (&pk, "name");
    s_pack_str (&pk, "write_file");
    s_send (bed->client, DSH_CALL, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);

    s_expect_result (bed, 8000, DSH_E_BAD_REQUEST, "duplicate key \"name\"");
    char *written = zsys_sprintf ("%s/x.txt", scratch);
    assert_false (zsys_file_exists (written));

    zstr_free (&written);
    dsh_testproc_destroy (&fs);
    zsys_dir_delete ("%s", scratch);
    zsys_dir_delete ("%s", root);
    zstr_free (&scratch);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  A stage that holds a call (a hook that never ends) does not hold it past
//  the call's deadline

static void
test_stage_held_past_deadline (void **state)
{
    (void) state;
    const char *source = getenv ("DSH_SOURCE_DIR");
    char *config = zsys_sprintf (
        "chain\n"
        "    stage\n"
        "        name = \"hooks\"\n"
        "        kind = \"hooks\"\n"
        "        timeout_ms = 60000\n"
        "        hook\n"
        "            event = \"PreToolUse\"\n"
        "            matcher = \"echo\"\n"
        "            command = \"%s/tests/integration/hooks/slow.sh\"\n"
        "            timeout_ms = 50000\n",
        source? source: ".");
    s_bed_t *bed = s_bed (config);
    zstr_free (&config);
    dsh_testproc_t *demo = dsh_testkit_component ("components/demo/dsh-demo", bed->endpoint, "demo", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "echo", 1, 5000), 0);

    zframe_t *call = dsh_proto_encode_call ("held-1", "echo", "\x81\xa7message\xa2hi", 12, NULL, NULL, 0, 1000);
    int64_t started = zclock_mono ();
    s_send (bed->client, DSH_CALL, zframe_data (call), zframe_size (call));
    zframe_destroy (&call);
    s_expect_result (bed, 8000, DSH_E_TIMEOUT, "while a middleware stage held it");
    int64_t elapsed = zclock_mono () - started;
    //  On time: the 1 s deadline, plus at most the broker's deadline tick and
    //  a loaded machine's scheduling, never the stage's 60 s
    assert_true (elapsed >= 950);
    assert_true (elapsed < 3000);

    //  The stage let go: the next call is refused by the same hook's deadline
    //  again, not queued behind the first
    dsh_testproc_destroy (&demo);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  A stamp that would push a call over the limit

static void
test_stamp_over_limit (void **state)
{
    (void) state;
    const char *config =
        "broker\n"
        "    max_message_bytes = 100000\n"
        "chain\n"
        "    stage\n"
        "        name = \"sandbox\"\n"
        "        kind = \"sandbox\"\n"
        "        default = \"workspace-write\"\n"
        "        workspace = \"scratch\"\n";
    s_bed_t *bed = s_bed (config);
    dsh_testproc_t *demo = dsh_testkit_component ("components/demo/dsh-demo", bed->endpoint, "demo", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "echo", 1, 5000), 0);

    //  A body a few bytes under the limit: the front takes it, the sandbox
    //  stamp would take it over
    size_t message_size = 100000 - 80;
    char *message = (char *) malloc (message_size + 1);
    memset (message, 'x', message_size);
    message [message_size] = 0;
    json_t *args = json_pack ("{s:s}", "message", message);
    free (message);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    dsh_json_to_msgpack (&pk, args);
    json_decref (args);
    zframe_t *call = dsh_proto_encode_call ("big-1", "echo", sbuf.data, sbuf.size, NULL, NULL, 0, 5000);
    msgpack_sbuffer_destroy (&sbuf);
    assert_true (zframe_size (call) < 100000);
    s_send (bed->client, DSH_CALL, zframe_data (call), zframe_size (call));
    zframe_destroy (&call);
    s_expect_result (bed, 5000, DSH_E_BAD_REQUEST, "100000-byte");

    //  The component is still reachable
    s_echo_ok (bed, "small-1");

    dsh_testproc_destroy (&demo);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  Arguments no JSON can carry reach a component byte for byte

//  A component written against the wire alone: announces one tool and
//  hands back every CALL body it receives.
typedef struct {
    zsock_t *announce;
    zsock_t *work;
} s_raw_component_t;

static void
s_raw_announce (s_raw_component_t *component)
{
    msgpack_sbuffer sbuf;
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack (
        "{\"component\": \"raw\", \"generation\": 1, \"tools\": [{\"name\": \"rawcheck\","
        " \"description\": \"returns nothing, keeps the bytes\", \"parameters\": {\"type\": \"object\"},"
        " \"annotations\": {\"readOnlyHint\": true}}]}", &sbuf, error, sizeof (error)), 0);
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_ANNOUNCE);
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    zmsg_send (&msg, component->announce);
    msgpack_sbuffer_destroy (&sbuf);
}

//  Finds the component side with HELLO on FRONT, connects the hand-made
//  component "raw" and announces until its tool is listed.
static void
s_raw_component_start (s_bed_t *bed, s_raw_component_t *component)
{
    s_send (bed->client, DSH_HELLO, "\x80", 1);
    char command [DSH_COMMAND_MAX + 1];
    zframe_t *body = NULL;
    dsh_doc_t *doc = s_recv (bed->client, command, &body, 5000);
    assert_string_equal (command, DSH_WELCOME);
    char *announce = dsh_sock_resolve (dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "announce")), bed->endpoint);
    char *work = dsh_sock_resolve (dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "work")), bed->endpoint);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    component->announce = zsock_new (ZMQ_PUB);
    assert_int_equal (zsock_connect (component->announce, "%s", announce), 0);
    component->work = zsock_new (ZMQ_DEALER);
    zsock_set_identity (component->work, "raw");
    assert_int_equal (zsock_connect (component->work, "%s", work), 0);
    zstr_free (&announce);
    zstr_free (&work);
    int listed = -1;
    for (int attempt = 0; attempt < 25 && listed; attempt++) {
        s_raw_announce (component);
        listed = dsh_testkit_wait_tools (bed->endpoint, "rawcheck", 1, 200);
    }
    assert_int_equal (listed, 0);
}

static void
s_raw_component_stop (s_raw_component_t *component)
{
    zsock_destroy (&component->announce);
    zsock_destroy (&component->work);
}

//  The next CALL the raw component receives, as [token, body]; fails the
//  test after 5 s.
static zmsg_t *
s_raw_take_call (s_raw_component_t *component)
{
    zpoller_t *poller = zpoller_new (component->work, NULL);
    zmsg_t *received = NULL;
    while (!received && zpoller_wait (poller, 5000) == component->work) {
        zmsg_t *msg = zmsg_recv (component->work);
        zframe_t *frame = zmsg_first (msg);
        frame = zmsg_next (msg);
        frame = zmsg_next (msg);
        if (frame && zframe_streq (frame, DSH_CALL))
            received = msg;
        else
            zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    assert_non_null (received);
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    assert_int_equal (dsh_proto_split (received, &envelope, command, sizeof (command), error, sizeof (error)), 0);
    zmsg_destroy (&envelope);
    return received;
}

//  The raw component sends command token body (JSON) on WORK.
static void
s_raw_send (s_raw_component_t *component, const char *command, zframe_t *token, const char *json)
{
    msgpack_sbuffer sbuf;
    char error [128];
    assert_int_equal (dsh_json_text_to_msgpack (json, &sbuf, error, sizeof (error)), 0);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    zmsg_addmem (msg, zframe_data (token), zframe_size (token));
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    zmsg_send (&msg, component->work);
    msgpack_sbuffer_destroy (&sbuf);
}

static void
test_arguments_byte_for_byte (void **state)
{
    (void) state;
    char *config = dsh_testkit_main_config ();
    assert_non_null (config);
    s_bed_t *bed = s_bed (config);
    zstr_free (&config);
    s_raw_component_t component;
    s_raw_component_start (bed, &component);

    //  bin, ext, float32, a string that is not UTF-8 and an integer key
    msgpack_sbuffer arguments;
    msgpack_sbuffer_init (&arguments);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &arguments, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 5);
    s_pack_str (&pk, "bin");
    msgpack_pack_bin (&pk, 4);
    msgpack_pack_bin_body (&pk, "\x00\xff\x10\x80", 4);
    s_pack_str (&pk, "ext");
    msgpack_pack_ext (&pk, 3, 7);
    msgpack_pack_ext_body (&pk, "abc", 3);
    s_pack_str (&pk, "latin1");
    msgpack_pack_str (&pk, 4);
    msgpack_pack_str_body (&pk, "caf\xe9", 4);
    msgpack_pack_int (&pk, 42);
    s_pack_str (&pk, "an integer key");
    s_pack_str (&pk, "f32");
    msgpack_pack_float (&pk, 1.5f);
    zframe_t *call = dsh_proto_encode_call ("raw-1", "rawcheck", arguments.data, arguments.size, "worker-1",
                                            NULL, 0, 5000);
    s_send (bed->client, DSH_CALL, zframe_data (call), zframe_size (call));
    zframe_destroy (&call);

    //  The component receives it: the caller's argument bytes, all of them,
    //  in order, and the sandbox stamp beside them
    zmsg_t *received = s_raw_take_call (&component);
    char error [256];
    zframe_t *token = zmsg_pop (received);
    zframe_t *call_body = zmsg_pop (received);
    assert_non_null (memmem (zframe_data (call_body), zframe_size (call_body), arguments.data, arguments.size));
    dsh_doc_t *doc = dsh_proto_decode_body (call_body, error, sizeof (error));
    assert_non_null (doc);
    const msgpack_object *sandbox = dsh_map_get (dsh_map_get (dsh_doc_root (doc), "meta"), "sandbox");
    assert_non_null (sandbox);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&arguments);

    //  ... and its answer reaches the caller
    zframe_t *result = dsh_proto_error_result ("raw-1", DSH_E_TOOL_FAILED, "Error: seen");
    zmsg_t *answer = zmsg_new ();
    zmsg_addmem (answer, NULL, 0);
    zmsg_addstr (answer, DSH_PROTOCOL);
    zmsg_addstr (answer, DSH_RESULT);
    zmsg_append (answer, &token);
    zmsg_append (answer, &result);
    zmsg_send (&answer, component.work);
    s_expect_result (bed, 5000, DSH_E_TOOL_FAILED, "Error: seen");

    zframe_destroy (&call_body);
    zmsg_destroy (&received);
    s_raw_component_stop (&component);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  PROGRESS is checked like a RESULT: its own call's callId, a number

static void
test_progress_is_checked (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ("");
    s_raw_component_t component;
    s_raw_component_start (bed, &component);
    zframe_t *call = dsh_proto_encode_call ("p-1", "rawcheck", "\x80", 1, NULL, NULL, 0, 5000);
    s_send (bed->client, DSH_CALL, zframe_data (call), zframe_size (call));
    zframe_destroy (&call);
    zmsg_t *received = s_raw_take_call (&component);
    zframe_t *token = zmsg_first (received);

    //  Another call's callId, none at all, a progress that is not a number:
    //  dropped; then a good one, and the result
    s_raw_send (&component, DSH_PROGRESS, token, "{\"callId\": \"someone-else\", \"progress\": 1}");
    s_raw_send (&component, DSH_PROGRESS, token, "{\"progress\": 1}");
    s_raw_send (&component, DSH_PROGRESS, token, "{\"callId\": \"p-1\", \"progress\": \"x\"}");
    s_raw_send (&component, DSH_PROGRESS, token, "{\"callId\": \"p-1\", \"progress\": 0.5, \"total\": 1}");
    s_raw_send (&component, DSH_RESULT, token,
                "{\"callId\": \"p-1\", \"content\": [{\"type\": \"text\", \"text\": \"done\"}], \"isError\": false}");
    char command [DSH_COMMAND_MAX + 1];
    zframe_t *body = NULL;
    dsh_doc_t *doc = s_recv (bed->client, command, &body, 5000);
    assert_string_equal (command, DSH_PROGRESS);
    const msgpack_object *progress = dsh_map_get (dsh_doc_root (doc), "progress");
    assert_non_null (progress);
    assert_true (progress->type == MSGPACK_OBJECT_FLOAT64 && progress->via.f64 == 0.5);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    doc = s_recv (bed->client, command, &body, 5000);
    assert_string_equal (command, DSH_RESULT);
    assert_string_equal (s_text (doc), "done");
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);

    zmsg_destroy (&received);
    s_raw_component_stop (&component);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  A CALL behind more routing frames than a record keeps is refused along
//  the route it came by, and the broker goes on serving

static void
test_deep_envelope (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ("");
    zframe_t *call = dsh_proto_encode_call ("deep-1", "echo", "\x80", 1, NULL, NULL, 0, 1000);
    zmsg_t *msg = zmsg_new ();
    //  With the broker's identity frame, 10 routing frames: more than a
    //  record keeps (8), well within what a message may have (16)
    for (int index = 0; index < 9; index++)
        zmsg_addstrf (msg, "hop-%d", index);
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_CALL);
    zmsg_append (msg, &call);
    assert_int_equal (zmsg_send (&msg, bed->client), 0);
    zpoller_t *poller = zpoller_new (bed->client, NULL);
    assert_non_null (zpoller_wait (poller, 5000));
    zpoller_destroy (&poller);
    zmsg_t *reply = zmsg_recv (bed->client);
    //  The hops come back first, then the head and the RESULT
    assert_int_equal (zmsg_size (reply), 9 + 4);
    zframe_t *body = zmsg_last (reply);
    char error [256];
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    assert_non_null (doc);
    assert_string_equal (s_code (doc), DSH_E_BAD_REQUEST);
    assert_non_null (strstr (s_text (doc), "the envelope has 10 frames"));
    dsh_doc_destroy (&doc);
    zmsg_destroy (&reply);

    //  Still serving
    s_send (bed->client, DSH_PING, "\x80", 1);
    char command [DSH_COMMAND_MAX + 1];
    doc = s_recv (bed->client, command, &body, 5000);
    assert_string_equal (command, DSH_PONG);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    s_bed_destroy (&bed);
}

//  ---------------------------------------------------------------------
//  A second connection under a live component's id (started by mistake, or
//  a rogue) does not take the component's route (it is told so), and its
//  going changes nothing

static void
test_duplicate_id_keeps_no_route (void **state)
{
    (void) state;
    s_bed_t *bed = s_bed ("");
    dsh_testproc_t *demo = dsh_testkit_component ("components/demo/dsh-demo", bed->endpoint, "demo", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (bed->endpoint, "echo", 1, 5000), 0);
    s_send (bed->client, DSH_HELLO, "\x80", 1);
    char command [DSH_COMMAND_MAX + 1];
    zframe_t *body = NULL;
    dsh_doc_t *doc = s_recv (bed->client, command, &body, 5000);
    char *work = dsh_sock_resolve (dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "work")), bed->endpoint);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);

    //  The same routing id as the live component, and a HELLO on WORK
    zsock_t *rogue = zsock_new (ZMQ_DEALER);
    zsock_set_identity (rogue, "demo");
    assert_int_equal (zsock_connect (rogue, "%s", work), 0);
    zstr_free (&work);
    zmsg_t *hello = zmsg_new ();
    zmsg_addmem (hello, NULL, 0);
    zmsg_addstr (hello, DSH_PROTOCOL);
    zmsg_addstr (hello, DSH_HELLO);
    zmsg_addmem (hello, "\x80", 1);
    zmsg_send (&hello, rogue);
    zclock_sleep (300);
    char call_id [32];
    for (int index = 0; index < 10; index++) {
        snprintf (call_id, sizeof (call_id), "while-%d", index);
        s_echo_ok (bed, call_id);
    }
    //  It was told the id is taken, and got nothing else
    zpoller_t *poller = zpoller_new (rogue, NULL);
    size_t refused = 0;
    while (zpoller_wait (poller, 100) == rogue) {
        zmsg_t *msg = zmsg_recv (rogue);
        zframe_t *frame = zmsg_first (msg);
        frame = zmsg_next (msg);
        frame = zmsg_next (msg);
        assert_true (frame && zframe_streq (frame, DSH_REFUSED));
        refused++;
        zmsg_destroy (&msg);
    }
    assert_int_equal (refused, 1);
    zpoller_destroy (&poller);

    //  It goes, as a process killed -9 would: the real one stays routable
    zsock_destroy (&rogue);
    zclock_sleep (300);
    for (int index = 0; index < 5; index++) {
        snprintf (call_id, sizeof (call_id), "after-%d", index);
        s_echo_ok (bed, call_id);
    }
    dsh_testproc_destroy (&demo);
    s_bed_destroy (&bed);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_duplicate_name_keys),
        cmocka_unit_test (test_stage_held_past_deadline),
        cmocka_unit_test (test_stamp_over_limit),
        cmocka_unit_test (test_arguments_byte_for_byte),
        cmocka_unit_test (test_progress_is_checked),
        cmocka_unit_test (test_deep_envelope),
        cmocka_unit_test (test_duplicate_id_keeps_no_route),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
