/*  =========================================================================
    test_mcp_trace - dsh_mcp_trace: trace context read from MCP _meta and
    from a call's meta (any key order, bad and oversized values dropped),
    packed back as meta or _meta, and the MCP span's context handed on:
    with tracing off (nothing changes), on (the span's own), for an
    unsampled parent (passed on as it was) and for a root the sampler
    refused (a new unsampled context). The tracer exports to a port nothing
    listens on: its spans are dropped, which is all this test needs.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "dsh_mcp_trace.h"

#define TRACEPARENT "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define UNSAMPLED   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"

static json_t *
s_parse (const char *text)
{
    json_error_t error;
    json_t *value = json_loads (text, 0, &error);
    if (!value)
        fail_msg ("bad test JSON %s: %s", text, error.text);
    return value;
}

static void
s_assert_traceparent (const dsh_mcp_trace_t *trace, const char *expected)
{
    char text [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&trace->ctx, text);
    assert_string_equal (text, expected);
}

static void
test_read_from_json (void **state)
{
    (void) state;
    //  tracestate before traceparent, other keys and a non-string ignored
    json_t *meta = s_parse ("{\"tracestate\": \"rojo=1\", \"progressToken\": 5, \"traceparent\": \""
                            TRACEPARENT "\", \"baggage\": \"userId=alice\", \"other\": \"x\"}");
    dsh_mcp_trace_t trace;
    dsh_mcp_trace_from_json (&trace, meta);
    assert_true (trace.valid);
    s_assert_traceparent (&trace, TRACEPARENT);
    assert_string_equal (trace.ctx.tracestate, "rojo=1");
    assert_string_equal (trace.baggage, "userId=alice");
    dsh_mcp_trace_clear (&trace);
    assert_false (trace.valid);
    assert_null (trace.baggage);
    json_decref (meta);

    //  A bad traceparent is no context; the baggage is still read
    meta = s_parse ("{\"traceparent\": \"00-zz\", \"baggage\": \"a=b\", \"tracestate\": 7}");
    dsh_mcp_trace_from_json (&trace, meta);
    assert_false (trace.valid);
    assert_string_equal (trace.baggage, "a=b");
    dsh_mcp_trace_clear (&trace);
    json_decref (meta);

    //  Too long: dropped whole, never cut
    char *state_text = (char *) calloc (1, DSH_TRACESTATE_MAX + 2);
    memset (state_text, 'a', DSH_TRACESTATE_MAX + 1);
    char *baggage = (char *) calloc (1, DSH_MCP_BAGGAGE_MAX + 2);
    memset (baggage, 'b', DSH_MCP_BAGGAGE_MAX + 1);
    meta = json_pack ("{s:s, s:s, s:s}", "traceparent", TRACEPARENT, "tracestate", state_text, "baggage", baggage);
    dsh_mcp_trace_from_json (&trace, meta);
    assert_true (trace.valid);
    assert_string_equal (trace.ctx.tracestate, "");
    assert_null (trace.baggage);
    json_decref (meta);
    free (state_text);
    free (baggage);

    //  A NUL inside (a CALL's meta is msgpack): dropped whole, not cut
    //  at the NUL
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    const char *pairs [3][2] = { { "traceparent", TRACEPARENT }, { "tracestate", "rojo=1\0congo=2" },
                                 { "baggage", "a=b\0c=d" } };
    size_t sizes [3] = { strlen (TRACEPARENT), 14, 7 };
    msgpack_pack_map (&pk, 3);
    for (size_t index = 0; index < 3; index++) {
        msgpack_pack_str (&pk, strlen (pairs [index][0]));
        msgpack_pack_str_body (&pk, pairs [index][0], strlen (pairs [index][0]));
        msgpack_pack_str (&pk, sizes [index]);
        msgpack_pack_str_body (&pk, pairs [index][1], sizes [index]);
    }
    msgpack_unpacked unpacked;
    msgpack_unpacked_init (&unpacked);
    assert_int_equal (msgpack_unpack_next (&unpacked, sbuf.data, sbuf.size, NULL), MSGPACK_UNPACK_SUCCESS);
    dsh_mcp_trace_from_msgpack (&trace, &unpacked.data);
    assert_true (trace.valid);
    assert_string_equal (trace.ctx.tracestate, "");
    assert_null (trace.baggage);
    dsh_mcp_trace_clear (&trace);
    msgpack_unpacked_destroy (&unpacked);
    msgpack_sbuffer_destroy (&sbuf);

    //  No _meta at all
    dsh_mcp_trace_from_json (&trace, NULL);
    assert_false (trace.valid);
    assert_null (trace.baggage);
}

//  Packs trace as a meta map and reads it back from msgpack.
static void
s_round_trip (const dsh_mcp_trace_t *trace, dsh_mcp_trace_t *read)
{
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    assert_int_equal (dsh_mcp_trace_pack (trace, &pk), 0);
    msgpack_unpacked unpacked;
    msgpack_unpacked_init (&unpacked);
    assert_int_equal (msgpack_unpack_next (&unpacked, sbuf.data, sbuf.size, NULL), MSGPACK_UNPACK_SUCCESS);
    assert_int_equal (unpacked.data.type, MSGPACK_OBJECT_MAP);
    dsh_mcp_trace_from_msgpack (read, &unpacked.data);
    msgpack_unpacked_destroy (&unpacked);
    msgpack_sbuffer_destroy (&sbuf);
}

static void
test_pack_and_read_back (void **state)
{
    (void) state;
    json_t *meta = s_parse ("{\"traceparent\": \"" TRACEPARENT "\", \"tracestate\": \"rojo=1,congo=2\","
                            " \"baggage\": \"k=v\"}");
    dsh_mcp_trace_t trace, read;
    dsh_mcp_trace_from_json (&trace, meta);
    json_decref (meta);
    s_round_trip (&trace, &read);
    assert_true (read.valid);
    s_assert_traceparent (&read, TRACEPARENT);
    assert_string_equal (read.ctx.tracestate, "rojo=1,congo=2");
    assert_string_equal (read.baggage, "k=v");
    dsh_mcp_trace_clear (&read);

    //  Into _meta, beside what it holds
    meta = s_parse ("{\"progressToken\": 3}");
    dsh_mcp_trace_to_json (&trace, meta);
    json_t *want = s_parse ("{\"progressToken\": 3, \"traceparent\": \"" TRACEPARENT "\","
                            " \"tracestate\": \"rojo=1,congo=2\", \"baggage\": \"k=v\"}");
    assert_true (json_equal (meta, want));
    json_decref (want);
    json_decref (meta);
    dsh_mcp_trace_clear (&trace);

    //  No context: nothing packed, _meta untouched
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
    assert_int_equal (dsh_mcp_trace_pack (&trace, &pk), -1);
    assert_int_equal (sbuf.size, 0);
    msgpack_sbuffer_destroy (&sbuf);
    meta = json_object ();
    dsh_mcp_trace_to_json (&trace, meta);
    assert_int_equal (json_object_size (meta), 0);
    json_decref (meta);

    //  A meta that is no map, and keys that are no strings, read as none
    msgpack_object nil = { .type = MSGPACK_OBJECT_NIL };
    dsh_mcp_trace_from_msgpack (&read, &nil);
    assert_false (read.valid);
    dsh_mcp_trace_from_msgpack (&read, NULL);
    assert_false (read.valid);
}

static void
test_span_start_with_tracing_off (void **state)
{
    (void) state;
    assert_false (dsh_trace_enabled ());
    json_t *meta = s_parse ("{\"traceparent\": \"" TRACEPARENT "\", \"tracestate\": \"rojo=1\"}");
    dsh_mcp_trace_t trace;
    dsh_mcp_trace_from_json (&trace, meta);
    json_decref (meta);
    assert_null (dsh_mcp_span_start ("tools/call", "echo", DSH_SPAN_SERVER, &trace));
    //  The client's context goes on as it came
    s_assert_traceparent (&trace, TRACEPARENT);
    assert_string_equal (trace.ctx.tracestate, "rojo=1");
    dsh_mcp_trace_clear (&trace);
    //  None came: none goes
    assert_null (dsh_mcp_span_start ("tools/call", "echo", DSH_SPAN_SERVER, &trace));
    assert_false (trace.valid);
    //  Every span function takes NULL
    dsh_span_t *span = NULL;
    dsh_mcp_span_end (&span, NULL, "TIMEOUT");
    dsh_mcp_span_fail (&span, "TOOL_GONE", "gone");
}

//  Starts the tracer with sampler, toward a port nothing listens on.
static void
s_tracer_start (const char *sampler)
{
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
    setenv ("OTEL_TRACES_SAMPLER", sampler, 1);
    setenv ("OTEL_EXPORTER_OTLP_TIMEOUT", "200", 1);
    char error [256];
    assert_int_equal (dsh_trace_start ("test-mcp-trace", error, sizeof error), 0);
    assert_true (dsh_trace_enabled ());
}

static void
test_span_context_goes_on (void **state)
{
    (void) state;
    s_tracer_start ("parentbased_always_on");
    json_t *meta = s_parse ("{\"traceparent\": \"" TRACEPARENT "\", \"tracestate\": \"rojo=1\"}");
    dsh_mcp_trace_t trace;
    dsh_mcp_trace_from_json (&trace, meta);
    json_decref (meta);
    dsh_span_t *span = dsh_mcp_span_start ("tools/call", "echo", DSH_SPAN_SERVER, &trace);
    assert_non_null (span);
    //  Same trace, our span as the parent now, the tracestate kept
    char text [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&trace.ctx, text);
    assert_memory_equal (text, TRACEPARENT, 36);
    assert_memory_not_equal (text + 36, TRACEPARENT + 36, 16);
    assert_string_equal (text + 52, "-01");
    assert_string_equal (trace.ctx.tracestate, "rojo=1");
    json_t *answer = s_parse ("{\"jsonrpc\": \"2.0\", \"id\": 1, \"error\": {\"code\": -32602, \"message\": \"no\"}}");
    dsh_mcp_span_end (&span, answer, "UNKNOWN_TOOL");
    assert_null (span);
    json_decref (answer);
    dsh_mcp_trace_clear (&trace);

    //  An unsampled parent: no span, its context passed on as it was
    meta = s_parse ("{\"traceparent\": \"" UNSAMPLED "\"}");
    dsh_mcp_trace_from_json (&trace, meta);
    json_decref (meta);
    assert_null (dsh_mcp_span_start ("tools/call", "echo", DSH_SPAN_SERVER, &trace));
    s_assert_traceparent (&trace, UNSAMPLED);

    //  No parent: a root of our own
    dsh_mcp_trace_from_json (&trace, NULL);
    span = dsh_mcp_span_start ("tools/call", "echo", DSH_SPAN_SERVER, &trace);
    assert_non_null (span);
    assert_true (trace.valid);
    assert_true (dsh_trace_sampled (&trace.ctx));
    answer = s_parse ("{\"jsonrpc\": \"2.0\", \"id\": 1, \"result\": {\"content\": [], \"isError\": true}}");
    dsh_mcp_span_end (&span, answer, "TOOL_FAILED");
    json_decref (answer);
    dsh_trace_stop (100);

    //  A root the sampler refuses still sends a context, unsampled, so
    //  the hops after do not sample the call on their own
    s_tracer_start ("always_off");
    dsh_mcp_trace_from_json (&trace, NULL);
    assert_null (dsh_mcp_span_start ("tools/call", "echo", DSH_SPAN_SERVER, &trace));
    assert_true (trace.valid);
    assert_false (dsh_trace_sampled (&trace.ctx));
    dsh_trace_format (&trace.ctx, text);
    assert_memory_not_equal (text + 3, "00000000000000000000000000000000", 32);
    dsh_trace_stop (100);
    unsetenv ("OTEL_EXPORTER_OTLP_ENDPOINT");
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_read_from_json),
        cmocka_unit_test (test_pack_and_read_back),
        cmocka_unit_test (test_span_start_with_tracing_off),
        cmocka_unit_test (test_span_context_goes_on),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
