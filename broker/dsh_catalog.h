/*  =========================================================================
    dsh_catalog - the registry's state: components, the tools they provide,
    and the numbered change events every change produces

    Pure data, no sockets: the registry actor feeds it announcements,
    heartbeats, withdrawals and the clock, and publishes what it returns.

    Rules (PROTOCOL.md, "Registry semantics"):
      - an ANNOUNCE is a component's whole tool set; applying the same set
        again changes nothing and produces no event;
      - a name is owned by the providers that serve it with byte-identical
        canonical entries; another component announcing the same entry is a
        replica; a different entry is refused, the first owner keeps it;
      - the sole provider of a name may change its entry (tool.updated);
      - an entry is held and served as its first provider announced it,
        keys in the author's order; only comparisons use canonical bytes;
      - tools keep the order in which their names were first registered;
      - every change gets the next sequence number;
      - a tool entry over max_tool_bytes (canonical), or past a component's
        max_tools, is refused: what one component can make the broker hold
        is bounded in bytes.
    =========================================================================
*/

#ifndef DSH_CATALOG_H_INCLUDED
#define DSH_CATALOG_H_INCLUDED

#include "dsh_proto.h"
#include "dsh_pins.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_catalog_t dsh_catalog_t;

//  One change, as the catalog reports it.
typedef struct {
    uint64_t seq;
    const char *kind;           //  one of the DSH_EV_ constants
    char *component;
    char *name;                 //  tool events: the tool's name
    zchunk_t *tool;             //  registered, updated: the entry, as announced
    zlistx_t *tools;            //  component events: names of its tools
    char *reason;               //  component.left: "withdrawn" or "expired";
                                //  component.refused: why; tool.changed: why
                                //  it is quarantined
    char *digest;               //  tool.changed, .accepted, .rejected: the
                                //  offered definition's digest
    char *pinned;               //  tool.changed: the pin's digest, if any
    char *diff;                 //  tool.changed: pinned -> offered, readable
    char *by;                   //  tool.accepted, .rejected, .forgotten: who
} dsh_event_t;

//  One announced tool the catalog would not take, and why.
typedef struct {
    char *component;
    char *name;                 //  may be NULL when the entry had no name
    char *reason;
} dsh_refusal_t;

//  Destroy an event; safe twice.
void
    dsh_event_destroy (dsh_event_t **self_p);

//  Encode an event's body {seq, epoch, kind, component, name?, tool?,
//  tools?, reason?}.
zframe_t *
    dsh_event_encode (dsh_event_t *self, uint64_t epoch);

//  Destroy a refusal; safe twice.
void
    dsh_refusal_destroy (dsh_refusal_t **self_p);

//  Create an empty catalog.
dsh_catalog_t *
    dsh_catalog_new (void);

//  Limit what a component may register: entries of at most max_tool_bytes
//  canonical bytes, and at most max_tools tools. Until set, there are no
//  limits.
void
    dsh_catalog_set_limits (dsh_catalog_t *self, size_t max_tool_bytes, size_t max_tools);

//  Destroy the catalog; safe twice.
void
    dsh_catalog_destroy (dsh_catalog_t **self_p);

//  Apply a component's whole tool set (tools: the ANNOUNCE's array). New
//  events are appended to events (dsh_event_t *, caller's list with
//  destructor), refusals to refusals (dsh_refusal_t *). Returns 0.
int
    dsh_catalog_announce (dsh_catalog_t *self, const char *component, uint64_t generation,
                          const msgpack_object *tools, int64_t now_ms,
                          zlistx_t *events, zlistx_t *refusals);

//  Note that a component is alive. Returns 0 if it is known at that
//  generation, 1 if it must announce again (unknown, or another generation).
int
    dsh_catalog_touch (dsh_catalog_t *self, const char *component, uint64_t generation,
                       int64_t now_ms);

//  The generation a known component last announced. Returns 0, or -1 if
//  the component is unknown.
int
    dsh_catalog_generation (dsh_catalog_t *self, const char *component, uint64_t *generation);

//  Ids of components that should announce again because a name they were
//  refused has become free, in a new list of char * (caller destroys).
zlistx_t *
    dsh_catalog_take_resync (dsh_catalog_t *self);

