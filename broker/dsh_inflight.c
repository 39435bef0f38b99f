/*  =========================================================================
    dsh_inflight - every call in the broker, one record each

    Two zhashx indexes over the same records, neither with string keys:
    tokens (the key is the record's own token field, hashed as an integer)
    and callers (the key is the record itself, hashed over its route bytes
    and callId). Neither index copies or frees its keys; the records are
    freed only here, after both indexes let go of them.

    A record is allocated as an s_record_t: the public dsh_record_t first,
    then what is the table's alone (where in the chain the call is, its
    place in the heap) and the modules' slots. So a record is still one
    allocation, and a module's private state costs a pointer.

    The heap is a binary min-heap of (due, record) pairs in one array, each
    record knowing its index in it: a move re-keys its record in place, an
    answer takes it out from the middle, both O(log n); what is due is the
    part of the heap at or above now, found without touching the rest.

    Tokens come from getrandom(2), a block at a time, so a component or a
    stage cannot guess another call's token, and a restarted broker does
    not take a late RESULT meant for its predecessor as its own.
    =========================================================================
*/

#include "dsh_inflight.h"
#include "dsh_calltrace.h"
#include "dsh_sock.h"

#include <sys/random.h>

#define S_TOKEN_BLOCK 64
#define S_HEAP_MIN 64           //  entries the heap starts with, and never shrinks below

typedef struct {
    dsh_record_t public;        //  first: a record is its public part
    dsh_inflight_t *table;      //  the table it is in, for the moves
    dsh_where_t where;          //  changed by s_move alone
    size_t stage;               //  DSH_AT_CHAIN: the stage holding it
    bool down;                  //  DSH_AT_CHAIN: on its way down
    size_t heap_index;          //  its place in table->heap
    void *slots [DSH_INFLIGHT_SLOTS];
} s_record_t;

typedef struct {
    int64_t due_ms;             //  its record's: its stage's limit, else its deadline
    s_record_t *record;
} s_heap_entry_t;

struct _dsh_inflight_t {
    dsh_inflight_reply_fn *reply;
    void *reply_arg;
    zhashx_t *tokens;           //  &record->token -> record, owns nothing
    zhashx_t *callers;          //  record -> record (hashed by route and callId)
    s_heap_entry_t *heap;       //  every record, soonest due first
    size_t heap_size;
    size_t heap_limit;
    dsh_inflight_slot_free_fn *slot_free [DSH_INFLIGHT_SLOTS];
    uint64_t random [S_TOKEN_BLOCK];
    size_t random_left;
    uint64_t fallback;          //  if getrandom fails: never a repeat, at least
    dsh_stats_t *stats;         //  counts every answer, or NULL
    dsh_audit_t *audit;         //  records every answer, or NULL
};

//  ---------------------------------------------------------------------
//  Index hashing

//  FNV-1a over bytes, continued from hash.
static size_t
s_fnv (size_t hash, const void *data, size_t size)
{
    const byte *bytes = (const byte *) data;
    for (size_t index = 0; index < size; index++) {
        hash ^= bytes [index];
        hash *= (size_t) 1099511628211ULL;
    }
    return hash;
}

static size_t
s_caller_hash (const void *key)
{
    dsh_record_t *record = (dsh_record_t *) key;
    size_t hash = (size_t) 14695981039346656037ULL;
    for (size_t index = 0; index < record->route_size; index++) {
        hash = s_fnv (hash, zmq_msg_data (&record->route [index]), zmq_msg_size (&record->route [index]));
        hash = s_fnv (hash, "/", 1);
    }
    return s_fnv (hash, record->call_id, strlen (record->call_id));
}

static int
s_caller_compare (const void *a, const void *b)
{
    dsh_record_t *left = (dsh_record_t *) a;
    dsh_record_t *right = (dsh_record_t *) b;
    if (left->route_size != right->route_size)
        return left->route_size < right->route_size? -1: 1;
    for (size_t index = 0; index < left->route_size; index++) {
        size_t left_size = zmq_msg_size (&left->route [index]);
        size_t right_size = zmq_msg_size (&right->route [index]);
        if (left_size != right_size)
            return left_size < right_size? -1: 1;
        int rc = memcmp (zmq_msg_data (&left->route [index]), zmq_msg_data (&right->route [index]), left_size);
        if (rc)
            return rc;
    }
    return strcmp (left->call_id, right->call_id);
}

//  ---------------------------------------------------------------------
//  The heap of due times

static s_record_t *
s_record (dsh_record_t *record)
{
    //  The public part is the first member: the same address
    return (s_record_t *) record;
}

