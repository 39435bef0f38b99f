/*  =========================================================================
    dsh_limit - the limit middleware: quotas per agent and tool
    =========================================================================
*/

#include "dsh_limit.h"
#include "dsh_doc.h"
#include "dsh_proto.h"
#include "dsh_settings.h"

#include <fnmatch.h>
//  isfinite and NAN only: the stage links no libm
#include <math.h>

#define S_GLOB_MAX 256
#define S_NUMBER_MAX 1e6        //  rate, burst and in_flight, at most

//  True if number (at most S_NUMBER_MAX) is whole.
static bool
s_whole (double number)
{
    return (double) (int64_t) number == number;
}

typedef struct {
    uint64_t id;                //  stable across `set`: entries are keyed on it
    char *agent;                //  globs
    char *tool;
    double rate;                //  0: no bucket
    double burst;
    int64_t in_flight;          //  0: no cap
} s_rule_t;

//  The counters of one agent under one rule.
typedef struct {
    char *key;                  //  "ID/agent", the table's key
    s_rule_t *rule;
    char *agent;
    dsh_limit_bucket_t bucket;
    int64_t in_flight;
    void *handle;               //  in the eviction order; NULL while calls are in flight
    uint64_t admission;         //  the last admission that used it
} s_entry_t;

struct _dsh_limit_t {
    zlistx_t *rules;            //  s_rule_t *, in order
    uint64_t next_rule_id;
    zhashx_t *entries;          //  key -> s_entry_t *, owns them
    zlistx_t *idle;             //  entries with no call in flight, least recently used first
    size_t max_keys;
    uint64_t admission;         //  counts admissions, so one never evicts its own entries
};

#define S_TICKET_MAX DSH_LIMIT_RULES_MAX

struct _dsh_limit_ticket_t {
    dsh_limit_t *limit;
    size_t count;
    s_entry_t *entries [];
};

//  --- The bucket ----------------------------------------------------------

void
dsh_limit_bucket_init (dsh_limit_bucket_t *bucket, double burst, int64_t now_ms)
{
    assert (bucket);
    bucket->tokens = burst;
    bucket->counted_ms = now_ms;
}

int64_t
dsh_limit_bucket_refill (dsh_limit_bucket_t *bucket, double rate, double burst, int64_t now_ms)
{
    assert (bucket);
    assert (rate > 0);
    if (now_ms > bucket->counted_ms) {
        //  In double: a bucket made "full whenever first read" was counted
        //  at INT64_MIN
        bucket->tokens += ((double) now_ms - (double) bucket->counted_ms) * rate / 1000.0;
        bucket->counted_ms = now_ms;
    }
    //  A burst lowered at run time takes effect at once
    if (bucket->tokens > burst)
        bucket->tokens = burst;
    if (bucket->tokens >= 1.0)
        return 0;
    double wait = (1.0 - bucket->tokens) * 1000.0 / rate;
    int64_t wait_ms = (int64_t) wait;
    if ((double) wait_ms < wait)
        wait_ms++;
    return wait_ms > 0? wait_ms: 1;
}

//  --- Rules ---------------------------------------------------------------

static void
s_rule_destroy (s_rule_t **self_p)
{
    if (*self_p) {
        s_rule_t *self = *self_p;
        zstr_free (&self->agent);
        zstr_free (&self->tool);
        free (self);
        *self_p = NULL;
    }
}

//  True if glob is one fnmatch reads as the writer meant: not empty, not
//  too long, every [ closed and no \ at the end.
static bool
s_glob_valid (const char *glob, char *error, size_t error_size, const char *what)
{
    size_t length = strlen (glob);
    const char *why = NULL;
    if (length == 0)
        why = "is empty";
    else
    if (length > S_GLOB_MAX)
        why = "is longer than 256 bytes";
    for (size_t index = 0; !why && index < length; index++) {
        if (glob [index] == '\\') {
            if (index + 1 == length)
                why = "ends in a \\";
            index++;
        }
        else
        if (glob [index] == '[') {
            size_t close = index + 1;
            if (close < length && (glob [close] == '!' || glob [close] == '^'))
                close++;
            if (close < length && glob [close] == ']')
                close++;
            while (close < length && glob [close] != ']')
                close++;
            if (close >= length)
                why = "has a [ that is not closed";
            index = close;
        }
    }
    if (why)
        snprintf (error, error_size, "%s \"%.64s\" is not a valid glob: it %s", what, glob, why);
    return why == NULL;
}

