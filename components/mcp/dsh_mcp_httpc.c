/*  =========================================================================
    dsh_mcp_httpc - an MCP server over Streamable HTTP, seen as a child process

    One thread per session owns a libcurl multi handle and polls it with
    the session's own fds. Each line the bridge writes becomes one POST
    (a transfer); the answer is 202 (a notification or a response was
    taken), one JSON body (a message, or an array of them), or an SSE
    stream whose events each carry one message. After the bridge's
    notifications/initialized is taken, a GET opens the server's own event
    stream (405: the server offers none).

    Messages are passed on as the server wrote them, never re-encoded:
    a small scanner finds where a JSON value ends (to split arrays) and
    reads the top-level "id" and "method" (to know whether a POST's request
    was answered). Line breaks in a message can only be whitespace between
    tokens (JSON strings escape them), so they become spaces and each
    message is one line. A request whose POST ends without its answer
    (an HTTP error, a body that is not JSON, an answer over the size
    bound, a stream closed early) gets a JSON-RPC error from here, so no
    call waits on an answer that cannot come. Connection failures, a 404
    on the session and an HTTP error to a ping end the transport: the
    bridge sees end of file and restarts it, with a new session.

    A request's SSE stream that ends (or breaks) before its answer, after
    an event with an id, is resumed as the spec says: a GET with
    Last-Event-ID, after the stream's retry delay, as often as it takes
    (a 2025-11-25 server may close streams on purpose and have the client
    poll). A stream without event ids cannot be resumed: its request gets
    the error.
    =========================================================================
*/

#include "dsh_mcp_httpc.h"
#include "dsh_jsonrpc.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS      10000
//  A notification or a response is taken at once (202); a POST that is
//  not a request has this long
#define NOTICE_TIMEOUT_MS       30000
#define DELETE_TIMEOUT_MS       1000
//  A GET stream the server ended is opened again after this
#define GET_REOPEN_MS           1000
//  How long to wait before resuming a stream that named no retry delay,
//  the longest delay taken from a server, and how often one request's
//  stream is resumed at most
#define RESUME_DELAY_MS         1000
#define MAX_RESUME_DELAY_MS     60000
#define MAX_RESUMES             1000
#define MAX_EVENT_ID            1024
#define POLL_TICK_MS            1000
//  How much of an error body goes into a log line
#define SNIPPET_BYTES           200
#define MAX_SESSION_ID          1024

typedef struct {
    char *data;
    size_t size;
    size_t capacity;
} s_buffer_t;

typedef enum {
    BODY_UNKNOWN,               //  no body byte seen yet
    BODY_SSE,
    BODY_JSON,
    BODY_OTHER                  //  an error page or anything else: its start is kept for the log
} s_body_t;

//  One HTTP request to the server, from its start to its end.
typedef struct {
    dsh_mcp_httpc_t *owner;
    CURL *easy;
    const char *verb;
    struct curl_slist *headers;
    char *message;              //  POST: the JSON-RPC message sent
    char *request_id;           //  POST of a request: its id as JSON text, else NULL
    bool initialize;            //  POST of initialize: the session id and version come back
    bool initialized_notice;    //  POST of notifications/initialized: the GET stream may open
    bool ping;                  //  POST of a ping: an HTTP error means the session is lost
    bool with_session;
    bool answered;              //  the request's response was passed on
    bool too_big;
    s_body_t body;
    s_buffer_t content;         //  JSON or other body; SSE: the line in progress
    s_buffer_t data;            //  SSE: the data of the event in progress
    bool has_data;
    bool skipping_line;         //  SSE: inside an overlong line
    bool event_dropped;         //  SSE: the event in progress is overlong
    bool event_foreign;         //  SSE: the event in progress is not a message
    char *last_event_id;        //  SSE: the last event id the server gave, or NULL
    int retry_ms;               //  SSE: the server's reconnection delay, or -1
    size_t resumes;             //  how many streams before this one carried the request
    int64_t start_at;           //  a resumption waits in the list until then
    bool started;               //  added to the multi handle
    char error [CURL_ERROR_SIZE];
} s_transfer_t;

struct _dsh_mcp_httpc_t {
    char *url;
    zlistx_t *headers;          //  the user's extra headers
    size_t max_message;
    pthread_t thread;
    bool thread_started;
    CURLM *multi;
    int input_fd;               //  the bridge's lines for the server
    int output_fd;              //  lines for the bridge; -1 once closed
    int log_fd;
    dsh_jsonrpc_t *lines;       //  reads input_fd
    s_buffer_t output;          //  bytes for output_fd, from output_start
    size_t output_start;
    zlistx_t *transfers;        //  s_transfer_t
    s_transfer_t *get;          //  the GET stream, or NULL
    char *session_id;           //  set by the thread, under session_lock
    pthread_mutex_t session_lock;   //  for dsh_mcp_httpc_session_id's readers
    char *protocol_version;
    char *get_last_event_id;    //  where the GET stream is taken up again
    int64_t get_at;             //  when to open the GET stream; 0: not now
    bool told_no_get;
    bool ending;                //  the session is lost: flush, then end of file
    atomic_bool stopping;
};

//  ---------------------------------------------------------------------
//  Buffers and logging

