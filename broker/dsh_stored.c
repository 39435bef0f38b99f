/*  =========================================================================
    dsh_stored - the state kept in the store: modes, grants, pins

    Part of the registry actor (dsh_registry.c; state in
    dsh_registry_priv.h). What `dsh mode`, a grant or a revoke changes
    here is written to the store (through the audit), and what the audit's
    reader sends back (the stored modes, grants and pins, changed by any
    broker on the store) is applied to the stages and the catalog; a
    change made here stands against the stored state for a few seconds,
    while its own write lands.
    =========================================================================
*/

#include "dsh_registry_priv.h"

//  How long a change made here (a mode) stands against the stored state,
//  while its own write lands; pins and the permission stage's grants keep
//  theirs as long (a revoked grant 3 s)
#define S_LOCAL_MS          2000
//  How long after the stored state last came it is applied again: past
//  the longest of those windows
#define S_STORED_AGAIN_MS   3500
//  Packs {command: "mode", args: {agent?, mode}}: what a plan stage is
//  told to set an agent's mode ("" is the default for every agent).
static zframe_t *
s_mode_command (const char *agent, const char *mode)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "command", "mode");
    dsh_pack_cstr (&packer.pk, "args");
    dsh_packer_map_begin (&packer);
    if (*agent)
        dsh_packer_kv_str (&packer, "agent", agent);
    dsh_packer_kv_str (&packer, "mode", mode);
    dsh_packer_map_end (&packer);
    dsh_packer_map_end (&packer);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

//  `dsh mode` on a plan stage is kept in the store: it survives a restart,
//  and every broker on the same store follows it.
void
dsh_stored_keep_mode (self_t *self, const msgpack_object *stage, const msgpack_object *command,
                      const msgpack_object *args, const char *caller)
{
    if (!self->audit || !dsh_str_eq (command, "mode"))
        return;
    char name [DSH_NAME_MAX + 1];
    if (stage->via.str.size > DSH_NAME_MAX)
        return;
    memcpy (name, stage->via.str.ptr, stage->via.str.size);
    name [stage->via.str.size] = 0;
    const char *kind = dsh_chain_kind (self->chain, name);
    if (!kind || !streq (kind, "plan"))
        return;
    const msgpack_object *agent = dsh_map_get (args, "agent");
    const msgpack_object *mode = dsh_map_get (args, "mode");
    if ((agent && (agent->type != MSGPACK_OBJECT_STR || agent->via.str.size > DSH_ID_MAX))
    ||  !(dsh_str_eq (mode, "plan") || dsh_str_eq (mode, "normal")))
        return;             //  the stage refuses it: nothing to keep
    char agent_id [DSH_ID_MAX + 1] = "";
    if (agent) {
        memcpy (agent_id, agent->via.str.ptr, agent->via.str.size);
        agent_id [agent->via.str.size] = 0;
    }
    dsh_audit_mode_set (self->audit, agent_id, dsh_str_eq (mode, "plan")? "plan": "normal", caller);
    zhashx_update (self->stored.modes_set, agent_id, zsys_sprintf ("%" PRId64, zclock_mono ()));
}

//  A grant revoked on a permission stage is revoked in the store as well:
//  no broker on the store lets it through again.
void
dsh_stored_keep_revoke (self_t *self, const msgpack_object *stage, const msgpack_object *command,
                        const msgpack_object *args)
{
    if (!self->audit || !dsh_str_eq (command, "revoke") || stage->via.str.size > DSH_NAME_MAX)
        return;
    char name [DSH_NAME_MAX + 1];
    memcpy (name, stage->via.str.ptr, stage->via.str.size);
    name [stage->via.str.size] = 0;
    const char *kind = dsh_chain_kind (self->chain, name);
    const msgpack_object *id = dsh_map_get (args, "id");
    if (!kind || !streq (kind, "permission") || !id || id->type != MSGPACK_OBJECT_STR || id->via.str.size > 64)
        return;
    char grant [65];
    memcpy (grant, id->via.str.ptr, id->via.str.size);
    grant [id->via.str.size] = 0;
    dsh_audit_grant_revoke (self->audit, grant);
}

