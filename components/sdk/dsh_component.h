/*  =========================================================================
    dsh_component - what every tool component program does around its tools

    A component program (dsh-demo, dsh-fs, yours) takes the same flags,
    --broker, --id, --workers, --queue, --prefix, --cert, --broker-cert and
    -v, answers bad usage
    the same way, and serves its typed tools the same way: find the broker,
    announce, print one start line on stdout, serve until SIGINT or SIGTERM,
    withdraw. This is that part, so a program's main is its own flags and
    its tools:

        dsh_component_options_t options = { .program = "dsh-demo" };
        int status = dsh_component_parse (&options, argc, argv, NULL);
        if (status == 1)
            return s_usage (stdout), 0;
        if (status == 0)
            status = dsh_component_serve (&options, s_tools, TOOL_COUNT, NULL, NULL);
        return status;
    =========================================================================
*/

#ifndef DSH_COMPONENT_H_INCLUDED
#define DSH_COMPONENT_H_INCLUDED

#include "dsh_provider.h"

#ifdef __cplusplus
extern "C" {
#endif

//  A typed tool and its handler.
typedef struct {
    const dsh_tooldef_t *def;
    dsh_handler_fn *handler;
} dsh_component_tool_t;

//  A flag of the program's own that takes a value: --name VALUE.
typedef struct {
    const char *name;           //  without the dashes; NULL ends a list
    const char **value;         //  where the value goes
} dsh_component_flag_t;

//  The common settings, filled by dsh_component_parse.
typedef struct {
    const char *program;        //  the program's name, for messages (set by the caller)
    const char *broker;         //  --broker (one endpoint or a comma list),
                                //  else $DSH_BROKER, else the default
    const char *id;             //  --id, else a fresh one
    size_t workers;             //  --workers (0: the SDK's default)
    size_t queue;               //  --queue (0: the SDK's default)
    const char *prefix;         //  --prefix, "" for none
    const char *cert;           //  --cert, else $DSH_CERT: this component's keypair
    const char *broker_cert;    //  --broker-cert, else $DSH_BROKER_CERT
    bool verbose;               //  -v
} dsh_component_options_t;

//  The --help lines for the common flags.
#define DSH_COMPONENT_FLAGS_HELP \
    "  --broker ENDPOINT[,ENDPOINT...]\n" \
    "                     the brokers' front endpoints: the tools are offered at each\n" \
    "                     (default: $DSH_BROKER, else " DSH_DEFAULT_ENDPOINT ");\n" \
    "                     beacon[:PORT]: the brokers heard on the LAN (dsh-broker --beacon)\n" \
    "  --id ID            the component id (default: a fresh one)\n" \
    "  --workers N        handler threads, 1-1024 (default: 4)\n" \
    "  --queue N          calls that may wait for a thread before new ones are answered\n" \
    "                     OVERLOADED, 1-1000000 (default: 1024)\n" \
    "  --prefix P         prefix every tool name with P\n" \
    "  --cert FILE        this component's CURVE keypair (default: $DSH_CERT)\n" \
    "  --broker-cert FILE the broker's public certificate (default: $DSH_BROKER_CERT)\n" \
    "  -v, --verbose      log every call on stderr\n" \
    "  -h, --help         show this help\n"

//  Parse argv: the common flags, and extra (the program's own, may be
//  NULL). Returns 0 to go on, 1 if --help was asked (print usage, exit 0),
//  or 2 after printing a one-line usage error (exit 2).
int
    dsh_component_parse (dsh_component_options_t *self, int argc, char *argv [],
                         const dsh_component_flag_t *extra);

//  Print "<program>: <message> (try --help)" on stderr; returns 2.
int
    dsh_component_usage_error (const dsh_component_options_t *self, const char *format, ...)
        CHECK_PRINTF (2);

//  Serve tools (their names prefixed) until SIGINT or SIGTERM, arg going
//  to every handler; start the process's tracer (dsh_trace_start, named
//  after the program; the OTEL_ variables say whether and where spans go)
//  and flush it on the way out; print "<program>: component <id> serving <what> via
//  <broker>" once the broker has answered (what NULL: the tool names);
//  withdraw on the way out. A "beacon[:PORT]" broker is first resolved by
//  listening for beacons (dsh_beacon_resolve). Returns the exit status: 0,
//  1 if the provider could not start or no broker beacon was heard, 2 if
//  the prefix makes a name invalid.
int
    dsh_component_serve (const dsh_component_options_t *self, const dsh_component_tool_t *tools,
                         size_t count, void *arg, const char *what);

#ifdef __cplusplus
}
#endif

#endif
