/*  =========================================================================
    dsh_monitor_audit - the latest calls, as dsh-monitor shows them
    =========================================================================
*/

#include "dsh_monitor_audit.h"
#include "dsh_proto.h"

#include <czmq.h>

//  The longest outcome: an error code
#define OUTCOME_MAX             64

//  The filters a query may give, each an AUDIT field of the same name
static const char *s_filters [] = { "agent", "tool", "outcome", "callId" };

//  A parameter's name as an error message may quote it: short, printable
//  ASCII, else not at all.
static const char *
s_quotable (const char *name)
{
    size_t size = strlen (name);
    if (size == 0 || size > 32)
        return NULL;
    for (size_t index = 0; index < size; index++)
        if (name [index] < 0x21 || name [index] > 0x7e || name [index] == '"')
            return NULL;
    return name;
}

static bool
s_has_control (const char *text, size_t size)
{
    for (size_t index = 0; index < size; index++)
        if ((unsigned char) text [index] < 0x20 || text [index] == 0x7f)
            return true;
    return false;
}

static bool
s_is_outcome (const char *text, size_t size)
{
    if (size == 2 && memcmp (text, "ok", 2) == 0)
        return true;
    if (size == 0 || size > OUTCOME_MAX || !(text [0] >= 'A' && text [0] <= 'Z'))
        return false;
    for (size_t index = 0; index < size; index++)
        if (!((text [index] >= 'A' && text [index] <= 'Z') || (text [index] >= '0' && text [index] <= '9')
           || text [index] == '_'))
            return false;
    return true;
}

//  Sets query's filter from its parameter; -1 with why in error.
static int
s_take_filter (json_t *query, const char *name, const json_t *value, char *error, size_t error_size)
{
    const char *text = json_string_value (value);
    size_t size = json_string_length (value);
    if (size == 0)
        return 0;               //  the page's empty field: no filter
    if (size > DSH_MONITOR_AUDIT_FILTER_MAX) {
        snprintf (error, error_size, "%s is %zu bytes long: at most %d", name, size, DSH_MONITOR_AUDIT_FILTER_MAX);
        return -1;
    }
    if (s_has_control (text, size)) {
        snprintf (error, error_size, "%s has a control character", name);
        return -1;
    }
    if (streq (name, "outcome") && !s_is_outcome (text, size)) {
        snprintf (error, error_size, "outcome is \"ok\" or an error code (A-Z, 0-9 and _, such as TOOL_FAILED)");
        return -1;
    }
    json_object_set (query, name, (json_t *) value);
    return 0;
}

static int
s_take_limit (json_t *query, const json_t *value, char *error, size_t error_size)
{
    const char *text = json_string_value (value);
    size_t size = json_string_length (value);
    if (size == 0)
        return 0;               //  the default
    long limit = 0;
    bool digits = size > 0 && size <= 6;
    for (size_t index = 0; digits && index < size; index++) {
        digits = text [index] >= '0' && text [index] <= '9';
        limit = limit * 10 + (text [index] - '0');
    }
    if (!digits || limit < 1 || limit > DSH_MONITOR_AUDIT_LIMIT_MAX) {
        snprintf (error, error_size, "limit is a number from 1 to %d", DSH_MONITOR_AUDIT_LIMIT_MAX);
        return -1;
    }
    json_object_set_new (query, "limit", json_integer (limit));
    return 0;
}