static void
s_buffer_append (s_buffer_t *buffer, const char *data, size_t size)
{
    if (size == 0)
        return;
    if (buffer->size + size > buffer->capacity) {
        size_t capacity = buffer->capacity? buffer->capacity: 4096;
        while (capacity < buffer->size + size)
            capacity *= 2;
        buffer->data = (char *) realloc (buffer->data, capacity);
        assert (buffer->data);
        buffer->capacity = capacity;
    }
    memcpy (buffer->data + buffer->size, data, size);
    buffer->size += size;
}

static void
s_buffer_free (s_buffer_t *buffer)
{
    free (buffer->data);
    *buffer = (s_buffer_t) { NULL, 0, 0 };
}

//  text with every byte outside printable ASCII made '?', for log lines
//  and error messages (a server's error page may be anything).
static void
s_printable (char *text)
{
    for (; *text; text++)
        if ((unsigned char) *text < 0x20 || (unsigned char) *text > 0x7e)
            *text = '?';
}

static void
s_log (dsh_mcp_httpc_t *self, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

//  One line on the log fd. Logging is best effort: a full pipe drops it.
static void
s_log (dsh_mcp_httpc_t *self, const char *format, ...)
{
    char line [1024];
    va_list args;
    va_start (args, format);
    vsnprintf (line, sizeof line - 1, format, args);
    va_end (args);
    s_printable (line);
    strcat (line, "\n");
    if (send (self->log_fd, line, strlen (line), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return;
}

//  Queues one message for the bridge as one line.
static void
s_emit (dsh_mcp_httpc_t *self, const char *message, size_t size)
{
    if (self->output_fd < 0)
        return;
    size_t at = self->output.size;
    s_buffer_append (&self->output, message, size);
    for (char *cursor = self->output.data + at; cursor < self->output.data + self->output.size; cursor++)
        if (*cursor == '\n' || *cursor == '\r')
            *cursor = ' ';
    s_buffer_append (&self->output, "\n", 1);
}

static void
s_flush (dsh_mcp_httpc_t *self)
{
    while (self->output_fd >= 0 && self->output_start < self->output.size) {
        ssize_t sent = send (self->output_fd, self->output.data + self->output_start,
                             self->output.size - self->output_start, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (sent <= 0) {
            //  The bridge is gone; what it did not read is moot
            self->output_start = self->output.size;
            break;
        }
        self->output_start += (size_t) sent;
    }
    if (self->output_start == self->output.size)
        self->output_start = self->output.size = 0;
}

//  ---------------------------------------------------------------------
//  Where JSON values end: enough to frame and route messages, not to
//  check them (the bridge parses every line it reads)

static const char *
s_json_space (const char *cursor, const char *end)
{
    while (cursor < end && (*cursor == ' ' || *cursor == '\t' || *cursor == '\n' || *cursor == '\r'))
        cursor++;
    return cursor;
}

//  cursor is at a '"'; returns the byte after the closing quote, or NULL.
static const char *
s_json_skip_string (const char *cursor, const char *end)
{
    for (cursor++; cursor < end; cursor++) {
        if (*cursor == '\\')
            cursor++;
        else
        if (*cursor == '"')
            return cursor + 1;
    }
    return NULL;
}

//  The byte after the JSON value at cursor, or NULL if it does not end.
static const char *
s_json_skip_value (const char *cursor, const char *end)
{
    cursor = s_json_space (cursor, end);
    if (cursor == end)
        return NULL;
    if (*cursor == '"')
        return s_json_skip_string (cursor, end);
    if (*cursor == '{' || *cursor == '[') {
        size_t depth = 0;
        while (cursor < end) {
            if (*cursor == '"') {
                cursor = s_json_skip_string (cursor, end);
                if (!cursor)
                    return NULL;
                continue;
            }
            if (*cursor == '{' || *cursor == '[')
                depth++;
            else
            if ((*cursor == '}' || *cursor == ']') && --depth == 0)
                return cursor + 1;
            cursor++;
        }
        return NULL;
    }
    const char *start = cursor;
    while (cursor < end && !memchr (",:{}[]\" \t\r\n", *cursor, 12))
        cursor++;
    return cursor > start? cursor: NULL;
}

//  Finds the value of key among the top-level members of the object at
//  cursor; true with its span in value and value_end.
static bool
s_json_member (const char *cursor, const char *end, const char *key,
               const char **value, const char **value_end)
{
    size_t key_size = strlen (key);
    cursor = s_json_space (cursor, end);
    if (cursor == end || *cursor != '{')
        return false;
    cursor++;
    while (true) {
        cursor = s_json_space (cursor, end);
        if (cursor == end || *cursor != '"')
            return false;
        const char *name = cursor;
        cursor = s_json_skip_string (cursor, end);
        if (!cursor)
            return false;
        bool match = (size_t) (cursor - name) == key_size + 2 && memcmp (name + 1, key, key_size) == 0;
        cursor = s_json_space (cursor, end);
        if (cursor == end || *cursor != ':')
            return false;
        const char *start = s_json_space (cursor + 1, end);
        cursor = s_json_skip_value (start, end);
        if (!cursor)
            return false;
        if (match) {
            *value = start;
            *value_end = cursor;
            return true;
        }
        cursor = s_json_space (cursor, end);
        if (cursor == end || *cursor != ',')
            return false;
        cursor++;
    }
}

static bool
s_span_is (const char *span, const char *span_end, const char *text)
{
    return (size_t) (span_end - span) == strlen (text) && memcmp (span, text, strlen (text)) == 0;
}

//  ---------------------------------------------------------------------
//  Messages from the server

//  The answer to initialize names the negotiated revision, which every
//  later HTTP request carries.
static void
s_note_version (dsh_mcp_httpc_t *self, const char *message, size_t size)
{
    json_t *answer = json_loadb (message, size, 0, NULL);
    const char *version = json_string_value (json_object_get (json_object_get (answer, "result"),
                                                              "protocolVersion"));
    bool token = version && *version && strlen (version) < 64;
    for (const char *cursor = version; token && *cursor; cursor++)
        token = (unsigned char) *cursor > 0x20 && (unsigned char) *cursor < 0x7f;
    if (token) {
        zstr_free (&self->protocol_version);
        self->protocol_version = strdup (version);
    }
    json_decref (answer);
}

//  Passes on one message (a JSON object) that came with transfer.
static void
s_pass_message (dsh_mcp_httpc_t *self, s_transfer_t *transfer, const char *begin, const char *end)
{
    const char *id, *id_end, *method, *method_end;
    if (transfer->request_id
    && s_json_member (begin, end, "id", &id, &id_end)
    && !s_json_member (begin, end, "method", &method, &method_end)
    && s_span_is (id, id_end, transfer->request_id)) {
        transfer->answered = true;
        if (transfer->initialize)
            s_note_version (self, begin, (size_t) (end - begin));
    }
    s_emit (self, begin, (size_t) (end - begin));
}

//  Passes on the messages of one JSON text: an object, or an array of them
//  (a 2025-03-26 batch). Returns 0, or -1 if the text is not that.
static int
s_pass_text (dsh_mcp_httpc_t *self, s_transfer_t *transfer, const char *text, size_t size)
{
    const char *end = text + size;
    const char *cursor = s_json_space (text, end);
    if (cursor < end && *cursor == '{') {
        const char *after = s_json_skip_value (cursor, end);
        if (!after || s_json_space (after, end) != end)
            return -1;
        s_pass_message (self, transfer, cursor, after);
        return 0;
    }
    if (cursor == end || *cursor != '[')
        return -1;
    const char *after = s_json_skip_value (cursor, end);
    if (!after || s_json_space (after, end) != end)
        return -1;
    cursor = s_json_space (cursor + 1, end);
    while (*cursor != ']') {
        const char *element_end = s_json_skip_value (cursor, end);
        if (!element_end || *cursor != '{')
            return -1;
        s_pass_message (self, transfer, cursor, element_end);
        cursor = s_json_space (element_end, end);
        if (*cursor == ',')
            cursor = s_json_space (cursor + 1, end);
        else
        if (*cursor != ']')
            return -1;
    }
    return 0;
}

static void
s_answer_error (s_transfer_t *transfer, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

//  Answers the transfer's request with a JSON-RPC error if nothing
//  answered it: its caller learns why now instead of at its deadline.
static void
s_answer_error (s_transfer_t *transfer, const char *format, ...)
{
    if (!transfer->request_id || transfer->answered)
        return;
    char text [512];
    va_list args;
    va_start (args, format);
    vsnprintf (text, sizeof text, format, args);
    va_end (args);
    s_printable (text);
    json_t *string = json_string (text);
    char *quoted = json_dumps (string, JSON_ENCODE_ANY);
    char *line = zsys_sprintf ("{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":%d,\"message\":%s}}",
                               transfer->request_id, DSH_JSONRPC_INTERNAL_ERROR, quoted);
    s_emit (transfer->owner, line, strlen (line));
    zstr_free (&line);
    free (quoted);
    json_decref (string);
    transfer->answered = true;
}

//  ---------------------------------------------------------------------
//  Server-sent events (the WHATWG event stream format)

static void
s_sse_dispatch (dsh_mcp_httpc_t *self, s_transfer_t *transfer)
{
    if (transfer->event_dropped)
        s_log (self, "%s %s: dropped an event larger than %zu bytes", transfer->verb, self->url,
               self->max_message);
    else
    if (transfer->has_data && !transfer->event_foreign && transfer->data.size > 0
    && s_json_space (transfer->data.data, transfer->data.data + transfer->data.size)
       < transfer->data.data + transfer->data.size
    && s_pass_text (self, transfer, transfer->data.data, transfer->data.size))
        s_log (self, "%s %s: an event that is not a JSON-RPC message; ignored", transfer->verb, self->url);
    //  An event without data (a 2025-11-25 priming event) carries nothing
    transfer->data.size = 0;
    transfer->has_data = transfer->event_dropped = transfer->event_foreign = false;
}

static void
s_sse_line (dsh_mcp_httpc_t *self, s_transfer_t *transfer, const char *line, size_t size)
{
    if (size > 0 && line [size - 1] == '\r')
        size--;
    if (size == 0) {
        s_sse_dispatch (self, transfer);
        return;
    }
    if (line [0] == ':')
        return;                 //  a comment: keep-alive
    const char *colon = (const char *) memchr (line, ':', size);
    size_t field_size = colon? (size_t) (colon - line): size;
    const char *value = colon? colon + 1: line + size;
    if (value < line + size && *value == ' ')
        value++;
    size_t value_size = (size_t) (line + size - value);
    if (field_size == 4 && memcmp (line, "data", 4) == 0) {
        if (transfer->event_dropped)
            return;
        if (transfer->data.size + value_size + 1 > self->max_message) {
            transfer->event_dropped = true;
            transfer->data.size = 0;
            return;
        }
        if (transfer->has_data)
            s_buffer_append (&transfer->data, "\n", 1);
        s_buffer_append (&transfer->data, value, value_size);
        transfer->has_data = true;
    }
    else
    if (field_size == 5 && memcmp (line, "event", 5) == 0)
        transfer->event_foreign = value_size > 0 && !(value_size == 7 && memcmp (value, "message", 7) == 0);
    else
    if (field_size == 2 && memcmp (line, "id", 2) == 0) {
        //  It goes into a header: visible ASCII only
        bool usable = value_size <= MAX_EVENT_ID;
        for (size_t index = 0; usable && index < value_size; index++)
            usable = (unsigned char) value [index] > 0x20 && (unsigned char) value [index] < 0x7f;
        if (usable) {
            zstr_free (&transfer->last_event_id);
            if (value_size > 0)
                transfer->last_event_id = strndup (value, value_size);
        }
    }
    else
    if (field_size == 5 && memcmp (line, "retry", 5) == 0 && value_size > 0 && value_size < 10) {
        bool digits = true;
        for (size_t index = 0; digits && index < value_size; index++)
            digits = isdigit ((unsigned char) value [index]);
        if (digits) {
            //  The line is not terminated: what lies past it in the buffer
            //  is an older, longer line's
            char text [10];
            memcpy (text, value, value_size);
            text [value_size] = 0;
            long delay = strtol (text, NULL, 10);
            transfer->retry_ms = delay > MAX_RESUME_DELAY_MS? MAX_RESUME_DELAY_MS: (int) delay;
        }
    }
}

//  Cuts the stream into lines; the line in progress waits in content.
static void
s_sse_feed (dsh_mcp_httpc_t *self, s_transfer_t *transfer, const char *data, size_t size)
{
    const char *end = data + size;
    while (data < end) {
        const char *newline = (const char *) memchr (data, '\n', (size_t) (end - data));
        const char *stop = newline? newline: end;
        if (!transfer->skipping_line) {
            if (transfer->content.size + (size_t) (stop - data) > self->max_message) {
                transfer->skipping_line = true;
                transfer->event_dropped = true;
                transfer->content.size = 0;
            }
            else
                s_buffer_append (&transfer->content, data, (size_t) (stop - data));
        }
        if (!newline)
            break;
        if (!transfer->skipping_line)
            s_sse_line (self, transfer, transfer->content.data? transfer->content.data: "",
                        transfer->content.size);
        transfer->skipping_line = false;
        transfer->content.size = 0;
        data = newline + 1;
    }
}

//  ---------------------------------------------------------------------
//  Transfers

static size_t
s_on_header (char *data, size_t size, size_t count, void *arg)
{
    s_transfer_t *transfer = (s_transfer_t *) arg;
    dsh_mcp_httpc_t *self = transfer->owner;
    size_t bytes = size * count;
    const char *name = "mcp-session-id:";
    if (transfer->initialize && bytes > strlen (name) && strncasecmp (data, name, strlen (name)) == 0) {
        const char *value = s_json_space (data + strlen (name), data + bytes);
        const char *end = data + bytes;
        while (end > value && (end [-1] == '\r' || end [-1] == '\n' || end [-1] == ' ' || end [-1] == '\t'))
            end--;
        bool visible = end > value && (size_t) (end - value) <= MAX_SESSION_ID;
        for (const char *cursor = value; visible && cursor < end; cursor++)
            visible = (unsigned char) *cursor > 0x20 && (unsigned char) *cursor < 0x7f;
        if (visible) {
            pthread_mutex_lock (&self->session_lock);
            zstr_free (&self->session_id);
            self->session_id = strndup (value, (size_t) (end - value));
            pthread_mutex_unlock (&self->session_lock);
        }
        else
            s_log (self, "POST %s: an Mcp-Session-Id that is not visible ASCII; ignored", self->url);
    }
    return bytes;
}

static size_t
s_on_body (char *data, size_t size, size_t count, void *arg)
{
    s_transfer_t *transfer = (s_transfer_t *) arg;
    dsh_mcp_httpc_t *self = transfer->owner;
    size_t bytes = size * count;
    if (transfer->body == BODY_UNKNOWN) {
        long status = 0;
        char *type = NULL;
        curl_easy_getinfo (transfer->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo (transfer->easy, CURLINFO_CONTENT_TYPE, &type);
        bool success = status >= 200 && status < 300;
        if (success && type && strncasecmp (type, "text/event-stream", 17) == 0)
            transfer->body = BODY_SSE;
        else
        if (success && type && strncasecmp (type, "application/json", 16) == 0)
            transfer->body = BODY_JSON;
        else
            transfer->body = BODY_OTHER;
    }
    if (transfer->body == BODY_SSE)
        s_sse_feed (self, transfer, data, bytes);
    else
    if (transfer->body == BODY_JSON) {
        if (transfer->content.size + bytes > self->max_message) {
            transfer->too_big = true;
            return 0;           //  ends the transfer with CURLE_WRITE_ERROR
        }
        s_buffer_append (&transfer->content, data, bytes);
    }
    else
    if (transfer->content.size < SNIPPET_BYTES)
        s_buffer_append (&transfer->content, data,
                         bytes < SNIPPET_BYTES - transfer->content.size? bytes: SNIPPET_BYTES - transfer->content.size);
    return bytes;
}

//  A transfer with the headers every request carries; the caller adds
//  it to the multi handle. NULL (logged) if libcurl cannot make one.
static s_transfer_t *
s_transfer_new (dsh_mcp_httpc_t *self, const char *verb, const char *accept, bool initialize)
{
    s_transfer_t *transfer = (s_transfer_t *) zmalloc (sizeof (s_transfer_t));
    assert (transfer);
    transfer->owner = self;
    transfer->verb = verb;
    transfer->initialize = initialize;
    transfer->retry_ms = -1;
    transfer->easy = curl_easy_init ();
    if (!transfer->easy) {
        s_log (self, "%s %s: libcurl cannot make a request", verb, self->url);
        free (transfer);
        return NULL;
    }
    CURL *easy = transfer->easy;
    curl_easy_setopt (easy, CURLOPT_URL, self->url);
    curl_easy_setopt (easy, CURLOPT_PRIVATE, transfer);
    curl_easy_setopt (easy, CURLOPT_ERRORBUFFER, transfer->error);
    curl_easy_setopt (easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt (easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt (easy, CURLOPT_CONNECTTIMEOUT_MS, (long) CONNECT_TIMEOUT_MS);
    //  A stream may be quiet for long; keep-alive probes find a dead peer
    curl_easy_setopt (easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt (easy, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt (easy, CURLOPT_HEADERDATA, transfer);
    curl_easy_setopt (easy, CURLOPT_WRITEFUNCTION, s_on_body);
    curl_easy_setopt (easy, CURLOPT_WRITEDATA, transfer);

    char *header = zsys_sprintf ("Accept: %s", accept);
    transfer->headers = curl_slist_append (transfer->headers, header);
    zstr_free (&header);
    //  No "Expect: 100-continue" round trip before a large POST
    transfer->headers = curl_slist_append (transfer->headers, "Expect:");
    if (self->session_id) {
        header = zsys_sprintf ("Mcp-Session-Id: %s", self->session_id);
        transfer->headers = curl_slist_append (transfer->headers, header);
        zstr_free (&header);
        transfer->with_session = true;
    }
    if (self->protocol_version && !initialize) {
        header = zsys_sprintf ("MCP-Protocol-Version: %s", self->protocol_version);
        transfer->headers = curl_slist_append (transfer->headers, header);
        zstr_free (&header);
    }
    for (const char *extra = (const char *) zlistx_first (self->headers); extra;
         extra = (const char *) zlistx_next (self->headers))
        transfer->headers = curl_slist_append (transfer->headers, extra);
    curl_easy_setopt (easy, CURLOPT_HTTPHEADER, transfer->headers);
    return transfer;
}

static void
s_transfer_start (dsh_mcp_httpc_t *self, s_transfer_t *transfer)
{
    zlistx_add_end (self->transfers, transfer);
    curl_multi_add_handle (self->multi, transfer->easy);
    transfer->started = true;
}

//  Takes the transfer out of the multi handle and the list, and frees it.
static void
s_transfer_destroy (dsh_mcp_httpc_t *self, s_transfer_t *transfer)
{
    void *handle = zlistx_find (self->transfers, transfer);
    if (handle)
        zlistx_detach (self->transfers, handle);
    if (self->get == transfer)
        self->get = NULL;
    if (transfer->started)
        curl_multi_remove_handle (self->multi, transfer->easy);
    curl_easy_cleanup (transfer->easy);
    curl_slist_free_all (transfer->headers);
    zstr_free (&transfer->message);
    zstr_free (&transfer->request_id);
    zstr_free (&transfer->last_event_id);
    s_buffer_free (&transfer->content);
    s_buffer_free (&transfer->data);
    free (transfer);
}

static void
s_end (dsh_mcp_httpc_t *self, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

//  The session is lost: once the bridge has every line, it reads end of
//  file.
static void
s_end (dsh_mcp_httpc_t *self, const char *format, ...)
{
    if (self->ending)
        return;
    char reason [512];
    va_list args;
    va_start (args, format);
    vsnprintf (reason, sizeof reason, format, args);
    va_end (args);
    s_log (self, "%s", reason);
    self->ending = true;
}

//  POSTs one line the bridge wrote.
static void
s_post (dsh_mcp_httpc_t *self, char **line_p)
{
    char *line = *line_p;
    *line_p = NULL;
    const char *end = line + strlen (line);
    const char *method = NULL, *method_end = NULL, *id, *id_end;
    bool has_method = s_json_member (line, end, "method", &method, &method_end);
    bool has_id = s_json_member (line, end, "id", &id, &id_end);
    bool initialize = has_method && s_span_is (method, method_end, "\"initialize\"");
    s_transfer_t *transfer = s_transfer_new (self, "POST", "application/json, text/event-stream", initialize);
    if (!transfer) {
        zstr_free (&line);
        return;
    }
    if (has_method && has_id)
        transfer->request_id = strndup (id, (size_t) (id_end - id));
    else
        curl_easy_setopt (transfer->easy, CURLOPT_TIMEOUT_MS, (long) NOTICE_TIMEOUT_MS);
    transfer->initialized_notice = has_method && s_span_is (method, method_end, "\"notifications/initialized\"");
    transfer->ping = has_method && s_span_is (method, method_end, "\"ping\"");
    transfer->headers = curl_slist_append (transfer->headers, "Content-Type: application/json");
    curl_easy_setopt (transfer->easy, CURLOPT_HTTPHEADER, transfer->headers);
    curl_easy_setopt (transfer->easy, CURLOPT_POSTFIELDS, line);
    curl_easy_setopt (transfer->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) (end - line));
    transfer->message = line;
    s_transfer_start (self, transfer);

    //  After notifications/cancelled the request's answer will not come:
    //  its stream is closed here, not held open for ever
    const char *params, *params_end, *cancelled, *cancelled_end;
    if (has_method && s_span_is (method, method_end, "\"notifications/cancelled\"")
    && s_json_member (line, end, "params", &params, &params_end)
    && s_json_member (params, params_end, "requestId", &cancelled, &cancelled_end)) {
        for (s_transfer_t *other = (s_transfer_t *) zlistx_first (self->transfers); other;
             other = (s_transfer_t *) zlistx_next (self->transfers))
            if (other->request_id && s_span_is (cancelled, cancelled_end, other->request_id)) {
                s_transfer_destroy (self, other);
                break;
            }
    }
}

static void
s_get_start (dsh_mcp_httpc_t *self)
{
    self->get_at = 0;
    s_transfer_t *transfer = s_transfer_new (self, "GET", "text/event-stream", false);
    if (!transfer)
        return;
    curl_easy_setopt (transfer->easy, CURLOPT_HTTPGET, 1L);
    if (self->get_last_event_id) {
        char *header = zsys_sprintf ("Last-Event-ID: %s", self->get_last_event_id);
        transfer->headers = curl_slist_append (transfer->headers, header);
        curl_easy_setopt (transfer->easy, CURLOPT_HTTPHEADER, transfer->headers);
        zstr_free (&header);
    }
    self->get = transfer;
    s_transfer_start (self, transfer);
}

//  Plans a GET with Last-Event-ID that takes up the broken stream of a
//  request still unanswered. Returns true if one is planned.
static bool
s_resume (dsh_mcp_httpc_t *self, s_transfer_t *broken)
{
    if (!broken->request_id || broken->answered || !broken->last_event_id || broken->resumes >= MAX_RESUMES)
        return false;
    s_transfer_t *transfer = s_transfer_new (self, "GET", "text/event-stream", false);
    if (!transfer)
        return false;
    curl_easy_setopt (transfer->easy, CURLOPT_HTTPGET, 1L);
    char *header = zsys_sprintf ("Last-Event-ID: %s", broken->last_event_id);
    transfer->headers = curl_slist_append (transfer->headers, header);
    curl_easy_setopt (transfer->easy, CURLOPT_HTTPHEADER, transfer->headers);
    zstr_free (&header);
    transfer->request_id = strdup (broken->request_id);
    transfer->last_event_id = strdup (broken->last_event_id);
    transfer->retry_ms = broken->retry_ms;
    transfer->resumes = broken->resumes + 1;
    transfer->start_at = zclock_mono () + (broken->retry_ms >= 0? broken->retry_ms: RESUME_DELAY_MS);
    zlistx_add_end (self->transfers, transfer);
    return true;
}

//  A snippet of the transfer's body, for a log line (static storage).
static const char *
s_snippet (s_transfer_t *transfer)
{
    static __thread char snippet [SNIPPET_BYTES + 1];
    size_t size = transfer->content.size < SNIPPET_BYTES? transfer->content.size: SNIPPET_BYTES;
    memcpy (snippet, transfer->content.data? transfer->content.data: "", size);
    snippet [size] = 0;
    s_printable (snippet);
    return snippet;
}

static void
s_get_done (dsh_mcp_httpc_t *self, s_transfer_t *transfer, CURLcode result, long status)
{
    if (result != CURLE_OK)
        s_end (self, "GET %s: the event stream broke: %s", self->url,
               *transfer->error? transfer->error: curl_easy_strerror (result));
    else
    if (status == 404)
        s_end (self, "GET %s: HTTP 404: the server ended the session", self->url);
    else
    if (status == 405) {
        if (!self->told_no_get)
            s_log (self, "GET %s: HTTP 405: the server offers no event stream of its own", self->url);
        self->told_no_get = true;
    }
    else
    if (transfer->body == BODY_SSE) {
        if (transfer->last_event_id) {
            zstr_free (&self->get_last_event_id);
            self->get_last_event_id = strdup (transfer->last_event_id);
        }
        self->get_at = zclock_mono () + (transfer->retry_ms >= 0? transfer->retry_ms: GET_REOPEN_MS);
    }
    else
        s_log (self, "GET %s: HTTP %ld: %s", self->url, status, s_snippet (transfer));
}

//  A POST, or a GET that resumes a request's stream, is done.
static void
s_request_done (dsh_mcp_httpc_t *self, s_transfer_t *transfer, CURLcode result, long status)
{
    const char *verb = transfer->verb;
    if (result == CURLE_WRITE_ERROR && transfer->too_big) {
        s_log (self, "%s %s: an answer larger than %zu bytes; dropped", verb, self->url, self->max_message);
        s_answer_error (transfer, "the MCP server's answer is larger than %zu bytes", self->max_message);
        return;
    }
    if (result == CURLE_OPERATION_TIMEDOUT && !transfer->request_id) {
        s_log (self, "%s %s: no answer to a notification within %d ms", verb, self->url, NOTICE_TIMEOUT_MS);
        return;
    }
    //  A stream that broke after its answer lost nothing; one that broke
    //  after an event id is taken up where it broke (if the server is
    //  gone, the resumption fails to connect and ends all)
    if (result != CURLE_OK) {
        if (!transfer->answered && !s_resume (self, transfer))
            s_end (self, "%s %s: %s", verb, self->url,
                   *transfer->error? transfer->error: curl_easy_strerror (result));
        return;
    }
    if (status == 404 && transfer->with_session) {
        pthread_mutex_lock (&self->session_lock);
        zstr_free (&self->session_id);
        pthread_mutex_unlock (&self->session_lock);
        s_end (self, "%s %s: HTTP 404: the server ended the session", verb, self->url);
        return;
    }
    //  Servers that forget a session do not all say 404 (server-everything
    //  says 400): a session that cannot answer a ping is lost
    if ((status < 200 || status >= 300) && transfer->ping) {
        s_end (self, "%s %s: HTTP %ld to a ping: %s", verb, self->url, status, s_snippet (transfer));
        return;
    }
    if (status < 200 || status >= 300) {
        s_log (self, "%s %s: HTTP %ld: %s", verb, self->url, status, s_snippet (transfer));
        s_answer_error (transfer, "the MCP server answered HTTP %ld: %s", status, s_snippet (transfer));
        return;
    }
    if (transfer->body == BODY_JSON
    && s_pass_text (self, transfer, transfer->content.data? transfer->content.data: "", transfer->content.size)) {
        s_log (self, "%s %s: an answer that is not JSON-RPC: %s", verb, self->url, s_snippet (transfer));
        s_answer_error (transfer, "the MCP server's answer is not JSON-RPC: %s", s_snippet (transfer));
    }
    if (transfer->body == BODY_OTHER && transfer->request_id)
        s_log (self, "%s %s: HTTP %ld without a JSON or event-stream answer: %s", verb, self->url, status,
               s_snippet (transfer));
    if (transfer->body == BODY_SSE && s_resume (self, transfer))
        return;
    s_answer_error (transfer, "the MCP server answered HTTP %ld without a response to the request", status);
    if (transfer->initialized_notice && !self->get)
        self->get_at = zclock_mono ();
}

//  Handles every finished transfer.
static void
s_reap (dsh_mcp_httpc_t *self)
{
    CURLMsg *done;
    int left;
    while ((done = curl_multi_info_read (self->multi, &left))) {
        if (done->msg != CURLMSG_DONE)
            continue;
        s_transfer_t *transfer = NULL;
        curl_easy_getinfo (done->easy_handle, CURLINFO_PRIVATE, (char **) &transfer);
        CURLcode result = done->data.result;
        long status = 0;
        curl_easy_getinfo (transfer->easy, CURLINFO_RESPONSE_CODE, &status);
        if (!self->ending) {
            if (transfer == self->get)
                s_get_done (self, transfer, result, status);
            else
                s_request_done (self, transfer, result, status);
        }
        s_transfer_destroy (self, transfer);
    }
    if (self->ending)
        while (zlistx_size (self->transfers))
            s_transfer_destroy (self, (s_transfer_t *) zlistx_first (self->transfers));
}

//  ---------------------------------------------------------------------
//  The thread

//  DELETE, so the server can free the session now; bounded.
static void
s_close_session (dsh_mcp_httpc_t *self)
{
    while (zlistx_size (self->transfers))
        s_transfer_destroy (self, (s_transfer_t *) zlistx_first (self->transfers));
    if (!self->session_id)
        return;
    s_transfer_t *transfer = s_transfer_new (self, "DELETE", "application/json, text/event-stream", false);
    if (!transfer)
        return;
    curl_easy_setopt (transfer->easy, CURLOPT_CUSTOMREQUEST, "DELETE");
    curl_easy_setopt (transfer->easy, CURLOPT_TIMEOUT_MS, (long) DELETE_TIMEOUT_MS);
    curl_easy_setopt (transfer->easy, CURLOPT_CONNECTTIMEOUT_MS, (long) DELETE_TIMEOUT_MS);
    s_transfer_start (self, transfer);
    int64_t give_up = zclock_mono () + DELETE_TIMEOUT_MS + 100;
    int running = 1;
    while (running && zclock_mono () < give_up) {
        curl_multi_poll (self->multi, NULL, 0, 100, NULL);
        curl_multi_perform (self->multi, &running);
    }
    s_transfer_destroy (self, transfer);
}

static void *
s_thread (void *arg)
{
    dsh_mcp_httpc_t *self = (dsh_mcp_httpc_t *) arg;
    while (!atomic_load (&self->stopping)) {
        if (self->ending && self->output_fd >= 0 && self->output_start == self->output.size) {
            close (self->output_fd);
            self->output_fd = -1;
        }
        struct curl_waitfd fds [2];
        unsigned count = 0;
        fds [count++] = (struct curl_waitfd) { .fd = self->input_fd, .events = CURL_WAIT_POLLIN };
        if (self->output_fd >= 0 && self->output_start < self->output.size)
            fds [count++] = (struct curl_waitfd) { .fd = self->output_fd, .events = CURL_WAIT_POLLOUT };
        int timeout = POLL_TICK_MS;
        int64_t now = zclock_mono ();
        if (self->get_at && self->get_at - now < timeout)
            timeout = self->get_at - now < 0? 0: (int) (self->get_at - now);
        for (s_transfer_t *transfer = (s_transfer_t *) zlistx_first (self->transfers); transfer;
             transfer = (s_transfer_t *) zlistx_next (self->transfers))
            if (!transfer->started && transfer->start_at - now < timeout)
                timeout = transfer->start_at - now < 0? 0: (int) (transfer->start_at - now);
        curl_multi_poll (self->multi, fds, count, timeout, NULL);
        if (fds [0].revents) {
            //  End of file: the bridge closed the session
            if (dsh_jsonrpc_read (self->lines))
                break;
            char *line;
            while ((line = dsh_jsonrpc_line (self->lines))) {
                if (*line && !self->ending)
                    s_post (self, &line);
                zstr_free (&line);
            }
        }
        int running;
        curl_multi_perform (self->multi, &running);
        s_reap (self);
        if (self->get_at && zclock_mono () >= self->get_at && !self->ending)
            s_get_start (self);
        for (s_transfer_t *transfer = (s_transfer_t *) zlistx_first (self->transfers); transfer;
             transfer = (s_transfer_t *) zlistx_next (self->transfers))
            if (!transfer->started && zclock_mono () >= transfer->start_at) {
                curl_multi_add_handle (self->multi, transfer->easy);
                transfer->started = true;
            }
        s_flush (self);
    }
    s_close_session (self);
    return NULL;
}

//  ---------------------------------------------------------------------
//  The class

dsh_mcp_httpc_t *
dsh_mcp_httpc_new (const char *url, zlistx_t *headers, size_t max_message,
                   int *to_server, int *from_server, int *log)
{
    assert (url);
    assert (to_server && from_server && log);
    int input [2], output [2], logs [2];
    int type = SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK;
    if (socketpair (AF_UNIX, type, 0, input)) {
        zsys_error ("dsh_mcp_httpc: cannot make a socket pair: %s", strerror (errno));
        return NULL;
    }
    if (socketpair (AF_UNIX, type, 0, output)) {
        zsys_error ("dsh_mcp_httpc: cannot make a socket pair: %s", strerror (errno));
        close (input [0]);
        close (input [1]);
        return NULL;
    }
    if (socketpair (AF_UNIX, type, 0, logs)) {
        zsys_error ("dsh_mcp_httpc: cannot make a socket pair: %s", strerror (errno));
        for (int index = 0; index < 2; index++) {
            close (input [index]);
            close (output [index]);
        }
        return NULL;
    }
    curl_global_init (CURL_GLOBAL_DEFAULT);
    dsh_mcp_httpc_t *self = (dsh_mcp_httpc_t *) zmalloc (sizeof (dsh_mcp_httpc_t));
    assert (self);
    self->url = strdup (url);
    self->headers = zlistx_new ();
    zlistx_set_duplicator (self->headers, (czmq_duplicator *) strdup);
    zlistx_set_destructor (self->headers, (czmq_destructor *) zstr_free);
    for (const char *header = headers? (const char *) zlistx_first (headers): NULL; header;
         header = (const char *) zlistx_next (headers))
        zlistx_add_end (self->headers, (void *) header);
    self->max_message = max_message;
    self->multi = curl_multi_init ();
    assert (self->multi);
    self->transfers = zlistx_new ();
    self->input_fd = input [1];
    self->output_fd = output [1];
    self->log_fd = logs [1];
    self->lines = dsh_jsonrpc_new (self->input_fd, -1, max_message);
    atomic_init (&self->stopping, false);
    pthread_mutex_init (&self->session_lock, NULL);
    int rc = pthread_create (&self->thread, NULL, s_thread, self);
    if (rc) {
        zsys_error ("dsh_mcp_httpc: cannot start a thread: %s", strerror (rc));
        close (input [0]);
        close (output [0]);
        close (logs [0]);
        dsh_mcp_httpc_destroy (&self);
        return NULL;
    }
    self->thread_started = true;
    *to_server = input [0];
    *from_server = output [0];
    *log = logs [0];
    return self;
}

void
dsh_mcp_httpc_destroy (dsh_mcp_httpc_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_mcp_httpc_t *self = *self_p;
        if (self->thread_started) {
            atomic_store (&self->stopping, true);
            curl_multi_wakeup (self->multi);
            pthread_join (self->thread, NULL);
        }
        while (zlistx_size (self->transfers))
            s_transfer_destroy (self, (s_transfer_t *) zlistx_first (self->transfers));
        zlistx_destroy (&self->transfers);
        curl_multi_cleanup (self->multi);
        curl_global_cleanup ();
        dsh_jsonrpc_destroy (&self->lines);
        close (self->input_fd);
        if (self->output_fd >= 0)
            close (self->output_fd);
        close (self->log_fd);
        s_buffer_free (&self->output);
        zlistx_destroy (&self->headers);
        zstr_free (&self->session_id);
        pthread_mutex_destroy (&self->session_lock);
        zstr_free (&self->protocol_version);
        zstr_free (&self->get_last_event_id);
        zstr_free (&self->url);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_mcp_httpc_session_id (dsh_mcp_httpc_t *self, char *id, size_t size)
{
    assert (self);
    pthread_mutex_lock (&self->session_lock);
    snprintf (id, size, "%s", self->session_id? self->session_id: "");
    pthread_mutex_unlock (&self->session_lock);
}

char *
dsh_mcp_httpc_host (const char *url)
{
    CURLU *parsed = curl_url ();
    if (!parsed)
        return NULL;
    char *scheme = NULL, *host = NULL, *result = NULL;
    if (curl_url_set (parsed, CURLUPART_URL, url, 0) == CURLUE_OK
    && curl_url_get (parsed, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK
    && (streq (scheme, "http") || streq (scheme, "https"))
    && curl_url_get (parsed, CURLUPART_HOST, &host, 0) == CURLUE_OK && *host)
        result = strdup (host);
    curl_free (scheme);
    curl_free (host);
    curl_url_cleanup (parsed);
    return result;
}
