/*  =========================================================================
    dsh_bench_nats - dsh-bench's NATS peer, with libnats

    nats-server runs as a child of dsh-bench with its output in a temporary
    log, so that when it does not start the bench can say why (its last
    log line). It dies with dsh-bench (PR_SET_PDEATHSIG) even if the bench
    itself is killed. The requester is one connection with one inbox
    subscription: every request names that inbox as its reply subject, so
    any number can be in flight, as with a DEALER.
    =========================================================================
*/

#include "dsh_bench_nats.h"

#include <nats/nats.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct _dsh_bench_nats_t {
    pid_t server;               //  nats-server, or 0 once reaped
    char url [64];
    char log_path [64];
    char version [32];          //  the server's, from its log
    natsOptions *options;
    natsConnection *connection;
    natsInbox *inbox;
    natsSubscription *replies;  //  the inbox, read with NextMsg
};

static int64_t
s_now_ms (void)
{
    struct timespec now;
    clock_gettime (CLOCK_MONOTONIC, &now);
    return (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

//  A loopback port nobody listens on right now, or -1. nats-server binds
//  it a moment later; if another process takes it first, the server exits
//  and dsh_bench_nats_new tries another.
static int
s_free_port (void)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = 0 };
    address.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t size = sizeof (address);
    int port = -1;
    if (bind (fd, (struct sockaddr *) &address, sizeof (address)) == 0
    &&  getsockname (fd, (struct sockaddr *) &address, &size) == 0)
        port = ntohs (address.sin_port);
    close (fd);
    return port;
}

//  The last non-empty line of the server's log, for a reason, and the
//  version it logs at start ("[INF]   Version:  2.9.10") if version.
static void
s_copy (char *target, size_t size, const char *text)
{
    size_t length = strnlen (text, size - 1);
    memcpy (target, text, length);
    target [length] = 0;
}

static void
s_read_log (const char *path, char *line, size_t size, char *version, size_t version_size)
{
    s_copy (line, size, "no output");
    FILE *file = fopen (path, "r");
    char text [512];
    while (file && fgets (text, sizeof (text), file)) {
        text [strcspn (text, "\n")] = 0;
        if (*text)
            s_copy (line, size, text);
        const char *found = version? strstr (text, "Version:"): NULL;
        if (found)
            s_copy (version, version_size, found + 8 + strspn (found + 8, " "));
    }
    if (file)
        fclose (file);
}

static pid_t
s_spawn_server (int port, int log_fd)
{
    char port_text [16];
    snprintf (port_text, sizeof (port_text), "%d", port);
    char *const argv [] = { "nats-server", "-a", "127.0.0.1", "-p", port_text, NULL };
    const char *program = getenv ("DSH_BENCH_NATS_SERVER");
    pid_t parent = getpid ();
    pid_t pid = fork ();
    //  Both sides set the group, so that it exists whichever runs first
    if (pid > 0)
        setpgid (pid, pid);
    if (pid == 0) {
        //  Whatever happens to the bench, its server does not outlive it;
        //  in a group of its own, so that stopping it stops anything it
        //  started too
        prctl (PR_SET_PDEATHSIG, SIGKILL);
        if (getppid () != parent)
            _exit (1);
        setpgid (0, 0);
        dup2 (log_fd, STDOUT_FILENO);
        dup2 (log_fd, STDERR_FILENO);
        if (program)
            execv (program, argv);
        else {
            execvp ("nats-server", argv);
            //  Debian installs it in /usr/sbin, which a user's PATH may lack
            execv ("/usr/sbin/nats-server", argv);
        }
        //  Into the log, where the bench finds the reason
        static const char text [] = "cannot run nats-server (not installed? DSH_BENCH_NATS_SERVER names another)\n";
        ssize_t written = write (STDERR_FILENO, text, sizeof (text) - 1);
        (void) written;
        _exit (127);
    }
    return pid;
}

//  Stops the server and its process group: SIGTERM, then SIGKILL after
//  2 s at most.
static void
s_stop_server (dsh_bench_nats_t *self)
{
    if (self->server <= 0)
        return;
    kill (-self->server, SIGTERM);
    int64_t give_up = s_now_ms () + 2000;
    siginfo_t info = { .si_pid = 0 };
    while (waitid (P_PID, (id_t) self->server, &info, WEXITED | WNOHANG | WNOWAIT) == 0
    &&     info.si_pid != self->server && s_now_ms () < give_up)
        usleep (10000);
    //  Not reaped yet, so its id still names its group and nothing else:
    //  whatever is left of the group goes, and then the server itself
    kill (-self->server, SIGKILL);
    waitpid (self->server, NULL, 0);
    self->server = 0;
}

