/*  =========================================================================
    test_pins_store - pins and grants in the broker's store: across a
    broker restart (SQLite), and shared by two brokers on one PostgreSQL
    database (a scratch server, tests/kit/pg_scratch.sh)

    Real processes: dsh-broker (restarted on the same endpoints and state
    directory, so it opens the same SQLite file), a component from the C SDK
    serving one raw tool, "greet", whose description says which version it
    is, the dsh CLI, the events socket, and raw approvers on the permission
    stages' approvals sockets. Each version's handler counts its calls.

    6. a pin survives a restart: the changed definition that comes after
       it is quarantined in its first event, never served in between
    7. a grant survives a restart: with no approver, the granted agent's
       call passes and another agent's is denied; revoked, it is denied,
       also after the next restart
    8. two brokers on PostgreSQL (PROTOCOL.md: a change at one broker
       holds at every broker on the store within about a second):
       (a) a definition pinned at A quarantines another at B; an accept
           at B releases it at B and quarantines A's old one
       (b) two definitions seen at once, one at each broker: one pin
           holds at both, the other definition is quarantined
       (c) a grant given at A lets the call through at B, with no
           approver at B
       (d) a grant revoked at B ends at A

    Case 8 is skipped where there is no PostgreSQL server; the program
    exits 77 only if every case was.
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

#include <signal.h>
#include <stdatomic.h>

#define STAGE       "permission"
#define WAIT_MS     10000           //  for anything that should come at once
#define CLI_MS      20000
//  A change at one broker holds at the other: at its next poll (every 1 s),
//  or, when the other changed the same thing in the last 2-3 s, when the
//  read is applied again 3.5 s later (PROTOCOL.md, Durable state)
#define SHARED_MS   6500

#define CHANGED     "definition changed since it was pinned"
#define ASKS        "DENIED: Error: tool \"greet\" requires approval"

//  greet asks a human
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

static int s_cases;                     //  run
static int s_skipped;                   //  of them, skipped

//  One version of greet: its description, which its handler also answers,
//  and how many calls that handler ran
typedef struct {
    const char *description;
    atomic_int calls;
} version_t;

typedef struct {
    char front [128];
    char announce [128];
    char work [128];
    char events [128];
} endpoints_t;

//  Every socket on a free port of czmq's dynamic range
static const endpoints_t s_any = {
    "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!", "tcp://127.0.0.1:!"
};

//  A running broker and what the test holds on it
typedef struct {
    dsh_testproc_t *proc;
    endpoints_t at;                     //  as bound
    dsh_client_t *client;
    zsock_t *events;                    //  a SUB on every event, or NULL
    zsock_t *approver;                  //  a raw DEALER on the approvals socket, or NULL
    dsh_provider_t *greeter;            //  serving greet here, or NULL
} broker_t;

typedef struct {
    char root [256];                    //  the test's directory: state, config
    char *config;                       //  a config file in it
    broker_t brokers [2];
    char pg_dir [64];                   //  a scratch PostgreSQL server's, or ""
    char *pg_uri;
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

static const char *
s_str (json_t *object, const char *key)
{
    const char *value = json_string_value (json_object_get (object, key));
    return value? value: "";
}

//  ---------------------------------------------------------------------
//  The rig

static int
s_rig_setup (void **state)
{
    rig_t *self = (rig_t *) zmalloc (sizeof (rig_t));
    assert_non_null (self);
    const char *base = getenv ("DSH_STATE_DIR");
    snprintf (self->root, sizeof (self->root), "%s/pins-store-XXXXXX", base && *base? base: "/tmp");
    assert_non_null (mkdtemp (self->root));
    self->config = zsys_sprintf ("%s/broker.cfg", self->root);
    FILE *file = fopen (self->config, "w");
    assert_non_null (file);
    assert_true (fputs (s_ask_chain, file) >= 0);
    assert_int_equal (fclose (file), 0);
    s_cases++;
    *state = self;
    return 0;
}

static void
s_broker_close (broker_t *broker)
{
    zsock_destroy (&broker->approver);
    dsh_provider_destroy (&broker->greeter);
    zsock_destroy (&broker->events);
    dsh_client_destroy (&broker->client);
}

static int
s_rig_teardown (void **state)
{
    rig_t *self = (rig_t *) *state;
    for (int index = 0; index < 2; index++) {
        s_broker_close (&self->brokers [index]);
        dsh_testproc_destroy (&self->brokers [index].proc);
    }
    int rc = 0;
    if (*self->pg_dir) {
        if (dsh_testkit_postgres_stop (self->pg_dir))
            rc = -1;
        char *command = zsys_sprintf ("rm -rf %s", self->pg_dir);
        if (system (command))
            rc = -1;
        zstr_free (&command);
    }
    zdir_t *dir = zdir_new (self->root, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
    zstr_free (&self->pg_uri);
    zstr_free (&self->config);
    free (self);
    *state = NULL;
    return rc;
}

//  A scratch PostgreSQL server of the test's own, its URI; skips the
//  test if this host has none.
static const char *
s_postgres (rig_t *self)
{
    snprintf (self->pg_dir, sizeof (self->pg_dir), "/tmp/dsh-pins-pg-XXXXXX");
    assert_non_null (mkdtemp (self->pg_dir));
    self->pg_uri = dsh_testkit_postgres_start (self->pg_dir);
    if (!self->pg_uri) {
        char *command = zsys_sprintf ("rm -rf %s", self->pg_dir);
        assert_int_equal (system (command), 0);
        zstr_free (&command);
        *self->pg_dir = 0;
        print_message ("no PostgreSQL server on this host (tests/kit/pg_scratch.sh): skipped\n");
        s_skipped++;
        skip ();
    }
    return self->pg_uri;
}

//  Starts broker on the wanted endpoints with extra flags (NULL-ended),
//  and a client on it.
static void
s_broker_start (broker_t *broker, const endpoints_t *wanted, const char *const *extra)
{
    assert_null (broker->proc);
    const char *argv [32] = { "broker/dsh-broker", "--endpoint", wanted->front, "--announce", wanted->announce,
                              "--work", wanted->work, "--events", wanted->events, "--heartbeat-ms", "200" };
    size_t argc = 11;
    for (size_t index = 0; extra && extra [index]; index++) {
        assert_true (argc < 31);
        argv [argc++] = extra [index];
    }
    argv [argc] = NULL;
    broker->proc = dsh_testproc_start (argv);
    assert_non_null (broker->proc);
    char *line = dsh_testproc_wait_line (broker->proc, "listening on ", 15000);
    if (!line)
        fail_msg ("dsh-broker did not start (%s)", dsh_testproc_output (broker->proc, 0));
    endpoints_t *at = &broker->at;
    int fields = sscanf (strstr (line, "listening on "), "listening on %127s (announce %127[^,], work %127[^,], "
                         "events %127[^)])", at->front, at->announce, at->work, at->events);
    assert_int_equal (fields, 4);
    zstr_free (&line);
    broker->client = dsh_client_new (at->front);
    assert_non_null (broker->client);
}

//  Stops broker cleanly (it writes what it queued for the store first).
static void
s_broker_stop (broker_t *broker)
{
    s_broker_close (broker);
    dsh_testproc_signal (broker->proc, SIGTERM);
    assert_int_equal (dsh_testproc_wait (broker->proc, 15000), 0);
    dsh_testproc_destroy (&broker->proc);
}

//  A SUB on broker's events, live.
static void
s_subscribe (broker_t *broker)
{
    broker->events = dsh_testkit_events (broker->at.front, "", NULL, WAIT_MS);
    assert_non_null (broker->events);
}

//  A component id at broker, serving greet at version, once acknowledged.
static void
s_greeter_start (broker_t *broker, const char *id, version_t *version)
{
    assert_null (broker->greeter);
    broker->greeter = dsh_provider_new (broker->at.front, id, 1);
    assert_non_null (broker->greeter);
    char *entry = zsys_sprintf ("{\"name\": \"greet\", \"description\": \"%s\", \"parameters\": {\"type\": \"object\"}}",
                                version->description);
    assert_int_equal (dsh_provider_add_raw (broker->greeter, entry, s_greet, version), 0);
    zstr_free (&entry);
    dsh_provider_start (broker->greeter);
    assert_int_equal (dsh_provider_wait_ready (broker->greeter, WAIT_MS), 0);
}

//  The component leaves; broker no longer lists greet.
static void
s_greeter_stop (broker_t *broker)
{
    dsh_provider_destroy (&broker->greeter);
    assert_int_equal (dsh_testkit_wait_tools (broker->at.front, "greet", 0, WAIT_MS), 0);
}

//  ---------------------------------------------------------------------
//  What a broker says

//  The next event on broker's SUB naming greet (others are skipped).
static json_t *
s_greet_event (broker_t *broker)
{
    zpoller_t *poller = zpoller_new (broker->events, NULL);
    int64_t give_up = zclock_mono () + WAIT_MS;
    json_t *event = NULL;
    while (!event) {
        int64_t left = give_up - zclock_mono ();
        if (left <= 0 || zpoller_wait (poller, (int) left) != broker->events)
            break;
        zmsg_t *msg = zmsg_recv (broker->events);
        zframe_t *body = zmsg_last (msg);
        char error [128];
        dsh_doc_t *doc = body? dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error)): NULL;
        assert_non_null (doc);
        json_t *read = dsh_json_from_msgpack (dsh_doc_root (doc));
        if (streq (s_str (read, "name"), "greet"))
            event = read;
        else
            json_decref (read);
        dsh_doc_destroy (&doc);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    if (!event)
        fail_msg ("no event about greet within %d ms", WAIT_MS);
    return event;
}

static json_t *
s_expect_event (broker_t *broker, const char *kind)
{
    json_t *event = s_greet_event (broker);
    if (!streq (s_str (event, "kind"), kind)) {
        char *text = json_dumps (event, JSON_COMPACT);
        fail_msg ("expected %s about greet, got %s", kind, text);
    }
    return event;
}

//  greet's entry in broker's LIST (caller owns), or NULL.
static json_t *
s_listed (broker_t *broker)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (broker->client, DSH_LIST, NULL, WAIT_MS, error, sizeof (error));
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

//  greet's pin at broker (PINS list; caller owns), or NULL.
static json_t *
s_pin (broker_t *broker)
{
    json_t *request = json_pack ("{s:s}", "op", "list");
    char error [256];
    dsh_reply_t *reply = dsh_client_query (broker->client, DSH_PINS, request, WAIT_MS, error, sizeof (error));
    json_decref (request);
    if (!reply)
        fail_msg ("PINS: %s", error);
    assert_string_equal (dsh_reply_command (reply), DSH_PINS);
    json_t *body = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    json_t *found = NULL;
    size_t index;
    json_t *pin;
    json_array_foreach (json_object_get (body, "pins"), index, pin)
        if (streq (s_str (pin, "name"), "greet"))
            found = json_incref (pin);
    json_decref (body);
    return found;
}

//  A call of greet as agent at broker: its text if it succeeded, else
//  "<code>: <text>". Caller frees.
static char *
s_call (broker_t *broker, const char *agent)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (broker->client, "greet", "{}", agent, WAIT_MS, error, sizeof (error));
    if (!reply)
        fail_msg ("call greet: %s", error);
    char *text = dsh_reply_is_error (reply)? zsys_sprintf ("%s: %s", dsh_reply_error_code (reply),
                                                           dsh_reply_text (reply)):
                                             strdup (dsh_reply_text (reply));
    dsh_reply_destroy (&reply);
    return text;
}

static void
s_expect_call (broker_t *broker, const char *agent, const char *expected)
{
    char *text = s_call (broker, agent);
    if (!streq (text, expected))
        fail_msg ("call greet as %s: \"%s\", expected \"%s\"", agent? agent: "-", text, expected);
    zstr_free (&text);
}

//  A call refused because greet's definition changed since pinned.
static void
s_expect_quarantined (broker_t *broker, const char *agent, const char *offered, const char *pinned)
{
    char *expected = zsys_sprintf ("QUARANTINED: Error: tool \"greet\" is quarantined: its definition changed "
                                   "since it was pinned (changed: description; pinned %.12s, now %.12s); review "
                                   "it with `dsh pins show greet`, release it with `dsh pins accept greet`",
                                   pinned, offered);
    s_expect_call (broker, agent, expected);
    zstr_free (&expected);
}

//  entry has the quarantine marks: changed, pinned to pinned. Returns its
//  digest.
static const char *
s_assert_quarantined (json_t *entry, const char *description, const char *pinned)
{
    assert_non_null (entry);
    assert_string_equal (s_str (entry, "description"), description);
    assert_true (json_is_true (json_object_get (entry, "quarantined")));
    assert_string_equal (s_str (entry, "quarantineReason"), CHANGED);
    assert_string_equal (s_str (entry, "pinnedDigest"), pinned);
    const char *digest = s_str (entry, "digest");
    assert_int_equal (strlen (digest), DSH_DIGEST_SIZE);
    assert_string_not_equal (digest, pinned);
    return digest;
}

static void
s_assert_released (json_t *entry, const char *description)
{
    assert_non_null (entry);
    assert_string_equal (s_str (entry, "description"), description);
    assert_null (json_object_get (entry, "quarantined"));
    assert_null (json_object_get (entry, "pinnedDigest"));
}

//  `dsh ARGS...` at front, which must succeed; its output (caller frees).
static char *
s_cli_ok (const char *front, const char *const *args)
{
    char *output = NULL;
    int status = dsh_testkit_cli_merged (front, args, CLI_MS, &output);
    if (status != 0)
        fail_msg ("dsh %s %s: exit %d: %s", args [0], args [1]? args [1]: "", status, output? output: "");
    return output;
}

//  ---------------------------------------------------------------------
//  Approvers

static void
s_approver_send (broker_t *broker, const char *command, const json_t *body)
{
    assert_int_equal (dsh_testkit_approver_send (broker->approver, command, body), 0);
}

//  The next message but HEARTBEATs (each answered, so the approver stays
//  present), which must be of command (caller owns its body).
static json_t *
s_approver_expect (broker_t *broker, const char *command)
{
    char why [512];
    json_t *body = dsh_testkit_approver_expect (broker->approver, command, WAIT_MS, why, sizeof (why));
    if (!body)
        fail_msg ("%s", why);
    return body;
}

//  A raw approver on broker's stage, present once the stage probes it.
static void
s_approver_start (broker_t *broker)
{
    broker->approver = dsh_testkit_approver (broker->client, STAGE, WAIT_MS);
    assert_non_null (broker->approver);
}

//  A call of greet as agent at broker that asks; the approver grants this
//  agent the tool for 120 s. The call's answer must be expected; returns
//  the grant's id (caller frees).
static char *
s_grant (broker_t *broker, const char *agent, const char *expected)
{
    assert_non_null (dsh_client_call_send (broker->client, "granted-1", "greet", "\x80", 1, agent, NULL, 0, 30000));
    json_t *pending = s_approver_expect (broker, "PENDING");
    assert_string_equal (s_str (pending, "callId"), "granted-1");
    json_t *decide = json_pack ("{s:s, s:s, s:s, s:i, s:s}", "id", s_str (pending, "id"), "outcome", "allow",
                                "scope", "tool", "seconds", 120, "by", "tester");
    s_approver_send (broker, "DECIDE", decide);
    json_decref (decide);
    dsh_reply_t *reply = dsh_client_recv (broker->client, WAIT_MS);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "granted-1");
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), expected);
    dsh_reply_destroy (&reply);
    json_t *resolved = s_approver_expect (broker, "RESOLVED");
    assert_string_equal (s_str (resolved, "outcome"), "allowed");
    assert_int_equal (strlen (s_str (resolved, "grant")), 8);
    char *grant = strdup (s_str (resolved, "grant"));
    json_decref (resolved);
    json_decref (pending);
    return grant;
}

//  ---------------------------------------------------------------------
//  6. A pin survives a broker restart

static void
test_pin_survives_restart (void **state)
{
    rig_t *self = (rig_t *) *state;
    broker_t *broker = &self->brokers [0];
    version_t one = { "one", 0 }, two = { "two", 0 };
    const char *flags [] = { "--state-dir", self->root, NULL };
    s_broker_start (broker, &s_any, flags);
    s_greeter_start (broker, "greeter", &one);
    assert_int_equal (dsh_testkit_wait_tools (broker->at.front, "greet", 1, WAIT_MS), 0);
    s_expect_call (broker, NULL, "one");
    json_t *pin = s_pin (broker);
    assert_non_null (pin);
    assert_string_equal (s_str (pin, "state"), "pinned");
    char *pinned = strdup (s_str (pin, "digest"));
    json_decref (pin);
    s_greeter_stop (broker);
    s_broker_stop (broker);

    //  The same endpoints and state directory: the same store file
    endpoints_t before = broker->at;
    const char *port = strrchr (before.front, ':') + 1;
    char *store = zsys_sprintf ("%s/broker-%s.db", self->root, port);
    assert_true (zsys_file_exists (store));
    zstr_free (&store);
    s_broker_start (broker, &before, flags);
    s_subscribe (broker);
    pin = s_pin (broker);
    assert_non_null (pin);
    assert_string_equal (s_str (pin, "digest"), pinned);
    assert_false (json_is_true (json_object_get (pin, "registered")));
    json_decref (pin);

    //  The changed definition: quarantined in its very first event
    s_greeter_start (broker, "greeter", &two);
    json_t *event = s_expect_event (broker, DSH_EV_REGISTERED);
    char *offered = strdup (s_assert_quarantined (json_object_get (event, "tool"), "two", pinned));
    json_decref (event);
    event = s_expect_event (broker, DSH_EV_CHANGED);
    assert_string_equal (s_str (event, "pinnedDigest"), pinned);
    assert_non_null (strstr (s_str (event, "diff"), "- description: \"one\"\n+ description: \"two\""));
    json_decref (event);
    s_expect_quarantined (broker, NULL, offered, pinned);
    assert_int_equal (atomic_load (&two.calls), 0);

    //  The pinned one is served again as it was
    s_greeter_stop (broker);
    s_greeter_start (broker, "greeter", &one);
    event = s_expect_event (broker, DSH_EV_UNREGISTERED);
    json_decref (event);
    event = s_expect_event (broker, DSH_EV_REGISTERED);
    s_assert_released (json_object_get (event, "tool"), "one");
    json_decref (event);
    s_expect_call (broker, NULL, "one");
    zstr_free (&offered);
    zstr_free (&pinned);
}

//  ---------------------------------------------------------------------
//  7. A grant survives a broker restart

static void
test_grant_survives_restart (void **state)
{
    rig_t *self = (rig_t *) *state;
    broker_t *broker = &self->brokers [0];
    version_t one = { "one", 0 };
    const char *flags [] = { "-c", self->config, "--state-dir", self->root, NULL };
    s_broker_start (broker, &s_any, flags);
    s_greeter_start (broker, "greeter", &one);
    assert_int_equal (dsh_testkit_wait_tools (broker->at.front, "greet", 1, WAIT_MS), 0);
    s_approver_start (broker);
    char *grant = s_grant (broker, "coder", "one");
    s_expect_call (broker, "coder", "one");
    s_greeter_stop (broker);
    s_broker_stop (broker);

    //  Again, with no approver: the grant lets coder through, nobody else
    endpoints_t before = broker->at;
    s_broker_start (broker, &before, flags);
    s_greeter_start (broker, "greeter", &one);
    assert_int_equal (dsh_testkit_wait_tools (broker->at.front, "greet", 1, WAIT_MS), 0);
    s_expect_call (broker, "coder", "one");
    s_expect_call (broker, "planner", ASKS);
    assert_int_equal (atomic_load (&one.calls), 3);
    char *output = s_cli_ok (broker->at.front, (const char *[]) { "grants", NULL });
    if (!strstr (output, grant) || !strstr (output, "coder") || !strstr (output, "(by tester)"))
        fail_msg ("dsh grants does not list grant %s of coder: %s", grant, output);
    zstr_free (&output);

    //  Revoked: coder is asked again (and denied: nobody to ask), also
    //  after the next restart
    output = s_cli_ok (broker->at.front, (const char *[]) { "grants", "revoke", grant, NULL });
    zstr_free (&output);
    s_expect_call (broker, "coder", ASKS);
    s_greeter_stop (broker);
    s_broker_stop (broker);
    s_broker_start (broker, &before, flags);
    s_greeter_start (broker, "greeter", &one);
    assert_int_equal (dsh_testkit_wait_tools (broker->at.front, "greet", 1, WAIT_MS), 0);
    s_expect_call (broker, "coder", ASKS);
    output = s_cli_ok (broker->at.front, (const char *[]) { "grants", NULL });
    assert_null (strstr (output, grant));
    zstr_free (&output);
    assert_int_equal (atomic_load (&one.calls), 3);
    zstr_free (&grant);
}

//  ---------------------------------------------------------------------
//  8. Two brokers on one PostgreSQL database

//  Brokers A and B on the rig's scratch database, the same chain.
static void
s_two_brokers (rig_t *self)
{
    const char *uri = s_postgres (self);
    s_broker_start (&self->brokers [0], &s_any,
                    (const char *[]) { "-c", self->config, "--name", "alpha", "--store", uri, NULL });
    s_broker_start (&self->brokers [1], &s_any,
                    (const char *[]) { "-c", self->config, "--name", "beta", "--store", uri, NULL });
}

//  Polls greet's LIST entry at broker until quarantined is as wanted, for
//  SHARED_MS; returns the entry (caller owns) and how long it took.
static json_t *
s_wait_quarantined (broker_t *broker, bool quarantined, int64_t *took_ms)
{
    int64_t start = zclock_mono ();
    json_t *entry = NULL;
    while (true) {
        json_decref (entry);
        entry = s_listed (broker);
        if (entry && json_is_true (json_object_get (entry, "quarantined")) == quarantined)
            break;
        if (zclock_mono () - start > SHARED_MS) {
            char *text = json_dumps (entry, JSON_COMPACT);
            fail_msg ("greet at %s is still %s %d ms on", broker->at.front, text? text: "unlisted", SHARED_MS);
        }
        zclock_sleep (50);
    }
    *took_ms = zclock_mono () - start;
    return entry;
}

//  Polls the pins at broker until greet's pin has digest, for SHARED_MS;
//  returns the pin (caller owns).
static json_t *
s_wait_pin (broker_t *broker, const char *digest)
{
    int64_t give_up = zclock_mono () + SHARED_MS;
    json_t *pin;
    while (!(pin = s_pin (broker)) || !streq (s_str (pin, "digest"), digest)) {
        if (zclock_mono () > give_up) {
            char *text = json_dumps (pin, JSON_COMPACT);
            fail_msg ("greet's pin at %s is %s, not %.12s, %d ms on", broker->at.front, text? text: "none", digest,
                      SHARED_MS);
        }
        json_decref (pin);
        zclock_sleep (50);
    }
    return pin;
}

//  (a) A pin made at A quarantines another definition at B; an accept at
//  B releases it at B, and holds at A: A's old definition is now the
//  changed one
static void
test_two_brokers_share_pins (void **state)
{
    rig_t *self = (rig_t *) *state;
    s_two_brokers (self);
    broker_t *a = &self->brokers [0], *b = &self->brokers [1];
    version_t one = { "one", 0 }, two_a = { "two", 0 }, two_b = { "two", 0 };
    s_greeter_start (a, "greeter-a", &one);
    assert_int_equal (dsh_testkit_wait_tools (a->at.front, "greet", 1, WAIT_MS), 0);
    json_t *pin = s_pin (a);
    assert_non_null (pin);
    char *pinned = strdup (s_str (pin, "digest"));
    json_decref (pin);

    //  B has read A's pin before anything offers greet to it
    pin = s_wait_pin (b, pinned);
    assert_false (json_is_true (json_object_get (pin, "registered")));
    assert_string_equal (s_str (pin, "component"), "greeter-a");
    json_decref (pin);

    //  Another definition at B only: quarantined there against A's pin
    s_subscribe (b);
    s_greeter_start (b, "greeter-b", &two_b);
    json_t *event = s_expect_event (b, DSH_EV_REGISTERED);
    char *offered = strdup (s_assert_quarantined (json_object_get (event, "tool"), "two", pinned));
    json_decref (event);
    json_decref (s_expect_event (b, DSH_EV_CHANGED));
    s_expect_quarantined (b, "coder", offered, pinned);

    //  Accepted at B: released at B (a call reaches the chain, which asks
    //  and has nobody to ask)
    char *output = s_cli_ok (b->at.front, (const char *[]) { "pins", "accept", "greet", "--digest", offered, NULL });
    zstr_free (&output);
    json_decref (s_expect_event (b, DSH_EV_ACCEPTED));
    event = s_expect_event (b, DSH_EV_UPDATED);
    s_assert_released (json_object_get (event, "tool"), "two");
    json_decref (event);
    s_expect_call (b, "coder", ASKS);
    assert_int_equal (atomic_load (&two_b.calls), 0);

    //  ... and at A, within about a poll: its old definition is the
    //  changed one now
    int64_t took_ms;
    json_t *entry = s_wait_quarantined (a, true, &took_ms);
    s_assert_quarantined (entry, "one", offered);
    json_decref (entry);
    print_message ("broker A quarantined its old greet %" PRId64 " ms after the accept at B\n", took_ms);
    s_expect_quarantined (a, "coder", pinned, offered);
    assert_int_equal (atomic_load (&one.calls), 0);

    //  A's component comes with what was accepted: released at A
    s_greeter_stop (a);
    s_greeter_start (a, "greeter-a", &two_a);
    entry = s_wait_quarantined (a, false, &took_ms);
    s_assert_released (entry, "two");
    json_decref (entry);
    zstr_free (&offered);
    zstr_free (&pinned);
}

//  (b) Two definitions seen at once, one at each broker: one pin holds at
//  both, and the other definition is quarantined where it is offered
static void
test_two_brokers_first_sight (void **state)
{
    rig_t *self = (rig_t *) *state;
    s_two_brokers (self);
    broker_t *a = &self->brokers [0], *b = &self->brokers [1];
    version_t one = { "one", 0 }, two = { "two", 0 };
    s_greeter_start (a, "greeter-a", &one);
    s_greeter_start (b, "greeter-b", &two);
    assert_int_equal (dsh_testkit_wait_tools (a->at.front, "greet", 1, WAIT_MS), 0);
    assert_int_equal (dsh_testkit_wait_tools (b->at.front, "greet", 1, WAIT_MS), 0);

    //  A change made at a broker stands for 2 s against the store: by the
    //  read applied again after it, both brokers hold the one pin the store
    //  kept
    int64_t give_up = zclock_mono () + SHARED_MS;
    json_t *pin_a = NULL, *pin_b = NULL;
    while (true) {
        json_decref (pin_a);
        json_decref (pin_b);
        pin_a = s_pin (a);
        pin_b = s_pin (b);
        if (streq (s_str (pin_a, "digest"), s_str (pin_b, "digest")))
            break;
        if (zclock_mono () > give_up)
            fail_msg ("after %d ms broker A has greet pinned to %.12s (its own \"one\") and B to %.12s (its own "
                      "\"two\"): each kept its first sight", SHARED_MS, s_str (pin_a, "digest"),
                      s_str (pin_b, "digest"));
        zclock_sleep (100);
    }
    //  The loser is quarantined where it is offered
    bool a_won = streq (s_str (pin_a, "component"), "greeter-a");
    broker_t *loser = a_won? b: a;
    int64_t took_ms;
    json_t *entry = s_wait_quarantined (loser, true, &took_ms);
    s_assert_quarantined (entry, a_won? "two": "one", s_str (pin_a, "digest"));
    json_decref (entry);
    entry = s_wait_quarantined (a_won? a: b, false, &took_ms);
    json_decref (entry);
    json_decref (pin_a);
    json_decref (pin_b);
}

//  (c) A grant given at A lets the same agent's call through at B, with
//  nobody to ask at B, within about the poll; nobody else's
static void
test_two_brokers_share_grants (void **state)
{
    rig_t *self = (rig_t *) *state;
    s_two_brokers (self);
    broker_t *a = &self->brokers [0], *b = &self->brokers [1];
    version_t one_a = { "one", 0 }, one_b = { "one", 0 };
    s_greeter_start (a, "greeter-a", &one_a);
    s_greeter_start (b, "greeter-b", &one_b);
    assert_int_equal (dsh_testkit_wait_tools (a->at.front, "greet", 1, WAIT_MS), 0);
    assert_int_equal (dsh_testkit_wait_tools (b->at.front, "greet", 1, WAIT_MS), 0);
    s_expect_call (b, "coder", ASKS);
    s_approver_start (a);
    char *grant = s_grant (a, "coder", "one");
    int64_t granted = zclock_mono ();
    char *text = NULL;
    while (true) {
        zstr_free (&text);
        text = s_call (b, "coder");
        if (streq (text, "one") || zclock_mono () - granted > SHARED_MS)
            break;
        if (!streq (text, ASKS))
            fail_msg ("coder's call at B: \"%s\"", text);
        zclock_sleep (50);
    }
    if (!streq (text, "one"))
        fail_msg ("coder's call at B is still \"%s\" %d ms after the grant at A", text, SHARED_MS);
    print_message ("broker B let coder through %" PRId64 " ms after the grant at A\n", zclock_mono () - granted);
    zstr_free (&text);
    assert_int_equal (atomic_load (&one_b.calls), 1);
    s_expect_call (b, "planner", ASKS);
    char *output = s_cli_ok (b->at.front, (const char *[]) { "grants", NULL });
    assert_non_null (strstr (output, grant));
    zstr_free (&output);
    zstr_free (&grant);
}

//  (d) A grant revoked at B ends at A too, within about the poll
static void
test_two_brokers_share_revoke (void **state)
{
    rig_t *self = (rig_t *) *state;
    s_two_brokers (self);
    broker_t *a = &self->brokers [0], *b = &self->brokers [1];
    version_t one_a = { "one", 0 }, one_b = { "one", 0 };
    s_greeter_start (a, "greeter-a", &one_a);
    s_greeter_start (b, "greeter-b", &one_b);
    assert_int_equal (dsh_testkit_wait_tools (a->at.front, "greet", 1, WAIT_MS), 0);
    assert_int_equal (dsh_testkit_wait_tools (b->at.front, "greet", 1, WAIT_MS), 0);
    s_approver_start (a);
    char *grant = s_grant (a, "coder", "one");
    //  A's approver leaves: A asks nobody, so only the grant lets coder on
    json_t *empty = json_object ();
    s_approver_send (a, "GOODBYE", empty);
    json_decref (empty);
    zsock_destroy (&a->approver);
    //  The GOODBYE and the call come on different sockets, so A may put
    //  the call to the approver before it hears the GOODBYE, and refuse it
    //  "(every approver went away before deciding)": call until A asks nobody
    int64_t gone_by = zclock_mono () + WAIT_MS;
    char *asked = s_call (a, "planner");
    while (!streq (asked, ASKS) && strstr (asked, "every approver went away") && zclock_mono () < gone_by) {
        zstr_free (&asked);
        zclock_sleep (50);
        asked = s_call (a, "planner");
    }
    if (!streq (asked, ASKS))
        fail_msg ("call greet as planner at A: \"%s\", expected \"%s\"", asked, ASKS);
    zstr_free (&asked);
    s_expect_call (a, "coder", "one");
    //  Once B has the grant, it is revoked there
    int64_t give_up = zclock_mono () + SHARED_MS;
    char *output = NULL;
    while (true) {
        zstr_free (&output);
        output = s_cli_ok (b->at.front, (const char *[]) { "grants", NULL });
        if (strstr (output, grant))
            break;
        if (zclock_mono () > give_up)
            fail_msg ("broker B does not list grant %s %d ms after A made it: %s", grant, SHARED_MS, output);
        zclock_sleep (50);
    }
    zstr_free (&output);
    output = s_cli_ok (b->at.front, (const char *[]) { "grants", "revoke", grant, NULL });
    zstr_free (&output);
    s_expect_call (b, "coder", ASKS);
    int64_t revoked = zclock_mono ();
    char *text = NULL;
    while (true) {
        zstr_free (&text);
        text = s_call (a, "coder");
        if (streq (text, ASKS) || zclock_mono () - revoked > SHARED_MS)
            break;
        zclock_sleep (50);
    }
    if (!streq (text, ASKS))
        fail_msg ("coder's call at A is still \"%s\" %d ms after the grant was revoked at B", text, SHARED_MS);
    print_message ("broker A ended the grant %" PRId64 " ms after the revoke at B\n", zclock_mono () - revoked);
    zstr_free (&text);
    zstr_free (&grant);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_pin_survives_restart, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_grant_survives_restart, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_two_brokers_share_pins, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_two_brokers_first_sight, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_two_brokers_share_grants, s_rig_setup, s_rig_teardown),
        cmocka_unit_test_setup_teardown (test_two_brokers_share_revoke, s_rig_setup, s_rig_teardown),
    };
    int failed = cmocka_run_group_tests (tests, NULL, NULL);
    if (failed == 0 && s_cases > 0 && s_skipped == s_cases)
        return 77;
    return failed;
}
