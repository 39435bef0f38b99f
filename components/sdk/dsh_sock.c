/*  =========================================================================
    dsh_sock - the few socket rules every dsh party follows
    =========================================================================
*/

#include "dsh_sock.h"

int
dsh_sock_send (zsock_t *sock, zmsg_t **msg_p)
{
    assert (sock);
    assert (msg_p);
    zmsg_t *msg = *msg_p;
    if (!msg)
        return -1;
    //  libzmq accepts or refuses a multipart message at its first frame, so
    //  a refusal there loses nothing; later frames cannot fail for lack of
    //  room or route. Each frame's data moves into libzmq, uncopied.
    int rc = 0;
    zframe_t *frame;
    while ((frame = zmsg_pop (msg))) {
        int flags = ZFRAME_DONTWAIT | (zmsg_size (msg)? ZFRAME_MORE: 0);
        if (zframe_send (&frame, sock, flags)) {
            rc = -1;
            zframe_destroy (&frame);
            break;
        }
    }
    int saved_errno = errno;
    zmsg_destroy (msg_p);
    errno = saved_errno;
    return rc;
}

void
dsh_sock_limit (zsock_t *sock, int max_bytes, int hwm)
{
    assert (sock);
    zsock_set_maxmsgsize (sock, max_bytes);
    zsock_set_sndhwm (sock, hwm);
    zsock_set_rcvhwm (sock, hwm);
}

//  Splits "tcp://host:port" into its host span; returns false if the
//  endpoint is not tcp.
static bool
s_tcp_host (const char *endpoint, const char **host, size_t *host_size)
{
    if (strncmp (endpoint, "tcp://", 6) != 0)
        return false;
    const char *start = endpoint + 6;
    const char *colon = strrchr (start, ':');
    if (!colon)
        return false;
    *host = start;
    *host_size = (size_t) (colon - start);
    return true;
}

char *
dsh_sock_resolve (const char *advertised, const char *front)
{
    assert (advertised);
    const char *host;
    size_t host_size;
    const char *front_host;
    size_t front_host_size;
    if (front
    &&  s_tcp_host (advertised, &host, &host_size)
    &&  s_tcp_host (front, &front_host, &front_host_size)) {
        bool wildcard = (host_size == 1 && *host == '*')
                     || (host_size == 7 && strncmp (host, "0.0.0.0", 7) == 0)
                     || (host_size == 2 && strncmp (host, "::", 2) == 0)
                     || (host_size == 4 && strncmp (host, "[::]", 4) == 0);
        if (wildcard)
            return zsys_sprintf ("tcp://%.*s%s", (int) front_host_size, front_host,
                                 host + host_size);
    }
    return strdup (advertised);
}
