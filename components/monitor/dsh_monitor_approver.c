/*  =========================================================================
    dsh_monitor_approver - the monitor as an approver, for the page

    One link per permission stage: its DEALER, the endpoint it reached,
    when the stage was last heard, and the decisions sent on it whose
    outcome has not come. The stage answers a decision with the RESOLVED
    of its request (to every approver) or, if it refuses it, an ERROR to
    us alone that names the request (its id); both come in the order the
    stage handled the DECIDEs, so an ERROR that names none belongs to the
    oldest decision waiting.
    =========================================================================
*/

#include "dsh_monitor_approver.h"

#include "dsh_curve.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_sock.h"

//  A PENDING carries the call's arguments: room for large ones
#define MAX_MESSAGE_BYTES       (4 * 1024 * 1024)
//  The longest "by" a stage takes (PROTOCOL.md, DECIDE)
#define BY_MAX                  128

//  A decision sent, waiting for its outcome.
typedef struct {
    uint64_t ticket;
    char *id;
    bool allow;
    int64_t deadline;           //  monotonic ms
} s_decision_t;

//  One permission stage's approvals socket.
typedef struct {
    char *stage;
    char *endpoint;
    zsock_t *dealer;
    int64_t opened;             //  monotonic ms
    int64_t heard;              //  the stage's last message; 0: none yet
    zlistx_t *decisions;        //  s_decision_t, oldest first
} s_link_t;

struct _dsh_monitor_approver_t {
    zpoller_t *poller;          //  borrowed
    bool active;
    zhashx_t *links;            //  stage name -> s_link_t
    int64_t next_hello;
    json_t *notices;
};

static void
s_decision_destroy (void **item_p)
{
    s_decision_t *decision = (s_decision_t *) *item_p;
    if (decision) {
        free (decision->id);
        free (decision);
        *item_p = NULL;
    }
}

static void
s_notice_decided_error (dsh_monitor_approver_t *self, uint64_t ticket, const char *code, const char *error)
{
    json_array_append_new (self->notices, json_pack ("{s:s, s:I, s:b, s:s, s:s}", "kind", "decided",
                                                     "ticket", (json_int_t) ticket, "ok", 0, "code", code,
                                                     "error", error));
}

//  Sends command with body (JSON) on link; 0 or -1.
static int
s_send (s_link_t *link, const char *command, const json_t *body)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    int rc = dsh_json_to_msgpack (&packer.pk, body);
    if (rc == 0) {
        zmsg_t *msg = dsh_proto_message (NULL, command);
        zframe_t *frame = dsh_packer_frame (&packer);
        zmsg_append (msg, &frame);
        rc = dsh_sock_send (link->dealer, &msg);
    }
    dsh_packer_release (&packer);
    return rc;
}

//  Closes a link: GOODBYE if said, and its waiting decisions are told why.
static void
s_link_close (dsh_monitor_approver_t *self, s_link_t *link, bool goodbye, const char *why)
{
    if (goodbye) {
        json_t *empty = json_object ();
        s_send (link, "GOODBYE", empty);
        json_decref (empty);
    }
    for (s_decision_t *decision = (s_decision_t *) zlistx_first (link->decisions); decision;
         decision = (s_decision_t *) zlistx_next (link->decisions))
        s_notice_decided_error (self, decision->ticket, "UNAVAILABLE", why);
    zpoller_remove (self->poller, link->dealer);
    zsock_destroy (&link->dealer);
    zlistx_destroy (&link->decisions);
    free (link->stage);
    free (link->endpoint);
    free (link);
}

static void
s_close_all (dsh_monitor_approver_t *self, bool goodbye, const char *why)
{
    s_link_t *link;
    while ((link = (s_link_t *) zhashx_first (self->links))) {
        zhashx_delete (self->links, link->stage);
        s_link_close (self, link, goodbye, why);
    }
}

//  Whether value is a string of 1 to max bytes of the characters in
//  allowed (NULL: any printable ASCII).
static bool
s_word (const json_t *value, size_t max, const char *allowed)
{
    const char *text = json_string_value (value);
    size_t size = text? strlen (text): 0;
    if (size == 0 || size > max || size != json_string_length (value))
        return false;
    for (const char *next = text; *next; next++)
        if (allowed? !strchr (allowed, *next): (*next < 0x20 || *next > 0x7e))
            return false;
    return true;
}

