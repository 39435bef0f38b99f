//  C tools (dsh-demo) called from Node through the Client and the
//  registry: results, errors, progress, cancel by AbortSignal, deadlines,
//  many calls in flight, and a broker that goes silent (BROKER_GONE).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, ToolRegistry } from '../dist/index.js';
import { freePorts, startBroker, startDemo, stop, until, text } from './helpers.mjs';

let broker;
let demo;
let client;
let registry;

before(async () => {
  broker = await startBroker();
  demo = await startDemo(broker.endpoint);
  client = new Client(broker.endpoint);
  await until(async () => (await client.tools()).some((tool) => tool.name === 'count'), 'the demo tools');
  registry = await ToolRegistry.connect({ broker: broker.endpoint });
});

after(async () => {
  client?.close();
  await registry?.close();
  await stop(demo);
  await stop(broker);
});

test('echo, and the registry view of the C tools', async () => {
  const result = await client.call('echo', { message: 'hi' }, { callId: 'c-1' });
  assert.deepEqual(result, { callId: 'c-1', content: [{ type: 'text', text: 'hi' }], isError: false });
  await until(() => registry.get('echo'), 'echo in the view');
  assert.deepEqual(registry.schemas().map((schema) => schema.name).slice(0, 2), ['echo', 'sleep_ms']);
  assert.deepEqual(await registry.get('echo').execute({ message: 'via get' }), [{ type: 'text', text: 'via get' }]);
  //  An error result rejects with one "Error:", not "Error: Error: ..."
  await until(() => registry.get('fail'), 'fail in the view');
  await assert.rejects(registry.get('fail').execute({ message: 'on purpose' }), (error) => {
    assert.equal(String(error), 'Error: on purpose');
    assert.equal(error.code, 'TOOL_FAILED');
    return true;
  });
  const listed = await client.get('echo');
  assert.equal(listed.providers.length, 1);
  assert.equal(await client.get('no_such_tool'), undefined);
});

test('invalid arguments and an unknown tool are error results', async () => {
  const invalid = await client.call('echo', {});
  assert.deepEqual(invalid.error, { name: 'ToolArgsError', code: 'INVALID_ARGS' });
  assert.equal(text(invalid), 'Error: invalid arguments: missing required property "message"');
  const unknown = await registry.execute('nope', {});
  assert.deepEqual(unknown.error, { name: 'UnknownToolError', code: 'UNKNOWN_TOOL' });
  assert.equal(text(unknown), 'Error: unknown tool "nope"');
  const failed = await client.call('fail', {});
  assert.equal(failed.isError, true);
});

test('progress reaches onProgress before the result', async () => {
  const seen = [];
  const result = await registry.execute('count', { to: 3 }, { onProgress: (progress) => seen.push(progress.progress) });
  assert.equal(text(result), 'counted to 3');
  assert.deepEqual(seen, [1, 2, 3]);
});

test('an AbortSignal cancels the call: CANCELLED, exactly once', async () => {
  const controller = new AbortController();
  const pending = registry.execute('sleep_ms', { ms: 10000 }, { signal: controller.signal });
  setTimeout(() => controller.abort(), 100);
  const result = await pending;
  assert.deepEqual(result.error, { name: 'CancelledError', code: 'CANCELLED' });
  assert.equal(text(result), 'Error: the call was cancelled');
  const already = await client.call('echo', { message: 'x' }, { signal: AbortSignal.abort() });
  assert.equal(already.error.code, 'CANCELLED');
});

test('a deadline gives TIMEOUT', async () => {
  const result = await client.call('sleep_ms', { ms: 5000 }, { timeoutMs: 200 });
  assert.deepEqual(result.error, { name: 'ToolTimeoutError', code: 'TIMEOUT' });
  assert.equal(text(result), 'Error: tool "sleep_ms" did not answer before the call\'s deadline');
});

test('many calls in flight each get their own result', async () => {
  const results = await Promise.all(Array.from({ length: 200 }, (_, index) =>
    client.call('echo', { message: `m${index}` })));
  results.forEach((result, index) => assert.equal(text(result), `m${index}`));
});

