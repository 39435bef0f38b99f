/*  =========================================================================
    dsh_stats - call statistics

    Tool rows sit in a zhashx on name and in a zlistx in the order they
    were last called (the least recent first), which is the order gone
    tools are evicted in; agent rows in a zhashx on id. Outcomes, refusals
    and the histogram are fixed arrays indexed by small integers, so a call
    costs a hash lookup per row at its start and a few additions at its end.
    =========================================================================
*/

#include "dsh_stats.h"

//  "ok" and the definition's error codes, the outcomes a call may have; the
//  index is the outcome (0: not known yet). BROKER_GONE is the client
//  SDK's, never an answer, so never counted.
#define S_OUTCOME(CODE, code, name) CODE,
static const char *s_outcomes [] = {
    NULL, "ok",
    DSH_ERROR_CODES (S_OUTCOME)
};
#undef S_OUTCOME
#define S_OUTCOMES (sizeof (s_outcomes) / sizeof (s_outcomes [0]))
#define S_OK 1

static const uint64_t s_buckets_us [DSH_STATS_BUCKETS] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 30000000, 60000000
};

struct _dsh_stats_tool_t {
    char name [DSH_NAME_MAX + 1];
    uint64_t in_flight;
    uint64_t outcomes [S_OUTCOMES];
    uint64_t histogram [DSH_STATS_BUCKETS + 1];
    uint64_t sum_us;
    void *handle;               //  in recency; NULL for the overflow row
};

struct _dsh_stats_agent_t {
    char name [DSH_ID_MAX + 1];
    uint64_t calls;
    uint64_t errors;
    uint64_t in_flight;         //  its calls decided for a tool and not answered yet
    uint64_t outcomes [S_OUTCOMES];
};

struct _dsh_stats_t {
    dsh_stats_replicas_fn *replicas;
    void *replicas_arg;
    zhashx_t *tools;            //  name -> dsh_stats_tool_t *, owns them
    zlistx_t *recency;          //  the same rows, least recently called first
    dsh_stats_tool_t *other_tools;  //  "*": calls past the bound, or NULL
    zhashx_t *agents;           //  id -> dsh_stats_agent_t *, owns them
    zhashx_t *served;           //  component id -> uint64_t *, owns them
    zhashx_t *events;           //  kind -> uint64_t *, owns them
    uint64_t refused [S_OUTCOMES];
    uint64_t calls;
};

static void
s_free (void **item_p)
{
    free (*item_p);
    *item_p = NULL;
}

static zhashx_t *
s_owning_hash (void)
{
    zhashx_t *hash = zhashx_new ();
    zhashx_set_destructor (hash, s_free);
    return hash;
}

dsh_stats_t *
dsh_stats_new (dsh_stats_replicas_fn *replicas, void *arg)
{
    assert (replicas);
    dsh_stats_t *self = (dsh_stats_t *) zmalloc (sizeof (dsh_stats_t));
    assert (self);
    self->replicas = replicas;
    self->replicas_arg = arg;
    self->tools = s_owning_hash ();
    self->recency = zlistx_new ();
    self->agents = s_owning_hash ();
    self->served = s_owning_hash ();
    self->events = s_owning_hash ();
    return self;
}

void
dsh_stats_destroy (dsh_stats_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_stats_t *self = *self_p;
        zlistx_destroy (&self->recency);
        zhashx_destroy (&self->tools);
        free (self->other_tools);
        zhashx_destroy (&self->agents);
        zhashx_destroy (&self->served);
        zhashx_destroy (&self->events);
        free (self);
        *self_p = NULL;
    }
}

const uint64_t *
dsh_stats_buckets_us (void)
{
    return s_buckets_us;
}

int
dsh_stats_outcome (const char *code)
{
    if (!code)
        return S_OK;
    for (size_t index = S_OK + 1; index < S_OUTCOMES; index++)
        if (streq (code, s_outcomes [index]))
            return (int) index;
    return dsh_stats_outcome (DSH_E_TOOL_FAILED);
}

