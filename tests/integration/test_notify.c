/*  =========================================================================
    test_notify - dsh-broker tells systemd when it is ready

    A real dsh-broker started with $NOTIFY_SOCKET naming a unix datagram
    socket the test binds, as systemd does for a unit of Type=notify: the
    broker sends READY=1 (with STATUS= naming its front) once its sockets
    are bound, then STOPPING=1 on SIGTERM; a broker that cannot bind sends
    no READY=1. Skipped (77) when dsh-broker is built without libsystemd.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh_testkit.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#define S_HEARTBEAT_MS  500

typedef struct {
    char directory [64];        //  holds the socket
    char path [96];             //  what $NOTIFY_SOCKET names (fits sun_path)
    int socket_fd;
} notify_t;

static int
s_setup (void **state)
{
    notify_t *notify = (notify_t *) zmalloc (sizeof (notify_t));
    snprintf (notify->directory, sizeof (notify->directory), "/tmp/dsh-notify-XXXXXX");
    assert_non_null (mkdtemp (notify->directory));
    snprintf (notify->path, sizeof (notify->path), "%s/notify", notify->directory);
    notify->socket_fd = socket (AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true (notify->socket_fd >= 0);
    struct sockaddr_un address = { .sun_family = AF_UNIX };
    snprintf (address.sun_path, sizeof (address.sun_path), "%s", notify->path);
    assert_int_equal (bind (notify->socket_fd, (struct sockaddr *) &address, sizeof (address)), 0);
    *state = notify;
    return 0;
}

static int
s_teardown (void **state)
{
    notify_t *notify = (notify_t *) *state;
    close (notify->socket_fd);
    unlink (notify->path);
    rmdir (notify->directory);
    free (notify);
    return 0;
}

//  The next datagram, waiting up to timeout_ms; NULL if none came. Caller
//  frees.
static char *
s_receive (notify_t *notify, int timeout_ms)
{
    struct pollfd item = { .fd = notify->socket_fd, .events = POLLIN };
    if (poll (&item, 1, timeout_ms) != 1)
        return NULL;
    char buffer [4096];
    ssize_t size = recv (notify->socket_fd, buffer, sizeof (buffer) - 1, 0);
    if (size < 0)
        return NULL;
    buffer [size] = 0;
    return strdup (buffer);
}

//  A broker started as systemd starts one: $NOTIFY_SOCKET in its
//  environment, and only in its.
static dsh_testproc_t *
s_broker (notify_t *notify, const char *const *extra, char *endpoint, size_t size)
{
    setenv ("NOTIFY_SOCKET", notify->path, 1);
    dsh_testproc_t *broker = dsh_testkit_broker (S_HEARTBEAT_MS, extra, endpoint, size);
    unsetenv ("NOTIFY_SOCKET");
    return broker;
}

static void
test_ready_then_stopping (void **state)
{
    notify_t *notify = (notify_t *) *state;
    char endpoint [256];
    dsh_testproc_t *broker = s_broker (notify, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);

    char *ready = s_receive (notify, 10000);
    assert_non_null (ready);
    char *expected = zsys_sprintf ("READY=1\nSTATUS=listening on %s", endpoint);
    assert_string_equal (ready, expected);
    zstr_free (&expected);
    free (ready);
    //  Ready means serving: the front it named answers
    const char *args [] = { "ping", NULL };
    assert_int_equal (dsh_testkit_cli (endpoint, args, 10000, NULL), 0);

    dsh_testproc_signal (broker, SIGTERM);
    char *stopping = s_receive (notify, 10000);
    assert_non_null (stopping);
    assert_string_equal (stopping, "STOPPING=1");
    free (stopping);
    assert_int_equal (dsh_testproc_wait (broker, 10000), 0);
    dsh_testproc_destroy (&broker);
}

//  A second broker on the first one's front cannot bind it: it exits, and
//  systemd must not have heard READY=1 from it.
static void
test_no_ready_without_sockets (void **state)
{
    notify_t *notify = (notify_t *) *state;
    char endpoint [256];
    dsh_testproc_t *first = dsh_testkit_broker (S_HEARTBEAT_MS, NULL, endpoint, sizeof (endpoint));
    assert_non_null (first);

    setenv ("NOTIFY_SOCKET", notify->path, 1);
    const char *argv [] = { "broker/dsh-broker", "--endpoint", endpoint, NULL };
    dsh_testproc_t *second = dsh_testproc_start_merged (argv);
    unsetenv ("NOTIFY_SOCKET");
    assert_non_null (second);
    assert_int_equal (dsh_testproc_wait (second, 10000), 1);
    //  A datagram sent before the exit is queued by now
    assert_null (s_receive (notify, 0));
    dsh_testproc_destroy (&second);
    dsh_testproc_destroy (&first);
}

int
main (void)
{
#if !DSH_HAVE_SYSTEMD
    printf ("dsh-broker is built without libsystemd: nothing to test\n");
    return 77;
#endif
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_ready_then_stopping, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_no_ready_without_sockets, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
