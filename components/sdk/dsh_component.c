/*  =========================================================================
    dsh_component - what every tool component program does around its tools
    =========================================================================
*/

#include "dsh_component.h"
#include "dsh_log.h"
#include "dsh_beacon.h"
#include "dsh_proto.h"
#include "dsh_curve.h"
#include "dsh_sock.h"
#include "dsh_trace.h"

#include <getopt.h>
#include <stdarg.h>

//  The common flags, as getopt_long sees them; the program's own follow
//  with values from 256 up.
static const struct option s_common [] = {
    { "broker", required_argument, NULL, 'b' },
    { "id", required_argument, NULL, 'i' },
    { "workers", required_argument, NULL, 'w' },
    { "queue", required_argument, NULL, 'q' },
    { "prefix", required_argument, NULL, 'p' },
    { "cert", required_argument, NULL, 'c' },
    { "broker-cert", required_argument, NULL, 'k' },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
};
#define COMMON_COUNT (sizeof (s_common) / sizeof (s_common [0]))
#define EXTRA_MAX 16
//  How long the spans still queued at exit may take to go out
#define S_TRACE_FLUSH_MS 2000

int
dsh_component_usage_error (const dsh_component_options_t *self, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    fprintf (stderr, "%s: ", self->program? self->program: "dsh");
    vfprintf (stderr, format, args);
    fprintf (stderr, " (try --help)\n");
    va_end (args);
    return 2;
}

//  A whole number from min to max, or -1.
static long
s_number (const char *text, long min, long max)
{
    char *end = NULL;
    errno = 0;
    long number = strtol (text, &end, 10);
    return errno || end == text || *end || number < min || number > max? -1: number;
}

int
dsh_component_parse (dsh_component_options_t *self, int argc, char *argv [],
                     const dsh_component_flag_t *extra)
{
    assert (self);
    struct option options [COMMON_COUNT + EXTRA_MAX + 1];
    memset (options, 0, sizeof (options));
    memcpy (options, s_common, sizeof (s_common));
    size_t extras = 0;
    for (; extra && extra [extras].name; extras++) {
        assert (extras < EXTRA_MAX);
        options [COMMON_COUNT + extras] = (struct option) { extra [extras].name, required_argument, NULL,
                                                            256 + (int) extras };
    }
    if (!self->prefix)
        self->prefix = "";
    opterr = 0;
    optind = 1;
    int option;
    long number;
    while ((option = getopt_long (argc, argv, ":vh", options, NULL)) != -1) {
        switch (option) {
            case 'b': self->broker = optarg; break;
            case 'i':
                if (!dsh_proto_valid_id (optarg, strlen (optarg)))
                    return dsh_component_usage_error (self, "invalid component id \"%s\"", optarg);
                self->id = optarg;
                break;
            case 'p': self->prefix = optarg; break;
            case 'c': self->cert = optarg; break;
            case 'k': self->broker_cert = optarg; break;
            case 'v': self->verbose = true; break;
            case 'h': return 1;
            case 'w':
                if ((number = s_number (optarg, 1, 1024)) < 0)
                    return dsh_component_usage_error (self, "--workers needs a number from 1 to 1024, not \"%s\"",
                                                      optarg);
                self->workers = (size_t) number;
                break;
            case 'q':
                if ((number = s_number (optarg, 1, 1000000)) < 0)
                    return dsh_component_usage_error (self, "--queue needs a number from 1 to 1000000, not \"%s\"",
                                                      optarg);
                self->queue = (size_t) number;
                break;
            case ':':
                return dsh_component_usage_error (self, "option %s needs a value", argv [optind - 1]);
            case '?':
                if (optopt)
                    return dsh_component_usage_error (self, "unknown option -%c", optopt);
                return dsh_component_usage_error (self, "unknown option %s", argv [optind - 1]);
            default:
                *extra [option - 256].value = optarg;
        }
    }
    if (optind < argc)
        return dsh_component_usage_error (self, "unexpected argument \"%s\"", argv [optind]);
    char error [512];
    if (dsh_curve_setup (self->cert, self->broker_cert, error, sizeof (error)))
        return dsh_component_usage_error (self, "%s", error);
    if (!self->broker) {
        self->broker = getenv ("DSH_BROKER");
        if (!self->broker || !*self->broker)
            self->broker = DSH_DEFAULT_ENDPOINT;
    }
    //  A bad list is the user's to fix now, not a provider that never starts
    zlistx_t *brokers = dsh_sock_brokers (self->broker, error, sizeof (error));
    if (!brokers)
        return dsh_component_usage_error (self, "%s", error);
    zlistx_destroy (&brokers);
    return 0;
}

