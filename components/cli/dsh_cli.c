/*  =========================================================================
    dsh - the command line client of a dsh broker

    Queries the registry, calls tools and watches changes, shows and steers
    the execution chain (plan mode, approvals, grants), reviews pinned tool
    definitions, printing JSON on stdout and one-line errors on stderr, so
    that scripts and tests can use it (`dsh approver` on a terminal talks
    to a person instead, and `dsh pins` and `dsh grants` print tables
    unless --json). Exit codes: 0 done, 1 the broker answered with an error (or the tool
    result has isError), 2 bad usage or bad JSON arguments, 3 no reply from
    the broker in time, 130 a call interrupted (Ctrl-C) whose cancel got no
    answer. Every wait is bounded by a timeout.
    =========================================================================
*/

#include "dsh_beacon.h"
#include "dsh_log.h"
#include "dsh_client.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_render.h"
#include "dsh_sock.h"
#include "dsh_curve.h"
#include "dsh_watcher.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_TOOL_ERROR     1
#define EXIT_USAGE          2
#define EXIT_NO_BROKER      3
#define EXIT_INTERRUPTED    130         //  call: Ctrl-C and no answer to the cancel

#define QUERY_TIMEOUT_MS    5000
#define AUDIT_TIMEOUT_MS    30000       //  audit: the store is read per query
#define AUDIT_VERIFY_TIMEOUT_MS 600000  //  audit verify: the whole chain is read
#define PINS_TIMEOUT_MS     10000       //  pins: accept and forget write the store
#define WATCH_POLL_MS       250         //  how often watch looks at SIGINT
//  The broker gives up on a silent stage after 5 s and says so: wait longer
#define CONTROL_TIMEOUT_MS  7000
#define CALL_MARGIN_MS      2000        //  as the SDK: a lost broker must not hang a call
#define CANCEL_WAIT_MS      2000        //  after Ctrl-C, how long call waits for the answer
#define APPROVER_HELLO_MS   1000        //  the stage forgets an approver silent for 3 s
#define APPROVER_POLL_MS    250
#define APPROVER_STAGE_SILENT_MS 3000   //  the stage heartbeats every 0.5 s
//  A PENDING carries the call's arguments whole, so it is as large as a
//  call (the broker's max_message_bytes, 16 MiB by default): a smaller
//  limit would cut the link on every large request and hide it for good
#define APPROVER_MAX_MESSAGE (4 * DSH_MAX_MESSAGE_DEFAULT)
#define STDIN_LINE_MAX      1024
#define GRANT_MINUTES_DEFAULT 15        //  the permission stage's grant_minutes default

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
    const char *args [2];       //  positional arguments
    int nargs;
} options_t;

//  What a command accepts, and what it does.
typedef struct {
    const char *name;
    const char *synopsis;
    const char *summary;
    const char *flags;          //  the long flags it takes besides the global ones, space-separated
    int min_args;
    int max_args;
    int (*run) (options_t *options);
} command_t;

static int s_ping (options_t *options);
static int s_tools (options_t *options);
static int s_get (options_t *options);
static int s_call (options_t *options);
static int s_watch (options_t *options);
static int s_schemas (options_t *options);
static int s_chain (options_t *options);
static int s_mode (options_t *options);
static int s_approve (options_t *options);
static int s_deny (options_t *options);
static int s_pending (options_t *options);
static int s_approver (options_t *options);
static int s_keygen (options_t *options);
static int s_brokers (options_t *options);
static int s_stats (options_t *options);
static int s_audit (options_t *options);
static int s_pins (options_t *options);
static int s_grants (options_t *options);
static json_t *s_control (options_t *options, const char *stage, const char *command, json_t *args,
                          int *exit_code);

static const command_t s_commands [] = {
    { "ping", "ping", "show the broker's status (PONG)", "", 0, 0, s_ping },
    { "tools", "tools", "list the registered tools as a JSON array", "", 0, 0, s_tools },
    { "get", "get NAME", "show one tool and its providers", "", 1, 1, s_get },
    { "call", "call NAME [JSON] [--agent ID] [--timeout-ms N] | call --batch FILE|- [--agent ID]",
      "call a tool with JSON arguments (default {}); exit 1 if the result is an error;\n"
      "progress shows on stderr (a bar on a terminal); Ctrl-C cancels the call; a broker\n"
      "that cannot be reached is given up on as ping does, not at the call's deadline.\n"
      "--batch runs a JSON array of {\"name\", \"arguments\"} as one model turn: runs of\n"
      "concurrency-safe tools in parallel, others alone and in order; prints the results\n"
      "in call order as a JSON array; exit 1 if any is an error",
      "agent batch", 0, 2, s_call },
    { "watch", "watch [--count N]",
      "print a snapshot, then every change, one JSON line each; stop after N changes",
      "count", 0, 0, s_watch },
    { "schemas", "schemas [--format json|openai|anthropic|mcp|markdown] [--agent ID [--stage NAME]]",
      "print the tool list rendered for a model provider; with --agent, only the tools the\n"
      "chain's stages (or the one --stage names) could let that agent call",
      "format agent stage", 0, 0, s_schemas },
    { "chain", "chain",
      "show the execution chain's stages and their counters as a JSON array", "", 0, 0, s_chain },
    { "stats", "stats [--json]",
      "show the broker's call statistics (STATS): per tool, component and agent; JSON, or a\n"
      "table with p50 and p99 (from the histogram) when stdout is a terminal and --json is not given",
      "json", 0, 0, s_stats },
    { "audit", "audit [verify] [--agent A] [--tool T] [--outcome CODE] [--since T] [--until T] [--call ID] [--limit N] [--follow] [--json]",
      "print the audit trail's records (the latest --limit, default 20, oldest first): one JSON\n"
      "line each, or a table on a terminal (unless --json); T is ms since 1970, an ISO date\n"
      "(2026-12-01 or 2026-12-01T10:00:00, UTC) or an age (90s, 15m, 2h, 7d); --follow keeps\n"
      "printing new ones. With a broker list, every broker's records, merged by time.\n"
      "audit verify: recompute every chain's hashes; exit 1 naming the first record that does\n"
      "not match. Needs an admin or auditor key under CURVE. Waits up to 30 s for an answer (verify:\n"
      "10 min; --timeout-ms sets it)",
      "agent tool outcome since until call limit follow json", 0, 1, s_audit },
    { "mode", "mode AGENT plan|normal [--stage NAME]",
      "put an agent into plan mode or take it out (stage default \"plan\")", "stage", 2, 2, s_mode },
    { "approve", "approve ID [--for MINUTES [--args]] [--stage NAME]",
      "allow a call waiting for approval, once (stage default \"permission\"); with --for, a\n"
      "grant: every call of this agent to this tool for MINUTES (or 30s, 15m, 2h), with\n"
      "--args only calls with these exact arguments; a grant ends early if the tool's\n"
      "definition or the chain changes", "stage for args", 1, 1, s_approve },
    { "deny", "deny ID [--stage NAME]",
      "reject a call waiting for approval (stage default \"permission\")", "stage", 1, 1, s_deny },
    { "pending", "pending [--stage NAME]",
      "list the calls waiting for approval (stage default \"permission\")", "stage", 0, 0, s_pending },
    { "approver", "approver [--stage NAME] [--auto allow|deny] [--grant-minutes N]",
      "be an approver: print each request and its resolution as a JSON line; decide from stdin\n"
      "(\"allow ID\", \"deny ID\", \"y\" or \"n\" for the latest request, \"allow ID for N\" to\n"
      "grant this agent the tool for N minutes, \"allow ID args for N\" these exact arguments)\n"
      "or, with --auto, answer every request alike; on a terminal, show each request readably\n"
      "and ask for it: y once, n deny, t this agent and tool, a these exact arguments, for\n"
      "--grant-minutes N (default: the stage's); runs until interrupted or stdin ends",
      "stage auto grant-minutes", 0, 0, s_approver },
    { "grants", "grants [list | revoke ID] [--json]",
      "list the live grants of every permission stage of every broker (a table: agent, tool,\n"
      "scope, arguments digest, expiry, who gave it; --json: a JSON array), or end one",
      "json", 0, 2, s_grants },
    { "pins", "pins [list | show NAME | accept NAME [--digest D] | reject NAME | forget NAME] [--json]",
      "review pinned tool definitions: list the pins and the quarantined tools (a table), show\n"
      "one with what changed, accept its offered definition (pinned and released at once; with\n"
      "--digest, only if it is still that one), reject it (it stays quarantined) or forget the\n"
      "pin; accept, reject and forget go to every broker of the list. --json: the replies as\n"
      "JSON. Needs an admin key under CURVE (list and show: admin, auditor or approver)",
      "digest json", 0, 2, s_pins },
    { "keygen", "keygen PATH --role component|agent|approver|stage|admin|auditor [--components IDS [--tools NAMES]] [--agent ID] [--name N]",
      "write a CURVE keypair: PATH (public, for the broker's allow-list directory) and\n"
      "PATH_secret (keep it private). The role, the component ids a component key may serve\n"
      "(comma-separated patterns, e.g. \"fs-*\"), the tool names it may announce (--tools,\n"
      "patterns; default any) and the agent id of an agent key go into its metadata,\n"
      "which the broker enforces", "role components tools agent name", 1, 1, s_keygen },
    { "brokers", "brokers [beacon[:PORT]] [--timeout-ms N]",
      "listen for broker beacons on UDP PORT (default 7579) for N ms (default 2500) and print\n"
      "the brokers heard as a JSON array of {endpoint, curve, epoch}; exit 3 if none",
      "", 0, 1, s_brokers },
};

#define COMMAND_COUNT (sizeof (s_commands) / sizeof (s_commands [0]))

static const command_t *
s_command_named (const char *name)
{
    for (size_t index = 0; index < COMMAND_COUNT; index++)
        if (streq (name, s_commands [index].name))
            return &s_commands [index];
    return NULL;
}

static void
s_usage (FILE *stream, const command_t *command)
{
    if (command) {
        fprintf (stream, "usage: dsh [--broker ENDPOINT[,ENDPOINT...]] [--timeout-ms N] [--cert FILE --broker-cert FILE] "
                 "%s\n\n%s\n",
                 command->synopsis, command->summary);
        return;
    }
    fprintf (stream, "usage: dsh [--broker ENDPOINT[,ENDPOINT...]] [--timeout-ms N] COMMAND ...\n\ncommands:\n");
    for (size_t index = 0; index < COMMAND_COUNT; index++) {
        fprintf (stream, "  %s\n", s_commands [index].synopsis);
        //  Every line of the summary under the synopsis, indented alike
        const char *line = s_commands [index].summary;
        while (*line) {
            size_t length = strcspn (line, "\n");
            fprintf (stream, "      %.*s\n", (int) length, line);
            line += length + (line [length] == '\n');
        }
    }
    fprintf (stream, "\noptions:\n"
             "  --broker ENDPOINT[,ENDPOINT...]\n"
             "                      the broker's front, or a list of brokers (default $DSH_BROKER,\n"
             "                      else %s): commands use one at a time and move to\n"
             "                      the next when it is silent; mode, pins accept, reject and\n"
             "                      forget are sent to every one, grants asks every one\n"
             "  --timeout-ms N      how long to wait for the broker (default %d; for call: the call's\n"
             "                      deadline, default %d, plus a margin)\n"
             "  --cert FILE         our CURVE keypair, from dsh keygen (default $DSH_CERT)\n"
             "  --broker-cert FILE  the broker's public certificate (default $DSH_BROKER_CERT)\n"
             "  -h, --help          this help\n",
             DSH_DEFAULT_ENDPOINT, QUERY_TIMEOUT_MS, DSH_DEFAULT_CALL_TIMEOUT_MS);
}

//  Reports bad usage; returns the exit code for it.
static int
s_usage_error (const command_t *command, const char *format, const char *detail)
{
    fprintf (stderr, "dsh: ");
    fprintf (stderr, format, detail);
    fprintf (stderr, "\n");
    s_usage (stderr, command);
    return EXIT_USAGE;
}

static bool
s_parse_count (const char *text, long min, long max, long *value)
{
    char *end;
    errno = 0;
    long number = strtol (text, &end, 10);
    if (errno || end == text || *end || number < min || number > max)
        return false;
    *value = number;
    return true;
}

//  True if command takes the long flag name (besides the global ones).
static bool
s_takes (const command_t *command, const char *name)
{
    if (!command)
        return false;
    size_t size = strlen (name);
    const char *flag = command->flags;
    while (*flag) {
        size_t length = strcspn (flag, " ");
        if (length == size && memcmp (flag, name, size) == 0)
            return true;
        flag += length;
        flag += strspn (flag, " ");
    }
    return false;
}

