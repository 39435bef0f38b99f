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

    This file holds main, the command table and the option parsing; the
    commands are in the dsh_cli_*.c files, one family each (dsh_cli.h).
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_approver.h"
#include "dsh_cli_audit.h"
#include "dsh_cli_call.h"
#include "dsh_cli_chain.h"
#include "dsh_cli_limit.h"
#include "dsh_cli_pins.h"
#include "dsh_cli_query.h"
#include "dsh_cli_setup.h"
#include "dsh_beacon.h"
#include "dsh_curve.h"
#include "dsh_log.h"
#include "dsh_render.h"
#include "dsh_sock.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const dsh_cli_command_t s_commands [] = {
    { "ping", "ping", "show the broker's status (PONG)", "", 0, 0, dsh_cli_ping },
    { "tools", "tools", "list the registered tools as a JSON array", "", 0, 0, dsh_cli_tools },
    { "get", "get NAME", "show one tool and its providers", "", 1, 1, dsh_cli_get },
    { "call", "call NAME [JSON] [--agent ID] [--timeout-ms N] | call --batch FILE|- [--agent ID]",
      "call a tool with JSON arguments (default {}); exit 1 if the result is an error;\n"
      "progress shows on stderr (a bar on a terminal); Ctrl-C cancels the call; a broker\n"
      "that cannot be reached is given up on as ping does, not at the call's deadline.\n"
      "--batch runs a JSON array of {\"name\", \"arguments\"} as one model turn: runs of\n"
      "concurrency-safe tools in parallel, others alone and in order; prints the results\n"
      "in call order as a JSON array; exit 1 if any is an error",
      "agent batch", 0, 2, dsh_cli_call },
    { "watch", "watch [--count N]",
      "print a snapshot, then every change, one JSON line each; stop after N changes",
      "count", 0, 0, dsh_cli_watch },
    { "schemas", "schemas [--format json|openai|anthropic|mcp|markdown] [--agent ID [--stage NAME]]",
      "print the tool list rendered for a model provider; with --agent, only the tools the\n"
      "chain's stages (or the one --stage names) could let that agent call",
      "format agent stage", 0, 0, dsh_cli_schemas },
    { "chain", "chain",
      "show the execution chain's stages and their counters as a JSON array", "", 0, 0, dsh_cli_chain },
    { "stats", "stats [--json]",
      "show the broker's call statistics (STATS): per tool, component and agent; JSON, or a\n"
      "table with p50 and p99 (from the histogram) when stdout is a terminal and --json is not given",
      "json", 0, 0, dsh_cli_stats },
    { "audit", "audit [verify] [--agent A] [--tool T] [--outcome CODE] [--since T] [--until T] [--call ID] [--limit N] [--follow] [--json]",
      "print the audit trail's records (the latest --limit, default 20, oldest first): one JSON\n"
      "line each, or a table on a terminal (unless --json); T is ms since 1970, an ISO date\n"
      "(2026-12-01 or 2026-12-01T10:00:00, UTC) or an age (90s, 15m, 2h, 7d); --follow keeps\n"
      "printing new ones. With a broker list, every broker's records, merged by time.\n"
      "audit verify: recompute every chain's hashes; exit 1 naming the first record that does\n"
      "not match. Needs an admin or auditor key under CURVE. Waits up to 30 s for an answer (verify:\n"
      "10 min; --timeout-ms sets it)",
      "agent tool outcome since until call limit follow json", 0, 1, dsh_cli_audit },
    { "mode", "mode AGENT plan|normal [--stage NAME]",
      "put an agent into plan mode or take it out (stage default \"plan\")", "stage", 2, 2, dsh_cli_mode },
    { "approve", "approve ID [--for MINUTES [--args]] [--stage NAME]",
      "allow a call waiting for approval, once (stage default \"permission\"); with --for, a\n"
      "grant: every call of this agent to this tool for MINUTES (or 30s, 15m, 2h), with\n"
      "--args only calls with these exact arguments; a grant ends early if the tool's\n"
      "definition or the chain changes", "stage for args", 1, 1, dsh_cli_approve },
    { "deny", "deny ID [--stage NAME]",
      "reject a call waiting for approval (stage default \"permission\")", "stage", 1, 1, dsh_cli_deny },
    { "pending", "pending [--stage NAME]",
      "list the calls waiting for approval (stage default \"permission\")", "stage", 0, 0, dsh_cli_pending },
    { "approver", "approver [--stage NAME] [--auto allow|deny] [--grant-minutes N]",
      "be an approver: print each request and its resolution as a JSON line; decide from stdin\n"
      "(\"allow ID\", \"deny ID\", \"y\" or \"n\" for the latest request, \"allow ID for N\" to\n"
      "grant this agent the tool for N minutes, \"allow ID args for N\" these exact arguments)\n"
      "or, with --auto, answer every request alike; on a terminal, show each request readably\n"
      "and ask for it: y once, n deny, t this agent and tool, a these exact arguments, for\n"
      "--grant-minutes N (default: the stage's); runs until interrupted or stdin ends",
      "stage auto grant-minutes", 0, 0, dsh_cli_approver },
    { "limit", "limit [STAGE] [list | set AGENT TOOL [--rate R] [--burst B] [--in-flight N] | reset [AGENT]]",
      "show the quotas of a limit stage (default \"limit\") and each agent's state now, as JSON;\n"
      "set replaces the rule on AGENT and TOOL (globs) or adds it, with what it names; reset\n"
      "forgets the counters (of one agent). set and reset go to every broker of the list:\n"
      "limits are per broker, and what they set lasts until the broker restarts. Needs an\n"
      "admin key under CURVE (list: admin or auditor)",
      "rate burst in-flight", 0, 4, dsh_cli_limit },
    { "grants", "grants [list | revoke ID] [--json]",
      "list the live grants of every permission stage of every broker (a table: agent, tool,\n"
      "scope, arguments digest, expiry, who gave it; --json: a JSON array), or end one",
      "json", 0, 2, dsh_cli_grants },
    { "pins", "pins [list | show NAME | accept NAME [--digest D] | reject NAME | forget NAME] [--json]",
      "review pinned tool definitions: list the pins and the quarantined tools (a table), show\n"
      "one with what changed, accept its offered definition (pinned and released at once; with\n"
      "--digest, only if it is still that one), reject it (it stays quarantined) or forget the\n"
      "pin; accept, reject and forget go to every broker of the list. --json: the replies as\n"
      "JSON. Needs an admin key under CURVE (list and show: admin, auditor or approver)",
      "digest json", 0, 2, dsh_cli_pins },
    { "keygen", "keygen PATH --role component|agent|approver|stage|admin|auditor [--components IDS [--tools NAMES]] [--agent ID] [--name N]",
      "write a CURVE keypair: PATH (public, for the broker's allow-list directory) and\n"
      "PATH_secret (keep it private). The role, the component ids a component key may serve\n"
      "(comma-separated patterns, e.g. \"fs-*\"), the tool names it may announce (--tools,\n"
      "patterns; default any) and the agent id of an agent key go into its metadata,\n"
      "which the broker enforces", "role components tools agent name", 1, 1, dsh_cli_keygen },
    { "brokers", "brokers [beacon[:PORT]] [--timeout-ms N]",
      "listen for broker beacons on UDP PORT (default 7579) for N ms (default 2500) and print\n"
      "the brokers heard as a JSON array of {endpoint, curve, epoch}; exit 3 if none",
      "", 0, 1, dsh_cli_brokers },
};