json_t *
dsh_monitor_audit_query (const json_t *parameters, char *error, size_t error_size)
{
    assert (json_is_object (parameters));
    json_t *query = json_pack ("{s:i, s:s}", "limit", DSH_MONITOR_AUDIT_LIMIT, "order", "newest");
    const char *name;
    json_t *value;
    json_object_foreach ((json_t *) parameters, name, value) {
        bool filter = false;
        for (size_t index = 0; index < sizeof s_filters / sizeof s_filters [0]; index++)
            filter |= streq (name, s_filters [index]);
        int rc = -1;
        if (!json_is_string (value))
            snprintf (error, error_size, "%s is not text", s_quotable (name)? name: "a parameter");
        else
        if (filter)
            rc = s_take_filter (query, name, value, error, error_size);
        else
        if (streq (name, "limit"))
            rc = s_take_limit (query, value, error, error_size);
        else
        if (s_quotable (name))
            snprintf (error, error_size, "unknown parameter \"%s\": %s takes agent, tool, outcome, callId "
                      "and limit", name, DSH_MONITOR_AUDIT_PATH);
        else
            snprintf (error, error_size, "an unknown parameter: %s takes agent, tool, outcome, callId and limit",
                      DSH_MONITOR_AUDIT_PATH);
        if (rc) {
            json_decref (query);
            return NULL;
        }
    }
    return query;
}

//  ---------------------------------------------------------------------
//  The answer

//  One row of the reply as the page reads it.
static json_t *
s_row (const json_t *row, bool trusted)
{
    const char *text = json_string_value (json_object_get (row, "record"));
    json_t *record = text? json_loads (text, JSON_REJECT_DUPLICATES, NULL): NULL;
    if (!json_is_object (record)) {
        json_decref (record);
        record = json_null ();
    }
    //  As the pending approvals: a viewer without the token sees no call's arguments
    if (!trusted)
        json_object_del (record, "arguments");
    json_t *view = json_object ();
    static const char *fields [] = { "broker", "seq", "prev", "hash" };
    for (size_t index = 0; index < sizeof fields / sizeof fields [0]; index++) {
        json_t *value = json_object_get (row, fields [index]);
        if (value)
            json_object_set (view, fields [index], value);
    }
    json_object_set_new (view, "record", record);
    return view;
}

static json_t *
s_failed (const json_t *query, const char *code, const char *error)
{
    json_t *view = json_pack ("{s:b, s:O, s:s}", "ok", 0, "query", query? (json_t *) query: json_null (),
                              "error", error);
    if (code)
        json_object_set_new (view, "code", json_string (code));
    return view;
}

json_t *
dsh_monitor_audit_view (const json_t *answer, bool trusted, unsigned int *status_p)
{
    assert (answer);
    assert (status_p);
    const json_t *query = json_object_get (answer, "query");
    const json_t *reply = json_object_get (answer, "reply");
    const char *code = json_string_value (json_object_get (answer, "code"));
    const char *error = json_string_value (json_object_get (answer, "error"));
    if (!reply) {
        *status_p = code? 502: 503;
        if (!code)
            return s_failed (query, NULL, error? error: "the broker did not answer");
        //  What the operator can do about it, beside the broker's own words
        char *said = NULL;
        if (streq (code, DSH_E_FORBIDDEN))
            said = zsys_sprintf ("the monitor's key may not read the audit trail: it needs an admin or auditor "
                                 "key (the broker said: %s)", error? error: "forbidden");
        else
        if (streq (code, DSH_E_AUDIT_UNAVAILABLE))
            said = zsys_sprintf ("this broker keeps no audit trail, or cannot read its store now (the broker "
                                 "said: %s)", error? error: "unavailable");
        else
            said = zsys_sprintf ("%s", error? error: "the broker refused the query");
        json_t *view = s_failed (query, code, said);
        zstr_free (&said);
        return view;
    }
    if (!json_is_true (json_object_get (reply, "ok"))) {
        *status_p = 502;
        const char *message = json_string_value (json_object_get (reply, "message"));
        return s_failed (query, NULL, message? message: "the broker could not read its audit store");
    }
    json_t *records = json_array ();
    size_t index;
    json_t *row;
    json_array_foreach (json_object_get (reply, "records"), index, row)
        if (json_is_object (row))
            json_array_append_new (records, s_row (row, trusted));
    *status_p = 200;
    return json_pack ("{s:b, s:O, s:o, s:b}", "ok", 1, "query", query? (json_t *) query: json_null (),
                      "records", records, "more", json_is_true (json_object_get (reply, "more")));
}