//  Parses argv from index on into options. Without a command, stops at the
//  first argument that is not a flag and returns its index; with one, takes
//  the rest. Returns -1 after printing usage (help: *exit_code 0).
static int
s_parse (int argc, char *argv [], int index, const command_t *command,
         options_t *options, int *exit_code)
{
    bool flags_done = false;
    for (; index < argc; index++) {
        const char *arg = argv [index];
        //  a negative number is an argument (a JSON value), not a flag
        bool is_flag = !flags_done && arg [0] == '-' && arg [1] && !(arg [1] >= '0' && arg [1] <= '9');
        if (!is_flag) {
            if (!command)
                return index;
            if (options->nargs >= command->max_args) {
                *exit_code = s_usage_error (command, "unexpected argument \"%s\"", arg);
                return -1;
            }
            options->args [options->nargs++] = arg;
            continue;
        }
        if (streq (arg, "--")) {
            flags_done = true;
            continue;
        }
        if (streq (arg, "-h") || streq (arg, "--help")) {
            s_usage (stdout, command);
            *exit_code = 0;
            return -1;
        }
        if (strncmp (arg, "--", 2) != 0) {
            *exit_code = s_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
        }
        //  --name value, or --name=value
        char name [32];
        const char *value = NULL;
        const char *equals = strchr (arg, '=');
        size_t name_size = equals? (size_t) (equals - arg - 2): strlen (arg + 2);
        if (name_size >= sizeof (name)) {
            *exit_code = s_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
        }
        memcpy (name, arg + 2, name_size);
        name [name_size] = 0;
        bool known = streq (name, "broker") || streq (name, "timeout-ms")
                  || streq (name, "cert") || streq (name, "broker-cert")
                  || s_takes (command, name);
        if (!known) {
            *exit_code = s_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
        }
        if (streq (name, "json") || streq (name, "follow") || streq (name, "args")) {
            //  The flags without a value
            if (equals) {
                *exit_code = s_usage_error (command, "this flag takes no value: \"%s\"", arg);
                return -1;
            }
            if (streq (name, "json"))
                options->json = true;
            else
            if (streq (name, "follow"))
                options->follow = true;
            else
                options->grant_args = true;
            continue;
        }
        if (equals)
            value = equals + 1;
        else
        if (index + 1 < argc)
            value = argv [++index];
        else {
            *exit_code = s_usage_error (command, "option \"%s\" needs a value", arg);
            return -1;
        }
        long number;
        if (streq (name, "broker")) {
            if (!*value) {
                *exit_code = s_usage_error (command, "%s: empty endpoint", arg);
                return -1;
            }
            options->broker = value;
        }
        else
        if (streq (name, "timeout-ms")) {
            if (!s_parse_count (value, 1, INT_MAX / 2, &number)) {
                *exit_code = s_usage_error (command, "--timeout-ms needs a positive number of ms, not \"%s\"", value);
                return -1;
            }
            options->timeout_ms = (int) number;
        }
        else
        if (streq (name, "agent"))
            options->agent = value;
        else
        if (streq (name, "count")) {
            if (!s_parse_count (value, 0, LONG_MAX, &number)) {
                *exit_code = s_usage_error (command, "--count needs a number, not \"%s\"", value);
                return -1;
            }
            options->count = number;
        }
        else
        if (streq (name, "format")) {
            if (!dsh_render_format_from_name (value)) {
                *exit_code = s_usage_error (command, "unknown format \"%s\"", value);
                return -1;
            }
            options->format = value;
        }
        else
        if (streq (name, "stage")) {
            if (!*value) {
                *exit_code = s_usage_error (command, "%s: empty stage name", arg);
                return -1;
            }
            options->stage = value;
        }
        else
        if (streq (name, "batch"))
            options->batch = value;
        else
        if (streq (name, "tool"))
            options->tool = value;
        else
        if (streq (name, "outcome"))
            options->outcome = value;
        else
        if (streq (name, "since"))
            options->since = value;
        else
        if (streq (name, "until"))
            options->until = value;
        else
        if (streq (name, "call"))
            options->call_id = value;
        else
        if (streq (name, "limit")) {
            if (!s_parse_count (value, 1, 10000, &number)) {
                *exit_code = s_usage_error (command, "--limit needs a number from 1 to 10000, not \"%s\"", value);
                return -1;
            }
            options->limit = number;
        }
        else
        if (streq (name, "cert"))
            options->cert = value;
        else
        if (streq (name, "broker-cert"))
            options->broker_cert = value;
        else
        if (streq (name, "role"))
            options->role = value;
        else
        if (streq (name, "components"))
            options->components = value;
        else
        if (streq (name, "tools"))
            options->tools = value;
        else
        if (streq (name, "name"))
            options->name = value;
        else
        if (streq (name, "digest"))
            options->digest = value;
        else
        if (streq (name, "for"))
            options->grant_for = value;
        else
        if (streq (name, "grant-minutes")) {
            if (!s_parse_count (value, 1, 1000000, &number)) {
                *exit_code = s_usage_error (command, "--grant-minutes needs a positive number of minutes, not \"%s\"",
                                            value);
                return -1;
            }
            options->grant_minutes = number;
        }
        else
        if (streq (name, "auto")) {
            if (!streq (value, "allow") && !streq (value, "deny")) {
                *exit_code = s_usage_error (command, "--auto takes allow or deny, not \"%s\"", value);
                return -1;
            }
            options->auto_outcome = value;
        }
    }
    if (command && options->nargs < command->min_args) {
        *exit_code = s_usage_error (command, "%s: missing argument", command->name);
        return -1;
    }
    return index;
}

static const char *
s_endpoint (options_t *options)
{
    if (options->broker)
        return options->broker;
    const char *broker = getenv ("DSH_BROKER");
    return broker && *broker? broker: DSH_DEFAULT_ENDPOINT;
}

static void
s_print (json_t *json, size_t flags)
{
    char *text = json_dumps (json, flags | JSON_ENCODE_ANY);
    if (text) {
        fputs (text, stdout);
        fputc ('\n', stdout);
        fflush (stdout);
    }
    free (text);
}

//  The string at key in object, or otherwise.
static const char *
s_string (json_t *object, const char *key, const char *otherwise)
{
    const char *value = json_string_value (json_object_get (object, key));
    return value? value: otherwise;
}

//  The local wall time of ms since 1970 in format (strftime's).
static void
s_local_time (int64_t ms, const char *format, char *text, size_t size)
{
    time_t seconds = (time_t) (ms / 1000);
    struct tm tm;
    localtime_r (&seconds, &tm);
    if (!strftime (text, size, format, &tm))
        snprintf (text, size, "?");
}

static dsh_client_t *
s_client (options_t *options)
{
    dsh_client_t *client = dsh_client_new (s_endpoint (options));
    if (!client)
        fprintf (stderr, "dsh: cannot connect to broker at %s\n", s_endpoint (options));
    return client;
}

//  Sends a query and waits for its reply (the expected command), printing
//  the reason and setting *exit_code if there is none or it is an error.
static json_t *
s_query (dsh_client_t *client, options_t *options, const char *command, const char *name,
         const char *expected, int *exit_code)
{
    char error [512];
    int timeout_ms = options->timeout_ms? options->timeout_ms: QUERY_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_request (client, command, name, timeout_ms, error, sizeof (error));
    if (!reply) {
        fprintf (stderr, "dsh: %s\n", error);
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (streq (dsh_reply_command (reply), DSH_ERROR)) {
        const char *text = dsh_reply_text (reply);
        fprintf (stderr, "dsh: %s\n", text? text: "the broker refused the request");
        *exit_code = EXIT_TOOL_ERROR;
    }
    else
    if (!streq (dsh_reply_command (reply), expected)) {
        fprintf (stderr, "dsh: unexpected %s reply to %s\n", dsh_reply_command (reply), command);
        *exit_code = EXIT_TOOL_ERROR;
    }
    else {
        body = dsh_reply_json (reply);
        if (body)
            json_object_del (body, "id");      //  the client's own, not the broker's news
        else {
            fprintf (stderr, "dsh: the %s reply has no JSON form\n", expected);
            *exit_code = EXIT_TOOL_ERROR;
        }
    }
    dsh_reply_destroy (&reply);
    return body;
}

//  One query on a client of its own: the reply body, or NULL with the
//  reason on stderr and *exit_code set.
static json_t *
s_query_once (options_t *options, const char *command, const char *expected, int *exit_code)
{
    dsh_client_t *client = s_client (options);
    if (!client) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = s_query (client, options, command, NULL, expected, exit_code);
    dsh_client_destroy (&client);
    return body;
}

static int
s_ping (options_t *options)
{
    int exit_code = 0;
    json_t *body = s_query_once (options, DSH_PING, DSH_PONG, &exit_code);
    if (body)
        s_print (body, JSON_DOCUMENT);
    json_decref (body);
    return exit_code;
}

//  The registry's tool entries (a JSON array), or NULL with *exit_code set.
static json_t *
s_list (options_t *options, int *exit_code)
{
    dsh_client_t *client = s_client (options);
    if (!client) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = s_query (client, options, DSH_LIST, NULL, DSH_TOOLS, exit_code);
    dsh_client_destroy (&client);
    json_t *tools = body? json_object_get (body, "tools"): NULL;
    if (body && !json_is_array (tools)) {
        fprintf (stderr, "dsh: the TOOLS reply has no tools array\n");
        *exit_code = EXIT_TOOL_ERROR;
        tools = NULL;
    }
    json_incref (tools);
    json_decref (body);
    return tools;
}

static int
s_tools (options_t *options)
{
    int exit_code = 0;
    json_t *tools = s_list (options, &exit_code);
    if (tools)
        s_print (tools, JSON_DOCUMENT);
    json_decref (tools);
    return exit_code;
}

static int
s_get (options_t *options)
{
    dsh_client_t *client = s_client (options);
    if (!client)
        return EXIT_NO_BROKER;
    int exit_code = 0;
    json_t *body = s_query (client, options, DSH_GET, options->args [0], DSH_TOOL, &exit_code);
    if (body)
        s_print (body, JSON_DOCUMENT);
    json_decref (body);
    dsh_client_destroy (&client);
    return exit_code;
}

//  Waits for the RESULT of call_id: at most the call's deadline plus a
//  margin. Ctrl-C (or SIGTERM) cancels the call instead, and then waits at
//  most CANCEL_WAIT_MS for the broker's answer to it. NULL if none came.
//  Whether a progress bar is on the terminal's last line.
static bool s_bar_shown;

//  A call's progress on stderr: a bar on a terminal, plain lines otherwise.
static void
s_progress_show (dsh_reply_t *reply)
{
    const msgpack_object *body = dsh_reply_body (reply);
    const msgpack_object *progress = dsh_map_get (body, "progress");
    const msgpack_object *total = dsh_map_get (body, "total");
    const msgpack_object *message = dsh_map_get (body, "message");
    double done = progress && (progress->type == MSGPACK_OBJECT_FLOAT64 || progress->type == MSGPACK_OBJECT_FLOAT32)?
        progress->via.f64: progress && progress->type == MSGPACK_OBJECT_POSITIVE_INTEGER? (double) progress->via.u64: 0;
    double all = total && (total->type == MSGPACK_OBJECT_FLOAT64 || total->type == MSGPACK_OBJECT_FLOAT32)?
        total->via.f64: total && total->type == MSGPACK_OBJECT_POSITIVE_INTEGER? (double) total->via.u64: -1;
    int text_size = message && message->type == MSGPACK_OBJECT_STR? (int) message->via.str.size: 0;
    const char *text = text_size? message->via.str.ptr: "";
    if (text_size > 60)
        text_size = 60;
    if (isatty (STDERR_FILENO)) {
        char bar [31];
        int filled = all > 0? (int) (30 * (done > all? 1: done / all)): 0;
        for (int index = 0; index < 30; index++)
            bar [index] = index < filled? '#': '.';
        bar [30] = 0;
        if (all > 0)
            fprintf (stderr, "\r[%s] %g/%g %.*s\033[K", bar, done, all, text_size, text);
        else
            fprintf (stderr, "\r%g %.*s\033[K", done, text_size, text);
        s_bar_shown = true;
    }
    else
    if (all > 0)
        fprintf (stderr, "progress %g/%g %.*s\n", done, all, text_size, text);
    else
        fprintf (stderr, "progress %g %.*s\n", done, text_size, text);
    fflush (stderr);
}

static void
s_progress_end (void)
{
    if (s_bar_shown)
        fprintf (stderr, "\n");
    s_bar_shown = false;
}

static dsh_reply_t *
s_call_wait (dsh_client_t *client, const char *call_id, int timeout_ms, bool *interrupted, int *waited_ms)
{
    int wait_ms = (timeout_ms > 0? timeout_ms: DSH_DEFAULT_CALL_TIMEOUT_MS) + CALL_MARGIN_MS;
    int64_t started = zclock_mono ();
    int64_t give_up = started + wait_ms;
    //  A broker that cannot be reached is given up on as ping gives it up,
    //  not at the call's deadline
    int connect_ms = wait_ms < QUERY_TIMEOUT_MS? wait_ms: QUERY_TIMEOUT_MS;
    *interrupted = false;
    *waited_ms = wait_ms;
    while (true) {
        if (zsys_interrupted && !*interrupted) {
            *interrupted = true;
            if (dsh_client_cancel (client, call_id))
                return NULL;
            give_up = zclock_mono () + CANCEL_WAIT_MS;
        }
        int64_t now = zclock_mono ();
        if (!*interrupted && now - started >= connect_ms && !dsh_client_connected (client)) {
            *waited_ms = connect_ms;
            return NULL;
        }
        int64_t left = give_up - now;
        if (left <= 0 || dsh_client_handshake_failure (client))
            return NULL;
        //  Short waits, so that a signal is seen even if it does not
        //  interrupt the poll
        dsh_reply_t *reply = dsh_client_recv (client, left < WATCH_POLL_MS? (int) left: WATCH_POLL_MS);
        bool ours = reply && dsh_reply_call_id (reply) && streq (dsh_reply_call_id (reply), call_id);
        if (ours && streq (dsh_reply_command (reply), DSH_RESULT)) {
            s_progress_end ();
            return reply;
        }
        if (ours && streq (dsh_reply_command (reply), DSH_PROGRESS))
            s_progress_show (reply);
        dsh_reply_destroy (&reply);        //  shown, or a stray reply
    }
}

//  call --batch: one model turn's calls, the way coding agents run them.
static int
s_call_batch (options_t *options)
{
    json_error_t parse_error;
    json_t *calls = streq (options->batch, "-")?
        json_loadf (stdin, JSON_REJECT_DUPLICATES, &parse_error):
        json_load_file (options->batch, JSON_REJECT_DUPLICATES, &parse_error);
    if (!calls) {
        fprintf (stderr, "dsh: invalid batch %s: %s (line %d)\n", options->batch, parse_error.text, parse_error.line);
        return EXIT_USAGE;
    }
    dsh_client_t *client = s_client (options);
    if (!client) {
        json_decref (calls);
        return EXIT_NO_BROKER;
    }
    char error [512];
    json_t *results = dsh_client_batch (client, calls, options->agent, options->timeout_ms, error, sizeof (error));
    int exit_code = 0;
    if (!results) {
        fprintf (stderr, "dsh: %s\n", error);
        exit_code = json_is_array (calls)? EXIT_NO_BROKER: EXIT_USAGE;
        if (strstr (error, "batch entry"))
            exit_code = EXIT_USAGE;
    }
    else {
        s_print (results, JSON_DOCUMENT);
        for (size_t index = 0; index < json_array_size (results); index++)
            if (json_is_true (json_object_get (json_array_get (results, index), "isError")))
                exit_code = EXIT_TOOL_ERROR;
        json_decref (results);
    }
    json_decref (calls);
    dsh_client_destroy (&client);
    return exit_code;
}

static int
s_call (options_t *options)
{
    if (options->batch) {
        if (options->nargs) {
            fprintf (stderr, "dsh: call --batch takes no NAME or JSON\n");
            return EXIT_USAGE;
        }
        return s_call_batch (options);
    }
    if (options->nargs < 1) {
        fprintf (stderr, "dsh: call: missing argument (try dsh call --help)\n");
        return EXIT_USAGE;
    }
    const char *args_json = options->nargs > 1? options->args [1]: "{}";
    //  Checked here so that bad input is a usage error and nothing is sent
    char error [512];
    msgpack_sbuffer args;
    if (dsh_json_text_to_msgpack (args_json, &args, error, sizeof (error))) {
        msgpack_sbuffer_destroy (&args);
        fprintf (stderr, "dsh: invalid JSON arguments: %s\n", error);
        return EXIT_USAGE;
    }
    dsh_client_t *client = s_client (options);
    if (!client) {
        msgpack_sbuffer_destroy (&args);
        return EXIT_NO_BROKER;
    }
    const char *sent = dsh_client_call_send (client, NULL, options->args [0], args.data, args.size,
                                             options->agent, NULL, 0, options->timeout_ms);
    msgpack_sbuffer_destroy (&args);
    if (!sent) {
        fprintf (stderr, "dsh: cannot send to broker at %s: %s\n", s_endpoint (options), zmq_strerror (errno));
        dsh_client_destroy (&client);
        return EXIT_NO_BROKER;
    }
    char *call_id = strdup (sent);
    bool interrupted;
    int waited_ms;
    dsh_reply_t *reply = s_call_wait (client, call_id, options->timeout_ms, &interrupted, &waited_ms);
    int exit_code = 0;
    if (!reply) {
        if (interrupted) {
            fprintf (stderr, "dsh: interrupted; the broker did not answer the cancel within %d ms\n",
                     CANCEL_WAIT_MS);
            exit_code = EXIT_INTERRUPTED;
        }
        else {
            dsh_client_explain_silence (client, waited_ms, error, sizeof (error));
            fprintf (stderr, "dsh: %s\n", error);
            exit_code = EXIT_NO_BROKER;
        }
    }
    else {
        json_t *body = dsh_reply_json (reply);
        if (body) {
            s_print (body, JSON_DOCUMENT);
            json_decref (body);
        }
        else
            fprintf (stderr, "dsh: the RESULT has no JSON form\n");
        exit_code = (body && !dsh_reply_is_error (reply))? 0: EXIT_TOOL_ERROR;
    }
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    dsh_client_destroy (&client);
    return exit_code;
}

static int
s_watch (options_t *options)
{
    const char *endpoint = s_endpoint (options);
    dsh_watcher_t *watcher = dsh_watcher_new (endpoint);
    if (!watcher) {
        fprintf (stderr, "dsh: cannot connect to broker at %s\n", endpoint);
        return EXIT_NO_BROKER;
    }
    int exit_code = 0;
    int timeout_ms = options->timeout_ms? options->timeout_ms: QUERY_TIMEOUT_MS;
    json_t *notice = dsh_watcher_recv (watcher, timeout_ms);
    if (!notice && !zsys_interrupted) {
        fprintf (stderr, "dsh: no reply from broker at %s within %d ms\n", endpoint, timeout_ms);
        exit_code = EXIT_NO_BROKER;
    }
    long changes = 0;
    while (notice) {
        s_print (notice, JSON_LINE);
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        if (!kind || !streq (kind, "snapshot"))
            changes++;
        json_decref (notice);
        notice = NULL;
        if (options->count >= 0 && changes >= options->count)
            break;
        while (!notice && !zsys_interrupted)
            notice = dsh_watcher_recv (watcher, WATCH_POLL_MS);
    }
    dsh_watcher_destroy (&watcher);
    return exit_code;
}

static int
s_schemas (options_t *options)
{
    int exit_code = 0;
    json_t *tools = s_list (options, &exit_code);
    if (!tools)
        return exit_code;
    if (options->agent && !options->stage) {
        //  Every stage of the chain judges, on the tools' entries
        dsh_client_t *client = s_client (options);
        char error [256] = "";
        json_t *kept = client? dsh_client_allowed (client, options->agent, tools, 5000, error, sizeof (error)): NULL;
        dsh_client_destroy (&client);
        json_decref (tools);
        if (!kept) {
            fprintf (stderr, "dsh: cannot ask the chain which tools agent \"%s\" may call: %s\n", options->agent,
                     *error? error: "no broker");
            return EXIT_NO_BROKER;
        }
        tools = kept;
    }
    else
    if (options->agent) {
        //  Ask that stage alone which of them the agent could call
        json_t *args = json_pack ("{s:s, s:O}", "agent", options->agent, "tools", tools);
        json_t *reply = s_control (options, options->stage? options->stage: "permission", "allowed", args,
                                   &exit_code);
        json_decref (args);
        if (!reply) {
            json_decref (tools);
            return exit_code;
        }
        json_t *allowed = json_object_get (reply, "data");
        json_t *kept = json_array ();
        for (size_t index = 0; index < json_array_size (tools); index++) {
            json_t *tool = json_array_get (tools, index);
            const char *name = json_string_value (json_object_get (tool, "name"));
            for (size_t other = 0; name && other < json_array_size (allowed); other++)
                if (json_equal (json_object_get (tool, "name"), json_array_get (allowed, other))) {
                    json_array_append (kept, tool);
                    break;
                }
        }
        json_decref (reply);
        json_decref (tools);
        tools = kept;
    }
    char *text = dsh_render (tools, dsh_render_format_from_name (options->format? options->format: "json"));
    json_decref (tools);
    if (!text) {
        fprintf (stderr, "dsh: cannot render the tool list\n");
        return EXIT_TOOL_ERROR;
    }
    size_t size = strlen (text);
    fputs (text, stdout);
    if (size == 0 || text [size - 1] != '\n')
        fputc ('\n', stdout);
    fflush (stdout);
    free (text);
    return 0;
}

//  ---------------------------------------------------------------------
//  The execution chain

//  Sends a control command to stage and returns its reply body (without
//  the id) as JSON. NULL, with the reason on stderr and *exit_code set, if
//  no reply came or the stage said {ok: false}.
//  A reply's body as JSON, without its id, or NULL with the reason in
//  error and *exit_code set.
static json_t *
s_reply_body (dsh_reply_t *reply, int *exit_code, char *error, size_t error_size)
{
    json_t *body = dsh_reply_json (reply);
    if (body)
        json_object_del (body, "id");
    else {
        snprintf (error, error_size, "the %s reply has no JSON form", dsh_reply_command (reply));
        *exit_code = EXIT_TOOL_ERROR;
    }
    return body;
}

//  A client of the broker at endpoint, for one request, or NULL with the
//  reason in error and *exit_code set.
static dsh_client_t *
s_client_at (const char *endpoint, int *exit_code, char *error, size_t error_size)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    if (!client) {
        snprintf (error, error_size, "cannot connect to broker at %s", endpoint);
        *exit_code = EXIT_NO_BROKER;
    }
    return client;
}

