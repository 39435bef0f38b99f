//  Tools served from Node, reached by the C CLI and by Node: register,
//  tools/change, the disposer, progress and cancel inside a handler, the
//  concurrency limit, registrations in a loop announced together, kill -9 of a Node component mid-call, and a broker
//  restart (the component announces again, the view resynchronises).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Client, ToolRegistry, defineTool } from '../dist/index.js';
import { bin, fixtures, freePorts, start, startBroker, stop, dshCall, dshTools, until, text } from './helpers.mjs';

let broker;
let registry;
let client;

before(async () => {
  broker = await startBroker();
  registry = await ToolRegistry.connect({ broker: broker.endpoint, component: 'node-test', concurrency: 2 });
  client = new Client(broker.endpoint);
});

after(async () => {
  client?.close();
  await registry?.close();
  await stop(broker);
});

const add = defineTool({
  name: 'node_add',
  description: 'Add two numbers',
  parameters: { a: { type: 'number', required: true }, b: { type: 'number', required: true } },
  async execute(args) { return [{ type: 'text', text: String(args.a + args.b) }]; },
});

test('a Node tool: tools/change fires, dsh call reaches it, the disposer withdraws it', async () => {
  const changes = [];
  const off = registry.on('tools/change', (change) => changes.push(change));
  const dispose = registry.register(add);
  await dispose.ready;
  await until(() => changes.some((change) => change.kind === 'tool.registered' && change.name === 'node_add'),
    'tools/change for node_add');
  const registered = changes.find((change) => change.name === 'node_add');
  assert.equal(registered.component, 'node-test');
  assert.equal(registered.tool.description, 'Add two numbers');

  const viaCli = await dshCall(broker.endpoint, 'node_add', { a: 2, b: 3 });
  assert.equal(text(viaCli), '5');
  assert.equal(viaCli.isError, false);
  const invalid = await dshCall(broker.endpoint, 'node_add', { a: 'x' });
  assert.deepEqual(invalid.error, { name: 'ToolArgsError', code: 'INVALID_ARGS' });
  assert.equal(text(invalid), 'Error: invalid arguments: "a" must be a number; missing required property "b"');

  await dispose();
  assert.ok(!(await dshTools(broker.endpoint)).includes('node_add'));
  await until(() => changes.some((change) => change.kind === 'tool.unregistered' && change.name === 'node_add'),
    'tools/change for the withdrawal');
  assert.equal(registry.get('node_add'), undefined);
  off();
});

test('a handler reports progress, sees its cancel, and runs at most `concurrency` at once', async () => {
  let running = 0;
  let most = 0;
  let cancelled = 0;
  const dispose = registry.register({
    name: 'node_work',
    description: 'Report progress, then wait ms (or until cancelled)',
    parameters: { type: 'object', properties: { ms: { type: 'integer' } } },
  }, async (args, exec) => {
    running += 1;
    most = Math.max(most, running);
    try {
      exec.progress(1, 2, 'half');
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, args.ms);
        exec.signal.addEventListener('abort', () => { cancelled += 1; clearTimeout(timer); resolve(); });
      });
      return { content: [{ type: 'text', text: 'done' }], structuredContent: { ms: args.ms } };
    } finally {
      running -= 1;
    }
  });
  await dispose.ready;

  const progress = [];
  const result = await client.call('node_work', { ms: 10 }, { onProgress: (report) => progress.push(report) });
  assert.deepEqual(result.structuredContent, { ms: 10 });
  assert.equal(progress.length, 1);
  assert.equal(progress[0].message, 'half');
  assert.equal(progress[0].total, 2);

  const results = await Promise.all(Array.from({ length: 6 }, () => client.call('node_work', { ms: 100 })));
  assert.ok(results.every((each) => text(each) === 'done'));
  assert.equal(most, 2);

  const controller = new AbortController();
  const pending = client.call('node_work', { ms: 20000 }, { signal: controller.signal });
  await until(() => running === 1, 'the handler to start');
  controller.abort();
  assert.equal((await pending).error.code, 'CANCELLED');
  await until(() => cancelled === 1, 'the handler to see the cancel');
  await dispose();
});

test('registrations made in one run go in one ANNOUNCE', async () => {
  const batch = await ToolRegistry.connect({ broker: broker.endpoint, component: 'node-batch' });
  try {
    await batch.register({ name: 'node_batch_first', parameters: { type: 'object' } }, () => []).ready;
    let announces = 0;
    const presence = batch.component.presence.bind(batch.component);
    batch.component.presence = (command) => {
      if (command === 'ANNOUNCE')
        announces += 1;
      return presence(command);
    };
    const disposers = [];
    for (let index = 0; index < 100; index += 1)
      disposers.push(batch.register({ name: `node_batch_${index}`, parameters: { type: 'object' } }, () => []));
    await Promise.all(disposers.map((dispose) => dispose.ready));
    //  The ANNOUNCE after them, and the one its HELLO's SYNC asks for
    assert.ok(announces >= 1 && announces <= 2, `${announces} ANNOUNCEs for 100 registrations`);
  } finally {
    await batch.close();
  }
});

