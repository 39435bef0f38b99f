/*  =========================================================================
    dsh-monitor - a live page, Prometheus metrics and JSON for a dsh swarm

        dsh-monitor [--broker ENDPOINT[,ENDPOINT...]] [--http HOST:PORT] [--token-file FILE]
                    [--http-per-address N] [--http-header-ms N]
                    [--poll-ms N] [--events N] [--history-step-ms N] [--history N]
                    [--cert FILE --broker-cert FILE] [-v]

    A watcher: it follows the tool set by the Clone procedure (dsh_watcher)
    and, every --poll-ms, asks the broker for its call statistics (STATS),
    its chain's counters (CHAIN) and each permission stage's pending
    approvals. What it learns goes into the model (dsh_monitor_model), and
    from there to HTTP (dsh_monitor_httpd) as finished documents and
    Server-Sent Events: the page at /, /metrics, /api/tools, /api/stats,
    /api/history (a ring of rate samples, 15 minutes by default, that
    outlives a page's reload) and /api/events. The loop never waits for
    an HTTP client, and a broker that does not answer costs one query
    timeout per poll, said on the page. Each poll also reads the audit
    trail's newest calls (where the broker keeps one), for the latest
    failed calls.

    /api/audit (the page's latest calls) is asked per request: the loop
    takes the requests waiting, asks the broker each different AUDIT query
    once (dsh_monitor_audit), and answers them; while the broker does not
    answer the polls it is not asked, and a query it leaves unanswered is
    the round's last, so a round costs at most one query timeout too.

    Pending calls' arguments are shown only to a viewer that presented a
    token; following a CURVE broker (with a key that may list pending
    approvals) the monitor needs a token, even on loopback.

    The page acts too (dsh_monitor_access says who may): while a page
    session polls /api/approvals, the monitor is an approver of the
    chain's permission stages (dsh_monitor_approver), and the page's
    Allow and Deny go out as DECIDE with who used the page; its Accept of
    a quarantined tool is PINS accept, which the broker allows an admin
    key only. Each poll also asks PINS list (and PINS show of each newly
    quarantined definition, for its diff).
    =========================================================================
*/

#include "dsh_monitor_httpd.h"
#include "dsh_log.h"
#include "dsh_monitor_access.h"
#include "dsh_monitor_approver.h"
#include "dsh_monitor_audit.h"
#include "dsh_monitor_metrics.h"
#include "dsh_monitor_model.h"
#include "dsh_monitor_page.h"

#include "dsh_beacon.h"
#include "dsh_client.h"
#include "dsh_component.h"
#include "dsh_curve.h"
#include "dsh_http.h"
#include "dsh_proto.h"
#include "dsh_sock.h"
#include "dsh_watcher.h"

#include <getopt.h>

#define DEFAULT_HTTP            "127.0.0.1:7580"
#define DEFAULT_POLL_MS         1000
#define DEFAULT_EVENTS          100
//  How long a poll's query waits: past it the broker counts as unreachable
#define QUERY_TIMEOUT_MS        2000
//  An idle event stream gets a comment this often, so that proxies and
//  the server's own connection timeout leave it open
#define KEEPALIVE_MS            15000
//  While the monitor is an approver, the loop wakes at least this often
#define APPROVER_TICK_MS        250
//  Quarantined definitions whose diff one poll asks for (PINS show), at most
#define PIN_SHOWS_PER_POLL      8
//  What a page session polls, and where its Accept goes
#define APPROVALS_PATH          "/api/approvals"
#define PINS_ACCEPT_PATH        "/api/pins/accept"
#define PIN_NAME_MAX            255
//  The audit trail's newest calls each poll reads for the latest failed calls
#define LATEST_CALLS            100
//  ... and after the first poll, the calls since the last one read, at most
#define LATEST_CALLS_MAX        500
//  ... from this long before the newest one read
#define AUDIT_SLACK_MS          2000
//  Where the history is served
#define HISTORY_PATH            "/api/history"

typedef struct {
    const char *broker;
    const char *http;
    const char *token_file;
    dsh_http_limits_t limits;
    int poll_ms;
    int events;
    bool verbose;
    dsh_client_t *client;
    dsh_watcher_t *watcher;
    dsh_monitor_model_t *model;
    dsh_monitor_httpd_t *httpd;
    zpoller_t *poller;
    dsh_monitor_approver_t *approver;
    bool reachable;             //  as of the last poll
    bool polling;               //  in a poll that reached the broker
    json_int_t audit_cursor_ms; //  the newest answeredMs read of the audit trail, 0 before
    bool audit_behind;          //  the last read was full: more calls wait
    int history_step_ms;
    int history_kept;
    int64_t next_poll;          //  monotonic ms
    int64_t watched;            //  a page session's last poll, monotonic ms
    json_t *pins;               //  tool name -> pin, as the last PINS list said
    json_t *pin_shows;          //  tool name -> {offeredDigest, diff}: PINS show of a quarantined definition
} self_t;

//  ---------------------------------------------------------------------
//  Polling the broker

static json_t *
    s_ask_audit (self_t *self, const json_t *query);

//  A query's reply body as JSON without its id, or NULL with the reason.
static json_t *
s_reply_json (dsh_reply_t *reply, const char *expected, char *error, size_t error_size)
{
    json_t *body = NULL;
    if (!streq (dsh_reply_command (reply), expected)) {
        const char *text = dsh_reply_text (reply);
        snprintf (error, error_size, "%s", text? text: dsh_reply_command (reply));
    }
    else
    if (!(body = dsh_reply_json (reply)))
        snprintf (error, error_size, "the %s reply has no JSON form", expected);
    else
        json_object_del (body, "id");
    return body;
}

