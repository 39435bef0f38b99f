/*  =========================================================================
    dsh_dispatch - calls in flight, keyed by token

    A zhashx keyed by the token's 16 hex digits. Deadlines and departures
    scan the table: both happen at most a few times a second, and the
    table holds the calls in flight, not the calls ever made.
    =========================================================================
*/

#include "dsh_dispatch.h"

struct _dsh_dispatch_t {
    zhashx_t *pending;          //  token hex -> dsh_pending_t *, owned here, not by the hash
    zhashx_t *callers;          //  caller key or "chain/<token>" -> token hex (for cancels)
    uint64_t next_token;
};

void
dsh_pending_destroy (dsh_pending_t **self_p)
{
    if (*self_p) {
        dsh_pending_t *self = *self_p;
        zmsg_destroy (&self->envelope);
        zstr_free (&self->call_id);
        zstr_free (&self->tool);
        zstr_free (&self->component);
        zframe_destroy (&self->body);
        zstr_free (&self->caller);
        free (self);
        *self_p = NULL;
    }
}

dsh_dispatch_t *
dsh_dispatch_new (void)
{
    dsh_dispatch_t *self = (dsh_dispatch_t *) zmalloc (sizeof (dsh_dispatch_t));
    assert (self);
    self->pending = zhashx_new ();
    self->callers = zhashx_new ();
    zhashx_set_destructor (self->callers, (zhashx_destructor_fn *) zstr_free);
    //  Tokens start at a random point so that a restarted broker does not
    //  take a late RESULT meant for its predecessor as one of its own.
    self->next_token = ((uint64_t) randof (INT32_MAX) << 32) | (uint64_t) randof (INT32_MAX);
    return self;
}

void
dsh_dispatch_destroy (dsh_dispatch_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_dispatch_t *self = *self_p;
        for (dsh_pending_t *entry = zhashx_first (self->pending); entry; entry = zhashx_next (self->pending))
            dsh_pending_destroy (&entry);
        zhashx_destroy (&self->pending);
        zhashx_destroy (&self->callers);
        free (self);
        *self_p = NULL;
    }
}

static void
s_token_key (uint64_t token, char key [17])
{
    dsh_proto_token_hex (token, key);
}

//  The key a caller (or the chain) finds its call by, for cancels.
static char *
s_caller_key (dsh_pending_t *entry)
{
    if (entry->chain_token)
        return zsys_sprintf ("chain/%016" PRIx64, entry->chain_token);
    return dsh_proto_caller_key (entry->envelope, entry->call_id);
}

//  Removes an entry from the table and its index; the caller owns it.
static void
s_unlink (dsh_dispatch_t *self, dsh_pending_t *entry)
{
    char key [17];
    s_token_key (entry->token, key);
    zhashx_delete (self->pending, key);
    const char *indexed = (const char *) zhashx_lookup (self->callers, entry->caller);
    if (indexed && streq (indexed, key))
        zhashx_delete (self->callers, entry->caller);
}

uint64_t
dsh_dispatch_add (dsh_dispatch_t *self, zmsg_t **envelope_p, uint64_t chain_token,
                  const char *call_id, const char *tool, const char *component, int64_t deadline_ms)
{
    assert (self);
    dsh_pending_t *entry = (dsh_pending_t *) zmalloc (sizeof (dsh_pending_t));
    assert (entry);
    entry->token = ++self->next_token;
    if (envelope_p) {
        entry->envelope = *envelope_p;
        *envelope_p = NULL;
    }
    entry->chain_token = chain_token;
    entry->call_id = strdup (call_id);
    entry->tool = strdup (tool);
    entry->component = strdup (component);
    entry->deadline_ms = deadline_ms;
    char key [17];
    s_token_key (entry->token, key);
    zhashx_insert (self->pending, key, entry);
    entry->caller = s_caller_key (entry);
    zhashx_update (self->callers, entry->caller, strdup (key));
    return entry->token;
}

dsh_pending_t *
dsh_dispatch_take (dsh_dispatch_t *self, uint64_t token)
{
    assert (self);
    char key [17];
    s_token_key (token, key);
    dsh_pending_t *entry = (dsh_pending_t *) zhashx_lookup (self->pending, key);
    if (entry)
        s_unlink (self, entry);
    return entry;
}

//  Takes the entry a caller key names, if any.
static dsh_pending_t *
s_take_by_caller (dsh_dispatch_t *self, const char *caller)
{
    const char *key = (const char *) zhashx_lookup (self->callers, caller);
    dsh_pending_t *entry = key? (dsh_pending_t *) zhashx_lookup (self->pending, key): NULL;
    if (entry)
        s_unlink (self, entry);
    return entry;
}

dsh_pending_t *
dsh_dispatch_take_caller (dsh_dispatch_t *self, zmsg_t *envelope, const char *call_id)
{
    assert (self);
    char *caller = dsh_proto_caller_key (envelope, call_id);
    dsh_pending_t *entry = s_take_by_caller (self, caller);
    zstr_free (&caller);
    return entry;
}

dsh_pending_t *
dsh_dispatch_take_chain (dsh_dispatch_t *self, uint64_t chain_token)
{
    assert (self);
    char caller [32];
    snprintf (caller, sizeof (caller), "chain/%016" PRIx64, chain_token);
    return s_take_by_caller (self, caller);
}

dsh_pending_t *
dsh_dispatch_lookup (dsh_dispatch_t *self, uint64_t token)
{
    assert (self);
    char key [17];
    s_token_key (token, key);
    return (dsh_pending_t *) zhashx_lookup (self->pending, key);
}

//  Takes the entries that match, into a list that owns them.
static zlistx_t *
s_take_where (dsh_dispatch_t *self, const char *component, int64_t now_ms)
{
    zlistx_t *taken = zlistx_new ();
    zlistx_set_destructor (taken, (zlistx_destructor_fn *) dsh_pending_destroy);
    zlistx_t *keys = zhashx_keys (self->pending);
    for (char *key = zlistx_first (keys); key; key = zlistx_next (keys)) {
        dsh_pending_t *entry = (dsh_pending_t *) zhashx_lookup (self->pending, key);
        bool match = component? streq (entry->component, component): entry->deadline_ms <= now_ms;
        if (match) {
            s_unlink (self, entry);
            zlistx_add_end (taken, entry);
        }
    }
    zlistx_destroy (&keys);
    return taken;
}

zlistx_t *
dsh_dispatch_take_component (dsh_dispatch_t *self, const char *component)
{
    assert (self);
    assert (component);
    return s_take_where (self, component, 0);
}

zlistx_t *
dsh_dispatch_take_expired (dsh_dispatch_t *self, int64_t now_ms)
{
    assert (self);
    return s_take_where (self, NULL, now_ms);
}

size_t
dsh_dispatch_size (dsh_dispatch_t *self)
{
    assert (self);
    return zhashx_size (self->pending);
}

zframe_t *
dsh_dispatch_token_frame (uint64_t token)
{
    byte data [8];
    for (int index = 0; index < 8; index++)
        data [index] = (byte) (token >> (56 - 8 * index));
    return zframe_new (data, sizeof (data));
}

int
dsh_dispatch_token_decode (zframe_t *frame, uint64_t *token)
{
    if (!frame || zframe_size (frame) != 8)
        return -1;
    const byte *data = zframe_data (frame);
    uint64_t value = 0;
    for (int index = 0; index < 8; index++)
        value = (value << 8) | data [index];
    *token = value;
    return 0;
}