//  A control command through the broker at endpoint; the reply body, or
//  NULL with the reason in error and *exit_code set.
static json_t *
s_control_at (options_t *options, const char *endpoint, const char *stage, const char *command, json_t *args,
              int *exit_code, char *error, size_t error_size)
{
    dsh_client_t *client = s_client_at (endpoint, exit_code, error, error_size);
    if (!client)
        return NULL;
    int timeout_ms = options->timeout_ms? options->timeout_ms: CONTROL_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_control (client, stage, command, args, timeout_ms, error, error_size);
    dsh_client_destroy (&client);
    if (!reply) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (dsh_reply_is_error (reply)) {
        //  {ok: false} from the stage, or an ERROR from a broker that
        //  cannot take CONTROL
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: "the stage refused the command");
        *exit_code = EXIT_TOOL_ERROR;
    }
    else
    if (!streq (dsh_reply_command (reply), DSH_CONTROL)) {
        snprintf (error, error_size, "unexpected %s reply to CONTROL", dsh_reply_command (reply));
        *exit_code = EXIT_TOOL_ERROR;
    }
    else
        body = s_reply_body (reply, exit_code, error, error_size);
    dsh_reply_destroy (&reply);
    return body;
}

static json_t *
s_control (options_t *options, const char *stage, const char *command, json_t *args, int *exit_code)
{
    char error [512];
    json_t *body = s_control_at (options, s_endpoint (options), stage, command, args, exit_code,
                                 error, sizeof (error));
    if (!body)
        fprintf (stderr, "dsh: %s\n", error);
    return body;
}

//  Runs a control command and prints the reply's data (or, if it has none,
//  the reply itself). Takes args.
static int
s_control_print (options_t *options, const char *stage, const char *command, json_t *args)
{
    int exit_code = 0;
    json_t *body = s_control (options, stage, command, args, &exit_code);
    json_decref (args);
    if (body) {
        json_t *data = json_object_get (body, "data");
        s_print (data? data: body, JSON_DOCUMENT);
    }
    json_decref (body);
    return exit_code;
}

static int
s_chain (options_t *options)
{
    int exit_code = 0;
    json_t *body = s_query_once (options, DSH_CHAIN, DSH_CHAIN, &exit_code);
    json_t *stages = json_object_get (body, "stages");
    if (json_is_array (stages))
        s_print (stages, JSON_DOCUMENT);
    else
    if (body) {
        fprintf (stderr, "dsh: the CHAIN reply has no stages array\n");
        exit_code = EXIT_TOOL_ERROR;
    }
    json_decref (body);
    return exit_code;
}

//  A mode is state in each broker's stage, and a client may be served by
//  any broker of the list: so it is set in every one, and each answer is
//  shown. With one broker the answer's data is printed as it is; with
//  several, an array of {broker, ok, data | error}, one per broker in list
//  order, and the exit code says whether every broker took it.
static int
s_mode (options_t *options)
{
    const char *mode = options->args [1];
    if (!streq (mode, "plan") && !streq (mode, "normal"))
        return s_usage_error (s_command_named ("mode"), "the mode is plan or normal, not \"%s\"", mode);
    const char *stage = options->stage? options->stage: "plan";
    json_t *args = json_pack ("{s:s, s:s}", "agent", options->args [0], "mode", mode);
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (s_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    if (zlistx_size (brokers) == 1) {
        zlistx_destroy (&brokers);
        return s_control_print (options, stage, "mode", args);
    }
    int exit_code = 0;
    json_t *answers = json_array ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        int broker_exit = 0;
        json_t *body = s_control_at (options, broker, stage, "mode", args, &broker_exit, error, sizeof (error));
        json_t *answer = json_pack ("{s:s, s:b}", "broker", broker, "ok", body != NULL);
        if (body) {
            json_t *data = json_object_get (body, "data");
            json_object_set (answer, "data", data? data: body);
        }
        else {
            fprintf (stderr, "dsh: broker %s did not take mode %s for agent %s: %s\n", broker, mode,
                     options->args [0], error);
            json_object_set_new (answer, "error", json_string (error));
            if (!exit_code)
                exit_code = broker_exit;
        }
        json_array_append_new (answers, answer);
        json_decref (body);
    }
    s_print (answers, JSON_DOCUMENT);
    json_decref (answers);
    json_decref (args);
    zlistx_destroy (&brokers);
    return exit_code;
}

//  A grant's length as typed: minutes (15), or 30s, 15m, 2h. Returns 0
//  with *seconds set, or -1.
static int
s_grant_seconds (const char *text, int64_t *seconds)
{
    char *end = NULL;
    errno = 0;
    long long number = strtoll (text, &end, 10);
    if (errno || end == text || number <= 0 || number > 1000000)
        return -1;
    int64_t unit = !*end || streq (end, "m")? 60: streq (end, "s")? 1: streq (end, "h")? 3600: 0;
    if (!unit)
        return -1;
    *seconds = (int64_t) number * unit;
    return 0;
}

//  Puts a grant's length into a decision: whole minutes as minutes, what
//  the stage takes by default, anything shorter as seconds.
static void
s_grant_length_set (json_t *decision, int64_t seconds)
{
    if (seconds % 60 == 0)
        json_object_set_new (decision, "minutes", json_integer (seconds / 60));
    else
        json_object_set_new (decision, "seconds", json_integer (seconds));
}

static int
s_approve (options_t *options)
{
    json_t *args = json_pack ("{s:s}", "id", options->args [0]);
    if (options->grant_for || options->grant_args) {
        int64_t seconds = 0;
        if (options->grant_for && s_grant_seconds (options->grant_for, &seconds)) {
            json_decref (args);
            return s_usage_error (s_command_named ("approve"),
                                  "--for takes minutes (15) or a length (30s, 15m, 2h), not \"%s\"",
                                  options->grant_for);
        }
        json_object_set_new (args, "scope", json_string (options->grant_args? "arguments": "tool"));
        if (seconds)
            s_grant_length_set (args, seconds);
    }
    return s_control_print (options, options->stage? options->stage: "permission", "approve", args);
}

static int
s_deny (options_t *options)
{
    return s_control_print (options, options->stage? options->stage: "permission", "deny",
                            json_pack ("{s:s}", "id", options->args [0]));
}

static int
s_pending (options_t *options)
{
    return s_control_print (options, options->stage? options->stage: "permission", "pending", NULL);
}

//  ---------------------------------------------------------------------
//  The approver: a DEALER on a permission stage's approvals socket
//
//  Not on a terminal, it prints every request and outcome as a JSON line
//  (scripts and tests read them) and takes decisions from stdin. On a
//  terminal (stdin and stdout both), it shows one request at a time, oldest
//  first, readably, and asks y/N for it.

static void
s_json_release (json_t **json_p)
{
    json_decref (*json_p);
    *json_p = NULL;
}

typedef struct {
    //  One DEALER per approvals socket: one broker's built-in permission
    //  stage each, or one for a stage process that serves several brokers
    zsock_t *dealers [DSH_BROKERS_MAX];
    char *endpoints [DSH_BROKERS_MAX];
    size_t dealer_count;
    zhashx_t *routes;           //  open request id -> the index of its dealer, plus 1
    const char *auto_outcome;   //  "allow", "deny", or NULL: decisions come from stdin
    int64_t grant_minutes;      //  --grant-minutes: how long t and a grant; 0 = the request's
    bool terminal;              //  readable requests and a y/N prompt
    zlistx_t *open;             //  PENDING bodies (json_t) not yet resolved, oldest first
    char *decided;              //  terminal: the id just decided, until its RESOLVED comes
    char *shown;                //  terminal: the id whose details are on screen
    bool prompting;             //  terminal: a prompt is on screen, its answer not yet typed
    int64_t stage_heard;        //  last HEARTBEAT from the stage; 0 = none yet
    bool stage_silent;          //  said so on stderr
    char line [STDIN_LINE_MAX]; //  stdin read so far, not yet a whole line
    size_t line_size;
    bool line_too_long;         //  dropping the rest of an overlong line
    bool stdin_done;
} approver_t;

