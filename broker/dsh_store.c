/*  =========================================================================
    dsh_store - the broker's durable state in SQLite or PostgreSQL

    The tables, the same names and columns on both engines (BIGINT is an
    integer to SQLite too):
        dsh_audit       one row per record: (broker, seq) its key, the
                        record's fields copied out into columns for
                        queries, the JSON text, prev and hash
        dsh_audit_head  one row per chain: its last seq and hash, and its
                        anchor (the last record pruned: seq 0 and 64 "0"
                        until something is)
        dsh_modes       agent -> mode, who set it and when
        dsh_pins        tool name -> the pinned definition's digest and
                        Typed JSON, who first offered it (component, key)
                        and when, who accepted it and when, a rejected
                        digest (dsh_pins)
        dsh_grants      grant id -> its stage, its JSON (as the permission
                        stage made it), when it expires, when revoked
        dsh_schema      the tables' version (1)
    They are created if missing, in one transaction: on SQLite under BEGIN
    IMMEDIATE, on PostgreSQL under a transaction-scoped advisory lock,
    because two brokers may open one database at once and CREATE ... IF
    NOT EXISTS is not safe against a concurrent CREATE of the same name.

    The indexes: answered_ms (with call_id beside it), (agent, answered_ms)
    and (tool, answered_ms). There is none by call_id: call ids are the
    clients' own, random, so an index on them puts each new row in a
    random leaf, and SQLite writes every page a transaction dirtied to its
    log (that index doubled the bytes an append wrote, and grew with the
    table). A query by call_id reads the answered_ms index over its time
    window, and only the rows whose call_id matches: without a window it
    reads that whole index (an entry per record, not the records' text).
    Right, but not fast on a large store.

    SQL: one text serves both engines where it can. Parameters are written
    $1, $2, ..., PostgreSQL's syntax; SQLite is given them as ?1, ?2, ...
    (its numbered parameters) and they are bound by position. Where the
    engines differ (the head's row lock, a text's length in bytes) a
    statement has a second text for PostgreSQL, and a few statements are
    PostgreSQL's alone (an append's, below).
    Every statement is prepared the first time it is used on a connection
    and kept until the connection goes; values are always bound. A query
    has one statement per filter shape (which of its five string filters
    are set, and the order), so that each shape is a plain WHERE its index
    can serve: 64 shapes at most, each prepared at its first use.

    An append is one transaction whatever its size. SQLite inserts its rows
    one statement each (in the process: a statement costs no round trip).
    PostgreSQL takes two round trips (libpq's pipeline mode): BEGIN, the
    head made if missing and locked; then the rows, each column of them
    one array (in binary) that an INSERT unnests (one INSERT per 16 MiB of
    records), the head moved, and COMMIT. A failure in a pipeline makes the server skip the
    rest of it; the first failure's message is the call's reason.

    Rows are read one at a time (SQLite steps; PostgreSQL's single-row
    mode), so neither verify nor a query holds more than a row in memory.
    While fn reads a query's rows the connection is busy with them: fn
    must not call the store. Verify reads the head and then the chain in
    one read-only snapshot, so appends meanwhile do not confuse it.

    Failures leave the store able to try again. SQLite: a failed write
    (disk full, an I/O error, the file locked past the busy timeout) is
    rolled back and the next call simply runs; after an error that may
    mean the file itself is unusable (I/O, corrupt, not a database, cannot
    open), or once a call has found the file deleted or replaced under it
    (and said so), the next call closes and reopens it. PostgreSQL: once the
    connection is bad (the server went away), the next call resets it
    (PQreset: the same parameters), creates the tables if they are gone,
    and prepares statements again as they are used.
    =========================================================================
*/

#include "dsh_store.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>

#define S_LENGTH(array) (sizeof (array) / sizeof ((array) [0]))

#define S_VERSION 1                 //  of the tables, in dsh_schema
#define S_SQLITE_BUSY_MS 5000       //  how long a writer waits for another's lock
#define S_PG_CONNECT_TIMEOUT "10"   //  seconds, unless the location says otherwise
#define S_PARAMS_MAX 12             //  the most values a statement binds (an insert)
#define S_PG_INSERT_BYTES (16 << 20) //  record bytes in one INSERT of an append (about)
#define S_PG_VALUE_MAX (1 << 30)    //  bytes: PostgreSQL keeps no longer value
#define S_PG_INT8 20                //  the types (pg_type's oids) of an append's arrays
#define S_PG_TEXT 25

//  The prev of a chain's first record
static const char s_chain_start [] =
    "0000000000000000" "0000000000000000" "0000000000000000" "0000000000000000";
_Static_assert (sizeof (s_chain_start) == DSH_STORE_HASH_SIZE + 1, "a chain starts at 64 zeros");

typedef enum {
    S_SQLITE,
    S_POSTGRESQL
} s_engine_t;

//  The statements; after them, one slot per query shape
typedef enum {
    S_SCHEMA_VERSION,
    S_SCHEMA_INIT,
    S_HEAD_CREATE,
    S_HEAD_LOCK,
    S_HEAD_READ,
    S_HEAD_MOVE,
    S_HEAD_ANCHOR,
    S_INSERT,
    S_BEGIN,
    S_INSERT_BATCH,
    S_COMMIT,
    S_CHAIN,
    S_PRUNE_AGE,
    S_PRUNE_LAST,
    S_PRUNE_DELETE,
    S_COUNT_ALL,
    S_COUNT_BROKER,
    S_BROKERS,
    S_MODE_UPSERT,
    S_MODE_DELETE,
    S_MODES,
    S_PIN_FIRST,
    S_PIN_REPLACE,
    S_PIN_DELETE,
    S_PINS,
    S_GRANT_PUT,
    S_GRANT_REVOKE,
    S_GRANTS,
    S_GRANT_PRUNE,
    S_QUERY
} s_slot_t;

//  A query's shape: a bit per string filter set (s_filter_columns'
//  order), and one for the order
#define S_OLDEST_FIRST 32
#define S_QUERY_SHAPES 64
#define S_SLOTS (S_QUERY + S_QUERY_SHAPES)

//  A row's columns in dsh_store_row_t's order, as query and verify read
//  them (s_row_read) and insert writes them
#define S_ROW_COLUMNS \
    "broker, seq, received_ms, answered_ms, agent, tool, call_id, outcome, caller, record, prev, hash"

//  A pin's columns, in dsh_pin_t's order
#define S_PIN_COLUMNS \
    "name, digest, definition, component, key, first_ms, accepted_by, accepted_ms, rejected"

typedef struct {
    const char *sql;                //  for both engines
    const char *postgresql;         //  PostgreSQL's own text, where it differs
} s_statement_t;

