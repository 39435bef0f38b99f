/*  dsh-fuzz-seeds - writes the fuzz targets' seed corpora

    Usage: dsh-fuzz-seeds DIR

    Writes DIR/<target>/seed-N for every libFuzzer target in tests/fuzz:
    the bodies, tool sets and texts the unit and integration tests send
    (kept here as JSON, packed with the codec, so a reader sees what each
    seed is). deploy/fuzz.sh adds the checked-in files of corpus/<target>
    (crash reproducers, the config files of deploy/) beside them.
*/

#include "dsh.h"

#include <sys/stat.h>

//  Bodies: CALLs, RESULTs, presence bodies, requests, watcher bodies
//  (test_proto, test_badinput, test_callpath, test_catalog, test_watcher_view)
static const char *s_bodies [] = {
    "{}",
    "[1,2,3]",
    "{\"callId\":\"c-1\",\"name\":\"echo\",\"arguments\":{\"a\":1},\"agent\":\"agent-7\",\"meta\":{\"k\":\"v\"},\"timeoutMs\":500}",
    "{\"callId\":\"c\",\"name\":\"n\",\"arguments\":[1,2]}",
    "{\"callId\":42,\"name\":\"n\"}",
    "{\"callId\":\"c2\",\"name\":\"echo\",\"meta\":5}",
    "{\"callId\":\"t1\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"isError\":false}",
    "{\"callId\":\"t3\",\"content\":[{\"type\":\"image\",\"data\":\"aGk=\",\"mimeType\":\"image/png\"},"
    "{\"type\":\"resource_link\",\"uri\":\"file:///x\",\"name\":\"x\"},{\"type\":\"resource\",\"resource\":"
    "{\"uri\":\"file:///y\",\"text\":\"y\"}}],\"isError\":true,\"error\":{\"name\":\"ToolError\",\"code\":\"TOOL_FAILED\"}}",
    "{\"callId\":\"to-faker\",\"content\":\"oops\",\"isError\":false}",
    "{\"component\":\"demo-1\",\"generation\":3,\"tools\":[{\"name\":\"echo\",\"description\":\"Echo.\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"message\":{\"type\":\"string\"}},\"required\":[\"message\"]},"
    "\"annotations\":{\"readOnlyHint\":true,\"idempotentHint\":true},\"concurrencySafe\":true}]}",
    "{\"component\":\"demo-1\",\"generation\":3}",
    "{\"component\":12,\"generation\":\"one\"}",
    "{\"component\":\"rogue\",\"generation\":1,\"tools\":5}",
    "{\"callId\":\"c2\",\"progress\":0.5,\"total\":1,\"message\":\"half\"}",
    "{\"stage\":\"permission\",\"command\":\"approve\",\"args\":{\"id\":\"a1\"},\"id\":[1,\"x\"]}",
    "{\"name\":\"echo\",\"id\":7}",
    //  A SNAPSHOT reply and an event, as a watcher reads them (test_watcher_view)
    "{\"seq\":1,\"epoch\":5,\"tools\":[{\"tool\":{\"name\":\"echo\",\"parameters\":{\"type\":\"object\"}},"
    "\"providers\":[\"demo\"]}],\"components\":[{\"id\":\"demo\",\"generation\":1,\"tools\":[\"echo\"]}]}",
    "{\"seq\":2,\"epoch\":5,\"kind\":\"tool.registered\",\"component\":\"demo\",\"name\":\"tick\","
    "\"tool\":{\"name\":\"tick\",\"parameters\":{\"type\":\"object\"}}}",
    NULL
};

//  Tool sets, as ANNOUNCE's tools (test_catalog, test_tooldef)
static const char *s_tools [] = {
    "[{\"name\":\"search\",\"description\":\"Search.\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\"}},\"required\":[\"query\"]},"
    "\"title\":\"Search\",\"outputSchema\":{\"type\":\"object\"},\"strict\":true}]",
    "[{\"name\":\"bad\",\"parameters\":{\"type\":\"string\"}},{\"name\":\"ok\",\"parameters\":{\"type\":\"object\"}},"
    "{\"name\":\"ok\",\"parameters\":{\"type\":\"object\"}},{\"parameters\":{}}]",
    "{\"path\":\"/tmp/x\",\"mode\":\"fast\",\"count\":3,\"ratio\":0.5,\"force\":true,\"tags\":[\"a\",\"b\"],"
    "\"points\":[{\"x\":1,\"y\":2},{\"x\":1.5}],\"origin\":{\"x\":0},\"level\":2.5}",
    "{\"mode\":\"medium\",\"count\":1.5,\"tags\":[1],\"points\":[{\"y\":\"no\"}],\"extra\":null}",
    NULL
};

