/*  =========================================================================
    dsh-bench-watchers - many watchers in one thread, each one counted

        dsh-bench-watchers ENDPOINT[,ENDPOINT...] N [--snapshot-retry-ms MS]

    Starts N watchers in this one process and thread (one poll over all
    their sockets), a hundred at a time, each on sockets of its own and each
    following the Clone procedure of schemas/PROTOCOL.md ("Watchers: the
    Clone procedure") as the C SDK's dsh_watcher does:

      1. HELLO on FRONT from a DEALER (again every second until WELCOME),
         then a SUB to the events endpoint the WELCOME names, on "";
      2. once the SUB has connected (a socket monitor sees its handshake),
         and 200 ms more for its subscription to reach the broker: SNAPSHOT,
         sent again under the same id after MS ms with no reply (default
         2000, as dsh_watcher), then after twice as long each time, up to
         16 s (0: never); a gap while one is awaited asks for no other;
         events are queued;
      3. the snapshot's state is taken, queued events at or below its seq
         dropped, the rest applied in order;
      4. then for each event: another epoch or a seq gap loses the view
         (back to 2, the queue dropped); at or below the view's seq it is
         dropped; otherwise it is applied;
      5. the SUB connected again: the view is lost (back to 2);
      6. PING every heartbeatMs: a PONG from another broker instance means
         back to 1 (HELLO under a new id, a new SUB);
      7. nothing from FRONT for heartbeatMs x liveness: back to 1 on new
         sockets, following the next broker of the list.

    As dsh_watcher's, its sockets send no ZMTP heartbeats (PING and PONG are
    its liveness) and use TCP keepalive (dsh_sock_keepalive).

    Watcher i starts with broker i mod B of the list. A view is what a
    comparison needs: the tool count, the seq and epoch, and a fingerprint
    of the tool names (the XOR of their hashes). Identical bytes decode
    identically, so each distinct event body is decoded (strictly, by
    dsh_doc) once, for the first watcher that receives it, and each distinct
    snapshot once (replies differ only by the id they echo): the process
    spends its time on N watchers' sockets, not on N copies of one decode.
    For the same reason the poll is an epoll set over the sockets' ZMQ_FDs:
    zmq_poll over 2 000 sockets costs in proportion to all of them at every
    wakeup (a third of a core for 1 000 idle watchers), and libzmq 4.3.4
    has no zmq_poller for it.

    Counted per watcher: events received, seq gaps, epoch changes, SUB
    reconnections, restarts, silences, views lost, snapshots; for all of
    them: SNAPSHOT round trips (first send to reply) and each event's
    fan-out spread, its receipt by the last watcher minus its receipt by the
    first (the broker stamps no time, so this is a spread, not the lag from
    publication; it includes this process's own turn over its sockets). A
    SUB per broker on "component.left" alone counts components that expired.

    Prints "watchers: K of N synced in T ms, ..." once every watcher has a
    view (or after 120 s). SIGUSR2, or "reset" on stdin, zeroes the counts;
    SIGUSR1, or "report", prints one JSON line: what happened since the
    reset, and whether each watcher's view matches a final SNAPSHOT of its
    broker (taken again until every watcher has caught up with it, for at
    most 10 s). SIGINT, SIGTERM or "quit" ends it.
    =========================================================================
*/

#include "dsh_bench_fds.h"
#include "dsh_curve.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <sys/epoll.h>

#define S_HELLO_RETRY_MS        1000    //  until a WELCOME comes
#define S_SNAPSHOT_RETRY_MS     2000    //  dsh_watcher's first wait for a reply,
#define S_SNAPSHOT_RETRY_MAX_MS 16000   //  doubling up to this
#define S_SUBSCRIBE_SETTLE_MS   200     //  dsh_watcher's
#define S_CONNECTION_CHECK_MS   100     //  how often SUB handshakes are looked at
#define S_QUEUE_LIMIT           100000  //  events queued while a snapshot is awaited
#define S_EVENT_HWM             100000
#define S_MAX_REPLY_BYTES       (256 * 1024 * 1024)
#define S_BATCH                 64      //  messages taken from one socket per wakeup
#define S_START_BATCH           100     //  watchers connecting at once (the listen backlog)
#define S_START_WAIT_MS         2000    //  longest wait for a batch's WELCOMEs
#define S_SYNC_WAIT_MS          120000  //  before the "watchers:" line says who is missing
#define S_SETTLE_MS             10000   //  for every view to catch up with the final SNAPSHOT
#define S_EVENT_SLOTS           65536   //  distinct event bodies kept decoded (a power of 2)
#define S_SNAPSHOTS_KEPT        4       //  distinct snapshots kept decoded
#define S_EXPIRED_NAMES         32      //  expired components named in the report
#define S_WAKEUPS               1024    //  epoll events taken per wait

//  What an event does to a view.
typedef enum { S_EFFECT_NONE, S_EFFECT_ADD, S_EFFECT_REMOVE } s_effect_t;

//  What a view needs of an event.
typedef struct {
    uint64_t seq;
    uint64_t epoch;
    s_effect_t effect;
    uint64_t name_hash;         //  for tool.registered and tool.unregistered
} s_change_t;

//  One distinct event body, decoded once, and when watchers received it.
typedef struct {
    byte *body;                 //  NULL: a free slot
    size_t size;
    uint64_t digest;
    s_change_t change;
    int64_t first_us;           //  first and last receipt since the reset
    int64_t last_us;
    size_t receivers;
} s_event_t;

//  A view, or what a snapshot says one is.
typedef struct {
    uint64_t seq;
    uint64_t epoch;
    int64_t tools;
    uint64_t fingerprint;       //  XOR of the tool names' hashes
} s_state_t;

//  One distinct snapshot: its body without the id entry, decoded once.
typedef struct {
    byte *rest;
    size_t size;
    s_state_t state;
    uint64_t used;              //  for replacing the least recently used
} s_snapshot_t;

typedef struct {
    uint64_t received;          //  events on the SUB
    uint64_t applied;
    uint64_t gaps;
    uint64_t epochs;            //  events of another epoch
    uint64_t overflows;         //  queue full while a snapshot was awaited
    uint64_t reconnects;        //  SUB connections after the first
    uint64_t restarts;          //  PONG from another broker instance
    uint64_t silences;          //  nothing from FRONT for the liveness window
    uint64_t lost;              //  views lost (any of the above)
    uint64_t snapshots;         //  applied
    uint64_t resends;           //  SNAPSHOT requests sent again
    uint64_t overloaded;        //  ERROR OVERLOADED replies (a SNAPSHOT refused)
    uint64_t bad;               //  replies or events that did not decode
} s_counts_t;

typedef struct {
    size_t broker;              //  index of the broker followed
    zsock_t *front;             //  DEALER; NULL until started
    zsock_t *events;            //  SUB, once welcomed
    dsh_handshake_t *handshake; //  of the SUB
    size_t connections;         //  SUB handshakes followed by a snapshot
    char *broker_id;            //  WELCOME's `broker`
    int heartbeat_ms;
    int liveness;
    int64_t heard;              //  when FRONT last answered anything
    int64_t hello_due;          //  0 once welcomed
    uint64_t hello_id;
    int64_t ping_due;
    uint64_t request_id;        //  the SNAPSHOT awaited, 0: none
    int64_t request_due;
    int64_t request_wait;       //  for its reply before sending it again
    int64_t request_sent_us;    //  its first send, 0: not sent yet
    uint64_t last_id;
    bool synced;
    bool ever_synced;
    s_state_t view;
    s_change_t *queue;
    size_t queued;
    size_t queue_size;
    s_counts_t counts;
} s_watcher_t;

