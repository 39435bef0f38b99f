/*  =========================================================================
    dsh_monitor_httpd - the monitor's HTTP face: published documents and
    one Server-Sent Events stream fanned out to every page

    The monitor's loop owns the truth and publishes it here as finished
    bytes: a body per path (the page, /metrics, /api/tools, /api/stats),
    the first event a new stream gets (a snapshot of everything), and the
    events every open stream gets after it. HTTP runs on libmicrohttpd's
    own thread and never waits for the loop, nor the loop for a client: a
    stream that waits for bytes is a suspended connection, and a client
    that reads too slowly loses its stream once its queue passes a bound.

    Access (dsh_http's rules): loopback by default; with tokens (named,
    dsh_monitor_access) every request needs "Authorization: Bearer TOKEN"
    or the session cookie that GET /?token=TOKEN sets for that token
    (HttpOnly, SameSite=Strict), so that a browser's page, its fetch and
    its EventSource get in without the token in a URL. A request that
    presented a token is a trusted viewer; without tokens every viewer is
    untrusted. What is published says who sees it, so that a document or
    an event with secrets in it (pending calls' arguments) reaches trusted
    viewers only.

    A path the loop answers per request is asked: the request is checked
    on HTTP's thread, then it waits as a question, its connection
    suspended, until the loop takes it from an fd it polls and answers it.
    A question is a read (GET: the latest calls, for a viewer's filters),
    a session's poll (GET with the CSRF token that GET /api/session gave
    the page) or an action (POST of a JSON body: deciding an approval),
    which needs an actor (a token's name, or "loopback" for a loopback
    peer of a monitor without tokens), the page's own origin and the
    session's CSRF token; anything else is refused with 403 and why.
    =========================================================================
*/

#ifndef DSH_MONITOR_HTTPD_H_INCLUDED
#define DSH_MONITOR_HTTPD_H_INCLUDED

#include "dsh_http.h"
#include "dsh_monitor_access.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The limits a client meets (documented in the README).
#define DSH_MONITOR_HTTPD_MAX_STREAMS   32
#define DSH_MONITOR_HTTPD_MAX_BACKLOG   (4 * 1024 * 1024)
//  The default of --http-per-address: one host may open every stream, and
//  as many again whose clients left (a suspended stream's closed socket is
//  seen at the stream's next write)
#define DSH_MONITOR_HTTPD_PER_ADDRESS   (2 * DSH_MONITOR_HTTPD_MAX_STREAMS)

//  The path of the event stream, and of a page's new session: GET gives
//  {csrf, actor} to an actor, 403 to anyone else.
#define DSH_MONITOR_HTTPD_EVENTS        "/api/events"
#define DSH_MONITOR_HTTPD_SESSION       "/api/session"
//  The largest body an action takes (past it: 413).
#define DSH_MONITOR_HTTPD_MAX_BODY      16384
//  Questions that wait for the loop at once, past which a new one is
//  refused (503), and the query parameters one may have (past them: 400).
#define DSH_MONITOR_HTTPD_MAX_QUESTIONS 32
#define DSH_MONITOR_HTTPD_MAX_PARAMETERS 16

typedef struct _dsh_monitor_httpd_t dsh_monitor_httpd_t;

//  Who is shown a published body or event (a set of them).
typedef enum {
    DSH_MONITOR_HTTPD_UNTRUSTED = 1,    //  viewers that presented no token
    DSH_MONITOR_HTTPD_TRUSTED = 2,      //  viewers that presented the token
    DSH_MONITOR_HTTPD_EVERYONE = 3
} dsh_monitor_httpd_viewers_t;

//  Serve at address "HOST:PORT" (port 0 picks a free one) within limits
//  (dsh_http's). tokens_p: the named bearer tokens, taken (*tokens_p
//  nulled), or NULL (or *tokens_p NULL) for none, which is refused when
//  the address is not loopback. NULL with the reason in error.
dsh_monitor_httpd_t *
    dsh_monitor_httpd_new (const char *address, dsh_monitor_tokens_t **tokens_p, const dsh_http_limits_t *limits,
                           char *error, size_t error_size);

