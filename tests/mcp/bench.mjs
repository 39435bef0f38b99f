//  The MCP benchmark rows: one echo call with a 64-byte message, made six
//  ways, in one run, on this machine:
//
//    (a) the official TypeScript SDK client (StdioClientTransport) straight to
//        @modelcontextprotocol/server-everything's echo
//    (b) the same client through dsh-mcp and dsh-broker (empty chain) to
//        dsh-demo's echo (a C component)
//    (c) the same client through dsh-mcp, dsh-broker and dsh-mcp-bridge
//        (--prefix ev_) to server-everything's echo, as ev_echo
//    (d) dsh's own C client (dsh-bench --drive) through dsh-broker with three
//        built-in pass stages to dsh-demo's echo
//    (e) the SDK's Streamable HTTP client straight to server-everything in
//        its streamableHttp mode
//    (f) the same HTTP client through dsh-mcp --http and dsh-broker (empty
//        chain) to dsh-demo's echo
//    (g) no dsh and no MCP: the raw ZeroMQ floor of dsh-bench --only raw, a
//        C client through a bare ROUTER/DEALER proxy to a C worker (two TCP
//        hops each way, as (b) pays between dsh-mcp and dsh-demo)
//
//  Ratios are against (a), but (f)'s, which is against (e): HTTP to HTTP.
//  (g) is what any brokered path over ZeroMQ costs on this machine before
//  it does any work: it bounds what (b) and (c) can reach.
//
//  Latency: one call in flight, p50/p99. Throughput: 64 in flight, calls/s.
//  Each is bounded by a call count and a time, whichever comes first.
//  Targets are printed, never asserted; the exit status is 1 only when a
//  figure is missing (a layout failed to start or a call failed).
//
//    DSH_BUILD_DIR=build node tests/mcp/bench.mjs [--quick] [--json]
//
//  A benchmark, not a test: meson does not run it.
import { execFile } from 'node:child_process';
import { writeFileSync, unlinkSync, mkdtempSync, rmdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { bin, buildDir, start, startBroker, stop, facadeClient, directClient, waitFor, freePort, freshStateDir } from './helpers.mjs';

const quick = process.argv.includes('--quick');
const asJson = process.argv.includes('--json');
for (const arg of process.argv.slice(2))
  if (!['--quick', '--json'].includes(arg)) {
    console.error('usage: DSH_BUILD_DIR=build node tests/mcp/bench.mjs [--quick] [--json]');
    process.exit(2);
  }

const plan = quick
  ? { warmup: 50, latencyCalls: 200, latencyMs: 2000, throughputCalls: 2000, throughputMs: 2000 }
  : { warmup: 200, latencyCalls: 2000, latencyMs: 10000, throughputCalls: 50000, throughputMs: 10000 };
const INFLIGHT = 64;
const message = 'x'.repeat(64);
const benchBin = path.join(buildDir, 'tests/bench/dsh-bench');

//  helpers.mjs kills what it started on 'exit'; make ^C and kill go through it
for (const signal of ['SIGINT', 'SIGTERM'])
  process.on(signal, () => process.exit(130));
const drives = new Set();
process.on('exit', () => { for (const child of drives) child.kill('SIGKILL'); });

const log = (text) => { if (!asJson) process.stderr.write(`bench: ${text}\n`); };

function percentile(sorted, percent) {
  if (!sorted.length) return 0;
  const index = Math.floor(sorted.length * percent / 100);
  return sorted[Math.min(index, sorted.length - 1)];
}

//  One call; throws unless it is a successful echo of our message.
async function callEcho(client, name) {
  const result = await client.callTool({ name, arguments: { message } });
  const text = result.content?.[0]?.text;
  if (result.isError || typeof text !== 'string' || !text.endsWith(message))
    throw new Error(`${name}: unexpected result ${JSON.stringify(result).slice(0, 200)}`);
}

//  Latency and throughput of one MCP client calling the tool name.
async function measureClient(client, name) {
  for (let index = 0; index < plan.warmup; index++) await callEcho(client, name);
  await Promise.all(Array.from({ length: INFLIGHT }, () => callEcho(client, name)));

  const samples = [];
  const giveUp = performance.now() + plan.latencyMs;
  while (samples.length < plan.latencyCalls && performance.now() < giveUp) {
    const started = process.hrtime.bigint();
    await callEcho(client, name);
    samples.push(Number(process.hrtime.bigint() - started) / 1000);
  }
  samples.sort((a, b) => a - b);

  let sent = 0, done = 0;
  const began = performance.now();
  const stopAt = began + plan.throughputMs;
  const worker = async () => {
    while (sent < plan.throughputCalls && performance.now() < stopAt) {
      sent++;
      await callEcho(client, name);
      done++;
    }
  };
  await Promise.all(Array.from({ length: INFLIGHT }, worker));
  const elapsed = (performance.now() - began) / 1000;
  return { p50: percentile(samples, 50), p99: percentile(samples, 99), latencyCalls: samples.length,
    callsPerS: done / elapsed, throughputCalls: done };
}

function runDrive(endpoint, args) {
  return new Promise((resolve, reject) => {
    const child = execFile(benchBin, ['--drive', endpoint, ...args], { env: { ...process.env, DSH_BUILD_DIR: buildDir } },
      (error, stdout, stderr) => {
        drives.delete(child);
        if (error) reject(new Error(`dsh-bench --drive ${args.join(' ')}: ${error.message}\n${stdout}${stderr}`));
        else resolve(stdout);
      });
    drives.add(child);
  });
}

//  (d): dsh-bench --drive at 1 and 64 in flight; its --seconds is whole seconds.
async function measureDrive(endpoint) {
  const seconds = (ms) => String(Math.max(1, Math.round(ms / 1000)));
  const latency = await runDrive(endpoint, ['--inflight', '1', '--calls', String(plan.latencyCalls),
    '--seconds', seconds(plan.latencyMs)]);
  const lat = latency.match(/latency p50 (\d+) us, p99 (\d+) us, (\d+) calls/);
  const rate = latency.match(/drive: ([\d.]+) calls\/s/);
  if (!lat || !rate) throw new Error(`dsh-bench --drive printed no latency:\n${latency}`);
  const throughput = await runDrive(endpoint, ['--inflight', String(INFLIGHT), '--calls',
    String(plan.throughputCalls), '--seconds', seconds(plan.throughputMs)]);
  const thr = throughput.match(/drive: ([\d.]+) calls\/s, (\d+) in flight, \d+ B, 0 errors/);
  if (!thr) throw new Error(`dsh-bench --drive failed:\n${throughput}`);
  return { p50: Number(lat[1]), p99: Number(lat[2]), latencyCalls: Number(lat[3]), callsPerS: Number(thr[1]),
    throughputCalls: null };
}

//  (g): dsh-bench's raw ZeroMQ floor, 64 B, one replica.
function measureFloor() {
  return new Promise((resolve, reject) => {
    const args = ['--only', 'raw', '--json', ...(quick ? ['--quick'] : [])];
    const child = execFile(benchBin, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      drives.delete(child);
      if (error) return reject(new Error(`dsh-bench ${args.join(' ')}: ${error.message}\n${stderr}`));
      const calls = JSON.parse(stdout).calls;
      const figure = (name, inflight) => calls.find((row) => row.figure === name && row.payload === 64
        && row.replicas === 1 && row.inflight === inflight)?.raw;
      const floor = { p50: figure('latency_p50_us', 1), p99: figure('latency_p99_us', 1),
        callsPerS: figure('calls_per_s', INFLIGHT), latencyCalls: null, throughputCalls: null };
      if ([floor.p50, floor.p99, floor.callsPerS].some((value) => typeof value !== 'number'))
        return reject(new Error(`dsh-bench ${args.join(' ')} printed no 64 B floor`));
      resolve(floor);
    });
    drives.add(child);
  });
}

