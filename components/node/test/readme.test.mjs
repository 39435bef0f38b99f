//  The original dsh-tools README, run against dsh: its defineTool example
//  (examples/read_file.ts, verbatim apart from the import line, compiled by
//  `npm run build:test`) registers into ctx.tools, here a ToolRegistry on a
//  real broker; then the behaviours its prose promises.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ToolRegistry, defineTool, validateArgs, schemaSpecToJsonSchema, ToolArgsError } from '../dist/index.js';
import { startBroker, stop, dshCall, dshTools, until, text } from './helpers.mjs';

let broker;
let registry;

before(async () => {
  broker = await startBroker();
  registry = await ToolRegistry.connect({ broker: broker.endpoint });
  globalThis.ctx = { tools: registry };
});

after(async () => {
  await registry?.close();
  await stop(broker);
});

test('the README example registers read_file, served through the broker', async () => {
  await import('./examples/build/read_file.js');
  const dir = await mkdtemp(path.join(os.tmpdir(), 'dsh-node-'));
  const file = path.join(dir, 'hello.txt');
  await writeFile(file, 'hello from disk\n');
  await until(() => registry.get('read_file'), 'read_file in the view');
  assert.deepEqual(registry.get('read_file').parameters, {
    type: 'object',
    properties: {
      path: { type: 'string', description: 'Absolute file path' },
      offset: { type: 'number' },
      limit: { type: 'number' },
    },
    required: ['path'],
  });
  assert.ok(registry.schemas().some((schema) => schema.name === 'read_file' && !('execute' in schema)));
  await until(async () => (await registry.client.get('read_file'))?.providers.includes(registry.component.id),
    'the broker serving read_file from this process');

  const result = await registry.execute({ callId: 'readme-1', name: 'read_file', arguments: { path: file } });
  assert.deepEqual(result, { callId: 'readme-1', content: [{ type: 'text', text: 'hello from disk\n' }], isError: false });

  //  The C CLI reaches the same handler
  assert.equal(text(await dshCall(broker.endpoint, 'read_file', { path: file })), 'hello from disk\n');
  assert.ok((await dshTools(broker.endpoint)).includes('read_file'));

  //  Model arguments are validated before execute runs, as in the original
  const bad = await registry.execute({ callId: 'readme-2', name: 'read_file', arguments: { offset: 'x' } });
  assert.equal(bad.isError, true);
  assert.deepEqual(bad.error, { name: 'ToolArgsError', code: 'INVALID_ARGS' });
  assert.equal(text(bad), 'Error: invalid arguments: missing required property "path"; "offset" must be a number');
});

test('validateArgs and schemaSpecToJsonSchema follow the original and the C SDK', () => {
  const spec = {
    config: { type: 'object', required: true, properties: { host: { type: 'string', required: true } } },
    tags: { type: 'array', items: { type: 'string' } },
    color: { type: 'string', enum: ['red', 'green'], default: 'red' },
    servers: { type: 'array', items: { type: 'object', properties: { host: { type: 'string' } } } },
  };
  assert.deepEqual(validateArgs(spec, null), ['"arguments" must be an object']);
  assert.deepEqual(validateArgs(spec, []), ['"arguments" must be an object']);
  assert.deepEqual(validateArgs(spec, { config: {}, tags: ['a', 2, 3], color: 'blue', servers: [{}, { host: 1 }] }), [
    'missing required property "config.host"', '"tags[1]" must be a string', '"tags[2]" must be a string',
    '"color" must be one of ["red","green"]', '"servers[1].host" must be a string',
  ]);
  assert.deepEqual(validateArgs(spec, { config: { host: 'h', extra: 1 }, extra: true }), []);
  assert.deepEqual(validateArgs(spec, { config: null }), ['"config" must be an object']);
  assert.deepEqual(schemaSpecToJsonSchema(spec).required, ['config']);
  assert.deepEqual(schemaSpecToJsonSchema(spec).properties.color, { type: 'string', enum: ['red', 'green'], default: 'red' });
  assert.ok(new ToolArgsError(['x']) instanceof Error);
});

test('a raw JSON-Schema definition is accepted and not validated; a duplicate is refused; the disposer withdraws', async () => {
  const dispose = registry.register({
    name: 'raw_echo',
    description: 'Echo whatever comes, unchecked',
    parameters: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
    async execute(args) { return [{ type: 'text', text: JSON.stringify(args) }]; },
  });
  assert.throws(() => registry.register(defineTool({ name: 'raw_echo', parameters: {}, async execute() { return []; } })),
    /tool "raw_echo" is already registered/);
  await dispose.ready;
  const result = await registry.execute('raw_echo', { message: 5 });
  assert.equal(result.isError, false);
  assert.equal(text(result), '{"message":5}');

  await dispose();
  await dispose();
  assert.equal(registry.get('raw_echo'), undefined);
  assert.ok(!(await dshTools(broker.endpoint)).includes('raw_echo'));
  const gone = await registry.execute('raw_echo', { message: 'x' });
  assert.equal(gone.error.code, 'UNKNOWN_TOOL');
  assert.equal(text(gone), 'Error: unknown tool "raw_echo"');
});

test('tools/execute listeners wrap calls in order and can veto', async () => {
  const order = [];
  const offWrap = registry.on('tools/execute', async (exec, next) => {
    order.push('first:before');
    const result = await next();
    order.push('first:after');
    return result;
  });
  const offVeto = registry.on('tools/execute', async (exec, next) => {
    order.push('second:before');
    if (exec.name === 'read_file')
      return { callId: exec.callId, content: [{ type: 'text', text: 'Denied by policy.' }], isError: true };
    return next();
  });
  const denied = await registry.execute({ callId: 'veto-1', name: 'read_file', arguments: { path: '/etc/hostname' } });
  assert.deepEqual(denied, { callId: 'veto-1', content: [{ type: 'text', text: 'Denied by policy.' }], isError: true });
  assert.deepEqual(order, ['first:before', 'second:before', 'first:after']);
  offWrap();
  offVeto();
  const unknown = await registry.execute({ callId: 'veto-2', name: 'no_such_tool', arguments: {} });
  assert.equal(unknown.error.code, 'UNKNOWN_TOOL');
});