//  What this process keeps of each broker: a DEALER of its own (WELCOME,
//  the PINGs that give the seq at a reset, the final SNAPSHOTs) and a SUB
//  on component.left.
typedef struct {
    char *front;
    zsock_t *dealer;
    zsock_t *expiry;
    uint64_t last_id;
    uint64_t ping_id;           //  the PONG awaited after a reset
    uint64_t audit_id;          //  the SNAPSHOT awaited for the report
    bool audited;
    s_state_t audit;
    uint64_t seq_at_reset;
    uint64_t epoch_at_reset;
} s_broker_t;

//  Every socket has a slot, its epoll key: stdin first, then two per
//  broker (its DEALER, its expiry SUB), then two per watcher (FRONT, SUB).
#define S_SLOT_STDIN    0

//  A growable array of samples, in microseconds.
typedef struct {
    int64_t *value;
    size_t count;
    size_t size;
} s_samples_t;

typedef enum { S_REPORT_IDLE, S_REPORT_AUDITING } s_report_state_t;

typedef struct {
    s_broker_t *brokers;
    size_t broker_count;
    s_watcher_t *watchers;
    size_t count;
    size_t started;
    int64_t batch_started;
    int snapshot_retry_ms;
    int64_t began;              //  when the first watcher started
    bool sync_told;
    s_samples_t first_snapshots;    //  round trips of each watcher's first view
    //  Since the reset
    int64_t reset_at;
    s_samples_t snapshots;
    s_samples_t spreads;
    uint64_t expired;
    json_t *expired_names;
    s_event_t *events;
    s_snapshot_t kept [S_SNAPSHOTS_KEPT];
    uint64_t kept_clock;
    //  The poll set, and the slots whose sockets may have input: seen by
    //  epoll, or touched since (a send, a batch cut short)
    int epoll;
    size_t slots;
    bool *pending;
    size_t *pending_list;
    size_t pending_count;
    size_t *pending_work;
    bool stdin_open;
    char line [256];
    size_t line_size;
    bool quit;
    int64_t timers_due;
    int64_t connections_due;
    s_report_state_t report_state;
    int64_t report_deadline;
    size_t audits;
} self_t;

static volatile sig_atomic_t s_report_asked = 0;
static volatile sig_atomic_t s_reset_asked = 0;

static void
s_signal (int signum)
{
    if (signum == SIGUSR1)
        s_report_asked = 1;
    else
        s_reset_asked = 1;
}

//  FNV-1a, 64 bits.
static uint64_t
s_hash (const void *data, size_t size)
{
    const byte *bytes = (const byte *) data;
    uint64_t hash = 14695981039346656037ULL;
    for (size_t index = 0; index < size; index++)
        hash = (hash ^ bytes [index]) * 1099511628211ULL;
    return hash;
}

static void
s_samples_add (s_samples_t *self, int64_t value)
{
    if (self->count == self->size) {
        self->size = self->size? self->size * 2: 1024;
        self->value = (int64_t *) realloc (self->value, self->size * sizeof (int64_t));
        assert (self->value);
    }
    self->value [self->count++] = value;
}

static int
s_compare_int64 (const void *a, const void *b)
{
    int64_t left = *(const int64_t *) a, right = *(const int64_t *) b;
    return (left > right) - (left < right);
}

//  The percentile of the samples in ms (sorts them); 0 if there are none.
static double
s_samples_ms (s_samples_t *self, int percent)
{
    if (self->count == 0)
        return 0;
    qsort (self->value, self->count, sizeof (int64_t), s_compare_int64);
    size_t index = self->count * (size_t) percent / 100;
    return (double) self->value [index < self->count? index: self->count - 1] / 1000.0;
}

