/*  =========================================================================
    test_trace - one call, one trace: a C client's context through a real
    broker (three stages) to a Node component, decoded by an OTLP receiver

    tests/otel/receiver.mjs decodes what every process exports with the
    official OTLP definitions and prints a line per span. The client calls
    with a traceparent of its own; the trace must be client span -> the
    broker's call span -> the three stages' spans, nested -> the dispatch
    span -> the component's execute_tool span, and the RESULT carries the
    call span's context back. With tracing off the broker makes no span
    and the client's traceparent reaches the component untouched; an
    invalid one (or one not a str) starts a new trace; 1% sampling runs;
    a human's approval is a span; the audit record names the trace; a bad
    OTEL_* value stops the broker at start.
    The Node component is components/node/test/fixtures/traced-component.mjs.
    Skipped (77) without node 18+ and npm, or components/node unbuilt.
    =========================================================================
*/

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <limits.h>
#include <signal.h>

#include "dsh.h"
#include "dsh_testkit.h"
#include "dsh_trace.h"

#define S_TOOL "traced_echo"

static char s_node [PATH_MAX * 2];     //  node, relative to the build dir (the kit runs argv [0] from there)
static char s_source [PATH_MAX];

//  node's path on $PATH as the kit can start it: relative to the build
//  directory. 0, or -1 if there is none.
static int
s_find_node (void)
{
    const char *path = getenv ("PATH");
    char found [PATH_MAX] = "";
    char *copy = strdup (path? path: "/usr/bin:/bin");
    for (char *dir = strtok (copy, ":"); dir && !*found; dir = strtok (NULL, ":")) {
        char candidate [PATH_MAX];
        snprintf (candidate, sizeof (candidate), "%s/node", dir);
        if (access (candidate, X_OK) == 0 && !realpath (candidate, found))
            *found = 0;
    }
    free (copy);
    char build [PATH_MAX];
    const char *build_dir = getenv ("DSH_BUILD_DIR");
    if (!*found || !realpath (build_dir? build_dir: "build", build))
        return -1;
    size_t depth = 0;
    for (const char *each = build; *each; each++)
        depth += *each == '/';
    *s_node = 0;
    for (size_t index = 0; index < depth; index++)
        strcat (s_node, "../");
    strcat (s_node, found + 1);
    return 0;
}

//  ---------------------------------------------------------------------
//  The receiver, and the spans it printed

typedef struct {
    dsh_testproc_t *proc;
    char endpoint [64];         //  http://127.0.0.1:PORT
} receiver_t;

static receiver_t *
s_receiver_start (void)
{
    receiver_t *self = (receiver_t *) zmalloc (sizeof (receiver_t));
    char script [PATH_MAX + 64];
    snprintf (script, sizeof (script), "%s/tests/otel/receiver.mjs", s_source);
    const char *argv [] = { s_node, script, NULL };
    self->proc = dsh_testproc_start (argv);
    assert_non_null (self->proc);
    char *line = dsh_testproc_wait_line (self->proc, "listening ", 10000);
    assert_non_null (line);
    snprintf (self->endpoint, sizeof (self->endpoint), "http://127.0.0.1:%d", atoi (strstr (line, "listening ") + 10));
    free (line);
    return self;
}

static void
s_receiver_stop (receiver_t **self_p)
{
    receiver_t *self = *self_p;
    dsh_testproc_destroy (&self->proc);
    free (self);
    *self_p = NULL;
}

//  The spans of trace (32 hex) the receiver printed so far, as a JSON
//  array (new reference). service: only those of this service.name (NULL:
//  any).
static json_t *
s_spans (receiver_t *self, const char *trace_id, const char *service, int wait_ms)
{
    const char *output = dsh_testproc_output (self->proc, wait_ms);
    json_t *spans = json_array ();
    const char *line = output;
    while (line && *line) {
        const char *end = strchr (line, '\n');
        if (!end)
            break;
        json_t *span = *line == '{'? json_loadb (line, (size_t) (end - line), 0, NULL): NULL;
        const char *span_service = json_string_value (json_object_get (json_object_get (span, "resource"),
                                                                       "service.name"));
        if (span && (!trace_id || streq (json_string_value (json_object_get (span, "traceId")), trace_id))
        &&  (!service || (span_service && streq (span_service, service))))
            json_array_append (spans, span);
        json_decref (span);
        line = end + 1;
    }
    return spans;
}

