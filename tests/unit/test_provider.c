/*  =========================================================================
    test_provider - dsh_provider against a fake broker on inproc sockets

    The test plays the broker's part frame by frame: it answers HELLO with a
    WELCOME, sends CALLs with tokens on the work socket and reads what comes
    back, so the provider's call path is checked alone: the RESULT carries
    the CALL's token, refusals (unknown tool, bad body, bad arguments) and
    OVERLOADED are answered at once, progress comes before the result, a
    deferred call is finished from another thread, a cancelled call gets no
    RESULT, and malformed messages change nothing. Tools are added and
    removed through the actor pipe; a steady stream of adds at run time is
    announced once every 250 ms, not at every add, and still while it
    lasts; a set over the broker's message limit is announced in parts; a
    held provider nobody starts starts by itself.

    Every wait has a timeout, so a broken provider fails instead of hanging.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_provider.h"

#define WAIT_MS 5000                //  how long anything may take before the test fails

//  ---------------------------------------------------------------------
//  Tools

static const dsh_param_t s_echo_params [] = {
    { .name = "message", .type = DSH_TYPE_STRING, .required = true },
    { .name = NULL }
};

static const dsh_tooldef_t s_echo_def = {
    .name = "echo", .description = "Return the message", .params = s_echo_params
};

static const dsh_param_t s_no_params [] = { { .name = NULL } };

static const dsh_tooldef_t s_progress_def = {
    .name = "progress", .description = "Report progress, then finish", .params = s_no_params
};

static const dsh_tooldef_t s_hold_def = {
    .name = "hold", .description = "Run until cancelled", .params = s_no_params
};

static const dsh_tooldef_t s_defer_def = {
    .name = "defer", .description = "Finish later, from another thread", .params = s_no_params
};

static atomic_int s_holds_started;
static atomic_int s_cancels_seen;

static int
s_echo (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    dsh_result_text (result, dsh_call_string (call, "message", ""));
    return 0;
}

static int
s_progress (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    dsh_call_progress (call, 1, 2, "half way");
    dsh_result_text (result, "done");
    return 0;
}

//  Waits on the call's cancel fd (at most WAIT_MS).
static int
s_hold (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_holds_started++;
    struct pollfd item = { .fd = dsh_call_cancel_fd (call), .events = POLLIN };
    poll (&item, 1, WAIT_MS);
    if (dsh_call_cancelled (call))
        s_cancels_seen++;
    dsh_result_text (result, "held");
    return 0;
}

typedef struct {
    dsh_call_t *call;
    dsh_result_t *result;
} s_deferred_t;

static void *
s_finish_later (void *arg)
{
    s_deferred_t *deferred = (s_deferred_t *) arg;
    zclock_sleep (50);
    dsh_result_text (deferred->result, "finished later");
    dsh_call_finish (deferred->call);
    free (deferred);
    return NULL;
}

static int
s_defer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    s_deferred_t *deferred = (s_deferred_t *) malloc (sizeof (s_deferred_t));
    deferred->call = call;
    deferred->result = result;
    pthread_t thread;
    if (pthread_create (&thread, NULL, s_finish_later, deferred))
        return -1;
    pthread_detach (thread);
    return DSH_HANDLER_DEFER;
}

//  ---------------------------------------------------------------------
//  The fake broker

typedef struct {
    zsock_t *front;                 //  ROUTER, where the provider says HELLO
    zsock_t *work;                  //  ROUTER, calls and results
    zsock_t *announce;              //  SUB, the provider's announcements
    zframe_t *routing_id;           //  the provider's work DEALER
    dsh_provider_t *provider;
} s_broker_t;

//  The next message on sock, or a failure after WAIT_MS.
static zmsg_t *
s_recv (zsock_t *sock)
{
    zpoller_t *poller = zpoller_new (sock, NULL);
    void *which = zpoller_wait (poller, WAIT_MS);
    zpoller_destroy (&poller);
    if (which != sock)
        fail_msg ("nothing received in %d ms", WAIT_MS);
    zmsg_t *msg = zmsg_recv (sock);
    assert_non_null (msg);
    return msg;
}

//  True if sock has a message within timeout_ms.
static bool
s_readable (zsock_t *sock, int timeout_ms)
{
    zpoller_t *poller = zpoller_new (sock, NULL);
    void *which = zpoller_wait (poller, timeout_ms);
    zpoller_destroy (&poller);
    return which == sock;
}

//  Checks [routing id] "" "DSH1" command, and pops them off.
static void
s_expect_head (zmsg_t *msg, const char *command, zframe_t **routing_id_p)
{
    zframe_t *routing_id = zmsg_pop (msg);
    assert_non_null (routing_id);
    zframe_t *frame = zmsg_pop (msg);
    assert_int_equal (zframe_size (frame), 0);
    zframe_destroy (&frame);
    char *protocol = zmsg_popstr (msg);
    char *verb = zmsg_popstr (msg);
    assert_string_equal (protocol, DSH_PROTOCOL);
    assert_string_equal (verb, command);
    zstr_free (&protocol);
    zstr_free (&verb);
    if (routing_id_p)
        *routing_id_p = routing_id;
    else
        zframe_destroy (&routing_id);
}

//  A message [routing id] "" "DSH1" command.
static zmsg_t *
s_head (zframe_t *routing_id, const char *command)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_append (msg, &(zframe_t *) { zframe_dup (routing_id) });
    zmsg_addmem (msg, "", 0);
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, command);
    return msg;
}

//  Whether s_broker_start's provider runs its handlers inline.
static bool s_inline_handlers = false;
//  The maxMessageBytes its WELCOME states, 0 for none.
static int s_max_message_bytes = 0;

static void
s_broker_start (s_broker_t *self, size_t workers, size_t queue_limit)
{
    memset (self, 0, sizeof (*self));
    s_holds_started = 0;
    s_cancels_seen = 0;
    //  Fresh endpoints per test: libzmq releases a closed socket's inproc
    //  name in the background
    static int instance = 0;
    instance++;
    char front [64], work [64], announce [64];
    snprintf (front, sizeof front, "inproc://test-provider-front-%d", instance);
    snprintf (work, sizeof work, "inproc://test-provider-work-%d", instance);
    snprintf (announce, sizeof announce, "inproc://test-provider-announce-%d", instance);
    self->front = zsock_new_router (front);
    self->work = zsock_new_router (work);
    //  Bound, as the broker's is (a SUB connects by default)
    char bound [72];
    snprintf (bound, sizeof bound, "@%s", announce);
    self->announce = zsock_new_sub (bound, "");
    assert_non_null (self->front);
    assert_non_null (self->work);
    assert_non_null (self->announce);
    //  Held: it looks for the broker only once every tool is in
    dsh_provider_options_t options = {
        .broker = front, .id = "test-provider", .workers = workers, .queue_limit = queue_limit,
        .inline_handlers = s_inline_handlers
    };
    self->provider = dsh_provider_new_options (&options);
    assert_non_null (self->provider);
    assert_int_equal (dsh_provider_add (self->provider, &s_echo_def, s_echo, NULL), 0);
    assert_int_equal (dsh_provider_add (self->provider, &s_progress_def, s_progress, NULL), 0);
    assert_int_equal (dsh_provider_add (self->provider, &s_hold_def, s_hold, NULL), 0);
    assert_int_equal (dsh_provider_add (self->provider, &s_defer_def, s_defer, NULL), 0);
    zpoller_t *poller = zpoller_new (self->front, NULL);
    assert_null (zpoller_wait (poller, 100));
    zpoller_destroy (&poller);
    dsh_provider_start (self->provider);

    //  HELLO on the front: tell it where everything is
    zframe_t *routing_id = NULL;
    zmsg_t *msg = s_recv (self->front);
    s_expect_head (msg, DSH_HELLO, &routing_id);
    zmsg_destroy (&msg);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, s_max_message_bytes? 5: 4);
    if (s_max_message_bytes) {
        dsh_pack_cstr (&packer.pk, "maxMessageBytes");
        msgpack_pack_uint32 (&packer.pk, (uint32_t) s_max_message_bytes);
    }
    dsh_packer_kv_str (&packer, "announce", announce);
    dsh_packer_kv_str (&packer, "work", work);
    dsh_pack_cstr (&packer.pk, "heartbeatMs");
    msgpack_pack_uint32 (&packer.pk, 1000);
    dsh_pack_cstr (&packer.pk, "protocol");
    msgpack_pack_uint32 (&packer.pk, DSH_PROTOCOL_VERSION);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    msg = s_head (routing_id, DSH_WELCOME);
    zmsg_append (msg, &body);
    assert_int_equal (zmsg_send (&msg, self->front), 0);
    zframe_destroy (&routing_id);

    //  HELLO on the work socket names the component
    msg = s_recv (self->work);
    s_expect_head (msg, DSH_HELLO, &self->routing_id);
    zmsg_destroy (&msg);
}

static void
s_broker_stop (s_broker_t *self)
{
    dsh_provider_destroy (&self->provider);
    zframe_destroy (&self->routing_id);
    zsock_destroy (&self->front);
    zsock_destroy (&self->work);
    zsock_destroy (&self->announce);
}

//  Sends CALL token body, the body packed from the arguments' JSON.
static void
s_call (s_broker_t *self, uint64_t token, const char *call_id, const char *name, const char *args_json)
{
    msgpack_sbuffer args;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (args_json, &args, error, sizeof error), 0);
    zframe_t *body = dsh_proto_encode_call (call_id, name, args.data, args.size, NULL, NULL, 0, 0);
    msgpack_sbuffer_destroy (&args);
    zmsg_t *msg = s_head (self->routing_id, DSH_CALL);
    zmsg_addmem (msg, &token, sizeof (token));
    zmsg_append (msg, &body);
    assert_int_equal (zmsg_send (&msg, self->work), 0);
}

static void
s_cancel (s_broker_t *self, uint64_t token)
{
    zmsg_t *msg = s_head (self->routing_id, DSH_CANCEL);
    zmsg_addmem (msg, &token, sizeof (token));
    assert_int_equal (zmsg_send (&msg, self->work), 0);
}

//  What came back for one call.
typedef struct {
    zframe_t *body;
    dsh_doc_t *doc;
    const msgpack_object *root;
} s_reply_t;

static void
s_reply_destroy (s_reply_t *reply)
{
    dsh_doc_destroy (&reply->doc);
    zframe_destroy (&reply->body);
}

//  Receives command token body from the work socket and checks the token.
static s_reply_t
s_expect (s_broker_t *self, const char *command, uint64_t token)
{
    zmsg_t *msg = s_recv (self->work);
    s_expect_head (msg, command, NULL);
    assert_int_equal (zmsg_size (msg), 2);
    zframe_t *token_frame = zmsg_pop (msg);
    assert_int_equal (zframe_size (token_frame), sizeof (token));
    assert_memory_equal (zframe_data (token_frame), &token, sizeof (token));
    zframe_destroy (&token_frame);
    s_reply_t reply;
    reply.body = zmsg_pop (msg);
    zmsg_destroy (&msg);
    char error [256] = "";
    reply.doc = dsh_proto_decode_body (reply.body, error, sizeof error);
    if (!reply.doc)
        fail_msg ("%s body does not decode: %s", command, error);
    reply.root = dsh_doc_root (reply.doc);
    if (streq (command, DSH_RESULT) && dsh_proto_check_result (reply.root, error, sizeof error))
        fail_msg ("RESULT is not valid: %s", error);
    return reply;
}

static void
s_assert_str (const msgpack_object *obj, const char *text)
{
    assert_non_null (obj);
    assert_int_equal (obj->type, MSGPACK_OBJECT_STR);
    if (obj->via.str.size != strlen (text) || memcmp (obj->via.str.ptr, text, strlen (text)))
        fail_msg ("\"%.*s\" is not \"%s\"", (int) obj->via.str.size, obj->via.str.ptr, text);
}

//  Checks a RESULT's callId, first text, and error code (NULL: success).
static void
s_assert_result (s_reply_t *reply, const char *call_id, const char *text, const char *code)
{
    s_assert_str (dsh_map_get (reply->root, "callId"), call_id);
    const msgpack_object *content = dsh_map_get (reply->root, "content");
    assert_true (content->via.array.size >= 1);
    s_assert_str (dsh_map_get (&content->via.array.ptr [0], "text"), text);
    assert_int_equal (dsh_map_get (reply->root, "isError")->via.boolean, code != NULL);
    if (code)
        s_assert_str (dsh_map_get (dsh_map_get (reply->root, "error"), "code"), code);
}

//  ---------------------------------------------------------------------
//  Tests

//  Every kind of call a provider answers, on a started broker.
static void
s_calls (s_broker_t *self)
{
    s_broker_t broker = *self;

    //  A typed tool, answered under the CALL's token
    s_call (&broker, 0x0102030405060708ull, "c-1", "echo", "{\"message\": \"hello\"}");
    s_reply_t reply = s_expect (&broker, DSH_RESULT, 0x0102030405060708ull);
    s_assert_result (&reply, "c-1", "hello", NULL);
    s_reply_destroy (&reply);

    //  Refusals come at once, with the reasons a caller reads
    s_call (&broker, 2, "c-2", "nope", "{}");
    reply = s_expect (&broker, DSH_RESULT, 2);
    s_assert_result (&reply, "c-2", "Error: unknown tool \"nope\"", DSH_E_UNKNOWN_TOOL);
    s_reply_destroy (&reply);

    s_call (&broker, 3, "c-3", "echo", "{\"message\": 42}");
    reply = s_expect (&broker, DSH_RESULT, 3);
    s_assert_result (&reply, "c-3", "Error: invalid arguments: \"message\" must be a string", DSH_E_INVALID_ARGS);
    s_reply_destroy (&reply);

    zmsg_t *msg = s_head (broker.routing_id, DSH_CALL);
    uint64_t token = 4;
    zmsg_addmem (msg, &token, sizeof (token));
    zmsg_addstr (msg, "not msgpack of a map");
    assert_int_equal (zmsg_send (&msg, broker.work), 0);
    reply = s_expect (&broker, DSH_RESULT, 4);
    assert_int_equal (dsh_map_get (reply.root, "isError")->via.boolean, true);
    s_assert_str (dsh_map_get (dsh_map_get (reply.root, "error"), "code"), DSH_E_BAD_REQUEST);
    s_reply_destroy (&reply);

    //  Progress first, then the result
    s_call (&broker, 5, "c-5", "progress", "{}");
    reply = s_expect (&broker, DSH_PROGRESS, 5);
    s_assert_str (dsh_map_get (reply.root, "callId"), "c-5");
    s_assert_str (dsh_map_get (reply.root, "message"), "half way");
    s_reply_destroy (&reply);
    reply = s_expect (&broker, DSH_RESULT, 5);
    s_assert_result (&reply, "c-5", "done", NULL);
    s_reply_destroy (&reply);

    //  A deferred call, finished from another thread
    s_call (&broker, 6, "c-6", "defer", "{}");
    reply = s_expect (&broker, DSH_RESULT, 6);
    s_assert_result (&reply, "c-6", "finished later", NULL);
    s_reply_destroy (&reply);

    //  A long body (not one that fits inside a zmq_msg_t) comes back whole
    char long_json [8300];
    char *end = stpcpy (long_json, "{\"message\": \"");
    memset (end, 'x', 8192);
    strcpy (end + 8192, "\"}");
    s_call (&broker, 7, "c-7", "echo", long_json);
    reply = s_expect (&broker, DSH_RESULT, 7);
    const msgpack_object *text = dsh_map_get (&dsh_map_get (reply.root, "content")->via.array.ptr [0], "text");
    assert_int_equal (text->via.str.size, 8192);
    s_reply_destroy (&reply);
}

static void
test_calls (void **state)
{
    (void) state;
    s_broker_t broker;
    s_broker_start (&broker, 2, 16);
    s_calls (&broker);
    s_broker_stop (&broker);
}

//  Handlers on the provider's own thread (dsh-mcp-bridge's way): the same
//  answers, deferred calls finished from another thread included
static void
test_calls_inline (void **state)
{
    (void) state;
    s_inline_handlers = true;
    s_broker_t broker;
    s_broker_start (&broker, 64, 16);
    s_calls (&broker);
    s_broker_stop (&broker);
    s_inline_handlers = false;
}

static void
test_malformed (void **state)
{
    (void) state;
    s_broker_t broker;
    s_broker_start (&broker, 1, 16);

    //  None of these gets an answer, and none stops the provider
    const char *frames [][4] = {
        { "DSH1", "CALL", NULL },                   //  no delimiter
        { "", "DSH2", "CALL", NULL },               //  another protocol
        { "", "DSH1", "call", NULL },               //  not a command
        { "", "DSH1", "CALL", "short" },            //  a token of 5 bytes, no body
        { "", "DSH1", "CANCEL", NULL },             //  cancel without a token
        { "", "DSH1", "BOGUS", NULL },              //  unknown command
    };
    for (size_t index = 0; index < sizeof frames / sizeof frames [0]; index++) {
        zmsg_t *msg = zmsg_new ();
        zmsg_append (msg, &(zframe_t *) { zframe_dup (broker.routing_id) });
        for (size_t part = 0; part < 4 && frames [index][part]; part++)
            zmsg_addstr (msg, frames [index][part]);
        assert_int_equal (zmsg_send (&msg, broker.work), 0);
    }
    //  More frames than any dsh message has
    zmsg_t *msg = s_head (broker.routing_id, DSH_CALL);
    for (int index = 0; index < 30; index++)
        zmsg_addstr (msg, "x");
    assert_int_equal (zmsg_send (&msg, broker.work), 0);
    //  A CALL with a token and no body
    msg = s_head (broker.routing_id, DSH_CALL);
    uint64_t token = 99;
    zmsg_addmem (msg, &token, sizeof (token));
    assert_int_equal (zmsg_send (&msg, broker.work), 0);

    //  The next good call is answered, and it is the only thing that is
    s_call (&broker, 100, "c-100", "echo", "{\"message\": \"still here\"}");
    s_reply_t reply = s_expect (&broker, DSH_RESULT, 100);
    s_assert_result (&reply, "c-100", "still here", NULL);
    s_reply_destroy (&reply);
    assert_false (s_readable (broker.work, 200));

    s_broker_stop (&broker);
}

static void
test_cancel_and_overload (void **state)
{
    (void) state;
    //  One worker and room for one waiting call
    s_broker_t broker;
    s_broker_start (&broker, 1, 1);
    s_call (&broker, 1, "running", "hold", "{}");
    int64_t give_up = zclock_mono () + WAIT_MS;
    while (s_holds_started < 1 && zclock_mono () < give_up)
        zclock_sleep (5);
    assert_int_equal (s_holds_started, 1);
    //  The worker is busy: a second waits, a third finds the queue full
    //  and is answered at once
    s_call (&broker, 2, "queued", "hold", "{}");
    s_call (&broker, 1000, "refused", "hold", "{}");
    s_reply_t reply = s_expect (&broker, DSH_RESULT, 1000);
    s_assert_result (&reply, "refused", "Error: component \"test-provider\" is overloaded", DSH_E_OVERLOADED);
    s_reply_destroy (&reply);

    //  Cancelled calls are told, and answered by nobody here: the broker
    //  has answered them already
    s_cancel (&broker, 1);
    s_cancel (&broker, 2);
    s_cancel (&broker, 12345);              //  no such call: nothing happens
    give_up = zclock_mono () + WAIT_MS;
    while (s_cancels_seen < 1 && zclock_mono () < give_up)
        zclock_sleep (10);
    //  The queued one is skipped if its cancel came first, or sees it
    assert_true (s_cancels_seen >= 1);
    assert_false (s_readable (broker.work, 300));
    assert_int_equal (s_cancels_seen, s_holds_started);

    //  And the worker is free again
    s_call (&broker, 2000, "after", "echo", "{\"message\": \"free\"}");
    reply = s_expect (&broker, DSH_RESULT, 2000);
    s_assert_result (&reply, "after", "free", NULL);
    s_reply_destroy (&reply);
    s_broker_stop (&broker);
}

static void
test_tools (void **state)
{
    (void) state;
    //  Adding and removing go through the actor pipe; no broker needed
    dsh_provider_t *provider = dsh_provider_new ("inproc://test-provider-nobody", "lonely", 1);
    assert_non_null (provider);
    assert_string_equal (dsh_provider_id (provider), "lonely");
    assert_int_equal (dsh_provider_add (provider, &s_echo_def, s_echo, NULL), 0);
    assert_int_equal (dsh_provider_add (provider, &s_echo_def, s_echo, NULL), -1);
    assert_int_equal (dsh_provider_add_raw (provider,
        "{\"name\": \"raw\", \"description\": \"d\", \"parameters\": {\"type\": \"object\"}}", s_echo, NULL), 0);
    assert_int_equal (dsh_provider_add_raw (provider, "{\"name\": \"bad name!\"}", s_echo, NULL), -1);
    assert_int_equal (dsh_provider_add_raw (provider, "not json", s_echo, NULL), -1);
    assert_int_equal (dsh_provider_remove (provider, "echo"), 0);
    assert_int_equal (dsh_provider_remove (provider, "echo"), -1);
    assert_int_equal (dsh_provider_remove (provider, "never"), -1);
    assert_int_equal (dsh_provider_add (provider, &s_echo_def, s_echo, NULL), 0);

    //  No broker: not ready, nothing refused, both within their timeouts
    int64_t started = zclock_mono ();
    assert_int_equal (dsh_provider_wait_ready (provider, 100), -1);
    assert_null (dsh_provider_refusal (provider, 50));
    assert_true (zclock_mono () - started < WAIT_MS);

    dsh_provider_destroy (&provider);
    assert_null (provider);
    dsh_provider_destroy (&provider);
    assert_null (dsh_provider_new (NULL, "bad id", 1));
}

//  The next ANNOUNCE on the fake broker's SUB within timeout_ms (what
//  else comes, HEARTBEAT, is dropped), or NULL.
static zmsg_t *
s_next_announce (s_broker_t *self, int timeout_ms)
{
    int64_t give_up = zclock_mono () + timeout_ms;
    do {
        int64_t left_ms = give_up - zclock_mono ();
        if (!s_readable (self->announce, left_ms > 0? (int) left_ms: 0))
            return NULL;
        zmsg_t *msg = zmsg_recv (self->announce);
        zmsg_first (msg);
        char *command = zframe_strdup (zmsg_next (msg));
        bool announce = command && streq (command, DSH_ANNOUNCE);
        zstr_free (&command);
        if (announce)
            return msg;
        zmsg_destroy (&msg);
    } while (zclock_mono () < give_up);
    return NULL;
}

//  An ANNOUNCE asked for with SYNC. A SUB may miss what is published
//  before its subscription reaches the publisher: ask again until one
//  comes, which also proves the subscription live.
static zmsg_t *
s_announce_on_sync (s_broker_t *self)
{
    zmsg_t *announce = NULL;
    int64_t give_up = zclock_mono () + WAIT_MS;
    while (!announce && zclock_mono () < give_up) {
        zmsg_t *sync = s_head (self->routing_id, DSH_SYNC);
        dsh_packer_t packer;
        dsh_packer_init (&packer);
        msgpack_pack_map (&packer.pk, 0);
        zframe_t *body = dsh_packer_frame (&packer);
        dsh_packer_release (&packer);
        zmsg_append (sync, &body);
        assert_int_equal (zmsg_send (&sync, self->work), 0);
        announce = s_next_announce (self, 200);
    }
    assert_non_null (announce);
    return announce;
}

//  How many tools an ANNOUNCE (taken) carries, after checking its shape.
static size_t
s_announced_tools (zmsg_t **announce_p, size_t *concurrency)
{
    zmsg_t *announce = *announce_p;
    assert_int_equal (zmsg_size (announce), 3);
    char *protocol = zmsg_popstr (announce);
    char *command = zmsg_popstr (announce);
    assert_string_equal (protocol, DSH_PROTOCOL);
    assert_string_equal (command, DSH_ANNOUNCE);
    zframe_t *body = zmsg_pop (announce);
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error));
    assert_non_null (doc);
    dsh_presence_t presence;
    assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof (error)), 0);
    size_t tools = presence.tools->via.array.size;
    if (concurrency)
        *concurrency = (size_t) presence.concurrency;
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);
    zstr_free (&protocol);
    zstr_free (&command);
    zmsg_destroy (announce_p);
    return tools;
}

//  Its ANNOUNCE (asked for with SYNC) states its workers as concurrency,
//  for the broker's window.
static void
test_announce_concurrency (void **state)
{
    (void) state;
    s_broker_t broker;
    s_broker_start (&broker, 3, 16);
    zmsg_t *announce = s_announce_on_sync (&broker);
    size_t concurrency = 0;
    assert_int_equal (s_announced_tools (&announce, &concurrency), 4);
    assert_int_equal (concurrency, 3);
    s_broker_stop (&broker);
}

//  A tool set within the WELCOME's maxMessageBytes goes in one ANNOUNCE;
//  one over it in the fewest parts that each fit (256 bytes to spare), the
//  tools in order, at one generation, each part as full as it can be; a
//  tool too large for a message of its own is left out
static void
test_announce_in_parts (void **state)
{
    (void) state;
    s_max_message_bytes = 4096;
    s_broker_t broker;
    s_broker_start (&broker, 1, 16);
    zmsg_t *announce = s_announce_on_sync (&broker);
    assert_int_equal (s_announced_tools (&announce, NULL), 4);
    char description [301];
    memset (description, 'd', 300);
    description [300] = 0;
    for (int index = 0; index < 40; index++) {
        char *entry = zsys_sprintf ("{\"name\": \"many_%02d\", \"description\": \"%s\", "
                                    "\"parameters\": {\"type\": \"object\"}}", index, description);
        assert_int_equal (dsh_provider_add_raw (broker.provider, entry, s_echo, NULL), 0);
        zstr_free (&entry);
        if (index == 20) {
            char *big = (char *) zmalloc (5000);
            memset (big, 'x', 4999);
            entry = zsys_sprintf ("{\"name\": \"too_big\", \"description\": \"%s\", "
                                  "\"parameters\": {\"type\": \"object\"}}", big);
            assert_int_equal (dsh_provider_add_raw (broker.provider, entry, s_echo, NULL), 0);
            zstr_free (&entry);
            free (big);
        }
    }
    //  The announcements until one whole set in parts came
    char names [2048] = "";
    size_t bodies [64], entry_sizes [64], parts = 0, next_part = 0;
    uint64_t generation = 0;
    int64_t give_up = zclock_mono () + WAIT_MS;
    while (zclock_mono () < give_up && (parts == 0 || next_part < parts)) {
        announce = s_next_announce (&broker, WAIT_MS);
        assert_non_null (announce);
        zframe_t *body = zmsg_last (announce);
        char error [256];
        dsh_doc_t *doc = dsh_doc_new (zframe_data (body), zframe_size (body), error, sizeof (error));
        assert_non_null (doc);
        dsh_presence_t presence;
        assert_int_equal (dsh_proto_decode_presence (doc, DSH_ANNOUNCE, &presence, error, sizeof (error)), 0);
        assert_true (zframe_size (body) <= 4096 - 256);
        if (presence.parts && presence.part == 0) {
            parts = (size_t) presence.parts;
            assert_true (parts < 64);
            next_part = 0;
            generation = presence.generation;
            *names = 0;
        }
        if (presence.parts && presence.part == next_part && presence.generation == generation) {
            bodies [next_part] = zframe_size (body);
            const msgpack_object_array *tools = &presence.tools->via.array;
            assert_true (tools->size > 0);
            msgpack_sbuffer first;
            msgpack_sbuffer_init (&first);
            msgpack_packer pk;
            msgpack_packer_init (&pk, &first, msgpack_sbuffer_write);
            msgpack_pack_object (&pk, tools->ptr [0]);
            entry_sizes [next_part] = first.size;
            msgpack_sbuffer_destroy (&first);
            for (uint32_t index = 0; index < tools->size; index++) {
                const msgpack_object *name = dsh_map_get (&tools->ptr [index], "name");
                size_t used = strlen (names);
                snprintf (names + used, sizeof (names) - used, "%.*s ", (int) name->via.str.size,
                          name->via.str.ptr);
            }
            next_part++;
        }
        dsh_doc_destroy (&doc);
        zmsg_destroy (&announce);
    }
    assert_true (parts >= 3);
    assert_int_equal (next_part, parts);
    //  Every tool but the one too large, in order
    char expected [2048] = "echo progress hold defer ";
    for (int index = 0; index < 40; index++) {
        size_t used = strlen (expected);
        snprintf (expected + used, sizeof (expected) - used, "many_%02d ", index);
    }
    assert_string_equal (names, expected);
    //  No part could have taken the next one's first tool (the room for
    //  the largest part and parts, and tools' array header, aside)
    for (size_t part = 0; part + 1 < parts; part++)
        assert_true (bodies [part] + entry_sizes [part + 1] > 4096 - 256 - 16);
    s_max_message_bytes = 0;
    s_broker_stop (&broker);
}

//  Changes at run time are announced together: a steady stream of adds
//  (one every 2 ms, never quiet for the 10 ms an ANNOUNCE waits for) is
//  announced once every 250 ms, and still while it lasts; once it stops,
//  one more ANNOUNCE has every tool.
static void
test_changes_announced_together (void **state)
{
    (void) state;
    s_broker_t broker;
    s_broker_start (&broker, 1, 16);
    zmsg_t *announce = s_announce_on_sync (&broker);
    assert_int_equal (s_announced_tools (&announce, NULL), 4);

    size_t adds = 0, pauses = 0, announces = 0;
    int64_t started = zclock_mono ();
    int64_t last_add = started;
    while (zclock_mono () - started < 800) {
        char entry [128];
        snprintf (entry, sizeof (entry), "{\"name\": \"stream_%zu\", \"parameters\": {\"type\": \"object\"}}", adds);
        assert_int_equal (dsh_provider_add_raw (broker.provider, entry, s_echo, NULL), 0);
        adds++;
        //  A loaded machine may pause this thread long enough for the
        //  provider to see quiet and announce: each such pause may cost one
        int64_t now = zclock_mono ();
        if (now - last_add >= 5)
            pauses++;
        last_add = now;
        while ((announce = s_next_announce (&broker, 0))) {
            s_announced_tools (&announce, NULL);
            announces++;
        }
        zclock_sleep (2);
    }
    int64_t lasted = zclock_mono () - started;
    //  Not starved by the stream
    assert_true (announces >= 1);
    size_t most = (size_t) (lasted / 250) + 1 + pauses;
    if (announces > most)
        fail_msg ("%zu ANNOUNCEs for %zu adds in %" PRId64 " ms (%zu pauses): want at most %zu", announces, adds,
                  lasted, pauses, most);
    //  The last adds come in one more, with every tool
    size_t tools = 0;
    while (tools != 4 + adds && (announce = s_next_announce (&broker, WAIT_MS)))
        tools = s_announced_tools (&announce, NULL);
    assert_int_equal (tools, 4 + adds);
    s_broker_stop (&broker);
}

//  A held provider that nobody starts starts by itself: 500 ms after its
//  last add, or 2 s after it was made if nothing is added. One made with
//  start_now asks for the broker at once.
static void
test_held_starts_by_itself (void **state)
{
    (void) state;
    zsock_t *front = zsock_new_router ("inproc://test-provider-unstarted");
    zsock_t *empty_front = zsock_new_router ("inproc://test-provider-empty");
    zsock_t *now_front = zsock_new_router ("inproc://test-provider-now");
    assert_non_null (front);
    assert_non_null (empty_front);
    assert_non_null (now_front);
    int64_t made = zclock_mono ();
    dsh_provider_t *empty = dsh_provider_new ("inproc://test-provider-empty", "empty", 1);
    dsh_provider_t *provider = dsh_provider_new ("inproc://test-provider-unstarted", "unstarted", 1);
    dsh_provider_options_t options = { .broker = "inproc://test-provider-now", .id = "now", .start_now = true };
    dsh_provider_t *now = dsh_provider_new_options (&options);
    assert_non_null (empty);
    assert_non_null (provider);
    assert_non_null (now);

    zmsg_t *hello = s_recv (now_front);
    s_expect_head (hello, DSH_HELLO, NULL);
    zmsg_destroy (&hello);

    assert_int_equal (dsh_provider_add (provider, &s_echo_def, s_echo, NULL), 0);
    zclock_sleep (100);
    assert_int_equal (dsh_provider_add (provider, &s_progress_def, s_progress, NULL), 0);
    int64_t added = zclock_mono ();
    hello = s_recv (front);
    //  The add's own round trip to the provider's thread comes off the 500 ms
    int64_t waited = zclock_mono () - added;
    if (waited < 400)
        fail_msg ("a held provider looked for the broker %" PRId64 " ms after its last add", waited);
    s_expect_head (hello, DSH_HELLO, NULL);
    zmsg_destroy (&hello);

    hello = s_recv (empty_front);
    waited = zclock_mono () - made;
    if (waited < 2000)
        fail_msg ("a held provider with no tools looked for the broker %" PRId64 " ms after it was made", waited);
    s_expect_head (hello, DSH_HELLO, NULL);
    zmsg_destroy (&hello);

    //  Started, it is started: this does nothing
    dsh_provider_start (provider);
    dsh_provider_destroy (&now);
    dsh_provider_destroy (&provider);
    dsh_provider_destroy (&empty);
    zsock_destroy (&now_front);
    zsock_destroy (&front);
    zsock_destroy (&empty_front);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_calls),
        cmocka_unit_test (test_calls_inline),
        cmocka_unit_test (test_malformed),
        cmocka_unit_test (test_cancel_and_overload),
        cmocka_unit_test (test_tools),
        cmocka_unit_test (test_announce_concurrency),
        cmocka_unit_test (test_announce_in_parts),
        cmocka_unit_test (test_changes_announced_together),
        cmocka_unit_test (test_held_starts_by_itself),
    };
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    zsys_shutdown ();
    return rc;
}
