/*  =========================================================================
    dsh_testkit - real processes for integration tests
    =========================================================================
*/

#include "dsh_testkit.h"
#include "dsh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

struct _dsh_testproc_t {
    pid_t pid;
    int out_fd;
    char *buffer;               //  everything read from stdout
    size_t size;
    size_t consumed;            //  lines returned by wait_line end here
    bool exited;
    int status;
};

char *
dsh_testkit_program (const char *relative)
{
    const char *build = getenv ("DSH_BUILD_DIR");
    return zsys_sprintf ("%s/%s", build? build: "build", relative);
}

dsh_testproc_t *
dsh_testproc_start (const char *const *argv)
{
    return dsh_testproc_start_input (argv, -1);
}

//  Starts argv with stdin_fd (if >= 0) as its stdin, stderr_fd (if >= 0)
//  as its stderr, or its stderr in the stdout pipe too if merge_stderr.
static dsh_testproc_t *
s_start (const char *const *argv, int stdin_fd, int stderr_fd, bool merge_stderr)
{
    int out [2];
    if (pipe2 (out, O_CLOEXEC))
        return NULL;
    char *program = dsh_testkit_program (argv [0]);
    pid_t pid = fork ();
    if (pid == 0) {
        //  A test that dies (a failed assertion, a sanitizer) takes its
        //  processes with it: no broker outlives the test that started it
        prctl (PR_SET_PDEATHSIG, SIGKILL);
        dup2 (out [1], STDOUT_FILENO);
        if (merge_stderr)
            dup2 (out [1], STDERR_FILENO);
        if (stdin_fd >= 0)
            dup2 (stdin_fd, STDIN_FILENO);
        if (stderr_fd >= 0)
            dup2 (stderr_fd, STDERR_FILENO);
        execv (program, (char *const *) argv);
        fprintf (stderr, "testkit: cannot run %s: %s\n", program, strerror (errno));
        _exit (127);
    }
    free (program);
    close (out [1]);
    if (pid < 0) {
        close (out [0]);
        return NULL;
    }
    dsh_testproc_t *self = (dsh_testproc_t *) zmalloc (sizeof (dsh_testproc_t));
    self->pid = pid;
    self->out_fd = out [0];
    fcntl (self->out_fd, F_SETFL, O_NONBLOCK);
    self->buffer = (char *) zmalloc (1);
    return self;
}

dsh_testproc_t *
dsh_testproc_start_fds (const char *const *argv, int stdin_fd, int stderr_fd)
{
    return s_start (argv, stdin_fd, stderr_fd, false);
}

dsh_testproc_t *
dsh_testproc_start_input (const char *const *argv, int stdin_fd)
{
    return s_start (argv, stdin_fd, -1, false);
}

dsh_testproc_t *
dsh_testproc_start_merged (const char *const *argv)
{
    return s_start (argv, -1, -1, true);
}

static bool
s_reap (dsh_testproc_t *self, int options)
{
    if (self->exited)
        return true;
    int status;
    if (waitpid (self->pid, &status, options) == self->pid) {
        self->exited = true;
        self->status = WIFEXITED (status)? WEXITSTATUS (status): 128 + WTERMSIG (status);
    }
    return self->exited;
}

void
dsh_testproc_destroy (dsh_testproc_t **self_p)
{
    if (*self_p) {
        dsh_testproc_t *self = *self_p;
        if (!s_reap (self, WNOHANG)) {
            kill (self->pid, SIGKILL);
            s_reap (self, 0);
        }
        close (self->out_fd);
        free (self->buffer);
        free (self);
        *self_p = NULL;
    }
}

//  Reads what stdout has, waiting at most timeout_ms for something; false
//  at end of output.
static bool
s_read_some (dsh_testproc_t *self, int timeout_ms)
{
    struct pollfd item = { self->out_fd, POLLIN, 0 };
    if (poll (&item, 1, timeout_ms) <= 0)
        return true;
    char chunk [4096];
    ssize_t got = read (self->out_fd, chunk, sizeof (chunk));
    if (got <= 0)
        return got < 0 && errno == EAGAIN;
    self->buffer = (char *) realloc (self->buffer, self->size + (size_t) got + 1);
    memcpy (self->buffer + self->size, chunk, (size_t) got);
    self->size += (size_t) got;
    self->buffer [self->size] = 0;
    return true;
}