//  The span named name in spans, or NULL (borrowed).
static json_t *
s_span_named (json_t *spans, const char *name)
{
    size_t index;
    json_t *span;
    json_array_foreach (spans, index, span)
        if (streq (json_string_value (json_object_get (span, "name")), name))
            return span;
    return NULL;
}

//  Polls until every name in names (NULL-ended) is a span of trace_id,
//  within 15 s. Returns the spans (new reference).
static json_t *
s_wait_spans (receiver_t *self, const char *trace_id, const char *const *names)
{
    int64_t give_up = zclock_mono () + 15000;
    while (true) {
        json_t *spans = s_spans (self, trace_id, NULL, 100);
        bool all = true;
        for (size_t index = 0; names [index] && all; index++)
            all = s_span_named (spans, names [index]) != NULL;
        if (all)
            return spans;
        if (zclock_mono () > give_up) {
            fprintf (stderr, "test_trace: spans of %s so far:\n%s\n", trace_id,
                     json_dumps (spans, JSON_INDENT (1)));
            for (size_t index = 0; names [index]; index++)
                if (!s_span_named (spans, names [index]))
                    fail_msg ("no span \"%s\" in trace %s", names [index], trace_id);
        }
        json_decref (spans);
    }
}

static const char *
s_str (json_t *object, const char *key)
{
    const char *value = json_string_value (json_object_get (object, key));
    return value? value: "";
}

static const char *
s_attribute (json_t *span, const char *key)
{
    return s_str (json_object_get (span, "attributes"), key);
}

//  ---------------------------------------------------------------------
//  The processes: a broker (tracing on when endpoint is not NULL) with a
//  chain, a Node component, a client

typedef struct {
    dsh_testproc_t *broker;
    dsh_testproc_t *component;
    char endpoint [256];
    dsh_client_t *client;
} swarm_t;

static const char *s_three_stages =
    "chain\n"
    "    stage\n"
    "        name = \"first\"\n"
    "        kind = \"trace\"\n"
    "    stage\n"
    "        name = \"second\"\n"
    "        kind = \"trace\"\n"
    "    stage\n"
    "        name = \"third\"\n"
    "        kind = \"trace\"\n";

//  A permission stage that asks a human for every traced_echo
static const char *s_permission =
    "chain\n"
    "    stage\n"
    "        name = \"permission\"\n"
    "        kind = \"permission\"\n"
    "        timeout_ms = 30000\n"
    "        approval_timeout_ms = 20000\n"
    "        rule\n"
    "            tool = \"" S_TOOL "\"\n"
    "            action = \"ask\"\n";