//  Check a rule's values; burst 0 becomes the default. Returns 0 or -1.
static int
s_rule_check (const char *agent, const char *tool, double rate, double *burst, int64_t in_flight,
              char *error, size_t error_size)
{
    if (!s_glob_valid (agent, error, error_size, "agent")
    ||  !s_glob_valid (tool, error, error_size, "tool"))
        return -1;
    if (!isfinite (rate) || rate < 0 || rate > S_NUMBER_MAX) {
        snprintf (error, error_size, "rate must be a number of calls per second above 0, at most 1000000");
        return -1;
    }
    if (!isfinite (*burst) || *burst < 0 || *burst > S_NUMBER_MAX || (*burst > 0 && *burst < 1)) {
        snprintf (error, error_size, "burst must be a number from 1 to 1000000");
        return -1;
    }
    if (in_flight < 0 || in_flight > (int64_t) S_NUMBER_MAX) {
        snprintf (error, error_size, "in_flight must be a whole number from 1 to 1000000");
        return -1;
    }
    if (*burst > 0 && rate == 0) {
        snprintf (error, error_size, "burst needs a rate");
        return -1;
    }
    if (rate == 0 && in_flight == 0) {
        snprintf (error, error_size, "a rule needs rate or in_flight");
        return -1;
    }
    if (rate > 0 && *burst == 0)
        *burst = rate > 1? rate: 1;
    return 0;
}

static s_rule_t *
s_rule_find (dsh_limit_t *self, const char *agent, const char *tool)
{
    for (s_rule_t *rule = (s_rule_t *) zlistx_first (self->rules); rule;
         rule = (s_rule_t *) zlistx_next (self->rules))
        if (streq (rule->agent, agent) && streq (rule->tool, tool))
            return rule;
    return NULL;
}

//  A number in a ZPL value: the whole text, finite. Returns 0 or -1.
static int
s_number (const char *value, double *target)
{
    char *end = NULL;
    errno = 0;
    double number = value? strtod (value, &end): NAN;
    if (!value || end == value || *end || errno || !isfinite (number))
        return -1;
    *target = number;
    return 0;
}

//  Read one `rule` section and add it. Returns 0, or -1 with a reason.
static int
s_rule_read (dsh_limit_t *self, zconfig_t *section, size_t position, char *error, size_t error_size)
{
    const char *agent = "*";
    const char *tool = "*";
    double rate = 0, burst = 0, in_flight = 0;
    char reason [256] = "";
    for (zconfig_t *item = zconfig_child (section); item && !*reason; item = zconfig_next (item)) {
        const char *key = zconfig_name (item);
        const char *value = zconfig_value (item);
        if (streq (key, "agent"))
            agent = value;
        else
        if (streq (key, "tool"))
            tool = value;
        else
        if (streq (key, "rate") || streq (key, "burst") || streq (key, "in_flight")) {
            double *target = streq (key, "rate")? &rate: streq (key, "burst")? &burst: &in_flight;
            if (s_number (value, target) || *target <= 0)
                snprintf (reason, sizeof (reason), "%s must be a number above 0, not \"%.32s\"", key, value);
            else
            if (target == &in_flight && (in_flight > S_NUMBER_MAX || !s_whole (in_flight)))
                snprintf (reason, sizeof (reason), "in_flight must be a whole number, not \"%.32s\"", value);
        }
        else
            snprintf (reason, sizeof (reason), "unknown setting \"%.64s\" (agent, tool, rate, burst, in_flight)", key);
    }
    if (!*reason && s_rule_find (self, agent, tool))
        snprintf (reason, sizeof (reason), "agent \"%.64s\" and tool \"%.64s\" are an earlier rule's", agent, tool);
    if (!*reason && zlistx_size (self->rules) >= DSH_LIMIT_RULES_MAX)
        snprintf (reason, sizeof (reason), "more than %d rules", DSH_LIMIT_RULES_MAX);
    if (!*reason)
        dsh_limit_set (self, agent, tool, rate, burst, (int64_t) in_flight, reason, sizeof (reason));
    if (*reason) {
        snprintf (error, error_size, "rule %zu: %s", position, reason);
        return -1;
    }
    return 0;
}

