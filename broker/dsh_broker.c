/*  =========================================================================
    dsh-broker - the daemon that hosts the registry actor

    Reads built-in defaults, then a ZPL config file (-c), then flags; starts
    the registry actor; prints where it listens; runs until SIGINT/SIGTERM.
    =========================================================================
*/

#include "dsh_beacon.h"
#include "dsh_calltrace.h"
#include "dsh_log.h"
#include "dsh_config.h"
#include "dsh_curve.h"
#include "dsh_keystore.h"
#include "dsh_middleware.h"
#include "dsh_proto.h"
#include "dsh_registry.h"

#include <malloc.h>
#include <unistd.h>
#if DSH_HAVE_SYSTEMD
#   include <systemd/sd-daemon.h>
#endif

//  Every flag with its default; the numbers come from a fresh configuration,
//  so the help cannot drift from the code.
static void
s_usage (FILE *out)
{
    dsh_config_t *defaults = dsh_config_new ();
    fprintf (out,
        "usage: dsh-broker [options]\n"
        "  -c, --config FILE        read settings from a ZPL file (sections broker, security, beacon,\n"
        "                           chain; see deploy/dsh-broker.cfg); flags override it\n"
        "                           (default: none, the built-in defaults)\n"
        "  -e, --endpoint ENDPOINT  front endpoint clients and components use; --broker is the same\n"
        "                           (default $DSH_BROKER, else %s)\n"
        "      --announce ENDPOINT  SUB endpoint for component announcements (default: front port+1)\n"
        "      --work ENDPOINT      ROUTER endpoint for component calls (default: front port+2)\n"
        "      --events ENDPOINT    PUB endpoint for change events (default: front port+3)\n"
        "      --heartbeat-ms N     component heartbeat interval (default %d)\n"
        "      --liveness N         missed heartbeats before a component expires (default %d)\n"
        "      --call-timeout-ms N  deadline of a call that sets none (default %d)\n"
        "      --max-call-timeout-ms N  cap on a call's own deadline (default %d)\n"
        "      --max-message-bytes N  largest frame accepted (default %d)\n"
        "      --queue-limit N      high-water mark of every socket, in messages (default %d)\n"
        "      --max-tool-bytes N   largest tool entry a component may announce (default %d)\n"
        "      --max-tools N        tools one component may provide (default %d)\n"
        "      --max-announce-parts-bytes N  tool sets announced in parts, held until whole, all\n"
        "                           components together, in bytes (default %d)\n"
        "      --events-queue-bytes N  change events queued per subscriber, in bytes (default %d)\n"
        "      --io-threads N       ZeroMQ I/O threads (default 0: one per CPU, at most 16;\n"
        "                           $ZSYS_IO_THREADS overrides the default)\n"
        "      --cert FILE          the broker's certificate; turns CURVE on\n"
        "                           (default $DSH_CERT, else none: CURVE off)\n"
        "      --allow DIR          allow-list: the public certificates that may connect\n"
        "                           (default none; CURVE needs it)\n"
        "      --curve              CURVE on every socket (needs --cert and --allow; default off)\n"
        "      --insecure           listen beyond loopback without CURVE, anyone may connect (default off)\n"
        "      --beacon[=PORT]      broadcast UDP beacons so `--broker beacon[:PORT]` finds this broker\n"
        "                           (default off; port %d, every %d ms; interface: $ZSYS_INTERFACE or\n"
        "                           the config's beacon/interface)\n"
        "      --name NAME          this broker's stable id, its audit chain's (default HOST:PORT)\n"
        "      --state-dir DIR      where the SQLite store lives (default $DSH_STATE_DIR, else\n"
        "                           $XDG_STATE_HOME/dsh, else ~/.local/state/dsh)\n"
        "      --store LOCATION     the store: postgresql://... (every broker of a swarm in one\n"
        "                           database) or a SQLite file (default STATE_DIR/broker-PORT.db)\n"
        "      --audit POLICY       required: no call runs unrecorded (refused AUDIT_UNAVAILABLE\n"
        "                           while the store fails); best-effort: records are dropped and\n"
        "                           counted instead; off: none (default required; the config's\n"
        "                           audit section sets arguments, digest_tools, retain_days, ...)\n"
        "      --pins POLICY        pinned tool definitions (PROTOCOL.md, Pins): tofu: a name's first\n"
        "                           definition is pinned, a changed one is quarantined until an admin\n"
        "                           accepts it (dsh pins accept NAME); strict: only definitions an\n"
        "                           admin accepted are callable; off (default tofu; kept in the store)\n"
        "      --no-stats           keep no call statistics (STATS answers enabled: false;\n"
        "                           config key stats = false; default on)\n"
        "  -v, --verbose            log every event and refusal (default off)\n"
        "  -h, --help               this help\n",
        defaults->endpoint, defaults->heartbeat_ms, defaults->liveness, defaults->call_timeout_ms,
        defaults->max_call_timeout_ms, defaults->max_message_bytes, defaults->queue_limit,
        defaults->max_tool_bytes, defaults->max_tools, defaults->max_announce_parts_bytes,
        defaults->events_queue_bytes,
        defaults->beacon_port, defaults->beacon_interval_ms);
    dsh_config_destroy (&defaults);
}

