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

    A grant is plain data too (dsh_permission_grant_t, with a pure
    applies), so its binding is tested without a stage. The stage keeps
    the live grants by id, with wall-clock expiry (a grant outlives a
    broker restart in the broker's store): expired ones are dropped when
    looked at and on the probe timer. Decisions come as a DECIDE body or
    as a control command's args, both msgpack maps read by one reader into
    one s_decision_t and checked once, by s_decision_check, so both say
    the same things.
    To merge a grants.load the stage remembers for a few seconds which
    grants it made and which it revoked.
    =========================================================================
*/

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stddef.h>

#include "dsh_permission.h"
#include "dsh_curve.h"
#include "dsh_digest.h"
#include "dsh_doc.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_settings.h"
#include "dsh_sock.h"
#include "dsh_toolhints.h"

#define APPROVAL_TIMEOUT_DEFAULT_MS 120000
#define GRANT_MINUTES_DEFAULT       15
#define GRANT_MAX_MINUTES_DEFAULT   1440
#define GRANT_MINUTES_LIMIT         (366 * 24 * 60)     //  a year: the most either setting may say
#define GRANT_MADE_KEPT_MS          2000        //  grants.load keeps the stage's newer grants
#define GRANT_REVOKED_KEPT_MS       3000        //  and drops the ones it revoked lately
#define DECIDE_BY_MAX               128
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
    bool grants;
    int grant_minutes;
    int grant_max_minutes;
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
    self->grants = true;
    self->grant_minutes = GRANT_MINUTES_DEFAULT;
    self->grant_max_minutes = GRANT_MAX_MINUTES_DEFAULT;

    int rc = 0;
    bool have_grant_minutes = false;
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
        if (streq (key, "grants")) {
            if (streq (value, "true") || streq (value, "false"))
                self->grants = streq (value, "true");
            else {
                snprintf (error, error_size, "grants: \"%s\" is not true or false", value);
                rc = -1;
            }
        }
        else
        if (streq (key, "grant_minutes")) {
            rc = dsh_settings_int (key, value, 1, GRANT_MINUTES_LIMIT, &self->grant_minutes, error, error_size);
            have_grant_minutes = true;
        }
        else
        if (streq (key, "grant_max_minutes"))
            rc = dsh_settings_int (key, value, 1, GRANT_MINUTES_LIMIT, &self->grant_max_minutes,
                                   error, error_size);
        else
        if (!dsh_settings_chain_key (key)) {
            snprintf (error, error_size, "unknown setting \"%s\"", key);
            rc = -1;
        }
    }
    //  A default length longer than the limit set is cut to it; one set
    //  longer than the limit is a contradiction
    if (rc == 0 && self->grant_minutes > self->grant_max_minutes) {
        if (have_grant_minutes) {
            snprintf (error, error_size, "grant_minutes: %d is more than grant_max_minutes (%d)",
                      self->grant_minutes, self->grant_max_minutes);
            rc = -1;
        }
        else
            self->grant_minutes = self->grant_max_minutes;
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

bool
dsh_permission_policy_grants (dsh_permission_policy_t *self)
{
    assert (self);
    return self->grants;
}

int
dsh_permission_policy_grant_minutes (dsh_permission_policy_t *self)
{
    assert (self);
    return self->grant_minutes;
}

int
dsh_permission_policy_grant_max_minutes (dsh_permission_policy_t *self)
{
    assert (self);
    return self->grant_max_minutes;
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

//  --- Grants --------------------------------------------------------------

struct _dsh_permission_grant_t {
    char id [DSH_PERMISSION_GRANT_ID_SIZE + 1];
    char *stage;
    char *agent;
    char *tool;
    char definition_digest [DSH_DIGEST_SIZE + 1];
    char arguments_digest [DSH_DIGEST_SIZE + 1];    //  "" for scope tool
    char *chain_version;
    dsh_permission_scope_t scope;
    int64_t created_ms;
    int64_t expires_ms;
    char *by;
    //  What a call it lets through is given, made at its first such call
    //  (s_pass_granted): the meta stamp, packed, and the audit note's text
    //  up to its time
    zchunk_t *stamp;
    char *note_head;
};

int
dsh_permission_scope_parse (const char *text, dsh_permission_scope_t *scope)
{
    assert (scope);
    if (!text)
        return -1;
    if (streq (text, "once"))
        *scope = DSH_PERMISSION_SCOPE_ONCE;
    else
    if (streq (text, "tool"))
        *scope = DSH_PERMISSION_SCOPE_TOOL;
    else
    if (streq (text, "arguments"))
        *scope = DSH_PERMISSION_SCOPE_ARGUMENTS;
    else
        return -1;
    return 0;
}

const char *
dsh_permission_scope_name (dsh_permission_scope_t scope)
{
    switch (scope) {
        case DSH_PERMISSION_SCOPE_ONCE:      return "once";
        case DSH_PERMISSION_SCOPE_TOOL:      return "tool";
        case DSH_PERMISSION_SCOPE_ARGUMENTS: return "arguments";
    }
    return "once";
}

//  True if text is exactly size lowercase hex digits.
static bool
s_is_hex (const char *text, size_t size)
{
    return text && strlen (text) == size && strspn (text, "0123456789abcdef") == size;
}

dsh_permission_grant_t *
dsh_permission_grant_new (const char *id, const dsh_permission_subject_t *subject,
                          dsh_permission_scope_t scope, int64_t created_ms, int64_t expires_ms, const char *by)
{
    assert (s_is_hex (id, DSH_PERMISSION_GRANT_ID_SIZE));
    assert (subject);
    assert (scope != DSH_PERMISSION_SCOPE_ONCE);
    dsh_permission_grant_t *self = (dsh_permission_grant_t *) zmalloc (sizeof (dsh_permission_grant_t));
    assert (self);
    snprintf (self->id, sizeof (self->id), "%s", id);
    self->stage = strdup (subject->stage);
    self->agent = strdup (subject->agent);
    self->tool = strdup (subject->tool);
    snprintf (self->definition_digest, sizeof (self->definition_digest), "%s", subject->definition_digest);
    if (scope == DSH_PERMISSION_SCOPE_ARGUMENTS)
        snprintf (self->arguments_digest, sizeof (self->arguments_digest), "%s", subject->arguments_digest);
    self->chain_version = strdup (subject->chain_version);
    self->scope = scope;
    self->created_ms = created_ms;
    self->expires_ms = expires_ms;
    self->by = strdup (by? by: "");
    return self;
}

//  The str under key of a grant's map, or NULL (with a reason) if it is
//  missing or not a string; empty allows "". Copied into a list that owns
//  it.
static const char *
s_grant_str (const msgpack_object *map, const char *key, bool empty, zlistx_t *owned,
             char *error, size_t error_size)
{
    char *value = dsh_stage_strdup (dsh_map_get (map, key));
    if (!value || (!empty && !*value)) {
        snprintf (error, error_size, "grant: %s must be a%s string", key, empty? "": " non-empty");
        zstr_free (&value);
        return NULL;
    }
    zlistx_add_end (owned, value);
    return value;
}

//  The integer under key of a grant's map into *value; false if it is
//  missing or not a whole number in int64's range.
static bool
s_grant_int (const msgpack_object *map, const char *key, int64_t *value)
{
    const msgpack_object *object = dsh_map_get (map, key);
    if (object && object->type == MSGPACK_OBJECT_POSITIVE_INTEGER && object->via.u64 <= INT64_MAX)
        *value = (int64_t) object->via.u64;
    else
    if (object && object->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *value = object->via.i64;
    else
        return false;
    return true;
}

dsh_permission_grant_t *
dsh_permission_grant_from_msgpack (const msgpack_object *map, char *error, size_t error_size)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP) {
        snprintf (error, error_size, "grant: must be an object");
        return NULL;
    }
    zlistx_t *owned = zlistx_new ();
    zlistx_set_destructor (owned, (zlistx_destructor_fn *) zstr_free);
    dsh_permission_grant_t *grant = NULL;
    const char *id = s_grant_str (map, "id", false, owned, error, error_size);
    const char *stage = id? s_grant_str (map, "stage", false, owned, error, error_size): NULL;
    const char *agent = stage? s_grant_str (map, "agent", true, owned, error, error_size): NULL;
    const char *tool = agent? s_grant_str (map, "tool", false, owned, error, error_size): NULL;
    const char *definition = tool? s_grant_str (map, "definitionDigest", false, owned, error, error_size): NULL;
    const char *chain_version = definition? s_grant_str (map, "chainVersion", true, owned, error, error_size): NULL;
    const char *by = chain_version? s_grant_str (map, "by", true, owned, error, error_size): NULL;
    const char *scope_name = by? s_grant_str (map, "scope", false, owned, error, error_size): NULL;
    if (!scope_name) {
        zlistx_destroy (&owned);
        return NULL;
    }
    const msgpack_object *arguments = dsh_map_get (map, "argumentsDigest");
    char *arguments_digest = dsh_stage_strdup (arguments);
    int64_t created = 0;
    int64_t expires = 0;
    bool times = s_grant_int (map, "createdMs", &created) && s_grant_int (map, "expiresMs", &expires);
    dsh_permission_scope_t scope;
    if (!s_is_hex (id, DSH_PERMISSION_GRANT_ID_SIZE))
        snprintf (error, error_size, "grant: id \"%.40s\" is not %d hex digits", id, DSH_PERMISSION_GRANT_ID_SIZE);
    else
    if (dsh_permission_scope_parse (scope_name, &scope) || scope == DSH_PERMISSION_SCOPE_ONCE)
        snprintf (error, error_size, "grant %s: scope \"%.40s\" is not tool or arguments", id, scope_name);
    else
    if (!s_is_hex (definition, DSH_DIGEST_SIZE))
        snprintf (error, error_size, "grant %s: definitionDigest is not %d hex digits", id, DSH_DIGEST_SIZE);
    else
    if (scope == DSH_PERMISSION_SCOPE_ARGUMENTS && !s_is_hex (arguments_digest, DSH_DIGEST_SIZE))
        snprintf (error, error_size, "grant %s: argumentsDigest is not %d hex digits", id, DSH_DIGEST_SIZE);
    else
    if (scope == DSH_PERMISSION_SCOPE_TOOL && arguments && arguments->type != MSGPACK_OBJECT_NIL)
        snprintf (error, error_size, "grant %s: argumentsDigest is for scope arguments only", id);
    else
    if (!times || expires <= created)
        snprintf (error, error_size, "grant %s: createdMs and expiresMs must be whole numbers, expiresMs the later",
                  id);
    else {
        dsh_permission_subject_t subject = {
            .stage = stage, .agent = agent, .tool = tool, .definition_digest = definition,
            .arguments_digest = scope == DSH_PERMISSION_SCOPE_ARGUMENTS? arguments_digest: "",
            .chain_version = chain_version
        };
        grant = dsh_permission_grant_new (id, &subject, scope, created, expires, by);
    }
    zstr_free (&arguments_digest);
    zlistx_destroy (&owned);
    return grant;
}

dsh_permission_grant_t *
dsh_permission_grant_dup (const dsh_permission_grant_t *self)
{
    assert (self);
    dsh_permission_subject_t subject = {
        .stage = self->stage, .agent = self->agent, .tool = self->tool,
        .definition_digest = self->definition_digest, .arguments_digest = self->arguments_digest,
        .chain_version = self->chain_version
    };
    return dsh_permission_grant_new (self->id, &subject, self->scope, self->created_ms, self->expires_ms, self->by);
}

void
dsh_permission_grant_destroy (dsh_permission_grant_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        dsh_permission_grant_t *self = *self_p;
        zstr_free (&self->stage);
        zstr_free (&self->agent);
        zstr_free (&self->tool);
        zstr_free (&self->chain_version);
        zstr_free (&self->by);
        zchunk_destroy (&self->stamp);
        zstr_free (&self->note_head);
        free (self);
        *self_p = NULL;
    }
}