//  Starts a server on a free port and connects to it within give_up.
//  Returns 0, or -1 with a reason; the caller stops what was started.
static int
s_start (dsh_bench_nats_t *self, int64_t give_up, char *reason, size_t reason_size)
{
    int port = s_free_port ();
    if (port < 0) {
        snprintf (reason, reason_size, "no free loopback port: %s", strerror (errno));
        return -1;
    }
    snprintf (self->url, sizeof (self->url), "nats://127.0.0.1:%d", port);
    snprintf (self->log_path, sizeof (self->log_path), "/tmp/dsh-bench-nats-XXXXXX");
    int log_fd = mkstemp (self->log_path);
    if (log_fd < 0) {
        snprintf (reason, reason_size, "cannot create a log file: %s", strerror (errno));
        return -1;
    }
    self->server = s_spawn_server (port, log_fd);
    close (log_fd);
    if (self->server < 0) {
        snprintf (reason, reason_size, "cannot fork: %s", strerror (errno));
        self->server = 0;
        return -1;
    }
    if (natsOptions_Create (&self->options) != NATS_OK
    ||  natsOptions_SetURL (self->options, self->url) != NATS_OK
    ||  natsOptions_SetName (self->options, "dsh-bench requester") != NATS_OK
    ||  natsOptions_SetSendAsap (self->options, true) != NATS_OK
    ||  natsOptions_SetTimeout (self->options, 500) != NATS_OK
    ||  natsOptions_SetAllowReconnect (self->options, false) != NATS_OK) {
        snprintf (reason, reason_size, "cannot set the client's options");
        return -1;
    }
    //  The server takes a moment to listen; until then a connect fails at once
    natsStatus status = NATS_NO_SERVER;
    while (status != NATS_OK && s_now_ms () < give_up) {
        int exit_status;
        if (waitpid (self->server, &exit_status, WNOHANG) == self->server) {
            char line [256];
            s_read_log (self->log_path, line, sizeof (line), NULL, 0);
            snprintf (reason, reason_size, "nats-server exited (status %d): %s",
                      WIFEXITED (exit_status)? WEXITSTATUS (exit_status): 128 + WTERMSIG (exit_status), line);
            self->server = 0;
            return -1;
        }
        status = natsConnection_Connect (&self->connection, self->options);
        if (status != NATS_OK)
            usleep (20000);
    }
    if (status != NATS_OK) {
        char line [256];
        s_read_log (self->log_path, line, sizeof (line), NULL, 0);
        snprintf (reason, reason_size, "no connection to nats-server at %s in time (%s); its log: %s",
                  self->url, natsStatus_GetText (status), line);
        return -1;
    }
    int64_t left = give_up - s_now_ms ();
    if (natsInbox_Create (&self->inbox) != NATS_OK
    ||  natsConnection_SubscribeSync (&self->replies, self->connection, self->inbox) != NATS_OK
    ||  natsConnection_FlushTimeout (self->connection, left > 100? left: 100) != NATS_OK) {
        snprintf (reason, reason_size, "cannot subscribe to the reply inbox");
        return -1;
    }
    char line [256];
    snprintf (self->version, sizeof (self->version), "unknown");
    s_read_log (self->log_path, line, sizeof (line), self->version, sizeof (self->version));
    return 0;
}

static void
s_disconnect (dsh_bench_nats_t *self)
{
    natsSubscription_Destroy (self->replies);
    self->replies = NULL;
    natsConnection_Destroy (self->connection);
    self->connection = NULL;
    natsOptions_Destroy (self->options);
    self->options = NULL;
    natsInbox_Destroy (self->inbox);
    self->inbox = NULL;
}

dsh_bench_nats_t *
dsh_bench_nats_new (int timeout_ms, char *reason, size_t reason_size)
{
    dsh_bench_nats_t *self = (dsh_bench_nats_t *) calloc (1, sizeof (dsh_bench_nats_t));
    if (!self) {
        snprintf (reason, reason_size, "out of memory");
        return NULL;
    }
    int64_t give_up = s_now_ms () + timeout_ms;
    int rc = -1;
    //  A second try covers a port taken between our probe and the server's bind
    for (int attempt = 0; attempt < 2 && rc && s_now_ms () < give_up; attempt++) {
        if (attempt) {
            s_disconnect (self);
            s_stop_server (self);
            unlink (self->log_path);
        }
        rc = s_start (self, give_up, reason, reason_size);
    }
    if (rc)
        dsh_bench_nats_destroy (&self);
    return self;
}

void
dsh_bench_nats_destroy (dsh_bench_nats_t **self_p)
{
    if (*self_p) {
        dsh_bench_nats_t *self = *self_p;
        s_disconnect (self);
        s_stop_server (self);
        if (*self->log_path)
            unlink (self->log_path);
        free (self);
        *self_p = NULL;
    }
}

const char *
dsh_bench_nats_url (dsh_bench_nats_t *self)
{
    return self->url;
}

pid_t
dsh_bench_nats_server_pid (dsh_bench_nats_t *self)
{
    return self->server;
}

const char *
dsh_bench_nats_server_version (dsh_bench_nats_t *self)
{
    return self->version;
}

const char *
dsh_bench_nats_client_version (void)
{
    return nats_GetVersion ();
}

int
dsh_bench_nats_send (dsh_bench_nats_t *self, const void *data, size_t size, char *reason, size_t reason_size)
{
    natsStatus status = natsConnection_PublishRequest (self->connection, DSH_BENCH_NATS_SUBJECT, self->inbox,
                                                       data, (int) size);
    if (status == NATS_OK)
        return 0;
    snprintf (reason, reason_size, "publish: %s", natsStatus_GetText (status));
    return -1;
}

long
dsh_bench_nats_recv (dsh_bench_nats_t *self, int timeout_ms, char *reason, size_t reason_size)
{
    natsMsg *reply = NULL;
    natsStatus status = natsSubscription_NextMsg (&reply, self->replies, timeout_ms);
    if (status != NATS_OK) {
        snprintf (reason, reason_size, "reply: %s", natsStatus_GetText (status));
        return -1;
    }
    long size = natsMsg_GetDataLength (reply);
    natsMsg_Destroy (reply);
    return size;
}
