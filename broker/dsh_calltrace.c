/*  =========================================================================
    dsh_calltrace - a call's trace context in the broker, and its call span

    The record keeps the call's context (dsh_call_trace_t), not a parsed
    dsh_trace_ctx_t: it is what every answer and audit record needs, and
    the tracestate, read once at FRONT, is the call span's to carry (a
    child takes it from its parent's span).
    =========================================================================
*/

#include "dsh_calltrace.h"
#include "dsh_doc.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

//  "traceparent" and "tracestate", as CALL meta and the RESULT name them
#define S_TRACEPARENT "traceparent"
#define S_TRACESTATE  "tracestate"

int
dsh_calltrace_start (char *error, size_t error_size)
{
    return dsh_trace_start ("dsh-broker", error, error_size);
}

void
dsh_calltrace_stop (int timeout_ms)
{
    dsh_trace_stop (timeout_ms);
}

bool
dsh_calltrace_on (void)
{
    return dsh_trace_enabled ();
}

//  The record's context as a dsh_trace_ctx_t (tracestate "").
static void
s_record_ctx (dsh_record_t *record, dsh_trace_ctx_t *ctx)
{
    memcpy (ctx->trace_id, record->trace.trace_id, sizeof (ctx->trace_id));
    memcpy (ctx->span_id, record->trace.span_id, sizeof (ctx->span_id));
    ctx->flags = record->trace.flags;
    ctx->tracestate [0] = 0;
}

static void
s_record_set (dsh_record_t *record, const dsh_trace_ctx_t *ctx)
{
    memcpy (record->trace.trace_id, ctx->trace_id, sizeof (record->trace.trace_id));
    memcpy (record->trace.span_id, ctx->span_id, sizeof (record->trace.span_id));
    record->trace.flags = ctx->flags;
    record->trace.known = true;
}

//  The caller's context from meta, if it is valid: 0, else -1.
static int
s_read_context (const msgpack_object *meta, dsh_trace_ctx_t *ctx)
{
    const msgpack_object *traceparent = dsh_map_get (meta, S_TRACEPARENT);
    if (!traceparent || traceparent->type != MSGPACK_OBJECT_STR
    ||  dsh_trace_parse (ctx, traceparent->via.str.ptr, traceparent->via.str.size))
        return -1;
    //  Kept as given, never parsed; one too long, or not a str, is dropped
    const msgpack_object *tracestate = dsh_map_get (meta, S_TRACESTATE);
    if (tracestate && tracestate->type == MSGPACK_OBJECT_STR && tracestate->via.str.size <= DSH_TRACESTATE_MAX
    &&  !memchr (tracestate->via.str.ptr, 0, tracestate->via.str.size)) {
        memcpy (ctx->tracestate, tracestate->via.str.ptr, tracestate->via.str.size);
        ctx->tracestate [tracestate->via.str.size] = 0;
    }
    return 0;
}

bool
dsh_calltrace_open (dsh_record_t *record, const msgpack_object *meta, const char *agent)
{
    assert (record);
    dsh_trace_ctx_t given;
    bool valid = meta && s_read_context (meta, &given) == 0;
    if (!dsh_trace_enabled ()) {
        //  Off: the caller's context goes on as it came; only the audit
        //  learns its trace id
        if (valid)
            s_record_set (record, &given);
        return false;
    }
    record->trace.stamps = true;
    record->trace.restarted = !valid;
    dsh_trace_ctx_t root;
    if (!valid)
        dsh_trace_new_root (&root);
    bool sample = dsh_trace_should_sample (valid? &given: NULL, valid? given.trace_id: root.trace_id);
    if (sample) {
        char name [DSH_NAME_MAX + 16];
        snprintf (name, sizeof (name), "dsh.call %s", record->tool);
        //  A sampler that is not parent-based may record what the caller
        //  did not sample: the span starts under a sampled copy
        dsh_trace_ctx_t recorded;
        if (valid) {
            recorded = given;
            recorded.flags |= 1;
        }
        //  A new root keeps the trace id the sampler decided on: a second
        //  draw would be sampled again (1 % of 1 %) and not be the hops' id
        dsh_span_t *span = valid? dsh_span_start (name, DSH_SPAN_SERVER, &recorded, 0)
                                : dsh_span_start_root (name, DSH_SPAN_SERVER, root.trace_id, 0);
        if (span) {
            dsh_span_set_str (span, "gen_ai.tool.name", record->tool);
            dsh_span_set_str (span, "gen_ai.tool.call.id", record->call_id);
            if (agent)
                dsh_span_set_str (span, "dsh.agent", agent);
            dsh_trace_ctx_t own;
            dsh_span_context (span, &own);
            s_record_set (record, &own);
            record->trace.call = span;
            return false;
        }
    }
    if (valid) {
        //  Not recorded: the caller's context goes on as it came
        s_record_set (record, &given);
        return false;
    }
    //  A trace the broker started and does not record: the hops still get
    //  it, not sampled, so that they do not start traces of their own
    s_record_set (record, &root);
    return true;
}

