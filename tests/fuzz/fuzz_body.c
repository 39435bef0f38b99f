/*  fuzz_body - the msgpack body scanner and every body decoder on it

    The input is one message body, as a socket would deliver it. It goes
    through what the broker and the SDK do with bodies: the scanner and
    skip, the document, the CALL head, the presence bodies (ANNOUNCE,
    HEARTBEAT, WITHDRAW), the RESULT and content checks, each tool entry's
    check, canonical packing, the JSON edge, and a watcher's view taking
    it as a SNAPSHOT reply and as change events.
*/

#include "dsh.h"
#include "dsh_view.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
s_pack_canonical (const msgpack_object *obj)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    if (dsh_pack_canonical (&pk, obj) == 0) {
        //  Canonical bytes are one well-formed object again
        char error [256];
        int rc = dsh_msgpack_scan (sbuf.data, sbuf.size, DSH_DOC_MAX_DEPTH, error, sizeof (error));
        assert (rc == 0);
    }
    msgpack_sbuffer_destroy (&sbuf);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char error [256];
    size_t skipped = dsh_msgpack_skip (data, size);
    int scanned = dsh_msgpack_scan (data, size, DSH_DOC_MAX_DEPTH, error, sizeof (error));
    //  One whole object is exactly what skip measures
    assert (scanned != 0 || skipped == size);
    uint32_t count;
    dsh_msgpack_map_header (data, size, &count);

    zframe_t *frame = zframe_new (data, size);
    dsh_doc_t *doc = dsh_proto_decode_body (frame, error, sizeof (error));
    if (doc) {
        const msgpack_object *root = dsh_doc_root (doc);
        dsh_call_head_t head;
        dsh_proto_decode_call (doc, &head, error, sizeof (error));
        const char *commands [] = { DSH_ANNOUNCE, DSH_HEARTBEAT, DSH_WITHDRAW };
        for (size_t index = 0; index < 3; index++) {
            dsh_presence_t presence;
            if (dsh_proto_decode_presence (doc, commands [index], &presence, error, sizeof (error)) == 0
            &&  presence.tools && presence.tools->type == MSGPACK_OBJECT_ARRAY)
                for (uint32_t tool = 0; tool < presence.tools->via.array.size; tool++)
                    dsh_proto_check_tool (&presence.tools->via.array.ptr [tool], error, sizeof (error));
        }
        dsh_proto_check_result (root, error, sizeof (error));
        const msgpack_object *content = dsh_map_get (root, "content");
        if (content && content->type == MSGPACK_OBJECT_ARRAY)
            for (uint32_t block = 0; block < content->via.array.size; block++)
                dsh_proto_check_content (&content->via.array.ptr [block], error, sizeof (error));
        dsh_proto_check_tool (root, error, sizeof (error));
        dsh_doc_strdup (doc, dsh_map_get (root, "callId"));
        s_pack_canonical (root);
        json_t *json = dsh_json_from_msgpack (root);
        if (json) {
            msgpack_sbuffer sbuf;
            msgpack_sbuffer_init (&sbuf);
            msgpack_packer pk;
            msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
            dsh_json_to_msgpack (&pk, json);
            msgpack_sbuffer_destroy (&sbuf);
            json_decref (json);
        }
        dsh_doc_destroy (&doc);
    }
    zframe_destroy (&frame);

    //  A watcher: the body as an event while waiting, as the snapshot,
    //  then as an event again
    dsh_view_t *view = dsh_view_new (4);
    dsh_view_event (view, data, size, error, sizeof (error));
    dsh_view_snapshot (view, data, size, error, sizeof (error));
    dsh_view_event (view, data, size, error, sizeof (error));
    json_t *notice;
    while ((notice = dsh_view_notice (view)))
        json_decref (notice);
    dsh_view_destroy (&view);
    return 0;
}
