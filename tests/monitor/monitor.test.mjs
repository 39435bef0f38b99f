//  dsh-monitor against a real broker and components: its command line,
//  /api/tools, /api/stats, the event stream, the latest calls from the
//  audit trail (/api/audit, its filters and the ones refused, a broker
//  with the audit off), the token rules, a broker restart, and /metrics
//  through promtool, the audit's metrics with it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { waitFor, dshCall } from '../mcp/helpers.mjs';
import { start, stop, startBroker, brokerPort, startDemo, startMonitor, openEvents, getJson, monitorBin } from './helpers.mjs';

let port, broker, demo, monitor;

before(async () => {
  port = await brokerPort();
  broker = await startBroker(port);
  demo = await startDemo(broker.endpoint, 'demo');
  monitor = await startMonitor(broker.endpoint);
});

after(async () => {
  await stop(monitor && monitor.child);
  await stop(demo);
  await stop(broker && broker.child);
});

function run(args) {
  return spawnSync(monitorBin, args, { encoding: 'utf8', timeout: 10000 });
}

test('--help lists every option with its default; bad flags exit 2', () => {
  const help = run(['--help']);
  assert.equal(help.status, 0);
  for (const option of ['--broker', '--http', '--token-file', '--poll-ms', '--events', '--history-step-ms', '--history',
    '--cert', '--broker-cert', '-v'])
    assert.match(help.stdout, new RegExp(option.replace(/-/g, '\\-')));
  assert.match(help.stdout, /default 127\.0\.0\.1:7580/);
  assert.match(help.stdout, /default 1000/);
  assert.match(help.stdout, /default 100\b/);
  assert.match(help.stdout, /--history-step-ms N\n.*\n.*default 5000/);
  assert.match(help.stdout, /--history N .*default 180: 15 minutes/);
  for (const args of [['--bogus'], ['--poll-ms', 'x'], ['--events', '0'], ['--http'], ['extra'], ['--history-step-ms', '99'],
    ['--history', '0'], ['--history', '100001']]) {
    const bad = run(args);
    assert.equal(bad.status, 2, `${args.join(' ')}: ${bad.stderr}`);
    assert.match(bad.stderr, /dsh-monitor: /);
  }
});

test('beyond loopback without a token is refused at start, and so is a bad token file', () => {
  const open = run(['--http', '0.0.0.0:0']);
  assert.equal(open.status, 2);
  assert.match(open.stderr, /beyond loopback, needs a bearer token \(--token-file\)/);
  const missing = run(['--token-file', '/nonexistent/token']);
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /cannot read the token file/);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-monitor-'));
  fs.writeFileSync(path.join(dir, 'empty'), '\n');
  const empty = run(['--token-file', path.join(dir, 'empty')]);
  assert.equal(empty.status, 2);
  assert.match(empty.stderr, /the token file .*: no token in it/);
});

test('/api/tools gives the tool set by component with the hints; /api/stats the poll', async () => {
  const tools = await waitFor(async () => {
    const doc = await getJson(monitor.url + '/api/tools');
    return doc.synced && doc.components.length === 1 ? doc : null;
  }, { what: 'the tool set' });
  assert.equal(tools.components[0].id, 'demo');
  const echo = tools.tools.find((tool) => tool.name === 'echo');
  assert.deepEqual({ readOnly: echo.readOnly, destructive: echo.destructive, providers: echo.providers },
    { readOnly: true, destructive: false, providers: ['demo'] });
  const tick = tools.tools.find((tool) => tool.name === 'tick');
  assert.equal(tick.readOnly, false);
  assert.equal(tick.destructive, false);
  const stats = await waitFor(async () => {
    const doc = await getJson(monitor.url + '/api/stats');
    return doc.reachable ? doc : null;
  }, { what: 'a poll' });
  assert.ok(stats.stats || stats.ping, 'STATS or PING');
  //  The page reads heartbeat ages against the broker's own heartbeat
  assert.equal(stats.stats.heartbeatMs, 1000);
  assert.equal(stats.stats.liveness, 3);
  assert.ok(Array.isArray(stats.chain));
  assert.ok(Array.isArray(stats.pending));
  const page = await fetch(monitor.url + '/');
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /text\/html/);
  assert.match(await page.text(), /new EventSource\('\/api\/events'\)/);
  assert.equal((await fetch(monitor.url + '/nowhere')).status, 404);
  assert.equal((await fetch(monitor.url + '/api/stats', { method: 'POST' })).status, 405);
  //  A page elsewhere reaching us through a rebound name is turned away
  assert.equal((await fetch(monitor.url + '/api/stats', { headers: { Origin: 'http://evil.example' } })).status, 403);
});