static void
s_heap_place (dsh_inflight_t *self, size_t index, s_heap_entry_t entry)
{
    self->heap [index] = entry;
    entry.record->heap_index = index;
}

static void
s_heap_up (dsh_inflight_t *self, size_t index)
{
    s_heap_entry_t entry = self->heap [index];
    while (index > 0) {
        size_t parent = (index - 1) / 2;
        if (self->heap [parent].due_ms <= entry.due_ms)
            break;
        s_heap_place (self, index, self->heap [parent]);
        index = parent;
    }
    s_heap_place (self, index, entry);
}

static void
s_heap_down (dsh_inflight_t *self, size_t index)
{
    s_heap_entry_t entry = self->heap [index];
    while (true) {
        size_t child = 2 * index + 1;
        if (child >= self->heap_size)
            break;
        if (child + 1 < self->heap_size && self->heap [child + 1].due_ms < self->heap [child].due_ms)
            child++;
        if (self->heap [child].due_ms >= entry.due_ms)
            break;
        s_heap_place (self, index, self->heap [child]);
        index = child;
    }
    s_heap_place (self, index, entry);
}

static void
s_heap_resize (dsh_inflight_t *self, size_t limit)
{
    self->heap = (s_heap_entry_t *) realloc (self->heap, limit * sizeof (s_heap_entry_t));
    assert (self->heap);
    self->heap_limit = limit;
}

static void
s_heap_insert (dsh_inflight_t *self, s_record_t *record, int64_t due_ms)
{
    if (self->heap_size == self->heap_limit)
        s_heap_resize (self, self->heap_limit * 2);
    self->heap [self->heap_size] = (s_heap_entry_t) { due_ms, record };
    record->heap_index = self->heap_size++;
    s_heap_up (self, record->heap_index);
}

//  The record's due time is now due_ms: it moves up or down from where it is.
static void
s_heap_rekey (dsh_inflight_t *self, s_record_t *record, int64_t due_ms)
{
    size_t index = record->heap_index;
    assert (index < self->heap_size && self->heap [index].record == record);
    int64_t before = self->heap [index].due_ms;
    self->heap [index].due_ms = due_ms;
    if (due_ms < before)
        s_heap_up (self, index);
    else
    if (due_ms > before)
        s_heap_down (self, index);
}

static void
s_heap_remove (dsh_inflight_t *self, s_record_t *record)
{
    size_t index = record->heap_index;
    assert (index < self->heap_size && self->heap [index].record == record);
    s_heap_entry_t last = self->heap [--self->heap_size];
    if (index < self->heap_size) {
        //  The last entry fills the hole, and finds its place from there
        s_heap_place (self, index, last);
        if (index > 0 && last.due_ms < self->heap [(index - 1) / 2].due_ms)
            s_heap_up (self, index);
        else
            s_heap_down (self, index);
    }
    //  A burst that has gone gives its memory back, by halves
    if (self->heap_limit > S_HEAP_MIN && self->heap_size < self->heap_limit / 4)
        s_heap_resize (self, self->heap_limit / 2);
}

//  What is due, gathered: entries copied out of the heap.
typedef struct {
    s_heap_entry_t *entries;
    size_t size;
    size_t limit;
} s_gathered_t;

//  Gathers the entries due at or before now_ms under index: a subtree
//  whose root is not due holds nothing due, so only what is due is
//  visited (and the recursion is as deep as the heap, log2 of its size).
static void
s_heap_gather (dsh_inflight_t *self, size_t index, int64_t now_ms, s_gathered_t *due)
{
    if (index >= self->heap_size || self->heap [index].due_ms > now_ms)
        return;
    if (due->size == due->limit) {
        due->limit = due->limit? due->limit * 2: 16;
        due->entries = (s_heap_entry_t *) realloc (due->entries, due->limit * sizeof (s_heap_entry_t));
        assert (due->entries);
    }
    due->entries [due->size++] = self->heap [index];
    s_heap_gather (self, 2 * index + 1, now_ms, due);
    s_heap_gather (self, 2 * index + 2, now_ms, due);
}

//  Soonest due first.
static int
s_compare_due (const void *a, const void *b)
{
    int64_t left = ((const s_heap_entry_t *) a)->due_ms;
    int64_t right = ((const s_heap_entry_t *) b)->due_ms;
    return left < right? -1: left > right;
}

//  ---------------------------------------------------------------------
//  Records

