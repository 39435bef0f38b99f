/*  =========================================================================
    test_grants - the permission stage's approval binding and grants, end
    to end

    Real processes: dsh-broker with a chain whose permission stage asks a
    human for echo, dsh-demo, and a raw approver on the stage's approvals
    socket. A request shows the digests it is bound to; a decision that
    names other ones is refused and the request stays open. A grant for a
    tool lets the same agent's next calls through with any arguments (and
    nobody else's), until it expires; a grant for arguments only those
    arguments; a new grant lets the asks it covers go; `grants` lists a
    grant and `revoke` ends it; with grants = false only once-decisions
    hold; the audit record of a call a grant let through names the grant.
    The binding and a grant hold the same way in an external permission
    stage (dsh-stage), whose chain version comes from its broker's WELCOME.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "dsh.h"
#include "dsh_digest.h"
#include "dsh_json.h"
#include "dsh_testkit.h"

#define DEMO        "components/demo/dsh-demo"
#define WAIT_MS     10000           //  for anything that should come at once
#define STAGE       "permission"

#define NOT_DECIDED "the request's arguments are not the ones decided on"

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *stage;          //  dsh-stage, when the stage is external
    dsh_testproc_t *demo;
    dsh_client_t *client;
    zsock_t *approver;              //  a raw DEALER on the approvals socket
    char endpoint [256];
    char root [64];
    int calls;                      //  for unique callIds
} rig_t;

//  ---------------------------------------------------------------------
//  The approver

static void
s_approver_send (rig_t *self, const char *command, const json_t *body)
{
    assert_int_equal (dsh_testkit_approver_send (self->approver, command, body), 0);
}

//  The next message on the approver's socket within timeout_ms other than
//  a HEARTBEAT, as JSON, its command in command; NULL on timeout.
static json_t *
s_approver_next (rig_t *self, char *command, size_t size, int timeout_ms)
{
    return dsh_testkit_approver_next (self->approver, command, size, timeout_ms);
}

//  The next message, which must be of command.
static json_t *
s_approver_expect (rig_t *self, const char *command)
{
    char why [512];
    json_t *body = dsh_testkit_approver_expect (self->approver, command, WAIT_MS, why, sizeof (why));
    if (!body)
        fail_msg ("%s", why);
    return body;
}

//  Nothing but heartbeats for a moment: no request was put to approvers.
static void
s_approver_quiet (rig_t *self)
{
    char got [32] = "";
    json_t *body = s_approver_next (self, got, sizeof (got), 200);
    if (body) {
        char *text = json_dumps (body, JSON_COMPACT);
        fail_msg ("the approver was sent %s %s", got, text);
    }
}

//  A DECIDE of fields (a JSON object text, without id) on request id.
static void
s_decide (rig_t *self, const char *id, const char *fields)
{
    json_t *body = json_loads (fields, 0, NULL);
    assert_non_null (body);
    json_object_set_new (body, "id", json_string (id));
    s_approver_send (self, "DECIDE", body);
    json_decref (body);
}

//  ---------------------------------------------------------------------
//  The rig

//  The rig, with extra settings (ZPL lines at the stage's depth) for the
//  permission stage; external: the stage is a dsh-stage process.
static int
s_setup_as (void **state, const char *extra, bool external)
{
    rig_t *self = (rig_t *) zmalloc (sizeof (rig_t));
    assert_non_null (self);
    snprintf (self->root, sizeof (self->root), "/tmp/dsh-grants-XXXXXX");
    assert_non_null (mkdtemp (self->root));
    const char *settings_format =
        "        approval_timeout_ms = 20000\n"
        "%s"
        "        rule\n"
        "            tool = \"echo\"\n"
        "            action = \"ask\"\n";
    char *settings = zsys_sprintf (settings_format, extra);
    char *config = zsys_sprintf (
        "broker\n"
        "    name = \"grants\"\n"
        "    store = \"%s/store.db\"\n"
        "chain\n"
        "    stage\n"
        "        name = \"" STAGE "\"\n"
        "        kind = \"%s\"\n"
        "        timeout_ms = 30000\n"
        "%s", self->root, external? "external": "permission", external? "": settings);
    self->broker = dsh_testkit_broker_config (200, config, self->endpoint, sizeof (self->endpoint));
    zstr_free (&config);
    assert_non_null (self->broker);
    if (external) {
        //  The same settings, at the root of the stage's own file
        char *path = zsys_sprintf ("%s/stage.cfg", self->root);
        FILE *file = fopen (path, "w");
        assert_non_null (file);
        for (const char *line = settings; *line; ) {
            const char *end = strchr (line, '\n');
            size_t length = end? (size_t) (end - line + 1): strlen (line);
            fprintf (file, "%.*s", (int) (length > 8? length - 8: 0), line + (length > 8? 8: length));
            line += length;
        }
        fclose (file);
        const char *argv [] = { "components/middleware/dsh-stage", "--broker", self->endpoint, "--name", STAGE,
                                "--kind", "permission", "--config", path, NULL };
        self->stage = dsh_testproc_start (argv);
        assert_non_null (self->stage);
        char *line = dsh_testproc_wait_line (self->stage, "attached", WAIT_MS);
        assert_non_null (line);
        free (line);
        zstr_free (&path);
    }
    zstr_free (&settings);
    self->demo = dsh_testkit_component (DEMO, self->endpoint, "demo", NULL);
    assert_non_null (self->demo);
    assert_int_equal (dsh_testkit_wait_tools (self->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);
    self->client = dsh_client_new (self->endpoint);
    assert_non_null (self->client);

    //  The approver, found through the broker, counts once the stage
    //  probes it
    self->approver = dsh_testkit_approver (self->client, STAGE, WAIT_MS);
    assert_non_null (self->approver);
    *state = self;
    return 0;
}

static int
s_setup (void **state)
{
    return s_setup_as (state, "", false);
}

static int
s_setup_no_grants (void **state)
{
    return s_setup_as (state, "        grants = false\n", false);
}

static int
s_setup_external (void **state)
{
    return s_setup_as (state, "", true);
}

static int
s_teardown (void **state)
{
    rig_t *self = (rig_t *) *state;
    zsock_destroy (&self->approver);
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->demo);
    dsh_testproc_destroy (&self->stage);
    dsh_testproc_destroy (&self->broker);
    zdir_t *dir = zdir_new (self->root, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
    free (self);
    return 0;
}

//  Sends echo {message} as agent (NULL: none); returns its callId (static
//  until the next call).
static const char *
s_echo (rig_t *self, const char *message, const char *agent)
{
    static char call_id [64];
    snprintf (call_id, sizeof (call_id), "echo-%d", ++self->calls);
    json_t *args = json_pack ("{s:s}", "message", message);
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    assert_int_equal (dsh_json_to_msgpack (&pk, args), 0);
    json_decref (args);
    assert_non_null (dsh_client_call_send (self->client, call_id, "echo", sbuf.data, sbuf.size, agent,
                                           NULL, 0, 30000));
    msgpack_sbuffer_destroy (&sbuf);
    return call_id;
}

//  The result of call_id: its text if it succeeded, else "<code>: <text>".
static char *
s_result (rig_t *self, const char *call_id)
{
    dsh_reply_t *reply = dsh_client_recv (self->client, WAIT_MS);
    if (!reply)
        fail_msg ("no result for %s within %d ms", call_id, WAIT_MS);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    assert_string_equal (dsh_reply_call_id (reply), call_id);
    char *text = dsh_reply_is_error (reply)? zsys_sprintf ("%s: %s", dsh_reply_error_code (reply),
                                                           dsh_reply_text (reply)):
                                             strdup (dsh_reply_text (reply));
    dsh_reply_destroy (&reply);
    return text;
}

static void
s_expect_result (rig_t *self, const char *call_id, const char *expected)
{
    char *text = s_result (self, call_id);
    if (!streq (text, expected))
        fail_msg ("%s: \"%s\", expected \"%s\"", call_id, text, expected);
    zstr_free (&text);
}

//  A call that a grant lets through: its result comes with nobody asked.
static void
s_passes (rig_t *self, const char *message, const char *agent)
{
    const char *call_id = s_echo (self, message, agent);
    s_expect_result (self, call_id, message);
    s_approver_quiet (self);
}

//  A call that is asked about: its PENDING (caller owns), the call held.
static json_t *
s_asks (rig_t *self, const char *message, const char *agent, char **call_id_p)
{
    *call_id_p = strdup (s_echo (self, message, agent));
    json_t *pending = s_approver_expect (self, "PENDING");
    assert_string_equal (json_string_value (json_object_get (pending, "callId")), *call_id_p);
    return pending;
}

//  Ask, deny, and see the call rejected.
static void
s_asks_again (rig_t *self, const char *message, const char *agent)
{
    char *call_id = NULL;
    json_t *pending = s_asks (self, message, agent, &call_id);
    s_decide (self, json_string_value (json_object_get (pending, "id")), "{\"outcome\": \"deny\"}");
    s_expect_result (self, call_id, "DENIED: Error: tool \"echo\" was rejected by the approver");
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    assert_string_equal (json_string_value (json_object_get (resolved, "outcome")), "rejected");
    json_decref (resolved);
    json_decref (pending);
    zstr_free (&call_id);
}

//  Ask, and allow with fields (JSON object text); returns the grant's id
//  from RESOLVED (caller frees; NULL if none).
static char *
s_grant (rig_t *self, const char *message, const char *agent, const char *fields)
{
    char *call_id = NULL;
    json_t *pending = s_asks (self, message, agent, &call_id);
    s_decide (self, json_string_value (json_object_get (pending, "id")), fields);
    s_expect_result (self, call_id, message);
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    assert_string_equal (json_string_value (json_object_get (resolved, "id")),
                         json_string_value (json_object_get (pending, "id")));
    assert_string_equal (json_string_value (json_object_get (resolved, "outcome")), "allowed");
    const char *grant = json_string_value (json_object_get (resolved, "grant"));
    char *id = grant? strdup (grant): NULL;
    json_decref (resolved);
    json_decref (pending);
    zstr_free (&call_id);
    return id;
}

//  The reply data of control command on the stage; fails on an error
//  unless error_p, which then gets the message (caller frees).
static json_t *
s_control (rig_t *self, const char *command, json_t *args, char **error_p)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_control (self->client, STAGE, command, args, WAIT_MS, error, sizeof (error));
    if (!reply)
        fail_msg ("control %s: %s", command, error);
    json_t *body = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    json_t *data = NULL;
    if (json_is_true (json_object_get (body, "ok")))
        data = json_incref (json_object_get (body, "data"));
    else
    if (error_p)
        *error_p = strdup (json_string_value (json_object_get (body, "message")));
    else
        fail_msg ("control %s failed: %s", command, json_string_value (json_object_get (body, "message")));
    json_decref (body);
    return data;
}

//  The live grant with id in `grants`, or NULL (caller owns).
static json_t *
s_listed (rig_t *self, const char *id)
{
    json_t *list = s_control (self, "grants", NULL, NULL);
    assert_true (json_is_array (list));
    json_t *found = NULL;
    size_t index;
    json_t *grant;
    json_array_foreach (list, index, grant)
        if (streq (json_string_value (json_object_get (grant, "id")), id))
            found = json_incref (grant);
    json_decref (list);
    return found;
}

//  ---------------------------------------------------------------------

//  A request shows what it is bound to: the digests of the tool's
//  definition and of its arguments, the chain's version, its times, and
//  what a grant may be.
static void
test_request_is_bound (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *call_id = NULL;
    int64_t before = zclock_time ();
    json_t *pending = s_asks (self, "bound", "coder", &call_id);
    const char *definition = json_string_value (json_object_get (pending, "definitionDigest"));
    const char *arguments = json_string_value (json_object_get (pending, "argumentsDigest"));
    assert_non_null (definition);
    assert_int_equal (strlen (definition), DSH_DIGEST_SIZE);
    //  The arguments digest is the canonical msgpack's, as anyone computes it
    char expected [DSH_DIGEST_SIZE + 1];
    char error [256];
    msgpack_sbuffer sbuf;
    assert_int_equal (dsh_json_text_to_msgpack ("{\"message\": \"bound\"}", &sbuf, error, sizeof (error)), 0);
    dsh_doc_t *doc = dsh_doc_new (sbuf.data, sbuf.size, error, sizeof (error));
    assert_int_equal (dsh_digest_value (dsh_doc_root (doc), expected), 0);
    dsh_doc_destroy (&doc);
    msgpack_sbuffer_destroy (&sbuf);
    assert_string_equal (arguments, expected);
    //  The chain's version, as CHAIN says it (an external stage has it
    //  from its broker's WELCOME)
    dsh_reply_t *chain = dsh_client_request (self->client, DSH_CHAIN, NULL, WAIT_MS, error, sizeof (error));
    assert_non_null (chain);
    json_t *chain_body = dsh_reply_json (chain);
    const char *version = json_string_value (json_object_get (chain_body, "version"));
    assert_non_null (version);
    assert_int_equal (strlen (version), 16);
    assert_string_equal (json_string_value (json_object_get (pending, "chainVersion")), version);
    json_decref (chain_body);
    dsh_reply_destroy (&chain);
    json_int_t received = json_integer_value (json_object_get (pending, "receivedMs"));
    json_int_t closes = json_integer_value (json_object_get (pending, "closesMs"));
    assert_true (received >= before && received <= zclock_time ());
    //  approval_timeout_ms (20 s) comes before the call's deadline (30 s)
    assert_true (closes > received + 15000 && closes <= received + 20000);
    assert_true (json_is_true (json_object_get (pending, "grants")));
    assert_int_equal (json_integer_value (json_object_get (pending, "grantMinutes")), 15);
    assert_int_equal (json_integer_value (json_object_get (pending, "grantMaxMinutes")), 1440);

    //  `pending` shows the same
    json_t *list = s_control (self, "pending", NULL, NULL);
    assert_int_equal (json_array_size (list), 1);
    assert_true (json_equal (json_array_get (list, 0), pending));
    json_decref (list);

    //  Naming its own digests, a decision holds
    char *fields = zsys_sprintf ("{\"outcome\": \"allow\", \"argumentsDigest\": \"%s\", \"definitionDigest\": \"%s\"}",
                                 arguments, definition);
    s_decide (self, json_string_value (json_object_get (pending, "id")), fields);
    zstr_free (&fields);
    s_expect_result (self, call_id, "bound");
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    assert_null (json_object_get (resolved, "grant"));
    json_decref (resolved);
    json_decref (pending);
    zstr_free (&call_id);
}

//  (d) A decision on other arguments, or with bad values, is refused with
//  a reason; the request stays open and can still be decided.
static void
test_wrong_decision_is_refused (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *call_id = NULL;
    json_t *pending = s_asks (self, "careful", "coder", &call_id);
    const char *id = json_string_value (json_object_get (pending, "id"));
    const char *other = "0000000000000000000000000000000000000000000000000000000000000000";
    const struct {
        const char *fields;
        const char *reason;
    } refused [] = {
        { "{\"outcome\": \"allow\", \"argumentsDigest\": \"%s\"}", NOT_DECIDED },
        { "{\"outcome\": \"allow\", \"definitionDigest\": \"%s\"}",
          "the request's tool definition is not the one decided on" },
        { "{\"outcome\": \"allow\", \"scope\": \"forever\"}",
          "scope must be \"once\", \"tool\" or \"arguments\", not \"forever\"" },
        { "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 0}",
          "minutes must be from 1 to 1440 (grant_max_minutes), not 0" },
        { "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 1441}",
          "minutes must be from 1 to 1440 (grant_max_minutes), not 1441" },
        { "{\"outcome\": \"allow\", \"scope\": \"tool\", \"seconds\": 86401}",
          "seconds must be from 1 to 86400 (grant_max_minutes * 60), not 86401" },
        { "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 1, \"seconds\": 1}",
          "give minutes or seconds, not both" },
        { "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": \"5\"}", "minutes must be a whole number" },
        { "{\"outcome\": \"allow\", \"minutes\": 5}",
          "minutes is for a grant: it needs scope \"tool\" or \"arguments\"" },
        { "{\"outcome\": \"deny\", \"scope\": \"tool\"}", "a grant (scope \"tool\") needs outcome \"allow\"" },
        { "{\"outcome\": \"allow\", \"by\": \"\"}", "by must be 1 to 128 printable bytes" },
        { "{\"outcome\": \"allow\", \"by\": \"eve\\nmallory\"}", "by must be 1 to 128 printable bytes" },
    };
    for (size_t index = 0; index < sizeof (refused) / sizeof (refused [0]); index++) {
        char *fields = zsys_sprintf (refused [index].fields, other);
        s_decide (self, id, fields);
        json_t *error = s_approver_expect (self, DSH_ERROR);
        assert_string_equal (json_string_value (json_object_get (error, "code")), DSH_E_BAD_REQUEST);
        if (!streq (json_string_value (json_object_get (error, "message")), refused [index].reason))
            fail_msg ("DECIDE %s: \"%s\", expected \"%s\"", fields,
                      json_string_value (json_object_get (error, "message")), refused [index].reason);
        assert_string_equal (json_string_value (json_object_get (error, "id")), id);
        json_decref (error);
        zstr_free (&fields);
    }
    //  Through the broker too
    json_t *args = json_pack ("{s:s, s:s}", "id", id, "argumentsDigest", other);
    char *reason = NULL;
    assert_null (s_control (self, "approve", args, &reason));
    assert_string_equal (reason, NOT_DECIDED);
    zstr_free (&reason);
    json_decref (args);

    //  Still open, and decided now
    json_t *list = s_control (self, "pending", NULL, NULL);
    assert_int_equal (json_array_size (list), 1);
    assert_string_equal (json_string_value (json_object_get (json_array_get (list, 0), "id")), id);
    json_decref (list);
    s_decide (self, id, "{\"outcome\": \"allow\"}");
    s_expect_result (self, call_id, "careful");
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    json_decref (resolved);
    json_decref (pending);
    zstr_free (&call_id);
}

//  (a) A grant for the tool: the same agent's next calls pass with other
//  arguments, asking nobody; another agent is asked; once it expires, so
//  is the agent again.
static void
test_grant_for_the_tool (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *grant = s_grant (self, "first", "coder",
                           "{\"outcome\": \"allow\", \"scope\": \"tool\", \"seconds\": 3, \"by\": \"tester\"}");
    assert_non_null (grant);
    s_passes (self, "second", "coder");
    s_asks_again (self, "second", "planner");
    s_asks_again (self, "second", NULL);
    //  Still live while the others were asked: they were asked for who
    //  they are, not because it had ended
    s_passes (self, "third", "coder");

    //  Expired: `grants` no longer lists it, and the agent is asked again
    json_t *listed = s_listed (self, grant);
    assert_non_null (listed);
    json_int_t expires = json_integer_value (json_object_get (listed, "expiresMs"));
    assert_true (expires - json_integer_value (json_object_get (listed, "createdMs")) == 3000);
    json_decref (listed);
    int64_t give_up = zclock_mono () + WAIT_MS;
    while ((listed = s_listed (self, grant)) && zclock_mono () < give_up) {
        json_decref (listed);
        //  The approver stays present meanwhile
        char got [32];
        json_t *body = s_approver_next (self, got, sizeof (got), 100);
        assert_null (body);
    }
    assert_null (listed);
    assert_true (zclock_time () >= expires);
    s_asks_again (self, "fourth", "coder");
    zstr_free (&grant);
}

//  (b) A grant for arguments: only the same arguments pass.
static void
test_grant_for_arguments (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *grant = s_grant (self, "same", "coder",
                           "{\"outcome\": \"allow\", \"scope\": \"arguments\", \"minutes\": 1}");
    assert_non_null (grant);
    s_passes (self, "same", "coder");
    s_asks_again (self, "other", "coder");
    s_asks_again (self, "same", "planner");
    s_passes (self, "same", "coder");
    zstr_free (&grant);
}

//  (c) `grants` lists a grant as it was made; `revoke` ends it at once.
static void
test_grants_and_revoke (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *grant = s_grant (self, "listed", "coder",
                           "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 5, \"by\": \"tester\"}");
    assert_non_null (grant);
    json_t *listed = s_listed (self, grant);
    assert_non_null (listed);
    assert_string_equal (json_string_value (json_object_get (listed, "stage")), STAGE);
    assert_string_equal (json_string_value (json_object_get (listed, "agent")), "coder");
    assert_string_equal (json_string_value (json_object_get (listed, "tool")), "echo");
    assert_string_equal (json_string_value (json_object_get (listed, "scope")), "tool");
    assert_null (json_object_get (listed, "argumentsDigest"));
    assert_int_equal (strlen (json_string_value (json_object_get (listed, "definitionDigest"))), DSH_DIGEST_SIZE);
    assert_true (json_is_string (json_object_get (listed, "chainVersion")));
    //  Who decided: the approver's connection, and who used it
    const char *by = json_string_value (json_object_get (listed, "by"));
    assert_non_null (by);
    assert_non_null (strstr (by, "approver at "));
    assert_non_null (strstr (by, " (by tester)"));
    assert_true (json_integer_value (json_object_get (listed, "expiresMs"))
                 - json_integer_value (json_object_get (listed, "createdMs")) == 5 * 60000);
    json_decref (listed);
    s_passes (self, "before", "coder");

    json_t *args = json_pack ("{s:s}", "id", grant);
    json_t *revoked = s_control (self, "revoke", args, NULL);
    assert_string_equal (json_string_value (json_object_get (revoked, "id")), grant);
    assert_true (json_is_true (json_object_get (revoked, "revoked")));
    json_decref (revoked);
    assert_null (s_listed (self, grant));
    s_asks_again (self, "after", "coder");
    char *reason = NULL;
    assert_null (s_control (self, "revoke", args, &reason));
    char *expected = zsys_sprintf ("no grant %s", grant);
    assert_string_equal (reason, expected);
    zstr_free (&expected);
    zstr_free (&reason);
    json_decref (args);

    //  A grant through the broker's approve, with the caller as approver
    char *call_id = NULL;
    json_t *pending = s_asks (self, "controlled", "coder", &call_id);
    args = json_pack ("{s:s, s:s, s:i}", "id", json_string_value (json_object_get (pending, "id")),
                      "scope", "arguments", "seconds", 60);
    json_t *approved = s_control (self, "approve", args, NULL);
    json_decref (args);
    assert_string_equal (json_string_value (json_object_get (approved, "outcome")), "allowed");
    const char *made = json_string_value (json_object_get (approved, "grant"));
    assert_non_null (made);
    listed = s_listed (self, made);
    assert_non_null (listed);
    assert_string_equal (json_string_value (json_object_get (listed, "scope")), "arguments");
    json_decref (listed);
    json_decref (approved);
    s_expect_result (self, call_id, "controlled");
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    json_decref (resolved);
    s_passes (self, "controlled", "coder");
    json_decref (pending);
    zstr_free (&call_id);
    zstr_free (&grant);
}

//  A grant made while other asks it covers are open lets them go too.
static void
test_grant_covers_open_asks (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *first = NULL, *second = NULL;
    json_t *one = s_asks (self, "one", "coder", &first);
    json_t *two = s_asks (self, "two", "coder", &second);
    s_decide (self, json_string_value (json_object_get (one, "id")),
              "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 1}");
    //  Both results, in either order, and both requests resolved
    for (int index = 0; index < 2; index++) {
        dsh_reply_t *reply = dsh_client_recv (self->client, WAIT_MS);
        assert_non_null (reply);
        assert_false (dsh_reply_is_error (reply));
        const char *call_id = dsh_reply_call_id (reply);
        assert_string_equal (dsh_reply_text (reply), streq (call_id, first)? "one": "two");
        dsh_reply_destroy (&reply);
    }
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    const char *grant = json_string_value (json_object_get (resolved, "grant"));
    assert_non_null (grant);
    json_t *also = s_approver_expect (self, "RESOLVED");
    assert_string_equal (json_string_value (json_object_get (also, "id")),
                         json_string_value (json_object_get (two, "id")));
    assert_string_equal (json_string_value (json_object_get (also, "outcome")), "allowed");
    assert_string_equal (json_string_value (json_object_get (also, "grant")), grant);
    json_decref (also);
    json_decref (resolved);
    json_decref (one);
    json_decref (two);
    zstr_free (&first);
    zstr_free (&second);
}

//  With grants = false, a request says it cannot be granted, a grant is
//  refused with the reason, and a decision for once still holds.
static void
test_grants_off (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *call_id = NULL;
    json_t *pending = s_asks (self, "once", "coder", &call_id);
    assert_true (json_is_false (json_object_get (pending, "grants")));
    const char *id = json_string_value (json_object_get (pending, "id"));
    s_decide (self, id, "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 5}");
    json_t *error = s_approver_expect (self, DSH_ERROR);
    assert_string_equal (json_string_value (json_object_get (error, "message")),
                         "stage \"" STAGE "\" makes no grants (grants = false): decide with scope \"once\"");
    json_decref (error);
    s_decide (self, id, "{\"outcome\": \"allow\", \"scope\": \"once\"}");
    s_expect_result (self, call_id, "once");
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    assert_null (json_object_get (resolved, "grant"));
    json_decref (resolved);
    s_asks_again (self, "once", "coder");
    json_decref (pending);
    zstr_free (&call_id);
}

//  The audit record of callId (its stored JSON), once the writer has it.
static json_t *
s_audit_record (rig_t *self, const char *call_id)
{
    json_t *record = NULL;
    int64_t give_up = zclock_mono () + WAIT_MS;
    while (!record && zclock_mono () < give_up) {
        json_t *query = json_pack ("{s:s}", "callId", call_id);
        char error [256];
        dsh_reply_t *reply = dsh_client_query (self->client, DSH_AUDIT, query, WAIT_MS, error, sizeof (error));
        json_decref (query);
        if (!reply)
            fail_msg ("AUDIT: %s", error);
        json_t *body = dsh_reply_json (reply);
        dsh_reply_destroy (&reply);
        json_t *records = json_object_get (body, "records");
        if (json_array_size (records) > 0)
            record = json_loads (json_string_value (json_object_get (json_array_get (records, 0), "record")),
                                 0, NULL);
        else {
            char got [32];
            json_t *other = s_approver_next (self, got, sizeof (got), 100);
            assert_null (other);
        }
        json_decref (body);
    }
    if (!record)
        fail_msg ("no audit record of %s within %d ms", call_id, WAIT_MS);
    return record;
}

//  (e) The audit names the grant: of the call that made it, and of the
//  call it let through.
static void
test_audit_names_the_grant (void **state)
{
    rig_t *self = (rig_t *) *state;
    char *call_id = NULL;
    json_t *pending = s_asks (self, "audited", "auditee", &call_id);
    s_decide (self, json_string_value (json_object_get (pending, "id")),
              "{\"outcome\": \"allow\", \"scope\": \"tool\", \"minutes\": 1, \"by\": \"tester\"}");
    s_expect_result (self, call_id, "audited");
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    char *grant = strdup (json_string_value (json_object_get (resolved, "grant")));
    json_decref (resolved);

    const char *passed = s_echo (self, "granted", "auditee");
    char *passed_id = strdup (passed);
    s_expect_result (self, passed_id, "granted");

    json_t *record = s_audit_record (self, call_id);
    json_t *approval = json_object_get (record, "approval");
    assert_string_equal (json_string_value (json_object_get (approval, "decision")), "allowed");
    assert_string_equal (json_string_value (json_object_get (approval, "request")),
                         json_string_value (json_object_get (pending, "id")));
    assert_string_equal (json_string_value (json_object_get (approval, "grant")), grant);
    json_decref (record);

    record = s_audit_record (self, passed_id);
    approval = json_object_get (record, "approval");
    assert_non_null (approval);
    assert_string_equal (json_string_value (json_object_get (approval, "decision")), "granted");
    assert_string_equal (json_string_value (json_object_get (approval, "grant")), grant);
    const char *approver = json_string_value (json_object_get (approval, "approver"));
    assert_non_null (approver);
    assert_non_null (strstr (approver, " (by tester)"));
    json_decref (record);
    json_decref (pending);
    zstr_free (&passed_id);
    zstr_free (&call_id);
    zstr_free (&grant);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_request_is_bound, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_request_is_bound, s_setup_external, s_teardown),
        cmocka_unit_test_setup_teardown (test_grant_for_the_tool, s_setup_external, s_teardown),
        cmocka_unit_test_setup_teardown (test_wrong_decision_is_refused, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_grant_for_the_tool, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_grant_for_arguments, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_grants_and_revoke, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_grant_covers_open_asks, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_grants_off, s_setup_no_grants, s_teardown),
        cmocka_unit_test_setup_teardown (test_audit_names_the_grant, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
