/*  =========================================================================
    dsh_pins - pinned tool definitions (see the header)

    A hash on name of dsh_pin_t, a list of changes for the store, and, per
    name changed here, when: a poll of the store that started before the
    change reached it must not undo it.
    =========================================================================
*/

#include "dsh_pins.h"
#include "dsh_json.h"

//  How long a change made here stands against the stored set
#define S_LOCAL_MS          2000

struct _dsh_pins_t {
    dsh_pins_policy_t policy;
    bool loaded;
    zhashx_t *pins;             //  name -> dsh_pin_t *
    zhashx_t *changed;          //  name -> int64_t * (zclock_mono of the change here)
    zlistx_t *ops;              //  dsh_pin_op_t *, to write
};

static char *
s_dup (const char *text)
{
    return strdup (text? text: "");
}

dsh_pin_t *
dsh_pin_new (const char *name)
{
    dsh_pin_t *self = (dsh_pin_t *) zmalloc (sizeof (dsh_pin_t));
    assert (self);
    self->name = s_dup (name);
    self->definition = s_dup ("null");
    self->component = s_dup (NULL);
    self->key = s_dup (NULL);
    self->accepted_by = s_dup (NULL);
    return self;
}

dsh_pin_t *
dsh_pin_dup (const dsh_pin_t *self)
{
    dsh_pin_t *copy = (dsh_pin_t *) zmalloc (sizeof (dsh_pin_t));
    assert (copy);
    *copy = *self;
    copy->name = s_dup (self->name);
    copy->definition = s_dup (self->definition);
    copy->component = s_dup (self->component);
    copy->key = s_dup (self->key);
    copy->accepted_by = s_dup (self->accepted_by);
    return copy;
}

