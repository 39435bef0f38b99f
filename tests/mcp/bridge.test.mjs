//  dsh-mcp-bridge in front of the reference MCP server (server-everything).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startBroker, startBridge, stop, dshTools, dshCall, directClient, facadeClient, waitFor, assertBridged } from './helpers.mjs';

let broker, bridge, direct;

before(async () => {
  broker = await startBroker();
  bridge = await startBridge(broker.endpoint);
  await waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name === 'echo'),
    { what: 'the bridged tools' });
  direct = await directClient();
});

after(async () => {
  await direct?.close();
  await stop(bridge);
  await stop(broker?.child);
});

test('every tool the server lists is in the broker, with its schema', async () => {
  const [tools, listed] = await assertBridged(direct, broker.endpoint);
  for (const tool of tools) {
    const entry = listed.get(tool.name);
    if (tool.description) assert.equal(entry.description, tool.description);
    if (tool.outputSchema) assert.deepEqual(entry.outputSchema, tool.outputSchema);
    if (tool.annotations?.readOnlyHint === true) assert.equal(entry.concurrencySafe, true);
  }
});

test('echo and get-sum', async () => {
  const echo = await dshCall(broker.endpoint, 'echo', { message: 'hi there' });
  assert.equal(echo.isError, false);
  assert.deepEqual(echo.content, [{ type: 'text', text: 'Echo: hi there' }]);
  const sum = await dshCall(broker.endpoint, 'get-sum', { a: 2, b: 40 });
  assert.match(sum.content[0].text, /42/);
});

test('get-tiny-image keeps the image bytes', async () => {
  const expected = await direct.callTool({ name: 'get-tiny-image', arguments: {} });
  const result = await dshCall(broker.endpoint, 'get-tiny-image', {});
  const want = expected.content.find((block) => block.type === 'image');
  const got = result.content.find((block) => block.type === 'image');
  assert.ok(got);
  assert.equal(got.mimeType, want.mimeType);
  assert.ok(Buffer.from(got.data, 'base64').equals(Buffer.from(want.data, 'base64')));
  assert.equal(got.data, want.data);
});

test('get-structured-content carries structuredContent', async () => {
  const result = await dshCall(broker.endpoint, 'get-structured-content', { location: 'New York' });
  assert.equal(result.isError, false);
  assert.equal(typeof result.structuredContent, 'object');
  assert.ok('temperature' in result.structuredContent);
});

test('bad arguments and unknown tools are errors', async () => {
  const bad = await dshCall(broker.endpoint, 'get-sum', { a: 'x' });
  assert.equal(bad.isError, true);
  assert.equal(bad.error.code, 'INVALID_ARGS');
  const unknown = await dshCall(broker.endpoint, 'no-such-tool', {});
  assert.equal(unknown.error.code, 'UNKNOWN_TOOL');
});

test('trigger-long-running-operation reports progress through dsh', async () => {
  const client = await facadeClient(broker.endpoint);
  try {
    const seen = [];
    const result = await client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 4 } },
      undefined, { onprogress: (progress) => seen.push(progress) });
    assert.equal(result.isError, false);
    assert.ok(seen.length >= 1, 'progress notifications arrived');
    assert.equal(seen.at(-1).total, 4);
  } finally {
    await client.close();
  }
});

test('a cancelled call reaches the server as notifications/cancelled', async () => {
  const client = await facadeClient(broker.endpoint);
  try {
    const controller = new AbortController();
    const call = client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 10, steps: 10 } },
      undefined, { signal: controller.signal });
    await new Promise((resolve) => setTimeout(resolve, 1000));
    controller.abort('test cancel');
    await assert.rejects(call);
    await waitFor(() => /cancelled/.test(bridge.log), { what: 'the bridge to cancel the call' });
  } finally {
    await client.close();
  }
});

test('a killed server is withdrawn, then restarted', async () => {
  const pid = Number([...bridge.log.matchAll(/\(pid (\d+)\)/g)].at(-1)[1]);
  const starts = (bridge.log.match(/started /g) || []).length;
  process.kill(pid, 'SIGKILL');
  await waitFor(async () => !(await dshTools(broker.endpoint)).some((tool) => tool.name === 'echo') ||
    (bridge.log.match(/started /g) || []).length > starts, { what: 'the tools to go' });
  await waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name === 'echo'),
    { what: 'the tools to come back' });
  assert.ok((bridge.log.match(/started /g) || []).length > starts);
  const echo = await dshCall(broker.endpoint, 'echo', { message: 'again' });
  assert.equal(echo.content[0].text, 'Echo: again');
});