//  --- The table -----------------------------------------------------------

static void
s_entry_free (void **item_p)
{
    s_entry_t *entry = (s_entry_t *) *item_p;
    if (entry) {
        zstr_free (&entry->key);
        zstr_free (&entry->agent);
        free (entry);
        *item_p = NULL;
    }
}

dsh_limit_t *
dsh_limit_new (zconfig_t *settings, char *error, size_t error_size)
{
    dsh_limit_t *self = (dsh_limit_t *) zmalloc (sizeof (dsh_limit_t));
    assert (self);
    self->rules = zlistx_new ();
    assert (self->rules);
    zlistx_set_destructor (self->rules, (zlistx_destructor_fn *) s_rule_destroy);
    self->entries = zhashx_new ();
    assert (self->entries);
    zhashx_set_destructor (self->entries, s_entry_free);
    self->idle = zlistx_new ();
    assert (self->idle);
    self->max_keys = DSH_LIMIT_MAX_KEYS_DEFAULT;
    self->next_rule_id = 1;
    int rc = 0;
    size_t position = 0;
    zconfig_t *item = settings? zconfig_child (settings): NULL;
    for (; item && rc == 0; item = zconfig_next (item)) {
        const char *key = zconfig_name (item);
        if (streq (key, "rule"))
            rc = s_rule_read (self, item, ++position, error, error_size);
        else
        if (streq (key, "max_keys")) {
            int max_keys = 0;
            rc = dsh_settings_int (key, zconfig_value (item), 1, 1000000, &max_keys, error, error_size);
            self->max_keys = (size_t) max_keys;
        }
        else
        if (!dsh_settings_chain_key (key)) {
            snprintf (error, error_size, "unknown setting \"%s\" (rule, max_keys)", key);
            rc = -1;
        }
    }
    if (rc)
        dsh_limit_destroy (&self);
    return self;
}

void
dsh_limit_destroy (dsh_limit_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_limit_t *self = *self_p;
        zlistx_destroy (&self->idle);
        zhashx_destroy (&self->entries);
        zlistx_destroy (&self->rules);
        free (self);
        *self_p = NULL;
    }
}

static void
s_entry_remove (dsh_limit_t *self, s_entry_t *entry)
{
    if (entry->handle)
        zlistx_delete (self->idle, entry->handle);
    zhashx_delete (self->entries, entry->key);
}

//  The entry of agent under rule, made (full) if there is none; one more
//  past max_keys evicts the least recently used idle entry.
static s_entry_t *
s_entry_get (dsh_limit_t *self, s_rule_t *rule, const char *agent, int64_t now_ms)
{
    char key [32 + DSH_ID_MAX + 1];
    snprintf (key, sizeof (key), "%" PRIu64 "/%s", rule->id, agent);
    s_entry_t *entry = (s_entry_t *) zhashx_lookup (self->entries, key);
    if (entry) {
        if (entry->handle)
            zlistx_move_end (self->idle, entry->handle);
        entry->admission = self->admission;
        return entry;
    }
    //  The entries this admission has used are the last in the order: once
    //  the first is one of them, there is nothing else left to evict
    while (zhashx_size (self->entries) >= self->max_keys && zlistx_size (self->idle)
    &&     ((s_entry_t *) zlistx_first (self->idle))->admission != self->admission)
        s_entry_remove (self, (s_entry_t *) zlistx_first (self->idle));
    entry = (s_entry_t *) zmalloc (sizeof (s_entry_t));
    assert (entry);
    entry->key = strdup (key);
    entry->agent = strdup (agent);
    entry->rule = rule;
    entry->admission = self->admission;
    if (rule->rate > 0)
        dsh_limit_bucket_init (&entry->bucket, rule->burst, now_ms);
    entry->handle = zlistx_add_end (self->idle, entry);
    zhashx_insert (self->entries, entry->key, entry);
    return entry;
}