int
dsh_stats_outcome_of (const msgpack_object *result)
{
    const msgpack_object *is_error = dsh_map_get (result, "isError");
    if (!is_error || is_error->type != MSGPACK_OBJECT_BOOLEAN || !is_error->via.boolean)
        return S_OK;
    const msgpack_object *code = dsh_map_get (dsh_map_get (result, "error"), "code");
    for (size_t index = S_OK + 1; index < S_OUTCOMES; index++)
        if (dsh_str_eq (code, s_outcomes [index]))
            return (int) index;
    return dsh_stats_outcome (DSH_E_TOOL_FAILED);
}

int
dsh_stats_outcome_decode (const void *data, size_t size)
{
    char error [64];
    dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof (error));
    int outcome = doc? dsh_stats_outcome_of (dsh_doc_root (doc)): dsh_stats_outcome (DSH_E_TOOL_FAILED);
    dsh_doc_destroy (&doc);
    return outcome;
}

const char *
dsh_stats_outcome_name (int outcome)
{
    assert (outcome > 0 && (size_t) outcome < S_OUTCOMES);
    return s_outcomes [outcome];
}

static dsh_stats_tool_t *
s_tool_new (const char *name)
{
    dsh_stats_tool_t *row = (dsh_stats_tool_t *) zmalloc (sizeof (dsh_stats_tool_t));
    assert (row);
    snprintf (row->name, sizeof (row->name), "%s", name);
    return row;
}

//  Makes room for one more tool row: evicts the least recently called row
//  of a tool no one provides and no call is waiting on. Returns 0, or -1
//  if every row is of a live tool or busy.
static int
s_evict_tool (dsh_stats_t *self)
{
    for (dsh_stats_tool_t *row = (dsh_stats_tool_t *) zlistx_first (self->recency); row;
         row = (dsh_stats_tool_t *) zlistx_next (self->recency))
        if (row->in_flight == 0 && self->replicas (self->replicas_arg, row->name) == 0) {
            zlistx_delete (self->recency, row->handle);
            zhashx_delete (self->tools, row->name);
            return 0;
        }
    return -1;
}

static dsh_stats_tool_t *
s_tool_row (dsh_stats_t *self, const char *name)
{
    dsh_stats_tool_t *row = (dsh_stats_tool_t *) zhashx_lookup (self->tools, name);
    if (row) {
        zlistx_move_end (self->recency, row->handle);
        return row;
    }
    //  The overflow row is one of the bound's
    if (zhashx_size (self->tools) >= DSH_STATS_TOOLS_MAX - 1 && s_evict_tool (self)) {
        if (!self->other_tools)
            self->other_tools = s_tool_new ("*");
        return self->other_tools;
    }
    row = s_tool_new (name);
    zhashx_insert (self->tools, row->name, row);
    row->handle = zlistx_add_end (self->recency, row);
    return row;
}

static dsh_stats_agent_t *
s_agent_row (dsh_stats_t *self, const char *name)
{
    dsh_stats_agent_t *row = (dsh_stats_agent_t *) zhashx_lookup (self->agents, name);
    if (row)
        return row;
    //  The overflow row "*" is the last of the bound's (an agent that calls
    //  itself "*" shares it)
    if (zhashx_size (self->agents) >= DSH_STATS_AGENTS_MAX - 1) {
        name = "*";
        row = (dsh_stats_agent_t *) zhashx_lookup (self->agents, name);
        if (row)
            return row;
    }
    row = (dsh_stats_agent_t *) zmalloc (sizeof (dsh_stats_agent_t));
    assert (row);
    snprintf (row->name, sizeof (row->name), "%s", name);
    zhashx_insert (self->agents, row->name, row);
    return row;
}

void
dsh_stats_open (dsh_stats_t *self, const char *tool, const char *agent,
                dsh_stats_tool_t **tool_p, dsh_stats_agent_t **agent_p)
{
    assert (tool_p && agent_p);
    if (!self) {
        *tool_p = NULL;
        *agent_p = NULL;
        return;
    }
    assert (tool);
    *tool_p = s_tool_row (self, tool);
    (*tool_p)->in_flight++;
    *agent_p = s_agent_row (self, agent? agent: "");
    (*agent_p)->in_flight++;
}

