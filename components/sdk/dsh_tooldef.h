/*  =========================================================================
    dsh_tooldef - typed tool definitions: a parameter spec written as static
    data, its JSON Schema, and argument validation before the handler runs

    The C counterpart of defineTool / SchemaSpec in dsh-tools (the
    single-process design dsh grew from). An author declares parameters
    once with designated initializers; dsh derives the JSON Schema that goes
    on the wire and checks every call's arguments against the spec before
    the handler sees them. The rules and messages are those of dsh-tools,
    to the letter:

      - conversion: {type} plus description only when non-empty, enum when
        present, default when present; an object gets properties, and
        required only when non-empty (declaration order); an array gets items;
        the top level is {type:"object", properties, required?};
      - validation: a root that is not a map gives the single violation
        "arguments" must be an object; keys in declaration order; absent and
        required: missing required property "<path>"; absent and optional:
        skipped; nil is not absent; "<path>" must be a string (number,
        integer, boolean, object, array likewise); enum after the type check:
        "<path>" must be one of ["red","green"] (compact JSON); extra keys
        allowed; defaults never applied; an object without properties or an
        array without items is only type-checked; every failing array element
        is reported; one violation per property apart from nested ones;
        paths look like config.host, tags[1], servers[1].host.

    Tools announced with a raw JSON Schema are not validated by dsh.
    =========================================================================
*/

#ifndef DSH_TOOLDEF_H_INCLUDED
#define DSH_TOOLDEF_H_INCLUDED

#include <czmq.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The type of a parameter.
typedef enum {
    DSH_TYPE_STRING = 1,
    DSH_TYPE_NUMBER,            //  any integer or float
    DSH_TYPE_INTEGER,           //  an integer, or a float with no fraction
    DSH_TYPE_BOOLEAN,
    DSH_TYPE_OBJECT,
    DSH_TYPE_ARRAY
} dsh_type_t;

//  A tri-state hint: unset hints are left out of the annotations, so MCP's
//  defaults apply to them.
typedef enum {
    DSH_HINT_UNSET = 0,
    DSH_HINT_TRUE,
    DSH_HINT_FALSE
} dsh_hint_t;

typedef struct dsh_param_t dsh_param_t;

//  One parameter. Lists of parameters end with an entry whose name is NULL.
struct dsh_param_t {
    const char *name;                   //  property key (ignored for items)
    dsh_type_t type;
    bool required;
    const char *description;            //  NULL or "" = none
    //  Allowed values, NULL-terminated. For a string parameter each entry is
    //  the string itself; for other types each entry is a JSON literal
    //  ("1", "2.5", "true").
    const char *const *enum_values;
    const char *default_json;           //  a JSON text, never applied
    const dsh_param_t *properties;      //  object: its properties, or NULL
    const dsh_param_t *items;           //  array: one entry for the elements
};

//  A tool's declaration: everything but its handler.
typedef struct {
    const char *name;                   //  1-128 of [A-Za-z0-9_.-]
    const char *description;
    const dsh_param_t *params;          //  NULL = no parameters
    const char *title;                  //  NULL = none
    dsh_hint_t read_only;               //  annotations.readOnlyHint
    dsh_hint_t destructive;             //  annotations.destructiveHint
    dsh_hint_t idempotent;              //  annotations.idempotentHint
    dsh_hint_t open_world;              //  annotations.openWorldHint
    //  Calls may run in parallel with other concurrency-safe calls. A
    //  read-only tool is concurrency-safe whatever this says.
    bool concurrency_safe;
    //  The handler enforces the call's meta "sandbox" itself (entry key
    //  "confined": true), so the sandbox stage lets it write without a
    //  human's approval
    bool confined;
} dsh_tooldef_t;

//  The JSON Schema of a parameter list: {type:"object", properties,
//  required?}. Total: any list converts. Caller owns the result.
json_t *
    dsh_params_to_json_schema (const dsh_param_t *params);

//  The JSON Schema of one parameter (the name is not part of it).
json_t *
    dsh_param_to_json_schema (const dsh_param_t *param);

//  The wire tool entry for a definition: {name, description, parameters,
//  title?, annotations?, concurrencySafe?, confined?}. Caller owns the result.
json_t *
    dsh_tooldef_to_json (const dsh_tooldef_t *def);

//  Validate args against params. Appends one string per violation to
//  violations (a zlistx of char *, with destructor set by the caller, or
//  NULL to only count). Returns the number of violations; 0 = valid.
//  Total: args may be NULL or any msgpack value.
size_t
    dsh_params_validate (const dsh_param_t *params, const msgpack_object *args,
                         zlistx_t *violations);

//  The error text for a failed validation, "Error: invalid arguments: v1;
//  v2", or NULL when args are valid. Caller frees it.
char *
    dsh_params_check (const dsh_param_t *params, const msgpack_object *args);

#ifdef __cplusplus
}
#endif

#endif
