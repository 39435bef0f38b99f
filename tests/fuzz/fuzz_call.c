/*  fuzz_call - the CALL body as the chain splices it

    The input is a CALL body. It is decoded strictly, as FRONT does, then
    spliced as stages splice it (new arguments, meta stamps set and
    removed, agent changed or removed), and each spliced body must decode
    again to the same callId and name.
*/

#include "dsh.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
s_check_spliced (zframe_t *spliced, const char *call_id, const char *name)
{
    char error [256];
    dsh_doc_t *doc = dsh_proto_decode_body (spliced, error, sizeof (error));
    assert (doc);
    dsh_call_head_t head;
    int rc = dsh_proto_decode_call (doc, &head, error, sizeof (error));
    assert (rc == 0);
    assert (streq (head.call_id, call_id));
    assert (streq (head.name, name));
    dsh_doc_destroy (&doc);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof (error));
    if (!doc)
        return 0;
    dsh_call_head_t head;
    int decoded = dsh_doc_root (doc)->type == MSGPACK_OBJECT_MAP
               && dsh_proto_decode_call (doc, &head, error, sizeof (error)) == 0;
    char *call_id = decoded? strdup (head.call_id): NULL;
    char *name = decoded? strdup (head.name): NULL;
    dsh_doc_destroy (&doc);

    //  Changes as the built-in stages make them: hooks' updatedInput,
    //  sandbox's stamp, a removal, an agent
    static const uint8_t arguments [] = { 0x81, 0xa1, 'x', 0x01 };
    static const uint8_t policy [] = { 0x81, 0xa6, 'p', 'o', 'l', 'i', 'c', 'y', 0xa9,
                                       'r', 'e', 'a', 'd', '-', 'o', 'n', 'l', 'y' };
    dsh_meta_stamp_t stamps [] = {
        { "sandbox", policy, sizeof (policy) },
        { "mode", NULL, 0 },
        { "sandbox", "\xc0", 1 },
    };
    dsh_call_changes_t changes [] = {
        { 0 },
        { arguments, sizeof (arguments), NULL, 0, false, NULL },
        { NULL, 0, stamps, 3, false, NULL },
        { NULL, 0, stamps + 1, 1, true, NULL },
        { arguments, sizeof (arguments), stamps, 2, true, "agent-7" },
    };
    for (size_t index = 0; index < sizeof (changes) / sizeof (changes [0]); index++) {
        zframe_t *spliced = dsh_proto_splice_call (data, size, &changes [index], 1 << 20,
                                                   error, sizeof (error));
        if (spliced && decoded)
            s_check_spliced (spliced, call_id, name);
        zframe_destroy (&spliced);
    }
    free (call_id);
    free (name);
    return 0;
}
