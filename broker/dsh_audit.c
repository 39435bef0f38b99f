/*  =========================================================================
    dsh_audit - the audit trail's two threads: a writer that appends
    records in batches, and a reader that answers queries and follows the
    stored state (modes, pins, grants)

    The queue between the registry and the writer is a linked list under
    a mutex with a condition variable: a push is a few pointer moves, and
    the writer takes the whole list at once. Its bytes are counted in an
    atomic the registry reads to admit calls (required) or drop records
    (best-effort) without taking the lock.

    The writer builds a record's JSON from the trail: the bytes it pins
    (the caller's body, the body that ran, the result) are decoded and
    hashed there, never on the registry's loop.
    =========================================================================
*/

#include "dsh_audit.h"
#include "dsh_store.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_log.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

//  msgpack-c has no bool packer
#define S_PACK_BOOL(pk, value) ((value)? msgpack_pack_true (pk): msgpack_pack_false (pk))

#include <fnmatch.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>

#define S_BATCH_MAX         2048        //  records per transaction, at most
#define S_RETRY_MIN_MS      50
#define S_RETRY_MAX_MS      1000
#define S_PRUNE_EVERY_MS    60000
#define S_PRUNE_BATCH       10000
#define S_QUERY_MAX         10000       //  records one AUDIT reply holds, at most
#define S_LOG_EVERY_MS      10000       //  a failing store is logged this often
#define S_TEXT_MAX          512         //  a stage's reason, kept
#define S_GATHER_MS         2           //  a small batch waits this long for more
#define S_GATHER_RECORDS    256         //  ... when fewer are queued

typedef struct _s_decision_t s_decision_t;
struct _s_decision_t {
    char stage [DSH_NAME_MAX + 1];
    char kind [DSH_NAME_MAX + 1];
    const char *verdict;        //  one of the static verdict names
    char *reason;               //  or NULL
    s_decision_t *next;
};

//  A trail's text fields are arrays of their own: a trail is one
//  allocation and its decisions, so the registry's side costs no string
//  copies on the heap (and the writer, freeing them, no arena locks)
struct _dsh_audit_trail_t {
    dsh_audit_trail_t *next;    //  in the queue
    size_t bytes;               //  what it pins, as counted
    int64_t received_ms;
    int64_t received_us;        //  monotonic, for the duration
    int64_t answered_ms;
    uint64_t duration_us;
    char key [41];
    char name [DSH_NAME_MAX + 1];
    char role [32];
    char agent [DSH_ID_MAX + 1];
    char address [64];
    char claimed_agent [DSH_ID_MAX + 1];
    bool has_claimed_agent;
    char call_id [DSH_CALL_ID_MAX + 1];
    char tool [DSH_NAME_MAX + 1];
    char component [DSH_ID_MAX + 1];
    char host [64];
    char tool_digest [65];
    size_t providers;
    bool dispatched;
    zmq_msg_t request;          //  the caller's CALL body (shared with libzmq)
    bool has_request;
    zmq_msg_t ran;              //  the body sent to the component, if not the caller's
    bool has_ran;
    zmq_msg_t result;           //  the answer
    bool has_result;
    s_decision_t *decisions, *decisions_tail;
    char approval_request [DSH_ID_MAX + 1];
    char approver [DSH_NAME_MAX + 1];
    char approval_decision [32];
    char approval_grant [DSH_ID_MAX + 1];   //  the grant that allowed the call, or made, or ""
    int64_t approval_ms;
    char trace_id [33];         //  the call's W3C trace id in hex, or ""
    //  A writer's own: a record saying records were lost
    uint64_t lost;
};

struct _dsh_audit_t {
    dsh_audit_config_t config;
    char *store_location;
    char *broker;
    char *digest_tools;
    pthread_t writer;
    bool writer_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    dsh_audit_trail_t *head, *tail;     //  the queue
    size_t queued;              //  trails in it
    zlistx_t *changes;          //  durable state to write (s_change_t *), under lock
    bool stopping;
    bool sleeping;              //  the writer waits on wake: a push signals it
    int64_t stop_deadline_ms;
    atomic_uint_fast64_t queue_bytes;
    atomic_bool healthy;
    atomic_uint_fast64_t records;
    atomic_uint_fast64_t dropped;
    atomic_uint_fast64_t refused;
    atomic_uint_fast64_t batches;
    atomic_uint_fast64_t write_us_total;
    atomic_uint_fast64_t write_us_max;
    uint64_t lost_unwritten;    //  writer's: dropped and not yet said in a record
    int64_t last_drop_log_ms;   //  registry's: rate limit
    zactor_t *reader;
    char kind [16];
};

//  A change to the durable state: an agent's mode, a pin, a grant kept or
//  revoked
typedef enum {
    S_STATE_MODE,
    S_STATE_PIN,
    S_STATE_GRANT,
    S_STATE_REVOKE
} s_state_kind_t;

typedef struct {
    s_state_kind_t kind;
    char *agent;                //  mode: the agent; grant, revoke: the grant's id
    char *mode;                 //  mode: the mode; grant: the stage
    char *set_by;               //  mode: who; grant: the grant's JSON text
    int64_t set_ms;             //  mode: when; grant: when it expires; revoke: when
    dsh_pin_op_t *pin;          //  pin: the change
} s_change_t;

static void
s_change_destroy (s_change_t **self_p)
{
    if (*self_p) {
        zstr_free (&(*self_p)->agent);
        zstr_free (&(*self_p)->mode);
        zstr_free (&(*self_p)->set_by);
        dsh_pin_op_destroy (&(*self_p)->pin);
        free (*self_p);
        *self_p = NULL;
    }
}

//  Write one state change. Returns 0, or -1 with a reason.
static int
s_state_write (dsh_store_t *store, s_change_t *change, char *error, size_t error_size)
{
    if (change->kind == S_STATE_PIN)
        return dsh_store_pin_write (store, change->pin, error, error_size);
    if (change->kind == S_STATE_GRANT)
        return dsh_store_grant_put (store, change->agent, change->mode, change->set_by, change->set_ms,
                                    error, error_size);
    if (change->kind == S_STATE_REVOKE)
        return dsh_store_grant_revoke (store, change->agent, change->set_ms, error, error_size);
    return dsh_store_mode_set (store, change->agent, change->mode, change->set_by, change->set_ms,
                               error, error_size);
}

static char *
s_dup (const char *text)
{
    return text? strdup (text): NULL;
}

//  Copies text (NULL: "") into a field, cut to its size.
#define S_SET(field, text) snprintf ((field), sizeof (field), "%s", (text)? (text): "")

//  ---------------------------------------------------------------------
//  Trails

dsh_audit_trail_t *
dsh_audit_trail_new (dsh_audit_t *self, zmq_msg_t *body)
{
    if (!self)
        return NULL;
    dsh_audit_trail_t *trail = (dsh_audit_trail_t *) malloc (sizeof (dsh_audit_trail_t));
    assert (trail);
    //  Only the header is cleared: every text field is written before use
    memset (trail, 0, offsetof (dsh_audit_trail_t, key));
    trail->key [0] = trail->name [0] = trail->role [0] = trail->agent [0] = trail->address [0] = 0;
    trail->has_claimed_agent = false;
    trail->call_id [0] = trail->tool [0] = trail->component [0] = trail->host [0] = trail->tool_digest [0] = 0;
    trail->providers = 0;
    trail->dispatched = trail->has_request = trail->has_ran = trail->has_result = false;
    trail->decisions = trail->decisions_tail = NULL;
    trail->approval_request [0] = trail->approver [0] = trail->approval_decision [0] = 0;
    trail->approval_grant [0] = 0;
    trail->trace_id [0] = 0;
    trail->approval_ms = 0;
    trail->lost = 0;
    trail->received_ms = zclock_time ();
    trail->received_us = zclock_usecs ();
    trail->bytes = sizeof (dsh_audit_trail_t);
    if (body) {
        zmq_msg_init (&trail->request);
        zmq_msg_copy (&trail->request, body);
        trail->has_request = true;
        trail->bytes += zmq_msg_size (body);
    }
    return trail;
}

