/*  =========================================================================
    dsh_permission - the permission middleware: allow, deny or ask a human

    The policy (rules, default) is plain data with a pure decide, so unit
    tests need no sockets; so is the rule for when an ask closes. The stage
    around it keeps the approvers it has heard from lately and the asks
    still open, each holding a deferred call and a timer that closes it
    before the call's deadline and within approval_timeout_ms.

    An approver counts as present only while it can be reached: the
    approvals ROUTER is mandatory, so a send to an approver whose
    connection is gone fails at once (EHOSTUNREACH) and the approver is
    dropped. The stage probes every approver with HEARTBEAT twice a second,
    drops one silent for 3 s (a host that vanished closes no connection),
    and drops one that says GOODBYE. When the last approver goes, every
    open ask is closed: nobody is left to answer it.
    =========================================================================
*/

#include <errno.h>
#include <fnmatch.h>
#include <stddef.h>

#include "dsh_permission.h"
#include "dsh_curve.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_settings.h"
#include "dsh_sock.h"
#include "dsh_toolhints.h"

#define APPROVAL_TIMEOUT_DEFAULT_MS 120000
#define APPROVER_PROBE_MS           500         //  HEARTBEAT to approvers, and expiry
#define APPROVER_EXPIRY_MS          3000        //  approvers say APPROVER every 1 s
#define APPROVALS_MAX_MESSAGE       (64 * 1024)
//  An ask closes this much before the call's deadline (at most a quarter
//  of the time left), so that the caller hears why before the broker's
//  TIMEOUT
#define DEADLINE_MARGIN_MS          250

//  --- The policy ----------------------------------------------------------

//  A condition on one hint of the tool's entry
typedef enum {
    S_ANY = 0,
    S_TRUE,
    S_FALSE
} s_hint_condition_t;

typedef struct {
    char *tool;                 //  glob
    char *agent;                //  glob
    s_hint_condition_t read_only;
    s_hint_condition_t destructive;
    s_hint_condition_t open_world;
    dsh_permission_action_t action;
} s_rule_t;

//  The rule keys that test a hint, and where each rule keeps its condition
static const struct {
    const char *key;
    size_t offset;
} s_hint_keys [] = {
    { "read_only", offsetof (s_rule_t, read_only) },
    { "destructive", offsetof (s_rule_t, destructive) },
    { "open_world", offsetof (s_rule_t, open_world) },
    { NULL, 0 }
};

static bool
s_hint_holds (s_hint_condition_t condition, bool hint)
{
    return condition == S_ANY || (condition == S_TRUE) == hint;
}

struct _dsh_permission_policy_t {
    zlistx_t *rules;            //  s_rule_t, in config order
    dsh_permission_action_t fallback;
    char *approvals;
    int approval_timeout_ms;
};

static void
s_rule_destroy (s_rule_t **self_p)
{
    if (*self_p) {
        s_rule_t *self = *self_p;
        zstr_free (&self->tool);
        zstr_free (&self->agent);
        free (self);
        *self_p = NULL;
    }
}

static s_rule_t *
s_rule_new (zconfig_t *section, size_t number, char *error, size_t error_size)
{
    s_rule_t *self = (s_rule_t *) zmalloc (sizeof (s_rule_t));
    assert (self);
    bool have_action = false;
    int rc = 0;
    for (zconfig_t *item = zconfig_child (section); item && rc == 0; item = zconfig_next (item)) {
        const char *key = zconfig_name (item);
        const char *value = zconfig_value (item)? zconfig_value (item): "";
        size_t hint = 0;
        while (s_hint_keys [hint].key && strneq (s_hint_keys [hint].key, key))
            hint++;
        if (s_hint_keys [hint].key) {
            s_hint_condition_t *condition = (s_hint_condition_t *) ((char *) self + s_hint_keys [hint].offset);
            if (streq (value, "true"))
                *condition = S_TRUE;
            else
            if (streq (value, "false"))
                *condition = S_FALSE;
            else {
                snprintf (error, error_size, "rule %zu: %s must be true or false, not \"%s\"", number, key, value);
                rc = -1;
            }
        }
        else
        if (streq (key, "tool") || streq (key, "agent")) {
            if (!*value) {
                snprintf (error, error_size, "rule %zu: %s must not be empty", number, key);
                rc = -1;
            }
            else {
                char **target = streq (key, "tool")? &self->tool: &self->agent;
                zstr_free (target);
                *target = strdup (value);
            }
        }
        else
        if (streq (key, "action")) {
            if (dsh_permission_action_parse (value, &self->action)) {
                snprintf (error, error_size, "rule %zu: action \"%s\" is not allow, deny or ask",
                          number, value);
                rc = -1;
            }
            have_action = true;
        }
        else {
            snprintf (error, error_size, "rule %zu: unknown setting \"%s\"", number, key);
            rc = -1;
        }
    }
    if (rc == 0 && !have_action) {
        snprintf (error, error_size, "rule %zu: action is required (allow, deny or ask)", number);
        rc = -1;
    }
    if (rc) {
        s_rule_destroy (&self);
        return NULL;
    }
    if (!self->tool)
        self->tool = strdup ("*");
    if (!self->agent)
        self->agent = strdup ("*");
    return self;
}