//  otel: NULL-ended name, value pairs the broker runs with (NULL: tracing
//  off); collector: where the component exports; chain: the broker's
//  config.
static swarm_t *
s_swarm_start_chain (const char *const *otel, const char *collector, const char *chain)
{
    swarm_t *self = (swarm_t *) zmalloc (sizeof (swarm_t));
    for (size_t index = 0; otel && otel [index]; index += 2)
        setenv (otel [index], otel [index + 1], 1);
    self->broker = dsh_testkit_broker_config (200, chain, self->endpoint, sizeof (self->endpoint));
    for (size_t index = 0; otel && otel [index]; index += 2)
        unsetenv (otel [index]);
    assert_non_null (self->broker);
    char fixture [PATH_MAX + 64];
    snprintf (fixture, sizeof (fixture), "%s/components/node/test/fixtures/traced-component.mjs", s_source);
    setenv ("DSH_BROKER", self->endpoint, 1);
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", collector, 1);
    setenv ("OTEL_SERVICE_NAME", "node-component", 1);
    setenv ("DSH_COMPONENT_ID", "node-traced", 1);
    const char *argv [] = { s_node, fixture, NULL };
    self->component = dsh_testproc_start (argv);
    unsetenv ("DSH_BROKER");
    unsetenv ("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv ("OTEL_SERVICE_NAME");
    unsetenv ("DSH_COMPONENT_ID");
    assert_non_null (self->component);
    char *ready = dsh_testproc_wait_line (self->component, "ready ", 20000);
    assert_non_null (ready);
    free (ready);
    self->client = dsh_client_new (self->endpoint);
    return self;
}

//  The same with three trace stages
static swarm_t *
s_swarm_start (const char *const *otel, const char *collector)
{
    return s_swarm_start_chain (otel, collector, s_three_stages);
}

static void
s_swarm_stop (swarm_t **self_p)
{
    swarm_t *self = *self_p;
    dsh_client_destroy (&self->client);
    dsh_testproc_signal (self->component, SIGTERM);
    dsh_testproc_wait (self->component, 5000);
    dsh_testproc_destroy (&self->component);
    //  A clean stop: the spans of its last calls flushed, nothing leaked
    //  (under a sanitizer, a leak is a failed exit)
    dsh_testproc_signal (self->broker, SIGTERM);
    assert_int_equal (dsh_testproc_wait (self->broker, 15000), 0);
    dsh_testproc_destroy (&self->broker);
    free (self);
    *self_p = NULL;
}

//  A meta map {traceparent: value} (value: msgpack of one object, or NULL:
//  no meta at all), packed.
static zchunk_t *
s_meta (const void *value, size_t size)
{
    if (!value)
        return NULL;
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_pack_cstr (&packer.pk, "traceparent");
    dsh_packer_raw (&packer, value, size);
    zchunk_t *meta = zchunk_new (packer.sbuf.data, packer.sbuf.size);
    dsh_packer_release (&packer);
    return meta;
}

//  Calls traced_echo {text} with meta (NULL: none); returns the RESULT.
static dsh_reply_t *
s_call (swarm_t *swarm, zchunk_t *meta, const char *text)
{
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, "text", text);
    const char *call_id = dsh_client_call_send (swarm->client, NULL, S_TOOL, packer.sbuf.data, packer.sbuf.size,
                                                NULL, meta? zchunk_data (meta): NULL, meta? zchunk_size (meta): 0,
                                                10000);
    dsh_packer_release (&packer);
    assert_non_null (call_id);
    dsh_reply_t *reply = dsh_client_recv (swarm->client, 15000);
    assert_non_null (reply);
    assert_string_equal (dsh_reply_command (reply), DSH_RESULT);
    if (dsh_reply_is_error (reply))
        fail_msg ("the call failed: %s", dsh_reply_text (reply));
    return reply;
}

//  What the component saw: its structuredContent's traceparent ("" if null).
static char *
s_component_saw (dsh_reply_t *reply)
{
    json_t *body = dsh_reply_json (reply);
    const char *traceparent = json_string_value (json_object_get (json_object_get (body, "structuredContent"),
                                                                  "traceparent"));
    char *copy = strdup (traceparent? traceparent: "");
    json_decref (body);
    return copy;
}

static void
s_new_context (dsh_trace_ctx_t *ctx)
{
    dsh_trace_new_root (ctx);
    ctx->flags = 1;
}

//  ---------------------------------------------------------------------

