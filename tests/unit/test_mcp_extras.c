/*  =========================================================================
    test_mcp_extras - dsh_mcp_extras and dsh_mcp_gateway: a gateway entry
    within its size limit, lists gathered from gateways and paged,
    requests routed to the gateway that owns the URI or prompt, and
    gateway results turned back into JSON-RPC answers, and log polls
    following each gateway (dsh_mcp_logs)
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsh_mcp_extras.h"
#include "dsh_mcp_gateway.h"
#include "dsh_mcp_logs.h"

static json_t *
s_parse (const char *text)
{
    json_error_t error;
    json_t *value = json_loads (text, 0, &error);
    if (!value)
        fail_msg ("bad test JSON %s: %s", text, error.text);
    return value;
}

static json_t *
s_plan (const json_t *entries, const char *method, const char *params)
{
    json_t *parsed = params? s_parse (params): NULL;
    json_t *plan = dsh_mcp_extras_plan (entries, method, parsed);
    json_decref (parsed);
    assert_non_null (plan);
    return plan;
}

static void
s_assert_json (const json_t *value, const char *expected)
{
    json_t *want = s_parse (expected);
    if (!json_equal ((json_t *) value, want)) {
        char *got = json_dumps (value, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        fail_msg ("got %s, want %s", got, expected);
    }
    json_decref (want);
}

//  Two bridged servers and an ordinary tool.
static json_t *
s_entries (void)
{
    return s_parse (
        "[{\"name\": \"echo\", \"parameters\": {\"type\": \"object\"}},"
        " {\"name\": \"mcp-gateway.a\", \"parameters\": {\"type\": \"object\"}, \"mcpGateway\": {"
        "   \"server\": \"a\", \"prefix\": \"a__\","
        "   \"capabilities\": {\"resources\": {}, \"prompts\": {}, \"completions\": {}, \"logging\": {}},"
        "   \"resources\": [{\"uri\": \"file:///a/one\", \"name\": \"one\"}],"
        "   \"resourceTemplates\": [{\"uriTemplate\": \"a://item/{id}\", \"name\": \"item\"}],"
        "   \"prompts\": [{\"name\": \"greet\"}]}},"
        " {\"name\": \"mcp-gateway.b\", \"parameters\": {\"type\": \"object\"}, \"mcpGateway\": {"
        "   \"server\": \"b\", \"prefix\": \"\","
        "   \"capabilities\": {\"resources\": {}, \"prompts\": {}},"
        "   \"resources\": [{\"uri\": \"b://x\", \"name\": \"x\"}],"
        "   \"prompts\": [{\"name\": \"greet\"}]}},"
        " {\"name\": \"not-a-gateway\", \"parameters\": {\"type\": \"object\"}, \"mcpGateway\": {"
        "   \"resources\": [{\"uri\": \"evil://\"}]}}]");
}

static void
test_lists_gather_every_gateway (void **state)
{
    (void) state;
    json_t *entries = s_entries ();
    json_t *plan = s_plan (entries, "resources/list", NULL);
    s_assert_json (plan, "{\"result\": {\"resources\": [{\"uri\": \"file:///a/one\", \"name\": \"one\"},"
                         " {\"uri\": \"b://x\", \"name\": \"x\"}]}}");
    json_decref (plan);
    plan = s_plan (entries, "prompts/list", "{}");
    s_assert_json (plan, "{\"result\": {\"prompts\": [{\"name\": \"a__greet\"}, {\"name\": \"greet\"}]}}");
    json_decref (plan);
    plan = s_plan (entries, "resources/templates/list", NULL);
    s_assert_json (plan, "{\"result\": {\"resourceTemplates\": [{\"uriTemplate\": \"a://item/{id}\", \"name\": \"item\"}]}}");
    json_decref (plan);
    plan = s_plan (entries, "resources/list", "{\"cursor\": \"x\"}");
    assert_int_equal (json_integer_value (json_object_get (json_object_get (plan, "error"), "code")), -32602);
    json_decref (plan);
    json_decref (entries);
}

static void
test_lists_are_paged (void **state)
{
    (void) state;
    json_t *resources = json_array ();
    for (int index = 0; index < 250; index++) {
        char uri [32];
        snprintf (uri, sizeof uri, "r://%d", index);
        json_array_append_new (resources, json_pack ("{s:s, s:s}", "uri", uri, "name", uri));
    }
    json_t *entries = json_pack ("[{s:s, s:{s:s, s:{s:{}}, s:o}}]", "name", "mcp-gateway.big", "mcpGateway",
                                 "prefix", "", "capabilities", "resources", "resources", resources);
    size_t seen = 0;
    json_t *cursor = NULL;
    for (int page = 0; page < 10; page++) {
        json_t *params = cursor? json_pack ("{s:O}", "cursor", cursor): json_object ();
        json_t *plan = dsh_mcp_extras_plan (entries, "resources/list", params);
        json_decref (params);
        json_t *result = json_object_get (plan, "result");
        seen += json_array_size (json_object_get (result, "resources"));
        json_decref (cursor);
        cursor = json_incref (json_object_get (result, "nextCursor"));
        json_decref (plan);
        if (!cursor)
            break;
    }
    assert_int_equal (seen, 250);
    json_decref (entries);
}

static void
test_requests_go_to_their_owner (void **state)
{
    (void) state;
    json_t *entries = s_entries ();
    //  A listed URI, a templated one, one only b lists
    json_t *plan = s_plan (entries, "resources/read", "{\"uri\": \"file:///a/one\"}");
    s_assert_json (plan, "{\"call\": {\"tool\": \"mcp-gateway.a\", \"arguments\": {\"method\": \"resources/read\","
                         " \"params\": {\"uri\": \"file:///a/one\"}}}}");
    json_decref (plan);
    plan = s_plan (entries, "resources/read", "{\"uri\": \"a://item/7\"}");
    assert_string_equal (json_string_value (json_object_get (json_object_get (plan, "call"), "tool")), "mcp-gateway.a");
    json_decref (plan);
    plan = s_plan (entries, "resources/read", "{\"uri\": \"b://x\"}");
    assert_string_equal (json_string_value (json_object_get (json_object_get (plan, "call"), "tool")), "mcp-gateway.b");
    json_decref (plan);
    //  Two servers with resources and no owner: MCP's resource-not-found
    plan = s_plan (entries, "resources/read", "{\"uri\": \"evil://\"}");
    s_assert_json (plan, "{\"error\": {\"code\": -32002, \"message\": \"Resource not found: evil://\","
                         " \"data\": {\"uri\": \"evil://\"}}}");
    json_decref (plan);
    //  The prompt's name loses the gateway's prefix on the way
    plan = s_plan (entries, "prompts/get", "{\"name\": \"a__greet\", \"arguments\": {\"who\": \"me\"}}");
    s_assert_json (plan, "{\"call\": {\"tool\": \"mcp-gateway.a\", \"arguments\": {\"method\": \"prompts/get\","
                         " \"params\": {\"name\": \"greet\", \"arguments\": {\"who\": \"me\"}}}}}");
    json_decref (plan);
    plan = s_plan (entries, "prompts/get", "{\"name\": \"greet\"}");
    assert_string_equal (json_string_value (json_object_get (json_object_get (plan, "call"), "tool")), "mcp-gateway.b");
    json_decref (plan);
    plan = s_plan (entries, "prompts/get", "{\"name\": \"nothing\"}");
    assert_int_equal (json_integer_value (json_object_get (json_object_get (plan, "error"), "code")), -32602);
    json_decref (plan);
    plan = s_plan (entries, "prompts/get", "[1]");
    assert_int_equal (json_integer_value (json_object_get (json_object_get (plan, "error"), "code")), -32602);
    json_decref (plan);
    json_decref (entries);
}

static void
test_completion_and_log_level (void **state)
{
    (void) state;
    json_t *entries = s_entries ();
    json_t *plan = s_plan (entries, "completion/complete",
                           "{\"ref\": {\"type\": \"ref/prompt\", \"name\": \"a__greet\"},"
                           " \"argument\": {\"name\": \"who\", \"value\": \"m\"}}");
    s_assert_json (json_object_get (json_object_get (json_object_get (plan, "call"), "arguments"), "params"),
                   "{\"ref\": {\"type\": \"ref/prompt\", \"name\": \"greet\"}, \"argument\": {\"name\": \"who\", \"value\": \"m\"}}");
    json_decref (plan);
    //  b offers no completions: nothing to complete, not an error
    plan = s_plan (entries, "completion/complete",
                   "{\"ref\": {\"type\": \"ref/resource\", \"uri\": \"b://x\"}, \"argument\": {\"name\": \"n\", \"value\": \"\"}}");
    s_assert_json (plan, "{\"result\": {\"completion\": {\"values\": [], \"total\": 0, \"hasMore\": false}}}");
    json_decref (plan);
    plan = s_plan (entries, "completion/complete", "{\"ref\": {\"type\": \"ref/other\"}}");
    assert_non_null (json_object_get (plan, "error"));
    json_decref (plan);
    //  setLevel: answered at once, sent to the one server that logs
    plan = s_plan (entries, "logging/setLevel", "{\"level\": \"debug\"}");
    s_assert_json (plan, "{\"result\": {}, \"also\": [{\"tool\": \"mcp-gateway.a\", \"arguments\":"
                         " {\"method\": \"logging/setLevel\", \"params\": {\"level\": \"debug\"}}}]}");
    json_decref (plan);
    plan = s_plan (entries, "logging/setLevel", "{\"level\": \"loud\"}");
    assert_non_null (json_object_get (plan, "error"));
    json_decref (plan);
    assert_true (dsh_mcp_extras_handles ("resources/read"));
    assert_false (dsh_mcp_extras_handles ("tools/list"));
    assert_false (dsh_mcp_extras_handles (NULL));
    json_decref (entries);
}

static void
test_gateway_results_become_answers (void **state)
{
    (void) state;
    json_t *body = s_parse ("{\"callId\": \"c\", \"isError\": false, \"content\": [{\"type\": \"text\", \"text\": \"x\"}],"
                            " \"structuredContent\": {\"contents\": [{\"uri\": \"u\", \"text\": \"t\"}]}}");
    json_t *answer = dsh_mcp_extras_response (body);
    s_assert_json (answer, "{\"result\": {\"contents\": [{\"uri\": \"u\", \"text\": \"t\"}]}}");
    json_decref (answer);
    json_decref (body);
    //  The server's error, code and data kept
    body = s_parse ("{\"isError\": true, \"content\": [{\"type\": \"text\", \"text\": \"Error: gone\"}],"
                    " \"structuredContent\": {\"error\": {\"code\": -32002, \"message\": \"gone\", \"data\": {\"uri\": \"u\"}}}}");
    answer = dsh_mcp_extras_response (body);
    s_assert_json (answer, "{\"error\": {\"code\": -32002, \"message\": \"gone\", \"data\": {\"uri\": \"u\"}}}");
    json_decref (answer);
    json_decref (body);
    //  A dsh failure before the server (denied, timed out)
    body = s_parse ("{\"isError\": true, \"content\": [{\"type\": \"text\", \"text\": \"Error: denied\"}]}");
    answer = dsh_mcp_extras_response (body);
    s_assert_json (answer, "{\"error\": {\"code\": -32603, \"message\": \"Error: denied\"}}");
    json_decref (answer);
    json_decref (body);
    answer = dsh_mcp_extras_response (NULL);
    assert_non_null (json_object_get (answer, "error"));
    json_decref (answer);
}

static void
test_gateway_entry_fits (void **state)
{
    (void) state;
    json_t *capabilities = s_parse ("{\"resources\": {}, \"prompts\": {}, \"logging\": {}}");
    json_t *resources = json_array ();
    for (int index = 0; index < 5000; index++) {
        char uri [64];
        snprintf (uri, sizeof uri, "file:///data/file-%05d.txt", index);
        json_array_append_new (resources, json_pack ("{s:s, s:s}", "uri", uri, "name", uri + 14));
    }
    json_t *catalog = json_pack ("{s:o, s:[{s:s}]}", "resources", resources, "prompts", "name", "p");
    json_t *entry = dsh_mcp_gateway_entry ("mcp-gateway.x", "x", "x__", capabilities, catalog, 60000);
    char *text = json_dumps (entry, JSON_COMPACT);
    assert_true (strlen (text) <= 60000);
    free (text);
    json_t *gateway = json_object_get (entry, "mcpGateway");
    s_assert_json (json_object_get (gateway, "truncated"), "[\"resources\"]");
    size_t kept = json_array_size (json_object_get (gateway, "resources"));
    assert_true (kept > 100 && kept < 5000);
    assert_int_equal (json_array_size (json_object_get (gateway, "prompts")), 1);
    //  The forwarded methods are those the server's capabilities allow
    s_assert_json (json_object_get (json_object_get (json_object_get (entry, "parameters"), "properties"), "method"),
                   "{\"type\": \"string\", \"enum\": [\"resources/list\", \"resources/templates/list\","
                   " \"resources/read\", \"prompts/list\", \"prompts/get\", \"logging/setLevel\", \"dsh/logging/poll\"]}");
    json_decref (entry);
    //  A small catalog is whole
    entry = dsh_mcp_gateway_entry ("mcp-gateway.x", "x", "", capabilities, catalog, 10 * 1000 * 1000);
    assert_null (json_object_get (json_object_get (entry, "mcpGateway"), "truncated"));
    assert_int_equal (json_array_size (json_object_get (json_object_get (entry, "mcpGateway"), "resources")), 5000);
    json_decref (entry);
    json_decref (catalog);
    json_decref (capabilities);
    assert_string_equal (dsh_mcp_gateway_capability ("completion/complete"), "completions");
    assert_null (dsh_mcp_gateway_capability ("tools/call"));
}

static void
test_roots_are_file_uris (void **state)
{
    (void) state;
    char dir [] = "/tmp/dsh roots %XXXXXX";
    assert_non_null (mkdtemp (dir));
    const char *dirs [] = { dir, "/no/such/dir/here", NULL };
    json_t *answer = dsh_mcp_gateway_roots (dirs);
    json_t *roots = json_object_get (answer, "roots");
    assert_int_equal (json_array_size (roots), 1);
    const char *uri = json_string_value (json_object_get (json_array_get (roots, 0), "uri"));
    assert_non_null (strstr (uri, "file:///"));
    assert_non_null (strstr (uri, "/dsh%20roots%20%25"));
    assert_string_equal (json_string_value (json_object_get (json_array_get (roots, 0), "name")), strrchr (dir, '/') + 1);
    json_decref (answer);
    rmdir (dir);
}

static void
test_logs_follow_each_gateway (void **state)
{
    (void) state;
    json_t *entries = s_entries ();
    dsh_mcp_logs_t *logs = dsh_mcp_logs_new (5000);
    //  Nothing is followed before the client sets a level
    json_t *polls = dsh_mcp_logs_polls (logs, entries);
    assert_int_equal (json_array_size (polls), 0);
    json_decref (polls);
    assert_int_equal (dsh_mcp_logs_set_level (logs, "loud"), -1);
    assert_int_equal (dsh_mcp_logs_set_level (logs, "warning"), 0);
    //  Only a logs (b has no logging); once in flight, not again
    polls = dsh_mcp_logs_polls (logs, entries);
    s_assert_json (polls, "[{\"tool\": \"mcp-gateway.a\", \"arguments\": {\"method\": \"dsh/logging/poll\","
                          " \"params\": {\"after\": 0, \"waitMs\": 5000}}}]");
    json_decref (polls);
    polls = dsh_mcp_logs_polls (logs, entries);
    assert_int_equal (json_array_size (polls), 0);
    json_decref (polls);
    //  Messages under the level are dropped; the next poll follows the cursor
    json_t *body = s_parse ("{\"isError\": false, \"structuredContent\": {\"next\": 7, \"missed\": 0, \"messages\": ["
                            " {\"seq\": 6, \"params\": {\"level\": \"info\", \"data\": \"quiet\"}},"
                            " {\"seq\": 7, \"params\": {\"level\": \"error\", \"logger\": \"x\", \"data\": \"loud\"}}]}}");
    json_t *answer = dsh_mcp_logs_answer (logs, "mcp-gateway.a", body);
    s_assert_json (answer, "{\"notifications\": [{\"level\": \"error\", \"logger\": \"x\", \"data\": \"loud\"}],"
                           " \"poll\": {\"tool\": \"mcp-gateway.a\", \"arguments\": {\"method\": \"dsh/logging/poll\","
                           " \"params\": {\"after\": 7, \"waitMs\": 5000}}}}");
    json_decref (answer);
    json_decref (body);
    //  A failed poll forgets the gateway; the next listing finds it again
    body = s_parse ("{\"isError\": true, \"content\": []}");
    answer = dsh_mcp_logs_answer (logs, "mcp-gateway.a", body);
    s_assert_json (answer, "{\"notifications\": []}");
    json_decref (answer);
    json_decref (body);
    answer = dsh_mcp_logs_answer (logs, "mcp-gateway.unknown", NULL);
    s_assert_json (answer, "{\"notifications\": []}");
    json_decref (answer);
    polls = dsh_mcp_logs_polls (logs, entries);
    assert_int_equal (json_array_size (polls), 1);
    json_decref (polls);
    dsh_mcp_logs_destroy (&logs);
    dsh_mcp_logs_destroy (&logs);
    json_decref (entries);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_lists_gather_every_gateway),
        cmocka_unit_test (test_lists_are_paged),
        cmocka_unit_test (test_requests_go_to_their_owner),
        cmocka_unit_test (test_completion_and_log_level),
        cmocka_unit_test (test_gateway_results_become_answers),
        cmocka_unit_test (test_gateway_entry_fits),
        cmocka_unit_test (test_roots_are_file_uris),
        cmocka_unit_test (test_logs_follow_each_gateway),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
