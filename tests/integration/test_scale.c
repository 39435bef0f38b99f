/*  =========================================================================
    test_scale - a broker under a storm of resynchronising watchers

    300 peers ask for a SNAPSHOT of 4 000 tools three times each, at once,
    while 20 components heartbeat every 500 ms (so 1.5 s without their
    heartbeats heard would expire them, and 1.5 s without an answer on WORK
    would make them find the broker again: a 200 ms heartbeat left too
    little room on a CI machine running the sanitizer suites beside). Every request gets exactly one
    reply: a peer's last request a SNAPSHOT of the whole catalog, its
    earlier ones a SNAPSHOT or, if a later one took their turn in the
    queue, an ERROR OVERLOADED; and no live component expires.
    The full size (1 000 watchers, 10 000 tools, churn) is the swarm
    bench's (tests/bench/RESULTS.md).
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dsh_client.h"
#include "dsh_provider.h"
#include "dsh_proto.h"
#include "dsh_testkit.h"

#define COMPONENTS      20
#define TOOLS           200     //  per component
#define PEERS           300
#define REQUESTS        3       //  per peer, sent at once

static int
s_answer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "ok");
    return 0;
}

//  What one reply says: its command, the id it answers, and for a
//  SNAPSHOT the number of tools, for an ERROR its code.
typedef struct {
    char command [16];
    uint64_t id;
    size_t tools;
    char code [32];
} s_reply_t;

static int
s_read_reply (zsock_t *dealer, s_reply_t *reply)
{
    zmsg_t *msg = zmsg_recv (dealer);
    if (!msg)
        return -1;
    memset (reply, 0, sizeof (*reply));
    //  "" DSH1 COMMAND BODY
    int rc = -1;
    if (zmsg_size (msg) == 4) {
        for (int frame = 0; frame < 2; frame++) {
            zframe_t *head = zmsg_pop (msg);
            zframe_destroy (&head);
        }
        char *command = zmsg_popstr (msg);
        snprintf (reply->command, sizeof (reply->command), "%s", command? command: "");
        zstr_free (&command);
        zframe_t *body = zmsg_first (msg);
        char reason [256];
        dsh_doc_t *doc = dsh_doc_new (zframe_data (body), zframe_size (body), reason, sizeof (reason));
        if (doc) {
            const msgpack_object *root = dsh_doc_root (doc);
            const msgpack_object *id = dsh_map_get (root, "id");
            const msgpack_object *tools = dsh_map_get (root, "tools");
            const msgpack_object *code = dsh_map_get (root, "code");
            if (id && id->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                reply->id = id->via.u64;
            if (tools && tools->type == MSGPACK_OBJECT_ARRAY)
                reply->tools = tools->via.array.size;
            if (code && code->type == MSGPACK_OBJECT_STR)
                snprintf (reply->code, sizeof (reply->code), "%.*s", (int) code->via.str.size, code->via.str.ptr);
            rc = 0;
        }
        dsh_doc_destroy (&doc);
    }
    zmsg_destroy (&msg);
    return rc;
}

static void
s_send_snapshot (zsock_t *dealer, uint64_t id)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    dsh_packer_map_begin (&packer);
    dsh_pack_cstr (&packer.pk, "id");
    msgpack_pack_uint64 (&packer.pk, id);
    dsh_packer_map_end (&packer);
    zframe_t *body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, "");
    zmsg_addstr (msg, DSH_PROTOCOL);
    zmsg_addstr (msg, DSH_SNAPSHOT);
    zmsg_append (msg, &body);
    assert_int_equal (zmsg_send (&msg, dealer), 0);
}

//  Expired components, as the events say: component.left with reason
//  "expired".
static size_t
s_count_expired (zsock_t *sub)
{
    size_t expired = 0;
    zmsg_t *event;
    while ((event = zmsg_recv_nowait (sub))) {
        char *kind = zmsg_popstr (event);
        zframe_t *body = zmsg_first (event);
        char reason [256];
        dsh_doc_t *doc = body? dsh_doc_new (zframe_data (body), zframe_size (body), reason, sizeof (reason)): NULL;
        const msgpack_object *why = doc? dsh_map_get (dsh_doc_root (doc), "reason"): NULL;
        if (kind && streq (kind, "component.left") && why && why->type == MSGPACK_OBJECT_STR
        &&  why->via.str.size == 7 && memcmp (why->via.str.ptr, "expired", 7) == 0)
            expired++;
        dsh_doc_destroy (&doc);
        zstr_free (&kind);
        zmsg_destroy (&event);
    }
    return expired;
}

static void
test_snapshot_storm (void **state)
{
    (void) state;
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (500, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    zsock_t *sub = dsh_testkit_events (endpoint, "", NULL, 10000);
    assert_non_null (sub);

    dsh_provider_t *providers [COMPONENTS];
    for (int component = 0; component < COMPONENTS; component++) {
        char id [32];
        snprintf (id, sizeof (id), "storm-%02d", component);
        providers [component] = dsh_provider_new (endpoint, id, 1);
        assert_non_null (providers [component]);
        for (int tool = 0; tool < TOOLS; tool++) {
            char *entry = zsys_sprintf ("{\"name\":\"c%02d_t%03d\",\"description\":\"a tool of the storm test, "
                                        "long enough to make a snapshot of some size\",\"parameters\":"
                                        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}}}}",
                                        component, tool);
            assert_int_equal (dsh_provider_add_raw (providers [component], entry, s_answer, NULL), 0);
            zstr_free (&entry);
        }
        dsh_provider_start (providers [component]);
    }
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "c", COMPONENTS * TOOLS, 30000), 0);

    zsock_t *peers [PEERS];
    zpoller_t *poller = zpoller_new (NULL);
    for (int peer = 0; peer < PEERS; peer++) {
        peers [peer] = zsock_new (ZMQ_DEALER);
        zsock_set_rcvhwm (peers [peer], 0);
        assert_int_equal (zsock_connect (peers [peer], "%s", endpoint), 0);
        zpoller_add (poller, peers [peer]);
    }
    for (int peer = 0; peer < PEERS; peer++)
        for (int request = 1; request <= REQUESTS; request++)
            s_send_snapshot (peers [peer], (uint64_t) request);

    size_t replies [PEERS] = { 0 };
    size_t snapshots = 0, overloaded = 0, answered = 0;
    int64_t give_up = zclock_mono () + 120000;
    while (answered < PEERS * REQUESTS && zclock_mono () < give_up) {
        zsock_t *ready = (zsock_t *) zpoller_wait (poller, 1000);
        if (!ready)
            continue;
        int peer = 0;
        while (peers [peer] != ready)
            peer++;
        s_reply_t reply;
        assert_int_equal (s_read_reply (ready, &reply), 0);
        replies [peer]++;
        answered++;
        if (streq (reply.command, DSH_SNAPSHOT)) {
            assert_int_equal (reply.tools, COMPONENTS * TOOLS);
            snapshots++;
        }
        else {
            if (!streq (reply.command, DSH_ERROR) || !streq (reply.code, DSH_E_OVERLOADED))
                fail_msg ("peer %d: %s %s for request %" PRIu64, peer, reply.command, reply.code, reply.id);
            //  Only a request a later one replaced
            assert_true (reply.id < REQUESTS);
            overloaded++;
        }
    }
    print_message ("%zu SNAPSHOT, %zu OVERLOADED\n", snapshots, overloaded);
    //  Exactly one reply each: none missing, and none more within a while
    for (int peer = 0; peer < PEERS; peer++)
        assert_int_equal (replies [peer], REQUESTS);
    assert_null (zpoller_wait (poller, 500));
    assert_true (snapshots >= PEERS);

    //  Every component lived through it, and through the checks after it:
    //  no event can show an expiry that did not happen, so the test gives
    //  one its chance, a liveness window (1.5 s) and a check (500 ms)
    zclock_sleep (2000);
    assert_int_equal (s_count_expired (sub), 0);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "c", COMPONENTS * TOOLS, 5000), 0);

    zpoller_destroy (&poller);
    for (int peer = 0; peer < PEERS; peer++)
        zsock_destroy (&peers [peer]);
    for (int component = 0; component < COMPONENTS; component++)
        dsh_provider_destroy (&providers [component]);
    zsock_destroy (&sub);
    dsh_testproc_destroy (&broker);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_snapshot_storm),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
