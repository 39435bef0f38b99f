/*  =========================================================================
    test_limits - what a peer can make the broker hold or write is bounded:
    a tool entry over max_tool_bytes, or past a component's max_tools, is
    refused with REFUSED naming the tool while the component's other tools
    register; a burst of events far beyond a queue sized on the largest
    event reaches a subscriber that was not reading, without a gap;
    a flood of garbage on WORK writes a bounded number of log lines, with
    the count of what was suppressed; a tool set larger than a message
    is announced in parts and applied once whole
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

static int
s_answer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_text (result, "ok");
    return 0;
}

//  A raw tool entry named name whose description is description_bytes long.
static char *
s_entry (const char *name, size_t description_bytes)
{
    char *description = (char *) zmalloc (description_bytes + 1);
    memset (description, 'd', description_bytes);
    char *entry = zsys_sprintf ("{\"name\":\"%s\",\"description\":\"%s\",\"parameters\":{\"type\":\"object\"}}",
                                name, description);
    free (description);
    return entry;
}

static void
s_add (dsh_provider_t *provider, const char *name, size_t description_bytes)
{
    char *entry = s_entry (name, description_bytes);
    assert_int_equal (dsh_provider_add_raw (provider, entry, s_answer, NULL), 0);
    zstr_free (&entry);
}

static void
test_tool_entry_cap (void **state)
{
    (void) state;
    char endpoint [256];
    const char *extra [] = { "--max-tool-bytes", "4096", NULL };
    dsh_testproc_t *broker = dsh_testkit_broker (200, extra, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    dsh_provider_t *provider = dsh_provider_new (endpoint, "big", 1);
    assert_non_null (provider);
    s_add (provider, "small_first", 100);
    s_add (provider, "too_big", 5000);
    s_add (provider, "small_last", 100);
    dsh_provider_start (provider);
    char *refusal = dsh_provider_refusal (provider, 5000);
    assert_non_null (refusal);
    //  "tool: reason": the REFUSED names the tool, and says why
    assert_non_null (strstr (refusal, "too_big: tool \"too_big\" is "));
    assert_non_null (strstr (refusal, "bytes, over the broker's 4096-byte limit on a tool entry (max_tool_bytes)"));
    zstr_free (&refusal);
    //  The component's other tools register; the big one does not
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "small_", 2, 5000), 0);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "too_big", 0, 5000), 0);
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, "small_last", "{}", NULL, 5000, error, sizeof (error));
    assert_non_null (reply);
    assert_string_equal (dsh_reply_text (reply), "ok");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    dsh_provider_destroy (&provider);
    dsh_testproc_destroy (&broker);
}

static void
test_tool_count_cap (void **state)
{
    (void) state;
    char endpoint [256];
    const char *extra [] = { "--max-tools", "3", NULL };
    dsh_testproc_t *broker = dsh_testkit_broker (200, extra, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    dsh_provider_t *provider = dsh_provider_new (endpoint, "many", 1);
    assert_non_null (provider);
    char name [32];
    for (int index = 0; index < 5; index++) {
        snprintf (name, sizeof (name), "many_%d", index);
        s_add (provider, name, 10);
    }
    dsh_provider_start (provider);
    char *refusal = dsh_provider_refusal (provider, 5000);
    assert_non_null (refusal);
    assert_non_null (strstr (refusal, "is over the broker's limit of 3 tools a component may provide (max_tools)"));
    zstr_free (&refusal);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "many_", 3, 5000), 0);
    dsh_provider_destroy (&provider);
    dsh_testproc_destroy (&broker);
}

//  The seq of an event [kind, body], or 0.
static uint64_t
s_event_seq (zmsg_t *event)
{
    zframe_t *body = zmsg_last (event);
    char reason [256];
    dsh_doc_t *doc = body? dsh_doc_new (zframe_data (body), zframe_size (body), reason, sizeof (reason)): NULL;
    const msgpack_object *seq = doc? dsh_map_get (dsh_doc_root (doc), "seq"): NULL;
    uint64_t value = seq && seq->type == MSGPACK_OBJECT_POSITIVE_INTEGER? seq->via.u64: 0;
    dsh_doc_destroy (&doc);
    return value;
}

//  The seq of the broker's latest event (PING), or 0.
static uint64_t
s_broker_seq (const char *endpoint)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    dsh_reply_t *pong = dsh_client_request (client, DSH_PING, NULL, 5000, error, sizeof (error));
    const msgpack_object *seq = pong? dsh_map_get (dsh_reply_body (pong), "seq"): NULL;
    uint64_t value = seq && seq->type == MSGPACK_OBJECT_POSITIVE_INTEGER? seq->via.u64: 0;
    dsh_reply_destroy (&pong);
    dsh_client_destroy (&client);
    return value;
}

static void
s_expect_text (const char *endpoint, const char *tool)
{
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, tool, "{}", NULL, 5000, error, sizeof (error));
    if (!reply)
        fail_msg ("%s: %s", tool, error);
    assert_string_equal (dsh_reply_text (reply), "ok");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
}

//  A tool set larger than the broker's messages goes in parts, and is
//  applied once whole, as one ANNOUNCE: 200 tools of about 1 kB under a
//  64 KiB message limit (four parts) all register, with one event each
//  and one component.joined; a tool too large for a message of its own
//  is not sent
static void
test_announce_in_parts (void **state)
{
    (void) state;
    char endpoint [256];
    const char *extra [] = { "--max-message-bytes", "65536", NULL };
    dsh_testproc_t *broker = dsh_testkit_broker (200, extra, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    uint64_t last = 0;
    zsock_t *sub = dsh_testkit_events (endpoint, "", &last, 10000);
    assert_non_null (sub);

    dsh_provider_t *provider = dsh_provider_new (endpoint, "parted", 1);
    assert_non_null (provider);
    const size_t tools = 200;
    for (size_t index = 0; index < tools; index++) {
        char name [32];
        snprintf (name, sizeof (name), "parted_%03zu", index);
        s_add (provider, name, 1000);
        if (index == tools / 2)
            s_add (provider, "oversized", 70000);
    }
    dsh_provider_start (provider);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "parted_", tools, 10000), 0);

    //  Every event up to the broker's latest: one per tool, one join
    uint64_t latest = s_broker_seq (endpoint);
    size_t registered = 0, joined = 0, other = 0;
    zsock_set_rcvtimeo (sub, 5000);
    while (last < latest) {
        zmsg_t *event = zmsg_recv (sub);
        assert_non_null (event);
        char *kind = zmsg_popstr (event);
        uint64_t seq = s_event_seq (event);
        assert_int_equal (seq, last + 1);
        last = seq;
        if (streq (kind, DSH_EV_REGISTERED))
            registered++;
        else
        if (streq (kind, DSH_EV_JOINED))
            joined++;
        else
            other++;
        zstr_free (&kind);
        zmsg_destroy (&event);
    }
    assert_int_equal (registered, tools);
    assert_int_equal (joined, 1);
    assert_int_equal (other, 0);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "oversized", 0, 1000), 0);
    s_expect_text (endpoint, "parted_000");
    s_expect_text (endpoint, "parted_199");
    //  The set again (the provider's next SYNC, say) changes nothing
    assert_int_equal (s_broker_seq (endpoint), latest);

    dsh_provider_destroy (&provider);
    zsock_destroy (&sub);
    dsh_testproc_destroy (&broker);
}

//  A burst of change events far larger than a queue sized on the largest
//  event the limits allow (250 events, the rule before) reaches a
//  subscriber that read nothing while it came, without a gap: the queue
//  is sized on a typical event (8192 by default). The burst: a
//  component of 1 000 tools of 8 kB joins and leaves (2 002 events,
//  16 MB), more than the kernel's socket buffers hold.
static void
test_events_burst (void **state)
{
    (void) state;
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (200, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    char *line = dsh_testproc_wait_line (broker, "events queue", 5000);
    assert_non_null (line);
    assert_non_null (strstr (line, "events queue 8192 events per subscriber"));
    zstr_free (&line);
    uint64_t last = 0;
    zsock_t *sub = dsh_testkit_events (endpoint, "", &last, 10000);
    assert_non_null (sub);
    zmsg_t *event;

    dsh_provider_t *burst = dsh_provider_new (endpoint, "burst", 1);
    assert_non_null (burst);
    for (int index = 0; index < 1000; index++) {
        char name [32];
        snprintf (name, sizeof (name), "burst_%04d", index);
        s_add (burst, name, 8000);
    }
    dsh_provider_start (burst);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "burst_", 1000, 30000), 0);
    dsh_provider_destroy (&burst);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "burst_", 0, 30000), 0);

    //  Every event since the testkit's probe left, in order, none missing
    size_t received = 0;
    zsock_set_rcvtimeo (sub, 2000);
    while ((event = zmsg_recv (sub))) {
        uint64_t seq = s_event_seq (event);
        zmsg_destroy (&event);
        if (seq != last + 1)
            fail_msg ("event %" PRIu64 " after %" PRIu64 " (%zu received): a gap", seq, last, received);
        last = seq;
        received++;
    }
    //  1 000 tool.registered and component.joined, then as many on leaving
    if (received < 2002)
        fail_msg ("%zu events after %" PRIu64 ", not 2 002", received, last);
    zsock_destroy (&sub);
    dsh_testproc_destroy (&broker);
}

//  Messages about the work socket's garbage the log accounts for: lines
//  written, and the counts of the suppressed-count lines.
static size_t
s_accounted (const char *log, size_t *lines)
{
    size_t accounted = 0;
    *lines = 0;
    for (const char *line = log; line && *line; line = strchr (line, '\n')? strchr (line, '\n') + 1: NULL) {
        size_t length = strcspn (line, "\n");
        (*lines)++;
        char text [1200];
        snprintf (text, sizeof (text), "%.*s", (int) length, line);
        if (!strstr (text, "malformed message on the work socket"))
            continue;
        const char *count = strstr (text, " similar messages suppressed)");
        if (count) {
            while (count > text && count [-1] >= '0' && count [-1] <= '9')
                count--;
            accounted += (size_t) atol (count);
        }
        else
            accounted++;
    }
    return accounted;
}

static void
test_log_flood (void **state)
{
    (void) state;
    char path [] = "/tmp/dsh-limits-log-XXXXXX";
    int fd = mkstemp (path);
    assert_true (fd >= 0);
    char endpoint [256];
    const char *extra [] = { "-v", NULL };
    dsh_testproc_t *broker = dsh_testkit_broker_stderr (100, extra, fd, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    dsh_reply_t *welcome = dsh_client_request (client, DSH_HELLO, NULL, 5000, error, sizeof (error));
    assert_non_null (welcome);
    const msgpack_object *work = dsh_map_get (dsh_reply_body (welcome), "work");
    assert_non_null (work);
    char *work_endpoint = zsys_sprintf ("%.*s", (int) work->via.str.size, work->via.str.ptr);
    dsh_reply_destroy (&welcome);
    dsh_client_destroy (&client);

    //  20 000 messages with no delimiter: each is a warning the broker
    //  used to write
    zsock_t *dealer = zsock_new (ZMQ_DEALER);
    zsock_set_identity (dealer, "flooder");
    assert_int_equal (zsock_connect (dealer, "%s", work_endpoint), 0);
    const size_t flood = 20000;
    for (size_t index = 0; index < flood; index++)
        zstr_send (dealer, "garbage");

    //  Every one is accounted for, as a line or in a count
    char *log = NULL;
    size_t lines = 0, accounted = 0;
    int64_t give_up = zclock_mono () + 30000;
    while (accounted < flood && zclock_mono () < give_up) {
        zclock_sleep (200);
        zstr_free (&log);
        zchunk_t *chunk = zchunk_slurp (path, 0);
        log = chunk? zsys_sprintf ("%.*s", (int) zchunk_size (chunk), (char *) zchunk_data (chunk)): NULL;
        zchunk_destroy (&chunk);
        accounted = s_accounted (log, &lines);
    }
    assert_int_equal (accounted, flood);
    //  ... in few lines: ten a second and a count, while the flood lasts
    if (lines > 1000)
        fail_msg ("%zu log lines for %zu bad messages", lines, flood);
    assert_non_null (strstr (log, "similar messages suppressed)"));
    zstr_free (&log);
    zsock_destroy (&dealer);
    zstr_free (&work_endpoint);
    dsh_testproc_destroy (&broker);
    close (fd);
    unlink (path);
}

//  The broker's resident memory in kB, from /proc (0 if unreadable).
static long
s_rss_kb (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    FILE *file = fopen (path, "r");
    long rss = 0;
    char line [256];
    while (file && fgets (line, sizeof line, file))
        if (strncmp (line, "VmRSS:", 6) == 0)
            rss = strtol (line + 6, NULL, 10);
    if (file)
        fclose (file);
    return rss;
}

//  Large calls do not leave the broker holding their size for good (issue
//  22: after 16 MiB calls its RSS stayed at 41 MB from a 9 MB baseline,
//  glibc's mmap threshold having risen under it). Measures glibc's
//  allocator, which a sanitizer build replaces with its own: skipped there.
static void
test_large_calls_give_memory_back (void **state)
{
    (void) state;
#if defined (__SANITIZE_ADDRESS__)
    skip ();
#endif
    char endpoint [256];
    dsh_testproc_t *broker = dsh_testkit_broker (1000, NULL, endpoint, sizeof (endpoint));
    assert_non_null (broker);
    dsh_testproc_t *demo = dsh_testkit_component ("components/demo/dsh-demo", endpoint, "demo", NULL);
    assert_non_null (demo);
    assert_int_equal (dsh_testkit_wait_tools (endpoint, "echo", 1, 10000), 0);
    dsh_client_t *client = dsh_client_new (endpoint);
    char error [256];
    dsh_reply_t *reply = dsh_client_call (client, "echo", "{\"message\": \"warm\"}", NULL, 10000,
                                          error, sizeof (error));
    assert_non_null (reply);
    dsh_reply_destroy (&reply);
    long baseline = s_rss_kb (dsh_testproc_pid (broker));
    assert_true (baseline > 0);

    size_t size = 12 * 1024 * 1024;
    char *args = (char *) malloc (size + 32);
    int head = snprintf (args, 32, "{\"message\": \"");
    memset (args + head, 'x', size);
    snprintf (args + head + size, 32, "\"}");
    for (int index = 0; index < 4; index++) {
        reply = dsh_client_call (client, "echo", args, NULL, 30000, error, sizeof (error));
        if (!reply)
            fail_msg ("a 12 MiB echo failed: %s", error);
        dsh_reply_destroy (&reply);
    }
    free (args);
    //  The audit holds a call's request and result until its record is
    //  written (hashing 24 MiB takes a while): wait for its queue to empty
    for (int attempt = 0; attempt < 100; attempt++) {
        dsh_reply_t *stats = dsh_client_request (client, DSH_STATS, NULL, 5000, error, sizeof (error));
        json_t *body = stats? dsh_reply_json (stats): NULL;
        json_t *queued = json_object_get (json_object_get (body, "audit"), "queueBytes");
        bool empty = json_is_integer (queued) && json_integer_value (queued) == 0;
        json_decref (body);
        dsh_reply_destroy (&stats);
        if (empty)
            break;
        zclock_sleep (50);
    }
    //  Twelve MiB calls went through it, two copies each at least; what
    //  it keeps is a small part of one
    long after = s_rss_kb (dsh_testproc_pid (broker));
    if (after > baseline + 4096)
        fail_msg ("the broker kept %ld kB after four 12 MiB calls (%ld kB before)", after - baseline, baseline);
    dsh_client_destroy (&client);
    dsh_testproc_destroy (&demo);
    dsh_testproc_destroy (&broker);
}

int
main (void)
{
    zsys_init ();
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_tool_entry_cap),
        cmocka_unit_test (test_tool_count_cap),
        cmocka_unit_test (test_announce_in_parts),
        cmocka_unit_test (test_events_burst),
        cmocka_unit_test (test_log_flood),
        cmocka_unit_test (test_large_calls_give_memory_back),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
