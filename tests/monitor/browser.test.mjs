//  The page in a real browser (headless Chromium, driven by
//  playwright-core): it follows a second component coming and going and
//  counters moving with calls, all without a reload, shows a pending
//  approval, and leaves a screenshot in the build directory for a reviewer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
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
    const tickCell = await page.textContent('#pending [data-pending] td:nth-child(2)');
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
