/*  =========================================================================
    dsh_view - the Clone pattern's bookkeeping, without sockets

    Rules (zguide Clone, RFC 12), with one choice of ours: when the view is
    lost, every queued event is dropped, not kept for the next snapshot.
    Anything received before the new SNAPSHOT request goes out was published
    before the broker takes that snapshot, so the snapshot already holds it;
    and keeping events of a dead broker's epoch would lose the view again
    after every snapshot of the new one.

    Events are decoded once, when they arrive, into what the view needs
    (seq, epoch, the tool name and what happens to it) and the notice the
    user will see, so a queued event costs no second decode.
    =========================================================================
*/

#include "dsh_view.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_proto.h"

#include <czmq.h>

#define QUEUE_LIMIT_DEFAULT 100000

//  What an event does to the list of tool names.
typedef enum {
    S_EFFECT_NONE,
    S_EFFECT_ADD,           //  tool.registered, tool.updated: keep the name
    S_EFFECT_REMOVE         //  tool.unregistered
} s_effect_t;

typedef struct {
    uint64_t seq;
    uint64_t epoch;
    s_effect_t effect;
    char *name;             //  for tool events
    json_t *notice;         //  the body as JSON
} s_event_t;

struct _dsh_view_t {
    bool synced;            //  a snapshot is applied and no event was missed since
    uint64_t seq;
    uint64_t epoch;
    size_t syncs;
    zlistx_t *names;        //  tool names (char *) in registration order
    zhashx_t *index;        //  name -> handle in names
    zlistx_t *queue;        //  s_event_t waiting for a snapshot
    size_t queue_limit;
    zlistx_t *notices;      //  json_t, oldest first
};

static void
s_event_destroy (s_event_t **self_p)
{
    if (*self_p) {
        s_event_t *self = *self_p;
        zstr_free (&self->name);
        json_decref (self->notice);
        free (self);
        *self_p = NULL;
    }
}

static void
s_json_destroy (json_t **json_p)
{
    if (*json_p) {
        json_decref (*json_p);
        *json_p = NULL;
    }
}