//  The open requests of every permission stage of stages, each with its
//  stage's name.
static json_t *
s_poll_pending (self_t *self, const json_t *stages)
{
    json_t *pending = json_array ();
    size_t index;
    json_t *stage;
    json_array_foreach (stages, index, stage) {
        const char *name = json_string_value (json_object_get (stage, "name"));
        const char *kind = json_string_value (json_object_get (stage, "kind"));
        if (!name || !kind || !streq (kind, "permission"))
            continue;
        char error [256];
        dsh_reply_t *reply = dsh_client_control (self->client, name, "pending", NULL, QUERY_TIMEOUT_MS,
                                                 error, sizeof error);
        json_t *body = reply && !dsh_reply_is_error (reply)? dsh_reply_json (reply): NULL;
        dsh_reply_destroy (&reply);
        size_t position;
        json_t *request;
        json_array_foreach (json_object_get (body, "data"), position, request)
            if (json_is_object (request)) {
                json_object_set_new (request, "stage", json_string (name));
                json_array_append (pending, request);
            }
        json_decref (body);
    }
    return pending;
}

//  The diff of name's quarantined definition offered_digest: PINS show's,
//  asked once per definition (while *shows_left allows), or NULL.
static json_t *
s_pin_diff (self_t *self, const char *name, const char *offered_digest, int *shows_left)
{
    json_t *shown = json_object_get (self->pin_shows, name);
    const char *digest = json_string_value (json_object_get (shown, "offeredDigest"));
    if (shown && digest && offered_digest && streq (digest, offered_digest))
        return json_object_get (shown, "diff");
    if (*shows_left == 0)
        return NULL;
    (*shows_left)--;
    char error [512] = "";
    json_t *query = json_pack ("{s:s, s:s}", "op", "show", "name", name);
    dsh_reply_t *reply = dsh_client_query (self->client, DSH_PINS, query, QUERY_TIMEOUT_MS, error, sizeof error);
    json_decref (query);
    json_t *body = reply? s_reply_json (reply, DSH_PINS, error, sizeof error): NULL;
    dsh_reply_destroy (&reply);
    json_t *pin = json_object_get (body, "pin");
    json_t *diff = json_object_get (pin, "diff");
    json_t *offered = json_object_get (pin, "offeredDigest");
    if (json_is_string (diff))
        json_object_set_new (self->pin_shows, name, json_pack ("{s:O?, s:O}", "offeredDigest", offered, "diff", diff));
    json_decref (body);
    return json_object_get (json_object_get (self->pin_shows, name), "diff");
}

//  The pins (PINS list) as the poll gives them to the page: {policy,
//  pinned, quarantined: [pin with its diff]}, or pinsError {code, error}.
static void
s_poll_pins (self_t *self, json_t *poll)
{
    char error [512] = "";
    json_t *query = json_pack ("{s:s}", "op", "list");
    dsh_reply_t *reply = dsh_client_query (self->client, DSH_PINS, query, QUERY_TIMEOUT_MS, error, sizeof error);
    json_decref (query);
    json_t *body = reply? s_reply_json (reply, DSH_PINS, error, sizeof error): NULL;
    if (!body) {
        const char *code = reply? dsh_reply_error_code (reply): NULL;
        json_object_set_new (poll, "pinsError", json_pack ("{s:s, s:s}", "code", code? code: "UNAVAILABLE",
                                                           "error", error));
        dsh_reply_destroy (&reply);
        json_object_clear (self->pins);
        return;
    }
    dsh_reply_destroy (&reply);
    json_object_clear (self->pins);
    json_t *quarantined = json_array ();
    json_int_t pinned = 0;
    int shows_left = PIN_SHOWS_PER_POLL;
    size_t index;
    json_t *pin;
    json_array_foreach (json_object_get (body, "pins"), index, pin) {
        const char *name = json_string_value (json_object_get (pin, "name"));
        const char *state = json_string_value (json_object_get (pin, "state"));
        if (!name || !state)
            continue;
        json_object_set (self->pins, name, pin);
        if (!streq (state, "quarantined")) {
            pinned++;
            continue;
        }
        json_t *row = json_copy (pin);
        json_t *diff = s_pin_diff (self, name, json_string_value (json_object_get (pin, "offeredDigest")),
                                   &shows_left);
        if (diff)
            json_object_set (row, "diff", diff);
        json_array_append_new (quarantined, row);
    }
    //  Diffs of definitions no longer quarantined are of no use
    const char *name;
    json_t *shown;
    void *next;
    json_object_foreach_safe (self->pin_shows, next, name, shown) {
        const char *state = json_string_value (json_object_get (json_object_get (self->pins, name), "state"));
        if (!state || !streq (state, "quarantined"))
            json_object_del (self->pin_shows, name);
    }
    json_object_set_new (poll, "pins", json_pack ("{s:O?, s:I, s:o}", "policy", json_object_get (body, "policy"),
                                                  "pinned", pinned, "quarantined", quarantined));
    json_decref (body);
}

