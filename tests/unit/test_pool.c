/*  =========================================================================
    test_pool - dsh_pool: every job comes back once, the wakeup fd is
    readable exactly while finished jobs wait, workers run jobs side by
    side, the queue limit refuses, destroy discards what is left and does
    not wait past its grace for a handler that never returns

    No assertion depends on how fast anything runs: waits are on conditions,
    with timeouts only so that a broken pool fails instead of hanging.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dsh_pool.h"

#define WAIT_MS 10000               //  how long anything may take before the test fails

typedef enum { JOB_QUICK, JOB_BARRIER, JOB_GATE } job_kind_t;

typedef struct {
    int id;
    job_kind_t kind;
    atomic_int runs;
    atomic_int discards;
    atomic_int returned;            //  times dsh_pool_done gave it back
    atomic_bool started;
    atomic_bool finished;
    bool saw_all;                   //  JOB_BARRIER: all its peers were running at once
} job_t;

//  Shared by the jobs of one test: a counter the barrier jobs meet at, and a
//  gate the gate jobs wait behind.
static pthread_mutex_t s_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t s_cond = PTHREAD_COND_INITIALIZER;
static int s_arrived;
static int s_expected;
static bool s_gate_open;

//  The pool a test left behind with a handler running: kept reachable on
//  purpose, as dsh_pool keeps its memory for that handler.
static dsh_pool_t *s_abandoned;

static void
s_reset (int expected)
{
    pthread_mutex_lock (&s_mutex);
    s_arrived = 0;
    s_expected = expected;
    s_gate_open = false;
    pthread_mutex_unlock (&s_mutex);
}

static void
s_open_gate (void)
{
    pthread_mutex_lock (&s_mutex);
    s_gate_open = true;
    pthread_cond_broadcast (&s_cond);
    pthread_mutex_unlock (&s_mutex);
}

//  Waits on s_cond until check () is true or WAIT_MS pass; returns check ().
static bool
s_wait_until (bool (*check) (void))
{
    struct timespec until;
    clock_gettime (CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock (&s_mutex);
    bool ok = check ();
    while (!ok) {
        if (pthread_cond_timedwait (&s_cond, &s_mutex, &until))
            break;
        ok = check ();
    }
    ok = check ();
    pthread_mutex_unlock (&s_mutex);
    return ok;
}

static bool
s_all_arrived (void)
{
    return s_arrived >= s_expected;
}

static bool
s_gate_is_open (void)
{
    return s_gate_open;
}

static bool
s_run (void *arg)
{
    job_t *job = (job_t *) arg;
    job->runs++;
    job->started = true;
    if (job->kind == JOB_BARRIER) {
        pthread_mutex_lock (&s_mutex);
        s_arrived++;
        pthread_cond_broadcast (&s_cond);
        pthread_mutex_unlock (&s_mutex);
        job->saw_all = s_wait_until (s_all_arrived);
    }
    else
    if (job->kind == JOB_GATE)
        s_wait_until (s_gate_is_open);
    job->finished = true;
    return true;
}

static void
s_discard (void *arg)
{
    job_t *job = (job_t *) arg;
    job->discards++;
}

//  Spins (briefly sleeping) until the job has started; fails after WAIT_MS.
static void
s_wait_started (job_t *job)
{
    int64_t give_up = zclock_mono () + WAIT_MS;
    while (!job->started && zclock_mono () < give_up)
        zclock_sleep (1);
    assert_true (job->started);
}

//  Collects count finished jobs by polling the pool's fd; fails if they do
//  not all come back within WAIT_MS.
static void
s_collect (dsh_pool_t *pool, size_t count)
{
    int64_t give_up = zclock_mono () + WAIT_MS;
    size_t collected = 0;
    while (collected < count) {
        int64_t left = give_up - zclock_mono ();
        if (left <= 0)
            fail_msg ("only %zu of %zu jobs came back", collected, count);
        struct pollfd item = { .fd = dsh_pool_fd (pool), .events = POLLIN };
        int rc = poll (&item, 1, (int) left);
        assert_true (rc >= 0);
        if (rc == 0)
            continue;
        job_t *job;
        while ((job = (job_t *) dsh_pool_done (pool))) {
            assert_true (job->finished);
            job->returned++;
            collected++;
        }
    }
    //  Nothing more than that comes back
    assert_null (dsh_pool_done (pool));
}

static void
test_all_come_back (void **state)
{
    (void) state;
    dsh_pool_t *pool = dsh_pool_new (3, 100, s_run);
    assert_non_null (pool);
    assert_true (dsh_pool_fd (pool) >= 0);
    assert_null (dsh_pool_done (pool));
    assert_int_equal (dsh_pool_busy (pool), 0);

    job_t jobs [40];
    memset (jobs, 0, sizeof jobs);
    for (int index = 0; index < 40; index++) {
        jobs [index].id = index;
        jobs [index].kind = JOB_QUICK;
        assert_int_equal (dsh_pool_submit (pool, &jobs [index]), 0);
    }
    s_collect (pool, 40);
    for (int index = 0; index < 40; index++) {
        assert_int_equal (jobs [index].runs, 1);
        assert_int_equal (jobs [index].returned, 1);
    }
    assert_int_equal (dsh_pool_busy (pool), 0);

    //  And again, on the same pool
    for (int index = 0; index < 10; index++)
        assert_int_equal (dsh_pool_submit (pool, &jobs [index]), 0);
    s_collect (pool, 10);
    assert_int_equal (jobs [0].runs, 2);
    assert_int_equal (jobs [39].runs, 1);

    dsh_pool_destroy (&pool, 1000, s_discard);
    assert_null (pool);
    dsh_pool_destroy (&pool, 1000, s_discard);
    for (int index = 0; index < 40; index++)
        assert_int_equal (jobs [index].discards, 0);
}

//  True if fd is readable right now.
static bool
s_fd_readable (int fd)
{
    struct pollfd item = { .fd = fd, .events = POLLIN };
    return poll (&item, 1, 0) == 1;
}

static void
test_wakeup_fd (void **state)
{
    (void) state;
    //  The fd is readable exactly while finished jobs wait: one wakeup for
    //  any number of them, gone with the last one taken
    dsh_pool_t *pool = dsh_pool_new (1, 10, s_run);
    int fd = dsh_pool_fd (pool);
    assert_false (s_fd_readable (fd));
    job_t items [3];
    memset (items, 0, sizeof items);
    for (int index = 0; index < 3; index++)
        dsh_pool_post (pool, &items [index]);
    assert_true (s_fd_readable (fd));
    assert_ptr_equal (dsh_pool_done (pool), &items [0]);
    assert_true (s_fd_readable (fd));
    assert_ptr_equal (dsh_pool_done (pool), &items [1]);
    assert_ptr_equal (dsh_pool_done (pool), &items [2]);
    assert_false (s_fd_readable (fd));
    assert_null (dsh_pool_done (pool));
    assert_false (s_fd_readable (fd));

    //  Again, past the ring's first size, in order
    job_t many [200];
    memset (many, 0, sizeof many);
    for (int index = 0; index < 200; index++)
        dsh_pool_post (pool, &many [index]);
    for (int index = 0; index < 200; index++) {
        assert_true (s_fd_readable (fd));
        assert_ptr_equal (dsh_pool_done (pool), &many [index]);
    }
    assert_false (s_fd_readable (fd));
    dsh_pool_destroy (&pool, 1000, NULL);
}

static void
test_concurrent (void **state)
{
    (void) state;
    //  Four jobs that each wait until all four are running can only all
    //  finish with their peers seen if four workers run them at once.
    s_reset (4);
    dsh_pool_t *pool = dsh_pool_new (4, 10, s_run);
    job_t jobs [4];
    memset (jobs, 0, sizeof jobs);
    for (int index = 0; index < 4; index++) {
        jobs [index].kind = JOB_BARRIER;
        assert_int_equal (dsh_pool_submit (pool, &jobs [index]), 0);
    }
    s_collect (pool, 4);
    for (int index = 0; index < 4; index++)
        assert_true (jobs [index].saw_all);
    dsh_pool_destroy (&pool, 1000, NULL);
}

static void
test_queue_limit (void **state)
{
    (void) state;
    s_reset (0);
    dsh_pool_t *pool = dsh_pool_new (1, 2, s_run);
    job_t blocker = { .kind = JOB_GATE };
    job_t queued [3];
    memset (queued, 0, sizeof queued);
    assert_int_equal (dsh_pool_submit (pool, &blocker), 0);
    s_wait_started (&blocker);
    //  The worker is busy: two may wait, the third is refused at once
    assert_int_equal (dsh_pool_submit (pool, &queued [0]), 0);
    assert_int_equal (dsh_pool_submit (pool, &queued [1]), 0);
    assert_int_equal (dsh_pool_submit (pool, &queued [2]), -1);
    assert_int_equal (dsh_pool_busy (pool), 3);
    assert_int_equal (queued [2].runs, 0);

    s_open_gate ();
    s_collect (pool, 3);
    assert_int_equal (blocker.returned, 1);
    assert_int_equal (queued [0].returned, 1);
    assert_int_equal (queued [1].returned, 1);
    assert_int_equal (queued [2].runs, 0);
    assert_int_equal (dsh_pool_busy (pool), 0);

    //  Room again
    assert_int_equal (dsh_pool_submit (pool, &queued [2]), 0);
    s_collect (pool, 1);
    assert_int_equal (queued [2].runs, 1);
    dsh_pool_destroy (&pool, 1000, s_discard);
    assert_int_equal (queued [2].discards, 0);
}

static void *
s_open_gate_later (void *arg)
{
    (void) arg;
    zclock_sleep (300);
    s_open_gate ();
    return NULL;
}

static void
test_destroy_discards (void **state)
{
    (void) state;
    s_reset (0);
    dsh_pool_t *pool = dsh_pool_new (1, 10, s_run);
    job_t blocker = { .kind = JOB_GATE };
    job_t queued [5];
    memset (queued, 0, sizeof queued);
    job_t done = { .kind = JOB_QUICK };

    //  One job finished and never collected
    assert_int_equal (dsh_pool_submit (pool, &done), 0);
    int64_t give_up = zclock_mono () + WAIT_MS;
    while (dsh_pool_busy (pool) > 0 && zclock_mono () < give_up)
        zclock_sleep (1);
    assert_int_equal (dsh_pool_busy (pool), 0);

    //  One running, five queued behind it
    assert_int_equal (dsh_pool_submit (pool, &blocker), 0);
    s_wait_started (&blocker);
    for (int index = 0; index < 5; index++)
        assert_int_equal (dsh_pool_submit (pool, &queued [index]), 0);

    //  The running job is let go while destroy waits for it
    pthread_t opener;
    assert_int_equal (pthread_create (&opener, NULL, s_open_gate_later, NULL), 0);
    dsh_pool_destroy (&pool, WAIT_MS, s_discard);
    pthread_join (opener, NULL);
    assert_null (pool);

    //  Every job left in the pool was handed to discard exactly once
    assert_int_equal (done.discards, 1);
    assert_int_equal (blocker.runs, 1);
    assert_true (blocker.finished);
    assert_int_equal (blocker.discards, 1);
    for (int index = 0; index < 5; index++) {
        assert_int_equal (queued [index].discards, 1);
        assert_int_equal (queued [index].runs, 0);
    }
}

static void
test_destroy_grace (void **state)
{
    (void) state;
    s_reset (0);
    dsh_pool_t *pool = dsh_pool_new (2, 10, s_run);
    static job_t stuck = { .kind = JOB_GATE };
    assert_int_equal (dsh_pool_submit (pool, &stuck), 0);
    s_wait_started (&stuck);

    s_abandoned = pool;
    int64_t started = zclock_mono ();
    dsh_pool_destroy (&pool, 300, s_discard);
    int64_t elapsed = zclock_mono () - started;
    assert_null (pool);
    //  It waited for the grace period, and not much longer
    assert_true (elapsed >= 250);
    if (elapsed >= 300 + 2000)
        fail_msg ("destroy took %" PRId64 " ms with a grace of 300 ms", elapsed);
    assert_false (stuck.finished);
    assert_int_equal (stuck.discards, 0);

    //  Let the left-behind handler finish, and its worker touch the pool it
    //  was left, before the test exits.
    s_open_gate ();
    struct pollfd item = { .fd = dsh_pool_fd (s_abandoned), .events = POLLIN };
    assert_int_equal (poll (&item, 1, WAIT_MS), 1);
    assert_true (stuck.finished);
    zclock_sleep (200);                 //  the worker exits right after its wakeup byte
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_all_come_back),
        cmocka_unit_test (test_wakeup_fd),
        cmocka_unit_test (test_concurrent),
        cmocka_unit_test (test_queue_limit),
        cmocka_unit_test (test_destroy_discards),
        cmocka_unit_test (test_destroy_grace),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