void
dsh_stats_answer (dsh_stats_t *self, dsh_stats_tool_t *tool, dsh_stats_agent_t *agent,
                  int outcome, uint64_t latency_us)
{
    if (!self || !tool)
        return;
    assert (outcome > 0 && (size_t) outcome < S_OUTCOMES);
    self->calls++;
    tool->in_flight--;
    tool->outcomes [outcome]++;
    size_t bucket = 0;
    while (bucket < DSH_STATS_BUCKETS && latency_us > s_buckets_us [bucket])
        bucket++;
    tool->histogram [bucket]++;
    tool->sum_us += latency_us;
    if (agent) {
        if (agent->in_flight)
            agent->in_flight--;
        agent->calls++;
        agent->outcomes [outcome]++;
        if (outcome != S_OK)
            agent->errors++;
    }
}

void
dsh_stats_refused (dsh_stats_t *self, const char *code)
{
    if (self)
        self->refused [dsh_stats_outcome (code)]++;
}

//  One more under key in a hash of counters. The keys that come here are
//  bounded by whoever calls: event kinds, the catalog's components.
static void
s_count (zhashx_t *counters, const char *key)
{
    uint64_t *count = (uint64_t *) zhashx_lookup (counters, key);
    if (!count) {
        count = (uint64_t *) zmalloc (sizeof (uint64_t));
        assert (count);
        zhashx_insert (counters, key, count);
    }
    (*count)++;
}

void
dsh_stats_event (dsh_stats_t *self, const char *kind)
{
    if (self)
        s_count (self->events, kind);
}

void
dsh_stats_served (dsh_stats_t *self, const char *component)
{
    if (self)
        s_count (self->served, component);
}

void
dsh_stats_component_gone (dsh_stats_t *self, const char *component)
{
    if (self)
        zhashx_delete (self->served, component);
}

uint64_t
dsh_stats_served_count (dsh_stats_t *self, const char *component)
{
    uint64_t *count = self? (uint64_t *) zhashx_lookup (self->served, component): NULL;
    return count? *count: 0;
}

//  ---------------------------------------------------------------------
//  STATS

static void
s_pack_counters (dsh_packer_t *packer, zhashx_t *counters)
{
    dsh_packer_map_begin (packer);
    if (counters)
        for (uint64_t *count = (uint64_t *) zhashx_first (counters); count;
             count = (uint64_t *) zhashx_next (counters)) {
            dsh_pack_cstr (&packer->pk, (const char *) zhashx_cursor (counters));
            msgpack_pack_uint64 (&packer->pk, *count);
        }
    dsh_packer_map_end (packer);
}

static void
s_pack_tool (dsh_packer_t *packer, const char *name, size_t replicas, dsh_stats_tool_t *row)
{
    static const dsh_stats_tool_t empty;
    if (!row)
        row = (dsh_stats_tool_t *) &empty;
    msgpack_packer *pk = &packer->pk;
    dsh_packer_map_begin (packer);
    dsh_packer_kv_str (packer, "name", name);
    dsh_pack_cstr (pk, "replicas");
    msgpack_pack_uint64 (pk, replicas);
    dsh_pack_cstr (pk, "inFlight");
    msgpack_pack_uint64 (pk, row->in_flight);
    dsh_pack_cstr (pk, "outcomes");
    dsh_packer_map_begin (packer);
    for (size_t index = S_OK; index < S_OUTCOMES; index++)
        if (index == S_OK || row->outcomes [index]) {
            dsh_pack_cstr (pk, s_outcomes [index]);
            msgpack_pack_uint64 (pk, row->outcomes [index]);
        }
    dsh_packer_map_end (packer);
    dsh_pack_cstr (pk, "histogram");
    msgpack_pack_array (pk, DSH_STATS_BUCKETS + 1);
    for (size_t index = 0; index <= DSH_STATS_BUCKETS; index++)
        msgpack_pack_uint64 (pk, row->histogram [index]);
    dsh_pack_cstr (pk, "sumUs");
    msgpack_pack_uint64 (pk, row->sum_us);
    dsh_packer_map_end (packer);
}