static bool
s_uint_member (const msgpack_object *map, const char *key, uint64_t *value)
{
    const msgpack_object *obj = dsh_map_get (map, key);
    if (!obj || obj->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *value = obj->via.u64;
    return true;
}

//  Decodes and checks an event body; NULL with a reason if it is malformed.
static s_event_t *
s_event_decode (const void *data, size_t size, char *error, size_t error_size)
{
    dsh_doc_t *doc = dsh_doc_new (data, size, error, error_size);
    if (!doc)
        return NULL;
    const msgpack_object *root = dsh_doc_root (doc);
    s_event_t *event = (s_event_t *) zmalloc (sizeof (s_event_t));
    assert (event);
    const char *problem = NULL;
    const msgpack_object *kind = dsh_map_get (root, "kind");
    const msgpack_object *name = dsh_map_get (root, "name");
    if (root->type != MSGPACK_OBJECT_MAP)
        problem = "event body is not a map";
    else
    if (!s_uint_member (root, "seq", &event->seq) || event->seq == 0)
        problem = "event has no valid seq";
    else
    if (!s_uint_member (root, "epoch", &event->epoch))
        problem = "event has no valid epoch";
    else
    if (!kind || kind->type != MSGPACK_OBJECT_STR)
        problem = "event has no kind";
    else
    if (!dsh_map_get (root, "component")
    ||  dsh_map_get (root, "component")->type != MSGPACK_OBJECT_STR)
        problem = "event has no component";
    else {
        if (dsh_str_eq (kind, DSH_EV_REGISTERED) || dsh_str_eq (kind, DSH_EV_UPDATED))
            event->effect = S_EFFECT_ADD;
        else
        if (dsh_str_eq (kind, DSH_EV_UNREGISTERED))
            event->effect = S_EFFECT_REMOVE;
        if (event->effect != S_EFFECT_NONE) {
            if (!name || name->type != MSGPACK_OBJECT_STR
            ||  !dsh_proto_valid_name (name->via.str.ptr, name->via.str.size))
                problem = "tool event has no valid name";
            else
                event->name = strndup (name->via.str.ptr, name->via.str.size);
        }
    }
    if (!problem) {
        event->notice = dsh_json_from_msgpack (root);
        if (!event->notice)
            problem = "event body has no JSON form";
    }
    dsh_doc_destroy (&doc);
    if (problem) {
        snprintf (error, error_size, "%s", problem);
        s_event_destroy (&event);
    }
    return event;
}

static void
s_names_add (dsh_view_t *self, const char *name)
{
    if (zhashx_lookup (self->index, name))
        return;
    void *handle = zlistx_add_end (self->names, strdup (name));
    zhashx_insert (self->index, name, handle);
}

static void
s_names_remove (dsh_view_t *self, const char *name)
{
    void *handle = zhashx_lookup (self->index, name);
    if (handle) {
        zhashx_delete (self->index, name);
        zlistx_delete (self->names, handle);
    }
}

static void
s_names_clear (dsh_view_t *self)
{
    zlistx_purge (self->names);
    zhashx_purge (self->index);
}

//  The view missed something: wait for a new snapshot.
static void
s_lose (dsh_view_t *self)
{
    self->synced = false;
    zlistx_purge (self->queue);
}

//  Applies an event to a synchronised view; takes the event.
static dsh_view_verdict_t
s_apply (dsh_view_t *self, s_event_t **event_p)
{
    s_event_t *event = *event_p;
    dsh_view_verdict_t verdict = DSH_VIEW_OK;
    if (event->epoch != self->epoch) {
        dsh_log_info ("dsh_view: event of epoch %" PRIu64 " in epoch %" PRIu64 ", resynchronising",
                   event->epoch, self->epoch);
        s_lose (self);
        verdict = DSH_VIEW_RESYNC;
    }
    else
    if (event->seq > self->seq + 1) {
        dsh_log_info ("dsh_view: event %" PRIu64 " after %" PRIu64 ", resynchronising",
                   event->seq, self->seq);
        s_lose (self);
        verdict = DSH_VIEW_RESYNC;
    }
    else
    if (event->seq == self->seq + 1) {
        if (event->effect == S_EFFECT_ADD)
            s_names_add (self, event->name);
        else
        if (event->effect == S_EFFECT_REMOVE)
            s_names_remove (self, event->name);
        self->seq = event->seq;
        zlistx_add_end (self->notices, event->notice);
        event->notice = NULL;
    }
    //  An event at or below the view's seq was published before the
    //  snapshot was taken: the snapshot holds it already.
    s_event_destroy (event_p);
    return verdict;
}

dsh_view_t *
dsh_view_new (size_t queue_limit)
{
    dsh_view_t *self = (dsh_view_t *) zmalloc (sizeof (dsh_view_t));
    assert (self);
    self->queue_limit = queue_limit? queue_limit: QUEUE_LIMIT_DEFAULT;
    self->names = zlistx_new ();
    zlistx_set_destructor (self->names, (zlistx_destructor_fn *) zstr_free);
    self->index = zhashx_new ();
    self->queue = zlistx_new ();
    zlistx_set_destructor (self->queue, (zlistx_destructor_fn *) s_event_destroy);
    self->notices = zlistx_new ();
    zlistx_set_destructor (self->notices, (zlistx_destructor_fn *) s_json_destroy);
    return self;
}

void
dsh_view_destroy (dsh_view_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_view_t *self = *self_p;
        zlistx_destroy (&self->names);
        zhashx_destroy (&self->index);
        zlistx_destroy (&self->queue);
        zlistx_destroy (&self->notices);
        free (self);
        *self_p = NULL;
    }
}

dsh_view_verdict_t
dsh_view_event (dsh_view_t *self, const void *data, size_t size,
                char *error, size_t error_size)
{
    assert (self);
    s_event_t *event = s_event_decode (data, size, error, error_size);
    if (!event)
        return DSH_VIEW_INVALID;
    if (self->synced)
        return s_apply (self, &event);
    if (zlistx_size (self->queue) >= self->queue_limit) {
        dsh_log_warning ("dsh_view: %zu events queued waiting for a snapshot, resynchronising",
                      zlistx_size (self->queue));
        s_event_destroy (&event);
        s_lose (self);
        return DSH_VIEW_RESYNC;
    }
    zlistx_add_end (self->queue, event);
    return DSH_VIEW_OK;
}

