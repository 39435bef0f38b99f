/*  =========================================================================
    dsh_cli_audit - dsh audit: the audit trail's records, and verify
    =========================================================================
*/

#include "dsh_cli.h"
#include "dsh_cli_audit.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define AUDIT_TIMEOUT_MS    30000       //  audit: the store is read per query
#define AUDIT_VERIFY_TIMEOUT_MS 600000  //  audit verify: the whole chain is read

//  A time as the audit takes it: ms since 1970, an ISO date or time (UTC),
//  or an age back from now (90s, 15m, 2h, 7d). Returns 0, or -1.
static int
s_audit_time (const char *text, int64_t *ms)
{
    char *end = NULL;
    errno = 0;
    long long number = strtoll (text, &end, 10);
    if (!errno && end != text && number >= 0) {
        int64_t unit = 0;
        if (!*end)
            unit = -1;
        else
        if (streq (end, "s"))
            unit = 1000;
        else
        if (streq (end, "m"))
            unit = 60 * 1000;
        else
        if (streq (end, "h"))
            unit = 3600 * 1000;
        else
        if (streq (end, "d"))
            unit = 86400 * 1000;
        if (unit == -1 && number > 100000000) {
            *ms = (int64_t) number;
            return 0;
        }
        if (unit > 0 && number < INT64_MAX / unit) {
            *ms = zclock_time () - (int64_t) number * unit;
            return 0;
        }
    }
    const char *formats [] = { "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S",
                               "%Y-%m-%dT%H:%MZ", "%Y-%m-%dT%H:%M", "%Y-%m-%d" };
    for (size_t index = 0; index < sizeof (formats) / sizeof (formats [0]); index++) {
        struct tm tm;
        memset (&tm, 0, sizeof (tm));
        const char *rest = strptime (text, formats [index], &tm);
        if (rest && !*rest) {
            *ms = (int64_t) timegm (&tm) * 1000;
            return 0;
        }
    }
    return -1;
}

//  One broker's records for the query, as an array of {broker, seq, hash,
//  prev, record}; NULL with the reason on stderr and *exit_code set.
static json_t *
s_audit_at (dsh_cli_options_t *options, const char *endpoint, json_t *query, int *exit_code)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    if (!client) {
        fprintf (stderr, "dsh: cannot connect to broker at %s\n", endpoint);
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    char error [512];
    //  The broker reads its store on a thread of its own and stays live
    //  meanwhile: a verify of a long chain takes seconds per 100 000 records
    bool verify = json_is_true (json_object_get (query, "verify"));
    int timeout_ms = options->timeout_ms? options->timeout_ms: verify? AUDIT_VERIFY_TIMEOUT_MS: AUDIT_TIMEOUT_MS;
    dsh_reply_t *reply = dsh_client_query (client, DSH_AUDIT, query, timeout_ms, error, sizeof (error));
    dsh_client_destroy (&client);
    if (!reply) {
        fprintf (stderr, "dsh: %s: %s\n", endpoint, error);
        *exit_code = EXIT_NO_BROKER;
        return NULL;
    }
    json_t *body = NULL;
    if (!streq (dsh_reply_command (reply), DSH_AUDIT)) {
        const char *text = dsh_reply_text (reply);
        fprintf (stderr, "dsh: %s: %s\n", endpoint, text? text: "the broker refused the audit query");
        *exit_code = EXIT_TOOL_ERROR;
    }
    else {
        body = dsh_reply_json (reply);
        if (body && !json_is_true (json_object_get (body, "ok"))) {
            const char *text = json_string_value (json_object_get (body, "message"));
            fprintf (stderr, "dsh: %s: %s\n", endpoint, text? text: "the audit query failed");
            json_decref (body);
            body = NULL;
            *exit_code = EXIT_TOOL_ERROR;
        }
    }
    dsh_reply_destroy (&reply);
    return body;
}

//  The record of a row, parsed, with where it sits in its chain.
static json_t *
s_audit_record (json_t *row)
{
    const char *text = json_string_value (json_object_get (row, "record"));
    json_t *record = text? json_loads (text, 0, NULL): NULL;
    if (!json_is_object (record)) {
        json_decref (record);
        return NULL;
    }
    json_object_set (record, "seq", json_object_get (row, "seq"));
    json_object_set (record, "hash", json_object_get (row, "hash"));
    return record;
}

