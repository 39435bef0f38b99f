/*  =========================================================================
    dsh-bench-echo - the raw floor's processes for dsh-bench

        dsh-bench-echo forward           a bare ROUTER <-> DEALER relay
        dsh-bench-echo echo ENDPOINT     a DEALER that sends every message back

    The same process layout as a dsh call (client -> broker -> component)
    with nothing but ZeroMQ in it: no registry, no chain, no msgpack. The
    forwarder binds both sides on free loopback ports and prints them; echo
    processes connect to its back side, which shares calls among them.
    =========================================================================
*/

#include <czmq.h>

static int
s_forward (void)
{
    zsock_t *front = zsock_new (ZMQ_ROUTER);
    zsock_t *back = zsock_new (ZMQ_DEALER);
    assert (front && back);
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
        return 1;
    }
    printf ("forwarding tcp://127.0.0.1:%d tcp://127.0.0.1:%d\n", front_port, back_port);
    fflush (stdout);
    //  Returns when a signal interrupts it
    zmq_proxy (zsock_resolve (front), zsock_resolve (back), NULL);
    zsock_destroy (&front);
    zsock_destroy (&back);
    return 0;
}

static int
s_echo (const char *endpoint)
{
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    assert (dealer);
    zsock_set_sndhwm (dealer, 10000);
    zsock_set_rcvhwm (dealer, 10000);
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
    if (argc == 2 && streq (argv [1], "forward"))
        return s_forward ();
    if (argc == 3 && streq (argv [1], "echo"))
        return s_echo (argv [2]);
    fprintf (stderr, "usage: dsh-bench-echo forward | echo ENDPOINT\n");
    return 2;
}
