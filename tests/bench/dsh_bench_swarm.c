/*  =========================================================================
    dsh-bench-swarm - many components in one process, for dsh-bench's scale and swarm parts

        dsh-bench-swarm ENDPOINT COMPONENTS TOOLS [--churn PCT] [--every SECONDS]
                        [--paused]

    Starts COMPONENTS providers (ids swarm-000, swarm-001, ...), each a real
    component with its own sockets over tcp, each announcing TOOLS raw tools
    (sNNN_tMMM). One thread per component sets its provider up, so they
    join the broker together as a swarm would. Prints one line when every
    tool is added, then serves until SIGINT or SIGTERM. ENDPOINT may be a
    comma list of fronts: every component then follows every broker.

    --churn PCT: every --every SECONDS (default 10) PCT % of the components
    (the next ones in turn) leave together (the provider is destroyed: a
    WITHDRAW) and rejoin together (a new provider, the same id and tools),
    so each broker publishes a burst of tool.unregistered and component.left
    events, then one of tool.registered and component.joined. A line
    "churn: cycle N ..." follows each cycle. --paused: churn only after
    SIGUSR1; SIGUSR2 pauses it again once the cycle under way is done, and
    prints "churn: paused after N cycles".
    =========================================================================
*/

#include "dsh_provider.h"
#include "dsh_bench_fds.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>

typedef struct {
    const char *endpoint;
    size_t index;
    size_t tools;
    dsh_provider_t *provider;
    int rc;
} s_member_t;

static int
s_answer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "ok");
    return 0;
}

static void *
s_member_start (void *arg)
{
    s_member_t *member = (s_member_t *) arg;
    char id [32];
    snprintf (id, sizeof (id), "swarm-%03zu", member->index);
    member->provider = dsh_provider_new (member->endpoint, id, 1);
    if (!member->provider) {
        member->rc = -1;
        return NULL;
    }
    for (size_t tool = 0; tool < member->tools && member->rc == 0; tool++) {
        char entry [256];
        snprintf (entry, sizeof (entry),
                  "{\"name\":\"s%03zu_t%03zu\",\"description\":\"scale benchmark tool\","
                  "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}}}}",
                  member->index, tool);
        member->rc = dsh_provider_add_raw (member->provider, entry, s_answer, NULL);
    }
    //  Every tool is in: the component joins with one ANNOUNCE
    dsh_provider_start (member->provider);
    return NULL;
}

static void *
s_member_stop (void *arg)
{
    s_member_t *member = (s_member_t *) arg;
    dsh_provider_destroy (&member->provider);
    return NULL;
}

//  Set by SIGUSR1, cleared by SIGUSR2: whether the swarm churns.
static volatile sig_atomic_t s_churning = 0;

static void
s_churn_signal (int signum)
{
    s_churning = signum == SIGUSR1;
}

//  One churn cycle: count members from first on (wrapping) leave together,
//  then rejoin together as new providers of the same ids and tools, each
//  on a thread of its own as at the start. Writes how long the leaving
//  took; returns 0, or -1 if a member could not rejoin.
static int
s_churn_cycle (s_member_t *members, pthread_t *threads, size_t total, size_t first, size_t count,
               int64_t *left_usecs)
{
    int64_t started = zclock_usecs ();
    for (size_t index = 0; index < count; index++)
        pthread_create (&threads [index], NULL, s_member_stop, &members [(first + index) % total]);
    for (size_t index = 0; index < count; index++)
        pthread_join (threads [index], NULL);
    *left_usecs = zclock_usecs () - started;
    for (size_t index = 0; index < count; index++) {
        members [(first + index) % total].rc = 0;
        pthread_create (&threads [index], NULL, s_member_start, &members [(first + index) % total]);
    }
    int rc = 0;
    for (size_t index = 0; index < count; index++) {
        pthread_join (threads [index], NULL);
        if (members [(first + index) % total].rc)
            rc = -1;
    }
    return rc;
}

