/*  =========================================================================
    dsh_call - one call as a tool handler sees it, and the result it builds

    The result packs each content block as it is added, into one buffer,
    and counts them; encoding writes the array header and appends the
    buffer, so no block is packed twice. The buffer starts inside the
    result, so a small result (one short text, the common case) allocates
    no buffer at all; msgpack's own sbuffer would start at 8 KiB.
    =========================================================================
*/

#include "dsh_call.h"
#include "dsh_log.h"
#include "dsh_proto.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/eventfd.h>

struct _dsh_call_t {
    const void *body;           //  borrowed, until read (unread calls)
    size_t body_size;
    bool read;                  //  the body is decoded into doc and head
    bool decoded;               //  ... and read strictly: a decode to hand on
    dsh_doc_t *doc;
    dsh_call_head_t head;
    atomic_bool cancelled;
    pthread_mutex_t mutex;      //  guards cancel_fd
    int cancel_fd;              //  eventfd, made on first request, or -1
    dsh_call_hooks_t hooks;
    void *context;
};

#define S_INLINE_BLOCKS 256     //  bytes of blocks kept inside the result

struct _dsh_result_t {
    char *call_id;
    msgpack_packer pk;          //  packs into blocks
    char *blocks;               //  packed content blocks, back to back
    size_t blocks_size;
    size_t blocks_alloc;
    size_t block_count;
    zchunk_t *structured;       //  msgpack of structuredContent, or NULL
    bool is_error;
    char *error_code;
    zchunk_t *fields;           //  other top-level fields, packed key and value
    size_t field_count;
    zchunk_t *error_fields;     //  other fields of the error map, the same way
    size_t error_field_count;
    char inline_blocks [S_INLINE_BLOCKS];   //  blocks, while they fit
};

dsh_call_t *
dsh_call_new (const void *body, size_t size, char *error, size_t error_size)
{
    dsh_doc_t *doc = dsh_doc_new (body, size, error, error_size);
    if (!doc)
        return NULL;
    dsh_call_t *self = (dsh_call_t *) zmalloc (sizeof (dsh_call_t));
    assert (self);
    self->doc = doc;
    atomic_init (&self->cancelled, false);
    pthread_mutex_init (&self->mutex, NULL);
    self->cancel_fd = -1;
    self->read = true;
    if (dsh_doc_root (doc)->type != MSGPACK_OBJECT_MAP) {
        snprintf (error, error_size, "body is not a map");
        dsh_call_destroy (&self);
    }
    else
    if (dsh_proto_decode_call (doc, &self->head, error, error_size))
        dsh_call_destroy (&self);
    else
        self->decoded = true;
    return self;
}

dsh_call_t *
dsh_call_new_decoded (const void *body, size_t size, dsh_doc_t **doc_p, const dsh_call_head_t *head)
{
    assert (doc_p && *doc_p);
    assert (head);
    dsh_call_t *self = dsh_call_new_unread (body, size);
    self->doc = *doc_p;
    *doc_p = NULL;
    self->head = *head;
    self->read = true;
    self->decoded = true;
    self->body = NULL;
    return self;
}

int
dsh_call_take_decoded (dsh_call_t *self, dsh_doc_t **doc_p, dsh_call_head_t *head)
{
    assert (self);
    assert (doc_p && !*doc_p);
    assert (head);
    if (!self->decoded)
        return -1;
    *doc_p = self->doc;
    *head = self->head;
    self->doc = NULL;
    self->decoded = false;
    //  Read now, it would read as a call that did not decode
    memset (&self->head, 0, sizeof (self->head));
    self->head.call_id = "";
    self->head.name = "";
    return 0;
}

dsh_call_t *
dsh_call_new_unread (const void *body, size_t size)
{
    dsh_call_t *self = (dsh_call_t *) zmalloc (sizeof (dsh_call_t));
    assert (self);
    self->body = body;
    self->body_size = size;
    atomic_init (&self->cancelled, false);
    pthread_mutex_init (&self->mutex, NULL);
    self->cancel_fd = -1;
    return self;
}

