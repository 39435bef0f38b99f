/*  =========================================================================
    dsh_cli_query - the registry's answers: ping, tools, get, schemas,
    chain, stats, watch
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_query.h"
#include "dsh_proto.h"
#include "dsh_render.h"
#include "dsh_watcher.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int
dsh_cli_ping (dsh_cli_options_t *options)
{
    int exit_code = 0;
    json_t *body = dsh_cli_query_once (options, DSH_PING, DSH_PONG, &exit_code);
    if (body)
        dsh_cli_print (body, JSON_DOCUMENT);
    json_decref (body);
    return exit_code;
}

//  The registry's tool entries (a JSON array), or NULL with *exit_code set.
static json_t *
s_list (dsh_cli_options_t *options, int *exit_code)
{
    dsh_client_t *client = dsh_cli_client (options);
    if (!client) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = dsh_cli_query (client, options, DSH_LIST, NULL, DSH_TOOLS, exit_code);
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

int
dsh_cli_tools (dsh_cli_options_t *options)
{
    int exit_code = 0;
    json_t *tools = s_list (options, &exit_code);
    if (tools)
        dsh_cli_print (tools, JSON_DOCUMENT);
    json_decref (tools);
    return exit_code;
}

int
dsh_cli_get (dsh_cli_options_t *options)
{
    dsh_client_t *client = dsh_cli_client (options);
    if (!client)
        return EXIT_NO_BROKER;
    int exit_code = 0;
    json_t *body = dsh_cli_query (client, options, DSH_GET, options->args [0], DSH_TOOL, &exit_code);
    if (body)
        dsh_cli_print (body, JSON_DOCUMENT);
    json_decref (body);
    dsh_client_destroy (&client);
    return exit_code;
}

int
dsh_cli_watch (dsh_cli_options_t *options)
{
    const char *endpoint = dsh_cli_endpoint (options);
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
        dsh_cli_print (notice, JSON_LINE);
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

int
dsh_cli_schemas (dsh_cli_options_t *options)
{
    int exit_code = 0;
    json_t *tools = s_list (options, &exit_code);
    if (!tools)
        return exit_code;
    if (options->agent && !options->stage) {
        //  Every stage of the chain judges, on the tools' entries
        dsh_client_t *client = dsh_cli_client (options);
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
        json_t *reply = dsh_cli_control (options, options->stage? options->stage: "permission", "allowed", args,
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

int
dsh_cli_chain (dsh_cli_options_t *options)
{
    int exit_code = 0;
    json_t *body = dsh_cli_query_once (options, DSH_CHAIN, DSH_CHAIN, &exit_code);
    json_t *stages = json_object_get (body, "stages");
    if (json_is_array (stages))
        dsh_cli_print (stages, JSON_DOCUMENT);
    else
    if (body) {
        fprintf (stderr, "dsh: the CHAIN reply has no stages array\n");
        exit_code = EXIT_TOOL_ERROR;
    }
    json_decref (body);
    return exit_code;
}

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
    int width = dsh_cli_column_width (tools, "name", "TOOL");
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
    width = dsh_cli_column_width (components, "id", "COMPONENT");
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
    width = dsh_cli_column_width (agents, "agent", "AGENT");
    width = width < (int) strlen ("(none)")? (int) strlen ("(none)"): width;
    printf ("\n%-*s %10s %8s\n", width, "AGENT", "CALLS", "ERRORS");
    for (size_t index = 0; index < json_array_size (agents); index++) {
        json_t *agent = json_array_get (agents, index);
        //  Agent ids are any string: shown so they cannot drive the terminal
        const char *id = json_string_value (json_object_get (agent, "agent"));
        char *safe = dsh_cli_terminal_text (id && *id? id: "(none)", false);
        printf ("%-*.*s %10" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT "\n", width, width, safe,
                s_stats_int (agent, "calls"), s_stats_int (agent, "errors"));
        free (safe);
    }
    fflush (stdout);
}

//  With several brokers, the one the client is connected to answers, as
//  for ping and chain: statistics are each broker's own.
int
dsh_cli_stats (dsh_cli_options_t *options)
{
    int exit_code = 0;
    json_t *body = dsh_cli_query_once (options, DSH_STATS, DSH_STATS, &exit_code);
    if (body && !options->json && isatty (STDOUT_FILENO))
        s_stats_table (body);
    else
    if (body)
        dsh_cli_print (body, JSON_DOCUMENT);
    json_decref (body);
    return exit_code;
}
