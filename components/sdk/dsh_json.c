/*  =========================================================================
    dsh_json - the JSON edge: msgpack values to jansson values and back

    Both directions are plain recursive walks: msgpack trees come from
    dsh_doc (or msgpack-c, which stops at 32 levels) and jansson trees are
    depth-checked before anything is packed, so recursion stays shallow.
    =========================================================================
*/

#include "dsh_json.h"
#include "dsh_doc.h"

#include <assert.h>
#include <czmq.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *
s_json_from_bin (const msgpack_object_bin *bin)
{
    if (bin->size == 0)
        return json_string ("");
    zarmour_t *armour = zarmour_new ();
    if (!armour)
        return NULL;
    zarmour_set_mode (armour, ZARMOUR_MODE_BASE64_STD);
    zarmour_set_pad (armour, true);
    zarmour_set_line_length (armour, 0);
    char *encoded = zarmour_encode (armour, (const byte *) bin->ptr, bin->size);
    zarmour_destroy (&armour);
    if (!encoded)
        return NULL;
    json_t *json = json_string (encoded);
    zstr_free (&encoded);
    return json;
}

json_t *
dsh_json_from_msgpack (const msgpack_object *obj)
{
    assert (obj);
    switch (obj->type) {
        case MSGPACK_OBJECT_NIL:
            return json_null ();
        case MSGPACK_OBJECT_BOOLEAN:
            return json_boolean (obj->via.boolean);
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            if (obj->via.u64 > (uint64_t) INT64_MAX)
                return json_real ((double) obj->via.u64);
            return json_integer ((json_int_t) obj->via.u64);
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            return json_integer ((json_int_t) obj->via.i64);
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            //  json_real refuses NaN and infinities, which JSON cannot hold.
            return json_real (obj->via.f64);
        case MSGPACK_OBJECT_STR:
            //  json_stringn checks that the bytes are UTF-8.
            return json_stringn (obj->via.str.ptr ? obj->via.str.ptr : "", obj->via.str.size);
        case MSGPACK_OBJECT_BIN:
            return s_json_from_bin (&obj->via.bin);
        case MSGPACK_OBJECT_ARRAY: {
            json_t *array = json_array ();
            for (uint32_t index = 0; array && index < obj->via.array.size; index++) {
                json_t *item = dsh_json_from_msgpack (&obj->via.array.ptr [index]);
                if (!item || json_array_append_new (array, item)) {
                    json_decref (array);
                    array = NULL;
                }
            }
            return array;
        }
        case MSGPACK_OBJECT_MAP: {
            json_t *object = json_object ();
            for (uint32_t index = 0; object && index < obj->via.map.size; index++) {
                const msgpack_object_kv *entry = &obj->via.map.ptr [index];
                if (entry->key.type != MSGPACK_OBJECT_STR) {
                    json_decref (object);
                    return NULL;
                }
                json_t *value = dsh_json_from_msgpack (&entry->val);
                //  json_object_setn_new checks that the key is UTF-8 and
                //  releases value when it fails.
                const char *key = entry->key.via.str.ptr ? entry->key.via.str.ptr : "";
                if (!value
                ||  json_object_setn_new (object, key, entry->key.via.str.size, value)) {
                    json_decref (object);
                    object = NULL;
                }
            }
            return object;
        }
        default:
            return NULL;        //  ext values have no JSON form
    }
}

//  Depth as dsh_msgpack_scan counts it (root container = 1); stops looking
//  past limit, so a cyclic or hostile tree costs at most limit frames.
static bool
s_depth_within (const json_t *json, int depth, int limit)
{
    if (json_is_array (json)) {
        if (depth + 1 > limit)
            return false;
        size_t index;
        json_t *item;
        json_array_foreach (json, index, item)
            if (!s_depth_within (item, depth + 1, limit))
                return false;
    }
    else
    if (json_is_object (json)) {
        if (depth + 1 > limit)
            return false;
        const char *key;
        json_t *value;
        json_object_foreach ((json_t *) json, key, value)
            if (!s_depth_within (value, depth + 1, limit))
                return false;
    }
    return true;
}

