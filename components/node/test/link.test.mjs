//  The link (src/link.ts) against every case of
//  tests/conformance/link_cases.json: the table of PROTOCOL.md (Client
//  liveness), with a fake clock, as the C SDK's dsh_link and Python's
//  dsh.link run the same cases. No sockets, no broker.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Link } from '../dist/link.js';

const file = fileURLToPath(new URL('../../../tests/conformance/link_cases.json', import.meta.url));
const document = JSON.parse(readFileSync(file, 'utf8'));

//  Runs a step's input; returns what a tick returned.
function apply(link, step) {
  const at = step.at;
  switch (step.input) {
    case 'start': return link.start(at);
    case 'connected': return link.connected(at);
    case 'heard': return link.heard(at);
    case 'welcome': return link.welcome(at, step.instance ?? undefined, step.heartbeatMs, step.liveness);
    case 'pong': return link.pong(at, step.instance ?? undefined, step.heartbeatMs, step.liveness);
    case 'watch': return link.watch(at, step.on);
    case 'move': return link.move(at);
    case 'tick': return link.tick(at);
    default: throw new Error(`unknown input ${step.input}`);
  }
}

test('the case file is one this test reads', () => {
  assert.equal(document.format, 1);
  assert.ok(document.cases.length > 0);
});

for (const spec of document.cases) {
  test(`link case ${spec.name}`, () => {
    const link = new Link(spec.profile, spec.brokers);
    spec.steps.forEach((step, index) => {
      const where = `${spec.name}, step ${index + 1} (${step.input} at ${step.at})`;
      const due = apply(link, step);
      const events = link.events();
      const expected = step.events ?? [];
      assert.equal(events.length, expected.length,
        `${where}: events ${JSON.stringify(events)}, expected ${JSON.stringify(expected)}`);
      events.forEach((event, position) => {
        for (const [field, value] of Object.entries(expected[position]))
          assert.deepEqual(event[field], value, `${where}: ${event.type}'s ${field}`);
      });
      if (step.input === 'tick' && 'nextTick' in step)
        assert.equal(due, step.nextTick, `${where}: next tick`);
      for (const [field, value] of Object.entries(step.after ?? {}))
        assert.deepEqual(link[field] ?? null, value, `${where}: ${field}`);
    });
  });
}

//  Routers that take every message and answer none: brokers reached (their
//  handshake succeeds) and silent. seen holds the commands each received.
async function silentBrokers(count) {
  const { Router } = await import('zeromq');
  const brokers = [];
  for (let index = 0; index < count; index += 1) {
    const socket = new Router({ linger: 0 });
    await socket.bind('tcp://127.0.0.1:*');
    const broker = { socket, endpoint: socket.lastEndpoint, seen: [] };
    void (async () => {
      try {
        for await (const frames of socket)
          if (frames.length >= 4)
            broker.seen.push(Buffer.from(frames[3]).toString());
      } catch { /* closed */ }
    })();
    brokers.push(broker);
  }
  return brokers;
}

test('a decision in flight when a reached broker is lost is answered BROKER_GONE, not sent again; reads go on', async () => {
  const { Client } = await import('../dist/index.js');
  const brokers = await silentBrokers(2);
  const client = new Client(brokers.map((broker) => broker.endpoint));
  const lost = (command) => `Error: the broker at ${brokers[0].endpoint} was lost with the ${command} in flight; `
    + 'it may or may not have been applied';
  try {
    const reads = [client.request('LIST', {}, 15000), client.request('PINS', { op: 'list' }, 15000)];
    for (const read of reads)
      read.catch(() => undefined);
    const accept = client.request('PINS', { op: 'accept', name: 'x' }, 15000);
    const started = Date.now();
    await assert.rejects(client.request('CONTROL', { stage: 'approve', command: 'pending' }, 15000), (error) => {
      assert.equal(error.code, 'BROKER_GONE');
      assert.equal(error.message, lost('CONTROL'));
      return true;
    });
    await assert.rejects(accept, (error) => error.code === 'BROKER_GONE' && error.message === lost('PINS'));
    //  At the DOWN (the window, 3 s), not at the queries' own deadline
    const took = Date.now() - started;
    assert.ok(took > 2500 && took < 10000, `${took} ms`);
    assert.equal(client.endpoint, brokers[1].endpoint);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const count = (seen, command) => seen.filter((name) => name === command).length;
    assert.ok(count(brokers[0].seen, 'PINS') === 2 && brokers[0].seen.includes('CONTROL'), brokers[0].seen.join());
    assert.ok(count(brokers[1].seen, 'PINS') === 1 && brokers[1].seen.includes('LIST')
      && !brokers[1].seen.includes('CONTROL'), brokers[1].seen.join());
  } finally {
    client.close();
    for (const broker of brokers)
      broker.socket.close();
  }
});

test('a decision sent to a broker never reached goes on: it cannot have applied', async () => {
  const { Client } = await import('../dist/index.js');
  const { freePorts } = await import('./helpers.mjs');
  const [broker] = await silentBrokers(1);
  const client = new Client([`tcp://127.0.0.1:${await freePorts()}`, broker.endpoint]);
  try {
    const control = client.request('CONTROL', { stage: 'approve', command: 'pending' }, 15000);
    control.catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 2500));
    assert.equal(client.endpoint, broker.endpoint);
    assert.ok(broker.seen.includes('CONTROL'), broker.seen.join());
  } finally {
    client.close();
    broker.socket.close();
  }
});
