/*  =========================================================================
    test_monitor_httpd - dsh-monitor's HTTP face on loopback, with plain
    sockets: published documents, the first event of a stream, and a client
    that stops reading, which loses its stream while another one keeps
    getting every event and the broadcaster never waits
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

#define EVENT_DATA_SIZE     (64 * 1024)
#define EVENTS              256

//  A connected socket that sent "GET path"; receive_buffer 0 keeps the
//  system's default.
static int
s_request (int port, const char *path, int receive_buffer)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    if (receive_buffer)
        assert_int_equal (setsockopt (fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer), 0);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    assert_int_equal (connect (fd, (struct sockaddr *) &addr, sizeof addr), 0);
    char *request = zsys_sprintf ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    assert_int_equal (send (fd, request, strlen (request), 0), (ssize_t) strlen (request));
    zstr_free (&request);
    return fd;
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
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, error, sizeof error);
    assert_non_null (httpd);
    dsh_monitor_httpd_publish (httpd, "/doc", "application/json", "{\"a\":1}", 7);
    dsh_monitor_httpd_set_first (httpd, "snapshot", "{\"first\":true}");
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
    assert_null (dsh_monitor_httpd_new ("0.0.0.0:0", NULL, error, sizeof error));
    assert_non_null (strstr (error, "needs a bearer token"));
}

static void
test_slow_client_dropped (void **state)
{
    (void) state;
    char error [256];
    dsh_monitor_httpd_t *httpd = dsh_monitor_httpd_new ("127.0.0.1:0", NULL, error, sizeof error);
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
        dsh_monitor_httpd_broadcast (httpd, "big", data);
        //  The good client keeps up: it has had every event so far
        good_got = s_read_until (good, good_got, index * event_size, 10000, NULL, 0);
        assert_true (good_got >= index * event_size);
    }
    //  16 MiB went out: far past what the slow client's stream may hold
    assert_true (s_wait_streams (httpd, 1, good, &good_got));
    dsh_monitor_httpd_broadcast (httpd, "small", "{}");
    size_t before = good_got;
    good_got = s_read_until (good, good_got, good_got + strlen ("event: small\ndata: {}\n\n"), 10000, NULL, 0);
    assert_true (good_got > before);
    free (data);
    close (slow);
    close (good);
    dsh_monitor_httpd_destroy (&httpd);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_documents_and_first_event),
        cmocka_unit_test (test_slow_client_dropped),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