//  The newest calls of the audit trail, for the latest failed calls: the
//  poll's latestCalls (records parsed, no arguments), or failuresError
//  {code?, error} when the broker refused or did not answer; nothing
//  with the audit off (STATS says).
static void
s_poll_latest_calls (self_t *self, json_t *poll)
{
    json_t *audit = json_object_get (json_object_get (poll, "stats"), "audit");
    if (!json_is_object (audit))
        return;
    //  The newest at first; then every call since, oldest first, from a
    //  little before the newest seen (a record may be stored a moment
    //  after a later one was answered), or right from it while behind
    json_t *query = self->audit_cursor_ms
        ? json_pack ("{s:i, s:s, s:I}", "limit", LATEST_CALLS_MAX, "order", "oldest", "since",
                     self->audit_behind || self->audit_cursor_ms < AUDIT_SLACK_MS? self->audit_cursor_ms
                     : self->audit_cursor_ms - AUDIT_SLACK_MS)
        : json_pack ("{s:i, s:s}", "limit", LATEST_CALLS, "order", "newest");
    bool oldest_first = self->audit_cursor_ms != 0;
    json_t *answer = s_ask_audit (self, query);
    json_decref (query);
    unsigned int status;
    json_t *view = dsh_monitor_audit_view (answer, false, &status);
    if (json_is_true (json_object_get (view, "ok"))) {
        json_t *records = json_object_get (view, "records");
        json_t *newest_first = json_array ();
        size_t index;
        json_t *row;
        json_array_foreach (records, index, row) {
            json_int_t answered = json_integer_value (json_object_get (json_object_get (row, "record"), "answeredMs"));
            if (answered > self->audit_cursor_ms)
                self->audit_cursor_ms = answered;
            json_array_insert (newest_first, oldest_first? 0: json_array_size (newest_first), row);
        }
        if (!self->audit_cursor_ms)
            self->audit_cursor_ms = zclock_time ();
        self->audit_behind = oldest_first && json_is_true (json_object_get (view, "more"));
        json_object_set_new (poll, "latestCalls", newest_first);
    }
    else
        json_object_set_new (poll, "failuresError", json_pack ("{s:O?, s:O?}", "code", json_object_get (view, "code"),
                                                               "error", json_object_get (view, "error")));
    json_decref (view);
    json_decref (answer);
}

//  One poll: {reachable, error?, stats?, statsError?, ping?, chain?, pending?,
//  pins?, pinsError?}. While a page watches, the approver follows the chain.
static json_t *
s_poll (self_t *self)
{
    char error [512] = "";
    json_t *poll = json_object ();
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_STATS, NULL, QUERY_TIMEOUT_MS, error, sizeof error);
    json_t *stats = reply? s_reply_json (reply, DSH_STATS, error, sizeof error): NULL;
    if (stats)
        json_object_set_new (poll, "stats", stats);
    else
    if (reply) {
        //  A broker without STATS still says how it is
        json_object_set_new (poll, "statsError", json_string (error));
        dsh_reply_destroy (&reply);
        reply = dsh_client_request (self->client, DSH_PING, NULL, QUERY_TIMEOUT_MS, error, sizeof error);
        json_t *ping = reply? s_reply_json (reply, DSH_PONG, error, sizeof error): NULL;
        if (ping)
            json_object_set_new (poll, "ping", ping);
    }
    dsh_reply_destroy (&reply);
    bool reachable = json_object_get (poll, "stats") || json_object_get (poll, "ping");
    json_object_set_new (poll, "reachable", json_boolean (reachable));
    if (!reachable) {
        const char *failure = dsh_client_handshake_failure (self->client);
        json_object_set_new (poll, "error", json_string (failure? failure: error));
        return poll;
    }
    self->polling = true;
    reply = dsh_client_request (self->client, DSH_CHAIN, NULL, QUERY_TIMEOUT_MS, error, sizeof error);
    if (!reply) {
        //  It answered STATS, then went (a broker stopping): the poll says
        //  it does not answer, so that the page keeps the last known chain
        //  rather than show none
        json_object_del (poll, "stats");
        json_object_del (poll, "ping");
        json_object_set_new (poll, "reachable", json_false ());
        json_object_set_new (poll, "error", json_string (error));
        self->polling = false;
        return poll;
    }
    json_t *chain = s_reply_json (reply, DSH_CHAIN, error, sizeof error);
    dsh_reply_destroy (&reply);
    json_t *stages = json_object_get (chain, "stages");
    if (json_is_array (stages)) {
        json_object_set (poll, "chain", stages);
        dsh_monitor_approver_connect (self->approver, self->client, stages, QUERY_TIMEOUT_MS);
        json_object_set_new (poll, "pending", s_poll_pending (self, stages));
    }
    json_decref (chain);
    s_poll_pins (self, poll);
    s_poll_latest_calls (self, poll);
    self->polling = false;
    //  Replies that came after their query gave up are of no use now
    while ((reply = dsh_client_recv (self->client, 0)))
        dsh_reply_destroy (&reply);
    return poll;
}

//  ---------------------------------------------------------------------
//  Questions: the latest calls

//  The broker's answer to an AUDIT query, as dsh_monitor_audit_view takes
//  it: {query, reply}, {query, code, error} or {query, error}. Not asked
//  while the broker is down.
static json_t *
s_ask_audit (self_t *self, const json_t *query)
{
    json_t *answer = json_pack ("{s:O}", "query", (json_t *) query);
    if (!self->reachable && !self->polling) {
        json_object_set_new (answer, "error", json_string ("the broker does not answer the monitor's polls"));
        return answer;
    }
    char error [512] = "";
    dsh_reply_t *reply = dsh_client_query (self->client, DSH_AUDIT, query, QUERY_TIMEOUT_MS, error, sizeof error);
    json_t *body = reply && streq (dsh_reply_command (reply), DSH_AUDIT)? dsh_reply_json (reply): NULL;
    if (body) {
        json_object_del (body, "id");
        json_object_set_new (answer, "reply", body);
    }
    else
    if (reply) {
        const char *code = dsh_reply_error_code (reply);
        const char *text = dsh_reply_text (reply);
        json_object_set_new (answer, "code", json_string (code? code: dsh_reply_command (reply)));
        json_object_set_new (answer, "error", json_string (text? text: "the broker refused the AUDIT query"));
    }
    else
        json_object_set_new (answer, "error", json_string (error));
    dsh_reply_destroy (&reply);
    return answer;
}

//  ---------------------------------------------------------------------
//  Publishing

static void
s_publish_json (self_t *self, dsh_monitor_httpd_viewers_t viewers, const char *path, json_t *doc)
{
    char *text = json_dumps (doc, JSON_COMPACT);
    if (text)
        dsh_monitor_httpd_publish (self->httpd, viewers, path, "application/json", text, strlen (text));
    free (text);
}

static void
s_broadcast (self_t *self, dsh_monitor_httpd_viewers_t viewers, const char *event, json_t *data)
{
    char *text = json_dumps (data, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text)
        dsh_monitor_httpd_broadcast (self->httpd, viewers, event, text);
    free (text);
}

