/*  =========================================================================
    dsh_hooks - Claude Code compatible command hooks as a chain stage

    A call whose tool some PreToolUse hooks match is deferred while they
    run; one that PostToolUse hooks match is watched, and its result held
    while they run. A run is the set of hook processes for one call and
    one event. Each process has three descriptors on the stage's loop
    (stdin to write, stdout and stderr to read) and is reaped by a tick
    timer that also enforces the timeouts; the run ends when every process
    has exited and closed its output, or at the first timeout.

    A run starts when it fits under max_processes (counting the killed
    processes not yet reaped); else it waits in its caller's lane, and
    self->turns serves the lanes round robin, one run a turn, as each run
    that ends makes room. A waiting run holds its event JSON and no
    descriptor; the tick answers the ones past their call's deadline.

    Loop handlers get the stage's state, never a process: a handler may
    still be called once for a descriptor another handler has just closed
    in the same loop pass, so each looks its process up by descriptor and
    ignores what it cannot find.
    =========================================================================
*/

#include "dsh_hooks.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_settings.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

//  How often the tick timer reaps exited hooks and checks deadlines.
#define TICK_MS 10

//  The longest hook timeout a section may set (one hour).
#define TIMEOUT_MAX_MS 3600000

typedef struct {
    dsh_hooks_event_t event;
    char *matcher;
    bool every_tool;
    bool has_regex;
    regex_t regex;
    char *command;
    int timeout_ms;
} s_hook_t;

//  One hook process.
typedef struct {
    s_hook_t *hook;
    pid_t pid;                  //  0 before the start
    bool exited;
    int exit_code;              //  once exited: the code, or 128 + signal
    int input_fd;               //  -1 once closed
    int output_fd;
    int errors_fd;
    size_t input_sent;
    char *output;
    size_t output_size;
    char *errors;
    size_t errors_size;
    int64_t deadline;
} s_proc_t;

typedef struct _s_lane_t s_lane_t;

//  The hooks of one event for one call: queued (lane set), then running
//  (handle set), then finished.
typedef struct {
    dsh_stage_t *stage;
    dsh_call_t *call;
    dsh_hooks_event_t event;
    char *tool_name;
    char *input;                //  the event JSON every process reads
    size_t input_size;
    s_proc_t *procs;
    size_t count;
    char *failure;              //  set: the run fails closed with this
    bool cancelled;             //  answered without the stage: finish quietly
    void *handle;               //  in self->runs while running
    s_lane_t *lane;             //  while queued: its caller's lane
    void *queue_handle;         //  while queued: in lane->runs
} s_run_t;

//  The runs one caller has waiting, oldest first. A lane with runs is in
//  self->turns; the front lane is served next, one run per turn.
struct _s_lane_t {
    char *caller;               //  the key in self->lanes
    zlistx_t *runs;             //  s_run_t, not owned
    void *turn_handle;          //  in self->turns
};

typedef struct {
    char *name;
    char *cwd;
    zlistx_t *hooks;            //  s_hook_t, in config order
    zlistx_t *runs;             //  s_run_t running
    zlistx_t *orphans;          //  killed processes not yet reaped (pid as pointer)
    zloop_t *loop;
    int tick_id;                //  -1 while not ticking
    //  The cap and its wait queue
    int max_processes;          //  hook processes at once: running runs' and orphans
    int queue_calls;            //  runs waiting, at most
    int queue_calls_per_caller;
    int queue_bytes;            //  event JSON waiting, at most
    size_t running;             //  processes of the runs in self->runs
    size_t queued;              //  runs waiting
    size_t queued_bytes;        //  their event JSON
    zhashx_t *lanes;            //  caller -> s_lane_t, while it has runs waiting
    zlistx_t *turns;            //  s_lane_t, the one to serve next first
    bool refuse_typed;          //  typed_input = refuse: arguments must be plain JSON
    size_t refused;             //  calls refused OVERLOADED since the queue was last empty
} self_t;

//  ---------------------------------------------------------------------
//  Pure decision functions

const char *
dsh_hooks_event_name (dsh_hooks_event_t event)
{
    return event == DSH_HOOKS_PRE_TOOL_USE? "PreToolUse": "PostToolUse";
}

int
dsh_hooks_event_parse (const char *name, dsh_hooks_event_t *event_p)
{
    if (name && streq (name, "PreToolUse"))
        *event_p = DSH_HOOKS_PRE_TOOL_USE;
    else
    if (name && streq (name, "PostToolUse"))
        *event_p = DSH_HOOKS_POST_TOOL_USE;
    else
        return -1;
    return 0;
}

static bool
s_matches_every_tool (const char *matcher)
{
    return !matcher || !*matcher || streq (matcher, "*");
}

//  Claude Code matches the whole name: "Edit|Write" must not match
//  "NotEdit", so the pattern is anchored as a group.
static int
s_regex_compile (regex_t *regex, const char *matcher)
{
    char *anchored = zsys_sprintf ("^(%s)$", matcher);
    if (!anchored)
        return -1;
    int rc = regcomp (regex, anchored, REG_EXTENDED | REG_NOSUB);
    zstr_free (&anchored);
    return rc == 0? 0: -1;
}

bool
dsh_hooks_matcher_valid (const char *matcher)
{
    if (s_matches_every_tool (matcher))
        return true;
    regex_t regex;
    if (s_regex_compile (&regex, matcher) != 0)
        return false;
    regfree (&regex);
    return true;
}

bool
dsh_hooks_match (const char *matcher, const char *tool_name)
{
    if (s_matches_every_tool (matcher))
        return true;
    if (!tool_name)
        return false;
    if (streq (matcher, tool_name))
        return true;
    regex_t regex;
    if (s_regex_compile (&regex, matcher) != 0)
        return false;
    bool matched = regexec (&regex, tool_name, 0, NULL, 0) == 0;
    regfree (&regex);
    return matched;
}

//  A JSON string for text; jansson refuses one that is not UTF-8, and an
//  event must still carry the field.
static json_t *
s_json_string (const char *text)
{
    json_t *string = json_string (text? text: "");
    return string? string: json_string ("");
}

json_t *
dsh_hooks_event_json (dsh_hooks_event_t event, const char *session_id, const char *cwd,
                      const char *tool_name, json_t *tool_input, json_t *tool_response)
{
    json_t *json = json_object ();
    json_object_set_new (json, "hook_event_name", json_string (dsh_hooks_event_name (event)));
    json_object_set_new (json, "session_id", s_json_string (session_id));
    json_object_set_new (json, "cwd", s_json_string (cwd));
    json_object_set_new (json, "tool_name", s_json_string (tool_name));
    json_object_set_new (json, "tool_input", tool_input? json_incref (tool_input): json_object ());
    if (event == DSH_HOOKS_POST_TOOL_USE)
        json_object_set_new (json, "tool_response", tool_response? json_incref (tool_response): json_null ());
    return json;
}

dsh_hooks_decision_t *
dsh_hooks_decision_new (void)
{
    dsh_hooks_decision_t *self = (dsh_hooks_decision_t *) zmalloc (sizeof (dsh_hooks_decision_t));
    return self;
}

