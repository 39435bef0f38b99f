/*  =========================================================================
    dsh_monitor_model - the swarm as dsh-monitor sees it
    =========================================================================
*/

#include "dsh_monitor_model.h"

#include <czmq.h>

//  The longest preview of a pending call's arguments, in bytes
#define ARGUMENTS_PREVIEW_MAX   160
//  Rates and quantiles are over the polls of about this long, so that a
//  fast poll does not make them jump from one call to none
#define RATE_WINDOW_MS          10000
//  At most this many polls are kept for the window
#define RATE_SAMPLES            10
//  A history sample names at most this many tools, those with most calls
//  (a broker may have thousands), so that the history stays small
#define HISTORY_TOOLS           DSH_MONITOR_HISTORY_TOOLS
//  Failed calls the model keeps, newest first
#define FAILURES_KEPT           DSH_MONITOR_FAILURES_KEPT

//  One poll's STATS body, kept to measure rates from.
typedef struct {
    int64_t mono_ms;
    json_t *stats;
} s_sample_t;

struct _dsh_monitor_model_t {
    size_t events_kept;
    bool synced;
    char *broker;               //  the front the last snapshot came from
    json_int_t epoch;
    json_int_t seq;
    json_t *entries;            //  tool name -> tool entry, in registration order
    json_t *components;         //  component id -> [tool name]
    zlistx_t *events;           //  json_t, oldest first
    json_t *last;               //  the last poll with its rates
    json_t *pending;            //  the open approval requests, arguments and all
    zlistx_t *samples;          //  s_sample_t of the current epoch, oldest first
    //  The history: a sample of the rates every history_step_ms, the last
    //  history_kept of them, measured from history_base (the STATS body
    //  of the poll that ended the previous sample, or NULL after a gap)
    int64_t history_step_ms;
    size_t history_kept;
    json_t *history;            //  [sample], oldest first
    json_t *history_base;
    int64_t history_base_mono;
    json_t *history_added;      //  the sample the last poll added, or NULL
    json_t *failures;           //  the latest failed calls, newest first
    json_t *failures_seq;       //  broker -> the highest audit seq taken for them
};

static void
s_json_release (void **item_p)
{
    json_decref ((json_t *) *item_p);
    *item_p = NULL;
}

static void
s_sample_destroy (void **item_p)
{
    s_sample_t *sample = (s_sample_t *) *item_p;
    if (sample) {
        json_decref (sample->stats);
        free (sample);
        *item_p = NULL;
    }
}

dsh_monitor_model_t *
dsh_monitor_model_new (size_t events_kept)
{
    dsh_monitor_model_t *self = (dsh_monitor_model_t *) zmalloc (sizeof (dsh_monitor_model_t));
    assert (self);
    self->events_kept = events_kept? events_kept: 1;
    self->entries = json_object ();
    self->components = json_object ();
    self->events = zlistx_new ();
    zlistx_set_destructor (self->events, s_json_release);
    self->last = json_pack ("{s:b, s:s}", "reachable", 0, "error", "not polled yet");
    self->pending = json_array ();
    self->samples = zlistx_new ();
    zlistx_set_destructor (self->samples, s_sample_destroy);
    self->history_step_ms = DSH_MONITOR_HISTORY_STEP_MS;
    self->history_kept = DSH_MONITOR_HISTORY_KEPT;
    self->history = json_array ();
    self->failures = json_array ();
    self->failures_seq = json_object ();
    return self;
}

