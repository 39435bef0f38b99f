/*  =========================================================================
    dsh_fairq - calls held back for busy components, round robin by caller

    One queue per component that has calls held; in it, one lane per
    caller (a list of held calls, oldest first) and a ring of the lanes:
    the next call comes from the first lane of the ring, which then goes
    to the ring's end. A lane or a queue that empties is freed, so the
    structure holds only what waits. Plain round robin over calls, not
    deficit round robin over bytes: what a call costs a component is a
    slot of its window for as long as the call runs, not its size.

    Callers are keyed by dsh_inflight_caller's bytes, in hex; a second
    table counts each caller's held calls and bytes across components for
    its bounds. A held call's entry is in the record's fair-queue slot,
    which nothing else reads. Nothing here is touched unless a component
    is busy: an idle broker sends every call straight through.
    =========================================================================
*/

#include "dsh_fairq.h"

//  dsh_inflight_caller's key is at most a routing id (255 bytes), in hex
#define S_KEY_MAX (2 * 255 + 1)

typedef struct {
    size_t calls;
    size_t bytes;
} s_caller_t;

typedef struct _s_queue_t s_queue_t;

typedef struct {
    char *key;                  //  the caller's, in hex (the lanes' key)
    zlistx_t *entries;          //  s_entry_t *, oldest first, owns them
    s_queue_t *queue;           //  the queue the lane is in
    s_caller_t *caller;         //  the caller's counts (borrowed)
    void *turn;                 //  its handle in queue->ring
} s_lane_t;

struct _s_queue_t {
    char *component;
    zhashx_t *lanes;            //  caller key -> s_lane_t *, owns them
    zlistx_t *ring;             //  s_lane_t *, next to serve first (borrowed)
};

typedef struct {
    dsh_record_t *record;
    zmq_msg_t body;
    s_lane_t *lane;
    void *handle;               //  in lane->entries
} s_entry_t;

struct _dsh_fairq_t {
    dsh_fairq_limits_t limits;
    zhashx_t *queues;           //  component id -> s_queue_t *, owns them
    zhashx_t *callers;          //  caller key -> s_caller_t *, owns them
    size_t calls;
    size_t bytes;
};

static void
s_entry_destroy (s_entry_t **self_p)
{
    if (*self_p) {
        zmq_msg_close (&(*self_p)->body);
        free (*self_p);
        *self_p = NULL;
    }
}

static void
s_caller_destroy (s_caller_t **self_p)
{
    free (*self_p);
    *self_p = NULL;
}

static void
s_lane_destroy (s_lane_t **self_p)
{
    if (*self_p) {
        s_lane_t *self = *self_p;
        zlistx_destroy (&self->entries);
        zstr_free (&self->key);
        free (self);
        *self_p = NULL;
    }
}

static void
s_queue_destroy (s_queue_t **self_p)
{
    if (*self_p) {
        s_queue_t *self = *self_p;
        zlistx_destroy (&self->ring);
        zhashx_destroy (&self->lanes);
        zstr_free (&self->component);
        free (self);
        *self_p = NULL;
    }
}

dsh_fairq_t *
dsh_fairq_new (const dsh_fairq_limits_t *limits)
{
    assert (limits);
    dsh_fairq_t *self = (dsh_fairq_t *) zmalloc (sizeof (dsh_fairq_t));
    assert (self);
    self->limits = *limits;
    self->queues = zhashx_new ();
    zhashx_set_destructor (self->queues, (zhashx_destructor_fn *) s_queue_destroy);
    self->callers = zhashx_new ();
    zhashx_set_destructor (self->callers, (zhashx_destructor_fn *) s_caller_destroy);
    return self;
}

void
dsh_fairq_destroy (dsh_fairq_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_fairq_t *self = *self_p;
        zhashx_destroy (&self->queues);
        zhashx_destroy (&self->callers);
        free (self);
        *self_p = NULL;
    }
}

//  The record's slot: its entry while it is held here, else NULL.
static s_entry_t **
s_slot (dsh_record_t *record)
{
    return (s_entry_t **) dsh_inflight_slot (record, DSH_INFLIGHT_SLOT_FAIRQ);
}

//  The caller of a record as a string key.
static void
s_caller_key (dsh_record_t *record, char *key)
{
    size_t size;
    const byte *bytes = (const byte *) dsh_inflight_caller (record, &size);
    static const char digits [] = "0123456789abcdef";
    size_t length = 0;
    for (size_t index = 0; index < size && length + 2 < S_KEY_MAX; index++) {
        key [length++] = digits [bytes [index] >> 4];
        key [length++] = digits [bytes [index] & 15];
    }
    key [length] = 0;
}

