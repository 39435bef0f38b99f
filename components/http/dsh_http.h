/*  =========================================================================
    dsh_http - what every dsh HTTP server on libmicrohttpd needs

    dsh-mcp (MCP's Streamable HTTP) and dsh-monitor (the live page and
    /metrics) serve HTTP with the same rules: an address is HOST:PORT,
    loopback by default; a bearer token read from a file is required to
    bind beyond loopback and then checked on every request, in constant
    time; and a page elsewhere on the web must not reach a loopback server
    through a name that resolves to it (DNS rebinding). Those rules live
    here once.
    =========================================================================
*/

#ifndef DSH_HTTP_H_INCLUDED
#define DSH_HTTP_H_INCLUDED

#include <microhttpd.h>
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

//  Start serving at addr on libmicrohttpd's own thread, with connections
//  that may be suspended (streams), at most connection_limit of them, each
//  closed after connection_timeout_s without progress. access and
//  completed get cls; MHD's own complaints are logged as "<program>: http:
//  ...". NULL if the address cannot be bound.
struct MHD_Daemon *
    dsh_http_daemon_start (const struct sockaddr_storage *addr, const char *program,
                           MHD_AccessHandlerCallback access, MHD_RequestCompletedCallback completed,
                           void *cls, unsigned int connection_limit, unsigned int connection_timeout_s);

//  The port daemon listens on (the one picked when asked for port 0), or 0.
int
    dsh_http_bound_port (struct MHD_Daemon *daemon);

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

#ifdef __cplusplus
}
#endif

#endif
