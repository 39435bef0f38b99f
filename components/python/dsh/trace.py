"""W3C trace context on dsh calls (PROTOCOL.md, Trace context): what a
handler is told of the trace its call belongs to, what a client sends and
gets back, and, when the application has the OpenTelemetry API
(`opentelemetry-api`, imported on first use and never required), the
`execute_tool {name}` span a handler runs in, as the OpenTelemetry GenAI
conventions define it (gen-ai-spans.md, "Execute tool span"). Without the
API nothing is imported and nothing is done.
"""

import json
import os
import re

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACESTATE_MAX = 512


class TraceContext:
    """A call's trace context: its traceparent, tracestate (None if none),
    and the traceparent's fields: trace_id (32 lower hex), parent_id (16
    lower hex: the span the receiver is a child of) and sampled."""

    __slots__ = ("traceparent", "tracestate", "trace_id", "parent_id", "sampled")

    def __init__(self, traceparent, tracestate, trace_id, parent_id, sampled):
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.sampled = sampled

    def __repr__(self):
        return "TraceContext(%r, %r)" % (self.traceparent, self.tracestate)


def parse_traceparent(traceparent, tracestate=None):
    """A TraceContext, or None: the traceparent read strictly as W3C Trace
    Context level 1 says (version 00 is exactly 55 characters; a later one
    is read by its first 55 and may go on after a dash; ff and all-zero ids
    are invalid). A tracestate that is not a str of 1-512 characters is
    dropped."""
    if not isinstance(traceparent, str):
        return None
    match = _TRACEPARENT.match(traceparent)
    if not match:
        return None
    version, trace_id, parent_id, flags = match.groups()
    if version == "ff" or (len(traceparent) != 55 if version == "00"
                           else len(traceparent) > 55 and traceparent[55] != "-"):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if not (isinstance(tracestate, str) and 0 < len(tracestate) <= _TRACESTATE_MAX):
        tracestate = None
    return TraceContext(traceparent[:55], tracestate, trace_id, parent_id, bool(int(flags, 16) & 1))


def meta_trace(meta):
    """The context a CALL's meta carries (meta.traceparent, meta.tracestate),
    or None."""
    if not isinstance(meta, dict):
        return None
    return parse_traceparent(meta.get("traceparent"), meta.get("tracestate"))


def with_trace(meta, traceparent, tracestate=None):
    """meta (a dict or None) with traceparent and tracestate set: what a
    client sends so that the broker's span for the call is a child of that
    context. meta itself is not changed."""
    if traceparent is None and tracestate is None:
        return meta
    merged = dict(meta or {})
    merged.pop("tracestate", None)
    if traceparent is not None:
        merged["traceparent"] = traceparent
    if tracestate is not None:
        merged["tracestate"] = tracestate
    return merged


def _capture_content():
    """Opt-in capture of a tool's arguments and result on its span (the
    conventions say never by default): DSH_TRACE_TOOL_CONTENT=1, or the
    conventions' own OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true."""
    return os.environ.get("DSH_TRACE_TOOL_CONTENT") == "1" \
        or os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"


_api = None         # the imported API, False once known to be absent


def otel():
    """The OpenTelemetry API as a tuple (trace, context, propagate), or None
    when the application does not have it; imported once."""
    global _api
    if _api is None:
        try:
            from opentelemetry import context, propagate, trace
            _api = (trace, context, propagate)
        except ImportError:
            _api = False
    return _api or None


def _parent(api, trace_context):
    """The OpenTelemetry context whose span is the call's remote parent: the
    application's propagator's reading (W3C Trace Context, and baggage, by
    default), else the traceparent read as it is."""
    trace, _, propagate = api
    carrier = {"traceparent": trace_context.traceparent}
    if trace_context.tracestate:
        carrier["tracestate"] = trace_context.tracestate
    parent = propagate.extract(carrier)
    if trace.get_current_span(parent).get_span_context().is_valid:
        return parent
    state = trace.TraceState.from_header([trace_context.tracestate]) if trace_context.tracestate else None
    span_context = trace.SpanContext(
        trace_id=int(trace_context.trace_id, 16), span_id=int(trace_context.parent_id, 16), is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if trace_context.sampled else 0),
        trace_state=state)
    return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


def _json(value):
    try:
        return json.dumps(value, ensure_ascii=False, default=lambda item: repr(item))
    except (TypeError, ValueError):
        return '"(not representable as JSON)"'


class ToolSpan:
    """The `execute_tool {name}` span of one handler run (kind INTERNAL), a
    child of the call's context (a root if it carries none), current while
    the block runs, so that the handler's own spans are its children (a
    handler on a thread is given the context too). A no-op without the
    OpenTelemetry API. finish(body) records the RESULT body: a failed one
    (isError) sets status ERROR and error.type (the dsh error code:
    TOOL_FAILED for a tool's own failure); with content capture on, the
    arguments and (on success) the result, as JSON text.

        with ToolSpan(name, call_id, arguments, trace_context) as span:
            body = ...
            span.finish(body)
    """

    def __init__(self, name, call_id, arguments, trace_context):
        self._span = None
        self._token = None
        api = otel()
        if api is None:
            return
        trace, context, _ = api
        self._api = api
        parent = _parent(api, trace_context) if trace_context is not None else context.Context()
        #  The conventions want gen_ai.operation.name at creation, for samplers
        self._span = trace.get_tracer("dsh").start_span(
            "execute_tool %s" % name, context=parent, kind=trace.SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                        "gen_ai.tool.call.id": call_id})
        self._content = self._span.is_recording() and _capture_content()
        if self._content:
            self._span.set_attribute("gen_ai.tool.call.arguments", _json(arguments))
        self._context = trace.set_span_in_context(self._span, parent)

    def __enter__(self):
        if self._span is not None:
            self._token = self._api[1].attach(self._context)
        return self

    def finish(self, body):
        if self._span is None or not self._span.is_recording():
            return
        trace = self._api[0]
        if body.get("isError") is True:
            error = body.get("error")
            code = error.get("code") if isinstance(error, dict) and isinstance(error.get("code"), str) \
                else "TOOL_FAILED"
            texts = [block.get("text") for block in body.get("content") or []
                     if isinstance(block, dict) and isinstance(block.get("text"), str)]
            self._span.set_attribute("error.type", code)
            self._span.set_status(trace.Status(trace.StatusCode.ERROR, texts[0] if texts else code))
        elif self._content:
            result = body.get("structuredContent")
            self._span.set_attribute("gen_ai.tool.call.result",
                                     _json(result if result is not None else body.get("content")))

    def __exit__(self, kind, error, traceback):
        if self._span is None:
            return False
        if kind is not None and self._span.is_recording():
            #  Cancelled (or a failure of the SDK's own): nobody gets a result
            code = "CANCELLED" if kind.__name__ == "CancelledError" else "TOOL_FAILED"
            self._span.set_attribute("error.type", code)
            self._span.set_status(self._api[0].Status(self._api[0].StatusCode.ERROR, str(error) or code))
        self._api[1].detach(self._token)
        self._span.end()
        return False


__all__ = ["TraceContext", "ToolSpan", "meta_trace", "otel", "parse_traceparent", "with_trace"]
