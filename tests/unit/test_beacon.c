/*  =========================================================================
    test_beacon - dsh_beacon without the network: the DSH1 payload byte for
    byte, every way a datagram can fail to be one, and broker lists with no
    beacon entry passing through dsh_beacon_expand untouched
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "dsh_beacon.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

static void
test_encode_layout (void **state)
{
    (void) state;
    dsh_beacon_t beacon = { 7570, true, 0x0102030405060708ULL };
    byte buffer [DSH_BEACON_SIZE];
    assert_int_equal (dsh_beacon_encode (&beacon, buffer), 16);
    //  PROTOCOL.md, "Broker discovery by beacon": magic, port, flags,
    //  reserved, epoch, big-endian
    const byte expected [16] = { 'D', 'S', 'H', '1', 0x1d, 0x92, 0x01, 0x00,
                                 1, 2, 3, 4, 5, 6, 7, 8 };
    assert_memory_equal (buffer, expected, 16);
    beacon.curve = false;
    dsh_beacon_encode (&beacon, buffer);
    assert_int_equal (buffer [6], 0);
}

static void
test_round_trip (void **state)
{
    (void) state;
    dsh_beacon_t sent = { 65535, false, UINT64_MAX }, heard = { 0 };
    byte buffer [DSH_BEACON_SIZE];
    size_t size = dsh_beacon_encode (&sent, buffer);
    assert_int_equal (dsh_beacon_decode (buffer, size, &heard), 0);
    assert_int_equal (heard.front_port, 65535);
    assert_false (heard.curve);
    assert_true (heard.epoch == UINT64_MAX);
    sent = (dsh_beacon_t) { 1, true, 1 };
    dsh_beacon_encode (&sent, buffer);
    assert_int_equal (dsh_beacon_decode (buffer, size, &heard), 0);
    assert_int_equal (heard.front_port, 1);
    assert_true (heard.curve);
    assert_true (heard.epoch == 1);
}

//  A later DSH1 revision may append fields and set flag bits: read as far
//  as this one knows
static void
test_later_revision (void **state)
{
    (void) state;
    byte longer [255];
    memset (longer, 0xee, sizeof (longer));
    dsh_beacon_t sent = { 7570, false, 42 }, heard = { 0 };
    dsh_beacon_encode (&sent, longer);
    longer [6] = 0xfe;          //  every flag but CURVE
    longer [7] = 0x77;          //  reserved
    assert_int_equal (dsh_beacon_decode (longer, sizeof (longer), &heard), 0);
    assert_int_equal (heard.front_port, 7570);
    assert_false (heard.curve);
    assert_true (heard.epoch == 42);
}

static void
s_assert_refused (const byte *data, size_t size)
{
    dsh_beacon_t heard = { 1234, true, 99 };
    assert_int_equal (dsh_beacon_decode (data, size, &heard), -1);
    //  Untouched on refusal
    assert_int_equal (heard.front_port, 1234);
    assert_true (heard.curve);
    assert_true (heard.epoch == 99);
}

static void
test_malformed (void **state)
{
    (void) state;
    dsh_beacon_t sent = { 7570, false, 1796000000000000ULL };
    byte good [DSH_BEACON_SIZE];
    dsh_beacon_encode (&sent, good);
    s_assert_refused (NULL, 0);
    s_assert_refused (NULL, 16);
    s_assert_refused (good, 0);
    for (size_t size = 1; size < DSH_BEACON_SIZE; size++)
        s_assert_refused (good, size);

    byte bad [DSH_BEACON_SIZE];
    //  Another version, another magic, another protocol's beacon
    const char *magics [] = { "DSH2", "DSH0", "dsh1", "ZRE\x01", "\0\0\0\0" };
    for (size_t index = 0; index < sizeof (magics) / sizeof (magics [0]); index++) {
        memcpy (bad, good, sizeof (bad));
        memcpy (bad, magics [index], 4);
        s_assert_refused (bad, sizeof (bad));
    }
    //  Port 0 names no front
    memcpy (bad, good, sizeof (bad));
    bad [4] = bad [5] = 0;
    s_assert_refused (bad, sizeof (bad));
    //  No broker has epoch 0
    memcpy (bad, good, sizeof (bad));
    memset (bad + 8, 0, 8);
    s_assert_refused (bad, sizeof (bad));
    //  Noise of every length a UDP beacon may have
    byte noise [255];
    for (size_t index = 0; index < sizeof (noise); index++)
        noise [index] = (byte) (index * 37 + 11);
    for (size_t size = 0; size <= sizeof (noise); size++)
        s_assert_refused (noise, size);
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

static void
test_expand_without_beacons (void **state)
{
    (void) state;
    zlistx_t *brokers = s_brokers ("tcp://10.0.0.1:7570, ipc:///tmp/b, tcp://10.0.0.1:7570,tcp://10.0.0.2:7570");
    char error [256] = "";
    zlistx_t *expanded = dsh_beacon_expand (brokers, 100, error, sizeof (error));
    assert_non_null (expanded);
    //  Order kept, the repeat dropped; the input is borrowed
    assert_int_equal (zlistx_size (expanded), 3);
    assert_string_equal (zlistx_first (expanded), "tcp://10.0.0.1:7570");
    assert_string_equal (zlistx_next (expanded), "ipc:///tmp/b");
    assert_string_equal (zlistx_next (expanded), "tcp://10.0.0.2:7570");
    assert_int_equal (zlistx_size (brokers), 4);
    zlistx_destroy (&expanded);
    zlistx_destroy (&brokers);

    char *resolved = dsh_beacon_resolve ("tcp://10.0.0.1:7570,tcp://10.0.0.1:7570 , inproc://x", 100,
                                         error, sizeof (error));
    assert_non_null (resolved);
    assert_string_equal (resolved, "tcp://10.0.0.1:7570,inproc://x");
    zstr_free (&resolved);
    //  What dsh_sock_brokers refuses, resolve refuses with its reason
    resolved = dsh_beacon_resolve ("tcp://10.0.0.1:7570,beacon:0", 100, error, sizeof (error));
    assert_null (resolved);
    assert_non_null (strstr (error, "beacon:0"));
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_encode_layout),
        cmocka_unit_test (test_round_trip),
        cmocka_unit_test (test_later_revision),
        cmocka_unit_test (test_malformed),
        cmocka_unit_test (test_expand_without_beacons),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