void
dsh_hooks_decision_destroy (dsh_hooks_decision_t **self_p)
{
    assert (self_p);
    dsh_hooks_decision_t *self = *self_p;
    if (self) {
        zstr_free (&self->reason);
        json_decref (self->updated_input);
        zstr_free (&self->additional_context);
        zstr_free (&self->problem);
        free (self);
        *self_p = NULL;
    }
}

//  A copy of size bytes of text without surrounding white space, made
//  valid UTF-8 (a byte above 0x7f becomes '?' if it is not), or NULL if
//  nothing is left. Stops at a NUL byte.
static char *
s_trimmed (const char *text, size_t size)
{
    if (!text)
        return NULL;
    size = strnlen (text, size);
    while (size > 0 && isspace ((unsigned char) *text)) {
        text++;
        size--;
    }
    while (size > 0 && isspace ((unsigned char) text [size - 1]))
        size--;
    if (size == 0)
        return NULL;
    char *copy = strndup (text, size);
    json_t *check = copy? json_stringn (copy, size): NULL;
    if (copy && !check)
        for (char *c = copy; *c; c++)
            if ((unsigned char) *c > 0x7f)
                *c = '?';
    json_decref (check);
    return copy;
}

//  The field from hookSpecificOutput, else from the top level (some hooks
//  put the fields there).
static json_t *
s_field (json_t *specific, json_t *root, const char *key)
{
    json_t *value = specific? json_object_get (specific, key): NULL;
    return value? value: json_object_get (root, key);
}

static char *
s_string_field (json_t *specific, json_t *root, const char *key)
{
    const char *value = json_string_value (s_field (specific, root, key));
    return value? strdup (value): NULL;
}

static void
s_parse_json (dsh_hooks_decision_t *self, dsh_hooks_event_t event, json_t *root)
{
    json_t *specific = json_object_get (root, "hookSpecificOutput");
    if (!json_is_object (specific))
        specific = NULL;
    if (event == DSH_HOOKS_PRE_TOOL_USE) {
        json_t *decision = s_field (specific, root, "permissionDecision");
        const char *value = json_string_value (decision);
        if (value && streq (value, "allow"))
            self->verdict = DSH_HOOKS_ALLOW;
        else
        if (value && streq (value, "ask"))
            self->verdict = DSH_HOOKS_ASK;
        else
        if (value && streq (value, "deny"))
            self->verdict = DSH_HOOKS_DENY;
        else
        if (decision)
            self->problem = zsys_sprintf ("answered an unknown permissionDecision (%s)",
                                          value? value: "not a string");
        if (self->verdict != DSH_HOOKS_NO_DECISION)
            self->reason = s_string_field (specific, root, "permissionDecisionReason");
        json_t *updated = s_field (specific, root, "updatedInput");
        if (json_is_object (updated))
            self->updated_input = json_deep_copy (updated);
    }
    //  The legacy form, before hookSpecificOutput existed.
    const char *legacy = json_string_value (json_object_get (root, "decision"));
    if (self->verdict == DSH_HOOKS_NO_DECISION && legacy) {
        if (streq (legacy, "block"))
            self->verdict = DSH_HOOKS_DENY;
        else
        if (streq (legacy, "approve") && event == DSH_HOOKS_PRE_TOOL_USE)
            self->verdict = DSH_HOOKS_ALLOW;
        if (self->verdict != DSH_HOOKS_NO_DECISION)
            self->reason = s_string_field (NULL, root, "reason");
    }
    self->additional_context = s_string_field (specific, root, "additionalContext");
}

dsh_hooks_decision_t *
dsh_hooks_decision_parse (dsh_hooks_event_t event, int exit_code,
                          const char *output, size_t output_size,
                          const char *errors, size_t errors_size)
{
    dsh_hooks_decision_t *self = dsh_hooks_decision_new ();
    if (exit_code == 2) {
        self->verdict = DSH_HOOKS_DENY;
        self->reason = s_trimmed (errors, errors_size);
        if (!self->reason)
            self->reason = strdup ("the hook exited with code 2");
        return self;
    }
    if (exit_code != 0) {
        char *message = s_trimmed (errors, errors_size);
        self->problem = zsys_sprintf ("exited with code %d%s%s", exit_code,
                                      message? ": ": "", message? message: "");
        zstr_free (&message);
        return self;
    }
    char *text = s_trimmed (output, output_size);
    if (!text)
        return self;
    json_error_t json_error;
    json_t *root = json_loads (text, 0, &json_error);
    if (json_is_object (root))
        s_parse_json (self, event, root);
    else
        self->problem = zsys_sprintf ("wrote something other than a JSON object on stdout (%s)",
                                      root? "not an object": json_error.text);
    json_decref (root);
    zstr_free (&text);
    return self;
}

//  Appends text to *joined, with separator between parts.
static void
s_join (char **joined, const char *separator, const char *text)
{
    char *longer = *joined? zsys_sprintf ("%s%s%s", *joined, separator, text): strdup (text);
    if (longer) {
        free (*joined);
        *joined = longer;
    }
}

dsh_hooks_decision_t *
dsh_hooks_decision_merge (dsh_hooks_decision_t **decisions, size_t count)
{
    dsh_hooks_decision_t *merged = dsh_hooks_decision_new ();
    for (size_t index = 0; index < count; index++)
        if (decisions [index] && decisions [index]->verdict > merged->verdict)
            merged->verdict = decisions [index]->verdict;
    json_t *updated_input = NULL;
    for (size_t index = 0; index < count; index++) {
        dsh_hooks_decision_t *decision = decisions [index];
        if (!decision)
            continue;
        if (decision->verdict == merged->verdict && decision->reason)
            s_join (&merged->reason, "; ", decision->reason);
        if (decision->verdict <= DSH_HOOKS_ALLOW && decision->updated_input)
            updated_input = decision->updated_input;
        if (decision->additional_context)
            s_join (&merged->additional_context, "\n", decision->additional_context);
    }
    if (merged->verdict <= DSH_HOOKS_ALLOW && updated_input)
        merged->updated_input = json_deep_copy (updated_input);
    return merged;
}

//  ---------------------------------------------------------------------
//  Hook processes

//  Moves fd above stdin, stdout and stderr, so that the child's dup2s onto
//  0, 1 and 2 cannot overwrite one another.
static int
s_above_stdio (int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl (fd, F_DUPFD_CLOEXEC, 3);
    close (fd);
    return moved;
}

static void
s_close (int *fd_p)
{
    if (*fd_p >= 0) {
        close (*fd_p);
        *fd_p = -1;
    }
}

static int
s_poll_fd (self_t *self, int fd, short events, zloop_fn *handler)
{
    zmq_pollitem_t item = { NULL, fd, events, 0 };
    if (zloop_poller (self->loop, &item, handler, self) != 0)
        return -1;
    //  A closed pipe end shows as an error: the handler reads it as EOF.
    zloop_poller_set_tolerant (self->loop, &item);
    return 0;
}