//  The history ring, as the page loads it (no call's arguments in it).
static void
s_publish_history (self_t *self)
{
    json_t *history = dsh_monitor_model_history (self->model);
    s_publish_json (self, DSH_MONITOR_HTTPD_EVERYONE, HISTORY_PATH, history);
    json_decref (history);
}

//  Everything, for a stream's first event and after each resync. Takes
//  tools and stats.
static json_t *
s_snapshot (self_t *self, json_t *tools, json_t *stats)
{
    return json_pack ("{s:o, s:o, s:o, s:{s:i, s:i, s:i}}", "tools", tools, "stats", stats,
                      "events", dsh_monitor_model_events (self->model),
                      "monitor", "pollMs", self->poll_ms, "eventsKept", self->events,
                      "queryTimeoutMs", QUERY_TIMEOUT_MS);
}

//  Publishes the documents after the model changed, and sends event to
//  every stream: "tools" or "stats" (the model's), or NULL for a resync,
//  which sends the whole snapshot instead. Calls' arguments are for
//  viewers that presented the token only: the others get the stats
//  without them, in the documents and on their streams.
static void
s_publish (self_t *self, const char *event)
{
    json_t *tools = dsh_monitor_model_tools (self->model);
    json_t *stats [2] = { dsh_monitor_model_stats_public (self->model), dsh_monitor_model_stats (self->model) };
    s_publish_json (self, DSH_MONITOR_HTTPD_EVERYONE, "/api/tools", tools);
    char *metrics = dsh_monitor_metrics (tools, stats [0]);
    dsh_monitor_httpd_publish (self->httpd, DSH_MONITOR_HTTPD_EVERYONE, "/metrics", DSH_MONITOR_METRICS_TYPE,
                               metrics, strlen (metrics));
    free (metrics);
    for (int trusted = 0; trusted < 2; trusted++) {
        dsh_monitor_httpd_viewers_t viewers = trusted? DSH_MONITOR_HTTPD_TRUSTED: DSH_MONITOR_HTTPD_UNTRUSTED;
        s_publish_json (self, viewers, "/api/stats", stats [trusted]);
        json_t *snapshot = s_snapshot (self, json_incref (tools), json_incref (stats [trusted]));
        char *text = json_dumps (snapshot, JSON_COMPACT);
        if (text)
            dsh_monitor_httpd_set_first (self->httpd, viewers, "snapshot", text);
        if (!event && text)
            dsh_monitor_httpd_broadcast (self->httpd, viewers, "snapshot", text);
        free (text);
        json_decref (snapshot);
        if (event && streq (event, "stats"))
            s_broadcast (self, viewers, "stats", stats [trusted]);
    }
    if (event && streq (event, "tools"))
        s_broadcast (self, DSH_MONITOR_HTTPD_EVERYONE, "tools", tools);
    json_decref (tools);
    json_decref (stats [0]);
    json_decref (stats [1]);
}

//  Takes what the watcher has: change events go to the streams one by
//  one, then the tool set they left; a resync sends a new snapshot.
static void
s_take_notices (self_t *self)
{
    json_t *notice;
    json_t *events = json_array ();
    bool resynced = false;
    while ((notice = dsh_watcher_recv (self->watcher, 0))) {
        const json_t *event = dsh_monitor_model_notice (self->model, notice, zclock_time ());
        if (event)
            json_array_append (events, (json_t *) event);
        else {
            resynced = true;
            json_array_clear (events);
            if (self->verbose)
                zsys_info ("dsh-monitor: synchronised with %s (epoch %" JSON_INTEGER_FORMAT ", seq %"
                           JSON_INTEGER_FORMAT ")", json_string_value (json_object_get (notice, "broker")),
                           json_integer_value (json_object_get (notice, "epoch")),
                           json_integer_value (json_object_get (notice, "seq")));
        }
        json_decref (notice);
    }
    if (resynced)
        s_publish (self, NULL);
    size_t index;
    json_t *event;
    json_array_foreach (events, index, event)
        s_broadcast (self, DSH_MONITOR_HTTPD_EVERYONE, "event", event);
    if (json_array_size (events))
        s_publish (self, "tools");
    json_decref (events);
}

static void
s_take_poll (self_t *self)
{
    json_t *poll = s_poll (self);
    bool reachable = json_is_true (json_object_get (poll, "reachable"));
    if (reachable != self->reachable) {
        if (reachable)
            zsys_info ("dsh-monitor: the broker answers");
        else
            zsys_warning ("dsh-monitor: the broker does not answer: %s",
                          json_string_value (json_object_get (poll, "error")));
        self->reachable = reachable;
    }
    dsh_monitor_model_poll (self->model, poll, zclock_mono (), zclock_time ());
    json_decref (poll);
    s_publish (self, "stats");
    //  A new sample of the history: the document a page loads, and the
    //  sample to the pages open
    const json_t *sample = dsh_monitor_model_history_added (self->model);
    if (sample) {
        s_publish_history (self);
        s_broadcast (self, DSH_MONITOR_HTTPD_EVERYONE, "sample", (json_t *) sample);
    }
}

//  ---------------------------------------------------------------------
//  Questions and the page's actions

//  What one round of questions shares: the AUDIT answers asked so far,
//  and whether the broker left one unanswered.
typedef struct {
    json_t *audit_answers;
    bool silent;
} s_round_t;

static void
s_answer_json (self_t *self, uint64_t id, unsigned int status, json_t *doc)
{
    char *text = json_dumps (doc, JSON_COMPACT);
    const char *body = text? text: "{\"ok\":false,\"error\":\"the answer cannot be encoded\"}";
    dsh_monitor_httpd_answer (self->httpd, id, text? status: 500, "application/json", body, strlen (body));
    free (text);
    json_decref (doc);
}

