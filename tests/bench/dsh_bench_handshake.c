/*  =========================================================================
    dsh-bench-handshake - what a new CURVE connection costs, by the size of
    the allow-list, alone and under a handshake flood

        dsh-bench-handshake [--zauth] [--keys 1,1000,10000] [--connections N]
                            [--flood SOCKETS] [--during N]

    For each allow-list size: a directory of that many certificates (one of
    them the client's), the ZAP handler (dsh_keystore as dsh-broker runs
    it, or with --zauth czmq's zauth, as it did before issue 22), and a
    CURVE ROUTER served with it on loopback. Then N new connections one
    after the other, each timed from connect to the server receiving its
    first message; then the same while SOCKETS sockets with a key in no
    allow-list connect over and over from their own ZeroMQ context (each
    refused handshake is a ZAP request), for N_DURING connections, each
    given 8 s. By hand only: not part of the test suite.
    =========================================================================
*/

#include "dsh_curve.h"
#include "dsh_keystore.h"

#include <ftw.h>

#define S_TIMEOUT_MS    8000

static int
s_remove_entry (const char *path, const struct stat *status, int type, struct FTW *walk)
{
    (void) status;
    (void) type;
    (void) walk;
    remove (path);
    return 0;
}

//  ---------------------------------------------------------------------
//  The flood: sockets with an unknown key, from their own context, each
//  made again as soon as its handshake is refused

typedef struct {
    const char *endpoint;
    const char *server_key;
    int sockets;
} s_flood_args_t;

//  A flood socket, connecting, and its monitor
typedef struct {
    void *sock;
    void *monitor;
} s_flooder_t;