//  Note that a known component is alive, whatever its generation (any
//  message from it counts). Returns 0 if known, -1 if not.
int
    dsh_catalog_seen (dsh_catalog_t *self, const char *component, int64_t now_ms);

//  Remove a component and every tool it provides. reason is "withdrawn" or
//  "expired". Returns 0, or -1 if it was not known.
int
    dsh_catalog_remove (dsh_catalog_t *self, const char *component, const char *reason,
                        zlistx_t *events);

//  Note that a WORK connection was refused component's id (held by a live
//  component): a component.refused event with the reason, numbered like
//  every change, appended to events. The catalog itself does not change.
void
    dsh_catalog_refuse_id (dsh_catalog_t *self, const char *component, const char *reason,
                           zlistx_t *events);

//  Ids of components not seen since now_ms - silence_ms, or whose WORK
//  route has been gone that long (heartbeats on the announce channel do not
//  bring it back), in a new list of char * (caller destroys). Nothing is
//  removed.
zlistx_t *
    dsh_catalog_silent (dsh_catalog_t *self, int64_t now_ms, int64_t silence_ms);

//  The entry of a tool as its first provider announced it, or NULL if no
//  such tool.
zchunk_t *
    dsh_catalog_tool (dsh_catalog_t *self, const char *name);

//  The SHA-256 (hex) of that entry, computed once per entry, or NULL if
//  no tool has the name. Points into the catalog.
const char *
    dsh_catalog_tool_digest (dsh_catalog_t *self, const char *name);

//  True if the tool's entry says annotations.idempotentHint: true.
bool
    dsh_catalog_idempotent (dsh_catalog_t *self, const char *name);

//  The provider that should take the next call to name: among the
//  reachable providers, one with room in its window, the one with the
//  fewest calls outstanding and held for it (the earliest on ties); an
//  unreachable one if there is no other. NULL if the tool is unknown.
//  except may name a component to skip, or be NULL.
const char *
    dsh_catalog_provider (dsh_catalog_t *self, const char *name, const char *except);

//  Note that a component's work socket refused a send at now_ms (it is not
//  connected): providers are chosen among the others until it speaks on
//  WORK again (dsh_catalog_seen), and it counts as silent once that lasts
//  longer than the liveness window.
void
    dsh_catalog_unreachable (dsh_catalog_t *self, const char *component, int64_t now_ms);

//  True if component is listed and not unreachable (dsh_catalog_unreachable
//  since it last spoke on WORK).
bool
    dsh_catalog_reachable (dsh_catalog_t *self, const char *component);

//  Count a call started on (+1) or finished by (-1) a component.
void
    dsh_catalog_outstanding (dsh_catalog_t *self, const char *component, int delta);

//  Count a call the broker holds back for a component (+1) or lets go of
//  (-1).
void
    dsh_catalog_waiting (dsh_catalog_t *self, const char *component, int delta);

//  Set the concurrency a component's ANNOUNCE states (its workers; 0: it
//  did not say, and is taken to have 8), on which its window is sized.
void
    dsh_catalog_set_concurrency (dsh_catalog_t *self, const char *component, size_t concurrency);

//  Update every component's answer rate (calls it finished since the last
//  pace, per second, smoothed) and its window: its concurrency plus the
//  calls it answers in 100 ms at that rate (at least one more, at most 256
//  in all). Call it every few tens of milliseconds.
void
    dsh_catalog_pace (dsh_catalog_t *self, int64_t now_ms);

//  True if a component has fewer calls outstanding than its window (or is
//  unknown: nothing to hold a call for).
bool
    dsh_catalog_has_room (dsh_catalog_t *self, const char *component);

//  --- Pins (dsh_pins): tools whose definition is held back -------------

//  A component's CURVE key (for the pin of a definition it offered first),
//  or NULL.
typedef const char *(dsh_catalog_key_fn) (void *arg, const char *component);

//  Judge every definition registered from now on against pins (borrowed;
//  NULL: none is judged). A quarantined tool stays listed, its entry served
//  with the marks quarantined, digest, pinnedDigest?, quarantineReason
//  (every pack, dsh_catalog_tool, the events); its registered or updated
//  event is followed by tool.changed.
void
    dsh_catalog_set_pins (dsh_catalog_t *self, dsh_pins_t *pins, dsh_catalog_key_fn *key_fn, void *key_arg);

