//  A bridged server's write tools go through approval under the main job's
//  chain (deploy/dsh-broker.cfg): server-filesystem, allowed a whole
//  directory, behind dsh-mcp-bridge. Its tools are neither dsh-fs nor
//  named write_file, and its server could write anywhere in that
//  directory: write_file and move_file must wait for a human, be DENIED
//  without one, and run once approved.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { bin, start, stop, dshTools, freshStateDir, waitFor } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.resolve(process.env.DSH_SOURCE_DIR || path.join(here, '../..'));
const serverFilesystem = path.join(here, 'node_modules/.bin/mcp-server-filesystem');

let broker, endpoint, bridge, confinedBridge, root;
const approvers = new Set();

before(async () => {
  root = realpathSync(mkdtempSync(path.join(os.tmpdir(), 'dsh-approval-')));
  mkdirSync(path.join(root, 'scratch'));
  writeFileSync(path.join(root, 'notes.txt'), 'first notes\n');
  const started = await start(bin.broker, ['-c', path.join(source, 'deploy/dsh-broker.cfg'),
    '-e', 'tcp://127.0.0.1:*', ...freshStateDir()], /listening on (tcp:\/\/\S+)/);
  broker = started.child;
  endpoint = started.match[1];
  ({ child: bridge } = await start(bin.bridge, ['--broker', endpoint, '--name', 'fs', '--id', 'mcp-fs',
    '--prefix', 'mcp__fs__', '--', serverFilesystem, root], /serving \d+ tools/));
  await waitFor(async () => (await dshTools(endpoint)).some((tool) => tool.name === 'mcp__fs__move_file'),
    { what: 'the bridged filesystem tools' });
});

after(async () => {
  for (const approver of approvers) await stop(approver);
  await stop(confinedBridge);
  await stop(bridge);
  await stop(broker);
  if (root) rmSync(root, { recursive: true, force: true });
});

//  `dsh call` as agent desktop, as an MCP host's calls arrive.
function call(name, args) {
  return new Promise((resolve, reject) => {
    execFile(bin.cli, ['--broker', endpoint, 'call', name, JSON.stringify(args), '--agent', 'desktop',
      '--timeout-ms', '30000'], { timeout: 40000 }, (error, stdout, stderr) => {
      if (!stdout.trim()) reject(new Error(`dsh call ${name}: ${stderr}`));
      else resolve(JSON.parse(stdout));
    });
  });
}

