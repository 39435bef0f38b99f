/*  =========================================================================
    dsh_http - what every dsh HTTP server on libmicrohttpd needs
    =========================================================================
*/

#include "dsh_http.h"

#include <czmq.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>

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

static void
s_log (void *cls, const char *format, va_list args)
{
    char line [512];
    vsnprintf (line, sizeof line, format, args);
    line [strcspn (line, "\n")] = 0;
    zsys_warning ("%s: http: %s", (const char *) cls, line);
}

struct MHD_Daemon *
dsh_http_daemon_start (const struct sockaddr_storage *addr, const char *program,
                       MHD_AccessHandlerCallback access, MHD_RequestCompletedCallback completed,
                       void *cls, unsigned int connection_limit, unsigned int connection_timeout_s)
{
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME
                       | MHD_USE_ERROR_LOG | (addr->ss_family == AF_INET6? MHD_USE_IPv6: 0);
    uint16_t port = ntohs (addr->ss_family == AF_INET6? ((const struct sockaddr_in6 *) addr)->sin6_port
                                                      : ((const struct sockaddr_in *) addr)->sin_port);
    return MHD_start_daemon (flags, port, NULL, NULL, access, cls,
                             MHD_OPTION_EXTERNAL_LOGGER, s_log, (void *) program,
                             MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) addr,
                             MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                             MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                             MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_s,
                             MHD_OPTION_END);
}

int
dsh_http_bound_port (struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info (daemon, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage bound;
    socklen_t bound_size = sizeof bound;
    if (!info || getsockname (info->listen_fd, (struct sockaddr *) &bound, &bound_size))
        return 0;
    return ntohs (bound.ss_family == AF_INET6? ((struct sockaddr_in6 *) &bound)->sin6_port
                                             : ((struct sockaddr_in *) &bound)->sin_port);
}

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
