//  RATE_LIMITED through the Node client, against a real broker whose chain
//  has a limit stage first: the result's error carries retryAfterMs, a
//  DshError made from it has the code, the name and retryAfterMs, and the
//  registry's execute rejects with them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, DshError, ToolRegistry } from '../dist/index.js';
import { startBroker, startDemo, stop, until } from './helpers.mjs';

const CONFIG = `chain
    stage
        name = "limit"
        kind = "limit"
        rule
            tool = "echo"
            rate = 2
            burst = 2
`;

let broker;
let demo;
let client;
let directory;

before(async () => {
  directory = mkdtempSync(path.join(os.tmpdir(), 'dsh-node-limit-'));
  const config = path.join(directory, 'limit.cfg');
  writeFileSync(config, CONFIG);
  broker = await startBroker('tcp://127.0.0.1:!', ['-c', config]);
  demo = await startDemo(broker.endpoint);
  client = new Client(broker.endpoint);
  await until(async () => (await client.tools()).some((tool) => tool.name === 'echo'), 'the demo tools');
});

after(async () => {
  client?.close();
  await stop(demo);
  await stop(broker);
  rmSync(directory, { recursive: true, force: true });
});

test('over its rate, a call is answered RATE_LIMITED with retryAfterMs', async () => {
  for (let index = 0; index < 2; index++)
    assert.equal((await client.call('echo', { message: 'hi' }, { agent: 'node' })).isError, false);
  const result = await client.call('echo', { message: 'hi' }, { agent: 'node' });
  assert.equal(result.isError, true);
  assert.equal(result.error.code, 'RATE_LIMITED');
  assert.equal(result.error.name, 'RateLimitedError');
  assert.ok(Number.isInteger(result.error.retryAfterMs));
  assert.ok(result.error.retryAfterMs >= 1 && result.error.retryAfterMs <= 500, String(result.error.retryAfterMs));
  assert.match(result.content[0].text,
    /^Error: agent "node" is over its limit for "echo" \(2\/s, burst 2\); retry after \d+ ms$/);
  const error = DshError.fromResult(result);
  assert.ok(error instanceof DshError);
  assert.equal(error.code, 'RATE_LIMITED');
  assert.equal(error.name, 'RateLimitedError');
  assert.equal(error.retryAfterMs, result.error.retryAfterMs);
  assert.match(error.message, /^agent "node" is over its limit/);
  await new Promise((resolve) => setTimeout(resolve, result.error.retryAfterMs + 20));
  const again = await client.call('echo', { message: 'hi' }, { agent: 'node' });
  assert.equal(again.isError, false);
  assert.equal(DshError.fromResult({ ...again, isError: true, error: { name: 'ToolError', code: 'TOOL_FAILED' } })
    .retryAfterMs, undefined);
});

test('the registry rejects with code RATE_LIMITED and retryAfterMs', async () => {
  const registry = await ToolRegistry.connect({ broker: broker.endpoint });
  try {
    await until(() => registry.get('echo'), 'echo in the view');
    const echo = registry.get('echo');
    let refused;
    for (let index = 0; index < 10 && !refused; index++) {
      try {
        await echo.execute({ message: 'hi' }, { agent: 'node-registry' });
      } catch (error) {
        refused = error;
      }
    }
    assert.ok(refused, 'a call over the limit');
    assert.equal(refused.code, 'RATE_LIMITED');
    assert.ok(refused.retryAfterMs >= 1);
  } finally {
    await registry.close();
  }
});
