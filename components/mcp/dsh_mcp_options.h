/*  =========================================================================
    dsh_mcp_options - the command line both MCP programs share

    dsh-mcp and dsh-mcp-bridge take the same broker options (--broker,
    --cert, --broker-cert), -v and -h, and report bad usage alike:
    "PROGRAM: what is wrong (try --help)" on stderr and exit code 2. This
    module parses those, hands every other option to the program's own
    handler, and checks the broker list and the CURVE keys once the
    program has checked its own options.
    =========================================================================
*/

#ifndef DSH_MCP_OPTIONS_H_INCLUDED
#define DSH_MCP_OPTIONS_H_INCLUDED

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The exit code of bad usage.
#define DSH_MCP_EXIT_USAGE  2

//  The options both programs take.
typedef struct {
    const char *program;        //  the name bad usage is reported under
    const char *broker;         //  --broker; after finish, else $DSH_BROKER; NULL: the default
    const char *cert;           //  --cert
    const char *broker_cert;    //  --broker-cert
    bool verbose;               //  -v, --verbose
} dsh_mcp_options_t;

//  A program's handler of one of its own options (the val of its struct
//  option entry, and the option's value or NULL). Returns 0, or the exit
//  code to end with (after saying why).
typedef int (dsh_mcp_option_fn) (int option, const char *value, void *arg);

//  Parses argv: the shared options into self, the program's own (own, a
//  table ending in a zeroed entry, with vals other than 'b', 'C', 'K',
//  'v' and 'h') through handle. With stop_at_command, parsing stops at the
//  first argument that is not an option (a command's own options stay
//  its). Returns -1 to go on, optind then being the first argument not
//  parsed; else the exit code to end with: 0 after usage (stdout) for
//  --help, DSH_MCP_EXIT_USAGE after saying what is wrong.
int
    dsh_mcp_options_parse (dsh_mcp_options_t *self, int argc, char *argv [], const struct option *own,
                           bool stop_at_command, dsh_mcp_option_fn *handle, void (*usage) (FILE *stream),
                           void *arg);

//  The number in text, from min to max, into *value. Returns 0, or
//  DSH_MCP_EXIT_USAGE after saying "NAME needs a number from MIN to MAX".
int
    dsh_mcp_options_number (dsh_mcp_options_t *self, const char *name, const char *text, long min, long max,
                            long *value);

//  Reports bad usage: "PROGRAM: message (try --help)" on stderr. Returns
//  DSH_MCP_EXIT_USAGE.
int
    dsh_mcp_options_bad_usage (dsh_mcp_options_t *self, const char *format, ...)
    __attribute__ ((format (printf, 2, 3)));

//  After the program's own checks: sets up CURVE from the keys given,
//  takes $DSH_BROKER when --broker was not given, and checks the broker
//  list. Returns 0, or DSH_MCP_EXIT_USAGE after saying what is wrong.
int
    dsh_mcp_options_finish (dsh_mcp_options_t *self);

#ifdef __cplusplus
}
#endif

#endif
