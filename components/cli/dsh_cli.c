/*  =========================================================================
    dsh - the command line client of a dsh broker

    Queries the registry, calls tools and watches changes, printing JSON on
    stdout and one-line errors on stderr, so that scripts and tests can use
    it. Exit codes: 0 done, 1 the broker answered with an error (or the tool
    result has isError), 2 bad usage or bad JSON arguments, 3 no reply from
    the broker in time. Every wait is bounded by a timeout.
    =========================================================================
*/

#include "dsh_client.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_render.h"
#include "dsh_watcher.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_TOOL_ERROR     1
#define EXIT_USAGE          2
#define EXIT_NO_BROKER      3

#define QUERY_TIMEOUT_MS    5000
#define WATCH_POLL_MS       250         //  how often watch looks at SIGINT

#define JSON_DOCUMENT       (JSON_INDENT (2) | JSON_PRESERVE_ORDER)
#define JSON_LINE           (JSON_COMPACT | JSON_PRESERVE_ORDER)

//  Everything the command line says.
typedef struct {
    const char *broker;         //  --broker, else $DSH_BROKER, else the default
    int timeout_ms;             //  --timeout-ms; 0 = the command's default
    const char *agent;          //  call --agent
    const char *format;         //  schemas --format
    long count;                 //  watch --count; -1 = until SIGINT
    const char *args [2];       //  positional arguments
    int nargs;
} options_t;

//  What a command accepts, and what it does.
typedef struct {
    const char *name;
    const char *synopsis;
    const char *summary;
    const char *flags;          //  the long flags it takes besides the global ones
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

static const command_t s_commands [] = {
    { "ping", "ping", "show the broker's status (PONG)", "", 0, 0, s_ping },
    { "tools", "tools", "list the registered tools as a JSON array", "", 0, 0, s_tools },
    { "get", "get NAME", "show one tool and its providers", "", 1, 1, s_get },
    { "call", "call NAME [JSON] [--agent ID] [--timeout-ms N]",
      "call a tool with JSON arguments (default {}); exit 1 if the result is an error",
      "agent", 1, 2, s_call },
    { "watch", "watch [--count N]",
      "print a snapshot, then every change, one JSON line each; stop after N changes",
      "count", 0, 0, s_watch },
    { "schemas", "schemas [--format json|openai|anthropic|mcp|markdown]",
      "print the tool list rendered for a model provider", "format", 0, 0, s_schemas },
};

#define COMMAND_COUNT (sizeof (s_commands) / sizeof (s_commands [0]))

static void
s_usage (FILE *stream, const command_t *command)
{
    if (command) {
        fprintf (stream, "usage: dsh [--broker ENDPOINT] [--timeout-ms N] %s\n\n%s\n",
                 command->synopsis, command->summary);
        return;
    }
    fprintf (stream, "usage: dsh [--broker ENDPOINT] [--timeout-ms N] COMMAND ...\n\ncommands:\n");
    for (size_t index = 0; index < COMMAND_COUNT; index++)
        fprintf (stream, "  %s\n      %s\n", s_commands [index].synopsis, s_commands [index].summary);
    fprintf (stream, "\noptions:\n"
             "  --broker ENDPOINT   the broker's front (default $DSH_BROKER, else %s)\n"
             "  --timeout-ms N      how long to wait for the broker (default %d; for call: the call's\n"
             "                      deadline, default %d, plus a margin)\n"
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
    return command && streq (command->flags, name);
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
                  || s_takes (command, name);
        if (!known) {
            *exit_code = s_usage_error (command, "unknown option \"%s\"", arg);
            return -1;
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
    char *text = json_dumps (json, flags);
    if (text) {
        fputs (text, stdout);
        fputc ('\n', stdout);
        fflush (stdout);
    }
    free (text);
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

static int
s_ping (options_t *options)
{
    dsh_client_t *client = s_client (options);
    if (!client)
        return EXIT_NO_BROKER;
    int exit_code = 0;
    json_t *body = s_query (client, options, DSH_PING, NULL, DSH_PONG, &exit_code);
    if (body)
        s_print (body, JSON_DOCUMENT);
    json_decref (body);
    dsh_client_destroy (&client);
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

static int
s_call (options_t *options)
{
    const char *args_json = options->nargs > 1? options->args [1]: "{}";
    //  Checked here so that bad input is a usage error and nothing is sent
    char error [512];
    msgpack_sbuffer args;
    int rc = dsh_json_text_to_msgpack (args_json, &args, error, sizeof (error));
    msgpack_sbuffer_destroy (&args);
    if (rc) {
        fprintf (stderr, "dsh: invalid JSON arguments: %s\n", error);
        return EXIT_USAGE;
    }
    dsh_client_t *client = s_client (options);
    if (!client)
        return EXIT_NO_BROKER;
    int exit_code = 0;
    dsh_reply_t *reply = dsh_client_call (client, options->args [0], args_json, options->agent,
                                          options->timeout_ms, error, sizeof (error));
    if (!reply) {
        fprintf (stderr, "dsh: %s\n", error);
        exit_code = EXIT_NO_BROKER;
    }
    else
    if (streq (dsh_reply_command (reply), DSH_ERROR)) {
        const char *text = dsh_reply_text (reply);
        fprintf (stderr, "dsh: %s\n", text? text: "the broker refused the call");
        exit_code = EXIT_TOOL_ERROR;
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

int
main (int argc, char *argv [])
{
    //  stdout carries the JSON; czmq logs there unless told otherwise
    zsys_set_logstream (stderr);
    options_t options = { .count = -1 };
    int exit_code = 0;
    int index = s_parse (argc, argv, 1, NULL, &options, &exit_code);
    if (index < 0)
        return exit_code;
    if (index >= argc)
        return s_usage_error (NULL, "%s", "no command given");
    const command_t *command = NULL;
    for (size_t entry = 0; entry < COMMAND_COUNT; entry++)
        if (streq (argv [index], s_commands [entry].name))
            command = &s_commands [entry];
    if (!command)
        return s_usage_error (NULL, "unknown command \"%s\"", argv [index]);
    if (s_parse (argc, argv, index + 1, command, &options, &exit_code) < 0)
        return exit_code;
    return command->run (&options);
}
