/*  =========================================================================
    dsh_sock - the few socket rules every dsh party follows

    Sends never block (a full or vanished peer gives an error the caller
    handles, it never stalls a loop); every socket that faces the network
    has a frame size limit; an endpoint the broker advertises with a
    wildcard host means the host the caller reached the broker on.

    Hot paths move libzmq parts instead of building a zframe_t and a zmsg_t
    per frame: dsh_sock_recv_msg takes one message into a dsh_sock_msg_t
    (parts on the caller's stack, the dsh/1 head split in place), and
    dsh_sock_send_parts sends parts whose content moves into libzmq.
    dsh_sock_drain handles what waits on a busy socket without a poll per
    message.
    =========================================================================
*/

#ifndef DSH_SOCK_H_INCLUDED
#define DSH_SOCK_H_INCLUDED

#include <czmq.h>

#include "dsh_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Send msg without blocking and destroy it, sent or not. Returns 0, or -1
//  with errno (EAGAIN: the peer is full; EHOSTUNREACH: a ROUTER with
//  ZMQ_ROUTER_MANDATORY has no such peer).
int
    dsh_sock_send (zsock_t *sock, zmsg_t **msg_p);

//  Limit every frame the socket accepts to max_bytes and bound its queues
//  (ZMQ_MAXMSGSIZE, send and receive high-water marks of hwm messages).
void
    dsh_sock_limit (zsock_t *sock, int max_bytes, int hwm);

//  Make a connecting socket heal by itself (every socket of the SDK and
//  the CLI): ZMTP heartbeats every heartbeat_ms, a connection with no
//  traffic for heartbeat_ms x liveness is closed (and made again), plus
//  dsh_sock_keepalive. No TTL is sent: it would make the broker keep a
//  timer per connection, re-armed on every message it receives (libzmq
//  4.3's timer cancel is a scan of every timer of the I/O thread, so a
//  broker of 2 000 connections spent most of its idle CPU there). So
//  after a partition of any length a connection is made again within a
//  heartbeat or two of the link's return.
void
    dsh_sock_heal (zsock_t *sock, int heartbeat_ms, int liveness);

//  What a socket many peers connect to needs (the broker's): no ZMTP
//  heartbeats of its own (its peers ping it; libzmq answers with no timer),
//  TCP keepalive after heartbeat_ms x liveness of silence, probing every
//  heartbeat_ms, liveness times, so a peer whose host vanished loses its
//  connection within about twice the liveness window, at no cost to the
//  broker's threads; a connect attempt gives up after heartbeat_ms (a SYN
//  into a partition is not left to TCP's backoff); reconnects start at
//  100 ms and back off to at most heartbeat_ms.
void
    dsh_sock_keepalive (zsock_t *sock, int heartbeat_ms, int liveness);

//  The brokers a program follows, from spec: one endpoint or a comma list
//  ("tcp://a:7570,tcp://b:7570"), spaces around entries ignored; NULL or
//  empty: $DSH_BROKER, else DSH_DEFAULT_ENDPOINT. An entry "beacon" or
//  "beacon:PORT" stands for brokers found by UDP beacon (dsh_beacon) and is
//  kept as it is. Returns a list of strings (caller destroys), or NULL with
//  a reason: an entry that is empty, not tcp://HOST:PORT, ipc://PATH,
//  inproc://NAME or beacon[:PORT], or more than DSH_BROKERS_MAX entries.
zlistx_t *
    dsh_sock_brokers (const char *spec, char *error, size_t error_size);

//  The endpoint to connect to for an advertised one: a wildcard host
//  ("*", "0.0.0.0", "::", "[::]") is replaced by the host of front.
//  Caller frees the result.
char *
    dsh_sock_resolve (const char *advertised, const char *front);

//  Handles one message waiting on reader. Returns 0, or -1 to stop (a zloop
//  reader's -1: the loop ends).
typedef int (dsh_sock_handler_fn) (zsock_t *reader, void *arg);

//  Call handler while reader has a message waiting, at most batch times, so
//  a busy socket costs one poll per batch yet other sockets get their turn.
//  Returns 0, or -1 as soon as a handler does.
int
    dsh_sock_drain (zsock_t *reader, int batch, dsh_sock_handler_fn *handler, void *arg);

//  The most parts a received message may have (envelope frames included).
//  dsh/1 messages have at most 5 of their own; the rest leaves room for
//  ROUTER hops.
#define DSH_SOCK_PARTS_MAX 16

//  One received message: [envelope...] "" "DSH1" COMMAND rest..., split in
//  place. part [body .. count) are the frames after the command.
typedef struct {
    zmq_msg_t part [DSH_SOCK_PARTS_MAX];
    size_t count;                   //  parts held
    size_t envelope;                //  routing parts before the delimiter
    size_t body;                    //  index of the first part after the command
    char command [DSH_COMMAND_MAX + 1];
} dsh_sock_msg_t;

//  Receive one whole message without waiting and split its dsh/1 head (the
//  rules of dsh_proto_split). Returns 0, or -1 either because nothing was
//  waiting (errno set, error empty, msg holds nothing) or because the
//  message is malformed (a reason in error; msg still holds its parts, and
//  body is non-zero if a delimiter was found, so a reply can be routed
//  along the envelope). A message of more than DSH_SOCK_PARTS_MAX parts is
//  read whole and dropped. Close msg after either.
int
    dsh_sock_recv_msg (zsock_t *sock, dsh_sock_msg_t *msg, char *error, size_t error_size);

//  Close every part msg holds; safe twice.
void
    dsh_sock_msg_close (dsh_sock_msg_t *msg);

//  Fill parts [0..3) with the head of a message a DEALER sends: "" "DSH1"
//  command (copied: short parts live inside the zmq_msg_t, no allocation).
void
    dsh_sock_head (zmq_msg_t *parts, const char *command);

//  Fill part with a copy of size bytes of data.
void
    dsh_sock_part_mem (zmq_msg_t *part, const void *data, size_t size);

//  Fill part with frame's bytes, uncopied: libzmq frees the frame when it
//  is done with them. Takes the frame.
void
    dsh_sock_part_frame (zmq_msg_t *part, zframe_t **frame_p);

//  Send parts [0..count) as one message without blocking. Each part's
//  content moves into libzmq and every part is left closed, sent or not.
//  Returns 0, or -1 with errno as dsh_sock_send.
int
    dsh_sock_send_parts (zsock_t *sock, zmq_msg_t *parts, size_t count);

#ifdef __cplusplus
}
#endif

#endif
