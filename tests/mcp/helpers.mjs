//  Shared plumbing for the MCP tests: start dsh processes from the build
//  directory ($DSH_BUILD_DIR), talk to them, and clean up.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const here = path.dirname(fileURLToPath(import.meta.url));
export const buildDir = path.resolve(process.env.DSH_BUILD_DIR || path.join(here, '../../build'));
export const bin = {
  broker: path.join(buildDir, 'broker/dsh-broker'),
  demo: path.join(buildDir, 'components/demo/dsh-demo'),
  cli: path.join(buildDir, 'components/cli/dsh'),
  bridge: path.join(buildDir, 'components/mcp/dsh-mcp-bridge'),
  facade: path.join(buildDir, 'components/mcp/dsh-mcp'),
  everything: path.join(here, 'node_modules/.bin/mcp-server-everything'),
  inspector: path.join(here, 'node_modules/.bin/mcp-inspector-cli'),
};

const children = new Set();
process.on('exit', () => { for (const child of children) child.kill('SIGKILL'); });

//  Starts a program; resolves once a line of its stdout or stderr matches
//  ready (the match is returned with the child).
export function start(file, args, ready, { timeoutMs = 20000, env } = {}) {
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  children.add(child);
  child.on('exit', () => children.delete(child));
  child.log = '';
  return new Promise((resolve, reject) => {
    //  A program that never gets ready is killed, or it would hold the
    //  test file's process (and the suite) open
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${path.basename(file)} not ready:\n${child.log}`));
    }, timeoutMs);
    const onData = (data) => {
      child.log += data;
      const match = ready && child.log.match(ready);
      if (match) {
        clearTimeout(timer);
        ready = null;
        resolve({ child, match });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', reject);
  });
}

export async function stop(child) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await gone;
  clearTimeout(timer);
}

//  A broker on an ephemeral loopback port, with extra flags; returns
//  {child, endpoint, stateDir}. Its store is in a directory of its own
//  (removed at exit) unless extra names one: a store named after a port
//  that an earlier run's broker had would hold that broker's pins, and a
//  tool another server defined differently there would be quarantined.
const stateDirs = [];
process.on('exit', () => { for (const dir of stateDirs) fs.rmSync(dir, { recursive: true, force: true }); });

//  ['--state-dir', a new empty directory], for a broker started by hand.
export function freshStateDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-mcp-state-'));
  stateDirs.push(dir);
  return ['--state-dir', dir];
}

export async function startBroker(extra = []) {
  if (!extra.includes('--state-dir'))
    extra = [...freshStateDir(), ...extra];
  const { child, match } = await start(bin.broker, ['-e', 'tcp://127.0.0.1:*', ...extra],
    /listening on (tcp:\/\/\S+)/);
  return { child, endpoint: match[1], stateDir: extra[extra.indexOf('--state-dir') + 1] };
}

export async function startBridge(endpoint, extra = []) {
  const { child } = await start(bin.bridge, ['--broker', endpoint, '--name', 'everything', '-v', ...extra,
    '--', bin.everything], /serving \d+ tools/);
  return child;
}

function run(file, args, options = {}) {
  return new Promise((resolve) => {
    execFile(file, args, { maxBuffer: 64 * 1024 * 1024, ...options }, (error, stdout, stderr) =>
      resolve({ code: error ? error.code : 0, stdout, stderr }));
  });
}

//  The dsh CLI's exit code, stdout and stderr.
export function dsh(endpoint, ...args) {
  return run(bin.cli, ['--broker', endpoint, ...args]);
}

export async function dshTools(endpoint) {
  const { stdout } = await run(bin.cli, ['--broker', endpoint, 'tools']);
  return JSON.parse(stdout);
}

export async function dshCall(endpoint, name, args = {}, extra = []) {
  const { stdout, stderr } = await run(bin.cli, ['--broker', endpoint, 'call', name, JSON.stringify(args), ...extra]);
  if (!stdout.trim()) throw new Error(`dsh call ${name}: ${stderr}`);
  return JSON.parse(stdout);
}

//  inspector-cli 1.0.3 tests fs.existsSync("../package.json") against the
//  working directory but imports it relative to its own module: from
//  node_modules/ the test finds tests/mcp/package.json and the import its own.
export async function runInspector(args, env) {
  return run(bin.inspector, ['--cli', ...Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]), ...args],
    { cwd: path.join(here, 'node_modules') });
}

//  Every tool the MCP server behind client lists is registered with the
//  broker at endpoint under its own name, with its inputSchema as dsh's
//  parameters. Returns [server's tools, the broker's entries by name].
export async function assertBridged(client, endpoint) {
  const { tools } = await client.listTools();
  const listed = new Map((await dshTools(endpoint)).map((tool) => [tool.name, tool]));
  assert.ok(tools.length > 5);
  for (const tool of tools) {
    const entry = listed.get(tool.name);
    assert.ok(entry, `${tool.name} is registered`);
    assert.deepEqual(entry.parameters, tool.inputSchema);
  }
  return [tools, listed];
}

//  An official SDK client connected to dsh-mcp on the broker.
export async function facadeClient(endpoint, extra = []) {
  const transport = new StdioClientTransport({ command: bin.facade, args: ['--broker', endpoint, ...extra],
    stderr: 'pipe' });
  const client = new Client({ name: 'dsh-tests', version: '0.1.0' });
  await client.connect(transport);
  return client;
}

//  An official SDK client connected straight to server-everything.
export async function directClient() {
  const transport = new StdioClientTransport({ command: bin.everything, args: [], stderr: 'pipe' });
  const client = new Client({ name: 'dsh-tests', version: '0.1.0' });
  await client.connect(transport);
  return client;
}

export async function waitFor(check, { timeoutMs = 15000, what = 'condition' } = {}) {
  const giveUp = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > giveUp) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

//  dsh-mcp driven line by line, with nothing between the test and its
//  bytes: send(text) writes one raw line, request(method, params) sends a
//  request and resolves with its answer; notifications are kept in order.
export function rawFacade(args) {
  const child = spawn(bin.facade, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  children.add(child);
  child.on('exit', () => children.delete(child));
  const waiting = new Map();
  const raw = { child, notifications: [], lines: [], nextId: 1, stderr: '' };
  child.stderr.on('data', (data) => { raw.stderr += data; });
  let buffer = '';
  child.stdout.on('data', (data) => {
    buffer += data;
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      raw.lines.push(line);
      const message = JSON.parse(line);
      if (Array.isArray(message) || message.id === undefined || message.method) {
        raw.notifications.push(message);
        continue;
      }
      waiting.get(JSON.stringify(message.id))?.(message);
    }
  });
  raw.send = (text) => child.stdin.write(`${text}\n`);
  raw.answer = (id, timeoutMs = 10000) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer to id ${JSON.stringify(id)}:\n${raw.stderr}`)), timeoutMs);
    waiting.set(JSON.stringify(id), (message) => { clearTimeout(timer); resolve(message); });
  });
  raw.request = (method, params, id = raw.nextId++) => {
    const answered = raw.answer(id);
    raw.send(JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) }));
    return answered;
  };
  raw.initialize = async (protocolVersion = '2025-06-18') => {
    const answer = await raw.request('initialize', { protocolVersion, capabilities: {},
      clientInfo: { name: 'raw', version: '1' } });
    raw.send(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    return answer;
  };
  raw.close = () => stop(child);
  return raw;
}

//  True if port can be bound on loopback now.
function bindable(port) {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.once('error', () => resolve(false));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

//  The first of count consecutive TCP ports nothing listens on now, for a
//  server started later (a broker binds its front port and the next
//  three). Taken below Linux's ephemeral range (32768 up), so no outgoing
//  connection takes one meanwhile.
export async function freePort(count = 1) {
  for (let tries = 0; tries < 200; tries++) {
    const base = 20000 + Math.floor(Math.random() * (32768 - 20000 - count));
    let free = true;
    for (let port = base; free && port < base + count; port++)
      free = await bindable(port);
    if (free) return base;
  }
  throw new Error(`no ${count} free consecutive ports`);
}