static const s_statement_t s_statements [S_QUERY] = {
    [S_SCHEMA_VERSION] = { "SELECT MAX(version) FROM dsh_schema", NULL },
    [S_SCHEMA_INIT] = { "INSERT INTO dsh_schema (version) VALUES ($1)", NULL },
    [S_HEAD_CREATE] = {
        "INSERT INTO dsh_audit_head (broker, seq, hash, anchor_seq, anchor_hash) VALUES ($1, 0, $2, 0, $2)"
        " ON CONFLICT (broker) DO NOTHING", NULL },
    //  The head, locked until the transaction ends. On SQLite, BEGIN
    //  IMMEDIATE has taken the file's write lock already.
    [S_HEAD_LOCK] = {
        "SELECT seq, hash, anchor_seq FROM dsh_audit_head WHERE broker = $1",
        "SELECT seq, hash, anchor_seq FROM dsh_audit_head WHERE broker = $1 FOR UPDATE" },
    [S_HEAD_READ] = { "SELECT seq, hash, anchor_seq, anchor_hash FROM dsh_audit_head WHERE broker = $1", NULL },
    [S_HEAD_MOVE] = { "UPDATE dsh_audit_head SET seq = $1, hash = $2 WHERE broker = $3", NULL },
    [S_HEAD_ANCHOR] = { "UPDATE dsh_audit_head SET anchor_seq = $1, anchor_hash = $2 WHERE broker = $3", NULL },
    [S_INSERT] = {
        "INSERT INTO dsh_audit (" S_ROW_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        NULL },
    //  PostgreSQL's alone: an append's pipeline. Its rows' columns but the
    //  broker are arrays, in S_ROW_COLUMNS' order.
    [S_BEGIN] = { NULL, "BEGIN" },
    [S_INSERT_BATCH] = { NULL,
        "INSERT INTO dsh_audit (" S_ROW_COLUMNS ") SELECT $1::text, * FROM unnest($2::bigint[], $3::bigint[],"
        " $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],"
        " $12::text[])" },
    [S_COMMIT] = { NULL, "COMMIT" },
    [S_CHAIN] = { "SELECT " S_ROW_COLUMNS " FROM dsh_audit WHERE broker = $1 ORDER BY seq", NULL },
    [S_PRUNE_AGE] = {
        "SELECT seq FROM dsh_audit WHERE broker = $1 AND answered_ms >= $2 ORDER BY seq LIMIT 1", NULL },
    [S_PRUNE_LAST] = {
        "SELECT seq, hash FROM dsh_audit WHERE broker = $1 AND seq <= $2 ORDER BY seq DESC LIMIT 1", NULL },
    [S_PRUNE_DELETE] = { "DELETE FROM dsh_audit WHERE broker = $1 AND seq <= $2", NULL },
    //  A record's bytes: SQLite's length() of a text counts characters
    [S_COUNT_ALL] = {
        "SELECT COUNT(*), COALESCE(SUM(length(CAST(record AS BLOB))), 0) FROM dsh_audit",
        "SELECT COUNT(*), COALESCE(SUM(octet_length(record)), 0) FROM dsh_audit" },
    [S_COUNT_BROKER] = {
        "SELECT COUNT(*), COALESCE(SUM(length(CAST(record AS BLOB))), 0) FROM dsh_audit WHERE broker = $1",
        "SELECT COUNT(*), COALESCE(SUM(octet_length(record)), 0) FROM dsh_audit WHERE broker = $1" },
    [S_BROKERS] = { "SELECT broker FROM dsh_audit_head ORDER BY broker", NULL },
    [S_MODE_UPSERT] = {
        "INSERT INTO dsh_modes (agent, mode, set_by, set_ms) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (agent) DO UPDATE SET mode = excluded.mode, set_by = excluded.set_by,"
        " set_ms = excluded.set_ms", NULL },
    [S_MODE_DELETE] = { "DELETE FROM dsh_modes WHERE agent = $1", NULL },
    [S_MODES] = { "SELECT agent, mode FROM dsh_modes", NULL },
    //  The first definition seen wins: two brokers that pin a name at once
    //  keep one pin, and each reads it back at its next poll. A row that
    //  holds only a rejection (no digest yet) takes a first pin.
    [S_PIN_FIRST] = {
        "INSERT INTO dsh_pins (" S_PIN_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        " ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, definition = excluded.definition,"
        " component = excluded.component, key = excluded.key, first_ms = excluded.first_ms"
        " WHERE dsh_pins.digest = ''", NULL },
    [S_PIN_REPLACE] = {
        "INSERT INTO dsh_pins (" S_PIN_COLUMNS ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        " ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, definition = excluded.definition,"
        " component = excluded.component, key = excluded.key, first_ms = excluded.first_ms,"
        " accepted_by = excluded.accepted_by, accepted_ms = excluded.accepted_ms, rejected = excluded.rejected",
        NULL },
    [S_PIN_DELETE] = { "DELETE FROM dsh_pins WHERE name = $1", NULL },
    [S_PINS] = { "SELECT " S_PIN_COLUMNS " FROM dsh_pins ORDER BY name", NULL },
    [S_GRANT_PUT] = {
        "INSERT INTO dsh_grants (id, stage, grant_json, expires_ms) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (id) DO NOTHING", NULL },
    [S_GRANT_REVOKE] = { "UPDATE dsh_grants SET revoked_ms = $2 WHERE id = $1", NULL },
    [S_GRANTS] = {
        "SELECT grant_json FROM dsh_grants WHERE expires_ms > $1 AND revoked_ms IS NULL ORDER BY id", NULL },
    [S_GRANT_PRUNE] = { "DELETE FROM dsh_grants WHERE expires_ms < $1", NULL },
};

//  The tables, created if missing (the version row is S_SCHEMA_INIT's)
static const char *s_schema [] = {
    "CREATE TABLE IF NOT EXISTS dsh_schema (version INT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dsh_audit ("
        "broker TEXT NOT NULL, seq BIGINT NOT NULL, received_ms BIGINT NOT NULL, answered_ms BIGINT NOT NULL,"
        " agent TEXT NOT NULL, tool TEXT NOT NULL, call_id TEXT NOT NULL, outcome TEXT NOT NULL,"
        " caller TEXT NOT NULL, record TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL,"
        " PRIMARY KEY (broker, seq))",
    "CREATE INDEX IF NOT EXISTS dsh_audit_answered ON dsh_audit (answered_ms, call_id)",
    "CREATE INDEX IF NOT EXISTS dsh_audit_agent ON dsh_audit (agent, answered_ms)",
    "CREATE INDEX IF NOT EXISTS dsh_audit_tool ON dsh_audit (tool, answered_ms)",
    "CREATE TABLE IF NOT EXISTS dsh_audit_head ("
        "broker TEXT NOT NULL PRIMARY KEY, seq BIGINT NOT NULL, hash TEXT NOT NULL,"
        " anchor_seq BIGINT NOT NULL, anchor_hash TEXT NOT NULL)",
    //  (Parenthesized: clang takes two literals side by side in an array
    //  for a missing comma)
    ("CREATE TABLE IF NOT EXISTS dsh_modes ("
        "agent TEXT NOT NULL PRIMARY KEY, mode TEXT NOT NULL, set_by TEXT, set_ms BIGINT)"),
    ("CREATE TABLE IF NOT EXISTS dsh_pins ("
        "name TEXT NOT NULL PRIMARY KEY, digest TEXT NOT NULL, definition TEXT NOT NULL, component TEXT NOT NULL,"
        " key TEXT NOT NULL, first_ms BIGINT NOT NULL, accepted_by TEXT NOT NULL, accepted_ms BIGINT NOT NULL,"
        " rejected TEXT NOT NULL)"),
    ("CREATE TABLE IF NOT EXISTS dsh_grants ("
        "id TEXT NOT NULL PRIMARY KEY, stage TEXT NOT NULL, grant_json TEXT NOT NULL, expires_ms BIGINT NOT NULL,"
        " revoked_ms BIGINT)"),
};

//  The columns a query may select on, in the order of a shape's bits
static const char *s_filter_columns [] = { "broker", "agent", "tool", "outcome", "call_id" };

//  A value to bind: an integer, a string (NULL: SQL NULL), or (on
//  PostgreSQL) bytes in the binary format of the parameter's type
typedef struct {
    const char *text;
    int64_t integer;
    bool is_integer;
    const void *bytes;
    size_t size;
} s_value_t;

//  A place in a chain: a record's seq and hash (or the anchor's)
typedef struct {
    uint64_t seq;
    char hash [DSH_STORE_HASH_SIZE + 1];
} s_link_t;

struct _dsh_store_t {
    s_engine_t engine;
    char *location;                 //  as given
    char *display;                  //  the location without its password
    char *path;                     //  SQLite: the file
    sqlite3 *db;                    //  SQLite: NULL until (re)opened
    sqlite3_stmt *statements [S_SLOTS];     //  SQLite: each prepared at its first use
    bool reopen;                    //  SQLite: the file failed; reopen it at the next call
    PGconn *conn;                   //  PostgreSQL
    bool prepared [S_SLOTS];        //  PostgreSQL: on this connection
    PGresult *result;               //  PostgreSQL: the row s_next read
    int running;                    //  the slot whose rows are being read, or -1
    EVP_MD_CTX *digest;             //  for the hashes of an append's rows
    int64_t changes;                //  rows the last statement changed
    char reason [512];              //  why the last call failed
};

static s_value_t
s_param_text (const char *text)
{
    return (s_value_t) { .text = text };
}

static s_value_t
s_param_int (int64_t integer)
{
    return (s_value_t) { .integer = integer, .is_integer = true };
}

static s_value_t
s_param_bytes (zchunk_t *chunk)
{
    return (s_value_t) { .bytes = zchunk_data (chunk), .size = zchunk_size (chunk) };
}

static bool
s_starts (const char *text, const char *prefix)
{
    return strncmp (text, prefix, strlen (prefix)) == 0;
}

//  Writes why into reason, after the engine's name (and the file, for
//  SQLite). Returns -1.
static int
s_say (dsh_store_t *self, const char *format, ...) __attribute__ ((format (printf, 2, 3)));

static int
s_say (dsh_store_t *self, const char *format, ...)
{
    int prefix = self->engine == S_SQLITE
        ? snprintf (self->reason, sizeof (self->reason), "sqlite %s: ", self->path)
        : snprintf (self->reason, sizeof (self->reason), "postgresql: ");
    if (prefix < 0 || (size_t) prefix >= sizeof (self->reason))
        return -1;
    va_list args;
    va_start (args, format);
    vsnprintf (self->reason + prefix, sizeof (self->reason) - (size_t) prefix, format, args);
    va_end (args);
    return -1;
}

//  rc; when it is -1, the reason in error
static int
s_result (dsh_store_t *self, int rc, char *error, size_t error_size)
{
    if (rc < 0 && error && error_size)
        snprintf (error, error_size, "%s", self->reason);
    return rc;
}

//  SQLite's last error. After one that may mean the file is unusable (an
//  I/O error, damage, the file deleted or replaced under us), the next
//  call reopens it.
static int
s_sqlite_failed (dsh_store_t *self)
{
    int code = sqlite3_extended_errcode (self->db);
    int primary = code & 0xff;
    if (primary == SQLITE_IOERR || primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB
    ||  primary == SQLITE_CANTOPEN || code == SQLITE_READONLY_DBMOVED)
        self->reopen = true;
    return s_say (self, "%s", sqlite3_errmsg (self->db));
}

//  The first line of a libpq message, without its severity ("ERROR:  ")
static int
s_pg_say (dsh_store_t *self, const char *prefix, const char *message)
{
    if (!message || !*message)
        message = "the server did not say why";
    const char *severities [] = { "ERROR:  ", "FATAL:  ", "PANIC:  " };
    for (size_t index = 0; index < S_LENGTH (severities); index++)
        if (s_starts (message, severities [index]))
            message += strlen (severities [index]);
    return s_say (self, "%s%.*s", prefix, (int) strcspn (message, "\n"), message);
}

//  A statement's failure: the result's own message, else the connection's
static int
s_pg_failed (dsh_store_t *self, const PGresult *result)
{
    const char *message = result? PQresultErrorField (result, PG_DIAG_MESSAGE_PRIMARY): NULL;
    return s_pg_say (self, "", message? message: PQerrorMessage (self->conn));
}