static int
s_audit_order (const void *left, const void *right)
{
    json_t *a = *(json_t **) left;
    json_t *b = *(json_t **) right;
    json_int_t at = json_integer_value (json_object_get (a, "answeredMs"));
    json_int_t bt = json_integer_value (json_object_get (b, "answeredMs"));
    if (at != bt)
        return at < bt? -1: 1;
    int broker = strcmp (json_string_value (json_object_get (a, "broker"))? json_string_value (json_object_get (a, "broker")): "",
                         json_string_value (json_object_get (b, "broker"))? json_string_value (json_object_get (b, "broker")): "");
    if (broker)
        return broker;
    json_int_t as = json_integer_value (json_object_get (a, "seq"));
    json_int_t bs = json_integer_value (json_object_get (b, "seq"));
    return as < bs? -1: as > bs;
}

static void
s_audit_row_print (json_t *record, bool table)
{
    if (!table) {
        dsh_cli_print (record, JSON_LINE);
        return;
    }
    json_int_t at = json_integer_value (json_object_get (record, "answeredMs"));
    time_t seconds = (time_t) (at / 1000);
    struct tm tm;
    gmtime_r (&seconds, &tm);
    char when [32];
    strftime (when, sizeof (when), "%Y-%m-%d %H:%M:%S", &tm);
    const char *approver = json_string_value (json_object_get (json_object_get (record, "approval"), "approver"));
    printf ("%s.%03d  %-16.16s %-24.24s %-18.18s %9.1f  %-16.16s %s\n", when, (int) (at % 1000),
            json_string_value (json_object_get (record, "agent"))? json_string_value (json_object_get (record, "agent")): "",
            json_string_value (json_object_get (record, "tool"))? json_string_value (json_object_get (record, "tool")): "",
            json_string_value (json_object_get (record, "outcome"))? json_string_value (json_object_get (record, "outcome")): "",
            (double) json_integer_value (json_object_get (record, "durationUs")) / 1000.0,
            approver? approver: "-",
            json_string_value (json_object_get (record, "callId"))? json_string_value (json_object_get (record, "callId")): "");
    fflush (stdout);
}

//  Asks every broker of the list, merges their records by time (a record
//  two brokers both return, from one shared store, once), and prints those
//  not seen yet. Returns how many it printed, or -1.
static int
s_audit_round (dsh_cli_options_t *options, zlistx_t *brokers, json_t *query, zhashx_t *seen, bool table,
               int64_t *latest_ms, int *exit_code)
{
    json_t *merged = json_array ();
    size_t answered = 0;
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        json_t *body = s_audit_at (options, broker, query, exit_code);
        if (!body)
            continue;
        answered++;
        size_t index;
        json_t *row;
        json_array_foreach (json_object_get (body, "records"), index, row) {
            json_t *record = s_audit_record (row);
            if (!record)
                continue;
            char key [512];
            snprintf (key, sizeof (key), "%s/%" JSON_INTEGER_FORMAT,
                      json_string_value (json_object_get (record, "broker"))? json_string_value (json_object_get (record, "broker")): "",
                      json_integer_value (json_object_get (record, "seq")));
            if (zhashx_lookup (seen, key))
                json_decref (record);
            else {
                zhashx_insert (seen, key, zsys_sprintf ("%" JSON_INTEGER_FORMAT,
                                                        json_integer_value (json_object_get (record, "answeredMs"))));
                json_array_append_new (merged, record);
            }
        }
        json_decref (body);
    }
    size_t count = json_array_size (merged);
    json_t **records = (json_t **) calloc (count? count: 1, sizeof (json_t *));
    assert (records);
    for (size_t index = 0; index < count; index++)
        records [index] = json_array_get (merged, index);
    qsort (records, count, sizeof (json_t *), s_audit_order);
    //  The latest --limit of them all, in time order
    size_t limit = (size_t) (options->limit? options->limit: 20);
    size_t first = !options->follow || !*latest_ms? (count > limit? count - limit: 0): 0;
    for (size_t index = first; index < count; index++) {
        s_audit_row_print (records [index], table);
        json_int_t at = json_integer_value (json_object_get (records [index], "answeredMs"));
        if (at > *latest_ms)
            *latest_ms = at;
    }
    free (records);
    json_decref (merged);
    //  The next round asks from the latest ms on: only records of that ms
    //  can come again, so the others need not be remembered
    zlistx_t *keys = zhashx_keys (seen);
    for (const char *key = zlistx_first (keys); key; key = zlistx_next (keys))
        if (strtoll ((const char *) zhashx_lookup (seen, key), NULL, 10) < *latest_ms)
            zhashx_delete (seen, key);
    zlistx_destroy (&keys);
    return answered? (int) (count - first): -1;
}

