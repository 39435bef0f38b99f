//  One trace from an MCP client to an MCP server through dsh: the SDK
//  client sends params._meta.traceparent to dsh-mcp, which makes a CALL
//  through a real broker to dsh-mcp-bridge, in front of an SDK server
//  (fixtures/trace-server.mjs) that answers the _meta it got. Every
//  process exports to the OTLP receiver (tests/otel/receiver.mjs, which
//  decodes with the official .proto files): the spans are asserted one
//  trace, with the right parents and the MCP conventions' names and
//  attributes, for tools/call and a prompts/get through the gateway, on
//  stdio and Streamable HTTP at either end. Without _meta the trace starts
//  at dsh-mcp's span; an unsampled context stays unsampled; without
//  tracing nothing changes for the client or the server. Last, the same
//  through the main job's chain (deploy/dsh-broker.cfg) with a human's
//  approval given by `dsh approve`, its wait a span of the trace.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { bin, start, stop, dsh, dshTools, freshStateDir, waitFor } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.resolve(process.env.DSH_SOURCE_DIR || path.join(here, '../..'));
const fixture = path.join(here, 'fixtures/trace-server.mjs');
const receiverScript = path.join(source, 'tests/otel/receiver.mjs');

const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;
const TRACESTATE = 'rojo=00f067aa0ba902b7,congo=t61rcWkgMzE';
const BAGGAGE = 'userId=alice,isProduction=false';

let receiver, otel;
const spans = [];
const stacks = [];

//  The receiver prints `listening PORT`, then one JSON line per span:
//  ids in hex (parentSpanId "" for a root), attributes and resource as
//  plain objects.
async function startReceiver() {
  const { child, match } = await start(process.execPath, [receiverScript], /listening (\d+)/);
  let partial = '';
  child.stdout.on('data', (data) => {
    const lines = (partial + data).split('\n');
    partial = lines.pop();
    for (const line of lines)
      if (line.startsWith('{')) {
        const span = JSON.parse(line);
        spans.push({ ...span, service: span.resource['service.name'] });
      }
  });
  return { child, port: Number(match[1]) };
}

//  Waits for the spans of trace that match every check (a function of
//  a span), one span per check.
async function spansOf(traceId, checks, what) {
  return waitFor(() => {
    const mine = spans.filter((span) => span.traceId === traceId);
    const found = checks.map((check) => mine.find(check));
    return found.every(Boolean) && found;
  }, { what, timeoutMs: 15000 }).catch((error) => {
    const mine = spans.filter((span) => span.traceId === traceId)
      .map((span) => `${span.service} ${span.name} ${span.spanId}<-${span.parentSpanId}`);
    throw new Error(`${error.message}; the trace's spans:\n${mine.join('\n')}`);
  });
}

//  A broker, bridge and dsh-mcp (stdio, SDK client), with env for each.
async function startStack({ env = {}, config } = {}) {
  const stack = {};
  const args = ['-e', 'tcp://127.0.0.1:*', ...freshStateDir(), ...(config ? ['-c', config] : [])];
  const started = await start(bin.broker, args, /listening on (tcp:\/\/\S+)/, { env });
  stack.broker = started.child;
  stack.endpoint = started.match[1];
  ({ child: stack.bridge } = await start(bin.bridge, ['--broker', stack.endpoint, '--name', 'trace', '--id',
    'mcp-trace', '--', process.execPath, fixture], /serving \d+ tools/, { env }));
  await waitFor(async () => (await dshTools(stack.endpoint)).some((tool) => tool.name === 'meta_write'),
    { what: 'the bridged tools' });
  const transport = new StdioClientTransport({ command: bin.facade,
    args: ['--broker', stack.endpoint, '--agent', 'desktop'], env: { ...process.env, ...env }, stderr: 'pipe' });
  stack.client = new Client({ name: 'dsh-trace-tests', version: '0.1.0' });
  await stack.client.connect(transport);
  stacks.push(stack);
  return stack;
}

async function stopStack(stack) {
  await stack?.client?.close();
  await stop(stack?.bridge);
  await stop(stack?.broker);
}

let traced;

