/*  =========================================================================
    dsh_store - the broker's durable state: the audit trail and the swarm's
    settings (per-agent modes, pinned tool definitions, approvers' grants),
    in SQLite (one file per broker, the default) or PostgreSQL (every
    broker of a swarm in one database)

    One interface, two back ends, chosen by the location: "postgresql://"
    or "postgres://" (a libpq connection URI) is PostgreSQL; anything else
    is a SQLite file path (an optional "sqlite:" prefix is dropped). The
    tables are created if missing; no ORM, plain SQL through each engine's
    own C library (sqlite3, libpq), statements prepared once.

    The audit trail is a hash chain per broker (PROTOCOL.md, "The audit
    record"). The store is what assigns each record its place: append
    locks the broker's chain head (SQLite: BEGIN IMMEDIATE; PostgreSQL:
    SELECT ... FOR UPDATE on its head row), gives each row the next seq
    and the previous record's hash, computes its hash, inserts the rows
    and moves the head, in one transaction. So two writers on one chain
    (a broker restarted while its old process still drains) stay one
    chain, and verify needs nothing but the database.

    Hash rule: hash = lowercase hex SHA-256 of the bytes
        prev "\n" broker "\n" seq "\n" record
    where prev is the previous record's hash (64 "0" for a chain's first
    record), seq in decimal, and record the stored JSON text exactly.

    Calls are synchronous and may block on the network or the disk: they
    belong to the audit writer's thread, never to an actor loop. One
    store is used from one thread at a time.
    =========================================================================
*/

#ifndef DSH_STORE_H_INCLUDED
#define DSH_STORE_H_INCLUDED

#include <czmq.h>

#include "dsh_pins.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _dsh_store_t dsh_store_t;

#define DSH_STORE_HASH_SIZE 64      //  hex characters of a SHA-256

//  One audit record as it is stored. For append the caller fills the
//  columns and record; the store fills seq, prev and hash. The columns are
//  the record's own fields, copied out for queries (verify checks that
//  they match the record).
typedef struct {
    const char *broker;             //  the chain: the broker's stable id
    uint64_t seq;                   //  1, 2, ... within the chain
    int64_t received_ms;            //  wall clock, ms since the epoch
    int64_t answered_ms;
    const char *agent;              //  "" if none
    const char *tool;
    const char *call_id;
    const char *outcome;            //  "ok", or the error code
    const char *caller;             //  the key's name (else its key), or the peer address
    const char *record;             //  the JSON text (what is hashed)
    char prev [DSH_STORE_HASH_SIZE + 1];
    char hash [DSH_STORE_HASH_SIZE + 1];
} dsh_store_row_t;

//  What a query selects; NULL / 0 fields select everything.
typedef struct {
    const char *broker;
    const char *agent;
    const char *tool;               //  exact name
    const char *outcome;
    const char *call_id;
    int64_t since_ms;               //  answered_ms >= since_ms (0: no bound)
    int64_t until_ms;               //  answered_ms < until_ms (0: no bound)
    size_t limit;                   //  at most this many (0: 100)
    bool oldest_first;              //  ascending by answered_ms; else newest first
} dsh_store_filter_t;

//  Called for each row a query finds (the row's strings are valid during
//  the call only; the store is reading the rows meanwhile, so the call
//  must not use the store). Return 0 to go on, -1 to stop.
typedef int (dsh_store_row_fn) (const dsh_store_row_t *row, void *arg);

//  The result of verify.
typedef struct {
    uint64_t checked;               //  records that matched
    uint64_t anchor_seq;            //  where the check started (0: the chain's start)
    uint64_t bad_seq;               //  the first record that does not match, or 0
    char reason [256];              //  why, when bad_seq (or the head) does not match
} dsh_store_verdict_t;

//  Open the store at location (tables created if missing). NULL with a
//  reason if it cannot be opened or reached.
dsh_store_t *
    dsh_store_new (const char *location, char *error, size_t error_size);

//  Close it. Safe twice.
void
    dsh_store_destroy (dsh_store_t **self_p);

//  "sqlite" or "postgresql".
const char *
    dsh_store_kind (dsh_store_t *self);

//  The location with any password taken out, for logs.
const char *
    dsh_store_location (dsh_store_t *self);

//  Append count rows to broker's chain in one transaction (their broker
//  field is ignored: broker is used). Fills each row's seq, prev, hash.
//  Returns 0, or -1 with a reason (nothing written; the connection may be
//  gone: the next call tries to make it again).
int
    dsh_store_append (dsh_store_t *self, const char *broker, dsh_store_row_t *rows, size_t count,
                      char *error, size_t error_size);