//  The head, decoded the first time anything asks for it. The front
//  checked the body; one that is malformed now (a stage rewrote it badly)
//  reads as empty, and the broker refuses it at the bottom of the chain.
static dsh_call_head_t *
s_head (dsh_call_t *self)
{
    assert (self);
    if (!self->read) {
        self->read = true;
        char error [256] = "";
        self->doc = dsh_doc_new (self->body, self->body_size, error, sizeof (error));
        if (self->doc && dsh_doc_root (self->doc)->type != MSGPACK_OBJECT_MAP)
            snprintf (error, sizeof (error), "body is not a map");
        else
        if (self->doc)
            self->decoded = dsh_proto_decode_call (self->doc, &self->head, error, sizeof (error)) == 0;
        if (*error)
            dsh_log_warning ("bad CALL: %s", error);
        if (!self->head.call_id)
            self->head.call_id = "";
        if (!self->head.name)
            self->head.name = "";
        self->body = NULL;
    }
    return &self->head;
}

void
dsh_call_destroy (dsh_call_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_call_t *self = *self_p;
        dsh_doc_destroy (&self->doc);
        if (self->cancel_fd != -1)
            close (self->cancel_fd);
        pthread_mutex_destroy (&self->mutex);
        free (self);
        *self_p = NULL;
    }
}

const char *
dsh_call_id (dsh_call_t *self)
{
    return s_head (self)->call_id;
}

const char *
dsh_call_name (dsh_call_t *self)
{
    return s_head (self)->name;
}

const char *
dsh_call_agent (dsh_call_t *self)
{
    return s_head (self)->agent;
}

const msgpack_object *
dsh_call_arguments (dsh_call_t *self)
{
    return s_head (self)->arguments;
}

const msgpack_object *
dsh_call_meta (dsh_call_t *self)
{
    return s_head (self)->meta;
}

int
dsh_call_trace (dsh_call_t *self, dsh_trace_ctx_t *ctx)
{
    return dsh_call_trace_from (s_head (self)->meta, ctx);
}

int
dsh_call_trace_from (const msgpack_object *map, dsh_trace_ctx_t *ctx)
{
    assert (ctx);
    const msgpack_object *traceparent = dsh_map_get (map, "traceparent");
    dsh_trace_ctx_t parsed;
    if (!traceparent || traceparent->type != MSGPACK_OBJECT_STR
    ||  dsh_trace_parse (&parsed, traceparent->via.str.ptr, traceparent->via.str.size))
        return -1;
    //  A tracestate is kept as it came, or dropped whole: never parsed
    const msgpack_object *tracestate = dsh_map_get (map, "tracestate");
    if (tracestate && tracestate->type == MSGPACK_OBJECT_STR && tracestate->via.str.size <= DSH_TRACESTATE_MAX
    &&  !memchr (tracestate->via.str.ptr, 0, tracestate->via.str.size)) {
        memcpy (parsed.tracestate, tracestate->via.str.ptr, tracestate->via.str.size);
        parsed.tracestate [tracestate->via.str.size] = 0;
    }
    *ctx = parsed;
    return 0;
}

const msgpack_object *
dsh_call_arg (dsh_call_t *self, const char *key)
{
    return dsh_map_get (s_head (self)->arguments, key);
}

bool
dsh_call_has (dsh_call_t *self, const char *key)
{
    return dsh_call_arg (self, key) != NULL;
}

const char *
dsh_call_string (dsh_call_t *self, const char *key, const char *fallback)
{
    const msgpack_object *value = dsh_call_arg (self, key);
    const char *text = value && self->doc? dsh_doc_strdup (self->doc, value): NULL;
    return text? text: fallback;
}

double
dsh_call_number (dsh_call_t *self, const char *key, double fallback)
{
    const msgpack_object *value = dsh_call_arg (self, key);
    if (!value)
        return fallback;
    switch (value->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return (double) value->via.u64;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return (double) value->via.i64;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:          return value->via.f64;
        default:                              return fallback;
    }
}

int64_t
dsh_call_integer (dsh_call_t *self, const char *key, int64_t fallback)
{
    const msgpack_object *value = dsh_call_arg (self, key);
    if (!value)
        return fallback;
    switch (value->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            return value->via.u64 > INT64_MAX? fallback: (int64_t) value->via.u64;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            return value->via.i64;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: {
            double number = value->via.f64;
            if (number >= -9.2e18 && number <= 9.2e18 && number == (double) (int64_t) number)
                return (int64_t) number;
            return fallback;
        }
        default:
            return fallback;
    }
}

bool
dsh_call_bool (dsh_call_t *self, const char *key, bool fallback)
{
    const msgpack_object *value = dsh_call_arg (self, key);
    return value && value->type == MSGPACK_OBJECT_BOOLEAN? value->via.boolean: fallback;
}

bool
dsh_call_cancelled (dsh_call_t *self)
{
    assert (self);
    return atomic_load (&self->cancelled);
}

