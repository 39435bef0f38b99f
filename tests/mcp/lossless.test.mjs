//  Nothing lost either way: a raw MCP server (fixtures/quirky-server.mjs)
//  behind dsh-mcp-bridge, seen through the dsh CLI and through dsh-mcp by a
//  client that reads raw lines, so no SDK schema hides a missing field.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { bin, start, startBroker, stop, dshTools, dshCall, rawFacade, waitFor } from './helpers.mjs';
import { tools as quirkyTools, answer } from './fixtures/quirky-server.mjs';

const quirky = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/quirky-server.mjs');
let broker, bridge, demo, facade, readyLine;

before(async () => {
  broker = await startBroker();
  ({ child: bridge, match: readyLine } = await start(bin.bridge, ['--broker', broker.endpoint, '--name', 'quirky',
    '--', process.execPath, quirky], /serving (\d+) tools/));
  ({ child: demo } = await start(bin.demo, ['--broker', broker.endpoint], /serving/));
  facade = rawFacade(['--broker', broker.endpoint]);
  await facade.initialize();
  await waitFor(async () => (await facade.request('tools/list')).result.tools.some((tool) => tool.name === 'rich'),
    { what: 'the quirky tools in dsh-mcp' });
});

after(async () => {
  await facade?.close();
  await stop(demo);
  await stop(bridge);
  await stop(broker?.child);
});

const call = async (name, args = {}) => facade.request('tools/call', { name, arguments: args });

test('the ready line counts only the tools the broker took', async () => {
  const listed = (await dshTools(broker.endpoint)).map((tool) => tool.name);
  assert.ok(!listed.includes('huge-entry'), 'the oversized entry is refused');
  assert.equal(Number(readyLine[1]), quirkyTools.length - 1);
});

test('the bridged tools are in the broker in the server\'s order, not the bridge\'s hash order', async () => {
  const served = new Set(quirkyTools.map((tool) => tool.name));
  const listed = (await dshTools(broker.endpoint)).map((tool) => tool.name).filter((name) => served.has(name));
  assert.deepEqual(listed, quirkyTools.map((tool) => tool.name).filter((name) => name !== 'huge-entry'));
});

test('tool entries keep every field, in the registry and through dsh-mcp', async () => {
  const want = quirkyTools.find((tool) => tool.name === 'rich');
  const entry = (await dshTools(broker.endpoint)).find((tool) => tool.name === 'rich');
  for (const key of ['icons', 'execution', '_meta', 'title'])
    assert.deepEqual(entry[key], want[key], key);
  assert.deepEqual(entry.annotations, want.annotations);
  const { tools } = (await facade.request('tools/list')).result;
  const tool = tools.find((item) => item.name === 'rich');
  assert.deepEqual({ ...tool }, { ...want, inputSchema: want.inputSchema });
  assert.equal(tool.concurrencySafe, undefined, 'dsh-only keys stay in dsh');
});

test('a result passes whole: block annotations and _meta, resource_link title and size, result _meta', async () => {
  const { result } = await call('rich', { n: 1 });
  assert.deepEqual(result, { ...answer('rich').result, isError: false });
});

test('an isError result keeps its blocks and structuredContent, with no prefix', async () => {
  const { result } = await call('fail-rich');
  assert.deepEqual(result, answer('fail-rich').result);
  const direct = await dshCall(broker.endpoint, 'fail-rich');
  assert.equal(direct.isError, true);
  assert.equal(direct.content[0].text, 'first problem');
  assert.equal(direct.error.code, 'TOOL_FAILED');
});

test('JSON-RPC errors pass exactly: code, message and data', async () => {
  assert.deepEqual((await call('fail-params')).error, answer('fail-params').error);
  assert.deepEqual((await call('fail-internal')).error, answer('fail-internal').error);
  const viaCli = await dshCall(broker.endpoint, 'fail-params');
  assert.equal(viaCli.error.code, 'INVALID_ARGS');
  assert.equal(viaCli.content[0].text, 'Error: parameter x out of range');
  assert.deepEqual(viaCli.error.mcp, answer('fail-params').error);
});

