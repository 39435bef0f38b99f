/*  =========================================================================
    test_store - dsh_store on SQLite and on PostgreSQL

    The same tests run against each back end: `test_store` on SQLite files
    in a temporary directory (never skipped), `test_store postgresql` on a
    scratch PostgreSQL server (tests/kit/pg_scratch.sh; skipped with 77
    where there is none). Each test opens a fresh store: a new SQLite file,
    or the PostgreSQL database with its tables dropped. Tampering is done
    as an intruder would, with plain SQL through the engine's own library.
    Beyond the shared tests: a full disk on SQLite (a small tmpfs, where
    mount is permitted) and a PostgreSQL server that stops and comes back.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sodium.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "dsh_store.h"
#include "dsh_testkit.h"

static char s_dir [] = "/tmp/dsh-store-XXXXXX";    //  SQLite's files, or the PostgreSQL cluster
static char *s_uri;                                 //  the scratch server's; NULL on SQLite
static char s_location [1024];                      //  the store the current test opens
static int s_tests;                                 //  SQLite: a new file for each
static char s_mounted [512];                        //  the full-disk tmpfs, while mounted

static const char *s_zeros = "0000000000000000000000000000000000000000000000000000000000000000";

//  "table does not exist, skipping" and the like
static void
s_quiet (void *arg, const char *message)
{
    (void) arg;
    (void) message;
}

//  Runs sql on the current test's database, outside the store
static void
s_sql (const char *sql)
{
    if (s_uri) {
        PGconn *conn = PQconnectdb (s_uri);
        assert_int_equal (PQstatus (conn), CONNECTION_OK);
        PQsetNoticeProcessor (conn, s_quiet, NULL);
        PGresult *result = PQexec (conn, sql);
        ExecStatusType status = PQresultStatus (result);
        if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
            fail_msg ("%s: %s", sql, PQerrorMessage (conn));
        PQclear (result);
        PQfinish (conn);
    }
    else {
        sqlite3 *db;
        assert_int_equal (sqlite3_open (s_location, &db), SQLITE_OK);
        sqlite3_busy_timeout (db, 5000);
        if (sqlite3_exec (db, sql, NULL, NULL, NULL) != SQLITE_OK)
            fail_msg ("%s: %s", sql, sqlite3_errmsg (db));
        sqlite3_close (db);
    }
}

static int
s_setup (void **state)
{
    (void) state;
    if (s_uri) {
        snprintf (s_location, sizeof (s_location), "%s", s_uri);
        s_sql ("DROP TABLE IF EXISTS dsh_audit, dsh_audit_head, dsh_modes, dsh_schema");
    }
    else
        snprintf (s_location, sizeof (s_location), "%s/store-%d.db", s_dir, ++s_tests);
    return 0;
}

static int
s_teardown (void **state)
{
    (void) state;
    if (*s_mounted) {
        umount2 (s_mounted, MNT_DETACH);
        *s_mounted = 0;
    }
    return 0;
}

static dsh_store_t *
s_open (void)
{
    char error [256] = "";
    dsh_store_t *store = dsh_store_new (s_location, error, sizeof (error));
    if (!store)
        fail_msg ("dsh_store_new %s: %s", s_location, error);
    return store;
}

//  The hash rule, computed here on its own: one buffer, one-shot SHA-256
static void
s_hash (const char *prev, const char *broker, uint64_t seq, const char *record, char *hash)
{
    char *bytes = zsys_sprintf ("%s\n%s\n%" PRIu64 "\n%s", prev, broker, seq, record);
    unsigned char digest [crypto_hash_sha256_BYTES];
    crypto_hash_sha256 (digest, (const unsigned char *) bytes, strlen (bytes));
    for (size_t index = 0; index < sizeof (digest); index++)
        snprintf (hash + 2 * index, 3, "%02x", digest [index]);
    zstr_free (&bytes);
}

//  What records to append: count of them, answered at answered_ms, + 1,
//  ...; agent "" leaves the record's agent field out; pad makes the
//  record that many bytes longer
typedef struct {
    const char *agent;
    const char *tool;
    const char *outcome;
    int64_t answered_ms;
    size_t pad;
} s_batch_t;

//  Appends count records to broker's chain in one call; returns append's
//  rc (error in error), and the rows' seqs and hashes in seqs and hashes
//  if not NULL
static int
s_try_append (dsh_store_t *store, const char *broker, size_t count, const s_batch_t *batch,
              uint64_t *seqs, char (*hashes) [DSH_STORE_HASH_SIZE + 1], char *error, size_t error_size)
{
    static atomic_int calls;       //  for unique callIds, from any thread
    dsh_store_row_t *rows = (dsh_store_row_t *) zmalloc (count * sizeof (dsh_store_row_t));
    char **records = (char **) zmalloc (count * sizeof (char *));
    char **call_ids = (char **) zmalloc (count * sizeof (char *));
    char *pad = (char *) zmalloc (batch->pad + 1);
    memset (pad, 'x', batch->pad);
    for (size_t index = 0; index < count; index++) {
        int64_t answered_ms = batch->answered_ms + (int64_t) index;
        call_ids [index] = zsys_sprintf ("%s-%d", broker, atomic_fetch_add (&calls, 1));
        json_t *record = json_pack ("{sI sI ss ss ss ss ss}", "receivedMs", (json_int_t) answered_ms - 5,
            "answeredMs", (json_int_t) answered_ms, "tool", batch->tool, "callId", call_ids [index],
            "outcome", batch->outcome, "callerId", "key-1", "pad", pad);
        if (*batch->agent)
            json_object_set_new (record, "agent", json_string (batch->agent));
        records [index] = json_dumps (record, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref (record);
        rows [index] = (dsh_store_row_t) {
            .broker = "ignored", .received_ms = answered_ms - 5, .answered_ms = answered_ms,
            .agent = batch->agent, .tool = batch->tool, .call_id = call_ids [index], .outcome = batch->outcome,
            .caller = "key-1", .record = records [index]
        };
    }
    int rc = dsh_store_append (store, broker, rows, count, error, error_size);
    for (size_t index = 0; index < count; index++) {
        if (seqs)
            seqs [index] = rows [index].seq;
        if (hashes)
            memcpy (hashes [index], rows [index].hash, DSH_STORE_HASH_SIZE + 1);
        free (records [index]);
        zstr_free (&call_ids [index]);
    }
    free (pad);
    free (call_ids);
    free (records);
    free (rows);
    return rc;
}

static void
s_append (dsh_store_t *store, const char *broker, size_t count, const s_batch_t *batch)
{
    char error [256] = "";
    if (s_try_append (store, broker, count, batch, NULL, NULL, error, sizeof (error)))
        fail_msg ("append to %s: %s", broker, error);
}

static const s_batch_t s_plain = { "alice", "read", "ok", 1000, 0 };

static void
s_verify (dsh_store_t *store, const char *broker, dsh_store_verdict_t *verdict)
{
    char error [256] = "";
    if (dsh_store_verify (store, broker, verdict, error, sizeof (error)))
        fail_msg ("verify %s: %s", broker, error);
}

//  Verify holds, having checked checked records from anchor_seq on
static void
s_holds (dsh_store_t *store, const char *broker, uint64_t checked, uint64_t anchor_seq)
{
    dsh_store_verdict_t verdict;
    s_verify (store, broker, &verdict);
    if (verdict.bad_seq)
        fail_msg ("verify %s: record %" PRIu64 ": %s", broker, verdict.bad_seq, verdict.reason);
    assert_string_equal (verdict.reason, "");
    assert_int_equal (verdict.checked, checked);
    assert_int_equal (verdict.anchor_seq, anchor_seq);
}

//  Verify finds bad_seq first, for a reason that contains reason
static void
s_broken (dsh_store_t *store, const char *broker, uint64_t bad_seq, const char *reason)
{
    dsh_store_verdict_t verdict;
    s_verify (store, broker, &verdict);
    if (verdict.bad_seq != bad_seq || !strstr (verdict.reason, reason))
        fail_msg ("verify %s: wanted %" PRIu64 " \"%s\", got %" PRIu64 " \"%s\"", broker, bad_seq, reason,
                  verdict.bad_seq, verdict.reason);
}

//  A query's rows, as far as the tests look at them
#define S_FOUND_MAX 200
typedef struct {
    size_t count;
    size_t stop_after;              //  0: never stop
    uint64_t seqs [S_FOUND_MAX];
    int64_t answered [S_FOUND_MAX];
    char brokers [S_FOUND_MAX][32];
    char prevs [S_FOUND_MAX][DSH_STORE_HASH_SIZE + 1];
    char hashes [S_FOUND_MAX][DSH_STORE_HASH_SIZE + 1];
    char records [S_FOUND_MAX][256];
    bool rule_holds;                //  every row's hash, by s_hash
    bool columns_hold;              //  every row's callId and agent are its columns'
    uint64_t bytes;                 //  of their records
    char call_id [64];              //  the last row's
} s_found_t;

static int
s_collect (const dsh_store_row_t *row, void *arg)
{
    s_found_t *found = (s_found_t *) arg;
    assert_true (found->count < S_FOUND_MAX);
    size_t index = found->count++;
    found->seqs [index] = row->seq;
    found->answered [index] = row->answered_ms;
    snprintf (found->brokers [index], sizeof (found->brokers [index]), "%s", row->broker);
    snprintf (found->prevs [index], sizeof (found->prevs [index]), "%s", row->prev);
    snprintf (found->hashes [index], sizeof (found->hashes [index]), "%s", row->hash);
    snprintf (found->records [index], sizeof (found->records [index]), "%s", row->record);
    snprintf (found->call_id, sizeof (found->call_id), "%s", row->call_id);
    char hash [DSH_STORE_HASH_SIZE + 1];
    s_hash (row->prev, row->broker, row->seq, row->record, hash);
    found->rule_holds = found->rule_holds && streq (hash, row->hash);
    json_t *record = json_loads (row->record, 0, NULL);
    const char *agent = json_string_value (json_object_get (record, "agent"));
    found->columns_hold = found->columns_hold
        && streq (json_string_value (json_object_get (record, "callId")), row->call_id)
        && streq (agent? agent: "", row->agent);
    json_decref (record);
    found->bytes += strlen (row->record);
    return found->stop_after && found->count == found->stop_after? -1: 0;
}

//  brokers' rows: only their broker
static int
s_collect_broker (const dsh_store_row_t *row, void *arg)
{
    s_found_t *found = (s_found_t *) arg;
    assert_true (found->count < S_FOUND_MAX);
    assert_null (row->record);
    snprintf (found->brokers [found->count], sizeof (found->brokers [0]), "%s", row->broker);
    found->count++;
    return found->stop_after && found->count == found->stop_after? -1: 0;
}

static size_t
s_query (dsh_store_t *store, const dsh_store_filter_t *filter, s_found_t *found)
{
    memset (found, 0, sizeof (s_found_t));
    found->rule_holds = true;
    found->columns_hold = true;
    char error [256] = "";
    int given = dsh_store_query (store, filter, s_collect, found, error, sizeof (error));
    if (given < 0)
        fail_msg ("query: %s", error);
    assert_int_equal ((size_t) given, found->count);
    return found->count;
}

static uint64_t
s_count (dsh_store_t *store, const char *broker, uint64_t *bytes)
{
    uint64_t records = 0;
    char error [256] = "";
    if (dsh_store_count (store, broker, &records, bytes, error, sizeof (error)))
        fail_msg ("count %s: %s", broker? broker: "(all)", error);
    return records;
}

static void
test_hash_rule (void **state)
{
    (void) state;
    //  Worked out with Python's hashlib
    char hash [DSH_STORE_HASH_SIZE + 1];
    dsh_store_hash (s_zeros, "broker-1", 1, "{\"a\":1}", hash);
    assert_string_equal (hash, "c4592121819c700ec4a237ea28cb59df731690558939deb1c7b323e5d234f80e");
    char prev [DSH_STORE_HASH_SIZE + 1];
    for (size_t index = 0; index < DSH_STORE_HASH_SIZE; index += 2)
        memcpy (prev + index, "ab", 2);
    prev [DSH_STORE_HASH_SIZE] = 0;
    dsh_store_hash (prev, "b", 12345678901, "{\"tool\":\"caf\xc3\xa9\"}", hash);
    assert_string_equal (hash, "7076c825dcf21af26fb30f66078ed8eaff67835543ea5c89738804d03ccf891d");
    s_hash (prev, "b", 12345678901, "{\"tool\":\"caf\xc3\xa9\"}", hash);
    assert_string_equal (hash, "7076c825dcf21af26fb30f66078ed8eaff67835543ea5c89738804d03ccf891d");
}

static void
test_append (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    assert_string_equal (dsh_store_kind (store), s_uri? "postgresql": "sqlite");
    uint64_t seqs [5];
    char hashes [5][DSH_STORE_HASH_SIZE + 1];
    char error [256];
    assert_int_equal (s_try_append (store, "b1", 3, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    s_batch_t later = { "alice", "read", "ok", 1003, 0 };
    assert_int_equal (s_try_append (store, "b1", 2, &later, seqs + 3, hashes + 3, error, sizeof (error)), 0);
    assert_int_equal (dsh_store_append (store, "b1", NULL, 0, error, sizeof (error)), 0);
    s_append (store, "b2", 2, &(s_batch_t) { "", "write", "ok", 2000, 0 });

    //  Stored as append said: seq after seq, each prev the last hash, each
    //  hash by the rule, the columns the record's
    s_found_t found;
    dsh_store_filter_t filter = { .broker = "b1", .oldest_first = true };
    assert_int_equal (s_query (store, &filter, &found), 5);
    for (size_t index = 0; index < 5; index++) {
        assert_int_equal (seqs [index], index + 1);
        assert_int_equal (found.seqs [index], index + 1);
        assert_string_equal (found.brokers [index], "b1");
        assert_string_equal (found.hashes [index], hashes [index]);
        assert_string_equal (found.prevs [index], index? hashes [index - 1]: s_zeros);
    }
    assert_true (found.rule_holds);
    assert_true (found.columns_hold);

    uint64_t bytes = 0;
    assert_int_equal (s_count (store, "b1", &bytes), 5);
    assert_int_equal (bytes, found.bytes);
    assert_int_equal (s_count (store, "b2", NULL), 2);
    assert_int_equal (s_count (store, NULL, NULL), 7);
    assert_int_equal (s_count (store, "nobody", &bytes), 0);
    assert_int_equal (bytes, 0);
    dsh_store_destroy (&store);
    dsh_store_destroy (&store);

    //  A store opened again goes on where the chain ended
    store = s_open ();
    assert_int_equal (s_try_append (store, "b1", 1, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 6);
    s_holds (store, "b1", 6, 0);
    dsh_store_destroy (&store);
}

//  An append that fails writes nothing and says the engine's reason; the
//  chain goes on from where it was
static void
test_append_refused (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    s_append (store, "r", 2, &s_plain);
    //  A row where the next append's second goes, behind the store's back
    s_sql ("INSERT INTO dsh_audit (broker, seq, received_ms, answered_ms, agent, tool, call_id, outcome, caller,"
           " record, prev, hash) VALUES ('r', 4, 0, 0, '', '', '', '', '', '{}', '', '')");
    uint64_t seqs [3];
    char error [256] = "";
    assert_int_equal (s_try_append (store, "r", 3, &s_plain, seqs, NULL, error, sizeof (error)), -1);
    print_message ("test_store: append onto a taken place: %s\n", error);
    assert_non_null (strstr (error, s_uri? "postgresql: duplicate key value violates unique constraint"
                                         : "UNIQUE constraint failed"));
    for (size_t index = 0; index < 3; index++)
        assert_int_equal (seqs [index], 0);
    s_sql ("DELETE FROM dsh_audit WHERE broker = 'r' AND seq = 4");
    s_holds (store, "r", 2, 0);
    assert_int_equal (s_try_append (store, "r", 3, &s_plain, seqs, NULL, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 3);
    s_holds (store, "r", 5, 0);

    //  More record bytes than one of PostgreSQL's INSERTs takes (16 MiB)
    s_append (store, "big", 20, &(s_batch_t) { "alice", "read", "ok", 1000, 1 << 20 });
    s_holds (store, "big", 20, 0);
    dsh_store_destroy (&store);
}

static void
test_query (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    //  qa: 10 records answered at 1000 to 1009, alice's and bob's by turns,
    //  read and write by turns, the fourth DENIED; qb: 5 with no agent;
    //  qc: 120 in one append
    for (int index = 0; index < 10; index++) {
        s_batch_t batch = { index % 2? "bob": "alice", index % 2? "write": "read", index == 3? "DENIED": "ok",
                            1000 + index, 0 };
        s_append (store, "qa", 1, &batch);
    }
    s_append (store, "qb", 5, &(s_batch_t) { "", "read", "ok", 2000, 0 });
    s_append (store, "qc", 120, &(s_batch_t) { "carol", "bulk", "ok", 3000, 0 });

    s_found_t found;
    //  Everything: newest first, at most 100
    assert_int_equal (s_query (store, NULL, &found), 100);
    assert_int_equal (found.answered [0], 3119);
    assert_int_equal (found.answered [99], 3020);
    assert_true (found.rule_holds);
    assert_true (found.columns_hold);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .broker = "qc", .limit = 150 }, &found), 120);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .limit = 3 }, &found), 3);
    assert_int_equal (found.answered [2], 3117);

    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .broker = "qa" }, &found), 10);
    assert_int_equal (found.answered [0], 1009);
    assert_int_equal (found.seqs [0], 10);
    assert_int_equal (found.answered [9], 1000);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .broker = "qa", .oldest_first = true }, &found), 10);
    assert_int_equal (found.answered [0], 1000);
    assert_int_equal (found.seqs [9], 10);

    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .agent = "alice" }, &found), 5);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .agent = "" }, &found), 5);
    assert_string_equal (found.brokers [0], "qb");
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .tool = "write" }, &found), 5);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .outcome = "DENIED" }, &found), 1);
    assert_int_equal (found.answered [0], 1003);
    char call_id [64];
    snprintf (call_id, sizeof (call_id), "%s", found.call_id);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .call_id = call_id }, &found), 1);
    assert_string_equal (found.brokers [0], "qa");
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .call_id = "no-such-call" }, &found), 0);

    //  since is inclusive, until is not
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .since_ms = 1005, .until_ms = 2002 }, &found), 7);
    assert_int_equal (found.answered [0], 2001);
    assert_int_equal (found.answered [6], 1005);
    dsh_store_filter_t several = { .broker = "qa", .tool = "read", .agent = "alice", .outcome = "ok",
                                   .since_ms = 1004, .oldest_first = true };
    assert_int_equal (s_query (store, &several, &found), 3);
    assert_int_equal (found.answered [0], 1004);
    assert_int_equal (found.answered [2], 1008);

    //  fn stops it
    memset (&found, 0, sizeof (found));
    found.stop_after = 2;
    char error [256];
    assert_int_equal (dsh_store_query (store, NULL, s_collect, &found, error, sizeof (error)), 2);
    //  and the store goes on
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .broker = "qb" }, &found), 5);
    dsh_store_destroy (&store);
}

static void
test_verify_holds (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    s_append (store, "v", 1, &s_plain);
    s_append (store, "v", 5, &s_plain);
    s_append (store, "v", 10, &(s_batch_t) { "", "write", "TIMEOUT", 5000, 0 });
    s_append (store, "other", 3, &s_plain);
    s_holds (store, "v", 16, 0);
    s_holds (store, "other", 3, 0);
    s_holds (store, "nobody", 0, 0);
    dsh_store_destroy (&store);
}

//  A chain of 10 records, in a store of its own
static dsh_store_t *
s_chain (const char *broker)
{
    dsh_store_t *store = s_open ();
    s_append (store, broker, 4, &s_plain);
    s_append (store, broker, 6, &s_plain);
    s_holds (store, broker, 10, 0);
    return store;
}

static void
test_tamper_record (void **state)
{
    (void) state;
    dsh_store_t *store = s_chain ("t");
    s_sql ("UPDATE dsh_audit SET record = record || ' ' WHERE broker = 't' AND seq = 3");
    s_broken (store, "t", 3, "record 3: hash does not match its content");
    dsh_store_verdict_t verdict;
    s_verify (store, "t", &verdict);
    assert_int_equal (verdict.checked, 2);

    //  A record changed and its hash made again: the next record's prev
    //  no longer matches
    s_found_t found;
    s_append (store, "r", 10, &s_plain);
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .broker = "r", .oldest_first = true }, &found), 10);
    const char *pad = strstr (found.records [6], "\"pad\":\"\"");
    assert_non_null (pad);
    char *record = zsys_sprintf ("%.*s\"pad\":\"evil\"%s", (int) (pad - found.records [6]), found.records [6],
                                 pad + strlen ("\"pad\":\"\""));
    char hash [DSH_STORE_HASH_SIZE + 1];
    s_hash (found.prevs [6], "r", 7, record, hash);
    char *sql = zsys_sprintf ("UPDATE dsh_audit SET record = '%s', hash = '%s' WHERE broker = 'r' AND seq = 7",
                              record, hash);
    s_sql (sql);
    s_broken (store, "r", 8, "record 8: prev is not record 7's hash");
    zstr_free (&sql);
    zstr_free (&record);

    //  A hash longer than a hash, however it starts
    s_append (store, "l", 6, &s_plain);
    s_sql ("UPDATE dsh_audit SET hash = hash || '0' WHERE broker = 'l' AND seq = 5");
    s_broken (store, "l", 5, "record 5: hash does not match its content");

    //  The first record's prev
    s_append (store, "f", 3, &s_plain);
    s_sql ("UPDATE dsh_audit SET prev = hash WHERE broker = 'f' AND seq = 1");
    s_broken (store, "f", 1, "record 1: prev is not 64 zeros");
    dsh_store_destroy (&store);
}

static void
test_tamper_column (void **state)
{
    (void) state;
    dsh_store_t *store = s_chain ("t");
    s_sql ("UPDATE dsh_audit SET tool = 'rm' WHERE broker = 't' AND seq = 4");
    s_broken (store, "t", 4, "record 4: column tool \"rm\" differs from the record's \"read\"");
    s_append (store, "n", 10, &s_plain);
    s_sql ("UPDATE dsh_audit SET answered_ms = answered_ms + 1 WHERE broker = 'n' AND seq = 6");
    s_broken (store, "n", 6, "record 6: column answered_ms 1006 differs from the record's 1005");
    s_append (store, "a", 3, &s_plain);
    s_sql ("UPDATE dsh_audit SET agent = '' WHERE broker = 'a' AND seq = 2");
    s_broken (store, "a", 2, "record 2: column agent \"\" differs from the record's \"alice\"");
    s_append (store, "c", 3, &(s_batch_t) { "", "read", "ok", 1000, 0 });
    s_sql ("UPDATE dsh_audit SET agent = 'mallory' WHERE broker = 'c' AND seq = 3");
    s_broken (store, "c", 3, "record 3: column agent \"mallory\" differs from the record's \"\"");
    s_sql ("UPDATE dsh_audit SET caller = 'someone' WHERE broker = 'c' AND seq = 2");
    s_broken (store, "c", 2, "record 2: column caller \"someone\" differs from the record's \"key-1\"");
    dsh_store_destroy (&store);
}

static void
test_delete_middle (void **state)
{
    (void) state;
    dsh_store_t *store = s_chain ("t");
    s_sql ("DELETE FROM dsh_audit WHERE broker = 't' AND seq = 5");
    s_broken (store, "t", 5, "record 5 is missing (the chain goes from 4 to 6)");
    s_append (store, "first", 3, &s_plain);
    s_sql ("DELETE FROM dsh_audit WHERE broker = 'first' AND seq = 1");
    s_broken (store, "first", 1, "record 1 is missing (the chain starts at 2)");
    dsh_store_destroy (&store);
}

static void
test_delete_last (void **state)
{
    (void) state;
    dsh_store_t *store = s_chain ("t");
    s_sql ("DELETE FROM dsh_audit WHERE broker = 't' AND seq = 10");
    s_broken (store, "t", 10, "the head says 10 but the chain ends at 9");
    dsh_store_verdict_t verdict;
    s_verify (store, "t", &verdict);
    assert_int_equal (verdict.checked, 9);
    s_sql ("DELETE FROM dsh_audit WHERE broker = 't'");
    s_broken (store, "t", 10, "the head says 10 but the chain has no records after 0");
    s_append (store, "h", 2, &s_plain);
    s_sql ("DELETE FROM dsh_audit_head WHERE broker = 'h'");
    s_broken (store, "h", 2, "the chain has no head (its records end at 2)");
    dsh_store_destroy (&store);
}

static int
s_prune (dsh_store_t *store, const char *broker, int64_t before_ms, uint64_t keep_records, size_t batch)
{
    char error [256] = "";
    int deleted = dsh_store_prune (store, broker, before_ms, keep_records, batch, error, sizeof (error));
    if (deleted < 0)
        fail_msg ("prune %s: %s", broker, error);
    return deleted;
}

static void
test_prune (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    s_append (store, "other", 3, &s_plain);
    //  20 records answered at 1000 to 1019
    for (int index = 0; index < 4; index++)
        s_append (store, "p", 5, &(s_batch_t) { "alice", "read", "ok", 1000 + 5 * index, 0 });

    //  By count, a batch at a time
    assert_int_equal (s_prune (store, "p", 0, 15, 3), 3);
    s_holds (store, "p", 17, 3);
    assert_int_equal (s_count (store, "p", NULL), 17);
    assert_int_equal (s_prune (store, "p", 0, 15, 100), 2);
    s_holds (store, "p", 15, 5);
    assert_int_equal (s_prune (store, "p", 0, 15, 100), 0);
    assert_int_equal (s_prune (store, "p", 0, 0, 100), 0);

    //  By age: answered before 1010 are seqs up to 10
    assert_int_equal (s_prune (store, "p", 1010, 0, 0), 5);
    s_holds (store, "p", 10, 10);
    assert_int_equal (s_prune (store, "p", 1010, 0, 0), 0);

    //  By age, the oldest first: a record answered earlier than the ones
    //  before it waits until they go
    s_append (store, "p", 1, &(s_batch_t) { "alice", "read", "ok", 900, 0 });
    assert_int_equal (s_prune (store, "p", 1015, 0, 0), 5);
    s_holds (store, "p", 6, 15);

    //  Everything, then the chain goes on from its anchor
    assert_int_equal (s_prune (store, "p", INT64_MAX, 0, 0), 6);
    s_holds (store, "p", 0, 21);
    assert_int_equal (s_count (store, "p", NULL), 0);
    s_append (store, "p", 2, &s_plain);
    s_holds (store, "p", 2, 21);
    s_found_t found;
    assert_int_equal (s_query (store, &(dsh_store_filter_t) { .broker = "p", .oldest_first = true }, &found), 2);
    assert_int_equal (found.seqs [0], 22);

    //  Tampering after the anchor is still found
    s_sql ("UPDATE dsh_audit SET record = record || ' ' WHERE broker = 'p' AND seq = 22");
    s_broken (store, "p", 22, "record 22: hash does not match its content");

    s_holds (store, "other", 3, 0);
    assert_int_equal (s_prune (store, "nobody", 0, 1, 10), 0);
    dsh_store_destroy (&store);
}

static void
test_modes (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    char error [256];
    zhashx_t *modes = dsh_store_modes (store, error, sizeof (error));
    assert_non_null (modes);
    assert_int_equal (zhashx_size (modes), 0);
    zhashx_destroy (&modes);

    assert_int_equal (dsh_store_mode_set (store, "alice", "plan", "admin", 100, error, sizeof (error)), 0);
    assert_int_equal (dsh_store_mode_set (store, "bob", "auto", NULL, 101, error, sizeof (error)), 0);
    modes = dsh_store_modes (store, error, sizeof (error));
    assert_int_equal (zhashx_size (modes), 2);
    assert_string_equal ((char *) zhashx_lookup (modes, "alice"), "plan");
    assert_string_equal ((char *) zhashx_lookup (modes, "bob"), "auto");
    zhashx_destroy (&modes);

    assert_int_equal (dsh_store_mode_set (store, "alice", "default", "admin", 102, error, sizeof (error)), 0);
    assert_int_equal (dsh_store_mode_set (store, "bob", NULL, "admin", 103, error, sizeof (error)), 0);
    assert_int_equal (dsh_store_mode_set (store, "carol", "", "admin", 104, error, sizeof (error)), 0);
    modes = dsh_store_modes (store, error, sizeof (error));
    assert_int_equal (zhashx_size (modes), 1);
    assert_string_equal ((char *) zhashx_lookup (modes, "alice"), "default");
    zhashx_destroy (&modes);

    //  Another store on the same database sees them
    dsh_store_t *other = s_open ();
    assert_int_equal (dsh_store_mode_set (other, "alice", "", "admin", 105, error, sizeof (error)), 0);
    dsh_store_destroy (&other);
    modes = dsh_store_modes (store, error, sizeof (error));
    assert_int_equal (zhashx_size (modes), 0);
    zhashx_destroy (&modes);
    dsh_store_destroy (&store);
}

static void
test_brokers (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    s_append (store, "b2", 1, &s_plain);
    s_append (store, "b1", 2, &s_plain);
    s_found_t found = { .count = 0 };
    char error [256];
    assert_int_equal (dsh_store_brokers (store, s_collect_broker, &found, error, sizeof (error)), 2);
    assert_string_equal (found.brokers [0], "b1");
    assert_string_equal (found.brokers [1], "b2");
    memset (&found, 0, sizeof (found));
    found.stop_after = 1;
    assert_int_equal (dsh_store_brokers (store, s_collect_broker, &found, error, sizeof (error)), 1);
    assert_int_equal (found.count, 1);
    dsh_store_destroy (&store);
}

//  Another process's store appending to the same chain
typedef struct {
    const char *broker;
    int appends;
    int failed;
    char error [256];
} s_writer_t;

static void *
s_writer (void *arg)
{
    s_writer_t *writer = (s_writer_t *) arg;
    dsh_store_t *store = dsh_store_new (s_location, writer->error, sizeof (writer->error));
    for (int index = 0; store && index < writer->appends && !writer->failed; index++)
        writer->failed = s_try_append (store, writer->broker, 3, &s_plain, NULL, NULL, writer->error,
                                       sizeof (writer->error)) != 0;
    if (!store)
        writer->failed = 1;
    dsh_store_destroy (&store);
    return NULL;
}

static void
test_two_writers (void **state)
{
    (void) state;
    dsh_store_t *first = s_open ();
    dsh_store_t *second = s_open ();
    uint64_t seqs [3];
    char hashes [3][DSH_STORE_HASH_SIZE + 1];
    char error [256];
    assert_int_equal (s_try_append (first, "w", 2, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [1], 2);
    assert_int_equal (s_try_append (second, "w", 3, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 3);
    assert_int_equal (s_try_append (first, "w", 1, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 6);
    assert_int_equal (s_try_append (second, "w", 1, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 7);
    s_holds (first, "w", 7, 0);
    s_holds (second, "w", 7, 0);

    //  At once, from two threads, on a chain that neither has made yet
    s_writer_t writers [2] = { { "at-once", 20, 0, "" }, { "at-once", 20, 0, "" } };
    pthread_t threads [2];
    for (size_t index = 0; index < 2; index++)
        assert_int_equal (pthread_create (&threads [index], NULL, s_writer, &writers [index]), 0);
    for (size_t index = 0; index < 2; index++) {
        pthread_join (threads [index], NULL);
        if (writers [index].failed)
            fail_msg ("writer %zu: %s", index, writers [index].error);
    }
    s_holds (first, "at-once", 2 * 20 * 3, 0);
    s_holds (first, "w", 7, 0);
    dsh_store_destroy (&first);
    dsh_store_destroy (&second);
}

static void *
s_opener (void *arg)
{
    s_writer_t *opener = (s_writer_t *) arg;
    dsh_store_t *store = dsh_store_new (s_location, opener->error, sizeof (opener->error));
    opener->failed = store == NULL;
    dsh_store_destroy (&store);
    return NULL;
}

static void
test_open_race (void **state)
{
    (void) state;
    //  Four brokers creating the tables at once
    s_writer_t openers [4];
    pthread_t threads [4];
    for (size_t index = 0; index < 4; index++) {
        openers [index] = (s_writer_t) { .broker = NULL };
        assert_int_equal (pthread_create (&threads [index], NULL, s_opener, &openers [index]), 0);
    }
    for (size_t index = 0; index < 4; index++) {
        pthread_join (threads [index], NULL);
        if (openers [index].failed)
            fail_msg ("opener %zu: %s", index, openers [index].error);
    }
    dsh_store_t *store = s_open ();
    s_append (store, "race", 2, &s_plain);
    s_holds (store, "race", 2, 0);
    dsh_store_destroy (&store);
}

static void
test_location (void **state)
{
    (void) state;
    char error [256];
    if (!s_uri) {
        dsh_store_t *store = s_open ();
        assert_string_equal (dsh_store_location (store), s_location);
        s_append (store, "l", 2, &s_plain);
        dsh_store_destroy (&store);
        //  "sqlite:" names the same file
        char *prefixed = zsys_sprintf ("sqlite:%s", s_location);
        store = dsh_store_new (prefixed, error, sizeof (error));
        assert_non_null (store);
        assert_string_equal (dsh_store_kind (store), "sqlite");
        assert_string_equal (dsh_store_location (store), prefixed);
        s_holds (store, "l", 2, 0);
        dsh_store_destroy (&store);
        zstr_free (&prefixed);
        return;
    }
    dsh_store_t *store = s_open ();
    assert_string_equal (dsh_store_location (store), s_uri);
    dsh_store_destroy (&store);
    //  The server trusts loopback: the passwords are there only to be hidden
    const char *host = strchr (s_uri, '@');
    assert_non_null (host);
    int user_end = (int) (host - s_uri);
    char *location = zsys_sprintf ("%.*s:secret%s?password=other&application_name=dsh-test", user_end, s_uri, host);
    char *shown = zsys_sprintf ("%.*s:***%s?password=***&application_name=dsh-test", user_end, s_uri, host);
    store = dsh_store_new (location, error, sizeof (error));
    if (!store)
        fail_msg ("%s: %s", location, error);
    assert_string_equal (dsh_store_location (store), shown);
    assert_null (strstr (dsh_store_location (store), "secret"));
    dsh_store_destroy (&store);
    zstr_free (&location);
    zstr_free (&shown);
    //  postgres:// too
    location = zsys_sprintf ("postgres://%s", s_uri + strlen ("postgresql://"));
    store = dsh_store_new (location, error, sizeof (error));
    assert_non_null (store);
    assert_string_equal (dsh_store_kind (store), "postgresql");
    dsh_store_destroy (&store);
    zstr_free (&location);
}

static void
test_errors (void **state)
{
    (void) state;
    char error [256];
    if (!s_uri) {
        assert_null (dsh_store_new ("/nonexistent-dsh-dir/audit.db", error, sizeof (error)));
        assert_string_equal (error,
            "sqlite /nonexistent-dsh-dir/audit.db: its directory /nonexistent-dsh-dir does not exist");
        FILE *file = fopen (s_location, "w");
        assert_non_null (file);
        for (int index = 0; index < 100; index++)
            fputs ("this is not a database\n", file);
        fclose (file);
        assert_null (dsh_store_new (s_location, error, sizeof (error)));
        char *expected = zsys_sprintf ("sqlite %s: file is not a database", s_location);
        assert_string_equal (error, expected);
        zstr_free (&expected);
        unlink (s_location);
    }
    else {
        assert_null (dsh_store_new ("postgresql://postgres@127.0.0.1:1/dsh", error, sizeof (error)));
        assert_string_equal (error, "postgresql: could not connect to 127.0.0.1:1: Connection refused");
        char *location = zsys_sprintf ("%.*s/nosuch", (int) (strrchr (s_uri, '/') - s_uri), s_uri);
        assert_null (dsh_store_new (location, error, sizeof (error)));
        assert_non_null (strstr (error, "postgresql: could not connect to 127.0.0.1:"));
        assert_non_null (strstr (error, ": database \"nosuch\" does not exist"));
        zstr_free (&location);
    }
    //  Tables newer than this code
    dsh_store_t *store = s_open ();
    dsh_store_destroy (&store);
    s_sql ("UPDATE dsh_schema SET version = 2");
    assert_null (dsh_store_new (s_location, error, sizeof (error)));
    assert_non_null (strstr (error, "the tables are version 2; this dsh knows version 1"));
    s_sql ("UPDATE dsh_schema SET version = 1");
    store = s_open ();
    dsh_store_destroy (&store);
}

//  SQLite on a disk that fills up, then has room again
static void
test_disk_full (void **state)
{
    (void) state;
    char mount_point [512];
    snprintf (mount_point, sizeof (mount_point), "%s/small", s_dir);
    assert_int_equal (mkdir (mount_point, 0700), 0);
    if (mount ("tmpfs", mount_point, "tmpfs", 0, "size=512k")) {
        print_message ("test_store: cannot mount a tmpfs (%s): the full disk case is skipped\n", strerror (errno));
        rmdir (mount_point);
        skip ();
    }
    snprintf (s_mounted, sizeof (s_mounted), "%s", mount_point);
    snprintf (s_location, sizeof (s_location), "%s/audit.db", mount_point);
    dsh_store_t *store = s_open ();
    s_append (store, "full", 2, &s_plain);

    //  What room is left, taken
    char *filler = zsys_sprintf ("%s/filler", mount_point);
    int fd = open (filler, O_WRONLY | O_CREAT, 0600);
    assert_true (fd >= 0);
    char block [4096];
    memset (block, 'f', sizeof (block));
    while (write (fd, block, sizeof (block)) > 0)
        ;
    while (write (fd, block, 1) > 0)
        ;
    assert_int_equal (errno, ENOSPC);
    close (fd);

    s_batch_t large = { "alice", "read", "ok", 2000, 64 * 1024 };
    uint64_t seqs [1];
    char hashes [1][DSH_STORE_HASH_SIZE + 1];
    char error [256] = "";
    assert_int_equal (s_try_append (store, "full", 1, &large, seqs, hashes, error, sizeof (error)), -1);
    print_message ("test_store: append on a full disk: %s\n", error);
    char *expected = zsys_sprintf ("sqlite %s: database or disk is full", s_location);
    assert_string_equal (error, expected);
    zstr_free (&expected);
    assert_int_equal (seqs [0], 0);
    assert_int_equal (s_try_append (store, "full", 1, &large, seqs, hashes, error, sizeof (error)), -1);

    //  Room again: the same store goes on
    unlink (filler);
    zstr_free (&filler);
    assert_int_equal (s_try_append (store, "full", 1, &large, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 3);
    s_holds (store, "full", 3, 0);
    dsh_store_destroy (&store);
    assert_int_equal (umount2 (mount_point, 0), 0);
    *s_mounted = 0;
    rmdir (mount_point);
}

//  SQLite's file deleted under the store: the next call says so and writes
//  nothing, the one after opens the path again (a new file, a new chain)
static void
test_file_deleted (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    s_append (store, "gone", 2, &s_plain);
    const char *suffixes [] = { "", "-wal", "-shm" };
    for (size_t index = 0; index < 3; index++) {
        char *path = zsys_sprintf ("%s%s", s_location, suffixes [index]);
        unlink (path);
        zstr_free (&path);
    }
    uint64_t seqs [1];
    char hashes [1][DSH_STORE_HASH_SIZE + 1];
    char error [256] = "";
    assert_int_equal (s_try_append (store, "gone", 1, &s_plain, seqs, hashes, error, sizeof (error)), -1);
    print_message ("test_store: append to a deleted file: %s\n", error);
    char *expected = zsys_sprintf ("sqlite %s: the file was deleted or replaced since it was opened", s_location);
    assert_non_null (strstr (error, expected));
    zstr_free (&expected);
    assert_int_equal (s_try_append (store, "gone", 1, &s_plain, seqs, hashes, error, sizeof (error)), 0);
    assert_int_equal (seqs [0], 1);
    s_holds (store, "gone", 1, 0);
    dsh_store_destroy (&store);
}

//  A PostgreSQL server that stops under a store and comes back
static void
test_server_restart (void **state)
{
    (void) state;
    dsh_store_t *store = s_open ();
    s_append (store, "back", 2, &s_plain);
    assert_int_equal (dsh_testkit_postgres_stop (s_dir), 0);

    uint64_t seqs [1];
    char hashes [1][DSH_STORE_HASH_SIZE + 1];
    char error [256] = "";
    //  The first call finds the connection gone, the next cannot make it
    assert_int_equal (s_try_append (store, "back", 1, &s_plain, seqs, hashes, error, sizeof (error)), -1);
    print_message ("test_store: append with the server stopped: %s\n", error);
    assert_true (strncmp (error, "postgresql: ", strlen ("postgresql: ")) == 0);
    assert_int_equal (s_try_append (store, "back", 1, &s_plain, seqs, hashes, error, sizeof (error)), -1);
    print_message ("test_store: and again: %s\n", error);
    assert_non_null (strstr (error, "postgresql: could not connect to 127.0.0.1:"));
    assert_non_null (strstr (error, ": Connection refused"));
    dsh_store_verdict_t verdict;
    assert_int_equal (dsh_store_verify (store, "back", &verdict, error, sizeof (error)), -1);
    assert_null (dsh_store_modes (store, error, sizeof (error)));

    assert_int_equal (dsh_testkit_postgres_restart (s_dir), 0);
    if (s_try_append (store, "back", 1, &s_plain, seqs, hashes, error, sizeof (error)))
        fail_msg ("append after the restart: %s", error);
    assert_int_equal (seqs [0], 3);
    s_holds (store, "back", 3, 0);
    zhashx_t *modes = dsh_store_modes (store, error, sizeof (error));
    assert_non_null (modes);
    zhashx_destroy (&modes);
    dsh_store_destroy (&store);
}

int
main (int argc, char *argv [])
{
    bool postgresql = argc > 1 && streq (argv [1], "postgresql");
    assert_non_null (mkdtemp (s_dir));
    if (postgresql) {
        s_uri = dsh_testkit_postgres_start (s_dir);
        if (!s_uri) {
            rmdir (s_dir);
            return 77;
        }
    }
    const struct CMUnitTest shared [] = {
        cmocka_unit_test (test_hash_rule),
        cmocka_unit_test_setup_teardown (test_append, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_append_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_query, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_verify_holds, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_tamper_record, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_tamper_column, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_delete_middle, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_delete_last, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_prune, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_modes, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_brokers, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_two_writers, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_open_race, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_location, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_errors, s_setup, s_teardown),
    };
    const struct CMUnitTest sqlite_only [] = {
        cmocka_unit_test_setup_teardown (test_disk_full, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_file_deleted, s_setup, s_teardown),
    };
    const struct CMUnitTest postgresql_only [] = {
        cmocka_unit_test_setup_teardown (test_server_restart, s_setup, s_teardown),
    };
    int rc = cmocka_run_group_tests_name (postgresql? "store on postgresql": "store on sqlite", shared, NULL, NULL);
    if (postgresql)
        rc += cmocka_run_group_tests_name ("postgresql", postgresql_only, NULL, NULL);
    else
        rc += cmocka_run_group_tests_name ("sqlite", sqlite_only, NULL, NULL);
    if (postgresql)
        dsh_testkit_postgres_stop (s_dir);
    zstr_free (&s_uri);
    zdir_t *dir = zdir_new (s_dir, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
    return rc;
}
