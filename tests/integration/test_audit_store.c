/*  =========================================================================
    test_audit_store - the audit trail when its store fails, is shared, or
    is pressed: real brokers, dsh-demo, the dsh CLI, a scratch PostgreSQL
    server (tests/kit/pg_scratch.sh) and a small tmpfs, on loopback

    1. required, PostgreSQL stopped and started again under a running
       broker: calls are refused AUDIT_UNAVAILABLE within seconds, run again
       within seconds of its return, and every answer but those refusals
       has exactly one record
    2. best-effort, the same outage: every call succeeds, the dropped
       records are counted, and one `lost` record says how many
    3. a full disk (SQLite on a 2 MiB tmpfs): refused while full, served
       again once there is room
    4. two brokers on one PostgreSQL database: a mode set at one is obeyed
       at the other; `dsh --broker A,B audit` merges the shared rows once
    5. CURVE: the record names the caller's key and the approver's; only an
       admin or auditor key may read the trail
    6. load: 10 000 calls (100 000 in the long suite) of every outcome from
       threads, a component killed mid-call, a clean broker restart: one
       record per call the broker answered, none twice, and the old
       broker's queued records written before it exits (SQLite, and again
       on PostgreSQL)

    A case needing what this host lacks (no PostgreSQL server, no mount)
    is skipped with a message; the program exits 77 only if every case was.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define DEMO            "components/demo/dsh-demo"
#define CLI             "components/cli/dsh"
#define HEARTBEAT       "200"           //  expiry after 600 ms of silence
#define CLI_WAIT_MS     40000
#define QUERY_MS        "30000"         //  the CLI's wait for AUDIT: verify reads every record
#define REFUSED_TEXT    "the audit store cannot be written now, and the audit is required"

//  The load (case 6)
#define LOAD_CALLS          10000
#define LOAD_CALLS_LONG     100000
#define LOAD_THREADS        4
#define LOAD_IN_FLIGHT      16          //  per thread
#define LOAD_LIMIT_MS       240000      //  the whole run, at most (the long one)

static char s_root [] = "/tmp/dsh-audit-store-XXXXXX";
static int s_cases;                     //  run
static int s_skipped;                   //  of them, skipped

//  ---------------------------------------------------------------------
//  A test's processes and scratch resources, all released in teardown

#define RIG_PROCS 24

typedef struct _load_t load_t;
static void s_load_destroy (load_t **self_p);

typedef struct {
    const char *variant;                //  the prestate: "sqlite" or "postgresql" (case 6)
    dsh_testproc_t *procs [RIG_PROCS];
    char pg_dir [64];                   //  a scratch PostgreSQL server's, or ""
    char *pg_uri;
    char mount [256];                   //  a tmpfs mounted here, or ""
    int approver_stdin;                 //  a pipe's write end, or -1
    load_t *load;                       //  client threads (case 6), or NULL
} rig_t;

static int
s_rig_setup (void **state)
{
    rig_t *rig = (rig_t *) zmalloc (sizeof (rig_t));
    rig->variant = *state? (const char *) *state: "sqlite";
    rig->approver_stdin = -1;
    s_cases++;
    *state = rig;
    return 0;
}

static int
s_rig_teardown (void **state)
{
    rig_t *rig = (rig_t *) *state;
    s_load_destroy (&rig->load);
    if (rig->approver_stdin >= 0)
        close (rig->approver_stdin);
    //  Brokers and components first: they hold the store open
    for (int index = RIG_PROCS - 1; index >= 0; index--)
        dsh_testproc_destroy (&rig->procs [index]);
    int rc = 0;
    if (*rig->pg_dir) {
        if (dsh_testkit_postgres_stop (rig->pg_dir))
            rc = -1;
        char *command = zsys_sprintf ("rm -rf %s", rig->pg_dir);
        if (system (command))
            rc = -1;
        zstr_free (&command);
    }
    if (*rig->mount) {
        if (umount (rig->mount) && umount2 (rig->mount, MNT_DETACH)) {
            fprintf (stderr, "test_audit_store: cannot unmount %s: %s\n", rig->mount, strerror (errno));
            rc = -1;
        }
        rmdir (rig->mount);
    }
    zstr_free (&rig->pg_uri);
    free (rig);
    *state = NULL;
    return rc;
}

//  Keeps proc (which must have started) for teardown.
static dsh_testproc_t *
s_keep (rig_t *rig, dsh_testproc_t *proc)
{
    assert_non_null (proc);
    for (int index = 0; index < RIG_PROCS; index++)
        if (!rig->procs [index]) {
            rig->procs [index] = proc;
            return proc;
        }
    fail_msg ("more than %d processes", RIG_PROCS);
    return NULL;
}

//  Kills (if still running), reaps and forgets a kept process.
static void
s_drop (rig_t *rig, dsh_testproc_t **proc_p)
{
    for (int index = 0; index < RIG_PROCS; index++)
        if (rig->procs [index] == *proc_p)
            rig->procs [index] = NULL;
    dsh_testproc_destroy (proc_p);
}

//  A scratch PostgreSQL server of the test's own, its URI; skips the
//  test if this host has none.
static const char *
s_postgres (rig_t *rig)
{
    snprintf (rig->pg_dir, sizeof (rig->pg_dir), "/tmp/dsh-audit-pg-XXXXXX");
    assert_non_null (mkdtemp (rig->pg_dir));
    rig->pg_uri = dsh_testkit_postgres_start (rig->pg_dir);
    if (!rig->pg_uri) {
        char *command = zsys_sprintf ("rm -rf %s", rig->pg_dir);
        assert_int_equal (system (command), 0);
        zstr_free (&command);
        *rig->pg_dir = 0;
        print_message ("no PostgreSQL server on this host (tests/kit/pg_scratch.sh): skipped\n");
        s_skipped++;
        skip ();
    }
    return rig->pg_uri;
}

//  ---------------------------------------------------------------------
//  Brokers, components

typedef struct {
    char front [128];
    char announce [128];
    char work [128];
    char events [128];
} endpoints_t;

//  Every socket on a free port of czmq's dynamic range
static const endpoints_t s_any = {
    "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!"
};

//  dsh-broker on the wanted endpoints with extra flags (NULL-terminated),
//  kept; bound gets the endpoints it bound.
static dsh_testproc_t *
s_broker (rig_t *rig, const endpoints_t *wanted, endpoints_t *bound, const char *const *extra)
{
    const char *argv [40] = { "broker/dsh-broker", "--endpoint", wanted->front, "--announce", wanted->announce,
                              "--work", wanted->work, "--events", wanted->events, "--heartbeat-ms", HEARTBEAT };
    size_t argc = 11;
    for (size_t index = 0; extra && extra [index]; index++) {
        assert_true (argc < 39);
        argv [argc++] = extra [index];
    }
    argv [argc] = NULL;
    dsh_testproc_t *broker = s_keep (rig, dsh_testproc_start (argv));
    char *line = dsh_testproc_wait_line (broker, "listening on ", 15000);
    if (!line)
        fail_msg ("dsh-broker did not start (%s)", dsh_testproc_output (broker, 0));
    int fields = sscanf (strstr (line, "listening on "), "listening on %127s (announce %127[^,], work %127[^,], "
                         "events %127[^)])", bound->front, bound->announce, bound->work, bound->events);
    assert_int_equal (fields, 4);
    zstr_free (&line);
    return broker;
}

//  A config file under the test's directory holding text. Caller frees.
static char *
s_config_file (const char *name, const char *text)
{
    char *path = zsys_sprintf ("%s/%s.cfg", s_root, name);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    assert_int_equal (fputs (text, file) >= 0, 1);
    assert_int_equal (fclose (file), 0);
    return path;
}

static const char s_plan_chain [] =
    "chain\n"
    "    stage\n"
    "        name = \"plan\"\n"
    "        kind = \"plan\"\n";

//  A dsh-demo serving id at front, kept.
static dsh_testproc_t *
s_demo (rig_t *rig, const char *front, const char *id, const char *const *extra)
{
    return s_keep (rig, dsh_testkit_component (DEMO, front, id, extra));
}

//  Waits until tool name has providers providers at front.
static void
s_wait_providers (const char *front, const char *name, size_t providers)
{
    dsh_client_t *client = dsh_client_new (front);
    assert_non_null (client);
    char error [256];
    int64_t give_up = zclock_mono () + 15000;
    size_t have = 0;
    while (have != providers && zclock_mono () < give_up) {
        dsh_reply_t *reply = dsh_client_request (client, DSH_GET, name, 1000, error, sizeof (error));
        const msgpack_object *list = reply && streq (dsh_reply_command (reply), DSH_TOOL)
                                   ? dsh_map_get (dsh_reply_body (reply), "providers"): NULL;
        have = list && list->type == MSGPACK_OBJECT_ARRAY? list->via.array.size: 0;
        dsh_reply_destroy (&reply);
        if (have != providers)
            zclock_sleep (50);
    }
    dsh_client_destroy (&client);
    if (have != providers)
        fail_msg ("%s has %zu providers at %s, not %zu", name, have, front, providers);
}

//  ---------------------------------------------------------------------
//  Calls and what they were answered

//  callId -> outcome ("ok" or the error code) of each answer a client
//  received from a broker
static zhashx_t *
s_ledger_new (void)
{
    zhashx_t *ledger = zhashx_new ();
    zhashx_set_destructor (ledger, (zhashx_destructor_fn *) zstr_free);
    return ledger;
}

//  The outcome of a RESULT as the audit names it.
static const char *
s_outcome (dsh_reply_t *reply)
{
    if (!dsh_reply_is_error (reply))
        return "ok";
    return dsh_reply_error_code (reply)? dsh_reply_error_code (reply): "TOOL_ERROR";
}

//  One call on client, waited for; its answer goes into ledger. Returns
//  its outcome (the ledger's); *text_p (if not NULL) is its text (caller
//  frees).
static const char *
s_call (dsh_client_t *client, zhashx_t *ledger, const char *name, const char *args, const char *agent,
        char **text_p)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, name, args, agent, 5000, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s %s: %s", name, args, error);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    const char *outcome = s_outcome (reply);
    //  Made by the client, not a broker's answer: nothing here expects one
    if (streq (outcome, DSH_E_BROKER_GONE))
        fail_msg ("call %s: %s", name, dsh_reply_text (reply));
    char *kept = strdup (outcome);
    if (zhashx_insert (ledger, dsh_reply_call_id (reply), kept))
        fail_msg ("two answers for call %s", dsh_reply_call_id (reply));
    if (text_p)
        *text_p = dsh_reply_text (reply)? strdup (dsh_reply_text (reply)): NULL;
    dsh_reply_destroy (&reply);
    return kept;
}

static void
s_expect (dsh_client_t *client, zhashx_t *ledger, const char *name, const char *args, const char *agent,
          const char *expected)
{
    char *text = NULL;
    const char *outcome = s_call (client, ledger, name, args, agent, &text);
    if (!streq (outcome, expected))
        fail_msg ("call %s %s: %s (%s), expected %s", name, args, outcome, text? text: "", expected);
    zstr_free (&text);
}

//  How many answers in ledger had this outcome.
static size_t
s_ledger_count (zhashx_t *ledger, const char *outcome)
{
    size_t count = 0;
    for (const char *value = (const char *) zhashx_first (ledger); value;
         value = (const char *) zhashx_next (ledger))
        count += streq (value, outcome);
    return count;
}

//  ---------------------------------------------------------------------
//  The trail as the CLI prints it

static const char *
s_str (json_t *object, const char *key)
{
    const char *value = json_string_value (json_object_get (object, key));
    return value? value: "";
}

//  `dsh --broker endpoints [options...] audit --json --limit 10000 [filters...]`:
//  the records it printed as a JSON array, or NULL if it exited non-zero.
static json_t *
s_audit_json (const char *endpoints, const char *const *options, const char *const *filters)
{
    const char *args [32];
    size_t count = 0;
    for (size_t index = 0; options && options [index]; index++)
        args [count++] = options [index];
    args [count++] = "--timeout-ms";
    args [count++] = QUERY_MS;
    args [count++] = "audit";
    args [count++] = "--json";
    args [count++] = "--limit";
    args [count++] = "10000";
    for (size_t index = 0; filters && filters [index]; index++)
        args [count++] = filters [index];
    args [count] = NULL;
    char *output = NULL;
    int status = dsh_testkit_cli (endpoints, args, CLI_WAIT_MS, &output);
    json_t *records = status == 0? json_array (): NULL;
    char *save = NULL;
    for (char *line = strtok_r (output? output: (char *) "", "\n", &save); line && records;
         line = strtok_r (NULL, "\n", &save)) {
        json_t *record = json_loads (line, 0, NULL);
        if (!json_is_object (record))
            fail_msg ("dsh audit printed a line that is no record: %s", line);
        json_array_append_new (records, record);
    }
    zstr_free (&output);
    return records;
}

//  The records, once there are count of them (the writer is asynchronous),
//  within 15 s; fails if there are not, or more.
static json_t *
s_audit_wait (const char *endpoints, const char *const *options, const char *const *filters, size_t count)
{
    int64_t give_up = zclock_mono () + 15000;
    json_t *records = NULL;
    while (true) {
        json_decref (records);
        records = s_audit_json (endpoints, options, filters);
        if ((records && json_array_size (records) >= count) || zclock_mono () >= give_up)
            break;
        zclock_sleep (200);
    }
    if (!records)
        fail_msg ("dsh audit failed at %s", endpoints);
    if (json_array_size (records) != count)
        fail_msg ("dsh audit printed %zu records at %s, expected %zu", json_array_size (records), endpoints, count);
    return records;
}

//  Holds records (of chain, if not NULL) against ledger: no record of a
//  call twice, none of a call no client saw answered or that was refused
//  AUDIT_UNAVAILABLE, each with its answer's outcome. Returns how many
//  answers (not AUDIT_UNAVAILABLE) have no record.
static size_t
s_match (json_t *records, zhashx_t *ledger, const char *chain)
{
    zhashx_t *seen = zhashx_new ();
    size_t index;
    json_t *record;
    json_array_foreach (records, index, record) {
        if (chain && !streq (s_str (record, "broker"), chain))
            continue;
        if (streq (s_str (record, "kind"), "lost"))
            continue;
        assert_string_equal (s_str (record, "kind"), "call");
        const char *call_id = s_str (record, "callId");
        const char *answered = (const char *) zhashx_lookup (ledger, call_id);
        if (zhashx_lookup (seen, call_id))
            fail_msg ("call %s has two records", call_id);
        zhashx_insert (seen, call_id, (void *) call_id);
        if (!answered)
            fail_msg ("a record of call %s, which no client saw answered", call_id);
        if (streq (answered, DSH_E_AUDIT_UNAVAILABLE))
            fail_msg ("a record of call %s, which was refused AUDIT_UNAVAILABLE", call_id);
        if (!streq (s_str (record, "outcome"), answered))
            fail_msg ("call %s was answered %s, its record says %s", call_id, answered, s_str (record, "outcome"));
    }
    size_t missing = 0;
    for (const char *outcome = (const char *) zhashx_first (ledger); outcome;
         outcome = (const char *) zhashx_next (ledger))
        if (!streq (outcome, DSH_E_AUDIT_UNAVAILABLE) && !zhashx_lookup (seen, zhashx_cursor (ledger)))
            missing++;
    zhashx_destroy (&seen);
    return missing;
}

//  `dsh --broker endpoints [options...] audit verify`: its exit status in
//  *status, and the chains it printed (an array; empty if none).
static json_t *
s_verify (const char *endpoints, const char *const *options, int *status)
{
    const char *args [16];
    size_t count = 0;
    for (size_t index = 0; options && options [index]; index++)
        args [count++] = options [index];
    args [count++] = "--timeout-ms";
    args [count++] = QUERY_MS;
    args [count++] = "audit";
    args [count++] = "verify";
    args [count] = NULL;
    char *output = NULL;
    *status = dsh_testkit_cli (endpoints, args, CLI_WAIT_MS, &output);
    json_t *chains = json_loads (output? output: "", 0, NULL);
    zstr_free (&output);
    if (!json_is_array (chains)) {
        json_decref (chains);
        chains = json_array ();
    }
    return chains;
}

//  The chain named name in chains, or NULL.
static json_t *
s_chain (json_t *chains, const char *name)
{
    size_t index;
    json_t *chain;
    json_array_foreach (chains, index, chain)
        if (streq (s_str (chain, "broker"), name))
            return chain;
    return NULL;
}

//  `dsh audit verify` exits 0 with chain name ok, checked records long.
static void
s_verified (const char *endpoints, const char *name, size_t records)
{
    int status;
    int64_t started = zclock_mono ();
    json_t *chains = s_verify (endpoints, NULL, &status);
    int64_t took_ms = zclock_mono () - started;
    json_t *chain = s_chain (chains, name);
    if (status != 0 || !chain || !json_is_true (json_object_get (chain, "ok")))
        fail_msg ("dsh audit verify at %s: exit %d, chain %s %s", endpoints, status, name,
                  chain? json_dumps (chain, JSON_COMPACT): "missing");
    assert_int_equal (json_integer_value (json_object_get (chain, "checked")), (json_int_t) records);
    json_decref (chains);
    if (records >= 1000)
        print_message ("dsh audit verify of %zu records: %" PRId64 " ms\n", records, took_ms);
}

//  The broker's STATS audit map (caller decrefs).
static json_t *
s_audit_stats (const char *front)
{
    dsh_client_t *client = dsh_client_new (front);
    assert_non_null (client);
    char error [256];
    dsh_reply_t *reply = dsh_client_request (client, DSH_STATS, NULL, 5000, error, sizeof (error));
    if (!reply)
        fail_msg ("STATS at %s: %s", front, error);
    json_t *body = dsh_reply_json (reply);
    json_t *audit = json_incref (json_object_get (body, "audit"));
    json_decref (body);
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    assert_true (json_is_object (audit));
    return audit;
}

static json_int_t
s_audit_stat (const char *front, const char *key)
{
    json_t *audit = s_audit_stats (front);
    json_t *value = json_object_get (audit, key);
    json_int_t number = json_is_boolean (value)? json_is_true (value): json_integer_value (value);
    json_decref (audit);
    return number;
}

//  ---------------------------------------------------------------------
//  1. required: PostgreSQL stops and comes back under a running broker

static void
test_required_postgres_outage (void **state)
{
    rig_t *rig = (rig_t *) *state;
    const char *uri = s_postgres (rig);
    endpoints_t at;
    s_broker (rig, &s_any, &at, (const char *[]) { "--name", "required", "--store", uri, "--audit", "required", NULL });
    s_demo (rig, at.front, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (at.front, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *client = dsh_client_new (at.front);
    zhashx_t *ledger = s_ledger_new ();
    for (int index = 0; index < 10; index++)
        s_expect (client, ledger, "echo", "{\"message\": \"before\"}", NULL, "ok");
    assert_true (s_audit_stat (at.front, "healthy"));

    //  The database goes: within a few seconds new calls are refused, and
    //  say why. Those admitted before the broker knew are still recorded.
    assert_int_equal (dsh_testkit_postgres_stop (rig->pg_dir), 0);
    int64_t stopped = zclock_mono ();
    size_t admitted = 0;
    char *text = NULL;
    while (true) {
        zstr_free (&text);
        const char *outcome = s_call (client, ledger, "echo", "{\"message\": \"during\"}", NULL, &text);
        if (streq (outcome, DSH_E_AUDIT_UNAVAILABLE))
            break;
        assert_string_equal (outcome, "ok");
        admitted++;
        if (zclock_mono () - stopped > 5000)
            fail_msg ("calls still run 5 s after the store went (%zu of them)", admitted);
        zclock_sleep (50);
    }
    int64_t refused_ms = zclock_mono () - stopped;
    if (!text || !strstr (text, REFUSED_TEXT))
        fail_msg ("AUDIT_UNAVAILABLE says \"%s\"", text? text: "");
    zstr_free (&text);
    for (int index = 0; index < 10; index++) {
        s_expect (client, ledger, "echo", "{\"message\": \"during\"}", NULL, DSH_E_AUDIT_UNAVAILABLE);
        zclock_sleep (50);
    }
    json_t *audit = s_audit_stats (at.front);
    assert_true (json_is_false (json_object_get (audit, "healthy")));
    assert_int_equal (json_integer_value (json_object_get (audit, "refused")),
                      (json_int_t) s_ledger_count (ledger, DSH_E_AUDIT_UNAVAILABLE));
    json_decref (audit);

    //  It comes back on the same port: calls run again, the broker untouched
    assert_int_equal (dsh_testkit_postgres_restart (rig->pg_dir), 0);
    int64_t restarted = zclock_mono ();
    while (!streq (s_call (client, ledger, "echo", "{\"message\": \"after\"}", NULL, NULL), "ok")) {
        if (zclock_mono () - restarted > 5000)
            fail_msg ("calls still refused 5 s after the store came back");
        zclock_sleep (50);
    }
    int64_t back_ms = zclock_mono () - restarted;
    for (int index = 0; index < 10; index++)
        s_expect (client, ledger, "echo", "{\"message\": \"after\"}", NULL, "ok");
    print_message ("refused %" PRId64 " ms after the stop (%zu calls admitted meanwhile); served %" PRId64
                   " ms after the restart; %zu refused in all\n", refused_ms, admitted, back_ms,
                   s_ledger_count (ledger, DSH_E_AUDIT_UNAVAILABLE));

    //  One record per answer that was not AUDIT_UNAVAILABLE
    size_t expected = zhashx_size (ledger) - s_ledger_count (ledger, DSH_E_AUDIT_UNAVAILABLE);
    json_t *records = s_audit_wait (at.front, NULL, NULL, expected);
    assert_int_equal (s_match (records, ledger, NULL), 0);
    json_decref (records);
    s_verified (at.front, "required", expected);
    zhashx_destroy (&ledger);
    dsh_client_destroy (&client);
}

//  ---------------------------------------------------------------------
//  2. best-effort: the same outage; calls go on, the losses are said

static void
test_best_effort_postgres_outage (void **state)
{
    rig_t *rig = (rig_t *) *state;
    const char *uri = s_postgres (rig);
    endpoints_t at;
    s_broker (rig, &s_any, &at, (const char *[]) { "--name", "best", "--store", uri, "--audit", "best-effort",
                                                   NULL });
    s_demo (rig, at.front, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (at.front, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *client = dsh_client_new (at.front);
    zhashx_t *ledger = s_ledger_new ();
    for (int index = 0; index < 10; index++)
        s_expect (client, ledger, "echo", "{\"message\": \"before\"}", NULL, "ok");

    //  Every call succeeds through the outage; records are dropped
    assert_int_equal (dsh_testkit_postgres_stop (rig->pg_dir), 0);
    int64_t stopped = zclock_mono ();
    size_t during = 0;
    while (zclock_mono () - stopped < 2000 || s_audit_stat (at.front, "dropped") == 0) {
        if (zclock_mono () - stopped > 8000)
            fail_msg ("no record dropped 8 s into the outage (%zu calls)", during);
        s_expect (client, ledger, "echo", "{\"message\": \"during\"}", NULL, "ok");
        during++;
        zclock_sleep (20);
    }
    json_t *audit = s_audit_stats (at.front);
    json_int_t dropped = json_integer_value (json_object_get (audit, "dropped"));
    assert_true (dropped > 0);
    assert_true (json_is_false (json_object_get (audit, "healthy")));
    assert_int_equal (json_integer_value (json_object_get (audit, "refused")), 0);
    json_decref (audit);

    //  Back: the chain says what it lost, once, before anything newer
    assert_int_equal (dsh_testkit_postgres_restart (rig->pg_dir), 0);
    int64_t give_up = zclock_mono () + 10000;
    while (!s_audit_stat (at.front, "healthy")) {
        if (zclock_mono () > give_up)
            fail_msg ("the store is not written again 10 s after it came back");
        zclock_sleep (50);
    }
    for (int index = 0; index < 10; index++)
        s_expect (client, ledger, "echo", "{\"message\": \"after\"}", NULL, "ok");
    assert_int_equal (s_audit_stat (at.front, "dropped"), dropped);
    print_message ("%zu calls during the outage, %lld records dropped\n", during, (long long) dropped);

    size_t expected = zhashx_size (ledger) - (size_t) dropped;
    json_t *records = s_audit_wait (at.front, NULL, NULL, expected + 1);
    assert_int_equal (s_match (records, ledger, NULL), (size_t) dropped);
    size_t lost = 0, index;
    json_t *record, *first_after = NULL, *lost_record = NULL;
    json_array_foreach (records, index, record) {
        if (streq (s_str (record, "kind"), "lost")) {
            lost++;
            lost_record = record;
        }
        else
        if (!first_after && streq (s_str (json_object_get (record, "arguments"), "message"), "after"))
            first_after = record;
    }
    assert_int_equal (lost, 1);
    assert_string_equal (s_str (lost_record, "outcome"), "AUDIT_LOST");
    assert_int_equal (json_integer_value (json_object_get (lost_record, "lost")), dropped);
    assert_non_null (first_after);
    assert_true (json_integer_value (json_object_get (lost_record, "seq"))
               < json_integer_value (json_object_get (first_after, "seq")));
    json_decref (records);
    s_verified (at.front, "best", expected + 1);
    zhashx_destroy (&ledger);
    dsh_client_destroy (&client);
}

//  ---------------------------------------------------------------------
//  3. a full disk: SQLite on a small tmpfs

//  Writes path until the file system is full.
static void
s_fill (const char *path)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true (fd >= 0);
    static char block [65536];
    memset (block, 'f', sizeof (block));
    for (size_t size = sizeof (block); size >= 1; size /= 4)
        while (write (fd, block, size) == (ssize_t) size)
            ;
    assert_int_equal (errno, ENOSPC);
    assert_int_equal (close (fd), 0);
}

static void
test_full_disk (void **state)
{
    rig_t *rig = (rig_t *) *state;
    snprintf (rig->mount, sizeof (rig->mount), "%s/disk", s_root);
    assert_int_equal (mkdir (rig->mount, 0700), 0);
    if (mount ("tmpfs", rig->mount, "tmpfs", 0, "size=2m")) {
        print_message ("cannot mount a tmpfs here (%s): skipped\n", strerror (errno));
        rmdir (rig->mount);
        *rig->mount = 0;
        s_skipped++;
        skip ();
    }
    char *store = zsys_sprintf ("%s/audit.db", rig->mount);
    char *filler = zsys_sprintf ("%s/filler", rig->mount);
    endpoints_t at;
    s_broker (rig, &s_any, &at, (const char *[]) { "--name", "disk", "--store", store, "--audit", "required", NULL });
    s_demo (rig, at.front, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (at.front, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *client = dsh_client_new (at.front);
    zhashx_t *ledger = s_ledger_new ();
    for (int index = 0; index < 5; index++)
        s_expect (client, ledger, "echo", "{\"message\": \"room\"}", NULL, "ok");

    //  The disk fills: records of 16 KiB of arguments soon cannot be
    //  written, and calls are refused
    s_fill (filler);
    char *large = zsys_sprintf ("{\"message\": \"%0*d\"}", 16384, 0);
    int64_t filled = zclock_mono ();
    size_t admitted = 0;
    char *text = NULL;
    while (true) {
        zstr_free (&text);
        const char *outcome = s_call (client, ledger, "echo", large, NULL, &text);
        if (streq (outcome, DSH_E_AUDIT_UNAVAILABLE))
            break;
        assert_string_equal (outcome, "ok");
        admitted++;
        if (zclock_mono () - filled > 10000)
            fail_msg ("calls still run 10 s after the disk filled (%zu of them)", admitted);
        zclock_sleep (20);
    }
    if (!text || !strstr (text, REFUSED_TEXT))
        fail_msg ("AUDIT_UNAVAILABLE says \"%s\"", text? text: "");
    zstr_free (&text);
    for (int index = 0; index < 5; index++) {
        s_expect (client, ledger, "echo", "{\"message\": \"full\"}", NULL, DSH_E_AUDIT_UNAVAILABLE);
        zclock_sleep (50);
    }
    assert_false (s_audit_stat (at.front, "healthy"));

    //  Room again: calls run again, and the records admitted meanwhile land
    assert_int_equal (unlink (filler), 0);
    int64_t freed = zclock_mono ();
    while (!streq (s_call (client, ledger, "echo", "{\"message\": \"room again\"}", NULL, NULL), "ok")) {
        if (zclock_mono () - freed > 5000)
            fail_msg ("calls still refused 5 s after the disk had room again");
        zclock_sleep (50);
    }
    int64_t back_ms = zclock_mono () - freed;
    for (int index = 0; index < 5; index++)
        s_expect (client, ledger, "echo", "{\"message\": \"room again\"}", NULL, "ok");
    print_message ("%zu large calls ran after the disk filled; served %" PRId64 " ms after it had room; "
                   "%zu refused\n", admitted, back_ms, s_ledger_count (ledger, DSH_E_AUDIT_UNAVAILABLE));
    size_t expected = zhashx_size (ledger) - s_ledger_count (ledger, DSH_E_AUDIT_UNAVAILABLE);
    json_t *records = s_audit_wait (at.front, NULL, NULL, expected);
    assert_int_equal (s_match (records, ledger, NULL), 0);
    json_decref (records);
    s_verified (at.front, "disk", expected);
    zhashx_destroy (&ledger);
    dsh_client_destroy (&client);
    zstr_free (&large);
    zstr_free (&filler);
    zstr_free (&store);
}

//  ---------------------------------------------------------------------
//  4. two brokers, one PostgreSQL database

static void
test_two_brokers_one_database (void **state)
{
    rig_t *rig = (rig_t *) *state;
    const char *uri = s_postgres (rig);
    char *config = s_config_file ("plan", s_plan_chain);
    endpoints_t a, b;
    s_broker (rig, &s_any, &a, (const char *[]) { "-c", config, "--name", "alpha", "--store", uri, NULL });
    s_broker (rig, &s_any, &b, (const char *[]) { "-c", config, "--name", "beta", "--store", uri, NULL });
    s_demo (rig, a.front, "demo-a", NULL);
    s_demo (rig, b.front, "demo-b", NULL);
    assert_int_equal (dsh_testkit_wait_tools (a.front, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    assert_int_equal (dsh_testkit_wait_tools (b.front, "", DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    dsh_client_t *at_a = dsh_client_new (a.front);
    dsh_client_t *at_b = dsh_client_new (b.front);
    zhashx_t *ledger_a = s_ledger_new ();
    zhashx_t *ledger_b = s_ledger_new ();
    for (int index = 0; index < 3; index++) {
        s_expect (at_a, ledger_a, "echo", "{\"message\": \"a\"}", "agent-y", "ok");
        s_expect (at_b, ledger_b, "echo", "{\"message\": \"b\"}", "agent-y", "ok");
    }
    s_expect (at_a, ledger_a, "tick", "{\"ms\": 1}", "agent-x", "ok");
    s_expect (at_b, ledger_b, "tick", "{\"ms\": 1}", "agent-x", "ok");

    //  Plan mode set at A only: B refuses agent-x's tick within 3 s
    char *ends = zsys_sprintf ("%s,%s", a.front, b.front);
    assert_int_equal (dsh_testkit_cli (a.front, (const char *[]) { "mode", "agent-x", "plan", NULL }, CLI_WAIT_MS,
                                       NULL), 0);
    int64_t set = zclock_mono ();
    s_expect (at_a, ledger_a, "tick", "{\"ms\": 1}", "agent-x", DSH_E_DENIED);
    while (!streq (s_call (at_b, ledger_b, "tick", "{\"ms\": 1}", "agent-x", NULL), DSH_E_DENIED)) {
        if (zclock_mono () - set > 3000)
            fail_msg ("broker B still runs agent-x's tick 3 s after A put it in plan mode");
        zclock_sleep (50);
    }
    print_message ("broker B obeyed the mode set at A after %" PRId64 " ms\n", zclock_mono () - set);
    s_expect (at_b, ledger_b, "echo", "{\"message\": \"read\"}", "agent-x", "ok");
    s_expect (at_b, ledger_b, "tick", "{\"ms\": 1}", "agent-y", "ok");

    //  Each broker answers for every row of the shared store
    size_t count_a = zhashx_size (ledger_a), count_b = zhashx_size (ledger_b);
    json_t *records = s_audit_wait (a.front, NULL, NULL, count_a + count_b);
    assert_int_equal (s_match (records, ledger_b, "beta"), 0);
    json_decref (records);
    records = s_audit_wait (b.front, NULL, NULL, count_a + count_b);
    assert_int_equal (s_match (records, ledger_a, "alpha"), 0);
    json_decref (records);

    //  Both asked, every record printed once
    records = s_audit_wait (ends, NULL, NULL, count_a + count_b);
    zhashx_t *places = zhashx_new ();
    size_t index;
    json_t *record;
    json_array_foreach (records, index, record) {
        char place [256];
        snprintf (place, sizeof (place), "%s/%" JSON_INTEGER_FORMAT, s_str (record, "broker"),
                  json_integer_value (json_object_get (record, "seq")));
        if (zhashx_insert (places, place, (void *) 1))
            fail_msg ("record %s printed twice", place);
    }
    zhashx_destroy (&places);
    assert_int_equal (s_match (records, ledger_a, "alpha"), 0);
    assert_int_equal (s_match (records, ledger_b, "beta"), 0);
    json_decref (records);

    //  Two chains, both whole
    int status;
    json_t *chains = s_verify (ends, NULL, &status);
    assert_int_equal (status, 0);
    assert_int_equal (json_array_size (chains), 2);
    json_t *alpha = s_chain (chains, "alpha");
    json_t *beta = s_chain (chains, "beta");
    assert_non_null (alpha);
    assert_non_null (beta);
    assert_true (json_is_true (json_object_get (alpha, "ok")));
    assert_true (json_is_true (json_object_get (beta, "ok")));
    assert_int_equal (json_integer_value (json_object_get (alpha, "checked")), (json_int_t) count_a);
    assert_int_equal (json_integer_value (json_object_get (beta, "checked")), (json_int_t) count_b);
    json_decref (chains);

    zhashx_destroy (&ledger_a);
    zhashx_destroy (&ledger_b);
    dsh_client_destroy (&at_a);
    dsh_client_destroy (&at_b);
    zstr_free (&ends);
    unlink (config);
    zstr_free (&config);
}

//  ---------------------------------------------------------------------
//  5. CURVE: who called, who approved, who may read

//  keys/NAME (and NAME_secret) made with `dsh keygen`; its public part
//  copied to allow/ if allowed. Returns the path (caller frees).
static char *
s_keygen (const char *name, const char *role, const char *const *flags, bool allowed)
{
    char *path = zsys_sprintf ("%s/keys/%s", s_root, name);
    const char *args [16] = { "keygen", path, "--role", role };
    size_t count = 4;
    for (size_t index = 0; flags && flags [index]; index++)
        args [count++] = flags [index];
    args [count] = NULL;
    char *output = NULL;
    if (dsh_testkit_cli_merged ("tcp://127.0.0.1:1", args, CLI_WAIT_MS, &output) != 0)
        fail_msg ("dsh keygen %s: %s", name, output);
    zstr_free (&output);
    if (allowed) {
        zcert_t *cert = zcert_load (path);
        assert_non_null (cert);
        char *public_path = zsys_sprintf ("%s/allow/%s", s_root, name);
        assert_int_equal (zcert_save_public (cert, public_path), 0);
        zstr_free (&public_path);
        zcert_destroy (&cert);
    }
    return path;
}

static const char s_permission_chain [] =
    "chain\n"
    "    stage\n"
    "        name = \"permission\"\n"
    "        kind = \"permission\"\n"
    "        approval_timeout_ms = 30000\n"
    "        rule\n"
    "            tool = \"tick\"\n"
    "            action = \"ask\"\n";

//  The reply to one AUDIT {} sent with key on a CURVE socket of our own
//  (the process's client keys stay off): its command into command, its
//  decoded body (caller destroys).
static dsh_doc_t *
s_raw_audit (const char *front, const char *key, const char *broker_key, char *command, zframe_t **body_p)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    assert_non_null (sock);
    zcert_t *cert = zcert_load (key);
    zcert_t *server = zcert_load (broker_key);
    assert_non_null (cert);
    assert_non_null (server);
    zcert_apply (cert, sock);
    zsock_set_curve_serverkey (sock, zcert_public_txt (server));
    zcert_destroy (&cert);
    zcert_destroy (&server);
    assert_int_equal (zsock_connect (sock, "%s", front), 0);
    msgpack_sbuffer body;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"id\": \"q1\"}", &body, error, sizeof (error)), 0);
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_AUDIT);
    zmsg_addmem (msg, body.data, body.size);
    msgpack_sbuffer_destroy (&body);
    assert_int_equal (zmsg_send (&msg, sock), 0);
    zsock_set_rcvtimeo (sock, 10000);
    zmsg_t *reply = zmsg_recv (sock);
    if (!reply)
        fail_msg ("no reply to AUDIT with key %s", key);
    assert_int_equal (zmsg_size (reply), 4);
    zframe_t *delimiter = zmsg_pop (reply);
    zframe_destroy (&delimiter);
    char *protocol = zmsg_popstr (reply);
    assert_string_equal (protocol, DSH_PROTOCOL);
    zstr_free (&protocol);
    char *got = zmsg_popstr (reply);
    snprintf (command, DSH_COMMAND_MAX + 1, "%s", got);
    zstr_free (&got);
    *body_p = zmsg_pop (reply);
    zmsg_destroy (&reply);
    zsock_destroy (&sock);
    dsh_doc_t *doc = dsh_doc_new (zframe_data (*body_p), zframe_size (*body_p), error, sizeof (error));
    assert_non_null (doc);
    return doc;
}

static void
test_curve_callers_and_approvers (void **state)
{
    rig_t *rig = (rig_t *) *state;
    char *keys = zsys_sprintf ("%s/keys", s_root);
    char *allow = zsys_sprintf ("%s/allow", s_root);
    assert_int_equal (mkdir (keys, 0700), 0);
    assert_int_equal (mkdir (allow, 0700), 0);
    char *broker_key = s_keygen ("broker", DSH_ROLE_ADMIN, NULL, false);
    char *demo_key = s_keygen ("demo", DSH_ROLE_COMPONENT, (const char *[]) { "--components", "demo", NULL }, true);
    char *agent_key = s_keygen ("agent", DSH_ROLE_AGENT,
                                (const char *[]) { "--agent", "agent-x", "--name", "agent-x-key", NULL }, true);
    char *alice_key = s_keygen ("alice", DSH_ROLE_APPROVER, (const char *[]) { "--name", "alice-approver", NULL },
                                true);
    char *bob_key = s_keygen ("bob", DSH_ROLE_APPROVER, (const char *[]) { "--name", "bob-approver", NULL }, true);
    char *auditor_key = s_keygen ("ops", DSH_ROLE_AUDITOR, (const char *[]) { "--name", "ops", NULL }, true);
    char *store = zsys_sprintf ("%s/curve.db", s_root);
    char *config = s_config_file ("permission", s_permission_chain);
    endpoints_t at;
    s_broker (rig, &s_any, &at, (const char *[]) { "-c", config, "--cert", broker_key, "--allow", allow,
                                                   "--name", "curve", "--store", store, NULL });
    s_demo (rig, at.front, "demo", (const char *[]) { "--cert", demo_key, "--broker-cert", broker_key, NULL });
    #define AS(key) "--cert", key, "--broker-cert", broker_key
    int64_t give_up = zclock_mono () + 10000;
    bool listed = false;
    while (!listed && zclock_mono () < give_up) {
        char *output = NULL;
        dsh_testkit_cli (at.front, (const char *[]) { AS (agent_key), "tools", NULL }, CLI_WAIT_MS, &output);
        listed = output && strstr (output, "\"tick\"");
        zstr_free (&output);
        if (!listed)
            zclock_sleep (100);
    }
    assert_true (listed);

    //  bob is there to be asked; alice decides
    int in [2];
    assert_int_equal (pipe2 (in, O_CLOEXEC), 0);
    dsh_testproc_t *approver = s_keep (rig, dsh_testproc_start_input ((const char *[]) {
        CLI, "--broker", at.front, AS (bob_key), "approver", NULL }, in [0]));
    close (in [0]);
    rig->approver_stdin = in [1];

    //  The agent's tick waits for a human once the stage has heard bob
    json_t *pending = NULL;
    dsh_testproc_t *call = NULL;
    give_up = zclock_mono () + 15000;
    while (!pending && zclock_mono () < give_up) {
        call = s_keep (rig, dsh_testproc_start ((const char *[]) {
            CLI, "--broker", at.front, AS (agent_key), "call", "tick", "{\"ms\": 1}", "--timeout-ms", "30000",
            NULL }));
        while (!pending && dsh_testproc_wait (call, 0) < 0 && zclock_mono () < give_up) {
            char *line = dsh_testproc_wait_line (approver, "\"pending\"", 100);
            pending = line? json_loads (line, 0, NULL): NULL;
            zstr_free (&line);
        }
        if (!pending) {
            //  Refused at once: no approver yet
            int status = dsh_testproc_wait (call, 10000);
            const char *output = dsh_testproc_output (call, 1000);
            if (status != 1 || !strstr (output, "requires approval"))
                fail_msg ("the tick ended %d before an approver saw it: %s", status, output);
            s_drop (rig, &call);
            zclock_sleep (100);
        }
    }
    assert_non_null (pending);
    const char *request = s_str (pending, "id");
    char *call_id = strdup (s_str (pending, "callId"));
    assert_string_equal (s_str (pending, "tool"), "tick");
    assert_int_equal (dsh_testkit_cli (at.front, (const char *[]) { AS (alice_key), "approve", request, NULL },
                                       CLI_WAIT_MS, NULL), 0);
    assert_int_equal (dsh_testproc_wait (call, 15000), 0);

    //  The auditor reads who called and who approved
    json_t *records = s_audit_wait (at.front, (const char *[]) { AS (auditor_key), NULL },
                                    (const char *[]) { "--call", call_id, NULL }, 1);
    json_t *record = json_array_get (records, 0);
    assert_string_equal (s_str (record, "outcome"), "ok");
    assert_string_equal (s_str (record, "tool"), "tick");
    assert_string_equal (s_str (record, "agent"), "agent-x");
    assert_string_equal (s_str (record, "callerId"), "agent-x-key");
    json_t *caller = json_object_get (record, "caller");
    assert_string_equal (s_str (caller, "name"), "agent-x-key");
    assert_string_equal (s_str (caller, "role"), DSH_ROLE_AGENT);
    assert_string_equal (s_str (caller, "agent"), "agent-x");
    zcert_t *agent_cert = zcert_load (agent_key);
    assert_non_null (agent_cert);
    assert_string_equal (s_str (caller, "key"), zcert_public_txt (agent_cert));
    zcert_destroy (&agent_cert);
    json_t *approval = json_object_get (record, "approval");
    assert_string_equal (s_str (approval, "approver"), "alice-approver");
    assert_string_equal (s_str (approval, "decision"), "allowed");
    assert_string_equal (s_str (approval, "request"), request);
    assert_true (json_integer_value (json_object_get (approval, "atMs"))
              >= json_integer_value (json_object_get (record, "receivedMs")));
    json_decref (records);
    int status;
    json_t *chains = s_verify (at.front, (const char *[]) { AS (auditor_key), NULL }, &status);
    assert_int_equal (status, 0);
    assert_non_null (s_chain (chains, "curve"));
    json_decref (chains);

    //  An agent's key may not read the trail
    char *output = NULL;
    status = dsh_testkit_cli_merged (at.front, (const char *[]) { AS (agent_key), "audit", "--json", NULL },
                                     CLI_WAIT_MS, &output);
    if (status == 0 || !strstr (output, "auditor"))
        fail_msg ("an agent's dsh audit: exit %d, %s", status, output);
    zstr_free (&output);
    char command [DSH_COMMAND_MAX + 1];
    zframe_t *body = NULL;
    dsh_doc_t *doc = s_raw_audit (at.front, agent_key, broker_key, command, &body);
    assert_string_equal (command, DSH_ERROR);
    const msgpack_object *root = dsh_doc_root (doc);
    assert_true (dsh_str_eq (dsh_map_get (root, "code"), DSH_E_FORBIDDEN));
    const msgpack_object *message = dsh_map_get (root, "message");
    assert_true (message && message->type == MSGPACK_OBJECT_STR
                 && memmem (message->via.str.ptr, message->via.str.size, "auditor", 7));
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    //  ... and the auditor's may, on the same path
    doc = s_raw_audit (at.front, auditor_key, broker_key, command, &body);
    assert_string_equal (command, DSH_AUDIT);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    #undef AS

    json_decref (pending);
    zstr_free (&call_id);
    unlink (config);
    zstr_free (&config);
    zstr_free (&store);
    zstr_free (&auditor_key);
    zstr_free (&bob_key);
    zstr_free (&alice_key);
    zstr_free (&agent_key);
    zstr_free (&demo_key);
    zstr_free (&broker_key);
    zstr_free (&allow);
    zstr_free (&keys);
}

//  ---------------------------------------------------------------------
//  6. load: every answered call exactly one record

//  The store behind a broker, as the test reads it and holds it: by the
//  engines' own libraries, not through dsh
typedef struct {
    const char *location;
    bool postgresql;
    sqlite3 *db;                        //  holding the write lock, or NULL
    PGconn *conn;                       //  holding the chain's head, or NULL
} store_t;

//  callId -> how many records it has (as a count in the pointer), and the
//  outcome of its first, for chain broker; *total is every record's count.
static zhashx_t *
s_store_rows (store_t *store, const char *broker, zhashx_t **outcomes_p, size_t *total)
{
    zhashx_t *counts = zhashx_new ();
    zhashx_t *outcomes = zhashx_new ();
    zhashx_set_destructor (outcomes, (zhashx_destructor_fn *) zstr_free);
    *total = 0;
    const char *sql = "SELECT call_id, outcome FROM dsh_audit WHERE broker = $1";
    if (store->postgresql) {
        PGconn *conn = PQconnectdb (store->location);
        if (PQstatus (conn) != CONNECTION_OK)
            fail_msg ("%s: %s", store->location, PQerrorMessage (conn));
        const char *values [] = { broker };
        PGresult *result = PQexecParams (conn, sql, 1, NULL, values, NULL, NULL, 0);
        if (PQresultStatus (result) != PGRES_TUPLES_OK)
            fail_msg ("%s: %s", sql, PQerrorMessage (conn));
        for (int row = 0; row < PQntuples (result); row++) {
            const char *call_id = PQgetvalue (result, row, 0);
            zhashx_update (counts, call_id, (void *) ((uintptr_t) zhashx_lookup (counts, call_id) + 1));
            if (!zhashx_lookup (outcomes, call_id))
                zhashx_insert (outcomes, call_id, strdup (PQgetvalue (result, row, 1)));
            (*total)++;
        }
        PQclear (result);
        PQfinish (conn);
    }
    else {
        sqlite3 *db = NULL;
        assert_int_equal (sqlite3_open_v2 (store->location, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        sqlite3_busy_timeout (db, 5000);
        sqlite3_stmt *statement = NULL;
        assert_int_equal (sqlite3_prepare_v2 (db, sql, -1, &statement, NULL), SQLITE_OK);
        sqlite3_bind_text (statement, 1, broker, -1, SQLITE_STATIC);
        int rc;
        while ((rc = sqlite3_step (statement)) == SQLITE_ROW) {
            const char *call_id = (const char *) sqlite3_column_text (statement, 0);
            zhashx_update (counts, call_id, (void *) ((uintptr_t) zhashx_lookup (counts, call_id) + 1));
            if (!zhashx_lookup (outcomes, call_id))
                zhashx_insert (outcomes, call_id, strdup ((const char *) sqlite3_column_text (statement, 1)));
            (*total)++;
        }
        if (rc != SQLITE_DONE)
            fail_msg ("%s: %s", sql, sqlite3_errmsg (db));
        sqlite3_finalize (statement);
        sqlite3_close (db);
    }
    *outcomes_p = outcomes;
    return counts;
}

//  Records of chain broker.
static size_t
s_store_count (store_t *store, const char *broker)
{
    zhashx_t *outcomes = NULL;
    size_t total = 0;
    zhashx_t *counts = s_store_rows (store, broker, &outcomes, &total);
    zhashx_destroy (&counts);
    zhashx_destroy (&outcomes);
    return total;
}

//  Holds the chain's writes: the broker's writer waits (and does not
//  fail: SQLite's busy timeout is 5 s, PostgreSQL waits for the row) and
//  its records queue up.
static void
s_store_lock (store_t *store, const char *broker)
{
    if (store->postgresql) {
        store->conn = PQconnectdb (store->location);
        assert_int_equal (PQstatus (store->conn), CONNECTION_OK);
        PQclear (PQexec (store->conn, "BEGIN"));
        const char *values [] = { broker };
        PGresult *result = PQexecParams (store->conn, "SELECT seq FROM dsh_audit_head WHERE broker = $1 FOR UPDATE",
                                         1, NULL, values, NULL, NULL, 0);
        assert_int_equal (PQresultStatus (result), PGRES_TUPLES_OK);
        assert_int_equal (PQntuples (result), 1);
        PQclear (result);
    }
    else {
        assert_int_equal (sqlite3_open (store->location, &store->db), SQLITE_OK);
        sqlite3_busy_timeout (store->db, 5000);
        assert_int_equal (sqlite3_exec (store->db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    }
}

static void
s_store_unlock (store_t *store)
{
    if (store->conn) {
        PQclear (PQexec (store->conn, "ROLLBACK"));
        PQfinish (store->conn);
        store->conn = NULL;
    }
    if (store->db) {
        sqlite3_exec (store->db, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close (store->db);
        store->db = NULL;
    }
}

//  One client thread: keeps LOAD_IN_FLIGHT calls of every kind in flight
//  until it has sent its quota (or as many as the test allows so far),
//  unless paused; sends one probe when asked. It only records (no cmocka
//  here): the test reads what it found.
typedef struct {
    int index;
    const char *front;
    size_t quota;
    atomic_size_t *allowed;             //  calls it may have sent by now
    atomic_bool *paused;
    atomic_bool *quit;
    atomic_int *probe_asked;            //  a generation: a probe is wanted when it moves
    atomic_int probe_answered;          //  the last generation whose probe was answered
    atomic_size_t sent;
    atomic_size_t answered;
    atomic_size_t in_flight;
    zhashx_t *ledger;                   //  callId -> outcome, answered by a broker
    zhashx_t *made;                     //  callId -> code, answered by the client itself
    char problem [512];                 //  the first thing that went wrong, or ""
    pthread_t thread;
} pump_t;

//  The n-th call of a thread: what it calls, how long it may take, and
//  whether it is cancelled at once.
static void
s_load_call (size_t n, const char **name, const char **args, int *timeout_ms, bool *cancel)
{
    *timeout_ms = 10000;
    *cancel = false;
    *args = "{}";
    switch (n % 20) {
        case 9:  *name = "no_such_tool"; break;
        case 10: *name = "echo"; *args = "{\"message\": 7}"; break;
        case 11: *name = "fail"; break;
        case 12: *name = "sleep_ms"; *args = "{\"ms\": 2000}"; *timeout_ms = 150; break;
        case 13:
        case 14:
        case 15: *name = "sleep_ms"; *args = "{\"ms\": 30}"; break;
        case 16: *name = "tick"; *args = "{\"ms\": 30}"; break;
        case 17: *name = "sleep_ms"; *args = "{\"ms\": 5000}"; *cancel = true; break;
        default: *name = "echo"; *args = "{\"message\": \"load\"}"; break;
    }
}

static void
s_pump_problem (pump_t *pump, const char *format, ...)
{
    if (*pump->problem)
        return;
    va_list args;
    va_start (args, format);
    vsnprintf (pump->problem, sizeof (pump->problem), format, args);
    va_end (args);
}

static void *
s_pump (void *arg)
{
    pump_t *pump = (pump_t *) arg;
    dsh_client_t *client = dsh_client_new (pump->front);
    int probe_seen = 0;
    bool probing = false;
    size_t sequence = 0;
    while (!atomic_load (pump->quit)) {
        int probe = atomic_load (pump->probe_asked);
        if (probe != probe_seen && !probing && atomic_load (&pump->in_flight) == 0) {
            char call_id [64];
            snprintf (call_id, sizeof (call_id), "t%d-probe-%d", pump->index, probe);
            if (!dsh_testkit_send_json (client, call_id, "echo", "{\"message\": \"probe\"}", 10000))
                s_pump_problem (pump, "cannot send %s", call_id);
            probe_seen = probe;
            probing = true;
            atomic_fetch_add (&pump->in_flight, 1);
        }
        while (!probing && !atomic_load (pump->paused) && atomic_load (&pump->in_flight) < LOAD_IN_FLIGHT
               && atomic_load (&pump->sent) < pump->quota && atomic_load (&pump->sent) < atomic_load (pump->allowed)) {
            const char *name, *args;
            int timeout_ms;
            bool cancel;
            s_load_call (sequence, &name, &args, &timeout_ms, &cancel);
            char call_id [64];
            snprintf (call_id, sizeof (call_id), "t%d-%zu", pump->index, sequence++);
            if (!dsh_testkit_send_json (client, call_id, name, args, timeout_ms)) {
                s_pump_problem (pump, "cannot send %s", call_id);
                break;
            }
            if (cancel && dsh_client_cancel (client, call_id))
                s_pump_problem (pump, "cannot cancel %s", call_id);
            atomic_fetch_add (&pump->sent, 1);
            atomic_fetch_add (&pump->in_flight, 1);
        }
        dsh_reply_t *reply = dsh_client_recv (client, 20);
        if (!reply)
            continue;
        const char *call_id = dsh_reply_call_id (reply);
        if (streq (dsh_reply_command (reply), DSH_RESULT) && call_id) {
            const char *outcome = s_outcome (reply);
            const char *text = dsh_reply_text (reply)? dsh_reply_text (reply): "";
            //  What the client SDK answers itself (dsh_client.c, s_move and
            //  s_expire_calls) no broker sent, nor recorded
            bool made = streq (outcome, DSH_E_BROKER_GONE)
                     || (streq (outcome, DSH_E_TIMEOUT) && strstr (text, "no answer from the broker"));
            if (zhashx_lookup (pump->ledger, call_id) || zhashx_lookup (pump->made, call_id))
                s_pump_problem (pump, "a second answer for %s: %s %s", call_id, outcome, text);
            else
                zhashx_insert (made? pump->made: pump->ledger, call_id, strdup (outcome));
            if (strstr (call_id, "-probe-")) {
                probing = false;
                atomic_store (&pump->probe_answered, probe_seen);
            }
            atomic_fetch_sub (&pump->in_flight, 1);
            atomic_fetch_add (&pump->answered, 1);
        }
        else
        if (!streq (dsh_reply_command (reply), DSH_PROGRESS))
            s_pump_problem (pump, "a %s reply: %s", dsh_reply_command (reply),
                            dsh_reply_text (reply)? dsh_reply_text (reply): "");
        dsh_reply_destroy (&reply);
    }
    dsh_client_destroy (&client);
    return NULL;
}

struct _load_t {
    pump_t pumps [LOAD_THREADS];
    bool running [LOAD_THREADS];
    atomic_size_t allowed;              //  per thread
    atomic_bool paused;
    atomic_bool quit;
    atomic_int probe_asked;
};

//  Starts the threads against front, total calls in all, allowed calls
//  each to begin with.
static load_t *
s_load_new (const char *front, size_t total, size_t allowed)
{
    load_t *self = (load_t *) zmalloc (sizeof (load_t));
    assert_non_null (self);
    atomic_init (&self->allowed, allowed);
    atomic_init (&self->paused, false);
    atomic_init (&self->quit, false);
    atomic_init (&self->probe_asked, 0);
    for (int index = 0; index < LOAD_THREADS; index++) {
        pump_t *pump = &self->pumps [index];
        pump->index = index;
        pump->front = front;
        pump->quota = total / LOAD_THREADS;
        pump->allowed = &self->allowed;
        pump->paused = &self->paused;
        pump->quit = &self->quit;
        pump->probe_asked = &self->probe_asked;
        pump->ledger = s_ledger_new ();
        pump->made = s_ledger_new ();
        self->running [index] = pthread_create (&pump->thread, NULL, s_pump, pump) == 0;
        assert_true (self->running [index]);
    }
    return self;
}

//  Stops the threads (those still running); safe twice.
static void
s_load_stop (load_t *self)
{
    atomic_store (&self->quit, true);
    for (int index = 0; index < LOAD_THREADS; index++)
        if (self->running [index]) {
            pthread_join (self->pumps [index].thread, NULL);
            self->running [index] = false;
        }
}

static void
s_load_destroy (load_t **self_p)
{
    if (*self_p) {
        load_t *self = *self_p;
        s_load_stop (self);
        for (int index = 0; index < LOAD_THREADS; index++) {
            zhashx_destroy (&self->pumps [index].ledger);
            zhashx_destroy (&self->pumps [index].made);
        }
        free (self);
        *self_p = NULL;
    }
}

static size_t
s_load_answered (load_t *load)
{
    size_t answered = 0;
    for (int index = 0; index < LOAD_THREADS; index++)
        answered += atomic_load (&load->pumps [index].answered);
    return answered;
}

static size_t
s_load_in_flight (load_t *load)
{
    size_t in_flight = 0;
    for (int index = 0; index < LOAD_THREADS; index++)
        in_flight += atomic_load (&load->pumps [index].in_flight);
    return in_flight;
}

//  Answers from brokers so far, and of them refused AUDIT_UNAVAILABLE.
static size_t
s_load_ledgers (load_t *load, zhashx_t *extra, size_t *refused)
{
    size_t answers = extra? zhashx_size (extra): 0;
    *refused = extra? s_ledger_count (extra, DSH_E_AUDIT_UNAVAILABLE): 0;
    for (int index = 0; index < LOAD_THREADS; index++) {
        answers += zhashx_size (load->pumps [index].ledger);
        *refused += s_ledger_count (load->pumps [index].ledger, DSH_E_AUDIT_UNAVAILABLE);
    }
    return answers;
}

//  Fails unless every thread is well; the first problem says why.
static void
s_load_check (load_t *load)
{
    for (int index = 0; index < LOAD_THREADS; index++)
        if (*load->pumps [index].problem)
            fail_msg ("client thread %d: %s", index, load->pumps [index].problem);
}

static void
s_load_wait_answered (load_t *load, size_t answered, int64_t give_up)
{
    while (s_load_answered (load) < answered) {
        s_load_check (load);
        if (zclock_mono () > give_up)
            fail_msg ("only %zu calls answered, waiting for %zu", s_load_answered (load), answered);
        zclock_sleep (20);
    }
}

//  Stops sending, and waits until every call sent is answered.
static void
s_load_pause (load_t *load)
{
    atomic_store (&load->paused, true);
    int64_t give_up = zclock_mono () + 20000;
    while (s_load_in_flight (load) > 0) {
        s_load_check (load);
        if (zclock_mono () > give_up)
            fail_msg ("%zu calls still open 20 s after the clients paused", s_load_in_flight (load));
        zclock_sleep (10);
    }
}

//  The slow tools' component killed -9 with 8 calls on it, beside a
//  replica, and a load component with it. Returns the client the 8 calls
//  were sent on (s_load_kill_answers reads them).
static dsh_client_t *
s_load_kill (rig_t *rig, const char *front, dsh_testproc_t **slow_p, dsh_testproc_t **replica_p)
{
    dsh_client_t *client = dsh_client_new (front);
    for (int index = 0; index < 4; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "slow-tick-%d", index);
        assert_non_null (dsh_testkit_send_json (client, call_id, "slow_tick", "{\"ms\": 5000}", 30000));
        snprintf (call_id, sizeof (call_id), "slow-sleep-%d", index);
        assert_non_null (dsh_testkit_send_json (client, call_id, "slow_sleep_ms", "{\"ms\": 5000}", 30000));
    }
    assert_int_equal (dsh_testkit_wait_in_flight (front, "slow-1", 8, 10000), 0);
    s_demo (rig, front, "slow-2", (const char *[]) { "--prefix", "slow_", "--workers", "16", NULL });
    s_wait_providers (front, "slow_sleep_ms", 2);
    assert_int_equal (dsh_testkit_in_flight (front, "slow-1"), 8);
    dsh_testproc_signal (*slow_p, SIGKILL);
    dsh_testproc_signal (*replica_p, SIGKILL);
    s_drop (rig, slow_p);
    s_drop (rig, replica_p);
    s_demo (rig, front, "r3", (const char *[]) { "--workers", "32", NULL });
    return client;
}

//  The killed component's tick (not idempotent) is answered TOOL_GONE, its
//  sleep_ms (read-only, idempotent) runs on the replica.
static void
s_load_kill_answers (dsh_client_t **client_p, zhashx_t *ledger)
{
    dsh_client_t *client = *client_p;
    for (int count = 0; count < 8; count++) {
        dsh_reply_t *reply = dsh_client_recv (client, 20000);
        if (!reply)
            fail_msg ("no answer for a slow call 20 s after its component was killed");
        const char *call_id = dsh_reply_call_id (reply);
        assert_non_null (call_id);
        const char *outcome = s_outcome (reply);
        if (strstr (call_id, "tick"))
            assert_string_equal (outcome, DSH_E_TOOL_GONE);
        else
            assert_string_equal (outcome, "ok");
        assert_int_equal (zhashx_insert (ledger, call_id, strdup (outcome)), 0);
        dsh_reply_destroy (&reply);
    }
    assert_null (dsh_client_recv (client, 200));
    dsh_client_destroy (client_p);
}

//  A clean restart under load: clients paused, the store held so that
//  records queue in the broker, SIGTERM; the old broker writes its queue
//  before it exits. Each client then finds its broker gone (a probe the
//  client itself answers BROKER_GONE), and the same broker comes back.
static dsh_testproc_t *
s_load_restart (rig_t *rig, load_t *load, dsh_testproc_t **broker_p, const endpoints_t *at,
                const char *const *flags, store_t *store, const char *name, zhashx_t *extra)
{
    s_load_pause (load);
    s_store_lock (store, name);
    size_t before = s_load_answered (load);
    atomic_store (&load->allowed, SIZE_MAX);
    atomic_store (&load->paused, false);
    zclock_sleep (300);
    s_load_pause (load);
    size_t burst = s_load_answered (load) - before;
    json_int_t queued = s_audit_stat (at->front, "queueBytes");
    if (burst == 0 || queued == 0)
        fail_msg ("nothing queued in the broker (%zu calls answered, %lld bytes queued)", burst,
                  (long long) queued);
    //  The store is let go only once the broker is stopping: what it had
    //  queued is written on the way out, or never
    dsh_testproc_signal (*broker_p, SIGTERM);
    char *line = dsh_testproc_wait_line (*broker_p, "dsh-broker: stopping", 10000);
    assert_non_null (line);
    zstr_free (&line);
    s_store_unlock (store);
    int status = dsh_testproc_wait (*broker_p, 15000);
    assert_int_equal (status, 0);
    s_drop (rig, broker_p);
    size_t refused;
    size_t answers = s_load_ledgers (load, extra, &refused);
    size_t written = s_store_count (store, name);
    print_message ("clean restart: %zu calls answered with the store held (%lld bytes queued); %zu records "
                   "written by the stopped broker, for %zu answers\n", burst, (long long) queued, written,
                   answers - refused);
    assert_int_equal (written, answers - refused);

    //  Each client gives the silent broker up
    int probe = atomic_fetch_add (&load->probe_asked, 1) + 1;
    int64_t give_up = zclock_mono () + 10000;
    for (int index = 0; index < LOAD_THREADS; index++)
        while (atomic_load (&load->pumps [index].probe_answered) != probe) {
            s_load_check (load);
            if (zclock_mono () > give_up)
                fail_msg ("client thread %d's probe unanswered", index);
            zclock_sleep (10);
        }
    endpoints_t bound;
    dsh_testproc_t *broker = s_broker (rig, at, &bound, flags);
    assert_string_equal (bound.front, at->front);
    return broker;
}

static void
test_load_one_record_each (void **state)
{
    rig_t *rig = (rig_t *) *state;
    bool postgresql = streq (rig->variant, "postgresql");
    char *location = postgresql? strdup (s_postgres (rig)): zsys_sprintf ("%s/load.db", s_root);
    store_t store = { .location = location, .postgresql = postgresql };
    const char *name = postgresql? "load-pg": "load-sqlite";
    const char *flags [] = { "--name", name, "--store", location, "--audit", "required", NULL };
    endpoints_t at;
    dsh_testproc_t *broker = s_broker (rig, &s_any, &at, flags);
    dsh_testproc_t *replica = s_demo (rig, at.front, "r1", (const char *[]) { "--workers", "32", NULL });
    s_demo (rig, at.front, "r2", (const char *[]) { "--workers", "32", NULL });
    dsh_testproc_t *slow = s_demo (rig, at.front, "slow-1",
                                   (const char *[]) { "--prefix", "slow_", "--workers", "16", NULL });
    s_wait_providers (at.front, "echo", 2);
    s_wait_providers (at.front, "slow_tick", 1);

    size_t total = dsh_testkit_long ()? LOAD_CALLS_LONG: LOAD_CALLS;
    int64_t started = zclock_mono ();
    int64_t give_up = started + LOAD_LIMIT_MS;
    zhashx_t *extra = s_ledger_new ();
    //  Each event happens with calls running: the load may run ahead of the
    //  test only so far (the next event's point and a margin)
    rig->load = s_load_new (at.front, total, total / LOAD_THREADS / 2);
    load_t *load = rig->load;
    s_load_wait_answered (load, total / 4, give_up);
    int64_t killed = zclock_mono ();
    dsh_client_t *slow_client = s_load_kill (rig, at.front, &slow, &replica);
    atomic_store (&load->allowed, total / LOAD_THREADS * 7 / 10);
    s_load_kill_answers (&slow_client, extra);
    print_message ("killed -9 with 8 slow calls on it (and a replica of the load's tools): 4 TOOL_GONE, 4 run on "
                   "the other replica, %" PRId64 " ms after the kill\n", zclock_mono () - killed);
    s_load_wait_answered (load, total * 6 / 10, give_up);
    broker = s_load_restart (rig, load, &broker, &at, flags, &store, name, extra);
    s_wait_providers (at.front, "echo", 2);
    s_wait_providers (at.front, "slow_tick", 1);
    atomic_store (&load->paused, false);
    s_load_wait_answered (load, total + LOAD_THREADS, give_up);
    s_load_pause (load);
    int64_t run_ms = zclock_mono () - started;
    s_load_stop (load);
    s_load_check (load);

    //  Every broker answer is one record; no call has two; the client's
    //  own answers (the probes) have none
    size_t refused;
    size_t answers = s_load_ledgers (load, extra, &refused);
    size_t expected = answers - refused;
    give_up = zclock_mono () + 15000;
    while (s_store_count (&store, name) < expected && zclock_mono () < give_up)
        zclock_sleep (100);
    zhashx_t *outcomes = NULL;
    size_t records = 0;
    zhashx_t *counts = s_store_rows (&store, name, &outcomes, &records);
    zhashx_t *by_outcome = zhashx_new ();
    for (int index = 0; index <= LOAD_THREADS; index++) {
        zhashx_t *ledger = index < LOAD_THREADS? load->pumps [index].ledger: extra;
        for (const char *outcome = (const char *) zhashx_first (ledger); outcome;
             outcome = (const char *) zhashx_next (ledger)) {
            const char *call_id = (const char *) zhashx_cursor (ledger);
            uintptr_t count = (uintptr_t) zhashx_lookup (counts, call_id);
            uintptr_t want = streq (outcome, DSH_E_AUDIT_UNAVAILABLE)? 0: 1;
            if (count != want)
                fail_msg ("call %s (answered %s) has %zu records", call_id, outcome, (size_t) count);
            if (want && !streq ((const char *) zhashx_lookup (outcomes, call_id), outcome))
                fail_msg ("call %s was answered %s, its record says %s", call_id, outcome,
                          (const char *) zhashx_lookup (outcomes, call_id));
            zhashx_update (by_outcome, outcome, (void *) ((uintptr_t) zhashx_lookup (by_outcome, outcome) + 1));
        }
    }
    size_t made = 0;
    for (int index = 0; index < LOAD_THREADS; index++) {
        zhashx_t *own = load->pumps [index].made;
        made += zhashx_size (own);
        for (const char *code = (const char *) zhashx_first (own); code; code = (const char *) zhashx_next (own)) {
            const char *call_id = (const char *) zhashx_cursor (own);
            if (!strstr (call_id, "-probe-"))
                fail_msg ("call %s was answered %s by the client, not by a broker", call_id, code);
            assert_string_equal (code, DSH_E_BROKER_GONE);
            assert_null (zhashx_lookup (counts, call_id));
        }
    }
    assert_int_equal (made, LOAD_THREADS);
    assert_int_equal (records, expected);
    char summary [512] = "";
    for (void *count = zhashx_first (by_outcome); count; count = zhashx_next (by_outcome)) {
        size_t length = strlen (summary);
        snprintf (summary + length, sizeof (summary) - length, " %s %zu", (const char *) zhashx_cursor (by_outcome),
                  (size_t) (uintptr_t) count);
    }
    print_message ("%s: %zu calls in %" PRId64 " ms (%d threads x %d in flight); %zu records, one per broker "
                   "answer:%s\n", rig->variant, answers, run_ms, LOAD_THREADS, LOAD_IN_FLIGHT, records, summary);
    //  Every kind of answer happened
    const char *kinds [] = { "ok", DSH_E_UNKNOWN_TOOL, DSH_E_INVALID_ARGS, DSH_E_TOOL_FAILED, DSH_E_TIMEOUT,
                             DSH_E_CANCELLED, DSH_E_TOOL_GONE };
    for (size_t index = 0; index < sizeof (kinds) / sizeof (kinds [0]); index++)
        if (!zhashx_lookup (by_outcome, kinds [index]))
            fail_msg ("no call was answered %s", kinds [index]);
    s_verified (at.front, name, records);

    zhashx_destroy (&by_outcome);
    zhashx_destroy (&counts);
    zhashx_destroy (&outcomes);
    zhashx_destroy (&extra);
    s_load_destroy (&rig->load);
    zstr_free (&location);
}

//  ---------------------------------------------------------------------

static int
s_setup (void **state)
{
    (void) state;
    return mkdtemp (s_root)? 0: -1;
}

static int
s_teardown (void **state)
{
    (void) state;
    char *command = zsys_sprintf ("rm -rf %s", s_root);
    int rc = system (command);
    zstr_free (&command);
    return rc == 0? 0: -1;
}

int
main (void)
{
    zsys_init ();
    //  The long suite runs the load alone, with its long count
    if (dsh_testkit_long ())
        cmocka_set_test_filter ("test_load_one_record_each*");
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_required_postgres_outage, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_best_effort_postgres_outage, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_full_disk, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_two_brokers_one_database, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_curve_callers_and_approvers, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_prestate_setup_teardown (test_load_one_record_each, s_rig_setup, s_rig_teardown,
                                                  (void *) "sqlite"),
        { "test_load_one_record_each_postgresql", test_load_one_record_each, s_rig_setup, s_rig_teardown,
          (void *) "postgresql" },
    };
    int failed = cmocka_run_group_tests (tests, s_setup, s_teardown);
    if (failed == 0 && s_cases > 0 && s_skipped == s_cases)
        return 77;
    return failed;
}