static int
s_setup (void **state)
{
    (void) state;
    const char *source = getenv ("DSH_SOURCE_DIR");
    if (!source || !realpath (source, s_source))
        snprintf (s_source, sizeof (s_source), "%s", ".");
    char command [2 * PATH_MAX + 128];
    snprintf (command, sizeof (command), "sh '%s/tests/otel/install.sh' && sh '%s/tests/kit/node_package.sh'",
              s_source, s_source);
    int rc = system (command);
    char built [PATH_MAX + 64];
    snprintf (built, sizeof (built), "%s/components/node/dist/index.js", s_source);
    char sdk [PATH_MAX + 96];
    snprintf (sdk, sizeof (sdk), "%s/components/node/node_modules/@opentelemetry/sdk-trace-base/package.json",
              s_source);
    if (WIFEXITED (rc) && WEXITSTATUS (rc) == 77) {
        fprintf (stderr, "test_trace: no node 18+ and npm here: skipped\n");
        exit (77);
    }
    const char *missing = rc != 0? "the receiver's packages (tests/otel/install.sh failed)":
                          s_find_node ()? "node on $PATH": access (built, R_OK)? built: access (sdk, R_OK)? sdk: NULL;
    if (missing) {
        fprintf (stderr, "test_trace: skipped: no %s (components/node needs npm ci && npm run build)\n", missing);
        exit (77);
    }
    return 0;
}

static const char *s_traced [] = {
    "OTEL_EXPORTER_OTLP_ENDPOINT", NULL, "OTEL_BSP_SCHEDULE_DELAY", "50", NULL
};

//  One trace: client -> call -> first -> second -> third -> dispatch ->
//  execute_tool, and the RESULT carries the call span's context
static void
test_one_trace (void **state)
{
    (void) state;
    receiver_t *receiver = s_receiver_start ();
    const char *otel [5];
    memcpy (otel, s_traced, sizeof (otel));
    otel [1] = receiver->endpoint;
    swarm_t *swarm = s_swarm_start (otel, receiver->endpoint);

    dsh_trace_ctx_t client;
    s_new_context (&client);
    zchunk_t *meta = dsh_client_trace_meta (&client, NULL, 0);
    assert_non_null (meta);
    dsh_reply_t *reply = s_call (swarm, meta, "hello");
    zchunk_destroy (&meta);
    char trace_id [33], client_span [17];
    dsh_trace_id_hex (client.trace_id, 16, trace_id);
    dsh_trace_id_hex (client.span_id, 8, client_span);

    //  The RESULT's context: the client's trace, the broker's call span
    dsh_trace_ctx_t back;
    assert_int_equal (dsh_reply_trace (reply, &back), 0);
    assert_memory_equal (back.trace_id, client.trace_id, 16);
    char back_span [17];
    dsh_trace_id_hex (back.span_id, 8, back_span);

    const char *names [] = { "dsh.call " S_TOOL, "dsh.stage first", "dsh.stage second", "dsh.stage third",
                             "dsh.dispatch " S_TOOL, "execute_tool " S_TOOL, NULL };
    json_t *spans = s_wait_spans (receiver, trace_id, names);
    json_t *call = s_span_named (spans, names [0]);
    assert_string_equal (s_str (call, "parentSpanId"), client_span);
    assert_string_equal (s_str (call, "spanId"), back_span);
    assert_int_equal (json_integer_value (json_object_get (call, "kind")), 2);     //  SERVER
    assert_string_equal (s_attribute (call, "gen_ai.tool.name"), S_TOOL);
    assert_string_equal (s_attribute (call, "gen_ai.tool.call.id"), dsh_reply_call_id (reply));
    assert_string_equal (s_str (json_object_get (call, "resource"), "service.name"), "dsh-broker");
    //  The stages nest as the call passes them; the dispatch is innermost
    const char *parent = s_str (call, "spanId");
    for (size_t index = 1; index <= 4; index++) {
        json_t *span = s_span_named (spans, names [index]);
        assert_string_equal (s_str (span, "parentSpanId"), parent);
        parent = s_str (span, "spanId");
    }
    json_t *first = s_span_named (spans, "dsh.stage first");
    assert_string_equal (s_attribute (first, "dsh.stage.kind"), "trace");
    //  The trace stage stamps meta.trace: a rewrite; the result it wraps too
    assert_string_equal (s_attribute (first, "dsh.stage.decision"), "rewrote");
    assert_string_equal (s_attribute (first, "dsh.stage.result"), "rewrote");
    json_t *dispatch = s_span_named (spans, names [4]);
    assert_int_equal (json_integer_value (json_object_get (dispatch, "kind")), 3);     //  CLIENT
    assert_string_equal (s_attribute (dispatch, "dsh.component"), "node-traced");
    json_t *tool = s_span_named (spans, names [5]);
    assert_string_equal (s_str (tool, "parentSpanId"), s_str (dispatch, "spanId"));
    assert_string_equal (s_attribute (tool, "gen_ai.tool.call.id"), dsh_reply_call_id (reply));
    //  ... and the component was handed the dispatch span's context
    char *saw = s_component_saw (reply);
    char expected [DSH_TRACEPARENT_SIZE + 1];
    snprintf (expected, sizeof (expected), "00-%s-%s-01", trace_id, s_str (dispatch, "spanId"));
    assert_string_equal (saw, expected);
    free (saw);
    json_decref (spans);
    dsh_reply_destroy (&reply);

    //  STATS counts what the exporter took
    char error [256];
    dsh_reply_t *stats = dsh_client_request (swarm->client, DSH_STATS, NULL, 5000, error, sizeof (error));
    assert_non_null (stats);
    json_t *body = dsh_reply_json (stats);
    json_t *tracing = json_object_get (body, "tracing");
    assert_true (json_is_object (tracing));
    assert_true (json_integer_value (json_object_get (tracing, "spansEnded")) >= 5);
    json_decref (body);
    dsh_reply_destroy (&stats);

    //  A call without a context starts a trace of the broker's, sampled
    //  (parentbased_always_on): the RESULT names it
    reply = s_call (swarm, NULL, "no context");
    assert_int_equal (dsh_reply_trace (reply, &back), 0);
    dsh_trace_id_hex (back.trace_id, 16, trace_id);
    const char *root_names [] = { "dsh.call " S_TOOL, "dsh.dispatch " S_TOOL, "execute_tool " S_TOOL, NULL };
    spans = s_wait_spans (receiver, trace_id, root_names);
    assert_string_equal (s_str (s_span_named (spans, root_names [0]), "parentSpanId"), "");
    json_decref (spans);
    dsh_reply_destroy (&reply);

    s_swarm_stop (&swarm);
    s_receiver_stop (&receiver);
}

