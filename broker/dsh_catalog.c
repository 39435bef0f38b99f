/*  =========================================================================
    dsh_catalog - the registry's state: components, tools, change events

    Tools sit in a list in registration order with a hash on name; each
    holds its entry as its first provider announced it (keys in the
    author's order, which is how prompts read it), its canonical bytes
    (dsh_pack_canonical, so that equal entries compare equal whatever their
    key order) and the ids of its providers. Components
    sit in a hash on id with the names they provide, in announce order.
    =========================================================================
*/

#include "dsh_catalog.h"
#include "dsh_store.h"
#include "dsh_pins.h"

//  A component's window (calls sent to it and not yet answered, at most)
//  is its workers (ANNOUNCE's concurrency) plus the calls it answers in
//  S_QUEUED_WORK_MS at the rate it has been answering them, one at least:
//  so about that much work waits in its own queue, whatever a call costs.
//  Fast calls get a deep window (the pipeline stays full: no throughput is
//  lost to the broker's round trip), slow ones a shallow one (a call the
//  broker lets through waits behind little). 20 ms was too tight on a
//  loaded machine: the measured rate dips, and a quarter of the 4 KiB
//  echo calls of a 64-in-flight run were held back.
#define S_QUEUED_WORK_MS        100
#define S_WINDOW_MAX            256
//  The workers assumed of a component that does not say
#define S_CONCURRENCY_DEFAULT   8
//  The weight of the newest rate sample in a component's answer rate
#define S_RATE_WEIGHT           0.5

typedef struct {
    char *name;
    zchunk_t *entry;            //  the tool entry, as announced
    zchunk_t *canonical;        //  its canonical bytes, which replicas must equal
    zlistx_t *providers;        //  char * component ids, in joining order
    void *handle;               //  in self->tool_order
    bool idempotent;            //  annotations.idempotentHint, read once
    char digest [65];           //  SHA-256 of entry, hex; "" until asked for
    //  Pins: the verdict on the entry's definition (dsh_pins)
    const char *quarantine;     //  why it is quarantined (static text), or NULL
    char definition [DSH_DIGEST_SIZE + 1];  //  the entry's definition digest
    char pinned [DSH_DIGEST_SIZE + 1];      //  its pin's, or ""
    zchunk_t *served;           //  the entry with the quarantine marks, or NULL: entry
    char changes [128];         //  quarantined: the definition's keys that changed, or ""
} s_tool_t;

typedef struct {
    char *id;
    uint64_t generation;
    int64_t last_seen_ms;
    zlistx_t *tools;            //  char * names it provides
    size_t outstanding;         //  calls sent to it and not yet answered
    size_t waiting;             //  calls the broker holds for it (dsh_fairq)
    size_t concurrency;         //  calls it runs at once (stated, or the default)
    size_t window;              //  outstanding calls it takes, at most
    size_t answered;            //  calls it finished since paced_ms
    double rate;                //  calls it finishes per second, smoothed
    int64_t paced_ms;           //  when rate was last updated
    int64_t unreachable_ms;     //  when a send to it first failed; 0 once it speaks on WORK
    //  What its last ANNOUNCE said of itself, for an operator (STATS)
    char *host;                 //  or NULL
    char *version;              //  or NULL
    uint64_t pid;               //  or 0
    int64_t started_ms;         //  when it started as its uptimeMs says (zclock_mono), or 0
} s_component_t;

struct _dsh_catalog_t {
    zlistx_t *tool_order;       //  s_tool_t *, registration order, owns them
    zhashx_t *tools;            //  name -> s_tool_t * (borrowed)
    zhashx_t *components;       //  id -> s_component_t *, owns them
    zhashx_t *refused;          //  name -> zlistx of ids refused that name
    zlistx_t *resync;           //  ids to ask for a new announcement
    uint64_t seq;
    uint64_t version;               //  changes with anything a SNAPSHOT shows
    size_t max_tool_bytes;      //  largest canonical entry taken
    size_t max_tools;           //  tools one component may provide
    dsh_pins_t *pins;           //  borrowed; NULL: nothing is judged
    dsh_catalog_key_fn *key_fn; //  a component's CURVE key, for a new pin
    void *key_arg;
};

static void
s_tool_destroy (s_tool_t **self_p)
{
    if (*self_p) {
        s_tool_t *self = *self_p;
        zstr_free (&self->name);
        zchunk_destroy (&self->entry);
        zchunk_destroy (&self->canonical);
        zchunk_destroy (&self->served);
        zlistx_destroy (&self->providers);
        free (self);
        *self_p = NULL;
    }
}

static void
s_component_destroy (s_component_t **self_p)
{
    if (*self_p) {
        s_component_t *self = *self_p;
        zstr_free (&self->id);
        zlistx_destroy (&self->tools);
        zstr_free (&self->host);
        zstr_free (&self->version);
        free (self);
        *self_p = NULL;
    }
}