//  Rows matching filter, to fn. Returns the number given to fn, or -1
//  with a reason.
int
    dsh_store_query (dsh_store_t *self, const dsh_store_filter_t *filter, dsh_store_row_fn *fn, void *arg,
                     char *error, size_t error_size);

//  Recompute broker's chain from its anchor (or its start) to its head:
//  each record's seq follows the last, its prev is the last's hash, its
//  hash follows the rule, its columns match its record, and the head is
//  the last record. Returns 0 (verdict filled: bad_seq 0 if it holds), or
//  -1 with a reason if the store could not be read.
int
    dsh_store_verify (dsh_store_t *self, const char *broker, dsh_store_verdict_t *verdict,
                      char *error, size_t error_size);

//  The ids of every chain in the store, to fn (row has only broker set).
//  Returns the number, or -1 with a reason.
int
    dsh_store_brokers (dsh_store_t *self, dsh_store_row_fn *fn, void *arg, char *error, size_t error_size);

//  Delete broker's oldest records, at most batch of them, that are
//  answered before before_ms (0: no age bound) or beyond the newest
//  keep_records (0: no count bound); the last deleted becomes the chain's
//  anchor (its seq and hash), so verify still holds. Returns the number
//  deleted, or -1 with a reason.
int
    dsh_store_prune (dsh_store_t *self, const char *broker, int64_t before_ms, uint64_t keep_records,
                     size_t batch, char *error, size_t error_size);

//  Records in broker's chain (NULL: all) and their bytes (the record
//  texts' lengths). Returns 0, or -1 with a reason.
int
    dsh_store_count (dsh_store_t *self, const char *broker, uint64_t *records, uint64_t *bytes,
                     char *error, size_t error_size);

//  Set agent's mode (NULL or "": clear it), saying who set it and when.
//  Returns 0, or -1 with a reason.
int
    dsh_store_mode_set (dsh_store_t *self, const char *agent, const char *mode, const char *set_by,
                        int64_t set_ms, char *error, size_t error_size);

//  Every agent's mode, as a new hash agent -> mode (strings, owned).
//  NULL with a reason if it cannot be read.
zhashx_t *
    dsh_store_modes (dsh_store_t *self, char *error, size_t error_size);

//  Write a pin change (dsh_pins): FIRST inserts unless the name has a pin
//  with a digest (the first writer wins), REPLACE inserts or replaces,
//  FORGET deletes. Returns 0, or -1 with a reason.
int
    dsh_store_pin_write (dsh_store_t *self, const dsh_pin_op_t *op, char *error, size_t error_size);

//  Every pin, by name, as a new list of dsh_pin_t *. NULL with a reason if
//  they cannot be read.
zlistx_t *
    dsh_store_pins (dsh_store_t *self, char *error, size_t error_size);

//  Keep a grant (its JSON text; a permission stage's, PROTOCOL.md
//  "Grants") until expires_ms (wall clock). An id kept already is left as
//  it is. Returns 0, or -1 with a reason.
int
    dsh_store_grant_put (dsh_store_t *self, const char *id, const char *stage, const char *grant,
                         int64_t expires_ms, char *error, size_t error_size);

//  Mark a grant revoked. Returns 0, or -1 with a reason.
int
    dsh_store_grant_revoke (dsh_store_t *self, const char *id, int64_t revoked_ms, char *error, size_t error_size);

//  The JSON texts of the grants neither expired at now_ms nor revoked, by
//  id, as a new list of char *. NULL with a reason if they cannot be read.
zlistx_t *
    dsh_store_grants (dsh_store_t *self, int64_t now_ms, char *error, size_t error_size);

//  Delete the grants expired before before_ms. Returns 0, or -1.
int
    dsh_store_grants_prune (dsh_store_t *self, int64_t before_ms, char *error, size_t error_size);

//  The SHA-256 of size bytes as 64 hex digits and a NUL, into hex.
void
    dsh_store_sha256 (const void *data, size_t size, char *hex);

//  Compute the hash of a record by the rule above into hash (65 bytes).
void
    dsh_store_hash (const char *prev, const char *broker, uint64_t seq, const char *record, char *hash);

//  Release the calling thread's state in the libraries behind the digests
//  and the store (OpenSSL's). A thread nobody joins (a czmq actor) calls it
//  last: left to the thread's exit, the release races the process's exit.
void
    dsh_store_thread_end (void);

#ifdef __cplusplus
}
#endif

#endif