char *
dsh_testproc_wait_line (dsh_testproc_t *self, const char *text, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (true) {
        char *line = self->buffer + self->consumed;
        char *end;
        while ((end = strchr (line, '\n'))) {
            self->consumed = (size_t) (end + 1 - self->buffer);
            if (memmem (line, (size_t) (end - line), text, strlen (text)))
                return strndup (line, (size_t) (end - line));
            line = end + 1;
        }
        int64_t left = give_up - zclock_mono ();
        if (left <= 0 || !s_read_some (self, (int) (left < 100? left: 100)))
            return NULL;
    }
}

const char *
dsh_testproc_output (dsh_testproc_t *self, int timeout_ms)
{
    //  The child is the pipe's only writer: end of output is its exit
    int64_t give_up = zclock_mono () + timeout_ms;
    while (zclock_mono () < give_up && s_read_some (self, 50))
        ;
    return self->buffer;
}

void
dsh_testproc_signal (dsh_testproc_t *self, int signal)
{
    if (!self->exited)
        kill (self->pid, signal);
}

int
dsh_testproc_wait (dsh_testproc_t *self, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (!s_reap (self, WNOHANG)) {
        if (zclock_mono () >= give_up)
            return -1;
        //  Keep the pipe drained so a chatty child never blocks on it
        s_read_some (self, 10);
    }
    return self->status;
}

pid_t
dsh_testproc_pid (dsh_testproc_t *self)
{
    return self->pid;
}

dsh_testproc_t *
dsh_testkit_broker (int heartbeat_ms, const char *const *extra, char *endpoint, size_t size)
{
    return dsh_testkit_broker_stderr (heartbeat_ms, extra, -1, endpoint, size);
}

dsh_testproc_t *
dsh_testkit_broker_stderr (int heartbeat_ms, const char *const *extra, int stderr_fd,
                           char *endpoint, size_t size)
{
    char heartbeat [16];
    snprintf (heartbeat, sizeof (heartbeat), "%d", heartbeat_ms);
    //  Every socket on a random port of czmq's dynamic range ("!"): "*" takes
    //  the lowest free port, so a test's broker would often get the ports a
    //  broker that just stopped had, and that broker's components, still
    //  reconnecting, would join the wrong swarm; front port +1..+3 could be
    //  another test's ports too
    const char *argv [32] = { "broker/dsh-broker", "--endpoint", "tcp://127.0.0.1:!",
                              "--announce", "tcp://127.0.0.1:!", "--work", "tcp://127.0.0.1:!",
                              "--events", "tcp://127.0.0.1:!", "--heartbeat-ms", heartbeat };
    size_t argc = 11;
    for (size_t index = 0; extra && extra [index] && argc < 31; index++)
        argv [argc++] = extra [index];
    argv [argc] = NULL;
    dsh_testproc_t *broker = dsh_testproc_start_fds (argv, -1, stderr_fd);
    if (!broker)
        return NULL;
    char *line = dsh_testproc_wait_line (broker, "listening on ", 10000);
    if (!line) {
        dsh_testproc_destroy (&broker);
        return NULL;
    }
    const char *start = strstr (line, "listening on ") + strlen ("listening on ");
    snprintf (endpoint, size, "%.*s", (int) strcspn (start, " "), start);
    free (line);
    return broker;
}

char *
dsh_testkit_main_config (void)
{
    const char *source = getenv ("DSH_SOURCE_DIR");
    char *path = zsys_sprintf ("%s/deploy/dsh-broker.cfg", source? source: ".");
    zfile_t *file = zfile_new (NULL, path);
    zstr_free (&path);
    char *text = NULL;
    if (file && zfile_input (file) == 0) {
        zchunk_t *chunk = zfile_read (file, zfile_cursize (file), 0);
        text = chunk? zchunk_strdup (chunk): NULL;
        zchunk_destroy (&chunk);
    }
    zfile_destroy (&file);
    return text;
}

dsh_testproc_t *
dsh_testkit_broker_config (int heartbeat_ms, const char *config, char *endpoint, size_t size)
{
    char path [] = "/tmp/dsh-config-XXXXXX";
    int fd = mkstemp (path);
    if (fd < 0)
        return NULL;
    bool written = write (fd, config, strlen (config)) == (ssize_t) strlen (config);
    close (fd);
    const char *extra [] = { "-c", path, NULL };
    //  The broker has read its config by the time it says where it listens
    dsh_testproc_t *broker = written? dsh_testkit_broker (heartbeat_ms, extra, endpoint, size): NULL;
    unlink (path);
    return broker;
}

