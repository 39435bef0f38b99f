/*  =========================================================================
    dsh_cli_chain - steering the execution chain's stages: mode, approve,
    deny, pending
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_chain.h"
#include "dsh_sock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

//  A mode is state in each broker's stage, and a client may be served by
//  any broker of the list: so it is set in every one, and each answer is
//  shown. With one broker the answer's data is printed as it is; with
//  several, an array of {broker, ok, data | error}, one per broker in list
//  order, and the exit code says whether every broker took it.
int
dsh_cli_mode (dsh_cli_options_t *options)
{
    const char *mode = options->args [1];
    if (!streq (mode, "plan") && !streq (mode, "normal"))
        return dsh_cli_usage_error (dsh_cli_command_named ("mode"), "the mode is plan or normal, not \"%s\"", mode);
    const char *stage = options->stage? options->stage: "plan";
    json_t *args = json_pack ("{s:s, s:s}", "agent", options->args [0], "mode", mode);
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    if (zlistx_size (brokers) == 1) {
        zlistx_destroy (&brokers);
        return dsh_cli_control_print (options, stage, "mode", args);
    }
    int exit_code = 0;
    json_t *answers = json_array ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        int broker_exit = 0;
        json_t *body = dsh_cli_control_at (options, broker, stage, "mode", args, &broker_exit, error, sizeof (error));
        json_t *answer = json_pack ("{s:s, s:b}", "broker", broker, "ok", body != NULL);
        if (body) {
            json_t *data = json_object_get (body, "data");
            json_object_set (answer, "data", data? data: body);
        }
        else {
            fprintf (stderr, "dsh: broker %s did not take mode %s for agent %s: %s\n", broker, mode,
                     options->args [0], error);
            json_object_set_new (answer, "error", json_string (error));
            if (!exit_code)
                exit_code = broker_exit;
        }
        json_array_append_new (answers, answer);
        json_decref (body);
    }
    dsh_cli_print (answers, JSON_DOCUMENT);
    json_decref (answers);
    json_decref (args);
    zlistx_destroy (&brokers);
    return exit_code;
}

//  A grant's length as typed: minutes (15), or 30s, 15m, 2h. Returns 0
//  with *seconds set, or -1.
int
dsh_cli_grant_seconds (const char *text, int64_t *seconds)
{
    char *end = NULL;
    errno = 0;
    long long number = strtoll (text, &end, 10);
    if (errno || end == text || number <= 0 || number > 1000000)
        return -1;
    int64_t unit = !*end || streq (end, "m")? 60: streq (end, "s")? 1: streq (end, "h")? 3600: 0;
    if (!unit)
        return -1;
    *seconds = (int64_t) number * unit;
    return 0;
}

//  Puts a grant's length into a decision: whole minutes as minutes, what
//  the stage takes by default, anything shorter as seconds.
void
dsh_cli_grant_length_set (json_t *decision, int64_t seconds)
{
    if (seconds % 60 == 0)
        json_object_set_new (decision, "minutes", json_integer (seconds / 60));
    else
        json_object_set_new (decision, "seconds", json_integer (seconds));
}

int
dsh_cli_approve (dsh_cli_options_t *options)
{
    json_t *args = json_pack ("{s:s}", "id", options->args [0]);
    if (options->grant_for || options->grant_args) {
        int64_t seconds = 0;
        if (options->grant_for && dsh_cli_grant_seconds (options->grant_for, &seconds)) {
            json_decref (args);
            return dsh_cli_usage_error (dsh_cli_command_named ("approve"),
                                        "--for takes minutes (15) or a length (30s, 15m, 2h), not \"%s\"",
                                        options->grant_for);
        }
        json_object_set_new (args, "scope", json_string (options->grant_args? "arguments": "tool"));
        if (seconds)
            dsh_cli_grant_length_set (args, seconds);
    }
    return dsh_cli_control_print (options, options->stage? options->stage: "permission", "approve", args);
}

int
dsh_cli_deny (dsh_cli_options_t *options)
{
    return dsh_cli_control_print (options, options->stage? options->stage: "permission", "deny",
                                  json_pack ("{s:s}", "id", options->args [0]));
}

int
dsh_cli_pending (dsh_cli_options_t *options)
{
    return dsh_cli_control_print (options, options->stage? options->stage: "permission", "pending", NULL);
}