//  Why the tool is quarantined (static text), or NULL if it is not (or is
//  not registered); *digest and *pinned (may be NULL) point at its offered
//  and pinned definition digests.
const char *
    dsh_catalog_quarantine (dsh_catalog_t *self, const char *name, const char **digest, const char **pinned);

//  The keys of a quarantined tool's definition that differ from its pin
//  ("description, parameters"), or "" (not quarantined, or no pin).
const char *
    dsh_catalog_quarantine_changes (dsh_catalog_t *self, const char *name);

//  Judge the tool name (NULL: every tool) again, after the pins changed:
//  each whose verdict changed gets tool.updated with its entry as now
//  served, and tool.changed if it is quarantined.
void
    dsh_catalog_rejudge (dsh_catalog_t *self, const char *name, zlistx_t *events);

//  The names of the quarantined tools, in registration order (a new list;
//  caller destroys).
zlistx_t *
    dsh_catalog_quarantined (dsh_catalog_t *self);

//  The first provider of tool name (the one its entry is served as), or
//  NULL.
const char *
    dsh_catalog_owner (dsh_catalog_t *self, const char *name);

//  A new event of kind about tool name, numbered as every change (caller
//  fills and publishes it).
dsh_event_t *
    dsh_catalog_event (dsh_catalog_t *self, const char *kind, const char *name);

//  Pack the tool entries in registration order as an array.
void
    dsh_catalog_pack_tools (dsh_catalog_t *self, msgpack_packer *pk);

//  Pack the snapshot maps: "tools" (an array of {tool, providers}) and
//  "components" (an array of {id, generation, tools}); the caller packs the
//  enclosing map and counts these as two entries.
void
    dsh_catalog_pack_snapshot (dsh_catalog_t *self, msgpack_packer *pk);

//  Pack the ids of a tool's providers as an array (empty if unknown).
void
    dsh_catalog_pack_providers (dsh_catalog_t *self, const char *name, msgpack_packer *pk);

//  How many components provide a tool now (0 if it is unknown).
size_t
    dsh_catalog_replicas (dsh_catalog_t *self, const char *name);

//  The tools' names in registration order, in a new list that borrows them
//  (caller destroys it before the catalog changes).
zlistx_t *
    dsh_catalog_tool_names (dsh_catalog_t *self);

//  The components' ids in id order, in a new list of char * (caller
//  destroys).
zlistx_t *
    dsh_catalog_component_ids (dsh_catalog_t *self);

//  Keep what a component's ANNOUNCE (borrowed) says of itself: host, pid,
//  version, and its uptimeMs as a start on our clock (now_ms, zclock_mono).
//  An unknown component is ignored.
void
    dsh_catalog_set_details (dsh_catalog_t *self, const char *component, const dsh_presence_t *presence,
                             int64_t now_ms);

//  Add to packer's open map what STATS shows of a component: workers (its
//  concurrency), queued (calls held for it), and host, pid, version and
//  uptimeMs where its ANNOUNCE said them. An unknown component adds nothing.
void
    dsh_catalog_pack_details (dsh_catalog_t *self, const char *component, dsh_packer_t *packer, int64_t now_ms);

//  A component's calls outstanding and when it was last heard from
//  (zclock_mono). Returns 0, or -1 if it is unknown.
int
    dsh_catalog_component_load (dsh_catalog_t *self, const char *component, size_t *outstanding,
                                int64_t *last_seen_ms);

//  The sequence number of the latest event (0 before any).
uint64_t
    dsh_catalog_seq (dsh_catalog_t *self);

//  A number that changes whenever what dsh_catalog_pack_snapshot packs may
//  have changed (seq does not: provider lists and generations change with
//  no event), so that an encoded snapshot can be kept until it does.
uint64_t
    dsh_catalog_version (dsh_catalog_t *self);

//  Number of tools.
size_t
    dsh_catalog_tool_count (dsh_catalog_t *self);

//  Number of components.
size_t
    dsh_catalog_component_count (dsh_catalog_t *self);

#ifdef __cplusplus
}
#endif

#endif
