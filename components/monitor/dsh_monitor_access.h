/*  =========================================================================
    dsh_monitor_access - who may act on the monitor's page, and how a
    request proves it

    The page's actions (deciding an approval, accepting a quarantined
    tool) change the swarm, so they take more than reading it: a named
    bearer token (--token-file, one "NAME TOKEN" a line) or, on a monitor
    without one, a loopback peer; a request of the page's own origin
    (Origin, else Referer, equal to what the client addressed us by: a
    page elsewhere, even another one on loopback, cannot send it); and the
    CSRF token of a page session, which only the page could read, in a
    header no other site's form can set. Plain data and pure checks: the
    HTTP server (dsh_monitor_httpd) holds them under its lock.
    =========================================================================
*/

#ifndef DSH_MONITOR_ACCESS_H_INCLUDED
#define DSH_MONITOR_ACCESS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  A token file holds at most this many tokens; a name is 1 to
//  DSH_MONITOR_TOKEN_NAME_MAX of [A-Za-z0-9._@+-].
#define DSH_MONITOR_TOKENS_MAX          64
#define DSH_MONITOR_TOKEN_NAME_MAX      64
//  The name of a token on a line of its own.
#define DSH_MONITOR_TOKEN_DEFAULT_NAME  "token"
//  Who acts from a loopback peer on a monitor without a token.
#define DSH_MONITOR_LOOPBACK_ACTOR      "loopback"
//  The header that carries a page session's CSRF token.
#define DSH_MONITOR_CSRF_HEADER         "X-Dsh-Csrf"
//  Sessions kept at once (the least recently seen goes), and how long an
//  unseen one lasts.
#define DSH_MONITOR_SESSIONS_MAX        64
#define DSH_MONITOR_SESSION_IDLE_MS     (10 * 60 * 1000)

typedef struct _dsh_monitor_tokens_t dsh_monitor_tokens_t;

//  The tokens of a token file's text: lines "NAME TOKEN" or "TOKEN" (named
//  DSH_MONITOR_TOKEN_DEFAULT_NAME), blank lines ignored; a token is 1 to
//  DSH_HTTP_TOKEN_MAX visible ASCII characters; names and tokens are
//  unique. NULL with the reason (and the line) in error.
dsh_monitor_tokens_t *
    dsh_monitor_tokens_parse (const char *text, char *error, size_t error_size);

//  The tokens in the file at path, as dsh_monitor_tokens_parse; the error
//  names the file.
dsh_monitor_tokens_t *
    dsh_monitor_tokens_read (const char *path, char *error, size_t error_size);

//  Destroy; safe twice.
void
    dsh_monitor_tokens_destroy (dsh_monitor_tokens_t **self_p);

//  How many tokens there are.
size_t
    dsh_monitor_tokens_size (dsh_monitor_tokens_t *self);

//  The name of token index (valid while self is).
const char *
    dsh_monitor_tokens_name (dsh_monitor_tokens_t *self, size_t index);

//  The index of the token equal to given (given_size bytes), compared
//  with every token in constant time each, or -1.
int
    dsh_monitor_tokens_match (dsh_monitor_tokens_t *self, const char *given, size_t given_size);

//  Whether a request with these headers (each NULL when absent) comes
//  from the page's own origin: Origin, else Referer's origin, must be
//  http:// or https:// and the host (with its port) the request was sent
//  to. false with the reason in why.
bool
    dsh_monitor_access_same_origin (const char *host, const char *origin, const char *referer,
                                    char *why, size_t why_size);

typedef struct _dsh_monitor_sessions_t dsh_monitor_sessions_t;

//  No sessions yet.
dsh_monitor_sessions_t *
    dsh_monitor_sessions_new (void);

//  Destroy; safe twice.
void
    dsh_monitor_sessions_destroy (dsh_monitor_sessions_t **self_p);

//  A new session of actor (copied) at now_ms (monotonic): its CSRF token,
//  64 hex digits, in csrf. The least recently seen session goes if there
//  are DSH_MONITOR_SESSIONS_MAX. Returns 0, or -1 if no random bytes came.
int
    dsh_monitor_sessions_open (dsh_monitor_sessions_t *self, const char *actor, int64_t now_ms, char csrf [65]);

//  Whether csrf (NULL: none given) is the token of a live session of
//  actor; if so, the session counts as seen at now_ms. false with the
//  reason in why.
bool
    dsh_monitor_sessions_check (dsh_monitor_sessions_t *self, const char *csrf, const char *actor,
                                int64_t now_ms, char *why, size_t why_size);

//  How many sessions are live.
size_t
    dsh_monitor_sessions_size (dsh_monitor_sessions_t *self);

#ifdef __cplusplus
}
#endif

#endif
