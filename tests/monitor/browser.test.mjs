//  The page in a real browser (headless Chromium, driven by
//  playwright-core): it follows a second component coming and going and
//  counters moving with calls, all without a reload, shows a pending
//  approval, and leaves a screenshot in the build directory for a reviewer;
//  its latest calls come from the broker's audit trail, narrowed by its
//  filters, with hostile names shown as text, and say so when the
//  monitor's key may not read them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from '../mcp/node_modules/playwright-core/index.mjs';
import { waitFor, dshCall } from '../mcp/helpers.mjs';
import { stop, startBroker, brokerPort, startDemo, startMonitor, buildDir, bin } from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const chainConfig = path.join(here, '../../deploy/dsh-broker.cfg');
const browserPath = process.env.DSH_CHROMIUM || '/usr/bin/chromium';
const screenshot = path.join(buildDir, 'tests/monitor/dsh-monitor.png');

let broker, demo, monitor, browser;

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
  broker = await startBroker(await brokerPort(), ['-c', chainConfig]);
  demo = await startDemo(broker.endpoint, 'demo');
  monitor = await startMonitor(broker.endpoint, ['--poll-ms', '250']);
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
  broker = await startBroker(Number(port), ['-c', chainConfig]);
  await page.waitForFunction(() => document.getElementById('health').dataset.state !== 'red', null, { timeout: 20000 });
  assert.ok(!(await page.isVisible('#down')));
  assert.equal(await page.textContent('#chain-stale'), '');
  await page.waitForSelector('[data-component="demo"]', { timeout: 15000 });
  assert.equal(await page.evaluate(() => window.dshMarker), 'still here');
});
