/*  =========================================================================
    dsh_cli_pins - dsh pins and dsh grants: what each broker keeps
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_pins.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

#include <stdlib.h>
#include <string.h>

#define PINS_TIMEOUT_MS     10000       //  pins: accept and forget write the store

//  --- pins -------------------------------------------------------------------

//  One PINS request at the broker at endpoint: the reply body (without the
//  id), or NULL with the reason in error and *exit_code set.
static json_t *
s_pins_at (dsh_cli_options_t *options, const char *endpoint, json_t *request, int *exit_code,
           char *error, size_t error_size)
{
    dsh_client_t *client = dsh_cli_client_at (endpoint, exit_code, error, error_size);
    if (!client)
        return NULL;
    int timeout_ms = options->timeout_ms? options->timeout_ms: PINS_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_query (client, DSH_PINS, request, timeout_ms, error, error_size);
    dsh_client_destroy (&client);
    if (!reply) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (!streq (dsh_reply_command (reply), DSH_PINS)) {
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: "the broker refused the request");
        const char *code = dsh_reply_error_code (reply);
        *exit_code = code && streq (code, DSH_E_BROKER_GONE)? EXIT_NO_BROKER: EXIT_TOOL_ERROR;
    }
    else
        body = dsh_cli_reply_body (reply, exit_code, error, error_size);
    dsh_reply_destroy (&reply);
    return body;
}

//  The pins and quarantined tools as a table.
static void
s_pins_table (json_t *body)
{
    json_t *pins = json_object_get (body, "pins");
    const char *policy = dsh_cli_string (body, "policy", "?");
    if (json_array_size (pins) == 0) {
        printf ("pins policy %s: no pins%s\n", policy, streq (policy, "off")? " (pinning is off)": " yet");
        return;
    }
    int width = dsh_cli_column_width (pins, "name", "NAME");
    printf ("pins policy %s\n%-*s %-11s %-12s %-12s %-16s %s\n", policy, width, "NAME", "STATE", "PINNED",
            "OFFERED", "COMPONENT", "REASON");
    size_t quarantined = 0;
    for (size_t index = 0; index < json_array_size (pins); index++) {
        json_t *pin = json_array_get (pins, index);
        char pinned [16], offered [16];
        dsh_cli_digest_short (pin, "digest", pinned, sizeof (pinned));
        dsh_cli_digest_short (pin, "offeredDigest", offered, sizeof (offered));
        const char *state = dsh_cli_string (pin, "state", "?");
        if (streq (state, "quarantined"))
            quarantined++;
        //  Names, ids and reasons come from components: shown so they cannot drive the terminal
        char *name = dsh_cli_terminal_text (dsh_cli_string (pin, "name", "?"), false);
        char *component = dsh_cli_terminal_text (dsh_cli_string (pin, "component", "-"), false);
        const char *reason = dsh_cli_string (pin, "reason", "");
        if (!*reason && !json_is_true (json_object_get (pin, "registered")))
            reason = "not registered now";
        char *safe_reason = dsh_cli_terminal_text (reason, false);
        char *row = zsys_sprintf ("%-*.*s %-11s %-12s %-12s %-16.16s %s", width, width, name, state, pinned, offered,
                                  component, safe_reason);
        size_t size = strlen (row);
        while (size && row [size - 1] == ' ')
            row [--size] = 0;
        printf ("%s\n", row);
        zstr_free (&row);
        free (name);
        free (component);
        free (safe_reason);
    }
    if (quarantined)
        printf ("%zu quarantined: review one with `dsh pins show NAME`, release it with `dsh pins accept NAME`\n",
                quarantined);
}

//  A JSON value, pretty-printed and indented, as the terminal may show it.
static void
s_pins_block (const char *title, json_t *value)
{
    char *pretty = json_dumps (value, JSON_INDENT (2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    char *safe = dsh_cli_terminal_text (pretty? pretty: "null", true);
    printf ("%s\n", title);
    for (char *line = safe, *next; line; line = next) {
        next = strchr (line, '\n');
        if (next)
            *next++ = 0;
        printf ("  %s\n", line);
    }
    free (safe);
    free (pretty);
}

//  One pin, what changed, and how to release it.
static void
s_pins_show (json_t *body)
{
    json_t *pin = json_object_get (body, "pin");
    char *name = dsh_cli_terminal_text (dsh_cli_string (pin, "name", "?"), false);
    const char *state = dsh_cli_string (pin, "state", "?");
    bool quarantined = streq (state, "quarantined");
    const char *reason = dsh_cli_string (pin, "reason", NULL);
    char *safe_reason = reason? dsh_cli_terminal_text (reason, false): NULL;
    printf ("%s: %s%s%s\n", name, state, safe_reason? ": ": "", safe_reason? safe_reason: "");
    free (safe_reason);
    dsh_cli_terminal_field ("pinned", dsh_cli_string (pin, "digest", "- (nothing accepted yet)"));
    if (json_is_string (json_object_get (pin, "offeredDigest")))
        dsh_cli_terminal_field ("offered", dsh_cli_string (pin, "offeredDigest", ""));
    if (json_is_string (json_object_get (pin, "component")))
        dsh_cli_terminal_field ("component", dsh_cli_string (pin, "component", ""));
    if (json_is_string (json_object_get (pin, "key")))
        dsh_cli_terminal_field ("key", dsh_cli_string (pin, "key", ""));
    char when [32];
    if (json_is_integer (json_object_get (pin, "firstMs"))) {
        dsh_cli_local_time ((int64_t) json_integer_value (json_object_get (pin, "firstMs")), "%Y-%m-%d %H:%M:%S", when,
                            sizeof (when));
        dsh_cli_terminal_field ("first seen", when);
    }
    if (json_is_string (json_object_get (pin, "acceptedBy")) || json_is_integer (json_object_get (pin, "acceptedMs"))) {
        dsh_cli_local_time ((int64_t) json_integer_value (json_object_get (pin, "acceptedMs")), "%Y-%m-%d %H:%M:%S",
                            when, sizeof (when));
        char *accepted = zsys_sprintf ("by %s at %s", dsh_cli_string (pin, "acceptedBy", "?"), when);
        dsh_cli_terminal_field ("accepted", accepted);
        zstr_free (&accepted);
    }
    dsh_cli_terminal_field ("registered", json_is_true (json_object_get (pin, "registered"))? "yes": "no");
    const char *diff = dsh_cli_string (pin, "diff", NULL);
    if (diff) {
        char *safe = dsh_cli_terminal_text (diff, true);
        printf ("changes, pinned -> offered\n");
        for (char *line = safe, *next; line && *line; line = next) {
            next = strchr (line, '\n');
            if (next)
                *next++ = 0;
            printf ("  %s\n", line);
        }
        free (safe);
    }
    if (json_object_get (pin, "offered"))
        s_pins_block ("offered definition", json_object_get (pin, "offered"));
    if (json_object_get (pin, "definition"))
        s_pins_block ("pinned definition", json_object_get (pin, "definition"));
    if (quarantined && json_is_string (json_object_get (pin, "offeredDigest"))) {
        char *digest = dsh_cli_terminal_text (dsh_cli_string (pin, "offeredDigest", ""), false);
        printf ("release it: dsh pins accept %s --digest %s\n", name, digest);
        free (digest);
    }
    free (name);
}

//  list and show: from the first broker of the list that answers.
static int
s_pins_read (dsh_cli_options_t *options, zlistx_t *brokers, json_t *request)
{
    const char *op = dsh_cli_string (request, "op", "list");
    int exit_code = EXIT_NO_BROKER;
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        json_t *body = s_pins_at (options, broker, request, &exit_code, error, sizeof (error));
        if (!body && zlistx_size (brokers) > 1)
            fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
        else
        if (!body)
            fprintf (stderr, "dsh: %s\n", error);
        if (!body && exit_code == EXIT_NO_BROKER)
            continue;               //  silent: ask the next
        if (!body)
            return exit_code;       //  an answer: no
        if (streq (op, "show") && !json_is_object (json_object_get (body, "pin"))) {
            char *name = dsh_cli_terminal_text (dsh_cli_string (request, "name", ""), false);
            fprintf (stderr, "dsh: no pin and no quarantined tool named \"%s\"\n", name);
            free (name);
            json_decref (body);
            return EXIT_TOOL_ERROR;
        }
        if (options->json)
            dsh_cli_print (body, JSON_DOCUMENT);
        else
        if (streq (op, "show"))
            s_pins_show (body);
        else
            s_pins_table (body);
        fflush (stdout);
        json_decref (body);
        return 0;
    }
    return exit_code;
}

//  What a change did, in a line.
static void
s_pins_changed (const char *op, const char *name, json_t *body, const char *broker)
{
    json_t *pin = json_object_get (body, "pin");
    char digest [16];
    dsh_cli_digest_short (pin, "digest", digest, sizeof (digest));
    char *safe = dsh_cli_terminal_text (name, false);
    char *where = broker? zsys_sprintf (" at %s", broker): strdup ("");
    if (streq (op, "accept"))
        printf ("accepted %s%s: pinned %s and released\n", safe, where, digest);
    else
    if (streq (op, "reject"))
        printf ("rejected %s%s: it stays quarantined\n", safe, where);
    else
    if (pin && !streq (digest, "-"))
        printf ("forgot the pin of %s%s, and pinned its current definition anew: %s\n", safe, where, digest);
    else
        printf ("forgot the pin of %s%s\n", safe, where);
    free (safe);
    zstr_free (&where);
}

//  accept, reject and forget: every broker of the list keeps its own
//  quarantine, so each is told, and each answer shown (as dsh mode does).
static int
s_pins_change (dsh_cli_options_t *options, zlistx_t *brokers, json_t *request)
{
    const char *op = dsh_cli_string (request, "op", "");
    const char *name = dsh_cli_string (request, "name", "");
    bool several = zlistx_size (brokers) > 1;
    int exit_code = 0;
    json_t *answers = json_array ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        int broker_exit = 0;
        json_t *body = s_pins_at (options, broker, request, &broker_exit, error, sizeof (error));
        json_t *answer = json_pack ("{s:s, s:b}", "broker", broker, "ok", body != NULL);
        if (body) {
            json_object_set (answer, "data", body);
            if (!options->json)
                s_pins_changed (op, name, body, several? broker: NULL);
        }
        else {
            char *safe = dsh_cli_terminal_text (name, false);
            if (several)
                fprintf (stderr, "dsh: broker %s did not %s %s: %s\n", broker, op, safe, error);
            else
                fprintf (stderr, "dsh: %s\n", error);
            free (safe);
            json_object_set_new (answer, "error", json_string (error));
            if (!exit_code)
                exit_code = broker_exit;
        }
        json_array_append_new (answers, answer);
        json_decref (body);
    }
    if (options->json && several)
        dsh_cli_print (answers, JSON_DOCUMENT);
    else
    if (options->json && json_is_true (json_object_get (json_array_get (answers, 0), "ok")))
        dsh_cli_print (json_object_get (json_array_get (answers, 0), "data"), JSON_DOCUMENT);
    fflush (stdout);
    json_decref (answers);
    return exit_code;
}

int
dsh_cli_pins (dsh_cli_options_t *options)
{
    const dsh_cli_command_t *command = dsh_cli_command_named ("pins");
    const char *op = options->nargs? options->args [0]: "list";
    bool named = streq (op, "show") || streq (op, "accept") || streq (op, "reject") || streq (op, "forget");
    if (!named && !streq (op, "list"))
        return dsh_cli_usage_error (command, "pins takes list, show, accept, reject or forget, not \"%s\"", op);
    if (named && options->nargs < 2)
        return dsh_cli_usage_error (command, "pins %s: missing NAME", op);
    if (!named && options->nargs > 1)
        return dsh_cli_usage_error (command, "pins list takes no NAME, not \"%s\"", options->args [1]);
    if (options->digest && !streq (op, "accept"))
        return dsh_cli_usage_error (command, "--digest goes with pins accept, not pins %s", op);
    json_t *request = json_pack ("{s:s}", "op", op);
    if (named)
        json_object_set_new (request, "name", json_string (options->args [1]));
    if (options->digest)
        json_object_set_new (request, "digest", json_string (options->digest));
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    int exit_code = streq (op, "list") || streq (op, "show")? s_pins_read (options, brokers, request)
                                                            : s_pins_change (options, brokers, request);
    zlistx_destroy (&brokers);
    json_decref (request);
    return exit_code;
}

//  --- grants -----------------------------------------------------------------

//  The names of the permission stages in the chain of the broker at
//  endpoint (caller destroys), or NULL with the reason in error and
//  *exit_code set.
static zlistx_t *
s_permission_stages (dsh_cli_options_t *options, const char *endpoint, int *exit_code, char *error, size_t error_size)
{
    dsh_client_t *client = dsh_cli_client_at (endpoint, exit_code, error, error_size);
    if (!client)
        return NULL;
    int timeout_ms = options->timeout_ms? options->timeout_ms: QUERY_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_request (client, DSH_CHAIN, NULL, timeout_ms, error, error_size);
    dsh_client_destroy (&client);
    if (!reply) {
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = streq (dsh_reply_command (reply), DSH_CHAIN)? dsh_reply_json (reply): NULL;
    json_t *stages = json_object_get (body, "stages");
    zlistx_t *names = NULL;
    if (json_is_array (stages)) {
        names = zlistx_new ();
        zlistx_set_destructor (names, (czmq_destructor *) zstr_free);
        size_t index;
        json_t *stage;
        json_array_foreach (stages, index, stage)
            if (streq (dsh_cli_string (stage, "kind", ""), "permission")
            &&  json_is_string (json_object_get (stage, "name")))
                zlistx_add_end (names, strdup (dsh_cli_string (stage, "name", "")));
    }
    else {
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: "the CHAIN reply has no stages");
        *exit_code = EXIT_TOOL_ERROR;
    }
    json_decref (body);
    dsh_reply_destroy (&reply);
    return names;
}

static int
s_grants_order (const void *left, const void *right)
{
    json_int_t a = json_integer_value (json_object_get (*(json_t **) left, "expiresMs"));
    json_int_t b = json_integer_value (json_object_get (*(json_t **) right, "expiresMs"));
    return a < b? -1: a > b;
}

//  The grants as a table, soonest to expire first.
static void
s_grants_table (json_t *grants)
{
    if (json_array_size (grants) == 0) {
        printf ("no grants\n");
        return;
    }
    int agent_width = dsh_cli_column_width (grants, "agent", "AGENT");
    agent_width = agent_width < (int) strlen ("(none)")? (int) strlen ("(none)"): agent_width;
    int tool_width = dsh_cli_column_width (grants, "tool", "TOOL");
    printf ("%-8s  %-*s %-*s %-9s %-12s %-22s %s\n", "ID", agent_width, "AGENT", tool_width, "TOOL", "SCOPE",
            "ARGUMENTS", "EXPIRES", "BY");
    int64_t now = zclock_time ();
    for (size_t index = 0; index < json_array_size (grants); index++) {
        json_t *grant = json_array_get (grants, index);
        int64_t expires = (int64_t) json_integer_value (json_object_get (grant, "expiresMs"));
        char clock [16], expiry [64], arguments [16];
        dsh_cli_local_time (expires, "%H:%M:%S", clock, sizeof (clock));
        int64_t left_ms = expires - now;
        if (left_ms <= 0)
            snprintf (expiry, sizeof (expiry), "%s (expired)", clock);
        else
        if (left_ms < 60000)
            snprintf (expiry, sizeof (expiry), "%s (in %ld s)", clock, (long) ((left_ms + 999) / 1000));
        else
            snprintf (expiry, sizeof (expiry), "%s (in %ld min)", clock, (long) ((left_ms + 59999) / 60000));
        dsh_cli_digest_short (grant, "argumentsDigest", arguments, sizeof (arguments));
        const char *agent = dsh_cli_string (grant, "agent", "");
        char *id = dsh_cli_terminal_text (dsh_cli_string (grant, "id", "?"), false);
        char *safe_agent = dsh_cli_terminal_text (*agent? agent: "(none)", false);
        char *tool = dsh_cli_terminal_text (dsh_cli_string (grant, "tool", "?"), false);
        char *by = dsh_cli_terminal_text (dsh_cli_string (grant, "by", "-"), false);
        printf ("%-8s  %-*.*s %-*.*s %-9s %-12s %-22s %s\n", id, agent_width, agent_width, safe_agent, tool_width,
                tool_width, tool, dsh_cli_string (grant, "scope", "?"), arguments, expiry, by);
        free (id);
        free (safe_agent);
        free (tool);
        free (by);
    }
}

//  Every live grant of every permission stage of every broker, merged by
//  id (brokers that share a store hold the same grants). What could be had
//  is printed; a broker or stage that did not answer is named on stderr
//  and sets the exit code.
static int
s_grants_list (dsh_cli_options_t *options, zlistx_t *brokers)
{
    int exit_code = 0;
    size_t stage_count = 0;
    json_t *by_id = json_object ();
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        int broker_exit = 0;
        zlistx_t *stages = s_permission_stages (options, broker, &broker_exit, error, sizeof (error));
        if (!stages) {
            fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
            exit_code = exit_code? exit_code: broker_exit;
            continue;
        }
        for (const char *stage = zlistx_first (stages); stage; stage = zlistx_next (stages)) {
            stage_count++;
            json_t *body = dsh_cli_control_at (options, broker, stage, "grants", NULL, &broker_exit, error,
                                               sizeof (error));
            if (!body) {
                fprintf (stderr, "dsh: broker %s, stage %s: %s\n", broker, stage, error);
                exit_code = exit_code? exit_code: broker_exit;
                continue;
            }
            size_t index;
            json_t *grant;
            json_array_foreach (json_object_get (body, "data"), index, grant) {
                const char *id = dsh_cli_string (grant, "id", NULL);
                if (id && !json_object_get (by_id, id)) {
                    json_t *copy = json_deep_copy (grant);
                    if (!json_object_get (copy, "stage"))
                        json_object_set_new (copy, "stage", json_string (stage));
                    json_object_set_new (by_id, id, copy);
                }
            }
            json_decref (body);
        }
        zlistx_destroy (&stages);
    }
    size_t count = json_object_size (by_id);
    json_t **sorted = (json_t **) calloc (count? count: 1, sizeof (json_t *));
    assert (sorted);
    size_t filled = 0;
    const char *id;
    json_t *grant;
    json_object_foreach (by_id, id, grant)
        sorted [filled++] = grant;
    qsort (sorted, count, sizeof (json_t *), s_grants_order);
    json_t *grants = json_array ();
    for (size_t index = 0; index < count; index++)
        json_array_append (grants, sorted [index]);
    free (sorted);
    if (options->json)
        dsh_cli_print (grants, JSON_DOCUMENT);
    else
    if (!stage_count && !exit_code)
        printf ("no grants: no permission stage in the chain\n");
    else
        s_grants_table (grants);
    fflush (stdout);
    json_decref (grants);
    json_decref (by_id);
    return exit_code;
}

//  Revokes grant id in every permission stage of every broker: those that
//  hold it end it, the others say they have none. Exit 0 if one ended it
//  and every one answered; 1 if none held it; 3 if one did not answer.
static int
s_grants_revoke (dsh_cli_options_t *options, zlistx_t *brokers, const char *id)
{
    int exit_code = 0;
    size_t revoked = 0;
    json_t *answers = json_array ();
    json_t *args = json_pack ("{s:s}", "id", id);
    char *safe_id = dsh_cli_terminal_text (id, false);
    char *missing = zsys_sprintf ("no grant %s", id);
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        char error [512];
        int broker_exit = 0;
        zlistx_t *stages = s_permission_stages (options, broker, &broker_exit, error, sizeof (error));
        if (!stages) {
            fprintf (stderr, "dsh: broker %s: %s\n", broker, error);
            json_array_append_new (answers, json_pack ("{s:s, s:b, s:s}", "broker", broker, "revoked", 0,
                                                       "error", error));
            exit_code = exit_code? exit_code: broker_exit;
            continue;
        }
        for (const char *stage = zlistx_first (stages); stage; stage = zlistx_next (stages)) {
            json_t *body = dsh_cli_control_at (options, broker, stage, "revoke", args, &broker_exit, error,
                                               sizeof (error));
            json_t *answer = json_pack ("{s:s, s:s, s:b}", "broker", broker, "stage", stage, "revoked", body != NULL);
            if (body)
                revoked++;
            else {
                json_object_set_new (answer, "error", json_string (error));
                //  A stage without it is an answer, not a failure
                if (!strstr (error, missing)) {
                    fprintf (stderr, "dsh: broker %s, stage %s did not revoke grant %s: %s\n", broker, stage,
                             safe_id, error);
                    exit_code = exit_code? exit_code: broker_exit;
                }
            }
            json_array_append_new (answers, answer);
            json_decref (body);
        }
        zlistx_destroy (&stages);
    }
    if (!revoked && !exit_code) {
        fprintf (stderr, "dsh: %s\n", json_array_size (answers)? missing: "no permission stage in the chain");
        exit_code = EXIT_TOOL_ERROR;
    }
    if (options->json)
        dsh_cli_print (answers, JSON_DOCUMENT);
    else
    if (revoked)
        printf ("revoked grant %s\n", safe_id);
    fflush (stdout);
    json_decref (answers);
    json_decref (args);
    zstr_free (&missing);
    free (safe_id);
    return exit_code;
}

int
dsh_cli_grants (dsh_cli_options_t *options)
{
    const dsh_cli_command_t *command = dsh_cli_command_named ("grants");
    const char *op = options->nargs? options->args [0]: "list";
    if (!streq (op, "list") && !streq (op, "revoke"))
        return dsh_cli_usage_error (command, "grants takes list or revoke, not \"%s\"", op);
    if (streq (op, "revoke") && options->nargs < 2)
        return dsh_cli_usage_error (command, "grants revoke: missing %s", "ID");
    if (streq (op, "list") && options->nargs > 1)
        return dsh_cli_usage_error (command, "grants list takes no ID, not \"%s\"", options->args [1]);
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    int exit_code = streq (op, "list")? s_grants_list (options, brokers)
                                      : s_grants_revoke (options, brokers, options->args [1]);
    zlistx_destroy (&brokers);
    return exit_code;
}