//  The latest calls. A page asks at each poll, and pages with the same
//  filters ask the same query: the broker is asked each different one
//  once a round, and after a query it left unanswered it is not asked
//  again this round.
static void
s_answer_audit (self_t *self, json_t *query, const dsh_monitor_httpd_question_t *question, s_round_t *round)
{
    json_t *answer = NULL;
    size_t index;
    json_t *known;
    json_array_foreach (round->audit_answers, index, known)
        if (json_equal (json_object_get (known, "query"), query)) {
            answer = known;
            break;
        }
    if (!answer) {
        answer = round->silent? json_pack ("{s:O, s:s}", "query", query, "error", "the broker did not answer a "
                                           "query just before this one"): s_ask_audit (self, query);
        round->silent |= !json_object_get (answer, "reply") && !json_object_get (answer, "code");
        json_array_append_new (round->audit_answers, answer);
    }
    unsigned int status;
    json_t *view = dsh_monitor_audit_view (answer, question->trusted, &status);
    s_answer_json (self, question->id, status, view);
}

//  A page session's poll: it is watching, so the monitor is an approver
//  (from the next poll, which comes now); it is shown the open requests,
//  arguments and all, each with its tool's pin, and the approver's state.
static void
s_answer_approvals (self_t *self, json_t *asked, const dsh_monitor_httpd_question_t *question, s_round_t *round)
{
    (void) asked;
    (void) round;
    self->watched = zclock_mono ();
    if (!dsh_monitor_approver_active (self->approver)) {
        dsh_monitor_approver_set_active (self->approver, true);
        self->next_poll = self->watched;
    }
    json_t *pending = dsh_monitor_model_pending (self->model);
    size_t index;
    json_t *request;
    json_array_foreach (pending, index, request) {
        json_t *pin = json_object_get (self->pins, json_string_value (json_object_get (request, "tool")));
        json_t *copy = json_copy (request);
        json_object_set (copy, "pin", pin? pin: json_null ());
        json_array_set_new (pending, index, copy);
    }
    json_t *doc = json_pack ("{s:b, s:s, s:I, s:o, s:o, s:b}", "ok", 1, "actor", question->actor,
                             "nowMs", (json_int_t) zclock_time (), "approver",
                             dsh_monitor_approver_state (self->approver), "pending", pending,
                             "reachable", self->reachable);
    s_answer_json (self, question->id, 200, doc);
}

//  Allow or Deny from the page: answered when the stage's outcome comes.
static void
s_answer_decide (self_t *self, json_t *decision, const dsh_monitor_httpd_question_t *question, s_round_t *round)
{
    (void) round;
    char error [512];
    if (dsh_monitor_approver_decide (self->approver, question->id, decision, question->actor, error, sizeof error))
        s_answer_json (self, question->id, 503, json_pack ("{s:b, s:s, s:s}", "ok", 0, "code", "UNAVAILABLE",
                                                           "error", error));
    else
        zsys_info ("dsh-monitor: %s decides request %s of stage \"%s\": %s%s%s", question->actor,
                   json_string_value (json_object_get (decision, "id")),
                   json_string_value (json_object_get (decision, "stage")),
                   json_string_value (json_object_get (decision, "outcome")),
                   json_object_get (decision, "scope")? ", scope ": "",
                   json_object_get (decision, "scope")? json_string_value (json_object_get (decision, "scope")): "");
}

//  An Accept's body: {name, digest}, the definition the page showed.
static json_t *
s_check_accept (const json_t *body, char *error, size_t error_size)
{
    const char *name = json_string_value (json_object_get (body, "name"));
    const char *digest = json_string_value (json_object_get (body, "digest"));
    if (json_object_size (body) != 2 || !name || !*name || strlen (name) > PIN_NAME_MAX
    ||  !digest || !*digest || strlen (digest) > 64 || strspn (digest, "0123456789abcdef") != strlen (digest)) {
        snprintf (error, error_size, "an accept is {name, digest}: the tool's name and the hex digest of the "
                  "definition shown");
        return NULL;
    }
    return json_pack ("{s:s, s:s, s:s}", "op", "accept", "name", name, "digest", digest);
}

//  Accept from the page: PINS accept, as the monitor's key may (an admin's).
static void
s_answer_accept (self_t *self, json_t *query, const dsh_monitor_httpd_question_t *question, s_round_t *round)
{
    (void) round;
    char error [512] = "";
    dsh_reply_t *reply = dsh_client_query (self->client, DSH_PINS, query, QUERY_TIMEOUT_MS, error, sizeof error);
    json_t *body = reply && streq (dsh_reply_command (reply), DSH_PINS)? dsh_reply_json (reply): NULL;
    if (body) {
        json_decref (body);
        zsys_info ("dsh-monitor: %s accepted the definition %.12s of \"%s\"", question->actor,
                   json_string_value (json_object_get (query, "digest")),
                   json_string_value (json_object_get (query, "name")));
        s_answer_json (self, question->id, 200, json_pack ("{s:b}", "ok", 1));
        //  The page's list of quarantined tools follows at once
        self->next_poll = zclock_mono ();
    }
    else {
        const char *code = reply? dsh_reply_error_code (reply): NULL;
        const char *text = reply? dsh_reply_text (reply): NULL;
        unsigned int status = !reply? 504: code && streq (code, DSH_E_FORBIDDEN)? 403: 409;
        s_answer_json (self, question->id, status, json_pack ("{s:b, s:s, s:s}", "ok", 0,
                                                              "code", code? code: reply? "ERROR": "TIMEOUT",
                                                              "error", text? text: error));
    }
    dsh_reply_destroy (&reply);
}

//  A session's poll takes no query parameters.
static json_t *
s_check_nothing (const json_t *parameters, char *error, size_t error_size)
{
    if (json_object_size (parameters)) {
        snprintf (error, error_size, "%s takes no query parameters", APPROVALS_PATH);
        return NULL;
    }
    return json_object ();
}

