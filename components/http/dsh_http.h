/*  =========================================================================
    dsh_http - what every dsh HTTP server on libmicrohttpd needs

    dsh-mcp (MCP's Streamable HTTP) and dsh-monitor (the live page and
    /metrics) serve HTTP with the same rules: an address is HOST:PORT,
    loopback by default; a bearer token read from a file is required to
    bind beyond loopback and then checked on every request, in constant
    time; and a page elsewhere on the web must not reach a loopback server
    through a name that resolves to it (DNS rebinding); and a client that
    is slow on purpose (slowloris) holds no server: at most so many
    connections from one address, and a request's headers must be in
    within a deadline of its connection's accept (or of its previous
    request's end), however steadily they trickle. Those rules live here
    once.
    =========================================================================
*/

#ifndef DSH_HTTP_H_INCLUDED
#define DSH_HTTP_H_INCLUDED

#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The longest bearer token taken, in bytes.
#define DSH_HTTP_TOKEN_MAX      4096

//  Parse address "HOST:PORT" ("[V6]:PORT"; port 0 picks a free one) into
//  addr. Returns 0, or -1 with the reason in error.
int
    dsh_http_address (const char *address, struct sockaddr_storage *addr, socklen_t *addr_size,
                      char *error, size_t error_size);

//  True if addr is a loopback address (127/8, ::1, v4-mapped 127/8).
bool
    dsh_http_addr_is_loopback (const struct sockaddr_storage *addr);

//  What a server takes from its clients. The per-address and header
//  limits are flags of dsh-monitor and dsh-mcp (--http-per-address,
//  --http-header-ms), with these ranges; the header default is both
//  programs', the per-address one each program's (room for every stream
//  it allows, and a few requests).
typedef struct {
    unsigned int connections;       //  open at once, in all
    unsigned int per_address;       //  open at once from one IP address; 0: no limit
    unsigned int header_timeout_ms; //  from accept (or the previous request's end) to the last header
    unsigned int idle_timeout_s;    //  once the headers are in: closed after this long without progress
} dsh_http_limits_t;

#define DSH_HTTP_PER_ADDRESS_MAX        100000
#define DSH_HTTP_HEADER_TIMEOUT_MS      10000
#define DSH_HTTP_HEADER_TIMEOUT_MS_MIN  100
#define DSH_HTTP_HEADER_TIMEOUT_MS_MAX  3600000

typedef struct _dsh_http_server_t dsh_http_server_t;

//  Start serving at addr on libmicrohttpd's own thread, with connections
//  that may be suspended (streams), within limits. A connection whose
//  request headers are not all in by the header deadline is closed (a
//  watchdog thread shuts its socket down); access is first called once
//  a request's headers are in, which is where a server checks its token,
//  before any body is read. access and completed get cls; MHD's own
//  complaints are logged as "<program>: http: ...". NULL if the address
//  cannot be bound.
dsh_http_server_t *
    dsh_http_server_new (const struct sockaddr_storage *addr, const char *program,
                         MHD_AccessHandlerCallback access, MHD_RequestCompletedCallback completed,
                         void *cls, const dsh_http_limits_t *limits);

//  Stop serving (MHD's completion callbacks run for open requests). The
//  server's connections must not be suspended. Safe twice.
void
    dsh_http_server_destroy (dsh_http_server_t **self_p);

//  The port the server listens on (the one picked when asked for port 0), or 0.
int
    dsh_http_server_port (dsh_http_server_t *self);

//  Whether the request's Host and Origin may reach a server bound on
//  loopback (loopback true) or beyond: loopback origins always pass;
//  bound beyond loopback, so does the origin the client addressed us by.
bool
    dsh_http_origin_allowed (struct MHD_Connection *connection, bool loopback);

//  Compare given (given_size bytes) with token in time that depends on the
//  token's length only.
bool
    dsh_http_token_equal (const char *given, size_t given_size, const char *token);

//  True if the request carries "Authorization: Bearer <token>".
bool
    dsh_http_bearer_ok (struct MHD_Connection *connection, const char *token);

//  The bearer token in file path: its first line, without surrounding
//  blanks. Caller frees. NULL with the reason in error when the file
//  cannot be read or holds no usable token.
char *
    dsh_http_read_token (const char *path, char *error, size_t error_size);

//  Wait on cond (made with a CLOCK_MONOTONIC condattr), lock held, for at
//  most ms: the tick of the servers' housekeeping threads.
void
    dsh_http_timedwait (pthread_cond_t *cond, pthread_mutex_t *lock, int64_t ms);

#ifdef __cplusplus
}
#endif

#endif