dsh_testproc_t *
dsh_testkit_component (const char *program, const char *endpoint, const char *id, const char *const *extra)
{
    const char *argv [32] = { program, "--broker", endpoint, "--id", id };
    size_t argc = 5;
    for (size_t index = 0; extra && extra [index] && argc < 31; index++)
        argv [argc++] = extra [index];
    argv [argc] = NULL;
    dsh_testproc_t *component = dsh_testproc_start (argv);
    if (!component)
        return NULL;
    char *line = dsh_testproc_wait_line (component, "component", 10000);
    if (!line) {
        dsh_testproc_destroy (&component);
        return NULL;
    }
    free (line);
    return component;
}

//  Runs the CLI as dsh_testkit_cli does; its stderr in output too if
//  merge_stderr.
static int
s_cli (const char *endpoint, const char *const *args, int timeout_ms, char **output, bool merge_stderr)
{
    const char *argv [32] = { "components/cli/dsh", "--broker", endpoint };
    size_t argc = 3;
    for (size_t index = 0; args && args [index] && argc < 31; index++)
        argv [argc++] = args [index];
    argv [argc] = NULL;
    dsh_testproc_t *cli = s_start (argv, -1, -1, merge_stderr);
    if (!cli)
        return -1;
    int status = dsh_testproc_wait (cli, timeout_ms);
    const char *text = dsh_testproc_output (cli, 1000);
    if (output)
        *output = strdup (text);
    dsh_testproc_destroy (&cli);
    return status;
}

int
dsh_testkit_cli (const char *endpoint, const char *const *args, int timeout_ms, char **output)
{
    return s_cli (endpoint, args, timeout_ms, output, false);
}

int
dsh_testkit_cli_merged (const char *endpoint, const char *const *args, int timeout_ms, char **output)
{
    return s_cli (endpoint, args, timeout_ms, output, true);
}

int
dsh_testkit_wait_tools (const char *endpoint, const char *text, size_t count, int timeout_ms)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    int64_t give_up = zclock_mono () + timeout_ms;
    int rc = -1;
    while (rc && zclock_mono () < give_up) {
        char error [256];
        dsh_reply_t *reply = dsh_client_request (client, DSH_LIST, NULL, 1000, error, sizeof (error));
        if (reply) {
            const msgpack_object *tools = dsh_map_get (dsh_reply_body (reply), "tools");
            size_t matches = 0;
            for (uint32_t index = 0; tools && index < tools->via.array.size; index++) {
                const msgpack_object *name = dsh_map_get (&tools->via.array.ptr [index], "name");
                if (name && memmem (name->via.str.ptr, name->via.str.size, text, strlen (text)))
                    matches++;
            }
            if (matches == count)
                rc = 0;
            dsh_reply_destroy (&reply);
        }
        if (rc)
            zclock_sleep (50);
    }
    dsh_client_destroy (&client);
    return rc;
}

const char *
dsh_testkit_send_json (dsh_client_t *client, const char *call_id, const char *name, const char *args,
                       int timeout_ms)
{
    msgpack_sbuffer packed;
    char error [256];
    if (dsh_json_text_to_msgpack (args, &packed, error, sizeof (error)))
        return NULL;
    const char *sent = dsh_client_call_send (client, call_id, name, packed.data, packed.size,
                                             NULL, NULL, 0, timeout_ms);
    msgpack_sbuffer_destroy (&packed);
    return sent;
}

zsock_t *
dsh_testkit_announce_pub (const char *announce, int timeout_ms)
{
    zsock_t *pub = zsock_new (ZMQ_XPUB);
    if (!pub || zsock_connect (pub, "%s", announce)) {
        zsock_destroy (&pub);
        return NULL;
    }
    //  The broker's SUB subscribes to everything: one message, 0x01
    zpoller_t *poller = zpoller_new (pub, NULL);
    bool subscribed = false;
    if (zpoller_wait (poller, timeout_ms) == pub) {
        zframe_t *frame = zframe_recv (pub);
        subscribed = frame && zframe_size (frame) >= 1 && zframe_data (frame) [0] == 1;
        zframe_destroy (&frame);
    }
    zpoller_destroy (&poller);
    if (!subscribed)
        zsock_destroy (&pub);
    return pub;
}

//  The probe's one tool: never called
static int
s_probe_handler (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "probe");
    return 0;
}

