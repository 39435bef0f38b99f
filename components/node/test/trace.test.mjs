//  W3C trace context in the Node library (PROTOCOL.md, Trace context), on a
//  real broker: a client sends a traceparent and tracestate, a handler is
//  told the context its call carries (exec.trace), and with the
//  OpenTelemetry API and SDK in the process (devDependencies here; an
//  optional peer dependency of the package) the handler runs in an
//  `execute_tool {name}` span, kind INTERNAL, a child of the context the
//  broker gave the call, with the GenAI conventions' attributes, error.type
//  on failure, and arguments and result only when asked for. Then the same
//  from a Node component in its own process (fixtures/traced-component.mjs)
//  exporting over OTLP/HTTP to the receiver of tests/otel, which decodes it
//  with the official OTLP definitions; and a component in a process where
//  no @opentelemetry package can be found, which needs none.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { context, propagation, trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Client, ToolRegistry, parseTraceparent, resultTrace } from '../dist/index.js';
import { fixtures, start, startBroker, stop, until } from './helpers.mjs';

const TRACE_ID = '0af7651916cd43dd8448eb211c80319c';
const TRACEPARENT = `00-${TRACE_ID}-b7ad6b7169203331-01`;
const TRACESTATE = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
const here = path.dirname(fileURLToPath(import.meta.url));
const receiver = path.resolve(here, '../../../tests/otel/receiver.mjs');

let broker;
let registry;
let client;
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const seen = new Map();         //  callId -> the exec.trace its handler was given

before(async () => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  broker = await startBroker();
  registry = await ToolRegistry.connect({ broker: broker.endpoint, component: 'node-traced-test' });
  const tracer = trace.getTracer('trace.test');
  const echo = registry.register({
    name: 'node_traced',
    description: 'Echo text in a traced handler',
    parameters: { type: 'object', properties: { text: { type: 'string' } } },
  }, async (args, exec) => {
    seen.set(exec.callId, exec.trace);
    //  The handler's own span is a child of the SDK's execute_tool span
    tracer.startSpan('node_traced inner').end();
    return [{ type: 'text', text: String(args.text) }];
  });
  const fails = registry.register({
    name: 'node_traced_fails',
    description: 'Fail with DENIED',
    parameters: { type: 'object', properties: {} },
  }, async () => {
    throw Object.assign(new Error('not allowed'), { code: 'DENIED' });
  });
  await Promise.all([echo.ready, fails.ready]);
  client = new Client(broker.endpoint);
});

after(async () => {
  client?.close();
  await registry?.close();
  await stop(broker);
  await provider.shutdown();
});

//  Runs spawn (which copies the environment at once) with vars set.
function withEnv(vars, spawn) {
  const saved = Object.fromEntries(Object.keys(vars).map((key) => [key, process.env[key]]));
  Object.assign(process.env, vars);
  try {
    return spawn();
  } finally {
    for (const [key, value] of Object.entries(saved))
      if (value === undefined)
        delete process.env[key];
      else
        process.env[key] = value;
  }
}

function spanOf(callId) {
  return exporter.getFinishedSpans().find((span) => span.attributes['gen_ai.tool.call.id'] === callId);
}

function parentId(span) {
  return span.parentSpanContext?.spanId ?? span.parentSpanId;
}

test('parseTraceparent reads W3C traceparents strictly', () => {
  assert.deepEqual(parseTraceparent(TRACEPARENT, TRACESTATE), {
    traceparent: TRACEPARENT, tracestate: TRACESTATE, traceId: TRACE_ID, parentId: 'b7ad6b7169203331', sampled: true,
  });
  assert.equal(parseTraceparent(`01-${TRACE_ID}-b7ad6b7169203331-01-more`).traceparent,
    `01-${TRACE_ID}-b7ad6b7169203331-01`);
  for (const bad of [undefined, 7, '', `${TRACEPARENT}-more`, `ff-${TRACE_ID}-b7ad6b7169203331-01`,
    `00-${'0'.repeat(32)}-b7ad6b7169203331-01`, `00-${TRACE_ID}-0000000000000000-01`])
    assert.equal(parseTraceparent(bad), undefined, String(bad));
  assert.equal(parseTraceparent(TRACEPARENT, 'x'.repeat(513)).tracestate, undefined);
  assert.equal(resultTrace({ callId: 'c', content: [], isError: false, traceparent: TRACEPARENT }).traceId, TRACE_ID);
  assert.equal(resultTrace({ callId: 'c', content: [], isError: false }), undefined);
});

