/*  =========================================================================
    dsh_doc - one msgpack document decoded from untrusted bytes, within limits

    msgpack-c has no limits for untrusted input: an array header allocates
    count x 24 bytes before any element is read, and nesting past 32 fails with
    NOMEM. dsh_doc first scans the bytes (every container count checked against
    the bytes left, nesting depth bounded, every length checked against the
    end), and only then lets msgpack-c unpack them. Trailing bytes after the one
    object are an error, and so is a truncated object.

    Decoding is strict, once, for every message dsh reads: a map anywhere in
    the object that repeats a key, or has an array or a map as a key, is
    refused. Keys are one key when any reader could take them for one: equal
    bytes in a str or a bin, equal numbers (1 and 1.0), a number and the str
    of its decimal text (JavaScript's property names). What one reader
    checked is then what every later reader of the same bytes sees.

    The tree's strings and binaries point into the input bytes: the caller
    keeps them alive for as long as the document lives.
    =========================================================================
*/

#ifndef DSH_DOC_H_INCLUDED
#define DSH_DOC_H_INCLUDED

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Deepest nesting of arrays and maps that dsh accepts (the root counts as 1).
#define DSH_DOC_MAX_DEPTH 24

typedef struct _dsh_doc_t dsh_doc_t;

//  Decode one msgpack object from data (borrowed, must outlive the document).
//  Returns NULL on bad input, including a map that repeats a key ("duplicate
//  key \"x\" in the map at body.arguments"), and writes a one-line reason
//  into error.
dsh_doc_t *
    dsh_doc_new (const void *data, size_t size, char *error, size_t error_size);

//  Destroy the document; safe to call twice.
void
    dsh_doc_destroy (dsh_doc_t **self_p);

//  The decoded root object.
const msgpack_object *
    dsh_doc_root (dsh_doc_t *self);

//  A NUL-terminated copy of a str object, allocated in the document (freed
//  with it). NULL if obj is NULL or not a str, or if it holds a NUL byte.
char *
    dsh_doc_strdup (dsh_doc_t *self, const msgpack_object *obj);

//  Check that data holds exactly one well-formed msgpack object whose nesting
//  is at most max_depth and whose every count and length fits the bytes left.
//  Returns 0, or -1 with a one-line reason in error.
int
    dsh_msgpack_scan (const void *data, size_t size, int max_depth,
                      char *error, size_t error_size);

//  The size in bytes of the one msgpack object at the start of data (which
//  may go on past it), checking every length against size and nesting
//  against DSH_DOC_MAX_DEPTH as dsh_msgpack_scan does; 0 if data does not
//  start with one whole, well-formed object.
size_t
    dsh_msgpack_skip (const void *data, size_t size);

//  If data starts with a map header (fixmap, map16 or map32), store its entry
//  count in *count and return the header's size in bytes (1, 3 or 5); else 0.
//  The entries themselves are not checked.
size_t
    dsh_msgpack_map_header (const void *data, size_t size, uint32_t *count);

//  The value under key in a map object, or NULL (also when map is not a map).
const msgpack_object *
    dsh_map_get (const msgpack_object *map, const char *key);

//  The unsigned integer under key in a map object if it lies in [min, max],
//  else fallback: a setting a peer sends (heartbeatMs, liveness), never
//  trusted beyond its bounds.
int
    dsh_map_int_in (const msgpack_object *map, const char *key, int min, int max, int fallback);

//  True if obj is a str equal to text.
bool
    dsh_str_eq (const msgpack_object *obj, const char *text);

//  Pack obj with every map's entries sorted by key bytes, so that equal
//  values have equal bytes. Returns 0, or -1 if obj nests deeper than
//  DSH_DOC_MAX_DEPTH.
int
    dsh_pack_canonical (msgpack_packer *pk, const msgpack_object *obj);

//  Write a map key into text [size] (size >= 4) for a reason: at most 40 of
//  its bytes, any byte outside printable ASCII, a quote or a backslash as
//  \xNN, and "..." if it was cut, since the key is a sender's.
void
    dsh_quote_key (const char *key, size_t key_size, char *text, size_t size);

//  Pack a NUL-terminated C string as a msgpack str.
void
    dsh_pack_cstr (msgpack_packer *pk, const char *text);

#ifdef __cplusplus
}
#endif

#endif
