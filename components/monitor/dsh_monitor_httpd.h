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

    Access (dsh_http's rules): loopback by default; with a token every
    request needs "Authorization: Bearer TOKEN" or the session cookie that
    GET /?token=TOKEN sets (HttpOnly, SameSite=Strict), so that a browser's
    page, its fetch and its EventSource get in without the token in a URL.
    =========================================================================
*/

#ifndef DSH_MONITOR_HTTPD_H_INCLUDED
#define DSH_MONITOR_HTTPD_H_INCLUDED

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  The limits a client meets (documented in the README).
#define DSH_MONITOR_HTTPD_MAX_STREAMS   32
#define DSH_MONITOR_HTTPD_MAX_BACKLOG   (4 * 1024 * 1024)

//  The path of the event stream.
#define DSH_MONITOR_HTTPD_EVENTS        "/api/events"

typedef struct _dsh_monitor_httpd_t dsh_monitor_httpd_t;

//  Serve at address "HOST:PORT" (port 0 picks a free one). token: the
//  bearer token, or NULL for none; NULL is refused when the address is not
//  loopback. NULL with the reason in error.
dsh_monitor_httpd_t *
    dsh_monitor_httpd_new (const char *address, const char *token, char *error, size_t error_size);

//  Stop serving; open streams end. Safe twice.
void
    dsh_monitor_httpd_destroy (dsh_monitor_httpd_t **self_p);

//  The bound port.
int
    dsh_monitor_httpd_port (dsh_monitor_httpd_t *self);

//  Serve body (copied) with content_type at path from now on.
void
    dsh_monitor_httpd_publish (dsh_monitor_httpd_t *self, const char *path, const char *content_type,
                               const char *body, size_t size);

//  The first event of every stream opened from now on: event name and its
//  data (one line of JSON, copied).
void
    dsh_monitor_httpd_set_first (dsh_monitor_httpd_t *self, const char *event, const char *data);

//  Send an event (name, one line of data) to every open stream; a stream
//  whose client let more than DSH_MONITOR_HTTPD_MAX_BACKLOG bytes pile up
//  is closed instead. event NULL sends a keep-alive comment to streams
//  that had nothing else.
void
    dsh_monitor_httpd_broadcast (dsh_monitor_httpd_t *self, const char *event, const char *data);

//  How many streams are open.
size_t
    dsh_monitor_httpd_streams (dsh_monitor_httpd_t *self);

#ifdef __cplusplus
}
#endif

#endif