void
dsh_calltrace_id_hex (dsh_record_t *record, char *text)
{
    assert (record);
    if (record->trace.known)
        dsh_trace_id_hex (record->trace.trace_id, sizeof (record->trace.trace_id), text);
    else
        *text = 0;
}

//  The traceparent to write for span (NULL: the record's context).
static void
s_traceparent (dsh_record_t *record, dsh_span_t *span, char *traceparent)
{
    dsh_trace_ctx_t ctx;
    if (!span || dsh_span_context (span, &ctx))
        s_record_ctx (record, &ctx);
    dsh_trace_format (&ctx, traceparent);
}

//  A new CALL body with traceparent spliced into meta (and, for a trace
//  the broker restarted, no tracestate), or NULL.
static zframe_t *
s_splice (dsh_record_t *record, const void *data, size_t size, const char *traceparent, size_t max_bytes)
{
    byte value [2 + DSH_TRACEPARENT_SIZE];
    value [0] = 0xd9;           //  str8: 55 bytes do not fit a fixstr
    value [1] = DSH_TRACEPARENT_SIZE;
    memcpy (value + 2, traceparent, DSH_TRACEPARENT_SIZE);
    dsh_meta_stamp_t stamps [2] = {
        { S_TRACEPARENT, value, sizeof (value) },
        { S_TRACESTATE, NULL, 0 }
    };
    dsh_call_changes_t changes = { .stamps = stamps, .stamp_count = record->trace.restarted? 2: 1 };
    char error [256];
    return dsh_proto_splice_call (data, size, &changes, max_bytes, error, sizeof (error));
}

int
dsh_calltrace_stamp_frame (dsh_record_t *record, dsh_span_t *span, zframe_t **body_p)
{
    assert (record);
    assert (body_p && *body_p);
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    s_traceparent (record, span, traceparent);
    zframe_t *body = *body_p;
    //  The bytes the broker wrote last are 128 random bits of trace id and
    //  64 of span id: where they still stand, they are its stamp
    byte *found = *record->trace.stamped?
        (byte *) memmem (zframe_data (body), zframe_size (body), record->trace.stamped, DSH_TRACEPARENT_SIZE): NULL;
    if (found && found - zframe_data (body) >= 2 && found [-2] == 0xd9 && found [-1] == DSH_TRACEPARENT_SIZE) {
        memcpy (found, traceparent, DSH_TRACEPARENT_SIZE);
        memcpy (record->trace.stamped, traceparent, sizeof (traceparent));
        return 0;
    }
    zframe_t *stamped = s_splice (record, zframe_data (body), zframe_size (body), traceparent, SIZE_MAX / 2);
    if (!stamped)
        return -1;
    zframe_destroy (body_p);
    *body_p = stamped;
    memcpy (record->trace.stamped, traceparent, sizeof (traceparent));
    return 0;
}

int
dsh_calltrace_stamp_msg (dsh_record_t *record, dsh_span_t *span, zmq_msg_t *body, size_t max_bytes)
{
    assert (record);
    assert (body);
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    s_traceparent (record, span, traceparent);
    zframe_t *stamped = s_splice (record, zmq_msg_data (body), zmq_msg_size (body), traceparent, max_bytes);
    if (!stamped)
        return -1;
    zmq_msg_close (body);
    dsh_sock_part_frame (body, &stamped);
    memcpy (record->trace.stamped, traceparent, sizeof (traceparent));
    return 0;
}

