/*  =========================================================================
    dsh_registry - the registry actor: the tool set of a swarm, its change
    events, and the dispatch of calls to the components that serve them

    Embeddable in any process (dsh-broker is one host of it):

        dsh_config_t *config = dsh_config_new ();
        zactor_t *registry = zactor_new (dsh_registry_actor, config);
        char *front = NULL, *announce = NULL, *work = NULL, *events = NULL;
        zstr_sendx (registry, "ENDPOINTS", NULL);
        zstr_recvx (registry, &front, &announce, &work, &events, NULL);
        ...
        zactor_destroy (&registry);

    It binds four sockets (PROTOCOL.md, "Sockets"): a ROUTER front for
    clients, a SUB that components' PUBs announce and heartbeat to, a ROUTER
    work socket that components' DEALERs take calls from, and a PUB of change
    events. Commands on its pipe:
        ENDPOINTS   -> front announce work events, or "ERROR" reason
                       if the actor could not bind
        STATS       -> one line: tools, components, calls in flight, totals
        EPOCH       -> the epoch WELCOME carries, in decimal (for beacons)
        $TERM       -> ends the actor
    =========================================================================
*/

#ifndef DSH_REGISTRY_H_INCLUDED
#define DSH_REGISTRY_H_INCLUDED

#include <czmq.h>

#include "dsh_config.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The actor; args is a dsh_config_t * that must stay valid until
//  zactor_new returns (the actor copies what it keeps).
void
    dsh_registry_actor (zsock_t *pipe, void *args);

#ifdef __cplusplus
}
#endif

#endif