void
dsh_monitor_model_destroy (dsh_monitor_model_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_monitor_model_t *self = *self_p;
        zstr_free (&self->broker);
        json_decref (self->entries);
        json_decref (self->components);
        zlistx_destroy (&self->events);
        json_decref (self->last);
        json_decref (self->pending);
        zlistx_destroy (&self->samples);
        json_decref (self->history);
        json_decref (self->history_base);
        json_decref (self->failures);
        json_decref (self->failures_seq);
        free (self);
        *self_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  The tool set

static void
s_take_snapshot (dsh_monitor_model_t *self, const json_t *notice)
{
    json_object_clear (self->entries);
    json_object_clear (self->components);
    size_t index;
    json_t *row;
    json_array_foreach (json_object_get (notice, "tools"), index, row) {
        json_t *entry = json_object_get (row, "tool");
        const char *name = json_string_value (json_object_get (entry, "name"));
        if (name)
            json_object_set (self->entries, name, entry);
    }
    json_array_foreach (json_object_get (notice, "components"), index, row) {
        const char *id = json_string_value (json_object_get (row, "id"));
        json_t *tools = json_object_get (row, "tools");
        if (id)
            json_object_set_new (self->components, id, json_is_array (tools)? json_copy (tools): json_array ());
    }
    zstr_free (&self->broker);
    const char *broker = json_string_value (json_object_get (notice, "broker"));
    self->broker = broker? strdup (broker): NULL;
    self->synced = true;
}

static void
s_names_remove (json_t *names, const char *name)
{
    for (size_t index = 0; index < json_array_size (names); index++)
        if (json_is_string (json_array_get (names, index))
        &&  streq (json_string_value (json_array_get (names, index)), name)) {
            json_array_remove (names, index);
            return;
        }
}

//  Applies a change event to the tool set (see PROTOCOL.md, Change events).
static void
s_take_event (dsh_monitor_model_t *self, const json_t *event)
{
    const char *kind = json_string_value (json_object_get (event, "kind"));
    const char *component = json_string_value (json_object_get (event, "component"));
    const char *name = json_string_value (json_object_get (event, "name"));
    json_t *entry = json_object_get (event, "tool");
    if (!kind)
        return;
    if ((streq (kind, "tool.registered") || streq (kind, "tool.updated")) && name && json_is_object (entry)) {
        //  A registered name goes to the end of the order, an updated one stays
        if (streq (kind, "tool.registered"))
            json_object_del (self->entries, name);
        json_object_set (self->entries, name, entry);
        if (component) {
            json_t *names = json_object_get (self->components, component);
            if (!names) {
                names = json_array ();
                json_object_set_new (self->components, component, names);
            }
            s_names_remove (names, name);
            json_array_append_new (names, json_string (name));
        }
    }
    else
    if (streq (kind, "tool.unregistered") && name) {
        json_object_del (self->entries, name);
        const char *id;
        json_t *names;
        json_object_foreach (self->components, id, names)
            s_names_remove (names, name);
    }
    else
    if (streq (kind, "component.joined") && component) {
        json_t *tools = json_object_get (event, "tools");
        json_object_set_new (self->components, component, json_is_array (tools)? json_copy (tools): json_array ());
    }
    else
    if (streq (kind, "component.left") && component)
        json_object_del (self->components, component);
}

const json_t *
dsh_monitor_model_notice (dsh_monitor_model_t *self, const json_t *notice, int64_t at)
{
    assert (self);
    const char *kind = json_string_value (json_object_get (notice, "kind"));
    json_t *epoch = json_object_get (notice, "epoch");
    json_t *seq = json_object_get (notice, "seq");
    if (json_is_integer (epoch))
        self->epoch = json_integer_value (epoch);
    if (json_is_integer (seq))
        self->seq = json_integer_value (seq);
    if (kind && streq (kind, "snapshot")) {
        s_take_snapshot (self, notice);
        return NULL;
    }
    s_take_event (self, notice);
    json_t *kept = json_deep_copy (notice);
    //  The entry is in the tool set already; the list of events says what happened
    json_object_del (kept, "tool");
    json_object_set_new (kept, "at", json_integer (at));
    zlistx_add_end (self->events, kept);
    while (zlistx_size (self->events) > self->events_kept) {
        json_t *oldest = (json_t *) zlistx_detach (self->events, NULL);
        json_decref (oldest);
    }
    return kept;
}

static int
s_compare_ids (const void *one, const void *other)
{
    return strcmp (*(const char * const *) one, *(const char * const *) other);
}

json_t *
dsh_monitor_model_tools (dsh_monitor_model_t *self)
{
    assert (self);
    size_t count = json_object_size (self->components);
    const char **ids = (const char **) calloc (count? count: 1, sizeof (char *));
    assert (ids);
    size_t index = 0;
    const char *id;
    json_t *names;
    json_object_foreach (self->components, id, names)
        ids [index++] = id;
    qsort (ids, count, sizeof (char *), s_compare_ids);

    json_t *components = json_array ();
    json_t *providers = json_object ();         //  name -> [id]
    for (index = 0; index < count; index++) {
        names = json_object_get (self->components, ids [index]);
        json_array_append_new (components, json_pack ("{s:s, s:O}", "id", ids [index], "tools", names));
        size_t position;
        json_t *name;
        json_array_foreach (names, position, name) {
            if (!json_is_string (name))
                continue;
            json_t *list = json_object_get (providers, json_string_value (name));
            if (!list) {
                list = json_array ();
                json_object_set_new (providers, json_string_value (name), list);
            }
            json_array_append_new (list, json_string (ids [index]));
        }
    }
    free (ids);

    json_t *tools = json_array ();
    const char *name;
    json_t *entry;
    json_object_foreach (self->entries, name, entry) {
        //  MCP's defaults when a hint is absent: not read-only, destructive
        json_t *annotations = json_object_get (entry, "annotations");
        bool read_only = json_is_true (json_object_get (annotations, "readOnlyHint"));
        bool destructive = !read_only && !json_is_false (json_object_get (annotations, "destructiveHint"));
        json_t *list = json_object_get (providers, name);
        json_t *tool = json_pack ("{s:s, s:b, s:b, s:o}", "name", name, "readOnly", read_only,
                                  "destructive", destructive, "providers", list? json_incref (list): json_array ());
        json_t *title = json_object_get (entry, "title");
        if (json_is_string (title))
            json_object_set (tool, "title", title);
        //  The broker's marks on a tool whose definition is not its pin's
        if (json_is_true (json_object_get (entry, "quarantined"))) {
            json_object_set_new (tool, "quarantined", json_true ());
            const char *marks [] = { "digest", "pinnedDigest", "quarantineReason" };
            for (size_t mark = 0; mark < sizeof marks / sizeof marks [0]; mark++)
                if (json_is_string (json_object_get (entry, marks [mark])))
                    json_object_set (tool, marks [mark], json_object_get (entry, marks [mark]));
        }
        json_array_append_new (tools, tool);
    }
    json_decref (providers);
    json_t *doc = json_pack ("{s:b, s:o, s:o}", "synced", self->synced, "components", components, "tools", tools);
    if (self->synced) {
        json_object_set_new (doc, "epoch", json_integer (self->epoch));
        json_object_set_new (doc, "seq", json_integer (self->seq));
        if (self->broker)
            json_object_set_new (doc, "broker", json_string (self->broker));
    }
    return doc;
}

json_t *
dsh_monitor_model_events (dsh_monitor_model_t *self)
{
    assert (self);
    json_t *events = json_array ();
    for (json_t *event = (json_t *) zlistx_first (self->events); event;
         event = (json_t *) zlistx_next (self->events))
        json_array_append (events, event);
    return events;
}

//  ---------------------------------------------------------------------
//  Counters and what they say between two polls

double
dsh_monitor_quantile (const json_t *bounds_us, const uint64_t *counts, double q)
{
    size_t bounds = json_array_size (bounds_us);
    uint64_t total = 0;
    for (size_t index = 0; index <= bounds; index++)
        total += counts [index];
    if (total == 0)
        return -1;
    double rank = q * (double) total;
    uint64_t below = 0;
    for (size_t index = 0; index <= bounds; index++) {
        if (counts [index] && (double) (below + counts [index]) >= rank) {
            //  The +Inf bucket has no upper bound: its lower one is the answer
            if (index == bounds)
                return bounds? (double) json_integer_value (json_array_get (bounds_us, bounds - 1)): 0;
            double lower = index? (double) json_integer_value (json_array_get (bounds_us, index - 1)): 0;
            double upper = (double) json_integer_value (json_array_get (bounds_us, index));
            return lower + (upper - lower) * (rank - (double) below) / (double) counts [index];
        }
        below += counts [index];
    }
    return bounds? (double) json_integer_value (json_array_get (bounds_us, bounds - 1)): 0;
}

static json_int_t
s_sum_values (const json_t *map)
{
    json_int_t sum = 0;
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) map, key, value)
        sum += json_integer_value (value);
    return sum;
}

