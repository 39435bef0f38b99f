/*  =========================================================================
    dsh_doc - one msgpack document decoded from untrusted bytes, within limits

    The scanner walks the bytes once with an explicit stack (so hostile
    nesting costs no C stack), refusing anything msgpack-c would either
    over-allocate for or fail on. Only bytes that pass are handed to
    msgpack_unpack, into a zone the document owns. The tree is then walked
    once more for maps that repeat a key: this is the one place where that
    is refused, so that no message of any kind reaches two readers who see
    it differently.
    =========================================================================
*/

#include "dsh_doc.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _dsh_doc_t {
    msgpack_zone zone;          //  Holds the object tree and strdup copies
    msgpack_object root;
};

//  The zone grows in chunks of this size (bounded so that a large document
//  does not reserve a large first chunk, and a tiny one still fits in one).
#define DSH_DOC_ZONE_MIN 512
#define DSH_DOC_ZONE_MAX 65536

static void
s_set_error (char *error, size_t error_size, const char *format, ...)
{
    if (!error || error_size == 0)
        return;
    va_list args;
    va_start (args, format);
    vsnprintf (error, error_size, format, args);
    va_end (args);
}

//  Reads a big-endian unsigned integer of width bytes at p.
static uint64_t
s_read_be (const uint8_t *p, size_t width)
{
    uint64_t value = 0;
    for (size_t index = 0; index < width; index++)
        value = (value << 8) | p [index];
    return value;
}

//  What one type byte says about the element that follows it. A payload of
//  "length" bytes comes after a header of header_size bytes (type byte,
//  length field and, for ext, the ext type byte); the length is either fixed
//  or read from the length_size bytes right after the type byte.
typedef enum {
    S_KIND_SCALAR,              //  header, then length bytes of payload
    S_KIND_ARRAY,               //  header, then length elements
    S_KIND_MAP,                 //  header, then length key/value pairs
    S_KIND_INVALID
} s_kind_t;

typedef struct {
    s_kind_t kind;
    size_t header_size;         //  Bytes before the payload, type byte included
    size_t length_size;         //  Bytes of the header holding the length (0: fixed)
    uint64_t length;            //  Fixed payload length when length_size is 0
} s_shape_t;

static s_shape_t
s_shape_of (uint8_t type)
{
    if (type <= 0x7f || type >= 0xe0)
        return (s_shape_t) { S_KIND_SCALAR, 1, 0, 0 };
    if (type <= 0x8f)
        return (s_shape_t) { S_KIND_MAP, 1, 0, type & 0x0f };
    if (type <= 0x9f)
        return (s_shape_t) { S_KIND_ARRAY, 1, 0, type & 0x0f };
    if (type <= 0xbf)
        return (s_shape_t) { S_KIND_SCALAR, 1, 0, type & 0x1f };
    switch (type) {
        case 0xc0: case 0xc2: case 0xc3:
            return (s_shape_t) { S_KIND_SCALAR, 1, 0, 0 };
        case 0xc4: return (s_shape_t) { S_KIND_SCALAR, 2, 1, 0 };
        case 0xc5: return (s_shape_t) { S_KIND_SCALAR, 3, 2, 0 };
        case 0xc6: return (s_shape_t) { S_KIND_SCALAR, 5, 4, 0 };
        case 0xc7: return (s_shape_t) { S_KIND_SCALAR, 3, 1, 0 };
        case 0xc8: return (s_shape_t) { S_KIND_SCALAR, 4, 2, 0 };
        case 0xc9: return (s_shape_t) { S_KIND_SCALAR, 6, 4, 0 };
        case 0xca: return (s_shape_t) { S_KIND_SCALAR, 1, 0, 4 };
        case 0xcb: return (s_shape_t) { S_KIND_SCALAR, 1, 0, 8 };
        case 0xcc: case 0xd0:
            return (s_shape_t) { S_KIND_SCALAR, 1, 0, 1 };
        case 0xcd: case 0xd1:
            return (s_shape_t) { S_KIND_SCALAR, 1, 0, 2 };
        case 0xce: case 0xd2:
            return (s_shape_t) { S_KIND_SCALAR, 1, 0, 4 };
        case 0xcf: case 0xd3:
            return (s_shape_t) { S_KIND_SCALAR, 1, 0, 8 };
        case 0xd4: return (s_shape_t) { S_KIND_SCALAR, 2, 0, 1 };
        case 0xd5: return (s_shape_t) { S_KIND_SCALAR, 2, 0, 2 };
        case 0xd6: return (s_shape_t) { S_KIND_SCALAR, 2, 0, 4 };
        case 0xd7: return (s_shape_t) { S_KIND_SCALAR, 2, 0, 8 };
        case 0xd8: return (s_shape_t) { S_KIND_SCALAR, 2, 0, 16 };
        case 0xd9: return (s_shape_t) { S_KIND_SCALAR, 2, 1, 0 };
        case 0xda: return (s_shape_t) { S_KIND_SCALAR, 3, 2, 0 };
        case 0xdb: return (s_shape_t) { S_KIND_SCALAR, 5, 4, 0 };
        case 0xdc: return (s_shape_t) { S_KIND_ARRAY, 3, 2, 0 };
        case 0xdd: return (s_shape_t) { S_KIND_ARRAY, 5, 4, 0 };
        case 0xde: return (s_shape_t) { S_KIND_MAP, 3, 2, 0 };
        case 0xdf: return (s_shape_t) { S_KIND_MAP, 5, 4, 0 };
        default:   return (s_shape_t) { S_KIND_INVALID, 1, 0, 0 };
    }
}