async function startDemo(endpoint) {
  const { child } = await start(bin.demo, ['--broker', endpoint], /serving/);
  return child;
}

const everythingMain = path.join(path.dirname(bin.everything), '../@modelcontextprotocol/server-everything/dist/index.js');

async function httpClient(url) {
  const client = new Client({ name: 'dsh-bench', version: '0.1.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

async function waitListed(client, name) {
  await waitFor(async () => (await client.listTools()).tools.some((tool) => tool.name === name),
    { what: `${name} to be listed` });
}

const layouts = [
  { key: 'a', label: '(a) SDK -> server-everything', tool: 'echo',
    async run() {
      const client = await directClient();
      try {
        return await measureClient(client, 'echo');
      } finally {
        await client.close();
      }
    } },
  { key: 'b', label: '(b) SDK -> dsh-mcp -> broker -> dsh-demo', tool: 'echo',
    async run() {
      const broker = await startBroker();
      let demo, client;
      try {
        demo = await startDemo(broker.endpoint);
        client = await facadeClient(broker.endpoint);
        await waitListed(client, 'echo');
        return await measureClient(client, 'echo');
      } finally {
        await client?.close();
        await stop(demo);
        await stop(broker.child);
      }
    } },
  { key: 'c', label: '(c) SDK -> dsh-mcp -> broker -> bridge -> everything', tool: 'ev_echo',
    async run() {
      const broker = await startBroker();
      let bridge, client;
      try {
        //  Not -v: the tests' bridge logs every call
        ({ child: bridge } = await start(bin.bridge, ['--broker', broker.endpoint, '--name', 'everything',
          '--prefix', 'ev_', '--', bin.everything], /serving \d+ tools/));
        client = await facadeClient(broker.endpoint);
        await waitListed(client, 'ev_echo');
        return await measureClient(client, 'ev_echo');
      } finally {
        await client?.close();
        await stop(bridge);
        await stop(broker.child);
      }
    } },
  { key: 'd', label: '(d) dsh C client -> broker (3 pass) -> dsh-demo', tool: 'echo',
    async run() {
      //  The same three stages as dsh_bench.c's s_write_pass_config
      const dir = mkdtempSync(path.join(os.tmpdir(), 'dsh-mcp-bench-'));
      const config = path.join(dir, 'pass3.cfg');
      writeFileSync(config, '#   tests/mcp/bench.mjs: three built-in pass-through stages\nchain\n' +
        ['p1', 'p2', 'p3'].map((name) => `    stage\n        name = "${name}"\n        kind = "pass"\n`).join(''));
      let broker, demo;
      try {
        const started = await start(bin.broker, ['-e', 'tcp://127.0.0.1:*', '-c', config, ...freshStateDir()],
          /listening on (tcp:\/\/\S+)/);
        broker = { child: started.child, endpoint: started.match[1] };
        demo = await startDemo(broker.endpoint);
        return await measureDrive(broker.endpoint);
      } finally {
        await stop(demo);
        await stop(broker?.child);
        unlinkSync(config);
        rmdirSync(dir);
      }
    } },
  { key: 'e', label: '(e) SDK HTTP -> server-everything (streamableHttp)', tool: 'echo',
    async run() {
      const port = await freePort();
      const { child: server } = await start(process.execPath, [everythingMain, 'streamableHttp'], /listening on port/,
        { env: { PORT: String(port) } });
      let client;
      try {
        client = await httpClient(`http://127.0.0.1:${port}/mcp`);
        return await measureClient(client, 'echo');
      } finally {
        await client?.close();
        await stop(server);
      }
    } },
  { key: 'f', label: '(f) SDK HTTP -> dsh-mcp --http -> broker -> dsh-demo', tool: 'echo',
    async run() {
      const broker = await startBroker();
      let demo, facade, client;
      try {
        demo = await startDemo(broker.endpoint);
        let url;
        ({ child: facade, match: [, url] } = await start(bin.facade, ['--broker', broker.endpoint, '--http',
          '127.0.0.1:0'], /serving MCP over HTTP at (http:\/\/\S+\/mcp)/));
        client = await httpClient(url);
        await waitListed(client, 'echo');
        return await measureClient(client, 'echo');
      } finally {
        await client?.close();
        await stop(facade);
        await stop(demo);
        await stop(broker.child);
      }
    } },
  { key: 'g', label: '(g) raw ZeroMQ floor: C client -> ROUTER/DEALER proxy -> C worker', tool: '-',
    run: measureFloor },
];
const base = { b: 'a', c: 'a', d: 'a', e: 'a', f: 'e', g: 'a' };

const results = {};
const failures = [];
for (const layout of layouts) {
  log(`${layout.label} ...`);
  try {
    results[layout.key] = await layout.run();
  } catch (error) {
    failures.push(`${layout.key}: ${error.message}`);
    console.error(`bench: ${layout.label} failed: ${error.message}`);
  }
}

const a = results.a;
const ratio = (value, of) => (value && of ? value / of : null);
const against = (key, field) => ratio(results[key]?.[field], results[base[key]]?.[field]);
const targets = [
  { target: '(b) p50 <= 1.5x (a)', value: against('b', 'p50'), limit: 1.5, atMost: true },
  { target: '(b) calls/s >= 1x (a)', value: against('b', 'callsPerS'), limit: 1, atMost: false },
  { target: '(c) p50 <= 2.5x (a)', value: against('c', 'p50'), limit: 2.5, atMost: true },
  { target: '(d) p50 <= (a) p50', value: against('d', 'p50'), limit: 1, atMost: true },
  { target: '(d) calls/s >= 2x (a)', value: against('d', 'callsPerS'), limit: 2, atMost: false },
  { target: '(f) p50 <= 1.5x (e)', value: against('f', 'p50'), limit: 1.5, atMost: true },
  { target: '(f) calls/s >= 1x (e)', value: against('f', 'callsPerS'), limit: 1, atMost: false },
].map((row) => ({ ...row, met: row.value === null ? null : row.atMost ? row.value <= row.limit : row.value >= row.limit }));

function machine() {
  const model = (readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) || [])[1] || 'unknown';
  return { nproc: os.cpus().length, model, loadavg: os.loadavg().map((v) => Number(v.toFixed(2))),
    node: process.version };
}

if (asJson) {
  console.log(JSON.stringify({ machine: machine(), quick, plan: { ...plan, inflight: INFLIGHT, messageBytes: 64 },
    layouts: Object.fromEntries(layouts.map((l) => [l.key, { label: l.label, tool: l.tool, ...(results[l.key] || {}) }])),
    ratios: Object.fromEntries(Object.keys(base).map((key) => [key, { against: base[key],
      p50: against(key, 'p50'), p99: against(key, 'p99'), callsPerS: against(key, 'callsPerS') }])),
    targets, failures }, null, 2));
} else {
  const m = machine();
  const cols = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
  const fmt = (value, digits = 1) => (value === undefined || value === null ? '-' : value.toFixed(digits));
  const line = (label, cells) => label.padEnd(22) + cells.map((cell) => cell.padStart(10)).join('');
  console.log(`MCP rows: 64 B echo, ${quick ? '--quick' : 'full'} (latency: 1 in flight, up to ${plan.latencyCalls} ` +
    `calls or ${plan.latencyMs / 1000} s; throughput: ${INFLIGHT} in flight, up to ${plan.throughputCalls} calls or ` +
    `${plan.throughputMs / 1000} s)`);
  console.log(`machine: ${m.nproc} x ${m.model}, load ${m.loadavg.join(' ')}, node ${m.node}`);
  console.log();
  for (const layout of layouts) console.log(`  ${layout.label}`);
  console.log('  ratios against (a), (f) against (e); (g) bounds what (b) and (c) can reach');
  console.log();
  const header = [];
  for (const key of cols) header.push(`(${key})`, key === 'a' ? '' : 'ratio');
  console.log(line('figure', header.filter((cell, index) => index !== 1)));
  const row = (label, field, digits) => {
    const cells = [];
    for (const key of cols) {
      cells.push(fmt(results[key]?.[field], digits));
      if (key !== 'a') {
        const r = against(key, field);
        cells.push(r === null ? '-' : `${r.toFixed(2)}x`);
      }
    }
    console.log(line(label, cells));
  };
  row('latency p50 us', 'p50', 0);
  row('latency p99 us', 'p99', 0);
  row(`calls/s ${INFLIGHT} in flight`, 'callsPerS', 1);
  console.log();
  console.log('targets (reported, not asserted):');
  for (const t of targets)
    console.log(`  ${t.target.padEnd(26)} ${t.value === null ? '-' : t.value.toFixed(2) + 'x'}`.padEnd(40) +
      (t.met === null ? 'not measured' : t.met ? 'met' : 'missed'));
  const floor = results.g;
  if (a && floor)
    console.log(`  (b)'s p50 target is ${(1.5 * a.p50).toFixed(0)} us and (c)'s ${(2.5 * a.p50).toFixed(0)} us; ` +
      `the raw ZeroMQ floor (g), with no dsh or MCP work, is ${floor.p50.toFixed(0)} us`);
  if (failures.length) console.log(`\nfailures:\n  ${failures.join('\n  ')}`);
}
process.exit(failures.length ? 1 : 0);
