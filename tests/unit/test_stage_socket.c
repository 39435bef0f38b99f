/*  =========================================================================
    test_stage_socket - an external dsh_stage against a fake hub on loopback

    The test plays the broker's part of an external stage (PROTOCOL.md,
    "Built-in and external stages", "Frames on a slot"): a fake FRONT
    (fake_broker.h) answers the stage's HELLO {stage} with a WELCOME naming
    a slot, and the test binds that slot's feed (a DEALER) and drain (a
    ROUTER) itself and drives them frame by frame. So the socket mode of
    dsh_stage is checked through its public API alone: attach by WELCOME;
    a call passed on byte for byte with its feed id and token, and its
    result sent back up untouched; a veto answered on the feed and never
    passed; a rewrite of the arguments and a meta stamp that keeps every
    other entry, and a watched result rewritten on its way up.

    Every wait has a timeout, so a broken stage fails instead of hanging.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dsh_stage.h"
#include "fake_broker.h"

#define STAGE_NAME          "teststage"

//  What the stage's callbacks saw (they run in the stage's thread).
typedef struct {
    pthread_mutex_t mutex;
    int requests;
    int results;
    char chain_version [32];
} seen_t;

static seen_t s_seen = { .mutex = PTHREAD_MUTEX_INITIALIZER };

//  A msgpack value built by the test.
typedef struct {
    msgpack_sbuffer buffer;
    msgpack_packer pk;
} packed_t;

static void
s_packed_init (packed_t *self)
{
    msgpack_sbuffer_init (&self->buffer);
    msgpack_packer_init (&self->pk, &self->buffer, msgpack_sbuffer_write);
}

//  {message: text}
static void
s_pack_message (msgpack_packer *pk, const char *text)
{
    msgpack_pack_map (pk, 1);
    fake_pack_str (pk, "message");
    fake_pack_str (pk, text);
}

//  A RESULT body whose one text block is text.
static zframe_t *
s_result_frame (const char *call_id, const char *text)
{
    packed_t packed;
    s_packed_init (&packed);
    msgpack_pack_map (&packed.pk, call_id? 3: 2);
    if (call_id) {
        fake_pack_str (&packed.pk, "callId");
        fake_pack_str (&packed.pk, call_id);
    }
    fake_pack_str (&packed.pk, "content");
    msgpack_pack_array (&packed.pk, 1);
    msgpack_pack_map (&packed.pk, 2);
    fake_pack_str (&packed.pk, "type");
    fake_pack_str (&packed.pk, "text");
    fake_pack_str (&packed.pk, "text");
    fake_pack_str (&packed.pk, text);
    fake_pack_str (&packed.pk, "isError");
    msgpack_pack_false (&packed.pk);
    zframe_t *frame = zframe_new (packed.buffer.data, packed.buffer.size);
    msgpack_sbuffer_destroy (&packed.buffer);
    return frame;
}

//  The text of a result's first content block, or NULL.
static const msgpack_object *
s_result_text (const msgpack_object *result)
{
    const msgpack_object *content = fake_map_get (result, "content");
    if (!content || content->type != MSGPACK_OBJECT_ARRAY || content->via.array.size == 0)
        return NULL;
    return fake_map_get (&content->via.array.ptr [0], "text");
}

//  --- The stage --------------------------------------------------------------

static dsh_stage_verdict_t
s_on_request (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    seen_t *seen = (seen_t *) arg;
    pthread_mutex_lock (&seen->mutex);
    seen->requests++;
    const char *version = dsh_stage_call_chain_version (call);
    snprintf (seen->chain_version, sizeof (seen->chain_version), "%s", version? version: "");
    pthread_mutex_unlock (&seen->mutex);
    const char *name = dsh_call_name (call);
    if (streq (name, "veto_me")) {
        dsh_stage_call_answer_error (call, "DENIED", "tool \"%s\" vetoed by %s", name, STAGE_NAME);
        return DSH_STAGE_ANSWER;
    }
    if (streq (name, "rewrite_me")) {
        packed_t packed;
        s_packed_init (&packed);
        s_pack_message (&packed.pk, "rewritten");
        dsh_stage_call_set_arguments (call, packed.buffer.data, packed.buffer.size);
        msgpack_sbuffer_clear (&packed.buffer);
        fake_pack_str (&packed.pk, STAGE_NAME);
        dsh_stage_call_set_meta (call, "stamp", packed.buffer.data, packed.buffer.size);
        msgpack_sbuffer_destroy (&packed.buffer);
        dsh_stage_call_watch_result (call);
    }
    return DSH_STAGE_PASS;
}

//  A watched result goes up with " wrapped" after its text.
static void
s_on_result (dsh_stage_t *stage, dsh_call_t *call, void *arg)
{
    (void) stage;
    seen_t *seen = (seen_t *) arg;
    pthread_mutex_lock (&seen->mutex);
    seen->results++;
    pthread_mutex_unlock (&seen->mutex);
    const msgpack_object *text = s_result_text (dsh_stage_call_result (call));
    char *wrapped = text? zsys_sprintf ("%.*s wrapped", (int) text->via.str.size, text->via.str.ptr)
                        : strdup ("no text wrapped");
    zframe_t *result = s_result_frame (NULL, wrapped);
    dsh_stage_call_set_result (call, &result);
    zstr_free (&wrapped);
}

//  --- The hub ----------------------------------------------------------------

typedef struct {
    fake_broker_t *front;
    zsock_t *feed;              //  the broker's feed: a DEALER, calls down
    zsock_t *drain;             //  the broker's drain: a ROUTER, calls passed on
    dsh_stage_t *stage;
} hub_t;

static int
s_setup (void **state)
{
    hub_t *hub = (hub_t *) zmalloc (sizeof (hub_t));
    hub->front = fake_broker_new ("hub-one");
    hub->feed = zsock_new_dealer (NULL);
    hub->drain = zsock_new_router (NULL);
    assert_int_not_equal (zsock_bind (hub->feed, "tcp://127.0.0.1:*"), -1);
    assert_int_not_equal (zsock_bind (hub->drain, "tcp://127.0.0.1:*"), -1);
    zsock_set_rcvtimeo (hub->feed, FAKE_WAIT_MS);
    zsock_set_sndtimeo (hub->feed, FAKE_WAIT_MS);
    zsock_set_rcvtimeo (hub->drain, FAKE_WAIT_MS);
    zsock_set_sndtimeo (hub->drain, FAKE_WAIT_MS);
    fake_broker_tell (hub->front, "SLOT", zsock_endpoint (hub->feed), zsock_endpoint (hub->drain), NULL);
    dsh_stage_callbacks_t callbacks = { .on_request = s_on_request, .on_result = s_on_result };
    hub->stage = dsh_stage_new (STAGE_NAME, &callbacks, &s_seen);
    assert_non_null (hub->stage);
    assert_int_equal (dsh_stage_attach (hub->stage, hub->front->front, FAKE_WAIT_MS), 0);
    *state = hub;
    return 0;
}

static int
s_teardown (void **state)
{
    hub_t *hub = (hub_t *) *state;
    dsh_stage_destroy (&hub->stage);
    dsh_stage_destroy (&hub->stage);
    zsock_destroy (&hub->feed);
    zsock_destroy (&hub->drain);
    fake_broker_destroy (&hub->front);
    free (hub);
    return 0;
}

//  A CALL body {callId, name, arguments: {message: "hi"}, meta: {keep: "x"}, extra: 7}.
static zframe_t *
s_call_frame (const char *call_id, const char *name)
{
    packed_t packed;
    s_packed_init (&packed);
    msgpack_pack_map (&packed.pk, 5);
    fake_pack_str (&packed.pk, "callId");
    fake_pack_str (&packed.pk, call_id);
    fake_pack_str (&packed.pk, "name");
    fake_pack_str (&packed.pk, name);
    fake_pack_str (&packed.pk, "arguments");
    s_pack_message (&packed.pk, "hi");
    fake_pack_str (&packed.pk, "meta");
    msgpack_pack_map (&packed.pk, 1);
    fake_pack_str (&packed.pk, "keep");
    fake_pack_str (&packed.pk, "x");
    fake_pack_str (&packed.pk, "extra");
    msgpack_pack_uint8 (&packed.pk, 7);
    zframe_t *frame = zframe_new (packed.buffer.data, packed.buffer.size);
    msgpack_sbuffer_destroy (&packed.buffer);
    return frame;
}

//  Sends a call down the feed: [token] "" "DSH1" "CALL" BODY TOOL BUDGET.
static void
s_send_down (hub_t *hub, const char *token, zframe_t *body)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, token, 8);
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "CALL");
    zmsg_addmem (msg, zframe_data (body), zframe_size (body));
    zmsg_addmem (msg, "", 0);                  //  no such tool registered
    byte budget [8] = { 0, 0, 0, 0, 0, 0, 0x13, 0x88 };    //  5000 ms left
    zmsg_addmem (msg, budget, sizeof (budget));
    assert_int_equal (zmsg_send (&msg, hub->feed), 0);
}

//  Reads [token] "" "DSH1" "RESULT" BODY off the feed: the body, after
//  checking the rest.
static zframe_t *
s_recv_up (hub_t *hub, const char *token)
{
    zmsg_t *msg = zmsg_recv (hub->feed);
    assert_non_null (msg);
    assert_int_equal (zmsg_size (msg), 5);
    zframe_t *frame = zmsg_first (msg);
    assert_int_equal (zframe_size (frame), 8);
    assert_memory_equal (zframe_data (frame), token, 8);
    assert_true (zframe_streq (zmsg_next (msg), ""));
    assert_true (zframe_streq (zmsg_next (msg), "DSH1"));
    assert_true (zframe_streq (zmsg_next (msg), "RESULT"));
    zframe_t *body = zframe_dup (zmsg_next (msg));
    zmsg_destroy (&msg);
    return body;
}

//  Reads a call the stage passed off the drain: [stage-id] [feed-id]
//  [token] "" "DSH1" "CALL" BODY ...; returns the message, the body its
//  7th frame.
static zmsg_t *
s_recv_passed (hub_t *hub, const char *token)
{
    zmsg_t *msg = zmsg_recv (hub->drain);
    assert_non_null (msg);
    assert_true (zmsg_size (msg) >= 7);
    zframe_t *frame = zmsg_first (msg);             //  the stage's DEALER
    frame = zmsg_next (msg);                        //  the feed id, as the stage's ROUTER pushed it
    frame = zmsg_next (msg);
    assert_int_equal (zframe_size (frame), 8);
    assert_memory_equal (zframe_data (frame), token, 8);
    assert_true (zframe_streq (zmsg_next (msg), ""));
    assert_true (zframe_streq (zmsg_next (msg), "DSH1"));
    assert_true (zframe_streq (zmsg_next (msg), "CALL"));
    return msg;
}

//  The frame of msg at index (0: the first).
static zframe_t *
s_frame_at (zmsg_t *msg, size_t index)
{
    zframe_t *frame = zmsg_first (msg);
    while (frame && index--)
        frame = zmsg_next (msg);
    return frame;
}

//  Sends a result up the drain to the stage, along the envelope of passed.
static void
s_send_result_up (hub_t *hub, zmsg_t *passed, zframe_t **result_p)
{
    zmsg_t *msg = zmsg_new ();
    for (size_t index = 0; index < 3; index++)
        zmsg_addmem (msg, zframe_data (s_frame_at (passed, index)), zframe_size (s_frame_at (passed, index)));
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, "DSH1");
    zmsg_addstr (msg, "RESULT");
    zmsg_append (msg, result_p);
    assert_int_equal (zmsg_send (&msg, hub->drain), 0);
}

static void
s_unpack (msgpack_unpacked *unpacked, zframe_t *frame)
{
    msgpack_unpacked_init (unpacked);
    assert_int_equal (msgpack_unpack_next (unpacked, (const char *) zframe_data (frame), zframe_size (frame), NULL),
                      MSGPACK_UNPACK_SUCCESS);
    assert_int_equal (unpacked->data.type, MSGPACK_OBJECT_MAP);
}

static void
test_welcome (void **state)
{
    hub_t *hub = (hub_t *) *state;
    //  The stage said HELLO {stage: its name}, and took the slot the
    //  WELCOME named (setup attached it; the calls below go through it)
    zframe_t *hello = fake_broker_last (hub->front, "HELLO");
    assert_non_null (hello);
    msgpack_unpacked body;
    s_unpack (&body, hello);
    assert_true (fake_is_str (fake_map_get (&body.data, "stage"), STAGE_NAME));
    msgpack_unpacked_destroy (&body);
    zframe_destroy (&hello);
    assert_string_equal (dsh_stage_name (hub->stage), STAGE_NAME);
    //  It follows the broker: PINGs on its FRONT
    assert_true (fake_broker_wait_count (hub->front, "PING", 1) >= 1);
}

static void
test_pass (void **state)
{
    hub_t *hub = (hub_t *) *state;
    const char token [8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    zframe_t *call = s_call_frame ("call-pass", "pass_me");
    s_send_down (hub, token, call);
    //  Passed on untouched: the body byte for byte
    zmsg_t *passed = s_recv_passed (hub, token);
    assert_true (zframe_eq (s_frame_at (passed, 6), call));
    pthread_mutex_lock (&s_seen.mutex);
    assert_string_equal (s_seen.chain_version, FAKE_CHAIN_VERSION);
    pthread_mutex_unlock (&s_seen.mutex);
    //  Its result goes back up as it came: the stage does not watch it
    zframe_t *result = s_result_frame ("call-pass", "from the tool");
    zframe_t *sent = zframe_dup (result);
    s_send_result_up (hub, passed, &result);
    zframe_t *up = s_recv_up (hub, token);
    assert_true (zframe_eq (up, sent));
    zframe_destroy (&up);
    zframe_destroy (&sent);
    zmsg_destroy (&passed);
    zframe_destroy (&call);
}

static void
test_veto (void **state)
{
    hub_t *hub = (hub_t *) *state;
    const char token [8] = { 9, 9, 9, 9, 0, 0, 0, 1 };
    zframe_t *call = s_call_frame ("call-veto", "veto_me");
    s_send_down (hub, token, call);
    zframe_t *up = s_recv_up (hub, token);
    msgpack_unpacked result;
    s_unpack (&result, up);
    assert_true (fake_is_str (fake_map_get (&result.data, "callId"), "call-veto"));
    const msgpack_object *is_error = fake_map_get (&result.data, "isError");
    assert_non_null (is_error);
    assert_true (is_error->type == MSGPACK_OBJECT_BOOLEAN && is_error->via.boolean);
    assert_true (fake_is_str (fake_map_get (fake_map_get (&result.data, "error"), "code"), "DENIED"));
    assert_true (fake_is_str (s_result_text (&result.data), "Error: tool \"veto_me\" vetoed by " STAGE_NAME));
    msgpack_unpacked_destroy (&result);
    zframe_destroy (&up);
    //  And nothing went on down
    zpoller_t *poller = zpoller_new (hub->drain, NULL);
    assert_null (zpoller_wait (poller, 300));
    zpoller_destroy (&poller);
    zframe_destroy (&call);
}

static void
test_rewrite (void **state)
{
    hub_t *hub = (hub_t *) *state;
    const char token [8] = { 7, 7, 7, 7, 7, 7, 7, 7 };
    zframe_t *call = s_call_frame ("call-rewrite", "rewrite_me");
    s_send_down (hub, token, call);
    zmsg_t *passed = s_recv_passed (hub, token);
    msgpack_unpacked body;
    s_unpack (&body, s_frame_at (passed, 6));
    const msgpack_object *head = &body.data;
    //  What a stage may change, changed; the rest as the caller sent it
    assert_true (fake_is_str (fake_map_get (head, "callId"), "call-rewrite"));
    assert_true (fake_is_str (fake_map_get (head, "name"), "rewrite_me"));
    assert_true (fake_is_str (fake_map_get (fake_map_get (head, "arguments"), "message"), "rewritten"));
    assert_true (fake_is_str (fake_map_get (fake_map_get (head, "meta"), "keep"), "x"));
    assert_true (fake_is_str (fake_map_get (fake_map_get (head, "meta"), "stamp"), STAGE_NAME));
    const msgpack_object *extra = fake_map_get (head, "extra");
    assert_non_null (extra);
    assert_int_equal (extra->via.u64, 7);
    msgpack_unpacked_destroy (&body);

    //  The stage watches this call's result and wraps it on the way up
    zframe_t *result = s_result_frame ("call-rewrite", "from the tool");
    s_send_result_up (hub, passed, &result);
    zframe_t *up = s_recv_up (hub, token);
    msgpack_unpacked wrapped;
    s_unpack (&wrapped, up);
    assert_true (fake_is_str (fake_map_get (&wrapped.data, "callId"), "call-rewrite"));
    assert_true (fake_is_str (s_result_text (&wrapped.data), "from the tool wrapped"));
    msgpack_unpacked_destroy (&wrapped);
    zframe_destroy (&up);
    pthread_mutex_lock (&s_seen.mutex);
    assert_int_equal (s_seen.results, 1);
    pthread_mutex_unlock (&s_seen.mutex);
    zmsg_destroy (&passed);
    zframe_destroy (&call);
}

int
main (void)
{
    zsys_init ();
    zsys_set_logstream (stderr);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test_setup_teardown (test_welcome, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_pass, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_veto, s_setup, s_teardown),
        cmocka_unit_test_setup_teardown (test_rewrite, s_setup, s_teardown),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
