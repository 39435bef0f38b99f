//  The page in a real browser (headless Chromium, driven by
//  playwright-core): it follows a second component coming and going and
//  counters moving with calls, all without a reload, shows a pending
//  approval, and leaves a screenshot in the build directory for a reviewer;
//  its latest calls come from the broker's audit trail, narrowed by its
//  filters, with hostile names shown as text, and say so when the
//  monitor's key may not read them. The operator's panels: 15 minutes of
//  charts kept by the monitor (a reload shows them again), agents with a
//  rate-limited call, errors by code, the latest failed calls with their
//  trace ids and audit links, component details and the broker's figures,
//  pictured in monitor-screenshot.png in the build directory.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from '../mcp/node_modules/playwright-core/index.mjs';
import { waitFor, dshCall } from '../mcp/helpers.mjs';
import { stop, startBroker, brokerPort, startDemo, startMonitor, freePort, buildDir, bin } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const chainConfig = path.join(here, '../../deploy/dsh-broker.cfg');
const browserPath = process.env.DSH_CHROMIUM || '/usr/bin/chromium';
const screenshot = path.join(buildDir, 'tests/monitor/dsh-monitor.png');
//  The operator's panels (history, agents, errors, failed calls, details)
const panelsScreenshot = path.join(buildDir, 'monitor-screenshot.png');

let broker, demo, monitor, browser;
//  The broker traces every call (to a collector that is not there: its
//  spans are dropped), so that each audit record has its traceId
let tracing;

//  One model turn's calls through the CLI (read-only ones run in parallel).
function batch(calls) {
  return new Promise((resolve, reject) => {
    const child = execFile(bin.cli, ['--broker', broker.endpoint, 'call', '--batch', '-'], (error, stdout) =>
      error ? reject(error) : resolve(JSON.parse(stdout)));
    child.stdin.end(JSON.stringify(calls));
  });
}