int
dsh_call_cancel_fd (dsh_call_t *self)
{
    assert (self);
    pthread_mutex_lock (&self->mutex);
    if (self->cancel_fd == -1) {
        self->cancel_fd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (self->cancel_fd != -1 && atomic_load (&self->cancelled))
            eventfd_write (self->cancel_fd, 1);
    }
    int fd = self->cancel_fd;
    pthread_mutex_unlock (&self->mutex);
    return fd;
}

void
dsh_call_cancel (dsh_call_t *self)
{
    assert (self);
    if (atomic_exchange (&self->cancelled, true))
        return;
    pthread_mutex_lock (&self->mutex);
    if (self->cancel_fd != -1)
        eventfd_write (self->cancel_fd, 1);
    pthread_mutex_unlock (&self->mutex);
}

void
dsh_call_set_hooks (dsh_call_t *self, const dsh_call_hooks_t *hooks, void *context)
{
    assert (self);
    assert (hooks);
    self->hooks = *hooks;
    self->context = context;
}

void *
dsh_call_context (dsh_call_t *self)
{
    assert (self);
    return self->context;
}

void
dsh_call_progress (dsh_call_t *self, double progress, double total, const char *message)
{
    assert (self);
    if (self->hooks.progress && !atomic_load (&self->cancelled))
        self->hooks.progress (self->context, progress, total, message);
}

void
dsh_call_finish (dsh_call_t *self)
{
    assert (self);
    if (self->hooks.finish)
        self->hooks.finish (self->context);
}

//  The blocks' packer writer: appends, moving to the heap when they outgrow
//  the inline buffer.
static int
s_blocks_write (void *data, const char *buf, size_t len)
{
    dsh_result_t *self = (dsh_result_t *) data;
    if (len > self->blocks_alloc - self->blocks_size) {
        size_t alloc = self->blocks_alloc * 2;
        while (alloc - self->blocks_size < len)
            alloc *= 2;
        bool is_inline = self->blocks == self->inline_blocks;
        char *blocks = (char *) realloc (is_inline? NULL: self->blocks, alloc);
        assert (blocks);
        if (is_inline)
            memcpy (blocks, self->inline_blocks, self->blocks_size);
        self->blocks = blocks;
        self->blocks_alloc = alloc;
    }
    if (len)
        memcpy (self->blocks + self->blocks_size, buf, len);
    self->blocks_size += len;
    return 0;
}

dsh_result_t *
dsh_result_new (const char *call_id)
{
    dsh_result_t *self = (dsh_result_t *) zmalloc (sizeof (dsh_result_t));
    assert (self);
    self->call_id = strdup (call_id? call_id: "");
    self->blocks = self->inline_blocks;
    self->blocks_alloc = sizeof (self->inline_blocks);
    msgpack_packer_init (&self->pk, self, s_blocks_write);
    return self;
}

void
dsh_result_destroy (dsh_result_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_result_t *self = *self_p;
        zstr_free (&self->call_id);
        if (self->blocks != self->inline_blocks)
            free (self->blocks);
        zchunk_destroy (&self->structured);
        zstr_free (&self->error_code);
        zchunk_destroy (&self->fields);
        zchunk_destroy (&self->error_fields);
        free (self);
        *self_p = NULL;
    }
}

static void
s_pack_kv (msgpack_packer *pk, const char *key, const char *value)
{
    dsh_pack_cstr (pk, key);
    dsh_pack_cstr (pk, value);
}

static void
s_pack_str_n (msgpack_packer *pk, const char *text, size_t size)
{
    msgpack_pack_str (pk, size);
    msgpack_pack_str_body (pk, text, size);
}

void
dsh_result_text_n (dsh_result_t *self, const char *text, size_t size)
{
    assert (self);
    msgpack_packer *pk = &self->pk;
    msgpack_pack_map (pk, 2);
    s_pack_kv (&self->pk, "type", "text");
    dsh_pack_cstr (pk, "text");
    s_pack_str_n (pk, text, size);
    self->block_count++;
}

void
dsh_result_text (dsh_result_t *self, const char *text)
{
    dsh_result_text_n (self, text, strlen (text));
}

void
dsh_result_textf (dsh_result_t *self, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    char *text = zsys_vprintf (format, args);
    va_end (args);
    dsh_result_text (self, text? text: "");
    zstr_free (&text);
}

