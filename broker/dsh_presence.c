/*  =========================================================================
    dsh_presence - the announce channel: components joining and leaving

    Part of the registry actor (dsh_registry.c; state in
    dsh_registry_priv.h). ANNOUNCE (whole, or in parts), HEARTBEAT and
    WITHDRAW from components, checked against who owns the id (its WORK
    connection's generation, and under CURVE its key), applied to the
    catalog, and a component's removal (withdrawn, expired) with what that
    does to the calls it was given.
    =========================================================================
*/

#include "dsh_registry_priv.h"

void
dsh_presence_remove_component (self_t *self, const char *component, const char *reason)
{
    dsh_parts_forget (self->parts, component, UINT64_MAX);
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    if (dsh_catalog_remove (self->catalog, component, reason, events) == 0) {
        dsh_routes_forget (self->routes, component);
        zhashx_delete (self->presence_keys, component);
        dsh_log_info ("dsh-broker: component %s %s", component, reason);
        dsh_dispatch_fail_component_calls (self, component, reason);
        dsh_stats_component_gone (self->stats, component);
        dsh_registry_publish (self, events);
    }
    zlistx_destroy (&events);
}

//  ---------------------------------------------------------------------
//  Announce socket: presence of components

//  Under CURVE, a component key whose certificate lists tool names may
//  announce only those: fills offered with the entries it may (pointing
//  into presence's document) and refusals with the others.
static void
s_offered_tools (self_t *self, dsh_identity_t *peer, dsh_presence_t *presence,
                 msgpack_object *offered, zlistx_t *refusals)
{
    const msgpack_object_array *tools = &presence->tools->via.array;
    *offered = *presence->tools;
    if (!self->curve || !peer->tools)
        return;
    offered->via.array.ptr = (msgpack_object *) zmalloc ((tools->size + 1) * sizeof (msgpack_object));
    offered->via.array.size = 0;
    for (uint32_t index = 0; index < tools->size; index++) {
        const msgpack_object *name = dsh_map_get (&tools->ptr [index], "name");
        char text [DSH_NAME_MAX + 1] = "";
        if (name && name->type == MSGPACK_OBJECT_STR && name->via.str.size <= DSH_NAME_MAX)
            snprintf (text, sizeof (text), "%.*s", (int) name->via.str.size, name->via.str.ptr);
        if (!*text || dsh_identity_offers (peer, text))
            offered->via.array.ptr [offered->via.array.size++] = tools->ptr [index];
        else {
            self->forbidden++;
            dsh_refusal_t *refusal = (dsh_refusal_t *) zmalloc (sizeof (dsh_refusal_t));
            assert (refusal);
            refusal->component = strdup (presence->component);
            refusal->name = strdup (text);
            refusal->reason = zsys_sprintf ("tool \"%s\": key %.8s... may not offer it (its certificate's "
                                            "tools are %s)", text, peer->key, peer->tools);
            zlistx_add_end (refusals, refusal);
        }
    }
}