before(async () => {
  //  The receiver's packages (the official OTLP definitions), installed
  //  as run.sh installs ours
  const otelDir = path.dirname(receiverScript);
  if (!existsSync(path.join(otelDir, 'node_modules/@opentelemetry/otlp-transformer/package.json')))
    execFileSync('npm', ['ci', '--prefix', otelDir, '--no-audit', '--no-fund'], { stdio: 'inherit' });
  receiver = await startReceiver();
  otel = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.port}`, OTEL_BSP_SCHEDULE_DELAY: '50',
    OTEL_TRACES_SAMPLER: 'parentbased_always_on' };
  traced = await startStack({ env: otel });
});

after(async () => {
  for (const stack of stacks) await stopStack(stack);
  await stop(receiver?.child);
});

const traceparentOf = (text) => {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(text ?? '');
  assert.ok(match, `a traceparent: ${text}`);
  return { traceId: match[1], parentId: match[2], flags: match[3] };
};

//  The broker's call span ("dsh.call TOOL") is the child of dsh-mcp's
//  span; the bridge's span lies inside the broker's dispatch span
//  ("dsh.dispatch TOOL"): its child, or its grandchild under the bridge's
//  own execute_tool span (the SDK provider's), which must then be the
//  dispatch's child. Returns the call span.
async function assertBrokerBetween(traceId, facade, bridge, tool) {
  const [call, dispatch] = await spansOf(traceId, [
    (span) => span.service === 'dsh-broker' && span.name === `dsh.call ${tool}`,
    (span) => span.service === 'dsh-broker' && span.name === `dsh.dispatch ${tool}`,
  ], 'the broker\'s call and dispatch spans');
  assert.equal(call.parentSpanId, facade.spanId, 'the broker\'s call span is dsh-mcp\'s child');
  await waitInside(dispatch, call, 'the dispatch inside the call span');
  if (bridge.parentSpanId !== dispatch.spanId) {
    const [between] = await spansOf(traceId, [(span) => span.spanId === bridge.parentSpanId],
      'the bridge span\'s parent');
    assert.equal(between.service, 'dsh-mcp-bridge');
    assert.equal(between.name, `execute_tool ${tool}`);
    assert.equal(between.parentSpanId, dispatch.spanId, 'the bridge\'s spans hang from the dispatch');
  }
  return call;
}

//  Waits until span's parents, followed up, reach ancestor.
function waitInside(span, ancestor, what) {
  return waitFor(() => {
    const byId = new Map(spans.filter((one) => one.traceId === span.traceId).map((one) => [one.spanId, one]));
    let up = byId.get(span.parentSpanId);
    while (up && up.spanId !== ancestor.spanId) up = byId.get(up.parentSpanId);
    return Boolean(up);
  }, { what, timeoutMs: 10000 });
}

const isMcp = (service, kind, name) => (span) => span.service === service && span.kind === kind && span.name === name;
const SERVER = 2;
const CLIENT = 3;

test('the client\'s traceparent reaches the MCP server, one trace through every hop', async () => {
  const result = await traced.client.callTool({ name: 'meta', arguments: { message: 'hi' },
    _meta: { traceparent: TRACEPARENT, tracestate: TRACESTATE, baggage: BAGGAGE, 'example.com/other': 'x' } });
  assert.equal(result.isError ?? false, false, JSON.stringify(result));
  //  dsh's own keys never reach the client
  assert.equal(result.traceparent, undefined);
  const meta = result.structuredContent.meta;
  const got = traceparentOf(meta.traceparent);
  assert.equal(got.traceId, CLIENT_TRACE);
  assert.equal(got.flags, '01');
  assert.equal(meta.tracestate, TRACESTATE);
  assert.equal(meta.baggage, BAGGAGE);
  //  A key that is not trace context stays where it went before: nowhere
  assert.equal(meta['example.com/other'], undefined);

  const [facade, bridge] = await spansOf(CLIENT_TRACE, [
    isMcp('dsh-mcp', SERVER, 'tools/call meta'),
    isMcp('dsh-mcp-bridge', CLIENT, 'tools/call meta'),
  ], 'the MCP spans of dsh-mcp and the bridge');
  //  dsh-mcp's span is the client's child, the bridge's is the server's parent
  assert.equal(facade.parentSpanId, CLIENT_SPAN);
  assert.equal(bridge.spanId, got.parentId);
  for (const span of [facade, bridge]) {
    assert.equal(span.attributes['mcp.method.name'], 'tools/call');
    assert.equal(span.attributes['gen_ai.tool.name'], 'meta');
    assert.equal(span.attributes['gen_ai.operation.name'], 'execute_tool');
    assert.equal(span.attributes['network.transport'], 'pipe');
    assert.ok(span.attributes['jsonrpc.request.id'] !== undefined);
    assert.ok(span.attributes['mcp.protocol.version']);
    assert.equal(span.attributes['error.type'], undefined);
  }
  assert.equal(facade.attributes['mcp.session.id'], undefined, 'stdio has no MCP session id');

  //  The broker's spans lie between: its call span is dsh-mcp's child,
  //  and the bridge's parent is its dispatch span
  await assertBrokerBetween(CLIENT_TRACE, facade, bridge, 'meta');
});

test('without _meta the trace starts at dsh-mcp\'s span, and the server still gets a context', async () => {
  const result = await traced.client.callTool({ name: 'meta', arguments: { message: 'plain' } });
  assert.equal(result.traceparent, undefined);
  const meta = result.structuredContent.meta;
  const got = traceparentOf(meta.traceparent);
  assert.notEqual(got.traceId, CLIENT_TRACE);
  assert.equal(meta.tracestate, undefined);
  assert.equal(meta.baggage, undefined);
  const [facade, bridge] = await spansOf(got.traceId, [
    isMcp('dsh-mcp', SERVER, 'tools/call meta'),
    isMcp('dsh-mcp-bridge', CLIENT, 'tools/call meta'),
  ], 'the spans of a call sent without _meta');
  assert.equal(facade.parentSpanId, '', 'dsh-mcp\'s span is the root');
  assert.equal(bridge.spanId, got.parentId);
});

test('a failed tool call is an error span: error.type the dsh code where dsh gave one, else as the MCP conventions say', async () => {
  const result = await traced.client.callTool({ name: 'meta_fail', arguments: { message: 'no' },
    _meta: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` } });
  assert.equal(result.isError, true);
  const [facade, bridge] = await spansOf('a'.repeat(32), [
    isMcp('dsh-mcp', SERVER, 'tools/call meta_fail'),
    isMcp('dsh-mcp-bridge', CLIENT, 'tools/call meta_fail'),
  ], 'the spans of a failed call');
  for (const span of [facade, bridge])
    assert.equal(span.status.code, 2, 'status ERROR');
  //  dsh-mcp has the broker's code; the bridge only the server's isError
  assert.equal(facade.attributes['error.type'], 'TOOL_FAILED');
  assert.equal(facade.attributes['dsh.error.code'], 'TOOL_FAILED');
  assert.equal(bridge.attributes['error.type'], 'tool_error');
  //  An unknown tool: the dsh code, and the JSON-RPC error's code beside it
  await assert.rejects(traced.client.callTool({ name: 'no_such_tool', arguments: {},
    _meta: { traceparent: `00-${'c'.repeat(32)}-${'d'.repeat(16)}-01` } }));
  const [unknown] = await spansOf('c'.repeat(32), [isMcp('dsh-mcp', SERVER, 'tools/call no_such_tool')],
    'the span of an unknown tool');
  assert.equal(unknown.attributes['error.type'], 'UNKNOWN_TOOL');
  assert.equal(unknown.attributes['rpc.response.status_code'], '-32602');
  assert.equal(unknown.attributes['dsh.error.code'], 'UNKNOWN_TOOL');
});