test('the event stream starts with a snapshot, then carries change events and polls', async () => {
  const events = await openEvents(monitor.url);
  try {
    const snapshot = await events.next('snapshot');
    assert.ok(snapshot.tools && snapshot.stats && Array.isArray(snapshot.events));
    assert.equal(snapshot.monitor.pollMs, 200);
    await events.next('stats', (stats) => stats.reachable);
    const other = await startDemo(broker.endpoint, 'demo-2', ['--prefix', 'b_']);
    const joined = await events.next('event', (event) => event.kind === 'component.joined' && event.component === 'demo-2');
    assert.ok(joined.tools.includes('b_echo'));
    await events.next('tools', (tools) => tools.components.some((component) => component.id === 'demo-2'));
    await stop(other);
    await events.next('event', (event) => event.kind === 'component.left' && event.component === 'demo-2');
    await events.next('tools', (tools) => !tools.components.some((component) => component.id === 'demo-2'));
  } finally {
    events.close();
  }
});

test('at most 32 event streams at once; a closed one frees its place', async () => {
  const streams = [];
  try {
    //  A stream whose client went away is noticed at its next write
    //  (the next poll): the earlier tests' may still count for a moment
    const open = () => openEvents(monitor.url);
    for (let index = 0; index < 32; index++)
      streams.push(await open());
    const refused = await fetch(monitor.url + '/api/events');
    assert.equal(refused.status, 503);
    await refused.text();
    streams.pop().close();
    const again = await open();
    streams.push(again);
    await again.next('snapshot');
  } finally {
    for (const stream of streams) stream.close();
  }
});

test('/api/audit gives the latest calls from the audit trail, narrowed by the filters it passes on', async () => {
  await waitFor(async () => (await getJson(monitor.url + '/api/stats')).reachable, { what: 'a poll' });
  await dshCall(broker.endpoint, 'echo', { message: 'marker-5150' }, ['--agent', 'auditee-1']);
  await dshCall(broker.endpoint, 'fail', { message: 'on purpose' }, ['--agent', 'auditee-1']);
  await dshCall(broker.endpoint, 'echo', { message: 'other' }, ['--agent', 'auditee-2']);
  const mine = await waitFor(async () => {
    const doc = await getJson(monitor.url + '/api/audit?agent=auditee-1');
    return doc.records.length >= 2 ? doc : null;
  }, { what: "auditee-1's calls in the audit trail" });
  assert.equal(mine.ok, true);
  assert.deepEqual(mine.query, { agent: 'auditee-1', limit: 50, order: 'newest' });
  assert.equal(mine.records.length, 2);
  //  Newest first, each parsed, with where it sits in its chain
  const [failed, echoed] = mine.records;
  assert.ok(failed.seq > echoed.seq);
  assert.match(failed.hash, /^[0-9a-f]{64}$/);
  assert.equal(failed.prev.length, 64);
  assert.deepEqual([failed.record.tool, failed.record.agent, failed.record.outcome], ['fail', 'auditee-1', 'TOOL_FAILED']);
  assert.deepEqual([echoed.record.tool, echoed.record.agent, echoed.record.outcome], ['echo', 'auditee-1', 'ok']);
  assert.equal(typeof echoed.record.durationUs, 'number');
  assert.equal(typeof echoed.record.answeredMs, 'number');
  assert.match(echoed.record.callId, /\S/);
  //  A viewer without the token is shown no call's arguments
  assert.equal(echoed.record.arguments, undefined);
  assert.doesNotMatch(await (await fetch(monitor.url + '/api/audit?agent=auditee-1')).text(), /marker-5150/);

  const narrowed = await getJson(monitor.url + '/api/audit?agent=auditee-1&outcome=TOOL_FAILED&tool=');
  assert.deepEqual(narrowed.records.map((row) => row.record.tool), ['fail']);
  const byTool = await getJson(monitor.url + '/api/audit?tool=echo&agent=auditee-2');
  assert.deepEqual(byTool.records.map((row) => row.record.agent), ['auditee-2']);
  const one = await getJson(monitor.url + '/api/audit?limit=1');
  assert.equal(one.records.length, 1);
  const all = await getJson(monitor.url + '/api/audit');
  assert.ok(all.records.length >= 3 && all.records.length <= 50);
  assert.equal((await getJson(monitor.url + '/api/audit?agent=nobody-at-all')).records.length, 0);

  for (const [query, reason] of [
    ['outcome=nope', /outcome is "ok" or an error code/], ['limit=0', /limit is a number from 1 to 500/],
    ['limit=501', /limit is a number/], ['agent=' + 'x'.repeat(256), /agent is 256 bytes long: at most 255/],
    ['tool=a%0Ab', /tool has a control character/], ['agent=%FF', /not UTF-8/], ['bogus=1', /unknown parameter "bogus"/],
    ['agent=a&agent=b', /given twice/]]) {
    const refused = await fetch(monitor.url + '/api/audit?' + query);
    assert.equal(refused.status, 400, query);
    assert.match(await refused.text(), reason, query);
  }
  assert.equal((await fetch(monitor.url + '/api/audit', { method: 'POST' })).status, 405);
});