static void
s_record_destroy (dsh_inflight_t *self, dsh_record_t **record_p)
{
    if (*record_p) {
        s_record_t *record = s_record (*record_p);
        for (size_t slot = 0; slot < DSH_INFLIGHT_SLOTS; slot++)
            if (record->slots [slot] && self->slot_free [slot])
                self->slot_free [slot] (&record->slots [slot]);
        dsh_record_t *public = &record->public;
        //  After the stages' spans, which the slots end: the call's ends last
        dsh_calltrace_close (public);
        for (size_t index = 0; index < public->route_size; index++)
            zmq_msg_close (&public->route [index]);
        zframe_destroy (&public->audit_sent);
        dsh_audit_trail_destroy (&public->trail);
        if (public->has_retry_body)
            zmq_msg_close (&public->retry_body);
        free (record);
        *record_p = NULL;
    }
}

static uint64_t
s_next_token (dsh_inflight_t *self)
{
    if (self->random_left == 0) {
        if (getrandom (self->random, sizeof (self->random), 0) == (ssize_t) sizeof (self->random))
            self->random_left = S_TOKEN_BLOCK;
        else {
            //  No entropy to be had (an old kernel, a seccomp filter): still
            //  unique, though guessable
            zsys_warning ("dsh-broker: getrandom failed (%s); call tokens are sequential", strerror (errno));
            return ++self->fallback;
        }
    }
    return self->random [--self->random_left];
}

dsh_inflight_t *
dsh_inflight_new (dsh_inflight_reply_fn *reply, void *arg)
{
    assert (reply);
    dsh_inflight_t *self = (dsh_inflight_t *) zmalloc (sizeof (dsh_inflight_t));
    assert (self);
    self->reply = reply;
    self->reply_arg = arg;
    self->tokens = zhashx_new ();
    dsh_proto_token_keys (self->tokens);
    self->callers = zhashx_new ();
    zhashx_set_key_hasher (self->callers, s_caller_hash);
    zhashx_set_key_comparator (self->callers, s_caller_compare);
    zhashx_set_key_duplicator (self->callers, NULL);
    zhashx_set_key_destructor (self->callers, NULL);
    s_heap_resize (self, S_HEAP_MIN);
    self->fallback = (uint64_t) zclock_time () << 20;
    return self;
}

void
dsh_inflight_destroy (dsh_inflight_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_inflight_t *self = *self_p;
        zhashx_destroy (&self->callers);
        for (dsh_record_t *record = (dsh_record_t *) zhashx_first (self->tokens); record;
             record = (dsh_record_t *) zhashx_next (self->tokens))
            s_record_destroy (self, &record);
        zhashx_destroy (&self->tokens);
        free (self->heap);
        free (self);
        *self_p = NULL;
    }
}

//  Copies at most size - 1 bytes and a NUL.
static void
s_copy (char *target, size_t size, const char *source)
{
    size_t length = strnlen (source, size - 1);
    memcpy (target, source, length);
    target [length] = 0;
}

void
dsh_inflight_set_stats (dsh_inflight_t *self, dsh_stats_t *stats)
{
    assert (self);
    self->stats = stats;
}

void
dsh_inflight_set_audit (dsh_inflight_t *self, dsh_audit_t *audit)
{
    assert (self);
    self->audit = audit;
}

dsh_record_t *
dsh_inflight_open (dsh_inflight_t *self, zmq_msg_t *route, size_t route_size,
                   const char *call_id, const char *tool, int64_t deadline_ms)
{
    assert (self);
    assert (route_size <= DSH_ROUTE_MAX);
    assert (call_id && tool);
    s_record_t *own = (s_record_t *) zmalloc (sizeof (s_record_t));
    assert (own);
    own->table = self;
    dsh_record_t *record = &own->public;
    for (size_t index = 0; index < route_size; index++) {
        zmq_msg_init (&record->route [index]);
        zmq_msg_move (&record->route [index], &route [index]);
    }
    record->route_size = route_size;
    s_copy (record->call_id, sizeof (record->call_id), call_id);
    s_copy (record->tool, sizeof (record->tool), tool);
    record->deadline_ms = deadline_ms;
    own->where = DSH_AT_BROKER;
    s_heap_insert (self, own, deadline_ms);
    if (self->stats)
        record->arrival_us = zclock_usecs ();
    do
        record->token = s_next_token (self);
    while (record->token == 0 || zhashx_lookup (self->tokens, &record->token));
    zhashx_insert (self->tokens, &record->token, record);
    //  A second call under a callId still in flight: CANCEL finds the newest
    dsh_record_t *older = (dsh_record_t *) zhashx_lookup (self->callers, record);
    if (older) {
        zhashx_delete (self->callers, older);
        older->indexed = false;
    }
    zhashx_insert (self->callers, record, record);
    record->indexed = true;
    return record;
}