dsh_permission_policy_t *
dsh_permission_policy_new (zconfig_t *settings, char *error, size_t error_size)
{
    dsh_permission_policy_t *self = (dsh_permission_policy_t *) zmalloc (sizeof (dsh_permission_policy_t));
    assert (self);
    self->rules = zlistx_new ();
    assert (self->rules);
    zlistx_set_destructor (self->rules, (czmq_destructor *) s_rule_destroy);
    self->fallback = DSH_PERMISSION_ALLOW;
    self->approvals = strdup ("tcp://127.0.0.1:*");
    self->approval_timeout_ms = APPROVAL_TIMEOUT_DEFAULT_MS;

    int rc = 0;
    zconfig_t *item = settings? zconfig_child (settings): NULL;
    for (; item && rc == 0; item = zconfig_next (item)) {
        const char *key = zconfig_name (item);
        const char *value = zconfig_value (item)? zconfig_value (item): "";
        if (streq (key, "rule")) {
            s_rule_t *rule = s_rule_new (item, zlistx_size (self->rules) + 1, error, error_size);
            if (rule)
                zlistx_add_end (self->rules, rule);
            else
                rc = -1;
        }
        else
        if (streq (key, "default")) {
            if (dsh_permission_action_parse (value, &self->fallback)) {
                snprintf (error, error_size, "default: \"%s\" is not allow, deny or ask", value);
                rc = -1;
            }
        }
        else
        if (streq (key, "approvals")) {
            if (strncmp (value, "tcp://", 6) && strncmp (value, "ipc://", 6) && strncmp (value, "inproc://", 9)) {
                snprintf (error, error_size, "approvals: \"%s\" is not a tcp://, ipc:// or inproc:// endpoint",
                          value);
                rc = -1;
            }
            else {
                zstr_free (&self->approvals);
                self->approvals = strdup (value);
            }
        }
        else
        if (streq (key, "approval_timeout_ms"))
            rc = dsh_settings_int (key, value, 1, 24 * 3600 * 1000, &self->approval_timeout_ms,
                                   error, error_size);
        else
        if (!dsh_settings_chain_key (key)) {
            snprintf (error, error_size, "unknown setting \"%s\"", key);
            rc = -1;
        }
    }
    if (rc)
        dsh_permission_policy_destroy (&self);
    return self;
}

void
dsh_permission_policy_destroy (dsh_permission_policy_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_permission_policy_t *self = *self_p;
        zlistx_destroy (&self->rules);
        zstr_free (&self->approvals);
        free (self);
        *self_p = NULL;
    }
}

dsh_permission_action_t
dsh_permission_policy_decide (dsh_permission_policy_t *self, const char *tool, const dsh_toolhints_t *hints,
                              const char *agent)
{
    assert (self);
    assert (tool);
    if (!agent)
        agent = "";
    dsh_toolhints_t unknown = dsh_toolhints_from_msgpack (NULL);
    if (!hints)
        hints = &unknown;
    bool matched = false;
    dsh_permission_action_t strongest = DSH_PERMISSION_ALLOW;
    for (s_rule_t *rule = (s_rule_t *) zlistx_first (self->rules); rule;
         rule = (s_rule_t *) zlistx_next (self->rules)) {
        if (fnmatch (rule->tool, tool, 0) == 0 && fnmatch (rule->agent, agent, 0) == 0
        &&  s_hint_holds (rule->read_only, hints->read_only)
        &&  s_hint_holds (rule->destructive, hints->destructive)
        &&  s_hint_holds (rule->open_world, hints->open_world)) {
            matched = true;
            if (rule->action > strongest)
                strongest = rule->action;
        }
    }
    return matched? strongest: self->fallback;
}

size_t
dsh_permission_policy_rules (dsh_permission_policy_t *self)
{
    assert (self);
    return zlistx_size (self->rules);
}

dsh_permission_action_t
dsh_permission_policy_default (dsh_permission_policy_t *self)
{
    assert (self);
    return self->fallback;
}