//  The error code of a result (root) that is an error, into code; "" if
//  it is not one.
static void
s_result_error (const msgpack_object *root, char *code, size_t size)
{
    *code = 0;
    const msgpack_object *is_error = dsh_map_get (root, "isError");
    if (!is_error || is_error->type != MSGPACK_OBJECT_BOOLEAN || !is_error->via.boolean)
        return;
    const msgpack_object *value = dsh_map_get (dsh_map_get (root, "error"), "code");
    if (value && value->type == MSGPACK_OBJECT_STR && value->via.str.size > 0 && value->via.str.size < size) {
        memcpy (code, value->via.str.ptr, value->via.str.size);
        code [value->via.str.size] = 0;
    }
    else
        snprintf (code, size, "TOOL_ERROR");
}

//  The first text of a result's content, for an error's status message.
static void
s_result_text (const msgpack_object *root, char *text, size_t size)
{
    *text = 0;
    const msgpack_object *content = dsh_map_get (root, "content");
    const msgpack_object *value = content && content->type == MSGPACK_OBJECT_ARRAY && content->via.array.size
                                ? dsh_map_get (&content->via.array.ptr [0], "text"): NULL;
    if (value && value->type == MSGPACK_OBJECT_STR)
        snprintf (text, size, "%.*s", (int) value->via.str.size, value->via.str.ptr);
}

void
dsh_calltrace_dispatch_result (dsh_record_t *record, const msgpack_object *root)
{
    assert (record);
    if (!record->trace.dispatch)
        return;
    char code [32], text [256];
    s_result_error (root, code, sizeof (code));
    if (*code) {
        s_result_text (root, text, sizeof (text));
        dsh_span_set_error (record->trace.dispatch, code, text);
    }
}

void
dsh_calltrace_dispatch_end (dsh_record_t *record)
{
    assert (record);
    dsh_span_end (&record->trace.dispatch, 0);
}

//  True if key (size bytes of msgpack) is the str "traceparent", in any
//  of the forms a str may take: a component need not pack it as a fixstr.
static bool
s_is_traceparent_key (const byte *key, size_t size)
{
    size_t header = size == 12? 1: size == 13? 2: size == 14? 3: size == 16? 5: 0;
    bool form = (header == 1 && key [0] == 0xab)
             || (header == 2 && key [0] == 0xd9 && key [1] == 11)
             || (header == 3 && key [0] == 0xda && key [1] == 0 && key [2] == 11)
             || (header == 5 && key [0] == 0xdb && key [1] == 0 && key [2] == 0 && key [3] == 0 && key [4] == 11);
    return form && memcmp (key + header, S_TRACEPARENT, 11) == 0;
}

//  A result body (data: a map) with its top-level traceparent set: the
//  entries keep their bytes and order, one named traceparent is dropped,
//  and the new one ends the map. NULL if data is not a map, or (when one
//  has to be found and dropped) its entries are not whole.
static zframe_t *
s_result_stamped (const byte *data, size_t size, const char *traceparent)
{
    uint32_t count;
    size_t header = dsh_msgpack_map_header (data, size, &count);
    if (!header)
        return NULL;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    if (!memmem (data, size, S_TRACEPARENT, 11)) {
        //  No key of that name anywhere (the usual case): the entries go
        //  as they are, after a header one larger
        size_t rest = size - header;
        msgpack_pack_map (&packer.pk, count + 1);
        dsh_packer_raw (&packer, data + header, rest);
        dsh_pack_cstr (&packer.pk, S_TRACEPARENT);
        dsh_pack_cstr (&packer.pk, traceparent);
        zframe_t *frame = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        return frame;
    }
    //  The entries first, to count them: one old traceparent is left out
    msgpack_sbuffer entries;
    msgpack_sbuffer_init (&entries);
    size_t offset = header;
    uint32_t kept = 0;
    bool whole = true;
    for (uint32_t index = 0; index < count && whole; index++) {
        size_t key = dsh_msgpack_skip (data + offset, size - offset);
        size_t value = key? dsh_msgpack_skip (data + offset + key, size - offset - key): 0;
        if (!value) {
            whole = false;
            break;
        }
        //  Every one of that name goes: the result must not carry the key
        //  twice, which the caller's strict decode would refuse
        bool old = s_is_traceparent_key (data + offset, key);
        if (!old) {
            msgpack_sbuffer_write (&entries, (const char *) data + offset, key + value);
            kept++;
        }
        offset += key + value;
    }
    zframe_t *frame = NULL;
    if (whole && offset == size) {
        msgpack_pack_map (&packer.pk, kept + 1);
        dsh_packer_raw (&packer, entries.data, entries.size);
        dsh_pack_cstr (&packer.pk, S_TRACEPARENT);
        dsh_pack_cstr (&packer.pk, traceparent);
        frame = dsh_packer_frame (&packer);
    }
    msgpack_sbuffer_destroy (&entries);
    dsh_packer_release (&packer);
    return frame;
}

