/*  =========================================================================
    dsh_monitor_metrics - the swarm in Prometheus's text exposition format
    =========================================================================
*/

#include "dsh_monitor_metrics.h"

#include <czmq.h>
#include <inttypes.h>

static void
s_family (FILE *out, const char *name, const char *type, const char *help)
{
    fprintf (out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

//  A label value: backslash, double quote and line feed escaped, as the
//  format asks; a NUL, which it cannot carry, is left out.
static void
s_label_value (FILE *out, const json_t *value)
{
    const char *text = json_string_value (value);
    size_t size = text? json_string_length (value): 0;
    for (size_t index = 0; index < size; index++) {
        char next = text [index];
        if (next == '\\')
            fputs ("\\\\", out);
        else
        if (next == '"')
            fputs ("\\\"", out);
        else
        if (next == '\n')
            fputs ("\\n", out);
        else
        if (next)
            fputc (next, out);
    }
}

//  name{label="value"} n, for a row's string field under label.
static void
s_sample (FILE *out, const char *name, const char *label, const json_t *value, json_int_t number)
{
    fprintf (out, "%s{%s=\"", name, label);
    s_label_value (out, value);
    fprintf (out, "\"} %" JSON_INTEGER_FORMAT "\n", number);
}

static json_int_t
s_int (const json_t *object, const char *key)
{
    return json_integer_value (json_object_get (object, key));
}

//  One labelled sample per key of a map of counts (outcomes, refused, events).
static void
s_map_samples (FILE *out, const char *name, const char *label, const json_t *map)
{
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) map, key, value) {
        json_t *label_value = json_string (key);
        s_sample (out, name, label, label_value, json_integer_value (value));
        json_decref (label_value);
    }
}

static void
s_tools (FILE *out, const json_t *stats)
{
    json_t *rows = json_object_get (stats, "tools");
    json_t *bounds = json_object_get (stats, "bucketsUs");
    size_t index;
    json_t *row;
    s_family (out, "dsh_calls_total", "counter", "Calls answered, by tool and outcome (ok, or the error code).");
    json_array_foreach (rows, index, row) {
        const char *code;
        json_t *count;
        json_object_foreach (json_object_get (row, "outcomes"), code, count) {
            fputs ("dsh_calls_total{tool=\"", out);
            s_label_value (out, json_object_get (row, "name"));
            json_t *code_value = json_string (code);
            fputs ("\",code=\"", out);
            s_label_value (out, code_value);
            json_decref (code_value);
            fprintf (out, "\"} %" JSON_INTEGER_FORMAT "\n", json_integer_value (count));
        }
    }
    s_family (out, "dsh_call_duration_seconds", "histogram",
              "Time from a call's arrival at the broker to its answer, by tool.");
    json_array_foreach (rows, index, row) {
        json_t *histogram = json_object_get (row, "histogram");
        if (json_array_size (histogram) != json_array_size (bounds) + 1)
            continue;
        json_int_t cumulative = 0;
        for (size_t bucket = 0; bucket <= json_array_size (bounds); bucket++) {
            cumulative += json_integer_value (json_array_get (histogram, bucket));
            fputs ("dsh_call_duration_seconds_bucket{tool=\"", out);
            s_label_value (out, json_object_get (row, "name"));
            if (bucket < json_array_size (bounds))
                fprintf (out, "\",le=\"%g\"} %" JSON_INTEGER_FORMAT "\n",
                         (double) json_integer_value (json_array_get (bounds, bucket)) / 1e6, cumulative);
            else
                fprintf (out, "\",le=\"+Inf\"} %" JSON_INTEGER_FORMAT "\n", cumulative);
        }
        fputs ("dsh_call_duration_seconds_sum{tool=\"", out);
        s_label_value (out, json_object_get (row, "name"));
        fprintf (out, "\"} %.6f\n", (double) s_int (row, "sumUs") / 1e6);
        s_sample (out, "dsh_call_duration_seconds_count", "tool", json_object_get (row, "name"), cumulative);
    }
    s_family (out, "dsh_tool_inflight", "gauge", "Calls open now, by tool.");
    json_array_foreach (rows, index, row)
        s_sample (out, "dsh_tool_inflight", "tool", json_object_get (row, "name"), s_int (row, "inFlight"));
    s_family (out, "dsh_tool_replicas", "gauge", "Components serving the tool now (0: it has gone).");
    json_array_foreach (rows, index, row)
        s_sample (out, "dsh_tool_replicas", "tool", json_object_get (row, "name"), s_int (row, "replicas"));
}

