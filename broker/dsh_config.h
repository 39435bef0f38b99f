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
    int max_tool_bytes;         //  largest canonical tool entry taken
    int max_tools;              //  tools one component may provide
    int max_announce_parts_bytes;   //  tool sets announced in parts, held until whole
    int events_queue_bytes;     //  change events queued per subscriber, in bytes
    int snapshot_bytes_per_second;  //  SNAPSHOT replies sent at most this fast
    int io_threads;             //  libzmq I/O threads (0: one per CPU, at most 16)
    int max_queued;             //  calls held for busy components, all callers
    int max_queued_bytes;       //  ... their bytes
    int max_queued_per_caller;  //  calls held for one caller
    int max_queued_bytes_per_caller;    //  ... their bytes
    bool verbose;
    bool stats;                 //  call statistics (STATS); --no-stats turns them off
    bool curve;                 //  security/curve: CURVE on every socket
    char *certificate;          //  security/certificate: the broker's keypair (zcert files)
    char *allow;                //  security/allow: directory of allowed public certificates
    bool insecure;              //  --insecure: plain sockets beyond loopback, on purpose
    bool beacon;                //  a "beacon" section or --beacon: broadcast UDP beacons
    int beacon_port;            //  beacon/port: their UDP port
    int beacon_interval_ms;     //  beacon/interval_ms: one every this often
    char *beacon_interface;     //  beacon/interface: zbeacon's interface, or NULL ($ZSYS_INTERFACE)
    char *name;                 //  name: the broker's stable id (its audit chain); default host:port
    char *state_dir;            //  state_dir: where the SQLite store lives
    char *store;                //  store: a postgresql:// URI, or a SQLite path; default in state_dir
    int audit;                  //  audit (dsh_audit_policy_t): required, best-effort, off
    int audit_arguments;        //  audit/arguments (dsh_audit_args_t): full, digest, none
    int audit_arguments_max_bytes;  //  audit/arguments_max_bytes: larger are kept as a digest
    char *audit_digest_tools;   //  audit/digest_tools: globs of tools whose arguments are a digest
    int audit_queue_bytes;      //  audit/queue_bytes: records waiting for the store, at most
    int audit_retain_days;      //  audit/retain_days: 0 keeps them
    int audit_max_bytes;        //  audit/max_bytes: the chain's record bytes, at most (0: no bound)
    int pins;                   //  pins (dsh_pins_policy_t): off, tofu, strict; default tofu
    zcert_t *cert;              //  the keypair, loaded by dsh_config_secure
    zconfig_t *chain;           //  the "chain" section of the file, or NULL
    const dsh_stage_kind_t *stage_kinds;    //  built-in stage kinds the host offers, or NULL
    zconfig_t *file;            //  the file as read, or NULL
} dsh_config_t;

//  The state directory when none is set: $DSH_STATE_DIR, else
//  $XDG_STATE_HOME/dsh, else $HOME/.local/state/dsh, else /var/lib/dsh.
//  Caller frees.
char *
    dsh_config_default_state_dir (void);

//  Fill name and store when not set, from the front endpoint as bound
//  (front): name host:port, store STATE_DIR/broker-PORT.db. Returns 0, or
//  -1 with a reason (the state directory cannot be made).
int
    dsh_config_state (dsh_config_t *self, const char *front, char *error, size_t error_size);

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

//  Read a ZPL file: every key under its "broker", "security" and "beacon"
//  sections (a "beacon" section, even empty, turns beacons on; its keys are
//  set as "beacon/port" and so on), and its "chain" section (checked when
//  the chain is built). Returns 0, or -1 with a reason.
int
    dsh_config_load (dsh_config_t *self, const char *path, char *error, size_t error_size);

//  The high-water mark of the events socket: as many events of 4 KiB (a
//  typical tool event is a few hundred bytes) as fit in events_queue_bytes,
//  at least 1 and at most queue_limit; 8192 by default, so that a burst of
//  thousands of small events reaches a subscriber that is behind.
int
    dsh_config_events_hwm (dsh_config_t *self);

//  Fill the announce, work and events endpoints not set, from the front
//  endpoint: tcp port+1, +2, +3 (or "*" for "*"); ipc and inproc names get
//  a suffix.
void
    dsh_config_derive (dsh_config_t *self);

//  Check the security settings and load the broker's keypair: CURVE needs a
//  certificate with its secret and an allow-list directory; without CURVE
//  every endpoint must be loopback (127.0.0.0/8, ::1, localhost, ipc://,
//  inproc://) unless insecure is set. Call after dsh_config_derive.
//  Returns 0, or -1 with a reason.
int
    dsh_config_secure (dsh_config_t *self, char *error, size_t error_size);

//  The UDP beacon payload's front port for the front endpoint as bound,
//  after checking beacons make sense there: a tcp:// front that other hosts
//  can reach. Returns the port, or -1 with a reason.
int
    dsh_config_beacon_port (dsh_config_t *self, const char *front, char *error, size_t error_size);

//  True if endpoint can be reached only from this host.
bool
    dsh_config_loopback (const char *endpoint);

#ifdef __cplusplus
}
#endif

#endif