void
dsh_calltrace_answer (dsh_record_t *record, zmq_msg_t *body)
{
    assert (record);
    assert (body);
    if (!record->trace.stamps || !record->trace.known)
        return;
    //  Its spans say how it ended: read off the answer only for them
    char error [64];
    dsh_doc_t *doc = record->trace.call || record->trace.dispatch?
        dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error)): NULL;
    if (doc) {
        const msgpack_object *root = dsh_doc_root (doc);
        char code [32];
        s_result_error (root, code, sizeof (code));
        if (*code) {
            char text [256];
            s_result_text (root, text, sizeof (text));
            dsh_span_set_error (record->trace.dispatch, code, text);
            dsh_span_set_error (record->trace.call, code, text);
        }
        dsh_doc_destroy (&doc);
    }
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    s_traceparent (record, record->trace.call, traceparent);
    zframe_t *stamped = s_result_stamped (zmq_msg_data (body), zmq_msg_size (body), traceparent);
    if (stamped) {
        zmq_msg_close (body);
        dsh_sock_part_frame (body, &stamped);
    }
}

void
dsh_calltrace_close (dsh_record_t *record)
{
    assert (record);
    dsh_span_end (&record->trace.dispatch, 0);
    dsh_span_end (&record->trace.call, 0);
}

//  ---------------------------------------------------------------------
//  Self test: what needs no tracer (tracing is off in the unit tests)