static zlistx_t *
s_string_list (void)
{
    zlistx_t *list = zlistx_new ();
    zlistx_set_duplicator (list, (zlistx_duplicator_fn *) strdup);
    zlistx_set_destructor (list, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_comparator (list, (zlistx_comparator_fn *) strcmp);
    return list;
}

void
dsh_event_destroy (dsh_event_t **self_p)
{
    if (*self_p) {
        dsh_event_t *self = *self_p;
        zstr_free (&self->component);
        zstr_free (&self->name);
        zstr_free (&self->reason);
        zstr_free (&self->digest);
        zstr_free (&self->pinned);
        zstr_free (&self->diff);
        zstr_free (&self->by);
        zchunk_destroy (&self->tool);
        zlistx_destroy (&self->tools);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_refusal_destroy (dsh_refusal_t **self_p)
{
    if (*self_p) {
        dsh_refusal_t *self = *self_p;
        zstr_free (&self->component);
        zstr_free (&self->name);
        zstr_free (&self->reason);
        free (self);
        *self_p = NULL;
    }
}

zframe_t *
dsh_event_encode (dsh_event_t *self, uint64_t epoch)
{
    assert (self);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 4 + (self->name != NULL) + (self->tool != NULL)
                                    + (self->tools != NULL) + (self->reason != NULL)
                                    + (self->digest != NULL) + (self->pinned != NULL)
                                    + (self->diff != NULL) + (self->by != NULL));
    dsh_pack_cstr (&packer.pk, "seq");
    msgpack_pack_uint64 (&packer.pk, self->seq);
    dsh_pack_cstr (&packer.pk, "epoch");
    msgpack_pack_uint64 (&packer.pk, epoch);
    dsh_packer_kv_str (&packer, "kind", self->kind);
    dsh_packer_kv_str (&packer, "component", self->component);
    if (self->name)
        dsh_packer_kv_str (&packer, "name", self->name);
    if (self->tool) {
        dsh_pack_cstr (&packer.pk, "tool");
        dsh_packer_raw (&packer, zchunk_data (self->tool), zchunk_size (self->tool));
    }
    if (self->tools) {
        dsh_pack_cstr (&packer.pk, "tools");
        msgpack_pack_array (&packer.pk, zlistx_size (self->tools));
        for (char *name = zlistx_first (self->tools); name; name = zlistx_next (self->tools))
            dsh_pack_cstr (&packer.pk, name);
    }
    if (self->reason)
        dsh_packer_kv_str (&packer, "reason", self->reason);
    if (self->digest)
        dsh_packer_kv_str (&packer, "digest", self->digest);
    if (self->pinned)
        dsh_packer_kv_str (&packer, "pinnedDigest", self->pinned);
    if (self->diff)
        dsh_packer_kv_str (&packer, "diff", self->diff);
    if (self->by)
        dsh_packer_kv_str (&packer, "by", self->by);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

dsh_catalog_t *
dsh_catalog_new (void)
{
    dsh_catalog_t *self = (dsh_catalog_t *) zmalloc (sizeof (dsh_catalog_t));
    assert (self);
    self->tool_order = zlistx_new ();
    zlistx_set_destructor (self->tool_order, (zlistx_destructor_fn *) s_tool_destroy);
    self->tools = zhashx_new ();
    self->components = zhashx_new ();
    zhashx_set_destructor (self->components, (zhashx_destructor_fn *) s_component_destroy);
    self->refused = zhashx_new ();
    zhashx_set_destructor (self->refused, (zhashx_destructor_fn *) zlistx_destroy);
    self->resync = s_string_list ();
    self->max_tool_bytes = SIZE_MAX;
    self->max_tools = SIZE_MAX;
    return self;
}

void
dsh_catalog_set_limits (dsh_catalog_t *self, size_t max_tool_bytes, size_t max_tools)
{
    assert (self);
    self->max_tool_bytes = max_tool_bytes;
    self->max_tools = max_tools;
}

void
dsh_catalog_destroy (dsh_catalog_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_catalog_t *self = *self_p;
        zhashx_destroy (&self->tools);
        zlistx_destroy (&self->tool_order);
        zhashx_destroy (&self->components);
        zhashx_destroy (&self->refused);
        zlistx_destroy (&self->resync);
        free (self);
        *self_p = NULL;
    }
}

static dsh_event_t *
s_event_new (dsh_catalog_t *self, const char *kind, const char *component, const char *name)
{
    dsh_event_t *event = (dsh_event_t *) zmalloc (sizeof (dsh_event_t));
    assert (event);
    event->seq = ++self->seq;
    event->kind = kind;
    event->component = strdup (component);
    event->name = name? strdup (name): NULL;
    return event;
}

static void
s_refuse (zlistx_t *refusals, const char *component, const char *name, const char *reason)
{
    dsh_refusal_t *refusal = (dsh_refusal_t *) zmalloc (sizeof (dsh_refusal_t));
    assert (refusal);
    refusal->component = strdup (component);
    refusal->name = name? strdup (name): NULL;
    refusal->reason = strdup (reason);
    zlistx_add_end (refusals, refusal);
}

//  Takes a component off a tool's providers; the tool goes when none is left.
static void
s_drop_provider (dsh_catalog_t *self, s_tool_t *tool, const char *component, zlistx_t *events)
{
    void *handle = zlistx_find (tool->providers, (void *) component);
    if (handle)
        zlistx_delete (tool->providers, handle);
    if (zlistx_size (tool->providers) == 0) {
        //  The name is free again: whoever was refused it may have it now
        zlistx_t *waiting = (zlistx_t *) zhashx_lookup (self->refused, tool->name);
        for (char *id = waiting? zlistx_first (waiting): NULL; id; id = zlistx_next (waiting))
            if (!streq (id, component) && !zlistx_find (self->resync, id))
                zlistx_add_end (self->resync, id);
        zhashx_delete (self->refused, tool->name);
        zlistx_add_end (events, s_event_new (self, DSH_EV_UNREGISTERED, component, tool->name));
        zhashx_delete (self->tools, tool->name);
        zlistx_delete (self->tool_order, tool->handle);
    }
}

//  One entry a component offers: as announced, and canonical.
typedef struct {
    zchunk_t *entry;
    zchunk_t *canonical;
} s_offer_t;

static void
s_offer_destroy (s_offer_t **self_p)
{
    if (*self_p) {
        zchunk_destroy (&(*self_p)->entry);
        zchunk_destroy (&(*self_p)->canonical);
        free (*self_p);
        *self_p = NULL;
    }
}

//  The offer of a tool entry, or NULL if it nests too deep.
static s_offer_t *
s_offer_new (const msgpack_object *entry)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    int rc = dsh_pack_canonical (&packer.pk, entry);
    s_offer_t *offer = NULL;
    if (rc == 0) {
        offer = (s_offer_t *) zmalloc (sizeof (s_offer_t));
        assert (offer);
        offer->canonical = zchunk_new (packer.sbuf.data, packer.sbuf.size);
        packer.sbuf.size = 0;
        msgpack_pack_object (&packer.pk, *entry);
        offer->entry = zchunk_new (packer.sbuf.data, packer.sbuf.size);
    }
    dsh_packer_release (&packer);
    return offer;
}

static bool
s_reads_idempotent (zchunk_t *entry)
{
    char error [64];
    dsh_doc_t *doc = dsh_doc_new (zchunk_data (entry), zchunk_size (entry), error, sizeof (error));
    const msgpack_object *hint = doc? dsh_map_get (dsh_map_get (dsh_doc_root (doc), "annotations"),
                                                   "idempotentHint"): NULL;
    bool idempotent = hint && hint->type == MSGPACK_OBJECT_BOOLEAN && hint->via.boolean;
    dsh_doc_destroy (&doc);
    return idempotent;
}

static bool
s_same_bytes (zchunk_t *left, zchunk_t *right)
{
    return zchunk_size (left) == zchunk_size (right)
        && memcmp (zchunk_data (left), zchunk_data (right), zchunk_size (left)) == 0;
}

//  The entry as served: with the quarantine marks when it is quarantined.
static zchunk_t *
s_served (s_tool_t *tool)
{
    return tool->served? tool->served: tool->entry;
}

//  The entry with the quarantine marks added (PROTOCOL.md, "Pins"): its
//  map header grows, its bytes follow as they are, then the marks.
static zchunk_t *
s_marked (s_tool_t *tool)
{
    const byte *data = zchunk_data (tool->entry);
    size_t size = zchunk_size (tool->entry);
    uint32_t count;
    size_t header;
    if (size && (data [0] & 0xf0) == 0x80) {
        count = data [0] & 0x0f;
        header = 1;
    }
    else
    if (size >= 3 && data [0] == 0xde) {
        count = ((uint32_t) data [1] << 8) | data [2];
        header = 3;
    }
    else {
        assert (size >= 5 && data [0] == 0xdf);
        count = ((uint32_t) data [1] << 24) | ((uint32_t) data [2] << 16) | ((uint32_t) data [3] << 8) | data [4];
        header = 5;
    }
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, count + 3 + (*tool->pinned != 0));
    msgpack_sbuffer_write (&packer.sbuf, (const char *) data + header, size - header);
    dsh_pack_cstr (&packer.pk, "quarantined");
    msgpack_pack_true (&packer.pk);
    dsh_packer_kv_str (&packer, "digest", tool->definition);
    if (*tool->pinned)
        dsh_packer_kv_str (&packer, "pinnedDigest", tool->pinned);
    dsh_packer_kv_str (&packer, "quarantineReason", tool->quarantine);
    zchunk_t *marked = zchunk_new (packer.sbuf.data, packer.sbuf.size);
    dsh_packer_release (&packer);
    return marked;
}