test('a handler runs in an execute_tool span, a child of the context the broker gave its call', async () => {
  const result = await client.call('node_traced', { text: 'hello' },
    { traceparent: TRACEPARENT, tracestate: TRACESTATE, callId: 'node-trace-1' });
  assert.equal(result.isError, false);
  const given = seen.get('node-trace-1');
  assert.ok(given, 'the handler was given a trace context');
  assert.equal(given.traceId, TRACE_ID);
  assert.equal(given.tracestate, TRACESTATE);
  //  What comes back, when the broker traces, is in the caller's trace
  const back = resultTrace(result);
  assert.ok(back === undefined || back.traceId === TRACE_ID);

  const span = await until(() => spanOf('node-trace-1'), 'the execute_tool span');
  assert.equal(span.name, 'execute_tool node_traced');
  assert.equal(span.kind, SpanKind.INTERNAL);
  assert.equal(span.spanContext().traceId, TRACE_ID);
  assert.equal(parentId(span), given.parentId);
  assert.equal(span.spanContext().traceState?.serialize(), TRACESTATE);
  assert.equal(span.attributes['gen_ai.operation.name'], 'execute_tool');
  assert.equal(span.attributes['gen_ai.tool.name'], 'node_traced');
  assert.equal(span.attributes['error.type'], undefined);
  //  Content is opt-in: off by default
  assert.equal(span.attributes['gen_ai.tool.call.arguments'], undefined);
  assert.equal(span.attributes['gen_ai.tool.call.result'], undefined);
  assert.notEqual(span.status.code, SpanStatusCode.ERROR);
  const inner = exporter.getFinishedSpans().find((item) => item.name === 'node_traced inner'
    && item.spanContext().traceId === TRACE_ID && parentId(item) === span.spanContext().spanId);
  assert.ok(inner, 'the handler\'s own span is a child of execute_tool');
});

test('a failure sets error.type to the dsh code; arguments and results are recorded when asked for', async () => {
  const failed = await client.call('node_traced_fails', {}, { traceparent: TRACEPARENT, callId: 'node-trace-2' });
  assert.equal(failed.error.code, 'DENIED');
  const span = await until(() => spanOf('node-trace-2'), 'the failed call\'s span');
  assert.equal(span.name, 'execute_tool node_traced_fails');
  assert.equal(span.attributes['error.type'], 'DENIED');
  assert.equal(span.status.code, SpanStatusCode.ERROR);
  assert.equal(span.status.message, 'Error: not allowed');

  process.env.DSH_TRACE_TOOL_CONTENT = '1';
  try {
    await client.call('node_traced', { text: 'shown' }, { traceparent: TRACEPARENT, callId: 'node-trace-3' });
    const shown = await until(() => spanOf('node-trace-3'), 'the span with content');
    assert.equal(shown.attributes['gen_ai.tool.call.arguments'], '{"text":"shown"}');
    assert.equal(shown.attributes['gen_ai.tool.call.result'], '[{"type":"text","text":"shown"}]');
  } finally {
    delete process.env.DSH_TRACE_TOOL_CONTENT;
  }

  //  No context: a root span of the component's own
  await client.call('node_traced', { text: 'root' }, { callId: 'node-trace-4' });
  const root = await until(() => spanOf('node-trace-4'), 'the span of a call without context');
  const given = seen.get('node-trace-4');
  assert.equal(parentId(root), given?.parentId);
});

test('a Node component in its own process exports its execute_tool span over OTLP/HTTP', async (t) => {
  //  The receiver's packages, installed as every user of it does first
  const installed = spawnSync('sh', [path.join(path.dirname(receiver), 'install.sh')], { encoding: 'utf8' });
  if (installed.status !== 0) {
    t.skip(`tests/otel/install.sh exited ${installed.status}: no OTLP receiver (${installed.stderr.trim()})`);
    return;
  }
  const collector = await start(process.execPath, [receiver], /listening (\d+)/);
  const lines = () => collector.log.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
  const component = await withEnv({
    DSH_BROKER: broker.endpoint, OTEL_SERVICE_NAME: 'node-traced',
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.match[1]}`, DSH_COMPONENT_ID: 'node-traced-fixture',
  }, () => start(process.execPath, [path.join(fixtures, 'traced-component.mjs')], /^ready /m));
  try {
    const result = await client.call('traced_echo', { text: 'across' }, { traceparent: TRACEPARENT });
    assert.equal(result.isError, false);
    const given = parseTraceparent(result.structuredContent.traceparent);
    assert.equal(given.traceId, TRACE_ID);
    const span = await until(() => lines().find((item) => item.name === 'execute_tool traced_echo'),
      'the exported execute_tool span');
    assert.equal(span.traceId, TRACE_ID);
    assert.equal(span.parentSpanId, given.parentId);
    assert.equal(span.kind, 1);
    assert.equal(span.spanId, result.structuredContent.spanId);
    assert.equal(span.attributes['gen_ai.operation.name'], 'execute_tool');
    assert.equal(span.attributes['gen_ai.tool.name'], 'traced_echo');
    assert.equal(span.attributes['gen_ai.tool.call.id'], result.callId);
    assert.equal(span.resource['service.name'], 'node-traced');
    const work = await until(() => lines().find((item) => item.name === 'traced_echo work'), 'the handler\'s span');
    assert.equal(work.parentSpanId, span.spanId);
  } finally {
    await stop(component);
    await stop(collector);
  }
});

test('without @opentelemetry/api a handler still gets its context, and nothing is required', async () => {
  const component = await start(process.execPath, ['--import', path.join(fixtures, 'without-otel.mjs'),
    path.join(fixtures, 'plain-component.mjs'), broker.endpoint], /^ready$/m);
  try {
    assert.match(component.log, /^otel absent$/m);
    const result = await client.call('plain_trace', {}, { traceparent: TRACEPARENT });
    assert.equal(result.isError, false);
    assert.equal(parseTraceparent(result.content[0].text)?.traceId, TRACE_ID);
  } finally {
    await stop(component);
  }
});