static void
s_handle_announce (self_t *self, dsh_presence_t *presence, dsh_identity_t *peer)
{
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    zlistx_t *refusals = zlistx_new ();
    zlistx_set_destructor (refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
    msgpack_object offered;
    s_offered_tools (self, peer, presence, &offered, refusals);
    dsh_catalog_announce (self->catalog, presence->component, presence->generation,
                          &offered, zclock_mono (), events, refusals);
    if (offered.via.array.ptr != presence->tools->via.array.ptr)
        free (offered.via.array.ptr);
    dsh_catalog_set_concurrency (self->catalog, presence->component, (size_t) presence->concurrency);
    dsh_catalog_set_details (self->catalog, presence->component, presence, zclock_mono ());
    dsh_registry_publish (self, events);
    for (dsh_refusal_t *refusal = zlistx_first (refusals); refusal; refusal = zlistx_next (refusals)) {
        dsh_log_warning ("dsh-broker: refused from component %s: %s", refusal->component, refusal->reason);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_packer_map_begin (&packer);
        if (refusal->name)
            dsh_packer_kv_str (&packer, "tool", refusal->name);
        dsh_packer_kv_str (&packer, "reason", refusal->reason);
        dsh_packer_map_end (&packer);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        dsh_work_send (self, refusal->component, DSH_REFUSED, NULL, &body);
    }
    zlistx_destroy (&refusals);
    zlistx_destroy (&events);
    //  Held only while the catalog holds the component, whose removal
    //  forgets it
    uint64_t generation;
    if (self->curve && peer->key && !zhashx_lookup (self->presence_keys, presence->component)
    &&  dsh_catalog_generation (self->catalog, presence->component, &generation) == 0)
        zhashx_insert (self->presence_keys, presence->component, (void *) peer->key);
}

//  One part of a set announced in parts, past the checks every ANNOUNCE
//  gets: held until the set is whole, then applied as one ANNOUNCE of the
//  whole set (its concurrency part 0's). Every part counts as a sign of
//  life, as an ANNOUNCE does.
static void
s_handle_announce_part (self_t *self, dsh_presence_t *presence, dsh_identity_t *peer)
{
    int64_t now = zclock_mono ();
    dsh_catalog_touch (self->catalog, presence->component, presence->generation, now);
    zchunk_t *set = NULL;
    uint64_t concurrency = 0;
    char reason [256];
    dsh_parts_status_t status = dsh_parts_add (self->parts, presence, peer->key, now, &set, &concurrency,
                                               reason, sizeof (reason));
    if (status == DSH_PARTS_FOREIGN) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: ANNOUNCE of component %s in parts: %s: dropped", presence->component, reason);
    }
    else
    if (status == DSH_PARTS_DROPPED)
        dsh_log_warning ("dsh-broker: ANNOUNCE of component %s in parts: %s", presence->component, reason);
    else
    if (status == DSH_PARTS_IGNORED && self->verbose)
        dsh_log_info ("dsh-broker: ANNOUNCE of component %s in parts: %s: ignored", presence->component, reason);
    else
    if (status == DSH_PARTS_WHOLE) {
        //  The broker's own encoding of the entries the parts' decode gave
        char error [256];
        dsh_doc_t *doc = dsh_doc_new (zchunk_data (set), zchunk_size (set), error, sizeof (error));
        if (doc) {
            dsh_presence_t whole = *presence;
            whole.tools = dsh_doc_root (doc);
            whole.concurrency = concurrency;
            whole.part = whole.parts = 0;
            s_handle_announce (self, &whole, peer);
        }
        else
            dsh_log_error ("dsh-broker: the ANNOUNCE of component %s in parts, joined, does not decode: %s",
                           presence->component, error);
        dsh_doc_destroy (&doc);
        zchunk_destroy (&set);
    }
}

//  True if a presence message is not the owner's: while a WORK connection
//  owns the id at a generation its HELLO stated, presence at any other
//  generation comes from another process (refused the id, or not heard on
//  WORK yet), and is dropped. The owner says HELLO with its new
//  generation when its tool set changes; an ANNOUNCE that overtakes that
//  HELLO is dropped, and the SYNC the HELLO brings repairs it.
//  Under CURVE, presence also follows the key (issue 22): while an id is
//  owned, by a WORK connection or by the key that first announced it, no
//  other key may announce, heartbeat or withdraw for it, whatever ids its
//  certificate's patterns cover; otherwise such a key could read the
//  owner's generation off SNAPSHOT and speak for it.
static bool
s_foreign_presence (self_t *self, dsh_presence_t *presence, const dsh_identity_t *peer, const char *command)
{
    dsh_route_t *route = dsh_routes_lookup (self->routes, presence->component);
    const char *owner = self->curve? route && route->key? route->key:
                        (const char *) zhashx_lookup (self->presence_keys, presence->component): NULL;
    if (owner && (!peer->key || !streq (owner, peer->key))) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: key %.8s... sent %s for component %s, whose id key %.8s... owns: dropped",
                         peer->key? peer->key: "?", command, presence->component, owner);
        return true;
    }
    if (!route || !route->generation || presence->generation == route->generation)
        return false;
    if (self->verbose && !streq (command, DSH_HEARTBEAT))
        dsh_log_info ("dsh-broker: %s of %s at generation %" PRIu64 " dropped: the id's owner is at generation %"
                      PRIu64, command, presence->component, presence->generation, route->generation);
    return true;
}