static bool
s_matches (s_rule_t *rule, const char *agent, const char *tool)
{
    return fnmatch (rule->tool, tool, 0) == 0 && fnmatch (rule->agent, agent, 0) == 0;
}

int
dsh_limit_admit (dsh_limit_t *self, const char *agent, const char *tool, int64_t now_ms,
                 dsh_limit_ticket_t **ticket_p, char **refusal, int64_t *retry_after_ms)
{
    assert (self);
    assert (tool);
    assert (ticket_p && refusal && retry_after_ms);
    *ticket_p = NULL;
    *refusal = NULL;
    *retry_after_ms = -1;
    if (!agent)
        agent = "";
    //  Agent ids are at most DSH_ID_MAX bytes (the broker checks); a longer
    //  one is counted under its first bytes
    char agent_key [DSH_ID_MAX + 1];
    snprintf (agent_key, sizeof (agent_key), "%s", agent);
    s_entry_t *matched [S_TICKET_MAX];
    size_t count = 0;
    self->admission++;
    for (s_rule_t *rule = (s_rule_t *) zlistx_first (self->rules); rule;
         rule = (s_rule_t *) zlistx_next (self->rules)) {
        if (!s_matches (rule, agent_key, tool))
            continue;
        s_entry_t *entry = s_entry_get (self, rule, agent_key, now_ms);
        matched [count++] = entry;
        char *why = NULL;
        if (rule->rate > 0) {
            int64_t wait_ms = dsh_limit_bucket_refill (&entry->bucket, rule->rate, rule->burst, now_ms);
            if (wait_ms) {
                if (wait_ms > *retry_after_ms)
                    *retry_after_ms = wait_ms;
                if (!*refusal)
                    why = zsys_sprintf ("(%g/s, burst %g); retry after %" PRId64 " ms",
                                        rule->rate, rule->burst, wait_ms);
            }
        }
        if (rule->in_flight > 0 && entry->in_flight >= rule->in_flight) {
            if (!*refusal && !why)
                why = zsys_sprintf ("(%" PRId64 " calls in flight, at most %" PRId64 "); retry when one of them ends",
                                    entry->in_flight, rule->in_flight);
        }
        if (why) {
            *refusal = zsys_sprintf ("agent \"%s\" is over its limit for \"%s\" %s", agent_key, tool, why);
            zstr_free (&why);
        }
    }
    if (*refusal) {
        //  The refusal names the first rule that refused; the retry hint
        //  is the longest any bucket needs (none refused: no hint)
        return -1;
    }
    size_t held = 0;
    for (size_t index = 0; index < count; index++) {
        s_entry_t *entry = matched [index];
        if (entry->rule->rate > 0)
            entry->bucket.tokens -= 1.0;
        if (entry->rule->in_flight > 0)
            held++;
    }
    if (held) {
        dsh_limit_ticket_t *ticket = (dsh_limit_ticket_t *)
            zmalloc (sizeof (dsh_limit_ticket_t) + held * sizeof (s_entry_t *));
        assert (ticket);
        ticket->limit = self;
        for (size_t index = 0; index < count; index++) {
            s_entry_t *entry = matched [index];
            if (entry->rule->in_flight == 0)
                continue;
            //  Busy entries leave the eviction order: their count must
            //  come back down
            if (entry->in_flight++ == 0 && entry->handle) {
                zlistx_delete (self->idle, entry->handle);
                entry->handle = NULL;
            }
            ticket->entries [ticket->count++] = entry;
        }
        *ticket_p = ticket;
    }
    return 0;
}