//  Tracing off: no broker span, and the client's traceparent reaches the
//  component as it was sent; the RESULT carries nothing more
static void
test_tracing_off (void **state)
{
    (void) state;
    receiver_t *receiver = s_receiver_start ();
    swarm_t *swarm = s_swarm_start (NULL, receiver->endpoint);
    dsh_trace_ctx_t client;
    s_new_context (&client);
    char sent [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&client, sent);
    zchunk_t *meta = dsh_client_trace_meta (&client, NULL, 0);
    dsh_reply_t *reply = s_call (swarm, meta, "off");
    zchunk_destroy (&meta);
    char *saw = s_component_saw (reply);
    assert_string_equal (saw, sent);
    free (saw);
    dsh_trace_ctx_t back;
    assert_int_equal (dsh_reply_trace (reply, &back), -1);
    dsh_reply_destroy (&reply);
    //  The component's span is the client's child: no broker span between
    char trace_id [33], client_span [17];
    dsh_trace_id_hex (client.trace_id, 16, trace_id);
    dsh_trace_id_hex (client.span_id, 8, client_span);
    const char *names [] = { "execute_tool " S_TOOL, NULL };
    json_t *spans = s_wait_spans (receiver, trace_id, names);
    assert_string_equal (s_str (s_span_named (spans, names [0]), "parentSpanId"), client_span);
    json_decref (spans);
    //  Without a context, none is made up
    reply = s_call (swarm, NULL, "off, no context");
    saw = s_component_saw (reply);
    assert_string_equal (saw, "");
    free (saw);
    dsh_reply_destroy (&reply);
    spans = s_spans (receiver, NULL, "dsh-broker", 300);
    assert_int_equal (json_array_size (spans), 0);
    json_decref (spans);
    //  `dsh call` takes the context from $TRACEPARENT (OpenTelemetry's
    //  carrier for processes); an invalid one is said and ignored
    char *output = NULL;
    setenv ("TRACEPARENT", sent, 1);
    int status = dsh_testkit_cli_merged (swarm->endpoint, (const char *[]) {
        "call", S_TOOL, "{\"text\": \"cli\"}", NULL }, 10000, &output);
    assert_int_equal (status, 0);
    if (!strstr (output, sent))
        fail_msg ("want the component to see %s, got: %s", sent, output);
    zstr_free (&output);
    setenv ("TRACEPARENT", "00-not-a-traceparent", 1);
    status = dsh_testkit_cli_merged (swarm->endpoint, (const char *[]) {
        "call", S_TOOL, "{\"text\": \"cli\"}", NULL }, 10000, &output);
    unsetenv ("TRACEPARENT");
    assert_int_equal (status, 0);
    if (!strstr (output, "ignoring $TRACEPARENT") || strstr (output, "\"traceparent\": \"00-"))
        fail_msg ("want the invalid $TRACEPARENT said and ignored, got: %s", output);
    zstr_free (&output);
    s_swarm_stop (&swarm);
    s_receiver_stop (&receiver);
}

