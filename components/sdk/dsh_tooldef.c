/*  =========================================================================
    dsh_tooldef - typed tool definitions: a parameter spec written as static
    data, its JSON Schema, and argument validation before the handler runs

    Conversion and validation read the same spec through the same helpers
    (s_type_name, s_enum_json, s_literal), so what the schema on the wire
    promises is exactly what validation enforces. Both are total:

      - an enum entry or default_json that is not valid JSON (or, for a
        string parameter, not valid UTF-8) is left out, of the schema and of
        the values validation accepts alike; an enum whose entries are all
        left out is an empty enum, which nothing satisfies;
      - a parameter with a type outside dsh_type_t gets no "type" keyword and
        no type check (only its enum, if any, is checked);
      - enum values compare as JSON values do, with numbers compared by value:
        1, 1.0 and the literal "1" are equal, 1.5 equals only 1.5;
      - a key given twice in an arguments map is checked at every occurrence,
        so whichever one a handler reads has been checked; the first failing
        occurrence is the one reported.
    =========================================================================
*/

#include "dsh_tooldef.h"

#include <math.h>
#include <string.h>

//  Collects violations, or only counts them when list is NULL.
typedef struct {
    zlistx_t *list;
    size_t count;
} s_report_t;

static void
s_report (s_report_t *report, const char *format, ...)
    __attribute__ ((format (printf, 2, 3)));

static void
s_report (s_report_t *report, const char *format, ...)
{
    report->count++;
    if (!report->list)
        return;
    va_list args;
    va_start (args, format);
    char *text = zsys_vprintf (format, args);
    va_end (args);
    if (text)
        zlistx_add_end (report->list, text);
}

static const char *
s_type_name (dsh_type_t type)
{
    switch (type) {
        case DSH_TYPE_STRING:  return "string";
        case DSH_TYPE_NUMBER:  return "number";
        case DSH_TYPE_INTEGER: return "integer";
        case DSH_TYPE_BOOLEAN: return "boolean";
        case DSH_TYPE_OBJECT:  return "object";
        case DSH_TYPE_ARRAY:   return "array";
    }
    return NULL;
}

//  The type as it reads after "must be": "a string", "an integer".
static const char *
s_type_phrase (dsh_type_t type)
{
    switch (type) {
        case DSH_TYPE_STRING:  return "a string";
        case DSH_TYPE_NUMBER:  return "a number";
        case DSH_TYPE_INTEGER: return "an integer";
        case DSH_TYPE_BOOLEAN: return "a boolean";
        case DSH_TYPE_OBJECT:  return "an object";
        case DSH_TYPE_ARRAY:   return "an array";
    }
    return "valid";
}

//  A JSON value from a literal, or NULL if text is NULL or not valid JSON.
static json_t *
s_literal (const char *text)
{
    if (!text)
        return NULL;
    return json_loads (text, JSON_DECODE_ANY, NULL);
}

//  The enum of param as a JSON array, or NULL if param has none.
static json_t *
s_enum_json (const dsh_param_t *param)
{
    if (!param->enum_values)
        return NULL;
    json_t *values = json_array ();
    for (const char *const *entry = param->enum_values; *entry; entry++) {
        json_t *value = param->type == DSH_TYPE_STRING
                      ? json_string (*entry)
                      : s_literal (*entry);
        if (value)
            json_array_append_new (values, value);
    }
    return values;
}

//  A number either as an exact integer (sign and magnitude below 2^64) or,
//  when it has a fraction, is not finite or is too large, as a double.
typedef struct {
    bool exact;
    bool negative;
    uint64_t magnitude;
    double real;
} s_number_t;

//  True if value is finite and has no fraction. Every double of magnitude
//  2^53 or more is an integer, and every one below fits int64 exactly, so
//  this needs no libm.
static bool
s_is_integral (double value)
{
    return isfinite (value)
        && (fabs (value) >= 0x1p53 || value == (double) (int64_t) value);
}

static s_number_t
s_number_from_double (double value)
{
    s_number_t number = { .real = value };
    if (s_is_integral (value) && fabs (value) < 0x1p64) {
        number.exact = true;
        number.negative = value < 0;
        number.magnitude = (uint64_t) fabs (value);
    }
    return number;
}

static s_number_t
s_number_from_int64 (int64_t value)
{
    s_number_t number = { .exact = true, .negative = value < 0 };
    number.magnitude = value < 0? (uint64_t) (-(value + 1)) + 1: (uint64_t) value;
    return number;
}

//  Reads obj as a number; false if it is not one.
static bool
s_msgpack_number (const msgpack_object *obj, s_number_t *number)
{
    switch (obj->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            *number = (s_number_t) { .exact = true, .magnitude = obj->via.u64 };
            return true;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            *number = s_number_from_int64 (obj->via.i64);
            return true;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            *number = s_number_from_double (obj->via.f64);
            return true;
        default:
            return false;
    }
}

static bool
s_number_equal (s_number_t a, s_number_t b)
{
    if (a.exact != b.exact)
        return false;
    if (a.exact)
        return a.magnitude == b.magnitude
            && (a.negative == b.negative || a.magnitude == 0);
    return a.real == b.real;
}

