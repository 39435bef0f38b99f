/*  =========================================================================
    dsh_proto - the dsh/1 wire protocol: frames, commands, bodies, limits

    See dsh_proto.h and PROTOCOL.md. Checks here are the protocol's rules;
    the registry's policies (who owns a name, what a call may reach) live in
    the broker.
    =========================================================================
*/

#include "dsh_proto.h"

#include <stdarg.h>

//  Writes a formatted reason into a caller's error buffer and returns -1.
static int
s_fail (char *error, size_t error_size, const char *format, ...)
{
    if (error && error_size) {
        va_list args;
        va_start (args, format);
        vsnprintf (error, error_size, format, args);
        va_end (args);
    }
    return -1;
}

//  Writes the smallest msgpack map header for count into header [5] and
//  returns its size.
static size_t
s_map_header (uint64_t count, uint8_t *header)
{
    assert (count <= UINT32_MAX);
    if (count < 16) {
        header [0] = (uint8_t) (0x80 | count);
        return 1;
    }
    if (count <= UINT16_MAX) {
        header [0] = 0xde;
        header [1] = (uint8_t) (count >> 8);
        header [2] = (uint8_t) count;
        return 3;
    }
    header [0] = 0xdf;
    for (int index = 0; index < 4; index++)
        header [1 + index] = (uint8_t) (count >> (24 - 8 * index));
    return 5;
}

void
dsh_packer_init (dsh_packer_t *self)
{
    assert (self);
    msgpack_sbuffer_init (&self->sbuf);
    msgpack_packer_init (&self->pk, &self->sbuf, msgpack_sbuffer_write);
    self->open_count = 0;
}

//  The map is written with a map32 header of 0 entries: wide enough for any
//  count, and malformed as it stands should map_end never come.
void
dsh_packer_map_begin (dsh_packer_t *self)
{
    assert (self);
    assert (self->open_count < DSH_PACKER_MAX_OPEN);
    self->open [self->open_count++] = self->sbuf.size;
    msgpack_sbuffer_write (&self->sbuf, "\xdf\x00\x00\x00\x00", 5);
}

//  Counting the written objects, rather than asking callers to count keys,
//  means any way of writing an entry counts, and none can be forgotten.
int
dsh_packer_map_end (dsh_packer_t *self)
{
    assert (self);
    assert (self->open_count > 0);
    size_t header_at = self->open [--self->open_count];
    size_t entries_at = header_at + 5;
    const char *data = self->sbuf.data;
    size_t objects = 0;
    for (size_t offset = entries_at; offset < self->sbuf.size; objects++) {
        size_t object_size = dsh_msgpack_skip (data + offset, self->sbuf.size - offset);
        if (object_size == 0)
            return -1;
        offset += object_size;
    }
    if (objects % 2 || objects / 2 > UINT32_MAX)
        return -1;
    uint8_t header [5];
    size_t header_size = s_map_header (objects / 2, header);
    if (header_size < 5) {
        memmove (self->sbuf.data + header_at + header_size, self->sbuf.data + entries_at,
                 self->sbuf.size - entries_at);
        self->sbuf.size -= 5 - header_size;
    }
    memcpy (self->sbuf.data + header_at, header, header_size);
    return 0;
}

void
dsh_packer_raw (dsh_packer_t *self, const void *data, size_t size)
{
    assert (self);
    msgpack_sbuffer_write (&self->sbuf, (const char *) data, size);
}

void
dsh_packer_kv_str (dsh_packer_t *self, const char *key, const char *value)
{
    dsh_pack_cstr (&self->pk, key);
    dsh_pack_cstr (&self->pk, value);
}

zframe_t *
dsh_packer_frame (dsh_packer_t *self)
{
    assert (self);
    assert (self->open_count == 0);
    zframe_t *frame = zframe_new (self->sbuf.data, self->sbuf.size);
    self->sbuf.size = 0;
    return frame;
}

void
dsh_packer_release (dsh_packer_t *self)
{
    assert (self);
    msgpack_sbuffer_destroy (&self->sbuf);
}

