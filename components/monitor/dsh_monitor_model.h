/*  =========================================================================
    dsh_monitor_model - the swarm as dsh-monitor sees it

    Everything the page, the JSON API and /metrics show, kept in one place and
    fed from two sources: the watcher's notices (a snapshot after each
    (re)sync, then every change event) give the tool set by component and
    the last events; each poll of the broker (STATS, CHAIN, the pending
    approvals of each permission stage) gives the counters, from which the
    model derives rates and latency quantiles over the polls of the last
    ten seconds or so (a sliding window of the same broker epoch). It reads JSON and gives JSON; it knows no sockets.
    =========================================================================
*/

#ifndef DSH_MONITOR_MODEL_H_INCLUDED
#define DSH_MONITOR_MODEL_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_monitor_model_t dsh_monitor_model_t;

//  The history's defaults: a sample every 5 s, the last 180 (15 minutes);
//  a step of at least 100 ms, at most 100 000 samples, each naming at most
//  16 tools. The latest failed calls kept: 20.
#define DSH_MONITOR_HISTORY_STEP_MS     5000
#define DSH_MONITOR_HISTORY_STEP_MS_MIN 100
#define DSH_MONITOR_HISTORY_KEPT        180
#define DSH_MONITOR_HISTORY_MAX         100000
#define DSH_MONITOR_HISTORY_TOOLS       16
#define DSH_MONITOR_FAILURES_KEPT       20

//  A model that keeps the last events_kept change events (at least 1).
dsh_monitor_model_t *
    dsh_monitor_model_new (size_t events_kept);

//  Destroy; safe twice.
void
    dsh_monitor_model_destroy (dsh_monitor_model_t **self_p);

//  Take a watcher notice (borrowed): a snapshot replaces the tool set and
//  gives NULL; a change event updates it and joins the last events,
//  stamped with at (ms since the Unix epoch) and without its tool entry,
//  and that is what is given (the model's, valid until its next call).
const json_t *
    dsh_monitor_model_notice (dsh_monitor_model_t *self, const json_t *notice, int64_t at);

//  Take one poll's results (borrowed): {reachable, error?, stats?, ping?,
//  chain?, pending?, pins?, pinsError?}, stats a STATS reply body, ping a
//  PONG (for a broker that has no STATS), chain CHAIN's stages, pending
//  the open approval requests with their stage, pins what PINS list said
//  (with each quarantined pin's diff) or pinsError why not. mono_ms is a
//  monotonic clock for the rates; at is ms since the Unix epoch. An
//  unreachable poll keeps the last answered one's stats, ping,
//  statsError, chain, pending, pins and pinsError, as they were at
//  lastKnownAt (ms since the Unix epoch), and has no rates.
//  A poll may have latestCalls, the broker's newest audit rows ({broker,
//  seq, record} with record parsed, newest first): their failed calls
//  (outcome not "ok") past the highest seq taken of their broker join the
//  model's failures, which every poll's doc
//  has (failures, newest first, at most DSH_MONITOR_FAILURES_KEPT, each
//  {broker, seq, answeredMs?, tool?, agent?, outcome, callId?, traceId?,
//  durationUs?, component?}: no arguments), in place of latestCalls.
void
    dsh_monitor_model_poll (dsh_monitor_model_t *self, const json_t *poll, int64_t mono_ms, int64_t at);

//  Keep a history sample every step_ms (at least
//  DSH_MONITOR_HISTORY_STEP_MS_MIN), the last kept (1 to
//  DSH_MONITOR_HISTORY_MAX) of them; fewer kept drops the oldest now.
void
    dsh_monitor_model_set_history (dsh_monitor_model_t *self, int64_t step_ms, size_t kept);

//  The history (caller owns), a ring the polls fill: {stepMs, kept, tools,
//  samples: [{at, intervalMs, calls, errors, p99Ms, tools: {name: {calls,
//  errors, p99Ms}}}]}, oldest first, one a step: calls and errors per
//  second and p99Ms (null when no call ended) over the intervalMs before
//  at (ms since the Unix epoch), in total and for the `tools` tools with
//  most calls in it. A poll that did not reach the broker, a new epoch or
//  counters that went back leave a gap: the next sample is a step after
//  the next poll that answered.
json_t *
    dsh_monitor_model_history (dsh_monitor_model_t *self);

//  The sample the last poll added (borrowed, valid until the next poll),
//  or NULL.
const json_t *
    dsh_monitor_model_history_added (dsh_monitor_model_t *self);

//  The tool set (caller owns): {synced, broker?, epoch?, seq?, components:
//  [{id, tools: [name]}] sorted by id, tools: [{name, title?, readOnly,
//  destructive, providers: [id], quarantined?, digest?, pinnedDigest?,
//  quarantineReason?}] in registration order}; the last four are the
//  broker's marks on a quarantined tool.
json_t *
    dsh_monitor_model_tools (dsh_monitor_model_t *self);

//  The last poll with what was derived from it (caller owns): the poll's
//  fields, plus at, and rates {intervalMs, calls, errors, tools: {name:
//  {calls, errors, p50Ms, p99Ms}}, p99Ms} over the window's intervalMs (per
//  second; quantiles null when no call ended in it), or rates null on the
//  first poll of an epoch. Before any poll: {reachable: false, error: "not polled yet"}.
json_t *
    dsh_monitor_model_stats (dsh_monitor_model_t *self);

//  The last poll as a viewer who did not present the token sees it
//  (caller owns): as dsh_monitor_model_stats, without any call's
//  arguments (the pending approvals have no argumentsPreview, nor the
//  argumentsDigest, which gives away an argument that is easy to guess).
json_t *
    dsh_monitor_model_stats_public (dsh_monitor_model_t *self);

//  The open approval requests, each with its stage and its arguments
//  (caller owns): the last poll's, and what the approvals sockets said
//  since.
json_t *
    dsh_monitor_model_pending (dsh_monitor_model_t *self);

//  A request stage's approvals socket put to us (PENDING, borrowed) is
//  open: added, or replacing the one of its id.
void
    dsh_monitor_model_pending_open (dsh_monitor_model_t *self, const char *stage, const json_t *request);

//  Stage's request id is resolved (RESOLVED): no longer pending.
void
    dsh_monitor_model_pending_close (dsh_monitor_model_t *self, const char *stage, const char *id);

//  The last change events, oldest first (caller owns).
json_t *
    dsh_monitor_model_events (dsh_monitor_model_t *self);

//  The latency at quantile q (0..1) in µs of a histogram's counts (not
//  cumulative; one more than bounds, the last for +Inf), interpolated
//  linearly within its bucket as Prometheus's histogram_quantile does.
//  -1 when the counts are all 0.
double
    dsh_monitor_quantile (const json_t *bounds_us, const uint64_t *counts, double q);

#ifdef __cplusplus
}
#endif

#endif
