/*  =========================================================================
    test_monitor_httpd - dsh-monitor's HTTP face on loopback, with plain
    sockets: published documents, the first event of a stream, and a client
    that stops reading, which loses its stream while another one keeps
    getting every event and the broadcaster never waits; what trusted and
    untrusted viewers are shown; questions the loop answers (checked
    parameters, the fd it polls, at most so many waiting, and an answer at
    stop); who may act (dsh_monitor_access: named tokens from a token
    file, the page's own origin, sessions' CSRF tokens) and the page's
    actions and session polls over HTTP, refused without each of them;
    and dsh_http's limits: headers that trickle past their deadline, and
    connections from one address
    =========================================================================
*/

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "dsh_monitor_httpd.h"
#include "dsh_monitor_access.h"

#define EVENT_DATA_SIZE     (64 * 1024)
#define EVENTS              256

static const dsh_http_limits_t s_limits = { .per_address = DSH_MONITOR_HTTPD_PER_ADDRESS,
                                            .header_timeout_ms = DSH_HTTP_HEADER_TIMEOUT_MS };

//  The tokens of a token file's text, which must parse.
static dsh_monitor_tokens_t *
s_tokens (const char *text)
{
    char error [256] = "";
    dsh_monitor_tokens_t *tokens = dsh_monitor_tokens_parse (text, error, sizeof error);
    if (!tokens)
        fail_msg ("%s: %s", text, error);
    return tokens;
}

//  A socket connected from 127.0.0.<from> (1 or more).
static int
s_connect (int port, int from, int receive_buffer)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    if (receive_buffer)
        assert_int_equal (setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer), 0);
    struct sockaddr_in local = { .sin_family = AF_INET };
    local.sin_addr.s_addr = htonl (INADDR_LOOPBACK + (uint32_t) from - 1);
    assert_int_equal (bind (fd, (struct sockaddr *) &local, sizeof local), 0);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    assert_int_equal (connect (fd, (struct sockaddr *) &addr, sizeof addr), 0);
    return fd;
}

//  A connected socket that sent "GET path" with the extra header lines
//  (each ending in CRLF, or ""); receive_buffer 0 keeps the system's default.
static int
s_request_with (int port, const char *path, int receive_buffer, const char *headers)
{
    int fd = s_connect (port, 1, receive_buffer);
    char *request = zsys_sprintf ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\n", path, headers);
    assert_int_equal (send (fd, request, strlen (request), 0), (ssize_t) strlen (request));
    zstr_free (&request);
    return fd;
}

static int
s_request (int port, const char *path, int receive_buffer)
{
    return s_request_with (port, path, receive_buffer, "");
}

//  Whether the server closed fd within timeout_ms (what it sent is read
//  and dropped).
static bool
s_closed_within (int fd, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    char buffer [4096];
    while (zclock_mono () < give_up) {
        struct pollfd item = { .fd = fd, .events = POLLIN };
        if (poll (&item, 1, 20) <= 0)
            continue;
        if (recv (fd, buffer, sizeof buffer, 0) <= 0)
            return true;
    }
    return false;
}

//  Reads from fd until at least total bytes came or timeout_ms passed;
//  returns what was read in all (appended to text if not NULL, up to its
//  capacity).
static size_t
s_read_until (int fd, size_t got, size_t total, int timeout_ms, char *text, size_t capacity)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    char buffer [65536];
    while (got < total && zclock_mono () < give_up) {
        struct pollfd item = { .fd = fd, .events = POLLIN };
        if (poll (&item, 1, 100) <= 0)
            continue;
        ssize_t size = recv (fd, buffer, sizeof buffer, 0);
        if (size <= 0)
            break;
        if (text && got < capacity - 1) {
            size_t keep = (size_t) size < capacity - 1 - got? (size_t) size: capacity - 1 - got;
            memcpy (text + got, buffer, keep);
            text [got + keep] = 0;
        }
        got += (size_t) size;
    }
    return got;
}

static bool
s_wait_streams (dsh_monitor_httpd_t *httpd, size_t count, int good_fd, size_t *good_got)
{
    int64_t give_up = zclock_mono () + 15000;
    while (dsh_monitor_httpd_streams (httpd) != count && zclock_mono () < give_up)
        if (good_fd >= 0)
            *good_got = s_read_until (good_fd, *good_got, SIZE_MAX, 50, NULL, 0);
        else
            zclock_sleep (20);
    return dsh_monitor_httpd_streams (httpd) == count;
}

