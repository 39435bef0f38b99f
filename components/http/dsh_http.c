/*  =========================================================================
    dsh_http - what every dsh HTTP server on libmicrohttpd needs
    =========================================================================
*/

#include "dsh_http.h"

#include <czmq.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <sys/socket.h>

int
dsh_http_address (const char *address, struct sockaddr_storage *addr, socklen_t *addr_size,
                  char *error, size_t error_size)
{
    const char *colon = NULL;
    char host [256];
    if (*address == '[') {
        const char *end = strchr (address, ']');
        if (end && end [1] == ':')
            colon = end + 1;
        if (!colon || (size_t) (end - address - 1) >= sizeof host) {
            snprintf (error, error_size, "bad HTTP address \"%s\": expected [IPV6]:PORT", address);
            return -1;
        }
        memcpy (host, address + 1, (size_t) (end - address - 1));
        host [end - address - 1] = 0;
    }
    else {
        colon = strrchr (address, ':');
        if (!colon || colon == address || (size_t) (colon - address) >= sizeof host) {
            snprintf (error, error_size, "bad HTTP address \"%s\": expected HOST:PORT", address);
            return -1;
        }
        memcpy (host, address, (size_t) (colon - address));
        host [colon - address] = 0;
    }
    char *end = NULL;
    long port = strtol (colon + 1, &end, 10);
    if (end == colon + 1 || *end || port < 0 || port > 65535) {
        snprintf (error, error_size, "bad HTTP address \"%s\": the port must be 0 to 65535", address);
        return -1;
    }
    struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM };
    struct addrinfo *found = NULL;
    int rc = getaddrinfo (host, colon + 1, &hints, &found);
    if (rc || !found) {
        snprintf (error, error_size, "cannot resolve HTTP address \"%s\": %s", address, gai_strerror (rc));
        return -1;
    }
    memcpy (addr, found->ai_addr, found->ai_addrlen);
    *addr_size = found->ai_addrlen;
    freeaddrinfo (found);
    return 0;
}

