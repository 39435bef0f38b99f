/*  =========================================================================
    dsh_limit - the limit middleware: quotas per agent and tool

    A runaway agent loop can call write_file thousands of times a minute;
    the broker's fair queue only stops it from starving the others. This
    stage refuses what is over a quota before anything else runs, so it
    goes first in a chain (the cheapest veto first).

    Rules come from the stage's ZPL section, one `rule` child each:

        max_keys = 10000        buckets and counters kept, at most (below)
        rule
            agent = "*"         glob on the calling agent (default "*")
            tool = "write_*"    glob on the tool name (default "*")
            rate = 5            calls per second, refilled continuously
                                (fractional allowed: 0.5 is one in 2 s)
            burst = 10          the bucket's size (default max(1, rate))
            in_flight = 4       calls of the agent matching the rule that
                                may be in the stage's hands at once

    A rule needs rate or in_flight. The agent is the call's agent, which
    under CURVE the broker has checked against the key (or stamped in from
    it); a call that names none is agent "". Every rule that matches a call
    applies, each with its own bucket and counter per agent; the call
    passes only if every one admits it, and only then is a token taken
    from each (a refused call costs no token). Over a limit the stage
    answers RATE_LIMITED:

        Error: agent "a" is over its limit for "write_file" (10/s,
        burst 20); retry after 350 ms

    with error.retryAfterMs, or, for a cap on calls in flight, "(4 calls in
    flight, at most 4); retry when one of them ends" and no retryAfterMs.

    A call counted in flight is released exactly once, whatever ends it
    (its result coming up, a veto or an error below, the deadline, a
    cancel, the broker answering it): the count is held by data attached
    to the call, whose destructor runs when the stage runtime lets go of
    its record of the call, and only calls that match an in_flight rule
    are watched.

    Memory is bounded whatever agent ids callers invent: at most max_keys
    (rule, agent) entries with no call in flight are kept; past it the
    least recently used is evicted (its bucket starts full if the agent
    comes back). An entry with calls in flight is never evicted (its count
    must come back down), so the table holds at most max_keys more than
    the calls in flight times the rules, which the broker's max_in_flight
    bounds.

    Control commands: "limits" -> {maxKeys, keys, rules: [{agent, tool,
    rate?, burst?, inFlight?}], agents: [{agent, rule, tokens?, inFlight}]}
    (rule is the index in rules, tokens the bucket now); "set" {agent?,
    tool?, rate?, burst?, inFlight?} replaces the rule with that agent and
    tool glob (its counters kept) or adds one at the end; "reset" {agent?}
    forgets the counters (of one agent): buckets start full again, and only
    the counts of calls still in flight are kept. Changes are this stage's
    own, per broker, and not persisted: a restart reads the config again.

    The bucket is a pure function of a clock the caller passes, and the
    table takes `now` too, for unit tests.
    =========================================================================
*/

#ifndef DSH_LIMIT_H_INCLUDED
#define DSH_LIMIT_H_INCLUDED

#include <czmq.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "dsh_middleware.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSH_LIMIT_MAX_KEYS_DEFAULT 10000
#define DSH_LIMIT_RULES_MAX 256

//  A token bucket: tokens now, and when they were last counted (ms, any
//  monotonic clock).
typedef struct {
    double tokens;
    int64_t counted_ms;
} dsh_limit_bucket_t;

//  A full bucket of burst tokens at now_ms.
void
    dsh_limit_bucket_init (dsh_limit_bucket_t *bucket, double burst, int64_t now_ms);

//  Refill the bucket at rate tokens per second up to burst, as of now_ms
//  (a clock that went back adds nothing). Returns 0 if it holds a token
//  now, else the ms until it will (at least 1).
int64_t
    dsh_limit_bucket_refill (dsh_limit_bucket_t *bucket, double rate, double burst, int64_t now_ms);

typedef struct _dsh_limit_t dsh_limit_t;

//  What an admitted call holds: its place in each in_flight counter.
typedef struct _dsh_limit_ticket_t dsh_limit_ticket_t;

//  Read the settings (NULL: no rules) into a new table. NULL with a reason
//  naming the rule and setting on bad input.
dsh_limit_t *
    dsh_limit_new (zconfig_t *settings, char *error, size_t error_size);

//  Destroy; safe twice. Tickets still held must be released first.
void
    dsh_limit_destroy (dsh_limit_t **self_p);

//  Admit a call by agent (NULL means "") of tool at now_ms. Returns 0 if
//  every matching rule admits it (tokens taken), with *ticket_p the new
//  ticket to release when the call ends, or NULL if no in_flight rule
//  matched. Returns -1 if one refuses it, with *refusal the text (caller
//  frees) and *retry_after_ms the ms until the buckets that refused have
//  a token, or -1 when only an in_flight cap refused.
int
    dsh_limit_admit (dsh_limit_t *self, const char *agent, const char *tool, int64_t now_ms,
                     dsh_limit_ticket_t **ticket_p, char **refusal, int64_t *retry_after_ms);

//  Release a ticket's calls in flight; nulls it, safe on NULL.
void
    dsh_limit_release (dsh_limit_ticket_t **ticket_p);

//  Replace the rule with agent glob and tool glob (NULL: "*"), or add it:
//  rate and in_flight 0 mean none, burst 0 the default. Returns 0, or -1
//  with a reason.
int
    dsh_limit_set (dsh_limit_t *self, const char *agent, const char *tool, double rate, double burst,
                   int64_t in_flight, char *error, size_t error_size);

//  Forget the counters of agent (NULL: every agent): buckets are full
//  again, counts of calls still in flight stay. Returns how many entries
//  were forgotten.
size_t
    dsh_limit_reset (dsh_limit_t *self, const char *agent);

//  The number of rules.
size_t
    dsh_limit_rules (dsh_limit_t *self);

//  The number of (rule, agent) entries kept now.
size_t
    dsh_limit_keys (dsh_limit_t *self);

//  The calls in flight counted for agent under rule index (0 if none).
int64_t
    dsh_limit_in_flight (dsh_limit_t *self, size_t rule, const char *agent);

//  Pack the "limits" reply {maxKeys, keys, rules, agents} as of now_ms.
void
    dsh_limit_pack (dsh_limit_t *self, int64_t now_ms, msgpack_packer *pk);

//  Set up a limit stage (see dsh_middleware_setup).
int
    dsh_limit_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                     dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