//  A connection that could not be made: libpq says 'connection to server
//  at "host", port 5432 failed: why'; we say where, then why
static int
s_pg_unreachable (dsh_store_t *self)
{
    const char *message = PQerrorMessage (self->conn);
    const char *failed = message? strstr (message, "failed: "): NULL;
    const char *host = PQhost (self->conn);
    const char *port = PQport (self->conn);
    char where [300];
    snprintf (where, sizeof (where), "could not connect to %s:%s: ",
              host && *host? host: "the server", port && *port? port: "5432");
    return s_pg_say (self, where, failed? failed + strlen ("failed: "): message);
}

//  The server's notices ("relation already exists, skipping", from every
//  CREATE ... IF NOT EXISTS) are not for the broker's log
static void
s_pg_notice (void *arg, const char *message)
{
    (void) arg;
    (void) message;
}

//  The text of a query shape's statement
static const char *
s_query_sql (int shape, char *buffer, size_t size)
{
    size_t length = (size_t) snprintf (buffer, size,
        "SELECT " S_ROW_COLUMNS " FROM dsh_audit WHERE answered_ms >= $1 AND answered_ms < $2");
    int param = 3;
    for (size_t index = 0; index < S_LENGTH (s_filter_columns); index++)
        if (shape & (1 << index))
            length += (size_t) snprintf (buffer + length, size - length, " AND %s = $%d",
                                         s_filter_columns [index], param++);
    snprintf (buffer + length, size - length, "%s LIMIT $%d",
              shape & S_OLDEST_FIRST? " ORDER BY answered_ms, broker, seq"
                                    : " ORDER BY answered_ms DESC, broker, seq DESC", param);
    return buffer;
}

//  sql as SQLite is given it: $1, $2, ... written ?1, ?2, ...
static const char *
s_sqlite_numbered (const char *sql, char *buffer, size_t size)
{
    size_t length = strlen (sql);
    assert (length < size);
    for (size_t index = 0; index <= length; index++)
        buffer [index] = sql [index] == '$' && isdigit ((unsigned char) sql [index + 1])? '?': sql [index];
    return buffer;
}

//  Prepares slot's statement on this connection, if it is not yet
static int
s_prepare (dsh_store_t *self, int slot)
{
    if (self->engine == S_SQLITE? self->statements [slot] != NULL: self->prepared [slot])
        return 0;
    char buffer [1024];
    const char *sql;
    if (slot >= S_QUERY)
        sql = s_query_sql (slot - S_QUERY, buffer, sizeof (buffer));
    else
    if (self->engine == S_POSTGRESQL && s_statements [slot].postgresql)
        sql = s_statements [slot].postgresql;
    else
        sql = s_statements [slot].sql;
    assert (sql);
    if (self->engine == S_SQLITE) {
        char numbered [1024];
        sql = s_sqlite_numbered (sql, numbered, sizeof (numbered));
        return sqlite3_prepare_v3 (self->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &self->statements [slot], NULL)
            == SQLITE_OK? 0: s_sqlite_failed (self);
    }
    char name [16];
    snprintf (name, sizeof (name), "dsh_%d", slot);
    PGresult *result = PQprepare (self->conn, name, sql, 0, NULL);
    int rc = PQresultStatus (result) == PGRES_COMMAND_OK? 0: s_pg_failed (self, result);
    PQclear (result);
    self->prepared [slot] = rc == 0;
    return rc;
}

//  PostgreSQL: sends slot's statement (prepared) with values bound to $1,
//  $2, ...; libpq copies them out before it returns
static int
s_pg_send (dsh_store_t *self, int slot, const s_value_t *values, size_t count)
{
    assert (count <= S_PARAMS_MAX);
    char numbers [S_PARAMS_MAX][24];
    const char *texts [S_PARAMS_MAX];
    int sizes [S_PARAMS_MAX];
    int formats [S_PARAMS_MAX];
    for (size_t index = 0; index < count; index++) {
        texts [index] = values [index].text;
        sizes [index] = 0;
        formats [index] = 0;
        if (values [index].is_integer) {
            snprintf (numbers [index], sizeof (numbers [index]), "%" PRId64, values [index].integer);
            texts [index] = numbers [index];
        }
        else
        if (values [index].bytes) {
            assert (values [index].size <= INT_MAX);
            texts [index] = (const char *) values [index].bytes;
            sizes [index] = (int) values [index].size;
            formats [index] = 1;
        }
    }
    char name [16];
    snprintf (name, sizeof (name), "dsh_%d", slot);
    return PQsendQueryPrepared (self->conn, name, (int) count, texts, sizes, formats, 0)? 0: s_pg_failed (self, NULL);
}

//  Starts slot's statement with values bound to $1, $2, ...; read its
//  rows with s_next, then s_finish.
static int
s_run (dsh_store_t *self, int slot, const s_value_t *values, size_t count)
{
    assert (self->running < 0);
    assert (count <= S_PARAMS_MAX);
    if (s_prepare (self, slot))
        return -1;
    if (self->engine == S_SQLITE) {
        sqlite3_stmt *statement = self->statements [slot];
        assert (sqlite3_bind_parameter_count (statement) == (int) count);
        for (size_t index = 0; index < count; index++) {
            int position = (int) index + 1;
            assert (!values [index].bytes);
            int rc = values [index].is_integer? sqlite3_bind_int64 (statement, position, values [index].integer)
                   : values [index].text? sqlite3_bind_text (statement, position, values [index].text, -1,
                                                             SQLITE_STATIC)
                   : sqlite3_bind_null (statement, position);
            if (rc != SQLITE_OK) {
                sqlite3_clear_bindings (statement);
                return s_sqlite_failed (self);
            }
        }
        self->running = slot;
        return 0;
    }
    if (s_pg_send (self, slot, values, count))
        return -1;
    PQsetSingleRowMode (self->conn);
    self->running = slot;
    return 0;
}

//  The running statement's next row: 1 (read it with s_column_*), 0 (no
//  more; changes holds what it changed), -1 (failed: reason says why)
static int
s_next (dsh_store_t *self)
{
    assert (self->running >= 0);
    if (self->engine == S_SQLITE) {
        int rc = sqlite3_step (self->statements [self->running]);
        if (rc == SQLITE_ROW)
            return 1;
        if (rc == SQLITE_DONE) {
            self->changes = sqlite3_changes (self->db);
            return 0;
        }
        return s_sqlite_failed (self);
    }
    PQclear (self->result);
    self->result = PQgetResult (self->conn);
    if (!self->result)
        return 0;
    ExecStatusType status = PQresultStatus (self->result);
    if (status == PGRES_SINGLE_TUPLE)
        return 1;
    int rc = 0;
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK)
        self->changes = strtoll (PQcmdTuples (self->result), NULL, 10);
    else
        rc = s_pg_failed (self, self->result);
    PQclear (self->result);
    self->result = NULL;
    return rc;
}

//  Ends the running statement, its rows read or not
static void
s_finish (dsh_store_t *self)
{
    if (self->running < 0)
        return;
    if (self->engine == S_SQLITE) {
        sqlite3_reset (self->statements [self->running]);
        sqlite3_clear_bindings (self->statements [self->running]);
    }
    else {
        PQclear (self->result);
        self->result = NULL;
        //  A statement is over when libpq has no more results for it
        PGresult *rest;
        while ((rest = PQgetResult (self->conn)))
            PQclear (rest);
    }
    self->running = -1;
}

//  Runs a statement whose rows (if any) do not matter
static int
s_do (dsh_store_t *self, int slot, const s_value_t *values, size_t count)
{
    if (s_run (self, slot, values, count))
        return -1;
    int rc;
    while ((rc = s_next (self)) == 1)
        ;
    s_finish (self);
    return rc;
}

//  Runs a statement and reads its first row: 1 (read it, then s_finish),
//  0 (no row), -1
static int
s_first (dsh_store_t *self, int slot, const s_value_t *values, size_t count)
{
    if (s_run (self, slot, values, count))
        return -1;
    int found = s_next (self);
    if (found != 1)
        s_finish (self);
    return found;
}

//  A column of the row s_next read; a NULL text is ""
static const char *
s_column_text (dsh_store_t *self, int column)
{
    const char *text = self->engine == S_SQLITE
        ? (const char *) sqlite3_column_text (self->statements [self->running], column)
        : PQgetisnull (self->result, 0, column)? NULL: PQgetvalue (self->result, 0, column);
    return text? text: "";
}

static int64_t
s_column_int (dsh_store_t *self, int column)
{
    return self->engine == S_SQLITE
        ? sqlite3_column_int64 (self->statements [self->running], column)
        : strtoll (PQgetvalue (self->result, 0, column), NULL, 10);
}

static bool
s_column_null (dsh_store_t *self, int column)
{
    return self->engine == S_SQLITE
        ? sqlite3_column_type (self->statements [self->running], column) == SQLITE_NULL
        : PQgetisnull (self->result, 0, column);
}

//  A hash column into hash; one that is not 64 characters long reads as
//  "", so that verify cannot take a longer one for the hash it starts with
static void
s_column_hash (dsh_store_t *self, int column, char *hash)
{
    const char *text = s_column_text (self, column);
    snprintf (hash, DSH_STORE_HASH_SIZE + 1, "%s", strlen (text) == DSH_STORE_HASH_SIZE? text: "");
}

