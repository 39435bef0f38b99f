/*  =========================================================================
    dsh_monitor_audit - the latest calls, as dsh-monitor shows them

    The page's latest-calls table is one AUDIT query (PROTOCOL.md, AUDIT)
    per viewer's filters, asked of the broker by the monitor's loop. This
    module is both ends of it: it checks what an HTTP request asks for and
    makes the AUDIT body from it, and it turns what the broker answered
    (its AUDIT reply, an ERROR, or nothing) into the JSON the page reads,
    each record parsed from its stored text. It reads JSON and gives JSON;
    it knows no sockets.
    =========================================================================
*/

#ifndef DSH_MONITOR_AUDIT_H_INCLUDED
#define DSH_MONITOR_AUDIT_H_INCLUDED

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Where the monitor answers the query.
#define DSH_MONITOR_AUDIT_PATH          "/api/audit"
//  The records asked for when the query says nothing, and at most.
#define DSH_MONITOR_AUDIT_LIMIT         50
#define DSH_MONITOR_AUDIT_LIMIT_MAX     500
//  The longest filter, in bytes (AUDIT's own bound).
#define DSH_MONITOR_AUDIT_FILTER_MAX    255

//  The AUDIT body (caller owns; newest first) for an HTTP query's
//  parameters ({name: value}, UTF-8 strings, borrowed): agent, tool,
//  outcome and callId (exact filters; absent or "" for none) and limit (1 to
//  DSH_MONITOR_AUDIT_LIMIT_MAX; absent or "": DSH_MONITOR_AUDIT_LIMIT). NULL
//  with why in error for any other parameter, a filter longer than
//  DSH_MONITOR_AUDIT_FILTER_MAX or with a control character, an outcome
//  that is neither "ok" nor an error code (A-Z, 0-9, _), or a limit that
//  is not a number in range.
json_t *
    dsh_monitor_audit_query (const json_t *parameters, char *error, size_t error_size);

//  What the page is shown of answer (borrowed): {query, reply} with the
//  broker's AUDIT reply body, {query, code, error} with its ERROR's code
//  and text, or {query, error} when no answer came. Gives (caller owns)
//  {ok: true, query, records: [{broker, seq, prev, hash, record}], more},
//  each record parsed (null if its text is not a JSON object) and, unless
//  trusted, without the call's arguments; or {ok: false, query, code?,
//  error} with what the broker said or why it said nothing. *status_p is
//  the HTTP status: 200, 502 (the broker refused or failed the query) or
//  503 (no answer).
json_t *
    dsh_monitor_audit_view (const json_t *answer, bool trusted, unsigned int *status_p);

#ifdef __cplusplus
}
#endif

#endif