//  An invalid traceparent, or one that is not a str, is ignored: the call
//  runs, in a new trace of the broker's
static void
test_invalid_context (void **state)
{
    (void) state;
    receiver_t *receiver = s_receiver_start ();
    const char *otel [5];
    memcpy (otel, s_traced, sizeof (otel));
    otel [1] = receiver->endpoint;
    swarm_t *swarm = s_swarm_start (otel, receiver->endpoint);
    const char *bad = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    byte packed [2 + 55];
    packed [0] = 0xd9;
    packed [1] = 55;
    memcpy (packed + 2, bad, 55);
    byte number [1] = { 42 };
    struct { const void *value; size_t size; } cases [] = { { packed, sizeof (packed) }, { number, 1 } };
    for (size_t index = 0; index < 2; index++) {
        zchunk_t *meta = s_meta (cases [index].value, cases [index].size);
        dsh_reply_t *reply = s_call (swarm, meta, "invalid");
        zchunk_destroy (&meta);
        dsh_trace_ctx_t back;
        assert_int_equal (dsh_reply_trace (reply, &back), 0);
        char trace_id [33];
        dsh_trace_id_hex (back.trace_id, 16, trace_id);
        assert_string_not_equal (trace_id, "00000000000000000000000000000000");
        //  The component got the new trace, not what was sent
        char *saw = s_component_saw (reply);
        assert_int_equal (strlen (saw), DSH_TRACEPARENT_SIZE);
        assert_memory_equal (saw + 3, trace_id, 32);
        free (saw);
        const char *names [] = { "dsh.call " S_TOOL, "execute_tool " S_TOOL, NULL };
        json_t *spans = s_wait_spans (receiver, trace_id, names);
        assert_string_equal (s_str (s_span_named (spans, names [0]), "parentSpanId"), "");
        json_decref (spans);
        dsh_reply_destroy (&reply);
    }
    s_swarm_stop (&swarm);
    s_receiver_stop (&receiver);
}

//  1% sampling: every call runs and is answered with a context; which are
//  recorded is the sampler's (no assertion on counts)
static void
test_sampling (void **state)
{
    (void) state;
    receiver_t *receiver = s_receiver_start ();
    const char *otel [] = { "OTEL_EXPORTER_OTLP_ENDPOINT", receiver->endpoint, "OTEL_BSP_SCHEDULE_DELAY", "50",
                            "OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.01",
                            NULL };
    swarm_t *swarm = s_swarm_start (otel, receiver->endpoint);
    for (int index = 0; index < 100; index++) {
        dsh_trace_ctx_t client;
        s_new_context (&client);
        client.flags = index % 2;
        zchunk_t *meta = index % 3? dsh_client_trace_meta (&client, NULL, 0): NULL;
        dsh_reply_t *reply = s_call (swarm, meta, "sampled?");
        zchunk_destroy (&meta);
        dsh_trace_ctx_t back;
        assert_int_equal (dsh_reply_trace (reply, &back), 0);
        //  What the component was handed is a context, sampled or not
        char *saw = s_component_saw (reply);
        assert_int_equal (strlen (saw), DSH_TRACEPARENT_SIZE);
        free (saw);
        dsh_reply_destroy (&reply);
    }
    s_swarm_stop (&swarm);
    s_receiver_stop (&receiver);
}