const char *
dsh_permission_policy_approvals (dsh_permission_policy_t *self)
{
    assert (self);
    return self->approvals;
}

int
dsh_permission_policy_approval_timeout_ms (dsh_permission_policy_t *self)
{
    assert (self);
    return self->approval_timeout_ms;
}

int
dsh_permission_action_parse (const char *text, dsh_permission_action_t *action)
{
    assert (action);
    if (!text)
        return -1;
    if (streq (text, "allow"))
        *action = DSH_PERMISSION_ALLOW;
    else
    if (streq (text, "ask"))
        *action = DSH_PERMISSION_ASK;
    else
    if (streq (text, "deny"))
        *action = DSH_PERMISSION_DENY;
    else
        return -1;
    return 0;
}

const char *
dsh_permission_action_name (dsh_permission_action_t action)
{
    switch (action) {
        case DSH_PERMISSION_ALLOW: return "allow";
        case DSH_PERMISSION_ASK:   return "ask";
        case DSH_PERMISSION_DENY:  return "deny";
    }
    return "deny";
}

const char *
dsh_approval_outcome_name (dsh_approval_outcome_t outcome)
{
    switch (outcome) {
        case DSH_APPROVAL_ALLOWED:     return "allowed";
        case DSH_APPROVAL_REJECTED:    return "rejected";
        case DSH_APPROVAL_CANCELLED:   return "cancelled";
        case DSH_APPROVAL_UNAVAILABLE: return "unavailable";
    }
    return "unavailable";
}

int64_t
dsh_permission_ask_closes_at (int64_t now, int64_t deadline, int timeout_ms, bool *by_deadline)
{
    assert (by_deadline);
    int64_t closes_at = now + (timeout_ms > 0? timeout_ms: 0);
    *by_deadline = false;
    if (deadline) {
        int64_t left = deadline - now;
        int64_t margin = left / 4 < DEADLINE_MARGIN_MS? left / 4: DEADLINE_MARGIN_MS;
        if (margin < 0)
            margin = 0;
        if (deadline - margin <= closes_at) {
            closes_at = deadline - margin;
            *by_deadline = true;
        }
    }
    return closes_at;
}

//  --- The stage -----------------------------------------------------------

typedef struct {
    dsh_permission_policy_t *policy;
    dsh_stage_t *stage;         //  known from on_init on
    zsock_t *approvals;         //  ROUTER, bound at setup so a bad endpoint fails early
    char *endpoint;             //  as bound (the real port for "*")
    char *server_key;           //  the approvals socket's CURVE public key, or NULL
    zhashx_t *approvers;        //  identity as hex -> s_approver_t
    zhashx_t *pending;          //  request id -> s_request_t
} self_t;

typedef struct {
    zframe_t *identity;
    int64_t last_heard;         //  zclock_mono
    bool gone;                  //  unreachable or silent: s_approvers_sweep forgets it
} s_approver_t;

typedef struct {
    char *id;
    dsh_stage_call_t *call;     //  deferred: alive until resumed
    char *tool;
    json_t *summary;            //  {id, callId, tool, agent?, arguments}
    int timer_id;               //  -1 once fired
    bool by_deadline;           //  the timer is the call's deadline, not approval_timeout_ms
    void *owner;                //  the self_t, for the timer
} s_request_t;

static void
s_approver_destroy (s_approver_t **self_p)
{
    if (*self_p) {
        zframe_destroy (&(*self_p)->identity);
        free (*self_p);
        *self_p = NULL;
    }
}

//  Frees memory only: on_destroy runs it too, when the calls are gone.
static void
s_request_destroy (s_request_t **self_p)
{
    if (*self_p) {
        s_request_t *self = *self_p;
        zstr_free (&self->id);
        zstr_free (&self->tool);
        json_decref (self->summary);
        free (self);
        *self_p = NULL;
    }
}

static void
s_self_destroy (self_t **self_p)
{
    if (*self_p) {
        self_t *self = *self_p;
        zhashx_destroy (&self->pending);
        zhashx_destroy (&self->approvers);
        zsock_destroy (&self->approvals);
        zstr_free (&self->endpoint);
        zstr_free (&self->server_key);
        dsh_permission_policy_destroy (&self->policy);
        free (self);
        *self_p = NULL;
    }
}

static void
s_on_destroy (void *arg)
{
    self_t *self = (self_t *) arg;
    s_self_destroy (&self);
}