void
dsh_audit_trail_destroy (dsh_audit_trail_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_audit_trail_t *self = *self_p;
        if (self->has_request)
            zmq_msg_close (&self->request);
        if (self->has_ran)
            zmq_msg_close (&self->ran);
        if (self->has_result)
            zmq_msg_close (&self->result);
        s_decision_t *decision = self->decisions;
        while (decision) {
            s_decision_t *next = decision->next;
            zstr_free (&decision->reason);
            free (decision);
            decision = next;
        }
        free (self);
        *self_p = NULL;
    }
}

void
dsh_audit_trail_caller (dsh_audit_trail_t *self, const char *key, const char *name, const char *role,
                        const char *agent, const char *address, const char *claimed_agent)
{
    if (!self)
        return;
    S_SET (self->key, key);
    S_SET (self->name, name);
    S_SET (self->role, role);
    S_SET (self->agent, agent);
    S_SET (self->address, address);
    S_SET (self->claimed_agent, claimed_agent);
    self->has_claimed_agent = claimed_agent != NULL;
}

void
dsh_audit_trail_call (dsh_audit_trail_t *self, const char *call_id, const char *tool)
{
    if (!self)
        return;
    S_SET (self->call_id, call_id);
    S_SET (self->tool, tool);
}

void
dsh_audit_trail_trace (dsh_audit_trail_t *self, const char *trace_id)
{
    if (!self)
        return;
    S_SET (self->trace_id, trace_id);
}

//  The verdicts a stage can have, as the record spells them
static const char *s_verdicts [] = { "passed", "rewrote", "answered", "failed", "skipped", "rewrote-result" };

void
dsh_audit_trail_stage (dsh_audit_trail_t *self, const char *stage, const char *kind, const char *verdict,
                       const char *reason)
{
    if (!self)
        return;
    s_decision_t *decision = (s_decision_t *) zmalloc (sizeof (s_decision_t));
    assert (decision);
    S_SET (decision->stage, stage);
    S_SET (decision->kind, kind);
    decision->verdict = "?";
    for (size_t index = 0; index < sizeof (s_verdicts) / sizeof (s_verdicts [0]); index++)
        if (streq (verdict, s_verdicts [index]))
            decision->verdict = s_verdicts [index];
    if (reason)
        decision->reason = zsys_sprintf ("%.*s", S_TEXT_MAX, reason);
    if (self->decisions_tail)
        self->decisions_tail->next = decision;
    else
        self->decisions = decision;
    self->decisions_tail = decision;
}

void
dsh_audit_trail_approval (dsh_audit_trail_t *self, const char *request, const char *approver,
                          const char *decision, int64_t at_ms, const char *grant)
{
    if (!self)
        return;
    S_SET (self->approval_request, request);
    S_SET (self->approval_grant, grant);
    S_SET (self->approver, approver);
    S_SET (self->approval_decision, decision? decision: "?");
    self->approval_ms = at_ms;
}

void
dsh_audit_trail_dispatch (dsh_audit_trail_t *self, const char *component, const char *host,
                          size_t providers, const char *tool_digest, zmq_msg_t *body)
{
    if (!self)
        return;
    self->dispatched = true;
    S_SET (self->component, component);
    S_SET (self->host, host);
    self->providers = providers;
    S_SET (self->tool_digest, tool_digest);
    if (body && self->has_ran) {
        self->bytes -= zmq_msg_size (&self->ran);
        zmq_msg_close (&self->ran);
        self->has_ran = false;
    }
    //  The body that runs, kept only when it is not the caller's bytes
    if (body && !(self->has_request && zmq_msg_size (body) == zmq_msg_size (&self->request)
                  && (zmq_msg_data (body) == zmq_msg_data (&self->request)
                      || memcmp (zmq_msg_data (body), zmq_msg_data (&self->request), zmq_msg_size (body)) == 0))) {
        zmq_msg_init (&self->ran);
        zmq_msg_copy (&self->ran, body);
        self->has_ran = true;
        self->bytes += zmq_msg_size (body);
    }
}

//  ---------------------------------------------------------------------
//  Records: a trail's JSON, written straight into a buffer (a jansson
//  tree per record cost more than the rest of the writer together); only
//  kept arguments go through jansson, as the Typed JSON view of them

typedef struct {
    char *data;
    size_t size;
    size_t limit;
    bool fresh;                 //  an object was just opened: no comma before its first field
} s_text_t;

static void
s_text_reserve (s_text_t *text, size_t more)
{
    if (text->size + more + 1 > text->limit) {
        size_t limit = text->limit? text->limit: 1024;
        while (text->size + more + 1 > limit)
            limit *= 2;
        text->data = (char *) realloc (text->data, limit);
        assert (text->data);
        text->limit = limit;
    }
}

static void
s_text_add (s_text_t *text, const char *data, size_t size)
{
    s_text_reserve (text, size);
    memcpy (text->data + text->size, data, size);
    text->size += size;
    text->data [text->size] = 0;
}

static void
s_text_cstr (s_text_t *text, const char *data)
{
    s_text_add (text, data, strlen (data));
}

//  A JSON string: quotes, and every byte that is not printable ASCII, a
//  quote or a backslash escaped (\u00XX for a byte: the text is whatever a
//  peer sent, so invalid UTF-8 is kept visible rather than trusted)
static void
s_text_string (s_text_t *text, const char *value)
{
    static const char digits [] = "0123456789abcdef";
    size_t length = strlen (value);
    s_text_reserve (text, length * 6 + 2);
    char *out = text->data + text->size;
    *out++ = '"';
    for (const unsigned char *cursor = (const unsigned char *) value; *cursor; cursor++) {
        unsigned char byte = *cursor;
        if (byte == '"' || byte == '\\') {
            *out++ = '\\';
            *out++ = (char) byte;
        }
        else
        if (byte >= 0x20 && byte < 0x7f)
            *out++ = (char) byte;
        else {
            memcpy (out, "\\u00", 4);
            out [4] = digits [byte >> 4];
            out [5] = digits [byte & 15];
            out += 6;
        }
    }
    *out++ = '"';
    text->size = (size_t) (out - text->data);
    text->data [text->size] = 0;
}

//  Opens an object (as a field's value, after s_field_key, or the record)
static void
s_text_open (s_text_t *text)
{
    s_text_add (text, "{", 1);
    text->fresh = true;
}

static void
s_text_close (s_text_t *text)
{
    s_text_add (text, "}", 1);
    text->fresh = false;
}

//  ,"key": (no comma for an object's first field)
static void
s_field_key (s_text_t *text, const char *key)
{
    if (!text->fresh)
        s_text_add (text, ",", 1);
    text->fresh = false;
    s_text_add (text, "\"", 1);
    s_text_cstr (text, key);
    s_text_add (text, "\":", 2);
}

//  ,"key":"value"
static void
s_field_str (s_text_t *text, const char *key, const char *value)
{
    s_field_key (text, key);
    s_text_string (text, value);
}

static void
s_field_int (s_text_t *text, const char *key, int64_t value)
{
    s_field_key (text, key);
    char number [24];
    int size = snprintf (number, sizeof (number), "%" PRId64, value);
    s_text_add (text, number, (size_t) size);
}

static void
s_field_bool (s_text_t *text, const char *key, bool value)
{
    s_field_key (text, key);
    s_text_cstr (text, value? "true": "false");
}

static void
s_sha256 (const void *data, size_t size, char *hex)
{
    dsh_store_sha256 (data, size, hex);
}

