"""W3C trace context in the Python library (PROTOCOL.md, Trace context): a
client sends a traceparent and tracestate on a call, a handler is told the
context its call carries (Context.trace, .traceparent, .tracestate), on a
thread or as a coroutine, and the client reads the one its Result brings
back. With the OpenTelemetry API installed, the handler runs in an
execute_tool span, a child of that context."""

import pytest

import dsh
from dsh import trace as dsh_trace
from conftest import eventually

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = "00-%s-b7ad6b7169203331-01" % TRACE_ID
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


def test_parse_traceparent():
    context = dsh.parse_traceparent(TRACEPARENT, TRACESTATE)
    assert (context.trace_id, context.parent_id, context.sampled, context.tracestate) \
        == (TRACE_ID, "b7ad6b7169203331", True, TRACESTATE)
    assert dsh.parse_traceparent("00-%s-b7ad6b7169203331-00" % TRACE_ID).sampled is False
    #  A later version may go on after a dash; 00 may not
    assert dsh.parse_traceparent("01-%s-b7ad6b7169203331-01-extra" % TRACE_ID).traceparent \
        == "01-%s-b7ad6b7169203331-01" % TRACE_ID
    for bad in (None, 7, "", "00-%s-b7ad6b7169203331-01-extra" % TRACE_ID, "ff-%s-b7ad6b7169203331-01" % TRACE_ID,
                "00-%s-b7ad6b7169203331-01" % ("0" * 32), "00-%s-0000000000000000-01" % TRACE_ID,
                "00-%s-B7AD6B7169203331-01" % TRACE_ID):
        assert dsh.parse_traceparent(bad) is None, bad
    assert dsh.parse_traceparent(TRACEPARENT, "x" * 513).tracestate is None
    assert dsh_trace.with_trace({"a": 1, "tracestate": "old"}, TRACEPARENT) == {"a": 1, "traceparent": TRACEPARENT}


@pytest.fixture(scope="module")
def traced(broker):
    component = dsh.Component("py-traced", broker.endpoint)

    @component.tool
    def seen(ctx: dsh.Context) -> dict:
        """Say the trace context the call carries (a thread)."""
        return {"traceparent": ctx.traceparent, "tracestate": ctx.tracestate}

    @component.tool
    async def aseen(ctx: dsh.Context) -> dict:
        """Say the trace context the call carries (a coroutine)."""
        return {"traceparent": ctx.traceparent, "tracestate": ctx.tracestate}

    assert component.start(10)
    with dsh.Client(broker.endpoint) as client:
        eventually(lambda: {"seen", "aseen"} <= set(client.tools().names()))
        yield component, client
    component.stop()


@pytest.mark.parametrize("tool", ["seen", "aseen"])
def test_handler_sees_the_context(traced, tool):
    _, client = traced
    result = client.call(tool, traceparent=TRACEPARENT, tracestate=TRACESTATE)
    assert not result.is_error, result
    seen = dsh.parse_traceparent(result.structured["traceparent"])
    #  The broker hands on the caller's trace: the parent is the caller's
    #  span, or the broker's span for the dispatch when it traces
    assert seen is not None and seen.trace_id == TRACE_ID
    assert result.structured["tracestate"] == TRACESTATE
    #  The context that comes back, when the broker traces, is in the trace
    assert result.trace is None or result.trace.trace_id == TRACE_ID
    #  No context sent: whatever the broker starts, or none
    plain = client.call(tool)
    assert plain.structured["traceparent"] is None or dsh.parse_traceparent(plain.structured["traceparent"])


def test_result_trace():
    back = "00-%s-1111111111111111-01" % TRACE_ID
    result = dsh.Result({"callId": "c", "content": [], "isError": False, "traceparent": back})
    assert result.traceparent == back and result.trace.parent_id == "1111111111111111"
    assert dsh.Result({"callId": "c", "content": [], "isError": False, "traceparent": "junk"}).trace is None


def _have_otel_sdk():
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.skipif(not _have_otel_sdk(), reason="the OpenTelemetry API and SDK (opentelemetry-api, "
                    "opentelemetry-sdk) are not installed: PyPI cannot be reached here and Debian packages "
                    "no python3-opentelemetry, so the execute_tool span path is written to the API but not "
                    "run here")
def test_execute_tool_span(broker):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    component = dsh.Component("py-spans", broker.endpoint)

    @component.tool
    def spanned(ctx: dsh.Context) -> str:
        """Run in a span."""
        return trace.get_current_span().get_span_context().span_id and "ok"

    @component.tool
    def spanned_fails() -> str:
        """Fail."""
        raise dsh.ToolError("no", code="DENIED")

    assert component.start(10)
    try:
        with dsh.Client(broker.endpoint) as client:
            eventually(lambda: {"spanned", "spanned_fails"} <= set(client.tools().names()))
            assert client.call("spanned", traceparent=TRACEPARENT).text == "ok"
            client.call("spanned_fails", traceparent=TRACEPARENT)
        spans = {span.name: span for span in eventually(lambda: len(exporter.get_finished_spans()) >= 2
                                                         and exporter.get_finished_spans())}
        ok = spans["execute_tool spanned"]
        assert ok.kind == trace.SpanKind.INTERNAL
        assert format(ok.context.trace_id, "032x") == TRACE_ID
        assert ok.parent is not None and ok.parent.is_remote
        assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
        assert ok.attributes["gen_ai.tool.name"] == "spanned"
        assert ok.attributes["gen_ai.tool.call.id"]
        failed = spans["execute_tool spanned_fails"]
        assert failed.attributes["error.type"] == "DENIED"
        assert failed.status.status_code == trace.StatusCode.ERROR
    finally:
        component.stop()