//  Send one message COMMAND BODY to the approver at identity, never
//  blocking. Returns 0, or -1 with errno: EHOSTUNREACH if the approver's
//  connection is gone, EAGAIN if it has stopped reading.
static int
s_send (self_t *self, zframe_t *identity, const char *command, const json_t *body)
{
    zmsg_t *envelope = zmsg_new ();
    zmsg_append (envelope, &(zframe_t *) { zframe_dup (identity) });
    zmsg_t *msg = dsh_proto_message (&envelope, command);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    int rc = -1;
    if (dsh_json_to_msgpack (&packer.pk, body) == 0) {
        zframe_t *frame = dsh_packer_frame (&packer);
        zmsg_append (msg, &frame);
        rc = dsh_sock_send (self->approvals, &msg);
    }
    else
        errno = EINVAL;
    int saved_errno = errno;
    dsh_packer_release (&packer);
    zmsg_destroy (&msg);
    errno = saved_errno;
    return rc;
}

//  Forget the approvers marked gone (not during a walk over them).
static void
s_approvers_sweep (self_t *self)
{
    zlistx_t *keys = zhashx_keys (self->approvers);
    assert (keys);
    for (const char *key = (const char *) zlistx_first (keys); key; key = (const char *) zlistx_next (keys))
        if (((s_approver_t *) zhashx_lookup (self->approvers, key))->gone)
            zhashx_delete (self->approvers, key);
    zlistx_destroy (&keys);
}

//  Send to every approver; forget those whose connection is gone. Returns
//  how many took the message.
static size_t
s_broadcast (self_t *self, const char *command, const json_t *body)
{
    size_t reached = 0;
    for (s_approver_t *approver = (s_approver_t *) zhashx_first (self->approvers); approver;
         approver = (s_approver_t *) zhashx_next (self->approvers)) {
        if (s_send (self, approver->identity, command, body) == 0)
            reached++;
        else
        if (errno == EHOSTUNREACH)
            approver->gone = true;
    }
    s_approvers_sweep (self);
    return reached;
}

//  Finish an open ask: resume or answer its call, tell the approvers, and
//  forget it. why says, for UNAVAILABLE, why nobody decided.
static void
s_request_resolve_by (self_t *self, s_request_t *request, dsh_approval_outcome_t outcome, const char *why,
                      const char *approver);

static void
s_request_resolve (self_t *self, s_request_t *request, dsh_approval_outcome_t outcome, const char *why)
{
    s_request_resolve_by (self, request, outcome, why, NULL);
}

//  The same, saying who decided (an approver's name, key or address; NULL
//  when no one did: a deadline, no approver left, a cancel).
static void
s_request_resolve_by (self_t *self, s_request_t *request, dsh_approval_outcome_t outcome, const char *why,
                      const char *approver)
{
    if (request->timer_id != -1)
        zloop_timer_end (dsh_stage_loop (self->stage), request->timer_id);
    request->timer_id = -1;
    dsh_stage_verdict_t verdict = DSH_STAGE_ANSWER;
    //  The audit's record of the call says who decided, what, and when
    json_t *note = json_pack ("{s:{s:s, s:s, s:I}}", "approval", "request", request->id,
                              "decision", dsh_approval_outcome_name (outcome), "atMs", (json_int_t) zclock_time ());
    if (approver)
        json_object_set_new (json_object_get (note, "approval"), "approver", json_string (approver));
    dsh_stage_call_note (request->call, note);
    if (outcome == DSH_APPROVAL_ALLOWED) {
        //  What a later sandbox stage reads as "a human let this call run";
        //  on every other call this stage removes the key (s_on_request)
        dsh_stage_call_set_meta (request->call, DSH_PERMISSION_APPROVAL_META,
                                 json_pack ("{s:s, s:s}", "stage", dsh_stage_name (self->stage),
                                            "id", request->id));
        verdict = DSH_STAGE_PASS;
    }
    else
    if (outcome == DSH_APPROVAL_REJECTED)
        dsh_stage_call_answer_error (request->call, DSH_E_DENIED, "tool \"%s\" was rejected by the approver",
                                     request->tool);
    else
    if (outcome == DSH_APPROVAL_CANCELLED)
        dsh_stage_call_answer_error (request->call, DSH_E_CANCELLED, "tool \"%s\" was cancelled while awaiting approval",
                                     request->tool);
    else
        dsh_stage_call_answer_error (request->call, DSH_E_DENIED, "tool \"%s\" requires approval (%s)",
                                     request->tool, why? why: "approval unavailable");
    dsh_stage_resume (self->stage, request->call, verdict);

    json_t *resolved = json_pack ("{s:s, s:s}", "id", request->id,
                                  "outcome", dsh_approval_outcome_name (outcome));
    s_broadcast (self, "RESOLVED", resolved);
    json_decref (resolved);
    zhashx_delete (self->pending, request->id);
}

