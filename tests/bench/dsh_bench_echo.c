/*  =========================================================================
    dsh-bench-echo - the raw floor's processes for dsh-bench

        dsh-bench-echo forward [CERT ALLOW]
                                 a bare ROUTER <-> DEALER relay
        dsh-bench-echo echo ENDPOINT [CERT SERVER_CERT]
                                 a DEALER that sends every message back

    The same process layout as a dsh call (client -> broker -> component)
    with nothing but ZeroMQ in it: no registry, no chain, no msgpack. The
    forwarder binds both sides on free loopback ports and prints them; echo
    processes connect to its back side, which shares calls among them.
    With certificates, both hops run CURVE as dsh's do: the forwarder is
    the server on both sides (its keypair CERT, zauth checking clients
    against the directory ALLOW, as dsh-broker does), an echo process a
    client (its keypair CERT, the forwarder's public SERVER_CERT).
    =========================================================================
*/

#include <czmq.h>

//  Loads a certificate; NULL, said on stderr, if it is not one.
static zcert_t *
s_load (const char *path)
{
    zcert_t *cert = zsys_file_exists (path)? zcert_load (path): NULL;
    if (!cert)
        fprintf (stderr, "dsh-bench-echo: %s is not a certificate\n", path);
    return cert;
}

static int
s_forward (const char *cert_path, const char *allow)
{
    zcert_t *cert = cert_path? s_load (cert_path): NULL;
    if (cert_path && !cert)
        return 1;
    //  Checks each CURVE handshake against the allow-list (once per
    //  connection, as the broker's zauth does; nothing per message)
    zactor_t *auth = NULL;
    if (cert) {
        auth = zactor_new (zauth, NULL);
        assert (auth);
        zstr_sendx (auth, "CURVE", allow, NULL);
        zsock_wait (auth);
    }
    zsock_t *front = zsock_new (ZMQ_ROUTER);
    zsock_t *back = zsock_new (ZMQ_DEALER);
    assert (front && back);
    zsock_t *sides [] = { front, back };
    for (size_t side = 0; cert && side < 2; side++) {
        zcert_apply (cert, sides [side]);
        zsock_set_curve_server (sides [side], 1);
        zsock_set_zap_domain (sides [side], "dsh-bench");
    }
    //  The broker's queue limit, so both sides buffer alike
    zsock_set_sndhwm (front, 10000);
    zsock_set_rcvhwm (front, 10000);
    zsock_set_sndhwm (back, 10000);
    zsock_set_rcvhwm (back, 10000);
    int front_port = zsock_bind (front, "tcp://127.0.0.1:*");
    int back_port = zsock_bind (back, "tcp://127.0.0.1:*");
    if (front_port < 0 || back_port < 0) {
        fprintf (stderr, "dsh-bench-echo: cannot bind\n");
        zsock_destroy (&front);
        zsock_destroy (&back);
        zactor_destroy (&auth);
        zcert_destroy (&cert);
        return 1;
    }
    printf ("forwarding tcp://127.0.0.1:%d tcp://127.0.0.1:%d\n", front_port, back_port);
    fflush (stdout);
    //  Returns when a signal interrupts it
    zmq_proxy (zsock_resolve (front), zsock_resolve (back), NULL);
    zsock_destroy (&front);
    zsock_destroy (&back);
    zactor_destroy (&auth);
    zcert_destroy (&cert);
    return 0;
}

static int
s_echo (const char *endpoint, const char *cert_path, const char *server_cert_path)
{
    zcert_t *cert = cert_path? s_load (cert_path): NULL;
    zcert_t *server = server_cert_path? s_load (server_cert_path): NULL;
    if ((cert_path && !cert) || (server_cert_path && !server)) {
        zcert_destroy (&cert);
        zcert_destroy (&server);
        return 1;
    }
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    assert (dealer);
    zsock_set_sndhwm (dealer, 10000);
    zsock_set_rcvhwm (dealer, 10000);
    if (cert) {
        zcert_apply (cert, dealer);
        zsock_set_curve_serverkey (dealer, zcert_public_txt (server));
    }
    zcert_destroy (&cert);
    zcert_destroy (&server);
    if (zsock_connect (dealer, "%s", endpoint)) {
        fprintf (stderr, "dsh-bench-echo: cannot connect to %s\n", endpoint);
        zsock_destroy (&dealer);
        return 1;
    }
    printf ("echoing on %s\n", endpoint);
    fflush (stdout);
    void *handle = zsock_resolve (dealer);
    zmq_msg_t part;
    zmq_msg_init (&part);
    //  Frame by frame, each sent back as it came, with its MORE flag
    while (!zsys_interrupted) {
        if (zmq_msg_recv (&part, handle, 0) < 0)
            break;
        int more = zmq_msg_more (&part);
        if (zmq_msg_send (&part, handle, more? ZMQ_SNDMORE: 0) < 0)
            break;
    }
    zmq_msg_close (&part);
    zsock_destroy (&dealer);
    return 0;
}

int
main (int argc, char *argv [])
{
    zsys_init ();
    if ((argc == 2 || argc == 4) && streq (argv [1], "forward"))
        return s_forward (argc == 4? argv [2]: NULL, argc == 4? argv [3]: NULL);
    if ((argc == 3 || argc == 5) && streq (argv [1], "echo"))
        return s_echo (argv [2], argc == 5? argv [3]: NULL, argc == 5? argv [4]: NULL);
    fprintf (stderr, "usage: dsh-bench-echo forward [CERT ALLOW] | echo ENDPOINT [CERT SERVER_CERT]\n");
    return 2;
}