test('a broker with the audit off: /api/audit says so, and /metrics has no audit metrics', async () => {
  const quiet = await startBroker(await brokerPort(), ['--audit', 'off']);
  const watching = await startMonitor(quiet.endpoint);
  try {
    await waitFor(async () => (await getJson(watching.url + '/api/stats')).reachable, { what: 'a poll' });
    assert.equal((await getJson(watching.url + '/api/stats')).stats.audit, null);
    const response = await fetch(watching.url + '/api/audit');
    assert.equal(response.status, 502);
    const answer = await response.json();
    assert.equal(answer.ok, false);
    assert.equal(answer.code, 'AUDIT_UNAVAILABLE');
    assert.match(answer.error, /keeps no audit trail/);
    const text = await (await fetch(watching.url + '/metrics')).text();
    assert.equal(sample(text, 'dsh_up'), 1);
    assert.doesNotMatch(text, /dsh_audit_/);
  } finally {
    await stop(watching.child);
    await stop(quiet.child);
  }
});

function promtool(text) {
  return new Promise((resolve) => {
    const child = execFile('promtool', ['check', 'metrics'], (error, stdout, stderr) =>
      resolve({ code: error ? error.code : 0, out: stdout + stderr }));
    child.stdin.end(text);
  });
}

function sample(text, name, labels = '') {
  const line = text.split('\n').find((row) => row.startsWith(name + (labels ? '{' + labels + '}' : '') + ' '));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

test('/metrics passes promtool, and its counters move with calls', async () => {
  const before = await (await fetch(monitor.url + '/metrics')).text();
  assert.equal(sample(before, 'dsh_up'), 1);
  assert.equal(sample(before, 'dsh_components'), 1);
  const stats = await getJson(monitor.url + '/api/stats');
  for (let index = 0; index < 3; index++)
    await dshCall(broker.endpoint, 'echo', { message: `m${index}` });
  await dshCall(broker.endpoint, 'fail', { message: 'on purpose' });
  //  A name an attacker chose, with every character the format escapes
  await dshCall(broker.endpoint, 'no"such\\tool\nx', {}).catch(() => {});
  let text = before;
  if (stats.stats) {
    text = await waitFor(async () => {
      const now = await (await fetch(monitor.url + '/metrics')).text();
      return sample(now, 'dsh_calls_total', 'tool="echo",code="ok"') >= 3
        && sample(now, 'dsh_calls_total', 'tool="fail",code="TOOL_FAILED"') >= 1
        && sample(now, 'dsh_calls_total', String.raw`tool="no\"such\\tool\nx",code="UNKNOWN_TOOL"`) >= 1 ? now : null;
    }, { what: 'dsh_calls_total to move' });
    assert.ok(sample(text, 'dsh_call_duration_seconds_count', 'tool="echo"') >= 3);
    assert.ok(sample(text, 'dsh_call_duration_seconds_bucket', 'tool="echo",le="+Inf"') >= 3);
    assert.ok(sample(text, 'dsh_answered_calls_total') >= 4);
    assert.match(text, /^# TYPE dsh_call_duration_seconds histogram$/m);
    //  The audit trail's writer, from STATS audit
    assert.equal(sample(text, 'dsh_audit_healthy'), 1);
    assert.ok(sample(text, 'dsh_audit_records_total') >= 1);
    assert.ok(sample(text, 'dsh_audit_write_batches_total') >= 1);
    assert.ok(sample(text, 'dsh_audit_write_seconds_total') > 0);
    assert.ok(sample(text, 'dsh_audit_write_seconds_max') > 0);
    for (const [name, type] of [['dsh_audit_records_total', 'counter'], ['dsh_audit_dropped_total', 'counter'],
      ['dsh_audit_refused_total', 'counter'], ['dsh_audit_queue_bytes', 'gauge'], ['dsh_audit_healthy', 'gauge'],
      ['dsh_audit_write_seconds_total', 'counter'], ['dsh_audit_write_batches_total', 'counter'],
      ['dsh_audit_write_seconds_max', 'gauge']]) {
      assert.match(text, new RegExp(`^# TYPE ${name} ${type}$`, 'm'));
      assert.match(text, new RegExp(`^# HELP ${name} \\S`, 'm'));
      assert.ok(sample(text, name) >= 0, name);
    }
    assert.match(text, /^dsh_audit_info\{chain="[^"]+",store="sqlite"\} 1$/m);
  }
  else
    test.diagnostic?.('this broker has no STATS yet: only the broker-level metrics are checked');
  const checked = await promtool(text);
  assert.equal(checked.code, 0, checked.out + '\n' + text);
});

test('a token guards every endpoint; /?token= trades it for an HttpOnly SameSite=Strict cookie', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-monitor-'));
  const tokenFile = path.join(dir, 'token');
  fs.writeFileSync(tokenFile, 's3cret-token\n');
  const guarded = await startMonitor(broker.endpoint, ['--token-file', tokenFile]);
  try {
    for (const where of ['/', '/metrics', '/api/tools', '/api/stats', '/api/audit', '/api/events']) {
      const refused = await fetch(guarded.url + where);
      assert.equal(refused.status, 401, where);
      assert.equal(refused.headers.get('www-authenticate'), 'Bearer');
      await refused.text();
      const wrong = await fetch(guarded.url + where, { headers: { Authorization: 'Bearer s3cret-tokeN' } });
      assert.equal(wrong.status, 401, where);
      await wrong.text();
    }
    const bearer = { Authorization: 'Bearer s3cret-token' };
    assert.ok((await getJson(guarded.url + '/api/stats', bearer)).at);
    //  A viewer with the token is shown the calls' arguments too
    const audited = await waitFor(async () => {
      //  503 until its first poll reached the broker
      const response = await fetch(guarded.url + '/api/audit?agent=auditee-1&tool=echo', { headers: bearer });
      return response.status === 200 ? response.json() : (await response.text(), null);
    }, { what: 'the guarded monitor to answer /api/audit' });
    assert.equal(audited.records[0].record.arguments.message, 'marker-5150');
    const events = await openEvents(guarded.url, bearer);
    await events.next('snapshot');
    events.close();
    assert.equal((await fetch(guarded.url + '/?token=nope', { redirect: 'manual' })).status, 401);
    const login = await fetch(guarded.url + '/?token=s3cret-token', { redirect: 'manual' });
    assert.equal(login.status, 303);
    assert.equal(login.headers.get('location'), '/');
    const cookie = login.headers.get('set-cookie');
    assert.match(cookie, /HttpOnly/);
    assert.match(cookie, /SameSite=Strict/);
    assert.ok(!cookie.includes('s3cret-token'), 'the cookie is not the token');
    const session = cookie.split(';')[0];
    assert.equal((await fetch(guarded.url + '/', { headers: { Cookie: session } })).status, 200);
    assert.ok((await getJson(guarded.url + '/api/tools', { Cookie: session })).components);
    assert.equal((await fetch(guarded.url + '/api/tools', { headers: { Cookie: 'dsh_monitor=forged' } })).status, 401);
  } finally {
    await stop(guarded.child);
  }
  //  A clean exit, which in the sanitizer build also says nothing leaked
  assert.equal(guarded.child.exitCode, 0, guarded.child.log);
});

test('a broker restart: the page is told it is unreachable, then gets a fresh snapshot of the new epoch', async () => {
  const events = await openEvents(monitor.url);
  try {
    const first = await events.next('snapshot');
    const epoch = first.tools.epoch;
    await stop(broker.child);
    const down = await events.next('stats', (stats) => !stats.reachable);
    assert.ok(down.error, 'the reason is said');
    assert.equal((await getJson(monitor.url + '/api/stats')).reachable, false);
    assert.equal(sample(await (await fetch(monitor.url + '/metrics')).text(), 'dsh_up'), 0);
    broker = await startBroker(port);
    const fresh = await events.next('snapshot', (snapshot) => snapshot.tools.synced && snapshot.tools.epoch !== epoch,
      20000);
    assert.notEqual(fresh.tools.epoch, epoch);
    await events.next('stats', (stats) => stats.reachable, 20000);
    await waitFor(async () => (await getJson(monitor.url + '/api/tools')).components.some((c) => c.id === 'demo'),
      { what: 'the demo back in the tool set' });
  } finally {
    events.close();
  }
});

test('SIGINT and SIGTERM end it with exit 0', async () => {
  const { child } = monitor;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGINT');
  await gone;
  assert.equal(child.exitCode, 0, child.log);
  assert.doesNotMatch(child.log, /Sanitizer|runtime error/);
});