//  The bytes of the value under key in a msgpack map body, exactly as
//  sent: walks the root map's pairs with msgpack's own unpacker. Returns
//  0 with the span, or -1 if there is no such key.
static int
s_map_value_span (const byte *data, size_t size, const char *key, size_t *start, size_t *length)
{
    if (size == 0)
        return -1;
    size_t offset = 0;
    uint32_t pairs;
    byte head = data [0];
    if ((head & 0xf0) == 0x80) {
        pairs = head & 0x0f;
        offset = 1;
    }
    else
    if (head == 0xde && size >= 3) {
        pairs = (uint32_t) data [1] << 8 | data [2];
        offset = 3;
    }
    else
    if (head == 0xdf && size >= 5) {
        pairs = (uint32_t) data [1] << 24 | (uint32_t) data [2] << 16 | (uint32_t) data [3] << 8 | data [4];
        offset = 5;
    }
    else
        return -1;
    msgpack_unpacked unpacked;
    msgpack_unpacked_init (&unpacked);
    int rc = -1;
    for (uint32_t pair = 0; pair < pairs; pair++) {
        if (msgpack_unpack_next (&unpacked, (const char *) data, size, &offset) != MSGPACK_UNPACK_SUCCESS)
            break;
        bool match = unpacked.data.type == MSGPACK_OBJECT_STR && unpacked.data.via.str.size == strlen (key)
                  && memcmp (unpacked.data.via.str.ptr, key, strlen (key)) == 0;
        size_t value_start = offset;
        if (msgpack_unpack_next (&unpacked, (const char *) data, size, &offset) != MSGPACK_UNPACK_SUCCESS)
            break;
        if (match) {
            *start = value_start;
            *length = offset - value_start;
            rc = 0;
            break;
        }
    }
    msgpack_unpacked_destroy (&unpacked);
    return rc;
}

static bool
s_digest_only (dsh_audit_t *self, const char *tool)
{
    if (!self->digest_tools || !tool)
        return false;
    char *globs = strdup (self->digest_tools);
    bool match = false;
    char *save = NULL;
    for (char *glob = strtok_r (globs, ",", &save); glob && !match; glob = strtok_r (NULL, ",", &save)) {
        while (*glob == ' ')
            glob++;
        match = *glob && fnmatch (glob, tool, 0) == 0;
    }
    free (globs);
    return match;
}

//  The arguments of a CALL body: their digest always, the value itself
//  as the policy says.
static void
s_record_arguments (dsh_audit_t *self, s_text_t *record, dsh_audit_trail_t *trail)
{
    if (!trail->has_request)
        return;
    const byte *data = (const byte *) zmq_msg_data (&trail->request);
    size_t size = zmq_msg_size (&trail->request);
    char hex [65];
    s_field_int (record, "requestBytes", (int64_t) size);
    size_t start = 0, length = 0;
    if (s_map_value_span (data, size, "arguments", &start, &length) == 0) {
        s_sha256 (data + start, length, hex);
        s_field_str (record, "argumentsSha256", hex);
        s_field_int (record, "argumentsBytes", (int64_t) length);
    }
    const char *kept = "none";
    if (self->config.arguments == DSH_AUDIT_ARGS_DIGEST || (length && s_digest_only (self, trail->tool)))
        kept = "digest";
    else
    if (self->config.arguments == DSH_AUDIT_ARGS_FULL && length) {
        if (length > self->config.arguments_max_bytes)
            kept = "digest (over the size limit)";
        else {
            //  The one strict decode the broker makes of any message: a body
            //  it refused for a repeated key is kept as its digest, never as
            //  one of its two readings
            char reason [128];
            dsh_doc_t *doc = dsh_doc_new (data + start, length, reason, sizeof (reason));
            json_t *view = doc? dsh_json_view (dsh_doc_root (doc)): NULL;
            char *json = view? json_dumps (view, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY): NULL;
            if (json) {
                s_field_key (record, "arguments");
                s_text_cstr (record, json);
                kept = "full";
            }
            else
                kept = "digest (unreadable)";
            free (json);
            json_decref (view);
            dsh_doc_destroy (&doc);
        }
    }
    s_field_str (record, "argumentsKept", kept);
    //  What ran, when a stage changed the arguments (a change elsewhere in
    //  the body, a stamped agent or meta, is in the stages' verdicts)
    size_t caller_start = start, caller_length = length;
    const byte *ran = trail->has_ran? (const byte *) zmq_msg_data (&trail->ran): NULL;
    if (ran && s_map_value_span (ran, zmq_msg_size (&trail->ran), "arguments", &start, &length) == 0
    &&  !(length == caller_length && memcmp (ran + start, data + caller_start, length) == 0)) {
        s_sha256 (ran + start, length, hex);
        s_field_str (record, "ranArgumentsSha256", hex);
    }
}

//  The outcome of the answer: "ok", or its error code.
static void
s_record_result (s_text_t *record, dsh_audit_trail_t *trail, char *outcome, size_t outcome_size)
{
    snprintf (outcome, outcome_size, "ok");
    if (!trail->has_result)
        return;
    const byte *data = (const byte *) zmq_msg_data (&trail->result);
    size_t size = zmq_msg_size (&trail->result);
    char hex [65];
    s_sha256 (data, size, hex);
    s_field_str (record, "resultSha256", hex);
    s_field_int (record, "resultBytes", (int64_t) size);
    bool is_error = false;
    char reason [128];
    //  Read in place: the document points into the result's bytes
    dsh_doc_t *doc = dsh_doc_new (data, size, reason, sizeof (reason));
    if (doc && dsh_doc_root (doc)->type != MSGPACK_OBJECT_MAP)
        dsh_doc_destroy (&doc);
    if (doc) {
        const msgpack_object *root = dsh_doc_root (doc);
        const msgpack_object *flag = dsh_map_get (root, "isError");
        is_error = flag && flag->type == MSGPACK_OBJECT_BOOLEAN && flag->via.boolean;
        if (is_error) {
            const msgpack_object *code = dsh_map_get (dsh_map_get (root, "error"), "code");
            if (code && code->type == MSGPACK_OBJECT_STR && code->via.str.size > 0 && code->via.str.size < outcome_size)
                snprintf (outcome, outcome_size, "%.*s", (int) code->via.str.size, code->via.str.ptr);
            else
                snprintf (outcome, outcome_size, "TOOL_ERROR");
        }
        dsh_doc_destroy (&doc);
    }
    else
        snprintf (outcome, outcome_size, "MALFORMED_RESULT");
    s_field_bool (record, "isError", is_error);
}