//  Judge the tool's entry against its pin (component offered it). Returns
//  true if what is served changed (quarantined or released, or another
//  pin or reason).
static bool
s_judge (dsh_catalog_t *self, s_tool_t *tool, const char *component)
{
    const char *was = tool->quarantine;
    char was_pinned [DSH_DIGEST_SIZE + 1];
    snprintf (was_pinned, sizeof (was_pinned), "%s", tool->pinned);
    dsh_pins_verdict_t verdict;
    memset (&verdict, 0, sizeof (verdict));
    if (self->pins) {
        char error [64];
        dsh_doc_t *doc = dsh_doc_new (zchunk_data (tool->entry), zchunk_size (tool->entry), error, sizeof (error));
        const char *key = self->key_fn && component? self->key_fn (self->key_arg, component): NULL;
        if (!doc || dsh_pins_judge (self->pins, tool->name, dsh_doc_root (doc), component, key,
                                    zclock_mono (), &verdict)) {
            //  An entry the catalog took is a readable map: never here
            verdict.quarantined = true;
            verdict.reason = DSH_PINS_UNREAD;
        }
        dsh_doc_destroy (&doc);
    }
    tool->quarantine = verdict.quarantined? verdict.reason: NULL;
    snprintf (tool->definition, sizeof (tool->definition), "%s", verdict.digest);
    snprintf (tool->pinned, sizeof (tool->pinned), "%s", tool->quarantine? verdict.pinned: "");
    zchunk_destroy (&tool->served);
    if (tool->quarantine)
        tool->served = s_marked (tool);
    else
        tool->changes [0] = 0;
    return was != tool->quarantine || !streq (was_pinned, tool->pinned);
}

