//  W3C trace context on dsh calls (PROTOCOL.md, Trace context): what a
//  handler is told of the trace its call belongs to, what a client sends
//  and gets back, and, when the application has the OpenTelemetry API
//  (@opentelemetry/api, an optional peer dependency loaded on first use),
//  the `execute_tool {name}` span a handler runs in, as the OpenTelemetry
//  GenAI conventions define it (gen-ai-spans.md, "Execute tool span").
//  Without the API nothing is loaded and nothing is done. No OpenTelemetry
//  type appears in what this module exports, so an application without the
//  package builds against it unchanged.
import type * as OtelApi from '@opentelemetry/api';
import type { CallResult } from './wire.js';

//  A call's trace context: its traceparent as it came, tracestate if any,
//  and the traceparent's fields.
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
  traceId: string;            //  32 lower hex
  parentId: string;           //  16 lower hex: the span the receiver is a child of
  sampled: boolean;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})/;
const TRACESTATE_MAX = 512;

//  A traceparent read strictly as W3C Trace Context level 1 says: version
//  00 is exactly 55 characters; a later version is read by its first 55
//  (and may go on after a dash); ff, and all-zero ids, are invalid. A
//  tracestate that is not a string of at most 512 characters is dropped.
export function parseTraceparent(traceparent: unknown, tracestate?: unknown): TraceContext | undefined {
  if (typeof traceparent !== 'string')
    return undefined;
  const match = TRACEPARENT.exec(traceparent);
  if (!match)
    return undefined;
  const [, version, traceId, parentId, flags] = match;
  if (version === 'ff' || (version === '00' ? traceparent.length !== 55
    : traceparent.length > 55 && traceparent[55] !== '-'))
    return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(parentId))
    return undefined;
  const context: TraceContext = {
    traceparent: traceparent.slice(0, 55), traceId, parentId, sampled: (parseInt(flags, 16) & 1) === 1,
  };
  if (typeof tracestate === 'string' && tracestate.length > 0 && tracestate.length <= TRACESTATE_MAX)
    context.tracestate = tracestate;
  return context;
}

//  The context a call's meta carries (meta.traceparent, meta.tracestate),
//  or undefined.
export function metaTrace(meta: unknown): TraceContext | undefined {
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta))
    return undefined;
  const map = meta as Record<string, unknown>;
  return parseTraceparent(map.traceparent, map.tracestate);
}

//  The context a RESULT carries back (its top-level traceparent, and
//  tracestate if any: the broker's span for the call), or undefined.
export function resultTrace(result: CallResult): TraceContext | undefined {
  return parseTraceparent(result.traceparent, result.tracestate);
}

//  Opt-in capture of a tool's arguments and result on its span (the
//  conventions say never by default): DSH_TRACE_TOOL_CONTENT=1, or the
//  conventions' own OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
function captureContent(): boolean {
  return process.env.DSH_TRACE_TOOL_CONTENT === '1'
    || process.env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT?.toLowerCase() === 'true';
}

//  The API, once loaded: null when the application does not have it.
let api: typeof OtelApi | null | undefined;
let loading: Promise<typeof OtelApi | null> | undefined;

//  Loads @opentelemetry/api the first time it is asked for; resolves
//  whether the application has it. Cheap after the first call.
export function loadOtel(): Promise<boolean> {
  return loadApi().then((loaded) => loaded !== null);
}

function loadApi(): Promise<typeof OtelApi | null> {
  if (api !== undefined)
    return Promise.resolve(api);
  loading ??= import('@opentelemetry/api').then(
    (module) => {
      //  An ES module namespace, or a CommonJS build's exports as its default
      const loaded = ((module as { trace?: unknown }).trace ? module
        : (module as unknown as { default: typeof OtelApi }).default) as typeof OtelApi;
      api = loaded?.trace ? loaded : null;
      return api;
    },
    () => (api = null));
  return loading;
}

//  What the span of one tool call needs to know.
export interface ToolSpanCall {
  name: string;
  callId: string;
  arguments: unknown;
  trace?: TraceContext;
}

//  The parent a call's span has: the context the call carries, taken with
//  the application's propagator (W3C Trace Context, when it registered
//  one: baggage and all), else read as the W3C traceparent it is.
function parentContext(otel: typeof OtelApi, trace: TraceContext): OtelApi.Context {
  const carrier: Record<string, string> = { traceparent: trace.traceparent };
  if (trace.tracestate)
    carrier.tracestate = trace.tracestate;
  const extracted = otel.propagation.extract(otel.ROOT_CONTEXT, carrier);
  const spanContext = otel.trace.getSpanContext(extracted);
  if (spanContext && otel.trace.isSpanContextValid(spanContext))
    return extracted;
  return otel.trace.setSpanContext(otel.ROOT_CONTEXT, {
    traceId: trace.traceId,
    spanId: trace.parentId,
    traceFlags: trace.sampled ? otel.TraceFlags.SAMPLED : otel.TraceFlags.NONE,
    isRemote: true,
    traceState: trace.tracestate ? otel.createTraceState(trace.tracestate) : undefined,
  });
}

function json(value: unknown): string {
  try {
    return JSON.stringify(value, (_key, item) => (item instanceof Uint8Array
      ? Buffer.from(item).toString('base64') : typeof item === 'bigint' ? item.toString() : item)) ?? 'null';
  } catch {
    return '"(not representable as JSON)"';
  }
}

//  Runs the handler of call inside an `execute_tool {name}` span (kind
//  INTERNAL), a child of the call's context (a root if it carries none),
//  active while the handler runs so that the handler's own spans are its
//  children. Without the OpenTelemetry API it just runs the handler. The
//  span gets gen_ai.operation.name, gen_ai.tool.name, gen_ai.tool.call.id;
//  a failed result (isError) sets status ERROR and error.type (the dsh
//  error code: TOOL_FAILED for a tool's own failure); with content capture
//  on, gen_ai.tool.call.arguments and (on success) gen_ai.tool.call.result,
//  as JSON text.
export async function inToolSpan(call: ToolSpanCall, handler: () => Promise<CallResult>): Promise<CallResult> {
  const otel = api !== undefined ? api : await loadApi();
  if (!otel)
    return handler();
  const parent = call.trace ? parentContext(otel, call.trace) : otel.ROOT_CONTEXT;
  const tracer = otel.trace.getTracer('@dsh/tools');
  //  The conventions want gen_ai.operation.name at creation, for samplers
  const span = tracer.startSpan(`execute_tool ${call.name}`, {
    kind: otel.SpanKind.INTERNAL,
    attributes: {
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': call.name,
      'gen_ai.tool.call.id': call.callId,
    },
  }, parent);
  const content = span.isRecording() && captureContent();
  if (content)
    span.setAttribute('gen_ai.tool.call.arguments', json(call.arguments));
  try {
    const result = await otel.context.with(otel.trace.setSpan(parent, span), handler);
    if (result.isError) {
      const code = result.error?.code ?? 'TOOL_FAILED';
      const text = result.content.find((block) => block.type === 'text') as { text?: string } | undefined;
      span.setAttribute('error.type', code);
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: text?.text ?? code });
    } else if (content)
      span.setAttribute('gen_ai.tool.call.result', json(result.structuredContent ?? result.content));
    return result;
  } finally {
    span.end();
  }
}
