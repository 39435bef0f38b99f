/*  =========================================================================
    test_core - the core end to end: a real broker, real component
    processes, real sockets on loopback

    announce -> list -> call -> change events; kill -9 with a call in
    flight -> TOOL_GONE; a clean exit withdraws at once; replicas; a refused
    conflicting schema; a restarted broker relearns every tool; and the
    bad-input battery against every listening socket.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO "components/demo/dsh-demo"

typedef struct {
    dsh_testproc_t *broker;
    char endpoint [256];
    dsh_client_t *client;
} fixture_t;

static int
s_setup (void **state)
{
    fixture_t *fixture = (fixture_t *) zmalloc (sizeof (fixture_t));
    fixture->broker = dsh_testkit_broker (200, NULL, fixture->endpoint, sizeof (fixture->endpoint));
    assert_non_null (fixture->broker);
    fixture->client = dsh_client_new (fixture->endpoint);
    *state = fixture;
    return 0;
}

static int
s_teardown (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_client_destroy (&fixture->client);
    dsh_testproc_destroy (&fixture->broker);
    free (fixture);
    return 0;
}

//  A SUB on the broker's events, found by discovery, its subscription
//  live; *seq_p (if not NULL) is the seq of the last event before it.
static zsock_t *
s_subscribe (fixture_t *fixture, uint64_t *seq_p)
{
    zsock_t *sub = dsh_testkit_events (fixture->endpoint, "", seq_p, 10000);
    assert_non_null (sub);
    return sub;
}

//  The next event's kind and body as JSON, or NULL after timeout_ms.
static json_t *
s_next_event (zsock_t *sub, int timeout_ms)
{
    zpoller_t *poller = zpoller_new (sub, NULL);
    json_t *event = NULL;
    if (zpoller_wait (poller, timeout_ms) == sub) {
        zmsg_t *msg = zmsg_recv (sub);
        char *kind = zmsg_popstr (msg);
        zframe_t *body = zmsg_pop (msg);
        char error [128];
        dsh_doc_t *doc = dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error));
        assert_non_null (doc);
        event = dsh_json_from_msgpack (dsh_doc_root (doc));
        assert_string_equal (kind, json_string_value (json_object_get (event, "kind")));
        dsh_doc_destroy (&doc);
        zframe_destroy (&body);
        zstr_free (&kind);
        zmsg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    return event;
}

static dsh_reply_t *
s_call (dsh_client_t *client, const char *name, const char *args)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, name, args, NULL, 10000, error, sizeof (error));
    if (!reply)
        fail_msg ("call %s: %s", name, error);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    return reply;
}

static void
test_announce_list_call_events (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    //  Events: numbered without gaps from the last one before ours
    uint64_t last_seq = 0;
    zsock_t *sub = s_subscribe (fixture, &last_seq);
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, fixture->endpoint, "demo-a", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);

    //  Events: four registrations and the join, numbered without gaps
    const char *expected [] = { "echo", "sleep_ms", "tick", "count", "fail", "sample_content" };
    size_t registered = 0;
    bool joined = false;
    for (int count = 0; count < DSH_TESTKIT_DEMO_TOOLS + 1; count++) {
        json_t *event = s_next_event (sub, 5000);
        assert_non_null (event);
        uint64_t seq = (uint64_t) json_integer_value (json_object_get (event, "seq"));
        assert_int_equal (seq, last_seq + 1);
        last_seq = seq;
        const char *kind = json_string_value (json_object_get (event, "kind"));
        assert_string_equal (json_string_value (json_object_get (event, "component")), "demo-a");
        if (streq (kind, DSH_EV_REGISTERED)) {
            assert_string_equal (json_string_value (json_object_get (event, "name")), expected [registered]);
            json_t *tool = json_object_get (event, "tool");
            assert_string_equal (json_string_value (json_object_get (tool, "name")), expected [registered]);
            assert_string_equal (json_string_value (json_object_get (json_object_get (tool, "parameters"), "type")),
                                 "object");
            registered++;
        }
        else {
            assert_string_equal (kind, DSH_EV_JOINED);
            assert_int_equal (json_array_size (json_object_get (event, "tools")), DSH_TESTKIT_DEMO_TOOLS);
            joined = true;
        }
        json_decref (event);
    }
    assert_int_equal (registered, DSH_TESTKIT_DEMO_TOOLS);
    assert_true (joined);

    //  List: registration order, schemas only
    char error [256];
    dsh_reply_t *reply = dsh_client_request (fixture->client, DSH_LIST, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    json_t *tools = json_object_get (body, "tools");
    assert_int_equal (json_array_size (tools), DSH_TESTKIT_DEMO_TOOLS);
    for (size_t index = 0; index < DSH_TESTKIT_DEMO_TOOLS; index++)
        assert_string_equal (json_string_value (json_object_get (json_array_get (tools, index), "name")),
                             expected [index]);
    assert_int_equal (json_integer_value (json_object_get (body, "seq")), (json_int_t) last_seq);
    json_decref (body);
    dsh_reply_destroy (&reply);

    //  Get one, with its provider
    reply = dsh_client_request (fixture->client, DSH_GET, "sleep_ms", 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_TOOL);
    body = dsh_reply_json (reply);
    assert_string_equal (json_string_value (json_array_get (json_object_get (body, "providers"), 0)), "demo-a");
    assert_true (json_is_true (json_object_get (json_object_get (json_object_get (body, "tool"), "annotations"),
                                                "readOnlyHint")));
    json_decref (body);
    dsh_reply_destroy (&reply);
    reply = dsh_client_request (fixture->client, DSH_GET, "nope", 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_ERROR);
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_UNKNOWN_TOOL);
    dsh_reply_destroy (&reply);

    //  Calls: success, validation, unknown tool, failing handler
    reply = s_call (fixture->client, "echo", "{\"message\":\"hello, swarm\"}");
    assert_false (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "hello, swarm");
    dsh_reply_destroy (&reply);

    reply = s_call (fixture->client, "echo", "{\"message\": 42, \"extra\": true}");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_INVALID_ARGS);
    assert_string_equal (dsh_reply_text (reply), "Error: invalid arguments: \"message\" must be a string");
    body = dsh_reply_json (reply);
    assert_string_equal (json_string_value (json_object_get (json_object_get (body, "error"), "name")),
                         "ToolArgsError");
    json_decref (body);
    dsh_reply_destroy (&reply);

    reply = s_call (fixture->client, "nope", "{}");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_UNKNOWN_TOOL);
    assert_string_equal (dsh_reply_text (reply), "Error: unknown tool \"nope\"");
    dsh_reply_destroy (&reply);

    reply = s_call (fixture->client, "fail", "{\"message\":\"disk on fire\"}");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_text (reply), "Error: disk on fire");
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TOOL_FAILED);
    dsh_reply_destroy (&reply);

    //  Every MCP content kind survives the trip, bytes intact
    reply = s_call (fixture->client, "sample_content", "{}");
    assert_false (dsh_reply_is_error (reply));
    body = dsh_reply_json (reply);
    json_t *content = json_object_get (body, "content");
    const char *kinds [] = { "text", "image", "audio", "resource_link", "resource", "resource" };
    assert_int_equal (json_array_size (content), 6);
    for (size_t index = 0; index < 6; index++)
        assert_string_equal (json_string_value (json_object_get (json_array_get (content, index), "type")),
                             kinds [index]);
    json_t *image = json_array_get (content, 1);
    assert_string_equal (json_string_value (json_object_get (image, "mimeType")), "image/png");
    zarmour_t *armour = zarmour_new ();
    zchunk_t *png = zarmour_decode (armour, json_string_value (json_object_get (image, "data")));
    assert_non_null (png);
    assert_memory_equal (zchunk_data (png), "\x89PNG\r\n\x1a\n", 8);
    zchunk_destroy (&png);
    zarmour_destroy (&armour);
    assert_string_equal (json_string_value (json_object_get (json_object_get (json_array_get (content, 4),
                                                                              "resource"), "text")),
                         "embedded sample text");
    assert_non_null (json_object_get (json_object_get (json_array_get (content, 5), "resource"), "blob"));
    assert_true (json_is_true (json_object_get (json_object_get (body, "structuredContent"), "ok")));
    json_decref (body);
    dsh_reply_destroy (&reply);

    //  The component goes: its tools go, and watchers hear it
    dsh_testproc_signal (demo, SIGTERM);
    assert_int_equal (dsh_testproc_wait (demo, 5000), 0);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", 0, 5000), 0);
    size_t unregistered = 0;
    json_t *event;
    while ((event = s_next_event (sub, 2000))) {
        uint64_t seq = (uint64_t) json_integer_value (json_object_get (event, "seq"));
        assert_int_equal (seq, ++last_seq);
        const char *kind = json_string_value (json_object_get (event, "kind"));
        bool left = streq (kind, DSH_EV_LEFT);
        if (streq (kind, DSH_EV_UNREGISTERED))
            unregistered++;
        else {
            assert_true (left);
            assert_string_equal (json_string_value (json_object_get (event, "reason")), "withdrawn");
        }
        json_decref (event);
        if (unregistered == DSH_TESTKIT_DEMO_TOOLS && left)
            break;
    }
    assert_int_equal (unregistered, DSH_TESTKIT_DEMO_TOOLS);
    dsh_testproc_destroy (&demo);
    zsock_destroy (&sub);
}

static void
test_kill_with_call_in_flight (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, fixture->endpoint, "doomed", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "sleep_ms", 1, 5000), 0);
    zsock_t *sub = s_subscribe (fixture, NULL);

    msgpack_sbuffer args;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack ("{\"ms\": 30000}", &args, error, sizeof (error)), 0);
    const char *sent = dsh_client_call_send (fixture->client, "slow-1", "sleep_ms", args.data, args.size,
                                             NULL, NULL, 0, 60000);
    msgpack_sbuffer_destroy (&args);
    assert_non_null (sent);
    //  The call is at the component, in its handler
    assert_int_equal (dsh_testkit_wait_in_flight (fixture->endpoint, "doomed", 1, 10000), 0);
    dsh_testproc_signal (demo, SIGKILL);

    //  Expiry is 3 x 200 ms; the answer must come long before the call's own deadline
    dsh_reply_t *reply = dsh_client_recv (fixture->client, 10000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_call_id (reply), "slow-1");
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_TOOL_GONE);
    assert_non_null (strstr (dsh_reply_text (reply), "\"doomed\" expired"));
    dsh_reply_destroy (&reply);
    //  Exactly one reply
    assert_null (dsh_client_recv (fixture->client, 500));

    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "", 0, 5000), 0);
    bool left = false;
    json_t *event;
    while (!left && (event = s_next_event (sub, 5000))) {
        if (streq (json_string_value (json_object_get (event, "kind")), DSH_EV_LEFT)) {
            assert_string_equal (json_string_value (json_object_get (event, "reason")), "expired");
            left = true;
        }
        json_decref (event);
    }
    assert_true (left);
    zsock_destroy (&sub);
    dsh_testproc_destroy (&demo);
}

static int
s_other_echo (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "imposter");
    return 0;
}

//  Waits until tool name has providers providers; fails at 10 s.
static void
s_wait_providers (fixture_t *fixture, const char *name, size_t providers)
{
    char error [256];
    int64_t give_up = zclock_mono () + 10000;
    size_t have = 0;
    while (have != providers && zclock_mono () < give_up) {
        dsh_reply_t *reply = dsh_client_request (fixture->client, DSH_GET, name, 1000, error, sizeof (error));
        if (reply && streq (dsh_reply_command (reply), DSH_TOOL))
            have = dsh_map_get (dsh_reply_body (reply), "providers")->via.array.size;
        dsh_reply_destroy (&reply);
        if (have != providers)
            zclock_sleep (50);      //  the poll's interval
    }
    assert_int_equal (have, providers);
}

static void
test_replicas_and_conflicts (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_testproc_t *first = dsh_testkit_component (DEMO, fixture->endpoint, "replica-1", NULL);
    dsh_testproc_t *second = dsh_testkit_component (DEMO, fixture->endpoint, "replica-2", NULL);
    assert_non_null (first);
    assert_non_null (second);

    //  Same name, same schema: both provide it
    s_wait_providers (fixture, "echo", 2);

    //  Same name, another schema: refused, the owners keep it, and the
    //  refused component is told why
    dsh_provider_t *imposter = dsh_provider_new (fixture->endpoint, "imposter", 1);
    assert_int_equal (dsh_provider_add_raw (imposter,
        "{\"name\":\"echo\",\"description\":\"not the same\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{}}}", s_other_echo, NULL), 0);
    dsh_provider_start (imposter);
    char *refusal = dsh_provider_refusal (imposter, 5000);
    assert_non_null (refusal);
    //  Whichever replica announced first owns the name
    if (!streq (refusal, "echo: tool \"echo\" is already registered by component \"replica-1\" with a different schema"))
        assert_string_equal (refusal,
            "echo: tool \"echo\" is already registered by component \"replica-2\" with a different schema");
    zstr_free (&refusal);
    dsh_reply_t *reply = s_call (fixture->client, "echo", "{\"message\":\"still mine\"}");
    assert_string_equal (dsh_reply_text (reply), "still mine");
    dsh_reply_destroy (&reply);
    dsh_provider_destroy (&imposter);

    //  One replica dies; once it expires the other serves every call
    dsh_testproc_signal (first, SIGKILL);
    s_wait_providers (fixture, "echo", 1);
    for (int count = 0; count < 20; count++) {
        reply = s_call (fixture->client, "echo", "{\"message\":\"survivor\"}");
        assert_false (dsh_reply_is_error (reply));
        dsh_reply_destroy (&reply);
    }
    dsh_testproc_destroy (&first);
    dsh_testproc_destroy (&second);
}

static void
test_refused_name_freed (void **state)
{
    fixture_t *fixture = (fixture_t *) *state;
    dsh_testproc_t *owner = dsh_testkit_component (DEMO, fixture->endpoint, "owner", NULL);
    assert_int_equal (dsh_testkit_wait_tools (fixture->endpoint, "echo", 1, 5000), 0);
    dsh_provider_t *waiting = dsh_provider_new (fixture->endpoint, "waiting", 1);
    assert_int_equal (dsh_provider_add_raw (waiting,
        "{\"name\":\"echo\",\"parameters\":{\"type\":\"object\"}}", s_other_echo, NULL), 0);
    dsh_provider_start (waiting);
    char *refusal = dsh_provider_refusal (waiting, 5000);
    assert_non_null (refusal);
    zstr_free (&refusal);

    //  The owner leaves cleanly: the name is free, and the component that
    //  was refused it is asked to announce again and gets it. Its entry
    //  is not the one pinned to the name (pins = tofu): it is quarantined
    //  until an admin accepts it, and then it serves
    dsh_testproc_signal (owner, SIGTERM);
    assert_int_equal (dsh_testproc_wait (owner, 5000), 0);
    char *text = NULL;
    int64_t give_up = zclock_mono () + 5000;
    while (zclock_mono () < give_up) {
        dsh_reply_t *reply = s_call (fixture->client, "echo", "{\"message\":\"x\"}");
        zstr_free (&text);
        text = dsh_reply_text (reply)? strdup (dsh_reply_text (reply)): NULL;
        dsh_reply_destroy (&reply);
        if (text && strstr (text, "is quarantined"))
            break;
        zclock_sleep (50);
    }
    assert_non_null (strstr (text, "Error: tool \"echo\" is quarantined: its definition changed since it was pinned"));
    zstr_free (&text);
    const char *accept [] = { "pins", "accept", "echo", NULL };
    char *output = NULL;
    assert_int_equal (dsh_testkit_cli (fixture->endpoint, accept, 10000, &output), 0);
    zstr_free (&output);
    dsh_reply_t *reply = s_call (fixture->client, "echo", "{\"message\":\"x\"}");
    assert_string_equal (dsh_reply_text (reply), "imposter");
    dsh_reply_destroy (&reply);
    dsh_provider_destroy (&waiting);
    dsh_testproc_destroy (&owner);
}

//  Finds a loopback port p such that p..p+3 are free (front and derived).
static int
s_free_ports (void)
{
    return dsh_testkit_free_ports (4);
}

static void
test_broker_restart_relearns (void **state)
{
    (void) state;
    int port = s_free_ports ();
    assert_true (port > 0);
    char endpoint [64];
    snprintf (endpoint, sizeof (endpoint), "tcp://127.0.0.1:%d", port);
    const char *argv [] = { "broker/dsh-broker", "--endpoint", endpoint, "--heartbeat-ms", "300", NULL };
    dsh_testproc_t *broker = dsh_testproc_start (argv);
    free (dsh_testproc_wait_line (broker, "listening on", 5000));
    dsh_testproc_t *demo = dsh_testkit_component (DEMO, endpoint, "steady", NULL);
    dsh_testproc_t *other = dsh_testkit_component (DEMO, endpoint, "steady-b",
                                                   (const char *[]) { "--prefix", "b_", NULL });
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "", 2 * DSH_TESTKIT_DEMO_TOOLS, 5000), 0);

    dsh_testproc_signal (broker, SIGKILL);
    dsh_testproc_wait (broker, 5000);
    dsh_testproc_destroy (&broker);
    broker = dsh_testproc_start (argv);
    char *line = dsh_testproc_wait_line (broker, "listening on", 5000);
    assert_non_null (line);
    free (line);
    int64_t restarted = zclock_mono ();
    //  Every live tool is listed again without touching the components;
    //  the protocol promises two heartbeat intervals, the test allows for
    //  a loaded machine
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "", 2 * DSH_TESTKIT_DEMO_TOOLS, 10000), 0);
    printf ("      broker restart: all %d tools listed again after %" PRId64 " ms (heartbeat 300 ms)\n",
            2 * DSH_TESTKIT_DEMO_TOOLS, zclock_mono () - restarted);
    dsh_client_t *client = dsh_client_new (endpoint);
    dsh_reply_t *reply = s_call (client, "b_echo", "{\"message\":\"back\"}");
    assert_string_equal (dsh_reply_text (reply), "back");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&other);
    dsh_testproc_destroy (&broker);
}

int
main (void)
{
    zsys_init ();
    srandom ((unsigned) (zclock_usecs () ^ (int64_t) getpid ()));
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_announce_list_call_events, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_kill_with_call_in_flight, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_replicas_and_conflicts, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_refused_name_freed, s_setup, s_teardown),
        cmocka_unit_test (test_broker_restart_relearns),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
