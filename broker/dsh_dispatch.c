/*  =========================================================================
    dsh_dispatch - a decided call to a component, and its answer

    Part of the registry actor (dsh_registry.c; state in
    dsh_registry_priv.h). A call leaves the bottom of the chain (or FRONT,
    with no chain) here: it goes to a provider of its tool that has room
    in its window, is held in dsh_fairq for one that has none, or goes to
    another replica when its provider is not connected. Its answer goes
    back up the chain, or straight to dsh_inflight_answer, from here. A
    call that is let go (deadline, cancel) is released here from wherever
    it is.
    =========================================================================
*/

#include "dsh_registry_priv.h"
#include <arpa/inet.h>
#include <netinet/in.h>

zframe_t *
dsh_dispatch_frame_of (zmq_msg_t *part)
{
    return zframe_new (zmq_msg_data (part), zmq_msg_size (part));
}

//  ---------------------------------------------------------------------
//  Replies

void
dsh_dispatch_send_front (self_t *self, zmsg_t **envelope_p, const char *command, zframe_t **body_p)
{
    zmsg_t *reply = dsh_proto_message (envelope_p, command);
    zmsg_append (reply, body_p);
    if (dsh_sock_send (self->front, &reply)) {
        self->dropped_replies++;
        if (self->verbose)
            dsh_log_info ("dsh-broker: reply %s dropped: %s", command, zmq_strerror (errno));
    }
}

void
dsh_dispatch_reply_error (self_t *self, zmsg_t **envelope_p, const msgpack_object *id,
                          const char *code, const char *message)
{
    zframe_t *body = dsh_proto_error_body (id, code, message);
    dsh_dispatch_send_front (self, envelope_p, DSH_ERROR, &body);
}

//  Sends route "" DSH1 command body on FRONT; moves the route frames out
//  when move is set, else copies them. Takes the body.
int
dsh_dispatch_send_route (self_t *self, zmq_msg_t *route, size_t route_size, bool move, const char *command,
                         zmq_msg_t *body)
{
    zmq_msg_t parts [DSH_SOCK_PARTS_MAX + 4];
    assert (route_size <= DSH_SOCK_PARTS_MAX);
    size_t count = 0;
    for (size_t index = 0; index < route_size; index++) {
        zmq_msg_init (&parts [count]);
        if (move)
            zmq_msg_move (&parts [count++], &route [index]);
        else
            zmq_msg_copy (&parts [count++], &route [index]);
    }
    dsh_sock_head (&parts [count], command);
    count += 3;
    zmq_msg_init (&parts [count]);
    zmq_msg_move (&parts [count++], body);
    int rc = dsh_sock_send_parts (self->front, parts, count);
    if (rc) {
        self->dropped_replies++;
        if (self->verbose)
            dsh_log_info ("dsh-broker: reply %s dropped: %s", command, zmq_strerror (errno));
    }
    return rc;
}

//  dsh_inflight's way out: a call's one RESULT.
int
dsh_dispatch_reply_route (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    return dsh_dispatch_send_route ((self_t *) arg, route, route_size, true, DSH_RESULT, body);
}

//  Answers a call that has a record: back up the chain if there is one
//  (stages see every result, the waterfall's "after"), else to the caller.
void
dsh_dispatch_answer (self_t *self, dsh_record_t **record_p, zmq_msg_t *body)
{
    //  The dispatch is over, whoever answers it
    dsh_calltrace_dispatch_end (*record_p);
    if (dsh_chain_size (self->chain)) {
        zframe_t *frame = dsh_dispatch_frame_of (body);
        zmq_msg_close (body);
        dsh_record_t *record = *record_p;
        *record_p = NULL;
        dsh_chain_result (self->chain, record, &frame);
    }
    else
        dsh_inflight_answer (self->inflight, record_p, body);
}

void
dsh_dispatch_answer_error (self_t *self, dsh_record_t **record_p, const char *code, const char *text)
{
    zframe_t *frame = dsh_proto_error_result ((*record_p)->call_id, code, text);
    zmq_msg_t body;
    dsh_sock_part_frame (&body, &frame);
    dsh_span_set_error ((*record_p)->trace.dispatch, code, text);
    if (self->stats)
        (*record_p)->outcome = dsh_stats_outcome (code);
    dsh_dispatch_answer (self, record_p, &body);
}