static bool
s_uint_member (const msgpack_object *map, const char *key, uint64_t *value)
{
    const msgpack_object *obj = dsh_map_get (map, key);
    if (!obj || obj->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *value = obj->via.u64;
    return true;
}

//  Lowers when the timers run next.
static void
s_due (self_t *self, int64_t when)
{
    if (when < self->timers_due)
        self->timers_due = when;
}

static void
    s_send_request (zsock_t *sock, const char *command, uint64_t id);

//  ---------------------------------------------------------------------
//  The poll set

//  The slot of broker's DEALER (which 0) or expiry SUB (which 1).
static size_t
s_slot_broker (size_t broker, size_t which)
{
    return 1 + broker * 2 + which;
}

//  The slot of a watcher's FRONT (which 0) or SUB (which 1).
static size_t
s_slot_watcher (self_t *self, const s_watcher_t *watcher, size_t which)
{
    return 1 + self->broker_count * 2 + (size_t) (watcher - self->watchers) * 2 + which;
}

//  The slot's socket may have input: it is looked at in the next turn.
static void
s_pending (self_t *self, size_t slot)
{
    if (!self->pending [slot]) {
        self->pending [slot] = true;
        self->pending_list [self->pending_count++] = slot;
    }
}

//  Adds a new socket to the poll set. Whatever came before its ZMQ_FD was
//  watched has raised no event, so it is looked at once now.
static void
s_watch (self_t *self, zsock_t *sock, size_t slot)
{
    struct epoll_event event = { .events = EPOLLIN, .data.u64 = slot };
    int rc = epoll_ctl (self->epoll, EPOLL_CTL_ADD, zsock_fd (sock), &event);
    assert (rc == 0);
    s_pending (self, slot);
}

//  Takes a socket out of the poll set before it is destroyed.
static void
s_unwatch (self_t *self, zsock_t *sock)
{
    if (sock)
        epoll_ctl (self->epoll, EPOLL_CTL_DEL, zsock_fd (sock), NULL);
}

//  Sends a request from a watcher's FRONT: a send may take the socket's
//  input signal with it, so its input is looked at next turn.
static void
s_watcher_send (self_t *self, s_watcher_t *watcher, const char *command, uint64_t id)
{
    s_send_request (watcher->front, command, id);
    s_pending (self, s_slot_watcher (self, watcher, 0));
}

//  The same from a broker's DEALER.
static void
s_broker_send (self_t *self, size_t index, const char *command, uint64_t id)
{
    s_send_request (self->brokers [index].dealer, command, id);
    s_pending (self, s_slot_broker (index, 0));
}

//  ---------------------------------------------------------------------
//  Decoding, once per distinct body

//  A spread sample from the event in a slot about to be reused or reset.
static void
s_event_finish (self_t *self, s_event_t *event)
{
    if (event->receivers >= 2)
        s_samples_add (&self->spreads, event->last_us - event->first_us);
    event->receivers = 0;
}

//  The decoded event of body, from the slot its bytes hash to or decoded
//  into it now; NULL if it is not a valid event.
static s_event_t *
s_event_take (self_t *self, const byte *body, size_t size)
{
    uint64_t digest = s_hash (body, size);
    s_event_t *event = &self->events [digest & (S_EVENT_SLOTS - 1)];
    if (event->body && event->digest == digest && event->size == size && memcmp (event->body, body, size) == 0)
        return event;
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (body, size, error, sizeof (error));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    const msgpack_object *kind = root? dsh_map_get (root, "kind"): NULL;
    s_change_t change = { 0, 0, S_EFFECT_NONE, 0 };
    bool valid = root && root->type == MSGPACK_OBJECT_MAP && s_uint_member (root, "seq", &change.seq)
              && s_uint_member (root, "epoch", &change.epoch) && kind && kind->type == MSGPACK_OBJECT_STR;
    if (valid && (dsh_str_eq (kind, DSH_EV_REGISTERED) || dsh_str_eq (kind, DSH_EV_UNREGISTERED))) {
        const msgpack_object *name = dsh_map_get (root, "name");
        valid = name && name->type == MSGPACK_OBJECT_STR;
        if (valid) {
            change.effect = dsh_str_eq (kind, DSH_EV_REGISTERED)? S_EFFECT_ADD: S_EFFECT_REMOVE;
            change.name_hash = s_hash (name->via.str.ptr, name->via.str.size);
        }
    }
    dsh_doc_destroy (&doc);
    if (!valid)
        return NULL;
    s_event_finish (self, event);
    free (event->body);
    event->body = (byte *) malloc (size);
    assert (event->body);
    memcpy (event->body, body, size);
    event->size = size;
    event->digest = digest;
    event->change = change;
    return event;
}

//  Where the root map's "id" entry is: writes its offset and size (0 if
//  there is none) and the id's value if it is an unsigned integer (else
//  0). Returns 0, or -1 if the body is not a map of whole entries up to it.
static int
s_snapshot_id (const byte *body, size_t size, size_t *offset, size_t *span, uint64_t *id)
{
    uint32_t entries;
    size_t at = dsh_msgpack_map_header (body, size, &entries);
    *offset = *span = 0;
    *id = 0;
    if (at == 0)
        return -1;
    for (uint32_t entry = 0; entry < entries; entry++) {
        size_t key = dsh_msgpack_skip (body + at, size - at);
        size_t value = key? dsh_msgpack_skip (body + at + key, size - at - key): 0;
        if (value == 0)
            return -1;
        char error [64];
        dsh_doc_t *doc = dsh_doc_new (body + at, key, error, sizeof (error));
        bool is_id = doc && dsh_str_eq (dsh_doc_root (doc), "id");
        dsh_doc_destroy (&doc);
        if (is_id) {
            doc = dsh_doc_new (body + at + key, value, error, sizeof (error));
            const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
            if (root && root->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                *id = root->via.u64;
            dsh_doc_destroy (&doc);
            *offset = at;
            *span = key + value;
            return 0;
        }
        at += key + value;
    }
    return 0;
}

//  Decodes a SNAPSHOT body into the state it gives. Returns 0, or -1 if it
//  is not a valid snapshot.
static int
s_snapshot_decode (const byte *body, size_t size, s_state_t *state)
{
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (body, size, error, sizeof (error));
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    const msgpack_object *tools = root? dsh_map_get (root, "tools"): NULL;
    int rc = root && root->type == MSGPACK_OBJECT_MAP && s_uint_member (root, "seq", &state->seq)
          && s_uint_member (root, "epoch", &state->epoch) && tools && tools->type == MSGPACK_OBJECT_ARRAY? 0: -1;
    state->tools = 0;
    state->fingerprint = 0;
    for (uint32_t index = 0; rc == 0 && index < tools->via.array.size; index++) {
        const msgpack_object *name = dsh_map_get (dsh_map_get (&tools->via.array.ptr [index], "tool"), "name");
        if (!name || name->type != MSGPACK_OBJECT_STR)
            rc = -1;
        else {
            state->tools++;
            state->fingerprint ^= s_hash (name->via.str.ptr, name->via.str.size);
        }
    }
    dsh_doc_destroy (&doc);
    return rc;
}

//  The state a SNAPSHOT reply gives, and the id it echoes (0: none).
//  Returns 0, or -1 if it is not a valid snapshot.
static int
s_snapshot_take (self_t *self, const byte *body, size_t size, s_state_t *state, uint64_t *id)
{
    size_t offset, span;
    if (s_snapshot_id (body, size, &offset, &span, id))
        return -1;
    size_t rest = size - span;
    s_snapshot_t *oldest = &self->kept [0];
    for (size_t index = 0; index < S_SNAPSHOTS_KEPT; index++) {
        s_snapshot_t *kept = &self->kept [index];
        if (kept->rest && kept->size == rest && memcmp (kept->rest, body, offset) == 0
        &&  memcmp (kept->rest + offset, body + offset + span, rest - offset) == 0) {
            kept->used = ++self->kept_clock;
            *state = kept->state;
            return 0;
        }
        if (kept->used < oldest->used)
            oldest = kept;
    }
    if (s_snapshot_decode (body, size, state))
        return -1;
    free (oldest->rest);
    oldest->rest = (byte *) malloc (rest? rest: 1);
    assert (oldest->rest);
    memcpy (oldest->rest, body, offset);
    memcpy (oldest->rest + offset, body + offset + span, rest - offset);
    oldest->size = rest;
    oldest->state = *state;
    oldest->used = ++self->kept_clock;
    return 0;
}

//  ---------------------------------------------------------------------
//  Sockets

//  Sends "" DSH1 command {id?} without blocking; a lost send is made good
//  by the timers.
static void
s_send_request (zsock_t *sock, const char *command, uint64_t id)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id) {
        dsh_pack_cstr (&packer.pk, "id");
        msgpack_pack_uint64 (&packer.pk, id);
    }
    dsh_packer_map_end (&packer);
    zmq_msg_t parts [4];
    dsh_sock_head (parts, command);
    dsh_sock_part_mem (&parts [3], packer.sbuf.data, packer.sbuf.size);
    dsh_packer_release (&packer);
    dsh_sock_send_parts (sock, parts, 4);
}

static zsock_t *
s_front_new (const char *front, int heartbeat_ms, int liveness)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    assert (sock);
    dsh_sock_limit (sock, S_MAX_REPLY_BYTES, 1000);
    dsh_sock_keepalive (sock, heartbeat_ms, liveness);
    zsock_set_linger (sock, 0);
    dsh_curve_client (sock);
    if (zsock_connect (sock, "%s", front)) {
        fprintf (stderr, "dsh-bench-watchers: cannot connect to \"%s\"\n", front);
        zsock_destroy (&sock);
    }
    return sock;
}

static zsock_t *
s_events_new (const char *endpoint, const char *prefix, int heartbeat_ms, int liveness, dsh_handshake_t **handshake_p)
{
    zsock_t *sock = zsock_new (ZMQ_SUB);
    assert (sock);
    dsh_sock_limit (sock, S_MAX_REPLY_BYTES, S_EVENT_HWM);
    dsh_sock_keepalive (sock, heartbeat_ms, liveness);
    zsock_set_linger (sock, 0);
    zsock_set_subscribe (sock, prefix);
    dsh_curve_client (sock);
    if (handshake_p)
        *handshake_p = dsh_handshake_new (sock);
    if (zsock_connect (sock, "%s", endpoint)) {
        fprintf (stderr, "dsh-bench-watchers: cannot connect to events endpoint \"%s\"\n", endpoint);
        if (handshake_p)
            dsh_handshake_destroy (handshake_p);
        zsock_destroy (&sock);
    }
    return sock;
}

//  ---------------------------------------------------------------------
//  One watcher

static void
s_watcher_lose (s_watcher_t *self)
{
    if (self->synced)
        self->counts.lost++;
    self->synced = false;
    self->queued = 0;
}

//  Step 2: a new SNAPSHOT request, sent when due. After a gap (not fresh)
//  one request awaited is enough, as dsh_watcher has it: the broker
//  answers in turn, and any snapshot it takes from now on will do. A fresh
//  one (the SUB connected) must be taken after now.
static void
s_watcher_request (self_t *self, s_watcher_t *watcher, int64_t due, bool fresh)
{
    if (!fresh && watcher->request_id && watcher->request_sent_us)
        return;
    watcher->request_id = ++watcher->last_id;
    watcher->request_due = due;
    watcher->request_wait = 0;
    watcher->request_sent_us = 0;
    s_due (self, due);
}

