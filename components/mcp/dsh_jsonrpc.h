/*  =========================================================================
    dsh_jsonrpc - JSON-RPC 2.0 over a pair of file descriptors, one message a line

    MCP's stdio transport: every message is one line of JSON on the peer's
    stdin or stdout. This class reads whatever bytes are ready (the caller
    polls the read fd), cuts them into lines, and parses them; it queues
    outgoing lines and writes as much as the write fd takes, so a peer
    that stops reading cannot block a caller that made its fd non-blocking
    (poll for POLLOUT while dsh_jsonrpc_backlog is non-zero). The same
    reader serves plain text lines (a child's stderr) with dsh_jsonrpc_line.
    =========================================================================
*/

#ifndef DSH_JSONRPC_H_INCLUDED
#define DSH_JSONRPC_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  JSON-RPC and MCP error codes.
#define DSH_JSONRPC_PARSE_ERROR      -32700
#define DSH_JSONRPC_INVALID_REQUEST  -32600
#define DSH_JSONRPC_METHOD_NOT_FOUND -32601
#define DSH_JSONRPC_INVALID_PARAMS   -32602
#define DSH_JSONRPC_INTERNAL_ERROR   -32603

typedef struct _dsh_jsonrpc_t dsh_jsonrpc_t;

//  A peer reading from read_fd and writing to write_fd (-1: that way is
//  not used). Lines longer than max_line bytes are dropped whole. The fds
//  stay the caller's.
dsh_jsonrpc_t *
    dsh_jsonrpc_new (int read_fd, int write_fd, size_t max_line);

//  Destroy; safe twice.
void
    dsh_jsonrpc_destroy (dsh_jsonrpc_t **self_p);

//  Read once from the read fd (call when poll says it is readable).
//  Returns 0, or -1 at end of file or on a read error.
int
    dsh_jsonrpc_read (dsh_jsonrpc_t *self);

//  The next complete line without its newline (caller frees), or NULL.
char *
    dsh_jsonrpc_line (dsh_jsonrpc_t *self);

//  The next complete non-empty line parsed as a JSON object, or an array
//  (a JSON-RPC batch), caller owns it; NULL when no line is waiting. Any
//  valid JSON is read (dsh_json_parse). A line that is neither gives NULL
//  with *bad set, the reason in error, and in *id_p the request id found in
//  the line if one could be (caller owns; NULL otherwise), so the request
//  still gets its one answer. Call again for the next.
json_t *
    dsh_jsonrpc_recv (dsh_jsonrpc_t *self, bool *bad, json_t **id_p, char *error, size_t error_size);

//  The "id" member of the top-level object in text, if it is a string or
//  an integer, whatever else is wrong with the text (caller owns); NULL if
//  none can be found.
json_t *
    dsh_jsonrpc_find_id (const char *text, size_t size);

//  Queue message as one line without writing it yet (dsh_jsonrpc_flush
//  writes what is queued, so many messages of one turn go together).
//  Borrows message. Returns 0, or -1 if it cannot be encoded.
int
    dsh_jsonrpc_queue (dsh_jsonrpc_t *self, const json_t *message);

//  Write queued bytes (call when poll says the write fd is writable).
//  Returns 0, or -1 if the peer is gone.
int
    dsh_jsonrpc_flush (dsh_jsonrpc_t *self);

//  How many bytes wait to be written.
size_t
    dsh_jsonrpc_backlog (dsh_jsonrpc_t *self);

//  The start of the page a paginated MCP list request asks for: its
//  params' cursor, which dsh's servers make the decimal index of the
//  page's first item. Returns 0 and sets *start (0 with no cursor), or -1
//  if the cursor is not one of ours.
int
    dsh_jsonrpc_cursor (const json_t *params, size_t *start);

//  A new request {jsonrpc, id, method, params?}; takes params (may be NULL).
json_t *
    dsh_jsonrpc_request (json_int_t id, const char *method, json_t *params);

//  A new notification {jsonrpc, method, params?}; takes params (may be NULL).
json_t *
    dsh_jsonrpc_notification (const char *method, json_t *params);

//  A new response {jsonrpc, id, result}; borrows id (NULL: null), takes result.
json_t *
    dsh_jsonrpc_result (const json_t *id, json_t *result);

//  A new error response {jsonrpc, id, error: {code, message}}; borrows id.
json_t *
    dsh_jsonrpc_error (const json_t *id, int code, const char *message);

#ifdef __cplusplus
}
#endif

#endif
