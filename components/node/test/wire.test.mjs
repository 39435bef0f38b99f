//  One strict decode (PROTOCOL.md, Bodies): a body whose map, at any depth,
//  repeats a key, or has a key no property name can hold, is refused whole,
//  as a malformed one is; bodies without repeats decode as before. Then a
//  CALL that the C broker passes (its codec compares key bytes) but that
//  Node would read otherwise ("A" and an overlong UTF-8 "A") is dropped by
//  a Node component, which never runs the tool on it. And a tool set too
//  large for one message is split into parts (The announce channel).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Dealer } from 'zeromq';
import { encode } from '@msgpack/msgpack';
import { ToolRegistry } from '../dist/index.js';
import { ANNOUNCE_MARGIN, announceBodies, parse, unpack } from '../dist/wire.js';
import { startBroker, stop, until, dshTools } from './helpers.mjs';

//  A msgpack map from [key bytes, value bytes] pairs, written by hand so
//  that it can say what no encoder of a JS object would
function map(...pairs) {
  const head = pairs.length < 16 ? [0x80 | pairs.length] : [0xde, pairs.length >> 8, pairs.length & 0xff];
  return Buffer.concat([Buffer.from(head), ...pairs.flat().map((part) => Buffer.from(part))]);
}
const raw = (hex) => Buffer.from(hex, 'hex');
const m = (value) => Buffer.from(encode(value));

const REFUSED = {
  'two str keys': map([m('a'), m(1)], [m('a'), m(2)]),
  'one str key in two widths (fixstr, str8)': map([m('path'), m('x')], [raw('d90470617468'), m('y')]),
  'a str and a bin with the same bytes': map([m('a'), m(1)], [raw('c40161'), m(2)]),
  '1 and 1.0': map([m(1), m('x')], [raw('cb3ff0000000000000'), m('y')]),
  '1 and "1"': map([m(1), m('x')], [m('1'), m('y')]),
  '1 as int8 and uint16': map([raw('d001'), m('x')], [raw('cd0001'), m('y')]),
  '-0.0 and 0': map([raw('cb8000000000000000'), m('x')], [m(0), m('y')]),
  '0.5 as float32 and "0.5"': map([raw('ca3f000000'), m('x')], [m('0.5'), m('y')]),
  'two ext keys of one type and bytes': map([raw('d40701'), m(1)], [raw('d40701'), m(2)]),
  'two nil keys': map([raw('c0'), m(1)], [raw('c0'), m(2)]),
  'true and true': map([raw('c3'), m(1)], [raw('c3'), m(2)]),
  'an array as a key': map([m([1]), m(1)]),
  'a map as a key': map([m({ a: 1 }), m(1)]),
  //  What only a JavaScript reader merges
  '"A" and an overlong UTF-8 "A"': map([m('A'), m(1)], [raw('a2c181'), m(2)]),
  'two integers past 2^53 that round to one number':
    map([raw('cfffffffffffffffff'), m(1)], [raw('cffffffffffffffffe'), m(2)]),
  'a key repeated in a map of 20 keys': map(...Array.from({ length: 19 }, (_, index) => [m(`k${index}`), m(index)]),
    [m('k7'), m('again')]),
};

const DEPTHS = {
  'at the root': (inner) => inner,
  'in arguments': (inner) => map([m('callId'), m('c-1')], [m('arguments'), inner]),
  'in a map in an array in a map': (inner) => map([m('arguments'), map([m('list'), Buffer.concat([raw('92c0'), inner])])]),
  'in the second of two sibling maps': (inner) => map([m('a'), map([m('x'), m(1)])], [m('b'), inner]),
};

for (const [depth, wrap] of Object.entries(DEPTHS)) {
  test(`a map that repeats a key, or has one no property can hold, ${depth}: refused whole`, () => {
    for (const [kind, body] of Object.entries(REFUSED))
      assert.equal(unpack(wrap(body)), null, kind);
  });
}

test('a refused body makes the message malformed: parse drops it as any other', () => {
  const frames = (body) => [new Uint8Array(0), Buffer.from('DSH1'), Buffer.from('RESULT'), body];
  assert.equal(parse(frames(map([m('callId'), m('c-1')], [m('callId'), m('c-2')])), () => false), null);
  assert.equal(parse(frames(raw('c1')), () => false), null);
  assert.deepEqual(parse(frames(map([m('callId'), m('c-1')])), () => false),
    { command: 'RESULT', body: { callId: 'c-1' } });
});

