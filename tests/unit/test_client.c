/*  =========================================================================
    test_client - dsh_client against fake brokers on loopback

    Each fake broker (fake_broker.h) is a ROUTER that answers as
    PROTOCOL.md says a broker's FRONT does, so the client is checked alone,
    through its public API: a PING and a HELLO answered; a call sent with
    its name, arguments, agent and deadline and answered; a call nobody
    answers, answered TIMEOUT by the client itself after its deadline plus
    5 s; a list of two brokers where the first falls silent with a call in
    flight (the call is answered BROKER_GONE, and the client moves to the
    second); a broker whose PONG names a new instance (a restart: the call
    in flight is answered BROKER_GONE); and a cancel, answered CANCELLED
    once, also when the call's result races it.

    Every wait has a timeout, so a broken client fails instead of hanging.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_client.h"
#include "fake_broker.h"

//  The client's own answer to a call nobody answers comes 5 s after its
//  deadline (dsh_client.h)
#define CLIENT_TIMEOUT_GRACE_MS 5000

//  The first RESULT for call_id within timeout_ms (other replies are
//  dropped), or NULL.
static dsh_reply_t *
s_wait_result (dsh_client_t *client, const char *call_id, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    while (zclock_mono () < give_up) {
        dsh_reply_t *reply = dsh_client_recv (client, 100);
        if (reply && streq (dsh_reply_command (reply), "RESULT") && dsh_reply_call_id (reply)
        &&  streq (dsh_reply_call_id (reply), call_id))
            return reply;
        dsh_reply_destroy (&reply);
    }
    return NULL;
}

//  The broker id of a PONG from the client's broker, asked now.
static char *
s_ping_broker (dsh_client_t *client)
{
    char error [256] = "";
    dsh_reply_t *reply = dsh_client_request (client, "PING", NULL, FAKE_WAIT_MS, error, sizeof (error));
    if (!reply)
        print_error ("no PONG: %s\n", error);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), "PONG");
    json_t *body = dsh_reply_json (reply);
    assert_non_null (body);
    char *broker = strdup (json_string_value (json_object_get (body, "broker")));
    json_decref (body);
    dsh_reply_destroy (&reply);
    return broker;
}

//  Sends a call that the broker holds, and waits until the broker has it.
static char *
s_send_held_call (dsh_client_t *client, fake_broker_t *broker, const char *tool, int timeout_ms)
{
    int calls = fake_broker_count (broker, "CALL");
    fake_broker_tell (broker, "CALLS", "hold", NULL, NULL);
    const char *sent = dsh_client_call_send (client, NULL, tool, NULL, 0, NULL, NULL, 0, timeout_ms);
    assert_non_null (sent);
    char *call_id = strdup (sent);
    //  The client awaits the call: its watch runs in recv
    int64_t give_up = zclock_mono () + FAKE_WAIT_MS;
    while (fake_broker_count (broker, "CALL") <= calls && zclock_mono () < give_up) {
        dsh_reply_t *stray = dsh_client_recv (client, 20);
        assert_null (stray);
    }
    assert_int_equal (fake_broker_count (broker, "CALL"), calls + 1);
    return call_id;
}

static void
test_ping_and_hello (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    dsh_client_t *client = dsh_client_new (broker->front);
    assert_non_null (client);
    assert_string_equal (dsh_client_endpoint (client), broker->front);

    char *instance = s_ping_broker (client);
    assert_string_equal (instance, "instance-one");
    free (instance);
    assert_true (dsh_client_connected (client));
    assert_null (dsh_client_handshake_failure (client));

    char error [256] = "";
    dsh_reply_t *reply = dsh_client_request (client, "HELLO", NULL, FAKE_WAIT_MS, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), "WELCOME");
    json_t *welcome = dsh_reply_json (reply);
    assert_int_equal (json_integer_value (json_object_get (welcome, "protocol")), 1);
    assert_string_equal (json_string_value (json_object_get (welcome, "broker")), "instance-one");
    //  The request's id is the client's: it is not handed on as news
    json_decref (welcome);
    dsh_reply_destroy (&reply);
    assert_int_equal (fake_broker_count (broker, "HELLO"), 1);

    dsh_client_destroy (&client);
    dsh_client_destroy (&client);
    fake_broker_destroy (&broker);
}

static void
test_call_answered (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    dsh_client_t *client = dsh_client_new (broker->front);
    char error [256] = "";
    dsh_reply_t *reply = dsh_client_call (client, "echo", "{\"message\": \"hi\"}", "agent-7", 2000,
                                          error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), "RESULT");
    assert_false (dsh_reply_is_error (reply));
    assert_null (dsh_reply_error_code (reply));
    assert_string_equal (dsh_reply_text (reply), "instance-one");
    char *call_id = strdup (dsh_reply_call_id (reply));
    dsh_reply_destroy (&reply);

    //  What the broker got: PROTOCOL.md's CALL body
    zframe_t *frame = fake_broker_last (broker, "CALL");
    assert_non_null (frame);
    msgpack_unpacked body;
    msgpack_unpacked_init (&body);
    assert_int_equal (msgpack_unpack_next (&body, (const char *) zframe_data (frame), zframe_size (frame), NULL),
                      MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *call = &body.data;
    assert_true (fake_is_str (fake_map_get (call, "callId"), call_id));
    assert_true (fake_is_str (fake_map_get (call, "name"), "echo"));
    assert_true (fake_is_str (fake_map_get (call, "agent"), "agent-7"));
    assert_true (fake_is_str (fake_map_get (fake_map_get (call, "arguments"), "message"), "hi"));
    const msgpack_object *timeout = fake_map_get (call, "timeoutMs");
    assert_non_null (timeout);
    assert_int_equal (timeout->via.u64, 2000);
    msgpack_unpacked_destroy (&body);
    zframe_destroy (&frame);

    //  Bad JSON arguments are refused here, and nothing is sent
    reply = dsh_client_call (client, "echo", "{bad", NULL, 2000, error, sizeof (error));
    assert_null (reply);
    assert_true (strlen (error) > 0);
    assert_int_equal (fake_broker_count (broker, "CALL"), 1);

    free (call_id);
    dsh_client_destroy (&client);
    fake_broker_destroy (&broker);
}

static void
test_call_timeout (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    dsh_client_t *client = dsh_client_new (broker->front);
    int64_t sent_at = zclock_mono ();
    char *call_id = s_send_held_call (client, broker, "slow", 300);
    //  The broker answers nothing but PINGs: the client answers the call
    dsh_reply_t *reply = s_wait_result (client, call_id, 300 + CLIENT_TIMEOUT_GRACE_MS + FAKE_WAIT_MS);
    assert_non_null (reply);
    assert_true (zclock_mono () - sent_at >= 300);
    assert_true (dsh_reply_is_error (reply));
    assert_string_equal (dsh_reply_error_code (reply), "TIMEOUT");
    dsh_reply_destroy (&reply);
    //  The broker was alive all along: it was PINGed and answered
    assert_true (fake_broker_count (broker, "PING") >= 1);
    free (call_id);
    dsh_client_destroy (&client);
    fake_broker_destroy (&broker);
}

static void
test_failover (void **state)
{
    (void) state;
    fake_broker_t *first = fake_broker_new ("broker-a");
    fake_broker_t *second = fake_broker_new ("broker-b");
    char *list = zsys_sprintf ("%s,%s", first->front, second->front);
    dsh_client_t *client = dsh_client_new (list);
    assert_non_null (client);
    assert_string_equal (dsh_client_endpoint (client), first->front);
    char *instance = s_ping_broker (client);
    assert_string_equal (instance, "broker-a");
    free (instance);

    //  A call in flight when the first broker falls silent: it may have
    //  run there (the broker had it, and the tool is not read-only), so
    //  it is answered BROKER_GONE within the liveness window
    char *call_id = s_send_held_call (client, first, "write", 0);
    fake_broker_tell (first, "SILENT", NULL, NULL, NULL);
    int64_t silent_at = zclock_mono ();
    dsh_reply_t *reply = s_wait_result (client, call_id, FAKE_WAIT_MS);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_error_code (reply), "BROKER_GONE");
    assert_non_null (strstr (dsh_reply_text (reply), "went silent"));
    assert_true (zclock_mono () - silent_at < FAKE_WAIT_MS);
    dsh_reply_destroy (&reply);
    free (call_id);

    //  The client went on to the second broker of the list
    char error [256] = "";
    reply = dsh_client_call (client, "echo", NULL, NULL, 2000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_text (reply), "broker-b");
    dsh_reply_destroy (&reply);
    assert_string_equal (dsh_client_endpoint (client), second->front);
    instance = s_ping_broker (client);
    assert_string_equal (instance, "broker-b");
    free (instance);

    dsh_client_destroy (&client);
    zstr_free (&list);
    fake_broker_destroy (&first);
    fake_broker_destroy (&second);
}

static void
test_restart (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    dsh_client_t *client = dsh_client_new (broker->front);
    char *instance = s_ping_broker (client);
    assert_string_equal (instance, "instance-one");
    free (instance);

    //  The broker restarts on the same endpoint: its next PONG names
    //  another instance, which lost the call in flight
    char *call_id = s_send_held_call (client, broker, "write", 0);
    fake_broker_tell (broker, "INSTANCE", "instance-two", NULL, NULL);
    dsh_reply_t *reply = s_wait_result (client, call_id, FAKE_WAIT_MS);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_error_code (reply), "BROKER_GONE");
    assert_non_null (strstr (dsh_reply_text (reply), "restarted"));
    dsh_reply_destroy (&reply);
    free (call_id);

    //  And the client goes on with the new instance
    fake_broker_tell (broker, "CALLS", "answer", NULL, NULL);
    char error [256] = "";
    reply = dsh_client_call (client, "echo", NULL, NULL, 2000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_text (reply), "instance-two");
    dsh_reply_destroy (&reply);

    dsh_client_destroy (&client);
    fake_broker_destroy (&broker);
}

static void
test_cancel (void **state)
{
    (void) state;
    fake_broker_t *broker = fake_broker_new ("instance-one");
    dsh_client_t *client = dsh_client_new (broker->front);
    char *call_id = s_send_held_call (client, broker, "slow", 0);
    assert_int_equal (dsh_client_cancel (client, call_id), 0);
    dsh_reply_t *reply = s_wait_result (client, call_id, FAKE_WAIT_MS);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_error_code (reply), "CANCELLED");
    dsh_reply_destroy (&reply);
    assert_int_equal (fake_broker_count (broker, "CANCEL"), 1);

    //  Nothing more comes for it
    reply = s_wait_result (client, call_id, 300);
    assert_null (reply);
    free (call_id);

    //  A result that races the cancel: it is on its way when the cancel
    //  is sent, and the broker answers the cancel anyway. The caller has
    //  one answer, CANCELLED, and no other
    call_id = s_send_held_call (client, broker, "slow", 0);
    fake_broker_tell (broker, "CALLS", "release", NULL, NULL);
    assert_int_equal (fake_broker_count (broker, "CANCEL"), 1);   //  the release is out
    assert_int_equal (dsh_client_cancel (client, call_id), 0);
    reply = s_wait_result (client, call_id, FAKE_WAIT_MS);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_error_code (reply), "CANCELLED");
    dsh_reply_destroy (&reply);
    assert_int_equal (fake_broker_wait_count (broker, "CANCEL", 2), 2);
    reply = s_wait_result (client, call_id, 500);
    assert_null (reply);
    free (call_id);
    dsh_client_destroy (&client);
    fake_broker_destroy (&broker);
}

int
main (void)
{
    zsys_init ();
    zsys_set_logstream (stderr);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_ping_and_hello),
        cmocka_unit_test (test_call_answered),
        cmocka_unit_test (test_call_timeout),
        cmocka_unit_test (test_failover),
        cmocka_unit_test (test_restart),
        cmocka_unit_test (test_cancel),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