//  Sends COMMAND body on approvals socket index; returns 0 or -1.
static int
s_approver_send (approver_t *self, size_t index, const char *command, json_t *body)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    int rc = dsh_json_to_msgpack (&packer.pk, body);
    if (rc == 0) {
        zmsg_t *msg = dsh_proto_message (NULL, command);
        zframe_t *frame = dsh_packer_frame (&packer);
        zmsg_append (msg, &frame);
        rc = dsh_sock_send (self->dealers [index], &msg);
    }
    dsh_packer_release (&packer);
    if (rc)
        fprintf (stderr, "dsh: cannot send %s to the approvals socket at %s\n", command, self->endpoints [index]);
    return rc;
}

//  Sends COMMAND body on every approvals socket.
static void
s_approver_send_all (approver_t *self, const char *command, json_t *body)
{
    for (size_t index = 0; index < self->dealer_count; index++)
        s_approver_send (self, index, command, body);
}

//  Sends the DECIDE body; on a terminal, waits for its outcome before
//  showing the next request (unless it could not be sent: then there is
//  none to wait for). Takes body.
static void
s_approver_send_decision (approver_t *self, const char *id, json_t *body)
{
    char *decided = strdup (id);
    //  To the stage that asked; an id no stage asked for goes to the first,
    //  which says there is no such request
    size_t route = (size_t) zhashx_lookup (self->routes, id);
    size_t index = route? route - 1: 0;
    if (s_approver_send (self, index, "DECIDE", body) == 0 && self->terminal) {
        zstr_free (&self->decided);
        self->decided = decided;
        decided = NULL;
    }
    zstr_free (&decided);
    json_decref (body);
}

//  Decides request id once: outcome "allow" or "deny".
static void
s_approver_decide (approver_t *self, const char *id, const char *outcome)
{
    s_approver_send_decision (self, id, json_pack ("{s:s, s:s}", "id", id, "outcome", outcome));
}

static json_t *s_approver_find (approver_t *self, const char *id);

//  Allows request id and grants the like of it for seconds: scope "tool"
//  (this agent, this tool, any arguments) or "arguments" (these exact
//  ones). Bound to the digests the request showed, when it is known.
static void
s_approver_grant (approver_t *self, const char *id, const char *scope, int64_t seconds)
{
    json_t *body = json_pack ("{s:s, s:s, s:s}", "id", id, "outcome", "allow", "scope", scope);
    s_grant_length_set (body, seconds);
    json_t *request = s_approver_find (self, id);
    const char *keys [] = { "argumentsDigest", "definitionDigest" };
    for (size_t index = 0; request && index < sizeof (keys) / sizeof (keys [0]); index++)
        if (json_is_string (json_object_get (request, keys [index])))
            json_object_set (body, keys [index], json_object_get (request, keys [index]));
    s_approver_send_decision (self, id, body);
}

//  Prints {"event": event, ...body} as one line.
static void
s_approver_print (const char *event, json_t *body)
{
    json_t *line = json_pack ("{s:s}", "event", event);
    json_object_update_missing (line, body);
    s_print (line, JSON_LINE);
    json_decref (line);
}

static const char *
s_request_id (json_t *request)
{
    return json_string_value (json_object_get (request, "id"));
}

//  The open request with this id, made the list's cursor; NULL if none.
static json_t *
s_approver_find (approver_t *self, const char *id)
{
    for (json_t *request = (json_t *) zlistx_first (self->open); request;
         request = (json_t *) zlistx_next (self->open))
        if (streq (s_request_id (request), id))
            return request;
    return NULL;
}

//  --- The terminal view ---------------------------------------------------

#define TERMINAL_STRING_MAX 1000    //  longer argument strings are shortened on screen

//  Text as a terminal may show it: whatever could move the cursor, recolour
//  the screen or reorder what is read (C0 and C1 controls, DEL, Unicode
//  bidirectional controls) becomes a visible \uXXXX, so a request cannot
//  disguise itself. keep_newlines lets a pretty-printed block keep its lines.
static char *
s_terminal_text (const char *text, bool keep_newlines)
{
    size_t size = strlen (text);
    char *safe = (char *) malloc (size * 6 + 1);
    assert (safe);
    char *out = safe;
    const unsigned char *in = (const unsigned char *) text;
    for (size_t index = 0; index < size; ) {
        unsigned int code = in [index];
        size_t length = 1;
        bool escape = code < 0x20 || code == 0x7f;
        if (code == 0xc2 && index + 1 < size && in [index + 1] >= 0x80 && in [index + 1] <= 0x9f) {
            code = in [index + 1];
            length = 2;
            escape = true;
        }
        else
        if (code == 0xe2 && index + 2 < size
        &&  (in [index + 1] & 0xc0) == 0x80 && (in [index + 2] & 0xc0) == 0x80) {
            unsigned int candidate = 0x2000u | ((in [index + 1] & 0x3fu) << 6) | (in [index + 2] & 0x3fu);
            if (candidate == 0x200e || candidate == 0x200f || (candidate >= 0x202a && candidate <= 0x202e)
            ||  (candidate >= 0x2066 && candidate <= 0x2069)) {
                code = candidate;
                length = 3;
                escape = true;
            }
        }
        if (keep_newlines && code == '\n')
            escape = false;
        if (escape)
            out += sprintf (out, "\\u%04x", code);
        else {
            memcpy (out, in + index, length);
            out += length;
        }
        index += length;
    }
    *out = 0;
    return safe;
}

//  A copy of value with every string longer than TERMINAL_STRING_MAX bytes
//  cut (at a character boundary) and marked. Sets *shortened if any was.
static json_t *
s_terminal_shorten (json_t *value, bool *shortened)
{
    if (json_is_string (value) && json_string_length (value) > TERMINAL_STRING_MAX) {
        const char *text = json_string_value (value);
        size_t cut = TERMINAL_STRING_MAX;
        while (cut > 0 && ((unsigned char) text [cut] & 0xc0) == 0x80)
            cut--;
        char *head = zsys_sprintf ("%.*s... [%zu more bytes]", (int) cut, text, json_string_length (value) - cut);
        json_t *copy = json_string (head);
        zstr_free (&head);
        *shortened = true;
        return copy;
    }
    if (json_is_object (value)) {
        json_t *copy = json_object ();
        const char *key;
        json_t *member;
        json_object_foreach (value, key, member)
            json_object_set_new (copy, key, s_terminal_shorten (member, shortened));
        return copy;
    }
    if (json_is_array (value)) {
        json_t *copy = json_array ();
        size_t index;
        json_t *member;
        json_array_foreach (value, index, member)
            json_array_append_new (copy, s_terminal_shorten (member, shortened));
        return copy;
    }
    return json_incref (value);
}

//  One labelled line; value shown as the terminal may.
static void
s_terminal_field (const char *label, const char *value)
{
    char *safe = s_terminal_text (value, false);
    printf ("  %-10s %s\n", label, safe);
    free (safe);
}

//  Whether the request's stage gives grants (its PENDING says so).
static bool
s_request_grants (json_t *request)
{
    return json_is_true (json_object_get (request, "grants"));
}

//  How long a t or an a answer grants, in minutes: --grant-minutes, else
//  the stage's default, never more than the stage's longest.
static int64_t
s_approver_grant_minutes (approver_t *self, json_t *request)
{
    int64_t minutes = self->grant_minutes? self->grant_minutes
                                         : (int64_t) json_integer_value (json_object_get (request, "grantMinutes"));
    if (minutes <= 0)
        minutes = GRANT_MINUTES_DEFAULT;
    int64_t longest = (int64_t) json_integer_value (json_object_get (request, "grantMaxMinutes"));
    return longest > 0 && minutes > longest? longest: minutes;
}

//  What a t or an a answer would grant, said before either is asked for.
static void
s_terminal_grants (approver_t *self, json_t *request)
{
    const char *agent = s_string (request, "agent", "");
    int64_t minutes = s_approver_grant_minutes (self, request);
    char until [16];
    s_local_time (zclock_time () + minutes * 60000, "%H:%M", until, sizeof (until));
    char *tool = s_terminal_text (s_string (request, "tool", "?"), false);
    char *caller = *agent? s_terminal_text (agent, false): NULL;
    char *who = caller? zsys_sprintf ("agent %s", caller): strdup ("calls with no agent");
    printf ("  t          allow %s for %s, any arguments, until %s (%ld min)\n", tool, who, until, (long) minutes);
    printf ("  a          allow %s for %s, these exact arguments only, until %s\n", tool, who, until);
    printf ("             either ends early if the tool's definition or the chain changes\n");
    free (tool);
    free (caller);
    zstr_free (&who);
}

//  Starts a line of our own even if a prompt is waiting for its answer.
static void
s_terminal_break (approver_t *self)
{
    if (self->prompting)
        putchar ('\n');
    self->prompting = false;
}

