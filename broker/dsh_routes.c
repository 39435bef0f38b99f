/*  =========================================================================
    dsh_routes - which WORK connection serves which component id

    Two hashes on one set of records: component id -> route (owns them),
    and routing id -> route (borrowed), so a message from WORK finds the id
    it speaks for, and a call finds the connection it goes to, in one
    lookup each.
    =========================================================================
*/

#include "dsh_routes.h"

struct _dsh_routes_t {
    zhashx_t *by_component;     //  component id -> dsh_route_t *, owns them
    zhashx_t *by_link;          //  routing id -> dsh_route_t * (borrowed)
    zhashx_t *waiting;          //  component id -> zlistx of dsh_route_t *, oldest first
    zhashx_t *owned_at;         //  component id -> uint64_t *, its latest owner's generation
};

static void
s_route_destroy (dsh_route_t **self_p)
{
    if (*self_p) {
        dsh_route_t *self = *self_p;
        zstr_free (&self->component);
        zstr_free (&self->routing_id);
        zstr_free (&self->key);
        free (self);
        *self_p = NULL;
    }
}

dsh_routes_t *
dsh_routes_new (void)
{
    dsh_routes_t *self = (dsh_routes_t *) zmalloc (sizeof (dsh_routes_t));
    assert (self);
    self->by_component = zhashx_new ();
    zhashx_set_destructor (self->by_component, (zhashx_destructor_fn *) s_route_destroy);
    self->by_link = zhashx_new ();
    self->waiting = zhashx_new ();
    zhashx_set_destructor (self->waiting, (zhashx_destructor_fn *) zlistx_destroy);
    self->owned_at = zhashx_new ();
    zhashx_set_destructor (self->owned_at, (zhashx_destructor_fn *) zstr_free);
    return self;
}

void
dsh_routes_destroy (dsh_routes_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_routes_t *self = *self_p;
        zhashx_destroy (&self->by_link);
        zhashx_destroy (&self->waiting);
        zhashx_destroy (&self->owned_at);
        zhashx_destroy (&self->by_component);
        free (self);
        *self_p = NULL;
    }
}

dsh_route_t *
dsh_routes_lookup (dsh_routes_t *self, const char *component)
{
    assert (self);
    return (dsh_route_t *) zhashx_lookup (self->by_component, component);
}

dsh_route_t *
dsh_routes_link (dsh_routes_t *self, const char *routing_id)
{
    assert (self);
    return (dsh_route_t *) zhashx_lookup (self->by_link, routing_id);
}

//  Forgets a route under both keys.
static void
s_remove (dsh_routes_t *self, dsh_route_t *route)
{
    if (zhashx_lookup (self->by_link, route->routing_id) == route)
        zhashx_delete (self->by_link, route->routing_id);
    zhashx_delete (self->by_component, route->component);
}

static dsh_route_t *
s_route_new (const char *component, const char *routing_id, int fd, uint64_t generation, const char *key)
{
    dsh_route_t *route = (dsh_route_t *) zmalloc (sizeof (dsh_route_t));
    assert (route);
    route->component = strdup (component);
    route->routing_id = strdup (routing_id);
    route->fd = fd;
    route->generation = generation;
    route->key = key? strdup (key): NULL;
    return route;
}

//  Takes routing_id out of component's line, if it waits there.
static void
s_unwait (dsh_routes_t *self, const char *component, const char *routing_id)
{
    zlistx_t *line = (zlistx_t *) zhashx_lookup (self->waiting, component);
    for (dsh_route_t *waiting = line? zlistx_first (line): NULL; waiting; waiting = zlistx_next (line))
        if (streq (waiting->routing_id, routing_id)) {
            zlistx_delete (line, zlistx_cursor (line));
            break;
        }
    if (line && zlistx_size (line) == 0)
        zhashx_delete (self->waiting, component);
}

void
dsh_routes_wait (dsh_routes_t *self, const char *component, const char *routing_id, int fd,
                 uint64_t generation, const char *key)
{
    assert (self);
    s_unwait (self, component, routing_id);
    zlistx_t *line = (zlistx_t *) zhashx_lookup (self->waiting, component);
    if (!line) {
        line = zlistx_new ();
        zlistx_set_destructor (line, (zlistx_destructor_fn *) s_route_destroy);
        zhashx_insert (self->waiting, component, line);
    }
    if (zlistx_size (line) >= DSH_ROUTES_WAITING_MAX) {
        zlistx_first (line);
        zlistx_delete (line, zlistx_cursor (line));
    }
    zlistx_add_end (line, s_route_new (component, routing_id, fd, generation, key));
}

