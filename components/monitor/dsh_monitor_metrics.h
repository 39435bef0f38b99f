/*  =========================================================================
    dsh_monitor_metrics - the swarm in Prometheus's text exposition format

    Renders what the monitor's model knows (its tool set and its last poll
    of the broker, as the model's JSON gives them) as text format 0.0.4:
    every family once with HELP and TYPE, conventional names and units
    (seconds, _total counters, a cumulative _bucket/_sum/_count histogram),
    and label values escaped, since tool names, component ids and agent ids
    come from untrusted parties. A broker that did not answer the last poll
    gives dsh_up 0 and nothing else, as an exporter whose target failed.
    =========================================================================
*/

#ifndef DSH_MONITOR_METRICS_H_INCLUDED
#define DSH_MONITOR_METRICS_H_INCLUDED

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The content type of the exposition.
#define DSH_MONITOR_METRICS_TYPE    "text/plain; version=0.0.4; charset=utf-8"

//  The exposition of tools (dsh_monitor_model_tools) and stats
//  (dsh_monitor_model_stats). Caller frees.
char *
    dsh_monitor_metrics (const json_t *tools, const json_t *stats);

#ifdef __cplusplus
}
#endif

#endif