//  The event that says a definition is quarantined, with a diff from its
//  pin: after the event that carries the marked entry.
static void
s_quarantine_event (dsh_catalog_t *self, s_tool_t *tool, const char *component, zlistx_t *events)
{
    dsh_event_t *event = s_event_new (self, DSH_EV_CHANGED, component, tool->name);
    event->reason = strdup (tool->quarantine);
    event->digest = strdup (tool->definition);
    if (*tool->pinned)
        event->pinned = strdup (tool->pinned);
    const dsh_pin_t *pin = self->pins? dsh_pins_lookup (self->pins, tool->name): NULL;
    json_t *pinned = pin && *pin->digest? json_loads (pin->definition, JSON_DECODE_ANY, NULL): NULL;
    char error [64];
    dsh_doc_t *doc = dsh_doc_new (zchunk_data (tool->entry), zchunk_size (tool->entry), error, sizeof (error));
    json_t *offered = doc? dsh_pins_definition_json (dsh_doc_root (doc)): NULL;
    event->diff = dsh_pins_diff (pinned, offered, 16384);
    if (pinned && offered)
        dsh_pins_changed_keys (pinned, offered, tool->changes, sizeof (tool->changes));
    else
        tool->changes [0] = 0;
    json_decref (offered);
    json_decref (pinned);
    dsh_doc_destroy (&doc);
    zlistx_add_end (events, event);
}

//  Applies one validated entry for a component; returns true if the
//  component now provides it. Takes the offer's chunks that it keeps.
static bool
s_apply_tool (dsh_catalog_t *self, const char *component, const char *name, s_offer_t *offer,
              zlistx_t *events, zlistx_t *refusals)
{
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    if (!tool) {
        tool = (s_tool_t *) zmalloc (sizeof (s_tool_t));
        assert (tool);
        tool->name = strdup (name);
        tool->entry = offer->entry;
        tool->canonical = offer->canonical;
        offer->entry = offer->canonical = NULL;
        tool->idempotent = s_reads_idempotent (tool->entry);
        tool->digest [0] = 0;
        tool->providers = s_string_list ();
        zlistx_add_end (tool->providers, (void *) component);
        tool->handle = zlistx_add_end (self->tool_order, tool);
        zhashx_insert (self->tools, name, tool);
        s_judge (self, tool, component);
        dsh_event_t *event = s_event_new (self, DSH_EV_REGISTERED, component, name);
        event->tool = zchunk_dup (s_served (tool));
        zlistx_add_end (events, event);
        if (tool->quarantine)
            s_quarantine_event (self, tool, component, events);
        return true;
    }
    if (s_same_bytes (tool->canonical, offer->canonical)) {
        if (!zlistx_find (tool->providers, (void *) component))
            zlistx_add_end (tool->providers, (void *) component);
        return true;
    }
    bool provides = zlistx_find (tool->providers, (void *) component) != NULL;
    if (provides && zlistx_size (tool->providers) == 1) {
        zchunk_destroy (&tool->entry);
        zchunk_destroy (&tool->canonical);
        tool->entry = offer->entry;
        tool->canonical = offer->canonical;
        offer->entry = offer->canonical = NULL;
        tool->idempotent = s_reads_idempotent (tool->entry);
        tool->digest [0] = 0;
        s_judge (self, tool, component);
        dsh_event_t *event = s_event_new (self, DSH_EV_UPDATED, component, name);
        event->tool = zchunk_dup (s_served (tool));
        zlistx_add_end (events, event);
        if (tool->quarantine)
            s_quarantine_event (self, tool, component, events);
        return true;
    }
    char reason [256 + DSH_NAME_MAX + DSH_ID_MAX];
    zlistx_t *waiting = (zlistx_t *) zhashx_lookup (self->refused, name);
    if (!waiting) {
        waiting = s_string_list ();
        zhashx_insert (self->refused, name, waiting);
    }
    if (!zlistx_find (waiting, (void *) component))
        zlistx_add_end (waiting, (void *) component);
    if (provides) {
        //  Its replicas still serve the old entry: they keep it, this one
        //  stops serving the name until it agrees again.
        s_drop_provider (self, tool, component, events);
        snprintf (reason, sizeof (reason),
                  "tool \"%s\" changed its schema while %zu other replica(s) serve the old one; refused",
                  name, zlistx_size (tool->providers));
    }
    else
        snprintf (reason, sizeof (reason),
                  "tool \"%s\" is already registered by component \"%s\" with a different schema",
                  name, (const char *) zlistx_first (tool->providers));
    s_refuse (refusals, component, name, reason);
    return false;
}