static void
s_unpoll_close (self_t *self, int *fd_p)
{
    if (*fd_p >= 0 && self->loop) {
        zmq_pollitem_t item = { NULL, *fd_p, 0, 0 };
        zloop_poller_end (self->loop, &item);
    }
    s_close (fd_p);
}

//  Starts one hook process with its three descriptors non-blocking.
//  Returns 0, or -1 with a reason.
static int
s_proc_start (s_proc_t *proc, char *error, size_t error_size)
{
    int input [2] = { -1, -1 }, output [2] = { -1, -1 }, errors [2] = { -1, -1 };
    //  stdin is a socket, not a pipe: sending with MSG_NOSIGNAL to a hook
    //  that exits without reading gives EPIPE instead of killing us.
    if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, input) != 0
    ||  pipe2 (output, O_CLOEXEC) != 0
    ||  pipe2 (errors, O_CLOEXEC) != 0) {
        snprintf (error, error_size, "cannot create pipes: %s", strerror (errno));
        goto failed;
    }
    for (int index = 0; index < 2; index++) {
        input [index] = s_above_stdio (input [index]);
        output [index] = s_above_stdio (output [index]);
        errors [index] = s_above_stdio (errors [index]);
    }
    if (input [0] < 0 || input [1] < 0 || output [0] < 0 || output [1] < 0
    ||  errors [0] < 0 || errors [1] < 0) {
        snprintf (error, error_size, "cannot create pipes: %s", strerror (errno));
        goto failed;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init (&actions);
    posix_spawn_file_actions_adddup2 (&actions, input [1], STDIN_FILENO);
    posix_spawn_file_actions_adddup2 (&actions, output [1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2 (&actions, errors [1], STDERR_FILENO);
    posix_spawnattr_t attributes;
    posix_spawnattr_init (&attributes);
    //  Its own process group, so a timeout kills what it started too; and
    //  the signals a broker may block or ignore back to their defaults.
    posix_spawnattr_setflags (&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK
                                         | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup (&attributes, 0);
    sigset_t signals;
    sigemptyset (&signals);
    posix_spawnattr_setsigmask (&attributes, &signals);
    int defaults [] = { SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGALRM, SIGUSR1, SIGUSR2 };
    for (size_t index = 0; index < sizeof defaults / sizeof defaults [0]; index++)
        sigaddset (&signals, defaults [index]);
    posix_spawnattr_setsigdefault (&attributes, &signals);
    char *argv [] = { "sh", "-c", proc->hook->command, NULL };
    int rc = posix_spawn (&proc->pid, "/bin/sh", &actions, &attributes, argv, environ);
    posix_spawn_file_actions_destroy (&actions);
    posix_spawnattr_destroy (&attributes);
    s_close (&input [1]);
    s_close (&output [1]);
    s_close (&errors [1]);
    if (rc != 0) {
        proc->pid = 0;
        snprintf (error, error_size, "cannot start /bin/sh: %s", strerror (rc));
        goto failed;
    }
    proc->input_fd = input [0];
    proc->output_fd = output [0];
    proc->errors_fd = errors [0];
    fcntl (proc->input_fd, F_SETFL, O_NONBLOCK);
    fcntl (proc->output_fd, F_SETFL, O_NONBLOCK);
    fcntl (proc->errors_fd, F_SETFL, O_NONBLOCK);
    proc->deadline = zclock_mono () + proc->hook->timeout_ms;
    return 0;

failed:
    for (int index = 0; index < 2; index++) {
        s_close (&input [index]);
        s_close (&output [index]);
        s_close (&errors [index]);
    }
    return -1;
}

//  Reaps the process if it has exited. Returns -1 if its status is lost
//  (someone else reaped it).
static int
s_proc_reap (s_proc_t *proc)
{
    if (proc->exited || proc->pid <= 0)
        return 0;
    int status = 0;
    pid_t pid = waitpid (proc->pid, &status, WNOHANG);
    if (pid == 0)
        return 0;
    proc->exited = true;
    if (pid < 0)
        return -1;
    proc->exit_code = WIFEXITED (status)? WEXITSTATUS (status)
                    : WIFSIGNALED (status)? 128 + WTERMSIG (status)
                    : 1;
    return 0;
}

static bool
s_proc_done (s_proc_t *proc)
{
    return proc->exited && proc->output_fd < 0 && proc->errors_fd < 0;
}

//  Stops watching the process; one still running is killed with its
//  group and left to the tick to reap.
static void
s_proc_stop (self_t *self, s_proc_t *proc)
{
    s_unpoll_close (self, &proc->input_fd);
    s_unpoll_close (self, &proc->output_fd);
    s_unpoll_close (self, &proc->errors_fd);
    if (proc->pid > 0 && !proc->exited) {
        kill (-proc->pid, SIGKILL);
        zlistx_add_end (self->orphans, (void *) (intptr_t) proc->pid);
        proc->exited = true;
    }
}

//  Sends what the socket takes of the event; closes stdin when all is
//  sent or the hook stopped reading.
static void
s_proc_write (self_t *self, s_run_t *run, s_proc_t *proc)
{
    while (proc->input_fd >= 0 && proc->input_sent < run->input_size) {
        ssize_t sent = send (proc->input_fd, run->input + proc->input_sent,
                             run->input_size - proc->input_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (sent < 0)
            break;
        proc->input_sent += (size_t) sent;
    }
    s_unpoll_close (self, &proc->input_fd);
}

//  Reads what is there into *buffer (up to the cap; the rest is read and
//  dropped, so the hook never blocks on a full pipe); closes on EOF.
static void
s_proc_read (self_t *self, int *fd_p, char **buffer, size_t *size_p)
{
    char chunk [65536];
    ssize_t got = read (*fd_p, chunk, sizeof chunk);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (got <= 0) {
        s_unpoll_close (self, fd_p);
        return;
    }
    size_t kept = *size_p + (size_t) got > DSH_HOOKS_OUTPUT_MAX
                ? DSH_HOOKS_OUTPUT_MAX - *size_p: (size_t) got;
    if (kept == 0)
        return;
    char *grown = (char *) realloc (*buffer, *size_p + kept + 1);
    if (!grown)
        return;
    memcpy (grown + *size_p, chunk, kept);
    *size_p += kept;
    grown [*size_p] = '\0';
    *buffer = grown;
}

//  ---------------------------------------------------------------------
//  Runs

//  A destructor for JSON kept as call data.
static void
s_json_release (void *json)
{
    json_decref ((json_t *) json);
}

static void
s_run_destroy (s_run_t **run_p)
{
    s_run_t *run = *run_p;
    if (run) {
        for (size_t index = 0; index < run->count; index++) {
            free (run->procs [index].output);
            free (run->procs [index].errors);
        }
        free (run->procs);
        zstr_free (&run->tool_name);
        zstr_free (&run->input);
        zstr_free (&run->failure);
        free (run);
        *run_p = NULL;
    }
}

static void
s_run_fail (s_run_t *run, char *failure)
{
    if (run->failure)
        zstr_free (&failure);
    else
        run->failure = failure;
}

//  True once the run can end: every process done, or a failure.
static bool
s_run_complete (s_run_t *run)
{
    if (run->failure)
        return true;
    for (size_t index = 0; index < run->count; index++)
        if (!s_proc_done (&run->procs [index]))
            return false;
    return true;
}

//  Replaces a held result with what a PostToolUse hook makes of a blocked
//  or failed call (the stage sets its callId).
static void
s_set_error_result (dsh_call_t *call, const char *code, const char *text)
{
    zframe_t *result = dsh_proto_error_result (NULL, code, text);
    dsh_stage_call_set_result (call, &result);
}

//  Finishes the run's call with an error: the answer of a deferred call,
//  or the result of one whose result is held. text has no "Error: ".
static void
s_run_answer_error (s_run_t *run, const char *code, const char *text)
{
    if (run->event == DSH_HOOKS_PRE_TOOL_USE) {
        dsh_stage_call_answer_error (run->call, code, "%s", text);
        dsh_stage_resume (run->stage, run->call, DSH_STAGE_ANSWER);
    }
    else {
        char *result_text = zsys_sprintf ("Error: %s", text);
        s_set_error_result (run->call, code, result_text);
        zstr_free (&result_text);
        dsh_stage_resume_result (run->stage, run->call);
    }
}

//  True if value packs to the bytes of packed.
static bool
s_packs_as (const msgpack_object *value, const msgpack_sbuffer *packed)
{
    if (!value)
        return false;
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init (&buffer);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buffer, msgpack_sbuffer_write);
    bool same = msgpack_pack_object (&pk, *value) == 0 && buffer.size == packed->size
             && memcmp (buffer.data, packed->data, buffer.size) == 0;
    msgpack_sbuffer_destroy (&buffer);
    return same;
}

//  Makes updated (a hook's updatedInput, in the hooks' view: typed forms
//  stand for the values they name) the call's arguments. An updatedInput
//  with typed values is used only if it is the arguments as they were
//  (PROTOCOL.md, the hooks stage: a rewrite to values plain JSON cannot
//  hold fails the call), though the stage SDK could pass them on now that
//  it takes arguments as msgpack. Returns 0, or -1 with a reason.
static int
s_rewrite_arguments (s_run_t *run, json_t *updated, char *error, size_t error_size)
{
    msgpack_sbuffer buffer;
    msgpack_sbuffer_init (&buffer);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buffer, msgpack_sbuffer_write);
    dsh_doc_t *doc = NULL;
    int rc = dsh_json_view_to_msgpack (&pk, updated, error, error_size);
    if (rc == 0 && !(doc = dsh_doc_new (buffer.data, buffer.size, error, error_size)))
        rc = -1;
    if (rc == 0 && !s_packs_as (dsh_call_arguments (run->call), &buffer)) {
        const msgpack_object *arguments = dsh_doc_root (doc);
        json_t *plain = dsh_json_is_plain (arguments)? dsh_json_from_msgpack (arguments): NULL;
        if (plain) {
            //  PostToolUse hooks are shown the arguments that ran
            if (dsh_stage_call_data (run->call))
                dsh_stage_call_set_data (run->call, json_incref (plain), s_json_release);
            json_decref (plain);
            dsh_stage_call_set_arguments (run->call, buffer.data, buffer.size);
        }
        else {
            snprintf (error, error_size, "it changes the arguments to values plain JSON cannot hold "
                      "(typed forms), which a stage cannot pass on");
            rc = -1;
        }
    }
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&buffer);
    return rc;
}

static void
s_finish_pre (s_run_t *run, dsh_hooks_decision_t *decision)
{
    const char *reason = decision->reason? decision->reason: "no reason given";
    if (decision->verdict == DSH_HOOKS_DENY || decision->verdict == DSH_HOOKS_ASK) {
        dsh_stage_call_answer_error (run->call, DSH_E_DENIED,
            "tool \"%s\" was blocked by a PreToolUse hook: %s%s", run->tool_name, reason,
            decision->verdict == DSH_HOOKS_ASK
            ? " (the hook asked for confirmation, which needs an approver: use the permission stage)"
            : "");
        dsh_stage_resume (run->stage, run->call, DSH_STAGE_ANSWER);
        return;
    }
    char error [256] = "";
    if (decision->updated_input && s_rewrite_arguments (run, decision->updated_input, error, sizeof error) != 0) {
        zsys_warning ("%s: PreToolUse updatedInput for \"%s\" refused: %s", dsh_stage_name (run->stage),
                      run->tool_name, error);
        dsh_stage_call_answer_error (run->call, DSH_E_MIDDLEWARE_FAILED,
            "tool \"%s\": a PreToolUse hook's updatedInput cannot be used: %s", run->tool_name, error);
        dsh_stage_resume (run->stage, run->call, DSH_STAGE_ANSWER);
        return;
    }
    if (decision->additional_context) {
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        dsh_pack_cstr (&packer.pk, decision->additional_context);
        dsh_stage_call_set_meta (run->call, "additionalContext", packer.sbuf.data, packer.sbuf.size);
        dsh_packer_release (&packer);
    }
    dsh_stage_resume (run->stage, run->call, DSH_STAGE_PASS);
}

static void
s_finish_post (s_run_t *run, dsh_hooks_decision_t *decision)
{
    if (decision->verdict == DSH_HOOKS_DENY) {
        char *text = zsys_sprintf ("Error: tool \"%s\" result was blocked by a PostToolUse hook: %s",
                                   run->tool_name, decision->reason? decision->reason: "no reason given");
        s_set_error_result (run->call, DSH_E_DENIED, text);
        zstr_free (&text);
    }
    else
    if (decision->additional_context)
        dsh_stage_call_add_result_text (run->call, decision->additional_context);
    dsh_stage_resume_result (run->stage, run->call);
}

//  Ends the run, running or not: stops its processes, merges their
//  answers, finishes the call, and frees the run.
static void
s_run_finish (self_t *self, s_run_t *run)
{
    if (run->handle) {
        zlistx_delete (self->runs, run->handle);
        run->handle = NULL;
        self->running -= run->count;
    }
    for (size_t index = 0; index < run->count; index++)
        s_proc_stop (self, &run->procs [index]);
    if (run->failure) {
        if (!run->cancelled)
            zsys_warning ("%s: %s", self->name, run->failure);
        s_run_answer_error (run, DSH_E_MIDDLEWARE_FAILED, run->failure);
        s_run_destroy (&run);
        return;
    }
    dsh_hooks_decision_t **decisions = (dsh_hooks_decision_t **) zmalloc (run->count * sizeof (dsh_hooks_decision_t *));
    for (size_t index = 0; index < run->count; index++) {
        s_proc_t *proc = &run->procs [index];
        decisions [index] = dsh_hooks_decision_parse (run->event, proc->exit_code,
                                                      proc->output, proc->output_size,
                                                      proc->errors, proc->errors_size);
        if (decisions [index]->problem)
            zsys_warning ("%s: %s hook \"%s\" %s (ignored)", self->name,
                          dsh_hooks_event_name (run->event), proc->hook->command,
                          decisions [index]->problem);
    }
    dsh_hooks_decision_t *merged = dsh_hooks_decision_merge (decisions, run->count);
    for (size_t index = 0; index < run->count; index++)
        dsh_hooks_decision_destroy (&decisions [index]);
    free (decisions);
    if (run->event == DSH_HOOKS_PRE_TOOL_USE)
        s_finish_pre (run, merged);
    else
        s_finish_post (run, merged);
    dsh_hooks_decision_destroy (&merged);
    s_run_destroy (&run);
}

//  ---------------------------------------------------------------------
//  The cap and its wait queue

//  True if a run of count processes may start now: within the cap, or
//  alone (a run of more hooks than the cap still runs, by itself).
static bool
s_room (self_t *self, size_t count)
{
    size_t busy = self->running + zlistx_size (self->orphans);
    return busy == 0 || busy + count <= (size_t) self->max_processes;
}

static void
s_lane_destroy (void **item_p)
{
    s_lane_t *lane = (s_lane_t *) *item_p;
    if (lane) {
        zlistx_destroy (&lane->runs);
        zstr_free (&lane->caller);
        free (lane);
        *item_p = NULL;
    }
}

//  Who the call's hooks wait for a turn as: its agent, or "" for calls
//  without one.
static const char *
s_caller (s_run_t *run)
{
    const char *agent = dsh_call_agent (run->call);
    return agent? agent: "";
}

//  Queues the run at the end of its caller's lane. Returns 0, or -1 with
//  the bound it would pass.
static int
s_enqueue (self_t *self, s_run_t *run, char *error, size_t error_size)
{
    const char *caller = s_caller (run);
    s_lane_t *lane = (s_lane_t *) zhashx_lookup (self->lanes, caller);
    char bound [160] = "";
    if (self->queued >= (size_t) self->queue_calls)
        snprintf (bound, sizeof bound, "%zu calls wait: queue_calls %d", self->queued, self->queue_calls);
    else
    if (lane && zlistx_size (lane->runs) >= (size_t) self->queue_calls_per_caller)
        snprintf (bound, sizeof bound, "%zu calls of caller \"%.40s\" wait: queue_calls_per_caller %d",
                  zlistx_size (lane->runs), caller, self->queue_calls_per_caller);
    else
    if (self->queued_bytes + run->input_size > (size_t) self->queue_bytes)
        snprintf (bound, sizeof bound, "%zu bytes of events wait, and this one has %zu: queue_bytes %d",
                  self->queued_bytes, run->input_size, self->queue_bytes);
    if (*bound) {
        snprintf (error, error_size, "hooks stage \"%s\" is overloaded: its hook processes are all busy "
                  "(max_processes %d) and its queue is full (%s)", self->name, self->max_processes, bound);
        return -1;
    }
    if (!lane) {
        lane = (s_lane_t *) zmalloc (sizeof (s_lane_t));
        lane->caller = strdup (caller);
        lane->runs = zlistx_new ();
        zhashx_insert (self->lanes, caller, lane);
        lane->turn_handle = zlistx_add_end (self->turns, lane);
    }
    run->lane = lane;
    run->queue_handle = zlistx_add_end (lane->runs, run);
    self->queued++;
    self->queued_bytes += run->input_size;
    return 0;
}

//  Takes the run out of its lane. Served: the lane had its turn and goes
//  to the back; else (cancelled, expired) it keeps its place. An empty
//  lane is dropped.
static void
s_dequeue (self_t *self, s_run_t *run, bool served)
{
    s_lane_t *lane = run->lane;
    zlistx_delete (lane->runs, run->queue_handle);
    run->lane = NULL;
    run->queue_handle = NULL;
    self->queued--;
    self->queued_bytes -= run->input_size;
    if (zlistx_size (lane->runs) == 0) {
        zlistx_delete (self->turns, lane->turn_handle);
        zhashx_delete (self->lanes, lane->caller);
    }
    else
    if (served)
        zlistx_move_end (self->turns, lane->turn_handle);
}

//  Answers the queued runs whose calls passed their deadline.
static void
s_expire_queued (self_t *self, int64_t now)
{
    zlistx_t *expired = zlistx_new ();
    for (s_lane_t *lane = (s_lane_t *) zlistx_first (self->turns); lane;
         lane = (s_lane_t *) zlistx_next (self->turns))
        for (s_run_t *run = (s_run_t *) zlistx_first (lane->runs); run;
             run = (s_run_t *) zlistx_next (lane->runs)) {
            int64_t deadline = dsh_stage_call_deadline (run->call);
            if (deadline > 0 && now >= deadline)
                zlistx_add_end (expired, run);
        }
    for (s_run_t *run = (s_run_t *) zlistx_first (expired); run;
         run = (s_run_t *) zlistx_next (expired)) {
        s_dequeue (self, run, false);
        char *text = zsys_sprintf ("tool \"%s\" passed the call's deadline waiting for a hook process "
                                   "(max_processes %d)", run->tool_name, self->max_processes);
        s_run_answer_error (run, DSH_E_TIMEOUT, text? text: "the call's deadline passed");
        zstr_free (&text);
        s_run_destroy (&run);
    }
    zlistx_destroy (&expired);
}

static int s_run_spawn (self_t *self, s_run_t *run, char *error, size_t error_size);

//  Starts queued runs, one per caller in turn, while there is room.
static void
s_dispatch (self_t *self)
{
    while (self->queued > 0) {
        s_lane_t *lane = (s_lane_t *) zlistx_first (self->turns);
        s_run_t *run = (s_run_t *) zlistx_first (lane->runs);
        if (!s_room (self, run->count))
            break;
        s_dequeue (self, run, true);
        char error [512];
        if (s_run_spawn (self, run, error, sizeof error) != 0) {
            s_run_fail (run, strdup (error));
            s_run_finish (self, run);
        }
    }
}

//  ---------------------------------------------------------------------
//  The loop's handlers

//  Finds the run and process that own fd.
static s_run_t *
s_find_fd (self_t *self, int fd, s_proc_t **proc_p)
{
    for (s_run_t *run = (s_run_t *) zlistx_first (self->runs); run;
         run = (s_run_t *) zlistx_next (self->runs))
        for (size_t index = 0; index < run->count; index++) {
            s_proc_t *proc = &run->procs [index];
            if (proc->input_fd == fd || proc->output_fd == fd || proc->errors_fd == fd) {
                *proc_p = proc;
                return run;
            }
        }
    return NULL;
}

static int
s_on_fd (zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    s_proc_t *proc = NULL;
    s_run_t *run = s_find_fd (self, item->fd, &proc);
    if (!run)
        return 0;
    if (item->fd == proc->input_fd)
        s_proc_write (self, run, proc);
    else
    if (item->fd == proc->output_fd)
        s_proc_read (self, &proc->output_fd, &proc->output, &proc->output_size);
    else
        s_proc_read (self, &proc->errors_fd, &proc->errors, &proc->errors_size);
    if (proc->output_fd < 0 && proc->errors_fd < 0 && s_proc_reap (proc) != 0)
        s_run_fail (run, zsys_sprintf ("cannot read the exit status of hook \"%s\"",
                                       proc->hook->command));
    if (s_run_complete (run)) {
        s_run_finish (self, run);
        s_dispatch (self);
    }
    return 0;
}

//  Reaps, enforces deadlines, ends the runs that are complete, and starts
//  waiting ones in the room that made.
static int
s_on_tick (zloop_t *loop, int timer_id, void *arg)
{
    (void) timer_id;
    self_t *self = (self_t *) arg;
    int64_t now = zclock_mono ();
    zlistx_t *complete = zlistx_new ();
    for (s_run_t *run = (s_run_t *) zlistx_first (self->runs); run;
         run = (s_run_t *) zlistx_next (self->runs)) {
        for (size_t index = 0; index < run->count; index++) {
            s_proc_t *proc = &run->procs [index];
            if (s_proc_reap (proc) != 0)
                s_run_fail (run, zsys_sprintf ("cannot read the exit status of hook \"%s\"",
                                               proc->hook->command));
            if (!s_proc_done (proc) && now >= proc->deadline)
                s_run_fail (run, zsys_sprintf ("hook \"%s\" timed out after %d ms",
                                               proc->hook->command, proc->hook->timeout_ms));
        }
        if (s_run_complete (run))
            zlistx_add_end (complete, run);
    }
    for (s_run_t *run = (s_run_t *) zlistx_first (complete); run;
         run = (s_run_t *) zlistx_next (complete))
        s_run_finish (self, run);
    zlistx_destroy (&complete);
    s_expire_queued (self, now);

    zlistx_t *unreaped = zlistx_new ();
    for (void *pid = zlistx_first (self->orphans); pid; pid = zlistx_next (self->orphans))
        if (waitpid ((pid_t) (intptr_t) pid, NULL, WNOHANG) == 0)
            zlistx_add_end (unreaped, pid);
    zlistx_destroy (&self->orphans);
    self->orphans = unreaped;
    s_dispatch (self);
    if (self->refused && self->queued == 0) {
        if (self->refused > 1)
            zsys_warning ("%s: %zu calls were refused OVERLOADED in all", self->name, self->refused);
        self->refused = 0;
    }

    if (zlistx_size (self->runs) == 0 && zlistx_size (self->orphans) == 0 && self->queued == 0) {
        zloop_timer_end (loop, self->tick_id);
        self->tick_id = -1;
    }
    return 0;
}

//  The hooks of event that match tool_name.
static size_t
s_matching (self_t *self, dsh_hooks_event_t event, const char *tool_name, s_hook_t **hooks)
{
    size_t count = 0;
    for (s_hook_t *hook = (s_hook_t *) zlistx_first (self->hooks); hook;
         hook = (s_hook_t *) zlistx_next (self->hooks)) {
        if (hook->event != event)
            continue;
        bool matched = hook->every_tool
                    || (tool_name && streq (hook->matcher, tool_name))
                    || (tool_name && hook->has_regex && regexec (&hook->regex, tool_name, 0, NULL, 0) == 0);
        if (matched) {
            if (hooks)
                hooks [count] = hook;
            count++;
        }
    }
    return count;
}

//  A run of the matching hooks of event for the call, not started.
//  Returns the run, or NULL with a reason.
static s_run_t *
s_run_new (self_t *self, dsh_stage_t *stage, dsh_call_t *call, dsh_hooks_event_t event,
           json_t *tool_input, json_t *tool_response, char *error, size_t error_size)
{
    const char *tool_name = dsh_call_name (call);
    size_t count = s_matching (self, event, tool_name, NULL);
    assert (count > 0);
    s_run_t *run = (s_run_t *) zmalloc (sizeof (s_run_t));
    run->stage = stage;
    run->call = call;
    run->event = event;
    run->tool_name = strdup (tool_name? tool_name: "");
    run->procs = (s_proc_t *) zmalloc (count * sizeof (s_proc_t));
    s_hook_t **hooks = (s_hook_t **) zmalloc (count * sizeof (s_hook_t *));
    run->count = s_matching (self, event, tool_name, hooks);
    for (size_t index = 0; index < run->count; index++) {
        s_proc_t *proc = &run->procs [index];
        proc->hook = hooks [index];
        proc->input_fd = proc->output_fd = proc->errors_fd = -1;
    }
    free (hooks);

    const char *agent = dsh_call_agent (call);
    json_t *event_json = dsh_hooks_event_json (event, agent? agent: "", self->cwd, tool_name,
                                               tool_input, tool_response);
    char *text = json_dumps (event_json, JSON_COMPACT);
    run->input = text? zsys_sprintf ("%s\n", text): NULL;
    run->input_size = run->input? strlen (run->input): 0;
    free (text);
    json_decref (event_json);
    if (!run->input) {
        snprintf (error, error_size, "cannot encode the %s event", dsh_hooks_event_name (event));
        s_run_destroy (&run);
    }
    return run;
}

static int
s_tick_start (self_t *self)
{
    if (self->tick_id < 0)
        self->tick_id = zloop_timer (self->loop, TICK_MS, 0, s_on_tick, self);
    return self->tick_id < 0? -1: 0;
}

//  Starts the run's processes. Returns 0, or -1 with a reason (nothing is
//  left running then).
static int
s_run_spawn (self_t *self, s_run_t *run, char *error, size_t error_size)
{
    int rc = 0;
    for (size_t index = 0; index < run->count && rc == 0; index++) {
        s_proc_t *proc = &run->procs [index];
        char reason [256];
        rc = s_proc_start (proc, reason, sizeof reason);
        if (rc != 0)
            snprintf (error, error_size, "cannot run hook \"%s\": %s", proc->hook->command, reason);
        else
        if (s_poll_fd (self, proc->output_fd, ZMQ_POLLIN, s_on_fd) != 0
        ||  s_poll_fd (self, proc->errors_fd, ZMQ_POLLIN, s_on_fd) != 0) {
            snprintf (error, error_size, "cannot watch hook \"%s\"", proc->hook->command);
            rc = -1;
        }
        else {
            s_proc_write (self, run, proc);
            if (proc->input_fd >= 0 && s_poll_fd (self, proc->input_fd, ZMQ_POLLOUT, s_on_fd) != 0) {
                snprintf (error, error_size, "cannot watch hook \"%s\"", proc->hook->command);
                rc = -1;
            }
        }
    }
    if (rc == 0 && s_tick_start (self) != 0) {
        snprintf (error, error_size, "cannot start the hook timer");
        rc = -1;
    }
    if (rc != 0) {
        for (size_t index = 0; index < run->count; index++)
            s_proc_stop (self, &run->procs [index]);
        //  The killed ones are reaped by the tick, if it runs; else here.
        if (self->tick_id < 0) {
            for (void *pid = zlistx_first (self->orphans); pid; pid = zlistx_next (self->orphans))
                waitpid ((pid_t) (intptr_t) pid, NULL, 0);
            zlistx_purge (self->orphans);
        }
        return -1;
    }
    run->handle = zlistx_add_end (self->runs, run);
    self->running += run->count;
    return 0;
}

//  Starts the run, or queues it for a turn. Returns NULL (the run is the
//  stage's now), or an error code with a reason (the run is destroyed).
static const char *
s_run_submit (self_t *self, s_run_t **run_p, char *error, size_t error_size)
{
    s_run_t *run = *run_p;
    *run_p = NULL;
    self->loop = dsh_stage_loop (run->stage);
    if (self->queued == 0 && s_room (self, run->count)) {
        if (s_run_spawn (self, run, error, error_size) == 0)
            return NULL;
        s_run_destroy (&run);
        return DSH_E_MIDDLEWARE_FAILED;
    }
    if (s_enqueue (self, run, error, error_size) != 0) {
        s_run_destroy (&run);
        return DSH_E_OVERLOADED;
    }
    if (s_tick_start (self) != 0) {
        s_dequeue (self, run, false);
        s_run_destroy (&run);
        snprintf (error, error_size, "cannot start the hook timer");
        return DSH_E_MIDDLEWARE_FAILED;
    }
    return NULL;
}

//  The run of call, running or queued, or NULL.
static s_run_t *
s_find_call (self_t *self, dsh_call_t *call)
{
    for (s_run_t *run = (s_run_t *) zlistx_first (self->runs); run;
         run = (s_run_t *) zlistx_next (self->runs))
        if (run->call == call)
            return run;
    for (s_lane_t *lane = (s_lane_t *) zlistx_first (self->turns); lane;
         lane = (s_lane_t *) zlistx_next (self->turns))
        for (s_run_t *run = (s_run_t *) zlistx_first (lane->runs); run;
             run = (s_run_t *) zlistx_next (lane->runs))
            if (run->call == call)
                return run;
    return NULL;
}

//  Logs a call the stage could not take: an overload once per burst (a
//  flood must not flood the log too), with the count when it ends.
static void
s_log_refusal (self_t *self, const char *code, const char *error)
{
    if (!streq (code, DSH_E_OVERLOADED))
        zsys_warning ("%s: %s", self->name, error);
    else
    if (self->refused++ == 0)
        zsys_warning ("%s: %s (further refusals are counted until the queue empties)", self->name, error);
}

//  ---------------------------------------------------------------------
//  Stage callbacks

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    self_t *self = (self_t *) arg;
    const char *tool_name = dsh_call_name (call);
    bool post = s_matching (self, DSH_HOOKS_POST_TOOL_USE, tool_name, NULL) > 0;
    bool pre = s_matching (self, DSH_HOOKS_PRE_TOOL_USE, tool_name, NULL) > 0;
    if (!pre && !post)
        return DSH_STAGE_PASS;
    //  Hooks see the arguments that run, in the view that shows every value
    //  as it is (typed forms where plain JSON cannot), or none at all
    const msgpack_object *raw_arguments = dsh_call_arguments (call);
    if (raw_arguments && !dsh_json_is_plain (raw_arguments) && self->refuse_typed) {
        dsh_stage_call_answer_error (call, DSH_E_DENIED,
            "tool \"%s\" was refused by hooks stage \"%s\": its arguments hold values plain JSON cannot "
            "show its hooks (a string that is not UTF-8, bin, ext, an integer beyond INT64_MAX, a float "
            "that is not finite, or a map key that is not a string), and typed_input is \"refuse\"",
            tool_name? tool_name: "", self->name);
        return DSH_STAGE_ANSWER;
    }
    json_t *arguments = raw_arguments? dsh_json_view (raw_arguments): NULL;
    if (raw_arguments && !arguments) {
        dsh_stage_call_answer_error (call, DSH_E_BAD_REQUEST,
            "tool \"%s\": hooks stage \"%s\" cannot show the arguments to its hooks (they nest too deep)",
            tool_name? tool_name: "", self->name);
        return DSH_STAGE_ANSWER;
    }
    if (post) {
        //  The call's body is gone once passed: PostToolUse hooks read the
        //  arguments kept here (updated by the PreToolUse hooks, if any).
        dsh_stage_call_watch_result (call);
        dsh_stage_call_set_data (call, json_incref (arguments), s_json_release);
    }
    if (!pre) {
        json_decref (arguments);
        return DSH_STAGE_PASS;
    }
    char error [512];
    const char *code = DSH_E_MIDDLEWARE_FAILED;
    s_run_t *run = s_run_new (self, stage, call, DSH_HOOKS_PRE_TOOL_USE, arguments, NULL, error, sizeof error);
    json_decref (arguments);
    if (run)
        code = s_run_submit (self, &run, error, sizeof error);
    if (code) {
        s_log_refusal (self, code, error);
        dsh_stage_call_answer_error (call, code, "%s", error);
        return DSH_STAGE_ANSWER;
    }
    return DSH_STAGE_DEFER;
}