//  With no approver left, nobody can answer the asks still open: close
//  them now rather than at their deadlines.
static void
s_close_abandoned (self_t *self)
{
    if (zhashx_size (self->approvers) > 0)
        return;
    s_request_t *request;
    while ((request = (s_request_t *) zhashx_first (self->pending)))
        s_request_resolve (self, request, DSH_APPROVAL_UNAVAILABLE, "every approver went away before deciding");
}

//  Decide an open ask as an approver would. Returns the outcome, or -1 if
//  no request has that id.
static int
s_decide (self_t *self, const char *id, bool allow, const char *approver)
{
    s_request_t *request = id? (s_request_t *) zhashx_lookup (self->pending, id): NULL;
    if (!request)
        return -1;
    dsh_approval_outcome_t outcome = allow? DSH_APPROVAL_ALLOWED: DSH_APPROVAL_REJECTED;
    s_request_resolve_by (self, request, outcome, NULL, approver);
    return (int) outcome;
}

//  Forget approvers not heard from lately: a host that vanished closes no
//  connection, so only its silence tells.
static void
s_approvers_expire (self_t *self)
{
    int64_t now = zclock_mono ();
    for (s_approver_t *approver = (s_approver_t *) zhashx_first (self->approvers); approver;
         approver = (s_approver_t *) zhashx_next (self->approvers))
        if (now - approver->last_heard > APPROVER_EXPIRY_MS)
            approver->gone = true;
    s_approvers_sweep (self);
}

//  Expire the silent, probe the rest (the send tells whether each is still
//  connected), and close asks nobody is left to answer.
static int
s_probe_timer (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    self_t *self = (self_t *) arg;
    s_approvers_expire (self);
    json_t *empty = json_object ();
    s_broadcast (self, "HEARTBEAT", empty);
    json_decref (empty);
    s_close_abandoned (self);
    return 0;
}

static void
s_send_error (self_t *self, zframe_t *identity, const char *message)
{
    json_t *body = json_pack ("{s:s, s:s}", "code", DSH_E_BAD_REQUEST, "message", message);
    s_send (self, identity, DSH_ERROR, body);
    json_decref (body);
}

//  A DECIDE {id, outcome} from an approver.
static void
s_handle_decide (self_t *self, zframe_t *identity, zmsg_t *msg)
{
    char reason [256] = "";
    zframe_t *frame = zmsg_pop (msg);
    dsh_doc_t *doc = frame? dsh_proto_decode_body (frame, reason, sizeof (reason)): NULL;
    if (!doc) {
        s_send_error (self, identity, *reason? reason: "DECIDE needs a body {id, outcome}");
        zframe_destroy (&frame);
        return;
    }
    const msgpack_object *root = dsh_doc_root (doc);
    char *id = dsh_doc_strdup (doc, dsh_map_get (root, "id"));
    const msgpack_object *outcome = dsh_map_get (root, "outcome");
    bool allow = dsh_str_eq (outcome, "allow");
    //  Who decided: the key's name, else its key, else the connection (the
    //  body frame came over the wire, with the connection's metadata)
    dsh_identity_t peer;
    dsh_identity_read_frame (&peer, frame);
    char who [128];
    if (peer.name || peer.key)
        snprintf (who, sizeof (who), "%s", peer.name? peer.name: peer.key);
    else {
        const char *address = zframe_meta (frame, "Peer-Address");
        snprintf (who, sizeof (who), "approver at %s", address? address: "an unknown address");
    }
    if (!id)
        s_send_error (self, identity, "DECIDE needs a str id");
    else
    if (!allow && !dsh_str_eq (outcome, "deny"))
        s_send_error (self, identity, "DECIDE outcome must be \"allow\" or \"deny\"");
    else
    if (s_decide (self, id, allow, who) == -1) {
        char *message = zsys_sprintf ("no pending request %s", id);
        s_send_error (self, identity, message);
        zstr_free (&message);
    }
    dsh_doc_destroy (&doc);
    zframe_destroy (&frame);
}

