/*  =========================================================================
    dsh_parts - tool sets announced in parts, held until they are whole

    A component whose tool set does not fit in one message announces it in
    parts: ANNOUNCEs with part, parts and a slice of the set each
    (PROTOCOL.md, "The announce channel"). The registry hands each part it
    accepted here, after the checks any ANNOUNCE gets; when the last part
    of a set comes, the set comes back whole, to be applied as one ANNOUNCE.

    Rules (PROTOCOL.md, "Registry semantics", "Limits on untrusted input"):
      - a component has at most one assembly: a part of a newer generation
        replaces it, one of an older generation is dropped, a part that
        came already is ignored, one whose parts differs drops it;
      - every part of a set comes from one key (under CURVE);
      - an assembly holds at most max_set_bytes of tool entries, and all
        of them together, with what it takes to keep them, at most
        max_total_bytes: a part that would go past either drops its
        assembly;
      - an assembly not whole within the liveness window is dropped.

    Pure data, no sockets: the registry feeds it parts and the clock. The
    entries are kept as they were decoded, packed again (msgpack's shortest
    forms, as the catalog stores them), so what comes back is the values
    the parts' one decode checked.
    =========================================================================
*/

#ifndef DSH_PARTS_H_INCLUDED
#define DSH_PARTS_H_INCLUDED

#include "dsh_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_parts_t dsh_parts_t;

//  What became of a part.
typedef enum {
    DSH_PARTS_HELD,             //  kept: its set is not whole yet
    DSH_PARTS_WHOLE,            //  the set's last part: the set is handed back
    DSH_PARTS_IGNORED,          //  it came already, or its generation is older
    DSH_PARTS_FOREIGN,          //  from another key than its set's first part
    DSH_PARTS_DROPPED           //  it dropped its assembly (a bound, or parts)
} dsh_parts_status_t;

//  Create an empty table with its bounds in bytes: of one set's tool
//  entries, and of everything all sets hold.
dsh_parts_t *
    dsh_parts_new (size_t max_set_bytes, size_t max_total_bytes);

//  Destroy the table; safe twice.
void
    dsh_parts_destroy (dsh_parts_t **self_p);

//  Take one part (presence->parts is 2 or more, presence->part below it),
//  from key (NULL without CURVE) at now_ms. On DSH_PARTS_WHOLE, *set_p is a
//  new chunk holding one msgpack array, every part's entries in part order
//  (caller destroys), and *concurrency part 0's concurrency (0 if it did
//  not say); the assembly is gone. On anything else but DSH_PARTS_HELD,
//  reason says why.
dsh_parts_status_t
    dsh_parts_add (dsh_parts_t *self, const dsh_presence_t *presence, const char *key, int64_t now_ms,
                   zchunk_t **set_p, uint64_t *concurrency, char *reason, size_t reason_size);

//  Drop component's assembly if its generation is at most generation
//  (UINT64_MAX: whatever it is).
void
    dsh_parts_forget (dsh_parts_t *self, const char *component, uint64_t generation);

//  Drop the assemblies begun before now_ms - max_age_ms. Returns their
//  components' ids in a new list of char * (caller destroys).
zlistx_t *
    dsh_parts_expire (dsh_parts_t *self, int64_t now_ms, int64_t max_age_ms);

//  The bytes all assemblies hold, as counted against max_total_bytes.
size_t
    dsh_parts_bytes (dsh_parts_t *self);

//  Number of assemblies.
size_t
    dsh_parts_size (dsh_parts_t *self);

#ifdef __cplusplus
}
#endif

#endif