static bool
s_str_equal (const msgpack_object *obj, const char *text, size_t size)
{
    return obj->type == MSGPACK_OBJECT_STR
        && obj->via.str.size == size
        && memcmp (obj->via.str.ptr, text, size) == 0;
}

//  True if the msgpack value equals the JSON value.
static bool
s_value_equal (const msgpack_object *obj, const json_t *json)
{
    switch (json_typeof (json)) {
        case JSON_NULL:
            return obj->type == MSGPACK_OBJECT_NIL;
        case JSON_TRUE:
        case JSON_FALSE:
            return obj->type == MSGPACK_OBJECT_BOOLEAN
                && obj->via.boolean == json_is_true (json);
        case JSON_STRING:
            return s_str_equal (obj, json_string_value (json), json_string_length (json));
        case JSON_INTEGER:
        case JSON_REAL: {
            s_number_t number;
            if (!s_msgpack_number (obj, &number))
                return false;
            s_number_t literal = json_is_integer (json)
                ? s_number_from_int64 (json_integer_value (json))
                : s_number_from_double (json_real_value (json));
            return s_number_equal (number, literal);
        }
        case JSON_ARRAY: {
            if (obj->type != MSGPACK_OBJECT_ARRAY
            ||  obj->via.array.size != json_array_size (json))
                return false;
            for (uint32_t index = 0; index < obj->via.array.size; index++)
                if (!s_value_equal (&obj->via.array.ptr [index], json_array_get (json, index)))
                    return false;
            return true;
        }
        case JSON_OBJECT: {
            if (obj->type != MSGPACK_OBJECT_MAP
            ||  obj->via.map.size != json_object_size (json))
                return false;
            const char *key;
            json_t *value;
            json_object_foreach ((json_t *) json, key, value) {
                bool found = false;
                for (uint32_t index = 0; index < obj->via.map.size && !found; index++) {
                    const msgpack_object_kv *kv = &obj->via.map.ptr [index];
                    found = s_str_equal (&kv->key, key, strlen (key))
                         && s_value_equal (&kv->val, value);
                }
                if (!found)
                    return false;
            }
            return true;
        }
    }
    return false;
}

static bool
s_type_matches (dsh_type_t type, const msgpack_object *obj)
{
    s_number_t number;
    bool is_float = obj->type == MSGPACK_OBJECT_FLOAT32 || obj->type == MSGPACK_OBJECT_FLOAT64;
    switch (type) {
        case DSH_TYPE_STRING:  return obj->type == MSGPACK_OBJECT_STR;
        case DSH_TYPE_NUMBER:  return s_msgpack_number (obj, &number);
        case DSH_TYPE_INTEGER: return s_msgpack_number (obj, &number)
                                   && (!is_float || s_is_integral (obj->via.f64));
        case DSH_TYPE_BOOLEAN: return obj->type == MSGPACK_OBJECT_BOOLEAN;
        case DSH_TYPE_OBJECT:  return obj->type == MSGPACK_OBJECT_MAP;
        case DSH_TYPE_ARRAY:   return obj->type == MSGPACK_OBJECT_ARRAY;
    }
    return true;
}

//  Adds {properties, required?} for a parameter list to schema.
static void
s_add_properties (json_t *schema, const dsh_param_t *params)
{
    json_t *properties = json_object ();
    json_t *required = json_array ();
    for (const dsh_param_t *param = params; param && param->name; param++) {
        json_object_set_new (properties, param->name, dsh_param_to_json_schema (param));
        if (param->required)
            json_array_append_new (required, json_string (param->name));
    }
    json_object_set_new (schema, "properties", properties);
    if (json_array_size (required) > 0)
        json_object_set_new (schema, "required", required);
    else
        json_decref (required);
}

json_t *
dsh_params_to_json_schema (const dsh_param_t *params)
{
    json_t *schema = json_object ();
    json_object_set_new (schema, "type", json_string ("object"));
    s_add_properties (schema, params);
    return schema;
}

json_t *
dsh_param_to_json_schema (const dsh_param_t *param)
{
    json_t *schema = json_object ();
    if (!param)
        return schema;
    const char *type = s_type_name (param->type);
    if (type)
        json_object_set_new (schema, "type", json_string (type));
    if (param->description && *param->description)
        json_object_set_new (schema, "description", json_string (param->description));
    json_t *values = s_enum_json (param);
    if (values)
        json_object_set_new (schema, "enum", values);
    json_t *fallback = s_literal (param->default_json);
    if (fallback)
        json_object_set_new (schema, "default", fallback);
    if (param->type == DSH_TYPE_OBJECT && param->properties)
        s_add_properties (schema, param->properties);
    if (param->type == DSH_TYPE_ARRAY && param->items)
        json_object_set_new (schema, "items", dsh_param_to_json_schema (param->items));
    return schema;
}

