/*  fuzz_repeat - a body with a repeated key is refused by every decoder

    Issue 22's rule, held for any input: one strict decode per message.
    The input is taken as a body; when it is one well-formed map, a copy is
    made with its first entry written twice (the map's count one higher),
    and when the input itself repeats a key anywhere (found here by a plain
    pairwise walk, independent of dsh_doc's sort), it is kept as it is.
    Every body that repeats a key must be refused by each decoder a socket
    uses: the document (FRONT, WORK, the announce channel, slots and the
    approvals socket all decode with it), the body decoder, a component's
    call, and a watcher's view as a SNAPSHOT and as an event; and by the
    front's refusal path, which may read a callId only when it is there once.
*/

#include "dsh.h"
#include "dsh_view.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

//  True if two keys are one in msgpack-c's eyes, or a str and a bin of the
//  same bytes: the repeats every reader agrees are repeats.
static bool
s_same_key (const msgpack_object *a, const msgpack_object *b)
{
    bool a_bytes = a->type == MSGPACK_OBJECT_STR || a->type == MSGPACK_OBJECT_BIN;
    bool b_bytes = b->type == MSGPACK_OBJECT_STR || b->type == MSGPACK_OBJECT_BIN;
    if (a_bytes && b_bytes)
        return a->via.str.size == b->via.str.size
            && (a->via.str.size == 0 || memcmp (a->via.str.ptr, b->via.str.ptr, a->via.str.size) == 0);
    return msgpack_object_equal (*a, *b);
}

static bool
s_repeats (const msgpack_object *obj)
{
    if (obj->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t index = 0; index < obj->via.array.size; index++)
            if (s_repeats (&obj->via.array.ptr [index]))
                return true;
    }
    else
    if (obj->type == MSGPACK_OBJECT_MAP)
        for (uint32_t first = 0; first < obj->via.map.size; first++) {
            for (uint32_t second = first + 1; second < obj->via.map.size; second++)
                if (s_same_key (&obj->via.map.ptr [first].key, &obj->via.map.ptr [second].key))
                    return true;
            if (s_repeats (&obj->via.map.ptr [first].val))
                return true;
        }
    return false;
}

//  Every decoder refuses body; the front answers by a callId only if the
//  body holds it once.
static void
s_all_refuse (const uint8_t *body, size_t size)
{
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (body, size, error, sizeof (error));
    assert (!doc);
    zframe_t *frame = zframe_new (body, size);
    doc = dsh_proto_decode_body (frame, error, sizeof (error));
    assert (!doc);
    zframe_destroy (&frame);
    dsh_call_t *call = dsh_call_new (body, size, error, sizeof (error));
    assert (!call);
    dsh_view_t *view = dsh_view_new (4);
    dsh_view_snapshot (view, body, size, error, sizeof (error));
    assert (dsh_view_seq (view) == 0);
    dsh_view_destroy (&view);
    char call_id [DSH_CALL_ID_MAX + 1];
    dsh_proto_refused_str (body, size, "callId", call_id, sizeof (call_id));
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (dsh_msgpack_scan (data, size, DSH_DOC_MAX_DEPTH, NULL, 0))
        return 0;
    msgpack_zone zone;
    msgpack_zone_init (&zone, 4096);
    msgpack_object root;
    size_t offset = 0;
    if (msgpack_unpack ((const char *) data, size, &offset, &zone, &root) == MSGPACK_UNPACK_SUCCESS) {
        if (s_repeats (&root))
            s_all_refuse (data, size);
        if (root.type == MSGPACK_OBJECT_MAP && root.via.map.size > 0 && root.via.map.size < 65535) {
            //  The same map with its first entry twice
            msgpack_sbuffer sbuf;
            msgpack_sbuffer_init (&sbuf);
            msgpack_packer pk;
            msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
            msgpack_pack_map (&pk, root.via.map.size + 1);
            msgpack_pack_object (&pk, root.via.map.ptr [0].key);
            msgpack_pack_object (&pk, root.via.map.ptr [0].val);
            for (uint32_t index = 0; index < root.via.map.size; index++) {
                msgpack_pack_object (&pk, root.via.map.ptr [index].key);
                msgpack_pack_object (&pk, root.via.map.ptr [index].val);
            }
            s_all_refuse ((const uint8_t *) sbuf.data, sbuf.size);
            msgpack_sbuffer_destroy (&sbuf);
        }
    }
    msgpack_zone_destroy (&zone);
    return 0;
}
