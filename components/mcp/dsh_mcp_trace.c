/*  =========================================================================
    dsh_mcp_trace - W3C trace context across MCP, and MCP spans

    The keys and attributes are those of the OpenTelemetry MCP semantic
    conventions (open-telemetry/semantic-conventions-genai,
    docs/gen-ai/mcp.md, status Development): context in params._meta,
    span names "{mcp.method.name} {target}", error.type the dsh error code
    where dsh gave one, else the JSON-RPC error code or "tool_error".
    =========================================================================
*/

#include "dsh_mcp_trace.h"

//  The longest status message kept from an error's text
#define STATUS_MESSAGE_MAX 256

static void
s_take (dsh_mcp_trace_t *trace, const char *key, const char *value, size_t size)
{
    //  A NUL would cut the C string the value is kept as: a different
    //  list, not the one the client sent (JSON's \u0000, or msgpack)
    if (memchr (value, 0, size))
        return;
    if (streq (key, "traceparent"))
        trace->valid = dsh_trace_parse (&trace->ctx, value, size) == 0;
    else
    if (streq (key, "tracestate")) {
        //  Kept whole or not at all: a cut list would be a different one
        if (size <= DSH_TRACESTATE_MAX) {
            memcpy (trace->tracestate, value, size);
            trace->tracestate [size] = 0;
        }
    }
    else
    if (streq (key, "baggage") && size <= DSH_MCP_BAGGAGE_MAX && !trace->baggage) {
        trace->baggage = (char *) malloc (size + 1);
        assert (trace->baggage);
        memcpy (trace->baggage, value, size);
        trace->baggage [size] = 0;
    }
}

//  dsh_trace_parse empties the context's tracestate: it is put in after
static void
s_finish_read (dsh_mcp_trace_t *trace)
{
    if (trace->valid)
        snprintf (trace->ctx.tracestate, sizeof trace->ctx.tracestate, "%s", trace->tracestate);
}

void
dsh_mcp_trace_from_json (dsh_mcp_trace_t *trace, const json_t *meta)
{
    memset (trace, 0, sizeof *trace);
    const char *key;
    json_t *value;
    json_object_foreach ((json_t *) meta, key, value)
        if (json_is_string (value))
            s_take (trace, key, json_string_value (value), json_string_length (value));
    s_finish_read (trace);
}

void
dsh_mcp_trace_from_msgpack (dsh_mcp_trace_t *trace, const msgpack_object *meta)
{
    memset (trace, 0, sizeof *trace);
    if (!meta || meta->type != MSGPACK_OBJECT_MAP)
        return;
    for (uint32_t index = 0; index < meta->via.map.size; index++) {
        const msgpack_object *key = &meta->via.map.ptr [index].key;
        const msgpack_object *value = &meta->via.map.ptr [index].val;
        if (key->type != MSGPACK_OBJECT_STR || value->type != MSGPACK_OBJECT_STR || key->via.str.size > 16)
            continue;
        char name [17];
        memcpy (name, key->via.str.ptr, key->via.str.size);
        name [key->via.str.size] = 0;
        s_take (trace, name, value->via.str.ptr, value->via.str.size);
    }
    s_finish_read (trace);
}

void
dsh_mcp_trace_clear (dsh_mcp_trace_t *trace)
{
    free (trace->baggage);
    memset (trace, 0, sizeof *trace);
}

dsh_span_t *
dsh_mcp_span_start (const char *method, const char *target, int kind, dsh_mcp_trace_t *trace)
{
    if (!dsh_trace_enabled ())
        return NULL;
    char name [512];
    snprintf (name, sizeof name, "%s%s%s", method, target? " ": "", target? target: "");
    dsh_span_t *span = dsh_span_start (name, kind, trace->valid? &trace->ctx: NULL, 0);
    if (span) {
        dsh_span_set_str (span, "mcp.method.name", method);
        if (target && streq (method, "tools/call")) {
            dsh_span_set_str (span, "gen_ai.tool.name", target);
            dsh_span_set_str (span, "gen_ai.operation.name", "execute_tool");
        }
        else
        if (target && streq (method, "prompts/get"))
            dsh_span_set_str (span, "gen_ai.prompt.name", target);
        dsh_span_context (span, &trace->ctx);
        trace->valid = true;
    }
    else
    if (!trace->valid) {
        //  A root the sampler refused: the hops after are told so, and do
        //  not sample this call on their own
        dsh_trace_new_root (&trace->ctx);
        trace->ctx.flags = 0;
        trace->valid = true;
    }
    return span;
}

