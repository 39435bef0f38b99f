/*  =========================================================================
    dsh_sock - the few socket rules every dsh party follows
    =========================================================================
*/

#include "dsh_sock.h"

#include <ctype.h>

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

int
dsh_sock_drain (zsock_t *reader, int batch, dsh_sock_handler_fn *handler, void *arg)
{
    assert (reader);
    assert (handler);
    //  ZMQ_EVENTS, not a receive that may fail: the handler owns the receive
    for (int count = 0; count < batch && (zsock_events (reader) & ZMQ_POLLIN); count++)
        if (handler (reader, arg))
            return -1;
    return 0;
}

void
dsh_sock_msg_close (dsh_sock_msg_t *msg)
{
    assert (msg);
    for (size_t index = 0; index < msg->count; index++)
        zmq_msg_close (&msg->part [index]);
    msg->count = 0;
}

//  Finds the dsh/1 head in msg's parts; 0 or -1 with a reason.
static int
s_split (dsh_sock_msg_t *msg, char *error, size_t error_size)
{
    size_t delimiter = 0;
    while (delimiter < msg->count && zmq_msg_size (&msg->part [delimiter]) != 0)
        delimiter++;
    if (delimiter == msg->count) {
        snprintf (error, error_size, "no empty delimiter frame");
        return -1;
    }
    msg->envelope = delimiter;
    msg->body = delimiter + 1;
    zmq_msg_t *protocol = delimiter + 1 < msg->count? &msg->part [delimiter + 1]: NULL;
    if (!protocol || zmq_msg_size (protocol) != strlen (DSH_PROTOCOL)
    ||  memcmp (zmq_msg_data (protocol), DSH_PROTOCOL, strlen (DSH_PROTOCOL)) != 0) {
        snprintf (error, error_size, "protocol frame is not \"%s\"", DSH_PROTOCOL);
        return -1;
    }
    msg->body = delimiter + 2;
    zmq_msg_t *verb = delimiter + 2 < msg->count? &msg->part [delimiter + 2]: NULL;
    size_t size = verb? zmq_msg_size (verb): 0;
    if (size == 0 || size > DSH_COMMAND_MAX) {
        snprintf (error, error_size, "missing or oversized command frame");
        return -1;
    }
    msg->body = delimiter + 3;
    memcpy (msg->command, zmq_msg_data (verb), size);
    msg->command [size] = 0;
    for (size_t index = 0; index < size; index++)
        if (!isupper ((unsigned char) msg->command [index])) {
            snprintf (error, error_size, "command frame is not an upper-case word");
            return -1;
        }
    return 0;
}

int
dsh_sock_recv_msg (zsock_t *sock, dsh_sock_msg_t *msg, char *error, size_t error_size)
{
    assert (sock);
    assert (msg);
    assert (error && error_size > 0);
    msg->count = 0;
    msg->envelope = 0;
    msg->body = 0;
    msg->command [0] = 0;
    error [0] = 0;
    void *handle = zsock_resolve (sock);
    bool oversized = false;
    bool more = true;
    while (more) {
        zmq_msg_t spare;
        zmq_msg_t *part = msg->count < DSH_SOCK_PARTS_MAX? &msg->part [msg->count]: &spare;
        zmq_msg_init (part);
        //  A message arrives whole: only its first part can find nothing
        if (zmq_msg_recv (part, handle, ZMQ_DONTWAIT) < 0) {
            int saved_errno = errno;
            zmq_msg_close (part);
            dsh_sock_msg_close (msg);
            errno = saved_errno;
            return -1;
        }
        more = zmq_msg_more (part);
        if (part == &spare) {
            oversized = true;
            zmq_msg_close (part);
        }
        else
            msg->count++;
    }
    if (oversized) {
        dsh_sock_msg_close (msg);
        snprintf (error, error_size, "more than %d frames", DSH_SOCK_PARTS_MAX);
        return -1;
    }
    return s_split (msg, error, error_size);
}

void
dsh_sock_part_mem (zmq_msg_t *part, const void *data, size_t size)
{
    assert (part);
    int rc = zmq_msg_init_size (part, size);
    assert (rc == 0);
    if (size)
        memcpy (zmq_msg_data (part), data, size);
}

void
dsh_sock_head (zmq_msg_t *parts, const char *command)
{
    assert (parts);
    assert (command);
    zmq_msg_init (&parts [0]);
    dsh_sock_part_mem (&parts [1], DSH_PROTOCOL, strlen (DSH_PROTOCOL));
    dsh_sock_part_mem (&parts [2], command, strlen (command));
}

static void
s_frame_free (void *data, void *hint)
{
    (void) data;
    zframe_t *frame = (zframe_t *) hint;
    zframe_destroy (&frame);
}

void
dsh_sock_part_frame (zmq_msg_t *part, zframe_t **frame_p)
{
    assert (part);
    assert (frame_p && *frame_p);
    zframe_t *frame = *frame_p;
    *frame_p = NULL;
    //  libzmq may free from its I/O thread; a frame has no thread affinity
    int rc = zmq_msg_init_data (part, zframe_data (frame), zframe_size (frame), s_frame_free, frame);
    assert (rc == 0);
}