static void
s_parties (FILE *out, const json_t *stats)
{
    size_t index;
    json_t *row;
    json_t *components = json_object_get (stats, "components");
    s_family (out, "dsh_component_served_calls_total", "counter", "Results a component sent for calls it was given.");
    json_array_foreach (components, index, row)
        s_sample (out, "dsh_component_served_calls_total", "component", json_object_get (row, "id"),
                  s_int (row, "served"));
    s_family (out, "dsh_component_inflight", "gauge", "Calls a component holds now.");
    json_array_foreach (components, index, row)
        s_sample (out, "dsh_component_inflight", "component", json_object_get (row, "id"), s_int (row, "inFlight"));
    s_family (out, "dsh_component_heartbeat_age_seconds", "gauge",
              "Time since the broker last heard from a component.");
    json_array_foreach (components, index, row) {
        fputs ("dsh_component_heartbeat_age_seconds{component=\"", out);
        s_label_value (out, json_object_get (row, "id"));
        fprintf (out, "\"} %.3f\n", (double) s_int (row, "heartbeatAgeMs") / 1000.0);
    }
    json_t *agents = json_object_get (stats, "agents");
    s_family (out, "dsh_agent_calls_total", "counter",
              "Calls by the calling agent (\"\": none given; \"*\": every agent past the broker's bound).");
    json_array_foreach (agents, index, row)
        s_sample (out, "dsh_agent_calls_total", "agent", json_object_get (row, "agent"), s_int (row, "calls"));
    s_family (out, "dsh_agent_errors_total", "counter", "Calls by the calling agent that were answered with an error.");
    json_array_foreach (agents, index, row)
        s_sample (out, "dsh_agent_errors_total", "agent", json_object_get (row, "agent"), s_int (row, "errors"));
    s_family (out, "dsh_agent_inflight", "gauge", "Calls by the calling agent open now.");
    json_array_foreach (agents, index, row)
        s_sample (out, "dsh_agent_inflight", "agent", json_object_get (row, "agent"), s_int (row, "inFlight"));
    s_family (out, "dsh_component_workers", "gauge",
              "Calls a component runs at once, as its ANNOUNCE said (8 if not).");
    json_array_foreach (components, index, row)
        s_sample (out, "dsh_component_workers", "component", json_object_get (row, "id"), s_int (row, "workers"));
    s_family (out, "dsh_component_queued", "gauge", "Calls the broker holds for a busy component.");
    json_array_foreach (components, index, row)
        s_sample (out, "dsh_component_queued", "component", json_object_get (row, "id"), s_int (row, "queued"));
}

//  The broker's own figures (STATS: rssBytes, connections, queued,
//  queueBytes), each where the broker gives it.
static void
s_broker_figures (FILE *out, const json_t *stats)
{
    const struct { const char *key; const char *name; const char *help; } figures [] = {
        { "rssBytes", "dsh_broker_resident_memory_bytes", "The broker's resident memory (VmRSS)." },
        { "connections", "dsh_broker_connections", "WORK connections the broker routes calls to, one a component." },
        { "queued", "dsh_broker_queued_calls", "Calls the broker holds for busy components." },
        { "queueBytes", "dsh_broker_queue_bytes", "Bytes of the calls the broker holds for busy components." },
    };
    for (size_t index = 0; index < sizeof figures / sizeof figures [0]; index++) {
        if (!json_is_integer (json_object_get (stats, figures [index].key)))
            continue;
        s_family (out, figures [index].name, "gauge", figures [index].help);
        fprintf (out, "%s %" JSON_INTEGER_FORMAT "\n", figures [index].name, s_int (stats, figures [index].key));
    }
}

//  The audit trail's writer, from STATS audit (PROTOCOL.md, STATS): the
//  write time as a sum and a count, so that a rate of the one over the
//  other is the mean time of a batch.
static void
s_audit (FILE *out, const json_t *audit)
{
    s_family (out, "dsh_audit_info", "gauge", "The broker's audit trail: its chain's name and its store.");
    fputs ("dsh_audit_info{chain=\"", out);
    s_label_value (out, json_object_get (audit, "name"));
    fputs ("\",store=\"", out);
    s_label_value (out, json_object_get (audit, "store"));
    fputs ("\"} 1\n", out);
    s_family (out, "dsh_audit_healthy", "gauge", "Whether the audit store took the last write (0: it failed).");
    fprintf (out, "dsh_audit_healthy %d\n", json_is_true (json_object_get (audit, "healthy")));
    s_family (out, "dsh_audit_records_total", "counter", "Audit records written to the store.");
    fprintf (out, "dsh_audit_records_total %" JSON_INTEGER_FORMAT "\n", s_int (audit, "records"));
    s_family (out, "dsh_audit_dropped_total", "counter",
              "Audit records dropped because the store could not take them (audit = best-effort).");
    fprintf (out, "dsh_audit_dropped_total %" JSON_INTEGER_FORMAT "\n", s_int (audit, "dropped"));
    s_family (out, "dsh_audit_refused_total", "counter",
              "Calls refused AUDIT_UNAVAILABLE because they could not be recorded (audit = required).");
    fprintf (out, "dsh_audit_refused_total %" JSON_INTEGER_FORMAT "\n", s_int (audit, "refused"));
    s_family (out, "dsh_audit_queue_bytes", "gauge", "Bytes of audit records waiting to be written.");
    fprintf (out, "dsh_audit_queue_bytes %" JSON_INTEGER_FORMAT "\n", s_int (audit, "queueBytes"));
    s_family (out, "dsh_audit_write_batches_total", "counter", "Transactions the audit writer committed.");
    fprintf (out, "dsh_audit_write_batches_total %" JSON_INTEGER_FORMAT "\n", s_int (audit, "batches"));
    s_family (out, "dsh_audit_write_seconds_total", "counter", "Time the audit writer spent in its transactions.");
    fprintf (out, "dsh_audit_write_seconds_total %.6f\n", (double) s_int (audit, "writeUsTotal") / 1e6);
    s_family (out, "dsh_audit_write_seconds_max", "gauge",
              "The longest transaction of the audit writer since the broker started.");
    fprintf (out, "dsh_audit_write_seconds_max %.6f\n", (double) s_int (audit, "writeUsMax") / 1e6);
}