//  The next event on sub before give_up: true, with its kind, its
//  component (or "") and its seq.
static bool
s_event_read (zsock_t *sub, int64_t give_up, char *kind, size_t kind_size, char *component,
              size_t component_size, uint64_t *seq)
{
    int64_t left_ms = give_up - zclock_mono ();
    zpoller_t *poller = zpoller_new (sub, NULL);
    bool readable = left_ms > 0 && zpoller_wait (poller, (int) left_ms) == sub;
    zpoller_destroy (&poller);
    if (!readable)
        return false;
    zmsg_t *msg = zmsg_recv (sub);
    char *got = zmsg_popstr (msg);
    zframe_t *body = zmsg_pop (msg);
    char error [128];
    dsh_doc_t *doc = body? dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error)): NULL;
    const msgpack_object *root = doc? dsh_doc_root (doc): NULL;
    const msgpack_object *id = dsh_map_get (root, "component");
    const msgpack_object *number = dsh_map_get (root, "seq");
    snprintf (kind, kind_size, "%s", got? got: "");
    if (id && id->type == MSGPACK_OBJECT_STR)
        snprintf (component, component_size, "%.*s", (int) id->via.str.size, id->via.str.ptr);
    else
        snprintf (component, component_size, "%s", "");
    *seq = number && number->type == MSGPACK_OBJECT_POSITIVE_INTEGER? number->via.u64: 0;
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    zstr_free (&got);
    zmsg_destroy (&msg);
    return true;
}

zsock_t *
dsh_testkit_events (const char *front, const char *prefix, uint64_t *seq_p, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    dsh_client_t *client = dsh_client_new (front);
    char error [256];
    dsh_reply_t *welcome = client? dsh_client_request (client, DSH_HELLO, NULL, timeout_ms, error, sizeof (error))
                                 : NULL;
    const msgpack_object *events = welcome? dsh_map_get (dsh_reply_body (welcome), "events"): NULL;
    zsock_t *sub = NULL;
    if (events && events->type == MSGPACK_OBJECT_STR) {
        char *endpoint = strndup (events->via.str.ptr, events->via.str.size);
        sub = zsock_new_sub (endpoint, prefix);
        free (endpoint);
    }
    dsh_reply_destroy (&welcome);
    dsh_client_destroy (&client);
    if (!sub)
        return NULL;

    //  A SUB cannot tell when its subscription has reached the publisher:
    //  a probe joins until one of its events is heard, then leaves, and
    //  everything up to its leaving is read here
    static int probes = 0;
    bool done = false;
    uint64_t seq = 0;
    while (!done && zclock_mono () < give_up) {
        char probe_id [64];
        snprintf (probe_id, sizeof (probe_id), "testkit-probe-%d-%d", (int) getpid (), ++probes);
        dsh_provider_t *probe = dsh_provider_new (front, probe_id, 1);
        if (!probe)
            break;
        dsh_provider_add_raw (probe, "{\"name\":\"testkit_probe\",\"parameters\":{\"type\":\"object\"}}",
                              s_probe_handler, NULL);
        dsh_provider_start (probe);
        dsh_provider_wait_ready (probe, (int) (give_up - zclock_mono ()));
        //  Its events follow the broker's ask at once; a moment for the way
        int64_t until = zclock_mono () + 500;
        bool heard = false;
        char kind [64], component [64];
        while (!heard && s_event_read (sub, until < give_up? until: give_up, kind, sizeof (kind),
                                       component, sizeof (component), &seq))
            heard = streq (component, probe_id);
        dsh_provider_destroy (&probe);
        //  Its leaving is the last of its events, and of everything before
        while (heard && !done && s_event_read (sub, give_up, kind, sizeof (kind), component,
                                               sizeof (component), &seq))
            done = streq (component, probe_id) && streq (kind, DSH_EV_LEFT);
    }
    if (!done)
        zsock_destroy (&sub);
    else
    if (seq_p)
        *seq_p = seq;
    return sub;
}

