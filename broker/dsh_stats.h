/*  =========================================================================
    dsh_stats - call statistics, cheap enough to be always on

    What FRONT's STATS reports (PROTOCOL.md, "STATS"): per tool, answered
    calls by outcome, calls in flight, a fixed-bucket latency histogram and
    its sum; per component, the RESULTs it sent; per agent, calls and
    errors; calls refused at FRONT by code; change events by kind.

    A call is counted twice, both in O(1): when it is decided for a tool
    (dsh_stats_open finds its tool's and its agent's rows, which the call's
    record keeps) and when it is answered (dsh_stats_answer, from
    dsh_inflight_answer, the one place a call is answered). Memory is
    bounded against an attacker inventing names: 4096 tool rows (rows of
    tools no one provides are evicted, least recently called first; past
    that, calls count under tool "*") and 1024 agent rows (past that, under
    agent "*").

    Every hook takes a NULL self and does nothing, and dsh_stats_pack
    then reports statistics off: a broker run with --no-stats has no table,
    and pays one test per hook.
    =========================================================================
*/

#ifndef DSH_STATS_H_INCLUDED
#define DSH_STATS_H_INCLUDED

#include <czmq.h>

#include "dsh_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Rows of the table, at most (the overflow row "*" is one of them).
#define DSH_STATS_TOOLS_MAX     4096
#define DSH_STATS_AGENTS_MAX    1024

//  Buckets of the latency histogram: upper bounds, inclusive, in µs; one
//  more bucket past the last is implicit (+Inf).
#define DSH_STATS_BUCKETS       18

//  An answer's outcome not known yet (a stage may have rewritten it): the
//  answer's body is read for it. Outcomes are small integers from here on.
#define DSH_STATS_OUTCOME_UNKNOWN   0

typedef struct _dsh_stats_t dsh_stats_t;
typedef struct _dsh_stats_tool_t dsh_stats_tool_t;
typedef struct _dsh_stats_agent_t dsh_stats_agent_t;

//  How many components provide a tool now (0: it is gone). Rows of gone
//  tools may be evicted, and STATS reports the count as "replicas".
typedef size_t (dsh_stats_replicas_fn) (void *arg, const char *tool);

//  An empty table; replicas says who provides a tool.
dsh_stats_t *
    dsh_stats_new (dsh_stats_replicas_fn *replicas, void *arg);

//  Destroy the table; safe twice.
void
    dsh_stats_destroy (dsh_stats_t **self_p);

//  The histogram's upper bounds, DSH_STATS_BUCKETS of them, ascending.
const uint64_t *
    dsh_stats_buckets_us (void);

//  The outcome of an error code: its own if it is one of PROTOCOL.md's
//  codes, else TOOL_FAILED's. NULL is "ok".
int
    dsh_stats_outcome (const char *code);

//  The outcome of a RESULT body's root: "ok" unless isError is true, then
//  its error.code's (dsh_stats_outcome).
int
    dsh_stats_outcome_of (const msgpack_object *result);

//  The same from a RESULT body's bytes; TOOL_FAILED's if they do not decode.
int
    dsh_stats_outcome_decode (const void *data, size_t size);

//  The name STATS reports for an outcome ("ok", or the code).
const char *
    dsh_stats_outcome_name (int outcome);

//  A call was decided for tool, from agent (NULL: none given): counts it
//  in flight and sets the rows its answer is counted in. The rows stay
//  until that answer (dsh_stats_answer).
void
    dsh_stats_open (dsh_stats_t *self, const char *tool, const char *agent,
                    dsh_stats_tool_t **tool_p, dsh_stats_agent_t **agent_p);

//  The call whose rows these are was answered with outcome, latency_us
//  after it arrived.
void
    dsh_stats_answer (dsh_stats_t *self, dsh_stats_tool_t *tool, dsh_stats_agent_t *agent,
                      int outcome, uint64_t latency_us);

//  A call was refused at FRONT, before it had a record, with code.
void
    dsh_stats_refused (dsh_stats_t *self, const char *code);

//  A change event of kind was published.
void
    dsh_stats_event (dsh_stats_t *self, const char *kind);

//  Component sent a RESULT for a call it was given.
void
    dsh_stats_served (dsh_stats_t *self, const char *component);

//  Component left the catalog: its count goes with it.
void
    dsh_stats_component_gone (dsh_stats_t *self, const char *component);

//  RESULTs component sent since it came (0 if none, or no table).
uint64_t
    dsh_stats_served_count (dsh_stats_t *self, const char *component);

//  Pack STATS' entries but broker, epoch, uptimeMs, inFlight and
//  components into the packer's open map: enabled, bucketsUs, calls,
//  refused, events, tools and agents. tools lists the tools that exist,
//  in registration order (char *); rows of the others follow. With no
//  table: enabled false and every counter empty.
void
    dsh_stats_pack (dsh_stats_t *self, dsh_packer_t *packer, zlistx_t *tools);

#ifdef __cplusplus
}
#endif

#endif
