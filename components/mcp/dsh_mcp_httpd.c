/*  =========================================================================
    dsh_mcp_httpd - MCP's Streamable HTTP transport, server side

    Three threads meet here. libmicrohttpd's thread parses requests,
    queues what clients send as events and pulls what the core wrote out
    of each exchange's byte queue; the core's thread takes the events and
    appends to the queues; a housekeeping thread writes keep-alives and
    expires idle sessions. One mutex guards all shared state. An exchange
    whose queue is empty suspends its connection from the content reader
    and is resumed when bytes arrive, so waiting costs no thread.

    An exchange is one HTTP request from its headers to MHD's completion
    callback, which alone frees it: a session that ends only detaches its
    exchanges and ends their streams.
    =========================================================================
*/

#include "dsh_mcp_httpd.h"
#include "dsh_jsonrpc.h"
#include "dsh_json.h"
#include "dsh_http.h"
#include "dsh_http_outq.h"

#include <czmq.h>
#include <microhttpd.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>

#define PATH                    "/mcp"
#define SESSION_ID_MAX          128
//  What all sessions together may have waiting for the core
#define MAX_QUEUED_BYTES        (64 * 1024 * 1024)
#define MAX_CONNECTIONS         256
//  A connection that makes no progress while it is not suspended (a
//  client that stopped reading its stream) is closed after this long
#define CONNECTION_TIMEOUT_S    120
#define HOUSEKEEPING_TICK_MS    250
#define READER_BLOCK_SIZE       (16 * 1024)

//  The revisions this transport speaks (MCP-Protocol-Version).
static const char *s_versions [] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL };

typedef enum { KIND_NONE, KIND_POST_SSE, KIND_POST_JSON, KIND_GET } s_kind_t;

typedef struct _s_session_t s_session_t;

//  One HTTP request, from its headers to MHD's completion callback.
typedef struct {
    dsh_mcp_httpd_t *httpd;
    struct MHD_Connection *connection;
    char *session_id;           //  its Mcp-Session-Id, NULL if none
    bool accepts_sse;
    bool accepts_json;
    bool answered;              //  refused at its headers: the body is dropped
    char *body;
    size_t body_size;
    size_t body_capacity;
    bool too_large;
    //  Once it is an exchange (a stream or a JSON body for the core's answers)
    s_kind_t kind;
    s_session_t *session;       //  NULL once the session ended
    void *handle;               //  in httpd->exchanges
    json_t *waiting;            //  ids of its requests not answered yet
    json_t *responses;          //  answers gathered for a JSON body
    bool batch;
    dsh_http_outq_t out;        //  bytes for the client
    int64_t last_write;
} s_request_t;

struct _s_session_t {
    char *id;
    int64_t last_active;
    size_t exchanges;           //  open exchanges
    size_t backlog;             //  bytes queued on them, not yet sent
    s_request_t *get_stream;
};

//  What the core takes from dsh_mcp_httpd_recv.
typedef struct {
    char *session;
    json_t *message;            //  NULL: the session ended
    size_t bytes;               //  counted in queued_bytes
} s_event_t;

struct _dsh_mcp_httpd_t {
    dsh_http_server_t *server;
    char *token;
    bool loopback;
    int port;
    int event_fd;
    int idle_ms;
    int keepalive_ms;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t housekeeper;
    bool housekeeper_started;
    bool stopping;
    zhashx_t *sessions;         //  id -> s_session_t
    zlistx_t *exchanges;        //  s_request_t, not owned
    zlistx_t *events;           //  s_event_t
    size_t queued_bytes;
};

//  ---------------------------------------------------------------------
//  Events for the core (under the lock)

static void
s_event_push (dsh_mcp_httpd_t *self, const char *session, json_t *message, size_t bytes)
{
    s_event_t *event = (s_event_t *) zmalloc (sizeof (s_event_t));
    assert (event);
    event->session = strdup (session);
    event->message = message;
    event->bytes = bytes;
    self->queued_bytes += bytes;
    if (zlistx_size (self->events) == 0) {
        uint64_t one = 1;
        if (write (self->event_fd, &one, sizeof one) < 0)
            zsys_warning ("dsh-mcp: cannot signal the event fd: %s", strerror (errno));
    }
    zlistx_add_end (self->events, event);
}

static void
s_event_destroy (void **item_p)
{
    s_event_t *event = (s_event_t *) *item_p;
    if (event) {
        free (event->session);
        json_decref (event->message);
        free (event);
        *item_p = NULL;
    }
}

