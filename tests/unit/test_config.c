/*  =========================================================================
    test_config - dsh_config: defaults, keys and their bounds, ZPL files,
    the endpoints derived from the front one, and the security section:
    CURVE's keys, and no plain broker beyond loopback
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsh_config.h"
#include "dsh_curve.h"
#include "dsh_proto.h"

static void
s_assert_contains (const char *text, const char *part)
{
    if (!strstr (text, part))
        fail_msg ("\"%s\" does not contain \"%s\"", text, part);
}

static void
test_defaults (void **state)
{
    (void) state;
    dsh_config_t *config = dsh_config_new ();
    assert_string_equal (config->endpoint, DSH_DEFAULT_ENDPOINT);
    assert_string_equal (config->endpoint, "tcp://127.0.0.1:7570");
    assert_null (config->announce);
    assert_null (config->work);
    assert_null (config->events);
    assert_int_equal (config->heartbeat_ms, DSH_DEFAULT_HEARTBEAT_MS);
    assert_int_equal (config->liveness, DSH_DEFAULT_LIVENESS);
    assert_int_equal (config->call_timeout_ms, DSH_DEFAULT_CALL_TIMEOUT_MS);
    assert_int_equal (config->max_call_timeout_ms, 600000);
    assert_int_equal (config->max_message_bytes, DSH_MAX_MESSAGE_DEFAULT);
    assert_int_equal (config->queue_limit, 10000);
    assert_int_equal (config->max_tool_bytes, 65536);
    assert_int_equal (config->max_tools, 1024);
    assert_int_equal (config->max_announce_parts_bytes, 256 * 1024 * 1024);
    assert_int_equal (config->events_queue_bytes, 32 * 1024 * 1024);
    assert_false (config->verbose);
    dsh_config_destroy (&config);
    assert_null (config);
    dsh_config_destroy (&config);
}

static void
s_set_ok (dsh_config_t *config, const char *key, const char *value)
{
    char error [256] = "";
    if (dsh_config_set (config, key, value, error, sizeof error))
        fail_msg ("%s = %s refused: %s", key, value, error);
}

static void
test_set_each_key (void **state)
{
    (void) state;
    dsh_config_t *config = dsh_config_new ();
    s_set_ok (config, "endpoint", "tcp://*:9000");
    assert_string_equal (config->endpoint, "tcp://*:9000");
    s_set_ok (config, "announce", "ipc:///tmp/dsh-announce");
    assert_string_equal (config->announce, "ipc:///tmp/dsh-announce");
    s_set_ok (config, "work", "inproc://work");
    assert_string_equal (config->work, "inproc://work");
    s_set_ok (config, "events", "tcp://127.0.0.1:9003");
    assert_string_equal (config->events, "tcp://127.0.0.1:9003");
    s_set_ok (config, "events", "tcp://127.0.0.1:9004");       //  set twice: the last wins
    assert_string_equal (config->events, "tcp://127.0.0.1:9004");
    s_set_ok (config, "heartbeat_ms", "250");
    assert_int_equal (config->heartbeat_ms, 250);
    s_set_ok (config, "liveness", "5");
    assert_int_equal (config->liveness, 5);
    s_set_ok (config, "call_timeout_ms", "1234");
    assert_int_equal (config->call_timeout_ms, 1234);
    s_set_ok (config, "max_call_timeout_ms", "99999");
    assert_int_equal (config->max_call_timeout_ms, 99999);
    s_set_ok (config, "max_message_bytes", "1024");
    assert_int_equal (config->max_message_bytes, 1024);
    s_set_ok (config, "queue_limit", "7");
    assert_int_equal (config->queue_limit, 7);
    s_set_ok (config, "verbose", "true");
    assert_true (config->verbose);
    s_set_ok (config, "verbose", "0");
    assert_false (config->verbose);
    s_set_ok (config, "verbose", "1");
    assert_true (config->verbose);
    s_set_ok (config, "verbose", "false");
    assert_false (config->verbose);
    //  Statistics are on unless turned off
    assert_true (config->stats);
    s_set_ok (config, "stats", "false");
    assert_false (config->stats);
    //  Bounds are inclusive
    s_set_ok (config, "heartbeat_ms", "10");
    s_set_ok (config, "heartbeat_ms", "3600000");
    s_set_ok (config, "liveness", "1");
    s_set_ok (config, "liveness", "100");
    s_set_ok (config, "queue_limit", "10000000");
    char text [32];
    snprintf (text, sizeof text, "%d", INT_MAX);
    s_set_ok (config, "call_timeout_ms", text);
    assert_int_equal (config->call_timeout_ms, INT_MAX);
    dsh_config_destroy (&config);
}

//  Expects the value to be refused with a reason naming the key, and the
//  setting to keep its value.
static void
s_set_refused (dsh_config_t *config, const char *key, const char *value)
{
    char error [256] = "";
    if (dsh_config_set (config, key, value, error, sizeof error) != -1)
        fail_msg ("%s = %s accepted", key, value);
    s_assert_contains (error, key);
}

//  The keys of a swarm's scale: the snapshot rate, the I/O threads and the
//  events queue, each in its range.
static void
test_scale_keys (void **state)
{
    (void) state;
    dsh_config_t *config = dsh_config_new ();
    assert_int_equal (config->snapshot_bytes_per_second, 256 * 1024 * 1024);
    assert_int_equal (config->io_threads, 0);
    s_set_ok (config, "snapshot_bytes_per_second", "1048576");
    assert_int_equal (config->snapshot_bytes_per_second, 1048576);
    s_set_ok (config, "io_threads", "4");
    assert_int_equal (config->io_threads, 4);
    s_set_refused (config, "snapshot_bytes_per_second", "1000");
    s_set_refused (config, "io_threads", "65");
    s_set_refused (config, "io_threads", "-1");
    //  The events queue: 4 KiB events in events_queue_bytes, within the
    //  socket limit, at least one
    assert_int_equal (dsh_config_events_hwm (config), 32 * 1024 * 1024 / 4096);
    s_set_ok (config, "events_queue_bytes", "1048576");
    assert_int_equal (dsh_config_events_hwm (config), 256);
    s_set_ok (config, "queue_limit", "50");
    assert_int_equal (dsh_config_events_hwm (config), 50);
    s_set_ok (config, "events_queue_bytes", "1024");
    assert_int_equal (dsh_config_events_hwm (config), 1);
    dsh_config_destroy (&config);
}

static void
test_bad_values (void **state)
{
    (void) state;
    dsh_config_t *config = dsh_config_new ();
    const char *numeric [] = { "heartbeat_ms", "liveness", "call_timeout_ms", "max_call_timeout_ms",
                               "max_message_bytes", "queue_limit", "max_tool_bytes", "max_tools",
                               "events_queue_bytes", "max_announce_parts_bytes" };
    const char *not_numbers [] = { "", "abc", "12abc", "1.5", " ", "0x10", "99999999999999999999" };
    for (size_t key = 0; key < sizeof numeric / sizeof numeric [0]; key++)
        for (size_t value = 0; value < sizeof not_numbers / sizeof not_numbers [0]; value++)
            s_set_refused (config, numeric [key], not_numbers [value]);
    s_set_refused (config, "heartbeat_ms", NULL);

    //  Out of range
    s_set_refused (config, "heartbeat_ms", "9");
    s_set_refused (config, "heartbeat_ms", "3600001");
    s_set_refused (config, "heartbeat_ms", "-1000");
    s_set_refused (config, "liveness", "0");
    s_set_refused (config, "liveness", "101");
    s_set_refused (config, "call_timeout_ms", "0");
    s_set_refused (config, "max_call_timeout_ms", "-1");
    s_set_refused (config, "max_message_bytes", "1023");
    s_set_refused (config, "queue_limit", "0");
    s_set_refused (config, "queue_limit", "10000001");
    s_set_refused (config, "max_tool_bytes", "255");
    s_set_refused (config, "max_tools", "0");
    s_set_refused (config, "max_tools", "1000001");
    s_set_refused (config, "max_announce_parts_bytes", "1023");
    s_set_refused (config, "events_queue_bytes", "1023");
    char text [32];
    snprintf (text, sizeof text, "%lld", (long long) INT_MAX + 1);
    s_set_refused (config, "call_timeout_ms", text);

    //  Bad booleans
    s_set_refused (config, "verbose", "yes");
    s_set_refused (config, "verbose", "");
    s_set_refused (config, "verbose", "TRUE");

    //  Bad endpoints
    const char *endpoints [] = { "endpoint", "announce", "work", "events" };
    const char *bad [] = { "", "127.0.0.1:7570", "udp://127.0.0.1:7570", "http://x", "tcp:/x", "pgm://x" };
    for (size_t key = 0; key < 4; key++)
        for (size_t value = 0; value < sizeof bad / sizeof bad [0]; value++)
            s_set_refused (config, endpoints [key], bad [value]);

    //  Nothing was changed by a refusal
    assert_string_equal (config->endpoint, DSH_DEFAULT_ENDPOINT);
    assert_null (config->announce);
    assert_int_equal (config->heartbeat_ms, DSH_DEFAULT_HEARTBEAT_MS);
    assert_int_equal (config->liveness, DSH_DEFAULT_LIVENESS);
    assert_int_equal (config->call_timeout_ms, DSH_DEFAULT_CALL_TIMEOUT_MS);
    assert_int_equal (config->queue_limit, 10000);
    assert_false (config->verbose);

    //  Unknown key
    char error [256] = "";
    assert_int_equal (dsh_config_set (config, "heartbeat", "100", error, sizeof error), -1);
    s_assert_contains (error, "unknown");
    s_assert_contains (error, "heartbeat");
    assert_int_equal (dsh_config_set (config, "", "1", error, sizeof error), -1);
    dsh_config_destroy (&config);
}

// ---------------------------------------------------------------------------
//  Files

static char s_path [64];

//  Writes text to a fresh temporary file whose path is s_path.
static const char *
s_write (const char *text)
{
    strcpy (s_path, "/tmp/test_config_XXXXXX");
    int fd = mkstemp (s_path);
    assert_true (fd >= 0);
    size_t size = strlen (text);
    assert_int_equal (write (fd, text, size), (ssize_t) size);
    close (fd);
    return s_path;
}

static int
s_teardown (void **state)
{
    (void) state;
    if (*s_path)
        unlink (s_path);
    *s_path = 0;
    return 0;
}

static void
test_load_valid (void **state)
{
    (void) state;
    const char *path = s_write (
        "#   A broker on all interfaces\n"
        "broker\n"
        "    endpoint = \"tcp://*:8000\"\n"
        "    heartbeat_ms = 200\n"
        "    liveness = 4\n"
        "    queue_limit = 50\n"
        "    verbose = true\n"
        "    events = \"tcp://*:9999\"\n");
    dsh_config_t *config = dsh_config_new ();
    char error [512] = "";
    if (dsh_config_load (config, path, error, sizeof error))
        fail_msg ("refused: %s", error);
    assert_string_equal (config->endpoint, "tcp://*:8000");
    assert_int_equal (config->heartbeat_ms, 200);
    assert_int_equal (config->liveness, 4);
    assert_int_equal (config->queue_limit, 50);
    assert_true (config->verbose);
    assert_string_equal (config->events, "tcp://*:9999");
    //  Untouched keys keep their defaults
    assert_int_equal (config->call_timeout_ms, DSH_DEFAULT_CALL_TIMEOUT_MS);
    //  Flags after the file override it
    s_set_ok (config, "heartbeat_ms", "300");
    assert_int_equal (config->heartbeat_ms, 300);
    //  Derived endpoints fill only what the file left unset
    dsh_config_derive (config);
    assert_string_equal (config->announce, "tcp://*:8001");
    assert_string_equal (config->work, "tcp://*:8002");
    assert_string_equal (config->events, "tcp://*:9999");
    dsh_config_destroy (&config);

    //  An empty file sets nothing
    s_teardown (NULL);
    path = s_write ("");
    config = dsh_config_new ();
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), 0);
    assert_string_equal (config->endpoint, DSH_DEFAULT_ENDPOINT);
    dsh_config_destroy (&config);
}

static void
test_load_unknown_key (void **state)
{
    (void) state;
    const char *path = s_write ("broker\n    heartbeat_ms = 200\n    colour = \"blue\"\n");
    dsh_config_t *config = dsh_config_new ();
    char error [512] = "";
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
    s_assert_contains (error, "colour");
    s_assert_contains (error, path);
    dsh_config_destroy (&config);
}

static void
test_load_bad_value (void **state)
{
    (void) state;
    const char *path = s_write ("broker\n    liveness = \"lots\"\n");
    dsh_config_t *config = dsh_config_new ();
    char error [512] = "";
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
    s_assert_contains (error, "liveness");
    assert_int_equal (config->liveness, DSH_DEFAULT_LIVENESS);
    dsh_config_destroy (&config);
}

static void
test_load_unknown_section (void **state)
{
    (void) state;
    const char *path = s_write ("broker\n    liveness = 2\nclient\n    timeout = 5\n");
    dsh_config_t *config = dsh_config_new ();
    char error [512] = "";
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
    s_assert_contains (error, "section");
    s_assert_contains (error, "client");
    dsh_config_destroy (&config);
}

static void
test_load_missing_file (void **state)
{
    (void) state;
    dsh_config_t *config = dsh_config_new ();
    char error [512] = "";
    assert_int_equal (dsh_config_load (config, "/nonexistent/dsh/broker.cfg", error, sizeof error), -1);
    s_assert_contains (error, "/nonexistent/dsh/broker.cfg");
    s_assert_contains (error, "no such file");
    dsh_config_destroy (&config);
}

static void
test_load_not_zpl (void **state)
{
    (void) state;
    //  A value with an unterminated quote is a ZPL syntax error
    const char *path = s_write ("broker\n    endpoint = \"tcp://*:8000\n");
    dsh_config_t *config = dsh_config_new ();
    char error [512] = "";
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
    s_assert_contains (error, "ZPL");
    assert_string_equal (config->endpoint, DSH_DEFAULT_ENDPOINT);
    dsh_config_destroy (&config);
}

// ---------------------------------------------------------------------------
//  Derived endpoints

static void
s_derive (const char *endpoint, const char *announce, const char *work, const char *events)
{
    dsh_config_t *config = dsh_config_new ();
    s_set_ok (config, "endpoint", endpoint);
    dsh_config_derive (config);
    assert_string_equal (config->announce, announce);
    assert_string_equal (config->work, work);
    assert_string_equal (config->events, events);
    //  Deriving again changes nothing
    dsh_config_derive (config);
    assert_string_equal (config->announce, announce);
    dsh_config_destroy (&config);
}

static void
test_derive (void **state)
{
    (void) state;
    s_derive ("tcp://127.0.0.1:7570", "tcp://127.0.0.1:7571", "tcp://127.0.0.1:7572", "tcp://127.0.0.1:7573");
    s_derive ("tcp://*:9000", "tcp://*:9001", "tcp://*:9002", "tcp://*:9003");
    s_derive ("tcp://eth0:1", "tcp://eth0:2", "tcp://eth0:3", "tcp://eth0:4");
    //  A wildcard port stays a wildcard port
    s_derive ("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
    s_derive ("tcp://*:*", "tcp://*:*", "tcp://*:*", "tcp://*:*");
    //  ipc and inproc names get suffixes
    s_derive ("ipc:///tmp/dsh", "ipc:///tmp/dsh-announce", "ipc:///tmp/dsh-work", "ipc:///tmp/dsh-events");
    s_derive ("inproc://dsh", "inproc://dsh-announce", "inproc://dsh-work", "inproc://dsh-events");

    //  Explicit endpoints are kept
    dsh_config_t *config = dsh_config_new ();
    s_set_ok (config, "work", "tcp://127.0.0.1:5555");
    dsh_config_derive (config);
    assert_string_equal (config->announce, "tcp://127.0.0.1:7571");
    assert_string_equal (config->work, "tcp://127.0.0.1:5555");
    assert_string_equal (config->events, "tcp://127.0.0.1:7573");
    dsh_config_destroy (&config);
}

static void
test_loopback (void **state)
{
    (void) state;
    assert_true (dsh_config_loopback ("tcp://127.0.0.1:7570"));
    assert_true (dsh_config_loopback ("tcp://127.3.2.1:*"));
    assert_true (dsh_config_loopback ("tcp://localhost:7570"));
    assert_true (dsh_config_loopback ("tcp://[::1]:7570"));
    assert_true (dsh_config_loopback ("ipc:///tmp/dsh"));
    assert_true (dsh_config_loopback ("inproc://dsh"));
    assert_false (dsh_config_loopback ("tcp://0.0.0.0:7570"));
    assert_false (dsh_config_loopback ("tcp://*:7570"));
    assert_false (dsh_config_loopback ("tcp://10.0.0.1:7570"));
    assert_false (dsh_config_loopback ("tcp://127.0.0.1;10.0.0.1:7570"));
    assert_false (dsh_config_loopback ("tcp://1270.0.0.1:7570"));
}

//  Plain beyond loopback only with insecure; CURVE needs a real keypair
//  and an allow-list directory; the section's keys stay in their section
static void
test_security (void **state)
{
    (void) state;
    char error [512] = "";
    dsh_config_t *config = dsh_config_new ();
    dsh_config_derive (config);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), 0);
    dsh_config_destroy (&config);

    config = dsh_config_new ();
    assert_int_equal (dsh_config_set (config, "endpoint", "tcp://0.0.0.0:7570", error, sizeof error), 0);
    dsh_config_derive (config);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), -1);
    s_assert_contains (error, "--insecure");
    assert_int_equal (dsh_config_set (config, "insecure", "true", error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), 0);
    dsh_config_destroy (&config);

    char directory [] = "/tmp/dsh-test-config-XXXXXX";
    assert_non_null (mkdtemp (directory));
    char *cert = zsys_sprintf ("%s/broker.cert", directory);
    char *secret = zsys_sprintf ("%s/broker.cert_secret", directory);
    assert_int_equal (dsh_curve_keygen (cert, "admin", NULL, NULL, NULL, NULL, error, sizeof error), 0);

    config = dsh_config_new ();
    assert_int_equal (dsh_config_set (config, "curve", "true", error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), -1);
    s_assert_contains (error, "certificate");
    assert_int_equal (dsh_config_set (config, "certificate", cert, error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), -1);
    s_assert_contains (error, "allow-list");
    assert_int_equal (dsh_config_set (config, "allow", cert, error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), -1);
    s_assert_contains (error, "is not a directory");
    assert_int_equal (dsh_config_set (config, "allow", directory, error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), 0);
    assert_non_null (config->cert);
    dsh_config_destroy (&config);

    //  Without its secret the keypair cannot serve
    unlink (secret);
    config = dsh_config_new ();
    assert_int_equal (dsh_config_set (config, "certificate", cert, error, sizeof error), 0);
    assert_int_equal (dsh_config_set (config, "allow", directory, error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), -1);
    s_assert_contains (error, "no secret key");
    dsh_config_destroy (&config);

    //  Garbage where the certificate should be
    FILE *file = fopen (cert, "w");
    assert_non_null (file);
    fputs ("curve\n  public-key = \"unterminated\n", file);
    fclose (file);
    config = dsh_config_new ();
    assert_int_equal (dsh_config_set (config, "certificate", cert, error, sizeof error), 0);
    assert_int_equal (dsh_config_set (config, "allow", directory, error, sizeof error), 0);
    assert_int_equal (dsh_config_secure (config, error, sizeof error), -1);
    s_assert_contains (error, "is not a certificate");
    dsh_config_destroy (&config);
    unlink (cert);
    rmdir (directory);
    zstr_free (&cert);
    zstr_free (&secret);

    //  In a file: the security section, and its keys nowhere else
    const char *path = s_write ("security\n    curve = true\n    allow = \"/tmp\"\n");
    config = dsh_config_new ();
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), 0);
    assert_true (config->curve);
    assert_string_equal (config->allow, "/tmp");
    dsh_config_destroy (&config);
    unlink (path);
    path = s_write ("broker\n    curve = true\n");
    config = dsh_config_new ();
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
    s_assert_contains (error, "broker/unknown setting \"curve\"");
    dsh_config_destroy (&config);
    unlink (path);
    path = s_write ("security\n    heartbeat_ms = 100\n");
    config = dsh_config_new ();
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
    s_assert_contains (error, "security/unknown setting");
    dsh_config_destroy (&config);
}


//  Beacons: off unless a "beacon" section or --beacon says so; each key
//  bounded; a front other hosts cannot reach is refused at start
static void
test_beacon (void **state)
{
    (void) state;
    dsh_config_t *config = dsh_config_new ();
    assert_false (config->beacon);
    assert_int_equal (config->beacon_port, DSH_DEFAULT_BEACON_PORT);
    assert_int_equal (config->beacon_interval_ms, 1000);
    assert_null (config->beacon_interface);
    s_set_ok (config, "beacon/port", "17579");
    s_set_ok (config, "beacon/interval_ms", "250");
    s_set_ok (config, "beacon/interface", "eth0");
    assert_int_equal (config->beacon_port, 17579);
    assert_int_equal (config->beacon_interval_ms, 250);
    assert_string_equal (config->beacon_interface, "eth0");
    assert_false (config->beacon);
    const char *bad [][2] = {
        { "beacon/port", "0" }, { "beacon/port", "65536" }, { "beacon/port", "udp" }, { "beacon/port", "" },
        { "beacon/interval_ms", "99" }, { "beacon/interval_ms", "-1" }, { "beacon/interface", "" },
        { "beacon/colour", "red" },
    };
    for (size_t index = 0; index < sizeof (bad) / sizeof (bad [0]); index++) {
        char error [256] = "";
        if (dsh_config_set (config, bad [index][0], bad [index][1], error, sizeof error) == 0)
            fail_msg ("%s = \"%s\" taken", bad [index][0], bad [index][1]);
        s_assert_contains (error, bad [index][0]);
    }
    assert_int_equal (config->beacon_port, 17579);

    char error [512] = "";
    assert_int_equal (dsh_config_beacon_port (config, "tcp://0.0.0.0:17570", error, sizeof error), 17570);
    assert_int_equal (dsh_config_beacon_port (config, "tcp://10.1.2.3:7570", error, sizeof error), 7570);
    assert_int_equal (dsh_config_beacon_port (config, "tcp://127.0.0.1:7570", error, sizeof error), -1);
    s_assert_contains (error, "loopback");
    assert_int_equal (dsh_config_beacon_port (config, "ipc:///tmp/front", error, sizeof error), -1);
    s_assert_contains (error, "tcp://");
    dsh_config_destroy (&config);

    //  A section, even empty, turns beacons on
    const char *path = s_write ("beacon\n    port = 7600\n    interval_ms = 500\n    interface = \"*\"\n");
    config = dsh_config_new ();
    if (dsh_config_load (config, path, error, sizeof error))
        fail_msg ("refused: %s", error);
    assert_true (config->beacon);
    assert_int_equal (config->beacon_port, 7600);
    assert_int_equal (config->beacon_interval_ms, 500);
    assert_string_equal (config->beacon_interface, "*");
    dsh_config_destroy (&config);
    s_teardown (NULL);
    path = s_write ("broker\n    verbose = true\nbeacon\n");
    config = dsh_config_new ();
    assert_int_equal (dsh_config_load (config, path, error, sizeof error), 0);
    assert_true (config->beacon);
    assert_int_equal (config->beacon_port, DSH_DEFAULT_BEACON_PORT);
    dsh_config_destroy (&config);

    const char *files [][2] = {
        { "beacon\n    port = 70000\n", "beacon/port" },
        { "beacon\n    ttl = 2\n", "beacon/ttl" },
        { "beacon = true\n", "is a section" },
        { "broker\n    beacon = 1\n", "beacon" },
    };
    for (size_t index = 0; index < sizeof (files) / sizeof (files [0]); index++) {
        s_teardown (NULL);
        path = s_write (files [index][0]);
        config = dsh_config_new ();
        assert_int_equal (dsh_config_load (config, path, error, sizeof error), -1);
        s_assert_contains (error, files [index][1]);
        s_assert_contains (error, path);
        dsh_config_destroy (&config);
    }
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_defaults),
        cmocka_unit_test (test_set_each_key),
        cmocka_unit_test (test_bad_values),
        cmocka_unit_test (test_scale_keys),
        cmocka_unit_test_teardown (test_load_valid, s_teardown),
        cmocka_unit_test_teardown (test_load_unknown_key, s_teardown),
        cmocka_unit_test_teardown (test_load_bad_value, s_teardown),
        cmocka_unit_test_teardown (test_load_unknown_section, s_teardown),
        cmocka_unit_test (test_load_missing_file),
        cmocka_unit_test_teardown (test_load_not_zpl, s_teardown),
        cmocka_unit_test (test_derive),
        cmocka_unit_test (test_loopback),
        cmocka_unit_test_teardown (test_security, s_teardown),
        cmocka_unit_test_teardown (test_beacon, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
