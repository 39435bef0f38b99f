//  The original's form on the real `cordis` package (npm, 4.x): a cordis app
//  with ctx.plugin(DshTools, {broker}) on a real broker and dsh-demo. The
//  original README's example (examples/read_file.ts, only the import
//  changed) runs in a plugin; registrations follow their plugin's fiber;
//  tools/execute is cordis's waterfall and tools/change its event; the
//  swarm's schemas reach the app's systemPrompt.tools(). The app's plugins
//  (cordis/app.ts) are type-checked against cordis by `npm run build:test`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Context } from 'cordis';
import { DshTools } from '../dist/index.js';
import { app, SystemPrompt, permission, adder } from './examples/build/cordis/app.js';
import { startBroker, startDemo, stop, dshCall, dshTools, until, text } from './helpers.mjs';

let broker;
let demo;
let root;
let service;
const changes = [];

//  The broker serves name from this process, and the view has it (or
//  neither, with present false).
async function served(name, present = true) {
  await until(async () => {
    const found = await root.tools.registry.client.get(name);
    const ours = found?.providers.includes(root.tools.registry.component.id) ?? false;
    return ours === present && (root.tools.get(name) !== undefined) === present;
  }, `${name} ${present ? '' : 'no longer '}served from this process`);
}

before(async () => {
  broker = await startBroker();
  demo = await startDemo(broker.endpoint);
  ({ root, fiber: service } = app(broker.endpoint));
  root.on('tools/change', (change) => changes.push(change));
  //  Plugins that inject 'tools' start once the service has its snapshot
  await root.inject(['tools'], () => {});
  await until(() => root.tools.get('echo'), 'the demo tools in the view');
});

after(async () => {
  await service?.dispose();
  await stop(demo);
  await stop(broker);
});

test('ctx.plugin(DshTools) provides ctx.tools, a cordis Service', async () => {
  assert.ok(root.tools instanceof DshTools);
  assert.ok(root.get('tools'));
  assert.ok(root.tools.schemas().some((schema) => schema.name === 'echo'));
  const result = await root.tools.execute({ callId: 'c-1', name: 'echo', arguments: { message: 'hi' } });
  assert.deepEqual(result, { callId: 'c-1', content: [{ type: 'text', text: 'hi' }], isError: false });
  //  Module form: `@dsh/tools` is loadable as a cordis plugin (its default export)
  assert.equal((await import('../dist/index.js')).default, DshTools);
});

test('the original README example runs in a plugin, and goes with it', async () => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'dsh-cordis-'));
  const file = path.join(dir, 'hello.txt');
  await writeFile(file, 'hello from cordis\n');
  const seen = changes.length;

  const example = await root.inject(['tools'], async (ctx) => {
    globalThis.ctx = ctx;
    await import('./examples/build/read_file.js');
  });
  await served('read_file');
  const result = await root.tools.execute({ callId: 'readme-1', name: 'read_file', arguments: { path: file } });
  assert.deepEqual(result, { callId: 'readme-1', content: [{ type: 'text', text: 'hello from cordis\n' }], isError: false });
  assert.equal(text(await dshCall(broker.endpoint, 'read_file', { path: file })), 'hello from cordis\n');
  await until(() => changes.slice(seen).some((change) => change.kind === 'tool.registered' && change.name === 'read_file'),
    'tools/change for read_file');

  //  The plugin's disposal withdraws the tool from the swarm
  await example.dispose();
  assert.equal(root.tools.get('read_file'), undefined);
  assert.ok(!(await dshTools(broker.endpoint)).includes('read_file'));
  await until(() => changes.slice(seen).some((change) => change.kind === 'tool.unregistered' && change.name === 'read_file'),
    'tools/change for the withdrawal');
  const gone = await root.tools.execute('read_file', { path: file });
  assert.equal(gone.error.code, 'UNKNOWN_TOOL');
});

