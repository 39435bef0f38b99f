/*  =========================================================================
    dsh_bench_nats - dsh-bench's NATS peer, when libnats was not found

    meson builds this file instead of dsh_bench_nats.c, so dsh-bench runs
    everything else and says why the NATS column is missing.
    =========================================================================
*/

#include "dsh_bench_nats.h"

#include <stdio.h>

dsh_bench_nats_t *
dsh_bench_nats_new (int timeout_ms, char *reason, size_t reason_size)
{
    (void) timeout_ms;
    snprintf (reason, reason_size, "dsh-bench was built without libnats "
              "(install libnats-dev, or deploy/install-deps.sh, and reconfigure)");
    return NULL;
}

void
dsh_bench_nats_destroy (dsh_bench_nats_t **self_p)
{
    *self_p = NULL;
}

const char *
dsh_bench_nats_url (dsh_bench_nats_t *self)
{
    (void) self;
    return "";
}

pid_t
dsh_bench_nats_server_pid (dsh_bench_nats_t *self)
{
    (void) self;
    return 0;
}

const char *
dsh_bench_nats_server_version (dsh_bench_nats_t *self)
{
    (void) self;
    return "none";
}

const char *
dsh_bench_nats_client_version (void)
{
    return "none";
}

int
dsh_bench_nats_send (dsh_bench_nats_t *self, const void *data, size_t size, char *reason, size_t reason_size)
{
    (void) self;
    (void) data;
    (void) size;
    snprintf (reason, reason_size, "built without libnats");
    return -1;
}

long
dsh_bench_nats_recv (dsh_bench_nats_t *self, int timeout_ms, char *reason, size_t reason_size)
{
    (void) self;
    (void) timeout_ms;
    snprintf (reason, reason_size, "built without libnats");
    return -1;
}