//  The record's JSON text, and its columns into row (pointing into trail
//  or outcome). Caller frees the text.
static char *
s_record (dsh_audit_t *self, dsh_audit_trail_t *trail, dsh_store_row_t *row, char *outcome, size_t outcome_size)
{
    s_text_t record = { NULL, 0, 0, false };
    s_text_open (&record);
    s_field_int (&record, "v", 1);
    s_field_str (&record, "broker", self->broker);
    s_field_int (&record, "epoch", (int64_t) self->config.epoch);
    s_field_int (&record, "receivedMs", trail->received_ms);
    s_field_int (&record, "answeredMs", trail->answered_ms);
    const char *caller_id = *trail->name? trail->name: *trail->key? trail->key: trail->address;
    const char *agent = trail->has_claimed_agent? trail->claimed_agent: trail->agent;
    if (trail->lost) {
        s_field_str (&record, "kind", "lost");
        s_field_int (&record, "lost", (int64_t) trail->lost);
        snprintf (outcome, outcome_size, "AUDIT_LOST");
        caller_id = agent = "";
        s_field_str (&record, "agent", "");
        s_field_str (&record, "tool", "");
        s_field_str (&record, "callId", "");
        s_field_str (&record, "callerId", "");
    }
    else {
        s_field_str (&record, "kind", "call");
        s_field_int (&record, "durationUs", (int64_t) trail->duration_us);
        s_field_key (&record, "caller");
        s_text_open (&record);
        if (*trail->key)
            s_field_str (&record, "key", trail->key);
        if (*trail->name)
            s_field_str (&record, "name", trail->name);
        if (*trail->role)
            s_field_str (&record, "role", trail->role);
        if (*trail->agent)
            s_field_str (&record, "agent", trail->agent);
        if (*trail->address)
            s_field_str (&record, "address", trail->address);
        s_text_close (&record);
        s_field_str (&record, "callerId", caller_id);
        s_field_str (&record, "agent", agent);
        if (trail->has_claimed_agent)
            s_field_str (&record, "claimedAgent", trail->claimed_agent);
        s_field_str (&record, "callId", trail->call_id);
        s_field_str (&record, "tool", trail->tool);
        if (*trail->trace_id)
            s_field_str (&record, "traceId", trail->trace_id);
        if (trail->dispatched) {
            s_field_key (&record, "component");
            s_text_open (&record);
            s_field_str (&record, "id", trail->component);
            if (*trail->host)
                s_field_str (&record, "host", trail->host);
            s_field_int (&record, "providers", (int64_t) trail->providers);
            s_text_close (&record);
            if (*trail->tool_digest)
                s_field_str (&record, "toolSha256", trail->tool_digest);
        }
        s_record_arguments (self, &record, trail);
        s_field_key (&record, "stages");
        s_text_add (&record, "[", 1);
        for (s_decision_t *decision = trail->decisions; decision; decision = decision->next) {
            if (decision != trail->decisions)
                s_text_add (&record, ",", 1);
            s_text_open (&record);
            s_field_str (&record, "stage", decision->stage);
            s_field_str (&record, "kind", decision->kind);
            s_field_str (&record, "verdict", decision->verdict);
            if (decision->reason)
                s_field_str (&record, "reason", decision->reason);
            s_text_close (&record);
        }
        s_text_add (&record, "]", 1);
        if (*trail->approval_decision) {
            s_field_key (&record, "approval");
            s_text_open (&record);
            if (*trail->approval_request)
                s_field_str (&record, "request", trail->approval_request);
            if (*trail->approval_grant)
                s_field_str (&record, "grant", trail->approval_grant);
            if (*trail->approver)
                s_field_str (&record, "approver", trail->approver);
            s_field_str (&record, "decision", trail->approval_decision);
            s_field_int (&record, "atMs", trail->approval_ms);
            s_text_close (&record);
        }
        s_record_result (&record, trail, outcome, outcome_size);
    }
    s_field_str (&record, "outcome", outcome);
    s_text_close (&record);
    row->received_ms = trail->received_ms;
    row->answered_ms = trail->answered_ms;
    row->agent = agent;
    row->tool = trail->tool;
    row->call_id = trail->call_id;
    row->outcome = outcome;
    row->caller = caller_id;
    row->record = record.data;
    return record.data;
}

//  ---------------------------------------------------------------------
//  The writer

static void
s_take (dsh_audit_t *self, dsh_audit_trail_t **list_p, zlistx_t **changes_p)
{
    *list_p = self->head;
    self->head = self->tail = NULL;
    self->queued = 0;
    *changes_p = NULL;
    if (zlistx_size (self->changes)) {
        *changes_p = self->changes;
        self->changes = zlistx_new ();
        zlistx_set_destructor (self->changes, (zlistx_destructor_fn *) s_change_destroy);
    }
}

static dsh_store_t *
s_open (dsh_audit_t *self, int64_t *last_log_ms)
{
    char error [512];
    dsh_store_t *store = dsh_store_new (self->store_location, error, sizeof (error));
    if (!store && zclock_mono () - *last_log_ms >= S_LOG_EVERY_MS) {
        dsh_log_error ("dsh-broker: audit store: %s", error);
        *last_log_ms = zclock_mono ();
    }
    return store;
}

//  Appends batch (count rows of trails); returns 0 or -1.
static int
s_write (dsh_audit_t *self, dsh_store_t *store, dsh_audit_trail_t **trails, size_t count, int64_t *last_log_ms)
{
    dsh_store_row_t *rows = (dsh_store_row_t *) calloc (count, sizeof (dsh_store_row_t));
    char **texts = (char **) calloc (count, sizeof (char *));
    char (*outcomes) [64] = calloc (count, 64);
    assert (rows && texts && outcomes);
    for (size_t index = 0; index < count; index++)
        texts [index] = s_record (self, trails [index], &rows [index], outcomes [index], 64);
    char error [512];
    int64_t started = zclock_usecs ();
    int rc = dsh_store_append (store, self->broker, rows, count, error, sizeof (error));
    uint64_t took = (uint64_t) (zclock_usecs () - started);
    if (rc == 0) {
        atomic_fetch_add (&self->batches, 1);
        atomic_fetch_add (&self->write_us_total, took);
        if (took > atomic_load (&self->write_us_max))
            atomic_store (&self->write_us_max, took);
        for (size_t index = 0; index < count; index++)
            if (!trails [index]->lost)
                atomic_fetch_add (&self->records, 1);
        if (!atomic_load (&self->healthy))
            dsh_log_info ("dsh-broker: audit store %s takes records again", dsh_store_location (store));
        atomic_store (&self->healthy, true);
    }
    else {
        if (atomic_load (&self->healthy) || zclock_mono () - *last_log_ms >= S_LOG_EVERY_MS) {
            dsh_log_error ("dsh-broker: audit store %s: %s (%zu records wait; %s)", dsh_store_location (store), error,
                           count, self->config.policy == DSH_AUDIT_REQUIRED? "new calls are refused AUDIT_UNAVAILABLE"
                                                                            : "records are dropped while it fails");
            *last_log_ms = zclock_mono ();
        }
        atomic_store (&self->healthy, false);
    }
    for (size_t index = 0; index < count; index++)
        free (texts [index]);
    free (texts);
    free (rows);
    free (outcomes);
    return rc;
}

static void
s_release (dsh_audit_t *self, dsh_audit_trail_t **trail_p)
{
    atomic_fetch_sub (&self->queue_bytes, (*trail_p)->bytes);
    dsh_audit_trail_destroy (trail_p);
}

static void
s_prune (dsh_audit_t *self, dsh_store_t *store)
{
    if (!self->config.retain_days && !self->config.max_bytes)
        return;
    int64_t before = self->config.retain_days
                   ? zclock_time () - (int64_t) self->config.retain_days * 86400000: 0;
    char error [512];
    //  A byte bound is kept as a record count: as many of the newest as
    //  fit, at the chain's mean record size
    uint64_t keep = 0;
    uint64_t records = 0, bytes = 0;
    if (self->config.max_bytes
    &&  dsh_store_count (store, self->broker, &records, &bytes, error, sizeof (error)) == 0
    &&  bytes > self->config.max_bytes && records)
        keep = (uint64_t) ((double) records * ((double) self->config.max_bytes / (double) bytes));
    if (!before && !keep)
        return;
    if (self->config.max_bytes && bytes > self->config.max_bytes && !keep)
        keep = 1;
    int removed;
    //  In batches, so no one transaction holds the chain long
    while ((removed = dsh_store_prune (store, self->broker, before, keep, S_PRUNE_BATCH,
                                       error, sizeof (error))) == S_PRUNE_BATCH)
        ;
    if (removed < 0)
        dsh_log_warning ("dsh-broker: audit store: pruning failed: %s", error);
}