//  Serves until SIGINT or SIGTERM, churning percent % of the components
//  every every_s seconds while s_churning says so.
static void
s_serve (s_member_t *members, pthread_t *threads, size_t total, long percent, long every_s)
{
    size_t count = (size_t) ((long) total * percent + 99) / 100;
    size_t next = 0, cycles = 0;
    int64_t cycle_due = 0;
    bool churned = false;
    while (!zsys_interrupted) {
        if (s_churning && count) {
            int64_t now = zclock_mono ();
            if (!churned)
                cycle_due = now;
            churned = true;
            if (now >= cycle_due) {
                int64_t started = zclock_usecs (), left_usecs = 0;
                int rc = s_churn_cycle (members, threads, total, next, count, &left_usecs);
                next = (next + count) % total;
                cycles++;
                printf ("churn: cycle %zu: %zu components left in %.1f ms and rejoined in %.1f ms%s\n", cycles,
                        count, (double) left_usecs / 1000.0,
                        (double) (zclock_usecs () - started - left_usecs) / 1000.0, rc? " (with failures)": "");
                fflush (stdout);
                cycle_due += every_s * 1000;
            }
        }
        else
        if (churned) {
            printf ("churn: paused after %zu cycles\n", cycles);
            fflush (stdout);
            churned = false;
        }
        zclock_sleep (20);
    }
}

int
main (int argc, char *argv [])
{
    long percent = 0, every_s = 10;
    bool paused = false;
    static struct option options [] = {
        { "churn", required_argument, NULL, 'c' }, { "every", required_argument, NULL, 'e' },
        { "paused", no_argument, NULL, 'p' }, { NULL, 0, NULL, 0 }
    };
    int option;
    while ((option = getopt_long (argc, argv, "", options, NULL)) != -1)
        switch (option) {
            case 'c': percent = strtol (optarg, NULL, 10); break;
            case 'e': every_s = strtol (optarg, NULL, 10); break;
            case 'p': paused = true; break;
            default: percent = -1; break;
        }
    long components = argc - optind == 3? strtol (argv [optind + 1], NULL, 10): 0;
    long tools = argc - optind == 3? strtol (argv [optind + 2], NULL, 10): 0;
    if (components < 1 || components > 1000 || tools < 1 || tools > 1000 || percent < 0 || percent > 100
    ||  every_s < 1) {
        fprintf (stderr, "usage: dsh-bench-swarm ENDPOINT COMPONENTS(1-1000) TOOLS(1-1000) [--churn PCT]"
                         " [--every SECONDS] [--paused]\n");
        return 2;
    }
    const char *endpoint = argv [optind];
    //  Each component has three sockets to each broker and a few of its
    //  own (its actor's pipe, its workers'), each with a mailbox
    long brokers = 1;
    for (const char *comma = strchr (endpoint, ','); comma; comma = strchr (comma + 1, ','))
        brokers++;
    dsh_bench_fds_raise ("dsh-bench-swarm", components * (6 * brokers + 8) + 64);
    zsys_set_max_sockets ((size_t) (components * (3 * brokers + 8) + 64));
    zsys_init ();
    //  stdout is for the lines dsh-bench waits for, read only then: a log
    //  line there could fill the pipe and stall the components
    zsys_set_logstream (stderr);
    struct sigaction action = { .sa_handler = s_churn_signal };
    sigaction (SIGUSR1, &action, NULL);
    sigaction (SIGUSR2, &action, NULL);
    s_churning = !paused;
    int64_t started = zclock_usecs ();
    s_member_t *members = (s_member_t *) calloc ((size_t) components, sizeof (s_member_t));
    pthread_t *threads = (pthread_t *) calloc ((size_t) components, sizeof (pthread_t));
    assert (members && threads);
    for (long index = 0; index < components; index++) {
        members [index] = (s_member_t) { endpoint, (size_t) index, (size_t) tools, NULL, 0 };
        pthread_create (&threads [index], NULL, s_member_start, &members [index]);
    }
    int rc = 0;
    for (long index = 0; index < components; index++) {
        pthread_join (threads [index], NULL);
        if (members [index].rc)
            rc = 1;
    }
    printf ("swarm: %ld components, %ld tools added in %.1f ms%s\n", components, components * tools,
            (double) (zclock_usecs () - started) / 1000.0, rc? " (with failures)": "");
    fflush (stdout);
    s_serve (members, threads, (size_t) components, percent, every_s);
    for (long index = 0; index < components; index++)
        dsh_provider_destroy (&members [index].provider);
    free (members);
    free (threads);
    return rc;
}