static void
s_chain (FILE *out, const json_t *chain, const json_t *pending)
{
    static const char *outcomes [] = { "passed", "answered", "failed", NULL };
    s_family (out, "dsh_stage_calls_total", "counter",
              "Calls through a stage of the chain: passed on, answered by the stage, or failed (timeouts).");
    size_t index;
    json_t *stage;
    json_array_foreach (chain, index, stage)
        for (size_t outcome = 0; outcomes [outcome]; outcome++) {
            fputs ("dsh_stage_calls_total{stage=\"", out);
            s_label_value (out, json_object_get (stage, "name"));
            fprintf (out, "\",outcome=\"%s\"} %" JSON_INTEGER_FORMAT "\n", outcomes [outcome],
                     s_int (stage, outcomes [outcome]));
        }
    s_family (out, "dsh_pending_approvals", "gauge", "Calls waiting for a human's approval.");
    fprintf (out, "dsh_pending_approvals %zu\n", json_array_size (pending));
}

char *
dsh_monitor_metrics (const json_t *tools, const json_t *stats)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream (&text, &size);
    assert (out);
    bool up = json_is_true (json_object_get (stats, "reachable"));
    s_family (out, "dsh_up", "gauge", "Whether the broker answered the monitor's last poll.");
    fprintf (out, "dsh_up %d\n", up);
    if (up) {
        json_t *body = json_object_get (stats, "stats");
        json_t *ping = json_object_get (stats, "ping");
        json_t *broker = body? body: ping;
        s_family (out, "dsh_broker_uptime_seconds", "gauge", "Time since the broker started.");
        fprintf (out, "dsh_broker_uptime_seconds %.3f\n", (double) s_int (broker, "uptimeMs") / 1000.0);
        s_family (out, "dsh_tools", "gauge", "Tools registered now.");
        fprintf (out, "dsh_tools %zu\n", json_array_size (json_object_get (tools, "tools")));
        size_t quarantined = 0, index;
        json_t *tool;
        json_array_foreach (json_object_get (tools, "tools"), index, tool)
            if (json_is_true (json_object_get (tool, "quarantined")))
                quarantined++;
        s_family (out, "dsh_tools_quarantined", "gauge",
                  "Tools whose definition differs from its pin (or is not accepted): held back until an admin accepts it.");
        fprintf (out, "dsh_tools_quarantined %zu\n", quarantined);
        s_family (out, "dsh_components", "gauge", "Components connected now.");
        fprintf (out, "dsh_components %zu\n", json_array_size (json_object_get (tools, "components")));
        s_family (out, "dsh_inflight", "gauge", "Calls open now.");
        fprintf (out, "dsh_inflight %" JSON_INTEGER_FORMAT "\n", s_int (broker, "inFlight"));
        if (body) {
            s_family (out, "dsh_stats_enabled", "gauge", "Whether the broker keeps call statistics (0: --no-stats).");
            fprintf (out, "dsh_stats_enabled %d\n", json_is_true (json_object_get (body, "enabled")));
            s_family (out, "dsh_answered_calls_total", "counter", "Calls answered since the broker started.");
            fprintf (out, "dsh_answered_calls_total %" JSON_INTEGER_FORMAT "\n", s_int (body, "calls"));
            s_family (out, "dsh_refused_calls_total", "counter",
                      "Calls answered at the front without reaching a tool, by error code.");
            s_map_samples (out, "dsh_refused_calls_total", "code", json_object_get (body, "refused"));
            s_family (out, "dsh_events_total", "counter", "Change events the broker published, by kind.");
            s_map_samples (out, "dsh_events_total", "kind", json_object_get (body, "events"));
            s_broker_figures (out, body);
            s_tools (out, body);
            s_parties (out, body);
            //  Nil with the audit off
            if (json_is_object (json_object_get (body, "audit")))
                s_audit (out, json_object_get (body, "audit"));
        }
        s_chain (out, json_object_get (stats, "chain"), json_object_get (stats, "pending"));
    }
    fclose (out);
    return text;
}