void
dsh_calltrace_test (bool verbose)
{
    (void) verbose;
    printf (" * dsh_calltrace: ");
    const char *given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    //  A result gets one traceparent, at the end, its entries kept
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 3);
    dsh_packer_kv_str (&packer, "callId", "c1");
    dsh_packer_kv_str (&packer, S_TRACEPARENT, "old");
    dsh_pack_cstr (&packer.pk, "isError");
    msgpack_pack_false (&packer.pk);
    zframe_t *result = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zframe_t *stamped = s_result_stamped (zframe_data (result), zframe_size (result), given);
    assert (stamped);
    char error [64];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (stamped), zframe_size (stamped), error, sizeof (error));
    assert (doc);
    const msgpack_object *root = dsh_doc_root (doc);
    assert (root->via.map.size == 3);
    assert (dsh_str_eq (dsh_map_get (root, "callId"), "c1"));
    assert (dsh_str_eq (dsh_map_get (root, S_TRACEPARENT), given));
    assert (dsh_str_eq (&root->via.map.ptr [2].key, S_TRACEPARENT));
    dsh_doc_destroy (&doc);
    zframe_destroy (&stamped);
    //  A truncated result is left alone
    assert (!s_result_stamped (zframe_data (result), zframe_size (result) - 1, given));
    zframe_destroy (&result);
    //  A traceparent key packed as a str8 is replaced too, not repeated
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 2);
    dsh_packer_kv_str (&packer, "callId", "c1");
    dsh_packer_raw (&packer, "\xd9\x0b" S_TRACEPARENT "\xa3old", 17);
    result = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    stamped = s_result_stamped (zframe_data (result), zframe_size (result), given);
    assert (stamped);
    doc = dsh_doc_new (zframe_data (stamped), zframe_size (stamped), error, sizeof (error));
    assert (doc);
    assert (dsh_doc_root (doc)->via.map.size == 2);
    assert (dsh_str_eq (dsh_map_get (dsh_doc_root (doc), S_TRACEPARENT), given));
    dsh_doc_destroy (&doc);
    zframe_destroy (&stamped);
    zframe_destroy (&result);
    //  Without one, fifteen entries become sixteen: a map16 header
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 15);
    for (int index = 0; index < 15; index++) {
        char key [8];
        snprintf (key, sizeof (key), "k%d", index);
        dsh_packer_kv_str (&packer, key, "v");
    }
    result = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    stamped = s_result_stamped (zframe_data (result), zframe_size (result), given);
    assert (stamped && zframe_data (stamped) [0] == 0xde);
    doc = dsh_doc_new (zframe_data (stamped), zframe_size (stamped), error, sizeof (error));
    assert (doc && dsh_doc_root (doc)->via.map.size == 16);
    assert (dsh_str_eq (dsh_map_get (dsh_doc_root (doc), "k14"), "v"));
    assert (dsh_str_eq (dsh_map_get (dsh_doc_root (doc), S_TRACEPARENT), given));
    dsh_doc_destroy (&doc);
    zframe_destroy (&stamped);
    zframe_destroy (&result);

    //  Tracing off: a valid context is the call's, nothing is stamped
    zframe_t *call = dsh_proto_encode_call ("c1", "echo", NULL, 0, NULL, NULL, 0, 0);
    dsh_record_t record;
    memset (&record, 0, sizeof (record));
    snprintf (record.tool, sizeof (record.tool), "echo");
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, S_TRACEPARENT, given);
    zframe_t *meta_frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    doc = dsh_doc_new (zframe_data (meta_frame), zframe_size (meta_frame), error, sizeof (error));
    assert (!dsh_calltrace_open (&record, dsh_doc_root (doc), NULL));
    assert (record.trace.known && !record.trace.stamps && !record.trace.call);
    char hex [33];
    dsh_calltrace_id_hex (&record, hex);
    assert (streq (hex, "4bf92f3577b34da6a3ce929d0e0e4736"));
    dsh_doc_destroy (&doc);
    zframe_destroy (&meta_frame);

    //  A stamp splices, then overwrites in place; an invalid one is not read
    zframe_t *body = zframe_dup (call);
    memset (&record.trace, 0, sizeof (record.trace));
    record.trace.known = true;
    memset (record.trace.trace_id, 0x11, 16);
    memset (record.trace.span_id, 0x22, 8);
    record.trace.flags = 1;
    assert (dsh_calltrace_stamp_frame (&record, NULL, &body) == 0);
    size_t size = zframe_size (body);
    memset (record.trace.span_id, 0x33, 8);
    byte *data_before = zframe_data (body);
    assert (dsh_calltrace_stamp_frame (&record, NULL, &body) == 0);
    assert (zframe_data (body) == data_before && zframe_size (body) == size);
    doc = dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error));
    dsh_call_head_t head;
    assert (dsh_proto_decode_call (doc, &head, error, sizeof (error)) == 0);
    assert (dsh_str_eq (dsh_map_get (head.meta, S_TRACEPARENT),
                        "00-11111111111111111111111111111111-3333333333333333-01"));
    memset (&record.trace, 0, sizeof (record.trace));
    assert (!dsh_calltrace_open (&record, head.meta, NULL) && record.trace.known);
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);

    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, S_TRACEPARENT, "00-00000000000000000000000000000000-00f067aa0ba902b7-01");
    meta_frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    doc = dsh_doc_new (zframe_data (meta_frame), zframe_size (meta_frame), error, sizeof (error));
    memset (&record.trace, 0, sizeof (record.trace));
    assert (!dsh_calltrace_open (&record, dsh_doc_root (doc), NULL));
    assert (!record.trace.known);
    dsh_calltrace_id_hex (&record, hex);
    assert (*hex == 0);
    dsh_doc_destroy (&doc);
    zframe_destroy (&meta_frame);
    zframe_destroy (&call);
    printf ("OK\n");
}