//  Tells the service manager how the broker is doing: a systemd unit of
//  Type=notify (deploy/systemd) counts the broker started at READY=1, once
//  its sockets are bound. Nothing without $NOTIFY_SOCKET, or when built
//  without libsystemd.
static void
s_notify (const char *state)
{
#if DSH_HAVE_SYSTEMD
    sd_notify (0, state);
#else
    (void) state;
#endif
}

//  Flag -> config key, for the flags that take a value.
static const char *
s_flag_key (const char *flag)
{
    static const char *flags [][2] = {
        { "-e", "endpoint" }, { "--endpoint", "endpoint" }, { "--broker", "endpoint" },
        { "--announce", "announce" }, { "--work", "work" }, { "--events", "events" },
        { "--heartbeat-ms", "heartbeat_ms" }, { "--liveness", "liveness" },
        { "--call-timeout-ms", "call_timeout_ms" }, { "--max-call-timeout-ms", "max_call_timeout_ms" },
        { "--max-message-bytes", "max_message_bytes" }, { "--queue-limit", "queue_limit" },
        { "--cert", "certificate" }, { "--allow", "allow" },
        { "--max-tool-bytes", "max_tool_bytes" }, { "--max-tools", "max_tools" },
        { "--max-announce-parts-bytes", "max_announce_parts_bytes" },
        { "--events-queue-bytes", "events_queue_bytes" }, { "--io-threads", "io_threads" },
        { "--name", "name" }, { "--state-dir", "state_dir" }, { "--store", "store" }, { "--audit", "audit" },
        { "--pins", "pins" },
    };
    for (size_t index = 0; index < sizeof (flags) / sizeof (flags [0]); index++)
        if (streq (flag, flags [index][0]))
            return flags [index][1];
    return NULL;
}

//  Beacon the front (as bound) so `--broker beacon` finds it: the payload
//  carries its port, whether it wants CURVE, and the registry's epoch.
//  Returns the zbeacon actor, or NULL with a reason.
static zactor_t *
s_beacon_start (dsh_config_t *config, zactor_t *registry, const char *front, char *error, size_t error_size)
{
    int front_port = dsh_config_beacon_port (config, front, error, error_size);
    if (front_port < 0)
        return NULL;
    zstr_send (registry, "EPOCH");
    char *epoch = zstr_recv (registry);
    dsh_beacon_t payload = { front_port, config->curve, epoch? strtoull (epoch, NULL, 10): 0 };
    zstr_free (&epoch);
    assert (payload.epoch);
    if (config->beacon_interface)
        zsys_set_interface (config->beacon_interface);
    char reason [256];
    zactor_t *beacon = dsh_beacon_publish (&payload, config->beacon_port, config->beacon_interval_ms,
                                           reason, sizeof (reason));
    if (!beacon)
        snprintf (error, error_size, "beacon: %s", reason);
    return beacon;
}