static void
s_watcher_close_events (self_t *self, s_watcher_t *watcher)
{
    dsh_handshake_destroy (&watcher->handshake);
    s_unwatch (self, watcher->events);
    zsock_destroy (&watcher->events);
    watcher->connections = 0;
}

//  Back to step 1 with the broker followed: HELLO under a new id.
static void
s_watcher_rediscover (self_t *self, s_watcher_t *watcher, int64_t now)
{
    s_watcher_close_events (self, watcher);
    s_watcher_lose (watcher);
    zstr_free (&watcher->broker_id);
    watcher->request_id = 0;
    watcher->hello_id = ++watcher->last_id;
    watcher->hello_due = now;
    watcher->heard = now;
    s_due (self, now);
}

//  Step 1 on new sockets, to the broker the watcher follows now.
static void
s_watcher_follow (self_t *self, s_watcher_t *watcher, int64_t now)
{
    s_unwatch (self, watcher->front);
    zsock_destroy (&watcher->front);
    s_watcher_rediscover (self, watcher, now);
    watcher->front = s_front_new (self->brokers [watcher->broker].front, watcher->heartbeat_ms,
                                  watcher->liveness);
    if (watcher->front)
        s_watch (self, watcher->front, s_slot_watcher (self, watcher, 0));
}

//  Step 4, for an event or a queued one once the view is synced.
static void
s_watcher_apply (self_t *self, s_watcher_t *watcher, const s_change_t *change)
{
    s_state_t *view = &watcher->view;
    if (change->epoch != view->epoch || change->seq > view->seq + 1) {
        if (change->epoch != view->epoch)
            watcher->counts.epochs++;
        else
            watcher->counts.gaps++;
        s_watcher_lose (watcher);
        s_watcher_request (self, watcher, zclock_mono (), false);
        return;
    }
    if (change->seq <= view->seq)
        return;
    if (change->effect == S_EFFECT_ADD) {
        view->tools++;
        view->fingerprint ^= change->name_hash;
    }
    else
    if (change->effect == S_EFFECT_REMOVE) {
        view->tools--;
        view->fingerprint ^= change->name_hash;
    }
    view->seq = change->seq;
    watcher->counts.applied++;
}

static void
s_watcher_event (self_t *self, s_watcher_t *watcher, const s_change_t *change)
{
    if (watcher->synced) {
        s_watcher_apply (self, watcher, change);
        return;
    }
    if (watcher->queued == S_QUEUE_LIMIT) {
        watcher->counts.overflows++;
        watcher->queued = 0;
        if (watcher->connections)
            s_watcher_request (self, watcher, zclock_mono (), false);
        return;
    }
    if (watcher->queued == watcher->queue_size) {
        watcher->queue_size = watcher->queue_size? watcher->queue_size * 2: 256;
        watcher->queue = (s_change_t *) realloc (watcher->queue, watcher->queue_size * sizeof (s_change_t));
        assert (watcher->queue);
    }
    watcher->queue [watcher->queued++] = *change;
}

static void
s_watcher_welcome (self_t *self, s_watcher_t *watcher, dsh_doc_t *doc, int64_t now)
{
    const msgpack_object *root = dsh_doc_root (doc);
    uint64_t id = 0;
    if (!watcher->hello_due || !s_uint_member (root, "id", &id) || id != watcher->hello_id)
        return;                 //  an answer to a HELLO sent before
    const char *advertised = dsh_doc_strdup (doc, dsh_map_get (root, "events"));
    const char *broker_id = dsh_doc_strdup (doc, dsh_map_get (root, "broker"));
    if (!advertised || !broker_id) {
        watcher->counts.bad++;
        return;
    }
    watcher->heartbeat_ms = dsh_map_int_in (root, "heartbeatMs", 1, 3600000, DSH_DEFAULT_HEARTBEAT_MS);
    watcher->liveness = dsh_map_int_in (root, "liveness", 1, 1000, DSH_DEFAULT_LIVENESS);
    char *endpoint = dsh_sock_resolve (advertised, self->brokers [watcher->broker].front);
    watcher->events = s_events_new (endpoint, "", watcher->heartbeat_ms, watcher->liveness, &watcher->handshake);
    zstr_free (&endpoint);
    if (!watcher->events)
        return;                 //  HELLO again when due
    watcher->connections = 0;
    watcher->broker_id = strdup (broker_id);
    watcher->hello_due = 0;
    watcher->ping_due = now + watcher->heartbeat_ms;
    s_watch (self, watcher->events, s_slot_watcher (self, watcher, 1));
    self->connections_due = now;
}

static void
s_watcher_snapshot (self_t *self, s_watcher_t *watcher, const byte *body, size_t size)
{
    if (!watcher->request_id)
        return;                 //  an answer to an abandoned request
    s_state_t state;
    uint64_t id;
    if (s_snapshot_take (self, body, size, &state, &id)) {
        watcher->counts.bad++;
        return;                 //  the request is sent again when due
    }
    if (id && id != watcher->request_id)
        return;
    int64_t round_trip = zclock_usecs () - watcher->request_sent_us;
    s_samples_add (watcher->ever_synced? &self->snapshots: &self->first_snapshots, round_trip);
    watcher->request_id = 0;
    watcher->view = state;
    watcher->synced = true;
    watcher->ever_synced = true;
    watcher->counts.snapshots++;
    size_t queued = watcher->queued;
    watcher->queued = 0;
    for (size_t index = 0; index < queued && watcher->synced; index++)
        s_watcher_apply (self, watcher, &watcher->queue [index]);
}

static void
s_watcher_front (self_t *self, s_watcher_t *watcher, int64_t now)
{
    for (int taken = 0; taken < S_BATCH && watcher->front; taken++) {
        dsh_sock_msg_t msg;
        char error [256] = "";
        if (dsh_sock_recv_msg (watcher->front, &msg, error, sizeof (error))) {
            if (error [0])
                watcher->counts.bad++;
            dsh_sock_msg_close (&msg);
            if (!error [0])
                break;
            continue;
        }
        watcher->heard = now;
        zmq_msg_t *body = msg.count == msg.body + 1? &msg.part [msg.body]: NULL;
        const byte *data = body? (const byte *) zmq_msg_data (body): NULL;
        size_t size = body? zmq_msg_size (body): 0;
        if (!body)
            watcher->counts.bad++;
        else
        if (streq (msg.command, DSH_SNAPSHOT))
            s_watcher_snapshot (self, watcher, data, size);
        else
        if (streq (msg.command, DSH_WELCOME) || streq (msg.command, DSH_PONG)) {
            dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof (error));
            const char *broker_id = doc? dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "broker")): NULL;
            if (!doc)
                watcher->counts.bad++;
            else
            if (streq (msg.command, DSH_WELCOME))
                s_watcher_welcome (self, watcher, doc, now);
            else
            if (watcher->broker_id && broker_id && !streq (broker_id, watcher->broker_id)) {
                //  Step 6: another instance answers there
                watcher->counts.restarts++;
                s_watcher_rediscover (self, watcher, now);
            }
            dsh_doc_destroy (&doc);
        }
        else
        if (streq (msg.command, DSH_ERROR)) {
            //  A SNAPSHOT whose turn a newer one took, or one past the
            //  broker's queue: the request is sent again when due
            dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof (error));
            if (doc && dsh_str_eq (dsh_map_get (dsh_doc_root (doc), "code"), DSH_E_OVERLOADED))
                watcher->counts.overloaded++;
            else
                watcher->counts.bad++;
            dsh_doc_destroy (&doc);
        }
        else
            watcher->counts.bad++;
        dsh_sock_msg_close (&msg);
    }
}

