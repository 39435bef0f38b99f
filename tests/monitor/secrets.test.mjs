//  What dsh-monitor shows a viewer that did not present its token: a
//  monitor that follows a CURVE broker needs a token, even on loopback,
//  and refuses /api/stats without it; a plain loopback monitor without a
//  token serves the stats but no call's arguments; with a token, the
//  pending approvals' argument previews are there. And what its key may
//  read: the latest calls need an admin or auditor key, else /api/audit
//  says the broker refused.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../mcp/helpers.mjs';
import { stop, startBroker, brokerPort, startDemo, startMonitor, openEvents, getJson, monitorBin, bin }
  from './helpers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const chainConfig = path.join(here, '../../deploy/dsh-broker.cfg');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-monitor-secrets-'));
const tokenFile = path.join(dir, 'token');
fs.writeFileSync(tokenFile, 'the-monitor-token\n', { mode: 0o600 });
const bearer = { Authorization: 'Bearer the-monitor-token' };
const MARKER = 4242;
//  The argument as any JSON around it would carry it ("ms":4242, or
//  \"ms\":4242 inside a string): the bare digits also turn up in
//  millisecond timestamps (1796145424256)
const LEAK = new RegExp(`ms\\\\*"\\s*:\\s*${MARKER}\\b`);

const children = [];
after(async () => {
  for (const child of children.reverse()) await stop(child);
  fs.rmSync(dir, { recursive: true, force: true });
});

function keygen(name, role, extra = []) {
  const file = path.join(dir, `${name}.cert`);
  const made = spawnSync(bin.cli, ['keygen', file, '--role', role, '--name', name, ...extra], { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
  return file;
}

test('following a CURVE broker: no start without a token, and /api/stats needs it', async () => {
  const brokerCert = keygen('broker', 'admin');
  const monitorCert = keygen('monitor', 'approver');
  const auditorCert = keygen('auditor', 'auditor');
  fs.mkdirSync(path.join(dir, 'allow'));
  fs.copyFileSync(monitorCert, path.join(dir, 'allow', 'monitor.cert'));
  fs.copyFileSync(auditorCert, path.join(dir, 'allow', 'auditor.cert'));
  const broker = await startBroker(await brokerPort(), ['--cert', brokerCert, '--allow', path.join(dir, 'allow')]);
  children.push(broker.child);
  const keys = ['--cert', monitorCert, '--broker-cert', brokerCert];
  const refused = spawnSync(monitorBin, ['--broker', broker.endpoint, '--http', '127.0.0.1:0', ...keys],
    { encoding: 'utf8', timeout: 10000 });
  assert.equal(refused.status, 2, refused.stderr);
  assert.match(refused.stderr, /CURVE broker .* needs --token-file, even on loopback/);
  //  The same from the environment
  const fromEnv = spawnSync(monitorBin, ['--broker', broker.endpoint, '--http', '127.0.0.1:0'],
    { encoding: 'utf8', timeout: 10000, env: { ...process.env, DSH_CERT: monitorCert, DSH_BROKER_CERT: brokerCert } });
  assert.equal(fromEnv.status, 2, fromEnv.stderr);

  const monitor = await startMonitor(broker.endpoint, [...keys, '--token-file', tokenFile]);
  children.push(monitor.child);
  const anonymous = await fetch(monitor.url + '/api/stats');
  assert.equal(anonymous.status, 401);
  assert.doesNotMatch(await anonymous.text(), /reachable|pending/);
  //  The token gets the stats, from a broker reached over CURVE
  await waitFor(async () => (await getJson(monitor.url + '/api/stats', bearer)).reachable,
    { what: 'the CURVE broker to answer the monitor' });
  assert.equal((await fetch(monitor.url + '/api/audit')).status, 401);

  //  An approver's key may not read the audit trail: said, not a broken answer
  const audit = async (url) => {
    const response = await fetch(url + '/api/audit', { headers: bearer });
    return response.status === 503 ? (await response.text(), null) : { status: response.status, body: await response.json() };
  };
  const forbidden = await waitFor(() => audit(monitor.url), { what: "the broker's answer to the approver's AUDIT" });
  assert.equal(forbidden.status, 502);
  assert.equal(forbidden.body.ok, false);
  assert.equal(forbidden.body.code, 'FORBIDDEN');
  assert.match(forbidden.body.error, /needs an admin or auditor key/);
  //  An auditor's key reads it
  const auditing = await startMonitor(broker.endpoint, ['--cert', auditorCert, '--broker-cert', brokerCert,
    '--token-file', tokenFile]);
  children.push(auditing.child);
  const read = await waitFor(() => audit(auditing.url), { what: "the broker's answer to the auditor's AUDIT" });
  assert.equal(read.status, 200, JSON.stringify(read.body));
  assert.equal(read.body.ok, true);
  assert.ok(Array.isArray(read.body.records));
});

test('arguments of pending calls: only for a viewer that presented the token', async () => {
  const broker = await startBroker(await brokerPort(), ['-c', chainConfig]);
  children.push(broker.child);
  children.push(await startDemo(broker.endpoint, 'demo'));
  const open = await startMonitor(broker.endpoint);
  children.push(open.child);
  const guarded = await startMonitor(broker.endpoint, ['--token-file', tokenFile]);
  children.push(guarded.child);
  //  An approver to ask, and a call that waits for it
  const approver = spawn(bin.cli, ['--broker', broker.endpoint, 'approver'], { stdio: ['pipe', 'ignore', 'ignore'] });
  children.push(approver);
  const waiting = (stats) => (stats.pending || []).some((request) => request.tool === 'tick');
  await waitFor(async () => {
    if (waiting(await getJson(guarded.url + '/api/stats', bearer))) return true;
    const call = spawn(bin.cli, ['--broker', broker.endpoint, 'call', 'tick', JSON.stringify({ ms: MARKER }),
      '--timeout-ms', '60000'], { stdio: 'ignore' });
    children.push(call);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    return false;
  }, { what: 'a pending approval', timeoutMs: 20000 });

  const trusted = await getJson(guarded.url + '/api/stats', bearer);
  const request = trusted.pending.find((entry) => entry.tool === 'tick');
  assert.match(request.argumentsPreview, new RegExp(`"ms":${MARKER}`));

  //  The open monitor: the same pending call, no arguments, on every path
  await waitFor(async () => waiting(await getJson(open.url + '/api/stats')), { what: 'the open monitor to see it' });
  const text = await (await fetch(open.url + '/api/stats')).text();
  const stats = JSON.parse(text);
  assert.ok(stats.reachable);
  const brief = stats.pending.find((entry) => entry.tool === 'tick');
  assert.equal(brief.argumentsPreview, undefined);
  assert.equal(brief.arguments, undefined);
  assert.doesNotMatch(text, LEAK);
  const events = await openEvents(open.url);
  try {
    const snapshot = await events.next('snapshot');
    assert.ok(waiting(snapshot.stats));
    assert.doesNotMatch(JSON.stringify(snapshot), LEAK);
    const next = await events.next('stats', waiting);
    assert.doesNotMatch(JSON.stringify(next), LEAK);
  } finally {
    events.close();
  }
  assert.doesNotMatch(await (await fetch(open.url + '/metrics')).text(), new RegExp(`\\b${MARKER}\\b`));

  //  The token's stream has them
  const trustedEvents = await openEvents(guarded.url, bearer);
  try {
    const next = await trustedEvents.next('stats', waiting);
    assert.match(JSON.stringify(next), new RegExp(`\\\\"ms\\\\":${MARKER}`));
  } finally {
    trustedEvents.close();
  }
});