//  Shows the oldest open request (once) and asks for it; nothing while a
//  decision awaits its outcome, or nothing is open.
static void
s_terminal_prompt (approver_t *self)
{
    json_t *request = (json_t *) zlistx_first (self->open);
    if (self->decided || !request || self->prompting)
        return;
    const char *id = s_request_id (request);
    const char *tool = json_string_value (json_object_get (request, "tool"));
    const char *agent = json_string_value (json_object_get (request, "agent"));
    char *safe_tool = s_terminal_text (tool? tool: "?", false);
    if (!self->shown || !streq (self->shown, id)) {
        zstr_free (&self->shown);
        self->shown = strdup (id);
        printf ("\nrequest %s\n", id);
        s_terminal_field ("tool", tool? tool: "?");
        if (agent)
            s_terminal_field ("agent", agent);
        const char *call_id = json_string_value (json_object_get (request, "callId"));
        if (call_id)
            s_terminal_field ("call", call_id);
        bool shortened = false;
        json_t *arguments = s_terminal_shorten (json_object_get (request, "arguments"), &shortened);
        char *pretty = json_dumps (arguments, JSON_INDENT (2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
        json_decref (arguments);
        char *safe = s_terminal_text (pretty? pretty: "null", true);
        printf ("  arguments\n");
        for (char *line = safe, *next; line; line = next) {
            next = strchr (line, '\n');
            if (next)
                *next++ = 0;
            printf ("    %s\n", line);
        }
        if (shortened)
            printf ("  (long strings shortened here; `dsh pending` shows them whole)\n");
        free (safe);
        free (pretty);
        if (!self->auto_outcome && s_request_grants (request))
            s_terminal_grants (self, request);
    }
    size_t waiting = zlistx_size (self->open) - 1;
    if (self->auto_outcome) {
        printf ("-> %s (--auto %s)\n", streq (self->auto_outcome, "allow")? "allowing": "denying",
                self->auto_outcome);
        fflush (stdout);
        free (safe_tool);
        s_approver_decide (self, id, self->auto_outcome);
        return;
    }
    if (waiting)
        printf ("(%zu more waiting) ", waiting);
    const char *choices = s_request_grants (request)? "[y/N/t/a]": "[y/N]";
    if (agent) {
        char *safe_agent = s_terminal_text (agent, false);
        printf ("Allow %s for %s? %s ", safe_tool, safe_agent, choices);
        free (safe_agent);
    }
    else
        printf ("Allow %s? %s ", safe_tool, choices);
    fflush (stdout);
    free (safe_tool);
    self->prompting = true;
}

static const char *
s_terminal_outcome (const char *outcome)
{
    if (streq (outcome, "allowed"))
        return "allowed";
    if (streq (outcome, "rejected"))
        return "rejected";
    if (streq (outcome, "cancelled"))
        return "cancelled by the caller";
    if (streq (outcome, "unavailable"))
        return "closed: nobody decided in time";
    return outcome;
}

//  --- Messages and input ----------------------------------------------------

//  A request closed, by us or anyone: say so on a terminal if we showed it
//  or decided it, and show the next.
static void
s_terminal_resolved (approver_t *self, const char *id, const char *outcome, const char *grant)
{
    bool ours = self->decided && streq (self->decided, id);
    bool on_screen = self->shown && streq (self->shown, id);
    if (ours || on_screen) {
        //  Only a decision is made elsewhere: a request that timed out or
        //  was cancelled was decided by nobody
        bool decision = outcome && (streq (outcome, "allowed") || streq (outcome, "rejected"));
        s_terminal_break (self);
        char *safe_grant = grant? s_terminal_text (grant, false): NULL;
        printf ("-> %s %s%s%s%s%s\n", id, s_terminal_outcome (outcome? outcome: "?"),
                decision && !ours? " (decided elsewhere)": "", safe_grant? " with grant ": "",
                safe_grant? safe_grant: "", safe_grant? " (`dsh grants` lists it)": "");
        free (safe_grant);
    }
    if (ours)
        zstr_free (&self->decided);
    if (on_screen)
        zstr_free (&self->shown);
    s_terminal_prompt (self);
}

//  Handles one message from the stage.
static void
s_approver_receive (approver_t *self, size_t index)
{
    zmsg_t *msg = zmsg_recv (self->dealers [index]);
    if (!msg)
        return;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    json_t *body = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0
    &&  zmsg_size (msg) == 1) {
        dsh_doc_t *doc = dsh_proto_decode_body (zmsg_first (msg), error, sizeof (error));
        body = doc? dsh_json_from_msgpack (dsh_doc_root (doc)): NULL;
        dsh_doc_destroy (&doc);
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    if (!json_is_object (body)) {
        fprintf (stderr, "dsh: malformed message from the stage ignored\n");
        json_decref (body);
        return;
    }
    const char *id = json_string_value (json_object_get (body, "id"));
    if (streq (command, "HEARTBEAT")) {
        if (self->stage_silent)
            fprintf (stderr, "dsh: the stage is back\n");
        self->stage_heard = zclock_mono ();
        self->stage_silent = false;
    }
    else
    if (streq (command, "PENDING") && id) {
        bool known = s_approver_find (self, id) != NULL;
        zhashx_update (self->routes, id, (void *) (index + 1));
        if (!known)
            zlistx_add_end (self->open, json_incref (body));
        if (!self->terminal) {
            s_approver_print ("pending", body);
            if (self->auto_outcome)
                s_approver_decide (self, id, self->auto_outcome);
        }
        else {
            if (!known && self->prompting) {
                //  Another request while one is asked for: say so, ask again
                s_terminal_break (self);
                const char *tool = json_string_value (json_object_get (body, "tool"));
                char *safe_tool = s_terminal_text (tool? tool: "?", false);
                printf ("(request %s for %s is waiting too)\n", id, safe_tool);
                free (safe_tool);
            }
            s_terminal_prompt (self);
        }
    }
    else
    if (streq (command, "RESOLVED") && id) {
        if (!self->terminal)
            s_approver_print ("resolved", body);
        if (s_approver_find (self, id))
            zlistx_delete (self->open, zlistx_cursor (self->open));
        zhashx_delete (self->routes, id);
        if (self->terminal)
            s_terminal_resolved (self, id, json_string_value (json_object_get (body, "outcome")),
                                 json_string_value (json_object_get (body, "grant")));
    }
    else
    if (streq (command, DSH_ERROR)) {
        const char *message = json_string_value (json_object_get (body, "message"));
        if (self->terminal)
            s_terminal_break (self);
        fprintf (stderr, "dsh: the stage says: %s\n", message? message: "error");
        //  A decision the stage refused leaves nothing to wait for
        zstr_free (&self->decided);
        if (self->terminal)
            s_terminal_prompt (self);
    }
    json_decref (body);
}

//  Says what a line may be, and asks again on a terminal.
static void
s_approver_command_usage (approver_t *self)
{
    json_t *shown = (json_t *) zlistx_first (self->open);
    if (self->terminal && !shown)
        fprintf (stderr, "dsh: no request is pending\n");
    else
    if (self->terminal)
        fprintf (stderr, s_request_grants (shown)? "dsh: answer y, n, t or a (or \"allow ID\", \"deny ID\")\n"
                                                 : "dsh: answer y or n (or \"allow ID\", \"deny ID\")\n");
    else
        fprintf (stderr, "dsh: say \"allow ID\", \"deny ID\", \"allow ID for N\", \"allow ID args for N\", "
                         "\"y\" or \"n\"\n");
    if (self->terminal)
        s_terminal_prompt (self);
}

//  Acts on one line from stdin: "allow ID", "deny ID", "allow ID for N",
//  "allow ID args for N" (a grant for N minutes, or 30s, 2h), "y", "n"; on
//  a terminal also "yes", "no" and an empty line (no), and "t" or "a" (a
//  grant, --grant-minutes long) for the request shown.
static void
s_approver_command (approver_t *self, char *line)
{
    self->prompting = false;
    char *words [5];
    size_t count = 0;
    for (char *word = strtok (line, " \t\r"); word; word = strtok (NULL, " \t\r"))
        if (count++ < sizeof (words) / sizeof (words [0]))
            words [count - 1] = word;
    const char *verb = count? words [0]: NULL;
    const char *id = count > 1? words [1]: NULL;
    bool yes = verb && (streq (verb, "y") || streq (verb, "Y") || (self->terminal && streq (verb, "yes")));
    bool no = !verb? self->terminal: streq (verb, "n") || streq (verb, "N") || (self->terminal && streq (verb, "no"));
    const char *key_scope = !self->terminal || !verb? NULL
                          : streq (verb, "t") || streq (verb, "T")? "tool"
                          : streq (verb, "a") || streq (verb, "A")? "arguments": NULL;
    bool named = verb && (streq (verb, "allow") || streq (verb, "deny"));
    if (!verb && !no)
        return;                         //  an empty line
    //  allow ID for N, allow ID args for N
    const char *named_scope = NULL;
    const char *length = NULL;
    if (named && streq (verb, "allow") && count == 4 && streq (words [2], "for")) {
        named_scope = "tool";
        length = words [3];
    }
    else
    if (named && streq (verb, "allow") && count == 5 && streq (words [2], "args") && streq (words [3], "for")) {
        named_scope = "arguments";
        length = words [4];
    }
    bool keyed = yes || no || key_scope;
    if ((keyed && count > 1) || (named && count != 2 && !named_scope) || (!keyed && !named)) {
        s_approver_command_usage (self);
        return;
    }
    int64_t seconds = 0;
    if (length && s_grant_seconds (length, &seconds)) {
        fprintf (stderr, "dsh: \"for\" takes minutes (15) or a length (30s, 15m, 2h), not \"%s\"\n", length);
        if (self->terminal)
            s_terminal_prompt (self);
        return;
    }
    json_t *request = NULL;
    if (keyed) {
        //  On a terminal the answer is for the request shown; in a pipe,
        //  for the latest
        request = (json_t *) (self->terminal? zlistx_first (self->open): zlistx_last (self->open));
        if (!request || (self->terminal && self->decided)) {
            if (!request && verb)
                fprintf (stderr, "dsh: no request is pending\n");
            return;
        }
        id = s_request_id (request);
    }
    else
        request = s_approver_find (self, id);
    const char *scope = key_scope? key_scope: named_scope;
    if (scope && request && !s_request_grants (request)) {
        fprintf (stderr, "dsh: the stage of request %s gives no grants: allow it once or deny it\n", id);
        if (self->terminal)
            s_terminal_prompt (self);
        return;
    }
    if (key_scope)
        seconds = s_approver_grant_minutes (self, request) * 60;
    if (scope)
        s_approver_grant (self, id, scope, seconds);
    else
        s_approver_decide (self, id, yes || (named && streq (verb, "allow"))? "allow": "deny");
}

//  Reads what stdin has and acts on every whole line in it.
static void
s_approver_stdin (approver_t *self)
{
    char chunk [512];
    ssize_t got = read (STDIN_FILENO, chunk, sizeof (chunk));
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (got <= 0) {
        self->stdin_done = true;
        return;
    }
    for (ssize_t index = 0; index < got; index++) {
        if (chunk [index] == '\n') {
            self->line [self->line_size] = 0;
            if (self->line_too_long)
                fprintf (stderr, "dsh: line too long, ignored\n");
            else
                s_approver_command (self, self->line);
            self->line_size = 0;
            self->line_too_long = false;
        }
        else
        if (self->line_size + 1 < sizeof (self->line))
            self->line [self->line_size++] = chunk [index];
        else
            self->line_too_long = true;
    }
}

//  The stage heartbeats; say on stderr when it falls silent (a broker
//  restarted binds a new approvals port: this approver reaches nobody).
static void
s_approver_check_stage (approver_t *self)
{
    if (self->stage_heard && !self->stage_silent
    &&  zclock_mono () - self->stage_heard > APPROVER_STAGE_SILENT_MS) {
        self->stage_silent = true;
        if (self->terminal)
            s_terminal_break (self);
        fprintf (stderr, "dsh: the stage has been silent for %d s; is the broker still running?\n",
                 APPROVER_STAGE_SILENT_MS / 1000);
    }
}

//  Asks the stage through the broker at broker for its approvals socket
//  and connects a DEALER to it, unless one is connected there already (a
//  stage process that serves several brokers has one socket). Returns 0,
//  or -1 after saying why, with *exit_code set.
static int
s_approver_connect (approver_t *self, options_t *options, const char *broker, const char *stage, int *exit_code)
{
    char error [512];
    json_t *body = s_control_at (options, broker, stage, "approvals", NULL, exit_code, error, sizeof (error));
    if (!body) {
        fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
        return -1;
    }
    const char *advertised = json_string_value (json_object_get (json_object_get (body, "data"), "endpoint"));
    const char *server_key = json_string_value (json_object_get (json_object_get (body, "data"), "serverKey"));
    char *endpoint = advertised? dsh_sock_resolve (advertised, broker): NULL;
    char *approvals_key = server_key && strlen (server_key) == 40? strdup (server_key): NULL;
    json_decref (body);
    int rc = 0;
    if (!endpoint) {
        fprintf (stderr, "dsh: broker %s: stage \"%s\" has no approvals endpoint\n", broker, stage);
        *exit_code = EXIT_TOOL_ERROR;
        rc = -1;
    }
    for (size_t index = 0; rc == 0 && index < self->dealer_count; index++)
        if (streq (self->endpoints [index], endpoint)) {
            zstr_free (&endpoint);
            zstr_free (&approvals_key);
            return 0;
        }
    zsock_t *dealer = rc == 0? zsock_new (ZMQ_DEALER): NULL;
    if (dealer) {
        dsh_sock_limit (dealer, APPROVER_MAX_MESSAGE, 1000);
        dsh_sock_heal (dealer, 0, 0);
        //  Give a decision made just before stdin ends, and the goodbye, the
        //  time to leave
        zsock_set_linger (dealer, 1000);
        dsh_curve_client (dealer);
        //  An external stage serves approvals with its own key, which the
        //  broker relayed with the endpoint
        if (approvals_key && dsh_curve_on ())
            zsock_set_curve_serverkey (dealer, approvals_key);
        if (zsock_connect (dealer, "%s", endpoint)) {
            fprintf (stderr, "dsh: cannot connect to the approvals socket at %s\n", endpoint);
            zsock_destroy (&dealer);
            *exit_code = EXIT_NO_BROKER;
            rc = -1;
        }
    }
    if (dealer) {
        self->dealers [self->dealer_count] = dealer;
        self->endpoints [self->dealer_count] = endpoint;
        self->dealer_count++;
        endpoint = NULL;
    }
    zstr_free (&endpoint);
    zstr_free (&approvals_key);
    return rc;
}

//  With a list of brokers, the approver serves the stage of every one that
//  answers; the others are named on stderr.
static int
s_approver (options_t *options)
{
    const char *stage = options->stage? options->stage: "permission";
    int exit_code = 0;
    approver_t self = {
        .auto_outcome = options->auto_outcome,
        .grant_minutes = options->grant_minutes,
        .terminal = isatty (STDIN_FILENO) && isatty (STDOUT_FILENO)
    };
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (s_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers))
        s_approver_connect (&self, options, broker, stage, &exit_code);
    zlistx_destroy (&brokers);
    if (self.dealer_count == 0)
        return exit_code;
    exit_code = 0;
    self.routes = zhashx_new ();
    self.open = zlistx_new ();
    zlistx_set_destructor (self.open, (czmq_destructor *) s_json_release);
    if (self.terminal)
        printf ("Waiting for requests to approve (stage \"%s\"); Ctrl-C or Ctrl-D ends.\n", stage);

    //  zpoller takes no file descriptors, so stdin needs zmq_poll
    zmq_pollitem_t items [DSH_BROKERS_MAX + 1];
    for (size_t index = 0; index < self.dealer_count; index++)
        items [index] = (zmq_pollitem_t) { zsock_resolve (self.dealers [index]), 0, ZMQ_POLLIN, 0 };
    items [self.dealer_count] = (zmq_pollitem_t) { NULL, STDIN_FILENO, ZMQ_POLLIN, 0 };
    int item_count = (int) self.dealer_count + (self.auto_outcome? 0: 1);
    json_t *hello = json_object ();
    int64_t next_hello = zclock_mono ();
    while (!zsys_interrupted && !self.stdin_done) {
        int64_t now = zclock_mono ();
        if (now >= next_hello) {
            s_approver_send_all (&self, "APPROVER", hello);
            next_hello = now + APPROVER_HELLO_MS;
        }
        s_approver_check_stage (&self);
        int64_t wait_ms = next_hello - now;
        if (wait_ms > APPROVER_POLL_MS)
            wait_ms = APPROVER_POLL_MS;
        int rc = zmq_poll (items, item_count, (long) wait_ms);
        if (rc < 0 && zmq_errno () != EINTR) {
            fprintf (stderr, "dsh: poll failed: %s\n", zmq_strerror (zmq_errno ()));
            exit_code = EXIT_NO_BROKER;
            break;
        }
        for (size_t index = 0; rc > 0 && index < self.dealer_count; index++)
            if (items [index].revents & ZMQ_POLLIN)
                s_approver_receive (&self, index);
        if (rc > 0 && !self.auto_outcome && (items [self.dealer_count].revents & (ZMQ_POLLIN | ZMQ_POLLERR)))
            s_approver_stdin (&self);
    }
    //  Leaving on purpose: the stage stops counting on us now, not 3 s later
    s_approver_send_all (&self, "GOODBYE", hello);
    if (self.terminal)
        s_terminal_break (&self);
    json_decref (hello);
    zlistx_destroy (&self.open);
    zhashx_destroy (&self.routes);
    zstr_free (&self.decided);
    zstr_free (&self.shown);
    for (size_t index = 0; index < self.dealer_count; index++) {
        zsock_destroy (&self.dealers [index]);
        zstr_free (&self.endpoints [index]);
    }
    return exit_code;
}

int
main (int argc, char *argv [])
{
    //  stdout carries the JSON; czmq logs there unless told otherwise
    zsys_set_logstream (dsh_log_stream (stderr));
    options_t options = { .count = -1 };
    int exit_code = 0;
    int index = s_parse (argc, argv, 1, NULL, &options, &exit_code);
    if (index < 0)
        return exit_code;
    if (index >= argc)
        return s_usage_error (NULL, "%s", "no command given");
    const command_t *command = s_command_named (argv [index]);
    if (!command)
        return s_usage_error (NULL, "unknown command \"%s\"", argv [index]);
    if (s_parse (argc, argv, index + 1, command, &options, &exit_code) < 0)
        return exit_code;
    char error [512];
    if (command->run != s_keygen) {
        zlistx_t *brokers = dsh_sock_brokers (s_endpoint (&options), error, sizeof (error));
        if (!brokers) {
            fprintf (stderr, "dsh: %s\n", error);
            return EXIT_USAGE;
        }
        zlistx_destroy (&brokers);
    }
    if (command->run != s_keygen && dsh_curve_setup (options.cert, options.broker_cert, error, sizeof (error))) {
        fprintf (stderr, "dsh: %s\n", error);
        return EXIT_USAGE;
    }
    //  Beacon entries become the brokers heard now, once for the whole
    //  command (dsh brokers listens by itself)
    char *resolved = NULL;
    if (command->run != s_keygen && command->run != s_brokers && strstr (s_endpoint (&options), "beacon")) {
        resolved = dsh_beacon_resolve (s_endpoint (&options), 0, error, sizeof (error));
        if (!resolved) {
            fprintf (stderr, "dsh: %s\n", error);
            return EXIT_NO_BROKER;
        }
        options.broker = resolved;
    }
    int rc = command->run (&options);
    zstr_free (&resolved);
    return rc;
}

static int
s_keygen (options_t *options)
{
    const char *path = options->args [0];
    char error [512];
    if (dsh_curve_keygen (path, options->role, options->components, options->tools, options->agent, options->name,
                          error, sizeof (error))) {
        fprintf (stderr, "dsh: keygen: %s\n", error);
        return EXIT_USAGE;
    }
    zcert_t *cert = zcert_load (path);
    json_t *out = json_pack ("{s:s, s:s, s:s, s:s}", "public", path, "secret", "", "key",
                             cert? zcert_public_txt (cert): "", "role", options->role);
    char *secret = zsys_sprintf ("%s_secret", path);
    json_object_set_new (out, "secret", json_string (secret));
    if (options->components)
        json_object_set_new (out, "components", json_string (options->components));
    if (options->tools)
        json_object_set_new (out, "tools", json_string (options->tools));
    if (options->agent)
        json_object_set_new (out, "agent", json_string (options->agent));
    s_print (out, JSON_DOCUMENT);
    json_decref (out);
    zstr_free (&secret);
    zcert_destroy (&cert);
    return 0;
}

static void
s_brokers_heard (const char *endpoint, const dsh_beacon_t *beacon, void *arg)
{
    json_array_append_new ((json_t *) arg, json_pack ("{s:s, s:b, s:I}", "endpoint", endpoint,
                                                      "curve", beacon->curve, "epoch", (json_int_t) beacon->epoch));
}

static int
s_brokers (options_t *options)
{
    const char *where = options->args [0]? options->args [0]: "beacon";
    char *end = NULL;
    long port = streq (where, "beacon")? DSH_DEFAULT_BEACON_PORT:
                strncmp (where, "beacon:", 7) == 0? strtol (where + 7, &end, 10): 0;
    if ((end && (end == where + 7 || *end)) || port <= 0 || port > 65535)
        return s_usage_error (s_command_named ("brokers"), "want beacon or beacon:PORT (1 to 65535), not \"%s\"",
                              where);
    int timeout_ms = options->timeout_ms? options->timeout_ms: DSH_BEACON_WAIT_MS;
    json_t *heard = json_array ();
    char error [256];
    int ignored = dsh_beacon_listen ((int) port, timeout_ms, s_brokers_heard, heard, error, sizeof (error));
    if (ignored < 0) {
        fprintf (stderr, "dsh: brokers: %s\n", error);
        json_decref (heard);
        return EXIT_USAGE;
    }
    if (ignored)
        fprintf (stderr, "dsh: brokers: %d datagram(s) on UDP port %ld were not broker beacons\n", ignored, port);
    int exit_code = json_array_size (heard)? 0: EXIT_NO_BROKER;
    if (exit_code)
        fprintf (stderr, "dsh: brokers: no broker beacon heard on UDP port %ld within %d ms\n", port, timeout_ms);
    s_print (heard, JSON_DOCUMENT);
    json_decref (heard);
    return exit_code;
}

//  ---------------------------------------------------------------------
//  Statistics

//  The latency in µs below which a share q of a tool's calls fell, from its
//  histogram (counts per bucket, bounds in µs, one more bucket past them),
//  interpolated linearly within the bucket as Prometheus's
//  histogram_quantile does; the last bound if it falls past them. -1 if
//  there are no calls.
static double
s_stats_quantile_us (json_t *bounds, json_t *histogram, double q)
{
    double total = 0;
    for (size_t index = 0; index < json_array_size (histogram); index++)
        total += (double) json_integer_value (json_array_get (histogram, index));
    if (total == 0 || json_array_size (histogram) != json_array_size (bounds) + 1)
        return -1;
    double rank = q * total, seen = 0, lower = 0;
    for (size_t index = 0; index < json_array_size (bounds); index++) {
        double count = (double) json_integer_value (json_array_get (histogram, index));
        double upper = (double) json_integer_value (json_array_get (bounds, index));
        if (count > 0 && seen + count >= rank)
            return lower + (upper - lower) * (rank - seen) / count;
        seen += count;
        lower = upper;
    }
    return lower;
}

static void
s_stats_ms (char *text, size_t size, double us)
{
    if (us < 0)
        snprintf (text, size, "-");
    else
        snprintf (text, size, us < 10000? "%.2f": "%.0f", us / 1000);
}

//  A column of names no wider than 40, nor narrower than its heading.
static int
s_stats_width (json_t *rows, const char *key, const char *heading)
{
    size_t width = strlen (heading);
    for (size_t index = 0; index < json_array_size (rows); index++) {
        const char *text = json_string_value (json_object_get (json_array_get (rows, index), key));
        if (text && strlen (text) > width)
            width = strlen (text);
    }
    return (int) (width < 40? width: 40);
}

static json_int_t
s_stats_int (json_t *object, const char *key)
{
    return json_integer_value (json_object_get (object, key));
}

//  The statistics as a person reads them on a terminal.
static void
s_stats_table (json_t *stats)
{
    json_t *refused = json_object_get (stats, "refused");
    printf ("broker %s, up %" JSON_INTEGER_FORMAT " s: %" JSON_INTEGER_FORMAT " calls answered, %"
            JSON_INTEGER_FORMAT " in flight",
            json_string_value (json_object_get (stats, "broker")), s_stats_int (stats, "uptimeMs") / 1000,
            s_stats_int (stats, "calls"), s_stats_int (stats, "inFlight"));
    const char *code;
    json_t *count;
    json_object_foreach (refused, code, count)
        printf (", %" JSON_INTEGER_FORMAT " refused %s", json_integer_value (count), code);
    printf ("\n");
    if (!json_is_true (json_object_get (stats, "enabled"))) {
        printf ("statistics are off (dsh-broker --no-stats)\n");
        return;
    }
    json_t *bounds = json_object_get (stats, "bucketsUs");
    json_t *tools = json_object_get (stats, "tools");
    int width = s_stats_width (tools, "name", "TOOL");
    printf ("\n%-*s %8s %10s %8s %9s %9s %9s\n", width, "TOOL", "REPLICAS", "CALLS", "ERRORS", "IN FLIGHT",
            "P50 ms", "P99 ms");
    for (size_t index = 0; index < json_array_size (tools); index++) {
        json_t *tool = json_array_get (tools, index);
        json_t *outcomes = json_object_get (tool, "outcomes");
        json_int_t calls = 0;
        json_object_foreach (outcomes, code, count)
            calls += json_integer_value (count);
        json_int_t errors = calls - s_stats_int (outcomes, "ok");
        char p50 [32], p99 [32];
        s_stats_ms (p50, sizeof (p50), s_stats_quantile_us (bounds, json_object_get (tool, "histogram"), 0.50));
        s_stats_ms (p99, sizeof (p99), s_stats_quantile_us (bounds, json_object_get (tool, "histogram"), 0.99));
        printf ("%-*.*s %8" JSON_INTEGER_FORMAT " %10" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT " %9"
                JSON_INTEGER_FORMAT " %9s %9s\n", width, width, json_string_value (json_object_get (tool, "name")),
                s_stats_int (tool, "replicas"), calls, errors, s_stats_int (tool, "inFlight"), p50, p99);
    }
    if (json_array_size (tools))
        printf ("(P50 and P99 are estimates: the broker keeps counts per latency bucket, and a quantile\n"
                " is interpolated within its bucket, as Prometheus's histogram_quantile does)\n");
    json_t *components = json_object_get (stats, "components");
    width = s_stats_width (components, "id", "COMPONENT");
    printf ("\n%-*s %10s %9s %16s\n", width, "COMPONENT", "SERVED", "IN FLIGHT", "HEARTBEAT AGE ms");
    for (size_t index = 0; index < json_array_size (components); index++) {
        json_t *component = json_array_get (components, index);
        printf ("%-*.*s %10" JSON_INTEGER_FORMAT " %9" JSON_INTEGER_FORMAT " %16" JSON_INTEGER_FORMAT "\n",
                width, width, json_string_value (json_object_get (component, "id")),
                s_stats_int (component, "served"), s_stats_int (component, "inFlight"),
                s_stats_int (component, "heartbeatAgeMs"));
    }
    json_t *agents = json_object_get (stats, "agents");
    //  Calls without an agent show as "(none)"
    width = s_stats_width (agents, "agent", "AGENT");
    width = width < (int) strlen ("(none)")? (int) strlen ("(none)"): width;
    printf ("\n%-*s %10s %8s\n", width, "AGENT", "CALLS", "ERRORS");
    for (size_t index = 0; index < json_array_size (agents); index++) {
        json_t *agent = json_array_get (agents, index);
        //  Agent ids are any string: shown so they cannot drive the terminal
        const char *id = json_string_value (json_object_get (agent, "agent"));
        char *safe = s_terminal_text (id && *id? id: "(none)", false);
        printf ("%-*.*s %10" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT "\n", width, width, safe,
                s_stats_int (agent, "calls"), s_stats_int (agent, "errors"));
        free (safe);
    }
    fflush (stdout);
}

//  With several brokers, the one the client is connected to answers, as
//  for ping and chain: statistics are each broker's own.
//  ---------------------------------------------------------------------
//  audit

//  A time as the audit takes it: ms since 1970, an ISO date or time (UTC),
//  or an age back from now (90s, 15m, 2h, 7d). Returns 0, or -1.
static int
s_audit_time (const char *text, int64_t *ms)
{
    char *end = NULL;
    errno = 0;
    long long number = strtoll (text, &end, 10);
    if (!errno && end != text && number >= 0) {
        int64_t unit = 0;
        if (!*end)
            unit = -1;
        else
        if (streq (end, "s"))
            unit = 1000;
        else
        if (streq (end, "m"))
            unit = 60 * 1000;
        else
        if (streq (end, "h"))
            unit = 3600 * 1000;
        else
        if (streq (end, "d"))
            unit = 86400 * 1000;
        if (unit == -1 && number > 100000000) {
            *ms = (int64_t) number;
            return 0;
        }
        if (unit > 0 && number < INT64_MAX / unit) {
            *ms = zclock_time () - (int64_t) number * unit;
            return 0;
        }
    }
    const char *formats [] = { "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S",
                               "%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M", "%Y-%m-%d" };
    for (size_t index = 0; index < sizeof (formats) / sizeof (formats [0]); index++) {
        struct tm tm;
        memset (&tm, 0, sizeof (tm));
        const char *rest = strptime (text, formats [index], &tm);
        if (rest && !*rest) {
            *ms = (int64_t) timegm (&tm) * 1000;
            return 0;
        }
    }
    return -1;
}

//  One broker's records for the query, as an array of {broker, seq, hash,
//  prev, record}; NULL with the reason on stderr and *exit_code set.
static json_t *
s_audit_at (options_t *options, const char *endpoint, json_t *query, int *exit_code)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    if (!client) {
        fprintf (stderr, "dsh: cannot connect to broker at %s\n", endpoint);
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    char error [512];
    //  The broker reads its store on a thread of its own and stays live
    //  meanwhile: a verify of a long chain takes seconds per 100 000 records
    bool verify = json_is_true (json_object_get (query, "verify"));
    int timeout_ms = options->timeout_ms? options->timeout_ms: verify? AUDIT_VERIFY_TIMEOUT_MS: AUDIT_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_query (client, DSH_AUDIT, query, timeout_ms, error, sizeof (error));
    dsh_client_destroy (&client);
    if (!reply) {
        fprintf (stderr, "dsh: %s: %s\n", endpoint, error);
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (!streq (dsh_reply_command (reply), DSH_AUDIT)) {
        const char *text = dsh_reply_text (reply);
        fprintf (stderr, "dsh: %s: %s\n", endpoint, text? text: "the broker refused the audit query");
        *exit_code = EXIT_TOOL_ERROR;
    }
    else {
        body = dsh_reply_json (reply);
        if (body && !json_is_true (json_object_get (body, "ok"))) {
            const char *text = json_string_value (json_object_get (body, "message"));
            fprintf (stderr, "dsh: %s: %s\n", endpoint, text? text: "the audit query failed");
            json_decref (body);
            body = NULL;
            *exit_code = EXIT_TOOL_ERROR;
        }
    }
    dsh_reply_destroy (&reply);
    return body;
}

//  The record of a row, parsed, with where it sits in its chain.
static json_t *
s_audit_record (json_t *row)
{
    const char *text = json_string_value (json_object_get (row, "record"));
    json_t *record = text? json_loads (text, 0, NULL): NULL;
    if (!json_is_object (record)) {
        json_decref (record);
        return NULL;
    }
    json_object_set (record, "seq", json_object_get (row, "seq"));
    json_object_set (record, "hash", json_object_get (row, "hash"));
    return record;
}

static int
s_audit_order (const void *left, const void *right)
{
    json_t *a = *(json_t **) left;
    json_t *b = *(json_t **) right;
    json_int_t at = json_integer_value (json_object_get (a, "answeredMs"));
    json_int_t bt = json_integer_value (json_object_get (b, "answeredMs"));
    if (at != bt)
        return at < bt? -1: 1;
    int broker = strcmp (json_string_value (json_object_get (a, "broker"))? json_string_value (json_object_get (a, "broker")): "",
                         json_string_value (json_object_get (b, "broker"))? json_string_value (json_object_get (b, "broker")): "");
    if (broker)
        return broker;
    json_int_t as = json_integer_value (json_object_get (a, "seq"));
    json_int_t bs = json_integer_value (json_object_get (b, "seq"));
    return as < bs? -1: as > bs;
}

static void
s_audit_row_print (json_t *record, bool table)
{
    if (!table) {
        s_print (record, JSON_LINE);
        return;
    }
    json_int_t at = json_integer_value (json_object_get (record, "answeredMs"));
    time_t seconds = (time_t) (at / 1000);
    struct tm tm;
    gmtime_r (&seconds, &tm);
    char when [32];
    strftime (when, sizeof (when), "%Y-%m-%d %H:%M:%S", &tm);
    const char *approver = json_string_value (json_object_get (json_object_get (record, "approval"), "approver"));
    printf ("%s.%03d  %-16.16s %-24.24s %-18.18s %9.1f  %-16.16s %s\n", when, (int) (at % 1000),
            json_string_value (json_object_get (record, "agent"))? json_string_value (json_object_get (record, "agent")): "",
            json_string_value (json_object_get (record, "tool"))? json_string_value (json_object_get (record, "tool")): "",
            json_string_value (json_object_get (record, "outcome"))? json_string_value (json_object_get (record, "outcome")): "",
            (double) json_integer_value (json_object_get (record, "durationUs")) / 1000.0,
            approver? approver: "-",
            json_string_value (json_object_get (record, "callId"))? json_string_value (json_object_get (record, "callId")): "");
    fflush (stdout);
}

//  Asks every broker of the list, merges their records by time (a record
//  two brokers both return, from one shared store, once), and prints those
//  not seen yet. Returns how many it printed, or -1.
static int
s_audit_round (options_t *options, zlistx_t *brokers, json_t *query, zhashx_t *seen, bool table,
               int64_t *latest_ms, int *exit_code)
{
    json_t *merged = json_array ();
    size_t answered = 0;
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        json_t *body = s_audit_at (options, broker, query, exit_code);
        if (!body)
            continue;
        answered++;
        size_t index;
        json_t *row;
        json_array_foreach (json_object_get (body, "records"), index, row) {
            json_t *record = s_audit_record (row);
            if (!record)
                continue;
            char key [512];
            snprintf (key, sizeof (key), "%s/%" JSON_INTEGER_FORMAT,
                      json_string_value (json_object_get (record, "broker"))? json_string_value (json_object_get (record, "broker")): "",
                      json_integer_value (json_object_get (record, "seq")));
            if (zhashx_lookup (seen, key))
                json_decref (record);
            else {
                zhashx_insert (seen, key, zsys_sprintf ("%" JSON_INTEGER_FORMAT,
                                                        json_integer_value (json_object_get (record, "answeredMs"))));
                json_array_append_new (merged, record);
            }
        }
        json_decref (body);
    }
    size_t count = json_array_size (merged);
    json_t **records = (json_t **) calloc (count? count: 1, sizeof (json_t *));
    assert (records);
    for (size_t index = 0; index < count; index++)
        records [index] = json_array_get (merged, index);
    qsort (records, count, sizeof (json_t *), s_audit_order);
    //  The latest --limit of them all, in time order
    size_t limit = (size_t) (options->limit? options->limit: 20);
    size_t first = !options->follow || !*latest_ms? (count > limit? count - limit: 0): 0;
    for (size_t index = first; index < count; index++) {
        s_audit_row_print (records [index], table);
        json_int_t at = json_integer_value (json_object_get (records [index], "answeredMs"));
        if (at > *latest_ms)
            *latest_ms = at;
    }
    free (records);
    json_decref (merged);
    //  The next round asks from the latest ms on: only records of that ms
    //  can come again, so the others need not be remembered
    zlistx_t *keys = zhashx_keys (seen);
    for (const char *key = zlistx_first (keys); key; key = zlistx_next (keys))
        if (strtoll ((const char *) zhashx_lookup (seen, key), NULL, 10) < *latest_ms)
            zhashx_delete (seen, key);
    zlistx_destroy (&keys);
    return answered? (int) (count - first): -1;
}

static int
s_audit_verify (options_t *options, zlistx_t *brokers)
{
    int exit_code = 0;
    json_t *query = json_pack ("{s:b}", "verify", 1);
    json_t *chains = json_array ();
    zhashx_t *seen = zhashx_new ();
    bool all_ok = true;
    size_t answered = 0;
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        json_t *body = s_audit_at (options, broker, query, &exit_code);
        if (!body)
            continue;
        answered++;
        size_t index;
        json_t *chain;
        json_array_foreach (json_object_get (body, "chains"), index, chain) {
            const char *name = json_string_value (json_object_get (chain, "broker"));
            if (!name || zhashx_lookup (seen, name))
                continue;
            zhashx_insert (seen, name, (void *) "");
            if (!json_is_true (json_object_get (chain, "ok"))) {
                all_ok = false;
                fprintf (stderr, "dsh: audit chain %s does not verify: %s\n", name,
                         json_string_value (json_object_get (chain, "reason"))?
                         json_string_value (json_object_get (chain, "reason")): "no reason given");
            }
            json_array_append (chains, chain);
        }
        json_decref (body);
    }
    if (answered)
        s_print (chains, JSON_DOCUMENT);
    json_decref (chains);
    json_decref (query);
    zhashx_destroy (&seen);
    if (!answered)
        return exit_code? exit_code: EXIT_NO_BROKER;
    return all_ok? exit_code: EXIT_TOOL_ERROR;
}