//  A built-in stage's note on a call: a grant an approver gave is kept in
//  the store, so it outlives this broker and reaches the others on it.
void
dsh_stored_chain_note (void *arg, const char *stage, json_t *note)
{
    self_t *self = (self_t *) arg;
    json_t *grant = json_object_get (json_object_get (note, "approval"), "grant");
    const char *id = json_string_value (json_object_get (grant, "id"));
    json_int_t expires = json_integer_value (json_object_get (grant, "expiresMs"));
    if (!self->audit || !json_is_object (grant) || !id || expires <= 0)
        return;
    char *text = json_dumps (grant, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (text)
        dsh_audit_grant_keep (self->audit, id, stage, text, (int64_t) expires);
    free (text);
}

//  The stored grants (a packed array of grant maps), handed to every
//  permission stage: at start, and when another broker on the store made
//  or revoked one.
void
dsh_stored_apply_grants (self_t *self, zframe_t *frame)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "command", "grants.load");
    dsh_pack_cstr (&packer.pk, "args");
    dsh_packer_map_begin (&packer);
    dsh_pack_cstr (&packer.pk, "grants");
    dsh_packer_raw (&packer, zframe_data (frame), zframe_size (frame));
    dsh_packer_map_end (&packer);
    dsh_packer_map_end (&packer);
    zframe_t *command = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_chain_apply (self->chain, "permission", command);
    zframe_destroy (&command);
}

//  The stored pins (a packed array of pins), loaded, and every tool
//  judged again: what another broker on the store pinned, accepted or
//  forgot holds here too.
static void
s_apply_pins (self_t *self, zframe_t *frame)
{
    if (!self->pins)
        return;
    //  An array, not a message body (dsh_proto_decode_body wants a map)
    char reason [128];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), reason, sizeof (reason));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    if (!root || root->type != MSGPACK_OBJECT_ARRAY) {
        dsh_doc_destroy (&doc);
        return;
    }
    zlistx_t *pins = zlistx_new ();
    zlistx_set_destructor (pins, (zlistx_destructor_fn *) dsh_pin_destroy);
    for (uint32_t index = 0; index < root->via.array.size; index++) {
        const msgpack_object *item = &root->via.array.ptr [index];
        //  Strings copied in the document's zone, freed with it
        const char *name = dsh_doc_strdup (doc, dsh_map_get (item, "name"));
        if (!name)
            continue;
        dsh_pin_t *pin = dsh_pin_new (name);
        const char *text = dsh_doc_strdup (doc, dsh_map_get (item, "digest"));
        snprintf (pin->digest, sizeof (pin->digest), "%s", text? text: "");
        text = dsh_doc_strdup (doc, dsh_map_get (item, "rejected"));
        snprintf (pin->rejected, sizeof (pin->rejected), "%s", text? text: "");
        char **fields [] = { &pin->definition, &pin->component, &pin->key, &pin->accepted_by };
        const char *keys [] = { "definition", "component", "key", "acceptedBy" };
        for (size_t field = 0; field < 4; field++) {
            const char *value = dsh_doc_strdup (doc, dsh_map_get (item, keys [field]));
            if (value) {
                zstr_free (fields [field]);
                *fields [field] = strdup (value);
            }
        }
        const msgpack_object *first = dsh_map_get (item, "firstMs");
        const msgpack_object *accepted = dsh_map_get (item, "acceptedMs");
        pin->first_ms = first && first->type == MSGPACK_OBJECT_POSITIVE_INTEGER? (int64_t) first->via.u64: 0;
        pin->accepted_ms = accepted && accepted->type == MSGPACK_OBJECT_POSITIVE_INTEGER?
                           (int64_t) accepted->via.u64: 0;
        zlistx_add_end (pins, pin);
    }
    dsh_doc_destroy (&doc);
    dsh_pins_load (self->pins, &pins, zclock_mono ());
    zlistx_t *events = zlistx_new ();
    zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
    dsh_catalog_rejudge (self->catalog, NULL, events);
    dsh_registry_publish (self, events);
    zlistx_destroy (&events);
}

