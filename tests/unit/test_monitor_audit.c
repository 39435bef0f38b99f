/*  =========================================================================
    test_monitor_audit - dsh-monitor's latest calls without sockets: the
    AUDIT query an HTTP request's parameters make (and the ones refused),
    and what the page is shown of the broker's reply, its ERROR or its
    silence, with a call's arguments only for a trusted viewer
    =========================================================================
*/

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <czmq.h>
#include <string.h>

#include "dsh_monitor_audit.h"

static json_t *
s_json (const char *text)
{
    json_error_t error;
    json_t *json = json_loads (text, JSON_ALLOW_NUL, &error);
    if (!json)
        fail_msg ("bad JSON in the test: %s", error.text);
    return json;
}

//  The query for parameters (JSON text), or NULL with the error in error.
static json_t *
s_query (const char *parameters, char *error, size_t error_size)
{
    json_t *given = s_json (parameters);
    *error = 0;
    json_t *query = dsh_monitor_audit_query (given, error, error_size);
    json_decref (given);
    return query;
}

//  Whether parameters are refused with an error that says because.
static void
s_assert_refused (const char *parameters, const char *because)
{
    char error [256];
    json_t *query = s_query (parameters, error, sizeof error);
    if (query)
        fail_msg ("%s was taken", parameters);
    if (!strstr (error, because))
        fail_msg ("%s: \"%s\" does not say \"%s\"", parameters, error, because);
}

static void
test_query (void **state)
{
    (void) state;
    char error [256];
    //  Nothing asked: the newest DSH_MONITOR_AUDIT_LIMIT
    json_t *query = s_query ("{}", error, sizeof error);
    json_t *expected = json_pack ("{s:i, s:s}", "limit", DSH_MONITOR_AUDIT_LIMIT, "order", "newest");
    assert_true (json_equal (query, expected));
    json_decref (expected);
    json_decref (query);
    //  The filters, exact, and an empty one is none; untrusted text is a
    //  name like any other
    query = s_query ("{\"agent\": \"planner-7\", \"tool\": \"<script>x</script>\", \"outcome\": \"\","
                     " \"limit\": \"500\"}", error, sizeof error);
    expected = s_json ("{\"agent\": \"planner-7\", \"tool\": \"<script>x</script>\", \"limit\": 500,"
                       " \"order\": \"newest\"}");
    assert_true (json_equal (query, expected));
    json_decref (expected);
    json_decref (query);
    //  The page's form, every field empty: the defaults
    query = s_query ("{\"agent\": \"\", \"tool\": \"\", \"outcome\": \"\", \"limit\": \"\"}", error, sizeof error);
    expected = json_pack ("{s:i, s:s}", "limit", DSH_MONITOR_AUDIT_LIMIT, "order", "newest");
    assert_true (json_equal (query, expected));
    json_decref (expected);
    json_decref (query);
    query = s_query ("{\"outcome\": \"TOOL_FAILED\"}", error, sizeof error);
    assert_string_equal (json_string_value (json_object_get (query, "outcome")), "TOOL_FAILED");
    json_decref (query);
    query = s_query ("{\"outcome\": \"ok\", \"limit\": \"1\"}", error, sizeof error);
    assert_string_equal (json_string_value (json_object_get (query, "outcome")), "ok");
    json_decref (query);
    char *longest = zsys_sprintf ("{\"agent\": \"%0*d\"}", DSH_MONITOR_AUDIT_FILTER_MAX, 0);
    query = s_query (longest, error, sizeof error);
    assert_non_null (query);
    json_decref (query);
    zstr_free (&longest);
}

static void
test_query_refused (void **state)
{
    (void) state;
    char *too_long = zsys_sprintf ("{\"tool\": \"%0*d\"}", DSH_MONITOR_AUDIT_FILTER_MAX + 1, 0);
    s_assert_refused (too_long, "tool is 256 bytes long: at most 255");
    zstr_free (&too_long);
    s_assert_refused ("{\"agent\": \"a\\nb\"}", "agent has a control character");
    s_assert_refused ("{\"agent\": \"a\\u0000b\"}", "agent has a control character");
    s_assert_refused ("{\"tool\": \"a\\u007fb\"}", "tool has a control character");
    s_assert_refused ("{\"outcome\": \"Ok\"}", "outcome is \"ok\" or an error code");
    s_assert_refused ("{\"outcome\": \"TOOL FAILED\"}", "outcome is \"ok\" or an error code");
    s_assert_refused ("{\"outcome\": \"1ERROR\"}", "outcome is \"ok\" or an error code");
    for (size_t index = 0; index < 5; index++) {
        const char *limits [] = { "0", "501", "ten", "10x", "-1" };
        char *parameters = zsys_sprintf ("{\"limit\": \"%s\"}", limits [index]);
        s_assert_refused (parameters, "limit is a number from 1 to 500");
        zstr_free (&parameters);
    }
    s_assert_refused ("{\"limit\": \"99999999999999999999\"}", "limit is a number from 1 to 500");
    s_assert_refused ("{\"since\": \"1\"}", "unknown parameter \"since\": /api/audit takes agent, tool, outcome, "
                      "callId and limit");
    //  A name not fit to be quoted is not
    s_assert_refused ("{\"<b>\\\"x\": \"1\"}", "an unknown parameter: /api/audit takes");
    s_assert_refused ("{\"agent\": 7}", "agent is not text");
}