static void
s_watcher_events (self_t *self, s_watcher_t *watcher)
{
    void *handle = zsock_resolve (watcher->events);
    for (int taken = 0; taken < S_BATCH; taken++) {
        zmq_msg_t kind, body;
        zmq_msg_init (&kind);
        if (zmq_msg_recv (&kind, handle, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close (&kind);
            break;
        }
        bool valid = zmq_msg_more (&kind);
        zmq_msg_init (&body);
        if (valid)
            zmq_msg_recv (&body, handle, 0);
        //  Anything after the body makes it no event of ours
        while (zmq_msg_more (&body)) {
            valid = false;
            zmq_msg_close (&body);
            zmq_msg_init (&body);
            zmq_msg_recv (&body, handle, 0);
        }
        s_event_t *event = valid? s_event_take (self, (const byte *) zmq_msg_data (&body), zmq_msg_size (&body)): NULL;
        zmq_msg_close (&kind);
        zmq_msg_close (&body);
        if (!event) {
            watcher->counts.bad++;
            continue;
        }
        watcher->counts.received++;
        int64_t now_us = zclock_usecs ();
        if (event->receivers++ == 0)
            event->first_us = now_us;
        event->last_us = now_us;
        s_watcher_event (self, watcher, &event->change);
    }
}

//  Sends what is due and applies the silence rule (step 7); returns when
//  the watcher's timers are due next.
static int64_t
s_watcher_timers (self_t *self, s_watcher_t *watcher, int64_t now)
{
    int64_t silence = (int64_t) watcher->heartbeat_ms * watcher->liveness;
    if (now - watcher->heard > silence) {
        watcher->counts.silences++;
        watcher->broker = (watcher->broker + 1) % self->broker_count;
        s_watcher_follow (self, watcher, now);
    }
    if (!watcher->front)
        return now + S_HELLO_RETRY_MS;
    int64_t next = watcher->heard + silence + 1;
    if (watcher->hello_due) {
        if (now >= watcher->hello_due) {
            s_watcher_send (self, watcher, DSH_HELLO, watcher->hello_id);
            watcher->hello_due = now + S_HELLO_RETRY_MS;
        }
        if (watcher->hello_due < next)
            next = watcher->hello_due;
        return next;
    }
    if (now >= watcher->ping_due) {
        s_watcher_send (self, watcher, DSH_PING, 0);
        watcher->ping_due = now + watcher->heartbeat_ms;
    }
    if (watcher->ping_due < next)
        next = watcher->ping_due;
    if (watcher->request_id) {
        if (now >= watcher->request_due) {
            s_watcher_send (self, watcher, DSH_SNAPSHOT, watcher->request_id);
            if (watcher->request_sent_us)
                watcher->counts.resends++;
            else
                watcher->request_sent_us = zclock_usecs ();
            watcher->request_wait = watcher->request_wait? watcher->request_wait * 2: self->snapshot_retry_ms;
            if (watcher->request_wait > S_SNAPSHOT_RETRY_MAX_MS)
                watcher->request_wait = S_SNAPSHOT_RETRY_MAX_MS;
            watcher->request_due = self->snapshot_retry_ms? now + watcher->request_wait: INT64_MAX;
        }
        if (watcher->request_due < next)
            next = watcher->request_due;
    }
    return next;
}

//  Step 5 (and the first SNAPSHOT): a SUB handshake not followed by a
//  snapshot yet loses the view.
static void
s_watcher_connections (self_t *self, s_watcher_t *watcher, int64_t now)
{
    if (!watcher->events)
        return;
    size_t connections = dsh_handshake_successes (watcher->handshake);
    if (connections > watcher->connections) {
        if (watcher->connections)
            watcher->counts.reconnects++;
        watcher->connections = connections;
        s_watcher_lose (watcher);
        s_watcher_request (self, watcher, now + S_SUBSCRIBE_SETTLE_MS, true);
    }
}

//  ---------------------------------------------------------------------
//  The brokers' own sockets

//  Waits up to timeout_ms for a reply with command on the broker's DEALER;
//  only at start, before any watcher runs. Returns its body document
//  (caller destroys) or NULL.
static dsh_doc_t *
s_broker_wait (s_broker_t *broker, const char *command, zframe_t **body_p, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (zclock_mono () < give_up) {
        zmq_pollitem_t item = { zsock_resolve (broker->dealer), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (&item, 1, (long) (give_up - zclock_mono ())) <= 0)
            continue;
        zmsg_t *msg = zmsg_recv (broker->dealer);
        zmsg_t *envelope = NULL;
        char name [DSH_COMMAND_MAX + 1], error [256];
        if (msg && dsh_proto_split (msg, &envelope, name, sizeof (name), error, sizeof (error)) == 0
        &&  streq (name, command) && zmsg_size (msg) == 1) {
            *body_p = zmsg_pop (msg);
            dsh_doc_t *doc = dsh_proto_decode_body (*body_p, error, sizeof (error));
            zmsg_destroy (&envelope);
            zmsg_destroy (&msg);
            if (doc)
                return doc;
            zframe_destroy (body_p);
            continue;
        }
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
    }
    return NULL;
}

//  Says HELLO and PING to the broker, connects the expiry SUB. Returns 0,
//  or -1 if the broker does not answer.
static int
s_broker_start (s_broker_t *broker)
{
    broker->dealer = s_front_new (broker->front, DSH_DEFAULT_HEARTBEAT_MS, DSH_DEFAULT_LIVENESS);
    if (!broker->dealer)
        return -1;
    s_send_request (broker->dealer, DSH_HELLO, ++broker->last_id);
    zframe_t *body = NULL;
    dsh_doc_t *welcome = s_broker_wait (broker, DSH_WELCOME, &body, 10000);
    const char *advertised = welcome? dsh_doc_strdup (welcome, dsh_map_get (dsh_doc_root (welcome), "events")): NULL;
    int rc = -1;
    if (advertised) {
        char *endpoint = dsh_sock_resolve (advertised, broker->front);
        int heartbeat_ms = dsh_map_int_in (dsh_doc_root (welcome), "heartbeatMs", 1, 3600000, DSH_DEFAULT_HEARTBEAT_MS);
        int liveness = dsh_map_int_in (dsh_doc_root (welcome), "liveness", 1, 1000, DSH_DEFAULT_LIVENESS);
        broker->expiry = s_events_new (endpoint, DSH_EV_LEFT, heartbeat_ms, liveness, NULL);
        zstr_free (&endpoint);
        rc = broker->expiry? 0: -1;
    }
    dsh_doc_destroy (&welcome);
    zframe_destroy (&body);
    if (rc == 0) {
        s_send_request (broker->dealer, DSH_PING, ++broker->last_id);
        dsh_doc_t *pong = s_broker_wait (broker, DSH_PONG, &body, 10000);
        if (!pong || !s_uint_member (dsh_doc_root (pong), "seq", &broker->seq_at_reset)
        ||  !s_uint_member (dsh_doc_root (pong), "epoch", &broker->epoch_at_reset))
            rc = -1;
        dsh_doc_destroy (&pong);
        zframe_destroy (&body);
    }
    if (rc)
        fprintf (stderr, "dsh-bench-watchers: no WELCOME and PONG from \"%s\"\n", broker->front);
    return rc;
}

static void
s_broker_dealer (self_t *self, s_broker_t *broker)
{
    for (int taken = 0; taken < S_BATCH; taken++) {
        dsh_sock_msg_t msg;
        char error [256] = "";
        if (dsh_sock_recv_msg (broker->dealer, &msg, error, sizeof (error))) {
            dsh_sock_msg_close (&msg);
            if (!error [0])
                break;
            continue;
        }
        zmq_msg_t *body = msg.count == msg.body + 1? &msg.part [msg.body]: NULL;
        const byte *data = body? (const byte *) zmq_msg_data (body): NULL;
        size_t size = body? zmq_msg_size (body): 0;
        if (body && streq (msg.command, DSH_SNAPSHOT) && broker->audit_id) {
            s_state_t state;
            uint64_t id;
            if (s_snapshot_take (self, data, size, &state, &id) == 0 && id == broker->audit_id) {
                broker->audit = state;
                broker->audited = true;
                broker->audit_id = 0;
            }
        }
        else
        if (body && streq (msg.command, DSH_PONG) && broker->ping_id) {
            dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof (error));
            uint64_t id = 0;
            if (doc && s_uint_member (dsh_doc_root (doc), "id", &id) && id == broker->ping_id
            &&  s_uint_member (dsh_doc_root (doc), "seq", &broker->seq_at_reset)
            &&  s_uint_member (dsh_doc_root (doc), "epoch", &broker->epoch_at_reset))
                broker->ping_id = 0;
            dsh_doc_destroy (&doc);
        }
        dsh_sock_msg_close (&msg);
    }
}