static int
s_audit (options_t *options)
{
    const command_t *command = s_command_named ("audit");
    if (options->nargs == 1 && !streq (options->args [0], "verify"))
        return s_usage_error (command, "audit takes \"verify\" or no argument, not \"%s\"", options->args [0]);
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (s_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    if (options->nargs == 1) {
        int exit_code = s_audit_verify (options, brokers);
        zlistx_destroy (&brokers);
        return exit_code;
    }
    json_t *query = json_pack ("{s:s}", "order", "newest");
    int64_t since = 0, until = 0;
    if (options->since && s_audit_time (options->since, &since)) {
        zlistx_destroy (&brokers);
        json_decref (query);
        return s_usage_error (command, "--since: \"%s\" is not a time (ms since 1970, 2026-12-01T10:00:00, 2h)",
                              options->since);
    }
    if (options->until && s_audit_time (options->until, &until)) {
        zlistx_destroy (&brokers);
        json_decref (query);
        return s_usage_error (command, "--until: \"%s\" is not a time (ms since 1970, 2026-12-01T10:00:00, 2h)",
                              options->until);
    }
    if (options->agent)
        json_object_set_new (query, "agent", json_string (options->agent));
    if (options->tool)
        json_object_set_new (query, "tool", json_string (options->tool));
    if (options->outcome)
        json_object_set_new (query, "outcome", json_string (options->outcome));
    if (options->call_id)
        json_object_set_new (query, "callId", json_string (options->call_id));
    if (since)
        json_object_set_new (query, "since", json_integer (since));
    if (until)
        json_object_set_new (query, "until", json_integer (until));
    json_object_set_new (query, "limit", json_integer (options->limit? options->limit: 20));
    bool table = !options->json && isatty (STDOUT_FILENO);
    zhashx_t *seen = zhashx_new ();
    zhashx_set_destructor (seen, (zhashx_destructor_fn *) zstr_free);
    if (table)
        printf ("%-23s  %-16s %-24s %-18s %9s  %-16s %s\n", "answered (UTC)", "agent", "tool", "outcome",
                "ms", "approved by", "callId");
    int exit_code = 0;
    int64_t latest = 0;
    int printed = s_audit_round (options, brokers, query, seen, table, &latest, &exit_code);
    if (printed >= 0)
        exit_code = 0;      //  a broker of the list answered
    while (options->follow && !zsys_interrupted) {
        zclock_sleep (WATCH_POLL_MS * 2);
        //  From the latest seen on (the same ms again: records of one ms
        //  may land apart), oldest first; seen ones are not printed twice
        json_object_set_new (query, "since", json_integer (latest? latest: zclock_time () - 1000));
        json_object_set_new (query, "order", json_string ("oldest"));
        json_object_set_new (query, "limit", json_integer (1000));
        int round_exit = 0;
        s_audit_round (options, brokers, query, seen, table, &latest, &round_exit);
    }
    zhashx_destroy (&seen);
    json_decref (query);
    zlistx_destroy (&brokers);
    return exit_code;
}

static int
s_stats (options_t *options)
{
    int exit_code = 0;
    json_t *body = s_query_once (options, DSH_STATS, DSH_STATS, &exit_code);
    if (body && !options->json && isatty (STDOUT_FILENO))
        s_stats_table (body);
    else
    if (body)
        s_print (body, JSON_DOCUMENT);
    json_decref (body);
    return exit_code;
}

//  ---------------------------------------------------------------------
//  pins: the tool definitions each broker has pinned, and those it holds
//  back (quarantined) because they differ from their pin

//  One PINS request at the broker at endpoint: the reply body (without the
//  id), or NULL with the reason in error and *exit_code set.
static json_t *
s_pins_at (options_t *options, const char *endpoint, json_t *request, int *exit_code,
           char *error, size_t error_size)
{
    dsh_client_t *client = s_client_at (endpoint, exit_code, error, error_size);
    if (!client)
        return NULL;
    int timeout_ms = options->timeout_ms? options->timeout_ms: PINS_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_query (client, DSH_PINS, request, timeout_ms, error, error_size);
    dsh_client_destroy (&client);
    if (!reply) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (!streq (dsh_reply_command (reply), DSH_PINS)) {
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: "the broker refused the request");
        *exit_code = EXIT_TOOL_ERROR;
    }
    else
        body = s_reply_body (reply, exit_code, error, error_size);
    dsh_reply_destroy (&reply);
    return body;
}