const void *
dsh_inflight_caller (dsh_record_t *record, size_t *size)
{
    assert (record && size);
    //  Under CURVE the caller is its key, however many connections it opens
    if (*record->caller) {
        *size = strlen (record->caller);
        return record->caller;
    }
    //  FRONT is a ROUTER: the route's first frame is the routing id of the
    //  connection the call came in on (libzmq's, or one the client set,
    //  unique among live connections); a proxy's callers are all one
    //  caller here
    if (record->route_size == 0) {
        *size = 0;
        return "";
    }
    *size = zmq_msg_size (&record->route [0]);
    return zmq_msg_data (&record->route [0]);
}

dsh_record_t *
dsh_inflight_lookup (dsh_inflight_t *self, uint64_t token)
{
    assert (self);
    return (dsh_record_t *) zhashx_lookup (self->tokens, &token);
}

dsh_record_t *
dsh_inflight_find_caller (dsh_inflight_t *self, zmq_msg_t *route, size_t route_size, const char *call_id)
{
    assert (self);
    if (route_size > DSH_ROUTE_MAX)
        return NULL;
    //  A probe with the same route and callId; the route frames are moved
    //  in and back, never copied
    dsh_record_t *probe = (dsh_record_t *) zmalloc (sizeof (dsh_record_t));
    assert (probe);
    for (size_t index = 0; index < route_size; index++) {
        zmq_msg_init (&probe->route [index]);
        zmq_msg_move (&probe->route [index], &route [index]);
    }
    probe->route_size = route_size;
    s_copy (probe->call_id, sizeof (probe->call_id), call_id);
    dsh_record_t *record = (dsh_record_t *) zhashx_lookup (self->callers, probe);
    for (size_t index = 0; index < route_size; index++)
        zmq_msg_move (&route [index], &probe->route [index]);
    free (probe);
    return record;
}

static void
s_unlink (dsh_inflight_t *self, dsh_record_t *record)
{
    s_heap_remove (self, s_record (record));
    zhashx_delete (self->tokens, &record->token);
    if (record->indexed)
        zhashx_delete (self->callers, record);
}

void
dsh_inflight_answer (dsh_inflight_t *self, dsh_record_t **record_p, zmq_msg_t *body)
{
    assert (self);
    assert (record_p && *record_p);
    dsh_record_t *record = *record_p;
    s_unlink (self, record);
    //  With tracing on, the answer carries the call's context back
    dsh_calltrace_answer (record, body);
    if (self->stats) {
        //  Read from the body only when no one said: a stage passed it
        int outcome = record->outcome? record->outcome
                                     : dsh_stats_outcome_decode (zmq_msg_data (body), zmq_msg_size (body));
        dsh_stats_answer (self->stats, record->stats_tool, record->stats_agent, outcome,
                          (uint64_t) (zclock_usecs () - record->arrival_us));
    }
    //  The one record of the call, with the answer that goes out
    if (record->trail)
        dsh_audit_submit (self->audit, &record->trail, body);
    self->reply (self->reply_arg, record->route, record->route_size, body);
    s_record_destroy (self, record_p);
}

void
dsh_inflight_answer_frame (dsh_inflight_t *self, dsh_record_t **record_p, zframe_t **body_p)
{
    assert (body_p && *body_p);
    zmq_msg_t body;
    dsh_sock_part_frame (&body, body_p);
    dsh_inflight_answer (self, record_p, &body);
}

void
dsh_inflight_answer_error (dsh_inflight_t *self, dsh_record_t **record_p, const char *code, const char *text)
{
    assert (record_p && *record_p);
    zframe_t *body = dsh_proto_error_result ((*record_p)->call_id, code, text);
    if (self->stats)
        (*record_p)->outcome = dsh_stats_outcome (code);
    dsh_inflight_answer_frame (self, record_p, &body);
}

//  ---------------------------------------------------------------------
//  Where a call is, and the moves

//  The legal moves, from the row's place to the column's. A move within
//  the chain is checked further for its direction (dsh_inflight_to_chain).
static const bool s_legal [DSH_WHERE_COUNT][DSH_WHERE_COUNT] = {
    //                      to: BROKER  CHAIN  COMPONENT  QUEUE
    [DSH_AT_BROKER]         = { false,  true,  true,      true  },
    [DSH_AT_CHAIN]          = { true,   true,  false,     false },
    [DSH_AT_COMPONENT]      = { false,  true,  true,      false },
    [DSH_AT_QUEUE]          = { true,   false, false,     false },
};

