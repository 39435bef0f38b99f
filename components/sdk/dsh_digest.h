/*  =========================================================================
    dsh_digest - the digests the protocol binds decisions to: a tool's
    definition (what a pin holds), a value's (an approval's arguments)

    Both are SHA-256, written as 64 lowercase hex digits, over canonical
    msgpack (dsh_pack_canonical: every map's entries sorted, shortest
    encodings), so two peers that hold the same value compute the same
    digest whatever their key order (PROTOCOL.md, "Pins").

    A definition is the tool entry's entries whose keys are among
    name, title, description, parameters, outputSchema, annotations and
    confined, as a map: what an agent reads in its prompt, and what the
    sandbox trusts. Other keys (and the broker's own quarantine marks)
    are left out.
    =========================================================================
*/

#ifndef DSH_DIGEST_H_INCLUDED
#define DSH_DIGEST_H_INCLUDED

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSH_DIGEST_SIZE 64          //  hex digits; a buffer needs one more

//  SHA-256 of size bytes, as hex and a NUL, into hex.
void
    dsh_digest_bytes (const void *data, size_t size, char *hex);

//  The digest of value's canonical form (NULL: of nil). Returns 0, or -1 if
//  value nests too deep to be made canonical.
int
    dsh_digest_value (const msgpack_object *value, char *hex);

//  The definition digest of a tool entry (a map). Returns 0, or -1 if it
//  is not a map or nests too deep.
int
    dsh_digest_definition (const msgpack_object *entry, char *hex);

//  The number of keys a definition covers.
#define DSH_DIGEST_DEFINITION_KEYS 7

//  The definition of a tool entry (a map) as a map object whose pairs
//  point into entry, in entry's order, filled into pairs. Returns 0, or -1
//  if entry is not a map.
int
    dsh_digest_definition_map (const msgpack_object *entry, msgpack_object_kv pairs [DSH_DIGEST_DEFINITION_KEYS],
                               msgpack_object *definition);

//  True if key (size bytes) is one a definition digest covers.
bool
    dsh_digest_definition_key (const char *key, size_t size);

#ifdef __cplusplus
}
#endif

#endif