//  Sets a boolean annotation when the hint is set either way.
static void
s_add_hint (json_t *annotations, const char *key, dsh_hint_t hint)
{
    if (hint == DSH_HINT_TRUE || hint == DSH_HINT_FALSE)
        json_object_set_new (annotations, key, json_boolean (hint == DSH_HINT_TRUE));
}

json_t *
dsh_tooldef_to_json (const dsh_tooldef_t *def)
{
    assert (def);
    json_t *entry = json_object ();
    json_object_set_new (entry, "name", json_string (def->name? def->name: ""));
    json_object_set_new (entry, "description",
                         json_string (def->description? def->description: ""));
    json_object_set_new (entry, "parameters", dsh_params_to_json_schema (def->params));
    if (def->title && *def->title)
        json_object_set_new (entry, "title", json_string (def->title));

    json_t *annotations = json_object ();
    s_add_hint (annotations, "readOnlyHint", def->read_only);
    s_add_hint (annotations, "destructiveHint", def->destructive);
    s_add_hint (annotations, "idempotentHint", def->idempotent);
    s_add_hint (annotations, "openWorldHint", def->open_world);
    if (json_object_size (annotations) > 0)
        json_object_set_new (entry, "annotations", annotations);
    else
        json_decref (annotations);

    if (def->concurrency_safe || def->read_only == DSH_HINT_TRUE)
        json_object_set_new (entry, "concurrencySafe", json_true ());
    if (def->confined)
        json_object_set_new (entry, "confined", json_true ());
    return entry;
}

static void
    s_check_properties (s_report_t *report, const dsh_param_t *params,
                        const msgpack_object *map, const char *prefix);

//  Checks one present value against param; path names it in messages.
static void
s_check_value (s_report_t *report, const dsh_param_t *param,
               const msgpack_object *obj, const char *path)
{
    if (!s_type_matches (param->type, obj)) {
        s_report (report, "\"%s\" must be %s", path, s_type_phrase (param->type));
        return;
    }
    json_t *values = s_enum_json (param);
    if (values) {
        bool allowed = false;
        for (size_t index = 0; index < json_array_size (values) && !allowed; index++)
            allowed = s_value_equal (obj, json_array_get (values, index));
        if (!allowed) {
            char *text = json_dumps (values, JSON_COMPACT | JSON_ENCODE_ANY);
            s_report (report, "\"%s\" must be one of %s", path, text? text: "[]");
            free (text);
        }
        json_decref (values);
        if (!allowed)
            return;
    }
    if (param->type == DSH_TYPE_OBJECT && param->properties)
        s_check_properties (report, param->properties, obj, path);
    else
    if (param->type == DSH_TYPE_ARRAY && param->items) {
        for (uint32_t index = 0; index < obj->via.array.size; index++) {
            char *item_path = zsys_sprintf ("%s[%u]", path, index);
            if (item_path)
                s_check_value (report, param->items, &obj->via.array.ptr [index], item_path);
            zstr_free (&item_path);
        }
    }
}

//  Checks the declared keys of a map, in declaration order.
static void
s_check_properties (s_report_t *report, const dsh_param_t *params,
                    const msgpack_object *map, const char *prefix)
{
    for (const dsh_param_t *param = params; param && param->name; param++) {
        char *path = prefix? zsys_sprintf ("%s.%s", prefix, param->name)
                           : strdup (param->name);
        const char *shown = path? path: param->name;
        size_t name_size = strlen (param->name);
        bool present = false;
        for (uint32_t index = 0; index < map->via.map.size; index++) {
            const msgpack_object_kv *kv = &map->via.map.ptr [index];
            if (!s_str_equal (&kv->key, param->name, name_size))
                continue;
            present = true;
            size_t before = report->count;
            s_check_value (report, param, &kv->val, shown);
            if (report->count > before)
                break;
        }
        if (!present && param->required)
            s_report (report, "missing required property \"%s\"", shown);
        zstr_free (&path);
    }
}

size_t
dsh_params_validate (const dsh_param_t *params, const msgpack_object *args,
                     zlistx_t *violations)
{
    s_report_t report = { .list = violations };
    if (!args || args->type != MSGPACK_OBJECT_MAP)
        s_report (&report, "\"arguments\" must be an object");
    else
        s_check_properties (&report, params, args, NULL);
    return report.count;
}

char *
dsh_params_check (const dsh_param_t *params, const msgpack_object *args)
{
    zlistx_t *violations = zlistx_new ();
    zlistx_set_destructor (violations, (czmq_destructor *) zstr_free);
    char *text = NULL;
    if (dsh_params_validate (params, args, violations) > 0) {
        const char *lead = "Error: invalid arguments: ";
        size_t size = strlen (lead) + 1;
        for (char *line = zlistx_first (violations); line; line = zlistx_next (violations))
            size += strlen (line) + 2;
        text = (char *) malloc (size);
        if (text) {
            char *end = stpcpy (text, lead);
            const char *separator = "";
            for (char *line = zlistx_first (violations); line; line = zlistx_next (violations)) {
                end = stpcpy (stpcpy (end, separator), line);
                separator = "; ";
            }
        }
    }
    zlistx_destroy (&violations);
    return text;
}
