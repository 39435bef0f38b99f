/*  =========================================================================
    test_badinput - the bad-input battery against every listening socket

    Garbage frames, wrong frame counts, truncated msgpack, wrong field
    types, 40-deep nesting, a 5-byte array header claiming 4 billion
    elements, a frame over the size limit, and raw non-ZMTP bytes: the
    front answers what it can with ERROR, the other sockets log and drop,
    and afterwards the broker still serves a normal call. At the end the
    broker and the component stop on SIGINT with status 0: in the
    sanitizer build (detect_leaks=1) a leak anywhere in the battery makes
    that status non-zero.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include "dsh.h"
#include "dsh_testkit.h"

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
    char announce [256];
    char work [256];
    char events [256];
} fixture_t;

static fixture_t fixture;

static void
s_copy_str (const msgpack_object *body, const char *key, char *target, size_t size)
{
    const msgpack_object *value = dsh_map_get (body, key);
    assert_non_null (value);
    snprintf (target, size, "%.*s", (int) value->via.str.size, value->via.str.ptr);
}

static int
s_setup (void **state)
{
    (void) state;
    const char *extra [] = { "--max-message-bytes", "65536", NULL };
    fixture.broker = dsh_testkit_broker (200, extra, fixture.endpoint, sizeof (fixture.endpoint));
    assert_non_null (fixture.broker);
    fixture.demo = dsh_testkit_component ("components/demo/dsh-demo", fixture.endpoint, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    dsh_client_t *client = dsh_client_new (fixture.endpoint);
    char error [256];
    dsh_reply_t *welcome = dsh_client_request (client, DSH_HELLO, NULL, 5000, error, sizeof (error));
    assert_non_null (welcome);
    s_copy_str (dsh_reply_body (welcome), "announce", fixture.announce, sizeof (fixture.announce));
    s_copy_str (dsh_reply_body (welcome), "work", fixture.work, sizeof (fixture.work));
    s_copy_str (dsh_reply_body (welcome), "events", fixture.events, sizeof (fixture.events));
    dsh_reply_destroy (&welcome);
    dsh_client_destroy (&client);
    return 0;
}

static int
s_teardown (void **state)
{
    (void) state;
    dsh_testproc_destroy (&fixture.demo);
    dsh_testproc_destroy (&fixture.broker);
    return 0;
}

//  The broker still answers PING and a real call, and is still running.
static void
s_assert_still_serving (void)
{
    dsh_client_t *client = dsh_client_new (fixture.endpoint);
    char error [256];
    dsh_reply_t *reply = dsh_client_request (client, DSH_PING, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_PONG);
    dsh_reply_destroy (&reply);
    reply = dsh_client_call (client, "echo", "{\"message\":\"still here\"}", NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_text (reply), "still here");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    assert_int_equal (dsh_testproc_wait (fixture.broker, 0), -1);
}

//  Sends frames (each a byte string with its size) from a new DEALER.
static zsock_t *
s_dealer (const char *endpoint, const char *identity)
{
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    if (identity)
        zsock_set_identity (dealer, identity);
    zsock_connect (dealer, "%s", endpoint);
    return dealer;
}

typedef struct {
    const void *data;
    size_t size;
} frame_t;

static void
s_send_frames (zsock_t *sock, const frame_t *frames, size_t count)
{
    zmsg_t *msg = zmsg_new ();
    for (size_t index = 0; index < count; index++)
        zmsg_addmem (msg, frames [index].data, frames [index].size);
    zmsg_send (&msg, sock);
}

//  The ERROR code and message the front sent back, or fails the test.
static void
s_expect_error (zsock_t *dealer, const char *message_part)
{
    zpoller_t *poller = zpoller_new (dealer, NULL);
    assert_ptr_equal (zpoller_wait (poller, 5000), dealer);
    zpoller_destroy (&poller);
    zmsg_t *reply = zmsg_recv (dealer);
    zmsg_t *envelope = NULL;
    char command [32], error [256];
    assert_int_equal (dsh_proto_split (reply, &envelope, command, sizeof (command), error, sizeof (error)), 0);
    zframe_t *body = zmsg_pop (reply);
    dsh_doc_t *doc = dsh_proto_decode_body (body, error, sizeof (error));
    assert_non_null (doc);
    const msgpack_object *root = dsh_doc_root (doc);
    char text [512];
    if (streq (command, DSH_ERROR)) {
        assert_true (dsh_str_eq (dsh_map_get (root, "code"), DSH_E_BAD_REQUEST));
        s_copy_str (root, "message", text, sizeof (text));
    }
    else {
        //  A CALL whose callId was readable is answered as a RESULT
        assert_string_equal (command, DSH_RESULT);
        assert_true (dsh_str_eq (dsh_map_get (dsh_map_get (root, "error"), "code"), DSH_E_BAD_REQUEST));
        const msgpack_object *content = dsh_map_get (root, "content");
        s_copy_str (&content->via.array.ptr [0], "text", text, sizeof (text));
    }
    if (!strstr (text, message_part))
        fail_msg ("error \"%s\" does not mention \"%s\"", text, message_part);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    zmsg_destroy (&envelope);
    zmsg_destroy (&reply);
}

//  msgpack of JSON text, for bodies.
static zchunk_t *
s_pack (const char *json)
{
    msgpack_sbuffer sbuf;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (json, &sbuf, error, sizeof (error)), 0);
    zchunk_t *chunk = zchunk_new (sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    return chunk;
}

//  40 nested one-element arrays, then 1.
static zchunk_t *
s_deep (int depth)
{
    zchunk_t *chunk = zchunk_new (NULL, (size_t) depth + 1);
    for (int index = 0; index < depth; index++)
        zchunk_extend (chunk, "\x91", 1);
    zchunk_extend (chunk, "\x01", 1);
    return chunk;
}

static void
test_front_battery (void **state)
{
    (void) state;
    zsock_t *dealer = s_dealer (fixture.endpoint, NULL);
    const char huge_array [] = "\xdd\xff\xff\xff\xff";
    const char truncated [] = "\x83\xa6" "callId";
    zchunk_t *deep = s_deep (40);
    zchunk_t *array_body = s_pack ("[1,2,3]");
    zchunk_t *bad_call_id = s_pack ("{\"callId\": 7, \"name\": \"echo\"}");
    zchunk_t *bad_name = s_pack ("{\"callId\": \"c1\", \"name\": [\"echo\"]}");
    zchunk_t *bad_meta = s_pack ("{\"callId\": \"c2\", \"name\": \"echo\", \"meta\": 5}");
    zchunk_t *empty = s_pack ("{}");

    s_send_frames (dealer, (frame_t []) {{ "garbage", 7 }}, 1);
    s_expect_error (dealer, "no empty delimiter frame");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "HTTP", 4 }, { "CALL", 4 }, { "x", 1 }}, 4);
    s_expect_error (dealer, "protocol frame");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }}, 2);
    s_expect_error (dealer, "command frame");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "call", 4 }, { "\x80", 1 }}, 4);
    s_expect_error (dealer, "upper-case");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 }}, 3);
    s_expect_error (dealer, "one body frame, not 0");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "LIST", 4 }, { "\x80", 1 }, { "\x80", 1 }}, 5);
    s_expect_error (dealer, "one body frame, not 2");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "FROB", 4 }, { "\x80", 1 }}, 4);
    s_expect_error (dealer, "unknown command \"FROB\"");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 },
                                         { truncated, sizeof (truncated) - 1 }}, 4);
    s_expect_error (dealer, "truncated");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 },
                                         { huge_array, sizeof (huge_array) - 1 }}, 4);
    s_expect_error (dealer, "4294967295");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 },
                                         { zchunk_data (deep), zchunk_size (deep) }}, 4);
    s_expect_error (dealer, "nesting deeper than");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "LIST", 4 },
                                         { zchunk_data (array_body), zchunk_size (array_body) }}, 4);
    s_expect_error (dealer, "not a map");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 },
                                         { zchunk_data (bad_call_id), zchunk_size (bad_call_id) }}, 4);
    s_expect_error (dealer, "\"callId\" must be a string");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 },
                                         { zchunk_data (bad_name), zchunk_size (bad_name) }}, 4);
    s_expect_error (dealer, "\"name\" must be a string");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "CALL", 4 },
                                         { zchunk_data (bad_meta), zchunk_size (bad_meta) }}, 4);
    s_expect_error (dealer, "\"meta\" must be a map");
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "GET", 3 },
                                         { zchunk_data (empty), zchunk_size (empty) }}, 4);
    s_expect_error (dealer, "valid tool name");

    //  A frame over the limit: libzmq drops the connection, no reply, and
    //  the broker goes on serving everyone else
    zchunk_t *oversized = zchunk_new (NULL, 100000);
    memset (zchunk_data (oversized), 0x41, 100000);
    zchunk_set (oversized, zchunk_data (oversized), 100000);
    s_send_frames (dealer, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "LIST", 4 },
                                         { zchunk_data (oversized), 100000 }}, 4);
    zpoller_t *poller = zpoller_new (dealer, NULL);
    assert_null (zpoller_wait (poller, 1000));
    zpoller_destroy (&poller);

    zchunk_destroy (&oversized);
    zchunk_destroy (&deep);
    zchunk_destroy (&array_body);
    zchunk_destroy (&bad_call_id);
    zchunk_destroy (&bad_name);
    zchunk_destroy (&bad_meta);
    zchunk_destroy (&empty);
    zsock_destroy (&dealer);
    s_assert_still_serving ();
}

static void
test_announce_battery (void **state)
{
    (void) state;
    zsock_t *pub = dsh_testkit_announce_pub (fixture.announce, 5000);
    assert_non_null (pub);
    const char huge_array [] = "\xdd\xff\xff\xff\xff";
    zchunk_t *deep = s_deep (40);
    zchunk_t *bad_types = s_pack ("{\"component\": 12, \"generation\": \"one\"}");
    zchunk_t *no_tools = s_pack ("{\"component\": \"rogue\", \"generation\": 1, \"tools\": 5}");
    zchunk_t *mixed = s_pack (
        "{\"component\": \"rogue\", \"generation\": 1, \"tools\": ["
        " {\"name\": \"bad_params\", \"parameters\": {\"type\": \"array\"}},"
        " {\"name\": \"bad name!\", \"parameters\": {\"type\": \"object\"}},"
        " {\"name\": \"rogue_ok\", \"parameters\": {\"type\": \"object\"}}]}");

    s_send_frames (pub, (frame_t []) {{ "garbage", 7 }}, 1);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 }}, 2);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 }, { "\x81", 1 }, { "x", 1 }}, 4);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "EXPLODE", 7 }, { "\x80", 1 }}, 3);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 }, { "\x82\xa1", 2 }}, 3);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "HEARTBEAT", 9 },
                                      { huge_array, sizeof (huge_array) - 1 }}, 3);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 },
                                      { zchunk_data (deep), zchunk_size (deep) }}, 3);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 },
                                      { zchunk_data (bad_types), zchunk_size (bad_types) }}, 3);
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 },
                                      { zchunk_data (no_tools), zchunk_size (no_tools) }}, 3);
    //  One good tool among bad ones: the good one registers, the rest are refused
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 },
                                      { zchunk_data (mixed), zchunk_size (mixed) }}, 3);
    assert_int_equal (dsh_testkit_wait_tools (fixture.endpoint, "rogue_ok", 1, 5000), 0);
    assert_int_equal (dsh_testkit_wait_tools (fixture.endpoint, "bad", 0, 1000), 0);

    zchunk_destroy (&deep);
    zchunk_destroy (&bad_types);
    zchunk_destroy (&no_tools);
    zchunk_destroy (&mixed);
    zsock_destroy (&pub);
    s_assert_still_serving ();
    //  The rogue never heartbeats: it expires like any silent component
    assert_int_equal (dsh_testkit_wait_tools (fixture.endpoint, "rogue_ok", 0, 5000), 0);
}

static void
test_work_battery (void **state)
{
    (void) state;
    //  A fake component: announces by hand, then answers a call with garbage
    zsock_t *work = s_dealer (fixture.work, "faker");
    zsock_t *pub = dsh_testkit_announce_pub (fixture.announce, 5000);
    assert_non_null (pub);
    zchunk_t *announce = s_pack (
        "{\"component\": \"faker\", \"generation\": 1, \"tools\": ["
        " {\"name\": \"fake_tool\", \"parameters\": {\"type\": \"object\"}}]}");
    s_send_frames (pub, (frame_t []) {{ "DSH1", 4 }, { "ANNOUNCE", 8 },
                                      { zchunk_data (announce), zchunk_size (announce) }}, 3);
    assert_int_equal (dsh_testkit_wait_tools (fixture.endpoint, "fake_tool", 1, 5000), 0);

    //  Garbage on the work socket first: logged and dropped
    s_send_frames (work, (frame_t []) {{ "garbage", 7 }}, 1);
    s_send_frames (work, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "RESULT", 6 }, { "short", 5 }}, 4);
    s_send_frames (work, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "RESULT", 6 },
                                       { "\0\0\0\0\0\0\0\1", 8 }, { "\x80", 1 }}, 5);
    s_send_frames (work, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "DANCE", 5 }, { "\x80", 1 }}, 4);

    dsh_client_t *client = dsh_client_new (fixture.endpoint);
    const char *sent = dsh_client_call_send (client, "to-faker", "fake_tool", NULL, 0, NULL, NULL, 0, 10000);
    assert_non_null (sent);
    zpoller_t *poller = zpoller_new (work, NULL);
    zmsg_t *call = NULL;
    //  Skip the SYNC the HELLO-less fake may get; wait for the CALL
    while (!call && zpoller_wait (poller, 5000) == work) {
        zmsg_t *msg = zmsg_recv (work);
        zframe_t *verb = zmsg_first (msg);
        verb = zmsg_next (msg);
        verb = zmsg_next (msg);
        if (verb && zframe_streq (verb, DSH_CALL))
            call = msg;
        else
            zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    assert_non_null (call);
    zframe_t *token = NULL;
    for (int index = 0; index < 4; index++) {
        zframe_t *frame = zmsg_pop (call);
        if (index == 3)
            token = frame;
        else
            zframe_destroy (&frame);
    }
    zmsg_destroy (&call);
    //  A result whose content is not an array: the caller gets BAD_RESULT
    zchunk_t *bad_result = s_pack ("{\"callId\": \"to-faker\", \"content\": \"oops\", \"isError\": false}");
    s_send_frames (work, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "RESULT", 6 },
                                       { zframe_data (token), 8 },
                                       { zchunk_data (bad_result), zchunk_size (bad_result) }}, 5);
    dsh_reply_t *reply = dsh_client_recv (client, 5000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "to-faker");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_BAD_RESULT);
    dsh_reply_destroy (&reply);
    //  A second result for the same token is late: dropped, never delivered
    s_send_frames (work, (frame_t []) {{ "", 0 }, { "DSH1", 4 }, { "RESULT", 6 },
                                       { zframe_data (token), 8 },
                                       { zchunk_data (bad_result), zchunk_size (bad_result) }}, 5);
    assert_null (dsh_client_recv (client, 500));

    zframe_destroy (&token);
    zchunk_destroy (&bad_result);
    zchunk_destroy (&announce);
    dsh_client_destroy (&client);
    zsock_destroy (&work);
    zsock_destroy (&pub);
    s_assert_still_serving ();
}

//  Reads fd until its peer closes it: true, or false after timeout_ms.
static bool
s_wait_dropped (int fd, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (zclock_mono () < give_up) {
        struct pollfd ready = { .fd = fd, .events = POLLIN };
        if (poll (&ready, 1, (int) (give_up - zclock_mono ())) <= 0)
            continue;
        char buffer [256];
        ssize_t size = read (fd, buffer, sizeof (buffer));
        if (size <= 0)
            return true;
    }
    return false;
}

//  Raw bytes that are not ZMTP at all, to every port.
static void
test_raw_bytes_every_socket (void **state)
{
    (void) state;
    const char *endpoints [] = { fixture.endpoint, fixture.announce, fixture.work, fixture.events };
    for (size_t index = 0; index < 4; index++) {
        const char *colon = strrchr (endpoints [index], ':');
        int port = atoi (colon + 1);
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
        inet_pton (AF_INET, "127.0.0.1", &address.sin_addr);
        assert_int_equal (connect (fd, (struct sockaddr *) &address, sizeof (address)), 0);
        const char junk [] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff";
        assert_true (write (fd, junk, sizeof (junk)) > 0);
        //  Our end of the stream, then the broker's: once it closes, it has
        //  read the junk and the end after it (its greeting may come first)
        assert_int_equal (shutdown (fd, SHUT_WR), 0);
        assert_true (s_wait_dropped (fd, 5000));
        close (fd);
    }
    s_assert_still_serving ();
}

//  Stops a process with SIGINT and expects a clean exit. Under
//  AddressSanitizer with detect_leaks=1, LeakSanitizer runs at that exit
//  and a leak makes the status non-zero (23, or 134 with abort_on_error).
static void
s_assert_stops_cleanly (dsh_testproc_t *proc)
{
    dsh_testproc_signal (proc, SIGINT);
    assert_int_equal (dsh_testproc_wait (proc, 20000), 0);
}

//  Calls that go down a chain and find no tool, or a tool that is gone:
//  the chain hands each decided call to dispatch, which must free its body
//  on every branch (it once kept the body of a call to an unknown tool,
//  the leak the network fuzzer found: zframe_new, 5 MB in 180 s).
static void
test_chain_dispatch_refusals_leak_nothing (void **state)
{
    (void) state;
    const char *config = "chain\n"
                         "    stage\n"
                         "        name = \"marks\"\n"
                         "        kind = \"trace\"\n";
    char endpoint [256];
    //  A long heartbeat: the ghost below must not expire before its call
    dsh_testproc_t *broker = dsh_testkit_broker_config (5000, config, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    for (int round = 0; round < 20; round++) {
        char name [32];
        snprintf (name, sizeof (name), "nobody_%d", round);
        dsh_reply_t *reply = dsh_client_call (client, name, "{\"message\":\"hi\"}", NULL, 5000,
                                              error, sizeof (error));
        assert_non_null (reply);
        assert_string_equal (dsh_reply_error_code (reply), DSH_E_UNKNOWN_TOOL);
        dsh_reply_destroy (&reply);
    }
    //  A tool whose only provider has no WORK connection (it never had
    //  one): the call waits for one, and its deadline answers it
    dsh_client_t *probe = dsh_client_new (endpoint);
    dsh_reply_t *welcome = dsh_client_request (probe, DSH_HELLO, NULL, 5000, error, sizeof (error));
    assert_non_null (welcome);
    char announce [256];
    s_copy_str (dsh_reply_body (welcome), "announce", announce, sizeof (announce));
    dsh_reply_destroy (&welcome);
    dsh_client_destroy (&probe);
    zsock_t *pub = dsh_testkit_announce_pub (announce, 5000);
    assert_non_null (pub);
    zchunk_t *body = s_pack ("{\"component\": \"ghost\", \"generation\": 1, \"tools\": [{\"name\": \"haunt\","
                             " \"parameters\": {\"type\": \"object\"}}]}");
    for (int tries = 0; tries < 50 && dsh_testkit_wait_tools (endpoint, "haunt", 1, 100); tries++)
        zsock_send (pub, "ssb", DSH_PROTOCOL, DSH_ANNOUNCE, zchunk_data (body), zchunk_size (body));
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "haunt", 1, 1000), 0);
    dsh_reply_t *reply = dsh_client_call (client, "haunt", "{}", NULL, 1000, error, sizeof (error));
    if (!reply)
        fail_msg ("no reply: %s", error);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TIMEOUT);
    assert_string_equal (dsh_reply_text (reply), "Error: the call to tool \"haunt\" reached its deadline "
                                                 "waiting for component \"ghost\" to connect again");
    dsh_reply_destroy (&reply);
    zchunk_destroy (&body);
    zsock_destroy (&pub);
    dsh_client_destroy (&client);
    s_assert_stops_cleanly (broker);
    dsh_testproc_destroy (&broker);
}

//  Last: everything the battery sent was freed (see the file's header).
static void
test_stops_cleanly (void **state)
{
    (void) state;
    s_assert_stops_cleanly (fixture.demo);
    s_assert_stops_cleanly (fixture.broker);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_front_battery),
        cmocka_unit_test (test_announce_battery),
        cmocka_unit_test (test_work_battery),
        cmocka_unit_test (test_raw_bytes_every_socket),
        cmocka_unit_test (test_chain_dispatch_refusals_leak_nothing),
        cmocka_unit_test (test_stops_cleanly),
    };
    return cmocka_run_group_tests (tests, s_setup, s_teardown);
}
