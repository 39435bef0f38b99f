//  The client's own rules on a failover (PROTOCOL.md, Client liveness),
//  against fake brokers made of ROUTER sockets: which calls go to the next
//  broker (those that cannot have run, or whose tool is read-only or
//  idempotent by the last LIST, until every broker has had them), the LIST
//  on the first call and at once after a failover, UNKNOWN_TOOL passed over
//  to the next broker, and the client's own TIMEOUT at the deadline plus
//  5000 ms.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Router } from 'zeromq';
import { decode, encode } from '@msgpack/msgpack';
import { Client } from '../dist/index.js';
import { until, text } from './helpers.mjs';

const TOOLS = [
  { name: 'look', parameters: { type: 'object' }, annotations: { readOnlyHint: true } },
  { name: 'again', parameters: { type: 'object' }, annotations: { idempotentHint: true } },
  { name: 'write', parameters: { type: 'object' } },
];

function ok(callId, said) {
  return ['RESULT', { callId, content: [{ type: 'text', text: said }], isError: false }];
}

//  A broker of one ROUTER: answers PING (heartbeat 100 ms, liveness 3),
//  LIST (TOOLS), and CALL as onCall says (nothing: no answer). Everything
//  it reads is kept in seen; once silent it reads on and answers nothing.
async function fakeBroker(instance, onCall = () => null) {
  const router = new Router({ linger: 0 });
  await router.bind('tcp://127.0.0.1:*');
  const broker = { endpoint: router.lastEndpoint, seen: [], silent: false, close: () => router.close() };
  broker.got = (command) => broker.seen.filter((message) => message.command === command);
  void (async () => {
    try {
      for await (const [route, , , commandFrame, bodyFrame] of router) {
        const command = Buffer.from(commandFrame).toString();
        const body = decode(bodyFrame);
        broker.seen.push({ command, body });
        if (broker.silent)
          continue;
        let reply = null;
        if (command === 'PING')
          reply = ['PONG', { id: body.id, broker: instance, uptimeMs: 1, tools: 3, components: 1, inFlight: 0,
            seq: 0, epoch: 1, heartbeatMs: 100, liveness: 3 }];
        else if (command === 'LIST')
          reply = ['TOOLS', { id: body.id, seq: 0, tools: TOOLS }];
        else if (command === 'CALL')
          reply = onCall(body);
        if (reply)
          await router.send([route, '', 'DSH1', reply[0], encode(reply[1])]);
      }
    } catch {
      //  closed
    }
  })();
  return broker;
}

test('after a failover only calls to read-only or idempotent tools go to the next broker; LIST at once', async () => {
  const first = await fakeBroker('first');
  const second = await fakeBroker('second', (body) => ok(body.callId, `second ran ${body.name}`));
  const client = new Client([first.endpoint, second.endpoint]);
  try {
    const calls = ['look', 'again', 'write'].map((name) => client.call(name, {}, { timeoutMs: 20000 }));
    //  The first call asks which tools may go again
    await until(() => first.got('CALL').length === 3 && first.got('LIST').length >= 1, 'the calls and a LIST at first');
    //  Let the TOOLS reach the client before the broker falls silent
    await new Promise((resolve) => setTimeout(resolve, 200));
    first.silent = true;
    const [look, again, write] = await Promise.all(calls);
    assert.equal(text(look), 'second ran look');
    assert.equal(text(again), 'second ran again');
    assert.equal(write.error.code, 'BROKER_GONE');
    assert.match(text(write), /^Error: the broker at tcp:\/\/127\.0\.0\.1:\d+ went silent \(no answer for \d+ ms\) with the call in flight$/);
    assert.deepEqual(second.got('CALL').map((message) => message.body.name).sort(), ['again', 'look']);
    //  The next broker is asked for LIST at once, not at the next call
    assert.ok(second.got('LIST').length >= 1, JSON.stringify(second.seen.map((message) => message.command)));
  } finally {
    client.close();
    first.close();
    second.close();
  }
});