test('a broker that dies mid-call: BROKER_GONE within the liveness window, never a hang', async () => {
  //  A port outside czmq's dynamic range: once this broker is dead, no
  //  other test's broker on `tcp://127.0.0.1:*` or `!` can be given it
  const lonely = await startBroker(`tcp://127.0.0.1:${await freePorts()}`);
  const lonelyDemo = await startDemo(lonely.endpoint);
  const lonelyClient = new Client(lonely.endpoint);
  try {
    await until(async () => (await lonelyClient.tools()).length > 0, 'the demo tools');
    const pending = lonelyClient.call('sleep_ms', { ms: 30000 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await stop(lonely, 'SIGKILL');
    const result = await pending;
    assert.deepEqual(result.error, { name: 'BrokerGoneError', code: 'BROKER_GONE' });
    assert.match(text(result), /^Error: the broker at tcp:\/\/127\.0\.0\.1:\d+ went silent \(no answer for \d+ ms\) with the call in flight$/);
    await assert.rejects(lonelyClient.tools(), (error) => error.code === 'BROKER_GONE' || error.code === 'TIMEOUT');
  } finally {
    lonelyClient.close();
    await stop(lonelyDemo);
  }
});

test('a broker list: a call to a broker never reached moves to the next one', async () => {
  const nobody = `tcp://127.0.0.1:${await freePorts()}`;
  const listed = new Client([nobody, broker.endpoint]);
  try {
    const result = await listed.call('echo', { message: 'moved' });
    assert.equal(text(result), 'moved');
    assert.equal(listed.endpoint, broker.endpoint);
  } finally {
    listed.close();
  }
});

test('a broker that comes up past the liveness window answers what waited for it', async () => {
  //  Alone in its list, the client waits for the broker; its silence counts
  //  from the connection, so a request sent 4 s before (the window is 3 s
  //  until a PONG says otherwise) is answered, not given up
  const endpoint = `tcp://127.0.0.1:${await freePorts()}`;
  const early = new Client(endpoint);
  let late;
  try {
    const listed = early.request('LIST', {}, 15000);
    await new Promise((resolve) => setTimeout(resolve, 4000));
    late = await startBroker(endpoint);
    const reply = await listed;
    assert.ok(Array.isArray(reply.tools), JSON.stringify(reply));
  } finally {
    early.close();
    await stop(late);
  }
});

test('a peer that echoes requests back (a socket connected to itself) is no broker: BROKER_GONE', async () => {
  //  What a DEALER reads when TCP simultaneous open connects it to itself
  //  on a dead broker's ephemeral port: its own messages
  const { Router } = await import('zeromq');
  const mirror = new Router({ linger: 0 });
  await mirror.bind('tcp://127.0.0.1:*');
  void (async () => { try { for await (const message of mirror) await mirror.send(message); } catch { /* closed */ } })();
  const fooled = new Client(mirror.lastEndpoint);
  try {
    const [listed, called] = await Promise.allSettled([fooled.tools(), fooled.call('echo', { message: 'x' })]);
    assert.equal(listed.status, 'rejected');
    assert.equal(listed.reason.code, 'BROKER_GONE');
    assert.equal(called.value.error.code, 'BROKER_GONE');
  } finally {
    fooled.close();
    mirror.close();
  }
});

test('bad input is answered at once with a clear error, never left to a deadline', async () => {
  const unsendable = await client.call('echo', { message: () => 'x' });
  assert.equal(unsendable.error.code, 'BAD_REQUEST');
  assert.match(text(unsendable), /cannot be sent as msgpack/);
  const longId = await client.call('echo', { message: 'x' }, { callId: 'x'.repeat(300) });
  assert.equal(longId.error.code, 'BAD_REQUEST');
  assert.equal(text(longId), 'field "callId" must be 1-256 bytes without NUL');
  const badName = await client.call('bad name!', {});
  assert.equal(badName.error.code, 'UNKNOWN_TOOL');
  assert.throws(() => new Client([]), /1 to 16 endpoints/);
});