//  The one place a record's place changes: to `to`, due at due_ms (never
//  past its deadline), re-keyed in the heap.
static void
s_move (dsh_record_t *record, dsh_where_t to, int64_t due_ms)
{
    assert (record);
    s_record_t *own = s_record (record);
    assert (own->where < DSH_WHERE_COUNT && to < DSH_WHERE_COUNT);
    assert (s_legal [own->where][to]);
    if (due_ms > record->deadline_ms)
        due_ms = record->deadline_ms;
    own->where = to;
    s_heap_rekey (own->table, own, due_ms);
}

dsh_where_t
dsh_inflight_where (dsh_record_t *record)
{
    assert (record);
    return s_record (record)->where;
}

size_t
dsh_inflight_stage (dsh_record_t *record, bool *down)
{
    assert (record);
    if (down)
        *down = s_record (record)->down;
    return s_record (record)->stage;
}

int64_t
dsh_inflight_due_ms (dsh_record_t *record)
{
    assert (record);
    s_record_t *own = s_record (record);
    return own->table->heap [own->heap_index].due_ms;
}

void
dsh_inflight_to_chain (dsh_record_t *record, size_t stage, bool down, int64_t hold_until_ms)
{
    assert (record);
    s_record_t *own = s_record (record);
    //  Down the chain from its top, or a stage deeper; up to an outer stage
    //  from anywhere (a veto, a failure, a result), and never down again
    if (own->where == DSH_AT_CHAIN)
        assert (down? own->down && stage > own->stage: stage < own->stage);
    else
        assert (!down || (own->where == DSH_AT_BROKER && stage == 0));
    s_move (record, DSH_AT_CHAIN, hold_until_ms);
    own->stage = stage;
    own->down = down;
}

void
dsh_inflight_to_broker (dsh_record_t *record)
{
    s_move (record, DSH_AT_BROKER, INT64_MAX);
}

void
dsh_inflight_to_queue (dsh_record_t *record)
{
    s_move (record, DSH_AT_QUEUE, INT64_MAX);
}

void
dsh_inflight_to_component (dsh_record_t *record)
{
    s_move (record, DSH_AT_COMPONENT, INT64_MAX);
}

void
dsh_inflight_set_slot_free (dsh_inflight_t *self, dsh_inflight_slot_t slot, dsh_inflight_slot_free_fn *free_fn)
{
    assert (self);
    assert (slot < DSH_INFLIGHT_SLOTS);
    self->slot_free [slot] = free_fn;
}

void **
dsh_inflight_slot (dsh_record_t *record, dsh_inflight_slot_t slot)
{
    assert (record);
    assert (slot < DSH_INFLIGHT_SLOTS);
    return &s_record (record)->slots [slot];
}

zlistx_t *
dsh_inflight_due (dsh_inflight_t *self, int64_t now_ms)
{
    assert (self);
    s_gathered_t gathered = { NULL, 0, 0 };
    s_heap_gather (self, 0, now_ms, &gathered);
    //  Not zlistx_sort: czmq 4.2's comb sort can stop before it is done
    if (gathered.size > 1)
        qsort (gathered.entries, gathered.size, sizeof (s_heap_entry_t), s_compare_due);
    zlistx_t *due = zlistx_new ();
    for (size_t index = 0; index < gathered.size; index++)
        zlistx_add_end (due, &gathered.entries [index].record->public);
    free (gathered.entries);
    return due;
}

int64_t
dsh_inflight_next_due (dsh_inflight_t *self)
{
    assert (self);
    return self->heap_size? self->heap [0].due_ms: INT64_MAX;
}

zlistx_t *
dsh_inflight_at_component (dsh_inflight_t *self, const char *component)
{
    assert (self);
    assert (component);
    zlistx_t *found = zlistx_new ();
    for (dsh_record_t *record = (dsh_record_t *) zhashx_first (self->tokens); record;
         record = (dsh_record_t *) zhashx_next (self->tokens))
        if (s_record (record)->where == DSH_AT_COMPONENT && streq (record->component, component))
            zlistx_add_end (found, record);
    return found;
}

size_t
dsh_inflight_size (dsh_inflight_t *self)
{
    assert (self);
    return zhashx_size (self->tokens);
}

zframe_t *
dsh_inflight_token_frame (uint64_t token)
{
    byte data [8];
    dsh_be64_put (token, data);
    return zframe_new (data, sizeof (data));
}

int
dsh_inflight_token_decode (const void *data, size_t size, uint64_t *token)
{
    if (!data || size != 8)
        return -1;
    *token = dsh_be64_get ((const byte *) data);
    return 0;
}
