/*  =========================================================================
    dsh_pins - pinned tool definitions: what a reviewed tool said, so that a
    later change to it ("rug pull") is held back until an admin accepts it

    Pure data, no sockets and no store: the registry loads the stored pins
    into it, the catalog asks it to judge every definition it registers,
    and the registry takes the changes it made (a first sight pinned under
    tofu, an accept, a reject, a forget) to hand to the store's writer.

    A pin is a tool name's definition digest (dsh_digest_definition) and
    the definition itself (Typed JSON, for diffs), with who first offered
    it and who accepted it. Policy (PROTOCOL.md, "Pins"):
        off     nothing is pinned or judged;
        tofu    a name's first definition is pinned as it is seen; one that
                differs from its pin is quarantined;
        strict  only definitions an admin accepted are released; any other
                is quarantined, the first one too.
    Until the stored pins have been read once (a store that could not be
    read at start), every definition is quarantined under tofu and strict,
    and nothing is pinned: a changed tool never slips through a restart.
    =========================================================================
*/

#ifndef DSH_PINS_H_INCLUDED
#define DSH_PINS_H_INCLUDED

#include <czmq.h>
#include <jansson.h>
#include <msgpack.h>

#include "dsh_digest.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DSH_PINS_OFF = 0,
    DSH_PINS_TOFU,
    DSH_PINS_STRICT
} dsh_pins_policy_t;

//  One pin, as stored.
typedef struct {
    char *name;
    char digest [DSH_DIGEST_SIZE + 1];      //  the pinned definition's digest
    char *definition;                       //  its Typed JSON text
    char *component;                        //  who first offered it
    char *key;                              //  its CURVE key ("" on plain connections)
    int64_t first_ms;                       //  when it was pinned (wall clock)
    char *accepted_by;                      //  the admin who accepted it ("" under tofu)
    int64_t accepted_ms;
    char rejected [DSH_DIGEST_SIZE + 1];    //  an offered digest an admin rejected, or ""
} dsh_pin_t;

//  A change to write to the store.
typedef enum {
    DSH_PIN_FIRST,          //  insert unless the name has a pin (first writer wins)
    DSH_PIN_REPLACE,        //  insert or replace (accept, reject)
    DSH_PIN_FORGET          //  delete
} dsh_pin_op_kind_t;

typedef struct {
    dsh_pin_op_kind_t kind;
    dsh_pin_t *pin;         //  FORGET: only name is set
} dsh_pin_op_t;

//  The verdict on one definition.
typedef struct {
    bool quarantined;
    const char *reason;                     //  static text, when quarantined
    char digest [DSH_DIGEST_SIZE + 1];      //  the offered definition's
    char pinned [DSH_DIGEST_SIZE + 1];      //  the pin's, or "" if none
} dsh_pins_verdict_t;

#define DSH_PINS_CHANGED    "definition changed since it was pinned"
#define DSH_PINS_UNACCEPTED "not accepted yet (pins are strict)"
#define DSH_PINS_REJECTED   "rejected by an admin"
#define DSH_PINS_UNREAD     "the pins could not be read yet"

typedef struct _dsh_pins_t dsh_pins_t;

dsh_pin_t *
    dsh_pin_new (const char *name);

dsh_pin_t *
    dsh_pin_dup (const dsh_pin_t *self);

void
    dsh_pin_destroy (dsh_pin_t **self_p);

void
    dsh_pin_op_destroy (dsh_pin_op_t **self_p);

//  Parse "off", "tofu" or "strict". Returns 0, or -1.
int
    dsh_pins_policy_parse (const char *text, dsh_pins_policy_t *policy);

const char *
    dsh_pins_policy_name (dsh_pins_policy_t policy);

//  An empty set under policy, not loaded yet.
dsh_pins_t *
    dsh_pins_new (dsh_pins_policy_t policy);

void
    dsh_pins_destroy (dsh_pins_t **self_p);

dsh_pins_policy_t
    dsh_pins_policy (dsh_pins_t *self);

//  Replace the set with the stored pins (list of dsh_pin_t *, taken), but
//  for names changed here in the last few seconds, whose changes the store
//  may not have yet. Marks the set loaded. now_ms is zclock_mono.
void
    dsh_pins_load (dsh_pins_t *self, zlistx_t **pins_p, int64_t now_ms);

//  True once the stored pins were read.
bool
    dsh_pins_loaded (dsh_pins_t *self);

//  Judge a tool entry (a map) offered by component (key: its CURVE key, or
//  NULL). Under tofu, a name with no pin is pinned to it now (a change to
//  write). Returns 0 with verdict filled, or -1 if the entry is not a map.
int
    dsh_pins_judge (dsh_pins_t *self, const char *name, const msgpack_object *entry, const char *component,
                    const char *key, int64_t now_ms, dsh_pins_verdict_t *verdict);

//  The pin of name, or NULL.
const dsh_pin_t *
    dsh_pins_lookup (dsh_pins_t *self, const char *name);

//  Pin entry as name's definition, accepted by whom. Returns 0, or -1 if
//  the entry is not a map.
int
    dsh_pins_accept (dsh_pins_t *self, const char *name, const msgpack_object *entry, const char *component,
                     const char *key, const char *by, int64_t now_ms);

//  Note that an admin rejected the offered digest of name. Returns 0, or
//  -1 if name has no pin to keep (nothing pinned: under strict a pin with
//  no digest is made to hold the rejection).
int
    dsh_pins_reject (dsh_pins_t *self, const char *name, const char *digest, const char *by, int64_t now_ms);

//  Delete name's pin. Returns 0, or -1 if it had none.
int
    dsh_pins_forget (dsh_pins_t *self, const char *name, int64_t now_ms);

//  The names pinned, sorted (a new list of char * that owns them, with no
//  duplicator: an item added must be the caller's copy; caller destroys).
zlistx_t *
    dsh_pins_names (dsh_pins_t *self);

//  The changes made since the last call (list of dsh_pin_op_t *, caller
//  destroys), for the store.
zlistx_t *
    dsh_pins_take_ops (dsh_pins_t *self);

//  The Typed JSON of an entry's definition (new reference), or NULL.
json_t *
    dsh_pins_definition_json (const msgpack_object *entry);

//  The top-level keys whose values differ between two definitions (JSON
//  objects; NULL: none), sorted, comma-separated ("description, parameters"),
//  into text (cut to fit). "" if none differ.
void
    dsh_pins_changed_keys (const json_t *pinned, const json_t *offered, char *text, size_t size);

//  A readable diff of two definitions (JSON values; NULL: none), one line
//  per changed path: `- path: old` then `+ path: new`; at most max_bytes
//  (a last line says how many changes were left out). Caller frees.
char *
    dsh_pins_diff (const json_t *pinned, const json_t *offered, size_t max_bytes);

#ifdef __cplusplus
}
#endif

#endif