//  ---------------------------------------------------------------------
//  Exchanges (under the lock)

//  Drops the connection, and what was queued for it.
static void
s_out_break (s_request_t *request)
{
    if (request->session)
        request->session->backlog -= dsh_http_outq_pending (&request->out);
    dsh_http_outq_break (&request->out);
}

//  Queues bytes for the client; a client that lets them pile up past a
//  stream's or its session's backlog loses the stream. One message of any
//  size fits on a stream with nothing queued.
static void
s_out_append (s_request_t *request, const char *data, size_t size)
{
    if (request->out.broken || request->out.finished)
        return;
    size_t pending = dsh_http_outq_pending (&request->out);
    size_t session_backlog = request->session? request->session->backlog: 0;
    if (pending > DSH_MCP_HTTPD_MAX_BACKLOG || (pending && session_backlog > DSH_MCP_HTTPD_MAX_SESSION_BACKLOG)) {
        zsys_warning ("dsh-mcp: an HTTP client reads too slowly (%zu bytes waiting, %zu in its session): "
                      "its stream is closed", pending, session_backlog);
        s_out_break (request);
        return;
    }
    dsh_http_outq_append (&request->out, data, size);
    if (request->session)
        request->session->backlog += size;
    request->last_write = zclock_mono ();
}

//  One SSE event carrying message.
static void
s_out_event (s_request_t *request, const json_t *message)
{
    char *text = json_dumps (message, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return;
    char *event = zsys_sprintf ("event: message\ndata: %s\n\n", text);
    s_out_append (request, event, strlen (event));
    zstr_free (&event);
    free (text);
}

static void
s_out_finish (s_request_t *request)
{
    dsh_http_outq_finish (&request->out);
}

//  Ends a session: its streams end, its exchanges outlive it until MHD
//  completes them, and the core hears of it when tell_core.
static void
s_session_end (dsh_mcp_httpd_t *self, s_session_t *session, bool tell_core)
{
    for (s_request_t *request = (s_request_t *) zlistx_first (self->exchanges); request;
         request = (s_request_t *) zlistx_next (self->exchanges))
        if (request->session == session) {
            request->session = NULL;
            //  A JSON body cut short would not parse: close instead
            if (json_array_size (request->waiting) && request->kind == KIND_POST_JSON)
                s_out_break (request);
            else
                s_out_finish (request);
        }
    if (tell_core)
        s_event_push (self, session->id, NULL, 0);
    zhashx_delete (self->sessions, session->id);
}

static void
s_session_destroy (void **item_p)
{
    s_session_t *session = (s_session_t *) *item_p;
    if (session) {
        free (session->id);
        free (session);
        *item_p = NULL;
    }
}

//  The open exchange of session waiting for the answer to id.
static s_request_t *
s_exchange_for (dsh_mcp_httpd_t *self, s_session_t *session, const json_t *id, size_t *index_p)
{
    for (s_request_t *request = (s_request_t *) zlistx_first (self->exchanges); request;
         request = (s_request_t *) zlistx_next (self->exchanges))
        if (request->session == session && !request->out.finished && !request->out.broken)
            for (size_t index = 0; index < json_array_size (request->waiting); index++)
                if (json_equal (json_array_get (request->waiting, index), (json_t *) id)) {
                    if (index_p)
                        *index_p = index;
                    return request;
                }
    return NULL;
}

//  ---------------------------------------------------------------------
//  MHD: reading what the core wrote

static ssize_t
s_content_reader (void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    s_request_t *request = (s_request_t *) cls;
    dsh_mcp_httpd_t *self = request->httpd;
    pthread_mutex_lock (&self->lock);
    ssize_t size = dsh_http_outq_read (&request->out, buf, max);
    if (size > 0 && request->session)
        request->session->backlog -= (size_t) size;
    pthread_mutex_unlock (&self->lock);
    return size;
}

//  ---------------------------------------------------------------------
//  MHD: answers that need no core

static enum MHD_Result
s_reply (struct MHD_Connection *connection, unsigned int status, int code, const char *message)
{
    char *text = NULL;
    if (message) {
        json_t *body = dsh_jsonrpc_error (NULL, code, message);
        text = json_dumps (body, JSON_COMPACT);
        json_decref (body);
    }
    struct MHD_Response *response = MHD_create_response_from_buffer (text? strlen (text): 0, text,
                                                                     MHD_RESPMEM_MUST_FREE);
    if (text)
        MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header (response, MHD_HTTP_HEADER_ALLOW, "GET, POST, DELETE");
    enum MHD_Result result = MHD_queue_response (connection, status, response);
    MHD_destroy_response (response);
    return result;
}

//  ---------------------------------------------------------------------
//  Checks on a request's headers

static bool
s_authorized (dsh_mcp_httpd_t *self, struct MHD_Connection *connection)
{
    return !self->token || dsh_http_bearer_ok (connection, self->token);
}

//  Whether a list-valued header (Accept) names one of the media types.
static bool
s_accepts (const char *accept, const char *type, const char *family)
{
    return strcasestr (accept, type) || strcasestr (accept, family) || strstr (accept, "*/*");
}

//  The media type of Content-Type, without parameters, is application/json.
static bool
s_is_json_type (const char *content_type)
{
    if (!content_type)
        return false;
    while (*content_type == ' ')
        content_type++;
    size_t size = strcspn (content_type, "; \t");
    return size == 16 && strncasecmp (content_type, "application/json", 16) == 0;
}

static bool
s_valid_session_id (const char *id)
{
    size_t size = strlen (id);
    if (size == 0 || size > SESSION_ID_MAX)
        return false;
    for (size_t index = 0; index < size; index++)
        if (id [index] < 0x21 || id [index] > 0x7e)
            return false;
    return true;
}

//  First call for a request: everything its headers can decide.
static enum MHD_Result
s_on_headers (dsh_mcp_httpd_t *self, s_request_t *request, const char *url, const char *method)
{
    struct MHD_Connection *connection = request->connection;
    request->answered = true;
    if (strcmp (url, PATH))
        return s_reply (connection, MHD_HTTP_NOT_FOUND, -32000, "Not Found: MCP is served at " PATH);
    if (!dsh_http_origin_allowed (connection, self->loopback))
        return s_reply (connection, MHD_HTTP_FORBIDDEN, -32000, "Forbidden: Origin or Host not allowed");
    if (!s_authorized (self, connection))
        return s_reply (connection, MHD_HTTP_UNAUTHORIZED, -32000, "Unauthorized: a bearer token is required");
    bool post = streq (method, MHD_HTTP_METHOD_POST);
    bool get = streq (method, MHD_HTTP_METHOD_GET);
    bool delete = streq (method, MHD_HTTP_METHOD_DELETE);
    if (!post && !get && !delete)
        return s_reply (connection, MHD_HTTP_METHOD_NOT_ALLOWED, -32000, "Method Not Allowed");
    const char *version = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, "MCP-Protocol-Version");
    if (version) {
        size_t index = 0;
        while (s_versions [index] && strcmp (s_versions [index], version))
            index++;
        if (!s_versions [index])
            return s_reply (connection, MHD_HTTP_BAD_REQUEST, -32000,
                            "Bad Request: unsupported MCP-Protocol-Version (this server speaks "
                            "2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05)");
    }
    const char *session_id = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, "Mcp-Session-Id");
    if (session_id) {
        if (!s_valid_session_id (session_id))
            return s_reply (connection, MHD_HTTP_BAD_REQUEST, -32000, "Bad Request: invalid Mcp-Session-Id");
        pthread_mutex_lock (&self->lock);
        bool known = zhashx_lookup (self->sessions, session_id) != NULL;
        pthread_mutex_unlock (&self->lock);
        if (!known)
            return s_reply (connection, MHD_HTTP_NOT_FOUND, -32001, "Session not found");
        request->session_id = strdup (session_id);
    }
    else
    if (!post)
        return s_reply (connection, MHD_HTTP_BAD_REQUEST, -32000, "Bad Request: Mcp-Session-Id header is required");
    const char *accept = MHD_lookup_connection_value (connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    request->accepts_sse = accept && s_accepts (accept, "text/event-stream", "text/*");
    request->accepts_json = !accept || s_accepts (accept, "application/json", "application/*");
    if (get && accept && !request->accepts_sse)
        return s_reply (connection, MHD_HTTP_NOT_ACCEPTABLE, -32000,
                        "Not Acceptable: the GET stream is text/event-stream");
    if (post) {
        if (!request->accepts_sse && !request->accepts_json)
            return s_reply (connection, MHD_HTTP_NOT_ACCEPTABLE, -32000,
                            "Not Acceptable: answers are application/json or text/event-stream");
        const char *type = MHD_lookup_connection_value (connection, MHD_HEADER_KIND,
                                                        MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!s_is_json_type (type))
            return s_reply (connection, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, -32000,
                            "Unsupported Media Type: Content-Type must be application/json");
        const char *length = MHD_lookup_connection_value (connection, MHD_HEADER_KIND,
                                                          MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (length && strtoull (length, NULL, 10) > DSH_MCP_HTTPD_MAX_BODY)
            return s_reply (connection, MHD_HTTP_CONTENT_TOO_LARGE, -32000, "Content Too Large");
    }
    request->answered = false;
    return MHD_YES;
}

//  ---------------------------------------------------------------------
//  MHD: requests that reach the core

//  Starts the response that carries what the core writes to request.
static enum MHD_Result
s_stream (s_request_t *request, const char *new_session)
{
    struct MHD_Response *response = MHD_create_response_from_callback (MHD_SIZE_UNKNOWN, READER_BLOCK_SIZE,
                                                                       s_content_reader, request, NULL);
    MHD_add_response_header (response, MHD_HTTP_HEADER_CONTENT_TYPE,
                             request->kind == KIND_POST_JSON? "application/json": "text/event-stream");
    if (request->kind != KIND_POST_JSON)
        MHD_add_response_header (response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (new_session)
        MHD_add_response_header (response, "Mcp-Session-Id", new_session);
    enum MHD_Result result = MHD_queue_response (request->connection, MHD_HTTP_OK, response);
    MHD_destroy_response (response);
    return result;
}

//  Makes request an exchange of session (under the lock).
static void
s_exchange_open (dsh_mcp_httpd_t *self, s_request_t *request, s_session_t *session, s_kind_t kind)
{
    request->kind = kind;
    request->session = session;
    request->last_write = zclock_mono ();
    request->handle = zlistx_add_end (self->exchanges, request);
    session->exchanges++;
    session->last_active = zclock_mono ();
}

static enum MHD_Result
s_on_delete (dsh_mcp_httpd_t *self, s_request_t *request)
{
    pthread_mutex_lock (&self->lock);
    s_session_t *session = (s_session_t *) zhashx_lookup (self->sessions, request->session_id);
    if (session)
        s_session_end (self, session, true);
    pthread_mutex_unlock (&self->lock);
    if (!session)
        return s_reply (request->connection, MHD_HTTP_NOT_FOUND, -32001, "Session not found");
    return s_reply (request->connection, MHD_HTTP_OK, 0, NULL);
}

static enum MHD_Result
s_on_get (dsh_mcp_httpd_t *self, s_request_t *request)
{
    pthread_mutex_lock (&self->lock);
    s_session_t *session = (s_session_t *) zhashx_lookup (self->sessions, request->session_id);
    if (session) {
        //  A client reconnects before we notice its old stream died:
        //  the new stream wins, or the client could never get one back
        if (session->get_stream)
            s_out_finish (session->get_stream);
        s_exchange_open (self, request, session, KIND_GET);
        session->get_stream = request;
    }
    pthread_mutex_unlock (&self->lock);
    if (!session)
        return s_reply (request->connection, MHD_HTTP_NOT_FOUND, -32001, "Session not found");
    return s_stream (request, NULL);
}

static char *
s_new_session_id (void)
{
    unsigned char bytes [16];
    if (getrandom (bytes, sizeof bytes, 0) != (ssize_t) sizeof bytes)
        return NULL;
    char *id = (char *) zmalloc (2 * sizeof bytes + 1);
    assert (id);
    for (size_t index = 0; index < sizeof bytes; index++)
        snprintf (id + 2 * index, 3, "%02x", bytes [index]);
    return id;
}

//  The messages of a POST body, checked; NULL with an answer queued.
static json_t *
s_post_messages (s_request_t *request, enum MHD_Result *result)
{
    struct MHD_Connection *connection = request->connection;
    json_error_t error;
    json_t *root = dsh_json_parse (request->body? request->body: "", request->body_size, 0, &error);
    if (!root) {
        char *message = zsys_sprintf ("Parse error: %s", error.text);
        *result = s_reply (connection, MHD_HTTP_BAD_REQUEST, DSH_JSONRPC_PARSE_ERROR, message);
        zstr_free (&message);
        return NULL;
    }
    request->batch = json_is_array (root);
    json_t *messages = request->batch? root: json_pack ("[o]", root);
    const char *invalid = json_array_size (messages)? NULL: "Invalid Request: an empty batch";
    bool initialize = false;
    for (size_t index = 0; !invalid && index < json_array_size (messages); index++) {
        json_t *message = json_array_get (messages, index);
        json_t *id = json_object_get (message, "id");
        const char *method = json_string_value (json_object_get (message, "method"));
        if (!json_is_object (message))
            invalid = "Invalid Request: a message must be an object";
        else
        if (id && !json_is_string (id) && !json_is_integer (id) && (method || !json_is_null (id)))
            invalid = "Invalid Request: an id must be a string or an integer";
        else
        if (method && id && streq (method, "initialize"))
            initialize = true;
    }
    if (!invalid && initialize && json_array_size (messages) > 1)
        invalid = "Invalid Request: initialize must be sent alone";
    if (!invalid && !initialize && !request->session_id) {
        json_decref (messages);
        *result = s_reply (connection, MHD_HTTP_BAD_REQUEST, -32000,
                           "Bad Request: Mcp-Session-Id header is required");
        return NULL;
    }
    if (invalid) {
        json_decref (messages);
        *result = s_reply (connection, MHD_HTTP_BAD_REQUEST, DSH_JSONRPC_INVALID_REQUEST, invalid);
        return NULL;
    }
    return messages;
}

static bool
s_is_request (const json_t *message)
{
    return json_is_string (json_object_get (message, "method")) && json_object_get (message, "id");
}

//  Makes room for a new session by ending the one idle the longest, so
//  clients that open sessions and walk away cannot lock others out.
//  Returns whether there was one to end (under the lock).
static bool
s_evict_idlest (dsh_mcp_httpd_t *self)
{
    s_session_t *idlest = NULL;
    for (s_session_t *session = (s_session_t *) zhashx_first (self->sessions); session;
         session = (s_session_t *) zhashx_next (self->sessions))
        if (session->exchanges == 0 && (!idlest || session->last_active < idlest->last_active))
            idlest = session;
    if (idlest) {
        zsys_info ("dsh-mcp: HTTP session %.8s... ended to make room for a new one", idlest->id);
        s_session_end (self, idlest, true);
    }
    return idlest != NULL;
}

static enum MHD_Result
s_on_post (dsh_mcp_httpd_t *self, s_request_t *request)
{
    struct MHD_Connection *connection = request->connection;
    if (request->too_large)
        return s_reply (connection, MHD_HTTP_CONTENT_TOO_LARGE, -32000, "Content Too Large");
    enum MHD_Result result = MHD_NO;
    json_t *messages = s_post_messages (request, &result);
    if (!messages)
        return result;
    char *new_session = NULL;
    const char *refusal = NULL;
    unsigned int status = MHD_HTTP_OK;
    pthread_mutex_lock (&self->lock);
    s_session_t *session = NULL;
    if (request->session_id)
        session = (s_session_t *) zhashx_lookup (self->sessions, request->session_id);
    else
    if (zhashx_size (self->sessions) >= DSH_MCP_HTTPD_MAX_SESSIONS && !s_evict_idlest (self)) {
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        refusal = "Service Unavailable: too many sessions";
    }
    else
    if ((new_session = s_new_session_id ())) {
        session = (s_session_t *) zmalloc (sizeof (s_session_t));
        assert (session);
        session->id = strdup (new_session);
        session->last_active = zclock_mono ();
        zhashx_insert (self->sessions, session->id, session);
    }
    if (!refusal && !session) {
        status = request->session_id? MHD_HTTP_NOT_FOUND: MHD_HTTP_INTERNAL_SERVER_ERROR;
        refusal = request->session_id? "Session not found": "Internal Server Error: no randomness";
    }
    if (!refusal && self->queued_bytes > MAX_QUEUED_BYTES) {
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        refusal = "Service Unavailable: too many messages wait for the server";
    }
    bool has_requests = false;
    if (!refusal) {
        json_t *waiting = json_array ();
        size_t index;
        json_t *message;
        json_array_foreach (messages, index, message)
            if (s_is_request (message))
                json_array_append (waiting, json_object_get (message, "id"));
        has_requests = json_array_size (waiting) > 0;
        if (has_requests) {
            request->waiting = waiting;
            s_exchange_open (self, request, session, request->accepts_sse? KIND_POST_SSE: KIND_POST_JSON);
            if (request->kind == KIND_POST_JSON)
                request->responses = json_array ();
        }
        else {
            json_decref (waiting);
            session->last_active = zclock_mono ();
        }
        size_t count = json_array_size (messages);
        json_array_foreach (messages, index, message)
            s_event_push (self, session->id, json_incref (message), index + 1 == count? request->body_size: 0);
    }
    pthread_mutex_unlock (&self->lock);
    json_decref (messages);
    if (refusal)
        result = s_reply (connection, status, status == MHD_HTTP_NOT_FOUND? -32001: -32000, refusal);
    else
    if (has_requests)
        result = s_stream (request, new_session);
    else
        result = s_reply (connection, MHD_HTTP_ACCEPTED, 0, NULL);
    zstr_free (&new_session);
    return result;
}

static enum MHD_Result
s_access (void *cls, struct MHD_Connection *connection, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    (void) version;
    dsh_mcp_httpd_t *self = (dsh_mcp_httpd_t *) cls;
    s_request_t *request = (s_request_t *) *req_cls;
    if (!request) {
        request = (s_request_t *) zmalloc (sizeof (s_request_t));
        assert (request);
        request->httpd = self;
        request->connection = connection;
        dsh_http_outq_init (&request->out, connection);
        *req_cls = request;
        return s_on_headers (self, request, url, method);
    }
    if (*upload_data_size) {
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        if (request->answered || request->too_large)
            return MHD_YES;
        if (request->body_size + size > DSH_MCP_HTTPD_MAX_BODY) {
            request->too_large = true;
            zstr_free (&request->body);
            request->body_size = request->body_capacity = 0;
            return MHD_YES;
        }
        if (request->body_size + size > request->body_capacity) {
            //  Doubling: a body comes in many small pieces
            size_t capacity = request->body_capacity? request->body_capacity: 4096;
            while (capacity < request->body_size + size)
                capacity *= 2;
            request->body = (char *) realloc (request->body, capacity);
            assert (request->body);
            request->body_capacity = capacity;
        }
        memcpy (request->body + request->body_size, upload_data, size);
        request->body_size += size;
        return MHD_YES;
    }
    if (request->answered || request->kind != KIND_NONE)
        return MHD_YES;
    if (streq (method, MHD_HTTP_METHOD_POST))
        return s_on_post (self, request);
    if (streq (method, MHD_HTTP_METHOD_GET))
        return s_on_get (self, request);
    return s_on_delete (self, request);
}

//  MHD is done with a request: the client's unanswered requests are
//  cancelled for the core.
static void
s_completed (void *cls, struct MHD_Connection *connection, void **req_cls, enum MHD_RequestTerminationCode toe)
{
    (void) connection;
    (void) toe;
    dsh_mcp_httpd_t *self = (dsh_mcp_httpd_t *) cls;
    s_request_t *request = (s_request_t *) *req_cls;
    if (!request)
        return;
    pthread_mutex_lock (&self->lock);
    if (request->handle)
        zlistx_delete (self->exchanges, request->handle);
    s_session_t *session = request->session;
    if (session) {
        session->exchanges--;
        session->backlog -= dsh_http_outq_pending (&request->out);
        session->last_active = zclock_mono ();
        if (session->get_stream == request)
            session->get_stream = NULL;
        size_t index;
        json_t *id;
        json_array_foreach (request->waiting, index, id)
            if (!self->stopping)
                s_event_push (self, session->id,
                              dsh_jsonrpc_notification ("notifications/cancelled",
                                  json_pack ("{s:O, s:s}", "requestId", id,
                                             "reason", "the HTTP client closed the connection")), 0);
    }
    pthread_mutex_unlock (&self->lock);
    free (request->session_id);
    free (request->body);
    dsh_http_outq_release (&request->out);
    json_decref (request->waiting);
    json_decref (request->responses);
    free (request);
    *req_cls = NULL;
}

//  ---------------------------------------------------------------------
//  Housekeeping: keep-alives (which find clients that went away) and
//  idle sessions

static void *
s_housekeeper (void *args)
{
    dsh_mcp_httpd_t *self = (dsh_mcp_httpd_t *) args;
    pthread_mutex_lock (&self->lock);
    while (!self->stopping) {
        dsh_http_timedwait (&self->wake, &self->lock, HOUSEKEEPING_TICK_MS);
        if (self->stopping)
            break;
        int64_t now = zclock_mono ();
        for (s_request_t *request = (s_request_t *) zlistx_first (self->exchanges); request;
             request = (s_request_t *) zlistx_next (self->exchanges))
            //  A stream with bytes queued needs none, and must not have a
            //  keep-alive count against a large answer being read
            if (request->kind != KIND_POST_JSON && dsh_http_outq_pending (&request->out) == 0
                && now - request->last_write >= self->keepalive_ms)
                s_out_append (request, ": keepalive\n\n", 13);
        zlistx_t *expired = zlistx_new ();
        for (s_session_t *session = (s_session_t *) zhashx_first (self->sessions); session;
             session = (s_session_t *) zhashx_next (self->sessions))
            if (session->exchanges == 0 && now - session->last_active >= self->idle_ms)
                zlistx_add_end (expired, session);
        for (s_session_t *session = (s_session_t *) zlistx_first (expired); session;
             session = (s_session_t *) zlistx_next (expired)) {
            zsys_info ("dsh-mcp: HTTP session %.8s... expired after %d ms idle", session->id, self->idle_ms);
            s_session_end (self, session, true);
        }
        zlistx_destroy (&expired);
    }
    pthread_mutex_unlock (&self->lock);
    return NULL;
}

//  ---------------------------------------------------------------------
//  The core's side

dsh_mcp_httpd_t *
dsh_mcp_httpd_new (const char *address, const char *token, char *error, size_t error_size)
{
    const dsh_http_limits_t limits = { .per_address = DSH_MCP_HTTPD_PER_ADDRESS,
                                       .header_timeout_ms = DSH_HTTP_HEADER_TIMEOUT_MS };
    return dsh_mcp_httpd_new_limited (address, token, &limits, error, error_size);
}

dsh_mcp_httpd_t *
dsh_mcp_httpd_new_limited (const char *address, const char *token, const dsh_http_limits_t *limits,
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
        snprintf (error, error_size, "serving MCP over HTTP on %s, beyond loopback, needs a bearer token "
                  "(--http-token-file)", address);
        return NULL;
    }
    if (token && (!*token || strlen (token) > DSH_HTTP_TOKEN_MAX)) {
        snprintf (error, error_size, "the bearer token must have 1 to %d characters", DSH_HTTP_TOKEN_MAX);
        return NULL;
    }
    dsh_mcp_httpd_t *self = (dsh_mcp_httpd_t *) zmalloc (sizeof (dsh_mcp_httpd_t));
    assert (self);
    self->token = token? strdup (token): NULL;
    self->loopback = loopback;
    self->idle_ms = DSH_MCP_HTTPD_IDLE_MS;
    self->keepalive_ms = DSH_MCP_HTTPD_KEEPALIVE_MS;
    pthread_mutex_init (&self->lock, NULL);
    pthread_condattr_t condattr;
    pthread_condattr_init (&condattr);
    pthread_condattr_setclock (&condattr, CLOCK_MONOTONIC);
    pthread_cond_init (&self->wake, &condattr);
    pthread_condattr_destroy (&condattr);
    self->sessions = zhashx_new ();
    zhashx_set_destructor (self->sessions, s_session_destroy);
    self->exchanges = zlistx_new ();
    self->events = zlistx_new ();
    zlistx_set_destructor (self->events, s_event_destroy);
    self->event_fd = eventfd (0, EFD_NONBLOCK | EFD_CLOEXEC);
    dsh_http_limits_t server_limits = *limits;
    server_limits.connections = MAX_CONNECTIONS;
    server_limits.idle_timeout_s = CONNECTION_TIMEOUT_S;
    if (self->event_fd >= 0)
        self->server = dsh_http_server_new (&addr, "dsh-mcp", s_access, s_completed, self, &server_limits);
    if (!self->server) {
        snprintf (error, error_size, "cannot serve HTTP on %s: %s", address,
                  self->event_fd < 0? strerror (errno): "the address is in use or not ours");
        dsh_mcp_httpd_destroy (&self);
        return NULL;
    }
    self->port = dsh_http_server_port (self->server);
    if (pthread_create (&self->housekeeper, NULL, s_housekeeper, self)) {
        snprintf (error, error_size, "cannot start the HTTP housekeeping thread");
        dsh_mcp_httpd_destroy (&self);
        return NULL;
    }
    self->housekeeper_started = true;
    return self;
}

void
dsh_mcp_httpd_destroy (dsh_mcp_httpd_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_mcp_httpd_t *self = *self_p;
        pthread_mutex_lock (&self->lock);
        self->stopping = true;
        //  MHD must not be stopped with connections suspended; streams
        //  end, answers that will not come cut their exchange short
        for (s_request_t *request = (s_request_t *) zlistx_first (self->exchanges); request;
             request = (s_request_t *) zlistx_next (self->exchanges))
            if (json_array_size (request->waiting))
                s_out_break (request);
            else
                s_out_finish (request);
        pthread_cond_signal (&self->wake);
        pthread_mutex_unlock (&self->lock);
        if (self->housekeeper_started)
            pthread_join (self->housekeeper, NULL);
        dsh_http_server_destroy (&self->server);
        zlistx_destroy (&self->events);
        zlistx_destroy (&self->exchanges);
        zhashx_destroy (&self->sessions);
        if (self->event_fd >= 0)
            close (self->event_fd);
        pthread_cond_destroy (&self->wake);
        pthread_mutex_destroy (&self->lock);
        free (self->token);
        free (self);
        *self_p = NULL;
    }
}