//  Packs "key": base64 of data.
static void
s_pack_base64 (msgpack_packer *pk, const char *key, const void *data, size_t size)
{
    dsh_pack_cstr (pk, key);
    if (size == 0) {
        dsh_pack_cstr (pk, "");
        return;
    }
    zarmour_t *armour = zarmour_new ();
    zarmour_set_mode (armour, ZARMOUR_MODE_BASE64_STD);
    zarmour_set_line_breaks (armour, false);
    char *encoded = zarmour_encode (armour, (const byte *) data, size);
    dsh_pack_cstr (pk, encoded? encoded: "");
    zstr_free (&encoded);
    zarmour_destroy (&armour);
}

static void
s_media (dsh_result_t *self, const char *type, const char *mime_type, const void *data, size_t size)
{
    assert (self);
    assert (mime_type);
    msgpack_packer *pk = &self->pk;
    msgpack_pack_map (pk, 3);
    s_pack_kv (&self->pk, "type", type);
    s_pack_base64 (pk, "data", data, size);
    s_pack_kv (&self->pk, "mimeType", mime_type);
    self->block_count++;
}

void
dsh_result_image (dsh_result_t *self, const char *mime_type, const void *data, size_t size)
{
    s_media (self, "image", mime_type, data, size);
}

void
dsh_result_audio (dsh_result_t *self, const char *mime_type, const void *data, size_t size)
{
    s_media (self, "audio", mime_type, data, size);
}

void
dsh_result_resource_link (dsh_result_t *self, const char *uri, const char *name,
                          const char *mime_type, const char *description)
{
    assert (self);
    assert (uri && name);
    msgpack_packer *pk = &self->pk;
    msgpack_pack_map (pk, 3 + (mime_type != NULL) + (description != NULL));
    s_pack_kv (&self->pk, "type", "resource_link");
    s_pack_kv (&self->pk, "uri", uri);
    s_pack_kv (&self->pk, "name", name);
    if (mime_type)
        s_pack_kv (&self->pk, "mimeType", mime_type);
    if (description)
        s_pack_kv (&self->pk, "description", description);
    self->block_count++;
}

//  Packs {type:"resource", resource:{uri, mimeType?, ...}}, leaving the
//  last entry of the inner map for the caller.
static void
s_resource_head (dsh_result_t *self, const char *uri, const char *mime_type)
{
    msgpack_packer *pk = &self->pk;
    msgpack_pack_map (pk, 2);
    s_pack_kv (&self->pk, "type", "resource");
    dsh_pack_cstr (pk, "resource");
    msgpack_pack_map (pk, 2 + (mime_type != NULL));
    s_pack_kv (&self->pk, "uri", uri);
    if (mime_type)
        s_pack_kv (&self->pk, "mimeType", mime_type);
    self->block_count++;
}

void
dsh_result_resource_text (dsh_result_t *self, const char *uri, const char *mime_type, const char *text)
{
    assert (self);
    assert (uri && text);
    s_resource_head (self, uri, mime_type);
    s_pack_kv (&self->pk, "text", text);
}

void
dsh_result_resource_blob (dsh_result_t *self, const char *uri, const char *mime_type,
                          const void *data, size_t size)
{
    assert (self);
    assert (uri);
    s_resource_head (self, uri, mime_type);
    s_pack_base64 (&self->pk, "blob", data, size);
}

void
dsh_result_structured (dsh_result_t *self, const void *data, size_t size)
{
    assert (self);
    zchunk_destroy (&self->structured);
    self->structured = zchunk_new (data, size);
}

void
dsh_result_block (dsh_result_t *self, const void *data, size_t size)
{
    assert (self);
    assert (data);
    s_blocks_write (self, (const char *) data, size);
    self->block_count++;
}

//  Appends key and the packed value to *fields_p.
static void
s_field_add (zchunk_t **fields_p, size_t *count, const char *key, const void *data, size_t size)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    dsh_pack_cstr (&pk, key);
    if (!*fields_p)
        *fields_p = zchunk_new (NULL, sbuf.size + size);
    zchunk_extend (*fields_p, sbuf.data, sbuf.size);
    zchunk_extend (*fields_p, data, size);
    (*count)++;
    msgpack_sbuffer_destroy (&sbuf);
}

int
dsh_result_field (dsh_result_t *self, const char *key, const void *data, size_t size)
{
    assert (self);
    assert (key);
    assert (data);
    const char *own [] = { "callId", "content", "isError", "error", "structuredContent", NULL };
    for (size_t index = 0; own [index]; index++)
        if (streq (key, own [index]))
            return -1;
    s_field_add (&self->fields, &self->field_count, key, data, size);
    return 0;
}

