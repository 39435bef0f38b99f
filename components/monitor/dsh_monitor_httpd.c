/*  =========================================================================
    dsh_monitor_httpd - the monitor's HTTP face: published documents and
    one Server-Sent Events stream fanned out to every page

    Two threads meet here: libmicrohttpd's, which answers requests from
    the published documents and pulls each stream's queued bytes, and the
    monitor's loop, which publishes and broadcasts. One mutex guards the
    documents and the streams. A stream whose queue is empty suspends its
    connection from the content reader and is resumed when bytes arrive.
    =========================================================================
*/

#include "dsh_monitor_httpd.h"
#include "dsh_http.h"
#include "dsh_http_outq.h"

#include <czmq.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sys/random.h>

#define COOKIE_NAME             "dsh_monitor"
#define MAX_CONNECTIONS         128
//  A connection that makes no progress (a client that stopped reading) is
//  closed after this long; streams get a keep-alive well within it
#define CONNECTION_TIMEOUT_S    60
#define READER_BLOCK_SIZE       (16 * 1024)
#define KEEPALIVE               ": keepalive\n\n"

//  A published body.
typedef struct {
    char *content_type;
    char *body;
    size_t size;
} s_doc_t;

//  An open event stream, from its headers to MHD's completion callback.
typedef struct {
    dsh_monitor_httpd_t *httpd;
    void *handle;               //  in httpd->streams
    bool trusted;               //  its request presented the token
    dsh_http_outq_t out;        //  bytes for the client
    bool sent_since_tick;       //  had an event since the last keep-alive round
} s_stream_t;

struct _dsh_monitor_httpd_t {
    dsh_http_server_t *server;
    char *token;
    char session [65];          //  the cookie's value: random, made at start
    bool loopback;
    int port;
    pthread_mutex_t lock;
    //  What each kind of viewer is shown, untrusted [0] and trusted [1]
    zhashx_t *docs [2];         //  path -> s_doc_t
    char *first [2];            //  the first event of a new stream, as sent
    zlistx_t *streams;          //  s_stream_t, not owned
};

//  Whether viewers include the trusted (1) or untrusted (0) ones.
static bool
s_shown (dsh_monitor_httpd_viewers_t viewers, int trusted)
{
    return (viewers & (trusted? DSH_MONITOR_HTTPD_TRUSTED: DSH_MONITOR_HTTPD_UNTRUSTED)) != 0;
}