//  The first 12 hex digits of the digest at key, or "-".
static void
s_digest_short (json_t *object, const char *key, char *text, size_t size)
{
    snprintf (text, size, "%.12s", s_string (object, key, "-"));
}

//  The pins and quarantined tools as a table.
static void
s_pins_table (json_t *body)
{
    json_t *pins = json_object_get (body, "pins");
    const char *policy = s_string (body, "policy", "?");
    if (json_array_size (pins) == 0) {
        printf ("pins policy %s: no pins%s\n", policy, streq (policy, "off")? " (pinning is off)": " yet");
        return;
    }
    int width = s_stats_width (pins, "name", "NAME");
    printf ("pins policy %s\n%-*s %-11s %-12s %-12s %-16s %s\n", policy, width, "NAME", "STATE", "PINNED",
            "OFFERED", "COMPONENT", "REASON");
    size_t quarantined = 0;
    for (size_t index = 0; index < json_array_size (pins); index++) {
        json_t *pin = json_array_get (pins, index);
        char pinned [16], offered [16];
        s_digest_short (pin, "digest", pinned, sizeof (pinned));
        s_digest_short (pin, "offeredDigest", offered, sizeof (offered));
        const char *state = s_string (pin, "state", "?");
        if (streq (state, "quarantined"))
            quarantined++;
        //  Names, ids and reasons come from components: shown so they cannot drive the terminal
        char *name = s_terminal_text (s_string (pin, "name", "?"), false);
        char *component = s_terminal_text (s_string (pin, "component", "-"), false);
        const char *reason = s_string (pin, "reason", "");
        if (!*reason && !json_is_true (json_object_get (pin, "registered")))
            reason = "not registered now";
        char *safe_reason = s_terminal_text (reason, false);
        char *row = zsys_sprintf ("%-*.*s %-11s %-12s %-12s %-16.16s %s", width, width, name, state, pinned, offered,
                                  component, safe_reason);
        size_t size = strlen (row);
        while (size && row [size - 1] == ' ')
            row [--size] = 0;
        printf ("%s\n", row);
        zstr_free (&row);
        free (name);
        free (component);
        free (safe_reason);
    }
    if (quarantined)
        printf ("%zu quarantined: review one with `dsh pins show NAME`, release it with `dsh pins accept NAME`\n",
                quarantined);
}