int
dsh_catalog_announce (dsh_catalog_t *self, const char *component, uint64_t generation,
                      const msgpack_object *tools, int64_t now_ms,
                      zlistx_t *events, zlistx_t *refusals)
{
    assert (self);
    assert (component);
    assert (tools && tools->type == MSGPACK_OBJECT_ARRAY);
    assert (events);
    assert (refusals);
    self->version++;

    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    bool joined = record == NULL;
    if (joined) {
        record = (s_component_t *) zmalloc (sizeof (s_component_t));
        assert (record);
        record->id = strdup (component);
        record->tools = s_string_list ();
        record->concurrency = S_CONCURRENCY_DEFAULT;
        record->window = S_CONCURRENCY_DEFAULT + 1;
        record->paced_ms = now_ms;
        zhashx_insert (self->components, component, record);
    }
    record->generation = generation;
    record->last_seen_ms = now_ms;

    //  Names in the new set, checked first so removals can be computed
    zlistx_t *announced = s_string_list ();
    zlistx_t *entries = zlistx_new ();
    zlistx_set_destructor (entries, (zlistx_destructor_fn *) s_offer_destroy);
    for (uint32_t index = 0; index < tools->via.array.size; index++) {
        const msgpack_object *entry = &tools->via.array.ptr [index];
        char error [256 + DSH_NAME_MAX];
        if (dsh_proto_check_tool (entry, error, sizeof (error))) {
            //  The component is told which tool, whenever its name is readable
            const msgpack_object *readable = dsh_map_get (entry, "name");
            char name [DSH_NAME_MAX + 1];
            bool named = readable && readable->type == MSGPACK_OBJECT_STR
                      && dsh_proto_valid_name (readable->via.str.ptr, readable->via.str.size);
            if (named) {
                memcpy (name, readable->via.str.ptr, readable->via.str.size);
                name [readable->via.str.size] = 0;
            }
            s_refuse (refusals, component, named? name: NULL, error);
            continue;
        }
        const msgpack_object *name_obj = dsh_map_get (entry, "name");
        char name [DSH_NAME_MAX + 1];
        memcpy (name, name_obj->via.str.ptr, name_obj->via.str.size);
        name [name_obj->via.str.size] = 0;
        if (zlistx_find (announced, name)) {
            snprintf (error, sizeof (error), "tool \"%s\" is announced twice; the first is kept", name);
            s_refuse (refusals, component, name, error);
            continue;
        }
        s_offer_t *offer = s_offer_new (entry);
        if (!offer) {
            s_refuse (refusals, component, name, "tool entry nests too deep");
            continue;
        }
        if (zchunk_size (offer->canonical) > self->max_tool_bytes) {
            snprintf (error, sizeof (error), "tool \"%s\" is %zu bytes, over the broker's %zu-byte limit "
                      "on a tool entry (max_tool_bytes)", name, zchunk_size (offer->canonical),
                      self->max_tool_bytes);
            s_offer_destroy (&offer);
            s_refuse (refusals, component, name, error);
            continue;
        }
        if (zlistx_size (announced) >= self->max_tools) {
            snprintf (error, sizeof (error), "tool \"%s\" is over the broker's limit of %zu tools "
                      "a component may provide (max_tools)", name, self->max_tools);
            s_offer_destroy (&offer);
            s_refuse (refusals, component, name, error);
            continue;
        }
        zlistx_add_end (announced, name);
        zlistx_add_end (entries, offer);
    }

    //  Tools it no longer announces; deleting at the cursor moves it back
    //  one, so the next zlistx_next is still the following name
    char *name;
    for (name = (char *) zlistx_first (record->tools); name; name = (char *) zlistx_next (record->tools)) {
        if (!zlistx_find (announced, name)) {
            s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
            if (tool)
                s_drop_provider (self, tool, component, events);
            zlistx_delete (record->tools, zlistx_cursor (record->tools));
        }
    }
    //  Tools it announces, in its order
    s_offer_t *offer = (s_offer_t *) zlistx_first (entries);
    for (name = (char *) zlistx_first (announced); name; name = (char *) zlistx_next (announced)) {
        bool provides = s_apply_tool (self, component, name, offer, events, refusals);
        void *known = zlistx_find (record->tools, name);
        if (provides && !known)
            zlistx_add_end (record->tools, name);
        else
        if (!provides && known)
            zlistx_delete (record->tools, known);
        offer = (s_offer_t *) zlistx_next (entries);
    }
    zlistx_destroy (&entries);
    zlistx_destroy (&announced);

    if (joined) {
        dsh_event_t *event = s_event_new (self, DSH_EV_JOINED, component, NULL);
        event->tools = zlistx_dup (record->tools);
        zlistx_add_end (events, event);
    }
    return 0;
}