static void
test_documents_and_first_event (void **state)
{
    (void) state;
    char error [256];
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_publish (httpd, DSH_MONITOR_HTTPD_EVERYONE, "/doc", "application/json", "{\"a\":1}", 7);
    dsh_monitor_httpd_set_first (httpd, DSH_MONITOR_HTTPD_EVERYONE, "snapshot", "{\"first\":true}");
    char text [4096] = "";
    int fd = s_request (dsh_monitor_httpd_port (httpd), "/doc", 0);
    s_read_until (fd, 0, SIZE_MAX, 2000, text, sizeof text);
    close (fd);
    assert_non_null (strstr (text, "200 OK"));
    assert_non_null (strstr (text, "{\"a\":1}"));
    fd = s_request (dsh_monitor_httpd_port (httpd), "/nowhere", 0);
    s_read_until (fd, 0, SIZE_MAX, 2000, text, sizeof text);
    close (fd);
    assert_non_null (strstr (text, "404"));
    fd = s_request (dsh_monitor_httpd_port (httpd), DSH_MONITOR_HTTPD_EVENTS, 0);
    size_t got = s_read_until (fd, 0, 1, 2000, text, sizeof text);
    while (!strstr (text, "{\"first\":true}\n\n") && got < sizeof text - 1) {
        size_t before = got;
        got = s_read_until (fd, got, got + 1, 2000, text, sizeof text);
        if (got == before)
            break;
    }
    assert_non_null (strstr (text, "text/event-stream"));
    assert_non_null (strstr (text, "event: snapshot\ndata: {\"first\":true}\n\n"));
    close (fd);
    dsh_monitor_httpd_destroy (&httpd);
    dsh_monitor_httpd_destroy (&httpd);
    //  Beyond loopback without a token: refused
    assert_null (dsh_monitor_httpd_new ("0.0.0.0:0", NULL, &s_limits, error, sizeof error));
    assert_non_null (strstr (error, "needs a bearer token"));
}

static void
test_slow_client_dropped (void **state)
{
    (void) state;
    char error [256];
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    int port = dsh_monitor_httpd_port (httpd);
    //  A small receive buffer, so that the kernel does not hold for it
    //  what the test means to pile up in the server
    int slow = s_request (port, DSH_MONITOR_HTTPD_EVENTS, 4096);
    int good = s_request (port, DSH_MONITOR_HTTPD_EVENTS, 0);
    size_t good_got = 0;
    assert_true (s_wait_streams (httpd, 2, -1, NULL));
    char *data = (char *) malloc (EVENT_DATA_SIZE + 1);
    assert_non_null (data);
    memset (data, 'x', EVENT_DATA_SIZE);
    data [EVENT_DATA_SIZE] = 0;
    size_t event_size = strlen ("event: big\ndata: \n\n") + EVENT_DATA_SIZE;
    for (size_t index = 1; index <= EVENTS; index++) {
        dsh_monitor_httpd_broadcast (httpd, DSH_MONITOR_HTTPD_EVERYONE, "big", data);
        //  The good client keeps up: it has had every event so far
        good_got = s_read_until (good, good_got, index * event_size, 10000, NULL, 0);
        assert_true (good_got >= index * event_size);
    }
    //  16 MiB went out: far past what the slow client's stream may hold
    assert_true (s_wait_streams (httpd, 1, good, &good_got));
    dsh_monitor_httpd_broadcast (httpd, DSH_MONITOR_HTTPD_EVERYONE, "small", "{}");
    size_t before = good_got;
    good_got = s_read_until (good, good_got, good_got + strlen ("event: small\ndata: {}\n\n"), 10000, NULL, 0);
    assert_true (good_got > before);
    free (data);
    close (slow);
    close (good);
    dsh_monitor_httpd_destroy (&httpd);
}

//  What is published for trusted viewers reaches only requests that
//  presented the token; a monitor without a token has no trusted viewer.
static void
test_viewers (void **state)
{
    (void) state;
    char error [256];
    char text [4096];
    for (int with_token = 0; with_token < 2; with_token++) {
        dsh_monitor_tokens_t *tokens = with_token? s_tokens ("t0ken\n"): NULL;
        dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", &tokens, &s_limits, error, sizeof error);
        assert_null (tokens);
        assert_non_null (httpd);
        int port = dsh_monitor_httpd_port (httpd);
        dsh_monitor_httpd_publish (httpd, DSH_MONITOR_HTTPD_UNTRUSTED, "/doc", "text/plain", "public", 6);
        dsh_monitor_httpd_publish (httpd, DSH_MONITOR_HTTPD_TRUSTED, "/doc", "text/plain", "secret", 6);
        dsh_monitor_httpd_set_first (httpd, DSH_MONITOR_HTTPD_UNTRUSTED, "snapshot", "\"public first\"");
        dsh_monitor_httpd_set_first (httpd, DSH_MONITOR_HTTPD_TRUSTED, "snapshot", "\"secret first\"");
        const char *headers = with_token? "Authorization: Bearer t0ken\r\n": "";
        text [0] = 0;
        int fd = s_request_with (port, "/doc", 0, headers);
        s_read_until (fd, 0, SIZE_MAX, 2000, text, sizeof text);
        close (fd);
        assert_non_null (strstr (text, with_token? "secret": "public"));
        assert_null (strstr (text, with_token? "public": "secret"));
        text [0] = 0;
        int stream = s_request_with (port, DSH_MONITOR_HTTPD_EVENTS, 0, headers);
        assert_true (s_wait_streams (httpd, 1, -1, NULL));
        dsh_monitor_httpd_broadcast (httpd, DSH_MONITOR_HTTPD_UNTRUSTED, "stats", "\"public stats\"");
        dsh_monitor_httpd_broadcast (httpd, DSH_MONITOR_HTTPD_TRUSTED, "stats", "\"secret stats\"");
        dsh_monitor_httpd_broadcast (httpd, DSH_MONITOR_HTTPD_EVERYONE, "tools", "\"everyone\"");
        size_t got = 0;
        while (!strstr (text, "everyone")) {
            size_t before = got;
            got = s_read_until (stream, got, got + 1, 2000, text, sizeof text);
            if (got == before)
                break;
        }
        close (stream);
        assert_non_null (strstr (text, "everyone"));
        assert_non_null (strstr (text, with_token? "secret first": "public first"));
        assert_non_null (strstr (text, with_token? "secret stats": "public stats"));
        assert_null (strstr (text, with_token? "public": "secret"));
        if (with_token) {
            //  Without the token: refused, however the document is published
            text [0] = 0;
            fd = s_request (port, "/doc", 0);
            s_read_until (fd, 0, SIZE_MAX, 2000, text, sizeof text);
            close (fd);
            assert_non_null (strstr (text, "401"));
            assert_null (strstr (text, "secret"));
        }
        dsh_monitor_httpd_destroy (&httpd);
    }
}

