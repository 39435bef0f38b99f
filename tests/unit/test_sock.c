/*  =========================================================================
    test_sock - dsh_sock: wildcard endpoint resolution, non-blocking sends
    that always consume the message, socket limits, an inproc DEALER/
    ROUTER round trip in dsh/1 frames, messages as libzmq parts (received
    and split in place, sent by moving), and the drain helper
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_proto.h"
#include "dsh_sock.h"

static void
s_resolves (const char *advertised, const char *front, const char *expected)
{
    char *resolved = dsh_sock_resolve (advertised, front);
    assert_non_null (resolved);
    if (!streq (resolved, expected))
        fail_msg ("%s via %s gave %s, not %s", advertised, front? front: "(null)", resolved, expected);
    free (resolved);
}

static void
test_resolve (void **state)
{
    (void) state;
    //  Wildcard hosts take the front's host
    s_resolves ("tcp://*:7571", "tcp://10.0.0.5:7570", "tcp://10.0.0.5:7571");
    s_resolves ("tcp://0.0.0.0:7572", "tcp://10.0.0.5:7570", "tcp://10.0.0.5:7572");
    s_resolves ("tcp://:::7573", "tcp://10.0.0.5:7570", "tcp://10.0.0.5:7573");
    s_resolves ("tcp://[::]:7573", "tcp://10.0.0.5:7570", "tcp://10.0.0.5:7573");
    s_resolves ("tcp://*:7571", "tcp://broker.example.com:7570", "tcp://broker.example.com:7571");
    s_resolves ("tcp://*:7571", "tcp://[::1]:7570", "tcp://[::1]:7571");
    s_resolves ("tcp://*:7571", "tcp://127.0.0.1:*", "tcp://127.0.0.1:7571");

    //  Real hosts stay
    s_resolves ("tcp://192.168.1.2:7571", "tcp://10.0.0.5:7570", "tcp://192.168.1.2:7571");
    s_resolves ("tcp://localhost:7571", "tcp://10.0.0.5:7570", "tcp://localhost:7571");
    s_resolves ("tcp://**:7571", "tcp://10.0.0.5:7570", "tcp://**:7571");
    s_resolves ("tcp://0.0.0.01:7571", "tcp://10.0.0.5:7570", "tcp://0.0.0.01:7571");

    //  Nothing to resolve against, or not tcp
    s_resolves ("tcp://*:7571", NULL, "tcp://*:7571");
    s_resolves ("tcp://*:7571", "ipc:///tmp/dsh", "tcp://*:7571");
    s_resolves ("ipc:///tmp/dsh-work", "tcp://10.0.0.5:7570", "ipc:///tmp/dsh-work");
    s_resolves ("inproc://work", "inproc://front", "inproc://work");
    s_resolves ("tcp://nocolon", "tcp://10.0.0.5:7570", "tcp://nocolon");
}

//  A message [frames...] from C strings.
static zmsg_t *
s_msg (const char *const *frames, size_t count)
{
    zmsg_t *msg = zmsg_new ();
    for (size_t index = 0; index < count; index++)
        zmsg_addstr (msg, frames [index]);
    return msg;
}

static void
test_send_unroutable (void **state)
{
    (void) state;
    zsock_t *router = zsock_new_router ("inproc://test-sock-unroutable");
    assert_non_null (router);
    zsock_set_router_mandatory (router, 1);
    zmsg_t *msg = s_msg ((const char *[]) { "nobody", "", "DSH1", "PING", "body" }, 5);
    errno = 0;
    assert_int_equal (dsh_sock_send (router, &msg), -1);
    assert_int_equal (errno, EHOSTUNREACH);
    assert_null (msg);
    zsock_destroy (&router);
}

static void
test_send_no_peer (void **state)
{
    (void) state;
    //  A DEALER with no peer has no room: the send fails at once, never blocks
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    assert_non_null (dealer);
    zmsg_t *msg = s_msg ((const char *[]) { "", "DSH1", "HELLO", "body" }, 4);
    errno = 0;
    int64_t started = zclock_mono ();
    assert_int_equal (dsh_sock_send (dealer, &msg), -1);
    assert_int_equal (errno, EAGAIN);
    assert_true (zclock_mono () - started < 2000);
    assert_null (msg);

    //  Nothing to send
    assert_int_equal (dsh_sock_send (dealer, &msg), -1);
    zsock_destroy (&dealer);
}

static void
test_limit (void **state)
{
    (void) state;
    zsock_t *sock = zsock_new (ZMQ_ROUTER);
    dsh_sock_limit (sock, 4096, 77);
    assert_int_equal (zsock_maxmsgsize (sock), 4096);
    assert_int_equal (zsock_sndhwm (sock), 77);
    assert_int_equal (zsock_rcvhwm (sock), 77);
    zsock_destroy (&sock);
}

//  Receives a message within 5 s, or fails.
static zmsg_t *
s_recv (zsock_t *sock)
{
    zpoller_t *poller = zpoller_new (sock, NULL);
    void *which = zpoller_wait (poller, 5000);
    zpoller_destroy (&poller);
    if (which != sock)
        fail_msg ("nothing received");
    zmsg_t *msg = zmsg_recv (sock);
    assert_non_null (msg);
    return msg;
}

static void
test_round_trip (void **state)
{
    (void) state;
    zsock_t *router = zsock_new_router ("inproc://test-sock-round-trip");
    assert_non_null (router);
    zsock_set_router_mandatory (router, 1);
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    zsock_set_identity (dealer, "comp-1");
    assert_int_equal (zsock_connect (dealer, "inproc://test-sock-round-trip"), 0);

    //  DEALER -> ROUTER: the router sees the dealer's routing id first
    zframe_t *body = zframe_new ("\x81\xa1k\xa1v", 5);
    zmsg_t *msg = dsh_proto_message (NULL, DSH_HELLO);
    zmsg_append (msg, &body);
    assert_int_equal (dsh_sock_send (dealer, &msg), 0);
    assert_null (msg);

    msg = s_recv (router);
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256] = "";
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), 0);
    assert_string_equal (command, "HELLO");
    assert_int_equal (zmsg_size (envelope), 1);
    assert_true (zframe_streq (zmsg_first (envelope), "comp-1"));
    assert_int_equal (zmsg_size (msg), 1);
    assert_memory_equal (zframe_data (zmsg_first (msg)), "\x81\xa1k\xa1v", 5);
    zmsg_destroy (&msg);

    //  ROUTER -> DEALER along the envelope
    zmsg_t *reply = dsh_proto_message (&envelope, DSH_WELCOME);
    assert_null (envelope);
    body = zframe_new ("\x80", 1);
    zmsg_append (reply, &body);
    assert_int_equal (dsh_sock_send (router, &reply), 0);
    assert_null (reply);

    msg = s_recv (dealer);
    assert_int_equal (zmsg_size (msg), 4);
    assert_int_equal (zframe_size (zmsg_first (msg)), 0);
    assert_true (zframe_streq (zmsg_next (msg), "DSH1"));
    assert_true (zframe_streq (zmsg_next (msg), "WELCOME"));
    zframe_t *frame = zmsg_next (msg);
    assert_int_equal (zframe_size (frame), 1);
    assert_int_equal (zframe_data (frame) [0], 0x80);
    //  The DEALER's own split sees no envelope
    assert_int_equal (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error), 0);
    assert_string_equal (command, "WELCOME");
    assert_int_equal (zmsg_size (envelope), 0);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);

    zsock_destroy (&dealer);
    zsock_destroy (&router);
}

//  A connected inproc DEALER pair for the parts tests.
static void
s_pair (const char *endpoint, zsock_t **sender, zsock_t **receiver)
{
    *receiver = zsock_new (ZMQ_DEALER);
    assert_int_equal (zsock_bind (*receiver, "%s", endpoint), 0);
    *sender = zsock_new (ZMQ_DEALER);
    assert_int_equal (zsock_connect (*sender, "%s", endpoint), 0);
}

//  Waits up to 5 s for sock to have a message.
static void
s_wait_readable (zsock_t *sock)
{
    zpoller_t *poller = zpoller_new (sock, NULL);
    void *which = zpoller_wait (poller, 5000);
    zpoller_destroy (&poller);
    if (which != sock)
        fail_msg ("nothing received");
}

static void
test_recv_msg (void **state)
{
    (void) state;
    zsock_t *sender, *receiver;
    s_pair ("inproc://test-sock-recv-msg", &sender, &receiver);
    dsh_sock_msg_t msg;
    char error [256];

    //  Nothing waiting: -1, no reason, nothing held
    assert_int_equal (dsh_sock_recv_msg (receiver, &msg, error, sizeof error), -1);
    assert_int_equal (errno, EAGAIN);
    assert_string_equal (error, "");
    assert_int_equal (msg.count, 0);
    dsh_sock_msg_close (&msg);

    //  A well-formed message, with an envelope, split in place
    zmsg_t *sent = s_msg ((const char *[]) { "hop-1", "hop-2", "", "DSH1", "RESULT", "token", "body" }, 7);
    assert_int_equal (dsh_sock_send (sender, &sent), 0);
    s_wait_readable (receiver);
    assert_int_equal (dsh_sock_recv_msg (receiver, &msg, error, sizeof error), 0);
    assert_int_equal (msg.count, 7);
    assert_int_equal (msg.envelope, 2);
    assert_int_equal (msg.body, 5);
    assert_string_equal (msg.command, "RESULT");
    assert_int_equal (zmq_msg_size (&msg.part [0]), 5);
    assert_memory_equal (zmq_msg_data (&msg.part [0]), "hop-1", 5);
    assert_int_equal (zmq_msg_size (&msg.part [6]), 4);
    assert_memory_equal (zmq_msg_data (&msg.part [6]), "body", 4);
    dsh_sock_msg_close (&msg);
    assert_int_equal (msg.count, 0);
    dsh_sock_msg_close (&msg);

    //  Malformed ones give the reasons dsh_proto_split gives
    struct {
        const char *frames [6];
        size_t count;
        const char *reason;
        size_t body;                //  0: no delimiter, nothing to route along
    } cases [] = {
        { { "DSH1", "PING" }, 2, "no empty delimiter frame", 0 },
        { { "", "DSH2", "PING" }, 3, "protocol frame is not \"DSH1\"", 1 },
        { { "" }, 1, "protocol frame is not \"DSH1\"", 1 },
        { { "", "DSH1" }, 2, "missing or oversized command frame", 2 },
        { { "", "DSH1", "" }, 3, "missing or oversized command frame", 2 },
        { { "", "DSH1", "SEVENTEENLETTERSX" }, 3, "missing or oversized command frame", 2 },
        { { "", "DSH1", "ping", "body" }, 4, "command frame is not an upper-case word", 3 },
    };
    for (size_t index = 0; index < sizeof cases / sizeof cases [0]; index++) {
        sent = s_msg (cases [index].frames, cases [index].count);
        assert_int_equal (dsh_sock_send (sender, &sent), 0);
        s_wait_readable (receiver);
        assert_int_equal (dsh_sock_recv_msg (receiver, &msg, error, sizeof error), -1);
        assert_string_equal (error, cases [index].reason);
        assert_int_equal (msg.count, cases [index].count);
        assert_int_equal (msg.body, cases [index].body);
        dsh_sock_msg_close (&msg);
    }

    //  Too many parts: read whole and dropped, and the next message is intact
    zmsg_t *long_msg = zmsg_new ();
    for (int index = 0; index < DSH_SOCK_PARTS_MAX + 3; index++)
        zmsg_addstr (long_msg, "x");
    assert_int_equal (dsh_sock_send (sender, &long_msg), 0);
    sent = s_msg ((const char *[]) { "", "DSH1", "PONG", "{}" }, 4);
    assert_int_equal (dsh_sock_send (sender, &sent), 0);
    s_wait_readable (receiver);
    assert_int_equal (dsh_sock_recv_msg (receiver, &msg, error, sizeof error), -1);
    assert_string_equal (error, "more than 16 frames");
    assert_int_equal (msg.count, 0);
    dsh_sock_msg_close (&msg);
    assert_int_equal (dsh_sock_recv_msg (receiver, &msg, error, sizeof error), 0);
    assert_string_equal (msg.command, "PONG");
    assert_int_equal (msg.body, 3);
    dsh_sock_msg_close (&msg);

    zsock_destroy (&sender);
    zsock_destroy (&receiver);
}

static void
test_send_parts (void **state)
{
    (void) state;
    zsock_t *sender, *receiver;
    s_pair ("inproc://test-sock-send-parts", &sender, &receiver);

    //  A head, a copied part, and a frame's bytes moved in uncopied
    zmq_msg_t parts [5];
    dsh_sock_head (parts, DSH_RESULT);
    dsh_sock_part_mem (&parts [3], "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    char large [4096];
    memset (large, 'z', sizeof large);
    zframe_t *frame = zframe_new (large, sizeof large);
    dsh_sock_part_frame (&parts [4], &frame);
    assert_null (frame);
    assert_int_equal (dsh_sock_send_parts (sender, parts, 5), 0);

    s_wait_readable (receiver);
    dsh_sock_msg_t msg;
    char error [256];
    assert_int_equal (dsh_sock_recv_msg (receiver, &msg, error, sizeof error), 0);
    assert_int_equal (msg.count, 5);
    assert_int_equal (msg.envelope, 0);
    assert_string_equal (msg.command, "RESULT");
    assert_int_equal (zmq_msg_size (&msg.part [3]), 8);
    assert_memory_equal (zmq_msg_data (&msg.part [3]), "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    assert_int_equal (zmq_msg_size (&msg.part [4]), sizeof large);
    assert_memory_equal (zmq_msg_data (&msg.part [4]), large, sizeof large);
    dsh_sock_msg_close (&msg);

    //  No peer: refused at once, every part released (valgrind sees a leak
    //  otherwise)
    zsock_t *lonely = zsock_new (ZMQ_DEALER);
    dsh_sock_head (parts, DSH_CALL);
    frame = zframe_new (large, sizeof large);
    dsh_sock_part_frame (&parts [3], &frame);
    errno = 0;
    assert_int_equal (dsh_sock_send_parts (lonely, parts, 4), -1);
    assert_int_equal (errno, EAGAIN);
    zsock_destroy (&lonely);

    zsock_destroy (&sender);
    zsock_destroy (&receiver);
}

typedef struct {
    int handled;
    int stop_at;                    //  return -1 on this call (0: never)
} s_drain_state_t;

static int
s_drain_one (zsock_t *reader, void *arg)
{
    s_drain_state_t *drain = (s_drain_state_t *) arg;
    char *text = zstr_recv (reader);
    assert_non_null (text);
    zstr_free (&text);
    drain->handled++;
    return drain->handled == drain->stop_at? -1: 0;
}

static void
test_drain (void **state)
{
    (void) state;
    zsock_t *sender, *receiver;
    s_pair ("inproc://test-sock-drain", &sender, &receiver);
    for (int index = 0; index < 10; index++)
        zstr_send (sender, "hello");
    s_wait_readable (receiver);

    //  At most a batch per call, then only what is left, then nothing
    s_drain_state_t drain = { 0, 0 };
    assert_int_equal (dsh_sock_drain (receiver, 4, s_drain_one, &drain), 0);
    assert_int_equal (drain.handled, 4);
    assert_int_equal (dsh_sock_drain (receiver, 64, s_drain_one, &drain), 0);
    assert_int_equal (drain.handled, 10);
    assert_int_equal (dsh_sock_drain (receiver, 64, s_drain_one, &drain), 0);
    assert_int_equal (drain.handled, 10);

    //  A handler's -1 stops the drain and is passed on
    for (int index = 0; index < 5; index++)
        zstr_send (sender, "hello");
    s_wait_readable (receiver);
    drain = (s_drain_state_t) { 0, 2 };
    assert_int_equal (dsh_sock_drain (receiver, 64, s_drain_one, &drain), -1);
    assert_int_equal (drain.handled, 2);
    drain.stop_at = 0;
    assert_int_equal (dsh_sock_drain (receiver, 64, s_drain_one, &drain), 0);
    assert_int_equal (drain.handled, 5);

    zsock_destroy (&sender);
    zsock_destroy (&receiver);
}

//  A broker list: one endpoint, a comma list with spaces, beacons, and
//  every way an entry can be wrong
static void
test_brokers (void **state)
{
    (void) state;
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers ("tcp://10.0.0.1:7570", error, sizeof (error));
    assert_non_null (brokers);
    assert_int_equal (zlistx_size (brokers), 1);
    assert_string_equal (zlistx_first (brokers), "tcp://10.0.0.1:7570");
    zlistx_destroy (&brokers);

    brokers = dsh_sock_brokers (" tcp://a:1 , tcp://b:2,beacon,beacon:7000, ipc:///tmp/x", error, sizeof (error));
    assert_non_null (brokers);
    assert_int_equal (zlistx_size (brokers), 5);
    assert_string_equal (zlistx_first (brokers), "tcp://a:1");
    assert_string_equal (zlistx_next (brokers), "tcp://b:2");
    assert_string_equal (zlistx_next (brokers), "beacon");
    assert_string_equal (zlistx_next (brokers), "beacon:7000");
    assert_string_equal (zlistx_next (brokers), "ipc:///tmp/x");
    zlistx_destroy (&brokers);

    setenv ("DSH_BROKER", "tcp://env:9,tcp://env2:9", 1);
    brokers = dsh_sock_brokers (NULL, error, sizeof (error));
    assert_non_null (brokers);
    assert_int_equal (zlistx_size (brokers), 2);
    assert_string_equal (zlistx_first (brokers), "tcp://env:9");
    zlistx_destroy (&brokers);
    unsetenv ("DSH_BROKER");
    brokers = dsh_sock_brokers ("", error, sizeof (error));
    assert_non_null (brokers);
    assert_string_equal (zlistx_first (brokers), DSH_DEFAULT_ENDPOINT);
    zlistx_destroy (&brokers);

    const char *bad [] = {
        "tcp://a:1,", ",tcp://a:1", "tcp://a:1,,tcp://b:2", "tcp://a", "tcp://a:0", "tcp://a:70000",
        "tcp://:5", "udp://a:1", "beacon:", "beacon:x", "beacon:0", "ipc://", "a:1", "tcp://a:1x"
    };
    for (size_t index = 0; index < sizeof (bad) / sizeof (bad [0]); index++) {
        error [0] = 0;
        brokers = dsh_sock_brokers (bad [index], error, sizeof (error));
        if (brokers)
            fail_msg ("\"%s\" was accepted", bad [index]);
        assert_non_null (strstr (error, "is not tcp://HOST:PORT"));
    }
    char *many = strdup ("tcp://a:1");
    for (int index = 0; index < DSH_BROKERS_MAX; index++) {
        char *longer = zsys_sprintf ("%s,tcp://a:%d", many, index + 2);
        free (many);
        many = longer;
    }
    assert_null (dsh_sock_brokers (many, error, sizeof (error)));
    assert_non_null (strstr (error, "more than 16 brokers"));
    free (many);
}

//  Healing options reach the socket
static void
test_heal (void **state)
{
    (void) state;
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    dsh_sock_heal (sock, 500, 3);
    assert_int_equal (zsock_heartbeat_ivl (sock), 500);
    assert_int_equal (zsock_heartbeat_timeout (sock), 1500);
    assert_int_equal (zsock_connect_timeout (sock), 500);
    assert_int_equal (zsock_reconnect_ivl (sock), 100);
    assert_int_equal (zsock_reconnect_ivl_max (sock), 500);
    assert_int_equal (zsock_tcp_keepalive (sock), 1);
    zsock_destroy (&sock);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_resolve),
        cmocka_unit_test (test_send_unroutable),
        cmocka_unit_test (test_send_no_peer),
        cmocka_unit_test (test_limit),
        cmocka_unit_test (test_round_trip),
        cmocka_unit_test (test_recv_msg),
        cmocka_unit_test (test_send_parts),
        cmocka_unit_test (test_drain),
        cmocka_unit_test (test_brokers),
        cmocka_unit_test (test_heal),
    };
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    zsys_shutdown ();
    return rc;
}
