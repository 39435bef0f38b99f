/*  =========================================================================
    dsh_testkit - real processes for integration tests

    Starts the built programs (dsh-broker, dsh-demo, dsh-fs, dsh) as child
    processes on loopback, reads their stdout, signals and reaps them. The
    build directory comes from $DSH_BUILD_DIR (meson sets it). Every wait
    has a timeout; a process still running when destroyed is killed.
    =========================================================================
*/

#ifndef DSH_TESTKIT_H_INCLUDED
#define DSH_TESTKIT_H_INCLUDED

#include <czmq.h>
#include "dsh_client.h"
#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

//  How many tools dsh-demo serves (echo, sleep_ms, tick, count, fail,
//  sample_content).
#define DSH_TESTKIT_DEMO_TOOLS 6

typedef struct _dsh_testproc_t dsh_testproc_t;

//  A loopback port from which count ports in a row are free, for a broker
//  that must come back on the same ports: below czmq's range for "*" binds
//  (from 49152, which every other test broker scans) and the kernel's for
//  outgoing connections (from 32768), so nothing else takes them while
//  the broker is down. -1 if none was found. The probe is a plain socket,
//  bound and never listening: close gives the port back at once. (A ZMQ
//  socket closes in its I/O thread, later, and until then its listener
//  completes ZMTP handshakes: a client connecting at once would count
//  that as its broker reached.)
int
    dsh_testkit_free_ports (int count);

//  The path of a built program, e.g. "broker/dsh-broker". Caller frees.
char *
    dsh_testkit_program (const char *relative);

//  Start argv (argv[0] relative to the build dir, NULL-terminated), stdout
//  to a pipe we read, stderr inherited. NULL if it cannot start.
dsh_testproc_t *
    dsh_testproc_start (const char *const *argv);

//  The same, with stdin_fd (if >= 0) as the process's stdin.
dsh_testproc_t *
    dsh_testproc_start_input (const char *const *argv, int stdin_fd);

//  The same, with stderr_fd (if >= 0) as the process's stderr.
dsh_testproc_t *
    dsh_testproc_start_fds (const char *const *argv, int stdin_fd, int stderr_fd);
//  The same, with stderr in the stdout pipe too (for a test that checks
//  what a program says when it refuses to run).
dsh_testproc_t *
    dsh_testproc_start_merged (const char *const *argv);

//  Kill (SIGKILL) if still running, reap, free; safe twice.
void
    dsh_testproc_destroy (dsh_testproc_t **self_p);

//  Read stdout until a line containing text arrives; returns that line
//  (caller frees) or NULL on timeout or end of output.
char *
    dsh_testproc_wait_line (dsh_testproc_t *self, const char *text, int timeout_ms);

//  All stdout read so far, plus whatever arrives until the process exits
//  or timeout_ms passes. Owned by the process object.
const char *
    dsh_testproc_output (dsh_testproc_t *self, int timeout_ms);

//  Send a signal.
void
    dsh_testproc_signal (dsh_testproc_t *self, int signal);

//  Wait for exit; returns the exit status (0-255), 128+signal if killed,
//  or -1 on timeout.
int
    dsh_testproc_wait (dsh_testproc_t *self, int timeout_ms);

//  The process id.
pid_t
    dsh_testproc_pid (dsh_testproc_t *self);

//  Start dsh-broker on a free loopback port with the given heartbeat, plus
//  extra flags (NULL-terminated, may be NULL). Returns the process and
//  writes its front endpoint into endpoint. NULL on failure.
dsh_testproc_t *
    dsh_testkit_broker (int heartbeat_ms, const char *const *extra, char *endpoint, size_t size);

//  Start dsh-broker as dsh_testkit_broker does, its stderr (its log) to
//  stderr_fd (if >= 0).
dsh_testproc_t *
    dsh_testkit_broker_stderr (int heartbeat_ms, const char *const *extra, int stderr_fd,
                               char *endpoint, size_t size);

//  Start dsh-broker as dsh_testkit_broker does, with config (ZPL text,
//  e.g. a chain section) in a temporary file that is gone once the broker
//  has read it. NULL on failure.
dsh_testproc_t *
    dsh_testkit_broker_config (int heartbeat_ms, const char *config, char *endpoint, size_t size);

//  The main job's broker config (deploy/dsh-broker.cfg under
//  $DSH_SOURCE_DIR, else the working directory), as text to hand to
//  dsh_testkit_broker_config. Caller frees; NULL if it cannot be read.
char *
    dsh_testkit_main_config (void);

//  Start a component program (e.g. "components/demo/dsh-demo") against
//  endpoint with --id id and extra flags; waits for its start line.
dsh_testproc_t *
    dsh_testkit_component (const char *program, const char *endpoint, const char *id,
                           const char *const *extra);