//  The snapshot's tool names, in its order; NULL with a reason if any
//  entry is malformed.
static zlistx_t *
s_snapshot_names (const msgpack_object *tools, char *error, size_t error_size)
{
    if (!tools || tools->type != MSGPACK_OBJECT_ARRAY) {
        snprintf (error, error_size, "snapshot has no tools array");
        return NULL;
    }
    zlistx_t *names = zlistx_new ();
    zlistx_set_destructor (names, (zlistx_destructor_fn *) zstr_free);
    for (uint32_t i = 0; i < tools->via.array.size; i++) {
        const msgpack_object *entry = dsh_map_get (&tools->via.array.ptr [i], "tool");
        const msgpack_object *name = dsh_map_get (entry, "name");
        if (!name || name->type != MSGPACK_OBJECT_STR
        ||  !dsh_proto_valid_name (name->via.str.ptr, name->via.str.size)) {
            snprintf (error, error_size, "snapshot tool %u has no valid name", i);
            zlistx_destroy (&names);
            return NULL;
        }
        zlistx_add_end (names, strndup (name->via.str.ptr, name->via.str.size));
    }
    return names;
}

//  {kind:"snapshot"} followed by the body's members, less the request id.
static json_t *
s_snapshot_notice (const msgpack_object *root)
{
    json_t *body = dsh_json_from_msgpack (root);
    if (!body)
        return NULL;
    json_t *notice = json_object ();
    json_object_set_new (notice, "kind", json_string ("snapshot"));
    const char *key;
    json_t *value;
    json_object_foreach (body, key, value) {
        if (!streq (key, "id") && !streq (key, "kind"))
            json_object_set (notice, key, value);
    }
    json_decref (body);
    return notice;
}

dsh_view_verdict_t
dsh_view_snapshot (dsh_view_t *self, const void *data, size_t size,
                   char *error, size_t error_size)
{
    assert (self);
    if (self->synced)
        return DSH_VIEW_OK;
    dsh_doc_t *doc = dsh_doc_new (data, size, error, error_size);
    if (!doc)
        return DSH_VIEW_INVALID;
    const msgpack_object *root = dsh_doc_root (doc);
    uint64_t seq, epoch;
    zlistx_t *names = NULL;
    json_t *notice = NULL;
    if (!s_uint_member (root, "seq", &seq) || !s_uint_member (root, "epoch", &epoch))
        snprintf (error, error_size, "snapshot has no valid seq and epoch");
    else
    if (dsh_map_get (root, "components")
    &&  dsh_map_get (root, "components")->type != MSGPACK_OBJECT_ARRAY)
        snprintf (error, error_size, "snapshot components is not an array");
    else
    if ((names = s_snapshot_names (dsh_map_get (root, "tools"), error, error_size))) {
        notice = s_snapshot_notice (root);
        if (!notice)
            snprintf (error, error_size, "snapshot has no JSON form");
    }
    dsh_doc_destroy (&doc);
    if (!notice) {
        zlistx_destroy (&names);
        return DSH_VIEW_INVALID;
    }
    s_names_clear (self);
    for (char *name = zlistx_first (names); name; name = zlistx_next (names))
        s_names_add (self, name);
    zlistx_destroy (&names);
    self->seq = seq;
    self->epoch = epoch;
    self->synced = true;
    self->syncs++;
    zlistx_add_end (self->notices, notice);

    //  s_apply empties the queue itself if the view is lost again
    s_event_t *event;
    while ((event = (s_event_t *) zlistx_detach (self->queue, NULL))) {
        if (s_apply (self, &event) == DSH_VIEW_RESYNC)
            return DSH_VIEW_RESYNC;
    }
    return DSH_VIEW_OK;
}

void
dsh_view_lose (dsh_view_t *self)
{
    assert (self);
    s_lose (self);
}

json_t *
dsh_view_notice (dsh_view_t *self)
{
    assert (self);
    return (json_t *) zlistx_detach (self->notices, NULL);
}

bool
dsh_view_synced (dsh_view_t *self)
{
    assert (self);
    return self->synced;
}

uint64_t
dsh_view_seq (dsh_view_t *self)
{
    assert (self);
    return self->seq;
}

size_t
dsh_view_syncs (dsh_view_t *self)
{
    assert (self);
    return self->syncs;
}

json_t *
dsh_view_tools (dsh_view_t *self)
{
    assert (self);
    json_t *tools = json_array ();
    for (char *name = zlistx_first (self->names); name; name = zlistx_next (self->names))
        json_array_append_new (tools, json_string (name));
    return tools;
}