static json_t *
s_row_named (const json_t *rows, const char *name)
{
    size_t index;
    json_t *row;
    json_array_foreach (rows, index, row)
        if (json_is_string (json_object_get (row, "name"))
        &&  streq (json_string_value (json_object_get (row, "name")), name))
            return row;
    return NULL;
}

//  The quantile as ms, or null.
static json_t *
s_quantile_ms (const json_t *bounds, const uint64_t *counts, double q)
{
    double us = dsh_monitor_quantile (bounds, counts, q);
    return us < 0? json_null (): json_real (us / 1000.0);
}

//  Per-second rates of one tool between rows before and now (before may
//  be NULL: its first calls), or NULL if its counters went back.
static json_t *
s_tool_rates (const json_t *bounds, const json_t *before, const json_t *now, double seconds, uint64_t *total)
{
    json_int_t calls = s_sum_values (json_object_get (now, "outcomes"))
                     - s_sum_values (json_object_get (before, "outcomes"));
    json_int_t ok = json_integer_value (json_object_get (json_object_get (now, "outcomes"), "ok"))
                  - json_integer_value (json_object_get (json_object_get (before, "outcomes"), "ok"));
    json_t *histogram = json_object_get (now, "histogram");
    json_t *histogram_before = json_object_get (before, "histogram");
    size_t buckets = json_array_size (bounds) + 1;
    if (calls < 0 || ok < 0 || json_array_size (histogram) != buckets)
        return NULL;
    uint64_t *counts = (uint64_t *) calloc (buckets, sizeof (uint64_t));
    assert (counts);
    bool went_back = false;
    for (size_t index = 0; index < buckets; index++) {
        json_int_t delta = json_integer_value (json_array_get (histogram, index))
                         - json_integer_value (json_array_get (histogram_before, index));
        went_back |= delta < 0;
        counts [index] = delta > 0? (uint64_t) delta: 0;
    }
    json_t *rates = NULL;
    for (size_t index = 0; !went_back && index < buckets; index++)
        total [index] += counts [index];
    if (!went_back)
        rates = json_pack ("{s:f, s:f, s:o, s:o}", "calls", (double) calls / seconds,
                           "errors", (double) (calls - ok) / seconds,
                           "p50Ms", s_quantile_ms (bounds, counts, 0.5),
                           "p99Ms", s_quantile_ms (bounds, counts, 0.99));
    free (counts);
    return rates;
}

