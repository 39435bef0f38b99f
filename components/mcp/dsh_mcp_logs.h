/*  =========================================================================
    dsh_mcp_logs - bridged MCP servers' log messages, for one MCP session

    A bridge keeps the last log messages (notifications/message) of its
    server and hands them out to a long poll on its gateway tool: the
    gateway method "dsh/logging/poll" {after, waitMs} answers with the
    messages after sequence number `after` as soon as there are some, or
    with none after waitMs (PROTOCOL.md, MCP gateway tools). This class is
    dsh-mcp's side of that for one session: once the client sets a level
    (logging/setLevel), it keeps one poll in flight per gateway whose
    server logs, follows each gateway's cursor, and turns the messages at
    or above the client's level into notifications/message params. It
    makes no calls: the caller sends the polls it returns as dsh calls and
    gives their results back.
    =========================================================================
*/

#ifndef DSH_MCP_LOGS_H_INCLUDED
#define DSH_MCP_LOGS_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The gateway method a bridge answers with its server's log messages.
#define DSH_MCP_LOGS_POLL   "dsh/logging/poll"

typedef struct _dsh_mcp_logs_t dsh_mcp_logs_t;

//  A session's log follower; each poll waits at most wait_ms at the bridge
//  (keep it under the dsh call's deadline).
dsh_mcp_logs_t *
    dsh_mcp_logs_new (int wait_ms);

//  Destroy; safe twice.
void
    dsh_mcp_logs_destroy (dsh_mcp_logs_t **self_p);

//  MCP's rank of a log level name, debug 0 to emergency 7; -1 if it is
//  not one of MCP's eight.
int
    dsh_mcp_logs_level (const char *name);

//  True once the client set a level: its gateways' logs are followed.
bool
    dsh_mcp_logs_following (dsh_mcp_logs_t *self);

//  The client's logging/setLevel: from now on logs at level or above are
//  wanted. Returns 0, or -1 if level is not one of MCP's eight.
int
    dsh_mcp_logs_set_level (dsh_mcp_logs_t *self, const char *level);

//  The polls to send now, as [{tool, arguments}]: one for every gateway in
//  entries (the registry's tool entries) whose server logs and that has
//  none in flight; none before the first set_level. Each is then in
//  flight until dsh_mcp_logs_answer. Caller owns the array.
json_t *
    dsh_mcp_logs_polls (dsh_mcp_logs_t *self, const json_t *entries);

//  A poll of gateway tool came back (body: its dsh RESULT as JSON, NULL if
//  none). Returns {notifications: [params...], poll?: {tool, arguments}}:
//  the notifications/message params to send, and the next poll to send
//  (absent if this one failed: the gateway is gone, a later
//  dsh_mcp_logs_polls finds it again). Caller owns it.
json_t *
    dsh_mcp_logs_answer (dsh_mcp_logs_t *self, const char *tool, const json_t *body);

#ifdef __cplusplus
}
#endif

#endif