static void *
s_writer (void *arg)
{
    dsh_audit_t *self = (dsh_audit_t *) arg;
    int64_t last_log_ms = -S_LOG_EVERY_MS;
    dsh_store_t *store = s_open (self, &last_log_ms);
    atomic_store (&self->healthy, store != NULL);
    dsh_audit_trail_t *pending = NULL;      //  taken, not written yet
    dsh_audit_trail_t *pending_tail = NULL;
    zlistx_t *changes_pending = zlistx_new ();
    zlistx_set_destructor (changes_pending, (zlistx_destructor_fn *) s_change_destroy);
    int retry_ms = S_RETRY_MIN_MS;
    //  Retention runs a second after the first write, then every minute
    int64_t next_prune = 0;
    while (true) {
        pthread_mutex_lock (&self->lock);
        if (!self->head && !zlistx_size (self->changes) && !self->stopping) {
            struct timespec until;
            clock_gettime (CLOCK_REALTIME, &until);
            int wait_ms = pending || zlistx_size (changes_pending)? retry_ms: 1000;
            until.tv_sec += wait_ms / 1000;
            until.tv_nsec += (long) (wait_ms % 1000) * 1000000;
            if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
            }
            self->sleeping = true;
            pthread_cond_timedwait (&self->wake, &self->lock, &until);
            self->sleeping = false;
        }
        //  Woken for a few records: a moment more gathers a batch, so a
        //  transaction holds many (a row in a batch of 100 cost half as
        //  much again as one in a batch of 1000) and the registry wakes
        //  the writer seldom
        if (self->head && self->queued < S_GATHER_RECORDS && !self->stopping) {
            pthread_mutex_unlock (&self->lock);
            zclock_sleep (S_GATHER_MS);
            pthread_mutex_lock (&self->lock);
        }
        dsh_audit_trail_t *taken;
        zlistx_t *changes;
        s_take (self, &taken, &changes);
        bool stopping = self->stopping;
        int64_t stop_deadline = self->stop_deadline_ms;
        pthread_mutex_unlock (&self->lock);
        if (taken) {
            dsh_audit_trail_t *last = taken;
            while (last->next)
                last = last->next;
            if (pending_tail)
                pending_tail->next = taken;
            else
                pending = taken;
            pending_tail = last;
        }
        if (changes) {
            s_change_t *change;
            while ((change = (s_change_t *) zlistx_detach (changes, NULL)))
                zlistx_add_end (changes_pending, change);
            zlistx_destroy (&changes);
        }
        if (!store) {
            store = s_open (self, &last_log_ms);
        }
        bool failed = store == NULL;
        //  State first: changes are few, and a call after `dsh mode` (or an
        //  accept, a grant) should find it
        while (store && !failed && zlistx_size (changes_pending)) {
            s_change_t *change = (s_change_t *) zlistx_first (changes_pending);
            char error [512];
            if (s_state_write (store, change, error, sizeof (error))) {
                dsh_log_warning ("dsh-broker: audit store: could not keep %s %s: %s",
                                 change->kind == S_STATE_MODE? "the mode of agent":
                                 change->kind == S_STATE_PIN? "the pin of tool": "grant",
                                 change->kind == S_STATE_PIN? change->pin->pin->name: change->agent, error);
                failed = true;
            }
            else
                zlistx_delete (changes_pending, zlistx_cursor (changes_pending));
        }
        //  A best-effort audit says what it lost, in the chain, once it can
        uint64_t dropped = atomic_load (&self->dropped);
        if (store && !failed && dropped > self->lost_unwritten) {
            dsh_audit_trail_t *lost = dsh_audit_trail_new (self, NULL);
            lost->received_ms = lost->answered_ms = zclock_time ();
            lost->lost = dropped - self->lost_unwritten;
            dsh_audit_trail_t *batch [1] = { lost };
            if (s_write (self, store, batch, 1, &last_log_ms) == 0)
                self->lost_unwritten = dropped;
            else
                failed = true;
            dsh_audit_trail_destroy (&lost);
        }
        while (store && !failed && pending) {
            dsh_audit_trail_t *batch [S_BATCH_MAX];
            size_t count = 0;
            for (dsh_audit_trail_t *trail = pending; trail && count < S_BATCH_MAX; trail = trail->next)
                batch [count++] = trail;
            if (s_write (self, store, batch, count, &last_log_ms) == 0) {
                for (size_t index = 0; index < count; index++) {
                    pending = batch [index]->next;
                    s_release (self, &batch [index]);
                }
                if (!pending)
                    pending_tail = NULL;
            }
            else
                failed = true;
        }
        if (failed) {
            atomic_store (&self->healthy, false);
            retry_ms = retry_ms * 2 > S_RETRY_MAX_MS? S_RETRY_MAX_MS: retry_ms * 2;
        }
        else
            retry_ms = S_RETRY_MIN_MS;
        if (store && !failed && !next_prune && atomic_load (&self->batches))
            next_prune = zclock_mono () + 1000;
        if (store && !failed && next_prune && zclock_mono () >= next_prune) {
            s_prune (self, store);
            next_prune = zclock_mono () + S_PRUNE_EVERY_MS;
        }
        if (stopping && ((!pending && !zlistx_size (changes_pending)) || zclock_mono () >= stop_deadline)) {
            if (pending) {
                size_t left = 0;
                while (pending) {
                    dsh_audit_trail_t *next = pending->next;
                    s_release (self, &pending);
                    pending = next;
                    left++;
                }
                dsh_log_error ("dsh-broker: audit store: %zu records could not be written before the broker stopped",
                               left);
            }
            break;
        }
        if (failed && !stopping) {
            //  Wait before trying again, but wake for new records
            pthread_mutex_lock (&self->lock);
            if (!self->stopping) {
                struct timespec until;
                clock_gettime (CLOCK_REALTIME, &until);
                until.tv_nsec += (long) retry_ms * 1000000;
                until.tv_sec += until.tv_nsec / 1000000000;
                until.tv_nsec %= 1000000000;
                pthread_cond_timedwait (&self->wake, &self->lock, &until);
            }
            pthread_mutex_unlock (&self->lock);
        }
    }
    zlistx_destroy (&changes_pending);
    dsh_store_destroy (&store);
    return NULL;
}

//  ---------------------------------------------------------------------
//  The reader: AUDIT queries and the stored state (modes, pins, grants)

typedef struct {
    msgpack_packer *pk;
    dsh_packer_t *packer;
    size_t count;
    size_t bytes;
    size_t max_bytes;
    bool more;
} s_query_t;

static int
s_query_row (const dsh_store_row_t *row, void *arg)
{
    s_query_t *query = (s_query_t *) arg;
    size_t size = strlen (row->record) + 256;
    if (query->count && query->bytes + size > query->max_bytes) {
        query->more = true;
        return -1;
    }
    dsh_packer_t *packer = query->packer;
    dsh_packer_map_begin (packer);
    dsh_packer_kv_str (packer, "broker", row->broker);
    dsh_pack_cstr (query->pk, "seq");
    msgpack_pack_uint64 (query->pk, row->seq);
    dsh_packer_kv_str (packer, "prev", row->prev);
    dsh_packer_kv_str (packer, "hash", row->hash);
    dsh_packer_kv_str (packer, "record", row->record);
    dsh_packer_map_end (packer);
    query->count++;
    query->bytes += size;
    return 0;
}

typedef struct {
    zlistx_t *brokers;
} s_brokers_t;

static int
s_broker_row (const dsh_store_row_t *row, void *arg)
{
    zlistx_add_end ((zlistx_t *) arg, (void *) row->broker);
    return 0;
}

static const char *
s_get_str (const msgpack_object *root, const char *key, char *buffer, size_t size)
{
    const msgpack_object *value = dsh_map_get (root, key);
    if (!value || value->type != MSGPACK_OBJECT_STR || value->via.str.size >= size)
        return NULL;
    memcpy (buffer, value->via.str.ptr, value->via.str.size);
    buffer [value->via.str.size] = 0;
    return buffer;
}