static void
s_on_result (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    self_t *self = (self_t *) arg;
    if (s_matching (self, DSH_HOOKS_POST_TOOL_USE, dsh_call_name (call), NULL) == 0)
        return;
    //  Hooks are shown the result as JSON: their edge
    const msgpack_object *raw_result = dsh_stage_call_result (call);
    json_t *result = raw_result? dsh_json_from_msgpack (raw_result): NULL;
    char error [512];
    const char *code = DSH_E_MIDDLEWARE_FAILED;
    s_run_t *run = s_run_new (self, stage, call, DSH_HOOKS_POST_TOOL_USE,
                              (json_t *) dsh_stage_call_data (call), result, error, sizeof error);
    json_decref (result);
    if (run)
        code = s_run_submit (self, &run, error, sizeof error);
    if (code) {
        //  Fails closed; the text says the tool ran (a retry runs it again)
        s_log_refusal (self, code, error);
        char *text = zsys_sprintf ("Error: tool \"%s\" ran, but its result was withheld: %s",
                                   dsh_call_name (call), error);
        s_set_error_result (call, code, text);
        zstr_free (&text);
    }
    else
        dsh_stage_call_defer_result (call);
}

//  The call was answered without the stage: a queued run leaves the queue,
//  a running one is stopped (its processes killed), and the call is let go.
static void
s_on_cancel (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    self_t *self = (self_t *) arg;
    s_run_t *run = s_find_call (self, call);
    if (!run)
        return;
    if (run->lane)
        s_dequeue (self, run, false);
    run->cancelled = true;
    s_run_fail (run, strdup ("the call was answered without the hooks stage"));
    s_run_finish (self, run);
    s_dispatch (self);
}

