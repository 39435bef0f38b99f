/*  =========================================================================
    test_mcp_httpd - dsh_mcp_httpd: MCP's Streamable HTTP transport on
    loopback, driven by libcurl, with a thread playing dsh-mcp's core

    The fake core answers initialize, echoes, sends a progress notification
    on a request's own stream, a list_changed to the session's GET stream,
    floods a stream, or holds a request unanswered; it records what it
    hears. Every wait has a timeout; nothing asserts on timings.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <curl/curl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

#include "dsh_http.h"
#include "dsh_mcp_httpd.h"

//  Only how long a failing wait takes: valgrind is slow
#define WAIT_MS         60000
#define FLOOD_MESSAGES  320
#define FLOOD_BYTES     (64 * 1024)
//  Each of these streams stays under a stream's backlog, together over
//  the session's
#define SPREAD_STREAMS  10
#define SPREAD_MESSAGES 112

//  ---------------------------------------------------------------------
//  The fake core

typedef struct {
    dsh_mcp_httpd_t *httpd;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t lock;
    zlistx_t *heard;            //  "method" or "ended", one per event
} s_core_t;

static s_core_t s_core;

static void
s_heard (const char *what)
{
    pthread_mutex_lock (&s_core.lock);
    zlistx_add_end (s_core.heard, strdup (what));
    pthread_mutex_unlock (&s_core.lock);
}

static bool
s_core_heard (const char *what)
{
    pthread_mutex_lock (&s_core.lock);
    bool found = false;
    for (char *item = zlistx_first (s_core.heard); item && !found; item = zlistx_next (s_core.heard))
        found = streq (item, what);
    pthread_mutex_unlock (&s_core.lock);
    return found;
}

static bool
s_wait_heard (const char *what)
{
    for (int64_t give_up = zclock_mono () + WAIT_MS; zclock_mono () < give_up; zclock_sleep (20))
        if (s_core_heard (what))
            return true;
    return false;
}

static void
s_answer (const char *session, const json_t *id, json_t *result)
{
    json_t *response = json_pack ("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
    assert_int_equal (dsh_mcp_httpd_send (s_core.httpd, session, response, NULL), 0);
    json_decref (response);
}

static void
s_notify (const char *session, const char *method, json_t *params, const json_t *related_id)
{
    json_t *message = json_pack ("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
    dsh_mcp_httpd_send (s_core.httpd, session, message, related_id);
    json_decref (message);
}

static void
s_core_handle (const char *session, json_t *message)
{
    const char *method = json_string_value (json_object_get (message, "method"));
    json_t *id = json_object_get (message, "id");
    if (method && streq (method, "notifications/cancelled")) {
        char *what = zsys_sprintf ("cancelled %s",
                                   json_string_value (json_object_get (json_object_get (message, "params"),
                                                                       "requestId")));
        s_heard (what);
        zstr_free (&what);
    }
    else
        s_heard (method? method: "response");
    if (!method || !id)
        return;
    if (streq (method, "initialize"))
        s_answer (session, id, json_pack ("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", "2025-06-18",
                                          "capabilities", "serverInfo", "name", "fake", "version", "1"));
    else
    if (streq (method, "echo"))
        s_answer (session, id, json_pack ("{s:O?}", "echo", json_object_get (message, "params")));
    else
    if (streq (method, "progress")) {
        s_notify (session, "notifications/progress", json_pack ("{s:s, s:i}", "progressToken", "p", "progress", 1),
                  id);
        s_answer (session, id, json_object ());
    }
    else
    if (streq (method, "notify")) {
        s_notify (session, "notifications/tools/list_changed", json_object (), NULL);
        s_answer (session, id, json_object ());
    }
    else
    if (streq (method, "flood") || streq (method, "flood_own")) {
        //  On the GET stream, or on the request's own
        bool own = streq (method, "flood_own");
        char *filler = (char *) malloc (FLOOD_BYTES + 1);
        memset (filler, 'x', FLOOD_BYTES);
        filler [FLOOD_BYTES] = 0;
        for (int count = 0; count < (own? SPREAD_MESSAGES: FLOOD_MESSAGES); count++)
            s_notify (session, "notifications/message", json_pack ("{s:s}", "data", filler), own? id: NULL);
        free (filler);
        s_answer (session, id, json_object ());
        char *what = zsys_sprintf ("flooded %" JSON_INTEGER_FORMAT, json_integer_value (id));
        s_heard (what);
        zstr_free (&what);
    }
    //  "hold" is never answered
}

static void *
s_core_run (void *args)
{
    (void) args;
    struct pollfd item = { .fd = dsh_mcp_httpd_fd (s_core.httpd), .events = POLLIN };
    while (!atomic_load (&s_core.stop)) {
        if (poll (&item, 1, 50) <= 0)
            continue;
        char *session;
        json_t *message;
        while ((message = dsh_mcp_httpd_recv (s_core.httpd, &session)) || session) {
            if (message)
                s_core_handle (session, message);
            else
                s_heard ("ended");
            json_decref (message);
            free (session);
        }
    }
    return NULL;
}

static int
s_core_start (const char *token)
{
    char error [256] = "";
    s_core.httpd = dsh_mcp_httpd_new ("127.0.0.1:0", token, error, sizeof error);
    if (!s_core.httpd) {
        fprintf (stderr, "dsh_mcp_httpd_new: %s\n", error);
        return -1;
    }
    s_core.heard = zlistx_new ();
    zlistx_set_destructor (s_core.heard, (zlistx_destructor_fn *) zstr_free);
    pthread_mutex_init (&s_core.lock, NULL);
    atomic_store (&s_core.stop, false);
    return pthread_create (&s_core.thread, NULL, s_core_run, NULL);
}

static int
s_setup (void **state)
{
    (void) state;
    return s_core_start (NULL);
}

static int
s_setup_token (void **state)
{
    (void) state;
    return s_core_start ("s3cret-token");
}

static int
s_teardown (void **state)
{
    (void) state;
    atomic_store (&s_core.stop, true);
    pthread_join (s_core.thread, NULL);
    dsh_mcp_httpd_destroy (&s_core.httpd);
    zlistx_destroy (&s_core.heard);
    pthread_mutex_destroy (&s_core.lock);
    return 0;
}

//  ---------------------------------------------------------------------
//  An HTTP client on libcurl's multi interface, so streams stay open
//  while other requests run

typedef struct {
    CURL *easy;
    struct curl_slist *headers;
    char *body;
    size_t body_size;
    char *head;
    size_t head_size;
    bool done;
} s_http_t;

static CURLM *s_multi;

static size_t
s_collect (char *data, size_t size, size_t count, void *args)
{
    s_http_t *http = (s_http_t *) args;
    size_t bytes = size * count;
    http->body = (char *) realloc (http->body, http->body_size + bytes + 1);
    memcpy (http->body + http->body_size, data, bytes);
    http->body_size += bytes;
    http->body [http->body_size] = 0;
    return bytes;
}

static size_t
s_collect_head (char *data, size_t size, size_t count, void *args)
{
    s_http_t *http = (s_http_t *) args;
    size_t bytes = size * count;
    http->head = (char *) realloc (http->head, http->head_size + bytes + 1);
    memcpy (http->head + http->head_size, data, bytes);
    http->head_size += bytes;
    http->head [http->head_size] = 0;
    return bytes;
}

//  Starts method on path with body (may be NULL) and the headers that
//  follow, up to a NULL.
static s_http_t *
s_http_start (const char *method, const char *path, const char *body, ...)
{
    s_http_t *http = (s_http_t *) zmalloc (sizeof (s_http_t));
    http->body = strdup ("");
    http->head = strdup ("");
    http->easy = curl_easy_init ();
    char *url = zsys_sprintf ("http://127.0.0.1:%d%s", dsh_mcp_httpd_port (s_core.httpd), path);
    curl_easy_setopt (http->easy, CURLOPT_URL, url);
    zstr_free (&url);
    curl_easy_setopt (http->easy, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt (http->easy, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt (http->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) strlen (body));
    }
    va_list args;
    va_start (args, body);
    for (const char *header = va_arg (args, const char *); header; header = va_arg (args, const char *))
        http->headers = curl_slist_append (http->headers, header);
    va_end (args);
    curl_easy_setopt (http->easy, CURLOPT_HTTPHEADER, http->headers);
    curl_easy_setopt (http->easy, CURLOPT_WRITEFUNCTION, s_collect);
    curl_easy_setopt (http->easy, CURLOPT_WRITEDATA, http);
    curl_easy_setopt (http->easy, CURLOPT_HEADERFUNCTION, s_collect_head);
    curl_easy_setopt (http->easy, CURLOPT_HEADERDATA, http);
    curl_easy_setopt (http->easy, CURLOPT_PRIVATE, http);
    curl_multi_add_handle (s_multi, http->easy);
    return http;
}

static long
s_http_status (s_http_t *http)
{
    long status = 0;
    curl_easy_getinfo (http->easy, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

//  Runs transfers until http's body holds needle (NULL: until it is
//  done; "": until its status came). Returns whether that happened in time.
static bool
s_http_wait (s_http_t *http, const char *needle)
{
    for (int64_t give_up = zclock_mono () + WAIT_MS; zclock_mono () < give_up; ) {
        int running;
        curl_multi_perform (s_multi, &running);
        CURLMsg *info;
        int left;
        while ((info = curl_multi_info_read (s_multi, &left)))
            if (info->msg == CURLMSG_DONE) {
                s_http_t *finished;
                curl_easy_getinfo (info->easy_handle, CURLINFO_PRIVATE, (char **) &finished);
                finished->done = true;
            }
        bool reached = !needle? http->done
                     : !*needle? s_http_status (http) != 0
                     : strstr (http->body, needle) != NULL;
        if (reached)
            return true;
        if (http->done)
            return false;
        curl_multi_poll (s_multi, NULL, 0, 50, NULL);
    }
    return false;
}

//  A response header's value (caller frees), or NULL.
static char *
s_http_header (s_http_t *http, const char *name)
{
    size_t size = strlen (name);
    for (const char *line = http->head; line && *line; line = strchr (line, '\n')? strchr (line, '\n') + 1: NULL)
        if (strncasecmp (line, name, size) == 0 && line [size] == ':') {
            const char *value = line + size + 1;
            while (*value == ' ')
                value++;
            return strndup (value, strcspn (value, "\r\n"));
        }
    return NULL;
}

static void
s_http_destroy (s_http_t **http_p)
{
    s_http_t *http = *http_p;
    if (http) {
        curl_multi_remove_handle (s_multi, http->easy);
        curl_easy_cleanup (http->easy);
        curl_slist_free_all (http->headers);
        free (http->body);
        free (http->head);
        free (http);
        *http_p = NULL;
    }
}

#define ACCEPT_BOTH     "Accept: application/json, text/event-stream"
#define JSON_TYPE       "Content-Type: application/json"
#define INITIALIZE      "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":" \
                        "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}," \
                        "\"clientInfo\":{\"name\":\"test\",\"version\":\"1\"}}}"

//  A POST run to its end; the caller destroys it.
static s_http_t *
s_post (const char *session, const char *body, const char *header)
{
    char *session_header = session? zsys_sprintf ("Mcp-Session-Id: %s", session): NULL;
    s_http_t *http = s_http_start ("POST", "/mcp", body, JSON_TYPE, header? header: ACCEPT_BOTH,
                                   session_header, NULL);
    zstr_free (&session_header);
    assert_true (s_http_wait (http, NULL));
    return http;
}

//  A new session's id (caller frees).
static char *
s_initialize (void)
{
    s_http_t *http = s_post (NULL, INITIALIZE, NULL);
    assert_int_equal (s_http_status (http), 200);
    char *session = s_http_header (http, "Mcp-Session-Id");
    assert_non_null (session);
    s_http_destroy (&http);
    return session;
}

//  The JSON-RPC error code of a refusal's body.
static int
s_error_code (s_http_t *http)
{
    json_t *body = json_loads (http->body, 0, NULL);
    assert_non_null (body);
    assert_true (json_is_null (json_object_get (body, "id")));
    int code = (int) json_integer_value (json_object_get (json_object_get (body, "error"), "code"));
    json_decref (body);
    return code;
}

//  ---------------------------------------------------------------------
//  The tests

static void
test_initialize_then_requests_over_sse (void **state)
{
    (void) state;
    s_http_t *http = s_post (NULL, INITIALIZE, NULL);
    assert_int_equal (s_http_status (http), 200);
    char *type = s_http_header (http, "Content-Type");
    assert_string_equal (type, "text/event-stream");
    zstr_free (&type);
    char *session = s_http_header (http, "Mcp-Session-Id");
    assert_non_null (session);
    assert_int_equal (strlen (session), 32);
    assert_non_null (strstr (http->body, "event: message\ndata: {"));
    assert_non_null (strstr (http->body, "\"protocolVersion\":\"2025-06-18\""));
    s_http_destroy (&http);

    //  Only a notification: 202, no body
    http = s_post (session, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", NULL);
    assert_int_equal (s_http_status (http), 202);
    assert_int_equal (http->body_size, 0);
    s_http_destroy (&http);
    assert_true (s_wait_heard ("notifications/initialized"));

    http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":\"e1\",\"method\":\"echo\",\"params\":{\"text\":\"a\\u0000b\"}}",
                   NULL);
    assert_int_equal (s_http_status (http), 200);
    assert_non_null (strstr (http->body, "data: {\"jsonrpc\":\"2.0\",\"id\":\"e1\",\"result\":{\"echo\":"
                                         "{\"text\":\"a\\u0000b\"}}}\n\n"));
    s_http_destroy (&http);

    //  A 2025-03-26 batch: both answers on the stream, the notification heard
    http = s_post (session, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{}},"
                            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"},"
                            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"echo\",\"params\":{}}]",
                   "Accept: text/event-stream, application/json");
    assert_int_equal (s_http_status (http), 200);
    assert_non_null (strstr (http->body, "\"id\":1,\"result\""));
    assert_non_null (strstr (http->body, "\"id\":2,\"result\""));
    s_http_destroy (&http);
    assert_true (s_wait_heard ("notifications/roots/list_changed"));
    zstr_free (&session);
}

static void
test_json_answers_without_sse (void **state)
{
    (void) state;
    s_http_t *http = s_post (NULL, INITIALIZE, "Accept: application/json");
    assert_int_equal (s_http_status (http), 200);
    char *type = s_http_header (http, "Content-Type");
    assert_string_equal (type, "application/json");
    zstr_free (&type);
    char *session = s_http_header (http, "Mcp-Session-Id");
    json_t *body = json_loads (http->body, 0, NULL);
    assert_non_null (body);
    assert_int_equal (json_integer_value (json_object_get (body, "id")), 0);
    assert_non_null (json_object_get (body, "result"));
    json_decref (body);
    s_http_destroy (&http);

    http = s_post (session, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{}},"
                            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"progress\"}]", "Accept: application/json");
    body = json_loads (http->body, 0, NULL);
    assert_true (json_is_array (body));
    assert_int_equal (json_array_size (body), 2);
    assert_null (strstr (http->body, "notifications/progress"));
    json_decref (body);
    s_http_destroy (&http);
    zstr_free (&session);
}

static void
test_notifications_reach_the_right_stream (void **state)
{
    (void) state;
    char *session = s_initialize ();
    char *session_header = zsys_sprintf ("Mcp-Session-Id: %s", session);
    s_http_t *stream = s_http_start ("GET", "/mcp", NULL, "Accept: text/event-stream", session_header, NULL);
    assert_true (s_http_wait (stream, ""));
    assert_int_equal (s_http_status (stream), 200);

    //  Progress goes on the stream of the request it is about, before its answer
    s_http_t *http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"progress\"}", NULL);
    char *progress = strstr (http->body, "notifications/progress");
    char *answer = strstr (http->body, "\"id\":7,\"result\"");
    assert_non_null (progress);
    assert_non_null (answer);
    assert_true (progress < answer);
    s_http_destroy (&http);

    //  A notification about no request goes on the GET stream
    http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"notify\"}", NULL);
    assert_null (strstr (http->body, "list_changed"));
    s_http_destroy (&http);
    assert_true (s_http_wait (stream, "notifications/tools/list_changed"));
    assert_int_equal (s_http_status (stream), 200);
    assert_null (strstr (stream->body, "notifications/progress"));

    //  DELETE ends the session and its GET stream
    s_http_t *end = s_http_start ("DELETE", "/mcp", NULL, session_header, NULL);
    assert_true (s_http_wait (end, NULL));
    assert_int_equal (s_http_status (end), 200);
    s_http_destroy (&end);
    assert_true (s_wait_heard ("ended"));
    assert_true (s_http_wait (stream, NULL));
    s_http_destroy (&stream);

    http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"echo\"}", NULL);
    assert_int_equal (s_http_status (http), 404);
    assert_int_equal (s_error_code (http), -32001);
    s_http_destroy (&http);
    json_t *late = json_pack ("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/tools/list_changed");
    assert_int_equal (dsh_mcp_httpd_send (s_core.httpd, session, late, NULL), -1);
    json_decref (late);
    zstr_free (&session_header);
    zstr_free (&session);
}

static void
test_refusals (void **state)
{
    (void) state;
    char *session = s_initialize ();
    const char *echo = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}";

    s_http_t *http = s_post (NULL, echo, NULL);
    assert_int_equal (s_http_status (http), 400);
    s_http_destroy (&http);

    http = s_post ("0123456789abcdef0123456789abcdef", echo, NULL);
    assert_int_equal (s_http_status (http), 404);
    s_http_destroy (&http);

    http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":", NULL);
    assert_int_equal (s_http_status (http), 400);
    assert_int_equal (s_error_code (http), -32700);
    s_http_destroy (&http);

    http = s_post (session, "[]", NULL);
    assert_int_equal (s_http_status (http), 400);
    assert_int_equal (s_error_code (http), -32600);
    s_http_destroy (&http);

    char *session_header = zsys_sprintf ("Mcp-Session-Id: %s", session);
    http = s_http_start ("POST", "/mcp", echo, JSON_TYPE, ACCEPT_BOTH, session_header,
                         "Origin: http://evil.example", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 403);
    s_http_destroy (&http);
    http = s_http_start ("POST", "/mcp", echo, JSON_TYPE, ACCEPT_BOTH, session_header,
                         "Origin: http://localhost:6274", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 200);
    s_http_destroy (&http);
    http = s_http_start ("POST", "/mcp", echo, JSON_TYPE, ACCEPT_BOTH, session_header,
                         "Host: rebound.example:80", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 403);
    s_http_destroy (&http);

    http = s_http_start ("POST", "/mcp", echo, JSON_TYPE, ACCEPT_BOTH, session_header,
                         "MCP-Protocol-Version: 1999-01-01", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 400);
    s_http_destroy (&http);
    http = s_http_start ("POST", "/mcp", echo, JSON_TYPE, ACCEPT_BOTH, session_header,
                         "MCP-Protocol-Version: 2025-03-26", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 200);
    s_http_destroy (&http);

    http = s_http_start ("POST", "/mcp", echo, "Content-Type: text/plain", ACCEPT_BOTH, session_header, NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 415);
    s_http_destroy (&http);

    http = s_http_start ("PUT", "/mcp", echo, JSON_TYPE, session_header, NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 405);
    s_http_destroy (&http);

    http = s_http_start ("POST", "/other", echo, JSON_TYPE, session_header, NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 404);
    s_http_destroy (&http);

    http = s_http_start ("GET", "/mcp", NULL, "Accept: text/event-stream", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 400);
    s_http_destroy (&http);

    //  One byte over the limit, declared and then sent without a length
    size_t size = DSH_MCP_HTTPD_MAX_BODY + 1;
    char *huge = (char *) malloc (size + 1);
    memset (huge, ' ', size);
    huge [0] = '{';
    huge [size - 1] = '}';
    huge [size] = 0;
    http = s_post (session, huge, NULL);
    assert_int_equal (s_http_status (http), 413);
    s_http_destroy (&http);
    http = s_http_start ("POST", "/mcp", huge, JSON_TYPE, ACCEPT_BOTH, session_header,
                         "Transfer-Encoding: chunked", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 413);
    s_http_destroy (&http);
    free (huge);

    //  The session still works after all that
    http = s_post (session, echo, NULL);
    assert_int_equal (s_http_status (http), 200);
    assert_non_null (strstr (http->body, "\"result\""));
    s_http_destroy (&http);
    zstr_free (&session_header);
    zstr_free (&session);
}

static void
test_bearer_token (void **state)
{
    (void) state;
    s_http_t *http = s_post (NULL, INITIALIZE, NULL);
    assert_int_equal (s_http_status (http), 401);
    char *challenge = s_http_header (http, "WWW-Authenticate");
    assert_non_null (challenge);
    assert_string_equal (challenge, "Bearer");
    zstr_free (&challenge);
    s_http_destroy (&http);

    http = s_http_start ("POST", "/mcp", INITIALIZE, JSON_TYPE, ACCEPT_BOTH,
                         "Authorization: Bearer s3cret-tokeN", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 401);
    s_http_destroy (&http);

    http = s_http_start ("POST", "/mcp", INITIALIZE, JSON_TYPE, ACCEPT_BOTH,
                         "Authorization: Bearer s3cret-token", NULL);
    assert_true (s_http_wait (http, NULL));
    assert_int_equal (s_http_status (http), 200);
    s_http_destroy (&http);
}

static void
test_addresses (void **state)
{
    (void) state;
    char error [256] = "";
    dsh_mcp_httpd_t *httpd = dsh_mcp_httpd_new ("0.0.0.0:0", NULL, error, sizeof error);
    assert_null (httpd);
    assert_non_null (strstr (error, "token"));
    httpd = dsh_mcp_httpd_new ("0.0.0.0:0", "t", error, sizeof error);
    assert_non_null (httpd);
    assert_true (dsh_mcp_httpd_port (httpd) > 0);
    dsh_mcp_httpd_destroy (&httpd);
    dsh_mcp_httpd_destroy (&httpd);
    const char *bad [] = { "127.0.0.1", "127.0.0.1:x", "127.0.0.1:70000", ":80", "[::1]80", "no.such.host.invalid:1",
                           NULL };
    for (size_t index = 0; bad [index]; index++) {
        error [0] = 0;
        assert_null (dsh_mcp_httpd_new (bad [index], NULL, error, sizeof error));
        assert_true (strlen (error) > 0);
    }
    //  IPv6 loopback, where the machine has it
    httpd = dsh_mcp_httpd_new ("[::1]:0", NULL, error, sizeof error);
    if (httpd)
        assert_true (dsh_mcp_httpd_port (httpd) > 0);
    dsh_mcp_httpd_destroy (&httpd);
}

static void
test_token_file (void **state)
{
    (void) state;
    char path [] = "/tmp/test_mcp_httpd_XXXXXX";
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    assert_int_equal (write (fd, "  abc.DEF-123 \n", 15), 15);
    close (fd);
    char error [256] = "";
    char *token = dsh_http_read_token (path, error, sizeof error);
    assert_non_null (token);
    assert_string_equal (token, "abc.DEF-123");
    free (token);
    FILE *file = fopen (path, "w");
    fputs ("\n", file);
    fclose (file);
    assert_null (dsh_http_read_token (path, error, sizeof error));
    assert_non_null (strstr (error, "no token"));
    unlink (path);
    assert_null (dsh_http_read_token (path, error, sizeof error));
}

static void
test_idle_session_expires (void **state)
{
    (void) state;
    dsh_mcp_httpd_set_timeouts (s_core.httpd, 200, 0);
    char *session = s_initialize ();
    assert_true (s_wait_heard ("ended"));
    s_http_t *http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}", NULL);
    assert_int_equal (s_http_status (http), 404);
    s_http_destroy (&http);
    zstr_free (&session);
}

static void
test_client_gone_cancels (void **state)
{
    (void) state;
    //  Keep-alives are how a waiting connection finds its client gone
    dsh_mcp_httpd_set_timeouts (s_core.httpd, 0, 100);
    char *session = s_initialize ();
    char *session_header = zsys_sprintf ("Mcp-Session-Id: %s", session);
    s_http_t *http = s_http_start ("POST", "/mcp", "{\"jsonrpc\":\"2.0\",\"id\":\"h1\",\"method\":\"hold\"}",
                                   JSON_TYPE, ACCEPT_BOTH, session_header, NULL);
    for (int64_t give_up = zclock_mono () + WAIT_MS; zclock_mono () < give_up && !s_core_heard ("hold"); )
        s_http_wait (http, ": keepalive");
    assert_true (s_core_heard ("hold"));
    s_http_destroy (&http);
    assert_true (s_wait_heard ("cancelled h1"));
    zstr_free (&session_header);
    zstr_free (&session);
}

//  Sessions are bounded: a new one ends the one idle the longest, and
//  when every session has a stream open, the new one is refused.
static void
test_sessions_are_bounded (void **state)
{
    (void) state;
    char *first = s_initialize ();
    s_http_t *streams [DSH_MCP_HTTPD_MAX_SESSIONS] = { NULL };
    for (int count = 1; count < DSH_MCP_HTTPD_MAX_SESSIONS; count++) {
        char *session = s_initialize ();
        char *session_header = zsys_sprintf ("Mcp-Session-Id: %s", session);
        streams [count] = s_http_start ("GET", "/mcp", NULL, "Accept: text/event-stream", session_header, NULL);
        assert_true (s_http_wait (streams [count], ""));
        assert_int_equal (s_http_status (streams [count]), 200);
        zstr_free (&session_header);
        zstr_free (&session);
    }
    assert_false (s_core_heard ("ended"));
    char *newest = s_initialize ();
    assert_true (s_wait_heard ("ended"));
    s_http_t *http = s_post (first, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\"}", NULL);
    assert_int_equal (s_http_status (http), 404);
    s_http_destroy (&http);

    //  Now every session but the newest has a stream; give it one too
    char *session_header = zsys_sprintf ("Mcp-Session-Id: %s", newest);
    streams [0] = s_http_start ("GET", "/mcp", NULL, "Accept: text/event-stream", session_header, NULL);
    assert_true (s_http_wait (streams [0], ""));
    http = s_post (NULL, INITIALIZE, NULL);
    assert_int_equal (s_http_status (http), 503);
    s_http_destroy (&http);
    for (int count = 0; count < DSH_MCP_HTTPD_MAX_SESSIONS; count++)
        s_http_destroy (&streams [count]);
    zstr_free (&session_header);
    zstr_free (&newest);
    zstr_free (&first);
}

//  A raw connection that sent request and then reads nothing, with a
//  receive buffer small enough that the kernel holds little of a flood.
static int
s_raw_open (const char *request)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    //  Set before connecting, so the window is sized for it
    int receive_buffer = 65536;
    setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons (dsh_mcp_httpd_port (s_core.httpd)) };
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    assert_int_equal (connect (fd, (struct sockaddr *) &addr, sizeof addr), 0);
    assert_int_equal (write (fd, request, strlen (request)), (ssize_t) strlen (request));
    return fd;
}

//  Reads fd to its end; returns the bytes read, with whether the end came
//  (closed) and whether it was a clean end of chunks (complete).
static size_t
s_raw_drain (int fd, bool *closed, bool *complete)
{
    size_t total = 0;
    char buffer [65536];
    char tail [8] = "";
    *closed = false;
    struct pollfd item = { .fd = fd, .events = POLLIN };
    for (int64_t give_up = zclock_mono () + WAIT_MS; zclock_mono () < give_up && !*closed; ) {
        if (poll (&item, 1, 1000) != 1)
            continue;
        ssize_t size = read (fd, buffer, sizeof buffer);
        *closed = size <= 0;
        if (size >= 5) {
            memcpy (tail, buffer + size - 5, 5);
            tail [5] = 0;
        }
        total += size > 0? (size_t) size: 0;
    }
    *complete = streq (tail, "0\r\n\r\n");
    close (fd);
    return total;
}

//  The bytes a session's streams may hold together are bounded too: a
//  client with many requests it never reads loses some of their streams.
static void
test_session_backlog_is_bounded (void **state)
{
    (void) state;
    char *session = s_initialize ();
    int fds [SPREAD_STREAMS];
    for (int index = 0; index < SPREAD_STREAMS; index++) {
        char *body = zsys_sprintf ("{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"flood_own\"}", index);
        char *request = zsys_sprintf ("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                      "Accept: application/json, text/event-stream\r\n"
                                      "Content-Type: application/json\r\nMcp-Session-Id: %s\r\n"
                                      "Content-Length: %zu\r\n\r\n%s", session, strlen (body), body);
        fds [index] = s_raw_open (request);
        zstr_free (&request);
        zstr_free (&body);
    }
    for (int index = 0; index < SPREAD_STREAMS; index++) {
        char what [32];
        snprintf (what, sizeof what, "flooded %d", index);
        assert_true (s_wait_heard (what));
    }
    size_t cut = 0;
    for (int index = 0; index < SPREAD_STREAMS; index++) {
        bool closed, complete;
        size_t total = s_raw_drain (fds [index], &closed, &complete);
        if (getenv ("DEBUG_HTTPD"))
            zsys_debug ("stream %d: %zu bytes, closed %d complete %d", index, total, closed, complete);
        assert_true (closed);
        cut += !complete;
    }
    assert_true (cut > 0);
    zstr_free (&session);
}

//  A client that never reads its stream loses it; the server keeps a
//  bounded backlog, not everything the core sent.
static void
test_slow_reader_loses_its_stream (void **state)
{
    (void) state;
    char *session = s_initialize ();
    char *request = zsys_sprintf ("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
                                  "Mcp-Session-Id: %s\r\n\r\n", session);
    int fd = s_raw_open (request);
    zstr_free (&request);
    //  Its headers say the stream is open; then it stops reading
    char head [4096];
    size_t head_size = 0;
    struct pollfd item = { .fd = fd, .events = POLLIN };
    while (head_size < sizeof head - 1 && poll (&item, 1, WAIT_MS) == 1) {
        ssize_t size = read (fd, head + head_size, 1);
        assert_true (size == 1);
        head [++head_size] = 0;
        if (strstr (head, "\r\n\r\n"))
            break;
    }
    assert_non_null (strstr (head, " 200 "));

    s_http_t *http = s_post (session, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"flood\"}", NULL);
    assert_int_equal (s_http_status (http), 200);
    s_http_destroy (&http);

    //  Now read: the stream ends early, cut short
    bool closed, complete;
    size_t total = s_raw_drain (fd, &closed, &complete);
    assert_true (closed);
    assert_false (complete);
    assert_true (total < (size_t) FLOOD_MESSAGES * FLOOD_BYTES);
    zstr_free (&session);
}

int
main (void)
{
    zsys_init ();
    curl_global_init (CURL_GLOBAL_DEFAULT);
    s_multi = curl_multi_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_initialize_then_requests_over_sse, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_json_answers_without_sse, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_notifications_reach_the_right_stream, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_refusals, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_bearer_token, s_setup_token, s_teardown),
        cmocka_unit_test (test_addresses),
        cmocka_unit_test (test_token_file),
        cmocka_unit_test_setup_teardown (test_idle_session_expires, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_client_gone_cancels, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_sessions_are_bounded, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_slow_reader_loses_its_stream, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_session_backlog_is_bounded, s_setup, s_teardown),
    };
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    curl_multi_cleanup (s_multi);
    curl_global_cleanup ();
    return rc;
}