test('a prompt through the gateway is traced the same way, named for the prompt', async () => {
  const trace = '3'.repeat(32);
  const prompt = await traced.client.getPrompt({ name: 'meta_prompt', arguments: {},
    _meta: { traceparent: `00-${trace}-${'2'.repeat(16)}-01` } });
  const meta = JSON.parse(prompt.messages[0].content.text);
  const got = traceparentOf(meta.traceparent);
  assert.equal(got.traceId, trace);
  const [facade, bridge] = await spansOf(trace, [
    isMcp('dsh-mcp', SERVER, 'prompts/get meta_prompt'),
    isMcp('dsh-mcp-bridge', CLIENT, 'prompts/get meta_prompt'),
  ], 'the spans of prompts/get');
  assert.equal(facade.parentSpanId, '2'.repeat(16));
  assert.equal(bridge.spanId, got.parentId);
  for (const span of [facade, bridge]) {
    assert.equal(span.attributes['mcp.method.name'], 'prompts/get');
    assert.equal(span.attributes['gen_ai.prompt.name'], 'meta_prompt');
    assert.equal(span.attributes['gen_ai.operation.name'], undefined, 'execute_tool is for tool calls only');
  }
});

test('an unsampled context goes on unsampled, and no span is made', async () => {
  const trace = 'e'.repeat(32);
  const result = await traced.client.callTool({ name: 'meta', arguments: { message: 'quiet' },
    _meta: { traceparent: `00-${trace}-${'f'.repeat(16)}-00` } });
  const got = traceparentOf(result.structuredContent.meta.traceparent);
  assert.equal(got.traceId, trace);
  assert.equal(got.flags, '00');
  //  Spans of other calls come meanwhile; none of this trace's
  await traced.client.callTool({ name: 'meta', arguments: { message: 'flush' },
    _meta: { traceparent: `00-${'9'.repeat(32)}-${'8'.repeat(16)}-01` } });
  await spansOf('9'.repeat(32), [isMcp('dsh-mcp-bridge', CLIENT, 'tools/call meta')], 'a later call\'s span');
  assert.equal(spans.filter((span) => span.traceId === trace).length, 0);
});

