/*  =========================================================================
    dsh_json - the JSON edge: msgpack values to jansson values and back

    dsh speaks msgpack on the wire and JSON at its edges (the CLI, MCP, hook
    processes). Integers stay integers (int64 and uint64 up to INT64_MAX;
    larger unsigned values become reals), floats stay floats, strings are
    UTF-8 both ways, and nesting is preserved. msgpack bin values become
    base64 strings in JSON (the MCP convention); ext values are refused.
    =========================================================================
*/

#ifndef DSH_JSON_H_INCLUDED
#define DSH_JSON_H_INCLUDED

#include <jansson.h>
#include <msgpack.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  A new JSON value for obj, or NULL if obj holds an ext value, a map key
//  that is not a str, or a str that is not valid UTF-8.
json_t *
    dsh_json_from_msgpack (const msgpack_object *obj);

//  The faithful view of obj that humans and hooks are shown ("Typed JSON"
//  in PROTOCOL.md): plain JSON wherever JSON holds the value as it is, and
//  where it cannot, a one-key object that says what the value is:
//      {"$str": base64}          a str whose bytes are not UTF-8
//      {"$bin": base64}          a bin
//      {"$ext": [type, base64]}  an ext
//      {"$u64": "decimal"}       an unsigned integer beyond INT64_MAX
//      {"$float": "nan"|"inf"|"-inf"}
//      {"$map": [[key, value], ...]}  a map with a key that is not a UTF-8
//                                str, or whose one key is a typed key
//  Never lossy and never null for a value that is not null. Returns NULL
//  only if obj nests deeper than jansson can be given.
json_t *
    dsh_json_view (const msgpack_object *obj);

//  True if obj needs no typed form: its view is plain JSON.
bool
    dsh_json_is_plain (const msgpack_object *obj);

//  Pack a view back (the inverse of dsh_json_view): typed forms become the
//  values they stand for. Returns 0, or -1 with a reason for a malformed
//  typed form or nesting deeper than DSH_DOC_MAX_DEPTH (nothing is packed).
int
    dsh_json_view_to_msgpack (msgpack_packer *pk, const json_t *json, char *error, size_t error_size);

//  Pack json as msgpack. Returns 0, or -1 if it nests deeper than
//  DSH_DOC_MAX_DEPTH.
int
    dsh_json_to_msgpack (msgpack_packer *pk, const json_t *json);

//  Parse size bytes of JSON text, any valid JSON: strings may hold NUL
//  (\u0000), an integer beyond int64 becomes the nearest double, and a
//  number beyond the double range becomes the largest finite double of
//  its sign (JSON has no infinity). Keys repeated in one object are
//  refused: two readers could take different values. flags are jansson's
//  decoding flags (JSON_DECODE_ANY for a bare scalar). Returns the value,
//  or NULL with jansson's error.
json_t *
    dsh_json_parse (const char *text, size_t size, size_t flags, json_error_t *error);

//  Parse JSON text (at most DSH_DOC_MAX_DEPTH deep) and pack it as msgpack
//  into a new buffer. Returns 0 and fills *sbuf (caller destroys it with
//  msgpack_sbuffer_destroy), or -1 with a one-line reason in error.
int
    dsh_json_text_to_msgpack (const char *text, msgpack_sbuffer *sbuf,
                              char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
