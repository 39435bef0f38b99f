/*  fuzz_frames - splitting a received message into envelope, head and body

    The input is a message's frames, each as one length byte and that many
    bytes (length 255: the rest of the input). The frames go through both
    splitters: dsh_proto_split on a zmsg (the chain's slots, the SDK's
    clients) and dsh_sock_recv_msg on a real socket (the registry's FRONT
    and WORK, the provider), over an inproc pair; a body that comes out is
    decoded as the registry decodes it.
*/

#include "dsh.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static zsock_t *s_writer;
static zsock_t *s_reader;

static void
s_sockets (void)
{
    if (s_writer)
        return;
    zsys_init ();
    zsys_set_linger (0);
    s_reader = zsock_new_pair ("@inproc://fuzz-frames");
    s_writer = zsock_new_pair (">inproc://fuzz-frames");
    assert (s_reader && s_writer);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    s_sockets ();
    zmsg_t *msg = zmsg_new ();
    size_t offset = 0;
    while (offset < size && zmsg_size (msg) < 40) {
        size_t length = data [offset++];
        if (length == 255 || length > size - offset)
            length = size - offset;
        zmsg_addmem (msg, data + offset, length);
        offset += length;
    }
    if (zmsg_size (msg) == 0) {
        zmsg_destroy (&msg);
        return 0;
    }

    //  Over the socket first (a copy), then split as a zmsg
    zmsg_t *copy = zmsg_dup (msg);
    int rc = zmsg_send (&copy, s_writer);
    assert (rc == 0);
    dsh_sock_msg_t parts;
    char error [256];
    if (dsh_sock_recv_msg (s_reader, &parts, error, sizeof (error)) == 0) {
        assert (parts.body <= parts.count);
        assert (strlen (parts.command) <= DSH_COMMAND_MAX);
        if (parts.count - parts.body == 1) {
            zmq_msg_t *body = &parts.part [parts.body];
            dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
            dsh_doc_destroy (&doc);
        }
    }
    else
        assert (error [0]);     //  a message was waiting: a reason, never EAGAIN
    dsh_sock_msg_close (&parts);

    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    if (dsh_proto_split (msg, &envelope, command, sizeof (command), error, sizeof (error)) == 0)
        assert (strlen (command) <= DSH_COMMAND_MAX);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}
