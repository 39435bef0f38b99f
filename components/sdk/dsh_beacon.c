/*  =========================================================================
    dsh_beacon - find brokers on a LAN by their UDP beacons
    =========================================================================
*/

#include "dsh_beacon.h"
#include "dsh_curve.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

//  Payload: "DSH1", front port (u16), flags (u8), reserved (u8), epoch
//  (u64), integers big-endian. PROTOCOL.md, "Broker discovery by beacon"
#define S_MAGIC         "DSH1"
#define S_FLAG_CURVE    0x01

size_t
dsh_beacon_encode (const dsh_beacon_t *beacon, byte *buffer)
{
    assert (beacon);
    assert (buffer);
    assert (beacon->front_port > 0 && beacon->front_port < 65536);
    memcpy (buffer, S_MAGIC, 4);
    buffer [4] = (byte) (beacon->front_port >> 8);
    buffer [5] = (byte) (beacon->front_port & 0xff);
    buffer [6] = beacon->curve? S_FLAG_CURVE: 0;
    buffer [7] = 0;
    dsh_be64_put (beacon->epoch, buffer + 8);
    return DSH_BEACON_SIZE;
}

int
dsh_beacon_decode (const byte *data, size_t size, dsh_beacon_t *beacon)
{
    assert (beacon);
    if (!data || size < DSH_BEACON_SIZE || memcmp (data, S_MAGIC, 4))
        return -1;
    int front_port = (data [4] << 8) | data [5];
    uint64_t epoch = dsh_be64_get (data + 8);
    if (front_port == 0 || epoch == 0)
        return -1;
    //  Flag bits other than CURVE, and the reserved byte, are for later
    //  revisions: ignored, not refused
    beacon->front_port = front_port;
    beacon->curve = (data [6] & S_FLAG_CURVE) != 0;
    beacon->epoch = epoch;
    return 0;
}

//  A zbeacon on UDP port, or NULL with a reason: zbeacon answers CONFIGURE
//  with an empty hostname when no interface fits or the port is taken.
static zactor_t *
s_beacon_new (int port, char *error, size_t error_size)
{
    assert (port > 0 && port < 65536);
    zactor_t *beacon = zactor_new (zbeacon, NULL);
    assert (beacon);
    zsock_send (beacon, "si", "CONFIGURE", port);
    char *hostname = zstr_recv (beacon);
    if (!hostname || !*hostname) {
        snprintf (error, error_size, "cannot use UDP port %d for beacons: no broadcast interface "
                  "(ZSYS_INTERFACE=\"%s\"; loopback carries none), or the port is taken", port,
                  zsys_interface ());
        zstr_free (&hostname);
        zactor_destroy (&beacon);
        return NULL;
    }
    zstr_free (&hostname);
    return beacon;
}

zactor_t *
dsh_beacon_publish (const dsh_beacon_t *beacon, int port, int interval_ms, char *error, size_t error_size)
{
    assert (beacon);
    assert (interval_ms > 0);
    zactor_t *publisher = s_beacon_new (port, error, error_size);
    if (publisher) {
        byte payload [DSH_BEACON_SIZE];
        size_t size = dsh_beacon_encode (beacon, payload);
        zsock_send (publisher, "sbi", "PUBLISH", payload, size, interval_ms);
    }
    return publisher;
}

//  The front endpoint a beacon from source names: IPv6 sources in brackets.
static char *
s_endpoint (const char *source, int front_port)
{
    if (strchr (source, ':'))
        return zsys_sprintf ("tcp://[%s]:%d", source, front_port);
    return zsys_sprintf ("tcp://%s:%d", source, front_port);
}