//  Tells the component a call went to that the broker has answered it
//  (deadline, or the caller cancelled); anything it sends for it is late.
static void
s_send_cancel (self_t *self, dsh_record_t *record, const char *reason)
{
    dsh_catalog_outstanding (self->catalog, record->component, -1);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 2);
    dsh_packer_kv_str (&packer, "callId", record->call_id);
    dsh_packer_kv_str (&packer, "reason", reason);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    dsh_work_send (self, record->component, DSH_CANCEL, &record->token, &body);
}

//  The call is over for everyone who holds it, whatever answers it next:
//  its component (if it is there) and every stage that holds or watches it.
void
dsh_dispatch_release (self_t *self, dsh_record_t *record, const char *reason)
{
    if (dsh_inflight_where (record) == DSH_AT_COMPONENT)
        s_send_cancel (self, record, reason);
    else
    if (dsh_inflight_where (record) == DSH_AT_QUEUE) {
        dsh_fairq_remove (self->fairq, record);
        dsh_catalog_waiting (self->catalog, record->component, -1);
    }
    dsh_chain_release (self->chain, record);
}

//  ---------------------------------------------------------------------
//  Dispatch: a decided call to a component

//  Sends a CALL to component. On failure (errno EHOSTUNREACH: not
//  connected; EAGAIN: its queue is full) the body is still the caller's,
//  so the call can go elsewhere; on success it has moved into libzmq.
static int
s_send_call (self_t *self, const char *component, uint64_t token, zmq_msg_t *body)
{
    const char *routing_id = dsh_work_route_link (self, component);
    if (!routing_id) {
        errno = EHOSTUNREACH;
        return -1;
    }
    zmq_msg_t parts [6];
    dsh_sock_part_mem (&parts [0], routing_id, strlen (routing_id));
    dsh_sock_head (&parts [1], DSH_CALL);
    byte data [8];
    dsh_be64_put (token, data);
    dsh_sock_part_mem (&parts [4], data, sizeof (data));
    void *handle = zsock_resolve (self->work);
    //  libzmq takes or refuses a multipart message at its first frame
    if (zmq_msg_send (&parts [0], handle, ZMQ_SNDMORE | ZMQ_DONTWAIT) == -1) {
        int saved_errno = errno;
        for (size_t index = 0; index < 5; index++)
            zmq_msg_close (&parts [index]);
        errno = saved_errno;
        return -1;
    }
    zmq_msg_init (&parts [5]);
    zmq_msg_move (&parts [5], body);
    return dsh_sock_send_parts (self->work, parts + 1, 5);
}

static void s_hold (self_t *self, dsh_record_t *record, zmq_msg_t *body);
//  The host a component's WORK connection comes from (its peer address),
//  read once per connection, for the audit; NULL if unknown.
static const char *
s_component_host (self_t *self, const char *component)
{
    dsh_route_t *route = dsh_routes_lookup (self->routes, component);
    if (!route)
        return NULL;
    if (!route->host [0] && route->fd >= 0) {
        struct sockaddr_storage address;
        socklen_t size = sizeof (address);
        if (getpeername (route->fd, (struct sockaddr *) &address, &size) == 0) {
            if (address.ss_family == AF_INET)
                inet_ntop (AF_INET, &((struct sockaddr_in *) &address)->sin_addr, route->host, sizeof (route->host));
            else
            if (address.ss_family == AF_INET6)
                inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &address)->sin6_addr, route->host, sizeof (route->host));
            else
                snprintf (route->host, sizeof (route->host), "local");
        }
    }
    return route->host [0]? route->host: NULL;
}

//  The audit learns where a call goes, and what it runs with (body, if
//  not NULL: the bytes sent, which may not be the caller's).
static void
s_trail_dispatch (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    if (record->trail)
        dsh_audit_trail_dispatch (record->trail, record->component, s_component_host (self, record->component),
                                  dsh_catalog_replicas (self->catalog, record->tool),
                                  dsh_catalog_tool_digest (self->catalog, record->tool), body);
}