//  A human approval: a span of its own, the wait, under the permission
//  stage's, with the request, the approver and the decision
static void
test_approval_wait (void **state)
{
    (void) state;
    receiver_t *receiver = s_receiver_start ();
    const char *otel [5];
    memcpy (otel, s_traced, sizeof (otel));
    otel [1] = receiver->endpoint;
    swarm_t *swarm = s_swarm_start_chain (otel, receiver->endpoint, s_permission);
    zsock_t *approver = dsh_testkit_approver (swarm->client, "permission", 10000);
    assert_non_null (approver);

    dsh_trace_ctx_t client;
    s_new_context (&client);
    zchunk_t *meta = dsh_client_trace_meta (&client, NULL, 0);
    dsh_packer_t packer;
    dsh_packer_init (&packer);
    msgpack_pack_map (&packer.pk, 1);
    dsh_packer_kv_str (&packer, "text", "may I?");
    assert_non_null (dsh_client_call_send (swarm->client, "asked", S_TOOL, packer.sbuf.data, packer.sbuf.size,
                                           NULL, zchunk_data (meta), zchunk_size (meta), 20000));
    dsh_packer_release (&packer);
    zchunk_destroy (&meta);
    char why [512];
    json_t *pending = dsh_testkit_approver_expect (approver, "PENDING", 10000, why, sizeof (why));
    if (!pending)
        fail_msg ("%s", why);
    char request [128];
    snprintf (request, sizeof (request), "%s", s_str (pending, "id"));
    json_decref (pending);
    //  A human takes a moment
    zclock_sleep (100);
    json_t *decide = json_pack ("{s:s, s:s}", "id", request, "outcome", "allow");
    assert_int_equal (dsh_testkit_approver_send (approver, "DECIDE", decide), 0);
    json_decref (decide);
    dsh_reply_t *reply = dsh_client_recv (swarm->client, 15000);
    assert_non_null (reply);
    assert_false (dsh_reply_is_error (reply));
    dsh_reply_destroy (&reply);

    char trace_id [33];
    dsh_trace_id_hex (client.trace_id, 16, trace_id);
    const char *names [] = { "dsh.call " S_TOOL, "dsh.stage permission", "dsh.approval " S_TOOL,
                             "dsh.dispatch " S_TOOL, "execute_tool " S_TOOL, NULL };
    json_t *spans = s_wait_spans (receiver, trace_id, names);
    json_t *stage = s_span_named (spans, names [1]);
    json_t *approval = s_span_named (spans, names [2]);
    assert_string_equal (s_str (stage, "parentSpanId"), s_str (s_span_named (spans, names [0]), "spanId"));
    assert_string_equal (s_str (approval, "parentSpanId"), s_str (stage, "spanId"));
    assert_string_equal (s_attribute (approval, "dsh.approval.request"), request);
    assert_string_not_equal (s_attribute (approval, "dsh.approval.decision"), "");
    assert_string_not_equal (s_attribute (approval, "dsh.approval.approver"), "");
    //  It lasted the human's moment
    int64_t start = atoll (s_str (approval, "startTimeUnixNano"));
    int64_t end = atoll (s_str (approval, "endTimeUnixNano"));
    assert_true (end - start >= 90 * 1000000LL);
    assert_string_equal (s_str (s_span_named (spans, names [3]), "parentSpanId"), s_str (stage, "spanId"));
    json_decref (spans);
    zsock_destroy (&approver);
    s_swarm_stop (&swarm);
    s_receiver_stop (&receiver);
}

