/*  =========================================================================
    dsh_pool - a bounded pool of worker threads for tool handlers

    Handlers are user code: they may block, sleep or spin. They run here,
    never in an actor's loop. Jobs queue up to a limit (a full queue refuses
    at once, so the caller can answer OVERLOADED); finished jobs come back
    on a queue whose file descriptor a zloop can poll. Workers hold no ZeroMQ
    sockets, so a handler that never returns cannot stall shutdown: destroy
    waits a grace period, then leaves such a worker behind.
    =========================================================================
*/

#ifndef DSH_POOL_H_INCLUDED
#define DSH_POOL_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_pool_t dsh_pool_t;

//  Runs one job on a worker thread. Returns true when the job is done (the
//  owner gets it back), false when it goes on elsewhere and will be handed
//  back later with dsh_pool_post.
typedef bool (dsh_pool_job_fn) (void *job);

//  Disposes of a job that will never run or never be collected.
typedef void (dsh_pool_discard_fn) (void *job);

//  A pool of workers threads running run on each submitted job, with at
//  most queue_limit jobs waiting. NULL if threads cannot be started.
dsh_pool_t *
    dsh_pool_new (size_t workers, size_t queue_limit, dsh_pool_job_fn *run);

//  Stop the workers: jobs still queued are handed to discard (may be NULL);
//  waits up to grace_ms for running jobs, then leaves any still running
//  behind (their pool memory is kept for them). Safe twice.
void
    dsh_pool_destroy (dsh_pool_t **self_p, int grace_ms, dsh_pool_discard_fn *discard);

//  Queue a job. Returns 0, or -1 if the queue is full.
int
    dsh_pool_submit (dsh_pool_t *self, void *job);

//  Hand item to the owner as if a job had finished (a deferred job done on
//  another thread, a progress note). Safe from any thread.
void
    dsh_pool_post (dsh_pool_t *self, void *item);

//  The next finished job, or NULL if none is waiting. Never blocks.
void *
    dsh_pool_done (dsh_pool_t *self);

//  A file descriptor that is readable while finished jobs wait.
int
    dsh_pool_fd (dsh_pool_t *self);

//  Jobs queued or running.
size_t
    dsh_pool_busy (dsh_pool_t *self);

#ifdef __cplusplus
}
#endif

#endif
