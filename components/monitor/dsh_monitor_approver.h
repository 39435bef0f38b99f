/*  =========================================================================
    dsh_monitor_approver - the monitor as an approver, for the page

    While a page is watching (a session polled within the last 3 s), the
    monitor is an approver of every permission stage of the chain it
    follows, as `dsh approver` is: a DEALER on each stage's approvals
    socket (found with CONTROL approvals; under CURVE with the server key
    the broker relays), APPROVER every second, each PENDING and RESOLVED
    taken in. When no page is watching, it says GOODBYE and closes its
    sockets, so that a call that needs a human is refused at once, as it
    would be with nobody there.

    A decision from the page goes out as DECIDE on the socket of the stage
    that asked, and its outcome (the RESOLVED of that request, the stage's
    ERROR, or no answer within 3 s) comes back as a notice naming the
    page's question. What the loop learns is in notices, JSON it takes
    after each call:
        {kind: "pending", stage, request}   a request (PENDING's body) is open
        {kind: "resolved", stage, id, outcome, grant?}
        {kind: "decided", ticket, ok: true, outcome, grant?}
        {kind: "decided", ticket, ok: false, code, error}
    It knows no HTTP and no model.
    =========================================================================
*/

#ifndef DSH_MONITOR_APPROVER_H_INCLUDED
#define DSH_MONITOR_APPROVER_H_INCLUDED

#include "dsh_client.h"

#include <czmq.h>
#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

//  How long a page's poll counts as a page watching; the APPROVER period;
//  how long a stage (or a decision's outcome) may be silent.
#define DSH_MONITOR_APPROVER_WATCHED_MS 3000
#define DSH_MONITOR_APPROVER_HELLO_MS   1000
#define DSH_MONITOR_APPROVER_SILENT_MS  3000

//  Where a page decides (POST, an action), and the longest id and stage
//  name a decision names.
#define DSH_MONITOR_APPROVER_DECIDE_PATH "/api/decide"
#define DSH_MONITOR_APPROVER_ID_MAX     64
#define DSH_MONITOR_APPROVER_STAGE_MAX  255
//  The longest grant a page may ask for, in minutes (the stage has its
//  own bound, grant_max_minutes, and says so past it).
#define DSH_MONITOR_APPROVER_MINUTES_MAX 525600

typedef struct _dsh_monitor_approver_t dsh_monitor_approver_t;

//  The decision (caller owns) an action's body asks for (borrowed):
//  {stage, id, outcome: "allow"|"deny", scope?: "once"|"tool"|"arguments",
//  minutes?: 1 to DSH_MONITOR_APPROVER_MINUTES_MAX, argumentsDigest?,
//  definitionDigest?: hex}; a grant (scope tool or arguments) needs allow.
//  NULL with why in error for anything else, another key included.
json_t *
    dsh_monitor_approver_check_decision (const json_t *body, char *error, size_t error_size);

//  An approver that is not active yet. Its sockets join poller (borrowed,
//  which must outlive it) while they are open.
dsh_monitor_approver_t *
    dsh_monitor_approver_new (zpoller_t *poller);

//  Say GOODBYE if active, close every socket; safe twice.
void
    dsh_monitor_approver_destroy (dsh_monitor_approver_t **self_p);

//  Whether a page is watching. Becoming inactive says GOODBYE and closes
//  the sockets (their waiting decisions are told so); becoming active
//  connects at the next dsh_monitor_approver_connect.
void
    dsh_monitor_approver_set_active (dsh_monitor_approver_t *self, bool active);

//  Whether it is active.
bool
    dsh_monitor_approver_active (dsh_monitor_approver_t *self);

//  While active, after a poll: stages are CHAIN's (borrowed); for each
//  permission stage without a socket that hears from it, asks client's
//  broker for its approvals endpoint and connects; a stage no longer in
//  the chain loses its socket.
void
    dsh_monitor_approver_connect (dsh_monitor_approver_t *self, dsh_client_t *client, const json_t *stages,
                                  int timeout_ms);

//  Heartbeats and deadlines: call it at least every 250 ms.
void
    dsh_monitor_approver_tick (dsh_monitor_approver_t *self);

//  Takes the messages waiting on which if it is one of our sockets (a
//  poller's answer); returns whether it was.
bool
    dsh_monitor_approver_recv (dsh_monitor_approver_t *self, void *which);

//  Send DECIDE for decision (borrowed: {stage, id, outcome, scope?,
//  minutes?, argumentsDigest?, definitionDigest?}) with by, who used the
//  page; a notice named ticket says how it went. 0, or -1 with why in
//  error (nothing sent: not active, no socket for that stage).
int
    dsh_monitor_approver_decide (dsh_monitor_approver_t *self, uint64_t ticket, const json_t *decision,
                                 const char *by, char *error, size_t error_size);

//  The notices since the last call, oldest first (caller owns).
json_t *
    dsh_monitor_approver_take (dsh_monitor_approver_t *self);

//  What the page says of it (caller owns): {active, stages: [{stage,
//  endpoint, heard}]}, heard whether the stage answered in the last 3 s.
json_t *
    dsh_monitor_approver_state (dsh_monitor_approver_t *self);

#ifdef __cplusplus
}
#endif

#endif