int
dsh_fairq_push (dsh_fairq_t *self, dsh_record_t *record, zmq_msg_t *body, char *error, size_t error_size)
{
    assert (self);
    assert (record && body);
    assert (!*s_slot (record));
    char key [S_KEY_MAX];
    s_caller_key (record, key);
    size_t bytes = zmq_msg_size (body);
    s_caller_t *caller = (s_caller_t *) zhashx_lookup (self->callers, key);
    size_t caller_calls = caller? caller->calls: 0;
    size_t caller_bytes = caller? caller->bytes: 0;
    if (caller_calls + 1 > self->limits.max_caller_calls || caller_bytes + bytes > self->limits.max_caller_bytes) {
        snprintf (error, error_size, "the broker holds %zu calls (%zu bytes) from this caller for busy "
                  "components, its limit is %zu calls, %zu bytes", caller_calls, caller_bytes,
                  self->limits.max_caller_calls, self->limits.max_caller_bytes);
        return -1;
    }
    if (self->calls + 1 > self->limits.max_calls || self->bytes + bytes > self->limits.max_bytes) {
        snprintf (error, error_size, "the broker holds %zu calls (%zu bytes) for busy components, "
                  "its limit is %zu calls, %zu bytes", self->calls, self->bytes,
                  self->limits.max_calls, self->limits.max_bytes);
        return -1;
    }
    if (!caller) {
        caller = (s_caller_t *) zmalloc (sizeof (s_caller_t));
        assert (caller);
        zhashx_insert (self->callers, key, caller);
    }
    s_queue_t *queue = (s_queue_t *) zhashx_lookup (self->queues, record->component);
    if (!queue) {
        queue = (s_queue_t *) zmalloc (sizeof (s_queue_t));
        assert (queue);
        queue->component = strdup (record->component);
        queue->lanes = zhashx_new ();
        zhashx_set_destructor (queue->lanes, (zhashx_destructor_fn *) s_lane_destroy);
        queue->ring = zlistx_new ();
        zhashx_insert (self->queues, record->component, queue);
    }
    s_lane_t *lane = (s_lane_t *) zhashx_lookup (queue->lanes, key);
    if (!lane) {
        lane = (s_lane_t *) zmalloc (sizeof (s_lane_t));
        assert (lane);
        lane->key = strdup (key);
        lane->entries = zlistx_new ();
        zlistx_set_destructor (lane->entries, (zlistx_destructor_fn *) s_entry_destroy);
        lane->queue = queue;
        lane->caller = caller;
        //  A caller new to the queue waits a full turn, behind the others
        lane->turn = zlistx_add_end (queue->ring, lane);
        zhashx_insert (queue->lanes, key, lane);
    }
    s_entry_t *entry = (s_entry_t *) zmalloc (sizeof (s_entry_t));
    assert (entry);
    entry->record = record;
    zmq_msg_init (&entry->body);
    zmq_msg_move (&entry->body, body);
    entry->lane = lane;
    entry->handle = zlistx_add_end (lane->entries, entry);
    dsh_inflight_to_queue (record);
    *s_slot (record) = entry;
    caller->calls++;
    caller->bytes += bytes;
    self->calls++;
    self->bytes += bytes;
    return 0;
}

//  Takes an entry out of its lane, and frees the lane, the queue and the
//  caller's counts when they empty; its call is the broker's again. The
//  body stays in the entry.
static s_entry_t *
s_take (dsh_fairq_t *self, s_entry_t *entry)
{
    s_lane_t *lane = entry->lane;
    s_queue_t *queue = lane->queue;
    size_t bytes = zmq_msg_size (&entry->body);
    zlistx_detach (lane->entries, entry->handle);
    *s_slot (entry->record) = NULL;
    dsh_inflight_to_broker (entry->record);
    lane->caller->calls--;
    lane->caller->bytes -= bytes;
    self->calls--;
    self->bytes -= bytes;
    if (lane->caller->calls == 0)
        zhashx_delete (self->callers, lane->key);
    if (zlistx_size (lane->entries) == 0) {
        //  The lane's and queue's own strings go with them: keys copied first
        char key [S_KEY_MAX];
        snprintf (key, sizeof (key), "%s", lane->key);
        zlistx_delete (queue->ring, lane->turn);
        zhashx_delete (queue->lanes, key);
        if (zhashx_size (queue->lanes) == 0) {
            char component [DSH_ID_MAX + 1];
            snprintf (component, sizeof (component), "%s", queue->component);
            zhashx_delete (self->queues, component);
        }
    }
    return entry;
}

dsh_record_t *
dsh_fairq_pop (dsh_fairq_t *self, const char *component, zmq_msg_t *body)
{
    assert (self);
    assert (component && body);
    s_queue_t *queue = (s_queue_t *) zhashx_lookup (self->queues, component);
    if (!queue)
        return NULL;
    s_lane_t *lane = (s_lane_t *) zlistx_first (queue->ring);
    assert (lane);
    //  This caller has had its turn: the next one goes first next time
    zlistx_move_end (queue->ring, lane->turn);
    s_entry_t *entry = s_take (self, (s_entry_t *) zlistx_first (lane->entries));
    dsh_record_t *record = entry->record;
    zmq_msg_move (body, &entry->body);
    s_entry_destroy (&entry);
    return record;
}

void
dsh_fairq_remove (dsh_fairq_t *self, dsh_record_t *record)
{
    assert (self);
    assert (record && dsh_inflight_where (record) == DSH_AT_QUEUE && *s_slot (record));
    s_entry_t *entry = s_take (self, *s_slot (record));
    s_entry_destroy (&entry);
}

zlistx_t *
dsh_fairq_components (dsh_fairq_t *self)
{
    assert (self);
    zlistx_t *components = zhashx_keys (self->queues);
    return components;
}

size_t
dsh_fairq_size (dsh_fairq_t *self)
{
    assert (self);
    return self->calls;
}

size_t
dsh_fairq_bytes (dsh_fairq_t *self)
{
    assert (self);
    return self->bytes;
}