//  A JSON value, pretty-printed and indented, as the terminal may show it.
static void
s_pins_block (const char *title, json_t *value)
{
    char *pretty = json_dumps (value, JSON_INDENT (2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    char *safe = s_terminal_text (pretty? pretty: "null", true);
    printf ("%s\n", title);
    for (char *line = safe, *next; line; line = next) {
        next = strchr (line, '\n');
        if (next)
            *next++ = 0;
        printf ("  %s\n", line);
    }
    free (safe);
    free (pretty);
}

//  One pin, what changed, and how to release it.
static void
s_pins_show (json_t *body)
{
    json_t *pin = json_object_get (body, "pin");
    char *name = s_terminal_text (s_string (pin, "name", "?"), false);
    const char *state = s_string (pin, "state", "?");
    bool quarantined = streq (state, "quarantined");
    const char *reason = s_string (pin, "reason", NULL);
    char *safe_reason = reason? s_terminal_text (reason, false): NULL;
    printf ("%s: %s%s%s\n", name, state, safe_reason? ": ": "", safe_reason? safe_reason: "");
    free (safe_reason);
    s_terminal_field ("pinned", s_string (pin, "digest", "- (nothing accepted yet)"));
    if (json_is_string (json_object_get (pin, "offeredDigest")))
        s_terminal_field ("offered", s_string (pin, "offeredDigest", ""));
    if (json_is_string (json_object_get (pin, "component")))
        s_terminal_field ("component", s_string (pin, "component", ""));
    if (json_is_string (json_object_get (pin, "key")))
        s_terminal_field ("key", s_string (pin, "key", ""));
    char when [32];
    if (json_is_integer (json_object_get (pin, "firstMs"))) {
        s_local_time ((int64_t) json_integer_value (json_object_get (pin, "firstMs")), "%Y-%m-%d %H:%M:%S", when,
                      sizeof (when));
        s_terminal_field ("first seen", when);
    }
    if (json_is_string (json_object_get (pin, "acceptedBy")) || json_is_integer (json_object_get (pin, "acceptedMs"))) {
        s_local_time ((int64_t) json_integer_value (json_object_get (pin, "acceptedMs")), "%Y-%m-%d %H:%M:%S", when,
                      sizeof (when));
        char *accepted = zsys_sprintf ("by %s at %s", s_string (pin, "acceptedBy", "?"), when);
        s_terminal_field ("accepted", accepted);
        zstr_free (&accepted);
    }
    s_terminal_field ("registered", json_is_true (json_object_get (pin, "registered"))? "yes": "no");
    const char *diff = s_string (pin, "diff", NULL);
    if (diff) {
        char *safe = s_terminal_text (diff, true);
        printf ("changes, pinned -> offered\n");
        for (char *line = safe, *next; line && *line; line = next) {
            next = strchr (line, '\n');
            if (next)
                *next++ = 0;
            printf ("  %s\n", line);
        }
        free (safe);
    }
    if (json_object_get (pin, "offered"))
        s_pins_block ("offered definition", json_object_get (pin, "offered"));
    if (json_object_get (pin, "definition"))
        s_pins_block ("pinned definition", json_object_get (pin, "definition"));
    if (quarantined && json_is_string (json_object_get (pin, "offeredDigest"))) {
        char *digest = s_terminal_text (s_string (pin, "offeredDigest", ""), false);
        printf ("release it: dsh pins accept %s --digest %s\n", name, digest);
        free (digest);
    }
    free (name);
}

//  list and show: from the first broker of the list that answers.
static int
s_pins_read (options_t *options, zlistx_t *brokers, json_t *request)
{
    const char *op = s_string (request, "op", "list");
    int exit_code = EXIT_NO_BROKER;
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        json_t *body = s_pins_at (options, broker, request, &exit_code, error, sizeof (error));
        if (!body && zlistx_size (brokers) > 1)
            fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
        else
        if (!body)
            fprintf (stderr, "dsh: %s\n", error);
        if (!body && exit_code == EXIT_NO_BROKER)
            continue;               //  silent: ask the next
        if (!body)
            return exit_code;       //  an answer: no
        if (streq (op, "show") && !json_is_object (json_object_get (body, "pin"))) {
            char *name = s_terminal_text (s_string (request, "name", ""), false);
            fprintf (stderr, "dsh: no pin and no quarantined tool named \"%s\"\n", name);
            free (name);
            json_decref (body);
            return EXIT_TOOL_ERROR;
        }
        if (options->json)
            s_print (body, JSON_DOCUMENT);
        else
        if (streq (op, "show"))
            s_pins_show (body);
        else
            s_pins_table (body);
        fflush (stdout);
        json_decref (body);
        return 0;
    }
    return exit_code;
}

//  What a change did, in a line.
static void
s_pins_changed (const char *op, const char *name, json_t *body, const char *broker)
{
    json_t *pin = json_object_get (body, "pin");
    char digest [16];
    s_digest_short (pin, "digest", digest, sizeof (digest));
    char *safe = s_terminal_text (name, false);
    char *where = broker? zsys_sprintf (" at %s", broker): strdup ("");
    if (streq (op, "accept"))
        printf ("accepted %s%s: pinned %s and released\n", safe, where, digest);
    else
    if (streq (op, "reject"))
        printf ("rejected %s%s: it stays quarantined\n", safe, where);
    else
    if (pin && !streq (digest, "-"))
        printf ("forgot the pin of %s%s, and pinned its current definition anew: %s\n", safe, where, digest);
    else
        printf ("forgot the pin of %s%s\n", safe, where);
    free (safe);
    zstr_free (&where);
}

//  accept, reject and forget: every broker of the list keeps its own
//  quarantine, so each is told, and each answer shown (as dsh mode does).
static int
s_pins_change (options_t *options, zlistx_t *brokers, json_t *request)
{
    const char *op = s_string (request, "op", "");
    const char *name = s_string (request, "name", "");
    bool several = zlistx_size (brokers) > 1;
    int exit_code = 0;
    json_t *answers = json_array ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        int broker_exit = 0;
        json_t *body = s_pins_at (options, broker, request, &broker_exit, error, sizeof (error));
        json_t *answer = json_pack ("{s:s, s:b}", "broker", broker, "ok", body != NULL);
        if (body) {
            json_object_set (answer, "data", body);
            if (!options->json)
                s_pins_changed (op, name, body, several? broker: NULL);
        }
        else {
            char *safe = s_terminal_text (name, false);
            if (several)
                fprintf (stderr, "dsh: broker %s did not %s %s: %s\n", broker, op, safe, error);
            else
                fprintf (stderr, "dsh: %s\n", error);
            free (safe);
            json_object_set_new (answer, "error", json_string (error));
            if (!exit_code)
                exit_code = broker_exit;
        }
        json_array_append_new (answers, answer);
        json_decref (body);
    }
    if (options->json && several)
        s_print (answers, JSON_DOCUMENT);
    else
    if (options->json && json_is_true (json_object_get (json_array_get (answers, 0), "ok")))
        s_print (json_object_get (json_array_get (answers, 0), "data"), JSON_DOCUMENT);
    fflush (stdout);
    json_decref (answers);
    return exit_code;
}

static int
s_pins (options_t *options)
{
    const command_t *command = s_command_named ("pins");
    const char *op = options->nargs? options->args [0]: "list";
    bool named = streq (op, "show") || streq (op, "accept") || streq (op, "reject") || streq (op, "forget");
    if (!named && !streq (op, "list"))
        return s_usage_error (command, "pins takes list, show, accept, reject or forget, not \"%s\"", op);
    if (named && options->nargs < 2)
        return s_usage_error (command, "pins %s: missing NAME", op);
    if (!named && options->nargs > 1)
        return s_usage_error (command, "pins list takes no NAME, not \"%s\"", options->args [1]);
    if (options->digest && !streq (op, "accept"))
        return s_usage_error (command, "--digest goes with pins accept, not pins %s", op);
    json_t *request = json_pack ("{s:s}", "op", op);
    if (named)
        json_object_set_new (request, "name", json_string (options->args [1]));
    if (options->digest)
        json_object_set_new (request, "digest", json_string (options->digest));
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (s_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    int exit_code = streq (op, "list") || streq (op, "show")? s_pins_read (options, brokers, request)
                                                            : s_pins_change (options, brokers, request);
    zlistx_destroy (&brokers);
    json_decref (request);
    return exit_code;
}

//  ---------------------------------------------------------------------
//  grants: what approvers allowed for a while, kept by each permission
//  stage of each broker

//  The names of the permission stages in the chain of the broker at
//  endpoint (caller destroys), or NULL with the reason in error and
//  *exit_code set.
static zlistx_t *
s_permission_stages (options_t *options, const char *endpoint, int *exit_code, char *error, size_t error_size)
{
    dsh_client_t *client = s_client_at (endpoint, exit_code, error, error_size);
    if (!client)
        return NULL;
    int timeout_ms = options->timeout_ms? options->timeout_ms: QUERY_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_request (client, DSH_CHAIN, NULL, timeout_ms, error, error_size);
    dsh_client_destroy (&client);
    if (!reply) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = streq (dsh_reply_command (reply), DSH_CHAIN)? dsh_reply_json (reply): NULL;
    json_t *stages = json_object_get (body, "stages");
    zlistx_t *names = NULL;
    if (json_is_array (stages)) {
        names = zlistx_new ();
        zlistx_set_destructor (names, (czmq_destructor *) zstr_free);
        size_t index;
        json_t *stage;
        json_array_foreach (stages, index, stage)
            if (streq (s_string (stage, "kind", ""), "permission") && json_is_string (json_object_get (stage, "name")))
                zlistx_add_end (names, strdup (s_string (stage, "name", "")));
    }
    else {
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: "the CHAIN reply has no stages");
        *exit_code = EXIT_TOOL_ERROR;
    }
    json_decref (body);
    dsh_reply_destroy (&reply);
    return names;
}

static int
s_grants_order (const void *left, const void *right)
{
    json_int_t a = json_integer_value (json_object_get (*(json_t **) left, "expiresMs"));
    json_int_t b = json_integer_value (json_object_get (*(json_t **) right, "expiresMs"));
    return a < b? -1: a > b;
}

//  The grants as a table, soonest to expire first.
static void
s_grants_table (json_t *grants)
{
    if (json_array_size (grants) == 0) {
        printf ("no grants\n");
        return;
    }
    int agent_width = s_stats_width (grants, "agent", "AGENT");
    agent_width = agent_width < (int) strlen ("(none)")? (int) strlen ("(none)"): agent_width;
    int tool_width = s_stats_width (grants, "tool", "TOOL");
    printf ("%-8s  %-*s %-*s %-9s %-12s %-22s %s\n", "ID", agent_width, "AGENT", tool_width, "TOOL", "SCOPE",
            "ARGUMENTS", "EXPIRES", "BY");
    int64_t now = zclock_time ();
    for (size_t index = 0; index < json_array_size (grants); index++) {
        json_t *grant = json_array_get (grants, index);
        int64_t expires = (int64_t) json_integer_value (json_object_get (grant, "expiresMs"));
        char clock [16], expiry [64], arguments [16];
        s_local_time (expires, "%H:%M:%S", clock, sizeof (clock));
        int64_t left_ms = expires - now;
        if (left_ms <= 0)
            snprintf (expiry, sizeof (expiry), "%s (expired)", clock);
        else
        if (left_ms < 60000)
            snprintf (expiry, sizeof (expiry), "%s (in %ld s)", clock, (long) ((left_ms + 999) / 1000));
        else
            snprintf (expiry, sizeof (expiry), "%s (in %ld min)", clock, (long) ((left_ms + 59999) / 60000));
        s_digest_short (grant, "argumentsDigest", arguments, sizeof (arguments));
        const char *agent = s_string (grant, "agent", "");
        char *id = s_terminal_text (s_string (grant, "id", "?"), false);
        char *safe_agent = s_terminal_text (*agent? agent: "(none)", false);
        char *tool = s_terminal_text (s_string (grant, "tool", "?"), false);
        char *by = s_terminal_text (s_string (grant, "by", "-"), false);
        printf ("%-8s  %-*.*s %-*.*s %-9s %-12s %-22s %s\n", id, agent_width, agent_width, safe_agent, tool_width,
                tool_width, tool, s_string (grant, "scope", "?"), arguments, expiry, by);
        free (id);
        free (safe_agent);
        free (tool);
        free (by);
    }
}

//  Every live grant of every permission stage of every broker, merged by
//  id (brokers that share a store hold the same grants). What could be had
//  is printed; a broker or stage that did not answer is named on stderr
//  and sets the exit code.
static int
s_grants_list (options_t *options, zlistx_t *brokers)
{
    int exit_code = 0;
    size_t stage_count = 0;
    json_t *by_id = json_object ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        int broker_exit = 0;
        zlistx_t *stages = s_permission_stages (options, broker, &broker_exit, error, sizeof (error));
        if (!stages) {
            fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
            exit_code = exit_code? exit_code: broker_exit;
            continue;
        }
        for (const char *stage = zlistx_first (stages); stage; stage = zlistx_next (stages)) {
            stage_count++;
            json_t *body = s_control_at (options, broker, stage, "grants", NULL, &broker_exit, error, sizeof (error));
            if (!body) {
                fprintf (stderr, "dsh: broker %s, stage %s: %s\n", broker, stage, error);
                exit_code = exit_code? exit_code: broker_exit;
                continue;
            }
            size_t index;
            json_t *grant;
            json_array_foreach (json_object_get (body, "data"), index, grant) {
                const char *id = s_string (grant, "id", NULL);
                if (id && !json_object_get (by_id, id)) {
                    json_t *copy = json_deep_copy (grant);
                    if (!json_object_get (copy, "stage"))
                        json_object_set_new (copy, "stage", json_string (stage));
                    json_object_set_new (by_id, id, copy);
                }
            }
            json_decref (body);
        }
        zlistx_destroy (&stages);
    }
    size_t count = json_object_size (by_id);
    json_t **sorted = (json_t **) calloc (count? count: 1, sizeof (json_t *));
    assert (sorted);
    size_t filled = 0;
    const char *id;
    json_t *grant;
    json_object_foreach (by_id, id, grant)
        sorted [filled++] = grant;
    qsort (sorted, count, sizeof (json_t *), s_grants_order);
    json_t *grants = json_array ();
    for (size_t index = 0; index < count; index++)
        json_array_append (grants, sorted [index]);
    free (sorted);
    if (options->json)
        s_print (grants, JSON_DOCUMENT);
    else
    if (!stage_count && !exit_code)
        printf ("no grants: no permission stage in the chain\n");
    else
        s_grants_table (grants);
    fflush (stdout);
    json_decref (grants);
    json_decref (by_id);
    return exit_code;
}

//  Revokes grant id in every permission stage of every broker: those that
//  hold it end it, the others say they have none. Exit 0 if one ended it
//  and every one answered; 1 if none held it; 3 if one did not answer.
static int
s_grants_revoke (options_t *options, zlistx_t *brokers, const char *id)
{
    int exit_code = 0;
    size_t revoked = 0;
    json_t *answers = json_array ();
    json_t *args = json_pack ("{s:s}", "id", id);
    char *safe_id = s_terminal_text (id, false);
    char *missing = zsys_sprintf ("no grant %s", id);
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        int broker_exit = 0;
        zlistx_t *stages = s_permission_stages (options, broker, &broker_exit, error, sizeof (error));
        if (!stages) {
            fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
            json_array_append_new (answers, json_pack ("{s:s, s:b, s:s}", "broker", broker, "revoked", 0,
                                                       "error", error));
            exit_code = exit_code? exit_code: broker_exit;
            continue;
        }
        for (const char *stage = zlistx_first (stages); stage; stage = zlistx_next (stages)) {
            json_t *body = s_control_at (options, broker, stage, "revoke", args, &broker_exit, error, sizeof (error));
            json_t *answer = json_pack ("{s:s, s:s, s:b}", "broker", broker, "stage", stage, "revoked", body != NULL);
            if (body)
                revoked++;
            else {
                json_object_set_new (answer, "error", json_string (error));
                //  A stage without it is an answer, not a failure
                if (!strstr (error, missing)) {
                    fprintf (stderr, "dsh: broker %s, stage %s did not revoke grant %s: %s\n", broker, stage,
                             safe_id, error);
                    exit_code = exit_code? exit_code: broker_exit;
                }
            }
            json_array_append_new (answers, answer);
            json_decref (body);
        }
        zlistx_destroy (&stages);
    }
    if (!revoked && !exit_code) {
        fprintf (stderr, "dsh: %s\n", json_array_size (answers)? missing: "no permission stage in the chain");
        exit_code = EXIT_TOOL_ERROR;
    }
    if (options->json)
        s_print (answers, JSON_DOCUMENT);
    else
    if (revoked)
        printf ("revoked grant %s\n", safe_id);
    fflush (stdout);
    json_decref (answers);
    json_decref (args);
    zstr_free (&missing);
    free (safe_id);
    return exit_code;
}

static int
s_grants (options_t *options)
{
    const command_t *command = s_command_named ("grants");
    const char *op = options->nargs? options->args [0]: "list";
    if (!streq (op, "list") && !streq (op, "revoke"))
        return s_usage_error (command, "grants takes list or revoke, not \"%s\"", op);
    if (streq (op, "revoke") && options->nargs < 2)
        return s_usage_error (command, "grants revoke: missing %s", "ID");
    if (streq (op, "list") && options->nargs > 1)
        return s_usage_error (command, "grants list takes no ID, not \"%s\"", options->args [1]);
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (s_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    int exit_code = streq (op, "list")? s_grants_list (options, brokers)
                                      : s_grants_revoke (options, brokers, options->args [1]);
    zlistx_destroy (&brokers);
    return exit_code;
}