typedef void (s_answer_fn) (self_t *self, json_t *asked, const dsh_monitor_httpd_question_t *question,
                            s_round_t *round);

//  Every path the loop answers per request.
static const struct {
    const char *path;
    dsh_monitor_httpd_access_t access;
    dsh_monitor_httpd_check_fn *check;
    s_answer_fn *answer;
} s_questions [] = {
    { DSH_MONITOR_AUDIT_PATH, DSH_MONITOR_HTTPD_ASK_READ, dsh_monitor_audit_query, s_answer_audit },
    { APPROVALS_PATH, DSH_MONITOR_HTTPD_ASK_SESSION, s_check_nothing, s_answer_approvals },
    { DSH_MONITOR_APPROVER_DECIDE_PATH, DSH_MONITOR_HTTPD_ASK_ACTION, dsh_monitor_approver_check_decision,
      s_answer_decide },
    { PINS_ACCEPT_PATH, DSH_MONITOR_HTTPD_ASK_ACTION, s_check_accept, s_answer_accept },
};
#define QUESTION_PATHS (sizeof s_questions / sizeof s_questions [0])

//  Answers every question waiting.
static void
s_take_questions (self_t *self)
{
    s_round_t round = { .audit_answers = json_array () };
    dsh_monitor_httpd_question_t question;
    json_t *asked;
    while ((asked = dsh_monitor_httpd_recv (self->httpd, &question))) {
        size_t index = 0;
        while (index < QUESTION_PATHS && !streq (s_questions [index].path, question.path))
            index++;
        assert (index < QUESTION_PATHS);
        s_questions [index].answer (self, asked, &question, &round);
        json_decref (asked);
    }
    json_decref (round.audit_answers);
}

//  What the approver learnt: requests opened and resolved go to the
//  model (and the page at once), the outcomes of the page's decisions to
//  their questions.
static void
s_take_approver (self_t *self)
{
    json_t *notices = dsh_monitor_approver_take (self->approver);
    bool changed = false;
    size_t index;
    json_t *notice;
    json_array_foreach (notices, index, notice) {
        const char *kind = json_string_value (json_object_get (notice, "kind"));
        const char *stage = json_string_value (json_object_get (notice, "stage"));
        if (streq (kind, "pending")) {
            dsh_monitor_model_pending_open (self->model, stage, json_object_get (notice, "request"));
            changed = true;
        }
        else
        if (streq (kind, "resolved")) {
            dsh_monitor_model_pending_close (self->model, stage, json_string_value (json_object_get (notice, "id")));
            changed = true;
        }
        else {
            uint64_t ticket = (uint64_t) json_integer_value (json_object_get (notice, "ticket"));
            const char *code = json_string_value (json_object_get (notice, "code"));
            unsigned int status = json_is_true (json_object_get (notice, "ok"))? 200
                                : streq (code, "TIMEOUT")? 504: streq (code, "UNAVAILABLE")? 503: 409;
            json_t *doc = json_deep_copy (notice);
            json_object_del (doc, "kind");
            json_object_del (doc, "ticket");
            s_answer_json (self, ticket, status, doc);
        }
    }
    json_decref (notices);
    if (changed)
        s_publish (self, "stats");
}

//  No page has polled for a while: nobody is there to decide.
static void
s_check_watched (self_t *self)
{
    if (dsh_monitor_approver_active (self->approver)
    &&  zclock_mono () - self->watched > DSH_MONITOR_APPROVER_WATCHED_MS) {
        dsh_monitor_approver_set_active (self->approver, false);
        if (self->verbose)
            zsys_info ("dsh-monitor: no page watches: no longer an approver");
    }
}

static void
s_run (self_t *self)
{
    int questions = dsh_monitor_httpd_fd (self->httpd);
    self->poller = zpoller_new (dsh_watcher_sock (self->watcher), &questions, NULL);
    self->approver = dsh_monitor_approver_new (self->poller);
    self->next_poll = zclock_mono ();
    int64_t next_keepalive = zclock_mono () + KEEPALIVE_MS;
    while (!zsys_interrupted) {
        int64_t wait_ms = self->next_poll - zclock_mono ();
        if (dsh_monitor_approver_active (self->approver) && wait_ms > APPROVER_TICK_MS)
            wait_ms = APPROVER_TICK_MS;
        void *which = zpoller_wait (self->poller, wait_ms > 0? (int) wait_ms: 0);
        if (zpoller_terminated (self->poller))
            break;
        //  All, whichever woke us: none waits behind a stream of another
        if (which) {
            dsh_monitor_approver_recv (self->approver, which);
            s_take_notices (self);
            s_take_questions (self);
        }
        dsh_monitor_approver_tick (self->approver);
        s_check_watched (self);
        s_take_approver (self);
        int64_t now = zclock_mono ();
        if (now >= self->next_poll) {
            s_take_poll (self);
            self->next_poll = zclock_mono () + self->poll_ms;
            s_take_approver (self);
        }
        if (now >= next_keepalive) {
            dsh_monitor_httpd_broadcast (self->httpd, DSH_MONITOR_HTTPD_EVERYONE, NULL, NULL);
            next_keepalive = now + KEEPALIVE_MS;
        }
    }
    //  The GOODBYE: with nobody left to ask, the stages deny at once again
    dsh_monitor_approver_destroy (&self->approver);
    zpoller_destroy (&self->poller);
}

//  ---------------------------------------------------------------------
//  Start and options