int
dsh_mcp_httpd_port (dsh_mcp_httpd_t *self)
{
    assert (self);
    return self->port;
}

int
dsh_mcp_httpd_fd (dsh_mcp_httpd_t *self)
{
    assert (self);
    return self->event_fd;
}

json_t *
dsh_mcp_httpd_recv (dsh_mcp_httpd_t *self, char **session_p)
{
    assert (self);
    assert (session_p);
    *session_p = NULL;
    json_t *message = NULL;
    pthread_mutex_lock (&self->lock);
    s_event_t *event = (s_event_t *) zlistx_detach (self->events, NULL);
    if (event) {
        *session_p = event->session;
        message = event->message;
        self->queued_bytes -= event->bytes;
        free (event);
    }
    if (zlistx_size (self->events) == 0) {
        uint64_t count;
        if (read (self->event_fd, &count, sizeof count) < 0 && errno != EAGAIN)
            zsys_warning ("dsh-mcp: cannot clear the event fd: %s", strerror (errno));
    }
    pthread_mutex_unlock (&self->lock);
    return message;
}

//  An answer: to the exchange that carried its request.
static void
s_send_response (dsh_mcp_httpd_t *self, s_session_t *session, const json_t *message)
{
    size_t index = 0;
    s_request_t *request = s_exchange_for (self, session, json_object_get (message, "id"), &index);
    if (!request)
        return;                 //  its client went away
    json_array_remove (request->waiting, index);
    if (request->kind == KIND_POST_SSE)
        s_out_event (request, message);
    else
        json_array_append (request->responses, (json_t *) message);
    if (json_array_size (request->waiting) == 0) {
        if (request->kind == KIND_POST_JSON) {
            json_t *body = request->batch? json_incref (request->responses)
                                         : json_incref (json_array_get (request->responses, 0));
            char *text = json_dumps (body, JSON_COMPACT);
            json_decref (body);
            if (text)
                s_out_append (request, text, strlen (text));
            free (text);
        }
        s_out_finish (request);
    }
}

int
dsh_mcp_httpd_send (dsh_mcp_httpd_t *self, const char *session_id, const json_t *message,
                    const json_t *related_id)
{
    assert (self);
    assert (session_id);
    assert (message);
    pthread_mutex_lock (&self->lock);
    s_session_t *session = (s_session_t *) zhashx_lookup (self->sessions, session_id);
    if (session) {
        if (!json_object_get (message, "method"))
            s_send_response (self, session, message);
        else {
            s_request_t *request = related_id? s_exchange_for (self, session, related_id, NULL): NULL;
            if (!request || request->kind != KIND_POST_SSE)
                request = session->get_stream;
            if (request)
                s_out_event (request, message);
        }
    }
    pthread_mutex_unlock (&self->lock);
    return session? 0: -1;
}

void
dsh_mcp_httpd_set_timeouts (dsh_mcp_httpd_t *self, int idle_ms, int keepalive_ms)
{
    assert (self);
    pthread_mutex_lock (&self->lock);
    if (idle_ms > 0)
        self->idle_ms = idle_ms;
    if (keepalive_ms > 0)
        self->keepalive_ms = keepalive_ms;
    pthread_mutex_unlock (&self->lock);
}