static void
s_flooder_open (s_flooder_t *self, void *context, zcert_t *cert, const s_flood_args_t *args, int index)
{
    self->sock = zmq_socket (context, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt (self->sock, ZMQ_LINGER, &linger, sizeof (linger));
    zmq_setsockopt (self->sock, ZMQ_CURVE_PUBLICKEY, zcert_public_key (cert), 32);
    zmq_setsockopt (self->sock, ZMQ_CURVE_SECRETKEY, zcert_secret_key (cert), 32);
    zmq_setsockopt (self->sock, ZMQ_CURVE_SERVERKEY, args->server_key, 40);
    //  A fresh name each time: an inproc name is not free again at once
    static unsigned sequence = 0;
    char endpoint [64];
    snprintf (endpoint, sizeof (endpoint), "inproc://flood-monitor-%d-%u", index, ++sequence);
    zmq_socket_monitor (self->sock, endpoint, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL
                                             | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_DISCONNECTED);
    self->monitor = zmq_socket (context, ZMQ_PAIR);
    zmq_setsockopt (self->monitor, ZMQ_LINGER, &linger, sizeof (linger));
    zmq_connect (self->monitor, endpoint);
    zmq_connect (self->sock, args->endpoint);
}

static void
s_flooder_close (s_flooder_t *self)
{
    zmq_socket_monitor (self->sock, NULL, 0);
    zmq_close (self->monitor);
    zmq_close (self->sock);
}

static void
s_flood_actor (zsock_t *pipe, void *argument)
{
    const s_flood_args_t *args = (const s_flood_args_t *) argument;
    void *context = zmq_ctx_new ();
    zcert_t *cert = zcert_new ();
    s_flooder_t *flooders = (s_flooder_t *) zmalloc (sizeof (s_flooder_t) * (size_t) args->sockets);
    zmq_pollitem_t *items = (zmq_pollitem_t *) zmalloc (sizeof (zmq_pollitem_t) * (size_t) (args->sockets + 1));
    for (int index = 0; index < args->sockets; index++)
        s_flooder_open (&flooders [index], context, cert, args, index);
    zsock_signal (pipe, 0);
    bool running = true;
    while (running) {
        items [0] = (zmq_pollitem_t) { zsock_resolve (pipe), 0, ZMQ_POLLIN, 0 };
        for (int index = 0; index < args->sockets; index++)
            items [index + 1] = (zmq_pollitem_t) { flooders [index].monitor, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (items, args->sockets + 1, 100) < 0)
            break;
        if (items [0].revents & ZMQ_POLLIN) {
            //  $TERM, or the pipe gone
            char *command = zstr_recv (pipe);
            running = false;
            zstr_free (&command);
        }
        for (int index = 0; running && index < args->sockets; index++)
            if (items [index + 1].revents & ZMQ_POLLIN) {
                //  Refused: a new socket connects at once
                s_flooder_close (&flooders [index]);
                s_flooder_open (&flooders [index], context, cert, args, index);
            }
    }
    for (int index = 0; index < args->sockets; index++)
        s_flooder_close (&flooders [index]);
    free (flooders);
    free (items);
    zcert_destroy (&cert);
    zmq_ctx_term (context);
}

//  ---------------------------------------------------------------------
//  One allow-list size

typedef struct {
    bool zauth;
    int connections;
    int flood_sockets;
    int during;
} s_options_t;

//  Counts the server's refused handshakes (libzmq's monitor events)
static size_t
s_drain_refusals (zsock_t *monitor)
{
    size_t refused = 0;
    while (zsock_events (monitor) & ZMQ_POLLIN) {
        zmsg_t *msg = zmsg_recv (monitor);
        zframe_t *frame = zmsg_first (msg);
        if (frame && zframe_size (frame) == 6) {
            uint16_t event;
            memcpy (&event, zframe_data (frame), 2);
            refused += event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
        }
        zmsg_destroy (&msg);
    }
    return refused;
}

//  One new connection with cert: ms from connect to the server's receipt
//  of its message, or -1 after S_TIMEOUT_MS. Counts refusals meanwhile.
static double
s_connect_once (zsock_t *server, zsock_t *monitor, zcert_t *cert, zcert_t *server_cert, int port,
                size_t *refused)
{
    zsock_t *client = zsock_new (ZMQ_DEALER);
    zsock_set_linger (client, 0);
    zcert_apply (cert, client);
    zsock_set_curve_serverkey (client, zcert_public_txt (server_cert));
    int64_t start = zclock_usecs ();
    zsock_connect (client, "tcp://127.0.0.1:%d", port);
    zstr_send (client, "hi");
    zpoller_t *poller = zpoller_new (server, monitor, NULL);
    double elapsed = -1;
    while (elapsed < 0 && zclock_usecs () - start < S_TIMEOUT_MS * 1000) {
        void *which = zpoller_wait (poller, 50);
        if (which == monitor)
            *refused += s_drain_refusals (monitor);
        else
        if (which == server) {
            zmsg_t *msg = zmsg_recv (server);
            dsh_identity_t peer;
            dsh_identity_read_frame (&peer, zmsg_last (msg));
            if (peer.key && streq (peer.key, zcert_public_txt (cert)))
                elapsed = (double) (zclock_usecs () - start) / 1000.0;
            zmsg_destroy (&msg);
        }
    }
    zpoller_destroy (&poller);
    zsock_destroy (&client);
    return elapsed;
}

static int
s_compare (const void *left, const void *right)
{
    double a = *(const double *) left, b = *(const double *) right;
    return a < b? -1: a > b;
}

//  "p50 x  p90 y  max z" of times (ms), timeouts counted apart.
static void
s_report (const char *label, double *times, int count)
{
    double sorted [count];
    int done = 0, timeouts = 0;
    for (int index = 0; index < count; index++)
        if (times [index] < 0)
            timeouts++;
        else
            sorted [done++] = times [index];
    qsort (sorted, (size_t) done, sizeof (double), s_compare);
    printf ("  %-30s", label);
    if (done)
        printf (" p50 %8.2f ms  p90 %8.2f ms  max %8.2f ms", sorted [done / 2], sorted [(done * 9) / 10 < done?
                (done * 9) / 10: done - 1], sorted [done - 1]);
    printf ("  (%d of %d in time, %d timed out after %d ms)\n", done, count, timeouts, S_TIMEOUT_MS);
}

static int
s_run (const s_options_t *options, int keys)
{
    char root [] = "/tmp/dsh-bench-handshake-XXXXXX";
    if (!mkdtemp (root))
        return -1;
    char *allow = zsys_sprintf ("%s/allow", root);
    zsys_dir_create (allow);
    zcert_t *client = zcert_new ();
    zcert_set_meta (client, "role", "agent");
    zcert_set_meta (client, "agent", "bench");
    char *path = zsys_sprintf ("%s/client.cert", allow);
    zcert_save_public (client, path);
    zstr_free (&path);
    for (int index = 1; index < keys; index++) {
        zcert_t *other = zcert_new ();
        zcert_set_meta (other, "role", "agent");
        zcert_set_meta (other, "agent", "other-%d", index);
        path = zsys_sprintf ("%s/other-%05d.cert", allow, index);
        zcert_save_public (other, path);
        zstr_free (&path);
        zcert_destroy (&other);
    }
    int64_t load_start = zclock_usecs ();
    zactor_t *handler = zactor_new (options->zauth? zauth: dsh_keystore_actor, NULL);
    zstr_sendx (handler, "CURVE", allow, NULL);
    zsock_wait (handler);
    double load_ms = (double) (zclock_usecs () - load_start) / 1000.0;
    zcert_t *server_cert = zcert_new ();
    zsock_t *server = zsock_new (ZMQ_ROUTER);
    dsh_curve_server (server, server_cert);
    int port = zsock_bind (server, "tcp://127.0.0.1:*");
    zmq_socket_monitor (zsock_resolve (server), "inproc://bench-server-monitor", ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    zsock_t *monitor = zsock_new_pair (">inproc://bench-server-monitor");

    printf ("%d certificate%s, %s (start %.1f ms):\n", keys, keys == 1? "": "s",
            options->zauth? "zauth": "dsh_keystore", load_ms);
    fflush (stdout);
    size_t refused = 0;
    double *times = (double *) zmalloc (sizeof (double) * (size_t) (options->connections + options->during));
    for (int index = 0; index < options->connections; index++)
        times [index] = s_connect_once (server, monitor, client, server_cert, port, &refused);
    s_report ("new connections, alone", times, options->connections);
    fflush (stdout);

    if (options->flood_sockets > 0 && options->during > 0) {
        char endpoint [64];
        snprintf (endpoint, sizeof (endpoint), "tcp://127.0.0.1:%d", port);
        s_flood_args_t args = { endpoint, zcert_public_txt (server_cert), options->flood_sockets };
        zactor_t *flood = zactor_new (s_flood_actor, &args);
        //  Let the flood reach its rate: count its refusals for a second
        refused = 0;
        int64_t ramp_end = zclock_mono () + 1000;
        while (zclock_mono () < ramp_end) {
            zpoller_t *poller = zpoller_new (monitor, NULL);
            zpoller_wait (poller, 50);
            zpoller_destroy (&poller);
            refused += s_drain_refusals (monitor);
        }
        size_t ramp_refused = refused;
        refused = 0;
        int64_t flood_start = zclock_mono ();
        double *during = times + options->connections;
        for (int index = 0; index < options->during; index++)
            during [index] = s_connect_once (server, monitor, client, server_cert, port, &refused);
        double flood_s = (double) (zclock_mono () - flood_start) / 1000.0;
        zactor_destroy (&flood);
        char label [64];
        snprintf (label, sizeof (label), "new connections, flood of %d", options->flood_sockets);
        s_report (label, during, options->during);
        printf ("  %-30s", "each, ms:");
        for (int index = 0; index < options->during; index++)
            printf (during [index] < 0? " timeout": " %.1f", during [index]);
        printf ("\n  %-30s %zu refused in the first second, %.0f/s while connecting\n", "flood handshakes:",
                ramp_refused, flood_s > 0? (double) refused / flood_s: 0);
    }
    fflush (stdout);
    free (times);
    zmq_socket_monitor (zsock_resolve (server), NULL, 0);
    zsock_destroy (&monitor);
    zsock_destroy (&server);
    zcert_destroy (&server_cert);
    zactor_destroy (&handler);
    zcert_destroy (&client);
    nftw (root, s_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    zstr_free (&allow);
    return 0;
}

int
main (int argc, char *argv [])
{
    s_options_t options = { .zauth = false, .connections = 20, .flood_sockets = 32, .during = 10 };
    const char *key_list = "1,1000,10000";
    for (int index = 1; index < argc; index++) {
        const char *flag = argv [index];
        bool has_value = index + 1 < argc;
        if (streq (flag, "--zauth"))
            options.zauth = true;
        else
        if (streq (flag, "--keys") && has_value)
            key_list = argv [++index];
        else
        if (streq (flag, "--connections") && has_value)
            options.connections = atoi (argv [++index]);
        else
        if (streq (flag, "--flood") && has_value)
            options.flood_sockets = atoi (argv [++index]);
        else
        if (streq (flag, "--during") && has_value)
            options.during = atoi (argv [++index]);
        else {
            fprintf (stderr, "usage: dsh-bench-handshake [--zauth] [--keys 1,1000,10000] [--connections N] "
                             "[--flood SOCKETS] [--during N]\n");
            return 2;
        }
    }
    zsys_init ();
    zsys_set_logstream (stderr);
    //  The flood's handshakes are answered by the server's I/O thread
    zsys_set_io_threads (1);
    char *keys = strdup (key_list);
    for (char *item = strtok (keys, ","); item; item = strtok (NULL, ","))
        if (atoi (item) > 0)
            s_run (&options, atoi (item));
    free (keys);
    return 0;
}