//  component.left events: those with reason "expired" are counted.
static void
s_broker_expiry (self_t *self, s_broker_t *broker)
{
    for (int taken = 0; taken < S_BATCH; taken++) {
        zmsg_t *msg = zmsg_recv_nowait (broker->expiry);
        if (!msg)
            break;
        zframe_t *body = zmsg_size (msg) == 2? zmsg_last (msg): NULL;
        char error [256];
        dsh_doc_t *doc = body? dsh_proto_decode_body (body, error, sizeof (error)): NULL;
        const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
        if (root && dsh_str_eq (dsh_map_get (root, "reason"), "expired")) {
            self->expired++;
            const char *component = dsh_doc_strdup (doc, dsh_map_get (root, "component"));
            if (component && json_array_size (self->expired_names) < S_EXPIRED_NAMES)
                json_array_append_new (self->expired_names, json_string (component));
        }
        dsh_doc_destroy (&doc);
        zmsg_destroy (&msg);
    }
}

//  ---------------------------------------------------------------------
//  Counting and reporting

static void
s_reset (self_t *self)
{
    for (size_t index = 0; index < self->count; index++)
        memset (&self->watchers [index].counts, 0, sizeof (s_counts_t));
    for (size_t slot = 0; slot < S_EVENT_SLOTS; slot++)
        self->events [slot].receivers = 0;
    self->snapshots.count = 0;
    self->spreads.count = 0;
    self->expired = 0;
    json_array_clear (self->expired_names);
    self->reset_at = zclock_mono ();
    //  The seq the brokers are at now, for what they publish from here
    for (size_t index = 0; index < self->broker_count; index++) {
        s_broker_t *broker = &self->brokers [index];
        broker->ping_id = ++broker->last_id;
        s_broker_send (self, index, DSH_PING, broker->ping_id);
    }
}

//  Asks every broker for the SNAPSHOT the views are checked against.
static void
s_audit_start (self_t *self)
{
    self->audits++;
    for (size_t index = 0; index < self->broker_count; index++) {
        s_broker_t *broker = &self->brokers [index];
        broker->audited = false;
        broker->audit_id = ++broker->last_id;
        s_broker_send (self, index, DSH_SNAPSHOT, broker->audit_id);
    }
}

//  How each view compares with its broker's final snapshot.
typedef struct {
    size_t matched;
    size_t unsynced;            //  no view (waiting for a snapshot)
    size_t behind;              //  a view at an older seq
    size_t ahead;               //  at a newer seq: the audit is stale
    size_t wrong;               //  at the seq, with other tools or another epoch
} s_verdicts_t;

static s_verdicts_t
s_verdicts (self_t *self)
{
    s_verdicts_t verdicts = { 0, 0, 0, 0, 0 };
    for (size_t index = 0; index < self->started; index++) {
        s_watcher_t *watcher = &self->watchers [index];
        const s_state_t *audit = &self->brokers [watcher->broker].audit;
        if (!watcher->synced)
            verdicts.unsynced++;
        else
        if (watcher->view.epoch == audit->epoch && watcher->view.seq < audit->seq)
            verdicts.behind++;
        else
        if (watcher->view.epoch == audit->epoch && watcher->view.seq > audit->seq)
            verdicts.ahead++;
        else
        if (watcher->view.epoch != audit->epoch || watcher->view.tools != audit->tools
        ||  watcher->view.fingerprint != audit->fingerprint)
            verdicts.wrong++;
        else
            verdicts.matched++;
    }
    return verdicts;
}

static void
s_report (self_t *self, const s_verdicts_t *verdicts, bool settled)
{
    for (size_t slot = 0; slot < S_EVENT_SLOTS; slot++)
        s_event_finish (self, &self->events [slot]);
    s_counts_t total;
    memset (&total, 0, sizeof (total));
    uint64_t received_min = UINT64_MAX, received_max = 0, expected = 0;
    size_t with_gaps = 0, with_losses = 0;
    for (size_t index = 0; index < self->count; index++) {
        s_watcher_t *watcher = &self->watchers [index];
        const s_counts_t *counts = &watcher->counts;
        uint64_t *sum = (uint64_t *) &total;
        const uint64_t *add = (const uint64_t *) counts;
        for (size_t field = 0; field < sizeof (s_counts_t) / sizeof (uint64_t); field++)
            sum [field] += add [field];
        if (counts->received < received_min)
            received_min = counts->received;
        if (counts->received > received_max)
            received_max = counts->received;
        with_gaps += counts->gaps > 0;
        with_losses += counts->lost > 0;
        const s_broker_t *broker = &self->brokers [watcher->broker];
        if (broker->audit.epoch == broker->epoch_at_reset && broker->audit.seq > broker->seq_at_reset)
            expected += broker->audit.seq - broker->seq_at_reset;
    }
    uint64_t published = 0;
    json_t *seqs = json_array (), *tools = json_array ();
    for (size_t index = 0; index < self->broker_count; index++) {
        const s_broker_t *broker = &self->brokers [index];
        if (broker->audit.epoch == broker->epoch_at_reset && broker->audit.seq > broker->seq_at_reset)
            published += broker->audit.seq - broker->seq_at_reset;
        json_array_append_new (seqs, json_integer ((json_int_t) broker->audit.seq));
        json_array_append_new (tools, json_integer ((json_int_t) broker->audit.tools));
    }
    size_t synced = 0;
    for (size_t index = 0; index < self->count; index++)
        synced += self->watchers [index].synced;
    json_t *report = json_object ();
    json_object_set_new (report, "watchers", json_integer ((json_int_t) self->count));
    json_object_set_new (report, "brokers", json_integer ((json_int_t) self->broker_count));
    json_object_set_new (report, "seconds", json_real ((double) (zclock_mono () - self->reset_at) / 1000.0));
    json_object_set_new (report, "synced", json_integer ((json_int_t) synced));
    json_object_set_new (report, "published", json_integer ((json_int_t) published));
    json_object_set_new (report, "received", json_integer ((json_int_t) total.received));
    json_object_set_new (report, "delivered", expected? json_real ((double) total.received / (double) expected)
                                                     : json_null ());
    json_object_set_new (report, "received_min", json_integer (self->count? (json_int_t) received_min: 0));
    json_object_set_new (report, "received_max", json_integer ((json_int_t) received_max));
    json_object_set_new (report, "applied", json_integer ((json_int_t) total.applied));
    json_object_set_new (report, "gaps", json_integer ((json_int_t) total.gaps));
    json_object_set_new (report, "watchers_with_gaps", json_integer ((json_int_t) with_gaps));
    json_object_set_new (report, "epoch_changes", json_integer ((json_int_t) total.epochs));
    json_object_set_new (report, "overflows", json_integer ((json_int_t) total.overflows));
    json_object_set_new (report, "reconnects", json_integer ((json_int_t) total.reconnects));
    json_object_set_new (report, "restarts", json_integer ((json_int_t) total.restarts));
    json_object_set_new (report, "silences", json_integer ((json_int_t) total.silences));
    json_object_set_new (report, "resyncs", json_integer ((json_int_t) total.lost));
    json_object_set_new (report, "watchers_resynced", json_integer ((json_int_t) with_losses));
    json_object_set_new (report, "snapshots", json_integer ((json_int_t) total.snapshots));
    json_object_set_new (report, "snapshot_resends", json_integer ((json_int_t) total.resends));
    json_object_set_new (report, "snapshot_overloaded", json_integer ((json_int_t) total.overloaded));
    json_object_set_new (report, "bad", json_integer ((json_int_t) total.bad));
    json_object_set_new (report, "snapshot_p50_ms", json_real (s_samples_ms (&self->snapshots, 50)));
    json_object_set_new (report, "snapshot_p99_ms", json_real (s_samples_ms (&self->snapshots, 99)));
    json_object_set_new (report, "snapshot_max_ms", json_real (s_samples_ms (&self->snapshots, 100)));
    json_object_set_new (report, "spread_events", json_integer ((json_int_t) self->spreads.count));
    json_object_set_new (report, "spread_p50_ms", json_real (s_samples_ms (&self->spreads, 50)));
    json_object_set_new (report, "spread_p99_ms", json_real (s_samples_ms (&self->spreads, 99)));
    json_object_set_new (report, "spread_max_ms", json_real (s_samples_ms (&self->spreads, 100)));
    json_object_set_new (report, "expired", json_integer ((json_int_t) self->expired));
    json_object_set_new (report, "expired_components", json_copy (self->expired_names));
    json_object_set_new (report, "view", json_pack ("{s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:o}",
                                                    "settled", settled, "audits", (json_int_t) self->audits,
                                                    "checked", (json_int_t) self->started,
                                                    "matched", (json_int_t) verdicts->matched,
                                                    "unsynced", (json_int_t) verdicts->unsynced,
                                                    "behind", (json_int_t) verdicts->behind,
                                                    "ahead", (json_int_t) verdicts->ahead,
                                                    "wrong", (json_int_t) verdicts->wrong,
                                                    "seq", seqs, "tools", tools));
    char *text = json_dumps (report, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION (6));
    printf ("%s\n", text);
    fflush (stdout);
    free (text);
    json_decref (report);
}

