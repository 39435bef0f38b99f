/*  =========================================================================
    test_link - dsh_link: following a broker, on a fake clock

    Runs every case of tests/conformance/link_cases.json (the path is the
    first argument), the cases the Python and Node copies of the table also
    pass, one cmocka test per case; then the checks only C needs, and the
    client's own CONTROL rule against fake brokers (ROUTERs on loopback in
    this process).
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <jansson.h>
#include "dsh_link.h"
#include "dsh_client.h"
#include "dsh_doc.h"
#include "dsh_proto.h"

static dsh_link_profile_t
s_profile (const char *name)
{
    if (streq (name, "client"))
        return DSH_LINK_CLIENT;
    if (streq (name, "component"))
        return DSH_LINK_COMPONENT;
    assert_string_equal (name, "watcher");
    return DSH_LINK_WATCHER;
}

static int
s_int (json_t *step, const char *key)
{
    json_t *value = json_object_get (step, key);
    return json_is_integer (value)? (int) json_integer_value (value): 0;
}

//  Applies a step's input to the link at its time.
static void
s_apply (dsh_link_t *link, json_t *step, int64_t now, int64_t *next_tick)
{
    const char *input = json_string_value (json_object_get (step, "input"));
    const char *instance = json_string_value (json_object_get (step, "instance"));
    assert_non_null (input);
    if (streq (input, "start"))
        dsh_link_start (link, now);
    else
    if (streq (input, "connected"))
        dsh_link_connected (link, now);
    else
    if (streq (input, "heard"))
        dsh_link_heard (link, now);
    else
    if (streq (input, "welcome"))
        dsh_link_welcome (link, now, instance, s_int (step, "heartbeatMs"), s_int (step, "liveness"));
    else
    if (streq (input, "pong"))
        dsh_link_pong (link, now, instance, s_int (step, "heartbeatMs"), s_int (step, "liveness"));
    else
    if (streq (input, "watch"))
        dsh_link_watch (link, now, json_is_true (json_object_get (step, "on")));
    else
    if (streq (input, "move"))
        dsh_link_move (link, now);
    else
    if (streq (input, "tick"))
        *next_tick = dsh_link_tick (link, now);
    else
        fail_msg ("unknown input \"%s\"", input);
}

//  The events the link made must be those the step names, in order: each
//  field the case names must match.
static void
s_check_events (dsh_link_t *link, json_t *expected, const char *where)
{
    size_t index = 0;
    dsh_link_event_t event;
    while (dsh_link_next (link, &event) == 0) {
        json_t *want = json_array_get (expected, index++);
        if (!want)
            fail_msg ("%s: unexpected event %s", where, dsh_link_event_name (event.type));
        const char *type = json_string_value (json_object_get (want, "type"));
        if (!streq (type, dsh_link_event_name (event.type)))
            fail_msg ("%s: event %zu is %s, not %s", where, index, dsh_link_event_name (event.type), type);
        json_t *endpoint = json_object_get (want, "endpoint");
        if (endpoint)
            assert_string_equal (event.endpoint, json_string_value (endpoint));
        json_t *reached = json_object_get (want, "reached");
        if (reached && json_is_true (reached) != event.reached)
            fail_msg ("%s: %s reached is %d", where, type, event.reached);
        json_t *silence = json_object_get (want, "silenceMs");
        if (silence && json_integer_value (silence) != event.silence_ms)
            fail_msg ("%s: %s silenceMs is %" PRId64 ", not %" PRId64, where, type, event.silence_ms,
                      (int64_t) json_integer_value (silence));
        json_t *instance = json_object_get (want, "instance");
        if (instance)
            assert_string_equal (event.instance, json_string_value (instance));
        json_t *was = json_object_get (want, "was");
        if (was)
            assert_string_equal (event.was, json_string_value (was));
    }
    if (index != json_array_size (expected))
        fail_msg ("%s: %zu events, not %zu", where, index, json_array_size (expected));
}

//  The state the step says the link is then in.
static void
s_check_after (dsh_link_t *link, json_t *after, const char *where)
{
    const char *key;
    json_t *value;
    json_object_foreach (after, key, value) {
        if (streq (key, "state")) {
            if (!streq (dsh_link_state_name (dsh_link_state (link)), json_string_value (value)))
                fail_msg ("%s: state %s, not %s", where, dsh_link_state_name (dsh_link_state (link)),
                          json_string_value (value));
        }
        else
        if (streq (key, "reached"))
            assert_int_equal (dsh_link_reached (link), json_is_true (value));
        else
        if (streq (key, "endpoint"))
            assert_string_equal (dsh_link_endpoint (link), json_string_value (value));
        else
        if (streq (key, "heartbeatMs"))
            assert_int_equal (dsh_link_heartbeat_ms (link), json_integer_value (value));
        else
        if (streq (key, "liveness"))
            assert_int_equal (dsh_link_liveness (link), json_integer_value (value));
        else
        if (streq (key, "instance")) {
            if (json_is_null (value))
                assert_null (dsh_link_instance (link));
            else
                assert_string_equal (dsh_link_instance (link), json_string_value (value));
        }
        else
            fail_msg ("%s: unknown after key \"%s\"", where, key);
    }
}

static void
test_case (void **state)
{
    json_t *test = (json_t *) *state;
    const char *name = json_string_value (json_object_get (test, "name"));
    dsh_link_t *link = dsh_link_new (s_profile (json_string_value (json_object_get (test, "profile"))));
    size_t index;
    json_t *value;
    json_array_foreach (json_object_get (test, "brokers"), index, value)
        dsh_link_add (link, json_string_value (value));
    json_array_foreach (json_object_get (test, "steps"), index, value) {
        char where [200];
        snprintf (where, sizeof (where), "%s, step %zu (%s at %" JSON_INTEGER_FORMAT ")", name, index + 1,
                  json_string_value (json_object_get (value, "input")),
                  json_integer_value (json_object_get (value, "at")));
        int64_t next_tick = 0;
        s_apply (link, value, json_integer_value (json_object_get (value, "at")), &next_tick);
        s_check_events (link, json_object_get (value, "events"), where);
        json_t *want = json_object_get (value, "nextTick");
        if (want) {
            int64_t expected = json_is_null (want)? INT64_MAX: json_integer_value (want);
            if (next_tick != expected)
                fail_msg ("%s: next tick %" PRId64 ", not %" PRId64, where, next_tick, expected);
        }
        s_check_after (link, json_object_get (value, "after"), where);
    }
    dsh_link_destroy (&link);
}

//  C only: destroy nulls and is safe twice; no events, no tick, before start.
static void
test_lifecycle (void **state)
{
    (void) state;
    dsh_link_t *link = dsh_link_new (DSH_LINK_CLIENT);
    dsh_link_event_t event;
    assert_int_equal (dsh_link_next (link, &event), -1);
    assert_null (dsh_link_endpoint (link));
    assert_true (dsh_link_tick (link, 0) == INT64_MAX);
    dsh_link_add (link, "tcp://a:1");
    assert_int_equal (dsh_link_size (link), 1);
    dsh_link_start (link, 0);
    assert_int_equal (dsh_link_next (link, &event), 0);
    assert_int_equal (event.type, DSH_LINK_CONNECT);
    assert_string_equal (event.endpoint, "tcp://a:1");
    assert_int_equal (dsh_link_next (link, &event), -1);
    dsh_link_destroy (&link);
    assert_null (link);
    dsh_link_destroy (&link);
}

//  C only: an instance id longer than an event holds is compared whole.
static void
test_long_instance (void **state)
{
    (void) state;
    char first [200], second [200];
    memset (first, 'a', sizeof (first) - 1);
    first [sizeof (first) - 1] = 0;
    memcpy (second, first, sizeof (second));
    second [150] = 'b';
    dsh_link_t *link = dsh_link_new (DSH_LINK_CLIENT);
    dsh_link_add (link, "tcp://a:1");
    dsh_link_start (link, 0);
    dsh_link_pong (link, 1, first, 0, 0);
    dsh_link_pong (link, 2, second, 0, 0);
    dsh_link_event_t event;
    bool restarted = false;
    while (dsh_link_next (link, &event) == 0)
        restarted |= event.type == DSH_LINK_RESTARTED;
    assert_true (restarted);
    dsh_link_destroy (&link);
}

//  A fake broker: a ROUTER that answers PING with PONG (heartbeat 100 ms,
//  liveness 2) and CONTROL with {ok: true}, and counts the CONTROLs it
//  got; a "swallow" one falls silent for good at its first CONTROL. Pipe:
//  "COUNT" -> the number of CONTROLs, as a string.
typedef struct {
    bool swallow;
    char endpoint [64];
} s_fake_t;

static void
s_fake_reply (zsock_t *router, zframe_t *identity, const char *command, const char *id, bool pong)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    if (id)
        dsh_packer_kv_str (&packer, "id", id);
    if (pong) {
        dsh_packer_kv_str (&packer, "broker", "fake-instance");
        dsh_pack_cstr (&packer.pk, "heartbeatMs");
        msgpack_pack_int (&packer.pk, 100);
        dsh_pack_cstr (&packer.pk, "liveness");
        msgpack_pack_int (&packer.pk, 2);
    }
    else {
        dsh_pack_cstr (&packer.pk, "ok");
        msgpack_pack_true (&packer.pk);
    }
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = zmsg_new ();
    zmsg_append (msg, &identity);
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    zmsg_append (msg, &body);
    zmsg_send (&msg, router);
}

static void
s_fake_actor (zsock_t *pipe, void *args)
{
    s_fake_t *fake = (s_fake_t *) args;
    zsock_t *router = zsock_new_router ("tcp://127.0.0.1:*");
    assert (router);
    snprintf (fake->endpoint, sizeof (fake->endpoint), "%s", zsock_endpoint (router));
    zsock_signal (pipe, 0);
    size_t controls = 0;
    bool silent = false;
    zpoller_t *poller = zpoller_new (pipe, router, NULL);
    while (true) {
        zsock_t *which = (zsock_t *) zpoller_wait (poller, 1000);
        if (which == pipe) {
            char *command = zstr_recv (pipe);
            bool term = !command || streq (command, "$TERM");
            if (!term)
                zstr_sendf (pipe, "%zu", controls);
            zstr_free (&command);
            if (term)
                break;
        }
        else
        if (which == router) {
            zmsg_t *msg = zmsg_recv (router);
            zframe_t *identity = zmsg_pop (msg);
            zframe_t *empty = zmsg_pop (msg);
            char *protocol = zmsg_popstr (msg);
            char *command = zmsg_popstr (msg);
            zframe_t *body = zmsg_pop (msg);
            char error [256];
            dsh_doc_t *doc = body? dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error)): NULL;
            const char *id = doc? dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "id")): NULL;
            if (command && streq (command, DSH_CONTROL)) {
                controls++;
                silent = silent || fake->swallow;
            }
            if (!silent && command && (streq (command, DSH_PING) || streq (command, DSH_CONTROL))) {
                bool pong = streq (command, DSH_PING);
                s_fake_reply (router, identity, pong? DSH_PONG: DSH_CONTROL, id, pong);
                identity = NULL;
            }
            dsh_doc_destroy (&doc);
            zframe_destroy (&identity);
            zframe_destroy (&empty);
            zframe_destroy (&body);
            zstr_free (&protocol);
            zstr_free (&command);
            zmsg_destroy (&msg);
        }
    }
    zpoller_destroy (&poller);
    zsock_destroy (&router);
}

static size_t
s_fake_controls (zactor_t *fake)
{
    zstr_send (fake, "COUNT");
    char *count = zstr_recv (fake);
    size_t value = count? (size_t) atoi (count): 0;
    zstr_free (&count);
    return value;
}

static dsh_reply_t *
s_mode (dsh_client_t *client)
{
    char error [256];
    json_t *args = json_pack ("{s:s, s:s}", "agent", "a", "mode", "plan");
    dsh_reply_t *reply = dsh_client_control (client, "plan", "mode", args, 10000, error, sizeof (error));
    json_decref (args);
    return reply;
}

//  A CONTROL in flight when a broker that was reached goes silent is not
//  sent on (it may have applied there): the client answers it ERROR
//  BROKER_GONE, and the next broker never sees it.
static void
test_control_not_sent_again (void **state)
{
    (void) state;
    s_fake_t first = { true, "" }, second = { false, "" };
    zactor_t *swallow = zactor_new (s_fake_actor, &first);
    zactor_t *spare = zactor_new (s_fake_actor, &second);
    char brokers [160];
    snprintf (brokers, sizeof (brokers), "%s,%s", first.endpoint, second.endpoint);
    dsh_client_t *client = dsh_client_new (brokers);
    assert_non_null (client);
    dsh_reply_t *reply = s_mode (client);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_ERROR);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), DSH_E_BROKER_GONE);
    char text [256];
    snprintf (text, sizeof (text), "Error: the broker at %s was lost with the CONTROL in flight; "
              "it may or may not have been applied", first.endpoint);
    assert_string_equal (dsh_reply_text (reply), text);
    dsh_reply_destroy (&reply);
    assert_int_equal (s_fake_controls (swallow), 1);
    assert_int_equal (s_fake_controls (spare), 0);
    dsh_client_destroy (&client);
    zactor_destroy (&swallow);
    zactor_destroy (&spare);
}

//  One sent to a broker never reached cannot have applied: it goes on.
static void
test_control_never_reached_goes_on (void **state)
{
    (void) state;
    //  A port held bound but not listening: a connect to it is refused,
    //  and nothing else can take it meanwhile (a ROUTER closed for the
    //  purpose still accepts for a moment, in libzmq's I/O thread)
    int held = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (held >= 0);
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = 0 };
    address.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    assert_int_equal (bind (held, (struct sockaddr *) &address, sizeof (address)), 0);
    socklen_t length = sizeof (address);
    assert_int_equal (getsockname (held, (struct sockaddr *) &address, &length), 0);
    char nobody [64];
    snprintf (nobody, sizeof (nobody), "tcp://127.0.0.1:%u", ntohs (address.sin_port));
    s_fake_t second = { false, "" };
    zactor_t *spare = zactor_new (s_fake_actor, &second);
    char brokers [160];
    snprintf (brokers, sizeof (brokers), "%s,%s", nobody, second.endpoint);
    dsh_client_t *client = dsh_client_new (brokers);
    assert_non_null (client);
    dsh_reply_t *reply = s_mode (client);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_CONTROL);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);
    assert_int_equal (s_fake_controls (spare), 1);
    dsh_client_destroy (&client);
    zactor_destroy (&spare);
    close (held);
}

int
main (int argc, char *argv [])
{
    assert_true (argc > 1);
    json_error_t error;
    json_t *file = json_load_file (argv [1], 0, &error);
    if (!file) {
        fprintf (stderr, "test_link: %s: %s (line %d)\n", argv [1], error.text, error.line);
        return 1;
    }
    json_t *cases = json_object_get (file, "cases");
    size_t count = json_array_size (cases);
    struct CMUnitTest *tests = (struct CMUnitTest *) calloc (count + 4, sizeof (struct CMUnitTest));
    assert (tests);
    for (size_t index = 0; index < count; index++) {
        json_t *test = json_array_get (cases, index);
        tests [index].name = json_string_value (json_object_get (test, "name"));
        tests [index].test_func = test_case;
        tests [index].initial_state = test;
    }
    tests [count].name = "lifecycle";
    tests [count].test_func = test_lifecycle;
    tests [count + 1].name = "long_instance";
    tests [count + 1].test_func = test_long_instance;
    tests [count + 2].name = "control_not_sent_again";
    tests [count + 2].test_func = test_control_not_sent_again;
    tests [count + 3].name = "control_never_reached_goes_on";
    tests [count + 3].test_func = test_control_never_reached_goes_on;
    int failed = _cmocka_run_group_tests ("link", tests, count + 4, NULL, NULL);
    free (tests);
    json_decref (file);
    return failed;
}
