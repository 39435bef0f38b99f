/*  =========================================================================
    dsh_mcp_options - the command line both MCP programs share
    =========================================================================
*/

#include "dsh_mcp_options.h"
#include "dsh_curve.h"
#include "dsh_sock.h"

#include <czmq.h>
#include <stdarg.h>

//  The options every MCP program takes, before its own.
static const struct option s_shared [] = {
    { "broker", required_argument, NULL, 'b' },
    { "cert", required_argument, NULL, 'C' },
    { "broker-cert", required_argument, NULL, 'K' },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
};

#define SHARED_COUNT (sizeof (s_shared) / sizeof (s_shared [0]))

int
dsh_mcp_options_bad_usage (dsh_mcp_options_t *self, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    fprintf (stderr, "%s: ", self->program);
    vfprintf (stderr, format, args);
    fprintf (stderr, " (try --help)\n");
    va_end (args);
    return DSH_MCP_EXIT_USAGE;
}

int
dsh_mcp_options_number (dsh_mcp_options_t *self, const char *name, const char *text, long min, long max,
                        long *value)
{
    char *end = NULL;
    long number = strtol (text, &end, 10);
    if (end == text || *end || number < min || number > max)
        return dsh_mcp_options_bad_usage (self, "%s needs a number from %ld to %ld, not \"%s\"", name, min, max,
                                          text);
    *value = number;
    return 0;
}

int
dsh_mcp_options_parse (dsh_mcp_options_t *self, int argc, char *argv [], const struct option *own,
                       bool stop_at_command, dsh_mcp_option_fn *handle, void (*usage) (FILE *stream), void *arg)
{
    size_t own_count = 0;
    while (own [own_count].name)
        own_count++;
    struct option *table = (struct option *) zmalloc ((SHARED_COUNT + own_count + 1) * sizeof (struct option));
    memcpy (table, s_shared, sizeof (s_shared));
    memcpy (table + SHARED_COUNT, own, own_count * sizeof (struct option));
    opterr = 0;
    int exit_code = -1;
    int option;
    while (exit_code < 0
    &&     (option = getopt_long (argc, argv, stop_at_command? "+:vh": ":vh", table, NULL)) != -1) {
        switch (option) {
            case 'b': self->broker = optarg; break;
            case 'C': self->cert = optarg; break;
            case 'K': self->broker_cert = optarg; break;
            case 'v': self->verbose = true; break;
            case 'h': usage (stdout); exit_code = 0; break;
            case ':':
                exit_code = dsh_mcp_options_bad_usage (self, "option %s needs a value", argv [optind - 1]);
                break;
            case '?':
                if (optopt)
                    exit_code = dsh_mcp_options_bad_usage (self, "unknown option -%c", optopt);
                else
                    exit_code = dsh_mcp_options_bad_usage (self, "unknown option %s", argv [optind - 1]);
                break;
            default: {
                int rc = handle (option, optarg, arg);
                if (rc)
                    exit_code = rc;
            }
        }
    }
    free (table);
    return exit_code;
}

int
dsh_mcp_options_finish (dsh_mcp_options_t *self)
{
    char error [512];
    if (dsh_curve_setup (self->cert, self->broker_cert, error, sizeof (error)))
        return dsh_mcp_options_bad_usage (self, "%s", error);
    if (!self->broker) {
        self->broker = getenv ("DSH_BROKER");
        if (self->broker && !*self->broker)
            self->broker = NULL;
    }
    zlistx_t *brokers = dsh_sock_brokers (self->broker, error, sizeof (error));
    if (!brokers)
        return dsh_mcp_options_bad_usage (self, "%s", error);
    zlistx_destroy (&brokers);
    return 0;
}