//  Sends a call to the provider in its record, or to another one if that
//  one is not connected (or holds it for that one), or answers it. Takes
//  the body.
static void
s_send_dispatched (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    char text [DSH_NAME_MAX + DSH_ID_MAX + 160];
    int rc;
    int send_errno = 0;
    //  What runs is what the chain passed: the audit keeps those bytes
    if (record->trail)
        s_trail_dispatch (self, record, body);
    while ((rc = s_send_call (self, record->component, record->token, body)) && (send_errno = errno) == EHOSTUNREACH) {
        //  Not connected (it died, and has not expired yet): the call never
        //  left, so any other provider may take it
        dsh_catalog_unreachable (self->catalog, record->component, zclock_mono ());
        const char *other = dsh_catalog_provider (self->catalog, record->tool, record->component);
        if (!other || streq (other, record->component))
            break;
        snprintf (record->component, sizeof (record->component), "%s", other);
    }
    if (rc == 0) {
        if (record->trail)
            s_trail_dispatch (self, record, NULL);
        dsh_span_set_str (record->trace.dispatch, "dsh.component", record->component);
        dsh_inflight_to_component (record);
        dsh_catalog_outstanding (self->catalog, record->component, +1);
        self->calls++;
        return;
    }
    if (send_errno == EHOSTUNREACH) {
        //  Listed, and no connection now: it is making a new one (its
        //  broker was silent, a link was cut) or it died. The call never
        //  left, so it waits for the component as for a full window: it
        //  goes when a connection claims the id (dsh_dispatch_refill), and is
        //  answered TOOL_GONE if the component expires first, TIMEOUT at
        //  its deadline
        s_hold (self, record, body);
        return;
    }
    zmq_msg_close (body);
    if (send_errno == EAGAIN)
        snprintf (text, sizeof (text), "Error: component \"%s\" serving tool \"%s\" is overloaded",
                  record->component, record->tool);
    else
        snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" is not connected",
                  record->tool, record->component);
    dsh_dispatch_answer_error (self, &record, send_errno == EAGAIN? DSH_E_OVERLOADED: DSH_E_TOOL_GONE, text);
}

//  Holds a call for its component, whose window is full, or answers it
//  OVERLOADED if the broker holds all it may. Takes the body.
static void
s_hold (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    char reason [256];
    if (dsh_fairq_push (self->fairq, record, body, reason, sizeof (reason)) == 0) {
        dsh_catalog_waiting (self->catalog, record->component, +1);
        dsh_span_add_event (record->trace.dispatch, "dsh.queued", 0, "dsh.component", record->component);
        return;
    }
    zmq_msg_close (body);
    char text [DSH_NAME_MAX + DSH_ID_MAX + 400];
    snprintf (text, sizeof (text), "Error: component \"%s\" serving tool \"%s\" is busy and %s",
              record->component, record->tool, reason);
    dsh_dispatch_answer_error (self, &record, DSH_E_OVERLOADED, text);
}

//  Sends the calls held for a component while it has room in its window,
//  the next caller's first each time.
void
dsh_dispatch_refill (self_t *self, const char *component)
{
    //  Nothing held (the usual case): no lookups on the result's path; and
    //  nothing sent to a component with no connection, whose calls wait
    //  (a send that finds it gone holds the call again, and ends this)
    if (!dsh_fairq_size (self->fairq))
        return;
    while (dsh_fairq_size (self->fairq) && dsh_catalog_reachable (self->catalog, component)
    &&     dsh_catalog_has_room (self->catalog, component)) {
        zmq_msg_t body;
        zmq_msg_init (&body);
        dsh_record_t *record = dsh_fairq_pop (self->fairq, component, &body);
        if (!record) {
            zmq_msg_close (&body);
            break;
        }
        dsh_catalog_waiting (self->catalog, component, -1);
        //  Held a while: its tool may have been quarantined meanwhile
        char text [DSH_NAME_MAX * 3 + 512];
        if (dsh_dispatch_quarantined (self, record->tool, text, sizeof (text))) {
            zmq_msg_close (&body);
            dsh_dispatch_answer_error (self, &record, DSH_E_QUARANTINED, text);
            continue;
        }
        s_send_dispatched (self, record, &body);
    }
}

//  A traced call starts its dispatch (a client span under the innermost
//  stage it passed, or the call's), and its body carries that context:
//  what the component's span is a child of. A call held and sent again
//  (its provider went before it was sent) keeps the one it has.
static void
s_dispatch_span (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    dsh_trace_ctx_t parent;
    if (dsh_span_context (dsh_chain_span (self->chain, record), &parent))
        return;
    char name [DSH_NAME_MAX + 16];
    snprintf (name, sizeof (name), "dsh.dispatch %s", record->tool);
    dsh_span_t *span = dsh_span_start (name, DSH_SPAN_CLIENT, &parent, 0);
    dsh_span_set_str (span, "gen_ai.tool.name", record->tool);
    dsh_span_set_str (span, "gen_ai.tool.call.id", record->call_id);
    dsh_span_set_int (span, "dsh.replicas", (int64_t) dsh_catalog_replicas (self->catalog, record->tool));
    record->trace.dispatch = span;
    if (span)
        dsh_calltrace_stamp_msg (record, span, body, (size_t) self->max_message_bytes);
}

