/*  =========================================================================
    dsh-stage - run a built-in middleware as an external stage of a broker

        dsh-stage --broker ENDPOINT --name NAME --kind KIND [--config FILE]

    The broker's chain config names the stage and marks it external; this
    process attaches to that slot and runs the middleware until SIGINT or
    SIGTERM. FILE is a ZPL file whose root children are the stage's
    settings, the same keys as in the broker's chain config.
    =========================================================================
*/

#include <getopt.h>

#include "dsh_curve.h"
#include "dsh_log.h"
#include "dsh_keystore.h"
#include "dsh_middleware.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

#define ATTACH_TIMEOUT_MS 5000

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-stage --name NAME --kind KIND [--broker ENDPOINT[,ENDPOINT...]] [--config FILE]\n"
        "Run a built-in middleware as the external stage NAME of a broker's chain.\n"
        "  --name NAME        the stage's name in the broker's chain config (required)\n"
        "  --kind KIND        limit, permission, plan, hooks, sandbox, trace or pass (required)\n"
        "  --broker ENDPOINT[,ENDPOINT...]\n"
        "                     the broker's front endpoint, or a list of brokers: the stage\n"
        "                     attaches to each (default: $DSH_BROKER, else %s)\n"
        "  --config FILE      a ZPL file whose root children are the stage's settings\n"
        "  --cert FILE        this stage's CURVE keypair, role stage (default: $DSH_CERT)\n"
        "  --broker-cert FILE the broker's public certificate (default: $DSH_BROKER_CERT)\n"
        "  --allow DIR        a permission stage's approvals socket serves CURVE with this\n"
        "                     stage's key, to the approver and admin keys in DIR\n"
        "  -h, --help         show this help\n",
        DSH_DEFAULT_ENDPOINT);
}

//  Bad usage or a failed start: one line on stderr, exit status 2.
static int
s_fail (const char *format, ...) __attribute__ ((format (printf, 1, 2)));

static int
s_fail (const char *format, ...)
{
    va_list args;
    va_start (args, format);
    fprintf (stderr, "dsh-stage: ");
    vfprintf (stderr, format, args);
    fprintf (stderr, "\n");
    va_end (args);
    return 2;
}

//  The settings in a ZPL file, or NULL with a reason.
static zconfig_t *
s_load_settings (const char *path, char *error, size_t error_size)
{
    if (!zsys_file_exists (path)) {
        snprintf (error, error_size, "%s: no such file", path);
        return NULL;
    }
    //  Not zconfig_load: czmq 4.2 leaks its zfile on text that does not parse
    zchunk_t *chunk = zchunk_slurp (path, 0);
    zconfig_t *root = chunk? zconfig_chunk_load (chunk): NULL;
    zchunk_destroy (&chunk);
    if (!root)
        snprintf (error, error_size, "%s: not a valid ZPL file", path);
    return root;
}

int
main (int argc, char *argv [])
{
    static const struct option options [] = {
        { "broker", required_argument, NULL, 'b' },
        { "name", required_argument, NULL, 'n' },
        { "kind", required_argument, NULL, 'k' },
        { "config", required_argument, NULL, 'c' },
        { "cert", required_argument, NULL, 'C' },
        { "broker-cert", required_argument, NULL, 'K' },
        { "allow", required_argument, NULL, 'A' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *broker = NULL, *name = NULL, *kind = NULL, *config = NULL;
    const char *cert = NULL, *broker_cert = NULL, *allow = NULL;
    opterr = 0;
    int option;
    while ((option = getopt_long (argc, argv, ":h", options, NULL)) != -1) {
        switch (option) {
            case 'b': broker = optarg; break;
            case 'n': name = optarg; break;
            case 'k': kind = optarg; break;
            case 'c': config = optarg; break;
            case 'C': cert = optarg; break;
            case 'K': broker_cert = optarg; break;
            case 'A': allow = optarg; break;
            case 'h': s_usage (stdout); return 0;
            case ':':
                return s_fail ("option %s needs a value (try --help)", argv [optind - 1]);
            default:
                if (optopt)
                    return s_fail ("unknown option -%c (try --help)", optopt);
                return s_fail ("unknown option %s (try --help)", argv [optind - 1]);
        }
    }
    if (optind < argc)
        return s_fail ("unexpected argument \"%s\" (try --help)", argv [optind]);
    if (!name || !kind)
        return s_fail ("--name NAME and --kind KIND are required (try --help)");
    char curve_error [512];
    if (dsh_curve_setup (cert, broker_cert, curve_error, sizeof (curve_error)))
        return s_fail ("%s", curve_error);
    if (allow && !dsh_curve_on ())
        return s_fail ("--allow needs --cert and --broker-cert: the approvals socket serves with this stage's key");
    if (!dsh_middleware_known (kind))
        return s_fail ("unknown kind \"%s\" (limit, permission, plan, hooks, sandbox, trace, pass)", kind);
    if (!broker) {
        broker = getenv ("DSH_BROKER");
        if (!broker || !*broker)
            broker = DSH_DEFAULT_ENDPOINT;
    }
    char list_error [512];
    zlistx_t *brokers = dsh_sock_brokers (broker, list_error, sizeof (list_error));
    if (!brokers)
        return s_fail ("%s", list_error);
    zlistx_destroy (&brokers);
    zsys_init ();
    //  stdout carries only the start line, for whoever launched us
    zsys_set_logstream (dsh_log_stream (stderr));

    char error [512] = "";
    zconfig_t *settings = NULL;
    if (config && !(settings = s_load_settings (config, error, sizeof (error))))
        return s_fail ("%s", error);
    //  With --allow, what this stage binds (a permission stage's approvals
    //  socket) serves CURVE with its own key, checked against that
    //  allow-list by the keystore here
    zactor_t *keystore = NULL;
    if (allow) {
        keystore = zactor_new (dsh_keystore_actor, NULL);
        zstr_sendx (keystore, "CURVE", allow, NULL);
        if (zsock_wait (keystore)) {
            zactor_destroy (&keystore);
            zconfig_destroy (&settings);
            return s_fail ("cannot serve the allow-list %s (the log above says why)", allow);
        }
        dsh_curve_set_server (dsh_curve_cert ());
    }
    dsh_middleware_context_t context = { .name = name, .broker = broker };
    dsh_stage_callbacks_t callbacks = { 0 };
    void *arg = NULL;
    int rc = dsh_middleware_setup (kind, settings, &context, &callbacks, &arg, error, sizeof (error));
    zconfig_destroy (&settings);
    if (rc) {
        zactor_destroy (&keystore);
        return s_fail ("%s: %s", config? config: name, error);
    }

    dsh_stage_t *stage = dsh_stage_new (name, &callbacks, arg);
    if (!stage) {
        if (callbacks.on_destroy)
            callbacks.on_destroy (arg);
        zactor_destroy (&keystore);
        return s_fail ("invalid stage name \"%s\" (1-64 of A-Z a-z 0-9 _ . -)", name);
    }
    if (dsh_stage_attach (stage, broker, ATTACH_TIMEOUT_MS)) {
        dsh_stage_destroy (&stage);
        zactor_destroy (&keystore);
        return s_fail ("cannot attach stage %s to %s (is it an external stage of that broker? the log above "
                       "says which broker)", name, broker);
    }
    printf ("dsh-stage: %s (%s) attached to %s\n", name, kind, broker);
    fflush (stdout);
    while (!zsys_interrupted)
        zclock_sleep (100);
    dsh_stage_destroy (&stage);
    zactor_destroy (&keystore);
    return 0;
}