static int64_t
s_get_int (const msgpack_object *root, const char *key)
{
    const msgpack_object *value = dsh_map_get (root, key);
    return value && value->type == MSGPACK_OBJECT_POSITIVE_INTEGER && value->via.u64 < INT64_MAX
         ? (int64_t) value->via.u64: 0;
}

static zframe_t *
s_query_reply (dsh_store_t *store, zframe_t *request, size_t max_bytes)
{
    char reason [256];
    dsh_doc_t *doc = dsh_proto_decode_body (request, reason, sizeof (reason));
    assert (doc);               //  the registry checked it
    const msgpack_object *root = dsh_doc_root (doc);
    const msgpack_object *id = dsh_map_get (root, "id");
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id) {
        dsh_pack_cstr (&packer.pk, "id");
        msgpack_pack_object (&packer.pk, *id);
    }
    char error [512] = "";
    int rc = 0;
    const msgpack_object *verify = dsh_map_get (root, "verify");
    char broker [256];
    const char *only = s_get_str (root, "broker", broker, sizeof (broker));
    if (verify && verify->type == MSGPACK_OBJECT_BOOLEAN && verify->via.boolean) {
        zlistx_t *brokers = zlistx_new ();
        zlistx_set_duplicator (brokers, (zlistx_duplicator_fn *) strdup);
        zlistx_set_destructor (brokers, (zlistx_destructor_fn *) zstr_free);
        if (only)
            zlistx_add_end (brokers, (void *) only);
        else
            rc = dsh_store_brokers (store, s_broker_row, brokers, error, sizeof (error)) < 0? -1: 0;
        dsh_pack_cstr (&packer.pk, "chains");
        msgpack_pack_array (&packer.pk, rc? 0: (uint32_t) zlistx_size (brokers));
        for (const char *name = (const char *) zlistx_first (brokers); name && rc == 0;
             name = (const char *) zlistx_next (brokers)) {
            dsh_store_verdict_t verdict;
            memset (&verdict, 0, sizeof (verdict));
            rc = dsh_store_verify (store, name, &verdict, error, sizeof (error));
            dsh_packer_map_begin (&packer);
            dsh_packer_kv_str (&packer, "broker", name);
            dsh_pack_cstr (&packer.pk, "checked");
            msgpack_pack_uint64 (&packer.pk, verdict.checked);
            dsh_pack_cstr (&packer.pk, "anchorSeq");
            msgpack_pack_uint64 (&packer.pk, verdict.anchor_seq);
            dsh_pack_cstr (&packer.pk, "ok");
            S_PACK_BOOL (&packer.pk, rc == 0 && verdict.bad_seq == 0 && !*verdict.reason);
            if (verdict.bad_seq) {
                dsh_pack_cstr (&packer.pk, "badSeq");
                msgpack_pack_uint64 (&packer.pk, verdict.bad_seq);
            }
            if (*verdict.reason || rc)
                dsh_packer_kv_str (&packer, "reason", rc? error: verdict.reason);
            dsh_packer_map_end (&packer);
            rc = 0;
        }
        zlistx_destroy (&brokers);
    }
    else {
        char agent [256], tool [256], outcome [64], call_id [256], order [16];
        dsh_store_filter_t filter = {
            .broker = only,
            .agent = s_get_str (root, "agent", agent, sizeof (agent)),
            .tool = s_get_str (root, "tool", tool, sizeof (tool)),
            .outcome = s_get_str (root, "outcome", outcome, sizeof (outcome)),
            .call_id = s_get_str (root, "callId", call_id, sizeof (call_id)),
            .since_ms = s_get_int (root, "since"),
            .until_ms = s_get_int (root, "until"),
            .limit = (size_t) s_get_int (root, "limit"),
        };
        const char *ordering = s_get_str (root, "order", order, sizeof (order));
        filter.oldest_first = ordering && streq (ordering, "oldest");
        if (filter.limit == 0)
            filter.limit = 100;
        if (filter.limit > S_QUERY_MAX)
            filter.limit = S_QUERY_MAX;
        //  One extra row tells whether there are more
        dsh_packer_t rows;
        dsh_packer_init (&rows);
        s_query_t query = { .pk = &rows.pk, .packer = &rows, .max_bytes = max_bytes / 2 };
        //  The rows are packed apart, then copied in after their count
        rc = dsh_store_query (store, &filter, s_query_row, &query, error, sizeof (error)) < 0? -1: 0;
        dsh_pack_cstr (&packer.pk, "records");
        msgpack_pack_array (&packer.pk, rc? 0: (uint32_t) query.count);
        if (rc == 0)
            msgpack_sbuffer_write (&packer.sbuf, rows.sbuf.data, rows.sbuf.size);
        dsh_pack_cstr (&packer.pk, "more");
        S_PACK_BOOL (&packer.pk, query.more);
        dsh_packer_release (&rows);
    }
    dsh_pack_cstr (&packer.pk, "ok");
    S_PACK_BOOL (&packer.pk, rc == 0);
    if (rc)
        dsh_packer_kv_str (&packer, "message", error);
    dsh_packer_map_end (&packer);
    zframe_t *reply = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_doc_destroy (&doc);
    return reply;
}

static bool
s_modes_equal (zhashx_t *left, zhashx_t *right)
{
    if (!left || !right || zhashx_size (left) != zhashx_size (right))
        return false;
    for (const char *mode = (const char *) zhashx_first (left); mode; mode = (const char *) zhashx_next (left)) {
        const char *other = (const char *) zhashx_lookup (right, zhashx_cursor (left));
        if (!other || !streq (other, mode))
            return false;
    }
    return true;
}

static zframe_t *
s_modes_frame (zhashx_t *modes)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, (uint32_t) zhashx_size (modes));
    for (const char *mode = (const char *) zhashx_first (modes); mode; mode = (const char *) zhashx_next (modes)) {
        dsh_pack_cstr (&packer.pk, (const char *) zhashx_cursor (modes));
        dsh_pack_cstr (&packer.pk, mode);
    }
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