//  A HEARTBEAT: a sign of life, answered on WORK; a component the catalog
//  does not know at that generation is asked to announce again (SYNC).
static void
s_handle_heartbeat (self_t *self, dsh_presence_t *presence)
{
    if (dsh_catalog_touch (self->catalog, presence->component, presence->generation, zclock_mono ()))
        dsh_work_send_sync (self, presence->component);
    else
        dsh_work_send_heartbeat (self, presence->component);
}

//  A WITHDRAW from an older incarnation must not remove a newer one
//  (generations start from the clock, so they grow across restarts), nor
//  one from another process under the id, unheard on WORK, the owner
//  whose connection is open: only the owner's generation, or a newer one
//  once no connection holds the id.
static void
s_handle_withdraw (self_t *self, dsh_presence_t *presence)
{
    dsh_parts_forget (self->parts, presence->component, presence->generation);
    uint64_t generation;
    if (dsh_catalog_generation (self->catalog, presence->component, &generation) == 0
    &&  (presence->generation == generation
         || (presence->generation > generation && !dsh_work_route (self, presence->component))))
        dsh_presence_remove_component (self, presence->component, "withdrawn");
    else
    if (self->verbose)
        dsh_log_info ("dsh-broker: WITHDRAW of %s at generation %" PRIu64 " ignored: not its owner's",
                      presence->component, presence->generation);
}

int
dsh_presence_announce_one (zsock_t *reader, void *arg)
{
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    char error [256] = "";
    zframe_t *protocol = zmsg_pop (msg);
    char *command = zmsg_popstr (msg);
    zframe_t *body = zmsg_pop (msg);
    dsh_doc_t *doc = NULL;
    dsh_presence_t presence;
    if (!protocol || !zframe_streq (protocol, DSH_PROTOCOL) || !command || zmsg_size (msg) != 0)
        snprintf (error, sizeof (error), "want \"%s\", a command and a body", DSH_PROTOCOL);
    else
    if (!streq (command, DSH_ANNOUNCE) && !streq (command, DSH_HEARTBEAT) && !streq (command, DSH_WITHDRAW))
        snprintf (error, sizeof (error), "unknown command \"%.16s\"", command);
    else
    if ((doc = dsh_proto_decode_body (body, error, sizeof (error)))
    &&  dsh_proto_decode_presence (doc, command, &presence, error, sizeof (error)) == 0
    &&  presence.parts > self->max_tools)
        snprintf (error, sizeof (error), "field \"parts\" (%" PRIu64 ") is over the broker's limit of %zu tools "
                  "a component may provide (max_tools)", presence.parts, self->max_tools);

    dsh_identity_t peer = { NULL, NULL, NULL, NULL, NULL, NULL };
    if (protocol)
        dsh_identity_read_frame (&peer, protocol);
    if (*error) {
        self->bad_messages++;
        dsh_log_warning ("dsh-broker: malformed message on the announce socket: %s", error);
    }
    else
    if (self->curve && !dsh_identity_serves (&peer, presence.component)) {
        self->forbidden++;
        dsh_log_warning ("dsh-broker: key %.8s... (role %s) may not speak for component %s: its %s is dropped",
                         peer.key? peer.key: "?", peer.role? peer.role: "none", presence.component, command);
    }
    else
    if (s_foreign_presence (self, &presence, &peer, command)) {
        //  Another process's, under an id it does not own
    }
    else
    if (streq (command, DSH_ANNOUNCE) && presence.parts)
        s_handle_announce_part (self, &presence, &peer);
    else
    if (streq (command, DSH_ANNOUNCE)) {
        //  The whole set, at once: a set of this generation or an older
        //  one still in parts is behind it
        dsh_parts_forget (self->parts, presence.component, presence.generation);
        s_handle_announce (self, &presence, &peer);
    }
    else
    if (streq (command, DSH_HEARTBEAT))
        s_handle_heartbeat (self, &presence);
    else
        s_handle_withdraw (self, &presence);

    dsh_doc_destroy (&doc);
    zframe_destroy (&protocol);
    zframe_destroy (&body);
    zstr_free (&command);
    zmsg_destroy (&msg);
    return 0;
}

int
dsh_presence_announce_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    return dsh_sock_drain (reader, DSH_REGISTRY_BATCH, dsh_presence_announce_one, arg);
}