//  The first text block of a result, for an isError span's status.
static const char *
s_first_text (const json_t *result)
{
    size_t index;
    const json_t *block;
    json_array_foreach (json_object_get (result, "content"), index, block) {
        const char *text = json_string_value (json_object_get (block, "text"));
        if (text)
            return text;
    }
    return "the tool failed";
}

void
dsh_mcp_span_end (dsh_span_t **span_p, const json_t *answer, const char *dsh_code)
{
    dsh_span_t *span = *span_p;
    if (!span)
        return;
    const json_t *error = json_object_get (answer, "error");
    const json_t *result = json_object_get (answer, "result");
    //  error.type is the dsh error code where dsh gave one (the issue's
    //  rule, the same on every dsh span), else the MCP conventions' value:
    //  the JSON-RPC error code, or tool_error for an isError result
    bool dsh_failed = dsh_code && *dsh_code;
    char message [STATUS_MESSAGE_MAX + 1];
    if (json_is_object (error)) {
        char code [32];
        snprintf (code, sizeof code, "%" JSON_INTEGER_FORMAT, json_integer_value (json_object_get (error, "code")));
        const char *text = json_string_value (json_object_get (error, "message"));
        snprintf (message, sizeof message, "%s", text? text: "");
        dsh_span_set_error (span, dsh_failed? dsh_code: code, message);
        dsh_span_set_str (span, "rpc.response.status_code", code);
    }
    else
    if (json_is_true (json_object_get (result, "isError"))) {
        snprintf (message, sizeof message, "%s", s_first_text (result));
        dsh_span_set_error (span, dsh_failed? dsh_code: "tool_error", message);
    }
    if (dsh_failed)
        dsh_span_set_str (span, "dsh.error.code", dsh_code);
    dsh_span_end (span_p, 0);
}

void
dsh_mcp_span_fail (dsh_span_t **span_p, const char *error_type, const char *message)
{
    dsh_span_set_error (*span_p, error_type, message);
    dsh_span_end (span_p, 0);
}

static void
s_pack_str (msgpack_packer *pk, const char *text)
{
    size_t size = strlen (text);
    msgpack_pack_str (pk, size);
    msgpack_pack_str_body (pk, text, size);
}

int
dsh_mcp_trace_pack (const dsh_mcp_trace_t *trace, msgpack_packer *pk)
{
    if (!trace->valid)
        return -1;
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&trace->ctx, traceparent);
    msgpack_pack_map (pk, 1 + (*trace->ctx.tracestate != 0) + (trace->baggage != NULL));
    s_pack_str (pk, "traceparent");
    s_pack_str (pk, traceparent);
    if (*trace->ctx.tracestate) {
        s_pack_str (pk, "tracestate");
        s_pack_str (pk, trace->ctx.tracestate);
    }
    if (trace->baggage) {
        s_pack_str (pk, "baggage");
        s_pack_str (pk, trace->baggage);
    }
    return 0;
}

void
dsh_mcp_trace_to_json (const dsh_mcp_trace_t *trace, json_t *meta)
{
    if (!trace->valid)
        return;
    char traceparent [DSH_TRACEPARENT_SIZE + 1];
    dsh_trace_format (&trace->ctx, traceparent);
    json_object_set_new (meta, "traceparent", json_string (traceparent));
    if (*trace->ctx.tracestate)
        json_object_set_new (meta, "tracestate", json_string (trace->ctx.tracestate));
    if (trace->baggage)
        json_object_set_new (meta, "baggage", json_string (trace->baggage));
}