static void
s_hook_destroy (void **item_p)
{
    s_hook_t *hook = (s_hook_t *) *item_p;
    if (hook) {
        if (hook->has_regex)
            regfree (&hook->regex);
        zstr_free (&hook->matcher);
        zstr_free (&hook->command);
        free (hook);
        *item_p = NULL;
    }
}

//  The stage stops: its loop is gone, and so are the calls. Kill what
//  still runs and wait for it (SIGKILL: not long).
static void
s_on_destroy (void *arg)
{
    self_t *self = (self_t *) arg;
    if (!self)
        return;
    self->loop = NULL;
    for (s_run_t *run = (s_run_t *) zlistx_first (self->runs); run;
         run = (s_run_t *) zlistx_next (self->runs)) {
        for (size_t index = 0; index < run->count; index++)
            s_proc_stop (self, &run->procs [index]);
        s_run_destroy (&run);
    }
    zlistx_destroy (&self->runs);
    for (s_lane_t *lane = (s_lane_t *) zlistx_first (self->turns); lane;
         lane = (s_lane_t *) zlistx_next (self->turns))
        for (s_run_t *run = (s_run_t *) zlistx_first (lane->runs); run;
             run = (s_run_t *) zlistx_next (lane->runs))
            s_run_destroy (&run);
    zlistx_destroy (&self->turns);
    zhashx_destroy (&self->lanes);
    for (void *pid = zlistx_first (self->orphans); pid; pid = zlistx_next (self->orphans))
        waitpid ((pid_t) (intptr_t) pid, NULL, 0);
    zlistx_destroy (&self->orphans);
    zlistx_destroy (&self->hooks);
    zstr_free (&self->name);
    zstr_free (&self->cwd);
    free (self);
}