void
dsh_pin_destroy (dsh_pin_t **self_p)
{
    if (*self_p) {
        dsh_pin_t *self = *self_p;
        zstr_free (&self->name);
        zstr_free (&self->definition);
        zstr_free (&self->component);
        zstr_free (&self->key);
        zstr_free (&self->accepted_by);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_pin_op_destroy (dsh_pin_op_t **self_p)
{
    if (*self_p) {
        dsh_pin_destroy (&(*self_p)->pin);
        free (*self_p);
        *self_p = NULL;
    }
}

int
dsh_pins_policy_parse (const char *text, dsh_pins_policy_t *policy)
{
    if (text && streq (text, "off"))
        *policy = DSH_PINS_OFF;
    else
    if (text && streq (text, "tofu"))
        *policy = DSH_PINS_TOFU;
    else
    if (text && streq (text, "strict"))
        *policy = DSH_PINS_STRICT;
    else
        return -1;
    return 0;
}

const char *
dsh_pins_policy_name (dsh_pins_policy_t policy)
{
    return policy == DSH_PINS_TOFU? "tofu": policy == DSH_PINS_STRICT? "strict": "off";
}

dsh_pins_t *
dsh_pins_new (dsh_pins_policy_t policy)
{
    dsh_pins_t *self = (dsh_pins_t *) zmalloc (sizeof (dsh_pins_t));
    assert (self);
    self->policy = policy;
    self->pins = zhashx_new ();
    zhashx_set_destructor (self->pins, (zhashx_destructor_fn *) dsh_pin_destroy);
    self->changed = zhashx_new ();
    zhashx_set_destructor (self->changed, (zhashx_destructor_fn *) zstr_free);
    self->ops = zlistx_new ();
    zlistx_set_destructor (self->ops, (zlistx_destructor_fn *) dsh_pin_op_destroy);
    return self;
}

void
dsh_pins_destroy (dsh_pins_t **self_p)
{
    if (*self_p) {
        dsh_pins_t *self = *self_p;
        zhashx_destroy (&self->pins);
        zhashx_destroy (&self->changed);
        zlistx_destroy (&self->ops);
        free (self);
        *self_p = NULL;
    }
}

dsh_pins_policy_t
dsh_pins_policy (dsh_pins_t *self)
{
    assert (self);
    return self->policy;
}

static bool
s_changed_lately (dsh_pins_t *self, const char *name, int64_t now_ms)
{
    const char *when = (const char *) zhashx_lookup (self->changed, name);
    return when && now_ms - strtoll (when, NULL, 10) < S_LOCAL_MS;
}

void
dsh_pins_load (dsh_pins_t *self, zlistx_t **pins_p, int64_t now_ms)
{
    assert (self);
    assert (pins_p && *pins_p);
    zhashx_t *next = zhashx_new ();
    zhashx_set_destructor (next, (zhashx_destructor_fn *) dsh_pin_destroy);
    dsh_pin_t *pin;
    while ((pin = (dsh_pin_t *) zlistx_detach (*pins_p, NULL))) {
        if (s_changed_lately (self, pin->name, now_ms) || zhashx_lookup (next, pin->name))
            dsh_pin_destroy (&pin);
        else
            zhashx_insert (next, pin->name, pin);
    }
    zlistx_destroy (pins_p);
    //  What was changed here lately stands as it is here (kept, or gone)
    for (dsh_pin_t *mine = (dsh_pin_t *) zhashx_first (self->pins); mine;
         mine = (dsh_pin_t *) zhashx_next (self->pins))
        if (s_changed_lately (self, mine->name, now_ms))
            zhashx_insert (next, mine->name, dsh_pin_dup (mine));
    zhashx_destroy (&self->pins);
    self->pins = next;
    self->loaded = true;
}

bool
dsh_pins_loaded (dsh_pins_t *self)
{
    assert (self);
    return self->loaded;
}

static void
s_note (dsh_pins_t *self, dsh_pin_op_kind_t kind, const dsh_pin_t *pin, const char *name, int64_t now_ms)
{
    dsh_pin_op_t *op = (dsh_pin_op_t *) zmalloc (sizeof (dsh_pin_op_t));
    assert (op);
    op->kind = kind;
    op->pin = pin? dsh_pin_dup (pin): dsh_pin_new (name);
    zlistx_add_end (self->ops, op);
    zhashx_update (self->changed, op->pin->name, zsys_sprintf ("%" PRId64, now_ms));
}

json_t *
dsh_pins_definition_json (const msgpack_object *entry)
{
    msgpack_object_kv pairs [DSH_DIGEST_DEFINITION_KEYS];
    msgpack_object definition;
    if (dsh_digest_definition_map (entry, pairs, &definition))
        return NULL;
    return dsh_json_view (&definition);
}

//  A pin of entry for name, or NULL if the entry is not a map.
static dsh_pin_t *
s_pin_of (const char *name, const msgpack_object *entry, const char *component, const char *key, int64_t wall_ms)
{
    json_t *definition = dsh_pins_definition_json (entry);
    if (!definition)
        return NULL;
    dsh_pin_t *pin = dsh_pin_new (name);
    if (dsh_digest_definition (entry, pin->digest)) {
        json_decref (definition);
        dsh_pin_destroy (&pin);
        return NULL;
    }
    zstr_free (&pin->definition);
    pin->definition = json_dumps (definition, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    json_decref (definition);
    zstr_free (&pin->component);
    pin->component = s_dup (component);
    zstr_free (&pin->key);
    pin->key = s_dup (key);
    pin->first_ms = wall_ms;
    return pin;
}

int
dsh_pins_judge (dsh_pins_t *self, const char *name, const msgpack_object *entry, const char *component,
                const char *key, int64_t now_ms, dsh_pins_verdict_t *verdict)
{
    assert (self);
    assert (verdict);
    memset (verdict, 0, sizeof (*verdict));
    if (dsh_digest_definition (entry, verdict->digest))
        return -1;
    if (self->policy == DSH_PINS_OFF)
        return 0;
    if (!self->loaded) {
        verdict->quarantined = true;
        verdict->reason = DSH_PINS_UNREAD;
        return 0;
    }
    dsh_pin_t *pin = (dsh_pin_t *) zhashx_lookup (self->pins, name);
    if (pin)
        snprintf (verdict->pinned, sizeof (verdict->pinned), "%s", pin->digest);
    if (pin && *pin->digest && streq (pin->digest, verdict->digest))
        return 0;
    if (pin && *pin->rejected && streq (pin->rejected, verdict->digest)) {
        verdict->quarantined = true;
        verdict->reason = DSH_PINS_REJECTED;
        return 0;
    }
    if ((!pin || !*pin->digest) && self->policy == DSH_PINS_TOFU) {
        //  First sight: this is what later definitions are held to
        dsh_pin_t *first = s_pin_of (name, entry, component, key, zclock_time ());
        if (!first)
            return -1;
        if (pin)
            snprintf (first->rejected, sizeof (first->rejected), "%s", pin->rejected);
        s_note (self, DSH_PIN_FIRST, first, NULL, now_ms);
        zhashx_update (self->pins, name, first);
        snprintf (verdict->pinned, sizeof (verdict->pinned), "%s", first->digest);
        return 0;
    }
    verdict->quarantined = true;
    verdict->reason = pin && *pin->digest? DSH_PINS_CHANGED: DSH_PINS_UNACCEPTED;
    return 0;
}

const dsh_pin_t *
dsh_pins_lookup (dsh_pins_t *self, const char *name)
{
    assert (self);
    return (const dsh_pin_t *) zhashx_lookup (self->pins, name);
}

int
dsh_pins_accept (dsh_pins_t *self, const char *name, const msgpack_object *entry, const char *component,
                 const char *key, const char *by, int64_t now_ms)
{
    assert (self);
    dsh_pin_t *old = (dsh_pin_t *) zhashx_lookup (self->pins, name);
    dsh_pin_t *pin = s_pin_of (name, entry, component, key, zclock_time ());
    if (!pin)
        return -1;
    if (old && *old->digest) {
        //  The pin keeps who first offered the name, and when
        zstr_free (&pin->component);
        pin->component = s_dup (old->component);
        zstr_free (&pin->key);
        pin->key = s_dup (old->key);
        pin->first_ms = old->first_ms;
    }
    zstr_free (&pin->accepted_by);
    pin->accepted_by = s_dup (by);
    pin->accepted_ms = zclock_time ();
    s_note (self, DSH_PIN_REPLACE, pin, NULL, now_ms);
    zhashx_update (self->pins, name, pin);
    return 0;
}

int
dsh_pins_reject (dsh_pins_t *self, const char *name, const char *digest, const char *by, int64_t now_ms)
{
    assert (self);
    dsh_pin_t *pin = (dsh_pin_t *) zhashx_lookup (self->pins, name);
    if (!pin) {
        pin = dsh_pin_new (name);
        pin->first_ms = zclock_time ();
        zhashx_insert (self->pins, name, pin);
    }
    snprintf (pin->rejected, sizeof (pin->rejected), "%s", digest? digest: "");
    zstr_free (&pin->accepted_by);
    pin->accepted_by = s_dup (by);
    pin->accepted_ms = zclock_time ();
    s_note (self, DSH_PIN_REPLACE, pin, NULL, now_ms);
    return 0;
}

int
dsh_pins_forget (dsh_pins_t *self, const char *name, int64_t now_ms)
{
    assert (self);
    if (!zhashx_lookup (self->pins, name))
        return -1;
    zhashx_delete (self->pins, name);
    s_note (self, DSH_PIN_FORGET, NULL, name, now_ms);
    return 0;
}

zlistx_t *
dsh_pins_names (dsh_pins_t *self)
{
    assert (self);
    zlistx_t *names = zhashx_keys (self->pins);
    //  The list owns its strings; what a caller adds it owns too
    zlistx_set_duplicator (names, NULL);
    zlistx_set_destructor (names, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_comparator (names, (zlistx_comparator_fn *) strcmp);
    zlistx_sort (names);
    return names;
}

zlistx_t *
dsh_pins_take_ops (dsh_pins_t *self)
{
    assert (self);
    zlistx_t *ops = self->ops;
    self->ops = zlistx_new ();
    zlistx_set_destructor (self->ops, (zlistx_destructor_fn *) dsh_pin_op_destroy);
    return ops;
}

//  --- The diff ------------------------------------------------------------

typedef struct {
    char *text;
    size_t size;
    size_t max_bytes;
    size_t left_out;
} s_diff_t;

//  value as compact JSON, at most 240 bytes of it
static char *
s_show (const json_t *value)
{
    if (!value)
        return strdup ("(absent)");
    char *text = json_dumps (value, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
    if (text && strlen (text) > 240)
        strcpy (text + 237, "...");
    return text? text: strdup ("?");
}

static void
s_line (s_diff_t *diff, char sign, const char *path, const json_t *value)
{
    char *shown = s_show (value);
    char *line = zsys_sprintf ("%c %s: %s\n", sign, *path? path: "(definition)", shown);
    size_t length = strlen (line);
    if (diff->size + length + 64 > diff->max_bytes)
        diff->left_out++;
    else {
        diff->text = (char *) realloc (diff->text, diff->size + length + 1);
        assert (diff->text);
        memcpy (diff->text + diff->size, line, length + 1);
        diff->size += length;
    }
    zstr_free (&line);
    free (shown);
}

static void
s_walk (s_diff_t *diff, const char *path, const json_t *pinned, const json_t *offered, int depth)
{
    if (pinned && offered && json_equal ((json_t *) pinned, (json_t *) offered))
        return;
    if (depth < 32 && json_is_object (pinned) && json_is_object (offered)) {
        //  Keys of both, sorted, so the diff reads the same on every broker
        zlistx_t *keys = zlistx_new ();
        zlistx_set_comparator (keys, (zlistx_comparator_fn *) strcmp);
        const char *key;
        json_t *value;
        json_object_foreach ((json_t *) pinned, key, value)
            zlistx_add_end (keys, (void *) key);
        json_object_foreach ((json_t *) offered, key, value)
            if (!json_object_get (pinned, key))
                zlistx_add_end (keys, (void *) key);
        zlistx_sort (keys);
        for (key = (const char *) zlistx_first (keys); key; key = (const char *) zlistx_next (keys)) {
            char *inner = *path? zsys_sprintf ("%s.%s", path, key): strdup (key);
            s_walk (diff, inner, json_object_get (pinned, key), json_object_get (offered, key), depth + 1);
            zstr_free (&inner);
        }
        zlistx_destroy (&keys);
        return;
    }
    if (depth < 32 && json_is_array (pinned) && json_is_array (offered)) {
        size_t count = json_array_size (pinned) > json_array_size (offered)?
                       json_array_size (pinned): json_array_size (offered);
        for (size_t index = 0; index < count; index++) {
            char *inner = zsys_sprintf ("%s[%zu]", path, index);
            s_walk (diff, inner, json_array_get (pinned, index), json_array_get (offered, index), depth + 1);
            zstr_free (&inner);
        }
        return;
    }
    if (pinned)
        s_line (diff, '-', path, pinned);
    if (offered)
        s_line (diff, '+', path, offered);
}

void
dsh_pins_changed_keys (const json_t *pinned, const json_t *offered, char *text, size_t size)
{
    assert (text && size);
    *text = 0;
    zlistx_t *keys = zlistx_new ();
    zlistx_set_comparator (keys, (zlistx_comparator_fn *) strcmp);
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) pinned, key, value)
        if (!json_equal (value, json_object_get (offered, key)))
            zlistx_add_end (keys, (void *) key);
    json_object_foreach ((json_t *) offered, key, value)
        if (!json_object_get (pinned, key))
            zlistx_add_end (keys, (void *) key);
    zlistx_sort (keys);
    size_t used = 0;
    for (key = (const char *) zlistx_first (keys); key; key = (const char *) zlistx_next (keys)) {
        int wrote = snprintf (text + used, size - used, "%s%s", used? ", ": "", key);
        if (wrote < 0 || (size_t) wrote >= size - used) {
            text [used] = 0;        //  whole keys only
            break;
        }
        used += (size_t) wrote;
    }
    zlistx_destroy (&keys);
}

char *
dsh_pins_diff (const json_t *pinned, const json_t *offered, size_t max_bytes)
{
    s_diff_t diff = { .text = strdup (""), .max_bytes = max_bytes < 128? 128: max_bytes };
    assert (diff.text);
    s_walk (&diff, "", pinned, offered, 0);
    if (diff.left_out) {
        char *more = zsys_sprintf ("... and %zu more line(s)\n", diff.left_out);
        size_t length = strlen (more);
        diff.text = (char *) realloc (diff.text, diff.size + length + 1);
        assert (diff.text);
        memcpy (diff.text + diff.size, more, length + 1);
        zstr_free (&more);
    }
    return diff.text;
}
