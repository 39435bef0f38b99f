/*  =========================================================================
    dsh_routes - which WORK connection serves which component id

    A component id is owned: the WORK connection that claimed it (by its
    HELLO, or by its first message when its routing id is the id) is the
    one calls go to, until that connection closes or another claim takes
    the id over. Connections refused the id, still open, wait in line for
    it. The registry decides whether a claim may take a held id
    (PROTOCOL.md, "Component ids are owned"); this table only remembers
    the answer: the route, and the key and generation it was claimed with.

    Pure data, no sockets: the registry feeds it claims and the fds of
    connections that closed.
    =========================================================================
*/

#ifndef DSH_ROUTES_H_INCLUDED
#define DSH_ROUTES_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Connections that wait for one id, at most (the oldest goes first)
#define DSH_ROUTES_WAITING_MAX 8

typedef struct _dsh_routes_t dsh_routes_t;

//  One component id's route.
typedef struct {
    char *component;
    char *routing_id;           //  its WORK connection's routing id
    int fd;                     //  that connection's fd (ZMQ_SRCFD), or -1
    uint64_t generation;        //  its latest HELLO's, 0 if it never said
    char *key;                  //  under CURVE, the key that claimed it
    int64_t claimed_ms;         //  wall clock, for refusals' reasons
    int64_t claimed_mono_ms;    //  monotonic, for the liveness window
    char host [64];             //  its connection's peer address, once asked for; "" until then
} dsh_route_t;

//  Create an empty table.
dsh_routes_t *
    dsh_routes_new (void);

//  Destroy the table; safe twice.
void
    dsh_routes_destroy (dsh_routes_t **self_p);

//  The route of a component id, or NULL.
dsh_route_t *
    dsh_routes_lookup (dsh_routes_t *self, const char *component);

//  The route a WORK connection's routing id holds, or NULL.
dsh_route_t *
    dsh_routes_link (dsh_routes_t *self, const char *routing_id);

//  Give component's id to the connection routing_id, replacing whatever
//  route it had (and whatever id routing_id held). key may be NULL.
//  Returns the new route.
dsh_route_t *
    dsh_routes_bind (dsh_routes_t *self, const char *component, const char *routing_id, int fd,
                     uint64_t generation, const char *key, int64_t now_ms, int64_t now_mono_ms);

//  Note the connection's fd, if it changed (a connection made again under
//  the same routing id).
void
    dsh_routes_set_fd (dsh_routes_t *self, dsh_route_t *route, int fd);

//  Note the generation the route's owner states now (its tool set
//  changed); 0 changes nothing.
void
    dsh_routes_set_generation (dsh_routes_t *self, dsh_route_t *route, uint64_t generation);

//  Note that a connection that claimed component's id (refused, or taken
//  over by another connection of its owner) is still open and waits: it
//  gets the id when the route's connection closes (dsh_routes_promote).
void
    dsh_routes_wait (dsh_routes_t *self, const char *component, const char *routing_id, int fd,
                     uint64_t generation, const char *key);

//  The connections waiting for component's id, oldest first (dsh_route_t
//  *, borrowed), or NULL if none.
zlistx_t *
    dsh_routes_waiting (dsh_routes_t *self, const char *component);

//  True if the connection routing_id waits for component's id.
bool
    dsh_routes_waits (dsh_routes_t *self, const char *component, const char *routing_id);

//  Give component's id to the connection that has waited longest for it,
//  if any. Returns the new route, or NULL.
dsh_route_t *
    dsh_routes_promote (dsh_routes_t *self, const char *component, int64_t now_ms, int64_t now_mono_ms);

//  The connection on fd closed: remove the routes it held and its waits,
//  and return the ids of the routes, in a new list of char * (caller
//  destroys).
zlistx_t *
    dsh_routes_closed (dsh_routes_t *self, int fd);

//  The generation the id's latest owner claimed it at, even if its
//  connection has closed since (so a claim can tell a reconnection of the
//  same process from a new one), or 0 if none is known.
uint64_t
    dsh_routes_owned_at (dsh_routes_t *self, const char *component);

//  Forget what dsh_routes_owned_at knows of an id that has no route (its
//  component has left the catalog).
void
    dsh_routes_forget (dsh_routes_t *self, const char *component);

//  Number of routes.
size_t
    dsh_routes_size (dsh_routes_t *self);

#ifdef __cplusplus
}
#endif

#endif