static void
s_usage (FILE *stream)
{
    fprintf (stream,
        "usage: dsh-monitor [--broker ENDPOINT[,ENDPOINT...]] [--http HOST:PORT] [--token-file FILE]\n"
        "                   [--http-per-address N] [--http-header-ms N]\n"
        "                   [--poll-ms N] [--events N] [--history-step-ms N] [--history N]\n"
        "                   [--cert FILE --broker-cert FILE] [-v]\n"
        "Watch a dsh swarm: a live page at /, Prometheus metrics at /metrics, JSON at\n"
        "/api/tools, /api/stats, /api/history (15 minutes of rates) and /api/audit (the\n"
        "latest calls, from the broker's audit trail), Server-Sent Events at /api/events.\n"
        "While a page is open the monitor is an approver of the chain's permission stages:\n"
        "the page's Allow and Deny decide pending calls, and its Accept releases a\n"
        "quarantined tool (PINS accept; an admin key's).\n"
        "  --broker ENDPOINT[,ENDPOINT...]\n"
        "                     the broker's front endpoint, or a list of brokers followed one\n"
        "                     at a time (default: $DSH_BROKER, else %s)\n"
        "  --http HOST:PORT   where to serve HTTP (default %s; port 0: any free one)\n"
        "  --token-file FILE  bearer tokens, one a line: \"NAME TOKEN\", or \"TOKEN\" alone (named\n"
        "                     \"token\"); every request must carry one; required when HOST is\n"
        "                     not loopback or with --cert; a request with one is shown pending\n"
        "                     calls' arguments, and the page's Allow, Deny and Accept act as\n"
        "                     its NAME (default: none: only a loopback peer acts, as \"loopback\")\n"
        "  --http-per-address N\n"
        "                     HTTP connections open at once from one IP address, 0 for no\n"
        "                     limit, up to %d (default %d)\n"
        "  --http-header-ms N a request's headers must all be in within N ms of its\n"
        "                     connection's accept (or of its previous request's end), else\n"
        "                     the connection is closed, %d to %d (default %d)\n"
        "  --poll-ms N        how often to ask the broker for STATS, CHAIN and pending\n"
        "                     approvals, 50 to 3600000 (default %d)\n"
        "  --events N         the last change events kept for the page, 1 to 100000\n"
        "                     (default %d)\n"
        "  --history-step-ms N\n"
        "                     the history's charts (/api/history) take a sample of the rates\n"
        "                     every N ms, %d to 3600000 (default %d)\n"
        "  --history N        samples kept, 1 to %d (default %d: 15 minutes)\n"
        "  --cert FILE        our CURVE keypair (default: $DSH_CERT)\n"
        "  --broker-cert FILE the broker's public certificate (default: $DSH_BROKER_CERT)\n"
        "  -v, --verbose      log each resynchronisation on stderr (default: off)\n"
        "  -h, --help         show this help\n"
        "Ready, it prints \"dsh-monitor: serving http://HOST:PORT/\" on stdout.\n",
        DSH_DEFAULT_ENDPOINT, DEFAULT_HTTP, DSH_HTTP_PER_ADDRESS_MAX, DSH_MONITOR_HTTPD_PER_ADDRESS,
        DSH_HTTP_HEADER_TIMEOUT_MS_MIN, DSH_HTTP_HEADER_TIMEOUT_MS_MAX, DSH_HTTP_HEADER_TIMEOUT_MS,
        DEFAULT_POLL_MS, DEFAULT_EVENTS, DSH_MONITOR_HISTORY_STEP_MS_MIN, DSH_MONITOR_HISTORY_STEP_MS,
        DSH_MONITOR_HISTORY_MAX, DSH_MONITOR_HISTORY_KEPT);
}

//  A number option within [min, max], or -1.
static int
s_number (const char *text, long min, long max)
{
    char *end = NULL;
    long value = strtol (text, &end, 10);
    return end == text || *end || value < min || value > max? -1: (int) value;
}