//  Rates between the STATS bodies before and now, interval_ms apart:
//  {intervalMs, calls, errors, p99Ms (of every tool's calls), tools}.
static json_t *
s_rates (const json_t *before, const json_t *now, int64_t interval_ms)
{
    double seconds = (double) interval_ms / 1000.0;
    json_t *bounds = json_object_get (now, "bucketsUs");
    uint64_t *total = (uint64_t *) calloc (json_array_size (bounds) + 1, sizeof (uint64_t));
    assert (total);
    json_t *tools = json_object ();
    double errors = 0;
    size_t index;
    json_t *row;
    json_array_foreach (json_object_get (now, "tools"), index, row) {
        const char *name = json_string_value (json_object_get (row, "name"));
        json_t *rates = name? s_tool_rates (bounds, s_row_named (json_object_get (before, "tools"), name),
                                            row, seconds, total): NULL;
        if (rates) {
            errors += json_real_value (json_object_get (rates, "errors"));
            json_object_set_new (tools, name, rates);
        }
    }
    //  A call refused at the front is an error the swarm answered too
    json_int_t refused = s_sum_values (json_object_get (now, "refused"))
                       - s_sum_values (json_object_get (before, "refused"));
    if (refused > 0)
        errors += (double) refused / seconds;
    json_int_t calls = json_integer_value (json_object_get (now, "calls"))
                     - json_integer_value (json_object_get (before, "calls"));
    json_t *p99 = s_quantile_ms (bounds, total, 0.99);
    free (total);
    return json_pack ("{s:I, s:f, s:f, s:o, s:o}", "intervalMs", (json_int_t) interval_ms,
                      "calls", calls > 0? (double) calls / seconds: 0.0, "errors", errors, "p99Ms", p99,
                      "tools", tools);
}