//  Stop serving; open streams end. Safe twice.
void
    dsh_monitor_httpd_destroy (dsh_monitor_httpd_t **self_p);

//  The bound port.
int
    dsh_monitor_httpd_port (dsh_monitor_httpd_t *self);

//  Serve body (copied) with content_type at path to viewers from now on.
void
    dsh_monitor_httpd_publish (dsh_monitor_httpd_t *self, dsh_monitor_httpd_viewers_t viewers,
                               const char *path, const char *content_type, const char *body, size_t size);

//  The first event of every stream that viewers open from now on: event
//  name and its data (one line of JSON, copied).
void
    dsh_monitor_httpd_set_first (dsh_monitor_httpd_t *self, dsh_monitor_httpd_viewers_t viewers,
                                 const char *event, const char *data);

//  Send an event (name, one line of data) to every open stream of viewers;
//  a stream whose client let more than DSH_MONITOR_HTTPD_MAX_BACKLOG bytes
//  pile up is closed instead. event NULL sends a keep-alive comment to
//  streams that had nothing else.
void
    dsh_monitor_httpd_broadcast (dsh_monitor_httpd_t *self, dsh_monitor_httpd_viewers_t viewers,
                                 const char *event, const char *data);

//  How many streams are open.
size_t
    dsh_monitor_httpd_streams (dsh_monitor_httpd_t *self);

//  Checks a question's query parameters ({name: value}, each name once,
//  names and values UTF-8; borrowed): gives what the loop is to be asked
//  (caller owns), or NULL with why in error, which the client gets as 400.
typedef json_t *(dsh_monitor_httpd_check_fn) (const json_t *parameters, char *error, size_t error_size);

//  Who may ask a question of a path, and how.
typedef enum {
    DSH_MONITOR_HTTPD_ASK_READ = 1,     //  GET or HEAD: every viewer; check takes the query parameters
    DSH_MONITOR_HTTPD_ASK_SESSION,      //  GET or HEAD by an actor with its session's CSRF token; the same
    DSH_MONITOR_HTTPD_ASK_ACTION        //  POST by an actor, of the page's origin, with the CSRF token;
                                        //  check takes the body, a JSON object (no key twice)
} dsh_monitor_httpd_access_t;

//  Answer requests of path by asking the loop: a request that access lets
//  in passes check on HTTP's thread, then it waits, its connection
//  suspended, as a question the loop takes with dsh_monitor_httpd_recv and
//  answers with dsh_monitor_httpd_answer.
void
    dsh_monitor_httpd_ask (dsh_monitor_httpd_t *self, const char *path, dsh_monitor_httpd_access_t access,
                           dsh_monitor_httpd_check_fn *check);

//  An fd that is readable while questions wait: poll it, then call
//  dsh_monitor_httpd_recv until it gives NULL.
int
    dsh_monitor_httpd_fd (dsh_monitor_httpd_t *self);

//  What the loop is told of a question besides what its check gave.
typedef struct {
    const char *path;           //  its path (valid while the httpd is)
    uint64_t id;                //  what its answer names
    bool trusted;               //  its request presented a token
    const char *actor;          //  a session's poll or an action: who acts (a token's name or
                                //  "loopback", valid while the httpd is); a read: NULL
} dsh_monitor_httpd_question_t;

//  The next question, or NULL: what its check gave (caller owns), and the
//  rest of it in *question. Every question taken must be answered.
json_t *
    dsh_monitor_httpd_recv (dsh_monitor_httpd_t *self, dsh_monitor_httpd_question_t *question);

//  Answer question id with status and body (copied) of content_type. A
//  question no longer there (the server stopping) is ignored.
void
    dsh_monitor_httpd_answer (dsh_monitor_httpd_t *self, uint64_t id, unsigned int status,
                              const char *content_type, const char *body, size_t size);

#ifdef __cplusplus
}
#endif

#endif
