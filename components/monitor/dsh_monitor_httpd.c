/*  =========================================================================
    dsh_monitor_httpd - the monitor's HTTP face: published documents and
    one Server-Sent Events stream fanned out to every page

    Two threads meet here: libmicrohttpd's, which answers requests from
    the published documents and pulls each stream's queued bytes, and the
    monitor's loop, which publishes and broadcasts. One mutex guards the
    documents and the streams. A stream whose queue is empty suspends its
    connection from the content reader and is resumed when bytes arrive.
    A question suspends its connection under the lock, so that the loop's
    answer, which resumes it under the lock too, always comes after. An
    action's question gathers its body first, over MHD's calls with the
    uploaded bytes, and is asked at the last one.
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
#define NOT_AN_ACTOR            "only a request with the monitor's token, or from loopback to a monitor " \
                                "without one, may act"

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
    dsh_monitor_httpd_access_t access;
    dsh_monitor_httpd_check_fn *check;
} s_asker_t;

//  A request waiting for the loop's answer, from its headers to MHD's
//  completion callback.
typedef struct {
    s_request_kind_t kind;      //  REQUEST_QUESTION
    void *handle;               //  in httpd->questions, once asked
    struct MHD_Connection *connection;
    uint64_t id;
    s_asker_t *asker;
    bool trusted;
    const char *actor;          //  a token's name or "loopback"; NULL for a read
    bool uploading;             //  an action's body is coming in
    char *upload;               //  ... what came of it
    size_t upload_size;
    bool upload_too_large;
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
    dsh_monitor_tokens_t *tokens;   //  NULL: none
    //  Each token's cookie value: random, made at start
    char cookies [DSH_MONITOR_TOKENS_MAX][65];
    dsh_monitor_sessions_t *sessions;   //  the pages' CSRF tokens
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
        free (question->upload);
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

//  A 405 says which methods the path takes.
static enum MHD_Result
s_reply_allow (struct MHD_Connection *connection, unsigned int status, const char *text, const char *allow)
{
    struct MHD_Response *response = MHD_create_response_from_buffer (strlen (text), (void *) text,
                                                                     MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result result = MHD_queue_response (connection, status, response);
    MHD_destroy_response (response);
    return result;
}

static enum MHD_Result
s_reply (struct MHD_Connection *connection, unsigned int status, const char *text)
{
    return s_reply_allow (connection, status, text, "GET, HEAD");
}

//  "Forbidden: why", for a request that may not do what it asks.
static enum MHD_Result
s_forbid (struct MHD_Connection *connection, const char *why)
{
    char *text = zsys_sprintf ("Forbidden: %s\n", why);
    enum MHD_Result result = s_reply (connection, MHD_HTTP_FORBIDDEN, text);
    zstr_free (&text);
    return result;
}

//  The index of the token the request presented (as a bearer or a
//  token's session cookie), or -1; always -1 without tokens.
static int
s_token_index (dsh_monitor_httpd_t *self, struct MHD_Connection *connection)
{
    if (!self->tokens)
        return -1;
    const char *header = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (header && strncasecmp (header, "Bearer ", 7) == 0) {
        const char *given = header + 7;
        size_t size = strnlen (given, DSH_HTTP_TOKEN_MAX + 1);
        int index = size <= DSH_HTTP_TOKEN_MAX? dsh_monitor_tokens_match (self->tokens, given, size): -1;
        if (index >= 0)
            return index;
    }
    const char *cookie = MHD_lookup_connection_value (connection, MHD_COOKIE_KIND, COOKIE_NAME);
    int found = -1;
    for (size_t index = 0; cookie && index < dsh_monitor_tokens_size (self->tokens); index++)
        if (dsh_http_token_equal (cookie, strlen (cookie), self->cookies [index]))
            found = (int) index;
    return found;
}

//  Who the request acts as: the name of the token it presented; without
//  tokens, "loopback" for a loopback peer; else NULL.
static const char *
s_actor (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, int token)
{
    if (token >= 0)
        return dsh_monitor_tokens_name (self->tokens, (size_t) token);
    if (self->tokens)
        return NULL;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info (connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    struct sockaddr_storage peer = { 0 };
    if (!info || !info->client_addr)
        return NULL;
    if (info->client_addr->sa_family == AF_INET)
        memcpy (&peer, info->client_addr, sizeof (struct sockaddr_in));
    else
    if (info->client_addr->sa_family == AF_INET6)
        memcpy (&peer, info->client_addr, sizeof (struct sockaddr_in6));
    else
        return NULL;
    return dsh_http_addr_is_loopback (&peer)? DSH_MONITOR_LOOPBACK_ACTOR: NULL;
}

//  GET /?token=TOKEN: a browser trades the token for its session cookie,
//  and is sent to / so that the token leaves its address bar.
static enum MHD_Result
s_login (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, const char *given)
{
    size_t size = strnlen (given, DSH_HTTP_TOKEN_MAX + 1);
    int index = self->tokens && size <= DSH_HTTP_TOKEN_MAX? dsh_monitor_tokens_match (self->tokens, given, size): -1;
    if (index < 0)
        return s_reply (connection, MHD_HTTP_UNAUTHORIZED, "Unauthorized: that is not this monitor's token\n");
    struct MHD_Response *response = MHD_create_response_from_buffer (0, NULL, MHD_RESPMEM_PERSISTENT);
    char *cookie = zsys_sprintf (COOKIE_NAME "=%s; Path=/; HttpOnly; SameSite=Strict", self->cookies [index]);
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
                        "/api/tools, /api/stats, /api/audit, /api/events and the page's /api/session\n");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header (response, "X-Content-Type-Options", "nosniff");
    if (streq (url, "/")) {
        //  The page is self-contained: nothing from anywhere else runs in it
        MHD_add_response_header (response, "Content-Security-Policy",
                                 "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                 "connect-src 'self'; img-src data:; frame-ancestors 'none'");
        //  Not no-referrer: a browser sends "Origin: null" with that, and
        //  the page's actions are known by their origin
        MHD_add_response_header (response, "Referrer-Policy", "same-origin");
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

static s_question_t *
s_question_new (s_asker_t *asker, bool trusted, const char *actor, struct MHD_Connection *connection)
{
    s_question_t *question = (s_question_t *) zmalloc (sizeof (s_question_t));
    assert (question);
    question->kind = REQUEST_QUESTION;
    question->connection = connection;
    question->asker = asker;
    question->trusted = trusted;
    question->actor = actor;
    return question;
}

//  Asks the loop question, which what its check gave (asked, taken) makes
//  whole: suspended until the loop answers.
static enum MHD_Result
s_submit (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, s_question_t *question, json_t *asked,
          void **req_cls)
{
    pthread_mutex_lock (&self->lock);
    if (self->stopping || zlistx_size (self->questions) >= DSH_MONITOR_HTTPD_MAX_QUESTIONS) {
        pthread_mutex_unlock (&self->lock);
        json_decref (asked);
        if (*req_cls == question)
            *req_cls = NULL;
        s_question_destroy (&question);
        return s_reply (connection, MHD_HTTP_SERVICE_UNAVAILABLE,
                        "Service Unavailable: too many requests wait for the broker\n");
    }
    question->id = ++self->last_question;
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

static enum MHD_Result
s_too_large (struct MHD_Connection *connection)
{
    char *text = zsys_sprintf ("Content Too Large: an action's body is at most %d bytes\n",
                               DSH_MONITOR_HTTPD_MAX_BODY);
    enum MHD_Result result = s_reply (connection, MHD_HTTP_CONTENT_TOO_LARGE, text);
    zstr_free (&text);
    return result;
}

static enum MHD_Result
s_bad_request (struct MHD_Connection *connection, const char *error)
{
    char *text = zsys_sprintf ("Bad Request: %s\n", error);
    enum MHD_Result result = s_reply (connection, MHD_HTTP_BAD_REQUEST, text);
    zstr_free (&text);
    return result;
}

//  A read or a session's poll: its query parameters checked, then
//  suspended until the loop answers it.
static enum MHD_Result
s_ask (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, s_asker_t *asker, bool trusted,
       const char *actor, void **req_cls)
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
    if (!asked)
        return s_bad_request (connection, error);
    return s_submit (self, connection, s_question_new (asker, trusted, actor, connection), asked, req_cls);
}

//  An action, once its headers passed: its body comes next.
static enum MHD_Result
s_act (struct MHD_Connection *connection, s_asker_t *asker, bool trusted, const char *actor, void **req_cls)
{
    const char *length = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length && strtoull (length, NULL, 10) > DSH_MONITOR_HTTPD_MAX_BODY)
        return s_too_large (connection);
    s_question_t *question = s_question_new (asker, trusted, actor, connection);
    question->uploading = true;
    *req_cls = question;
    return MHD_YES;
}

//  MHD's calls with an action's body, then one without at its end: the
//  body, a JSON object, passes the check, and the question is asked.
static enum MHD_Result
s_upload (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, s_question_t *question,
          const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    if (*upload_data_size) {
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        if (question->upload_too_large || question->upload_size + size > DSH_MONITOR_HTTPD_MAX_BODY) {
            question->upload_too_large = true;
            return MHD_YES;
        }
        question->upload = (char *) realloc (question->upload, question->upload_size + size);
        assert (question->upload);
        memcpy (question->upload + question->upload_size, upload_data, size);
        question->upload_size += size;
        return MHD_YES;
    }
    question->uploading = false;
    if (question->upload_too_large)
        return s_too_large (connection);
    json_error_t parse_error;
    json_t *body = question->upload_size? json_loadb (question->upload, question->upload_size,
                                                      JSON_REJECT_DUPLICATES, &parse_error): NULL;
    char error [256] = "";
    json_t *asked = NULL;
    if (!json_is_object (body))
        snprintf (error, sizeof error, "the body is not a JSON object (each key once)%s%s",
                  body || !question->upload_size? "": ": ", body || !question->upload_size? "": parse_error.text);
    else
    if (!(asked = question->asker->check (body, error, sizeof error)) && !*error)
        snprintf (error, sizeof error, "the body is not one %s takes", question->asker->path);
    json_decref (body);
    if (!asked)
        return s_bad_request (connection, error);
    return s_submit (self, connection, question, asked, req_cls);
}

//  GET /api/session: an actor's page gets a CSRF token of its own.
static enum MHD_Result
s_open_session (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, const char *actor)
{
    if (!actor)
        return s_forbid (connection, NOT_AN_ACTOR);
    char csrf [65];
    pthread_mutex_lock (&self->lock);
    int rc = dsh_monitor_sessions_open (self->sessions, actor, zclock_mono (), csrf);
    pthread_mutex_unlock (&self->lock);
    if (rc)
        return s_reply (connection, MHD_HTTP_SERVICE_UNAVAILABLE, "Service Unavailable: no random bytes "
                        "for a session\n");
    json_t *doc = json_pack ("{s:s, s:s, s:s}", "csrf", csrf, "actor", actor, "header", DSH_MONITOR_CSRF_HEADER);
    char *text = json_dumps (doc, JSON_COMPACT);
    json_decref (doc);
    struct MHD_Response *response = MHD_create_response_from_buffer (strlen (text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header (response, "X-Content-Type-Options", "nosniff");
    enum MHD_Result result = MHD_queue_response (connection, MHD_HTTP_OK, response);
    MHD_destroy_response (response);
    return result;
}

//  Whether a session's poll or an action may go on: an actor, its
//  session's CSRF token and, for an action, the page's own origin; false
//  with why not.
static bool
s_may_act (dsh_monitor_httpd_t *self, struct MHD_Connection *connection, s_asker_t *asker, const char *actor,
           char *why, size_t why_size)
{
    if (!actor) {
        snprintf (why, why_size, NOT_AN_ACTOR);
        return false;
    }
    const char *host = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    const char *origin = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, "Origin");
    const char *referer = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, "Referer");
    if (asker->access == DSH_MONITOR_HTTPD_ASK_ACTION
    &&  !dsh_monitor_access_same_origin (host, origin, referer, why, why_size))
        return false;
    const char *csrf = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, DSH_MONITOR_CSRF_HEADER);
    pthread_mutex_lock (&self->lock);
    bool ok = dsh_monitor_sessions_check (self->sessions, csrf, actor, zclock_mono (), why, why_size);
    pthread_mutex_unlock (&self->lock);
    return ok;
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
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) cls;
    //  Only a question is called again: its first call queued no response
    if (*req_cls && *(s_request_kind_t *) *req_cls == REQUEST_QUESTION) {
        s_question_t *question = (s_question_t *) *req_cls;
        if (question->uploading)
            return s_upload (self, connection, question, upload_data, upload_data_size, req_cls);
        return s_question_answer (self, connection, question);
    }
    bool head = streq (method, MHD_HTTP_METHOD_HEAD);
    bool post = streq (method, MHD_HTTP_METHOD_POST);
    if (!streq (method, MHD_HTTP_METHOD_GET) && !head && !post)
        return s_reply (connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                        "Method Not Allowed: the monitor takes GET and HEAD, and POST for the page's actions\n");
    if (!dsh_http_origin_allowed (connection, self->loopback))
        return s_reply (connection, MHD_HTTP_FORBIDDEN, "Forbidden: Origin or Host not allowed\n");
    const char *given = MHD_lookup_connection_value (connection, MHD_GET_ARGUMENT_KIND, "token");
    if (given && streq (url, "/") && !post)
        return s_login (self, connection, given);
    //  MHD calls this first once the headers are in: the token is checked
    //  before anything else is done for the request, a body read least of all
    int token = s_token_index (self, connection);
    bool trusted = token >= 0;
    if (self->tokens && !trusted)
        return s_reply (connection, MHD_HTTP_UNAUTHORIZED,
                        "Unauthorized: this monitor needs its token. A browser opens /?token=TOKEN once; "
                        "a script sends \"Authorization: Bearer TOKEN\".\n");
    pthread_mutex_lock (&self->lock);
    s_asker_t *asker = (s_asker_t *) zhashx_lookup (self->askers, url);
    pthread_mutex_unlock (&self->lock);
    bool action = asker && asker->access == DSH_MONITOR_HTTPD_ASK_ACTION;
    if (post != action)
        return s_reply_allow (connection, MHD_HTTP_METHOD_NOT_ALLOWED, action?
                              "Method Not Allowed: an action is a POST\n":
                              "Method Not Allowed: only the page's actions take POST\n", action? "POST": "GET, HEAD");
    const char *actor = s_actor (self, connection, token);
    if (streq (url, DSH_MONITOR_HTTPD_SESSION) && !head)
        return s_open_session (self, connection, actor);
    if (streq (url, DSH_MONITOR_HTTPD_EVENTS) && !head)
        return s_open_stream (self, connection, trusted, req_cls);
    if (!asker)
        return s_serve_doc (self, connection, url, trusted);
    if (asker->access == DSH_MONITOR_HTTPD_ASK_READ)
        return s_ask (self, connection, asker, trusted, NULL, req_cls);
    char why [512];
    if (!s_may_act (self, connection, asker, actor, why, sizeof why))
        return s_forbid (connection, why);
    if (action)
        return s_act (connection, asker, trusted, actor, req_cls);
    return s_ask (self, connection, asker, trusted, actor, req_cls);
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
        //  An action refused before it was asked was never in the list
        if (question->handle) {
            pthread_mutex_lock (&self->lock);
            zlistx_delete (self->questions, question->handle);
            if (!question->taken)
                self->untaken--;
            pthread_mutex_unlock (&self->lock);
        }
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
dsh_monitor_httpd_new (const char *address, dsh_monitor_tokens_t **tokens_p, const dsh_http_limits_t *limits,
                       char *error, size_t error_size)
{
    assert (address);
    assert (limits);
    dsh_monitor_tokens_t *tokens = tokens_p? *tokens_p: NULL;
    if (tokens_p)
        *tokens_p = NULL;
    struct sockaddr_storage addr;
    socklen_t addr_size = 0;
    if (dsh_http_address (address, &addr, &addr_size, error, error_size)) {
        dsh_monitor_tokens_destroy (&tokens);
        return NULL;
    }
    bool loopback = dsh_http_addr_is_loopback (&addr);
    if (!tokens && !loopback) {
        snprintf (error, error_size, "serving on %s, beyond loopback, needs a bearer token (--token-file)",
                  address);
        return NULL;
    }
    size_t token_count = tokens? dsh_monitor_tokens_size (tokens): 0;
    unsigned char bytes [DSH_MONITOR_TOKENS_MAX][32];
    if (token_count && getrandom (bytes, token_count * 32, 0) != (ssize_t) (token_count * 32)) {
        snprintf (error, error_size, "cannot make a session secret: %s", strerror (errno));
        dsh_monitor_tokens_destroy (&tokens);
        return NULL;
    }
    dsh_monitor_httpd_t *self = (dsh_monitor_httpd_t *) zmalloc (sizeof (dsh_monitor_httpd_t));
    assert (self);
    for (size_t token = 0; token < token_count; token++)
        for (size_t index = 0; index < 32; index++)
            snprintf (self->cookies [token] + 2 * index, 3, "%02x", bytes [token][index]);
    self->tokens = tokens;
    self->sessions = dsh_monitor_sessions_new ();
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
        dsh_monitor_tokens_destroy (&self->tokens);
        dsh_monitor_sessions_destroy (&self->sessions);
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
dsh_monitor_httpd_ask (dsh_monitor_httpd_t *self, const char *path, dsh_monitor_httpd_access_t access,
                       dsh_monitor_httpd_check_fn *check)
{
    assert (self);
    assert (path && check);
    assert (!streq (path, DSH_MONITOR_HTTPD_EVENTS) && !streq (path, DSH_MONITOR_HTTPD_SESSION));
    s_asker_t *asker = (s_asker_t *) zmalloc (sizeof (s_asker_t));
    assert (asker);
    asker->path = strdup (path);
    asker->access = access;
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
dsh_monitor_httpd_recv (dsh_monitor_httpd_t *self, dsh_monitor_httpd_question_t *taken)
{
    assert (self);
    assert (taken);
    json_t *asked = NULL;
    pthread_mutex_lock (&self->lock);
    for (s_question_t *question = (s_question_t *) zlistx_first (self->questions); question && self->untaken;
         question = (s_question_t *) zlistx_next (self->questions))
        if (!question->taken) {
            question->taken = true;
            self->untaken--;
            asked = question->asked;
            question->asked = NULL;
            *taken = (dsh_monitor_httpd_question_t) { .path = question->asker->path, .id = question->id,
                                                      .trusted = question->trusted, .actor = question->actor };
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
