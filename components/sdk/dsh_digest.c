/*  =========================================================================
    dsh_digest - definition and value digests (see the header)
    =========================================================================
*/

#include "dsh_digest.h"
#include "dsh_doc.h"

#include <openssl/evp.h>
#include <string.h>

//  The keys of a tool entry a definition digest covers
static const char *s_definition_keys [DSH_DIGEST_DEFINITION_KEYS] = {
    "name", "title", "description", "parameters", "outputSchema", "annotations", "confined"
};

void
dsh_digest_bytes (const void *data, size_t size, char *hex)
{
    unsigned char digest [EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    int rc = EVP_Digest (data, size, digest, &length, EVP_sha256 (), NULL);
    if (rc != 1 || length != 32)
        memset (digest, 0, sizeof (digest));
    static const char digits [] = "0123456789abcdef";
    for (unsigned int index = 0; index < 32; index++) {
        hex [index * 2] = digits [digest [index] >> 4];
        hex [index * 2 + 1] = digits [digest [index] & 15];
    }
    hex [DSH_DIGEST_SIZE] = 0;
}

static int
s_digest_packed (const msgpack_object *value, char *hex)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_object nil = { .type = MSGPACK_OBJECT_NIL };
    int rc = dsh_pack_canonical (&pk, value? value: &nil);
    if (rc == 0)
        dsh_digest_bytes (sbuf.data, sbuf.size, hex);
    msgpack_sbuffer_destroy (&sbuf);
    return rc;
}

int
dsh_digest_value (const msgpack_object *value, char *hex)
{
    return s_digest_packed (value, hex);
}

bool
dsh_digest_definition_key (const char *key, size_t size)
{
    for (size_t index = 0; index < sizeof (s_definition_keys) / sizeof (s_definition_keys [0]); index++)
        if (strlen (s_definition_keys [index]) == size && memcmp (s_definition_keys [index], key, size) == 0)
            return true;
    return false;
}

int
dsh_digest_definition_map (const msgpack_object *entry, msgpack_object_kv pairs [DSH_DIGEST_DEFINITION_KEYS],
                           msgpack_object *definition)
{
    if (!entry || entry->type != MSGPACK_OBJECT_MAP)
        return -1;
    uint32_t count = 0;
    for (uint32_t index = 0; index < entry->via.map.size && count < DSH_DIGEST_DEFINITION_KEYS; index++) {
        const msgpack_object *key = &entry->via.map.ptr [index].key;
        if (key->type == MSGPACK_OBJECT_STR && dsh_digest_definition_key (key->via.str.ptr, key->via.str.size))
            pairs [count++] = entry->via.map.ptr [index];
    }
    memset (definition, 0, sizeof (*definition));
    definition->type = MSGPACK_OBJECT_MAP;
    definition->via.map.size = count;
    definition->via.map.ptr = pairs;
    return 0;
}

int
dsh_digest_definition (const msgpack_object *entry, char *hex)
{
    msgpack_object_kv pairs [DSH_DIGEST_DEFINITION_KEYS];
    msgpack_object definition;
    if (dsh_digest_definition_map (entry, pairs, &definition))
        return -1;
    return s_digest_packed (&definition, hex);
}