//  ---------------------------------------------------------------------
//  The history

void
dsh_monitor_model_set_history (dsh_monitor_model_t *self, int64_t step_ms, size_t kept)
{
    assert (self);
    self->history_step_ms = step_ms < DSH_MONITOR_HISTORY_STEP_MS_MIN? DSH_MONITOR_HISTORY_STEP_MS_MIN: step_ms;
    self->history_kept = kept < 1? 1: kept > DSH_MONITOR_HISTORY_MAX? DSH_MONITOR_HISTORY_MAX: kept;
    while (json_array_size (self->history) > self->history_kept)
        json_array_remove (self->history, 0);
}

static int
s_compare_calls (const void *one, const void *other)
{
    double left = json_real_value (json_object_get (*(json_t * const *) one, "calls"));
    double right = json_real_value (json_object_get (*(json_t * const *) other, "calls"));
    return left < right? 1: left > right? -1: 0;
}

//  A sample from rates: the totals, and the HISTORY_TOOLS tools with most
//  calls in it (a tool without calls is left out).
static json_t *
s_history_sample (const json_t *rates, int64_t at)
{
    json_t *sample = json_pack ("{s:I, s:O, s:O, s:O, s:O}", "at", (json_int_t) at,
                                "intervalMs", json_object_get (rates, "intervalMs"),
                                "calls", json_object_get (rates, "calls"), "errors", json_object_get (rates, "errors"),
                                "p99Ms", json_object_get (rates, "p99Ms"));
    json_t *all = json_object_get (rates, "tools");
    size_t count = json_object_size (all), used = 0;
    json_t **rows = (json_t **) calloc (count? count: 1, sizeof (json_t *));
    assert (rows);
    const char *name;
    json_t *row;
    json_object_foreach (all, name, row) {
        if (json_real_value (json_object_get (row, "calls")) <= 0)
            continue;
        //  The row remembers its name, for after the sort
        json_t *copy = json_pack ("{s:s, s:O, s:O, s:O}", "name", name, "calls", json_object_get (row, "calls"),
                                  "errors", json_object_get (row, "errors"), "p99Ms", json_object_get (row, "p99Ms"));
        rows [used++] = copy;
    }
    qsort (rows, used, sizeof (json_t *), s_compare_calls);
    json_t *tools = json_object ();
    for (size_t index = 0; index < used; index++) {
        if (index < HISTORY_TOOLS) {
            const char *its_name = json_string_value (json_object_get (rows [index], "name"));
            json_t *copy = json_copy (rows [index]);
            json_object_del (copy, "name");
            json_object_set_new (tools, its_name, copy);
        }
        json_decref (rows [index]);
    }
    free (rows);
    json_object_set_new (sample, "tools", tools);
    return sample;
}