//  `dsh approver`, decisions on its stdin; its JSON lines are collected.
function startApprover() {
  const child = spawn(bin.cli, ['--broker', endpoint, 'approver'], { stdio: ['pipe', 'pipe', 'pipe'] });
  approvers.add(child);
  child.on('exit', () => approvers.delete(child));
  child.lines = [];
  let partial = '';
  child.stdout.on('data', (data) => {
    const lines = (partial + data).split('\n');
    partial = lines.pop();
    for (const line of lines) if (line.trim()) child.lines.push(JSON.parse(line));
  });
  child.decide = (line) => child.stdin.write(`${line}\n`);
  return child;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

//  Calls name until the approver reports it pending (until the stage has
//  heard from a new approver, an ask is denied at once). Returns the
//  pending line and the call still waiting.
async function callUntilPending(approver, name, args) {
  const giveUp = Date.now() + 15000;
  while (Date.now() < giveUp) {
    const seen = approver.lines.length;
    let answered = null;
    const waiting = call(name, args);
    waiting.then((result) => { answered = result; }, () => { answered = {}; });
    while (!answered && Date.now() < giveUp) {
      const pending = approver.lines.slice(seen).find((line) => line.event === 'pending' && line.tool === name);
      if (pending) return { pending, waiting };
      await sleep(50);
    }
    assert.match(answered?.content?.[0]?.text ?? '', /requires approval/, 'denied at once, before the approver was heard');
    await sleep(100);
  }
  throw new Error(`${name} never reached the approver`);
}

function assertDenied(result, text) {
  assert.equal(result.isError, true);
  assert.equal(result.error?.code, 'DENIED');
  assert.match(result.content[0].text, text);
}

test('the bridged entries carry the server\'s hints, and no confined claim', async () => {
  const tools = new Map((await dshTools(endpoint)).map((tool) => [tool.name, tool]));
  assert.equal(tools.get('mcp__fs__read_text_file').annotations.readOnlyHint, true);
  assert.equal(tools.get('mcp__fs__write_file').annotations.readOnlyHint, false);
  assert.equal(tools.get('mcp__fs__move_file').annotations.readOnlyHint, false);
  for (const tool of tools.values()) assert.equal(tool.confined, undefined, tool.name);
});

test('read-only tools run without approval', async () => {
  const result = await call('mcp__fs__read_text_file', { path: path.join(root, 'notes.txt') });
  assert.equal(result.isError, false);
  assert.match(result.content[0].text, /first notes/);
});

test('write_file and move_file are DENIED without an approver', async () => {
  const outside = path.join(root, 'outside.txt');
  assertDenied(await call('mcp__fs__write_file', { path: outside, content: 'unasked' }),
    /tool "mcp__fs__write_file" requires approval/);
  assert.equal(existsSync(outside), false);
  const moved = path.join(root, 'moved.txt');
  assertDenied(await call('mcp__fs__move_file', { source: path.join(root, 'notes.txt'), destination: moved }),
    /tool "mcp__fs__move_file" requires approval/);
  assert.equal(existsSync(moved), false);
  assert.equal(existsSync(path.join(root, 'notes.txt')), true);
});

test('write_file and move_file wait for the approver, and run once approved', async () => {
  const approver = startApprover();
  const outside = path.join(root, 'approved.txt');
  const write = await callUntilPending(approver, 'mcp__fs__write_file', { path: outside, content: 'approved' });
  assert.equal(write.pending.agent, 'desktop');
  assert.equal(write.pending.arguments.path, outside);
  //  Waiting: nothing written yet
  await sleep(200);
  assert.equal(existsSync(outside), false);
  approver.decide(`allow ${write.pending.id}`);
  const written = await write.waiting;
  assert.equal(written.isError, false, JSON.stringify(written));
  assert.equal(readFileSync(outside, 'utf8'), 'approved');

  //  Rejected: DENIED, nothing moved; then allowed: moved
  const moved = path.join(root, 'moved.txt');
  const args = { source: path.join(root, 'notes.txt'), destination: moved };
  let move = await callUntilPending(approver, 'mcp__fs__move_file', args);
  approver.decide(`deny ${move.pending.id}`);
  assertDenied(await move.waiting, /tool "mcp__fs__move_file" was rejected by the approver/);
  assert.equal(existsSync(moved), false);
  move = await callUntilPending(approver, 'mcp__fs__move_file', args);
  await sleep(200);
  assert.equal(existsSync(moved), false);
  approver.decide(`allow ${move.pending.id}`);
  const done = await move.waiting;
  assert.equal(done.isError, false, JSON.stringify(done));
  assert.equal(existsSync(moved), true);
  assert.equal(existsSync(path.join(root, 'notes.txt')), false);
  await stop(approver);
});

test('--confined declares every bridged tool confined', async () => {
  ({ child: confinedBridge } = await start(bin.bridge, ['--broker', endpoint, '--name', 'fs2', '--id', 'mcp-fs2',
    '--prefix', 'boxed__', '--confined', '--', serverFilesystem, path.join(root, 'scratch')], /serving \d+ tools/));
  const tools = await waitFor(async () => {
    const listed = (await dshTools(endpoint)).filter((tool) => tool.name.startsWith('boxed__'));
    return listed.length > 0 && listed;
  }, { what: 'the confined bridge\'s tools' });
  for (const tool of tools) assert.equal(tool.confined, true, tool.name);
});