zlistx_t *
dsh_routes_waiting (dsh_routes_t *self, const char *component)
{
    assert (self);
    return (zlistx_t *) zhashx_lookup (self->waiting, component);
}

bool
dsh_routes_waits (dsh_routes_t *self, const char *component, const char *routing_id)
{
    assert (self);
    zlistx_t *line = (zlistx_t *) zhashx_lookup (self->waiting, component);
    for (dsh_route_t *waiting = line? zlistx_first (line): NULL; waiting; waiting = zlistx_next (line))
        if (streq (waiting->routing_id, routing_id))
            return true;
    return false;
}

dsh_route_t *
dsh_routes_promote (dsh_routes_t *self, const char *component, int64_t now_ms, int64_t now_mono_ms)
{
    assert (self);
    zlistx_t *line = (zlistx_t *) zhashx_lookup (self->waiting, component);
    dsh_route_t *next = line? (dsh_route_t *) zlistx_first (line): NULL;
    if (!next)
        return NULL;
    return dsh_routes_bind (self, component, next->routing_id, next->fd, next->generation, next->key,
                            now_ms, now_mono_ms);
}

dsh_route_t *
dsh_routes_bind (dsh_routes_t *self, const char *component, const char *routing_id, int fd,
                 uint64_t generation, const char *key, int64_t now_ms, int64_t now_mono_ms)
{
    assert (self);
    assert (component);
    assert (routing_id);
    dsh_route_t *held = dsh_routes_link (self, routing_id);
    if (held)
        s_remove (self, held);
    held = dsh_routes_lookup (self, component);
    if (held)
        s_remove (self, held);
    dsh_route_t *route = s_route_new (component, routing_id, fd, generation, key);
    s_unwait (self, component, routing_id);
    route->claimed_ms = now_ms;
    route->claimed_mono_ms = now_mono_ms;
    //  The route's own strings: a promoted wait's are gone with it
    zhashx_insert (self->by_component, route->component, route);
    zhashx_insert (self->by_link, route->routing_id, route);
    dsh_routes_set_generation (self, route, generation);
    return route;
}

void
dsh_routes_set_generation (dsh_routes_t *self, dsh_route_t *route, uint64_t generation)
{
    assert (self);
    assert (route);
    if (!generation)
        return;
    route->generation = generation;
    uint64_t *owned_at = (uint64_t *) zmalloc (sizeof (uint64_t));
    assert (owned_at);
    *owned_at = generation;
    zhashx_update (self->owned_at, route->component, owned_at);
}

void
dsh_routes_set_fd (dsh_routes_t *self, dsh_route_t *route, int fd)
{
    assert (self);
    assert (route);
    route->fd = fd;
    route->host [0] = 0;
}

zlistx_t *
dsh_routes_closed (dsh_routes_t *self, int fd)
{
    assert (self);
    zlistx_t *closed = zlistx_new ();
    zlistx_set_duplicator (closed, (zlistx_duplicator_fn *) strdup);
    zlistx_set_destructor (closed, (zlistx_destructor_fn *) zstr_free);
    for (dsh_route_t *route = zhashx_first (self->by_component); route; route = zhashx_next (self->by_component))
        if (route->fd == fd)
            zlistx_add_end (closed, route->component);
    for (char *component = zlistx_first (closed); component; component = zlistx_next (closed))
        s_remove (self, dsh_routes_lookup (self, component));
    //  Waits on that connection end with it
    zlistx_t *lines = zhashx_keys (self->waiting);
    for (char *component = zlistx_first (lines); component; component = zlistx_next (lines)) {
        zlistx_t *line = (zlistx_t *) zhashx_lookup (self->waiting, component);
        for (dsh_route_t *waiting = zlistx_first (line); waiting; waiting = zlistx_next (line))
            if (waiting->fd == fd)
                zlistx_delete (line, zlistx_cursor (line));
        if (zlistx_size (line) == 0)
            zhashx_delete (self->waiting, component);
    }
    zlistx_destroy (&lines);
    return closed;
}

uint64_t
dsh_routes_owned_at (dsh_routes_t *self, const char *component)
{
    assert (self);
    uint64_t *owned_at = (uint64_t *) zhashx_lookup (self->owned_at, component);
    return owned_at? *owned_at: 0;
}

void
dsh_routes_forget (dsh_routes_t *self, const char *component)
{
    assert (self);
    if (!dsh_routes_lookup (self, component))
        zhashx_delete (self->owned_at, component);
}

size_t
dsh_routes_size (dsh_routes_t *self)
{
    assert (self);
    return zhashx_size (self->by_component);
}