test('over Streamable HTTP the span carries the MCP session id', async () => {
  const { child, match } = await start(bin.facade, ['--broker', traced.endpoint, '--http', '127.0.0.1:0'],
    /serving MCP over HTTP at (http:\/\/\S+\/mcp)/, { env: otel });
  const transport = new StreamableHTTPClientTransport(new URL(match[1]));
  const client = new Client({ name: 'dsh-trace-tests', version: '0.1.0' });
  try {
    await client.connect(transport);
    const trace = '7'.repeat(32);
    await client.callTool({ name: 'meta', arguments: { message: 'http' },
      _meta: { traceparent: `00-${trace}-${'6'.repeat(16)}-01` } });
    const [facade] = await spansOf(trace, [isMcp('dsh-mcp', SERVER, 'tools/call meta')], 'the HTTP span');
    assert.equal(facade.attributes['mcp.session.id'], transport.sessionId);
    assert.equal(facade.attributes['network.transport'], 'tcp');
    assert.equal(facade.attributes['network.protocol.name'], 'http');
  } finally {
    await client.close();
    await stop(child);
  }
});

test('a bridge in front of a Streamable HTTP server: the context in _meta, the session id on the span', async () => {
  const { child: server, match } = await start(process.execPath, [fixture, '--http'], /listening (\d+)/);
  const { child: bridge } = await start(bin.bridge, ['--broker', traced.endpoint, '--name', 'remote', '--id',
    'mcp-remote', '--prefix', 'remote__', '--url', `http://127.0.0.1:${match[1]}/mcp`], /serving \d+ tools/,
  { env: otel });
  try {
    await waitFor(async () => (await dshTools(traced.endpoint)).some((tool) => tool.name === 'remote__meta'),
      { what: 'the remote server\'s tools' });
    const trace = '5'.repeat(32);
    const result = await traced.client.callTool({ name: 'remote__meta', arguments: { message: 'remote' },
      _meta: { traceparent: `00-${trace}-${'4'.repeat(16)}-01` } });
    const got = traceparentOf(result.structuredContent.meta.traceparent);
    assert.equal(got.traceId, trace);
    const [span] = await spansOf(trace, [(one) => one.service === 'dsh-mcp-bridge' && one.kind === CLIENT
      && one.spanId === got.parentId], 'the HTTP bridge\'s span');
    //  The server's names in the span, the prefixed one beside them
    assert.equal(span.name, 'tools/call meta');
    assert.equal(span.attributes['gen_ai.tool.name'], 'meta');
    assert.equal(span.attributes['dsh.tool.name'], 'remote__meta');
    assert.equal(span.attributes['network.transport'], 'tcp');
    assert.equal(span.attributes['network.protocol.name'], 'http');
    assert.ok(result.structuredContent.sessionId);
    assert.equal(span.attributes['mcp.session.id'], result.structuredContent.sessionId);
  } finally {
    await stop(bridge);
    await stop(server);
  }
});

