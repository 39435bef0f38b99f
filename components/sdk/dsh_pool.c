/*  =========================================================================
    dsh_pool - a bounded pool of worker threads for tool handlers

    A mutex guards two lists (waiting, finished); a condition variable wakes
    workers; a pipe carries one byte per finished job to wake the owner's
    poll loop.
    =========================================================================
*/

#include "dsh_pool.h"

#include <czmq.h>
#include <fcntl.h>
#include <pthread.h>

struct _dsh_pool_t {
    pthread_mutex_t mutex;
    pthread_cond_t wake;
    zlistx_t *waiting;
    zlistx_t *finished;
    size_t queue_limit;
    size_t running;
    bool stopping;
    dsh_pool_job_fn *run;
    int wakeup [2];             //  pipe: workers write, owner reads
    pthread_t *threads;
    size_t thread_count;
};

static void *
s_worker (void *arg)
{
    dsh_pool_t *self = (dsh_pool_t *) arg;
    pthread_mutex_lock (&self->mutex);
    while (true) {
        while (!self->stopping && zlistx_size (self->waiting) == 0)
            pthread_cond_wait (&self->wake, &self->mutex);
        if (self->stopping)
            break;
        void *job = zlistx_first (self->waiting);
        zlistx_delete (self->waiting, zlistx_cursor (self->waiting));
        self->running++;
        pthread_mutex_unlock (&self->mutex);
        bool done = self->run (job);
        pthread_mutex_lock (&self->mutex);
        self->running--;
        pthread_mutex_unlock (&self->mutex);
        if (done)
            dsh_pool_post (self, job);
        pthread_mutex_lock (&self->mutex);
    }
    pthread_mutex_unlock (&self->mutex);
    return NULL;
}

dsh_pool_t *
dsh_pool_new (size_t workers, size_t queue_limit, dsh_pool_job_fn *run)
{
    assert (workers > 0);
    assert (run);
    dsh_pool_t *self = (dsh_pool_t *) zmalloc (sizeof (dsh_pool_t));
    assert (self);
    pthread_mutex_init (&self->mutex, NULL);
    pthread_cond_init (&self->wake, NULL);
    self->waiting = zlistx_new ();
    self->finished = zlistx_new ();
    self->queue_limit = queue_limit;
    self->run = run;
    if (pipe2 (self->wakeup, O_NONBLOCK | O_CLOEXEC)) {
        zlistx_destroy (&self->waiting);
        zlistx_destroy (&self->finished);
        free (self);
        return NULL;
    }
    self->threads = (pthread_t *) zmalloc (workers * sizeof (pthread_t));
    for (size_t index = 0; index < workers; index++) {
        if (pthread_create (&self->threads [index], NULL, s_worker, self))
            break;
        self->thread_count++;
    }
    if (self->thread_count == 0) {
        dsh_pool_destroy (&self, 0, NULL);
        return NULL;
    }
    return self;
}

void
dsh_pool_destroy (dsh_pool_t **self_p, int grace_ms, dsh_pool_discard_fn *discard)
{
    assert (self_p);
    dsh_pool_t *self = *self_p;
    if (!self)
        return;
    *self_p = NULL;
    pthread_mutex_lock (&self->mutex);
    self->stopping = true;
    pthread_cond_broadcast (&self->wake);
    pthread_mutex_unlock (&self->mutex);

    int64_t give_up = zclock_mono () + grace_ms;
    bool left_behind = false;
    for (size_t index = 0; index < self->thread_count; index++) {
        struct timespec until;
        clock_gettime (CLOCK_REALTIME, &until);
        int64_t wait_ms = give_up - zclock_mono ();
        if (wait_ms < 0)
            wait_ms = 0;
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        if (pthread_timedjoin_np (self->threads [index], NULL, &until)) {
            pthread_detach (self->threads [index]);
            left_behind = true;
        }
    }
    void *job;
    while ((job = zlistx_first (self->waiting))) {
        zlistx_delete (self->waiting, zlistx_cursor (self->waiting));
        if (discard)
            discard (job);
    }
    while ((job = zlistx_first (self->finished))) {
        zlistx_delete (self->finished, zlistx_cursor (self->finished));
        if (discard)
            discard (job);
    }
    if (left_behind) {
        //  A handler still runs and will touch the pool when it returns;
        //  the process is going away, so its few bytes stay with it.
        zsys_warning ("dsh_pool: a handler did not return within %d ms; left running", grace_ms);
        return;
    }
    close (self->wakeup [0]);
    close (self->wakeup [1]);
    zlistx_destroy (&self->waiting);
    zlistx_destroy (&self->finished);
    free (self->threads);
    pthread_cond_destroy (&self->wake);
    pthread_mutex_destroy (&self->mutex);
    free (self);
}

int
dsh_pool_submit (dsh_pool_t *self, void *job)
{
    assert (self);
    assert (job);
    pthread_mutex_lock (&self->mutex);
    int rc = -1;
    if (zlistx_size (self->waiting) < self->queue_limit) {
        zlistx_add_end (self->waiting, job);
        pthread_cond_signal (&self->wake);
        rc = 0;
    }
    pthread_mutex_unlock (&self->mutex);
    return rc;
}

void
dsh_pool_post (dsh_pool_t *self, void *item)
{
    assert (self);
    assert (item);
    pthread_mutex_lock (&self->mutex);
    zlistx_add_end (self->finished, item);
    pthread_mutex_unlock (&self->mutex);
    char byte = 1;
    //  A full pipe already wakes the owner; the byte is only a nudge
    if (write (self->wakeup [1], &byte, 1) < 0 && errno != EAGAIN)
        zsys_error ("dsh_pool: cannot signal a finished job: %s", strerror (errno));
}

void *
dsh_pool_done (dsh_pool_t *self)
{
    assert (self);
    char bytes [64];
    while (read (self->wakeup [0], bytes, sizeof (bytes)) > 0)
        ;
    pthread_mutex_lock (&self->mutex);
    void *job = zlistx_first (self->finished);
    if (job)
        zlistx_delete (self->finished, zlistx_cursor (self->finished));
    pthread_mutex_unlock (&self->mutex);
    return job;
}

int
dsh_pool_fd (dsh_pool_t *self)
{
    assert (self);
    return self->wakeup [0];
}

size_t
dsh_pool_busy (dsh_pool_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->mutex);
    size_t busy = zlistx_size (self->waiting) + self->running;
    pthread_mutex_unlock (&self->mutex);
    return busy;
}
