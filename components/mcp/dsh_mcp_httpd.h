/*  =========================================================================
    dsh_mcp_httpd - MCP's Streamable HTTP transport, server side

    dsh-mcp serves one core to many sessions: stdio is one, and every
    Mcp-Session-Id a remote client gets from this module is another. The
    module hides HTTP from that core: the core polls one fd, takes
    messages with the session they belong to, and sends messages to a
    session; which POST's stream, GET stream or JSON body carries them is
    decided here.

    Revision 2025-06-18 of the transport, at the path /mcp, also taking
    2025-03-26 clients (JSON arrays of messages). HTTP runs on
    libmicrohttpd's own thread; a request that waits for the core is a
    suspended connection, so no thread waits with it. Everything a client
    can grow is bounded: request bodies, bytes queued for a stream that is
    not read, sessions, messages waiting for the core. Idle sessions
    expire.
    =========================================================================
*/

#ifndef DSH_MCP_HTTPD_H_INCLUDED
#define DSH_MCP_HTTPD_H_INCLUDED

#include "dsh_http.h"

#include <jansson.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The limits a client meets (documented in the README).
#define DSH_MCP_HTTPD_MAX_BODY          (16 * 1024 * 1024)
#define DSH_MCP_HTTPD_MAX_SESSIONS      64
#define DSH_MCP_HTTPD_MAX_BACKLOG       (8 * 1024 * 1024)
#define DSH_MCP_HTTPD_MAX_SESSION_BACKLOG (16 * 1024 * 1024)
#define DSH_MCP_HTTPD_IDLE_MS           (60 * 60 * 1000)
#define DSH_MCP_HTTPD_KEEPALIVE_MS      15000
//  The default of --http-per-address: one host may hold a stream for every
//  session
#define DSH_MCP_HTTPD_PER_ADDRESS       (DSH_MCP_HTTPD_MAX_SESSIONS + 8)

typedef struct _dsh_mcp_httpd_t dsh_mcp_httpd_t;

//  Serve at address "HOST:PORT" ("127.0.0.1:0" picks a free port,
//  "[::1]:8080", "0.0.0.0:8080") on path /mcp, with the default limits
//  (DSH_MCP_HTTPD_PER_ADDRESS connections from one address, headers within
//  DSH_HTTP_HEADER_TIMEOUT_MS). token: the bearer token every request must
//  carry, checked once its headers are in, before its body is read; or
//  NULL for none, which is refused when the address is not loopback.
//  Returns NULL with the reason in error.
dsh_mcp_httpd_t *
    dsh_mcp_httpd_new (const char *address, const char *token, char *error, size_t error_size);

//  As dsh_mcp_httpd_new, within limits' per_address and header_timeout_ms
//  (the flags --http-per-address and --http-header-ms).
dsh_mcp_httpd_t *
    dsh_mcp_httpd_new_limited (const char *address, const char *token, const dsh_http_limits_t *limits,
                               char *error, size_t error_size);

//  Stop serving: open streams end, and no session-end events are given.
//  Safe twice.
void
    dsh_mcp_httpd_destroy (dsh_mcp_httpd_t **self_p);

//  The bound port.
int
    dsh_mcp_httpd_port (dsh_mcp_httpd_t *self);

//  An fd that is readable while events wait: poll it, then call
//  dsh_mcp_httpd_recv until it gives nothing.
int
    dsh_mcp_httpd_fd (dsh_mcp_httpd_t *self);

//  The next event, or NULL with *session_p NULL when none waits. A message
//  from a client (caller owns it) with *session_p its session id (caller
//  frees); or, when a session ended (DELETE, idle expiry), NULL with
//  *session_p set: its unanswered requests will reach no one, so the core
//  drops them. A session's first message is its initialize. When a
//  client goes away before its requests were answered, the core hears
//  notifications/cancelled for each of them.
json_t *
    dsh_mcp_httpd_recv (dsh_mcp_httpd_t *self, char **session_p);

//  Send message (borrowed) to session. A response goes to the exchange of
//  the POST that carried its request. A notification or request with
//  related_id (the id of a client request, may be NULL) goes to that
//  request's stream while it is open, else to the session's GET stream if
//  one is open, else it is dropped. Call from one thread only. Returns 0,
//  or -1 if the session is unknown (ended).
int
    dsh_mcp_httpd_send (dsh_mcp_httpd_t *self, const char *session, const json_t *message,
                        const json_t *related_id);

//  How long a session with no open exchange lives without a request, and
//  how often an open stream gets a keep-alive comment (which is also how
//  a client that went away is noticed). 0 keeps the default.
void
    dsh_mcp_httpd_set_timeouts (dsh_mcp_httpd_t *self, int idle_ms, int keepalive_ms);

#ifdef __cplusplus
}
#endif

#endif
