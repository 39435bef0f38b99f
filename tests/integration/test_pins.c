/*  =========================================================================
    test_pins - pinned tool definitions end to end, on one broker

    Real processes: dsh-broker (its store in a state directory of the
    test's), a component from the C SDK serving one raw tool, "greet",
    whose description says which version it is, the dsh CLI, the events
    socket, and for the approval case a raw approver on the permission
    stage's approvals socket. Each version's handler counts its calls, so
    a test sees what ran, not only what was answered.

    1. tofu (the default): the same component restarted with another
       description is quarantined (LIST, events, CALL refused, left out of
       `dsh schemas`, `dsh pins show` has the diff); accept with a stale
       digest is refused, with the offered one releases it, and the new
       handler runs; a change at run time is quarantined the same way
    2. strict: a new tool is quarantined until accepted; a rejected
       definition stays quarantined, also when it comes again
    3. what was approved is what runs: a call waiting for approval whose
       tool changes meanwhile is answered QUARANTINED once allowed, and
       neither handler runs
    4. pins off: a changed definition is served at once, as before pins
    5. CURVE: who may read the pins and who may change them
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

#include <stdatomic.h>
#include <sys/stat.h>

#define DEMO        "components/demo/dsh-demo"
#define COMPONENT   "greeter"
#define STAGE       "permission"
#define WAIT_MS     10000           //  for anything that should come at once
#define CLI_MS      20000

#define CHANGED     "definition changed since it was pinned"
#define UNACCEPTED  "not accepted yet (pins are strict)"
#define REJECTED    "rejected by an admin"

//  The chain of case 3: greet asks a human
static const char s_ask_chain [] =
    "chain\n"
    "    stage\n"
    "        name = \"" STAGE "\"\n"
    "        kind = \"permission\"\n"
    "        timeout_ms = 30000\n"
    "        approval_timeout_ms = 20000\n"
    "        rule\n"
    "            tool = \"greet\"\n"
    "            action = \"ask\"\n";

//  One version of greet: its description, which its handler also answers,
//  and how many calls that handler ran
typedef struct {
    const char *description;
    atomic_int calls;
} version_t;

typedef struct {
    dsh_testproc_t *broker;
    char endpoint [256];
    char state [256];               //  the broker's state directory
    dsh_client_t *client;
    zsock_t *events;                //  a SUB on every event
    dsh_provider_t *greeter;        //  serving greet, or NULL
    zsock_t *approver;              //  a raw DEALER on the approvals socket, or NULL
} rig_t;

static int
s_greet (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    version_t *version = (version_t *) arg;
    atomic_fetch_add (&version->calls, 1);
    dsh_result_text (result, version->description);
    return 0;
}

//  ---------------------------------------------------------------------
//  The rig

//  A broker with pins policy (NULL: the default) and config (ZPL, may be
//  ""), its store in a state directory of its own; a client, and a SUB
//  on its events.
static rig_t *
s_rig (const char *policy, const char *config)
{
    rig_t *self = (rig_t *) zmalloc (sizeof (rig_t));
    assert_non_null (self);
    const char *base = getenv ("DSH_STATE_DIR");
    snprintf (self->state, sizeof (self->state), "%s/pins-XXXXXX", base && *base? base: "/tmp");
    assert_non_null (mkdtemp (self->state));
    char *path = zsys_sprintf ("%s/broker.cfg", self->state);
    FILE *file = fopen (path, "w");
    assert_non_null (file);
    assert_true (fputs (config, file) >= 0);
    assert_int_equal (fclose (file), 0);
    const char *extra [] = { "-c", path, "--state-dir", self->state, policy? "--pins": NULL, policy, NULL };
    self->broker = dsh_testkit_broker (200, extra, self->endpoint, sizeof (self->endpoint));
    zstr_free (&path);
    assert_non_null (self->broker);
    self->client = dsh_client_new (self->endpoint);
    assert_non_null (self->client);
    self->events = dsh_testkit_events (self->endpoint, "", NULL, WAIT_MS);
    assert_non_null (self->events);
    return self;
}

static void
s_rig_destroy (rig_t **self_p)
{
    rig_t *self = *self_p;
    zsock_destroy (&self->approver);
    dsh_provider_destroy (&self->greeter);
    zsock_destroy (&self->events);
    dsh_client_destroy (&self->client);
    dsh_testproc_destroy (&self->broker);
    zdir_t *dir = zdir_new (self->state, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
    free (self);
    *self_p = NULL;
}

//  The raw entry of greet at version.
static char *
s_entry (const version_t *version)
{
    return zsys_sprintf ("{\"name\": \"greet\", \"description\": \"%s\", \"parameters\": {\"type\": \"object\"}}",
                         version->description);
}

//  The component, serving greet at version, once the broker has it.
static void
s_greeter_start (rig_t *self, version_t *version)
{
    assert_null (self->greeter);
    self->greeter = dsh_provider_new (self->endpoint, COMPONENT, 1);
    assert_non_null (self->greeter);
    char *entry = s_entry (version);
    assert_int_equal (dsh_provider_add_raw (self->greeter, entry, s_greet, version), 0);
    zstr_free (&entry);
    dsh_provider_start (self->greeter);
    assert_int_equal (dsh_provider_wait_ready (self->greeter, WAIT_MS), 0);
}

//  ---------------------------------------------------------------------
//  Events

//  The next event naming tool name (others are skipped), as JSON; fails
//  if none comes within WAIT_MS.
static json_t *
s_tool_event (rig_t *self, const char *name)
{
    zpoller_t *poller = zpoller_new (self->events, NULL);
    int64_t give_up = zclock_mono () + WAIT_MS;
    json_t *event = NULL;
    while (!event) {
        int64_t left = give_up - zclock_mono ();
        if (left <= 0 || zpoller_wait (poller, (int) left) != self->events)
            break;
        zmsg_t *msg = zmsg_recv (self->events);
        char *kind = zmsg_popstr (msg);
        zframe_t *body = zmsg_pop (msg);
        char error [128];
        dsh_doc_t *doc = body? dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error)): NULL;
        assert_non_null (doc);
        json_t *read = dsh_json_from_msgpack (dsh_doc_root (doc));
        assert_string_equal (kind, json_string_value (json_object_get (read, "kind")));
        const char *named = json_string_value (json_object_get (read, "name"));
        if (named && streq (named, name))
            event = read;
        else
            json_decref (read);
        dsh_doc_destroy (&doc);
        zframe_destroy (&body);
        zstr_free (&kind);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    if (!event)
        fail_msg ("no event about %s within %d ms", name, WAIT_MS);
    return event;
}

//  The next event naming name, which must be of kind (caller owns).
static json_t *
s_expect_event (rig_t *self, const char *kind, const char *name)
{
    json_t *event = s_tool_event (self, name);
    const char *got = json_string_value (json_object_get (event, "kind"));
    if (!streq (got, kind)) {
        char *text = json_dumps (event, JSON_COMPACT);
        fail_msg ("expected %s about %s, got %s", kind, name, text);
    }
    return event;
}

//  Stops the component (it withdraws greet) once the broker dropped greet.
static void
s_greeter_stop (rig_t *self)
{
    dsh_provider_destroy (&self->greeter);
    json_decref (s_expect_event (self, DSH_EV_UNREGISTERED, "greet"));
}

//  The component changes greet at run time, with no restart: the next
//  announce has the other entry, a tool.updated.
static void
s_greeter_change (rig_t *self, version_t *version)
{
    assert_non_null (self->greeter);
    assert_int_equal (dsh_provider_remove (self->greeter, "greet"), 0);
    char *entry = s_entry (version);
    assert_int_equal (dsh_provider_add_raw (self->greeter, entry, s_greet, version), 0);
    zstr_free (&entry);
}

static const char *
s_str (json_t *object, const char *key)
{
    const char *value = json_string_value (json_object_get (object, key));
    return value? value: "";
}

//  entry carries no quarantine mark and says version.
static void
s_assert_released (json_t *entry, const version_t *version)
{
    assert_non_null (entry);
    assert_string_equal (s_str (entry, "description"), version->description);
    const char *marks [] = { "quarantined", "digest", "pinnedDigest", "quarantineReason" };
    for (size_t index = 0; index < 4; index++)
        if (json_object_get (entry, marks [index]))
            fail_msg ("released entry of greet has %s", marks [index]);
}

//  entry is version's, quarantined for reason; its pinnedDigest is pinned
//  (NULL: it has none). Returns its digest (the entry's).
static const char *
s_assert_quarantined (json_t *entry, const version_t *version, const char *reason, const char *pinned)
{
    assert_non_null (entry);
    assert_string_equal (s_str (entry, "description"), version->description);
    assert_true (json_is_true (json_object_get (entry, "quarantined")));
    assert_string_equal (s_str (entry, "quarantineReason"), reason);
    const char *digest = s_str (entry, "digest");
    assert_int_equal (strlen (digest), DSH_DIGEST_SIZE);
    if (pinned) {
        assert_string_equal (s_str (entry, "pinnedDigest"), pinned);
        assert_string_not_equal (digest, pinned);
    }
    else
        assert_null (json_object_get (entry, "pinnedDigest"));
    return digest;
}

//  The next greet events must be its entry with the marks (registered, or
//  updated), then tool.changed saying the same. Returns the offered
//  digest (caller frees).
static char *
s_expect_quarantine (rig_t *self, const char *kind, const version_t *version, const char *reason,
                     const char *pinned)
{
    json_t *event = s_expect_event (self, kind, "greet");
    assert_string_equal (s_str (event, "component"), COMPONENT);
    char *digest = strdup (s_assert_quarantined (json_object_get (event, "tool"), version, reason, pinned));
    json_decref (event);
    event = s_expect_event (self, DSH_EV_CHANGED, "greet");
    assert_string_equal (s_str (event, "component"), COMPONENT);
    assert_string_equal (s_str (event, "digest"), digest);
    assert_string_equal (s_str (event, "reason"), reason);
    if (pinned)
        assert_string_equal (s_str (event, "pinnedDigest"), pinned);
    else
        assert_null (json_object_get (event, "pinnedDigest"));
    //  The diff names what was offered
    char *line = pinned? zsys_sprintf ("+ description: \"%s\"", version->description):
                         zsys_sprintf ("+ (definition): {\"description\":\"%s\"", version->description);
    if (!strstr (s_str (event, "diff"), line))
        fail_msg ("tool.changed diff \"%s\" does not say %s", s_str (event, "diff"), line);
    zstr_free (&line);
    json_decref (event);
    return digest;
}

//  ---------------------------------------------------------------------
//  What a client and the CLI see

//  greet's entry in LIST (caller owns), or NULL.
static json_t *
s_listed (rig_t *self)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (self->client, DSH_LIST, NULL, WAIT_MS, error, sizeof (error));
    if (!reply)
        fail_msg ("LIST: %s", error);
    json_t *body = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    json_t *found = NULL;
    size_t index;
    json_t *tool;
    json_array_foreach (json_object_get (body, "tools"), index, tool)
        if (streq (s_str (tool, "name"), "greet"))
            found = json_incref (tool);
    json_decref (body);
    return found;
}

//  A call of greet as agent (NULL: none): its text if it succeeded, else
//  "<code>: <text>". Caller frees.
static char *
s_call (rig_t *self, const char *agent)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (self->client, "greet", "{}", agent, WAIT_MS, error, sizeof (error));
    if (!reply)
        fail_msg ("call greet: %s", error);
    char *text = dsh_reply_is_error (reply)? zsys_sprintf ("%s: %s", dsh_reply_error_code (reply),
                                                           dsh_reply_text (reply)):
                                             strdup (dsh_reply_text (reply));
    dsh_reply_destroy (&reply);
    return text;
}

static void
s_expect_call (rig_t *self, const char *agent, const char *expected)
{
    char *text = s_call (self, agent);
    if (!streq (text, expected))
        fail_msg ("call greet: \"%s\", expected \"%s\"", text, expected);
    zstr_free (&text);
}

//  What a call to a quarantined greet is answered, for reason.
static char *
s_refusal (const char *reason, const char *offered, const char *pinned)
{
    if (streq (reason, CHANGED))
        return zsys_sprintf ("QUARANTINED: Error: tool \"greet\" is quarantined: its definition changed since it "
                             "was pinned (changed: description; pinned %.12s, now %.12s); review it with `dsh pins "
                             "show greet`, release "
                             "it with `dsh pins accept greet`", pinned, offered);
    if (streq (reason, UNACCEPTED))
        return zsys_sprintf ("QUARANTINED: Error: tool \"greet\" is quarantined: pins are strict and its definition "
                             "%.12s has not been accepted; review it with `dsh pins show greet`, accept it with "
                             "`dsh pins accept greet`", offered);
    return zsys_sprintf ("QUARANTINED: Error: tool \"greet\" is quarantined: its definition %.12s was rejected by "
                         "an admin (`dsh pins show greet`)", offered);
}

static void
s_expect_refused (rig_t *self, const char *reason, const char *offered, const char *pinned)
{
    char *expected = s_refusal (reason, offered, pinned);
    s_expect_call (self, NULL, expected);
    zstr_free (&expected);
}

//  `dsh ARGS...` at the rig's broker: its exit status, and its stdout and
//  stderr in *output (caller frees).
static int
s_cli (rig_t *self, const char *const *args, char **output)
{
    int status = dsh_testkit_cli_merged (self->endpoint, args, CLI_MS, output);
    assert_true (status >= 0);
    return status;
}

//  `dsh ARGS...`, which must succeed; its output (caller frees).
static char *
s_cli_ok (rig_t *self, const char *const *args)
{
    char *output = NULL;
    int status = s_cli (self, args, &output);
    if (status != 0)
        fail_msg ("dsh %s %s: exit %d: %s", args [0], args [1]? args [1]: "", status, output? output: "");
    return output;
}

//  Whether `dsh schemas` (the tools rendered for an agent) has greet.
static bool
s_rendered (rig_t *self)
{
    char *output = s_cli_ok (self, (const char *[]) { "schemas", NULL });
    json_t *rendered = json_loads (output, 0, NULL);
    if (!json_is_array (rendered))
        fail_msg ("dsh schemas printed no JSON array: %s", output);
    bool found = false;
    size_t index;
    json_t *tool;
    json_array_foreach (rendered, index, tool)
        found |= streq (s_str (tool, "name"), "greet");
    json_decref (rendered);
    zstr_free (&output);
    return found;
}

//  greet's pin as `dsh pins list --json` prints it (caller owns), or NULL;
//  the policy must be policy.
static json_t *
s_pin (rig_t *self, const char *policy)
{
    char *output = s_cli_ok (self, (const char *[]) { "pins", "list", "--json", NULL });
    json_t *body = json_loads (output, 0, NULL);
    if (!json_is_object (body))
        fail_msg ("dsh pins list --json printed no object: %s", output);
    assert_string_equal (s_str (body, "policy"), policy);
    json_t *found = NULL;
    size_t index;
    json_t *pin;
    json_array_foreach (json_object_get (body, "pins"), index, pin)
        if (streq (s_str (pin, "name"), "greet"))
            found = json_incref (pin);
    json_decref (body);
    zstr_free (&output);
    return found;
}

//  `dsh pins accept greet` (with --digest digest, if not NULL), which
//  must succeed and release greet: tool.accepted with the offered
//  digest, then tool.updated with the plain entry of version.
static void
s_accept (rig_t *self, const char *digest, const char *offered, const version_t *version)
{
    const char *args [] = { "pins", "accept", "greet", digest? "--digest": NULL, digest, NULL };
    char *output = s_cli_ok (self, args);
    char *said = zsys_sprintf ("accepted greet: pinned %.12s and released", offered);
    if (!strstr (output, said))
        fail_msg ("dsh pins accept said \"%s\", not \"%s\"", output, said);
    zstr_free (&said);
    zstr_free (&output);
    json_t *event = s_expect_event (self, DSH_EV_ACCEPTED, "greet");
    assert_string_equal (s_str (event, "digest"), offered);
    assert_string_equal (s_str (event, "component"), "");
    assert_true (*s_str (event, "by"));
    json_decref (event);
    event = s_expect_event (self, DSH_EV_UPDATED, "greet");
    s_assert_released (json_object_get (event, "tool"), version);
    json_decref (event);
    json_t *entry = s_listed (self);
    s_assert_released (entry, version);
    json_decref (entry);
}

//  ---------------------------------------------------------------------
//  1. tofu: a changed definition is quarantined until an admin accepts it

static void
test_changed_definition_quarantined (void **state)
{
    (void) state;
    rig_t *self = s_rig (NULL, "");
    version_t one = { "one", 0 }, two = { "two", 0 }, three = { "three", 0 };
    s_greeter_start (self, &one);
    json_t *event = s_expect_event (self, DSH_EV_REGISTERED, "greet");
    s_assert_released (json_object_get (event, "tool"), &one);
    json_decref (event);
    s_expect_call (self, NULL, "one");
    assert_true (s_rendered (self));
    json_t *pin = s_pin (self, "tofu");
    assert_non_null (pin);
    assert_string_equal (s_str (pin, "state"), "pinned");
    assert_string_equal (s_str (pin, "component"), COMPONENT);
    assert_true (json_is_true (json_object_get (pin, "registered")));
    char *pinned = strdup (s_str (pin, "digest"));
    assert_int_equal (strlen (pinned), DSH_DIGEST_SIZE);
    json_decref (pin);

    //  The same component comes back with another description
    s_greeter_stop (self);
    s_greeter_start (self, &two);
    char *offered = s_expect_quarantine (self, DSH_EV_REGISTERED, &two, CHANGED, pinned);
    json_t *entry = s_listed (self);
    assert_string_equal (s_assert_quarantined (entry, &two, CHANGED, pinned), offered);
    json_decref (entry);
    s_expect_refused (self, CHANGED, offered, pinned);
    assert_false (s_rendered (self));
    pin = s_pin (self, "tofu");
    assert_string_equal (s_str (pin, "state"), "quarantined");
    assert_string_equal (s_str (pin, "digest"), pinned);
    assert_string_equal (s_str (pin, "offeredDigest"), offered);
    assert_string_equal (s_str (pin, "reason"), CHANGED);
    json_decref (pin);

    //  What changed, as an admin reviews it
    char *output = s_cli_ok (self, (const char *[]) { "pins", "show", "greet", NULL });
    char *release = zsys_sprintf ("release it: dsh pins accept greet --digest %s", offered);
    const char *expected [] = { "greet: quarantined: " CHANGED, "changes, pinned -> offered",
                                "  - description: \"one\"\n  + description: \"two\"\n", release };
    for (size_t index = 0; index < 4; index++)
        if (!strstr (output, expected [index]))
            fail_msg ("dsh pins show greet does not say \"%s\":\n%s", expected [index], output);
    zstr_free (&release);
    zstr_free (&output);

    //  An accept of what was reviewed before is refused, and changes nothing
    int status = s_cli (self, (const char *[]) { "pins", "accept", "greet", "--digest", pinned, NULL }, &output);
    assert_int_not_equal (status, 0);
    char *stale = zsys_sprintf ("the offered definition of \"greet\" is now %.12s, not %.12s", offered, pinned);
    if (!strstr (output, stale))
        fail_msg ("a stale accept said \"%s\", not \"%s\"", output, stale);
    zstr_free (&stale);
    zstr_free (&output);
    s_expect_refused (self, CHANGED, offered, pinned);

    //  The accept of what is offered releases it at once, and the new
    //  handler runs
    s_accept (self, offered, offered, &two);
    s_expect_call (self, NULL, "two");
    assert_int_equal (atomic_load (&two.calls), 1);
    assert_int_equal (atomic_load (&one.calls), 1);
    assert_true (s_rendered (self));
    pin = s_pin (self, "tofu");
    assert_string_equal (s_str (pin, "state"), "pinned");
    assert_string_equal (s_str (pin, "digest"), offered);
    assert_true (*s_str (pin, "acceptedBy"));
    json_decref (pin);

    //  A change at run time, with no restart (a bridged server's tool
    //  changed under it): its entry comes as tool.updated, with the marks
    s_greeter_change (self, &three);
    char *third = s_expect_quarantine (self, DSH_EV_UPDATED, &three, CHANGED, offered);
    s_expect_refused (self, CHANGED, third, offered);
    assert_int_equal (atomic_load (&three.calls), 0);
    zstr_free (&third);
    zstr_free (&offered);
    zstr_free (&pinned);
    s_rig_destroy (&self);
}

//  ---------------------------------------------------------------------
//  2. strict: nothing runs that an admin did not accept

static void
test_strict (void **state)
{
    (void) state;
    rig_t *self = s_rig ("strict", "");
    version_t one = { "one", 0 }, two = { "two", 0 };
    s_greeter_start (self, &one);
    char *first = s_expect_quarantine (self, DSH_EV_REGISTERED, &one, UNACCEPTED, NULL);
    s_expect_refused (self, UNACCEPTED, first, NULL);
    assert_false (s_rendered (self));
    json_t *pin = s_pin (self, "strict");
    assert_string_equal (s_str (pin, "state"), "quarantined");
    assert_null (json_object_get (pin, "digest"));
    json_decref (pin);
    s_accept (self, NULL, first, &one);
    s_expect_call (self, NULL, "one");

    //  Another definition, rejected: it stays quarantined, and says so
    s_greeter_stop (self);
    s_greeter_start (self, &two);
    char *second = s_expect_quarantine (self, DSH_EV_REGISTERED, &two, CHANGED, first);
    char *output = s_cli_ok (self, (const char *[]) { "pins", "reject", "greet", NULL });
    assert_non_null (strstr (output, "rejected greet: it stays quarantined"));
    zstr_free (&output);
    json_t *event = s_expect_event (self, DSH_EV_REJECTED, "greet");
    assert_string_equal (s_str (event, "digest"), second);
    json_decref (event);
    zstr_free (&second);
    second = s_expect_quarantine (self, DSH_EV_UPDATED, &two, REJECTED, first);
    json_t *entry = s_listed (self);
    s_assert_quarantined (entry, &two, REJECTED, first);
    json_decref (entry);
    s_expect_refused (self, REJECTED, second, first);

    //  It comes again: still rejected; the accepted one is served again
    s_greeter_stop (self);
    s_greeter_start (self, &two);
    zstr_free (&second);
    second = s_expect_quarantine (self, DSH_EV_REGISTERED, &two, REJECTED, first);
    s_greeter_stop (self);
    s_greeter_start (self, &one);
    event = s_expect_event (self, DSH_EV_REGISTERED, "greet");
    s_assert_released (json_object_get (event, "tool"), &one);
    json_decref (event);
    s_expect_call (self, NULL, "one");
    assert_int_equal (atomic_load (&two.calls), 0);
    zstr_free (&first);
    zstr_free (&second);
    s_rig_destroy (&self);
}

//  ---------------------------------------------------------------------
//  3. What was approved is what runs

static void
s_approver_send (rig_t *self, const char *command, const json_t *body)
{
    assert_int_equal (dsh_testkit_approver_send (self->approver, command, body), 0);
}

//  The next message on the approvals socket but HEARTBEATs (each answered
//  with APPROVER, so the approver stays present), which must be of command.
static json_t *
s_approver_expect (rig_t *self, const char *command)
{
    char why [512];
    json_t *body = dsh_testkit_approver_expect (self->approver, command, WAIT_MS, why, sizeof (why));
    if (!body)
        fail_msg ("%s", why);
    return body;
}

//  A raw approver on the stage's approvals socket, present once the
//  stage probes it.
static void
s_approver_start (rig_t *self)
{
    self->approver = dsh_testkit_approver (self->client, STAGE, WAIT_MS);
    assert_non_null (self->approver);
}

//  Sends a call of greet as agent "coder", call_id, and returns the id of
//  the approval request it makes (caller frees).
static char *
s_held (rig_t *self, const char *call_id)
{
    assert_non_null (dsh_client_call_send (self->client, call_id, "greet", "\x80", 1, "coder", NULL, 0, 30000));
    json_t *pending = s_approver_expect (self, "PENDING");
    assert_string_equal (s_str (pending, "callId"), call_id);
    assert_string_equal (s_str (pending, "tool"), "greet");
    char *id = strdup (s_str (pending, "id"));
    json_decref (pending);
    return id;
}

//  Allows request id once; the call's answer (text, or "<code>: <text>")
//  must be expected, and the request resolved "allowed".
static void
s_allow (rig_t *self, const char *id, const char *call_id, const char *expected)
{
    json_t *decide = json_pack ("{s:s, s:s}", "id", id, "outcome", "allow");
    s_approver_send (self, "DECIDE", decide);
    json_decref (decide);
    dsh_reply_t *reply = dsh_client_recv (self->client, WAIT_MS);
    if (!reply)
        fail_msg ("no answer to %s within %d ms", call_id, WAIT_MS);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    assert_string_equal (dsh_reply_call_id (reply), call_id);
    char *text = dsh_reply_is_error (reply)? zsys_sprintf ("%s: %s", dsh_reply_error_code (reply),
                                                           dsh_reply_text (reply)):
                                             strdup (dsh_reply_text (reply));
    dsh_reply_destroy (&reply);
    if (!streq (text, expected))
        fail_msg ("%s: \"%s\", expected \"%s\"", call_id, text, expected);
    zstr_free (&text);
    json_t *resolved = s_approver_expect (self, "RESOLVED");
    assert_string_equal (s_str (resolved, "id"), id);
    assert_string_equal (s_str (resolved, "outcome"), "allowed");
    json_decref (resolved);
}

static void
test_approved_is_what_runs (void **state)
{
    (void) state;
    rig_t *self = s_rig (NULL, s_ask_chain);
    version_t one = { "one", 0 }, two = { "two", 0 }, three = { "three", 0 };
    s_greeter_start (self, &one);
    json_decref (s_expect_event (self, DSH_EV_REGISTERED, "greet"));
    s_approver_start (self);

    //  Nothing changes while it waits: allowed, it runs
    char *id = s_held (self, "held-1");
    s_allow (self, id, "held-1", "one");
    zstr_free (&id);
    assert_int_equal (atomic_load (&one.calls), 1);

    //  The component restarts with another description while a call waits
    id = s_held (self, "held-2");
    s_greeter_stop (self);
    s_greeter_start (self, &two);
    json_t *pin = s_pin (self, "tofu");
    char *pinned = strdup (s_str (pin, "digest"));
    json_decref (pin);
    char *offered = s_expect_quarantine (self, DSH_EV_REGISTERED, &two, CHANGED, pinned);
    char *refusal = s_refusal (CHANGED, offered, pinned);
    s_allow (self, id, "held-2", refusal);
    zstr_free (&refusal);
    zstr_free (&id);
    assert_int_equal (atomic_load (&one.calls), 1);
    assert_int_equal (atomic_load (&two.calls), 0);

    //  Accepted, and changed at run time while the next call waits
    s_accept (self, offered, offered, &two);
    id = s_held (self, "held-3");
    s_greeter_change (self, &three);
    char *third = s_expect_quarantine (self, DSH_EV_UPDATED, &three, CHANGED, offered);
    refusal = s_refusal (CHANGED, third, offered);
    s_allow (self, id, "held-3", refusal);
    zstr_free (&refusal);
    zstr_free (&id);
    assert_int_equal (atomic_load (&two.calls), 0);
    assert_int_equal (atomic_load (&three.calls), 0);
    zstr_free (&third);
    zstr_free (&offered);
    zstr_free (&pinned);
    s_rig_destroy (&self);
}

//  ---------------------------------------------------------------------
//  4. pins off: what a component says is served at once

static void
test_pins_off (void **state)
{
    (void) state;
    rig_t *self = s_rig ("off", "");
    version_t one = { "one", 0 }, two = { "two", 0 }, three = { "three", 0 };
    s_greeter_start (self, &one);
    json_t *event = s_expect_event (self, DSH_EV_REGISTERED, "greet");
    s_assert_released (json_object_get (event, "tool"), &one);
    json_decref (event);
    s_expect_call (self, NULL, "one");

    //  Changed at run time: updated, served, no tool.changed (the next
    //  event about greet is the withdrawal that follows)
    s_greeter_change (self, &two);
    event = s_expect_event (self, DSH_EV_UPDATED, "greet");
    s_assert_released (json_object_get (event, "tool"), &two);
    json_decref (event);
    s_expect_call (self, NULL, "two");
    s_greeter_stop (self);
    s_greeter_start (self, &three);
    event = s_expect_event (self, DSH_EV_REGISTERED, "greet");
    s_assert_released (json_object_get (event, "tool"), &three);
    json_decref (event);
    json_t *entry = s_listed (self);
    s_assert_released (entry, &three);
    json_decref (entry);
    s_expect_call (self, NULL, "three");
    assert_true (s_rendered (self));

    //  Nothing is pinned, and PINS says why it cannot
    assert_null (s_pin (self, "off"));
    char *output = NULL;
    assert_int_not_equal (s_cli (self, (const char *[]) { "pins", "accept", "greet", NULL }, &output), 0);
    assert_non_null (strstr (output, "pins are off on this broker"));
    zstr_free (&output);
    s_rig_destroy (&self);
}

//  ---------------------------------------------------------------------
//  5. CURVE: reading the pins needs an admin, auditor or approver key;
//  changing them an admin key

static const struct {
    const char *name;
    const char *role;
    const char *components;
    const char *agent;
} s_keys [] = {
    { "broker", DSH_ROLE_ADMIN, NULL, NULL },
    { "demo", DSH_ROLE_COMPONENT, "demo", NULL },
    { "alice", DSH_ROLE_AGENT, NULL, "alice" },
    { "approver", DSH_ROLE_APPROVER, NULL, NULL },
    { "auditor", DSH_ROLE_AUDITOR, NULL, NULL },
    { "admin", DSH_ROLE_ADMIN, NULL, NULL },
};

//  `dsh --cert KEY pins ARGS...` at the CURVE broker: exit status, and
//  what it said in *output.
static int
s_cli_as (const char *endpoint, const char *keys, const char *key, const char *const *pins, char **output)
{
    char *cert = zsys_sprintf ("%s/%s", keys, key);
    char *broker = zsys_sprintf ("%s/broker", keys);
    const char *args [16] = { "--timeout-ms", "5000", "--cert", cert, "--broker-cert", broker, "pins" };
    size_t count = 7;
    for (size_t index = 0; pins [index]; index++)
        args [count++] = pins [index];
    args [count] = NULL;
    int status = dsh_testkit_cli_merged (endpoint, args, CLI_MS, output);
    zstr_free (&cert);
    zstr_free (&broker);
    return status;
}

static void
test_curve_rights (void **state)
{
    (void) state;
    char root [] = "/tmp/dsh-pins-curve-XXXXXX";
    assert_non_null (mkdtemp (root));
    char *keys = zsys_sprintf ("%s/keys", root);
    char *allow = zsys_sprintf ("%s/allow", root);
    assert_int_equal (mkdir (keys, 0700), 0);
    assert_int_equal (mkdir (allow, 0700), 0);
    for (size_t index = 0; index < sizeof (s_keys) / sizeof (s_keys [0]); index++) {
        char *path = zsys_sprintf ("%s/%s", keys, s_keys [index].name);
        char error [256];
        if (dsh_curve_keygen (path, s_keys [index].role, s_keys [index].components, NULL, s_keys [index].agent,
                              s_keys [index].name, error, sizeof (error)))
            fail_msg ("keygen %s: %s", s_keys [index].name, error);
        if (index > 0) {
            zcert_t *cert = zcert_load (path);
            assert_non_null (cert);
            char *public = zsys_sprintf ("%s/%s", allow, s_keys [index].name);
            assert_int_equal (zcert_save_public (cert, public), 0);
            zstr_free (&public);
            zcert_destroy (&cert);
        }
        zstr_free (&path);
    }
    char *cert = zsys_sprintf ("%s/broker", keys);
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (500, (const char *[]) { "--cert", cert, "--allow", allow,
                                                                         "--state-dir", root, NULL },
                                                 endpoint, sizeof (endpoint));
    assert_non_null (broker);
    char *demo_cert = zsys_sprintf ("%s/demo", keys);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, endpoint, "demo",
                                                  (const char *[]) { "--cert", demo_cert, "--broker-cert", cert,
                                                                     NULL });
    assert_non_null (demo);

    //  An approver reads the pins: echo, once the demo has registered
    char *output = NULL;
    int64_t give_up = zclock_mono () + WAIT_MS;
    bool pinned = false;
    while (!pinned && zclock_mono () < give_up) {
        zstr_free (&output);
        assert_int_equal (s_cli_as (endpoint, keys, "approver", (const char *[]) { "list", NULL }, &output), 0);
        pinned = strstr (output, "echo ") && strstr (output, "pinned");
        if (!pinned)
            zclock_sleep (100);
    }
    if (!pinned)
        fail_msg ("an approver's dsh pins list never showed echo pinned: %s", output);
    zstr_free (&output);
    assert_int_equal (s_cli_as (endpoint, keys, "auditor", (const char *[]) { "show", "echo", NULL }, &output), 0);
    assert_non_null (strstr (output, "echo: pinned"));
    zstr_free (&output);

    //  An agent may neither read nor change them; an approver or an
    //  auditor may not change them; an admin may
    const struct {
        const char *key;
        const char *args [4];
        const char *needs;
    } refused [] = {
        { "alice", { "accept", "echo", NULL }, "(role agent) may not send PINS: it needs an admin key" },
        { "alice", { "forget", "echo", NULL }, "(role agent) may not send PINS: it needs an admin key" },
        { "alice", { "list", NULL }, "(role agent) may not send PINS: it needs an auditor key" },
        { "approver", { "accept", "echo", NULL }, "(role approver) may not send PINS: it needs an admin key" },
        { "auditor", { "reject", "echo", NULL }, "(role auditor) may not send PINS: it needs an admin key" },
    };
    for (size_t index = 0; index < sizeof (refused) / sizeof (refused [0]); index++) {
        int status = s_cli_as (endpoint, keys, refused [index].key, refused [index].args, &output);
        if (status == 0 || !strstr (output, refused [index].needs))
            fail_msg ("%s: dsh pins %s: exit %d, \"%s\"", refused [index].key, refused [index].args [0], status,
                      output);
        zstr_free (&output);
    }
    assert_int_equal (s_cli_as (endpoint, keys, "admin", (const char *[]) { "accept", "echo", NULL }, &output), 0);
    assert_non_null (strstr (output, "accepted echo: pinned "));
    zstr_free (&output);
    assert_int_equal (s_cli_as (endpoint, keys, "approver", (const char *[]) { "show", "echo", NULL }, &output), 0);
    assert_non_null (strstr (output, " by admin at "));
    zstr_free (&output);

    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker);
    zstr_free (&demo_cert);
    zstr_free (&cert);
    zstr_free (&allow);
    zstr_free (&keys);
    zdir_t *dir = zdir_new (root, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_changed_definition_quarantined),
        cmocka_unit_test (test_strict),
        cmocka_unit_test (test_approved_is_what_runs),
        cmocka_unit_test (test_pins_off),
        cmocka_unit_test (test_curve_rights),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