//  Walks the one object at the start of data and sets *end to the offset
//  just past it; bytes after it are not looked at.
//  Depth counts open containers: a scalar root is at depth 0, the root array
//  or map is at depth 1, and an element container of a depth-d container is
//  at depth d + 1. Empty containers count too, so [[[]]] has depth 3.
//  pending [d] holds how many elements the open container at depth d still
//  expects; pending [0] is the one root object.
static int
s_scan_one (const void *data, size_t size, int max_depth, size_t *end,
            char *error, size_t error_size)
{
    assert (data || size == 0);
    assert (end);
    if (size == 0) {
        s_set_error (error, error_size, "empty input");
        return -1;
    }
    if (max_depth < 0)
        max_depth = 0;
    uint64_t local_pending [DSH_DOC_MAX_DEPTH + 1];
    uint64_t *pending = local_pending;
    if (max_depth > DSH_DOC_MAX_DEPTH) {
        pending = (uint64_t *) malloc (((size_t) max_depth + 1) * sizeof (uint64_t));
        if (!pending) {
            s_set_error (error, error_size, "out of memory");
            return -1;
        }
    }
    const uint8_t *bytes = (const uint8_t *) data;
    size_t offset = 0;
    int depth = 0;
    int rc = -1;
    pending [0] = 1;

    while (true) {
        if (pending [depth] == 0) {
            if (depth == 0)
                break;
            depth--;
            continue;
        }
        pending [depth]--;

        if (offset >= size) {
            s_set_error (error, error_size, "truncated msgpack");
            goto done;
        }
        uint8_t type = bytes [offset];
        s_shape_t shape = s_shape_of (type);
        if (shape.kind == S_KIND_INVALID) {
            s_set_error (error, error_size, "invalid type byte 0x%02x", type);
            goto done;
        }
        if (size - offset < shape.header_size) {
            s_set_error (error, error_size, "truncated msgpack");
            goto done;
        }
        uint64_t length = shape.length;
        if (shape.length_size)
            length = s_read_be (bytes + offset + 1, shape.length_size);
        offset += shape.header_size;
        size_t left = size - offset;

        if (shape.kind == S_KIND_SCALAR) {
            if (length > left) {
                s_set_error (error, error_size, "truncated msgpack");
                goto done;
            }
            offset += (size_t) length;
            continue;
        }
        //  Every element takes at least one byte, so a count the bytes left
        //  cannot hold is refused before msgpack-c would allocate for it.
        bool is_map = shape.kind == S_KIND_MAP;
        uint64_t elements = is_map ? length * 2 : length;
        if (elements > left) {
            if (is_map)
                s_set_error (error, error_size,
                             "map of %" PRIu64 " entries exceeds the %zu bytes left",
                             length, left);
            else
                s_set_error (error, error_size,
                             "array of %" PRIu64 " elements exceeds the %zu bytes left",
                             length, left);
            goto done;
        }
        if (depth + 1 > max_depth) {
            s_set_error (error, error_size, "nesting deeper than %d", max_depth);
            goto done;
        }
        depth++;
        pending [depth] = elements;
    }
    *end = offset;
    rc = 0;
done:
    if (pending != local_pending)
        free (pending);
    return rc;
}