void
dsh_limit_release (dsh_limit_ticket_t **ticket_p)
{
    assert (ticket_p);
    if (*ticket_p) {
        dsh_limit_ticket_t *ticket = *ticket_p;
        dsh_limit_t *self = ticket->limit;
        for (size_t index = 0; index < ticket->count; index++) {
            s_entry_t *entry = ticket->entries [index];
            assert (entry->in_flight > 0);
            if (--entry->in_flight == 0)
                entry->handle = zlistx_add_end (self->idle, entry);
        }
        free (ticket);
        *ticket_p = NULL;
    }
}

int
dsh_limit_set (dsh_limit_t *self, const char *agent, const char *tool, double rate, double burst,
               int64_t in_flight, char *error, size_t error_size)
{
    assert (self);
    if (!agent)
        agent = "*";
    if (!tool)
        tool = "*";
    if (s_rule_check (agent, tool, rate, &burst, in_flight, error, error_size))
        return -1;
    s_rule_t *rule = s_rule_find (self, agent, tool);
    if (!rule) {
        if (zlistx_size (self->rules) >= DSH_LIMIT_RULES_MAX) {
            snprintf (error, error_size, "the stage has %d rules already, its most", DSH_LIMIT_RULES_MAX);
            return -1;
        }
        rule = (s_rule_t *) zmalloc (sizeof (s_rule_t));
        assert (rule);
        rule->id = self->next_rule_id++;
        rule->agent = strdup (agent);
        rule->tool = strdup (tool);
        zlistx_add_end (self->rules, rule);
    }
    else
    if (rule->rate == 0 && rate > 0) {
        //  A bucket where there was none starts full
        for (s_entry_t *entry = zhashx_first (self->entries); entry; entry = zhashx_next (self->entries))
            if (entry->rule == rule)
                dsh_limit_bucket_init (&entry->bucket, burst, INT64_MIN);
    }
    rule->rate = rate;
    rule->burst = burst;
    rule->in_flight = in_flight;
    return 0;
}

size_t
dsh_limit_reset (dsh_limit_t *self, const char *agent)
{
    assert (self);
    zlistx_t *forget = zlistx_new ();
    assert (forget);
    for (s_entry_t *entry = zhashx_first (self->entries); entry; entry = zhashx_next (self->entries))
        if (!agent || streq (entry->agent, agent))
            zlistx_add_end (forget, entry);
    size_t forgotten = zlistx_size (forget);
    for (s_entry_t *entry = zlistx_first (forget); entry; entry = zlistx_next (forget)) {
        if (entry->in_flight == 0)
            s_entry_remove (self, entry);
        else
            //  Its calls still run, and their tickets point here
            entry->bucket.tokens = entry->rule->burst;
    }
    zlistx_destroy (&forget);
    return forgotten;
}

size_t
dsh_limit_rules (dsh_limit_t *self)
{
    assert (self);
    return zlistx_size (self->rules);
}

size_t
dsh_limit_keys (dsh_limit_t *self)
{
    assert (self);
    return zhashx_size (self->entries);
}

int64_t
dsh_limit_in_flight (dsh_limit_t *self, size_t index, const char *agent)
{
    assert (self);
    s_rule_t *rule = (s_rule_t *) zlistx_first (self->rules);
    while (rule && index--)
        rule = (s_rule_t *) zlistx_next (self->rules);
    if (!rule)
        return 0;
    char key [32 + DSH_ID_MAX + 1];
    snprintf (key, sizeof (key), "%" PRIu64 "/%s", rule->id, agent? agent: "");
    s_entry_t *entry = (s_entry_t *) zhashx_lookup (self->entries, key);
    return entry? entry->in_flight: 0;
}

static void
s_pack_rule (s_rule_t *rule, msgpack_packer *pk)
{
    msgpack_pack_map (pk, 2 + (rule->rate > 0) * 2 + (rule->in_flight > 0));
    dsh_pack_cstr (pk, "agent");
    dsh_pack_cstr (pk, rule->agent);
    dsh_pack_cstr (pk, "tool");
    dsh_pack_cstr (pk, rule->tool);
    if (rule->rate > 0) {
        dsh_pack_cstr (pk, "rate");
        msgpack_pack_double (pk, rule->rate);
        dsh_pack_cstr (pk, "burst");
        msgpack_pack_double (pk, rule->burst);
    }
    if (rule->in_flight > 0) {
        dsh_pack_cstr (pk, "inFlight");
        msgpack_pack_uint64 (pk, (uint64_t) rule->in_flight);
    }
}