//  A request whose headers trickle in, a byte at a time well within the
//  idle timeout, is closed at its header deadline; a prompt request on the
//  same server is served.
static void
test_header_deadline (void **state)
{
    (void) state;
    char error [256];
    const dsh_http_limits_t limits = { .per_address = DSH_MONITOR_HTTPD_PER_ADDRESS, .header_timeout_ms = 600 };
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_publish (httpd, DSH_MONITOR_HTTPD_EVERYONE, "/doc", "text/plain", "doc", 3);
    int port = dsh_monitor_httpd_port (httpd);
    int fd = s_connect (port, 1, 0);
    int64_t started = zclock_mono ();
    const char *partial = "GET /doc HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    bool closed = false;
    for (size_t index = 0; partial [index] && !closed; index++) {
        if (send (fd, partial + index, 1, MSG_NOSIGNAL) != 1)
            break;
        closed = s_closed_within (fd, 100);
    }
    int64_t elapsed = zclock_mono () - started;
    assert_true (closed || s_closed_within (fd, 2000));
    assert_true (elapsed >= 500);
    assert_true (elapsed < 3000);
    close (fd);
    char text [4096] = "";
    fd = s_request (port, "/doc", 0);
    s_read_until (fd, 0, SIZE_MAX, 2000, text, sizeof text);
    close (fd);
    assert_non_null (strstr (text, "200 OK"));
    dsh_monitor_httpd_destroy (&httpd);
}

//  One address gets per_address connections; the next is closed at once,
//  while another address is still served.
static void
test_per_address_limit (void **state)
{
    (void) state;
    char error [256];
    const dsh_http_limits_t limits = { .per_address = 2, .header_timeout_ms = DSH_HTTP_HEADER_TIMEOUT_MS };
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_publish (httpd, DSH_MONITOR_HTTPD_EVERYONE, "/doc", "text/plain", "doc", 3);
    int port = dsh_monitor_httpd_port (httpd);
    int held [2];
    for (int index = 0; index < 2; index++) {
        held [index] = s_connect (port, 2, 0);
        assert_int_equal (send (held [index], "G", 1, 0), 1);
        assert_false (s_closed_within (held [index], 200));
    }
    int third = s_connect (port, 2, 0);
    assert_true (s_closed_within (third, 2000));
    close (third);
    char text [4096] = "";
    int fd = s_request (port, "/doc", 0);
    s_read_until (fd, 0, SIZE_MAX, 2000, text, sizeof text);
    close (fd);
    assert_non_null (strstr (text, "200 OK"));
    close (held [0]);
    close (held [1]);
    dsh_monitor_httpd_destroy (&httpd);
}

//  A viewer closing its page is normal: the stream ends without a warning
//  (libmicrohttpd reports the failed write to a socket the peer closed).
static void
test_client_leaving_is_quiet (void **state)
{
    (void) state;
    zsys_init ();
    FILE *log = tmpfile ();
    assert_non_null (log);
    zsys_set_logstream (log);
    char error [256];
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_set_first (httpd, DSH_MONITOR_HTTPD_EVERYONE, "snapshot", "{}");
    for (int round = 0; round < 2; round++) {
        int fd = s_request (dsh_monitor_httpd_port (httpd), DSH_MONITOR_HTTPD_EVENTS, 0);
        size_t got = 0;
        assert_true (s_wait_streams (httpd, 1, fd, &got));
        //  The second leaves with a reset, the first with a plain close
        if (round) {
            struct linger abort_on_close = { .l_onoff = 1, .l_linger = 0 };
            assert_int_equal (setsockopt (fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close), 0);
        }
        close (fd);
        //  Writes find the socket closed, and the stream ends
        int64_t give_up = zclock_mono () + 15000;
        while (dsh_monitor_httpd_streams (httpd) && zclock_mono () < give_up) {
            dsh_monitor_httpd_broadcast (httpd, DSH_MONITOR_HTTPD_EVERYONE, "stats", "{\"tick\":1}");
            zclock_sleep (20);
        }
        assert_int_equal (dsh_monitor_httpd_streams (httpd), 0);
    }
    dsh_monitor_httpd_destroy (&httpd);
    zsys_set_logstream (stderr);
    fflush (log);
    rewind (log);
    char line [1024];
    while (fgets (line, sizeof line, log))
        if (strstr (line, "Failed to send") || strncmp (line, "W:", 2) == 0)
            fail_msg ("a client leaving was logged: %s", line);
    fclose (log);
}