//  Reads one hook section. Returns the hook, or NULL with a reason.
static s_hook_t *
s_hook_new (zconfig_t *section, int number, char *error, size_t error_size)
{
    s_hook_t *hook = (s_hook_t *) zmalloc (sizeof (s_hook_t));
    hook->timeout_ms = DSH_HOOKS_DEFAULT_TIMEOUT_MS;
    const char *event = NULL, *matcher = "", *command = NULL, *timeout = NULL;
    for (zconfig_t *child = zconfig_child (section); child; child = zconfig_next (child)) {
        const char *key = zconfig_name (child);
        const char *value = zconfig_value (child);
        if (streq (key, "event"))
            event = value;
        else
        if (streq (key, "matcher"))
            matcher = value? value: "";
        else
        if (streq (key, "command"))
            command = value;
        else
        if (streq (key, "timeout_ms"))
            timeout = value;
        else {
            snprintf (error, error_size, "hook %d: unknown setting \"%s\"", number, key);
            goto failed;
        }
    }
    if (dsh_hooks_event_parse (event, &hook->event) != 0) {
        snprintf (error, error_size, "hook %d: event must be PreToolUse or PostToolUse", number);
        goto failed;
    }
    if (!command || !*command) {
        snprintf (error, error_size, "hook %d: command is required", number);
        goto failed;
    }
    if (timeout) {
        char *end = NULL;
        errno = 0;
        long value = strtol (timeout, &end, 10);
        if (errno || end == timeout || *end || value < 1 || value > TIMEOUT_MAX_MS) {
            snprintf (error, error_size, "hook %d: timeout_ms must be a number from 1 to %d",
                      number, TIMEOUT_MAX_MS);
            goto failed;
        }
        hook->timeout_ms = (int) value;
    }
    hook->every_tool = s_matches_every_tool (matcher);
    if (!hook->every_tool) {
        if (s_regex_compile (&hook->regex, matcher) != 0) {
            snprintf (error, error_size, "hook %d: matcher \"%s\" is not a valid regex", number, matcher);
            goto failed;
        }
        hook->has_regex = true;
    }
    hook->matcher = strdup (matcher);
    hook->command = strdup (command);
    return hook;

failed:
    s_hook_destroy ((void **) &hook);
    return NULL;
}