static int
s_handle_approvals (zloop_t *loop, zsock_t *reader, void *arg)
{
    (void) loop;
    self_t *self = (self_t *) arg;
    zmsg_t *msg = zmsg_recv (reader);
    if (!msg)
        return 0;
    //  Who sent it, off the last frame, which came over the wire: a ROUTER's
    //  routing id frame carries no metadata, so a message of that frame
    //  alone says nothing of its key and is dropped (issue 22: an APPROVER
    //  with no body frame was read as no key at all, and registered)
    if (zmsg_size (msg) < 2) {
        zmsg_destroy (&msg);
        return 0;
    }
    dsh_identity_t peer;
    dsh_identity_read_frame (&peer, zmsg_last (msg));
    zmsg_t *envelope = NULL;
    char command [DSH_COMMAND_MAX + 1];
    char reason [256];
    int rc = dsh_proto_split (msg, &envelope, command, sizeof (command), reason, sizeof (reason));
    //  An approver's DEALER adds nothing: the envelope is its identity alone
    if (!envelope || zmsg_size (envelope) != 1) {
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
        return 0;
    }
    zframe_t *identity = zmsg_first (envelope);
    if ((self->server_key && !dsh_identity_known (&peer))
    ||  (dsh_identity_known (&peer) && !dsh_identity_is (&peer, DSH_ROLE_APPROVER))) {
        s_send_error (self, identity, "only an approver or admin key may decide approvals");
        zmsg_destroy (&envelope);
        zmsg_destroy (&msg);
        return 0;
    }
    char *key = zframe_strhex (identity);
    s_approver_t *approver = (s_approver_t *) zhashx_lookup (self->approvers, key);
    if (rc)
        s_send_error (self, identity, reason);
    else
    if (streq (command, "GOODBYE")) {
        //  A clean exit is known at once, not 3 s later
        zhashx_delete (self->approvers, key);
        s_close_abandoned (self);
    }
    else {
        bool fresh = !approver;
        if (fresh) {
            approver = (s_approver_t *) zmalloc (sizeof (s_approver_t));
            assert (approver);
            approver->identity = zframe_dup (identity);
            zhashx_insert (self->approvers, key, approver);
        }
        approver->last_heard = zclock_mono ();
        //  A new approver sees every ask still open
        if (fresh)
            for (s_request_t *request = (s_request_t *) zhashx_first (self->pending); request;
                 request = (s_request_t *) zhashx_next (self->pending))
                s_send (self, identity, "PENDING", request->summary);
        if (streq (command, "DECIDE"))
            s_handle_decide (self, identity, msg);
        else
        if (!streq (command, "APPROVER")) {
            char *message = zsys_sprintf ("unknown command \"%s\"", command);
            s_send_error (self, identity, message);
            zstr_free (&message);
        }
    }
    zstr_free (&key);
    zmsg_destroy (&envelope);
    zmsg_destroy (&msg);
    return 0;
}

static int
s_request_timer (zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_request_t *request = (s_request_t *) arg;
    self_t *self = (self_t *) request->owner;
    //  A one-shot timer is gone once it fired: ending it again could end
    //  another timer that reused its id
    request->timer_id = -1;
    char why [96];
    if (request->by_deadline)
        snprintf (why, sizeof (why), "no decision came before the call's deadline");
    else
        snprintf (why, sizeof (why), "no decision within %d ms",
                  dsh_permission_policy_approval_timeout_ms (self->policy));
    s_request_resolve (self, request, DSH_APPROVAL_UNAVAILABLE, why);
    return 0;
}

//  A new request id: short, for humans to type, and unlikely to name a
//  request of an earlier run.
static char *
s_request_id (self_t *self)
{
    while (true) {
        zuuid_t *uuid = zuuid_new ();
        assert (uuid);
        char *id = zsys_sprintf ("%.8s", zuuid_str (uuid));
        zuuid_destroy (&uuid);
        for (char *cursor = id; *cursor; cursor++)
            *cursor = (char) tolower ((unsigned char) *cursor);
        if (!zhashx_lookup (self->pending, id))
            return id;
        zstr_free (&id);
    }
}

