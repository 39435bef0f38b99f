/*  =========================================================================
    test_cli - the dsh command line, run as a real process against a real
    broker and real components

    Queries, calls and their exit codes (0 done, 1 error result, 2 bad
    usage, 3 no broker); --help for every command; schemas in every
    format; a typed tool refusing a missing argument before its handler
    runs; and the chain commands: chain, mode, pending, approve and the
    approver, automatic and driven from stdin; approve --for and grants;
    pins on a tool whose definition changed: list, show, accept, reject,
    forget, and their exit codes.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO        "components/demo/dsh-demo"
#define CLI         "components/cli/dsh"
#define CLI_WAIT_MS 15000

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
} broker_t;

//  A broker (with a config file if config is not NULL) and a dsh-demo.
static broker_t *
s_broker_start (const char *config)
{
    broker_t *self = (broker_t *) zmalloc (sizeof (broker_t));
    self->broker = config? dsh_testkit_broker_config (200, config, self->endpoint, sizeof (self->endpoint))
                         : dsh_testkit_broker (200, NULL, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    return self;
}

static void
s_broker_stop (broker_t **self_p)
{
    broker_t *self = *self_p;
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
    free (self);
    *self_p = NULL;
}

static int
s_setup (void **state)
{
    *state = s_broker_start (NULL);
    return 0;
}

static int
s_teardown (void **state)
{
    broker_t *broker = (broker_t *) *state;
    s_broker_stop (&broker);
    return 0;
}

//  Runs `dsh --broker endpoint args...`; returns its exit status, and its
//  stdout in *output (caller frees).
static int
s_cli (const char *endpoint, const char *const *args, char **output)
{
    char *text = NULL;
    int status = dsh_testkit_cli (endpoint, args, CLI_WAIT_MS, &text);
    assert_non_null (text);
    *output = text;
    return status;
}

//  Parses the CLI's output as JSON (fails the test if it is not).
static json_t *
s_parse (const char *output)
{
    json_error_t error;
    json_t *json = json_loads (output, 0, &error);
    if (!json)
        fail_msg ("not JSON (%s): %s", error.text, output);
    return json;
}

//  ---------------------------------------------------------------------
//  Queries and calls

static void
test_queries (void **state)
{
    broker_t *broker = (broker_t *) *state;
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "tools", NULL }, &output), 0);
    json_t *tools = s_parse (output);
    assert_true (json_is_array (tools));
    assert_true (json_array_size (tools) >= 4);
    size_t tool_count = json_array_size (tools);
    bool has_echo = false;
    for (size_t index = 0; index < json_array_size (tools); index++)
        if (streq (json_string_value (json_object_get (json_array_get (tools, index), "name")), "echo"))
            has_echo = true;
    assert_true (has_echo);
    json_decref (tools);
    zstr_free (&output);

    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "get", "echo", NULL }, &output), 0);
    json_t *tool = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (json_object_get (tool, "tool"), "name")), "echo");
    assert_string_equal (json_string_value (json_array_get (json_object_get (tool, "providers"), 0)), "demo");
    json_decref (tool);
    zstr_free (&output);

    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "get", "nope", NULL }, &output), 1);
    assert_string_equal (output, "");
    zstr_free (&output);

    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "ping", NULL }, &output), 0);
    json_t *pong = s_parse (output);
    assert_int_equal (json_integer_value (json_object_get (pong, "tools")), tool_count);
    assert_int_equal (json_integer_value (json_object_get (pong, "components")), 1);
    assert_true (json_is_string (json_object_get (pong, "broker")));
    json_decref (pong);
    zstr_free (&output);
}

static void
test_calls (void **state)
{
    broker_t *broker = (broker_t *) *state;
    char *output;
    assert_int_equal (s_cli (broker->endpoint,
                             (const char *[]) { "call", "echo", "{\"message\":\"hello cli\"}", NULL }, &output), 0);
    json_t *result = s_parse (output);
    assert_false (json_is_true (json_object_get (result, "isError")));
    assert_string_equal (json_string_value (json_object_get (
        json_array_get (json_object_get (result, "content"), 0), "text")), "hello cli");
    json_decref (result);
    zstr_free (&output);

    //  An error result: exit 1, and the result is still printed
    assert_int_equal (s_cli (broker->endpoint,
                             (const char *[]) { "call", "fail", "{\"message\":\"on purpose\"}", NULL }, &output), 1);
    result = s_parse (output);
    assert_true (json_is_true (json_object_get (result, "isError")));
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")),
                         DSH_E_TOOL_FAILED);
    assert_string_equal (json_string_value (json_object_get (
        json_array_get (json_object_get (result, "content"), 0), "text")), "Error: on purpose");
    json_decref (result);
    zstr_free (&output);

    //  Bad JSON arguments: a usage error, and nothing is sent
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "echo", "{\"message\":", NULL },
                             &output), 2);
    assert_string_equal (output, "");
    zstr_free (&output);

    //  No broker: exit 3 within the timeout, not a hang
    int64_t started = zclock_mono ();
    assert_int_equal (s_cli ("tcp://127.0.0.1:1", (const char *[]) { "--timeout-ms", "500", "ping", NULL },
                             &output), 3);
    assert_true (zclock_mono () - started < 3000);
    assert_string_equal (output, "");
    zstr_free (&output);

    //  Bad usage
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "nosuchcommand", NULL }, &output), 2);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "get", NULL }, &output), 2);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "approver", "--auto", "maybe", NULL },
                             &output), 2);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "tools", "--stage", "x", NULL }, &output), 2);
    zstr_free (&output);
}

//  A loopback port nothing listens on, held so while *fd_p is open: bound
//  by a TCP socket that never listens, so a connect is refused, and no
//  other program (a test beside this one binding "*") can take it.
//  Returns the port, or -1.
static int
s_closed_port (int *fd_p)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = 0 };
    address.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    socklen_t size = sizeof (address);
    if (fd < 0 || bind (fd, (struct sockaddr *) &address, sizeof (address))
    ||  getsockname (fd, (struct sockaddr *) &address, &size)) {
        if (fd >= 0)
            close (fd);
        return -1;
    }
    *fd_p = fd;
    return ntohs (address.sin_port);
}

//  CPU time (user + system) of the children reaped so far, in ms.
static int64_t
s_children_cpu_ms (void)
{
    struct rusage usage;
    assert_int_equal (getrusage (RUSAGE_CHILDREN, &usage), 0);
    return (int64_t) (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000
         + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000;
}

//  Runs the CLI against an endpoint nothing listens on: it fails with exit
//  3 and one line of error well before a call's deadline, without
//  spinning. Returns the line (caller frees).
static char *
s_cli_unreachable (const char *endpoint, const char *const *args)
{
    int64_t started = zclock_mono ();
    int64_t cpu_ms = s_children_cpu_ms ();
    char *output = NULL;
    int status = dsh_testkit_cli_merged (endpoint, args, 60000, &output);
    int64_t elapsed_ms = zclock_mono () - started;
    cpu_ms = s_children_cpu_ms () - cpu_ms;
    assert_non_null (output);
    char *newline = strchr (output, '\n');
    bool one_line = newline && !newline [1] && strstr (output, "no connection could be made");
    if (status != 3 || elapsed_ms > 20000 || cpu_ms > 2000 || !one_line) {
        //  Freed before failing, which leaves the test
        char said [1024];
        snprintf (said, sizeof (said), "%s", output);
        zstr_free (&output);
        fail_msg ("dsh %s against %s: exit %d after %" PRId64 " ms, %" PRId64 " ms of CPU; want exit 3 "
                  "and one line saying no connection could be made, got: %s",
                  args [0], endpoint, status, elapsed_ms, cpu_ms, said);
    }
    return output;
}

//  A typo in the broker's endpoint (a closed port): call fails as ping
//  does, with the same line, in about the same time, and sleeps meanwhile
static void
test_unreachable_broker (void **state)
{
    (void) state;
    int held = -1;
    int port = s_closed_port (&held);
    assert_true (port > 0);
    char endpoint [64];
    snprintf (endpoint, sizeof (endpoint), "tcp://127.0.0.1:%d", port);
    char *ping = s_cli_unreachable (endpoint, (const char *[]) { "ping", NULL });
    char *call = s_cli_unreachable (endpoint, (const char *[]) { "call", "echo", "{\"message\":\"hi\"}", NULL });
    assert_string_equal (call, ping);
    zstr_free (&ping);
    zstr_free (&call);
    close (held);
}

//  call --batch: results in call order, one per call, exit 1 if any failed
static void
test_call_batch (void **state)
{
    broker_t *broker = (broker_t *) *state;
    char path [] = "/tmp/dsh-batch-XXXXXX";
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    const char *batch = "[{\"name\":\"echo\",\"arguments\":{\"message\":\"one\"}},"
                        " {\"name\":\"sleep_ms\",\"arguments\":{\"ms\":1}},"
                        " {\"name\":\"nope\",\"arguments\":{}},"
                        " {\"name\":\"echo\",\"arguments\":{\"message\":\"four\"}}]";
    assert_true (write (fd, batch, strlen (batch)) == (ssize_t) strlen (batch));
    close (fd);
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "--batch", path, NULL }, &output), 1);
    json_t *results = s_parse (output);
    assert_int_equal (json_array_size (results), 4);
    const char *texts [] = { "one", "slept 1 ms", "Error: unknown tool \"nope\"", "four" };
    for (size_t index = 0; index < 4; index++)
        assert_string_equal (json_string_value (json_object_get (json_array_get (json_object_get (
            json_array_get (results, index), "content"), 0), "text")), texts [index]);
    json_decref (results);
    zstr_free (&output);
    //  Not an array of calls: a usage error, nothing sent
    assert_true (truncate (path, 0) == 0);
    fd = open (path, O_WRONLY);
    assert_true (write (fd, "{\"name\":1}", 10) == 10);
    close (fd);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "--batch", path, NULL }, &output), 2);
    zstr_free (&output);
    unlink (path);
}

//  Ctrl-C during a call cancels it: the broker answers CANCELLED at once
static void
test_call_interrupted (void **state)
{
    broker_t *broker = (broker_t *) *state;
    const char *argv [] = { CLI, "--broker", broker->endpoint, "call", "sleep_ms", "{\"ms\":20000}", NULL };
    dsh_testproc_t *call = dsh_testproc_start (argv);
    assert_non_null (call);
    //  Until the call is in flight
    dsh_client_t *client = dsh_client_new (broker->endpoint);
    int64_t give_up = zclock_mono () + 5000;
    bool in_flight = false;
    while (!in_flight && zclock_mono () < give_up) {
        char error [256];
        dsh_reply_t *pong = dsh_client_request (client, DSH_PING, NULL, 1000, error, sizeof (error));
        assert_non_null (pong);
        in_flight = dsh_map_get (dsh_reply_body (pong), "inFlight")->via.u64 == 1;
        dsh_reply_destroy (&pong);
        if (!in_flight)
            zclock_sleep (20);
    }
    assert_true (in_flight);
    int64_t started = zclock_mono ();
    dsh_testproc_signal (call, SIGINT);
    assert_int_equal (dsh_testproc_wait (call, 5000), 1);
    assert_true (zclock_mono () - started < 3000);
    const char *output = dsh_testproc_output (call, 1000);
    json_t *result = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")),
                         DSH_E_CANCELLED);
    json_decref (result);
    dsh_testproc_destroy (&call);
    dsh_client_destroy (&client);
}

//  dsh stats: the STATS reply as JSON when stdout is not a terminal (and
//  with --json), from the first broker of a list
static void
test_stats (void **state)
{
    broker_t *broker = (broker_t *) *state;
    char *output;
    for (int index = 0; index < 2; index++) {
        assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "echo", "{\"message\":\"m\"}",
                                                                      "--agent", "cli-agent", NULL }, &output), 0);
        zstr_free (&output);
    }
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "fail", "--agent", "cli-agent", NULL },
                             &output), 1);
    zstr_free (&output);
    char *list = zsys_sprintf ("%s,tcp://127.0.0.1:1", broker->endpoint);
    const char *const variants [][3] = { { "stats", NULL }, { "stats", "--json", NULL } };
    for (size_t variant = 0; variant < 2; variant++) {
        assert_int_equal (s_cli (list, variants [variant], &output), 0);
        json_t *stats = s_parse (output);
        assert_true (json_is_true (json_object_get (stats, "enabled")));
        assert_null (json_object_get (stats, "id"));
        assert_int_equal (json_integer_value (json_object_get (stats, "calls")), 3);
        json_t *tools = json_object_get (stats, "tools");
        json_t *echo = json_array_get (tools, 0);
        assert_string_equal (json_string_value (json_object_get (echo, "name")), "echo");
        assert_int_equal (json_integer_value (json_object_get (json_object_get (echo, "outcomes"), "ok")), 2);
        json_t *agent = json_array_get (json_object_get (stats, "agents"), 0);
        assert_string_equal (json_string_value (json_object_get (agent, "agent")), "cli-agent");
        assert_int_equal (json_integer_value (json_object_get (agent, "calls")), 3);
        assert_int_equal (json_integer_value (json_object_get (agent, "errors")), 1);
        assert_string_equal (json_string_value (json_object_get (json_array_get (json_object_get (stats, "components"),
                                                                                 0), "id")), "demo");
        json_decref (stats);
        zstr_free (&output);
    }
    zstr_free (&list);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "stats", "--json=yes", NULL }, &output), 2);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "stats", "extra", NULL }, &output), 2);
    zstr_free (&output);
}

static void
test_help (void **state)
{
    broker_t *broker = (broker_t *) *state;
    const char *commands [] = { "ping", "tools", "get", "call", "watch", "schemas", "chain", "mode",
                                "approve", "deny", "pending", "approver", "stats", "pins", "grants", NULL };
    for (size_t index = 0; commands [index]; index++) {
        char *output;
        assert_int_equal (s_cli (broker->endpoint, (const char *[]) { commands [index], "--help", NULL },
                                 &output), 0);
        char *usage = zsys_sprintf ("] %s", commands [index]);
        if (!strstr (output, usage))
            fail_msg ("dsh %s --help says: %s", commands [index], output);
        zstr_free (&usage);
        zstr_free (&output);
    }
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "--help", NULL }, &output), 0);
    for (size_t index = 0; commands [index]; index++)
        assert_non_null (strstr (output, commands [index]));
    //  Every line of the command list is indented, a summary's continuation
    //  lines as its first
    char *list = strstr (output, "commands:\n");
    char *end = list? strstr (list, "\noptions:"): NULL;
    assert_non_null (end);
    for (char *line = strchr (list, '\n') + 1; line < end; line = strchr (line, '\n') + 1)
        if (strncmp (line, "  ", 2) != 0 && *line != '\n')
            fail_msg ("dsh --help: a line of the command list is not indented: %.60s", line);
    zstr_free (&output);
}

static void
test_schemas (void **state)
{
    broker_t *broker = (broker_t *) *state;
    const char *formats [] = { "json", "openai", "anthropic", "mcp", NULL };
    for (size_t index = 0; formats [index]; index++) {
        char *output;
        assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "schemas", "--format", formats [index], NULL },
                                 &output), 0);
        json_t *rendered = s_parse (output);
        assert_non_null (strstr (output, "sleep_ms"));
        json_decref (rendered);
        zstr_free (&output);
    }
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "schemas", "--format", "markdown", NULL },
                             &output), 0);
    assert_non_null (strstr (output, "## Tools"));
    assert_non_null (strstr (output, "echo"));
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "schemas", "--format", "yaml", NULL },
                             &output), 2);
    zstr_free (&output);
}

//  Issue requirement (typed definitions): `dsh call` with a missing
//  required argument prints the violation and exits non-zero, and the
//  handler never ran.
static void
test_missing_required_argument (void **state)
{
    broker_t *broker = (broker_t *) *state;
    char root [] = "/tmp/dsh-cli-fs-XXXXXX";
    assert_non_null (mkdtemp (root));
    dsh_testproc_t *fs = dsh_testkit_component ("components/fs/dsh-fs", broker->endpoint, "fs",
                                                (const char *[]) { "--root", root, NULL });
    assert_non_null (fs);
    assert_int_equal (dsh_testkit_wait_tools (broker->endpoint, "write_file", 1, 5000), 0);

    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "write_file", "{\"path\":\"x.txt\"}", NULL },
                             &output), 1);
    assert_non_null (strstr (output, "missing required property \\\"content\\\""));
    json_t *result = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")),
                         DSH_E_INVALID_ARGS);
    json_decref (result);
    zstr_free (&output);
    char *written = zsys_sprintf ("%s/x.txt", root);
    struct stat status;
    assert_int_equal (stat (written, &status), -1);
    assert_int_equal (errno, ENOENT);

    //  With the argument, the handler runs
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "write_file",
                                                                  "{\"path\":\"x.txt\",\"content\":\"now\"}", NULL },
                             &output), 0);
    zstr_free (&output);
    assert_int_equal (stat (written, &status), 0);
    assert_int_equal (status.st_size, 3);
    unlink (written);
    zstr_free (&written);
    dsh_testproc_destroy (&fs);
    assert_int_equal (rmdir (root), 0);
}

//  ---------------------------------------------------------------------
//  The chain commands

static void
test_chain_command (void **state)
{
    (void) state;
    broker_t *broker = s_broker_start (
        "chain\n"
        "    stage\n"
        "        name = \"outer\"\n"
        "        kind = \"trace\"\n"
        "    stage\n"
        "        name = \"inner\"\n"
        "        kind = \"trace\"\n"
        "        timeout_ms = 1234\n");
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "echo", "{\"message\":\"m\"}", NULL },
                             &output), 0);
    assert_non_null (strstr (output, "m outer:before inner:before inner:after outer:after"));
    zstr_free (&output);

    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "chain", NULL }, &output), 0);
    json_t *stages = s_parse (output);
    assert_true (json_is_array (stages));
    assert_int_equal (json_array_size (stages), 2);
    json_t *outer = json_array_get (stages, 0);
    json_t *inner = json_array_get (stages, 1);
    assert_string_equal (json_string_value (json_object_get (outer, "name")), "outer");
    assert_string_equal (json_string_value (json_object_get (outer, "kind")), "trace");
    assert_string_equal (json_string_value (json_object_get (outer, "where")), "inproc");
    assert_false (json_is_true (json_object_get (outer, "failOpen")));
    assert_int_equal (json_integer_value (json_object_get (outer, "passed")), 1);
    assert_int_equal (json_integer_value (json_object_get (outer, "answered")), 0);
    assert_int_equal (json_integer_value (json_object_get (outer, "failed")), 0);
    assert_string_equal (json_string_value (json_object_get (inner, "name")), "inner");
    assert_int_equal (json_integer_value (json_object_get (inner, "timeoutMs")), 1234);
    assert_int_equal (json_integer_value (json_object_get (inner, "passed")), 1);
    json_decref (stages);
    zstr_free (&output);
    s_broker_stop (&broker);

    //  A broker with no chain shows an empty one
    broker = s_broker_start (NULL);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "chain", NULL }, &output), 0);
    stages = s_parse (output);
    assert_int_equal (json_array_size (stages), 0);
    json_decref (stages);
    zstr_free (&output);
    s_broker_stop (&broker);
}

static void
test_mode (void **state)
{
    (void) state;
    broker_t *broker = s_broker_start (
        "chain\n"
        "    stage\n"
        "        name = \"plan\"\n"
        "        kind = \"plan\"\n"
        "    stage\n"
        "        name = \"planning-2\"\n"
        "        kind = \"plan\"\n");
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "mode", "planner", "plan", NULL }, &output), 0);
    json_t *data = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (data, "agent")), "planner");
    assert_string_equal (json_string_value (json_object_get (data, "mode")), "plan");
    json_decref (data);
    zstr_free (&output);

    //  A call of a tool that is not read-only as that agent is denied; another agent's passes
    const char *as_planner [] = { "call", "tick", "{\"ms\":1}", "--agent", "planner", NULL };
    assert_int_equal (s_cli (broker->endpoint, as_planner, &output), 1);
    json_t *result = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (json_object_get (result, "error"), "code")),
                         DSH_E_DENIED);
    assert_non_null (strstr (output, "not available in plan mode"));
    json_decref (result);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "echo", "{\"message\":\"m\"}",
                                                                  "--agent", "builder", NULL }, &output), 0);
    zstr_free (&output);

    //  Back to normal
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "mode", "planner", "normal", NULL }, &output), 0);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, as_planner, &output), 0);
    zstr_free (&output);

    //  --stage picks another plan stage
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "mode", "planner", "plan",
                                                                  "--stage", "planning-2", NULL }, &output), 0);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, as_planner, &output), 1);
    assert_non_null (strstr (output, "not available in plan mode"));
    zstr_free (&output);

    //  No such stage: exit 1, nothing on stdout; a bad mode: usage
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "mode", "planner", "plan",
                                                                  "--stage", "nosuch", NULL }, &output), 1);
    assert_string_equal (output, "");
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "mode", "planner", "later", NULL }, &output), 2);
    zstr_free (&output);
    s_broker_stop (&broker);
}

static const char *s_permission =
    "chain\n"
    "    stage\n"
    "        name = \"permission\"\n"
    "        kind = \"permission\"\n"
    "        timeout_ms = 20000\n"
    "        approval_timeout_ms = 10000\n"
    "        rule\n"
    "            tool = \"sample_*\"\n"
    "            action = \"ask\"\n";

//  schemas --agent: only what the permission stage could let that agent call
static void
test_schemas_for_agent (void **state)
{
    (void) state;
    broker_t *broker = s_broker_start (
        "chain\n"
        "    stage\n"
        "        name = \"permission\"\n"
        "        kind = \"permission\"\n"
        "        rule\n"
        "            tool = \"*\"\n"
        "            agent = \"guest-*\"\n"
        "            action = \"deny\"\n"
        "        rule\n"
        "            tool = \"echo\"\n"
        "            agent = \"guest-*\"\n"
        "            action = \"allow\"\n"
        "        rule\n"
        "            tool = \"sample_content\"\n"
        "            action = \"ask\"\n");
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "schemas", "--agent", "worker", NULL }, &output), 0);
    json_t *tools = s_parse (output);
    assert_int_equal (json_array_size (tools), DSH_TESTKIT_DEMO_TOOLS);
    json_decref (tools);
    zstr_free (&output);
    //  deny beats allow: a guest sees nothing; an asking tool stays listed for others
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "schemas", "--agent", "guest-1", NULL }, &output), 0);
    tools = s_parse (output);
    assert_int_equal (json_array_size (tools), 0);
    json_decref (tools);
    zstr_free (&output);
    //  No such stage: an error, not an unfiltered list
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "schemas", "--agent", "x", "--stage", "nope", NULL },
                             &output), 1);
    zstr_free (&output);
    s_broker_stop (&broker);
}

//  Starts `dsh approver` with extra args. stdin_fd >= 0 becomes its stdin.
static dsh_testproc_t *
s_approver_start (broker_t *broker, const char *const *extra, int stdin_fd)
{
    const char *argv [16] = { CLI, "--broker", broker->endpoint, "approver" };
    size_t argc = 4;
    for (size_t index = 0; extra && extra [index] && argc < 15; index++)
        argv [argc++] = extra [index];
    argv [argc] = NULL;
    dsh_testproc_t *approver = dsh_testproc_start_input (argv, stdin_fd);
    assert_non_null (approver);
    return approver;
}

//  Sends a call that asks until the approver reports it pending (it is
//  denied at once until the stage has heard from the approver). Returns
//  the approver's pending line as JSON.
static json_t *
s_call_until_pending (dsh_client_t *client, dsh_testproc_t *approver, const char *call_id)
{
    int64_t give_up = zclock_mono () + 10000;
    int attempt = 0;
    char *line = NULL;
    while (!line && zclock_mono () < give_up) {
        char attempt_id [64];
        snprintf (attempt_id, sizeof (attempt_id), "%s-try%d", call_id, attempt++);
        assert_non_null (dsh_client_call_send (client, attempt_id, "sample_content", NULL, 0, NULL, NULL, 0, 30000));
        dsh_reply_t *reply = NULL;
        while (!line && !reply && zclock_mono () < give_up) {
            line = dsh_testproc_wait_line (approver, "\"pending\"", 100);
            if (!line)
                reply = dsh_client_recv (client, 0);
        }
        if (reply) {
            assert_string_equal (dsh_reply_text (reply), "Error: tool \"sample_content\" requires approval");
            dsh_reply_destroy (&reply);
        }
    }
    assert_non_null (line);
    json_t *pending = s_parse (line);
    zstr_free (&line);
    assert_string_equal (json_string_value (json_object_get (pending, "event")), "pending");
    assert_string_equal (json_string_value (json_object_get (pending, "tool")), "sample_content");
    assert_memory_equal (json_string_value (json_object_get (pending, "callId")), call_id, strlen (call_id));
    assert_int_equal (strlen (json_string_value (json_object_get (pending, "id"))), 8);
    return pending;
}

//  The next reply (a RESULT) on client, or fail.
static dsh_reply_t *
s_result (dsh_client_t *client)
{
    dsh_reply_t *reply = dsh_client_recv (client, 15000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    return reply;
}

static void
test_approver_auto (void **state)
{
    (void) state;
    broker_t *broker = s_broker_start (s_permission);
    dsh_client_t *client = dsh_client_new (broker->endpoint);

    //  --auto allow: the held call goes on to the tool
    dsh_testproc_t *approver = s_approver_start (broker, (const char *[]) { "--auto", "allow", NULL }, -1);
    json_t *pending = s_call_until_pending (client, approver, "auto-allow");
    json_decref (pending);
    dsh_reply_t *reply = s_result (client);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "sample text");
    dsh_reply_destroy (&reply);
    char *line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    json_t *resolved = s_parse (line);
    assert_string_equal (json_string_value (json_object_get (resolved, "outcome")), "allowed");
    json_decref (resolved);
    zstr_free (&line);
    //  ... and so does a `dsh call` from another process
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "sample_content", NULL }, &output), 0);
    zstr_free (&output);
    //  SIGTERM ends it cleanly
    dsh_testproc_signal (approver, SIGTERM);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);

    //  --auto deny: the call is rejected
    approver = s_approver_start (broker, (const char *[]) { "--auto", "deny", NULL }, -1);
    pending = s_call_until_pending (client, approver, "auto-deny");
    json_decref (pending);
    reply = s_result (client);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"sample_content\" was rejected by the approver");
    dsh_reply_destroy (&reply);
    line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    assert_non_null (strstr (line, "\"outcome\":\"rejected\""));
    zstr_free (&line);
    dsh_testproc_signal (approver, SIGINT);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);

    //  A stage that is not a permission stage has no approvals socket
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "approver", "--stage", "nosuch", NULL }, &output), 1);
    zstr_free (&output);
    dsh_client_destroy (&client);
    s_broker_stop (&broker);
}

static void
test_pending_and_approve (void **state)
{
    (void) state;
    broker_t *broker = s_broker_start (s_permission);
    dsh_client_t *client = dsh_client_new (broker->endpoint);
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (broker, NULL, in [0]);
    close (in [0]);

    //  A call waits; `dsh pending` shows it; `dsh approve` from another
    //  process lets it through
    json_t *pending = s_call_until_pending (client, approver, "held");
    const char *id = json_string_value (json_object_get (pending, "id"));
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "pending", NULL }, &output), 0);
    json_t *open = s_parse (output);
    assert_int_equal (json_array_size (open), 1);
    assert_string_equal (json_string_value (json_object_get (json_array_get (open, 0), "id")), id);
    assert_string_equal (json_string_value (json_object_get (json_array_get (open, 0), "tool")), "sample_content");
    json_decref (open);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "approve", id, NULL }, &output), 0);
    json_t *data = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (data, "id")), id);
    assert_string_equal (json_string_value (json_object_get (data, "outcome")), "allowed");
    json_decref (data);
    zstr_free (&output);
    dsh_reply_t *reply = s_result (client);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "sample text");
    dsh_reply_destroy (&reply);
    char *line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    assert_non_null (strstr (line, id));
    assert_non_null (strstr (line, "\"outcome\":\"allowed\""));
    zstr_free (&line);
    //  Deciding it again is an error
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "deny", id, NULL }, &output), 1);
    assert_string_equal (output, "");
    zstr_free (&output);
    json_decref (pending);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "pending", NULL }, &output), 0);
    open = s_parse (output);
    assert_int_equal (json_array_size (open), 0);
    json_decref (open);
    zstr_free (&output);

    //  `dsh deny` rejects
    pending = s_call_until_pending (client, approver, "denied");
    id = json_string_value (json_object_get (pending, "id"));
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "deny", id, NULL }, &output), 0);
    assert_non_null (strstr (output, "rejected"));
    zstr_free (&output);
    reply = s_result (client);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"sample_content\" was rejected by the approver");
    dsh_reply_destroy (&reply);
    json_decref (pending);

    //  Decisions typed on the approver's stdin: y for the latest, deny ID
    pending = s_call_until_pending (client, approver, "typed-yes");
    json_decref (pending);
    const char *yes = "y\n";
    assert_int_equal (write (in [1], yes, strlen (yes)), (ssize_t) strlen (yes));
    reply = s_result (client);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    pending = s_call_until_pending (client, approver, "typed-deny");
    char *command = zsys_sprintf ("nonsense\ndeny %s\n", json_string_value (json_object_get (pending, "id")));
    assert_int_equal (write (in [1], command, strlen (command)), (ssize_t) strlen (command));
    zstr_free (&command);
    json_decref (pending);
    reply = s_result (client);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"sample_content\" was rejected by the approver");
    dsh_reply_destroy (&reply);

    //  End of stdin ends the approver
    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
    dsh_client_destroy (&client);
    s_broker_stop (&broker);
}

//  dsh approve ID --for N: a grant; dsh grants lists it, revoke ends it
static void
test_approve_for_minutes (void **state)
{
    (void) state;
    broker_t *broker = s_broker_start (s_permission);
    dsh_client_t *client = dsh_client_new (broker->endpoint);
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (broker, NULL, in [0]);
    close (in [0]);
    json_t *pending = s_call_until_pending (client, approver, "granted");
    assert_true (json_is_true (json_object_get (pending, "grants")));
    const char *id = json_string_value (json_object_get (pending, "id"));
    char *output;
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "approve", id, "--for", "5", NULL }, &output), 0);
    json_t *data = s_parse (output);
    assert_string_equal (json_string_value (json_object_get (data, "outcome")), "allowed");
    json_decref (data);
    zstr_free (&output);
    json_decref (pending);
    dsh_reply_t *reply = s_result (client);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    char *line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    assert_non_null (strstr (line, "\"grant\":\""));
    zstr_free (&line);

    //  The next call passes with nobody asked (nobody would answer)
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "call", "sample_content", NULL }, &output), 0);
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "grants", "--json", NULL }, &output), 0);
    json_t *grants = s_parse (output);
    assert_int_equal (json_array_size (grants), 1);
    json_t *grant = json_array_get (grants, 0);
    assert_string_equal (json_string_value (json_object_get (grant, "scope")), "tool");
    assert_string_equal (json_string_value (json_object_get (grant, "tool")), "sample_content");
    assert_string_equal (json_string_value (json_object_get (grant, "stage")), "permission");
    char *grant_id = strdup (json_string_value (json_object_get (grant, "id")));
    json_decref (grants);
    zstr_free (&output);
    //  The table: one line under the heading, its expiry in 5 min
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "grants", NULL }, &output), 0);
    assert_non_null (strstr (output, "ID        AGENT"));
    char *row = strstr (output, grant_id);
    assert_non_null (row);
    assert_non_null (strstr (row, "(none)"));
    assert_non_null (strstr (row, "sample_content"));
    assert_non_null (strstr (row, " tool "));
    assert_non_null (strstr (row, "(in 5 min)"));
    zstr_free (&output);
    //  Both brokers of a list are asked: one that is silent is named, exit 3
    char *list = zsys_sprintf ("%s,tcp://127.0.0.1:1", broker->endpoint);
    assert_int_equal (dsh_testkit_cli_merged (list, (const char *[]) { "--timeout-ms", "1000", "grants", NULL },
                                              CLI_WAIT_MS, &output), 3);
    assert_non_null (strstr (output, grant_id));
    assert_non_null (strstr (output, "dsh: broker tcp://127.0.0.1:1: "));
    zstr_free (&output);
    zstr_free (&list);

    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "grants", "revoke", grant_id, NULL }, &output), 0);
    assert_non_null (strstr (output, "revoked grant "));
    zstr_free (&output);
    assert_int_equal (dsh_testkit_cli_merged (broker->endpoint, (const char *[]) { "grants", "revoke", grant_id, NULL },
                                              CLI_WAIT_MS, &output), 1);
    assert_non_null (strstr (output, "no grant "));
    zstr_free (&output);
    assert_int_equal (s_cli (broker->endpoint, (const char *[]) { "grants", NULL }, &output), 0);
    assert_string_equal (output, "no grants\n");
    zstr_free (&output);
    free (grant_id);

    //  Revoked: the next call asks again
    pending = s_call_until_pending (client, approver, "asked-again");
    char *command = zsys_sprintf ("deny %s\n", json_string_value (json_object_get (pending, "id")));
    assert_int_equal (write (in [1], command, strlen (command)), (ssize_t) strlen (command));
    zstr_free (&command);
    json_decref (pending);
    reply = s_result (client);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    dsh_reply_destroy (&reply);

    //  Bad usage
    const char *const bad [][6] = {
        { "approve", "x", "--for", "0", NULL }, { "approve", "x", "--for", "5x", NULL },
        { "grants", "revoke", NULL }, { "grants", "bogus", NULL }, { "grants", "list", "x", NULL },
        { "approver", "--grant-minutes", "0", NULL }
    };
    for (size_t index = 0; index < sizeof (bad) / sizeof (bad [0]); index++) {
        assert_int_equal (s_cli (broker->endpoint, bad [index], &output), 2);
        zstr_free (&output);
    }
    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
    dsh_client_destroy (&client);
    s_broker_stop (&broker);
}

//  A stage with grants = false: the approver offers none and sends none
static void
test_approver_without_grants (void **state)
{
    (void) state;
    char *config = zsys_sprintf ("%s        grants = false\n", s_permission);
    broker_t *broker = s_broker_start (config);
    zstr_free (&config);
    dsh_client_t *client = dsh_client_new (broker->endpoint);
    int in [2], err [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    assert_int_equal (pipe2 (err, O_CLOEXEC), 0);
    const char *argv [] = { CLI, "--broker", broker->endpoint, "approver", NULL };
    dsh_testproc_t *approver = dsh_testproc_start_fds (argv, in [0], err [1]);
    assert_non_null (approver);
    close (in [0]);
    close (err [1]);
    json_t *pending = s_call_until_pending (client, approver, "once-only");
    assert_false (json_is_true (json_object_get (pending, "grants")));
    const char *id = json_string_value (json_object_get (pending, "id"));
    char *command = zsys_sprintf ("allow %s for 5\n", id);
    assert_int_equal (write (in [1], command, strlen (command)), (ssize_t) strlen (command));
    zstr_free (&command);
    char said [512] = "";
    size_t size = 0;
    int64_t give_up = zclock_mono () + 5000;
    while (!strstr (said, "gives no grants") && zclock_mono () < give_up) {
        struct pollfd item = { err [0], POLLIN, 0 };
        if (poll (&item, 1, 100) > 0) {
            ssize_t got = read (err [0], said + size, sizeof (said) - size - 1);
            if (got > 0)
                said [size += (size_t) got] = 0;
        }
    }
    assert_non_null (strstr (said, "gives no grants: allow it once or deny it"));
    command = zsys_sprintf ("allow %s\n", id);
    assert_int_equal (write (in [1], command, strlen (command)), (ssize_t) strlen (command));
    zstr_free (&command);
    json_decref (pending);
    dsh_reply_t *reply = s_result (client);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    char *line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    assert_null (strstr (line, "\"grant\""));
    zstr_free (&line);
    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
    close (err [0]);
    dsh_client_destroy (&client);
    s_broker_stop (&broker);
}

//  ---------------------------------------------------------------------
//  Pins

static int
s_drift_answer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "drifted");
    return 0;
}

//  A component "drifter" serving drift, with this description, once listed.
static dsh_provider_t *
s_drifter (const char *endpoint, const char *description)
{
    dsh_provider_t *provider = dsh_provider_new (endpoint, "drifter", 1);
    assert_non_null (provider);
    char *definition = zsys_sprintf ("{\"name\": \"drift\", \"description\": \"%s\", "
                                     "\"parameters\": {\"type\": \"object\"}}", description);
    assert_int_equal (dsh_provider_add_raw (provider, definition, s_drift_answer, NULL), 0);
    zstr_free (&definition);
    dsh_provider_start (provider);
    assert_int_equal (dsh_provider_wait_ready (provider, 10000), 0);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "drift", 1, 10000), 0);
    return provider;
}

//  The drifter restarted with another description.
static void
s_drifter_restart (dsh_provider_t **provider_p, const char *endpoint, const char *description)
{
    dsh_provider_destroy (provider_p);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "drift", 0, 10000), 0);
    *provider_p = s_drifter (endpoint, description);
}

//  drift's pin as `dsh pins --json` lists it, once its state is state.
static json_t *
s_drift_pin (const char *endpoint, const char *state)
{
    int64_t give_up = zclock_mono () + 10000;
    while (zclock_mono () < give_up) {
        char *output;
        assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "--json", NULL }, &output), 0);
        json_t *body = s_parse (output);
        zstr_free (&output);
        json_t *found = NULL;
        size_t index;
        json_t *pin;
        json_array_foreach (json_object_get (body, "pins"), index, pin)
            if (streq (json_string_value (json_object_get (pin, "name")), "drift")
            &&  streq (json_string_value (json_object_get (pin, "state")), state))
                found = json_incref (pin);
        json_decref (body);
        if (found)
            return found;
        zclock_sleep (100);
    }
    fail_msg ("dsh pins never listed drift %s", state);
    return NULL;
}

//  `dsh call drift`: its exit status; *text the result's text.
static int
s_call_drift (const char *endpoint, char **text)
{
    char *output;
    int status = s_cli (endpoint, (const char *[]) { "call", "drift", NULL }, &output);
    json_t *result = s_parse (output);
    zstr_free (&output);
    *text = strdup (json_string_value (json_object_get (json_array_get (json_object_get (result, "content"), 0),
                                                        "text")));
    json_decref (result);
    return status;
}

//  A component restarted with another description: dsh pins shows it
//  quarantined, what changed, and releases it
static void
test_pins (void **state)
{
    broker_t *broker = (broker_t *) *state;
    const char *endpoint = broker->endpoint;
    dsh_provider_t *drifter = s_drifter (endpoint, "first");
    json_t *pin = s_drift_pin (endpoint, "pinned");
    char *first = strdup (json_string_value (json_object_get (pin, "digest")));
    assert_int_equal (strlen (first), 64);
    json_decref (pin);
    char *text;
    assert_int_equal (s_call_drift (endpoint, &text), 0);
    zstr_free (&text);

    s_drifter_restart (&drifter, endpoint, "second");
    pin = s_drift_pin (endpoint, "quarantined");
    assert_string_equal (json_string_value (json_object_get (pin, "digest")), first);
    char *offered = strdup (json_string_value (json_object_get (pin, "offeredDigest")));
    assert_string_not_equal (offered, first);
    assert_string_equal (json_string_value (json_object_get (pin, "reason")), "definition changed since it was pinned");
    json_decref (pin);

    //  The table: one line per pin, digests short
    char *output;
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", NULL }, &output), 0);
    assert_non_null (strstr (output, "pins policy tofu\n"));
    char *row = strstr (output, "\ndrift ");
    assert_non_null (row);
    char *expected = zsys_sprintf (" quarantined %.12s %.12s drifter          definition changed since it was pinned\n",
                                   first, offered);
    assert_non_null (strstr (row, expected));
    zstr_free (&expected);
    assert_non_null (strstr (output, "\necho "));
    assert_non_null (strstr (output, "1 quarantined: review one with `dsh pins show NAME`"));
    zstr_free (&output);

    //  Calls to it are refused, naming the way out
    assert_int_equal (s_call_drift (endpoint, &text), 1);
    assert_non_null (strstr (text, "is quarantined"));
    assert_non_null (strstr (text, "dsh pins accept drift"));
    zstr_free (&text);

    //  show: what changed, and the command that releases this definition
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "show", "drift", NULL }, &output), 0);
    assert_non_null (strstr (output, "drift: quarantined: definition changed since it was pinned\n"));
    assert_non_null (strstr (output, "changes, pinned -> offered\n"));
    assert_non_null (strstr (output, "  - description: \"first\"\n"));
    assert_non_null (strstr (output, "  + description: \"second\"\n"));
    assert_non_null (strstr (output, "offered definition\n"));
    assert_non_null (strstr (output, "pinned definition\n"));
    expected = zsys_sprintf ("release it: dsh pins accept drift --digest %s\n", offered);
    assert_non_null (strstr (output, expected));
    zstr_free (&expected);
    zstr_free (&output);
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "show", "drift", "--json", NULL }, &output), 0);
    json_t *body = s_parse (output);
    assert_true (json_is_string (json_object_get (json_object_get (body, "pin"), "diff")));
    assert_true (json_is_object (json_object_get (json_object_get (body, "pin"), "offered")));
    json_decref (body);
    zstr_free (&output);

    //  Accept bound to a digest that is not the one offered: no
    assert_int_equal (dsh_testkit_cli_merged (endpoint, (const char *[]) { "pins", "accept", "drift", "--digest", first,
                                                                           NULL }, CLI_WAIT_MS, &output), 1);
    assert_non_null (strstr (output, "show it again"));
    zstr_free (&output);
    assert_int_equal (s_call_drift (endpoint, &text), 1);
    zstr_free (&text);
    //  ... to the one offered: pinned, and callable at once
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "accept", "drift", "--digest", offered, NULL },
                             &output), 0);
    expected = zsys_sprintf ("accepted drift: pinned %.12s and released\n", offered);
    assert_string_equal (output, expected);
    zstr_free (&expected);
    zstr_free (&output);
    assert_int_equal (s_call_drift (endpoint, &text), 0);
    assert_string_equal (text, "drifted");
    zstr_free (&text);
    pin = s_drift_pin (endpoint, "pinned");
    assert_string_equal (json_string_value (json_object_get (pin, "digest")), offered);
    json_decref (pin);

    //  Reject: it stays quarantined, and says who held it back
    s_drifter_restart (&drifter, endpoint, "third");
    json_decref (s_drift_pin (endpoint, "quarantined"));
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "reject", "drift", NULL }, &output), 0);
    assert_string_equal (output, "rejected drift: it stays quarantined\n");
    zstr_free (&output);
    pin = s_drift_pin (endpoint, "quarantined");
    assert_string_equal (json_string_value (json_object_get (pin, "reason")), "rejected by an admin");
    json_decref (pin);
    assert_int_equal (s_call_drift (endpoint, &text), 1);
    zstr_free (&text);

    //  Forget: under tofu, the definition served now is pinned anew
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "forget", "drift", NULL }, &output), 0);
    assert_non_null (strstr (output, "forgot the pin of drift"));
    zstr_free (&output);
    json_decref (s_drift_pin (endpoint, "pinned"));
    assert_int_equal (s_call_drift (endpoint, &text), 0);
    zstr_free (&text);

    //  Refusals and bad usage
    assert_int_equal (s_cli (endpoint, (const char *[]) { "pins", "show", "nosuch", NULL }, &output), 1);
    assert_string_equal (output, "");
    zstr_free (&output);
    const char *const bad [][6] = {
        { "pins", "show", NULL }, { "pins", "list", "x", NULL }, { "pins", "bogus", NULL },
        { "pins", "reject", "drift", "--digest", "d", NULL }, { "pins", "accept", NULL }
    };
    for (size_t index = 0; index < sizeof (bad) / sizeof (bad [0]); index++) {
        assert_int_equal (s_cli (endpoint, bad [index], &output), 2);
        zstr_free (&output);
    }

    //  A list of brokers: read from the first that answers; a change goes
    //  to every one, naming the one that did not take it
    char *list = zsys_sprintf ("tcp://127.0.0.1:1,%s", endpoint);
    assert_int_equal (s_cli (list, (const char *[]) { "--timeout-ms", "1000", "pins", NULL }, &output), 0);
    assert_non_null (strstr (output, "\ndrift "));
    zstr_free (&output);
    assert_int_equal (dsh_testkit_cli_merged (list, (const char *[]) { "--timeout-ms", "1000", "pins", "forget",
                                                                       "drift", NULL }, CLI_WAIT_MS, &output), 3);
    assert_non_null (strstr (output, "dsh: broker tcp://127.0.0.1:1 did not forget drift: "));
    zstr_free (&output);
    zstr_free (&list);
    zstr_free (&first);
    zstr_free (&offered);
    dsh_provider_destroy (&drifter);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_queries, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_calls, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_call_batch, s_setup, s_teardown),
        cmocka_unit_test (test_unreachable_broker),
        cmocka_unit_test_setup_teardown (test_call_interrupted, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_help, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_stats, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_schemas, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_missing_required_argument, s_setup, s_teardown),
        cmocka_unit_test (test_chain_command),
        cmocka_unit_test (test_mode),
        cmocka_unit_test (test_approver_auto),
        cmocka_unit_test (test_schemas_for_agent),
        cmocka_unit_test (test_pending_and_approve),
        cmocka_unit_test (test_approve_for_minutes),
        cmocka_unit_test (test_approver_without_grants),
        cmocka_unit_test_setup_teardown (test_pins, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