int
dsh_msgpack_scan (const void *data, size_t size, int max_depth,
                  char *error, size_t error_size)
{
    size_t end = 0;
    if (s_scan_one (data, size, max_depth, &end, error, error_size))
        return -1;
    if (end != size) {
        s_set_error (error, error_size, "trailing bytes after the object");
        return -1;
    }
    return 0;
}

size_t
dsh_msgpack_skip (const void *data, size_t size)
{
    size_t end = 0;
    if (s_scan_one (data, size, DSH_DOC_MAX_DEPTH, &end, NULL, 0))
        return 0;
    return end;
}

size_t
dsh_msgpack_map_header (const void *data, size_t size, uint32_t *count)
{
    assert (data || size == 0);
    assert (count);
    *count = 0;
    if (size == 0)
        return 0;
    s_shape_t shape = s_shape_of (((const uint8_t *) data) [0]);
    if (shape.kind != S_KIND_MAP || size < shape.header_size)
        return 0;
    *count = shape.length_size
           ? (uint32_t) s_read_be ((const uint8_t *) data + 1, shape.length_size)
           : (uint32_t) shape.length;
    return shape.header_size;
}

//  A map key as the bytes it is compared by: two keys are one key when any
//  reader (C's first match, JSON's and JavaScript's last one, Python's
//  dict) could take them for one. So a str and a bin compare by their bytes,
//  and a number by its shortest decimal text, which a str of that text
//  matches too (JavaScript turns number keys into such strings). Over-
//  matching only refuses a map that no honest sender writes.
typedef struct {
    int tag;                    //  0, or an ext key's type + 129
    const char *bytes;
    size_t size;
    char text [32];             //  a number's or a scalar's text
} s_key_form_t;

static void
s_key_form (const msgpack_object *key, s_key_form_t *form)
{
    form->tag = 0;
    form->bytes = form->text;
    form->size = 0;
    switch (key->type) {
        case MSGPACK_OBJECT_STR:
            form->bytes = key->via.str.ptr;
            form->size = key->via.str.size;
            return;
        case MSGPACK_OBJECT_BIN:
            form->bytes = key->via.bin.ptr;
            form->size = key->via.bin.size;
            return;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            form->size = (size_t) snprintf (form->text, sizeof form->text, "%" PRIu64, key->via.u64);
            return;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            form->size = (size_t) snprintf (form->text, sizeof form->text, "%" PRId64, key->via.i64);
            return;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: {
            double value = key->via.f64;
            //  In range before the cast, which is undefined outside it
            if (value > -9.2e18 && value < 9.2e18 && value == (double) (int64_t) value)
                form->size = (size_t) snprintf (form->text, sizeof form->text, "%" PRId64, (int64_t) value);
            else
                form->size = (size_t) snprintf (form->text, sizeof form->text, "%.17g", value);
            return;
        }
        case MSGPACK_OBJECT_BOOLEAN:
            form->size = (size_t) snprintf (form->text, sizeof form->text, "%s",
                                            key->via.boolean? "true": "false");
            return;
        case MSGPACK_OBJECT_NIL:
            form->size = (size_t) snprintf (form->text, sizeof form->text, "null");
            return;
        default:
            //  ext: its type, then its bytes
            form->tag = key->via.ext.type + 129;
            form->bytes = key->via.ext.ptr;
            form->size = key->via.ext.size;
            return;
    }
}