//  Run the dsh CLI with args against endpoint, wait up to timeout_ms;
//  returns its exit status (-1 on timeout) and its stdout (caller frees)
//  in *output if not NULL.
int
    dsh_testkit_cli (const char *endpoint, const char *const *args, int timeout_ms, char **output);

//  The same, with the CLI's stderr in output too.
int
    dsh_testkit_cli_merged (const char *endpoint, const char *const *args, int timeout_ms, char **output);

//  Poll until `dsh tools` (via the client SDK) lists count tools whose
//  names contain text (count 0: none). Returns 0, or -1 on timeout.
int
    dsh_testkit_wait_tools (const char *endpoint, const char *text, size_t count, int timeout_ms);

//  Send a call to name with JSON arguments on client (call_id NULL: a fresh
//  one). Returns its callId (the client's own string), or NULL if args is
//  not JSON or the send failed.
const char *
    dsh_testkit_send_json (dsh_client_t *client, const char *call_id, const char *name, const char *args,
                           int timeout_ms);

//  A PUB on a broker's announce endpoint (from its WELCOME) that the
//  broker's SUB has subscribed to: an XPUB, returned once the broker's
//  subscription has arrived, so nothing sent on it is dropped as a slow
//  joiner's would be. NULL if it did not come within timeout_ms.
zsock_t *
    dsh_testkit_announce_pub (const char *announce, int timeout_ms);

//  A SUB on the events of the broker at front (from its WELCOME),
//  subscribed to prefix, once the subscription is proven live: a probe
//  component joins (again under a new id until one of its events is
//  heard) and leaves, and its events are read and dropped. *seq_p (if not
//  NULL) is the seq of the last of them, so the next event the test reads
//  is seq + 1. NULL on timeout.
zsock_t *
    dsh_testkit_events (const char *front, const char *prefix, uint64_t *seq_p, int timeout_ms);

//  The broker's count of calls sent to component and not yet answered by
//  it (STATS, "components", "inFlight"); -1 if the broker does not answer
//  or does not list the component.
int64_t
    dsh_testkit_in_flight (const char *front, const char *component);

//  Poll STATS until component has at least count calls in flight at it
//  (the calls have reached it, not just the broker). 0, or -1 on timeout.
int
    dsh_testkit_wait_in_flight (const char *front, const char *component, size_t count, int timeout_ms);

//  True in the long suite (DSH_TEST_LONG=1): a test runs its long variant
//  (a bigger soak, a bigger flood) where it has one.
bool
    dsh_testkit_long (void);

//  Start a scratch PostgreSQL server in dir (tests/kit/pg_scratch.sh under
//  $DSH_SOURCE_DIR: a new cluster, trust auth, loopback only) and return
//  its URI, postgresql://USER@127.0.0.1:PORT/dsh (caller frees). NULL if
//  there is no PostgreSQL server here (the script's 77): the caller skips
//  with 77. A server that is here but does not start fails the test: the
//  script's reason goes to stderr and the process exits 1.
char *
    dsh_testkit_postgres_start (const char *dir);

//  The same for a caller that carries on without PostgreSQL (dsh-bench):
//  NULL, with the reason in reason, whether there is no server here or
//  it did not start; it never exits.
char *
    dsh_testkit_postgres_try (const char *dir, char *reason, size_t reason_size);

//  Stop the server in dir (fast: its sessions end). 0, or -1.
int
    dsh_testkit_postgres_stop (const char *dir);

//  Stop the server in dir and start it again on the same port. 0, or -1.
int
    dsh_testkit_postgres_restart (const char *dir);

//  --- A raw approver: a DEALER on a permission stage's approvals socket --

//  An approver found through client (CONTROL approvals on stage) and
//  connected, present once the stage's first HEARTBEAT came (within
//  timeout_ms). NULL if any of that failed.
zsock_t *
    dsh_testkit_approver (dsh_client_t *client, const char *stage, int timeout_ms);

//  Send COMMAND with body (a JSON object) to the stage. Returns 0, or -1.
int
    dsh_testkit_approver_send (zsock_t *approver, const char *command, const json_t *body);

//  The next message from the stage but HEARTBEATs (each answered with
//  APPROVER, as `dsh approver` keeps itself present), as JSON, its command
//  into command; NULL after timeout_ms, or for a body that cannot be read.
json_t *
    dsh_testkit_approver_next (zsock_t *approver, char *command, size_t size, int timeout_ms);

//  The same, but the message must be of command: else NULL, and why
//  (nothing came, or what came instead) in why.
json_t *
    dsh_testkit_approver_expect (zsock_t *approver, const char *command, int timeout_ms, char *why, size_t why_size);

#endif
