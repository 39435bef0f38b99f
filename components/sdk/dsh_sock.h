/*  =========================================================================
    dsh_sock - the few socket rules every dsh party follows

    Sends never block (a full or vanished peer gives an error the caller
    handles, it never stalls a loop); every socket that faces the network
    has a frame size limit; an endpoint the broker advertises with a
    wildcard host means the host the caller reached the broker on.
    =========================================================================
*/

#ifndef DSH_SOCK_H_INCLUDED
#define DSH_SOCK_H_INCLUDED

#include <czmq.h>

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

//  The endpoint to connect to for an advertised one: a wildcard host
//  ("*", "0.0.0.0", "::", "[::]") is replaced by the host of front.
//  Caller frees the result.
char *
    dsh_sock_resolve (const char *advertised, const char *front);

#ifdef __cplusplus
}
#endif

#endif
