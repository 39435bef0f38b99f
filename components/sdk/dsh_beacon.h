/*  =========================================================================
    dsh_beacon - find brokers on a LAN by their UDP beacons

    A broker started with --beacon broadcasts a small datagram (czmq's
    zbeacon) every interval: "DSH1", its front port, whether it speaks
    CURVE, its epoch. A party given "beacon" or "beacon:PORT" as a broker
    listens for a while and connects to tcp://SOURCE:PORT for each broker
    heard, the host taken from the datagram's source address. Beacons are
    unauthenticated: anything on the LAN can send one, so decoding treats
    every datagram as hostile (PROTOCOL.md, "Broker discovery by beacon").
    The interface is zbeacon's: $ZSYS_INTERFACE (a name, an address, "*"
    for all), else the first broadcast interface.
    =========================================================================
*/

#ifndef DSH_BEACON_H_INCLUDED
#define DSH_BEACON_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Bytes of a DSH1 beacon; a longer one is read up to here (later DSH1
//  revisions may append fields)
#define DSH_BEACON_SIZE             16
//  A broker beacons this often unless told otherwise
#define DSH_BEACON_INTERVAL_MS      1000
//  How long "beacon" listens: two intervals and some, so one lost
//  datagram does not hide a broker
#define DSH_BEACON_WAIT_MS          2500
//  Distinct brokers one listen keeps; more (a flood) are counted as ignored
#define DSH_BEACON_HEARD_MAX        64

//  What one beacon says.
typedef struct {
    int front_port;             //  the broker's front, on the beacon's source host
    bool curve;                 //  the broker serves CURVE only
    uint64_t epoch;             //  the broker's epoch, as in WELCOME
} dsh_beacon_t;

//  Write the payload for beacon into buffer (at least DSH_BEACON_SIZE
//  bytes). Returns its size.
size_t
    dsh_beacon_encode (const dsh_beacon_t *beacon, byte *buffer);

//  Read a received payload. Returns 0, or -1 if it is not a DSH1 beacon
//  (short, another magic or version, port 0, epoch 0); beacon is then
//  untouched.
int
    dsh_beacon_decode (const byte *data, size_t size, dsh_beacon_t *beacon);

//  Start beaconing beacon on UDP port every interval_ms, on the interface
//  of $ZSYS_INTERFACE (or zsys_set_interface). Returns the zbeacon actor
//  (destroy it to stop), or NULL with a reason (no broadcast interface).
zactor_t *
    dsh_beacon_publish (const dsh_beacon_t *beacon, int port, int interval_ms,
                        char *error, size_t error_size);

//  Called once per distinct front endpoint heard ("tcp://IP:PORT").
typedef void (dsh_beacon_heard_fn) (const char *endpoint, const dsh_beacon_t *beacon, void *arg);

//  Listen on UDP port for timeout_ms, calling heard for each broker found.
//  Returns the number of datagrams ignored (not DSH1, malformed, or past
//  DSH_BEACON_HEARD_MAX brokers), or -1 with a reason if no socket could
//  listen (no broadcast interface).
int
    dsh_beacon_listen (int port, int timeout_ms, dsh_beacon_heard_fn *heard, void *arg,
                       char *error, size_t error_size);

//  The front endpoints heard on UDP port within timeout_ms, distinct, in
//  the order first heard (may be empty). NULL with a reason if no socket
//  could listen.
zlistx_t *
    dsh_beacon_find (int port, int timeout_ms, char *error, size_t error_size);

//  A broker list (from dsh_sock_brokers) with every "beacon" and
//  "beacon:PORT" entry replaced by the brokers heard there in timeout_ms
//  (0: DSH_BEACON_WAIT_MS) whose security matches this process (CURVE on
//  or off, dsh_curve_on); other entries kept, duplicates dropped, at most
//  DSH_BROKERS_MAX. Borrows brokers. Returns a new list, or NULL with a
//  reason when a beacon entry finds no usable broker.
zlistx_t *
    dsh_beacon_expand (zlistx_t *brokers, int timeout_ms, char *error, size_t error_size);

//  A broker spec as --broker and $DSH_BROKER take it (dsh_sock_brokers:
//  NULL or empty reads $DSH_BROKER), with its beacon entries expanded as
//  dsh_beacon_expand does: the comma list of endpoints to connect to.
//  Caller frees. NULL with a reason.
char *
    dsh_beacon_resolve (const char *spec, int timeout_ms, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif
