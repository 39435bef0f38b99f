/*  =========================================================================
    dsh_monitor_httpd - the monitor's HTTP face: published documents and
    one Server-Sent Events stream fanned out to every page

    Two threads meet here: libmicrohttpd's, which answers requests from
    the published documents and pulls each stream's queued bytes, and the
    monitor's loop, which publishes and broadcasts. One mutex guards the
    documents and the streams. A stream whose queue is empty suspends its
    connection from the content reader and is resumed when bytes arrive.
    A question suspends its connection under the lock, so that the loop's
    answer, which resumes it under the lock too, always comes after.
    =========================================================================
*/

#include "dsh_monitor_httpd.h"
#include "dsh_http.h"
#include "dsh_http_outq.h"

#include <czmq.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

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

//  What a request in progress is (the first field of its state).
typedef enum {
    REQUEST_STREAM = 1,
    REQUEST_QUESTION
} s_request_kind_t;

//  An open event stream, from its headers to MHD's completion callback.
typedef struct {
    s_request_kind_t kind;      //  REQUEST_STREAM
    dsh_monitor_httpd_t *httpd;
    void *handle;               //  in httpd->streams
    bool trusted;               //  its request presented the token
    dsh_http_outq_t out;        //  bytes for the client
    bool sent_since_tick;       //  had an event since the last keep-alive round
} s_stream_t;

//  A path the loop answers.
typedef struct {
    char *path;
    dsh_monitor_httpd_check_fn *check;
} s_asker_t;

//  A request waiting for the loop's answer, from its headers to MHD's
//  completion callback.
typedef struct {
    s_request_kind_t kind;      //  REQUEST_QUESTION
    void *handle;               //  in httpd->questions
    struct MHD_Connection *connection;
    uint64_t id;
    const char *path;           //  its asker's
    bool trusted;
    json_t *asked;              //  what the check gave, until the loop takes it
    bool taken;                 //  by the loop
    bool answered;              //  then the response is below
    unsigned int status;
    char *content_type;
    char *body;
    size_t size;
} s_question_t;

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
    zhashx_t *askers;           //  path -> s_asker_t
    zlistx_t *questions;        //  s_question_t, not owned: asked and not completed
    size_t untaken;             //  of them, those the loop has not taken
    uint64_t last_question;     //  the last id given
    int event_fd;               //  readable while untaken > 0
    bool stopping;
};

//  Whether viewers include the trusted (1) or untrusted (0) ones.
static bool
s_shown (dsh_monitor_httpd_viewers_t viewers, int trusted)
{
    return (viewers & (trusted? DSH_MONITOR_HTTPD_TRUSTED: DSH_MONITOR_HTTPD_UNTRUSTED)) != 0;
}

static void
s_asker_destroy (void **item_p)
{
    s_asker_t *asker = (s_asker_t *) *item_p;
    if (asker) {
        free (asker->path);
        free (asker);
        *item_p = NULL;
    }
}

static void
s_question_destroy (s_question_t **question_p)
{
    s_question_t *question = *question_p;
    if (question) {
        json_decref (question->asked);
        free (question->content_type);
        free (question->body);
        free (question);
        *question_p = NULL;
    }
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
    stream->kind = REQUEST_STREAM;
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
                        "/api/tools, /api/stats, /api/audit and /api/events\n");
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

//  ---------------------------------------------------------------------
//  Questions

//  Gives question its answer (copied) and lets MHD serve it. Under the
//  lock.
static void
s_question_set_answer (s_question_t *question, unsigned int status, const char *content_type, const char *body,
                       size_t size)
{
    if (question->answered)
        return;
    question->answered = true;
    question->status = status;
    question->content_type = strdup (content_type);
    question->body = (char *) malloc (size? size: 1);
    assert (question->content_type && question->body);
    if (size)
        memcpy (question->body, body, size);
    question->size = size;
    MHD_resume_connection (question->connection);
}

//  A request's query parameters as they are gathered.
typedef struct {
    json_t *parameters;         //  name -> value
    const char *error;          //  the first thing wrong, or NULL
} s_gathering_t;

static enum MHD_Result
s_gather (void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size, const char *value,
          size_t value_size)
{
    (void) kind;
    s_gathering_t *gathering = (s_gathering_t *) cls;
    //  A name is a C string to jansson: one with a NUL in it is not text
    json_t *name = strlen (key) == key_size? json_stringn (key, key_size): NULL;
    json_t *text = json_stringn (value? value: "", value? value_size: 0);
    if (json_object_size (gathering->parameters) >= DSH_MONITOR_HTTPD_MAX_PARAMETERS)
        gathering->error = "too many query parameters";
    else
    if (!name || !text)
        gathering->error = "a query parameter is not UTF-8 text, or has a NUL in its name";
    else
    if (json_object_get (gathering->parameters, key))
        gathering->error = "a query parameter is given twice";
    else
        json_object_set (gathering->parameters, key, text);
    json_decref (name);
    json_decref (text);
    return gathering->error? MHD_NO: MHD_YES;
}

//  A request of an asked path: checked, then suspended until the loop
//  answers it.
static enum MHD_Result
s_ask (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, s_asker_t *asker, bool trusted,
       void **req_cls)
{
    char error [256] = "";
    s_gathering_t gathering = { .parameters = json_object () };
    MHD_get_connection_values_n (connection, MHD_GET_ARGUMENT_KIND, s_gather, &gathering);
    json_t *asked = NULL;
    if (gathering.error)
        snprintf (error, sizeof error, "%s", gathering.error);
    else
    if (!(asked = asker->check (gathering.parameters, error, sizeof error)) && !*error)
        snprintf (error, sizeof error, "the query is not one %s takes", asker->path);
    json_decref (gathering.parameters);
    if (!asked) {
        char *text = zsys_sprintf ("Bad Request: %s\n", error);
        enum MHD_Result result = s_reply (connection, MHD_HTTP_BAD_REQUEST, text);
        zstr_free (&text);
        return result;
    }
    pthread_mutex_lock (&self->lock);
    if (self->stopping || zlistx_size (self->questions) >= DSH_MONITOR_HTTPD_MAX_QUESTIONS) {
        pthread_mutex_unlock (&self->lock);
        json_decref (asked);
        return s_reply (connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                        "Service Unavailable: too many requests wait for the broker\n");
    }
    s_question_t *question = (s_question_t *) zmalloc (sizeof (s_question_t));
    assert (question);
    question->kind = REQUEST_QUESTION;
    question->connection = connection;
    question->id = ++self->last_question;
    question->path = asker->path;
    question->trusted = trusted;
    question->asked = asked;
    *req_cls = question;
    MHD_suspend_connection (connection);
    question->handle = zlistx_add_end (self->questions, question);
    if (self->untaken++ == 0) {
        uint64_t one = 1;
        if (write (self->event_fd, &one, sizeof one) < 0)
            zsys_warning ("dsh-monitor: cannot signal the question fd: %s", strerror (errno));
    }
    pthread_mutex_unlock (&self->lock);
    return MHD_YES;
}

//  MHD calls a question's request again once the loop's answer resumed it.
static enum MHD_Result
s_question_answer (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, s_question_t *question)
{
    pthread_mutex_lock (&self->lock);
    if (!question->answered) {
        //  Not ours to serve yet: it waits on
        MHD_suspend_connection (connection);
        pthread_mutex_unlock (&self->lock);
        return MHD_YES;
    }
    unsigned int status = question->status;
    struct MHD_Response *response = MHD_create_response_from_buffer (question->size, question->body,
                                                                     MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, question->content_type);
    pthread_mutex_unlock (&self->lock);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header (response, "X-Content-Type-Options", "nosniff");
    enum MHD_Result result = MHD_queue_response (connection, status, response);
    MHD_destroy_response (response);
    return result;
}

//  ---------------------------------------------------------------------
//  Requests

static enum MHD_Result
s_access (void *cls, struct MHD_Connection *connection, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    (void) version;
    (void) upload_data;
    (void) upload_data_size;
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) cls;
    //  Only a question is called again: its first call queued no response
    if (*req_cls && *(s_request_kind_t *) *req_cls == REQUEST_QUESTION)
        return s_question_answer (self, connection, (s_question_t *) *req_cls);
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
    pthread_mutex_lock (&self->lock);
    s_asker_t *asker = (s_asker_t *) zhashx_lookup (self->askers, url);
    pthread_mutex_unlock (&self->lock);
    if (asker)
        return s_ask (self, connection, asker, trusted, req_cls);
    return s_serve_doc (self, connection, url, trusted);
}

