/*  =========================================================================
    test_trace - dsh_trace: the W3C traceparent codec, the samplers, off by
    default (no spans, no thread), the export queue's bounds against a
    collector that refuses or never answers, and real exports in both OTLP
    encodings to tests/otel/receiver.mjs, which decodes them with the
    official definitions (the receiver's path is the first argument)
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <jansson.h>

#include "dsh_trace.h"

static const char *s_receiver_path;
extern char **environ;

//  No OTEL_ variable from the shell that runs the test
static void
s_env_clear (void)
{
    bool removed = true;
    while (removed) {
        removed = false;
        for (char **entry = environ; *entry; entry++)
            if (strncmp (*entry, "OTEL_", 5) == 0 || strncmp (*entry, "DSH_OTEL_", 9) == 0) {
                char *name = strndup (*entry, strcspn (*entry, "="));
                unsetenv (name);
                free (name);
                removed = true;
                break;
            }
    }
}

static int
s_thread_count (void)
{
    DIR *tasks = opendir ("/proc/self/task");
    assert_non_null (tasks);
    int count = 0;
    struct dirent *entry;
    while ((entry = readdir (tasks)))
        if (entry->d_name [0] != '.')
            count++;
    closedir (tasks);
    return count;
}

static void
s_start (void)
{
    char error [256] = "";
    int rc = dsh_trace_start ("test_trace", error, sizeof error);
    if (rc)
        fail_msg ("dsh_trace_start: %s", error);
}

static void
s_setenv_port (const char *name, const char *format, int port)
{
    char value [256];
    snprintf (value, sizeof value, format, port);
    setenv (name, value, 1);
}


//  ---------------------------------------------------------------------
//  The traceparent codec

#define S_VALID "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static int
s_parse (dsh_trace_ctx_t *ctx, const char *text)
{
    return dsh_trace_parse (ctx, text, strlen (text));
}

static void
test_parse_valid (void **state)
{
    (void) state;
    dsh_trace_ctx_t ctx;
    assert_int_equal (s_parse (&ctx, S_VALID), 0);
    const byte trace_id [16] = { 0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6,
                                 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36 };
    const byte span_id [8] = { 0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7 };
    assert_memory_equal (ctx.trace_id, trace_id, 16);
    assert_memory_equal (ctx.span_id, span_id, 8);
    assert_int_equal (ctx.flags, 1);
    assert_string_equal (ctx.tracestate, "");
    assert_true (dsh_trace_sampled (&ctx));
    char out [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&ctx, out);
    assert_string_equal (out, S_VALID);
    assert_int_equal (s_parse (&ctx, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"), 0);
    assert_false (dsh_trace_sampled (&ctx));
    assert_false (dsh_trace_sampled (NULL));

    char hex [33];
    dsh_trace_id_hex (trace_id, 16, hex);
    assert_string_equal (hex, "4bf92f3577b34da6a3ce929d0e0e4736");
    dsh_trace_id_hex (span_id, 8, hex);
    assert_string_equal (hex, "00f067aa0ba902b7");

    //  A buffer that goes on past the value is read by its size
    const char *longer = S_VALID "trailing";
    assert_int_equal (dsh_trace_parse (&ctx, longer, DSH_TRACEPARENT_SIZE), 0);
    //  and the class's own self test
    dsh_trace_test (false);
}

static void
test_parse_invalid (void **state)
{
    (void) state;
    const char *invalid [] = {
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",     //  upper case trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",     //  upper case parent id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",     //  upper case flags
        "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     //  upper case version
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",     //  zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",     //  zero parent id
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",      //  trace id one short
        "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",    //  trace id one long
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",      //  parent id one short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",      //  flags one short
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",    //  version 00 is exactly 55
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-010",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     //  separators
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",     //  version ff is invalid
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",    //  later version: '-' after 55
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902g7-01",     //  not hex
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "",
    };
    for (size_t index = 0; index < sizeof invalid / sizeof invalid [0]; index++) {
        dsh_trace_ctx_t ctx;
        memset (&ctx, 0x5a, sizeof ctx);
        if (s_parse (&ctx, invalid [index]) != -1)
            fail_msg ("accepted '%s'", invalid [index]);
        //  untouched on failure
        for (size_t byte_index = 0; byte_index < sizeof ctx; byte_index++)
            assert_int_equal (((byte *) &ctx) [byte_index], 0x5a);
    }
    dsh_trace_ctx_t ctx;
    assert_int_equal (dsh_trace_parse (&ctx, NULL, 0), -1);
    assert_int_equal (dsh_trace_parse (&ctx, S_VALID, DSH_TRACEPARENT_SIZE - 1), -1);
}

//  A version after 00 is read by the fields 00 defines, as the W3C spec
//  says: exactly 55 bytes, or more after a '-'
static void
test_parse_future_version (void **state)
{
    (void) state;
    dsh_trace_ctx_t ctx;
    assert_int_equal (s_parse (&ctx, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 0);
    assert_true (dsh_trace_sampled (&ctx));
    assert_int_equal (s_parse (&ctx, "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-will-be-like"), 0);
    assert_int_equal (ctx.flags, 9);
    char out [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&ctx, out);
    //  what goes on is version 00
    assert_string_equal (out, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09");
}

static void
test_parse_meta (void **state)
{
    (void) state;
    dsh_trace_ctx_t ctx;
    const char *tracestate = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";
    assert_int_equal (dsh_trace_parse_meta (&ctx, S_VALID, DSH_TRACEPARENT_SIZE, tracestate, strlen (tracestate)), 0);
    assert_string_equal (ctx.tracestate, tracestate);
    assert_int_equal (dsh_trace_parse_meta (&ctx, S_VALID, DSH_TRACEPARENT_SIZE, NULL, 0), 0);
    assert_string_equal (ctx.tracestate, "");
    //  longer than 512: dropped, the context kept
    char huge [600];
    memset (huge, 'a', sizeof huge - 1);
    huge [sizeof huge - 1] = 0;
    assert_int_equal (dsh_trace_parse_meta (&ctx, S_VALID, DSH_TRACEPARENT_SIZE, huge, strlen (huge)), 0);
    assert_string_equal (ctx.tracestate, "");
    memset (&ctx, 0, sizeof ctx);
    assert_int_equal (dsh_trace_parse_meta (&ctx, "00-bad", 6, tracestate, strlen (tracestate)), -1);
    assert_string_equal (ctx.tracestate, "");
}

static void
test_new_root (void **state)
{
    (void) state;
    dsh_trace_ctx_t first, second;
    dsh_trace_new_root (&first);
    dsh_trace_new_root (&second);
    assert_memory_not_equal (first.trace_id, second.trace_id, 16);
    assert_memory_not_equal (first.span_id, second.span_id, 8);
    assert_int_equal (first.flags, 0);
    char text [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&first, text);
    dsh_trace_ctx_t parsed;
    assert_int_equal (s_parse (&parsed, text), 0);
    assert_memory_equal (parsed.trace_id, first.trace_id, 16);
    int64_t now = dsh_trace_now_ns ();
    assert_true (now > (int64_t) 1700000000 * 1000000000);
}


//  ---------------------------------------------------------------------
//  Off by default

static void
s_assert_off (void)
{
    int threads = s_thread_count ();
    s_start ();
    assert_false (dsh_trace_enabled ());
    assert_int_equal (s_thread_count (), threads);
    dsh_span_t *span = dsh_span_start ("nothing", DSH_SPAN_SERVER, NULL, 0);
    assert_null (span);
    dsh_trace_ctx_t ctx;
    dsh_trace_new_root (&ctx);
    ctx.flags = 1;
    assert_null (dsh_span_start ("nothing", DSH_SPAN_SERVER, &ctx, 0));
    assert_false (dsh_trace_should_sample (NULL, ctx.trace_id));
    assert_false (dsh_trace_should_sample (&ctx, ctx.trace_id));
    //  every span function takes NULL
    dsh_span_set_str (span, "k", "v");
    dsh_span_set_int (span, "k", 1);
    dsh_span_set_bool (span, "k", true);
    dsh_span_add_event (span, "e", 0, "k", "v");
    dsh_span_set_error (span, "TIMEOUT", "m");
    dsh_span_set_name (span, "n");
    assert_int_equal (dsh_span_context (span, &ctx), -1);
    dsh_span_end (&span, 0);
    dsh_trace_stats_t stats;
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_ended, 0);
    dsh_trace_stop (1000);
    assert_int_equal (s_thread_count (), threads);
}

static void
test_off_by_default (void **state)
{
    (void) state;
    s_env_clear ();
    s_assert_off ();
    //  the other variables alone do not turn it on
    setenv ("OTEL_SERVICE_NAME", "quiet", 1);
    setenv ("OTEL_TRACES_SAMPLER", "always_on", 1);
    setenv ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", 1);
    s_assert_off ();
    //  an endpoint with the SDK disabled, or the exporter none: off
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
    setenv ("OTEL_SDK_DISABLED", "TRUE", 1);
    s_assert_off ();
    unsetenv ("OTEL_SDK_DISABLED");
    setenv ("OTEL_TRACES_EXPORTER", "none", 1);
    s_assert_off ();
    //  an empty variable is unset
    s_env_clear ();
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "", 1);
    s_assert_off ();
    s_env_clear ();
}

static void
s_assert_refused (const char *name, const char *value)
{
    s_env_clear ();
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
    //  the argument is read only by the samplers that take one
    if (streq (name, "OTEL_TRACES_SAMPLER_ARG"))
        setenv ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio", 1);
    setenv (name, value, 1);
    char error [256] = "";
    int threads = s_thread_count ();
    if (dsh_trace_start ("test_trace", error, sizeof error) != -1)
        fail_msg ("%s=%s accepted", name, value);
    assert_true (strlen (error) > 0);
    assert_false (dsh_trace_enabled ());
    assert_int_equal (s_thread_count (), threads);
    dsh_trace_stop (0);
}

static void
test_bad_variables (void **state)
{
    (void) state;
    s_assert_refused ("OTEL_TRACES_SAMPLER", "sometimes");
    s_assert_refused ("OTEL_TRACES_SAMPLER_ARG", "1.5");
    s_assert_refused ("OTEL_TRACES_SAMPLER_ARG", "half");
    s_assert_refused ("OTEL_TRACES_SAMPLER_ARG", "-0.1");
    s_assert_refused ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    s_assert_refused ("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318");
    s_assert_refused ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon");
    s_assert_refused ("OTEL_BSP_MAX_QUEUE_SIZE", "0");
    s_assert_refused ("OTEL_EXPORTER_OTLP_HEADERS", "novalue");
    s_assert_refused ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=%zz");
    s_assert_refused ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=b%0d%0aInjected: yes");
    s_assert_refused ("OTEL_RESOURCE_ATTRIBUTES", "a=b,c");
    s_assert_refused ("OTEL_TRACES_EXPORTER", "zipkin");
    s_env_clear ();
}


//  ---------------------------------------------------------------------
//  Samplers

static void
s_sampler (const char *sampler, const char *argument)
{
    s_env_clear ();
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
    if (sampler)
        setenv ("OTEL_TRACES_SAMPLER", sampler, 1);
    if (argument)
        setenv ("OTEL_TRACES_SAMPLER_ARG", argument, 1);
    s_start ();
    assert_true (dsh_trace_enabled ());
}

//  A trace id whose low 8 bytes are low (then the rest zero)
static void
s_trace_id (byte *trace_id, uint64_t low)
{
    memset (trace_id, 0xee, 8);
    for (int index = 15; index >= 8; index--) {
        trace_id [index] = (byte) (low & 0xff);
        low >>= 8;
    }
}

static void
test_samplers (void **state)
{
    (void) state;
    byte small [16], large [16], middle_below [16], middle_above [16];
    s_trace_id (small, 1);
    s_trace_id (large, UINT64_MAX);
    //  ratio 0.5: the bound is 2^62 on the low 8 bytes shifted right by one
    s_trace_id (middle_below, (UINT64_C (1) << 63) - 2);
    s_trace_id (middle_above, UINT64_C (1) << 63);
    dsh_trace_ctx_t sampled, unsampled;
    dsh_trace_new_root (&sampled);
    sampled.flags = 1;
    dsh_trace_new_root (&unsampled);

    //  the default: parentbased_always_on
    s_sampler (NULL, NULL);
    assert_true (dsh_trace_should_sample (NULL, large));
    assert_true (dsh_trace_should_sample (&sampled, sampled.trace_id));
    assert_false (dsh_trace_should_sample (&unsampled, unsampled.trace_id));
    dsh_span_t *span = dsh_span_start ("not sampled", DSH_SPAN_SERVER, &unsampled, 0);
    assert_null (span);
    span = dsh_span_start ("sampled", DSH_SPAN_SERVER, &sampled, 0);
    assert_non_null (span);
    dsh_trace_ctx_t child;
    assert_int_equal (dsh_span_context (span, &child), 0);
    assert_memory_equal (child.trace_id, sampled.trace_id, 16);
    assert_memory_not_equal (child.span_id, sampled.span_id, 8);
    assert_true (dsh_trace_sampled (&child));
    dsh_span_end (&span, 0);
    assert_null (span);
    dsh_trace_stop (0);

    s_sampler ("always_off", NULL);
    assert_false (dsh_trace_should_sample (NULL, small));
    assert_false (dsh_trace_should_sample (&sampled, sampled.trace_id));
    assert_null (dsh_span_start ("root", DSH_SPAN_SERVER, NULL, 0));
    dsh_trace_stop (0);

    s_sampler ("always_on", NULL);
    assert_true (dsh_trace_should_sample (NULL, large));
    assert_true (dsh_trace_should_sample (&unsampled, unsampled.trace_id));
    dsh_trace_stop (0);

    s_sampler ("parentbased_always_off", NULL);
    assert_false (dsh_trace_should_sample (NULL, small));
    assert_true (dsh_trace_should_sample (&sampled, sampled.trace_id));
    assert_false (dsh_trace_should_sample (&unsampled, unsampled.trace_id));
    dsh_trace_stop (0);

    s_sampler ("traceidratio", "0.5");
    assert_true (dsh_trace_should_sample (NULL, small));
    assert_true (dsh_trace_should_sample (NULL, middle_below));
    assert_false (dsh_trace_should_sample (NULL, middle_above));
    assert_false (dsh_trace_should_sample (NULL, large));
    //  not parent based: the trace id decides, whatever the parent says
    s_trace_id (sampled.trace_id, UINT64_MAX);
    assert_false (dsh_trace_should_sample (&sampled, sampled.trace_id));
    dsh_trace_stop (0);

    s_sampler ("traceidratio", "0");
    assert_false (dsh_trace_should_sample (NULL, small));
    assert_null (dsh_span_start ("root", DSH_SPAN_SERVER, NULL, 0));
    //  a root whose sampling the caller decided: not asked again
    span = dsh_span_start_root ("root", DSH_SPAN_SERVER, small, 0);
    assert_non_null (span);
    dsh_trace_ctx_t root_ctx;
    dsh_span_context (span, &root_ctx);
    assert_memory_equal (root_ctx.trace_id, small, 16);
    assert_true (dsh_trace_sampled (&root_ctx));
    dsh_span_end (&span, 0);
    dsh_trace_stop (0);
    assert_null (dsh_span_start_root ("off", DSH_SPAN_SERVER, small, 0));
    //  without an argument the ratio is 1
    s_sampler ("traceidratio", NULL);
    assert_true (dsh_trace_should_sample (NULL, large));
    dsh_trace_stop (0);

    s_sampler ("parentbased_traceidratio", "0.25");
    assert_true (dsh_trace_should_sample (NULL, small));
    assert_false (dsh_trace_should_sample (NULL, middle_below));
    assert_true (dsh_trace_should_sample (&sampled, large));
    assert_false (dsh_trace_should_sample (&unsampled, small));
    //  about a quarter of random roots
    int taken = 0;
    for (int index = 0; index < 4000; index++) {
        dsh_trace_ctx_t root;
        dsh_trace_new_root (&root);
        taken += dsh_trace_should_sample (NULL, root.trace_id);
    }
    assert_in_range (taken, 800, 1200);
    dsh_trace_stop (0);
    s_env_clear ();
}


//  ---------------------------------------------------------------------
//  The queue's bounds

//  A port on loopback with nothing listening: connections are refused
static int
s_dead_port (void)
{
    zsock_t *probe = zsock_new (ZMQ_PAIR);
    int port = zsock_bind (probe, "tcp://127.0.0.1:*");
    assert_true (port > 0);
    zsock_destroy (&probe);
    return port;
}

//  A port that accepts connections (the kernel's backlog) and never reads
//  or answers: a collector that hangs
static int
s_hanging_port (int *fd)
{
    *fd = socket (AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    assert_int_equal (bind (*fd, (struct sockaddr *) &address, sizeof address), 0);
    assert_int_equal (listen (*fd, 16), 0);
    socklen_t size = sizeof address;
    getsockname (*fd, (struct sockaddr *) &address, &size);
    return ntohs (address.sin_port);
}

#define S_FLOOD 20000

//  A collector that refuses every connection: every span is dropped and
//  counted, the exports count as failures, and ending spans goes on
static void
test_queue_collector_down (void **state)
{
    (void) state;
    s_env_clear ();
    s_setenv_port ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:%d", s_dead_port ());
    s_start ();
    for (int index = 0; index < S_FLOOD; index++) {
        dsh_span_t *span = dsh_span_start ("flood", DSH_SPAN_INTERNAL, NULL, 0);
        assert_non_null (span);
        dsh_span_set_int (span, "index", index);
        dsh_span_end (&span, 0);
    }
    dsh_trace_stats_t stats;
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_ended, S_FLOOD);
    dsh_trace_stop (2000);
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_ended, S_FLOOD);
    assert_int_equal (stats.spans_exported, 0);
    assert_int_equal (stats.spans_dropped, S_FLOOD);
    assert_int_equal (stats.queue_bytes, 0);
    assert_true (stats.export_failures >= 1);
    s_env_clear ();
}

//  A forked child has no exporter thread: there the tracer is off (no
//  span starts, none queues) and dsh_trace_stop returns at once instead of
//  waiting for the parent's thread; the parent's tracer goes on as before
static void
test_fork_child (void **state)
{
    (void) state;
    //  Under valgrind the child is valgrind's too, and its exit checks for
    //  leaks a heap it took whole from the parent: exit 99, whatever the
    //  tracer did. The plain and sanitizer runs check the child
    const char *preload = getenv ("LD_PRELOAD");
    if (preload && strstr (preload, "vgpreload")) {
        print_message ("test_fork_child: under valgrind, not run (the child's exit would be valgrind's)\n");
        return;
    }
    s_env_clear ();
    s_setenv_port ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:%d", s_dead_port ());
    s_start ();
    dsh_span_t *queued = dsh_span_start ("before the fork", DSH_SPAN_INTERNAL, NULL, 0);
    dsh_span_end (&queued, 0);
    pid_t pid = fork ();
    assert_true (pid >= 0);
    if (pid == 0) {
        int code = 0;
        if (dsh_trace_enabled ())
            code = 1;
        else {
            dsh_span_t *span = dsh_span_start ("child", DSH_SPAN_INTERNAL, NULL, 0);
            if (span)
                code = 2;
            dsh_span_end (&span, 0);
            dsh_trace_stats_t stats;
            dsh_trace_stats (&stats);
            if (stats.queue_bytes)
                code = 3;
            //  Returns at once: there is no thread to wait for. (Starting a
            //  tracer of its own is not tried here: a child of a process with
            //  threads may find a lock, curl's or the allocator's, held by a
            //  thread it does not have; a child that execs is the sure way)
            int64_t before = zclock_mono ();
            dsh_trace_stop (1000);
            if (zclock_mono () - before >= 1000)
                code = 4;
        }
        _exit (code);
    }
    //  Ten seconds at most: without the fork's handlers the child waits
    //  for ever in dsh_trace_stop
    int status = 0;
    pid_t ended = 0;
    for (int tries = 0; tries < 1000 && ended == 0; tries++) {
        ended = waitpid (pid, &status, WNOHANG);
        if (ended == 0)
            usleep (10000);
    }
    if (ended == 0) {
        kill (pid, SIGKILL);
        waitpid (pid, &status, 0);
    }
    bool parent_on = dsh_trace_enabled ();
    dsh_span_t *span = dsh_span_start ("after the fork", DSH_SPAN_INTERNAL, NULL, 0);
    bool parent_spans = span != NULL;
    dsh_span_end (&span, 0);
    //  Stopped before any assertion, so that a failure here leaves the
    //  next test a tracer that is off
    dsh_trace_stop (1000);
    s_env_clear ();
    if (ended == 0)
        fail_msg ("the forked child hung in dsh_trace_stop");
    assert_true (WIFEXITED (status));
    assert_int_equal (WEXITSTATUS (status), 0);
    assert_true (parent_on);
    assert_true (parent_spans);
}

//  A collector that hangs: the exporter waits in one POST while the queue
//  fills to its bound in spans, then in bytes; beyond it spans are dropped
//  at once, and a stop does not wait for the stuck POST longer than asked
static void
test_queue_bounds (void **state)
{
    (void) state;
    int hanging;
    s_env_clear ();
    s_setenv_port ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:%d", s_hanging_port (&hanging));
    setenv ("OTEL_BSP_MAX_QUEUE_SIZE", "1000", 1);
    setenv ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100", 1);
    setenv ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000", 1);
    s_start ();
    //  the first batch is taken and the exporter hangs on it
    for (int index = 0; index < 100; index++) {
        dsh_span_t *span = dsh_span_start ("first", DSH_SPAN_INTERNAL, NULL, 0);
        dsh_span_end (&span, 0);
    }
    dsh_trace_stats_t stats;
    for (int wait = 0; wait < 1000; wait++) {
        dsh_trace_stats (&stats);
        if (stats.queue_bytes == 0)
            break;
        zclock_sleep (10);
    }
    assert_int_equal (stats.queue_bytes, 0);
    for (int index = 0; index < S_FLOOD; index++) {
        dsh_span_t *span = dsh_span_start ("flood", DSH_SPAN_INTERNAL, NULL, 0);
        dsh_span_end (&span, 0);
    }
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_ended, 100 + S_FLOOD);
    assert_int_equal (stats.spans_dropped, S_FLOOD - 1000);
    assert_true (stats.queue_bytes > 0);
    int64_t before = zclock_mono ();
    dsh_trace_stop (300);
    assert_true (zclock_mono () - before < 20000);
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_exported, 0);
    assert_int_equal (stats.spans_dropped, 100 + S_FLOOD);

    //  the byte bound: 4 KiB attributes, 64 KiB of queue
    setenv ("DSH_OTEL_BSP_MAX_QUEUE_BYTES", "65536", 1);
    s_start ();
    char *value = (char *) malloc (4097);
    memset (value, 'v', 4096);
    value [4096] = 0;
    for (int index = 0; index < 1000; index++) {
        dsh_span_t *span = dsh_span_start ("heavy", DSH_SPAN_INTERNAL, NULL, 0);
        dsh_span_set_str (span, "heavy", value);
        dsh_span_end (&span, 0);
        dsh_trace_stats (&stats);
        assert_true (stats.queue_bytes <= 65536);
    }
    free (value);
    dsh_trace_stats (&stats);
    assert_true (stats.spans_dropped >= 1000 - 100 - 16);
    dsh_trace_stop (100);
    close (hanging);
    s_env_clear ();
}


//  ---------------------------------------------------------------------
//  Real exports to tests/otel/receiver.mjs

typedef struct {
    pid_t pid;
    int fd;
    int port;
    char buffer [1 << 20];
    size_t used;
} s_receiver_t;

//  The next line the receiver writes, waiting at most timeout_ms; NULL
//  on timeout or end of output. Fresh string.
static char *
s_receiver_line (s_receiver_t *self, int timeout_ms)
{
    int64_t deadline = zclock_mono () + timeout_ms;
    while (true) {
        char *newline = (char *) memchr (self->buffer, '\n', self->used);
        if (newline) {
            char *line = strndup (self->buffer, (size_t) (newline - self->buffer));
            size_t rest = self->used - (size_t) (newline + 1 - self->buffer);
            memmove (self->buffer, newline + 1, rest);
            self->used = rest;
            return line;
        }
        int left = (int) (deadline - zclock_mono ());
        if (left <= 0 || self->used == sizeof self->buffer)
            return NULL;
        struct pollfd item = { .fd = self->fd, .events = POLLIN };
        if (poll (&item, 1, left) <= 0)
            continue;
        ssize_t size = read (self->fd, self->buffer + self->used, sizeof self->buffer - self->used);
        if (size <= 0)
            return NULL;
        self->used += (size_t) size;
    }
}

//  Starts `node receiver.mjs [argument]`; skips the test where node or
//  its packages cannot be had (tests/otel/install.sh exit 77)
static s_receiver_t *
s_receiver_new (const char *argument, const char *value)
{
    char *install = zsys_sprintf ("%.*s/install.sh", (int) (strrchr (s_receiver_path, '/') - s_receiver_path),
                                  s_receiver_path);
    int rc = system (install);
    zstr_free (&install);
    if (WIFEXITED (rc) && WEXITSTATUS (rc) == 77)
        skip ();
    assert_int_equal (rc, 0);
    s_receiver_t *self = (s_receiver_t *) calloc (1, sizeof (s_receiver_t));
    int pipe_fds [2];
    assert_int_equal (pipe (pipe_fds), 0);
    self->pid = fork ();
    assert_true (self->pid >= 0);
    if (self->pid == 0) {
        dup2 (pipe_fds [1], 1);
        close (pipe_fds [0]);
        close (pipe_fds [1]);
        execlp ("node", "node", s_receiver_path, argument, value, (char *) NULL);
        _exit (127);
    }
    close (pipe_fds [1]);
    self->fd = pipe_fds [0];
    char *line = s_receiver_line (self, 30000);
    assert_non_null (line);
    assert_int_equal (sscanf (line, "listening %d", &self->port), 1);
    free (line);
    return self;
}

static void
s_receiver_destroy (s_receiver_t **self_p)
{
    s_receiver_t *self = *self_p;
    kill (self->pid, SIGTERM);
    int status;
    waitpid (self->pid, &status, 0);
    close (self->fd);
    free (self);
    *self_p = NULL;
}

//  The receiver's next span, as JSON
static json_t *
s_receiver_span (s_receiver_t *self)
{
    char *line = s_receiver_line (self, 20000);
    if (!line)
        fail_msg ("no span from the receiver");
    json_error_t error;
    json_t *span = json_loads (line, 0, &error);
    if (!span)
        fail_msg ("receiver line is not JSON: %s", line);
    free (line);
    return span;
}

static const char *
s_str (json_t *object, const char *path)
{
    json_t *value = object;
    char *copy = strdup (path);
    for (char *name = strtok (copy, "/"); name && value; name = strtok (NULL, "/"))
        value = json_object_get (value, name);
    free (copy);
    if (!json_is_string (value))
        fail_msg ("%s is not a string", path);
    return json_string_value (value);
}

static json_int_t
s_int (json_t *object, const char *path)
{
    json_t *value = object;
    char *copy = strdup (path);
    for (char *name = strtok (copy, "/"); name && value; name = strtok (NULL, "/"))
        value = json_object_get (value, name);
    free (copy);
    if (!json_is_integer (value))
        fail_msg ("%s is not an integer", path);
    return json_integer_value (value);
}

//  A root SERVER span with a CLIENT child, everything a span can hold
//  set once, exported in one encoding and decoded by the receiver
static void
s_export_round_trip (const char *protocol)
{
    s_receiver_t *receiver = s_receiver_new (NULL, NULL);
    s_env_clear ();
    s_setenv_port ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:%d", receiver->port);
    setenv ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol, 1);
    setenv ("OTEL_SERVICE_NAME", "trace-test", 1);
    setenv ("OTEL_RESOURCE_ATTRIBUTES", "service.name=overridden, deployment.environment.name=unit%20test ,team=dsh", 1);
    setenv ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=secret%3Dvalue,x-other=1", 1);
    setenv ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-other=2", 1);
    s_start ();
    assert_true (dsh_trace_enabled ());

    dsh_trace_ctx_t caller;
    assert_int_equal (s_parse (&caller, S_VALID), 0);
    snprintf (caller.tracestate, sizeof caller.tracestate, "rojo=00f067aa0ba902b7");
    int64_t start_ns = dsh_trace_now_ns () - 1000000;
    dsh_span_t *root = dsh_span_start ("call", DSH_SPAN_SERVER, &caller, start_ns);
    assert_non_null (root);
    dsh_span_set_str (root, "dsh.tool", "echo");
    dsh_span_set_int (root, "dsh.retries", -3);
    dsh_span_set_int (root, "dsh.big", INT64_MAX);
    dsh_span_set_bool (root, "dsh.cached", false);
    dsh_span_set_str (root, "dsh.tool", "echo2");          //  replaces
    dsh_span_add_event (root, "queued", start_ns + 10, NULL, NULL);
    dsh_span_add_event (root, "decision", 0, "dsh.decision", "allow");
    dsh_span_set_name (root, "call echo2");
    dsh_trace_ctx_t root_ctx;
    dsh_span_context (root, &root_ctx);
    assert_string_equal (root_ctx.tracestate, "rojo=00f067aa0ba902b7");
    dsh_span_t *child = dsh_span_start ("execute_tool echo2", DSH_SPAN_CLIENT, &root_ctx, 0);
    dsh_span_set_error (child, "TIMEOUT", "no answer in 5000 ms");
    dsh_trace_ctx_t child_ctx;
    dsh_span_context (child, &child_ctx);
    dsh_span_end (&child, 0);
    dsh_span_end (&root, 0);
    //  the stop flushes at once: the schedule delay is 5 s
    dsh_trace_stop (10000);
    dsh_trace_stats_t stats;
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_exported, 2);
    assert_int_equal (stats.spans_dropped, 0);
    assert_int_equal (stats.export_failures, 0);

    char trace_hex [33], caller_hex [17], root_hex [17], child_hex [17];
    dsh_trace_id_hex (caller.trace_id, 16, trace_hex);
    dsh_trace_id_hex (caller.span_id, 8, caller_hex);
    dsh_trace_id_hex (root_ctx.span_id, 8, root_hex);
    dsh_trace_id_hex (child_ctx.span_id, 8, child_hex);
    const char *encoding = streq (protocol, "http/json")? "json": "protobuf";
    //  the child ended first
    json_t *span = s_receiver_span (receiver);
    assert_string_equal (s_str (span, "encoding"), encoding);
    assert_string_equal (s_str (span, "request/contentType"),
                         streq (protocol, "http/json")? "application/json": "application/x-protobuf");
    assert_string_equal (s_str (span, "request/path"), "/v1/traces");
    assert_string_equal (s_str (span, "request/headers/x-api-key"), "secret=value");
    assert_string_equal (s_str (span, "request/headers/x-other"), "2");
    assert_string_equal (s_str (span, "name"), "execute_tool echo2");
    assert_string_equal (s_str (span, "traceId"), trace_hex);
    assert_string_equal (s_str (span, "spanId"), child_hex);
    assert_string_equal (s_str (span, "parentSpanId"), root_hex);
    assert_int_equal (s_int (span, "kind"), 3);
    assert_int_equal (s_int (span, "status/code"), 2);
    assert_string_equal (s_str (span, "status/message"), "no answer in 5000 ms");
    assert_string_equal (s_str (span, "attributes/error.type"), "TIMEOUT");
    assert_string_equal (s_str (span, "traceState"), "rojo=00f067aa0ba902b7");
    json_decref (span);

    span = s_receiver_span (receiver);
    assert_string_equal (s_str (span, "name"), "call echo2");
    assert_string_equal (s_str (span, "traceId"), trace_hex);
    assert_string_equal (s_str (span, "spanId"), root_hex);
    assert_string_equal (s_str (span, "parentSpanId"), caller_hex);
    assert_int_equal (s_int (span, "kind"), 2);
    assert_int_equal (s_int (span, "flags") & 0xff, 1);
    assert_int_equal (s_int (span, "status/code"), 0);
    char start_text [24];
    snprintf (start_text, sizeof start_text, "%" PRId64, start_ns);
    assert_string_equal (s_str (span, "startTimeUnixNano"), start_text);
    assert_true (strcmp (s_str (span, "endTimeUnixNano"), start_text) > 0);
    json_t *attributes = json_object_get (span, "attributes");
    assert_int_equal (json_object_size (attributes), 4);
    assert_string_equal (s_str (span, "attributes/dsh.tool"), "echo2");
    assert_int_equal (s_int (span, "attributes/dsh.retries"), -3);
    //  past 2^53 the receiver gives the decimal string
    assert_string_equal (s_str (span, "attributes/dsh.big"), "9223372036854775807");
    assert_true (json_is_false (json_object_get (attributes, "dsh.cached")));
    json_t *events = json_object_get (span, "events");
    assert_int_equal (json_array_size (events), 2);
    assert_string_equal (s_str (json_array_get (events, 0), "name"), "queued");
    snprintf (start_text, sizeof start_text, "%" PRId64, start_ns + 10);
    assert_string_equal (s_str (json_array_get (events, 0), "timeUnixNano"), start_text);
    assert_string_equal (s_str (json_array_get (events, 1), "attributes/dsh.decision"), "allow");
    //  the resource
    assert_string_equal (s_str (span, "resource/service.name"), "trace-test");
    assert_string_equal (s_str (span, "resource/deployment.environment.name"), "unit test");
    assert_string_equal (s_str (span, "resource/team"), "dsh");
    assert_string_equal (s_str (span, "resource/telemetry.sdk.name"), "dsh");
    assert_string_equal (s_str (span, "resource/telemetry.sdk.language"), "c");
    assert_true (strlen (s_str (span, "resource/telemetry.sdk.version")) > 0);
    assert_true (strlen (s_str (span, "resource/service.instance.id")) == 36);
    assert_true (strlen (s_str (span, "resource/host.name")) > 0);
    assert_int_equal (s_int (span, "resource/process.pid"), getpid ());
    assert_string_equal (s_str (span, "scope/name"), "dsh");
    json_decref (span);
    s_receiver_destroy (&receiver);
    s_env_clear ();
}

static void
test_export_protobuf (void **state)
{
    (void) state;
    s_export_round_trip ("http/protobuf");
}

static void
test_export_json (void **state)
{
    (void) state;
    s_export_round_trip ("http/json");
}

//  The limits as the receiver sees them, in both encodings: 128
//  attributes and the rest counted, values cut at 4096 bytes on a
//  character boundary, bytes that are not UTF-8 replaced, 128 events
static void
s_export_limits (const char *protocol)
{
    s_receiver_t *receiver = s_receiver_new ("--path", "/custom/traces");
    s_env_clear ();
    s_setenv_port ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:%d/custom/traces", receiver->port);
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
    setenv ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol, 1);
    //  a short schedule: this span goes without a stop
    setenv ("OTEL_BSP_SCHEDULE_DELAY", "50", 1);
    s_start ();
    dsh_span_t *span = dsh_span_start ("limits", DSH_SPAN_PRODUCER, NULL, 0);
    for (int index = 0; index < 200; index++) {
        char key [32];
        snprintf (key, sizeof key, "key.%03d", index);
        dsh_span_set_int (span, key, index);
    }
    for (int index = 0; index < 130; index++)
        dsh_span_add_event (span, "tick", 0, NULL, NULL);
    dsh_span_end (&span, 0);
    span = dsh_span_start ("strings", DSH_SPAN_CONSUMER, NULL, 0);
    //  4095 ASCII bytes and a 2-byte character: the character does not fit
    char *value = (char *) malloc (5000);
    memset (value, 'a', 4095);
    strcpy (value + 4095, "\xc3\xa9tail");
    dsh_span_set_str (span, "long", value);
    free (value);
    dsh_span_set_str (span, "broken", "ok\xff\xfe" "end\xc3");
    dsh_span_set_str (span, "unicode", "caf\xc3\xa9 \xe2\x9c\x93");
    dsh_span_end (&span, 0);

    json_t *received = s_receiver_span (receiver);
    assert_string_equal (s_str (received, "request/path"), "/custom/traces");
    assert_string_equal (s_str (received, "name"), "limits");
    assert_string_equal (s_str (received, "parentSpanId"), "");
    assert_int_equal (s_int (received, "kind"), 4);
    assert_int_equal (json_object_size (json_object_get (received, "attributes")), 128);
    assert_int_equal (s_int (received, "attributes/key.127"), 127);
    assert_int_equal (s_int (received, "droppedAttributesCount"), 72);
    assert_int_equal (json_array_size (json_object_get (received, "events")), 128);
    assert_int_equal (s_int (received, "droppedEventsCount"), 2);
    json_decref (received);
    received = s_receiver_span (receiver);
    assert_string_equal (s_str (received, "name"), "strings");
    assert_int_equal (s_int (received, "kind"), 5);
    assert_int_equal (strlen (s_str (received, "attributes/long")), 4095);
    assert_string_equal (s_str (received, "attributes/broken"), "ok\xef\xbf\xbd\xef\xbf\xbd" "end\xef\xbf\xbd");
    assert_string_equal (s_str (received, "attributes/unicode"), "caf\xc3\xa9 \xe2\x9c\x93");
    json_decref (received);
    dsh_trace_stop (5000);
    s_receiver_destroy (&receiver);
    s_env_clear ();
}

static void
test_export_limits_protobuf (void **state)
{
    (void) state;
    s_export_limits ("http/protobuf");
}

static void
test_export_limits_json (void **state)
{
    (void) state;
    s_export_limits ("http/json");
}

//  A collector that answers 503: the batch is dropped and counted, and
//  the caller never waits
static void
test_export_refused (void **state)
{
    (void) state;
    s_receiver_t *receiver = s_receiver_new ("--status", "503");
    s_env_clear ();
    s_setenv_port ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:%d", receiver->port);
    s_start ();
    for (int index = 0; index < 10; index++) {
        dsh_span_t *span = dsh_span_start ("refused", DSH_SPAN_SERVER, NULL, 0);
        dsh_span_end (&span, 0);
    }
    dsh_trace_stop (10000);
    dsh_trace_stats_t stats;
    dsh_trace_stats (&stats);
    assert_int_equal (stats.spans_ended, 10);
    assert_int_equal (stats.spans_exported, 0);
    assert_int_equal (stats.spans_dropped, 10);
    assert_int_equal (stats.export_failures, 1);
    s_receiver_destroy (&receiver);
    s_env_clear ();
}

//  A partial success: what the collector rejected is dropped (and not
//  retried), the rest exported, in both encodings
static void
test_export_partial (void **state)
{
    (void) state;
    const char *protocols [] = { "http/protobuf", "http/json" };
    for (int index = 0; index < 2; index++) {
        s_receiver_t *receiver = s_receiver_new ("--reject", "2");
        s_env_clear ();
        s_setenv_port ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:%d", receiver->port);
        setenv ("OTEL_EXPORTER_OTLP_PROTOCOL", protocols [index], 1);
        s_start ();
        for (int span_index = 0; span_index < 5; span_index++) {
            dsh_span_t *span = dsh_span_start ("partial", DSH_SPAN_SERVER, NULL, 0);
            dsh_span_end (&span, 0);
        }
        dsh_trace_stop (10000);
        dsh_trace_stats_t stats;
        dsh_trace_stats (&stats);
        assert_int_equal (stats.spans_exported, 3);
        assert_int_equal (stats.spans_dropped, 2);
        assert_int_equal (stats.export_failures, 0);
        s_receiver_destroy (&receiver);
    }
    s_env_clear ();
}

int
main (int argc, char *argv [])
{
    if (argc < 2) {
        fprintf (stderr, "usage: test_trace <tests/otel/receiver.mjs>\n");
        return 2;
    }
    s_receiver_path = argv [1];
    //  A receiver that dies must not kill the test with SIGPIPE
    signal (SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_parse_valid),
        cmocka_unit_test (test_parse_invalid),
        cmocka_unit_test (test_parse_future_version),
        cmocka_unit_test (test_parse_meta),
        cmocka_unit_test (test_new_root),
        cmocka_unit_test (test_off_by_default),
        cmocka_unit_test (test_bad_variables),
        cmocka_unit_test (test_samplers),
        cmocka_unit_test (test_queue_collector_down),
        cmocka_unit_test (test_fork_child),
        cmocka_unit_test (test_queue_bounds),
        cmocka_unit_test (test_export_protobuf),
        cmocka_unit_test (test_export_json),
        cmocka_unit_test (test_export_limits_protobuf),
        cmocka_unit_test (test_export_limits_json),
        cmocka_unit_test (test_export_refused),
        cmocka_unit_test (test_export_partial),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