static int
s_audit_verify (dsh_cli_options_t *options, zlistx_t *brokers)
{
    int exit_code = 0;
    json_t *query = json_pack ("{s:b}", "verify", 1);
    json_t *chains = json_array ();
    zhashx_t *seen = zhashx_new ();
    bool all_ok = true;
    size_t answered = 0;
    for (const char *broker = zlistx_first (brokers); broker; broker = zlistx_next (brokers)) {
        json_t *body = s_audit_at (options, broker, query, &exit_code);
        if (!body)
            continue;
        answered++;
        size_t index;
        json_t *chain;
        json_array_foreach (json_object_get (body, "chains"), index, chain) {
            const char *name = json_string_value (json_object_get (chain, "broker"));
            if (!name || zhashx_lookup (seen, name))
                continue;
            zhashx_insert (seen, name, (void *) "");
            if (!json_is_true (json_object_get (chain, "ok"))) {
                all_ok = false;
                fprintf (stderr, "dsh: audit chain %s does not verify: %s\n", name,
                         json_string_value (json_object_get (chain, "reason"))?
                         json_string_value (json_object_get (chain, "reason")): "no reason given");
            }
            json_array_append (chains, chain);
        }
        json_decref (body);
    }
    if (answered)
        dsh_cli_print (chains, JSON_DOCUMENT);
    json_decref (chains);
    json_decref (query);
    zhashx_destroy (&seen);
    if (!answered)
        return exit_code? exit_code: EXIT_NO_BROKER;
    return all_ok? exit_code: EXIT_TOOL_ERROR;
}

int
dsh_cli_audit (dsh_cli_options_t *options)
{
    const dsh_cli_command_t *command = dsh_cli_command_named ("audit");
    if (options->nargs == 1 && !streq (options->args [0], "verify"))
        return dsh_cli_usage_error (command, "audit takes \"verify\" or no argument, not \"%s\"", options->args [0]);
    char error [512];
    zlistx_t *brokers = dsh_sock_brokers (dsh_cli_endpoint (options), error, sizeof (error));
    assert (brokers);           //  main checked the list
    if (options->nargs == 1) {
        int exit_code = s_audit_verify (options, brokers);
        zlistx_destroy (&brokers);
        return exit_code;
    }
    json_t *query = json_pack ("{s:s}", "order", "newest");
    int64_t since = 0, until = 0;
    if (options->since && s_audit_time (options->since, &since)) {
        zlistx_destroy (&brokers);
        json_decref (query);
        return dsh_cli_usage_error (command, "--since: \"%s\" is not a time (ms since 1970, 2026-12-01T10:00:00, 2h)",
                                    options->since);
    }
    if (options->until && s_audit_time (options->until, &until)) {
        zlistx_destroy (&brokers);
        json_decref (query);
        return dsh_cli_usage_error (command, "--until: \"%s\" is not a time (ms since 1970, 2026-12-01T10:00:00, 2h)",
                                    options->until);
    }
    if (options->agent)
        json_object_set_new (query, "agent", json_string (options->agent));
    if (options->tool)
        json_object_set_new (query, "tool", json_string (options->tool));
    if (options->outcome)
        json_object_set_new (query, "outcome", json_string (options->outcome));
    if (options->call_id)
        json_object_set_new (query, "callId", json_string (options->call_id));
    if (since)
        json_object_set_new (query, "since", json_integer (since));
    if (until)
        json_object_set_new (query, "until", json_integer (until));
    json_object_set_new (query, "limit", json_integer (options->limit? options->limit: 20));
    bool table = !options->json && isatty (STDOUT_FILENO);
    zhashx_t *seen = zhashx_new ();
    zhashx_set_destructor (seen, (zhashx_destructor_fn *) zstr_free);
    if (table)
        printf ("%-23s  %-16s %-24s %-18s %9s  %-16s %s\n", "answered (UTC)", "agent", "tool", "outcome",
                "ms", "approved by", "callId");
    int exit_code = 0;
    int64_t latest = 0;
    int printed = s_audit_round (options, brokers, query, seen, table, &latest, &exit_code);
    if (printed >= 0)
        exit_code = 0;      //  a broker of the list answered
    while (options->follow && !zsys_interrupted) {
        zclock_sleep (WATCH_POLL_MS * 2);
        //  From the latest seen on (the same ms again: records of one ms
        //  may land apart), oldest first; seen ones are not printed twice
        json_object_set_new (query, "since", json_integer (latest? latest: zclock_time () - 1000));
        json_object_set_new (query, "order", json_string ("oldest"));
        json_object_set_new (query, "limit", json_integer (1000));
        int round_exit = 0;
        s_audit_round (options, brokers, query, seen, table, &latest, &round_exit);
    }
    zhashx_destroy (&seen);
    json_decref (query);
    zlistx_destroy (&brokers);
    return exit_code;
}
