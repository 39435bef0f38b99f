/*  =========================================================================
    dsh_cli_setup - setting a deployment up: keygen, brokers
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_setup.h"
#include "dsh_beacon.h"
#include "dsh_curve.h"
#include "dsh_proto.h"

#include <stdlib.h>
#include <string.h>

int
dsh_cli_keygen (dsh_cli_options_t *options)
{
    const char *path = options->args [0];
    char error [512];
    if (dsh_curve_keygen (path, options->role, options->components, options->tools, options->agent, options->name,
                          error, sizeof (error))) {
        fprintf (stderr, "dsh: keygen: %s\n", error);
        return EXIT_USAGE;
    }
    zcert_t *cert = zcert_load (path);
    json_t *out = json_pack ("{s:s, s:s, s:s, s:s}", "public", path, "secret", "", "key",
                             cert? zcert_public_txt (cert): "", "role", options->role);
    char *secret = zsys_sprintf ("%s_secret", path);
    json_object_set_new (out, "secret", json_string (secret));
    if (options->components)
        json_object_set_new (out, "components", json_string (options->components));
    if (options->tools)
        json_object_set_new (out, "tools", json_string (options->tools));
    if (options->agent)
        json_object_set_new (out, "agent", json_string (options->agent));
    dsh_cli_print (out, JSON_DOCUMENT);
    json_decref (out);
    zstr_free (&secret);
    zcert_destroy (&cert);
    return 0;
}

static void
s_brokers_heard (const char *endpoint, const dsh_beacon_t *beacon, void *arg)
{
    json_array_append_new ((json_t *) arg, json_pack ("{s:s, s:b, s:I}", "endpoint", endpoint,
                                                      "curve", beacon->curve, "epoch", (json_int_t) beacon->epoch));
}

int
dsh_cli_brokers (dsh_cli_options_t *options)
{
    const char *where = options->args [0]? options->args [0]: "beacon";
    char *end = NULL;
    long port = streq (where, "beacon")? DSH_DEFAULT_BEACON_PORT:
                strncmp (where, "beacon:", 7) == 0? strtol (where + 7, &end, 10): 0;
    if ((end && (end == where + 7 || *end)) || port <= 0 || port > 65535)
        return dsh_cli_usage_error (dsh_cli_command_named ("brokers"),
                                    "want beacon or beacon:PORT (1 to 65535), not \"%s\"", where);
    int timeout_ms = options->timeout_ms? options->timeout_ms: DSH_BEACON_WAIT_MS;
    json_t *heard = json_array ();
    char error [256];
    int ignored = dsh_beacon_listen ((int) port, timeout_ms, s_brokers_heard, heard, error, sizeof (error));
    if (ignored < 0) {
        fprintf (stderr, "dsh: brokers: %s\n", error);
        json_decref (heard);
        return EXIT_USAGE;
    }
    if (ignored)
        fprintf (stderr, "dsh: brokers: %d datagram(s) on UDP port %ld were not broker beacons\n", ignored, port);
    int exit_code = json_array_size (heard)? 0: EXIT_NO_BROKER;
    if (exit_code)
        fprintf (stderr, "dsh: brokers: no broker beacon heard on UDP port %ld within %d ms\n", port, timeout_ms);
    dsh_cli_print (heard, JSON_DOCUMENT);
    json_decref (heard);
    return exit_code;
}