//  Takes a poll's STATS body (NULL: a poll without one, a gap) into the
//  history: a sample once a step has passed since its base.
static void
s_history_take (dsh_monitor_model_t *self, json_t *stats, int64_t mono_ms, int64_t at)
{
    self->history_added = NULL;
    if (!stats) {
        json_decref (self->history_base);
        self->history_base = NULL;
        return;
    }
    //  A new broker, or counters that went back: no sample across them
    json_t *base = self->history_base;
    if (base && (!json_equal (json_object_get (stats, "epoch"), json_object_get (base, "epoch"))
             ||  json_integer_value (json_object_get (stats, "calls"))
                 < json_integer_value (json_object_get (base, "calls")))) {
        json_decref (base);
        base = self->history_base = NULL;
    }
    if (base && mono_ms - self->history_base_mono < self->history_step_ms)
        return;
    if (base && mono_ms > self->history_base_mono) {
        json_t *rates = s_rates (base, stats, mono_ms - self->history_base_mono);
        json_t *sample = s_history_sample (rates, at);
        json_decref (rates);
        json_array_append_new (self->history, sample);
        while (json_array_size (self->history) > self->history_kept)
            json_array_remove (self->history, 0);
        self->history_added = sample;
    }
    json_decref (self->history_base);
    self->history_base = json_incref (stats);
    self->history_base_mono = mono_ms;
}

json_t *
dsh_monitor_model_history (dsh_monitor_model_t *self)
{
    assert (self);
    return json_pack ("{s:I, s:I, s:I, s:O}", "stepMs", (json_int_t) self->history_step_ms,
                      "kept", (json_int_t) self->history_kept, "tools", (json_int_t) HISTORY_TOOLS,
                      "samples", self->history);
}

const json_t *
dsh_monitor_model_history_added (dsh_monitor_model_t *self)
{
    assert (self);
    return self->history_added;
}

//  ---------------------------------------------------------------------
//  The latest failed calls

//  The row a failed call's audit record (parsed) gives the page: what
//  says which call failed and how, never its arguments.
static json_t *
s_failure_row (const json_t *row)
{
    json_t *record = json_object_get (row, "record");
    json_t *failure = json_pack ("{s:O?, s:O?}", "broker", json_object_get (row, "broker"),
                                 "seq", json_object_get (row, "seq"));
    const char *fields [] = { "answeredMs", "tool", "agent", "outcome", "callId", "traceId", "durationUs",
                              "component" };
    for (size_t index = 0; index < sizeof fields / sizeof fields [0]; index++) {
        json_t *value = json_object_get (record, fields [index]);
        if (json_is_string (value) || json_is_integer (value))
            json_object_set (failure, fields [index], value);
    }
    return failure;
}

//  Takes the latest calls (newest first, each {broker, seq, record} with
//  its record parsed): the failed ones past the highest seq taken of
//  their broker's chain join the failures (rows seen again are not).
static void
s_failures_take (dsh_monitor_model_t *self, const json_t *calls)
{
    json_t *fresh = json_array ();
    json_t *highest = json_object ();       //  broker -> the highest seq of these rows
    size_t index;
    json_t *row;
    json_array_foreach (calls, index, row) {
        json_t *seq = json_object_get (row, "seq");
        const char *broker = json_string_value (json_object_get (row, "broker"));
        if (!json_is_integer (seq) || !broker)
            continue;
        json_t *taken = json_object_get (self->failures_seq, broker);
        if (taken && json_integer_value (seq) <= json_integer_value (taken))
            continue;
        json_t *high = json_object_get (highest, broker);
        if (!high || json_integer_value (seq) > json_integer_value (high))
            json_object_set (highest, broker, seq);
        const char *outcome = json_string_value (json_object_get (json_object_get (row, "record"), "outcome"));
        if (!outcome || streq (outcome, "ok") || json_array_size (fresh) >= FAILURES_KEPT)
            continue;
        json_array_append_new (fresh, s_failure_row (row));
    }
    //  A bounded map: brokers that share a store are few
    if (json_object_size (self->failures_seq) > 64)
        json_object_clear (self->failures_seq);
    json_object_update (self->failures_seq, highest);
    json_decref (highest);
    json_array_extend (fresh, self->failures);
    while (json_array_size (fresh) > FAILURES_KEPT)
        json_array_remove (fresh, json_array_size (fresh) - 1);
    json_decref (self->failures);
    self->failures = fresh;
}