void
dsh_result_fail (dsh_result_t *self, const char *code)
{
    assert (self);
    self->is_error = true;
    zstr_free (&self->error_code);
    self->error_code = strdup (code? code: DSH_E_TOOL_FAILED);
}

int
dsh_result_error_field (dsh_result_t *self, const char *key, const void *data, size_t size)
{
    assert (self);
    assert (key);
    assert (data);
    if (!self->error_code || streq (key, "name") || streq (key, "code"))
        return -1;
    s_field_add (&self->error_fields, &self->error_field_count, key, data, size);
    return 0;
}

void
dsh_result_error (dsh_result_t *self, const char *code, const char *format, ...)
{
    assert (self);
    va_list args;
    va_start (args, format);
    char *message = zsys_vprintf (format, args);
    va_end (args);
    //  An error result says one thing: what went wrong
    self->blocks_size = 0;
    self->block_count = 0;
    zchunk_destroy (&self->structured);
    zchunk_destroy (&self->fields);
    self->field_count = 0;
    zchunk_destroy (&self->error_fields);
    self->error_field_count = 0;
    dsh_result_textf (self, "Error: %s", message? message: "");
    zstr_free (&message);
    self->is_error = true;
    zstr_free (&self->error_code);
    self->error_code = strdup (code? code: DSH_E_TOOL_FAILED);
}

bool
dsh_result_is_error (dsh_result_t *self)
{
    assert (self);
    return self->is_error;
}

//  Packs the RESULT body through pk, whatever pk writes to.
static void
s_result_pack (dsh_result_t *self, msgpack_packer *pk)
{
    msgpack_pack_map (pk, 3 + (self->error_code != NULL) + (self->structured != NULL) + self->field_count);
    dsh_pack_cstr (pk, "callId");
    dsh_pack_cstr (pk, self->call_id);
    dsh_pack_cstr (pk, "content");
    msgpack_pack_array (pk, self->block_count);
    if (self->blocks_size)
        pk->callback (pk->data, self->blocks, self->blocks_size);
    dsh_pack_cstr (pk, "isError");
    if (self->is_error)
        msgpack_pack_true (pk);
    else
        msgpack_pack_false (pk);
    if (self->error_code) {
        dsh_pack_cstr (pk, "error");
        msgpack_pack_map (pk, 2 + self->error_field_count);
        dsh_pack_cstr (pk, "name");
        dsh_pack_cstr (pk, dsh_proto_error_name (self->error_code));
        dsh_pack_cstr (pk, "code");
        dsh_pack_cstr (pk, self->error_code);
        if (self->error_fields)
            pk->callback (pk->data, (const char *) zchunk_data (self->error_fields), zchunk_size (self->error_fields));
    }
    if (self->structured) {
        dsh_pack_cstr (pk, "structuredContent");
        pk->callback (pk->data, (const char *) zchunk_data (self->structured), zchunk_size (self->structured));
    }
    if (self->fields)
        pk->callback (pk->data, (const char *) zchunk_data (self->fields), zchunk_size (self->fields));
}

zframe_t *
dsh_result_encode (dsh_result_t *self)
{
    assert (self);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    s_result_pack (self, &packer.pk);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

//  Packer writers for dsh_result_encode_msg: one counts, one copies.
static int
s_count_bytes (void *data, const char *buf, size_t len)
{
    (void) buf;
    *(size_t *) data += len;
    return 0;
}

static int
s_copy_bytes (void *data, const char *buf, size_t len)
{
    byte **cursor = (byte **) data;
    if (len)
        memcpy (*cursor, buf, len);
    *cursor += len;
    return 0;
}

int
dsh_result_encode_msg (dsh_result_t *self, zmq_msg_t *msg)
{
    assert (self);
    assert (msg);
    //  Packing twice, once to measure and once into the message, is cheaper
    //  than growing a buffer and copying it into a frame
    size_t size = 0;
    msgpack_packer pk;
    msgpack_packer_init (&pk, &size, s_count_bytes);
    s_result_pack (self, &pk);
    if (zmq_msg_init_size (msg, size))
        return -1;
    byte *cursor = (byte *) zmq_msg_data (msg);
    msgpack_packer_init (&pk, &cursor, s_copy_bytes);
    s_result_pack (self, &pk);
    assert (cursor == (byte *) zmq_msg_data (msg) + size);
    return 0;
}
