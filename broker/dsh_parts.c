/*  =========================================================================
    dsh_parts - tool sets announced in parts, held until they are whole

    One assembly per component id, in a table: the set's generation, its
    count of parts, the key its first part came from, and per part a slot
    with that part's entries packed end to end. What an assembly holds is
    counted in bytes as it grows (the slots as soon as it begins, since a
    part's parts alone would make the broker allocate them), so every bound
    is checked before the memory it bounds is taken.
    =========================================================================
*/

#include "dsh_parts.h"

//  One part's entries, packed end to end.
typedef struct {
    bool arrived;
    uint32_t count;             //  its entries
    char *data;                 //  their bytes, or NULL if none (or joined)
    size_t size;
} s_slice_t;

typedef struct {
    char *component;
    char *key;                  //  the key its first part came from, or NULL
    uint64_t generation;
    uint64_t concurrency;       //  part 0's, once it came
    uint32_t parts;
    uint32_t arrived;           //  parts that came
    size_t entries;             //  entries in them
    s_slice_t *slices;          //  [parts]
    size_t entry_bytes;         //  their entries' bytes, against max_set_bytes
    size_t bytes;               //  all it holds, against max_total_bytes
    int64_t begun_ms;
} s_assembly_t;

struct _dsh_parts_t {
    size_t max_set_bytes;
    size_t max_total_bytes;
    zhashx_t *assemblies;       //  component id -> s_assembly_t *, owns them
    size_t bytes;               //  what they all hold
};

static void
s_assembly_destroy (s_assembly_t **self_p)
{
    if (*self_p) {
        s_assembly_t *self = *self_p;
        for (uint32_t index = 0; index < self->parts; index++)
            free (self->slices [index].data);
        free (self->slices);
        zstr_free (&self->component);
        zstr_free (&self->key);
        free (self);
        *self_p = NULL;
    }
}

//  What an assembly of parts parts takes before any entry: its record, its
//  strings and its slots.
static size_t
s_assembly_overhead (const char *component, const char *key, uint64_t parts)
{
    return sizeof (s_assembly_t) + strlen (component) + 1 + (key? strlen (key) + 1: 0)
         + (size_t) parts * sizeof (s_slice_t);
}

static s_assembly_t *
s_assembly_new (const dsh_presence_t *presence, const char *key, int64_t now_ms)
{
    s_assembly_t *self = (s_assembly_t *) zmalloc (sizeof (s_assembly_t));
    assert (self);
    self->component = strdup (presence->component);
    self->key = key? strdup (key): NULL;
    self->generation = presence->generation;
    self->parts = (uint32_t) presence->parts;
    self->slices = (s_slice_t *) zmalloc ((size_t) self->parts * sizeof (s_slice_t));
    assert (self->slices);
    self->bytes = s_assembly_overhead (presence->component, key, presence->parts);
    self->begun_ms = now_ms;
    return self;
}

dsh_parts_t *
dsh_parts_new (size_t max_set_bytes, size_t max_total_bytes)
{
    dsh_parts_t *self = (dsh_parts_t *) zmalloc (sizeof (dsh_parts_t));
    assert (self);
    //  A msgpack array counts its entries in 32 bits, and an entry takes a
    //  byte at least: within these bounds a whole set's count fits
    self->max_set_bytes = max_set_bytes < UINT32_MAX? max_set_bytes: UINT32_MAX;
    self->max_total_bytes = max_total_bytes < UINT32_MAX? max_total_bytes: UINT32_MAX;
    self->assemblies = zhashx_new ();
    zhashx_set_destructor (self->assemblies, (zhashx_destructor_fn *) s_assembly_destroy);
    return self;
}

void
dsh_parts_destroy (dsh_parts_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_parts_t *self = *self_p;
        zhashx_destroy (&self->assemblies);
        free (self);
        *self_p = NULL;
    }
}

static void
s_drop (dsh_parts_t *self, s_assembly_t *assembly)
{
    assert (self->bytes >= assembly->bytes);
    self->bytes -= assembly->bytes;
    zhashx_delete (self->assemblies, assembly->component);
}

static dsh_parts_status_t
s_status (dsh_parts_status_t status, char *reason, size_t reason_size, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    vsnprintf (reason, reason_size, format, args);
    va_end (args);
    return status;
}

//  The set whole: an array header and every part's entries in part order,
//  each part's bytes freed once copied.
static zchunk_t *
s_join (s_assembly_t *assembly)
{
    msgpack_sbuffer header;
    msgpack_sbuffer_init (&header);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &header, msgpack_sbuffer_write);
    msgpack_pack_array (&pk, (uint32_t) assembly->entries);
    zchunk_t *set = zchunk_new (NULL, header.size + assembly->entry_bytes);
    assert (set);
    zchunk_append (set, header.data, header.size);
    msgpack_sbuffer_destroy (&header);
    for (uint32_t index = 0; index < assembly->parts; index++) {
        s_slice_t *slice = &assembly->slices [index];
        if (slice->data)
            zchunk_append (set, slice->data, slice->size);
        free (slice->data);
        slice->data = NULL;
    }
    return set;
}

