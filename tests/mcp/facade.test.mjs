//  dsh-mcp seen by the official MCP SDK client and by the MCP inspector's CLI.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { bin, start, startBroker, stop, facadeClient, runInspector, waitFor } from './helpers.mjs';

let broker, demo, client;

before(async () => {
  broker = await startBroker();
  ({ child: demo } = await start(bin.demo, ['--broker', broker.endpoint], /serving/));
  client = await facadeClient(broker.endpoint, ['--agent', 'tester']);
  await waitFor(async () => (await client.listTools()).tools.some((tool) => tool.name === 'echo'),
    { what: 'the demo tools' });
});

after(async () => {
  await client?.close();
  await stop(demo);
  await stop(broker?.child);
});

test('tools/list shows the broker tools with schemas and annotations', async () => {
  const { tools } = await client.listTools();
  const sleep = tools.find((tool) => tool.name === 'sleep_ms');
  assert.equal(sleep.inputSchema.type, 'object');
  assert.ok(sleep.inputSchema.properties.ms);
  assert.equal(sleep.annotations.readOnlyHint, true);
});

test('tools/call returns the dsh result', async () => {
  const result = await client.callTool({ name: 'echo', arguments: { message: 'through dsh' } });
  assert.deepEqual(result.content, [{ type: 'text', text: 'through dsh' }]);
  assert.equal(result.isError, false);
  const sample = await client.callTool({ name: 'sample_content', arguments: {} });
  assert.deepEqual(sample.content.map((block) => block.type),
    ['text', 'image', 'audio', 'resource_link', 'resource', 'resource']);
  assert.deepEqual(sample.structuredContent, { ok: true, count: 6 });
  const failed = await client.callTool({ name: 'fail', arguments: { message: 'boom' } });
  assert.equal(failed.isError, true);
});

test('an unknown tool is JSON-RPC error -32602', async () => {
  await assert.rejects(client.callTool({ name: 'nope', arguments: {} }),
    (error) => error.code === -32602 && /Unknown tool: nope/.test(error.message));
});

test('calls run concurrently', async () => {
  const started = Date.now();
  await Promise.all([1, 2, 3, 4].map(() => client.callTool({ name: 'sleep_ms', arguments: { ms: 1500 } })));
  //  One after another would take 6 s; a wide margin for a loaded machine
  assert.ok(Date.now() - started < 4500, 'four 1500 ms sleeps overlapped');
});

test('a component joining sends list_changed and its tools are listed', async () => {
  let changed = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed++; });
  const { child: other } = await start(bin.demo, ['--broker', broker.endpoint, '--prefix', 'j_'], /serving/);
  try {
    await waitFor(() => changed > 0, { what: 'notifications/tools/list_changed' });
    const { tools } = await client.listTools();
    assert.ok(tools.some((tool) => tool.name === 'j_echo'));
  } finally {
    await stop(other);
  }
});

test('the MCP inspector CLI lists and calls through dsh-mcp', async () => {
  const env = { DSH_BROKER: broker.endpoint };
  const list = await runInspector([bin.facade, '--method', 'tools/list'], env);
  assert.equal(list.code, 0, list.stderr);
  assert.ok(JSON.parse(list.stdout).tools.some((tool) => tool.name === 'echo'));
  const call = await runInspector([bin.facade, '--method', 'tools/call', '--tool-name', 'echo',
    '--tool-arg', 'message=inspected'], env);
  assert.equal(call.code, 0, call.stderr);
  assert.deepEqual(JSON.parse(call.stdout).content, [{ type: 'text', text: 'inspected' }]);
});