//  Put the call to the approvers and hold it until closes_at. Returns
//  false, holding nothing, if no approver took the request.
static bool
s_request_open (self_t *self, dsh_stage_call_t *call, int64_t closes_at, bool by_deadline)
{
    s_request_t *request = (s_request_t *) zmalloc (sizeof (s_request_t));
    assert (request);
    request->owner = self;
    request->id = s_request_id (self);
    request->call = call;
    request->tool = strdup (dsh_stage_call_name (call));
    request->timer_id = -1;
    request->by_deadline = by_deadline;
    //  Approvers are shown exactly the arguments that run, in Typed JSON
    //  where JSON cannot hold them (integer keys, non-UTF-8 text, bin):
    //  never a lossy copy, never null for arguments that are there
    const msgpack_object *arguments = dsh_stage_call_arguments (call);
    json_t *arguments_json = arguments? dsh_json_view (arguments): NULL;
    request->summary = json_object ();
    assert (request->summary);
    json_object_set_new (request->summary, "id", json_string (request->id));
    json_object_set_new (request->summary, "callId", json_string (dsh_stage_call_id (call)));
    json_object_set_new (request->summary, "tool", json_string (request->tool));
    const char *agent = dsh_stage_call_agent (call);
    if (agent)
        json_object_set_new (request->summary, "agent", json_string (agent));
    json_object_set_new (request->summary, "arguments", arguments_json? arguments_json: json_null ());
    if (s_broadcast (self, "PENDING", request->summary) == 0) {
        s_request_destroy (&request);
        return false;
    }
    int64_t delay = closes_at - zclock_mono ();
    request->timer_id = zloop_timer (dsh_stage_loop (self->stage), (size_t) (delay > 0? delay: 0), 1,
                                     s_request_timer, request);
    zhashx_insert (self->pending, request->id, request);
    return true;
}

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_stage_call_t *call, void *arg)
{
    self_t *self = (self_t *) arg;
    self->stage = stage;
    const char *tool = dsh_stage_call_name (call);
    //  Only this stage's approval counts: a caller's own is removed
    if (dsh_map_get (dsh_stage_call_meta (call), DSH_PERMISSION_APPROVAL_META))
        dsh_stage_call_set_meta (call, DSH_PERMISSION_APPROVAL_META, NULL);
    dsh_toolhints_t hints = dsh_toolhints_from_msgpack (dsh_stage_call_tool (call));
    dsh_permission_action_t action = dsh_permission_policy_decide (self->policy, tool, &hints,
                                                                    dsh_stage_call_agent (call));
    if (action == DSH_PERMISSION_ALLOW)
        return DSH_STAGE_PASS;
    if (action == DSH_PERMISSION_DENY) {
        dsh_stage_call_answer_error (call, DSH_E_DENIED, "tool \"%s\" is denied by policy", tool);
        return DSH_STAGE_ANSWER;
    }
    if (!dsh_stage_call_tool (call)) {
        //  Nobody is asked about a tool that does not exist; nor does the
        //  call go on, in case one is registered before it is dispatched
        dsh_stage_call_answer_error (call, DSH_E_UNKNOWN_TOOL, "unknown tool \"%s\"", tool);
        return DSH_STAGE_ANSWER;
    }
    int64_t now = zclock_mono ();
    bool by_deadline = false;
    int64_t closes_at = dsh_permission_ask_closes_at (now, dsh_stage_call_deadline (call),
                                                      dsh_permission_policy_approval_timeout_ms (self->policy),
                                                      &by_deadline);
    if (closes_at <= now) {
        dsh_stage_call_answer_error (call, DSH_E_DENIED,
                                     "tool \"%s\" requires approval (no decision came before the call's deadline)",
                                     tool);
        return DSH_STAGE_ANSWER;
    }
    s_approvers_expire (self);
    if (zhashx_size (self->approvers) == 0 || !s_request_open (self, call, closes_at, by_deadline)) {
        //  Sending found every approver gone: asks already open are as
        //  lost as this one
        s_close_abandoned (self);
        dsh_stage_call_answer_error (call, DSH_E_DENIED, "tool \"%s\" requires approval", tool);
        return DSH_STAGE_ANSWER;
    }
    return DSH_STAGE_DEFER;
}

static json_t *
s_on_control (dsh_stage_t *stage, const char *command, json_t *args, char **error, void *arg)
{
    self_t *self = (self_t *) arg;
    self->stage = stage;
    if (streq (command, "approvals")) {
        //  The socket's CURVE key comes with its address, over the
        //  caller's authenticated link to the broker
        json_t *data = json_pack ("{s:s}", "endpoint", self->endpoint);
        if (self->server_key)
            json_object_set_new (data, "serverKey", json_string (self->server_key));
        return data;
    }
    if (streq (command, "allowed")) {
        //  Which of these tools the agent could be let to call (allowed,
        //  or allowed once asked): for rendering its prompt
        const char *agent = json_string_value (json_object_get (args, "agent"));
        json_t *tools = json_object_get (args, "tools");
        if (!json_is_array (tools)) {
            *error = strdup (DSH_PERMISSION_ALLOWED_USAGE);
            return NULL;
        }
        json_t *allowed = json_array ();
        for (size_t index = 0; index < json_array_size (tools); index++) {
            //  A bare name is judged as an unknown tool: MCP's defaults
            json_t *tool = json_array_get (tools, index);
            const char *name = json_string_value (json_is_object (tool)? json_object_get (tool, "name"): tool);
            dsh_toolhints_t hints = dsh_toolhints_from_json (tool);
            if (name && dsh_permission_policy_decide (self->policy, name, &hints, agent) != DSH_PERMISSION_DENY)
                json_array_append_new (allowed, json_string (name));
        }
        return allowed;
    }
    if (streq (command, "pending")) {
        json_t *list = json_array ();
        for (s_request_t *request = (s_request_t *) zhashx_first (self->pending); request;
             request = (s_request_t *) zhashx_next (self->pending))
            json_array_append (list, request->summary);
        return list;
    }
    if (streq (command, "approve") || streq (command, "deny")) {
        const char *id = json_string_value (json_object_get (args, "id"));
        if (!id) {
            *error = zsys_sprintf ("%s needs {\"id\": \"<request id>\"}", command);
            return NULL;
        }
        int outcome = s_decide (self, id, streq (command, "approve"), dsh_stage_control_caller (self->stage));
        if (outcome == -1) {
            *error = zsys_sprintf ("no pending request %s", id);
            return NULL;
        }
        return json_pack ("{s:s, s:s}", "id", id,
                          "outcome", dsh_approval_outcome_name ((dsh_approval_outcome_t) outcome));
    }
    return NULL;
}