//  The report's state machine: audit, wait for every view to catch up
//  with the audit (a view past it means the audit is stale: audit again),
//  report when all have or the time is up.
static void
s_report_step (self_t *self, int64_t now)
{
    if (self->report_state == S_REPORT_IDLE)
        return;
    for (size_t index = 0; index < self->broker_count; index++)
        if (!self->brokers [index].audited && now < self->report_deadline)
            return;
    s_verdicts_t verdicts = s_verdicts (self);
    bool settled = verdicts.behind + verdicts.ahead + verdicts.unsynced == 0;
    if (!settled && now < self->report_deadline) {
        if (verdicts.ahead)
            s_audit_start (self);
        return;
    }
    s_report (self, &verdicts, settled);
    self->report_state = S_REPORT_IDLE;
}

//  ---------------------------------------------------------------------
//  The loop

static void
s_command (self_t *self, const char *line)
{
    if (streq (line, "report"))
        s_report_asked = 1;
    else
    if (streq (line, "reset"))
        s_reset_asked = 1;
    else
    if (streq (line, "quit"))
        self->quit = true;
    else
    if (line [0])
        fprintf (stderr, "dsh-bench-watchers: unknown command \"%s\" (report, reset, quit)\n", line);
}

static void
s_stdin (self_t *self)
{
    char input [256];
    ssize_t size = read (STDIN_FILENO, input, sizeof (input));
    if (size <= 0) {
        epoll_ctl (self->epoll, EPOLL_CTL_DEL, STDIN_FILENO, NULL);
        self->stdin_open = false;
        return;
    }
    for (ssize_t index = 0; index < size; index++)
        if (input [index] == '\n') {
            self->line [self->line_size] = 0;
            s_command (self, self->line);
            self->line_size = 0;
        }
        else
        if (self->line_size < sizeof (self->line) - 1)
            self->line [self->line_size++] = input [index];
}

//  Starts the next hundred watchers once the last hundred are welcomed
//  (or have had their time): all at once would overflow the broker's
//  listen backlog, and the kernel's SYN retries back off for a minute.
static void
s_start_batch (self_t *self, int64_t now)
{
    if (self->started == self->count)
        return;
    bool welcomed = true;
    for (size_t index = self->started > S_START_BATCH? self->started - S_START_BATCH: 0; index < self->started; index++)
        if (self->watchers [index].hello_due)
            welcomed = false;
    if (self->started && !welcomed && now - self->batch_started < S_START_WAIT_MS)
        return;
    if (!self->began)
        self->began = now;
    size_t end = self->started + S_START_BATCH < self->count? self->started + S_START_BATCH: self->count;
    for (; self->started < end; self->started++) {
        s_watcher_t *watcher = &self->watchers [self->started];
        watcher->broker = self->started % self->broker_count;
        watcher->heartbeat_ms = DSH_DEFAULT_HEARTBEAT_MS;
        watcher->liveness = DSH_DEFAULT_LIVENESS;
        s_watcher_follow (self, watcher, now);
    }
    self->batch_started = now;
}

//  Says once that every watcher has a view, or who does not after a while.
static void
s_tell_synced (self_t *self, int64_t now)
{
    if (self->sync_told)
        return;
    size_t synced = 0;
    for (size_t index = 0; index < self->count; index++)
        synced += self->watchers [index].ever_synced;
    if (synced < self->count && now - self->began < S_SYNC_WAIT_MS)
        return;
    printf ("watchers: %zu of %zu synced in %.0f ms, first SNAPSHOT p50 %.3f ms p99 %.3f ms max %.3f ms\n", synced,
            self->count, (double) (self->count? now - self->began: 0), s_samples_ms (&self->first_snapshots, 50),
            s_samples_ms (&self->first_snapshots, 99), s_samples_ms (&self->first_snapshots, 100));
    fflush (stdout);
    self->sync_told = true;
}

//  Runs every timer that is due; returns how long the poll may wait.
static long
s_timers (self_t *self)
{
    int64_t now = zclock_mono ();
    s_start_batch (self, now);
    if (now >= self->connections_due) {
        for (size_t index = 0; index < self->started; index++)
            s_watcher_connections (self, &self->watchers [index], now);
        self->connections_due = now + S_CONNECTION_CHECK_MS;
    }
    if (now >= self->timers_due) {
        int64_t next = now + 1000;
        for (size_t index = 0; index < self->started; index++) {
            int64_t due = s_watcher_timers (self, &self->watchers [index], now);
            if (due < next)
                next = due;
        }
        self->timers_due = next;
    }
    s_tell_synced (self, now);
    if (s_reset_asked) {
        s_reset_asked = 0;
        s_reset (self);
    }
    if (s_report_asked && self->report_state == S_REPORT_IDLE) {
        s_report_asked = 0;
        self->report_state = S_REPORT_AUDITING;
        self->report_deadline = now + S_SETTLE_MS;
        self->audits = 0;
        s_audit_start (self);
    }
    s_report_step (self, now);
    int64_t next = self->timers_due < self->connections_due? self->timers_due: self->connections_due;
    if (self->report_state != S_REPORT_IDLE && now + 50 < next)
        next = now + 50;
    if (self->started < self->count && now + 100 < next)
        next = now + 100;
    if (!self->sync_told && now + 100 < next)
        next = now + 100;
    return next > now? (long) (next - now): 0;
}