int
main (int argc, char *argv [])
{
    static const struct option options [] = {
        { "broker", required_argument, NULL, 'b' },
        { "http", required_argument, NULL, 'H' },
        { "token-file", required_argument, NULL, 'T' },
        { "http-per-address", required_argument, NULL, 'A' },
        { "http-header-ms", required_argument, NULL, 'D' },
        { "poll-ms", required_argument, NULL, 'p' },
        { "events", required_argument, NULL, 'e' },
        { "history-step-ms", required_argument, NULL, 'S' },
        { "history", required_argument, NULL, 'L' },
        { "cert", required_argument, NULL, 'C' },
        { "broker-cert", required_argument, NULL, 'K' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    self_t self = { .http = DEFAULT_HTTP, .poll_ms = DEFAULT_POLL_MS, .events = DEFAULT_EVENTS,
                    .history_step_ms = DSH_MONITOR_HISTORY_STEP_MS, .history_kept = DSH_MONITOR_HISTORY_KEPT,
                    .limits = { .per_address = DSH_MONITOR_HTTPD_PER_ADDRESS,
                                .header_timeout_ms = DSH_HTTP_HEADER_TIMEOUT_MS } };
    int number;
    //  Usage errors read as every dsh program's
    const dsh_component_options_t program = { .program = "dsh-monitor" };
    const char *cert = NULL, *broker_cert = NULL;
    opterr = 0;
    int option;
    while ((option = getopt_long (argc, argv, ":vh", options, NULL)) != -1) {
        switch (option) {
            case 'b': self.broker = optarg; break;
            case 'H': self.http = optarg; break;
            case 'T': self.token_file = optarg; break;
            case 'C': cert = optarg; break;
            case 'K': broker_cert = optarg; break;
            case 'v': self.verbose = true; break;
            case 'h': s_usage (stdout); return 0;
            case 'p':
                if ((self.poll_ms = s_number (optarg, 50, 3600000)) < 0)
                    return dsh_component_usage_error (&program, "--poll-ms needs a number from 50 to 3600000, "
                                                      "not \"%s\"", optarg);
                break;
            case 'A':
                if ((number = s_number (optarg, 0, DSH_HTTP_PER_ADDRESS_MAX)) < 0)
                    return dsh_component_usage_error (&program, "--http-per-address needs a number from 0 to %d, "
                                                      "not \"%s\"", DSH_HTTP_PER_ADDRESS_MAX, optarg);
                self.limits.per_address = (unsigned int) number;
                break;
            case 'D':
                if ((number = s_number (optarg, DSH_HTTP_HEADER_TIMEOUT_MS_MIN, DSH_HTTP_HEADER_TIMEOUT_MS_MAX)) < 0)
                    return dsh_component_usage_error (&program, "--http-header-ms needs a number from %d to %d, "
                                                      "not \"%s\"", DSH_HTTP_HEADER_TIMEOUT_MS_MIN,
                                                      DSH_HTTP_HEADER_TIMEOUT_MS_MAX, optarg);
                self.limits.header_timeout_ms = (unsigned int) number;
                break;
            case 'S':
                if ((self.history_step_ms = s_number (optarg, DSH_MONITOR_HISTORY_STEP_MS_MIN, 3600000)) < 0)
                    return dsh_component_usage_error (&program, "--history-step-ms needs a number from %d to "
                                                      "3600000, not \"%s\"", DSH_MONITOR_HISTORY_STEP_MS_MIN, optarg);
                break;
            case 'L':
                if ((self.history_kept = s_number (optarg, 1, DSH_MONITOR_HISTORY_MAX)) < 0)
                    return dsh_component_usage_error (&program, "--history needs a number from 1 to %d, not \"%s\"",
                                                      DSH_MONITOR_HISTORY_MAX, optarg);
                break;
            case 'e':
                if ((self.events = s_number (optarg, 1, 100000)) < 0)
                    return dsh_component_usage_error (&program, "--events needs a number from 1 to 100000, "
                                                      "not \"%s\"", optarg);
                break;
            case ':':
                return dsh_component_usage_error (&program, "option %s needs a value", argv [optind - 1]);
            default:
                if (optopt)
                    return dsh_component_usage_error (&program, "unknown option -%c", optopt);
                return dsh_component_usage_error (&program, "unknown option %s", argv [optind - 1]);
        }
    }
    if (optind < argc)
        return dsh_component_usage_error (&program, "unexpected argument \"%s\"", argv [optind]);
    char error [512];
    if (dsh_curve_setup (cert, broker_cert, error, sizeof error))
        return dsh_component_usage_error (&program, "%s", error);
    //  A CURVE swarm is one whose data is not for every local process, and
    //  our key may list pending approvals, arguments and all
    if (dsh_curve_on () && !self.token_file)
        return dsh_component_usage_error (&program, "following a CURVE broker (--cert or $DSH_CERT) needs "
                                          "--token-file, even on loopback: the page shows what our key sees");
    if (!self.broker) {
        self.broker = getenv ("DSH_BROKER");
        if (self.broker && !*self.broker)
            self.broker = NULL;
    }
    zlistx_t *brokers = dsh_sock_brokers (self.broker, error, sizeof error);
    if (!brokers)
        return dsh_component_usage_error (&program, "%s", error);
    zlistx_destroy (&brokers);
    //  stdout says one thing, that the monitor is ready
    zsys_set_logstream (dsh_log_stream (stderr));
    zsys_init ();
    zsys_set_logstream (dsh_log_stream (stderr));
    dsh_monitor_tokens_t *tokens = NULL;
    if (self.token_file && !(tokens = dsh_monitor_tokens_read (self.token_file, error, sizeof error))) {
        fprintf (stderr, "dsh-monitor: %s\n", error);
        return 2;
    }
    self.httpd = dsh_monitor_httpd_new (self.http, &tokens, &self.limits, error, sizeof error);
    if (!self.httpd) {
        fprintf (stderr, "dsh-monitor: --http %s: %s\n", self.http, error);
        //  Refused by the rules is a usage error; a port in use is not
        return strstr (error, "in use")? 1: 2;
    }
    //  Beacon entries become the brokers heard now
    char *resolved = NULL;
    if (self.broker && strstr (self.broker, "beacon")) {
        resolved = dsh_beacon_resolve (self.broker, 0, error, sizeof error);
        if (!resolved) {
            fprintf (stderr, "dsh-monitor: %s\n", error);
            dsh_monitor_httpd_destroy (&self.httpd);
            return 3;
        }
        self.broker = resolved;
    }
    self.client = dsh_client_new (self.broker);
    self.watcher = self.client? dsh_watcher_new (self.broker): NULL;
    if (!self.watcher) {
        fprintf (stderr, "dsh-monitor: cannot connect to the broker\n");
        dsh_client_destroy (&self.client);
        dsh_monitor_httpd_destroy (&self.httpd);
        zstr_free (&resolved);
        return 1;
    }
    self.model = dsh_monitor_model_new ((size_t) self.events);
    dsh_monitor_model_set_history (self.model, self.history_step_ms, (size_t) self.history_kept);
    self.pins = json_object ();
    self.pin_shows = json_object ();
    for (size_t index = 0; index < QUESTION_PATHS; index++)
        dsh_monitor_httpd_ask (self.httpd, s_questions [index].path, s_questions [index].access,
                               s_questions [index].check);
    dsh_monitor_httpd_publish (self.httpd, DSH_MONITOR_HTTPD_EVERYONE, "/", "text/html; charset=utf-8",
                               dsh_monitor_page, dsh_monitor_page_size);
    s_publish (&self, NULL);
    s_publish_history (&self);
    //  The host as given, the port as bound
    const char *colon = strrchr (self.http, ':');
    printf ("dsh-monitor: serving http://%.*s:%d/\n", (int) (colon - self.http), self.http,
            dsh_monitor_httpd_port (self.httpd));
    fflush (stdout);
    s_run (&self);
    dsh_monitor_httpd_destroy (&self.httpd);
    dsh_watcher_destroy (&self.watcher);
    dsh_client_destroy (&self.client);
    dsh_monitor_model_destroy (&self.model);
    json_decref (self.pins);
    json_decref (self.pin_shows);
    zstr_free (&resolved);
    return 0;
}
