/*  =========================================================================
    dsh_cli_request - asking a broker: one query, one control command
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_proto.h"

const char *
dsh_cli_endpoint (dsh_cli_options_t *options)
{
    if (options->broker)
        return options->broker;
    const char *broker = getenv ("DSH_BROKER");
    return broker && *broker? broker: DSH_DEFAULT_ENDPOINT;
}

dsh_client_t *
dsh_cli_client (dsh_cli_options_t *options)
{
    dsh_client_t *client = dsh_client_new (dsh_cli_endpoint (options));
    if (!client)
        fprintf (stderr, "dsh: cannot connect to broker at %s\n", dsh_cli_endpoint (options));
    return client;
}

//  Sends a query and waits for its reply (the expected command), printing
//  the reason and setting *exit_code if there is none or it is an error.
json_t *
dsh_cli_query (dsh_client_t *client, dsh_cli_options_t *options, const char *command, const char *name,
               const char *expected, int *exit_code)
{
    char error [512];
    int timeout_ms = options->timeout_ms? options->timeout_ms: QUERY_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_request (client, command, name, timeout_ms, error, sizeof (error));
    if (!reply) {
        fprintf (stderr, "dsh: %s\n", error);
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (streq (dsh_reply_command (reply), DSH_ERROR)) {
        const char *text = dsh_reply_text (reply);
        fprintf (stderr, "dsh: %s\n", text? text: "the broker refused the request");
        *exit_code = EXIT_TOOL_ERROR;
    }
    else
    if (!streq (dsh_reply_command (reply), expected)) {
        fprintf (stderr, "dsh: unexpected %s reply to %s\n", dsh_reply_command (reply), command);
        *exit_code = EXIT_TOOL_ERROR;
    }
    else {
        body = dsh_reply_json (reply);
        if (body)
            json_object_del (body, "id");      //  the client's own, not the broker's news
        else {
            fprintf (stderr, "dsh: the %s reply has no JSON form\n", expected);
            *exit_code = EXIT_TOOL_ERROR;
        }
    }
    dsh_reply_destroy (&reply);
    return body;
}

//  One query on a client of its own: the reply body, or NULL with the
//  reason on stderr and *exit_code set.
json_t *
dsh_cli_query_once (dsh_cli_options_t *options, const char *command, const char *expected, int *exit_code)
{
    dsh_client_t *client = dsh_cli_client (options);
    if (!client) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = dsh_cli_query (client, options, command, NULL, expected, exit_code);
    dsh_client_destroy (&client);
    return body;
}

//  A reply's body as JSON, without its id, or NULL with the reason in
//  error and *exit_code set.
json_t *
dsh_cli_reply_body (dsh_reply_t *reply, int *exit_code, char *error, size_t error_size)
{
    json_t *body = dsh_reply_json (reply);
    if (body)
        json_object_del (body, "id");
    else {
        snprintf (error, error_size, "the %s reply has no JSON form", dsh_reply_command (reply));
        *exit_code = EXIT_TOOL_ERROR;
    }
    return body;
}

//  A client of the broker at endpoint, for one request, or NULL with the
//  reason in error and *exit_code set.
dsh_client_t *
dsh_cli_client_at (const char *endpoint, int *exit_code, char *error, size_t error_size)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    if (!client) {
        snprintf (error, error_size, "cannot connect to broker at %s", endpoint);
        *exit_code = EXIT_NO_BROKER;
    }
    return client;
}

//  A control command through the broker at endpoint; the reply body, or
//  NULL with the reason in error and *exit_code set.
json_t *
dsh_cli_control_at (dsh_cli_options_t *options, const char *endpoint, const char *stage, const char *command,
                    json_t *args, int *exit_code, char *error, size_t error_size)
{
    dsh_client_t *client = dsh_cli_client_at (endpoint, exit_code, error, error_size);
    if (!client)
        return NULL;
    int timeout_ms = options->timeout_ms? options->timeout_ms: CONTROL_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_control (client, stage, command, args, timeout_ms, error, error_size);
    dsh_client_destroy (&client);
    if (!reply) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (dsh_reply_is_error (reply)) {
        //  {ok: false} from the stage, or an ERROR from a broker that
        //  cannot take CONTROL
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: "the stage refused the command");
        //  Lost with the broker, it may or may not have applied: no
        //  answer to rely on, as when no broker answers at all
        const char *code = dsh_reply_error_code (reply);
        *exit_code = code && streq (code, DSH_E_BROKER_GONE)? EXIT_NO_BROKER: EXIT_TOOL_ERROR;
    }
    else
    if (!streq (dsh_reply_command (reply), DSH_CONTROL)) {
        snprintf (error, error_size, "unexpected %s reply to CONTROL", dsh_reply_command (reply));
        *exit_code = EXIT_TOOL_ERROR;
    }
    else
        body = dsh_cli_reply_body (reply, exit_code, error, error_size);
    dsh_reply_destroy (&reply);
    return body;
}

//  Sends a control command to stage and returns its reply body (without
//  the id) as JSON. NULL, with the reason on stderr and *exit_code set, if
//  no reply came or the stage said {ok: false}.
json_t *
dsh_cli_control (dsh_cli_options_t *options, const char *stage, const char *command, json_t *args, int *exit_code)
{
    char error [512];
    json_t *body = dsh_cli_control_at (options, dsh_cli_endpoint (options), stage, command, args, exit_code,
                                       error, sizeof (error));
    if (!body)
        fprintf (stderr, "dsh: %s\n", error);
    return body;
}

//  Runs a control command and prints the reply's data (or, if it has none,
//  the reply itself). Takes args.
int
dsh_cli_control_print (dsh_cli_options_t *options, const char *stage, const char *command, json_t *args)
{
    int exit_code = 0;
    json_t *body = dsh_cli_control (options, stage, command, args, &exit_code);
    json_decref (args);
    if (body) {
        json_t *data = json_object_get (body, "data");
        dsh_cli_print (data? data: body, JSON_DOCUMENT);
    }
    json_decref (body);
    return exit_code;
}