bool
dsh_http_addr_is_loopback (const struct sockaddr_storage *addr)
{
    if (addr->ss_family == AF_INET)
        return (ntohl (((const struct sockaddr_in *) addr)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *ipv6 = &((const struct sockaddr_in6 *) addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK (ipv6)
        || (IN6_IS_ADDR_V4MAPPED (ipv6) && ipv6->s6_addr [12] == 127);
}

//  libmicrohttpd's reasons (0.9.x) for a write that found the socket
//  closed by its peer: a client that left, which is normal (a page closed,
//  an event stream dropped), not worth a warning
static const char *s_peer_left [] = {
    "The socket is no longer available for sending",     //  EPIPE
    "The connection was forcibly closed by remote peer", //  ECONNRESET
    "The socket is not connected",                      //  ENOTCONN
    NULL
};

static void
s_log (void *cls, const char *format, va_list args)
{
    char line [512];
    vsnprintf (line, sizeof line, format, args);
    line [strcspn (line, "\n")] = 0;
    if (strncmp (line, "Failed to send", strlen ("Failed to send")) == 0)
        for (const char **reason = s_peer_left; *reason; reason++)
            if (strstr (line, *reason))
                return;
    zsys_warning ("%s: http: %s", (const char *) cls, line);
}

//  ---------------------------------------------------------------------
//  The server: MHD with a header deadline

//  A connection from accept to close. deadline is when its request's
//  headers are due (monotonic ms), 0 while a request is being served.
typedef struct {
    int fd;
    int64_t deadline;
    bool closing;               //  shut down by the watchdog
    void *handle;               //  in server->connections
} s_connection_t;

struct _dsh_http_server_t {
    struct MHD_Daemon *daemon;
    const char *program;
    MHD_AccessHandlerCallback access;
    MHD_RequestCompletedCallback completed;
    void *cls;
    int64_t header_timeout_ms;
    pthread_mutex_t lock;       //  guards what follows
    pthread_cond_t wake;
    pthread_t watchdog;
    bool watchdog_started;
    bool stopping;
    zlistx_t *connections;      //  s_connection_t, owned
    int64_t logged_at;          //  when late connections were last logged
    size_t late_unlogged;
};

static void
s_connection_destroy (void **item_p)
{
    free (*item_p);
    *item_p = NULL;
}

static void
s_notify_connection (void *cls, struct MHD_Connection *connection, void **socket_context,
                     enum MHD_ConnectionNotificationCode code)
{
    dsh_http_server_t *self = (dsh_http_server_t *) cls;
    pthread_mutex_lock (&self->lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info (connection,
                                                                        MHD_CONNECTION_INFO_CONNECTION_FD);
        s_connection_t *watched = (s_connection_t *) zmalloc (sizeof (s_connection_t));
        assert (watched);
        watched->fd = info? info->connect_fd: -1;
        watched->deadline = zclock_mono () + self->header_timeout_ms;
        watched->handle = zlistx_add_end (self->connections, watched);
        *socket_context = watched;
    }
    else
    if (*socket_context) {
        //  MHD closes the socket after this returns: the watchdog, which
        //  shuts sockets down under the lock, never sees a reused fd
        s_connection_t *watched = (s_connection_t *) *socket_context;
        zlistx_delete (self->connections, watched->handle);
        *socket_context = NULL;
    }
    pthread_mutex_unlock (&self->lock);
}

static s_connection_t *
s_watched (struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info (connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info? (s_connection_t *) info->socket_context: NULL;
}

//  MHD calls this first once a request's headers are all in: the deadline
//  is met, and what the server does from here is its own.
static enum MHD_Result
s_access (void *cls, struct MHD_Connection *connection, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    dsh_http_server_t *self = (dsh_http_server_t *) cls;
    s_connection_t *watched = s_watched (connection);
    if (watched) {
        pthread_mutex_lock (&self->lock);
        watched->deadline = 0;
        pthread_mutex_unlock (&self->lock);
    }
    return self->access (self->cls, connection, url, method, version, upload_data, upload_data_size, req_cls);
}

//  A request ended: the next one on the connection (keep-alive) has the
//  same time for its headers as the first had.
static void
s_completed (void *cls, struct MHD_Connection *connection, void **req_cls, enum MHD_RequestTerminationCode code)
{
    dsh_http_server_t *self = (dsh_http_server_t *) cls;
    s_connection_t *watched = s_watched (connection);
    if (watched) {
        pthread_mutex_lock (&self->lock);
        watched->deadline = zclock_mono () + self->header_timeout_ms;
        pthread_mutex_unlock (&self->lock);
    }
    if (self->completed)
        self->completed (self->cls, connection, req_cls, code);
}

//  Shuts down the sockets of connections whose headers are late; MHD sees
//  them end and closes them. Said once a minute at most, with a count.
static void *
s_watchdog (void *args)
{
    dsh_http_server_t *self = (dsh_http_server_t *) args;
    //  A tenth of the deadline, so that a connection is closed at most
    //  10% late, and not more than 20 times a second
    int64_t tick_ms = self->header_timeout_ms / 10 > 50? self->header_timeout_ms / 10: 50;
    if (tick_ms > 1000)
        tick_ms = 1000;
    pthread_mutex_lock (&self->lock);
    while (!self->stopping) {
        dsh_http_timedwait (&self->wake, &self->lock, tick_ms);
        int64_t now = zclock_mono ();
        for (s_connection_t *watched = (s_connection_t *) zlistx_first (self->connections); watched;
             watched = (s_connection_t *) zlistx_next (self->connections))
            if (watched->deadline && now >= watched->deadline && !watched->closing && watched->fd >= 0) {
                shutdown (watched->fd, SHUT_RDWR);
                watched->closing = true;
                self->late_unlogged++;
            }
        if (self->late_unlogged && (!self->logged_at || now - self->logged_at >= 60000)) {
            zsys_warning ("%s: http: closed %zu connection(s) whose request headers were not in within %" PRId64
                          " ms (said once a minute at most)", self->program, self->late_unlogged,
                          self->header_timeout_ms);
            self->late_unlogged = 0;
            self->logged_at = now;
        }
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

dsh_http_server_t *
dsh_http_server_new (const struct sockaddr_storage *addr, const char *program,
                     MHD_AccessHandlerCallback access, MHD_RequestCompletedCallback completed,
                     void *cls, const dsh_http_limits_t *limits)
{
    assert (addr);
    assert (program);
    assert (access);
    assert (limits);
    dsh_http_server_t *self = (dsh_http_server_t *) zmalloc (sizeof (dsh_http_server_t));
    assert (self);
    self->program = program;
    self->access = access;
    self->completed = completed;
    self->cls = cls;
    self->header_timeout_ms = limits->header_timeout_ms;
    pthread_mutex_init (&self->lock, NULL);
    pthread_condattr_t condattr;
    pthread_condattr_init (&condattr);
    pthread_condattr_setclock (&condattr, CLOCK_MONOTONIC);
    pthread_cond_init (&self->wake, &condattr);
    pthread_condattr_destroy (&condattr);
    self->connections = zlistx_new ();
    zlistx_set_destructor (self->connections, s_connection_destroy);
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME
                       | MHD_USE_ERROR_LOG | (addr->ss_family == AF_INET6? MHD_USE_IPv6: 0);
    uint16_t port = ntohs (addr->ss_family == AF_INET6? ((const struct sockaddr_in6 *) addr)->sin6_port
                                                      : ((const struct sockaddr_in *) addr)->sin_port);
    self->daemon = MHD_start_daemon (flags, port, NULL, NULL, s_access, self,
                                     MHD_OPTION_EXTERNAL_LOGGER, s_log, (void *) program,
                                     MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) addr,
                                     MHD_OPTION_NOTIFY_COMPLETED, s_completed, self,
                                     MHD_OPTION_NOTIFY_CONNECTION, s_notify_connection, self,
                                     MHD_OPTION_CONNECTION_LIMIT, limits->connections,
                                     MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits->per_address,
                                     MHD_OPTION_CONNECTION_TIMEOUT, limits->idle_timeout_s,
                                     MHD_OPTION_END);
    if (self->daemon)
        self->watchdog_started = pthread_create (&self->watchdog, NULL, s_watchdog, self) == 0;
    if (!self->watchdog_started)
        dsh_http_server_destroy (&self);
    return self;
}

void
dsh_http_server_destroy (dsh_http_server_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_http_server_t *self = *self_p;
        if (self->watchdog_started) {
            pthread_mutex_lock (&self->lock);
            self->stopping = true;
            pthread_cond_signal (&self->wake);
            pthread_mutex_unlock (&self->lock);
            pthread_join (self->watchdog, NULL);
        }
        if (self->daemon)
            MHD_stop_daemon (self->daemon);
        zlistx_destroy (&self->connections);
        pthread_cond_destroy (&self->wake);
        pthread_mutex_destroy (&self->lock);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_http_server_port (dsh_http_server_t *self)
{
    assert (self);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info (self->daemon, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage bound;
    socklen_t bound_size = sizeof bound;
    if (!info || getsockname (info->listen_fd, (struct sockaddr *) &bound, &bound_size))
        return 0;
    return ntohs (bound.ss_family == AF_INET6? ((struct sockaddr_in6 *) &bound)->sin6_port
                                             : ((struct sockaddr_in *) &bound)->sin_port);
}

//  ---------------------------------------------------------------------
//  Who may ask

static bool
s_is_loopback_host (const char *host, size_t size)
{
    char name [64];
    if (size == 0 || size >= sizeof name)
        return false;
    memcpy (name, host, size);
    name [size] = 0;
    if (strcasecmp (name, "localhost") == 0)
        return true;
    struct in_addr ipv4;
    struct in6_addr ipv6;
    if (inet_pton (AF_INET, name, &ipv4) == 1)
        return (ntohl (ipv4.s_addr) >> 24) == 127;
    if (inet_pton (AF_INET6, name, &ipv6) == 1)
        return IN6_IS_ADDR_LOOPBACK (&ipv6);
    return false;
}

//  The host part of "host[:port]" or "[v6]:port": where it starts, its size.
static const char *
s_host_part (const char *authority, size_t *size_p)
{
    if (*authority == '[') {
        const char *end = strchr (authority, ']');
        if (!end)
            return NULL;
        *size_p = (size_t) (end - authority - 1);
        return authority + 1;
    }
    *size_p = strcspn (authority, ":/");
    return authority;
}

bool
dsh_http_origin_allowed (struct MHD_Connection *connection, bool loopback)
{
    const char *host = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    size_t host_size = 0;
    const char *host_name = host? s_host_part (host, &host_size): NULL;
    if (loopback && host && !(host_name && s_is_loopback_host (host_name, host_size)))
        return false;
    const char *origin = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, "Origin");
    if (!origin)
        return true;
    const char *scheme_end = strstr (origin, "://");
    if (!scheme_end)
        return false;
    size_t origin_size = 0;
    const char *origin_name = s_host_part (scheme_end + 3, &origin_size);
    if (!origin_name)
        return false;
    if (s_is_loopback_host (origin_name, origin_size))
        return true;
    return !loopback && host_name && host_size == origin_size
        && strncasecmp (host_name, origin_name, origin_size) == 0;
}

bool
dsh_http_token_equal (const char *given, size_t given_size, const char *token)
{
    size_t size = strlen (token);
    unsigned char diff = given_size != size;
    for (size_t index = 0; index < size; index++)
        diff |= (unsigned char) token [index] ^ (unsigned char) (index < given_size? given [index]: 0);
    return diff == 0;
}

bool
dsh_http_bearer_ok (struct MHD_Connection *connection, const char *token)
{
    const char *header = MHD_lookup_connection_value (connection, MHD_HEADER_KIND,
                                                      MHD_HTTP_HEADER_AUTHORIZATION);
    if (!header || strncasecmp (header, "Bearer ", 7))
        return false;
    const char *given = header + 7;
    while (*given == ' ')
        given++;
    size_t size = strlen (given);
    while (size && given [size - 1] == ' ')
        size--;
    return dsh_http_token_equal (given, size, token);
}

char *
dsh_http_read_token (const char *path, char *error, size_t error_size)
{
    FILE *file = fopen (path, "r");
    if (!file) {
        snprintf (error, error_size, "cannot read the token file %s: %s", path, strerror (errno));
        return NULL;
    }
    char line [DSH_HTTP_TOKEN_MAX + 2];
    char *token = fgets (line, sizeof line, file)? line: NULL;
    fclose (file);
    if (token) {
        size_t size = strlen (token);
        while (size && isspace ((unsigned char) token [size - 1]))
            token [--size] = 0;
        while (isspace ((unsigned char) *token))
            token++;
    }
    bool usable = token && *token && strlen (token) <= DSH_HTTP_TOKEN_MAX;
    for (const char *next = token; usable && *next; next++)
        usable = *next >= 0x21 && *next <= 0x7e;
    if (!usable) {
        snprintf (error, error_size, "the token file %s holds no token (one line of 1 to %d visible "
                  "ASCII characters)", path, DSH_HTTP_TOKEN_MAX);
        return NULL;
    }
    return strdup (token);
}

void
dsh_http_timedwait (pthread_cond_t *cond, pthread_mutex_t *lock, int64_t ms)
{
    struct timespec until;
    clock_gettime (CLOCK_MONOTONIC, &until);
    until.tv_nsec += ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait (cond, lock, &until);
}