void
dsh_permission_grant_pack (const dsh_permission_grant_t *self, msgpack_packer *pk)
{
    assert (self);
    assert (pk);
    bool arguments = self->scope == DSH_PERMISSION_SCOPE_ARGUMENTS;
    msgpack_pack_map (pk, 10 + arguments);
    dsh_pack_cstr (pk, "id");
    dsh_pack_cstr (pk, self->id);
    dsh_pack_cstr (pk, "stage");
    dsh_pack_cstr (pk, self->stage);
    dsh_pack_cstr (pk, "agent");
    dsh_pack_cstr (pk, self->agent);
    dsh_pack_cstr (pk, "tool");
    dsh_pack_cstr (pk, self->tool);
    dsh_pack_cstr (pk, "definitionDigest");
    dsh_pack_cstr (pk, self->definition_digest);
    dsh_pack_cstr (pk, "chainVersion");
    dsh_pack_cstr (pk, self->chain_version);
    dsh_pack_cstr (pk, "scope");
    dsh_pack_cstr (pk, dsh_permission_scope_name (self->scope));
    dsh_pack_cstr (pk, "createdMs");
    msgpack_pack_int64 (pk, self->created_ms);
    dsh_pack_cstr (pk, "expiresMs");
    msgpack_pack_int64 (pk, self->expires_ms);
    dsh_pack_cstr (pk, "by");
    dsh_pack_cstr (pk, self->by);
    if (arguments) {
        dsh_pack_cstr (pk, "argumentsDigest");
        dsh_pack_cstr (pk, self->arguments_digest);
    }
}

