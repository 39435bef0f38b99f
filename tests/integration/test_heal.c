/*  =========================================================================
    test_heal - components that follow several brokers and find a broker
    again when it goes silent; real brokers and components on loopback

    A broker killed and started again on the same front but other work and
    announce ports gets the tools back from the running component; a broker
    stopped past the liveness window and let go is found again; a component
    serving two brokers keeps serving one while the other is down, and is
    back at the other when it returns; a bad broker list is refused; a
    client whose broker comes up only after the liveness window (a link
    slow to connect, a broker restarting) gets its answer, not BROKER_GONE,
    and so does one whose connections were closed in the handshake before
    the broker came up (not a verdict that the broker requires CURVE).
    Heartbeats are 500 ms, a liveness window of 1.5 s; the waits allow for
    a loaded machine and no assertion is on a timing.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"
#define HEARTBEAT "500"
#define BACK_MS 20000           //  tools back after a broker returns, at most

//  A free loopback port for a broker's front, that nothing else takes
//  while the broker is down (dsh_testkit_free_ports).
static int
s_free_port (void)
{
    return dsh_testkit_free_ports (1);
}

//  A broker on a fixed front whose other sockets take random ports, so
//  one started again on the same front has other work and announce ports.
typedef struct {
    char endpoint [64];
    dsh_testproc_t *process;
} s_broker_t;

static void
s_broker_start (s_broker_t *broker)
{
    const char *argv [] = { "broker/dsh-broker", "--endpoint", broker->endpoint,
                            "--announce", "tcp://127.0.0.1:!", "--work", "tcp://127.0.0.1:!",
                            "--events", "tcp://127.0.0.1:!", "--heartbeat-ms", HEARTBEAT, NULL };
    broker->process = dsh_testproc_start (argv);
    assert_non_null (broker->process);
    char *line = dsh_testproc_wait_line (broker->process, "listening on", 10000);
    assert_non_null (line);
    free (line);
}

static void
s_broker_new (s_broker_t *broker)
{
    int port = s_free_port ();
    assert_true (port > 0);
    snprintf (broker->endpoint, sizeof (broker->endpoint), "tcp://127.0.0.1:%d", port);
    s_broker_start (broker);
}

static void
s_broker_kill (s_broker_t *broker)
{
    dsh_testproc_signal (broker->process, SIGKILL);
    dsh_testproc_wait (broker->process, 5000);
    dsh_testproc_destroy (&broker->process);
}

//  echo through the broker at endpoint answers message.
static void
s_echo (const char *endpoint, const char *message)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    char args [128];
    snprintf (args, sizeof (args), "{\"message\":\"%s\"}", message);
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, "echo", args, NULL, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("echo via %s: %s", endpoint, error);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    if (dsh_reply_is_error (reply))
        fail_msg ("echo via %s: %s", endpoint, dsh_reply_text (reply));
    assert_string_equal (dsh_reply_text (reply), message);
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
}

//  Waits until the file at path holds text; true if it did in time.
static bool
s_file_says (const char *path, const char *text, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (true) {
        FILE *file = fopen (path, "r");
        bool found = false;
        if (file) {
            char line [1024];
            while (!found && fgets (line, sizeof (line), file))
                found = strstr (line, text) != NULL;
            fclose (file);
        }
        if (found)
            return true;
        if (zclock_mono () >= give_up)
            return false;
        zclock_sleep (50);
    }
}

static void
test_restart_on_other_ports (void **state)
{
    (void) state;
    s_broker_t broker;
    s_broker_new (&broker);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, broker.endpoint, "healer", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (broker.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);

    //  The component's work and announce connections lead to ports nobody
    //  listens on any more: only the front, asked again, tells the new ones
    s_broker_kill (&broker);
    s_broker_start (&broker);
    int64_t restarted = zclock_mono ();
    assert_int_equal (dsh_testkit_wait_tools (broker.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, BACK_MS), 0);
    printf ("      restart on other ports: tools back after %" PRId64 " ms (heartbeat %s ms)\n",
            zclock_mono () - restarted, HEARTBEAT);
    s_echo (broker.endpoint, "found again");
    assert_int_equal (dsh_testproc_wait (demo, 0), -1);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker.process);
}

static void
test_stopped_past_the_window (void **state)
{
    (void) state;
    s_broker_t broker;
    s_broker_new (&broker);
    char path [] = "/tmp/dsh-heal-XXXXXX";
    int log_fd = mkstemp (path);
    assert_true (log_fd >= 0);
    const char *argv [] = { DEMO, "--broker", broker.endpoint, "--id", "sleeper", NULL };
    dsh_testproc_t *demo = dsh_testproc_start_fds (argv, -1, log_fd);
    assert_non_null (demo);
    free (dsh_testproc_wait_line (demo, "serving", 10000));
    assert_int_equal (dsh_testkit_wait_tools (broker.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);

    //  Twice the liveness window: the component must notice the silence
    dsh_testproc_signal (broker.process, SIGSTOP);
    bool noticed = s_file_says (path, "finding it again", 10000);
    zclock_sleep (1000);
    dsh_testproc_signal (broker.process, SIGCONT);
    assert_true (noticed);
    assert_int_equal (dsh_testproc_wait (demo, 0), -1);
    int64_t resumed = zclock_mono ();
    assert_int_equal (dsh_testkit_wait_tools (broker.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, BACK_MS), 0);
    printf ("      stopped broker: tools listed after %" PRId64 " ms (heartbeat %s ms)\n",
            zclock_mono () - resumed, HEARTBEAT);
    s_echo (broker.endpoint, "awake");
    assert_int_equal (dsh_testproc_wait (demo, 0), -1);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker.process);
    close (log_fd);
    unlink (path);
}

static void
test_two_brokers (void **state)
{
    (void) state;
    s_broker_t first, second;
    s_broker_new (&first);
    s_broker_new (&second);
    char both [160];
    snprintf (both, sizeof (both), "%s,%s", first.endpoint, second.endpoint);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, both, "twofold", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (first.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    assert_int_equal (dsh_testkit_wait_tools (second.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    s_echo (first.endpoint, "via first");
    s_echo (second.endpoint, "via second");

    //  Calls at once through both: each answer goes back the way it came
    dsh_client_t *at_first = dsh_client_new (first.endpoint);
    dsh_client_t *at_second = dsh_client_new (second.endpoint);
    dsh_reply_t *slow_first = NULL, *slow_second = NULL;
    const char *id_first = dsh_testkit_send_json (at_first, NULL, "sleep_ms", "{\"ms\":300}", 10000);
    const char *id_second = dsh_testkit_send_json (at_second, NULL, "sleep_ms", "{\"ms\":300}", 10000);
    assert_non_null (id_first);
    assert_non_null (id_second);
    slow_first = dsh_client_recv (at_first, 10000);
    slow_second = dsh_client_recv (at_second, 10000);
    assert_non_null (slow_first);
    assert_non_null (slow_second);
    assert_false (dsh_reply_is_error (slow_first));
    assert_false (dsh_reply_is_error (slow_second));
    dsh_reply_destroy (&slow_first);
    dsh_reply_destroy (&slow_second);
    dsh_client_destroy (&at_first);
    dsh_client_destroy (&at_second);

    //  One broker gone: the other keeps serving, past the first's window
    s_broker_kill (&first);
    for (int round = 0; round < 6; round++) {
        s_echo (second.endpoint, "still here");
        zclock_sleep (500);
    }
    //  ... and the first, back (on other work and announce ports), gets
    //  the tools again
    s_broker_start (&first);
    assert_int_equal (dsh_testkit_wait_tools (first.endpoint, "", DSH_TESTKIT_DEMO_TOOLS, BACK_MS), 0);
    s_echo (first.endpoint, "first again");
    s_echo (second.endpoint, "second still");
    assert_int_equal (dsh_testproc_wait (demo, 0), -1);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&first.process);
    dsh_testproc_destroy (&second.process);
}

//  A list that is not one is the user's to fix, said at once.
static void
test_bad_lists (void **state)
{
    (void) state;
    const char *malformed [] = { DEMO, "--broker", "tcp://127.0.0.1:7001,,tcp://127.0.0.1:7002", NULL };
    dsh_testproc_t *demo = dsh_testproc_start_merged (malformed);
    assert_non_null (demo);
    assert_int_equal (dsh_testproc_wait (demo, 10000), 2);
    assert_non_null (strstr (dsh_testproc_output (demo, 1000), "broker list"));
    dsh_testproc_destroy (&demo);

    //  A broker listed twice is followed once: two links under one id
    //  would fight over the broker's route
    const char *twice [] = { DEMO, "--broker", "tcp://127.0.0.1:7001,tcp://127.0.0.1:7001", NULL };
    demo = dsh_testproc_start_merged (twice);
    assert_non_null (demo);
    char *line = dsh_testproc_wait_line (demo, "serving", 10000);
    assert_non_null (line);
    assert_non_null (strstr (line, "via tcp://127.0.0.1:7001"));
    assert_null (strstr (line, "7001,"));
    free (line);
    dsh_testproc_destroy (&demo);

    dsh_provider_t *provider = dsh_provider_new ("tcp://127.0.0.1:7001, nonsense", "bad", 1);
    assert_null (provider);
}

//  A PING made from a thread of its own, the broker started meanwhile.
typedef struct {
    const char *endpoint;
    char command [16];
    char error [256];
    atomic_bool done;
} s_late_ping_t;

static void *
s_late_ping (void *arg)
{
    s_late_ping_t *ping = (s_late_ping_t *) arg;
    dsh_client_t *client = dsh_client_new (ping->endpoint);
    assert (client);
    dsh_reply_t *reply = dsh_client_request (client, DSH_PING, NULL, 20000, ping->error, sizeof (ping->error));
    if (reply)
        snprintf (ping->command, sizeof (ping->command), "%s", dsh_reply_command (reply));
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    atomic_store (&ping->done, true);
    return NULL;
}

//  The request waits for a broker that is not there yet (alone in its
//  list, nowhere else to go) and is answered once the broker comes up,
//  past the client's liveness window (3 s by default, before any PONG):
//  the broker's silence counts from the connection, not from the send.
static void
test_broker_up_late (void **state)
{
    (void) state;
    s_broker_t broker;
    int port = s_free_port ();
    assert_true (port > 0);
    snprintf (broker.endpoint, sizeof (broker.endpoint), "tcp://127.0.0.1:%d", port);
    s_late_ping_t ping = { .endpoint = broker.endpoint };
    pthread_t thread;
    assert_int_equal (pthread_create (&thread, NULL, s_late_ping, &ping), 0);
    zclock_sleep (DSH_DEFAULT_HEARTBEAT_MS * DSH_DEFAULT_LIVENESS + 1000);
    s_broker_start (&broker);
    pthread_join (thread, NULL);
    //  The broker goes before a failure is reported, which leaves the test
    dsh_testproc_destroy (&broker.process);
    if (!streq (ping.command, DSH_PONG))
        fail_msg ("PING to a broker up late: %s", *ping.error? ping.error: ping.command);
}

//  A listener that accepts connections on a port and closes them at once,
//  as a broker does while it starts (or restarts) on it.
typedef struct {
    int listener;
    size_t closed;              //  connections accepted and closed
    s_late_ping_t *ping;        //  the client whose connections these are
} s_closer_t;

//  Closes connections until it has closed three, the client has given up,
//  or 10 s have passed.
static void *
s_closer (void *arg)
{
    s_closer_t *closer = (s_closer_t *) arg;
    int64_t give_up = zclock_mono () + 10000;
    while (closer->closed < 3 && !atomic_load (&closer->ping->done) && zclock_mono () < give_up) {
        struct pollfd item = { .fd = closer->listener, .events = POLLIN };
        //  A short wait, to see the client give up
        if (poll (&item, 1, 100) == 1) {
            int connection = accept (closer->listener, NULL, NULL);
            if (connection >= 0) {
                close (connection);
                closer->closed++;
            }
        }
    }
    close (closer->listener);
    return NULL;
}

//  A client whose connections are closed in the handshake before the
//  broker comes up on the port (the broker starting, or restarting) is
//  not told that the broker requires CURVE: the handshake never said so,
//  and the request is answered once the broker is there.
static void
test_closed_while_starting (void **state)
{
    (void) state;
    s_broker_t broker;
    s_closer_t closer = { .listener = socket (AF_INET, SOCK_STREAM, 0) };
    assert_true (closer.listener >= 0);
    int yes = 1;
    setsockopt (closer.listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof (yes));
    //  A port as s_free_port picks them, bound here at once
    int port = -1;
    for (int attempt = 0; attempt < 50 && port < 0; attempt++) {
        int candidate = 20000 + randof (12000);
        struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) candidate),
                                       .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
        if (bind (closer.listener, (struct sockaddr *) &address, sizeof (address)) == 0)
            port = candidate;
    }
    assert_true (port > 0);
    assert_int_equal (listen (closer.listener, 16), 0);
    snprintf (broker.endpoint, sizeof (broker.endpoint), "tcp://127.0.0.1:%d", port);
    s_late_ping_t ping = { .endpoint = broker.endpoint };
    closer.ping = &ping;
    pthread_t closing;
    assert_int_equal (pthread_create (&closing, NULL, s_closer, &closer), 0);
    pthread_t pinging;
    assert_int_equal (pthread_create (&pinging, NULL, s_late_ping, &ping), 0);
    pthread_join (closing, NULL);
    assert_true (closer.closed > 0);
    s_broker_start (&broker);
    pthread_join (pinging, NULL);
    dsh_testproc_destroy (&broker.process);
    if (!streq (ping.command, DSH_PONG))
        fail_msg ("PING through connections closed in the handshake: %s", *ping.error? ping.error: ping.command);
}

int
main (void)
{
    zsys_init ();
    srandom ((unsigned) (zclock_usecs () ^ (int64_t) getpid ()));
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_restart_on_other_ports),
        cmocka_unit_test (test_stopped_past_the_window),
        cmocka_unit_test (test_two_brokers),
        cmocka_unit_test (test_bad_lists),
        cmocka_unit_test (test_broker_up_late),
        cmocka_unit_test (test_closed_while_starting),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