test('close() withdraws: the broker says the component left, "withdrawn"', async () => {
  const departures = [];
  registry.watcher.on('change', (event) => { if (event.kind === 'component.left') departures.push(event); });
  const other = await ToolRegistry.connect({ broker: broker.endpoint, component: 'node-leaving' });
  await other.register(add).ready;
  await other.close();
  const left = await until(() => departures.find((event) => event.component === 'node-leaving'), 'component.left');
  assert.equal(left.reason, 'withdrawn');
  assert.deepEqual(left.tools, ['node_add']);
});

test('kill -9 of a Node component mid-call gives TOOL_GONE', async () => {
  const child = await start(process.execPath, [path.join(fixtures, 'component.mjs'), broker.endpoint, 'node-victim'],
    /ready/);
  const pending = client.call('node_hang', {}, { timeoutMs: 20000 });
  await until(() => child.log.includes('running'), 'the call to reach the handler');
  await stop(child, 'SIGKILL');
  const result = await pending;
  assert.deepEqual(result.error, { name: 'ToolGoneError', code: 'TOOL_GONE' });
  assert.match(text(result), /^Error: tool "node_hang" is gone: component "node-victim"/);
  await until(async () => !(await dshTools(broker.endpoint)).includes('node_hang'), 'node_hang to leave the catalog');
});

test('a broker restart: the component announces again and the view resynchronises', async () => {
  const base = await freePorts();
  const endpoint = `tcp://127.0.0.1:${base}`;
  let fixed = await startBroker(endpoint);
  const local = await ToolRegistry.connect({ broker: endpoint, component: 'node-restart' });
  try {
    const dispose = local.register(add);
    await dispose.ready;
    const epoch = local.watcher.epoch;
    const snapshots = [];
    local.on('tools/change', (change) => { if (change.kind === 'snapshot') snapshots.push(change); });

    await stop(fixed, 'SIGKILL');
    fixed = await startBroker(endpoint);
    await until(async () => (await dshTools(endpoint)).includes('node_add'), 'node_add announced again', 15000);
    await until(() => local.watcher.epoch !== epoch && local.get('node_add'), 'the view of the new broker', 15000);
    assert.ok(local.watcher.resyncs >= 1);
    assert.ok(snapshots.some((notice) => notice.resync && notice.epoch === local.watcher.epoch));
    assert.equal(text(await local.execute('node_add', { a: 20, b: 22 })), '42');
  } finally {
    await local.close();
    await stop(fixed);
  }
});

test('a call that timed out while no broker could be reached is never run when one comes', async () => {
  const endpoint = `tcp://127.0.0.1:${await freePorts()}`;
  const early = new Client(endpoint);
  let runs = 0;
  let late;
  let local;
  try {
    const stale = await early.call('node_once', {}, { timeoutMs: 100 });
    assert.equal(stale.error.code, 'TIMEOUT');
    assert.equal(text(stale), 'Error: no answer from the broker by the call\'s deadline');
    late = await startBroker(endpoint);
    local = await ToolRegistry.connect({ broker: endpoint, component: 'node-once' });
    await local.register({ name: 'node_once', parameters: { type: 'object' } }, async () => {
      runs += 1;
      return [{ type: 'text', text: 'ran' }];
    }).ready;
    //  The early client's messages leave in order: had the stale call been
    //  kept, it would have run before this one is answered
    assert.equal(text(await early.call('node_once', {})), 'ran');
    assert.equal(runs, 1);
  } finally {
    early.close();
    await local?.close();
    await stop(late);
  }
});

test('two brokers: the component serves both; the view and the client move on when the first dies', async () => {
  const first = await startBroker(`tcp://127.0.0.1:${await freePorts()}`);
  const second = await startBroker(`tcp://127.0.0.1:${await freePorts()}`);
  const both = await ToolRegistry.connect({ broker: [first.endpoint, second.endpoint], component: 'node-both' });
  try {
    await both.register(add).ready;
    await until(async () => (await dshTools(second.endpoint)).includes('node_add'), 'node_add at the second broker');
    assert.equal(text(await dshCall(first.endpoint, 'node_add', { a: 1, b: 1 })), '2');
    assert.equal(text(await dshCall(second.endpoint, 'node_add', { a: 2, b: 2 })), '4');

    const epoch = both.watcher.epoch;
    await stop(first, 'SIGKILL');
    await until(() => both.watcher.endpoint === second.endpoint && both.watcher.epoch !== epoch
      && both.get('node_add'), 'the view to follow the second broker', 15000);
    //  The client follows the first broker until it is silent for the
    //  window, so the first call goes there; node_add is neither read-only
    //  nor idempotent, so it is not sent again (PROTOCOL.md, Client
    //  liveness: the client's own rules)
    const lost = await both.execute('node_add', { a: 3, b: 3 });
    assert.equal(lost.error?.code, 'BROKER_GONE', JSON.stringify(lost));
    assert.equal(text(await both.execute('node_add', { a: 3, b: 3 })), '6');
    assert.equal(both.client.endpoint, second.endpoint);
  } finally {
    await both.close();
    await stop(first);
    await stop(second);
  }
});