//  A question's check: takes "n" alone (any text but "bad"), and "n" is
//  what the loop is asked.
static json_t *
s_check_n (const json_t *parameters, char *error, size_t error_size)
{
    const char *n = json_string_value (json_object_get (parameters, "n"));
    if (json_object_size (parameters) != 1 || !n || streq (n, "bad")) {
        snprintf (error, error_size, "n is wanted, and not \"bad\"");
        return NULL;
    }
    return json_pack ("{s:s}", "n", n);
}

//  Whether fd is readable within timeout_ms.
static bool
s_readable (int fd, int timeout_ms)
{
    struct pollfd item = { .fd = fd, .events = POLLIN };
    return poll (&item, 1, timeout_ms) == 1;
}

//  What the server sent on fd (a request that closes its connection), and fd closed.
static void
s_response (int fd, char *text, size_t capacity)
{
    text [0] = 0;
    s_read_until (fd, 0, SIZE_MAX, 5000, text, capacity);
    close (fd);
}

static void
test_questions (void **state)
{
    (void) state;
    char error [256];
    char text [4096];
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_ask (httpd, "/q", DSH_MONITOR_HTTPD_ASK_READ, s_check_n);
    int port = dsh_monitor_httpd_port (httpd);
    int fd = dsh_monitor_httpd_fd (httpd);
    dsh_monitor_httpd_question_t question;
    assert_null (dsh_monitor_httpd_recv (httpd, &question));
    assert_false (s_readable (fd, 0));

    //  Asked, taken from the fd, answered
    int client = s_request_with (port, "/q?n=%3Cb%3E%20x", 0, "Connection: close\r\n");
    assert_true (s_readable (fd, 5000));
    json_t *asked = dsh_monitor_httpd_recv (httpd, &question);
    assert_non_null (asked);
    assert_string_equal (question.path, "/q");
    assert_false (question.trusted);
    assert_null (question.actor);
    uint64_t id = question.id;
    assert_string_equal (json_string_value (json_object_get (asked, "n")), "<b> x");
    json_decref (asked);
    assert_null (dsh_monitor_httpd_recv (httpd, &question));
    assert_false (s_readable (fd, 0));
    //  Still waiting: nothing is sent before the answer
    assert_false (s_readable (client, 200));
    dsh_monitor_httpd_answer (httpd, id + 1000, 200, "application/json", "{\"wrong\":1}", 11);
    dsh_monitor_httpd_answer (httpd, id, 502, "application/json", "{\"ok\":false}", 12);
    s_response (client, text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 502"));
    assert_non_null (strstr (text, "application/json"));
    assert_non_null (strstr (text, "nosniff"));
    assert_non_null (strstr (text, "{\"ok\":false}"));
    assert_null (strstr (text, "wrong"));

    //  Refused before the loop hears of them: the check's reason, a
    //  parameter twice, one that is not UTF-8
    const char *refused [][2] = {
        { "/q?n=bad", "n is wanted, and not \"bad\"" },
        { "/q?m=1", "n is wanted" },
        { "/q?n=1&n=2", "given twice" },
        { "/q?n=%FF", "not UTF-8 text" },
    };
    for (size_t index = 0; index < sizeof refused / sizeof refused [0]; index++) {
        s_response (s_request_with (port, refused [index][0], 0, "Connection: close\r\n"), text, sizeof text);
        assert_non_null (strstr (text, "HTTP/1.1 400"));
        if (!strstr (text, refused [index][1]))
            fail_msg ("%s: %s", refused [index][0], text);
    }
    assert_false (s_readable (fd, 0));
    assert_null (dsh_monitor_httpd_recv (httpd, &question));

    //  At most DSH_MONITOR_HTTPD_MAX_QUESTIONS wait; then one more is 503
    int waiting [DSH_MONITOR_HTTPD_MAX_QUESTIONS];
    uint64_t ids [DSH_MONITOR_HTTPD_MAX_QUESTIONS];
    size_t taken = 0;
    for (size_t index = 0; index < DSH_MONITOR_HTTPD_MAX_QUESTIONS; index++) {
        char *where = zsys_sprintf ("/q?n=%zu", index);
        waiting [index] = s_request_with (port, where, 0, "Connection: close\r\n");
        zstr_free (&where);
    }
    int64_t give_up = zclock_mono () + 10000;
    while (taken < DSH_MONITOR_HTTPD_MAX_QUESTIONS && zclock_mono () < give_up) {
        if (!s_readable (fd, 100))
            continue;
        while (taken < DSH_MONITOR_HTTPD_MAX_QUESTIONS && (asked = dsh_monitor_httpd_recv (httpd, &question))) {
            ids [taken++] = question.id;
            json_decref (asked);
        }
    }
    assert_int_equal (taken, DSH_MONITOR_HTTPD_MAX_QUESTIONS);
    s_response (s_request_with (port, "/q?n=one-more", 0, "Connection: close\r\n"), text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 503"));
    //  Each gets its own answer
    for (size_t index = 0; index < taken; index++) {
        char *body = zsys_sprintf ("answer %" PRIu64, ids [index]);
        dsh_monitor_httpd_answer (httpd, ids [index], 200, "text/plain", body, strlen (body));
        zstr_free (&body);
    }
    for (size_t index = 0; index < taken; index++) {
        s_response (waiting [index], text, sizeof text);
        assert_non_null (strstr (text, "HTTP/1.1 200"));
        assert_non_null (strstr (text, "answer "));
    }

    //  A question the loop never answers is answered 503 at stop
    client = s_request_with (port, "/q?n=late", 0, "Connection: close\r\n");
    assert_true (s_readable (fd, 5000));
    dsh_monitor_httpd_destroy (&httpd);
    s_response (client, text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 503"));
    assert_non_null (strstr (text, "the monitor is stopping"));
}

//  With a token, a question needs it like any request, and says whether
//  its viewer presented it.
static void
test_question_trusted (void **state)
{
    (void) state;
    char error [256];
    char text [4096];
    dsh_monitor_tokens_t *tokens = s_tokens ("t0ken");
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", &tokens, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_ask (httpd, "/q", DSH_MONITOR_HTTPD_ASK_READ, s_check_n);
    int port = dsh_monitor_httpd_port (httpd);
    s_response (s_request_with (port, "/q?n=1", 0, "Connection: close\r\n"), text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 401"));
    int client = s_request_with (port, "/q?n=1", 0, "Connection: close\r\nAuthorization: Bearer t0ken\r\n");
    assert_true (s_readable (dsh_monitor_httpd_fd (httpd), 5000));
    dsh_monitor_httpd_question_t question;
    json_t *asked = dsh_monitor_httpd_recv (httpd, &question);
    assert_non_null (asked);
    assert_true (question.trusted);
    //  A read acts as nobody, even with a token
    assert_null (question.actor);
    json_decref (asked);
    dsh_monitor_httpd_answer (httpd, question.id, 200, "application/json", "{}", 2);
    s_response (client, text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 200"));
    dsh_monitor_httpd_destroy (&httpd);
}

//  Token files: "NAME TOKEN" lines, a bare token named "token", blank
//  lines skipped; anything else refused with its line.
static void
test_token_file (void **state)
{
    (void) state;
    char error [256];
    dsh_monitor_tokens_t *tokens = s_tokens ("  s3cret-1 \n");
    assert_int_equal (dsh_monitor_tokens_size (tokens), 1);
    assert_string_equal (dsh_monitor_tokens_name (tokens, 0), DSH_MONITOR_TOKEN_DEFAULT_NAME);
    assert_int_equal (dsh_monitor_tokens_match (tokens, "s3cret-1", 8), 0);
    assert_int_equal (dsh_monitor_tokens_match (tokens, "s3cret-", 7), -1);
    assert_int_equal (dsh_monitor_tokens_match (tokens, "s3cret-12", 9), -1);
    dsh_monitor_tokens_destroy (&tokens);
    dsh_monitor_tokens_destroy (&tokens);

    tokens = s_tokens ("alice a-token\n\n\tbob\tb-token\r\nops@host.example ops.token\n");
    assert_int_equal (dsh_monitor_tokens_size (tokens), 3);
    assert_string_equal (dsh_monitor_tokens_name (tokens, 1), "bob");
    assert_int_equal (dsh_monitor_tokens_match (tokens, "b-token", 7), 1);
    assert_int_equal (dsh_monitor_tokens_match (tokens, "ops.token", 9), 2);
    assert_int_equal (dsh_monitor_tokens_match (tokens, "bob", 3), -1);
    dsh_monitor_tokens_destroy (&tokens);

    const char *refused [][2] = {
        { "", "no token" },
        { "\n  \n", "no token" },
        { "alice a b\n", "line 1: one \"NAME TOKEN\"" },
        { "alice a\nalice b\n", "line 2: the name \"alice\" is given twice" },
        { "alice a\nbob a\n", "line 2: the token of \"bob\" is \"alice\"'s too" },
        { "a\nb\n", "line 2: the name \"token\" is given twice" },
        { "al/ice a\n", "line 1: a token's name" },
        { "alice t\x01oken\n", "line 1: a token is" },
    };
    for (size_t index = 0; index < sizeof refused / sizeof refused [0]; index++) {
        error [0] = 0;
        assert_null (dsh_monitor_tokens_parse (refused [index][0], error, sizeof error));
        if (!strstr (error, refused [index][1]))
            fail_msg ("\"%s\": %s", refused [index][0], error);
    }
    //  From a file, and a file that is not there
    char path [] = "/tmp/test_monitor_tokens_XXXXXX";
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    const char *text = "alice a-token\nbob b-token\n";
    assert_int_equal (write (fd, text, strlen (text)), (ssize_t) strlen (text));
    close (fd);
    tokens = dsh_monitor_tokens_read (path, error, sizeof error);
    assert_non_null (tokens);
    assert_int_equal (dsh_monitor_tokens_size (tokens), 2);
    dsh_monitor_tokens_destroy (&tokens);
    unlink (path);
    assert_null (dsh_monitor_tokens_read (path, error, sizeof error));
    assert_non_null (strstr (error, "cannot read the token file"));
}

//  The page's own origin: Origin, else Referer, names the host the
//  request was sent to; another port, another host, "null" or nothing are not.
static void
test_same_origin (void **state)
{
    (void) state;
    char why [512];
    assert_true (dsh_monitor_access_same_origin ("127.0.0.1:7580", "http://127.0.0.1:7580", NULL, why, sizeof why));
    assert_true (dsh_monitor_access_same_origin ("Monitor.Example", "https://monitor.example", NULL, why, sizeof why));
    assert_true (dsh_monitor_access_same_origin ("127.0.0.1:7580", NULL, "http://127.0.0.1:7580/?x=1", why,
                                                 sizeof why));
    const char *refused [][4] = {
        //  host, origin, referer, why
        { "127.0.0.1:7580", "http://127.0.0.1:8000", NULL, "Origin \"http://127.0.0.1:8000\" is not" },
        { "127.0.0.1:7580", "http://localhost:7580", NULL, "is not this page's origin" },
        { "127.0.0.1:7580", "http://127.0.0.1:75800", NULL, "is not this page's origin" },
        { "127.0.0.1:7580", "null", NULL, "is not this page's origin" },
        { "127.0.0.1:7580", "ftp://127.0.0.1:7580", NULL, "is not this page's origin" },
        //  An Origin decides, whatever the Referer says
        { "127.0.0.1:7580", "http://evil.example", "http://127.0.0.1:7580/", "Origin" },
        { "127.0.0.1:7580", NULL, "http://127.0.0.1:7580.evil.example/", "Referer" },
        { "127.0.0.1:7580", NULL, NULL, "needs an Origin or Referer" },
        { NULL, "http://127.0.0.1:7580", NULL, "no Host" },
    };
    for (size_t index = 0; index < sizeof refused / sizeof refused [0]; index++) {
        why [0] = 0;
        assert_false (dsh_monitor_access_same_origin (refused [index][0], refused [index][1], refused [index][2],
                                                      why, sizeof why));
        if (!strstr (why, refused [index][3]))
            fail_msg ("case %zu: %s", index, why);
    }
}

//  Sessions: a CSRF token is its session's, of its actor only, until it
//  idles out or the least recently seen goes for a new one.
static void
test_sessions (void **state)
{
    (void) state;
    char why [256];
    dsh_monitor_sessions_t *sessions = dsh_monitor_sessions_new ();
    char alice [65], bob [65];
    assert_int_equal (dsh_monitor_sessions_open (sessions, "alice", 1000, alice), 0);
    assert_int_equal (dsh_monitor_sessions_open (sessions, "bob", 1000, bob), 0);
    assert_int_equal (strlen (alice), 64);
    assert_string_not_equal (alice, bob);
    assert_true (dsh_monitor_sessions_check (sessions, alice, "alice", 2000, why, sizeof why));
    assert_false (dsh_monitor_sessions_check (sessions, alice, "bob", 2000, why, sizeof why));
    assert_non_null (strstr (why, "another token's session"));
    assert_false (dsh_monitor_sessions_check (sessions, NULL, "alice", 2000, why, sizeof why));
    assert_non_null (strstr (why, "no CSRF token"));
    char forged [65];
    memcpy (forged, alice, sizeof forged);
    forged [0] = forged [0] == 'a'? 'b': 'a';
    assert_false (dsh_monitor_sessions_check (sessions, forged, "alice", 2000, why, sizeof why));
    assert_non_null (strstr (why, "not a live session's"));
    //  Seen at 2000, alice lives; bob, unseen since 1000, idles out
    int64_t later = 1000 + DSH_MONITOR_SESSION_IDLE_MS + 500;
    assert_true (dsh_monitor_sessions_check (sessions, alice, "alice", later, why, sizeof why));
    assert_false (dsh_monitor_sessions_check (sessions, bob, "bob", later, why, sizeof why));
    assert_int_equal (dsh_monitor_sessions_size (sessions), 1);
    //  Full: the least recently seen goes
    char csrf [65];
    for (int index = 1; index < DSH_MONITOR_SESSIONS_MAX; index++)
        assert_int_equal (dsh_monitor_sessions_open (sessions, "carol", later + index, csrf), 0);
    assert_int_equal (dsh_monitor_sessions_size (sessions), DSH_MONITOR_SESSIONS_MAX);
    assert_int_equal (dsh_monitor_sessions_open (sessions, "dave", later + 1000, csrf), 0);
    assert_int_equal (dsh_monitor_sessions_size (sessions), DSH_MONITOR_SESSIONS_MAX);
    assert_false (dsh_monitor_sessions_check (sessions, alice, "alice", later + 1000, why, sizeof why));
    assert_true (dsh_monitor_sessions_check (sessions, csrf, "dave", later + 1000, why, sizeof why));
    dsh_monitor_sessions_destroy (&sessions);
    dsh_monitor_sessions_destroy (&sessions);
}

//  A connected socket that sent method path with the extra header lines
//  and body (NULL: none, and no Content-Length).
static int
s_request_body (int port, const char *method, const char *path, const char *headers, const char *body)
{
    int fd = s_connect (port, 1, 0);
    char *length = body? zsys_sprintf ("Content-Length: %zu\r\n", strlen (body)): strdup ("");
    char *request = zsys_sprintf ("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s%s\r\n%s",
                                  method, path, port, headers, length, body? body: "");
    assert_int_equal (send (fd, request, strlen (request), 0), (ssize_t) strlen (request));
    zstr_free (&request);
    zstr_free (&length);
    return fd;
}

//  The CSRF token in a GET /api/session answer, into csrf.
static void
s_session (int port, const char *headers, char csrf [65], const char *actor)
{
    char text [4096];
    s_response (s_request_body (port, "GET", DSH_MONITOR_HTTPD_SESSION, headers, NULL), text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 200"));
    assert_non_null (strstr (text, "no-store"));
    json_t *doc = json_loads (strstr (text, "\r\n\r\n") + 4, 0, NULL);
    assert_non_null (doc);
    assert_string_equal (json_string_value (json_object_get (doc, "actor")), actor);
    assert_string_equal (json_string_value (json_object_get (doc, "header")), DSH_MONITOR_CSRF_HEADER);
    const char *given = json_string_value (json_object_get (doc, "csrf"));
    assert_int_equal (strlen (given), 64);
    memcpy (csrf, given, 65);
    json_decref (doc);
}

//  A request that must be refused before the loop hears of it: status and
//  a piece of its text.
static void
s_refused (dsh_monitor_httpd_t *httpd, int fd, const char *status, const char *why)
{
    char text [4096];
    s_response (fd, text, sizeof text);
    if (!strstr (text, status) || !strstr (text, why))
        fail_msg ("wanted %s with \"%s\", got: %s", status, why, text);
    dsh_monitor_httpd_question_t question;
    assert_null (dsh_monitor_httpd_recv (httpd, &question));
}

//  The page's actions: POST only, with a token (named, as who acts), the
//  page's origin and a CSRF token of that token's session; each missing
//  piece refused with 403 and why, before any body is read. A session's
//  poll needs the CSRF token too; a read needs neither.
static void
test_actions (void **state)
{
    (void) state;
    char error [256];
    char text [4096];
    dsh_monitor_tokens_t *tokens = s_tokens ("alice a-token\nbob b-token\n");
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", &tokens, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_ask (httpd, "/act", DSH_MONITOR_HTTPD_ASK_ACTION, s_check_n);
    dsh_monitor_httpd_ask (httpd, "/poll", DSH_MONITOR_HTTPD_ASK_SESSION, s_check_n);
    int port = dsh_monitor_httpd_port (httpd);
    char *origin = zsys_sprintf ("Origin: http://127.0.0.1:%d\r\n", port);
    const char *alice = "Authorization: Bearer a-token\r\n";

    //  No session without a token
    s_refused (httpd, s_request_body (port, "GET", DSH_MONITOR_HTTPD_SESSION, "", NULL), "HTTP/1.1 401", "token");
    char csrf [65], bob_csrf [65];
    s_session (port, alice, csrf, "alice");
    s_session (port, "Authorization: Bearer b-token\r\n", bob_csrf, "bob");
    char *alice_csrf = zsys_sprintf ("%s" DSH_MONITOR_CSRF_HEADER ": %s\r\n", alice, csrf);
    char *full = zsys_sprintf ("%s%s", alice_csrf, origin);

    //  Each piece missing
    const char *body = "{\"n\":\"x\"}";
    s_refused (httpd, s_request_body (port, "POST", "/act", origin, body), "HTTP/1.1 401", "needs its token");
    char *headers = zsys_sprintf ("%s%s", alice, origin);
    s_refused (httpd, s_request_body (port, "POST", "/act", headers, body), "HTTP/1.1 403", "no CSRF token");
    zstr_free (&headers);
    s_refused (httpd, s_request_body (port, "POST", "/act", alice_csrf, body), "HTTP/1.1 403",
               "needs an Origin or Referer");
    headers = zsys_sprintf ("%sOrigin: http://127.0.0.1:1\r\n", alice_csrf);
    s_refused (httpd, s_request_body (port, "POST", "/act", headers, body), "HTTP/1.1 403",
               "is not this page's origin");
    zstr_free (&headers);
    headers = zsys_sprintf ("Authorization: Bearer b-token\r\n" DSH_MONITOR_CSRF_HEADER ": %s\r\n%s", csrf, origin);
    s_refused (httpd, s_request_body (port, "POST", "/act", headers, body), "HTTP/1.1 403", "another token's session");
    zstr_free (&headers);
    //  POST elsewhere, GET of an action
    s_refused (httpd, s_request_body (port, "POST", "/poll", full, body), "HTTP/1.1 405", "only the page's actions");
    s_refused (httpd, s_request_body (port, "GET", "/act", full, NULL), "HTTP/1.1 405", "an action is a POST");
    s_refused (httpd, s_request_body (port, "PUT", "/act", full, body), "HTTP/1.1 405", "Method Not Allowed");
    //  What the body may be
    s_refused (httpd, s_request_body (port, "POST", "/act", full, "[1]"), "HTTP/1.1 400", "not a JSON object");
    s_refused (httpd, s_request_body (port, "POST", "/act", full, "{\"n\":\"x\",\"n\":\"y\"}"), "HTTP/1.1 400",
               "not a JSON object");
    s_refused (httpd, s_request_body (port, "POST", "/act", full, "{\"n\":\"bad\"}"), "HTTP/1.1 400",
               "n is wanted");
    s_refused (httpd, s_request_body (port, "POST", "/act", full, ""), "HTTP/1.1 400", "not a JSON object");
    char *large = (char *) malloc (DSH_MONITOR_HTTPD_MAX_BODY + 20);
    assert_non_null (large);
    memset (large, ' ', DSH_MONITOR_HTTPD_MAX_BODY + 19);
    large [0] = '{';
    large [DSH_MONITOR_HTTPD_MAX_BODY + 18] = '}';
    large [DSH_MONITOR_HTTPD_MAX_BODY + 19] = 0;
    s_refused (httpd, s_request_body (port, "POST", "/act", full, large), "HTTP/1.1 413", "at most");
    free (large);

    //  All there: the loop is asked, as alice, with the body's check
    int client = s_request_body (port, "POST", "/act", full, body);
    assert_true (s_readable (dsh_monitor_httpd_fd (httpd), 5000));
    dsh_monitor_httpd_question_t question;
    json_t *asked = dsh_monitor_httpd_recv (httpd, &question);
    assert_non_null (asked);
    assert_string_equal (question.path, "/act");
    assert_string_equal (question.actor, "alice");
    assert_true (question.trusted);
    assert_string_equal (json_string_value (json_object_get (asked, "n")), "x");
    json_decref (asked);
    dsh_monitor_httpd_answer (httpd, question.id, 200, "application/json", "{\"ok\":true}", 11);
    s_response (client, text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 200"));
    assert_non_null (strstr (text, "{\"ok\":true}"));
    //  A Referer of the page does as an Origin
    headers = zsys_sprintf ("%sReferer: http://127.0.0.1:%d/\r\n", alice_csrf, port);
    client = s_request_body (port, "POST", "/act", headers, body);
    zstr_free (&headers);
    assert_true (s_readable (dsh_monitor_httpd_fd (httpd), 5000));
    asked = dsh_monitor_httpd_recv (httpd, &question);
    assert_non_null (asked);
    json_decref (asked);
    dsh_monitor_httpd_answer (httpd, question.id, 200, "application/json", "{}", 2);
    s_response (client, text, sizeof text);

    //  A session's poll: the CSRF token, no origin needed
    s_refused (httpd, s_request_body (port, "GET", "/poll?n=1", alice, NULL), "HTTP/1.1 403", "no CSRF token");
    client = s_request_body (port, "GET", "/poll?n=1", alice_csrf, NULL);
    assert_true (s_readable (dsh_monitor_httpd_fd (httpd), 5000));
    asked = dsh_monitor_httpd_recv (httpd, &question);
    assert_non_null (asked);
    assert_string_equal (question.actor, "alice");
    json_decref (asked);
    dsh_monitor_httpd_answer (httpd, question.id, 200, "application/json", "{}", 2);
    s_response (client, text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 200"));
    zstr_free (&alice_csrf);
    zstr_free (&full);
    dsh_monitor_httpd_destroy (&httpd);

    //  Without tokens, a loopback peer acts as "loopback"
    httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, &s_limits, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_ask (httpd, "/act", DSH_MONITOR_HTTPD_ASK_ACTION, s_check_n);
    port = dsh_monitor_httpd_port (httpd);
    zstr_free (&origin);
    origin = zsys_sprintf ("Origin: http://127.0.0.1:%d\r\n", port);
    s_session (port, "", csrf, DSH_MONITOR_LOOPBACK_ACTOR);
    headers = zsys_sprintf ("%s" DSH_MONITOR_CSRF_HEADER ": %s\r\n", origin, csrf);
    client = s_request_body (port, "POST", "/act", headers, body);
    zstr_free (&headers);
    assert_true (s_readable (dsh_monitor_httpd_fd (httpd), 5000));
    asked = dsh_monitor_httpd_recv (httpd, &question);
    assert_non_null (asked);
    assert_string_equal (question.actor, DSH_MONITOR_LOOPBACK_ACTOR);
    assert_false (question.trusted);
    json_decref (asked);
    dsh_monitor_httpd_answer (httpd, question.id, 200, "application/json", "{}", 2);
    s_response (client, text, sizeof text);
    assert_non_null (strstr (text, "HTTP/1.1 200"));
    zstr_free (&origin);
    dsh_monitor_httpd_destroy (&httpd);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_documents_and_first_event),
        cmocka_unit_test (test_slow_client_dropped),
        cmocka_unit_test (test_viewers),
        cmocka_unit_test (test_header_deadline),
        cmocka_unit_test (test_per_address_limit),
        cmocka_unit_test (test_client_leaving_is_quiet),
        cmocka_unit_test (test_questions),
        cmocka_unit_test (test_question_trusted),
        cmocka_unit_test (test_token_file),
        cmocka_unit_test (test_same_origin),
        cmocka_unit_test (test_sessions),
        cmocka_unit_test (test_actions),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