test('UNKNOWN_TOOL only for a tool nobody has; the server\'s own words otherwise', async () => {
  assert.deepEqual((await call('claims-unknown')).error, answer('claims-unknown').error);
  const missing = await call('no-such-tool');
  assert.equal(missing.error.code, -32602);
  assert.equal(missing.error.message, 'Unknown tool: no-such-tool');
  assert.equal((await dshCall(broker.endpoint, 'no-such-tool')).error.code, 'UNKNOWN_TOOL');
});

test('NUL in JSON strings and numbers past int64 or double are read, both ways', async () => {
  //  Through the bridge: the server's answer holds a NUL
  const { result } = await call('nul', { text: 'x' });
  assert.equal(result.content[0].text, answer('nul', { text: 'x' }).result.content[0].text);
  //  Into dsh-mcp: a request line with a NUL and huge numbers
  const id = 9001;
  const answered = facade.answer(id);
  facade.send(`{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"nul","arguments":`
    + '{"text":"p\\u0000q","n":123456789012345678901234567890,"m":1.5e400}}}');
  const reply = await answered;
  assert.equal(reply.result.isError, false);
  const text = reply.result.content[0].text;
  assert.ok(text.includes('p\\u0000q'), text);
  assert.ok(text.includes('"n":1.2345678901234568e+29'), text);
  assert.ok(text.includes('"m":1.7976931348623157e+308'), text);
});

test('a line the parser chokes on is answered, with its id when it can be read', async () => {
  const answered = facade.answer(77);
  facade.send('{"jsonrpc":"2.0","id":77,"method":"tools/list",');
  const reply = await answered;
  assert.equal(reply.error.code, -32700);
  const before = facade.lines.length;
  facade.send('not json at all');
  await waitFor(() => facade.lines.length > before, { what: 'the parse error' });
  assert.deepEqual(JSON.parse(facade.lines.at(-1)).error.code, -32700);
  assert.equal(JSON.parse(facade.lines.at(-1)).id, null);
});

test('an answer the bridge cannot read fails its call at once, not at the deadline', async () => {
  const started = Date.now();
  const { result } = await call('garbled');
  assert.equal(result.isError, true);
  assert.match(result.content[0].text, /not JSON-RPC/);
  assert.ok(Date.now() - started < 5000);
});

test('batches under 2025-03-26; refused under 2025-06-18', async () => {
  const old = rawFacade(['--broker', broker.endpoint]);
  try {
    await old.initialize('2025-03-26');
    const before = old.notifications.length;
    old.send(JSON.stringify([
      { jsonrpc: '2.0', id: 'a', method: 'ping' },
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'zz' } },
      { jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'echo', arguments: { message: 'in a batch' } } },
    ]));
    const batch = await waitFor(() => old.notifications.slice(before).find(Array.isArray), { what: 'the batch answer' });
    assert.deepEqual(batch.map((item) => item.id).sort(), ['a', 'b']);
    assert.equal(batch.find((item) => item.id === 'b').result.content[0].text, 'in a batch');
  } finally {
    await old.close();
  }
  const before = facade.lines.length;
  facade.send(JSON.stringify([{ jsonrpc: '2.0', id: 'c', method: 'ping' }]));
  await waitFor(() => facade.lines.length > before, { what: 'the refusal' });
  assert.equal(JSON.parse(facade.lines.at(-1)).error.code, -32600);
});

test('a 2024-11-05 session gets no audio or resource_link blocks', async () => {
  const old = rawFacade(['--broker', broker.endpoint]);
  try {
    await old.initialize('2024-11-05');
    await waitFor(async () => (await old.request('tools/list')).result.tools.length > 0, { what: 'tools' });
    const { result } = await old.request('tools/call', { name: 'sample_content', arguments: {} });
    const types = result.content.map((block) => block.type);
    assert.ok(!types.includes('audio') && !types.includes('resource_link'), types.join());
    assert.equal(result.content.length, 6);
    const current = (await call('sample_content')).result.content.map((block) => block.type);
    assert.ok(current.includes('audio') && current.includes('resource_link'));
  } finally {
    await old.close();
  }
});