//  The caller cancelled a call waiting for approval: the request closes
//  as cancelled, and approvers are told.
static void
s_on_cancel (dsh_stage_t *stage, dsh_stage_call_t *call, void *arg)
{
    (void) stage;
    self_t *self = (self_t *) arg;
    for (s_request_t *request = zhashx_first (self->pending); request; request = zhashx_next (self->pending))
        if (request->call == call) {
            s_request_resolve (self, request, DSH_APPROVAL_CANCELLED, NULL);
            break;
        }
}

static void
s_on_init (dsh_stage_t *stage, void *arg)
{
    self_t *self = (self_t *) arg;
    self->stage = stage;
    zloop_t *loop = dsh_stage_loop (stage);
    if (zloop_reader (loop, self->approvals, s_handle_approvals, self))
        zsys_error ("%s: cannot read the approvals socket", dsh_stage_name (stage));
    zloop_timer (loop, APPROVER_PROBE_MS, 0, s_probe_timer, self);
}

int
dsh_permission_setup (zconfig_t *settings, const dsh_middleware_context_t *context,
                      dsh_stage_callbacks_t *callbacks, void **arg, char *error, size_t error_size)
{
    assert (callbacks);
    assert (arg);
    (void) context;
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->policy = dsh_permission_policy_new (settings, error, error_size);
    if (!self->policy) {
        s_self_destroy (&self);
        return -1;
    }
    self->approvers = zhashx_new ();
    assert (self->approvers);
    zhashx_set_destructor (self->approvers, (czmq_destructor *) s_approver_destroy);
    self->pending = zhashx_new ();
    assert (self->pending);
    zhashx_set_destructor (self->pending, (czmq_destructor *) s_request_destroy);

    //  Bound here, not in on_init, so that a taken port fails the setup
    //  with a reason; the socket moves to the stage's thread when it starts
    const char *approvals = dsh_permission_policy_approvals (self->policy);
    self->approvals = zsock_new (ZMQ_ROUTER);
    assert (self->approvals);
    zsock_set_linger (self->approvals, 0);
    zsock_set_maxmsgsize (self->approvals, APPROVALS_MAX_MESSAGE);
    //  A send to an approver that is gone fails instead of vanishing: that
    //  is how a killed approver is noticed without waiting for its silence
    zsock_set_router_mandatory (self->approvals, 1);
    //  An approver's host that vanishes loses its connection in the window
    dsh_sock_heal (self->approvals, 0, 0);
    //  Under CURVE only keys in the broker's allow-list connect, and of
    //  those only approvers and admins are heard (s_handle_approvals)
    dsh_curve_server (self->approvals, NULL);
    if (dsh_curve_server_key ())
        self->server_key = strdup (dsh_curve_server_key ());
    if (zsock_bind (self->approvals, "%s", approvals) == -1) {
        snprintf (error, error_size, "approvals: cannot bind \"%s\": %s", approvals, zmq_strerror (zmq_errno ()));
        s_self_destroy (&self);
        return -1;
    }
    self->endpoint = zsock_last_endpoint (self->approvals);

    *callbacks = (dsh_stage_callbacks_t) {
        .on_request = s_on_request,
        .on_control = s_on_control,
        .on_init = s_on_init,
        .on_cancel = s_on_cancel,
        .on_destroy = s_on_destroy
    };
    *arg = self;
    return 0;
}