static int
s_compare_forms (const s_key_form_t *a, const s_key_form_t *b)
{
    if (a->tag != b->tag)
        return a->tag < b->tag? -1: 1;
    if (a->size != b->size)
        return a->size < b->size? -1: 1;
    return a->size? memcmp (a->bytes, b->bytes, a->size): 0;
}

static int
s_compare_form_pointers (const void *a, const void *b)
{
    return s_compare_forms (*(const s_key_form_t *const *) a, *(const s_key_form_t *const *) b);
}

void
dsh_quote_key (const char *key, size_t key_size, char *text, size_t size)
{
    assert (size >= 4);
    size_t used = 0;
    size_t shown = key_size > 40? 40: key_size;
    for (size_t index = 0; index < shown && used + 5 < size; index++) {
        unsigned char c = (unsigned char) key [index];
        if (c < 0x20 || c > 0x7e || c == '"' || c == '\\')
            used += (size_t) snprintf (text + used, size - used, "\\x%02x", c);
        else
            text [used++] = (char) c;
    }
    if (shown < key_size && used + 4 <= size) {
        memcpy (text + used, "...", 3);
        used += 3;
    }
    text [used] = 0;
}

//  The key of a map that occurs twice, or NULL; *container is set when a key
//  is an array or a map (no reader can look one up). Small maps, as most
//  are, are compared pairwise; larger ones are sorted, so a hostile map of
//  a million keys costs O(n log n), not O(n^2).
static const s_key_form_t *
s_repeated_key (const msgpack_object_map *map, s_key_form_t *forms, const s_key_form_t **sorted,
                bool *container)
{
    *container = false;
    for (uint32_t index = 0; index < map->size; index++) {
        msgpack_object_type type = map->ptr [index].key.type;
        if (type == MSGPACK_OBJECT_ARRAY || type == MSGPACK_OBJECT_MAP) {
            *container = true;
            return NULL;
        }
        s_key_form (&map->ptr [index].key, &forms [index]);
    }
    if (map->size <= 8) {
        for (uint32_t first = 0; first < map->size; first++)
            for (uint32_t second = first + 1; second < map->size; second++)
                if (s_compare_forms (&forms [first], &forms [second]) == 0)
                    return &forms [second];
        return NULL;
    }
    for (uint32_t index = 0; index < map->size; index++)
        sorted [index] = &forms [index];
    qsort (sorted, map->size, sizeof (*sorted), s_compare_form_pointers);
    for (uint32_t index = 1; index < map->size; index++)
        if (s_compare_forms (sorted [index - 1], sorted [index]) == 0)
            return sorted [index];
    return NULL;
}

//  Where a refused map is, for the reason: "body", then ".key" per str key
//  and "[i]" per array element, as far as it fits.
typedef struct {
    char text [160];
    size_t size;
} s_path_t;

static size_t
s_path_push (s_path_t *path, const msgpack_object *key, uint32_t index)
{
    size_t mark = path->size;
    size_t room = sizeof path->text - path->size;
    int written;
    if (!key)
        written = snprintf (path->text + path->size, room, "[%" PRIu32 "]", index);
    else
    if (key->type == MSGPACK_OBJECT_STR && key->via.str.size <= 32
    &&  (key->via.str.size == 0 || !memchr (key->via.str.ptr, '\0', key->via.str.size)))
        written = snprintf (path->text + path->size, room, ".%.*s", (int) key->via.str.size,
                            key->via.str.size? key->via.str.ptr: "");
    else
        written = snprintf (path->text + path->size, room, ".{}");
    if (written > 0)
        path->size += (size_t) written < room? (size_t) written: room - 1;
    return mark;
}

//  Refuses a tree in which any map repeats a key or has an array or a map
//  as a key. Recursion is bounded by DSH_DOC_MAX_DEPTH, which the scan has
//  checked.
static int
s_check_maps (const msgpack_object *obj, s_path_t *path, char *error, size_t error_size)
{
    if (obj->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t index = 0; index < obj->via.array.size; index++) {
            const msgpack_object *item = &obj->via.array.ptr [index];
            if (item->type != MSGPACK_OBJECT_ARRAY && item->type != MSGPACK_OBJECT_MAP)
                continue;
            size_t mark = s_path_push (path, NULL, index);
            if (s_check_maps (item, path, error, error_size))
                return -1;
            path->size = mark;
            path->text [mark] = 0;
        }
        return 0;
    }
    if (obj->type != MSGPACK_OBJECT_MAP || obj->via.map.size < 1)
        return 0;
    const msgpack_object_map *map = &obj->via.map;
    s_key_form_t local_forms [8];
    s_key_form_t *forms = local_forms;
    const s_key_form_t **sorted = NULL;
    if (map->size > 8) {
        forms = (s_key_form_t *) malloc (map->size * sizeof (*forms));
        sorted = (const s_key_form_t **) malloc (map->size * sizeof (*sorted));
        if (!forms || !sorted) {
            free (forms);
            free (sorted);
            s_set_error (error, error_size, "out of memory checking a map of %" PRIu32 " keys", map->size);
            return -1;
        }
    }
    bool container = false;
    const s_key_form_t *repeated = map->size > 1 || map->ptr [0].key.type == MSGPACK_OBJECT_ARRAY
                                || map->ptr [0].key.type == MSGPACK_OBJECT_MAP
                                 ? s_repeated_key (map, forms, sorted, &container): NULL;
    int rc = 0;
    if (repeated || container) {
        char quoted [200] = "";
        if (repeated)
            dsh_quote_key (repeated->bytes, repeated->size, quoted, sizeof quoted);
        if (container)
            s_set_error (error, error_size, "a key of the map at %s is an array or a map", path->text);
        else
            s_set_error (error, error_size, "duplicate key \"%s\" in the map at %s", quoted, path->text);
        rc = -1;
    }
    if (forms != local_forms)
        free (forms);
    free (sorted);
    for (uint32_t index = 0; rc == 0 && index < map->size; index++) {
        const msgpack_object *value = &map->ptr [index].val;
        if (value->type != MSGPACK_OBJECT_ARRAY && value->type != MSGPACK_OBJECT_MAP)
            continue;
        size_t mark = s_path_push (path, &map->ptr [index].key, index);
        rc = s_check_maps (value, path, error, error_size);
        path->size = mark;
        path->text [mark] = 0;
    }
    return rc;
}

dsh_doc_t *
dsh_doc_new (const void *data, size_t size, char *error, size_t error_size)
{
    if (dsh_msgpack_scan (data, size, DSH_DOC_MAX_DEPTH, error, error_size))
        return NULL;

    dsh_doc_t *self = (dsh_doc_t *) calloc (1, sizeof (dsh_doc_t));
    if (!self) {
        s_set_error (error, error_size, "out of memory");
        return NULL;
    }
    //  An object is 24 bytes; a document of n bytes has at most n objects
    //  but typically far fewer, so start near twice its size.
    size_t chunk_size = size < DSH_DOC_ZONE_MAX / 2? size * 2: DSH_DOC_ZONE_MAX;
    if (chunk_size < DSH_DOC_ZONE_MIN)
        chunk_size = DSH_DOC_ZONE_MIN;
    if (!msgpack_zone_init (&self->zone, chunk_size)) {
        free (self);
        s_set_error (error, error_size, "out of memory");
        return NULL;
    }
    size_t offset = 0;
    msgpack_unpack_return status = msgpack_unpack (
        (const char *) data, size, &offset, &self->zone, &self->root);
    if (status != MSGPACK_UNPACK_SUCCESS) {
        s_set_error (error, error_size, "msgpack unpack failed (%d)", (int) status);
        dsh_doc_destroy (&self);
        return NULL;
    }
    s_path_t path = { "body", 4 };
    if (s_check_maps (&self->root, &path, error, error_size)) {
        dsh_doc_destroy (&self);
        return NULL;
    }
    return self;
}