test('a child plugin\'s registration is withdrawn when it is disposed; the disposer and duplicates', async () => {
  const child = await root.plugin(adder);
  await served('node_add');
  assert.equal(text(await dshCall(broker.endpoint, 'node_add', { a: 2, b: 3 })), '5');
  assert.deepEqual(root.tools.get('node_add').annotations, { readOnlyHint: true });
  //  A name this process serves is refused, and nothing changes
  assert.throws(() => root.tools.register({ name: 'node_add', parameters: { type: 'object' }, async execute() { return []; } }),
    /tool "node_add" is already registered/);
  await child.dispose();
  await served('node_add', false);
  assert.equal((await root.tools.execute('node_add', { a: 1, b: 1 })).error.code, 'UNKNOWN_TOOL');

  //  The disposer works too, twice is harmless, and the fiber's disposal after it
  let dispose;
  const inner = await root.inject(['tools'], (ctx) => {
    dispose = ctx.tools.register({ name: 'node_once', parameters: { type: 'object' }, async execute() { return [{ type: 'text', text: 'once' }]; } });
  });
  await dispose.ready;
  assert.equal(text(await root.tools.execute('node_once')), 'once');
  await dispose();
  await dispose();
  await served('node_once', false);
  await inner.dispose();
});

test('tools/execute listeners are cordis\'s waterfall: onion order, veto, gone with their plugin', async () => {
  const order = [];
  const policy = await root.plugin(permission, { deny: 'echo', order });
  const denied = await root.tools.execute({ callId: 'veto-1', name: 'echo', arguments: { message: 'x' } });
  assert.deepEqual(denied, { callId: 'veto-1', content: [{ type: 'text', text: 'Denied by policy.' }], isError: true });
  assert.deepEqual(order, ['first:before', 'second:before', 'first:after']);
  //  A call that passes reaches the broker (the demo's count)
  order.length = 0;
  const passed = await root.tools.execute('count', { to: 2 });
  assert.equal(passed.isError, false);
  assert.deepEqual(order, ['first:before', 'second:before', 'first:after']);

  //  A listener that throws: an error result, keeping its code
  const thrower = await root.plugin((ctx) => {
    ctx.on('tools/execute', () => { throw Object.assign(new Error('sandbox says no'), { code: 'DENIED' }); }, true);
  });
  const failed = await root.tools.execute({ callId: 'veto-2', name: 'count', arguments: { to: 1 } });
  assert.equal(failed.isError, true);
  assert.equal(failed.error.code, 'DENIED');
  assert.equal(text(failed), 'Error: sandbox says no');
  await thrower.dispose();

  await policy.dispose();
  order.length = 0;
  const free = await root.tools.execute({ callId: 'free-1', name: 'echo', arguments: { message: 'free' } });
  assert.equal(text(free), 'free');
  assert.deepEqual(order, []);
});

test('the swarm\'s schemas go into the app\'s systemPrompt.tools(), while both services live', async () => {
  const prompt = await root.plugin(SystemPrompt);
  const toolNames = () => root.systemPrompt.assemble().tools.map((tool) => tool.name);
  //  The demo's C tools and this process's own
  const child = await root.plugin(adder);
  await served('node_add');
  const tools = root.systemPrompt.assemble().tools;
  for (const name of ['echo', 'count', 'node_add'])
    assert.ok(tools.some((tool) => tool.name === name), `${name} in the assembly`);
  const add = tools.find((tool) => tool.name === 'node_add');
  assert.deepEqual(add, {
    name: 'node_add', description: 'Add two numbers.',
    parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] },
  });
  assert.ok(tools.every((tool) => !('execute' in tool)));
  await child.dispose();
  await served('node_add', false);
  assert.ok(!toolNames().includes('node_add'));
  assert.ok(toolNames().includes('echo'));

  //  Another app: tools first, the system prompt later, then tools gone
  const other = new Context();
  const otherTools = other.plugin(DshTools, { broker: broker.endpoint });
  await other.inject(['tools'], () => {});
  await until(() => other.tools.get('echo'), 'the view of the second app');
  await other.plugin(SystemPrompt);
  await until(() => other.systemPrompt.assemble().tools.some((tool) => tool.name === 'echo'),
    'the swarm in a system prompt that came later');
  await otherTools.dispose();
  assert.equal(other.get('tools'), undefined);
  assert.deepEqual(other.systemPrompt.assemble().tools, []);
  await prompt.dispose();
});