test('a read-only call goes to each broker once: when every broker has had it, BROKER_GONE', async () => {
  const first = await fakeBroker('first');
  const second = await fakeBroker('second');
  const client = new Client([first.endpoint, second.endpoint]);
  try {
    const pending = client.call('look', {}, { timeoutMs: 20000 });
    await until(() => first.got('CALL').length === 1 && first.got('LIST').length >= 1, 'the call at first');
    await new Promise((resolve) => setTimeout(resolve, 200));
    first.silent = true;
    await until(() => second.got('CALL').length === 1, 'the call sent again to second', 5000);
    second.silent = true;
    const result = await pending;
    assert.equal(result.error.code, 'BROKER_GONE');
    assert.equal(first.got('CALL').length, 1);
  } finally {
    client.close();
    first.close();
    second.close();
  }
});

test('UNKNOWN_TOOL for the only call awaited: sent to the next broker instead', async () => {
  const unknown = (body) => ['RESULT', { callId: body.callId, isError: true,
    content: [{ type: 'text', text: `Error: unknown tool "${body.name}"` }],
    error: { name: 'UnknownToolError', code: 'UNKNOWN_TOOL' } }];
  const first = await fakeBroker('first', unknown);
  const second = await fakeBroker('second', (body) => ok(body.callId, 'second knows it'));
  const client = new Client([first.endpoint, second.endpoint]);
  try {
    const result = await client.call('write', {}, { timeoutMs: 5000 });
    assert.equal(text(result), 'second knows it');
    assert.equal(client.endpoint, second.endpoint);
    assert.equal(first.got('CALL').length, 1);
  } finally {
    client.close();
    first.close();
    second.close();
  }
  //  Every broker has had it: the UNKNOWN_TOOL is the answer
  const both = [await fakeBroker('a', unknown), await fakeBroker('b', unknown)];
  const alone = new Client(both.map((broker) => broker.endpoint));
  try {
    const result = await alone.call('write', {}, { timeoutMs: 5000 });
    assert.equal(result.error.code, 'UNKNOWN_TOOL');
    assert.equal(both[0].got('CALL').length + both[1].got('CALL').length, 2);
  } finally {
    alone.close();
    for (const broker of both)
      broker.close();
  }
});

test('UNKNOWN_TOOL with other calls in flight is delivered: moving would drop them', async () => {
  const first = await fakeBroker('first', (body) => body.name === 'gone' ? ['RESULT', { callId: body.callId,
    isError: true, content: [{ type: 'text', text: 'Error: unknown tool "gone"' }],
    error: { name: 'UnknownToolError', code: 'UNKNOWN_TOOL' } }] : null);
  const second = await fakeBroker('second', (body) => ok(body.callId, 'second'));
  const client = new Client([first.endpoint, second.endpoint]);
  try {
    const held = client.call('write', {}, { timeoutMs: 100 });
    await until(() => first.got('CALL').length === 1, 'the first call at first');
    const result = await client.call('gone', {}, { timeoutMs: 5000 });
    assert.equal(result.error.code, 'UNKNOWN_TOOL');
    assert.equal(second.got('CALL').length, 0);
    assert.equal(client.endpoint, first.endpoint);
    assert.equal((await held).error.code, 'TIMEOUT');
  } finally {
    client.close();
    first.close();
    second.close();
  }
});

test('a call its broker never answers: the client answers TIMEOUT at the deadline plus 5000 ms', async () => {
  const quiet = await fakeBroker('quiet');
  const client = new Client(quiet.endpoint);
  try {
    const started = Date.now();
    const result = await client.call('write', {}, { timeoutMs: 200 });
    const waited = Date.now() - started;
    assert.equal(result.error.code, 'TIMEOUT');
    assert.equal(text(result), 'Error: no answer from the broker by the call\'s deadline');
    assert.ok(waited >= 5100 && waited < 8000, `answered after ${waited} ms`);
  } finally {
    client.close();
    quiet.close();
  }
});