//  An AUDIT reply body of two rows: a call with arguments and an approval,
//  and a row whose stored text is not a JSON object.
static json_t *
s_reply (void)
{
    json_t *first = s_json ("{\"v\": 1, \"kind\": \"call\", \"tool\": \"<img src=x onerror=alert(1)>\","
                            " \"agent\": \"a\", \"outcome\": \"ok\", \"durationUs\": 1500, \"answeredMs\": 5,"
                            " \"callId\": \"c-1\", \"arguments\": {\"secret\": 4242},"
                            " \"approval\": {\"request\": \"p-1\", \"approver\": \"ops\", \"decision\": \"allowed\","
                            " \"atMs\": 4}}");
    char *text = json_dumps (first, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref (first);
    json_t *reply = json_pack ("{s:b, s:[{s:s, s:i, s:s, s:s, s:s}, {s:s, s:i, s:s, s:s, s:s}], s:b}", "ok", 1,
                               "records", "broker", "b:1", "seq", 2, "prev", "p2", "hash", "h2", "record", text,
                               "broker", "b:1", "seq", 1, "prev", "p1", "hash", "h1", "record", "[not a record",
                               "more", 1);
    zstr_free (&text);
    return reply;
}

static void
test_view (void **state)
{
    (void) state;
    json_t *query = s_json ("{\"limit\": 2, \"order\": \"newest\"}");
    json_t *answer = json_pack ("{s:O, s:o}", "query", query, "reply", s_reply ());
    for (int trusted = 0; trusted < 2; trusted++) {
        unsigned int status = 0;
        json_t *view = dsh_monitor_audit_view (answer, trusted, &status);
        assert_int_equal (status, 200);
        assert_true (json_is_true (json_object_get (view, "ok")));
        assert_true (json_is_true (json_object_get (view, "more")));
        assert_true (json_equal (json_object_get (view, "query"), query));
        json_t *records = json_object_get (view, "records");
        assert_int_equal (json_array_size (records), 2);
        json_t *row = json_array_get (records, 0);
        assert_string_equal (json_string_value (json_object_get (row, "broker")), "b:1");
        assert_int_equal (json_integer_value (json_object_get (row, "seq")), 2);
        assert_string_equal (json_string_value (json_object_get (row, "hash")), "h2");
        assert_string_equal (json_string_value (json_object_get (row, "prev")), "p2");
        json_t *record = json_object_get (row, "record");
        //  Parsed, the untrusted text as it was: escaping it is the page's
        assert_string_equal (json_string_value (json_object_get (record, "tool")), "<img src=x onerror=alert(1)>");
        assert_string_equal (json_string_value (json_object_get (json_object_get (record, "approval"), "approver")),
                             "ops");
        assert_int_equal (json_integer_value (json_object_get (record, "durationUs")), 1500);
        //  The arguments only for a viewer with the token
        json_t *arguments = json_object_get (record, "arguments");
        if (trusted)
            assert_int_equal (json_integer_value (json_object_get (arguments, "secret")), 4242);
        else {
            assert_null (arguments);
            char *text = json_dumps (view, JSON_COMPACT);
            assert_null (strstr (text, "4242"));
            free (text);
        }
        assert_true (json_is_null (json_object_get (json_array_get (records, 1), "record")));
        json_decref (view);
    }
    json_decref (answer);

    //  The store could not be read: the broker answered ok false
    unsigned int status = 0;
    answer = json_pack ("{s:O, s:{s:b, s:s}}", "query", query, "reply", "ok", 0, "message", "disk I/O error");
    json_t *view = dsh_monitor_audit_view (answer, false, &status);
    assert_int_equal (status, 502);
    assert_true (json_is_false (json_object_get (view, "ok")));
    assert_string_equal (json_string_value (json_object_get (view, "error")), "disk I/O error");
    assert_null (json_object_get (view, "code"));
    json_decref (view);
    json_decref (answer);
    json_decref (query);
}

static void
test_view_refused (void **state)
{
    (void) state;
    unsigned int status = 0;
    //  A key without the auditor role: said, with what to do about it
    json_t *answer = s_json ("{\"query\": {\"limit\": 50}, \"code\": \"FORBIDDEN\", \"error\": \"Error: key"
                             " abc... (role approver) may not send AUDIT: it needs an auditor key\"}");
    json_t *view = dsh_monitor_audit_view (answer, true, &status);
    assert_int_equal (status, 502);
    assert_true (json_is_false (json_object_get (view, "ok")));
    assert_string_equal (json_string_value (json_object_get (view, "code")), "FORBIDDEN");
    const char *error = json_string_value (json_object_get (view, "error"));
    assert_non_null (strstr (error, "needs an admin or auditor key"));
    assert_non_null (strstr (error, "(role approver) may not send AUDIT"));
    assert_null (json_object_get (view, "records"));
    json_decref (view);
    json_decref (answer);
    answer = s_json ("{\"query\": {\"limit\": 50}, \"code\": \"AUDIT_UNAVAILABLE\", \"error\": \"Error: the audit"
                     " is off\"}");
    view = dsh_monitor_audit_view (answer, false, &status);
    assert_int_equal (status, 502);
    assert_non_null (strstr (json_string_value (json_object_get (view, "error")), "keeps no audit trail"));
    json_decref (view);
    json_decref (answer);
    //  No answer at all
    answer = s_json ("{\"query\": {\"limit\": 50}, \"error\": \"no reply within 2000 ms\"}");
    view = dsh_monitor_audit_view (answer, false, &status);
    assert_int_equal (status, 503);
    assert_null (json_object_get (view, "code"));
    assert_string_equal (json_string_value (json_object_get (view, "error")), "no reply within 2000 ms");
    assert_int_equal (json_integer_value (json_object_get (json_object_get (view, "query"), "limit")), 50);
    json_decref (view);
    json_decref (answer);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_query),
        cmocka_unit_test (test_query_refused),
        cmocka_unit_test (test_view),
        cmocka_unit_test (test_view_refused),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