int
dsh_beacon_listen (int port, int timeout_ms, dsh_beacon_heard_fn *heard, void *arg,
                   char *error, size_t error_size)
{
    assert (heard);
    zactor_t *listener = s_beacon_new (port, error, error_size);
    if (!listener)
        return -1;
    //  Everything, not just "DSH1": foreign datagrams are counted
    zsock_send (listener, "sb", "SUBSCRIBE", "", (size_t) 0);
    zhashx_t *seen = zhashx_new ();
    zpoller_t *poller = zpoller_new (listener, NULL);
    int ignored = 0;
    int64_t deadline = zclock_mono () + timeout_ms;
    for (int64_t now = zclock_mono (); now < deadline; now = zclock_mono ()) {
        if (!zpoller_wait (poller, (int) (deadline - now))) {
            if (zpoller_terminated (poller))
                break;
            continue;
        }
        zmsg_t *msg = zmsg_recv (listener);
        char *source = msg? zmsg_popstr (msg): NULL;
        zframe_t *payload = msg? zmsg_pop (msg): NULL;
        dsh_beacon_t beacon;
        if (!source || !*source || !payload
        ||  dsh_beacon_decode (zframe_data (payload), zframe_size (payload), &beacon))
            ignored++;
        else {
            //  A broker heard again (every interval) is not news
            char *endpoint = s_endpoint (source, beacon.front_port);
            if (!zhashx_lookup (seen, endpoint)) {
                if (zhashx_size (seen) >= DSH_BEACON_HEARD_MAX)
                    ignored++;
                else {
                    zhashx_insert (seen, endpoint, "");
                    heard (endpoint, &beacon, arg);
                }
            }
            zstr_free (&endpoint);
        }
        zstr_free (&source);
        zframe_destroy (&payload);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    zhashx_destroy (&seen);
    zactor_destroy (&listener);
    return ignored;
}

static void
s_find_heard (const char *endpoint, const dsh_beacon_t *beacon, void *arg)
{
    (void) beacon;
    zlistx_add_end ((zlistx_t *) arg, (void *) endpoint);
}

static zlistx_t *
s_endpoint_list (void)
{
    zlistx_t *list = zlistx_new ();
    zlistx_set_destructor (list, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_duplicator (list, (zlistx_duplicator_fn *) strdup);
    zlistx_set_comparator (list, (zlistx_comparator_fn *) strcmp);
    return list;
}

zlistx_t *
dsh_beacon_find (int port, int timeout_ms, char *error, size_t error_size)
{
    zlistx_t *found = s_endpoint_list ();
    if (dsh_beacon_listen (port, timeout_ms, s_find_heard, found, error, error_size) < 0)
        zlistx_destroy (&found);
    return found;
}

//  What one "beacon" entry of a broker list gathers.
typedef struct {
    zlistx_t *brokers;          //  the expanded list
    size_t usable;              //  brokers heard whose security matches ours
    size_t mismatched;          //  brokers heard that we could not talk to
} s_gather_t;

static void
s_expand_heard (const char *endpoint, const dsh_beacon_t *beacon, void *arg)
{
    s_gather_t *gather = (s_gather_t *) arg;
    //  A CURVE broker refuses a plain client and a plain broker cannot
    //  answer a CURVE handshake: either would only hang the caller
    if (beacon->curve != dsh_curve_on ()) {
        gather->mismatched++;
        return;
    }
    gather->usable++;
    if (!zlistx_find (gather->brokers, (void *) endpoint)
    &&  zlistx_size (gather->brokers) < DSH_BROKERS_MAX)
        zlistx_add_end (gather->brokers, (void *) endpoint);
}

zlistx_t *
dsh_beacon_expand (zlistx_t *brokers, int timeout_ms, char *error, size_t error_size)
{
    assert (brokers);
    if (timeout_ms <= 0)
        timeout_ms = DSH_BEACON_WAIT_MS;
    s_gather_t gather = { s_endpoint_list (), 0, 0 };
    for (const char *entry = (const char *) zlistx_first (brokers); entry && gather.brokers;
         entry = (const char *) zlistx_next (brokers)) {
        if (!streq (entry, "beacon") && strncmp (entry, "beacon:", 7)) {
            if (!zlistx_find (gather.brokers, (void *) entry)
            &&  zlistx_size (gather.brokers) < DSH_BROKERS_MAX)
                zlistx_add_end (gather.brokers, (void *) entry);
            continue;
        }
        int port = streq (entry, "beacon")? DSH_DEFAULT_BEACON_PORT: atoi (entry + 7);
        if (port <= 0 || port > 65535) {
            snprintf (error, error_size, "%s: not a UDP port from 1 to 65535", entry);
            zlistx_destroy (&gather.brokers);
            break;
        }
        char reason [256];
        gather.usable = gather.mismatched = 0;
        if (dsh_beacon_listen (port, timeout_ms, s_expand_heard, &gather, reason, sizeof (reason)) < 0) {
            snprintf (error, error_size, "%s: %s", entry, reason);
            zlistx_destroy (&gather.brokers);
        }
        else
        if (gather.usable == 0) {
            if (gather.mismatched)
                snprintf (error, error_size, "%s: %zu broker(s) heard, none with this program's security: "
                          "they speak %s (%s)", entry, gather.mismatched, dsh_curve_on ()? "plain": "CURVE",
                          dsh_curve_on ()? "drop --cert and --broker-cert":
                          "give --cert and --broker-cert, or $DSH_CERT and $DSH_BROKER_CERT");
            else
                snprintf (error, error_size, "%s: no broker beacon heard on UDP port %d within %d ms",
                          entry, port, timeout_ms);
            zlistx_destroy (&gather.brokers);
        }
    }
    return gather.brokers;
}

char *
dsh_beacon_resolve (const char *spec, int timeout_ms, char *error, size_t error_size)
{
    zlistx_t *brokers = dsh_sock_brokers (spec, error, error_size);
    zlistx_t *expanded = brokers? dsh_beacon_expand (brokers, timeout_ms, error, error_size): NULL;
    char *resolved = NULL;
    for (const char *entry = expanded? (const char *) zlistx_first (expanded): NULL; entry;
         entry = (const char *) zlistx_next (expanded)) {
        char *longer = zsys_sprintf ("%s%s%s", resolved? resolved: "", resolved? ",": "", entry);
        zstr_free (&resolved);
        resolved = longer;
    }
    zlistx_destroy (&expanded);
    zlistx_destroy (&brokers);
    return resolved;
}