void
dsh_doc_destroy (dsh_doc_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_doc_t *self = *self_p;
        msgpack_zone_destroy (&self->zone);
        free (self);
        *self_p = NULL;
    }
}

const msgpack_object *
dsh_doc_root (dsh_doc_t *self)
{
    assert (self);
    return &self->root;
}

char *
dsh_doc_strdup (dsh_doc_t *self, const msgpack_object *obj)
{
    assert (self);
    if (!obj || obj->type != MSGPACK_OBJECT_STR)
        return NULL;
    size_t length = obj->via.str.size;
    if (length && memchr (obj->via.str.ptr, '\0', length))
        return NULL;
    char *copy = (char *) msgpack_zone_malloc_no_align (&self->zone, length + 1);
    if (!copy)
        return NULL;
    if (length)
        memcpy (copy, obj->via.str.ptr, length);
    copy [length] = '\0';
    return copy;
}

const msgpack_object *
dsh_map_get (const msgpack_object *map, const char *key)
{
    assert (key);
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t index = 0; index < map->via.map.size; index++) {
        const msgpack_object_kv *entry = &map->via.map.ptr [index];
        if (dsh_str_eq (&entry->key, key))
            return &entry->val;
    }
    return NULL;
}

int
dsh_map_int_in (const msgpack_object *map, const char *key, int min, int max, int fallback)
{
    assert (min >= 0 && min <= max);
    const msgpack_object *value = dsh_map_get (map, key);
    if (value && value->type == MSGPACK_OBJECT_POSITIVE_INTEGER
    &&  value->via.u64 >= (uint64_t) min && value->via.u64 <= (uint64_t) max)
        return (int) value->via.u64;
    return fallback;
}

bool
dsh_str_eq (const msgpack_object *obj, const char *text)
{
    assert (text);
    if (!obj || obj->type != MSGPACK_OBJECT_STR)
        return false;
    size_t length = strlen (text);
    return obj->via.str.size == length
        && (length == 0 || memcmp (obj->via.str.ptr, text, length) == 0);
}

//  Depth as dsh_msgpack_scan counts it; stops looking past limit.
static bool
s_depth_within (const msgpack_object *obj, int depth, int limit)
{
    if (obj->type == MSGPACK_OBJECT_ARRAY) {
        if (depth + 1 > limit)
            return false;
        for (uint32_t index = 0; index < obj->via.array.size; index++)
            if (!s_depth_within (&obj->via.array.ptr [index], depth + 1, limit))
                return false;
    }
    else
    if (obj->type == MSGPACK_OBJECT_MAP) {
        if (depth + 1 > limit)
            return false;
        for (uint32_t index = 0; index < obj->via.map.size; index++) {
            const msgpack_object_kv *entry = &obj->via.map.ptr [index];
            if (!s_depth_within (&entry->key, depth + 1, limit)
            ||  !s_depth_within (&entry->val, depth + 1, limit))
                return false;
        }
    }
    return true;
}

static void s_pack_sorted (msgpack_packer *pk, const msgpack_object *obj);

//  One map entry with the bytes it sorts by: str keys by their own bytes,
//  ahead of all other keys, which sort by their canonical packed bytes.
typedef struct {
    const msgpack_object_kv *entry;
    bool key_is_str;
    const char *key_bytes;
    size_t key_size;
} s_sort_entry_t;

static int
s_compare_bytes (const char *a, size_t a_size, const char *b, size_t b_size)
{
    size_t common = a_size < b_size? a_size: b_size;
    int order = common? memcmp (a, b, common): 0;
    if (order)
        return order;
    return (a_size > b_size) - (a_size < b_size);
}

