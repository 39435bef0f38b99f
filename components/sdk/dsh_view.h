/*  =========================================================================
    dsh_view - the Clone pattern's bookkeeping, without sockets

    Holds what a watcher knows of the registry (the tool names in
    registration order, the sequence number and epoch they are at) and
    decides, for every snapshot and change event handed to it, whether to
    apply it, queue it, drop it as stale, or declare the view lost (a gap
    in sequence numbers, a new epoch, a full queue) so that the caller asks
    for a new snapshot. Everything the user must see comes out in order as
    JSON notices. dsh_watcher drives it from its sockets; tests drive it
    from bytes.
    =========================================================================
*/

#ifndef DSH_VIEW_H_INCLUDED
#define DSH_VIEW_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_view_t dsh_view_t;

//  What the caller must do after handing the view a snapshot or an event.
typedef enum {
    DSH_VIEW_INVALID = -1,      //  malformed input: ignored, nothing changed
    DSH_VIEW_OK = 0,            //  taken (applied, queued, or dropped as stale)
    DSH_VIEW_RESYNC = 1         //  the view is lost: request a new snapshot
} dsh_view_verdict_t;

//  A new view waiting for its first snapshot; it queues at most queue_limit
//  events while it waits (0 = 100000).
dsh_view_t *
    dsh_view_new (size_t queue_limit);

//  Destroy; safe twice.
void
    dsh_view_destroy (dsh_view_t **self_p);

//  Take an event body (msgpack bytes, untrusted): applied if it is the
//  next one, dropped if at or below the view's seq, queued while waiting
//  for a snapshot. A gap, another epoch or a full queue gives RESYNC and
//  the view waits for a snapshot again. An event of a kind that names no
//  change to the tool set (component.*, the pins' tool.changed,
//  tool.accepted, tool.rejected, tool.forgotten, kinds yet to come) counts
//  its seq and becomes a notice like any other.
dsh_view_verdict_t
    dsh_view_event (dsh_view_t *self, const void *data, size_t size,
                    char *error, size_t error_size);

//  Take a SNAPSHOT reply body (msgpack bytes, untrusted). Ignored (OK) when
//  the view is not waiting for one; else applied, followed by the queued
//  events above its seq. RESYNC if a queued event does not follow on.
dsh_view_verdict_t
    dsh_view_snapshot (dsh_view_t *self, const void *data, size_t size,
                       char *error, size_t error_size);

//  Declare the view lost without an event saying so (its broker restarted
//  or is gone, its event connection was made again): queued events are
//  dropped and the view waits for a snapshot.
void
    dsh_view_lose (dsh_view_t *self);

//  The next notice for the user, oldest first (caller owns), or NULL: a
//  {kind:"snapshot", seq, epoch, tools, components} after each sync, and
//  each applied event's body.
json_t *
    dsh_view_notice (dsh_view_t *self);

//  True once a snapshot is applied and until the view is lost.
bool
    dsh_view_synced (dsh_view_t *self);

//  The sequence number the view is at (0 before the first snapshot).
uint64_t
    dsh_view_seq (dsh_view_t *self);

//  How many snapshots the view has applied.
size_t
    dsh_view_syncs (dsh_view_t *self);

//  The tool names in registration order as a JSON array (caller owns),
//  quarantined tools too: the view is the registry as it is.
json_t *
    dsh_view_tools (dsh_view_t *self);

#ifdef __cplusplus
}
#endif

#endif