//  Sends a decided call to a provider of its tool, holds it until the
//  provider has room, or answers it at once. Takes the body.
void
dsh_dispatch_call (self_t *self, dsh_record_t *record, zmq_msg_t *body)
{
    const char *provider = dsh_catalog_provider (self->catalog, record->tool, NULL);
    char text [DSH_NAME_MAX + DSH_ID_MAX + 160];
    if (!provider) {
        zmq_msg_close (body);
        snprintf (text, sizeof (text), "Error: unknown tool \"%s\"", record->tool);
        dsh_dispatch_answer_error (self, &record, DSH_E_UNKNOWN_TOOL, text);
        return;
    }
    if (record->trace.call && !record->trace.dispatch)
        s_dispatch_span (self, record, body);
    if (zmq_msg_size (body) > (size_t) self->max_message_bytes) {
        //  Only what a stage stamped in can make it so: the front took it
        snprintf (text, sizeof (text), "Error: the call is %zu bytes with what the chain added to it, "
                  "over the %d-byte message limit", zmq_msg_size (body), self->max_message_bytes);
        zmq_msg_close (body);
        dsh_dispatch_answer_error (self, &record, DSH_E_BAD_REQUEST, text);
        return;
    }
    if (!record->has_retry_body && dsh_catalog_idempotent (self->catalog, record->tool)) {
        //  Kept so the call can go to another replica if this one dies
        zmq_msg_init (&record->retry_body);
        zmq_msg_copy (&record->retry_body, body);
        record->has_retry_body = true;
    }
    snprintf (record->component, sizeof (record->component), "%s", provider);
    if (dsh_catalog_has_room (self->catalog, provider))
        s_send_dispatched (self, record, body);
    else
        s_hold (self, record, body);
}

//  The chain host: a call leaves the bottom of the chain.
//  Why a call to a quarantined tool is refused, and how to release it.
static void
s_quarantine_text (const char *tool, const char *reason, const char *offered, const char *pinned,
                   const char *changes, char *text, size_t size)
{
    if (streq (reason, DSH_PINS_CHANGED))
        snprintf (text, size, "Error: tool \"%s\" is quarantined: its definition changed since it was pinned "
                  "(%s%s%spinned %.12s, now %.12s); review it with `dsh pins show %s`, release it with "
                  "`dsh pins accept %s`", tool, *changes? "changed: ": "", changes, *changes? "; ": "",
                  pinned, offered, tool, tool);
    else
    if (streq (reason, DSH_PINS_UNACCEPTED))
        snprintf (text, size, "Error: tool \"%s\" is quarantined: pins are strict and its definition %.12s "
                  "has not been accepted; review it with `dsh pins show %s`, accept it with `dsh pins accept %s`",
                  tool, offered, tool, tool);
    else
    if (streq (reason, DSH_PINS_REJECTED))
        snprintf (text, size, "Error: tool \"%s\" is quarantined: its definition %.12s was rejected by an admin "
                  "(`dsh pins show %s`)", tool, offered, tool);
    else
        snprintf (text, size, "Error: tool \"%s\" is quarantined: the broker could not read its pins yet, so it "
                  "cannot tell whether the definition changed (the broker's log says why)", tool);
}

//  Writes why tool may not run now into text and returns true, or
//  returns false: its definition is quarantined (pins).
bool
dsh_dispatch_quarantined (self_t *self, const char *tool, char *text, size_t size)
{
    const char *offered = NULL, *pinned = NULL;
    const char *reason = self->pins? dsh_catalog_quarantine (self->catalog, tool, &offered, &pinned): NULL;
    if (reason)
        s_quarantine_text (tool, reason, offered, pinned, dsh_catalog_quarantine_changes (self->catalog, tool),
                           text, size);
    return reason != NULL;
}