//  Equal keys (a map may repeat one) fall back to the canonical bytes of
//  the values, so that repeated keys in any order still pack the same.
static int
s_compare_entries (const void *a_ptr, const void *b_ptr)
{
    const s_sort_entry_t *a = (const s_sort_entry_t *) a_ptr;
    const s_sort_entry_t *b = (const s_sort_entry_t *) b_ptr;
    if (a->key_is_str != b->key_is_str)
        return a->key_is_str? -1: 1;
    int order = s_compare_bytes (a->key_bytes, a->key_size, b->key_bytes, b->key_size);
    if (order)
        return order;

    msgpack_sbuffer a_value, b_value;
    msgpack_sbuffer_init (&a_value);
    msgpack_sbuffer_init (&b_value);
    msgpack_packer a_packer, b_packer;
    msgpack_packer_init (&a_packer, &a_value, msgpack_sbuffer_write);
    msgpack_packer_init (&b_packer, &b_value, msgpack_sbuffer_write);
    s_pack_sorted (&a_packer, &a->entry->val);
    s_pack_sorted (&b_packer, &b->entry->val);
    order = s_compare_bytes (a_value.data, a_value.size, b_value.data, b_value.size);
    msgpack_sbuffer_destroy (&a_value);
    msgpack_sbuffer_destroy (&b_value);
    return order;
}

static void
s_pack_sorted_map (msgpack_packer *pk, const msgpack_object_map *map)
{
    msgpack_pack_map (pk, map->size);
    if (map->size == 0)
        return;
    s_sort_entry_t *entries = (s_sort_entry_t *) calloc (map->size, sizeof (s_sort_entry_t));
    size_t *key_offsets = (size_t *) calloc (map->size, sizeof (size_t));
    assert (entries && key_offsets);

    //  Non-str keys are packed into one buffer; their pointers are taken
    //  only once it has stopped growing.
    msgpack_sbuffer key_buffer;
    msgpack_sbuffer_init (&key_buffer);
    msgpack_packer key_packer;
    msgpack_packer_init (&key_packer, &key_buffer, msgpack_sbuffer_write);
    for (uint32_t index = 0; index < map->size; index++) {
        const msgpack_object_kv *entry = &map->ptr [index];
        entries [index].entry = entry;
        entries [index].key_is_str = entry->key.type == MSGPACK_OBJECT_STR;
        if (entries [index].key_is_str) {
            entries [index].key_bytes = entry->key.via.str.ptr;
            entries [index].key_size = entry->key.via.str.size;
        }
        else {
            key_offsets [index] = key_buffer.size;
            s_pack_sorted (&key_packer, &entry->key);
            entries [index].key_size = key_buffer.size - key_offsets [index];
        }
    }
    for (uint32_t index = 0; index < map->size; index++)
        if (!entries [index].key_is_str)
            entries [index].key_bytes = key_buffer.data + key_offsets [index];

    qsort (entries, map->size, sizeof (s_sort_entry_t), s_compare_entries);
    for (uint32_t index = 0; index < map->size; index++) {
        s_pack_sorted (pk, &entries [index].entry->key);
        s_pack_sorted (pk, &entries [index].entry->val);
    }
    msgpack_sbuffer_destroy (&key_buffer);
    free (key_offsets);
    free (entries);
}

//  Recursion is bounded: callers check the depth first.
static void
s_pack_sorted (msgpack_packer *pk, const msgpack_object *obj)
{
    if (obj->type == MSGPACK_OBJECT_ARRAY) {
        msgpack_pack_array (pk, obj->via.array.size);
        for (uint32_t index = 0; index < obj->via.array.size; index++)
            s_pack_sorted (pk, &obj->via.array.ptr [index]);
    }
    else
    if (obj->type == MSGPACK_OBJECT_MAP)
        s_pack_sorted_map (pk, &obj->via.map);
    else
        msgpack_pack_object (pk, *obj);
}

int
dsh_pack_canonical (msgpack_packer *pk, const msgpack_object *obj)
{
    assert (pk);
    assert (obj);
    //  Checked before packing so that a refusal writes nothing.
    if (!s_depth_within (obj, 0, DSH_DOC_MAX_DEPTH))
        return -1;
    s_pack_sorted (pk, obj);
    return 0;
}

void
dsh_pack_cstr (msgpack_packer *pk, const char *text)
{
    assert (pk);
    assert (text);
    size_t length = strlen (text);
    msgpack_pack_str (pk, length);
    msgpack_pack_str_body (pk, text, length);
}