static void
s_doc_destroy (void **item_p)
{
    s_doc_t *doc = (s_doc_t *) *item_p;
    if (doc) {
        free (doc->content_type);
        free (doc->body);
        free (doc);
        *item_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  Streams (under the lock)

//  Queues bytes for the client; one that lets them pile up loses its
//  stream, so it never holds the monitor or the other clients back. One
//  event of any size fits on a stream with nothing queued.
static void
s_stream_append (s_stream_t *stream, const char *data, size_t size)
{
    size_t pending = dsh_http_outq_pending (&stream->out);
    if (pending && pending + size > DSH_MONITOR_HTTPD_MAX_BACKLOG && !stream->out.broken) {
        zsys_warning ("dsh-monitor: an HTTP client reads its event stream too slowly (%zu bytes waiting): "
                      "the stream is closed", pending);
        dsh_http_outq_break (&stream->out);
    }
    dsh_http_outq_append (&stream->out, data, size);
}

static ssize_t
s_content_reader (void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    s_stream_t *stream = (s_stream_t *) cls;
    dsh_monitor_httpd_t *self = stream->httpd;
    pthread_mutex_lock (&self->lock);
    ssize_t size = dsh_http_outq_read (&stream->out, buf, max);
    pthread_mutex_unlock (&self->lock);
    return size;
}

//  ---------------------------------------------------------------------
//  Answers

static enum MHD_Result
s_reply (struct MHD_Connection *connection, unsigned int status, const char *text)
{
    struct MHD_Response *response = MHD_create_response_from_buffer (strlen (text), (void *) text,
                                                                     MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result result = MHD_queue_response (connection, status, response);
    MHD_destroy_response (response);
    return result;
}

//  Whether the request presented the token (as a bearer or the session
//  cookie); never without a token.
static bool
s_trusted (dsh_monitor_httpd_t *self, struct MHD_Connection *connection)
{
    if (!self->token)
        return false;
    if (dsh_http_bearer_ok (connection, self->token))
        return true;
    const char *cookie = MHD_lookup_connection_value (connection, MHD_COOKIE_KIND, COOKIE_NAME);
    return cookie && dsh_http_token_equal (cookie, strlen (cookie), self->session);
}

//  GET /?token=TOKEN: a browser trades the token for the session cookie,
//  and is sent to / so that the token leaves its address bar.
static enum MHD_Result
s_login (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, const char *given)
{
    if (!self->token || !dsh_http_token_equal (given, strlen (given), self->token))
        return s_reply (connection, MHD_HTTP_UNAUTHORIZED, "Unauthorized: that is not this monitor's token\n");
    struct MHD_Response *response = MHD_create_response_from_buffer (0, NULL, MHD_RESPMEM_PERSISTENT);
    char *cookie = zsys_sprintf (COOKIE_NAME "=%s; Path=/; HttpOnly; SameSite=Strict", self->session);
    MHD_add_response_header (response, MHD_HTTP_HEADER_SET_COOKIE, cookie);
    MHD_add_response_header (response, MHD_HTTP_HEADER_LOCATION, "/");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    zstr_free (&cookie);
    enum MHD_Result result = MHD_queue_response (connection, MHD_HTTP_SEE_OTHER, response);
    MHD_destroy_response (response);
    return result;
}

static enum MHD_Result
s_open_stream (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, bool trusted, void **req_cls)
{
    pthread_mutex_lock (&self->lock);
    if (zlistx_size (self->streams) >= DSH_MONITOR_HTTPD_MAX_STREAMS) {
        pthread_mutex_unlock (&self->lock);
        return s_reply (connection, MHD_HTTP_SERVICE_UNAVAILABLE, "Service Unavailable: too many event streams\n");
    }
    s_stream_t *stream = (s_stream_t *) zmalloc (sizeof (s_stream_t));
    assert (stream);
    stream->httpd = self;
    stream->trusted = trusted;
    dsh_http_outq_init (&stream->out, connection);
    stream->handle = zlistx_add_end (self->streams, stream);
    //  The retry hint makes a browser come back soon after the monitor does
    const char *retry = "retry: 2000\n\n";
    s_stream_append (stream, retry, strlen (retry));
    if (self->first [trusted])
        s_stream_append (stream, self->first [trusted], strlen (self->first [trusted]));
    pthread_mutex_unlock (&self->lock);
    *req_cls = stream;
    struct MHD_Response *response = MHD_create_response_from_callback (MHD_SIZE_UNKNOWN, READER_BLOCK_SIZE,
                                                                       s_content_reader, stream, NULL);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result result = MHD_queue_response (connection, MHD_HTTP_OK, response);
    MHD_destroy_response (response);
    return result;
}

static enum MHD_Result
s_serve_doc (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, const char *url, bool trusted)
{
    pthread_mutex_lock (&self->lock);
    s_doc_t *doc = (s_doc_t *) zhashx_lookup (self->docs [trusted], url);
    struct MHD_Response *response = doc? MHD_create_response_from_buffer (doc->size, doc->body,
                                                                          MHD_RESPMEM_MUST_COPY): NULL;
    if (response)
        MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, doc->content_type);
    pthread_mutex_unlock (&self->lock);
    if (!response)
        return s_reply (connection, MHD_HTTP_NOT_FOUND, "Not Found: the monitor serves /, /metrics, "
                        "/api/tools, /api/stats and /api/events\n");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header (response, "X-Content-Type-Options", "nosniff");
    if (streq (url, "/")) {
        //  The page is self-contained: nothing from anywhere else runs in it
        MHD_add_response_header (response, "Content-Security-Policy",
                                 "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                 "connect-src 'self'; img-src data:; frame-ancestors 'none'");
        MHD_add_response_header (response, "Referrer-Policy", "no-referrer");
    }
    enum MHD_Result result = MHD_queue_response (connection, MHD_HTTP_OK, response);
    MHD_destroy_response (response);
    return result;
}

static enum MHD_Result
s_access (void *cls, struct MHD_Connection *connection, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    (void) version;
    (void) upload_data;
    (void) upload_data_size;
    (void) req_cls;
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) cls;
    bool head = streq (method, MHD_HTTP_METHOD_HEAD);
    if (!streq (method, MHD_HTTP_METHOD_GET) && !head)
        return s_reply (connection, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed: the monitor is read-only\n");
    if (!dsh_http_origin_allowed (connection, self->loopback))
        return s_reply (connection, MHD_HTTP_FORBIDDEN, "Forbidden: Origin or Host not allowed\n");
    const char *given = MHD_lookup_connection_value (connection, MHD_GET_ARGUMENT_KIND, "token");
    if (given && streq (url, "/"))
        return s_login (self, connection, given);
    //  MHD calls this first once the headers are in: the token is checked
    //  before anything else is done for the request
    bool trusted = s_trusted (self, connection);
    if (self->token && !trusted)
        return s_reply (connection, MHD_HTTP_UNAUTHORIZED,
                        "Unauthorized: this monitor needs its token. A browser opens /?token=TOKEN once; "
                        "a script sends \"Authorization: Bearer TOKEN\".\n");
    if (streq (url, DSH_MONITOR_HTTPD_EVENTS) && !head)
        return s_open_stream (self, connection, trusted, req_cls);
    return s_serve_doc (self, connection, url, trusted);
}

static void
s_completed (void *cls, struct MHD_Connection *connection, void **req_cls,
             enum MHD_RequestTerminationCode toe)
{
    (void) connection;
    (void) toe;
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) cls;
    s_stream_t *stream = (s_stream_t *) *req_cls;
    if (!stream)
        return;
    pthread_mutex_lock (&self->lock);
    zlistx_delete (self->streams, stream->handle);
    pthread_mutex_unlock (&self->lock);
    dsh_http_outq_release (&stream->out);
    free (stream);
    *req_cls = NULL;
}

//  ---------------------------------------------------------------------
//  The loop's side

dsh_monitor_httpd_t *
dsh_monitor_httpd_new (const char *address, const char *token, const dsh_http_limits_t *limits,
                       char *error, size_t error_size)
{
    assert (address);
    assert (limits);
    struct sockaddr_storage addr;
    socklen_t addr_size = 0;
    if (dsh_http_address (address, &addr, &addr_size, error, error_size))
        return NULL;
    bool loopback = dsh_http_addr_is_loopback (&addr);
    if (!token && !loopback) {
        snprintf (error, error_size, "serving on %s, beyond loopback, needs a bearer token (--token-file)",
                  address);
        return NULL;
    }
    unsigned char bytes [32];
    if (getrandom (bytes, sizeof bytes, 0) != (ssize_t) sizeof bytes) {
        snprintf (error, error_size, "cannot make a session secret: %s", strerror (errno));
        return NULL;
    }
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) zmalloc (sizeof (dsh_monitor_httpd_t));
    assert (self);
    for (size_t index = 0; index < sizeof bytes; index++)
        snprintf (self->session + 2 * index, 3, "%02x", bytes [index]);
    self->token = token? strdup (token): NULL;
    self->loopback = loopback;
    pthread_mutex_init (&self->lock, NULL);
    for (int trusted = 0; trusted < 2; trusted++) {
        self->docs [trusted] = zhashx_new ();
        zhashx_set_destructor (self->docs [trusted], s_doc_destroy);
    }
    self->streams = zlistx_new ();
    dsh_http_limits_t server_limits = *limits;
    server_limits.connections = MAX_CONNECTIONS;
    server_limits.idle_timeout_s = CONNECTION_TIMEOUT_S;
    self->server = dsh_http_server_new (&addr, "dsh-monitor", s_access, s_completed, self, &server_limits);
    if (!self->server) {
        snprintf (error, error_size, "cannot serve HTTP on %s: the address is in use or not ours", address);
        dsh_monitor_httpd_destroy (&self);
        return NULL;
    }
    self->port = dsh_http_server_port (self->server);
    return self;
}

void
dsh_monitor_httpd_destroy (dsh_monitor_httpd_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_monitor_httpd_t *self = *self_p;
        //  MHD must not be stopped with connections suspended
        pthread_mutex_lock (&self->lock);
        for (s_stream_t *stream = (s_stream_t *) zlistx_first (self->streams); stream;
             stream = (s_stream_t *) zlistx_next (self->streams))
            dsh_http_outq_break (&stream->out);
        pthread_mutex_unlock (&self->lock);
        dsh_http_server_destroy (&self->server);
        zlistx_destroy (&self->streams);
        for (int trusted = 0; trusted < 2; trusted++) {
            zhashx_destroy (&self->docs [trusted]);
            free (self->first [trusted]);
        }
        pthread_mutex_destroy (&self->lock);
        free (self->token);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_monitor_httpd_port (dsh_monitor_httpd_t *self)
{
    assert (self);
    return self->port;
}

void
dsh_monitor_httpd_publish (dsh_monitor_httpd_t *self, dsh_monitor_httpd_viewers_t viewers,
                           const char *path, const char *content_type, const char *body, size_t size)
{
    assert (self);
    for (int trusted = 0; trusted < 2; trusted++) {
        if (!s_shown (viewers, trusted))
            continue;
        s_doc_t *doc = (s_doc_t *) zmalloc (sizeof (s_doc_t));
        assert (doc);
        doc->content_type = strdup (content_type);
        doc->body = (char *) malloc (size? size: 1);
        assert (doc->body);
        memcpy (doc->body, body, size);
        doc->size = size;
        pthread_mutex_lock (&self->lock);
        zhashx_update (self->docs [trusted], path, doc);
        pthread_mutex_unlock (&self->lock);
    }
}

void
dsh_monitor_httpd_set_first (dsh_monitor_httpd_t *self, dsh_monitor_httpd_viewers_t viewers,
                             const char *event, const char *data)
{
    assert (self);
    for (int trusted = 0; trusted < 2; trusted++) {
        if (!s_shown (viewers, trusted))
            continue;
        char *first = zsys_sprintf ("event: %s\ndata: %s\n\n", event, data);
        pthread_mutex_lock (&self->lock);
        free (self->first [trusted]);
        self->first [trusted] = first;
        pthread_mutex_unlock (&self->lock);
    }
}

void
dsh_monitor_httpd_broadcast (dsh_monitor_httpd_t *self, dsh_monitor_httpd_viewers_t viewers,
                             const char *event, const char *data)
{
    assert (self);
    char *text = event? zsys_sprintf ("event: %s\ndata: %s\n\n", event, data): NULL;
    pthread_mutex_lock (&self->lock);
    for (s_stream_t *stream = (s_stream_t *) zlistx_first (self->streams); stream;
         stream = (s_stream_t *) zlistx_next (self->streams)) {
        if (!s_shown (viewers, stream->trusted))
            continue;
        if (text) {
            s_stream_append (stream, text, strlen (text));
            stream->sent_since_tick = true;
        }
        else {
            if (!stream->sent_since_tick)
                s_stream_append (stream, KEEPALIVE, strlen (KEEPALIVE));
            stream->sent_since_tick = false;
        }
    }
    pthread_mutex_unlock (&self->lock);
    zstr_free (&text);
}

size_t
dsh_monitor_httpd_streams (dsh_monitor_httpd_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    size_t streams = zlistx_size (self->streams);
    pthread_mutex_unlock (&self->lock);
    return streams;
}