//  The audit record names the call's trace: the caller's, with tracing
//  off too; a call without a context has none
static void
test_audit_trace_id (void **state)
{
    (void) state;
    receiver_t *receiver = s_receiver_start ();
    char root [] = "/tmp/dsh-trace-XXXXXX";
    assert_non_null (mkdtemp (root));
    char *config = zsys_sprintf ("broker\n    name = \"traced\"\n    store = \"%s/audit.db\"\n%s", root,
                                 s_three_stages);
    swarm_t *swarm = s_swarm_start_chain (NULL, receiver->endpoint, config);
    zstr_free (&config);
    dsh_trace_ctx_t client;
    s_new_context (&client);
    zchunk_t *meta = dsh_client_trace_meta (&client, NULL, 0);
    dsh_reply_t *reply = s_call (swarm, meta, "audited");
    zchunk_destroy (&meta);
    char traced_call [64];
    snprintf (traced_call, sizeof (traced_call), "%s", dsh_reply_call_id (reply));
    dsh_reply_destroy (&reply);
    reply = s_call (swarm, NULL, "audited, no context");
    char plain_call [64];
    snprintf (plain_call, sizeof (plain_call), "%s", dsh_reply_call_id (reply));
    dsh_reply_destroy (&reply);

    char trace_id [33];
    dsh_trace_id_hex (client.trace_id, 16, trace_id);
    json_t *records = NULL;
    int64_t give_up = zclock_mono () + 10000;
    while (zclock_mono () < give_up) {
        char *output = NULL;
        int rc = dsh_testkit_cli (swarm->endpoint, (const char *[]) { "audit", "--json", NULL }, 10000, &output);
        json_decref (records);
        records = json_array ();
        for (char *line = strtok (output? output: (char *) "", "\n"); line; line = strtok (NULL, "\n"))
            json_array_append_new (records, json_loads (line, 0, NULL));
        zstr_free (&output);
        if (rc == 0 && json_array_size (records) >= 2)
            break;
        zclock_sleep (100);
    }
    assert_int_equal (json_array_size (records), 2);
    size_t index;
    json_t *record;
    size_t seen = 0;
    json_array_foreach (records, index, record) {
        if (streq (s_str (record, "callId"), traced_call)) {
            assert_string_equal (s_str (record, "traceId"), trace_id);
            seen++;
        }
        if (streq (s_str (record, "callId"), plain_call)) {
            assert_null (json_object_get (record, "traceId"));
            seen++;
        }
    }
    assert_int_equal (seen, 2);
    json_decref (records);
    s_swarm_stop (&swarm);
    s_receiver_stop (&receiver);
    zdir_t *dir = zdir_new (root, NULL);
    if (dir)
        zdir_remove (dir, true);
    zdir_destroy (&dir);
}

//  A bad OTEL_* value stops the broker at start, saying which
static void
test_bad_variable (void **state)
{
    (void) state;
    setenv ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9", 1);
    setenv ("OTEL_TRACES_SAMPLER", "sometimes", 1);
    const char *argv [] = { "broker/dsh-broker", NULL };
    dsh_testproc_t *broker = dsh_testproc_start_merged (argv);
    unsetenv ("OTEL_EXPORTER_OTLP_ENDPOINT");
    unsetenv ("OTEL_TRACES_SAMPLER");
    assert_non_null (broker);
    assert_int_equal (dsh_testproc_wait (broker, 10000), 2);
    const char *output = dsh_testproc_output (broker, 100);
    if (!strstr (output, "dsh-broker: tracing: OTEL_TRACES_SAMPLER=sometimes"))
        fail_msg ("the broker said: %s", output);
    dsh_testproc_destroy (&broker);
}

int
main (void)
{
    const struct CMUnitTest tests [] = {
        cmocka_unit_test (test_one_trace),
        cmocka_unit_test (test_tracing_off),
        cmocka_unit_test (test_invalid_context),
        cmocka_unit_test (test_sampling),
        cmocka_unit_test (test_approval_wait),
        cmocka_unit_test (test_audit_trace_id),
        cmocka_unit_test (test_bad_variable),
    };
    return cmocka_run_group_tests (tests, s_setup, NULL);
}