//  The stored modes (a packed map agent -> mode), applied to the plan
//  stages: at start, and when another broker on the store changed one. A
//  mode set here in the last few seconds stands until the store has it.
void
dsh_stored_apply_modes (self_t *self, zframe_t *frame)
{
    char reason [128];
    dsh_doc_t *doc = dsh_proto_decode_body (frame, reason, sizeof (reason));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    for (uint32_t index = 0; root && root->type == MSGPACK_OBJECT_MAP && index < root->via.map.size; index++) {
        const msgpack_object *key = &root->via.map.ptr [index].key;
        const msgpack_object *value = &root->via.map.ptr [index].val;
        if (key->type != MSGPACK_OBJECT_STR || key->via.str.size > DSH_ID_MAX || value->type != MSGPACK_OBJECT_STR)
            continue;
        char agent [DSH_ID_MAX + 1];
        memcpy (agent, key->via.str.ptr, key->via.str.size);
        agent [key->via.str.size] = 0;
        const char *set = (const char *) zhashx_lookup (self->stored.modes_set, agent);
        if (set && zclock_mono () - strtoll (set, NULL, 10) < S_LOCAL_MS)
            continue;
        zframe_t *command = s_mode_command (agent, dsh_str_eq (value, "plan")? "plan": "normal");
        dsh_chain_apply (self->chain, "plan", command);
        zframe_destroy (&command);
    }
    dsh_doc_destroy (&doc);
}

//  The stored state, as the reader last sent it, applied.
static void
s_apply_stored (self_t *self, int which)
{
    if (!self->stored.frames [which])
        return;
    if (which == 0)
        dsh_stored_apply_modes (self, self->stored.frames [which]);
    else
    if (which == 1)
        s_apply_pins (self, self->stored.frames [which]);
    else
        dsh_stored_apply_grants (self, self->stored.frames [which]);
}

//  A change made here stands against the stored state for a few seconds
//  (a mode, a pin or a grant made 2 s, a grant revoked 3 s), while its
//  own write lands; the reader sends the stored state only when it changes,
//  so what it sent meanwhile is applied again once those windows passed:
//  else a change another broker made in them would never hold here.
int
dsh_stored_again (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    for (int which = 0; which < 3; which++)
        if (self->stored.due [which] && zclock_mono () >= self->stored.due [which]) {
            self->stored.due [which] = 0;
            s_apply_stored (self, which);
        }
    return 0;
}

//  The audit's reader: a query's reply to send on FRONT, or the stored
//  state (modes, pins, grants).
int
dsh_stored_audit_recv (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    char *command = zmsg_popstr (msg);
    zframe_t *body = zmsg_pop (msg);
    int which = !command || !body? -1: streq (command, "MODES")? 0: streq (command, "PINS")? 1:
                streq (command, "GRANTS")? 2: -1;
    if (which >= 0) {
        zframe_destroy (&self->stored.frames [which]);
        self->stored.frames [which] = body;
        body = NULL;
        s_apply_stored (self, which);
        self->stored.due [which] = zclock_mono () + S_STORED_AGAIN_MS;
    }
    else
    if (command && body && (streq (command, "REPLY") || streq (command, "ERROR"))) {
        //  What is left is the envelope
        zmsg_t *envelope = msg;
        msg = NULL;
        dsh_dispatch_send_front (self, &envelope, streq (command, "REPLY")? DSH_AUDIT: DSH_ERROR, &body);
    }
    zframe_destroy (&body);
    zstr_free (&command);
    zmsg_destroy (&msg);
    return 0;
}