//  The chain host: a call leaves the bottom of the chain. What the stages
//  judged is what runs: a tool quarantined meanwhile, or whose entry
//  changed since the call entered the chain, is not called.
void
dsh_dispatch_chain_out (void *arg, dsh_record_t *record, zframe_t **body_p)
{
    self_t *self = (self_t *) arg;
    char text [DSH_NAME_MAX * 3 + 512];
    zchunk_t *now = dsh_catalog_tool (self->catalog, record->tool);
    if (now && dsh_dispatch_quarantined (self, record->tool, text, sizeof (text))) {
        zframe_destroy (body_p);
        dsh_dispatch_answer_error (self, &record, DSH_E_QUARANTINED, text);
        return;
    }
    zframe_t *judged = dsh_chain_entry (self->chain, record);
    if (now && judged && zframe_size (judged)
    &&  !(zchunk_size (now) == zframe_size (judged)
          && memcmp (zchunk_data (now), zframe_data (judged), zchunk_size (now)) == 0)) {
        zframe_destroy (body_p);
        snprintf (text, sizeof (text), "Error: tool \"%s\" changed while the call was in the chain: what its "
                  "stages judged is not what would run; call it again", record->tool);
        dsh_dispatch_answer_error (self, &record, DSH_E_DENIED, text);
        return;
    }
    zmq_msg_t body;
    dsh_sock_part_frame (&body, body_p);
    dsh_dispatch_call (self, record, &body);
}

void
dsh_dispatch_chain_control_reply (void *arg, zmsg_t **envelope_p, zframe_t **body_p)
{
    dsh_dispatch_send_front ((self_t *) arg, envelope_p, DSH_CONTROL, body_p);
}

//  Sends a call to another replica, once. Returns false if there is no
//  other provider, the call was retried already, or the send fails.
static bool
s_retry (self_t *self, dsh_record_t *record, const char *gone)
{
    const char *provider = record->has_retry_body && !record->retried?
        dsh_catalog_provider (self->catalog, record->tool, gone): NULL;
    if (!provider)
        return false;
    zmq_msg_t body;
    zmq_msg_init (&body);
    zmq_msg_copy (&body, &record->retry_body);
    if (s_send_call (self, provider, record->token, &body)) {
        zmq_msg_close (&body);
        return false;
    }
    record->retried = true;
    dsh_span_add_event (record->trace.dispatch, "dsh.retry", 0, "dsh.component", provider);
    dsh_span_set_str (record->trace.dispatch, "dsh.retry.component", provider);
    snprintf (record->component, sizeof (record->component), "%s", provider);
    dsh_inflight_to_component (record);
    dsh_catalog_outstanding (self->catalog, provider, +1);
    dsh_log_info ("dsh-broker: call %s to %s retried on %s (the tool is idempotent)", record->call_id, gone, provider);
    return true;
}

//  Answers every call in flight to a component that has gone, or retries
//  it once on another replica if the tool says it is idempotent. The calls
//  held for it never reached it: they go to another provider, if there is
//  one, like new calls.
void
dsh_dispatch_fail_component_calls (self_t *self, const char *component, const char *why)
{
    zmq_msg_t body;
    zmq_msg_init (&body);
    dsh_record_t *held;
    while ((held = dsh_fairq_pop (self->fairq, component, &body))) {
        dsh_catalog_waiting (self->catalog, component, -1);
        if (dsh_catalog_provider (self->catalog, held->tool, NULL))
            dsh_dispatch_call (self, held, &body);
        else {
            zmq_msg_close (&body);
            char text [DSH_NAME_MAX + DSH_ID_MAX + 96];
            snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" %s",
                      held->tool, component, why);
            dsh_dispatch_answer_error (self, &held, DSH_E_TOOL_GONE, text);
        }
        zmq_msg_init (&body);
    }
    zmq_msg_close (&body);
    zlistx_t *orphans = dsh_inflight_at_component (self->inflight, component);
    for (dsh_record_t *record = zlistx_first (orphans); record; record = zlistx_next (orphans)) {
        if (s_retry (self, record, component))
            continue;
        char text [DSH_NAME_MAX + DSH_ID_MAX + 96];
        snprintf (text, sizeof (text), "Error: tool \"%s\" is gone: component \"%s\" %s",
                  record->tool, component, why);
        dsh_catalog_outstanding (self->catalog, component, -1);
        dsh_record_t *orphan = record;
        dsh_dispatch_answer_error (self, &orphan, DSH_E_TOOL_GONE, text);
    }
    zlistx_destroy (&orphans);
}