int
dsh_catalog_touch (dsh_catalog_t *self, const char *component, uint64_t generation, int64_t now_ms)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return 1;
    record->last_seen_ms = now_ms;
    //  A heartbeat on the announce channel says nothing of the WORK route:
    //  an unreachable component stays so until it speaks on WORK
    return record->generation == generation? 0: 1;
}

int
dsh_catalog_generation (dsh_catalog_t *self, const char *component, uint64_t *generation)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return -1;
    *generation = record->generation;
    return 0;
}

zlistx_t *
dsh_catalog_take_resync (dsh_catalog_t *self)
{
    assert (self);
    zlistx_t *resync = self->resync;
    self->resync = s_string_list ();
    return resync;
}

int
dsh_catalog_seen (dsh_catalog_t *self, const char *component, int64_t now_ms)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return -1;
    record->last_seen_ms = now_ms;
    record->unreachable_ms = 0;
    return 0;
}

int
dsh_catalog_remove (dsh_catalog_t *self, const char *component, const char *reason, zlistx_t *events)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return -1;
    self->version++;
    for (char *name = zlistx_first (record->tools); name; name = zlistx_next (record->tools)) {
        s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
        if (tool)
            s_drop_provider (self, tool, component, events);
    }
    dsh_event_t *event = s_event_new (self, DSH_EV_LEFT, component, NULL);
    event->tools = zlistx_dup (record->tools);
    event->reason = strdup (reason);
    zlistx_add_end (events, event);
    zhashx_delete (self->components, component);
    return 0;
}

void
dsh_catalog_refuse_id (dsh_catalog_t *self, const char *component, const char *reason, zlistx_t *events)
{
    assert (self);
    dsh_event_t *event = s_event_new (self, DSH_EV_REFUSED, component, NULL);
    event->reason = strdup (reason);
    zlistx_add_end (events, event);
}

zlistx_t *
dsh_catalog_silent (dsh_catalog_t *self, int64_t now_ms, int64_t silence_ms)
{
    assert (self);
    zlistx_t *silent = s_string_list ();
    for (s_component_t *record = zhashx_first (self->components); record;
         record = zhashx_next (self->components))
        if (now_ms - record->last_seen_ms > silence_ms
        ||  (record->unreachable_ms && now_ms - record->unreachable_ms > silence_ms))
            zlistx_add_end (silent, record->id);
    return silent;
}

zchunk_t *
dsh_catalog_tool (dsh_catalog_t *self, const char *name)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    return tool? s_served (tool): NULL;
}

void
dsh_catalog_set_pins (dsh_catalog_t *self, dsh_pins_t *pins, dsh_catalog_key_fn *key_fn, void *key_arg)
{
    assert (self);
    self->pins = pins;
    self->key_fn = key_fn;
    self->key_arg = key_arg;
}

const char *
dsh_catalog_quarantine (dsh_catalog_t *self, const char *name, const char **digest, const char **pinned)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    if (!tool || !tool->quarantine)
        return NULL;
    if (digest)
        *digest = tool->definition;
    if (pinned)
        *pinned = tool->pinned;
    return tool->quarantine;
}

void
dsh_catalog_rejudge (dsh_catalog_t *self, const char *name, zlistx_t *events)
{
    assert (self);
    assert (events);
    for (s_tool_t *tool = zlistx_first (self->tool_order); tool; tool = zlistx_next (self->tool_order)) {
        if (name && !streq (name, tool->name))
            continue;
        const char *component = (const char *) zlistx_first (tool->providers);
        if (!s_judge (self, tool, component))
            continue;
        self->version++;
        dsh_event_t *event = s_event_new (self, DSH_EV_UPDATED, component, tool->name);
        event->tool = zchunk_dup (s_served (tool));
        zlistx_add_end (events, event);
        if (tool->quarantine)
            s_quarantine_event (self, tool, component, events);
    }
}

zlistx_t *
dsh_catalog_quarantined (dsh_catalog_t *self)
{
    assert (self);
    zlistx_t *names = s_string_list ();
    for (s_tool_t *tool = zlistx_first (self->tool_order); tool; tool = zlistx_next (self->tool_order))
        if (tool->quarantine)
            zlistx_add_end (names, tool->name);
    return names;
}

const char *
dsh_catalog_owner (dsh_catalog_t *self, const char *name)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    return tool? (const char *) zlistx_first (tool->providers): NULL;
}

const char *
dsh_catalog_quarantine_changes (dsh_catalog_t *self, const char *name)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    return tool && tool->quarantine? tool->changes: "";
}

