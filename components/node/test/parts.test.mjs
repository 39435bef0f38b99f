//  A tool set larger than the broker's messages goes in parts (PROTOCOL.md,
//  The announce channel) and registers whole, under a broker with a 64 KiB
//  limit; a tool too large for a message of its own is left out, and said so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Component } from '../dist/index.js';
import { startBroker, stop, until, text } from './helpers.mjs';

const name = (index) => `node_parts_${String(index).padStart(3, '0')}`;

test('200 tools of 1 kB under a 64 KiB message limit are announced in parts', async () => {
  const broker = await startBroker(undefined, ['--max-message-bytes', '65536']);
  const lines = [];
  const component = new Component({ broker: broker.endpoint, id: 'node-parts', log: (line) => lines.push(line) });
  const client = new Client(broker.endpoint);
  try {
    const description = 'd'.repeat(1000);
    for (let index = 0; index < 200; index += 1) {
      component.set({ name: name(index), description, parameters: { type: 'object' } },
        () => [{ type: 'text', text: 'ok' }]);
      if (index === 100)
        component.set({ name: 'node_parts_oversized', description: 'x'.repeat(70000), parameters: { type: 'object' } },
          () => []);
    }
    component.start();
    const expected = JSON.stringify(Array.from({ length: 200 }, (_, index) => name(index)));
    const listed = async () => JSON.stringify((await client.tools()).map((tool) => tool.name)
      .filter((tool) => tool.startsWith('node_parts_')));
    await until(async () => await listed() === expected, 'the 200 tools, in order, without the oversized one');
    assert.equal(text(await client.call(name(0))), 'ok');
    assert.equal(text(await client.call(name(199))), 'ok');
    assert.ok(lines.some((line) => line.includes('tool node_parts_oversized is')
      && line.includes('it is not announced there')), lines.join('\n'));
  } finally {
    client.close();
    await component.stop();
    await stop(broker);
  }
});