int64_t
dsh_testkit_in_flight (const char *front, const char *component)
{
    dsh_client_t *client = dsh_client_new (front);
    char error [256];
    dsh_reply_t *reply = client? dsh_client_request (client, DSH_STATS, NULL, 2000, error, sizeof (error)): NULL;
    const msgpack_object *components = reply? dsh_map_get (dsh_reply_body (reply), "components"): NULL;
    int64_t in_flight = -1;
    for (uint32_t index = 0; components && components->type == MSGPACK_OBJECT_ARRAY
                             && index < components->via.array.size; index++) {
        const msgpack_object *row = &components->via.array.ptr [index];
        const msgpack_object *id = dsh_map_get (row, "id");
        const msgpack_object *count = dsh_map_get (row, "inFlight");
        if (id && id->type == MSGPACK_OBJECT_STR && id->via.str.size == strlen (component)
        &&  memcmp (id->via.str.ptr, component, id->via.str.size) == 0
        &&  count && count->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            in_flight = (int64_t) count->via.u64;
    }
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    return in_flight;
}

int
dsh_testkit_wait_in_flight (const char *front, const char *component, size_t count, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (dsh_testkit_in_flight (front, component) < (int64_t) count) {
        if (zclock_mono () >= give_up)
            return -1;
        zclock_sleep (20);
    }
    return 0;
}

bool
dsh_testkit_long (void)
{
    const char *value = getenv ("DSH_TEST_LONG");
    return value && streq (value, "1");
}

//  Runs tests/kit/pg_scratch.sh command dir; the first line it prints
//  (caller frees) in *line if not NULL. Returns its exit status, or -1.
static int
s_pg_scratch (const char *command, const char *dir, char **line)
{
    const char *source = getenv ("DSH_SOURCE_DIR");
    char *script = zsys_sprintf ("%s/tests/kit/pg_scratch.sh", source? source: ".");
    int out [2];
    if (pipe2 (out, O_CLOEXEC)) {
        zstr_free (&script);
        return -1;
    }
    pid_t pid = fork ();
    if (pid == 0) {
        dup2 (out [1], STDOUT_FILENO);
        execlp ("bash", "bash", script, command, dir, (char *) NULL);
        fprintf (stderr, "testkit: cannot run bash %s: %s\n", script, strerror (errno));
        _exit (127);
    }
    zstr_free (&script);
    close (out [1]);
    if (pid < 0) {
        close (out [0]);
        return -1;
    }
    //  What it prints, up to the size of output; the rest is read and dropped
    char output [512];
    size_t size = 0;
    char block [512];
    ssize_t got;
    while ((got = read (out [0], block, sizeof (block))) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        size_t kept = (size_t) got < sizeof (output) - 1 - size? (size_t) got: sizeof (output) - 1 - size;
        memcpy (output + size, block, kept);
        size += kept;
    }
    output [size] = 0;
    close (out [0]);
    int status;
    while (waitpid (pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (line)
        *line = zsys_sprintf ("%.*s", (int) strcspn (output, "\n"), output);
    return WIFEXITED (status)? WEXITSTATUS (status): -1;
}

char *
dsh_testkit_postgres_start (const char *dir)
{
    char *uri = NULL;
    int status = s_pg_scratch ("start", dir, &uri);
    if (status == 0 && strncmp (uri, "postgresql://", strlen ("postgresql://")) == 0)
        return uri;
    zstr_free (&uri);
    if (status == 77)
        return NULL;
    fprintf (stderr, "testkit: pg_scratch.sh start %s failed (exit status %d)\n", dir, status);
    exit (1);
}

char *
dsh_testkit_postgres_try (const char *dir, char *reason, size_t reason_size)
{
    char *uri = NULL;
    int status = s_pg_scratch ("start", dir, &uri);
    if (status == 0 && strncmp (uri, "postgresql://", strlen ("postgresql://")) == 0)
        return uri;
    zstr_free (&uri);
    if (status == 77)
        snprintf (reason, reason_size, "no PostgreSQL server programs here (tests/kit/pg_scratch.sh)");
    else
    if (status == 127)
        snprintf (reason, reason_size, "cannot run tests/kit/pg_scratch.sh (from $DSH_SOURCE_DIR, else the "
                  "working directory)");
    else
        snprintf (reason, reason_size, "tests/kit/pg_scratch.sh start failed (exit status %d; its reason is on "
                  "stderr)", status);
    return NULL;
}

int
dsh_testkit_postgres_stop (const char *dir)
{
    return s_pg_scratch ("stop", dir, NULL) == 0? 0: -1;
}

int
dsh_testkit_postgres_restart (const char *dir)
{
    return s_pg_scratch ("restart", dir, NULL) == 0? 0: -1;
}

//  ---------------------------------------------------------------------
//  A raw approver

int
dsh_testkit_approver_send (zsock_t *approver, const char *command, const json_t *body)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    int rc = dsh_json_to_msgpack (&pk, body);
    if (rc == 0) {
        zmsg_t *msg = dsh_proto_message (NULL, command);
        zmsg_addmem (msg, sbuf.data, sbuf.size);
        rc = zmsg_send (&msg, approver);
        zmsg_destroy (&msg);
    }
    msgpack_sbuffer_destroy (&sbuf);
    return rc;
}

static void
s_approver_hello (zsock_t *approver)
{
    json_t *empty = json_object ();
    dsh_testkit_approver_send (approver, "APPROVER", empty);
    json_decref (empty);
}

//  The next message from the stage within timeout_ms (HEARTBEATs answered
//  when answer), its command into command and its JSON body, or NULL.
static json_t *
s_approver_recv (zsock_t *approver, char *command, size_t size, int timeout_ms, bool skip_heartbeats)
{
    zpoller_t *poller = zpoller_new (approver, NULL);
    assert (poller);
    int64_t give_up = zclock_mono () + timeout_ms;
    json_t *body = NULL;
    bool done = false;
    while (!done) {
        int64_t left = give_up - zclock_mono ();
        if (left <= 0 || zpoller_wait (poller, (int) left) != approver)
            break;
        zmsg_t *msg = zmsg_recv (approver);
        zmsg_t *envelope = NULL;
        char error [256];
        if (msg && dsh_proto_split (msg, &envelope, command, size, error, sizeof (error)) == 0) {
            if (streq (command, "HEARTBEAT") && skip_heartbeats)
                s_approver_hello (approver);
            else {
                dsh_doc_t *doc = dsh_proto_decode_body (zmsg_first (msg), error, sizeof (error));
                body = doc? dsh_json_from_msgpack (dsh_doc_root (doc)): NULL;
                dsh_doc_destroy (&doc);
                done = true;
            }
        }
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    return body;
}

json_t *
dsh_testkit_approver_next (zsock_t *approver, char *command, size_t size, int timeout_ms)
{
    return s_approver_recv (approver, command, size, timeout_ms, true);
}

json_t *
dsh_testkit_approver_expect (zsock_t *approver, const char *command, int timeout_ms, char *why, size_t why_size)
{
    char got [32] = "";
    json_t *body = dsh_testkit_approver_next (approver, got, sizeof (got), timeout_ms);
    if (!body)
        snprintf (why, why_size, "no %s within %d ms", command, timeout_ms);
    else
    if (!streq (got, command)) {
        char *text = json_dumps (body, JSON_COMPACT);
        snprintf (why, why_size, "expected %s, got %s %.300s", command, got, text? text: "");
        free (text);
        json_decref (body);
        body = NULL;
    }
    return body;
}

zsock_t *
dsh_testkit_approver (dsh_client_t *client, const char *stage, int timeout_ms)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_control (client, stage, "approvals", NULL, timeout_ms, error, sizeof (error));
    json_t *body = reply && !dsh_reply_is_error (reply)? dsh_reply_json (reply): NULL;
    dsh_reply_destroy (&reply);
    const char *endpoint = json_string_value (json_object_get (json_object_get (body, "data"), "endpoint"));
    zsock_t *approver = endpoint? zsock_new_dealer (endpoint): NULL;
    json_decref (body);
    if (!approver)
        return NULL;
    //  HEARTBEAT goes only to approvers the stage knows: the first says
    //  this one counts
    s_approver_hello (approver);
    int64_t give_up = zclock_mono () + timeout_ms;
    char command [32] = "";
    while (zclock_mono () < give_up && !streq (command, "HEARTBEAT")) {
        json_t *message = s_approver_recv (approver, command, sizeof (command),
                                           (int) (give_up - zclock_mono ()), false);
        json_decref (message);
    }
    if (!streq (command, "HEARTBEAT"))
        zsock_destroy (&approver);
    return approver;
}

int
dsh_testkit_free_ports (int count)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        int port = 20000 + randof (12000);
        bool all_free = true;
        for (int offset = 0; offset < count && all_free; offset++) {
            int probe = socket (AF_INET, SOCK_STREAM, 0);
            if (probe < 0)
                return -1;
            struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) (port + offset)),
                                           .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
            all_free = bind (probe, (struct sockaddr *) &address, sizeof (address)) == 0;
            close (probe);
        }
        if (all_free)
            return port;
    }
    return -1;
}