dsh_event_t *
dsh_catalog_event (dsh_catalog_t *self, const char *kind, const char *name)
{
    assert (self);
    return s_event_new (self, kind, "", name);
}

const char *
dsh_catalog_tool_digest (dsh_catalog_t *self, const char *name)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    if (!tool)
        return NULL;
    if (!tool->digest [0]) {
        //  Once per entry: the audit names the definition each call ran under
        dsh_store_sha256 (zchunk_data (tool->entry), zchunk_size (tool->entry), tool->digest);
    }
    return tool->digest;
}

bool
dsh_catalog_idempotent (dsh_catalog_t *self, const char *name)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    return tool && tool->idempotent;
}

const char *
dsh_catalog_provider (dsh_catalog_t *self, const char *name, const char *except)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    if (!tool)
        return NULL;
    const char *best = NULL;
    size_t best_load = SIZE_MAX;
    bool best_reachable = false;
    bool best_room = false;
    for (char *id = zlistx_first (tool->providers); id; id = zlistx_next (tool->providers)) {
        if (except && streq (id, except))
            continue;
        s_component_t *record = (s_component_t *) zhashx_lookup (self->components, id);
        //  Its load counts the calls held for it, so held calls spread over
        //  the replicas as sent ones do
        size_t load = record? record->outstanding + record->waiting: SIZE_MAX - 1;
        bool reachable = record && !record->unreachable_ms;
        bool room = record && record->outstanding < record->window;
        if ((reachable && !best_reachable)
        ||  (reachable == best_reachable && room && !best_room)
        ||  (reachable == best_reachable && room == best_room && load < best_load)) {
            best = id;
            best_load = load;
            best_reachable = reachable;
            best_room = room;
        }
    }
    return best;
}

bool
dsh_catalog_reachable (dsh_catalog_t *self, const char *component)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    return record && !record->unreachable_ms;
}

void
dsh_catalog_unreachable (dsh_catalog_t *self, const char *component, int64_t now_ms)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (record && !record->unreachable_ms)
        record->unreachable_ms = now_ms? now_ms: 1;
}

void
dsh_catalog_outstanding (dsh_catalog_t *self, const char *component, int delta)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return;
    if (delta < 0) {
        size_t finished = record->outstanding < (size_t) -delta? record->outstanding: (size_t) -delta;
        record->outstanding -= finished;
        record->answered += finished;
    }
    else
        record->outstanding += delta;
}

void
dsh_catalog_waiting (dsh_catalog_t *self, const char *component, int delta)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return;
    if (delta < 0 && record->waiting < (size_t) -delta)
        record->waiting = 0;
    else
        record->waiting += delta;
}

//  The window from the concurrency and the answer rate.
static void
s_set_window (s_component_t *record)
{
    double work = record->rate * S_QUEUED_WORK_MS / 1000.0;
    size_t queued = work < 1? 1: work >= S_WINDOW_MAX? S_WINDOW_MAX: (size_t) work + 1;
    size_t window = record->concurrency + queued;
    //  A component with more workers than the cap still gets them all busy
    size_t most = record->concurrency + 1 > S_WINDOW_MAX? record->concurrency + 1: S_WINDOW_MAX;
    record->window = window < most? window: most;
}

void
dsh_catalog_pace (dsh_catalog_t *self, int64_t now_ms)
{
    assert (self);
    for (s_component_t *record = (s_component_t *) zhashx_first (self->components); record;
         record = (s_component_t *) zhashx_next (self->components)) {
        int64_t elapsed_ms = now_ms - record->paced_ms;
        if (elapsed_ms <= 0)
            continue;
        double sample = (double) record->answered * 1000.0 / (double) elapsed_ms;
        record->rate = record->rate * (1 - S_RATE_WEIGHT) + sample * S_RATE_WEIGHT;
        record->answered = 0;
        record->paced_ms = now_ms;
        s_set_window (record);
    }
}

void
dsh_catalog_set_concurrency (dsh_catalog_t *self, const char *component, size_t concurrency)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (record) {
        record->concurrency = concurrency? concurrency: S_CONCURRENCY_DEFAULT;
        s_set_window (record);
    }
}

bool
dsh_catalog_has_room (dsh_catalog_t *self, const char *component)
{
    assert (self);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    return !record || record->outstanding < record->window;
}

void
dsh_catalog_pack_tools (dsh_catalog_t *self, msgpack_packer *pk)
{
    assert (self);
    msgpack_pack_array (pk, zlistx_size (self->tool_order));
    for (s_tool_t *tool = zlistx_first (self->tool_order); tool; tool = zlistx_next (self->tool_order))
        msgpack_sbuffer_write (pk->data, (const char *) zchunk_data (s_served (tool)), zchunk_size (s_served (tool)));
}

static void
s_pack_names (msgpack_packer *pk, zlistx_t *names)
{
    msgpack_pack_array (pk, zlistx_size (names));
    for (char *name = zlistx_first (names); name; name = zlistx_next (names))
        dsh_pack_cstr (pk, name);
}