static void
s_pack_tools (dsh_stats_t *self, dsh_packer_t *packer, zlistx_t *tools)
{
    msgpack_packer *pk = &packer->pk;
    dsh_pack_cstr (pk, "tools");
    if (!self) {
        msgpack_pack_array (pk, 0);
        return;
    }
    //  Tools that exist, then the rows of gone ones, the latest called first
    zlistx_t *gone = zlistx_new ();
    for (dsh_stats_tool_t *row = (dsh_stats_tool_t *) zlistx_last (self->recency); row;
         row = (dsh_stats_tool_t *) zlistx_prev (self->recency))
        if (self->replicas (self->replicas_arg, row->name) == 0)
            zlistx_add_end (gone, row);
    if (self->other_tools)
        zlistx_add_end (gone, self->other_tools);
    msgpack_pack_array (pk, (uint32_t) (zlistx_size (tools) + zlistx_size (gone)));
    for (const char *name = (const char *) zlistx_first (tools); name; name = (const char *) zlistx_next (tools))
        s_pack_tool (packer, name, self->replicas (self->replicas_arg, name),
                     (dsh_stats_tool_t *) zhashx_lookup (self->tools, name));
    for (dsh_stats_tool_t *row = (dsh_stats_tool_t *) zlistx_first (gone); row;
         row = (dsh_stats_tool_t *) zlistx_next (gone))
        s_pack_tool (packer, row->name, 0, row);
    zlistx_destroy (&gone);
}

static int
s_agent_compare (const void *a, const void *b)
{
    const dsh_stats_agent_t *left = (const dsh_stats_agent_t *) a;
    const dsh_stats_agent_t *right = (const dsh_stats_agent_t *) b;
    if (left->calls != right->calls)
        return left->calls > right->calls? -1: 1;
    return strcmp (left->name, right->name);
}

static void
s_pack_agents (dsh_stats_t *self, dsh_packer_t *packer)
{
    msgpack_packer *pk = &packer->pk;
    dsh_pack_cstr (pk, "agents");
    zlistx_t *agents = zlistx_new ();
    zlistx_set_comparator (agents, s_agent_compare);
    if (self)
        for (void *row = zhashx_first (self->agents); row; row = zhashx_next (self->agents))
            zlistx_add_end (agents, row);
    zlistx_sort (agents);
    msgpack_pack_array (pk, (uint32_t) zlistx_size (agents));
    for (dsh_stats_agent_t *row = (dsh_stats_agent_t *) zlistx_first (agents); row;
         row = (dsh_stats_agent_t *) zlistx_next (agents)) {
        dsh_packer_map_begin (packer);
        dsh_packer_kv_str (packer, "agent", row->name);
        dsh_pack_cstr (pk, "calls");
        msgpack_pack_uint64 (pk, row->calls);
        dsh_pack_cstr (pk, "errors");
        msgpack_pack_uint64 (pk, row->errors);
        dsh_pack_cstr (pk, "inFlight");
        msgpack_pack_uint64 (pk, row->in_flight);
        //  Only codes that happened: an agent's row is small
        dsh_pack_cstr (pk, "outcomes");
        dsh_packer_map_begin (packer);
        for (size_t index = S_OK; index < S_OUTCOMES; index++)
            if (row->outcomes [index]) {
                dsh_pack_cstr (pk, s_outcomes [index]);
                msgpack_pack_uint64 (pk, row->outcomes [index]);
            }
        dsh_packer_map_end (packer);
        dsh_packer_map_end (packer);
    }
    zlistx_destroy (&agents);
}

void
dsh_stats_pack (dsh_stats_t *self, dsh_packer_t *packer, zlistx_t *tools)
{
    assert (packer && tools);
    msgpack_packer *pk = &packer->pk;
    dsh_pack_cstr (pk, "enabled");
    if (self)
        msgpack_pack_true (pk);
    else
        msgpack_pack_false (pk);
    dsh_pack_cstr (pk, "bucketsUs");
    msgpack_pack_array (pk, DSH_STATS_BUCKETS);
    for (size_t index = 0; index < DSH_STATS_BUCKETS; index++)
        msgpack_pack_uint64 (pk, s_buckets_us [index]);
    dsh_pack_cstr (pk, "calls");
    msgpack_pack_uint64 (pk, self? self->calls: 0);
    dsh_pack_cstr (pk, "refused");
    dsh_packer_map_begin (packer);
    for (size_t index = S_OK + 1; self && index < S_OUTCOMES; index++)
        if (self->refused [index]) {
            dsh_pack_cstr (pk, s_outcomes [index]);
            msgpack_pack_uint64 (pk, self->refused [index]);
        }
    dsh_packer_map_end (packer);
    dsh_pack_cstr (pk, "events");
    s_pack_counters (packer, self? self->events: NULL);
    s_pack_tools (self, packer, tools);
    s_pack_agents (self, packer);
}