bool
dsh_proto_valid_name (const char *text, size_t size)
{
    if (!text || size == 0 || size > DSH_NAME_MAX)
        return false;
    for (size_t index = 0; index < size; index++) {
        char c = text [index];
        if (!(isalnum ((unsigned char) c) || c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

bool
dsh_proto_valid_id (const char *text, size_t size)
{
    if (!text || size == 0 || size > DSH_ID_MAX)
        return false;
    for (size_t index = 0; index < size; index++) {
        unsigned char c = (unsigned char) text [index];
        if (c <= ' ' || c >= 127)
            return false;
    }
    return true;
}

int
dsh_proto_split (zmsg_t *msg, zmsg_t **envelope_p,
                 char *command, size_t command_size,
                 char *error, size_t error_size)
{
    assert (msg);
    assert (envelope_p);
    assert (command && command_size > DSH_COMMAND_MAX);
    *envelope_p = NULL;
    command [0] = 0;

    //  Find the empty delimiter first; without it there is no envelope to
    //  reply along, and nothing in the message is trusted.
    size_t envelope_frames = 0;
    bool delimited = false;
    for (zframe_t *frame = zmsg_first (msg); frame; frame = zmsg_next (msg)) {
        if (zframe_size (frame) == 0) {
            delimited = true;
            break;
        }
        envelope_frames++;
    }
    if (!delimited)
        return s_fail (error, error_size, "no empty delimiter frame");

    zmsg_t *envelope = zmsg_new ();
    for (size_t index = 0; index < envelope_frames; index++) {
        zframe_t *frame = zmsg_pop (msg);
        zmsg_append (envelope, &frame);
    }
    *envelope_p = envelope;
    zframe_t *delimiter = zmsg_pop (msg);
    zframe_destroy (&delimiter);

    zframe_t *protocol = zmsg_pop (msg);
    bool protocol_ok = protocol && zframe_streq (protocol, DSH_PROTOCOL);
    zframe_destroy (&protocol);
    if (!protocol_ok)
        return s_fail (error, error_size, "protocol frame is not \"%s\"", DSH_PROTOCOL);

    zframe_t *verb = zmsg_pop (msg);
    if (!verb || zframe_size (verb) == 0 || zframe_size (verb) > DSH_COMMAND_MAX) {
        zframe_destroy (&verb);
        return s_fail (error, error_size, "missing or oversized command frame");
    }
    memcpy (command, zframe_data (verb), zframe_size (verb));
    command [zframe_size (verb)] = 0;
    zframe_destroy (&verb);
    for (char *c = command; *c; c++)
        if (!isupper ((unsigned char) *c))
            return s_fail (error, error_size, "command frame is not an upper-case word");
    return 0;
}

zmsg_t *
dsh_proto_message (zmsg_t **envelope_p, const char *command)
{
    zmsg_t *msg = NULL;
    if (envelope_p && *envelope_p) {
        msg = *envelope_p;
        *envelope_p = NULL;
    }
    else
        msg = zmsg_new ();
    zmsg_addmem (msg, NULL, 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    return msg;
}

void
dsh_proto_hex (const void *data, size_t size, char *text)
{
    static const char digits [] = "0123456789abcdef";
    const byte *bytes = (const byte *) data;
    for (size_t index = 0; index < size; index++) {
        *text++ = digits [bytes [index] >> 4];
        *text++ = digits [bytes [index] & 15];
    }
    *text = 0;
}

static size_t
s_token_hash (const void *key)
{
    uint64_t token;
    memcpy (&token, key, sizeof (token));
    //  Fibonacci hashing spreads sequential and random tokens alike
    return (size_t) ((token * 0x9E3779B97F4A7C15ull) >> 17);
}

static int
s_token_compare (const void *key1, const void *key2)
{
    uint64_t token1, token2;
    memcpy (&token1, key1, sizeof (token1));
    memcpy (&token2, key2, sizeof (token2));
    return token1 < token2? -1: token1 > token2? 1: 0;
}

void
dsh_proto_token_keys (zhashx_t *hash)
{
    assert (hash);
    zhashx_set_key_hasher (hash, s_token_hash);
    zhashx_set_key_comparator (hash, s_token_compare);
    zhashx_set_key_duplicator (hash, NULL);
    zhashx_set_key_destructor (hash, NULL);
}

void
dsh_be64_put (uint64_t value, byte *bytes)
{
    for (int index = 0; index < 8; index++)
        bytes [index] = (byte) (value >> (56 - 8 * index));
}

uint64_t
dsh_be64_get (const byte *bytes)
{
    uint64_t value = 0;
    for (int index = 0; index < 8; index++)
        value = (value << 8) | bytes [index];
    return value;
}

void
dsh_proto_token_hex (uint64_t token, char *text)
{
    byte bytes [8];
    dsh_be64_put (token, bytes);
    dsh_proto_hex (bytes, 8, text);
}

char *
dsh_proto_caller_key (zmsg_t *envelope, const char *call_id)
{
    assert (call_id);
    size_t size = strlen (call_id) + 2;
    for (zframe_t *frame = envelope? zmsg_first (envelope): NULL; frame; frame = zmsg_next (envelope))
        size += 2 * zframe_size (frame) + 1;
    char *key = (char *) zmalloc (size);
    assert (key);
    char *cursor = key;
    for (zframe_t *frame = envelope? zmsg_first (envelope): NULL; frame; frame = zmsg_next (envelope)) {
        dsh_proto_hex (zframe_data (frame), zframe_size (frame), cursor);
        cursor += 2 * zframe_size (frame);
        *cursor++ = '.';
    }
    *cursor++ = '/';
    memcpy (cursor, call_id, strlen (call_id) + 1);
    return key;
}

zmsg_t *
dsh_proto_pub_message (const char *command, zframe_t **body_p)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    zmsg_append (msg, body_p);
    return msg;
}

dsh_doc_t *
dsh_proto_decode_body (zframe_t *frame, char *error, size_t error_size)
{
    if (!frame) {
        s_fail (error, error_size, "missing body frame");
        return NULL;
    }
    dsh_doc_t *doc = dsh_doc_new (zframe_data (frame), zframe_size (frame), error, error_size);
    if (doc && dsh_doc_root (doc)->type != MSGPACK_OBJECT_MAP) {
        dsh_doc_destroy (&doc);
        s_fail (error, error_size, "body is not a map");
    }
    return doc;
}

//  Reads an optional str field into a NUL-terminated copy. Returns 0 (also
//  when absent, leaving *value NULL) or -1 when present with another type,
//  too long, or empty when that is not allowed.
static int
s_get_str (dsh_doc_t *doc, const char *key, size_t max_size, const char **value,
           char *error, size_t error_size)
{
    const msgpack_object *obj = dsh_map_get (dsh_doc_root (doc), key);
    *value = NULL;
    if (!obj)
        return 0;
    if (obj->type != MSGPACK_OBJECT_STR)
        return s_fail (error, error_size, "field \"%s\" must be a string", key);
    if (obj->via.str.size == 0 || obj->via.str.size > max_size)
        return s_fail (error, error_size, "field \"%s\" must be 1 to %zu bytes", key, max_size);
    *value = dsh_doc_strdup (doc, obj);
    if (!*value)
        return s_fail (error, error_size, "field \"%s\" holds a NUL byte", key);
    return 0;
}

static int
s_get_uint (dsh_doc_t *doc, const char *key, uint64_t *value, char *error, size_t error_size)
{
    const msgpack_object *obj = dsh_map_get (dsh_doc_root (doc), key);
    *value = 0;
    if (!obj)
        return 0;
    if (obj->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return s_fail (error, error_size, "field \"%s\" must be a non-negative integer", key);
    *value = obj->via.u64;
    return 0;
}

//  The maps that hold a call's decisions (the head and meta) have only str
//  keys: a stage looks fields up by name. dsh_doc has refused any repeated
//  key already. where names the map in the reason.
static int
s_check_str_keys (const msgpack_object *map, const char *where, char *error, size_t error_size)
{
    if (map->type != MSGPACK_OBJECT_MAP)
        return s_fail (error, error_size, "%s is not a map", where);
    for (uint32_t index = 0; index < map->via.map.size; index++)
        if (map->via.map.ptr [index].key.type != MSGPACK_OBJECT_STR)
            return s_fail (error, error_size, "a key of %s is not a string", where);
    return 0;
}

int
dsh_proto_decode_call (dsh_doc_t *doc, dsh_call_head_t *head, char *error, size_t error_size)
{
    assert (doc);
    assert (head);
    memset (head, 0, sizeof (*head));
    if (s_check_str_keys (dsh_doc_root (doc), "the CALL body", error, error_size)) {
        //  The refusal can still be answered by id
        s_get_str (doc, "callId", DSH_CALL_ID_MAX, &head->call_id, NULL, 0);
        return -1;
    }
    if (s_get_str (doc, "callId", DSH_CALL_ID_MAX, &head->call_id, error, error_size))
        return -1;
    if (!head->call_id)
        return s_fail (error, error_size, "field \"callId\" is required");
    if (s_get_str (doc, "name", DSH_NAME_MAX, &head->name, error, error_size))
        return -1;
    if (!head->name)
        return s_fail (error, error_size, "field \"name\" is required");
    if (s_get_str (doc, "agent", DSH_ID_MAX, &head->agent, error, error_size))
        return -1;
    if (s_get_uint (doc, "timeoutMs", &head->timeout_ms, error, error_size))
        return -1;
    head->arguments = dsh_map_get (dsh_doc_root (doc), "arguments");
    head->meta = dsh_map_get (dsh_doc_root (doc), "meta");
    if (head->meta && head->meta->type != MSGPACK_OBJECT_MAP)
        return s_fail (error, error_size, "field \"meta\" must be a map");
    if (head->meta && s_check_str_keys (head->meta, "meta", error, error_size))
        return -1;
    return 0;
}

const char *
dsh_proto_refused_str (const void *data, size_t size, const char *key, char *text, size_t text_size)
{
    assert (key);
    assert (text && text_size > 1);
    *text = 0;
    //  The scan bounds what msgpack-c allocates, as in dsh_doc_new
    if (dsh_msgpack_scan (data, size, DSH_DOC_MAX_DEPTH, NULL, 0))
        return NULL;
    msgpack_zone zone;
    if (!msgpack_zone_init (&zone, 1024))
        return NULL;
    msgpack_object root;
    size_t offset = 0;
    const msgpack_object *found = NULL;
    size_t count = 0;
    if (msgpack_unpack ((const char *) data, size, &offset, &zone, &root) == MSGPACK_UNPACK_SUCCESS
    &&  root.type == MSGPACK_OBJECT_MAP)
        for (uint32_t index = 0; index < root.via.map.size; index++)
            if (dsh_str_eq (&root.via.map.ptr [index].key, key)) {
                found = &root.via.map.ptr [index].val;
                count++;
            }
    if (count == 1 && found->type == MSGPACK_OBJECT_STR && found->via.str.size
    &&  found->via.str.size < text_size && !memchr (found->via.str.ptr, 0, found->via.str.size)) {
        memcpy (text, found->via.str.ptr, found->via.str.size);
        text [found->via.str.size] = 0;
    }
    msgpack_zone_destroy (&zone);
    return *text? text: NULL;
}

zframe_t *
dsh_proto_encode_call (const char *call_id, const char *name,
                       const void *args, size_t args_size,
                       const char *agent, const void *meta, size_t meta_size,
                       uint64_t timeout_ms)
{
    assert (call_id);
    assert (name);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_packer_kv_str (&packer, "callId", call_id);
    dsh_packer_kv_str (&packer, "name", name);
    dsh_pack_cstr (&packer.pk, "arguments");
    if (args)
        dsh_packer_raw (&packer, args, args_size);
    else
        msgpack_pack_map (&packer.pk, 0);
    if (agent)
        dsh_packer_kv_str (&packer, "agent", agent);
    if (meta) {
        dsh_pack_cstr (&packer.pk, "meta");
        dsh_packer_raw (&packer, meta, meta_size);
    }
    if (timeout_ms > 0) {
        dsh_pack_cstr (&packer.pk, "timeoutMs");
        msgpack_pack_uint64 (&packer.pk, timeout_ms);
    }
    //  Raw arguments or meta that are not msgpack leave the body malformed,
    //  for the broker to refuse, as it would have without the count
    dsh_packer_map_end (&packer);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

// ---------------------------------------------------------------------------
//  Splicing a CALL: a list of edits, each replacing one byte range of the old
//  body (possibly empty, to insert) with new bytes. The edits are found in
//  one walk over the body, so they come in order and never overlap; the new
//  body is the old one's bytes between them, and each edit's bytes. It is
//  emitted twice: once to measure it against the limit, once to write it.

typedef enum {
    S_EDIT_NONE,                //  a header whose count did not change: kept
    S_EDIT_DELETE,              //  the range goes, nothing comes
    S_EDIT_HEAD_HEADER,         //  the head's map header, new count
    S_EDIT_META_HEADER,         //  meta's map header, new count
    S_EDIT_ARGUMENTS,           //  the arguments value, replaced
    S_EDIT_AGENT,               //  the agent value, replaced
    S_EDIT_STAMP,               //  one meta value, replaced by a stamp
    S_EDIT_META_APPEND,         //  new meta entries, at meta's end
    S_EDIT_HEAD_APPEND          //  new head entries, at the body's end
} s_edit_kind_t;

typedef struct {
    size_t start;               //  the range of the old body it replaces
    size_t end;
    s_edit_kind_t kind;
    size_t stamp;               //  S_EDIT_STAMP: the stamp's index
} s_edit_t;

typedef struct {
    const uint8_t *body;
    size_t body_size;
    const dsh_call_changes_t *changes;
    s_edit_t *edits;
    size_t edit_count;
    uint64_t head_count;        //  the head's entry count, as it will be
    uint64_t meta_count;        //  meta's, as it will be
    bool *stamp_found;          //  [stamp]: its key is already in meta
    bool append_arguments;
    bool append_agent;
    bool append_meta;
} s_splice_t;

//  Where the new body goes; data NULL while only measuring it.
typedef struct {
    uint8_t *data;
    size_t size;
} s_out_t;

static void
s_put (s_out_t *out, const void *bytes, size_t size)
{
    if (out->data && size)
        memcpy (out->data + out->size, bytes, size);
    out->size += size;
}

static void
s_put_map_header (s_out_t *out, uint64_t count)
{
    uint8_t header [5];
    s_put (out, header, s_map_header (count, header));
}

static void
s_put_str (s_out_t *out, const char *text)
{
    size_t size = strlen (text);
    uint8_t header [5];
    size_t header_size = 1;
    if (size < 32)
        header [0] = (uint8_t) (0xa0 | size);
    else
    if (size <= UINT8_MAX) {
        header [0] = 0xd9;
        header [1] = (uint8_t) size;
        header_size = 2;
    }
    else
    if (size <= UINT16_MAX) {
        header [0] = 0xda;
        header [1] = (uint8_t) (size >> 8);
        header [2] = (uint8_t) size;
        header_size = 3;
    }
    else {
        header [0] = 0xdb;
        for (int index = 0; index < 4; index++)
            header [1 + index] = (uint8_t) (size >> (24 - 8 * index));
        header_size = 5;
    }
    s_put (out, header, header_size);
    s_put (out, text, size);
}

//  True if stamp is the one that counts for its key: no later stamp has it.
static bool
s_stamp_counts (const dsh_call_changes_t *changes, size_t stamp)
{
    for (size_t later = stamp + 1; later < changes->stamp_count; later++)
        if (streq (changes->stamps [later].key, changes->stamps [stamp].key))
            return false;
    return true;
}

//  True if the stamp adds a new entry to meta.
static bool
s_stamp_appends (s_splice_t *self, size_t stamp)
{
    return self->changes->stamps [stamp].value
        && !self->stamp_found [stamp]
        && s_stamp_counts (self->changes, stamp);
}

static void
s_put_edit (s_splice_t *self, const s_edit_t *edit, s_out_t *out)
{
    const dsh_call_changes_t *changes = self->changes;
    switch (edit->kind) {
        case S_EDIT_NONE:
        case S_EDIT_DELETE:
            break;
        case S_EDIT_HEAD_HEADER:
            s_put_map_header (out, self->head_count);
            break;
        case S_EDIT_META_HEADER:
            s_put_map_header (out, self->meta_count);
            break;
        case S_EDIT_ARGUMENTS:
            s_put (out, changes->arguments, changes->arguments_size);
            break;
        case S_EDIT_AGENT:
            s_put_str (out, changes->agent);
            break;
        case S_EDIT_STAMP:
            s_put (out, changes->stamps [edit->stamp].value, changes->stamps [edit->stamp].value_size);
            break;
        case S_EDIT_META_APPEND:
            for (size_t stamp = 0; stamp < changes->stamp_count; stamp++)
                if (s_stamp_appends (self, stamp)) {
                    s_put_str (out, changes->stamps [stamp].key);
                    s_put (out, changes->stamps [stamp].value, changes->stamps [stamp].value_size);
                }
            break;
        case S_EDIT_HEAD_APPEND:
            if (self->append_arguments) {
                s_put_str (out, "arguments");
                s_put (out, changes->arguments, changes->arguments_size);
            }
            if (self->append_agent) {
                s_put_str (out, "agent");
                s_put_str (out, changes->agent);
            }
            if (self->append_meta) {
                s_put_str (out, "meta");
                s_put_map_header (out, self->meta_count);
                s_edit_t entries = { 0, 0, S_EDIT_META_APPEND, 0 };
                s_put_edit (self, &entries, out);
            }
            break;
    }
}

static void
s_put_spliced (s_splice_t *self, s_out_t *out)
{
    size_t cursor = 0;
    for (size_t index = 0; index < self->edit_count; index++) {
        const s_edit_t *edit = &self->edits [index];
        if (edit->kind == S_EDIT_NONE)
            continue;
        s_put (out, self->body + cursor, edit->start - cursor);
        s_put_edit (self, edit, out);
        cursor = edit->end;
    }
    s_put (out, self->body + cursor, self->body_size - cursor);
}

static s_edit_t *
s_add_edit (s_splice_t *self, size_t start, size_t end, s_edit_kind_t kind)
{
    s_edit_t *edit = &self->edits [self->edit_count++];
    *edit = (s_edit_t) { start, end, kind, 0 };
    return edit;
}

//  The key text and size of the str object at data (already skipped, so its
//  length fits); false if it is not a str.
static bool
s_str_at (const uint8_t *data, const char **text, size_t *size)
{
    uint8_t type = data [0];
    size_t header_size = 1, length = 0;
    if (type >= 0xa0 && type <= 0xbf)
        length = type & 0x1f;
    else
    if (type == 0xd9) {
        length = data [1];
        header_size = 2;
    }
    else
    if (type == 0xda) {
        length = ((size_t) data [1] << 8) | data [2];
        header_size = 3;
    }
    else
    if (type == 0xdb) {
        length = ((size_t) data [1] << 24) | ((size_t) data [2] << 16) | ((size_t) data [3] << 8) | data [4];
        header_size = 5;
    }
    else
        return false;
    *text = (const char *) data + header_size;
    *size = length;
    return true;
}

static bool
s_text_is (const char *text, size_t size, const char *expected)
{
    return strlen (expected) == size && memcmp (text, expected, size) == 0;
}

//  Walks meta (the value at [start, end)) for the entries the stamps
//  change, adding their edits in order.
static int
s_splice_meta (s_splice_t *self, size_t start, size_t end, char *error, size_t error_size)
{
    const dsh_call_changes_t *changes = self->changes;
    uint32_t count = 0;
    size_t header_size = dsh_msgpack_map_header (self->body + start, end - start, &count);
    if (header_size == 0)
        return s_fail (error, error_size, "field \"meta\" must be a map");
    s_edit_t *header = s_add_edit (self, start, start + header_size, S_EDIT_NONE);
    self->meta_count = count;
    size_t offset = start + header_size;
    for (uint32_t index = 0; index < count; index++) {
        size_t entry_at = offset;
        //  Within a value already skipped whole, so these cannot fail
        size_t key_size = dsh_msgpack_skip (self->body + offset, end - offset);
        const char *key = NULL;
        size_t size = 0;
        bool key_is_str = key_size && s_str_at (self->body + offset, &key, &size);
        offset += key_size;
        size_t value_size = dsh_msgpack_skip (self->body + offset, end - offset);
        if (key_size == 0 || value_size == 0)
            return s_fail (error, error_size, "field \"meta\" is not well-formed msgpack");
        size_t value_at = offset;
        offset += value_size;
        if (!key_is_str)
            continue;
        for (size_t stamp = 0; stamp < changes->stamp_count; stamp++) {
            if (!s_stamp_counts (changes, stamp) || !s_text_is (key, size, changes->stamps [stamp].key))
                continue;
            if (self->stamp_found [stamp]) {
                char quoted [200];
                dsh_quote_key (key, size, quoted, sizeof quoted);
                return s_fail (error, error_size, "duplicate key \"%s\" in meta", quoted);
            }
            self->stamp_found [stamp] = true;
            if (changes->stamps [stamp].value)
                s_add_edit (self, value_at, offset, S_EDIT_STAMP)->stamp = stamp;
            else {
                s_add_edit (self, entry_at, offset, S_EDIT_DELETE);
                self->meta_count--;
            }
        }
    }
    if (offset != end)
        return s_fail (error, error_size, "field \"meta\" is not well-formed msgpack");
    size_t appended = 0;
    for (size_t stamp = 0; stamp < changes->stamp_count; stamp++)
        appended += s_stamp_appends (self, stamp);
    if (appended) {
        s_add_edit (self, end, end, S_EDIT_META_APPEND);
        self->meta_count += appended;
    }
    if (self->meta_count != count)
        header->kind = S_EDIT_META_HEADER;
    return 0;
}

//  Checks the changes and walks the head, adding the edits in order.
static int
s_splice_plan (s_splice_t *self, char *error, size_t error_size)
{
    const dsh_call_changes_t *changes = self->changes;
    if (changes->arguments
    &&  dsh_msgpack_skip (changes->arguments, changes->arguments_size) != changes->arguments_size)
        return s_fail (error, error_size, "the new arguments are not one msgpack object");
    for (size_t stamp = 0; stamp < changes->stamp_count; stamp++) {
        const dsh_meta_stamp_t *entry = &changes->stamps [stamp];
        assert (entry->key);
        if (entry->value && dsh_msgpack_skip (entry->value, entry->value_size) != entry->value_size)
            return s_fail (error, error_size, "the meta stamp \"%s\" is not one msgpack object", entry->key);
    }
    if (changes->change_agent && changes->agent
    &&  (strlen (changes->agent) == 0 || strlen (changes->agent) > DSH_ID_MAX))
        return s_fail (error, error_size, "the new agent must be 1 to %d bytes", DSH_ID_MAX);

    uint32_t count = 0;
    size_t header_size = dsh_msgpack_map_header (self->body, self->body_size, &count);
    if (header_size == 0)
        return s_fail (error, error_size, "the CALL body is not a map");
    s_edit_t *header = s_add_edit (self, 0, header_size, S_EDIT_NONE);
    self->head_count = count;
    bool has_arguments = false, has_agent = false, has_meta = false;
    size_t offset = header_size;
    for (uint32_t index = 0; index < count; index++) {
        size_t entry_at = offset;
        size_t key_size = dsh_msgpack_skip (self->body + offset, self->body_size - offset);
        if (key_size == 0)
            return s_fail (error, error_size, "the CALL body is not well-formed msgpack");
        const char *key = NULL;
        size_t size = 0;
        if (!s_str_at (self->body + offset, &key, &size))
            return s_fail (error, error_size, "a key of the CALL body is not a string");
        offset += key_size;
        size_t value_size = dsh_msgpack_skip (self->body + offset, self->body_size - offset);
        if (value_size == 0)
            return s_fail (error, error_size, "the CALL body is not well-formed msgpack");
        size_t value_at = offset;
        offset += value_size;

        bool *seen = s_text_is (key, size, "arguments")? &has_arguments
                   : s_text_is (key, size, "agent")? &has_agent
                   : s_text_is (key, size, "meta")? &has_meta: NULL;
        if (!seen)
            continue;
        if (*seen) {
            char quoted [200];
            dsh_quote_key (key, size, quoted, sizeof quoted);
            return s_fail (error, error_size, "duplicate key \"%s\" in the CALL body", quoted);
        }
        *seen = true;
        if (seen == &has_arguments && changes->arguments)
            s_add_edit (self, value_at, offset, S_EDIT_ARGUMENTS);
        else
        if (seen == &has_agent && changes->change_agent) {
            if (changes->agent)
                s_add_edit (self, value_at, offset, S_EDIT_AGENT);
            else {
                s_add_edit (self, entry_at, offset, S_EDIT_DELETE);
                self->head_count--;
            }
        }
        else
        if (seen == &has_meta && changes->stamp_count
        &&  s_splice_meta (self, value_at, offset, error, error_size))
            return -1;
    }
    if (offset != self->body_size)
        return s_fail (error, error_size, "trailing bytes after the CALL body");

    self->append_arguments = changes->arguments && !has_arguments;
    self->append_agent = changes->change_agent && changes->agent && !has_agent;
    if (!has_meta)
        for (size_t stamp = 0; stamp < changes->stamp_count; stamp++)
            self->meta_count += s_stamp_appends (self, stamp);
    self->append_meta = self->meta_count > 0 && !has_meta;
    size_t appended = self->append_arguments + self->append_agent + self->append_meta;
    if (appended) {
        s_add_edit (self, self->body_size, self->body_size, S_EDIT_HEAD_APPEND);
        self->head_count += appended;
    }
    if (self->head_count > UINT32_MAX)
        return s_fail (error, error_size, "the CALL body has too many entries");
    if (self->head_count != count)
        header->kind = S_EDIT_HEAD_HEADER;
    return 0;
}

zframe_t *
dsh_proto_splice_call (const void *body, size_t body_size, const dsh_call_changes_t *changes,
                       size_t max_bytes, char *error, size_t error_size)
{
    assert (body || body_size == 0);
    assert (changes);
    assert (changes->stamps || changes->stamp_count == 0);
    //  At most: both headers, arguments, agent, one per stamp, the two appends
    size_t edit_max = 7 + changes->stamp_count;
    s_splice_t self = {
        .body = (const uint8_t *) body,
        .body_size = body_size,
        .changes = changes,
        .edits = (s_edit_t *) calloc (edit_max, sizeof (s_edit_t)),
        .stamp_found = (bool *) calloc (changes->stamp_count + 1, sizeof (bool))
    };
    zframe_t *frame = NULL;
    if (!self.edits || !self.stamp_found)
        s_fail (error, error_size, "out of memory");
    else
    if (s_splice_plan (&self, error, error_size) == 0) {
        assert (self.edit_count <= edit_max);
        s_out_t measure = { NULL, 0 };
        s_put_spliced (&self, &measure);
        if (measure.size > max_bytes)
            s_fail (error, error_size, "the call with its stamps would be %zu bytes, over the %zu-byte limit",
                    measure.size, max_bytes);
        else {
            frame = zframe_new (NULL, measure.size);
            s_out_t out = { zframe_data (frame), 0 };
            s_put_spliced (&self, &out);
            assert (out.size == measure.size);
        }
    }
    free (self.edits);
    free (self.stamp_found);
    return frame;
}

const char *
dsh_proto_error_name (const char *code)
{
    //  The definition's table (schemas/dsh_protocol.json), as generated
#define S_NAME(CODE, code, name) { CODE, name },
    static const struct { const char *code, *name; } names [] = {
        DSH_ERROR_CODES (S_NAME)
    };
#undef S_NAME
    for (size_t index = 0; index < sizeof (names) / sizeof (names [0]); index++)
        if (streq (code, names [index].code))
            return names [index].name;
    return DSH_ERROR_NAME_UNKNOWN;
}

zframe_t *
dsh_proto_error_result (const char *call_id, const char *code, const char *text)
{
    assert (code);
    assert (text);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 4);
    dsh_packer_kv_str (&packer, "callId", call_id? call_id: "");
    dsh_pack_cstr (&packer.pk, "content");
    msgpack_pack_array (&packer.pk, 1);
    msgpack_pack_map (&packer.pk, 2);
    dsh_packer_kv_str (&packer, "type", "text");
    dsh_packer_kv_str (&packer, "text", text);
    dsh_pack_cstr (&packer.pk, "isError");
    msgpack_pack_true (&packer.pk);
    dsh_pack_cstr (&packer.pk, "error");
    msgpack_pack_map (&packer.pk, 2);
    dsh_packer_kv_str (&packer, "name", dsh_proto_error_name (code));
    dsh_packer_kv_str (&packer, "code", code);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

zframe_t *
dsh_proto_error_body (const msgpack_object *id, const char *code, const char *message)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id) {
        dsh_pack_cstr (&packer.pk, "id");
        msgpack_pack_object (&packer.pk, *id);
    }
    dsh_packer_kv_str (&packer, "code", code);
    dsh_packer_kv_str (&packer, "message", message);
    dsh_packer_map_end (&packer);
    zframe_t *frame = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    return frame;
}

//  True if map holds key as a str (when required) or lacks it (when not).
static bool
s_has_str (const msgpack_object *map, const char *key, bool required)
{
    const msgpack_object *value = dsh_map_get (map, key);
    if (!value)
        return !required;
    return value->type == MSGPACK_OBJECT_STR;
}

int
dsh_proto_check_content (const msgpack_object *block, char *error, size_t error_size)
{
    if (!block || block->type != MSGPACK_OBJECT_MAP)
        return s_fail (error, error_size, "content block is not a map");
    const msgpack_object *type = dsh_map_get (block, "type");
    if (dsh_str_eq (type, "text")) {
        if (!s_has_str (block, "text", true))
            return s_fail (error, error_size, "text block needs a string \"text\"");
    }
    else
    if (dsh_str_eq (type, "image") || dsh_str_eq (type, "audio")) {
        if (!s_has_str (block, "data", true) || !s_has_str (block, "mimeType", true))
            return s_fail (error, error_size, "%.*s block needs string \"data\" and \"mimeType\"",
                           (int) type->via.str.size, type->via.str.ptr);
    }
    else
    if (dsh_str_eq (type, "resource_link")) {
        if (!s_has_str (block, "uri", true) || !s_has_str (block, "name", true))
            return s_fail (error, error_size, "resource_link block needs string \"uri\" and \"name\"");
    }
    else
    if (dsh_str_eq (type, "resource")) {
        const msgpack_object *resource = dsh_map_get (block, "resource");
        if (!resource || resource->type != MSGPACK_OBJECT_MAP || !s_has_str (resource, "uri", true))
            return s_fail (error, error_size, "resource block needs a \"resource\" map with a string \"uri\"");
        bool has_text = dsh_map_get (resource, "text") != NULL;
        bool has_blob = dsh_map_get (resource, "blob") != NULL;
        if (has_text == has_blob || !s_has_str (resource, "text", false) || !s_has_str (resource, "blob", false))
            return s_fail (error, error_size, "resource needs exactly one of string \"text\" or \"blob\"");
    }
    else
        return s_fail (error, error_size, "content block has no known \"type\"");
    return 0;
}

int
dsh_proto_check_result (const msgpack_object *body, char *error, size_t error_size)
{
    if (!body || body->type != MSGPACK_OBJECT_MAP)
        return s_fail (error, error_size, "result is not a map");
    const msgpack_object *content = dsh_map_get (body, "content");
    if (!content || content->type != MSGPACK_OBJECT_ARRAY)
        return s_fail (error, error_size, "result needs a \"content\" array");
    for (uint32_t index = 0; index < content->via.array.size; index++)
        if (dsh_proto_check_content (&content->via.array.ptr [index], error, error_size))
            return -1;
    const msgpack_object *is_error = dsh_map_get (body, "isError");
    if (!is_error || is_error->type != MSGPACK_OBJECT_BOOLEAN)
        return s_fail (error, error_size, "result needs a boolean \"isError\"");
    const msgpack_object *failure = dsh_map_get (body, "error");
    if (failure && (failure->type != MSGPACK_OBJECT_MAP || !s_has_str (failure, "code", true)))
        return s_fail (error, error_size, "result \"error\" must be a map with a string \"code\"");
    return 0;
}

int
dsh_proto_check_tool (const msgpack_object *tool, char *error, size_t error_size)
{
    if (!tool || tool->type != MSGPACK_OBJECT_MAP)
        return s_fail (error, error_size, "tool entry is not a map");
    const msgpack_object *name = dsh_map_get (tool, "name");
    if (!name || name->type != MSGPACK_OBJECT_STR)
        return s_fail (error, error_size, "tool entry has no string \"name\"");
    int name_size = (int) name->via.str.size;
    const char *name_text = name->via.str.ptr;
    if (!dsh_proto_valid_name (name_text, name->via.str.size))
        return s_fail (error, error_size, "tool name \"%.*s\" is not 1-128 of [A-Za-z0-9_.-]",
                       name_size > DSH_NAME_MAX? DSH_NAME_MAX: name_size, name_text);
    if (!s_has_str (tool, "description", false) || !s_has_str (tool, "title", false))
        return s_fail (error, error_size, "tool \"%.*s\": description and title must be strings",
                       name_size, name_text);
    const msgpack_object *parameters = dsh_map_get (tool, "parameters");
    if (!parameters || parameters->type != MSGPACK_OBJECT_MAP
    ||  !dsh_str_eq (dsh_map_get (parameters, "type"), "object"))
        return s_fail (error, error_size,
                       "tool \"%.*s\": parameters must be an object schema ({\"type\":\"object\", ...})",
                       name_size, name_text);
    const msgpack_object *output = dsh_map_get (tool, "outputSchema");
    if (output && (output->type != MSGPACK_OBJECT_MAP || !dsh_str_eq (dsh_map_get (output, "type"), "object")))
        return s_fail (error, error_size, "tool \"%.*s\": outputSchema must be an object schema",
                       name_size, name_text);
    const msgpack_object *annotations = dsh_map_get (tool, "annotations");
    if (annotations) {
        if (annotations->type != MSGPACK_OBJECT_MAP)
            return s_fail (error, error_size, "tool \"%.*s\": annotations must be a map", name_size, name_text);
        static const char *hints [] = { "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint" };
        for (size_t index = 0; index < sizeof (hints) / sizeof (hints [0]); index++) {
            const msgpack_object *hint = dsh_map_get (annotations, hints [index]);
            if (hint && hint->type != MSGPACK_OBJECT_BOOLEAN)
                return s_fail (error, error_size, "tool \"%.*s\": annotations.%s must be a boolean",
                               name_size, name_text, hints [index]);
        }
    }
    //  The quarantine marks are the broker's word on an entry (PROTOCOL.md,
    //  "Pins"): a component that sent them could hide or fake a quarantine
    static const char *marks [] = { "quarantined", "digest", "pinnedDigest", "quarantineReason" };
    for (size_t index = 0; index < sizeof (marks) / sizeof (marks [0]); index++)
        if (dsh_map_get (tool, marks [index]))
            return s_fail (error, error_size, "tool \"%.*s\": \"%s\" is set by the broker only",
                           name_size, name_text, marks [index]);
    static const char *flags [] = { "strict", "concurrencySafe" };
    for (size_t index = 0; index < sizeof (flags) / sizeof (flags [0]); index++) {
        const msgpack_object *flag = dsh_map_get (tool, flags [index]);
        if (flag && flag->type != MSGPACK_OBJECT_BOOLEAN)
            return s_fail (error, error_size, "tool \"%.*s\": %s must be a boolean",
                           name_size, name_text, flags [index]);
    }
    return 0;
}

//  True if text is well-formed UTF-8: no overlong form, surrogate or
//  code point past U+10FFFF.
static bool
s_utf8_valid (const char *text)
{
    const byte *in = (const byte *) text;
    while (*in) {
        byte lead = *in;
        size_t length = lead < 0x80? 1: (lead & 0xe0) == 0xc0? 2: (lead & 0xf0) == 0xe0? 3: (lead & 0xf8) == 0xf0? 4: 0;
        if (!length)
            return false;
        uint32_t point = length == 1? lead: lead & (0xff >> (length + 1));
        for (size_t next = 1; next < length; next++) {
            if ((in [next] & 0xc0) != 0x80)
                return false;
            point = point << 6 | (in [next] & 0x3f);
        }
        uint32_t least = length == 1? 0: length == 2? 0x80: length == 3? 0x800: 0x10000;
        if (point < least || point > 0x10ffff || (point >= 0xd800 && point <= 0xdfff))
            return false;
        in += length;
    }
    return true;
}

//  A detail string of an ANNOUNCE: absent, or 1 to max_size bytes of
//  UTF-8 text without a control character (it is shown to an operator,
//  and STATS, which carries it, must keep a JSON form for the monitor
//  and the SDKs: one component's bytes must not take STATS from all).
static int
s_get_detail (dsh_doc_t *doc, const char *key, size_t max_size, const char **value, char *error, size_t error_size)
{
    if (s_get_str (doc, key, max_size, value, error, error_size))
        return -1;
    for (const char *cursor = *value; cursor && *cursor; cursor++)
        if ((unsigned char) *cursor < 0x20 || *cursor == 0x7f)
            return s_fail (error, error_size, "field \"%s\" holds a control character", key);
    if (*value && !s_utf8_valid (*value))
        return s_fail (error, error_size, "field \"%s\" is not UTF-8", key);
    return 0;
}

//  ANNOUNCE's optional details: host, pid, version, uptimeMs.
static int
s_get_presence_details (dsh_doc_t *doc, dsh_presence_t *presence, char *error, size_t error_size)
{
    if (s_get_detail (doc, "host", DSH_PRESENCE_HOST_MAX, &presence->host, error, error_size)
    ||  s_get_detail (doc, "version", DSH_PRESENCE_VERSION_MAX, &presence->version, error, error_size)
    ||  s_get_uint (doc, "pid", &presence->pid, error, error_size)
    ||  s_get_uint (doc, "uptimeMs", &presence->uptime_ms, error, error_size))
        return -1;
    if (dsh_map_get (dsh_doc_root (doc), "pid") && (presence->pid < 1 || presence->pid > DSH_PRESENCE_PID_MAX))
        return s_fail (error, error_size, "field \"pid\" must be from 1 to %llu", DSH_PRESENCE_PID_MAX);
    presence->has_uptime = dsh_map_get (dsh_doc_root (doc), "uptimeMs") != NULL;
    if (presence->uptime_ms > DSH_PRESENCE_UPTIME_MAX)
        return s_fail (error, error_size, "field \"uptimeMs\" must be at most %llu", DSH_PRESENCE_UPTIME_MAX);
    return 0;
}

int
dsh_proto_decode_presence (dsh_doc_t *doc, const char *command, dsh_presence_t *presence,
                           char *error, size_t error_size)
{
    assert (doc);
    assert (presence);
    memset (presence, 0, sizeof (*presence));
    if (s_get_str (doc, "component", DSH_ID_MAX, &presence->component, error, error_size))
        return -1;
    if (!presence->component || !dsh_proto_valid_id (presence->component, strlen (presence->component)))
        return s_fail (error, error_size, "field \"component\" must be a valid component id");
    if (s_get_uint (doc, "generation", &presence->generation, error, error_size))
        return -1;
    if (streq (command, DSH_ANNOUNCE)) {
        presence->tools = dsh_map_get (dsh_doc_root (doc), "tools");
        if (!presence->tools || presence->tools->type != MSGPACK_OBJECT_ARRAY)
            return s_fail (error, error_size, "field \"tools\" must be an array");
        if (s_get_uint (doc, "concurrency", &presence->concurrency, error, error_size))
            return -1;
        if (dsh_map_get (dsh_doc_root (doc), "concurrency")
        &&  (presence->concurrency < 1 || presence->concurrency > DSH_CONCURRENCY_MAX))
            return s_fail (error, error_size, "field \"concurrency\" must be from 1 to %d", DSH_CONCURRENCY_MAX);
        if (s_get_uint (doc, "part", &presence->part, error, error_size)
        ||  s_get_uint (doc, "parts", &presence->parts, error, error_size))
            return -1;
        bool has_part = dsh_map_get (dsh_doc_root (doc), "part") != NULL;
        bool has_parts = dsh_map_get (dsh_doc_root (doc), "parts") != NULL;
        if (has_part != has_parts)
            return s_fail (error, error_size, "fields \"part\" and \"parts\" come together or not at all");
        if (has_parts && presence->parts < 2)
            return s_fail (error, error_size, "field \"parts\" must be 2 or more");
        if (has_parts && presence->part >= presence->parts)
            return s_fail (error, error_size, "field \"part\" must be below \"parts\" (%" PRIu64 ")",
                           presence->parts);
        if (s_get_presence_details (doc, presence, error, error_size))
            return -1;
    }
    return 0;
}