before(async () => {
  //  The main job's chain, so that the page has stages and an approval to show
  tracing = { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await freePort()}`, OTEL_TRACES_SAMPLER: 'always_on' };
  broker = await startBroker(await brokerPort(), ['-c', chainConfig], tracing);
  demo = await startDemo(broker.endpoint, 'demo');
  //  A history sample every half second, so that the charts fill in a test's time
  monitor = await startMonitor(broker.endpoint, ['--poll-ms', '250', '--history-step-ms', '500']);
  browser = await chromium.launch({ executablePath: browserPath });
});

after(async () => {
  await browser?.close();
  await stop(monitor?.child);
  await stop(demo);
  await stop(broker?.child);
});

test('the page follows the swarm live, without a reload', { skip: !fs.existsSync(browserPath) && 'no chromium' }, async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const problems = [];
  page.on('pageerror', (error) => problems.push(error.message));
  page.on('console', (message) => { if (message.type() === 'error') problems.push(message.text()); });
  await page.goto(monitor.url + '/');
  await page.waitForSelector('[data-component="demo"]');
  await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red');
  //  Survives only as long as the document does
  await page.evaluate(() => { window.dshMarker = 'still here'; });

  //  A second component comes, then goes
  const other = await startDemo(broker.endpoint, 'demo-2', ['--prefix', 'b_']);
  await page.waitForSelector('[data-component="demo-2"] [data-tool="b_echo"]');
  await page.waitForSelector('#events li[data-kind="component.joined"]');
  await stop(other);
  await page.waitForSelector('[data-component="demo-2"]', { state: 'detached' });
  await page.waitForSelector('#events li[data-kind="component.left"]');

  //  Calls move the counters, where the broker keeps statistics
  const calls = [];
  for (let index = 0; index < 24; index++)
    calls.push({ name: 'echo', arguments: { message: `hello ${index}` } });
  for (let index = 0; index < 6; index++)
    calls.push({ name: 'sleep_ms', arguments: { ms: 5 + 10 * index } });
  await batch(calls);
  await dshCall(broker.endpoint, 'fail', { message: 'on purpose' });
  const hasStats = await page.evaluate(() => !document.getElementById('calls-note').textContent.includes('no STATS'));
  if (hasStats) {
    await page.waitForFunction(() => Number(document.querySelector('tr[data-tool="echo"] [data-calls]')?.dataset.calls) >= 24);
    await page.waitForFunction(() => Number(document.querySelector('tr[data-tool="fail"] [data-errors]')?.dataset.errors) >= 1);
  }

  //  A call that needs a human waits on the permission stage while an
  //  approver is there to ask
  const approver = spawn(bin.cli, ['--broker', broker.endpoint, 'approver'], { stdio: ['pipe', 'pipe', 'pipe'] });
  try {
    await waitFor(async () => {
      const pending = spawn(bin.cli, ['--broker', broker.endpoint, 'call', 'tick', '{"ms":1}', '--timeout-ms', '30000'],
        { stdio: 'ignore' });
      pending.unref();
      try {
        await page.waitForSelector('[data-pending]', { timeout: 3000 });
        return true;
      } catch { return false; }
    }, { what: 'a pending approval on the page', timeoutMs: 15000 });
    const tickCell = await page.textContent('#pending [data-pending] [data-field="tool"]');
    assert.equal(tickCell, 'tick');
    //  Let the counters of a poll or two settle, then the picture
    await page.waitForTimeout(600);
    fs.mkdirSync(path.dirname(screenshot), { recursive: true });
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`screenshot: ${screenshot}`);
  } finally {
    approver.kill('SIGTERM');
  }
  assert.equal(await page.evaluate(() => window.dshMarker), 'still here', 'the page was never reloaded');
  assert.deepEqual(problems, []);
});

//  Runs calls (a JSON array of {name, arguments}) as one batch of agent's;
//  some may fail (the batch's exit 1): their results are what counts.
function batchAs(agent, calls) {
  return new Promise((resolve) => {
    const child = execFile(bin.cli, ['--broker', broker.endpoint, 'call', '--batch', '-', '--agent', agent],
      { maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
        try { resolve(JSON.parse(stdout)); } catch { console.log(`dsh call --batch: ${stderr}`); resolve([]); }
      });
    child.stdin.end(JSON.stringify(calls));
  });
}

test('the operator\'s panels: 15 minutes of charts that outlive a reload, agents with a rate-limited call, errors by code, the latest failed calls with their trace ids, component details, the broker\'s figures', { skip: !fs.existsSync(browserPath) && 'no chromium' }, async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const problems = [];
  page.on('pageerror', (error) => problems.push(error.message));
  page.on('console', (message) => { if (message.type() === 'error') problems.push(message.text()); });
  await page.goto(monitor.url + '/');
  await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red');
  const hasStats = await page.evaluate(() => !document.getElementById('calls-note').textContent.includes('no STATS'));
  if (!hasStats) return;

  //  A runaway loop: more calls than its quota (`dsh limit`, at run time:
  //  a burst of 20 and one call a second, however fast the machine), so
  //  that some are RATE_LIMITED; and calls that fail, so that there are
  //  errors to chart
  await new Promise((resolve, reject) => execFile(bin.cli, ['--broker', broker.endpoint, 'limit', 'set', 'runaway-*', '*',
    '--rate', '1', '--burst', '20'], (error) => (error ? reject(error) : resolve())));
  const loop = [];
  for (let index = 0; index < 160; index++) loop.push({ name: 'echo', arguments: { message: `loop ${index}` } });
  let limited = [], results = [];
  for (let attempt = 0; attempt < 3 && !limited.length; attempt++) {
    results = await batchAs('runaway-1', loop);
    limited = results.filter((result) => result.isError && result.error && result.error.code === 'RATE_LIMITED');
  }
  assert.ok(limited.length > 0, `the limit stage answered RATE_LIMITED to some of the loop's calls: ${results.length} results, `
    + JSON.stringify(results.find((result) => result.isError) || null));
  for (let index = 0; index < 3; index++)
    await dshCall(broker.endpoint, 'fail', { message: 'on purpose' }, ['--agent', 'failer-1']).catch(() => {});
  await batch([{ name: 'sleep_ms', arguments: { ms: 20 } }, { name: 'echo', arguments: { message: 'x' } }]);

  //  The agents panel: the loop's agent, with its rate-limited calls
  const agentCell = (agent, field) => page.evaluate(([agent, field]) => {
    const row = [...document.querySelectorAll('#agents tbody tr[data-agent]')].find((tr) => tr.dataset.agent === agent);
    const cell = row && row.querySelector(`[data-field="${field}"]`);
    return cell ? Number(cell.dataset.value) : null;
  }, [agent, field]);
  //  (the page shows each poll: one after the last of these calls)
  await waitFor(async () => (await agentCell('runaway-1', 'rateLimited')) >= limited.length
    && (await agentCell('failer-1', 'errors')) >= 3, { what: 'the agents panel showing the rate-limited and failed calls' });
  assert.ok((await agentCell('runaway-1', 'calls')) >= 160);
  assert.ok((await agentCell('runaway-1', 'errors')) >= limited.length);
  assert.equal(await agentCell('runaway-1', 'inFlight'), 0);
  assert.equal(await agentCell('runaway-1', 'denied'), 0);
  assert.ok((await agentCell('failer-1', 'errors')) >= 3);

  //  Errors by code: RATE_LIMITED and TOOL_FAILED among them
  const codeTotal = (code) => page.evaluate((code) =>
    Number(document.querySelector(`#errors tr[data-code="${code}"] [data-total]`)?.dataset.total || 0), code);
  await waitFor(async () => (await codeTotal('RATE_LIMITED')) >= limited.length && (await codeTotal('TOOL_FAILED')) >= 3,
    { what: 'RATE_LIMITED and TOOL_FAILED among the errors by code' });

  //  The latest failed calls, from the audit trail: the failed call with
  //  its trace id where the record has one, and a link to its record
  await page.waitForSelector('#failed tbody tr[data-outcome="TOOL_FAILED"]');
  await page.waitForSelector('#failed tbody tr[data-outcome="RATE_LIMITED"]');
  const failedRow = page.locator('#failed tbody tr[data-outcome="TOOL_FAILED"]').first();
  const callId = await failedRow.getAttribute('data-call-id');
  assert.match(callId, /\S/);
  const href = await failedRow.locator('[data-field="audit-link"]').getAttribute('href');
  assert.equal(href, `/api/audit?callId=${encodeURIComponent(callId)}&limit=1`);
  const linked = await (await fetch(monitor.url + href)).json();
  assert.equal(linked.ok, true);
  assert.equal(linked.records.length, 1);
  assert.equal(linked.records[0].record.callId, callId);
  assert.equal(linked.records[0].record.outcome, 'TOOL_FAILED');
  const traceCell = await failedRow.locator('[data-field="trace-id"]').textContent();
  assert.match(traceCell, /^[0-9a-f]{32}$/);
  assert.equal(traceCell, linked.records[0].record.traceId);
  const limitedTrace = await page.locator('#failed tbody tr[data-outcome="RATE_LIMITED"] [data-field="trace-id"]').first().textContent();
  assert.match(limitedTrace, /^[0-9a-f]{32}$/);
  assert.notEqual(limitedTrace, traceCell, 'each call its own trace');

  //  Component details, as the demo's ANNOUNCE said them and the broker counts
  const details = page.locator('[data-component="demo"] [data-field="details"]');
  await details.locator('[data-detail="version"]').waitFor();
  assert.match(await details.locator('[data-detail="host"] b').textContent(), new RegExp(`^${os.hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));
  assert.match(await details.locator('[data-detail="pid"] b').textContent(), /^[1-9]\d*$/);
  assert.equal(await details.locator('[data-detail="pid"] b').textContent(), String(demo.pid));
  assert.match(await details.locator('[data-detail="workers"] b').textContent(), /^[1-9]\d*$/);
  assert.match(await details.locator('[data-detail="queued"] b').textContent(), /^\d+$/);
  assert.match(await details.locator('[data-detail="uptime"] b').textContent(), /\d (s|min|h)/);
  assert.match(await details.locator('[data-detail="version"] b').textContent(), /^dsh-c\/\d+\.\d+\.\d+$/);

  //  The broker's own figures
  const figure = (name) => page.getAttribute(`[data-figure="${name}"]`, 'data-value');
  assert.ok(Number(await figure('rss')) > 1 << 20, 'an RSS of more than a MiB');
  assert.ok(Number(await figure('connections')) >= 1, 'the demo\'s WORK connection');
  assert.match(await figure('queued'), /^\d+$/);
  assert.match(await figure('queueBytes'), /^\d+$/);
  assert.match(await page.textContent('[data-figure="rss"] b'), /MiB|GiB/);

  //  The charts: drawn, in total and for the busiest tools, with points
  const points = (metric) => page.evaluate((metric) => Number(document.getElementById('chart-' + metric).dataset.points), metric);
  await waitFor(async () => (await page.evaluate(() => {
    const svg = document.getElementById('chart-calls');
    return [...svg.querySelectorAll('path[data-series="total"]')].some((p) => /L/.test(p.getAttribute('d')))
      && Number(document.getElementById('chart-errors').dataset.max) > 1;
  })), { what: 'the calls chart with a line and the errors chart with its errors' });
  assert.ok(await points('calls') >= 2);
  assert.ok(await points('errors') >= 2);
  assert.ok(await points('p99Ms') >= 1, 'a p99 where calls ended');
  assert.ok(await page.locator('#chart-calls path[data-tool="echo"]').count() === 1, 'echo is among the busiest tools');
  assert.match(await page.textContent('#history-legend'), /all tools/);
  //  One tool chosen: the total and that tool's line
  await page.selectOption('#history-tool', 'fail');
  assert.equal(await page.locator('#chart-errors path[data-series="tool"]').count(), 1);
  assert.equal(await page.getAttribute('#chart-errors path[data-series="tool"]', 'data-tool'), 'fail');
  await page.selectOption('#history-tool', '');

  //  What the monitor keeps: /api/history, and the same charts after a reload
  const history = await (await fetch(monitor.url + '/api/history')).json();
  assert.equal(history.stepMs, 500);
  assert.equal(history.kept, 180);
  assert.ok(history.samples.length >= 2);
  const busiest = history.samples.reduce((best, sample) => (sample.calls > best.calls ? sample : best));
  assert.ok(busiest.calls > 0 && busiest.tools.echo && busiest.tools.echo.calls > 0);
  assert.ok(history.samples.some((sample) => sample.errors > 0));
  const before = await points('calls');
  fs.mkdirSync(path.dirname(panelsScreenshot), { recursive: true });
  await page.screenshot({ path: panelsScreenshot, fullPage: true });
  console.log(`screenshot: ${panelsScreenshot}`);
  await page.reload();
  await page.waitForFunction((before) => Number(document.getElementById('chart-calls').dataset.points) >= before, before,
    { timeout: 5000 });
  assert.deepEqual(problems, []);
});

//  The rows of the latest-calls table as [time, tool, agent, outcome,
//  duration, approved by, callId], as text.
function auditRows(page) {
  return page.evaluate(() => [...document.querySelectorAll('#audit tbody tr[data-seq]')]
    .map((row) => [...row.children].map((cell) => cell.textContent)));
}

test('the latest calls: a call through the broker shows with its tool, agent, outcome and approver; the filters narrow it; hostile names stay text', { skip: !fs.existsSync(browserPath) && 'no chromium' }, async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const problems = [];
  page.on('pageerror', (error) => problems.push(error.message));
  const asked = [];
  page.on('request', (request) => { if (request.url().includes('/api/audit')) asked.push(request.url()); });
  await page.goto(monitor.url + '/');
  await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red');
  await page.evaluate(() => { window.dshMarker = 'still here'; });

  const hostileTool = '<script>window.dshPwned = "tool"</script>';
  const hostileAgent = '<img src=x onerror="window.dshPwned = \'agent\'">';
  await dshCall(broker.endpoint, 'echo', { message: 'seen' }, ['--agent', 'viewer-1']);
  await dshCall(broker.endpoint, 'fail', { message: 'on purpose' }, ['--agent', 'viewer-1']);
  await dshCall(broker.endpoint, hostileTool, {}, ['--agent', hostileAgent]).catch(() => {});
  //  A call a human approved (an approver that allows each one): who did
  const approver = spawn(bin.cli, ['--broker', broker.endpoint, 'approver', '--auto', 'allow'], { stdio: 'ignore' });
  try {
    await waitFor(async () => {
      const result = await dshCall(broker.endpoint, 'tick', { ms: 1 }, ['--agent', 'viewer-2', '--timeout-ms', '10000'])
        .catch(() => null);
      return result && !result.isError;
    }, { what: 'a tick call approved', timeoutMs: 20000 });
  } finally {
    approver.kill('SIGTERM');
  }

  //  Without a reload: the table follows the polls
  const findRow = (rows, tool, agent) => rows.find((row) => row[1] === tool && row[2] === agent);
  //  The approved tick: ticks refused before the approver was heard are
  //  rows too, and the approved one's record may land a moment after them
  const approvedTick = (rows) => rows.find((row) => row[1] === 'tick' && row[2] === 'viewer-2' && row[3] === 'ok');
  const rows = await waitFor(async () => {
    const now = await auditRows(page);
    return findRow(now, hostileTool, hostileAgent) && approvedTick(now) ? now : null;
  }, { what: 'the calls in the latest-calls table' });
  const echoRow = findRow(rows, 'echo', 'viewer-1');
  assert.equal(echoRow[3], 'ok');
  assert.match(echoRow[0], /^\d\d:\d\d:\d\d$/);
  assert.match(echoRow[4], /\d (ms|s)$/);
  assert.equal(echoRow[5], '-');
  assert.match(echoRow[6], /\S/);
  assert.equal(findRow(rows, 'fail', 'viewer-1')[3], 'TOOL_FAILED');
  assert.equal(findRow(rows, hostileTool, hostileAgent)[3], 'UNKNOWN_TOOL');
  assert.match(approvedTick(rows)[5], /127\.0\.0\.1/);
  //  The hostile names are text: nothing of them ran or became an element
  assert.equal(await page.evaluate(() => window.dshPwned), undefined);
  assert.equal(await page.locator('#audit script, #audit img').count(), 0);
  assert.match(await page.evaluate(() => document.querySelector('#audit tbody').innerHTML), /&lt;script&gt;window\.dshPwned/);

  //  The filters go to the broker: only what they match comes back
  await page.fill('#audit-agent', 'viewer-1');
  await waitFor(async () => {
    const now = await auditRows(page);
    return now.length === 2 && now.every((row) => row[2] === 'viewer-1');
  }, { what: "the table narrowed to viewer-1's calls" });
  await page.fill('#audit-outcome', 'TOOL_FAILED');
  await waitFor(async () => {
    const now = await auditRows(page);
    return now.length === 1 && now[0][1] === 'fail';
  }, { what: "the table narrowed to viewer-1's failed call" });
  assert.ok(asked.some((url) => new URL(url).search.includes('agent=viewer-1&outcome=TOOL_FAILED')), asked.join('\n'));
  await page.fill('#audit-tool', 'echo');
  await page.waitForSelector('#audit tbody td.empty');
  assert.match(await page.textContent('#audit tbody'), /No call matches these filters/);
  //  A filter the monitor refuses is said, and the page goes on
  await page.fill('#audit-outcome', 'not an outcome');
  await page.waitForFunction(() => document.getElementById('audit-status').dataset.state === 'bad');
  assert.match(await page.textContent('#audit-status'), /outcome is "ok" or an error code/);
  for (const id of ['#audit-agent', '#audit-tool', '#audit-outcome']) await page.fill(id, '');
  await page.waitForFunction(() => document.getElementById('audit-status').dataset.state === 'ok');
  //  A new call shows at a later poll
  await dshCall(broker.endpoint, 'echo', { message: 'later' }, ['--agent', 'viewer-3']);
  await waitFor(async () => findRow(await auditRows(page), 'echo', 'viewer-3'), { what: 'a later call in the table' });
  assert.equal(await page.evaluate(() => window.dshMarker), 'still here', 'the page was never reloaded');
  assert.deepEqual(problems, []);
});

test('under CURVE with a key that may not read the audit, the latest calls say the broker refused, and the page works on', { skip: !fs.existsSync(browserPath) && 'no chromium' }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-monitor-browser-'));
  const keygen = (name, role) => {
    const file = path.join(dir, `${name}.cert`);
    const made = spawnSync(bin.cli, ['keygen', file, '--role', role, '--name', name], { encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
    return file;
  };
  const brokerCert = keygen('broker', 'admin');
  const monitorCert = keygen('monitor', 'approver');
  fs.mkdirSync(path.join(dir, 'allow'));
  fs.copyFileSync(monitorCert, path.join(dir, 'allow', 'monitor.cert'));
  fs.writeFileSync(path.join(dir, 'token'), 'browser-token\n', { mode: 0o600 });
  const curveBroker = await startBroker(await brokerPort(), ['--cert', brokerCert, '--allow', path.join(dir, 'allow')]);
  let curveMonitor;
  try {
    curveMonitor = await startMonitor(curveBroker.endpoint, ['--cert', monitorCert, '--broker-cert', brokerCert,
      '--token-file', path.join(dir, 'token')]);
    const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
    const problems = [];
    page.on('pageerror', (error) => problems.push(error.message));
    await page.goto(curveMonitor.url + '/?token=browser-token');
    await page.waitForFunction(() => document.getElementById('audit-status').dataset.state === 'refused', null,
      { timeout: 15000 });
    assert.match(await page.textContent('#audit-status'),
      /^The broker refused \(FORBIDDEN\): .*needs an admin or auditor key/);
    assert.match(await page.textContent('#audit tbody'), /cannot be shown/);
    //  The rest of the page is served as ever
    await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red');
    assert.deepEqual(problems, []);
  } finally {
    await stop(curveMonitor?.child);
    await stop(curveBroker.child);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a broker that goes away turns the page red with a banner, keeps the last known state, and it recovers', { skip: !fs.existsSync(browserPath) && 'no chromium' }, async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  await page.goto(monitor.url + '/');
  await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red');
  await page.waitForSelector('#chain [data-stage]');
  await page.waitForSelector('[data-component="demo"] .dot');
  await page.evaluate(() => { window.dshMarker = 'still here'; });
  const stages = await page.locator('#chain [data-stage]').count();
  const echoCalls = async () => Number(await page.getAttribute('tr[data-tool="echo"] [data-calls]', 'data-calls'));
  const callsBefore = await echoCalls();
  const port = broker.endpoint.split(':').pop();
  await stop(broker.child);
  await page.waitForFunction(() => document.getElementById('health').dataset.state === 'red', null, { timeout: 15000 });
  assert.match(await page.textContent('#down'), /Broker unreachable/);
  assert.match(await page.textContent('#down'), /last known state, as the broker answered at \d\d:\d\d:\d\d/);
  assert.ok(await page.isVisible('#down'));
  //  What the broker last said stays, marked as last known: not "No
  //  stages", no zeroed counters, no green dots
  assert.equal(await page.locator('#chain [data-stage]').count(), stages, 'the chain is kept');
  assert.match(await page.textContent('#chain-stale'), /^last known \d\d:\d\d:\d\d$/);
  assert.match(await page.textContent('#pending-stale'), /^last known /);
  assert.equal(await echoCalls(), callsBefore, 'the counters are kept');
  if (await page.locator('[data-component="demo"]').count())
    assert.match(await page.getAttribute('[data-component="demo"] .dot', 'class'), /\bunknown\b/);
  broker = await startBroker(Number(port), ['-c', chainConfig], tracing);
  await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red', null, { timeout: 20000 });
  assert.ok(!(await page.isVisible('#down')));
  assert.equal(await page.textContent('#chain-stale'), '');
  await page.waitForSelector('[data-component="demo"]', { timeout: 15000 });
  assert.equal(await page.evaluate(() => window.dshMarker), 'still here');
});