//  The stored pins as a packed array, or NULL with a reason.
static zframe_t *
s_pins_frame (dsh_store_t *store, char *error, size_t error_size)
{
    zlistx_t *pins = dsh_store_pins (store, error, error_size);
    if (!pins)
        return NULL;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_array (&packer.pk, (uint32_t) zlistx_size (pins));
    for (dsh_pin_t *pin = (dsh_pin_t *) zlistx_first (pins); pin; pin = (dsh_pin_t *) zlistx_next (pins)) {
        dsh_packer_map_begin (&packer);
        dsh_packer_kv_str (&packer, "name", pin->name);
        dsh_packer_kv_str (&packer, "digest", pin->digest);
        dsh_packer_kv_str (&packer, "definition", pin->definition);
        dsh_packer_kv_str (&packer, "component", pin->component);
        dsh_packer_kv_str (&packer, "key", pin->key);
        dsh_pack_cstr (&packer.pk, "firstMs");
        msgpack_pack_int64 (&packer.pk, pin->first_ms);
        dsh_packer_kv_str (&packer, "acceptedBy", pin->accepted_by);
        dsh_pack_cstr (&packer.pk, "acceptedMs");
        msgpack_pack_int64 (&packer.pk, pin->accepted_ms);
        dsh_packer_kv_str (&packer, "rejected", pin->rejected);
        dsh_packer_map_end (&packer);
    }
    zlistx_destroy (&pins);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

//  The live grants as a packed array of maps, or NULL with a reason.
static zframe_t *
s_grants_frame (dsh_store_t *store, char *error, size_t error_size)
{
    zlistx_t *grants = dsh_store_grants (store, zclock_time (), error, error_size);
    if (!grants)
        return NULL;
    json_t *array = json_array ();
    for (const char *text = (const char *) zlistx_first (grants); text; text = (const char *) zlistx_next (grants)) {
        json_t *grant = json_loads (text, 0, NULL);
        if (json_is_object (grant))
            json_array_append (array, grant);
        json_decref (grant);
    }
    zlistx_destroy (&grants);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_json_to_msgpack (&packer.pk, array);
    json_decref (array);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

int
dsh_audit_read_state (const char *location, zframe_t **modes_p, zframe_t **grants_p, char *error, size_t error_size)
{
    *modes_p = *grants_p = NULL;
    dsh_store_t *store = dsh_store_new (location, error, error_size);
    zhashx_t *modes = store? dsh_store_modes (store, error, error_size): NULL;
    if (modes)
        *modes_p = s_modes_frame (modes);
    zhashx_destroy (&modes);
    if (*modes_p)
        *grants_p = s_grants_frame (store, error, error_size);
    dsh_store_destroy (&store);
    if (!*grants_p)
        zframe_destroy (modes_p);
    return *grants_p? 0: -1;
}

//  Send frame as command if it differs from *last (which it replaces).
static void
s_send_changed (zsock_t *pipe, const char *command, zframe_t **frame_p, zframe_t **last_p)
{
    if (*last_p && zframe_eq (*frame_p, *last_p)) {
        zframe_destroy (frame_p);
        return;
    }
    zframe_destroy (last_p);
    *last_p = *frame_p;
    *frame_p = NULL;
    zmsg_t *message = zmsg_new ();
    zmsg_addstr (message, command);
    zmsg_append (message, &(zframe_t *) { zframe_dup (*last_p) });
    zmsg_send (&message, pipe);
}

static void
s_reader (zsock_t *pipe, void *arg)
{
    dsh_audit_t *self = (dsh_audit_t *) arg;
    zsock_signal (pipe, 0);
    int64_t last_log_ms = -S_LOG_EVERY_MS;
    dsh_store_t *store = s_open (self, &last_log_ms);
    zhashx_t *modes = NULL;             //  the last sent
    zframe_t *pins = NULL;              //  the last sent
    zframe_t *grants = NULL;            //  the last sent
    int64_t next_prune = 0;
    int64_t next_poll = 0;
    zpoller_t *poller = zpoller_new (pipe, NULL);
    while (true) {
        int64_t wait = next_poll - zclock_mono ();
        zsock_t *which = (zsock_t *) zpoller_wait (poller, wait > 0? (int) wait: 0);
        if (zpoller_terminated (poller))
            break;
        if (!store)
            store = s_open (self, &last_log_ms);
        if (which == pipe) {
            zmsg_t *msg = zmsg_recv (pipe);
            if (!msg)
                break;
            char *command = zmsg_popstr (msg);
            if (command && streq (command, "$TERM")) {
                zstr_free (&command);
                zmsg_destroy (&msg);
                break;
            }
            if (command && streq (command, "QUERY")) {
                //  QUERY body envelope...
                zframe_t *request = zmsg_pop (msg);
                zframe_t *reply = store? s_query_reply (store, request, (size_t) 16 * 1024 * 1024): NULL;
                const char *kind = reply? "REPLY": "ERROR";
                //  REPLY|ERROR body envelope...: the envelope rides behind
                if (reply)
                    zmsg_prepend (msg, &reply);
                else {
                    zframe_t *error = dsh_proto_error_body (NULL, DSH_E_AUDIT_UNAVAILABLE,
                                                            "the audit store cannot be reached now");
                    zmsg_prepend (msg, &error);
                }
                zmsg_pushstr (msg, kind);
                zframe_destroy (&request);
                zmsg_send (&msg, pipe);
            }
            zstr_free (&command);
            zmsg_destroy (&msg);
        }
        if (zclock_mono () >= next_poll) {
            next_poll = zclock_mono () + self->config.modes_poll_ms;
            if (store) {
                char error [512];
                zhashx_t *now = dsh_store_modes (store, error, sizeof (error));
                if (!now) {
                    if (zclock_mono () - last_log_ms >= S_LOG_EVERY_MS) {
                        dsh_log_warning ("dsh-broker: audit store: could not read the modes: %s", error);
                        last_log_ms = zclock_mono ();
                    }
                }
                else
                if (!s_modes_equal (now, modes)) {
                    zframe_t *frame = s_modes_frame (now);
                    zmsg_t *message = zmsg_new ();
                    zmsg_addstr (message, "MODES");
                    zmsg_append (message, &frame);
                    zmsg_send (&message, pipe);
                    zhashx_destroy (&modes);
                    modes = now;
                }
                else
                    zhashx_destroy (&now);
                zframe_t *frame = s_pins_frame (store, error, sizeof (error));
                if (frame)
                    s_send_changed (pipe, "PINS", &frame, &pins);
                frame = s_grants_frame (store, error, sizeof (error));
                if (frame)
                    s_send_changed (pipe, "GRANTS", &frame, &grants);
                if (zclock_mono () >= next_prune) {
                    //  Grants a day past their end are history
                    dsh_store_grants_prune (store, zclock_time () - 24 * 3600 * 1000, error, sizeof (error));
                    next_prune = zclock_mono () + 600 * 1000;
                }
            }
        }
    }
    zframe_destroy (&pins);
    zframe_destroy (&grants);
    zhashx_destroy (&modes);
    zpoller_destroy (&poller);
    dsh_store_destroy (&store);
    //  Verify's hashes and libpq used OpenSSL on this thread (dsh_store.c)
    dsh_store_thread_end ();
}

//  ---------------------------------------------------------------------
//  The registry's side

dsh_audit_t *
dsh_audit_new (const dsh_audit_config_t *config)
{
    assert (config);
    if (config->policy == DSH_AUDIT_OFF && !config->state)
        return NULL;
    assert (config->store && config->broker);
    dsh_audit_t *self = (dsh_audit_t *) zmalloc (sizeof (dsh_audit_t));
    assert (self);
    self->config = *config;
    self->store_location = strdup (config->store);
    self->broker = strdup (config->broker);
    self->digest_tools = config->digest_tools && *config->digest_tools? strdup (config->digest_tools): NULL;
    self->config.store = self->store_location;
    self->config.broker = self->broker;
    self->config.digest_tools = self->digest_tools;
    if (self->config.modes_poll_ms <= 0)
        self->config.modes_poll_ms = 1000;
    if (!self->config.queue_bytes)
        self->config.queue_bytes = 64 * 1024 * 1024;
    snprintf (self->kind, sizeof (self->kind), "%s",
              strncmp (config->store, "postgres", 8) == 0? "postgresql": "sqlite");
    pthread_mutex_init (&self->lock, NULL);
    pthread_cond_init (&self->wake, NULL);
    self->changes = zlistx_new ();
    zlistx_set_destructor (self->changes, (zlistx_destructor_fn *) s_change_destroy);
    atomic_init (&self->queue_bytes, 0);
    atomic_init (&self->healthy, false);
    atomic_init (&self->records, 0);
    atomic_init (&self->dropped, 0);
    atomic_init (&self->refused, 0);
    atomic_init (&self->batches, 0);
    atomic_init (&self->write_us_total, 0);
    atomic_init (&self->write_us_max, 0);
    //  The first open is waited for (briefly), so calls right after start
    //  are not refused while a reachable store opens
    self->writer_started = pthread_create (&self->writer, NULL, s_writer, self) == 0;
    assert (self->writer_started);
    for (int waited = 0; waited < 2000 && !atomic_load (&self->healthy); waited += 5)
        zclock_sleep (5);
    self->reader = zactor_new (s_reader, self);
    assert (self->reader);
    zsock_set_sndtimeo (zactor_sock (self->reader), 0);
    return self;
}

void
dsh_audit_destroy (dsh_audit_t **self_p, int timeout_ms)
{
    assert (self_p);
    if (*self_p) {
        dsh_audit_t *self = *self_p;
        //  $TERM must get through, behind any queries still queued
        if (self->reader)
            zsock_set_sndtimeo (zactor_sock (self->reader), -1);
        zactor_destroy (&self->reader);
        pthread_mutex_lock (&self->lock);
        self->stopping = true;
        self->stop_deadline_ms = zclock_mono () + timeout_ms;
        pthread_cond_signal (&self->wake);
        pthread_mutex_unlock (&self->lock);
        if (self->writer_started)
            pthread_join (self->writer, NULL);
        //  Anything pushed after the writer's last look
        while (self->head) {
            dsh_audit_trail_t *next = self->head->next;
            dsh_audit_trail_destroy (&self->head);
            self->head = next;
        }
        zlistx_destroy (&self->changes);
        pthread_cond_destroy (&self->wake);
        pthread_mutex_destroy (&self->lock);
        zstr_free (&self->store_location);
        zstr_free (&self->broker);
        zstr_free (&self->digest_tools);
        free (self);
        *self_p = NULL;
    }
}

bool
dsh_audit_records (dsh_audit_t *self)
{
    return self && self->config.policy != DSH_AUDIT_OFF;
}

bool
dsh_audit_admits (dsh_audit_t *self, char *text, size_t text_size)
{
    if (!self || self->config.policy != DSH_AUDIT_REQUIRED)
        return true;
    if (!atomic_load (&self->healthy)) {
        snprintf (text, text_size, "Error: the audit store cannot be written now, and the audit is required: "
                  "no call runs unrecorded (the broker's log says why; calls run again once it takes records)");
        return false;
    }
    uint64_t queued = atomic_load (&self->queue_bytes);
    if (queued >= self->config.queue_bytes) {
        snprintf (text, text_size, "Error: the audit store is behind (%" PRIu64 " bytes of records wait, the limit "
                  "is %zu), and the audit is required: try again shortly", queued, self->config.queue_bytes);
        return false;
    }
    return true;
}

void
dsh_audit_refused (dsh_audit_t *self)
{
    if (self)
        atomic_fetch_add (&self->refused, 1);
}

void
dsh_audit_submit (dsh_audit_t *self, dsh_audit_trail_t **trail_p, zmq_msg_t *body)
{
    assert (trail_p);
    dsh_audit_trail_t *trail = *trail_p;
    if (!self || !trail)
        return;
    *trail_p = NULL;
    trail->answered_ms = zclock_time ();
    trail->duration_us = (uint64_t) (zclock_usecs () - trail->received_us);
    if (body) {
        zmq_msg_init (&trail->result);
        zmq_msg_copy (&trail->result, body);
        trail->has_result = true;
        trail->bytes += zmq_msg_size (body);
    }
    if (self->config.policy == DSH_AUDIT_BEST_EFFORT
    &&  (!atomic_load (&self->healthy) || atomic_load (&self->queue_bytes) + trail->bytes > self->config.queue_bytes)) {
        atomic_fetch_add (&self->dropped, 1);
        dsh_audit_trail_destroy (&trail);
        if (zclock_mono () - self->last_drop_log_ms >= S_LOG_EVERY_MS) {
            dsh_log_warning ("dsh-broker: audit: records are dropped (%" PRIu64 " so far): the store is %s",
                             atomic_load (&self->dropped), atomic_load (&self->healthy)? "behind": "failing");
            self->last_drop_log_ms = zclock_mono ();
        }
        return;
    }
    //  A required audit takes every record of a call it admitted: the
    //  overshoot past the bound is at most the calls in flight
    atomic_fetch_add (&self->queue_bytes, trail->bytes);
    //  A writer at work takes what is queued when it is done: only one
    //  that sleeps is woken (one system call per batch, not per call)
    pthread_mutex_lock (&self->lock);
    if (self->tail)
        self->tail->next = trail;
    else
        self->head = trail;
    self->tail = trail;
    self->queued++;
    if (self->sleeping)
        pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
}

int
dsh_audit_query (dsh_audit_t *self, zmsg_t **envelope_p, zframe_t **body_p)
{
    assert (self);
    assert (envelope_p && *envelope_p && body_p && *body_p);
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, "QUERY");
    zmsg_append (msg, body_p);
    zframe_t *frame;
    while ((frame = zmsg_pop (*envelope_p)))
        zmsg_append (msg, &frame);
    zmsg_destroy (envelope_p);
    //  The pipe's send times out at once: a reader busy with a long verify
    //  and a pile of queries behind it must not stop the broker's loop
    int rc = zmsg_send (&msg, zactor_sock (self->reader));
    zmsg_destroy (&msg);
    return rc;
}

static void
s_state_push (dsh_audit_t *self, s_change_t *change)
{
    pthread_mutex_lock (&self->lock);
    zlistx_add_end (self->changes, change);
    pthread_cond_signal (&self->wake);
    pthread_mutex_unlock (&self->lock);
}

void
dsh_audit_pins_write (dsh_audit_t *self, zlistx_t **ops_p)
{
    assert (ops_p);
    dsh_pin_op_t *op;
    while (self && *ops_p && (op = (dsh_pin_op_t *) zlistx_detach (*ops_p, NULL))) {
        s_change_t *change = (s_change_t *) zmalloc (sizeof (s_change_t));
        assert (change);
        change->kind = S_STATE_PIN;
        change->pin = op;
        s_state_push (self, change);
    }
    zlistx_destroy (ops_p);
}

void
dsh_audit_grant_keep (dsh_audit_t *self, const char *id, const char *stage, const char *grant, int64_t expires_ms)
{
    if (!self || !id || !stage || !grant)
        return;
    s_change_t *change = (s_change_t *) zmalloc (sizeof (s_change_t));
    assert (change);
    change->kind = S_STATE_GRANT;
    change->agent = strdup (id);
    change->mode = strdup (stage);
    change->set_by = strdup (grant);
    change->set_ms = expires_ms;
    s_state_push (self, change);
}

void
dsh_audit_grant_revoke (dsh_audit_t *self, const char *id)
{
    if (!self || !id)
        return;
    s_change_t *change = (s_change_t *) zmalloc (sizeof (s_change_t));
    assert (change);
    change->kind = S_STATE_REVOKE;
    change->agent = strdup (id);
    change->set_ms = zclock_time ();
    s_state_push (self, change);
}

void
dsh_audit_mode_set (dsh_audit_t *self, const char *agent, const char *mode, const char *set_by)
{
    if (!self || !agent)
        return;
    s_change_t *change = (s_change_t *) zmalloc (sizeof (s_change_t));
    assert (change);
    change->agent = strdup (agent);
    change->mode = s_dup (mode);
    change->set_by = s_dup (set_by);
    change->set_ms = zclock_time ();
    s_state_push (self, change);
}

zsock_t *
dsh_audit_socket (dsh_audit_t *self)
{
    assert (self);
    return zactor_sock (self->reader);
}

void
dsh_audit_counts (dsh_audit_t *self, dsh_audit_counts_t *counts)
{
    assert (counts);
    memset (counts, 0, sizeof (*counts));
    if (!self)
        return;
    counts->records = atomic_load (&self->records);
    counts->dropped = atomic_load (&self->dropped);
    counts->refused = atomic_load (&self->refused);
    counts->queue_bytes = atomic_load (&self->queue_bytes);
    counts->batches = atomic_load (&self->batches);
    counts->write_us_total = atomic_load (&self->write_us_total);
    counts->write_us_max = atomic_load (&self->write_us_max);
    counts->healthy = atomic_load (&self->healthy);
    snprintf (counts->store_kind, sizeof (counts->store_kind), "%s", self->kind);
}
