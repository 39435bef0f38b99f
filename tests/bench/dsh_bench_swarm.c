/*  =========================================================================
    dsh-bench-swarm - many components in one process, for dsh-bench's scale run

        dsh-bench-swarm ENDPOINT COMPONENTS TOOLS

    Starts COMPONENTS providers (ids swarm-000, swarm-001, ...), each a real
    component with its own sockets over tcp, each announcing TOOLS raw tools
    (sNNN_tMMM). One thread per component sets its provider up, so they
    join the broker together as a swarm would. Prints one line when every
    tool is added, then serves until SIGINT or SIGTERM.
    =========================================================================
*/

#include "dsh_provider.h"

#include <pthread.h>

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
    return NULL;
}

int
main (int argc, char *argv [])
{
    zsys_init ();
    long components = argc == 4? strtol (argv [2], NULL, 10): 0;
    long tools = argc == 4? strtol (argv [3], NULL, 10): 0;
    if (components < 1 || components > 1000 || tools < 1 || tools > 1000) {
        fprintf (stderr, "usage: dsh-bench-swarm ENDPOINT COMPONENTS(1-1000) TOOLS(1-1000)\n");
        return 2;
    }
    int64_t started = zclock_usecs ();
    s_member_t *members = (s_member_t *) calloc ((size_t) components, sizeof (s_member_t));
    pthread_t *threads = (pthread_t *) calloc ((size_t) components, sizeof (pthread_t));
    assert (members && threads);
    for (long index = 0; index < components; index++) {
        members [index] = (s_member_t) { argv [1], (size_t) index, (size_t) tools, NULL, 0 };
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
    while (!zsys_interrupted)
        zclock_sleep (100);
    for (long index = 0; index < components; index++)
        dsh_provider_destroy (&members [index].provider);
    free (members);
    free (threads);
    return rc;
}