//  The row s_next read, its columns in S_ROW_COLUMNS' order (its strings
//  valid until the next s_next)
static void
s_row_read (dsh_store_t *self, dsh_store_row_t *row)
{
    row->broker = s_column_text (self, 0);
    row->seq = (uint64_t) s_column_int (self, 1);
    row->received_ms = s_column_int (self, 2);
    row->answered_ms = s_column_int (self, 3);
    row->agent = s_column_text (self, 4);
    row->tool = s_column_text (self, 5);
    row->call_id = s_column_text (self, 6);
    row->outcome = s_column_text (self, 7);
    row->caller = s_column_text (self, 8);
    row->record = s_column_text (self, 9);
    s_column_hash (self, 10, row->prev);
    s_column_hash (self, 11, row->hash);
}

//  Runs a statement without parameters or rows (BEGIN, DDL)
static int
s_exec (dsh_store_t *self, const char *sql)
{
    if (self->engine == S_SQLITE)
        return sqlite3_exec (self->db, sql, NULL, NULL, NULL) == SQLITE_OK? 0: s_sqlite_failed (self);
    PGresult *result = PQexec (self->conn, sql);
    ExecStatusType status = PQresultStatus (result);
    int rc = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK? 0: s_pg_failed (self, result);
    PQclear (result);
    return rc;
}

