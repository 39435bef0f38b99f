/*  =========================================================================
    test_approver - approvers come and go, end to end

    Real processes, as a user runs them: dsh-broker with the chain of
    deploy/dsh-broker.cfg (permission asks a human for write_file), dsh-fs,
    and `dsh approver`. An approver that exits, or is killed -9, is noticed:
    an ask afterwards is refused at once with `requires approval`, an ask
    it left open ends within a second or two, and `dsh pending` forgets it.
    A request larger than 64 KiB still reaches the approver; `y` answers
    the latest request still open. On a terminal
    (a pseudo-terminal here) the approver shows the request and asks y/N,
    and says so when nobody decided in time. Grants: `t` on a terminal lets
    the next calls of the tool through, whatever their arguments, until
    `dsh grants revoke` ends it; `a` only calls with the same arguments;
    in a pipe, `allow ID args for N` and `allow ID for N` do the same.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#define FS          "components/fs/dsh-fs"
#define CLI         "components/cli/dsh"
#define CLI_WAIT_MS 15000
//  Bounds against what a wrong stage would do, hold the call to its 30 s
//  deadline: a third of that, so that they hold on a loaded machine and
//  under a sanitizer, and still tell "at once" from "held"
#define AT_ONCE_MS  10000           //  "refused at once"
#define NOTICED_MS  10000           //  an approver killed -9 counts as gone by then

#define REFUSED     "Error: tool \"write_file\" requires approval"
//  The main job's permission stage gives grants: the prompt offers t and a
#define PROMPT      "Allow write_file? [y/N/t/a] "
#define ABANDONED   "Error: tool \"write_file\" requires approval (every approver went away before deciding)"

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *fs;
    dsh_client_t *client;
    char endpoint [256];
    char root [64];
    int calls;                      //  for unique callIds
    int timeout_ms;                 //  of every write_file call
} rig_t;

//  The broker with deploy/dsh-broker.cfg, and dsh-fs serving a fresh
//  directory with a scratch/ to write in.
static int
s_setup (void **state)
{
    rig_t *self = (rig_t *) zmalloc (sizeof (rig_t));
    assert_non_null (self);
    const char *source = getenv ("DSH_SOURCE_DIR");
    assert_non_null (source);
    char *config_path = zsys_sprintf ("%s/deploy/dsh-broker.cfg", source);
    zfile_t *file = zfile_new (NULL, config_path);
    assert_non_null (file);
    assert_int_equal (zfile_input (file), 0);
    zchunk_t *chunk = zfile_read (file, zfile_cursize (file), 0);
    assert_non_null (chunk);
    char *config = zchunk_strdup (chunk);
    zchunk_destroy (&chunk);
    zfile_destroy (&file);
    zstr_free (&config_path);
    self->broker = dsh_testkit_broker_config (1000, config, self->endpoint, sizeof (self->endpoint));
    zstr_free (&config);
    assert_non_null (self->broker);

    snprintf (self->root, sizeof (self->root), "/tmp/dsh-approver-XXXXXX");
    assert_non_null (mkdtemp (self->root));
    char *scratch = zsys_sprintf ("%s/scratch", self->root);
    assert_int_equal (mkdir (scratch, 0700), 0);
    zstr_free (&scratch);
    self->fs = dsh_testkit_component (FS, self->endpoint, "fs", (const char *[]) { "--root", self->root, NULL });
    assert_non_null (self->fs);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "write_file", 1, 5000), 0);
    self->client = dsh_client_new (self->endpoint);
    assert_non_null (self->client);
    self->timeout_ms = 30000;
    *state = self;
    return 0;
}

static int
s_teardown (void **state)
{
    rig_t *self = (rig_t *) *state;
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->fs);
    dsh_testproc_destroy (&self->broker);
    zdir_t *dir = zdir_new (self->root, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
    free (self);
    return 0;
}

//  Sends write_file {path: scratch/<name>.txt, content} with the rig's
//  timeout (30 s unless a test says otherwise); returns its callId (static
//  until the next call).
static const char *
s_write (rig_t *self, const char *name, const char *content)
{
    static char call_id [64];
    snprintf (call_id, sizeof (call_id), "%s-%d", name, ++self->calls);
    json_t *args = json_pack ("{s:s, s:s}", "path", "", "content", content);
    char *path = zsys_sprintf ("scratch/%s.txt", name);
    json_object_set_new (args, "path", json_string (path));
    zstr_free (&path);
    char *text = json_dumps (args, JSON_COMPACT);
    json_decref (args);
    msgpack_sbuffer body;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (text, &body, error, sizeof (error)), 0);
    free (text);
    assert_non_null (dsh_client_call_send (self->client, call_id, "write_file", body.data, body.size,
                                           NULL, NULL, 0, (uint64_t) self->timeout_ms));
    msgpack_sbuffer_destroy (&body);
    return call_id;
}

//  The next RESULT for call_id within timeout_ms, or fail.
static dsh_reply_t *
s_result (rig_t *self, const char *call_id, int timeout_ms)
{
    dsh_reply_t *reply = dsh_client_recv (self->client, timeout_ms);
    if (!reply)
        fail_msg ("no result for %s within %d ms", call_id, timeout_ms);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    assert_string_equal (dsh_reply_call_id (reply), call_id);
    return reply;
}

//  An ask now is answered DENIED `requires approval` at once: no approver
//  is counted on.
static void
s_refused_at_once (rig_t *self)
{
    int64_t sent = zclock_mono ();
    const char *call_id = s_write (self, "refused", "x");
    dsh_reply_t *reply = s_result (self, call_id, AT_ONCE_MS);
    assert_true (zclock_mono () - sent < AT_ONCE_MS);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    assert_string_equal (dsh_reply_text (reply), REFUSED);
    dsh_reply_destroy (&reply);
}

//  Starts `dsh approver` with extra args; stdin_fd >= 0 becomes its stdin.
static dsh_testproc_t *
s_approver_start (rig_t *self, const char *const *extra, int stdin_fd)
{
    const char *argv [16] = { CLI, "--broker", self->endpoint, "approver" };
    size_t argc = 4;
    for (size_t index = 0; extra && extra [index] && argc < 15; index++)
        argv [argc++] = extra [index];
    argv [argc] = NULL;
    dsh_testproc_t *approver = dsh_testproc_start_input (argv, stdin_fd);
    assert_non_null (approver);
    return approver;
}

//  Asks (write_file scratch/<name>.txt) until the approver prints the
//  request: until the stage has heard the approver's hello, asks are
//  refused at once. Returns the pending line as JSON; *call_id_p is the
//  callId of the call now held.
static json_t *
s_ask_until_pending (rig_t *self, dsh_testproc_t *approver, const char *name, const char *content,
                     char **call_id_p)
{
    int64_t give_up = zclock_mono () + 10000;
    char *line = NULL;
    char *call_id = NULL;
    while (!line && zclock_mono () < give_up) {
        zstr_free (&call_id);
        call_id = strdup (s_write (self, name, content));
        dsh_reply_t *reply = NULL;
        while (!line && !reply && zclock_mono () < give_up) {
            line = dsh_testproc_wait_line (approver, "\"pending\"", 100);
            if (!line)
                reply = dsh_client_recv (self->client, 0);
        }
        if (reply) {
            assert_string_equal (dsh_reply_text (reply), REFUSED);
            dsh_reply_destroy (&reply);
        }
    }
    if (!line)
        fail_msg ("the approver printed no request within 10 s");
    json_t *pending = json_loads (line, 0, NULL);
    zstr_free (&line);
    assert_non_null (pending);
    assert_string_equal (json_string_value (json_object_get (pending, "callId")), call_id);
    assert_string_equal (json_string_value (json_object_get (pending, "tool")), "write_file");
    *call_id_p = call_id;
    return pending;
}

//  How many requests `dsh pending` lists.
static size_t
s_pending_count (rig_t *self)
{
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli (self->endpoint, (const char *[]) { "pending", NULL }, CLI_WAIT_MS, &output), 0);
    json_t *list = json_loads (output, 0, NULL);
    if (!json_is_array (list))
        fail_msg ("dsh pending printed no JSON array: %s", output);
    size_t count = json_array_size (list);
    json_decref (list);
    zstr_free (&output);
    return count;
}

//  ---------------------------------------------------------------------

//  The first case: answer one request, let the approver exit.
static void
test_approver_that_exits (void **state)
{
    rig_t *self = (rig_t *) *state;
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (self, NULL, in [0]);
    close (in [0]);
    char *call_id = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "first", "hello", &call_id);
    json_decref (pending);
    assert_int_equal (write (in [1], "y\n", 2), 2);
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "wrote 5 bytes to scratch/first.txt");
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);

    //  End of stdin: it exits, and says goodbye on the way
    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
    s_refused_at_once (self);
    s_refused_at_once (self);
    assert_int_equal (s_pending_count (self), 0);
}

//  Nobody decides: the ask ends a little before the call's own deadline,
//  with a reason that says so, not as the broker's TIMEOUT.
static void
test_ask_ends_before_the_deadline (void **state)
{
    rig_t *self = (rig_t *) *state;
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (self, NULL, in [0]);
    close (in [0]);
    self->timeout_ms = 2500;
    char *call_id = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "undecided", "x", &call_id);
    int64_t seen = zclock_mono ();
    json_decref (pending);
    dsh_reply_t *reply = s_result (self, call_id, 6000);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    assert_string_equal (dsh_reply_text (reply),
                         "Error: tool \"write_file\" requires approval (no decision came before the call's deadline)");
    //  Before the deadline the call was sent with (it was held for less)
    assert_true (zclock_mono () - seen < 2500);
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    assert_int_equal (s_pending_count (self), 0);
    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
}

//  Killed -9 while a request is open: no goodbye. The held call ends
//  soon with a clear reason, and nothing is left pending.
static void
test_approver_killed_with_a_request_open (void **state)
{
    rig_t *self = (rig_t *) *state;
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (self, NULL, in [0]);
    close (in [0]);
    char *call_id = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "held", "x", &call_id);
    json_decref (pending);
    assert_int_equal (s_pending_count (self), 1);

    dsh_testproc_signal (approver, SIGKILL);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 128 + SIGKILL);
    int64_t killed = zclock_mono ();
    dsh_reply_t *reply = s_result (self, call_id, NOTICED_MS);
    assert_true (zclock_mono () - killed < NOTICED_MS);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    assert_string_equal (dsh_reply_text (reply), ABANDONED);
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    assert_int_equal (s_pending_count (self), 0);
    s_refused_at_once (self);
    dsh_testproc_destroy (&approver);
    close (in [1]);
}

//  The second case: answer one request, then kill -9 the approver
//  with nothing open. The next ask is not held for the approver's silence.
static void
test_approver_killed_after_answering (void **state)
{
    rig_t *self = (rig_t *) *state;
    dsh_testproc_t *approver = s_approver_start (self, (const char *[]) { "--auto", "allow", NULL }, -1);
    char *call_id = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "answered", "x", &call_id);
    json_decref (pending);
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);

    dsh_testproc_signal (approver, SIGKILL);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 128 + SIGKILL);
    dsh_testproc_destroy (&approver);
    //  The stage learns it from the first send that fails: this ask's
    //  PENDING, or the heartbeat before it; either way, within a second
    int64_t sent = zclock_mono ();
    call_id = strdup (s_write (self, "after", "x"));
    reply = s_result (self, call_id, NOTICED_MS);
    assert_true (zclock_mono () - sent < NOTICED_MS);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    const char *text = dsh_reply_text (reply);
    if (!streq (text, REFUSED) && !streq (text, ABANDONED))
        fail_msg ("unexpected answer: %s", text);
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    s_refused_at_once (self);
    assert_int_equal (s_pending_count (self), 0);
}

//  A request carries the call's arguments whole: one over 64 KiB still
//  reaches the approver, and is decided.
static void
test_large_request_reaches_the_approver (void **state)
{
    rig_t *self = (rig_t *) *state;
    dsh_testproc_t *approver = s_approver_start (self, (const char *[]) { "--auto", "allow", NULL }, -1);
    size_t size = 100 * 1024;
    char *content = (char *) malloc (size + 1);
    assert_non_null (content);
    memset (content, 'a', size);
    content [size] = 0;
    char *call_id = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "large", content, &call_id);
    assert_int_equal (strlen (json_string_value (json_object_get (json_object_get (pending, "arguments"),
                                                                  "content"))), size);
    json_decref (pending);
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "wrote 102400 bytes to scratch/large.txt");
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    free (content);
    dsh_testproc_signal (approver, SIGTERM);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
    s_refused_at_once (self);
}

//  Two requests open; the newer is decided elsewhere: `y` then answers the
//  older, the latest still open (the approver must forget the one that
//  closed, not another).
static void
test_y_answers_the_latest_still_open (void **state)
{
    rig_t *self = (rig_t *) *state;
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (self, NULL, in [0]);
    close (in [0]);
    char *older = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "older", "x", &older);
    json_decref (pending);
    char *newer = strdup (s_write (self, "newer", "x"));
    char *line = dsh_testproc_wait_line (approver, "\"pending\"", 5000);
    assert_non_null (line);
    pending = json_loads (line, 0, NULL);
    zstr_free (&line);
    assert_string_equal (json_string_value (json_object_get (pending, "callId")), newer);
    char *output = NULL;
    const char *id = json_string_value (json_object_get (pending, "id"));
    assert_int_equal (dsh_testkit_cli (self->endpoint, (const char *[]) { "deny", id, NULL }, CLI_WAIT_MS, &output), 0);
    zstr_free (&output);
    dsh_reply_t *reply = s_result (self, newer, 5000);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"write_file\" was rejected by the approver");
    dsh_reply_destroy (&reply);
    line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    assert_non_null (strstr (line, id));
    zstr_free (&line);
    json_decref (pending);

    assert_int_equal (write (in [1], "y\n", 2), 2);
    reply = s_result (self, older, 5000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    zstr_free (&older);
    zstr_free (&newer);
    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
}

//  ---------------------------------------------------------------------
//  On a terminal

typedef struct {
    int master;
    pid_t pid;
    char screen [16384];            //  everything read, NUL-terminated (the start is dropped if full)
    size_t size;
} terminal_t;

//  Reads what the terminal has within timeout_ms; false at its end.
static bool
s_terminal_read (terminal_t *self, int timeout_ms)
{
    struct pollfd item = { self->master, POLLIN, 0 };
    if (poll (&item, 1, timeout_ms) <= 0)
        return true;
    if (self->size + 1 >= sizeof (self->screen)) {
        //  Keep the latest half
        size_t keep = sizeof (self->screen) / 2;
        memmove (self->screen, self->screen + self->size - keep, keep);
        self->size = keep;
    }
    ssize_t got = read (self->master, self->screen + self->size, sizeof (self->screen) - self->size - 1);
    if (got <= 0)
        return false;
    self->size += (size_t) got;
    self->screen [self->size] = 0;
    return true;
}

//  Reads from the terminal until text appears at or after offset from, or
//  timeout_ms passes. Returns the offset just past text, or -1.
static long
s_terminal_expect (terminal_t *self, size_t from, const char *text, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (true) {
        char *found = from <= self->size? strstr (self->screen + from, text): NULL;
        if (found)
            return (long) (found - self->screen) + (long) strlen (text);
        int64_t left = give_up - zclock_mono ();
        if (left <= 0 || !s_terminal_read (self, (int) left))
            return -1;
    }
}

static void
s_terminal_type (terminal_t *self, const char *keys)
{
    assert_int_equal (write (self->master, keys, strlen (keys)), (ssize_t) strlen (keys));
}

//  The child's exit status within timeout_ms, or -1.
static int
s_terminal_wait (terminal_t *self, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (zclock_mono () < give_up) {
        int status;
        //  Keep reading: a child blocked on a full terminal would never exit
        s_terminal_read (self, 20);
        if (waitpid (self->pid, &status, WNOHANG) == self->pid)
            return WIFEXITED (status)? WEXITSTATUS (status): 128 + WTERMSIG (status);
    }
    return -1;
}

//  `dsh approver` with extra args (NULL: none) on a pseudo-terminal, once
//  it waits for requests.
static terminal_t
s_approver_on_terminal_with (const char *endpoint, const char *const *extra)
{
    char *program = dsh_testkit_program (CLI);
    char *argv [16] = { program, (char *) "--broker", (char *) endpoint, (char *) "approver" };
    size_t argc = 4;
    for (size_t index = 0; extra && extra [index] && argc < 15; index++)
        argv [argc++] = (char *) extra [index];
    argv [argc] = NULL;
    terminal_t terminal = { 0 };
    terminal.pid = forkpty (&terminal.master, NULL, NULL, NULL);
    assert_true (terminal.pid >= 0);
    if (terminal.pid == 0) {
        prctl (PR_SET_PDEATHSIG, SIGKILL);
        execv (program, argv);
        _exit (127);
    }
    zstr_free (&program);
    assert_true (s_terminal_expect (&terminal, 0, "Waiting for requests", 5000) >= 0);
    return terminal;
}

static terminal_t
s_approver_on_terminal (const char *endpoint)
{
    return s_approver_on_terminal_with (endpoint, NULL);
}

static void
test_terminal_asks_y_or_n (void **state)
{
    rig_t *self = (rig_t *) *state;
    terminal_t terminal = s_approver_on_terminal (self->endpoint);

    //  Asked until the approver shows it: readable, pretty-printed, y/N
    long seen = -1;
    char *call_id = NULL;
    int64_t give_up = zclock_mono () + 10000;
    while (seen < 0 && zclock_mono () < give_up) {
        zstr_free (&call_id);
        call_id = strdup (s_write (self, "typed", "from a terminal"));
        seen = s_terminal_expect (&terminal, 0, PROMPT, 1000);
        if (seen < 0) {
            dsh_reply_t *reply = s_result (self, call_id, 5000);
            assert_string_equal (dsh_reply_text (reply), REFUSED);
            dsh_reply_destroy (&reply);
        }
    }
    assert_true (seen >= 0);
    assert_non_null (strstr (terminal.screen, "  tool       write_file"));
    assert_non_null (strstr (terminal.screen, "    {\r\n      \"path\": \"scratch/typed.txt\",\r\n"));
    assert_non_null (strstr (terminal.screen, "      \"content\": \"from a terminal\"\r\n    }"));
    assert_null (strstr (terminal.screen, "\"event\""));
    s_terminal_type (&terminal, "y\r");
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    assert_true (s_terminal_expect (&terminal, (size_t) seen, " allowed", 5000) >= 0);

    //  Enter alone is No
    zstr_free (&call_id);
    call_id = strdup (s_write (self, "typed", "again"));
    seen = s_terminal_expect (&terminal, (size_t) seen, PROMPT, 5000);
    assert_true (seen >= 0);
    s_terminal_type (&terminal, "\r");
    reply = s_result (self, call_id, 10000);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"write_file\" was rejected by the approver");
    dsh_reply_destroy (&reply);
    assert_true (s_terminal_expect (&terminal, (size_t) seen, " rejected", 5000) >= 0);
    zstr_free (&call_id);

    //  Ctrl-D ends it, and the stage knows at once
    s_terminal_type (&terminal, "\x04");
    assert_int_equal (s_terminal_wait (&terminal, 5000), 0);
    close (terminal.master);
    s_refused_at_once (self);
}

//  Nobody answers the request on the screen before the call's deadline:
//  the prompt's line is ended, and the human reads that nobody decided,
//  not that someone else did.
static void
test_terminal_says_nobody_decided_in_time (void **state)
{
    rig_t *self = (rig_t *) *state;
    terminal_t terminal = s_approver_on_terminal (self->endpoint);

    self->timeout_ms = 2500;
    long seen = -1;
    char *call_id = NULL;
    int64_t give_up = zclock_mono () + 10000;
    while (seen < 0 && zclock_mono () < give_up) {
        zstr_free (&call_id);
        call_id = strdup (s_write (self, "unanswered", "x"));
        seen = s_terminal_expect (&terminal, 0, PROMPT, 1000);
        if (seen < 0) {
            dsh_reply_t *reply = s_result (self, call_id, 5000);
            assert_string_equal (dsh_reply_text (reply), REFUSED);
            dsh_reply_destroy (&reply);
        }
    }
    assert_true (seen >= 0);
    //  The request's id, as the screen shows it ("request ID")
    const char *shown = strstr (terminal.screen, "\nrequest ");
    assert_non_null (shown);
    shown += strlen ("\nrequest ");
    char id [128];
    size_t id_size = strcspn (shown, "\r\n");
    assert_true (id_size > 0 && id_size < sizeof (id));
    memcpy (id, shown, id_size);
    id [id_size] = 0;

    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_DENIED);
    assert_string_equal (dsh_reply_text (reply),
                         "Error: tool \"write_file\" requires approval (no decision came before the call's deadline)");
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    char *closed = zsys_sprintf (PROMPT "\r\n-> %s closed: nobody decided in time\r\n", id);
    if (s_terminal_expect (&terminal, 0, closed, 5000) < 0)
        fail_msg ("the terminal does not say that nobody decided %s:\n%s", id, terminal.screen);
    zstr_free (&closed);
    assert_null (strstr (terminal.screen, "decided elsewhere"));

    s_terminal_type (&terminal, "\x04");
    assert_int_equal (s_terminal_wait (&terminal, 5000), 0);
    close (terminal.master);
}

//  ---------------------------------------------------------------------
//  Grants

//  Asks (write_file scratch/<name>.txt) until the terminal shows the
//  prompt for it after offset from; returns the offset past the prompt,
//  *call_id_p the callId of the call now held.
static long
s_terminal_ask (rig_t *self, terminal_t *terminal, size_t from, const char *name, const char *content,
                char **call_id_p)
{
    long seen = -1;
    char *call_id = NULL;
    int64_t give_up = zclock_mono () + 10000;
    while (seen < 0 && zclock_mono () < give_up) {
        zstr_free (&call_id);
        call_id = strdup (s_write (self, name, content));
        seen = s_terminal_expect (terminal, from, PROMPT, 1000);
        if (seen < 0) {
            dsh_reply_t *reply = s_result (self, call_id, 5000);
            assert_string_equal (dsh_reply_text (reply), REFUSED);
            dsh_reply_destroy (&reply);
        }
    }
    if (seen < 0)
        fail_msg ("the terminal asked for nothing within 10 s:\n%s", terminal->screen);
    *call_id_p = call_id;
    return seen;
}

//  A write_file that passes with nobody asked: the approver shows no
//  request after offset from (the call would wait for its answer).
static void
s_passes_unasked (rig_t *self, terminal_t *terminal, size_t from, const char *name, const char *content)
{
    const char *call_id = s_write (self, name, content);
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    if (dsh_reply_is_error (reply))
        fail_msg ("%s was not let through: %s", name, dsh_reply_text (reply));
    dsh_reply_destroy (&reply);
    if (terminal) {
        s_terminal_read (terminal, 100);
        assert_null (strstr (terminal->screen + from, "\nrequest "));
    }
}

//  The CLI's stdout for args, which must exit with status.
static char *
s_cli_output (rig_t *self, const char *const *args, int status)
{
    char *output = NULL;
    int got = dsh_testkit_cli (self->endpoint, args, CLI_WAIT_MS, &output);
    if (got != status)
        fail_msg ("dsh %s: exit %d, want %d: %s", args [0], got, status, output? output: "");
    return output;
}

//  t: this agent (here: calls with none) may call write_file with any
//  arguments until the grant ends; dsh grants lists it, revoke ends it.
static void
test_terminal_grant_for_the_tool (void **state)
{
    rig_t *self = (rig_t *) *state;
    terminal_t terminal = s_approver_on_terminal (self->endpoint);
    char *call_id = NULL;
    long seen = s_terminal_ask (self, &terminal, 0, "granted", "one", &call_id);
    //  Before it asks, it says what t and a would cover
    assert_non_null (strstr (terminal.screen, "  t          allow write_file for calls with no agent, any arguments, until "));
    assert_non_null (strstr (terminal.screen, " (15 min)\r\n"));
    assert_non_null (strstr (terminal.screen,
                             "  a          allow write_file for calls with no agent, these exact arguments only, until "));
    assert_non_null (strstr (terminal.screen, "either ends early if the tool's definition or the chain changes"));
    s_terminal_type (&terminal, "t\r");
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    seen = s_terminal_expect (&terminal, (size_t) seen, " allowed with grant ", 5000);
    assert_true (seen >= 0);

    //  Other arguments: through, and nobody is asked
    s_passes_unasked (self, &terminal, (size_t) seen, "other", "two");
    s_passes_unasked (self, &terminal, (size_t) seen, "third", "three");

    //  dsh grants: a table, and JSON
    char *output = s_cli_output (self, (const char *[]) { "grants", NULL }, 0);
    assert_non_null (strstr (output, "write_file"));
    assert_non_null (strstr (output, "(none)"));
    assert_non_null (strstr (output, " tool "));
    assert_non_null (strstr (output, " min)"));
    zstr_free (&output);
    output = s_cli_output (self, (const char *[]) { "grants", "--json", NULL }, 0);
    json_t *grants = json_loads (output, 0, NULL);
    assert_int_equal (json_array_size (grants), 1);
    json_t *grant = json_array_get (grants, 0);
    assert_string_equal (json_string_value (json_object_get (grant, "scope")), "tool");
    assert_string_equal (json_string_value (json_object_get (grant, "tool")), "write_file");
    assert_string_equal (json_string_value (json_object_get (grant, "agent")), "");
    json_int_t left_ms = json_integer_value (json_object_get (grant, "expiresMs")) - zclock_time ();
    assert_true (left_ms > 14 * 60000 && left_ms <= 15 * 60000);
    char *id = strdup (json_string_value (json_object_get (grant, "id")));
    json_decref (grants);
    zstr_free (&output);

    //  Revoked: ended, and the next call asks again
    output = s_cli_output (self, (const char *[]) { "grants", "revoke", id, NULL }, 0);
    char *said = zsys_sprintf ("revoked grant %s\n", id);
    assert_string_equal (output, said);
    zstr_free (&said);
    zstr_free (&output);
    output = s_cli_output (self, (const char *[]) { "grants", "revoke", id, NULL }, 1);
    zstr_free (&output);
    output = s_cli_output (self, (const char *[]) { "grants", NULL }, 0);
    assert_string_equal (output, "no grants\n");
    zstr_free (&output);
    free (id);
    call_id = strdup (s_write (self, "after", "four"));
    seen = s_terminal_expect (&terminal, (size_t) seen, PROMPT, 5000);
    assert_true (seen >= 0);
    s_terminal_type (&terminal, "n\r");
    reply = s_result (self, call_id, 10000);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"write_file\" was rejected by the approver");
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);

    s_terminal_type (&terminal, "\x04");
    assert_int_equal (s_terminal_wait (&terminal, 5000), 0);
    close (terminal.master);
}

//  a: only calls with the very same arguments pass; others still ask.
//  --grant-minutes sets how long.
static void
test_terminal_grant_for_the_arguments (void **state)
{
    rig_t *self = (rig_t *) *state;
    terminal_t terminal = s_approver_on_terminal_with (self->endpoint, (const char *[]) { "--grant-minutes", "3", NULL });
    char *call_id = NULL;
    long seen = s_terminal_ask (self, &terminal, 0, "same", "x", &call_id);
    assert_non_null (strstr (terminal.screen, " (3 min)\r\n"));
    s_terminal_type (&terminal, "a\r");
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    seen = s_terminal_expect (&terminal, (size_t) seen, " allowed with grant ", 5000);
    assert_true (seen >= 0);

    s_passes_unasked (self, &terminal, (size_t) seen, "same", "x");
    char *output = s_cli_output (self, (const char *[]) { "grants", "--json", NULL }, 0);
    json_t *grants = json_loads (output, 0, NULL);
    json_t *grant = json_array_get (grants, 0);
    assert_string_equal (json_string_value (json_object_get (grant, "scope")), "arguments");
    assert_int_equal (strlen (json_string_value (json_object_get (grant, "argumentsDigest"))), 64);
    json_int_t left_ms = json_integer_value (json_object_get (grant, "expiresMs")) - zclock_time ();
    assert_true (left_ms > 2 * 60000 && left_ms <= 3 * 60000);
    json_decref (grants);
    zstr_free (&output);

    //  Other arguments ask
    call_id = strdup (s_write (self, "same", "y"));
    seen = s_terminal_expect (&terminal, (size_t) seen, PROMPT, 5000);
    assert_true (seen >= 0);
    s_terminal_type (&terminal, "n\r");
    reply = s_result (self, call_id, 10000);
    assert_string_equal (dsh_reply_text (reply), "Error: tool \"write_file\" was rejected by the approver");
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);

    s_terminal_type (&terminal, "\x04");
    assert_int_equal (s_terminal_wait (&terminal, 5000), 0);
    close (terminal.master);
}

//  In a pipe: "allow ID args for N", then "allow ID for N". A PENDING
//  carries what a grant binds to.
static void
test_grants_from_a_pipe (void **state)
{
    rig_t *self = (rig_t *) *state;
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_approver_start (self, NULL, in [0]);
    close (in [0]);
    char *call_id = NULL;
    json_t *pending = s_ask_until_pending (self, approver, "piped", "x", &call_id);
    assert_true (json_is_true (json_object_get (pending, "grants")));
    assert_int_equal (json_integer_value (json_object_get (pending, "grantMinutes")), 15);
    assert_int_equal (strlen (json_string_value (json_object_get (pending, "argumentsDigest"))), 64);
    assert_int_equal (strlen (json_string_value (json_object_get (pending, "definitionDigest"))), 64);
    assert_int_equal (strlen (json_string_value (json_object_get (pending, "chainVersion"))), 16);
    assert_true (json_integer_value (json_object_get (pending, "closesMs"))
               > json_integer_value (json_object_get (pending, "receivedMs")));
    char *line = zsys_sprintf ("allow %s args for 2\n", json_string_value (json_object_get (pending, "id")));
    assert_int_equal (write (in [1], line, strlen (line)), (ssize_t) strlen (line));
    zstr_free (&line);
    json_decref (pending);
    dsh_reply_t *reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    line = dsh_testproc_wait_line (approver, "\"resolved\"", 5000);
    assert_non_null (line);
    assert_non_null (strstr (line, "\"grant\":\""));
    zstr_free (&line);
    s_passes_unasked (self, NULL, 0, "piped", "x");

    //  Other arguments ask; "allow ID for N" grants the tool
    call_id = strdup (s_write (self, "piped", "other"));
    line = dsh_testproc_wait_line (approver, "\"pending\"", 5000);
    assert_non_null (line);
    pending = json_loads (line, 0, NULL);
    zstr_free (&line);
    assert_string_equal (json_string_value (json_object_get (pending, "callId")), call_id);
    line = zsys_sprintf ("allow %s for 1\n", json_string_value (json_object_get (pending, "id")));
    assert_int_equal (write (in [1], line, strlen (line)), (ssize_t) strlen (line));
    zstr_free (&line);
    json_decref (pending);
    reply = s_result (self, call_id, 10000);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    zstr_free (&call_id);
    s_passes_unasked (self, NULL, 0, "anything", "else");
    char *output = s_cli_output (self, (const char *[]) { "grants", "--json", NULL }, 0);
    json_t *grants = json_loads (output, 0, NULL);
    assert_int_equal (json_array_size (grants), 2);
    json_decref (grants);
    zstr_free (&output);

    close (in [1]);
    assert_int_equal (dsh_testproc_wait (approver, 5000), 0);
    dsh_testproc_destroy (&approver);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_approver_that_exits, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_ask_ends_before_the_deadline, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_approver_killed_with_a_request_open, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_approver_killed_after_answering, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_large_request_reaches_the_approver, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_y_answers_the_latest_still_open, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_terminal_asks_y_or_n, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_terminal_says_nobody_decided_in_time, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_terminal_grant_for_the_tool, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_terminal_grant_for_the_arguments, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_grants_from_a_pipe, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