json_t *
dsh_permission_grant_json (const dsh_permission_grant_t *self)
{
    assert (self);
    //  One encoding of a grant: this is its rendering for the audit
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_permission_grant_pack (self, &packer.pk);
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (packer.sbuf.data, packer.sbuf.size, error, sizeof (error));
    json_t *object = doc? dsh_json_from_msgpack (dsh_doc_root (doc)): NULL;
    assert (object);
    dsh_doc_destroy (&doc);
    dsh_packer_release (&packer);
    return object;
}

bool
dsh_permission_grant_applies (const dsh_permission_grant_t *self, const dsh_permission_subject_t *subject,
                              int64_t now_ms)
{
    assert (self);
    assert (subject);
    return now_ms < self->expires_ms
        && streq (self->stage, subject->stage)
        && streq (self->agent, subject->agent)
        && streq (self->tool, subject->tool)
        && streq (self->definition_digest, subject->definition_digest)
        && streq (self->chain_version, subject->chain_version)
        && (self->scope == DSH_PERMISSION_SCOPE_TOOL
            || streq (self->arguments_digest, subject->arguments_digest));
}

const char *
dsh_permission_grant_id (const dsh_permission_grant_t *self)
{
    assert (self);
    return self->id;
}

const char *
dsh_permission_grant_stage (const dsh_permission_grant_t *self)
{
    assert (self);
    return self->stage;
}

dsh_permission_scope_t
dsh_permission_grant_scope (const dsh_permission_grant_t *self)
{
    assert (self);
    return self->scope;
}

const char *
dsh_permission_grant_by (const dsh_permission_grant_t *self)
{
    assert (self);
    return self->by;
}

int64_t
dsh_permission_grant_expires_ms (const dsh_permission_grant_t *self)
{
    assert (self);
    return self->expires_ms;
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
    char *name;                 //  the stage's name, which grants are bound to
    char *chain_version;        //  the chain's version, "" if unknown
    zhashx_t *grants;           //  grant id -> dsh_permission_grant_t
    zhashx_t *definitions;      //  tool name -> s_definition_t: its entry's digest, kept
    zhashx_t *made;             //  grant id -> int64_t zclock_mono it was made here
    zhashx_t *revoked;          //  grant id -> int64_t zclock_mono it was revoked here
} self_t;

typedef struct {
    zframe_t *identity;
    int64_t last_heard;         //  zclock_mono
    bool gone;                  //  unreachable or silent: s_approvers_sweep forgets it
} s_approver_t;

