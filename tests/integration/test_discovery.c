/*  =========================================================================
    test_discovery - dsh_beacon on real UDP sockets, fed by a hostile sender

    A listener binds the beacon port on every address, so datagrams sent to
    127.0.0.1 reach it: a sender thread plays brokers and attackers on
    loopback (broadcast between hosts is tests/integration/beacon_netns.sh).
    Foreign, malformed and flooding datagrams are ignored and counted, never
    a crash; the brokers heard are distinct; beacon entries of a broker list
    expand to the brokers whose security matches, or fail with a reason.
    And dsh-broker refuses beacons it could not honour.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define LISTEN_MS       1500        //  the sender repeats every SEND_EVERY_MS meanwhile
#define SEND_EVERY_MS   50
#define DATAGRAMS_MAX   80

//  What the sender repeats, in order, every SEND_EVERY_MS.
typedef struct {
    int port;
    size_t count;
    size_t size [DATAGRAMS_MAX];
    byte data [DATAGRAMS_MAX][300];
} datagrams_t;

static void
s_add_raw (datagrams_t *self, const void *data, size_t size)
{
    assert_true (self->count < DATAGRAMS_MAX && size <= 300);
    memcpy (self->data [self->count], data, size);
    self->size [self->count++] = size;
}

static void
s_add_beacon (datagrams_t *self, int front_port, bool curve)
{
    dsh_beacon_t beacon = { front_port, curve, 1796000000000000ULL + (uint64_t) front_port };
    byte payload [DSH_BEACON_SIZE];
    s_add_raw (self, payload, dsh_beacon_encode (&beacon, payload));
}

//  Sends the datagrams to 127.0.0.1:port until told to stop. zbeacon binds
//  two sockets to the port (SO_REUSEPORT) and reads one: the kernel hands
//  a unicast datagram to one of them by a hash of its source, so each
//  round goes from a fresh source port (a broadcast reaches both)
static void
s_sender (zsock_t *pipe, void *args)
{
    datagrams_t *datagrams = (datagrams_t *) args;
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) datagrams->port) };
    to.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    zsock_signal (pipe, 0);
    zpoller_t *poller = zpoller_new (pipe, NULL);
    while (!zpoller_wait (poller, SEND_EVERY_MS) && !zpoller_terminated (poller)) {
        int udp = socket (AF_INET, SOCK_DGRAM, 0);
        assert (udp >= 0);
        for (size_t index = 0; index < datagrams->count; index++)
            sendto (udp, datagrams->data [index], datagrams->size [index], 0, (struct sockaddr *) &to, sizeof (to));
        close (udp);
    }
    zpoller_destroy (&poller);
}

//  A UDP port free on this host now.
static int
s_free_port (void)
{
    int udp = socket (AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in address = { .sin_family = AF_INET };
    socklen_t size = sizeof (address);
    assert_int_equal (bind (udp, (struct sockaddr *) &address, sizeof (address)), 0);
    assert_int_equal (getsockname (udp, (struct sockaddr *) &address, &size), 0);
    close (udp);
    return ntohs (address.sin_port);
}

typedef struct {
    zlistx_t *endpoints;
    size_t curve;
} heard_t;

static void
s_heard (const char *endpoint, const dsh_beacon_t *beacon, void *arg)
{
    heard_t *heard = (heard_t *) arg;
    zlistx_add_end (heard->endpoints, zsys_sprintf ("%s", endpoint));
    if (beacon->curve)
        heard->curve++;
}

static bool
s_list_has (zlistx_t *list, const char *text)
{
    for (const char *item = zlistx_first (list); item; item = zlistx_next (list))
        if (streq (item, text))
            return true;
    return false;
}

//  Two brokers among foreigners, wrecks and noise: the two are heard once
//  each, everything else is counted
static void
test_listen_hostile (void **state)
{
    (void) state;
    datagrams_t *datagrams = (datagrams_t *) zmalloc (sizeof (datagrams_t));
    datagrams->port = s_free_port ();
    //  The bad ones first in each round: a round whose good ones arrived
    //  has had its bad ones counted
    s_add_raw (datagrams, "hello", 5);
    s_add_raw (datagrams, "DSH1", 4);
    byte zeros [16] = { 'D', 'S', 'H', '1' };
    s_add_raw (datagrams, zeros, sizeof (zeros));
    byte noise [300];
    memset (noise, 'x', sizeof (noise));
    s_add_raw (datagrams, noise, sizeof (noise));
    byte other_version [DSH_BEACON_SIZE];
    dsh_beacon_encode (&(dsh_beacon_t) { 7570, false, 5 }, other_version);
    other_version [3] = '2';
    s_add_raw (datagrams, other_version, sizeof (other_version));
    s_add_beacon (datagrams, 7570, false);
    s_add_beacon (datagrams, 7580, true);
    zactor_t *sender = zactor_new (s_sender, datagrams);

    heard_t heard = { zlistx_new (), 0 };
    zlistx_set_destructor (heard.endpoints, (zlistx_destructor_fn *) zstr_free);
    char error [256] = "";
    int ignored = dsh_beacon_listen (datagrams->port, LISTEN_MS, s_heard, &heard, error, sizeof (error));
    zactor_destroy (&sender);
    if (ignored < 0)
        fail_msg ("listen: %s", error);
    assert_int_equal (zlistx_size (heard.endpoints), 2);
    assert_true (s_list_has (heard.endpoints, "tcp://127.0.0.1:7570"));
    assert_true (s_list_has (heard.endpoints, "tcp://127.0.0.1:7580"));
    assert_int_equal (heard.curve, 1);
    assert_true (ignored >= 5);
    zlistx_destroy (&heard.endpoints);

    //  find: the same, as endpoint strings
    sender = zactor_new (s_sender, datagrams);
    zlistx_t *found = dsh_beacon_find (datagrams->port, LISTEN_MS, error, sizeof (error));
    zactor_destroy (&sender);
    assert_non_null (found);
    assert_int_equal (zlistx_size (found), 2);
    assert_true (s_list_has (found, "tcp://127.0.0.1:7570"));
    zlistx_destroy (&found);
    free (datagrams);
}

//  A flood of made-up brokers is capped, the rest counted
static void
test_listen_flood (void **state)
{
    (void) state;
    datagrams_t *datagrams = (datagrams_t *) zmalloc (sizeof (datagrams_t));
    datagrams->port = s_free_port ();
    for (int index = 0; index < DSH_BEACON_HEARD_MAX + 10; index++)
        s_add_beacon (datagrams, 20000 + index, false);
    zactor_t *sender = zactor_new (s_sender, datagrams);
    heard_t heard = { zlistx_new (), 0 };
    zlistx_set_destructor (heard.endpoints, (zlistx_destructor_fn *) zstr_free);
    char error [256] = "";
    int ignored = dsh_beacon_listen (datagrams->port, LISTEN_MS, s_heard, &heard, error, sizeof (error));
    zactor_destroy (&sender);
    if (ignored < 0)
        fail_msg ("listen: %s", error);
    assert_int_equal (zlistx_size (heard.endpoints), DSH_BEACON_HEARD_MAX);
    assert_true (ignored >= 10);
    zlistx_destroy (&heard.endpoints);
    free (datagrams);
}

static zlistx_t *
s_brokers (const char *spec)
{
    char error [256] = "";
    zlistx_t *brokers = dsh_sock_brokers (spec, error, sizeof (error));
    if (!brokers)
        fail_msg ("%s: %s", spec, error);
    return brokers;
}

//  "beacon:PORT" becomes the plain brokers heard (this process has no
//  keys), in place, other entries kept; a CURVE broker is left out
static void
test_expand (void **state)
{
    (void) state;
    datagrams_t *datagrams = (datagrams_t *) zmalloc (sizeof (datagrams_t));
    datagrams->port = s_free_port ();
    s_add_beacon (datagrams, 7570, false);
    s_add_beacon (datagrams, 7571, true);
    s_add_beacon (datagrams, 7572, false);
    char *spec = zsys_sprintf ("tcp://10.9.9.9:7570,beacon:%d,tcp://127.0.0.1:7572", datagrams->port);
    zlistx_t *brokers = s_brokers (spec);
    zactor_t *sender = zactor_new (s_sender, datagrams);
    char error [256] = "";
    zlistx_t *expanded = dsh_beacon_expand (brokers, LISTEN_MS, error, sizeof (error));
    zactor_destroy (&sender);
    if (!expanded)
        fail_msg ("expand: %s", error);
    assert_int_equal (zlistx_size (expanded), 3);
    assert_string_equal (zlistx_first (expanded), "tcp://10.9.9.9:7570");
    //  Heard in either order; the one given later is not repeated
    assert_true (s_list_has (expanded, "tcp://127.0.0.1:7570"));
    assert_true (s_list_has (expanded, "tcp://127.0.0.1:7572"));
    assert_false (s_list_has (expanded, "tcp://127.0.0.1:7571"));
    zlistx_destroy (&expanded);
    zlistx_destroy (&brokers);
    zstr_free (&spec);

    //  Only CURVE brokers: none usable, and the reason says why
    datagrams->count = 0;
    s_add_beacon (datagrams, 7571, true);
    spec = zsys_sprintf ("beacon:%d", datagrams->port);
    brokers = s_brokers (spec);
    sender = zactor_new (s_sender, datagrams);
    expanded = dsh_beacon_expand (brokers, LISTEN_MS, error, sizeof (error));
    zactor_destroy (&sender);
    assert_null (expanded);
    assert_non_null (strstr (error, spec));
    assert_non_null (strstr (error, "CURVE"));
    zlistx_destroy (&brokers);

    //  Silence: an error naming the port, after the wait and no longer
    brokers = s_brokers (spec);
    expanded = dsh_beacon_expand (brokers, 300, error, sizeof (error));
    assert_null (expanded);
    assert_non_null (strstr (error, "no broker beacon heard"));
    zlistx_destroy (&brokers);
    zstr_free (&spec);
    free (datagrams);
}

//  Beacons the broker could not honour stop it at start, with the reason
static void
test_broker_refuses (void **state)
{
    (void) state;
    struct {
        const char *argv [8];
        const char *reason;
    } cases [] = {
        { { "broker/dsh-broker", "-e", "tcp://127.0.0.1:17470", "--beacon", NULL }, "loopback" },
        { { "broker/dsh-broker", "-e", "ipc:///tmp/dsh-beacon-test", "--beacon", NULL }, "tcp://" },
        { { "broker/dsh-broker", "--beacon=0", NULL }, "beacon/port" },
        { { "broker/dsh-broker", "--beacon=7579x", NULL }, "beacon/port" },
        { { "broker/dsh-broker", "-e", "tcp://*:17470", "--insecure", "--beacon", NULL }, "ZSYS_INTERFACE" },
    };
    //  The last one: an interface that does not exist
    setenv ("ZSYS_INTERFACE", "dsh-no-such-if", 1);
    for (size_t index = 0; index < sizeof (cases) / sizeof (cases [0]); index++) {
        dsh_testproc_t *broker = dsh_testproc_start_merged (cases [index].argv);
        assert_non_null (broker);
        assert_int_equal (dsh_testproc_wait (broker, 10000), 2);
        const char *output = dsh_testproc_output (broker, 1000);
        if (!strstr (output, cases [index].reason))
            fail_msg ("case %zu: \"%s\" does not say \"%s\"", index, output, cases [index].reason);
        dsh_testproc_destroy (&broker);
    }
    unsetenv ("ZSYS_INTERFACE");
}

int
main (void)
{
    //  Every address: loopback alone carries no broadcast, and a host (a CI
    //  container) may have no other interface
    zsys_init ();
    zsys_set_interface ("*");
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_listen_hostile),
        cmocka_unit_test (test_listen_flood),
        cmocka_unit_test (test_expand),
        cmocka_unit_test (test_broker_refuses),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
