/*  =========================================================================
    stage_control - runs a stage's control commands from a unit test
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_json.h"
#include "stage_control.h"

//  The msgpack document of a JSON value (NULL: none), as a stage is given
//  control args and tool entries; *bytes keeps the bytes it reads.
dsh_doc_t *
stage_control_doc (const json_t *json, msgpack_sbuffer *bytes)
{
    msgpack_sbuffer_init (bytes);
    if (!json)
        return NULL;
    msgpack_packer pk;
    msgpack_packer_init (&pk, bytes, msgpack_sbuffer_write);
    assert_int_equal (dsh_json_to_msgpack (&pk, json), 0);
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (bytes->data, bytes->size, error, sizeof (error));
    assert_non_null (doc);
    return doc;
}

//  Runs a control command as the stage does, its args given as JSON (NULL:
//  none). Returns the reply's data as JSON, or NULL if the command failed
//  (with *reason set) or is unknown (*reason left NULL).
json_t *
stage_control (dsh_stage_callbacks_t *callbacks, const char *command, const json_t *args, char **reason, void *arg)
{
    msgpack_sbuffer bytes;
    dsh_doc_t *doc = stage_control_doc (args, &bytes);
    dsh_packer_t reply;
    dsh_packer_init (&reply);
    int rc = callbacks->on_control (NULL, command, doc? dsh_doc_root (doc): NULL, &reply, reason, arg);
    json_t *data = NULL;
    if (rc == 0) {
        char error [256];
        dsh_doc_t *reply_doc = dsh_doc_new (reply.sbuf.data, reply.sbuf.size, error, sizeof (error));
        assert_non_null (reply_doc);
        data = dsh_json_from_msgpack (dsh_doc_root (reply_doc));
        assert_non_null (data);
        dsh_doc_destroy (&reply_doc);
    }
    dsh_packer_release (&reply);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&bytes);
    return data;
}
