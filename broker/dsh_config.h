/*  =========================================================================
    dsh_config - the broker's settings: built-in defaults, a ZPL file, flags

    Defaults make a working broker on loopback with no file at all. A config
    file (czmq's ZPL, read with zconfig) sets keys under "broker"; command-
    line flags set the same keys last. Unknown keys and bad values are errors
    that name the key, never silently ignored. See deploy/dsh-broker.cfg.
    =========================================================================
*/

#ifndef DSH_CONFIG_H_INCLUDED
#define DSH_CONFIG_H_INCLUDED

#include <czmq.h>

#include "dsh_stage.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *endpoint;             //  front: where clients and components start
    char *announce;             //  SUB that components' PUBs connect to
    char *work;                 //  ROUTER that components' DEALERs connect to
    char *events;               //  PUB of change events
    int heartbeat_ms;           //  components heartbeat this often
    int liveness;               //  missed heartbeats before expiry
    int call_timeout_ms;        //  deadline of a call that sets none
    int max_call_timeout_ms;    //  cap on a call's own deadline
    int max_message_bytes;      //  ZMQ_MAXMSGSIZE on network sockets
    int queue_limit;            //  high-water mark of every socket
    int max_in_flight;          //  calls in flight before new ones are OVERLOADED
    int max_queued;             //  calls held for busy components, all callers
    int max_queued_bytes;       //  ... their bytes
    int max_queued_per_caller;  //  calls held for one caller
    int max_queued_bytes_per_caller;    //  ... their bytes
    bool verbose;
    zconfig_t *chain;           //  the "chain" section of the file, or NULL
    const dsh_stage_kind_t *stage_kinds;    //  built-in stage kinds the host offers, or NULL
    zconfig_t *file;            //  the file as read, or NULL
} dsh_config_t;

//  A configuration with the built-in defaults.
dsh_config_t *
    dsh_config_new (void);

//  Destroy; safe twice.
void
    dsh_config_destroy (dsh_config_t **self_p);

//  Set one key ("endpoint", "heartbeat_ms", ...) from text. Returns 0, or
//  -1 with a reason naming the key.
int
    dsh_config_set (dsh_config_t *self, const char *key, const char *value,
                    char *error, size_t error_size);

//  Read a ZPL file: every key under its "broker" section, and its "chain"
//  section (checked when the chain is built). Returns 0, or -1 with a
//  reason.
int
    dsh_config_load (dsh_config_t *self, const char *path, char *error, size_t error_size);

//  Fill the announce, work and events endpoints not set, from the front
//  endpoint: tcp port+1, +2, +3 (or "*" for "*"); ipc and inproc names get
//  a suffix.
void
    dsh_config_derive (dsh_config_t *self);

#ifdef __cplusplus
}
#endif

#endif
