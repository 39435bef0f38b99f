/*  =========================================================================
    dsh_bench_nats - dsh-bench's NATS peer: a nats-server of its own and
    the requester side of NATS request/reply

    The peer a user would pick for "call a service on another machine" is
    NATS request/reply, so dsh-bench measures it in the same run and the
    same process layout as dsh: requester (dsh-bench) -> nats-server ->
    responder processes (dsh-bench-nats-echo) in one queue group. Both
    sides set SendAsap: the library's default buffers each publish for the
    flusher thread, which adds about 1 ms per send.

    Built with libnats when meson finds it (option "nats"); without it,
    dsh_bench_nats_new says why and dsh-bench skips the column. dsh itself
    never links or runs any of it.
    =========================================================================
*/

#ifndef DSH_BENCH_NATS_H_INCLUDED
#define DSH_BENCH_NATS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

//  The subject responders serve and the queue group they share.
#define DSH_BENCH_NATS_SUBJECT  "dsh.bench.echo"
#define DSH_BENCH_NATS_QUEUE    "echo"

typedef struct _dsh_bench_nats_t dsh_bench_nats_t;

//  Start nats-server on a free loopback port, wait at most timeout_ms for
//  it to take a connection, and connect the requester. NULL, with why in
//  reason, if NATS is not built in, nats-server is not installed, or it
//  did not start.
dsh_bench_nats_t *
    dsh_bench_nats_new (int timeout_ms, char *reason, size_t reason_size);

//  Disconnect and stop nats-server (SIGTERM, then SIGKILL), waiting for
//  it; safe twice.
void
    dsh_bench_nats_destroy (dsh_bench_nats_t **self_p);

//  The server's client URL, for responders.
const char *
    dsh_bench_nats_url (dsh_bench_nats_t *self);

//  nats-server's process id, to read its memory.
pid_t
    dsh_bench_nats_server_pid (dsh_bench_nats_t *self);

//  The server's version, as its log says at start, e.g. "2.9.10".
const char *
    dsh_bench_nats_server_version (dsh_bench_nats_t *self);

//  The client library's version, e.g. "3.4.1".
const char *
    dsh_bench_nats_client_version (void);

//  Publish one request with data to the responders' subject, its reply to
//  the requester's inbox. Returns 0, or -1 with why in reason.
int
    dsh_bench_nats_send (dsh_bench_nats_t *self, const void *data, size_t size,
                         char *reason, size_t reason_size);

//  Take one reply, waiting at most timeout_ms. Returns its size, or -1
//  with why in reason (timeout, no responders, connection lost).
long
    dsh_bench_nats_recv (dsh_bench_nats_t *self, int timeout_ms, char *reason, size_t reason_size);

#endif
