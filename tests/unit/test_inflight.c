/*  =========================================================================
    test_inflight - dsh_inflight: one record per call, found by token, by
    caller and by deadline, answered exactly once through the reply function;
    where a call is changes only by legal moves (an illegal one aborts, in a
    child process); the heap of due times keeps its order through moves,
    answers from the middle, equal deadlines and 100 000 records
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <sys/wait.h>

#include "dsh_inflight.h"

//  What the reply function saw: one entry per answer.
typedef struct {
    int answers;
    char route [64];            //  the last answer's route, frames joined by '|'
    char call_id [64];          //  the last answer's callId
    char code [32];             //  its error code, or ""
} s_replies_t;

static int
s_reply (void *arg, zmq_msg_t *route, size_t route_size, zmq_msg_t *body)
{
    s_replies_t *replies = (s_replies_t *) arg;
    replies->answers++;
    replies->route [0] = 0;
    for (size_t index = 0; index < route_size; index++) {
        size_t used = strlen (replies->route);
        snprintf (replies->route + used, sizeof (replies->route) - used, "%s%.*s", index? "|": "",
                  (int) zmq_msg_size (&route [index]), (const char *) zmq_msg_data (&route [index]));
    }
    char error [128];
    dsh_doc_t *doc = dsh_doc_new (zmq_msg_data (body), zmq_msg_size (body), error, sizeof (error));
    assert_non_null (doc);
    const msgpack_object *root = dsh_doc_root (doc);
    char *call_id = dsh_doc_strdup (doc, dsh_map_get (root, "callId"));
    char *code = dsh_doc_strdup (doc, dsh_map_get (dsh_map_get (root, "error"), "code"));
    snprintf (replies->call_id, sizeof (replies->call_id), "%s", call_id? call_id: "");
    snprintf (replies->code, sizeof (replies->code), "%s", code? code: "");
    dsh_doc_destroy (&doc);
    zmq_msg_close (body);
    return 0;
}

//  A route of one or two frames, as FRONT would have it.
static size_t
s_route (zmq_msg_t *route, const char *first, const char *second)
{
    zmq_msg_init_size (&route [0], strlen (first));
    memcpy (zmq_msg_data (&route [0]), first, strlen (first));
    if (!second)
        return 1;
    zmq_msg_init_size (&route [1], strlen (second));
    memcpy (zmq_msg_data (&route [1]), second, strlen (second));
    return 2;
}

static dsh_record_t *
s_open (dsh_inflight_t *inflight, const char *peer, const char *call_id, int64_t deadline_ms)
{
    zmq_msg_t route [2];
    size_t size = s_route (route, peer, NULL);
    dsh_record_t *record = dsh_inflight_open (inflight, route, size, call_id, "echo", deadline_ms);
    for (size_t index = 0; index < size; index++)
        zmq_msg_close (&route [index]);
    return record;
}

static void
test_open_lookup_answer_once (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    zmq_msg_t route [2];
    size_t size = s_route (route, "peer-A", "proxy-1");
    dsh_record_t *record = dsh_inflight_open (inflight, route, size, "call-1", "read_file", 5000);
    //  The route frames moved into the record
    assert_int_equal (zmq_msg_size (&route [0]), 0);
    assert_non_null (record);
    assert_true (record->token != 0);
    assert_string_equal (record->tool, "read_file");
    assert_int_equal (record->deadline_ms, 5000);
    assert_int_equal (dsh_inflight_where (record), DSH_AT_BROKER);
    assert_int_equal (dsh_inflight_due_ms (record), 5000);
    assert_int_equal (dsh_inflight_size (inflight), 1);
    assert_ptr_equal (dsh_inflight_lookup (inflight, record->token), record);
    assert_null (dsh_inflight_lookup (inflight, record->token + 1));

    uint64_t token = record->token;
    dsh_inflight_answer_error (inflight, &record, "TIMEOUT", "Error: late");
    assert_null (record);
    assert_int_equal (replies.answers, 1);
    assert_string_equal (replies.route, "peer-A|proxy-1");
    assert_string_equal (replies.call_id, "call-1");
    assert_string_equal (replies.code, "TIMEOUT");
    //  Gone from every index: nothing can answer it a second time
    assert_null (dsh_inflight_lookup (inflight, token));
    assert_int_equal (dsh_inflight_size (inflight), 0);
    for (size_t index = 0; index < size; index++)
        zmq_msg_close (&route [index]);
    dsh_inflight_destroy (&inflight);
    dsh_inflight_destroy (&inflight);
}

static void
test_tokens_are_random_and_unique (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    zhashx_t *seen = zhashx_new ();
    uint64_t previous = 0;
    int sequential = 0;
    for (int index = 0; index < 5000; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "call-%d", index);
        dsh_record_t *record = s_open (inflight, "peer", call_id, 1000);
        char key [17];
        dsh_proto_token_hex (record->token, key);
        assert_int_equal (zhashx_insert (seen, key, (void *) 1), 0);
        if (record->token == previous + 1)
            sequential++;
        previous = record->token;
    }
    //  A component that sees one token cannot guess the next
    assert_true (sequential < 5);
    assert_int_equal (dsh_inflight_size (inflight), 5000);
    zhashx_destroy (&seen);
    //  Destroying the table with records in it frees them, answering none
    dsh_inflight_destroy (&inflight);
    assert_int_equal (replies.answers, 0);
}

static void
test_find_caller_newest_wins (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_record_t *first = s_open (inflight, "peer-A", "same", 1000);
    dsh_record_t *other_peer = s_open (inflight, "peer-B", "same", 1000);
    zmq_msg_t route [1];
    s_route (route, "peer-A", NULL);
    assert_ptr_equal (dsh_inflight_find_caller (inflight, route, 1, "same"), first);
    //  The probe gives the route back unchanged
    assert_int_equal (zmq_msg_size (&route [0]), 6);
    assert_null (dsh_inflight_find_caller (inflight, route, 1, "other"));

    //  The same caller reuses a callId still in flight: CANCEL finds the
    //  newest, and the older one is still answerable by token
    dsh_record_t *second = s_open (inflight, "peer-A", "same", 1000);
    assert_ptr_equal (dsh_inflight_find_caller (inflight, route, 1, "same"), second);
    dsh_inflight_answer_error (inflight, &second, "CANCELLED", "Error: cancelled");
    assert_null (dsh_inflight_find_caller (inflight, route, 1, "same"));
    assert_ptr_equal (dsh_inflight_lookup (inflight, first->token), first);
    dsh_inflight_answer_error (inflight, &first, "CANCELLED", "Error: cancelled");
    assert_null (first);
    assert_int_equal (replies.answers, 2);

    zmq_msg_t route_b [1];
    s_route (route_b, "peer-B", NULL);
    assert_ptr_equal (dsh_inflight_find_caller (inflight, route_b, 1, "same"), other_peer);
    zmq_msg_close (&route [0]);
    zmq_msg_close (&route_b [0]);
    dsh_inflight_destroy (&inflight);
}

static void
test_due_and_at_component (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_record_t *late = s_open (inflight, "p", "late", 100);
    dsh_record_t *held = s_open (inflight, "p", "held", 10000);
    dsh_record_t *fine = s_open (inflight, "p", "fine", 10000);
    dsh_inflight_to_chain (held, 0, true, 150);
    snprintf (fine->component, sizeof (fine->component), "fs-1");
    dsh_inflight_to_component (fine);
    snprintf (late->component, sizeof (late->component), "fs-2");
    dsh_inflight_to_component (late);
    assert_int_equal (dsh_inflight_next_due (inflight), 100);

    zlistx_t *due = dsh_inflight_due (inflight, 99);
    assert_int_equal (zlistx_size (due), 0);
    zlistx_destroy (&due);
    //  Soonest first: the deadline at 100, then the stage's limit at 150
    due = dsh_inflight_due (inflight, 200);
    assert_int_equal (zlistx_size (due), 2);
    assert_ptr_equal (zlistx_first (due), late);
    assert_ptr_equal (zlistx_next (due), held);
    zlistx_destroy (&due);

    zlistx_t *at = dsh_inflight_at_component (inflight, "fs-1");
    assert_int_equal (zlistx_size (at), 1);
    assert_ptr_equal (zlistx_first (at), fine);
    zlistx_destroy (&at);
    at = dsh_inflight_at_component (inflight, "nobody");
    assert_int_equal (zlistx_size (at), 0);
    zlistx_destroy (&at);
    dsh_inflight_destroy (&inflight);
    assert_int_equal (dsh_inflight_next_due (inflight = dsh_inflight_new (s_reply, &replies)), INT64_MAX);
    dsh_inflight_destroy (&inflight);
}

//  Every legal move, the way a call goes: where it is, which stage, which
//  way, and when it falls due after each.
static void
test_legal_moves (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_record_t *record = s_open (inflight, "p", "moves", 1000);
    bool down = false;
    //  Into the chain's first stage, and a stage deeper
    dsh_inflight_to_chain (record, 0, true, 300);
    assert_int_equal (dsh_inflight_where (record), DSH_AT_CHAIN);
    assert_int_equal (dsh_inflight_stage (record, &down), 0);
    assert_true (down);
    assert_int_equal (dsh_inflight_due_ms (record), 300);
    //  A stage's limit past the deadline is the deadline
    dsh_inflight_to_chain (record, 2, true, 5000);
    assert_int_equal (dsh_inflight_stage (record, &down), 2);
    assert_int_equal (dsh_inflight_due_ms (record), 1000);
    //  Past the last stage, onto the queue, off it, to a component, and to
    //  another replica
    dsh_inflight_to_broker (record);
    assert_int_equal (dsh_inflight_where (record), DSH_AT_BROKER);
    dsh_inflight_to_queue (record);
    assert_int_equal (dsh_inflight_where (record), DSH_AT_QUEUE);
    dsh_inflight_to_broker (record);
    dsh_inflight_to_component (record);
    assert_int_equal (dsh_inflight_where (record), DSH_AT_COMPONENT);
    dsh_inflight_to_component (record);
    assert_int_equal (dsh_inflight_due_ms (record), 1000);
    //  Its result goes up through the stages passed, outer each time
    dsh_inflight_to_chain (record, 2, false, 400);
    assert_int_equal (dsh_inflight_stage (record, &down), 2);
    assert_false (down);
    assert_int_equal (dsh_inflight_due_ms (record), 400);
    dsh_inflight_to_chain (record, 0, false, 500);
    assert_int_equal (dsh_inflight_stage (record, &down), 0);
    assert_int_equal (dsh_inflight_next_due (inflight), 500);
    dsh_inflight_answer_error (inflight, &record, "TIMEOUT", "Error: late");
    assert_int_equal (dsh_inflight_next_due (inflight), INT64_MAX);

    //  A veto turns a call round where it is; an error at dispatch (past
    //  the last stage) and a queued call's way out go up or back too
    record = s_open (inflight, "p", "veto", 1000);
    dsh_inflight_to_chain (record, 0, true, 300);
    dsh_inflight_to_chain (record, 1, true, 300);
    dsh_inflight_to_chain (record, 0, false, 300);
    dsh_inflight_answer_error (inflight, &record, "DENIED", "Error: vetoed");
    record = s_open (inflight, "p", "bottom", 1000);
    dsh_inflight_to_chain (record, 0, true, 300);
    dsh_inflight_to_broker (record);
    dsh_inflight_to_chain (record, 0, false, 300);
    dsh_inflight_answer_error (inflight, &record, "UNKNOWN_TOOL", "Error: unknown tool");
    assert_int_equal (replies.answers, 3);
    dsh_inflight_destroy (&inflight);
}

typedef void (s_move_fn) (dsh_record_t *record);

static void
s_queue_then_component (dsh_record_t *record)
{
    dsh_inflight_to_queue (record);
    dsh_inflight_to_component (record);
}

static void
s_component_then_queue (dsh_record_t *record)
{
    dsh_inflight_to_component (record);
    dsh_inflight_to_queue (record);
}

static void
s_broker_twice (dsh_record_t *record)
{
    dsh_inflight_to_broker (record);
}

static void
s_up_then_down (dsh_record_t *record)
{
    dsh_inflight_to_chain (record, 0, true, 300);
    dsh_inflight_to_chain (record, 1, true, 300);
    dsh_inflight_to_chain (record, 0, false, 300);
    dsh_inflight_to_chain (record, 1, true, 300);
}

static void
s_down_not_deeper (dsh_record_t *record)
{
    dsh_inflight_to_chain (record, 1, true, 300);
}

static void
s_up_not_outer (dsh_record_t *record)
{
    dsh_inflight_to_chain (record, 0, true, 300);
    dsh_inflight_to_chain (record, 2, true, 300);
    dsh_inflight_to_chain (record, 1, false, 300);
    dsh_inflight_to_chain (record, 1, false, 300);
}

static void
s_chain_then_queue (dsh_record_t *record)
{
    dsh_inflight_to_chain (record, 0, true, 300);
    dsh_inflight_to_queue (record);
}

static void
s_component_then_down (dsh_record_t *record)
{
    dsh_inflight_to_component (record);
    dsh_inflight_to_chain (record, 0, true, 300);
}

//  An illegal move is a programmer's error: the assert stops the process.
//  Each is made in a child, which must die of SIGABRT.
static void
test_illegal_moves_abort (void **state)
{
    (void) state;
    s_move_fn *moves [] = {
        s_queue_then_component, s_component_then_queue, s_broker_twice, s_up_then_down,
        s_down_not_deeper, s_up_not_outer, s_chain_then_queue, s_component_then_down
    };
    for (size_t index = 0; index < sizeof (moves) / sizeof (moves [0]); index++) {
        s_replies_t replies = { 0 };
        dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
        dsh_record_t *record = s_open (inflight, "p", "illegal", 1000);
        fflush (NULL);
        pid_t child = fork ();
        assert_true (child >= 0);
        if (child == 0) {
            //  Its assert message is expected: not shown
            freopen ("/dev/null", "w", stderr);
            moves [index] (record);
            _exit (0);
        }
        int status = 0;
        assert_int_equal (waitpid (child, &status, 0), child);
        if (!WIFSIGNALED (status) || WTERMSIG (status) != SIGABRT)
            fail_msg ("illegal move %zu was not refused", index);
        dsh_inflight_destroy (&inflight);
    }
}

//  A small generator, so a failure repeats.
static uint64_t
s_random (uint64_t *seed)
{
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return *seed;
}

//  Takes every record due at or before now_ms, checks they come soonest
//  first and none is later than now_ms, answers them, and returns how
//  many there were.
static size_t
s_expire (dsh_inflight_t *inflight, int64_t now_ms, int64_t *last_ms)
{
    zlistx_t *due = dsh_inflight_due (inflight, now_ms);
    size_t count = zlistx_size (due);
    for (dsh_record_t *record = zlistx_first (due); record; record = zlistx_next (due)) {
        int64_t due_ms = dsh_inflight_due_ms (record);
        assert_true (due_ms <= now_ms);
        assert_true (due_ms >= *last_ms);
        *last_ms = due_ms;
        dsh_inflight_answer_error (inflight, &record, "TIMEOUT", "Error: late");
    }
    zlistx_destroy (&due);
    //  What is left is all later
    assert_true (dsh_inflight_next_due (inflight) > now_ms);
    return count;
}

//  Records in random order come due in deadline order; moving a record
//  re-keys it both ways; answering one from the middle leaves the rest in
//  order.
static void
test_heap_order_and_removal (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    uint64_t seed = 88172645463325252ULL;
    dsh_record_t *records [1000];
    for (size_t index = 0; index < 1000; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "c%zu", index);
        records [index] = s_open (inflight, "p", call_id, 1000 + (int64_t) (s_random (&seed) % 100000));
    }
    int64_t soonest = INT64_MAX;
    for (size_t index = 0; index < 1000; index++)
        if (records [index]->deadline_ms < soonest)
            soonest = records [index]->deadline_ms;
    assert_int_equal (dsh_inflight_next_due (inflight), soonest);
    //  A stage's limit brings one forward; leaving the stage puts it back
    dsh_inflight_to_chain (records [500], 0, true, 10);
    assert_int_equal (dsh_inflight_next_due (inflight), 10);
    dsh_inflight_to_broker (records [500]);
    assert_int_equal (dsh_inflight_next_due (inflight), soonest);
    //  Answered from the middle: every other index, as results would
    size_t answered = 0;
    for (size_t index = 0; index < 1000; index += 2) {
        dsh_inflight_answer_error (inflight, &records [index], "CANCELLED", "Error: cancelled");
        answered++;
    }
    assert_int_equal (dsh_inflight_size (inflight), 1000 - answered);
    int64_t last_ms = INT64_MIN;
    size_t expired = 0;
    for (int64_t now_ms = 0; now_ms <= 105000; now_ms += 5000)
        expired += s_expire (inflight, now_ms, &last_ms);
    assert_int_equal (expired, 1000 - answered);
    assert_int_equal (dsh_inflight_size (inflight), 0);
    assert_int_equal (dsh_inflight_next_due (inflight), INT64_MAX);
    dsh_inflight_destroy (&inflight);
}

//  Many records with one deadline all come due together, and any of them
//  can be answered first without losing the others.
static void
test_heap_equal_deadlines (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_record_t *records [300];
    for (size_t index = 0; index < 300; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "c%zu", index);
        records [index] = s_open (inflight, "p", call_id, index < 200? 5000: 6000);
    }
    zlistx_t *due = dsh_inflight_due (inflight, 4999);
    assert_int_equal (zlistx_size (due), 0);
    zlistx_destroy (&due);
    //  The first, the last and one between of the equal ones, answered early
    dsh_inflight_answer_error (inflight, &records [0], "CANCELLED", "Error: cancelled");
    dsh_inflight_answer_error (inflight, &records [199], "CANCELLED", "Error: cancelled");
    dsh_inflight_answer_error (inflight, &records [77], "CANCELLED", "Error: cancelled");
    due = dsh_inflight_due (inflight, 5000);
    assert_int_equal (zlistx_size (due), 197);
    for (dsh_record_t *record = zlistx_first (due); record; record = zlistx_next (due))
        assert_int_equal (record->deadline_ms, 5000);
    zlistx_destroy (&due);
    int64_t last_ms = INT64_MIN;
    assert_int_equal (s_expire (inflight, 5000, &last_ms), 197);
    assert_int_equal (dsh_inflight_next_due (inflight), 6000);
    assert_int_equal (s_expire (inflight, 6000, &last_ms), 100);
    assert_int_equal (replies.answers, 300);
    dsh_inflight_destroy (&inflight);
}

//  The broker's limit of calls in flight: finding what is due costs what
//  is due, however many wait. A tick that finds nothing due, and one that
//  finds a hundred, take microseconds with 100 000 records in the table.
static void
test_heap_100000_records (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    size_t count = 100000;
    for (size_t index = 0; index < count; index++) {
        char call_id [32];
        snprintf (call_id, sizeof (call_id), "c%zu", index);
        dsh_record_t *record = s_open (inflight, "p", call_id, 1000 + (int64_t) (s_random (&seed) % 1000000));
        //  A third sit in a stage whose limit comes first
        if (index % 3 == 0)
            dsh_inflight_to_chain (record, 0, true, record->deadline_ms - 500);
    }
    assert_int_equal (dsh_inflight_size (inflight), count);
    int64_t next_ms = dsh_inflight_next_due (inflight);
    //  Ticks with nothing due
    int64_t start_us = zclock_usecs ();
    for (int tick = 0; tick < 1000; tick++) {
        zlistx_t *due = dsh_inflight_due (inflight, next_ms - 1);
        assert_int_equal (zlistx_size (due), 0);
        zlistx_destroy (&due);
    }
    int64_t idle_us = zclock_usecs () - start_us;
    //  Ticks that each answer what came due, about a hundred each
    int64_t last_ms = INT64_MIN;
    size_t expired = 0;
    start_us = zclock_usecs ();
    int ticks = 0;
    for (int64_t now_ms = 0; expired < count; now_ms += 1000, ticks++)
        expired += s_expire (inflight, now_ms, &last_ms);
    int64_t busy_us = zclock_usecs () - start_us;
    assert_int_equal (expired, count);
    assert_int_equal (replies.answers, (int) count);
    print_message ("      100000 records: a tick with nothing due %.2f us; %d ticks answering ~%zu each, "
                   "%.1f us a tick (%.2f us a call)\n", (double) idle_us / 1000, ticks, count / (size_t) ticks,
                   (double) busy_us / ticks, (double) busy_us / (double) count);
    //  Generous: an O(n) scan of 100 000 records takes milliseconds a tick
    assert_true (idle_us / 1000 < 50);
    dsh_inflight_destroy (&inflight);
}

//  A module's slot is its own, and what it keeps there goes with the
//  record: when answered, and when the table is destroyed with it open.
static int s_freed;

static void
s_slot_free (void **state_p)
{
    s_freed++;
    free (*state_p);
    *state_p = NULL;
}

static void
test_slots (void **state)
{
    (void) state;
    s_replies_t replies = { 0 };
    dsh_inflight_t *inflight = dsh_inflight_new (s_reply, &replies);
    dsh_inflight_set_slot_free (inflight, DSH_INFLIGHT_SLOT_CHAIN, s_slot_free);
    s_freed = 0;
    dsh_record_t *answered = s_open (inflight, "p", "a", 1000);
    dsh_record_t *open = s_open (inflight, "p", "b", 1000);
    dsh_record_t *bare = s_open (inflight, "p", "c", 1000);
    assert_null (*dsh_inflight_slot (answered, DSH_INFLIGHT_SLOT_CHAIN));
    assert_null (*dsh_inflight_slot (answered, DSH_INFLIGHT_SLOT_FAIRQ));
    *dsh_inflight_slot (answered, DSH_INFLIGHT_SLOT_CHAIN) = malloc (16);
    *dsh_inflight_slot (open, DSH_INFLIGHT_SLOT_CHAIN) = malloc (16);
    //  A slot with no free function is only a pointer
    *dsh_inflight_slot (bare, DSH_INFLIGHT_SLOT_FAIRQ) = &replies;
    dsh_inflight_answer_error (inflight, &answered, "TIMEOUT", "Error: late");
    assert_int_equal (s_freed, 1);
    dsh_inflight_destroy (&inflight);
    assert_int_equal (s_freed, 2);
}

static void
test_token_frames (void **state)
{
    (void) state;
    zframe_t *frame = dsh_inflight_token_frame (0x0102030405060708ULL);
    assert_int_equal (zframe_size (frame), 8);
    assert_int_equal (zframe_data (frame) [0], 1);
    uint64_t token = 0;
    assert_int_equal (dsh_inflight_token_decode (zframe_data (frame), 8, &token), 0);
    assert_true (token == 0x0102030405060708ULL);
    assert_int_equal (dsh_inflight_token_decode (zframe_data (frame), 7, &token), -1);
    assert_int_equal (dsh_inflight_token_decode (NULL, 8, &token), -1);
    zframe_destroy (&frame);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_open_lookup_answer_once),
        cmocka_unit_test (test_tokens_are_random_and_unique),
        cmocka_unit_test (test_find_caller_newest_wins),
        cmocka_unit_test (test_due_and_at_component),
        cmocka_unit_test (test_legal_moves),
        cmocka_unit_test (test_illegal_moves_abort),
        cmocka_unit_test (test_heap_order_and_removal),
        cmocka_unit_test (test_heap_equal_deadlines),
        cmocka_unit_test (test_heap_100000_records),
        cmocka_unit_test (test_slots),
        cmocka_unit_test (test_token_frames),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
