/*  =========================================================================
    test_sdk_trace - the C SDK's part of a trace: what a handler and a
    client see of the W3C trace context, and the execute_tool span

    The test plays the broker on real sockets (a ROUTER front and work
    socket for a provider, a ROUTER front for a client, over inproc) and
    the OTLP collector on loopback TCP: a small HTTP server that takes the
    exporter's OTLP/HTTP JSON (OTEL_EXPORTER_OTLP_PROTOCOL=http/json) and
    reads it with jansson. It checks that a handler reads the context sent
    in the CALL's meta (dsh_call_trace); that with tracing on each handler
    run is an `execute_tool {name}` span (kind INTERNAL) whose parent is
    that context, with the GenAI conventions' attributes, error.type on a
    failure and the opt-in arguments and result; that an unsampled context
    gives no span; and that a client sends a context in meta
    (dsh_client_trace_meta) and reads the one a RESULT brings back
    (dsh_reply_trace).

    Every wait has a timeout, so a broken SDK fails instead of hanging.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "dsh_client.h"
#include "dsh_json.h"
#include "dsh_proto.h"
#include "dsh_provider.h"
#include "dsh_trace.h"

#define WAIT_MS 10000               //  how long anything may take before the test fails

//  The contexts the calls carry: sampled, and not sampled
#define S_TRACE_ID      "0af7651916cd43dd8448eb211c80319c"
#define S_PARENT_ID     "b7ad6b7169203331"
#define S_TRACEPARENT   "00-" S_TRACE_ID "-" S_PARENT_ID "-01"
#define S_UNSAMPLED     "00-" S_TRACE_ID "-00f067aa0ba902b7-00"
#define S_TRACESTATE    "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"

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

static const dsh_tooldef_t s_context_def = {
    .name = "context", .description = "Say the trace context the call carries", .params = s_no_params
};

static const dsh_tooldef_t s_fail_def = {
    .name = "fail", .description = "Fail with DENIED", .params = s_no_params
};

static const dsh_tooldef_t s_defer_def = {
    .name = "defer", .description = "Finish later, from another thread", .params = s_no_params
};

static int
s_echo (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    dsh_result_text (result, dsh_call_string (call, "message", ""));
    return 0;
}

//  Answers "<traceparent> <tracestate>" as the handler reads them, or "none"
static int
s_context (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    dsh_trace_ctx_t ctx;
    if (dsh_call_trace (call, &ctx) == 0) {
        char traceparent [DSH_TRACEPARENT_SIZE + 1];
        dsh_trace_format (&ctx, traceparent);
        dsh_result_textf (result, "%s %s", traceparent, ctx.tracestate);
    }
    else
        dsh_result_text (result, "none");
    return 0;
}

//  A deferred call, finished from a thread of its own: its span ends there
static void *
s_finish_later (void *arg)
{
    void **pair = (void **) arg;
    zclock_sleep (20);
    dsh_result_text ((dsh_result_t *) pair [1], "finished later");
    dsh_call_finish ((dsh_call_t *) pair [0]);
    free (pair);
    return NULL;
}

static int
s_defer (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) arg;
    void **pair = (void **) malloc (2 * sizeof (void *));
    assert (pair);
    pair [0] = call;
    pair [1] = result;
    pthread_t thread;
    if (pthread_create (&thread, NULL, s_finish_later, pair)) {
        free (pair);
        return -1;
    }
    pthread_detach (thread);
    return DSH_HANDLER_DEFER;
}

static int
s_fail (dsh_call_t *call, dsh_result_t *result, void *arg)
{
    (void) call;
    (void) arg;
    dsh_result_error (result, DSH_E_DENIED, "no such thing");
    return 0;
}

//  ---------------------------------------------------------------------
//  The broker's part, for a provider

typedef struct {
    zsock_t *front;                 //  ROUTER, where the provider says HELLO
    zsock_t *work;                  //  ROUTER, calls and results
    zsock_t *announce;              //  SUB, the provider's announcements
    zframe_t *routing_id;           //  the provider's work DEALER
    dsh_provider_t *provider;
} s_broker_t;

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

static void
s_broker_start (s_broker_t *self)
{
    memset (self, 0, sizeof (*self));
    static int instance = 0;
    instance++;
    char front [64], work [64], announce [64], bound [72];
    snprintf (front, sizeof front, "inproc://test-sdk-trace-front-%d", instance);
    snprintf (work, sizeof work, "inproc://test-sdk-trace-work-%d", instance);
    snprintf (announce, sizeof announce, "inproc://test-sdk-trace-announce-%d", instance);
    snprintf (bound, sizeof bound, "@%s", announce);
    self->front = zsock_new_router (front);
    self->work = zsock_new_router (work);
    self->announce = zsock_new_sub (bound, "");
    assert_non_null (self->front);
    assert_non_null (self->work);
    assert_non_null (self->announce);
    dsh_provider_options_t options = { .broker = front, .id = "test-sdk-trace", .workers = 2 };
    self->provider = dsh_provider_new_options (&options);
    assert_non_null (self->provider);
    assert_int_equal (dsh_provider_add (self->provider, &s_echo_def, s_echo, NULL), 0);
    assert_int_equal (dsh_provider_add (self->provider, &s_context_def, s_context, NULL), 0);
    assert_int_equal (dsh_provider_add (self->provider, &s_fail_def, s_fail, NULL), 0);
    assert_int_equal (dsh_provider_add (self->provider, &s_defer_def, s_defer, NULL), 0);
    dsh_provider_start (self->provider);

    zframe_t *routing_id = NULL;
    zmsg_t *msg = s_recv (self->front);
    s_expect_head (msg, DSH_HELLO, &routing_id);
    zmsg_destroy (&msg);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 4);
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

//  Packs meta {traceparent, tracestate?} (traceparent NULL: no meta).
static zchunk_t *
s_meta (const char *traceparent, const char *tracestate)
{
    if (!traceparent)
        return NULL;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1 + (tracestate != NULL));
    dsh_packer_kv_str (&packer, "traceparent", traceparent);
    if (tracestate)
        dsh_packer_kv_str (&packer, "tracestate", tracestate);
    zchunk_t *chunk = zchunk_new (packer.sbuf.data, packer.sbuf.size);
    dsh_packer_release (&packer);
    return chunk;
}

//  Sends CALL token {callId, name, arguments, meta?} to the provider and
//  returns the RESULT's first text (caller frees) and, if code_p, its
//  error code (NULL on success; caller frees).
static char *
s_call (s_broker_t *self, uint64_t token, const char *call_id, const char *name, const char *args_json,
        const char *traceparent, const char *tracestate, char **code_p)
{
    msgpack_sbuffer args;
    char error [256];
    assert_int_equal (dsh_json_text_to_msgpack (args_json, &args, error, sizeof error), 0);
    zchunk_t *meta = s_meta (traceparent, tracestate);
    zframe_t *body = dsh_proto_encode_call (call_id, name, args.data, args.size, NULL,
                                            meta? zchunk_data (meta): NULL, meta? zchunk_size (meta): 0, 0);
    msgpack_sbuffer_destroy (&args);
    zchunk_destroy (&meta);
    zmsg_t *msg = s_head (self->routing_id, DSH_CALL);
    zmsg_addmem (msg, &token, sizeof (token));
    zmsg_append (msg, &body);
    assert_int_equal (zmsg_send (&msg, self->work), 0);

    msg = s_recv (self->work);
    s_expect_head (msg, DSH_RESULT, NULL);
    zframe_t *token_frame = zmsg_pop (msg);
    assert_memory_equal (zframe_data (token_frame), &token, sizeof (token));
    zframe_destroy (&token_frame);
    zframe_t *result = zmsg_pop (msg);
    zmsg_destroy (&msg);
    dsh_doc_t *doc = dsh_proto_decode_body (result, error, sizeof error);
    assert_non_null (doc);
    const msgpack_object *root = dsh_doc_root (doc);
    const msgpack_object *content = dsh_map_get (root, "content");
    assert_true (content && content->via.array.size >= 1);
    char *text = strdup (dsh_doc_strdup (doc, dsh_map_get (content->via.array.ptr, "text")));
    if (code_p) {
        const char *code = dsh_doc_strdup (doc, dsh_map_get (dsh_map_get (root, "error"), "code"));
        *code_p = code? strdup (code): NULL;
    }
    dsh_doc_destroy (&doc);
    zframe_destroy (&result);
    return text;
}

//  ---------------------------------------------------------------------
//  The collector: OTLP/HTTP JSON on loopback, one request per connection

typedef struct {
    int listener;
    int port;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mutex;
    json_t *spans;                  //  every span received, in order
    int requests;
} s_collector_t;

static s_collector_t s_collector;

//  Reads one HTTP request on fd and answers it 200; its body's spans go
//  into the collector's list.
static void
s_collector_serve (int fd)
{
    char *request = NULL;
    size_t size = 0;
    size_t body_at = 0, body_size = 0;
    int64_t deadline = zclock_mono () + WAIT_MS;
    while (zclock_mono () < deadline) {
        struct pollfd item = { fd, POLLIN, 0 };
        if (poll (&item, 1, 100) <= 0)
            continue;
        char buffer [16384];
        ssize_t got = read (fd, buffer, sizeof buffer);
        if (got <= 0)
            break;
        request = (char *) realloc (request, size + (size_t) got + 1);
        memcpy (request + size, buffer, (size_t) got);
        size += (size_t) got;
        request [size] = 0;
        char *end = strstr (request, "\r\n\r\n");
        if (end && !body_at) {
            body_at = (size_t) (end - request) + 4;
            char *length = strcasestr (request, "\r\nContent-Length:");
            body_size = length && length < end? (size_t) strtoul (length + 17, NULL, 10): 0;
        }
        if (body_at && size >= body_at + body_size)
            break;
    }
    if (body_at && size >= body_at + body_size) {
        json_error_t error;
        json_t *body = json_loadb (request + body_at, body_size, 0, &error);
        pthread_mutex_lock (&s_collector.mutex);
        s_collector.requests++;
        size_t index, scope_index, span_index;
        json_t *resource, *scope, *span;
        json_array_foreach (json_object_get (body, "resourceSpans"), index, resource)
            json_array_foreach (json_object_get (resource, "scopeSpans"), scope_index, scope)
                json_array_foreach (json_object_get (scope, "spans"), span_index, span)
                    json_array_append (s_collector.spans, span);
        pthread_mutex_unlock (&s_collector.mutex);
        json_decref (body);
    }
    const char *answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                         "Connection: close\r\n\r\n{}";
    ssize_t sent = write (fd, answer, strlen (answer));
    (void) sent;
    free (request);
    close (fd);
}

static void *
s_collector_run (void *arg)
{
    (void) arg;
    while (!atomic_load (&s_collector.stop)) {
        struct pollfd item = { s_collector.listener, POLLIN, 0 };
        if (poll (&item, 1, 50) <= 0)
            continue;
        int fd = accept (s_collector.listener, NULL, NULL);
        if (fd >= 0)
            s_collector_serve (fd);
    }
    return NULL;
}

static void
s_collector_start (void)
{
    s_collector.listener = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (s_collector.listener >= 0);
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = 0 };
    address.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    assert_int_equal (bind (s_collector.listener, (struct sockaddr *) &address, sizeof address), 0);
    assert_int_equal (listen (s_collector.listener, 16), 0);
    socklen_t length = sizeof address;
    getsockname (s_collector.listener, (struct sockaddr *) &address, &length);
    s_collector.port = ntohs (address.sin_port);
    s_collector.spans = json_array ();
    pthread_mutex_init (&s_collector.mutex, NULL);
    atomic_init (&s_collector.stop, false);
    assert_int_equal (pthread_create (&s_collector.thread, NULL, s_collector_run, NULL), 0);
}

static void
s_collector_stop (void)
{
    atomic_store (&s_collector.stop, true);
    pthread_join (s_collector.thread, NULL);
    close (s_collector.listener);
    json_decref (s_collector.spans);
    pthread_mutex_destroy (&s_collector.mutex);
}

//  The span received whose gen_ai.tool.call.id is call_id (a new
//  reference), waiting up to WAIT_MS; NULL if none came.
static json_t *s_attribute (json_t *span, const char *key);

static json_t *
s_span_of_call (const char *call_id, int timeout_ms)
{
    int64_t deadline = zclock_mono () + timeout_ms;
    do {
        json_t *found = NULL;
        pthread_mutex_lock (&s_collector.mutex);
        size_t index;
        json_t *span;
        json_array_foreach (s_collector.spans, index, span) {
            json_t *value = s_attribute (span, "gen_ai.tool.call.id");
            if (value && streq (json_string_value (json_object_get (value, "stringValue")) ?: "", call_id))
                found = json_incref (span);
        }
        pthread_mutex_unlock (&s_collector.mutex);
        if (found)
            return found;
        zclock_sleep (20);
    } while (zclock_mono () < deadline);
    return NULL;
}

//  The value object ({stringValue: ...}) of attribute key, or NULL.
static json_t *
s_attribute (json_t *span, const char *key)
{
    size_t index;
    json_t *attribute;
    json_array_foreach (json_object_get (span, "attributes"), index, attribute)
        if (streq (json_string_value (json_object_get (attribute, "key")) ?: "", key))
            return json_object_get (attribute, "value");
    return NULL;
}

static const char *
s_attribute_str (json_t *span, const char *key)
{
    return json_string_value (json_object_get (s_attribute (span, key), "stringValue"));
}

//  ---------------------------------------------------------------------
//  Tests

//  A handler reads the context its CALL's meta carries, whether tracing
//  is on or off (here: off, the tracer not started yet)
static void
test_handler_sees_context (void **state)
{
    (void) state;
    assert_false (dsh_trace_enabled ());
    s_broker_t broker;
    s_broker_start (&broker);
    char *text = s_call (&broker, 1, "c-1", "context", "{}", S_TRACEPARENT, S_TRACESTATE, NULL);
    assert_string_equal (text, S_TRACEPARENT " " S_TRACESTATE);
    zstr_free (&text);
    text = s_call (&broker, 2, "c-2", "context", "{}", S_TRACEPARENT, NULL, NULL);
    assert_string_equal (text, S_TRACEPARENT " ");
    zstr_free (&text);
    //  None, or one that is not a valid traceparent: no context
    text = s_call (&broker, 3, "c-3", "context", "{}", NULL, NULL, NULL);
    assert_string_equal (text, "none");
    zstr_free (&text);
    text = s_call (&broker, 4, "c-4", "context", "{}", "00-" S_TRACE_ID "-0000000000000000-01", NULL, NULL);
    assert_string_equal (text, "none");
    zstr_free (&text);
    text = s_call (&broker, 5, "c-5", "context", "{}", "not a traceparent", NULL, NULL);
    assert_string_equal (text, "none");
    zstr_free (&text);
    s_broker_stop (&broker);
}

//  With the tracer on, each handler run is an execute_tool span, a child of
//  the call's context, with the conventions' attributes
static void
test_execute_tool_span (void **state)
{
    (void) state;
    s_collector_start ();
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "http://127.0.0.1:%d", s_collector.port);
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint, 1);
    setenv ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", 1);
    setenv ("OTEL_BSP_SCHEDULE_DELAY", "20", 1);
    setenv ("DSH_TRACE_TOOL_CONTENT", "1", 1);
    char error [256] = "";
    assert_int_equal (dsh_trace_start ("test-sdk-trace", error, sizeof error), 0);
    assert_true (dsh_trace_enabled ());
    s_broker_t broker;
    s_broker_start (&broker);

    //  Not sampled: no span (the default sampler follows the parent)
    char *text = s_call (&broker, 10, "c-unsampled", "echo", "{\"message\": \"quiet\"}", S_UNSAMPLED, NULL, NULL);
    assert_string_equal (text, "quiet");
    zstr_free (&text);

    text = s_call (&broker, 11, "c-echo", "echo", "{\"message\": \"hello\"}", S_TRACEPARENT, S_TRACESTATE, NULL);
    assert_string_equal (text, "hello");
    zstr_free (&text);
    json_t *span = s_span_of_call ("c-echo", WAIT_MS);
    if (!span)
        fail_msg ("no execute_tool span came for c-echo");
    assert_string_equal (json_string_value (json_object_get (span, "name")), "execute_tool echo");
    assert_int_equal (json_integer_value (json_object_get (span, "kind")), DSH_SPAN_INTERNAL);
    assert_string_equal (json_string_value (json_object_get (span, "traceId")), S_TRACE_ID);
    assert_string_equal (json_string_value (json_object_get (span, "parentSpanId")), S_PARENT_ID);
    assert_string_equal (json_string_value (json_object_get (span, "traceState")), S_TRACESTATE);
    assert_string_equal (s_attribute_str (span, "gen_ai.operation.name"), "execute_tool");
    assert_string_equal (s_attribute_str (span, "gen_ai.tool.name"), "echo");
    assert_string_equal (s_attribute_str (span, "gen_ai.tool.call.arguments"), "{\"message\":\"hello\"}");
    assert_string_equal (s_attribute_str (span, "gen_ai.tool.call.result"), "[{\"type\":\"text\",\"text\":\"hello\"}]");
    assert_null (s_attribute (span, "error.type"));
    json_t *status = json_object_get (span, "status");
    assert_true (!status || json_integer_value (json_object_get (status, "code")) != 2);
    json_decref (span);
    //  By now the unsampled call's span would have come before it
    assert_null (s_span_of_call ("c-unsampled", 0));

    //  A failed result: status ERROR, error.type its dsh code, no result
    char *code = NULL;
    text = s_call (&broker, 12, "c-fail", "fail", "{}", S_TRACEPARENT, NULL, &code);
    assert_string_equal (text, "Error: no such thing");
    assert_string_equal (code, DSH_E_DENIED);
    zstr_free (&text);
    zstr_free (&code);
    span = s_span_of_call ("c-fail", WAIT_MS);
    if (!span)
        fail_msg ("no execute_tool span came for c-fail");
    assert_string_equal (json_string_value (json_object_get (span, "name")), "execute_tool fail");
    assert_string_equal (s_attribute_str (span, "error.type"), DSH_E_DENIED);
    status = json_object_get (span, "status");
    assert_int_equal (json_integer_value (json_object_get (status, "code")), 2);
    assert_string_equal (json_string_value (json_object_get (status, "message")), "Error: no such thing");
    assert_null (s_attribute (span, "gen_ai.tool.call.result"));
    json_decref (span);

    //  Arguments the tool's spec refuses: the run fails INVALID_ARGS
    text = s_call (&broker, 13, "c-invalid", "echo", "{\"message\": 42}", S_TRACEPARENT, NULL, NULL);
    zstr_free (&text);
    span = s_span_of_call ("c-invalid", WAIT_MS);
    if (!span)
        fail_msg ("no execute_tool span came for c-invalid");
    assert_string_equal (s_attribute_str (span, "error.type"), DSH_E_INVALID_ARGS);
    json_decref (span);

    //  A deferred call's span ends when it is finished, on the finisher's thread
    int64_t asked_ns = dsh_trace_now_ns ();
    text = s_call (&broker, 15, "c-defer", "defer", "{}", S_TRACEPARENT, NULL, NULL);
    assert_string_equal (text, "finished later");
    zstr_free (&text);
    span = s_span_of_call ("c-defer", WAIT_MS);
    if (!span)
        fail_msg ("no execute_tool span came for c-defer");
    assert_string_equal (json_string_value (json_object_get (span, "parentSpanId")), S_PARENT_ID);
    int64_t start_ns = strtoll (json_string_value (json_object_get (span, "startTimeUnixNano")), NULL, 10);
    int64_t end_ns = strtoll (json_string_value (json_object_get (span, "endTimeUnixNano")), NULL, 10);
    assert_true (start_ns >= asked_ns && end_ns - start_ns >= 20 * 1000000LL);
    json_decref (span);

    //  A call with no context: a root span of its own
    text = s_call (&broker, 14, "c-root", "echo", "{\"message\": \"root\"}", NULL, NULL, NULL);
    zstr_free (&text);
    span = s_span_of_call ("c-root", WAIT_MS);
    if (!span)
        fail_msg ("no execute_tool span came for c-root");
    assert_null (json_object_get (span, "parentSpanId"));
    assert_string_not_equal (json_string_value (json_object_get (span, "traceId")), S_TRACE_ID);
    json_decref (span);

    s_broker_stop (&broker);
    dsh_trace_stop (2000);
    s_collector_stop ();
}

//  A client puts a context in a call's meta and reads the one its RESULT
//  brings back
static void
test_client_context (void **state)
{
    (void) state;
    dsh_trace_ctx_t ctx;
    assert_int_equal (dsh_trace_parse (&ctx, S_TRACEPARENT, strlen (S_TRACEPARENT)), 0);
    snprintf (ctx.tracestate, sizeof ctx.tracestate, "%s", S_TRACESTATE);

    //  Other entries stay; a traceparent and tracestate already there are replaced
    zchunk_t *old = s_meta ("00-" S_TRACE_ID "-00f067aa0ba902b7-01", "old=1");
    zchunk_t *meta = dsh_client_trace_meta (&ctx, zchunk_data (old), zchunk_size (old));
    assert_non_null (meta);
    char error [256];
    dsh_doc_t *doc = dsh_doc_new (zchunk_data (meta), zchunk_size (meta), error, sizeof error);
    assert_non_null (doc);
    assert_int_equal (dsh_doc_root (doc)->via.map.size, 2);
    assert_string_equal (dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "traceparent")), S_TRACEPARENT);
    assert_string_equal (dsh_doc_strdup (doc, dsh_map_get (dsh_doc_root (doc), "tracestate")), S_TRACESTATE);
    dsh_doc_destroy (&doc);
    zchunk_destroy (&old);
    zchunk_destroy (&meta);
    //  Not a map: refused
    assert_null (dsh_client_trace_meta (&ctx, "\x01", 1));

    //  On the wire, to a broker played here
    zsock_t *front = zsock_new_router ("inproc://test-sdk-trace-client");
    assert_non_null (front);
    dsh_client_t *client = dsh_client_new ("inproc://test-sdk-trace-client");
    assert_non_null (client);
    ctx.tracestate [0] = 0;
    meta = dsh_client_trace_meta (&ctx, NULL, 0);
    const char *call_id = dsh_client_call_send (client, "c-client", "echo", NULL, 0, NULL,
                                                zchunk_data (meta), zchunk_size (meta), 0);
    assert_non_null (call_id);
    zchunk_destroy (&meta);
    //  The client may PING first: the CALL is what counts here
    zmsg_t *msg = NULL;
    zframe_t *routing_id = NULL;
    for (int64_t deadline = zclock_mono () + WAIT_MS; !msg && zclock_mono () < deadline; ) {
        msg = s_recv (front);
        //  [routing id] "" "DSH1" command body
        zframe_t *frame = zmsg_first (msg);
        for (int index = 0; frame && index < 3; index++)
            frame = zmsg_next (msg);
        if (!frame || !zframe_streq (frame, DSH_CALL))
            zmsg_destroy (&msg);
    }
    assert_non_null (msg);
    s_expect_head (msg, DSH_CALL, &routing_id);
    zframe_t *body = zmsg_pop (msg);
    zmsg_destroy (&msg);
    doc = dsh_proto_decode_body (body, error, sizeof error);
    assert_non_null (doc);
    const msgpack_object *sent = dsh_map_get (dsh_doc_root (doc), "meta");
    assert_string_equal (dsh_doc_strdup (doc, dsh_map_get (sent, "traceparent")), S_TRACEPARENT);
    assert_null (dsh_map_get (sent, "tracestate"));
    dsh_doc_destroy (&doc);
    zframe_destroy (&body);

    //  The RESULT carries the broker's span for the call back
    const char *back = "00-" S_TRACE_ID "-1111111111111111-01";
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 4);
    dsh_packer_kv_str (&packer, "callId", "c-client");
    dsh_pack_cstr (&packer.pk, "content");
    msgpack_pack_array (&packer.pk, 0);
    dsh_pack_cstr (&packer.pk, "isError");
    msgpack_pack_false (&packer.pk);
    dsh_packer_kv_str (&packer, "traceparent", back);
    body = dsh_packer_frame (&packer);
    dsh_packer_release (&packer);
    msg = s_head (routing_id, DSH_RESULT);
    zmsg_append (msg, &body);
    assert_int_equal (zmsg_send (&msg, front), 0);
    zframe_destroy (&routing_id);
    dsh_reply_t *reply = dsh_client_recv (client, WAIT_MS);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    dsh_trace_ctx_t returned;
    assert_int_equal (dsh_reply_trace (reply, &returned), 0);
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&returned, traceparent);
    assert_string_equal (traceparent, back);
    assert_string_equal (returned.tracestate, "");
    dsh_reply_destroy (&reply);
    dsh_client_destroy (&client);
    zsock_destroy (&front);
}

int
main (void)
{
    //  Tracing is configured by the environment: none of the caller's
    unsetenv ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    unsetenv ("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv ("OTEL_SDK_DISABLED");
    unsetenv ("OTEL_TRACES_EXPORTER");
    unsetenv ("OTEL_TRACES_SAMPLER");
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_handler_sees_context),
        cmocka_unit_test (test_execute_tool_span),
        cmocka_unit_test (test_client_context),
    };
    int rc = cmocka_run_group_tests (tests, NULL, NULL);
    zsys_shutdown ();
    return rc;
}