#define COMMAND_COUNT (sizeof (s_commands) / sizeof (s_commands [0]))

const dsh_cli_command_t *
dsh_cli_command_named (const char *name)
{
    for (size_t index = 0; index < COMMAND_COUNT; index++)
        if (streq (name, s_commands [index].name))
            return &s_commands [index];
    return NULL;
}

static void
s_usage (FILE *stream, const dsh_cli_command_t *command)
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
int
dsh_cli_usage_error (const dsh_cli_command_t *command, const char *format, const char *detail)
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
s_takes (const dsh_cli_command_t *command, const char *name)
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
s_parse (int argc, char *argv [], int index, const dsh_cli_command_t *command,
         dsh_cli_options_t *options, int *exit_code)
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
                *exit_code = dsh_cli_usage_error (command, "unexpected argument \"%s\"", arg);
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
            *exit_code = dsh_cli_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
        }
        //  --name value, or --name=value
        char name [32];
        const char *value = NULL;
        const char *equals = strchr (arg, '=');
        size_t name_size = equals? (size_t) (equals - arg - 2): strlen (arg + 2);
        if (name_size >= sizeof (name)) {
            *exit_code = dsh_cli_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
        }
        memcpy (name, arg + 2, name_size);
        name [name_size] = 0;
        bool known = streq (name, "broker") || streq (name, "timeout-ms")
                  || streq (name, "cert") || streq (name, "broker-cert")
                  || s_takes (command, name);
        if (!known) {
            *exit_code = dsh_cli_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
        }
        if (streq (name, "json") || streq (name, "follow") || streq (name, "args")) {
            //  The flags without a value
            if (equals) {
                *exit_code = dsh_cli_usage_error (command, "this flag takes no value: \"%s\"", arg);
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
            *exit_code = dsh_cli_usage_error (command, "option \"%s\" needs a value", arg);
            return -1;
        }
        long number;
        if (streq (name, "broker")) {
            if (!*value) {
                *exit_code = dsh_cli_usage_error (command, "%s: empty endpoint", arg);
                return -1;
            }
            options->broker = value;
        }
        else
        if (streq (name, "timeout-ms")) {
            if (!s_parse_count (value, 1, INT_MAX / 2, &number)) {
                *exit_code = dsh_cli_usage_error (command, "--timeout-ms needs a positive number of ms, not \"%s\"",
                                                  value);
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
                *exit_code = dsh_cli_usage_error (command, "--count needs a number, not \"%s\"", value);
                return -1;
            }
            options->count = number;
        }
        else
        if (streq (name, "format")) {
            if (!dsh_render_format_from_name (value)) {
                *exit_code = dsh_cli_usage_error (command, "unknown format \"%s\"", value);
                return -1;
            }
            options->format = value;
        }
        else
        if (streq (name, "stage")) {
            if (!*value) {
                *exit_code = dsh_cli_usage_error (command, "%s: empty stage name", arg);
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
                *exit_code = dsh_cli_usage_error (command, "--limit needs a number from 1 to 10000, not \"%s\"", value);
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
        if (streq (name, "rate"))
            options->rate = value;
        else
        if (streq (name, "burst"))
            options->burst = value;
        else
        if (streq (name, "in-flight"))
            options->in_flight = value;
        else
        if (streq (name, "grant-minutes")) {
            if (!s_parse_count (value, 1, 1000000, &number)) {
                *exit_code = dsh_cli_usage_error (command,
                                                  "--grant-minutes needs a positive number of minutes, not \"%s\"",
                                                  value);
                return -1;
            }
            options->grant_minutes = number;
        }
        else
        if (streq (name, "auto")) {
            if (!streq (value, "allow") && !streq (value, "deny")) {
                *exit_code = dsh_cli_usage_error (command, "--auto takes allow or deny, not \"%s\"", value);
                return -1;
            }
            options->auto_outcome = value;
        }
    }
    if (command && options->nargs < command->min_args) {
        *exit_code = dsh_cli_usage_error (command, "%s: missing argument", command->name);
        return -1;
    }
    return index;
}

int
main (int argc, char *argv [])
{
    //  stdout carries the JSON; czmq logs there unless told otherwise
    zsys_set_logstream (dsh_log_stream (stderr));
    dsh_cli_options_t options = { .count = -1 };
    int exit_code = 0;
    int index = s_parse (argc, argv, 1, NULL, &options, &exit_code);
    if (index < 0)
        return exit_code;
    if (index >= argc)
        return dsh_cli_usage_error (NULL, "%s", "no command given");
    const dsh_cli_command_t *command = dsh_cli_command_named (argv [index]);
    if (!command)
        return dsh_cli_usage_error (NULL, "unknown command \"%s\"", argv [index]);
    if (s_parse (argc, argv, index + 1, command, &options, &exit_code) < 0)
        return exit_code;
    char error [512];
    if (command->run != dsh_cli_keygen) {
        zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (&options), error, sizeof (error));
        if (!brokers) {
            fprintf (stderr, "dsh: %s\n", error);
            return EXIT_USAGE;
        }
        zlistx_destroy (&brokers);
    }
    if (command->run != dsh_cli_keygen && dsh_curve_setup (options.cert, options.broker_cert, error, sizeof (error))) {
        fprintf (stderr, "dsh: %s\n", error);
        return EXIT_USAGE;
    }
    //  Beacon entries become the brokers heard now, once for the whole
    //  command (dsh brokers listens by itself)
    char *resolved = NULL;
    if (command->run != dsh_cli_keygen && command->run != dsh_cli_brokers
    &&  strstr (dsh_cli_endpoint (&options), "beacon")) {
        resolved = dsh_beacon_resolve (dsh_cli_endpoint (&options), 0, error, sizeof (error));
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
