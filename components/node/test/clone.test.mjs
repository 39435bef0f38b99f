//  The watcher's Clone procedure as PROTOCOL.md states it (Watchers;
//  SNAPSHOT), and the component's WELCOME taken as untrusted input, against
//  fake brokers made of ROUTER, XPUB and SUB sockets: the first SNAPSHOT goes
//  once the SUB has connected; one that gets no reply is sent again with the
//  same id; a WELCOME that names no endpoints is not acted on.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Router, Subscriber, XPublisher } from 'zeromq';
import { decode, encode } from '@msgpack/msgpack';
import { Component, Watcher } from '../dist/index.js';
import { freePorts, until } from './helpers.mjs';

const ENTRY = { name: 'look', parameters: { type: 'object' } };

function reply(router, route, command, body) {
  return router.send([route, '', 'DSH1', command, encode(body)]);
}

//  FRONT answers HELLO (a WELCOME naming an XPUB bound only eventsAfterMs
//  after the first one), PING, and SNAPSHOT but the first `ignore` of them.
async function fakeBroker({ eventsAfterMs = 0, ignore = 0 } = {}) {
  const front = new Router({ linger: 0 });
  await front.bind('tcp://127.0.0.1:*');
  const events = new XPublisher({ linger: 0 });
  const eventsEndpoint = `tcp://127.0.0.1:${await freePorts()}`;
  const broker = { endpoint: front.lastEndpoint, snapshots: [], subscribed: undefined };
  let binding;
  broker.close = () => { front.close(); events.close(); };
  void (async () => {
    try {
      for await (const [frame] of events)
        if (frame[0] === 1 && broker.subscribed === undefined)
          broker.subscribed = performance.now();
    } catch { /* closed */ }
  })();
  void (async () => {
    try {
      for await (const [route, , , commandFrame, bodyFrame] of front) {
        const command = Buffer.from(commandFrame).toString();
        const body = decode(bodyFrame);
        if (command === 'HELLO') {
          binding ??= new Promise((resolve) => setTimeout(resolve, eventsAfterMs)).then(() => events.bind(eventsEndpoint));
          await reply(front, route, 'WELCOME', { id: body.id, protocol: 1, broker: 'fake', epoch: 7,
            announce: 'tcp://127.0.0.1:1', work: 'tcp://127.0.0.1:1', events: eventsEndpoint,
            heartbeatMs: 1000, liveness: 3, maxMessageBytes: 16777216 });
        } else if (command === 'PING')
          await reply(front, route, 'PONG', { id: body.id, broker: 'fake', uptimeMs: 1, tools: 1, components: 1,
            inFlight: 0, seq: 0, epoch: 7, heartbeatMs: 1000, liveness: 3 });
        else if (command === 'SNAPSHOT') {
          broker.snapshots.push({ at: performance.now(), id: body.id });
          if (broker.snapshots.length > ignore)
            await reply(front, route, 'SNAPSHOT', { id: body.id, seq: 0, epoch: 7,
              tools: [{ tool: ENTRY, providers: ['c'] }], components: [] });
        }
      }
    } catch { /* closed */ }
  })();
  return broker;
}

test('the first snapshot is asked for once the SUB has connected', async () => {
  const broker = await fakeBroker({ eventsAfterMs: 500 });
  const watcher = new Watcher(broker.endpoint);
  try {
    await watcher.start(10000);
    assert.ok(broker.subscribed !== undefined);
    assert.ok(broker.snapshots[0].at > broker.subscribed, JSON.stringify(broker));
    assert.ok(watcher.get('look'));
  } finally {
    watcher.close();
    broker.close();
  }
});

test('a SNAPSHOT without a reply is sent again with the same id', async () => {
  const broker = await fakeBroker({ ignore: 1 });
  const watcher = new Watcher(broker.endpoint);
  try {
    await watcher.start(8000);
    assert.equal(broker.snapshots.length, 2);
    const [first, again] = broker.snapshots;
    assert.equal(again.id, first.id);
    assert.ok(again.at - first.at >= 1800 && again.at - first.at < 4000, `${again.at - first.at} ms`);
    assert.equal(watcher.resyncs, 0);
  } finally {
    watcher.close();
    broker.close();
  }
});

test('a component does not act on a WELCOME that names no endpoints, and asks again', async () => {
  const front = new Router({ linger: 0 });
  await front.bind('tcp://127.0.0.1:*');
  const work = new Router({ linger: 0 });
  await work.bind('tcp://127.0.0.1:*');
  const announce = new Subscriber({ linger: 0 });
  announce.subscribe();
  await announce.bind('tcp://127.0.0.1:*');
  let hellos = 0;
  const workHellos = [];
  void (async () => {
    try {
      for await (const [route, , , commandFrame, bodyFrame] of front) {
        if (Buffer.from(commandFrame).toString() !== 'HELLO')
          continue;
        hellos += 1;
        const welcome = { id: decode(bodyFrame).id, protocol: 1, broker: 'fake', epoch: 1, events: 'tcp://127.0.0.1:1',
          heartbeatMs: 1000, liveness: 3, maxMessageBytes: 16777216 };
        if (hellos > 1)
          Object.assign(welcome, { announce: announce.lastEndpoint, work: work.lastEndpoint });
        await reply(front, route, 'WELCOME', welcome);
      }
    } catch { /* closed */ }
  })();
  void (async () => {
    try {
      for await (const message of work)
        if (Buffer.from(message[3]).toString() === 'HELLO')
          workHellos.push(decode(message[4]));
    } catch { /* closed */ }
  })();
  void (async () => { try { for await (const _ of announce); } catch { /* closed */ } })();
  const component = new Component({ broker: front.lastEndpoint, id: 'node-welcome', log: () => {} });
  component.on('error', () => {});
  try {
    component.set(ENTRY, () => []);
    component.start();
    //  Soon after the next HELLO (every 1000 ms), not after the liveness window
    await until(() => workHellos.length > 0, 'a HELLO on WORK', 2500);
    assert.ok(hellos >= 2, `${hellos} HELLOs`);
    assert.equal(workHellos[0].component, 'node-welcome');
  } finally {
    await component.stop();
    front.close();
    work.close();
    announce.close();
  }
});