int
main (int argc, char *argv [])
{
    //  A large message (up to max_message_bytes) is allocated whole, by
    //  libzmq and the decoder. glibc raises its mmap threshold each time
    //  such a block is freed, so the next ones come from the heap and stay
    //  there: after a few 16 MiB calls the broker held tens of MB for good.
    //  A fixed threshold keeps large blocks mapped, given back when freed.
    mallopt (M_MMAP_THRESHOLD, 256 * 1024);
    mallopt (M_TRIM_THRESHOLD, 1024 * 1024);
    zsys_init ();
    zsys_set_logident ("dsh-broker");
    zsys_set_logstream (dsh_log_stream (stderr));
    dsh_config_t *config = dsh_config_new ();
    char error [512];
    int rc = 0;

    //  The config file first, wherever -c stands, so flags override it
    for (int index = 1; index < argc; index++)
        if ((streq (argv [index], "-c") || streq (argv [index], "--config")) && index + 1 < argc
        &&  dsh_config_load (config, argv [index + 1], error, sizeof (error))) {
            fprintf (stderr, "dsh-broker: %s\n", error);
            dsh_config_destroy (&config);
            return 2;
        }
    const char *certificate = getenv ("DSH_CERT");
    if (certificate && *certificate && dsh_config_set (config, "certificate", certificate, error, sizeof (error))) {
        fprintf (stderr, "dsh-broker: DSH_CERT: %s\n", error);
        rc = 2;
    }
    const char *environment = getenv ("DSH_BROKER");
    if (environment && *environment && dsh_config_set (config, "endpoint", environment, error, sizeof (error))) {
        fprintf (stderr, "dsh-broker: DSH_BROKER: %s\n", error);
        rc = 2;
    }
    for (int index = 1; index < argc && rc == 0; index++) {
        const char *flag = argv [index];
        const char *key = s_flag_key (flag);
        if (streq (flag, "-h") || streq (flag, "--help")) {
            s_usage (stdout);
            dsh_config_destroy (&config);
            return 0;
        }
        else
        if (streq (flag, "-v") || streq (flag, "--verbose"))
            config->verbose = true;
        else
        if (streq (flag, "--curve"))
            config->curve = true;
        else
        if (streq (flag, "--no-stats"))
            config->stats = false;
        else
        if (streq (flag, "--insecure"))
            config->insecure = true;
        else
        if (streq (flag, "--beacon"))
            config->beacon = true;
        else
        if (strncmp (flag, "--beacon=", 9) == 0) {
            config->beacon = true;
            if (dsh_config_set (config, "beacon/port", flag + 9, error, sizeof (error))) {
                fprintf (stderr, "dsh-broker: --beacon: %s\n", error);
                rc = 2;
            }
        }
        else
        if (streq (flag, "-c") || streq (flag, "--config"))
            index++;
        else
        if (key && index + 1 < argc) {
            if (dsh_config_set (config, key, argv [++index], error, sizeof (error))) {
                fprintf (stderr, "dsh-broker: %s\n", error);
                rc = 2;
            }
        }
        else {
            fprintf (stderr, "dsh-broker: %s: %s\n", flag, key? "needs a value": "unknown option");
            s_usage (stderr);
            rc = 2;
        }
    }
    if (rc) {
        dsh_config_destroy (&config);
        return rc;
    }

    dsh_config_derive (config);
    //  Every connection's I/O (TCP, CURVE, heartbeats) runs on libzmq's I/O
    //  threads, one by default: at 1 000 components and as many watchers
    //  one thread was the broker's bottleneck. One per CPU, unless the
    //  config or $ZSYS_IO_THREADS says otherwise; before any socket
    size_t io_threads = (size_t) config->io_threads;
    if (io_threads == 0 && !getenv ("ZSYS_IO_THREADS")) {
        long cpus = sysconf (_SC_NPROCESSORS_ONLN);
        io_threads = cpus < 1? 1: cpus > 16? 16: (size_t) cpus;
    }
    if (io_threads)
        zsys_set_io_threads (io_threads);
    else
        io_threads = (size_t) atoi (getenv ("ZSYS_IO_THREADS"));
    if (dsh_config_secure (config, error, sizeof (error))) {
        fprintf (stderr, "dsh-broker: %s\n", error);
        dsh_config_destroy (&config);
        return 2;
    }
    //  Tracing is configured by the standard OTEL_* variables, and off
    //  unless an exporter endpoint is set; a bad value stops the start
    if (dsh_calltrace_start (error, sizeof (error))) {
        fprintf (stderr, "dsh-broker: tracing: %s\n", error);
        dsh_config_destroy (&config);
        return 2;
    }
    //  Under CURVE, the keystore answers every handshake in this process
    //  from the allow-list directory, loaded once and checked for changes
    //  every DSH_KEYSTORE_CHECK_MS (a removed certificate is refused on the
    //  first connection after that); the registry's and the built-in
    //  stages' sockets serve with the broker's keypair
    zactor_t *keystore = NULL;
    if (config->curve) {
        keystore = zactor_new (dsh_keystore_actor, NULL);
        if (config->verbose) {
            zstr_sendx (keystore, "VERBOSE", NULL);
            zsock_wait (keystore);
        }
        zstr_sendx (keystore, "CURVE", config->allow, NULL);
        if (zsock_wait (keystore)) {
            fprintf (stderr, "dsh-broker: cannot serve the allow-list %s (the log above says why)\n",
                     config->allow);
            zactor_destroy (&keystore);
            dsh_config_destroy (&config);
            return 1;
        }
        dsh_curve_set_server (config->cert);
    }
    config->stage_kinds = dsh_middleware_kinds;
    zactor_t *registry = zactor_new (dsh_registry_actor, config);
    char *front = NULL, *announce = NULL, *work = NULL, *events = NULL;
    zstr_sendx (registry, "ENDPOINTS", NULL);
    zstr_recvx (registry, &front, &announce, &work, &events, NULL);
    zactor_t *beacon = NULL;
    if (!front || streq (front, "ERROR")) {
        fprintf (stderr, "dsh-broker: %s\n", announce? announce: "the registry did not start");
        rc = 1;
    }
    else
    if (config->beacon && !(beacon = s_beacon_start (config, registry, front, error, sizeof (error)))) {
        fprintf (stderr, "dsh-broker: %s\n", error);
        rc = 2;
    }
    else {
        printf ("dsh-broker: listening on %s (announce %s, work %s, events %s)\n",
                front, announce, work, events);
        printf ("dsh-broker: heartbeat %d ms, expiry after %d missed\n",
                config->heartbeat_ms, config->liveness);
        if (config->curve)
            printf ("dsh-broker: CURVE on, public key %s, allow-list %s\n",
                    zcert_public_txt (config->cert), config->allow);
        else
            printf ("dsh-broker: CURVE off%s\n", config->insecure? " (--insecure)": " (loopback only)");
        if (beacon)
            printf ("dsh-broker: beacon on UDP port %d every %d ms (interface %s)\n", config->beacon_port,
                    config->beacon_interval_ms, *zsys_interface ()? zsys_interface (): "the first broadcast one");
        if (dsh_calltrace_on ())
            printf ("dsh-broker: tracing on: spans exported over OTLP/HTTP (OTEL_EXPORTER_OTLP_*)\n");
        printf ("dsh-broker: events queue %d events per subscriber (events_queue_bytes / 4096); "
                "%zu I/O threads\n", dsh_config_events_hwm (config), io_threads);
        if (config->chain) {
            printf ("dsh-broker: chain:");
            for (zconfig_t *stage = zconfig_child (config->chain); stage; stage = zconfig_next (stage))
                printf (" %s (%s)%s", zconfig_get (stage, "name", "?"), zconfig_get (stage, "kind", "?"),
                        zconfig_next (stage)? " ->": "");
            printf ("\n");
        }
        printf ("dsh-broker: try  DSH_BROKER=%s dsh tools   and   dsh call echo '{\"message\":\"hi\"}'\n",
                front);
        fflush (stdout);
        char *ready = zsys_sprintf ("READY=1\nSTATUS=listening on %s", front);
        s_notify (ready);
        zstr_free (&ready);
        //  The actor does the work; this thread only waits for a signal
        while (!zsys_interrupted)
            zclock_sleep (100);
        s_notify ("STOPPING=1");
        printf ("dsh-broker: stopping\n");
        //  Said now, not at exit: the stop may take seconds (the audit
        //  writes what is queued), and stdout is often a pipe
        fflush (stdout);
    }
    zactor_destroy (&beacon);
    zstr_free (&front);
    zstr_free (&announce);
    zstr_free (&work);
    zstr_free (&events);
    zactor_destroy (&registry);
    //  After the registry: the spans of the calls it answered at its stop
    dsh_calltrace_stop (2000);
    dsh_curve_set_server (NULL);
    zactor_destroy (&keystore);
    dsh_config_destroy (&config);
    return rc;
}
