/*  =========================================================================
    test_watch - watchers against a registry in churn, with real component
    processes coming and going (clean exits and kill -9)

    A watcher that was there from the start and one that joins in the
    middle of the churn both end with the broker's exact tool list, and
    after each one's last snapshot every event is there, in order, once.
    `dsh watch --count N` prints the snapshot and N events as JSON lines.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <signal.h>

#include "dsh.h"
#include "dsh_testkit.h"

#define DEMO        "components/demo/dsh-demo"
#define RUNNING_MAX 4

//  A watcher and every notice it gave, in order.
typedef struct {
    dsh_watcher_t *watcher;
    json_t *notices;
} watched_t;

static watched_t *
s_watched_new (const char *endpoint)
{
    watched_t *self = (watched_t *) zmalloc (sizeof (watched_t));
    self->watcher = dsh_watcher_new (endpoint);
    assert_non_null (self->watcher);
    self->notices = json_array ();
    return self;
}

static void
s_watched_destroy (watched_t **self_p)
{
    watched_t *self = *self_p;
    dsh_watcher_destroy (&self->watcher);
    json_decref (self->notices);
    free (self);
    *self_p = NULL;
}

//  Collects the notices that arrive within timeout_ms (keeps the watcher's
//  pipe from filling while the registry churns).
static void
s_watched_drain (watched_t *self, int timeout_ms)
{
    json_t *notice = dsh_watcher_recv (self->watcher, timeout_ms);
    while (notice) {
        json_array_append_new (self->notices, notice);
        notice = dsh_watcher_recv (self->watcher, 0);
    }
}

static bool
s_is_snapshot (json_t *notice)
{
    const char *kind = json_string_value (json_object_get (notice, "kind"));
    return kind && streq (kind, "snapshot");
}

//  After the last snapshot, every event follows the one before it.
static void
s_assert_gap_free (watched_t *self, const char *who)
{
    size_t last_snapshot = SIZE_MAX;
    for (size_t index = 0; index < json_array_size (self->notices); index++)
        if (s_is_snapshot (json_array_get (self->notices, index)))
            last_snapshot = index;
    if (last_snapshot == SIZE_MAX)
        fail_msg ("watcher %s never had a snapshot", who);
    json_int_t seq = json_integer_value (json_object_get (json_array_get (self->notices, last_snapshot), "seq"));
    for (size_t index = last_snapshot + 1; index < json_array_size (self->notices); index++) {
        json_t *event = json_array_get (self->notices, index);
        json_int_t next = json_integer_value (json_object_get (event, "seq"));
        if (next != seq + 1)
            fail_msg ("watcher %s: event %lld follows %lld", who, (long long) next, (long long) seq);
        seq = next;
    }
    assert_int_equal ((uint64_t) seq, dsh_watcher_seq (self->watcher));
}

//  True if every name starts with the prefix of a running component, and
//  every running component has a name.
static bool
s_only_running (json_t *names, char prefixes [][32])
{
    size_t covered [RUNNING_MAX] = { 0 };
    for (size_t index = 0; index < json_array_size (names); index++) {
        const char *name = json_string_value (json_array_get (names, index));
        bool found = false;
        for (size_t slot = 0; slot < RUNNING_MAX && !found; slot++)
            if (*prefixes [slot] && strncmp (name, prefixes [slot], strlen (prefixes [slot])) == 0) {
                covered [slot]++;
                found = true;
            }
        if (!found)
            return false;
    }
    for (size_t slot = 0; slot < RUNNING_MAX; slot++)
        if (*prefixes [slot] && !covered [slot])
            return false;
    return true;
}

//  The broker's tool names (LIST), in order, and its latest event's seq.
static json_t *
s_listed_names (dsh_client_t *client, uint64_t *seq)
{
    char error [256];
    dsh_reply_t *reply = dsh_client_request (client, DSH_LIST, NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    json_t *body = dsh_reply_json (reply);
    dsh_reply_destroy (&reply);
    *seq = (uint64_t) json_integer_value (json_object_get (body, "seq"));
    json_t *names = json_array ();
    json_t *tools = json_object_get (body, "tools");
    for (size_t index = 0; index < json_array_size (tools); index++)
        json_array_append (names, json_object_get (json_array_get (tools, index), "name"));
    json_decref (body);
    return names;
}

static void
test_late_watcher_is_gap_free (void **state)
{
    (void) state;
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (200, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    watched_t *early = s_watched_new (endpoint);
    watched_t *late = NULL;
    dsh_testproc_t *running [RUNNING_MAX] = { NULL };
    char prefixes [RUNNING_MAX][32] = { "" };

    //  Churn: components start with distinct prefixes; the oldest one is
    //  stopped, alternately by SIGTERM (withdraws) and SIGKILL (expires)
    int started = 0, stopped = 0;
    int64_t churn_end = zclock_mono () + 4000;
    int64_t late_start = zclock_mono () + 1800;
    while (zclock_mono () < churn_end) {
        size_t slot = (size_t) started % RUNNING_MAX;
        if (running [slot]) {
            dsh_testproc_signal (running [slot], stopped % 2? SIGKILL: SIGTERM);
            dsh_testproc_wait (running [slot], 5000);
            dsh_testproc_destroy (&running [slot]);
            stopped++;
        }
        char id [32];
        snprintf (id, sizeof (id), "churn-%d", started);
        snprintf (prefixes [slot], sizeof (prefixes [slot]), "c%d_", started);
        running [slot] = dsh_testkit_component (DEMO, endpoint, id,
                                                (const char *[]) { "--prefix", prefixes [slot], NULL });
        assert_non_null (running [slot]);
        started++;
        s_watched_drain (early, 50);
        if (late)
            s_watched_drain (late, 50);
        else
        if (zclock_mono () >= late_start)
            late = s_watched_new (endpoint);
    }
    assert_non_null (late);
    assert_true (started >= 6);
    assert_true (stopped >= 2);

    //  Settle: the killed ones expire; the watchers catch up with the broker
    dsh_client_t *client = dsh_client_new (endpoint);
    int64_t give_up = zclock_mono () + 10000;
    json_t *names = NULL;
    uint64_t seq = 0;
    bool settled = false;
    while (!settled && zclock_mono () < give_up) {
        s_watched_drain (early, 200);
        s_watched_drain (late, 200);
        json_decref (names);
        names = s_listed_names (client, &seq);
        //  Only the running components' tools left, and both watchers there
        settled = s_only_running (names, prefixes)
               && dsh_watcher_seq (early->watcher) == seq
               && dsh_watcher_seq (late->watcher) == seq;
    }
    assert_true (settled);
    //  Still the same a moment later: nothing was in flight. (A pause, not
    //  a wait: what is tested is that nothing comes in it.)
    zclock_sleep (500);
    s_watched_drain (early, 0);
    s_watched_drain (late, 0);
    json_decref (names);
    names = s_listed_names (client, &seq);
    assert_int_equal (dsh_watcher_seq (early->watcher), seq);

    json_t *early_tools = dsh_watcher_tools (early->watcher);
    json_t *late_tools = dsh_watcher_tools (late->watcher);
    assert_true (json_equal (early_tools, names));
    assert_true (json_equal (late_tools, names));
    json_decref (early_tools);
    json_decref (late_tools);
    s_assert_gap_free (early, "early");
    s_assert_gap_free (late, "late");
    //  The early watcher saw the churn from its start, events included
    assert_true (json_array_size (early->notices) > (size_t) started);

    json_decref (names);
    dsh_client_destroy (&client);
    for (size_t slot = 0; slot < RUNNING_MAX; slot++)
        dsh_testproc_destroy (&running [slot]);
    s_watched_destroy (&early);
    s_watched_destroy (&late);
    dsh_testproc_destroy (&broker);
}

static void
test_cli_watch_count (void **state)
{
    (void) state;
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (200, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    dsh_testproc_t *first = dsh_testkit_component (DEMO, endpoint, "first", NULL);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "", DSH_TESTKIT_DEMO_TOOLS, 5000), 0);

    const char *argv [] = { "components/cli/dsh", "--broker", endpoint, "watch", "--count", "3", NULL };
    dsh_testproc_t *watch = dsh_testproc_start (argv);
    assert_non_null (watch);
    char *line = dsh_testproc_wait_line (watch, "\"snapshot\"", 10000);
    assert_non_null (line);
    zstr_free (&line);
    //  A registration per tool and a join: more than the three it waits for
    dsh_testproc_t *second = dsh_testkit_component (DEMO, endpoint, "second", (const char *[]) { "--prefix", "b_", NULL });
    assert_non_null (second);
    assert_int_equal (dsh_testproc_wait (watch, 10000), 0);

    const char *output = dsh_testproc_output (watch, 1000);
    char *copy = strdup (output);
    size_t lines = 0;
    json_int_t seq = -1;
    char *saved = NULL;
    for (char *text = strtok_r (copy, "\n", &saved); text; text = strtok_r (NULL, "\n", &saved)) {
        json_error_t error;
        json_t *notice = json_loads (text, 0, &error);
        if (!notice)
            fail_msg ("not a JSON line: %s", text);
        //  Compact: one object per line, no spaces after separators
        assert_null (strstr (text, "\": "));
        json_int_t next = json_integer_value (json_object_get (notice, "seq"));
        if (lines == 0)
            assert_true (s_is_snapshot (notice));
        else {
            assert_false (s_is_snapshot (notice));
            assert_int_equal (next, seq + 1);
            assert_memory_equal (json_string_value (json_object_get (notice, "name")), "b_", 2);
        }
        seq = next;
        lines++;
        json_decref (notice);
    }
    assert_int_equal (lines, 4);
    free (copy);
    dsh_testproc_destroy (&watch);
    dsh_testproc_destroy (&second);
    dsh_testproc_destroy (&first);
    dsh_testproc_destroy (&broker);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_late_watcher_is_gap_free),
        cmocka_unit_test (test_cli_watch_count),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
