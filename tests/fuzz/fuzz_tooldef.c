/*  fuzz_tooldef - tool definitions and the arguments checked against them

    The input is msgpack. As arguments, it is checked against a typed
    definition that uses every parameter type and constraint (the SDK's
    check before a handler runs). As an ANNOUNCE's tools array, it goes
    into a catalog (the registry's entry validation, canonical entries,
    refusals and events), is announced again changed, then withdrawn.
*/

#include "dsh.h"
#include "dsh_catalog.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static const char *const s_modes [] = { "fast", "slow", NULL };
static const char *const s_levels [] = { "1", "2.5", "true", NULL };
static const dsh_param_t s_tag = { .type = DSH_TYPE_STRING };
static const dsh_param_t s_point [] = {
    { .name = "x", .type = DSH_TYPE_NUMBER, .required = true },
    { .name = "y", .type = DSH_TYPE_INTEGER },
    { 0 }
};
static const dsh_param_t s_item = { .type = DSH_TYPE_OBJECT, .properties = s_point };
static const dsh_param_t s_params [] = {
    { .name = "path", .type = DSH_TYPE_STRING, .required = true, .description = "where" },
    { .name = "mode", .type = DSH_TYPE_STRING, .enum_values = s_modes },
    { .name = "count", .type = DSH_TYPE_INTEGER, .default_json = "3" },
    { .name = "level", .type = DSH_TYPE_NUMBER, .enum_values = s_levels },
    { .name = "ratio", .type = DSH_TYPE_NUMBER },
    { .name = "force", .type = DSH_TYPE_BOOLEAN },
    { .name = "tags", .type = DSH_TYPE_ARRAY, .items = &s_tag },
    { .name = "points", .type = DSH_TYPE_ARRAY, .items = &s_item },
    { .name = "origin", .type = DSH_TYPE_OBJECT, .properties = s_point },
    { 0 }
};

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (data, size, error, sizeof (error));
    if (!doc)
        return 0;
    const msgpack_object *root = dsh_doc_root (doc);
    char *violation = dsh_params_check (s_params, root);
    free (violation);

    if (root->type == MSGPACK_OBJECT_ARRAY) {
        dsh_catalog_t *catalog = dsh_catalog_new ();
        zlistx_t *events = zlistx_new ();
        zlistx_set_destructor (events, (zlistx_destructor_fn *) dsh_event_destroy);
        zlistx_t *refusals = zlistx_new ();
        zlistx_set_destructor (refusals, (zlistx_destructor_fn *) dsh_refusal_destroy);
        dsh_catalog_announce (catalog, "fuzz-a", 1, root, 1000, events, refusals);
        //  A second provider of the same set, and the first one shrinking
        dsh_catalog_announce (catalog, "fuzz-b", 1, root, 1001, events, refusals);
        msgpack_object half = *root;
        half.via.array.size /= 2;
        dsh_catalog_announce (catalog, "fuzz-a", 2, &half, 1002, events, refusals);
        for (dsh_event_t *event = (dsh_event_t *) zlistx_first (events); event;
             event = (dsh_event_t *) zlistx_next (events)) {
            zframe_t *body = dsh_event_encode (event, 7);
            zframe_destroy (&body);
        }
        msgpack_sbuffer sbuf;
        msgpack_sbuffer_init (&sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
        dsh_catalog_pack_tools (catalog, &pk);
        dsh_catalog_pack_snapshot (catalog, &pk);
        msgpack_sbuffer_destroy (&sbuf);
        dsh_catalog_remove (catalog, "fuzz-a", "withdrawn", events);
        dsh_catalog_remove (catalog, "fuzz-b", "expired", events);
        zlistx_t *resync = dsh_catalog_take_resync (catalog);
        zlistx_destroy (&resync);
        zlistx_destroy (&events);
        zlistx_destroy (&refusals);
        dsh_catalog_destroy (&catalog);
    }
    dsh_doc_destroy (&doc);
    return 0;
}