static void
s_pack_json (msgpack_packer *pk, const json_t *json)
{
    switch (json_typeof (json)) {
        case JSON_OBJECT: {
            msgpack_pack_map (pk, json_object_size (json));
            const char *key;
            size_t key_size;
            json_t *value;
            json_object_keylen_foreach ((json_t *) json, key, key_size, value) {
                msgpack_pack_str (pk, key_size);
                msgpack_pack_str_body (pk, key, key_size);
                s_pack_json (pk, value);
            }
            break;
        }
        case JSON_ARRAY: {
            msgpack_pack_array (pk, json_array_size (json));
            size_t index;
            json_t *item;
            json_array_foreach (json, index, item)
                s_pack_json (pk, item);
            break;
        }
        case JSON_STRING: {
            size_t length = json_string_length (json);
            msgpack_pack_str (pk, length);
            msgpack_pack_str_body (pk, json_string_value (json), length);
            break;
        }
        case JSON_INTEGER:
            msgpack_pack_int64 (pk, json_integer_value (json));
            break;
        case JSON_REAL:
            msgpack_pack_double (pk, json_real_value (json));
            break;
        case JSON_TRUE:
            msgpack_pack_true (pk);
            break;
        case JSON_FALSE:
            msgpack_pack_false (pk);
            break;
        case JSON_NULL:
            msgpack_pack_nil (pk);
            break;
    }
}

int
dsh_json_to_msgpack (msgpack_packer *pk, const json_t *json)
{
    assert (pk);
    assert (json);
    //  Checked before packing so that a refusal writes nothing.
    if (!s_depth_within (json, 0, DSH_DOC_MAX_DEPTH))
        return -1;
    s_pack_json (pk, json);
    return 0;
}

//  ---------------------------------------------------------------------
//  Typed JSON: the lossless view for humans and hooks

//  The one-key objects that stand for a value JSON cannot hold.
static const char *s_typed_keys [] = { "$bin", "$str", "$ext", "$u64", "$float", "$map" };

static bool
s_is_typed_key (const char *key, size_t size)
{
    for (size_t index = 0; index < sizeof s_typed_keys / sizeof s_typed_keys [0]; index++)
        if (strlen (s_typed_keys [index]) == size && memcmp (s_typed_keys [index], key, size) == 0)
            return true;
    return false;
}

static json_t *
s_typed (const char *key, json_t *value)
{
    json_t *object = json_object ();
    if (!value || json_object_set_new (object, key, value)) {
        json_decref (object);
        return NULL;
    }
    return object;
}

static json_t *
s_base64 (const char *data, size_t size)
{
    msgpack_object_bin bin = { (uint32_t) size, data };
    return s_json_from_bin (&bin);
}

//  True if a map can be a JSON object in the view: every key a UTF-8 str,
//  and not one key that would read back as a typed form.
static bool
s_map_is_object (const msgpack_object_map *map)
{
    for (uint32_t index = 0; index < map->size; index++) {
        const msgpack_object *key = &map->ptr [index].key;
        if (key->type != MSGPACK_OBJECT_STR)
            return false;
        json_t *probe = json_stringn (key->via.str.ptr? key->via.str.ptr: "", key->via.str.size);
        if (!probe)
            return false;
        json_decref (probe);
    }
    return !(map->size == 1 && s_is_typed_key (map->ptr [0].key.via.str.ptr, map->ptr [0].key.via.str.size));
}

json_t *
dsh_json_view (const msgpack_object *obj)
{
    assert (obj);
    switch (obj->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            if (obj->via.u64 > (uint64_t) INT64_MAX) {
                char text [24];
                snprintf (text, sizeof text, "%" PRIu64, obj->via.u64);
                return s_typed ("$u64", json_string (text));
            }
            return json_integer ((json_int_t) obj->via.u64);
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            if (isnan (obj->via.f64))
                return s_typed ("$float", json_string ("nan"));
            if (isinf (obj->via.f64))
                return s_typed ("$float", json_string (obj->via.f64 < 0? "-inf": "inf"));
            return json_real (obj->via.f64);
        case MSGPACK_OBJECT_STR: {
            json_t *text = json_stringn (obj->via.str.ptr? obj->via.str.ptr: "", obj->via.str.size);
            return text? text: s_typed ("$str", s_base64 (obj->via.str.ptr, obj->via.str.size));
        }
        case MSGPACK_OBJECT_BIN:
            return s_typed ("$bin", s_base64 (obj->via.bin.ptr, obj->via.bin.size));
        case MSGPACK_OBJECT_EXT: {
            json_t *pair = json_array ();
            json_array_append_new (pair, json_integer (obj->via.ext.type));
            json_t *data = s_base64 (obj->via.ext.ptr, obj->via.ext.size);
            if (!data || json_array_append_new (pair, data)) {
                json_decref (pair);
                return NULL;
            }
            return s_typed ("$ext", pair);
        }
        case MSGPACK_OBJECT_ARRAY: {
            json_t *array = json_array ();
            for (uint32_t index = 0; array && index < obj->via.array.size; index++) {
                json_t *item = dsh_json_view (&obj->via.array.ptr [index]);
                if (!item || json_array_append_new (array, item)) {
                    json_decref (array);
                    array = NULL;
                }
            }
            return array;
        }
        case MSGPACK_OBJECT_MAP: {
            const msgpack_object_map *map = &obj->via.map;
            bool as_object = s_map_is_object (map);
            json_t *view = as_object? json_object (): json_array ();
            for (uint32_t index = 0; view && index < map->size; index++) {
                const msgpack_object_kv *entry = &map->ptr [index];
                json_t *value = dsh_json_view (&entry->val);
                if (as_object) {
                    if (!value || json_object_setn_new (view, entry->key.via.str.ptr? entry->key.via.str.ptr: "",
                                                        entry->key.via.str.size, value)) {
                        json_decref (view);
                        view = NULL;
                    }
                    continue;
                }
                json_t *key = dsh_json_view (&entry->key);
                json_t *pair = json_array ();
                if (!key || !value) {
                    json_decref (key);
                    json_decref (value);
                    json_decref (pair);
                    json_decref (view);
                    return NULL;
                }
                json_array_append_new (pair, key);
                json_array_append_new (pair, value);
                json_array_append_new (view, pair);
            }
            return view && !as_object? s_typed ("$map", view): view;
        }
        default:
            return dsh_json_from_msgpack (obj);
    }
}

