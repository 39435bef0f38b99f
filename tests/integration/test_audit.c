/*  =========================================================================
    test_audit - the audit trail end to end on SQLite: a real broker with a
    plan stage and dsh-demo, calls of every outcome, and each answered call
    found exactly once with `dsh audit`; the chain verified, and a row
    edited in the database found by `dsh audit verify`; the argument
    policy; per-agent modes kept across a broker restart
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#include <signal.h>
#include <sqlite3.h>

#define DEMO "components/demo/dsh-demo"

static char s_root [] = "/tmp/dsh-audit-XXXXXX";

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *demo;
    char endpoint [256];
    char store [512];
    char *config;
} fixture_t;

//  A broker with a plan stage whose store is the file name under the
//  test's directory, audit section extra (may be ""), and dsh-demo.
static fixture_t *
s_start (const char *name, const char *audit)
{
    fixture_t *self = (fixture_t *) zmalloc (sizeof (fixture_t));
    snprintf (self->store, sizeof (self->store), "%s/%s.db", s_root, name);
    self->config = zsys_sprintf ("broker\n    name = \"%s\"\n    store = \"%s\"\n%s"
                                 "chain\n    stage\n        name = \"plan\"\n        kind = \"plan\"\n",
                                 name, self->store, audit);
    self->broker = dsh_testkit_broker_config (200, self->config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    return self;
}

//  Stop the broker cleanly (it writes what is queued), and the demo.
static void
s_stop_broker (fixture_t *self)
{
    dsh_testproc_signal (self->broker, SIGTERM);
    assert_int_equal (dsh_testproc_wait (self->broker, 10000), 0);
    dsh_testproc_destroy (&self->broker);
}

static void
s_stop (fixture_t **self_p)
{
    fixture_t *self = *self_p;
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->broker);
    zstr_free (&self->config);
    free (self);
    *self_p = NULL;
}

//  One call and its answer's outcome ("ok" or the error code).
static char *
s_call (fixture_t *self, const char *name, const char *args, const char *agent, int timeout_ms)
{
    dsh_client_t *client = dsh_client_new (self->endpoint);
    assert_non_null (client);
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, name, args, agent, timeout_ms, error, sizeof (error));
    assert_non_null (reply);
    char *outcome = strdup ("ok");
    if (dsh_reply_is_error (reply)) {
        json_t *body = dsh_reply_json (reply);
        const char *code = json_string_value (json_object_get (json_object_get (body, "error"), "code"));
        zstr_free (&outcome);
        outcome = strdup (code? code: "?");
        json_decref (body);
    }
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    return outcome;
}

static void
s_expect_call (fixture_t *self, const char *name, const char *args, const char *agent, int timeout_ms,
               const char *expected)
{
    char *outcome = s_call (self, name, args, agent, timeout_ms);
    if (!streq (outcome, expected))
        fail_msg ("call %s %s as %s: %s, expected %s", name, args, agent? agent: "-", outcome, expected);
    zstr_free (&outcome);
}

//  The records `dsh audit --json` prints (extra args after), as an array,
//  once it prints count of them (within 10 s: the writer is asynchronous).
static json_t *
s_audit (fixture_t *self, size_t count, const char *const *extra)
{
    const char *args [16] = { "audit", "--json", "--limit", "1000" };
    size_t nargs = 4;
    for (size_t index = 0; extra && extra [index]; index++)
        args [nargs++] = extra [index];
    args [nargs] = NULL;
    json_t *records = NULL;
    for (int attempt = 0; attempt < 100; attempt++) {
        char *output = NULL;
        int rc = dsh_testkit_cli (self->endpoint, args, 10000, &output);
        json_decref (records);
        records = json_array ();
        for (char *line = strtok (output? output: (char *) "", "\n"); line; line = strtok (NULL, "\n")) {
            json_t *record = json_loads (line, 0, NULL);
            assert_non_null (record);
            json_array_append_new (records, record);
        }
        zstr_free (&output);
        if (rc == 0 && json_array_size (records) >= count)
            break;
        zclock_sleep (100);
    }
    if (json_array_size (records) != count)
        fail_msg ("dsh audit printed %zu records, expected %zu", json_array_size (records), count);
    return records;
}

static json_t *
s_find (json_t *records, const char *field, const char *value)
{
    size_t index;
    json_t *record;
    json_array_foreach (records, index, record)
        if (json_string_value (json_object_get (record, field))
        &&  streq (json_string_value (json_object_get (record, field)), value))
            return record;
    return NULL;
}

static size_t
s_count (json_t *records, const char *field, const char *value)
{
    size_t count = 0, index;
    json_t *record;
    json_array_foreach (records, index, record)
        if (json_string_value (json_object_get (record, field))
        &&  streq (json_string_value (json_object_get (record, field)), value))
            count++;
    return count;
}

static void
s_sql (const char *path, const char *statement)
{
    sqlite3 *db = NULL;
    assert_int_equal (sqlite3_open (path, &db), SQLITE_OK);
    sqlite3_busy_timeout (db, 5000);
    char *error = NULL;
    if (sqlite3_exec (db, statement, NULL, NULL, &error) != SQLITE_OK)
        fail_msg ("%s: %s", statement, error);
    assert_int_equal (sqlite3_changes (db) > 0 || strncmp (statement, "UPDATE", 6), 1);
    sqlite3_close (db);
}

//  Every kind of answer, one record each, with what it says
static void
test_every_answer_one_record (void **state)
{
    (void) state;
    fixture_t *self = s_start ("every", "");
    const char *mode [] = { "mode", "p1", "plan", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, mode, 10000, NULL), 0);
    for (int index = 0; index < 20; index++)
        s_expect_call (self, "echo", "{\"message\": \"hi\"}", "a1", 5000, "ok");
    s_expect_call (self, "no_such_tool", "{}", NULL, 5000, DSH_E_UNKNOWN_TOOL);
    s_expect_call (self, "echo", "{\"message\": 7}", NULL, 5000, DSH_E_INVALID_ARGS);
    s_expect_call (self, "fail", "{}", NULL, 5000, DSH_E_TOOL_FAILED);
    s_expect_call (self, "sleep_ms", "{\"ms\": 3000}", NULL, 300, DSH_E_TIMEOUT);
    s_expect_call (self, "tick", "{\"ms\": 1}", "p1", 5000, DSH_E_DENIED);
    //  A CALL the broker refuses at FRONT: its timeoutMs is not a number
    zsock_t *dealer = zsock_new_dealer (self->endpoint);
    msgpack_sbuffer sbuf;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"callId\": \"raw-1\", \"name\": \"echo\", \"timeoutMs\": \"x\"}",
                                                &sbuf, error, sizeof (error)), 0);
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_CALL);
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    assert_int_equal (zmsg_send (&msg, dealer), 0);
    zsock_set_rcvtimeo (dealer, 5000);
    zmsg_t *reply = zmsg_recv (dealer);
    assert_non_null (reply);
    zmsg_destroy (&reply);
    //  One whose arguments repeat a key: refused, and recorded without
    //  either of its two readings
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 3);
    dsh_pack_cstr (&pk, "callId");
    dsh_pack_cstr (&pk, "raw-2");
    dsh_pack_cstr (&pk, "name");
    dsh_pack_cstr (&pk, "echo");
    dsh_pack_cstr (&pk, "arguments");
    msgpack_pack_map (&pk, 2);
    dsh_pack_cstr (&pk, "message");
    dsh_pack_cstr (&pk, "checked");
    dsh_pack_cstr (&pk, "message");
    dsh_pack_cstr (&pk, "used");
    msg = zmsg_new ();
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_CALL);
    zmsg_addmem (msg, sbuf.data, sbuf.size);
    msgpack_sbuffer_destroy (&sbuf);
    assert_int_equal (zmsg_send (&msg, dealer), 0);
    reply = zmsg_recv (dealer);
    assert_non_null (reply);
    zmsg_destroy (&reply);
    zsock_destroy (&dealer);

    json_t *records = s_audit (self, 27, NULL);
    assert_int_equal (s_count (records, "outcome", "ok"), 20);
    assert_int_equal (s_count (records, "outcome", DSH_E_UNKNOWN_TOOL), 1);
    assert_int_equal (s_count (records, "outcome", DSH_E_INVALID_ARGS), 1);
    assert_int_equal (s_count (records, "outcome", DSH_E_TOOL_FAILED), 1);
    assert_int_equal (s_count (records, "outcome", DSH_E_TIMEOUT), 1);
    assert_int_equal (s_count (records, "outcome", DSH_E_DENIED), 1);
    assert_int_equal (s_count (records, "outcome", DSH_E_BAD_REQUEST), 2);
    //  Each once: no callId twice
    zhashx_t *ids = zhashx_new ();
    size_t index;
    json_t *record;
    json_array_foreach (records, index, record) {
        const char *call_id = json_string_value (json_object_get (record, "callId"));
        assert_non_null (call_id);
        assert_int_equal (zhashx_insert (ids, call_id, (void *) call_id), 0);
        assert_int_equal (json_integer_value (json_object_get (record, "seq")), (json_int_t) index + 1);
    }
    zhashx_destroy (&ids);

    //  What one record says
    json_t *echo = s_find (records, "agent", "a1");
    assert_non_null (echo);
    assert_string_equal (json_string_value (json_object_get (echo, "tool")), "echo");
    assert_string_equal (json_string_value (json_object_get (echo, "broker")), "every");
    assert_string_equal (json_string_value (json_object_get (json_object_get (echo, "arguments"), "message")), "hi");
    assert_string_equal (json_string_value (json_object_get (echo, "argumentsKept")), "full");
    assert_int_equal (strlen (json_string_value (json_object_get (echo, "argumentsSha256"))), 64);
    assert_true (json_integer_value (json_object_get (echo, "requestBytes")) > 20);
    assert_int_equal (strlen (json_string_value (json_object_get (echo, "toolSha256"))), 64);
    assert_int_equal (strlen (json_string_value (json_object_get (echo, "resultSha256"))), 64);
    json_t *component = json_object_get (echo, "component");
    assert_string_equal (json_string_value (json_object_get (component, "id")), "demo");
    assert_string_equal (json_string_value (json_object_get (component, "host")), "127.0.0.1");
    json_t *stage = json_array_get (json_object_get (echo, "stages"), 0);
    assert_string_equal (json_string_value (json_object_get (stage, "stage")), "plan");
    assert_string_equal (json_string_value (json_object_get (stage, "verdict")), "passed");
    assert_false (json_is_true (json_object_get (echo, "isError")));
    assert_true (json_integer_value (json_object_get (echo, "answeredMs"))
              >= json_integer_value (json_object_get (echo, "receivedMs")));
    //  The veto names the stage and why; the call never reached a component
    json_t *denied = s_find (records, "outcome", DSH_E_DENIED);
    stage = json_array_get (json_object_get (denied, "stages"), 0);
    assert_string_equal (json_string_value (json_object_get (stage, "verdict")), "answered");
    assert_non_null (strstr (json_string_value (json_object_get (stage, "reason")), "plan mode"));
    assert_null (json_object_get (denied, "component"));
    json_t *refused = s_find (records, "callId", "raw-1");
    assert_string_equal (json_string_value (json_object_get (refused, "outcome")), DSH_E_BAD_REQUEST);
    json_t *twice = s_find (records, "callId", "raw-2");
    assert_string_equal (json_string_value (json_object_get (twice, "outcome")), DSH_E_BAD_REQUEST);
    assert_null (json_object_get (twice, "arguments"));
    assert_string_equal (json_string_value (json_object_get (twice, "argumentsKept")), "digest (unreadable)");
    assert_int_equal (strlen (json_string_value (json_object_get (twice, "argumentsSha256"))), 64);
    json_decref (records);

    //  Filters
    const char *by_agent [] = { "--agent", "a1", NULL };
    records = s_audit (self, 20, by_agent);
    json_decref (records);
    const char *by_outcome [] = { "--outcome", DSH_E_TIMEOUT, "--tool", "sleep_ms", NULL };
    records = s_audit (self, 1, by_outcome);
    json_decref (records);
    const char *bad_time [] = { "audit", "--since", "yesterday-ish", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, bad_time, 10000, NULL), 2);

    //  The chain holds; an edited row breaks it, and verify names it
    const char *verify [] = { "audit", "verify", NULL };
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, verify, 10000, &output), 0);
    assert_non_null (strstr (output, "\"checked\": 27"));
    zstr_free (&output);
    s_sql (self->store, "UPDATE dsh_audit SET record = replace (record, '\"hi\"', '\"ho\"') WHERE seq = 3");
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, verify, 10000, &output), 1);
    assert_non_null (strstr (output, "record 3"));
    zstr_free (&output);
    s_stop (&self);
}

//  Arguments kept as a digest for the tools the policy names
static void
test_argument_policy (void **state)
{
    (void) state;
    fixture_t *self = s_start ("policy", "audit = required\n    digest_tools = \"ec*\"\n");
    s_expect_call (self, "echo", "{\"message\": \"secret\"}", NULL, 5000, "ok");
    s_expect_call (self, "sleep_ms", "{\"ms\": 1}", NULL, 5000, "ok");
    json_t *records = s_audit (self, 2, NULL);
    json_t *echo = s_find (records, "tool", "echo");
    assert_null (json_object_get (echo, "arguments"));
    assert_string_equal (json_string_value (json_object_get (echo, "argumentsKept")), "digest");
    assert_int_equal (strlen (json_string_value (json_object_get (echo, "argumentsSha256"))), 64);
    json_t *sleep = s_find (records, "tool", "sleep_ms");
    assert_int_equal (json_integer_value (json_object_get (json_object_get (sleep, "arguments"), "ms")), 1);
    json_decref (records);
    //  Nothing of the secret in the database
    FILE *file = fopen (self->store, "rb");
    assert_non_null (file);
    char buffer [65536];
    size_t size = fread (buffer, 1, sizeof (buffer), file);
    fclose (file);
    assert_null (memmem (buffer, size, "secret", 6));
    s_stop (&self);
}

//  A mode set with `dsh mode` is there after a restart; the records of
//  both runs are one chain
static void
test_modes_survive_restart (void **state)
{
    (void) state;
    fixture_t *self = s_start ("modes", "");
    const char *mode [] = { "mode", "p2", "plan", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, mode, 10000, NULL), 0);
    s_expect_call (self, "tick", "{\"ms\": 1}", "p2", 5000, DSH_E_DENIED);
    s_stop_broker (self);
    self->broker = dsh_testkit_broker_config (200, self->config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    dsh_testproc_destroy (&self->demo);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    s_expect_call (self, "tick", "{\"ms\": 1}", "p2", 5000, DSH_E_DENIED);
    s_expect_call (self, "tick", "{\"ms\": 1}", "p3", 5000, "ok");
    const char *normal [] = { "mode", "p2", "normal", NULL };
    assert_int_equal (dsh_testkit_cli (self->endpoint, normal, 10000, NULL), 0);
    s_expect_call (self, "tick", "{\"ms\": 1}", "p2", 5000, "ok");
    json_t *records = s_audit (self, 4, NULL);
    json_decref (records);
    const char *verify [] = { "audit", "verify", NULL };
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, verify, 10000, &output), 0);
    assert_non_null (strstr (output, "\"checked\": 4"));
    zstr_free (&output);
    s_stop (&self);
}

//  Retention: a chain over its byte bound loses its oldest records, and
//  still verifies from its anchor
static void
test_retention_keeps_anchor (void **state)
{
    (void) state;
    fixture_t *self = s_start ("retention", "audit = required\n    max_bytes = 4000\n");
    for (int index = 0; index < 12; index++)
        s_expect_call (self, "echo", "{\"message\": \"kept for a while\"}", NULL, 5000, "ok");
    //  Pruned a second after the first write: fewer records, the newest
    const char *args [] = { "audit", "--json", "--limit", "100", NULL };
    size_t count = 12;
    for (int attempt = 0; attempt < 50 && count >= 12; attempt++) {
        zclock_sleep (100);
        char *output = NULL;
        assert_int_equal (dsh_testkit_cli (self->endpoint, args, 10000, &output), 0);
        count = 0;
        for (char *line = strchr (output, '\n'); line; line = strchr (line + 1, '\n'))
            count++;
        zstr_free (&output);
    }
    if (count >= 12 || count == 0)
        fail_msg ("%zu of 12 records left after pruning to 4000 bytes", count);
    const char *verify [] = { "audit", "verify", NULL };
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli_merged (self->endpoint, verify, 10000, &output), 0);
    assert_null (strstr (output, "\"anchorSeq\": 0"));
    zstr_free (&output);
    s_stop (&self);
}

//  A broker that stops answers every call still open, TOOL_GONE, and
//  records it: no call it took goes unanswered or unrecorded
static void
test_stop_answers_open_calls (void **state)
{
    (void) state;
    fixture_t *self = s_start ("stop", "");
    dsh_client_t *client = dsh_client_new (self->endpoint);
    assert_non_null (client);
    const char *call_id = dsh_testkit_send_json (client, NULL, "sleep_ms", "{\"ms\": 5000}", 20000);
    assert_non_null (call_id);
    char *sent = strdup (call_id);
    assert_int_equal (dsh_testkit_wait_in_flight (self->endpoint, "demo", 1, 5000), 0);
    dsh_testproc_signal (self->broker, SIGTERM);
    dsh_reply_t *reply = NULL;
    for (int64_t give_up = zclock_mono () + 5000; !reply && zclock_mono () < give_up; )
        reply = dsh_client_recv (client, 500);
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    assert_string_equal (json_string_value (json_object_get (json_object_get (body, "error"), "code")),
                         DSH_E_TOOL_GONE);
    char *text = json_dumps (body, 0);
    assert_non_null (strstr (text, "broker stopped"));
    free (text);
    json_decref (body);
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    assert_int_equal (dsh_testproc_wait (self->broker, 10000), 0);
    dsh_testproc_destroy (&self->broker);
    //  The next run of the same broker has its record
    self->broker = dsh_testkit_broker_config (200, self->config, self->endpoint, sizeof (self->endpoint));
    assert_non_null (self->broker);
    const char *by_call [] = { "--call", sent, NULL };
    json_t *records = s_audit (self, 1, by_call);
    assert_string_equal (json_string_value (json_object_get (json_array_get (records, 0), "outcome")),
                         DSH_E_TOOL_GONE);
    json_decref (records);
    zstr_free (&sent);
    s_stop (&self);
}

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
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_every_answer_one_record),
        cmocka_unit_test (test_argument_policy),
        cmocka_unit_test (test_modes_survive_restart),
        cmocka_unit_test (test_retention_keeps_anchor),
        cmocka_unit_test (test_stop_answers_open_calls),
    };
    return cmocka_run_group_tests (tests, s_setup, s_teardown);
}