//  Reads every socket that may have input, a batch each; one with more
//  is looked at again next turn.
static void
s_handle_pending (self_t *self)
{
    int64_t now = zclock_mono ();
    size_t count = self->pending_count;
    memcpy (self->pending_work, self->pending_list, count * sizeof (size_t));
    self->pending_count = 0;
    for (size_t index = 0; index < count; index++)
        self->pending [self->pending_work [index]] = false;
    for (size_t index = 0; index < count; index++) {
        size_t slot = self->pending_work [index];
        if (slot == S_SLOT_STDIN) {
            if (self->stdin_open)
                s_stdin (self);
            continue;
        }
        size_t first_watcher = s_slot_broker (self->broker_count, 0);
        s_broker_t *broker = slot < first_watcher? &self->brokers [(slot - 1) / 2]: NULL;
        s_watcher_t *watcher = broker? NULL: &self->watchers [(slot - first_watcher) / 2];
        bool events = (slot - 1) % 2 == 1;
        zsock_t *sock = broker? (events? broker->expiry: broker->dealer): (events? watcher->events: watcher->front);
        if (!sock || !(zsock_events (sock) & ZMQ_POLLIN))
            continue;
        if (broker && events)
            s_broker_expiry (self, broker);
        else
        if (broker)
            s_broker_dealer (self, broker);
        else
        if (events)
            s_watcher_events (self, watcher);
        else
            s_watcher_front (self, watcher, now);
        //  The handler may have replaced the socket, or left input for later
        sock = broker? (events? broker->expiry: broker->dealer): (events? watcher->events: watcher->front);
        if (sock && (zsock_events (sock) & ZMQ_POLLIN))
            s_pending (self, slot);
    }
}

static void
s_self_destroy (self_t *self)
{
    for (size_t index = 0; index < self->count; index++) {
        s_watcher_t *watcher = &self->watchers [index];
        dsh_handshake_destroy (&watcher->handshake);
        zsock_destroy (&watcher->events);
        zsock_destroy (&watcher->front);
        zstr_free (&watcher->broker_id);
        free (watcher->queue);
    }
    for (size_t index = 0; index < self->broker_count; index++) {
        zsock_destroy (&self->brokers [index].dealer);
        zsock_destroy (&self->brokers [index].expiry);
        zstr_free (&self->brokers [index].front);
    }
    for (size_t slot = 0; slot < S_EVENT_SLOTS; slot++)
        free (self->events [slot].body);
    for (size_t index = 0; index < S_SNAPSHOTS_KEPT; index++)
        free (self->kept [index].rest);
    free (self->events);
    free (self->watchers);
    free (self->brokers);
    free (self->pending);
    free (self->pending_list);
    free (self->pending_work);
    if (self->epoll >= 0)
        close (self->epoll);
    free (self->first_snapshots.value);
    free (self->snapshots.value);
    free (self->spreads.value);
    json_decref (self->expired_names);
}

int
main (int argc, char *argv [])
{
    int snapshot_retry_ms = S_SNAPSHOT_RETRY_MS;
    static struct option options [] = {
        { "snapshot-retry-ms", required_argument, NULL, 'r' }, { NULL, 0, NULL, 0 }
    };
    int option;
    while ((option = getopt_long (argc, argv, "", options, NULL)) != -1)
        snapshot_retry_ms = option == 'r'? atoi (optarg): -1;
    long count = argc - optind == 2? strtol (argv [optind + 1], NULL, 10): -1;
    if (count < 0 || count > 10000 || snapshot_retry_ms < 0) {
        fprintf (stderr, "usage: dsh-bench-watchers ENDPOINT[,ENDPOINT...] N(0-10000) [--snapshot-retry-ms MS]\n");
        return 2;
    }
    char error [256];
    zlistx_t *fronts = dsh_sock_brokers (argv [optind], error, sizeof (error));
    if (!fronts) {
        fprintf (stderr, "dsh-bench-watchers: %s\n", error);
        return 2;
    }
    //  A watcher has two sockets and two connections, its SUB a monitor of
    //  two sockets more; every socket has a mailbox
    dsh_bench_fds_raise ("dsh-bench-watchers", count * 6 + 64);
    zsys_set_max_sockets ((size_t) count * 5 + zlistx_size (fronts) * 4 + 64);
    zsys_init ();
    //  stdout is for the lines dsh-bench waits for, read only then
    zsys_set_logstream (stderr);
    struct sigaction action = { .sa_handler = s_signal };
    sigaction (SIGUSR1, &action, NULL);
    sigaction (SIGUSR2, &action, NULL);

    self_t self;
    memset (&self, 0, sizeof (self));
    self.count = (size_t) count;
    self.snapshot_retry_ms = snapshot_retry_ms;
    self.watchers = (s_watcher_t *) calloc (self.count? self.count: 1, sizeof (s_watcher_t));
    self.events = (s_event_t *) calloc (S_EVENT_SLOTS, sizeof (s_event_t));
    self.broker_count = zlistx_size (fronts);
    self.brokers = (s_broker_t *) calloc (self.broker_count, sizeof (s_broker_t));
    self.expired_names = json_array ();
    assert (self.watchers && self.events && self.brokers);
    size_t index = 0;
    for (const char *front = (const char *) zlistx_first (fronts); front; front = (const char *) zlistx_next (fronts))
        self.brokers [index++].front = strdup (front);
    zlistx_destroy (&fronts);
    self.slots = s_slot_watcher (&self, &self.watchers [self.count], 0);
    self.pending = (bool *) calloc (self.slots, sizeof (bool));
    self.pending_list = (size_t *) calloc (self.slots, sizeof (size_t));
    self.pending_work = (size_t *) calloc (self.slots, sizeof (size_t));
    self.epoll = epoll_create1 (EPOLL_CLOEXEC);
    assert (self.pending && self.pending_list && self.pending_work && self.epoll >= 0);
    int rc = 0;
    for (index = 0; index < self.broker_count && rc == 0; index++) {
        rc = s_broker_start (&self.brokers [index]);
        if (rc == 0) {
            s_watch (&self, self.brokers [index].dealer, s_slot_broker (index, 0));
            s_watch (&self, self.brokers [index].expiry, s_slot_broker (index, 1));
        }
    }
    //  A file (/dev/null) cannot be polled and has no commands to give
    struct epoll_event input = { .events = EPOLLIN, .data.u64 = S_SLOT_STDIN };
    self.stdin_open = epoll_ctl (self.epoll, EPOLL_CTL_ADD, STDIN_FILENO, &input) == 0;
    self.reset_at = zclock_mono ();
    struct epoll_event wakeups [S_WAKEUPS];
    while (rc == 0 && !zsys_interrupted && !self.quit) {
        long timeout = s_timers (&self);
        int ready = epoll_wait (self.epoll, wakeups, S_WAKEUPS, self.pending_count? 0: (int) timeout);
        if (ready < 0 && errno != EINTR) {
            fprintf (stderr, "dsh-bench-watchers: epoll_wait: %s\n", strerror (errno));
            rc = 1;
        }
        for (int index = 0; index < ready; index++)
            s_pending (&self, (size_t) wakeups [index].data.u64);
        s_handle_pending (&self);
    }
    s_self_destroy (&self);
    return rc;
}