bool
dsh_json_is_plain (const msgpack_object *obj)
{
    assert (obj);
    switch (obj->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            return obj->via.u64 <= (uint64_t) INT64_MAX;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            return isfinite (obj->via.f64);
        case MSGPACK_OBJECT_STR: {
            json_t *text = json_stringn (obj->via.str.ptr? obj->via.str.ptr: "", obj->via.str.size);
            json_decref (text);
            return text != NULL;
        }
        case MSGPACK_OBJECT_BIN:
        case MSGPACK_OBJECT_EXT:
            return false;
        case MSGPACK_OBJECT_ARRAY:
            for (uint32_t index = 0; index < obj->via.array.size; index++)
                if (!dsh_json_is_plain (&obj->via.array.ptr [index]))
                    return false;
            return true;
        case MSGPACK_OBJECT_MAP:
            if (!s_map_is_object (&obj->via.map))
                return false;
            for (uint32_t index = 0; index < obj->via.map.size; index++)
                if (!dsh_json_is_plain (&obj->via.map.ptr [index].val))
                    return false;
            return true;
        default:
            return true;
    }
}

static int
s_view_fail (char *error, size_t error_size, const char *form, const char *why)
{
    if (error && error_size)
        snprintf (error, error_size, "malformed typed value {\"%s\": ...}: %s", form, why);
    return -1;
}