int
dsh_sock_send_parts (zsock_t *sock, zmq_msg_t *parts, size_t count)
{
    assert (sock);
    assert (parts && count > 0);
    void *handle = zsock_resolve (sock);
    //  As dsh_sock_send: only the first part can be refused, which loses nothing
    size_t index = 0;
    int rc = 0;
    for (; index < count; index++) {
        int flags = ZMQ_DONTWAIT | (index + 1 < count? ZMQ_SNDMORE: 0);
        if (zmq_msg_send (&parts [index], handle, flags) < 0) {
            rc = -1;
            break;
        }
    }
    int saved_errno = errno;
    for (; index < count; index++)
        zmq_msg_close (&parts [index]);
    errno = saved_errno;
    return rc;
}

void
dsh_sock_keepalive (zsock_t *sock, int heartbeat_ms, int liveness)
{
    assert (sock);
    if (heartbeat_ms <= 0)
        heartbeat_ms = DSH_DEFAULT_HEARTBEAT_MS;
    if (liveness <= 0)
        liveness = DSH_DEFAULT_LIVENESS;
    int window_ms = heartbeat_ms * liveness;
    zsock_set_connect_timeout (sock, heartbeat_ms);
    zsock_set_reconnect_ivl (sock, 100);
    zsock_set_reconnect_ivl_max (sock, heartbeat_ms > 100? heartbeat_ms: 100);
    zsock_set_tcp_keepalive (sock, 1);
    zsock_set_tcp_keepalive_idle (sock, window_ms / 1000 > 0? window_ms / 1000: 1);
    zsock_set_tcp_keepalive_intvl (sock, heartbeat_ms / 1000 > 0? heartbeat_ms / 1000: 1);
    zsock_set_tcp_keepalive_cnt (sock, liveness);
}

void
dsh_sock_heal (zsock_t *sock, int heartbeat_ms, int liveness)
{
    assert (sock);
    if (heartbeat_ms <= 0)
        heartbeat_ms = DSH_DEFAULT_HEARTBEAT_MS;
    if (liveness <= 0)
        liveness = DSH_DEFAULT_LIVENESS;
    zsock_set_heartbeat_ivl (sock, heartbeat_ms);
    zsock_set_heartbeat_timeout (sock, heartbeat_ms * liveness);
    dsh_sock_keepalive (sock, heartbeat_ms, liveness);
}

//  True if entry names a broker: tcp://HOST:PORT, ipc://PATH,
//  inproc://NAME, beacon or beacon:PORT.
static bool
s_broker_entry_valid (const char *entry)
{
    if (streq (entry, "beacon"))
        return true;
    if (strncmp (entry, "beacon:", 7) == 0) {
        char *end;
        long port = strtol (entry + 7, &end, 10);
        return *end == 0 && end != entry + 7 && port > 0 && port < 65536;
    }
    if (strncmp (entry, "ipc://", 6) == 0)
        return entry [6] != 0;
    if (strncmp (entry, "inproc://", 9) == 0)
        return entry [9] != 0;
    const char *host;
    size_t host_size;
    if (!s_tcp_host (entry, &host, &host_size) || host_size == 0)
        return false;
    const char *port = host + host_size + 1;
    char *end;
    long number = strtol (port, &end, 10);
    return *end == 0 && end != port && number > 0 && number < 65536;
}

zlistx_t *
dsh_sock_brokers (const char *spec, char *error, size_t error_size)
{
    assert (error && error_size > 0);
    if (!spec || !*spec)
        spec = getenv ("DSH_BROKER");
    if (!spec || !*spec)
        spec = DSH_DEFAULT_ENDPOINT;
    zlistx_t *brokers = zlistx_new ();
    zlistx_set_destructor (brokers, (zlistx_destructor_fn *) zstr_free);
    zlistx_set_duplicator (brokers, (zlistx_duplicator_fn *) strdup);
    const char *cursor = spec;
    while (true) {
        const char *comma = strchr (cursor, ',');
        size_t size = comma? (size_t) (comma - cursor): strlen (cursor);
        while (size && isspace ((unsigned char) *cursor)) {
            cursor++;
            size--;
        }
        while (size && isspace ((unsigned char) cursor [size - 1]))
            size--;
        char *entry = zsys_sprintf ("%.*s", (int) size, cursor);
        if (!*entry || !s_broker_entry_valid (entry)) {
            snprintf (error, error_size, "broker list \"%.200s\": entry %zu (\"%.100s\") is not "
                      "tcp://HOST:PORT, ipc://PATH, inproc://NAME or beacon[:PORT]", spec,
                      zlistx_size (brokers) + 1, entry);
            zstr_free (&entry);
            zlistx_destroy (&brokers);
            return NULL;
        }
        if (zlistx_size (brokers) == DSH_BROKERS_MAX) {
            snprintf (error, error_size, "broker list \"%.200s\": more than %d brokers", spec,
                      DSH_BROKERS_MAX);
            zstr_free (&entry);
            zlistx_destroy (&brokers);
            return NULL;
        }
        //  The list keeps its own copy (its duplicator)
        zlistx_add_end (brokers, entry);
        zstr_free (&entry);
        if (!comma)
            break;
        cursor = comma + 1;
    }
    return brokers;
}