test('bodies without repeats decode as before', () => {
  const bodies = [
    {},
    { callId: 'c-1', content: [{ type: 'text', text: 'hi' }], isError: false },
    { arguments: { path: 'x', list: [{ a: 1 }, { a: 2 }], nested: { a: { a: { a: [] } } } } },
    { tools: Array.from({ length: 300 }, (_, index) => ({ name: `t${index}`, parameters: { type: 'object' } })) },
    { blob: Buffer.from([1, 2, 3]), when: new Date(1_700_000_000_000), n: null, big: 2 ** 60, f: 0.1 },
  ];
  for (const body of bodies)
    assert.deepEqual(unpack(m(body)), body);
  //  Keys of other maps are not repeats; neither are 1 and "1.0", 0.1 and "0.10"
  assert.deepEqual(unpack(map([m('a'), map([m('a'), m(1)])], [m('b'), map([m('a'), m(2)])])),
    { a: { a: 1 }, b: { a: 2 } });
  assert.deepEqual(unpack(map([m(1), m('x')], [m('1.0'), m('y')], [raw('cb3fb999999999999a'), m('z')],
    [m('0.10'), m('w')])), { 1: 'x', '1.0': 'y', 0.1: 'z', '0.10': 'w' });
  //  Nesting as deep as the frame allows costs no recursion
  const deep = Buffer.concat([Buffer.alloc(100000, 0x91), raw('80')]);
  assert.equal(unpack(Buffer.concat([raw('81a161'), deep])) !== null, true);
});

let broker;
let registry;
let front;

after(async () => {
  front?.close();
  await registry?.close();
  await stop(broker);
});

test('a CALL whose arguments Node would read otherwise than the broker never reaches the handler', async () => {
  broker = await startBroker();
  registry = await ToolRegistry.connect({ broker: broker.endpoint, component: 'node-strict' });
  const seen = [];
  await registry.register({
    name: 'node_args', description: 'Its arguments, as Node reads them',
    parameters: { type: 'object', properties: {} }, annotations: { readOnlyHint: true },
  }, async (args) => {
    seen.push(args);
    return [{ type: 'text', text: JSON.stringify(args) }];
  }).ready;
  await until(async () => (await dshTools(broker.endpoint)).includes('node_args'), 'node_args served');
  front = new Dealer({ receiveTimeout: 10000 });
  front.connect(broker.endpoint);
  const call = async (callId, args) => {
    const body = map([m('callId'), m(callId)], [m('name'), m('node_args')], [m('timeoutMs'), m(1500)],
      [m('arguments'), args]);
    await front.send([new Uint8Array(0), Buffer.from('DSH1'), Buffer.from('CALL'), body]);
    const [, , command, reply] = await front.receive();
    assert.equal(Buffer.from(command).toString(), 'RESULT');
    return unpack(reply);
  };

  const plain = await call('c-plain', map([m('A'), m(1)]));
  assert.equal(plain.isError, false, JSON.stringify(plain));
  assert.equal(plain.content[0].text, '{"A":1}');
  //  The broker sees two keys ("A" and bytes c1 81); Node would see one
  //  "A", with the second value: dropped, so the caller's deadline passes
  const merged = await call('c-merged', map([m('A'), m(1)], [raw('a2c181'), m(2)]));
  assert.equal(merged.callId, 'c-merged');
  assert.equal(merged.error?.code, 'TIMEOUT', JSON.stringify(merged));
  assert.deepEqual(seen, [{ A: 1 }]);
});

test('a tool set too large for one message is split in order, each part within the limit', () => {
  const head = { component: 'c', generation: 5, concurrency: 8 };
  const entries = Array.from({ length: 200 }, (_, index) => ({
    name: `t${index}`, description: 'd'.repeat(1000), parameters: { type: 'object' } }));
  const [whole, ...none] = announceBodies(head, entries.slice(0, 10), 65536);
  assert.equal(none.length, 0);
  assert.deepEqual(unpack(whole), { ...head, tools: entries.slice(0, 10) });
  const bodies = announceBodies(head, entries, 65536);
  assert.ok(bodies.every((body) => body.length <= 65536 - ANNOUNCE_MARGIN));
  const parts = bodies.map((body) => unpack(body));
  assert.deepEqual(parts.map((part) => [part.part, part.parts]), [[0, 4], [1, 4], [2, 4], [3, 4]]);
  assert.ok(parts.every((part) => part.component === 'c' && part.generation === 5 && part.concurrency === 8));
  assert.deepEqual(parts.flatMap((part) => part.tools), entries);
  const big = { name: 'big', description: 'x'.repeat(70000), parameters: { type: 'object' } };
  const told = [];
  const split = announceBodies(head, [...entries.slice(0, 3), big, ...entries.slice(3)], 65536,
    (entry, size) => told.push([entry.name, size]));
  assert.deepEqual(told.map(([name]) => name), ['big']);
  assert.deepEqual(split.flatMap((body) => unpack(body).tools), entries);
  const [alone, ...rest] = announceBodies(head, [entries[0], big], 65536, () => undefined);
  assert.equal(rest.length, 0);
  assert.deepEqual(unpack(alone), { ...head, tools: [entries[0]] });
});