int
dsh_component_serve (const dsh_component_options_t *self, const dsh_component_tool_t *tools,
                     size_t count, void *arg, const char *what)
{
    assert (self);
    assert (tools);
    //  The provider keeps pointers to the definitions: these copies with
    //  their prefixed names live until it is destroyed
    dsh_tooldef_t *defs = (dsh_tooldef_t *) zmalloc (count * sizeof (dsh_tooldef_t));
    char **names = (char **) zmalloc (count * sizeof (char *));
    int status = 0;
    for (size_t index = 0; index < count; index++) {
        names [index] = zsys_sprintf ("%s%s", self->prefix? self->prefix: "", tools [index].def->name);
        defs [index] = *tools [index].def;
        defs [index].name = names [index];
        if (status == 0 && !dsh_proto_valid_name (names [index], strlen (names [index])))
            status = dsh_component_usage_error (self, "prefix \"%s\" makes an invalid tool name", self->prefix);
    }
    dsh_provider_t *provider = NULL;
    char *brokers = NULL;
    if (status == 0) {
        zsys_init ();
        //  stdout carries only the start line, for whoever launched us
        zsys_set_logstream (dsh_log_stream (stderr));
        //  Every component exports its spans (each call's execute_tool,
        //  dsh_provider) when the standard OTEL_ variables say where; a
        //  variable it cannot read leaves tracing off, and the tools served
        char error [512];
        if (dsh_trace_start (self->program, error, sizeof (error)))
            fprintf (stderr, "%s: tracing is off: %s\n", self->program, error);
        //  "beacon[:PORT]" entries become the brokers heard on the LAN
        brokers = dsh_beacon_resolve (self->broker, 0, error, sizeof (error));
        if (!brokers) {
            fprintf (stderr, "%s: %s\n", self->program, error);
            status = 1;
        }
    }
    if (status == 0) {
        //  Held until every tool is in, so the broker's first view of this
        //  component (its JOINED event) has all of them
        dsh_provider_options_t settings = {
            .broker = brokers, .id = self->id, .workers = self->workers, .queue_limit = self->queue
        };
        provider = dsh_provider_new_options (&settings);
        if (!provider) {
            fprintf (stderr, "%s: cannot start the provider\n", self->program);
            status = 1;
        }
    }
    for (size_t index = 0; index < count && status == 0; index++)
        if (dsh_provider_add (provider, &defs [index], tools [index].handler, arg) != 0) {
            fprintf (stderr, "%s: cannot add tool %s\n", self->program, names [index]);
            status = 1;
        }
    if (status == 0) {
        dsh_provider_start (provider);
        if (dsh_provider_wait_ready (provider, 3000) != 0)
            fprintf (stderr, "%s: no answer from the broker yet; still trying\n", self->program);
        printf ("%s: component %s serving ", self->program, dsh_provider_id (provider));
        if (what)
            printf ("%s", what);
        else
            for (size_t index = 0; index < count; index++)
                printf ("%s%s", index? ", ": "", names [index]);
        printf (" via %s\n", brokers);
        fflush (stdout);
        while (!zsys_interrupted)
            zclock_sleep (100);
    }
    //  Withdraws first: no handler runs once this returns, so every span
    //  has ended, and what is still queued goes out before exit
    dsh_provider_destroy (&provider);
    dsh_trace_stop (S_TRACE_FLUSH_MS);
    zstr_free (&brokers);
    for (size_t index = 0; index < count; index++)
        zstr_free (&names [index]);
    free (names);
    free (defs);
    return status;
}
