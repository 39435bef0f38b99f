//  The same calls straight to server-everything and through
//  dsh-mcp-bridge -> broker -> dsh-mcp give the same results.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startBroker, startBridge, stop, dshTools, directClient, facadeClient, waitFor } from './helpers.mjs';

let broker, bridge, direct, facade;

before(async () => {
  broker = await startBroker();
  bridge = await startBridge(broker.endpoint);
  await waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name === 'echo'),
    { what: 'the bridged tools' });
  direct = await directClient();
  facade = await facadeClient(broker.endpoint);
});

after(async () => {
  await facade?.close();
  await direct?.close();
  await stop(bridge);
  await stop(broker?.child);
});

//  The fields dsh carries: content, structuredContent, isError.
function comparable(result) {
  return { content: result.content, structuredContent: result.structuredContent, isError: result.isError ?? false };
}

const calls = [
  ['echo', { message: 'same either way' }],
  ['echo', { message: 'ünïcødé ✓ "quoted" \\ and\nnewline' }],
  ['get-sum', { a: 1.5, b: -7 }],
  ['get-tiny-image', {}],
  ['get-structured-content', { location: 'Chicago' }],
  ['trigger-long-running-operation', { duration: 1, steps: 2 }],
];

for (const [name, args] of calls) {
  test(`${name} ${JSON.stringify(args)}`, async () => {
    const want = await direct.callTool({ name, arguments: args });
    const got = await facade.callTool({ name, arguments: args });
    assert.deepEqual(comparable(got), comparable(want));
  });
}

test('the tool lists agree on names and input schemas', async () => {
  const want = (await direct.listTools()).tools;
  const got = new Map((await facade.listTools()).tools.map((tool) => [tool.name, tool]));
  for (const tool of want) {
    assert.deepEqual(got.get(tool.name)?.inputSchema, tool.inputSchema, tool.name);
    assert.equal(got.get(tool.name)?.description, tool.description, tool.name);
  }
});