//  The stage's own whole-number settings, beside its hook sections.
static const struct {
    const char *key;
    size_t offset;              //  of the int in self_t
    long min, max;
} s_int_settings [] = {
    { "max_processes", offsetof (self_t, max_processes), 1, 1024 },
    { "queue_calls", offsetof (self_t, queue_calls), 0, 65536 },
    { "queue_calls_per_caller", offsetof (self_t, queue_calls_per_caller), 0, 65536 },
    { "queue_bytes", offsetof (self_t, queue_bytes), 0, 1024 * 1024 * 1024 },
};

//  Reads one of the stage's own settings. Returns 0, or -1 with a reason.
static int
s_setting_read (self_t *self, zconfig_t *item, char *error, size_t error_size)
{
    const char *key = zconfig_name (item);
    for (size_t index = 0; index < sizeof s_int_settings / sizeof s_int_settings [0]; index++)
        if (streq (key, s_int_settings [index].key))
            return dsh_settings_int (key, zconfig_value (item), s_int_settings [index].min,
                                     s_int_settings [index].max,
                                     (int *) ((char *) self + s_int_settings [index].offset),
                                     error, error_size);
    if (streq (key, "typed_input")) {
        const char *value = zconfig_value (item);
        if (value && (streq (value, "render") || streq (value, "refuse"))) {
            self->refuse_typed = streq (value, "refuse");
            return 0;
        }
        snprintf (error, error_size, "typed_input: \"%s\" is not render or refuse", value? value: "");
        return -1;
    }
    if (dsh_settings_chain_key (key))
        return 0;
    snprintf (error, error_size, "unknown setting \"%s\"", key);
    return -1;
}