json_t *
dsh_monitor_approver_check_decision (const json_t *body, char *error, size_t error_size)
{
    static const char *keys [] = { "stage", "id", "outcome", "scope", "minutes", "argumentsDigest",
                                   "definitionDigest" };
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) body, key, value) {
        bool known = false;
        for (size_t index = 0; index < sizeof keys / sizeof keys [0]; index++)
            known |= streq (key, keys [index]);
        if (!known) {
            snprintf (error, error_size, "a decision has no \"%.64s\"", key);
            return NULL;
        }
    }
    const char *outcome = json_string_value (json_object_get (body, "outcome"));
    const char *scope = json_string_value (json_object_get (body, "scope"));
    json_t *minutes = json_object_get (body, "minutes");
    static const char *hex = "0123456789abcdef";
    if (!s_word (json_object_get (body, "stage"), DSH_MONITOR_APPROVER_STAGE_MAX, NULL))
        snprintf (error, error_size, "a decision names its stage (printable ASCII, at most %d bytes)",
                  DSH_MONITOR_APPROVER_STAGE_MAX);
    else
    if (!s_word (json_object_get (body, "id"), DSH_MONITOR_APPROVER_ID_MAX, NULL))
        snprintf (error, error_size, "a decision names its request's id");
    else
    if (!outcome || (!streq (outcome, "allow") && !streq (outcome, "deny")))
        snprintf (error, error_size, "outcome is \"allow\" or \"deny\"");
    else
    if (json_object_get (body, "scope")
    &&  (!scope || (!streq (scope, "once") && !streq (scope, "tool") && !streq (scope, "arguments"))))
        snprintf (error, error_size, "scope is \"once\", \"tool\" or \"arguments\"");
    else
    if (scope && !streq (scope, "once") && !streq (outcome, "allow"))
        snprintf (error, error_size, "a grant (scope %s) allows", scope);
    else
    if (minutes && (!json_is_integer (minutes) || json_integer_value (minutes) < 1
                 || json_integer_value (minutes) > DSH_MONITOR_APPROVER_MINUTES_MAX))
        snprintf (error, error_size, "minutes is a whole number from 1 to %d", DSH_MONITOR_APPROVER_MINUTES_MAX);
    else
    if (minutes && (!scope || streq (scope, "once")))
        snprintf (error, error_size, "minutes are for a grant (scope tool or arguments)");
    else
    if ((json_object_get (body, "argumentsDigest") && !s_word (json_object_get (body, "argumentsDigest"), 64, hex))
    ||  (json_object_get (body, "definitionDigest") && !s_word (json_object_get (body, "definitionDigest"), 64, hex)))
        snprintf (error, error_size, "a digest is 1 to 64 lowercase hex digits");
    else
        return json_deep_copy (body);
    return NULL;
}

dsh_monitor_approver_t *
dsh_monitor_approver_new (zpoller_t *poller)
{
    assert (poller);
    dsh_monitor_approver_t *self = (dsh_monitor_approver_t *) zmalloc (sizeof (dsh_monitor_approver_t));
    assert (self);
    self->poller = poller;
    self->links = zhashx_new ();
    self->notices = json_array ();
    return self;
}