typedef struct {
    char *id;
    dsh_call_t *call;     //  deferred: alive until resumed
    char *tool;
    char *agent;                //  "" if the call has none
    char definition_digest [DSH_DIGEST_SIZE + 1];
    char arguments_digest [DSH_DIGEST_SIZE + 1];
    char *chain_version;        //  of the chain the call came down
    bool grantable;             //  grants are on, and both digests could be made
    json_t *summary;            //  the PENDING body
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
        zstr_free (&self->agent);
        zstr_free (&self->chain_version);
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
        zhashx_destroy (&self->grants);
        zhashx_destroy (&self->definitions);
        zhashx_destroy (&self->made);
        zhashx_destroy (&self->revoked);
        zsock_destroy (&self->approvals);
        zstr_free (&self->endpoint);
        zstr_free (&self->server_key);
        zstr_free (&self->name);
        zstr_free (&self->chain_version);
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

//  Who or what decided an open ask; NULL for a decider when no one did (a
//  deadline, no approver left, a cancel).
typedef struct {
    const char *approver;                   //  name, key or address, and "(by ...)"; may be NULL
    const dsh_permission_grant_t *made;     //  the grant this decision made, or NULL
    const dsh_permission_grant_t *covered;  //  a grant made on another ask that covers this one
} s_decider_t;

//  Finish an open ask: resume or answer its call, tell the approvers, and
//  forget it. why says, for UNAVAILABLE, why nobody decided.
static void
s_request_resolve_by (self_t *self, s_request_t *request, dsh_approval_outcome_t outcome, const char *why,
                      const s_decider_t *decider);

static void
s_request_resolve (self_t *self, s_request_t *request, dsh_approval_outcome_t outcome, const char *why)
{
    s_request_resolve_by (self, request, outcome, why, NULL);
}

//  The same, saying who or what decided.
static void
s_request_resolve_by (self_t *self, s_request_t *request, dsh_approval_outcome_t outcome, const char *why,
                      const s_decider_t *decider)
{
    static const s_decider_t nobody = { NULL, NULL, NULL };
    if (!decider)
        decider = &nobody;
    if (request->timer_id != -1)
        zloop_timer_end (dsh_stage_loop (self->stage), request->timer_id);
    request->timer_id = -1;
    dsh_stage_verdict_t verdict = DSH_STAGE_ANSWER;
    const dsh_permission_grant_t *grant = decider->made? decider->made: decider->covered;
    const char *grant_id = grant? dsh_permission_grant_id (grant): NULL;
    //  The audit's record of the call says who decided, what, and when; a
    //  grant made here goes whole, for the broker to store
    const char *approver = decider->covered? dsh_permission_grant_by (decider->covered): decider->approver;
    json_t *approval = json_pack ("{s:s, s:s, s:I}", "request", request->id,
                                  "decision", decider->covered? "granted": dsh_approval_outcome_name (outcome),
                                  "atMs", (json_int_t) zclock_time ());
    if (approver)
        json_object_set_new (approval, "approver", json_string (approver));
    if (decider->made)
        json_object_set_new (approval, "grant", dsh_permission_grant_json (decider->made));
    else
    if (decider->covered)
        json_object_set_new (approval, "grant", json_string (grant_id));
    dsh_stage_call_note (request->call, json_pack ("{s:o}", "approval", approval));
    if (outcome == DSH_APPROVAL_ALLOWED) {
        //  What a later sandbox stage reads as "a human let this call run";
        //  on every other call this stage removes the key (s_on_request)
        dsh_packer_t stamp;
        dsh_packer_init (&stamp);
        msgpack_pack_map (&stamp.pk, decider->covered? 3: 2);
        dsh_packer_kv_str (&stamp, "stage", self->name);
        dsh_packer_kv_str (&stamp, "id", request->id);
        if (decider->covered)
            dsh_packer_kv_str (&stamp, "grant", grant_id);
        dsh_stage_call_set_meta (request->call, DSH_PERMISSION_APPROVAL_META, stamp.sbuf.data, stamp.sbuf.size);
        dsh_packer_release (&stamp);
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
    if (grant_id)
        json_object_set_new (resolved, "grant", json_string (grant_id));
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

//  --- Grants in the stage ---------------------------------------------------

static void
s_mark_destroy (int64_t **self_p)
{
    free (*self_p);
    *self_p = NULL;
}

//  Note that id was made or revoked now.
static void
s_mark (zhashx_t *marks, const char *id)
{
    int64_t *at = (int64_t *) malloc (sizeof (int64_t));
    assert (at);
    *at = zclock_mono ();
    zhashx_update (marks, id, at);
}

//  True if id was marked within the last within_ms.
static bool
s_marked (zhashx_t *marks, const char *id, int64_t within_ms)
{
    int64_t *at = (int64_t *) zhashx_lookup (marks, id);
    return at && zclock_mono () - *at <= within_ms;
}

//  Forget marks older than within_ms.
static void
s_marks_prune (zhashx_t *marks, int64_t within_ms)
{
    zlistx_t *keys = zhashx_keys (marks);
    assert (keys);
    for (const char *key = (const char *) zlistx_first (keys); key; key = (const char *) zlistx_next (keys))
        if (!s_marked (marks, key, within_ms))
            zhashx_delete (marks, key);
    zlistx_destroy (&keys);
}

//  Drop the grants that have expired, and the marks too old to matter.
static void
s_grants_expire (self_t *self)
{
    int64_t now = zclock_time ();
    zlistx_t *keys = zhashx_keys (self->grants);
    assert (keys);
    for (const char *key = (const char *) zlistx_first (keys); key; key = (const char *) zlistx_next (keys))
        if (dsh_permission_grant_expires_ms ((dsh_permission_grant_t *) zhashx_lookup (self->grants, key)) <= now)
            zhashx_delete (self->grants, key);
    zlistx_destroy (&keys);
    s_marks_prune (self->made, GRANT_MADE_KEPT_MS);
    s_marks_prune (self->revoked, GRANT_REVOKED_KEPT_MS);
}

//  A tool entry's definition digest, kept by name with the entry's bytes:
//  computed again only when the entry changes (a grant's check is on every
//  granted call's path)
typedef struct {
    zchunk_t *entry;
    char digest [DSH_DIGEST_SIZE + 1];
} s_definition_t;

static void
s_definition_destroy (s_definition_t **self_p)
{
    if (*self_p) {
        zchunk_destroy (&(*self_p)->entry);
        free (*self_p);
        *self_p = NULL;
    }
}

//  At most this many tools' digests are kept (then they are made anew)
#define S_DEFINITIONS_MAX 4096

//  The definition digest of the call's tool into digest. Returns 0, or -1
//  if it cannot be made (no tool, too deep).
static int
s_definition_digest (self_t *self, dsh_call_t *call, char *digest)
{
    size_t size;
    const byte *bytes = dsh_stage_call_tool_bytes (call, &size);
    const char *name = dsh_call_name (call);
    s_definition_t *known = bytes? (s_definition_t *) zhashx_lookup (self->definitions, name): NULL;
    if (known && zchunk_size (known->entry) == size && memcmp (zchunk_data (known->entry), bytes, size) == 0) {
        memcpy (digest, known->digest, DSH_DIGEST_SIZE + 1);
        return 0;
    }
    if (!bytes || dsh_digest_definition (dsh_stage_call_tool (call), digest))
        return -1;
    if (zhashx_size (self->definitions) >= S_DEFINITIONS_MAX)
        zhashx_purge (self->definitions);
    s_definition_t *made = (s_definition_t *) zmalloc (sizeof (s_definition_t));
    assert (made);
    made->entry = zchunk_new (bytes, size);
    memcpy (made->digest, digest, DSH_DIGEST_SIZE + 1);
    zhashx_update (self->definitions, name, made);
    return 0;
}

//  A live grant that lets subject's call through, or NULL. The arguments'
//  digest is made only when a grant for arguments could apply (into
//  subject's buffer, *arguments_made then true), or -1 if it cannot be.
static dsh_permission_grant_t *
s_grant_find (self_t *self, dsh_permission_subject_t *subject, dsh_call_t *call, char *arguments,
              bool *arguments_made)
{
    int64_t now = zclock_time ();
    for (dsh_permission_grant_t *grant = (dsh_permission_grant_t *) zhashx_first (self->grants); grant;
         grant = (dsh_permission_grant_t *) zhashx_next (self->grants)) {
        if (dsh_permission_grant_scope (grant) == DSH_PERMISSION_SCOPE_ARGUMENTS && !*arguments_made) {
            if (dsh_digest_value (dsh_call_arguments (call), arguments))
                continue;
            *arguments_made = true;
        }
        if (dsh_permission_grant_applies (grant, subject, now))
            return grant;
    }
    return NULL;
}

//  The call of an open ask, as a grant sees it.
static dsh_permission_subject_t
s_request_subject (self_t *self, s_request_t *request)
{
    return (dsh_permission_subject_t) {
        .stage = self->name, .agent = request->agent, .tool = request->tool,
        .definition_digest = request->definition_digest, .arguments_digest = request->arguments_digest,
        .chain_version = request->chain_version
    };
}

//  A new grant covers the asks still open that it would let through had
//  they come now: they go on as granted.
static void
s_grant_covers_open (self_t *self, const dsh_permission_grant_t *grant)
{
    int64_t now = zclock_time ();
    zlistx_t *covered = zlistx_new ();
    assert (covered);
    for (s_request_t *request = (s_request_t *) zhashx_first (self->pending); request;
         request = (s_request_t *) zhashx_next (self->pending)) {
        dsh_permission_subject_t subject = s_request_subject (self, request);
        if (request->grantable && dsh_permission_grant_applies (grant, &subject, now))
            zlistx_add_end (covered, request);
    }
    s_decider_t decider = { .covered = grant };
    for (s_request_t *request = (s_request_t *) zlistx_first (covered); request;
         request = (s_request_t *) zlistx_next (covered))
        s_request_resolve_by (self, request, DSH_APPROVAL_ALLOWED, NULL, &decider);
    zlistx_destroy (&covered);
}

//  A new id of 8 hex digits: short, for humans to type, unlikely to name
//  one of an earlier run, and not one of taken's keys.
static char *
s_fresh_id (zhashx_t *taken)
{
    while (true) {
        zuuid_t *uuid = zuuid_new ();
        assert (uuid);
        char *id = zsys_sprintf ("%.8s", zuuid_str (uuid));
        zuuid_destroy (&uuid);
        for (char *cursor = id; *cursor; cursor++)
            *cursor = (char) tolower ((unsigned char) *cursor);
        if (!zhashx_lookup (taken, id))
            return id;
        zstr_free (&id);
    }
}

//  --- Decisions -------------------------------------------------------------

//  A decision on an open ask, as DECIDE or the approve and deny control
//  commands give it. Strings are borrowed from the message; NULL: absent.
typedef struct {
    char *id;
    char *outcome;              //  DECIDE's; the control commands are named for theirs
    char *scope;
    bool has_minutes;
    int64_t minutes;
    bool has_seconds;
    int64_t seconds;
    char *by;
    char *arguments_digest;
    char *definition_digest;
} s_decision_t;

//  True if text is 1 to max bytes, none of them a control character:
//  what the audit and a terminal may show as it is.
static bool
s_printable (const char *text, size_t max)
{
    size_t size = strlen (text);
    if (size == 0 || size > max)
        return false;
    for (const char *cursor = text; *cursor; cursor++)
        if ((unsigned char) *cursor < 0x20 || *cursor == 0x7f)
            return false;
    return true;
}

//  Check a decision against its request and the policy: into *scope and
//  *length_ms (of a grant) if it holds. Returns 0, or -1 with a reason
//  (the request stays open).
static int
s_decision_check (self_t *self, s_request_t *request, const s_decision_t *decision, bool allow,
                  dsh_permission_scope_t *scope, int64_t *length_ms, char *error, size_t error_size)
{
    int max_minutes = dsh_permission_policy_grant_max_minutes (self->policy);
    *scope = DSH_PERMISSION_SCOPE_ONCE;
    *length_ms = (int64_t) dsh_permission_policy_grant_minutes (self->policy) * 60000;
    if (decision->arguments_digest && !streq (decision->arguments_digest, request->arguments_digest))
        snprintf (error, error_size, "the request's arguments are not the ones decided on");
    else
    if (decision->definition_digest && !streq (decision->definition_digest, request->definition_digest))
        snprintf (error, error_size, "the request's tool definition is not the one decided on");
    else
    if (decision->scope && dsh_permission_scope_parse (decision->scope, scope))
        snprintf (error, error_size, "scope must be \"once\", \"tool\" or \"arguments\", not \"%.40s\"",
                  decision->scope);
    else
    if (*scope == DSH_PERMISSION_SCOPE_ONCE && (decision->has_minutes || decision->has_seconds))
        snprintf (error, error_size, "%s is for a grant: it needs scope \"tool\" or \"arguments\"",
                  decision->has_minutes? "minutes": "seconds");
    else
    if (*scope != DSH_PERMISSION_SCOPE_ONCE && !allow)
        snprintf (error, error_size, "a grant (scope \"%s\") needs outcome \"allow\"",
                  dsh_permission_scope_name (*scope));
    else
    if (*scope != DSH_PERMISSION_SCOPE_ONCE && !dsh_permission_policy_grants (self->policy))
        snprintf (error, error_size, "stage \"%s\" makes no grants (grants = false): decide with scope \"once\"",
                  self->name);
    else
    if (*scope != DSH_PERMISSION_SCOPE_ONCE && !request->grantable)
        snprintf (error, error_size, "request %s cannot be granted: its digests could not be made",
                  request->id);
    else
    if (decision->has_minutes && decision->has_seconds)
        snprintf (error, error_size, "give minutes or seconds, not both");
    else
    if (decision->has_minutes && (decision->minutes < 1 || decision->minutes > max_minutes))
        snprintf (error, error_size, "minutes must be from 1 to %d (grant_max_minutes), not %" PRId64,
                  max_minutes, decision->minutes);
    else
    if (decision->has_seconds && (decision->seconds < 1 || decision->seconds > (int64_t) max_minutes * 60))
        snprintf (error, error_size, "seconds must be from 1 to %" PRId64 " (grant_max_minutes * 60), not %" PRId64,
                  (int64_t) max_minutes * 60, decision->seconds);
    else
    if (decision->by && !s_printable (decision->by, DECIDE_BY_MAX))
        snprintf (error, error_size, "by must be 1 to %d printable bytes", DECIDE_BY_MAX);
    else {
        if (decision->has_minutes)
            *length_ms = decision->minutes * 60000;
        else
        if (decision->has_seconds)
            *length_ms = decision->seconds * 1000;
        return 0;
    }
    return -1;
}

//  Who decided, as the audit records it: "<who> (by <by>)"; NULL if
//  neither is known. Caller frees.
static char *
s_approver_name (const char *who, const char *by)
{
    if (by)
        return zsys_sprintf ("%s (by %s)", who? who: "an unknown approver", by);
    return who? strdup (who): NULL;
}

//  Decide an open ask with a checked decision, as who; a grant's id (if it
//  made one) into grant_id.
static void
s_decide (self_t *self, s_request_t *request, const s_decision_t *decision, bool allow,
          dsh_permission_scope_t scope, int64_t length_ms, const char *who,
          char grant_id [DSH_PERMISSION_GRANT_ID_SIZE + 1])
{
    char *approver = s_approver_name (who, decision->by);
    s_decider_t decider = { .approver = approver };
    *grant_id = 0;
    if (scope != DSH_PERMISSION_SCOPE_ONCE) {
        int64_t now = zclock_time ();
        dsh_permission_subject_t subject = s_request_subject (self, request);
        char *id = s_fresh_id (self->grants);
        dsh_permission_grant_t *grant = dsh_permission_grant_new (id, &subject, scope, now, now + length_ms,
                                                                  approver? approver: "");
        zhashx_insert (self->grants, id, grant);
        s_mark (self->made, id);
        decider.made = grant;
        snprintf (grant_id, DSH_PERMISSION_GRANT_ID_SIZE + 1, "%s", id);
        zstr_free (&id);
    }
    s_request_resolve_by (self, request, allow? DSH_APPROVAL_ALLOWED: DSH_APPROVAL_REJECTED, NULL, &decider);
    if (decider.made)
        s_grant_covers_open (self, decider.made);
    zstr_free (&approver);
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
//  connected), close asks nobody is left to answer, and drop expired grants.
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
    s_grants_expire (self);
    return 0;
}

//  An ERROR to the approver at identity, naming the request its DECIDE was
//  about (id; NULL if none).
static void
s_send_error_about (self_t *self, zframe_t *identity, const char *id, const char *message)
{
    json_t *body = json_pack ("{s:s, s:s}", "code", DSH_E_BAD_REQUEST, "message", message);
    if (id)
        json_object_set_new (body, "id", json_string (id));
    s_send (self, identity, DSH_ERROR, body);
    json_decref (body);
}

static void
s_send_error (self_t *self, zframe_t *identity, const char *message)
{
    s_send_error_about (self, identity, NULL, message);
}

//  The str under key of a decision's map into *value (a new string;
//  absent or nil: NULL). Returns 0, or -1 with a reason if it is there and
//  not a str.
static int
s_decision_str (const msgpack_object *root, const char *key, char **value, char *error, size_t error_size)
{
    const msgpack_object *object = dsh_map_get (root, key);
    *value = NULL;
    if (!object || object->type == MSGPACK_OBJECT_NIL)
        return 0;
    *value = dsh_stage_strdup (object);
    if (*value)
        return 0;
    snprintf (error, error_size, "%s must be a string", key);
    return -1;
}

//  The whole number under key of a decision's map into *value; *present
//  says if it was there (nil: absent). Returns 0, or -1 with a reason if
//  it is there and not an integer.
static int
s_decision_int (const msgpack_object *root, const char *key, bool *present, int64_t *value,
                char *error, size_t error_size)
{
    const msgpack_object *object = dsh_map_get (root, key);
    *present = object && object->type != MSGPACK_OBJECT_NIL;
    if (!*present)
        return 0;
    if (object->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *value = object->via.u64 > INT64_MAX? INT64_MAX: (int64_t) object->via.u64;
    else
    if (object->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *value = object->via.i64;
    else {
        snprintf (error, error_size, "%s must be a whole number", key);
        return -1;
    }
    return 0;
}

//  Frees the decision's strings.
static void
s_decision_release (s_decision_t *decision)
{
    zstr_free (&decision->id);
    zstr_free (&decision->outcome);
    zstr_free (&decision->scope);
    zstr_free (&decision->by);
    zstr_free (&decision->arguments_digest);
    zstr_free (&decision->definition_digest);
}

//  A decision from a DECIDE body or a control command's args (root, a map;
//  NULL reads as empty); outcome is read only from a DECIDE (the control
//  commands are named for theirs). Returns 0, or -1 with a reason; release
//  the decision either way.
static int
s_decision_from_map (const msgpack_object *root, bool with_outcome, s_decision_t *decision,
                     char *error, size_t error_size)
{
    memset (decision, 0, sizeof (*decision));
    if (s_decision_str (root, "id", &decision->id, error, error_size)
    ||  (with_outcome && s_decision_str (root, "outcome", &decision->outcome, error, error_size))
    ||  s_decision_str (root, "scope", &decision->scope, error, error_size)
    ||  s_decision_int (root, "minutes", &decision->has_minutes, &decision->minutes, error, error_size)
    ||  s_decision_int (root, "seconds", &decision->has_seconds, &decision->seconds, error, error_size)
    ||  s_decision_str (root, "by", &decision->by, error, error_size)
    ||  s_decision_str (root, "argumentsDigest", &decision->arguments_digest, error, error_size)
    ||  s_decision_str (root, "definitionDigest", &decision->definition_digest, error, error_size))
        return -1;
    return 0;
}

//  A DECIDE from an approver (s_decision_t says what it may hold).
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
    s_decision_t decision;
    int rc = s_decision_from_map (dsh_doc_root (doc), true, &decision, reason, sizeof (reason));
    bool allow = decision.outcome && streq (decision.outcome, "allow");
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
    s_request_t *request = decision.id? (s_request_t *) zhashx_lookup (self->pending, decision.id): NULL;
    dsh_permission_scope_t scope;
    int64_t length_ms;
    if (rc == 0 && !decision.id)
        snprintf (reason, sizeof (reason), "DECIDE needs a str id");
    else
    if (rc == 0 && !allow && !(decision.outcome && streq (decision.outcome, "deny")))
        snprintf (reason, sizeof (reason), "DECIDE outcome must be \"allow\" or \"deny\"");
    else
    if (rc == 0 && !request)
        snprintf (reason, sizeof (reason), "no pending request %s", decision.id);
    else
    if (rc == 0 && s_decision_check (self, request, &decision, allow, &scope, &length_ms,
                                     reason, sizeof (reason)) == 0) {
        char grant_id [DSH_PERMISSION_GRANT_ID_SIZE + 1];
        s_decide (self, request, &decision, allow, scope, length_ms, who, grant_id);
        *reason = 0;
    }
    if (*reason)
        s_send_error_about (self, identity, decision.id, reason);
    s_decision_release (&decision);
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

//  Put the call to the approvers and hold it until closes_at (zclock_mono).
//  Returns false, holding nothing, if no approver took the request.
static bool
s_request_open (self_t *self, dsh_call_t *call, const dsh_permission_subject_t *subject, bool grantable,
                int64_t closes_at, bool by_deadline)
{
    s_request_t *request = (s_request_t *) zmalloc (sizeof (s_request_t));
    assert (request);
    request->owner = self;
    request->id = s_fresh_id (self->pending);
    request->call = call;
    request->tool = strdup (subject->tool);
    request->agent = strdup (subject->agent);
    snprintf (request->definition_digest, sizeof (request->definition_digest), "%s", subject->definition_digest);
    request->chain_version = strdup (subject->chain_version);
    snprintf (request->arguments_digest, sizeof (request->arguments_digest), "%s", subject->arguments_digest);
    request->grantable = grantable;
    request->timer_id = -1;
    request->by_deadline = by_deadline;
    //  Approvers are shown exactly the arguments that run, in Typed JSON
    //  where JSON cannot hold them (integer keys, non-UTF-8 text, bin):
    //  never a lossy copy, never null for arguments that are there
    const msgpack_object *arguments = dsh_call_arguments (call);
    json_t *arguments_json = arguments? dsh_json_view (arguments): NULL;
    int64_t now_ms = zclock_time ();
    request->summary = json_object ();
    assert (request->summary);
    json_object_set_new (request->summary, "id", json_string (request->id));
    json_object_set_new (request->summary, "callId", json_string (dsh_call_id (call)));
    json_object_set_new (request->summary, "tool", json_string (request->tool));
    const char *agent = dsh_call_agent (call);
    if (agent)
        json_object_set_new (request->summary, "agent", json_string (agent));
    json_object_set_new (request->summary, "arguments", arguments_json? arguments_json: json_null ());
    //  What a decision is bound to, and what a grant made from it would be
    json_object_set_new (request->summary, "definitionDigest", json_string (request->definition_digest));
    json_object_set_new (request->summary, "argumentsDigest", json_string (request->arguments_digest));
    json_object_set_new (request->summary, "chainVersion", json_string (request->chain_version));
    json_object_set_new (request->summary, "receivedMs", json_integer ((json_int_t) now_ms));
    json_object_set_new (request->summary, "closesMs",
                         json_integer ((json_int_t) (now_ms + closes_at - zclock_mono ())));
    json_object_set_new (request->summary, "grants", json_boolean (grantable));
    json_object_set_new (request->summary, "grantMinutes",
                         json_integer (dsh_permission_policy_grant_minutes (self->policy)));
    json_object_set_new (request->summary, "grantMaxMinutes",
                         json_integer (dsh_permission_policy_grant_max_minutes (self->policy)));
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

//  A call a grant covers goes on with the grant named in its stamp, and in
//  what the audit records of it.
static void
s_pass_granted (self_t *self, dsh_call_t *call, dsh_permission_grant_t *grant)
{
    if (!grant->stamp) {
        //  Made once per grant: every call it lets through carries the same
        //  stamp, and a note that differs only in its time
        dsh_packer_t stamp;
        dsh_packer_init (&stamp);
        msgpack_pack_map (&stamp.pk, 3);
        dsh_packer_kv_str (&stamp, "stage", self->name);
        dsh_packer_kv_str (&stamp, "id", grant->id);
        dsh_packer_kv_str (&stamp, "grant", grant->id);
        grant->stamp = zchunk_new (stamp.sbuf.data, stamp.sbuf.size);
        dsh_packer_release (&stamp);
        json_t *by = json_string (grant->by);
        char *approver = json_dumps (by, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        json_decref (by);
        grant->note_head = zsys_sprintf ("{\"approval\":{\"grant\":\"%s\",\"approver\":%s,\"decision\":\"granted\","
                                         "\"atMs\":", grant->id, approver? approver: "\"\"");
        free (approver);
    }
    dsh_stage_call_set_meta (call, DSH_PERMISSION_APPROVAL_META, zchunk_data (grant->stamp),
                             zchunk_size (grant->stamp));
    char note [512];
    int size = snprintf (note, sizeof (note), "%s%" PRId64 "}}", grant->note_head, zclock_time ());
    if (size > 0 && (size_t) size < sizeof (note))
        dsh_stage_call_note_text (call, note);
    else {
        char *long_note = zsys_sprintf ("%s%" PRId64 "}}", grant->note_head, zclock_time ());
        dsh_stage_call_note_text (call, long_note);
        zstr_free (&long_note);
    }
}

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    self_t *self = (self_t *) arg;
    self->stage = stage;
    const char *tool = dsh_call_name (call);
    //  Only this stage's approval counts: a caller's own is removed
    if (dsh_map_get (dsh_call_meta (call), DSH_PERMISSION_APPROVAL_META))
        dsh_stage_call_set_meta (call, DSH_PERMISSION_APPROVAL_META, NULL, 0);
    dsh_toolhints_t hints = dsh_toolhints_from_msgpack (dsh_stage_call_tool (call));
    dsh_permission_action_t action = dsh_permission_policy_decide (self->policy, tool, &hints,
                                                                    dsh_call_agent (call));
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
    //  What a grant, and an approver's decision, are bound to
    char definition [DSH_DIGEST_SIZE + 1] = "";
    char arguments [DSH_DIGEST_SIZE + 1] = "";
    bool arguments_made = false;
    bool digested = s_definition_digest (self, call, definition) == 0;
    const char *agent = dsh_call_agent (call);
    //  An external stage's call says its broker's chain; an inline one's is
    //  the context's
    const char *version = dsh_stage_call_chain_version (call);
    dsh_permission_subject_t subject = {
        .stage = self->name, .agent = agent? agent: "", .tool = tool,
        .definition_digest = definition, .arguments_digest = arguments,
        .chain_version = version? version: self->chain_version
    };
    bool grantable = digested && dsh_permission_policy_grants (self->policy);
    dsh_permission_grant_t *grant = grantable? s_grant_find (self, &subject, call, arguments, &arguments_made): NULL;
    if (grant) {
        s_pass_granted (self, call, grant);
        return DSH_STAGE_PASS;
    }
    //  A request shows both digests, and a decision may grant on either
    if (!arguments_made && dsh_digest_value (dsh_call_arguments (call), arguments))
        grantable = false;
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
    if (zhashx_size (self->approvers) == 0
    ||  !s_request_open (self, call, &subject, grantable, closes_at, by_deadline)) {
        //  Sending found every approver gone: asks already open are as
        //  lost as this one
        s_close_abandoned (self);
        dsh_stage_call_answer_error (call, DSH_E_DENIED, "tool \"%s\" requires approval", tool);
        return DSH_STAGE_ANSWER;
    }
    return DSH_STAGE_DEFER;
}

//  --- Control commands ------------------------------------------------------

//  approvals -> {endpoint, serverKey?}
static int
s_control_approvals (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                     char **error)
{
    (void) command;
    (void) args;
    (void) error;
    //  The socket's CURVE key comes with its address, over the caller's
    //  authenticated link to the broker
    msgpack_pack_map (&reply->pk, self->server_key? 2: 1);
    dsh_packer_kv_str (reply, "endpoint", self->endpoint);
    if (self->server_key)
        dsh_packer_kv_str (reply, "serverKey", self->server_key);
    return 0;
}

typedef struct {
    self_t *self;
    const char *agent;          //  the asking agent, or NULL
} s_allowed_t;

static bool
s_allowed (const char *name, const dsh_toolhints_t *hints, void *arg)
{
    s_allowed_t *query = (s_allowed_t *) arg;
    return dsh_permission_policy_decide (query->self->policy, name, hints, query->agent) != DSH_PERMISSION_DENY;
}

//  allowed {agent, tools} -> [name, ...], the tools not denied outright
static int
s_control_allowed (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                   char **error)
{
    (void) command;
    char *agent = dsh_stage_strdup (dsh_map_get (args, "agent"));
    s_allowed_t query = { self, agent };
    int rc = dsh_toolhints_allowed (dsh_map_get (args, "tools"), s_allowed, &query, &reply->pk);
    if (rc)
        *error = strdup (DSH_PERMISSION_ALLOWED_USAGE);
    zstr_free (&agent);
    return rc;
}

//  pending -> [PENDING body, ...]: what approvers are shown, as they are
//  shown it
static int
s_control_pending (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                   char **error)
{
    (void) command;
    (void) args;
    msgpack_pack_array (&reply->pk, zhashx_size (self->pending));
    for (s_request_t *request = (s_request_t *) zhashx_first (self->pending); request;
         request = (s_request_t *) zhashx_next (self->pending))
        if (dsh_json_to_msgpack (&reply->pk, request->summary)) {
            *error = strdup ("a pending request is too deep to list");
            return -1;
        }
    return 0;
}

//  approve / deny {id, scope?, minutes?, seconds?, by?, argumentsDigest?,
//  definitionDigest?} -> {id, outcome, grant?}, the caller as approver
static int
s_control_decide (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                  char **error)
{
    bool allow = streq (command, "approve");
    s_decision_t decision;
    char reason [256] = "";
    s_request_t *request = NULL;
    dsh_permission_scope_t scope;
    int64_t length_ms;
    if (s_decision_from_map (args, false, &decision, reason, sizeof (reason)))
        *error = strdup (reason);
    else
    if (!decision.id)
        *error = zsys_sprintf ("%s needs {\"id\": \"<request id>\"}", command);
    else
    if (!(request = (s_request_t *) zhashx_lookup (self->pending, decision.id)))
        *error = zsys_sprintf ("no pending request %s", decision.id);
    else
    if (s_decision_check (self, request, &decision, allow, &scope, &length_ms, reason, sizeof (reason)))
        *error = strdup (reason);
    else {
        char grant_id [DSH_PERMISSION_GRANT_ID_SIZE + 1];
        s_decide (self, request, &decision, allow, scope, length_ms, dsh_stage_control_caller (self->stage),
                  grant_id);
        msgpack_pack_map (&reply->pk, *grant_id? 3: 2);
        dsh_packer_kv_str (reply, "id", decision.id);
        dsh_packer_kv_str (reply, "outcome",
                           dsh_approval_outcome_name (allow? DSH_APPROVAL_ALLOWED: DSH_APPROVAL_REJECTED));
        if (*grant_id)
            dsh_packer_kv_str (reply, "grant", grant_id);
    }
    s_decision_release (&decision);
    return *error? -1: 0;
}

//  grants -> [grant, ...], the live ones
static int
s_control_grants (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                  char **error)
{
    (void) command;
    (void) args;
    (void) error;
    s_grants_expire (self);
    msgpack_pack_array (&reply->pk, zhashx_size (self->grants));
    for (dsh_permission_grant_t *grant = (dsh_permission_grant_t *) zhashx_first (self->grants); grant;
         grant = (dsh_permission_grant_t *) zhashx_next (self->grants))
        dsh_permission_grant_pack (grant, &reply->pk);
    return 0;
}

//  revoke {id} -> {id, revoked: true}
static int
s_control_revoke (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                  char **error)
{
    (void) command;
    char *id = dsh_stage_strdup (dsh_map_get (args, "id"));
    if (!id) {
        *error = strdup ("revoke needs {\"id\": \"<grant id>\"}");
        return -1;
    }
    s_grants_expire (self);
    if (!zhashx_lookup (self->grants, id)) {
        *error = zsys_sprintf ("no grant %s", id);
        zstr_free (&id);
        return -1;
    }
    zhashx_delete (self->grants, id);
    //  A grants.load on its way may still hold it
    s_mark (self->revoked, id);
    msgpack_pack_map (&reply->pk, 2);
    dsh_packer_kv_str (reply, "id", id);
    dsh_pack_cstr (&reply->pk, "revoked");
    msgpack_pack_true (&reply->pk);
    zstr_free (&id);
    return 0;
}

//  grants.load {grants: [grant, ...]} -> {loaded, skipped}: the broker's
//  stored set becomes the stage's
static int
s_control_grants_load (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                       char **error)
{
    (void) command;
    const msgpack_object *list = dsh_map_get (args, "grants");
    if (!list || list->type != MSGPACK_OBJECT_ARRAY) {
        *error = strdup ("grants.load needs {\"grants\": [<grant>, ...]}");
        return -1;
    }
    zhashx_t *loaded = zhashx_new ();
    assert (loaded);
    zhashx_set_destructor (loaded, (czmq_destructor *) dsh_permission_grant_destroy);
    size_t skipped = 0;
    for (uint32_t index = 0; index < list->via.array.size; index++) {
        char reason [256] = "";
        dsh_permission_grant_t *grant = dsh_permission_grant_from_msgpack (&list->via.array.ptr [index], reason,
                                                                           sizeof (reason));
        if (!grant) {
            zsys_warning ("%s: grants.load: entry %u: %s", self->name, index + 1, reason);
            skipped++;
        }
        else
        if (!streq (dsh_permission_grant_stage (grant), self->name)
        ||  s_marked (self->revoked, dsh_permission_grant_id (grant), GRANT_REVOKED_KEPT_MS))
            dsh_permission_grant_destroy (&grant);
        else
            zhashx_update (loaded, dsh_permission_grant_id (grant), grant);
    }
    //  The stored set may not hold yet what was granted here a moment ago:
    //  its note is still on its way to the store
    for (dsh_permission_grant_t *grant = (dsh_permission_grant_t *) zhashx_first (self->grants); grant;
         grant = (dsh_permission_grant_t *) zhashx_next (self->grants)) {
        const char *id = dsh_permission_grant_id (grant);
        if (!zhashx_lookup (loaded, id) && s_marked (self->made, id, GRANT_MADE_KEPT_MS))
            zhashx_insert (loaded, id, dsh_permission_grant_dup (grant));
    }
    zhashx_destroy (&self->grants);
    self->grants = loaded;
    s_grants_expire (self);
    msgpack_pack_map (&reply->pk, 2);
    dsh_pack_cstr (&reply->pk, "loaded");
    msgpack_pack_uint64 (&reply->pk, zhashx_size (self->grants));
    dsh_pack_cstr (&reply->pk, "skipped");
    msgpack_pack_uint64 (&reply->pk, skipped);
    return 0;
}

typedef int (s_control_fn) (self_t *self, const char *command, const msgpack_object *args, dsh_packer_t *reply,
                            char **error);

static const struct {
    const char *command;
    s_control_fn *handler;
} s_controls [] = {
    { "approvals", s_control_approvals },
    { "allowed", s_control_allowed },
    { "pending", s_control_pending },
    { "approve", s_control_decide },
    { "deny", s_control_decide },
    { "grants", s_control_grants },
    { "revoke", s_control_revoke },
    { "grants.load", s_control_grants_load },
};

static int
s_on_control (dsh_stage_t *stage, const char *command, const msgpack_object *args, dsh_packer_t *reply,
              char **error, void *arg)
{
    self_t *self = (self_t *) arg;
    self->stage = stage;
    for (size_t index = 0; index < sizeof (s_controls) / sizeof (s_controls [0]); index++)
        if (streq (command, s_controls [index].command))
            return s_controls [index].handler (self, command, args, reply, error);
    return -1;
}

//  The caller cancelled a call waiting for approval: the request closes
//  as cancelled, and approvers are told.
static void
s_on_cancel (dsh_stage_t *stage, dsh_call_t *call, void *arg)
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
    self_t *self = (self_t *) zmalloc (sizeof (self_t));
    assert (self);
    self->name = strdup (context && context->name? context->name: "permission");
    self->chain_version = strdup (context && context->chain_version? context->chain_version: "");
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
    self->grants = zhashx_new ();
    self->definitions = zhashx_new ();
    zhashx_set_destructor (self->definitions, (zhashx_destructor_fn *) s_definition_destroy);
    assert (self->grants);
    zhashx_set_destructor (self->grants, (czmq_destructor *) dsh_permission_grant_destroy);
    self->made = zhashx_new ();
    assert (self->made);
    zhashx_set_destructor (self->made, (czmq_destructor *) s_mark_destroy);
    self->revoked = zhashx_new ();
    assert (self->revoked);
    zhashx_set_destructor (self->revoked, (czmq_destructor *) s_mark_destroy);

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
