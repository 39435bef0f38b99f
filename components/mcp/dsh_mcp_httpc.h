/*  =========================================================================
    dsh_mcp_httpc - an MCP server over Streamable HTTP, seen as a child process

    dsh-mcp-bridge speaks to an MCP server through three fds: JSON-RPC lines
    it writes, JSON-RPC lines it reads, and log lines (a child's stdin,
    stdout and stderr). This class gives it the same three fds for a
    remote server on MCP's Streamable HTTP transport (2025-06-18): a thread
    POSTs each line the bridge writes to the server's URL, and turns every
    message of the answers (a JSON body or an SSE stream) and of the
    server's GET event stream into a line the bridge reads. When the server
    cannot be reached or the session is lost, the read fd reaches end of
    file, as when a child exits.
    =========================================================================
*/

#ifndef DSH_MCP_HTTPC_H_INCLUDED
#define DSH_MCP_HTTPC_H_INCLUDED

#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_mcp_httpc_t dsh_mcp_httpc_t;

//  Starts a client of the MCP server at url (http or https). headers: extra
//  request headers, each "Name: value" (borrowed; NULL: none). max_message:
//  the largest message taken from the server, in bytes. On success the
//  caller owns three non-blocking fds: to_server (write JSON-RPC lines),
//  from_server (read JSON-RPC lines) and log (read text lines). NULL if
//  the thread cannot start.
dsh_mcp_httpc_t *
    dsh_mcp_httpc_new (const char *url, zlistx_t *headers, size_t max_message,
                       int *to_server, int *from_server, int *log);

//  Ends the session (DELETE, bounded by a second) and the thread; safe
//  twice. The caller's fds stay open.
void
    dsh_mcp_httpc_destroy (dsh_mcp_httpc_t **self_p);

//  The session's Mcp-Session-Id, copied into id (size bytes): "" before
//  the server named one, or after it ended it. Safe from any thread.
void
    dsh_mcp_httpc_session_id (dsh_mcp_httpc_t *self, char *id, size_t size);

//  The host of an http or https URL (caller frees), or NULL if url is not
//  one.
char *
    dsh_mcp_httpc_host (const char *url);

#ifdef __cplusplus
}
#endif

#endif