//  Decoded base64 bytes of a typed form's text, or -1.
static int
s_unbase64 (const json_t *text, zchunk_t **bytes_p)
{
    *bytes_p = NULL;
    if (!json_is_string (text))
        return -1;
    if (json_string_length (text) == 0) {
        *bytes_p = zchunk_new (NULL, 0);
        return 0;
    }
    //  zarmour decodes leniently (it skips what is not in the alphabet, and
    //  its chunk ends with a NUL of its own), so the text is checked first:
    //  padded standard base64, and exactly the bytes it stands for are kept
    const char *chars = json_string_value (text);
    size_t length = json_string_length (text);
    size_t pads = length >= 1 && chars [length - 1] == '='? (length >= 2 && chars [length - 2] == '='? 2: 1): 0;
    if (length % 4 || strspn (chars, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                      != length - pads)
        return -1;
    size_t size = length / 4 * 3 - pads;
    zarmour_t *armour = zarmour_new ();
    zarmour_set_mode (armour, ZARMOUR_MODE_BASE64_STD);
    zarmour_set_pad (armour, true);
    zarmour_set_line_length (armour, 0);
    zchunk_t *decoded = zarmour_decode (armour, chars);
    zarmour_destroy (&armour);
    if (!decoded || zchunk_size (decoded) < size) {
        zchunk_destroy (&decoded);
        return -1;
    }
    *bytes_p = zchunk_new (zchunk_data (decoded), size);
    zchunk_destroy (&decoded);
    return 0;
}

static int s_pack_view (msgpack_packer *pk, const json_t *json, char *error, size_t error_size);

//  One typed form (a one-key object whose key is a typed key).
static int
s_pack_typed (msgpack_packer *pk, const char *form, const json_t *value, char *error, size_t error_size)
{
    zchunk_t *bytes = NULL;
    if (streq (form, "$bin") || streq (form, "$str")) {
        if (s_unbase64 (value, &bytes))
            return s_view_fail (error, error_size, form, "want a base64 string");
        size_t size = zchunk_size (bytes);
        if (streq (form, "$bin")) {
            msgpack_pack_bin (pk, size);
            msgpack_pack_bin_body (pk, zchunk_data (bytes), size);
        }
        else {
            msgpack_pack_str (pk, size);
            msgpack_pack_str_body (pk, zchunk_data (bytes), size);
        }
        zchunk_destroy (&bytes);
        return 0;
    }
    if (streq (form, "$ext")) {
        const json_t *type = json_array_get (value, 0);
        if (json_array_size (value) != 2 || !json_is_integer (type)
        ||  json_integer_value (type) < -128 || json_integer_value (type) > 127
        ||  s_unbase64 (json_array_get (value, 1), &bytes))
            return s_view_fail (error, error_size, form, "want [type (-128..127), base64 string]");
        msgpack_pack_ext (pk, zchunk_size (bytes), (int8_t) json_integer_value (type));
        msgpack_pack_ext_body (pk, zchunk_data (bytes), zchunk_size (bytes));
        zchunk_destroy (&bytes);
        return 0;
    }
    if (streq (form, "$u64")) {
        const char *text = json_string_value (value);
        char *end = NULL;
        errno = 0;
        unsigned long long number = text && isdigit ((unsigned char) *text)? strtoull (text, &end, 10): 0;
        if (!end || *end || errno == ERANGE)
            return s_view_fail (error, error_size, form, "want a string of decimal digits up to 2^64 - 1");
        msgpack_pack_uint64 (pk, (uint64_t) number);
        return 0;
    }
    if (streq (form, "$float")) {
        const char *text = json_string_value (value);
        if (text && streq (text, "nan"))
            msgpack_pack_double (pk, NAN);
        else
        if (text && (streq (text, "inf") || streq (text, "-inf")))
            msgpack_pack_double (pk, *text == '-'? -INFINITY: INFINITY);
        else
            return s_view_fail (error, error_size, form, "want \"nan\", \"inf\" or \"-inf\"");
        return 0;
    }
    //  $map: [[key, value], ...]
    if (!json_is_array (value))
        return s_view_fail (error, error_size, form, "want an array of [key, value] pairs");
    size_t index;
    const json_t *pair;
    json_array_foreach (value, index, pair)
        if (json_array_size (pair) != 2)
            return s_view_fail (error, error_size, form, "want an array of [key, value] pairs");
    msgpack_pack_map (pk, json_array_size (value));
    json_array_foreach (value, index, pair)
        if (s_pack_view (pk, json_array_get (pair, 0), error, error_size)
        ||  s_pack_view (pk, json_array_get (pair, 1), error, error_size))
            return -1;
    return 0;
}

static int
s_pack_view (msgpack_packer *pk, const json_t *json, char *error, size_t error_size)
{
    if (json_is_object (json)) {
        const char *key;
        size_t key_size;
        json_t *value;
        if (json_object_size (json) == 1) {
            json_object_keylen_foreach ((json_t *) json, key, key_size, value)
                if (s_is_typed_key (key, key_size))
                    return s_pack_typed (pk, key, value, error, error_size);
        }
        msgpack_pack_map (pk, json_object_size (json));
        json_object_keylen_foreach ((json_t *) json, key, key_size, value) {
            msgpack_pack_str (pk, key_size);
            msgpack_pack_str_body (pk, key, key_size);
            if (s_pack_view (pk, value, error, error_size))
                return -1;
        }
        return 0;
    }
    if (json_is_array (json)) {
        msgpack_pack_array (pk, json_array_size (json));
        size_t index;
        json_t *item;
        json_array_foreach (json, index, item)
            if (s_pack_view (pk, item, error, error_size))
                return -1;
        return 0;
    }
    s_pack_json (pk, json);
    return 0;
}

int
dsh_json_view_to_msgpack (msgpack_packer *pk, const json_t *json, char *error, size_t error_size)
{
    assert (pk);
    assert (json);
    if (!s_depth_within (json, 0, DSH_DOC_MAX_DEPTH)) {
        if (error && error_size)
            snprintf (error, error_size, "JSON nests deeper than %d", DSH_DOC_MAX_DEPTH);
        return -1;
    }
    //  Packed into a buffer of its own first, so that a malformed typed
    //  form deep inside writes nothing to pk
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer local;
    msgpack_packer_init (&local, &sbuf, msgpack_sbuffer_write);
    int rc = s_pack_view (&local, json, error, error_size);
    if (rc == 0)
        pk->callback (pk->data, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    return rc;
}

//  The length of the JSON number at text (0 if none starts there).
static size_t
s_number_length (const char *text, size_t size)
{
    size_t at = 0;
    if (at < size && text [at] == '-')
        at++;
    size_t digits = at;
    while (at < size && (isdigit ((unsigned char) text [at]) || strchr (".eE+-", text [at])))
        at++;
    return at > digits? at: 0;
}

//  text with every number jansson cannot hold rewritten as a double it
//  can: integers past int64 as "%.17g" (a real), overflowing reals as
//  +-DBL_MAX. Strings are copied untouched. Caller frees; sets *size_p.
static char *
s_numbers_tamed (const char *text, size_t size, size_t *size_p)
{
    zchunk_t *tamed = zchunk_new (NULL, size + 64);
    bool in_string = false;
    size_t at = 0;
    while (at < size) {
        char c = text [at];
        if (in_string) {
            size_t run = 1;
            if (c == '\\' && at + 1 < size)
                run = 2;
            else
            if (c == '"')
                in_string = false;
            zchunk_extend (tamed, text + at, run);
            at += run;
            continue;
        }
        size_t length = (c == '-' || isdigit ((unsigned char) c))? s_number_length (text + at, size - at): 0;
        if (length == 0) {
            in_string = c == '"';
            zchunk_extend (tamed, text + at, 1);
            at++;
            continue;
        }
        char token [512];
        if (length >= sizeof token) {
            //  Too long to be a number anyone meant: jansson will say so
            zchunk_extend (tamed, text + at, length);
            at += length;
            continue;
        }
        memcpy (token, text + at, length);
        token [length] = 0;
        bool integral = strcspn (token, ".eE") == length;
        errno = 0;
        if (integral) {
            strtoll (token, NULL, 10);
            if (errno != ERANGE) {
                zchunk_extend (tamed, token, length);
                at += length;
                continue;
            }
        }
        errno = 0;
        double value = strtod (token, NULL);
        char replaced [64];
        if (errno == ERANGE && fabs (value) > 1.0)
            snprintf (replaced, sizeof replaced, "%.17g", value < 0? -DBL_MAX: DBL_MAX);
        else
        if (integral)
            snprintf (replaced, sizeof replaced, "%.17e", value);
        else {
            zchunk_extend (tamed, token, length);
            at += length;
            continue;
        }
        zchunk_extend (tamed, replaced, strlen (replaced));
        at += length;
    }
    *size_p = zchunk_size (tamed);
    char *copy = (char *) malloc (*size_p + 1);
    assert (copy);
    memcpy (copy, zchunk_data (tamed), *size_p);
    copy [*size_p] = 0;
    zchunk_destroy (&tamed);
    return copy;
}

json_t *
dsh_json_parse (const char *text, size_t size, size_t flags, json_error_t *error)
{
    assert (text);
    flags |= JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES;
    json_error_t local;
    json_t *json = json_loadb (text, size, flags, &local);
    //  The rare number jansson cannot hold costs a second pass; every
    //  other text is parsed once
    if (!json && (strstr (local.text, "too big integer") || strstr (local.text, "real number overflow"))) {
        size_t tamed_size;
        char *tamed = s_numbers_tamed (text, size, &tamed_size);
        json = json_loadb (tamed, tamed_size, flags, &local);
        free (tamed);
    }
    if (!json && error)
        *error = local;
    return json;
}

int
dsh_json_text_to_msgpack (const char *text, msgpack_sbuffer *sbuf,
                          char *error, size_t error_size)
{
    assert (text);
    assert (sbuf);
    //  Left empty on failure too, so destroying it is always safe.
    msgpack_sbuffer_init (sbuf);

    //  Any root value is accepted (a CLI may pass a bare scalar); the
    //  caller decides what shape it needs.
    json_error_t json_error;
    json_t *json = dsh_json_parse (text, strlen (text), JSON_DECODE_ANY, &json_error);
    if (!json) {
        if (error && error_size)
            snprintf (error, error_size, "invalid JSON at line %d column %d: %s",
                      json_error.line, json_error.column, json_error.text);
        return -1;
    }
    msgpack_packer packer;
    msgpack_packer_init (&packer, sbuf, msgpack_sbuffer_write);
    int rc = dsh_json_to_msgpack (&packer, json);
    json_decref (json);
    if (rc) {
        if (error && error_size)
            snprintf (error, error_size, "JSON nests deeper than %d", DSH_DOC_MAX_DEPTH);
        return -1;
    }
    return 0;
}
