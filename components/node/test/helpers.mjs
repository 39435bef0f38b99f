//  Plumbing for the package's tests: real dsh programs from the C build
//  ($DSH_BUILD_DIR, default ../../build), started on loopback, and killed
//  when the test file's process exits.
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const buildDir = path.resolve(process.env.DSH_BUILD_DIR || path.join(here, '../../../build'));
export const bin = {
  broker: path.join(buildDir, 'broker/dsh-broker'),
  demo: path.join(buildDir, 'components/demo/dsh-demo'),
  cli: path.join(buildDir, 'components/cli/dsh'),
};
export const fixtures = path.join(here, 'fixtures');

const children = new Set();
process.on('exit', () => { for (const child of children) child.kill('SIGKILL'); });
//  Each broker's store in a directory of its own (startBroker), unless its
//  flags name one: a store named after a port an earlier run's broker had
//  would hold that broker's pins, and a tool defined differently there
//  would be quarantined. Removed here, before the exit below.
const stateDirs = [];
process.on('exit', () => { for (const dir of stateDirs) rmSync(dir, { recursive: true, force: true }); });
//  Then out at once, with the code the test runner set. A natural exit goes
//  on to free the environment (FreeEnvironment), where Node 20.20 ran the
//  Node-API finalizers still queued for zeromq's collected sockets and
//  once in about 300 runs of curve.test.mjs died there with SIGSEGV
//  (node_napi_env__::DrainFinalizerQueue, from RunCleanup; every test had
//  passed, and the file failed). process.exit() inside 'exit' is C exit():
//  no environment teardown. Every socket is closed by then; nothing of
//  ours runs at teardown.
process.on('exit', (code) => process.exit(code));

//  Starts a program; resolves with the child once a line of its output
//  matches ready (match in child.match).
export function start(file, args, ready, { timeoutMs = 15000 } = {}) {
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.on('exit', () => children.delete(child));
  child.log = '';
  return new Promise((resolve, reject) => {
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
        child.match = match;
        resolve(child);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', reject);
  });
}

export async function stop(child, signal = 'SIGTERM') {
  if (!child || child.exitCode !== null || child.signalCode !== null)
    return;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await gone;
  clearTimeout(timer);
}

function portFree(port) {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

//  A base port in 20000-32767 with it and the next three free (a broker
//  binds four), for tests that restart a broker on the same endpoint.
export async function freePorts() {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20000 + Math.floor(Math.random() * (32767 - 20000 - 4));
    const free = await Promise.all([0, 1, 2, 3].map((offset) => portFree(base + offset)));
    if (free.every(Boolean))
      return base;
  }
  throw new Error('no four free ports in a row');
}

//  Every socket of a broker on a random port of czmq's dynamic range ("!"),
//  as the C tests' brokers: "*" takes the lowest free port, so a broker
//  would often get the ports of a broker that a suite running beside this
//  one had just stopped, and that broker's components, still
//  reconnecting, would join this swarm.
const RANDOM_PORTS = ['--announce', 'tcp://127.0.0.1:!', '--work', 'tcp://127.0.0.1:!',
  '--events', 'tcp://127.0.0.1:!'];

//  A broker on endpoint (default: random ports) with extra flags; resolves
//  with the child, its front endpoint in child.endpoint.
export async function startBroker(endpoint = 'tcp://127.0.0.1:!', extra = []) {
  const random = endpoint.endsWith(':!') ? RANDOM_PORTS : [];
  if (!extra.includes('--state-dir')) {
    stateDirs.push(mkdtempSync(path.join(os.tmpdir(), 'dsh-node-state-')));
    extra = ['--state-dir', stateDirs.at(-1), ...extra];
  }
  const child = await start(bin.broker, ['-e', endpoint, ...random, ...extra], /listening on (tcp:\/\/\S+)/);
  child.endpoint = child.match[1];
  return child;
}

export async function startDemo(endpoint, extra = []) {
  return start(bin.demo, ['--broker', endpoint, ...extra], /serving|ready|announced|tools/);
}

export function run(file, args, env = process.env) {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 20000, env }, (error, stdout, stderr) =>
      resolve({ code: error ? error.code : 0, stdout, stderr }));
  });
}

export async function dshTools(endpoint) {
  const { stdout } = await run(bin.cli, ['--broker', endpoint, 'tools']);
  return JSON.parse(stdout).map((tool) => tool.name);
}

export async function dshCall(endpoint, name, args = {}) {
  const { stdout, stderr, code } = await run(bin.cli, ['--broker', endpoint, 'call', name, JSON.stringify(args)]);
  if (!stdout.trim())
    throw new Error(`dsh call ${name} (exit ${code}): ${stderr}`);
  return JSON.parse(stdout);
}

//  Polls check() every 50 ms until it returns a truthy value; fails after
//  timeoutMs with what.
export async function until(check, what, timeoutMs = 10000) {
  const started = Date.now();
  for (;;) {
    const value = await check();
    if (value)
      return value;
    if (Date.now() - started > timeoutMs)
      throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export function text(result) {
  return result.content.filter((block) => block.type === 'text').map((block) => block.text).join('\n');
}
