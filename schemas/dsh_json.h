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
