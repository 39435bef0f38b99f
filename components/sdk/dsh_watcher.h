/*  =========================================================================
    dsh_watcher - a gap-free view of the registry's tool set, kept current

    The zguide's Clone pattern, done for its user: subscribe to the change
    events first, then ask for a snapshot, drop events at or below the
    snapshot's sequence number, apply the rest in order. A gap in sequence
    numbers, a new broker epoch, an event connection made again, or a
    broker that restarted or went silent (the watcher PINGs it every
    heartbeat) starts the dance again. Given a list of brokers, it follows
    one at a time and moves to the next when the one it follows is silent
    for its liveness window. The user sees a "snapshot" notice after each
    (re)sync and every event after it, in order, with nothing missing or
    repeated.
    =========================================================================
*/

#ifndef DSH_WATCHER_H_INCLUDED
#define DSH_WATCHER_H_INCLUDED

#include <czmq.h>
#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_watcher_t dsh_watcher_t;

//  Start watching the broker at broker, one front endpoint or a comma list
//  of them followed one at a time (NULL: $DSH_BROKER, else default). NULL,
//  with the reason logged, if the list is not valid (dsh_sock_brokers).
dsh_watcher_t *
    dsh_watcher_new (const char *broker);

//  Stop and destroy; safe twice.
void
    dsh_watcher_destroy (dsh_watcher_t **self_p);

//  The next notice as JSON (caller owns), or NULL if none within
//  timeout_ms. A notice is either {kind:"snapshot", seq, epoch, tools:[...],
//  components:[...], broker} after a (re)sync, broker being the front
//  endpoint the snapshot came from, or a change event {seq, epoch, kind,
//  component, name?, tool?, tools?, reason?}. Every event comes through,
//  kinds this SDK does not know too (tool.changed, tool.accepted,
//  tool.rejected, tool.forgotten of the broker's pins: a quarantined
//  tool's entry itself changes by tool.updated, with its marks).
json_t *
    dsh_watcher_recv (dsh_watcher_t *self, int timeout_ms);

//  The socket notices arrive on, for a poller: readable when
//  dsh_watcher_recv (self, 0) may have a notice.
zsock_t *
    dsh_watcher_sock (dsh_watcher_t *self);

//  The names of the tools in the current view, in registration order, as
//  a JSON array (caller owns); quarantined ones too.
json_t *
    dsh_watcher_tools (dsh_watcher_t *self);

//  The sequence number the view is at (0 before the first snapshot).
uint64_t
    dsh_watcher_seq (dsh_watcher_t *self);

//  How many times the watcher has (re)synchronised with a snapshot.
size_t
    dsh_watcher_syncs (dsh_watcher_t *self);

#ifdef __cplusplus
}
#endif

#endif