int
dsh_hooks_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                 dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    assert (callbacks);
    assert (arg);
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    self->name = strdup (context && context->name? context->name: "hooks");
    self->cwd = getcwd (NULL, 0);
    if (!self->cwd)
        self->cwd = strdup ("");
    self->hooks = zlistx_new ();
    zlistx_set_destructor (self->hooks, s_hook_destroy);
    self->runs = zlistx_new ();
    self->orphans = zlistx_new ();
    self->tick_id = -1;
    self->max_processes = DSH_HOOKS_DEFAULT_MAX_PROCESSES;
    self->queue_calls = DSH_HOOKS_DEFAULT_QUEUE_CALLS;
    self->queue_calls_per_caller = DSH_HOOKS_DEFAULT_QUEUE_CALLS_PER_CALLER;
    self->queue_bytes = DSH_HOOKS_DEFAULT_QUEUE_BYTES;
    self->lanes = zhashx_new ();
    zhashx_set_destructor (self->lanes, s_lane_destroy);
    self->turns = zlistx_new ();
    int number = 0;
    for (zconfig_t *child = settings? zconfig_child (settings): NULL; child; child = zconfig_next (child)) {
        if (!streq (zconfig_name (child), "hook")) {
            if (s_setting_read (self, child, error, error_size) != 0) {
                s_on_destroy (self);
                return -1;
            }
            continue;
        }
        s_hook_t *hook = s_hook_new (child, ++number, error, error_size);
        if (!hook) {
            s_on_destroy (self);
            return -1;
        }
        zlistx_add_end (self->hooks, hook);
    }
    memset (callbacks, 0, sizeof *callbacks);
    callbacks->on_request = s_on_request;
    callbacks->on_result = s_on_result;
    callbacks->on_cancel = s_on_cancel;
    callbacks->on_destroy = s_on_destroy;
    *arg = self;
    return 0;
}