//  JSON texts and JSON-RPC lines (test_json, tests/mcp)
static const char *s_json [] = {
    "{\"message\":\"hi\",\"n\":[1,2.5,-3,18446744073709551615,true,null,{\"a\":{}}]}\n",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"message\":\"hi\"}}}\n"
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"},"
    "{\"type\":\"image\",\"data\":\"aGk=\",\"mimeType\":\"image/png\"}],\"structuredContent\":{\"a\":1},\"isError\":false}}\n",
    "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32602,\"message\":\"Tool x not found\"}}\r\n\nnot json\n[1]\n",
    NULL
};

static int
s_write (const char *dir, const char *target, int index, const void *data, size_t size)
{
    char path [1024];
    snprintf (path, sizeof (path), "%s/%s", dir, target);
    mkdir (path, 0755);
    snprintf (path, sizeof (path), "%s/%s/seed-%02d", dir, target, index);
    FILE *file = fopen (path, "wb");
    if (!file)
        return -1;
    size_t written = fwrite (data, 1, size, file);
    fclose (file);
    return written == size? 0: -1;
}

//  Packs each JSON text and writes it for every target named.
static int
s_packed (const char *dir, const char *const *texts, const char *const *targets)
{
    for (int index = 0; texts [index]; index++) {
        msgpack_sbuffer sbuf;
        char error [256];
        if (dsh_json_text_to_msgpack (texts [index], &sbuf, error, sizeof (error))) {
            fprintf (stderr, "dsh-fuzz-seeds: seed %d: %s\n", index, error);
            return -1;
        }
        int rc = 0;
        for (int target = 0; targets [target] && rc == 0; target++)
            rc = s_write (dir, targets [target], index, sbuf.data, sbuf.size);
        //  The frames target gets the body inside a whole DEALER message
        if (rc == 0 && sbuf.size < 255) {
            byte frames [300];
            size_t size = 0;
            const char *head [] = { "", DSH_PROTOCOL, "CALL" };
            for (int part = 0; part < 3; part++) {
                frames [size++] = (byte) strlen (head [part]);
                memcpy (frames + size, head [part], strlen (head [part]));
                size += strlen (head [part]);
            }
            frames [size++] = (byte) sbuf.size;
            memcpy (frames + size, sbuf.data, sbuf.size);
            size += sbuf.size;
            rc = s_write (dir, "frames", 100 + index, frames, size);
        }
        msgpack_sbuffer_destroy (&sbuf);
        if (rc)
            return -1;
    }
    return 0;
}

int
main (int argc, char *argv [])
{
    if (argc != 2) {
        fprintf (stderr, "usage: dsh-fuzz-seeds DIR\n");
        return 2;
    }
    const char *dir = argv [1];
    mkdir (dir, 0755);
    const char *body_targets [] = { "body", "repeat", "call", NULL };
    const char *tool_targets [] = { "tooldef", "body", NULL };
    int rc = s_packed (dir, s_bodies, body_targets) || s_packed (dir, s_tools, tool_targets);
    for (int index = 0; rc == 0 && s_json [index]; index++)
        rc = s_write (dir, "json", index, s_json [index], strlen (s_json [index]));
    //  A message of two routing frames and no delimiter, for the splitters
    static const byte routed [] = { 2, 'i', 'd', 3, 'h', 'o', 'p', 4, 'D', 'S', 'H', '1', 1, 0x80 };
    if (rc == 0)
        rc = s_write (dir, "frames", 0, routed, sizeof (routed));
    if (rc)
        fprintf (stderr, "dsh-fuzz-seeds: cannot write under %s\n", dir);
    return rc? 1: 0;
}