static void
s_completed (void *cls, struct MHD_Connection *connection, void **req_cls,
             enum MHD_RequestTerminationCode toe)
{
    (void) connection;
    (void) toe;
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) cls;
    if (*req_cls && *(s_request_kind_t *) *req_cls == REQUEST_QUESTION) {
        s_question_t *question = (s_question_t *) *req_cls;
        pthread_mutex_lock (&self->lock);
        zlistx_delete (self->questions, question->handle);
        if (!question->taken)
            self->untaken--;
        pthread_mutex_unlock (&self->lock);
        s_question_destroy (&question);
        *req_cls = NULL;
        return;
    }
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
    self->event_fd = -1;
    pthread_mutex_init (&self->lock, NULL);
    for (int trusted = 0; trusted < 2; trusted++) {
        self->docs [trusted] = zhashx_new ();
        zhashx_set_destructor (self->docs [trusted], s_doc_destroy);
    }
    self->streams = zlistx_new ();
    self->askers = zhashx_new ();
    zhashx_set_destructor (self->askers, s_asker_destroy);
    self->questions = zlistx_new ();
    self->event_fd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->event_fd < 0) {
        snprintf (error, error_size, "cannot make the question fd: %s", strerror (errno));
        dsh_monitor_httpd_destroy (&self);
        return NULL;
    }
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
        self->stopping = true;
        for (s_stream_t *stream = (s_stream_t *) zlistx_first (self->streams); stream;
             stream = (s_stream_t *) zlistx_next (self->streams))
            dsh_http_outq_break (&stream->out);
        const char *stopping = "Service Unavailable: the monitor is stopping\n";
        for (s_question_t *question = (s_question_t *) zlistx_first (self->questions); question;
             question = (s_question_t *) zlistx_next (self->questions))
            s_question_set_answer (question, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", stopping,
                                   strlen (stopping));
        pthread_mutex_unlock (&self->lock);
        //  Resumed connections are served by MHD's thread: give it a moment
        //  to send those answers (each leaves the list when it completes)
        //  before stopping it closes them unanswered
        for (int waited = 0; waited < 1000; waited += 5) {
            pthread_mutex_lock (&self->lock);
            size_t open = zlistx_size (self->questions);
            pthread_mutex_unlock (&self->lock);
            if (!open)
                break;
            zclock_sleep (5);
        }
        dsh_http_server_destroy (&self->server);
        zlistx_destroy (&self->streams);
        //  MHD completed every request it had; these it never had
        s_question_t *question;
        while (self->questions && (question = (s_question_t *) zlistx_detach (self->questions, NULL)))
            s_question_destroy (&question);
        zlistx_destroy (&self->questions);
        zhashx_destroy (&self->askers);
        if (self->event_fd >= 0)
            close (self->event_fd);
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

void
dsh_monitor_httpd_ask (dsh_monitor_httpd_t *self, const char *path, dsh_monitor_httpd_check_fn *check)
{
    assert (self);
    assert (path && check);
    s_asker_t *asker = (s_asker_t *) zmalloc (sizeof (s_asker_t));
    assert (asker);
    asker->path = strdup (path);
    asker->check = check;
    pthread_mutex_lock (&self->lock);
    //  A question holds its asker's path: an asker stays once set
    assert (!zhashx_lookup (self->askers, path));
    zhashx_insert (self->askers, path, asker);
    pthread_mutex_unlock (&self->lock);
}

int
dsh_monitor_httpd_fd (dsh_monitor_httpd_t *self)
{
    assert (self);
    return self->event_fd;
}

json_t *
dsh_monitor_httpd_recv (dsh_monitor_httpd_t *self, const char **path_p, uint64_t *id_p, bool *trusted_p)
{
    assert (self);
    assert (path_p && id_p && trusted_p);
    json_t *asked = NULL;
    pthread_mutex_lock (&self->lock);
    for (s_question_t *question = (s_question_t *) zlistx_first (self->questions); question && self->untaken;
         question = (s_question_t *) zlistx_next (self->questions))
        if (!question->taken) {
            question->taken = true;
            self->untaken--;
            asked = question->asked;
            question->asked = NULL;
            *path_p = question->path;
            *id_p = question->id;
            *trusted_p = question->trusted;
            break;
        }
    if (self->untaken == 0) {
        uint64_t count;
        if (read (self->event_fd, &count, sizeof count) < 0 && errno != EAGAIN)
            zsys_warning ("dsh-monitor: cannot clear the question fd: %s", strerror (errno));
    }
    pthread_mutex_unlock (&self->lock);
    return asked;
}

void
dsh_monitor_httpd_answer (dsh_monitor_httpd_t *self, uint64_t id, unsigned int status, const char *content_type,
                          const char *body, size_t size)
{
    assert (self);
    assert (content_type && (body || !size));
    pthread_mutex_lock (&self->lock);
    for (s_question_t *question = (s_question_t *) zlistx_first (self->questions); question;
         question = (s_question_t *) zlistx_next (self->questions))
        if (question->id == id) {
            if (question->taken)
                s_question_set_answer (question, status, content_type, body, size);
            break;
        }
    pthread_mutex_unlock (&self->lock);
}