void
dsh_catalog_pack_snapshot (dsh_catalog_t *self, msgpack_packer *pk)
{
    assert (self);
    dsh_pack_cstr (pk, "tools");
    msgpack_pack_array (pk, zlistx_size (self->tool_order));
    for (s_tool_t *tool = zlistx_first (self->tool_order); tool; tool = zlistx_next (self->tool_order)) {
        msgpack_pack_map (pk, 2);
        dsh_pack_cstr (pk, "tool");
        msgpack_sbuffer_write (pk->data, (const char *) zchunk_data (s_served (tool)), zchunk_size (s_served (tool)));
        dsh_pack_cstr (pk, "providers");
        s_pack_names (pk, tool->providers);
    }
    //  Components in id order, so that two snapshots of one state are equal
    zlistx_t *ids = dsh_catalog_component_ids (self);
    dsh_pack_cstr (pk, "components");
    msgpack_pack_array (pk, zlistx_size (ids));
    for (char *id = zlistx_first (ids); id; id = zlistx_next (ids)) {
        s_component_t *record = (s_component_t *) zhashx_lookup (self->components, id);
        msgpack_pack_map (pk, 3);
        dsh_pack_cstr (pk, "id");
        dsh_pack_cstr (pk, record->id);
        dsh_pack_cstr (pk, "generation");
        msgpack_pack_uint64 (pk, record->generation);
        dsh_pack_cstr (pk, "tools");
        s_pack_names (pk, record->tools);
    }
    zlistx_destroy (&ids);
}

void
dsh_catalog_pack_providers (dsh_catalog_t *self, const char *name, msgpack_packer *pk)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    if (tool)
        s_pack_names (pk, tool->providers);
    else
        msgpack_pack_array (pk, 0);
}

size_t
dsh_catalog_replicas (dsh_catalog_t *self, const char *name)
{
    assert (self);
    s_tool_t *tool = (s_tool_t *) zhashx_lookup (self->tools, name);
    return tool? zlistx_size (tool->providers): 0;
}

zlistx_t *
dsh_catalog_tool_names (dsh_catalog_t *self)
{
    assert (self);
    zlistx_t *names = zlistx_new ();
    for (s_tool_t *tool = zlistx_first (self->tool_order); tool; tool = zlistx_next (self->tool_order))
        zlistx_add_end (names, tool->name);
    return names;
}

zlistx_t *
dsh_catalog_component_ids (dsh_catalog_t *self)
{
    assert (self);
    zlistx_t *ids = zhashx_keys (self->components);
    zlistx_set_comparator (ids, (zlistx_comparator_fn *) strcmp);
    zlistx_sort (ids);
    return ids;
}

void
dsh_catalog_set_details (dsh_catalog_t *self, const char *component, const dsh_presence_t *presence,
                         int64_t now_ms)
{
    assert (self);
    assert (presence);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return;
    zstr_free (&record->host);
    zstr_free (&record->version);
    record->host = presence->host? strdup (presence->host): NULL;
    record->version = presence->version? strdup (presence->version): NULL;
    record->pid = presence->pid;
    //  A start on our clock: the component's may be another host's
    record->started_ms = presence->has_uptime? now_ms - (int64_t) presence->uptime_ms: 0;
}

void
dsh_catalog_pack_details (dsh_catalog_t *self, const char *component, dsh_packer_t *packer, int64_t now_ms)
{
    assert (self);
    assert (packer);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return;
    msgpack_packer *pk = &packer->pk;
    dsh_pack_cstr (pk, "workers");
    msgpack_pack_uint64 (pk, record->concurrency);
    dsh_pack_cstr (pk, "queued");
    msgpack_pack_uint64 (pk, record->waiting);
    if (record->host)
        dsh_packer_kv_str (packer, "host", record->host);
    if (record->pid) {
        dsh_pack_cstr (pk, "pid");
        msgpack_pack_uint64 (pk, record->pid);
    }
    if (record->version)
        dsh_packer_kv_str (packer, "version", record->version);
    if (record->started_ms) {
        dsh_pack_cstr (pk, "uptimeMs");
        msgpack_pack_uint64 (pk, (uint64_t) (now_ms > record->started_ms? now_ms - record->started_ms: 0));
    }
}

int
dsh_catalog_component_load (dsh_catalog_t *self, const char *component, size_t *outstanding,
                            int64_t *last_seen_ms)
{
    assert (self);
    assert (outstanding && last_seen_ms);
    s_component_t *record = (s_component_t *) zhashx_lookup (self->components, component);
    if (!record)
        return -1;
    *outstanding = record->outstanding;
    *last_seen_ms = record->last_seen_ms;
    return 0;
}

uint64_t
dsh_catalog_seq (dsh_catalog_t *self)
{
    assert (self);
    return self->seq;
}

uint64_t
dsh_catalog_version (dsh_catalog_t *self)
{
    assert (self);
    return self->version;
}

size_t
dsh_catalog_tool_count (dsh_catalog_t *self)
{
    assert (self);
    return zlistx_size (self->tool_order);
}

size_t
dsh_catalog_component_count (dsh_catalog_t *self)
{
    assert (self);
    return zhashx_size (self->components);
}