//  The pending requests as the page shows them: arguments as a short
//  preview, so that one large call does not weigh on every poll.
static json_t *
s_pending_brief (const json_t *pending)
{
    json_t *brief = json_array ();
    size_t index;
    json_t *request;
    json_array_foreach (pending, index, request) {
        json_t *copy = json_copy (request);
        //  ASCII, so that it can be cut anywhere
        char *text = json_dumps (json_object_get (request, "arguments"),
                                 JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        json_object_del (copy, "arguments");
        if (text) {
            if (strlen (text) > ARGUMENTS_PREVIEW_MAX)
                strcpy (text + ARGUMENTS_PREVIEW_MAX - 3, "...");
            json_object_set_new (copy, "argumentsPreview", json_string (text));
        }
        free (text);
        json_array_append_new (brief, copy);
    }
    return brief;
}

//  What an unreachable poll keeps of the last one that reached the broker
static const char *s_last_known [] = { "stats", "ping", "statsError", "chain", "pending", "pins", "pinsError" };

//  An unreachable poll says nothing of the swarm: the doc keeps what the
//  last answered poll said, with when that was (lastKnownAt), rather than
//  show an empty chain, no pending approvals and zero counters.
static void
s_keep_last_known (dsh_monitor_model_t *self, json_t *doc)
{
    json_t *known_at = json_object_get (self->last, "lastKnownAt");
    if (json_is_true (json_object_get (self->last, "reachable")))
        known_at = json_object_get (self->last, "at");
    if (!known_at)
        return;                 //  Never reached: nothing is known
    json_object_set (doc, "lastKnownAt", known_at);
    for (size_t index = 0; index < sizeof s_last_known / sizeof s_last_known [0]; index++) {
        json_t *value = json_object_get (self->last, s_last_known [index]);
        if (value && !json_object_get (doc, s_last_known [index]))
            json_object_set (doc, s_last_known [index], value);
    }
}

void
dsh_monitor_model_poll (dsh_monitor_model_t *self, const json_t *poll, int64_t mono_ms, int64_t at)
{
    assert (self);
    json_t *doc = json_copy ((json_t *) poll);
    json_object_set_new (doc, "at", json_integer (at));
    //  The latest calls are for the failures, not for every page
    json_object_del (doc, "latestCalls");
    if (json_is_array (json_object_get (poll, "latestCalls")))
        s_failures_take (self, json_object_get (poll, "latestCalls"));
    json_object_set (doc, "failures", self->failures);
    s_history_take (self, json_is_true (json_object_get (poll, "reachable"))? json_object_get (poll, "stats"): NULL,
                    mono_ms, at);
    if (!json_is_true (json_object_get (poll, "reachable"))) {
        s_keep_last_known (self, doc);
        json_object_set_new (doc, "rates", json_null ());
        json_decref (self->last);
        self->last = doc;
        return;
    }
    json_t *pending = json_object_get (poll, "pending");
    if (json_is_array (pending)) {
        json_decref (self->pending);
        self->pending = json_copy (pending);
        json_object_set_new (doc, "pending", s_pending_brief (pending));
    }
    json_t *stats = json_object_get (poll, "stats");
    json_t *rates = NULL;
    if (stats) {
        //  A new epoch is a new broker: its counters start again, and a
        //  rate across the two would be nonsense
        s_sample_t *newest = (s_sample_t *) zlistx_last (self->samples);
        if (newest && !json_equal (json_object_get (stats, "epoch"), json_object_get (newest->stats, "epoch")))
            zlistx_purge (self->samples);
        //  The base is the newest poll at least a window old, else the oldest
        while (zlistx_size (self->samples) >= 2) {
            zlistx_first (self->samples);
            s_sample_t *second = (s_sample_t *) zlistx_next (self->samples);
            if (mono_ms - second->mono_ms < RATE_WINDOW_MS)
                break;
            void *oldest = zlistx_detach (self->samples, NULL);
            s_sample_destroy (&oldest);
        }
        s_sample_t *base = (s_sample_t *) zlistx_first (self->samples);
        if (base && mono_ms > base->mono_ms)
            rates = s_rates (base->stats, stats, mono_ms - base->mono_ms);
        newest = (s_sample_t *) zlistx_last (self->samples);
        if (!newest || mono_ms - newest->mono_ms >= RATE_WINDOW_MS / RATE_SAMPLES) {
            s_sample_t *sample = (s_sample_t *) zmalloc (sizeof (s_sample_t));
            assert (sample);
            sample->mono_ms = mono_ms;
            sample->stats = json_incref (stats);
            zlistx_add_end (self->samples, sample);
        }
    }
    json_object_set_new (doc, "rates", rates? rates: json_null ());
    json_decref (self->last);
    self->last = doc;
}

json_t *
dsh_monitor_model_stats (dsh_monitor_model_t *self)
{
    assert (self);
    return json_incref (self->last);
}

json_t *
dsh_monitor_model_stats_public (dsh_monitor_model_t *self)
{
    assert (self);
    json_t *stats = json_copy (self->last);
    json_t *pending = json_object_get (self->last, "pending");
    if (pending) {
        json_t *brief = json_array ();
        size_t index;
        json_t *request;
        json_array_foreach (pending, index, request) {
            json_t *copy = json_copy (request);
            json_object_del (copy, "argumentsPreview");
            json_object_del (copy, "arguments");
            //  The digest of a short argument is the argument to whoever tries them all
            json_object_del (copy, "argumentsDigest");
            json_array_append_new (brief, copy);
        }
        json_object_set_new (stats, "pending", brief);
    }
    return stats;
}

json_t *
dsh_monitor_model_pending (dsh_monitor_model_t *self)
{
    assert (self);
    return json_copy (self->pending);
}

//  The index of stage's request id in the pending requests, or -1.
static int
s_pending_find (dsh_monitor_model_t *self, const char *stage, const char *id)
{
    size_t index;
    json_t *request;
    json_array_foreach (self->pending, index, request) {
        const char *its_stage = json_string_value (json_object_get (request, "stage"));
        const char *its_id = json_string_value (json_object_get (request, "id"));
        if (its_stage && its_id && streq (its_stage, stage) && streq (its_id, id))
            return (int) index;
    }
    return -1;
}

//  The last poll's pending approvals are the requests as they are now.
static void
s_pending_changed (dsh_monitor_model_t *self)
{
    json_t *last = json_copy (self->last);
    json_object_set_new (last, "pending", s_pending_brief (self->pending));
    json_decref (self->last);
    self->last = last;
}

void
dsh_monitor_model_pending_open (dsh_monitor_model_t *self, const char *stage, const json_t *request)
{
    assert (self);
    assert (stage);
    const char *id = json_string_value (json_object_get (request, "id"));
    if (!id)
        return;
    json_t *copy = json_copy ((json_t *) request);
    json_object_set_new (copy, "stage", json_string (stage));
    int index = s_pending_find (self, stage, id);
    if (index >= 0)
        json_array_set_new (self->pending, (size_t) index, copy);
    else
        json_array_append_new (self->pending, copy);
    s_pending_changed (self);
}

void
dsh_monitor_model_pending_close (dsh_monitor_model_t *self, const char *stage, const char *id)
{
    assert (self);
    assert (stage && id);
    int index = s_pending_find (self, stage, id);
    if (index < 0)
        return;
    json_array_remove (self->pending, (size_t) index);
    s_pending_changed (self);
}