void
dsh_limit_pack (dsh_limit_t *self, int64_t now_ms, msgpack_packer *pk)
{
    assert (self);
    assert (pk);
    msgpack_pack_map (pk, 4);
    dsh_pack_cstr (pk, "maxKeys");
    msgpack_pack_uint64 (pk, self->max_keys);
    dsh_pack_cstr (pk, "keys");
    msgpack_pack_uint64 (pk, zhashx_size (self->entries));
    dsh_pack_cstr (pk, "rules");
    msgpack_pack_array (pk, (uint32_t) zlistx_size (self->rules));
    for (s_rule_t *rule = (s_rule_t *) zlistx_first (self->rules); rule;
         rule = (s_rule_t *) zlistx_next (self->rules))
        s_pack_rule (rule, pk);
    dsh_pack_cstr (pk, "agents");
    msgpack_pack_array (pk, (uint32_t) zhashx_size (self->entries));
    for (s_entry_t *entry = zhashx_first (self->entries); entry; entry = zhashx_next (self->entries)) {
        size_t index = 0;
        for (s_rule_t *rule = (s_rule_t *) zlistx_first (self->rules); rule && rule != entry->rule;
             rule = (s_rule_t *) zlistx_next (self->rules))
            index++;
        bool bucket = entry->rule->rate > 0;
        msgpack_pack_map (pk, 3 + bucket);
        dsh_pack_cstr (pk, "agent");
        dsh_pack_cstr (pk, entry->agent);
        dsh_pack_cstr (pk, "rule");
        msgpack_pack_uint64 (pk, index);
        if (bucket) {
            dsh_limit_bucket_refill (&entry->bucket, entry->rule->rate, entry->rule->burst, now_ms);
            dsh_pack_cstr (pk, "tokens");
            //  Tokens are never below 0: one is taken only when there is one
            msgpack_pack_double (pk, (double) (int64_t) (entry->bucket.tokens * 1000.0) / 1000.0);
        }
        dsh_pack_cstr (pk, "inFlight");
        msgpack_pack_uint64 (pk, (uint64_t) entry->in_flight);
    }
}

//  --- The stage -----------------------------------------------------------

static void
s_ticket_release (void *ticket)
{
    dsh_limit_ticket_t *held = (dsh_limit_ticket_t *) ticket;
    dsh_limit_release (&held);
}

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    dsh_limit_t *self = (dsh_limit_t *) arg;
    if (zlistx_size (self->rules) == 0)
        return DSH_STAGE_PASS;
    dsh_limit_ticket_t *ticket = NULL;
    char *refusal = NULL;
    int64_t retry_after_ms = -1;
    if (dsh_limit_admit (self, dsh_call_agent (call), dsh_call_name (call), zclock_mono (),
                         &ticket, &refusal, &retry_after_ms) == 0) {
        if (ticket) {
            //  The record of a watched call lives until the call ends,
            //  however it ends, and its data goes with it: exactly once
            dsh_stage_call_set_data (call, ticket, s_ticket_release);
            dsh_stage_call_watch_result (call);
        }
        return DSH_STAGE_PASS;
    }
    dsh_result_t *result = dsh_result_new (dsh_call_id (call));
    dsh_result_error (result, DSH_E_RATE_LIMITED, "%s", refusal);
    if (retry_after_ms >= 0) {
        byte packed [9];
        msgpack_sbuffer sbuf;
        msgpack_sbuffer_init (&sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
        msgpack_pack_uint64 (&pk, (uint64_t) retry_after_ms);
        assert (sbuf.size <= sizeof (packed));
        memcpy (packed, sbuf.data, sbuf.size);
        dsh_result_error_field (result, "retryAfterMs", packed, sbuf.size);
        msgpack_sbuffer_destroy (&sbuf);
    }
    zframe_t *answer = dsh_result_encode (result);
    dsh_result_destroy (&result);
    dsh_stage_call_answer (call, &answer);
    zstr_free (&refusal);
    return DSH_STAGE_ANSWER;
}