dsh_parts_status_t
dsh_parts_add (dsh_parts_t *self, const dsh_presence_t *presence, const char *key, int64_t now_ms,
               zchunk_t **set_p, uint64_t *concurrency, char *reason, size_t reason_size)
{
    assert (self);
    assert (presence && presence->tools && presence->tools->type == MSGPACK_OBJECT_ARRAY);
    assert (presence->parts >= 2 && presence->parts <= UINT32_MAX && presence->part < presence->parts);
    assert (set_p && concurrency && reason && reason_size);
    *set_p = NULL;
    *concurrency = 0;
    *reason = '\0';
    uint32_t part = (uint32_t) presence->part;
    s_assembly_t *assembly = (s_assembly_t *) zhashx_lookup (self->assemblies, presence->component);
    if (assembly && presence->generation < assembly->generation)
        return s_status (DSH_PARTS_IGNORED, reason, reason_size,
                         "part %" PRIu32 " at generation %" PRIu64 " is older than the set in parts at generation %"
                         PRIu64, part, presence->generation, assembly->generation);
    if (assembly && presence->generation == assembly->generation) {
        if ((key == NULL) != (assembly->key == NULL) || (key && !streq (key, assembly->key)))
            return s_status (DSH_PARTS_FOREIGN, reason, reason_size,
                             "part %" PRIu32 " comes from key %.8s..., the set's first part from key %.8s...",
                             part, key? key: "(none)", assembly->key? assembly->key: "(none)");
        if (presence->parts != assembly->parts) {
            uint32_t parts = assembly->parts;
            s_drop (self, assembly);
            return s_status (DSH_PARTS_DROPPED, reason, reason_size,
                             "part %" PRIu32 " says the set has %" PRIu64 " parts, its first part said %" PRIu32
                             ": the set is dropped", part, presence->parts, parts);
        }
        if (assembly->slices [part].arrived)
            return s_status (DSH_PARTS_IGNORED, reason, reason_size, "part %" PRIu32 " came already", part);
    }
    if (assembly && presence->generation > assembly->generation) {
        s_drop (self, assembly);
        assembly = NULL;
    }
    if (!assembly) {
        size_t overhead = s_assembly_overhead (presence->component, key, presence->parts);
        if (overhead > self->max_total_bytes - self->bytes)
            return s_status (DSH_PARTS_DROPPED, reason, reason_size,
                             "a set of %" PRIu64 " parts would take %zu bytes, and the sets in parts hold %zu of "
                             "the broker's %zu (max_announce_parts_bytes): the set is dropped",
                             presence->parts, overhead, self->bytes, self->max_total_bytes);
        assembly = s_assembly_new (presence, key, now_ms);
        zhashx_insert (self->assemblies, assembly->component, assembly);
        self->bytes += assembly->bytes;
    }

    msgpack_sbuffer entries;
    msgpack_sbuffer_init (&entries);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &entries, msgpack_sbuffer_write);
    const msgpack_object_array *tools = &presence->tools->via.array;
    for (uint32_t index = 0; index < tools->size; index++)
        msgpack_pack_object (&pk, tools->ptr [index]);
    dsh_parts_status_t status = DSH_PARTS_HELD;
    if (entries.size > self->max_set_bytes - assembly->entry_bytes)
        status = s_status (DSH_PARTS_DROPPED, reason, reason_size,
                           "part %" PRIu32 " takes the set's entries to %zu bytes, over the broker's %zu-byte "
                           "limit on a set (max_tools x max_tool_bytes): the set is dropped",
                           part, assembly->entry_bytes + entries.size, self->max_set_bytes);
    else
    if (entries.size > self->max_total_bytes - self->bytes)
        status = s_status (DSH_PARTS_DROPPED, reason, reason_size,
                           "part %" PRIu32 " is %zu bytes, and the sets in parts hold %zu of the broker's %zu "
                           "(max_announce_parts_bytes): the set is dropped",
                           part, entries.size, self->bytes, self->max_total_bytes);
    if (status == DSH_PARTS_DROPPED) {
        msgpack_sbuffer_destroy (&entries);
        s_drop (self, assembly);
        return status;
    }
    s_slice_t *slice = &assembly->slices [part];
    slice->arrived = true;
    slice->count = tools->size;
    slice->size = entries.size;
    slice->data = msgpack_sbuffer_release (&entries);
    assembly->entries += tools->size;
    assembly->entry_bytes += slice->size;
    assembly->bytes += slice->size;
    self->bytes += slice->size;
    if (part == 0)
        assembly->concurrency = presence->concurrency;
    if (++assembly->arrived < assembly->parts)
        return DSH_PARTS_HELD;
    *set_p = s_join (assembly);
    *concurrency = assembly->concurrency;
    s_drop (self, assembly);
    return DSH_PARTS_WHOLE;
}

void
dsh_parts_forget (dsh_parts_t *self, const char *component, uint64_t generation)
{
    assert (self);
    assert (component);
    s_assembly_t *assembly = (s_assembly_t *) zhashx_lookup (self->assemblies, component);
    if (assembly && assembly->generation <= generation)
        s_drop (self, assembly);
}

zlistx_t *
dsh_parts_expire (dsh_parts_t *self, int64_t now_ms, int64_t max_age_ms)
{
    assert (self);
    zlistx_t *expired = zlistx_new ();
    zlistx_set_destructor (expired, (zlistx_destructor_fn *) zstr_free);
    for (s_assembly_t *assembly = (s_assembly_t *) zhashx_first (self->assemblies); assembly;
         assembly = (s_assembly_t *) zhashx_next (self->assemblies))
        if (assembly->begun_ms < now_ms - max_age_ms)
            zlistx_add_end (expired, strdup (assembly->component));
    for (char *component = (char *) zlistx_first (expired); component; component = (char *) zlistx_next (expired))
        dsh_parts_forget (self, component, UINT64_MAX);
    return expired;
}

size_t
dsh_parts_bytes (dsh_parts_t *self)
{
    assert (self);
    return self->bytes;
}

size_t
dsh_parts_size (dsh_parts_t *self)
{
    assert (self);
    return zhashx_size (self->assemblies);
}