//  A write transaction takes the chain's lock at once (SQLite: the
//  file's; PostgreSQL: the head row's, by S_HEAD_LOCK); a read sees one
//  snapshot from its first statement to its end
static int
s_begin (dsh_store_t *self, bool write)
{
    if (self->engine == S_SQLITE)
        return s_exec (self, write? "BEGIN IMMEDIATE": "BEGIN");
    return s_exec (self, write? "BEGIN": "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
}

static int
s_commit (dsh_store_t *self)
{
    return s_exec (self, "COMMIT");
}

//  Ends a failed transaction, if one is open (the engine may have ended it
//  already); reason keeps what went wrong
static void
s_rollback (dsh_store_t *self)
{
    s_finish (self);
    if (self->engine == S_SQLITE) {
        if (self->db && !sqlite3_get_autocommit (self->db))
            sqlite3_exec (self->db, "ROLLBACK", NULL, NULL, NULL);
    }
    else
    if (PQstatus (self->conn) == CONNECTION_OK && PQtransactionStatus (self->conn) != PQTRANS_IDLE)
        PQclear (PQexec (self->conn, "ROLLBACK"));
}

//  Creates what is missing and checks the version, in the transaction
static int
s_schema_create (dsh_store_t *self)
{
    //  Released when the transaction ends; the key is any number that is
    //  dsh's alone ("dshs")
    if (self->engine == S_POSTGRESQL && s_exec (self, "SELECT pg_advisory_xact_lock(1685284979)"))
        return -1;
    for (size_t index = 0; index < S_LENGTH (s_schema); index++)
        if (s_exec (self, s_schema [index]))
            return -1;
    int found = s_first (self, S_SCHEMA_VERSION, NULL, 0);
    if (found < 0)
        return -1;
    bool empty = found == 0 || s_column_null (self, 0);
    int64_t version = empty? 0: s_column_int (self, 0);
    s_finish (self);
    if (empty) {
        s_value_t values [] = { s_param_int (S_VERSION) };
        return s_do (self, S_SCHEMA_INIT, values, S_LENGTH (values));
    }
    if (version != S_VERSION)
        return s_say (self, "the tables are version %" PRId64 "; this dsh knows version %d", version, S_VERSION);
    return 0;
}

static int
s_schema_ready (dsh_store_t *self)
{
    int rc = s_begin (self, true);
    if (rc == 0)
        rc = s_schema_create (self);
    if (rc == 0)
        rc = s_commit (self);
    if (rc)
        s_rollback (self);
    return rc;
}

static void
s_sqlite_close (dsh_store_t *self)
{
    for (size_t slot = 0; slot < S_SLOTS; slot++) {
        sqlite3_finalize (self->statements [slot]);
        self->statements [slot] = NULL;
    }
    sqlite3_close (self->db);
    self->db = NULL;
}

//  WAL: readers never wait for the writer, and a commit is one append to
//  the log; with synchronous NORMAL the log is synced at checkpoints, so a
//  power cut may lose the last commits but never breaks the file
static int
s_sqlite_wal (dsh_store_t *self)
{
    //  Turning a new file to WAL needs it to itself, and SQLite does not
    //  wait for that (its busy handler could deadlock two such openers):
    //  two brokers opening a new file at once wait here instead
    int64_t give_up = zclock_mono () + S_SQLITE_BUSY_MS;
    int rc;
    const char *mode = NULL;
    sqlite3_stmt *statement = NULL;
    while (true) {
        rc = sqlite3_prepare_v2 (self->db, "PRAGMA journal_mode = WAL", -1, &statement, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_step (statement);
        if ((rc & 0xff) != SQLITE_BUSY || zclock_mono () >= give_up)
            break;
        sqlite3_finalize (statement);
        statement = NULL;
        zclock_sleep (10);
    }
    if (rc == SQLITE_ROW)
        mode = (const char *) sqlite3_column_text (statement, 0);
    if (rc != SQLITE_ROW)
        rc = s_sqlite_failed (self);
    else
    if (!mode || !streq (mode, "wal"))
        rc = s_say (self, "cannot keep a write-ahead log here (the journal mode stays %s)", mode? mode: "unknown");
    else
        rc = 0;
    sqlite3_finalize (statement);
    return rc;
}

static int
s_sqlite_open (dsh_store_t *self)
{
    if (!*self->path) {
        snprintf (self->reason, sizeof (self->reason), "sqlite: the location names no file");
        return -1;
    }
    //  SQLite would say only "unable to open database file"
    const char *slash = strrchr (self->path, '/');
    char *directory = slash? zsys_sprintf ("%.*s", (int) (slash - self->path), self->path): strdup (".");
    struct stat info;
    bool found = stat (*directory? directory: "/", &info) == 0 && S_ISDIR (info.st_mode);
    if (!found)
        s_say (self, "its directory %s does not exist", directory);
    zstr_free (&directory);
    if (!found)
        return -1;

    if (sqlite3_open_v2 (self->path, &self->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        s_sqlite_failed (self);
        s_sqlite_close (self);
        return -1;
    }
    sqlite3_extended_result_codes (self->db, 1);
    sqlite3_busy_timeout (self->db, S_SQLITE_BUSY_MS);
    int rc = s_sqlite_wal (self);
    if (rc == 0)
        rc = s_exec (self, "PRAGMA synchronous = NORMAL");
    //  The indexes take a record each at a random place (call ids): with
    //  SQLite's 2 MB default cache every append read its pages back from
    //  the kernel (42 us a row); 64 MiB of cache and the file mapped keep
    //  them in memory (both are bounds, not allocations)
    if (rc == 0)
        rc = s_exec (self, "PRAGMA cache_size = -65536");
    if (rc == 0)
        rc = s_exec (self, "PRAGMA mmap_size = 268435456");
    //  A checkpoint (the WAL copied into the file) every 64 MiB of WAL, not
    //  every 4: a third less time per appended row on this VM (32 -> 22 us
    //  for 1.2 kB rows); the WAL is truncated back after each
    if (rc == 0)
        rc = s_exec (self, "PRAGMA wal_autocheckpoint = 16384");
    if (rc == 0)
        rc = s_exec (self, "PRAGMA journal_size_limit = 67108864");
    if (rc == 0)
        rc = s_schema_ready (self);
    if (rc)
        s_sqlite_close (self);
    return rc;
}

static int
s_pg_connect (dsh_store_t *self)
{
    //  Later keywords win: the location's own parameters override these
    const char *keywords [] = { "connect_timeout", "application_name", "dbname", NULL };
    const char *values [] = { S_PG_CONNECT_TIMEOUT, "dsh", self->location, NULL };
    self->conn = PQconnectdbParams (keywords, values, 1);
    if (PQstatus (self->conn) != CONNECTION_OK)
        return s_pg_unreachable (self);
    PQsetNoticeProcessor (self->conn, s_pg_notice, NULL);
    return s_schema_ready (self);
}

//  Before each call: the file reopened, or the connection made again, if
//  the last call left it unusable
static int
s_ready (dsh_store_t *self)
{
    assert (self->running < 0);
    if (self->engine == S_SQLITE) {
        //  A file deleted or replaced under an open connection takes its
        //  writes without a word, into a file no one will read again: say
        //  so, and use the path's file from the next call on
        int moved = 0;
        if (self->db && !self->reopen
        &&  sqlite3_file_control (self->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) == SQLITE_OK && moved) {
            self->reopen = true;
            return s_say (self, "the file was deleted or replaced since it was opened (the next call opens it again)");
        }
        if (self->db && !self->reopen)
            return 0;
        s_sqlite_close (self);
        self->reopen = false;
        return s_sqlite_open (self);
    }
    if (PQstatus (self->conn) == CONNECTION_OK)
        return 0;
    //  A new session: the old one's prepared statements went with it
    memset (self->prepared, 0, sizeof (self->prepared));
    PQreset (self->conn);
    if (PQstatus (self->conn) != CONNECTION_OK)
        return s_pg_unreachable (self);
    return s_schema_ready (self);
}

//  location with the password (of its user info, or a password=
//  parameter) shown as ***
static char *
s_masked (const char *location)
{
    const char *authority = strstr (location, "://");
    authority = authority? authority + 3: location;
    size_t authority_size = strcspn (authority, "/?#");
    const char *at = (const char *) memrchr (authority, '@', authority_size);
    const char *colon = at? (const char *) memchr (authority, ':', (size_t) (at - authority)): NULL;
    char *masked = colon? zsys_sprintf ("%.*s:***%s", (int) (colon - location), location, at): strdup (location);
    for (char *cursor = strchr (masked, '?'); cursor; cursor = strchr (cursor + 1, '&')) {
        if (!s_starts (cursor + 1, "password="))
            continue;
        size_t value_at = (size_t) (cursor - masked) + 1 + strlen ("password=");
        size_t value_size = strcspn (masked + value_at, "&#");
        char *next = zsys_sprintf ("%.*s***%s", (int) value_at, masked, masked + value_at + value_size);
        cursor = next + (cursor - masked);
        zstr_free (&masked);
        masked = next;
    }
    return masked;
}

dsh_store_t *
dsh_store_new (const char *location, char *error, size_t error_size)
{
    assert (location);
    dsh_store_t *self = (dsh_store_t *) zmalloc (sizeof (dsh_store_t));
    assert (self);
    self->running = -1;
    self->digest = EVP_MD_CTX_new ();
    assert (self->digest);
    self->location = strdup (location);
    if (s_starts (location, "postgresql://") || s_starts (location, "postgres://")) {
        self->engine = S_POSTGRESQL;
        self->display = s_masked (location);
    }
    else {
        self->engine = S_SQLITE;
        self->path = strdup (s_starts (location, "sqlite:")? location + strlen ("sqlite:"): location);
        self->display = strdup (location);
    }
    int rc = self->engine == S_SQLITE? s_sqlite_open (self): s_pg_connect (self);
    if (rc) {
        s_result (self, rc, error, error_size);
        dsh_store_destroy (&self);
    }
    return self;
}

void
dsh_store_destroy (dsh_store_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_store_t *self = *self_p;
        s_finish (self);
        if (self->engine == S_SQLITE)
            s_sqlite_close (self);
        else
            PQfinish (self->conn);
        EVP_MD_CTX_free (self->digest);
        zstr_free (&self->location);
        zstr_free (&self->display);
        zstr_free (&self->path);
        free (self);
        *self_p = NULL;
    }
}

const char *
dsh_store_kind (dsh_store_t *self)
{
    assert (self);
    return self->engine == S_SQLITE? "sqlite": "postgresql";
}

const char *
dsh_store_location (dsh_store_t *self)
{
    assert (self);
    return self->display;
}

//  SHA-256, fetched from OpenSSL's provider once: a fetch per digest (what
//  EVP_sha256 () makes each call do) took a lock and a table lookup
static EVP_MD *s_sha256_md;
static pthread_once_t s_sha256_once = PTHREAD_ONCE_INIT;

static void
s_sha256_fetch (void)
{
    s_sha256_md = EVP_MD_fetch (NULL, "SHA256", NULL);
    assert (s_sha256_md);
}

static const EVP_MD *
s_sha256 (void)
{
    pthread_once (&s_sha256_once, s_sha256_fetch);
    return s_sha256_md;
}

//  The 32 bytes of a SHA-256 as 64 lowercase hex digits and a NUL.
static void
s_hex_digest (const unsigned char *digest, char *hex)
{
    static const char digits [] = "0123456789abcdef";
    for (size_t index = 0; index < 32; index++) {
        hex [2 * index] = digits [digest [index] >> 4];
        hex [2 * index + 1] = digits [digest [index] & 15];
    }
    hex [64] = 0;
}

//  The hash rule, in context (begun again here: one context serves many)
static void
s_hash (EVP_MD_CTX *context, const char *prev, const char *broker, uint64_t seq, const char *record, char *hash)
{
    char seq_text [24];
    snprintf (seq_text, sizeof (seq_text), "%" PRIu64, seq);
    const char *parts [] = { prev, "\n", broker, "\n", seq_text, "\n", record };
    int rc = EVP_DigestInit_ex (context, s_sha256 (), NULL);
    for (size_t index = 0; index < S_LENGTH (parts) && rc == 1; index++)
        rc = EVP_DigestUpdate (context, parts [index], strlen (parts [index]));
    unsigned char digest [EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (rc == 1)
        rc = EVP_DigestFinal_ex (context, digest, &size);
    assert (rc == 1 && size == 32);
    s_hex_digest (digest, hash);
}

void
dsh_store_hash (const char *prev, const char *broker, uint64_t seq, const char *record, char *hash)
{
    assert (prev && broker && record && hash);
    EVP_MD_CTX *context = EVP_MD_CTX_new ();
    assert (context);
    s_hash (context, prev, broker, seq, record, hash);
    EVP_MD_CTX_free (context);
}

//  An actor's thread outlives zactor_destroy: its TLS destructors, which
//  free OpenSSL's state of the thread (the error queue that the first
//  fetch makes while OpenSSL loads its config), can run after main has
//  returned and OpenSSL's atexit cleanup has deleted their key, and the
//  state leaks (LeakSanitizer: 904 bytes from CRYPTO_zalloc, exit 1)
void
dsh_store_thread_end (void)
{
    OPENSSL_thread_stop ();
}

void
dsh_store_sha256 (const void *data, size_t size, char *hex)
{
    assert (data || size == 0);
    assert (hex);
    unsigned char digest [EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    //  OpenSSL's, for the SHA extensions it uses where the CPU has them:
    //  five times libsodium's portable code on a 4 KiB body
    int rc = EVP_Digest (data, size, digest, &length, s_sha256 (), NULL);
    assert (rc == 1 && length == 32);
    s_hex_digest (digest, hex);
}

//  -------------------------------------------------------------------------
//  Append

//  Gives each row its place after last: the next seq, the previous
//  record's hash as prev, its own hash by the rule; last becomes the last
//  row's place
static void
s_chain_rows (dsh_store_t *self, const char *broker, dsh_store_row_t *rows, size_t count, s_link_t *last)
{
    for (size_t index = 0; index < count; index++) {
        dsh_store_row_t *row = &rows [index];
        assert (row->record);
        row->seq = last->seq + 1;
        memcpy (row->prev, last->hash, sizeof (row->prev));
        s_hash (self->digest, row->prev, broker, row->seq, row->record, row->hash);
        last->seq = row->seq;
        memcpy (last->hash, row->hash, sizeof (last->hash));
    }
}

//  The chain's head into last, from the row S_HEAD_LOCK found (found: 1,
//  0 or -1, as s_first says)
static int
s_head_locked (dsh_store_t *self, const char *broker, int found, s_link_t *last)
{
    if (found < 0)
        return -1;
    if (found == 0)
        return s_say (self, "the head of chain %s is missing after it was made", broker);
    last->seq = (uint64_t) s_column_int (self, 0);
    s_column_hash (self, 1, last->hash);
    s_finish (self);
    return 0;
}

//  A row's values for S_INSERT, in S_ROW_COLUMNS' order (a column left
//  NULL is "")
static void
s_row_values (const char *broker, const dsh_store_row_t *row, s_value_t *values)
{
    size_t count = 0;
    values [count++] = s_param_text (broker);
    values [count++] = s_param_int ((int64_t) row->seq);
    values [count++] = s_param_int (row->received_ms);
    values [count++] = s_param_int (row->answered_ms);
    values [count++] = s_param_text (row->agent? row->agent: "");
    values [count++] = s_param_text (row->tool? row->tool: "");
    values [count++] = s_param_text (row->call_id? row->call_id: "");
    values [count++] = s_param_text (row->outcome? row->outcome: "");
    values [count++] = s_param_text (row->caller? row->caller: "");
    values [count++] = s_param_text (row->record);
    values [count++] = s_param_text (row->prev);
    values [count++] = s_param_text (row->hash);
    assert (count == S_PARAMS_MAX);
}

//  SQLite, under BEGIN IMMEDIATE (the file's write lock is the chain's):
//  the head made if missing and read, a statement per row, the head moved
static int
s_sqlite_append (dsh_store_t *self, const char *broker, dsh_store_row_t *rows, size_t count)
{
    s_value_t create [] = { s_param_text (broker), s_param_text (s_chain_start) };
    if (s_do (self, S_HEAD_CREATE, create, S_LENGTH (create)))
        return -1;
    s_value_t key [] = { s_param_text (broker) };
    s_link_t last;
    if (s_head_locked (self, broker, s_first (self, S_HEAD_LOCK, key, S_LENGTH (key)), &last))
        return -1;
    s_chain_rows (self, broker, rows, count, &last);
    for (size_t index = 0; index < count; index++) {
        s_value_t values [S_PARAMS_MAX];
        s_row_values (broker, &rows [index], values);
        if (s_do (self, S_INSERT, values, S_LENGTH (values)))
            return -1;
    }
    s_value_t head [] = { s_param_int ((int64_t) last.seq), s_param_text (last.hash), s_param_text (broker) };
    return s_do (self, S_HEAD_MOVE, head, S_LENGTH (head));
}

//  PostgreSQL: ends a pipeline (the statements sent by s_pg_send since
//  PQenterPipelineMode; rc -1 if sending one failed) with a sync, reads
//  every result and leaves pipeline mode. Like s_first: 1 if a statement
//  gave a row (read it as row_slot's with s_column_*, then s_finish; only
//  one statement may give rows), 0 if none did (or row_slot is -1), or
//  -1 with the first failure's reason (the server skipped the statements
//  after it, up to the sync).
static int
s_pg_sync (dsh_store_t *self, int row_slot, int rc)
{
    assert (self->running < 0 && !self->result);
    if (!PQpipelineSync (self->conn) && rc == 0)
        rc = s_pg_failed (self, NULL);
    //  A NULL ends each statement's results; two in a row, nothing more is
    //  coming (the sync was not sent)
    bool after_null = false;
    while (PQstatus (self->conn) == CONNECTION_OK) {
        PGresult *result = PQgetResult (self->conn);
        if (!result && after_null)
            break;
        after_null = !result;
        if (!result)
            continue;
        ExecStatusType status = PQresultStatus (result);
        if (status == PGRES_PIPELINE_SYNC) {
            PQclear (result);
            break;
        }
        if (status == PGRES_TUPLES_OK && PQntuples (result) > 0 && row_slot >= 0 && !self->result)
            self->result = result;
        else {
            if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK && status != PGRES_PIPELINE_ABORTED
            &&  rc == 0)
                rc = s_pg_failed (self, result);
            PQclear (result);
        }
    }
    if (PQstatus (self->conn) != CONNECTION_OK && rc == 0)
        rc = s_pg_failed (self, NULL);
    if (!PQexitPipelineMode (self->conn) && rc == 0)
        rc = s_pg_failed (self, NULL);
    if (rc == 0 && self->result) {
        self->running = row_slot;
        return 1;
    }
    PQclear (self->result);
    self->result = NULL;
    return rc;
}

static void
s_array_u32 (zchunk_t *array, uint32_t value)
{
    uint32_t big_endian = htonl (value);
    zchunk_extend (array, &big_endian, sizeof (big_endian));
}

//  A one-dimensional array of count values, without NULLs, in
//  PostgreSQL's binary format (array_recv's): a header, then each
//  element's length and bytes, integers big-endian. Made for the first
//  value, room for count like it.
static zchunk_t *
s_array_new (const s_value_t *first, size_t count)
{
    size_t element_size = first->is_integer? sizeof (int64_t): strlen (first->text);
    zchunk_t *array = zchunk_new (NULL, 5 * sizeof (uint32_t) + count * (sizeof (uint32_t) + element_size));
    assert (array);
    s_array_u32 (array, 1);                 //  dimensions
    s_array_u32 (array, 0);                 //  flags: no NULLs
    s_array_u32 (array, first->is_integer? S_PG_INT8: S_PG_TEXT);
    s_array_u32 (array, (uint32_t) count);
    s_array_u32 (array, 1);                 //  the first index
    return array;
}

static void
s_array_add (zchunk_t *array, const s_value_t *value)
{
    if (value->is_integer) {
        s_array_u32 (array, sizeof (int64_t));
        s_array_u32 (array, (uint32_t) ((uint64_t) value->integer >> 32));
        s_array_u32 (array, (uint32_t) value->integer);
    }
    else {
        size_t size = strlen (value->text);
        s_array_u32 (array, (uint32_t) size);
        zchunk_extend (array, value->text, size);
    }
}

//  PostgreSQL: sends one S_INSERT_BATCH of rows from first on, as many as
//  come to S_PG_INSERT_BYTES of records (one at least); *end is the row
//  after them
static int
s_pg_send_rows (dsh_store_t *self, const char *broker, const dsh_store_row_t *rows, size_t first, size_t count,
                size_t *end)
{
    size_t bytes = 0;
    size_t index = first;
    for (; index < count; index++) {
        size_t size = strlen (rows [index].record);
        if (size >= S_PG_VALUE_MAX)
            return s_say (self, "a record of %zu bytes is more than PostgreSQL keeps in a value", size);
        if (index > first && bytes + size > S_PG_INSERT_BYTES)
            break;
        bytes += size;
    }
    *end = index;
    //  An array per column but the broker's
    zchunk_t *columns [S_PARAMS_MAX] = { NULL };
    for (index = first; index < *end; index++) {
        s_value_t values [S_PARAMS_MAX];
        s_row_values (broker, &rows [index], values);
        for (size_t column = 1; column < S_PARAMS_MAX; column++) {
            if (!columns [column])
                columns [column] = s_array_new (&values [column], *end - first);
            s_array_add (columns [column], &values [column]);
        }
    }
    s_value_t arrays [S_PARAMS_MAX] = { s_param_text (broker) };
    for (size_t column = 1; column < S_PARAMS_MAX; column++)
        arrays [column] = s_param_bytes (columns [column]);
    int rc = s_pg_send (self, S_INSERT_BATCH, arrays, S_LENGTH (arrays));
    for (size_t column = 1; column < S_PARAMS_MAX; column++)
        zchunk_destroy (&columns [column]);
    return rc;
}

//  PostgreSQL: one round trip to begin, make the head if missing and lock
//  it (its row, FOR UPDATE, is the chain's lock); one to insert the rows,
//  move the head and commit
static int
s_pg_append (dsh_store_t *self, const char *broker, dsh_store_row_t *rows, size_t count)
{
    //  Each prepared on a new connection first: PQprepare waits for its
    //  answer, which pipeline mode does not allow
    const int slots [] = { S_BEGIN, S_HEAD_CREATE, S_HEAD_LOCK, S_INSERT_BATCH, S_HEAD_MOVE, S_COMMIT };
    for (size_t index = 0; index < S_LENGTH (slots); index++)
        if (s_prepare (self, slots [index]))
            return -1;

    s_value_t create [] = { s_param_text (broker), s_param_text (s_chain_start) };
    s_value_t key [] = { s_param_text (broker) };
    if (!PQenterPipelineMode (self->conn))
        return s_pg_failed (self, NULL);
    int rc = s_pg_send (self, S_BEGIN, NULL, 0);
    if (rc == 0)
        rc = s_pg_send (self, S_HEAD_CREATE, create, S_LENGTH (create));
    if (rc == 0)
        rc = s_pg_send (self, S_HEAD_LOCK, key, S_LENGTH (key));
    s_link_t last;
    if (s_head_locked (self, broker, s_pg_sync (self, S_HEAD_LOCK, rc), &last))
        return -1;
    s_chain_rows (self, broker, rows, count, &last);

    if (!PQenterPipelineMode (self->conn))
        return s_pg_failed (self, NULL);
    rc = 0;
    for (size_t first = 0, end = 0; rc == 0 && first < count; first = end)
        rc = s_pg_send_rows (self, broker, rows, first, count, &end);
    s_value_t head [] = { s_param_int ((int64_t) last.seq), s_param_text (last.hash), s_param_text (broker) };
    if (rc == 0)
        rc = s_pg_send (self, S_HEAD_MOVE, head, S_LENGTH (head));
    if (rc == 0)
        rc = s_pg_send (self, S_COMMIT, NULL, 0);
    return s_pg_sync (self, -1, rc);
}

int
dsh_store_append (dsh_store_t *self, const char *broker, dsh_store_row_t *rows, size_t count,
                  char *error, size_t error_size)
{
    assert (self);
    assert (broker);
    assert (rows || count == 0);
    if (count == 0)
        return 0;
    int rc = s_ready (self);
    if (rc == 0 && self->engine == S_SQLITE) {
        rc = s_begin (self, true);
        if (rc == 0)
            rc = s_sqlite_append (self, broker, rows, count);
        if (rc == 0)
            rc = s_commit (self);
    }
    else
    if (rc == 0)
        rc = s_pg_append (self, broker, rows, count);
    if (rc) {
        s_rollback (self);
        //  Nothing was written: no row has a place
        for (size_t index = 0; index < count; index++) {
            rows [index].seq = 0;
            rows [index].prev [0] = 0;
            rows [index].hash [0] = 0;
        }
    }
    return s_result (self, rc, error, error_size);
}

//  -------------------------------------------------------------------------
//  Reading rows

//  Gives the running statement's rows to fn (full rows, or only their
//  broker) until they end or fn says stop. Returns how many, or -1.
static int
s_stream (dsh_store_t *self, bool full_rows, dsh_store_row_fn *fn, void *arg)
{
    int given = 0;
    int more;
    while ((more = s_next (self)) == 1) {
        dsh_store_row_t row = { .broker = NULL };
        if (full_rows)
            s_row_read (self, &row);
        else
            row.broker = s_column_text (self, 0);
        given++;
        if (fn (&row, arg))
            break;
    }
    s_finish (self);
    return more < 0? -1: given;
}

int
dsh_store_query (dsh_store_t *self, const dsh_store_filter_t *filter, dsh_store_row_fn *fn, void *arg,
                 char *error, size_t error_size)
{
    assert (self);
    assert (fn);
    dsh_store_filter_t everything = { .broker = NULL };
    if (!filter)
        filter = &everything;
    const char *texts [] = { filter->broker, filter->agent, filter->tool, filter->outcome, filter->call_id };
    _Static_assert (S_LENGTH (texts) == S_LENGTH (s_filter_columns), "a value per filter column");
    s_value_t values [S_PARAMS_MAX];
    size_t count = 0;
    values [count++] = s_param_int (filter->since_ms? filter->since_ms: INT64_MIN);
    values [count++] = s_param_int (filter->until_ms? filter->until_ms: INT64_MAX);
    int shape = filter->oldest_first? S_OLDEST_FIRST: 0;
    for (size_t index = 0; index < S_LENGTH (texts); index++)
        if (texts [index]) {
            shape |= 1 << index;
            values [count++] = s_param_text (texts [index]);
        }
    size_t limit = filter->limit? filter->limit: 100;
    values [count++] = s_param_int (limit > INT64_MAX? INT64_MAX: (int64_t) limit);

    int rc = s_ready (self);
    if (rc == 0)
        rc = s_run (self, S_QUERY + shape, values, count);
    if (rc == 0)
        rc = s_stream (self, true, fn, arg);
    return s_result (self, rc, error, error_size);
}

int
dsh_store_brokers (dsh_store_t *self, dsh_store_row_fn *fn, void *arg, char *error, size_t error_size)
{
    assert (self);
    assert (fn);
    int rc = s_ready (self);
    if (rc == 0)
        rc = s_run (self, S_BROKERS, NULL, 0);
    if (rc == 0)
        rc = s_stream (self, false, fn, arg);
    return s_result (self, rc, error, error_size);
}

int
dsh_store_count (dsh_store_t *self, const char *broker, uint64_t *records, uint64_t *bytes,
                 char *error, size_t error_size)
{
    assert (self);
    s_value_t key [] = { s_param_text (broker) };
    int rc = s_ready (self);
    if (rc == 0)
        rc = broker? s_first (self, S_COUNT_BROKER, key, S_LENGTH (key)): s_first (self, S_COUNT_ALL, NULL, 0);
    if (rc == 1) {
        if (records)
            *records = (uint64_t) s_column_int (self, 0);
        if (bytes)
            *bytes = (uint64_t) s_column_int (self, 1);
        s_finish (self);
        rc = 0;
    }
    else
    if (rc == 0)
        rc = s_say (self, "a count gave no row");
    return s_result (self, rc, error, error_size);
}

//  -------------------------------------------------------------------------
//  Verify

//  Notes the first record (or the head) that does not hold. Returns -1.
static int
s_bad (dsh_store_verdict_t *verdict, uint64_t seq, const char *format, ...) __attribute__ ((format (printf, 3, 4)));

static int
s_bad (dsh_store_verdict_t *verdict, uint64_t seq, const char *format, ...)
{
    verdict->bad_seq = seq;
    va_list args;
    va_start (args, format);
    vsnprintf (verdict->reason, sizeof (verdict->reason), format, args);
    va_end (args);
    return -1;
}

//  The record's field named field is the integer column holds
static int
s_check_integer (const dsh_store_row_t *row, json_t *record, const char *field, const char *column, int64_t value,
                 dsh_store_verdict_t *verdict)
{
    json_t *member = json_object_get (record, field);
    if (!json_is_integer (member))
        return s_bad (verdict, row->seq, "record %" PRIu64 ": the record has no integer %s", row->seq, field);
    if (json_integer_value (member) != value)
        return s_bad (verdict, row->seq, "record %" PRIu64 ": column %s %" PRId64 " differs from the record's %"
                      PRId64, row->seq, column, value, (int64_t) json_integer_value (member));
    return 0;
}

//  The record's field named field is the string column holds (optional:
//  absent means "")
static int
s_check_text (const dsh_store_row_t *row, json_t *record, const char *field, const char *column, const char *value,
              bool optional, dsh_store_verdict_t *verdict)
{
    json_t *member = json_object_get (record, field);
    const char *text = json_is_string (member)? json_string_value (member): !member && optional? "": NULL;
    if (!text)
        return s_bad (verdict, row->seq, "record %" PRIu64 ": the record has no string %s", row->seq, field);
    if (!streq (text, value))
        return s_bad (verdict, row->seq, "record %" PRIu64 ": column %s \"%.40s\" differs from the record's \"%.40s\"",
                      row->seq, column, value, text);
    return 0;
}

//  The columns are the record's own fields
static int
s_check_columns (const dsh_store_row_t *row, dsh_store_verdict_t *verdict)
{
    json_error_t json_error;
    json_t *record = json_loads (row->record, JSON_REJECT_DUPLICATES, &json_error);
    if (!json_is_object (record)) {
        json_decref (record);
        return s_bad (verdict, row->seq, "record %" PRIu64 ": the record is not a JSON object (%s)", row->seq,
                      record? "another JSON value": json_error.text);
    }
    int rc = s_check_integer (row, record, "receivedMs", "received_ms", row->received_ms, verdict);
    if (rc == 0)
        rc = s_check_integer (row, record, "answeredMs", "answered_ms", row->answered_ms, verdict);
    if (rc == 0)
        rc = s_check_text (row, record, "agent", "agent", row->agent, true, verdict);
    if (rc == 0)
        rc = s_check_text (row, record, "tool", "tool", row->tool, false, verdict);
    if (rc == 0)
        rc = s_check_text (row, record, "callId", "call_id", row->call_id, false, verdict);
    if (rc == 0)
        rc = s_check_text (row, record, "outcome", "outcome", row->outcome, false, verdict);
    if (rc == 0)
        rc = s_check_text (row, record, "callerId", "caller", row->caller, false, verdict);
    json_decref (record);
    return rc;
}

//  One record after last: its seq follows, its prev is last's hash, its
//  hash follows the rule, its columns are its record's
static int
s_check_record (const dsh_store_row_t *row, const char *broker, const s_link_t *last, uint64_t anchor_seq,
                dsh_store_verdict_t *verdict)
{
    bool at_start = last->seq == 0;
    if (row->seq <= last->seq)
        return s_bad (verdict, row->seq, "record %" PRIu64 " comes before the chain's anchor, record %" PRIu64,
                      row->seq, anchor_seq);
    if (row->seq != last->seq + 1) {
        if (at_start)
            return s_bad (verdict, last->seq + 1, "record %" PRIu64 " is missing (the chain starts at %" PRIu64 ")",
                          last->seq + 1, row->seq);
        return s_bad (verdict, last->seq + 1, "record %" PRIu64 " is missing (the chain goes from %" PRIu64
                      " to %" PRIu64 ")", last->seq + 1, last->seq, row->seq);
    }
    if (!streq (row->prev, last->hash)) {
        if (at_start)
            return s_bad (verdict, row->seq, "record %" PRIu64 ": prev is not 64 zeros (a chain's start)", row->seq);
        return s_bad (verdict, row->seq, "record %" PRIu64 ": prev is not record %" PRIu64 "'s hash", row->seq,
                      last->seq);
    }
    char hash [DSH_STORE_HASH_SIZE + 1];
    dsh_store_hash (row->prev, broker, row->seq, row->record, hash);
    if (!streq (hash, row->hash))
        return s_bad (verdict, row->seq, "record %" PRIu64 ": hash does not match its content", row->seq);
    return s_check_columns (row, verdict);
}

//  Reads the head, then the chain's rows in order
static int
s_verify_chain (dsh_store_t *self, const char *broker, dsh_store_verdict_t *verdict)
{
    s_value_t key [] = { s_param_text (broker) };
    int found = s_first (self, S_HEAD_READ, key, S_LENGTH (key));
    if (found < 0)
        return -1;
    s_link_t head = { .seq = 0 };
    s_link_t last = { .seq = 0 };
    memcpy (head.hash, s_chain_start, sizeof (head.hash));
    memcpy (last.hash, s_chain_start, sizeof (last.hash));
    if (found == 1) {
        head.seq = (uint64_t) s_column_int (self, 0);
        s_column_hash (self, 1, head.hash);
        last.seq = (uint64_t) s_column_int (self, 2);
        s_column_hash (self, 3, last.hash);
        s_finish (self);
    }
    verdict->anchor_seq = last.seq;

    if (s_run (self, S_CHAIN, key, S_LENGTH (key)))
        return -1;
    int more = 0;
    while (verdict->bad_seq == 0 && (more = s_next (self)) == 1) {
        dsh_store_row_t row;
        s_row_read (self, &row);
        if (s_check_record (&row, broker, &last, verdict->anchor_seq, verdict) == 0) {
            verdict->checked++;
            last.seq = row.seq;
            memcpy (last.hash, row.hash, sizeof (last.hash));
        }
    }
    s_finish (self);
    if (more < 0)
        return -1;
    if (verdict->bad_seq || (head.seq == last.seq && streq (head.hash, last.hash)))
        return 0;

    //  The head is not the last record: a record after the last one read
    //  is gone (or the head was changed)
    uint64_t bad_seq = head.seq? head.seq: last.seq;
    if (found == 0)
        s_bad (verdict, bad_seq, "the chain has no head (its records end at %" PRIu64 ")", last.seq);
    else
    if (head.seq != last.seq && verdict->checked == 0)
        s_bad (verdict, bad_seq, "the head says %" PRIu64 " but the chain has no records after %" PRIu64,
               head.seq, last.seq);
    else
    if (head.seq != last.seq)
        s_bad (verdict, bad_seq, "the head says %" PRIu64 " but the chain ends at %" PRIu64, head.seq, last.seq);
    else
        s_bad (verdict, bad_seq, "the head's hash is not record %" PRIu64 "'s", head.seq);
    return 0;
}

int
dsh_store_verify (dsh_store_t *self, const char *broker, dsh_store_verdict_t *verdict,
                  char *error, size_t error_size)
{
    assert (self);
    assert (broker);
    assert (verdict);
    memset (verdict, 0, sizeof (dsh_store_verdict_t));
    int rc = s_ready (self);
    if (rc == 0)
        rc = s_begin (self, false);
    if (rc == 0)
        rc = s_verify_chain (self, broker, verdict);
    if (rc == 0)
        rc = s_commit (self);
    if (rc) {
        s_rollback (self);
        memset (verdict, 0, sizeof (dsh_store_verdict_t));
    }
    return s_result (self, rc, error, error_size);
}

//  -------------------------------------------------------------------------
//  Prune

//  What may go is a prefix of the chain, by seq, so that the rest still
//  follows from an anchor: the records beyond the newest keep_records,
//  and the records answered before before_ms up to the first that was not
//  (one answered late, behind younger ones, waits for them). At most
//  batch of them (0: no bound).
static int
s_prune_rows (dsh_store_t *self, const char *broker, int64_t before_ms, uint64_t keep_records, size_t batch,
              int *deleted)
{
    s_value_t key [] = { s_param_text (broker) };
    int found = s_first (self, S_HEAD_LOCK, key, S_LENGTH (key));
    if (found <= 0)
        return found;               //  -1, or 0: no such chain, nothing to delete
    uint64_t head_seq = (uint64_t) s_column_int (self, 0);
    uint64_t anchor_seq = (uint64_t) s_column_int (self, 2);
    s_finish (self);

    uint64_t last = keep_records && head_seq > keep_records? head_seq - keep_records: 0;
    if (before_ms) {
        s_value_t age [] = { s_param_text (broker), s_param_int (before_ms) };
        found = s_first (self, S_PRUNE_AGE, age, S_LENGTH (age));
        if (found < 0)
            return -1;
        uint64_t young = found == 1? (uint64_t) s_column_int (self, 0): head_seq + 1;
        s_finish (self);
        if (young > 0 && young - 1 > last)
            last = young - 1;
    }
    if (batch && last > anchor_seq + batch)
        last = anchor_seq + batch;
    if (last <= anchor_seq)
        return 0;

    //  The last record that goes becomes the anchor
    s_value_t upto [] = { s_param_text (broker), s_param_int ((int64_t) last) };
    found = s_first (self, S_PRUNE_LAST, upto, S_LENGTH (upto));
    if (found <= 0)
        return found;
    s_link_t anchor = { .seq = (uint64_t) s_column_int (self, 0) };
    s_column_hash (self, 1, anchor.hash);
    s_finish (self);
    s_value_t gone [] = { s_param_text (broker), s_param_int ((int64_t) anchor.seq) };
    if (s_do (self, S_PRUNE_DELETE, gone, S_LENGTH (gone)))
        return -1;
    *deleted = (int) self->changes;
    s_value_t moved [] = { s_param_int ((int64_t) anchor.seq), s_param_text (anchor.hash), s_param_text (broker) };
    return s_do (self, S_HEAD_ANCHOR, moved, S_LENGTH (moved));
}

int
dsh_store_prune (dsh_store_t *self, const char *broker, int64_t before_ms, uint64_t keep_records,
                 size_t batch, char *error, size_t error_size)
{
    assert (self);
    assert (broker);
    int deleted = 0;
    int rc = s_ready (self);
    if (rc == 0)
        rc = s_begin (self, true);
    if (rc == 0)
        rc = s_prune_rows (self, broker, before_ms, keep_records, batch, &deleted);
    if (rc == 0)
        rc = s_commit (self);
    if (rc)
        s_rollback (self);
    return rc? s_result (self, rc, error, error_size): deleted;
}

//  -------------------------------------------------------------------------
//  Modes

int
dsh_store_mode_set (dsh_store_t *self, const char *agent, const char *mode, const char *set_by,
                    int64_t set_ms, char *error, size_t error_size)
{
    assert (self);
    assert (agent);
    int rc = s_ready (self);
    if (rc == 0 && (!mode || !*mode)) {
        s_value_t key [] = { s_param_text (agent) };
        rc = s_do (self, S_MODE_DELETE, key, S_LENGTH (key));
    }
    else
    if (rc == 0) {
        s_value_t values [] = { s_param_text (agent), s_param_text (mode), s_param_text (set_by),
                                s_param_int (set_ms) };
        rc = s_do (self, S_MODE_UPSERT, values, S_LENGTH (values));
    }
    return s_result (self, rc, error, error_size);
}

zhashx_t *
dsh_store_modes (dsh_store_t *self, char *error, size_t error_size)
{
    assert (self);
    zhashx_t *modes = zhashx_new ();
    assert (modes);
    zhashx_set_destructor (modes, (zhashx_destructor_fn *) zstr_free);
    int rc = s_ready (self);
    if (rc == 0)
        rc = s_run (self, S_MODES, NULL, 0);
    while (rc == 0 && (rc = s_next (self)) == 1) {
        zhashx_update (modes, s_column_text (self, 0), strdup (s_column_text (self, 1)));
        rc = 0;
    }
    s_finish (self);
    if (rc) {
        zhashx_destroy (&modes);
        s_result (self, rc, error, error_size);
    }
    return modes;
}

//  -------------------------------------------------------------------------
//  Pins and grants

int
dsh_store_pin_write (dsh_store_t *self, const dsh_pin_op_t *op, char *error, size_t error_size)
{
    assert (self);
    assert (op && op->pin);
    const dsh_pin_t *pin = op->pin;
    int rc = s_ready (self);
    if (rc == 0 && op->kind == DSH_PIN_FORGET) {
        s_value_t key [] = { s_param_text (pin->name) };
        rc = s_do (self, S_PIN_DELETE, key, S_LENGTH (key));
    }
    else
    if (rc == 0) {
        s_value_t values [] = { s_param_text (pin->name), s_param_text (pin->digest), s_param_text (pin->definition),
                                s_param_text (pin->component), s_param_text (pin->key), s_param_int (pin->first_ms),
                                s_param_text (pin->accepted_by), s_param_int (pin->accepted_ms),
                                s_param_text (pin->rejected) };
        rc = s_do (self, op->kind == DSH_PIN_FIRST? S_PIN_FIRST: S_PIN_REPLACE, values, S_LENGTH (values));
    }
    return s_result (self, rc, error, error_size);
}

zlistx_t *
dsh_store_pins (dsh_store_t *self, char *error, size_t error_size)
{
    assert (self);
    zlistx_t *pins = zlistx_new ();
    zlistx_set_destructor (pins, (zlistx_destructor_fn *) dsh_pin_destroy);
    int rc = s_ready (self);
    if (rc == 0)
        rc = s_run (self, S_PINS, NULL, 0);
    while (rc == 0 && (rc = s_next (self)) == 1) {
        dsh_pin_t *pin = dsh_pin_new (s_column_text (self, 0));
        snprintf (pin->digest, sizeof (pin->digest), "%s", s_column_text (self, 1));
        zstr_free (&pin->definition);
        pin->definition = strdup (s_column_text (self, 2));
        zstr_free (&pin->component);
        pin->component = strdup (s_column_text (self, 3));
        zstr_free (&pin->key);
        pin->key = strdup (s_column_text (self, 4));
        pin->first_ms = s_column_int (self, 5);
        zstr_free (&pin->accepted_by);
        pin->accepted_by = strdup (s_column_text (self, 6));
        pin->accepted_ms = s_column_int (self, 7);
        snprintf (pin->rejected, sizeof (pin->rejected), "%s", s_column_text (self, 8));
        zlistx_add_end (pins, pin);
        rc = 0;
    }
    s_finish (self);
    if (rc) {
        zlistx_destroy (&pins);
        s_result (self, rc, error, error_size);
    }
    return pins;
}

int
dsh_store_grant_put (dsh_store_t *self, const char *id, const char *stage, const char *grant, int64_t expires_ms,
                     char *error, size_t error_size)
{
    assert (self);
    int rc = s_ready (self);
    if (rc == 0) {
        s_value_t values [] = { s_param_text (id), s_param_text (stage), s_param_text (grant),
                                s_param_int (expires_ms) };
        rc = s_do (self, S_GRANT_PUT, values, S_LENGTH (values));
    }
    return s_result (self, rc, error, error_size);
}

int
dsh_store_grant_revoke (dsh_store_t *self, const char *id, int64_t revoked_ms, char *error, size_t error_size)
{
    assert (self);
    int rc = s_ready (self);
    if (rc == 0) {
        s_value_t values [] = { s_param_text (id), s_param_int (revoked_ms) };
        rc = s_do (self, S_GRANT_REVOKE, values, S_LENGTH (values));
    }
    return s_result (self, rc, error, error_size);
}

zlistx_t *
dsh_store_grants (dsh_store_t *self, int64_t now_ms, char *error, size_t error_size)
{
    assert (self);
    zlistx_t *grants = zlistx_new ();
    zlistx_set_destructor (grants, (zlistx_destructor_fn *) zstr_free);
    int rc = s_ready (self);
    if (rc == 0) {
        s_value_t now [] = { s_param_int (now_ms) };
        rc = s_run (self, S_GRANTS, now, S_LENGTH (now));
    }
    while (rc == 0 && (rc = s_next (self)) == 1) {
        zlistx_add_end (grants, strdup (s_column_text (self, 0)));
        rc = 0;
    }
    s_finish (self);
    if (rc) {
        zlistx_destroy (&grants);
        s_result (self, rc, error, error_size);
    }
    return grants;
}

int
dsh_store_grants_prune (dsh_store_t *self, int64_t before_ms, char *error, size_t error_size)
{
    assert (self);
    int rc = s_ready (self);
    if (rc == 0) {
        s_value_t before [] = { s_param_int (before_ms) };
        rc = s_do (self, S_GRANT_PRUNE, before, S_LENGTH (before));
    }
    return s_result (self, rc, error, error_size);
}