#define S_SET_USAGE \
    "set needs {\"agent\"?: glob, \"tool\"?: glob, \"rate\"?: calls per second, \"burst\"?: number, " \
    "\"inFlight\"?: number}, with rate or inFlight"

//  A number in control args: absent is 0; true if it is one, >= 0.
static bool
s_arg_number (const msgpack_object *args, const char *key, double *target)
{
    const msgpack_object *value = dsh_map_get (args, key);
    *target = 0;
    if (!value || value->type == MSGPACK_OBJECT_NIL)
        return true;
    if (value->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *target = (double) value->via.u64;
    else
    if (value->type == MSGPACK_OBJECT_FLOAT32 || value->type == MSGPACK_OBJECT_FLOAT64)
        *target = value->via.f64;
    else
        return false;
    return isfinite (*target) && *target >= 0;
}

static int
s_control_set (dsh_limit_t *self, const msgpack_object *args, dsh_packer_t *reply, char **error)
{
    const msgpack_object *agent_value = dsh_map_get (args, "agent");
    const msgpack_object *tool_value = dsh_map_get (args, "tool");
    char *agent = dsh_stage_strdup (agent_value);
    char *tool = dsh_stage_strdup (tool_value);
    double rate, burst, in_flight;
    char reason [256];
    int rc = -1;
    if (!args || args->type != MSGPACK_OBJECT_MAP || (agent_value && !agent) || (tool_value && !tool)
    ||  !s_arg_number (args, "rate", &rate) || !s_arg_number (args, "burst", &burst)
    ||  !s_arg_number (args, "inFlight", &in_flight) || in_flight > S_NUMBER_MAX || !s_whole (in_flight))
        *error = strdup (S_SET_USAGE);
    else
    if (dsh_limit_set (self, agent, tool, rate, burst, (int64_t) in_flight, reason, sizeof (reason)))
        *error = strdup (reason);
    else {
        s_rule_t *rule = s_rule_find (self, agent? agent: "*", tool? tool: "*");
        s_pack_rule (rule, &reply->pk);
        rc = 0;
    }
    zstr_free (&agent);
    zstr_free (&tool);
    return rc;
}

static int
s_on_control (dsh_stage_t *stage, const char *command, const msgpack_object *args, dsh_packer_t *reply,
              char **error, void *arg)
{
    (void) stage;
    dsh_limit_t *self = (dsh_limit_t *) arg;
    if (streq (command, "limits")) {
        dsh_limit_pack (self, zclock_mono (), &reply->pk);
        return 0;
    }
    if (streq (command, "set"))
        return s_control_set (self, args, reply, error);
    if (streq (command, "reset")) {
        const msgpack_object *agent_value = dsh_map_get (args, "agent");
        char *agent = dsh_stage_strdup (agent_value);
        if (agent_value && agent_value->type != MSGPACK_OBJECT_NIL && !agent) {
            *error = strdup ("reset takes {\"agent\"?: \"<agent id>\"}");
            return -1;
        }
        size_t forgotten = dsh_limit_reset (self, agent);
        zstr_free (&agent);
        msgpack_pack_map (&reply->pk, 1);
        dsh_pack_cstr (&reply->pk, "forgot");
        msgpack_pack_uint64 (&reply->pk, forgotten);
        return 0;
    }
    return -1;
}

static void
s_on_destroy (void *arg)
{
    dsh_limit_t *self = (dsh_limit_t *) arg;
    dsh_limit_destroy (&self);
}

int
dsh_limit_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                 dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    assert (callbacks);
    assert (arg);
    (void) context;
    dsh_limit_t *self = dsh_limit_new (settings, error, error_size);
    if (!self)
        return -1;
    *callbacks = (dsh_stage_callbacks_t) {
        .on_request = s_on_request,
        .on_control = s_on_control,
        .on_destroy = s_on_destroy
    };
    *arg = self;
    return 0;
}