void
dsh_monitor_approver_destroy (dsh_monitor_approver_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_monitor_approver_t *self = *self_p;
        s_close_all (self, self->active, "the monitor is stopping");
        zhashx_destroy (&self->links);
        json_decref (self->notices);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_monitor_approver_set_active (dsh_monitor_approver_t *self, bool active)
{
    assert (self);
    if (active == self->active)
        return;
    self->active = active;
    if (active)
        self->next_hello = zclock_mono ();
    else
        //  Leaving on purpose: the stages stop counting on us now, not 3 s later
        s_close_all (self, true, "no page watches the monitor any more");
}

bool
dsh_monitor_approver_active (dsh_monitor_approver_t *self)
{
    assert (self);
    return self->active;
}

//  Whether link hears from its stage, or is young enough to be let be.
static bool
s_link_alive (s_link_t *link, int64_t now)
{
    int64_t since = link->heard? link->heard: link->opened;
    return now - since <= DSH_MONITOR_APPROVER_SILENT_MS;
}

//  Asks the broker for stage's approvals socket and opens a link to it.
static void
s_link_open (dsh_monitor_approver_t *self, dsh_client_t *client, const char *stage, int timeout_ms)
{
    char error [512] = "";
    dsh_reply_t *reply = dsh_client_control (client, stage, "approvals", NULL, timeout_ms, error, sizeof error);
    json_t *body = reply && !dsh_reply_is_error (reply)? dsh_reply_json (reply): NULL;
    if (reply && !body) {
        const char *text = dsh_reply_text (reply);
        snprintf (error, sizeof error, "%s", text? text: "the stage refused");
    }
    dsh_reply_destroy (&reply);
    json_t *data = json_object_get (body, "data");
    const char *advertised = json_string_value (json_object_get (data, "endpoint"));
    const char *server_key = json_string_value (json_object_get (data, "serverKey"));
    char *endpoint = advertised? dsh_sock_resolve (advertised, dsh_client_endpoint (client)): NULL;
    if (!endpoint) {
        zsys_warning ("dsh-monitor: stage \"%s\" gives no approvals endpoint: %s", stage,
                      *error? error: "none in its answer");
        json_decref (body);
        return;
    }
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    assert (dealer);
    dsh_sock_limit (dealer, MAX_MESSAGE_BYTES, 1000);
    dsh_sock_heal (dealer, 0, 0);
    //  The GOODBYE a closing link says has the time to leave
    zsock_set_linger (dealer, 500);
    dsh_curve_client (dealer);
    //  An external stage serves approvals with its own key, which the
    //  broker relayed with the endpoint
    if (server_key && strlen (server_key) == 40 && dsh_curve_on ())
        zsock_set_curve_serverkey (dealer, server_key);
    json_decref (body);
    if (zsock_connect (dealer, "%s", endpoint)) {
        zsys_warning ("dsh-monitor: cannot connect to stage \"%s\"'s approvals socket at %s", stage, endpoint);
        zsock_destroy (&dealer);
        free (endpoint);
        return;
    }
    s_link_t *link = (s_link_t *) zmalloc (sizeof (s_link_t));
    assert (link);
    link->stage = strdup (stage);
    link->endpoint = endpoint;
    link->dealer = dealer;
    link->opened = zclock_mono ();
    link->decisions = zlistx_new ();
    zlistx_set_destructor (link->decisions, s_decision_destroy);
    zpoller_add (self->poller, dealer);
    zhashx_insert (self->links, stage, link);
    json_t *hello = json_object ();
    s_send (link, "APPROVER", hello);
    json_decref (hello);
}

static bool
s_in_chain (const json_t *stages, const char *name)
{
    size_t index;
    json_t *stage;
    json_array_foreach (stages, index, stage) {
        const char *its_name = json_string_value (json_object_get (stage, "name"));
        const char *kind = json_string_value (json_object_get (stage, "kind"));
        if (its_name && kind && streq (its_name, name) && streq (kind, "permission"))
            return true;
    }
    return false;
}

void
dsh_monitor_approver_connect (dsh_monitor_approver_t *self, dsh_client_t *client, const json_t *stages,
                              int timeout_ms)
{
    assert (self);
    assert (client);
    if (!self->active || !json_is_array (stages))
        return;
    //  A link its stage left, or that has not heard from it (a broker
    //  restarted binds a new approvals port), goes; it is opened again
    int64_t now = zclock_mono ();
    zlistx_t *names = zhashx_keys (self->links);
    for (const char *name = (const char *) zlistx_first (names); name; name = (const char *) zlistx_next (names)) {
        s_link_t *link = (s_link_t *) zhashx_lookup (self->links, name);
        bool in_chain = s_in_chain (stages, name);
        if (!in_chain || !s_link_alive (link, now)) {
            zhashx_delete (self->links, name);
            s_link_close (self, link, in_chain, in_chain? "the stage fell silent": "the stage left the chain");
        }
    }
    zlistx_destroy (&names);
    size_t index;
    json_t *stage;
    json_array_foreach (stages, index, stage) {
        const char *name = json_string_value (json_object_get (stage, "name"));
        if (name && s_in_chain (stages, name) && !zhashx_lookup (self->links, name))
            s_link_open (self, client, name, timeout_ms);
    }
}

void
dsh_monitor_approver_tick (dsh_monitor_approver_t *self)
{
    assert (self);
    int64_t now = zclock_mono ();
    bool hello = self->active && now >= self->next_hello;
    if (hello)
        self->next_hello = now + DSH_MONITOR_APPROVER_HELLO_MS;
    json_t *empty = json_object ();
    for (s_link_t *link = (s_link_t *) zhashx_first (self->links); link;
         link = (s_link_t *) zhashx_next (self->links)) {
        if (hello)
            s_send (link, "APPROVER", empty);
        s_decision_t *decision;
        while ((decision = (s_decision_t *) zlistx_first (link->decisions)) && now >= decision->deadline) {
            s_notice_decided_error (self, decision->ticket, "TIMEOUT", "the stage did not answer the decision in time");
            zlistx_delete (link->decisions, zlistx_cursor (link->decisions));
        }
    }
    json_decref (empty);
}

//  The waiting decision of link for request id, or NULL; the cursor is on it.
static s_decision_t *
s_decision_find (s_link_t *link, const char *id)
{
    for (s_decision_t *decision = (s_decision_t *) zlistx_first (link->decisions); decision;
         decision = (s_decision_t *) zlistx_next (link->decisions))
        if (streq (decision->id, id))
            return decision;
    return NULL;
}

static void
s_take_resolved (dsh_monitor_approver_t *self, s_link_t *link, const char *id, json_t *body)
{
    const char *outcome = json_string_value (json_object_get (body, "outcome"));
    json_t *grant = json_object_get (body, "grant");
    json_t *notice = json_pack ("{s:s, s:s, s:s, s:s}", "kind", "resolved", "stage", link->stage, "id", id,
                                "outcome", outcome? outcome: "");
    if (grant)
        json_object_set (notice, "grant", grant);
    json_array_append_new (self->notices, notice);
    s_decision_t *decision;
    while ((decision = s_decision_find (link, id))) {
        const char *wanted = decision->allow? "allowed": "rejected";
        if (outcome && streq (outcome, wanted)) {
            json_t *decided = json_pack ("{s:s, s:I, s:b, s:s}", "kind", "decided", "ticket",
                                         (json_int_t) decision->ticket, "ok", 1, "outcome", outcome);
            if (grant)
                json_object_set (decided, "grant", grant);
            json_array_append_new (self->notices, decided);
        }
        else {
            char *error = zsys_sprintf ("request %s was resolved otherwise first: %s", id, outcome? outcome: "?");
            s_notice_decided_error (self, decision->ticket, "CONFLICT", error);
            zstr_free (&error);
        }
        zlistx_delete (link->decisions, zlistx_cursor (link->decisions));
    }
}

//  An ERROR is the answer to the decision on the request it names (its
//  id), else to the oldest one waiting; one that names a request no
//  longer waited on answers a decision that the RESOLVED of another
//  approver's answered first.
static void
s_take_error (dsh_monitor_approver_t *self, s_link_t *link, json_t *body)
{
    const char *code = json_string_value (json_object_get (body, "code"));
    const char *message = json_string_value (json_object_get (body, "message"));
    const char *id = json_string_value (json_object_get (body, "id"));
    if (!message)
        message = "the stage refused the decision";
    s_decision_t *decision = id? s_decision_find (link, id): NULL;
    if (!decision && (id || strstr (message, "no pending request")))
        return;
    if (!decision)
        decision = (s_decision_t *) zlistx_first (link->decisions);
    if (!decision) {
        zsys_warning ("dsh-monitor: stage \"%s\" says: %s", link->stage, message);
        return;
    }
    s_notice_decided_error (self, decision->ticket, code? code: DSH_E_BAD_REQUEST, message);
    zlistx_delete (link->decisions, zlistx_cursor (link->decisions));
}

//  Takes one message from link's stage.
static void
s_take_message (dsh_monitor_approver_t *self, s_link_t *link, zmsg_t **msg_p)
{
    zmsg_t *msg = *msg_p;
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char error [256];
    json_t *body = NULL;
    if (dsh_proto_split (msg, &envelope, command, sizeof command, error, sizeof error) == 0
    &&  zmsg_size (msg) == 1) {
        dsh_doc_t *doc = dsh_proto_decode_body (zmsg_first (msg), error, sizeof error);
        body = doc? dsh_json_from_msgpack (dsh_doc_root (doc)): NULL;
        dsh_doc_destroy (&doc);
    }
    zmsg_destroy (&envelope);
    zmsg_destroy (msg_p);
    if (!json_is_object (body)) {
        zsys_warning ("dsh-monitor: a malformed message from stage \"%s\" is ignored", link->stage);
        json_decref (body);
        return;
    }
    link->heard = zclock_mono ();
    const char *id = json_string_value (json_object_get (body, "id"));
    if (streq (command, "PENDING") && id)
        json_array_append_new (self->notices, json_pack ("{s:s, s:s, s:O}", "kind", "pending", "stage", link->stage,
                                                         "request", body));
    else
    if (streq (command, "RESOLVED") && id)
        s_take_resolved (self, link, id, body);
    else
    if (streq (command, DSH_ERROR))
        s_take_error (self, link, body);
    json_decref (body);
}

bool
dsh_monitor_approver_recv (dsh_monitor_approver_t *self, void *which)
{
    assert (self);
    for (s_link_t *link = (s_link_t *) zhashx_first (self->links); link;
         link = (s_link_t *) zhashx_next (self->links))
        if ((void *) link->dealer == which) {
            zmsg_t *msg;
            while ((zsock_events (link->dealer) & ZMQ_POLLIN) && (msg = zmsg_recv (link->dealer)))
                s_take_message (self, link, &msg);
            return true;
        }
    return false;
}

int
dsh_monitor_approver_decide (dsh_monitor_approver_t *self, uint64_t ticket, const json_t *decision,
                             const char *by, char *error, size_t error_size)
{
    assert (self);
    assert (decision && by);
    const char *stage = json_string_value (json_object_get (decision, "stage"));
    const char *id = json_string_value (json_object_get (decision, "id"));
    const char *outcome = json_string_value (json_object_get (decision, "outcome"));
    assert (stage && id && outcome);
    s_link_t *link = self->active? (s_link_t *) zhashx_lookup (self->links, stage): NULL;
    if (!link) {
        snprintf (error, error_size, "the monitor is not an approver of stage \"%s\" (yet): try again in a moment",
                  stage);
        return -1;
    }
    json_t *body = json_deep_copy (decision);
    json_object_del (body, "stage");
    json_object_set_new (body, "by", json_stringn (by, strnlen (by, BY_MAX)));
    int rc = s_send (link, "DECIDE", body);
    json_decref (body);
    if (rc) {
        snprintf (error, error_size, "cannot send the decision to stage \"%s\": %s", stage, strerror (errno));
        return -1;
    }
    s_decision_t *waiting = (s_decision_t *) zmalloc (sizeof (s_decision_t));
    assert (waiting);
    waiting->ticket = ticket;
    waiting->id = strdup (id);
    waiting->allow = streq (outcome, "allow");
    waiting->deadline = zclock_mono () + DSH_MONITOR_APPROVER_SILENT_MS;
    zlistx_add_end (link->decisions, waiting);
    return 0;
}

json_t *
dsh_monitor_approver_take (dsh_monitor_approver_t *self)
{
    assert (self);
    json_t *notices = self->notices;
    self->notices = json_array ();
    return notices;
}

json_t *
dsh_monitor_approver_state (dsh_monitor_approver_t *self)
{
    assert (self);
    json_t *stages = json_array ();
    int64_t now = zclock_mono ();
    for (s_link_t *link = (s_link_t *) zhashx_first (self->links); link;
         link = (s_link_t *) zhashx_next (self->links))
        json_array_append_new (stages, json_pack ("{s:s, s:s, s:b}", "stage", link->stage, "endpoint",
                                                  link->endpoint, "heard",
                                                  link->heard && now - link->heard <= DSH_MONITOR_APPROVER_SILENT_MS));
    return json_pack ("{s:b, s:o}", "active", self->active, "stages", stages);
}