test('with tracing off, the client and the server see what they saw before', async () => {
  const plain = await startStack();
  try {
    const result = await plain.client.callTool({ name: 'meta', arguments: { message: 'off' } });
    assert.deepEqual(Object.keys(result).sort(), ['content', 'isError', 'structuredContent']);
    //  The bridge's own progress token, as ever, and nothing else
    assert.deepEqual(Object.keys(result.structuredContent.meta), ['progressToken']);
    //  A client's context passes on untouched, though nobody traces
    const passed = await plain.client.callTool({ name: 'meta', arguments: { message: 'off' },
      _meta: { traceparent: TRACEPARENT, tracestate: TRACESTATE } });
    assert.equal(passed.structuredContent.meta.traceparent, TRACEPARENT);
    assert.equal(passed.structuredContent.meta.tracestate, TRACESTATE);
  } finally {
    await stopStack(plain);
    stacks.splice(stacks.indexOf(plain), 1);
  }
});

//  `dsh approver` keeps the permission stage asking (with no approver
//  heard it denies at once); the decision is `dsh approve ID`.
function startApprover(endpoint) {
  const child = spawn(bin.cli, ['--broker', endpoint, 'approver'], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.lines = [];
  let partial = '';
  child.stdout.on('data', (data) => {
    const lines = (partial + data).split('\n');
    partial = lines.pop();
    for (const line of lines) if (line.trim().startsWith('{')) child.lines.push(JSON.parse(line));
  });
  return child;
}

test('through the main job\'s chain, approved by a human: one trace with the approval wait', async () => {
  const chained = await startStack({ env: otel, config: path.join(source, 'deploy/dsh-broker.cfg') });
  const approver = startApprover(chained.endpoint);
  try {
    const giveUp = Date.now() + 20000;
    let pending, waiting, trace;
    for (let attempt = 1; !pending && Date.now() < giveUp; attempt++) {
      trace = attempt.toString(16).padStart(32, '1');
      const seen = approver.lines.length;
      let answered = null;
      waiting = chained.client.callTool({ name: 'meta_write', arguments: { message: 'approve me' },
        _meta: { traceparent: `00-${trace}-${CLIENT_SPAN}-01` } }, undefined, { timeout: 60000 });
      waiting.then((result) => { answered = result; }, () => { answered = {}; });
      while (!answered && !pending && Date.now() < giveUp) {
        pending = approver.lines.slice(seen).find((line) => line.event === 'pending' && line.tool === 'meta_write');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      //  Denied at once: the stage had not heard the approver yet
      if (!pending) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.ok(pending, 'the call waited for a human');
    const approved = await dsh(chained.endpoint, 'approve', String(pending.id));
    assert.equal(approved.code, 0, approved.stderr);
    const result = await waiting;
    assert.equal(result.isError ?? false, false, JSON.stringify(result));
    const got = traceparentOf(result.structuredContent.meta.traceparent);
    assert.equal(got.traceId, trace);
    const [facade, bridge] = await spansOf(trace, [
      isMcp('dsh-mcp', SERVER, 'tools/call meta_write'),
      isMcp('dsh-mcp-bridge', CLIENT, 'tools/call meta_write'),
    ], 'the MCP spans through the chain');
    assert.equal(facade.parentSpanId, CLIENT_SPAN);
    assert.equal(bridge.spanId, got.parentId);
    const call = await assertBrokerBetween(trace, facade, bridge, 'meta_write');
    //  The human's wait, with who decided what, inside the call
    const [wait] = await spansOf(trace, [(span) => span.service === 'dsh-broker'
      && span.name === 'dsh.approval meta_write'], 'the approval-wait span');
    assert.ok(wait.attributes['dsh.approval.decision'], JSON.stringify(wait.attributes));
    assert.ok(wait.attributes['dsh.approval.request'] !== undefined);
    await waitInside(wait, call, 'the approval wait inside the call span');
  } finally {
    approver.kill('SIGTERM');
    await stopStack(chained);
    stacks.splice(stacks.indexOf(chained), 1);
  }
});
