/*  =========================================================================
    dsh_cli - what the files of the dsh command line share

    dsh_cli.c holds main, the command table and the option parsing. Each
    family of commands is a file pair of its own (dsh_cli_query, _call,
    _chain, _approver, _audit, _pins, _setup): a new command is an entry in
    the table and a run function in its family's file. What they all use
    is here: the options (every flag of every command, parsed once), the
    exit codes, asking a broker (dsh_cli_request.c) and printing what it
    said (dsh_cli_print.c).
    =========================================================================
*/

#ifndef DSH_CLI_H_INCLUDED
#define DSH_CLI_H_INCLUDED

#include "dsh_client.h"

#include <czmq.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#define EXIT_TOOL_ERROR     1
#define EXIT_USAGE          2
#define EXIT_NO_BROKER      3
#define EXIT_INTERRUPTED    130         //  call: Ctrl-C and no answer to the cancel

#define QUERY_TIMEOUT_MS    5000
#define WATCH_POLL_MS       250         //  how often watch looks at SIGINT
//  The broker gives up on a silent stage after 5 s and says so: wait longer
#define CONTROL_TIMEOUT_MS  7000

#define JSON_DOCUMENT       (JSON_INDENT (2) | JSON_PRESERVE_ORDER)
#define JSON_LINE           (JSON_COMPACT | JSON_PRESERVE_ORDER)

//  Everything the command line says.
typedef struct {
    const char *broker;         //  --broker, else $DSH_BROKER, else the default
    int timeout_ms;             //  --timeout-ms; 0 = the command's default
    const char *agent;          //  call --agent
    const char *format;         //  schemas --format
    long count;                 //  watch --count; -1 = until SIGINT
    const char *stage;          //  --stage; NULL = the command's default stage
    const char *auto_outcome;   //  approver --auto: "allow" or "deny"; NULL = ask stdin
    const char *batch;          //  call --batch: a file of calls, "-" for stdin
    const char *cert;           //  --cert, else $DSH_CERT: our CURVE keypair
    const char *broker_cert;    //  --broker-cert, else $DSH_BROKER_CERT
    const char *role;           //  keygen --role
    const char *components;     //  keygen --components
    const char *tools;          //  keygen --tools
    const char *name;           //  keygen --name
    bool json;                  //  stats --json: JSON even on a terminal
    const char *tool;           //  audit --tool
    const char *outcome;        //  audit --outcome
    const char *since;          //  audit --since
    const char *until;          //  audit --until
    const char *call_id;        //  audit --call
    long limit;                 //  audit --limit; 0 = the default
    bool follow;                //  audit --follow
    const char *digest;         //  pins accept --digest
    const char *grant_for;      //  approve --for: minutes, or 30s, 15m, 2h
    bool grant_args;            //  approve --args: for these exact arguments
    long grant_minutes;         //  approver --grant-minutes; 0 = the request's
    const char *rate;           //  limit set --rate, --burst, --in-flight: as typed
    const char *burst;
    const char *in_flight;
    const char *args [4];       //  positional arguments
    int nargs;
} dsh_cli_options_t;

//  What a command accepts, and what it does.
typedef struct {
    const char *name;
    const char *synopsis;
    const char *summary;
    const char *flags;          //  the long flags it takes besides the global ones, space-separated
    int min_args;
    int max_args;
    int (*run) (dsh_cli_options_t *options);
} dsh_cli_command_t;

//  --- dsh_cli.c: the commands ----------------------------------------------

//  The command of this name, or NULL.
const dsh_cli_command_t *
    dsh_cli_command_named (const char *name);

//  Reports bad usage (format takes detail) and the command's usage on
//  stderr; returns the exit code for it.
int
    dsh_cli_usage_error (const dsh_cli_command_t *command, const char *format, const char *detail);

//  --- dsh_cli_request.c: asking a broker ------------------------------------

//  The broker (or list of brokers) to ask: --broker, else $DSH_BROKER,
//  else the default.
const char *
    dsh_cli_endpoint (dsh_cli_options_t *options);

//  A client of the broker, or NULL after saying why on stderr.
dsh_client_t *
    dsh_cli_client (dsh_cli_options_t *options);

//  A client of the broker at endpoint, for one request, or NULL with the
//  reason in error and *exit_code set.
dsh_client_t *
    dsh_cli_client_at (const char *endpoint, int *exit_code, char *error, size_t error_size);

//  Sends a query and waits for its reply (the expected command): its body
//  as JSON, without the id; or NULL with the reason on stderr and
//  *exit_code set if there is none or it is an error.
json_t *
    dsh_cli_query (dsh_client_t *client, dsh_cli_options_t *options, const char *command, const char *name,
                   const char *expected, int *exit_code);

//  One query on a client of its own: the reply body, or NULL with the
//  reason on stderr and *exit_code set.
json_t *
    dsh_cli_query_once (dsh_cli_options_t *options, const char *command, const char *expected, int *exit_code);

//  A reply's body as JSON, without its id, or NULL with the reason in
//  error and *exit_code set.
json_t *
    dsh_cli_reply_body (dsh_reply_t *reply, int *exit_code, char *error, size_t error_size);

//  A control command to stage through the broker at endpoint; the reply
//  body, or NULL with the reason in error and *exit_code set if no reply
//  came or the stage said {ok: false}.
json_t *
    dsh_cli_control_at (dsh_cli_options_t *options, const char *endpoint, const char *stage, const char *command,
                        json_t *args, int *exit_code, char *error, size_t error_size);

//  The same through the broker the options name, with the reason on
//  stderr.
json_t *
    dsh_cli_control (dsh_cli_options_t *options, const char *stage, const char *command, json_t *args,
                     int *exit_code);

//  Runs a control command and prints the reply's data (or, if it has none,
//  the reply itself). Takes args. Returns the exit code.
int
    dsh_cli_control_print (dsh_cli_options_t *options, const char *stage, const char *command, json_t *args);

//  --- dsh_cli_print.c: printing what a broker said -------------------------

//  Prints json on stdout, one document (JSON_DOCUMENT) or one line
//  (JSON_LINE), and flushes.
void
    dsh_cli_print (json_t *json, size_t flags);

//  The string at key in object, or otherwise.
const char *
    dsh_cli_string (json_t *object, const char *key, const char *otherwise);

//  The local wall time of ms since 1970 in format (strftime's).
void
    dsh_cli_local_time (int64_t ms, const char *format, char *text, size_t size);

//  Text as a terminal may show it: controls and bidirectional marks become
//  a visible \uXXXX. Caller frees it (free).
char *
    dsh_cli_terminal_text (const char *text, bool keep_newlines);

//  One labelled line; value shown as the terminal may.
void
    dsh_cli_terminal_field (const char *label, const char *value);

//  A table column for the strings at key of rows: no wider than 40, nor
//  narrower than its heading.
int
    dsh_cli_column_width (json_t *rows, const char *key, const char *heading);

//  The first 12 hex digits of the digest at key, or "-".
void
    dsh_cli_digest_short (json_t *object, const char *key, char *text, size_t size);

#endif
