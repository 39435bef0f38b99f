/*  fuzz_json - the JSON edges: CLI and hook text, MCP's JSON-RPC lines

    The input is bytes a peer writes. As one JSON text, it is packed as
    msgpack (the CLI's arguments, a hook's output), decoded and turned back
    into JSON. As a stream on a pipe, it is read by the MCP JSON-RPC reader
    (lines, their limit, parse errors), and every message that parses is
    read as an MCP tools/call result would be.
*/

#include "dsh.h"
#include "dsh_jsonrpc.h"
#include "dsh_mcp_content.h"

#include <fcntl.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static void
s_text (const uint8_t *data, size_t size)
{
    char *text = (char *) malloc (size + 1);
    assert (text);
    memcpy (text, data, size);
    text [size] = 0;
    msgpack_sbuffer sbuf;
    char error [256];
    if (dsh_json_text_to_msgpack (text, &sbuf, error, sizeof (error)) == 0) {
        dsh_doc_t *doc = dsh_doc_new (sbuf.data, sbuf.size, error, sizeof (error));
        //  What the edge packs, the codec reads
        assert (doc);
        json_t *json = dsh_json_from_msgpack (dsh_doc_root (doc));
        json_decref (json);
        dsh_doc_destroy (&doc);
        msgpack_sbuffer_destroy (&sbuf);
    }
    free (text);
}

static void
s_rpc (const uint8_t *data, size_t size)
{
    int fds [2];
    int rc = pipe (fds);
    assert (rc == 0);
    //  A pipe holds 64 KiB: the fuzzer's inputs are shorter (-max_len)
    size_t written = size? (size_t) write (fds [1], data, size): 0;
    assert (written == size);
    close (fds [1]);
    fcntl (fds [0], F_SETFL, O_NONBLOCK);
    //  A small line limit so that overlong lines are reached too
    dsh_jsonrpc_t *rpc = dsh_jsonrpc_new (fds [0], -1, 256);
    assert (rpc);
    for (int reads = 0; reads < 1000; reads++) {
        int ended = dsh_jsonrpc_read (rpc);
        char error [256];
        bool bad = false;
        json_t *message;
        json_t *id;
        while ((message = dsh_jsonrpc_recv (rpc, &bad, &id, error, sizeof (error))) || bad) {
            if (message) {
                dsh_result_t *result = dsh_result_new ("fuzz");
                dsh_mcp_content_to_result (json_object_get (message, "result"), result, error, sizeof (error));
                zframe_t *body = dsh_result_encode (result);
                zframe_destroy (&body);
                dsh_result_destroy (&result);
                json_t *error_object = json_object_get (message, "error");
                result = dsh_result_new ("fuzz");
                dsh_mcp_content_from_error (error_object, result);
                body = dsh_result_encode (result);
                zframe_destroy (&body);
                dsh_result_destroy (&result);
                dsh_mcp_content_unknown_tool ((int) json_integer_value (json_object_get (error_object, "code")),
                                              json_string_value (json_object_get (error_object, "message")));
                json_decref (message);
            }
            json_decref (id);
            bad = false;
        }
        if (ended)
            break;
    }
    dsh_jsonrpc_destroy (&rpc);
    close (fds [0]);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size > 60000)
        return 0;
    s_text (data, size);
    s_rpc (data, size);
    return 0;
}
