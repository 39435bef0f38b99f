/*  fuzz_config - the broker's ZPL config file and its chain section

    The input is a config file. dsh_config_load reads it from a file as
    dsh-broker -c does; when it loads, the endpoints are derived and its
    chain section is built with the built-in middleware kinds, which read
    their own settings (rules, hooks, agents, lists). Nothing here may
    reach the network: external stages become "pass" stages and every
    permission stage's approvals socket is an inproc one.
*/

#include "dsh.h"
#include "dsh_chain.h"
#include "dsh_config.h"
#include "dsh_middleware.h"

#include <unistd.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static char s_path [] = "/tmp/dsh-fuzz-config-XXXXXX";

static int
s_reply (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    (void) arg, (void) route, (void) route_size, (void) body;
    return 0;
}

static void
s_dispatch (void *arg, dsh_record_t *record, zframe_t **body_p)
{
    (void) arg, (void) record, (void) body_p;
}

static void
s_control_reply (void *arg, zmsg_t **envelope_p, zframe_t **body_p)
{
    (void) arg, (void) envelope_p, (void) body_p;
}

static void
s_cleanup (void)
{
    unlink (s_path);
}

//  Keeps the chain off the network (see the header).
static void
s_contain (zconfig_t *chain)
{
    int index = 0;
    for (zconfig_t *stage = zconfig_child (chain); stage; stage = zconfig_next (stage)) {
        const char *kind = zconfig_get (stage, "kind", "");
        if (streq (kind, "external") || zconfig_locate (stage, "feed") || zconfig_locate (stage, "drain"))
            zconfig_put (stage, "kind", "pass");
        if (streq (zconfig_get (stage, "kind", ""), "permission"))
            zconfig_putf (stage, "approvals", "inproc://fuzz-approvals-%d", index++);
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    static bool started = false;
    if (!started) {
        started = true;
        int fd = mkstemp (s_path);
        assert (fd >= 0);
        close (fd);
        atexit (s_cleanup);
        zsys_init ();
        zsys_set_linger (0);
    }
    FILE *file = fopen (s_path, "wb");
    assert (file);
    if (size)
        fwrite (data, 1, size, file);
    fclose (file);

    dsh_config_t *config = dsh_config_new ();
    char error [512];
    if (dsh_config_load (config, s_path, error, sizeof (error)) == 0) {
        dsh_config_derive (config);
        if (config->chain) {
            s_contain (config->chain);
            dsh_inflight_t *inflight = dsh_inflight_new (s_reply, NULL);
            dsh_chain_host_t host = { s_dispatch, s_control_reply, NULL, NULL };
            dsh_chain_t *chain = dsh_chain_new (config->chain, dsh_middleware_kinds, "inproc://fuzz-broker",
                                                inflight, &host, error, sizeof (error));
            dsh_chain_destroy (&chain);
            dsh_inflight_destroy (&inflight);
        }
    }
    dsh_config_destroy (&config);
    return 0;
}
