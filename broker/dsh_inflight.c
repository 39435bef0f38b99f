/*  =========================================================================
    dsh_inflight - every call in the broker, one record each

    Two zhashx indexes over the same records, neither with string keys:
    tokens (the key is the record's own token field, hashed as an integer)
    and callers (the key is the record itself, hashed over its route bytes
    and callId). Neither index copies or frees its keys; the records are
    freed only here, after both indexes let go of them.

    Tokens come from getrandom(2), a block at a time, so a component or a
    stage cannot guess another call's token, and a restarted broker does
    not take a late RESULT meant for its predecessor as its own.
    =========================================================================
*/

#include "dsh_inflight.h"
#include "dsh_sock.h"

#include <sys/random.h>

#define S_TOKEN_BLOCK 64

struct _dsh_inflight_t {
    dsh_inflight_reply_fn *reply;
    void *reply_arg;
    zhashx_t *tokens;           //  &record->token -> record, owns nothing
    zhashx_t *callers;          //  record -> record (hashed by route and callId)
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
//  Records

static void
s_record_destroy (dsh_record_t **self_p)
{
    if (*self_p) {
        dsh_record_t *self = *self_p;
        for (size_t index = 0; index < self->route_size; index++)
            zmq_msg_close (&self->route [index]);
        zlistx_destroy (&self->hops);
        zframe_destroy (&self->held);
        zframe_destroy (&self->entry);
        zframe_destroy (&self->audit_sent);
        dsh_audit_trail_destroy (&self->trail);
        if (self->has_retry_body)
            zmq_msg_close (&self->retry_body);
        free (self);
        *self_p = NULL;
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
            s_record_destroy (&record);
        zhashx_destroy (&self->tokens);
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
    dsh_record_t *record = (dsh_record_t *) zmalloc (sizeof (dsh_record_t));
    assert (record);
    for (size_t index = 0; index < route_size; index++) {
        zmq_msg_init (&record->route [index]);
        zmq_msg_move (&record->route [index], &route [index]);
    }
    record->route_size = route_size;
    s_copy (record->call_id, sizeof (record->call_id), call_id);
    s_copy (record->tool, sizeof (record->tool), tool);
    record->deadline_ms = deadline_ms;
    record->hold_until_ms = deadline_ms;
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
    s_record_destroy (record_p);
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

void
dsh_inflight_drop (dsh_inflight_t *self, dsh_record_t **record_p)
{
    assert (self);
    assert (record_p);
    if (*record_p) {
        s_unlink (self, *record_p);
        dsh_stats_drop (self->stats, (*record_p)->stats_tool);
        s_record_destroy (record_p);
    }
}

zlistx_t *
dsh_inflight_due (dsh_inflight_t *self, int64_t now_ms)
{
    assert (self);
    zlistx_t *due = zlistx_new ();
    for (dsh_record_t *record = (dsh_record_t *) zhashx_first (self->tokens); record;
         record = (dsh_record_t *) zhashx_next (self->tokens))
        if (record->deadline_ms <= now_ms || record->hold_until_ms <= now_ms)
            zlistx_add_end (due, record);
    return due;
}

zlistx_t *
dsh_inflight_at_component (dsh_inflight_t *self, const char *component)
{
    assert (self);
    assert (component);
    zlistx_t *found = zlistx_new ();
    for (dsh_record_t *record = (dsh_record_t *) zhashx_first (self->tokens); record;
         record = (dsh_record_t *) zhashx_next (self->tokens))
        if (record->where == DSH_AT_COMPONENT && streq (record->component, component))
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
