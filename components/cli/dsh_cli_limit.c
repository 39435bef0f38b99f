/*  =========================================================================
    dsh_cli_limit - dsh limit: the quotas of a limit stage, read and changed
    at run time

    Limits are each broker's own (PROTOCOL.md, Built-in stages), so a change
    goes to every broker of the list, as `dsh mode` does: with one broker
    the stage's answer is printed as it is, with several an array of
    {broker, ok, data | error}, and the exit code says whether every broker
    took it. `list` asks each broker too, since each counts for itself.
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_limit.h"
#include "dsh_sock.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

//  A flag's number: a finite value from min up; true if text is one.
static bool
s_number (const char *text, double min, double *value)
{
    char *end = NULL;
    errno = 0;
    double number = strtod (text, &end);
    if (errno || end == text || *end || !isfinite (number) || number < min)
        return false;
    *value = number;
    return true;
}

//  The set command's args from the positional AGENT TOOL and the flags;
//  NULL after printing why.
static json_t *
s_set_args (dsh_cli_options_t *options, const char *agent, const char *tool, int *exit_code)
{
    const dsh_cli_command_t *command = dsh_cli_command_named ("limit");
    if (!options->rate && !options->in_flight) {
        *exit_code = dsh_cli_usage_error (command, "limit set needs %s", "--rate or --in-flight");
        return NULL;
    }
    json_t *args = json_pack ("{s:s, s:s}", "agent", agent, "tool", tool);
    double number;
    const char *bad = NULL;
    if (options->rate) {
        if (s_number (options->rate, 0, &number) && number > 0)
            json_object_set_new (args, "rate", json_real (number));
        else
            bad = "--rate needs a number of calls per second above 0, not \"%s\"";
    }
    if (!bad && options->burst) {
        if (s_number (options->burst, 1, &number))
            json_object_set_new (args, "burst", json_real (number));
        else
            bad = "--burst needs a number from 1 up, not \"%s\"";
    }
    if (!bad && options->in_flight) {
        if (s_number (options->in_flight, 1, &number) && number <= 1000000 && number == (double) (json_int_t) number)
            json_object_set_new (args, "inFlight", json_integer ((json_int_t) number));
        else
            bad = "--in-flight needs a whole number from 1 to 1000000, not \"%s\"";
    }
    if (bad) {
        const char *value = strstr (bad, "--rate")? options->rate
                          : strstr (bad, "--burst")? options->burst: options->in_flight;
        *exit_code = dsh_cli_usage_error (command, bad, value);
        json_decref (args);
        return NULL;
    }
    return args;
}

//  Sends command with args (borrowed) to stage on every broker of the list.
static int
s_every_broker (dsh_cli_options_t *options, const char *stage, const char *command, json_t *args)
{
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    if (zlistx_size (brokers) == 1) {
        zlistx_destroy (&brokers);
        return dsh_cli_control_print (options, stage, command, args? json_incref (args): NULL);
    }
    int exit_code = 0;
    json_t *answers = json_array ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        int broker_exit = 0;
        json_t *body = dsh_cli_control_at (options, broker, stage, command, args, &broker_exit, error,
                                           sizeof (error));
        json_t *answer = json_pack ("{s:s, s:b}", "broker", broker, "ok", body != NULL);
        if (body) {
            json_t *data = json_object_get (body, "data");
            json_object_set (answer, "data", data? data: body);
        }
        else {
            fprintf (stderr, "dsh: broker %s did not take limit %s: %s\n", broker, command, error);
            json_object_set_new (answer, "error", json_string (error));
            if (!exit_code)
                exit_code = broker_exit;
        }
        json_array_append_new (answers, answer);
        json_decref (body);
    }
    dsh_cli_print (answers, JSON_DOCUMENT);
    json_decref (answers);
    zlistx_destroy (&brokers);
    return exit_code;
}

int
dsh_cli_limit (dsh_cli_options_t *options)
{
    const dsh_cli_command_t *command = dsh_cli_command_named ("limit");
    //  The first argument is the stage unless it is an operation
    int first = 0;
    const char *stage = "limit";
    if (options->nargs && !streq (options->args [0], "list") && !streq (options->args [0], "set")
    &&  !streq (options->args [0], "reset")) {
        stage = options->args [0];
        first = 1;
    }
    const char *op = options->nargs > first? options->args [first]: "list";
    int operands = options->nargs - first - 1;
    if (operands < 0)
        operands = 0;
    const char *const *operand = options->args + first + 1;
    if ((options->rate || options->burst || options->in_flight) && !streq (op, "set"))
        return dsh_cli_usage_error (command, "--rate, --burst and --in-flight are for %s", "limit set");
    if (streq (op, "list")) {
        if (operands)
            return dsh_cli_usage_error (command, "limit list takes nothing more, not \"%s\"", operand [0]);
        return s_every_broker (options, stage, "limits", NULL);
    }
    if (streq (op, "reset")) {
        if (operands > 1)
            return dsh_cli_usage_error (command, "limit reset takes one AGENT at most, not \"%s\"", operand [1]);
        json_t *args = operands? json_pack ("{s:s}", "agent", operand [0]): NULL;
        int exit_code = s_every_broker (options, stage, "reset", args);
        json_decref (args);
        return exit_code;
    }
    if (!streq (op, "set"))
        return dsh_cli_usage_error (command, "limit takes list, set or reset, not \"%s\"", op);
    if (operands != 2)
        return dsh_cli_usage_error (command, "limit set: missing %s", "AGENT TOOL");
    int exit_code = 0;
    json_t *args = s_set_args (options, operand [0], operand [1], &exit_code);
    if (!args)
        return exit_code;
    exit_code = s_every_broker (options, stage, "set", args);
    json_decref (args);
    return exit_code;
}
