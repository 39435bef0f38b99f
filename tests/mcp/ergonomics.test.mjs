//  What an MCP host meets: dsh-mcp started before the broker (hosts start
//  their servers at launch), and a call that waits long (for a human's
//  approval) kept alive with progress.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bin, start, startBroker, stop, rawFacade, freePort, freshStateDir, waitFor } from './helpers.mjs';

test('started before the broker: answered at once, then list_changed once the broker is up', async () => {
  const port = await freePort(4);
  const endpoint = `tcp://127.0.0.1:${port}`;
  const facade = rawFacade(['--broker', endpoint]);
  let broker, demo;
  try {
    await facade.initialize();
    const listed = await facade.request('tools/list');
    assert.deepEqual(listed.result.tools, []);
    const called = await facade.request('tools/call', { name: 'echo', arguments: { message: 'early' } });
    assert.equal(called.result.isError, true);
    assert.match(called.result.content[0].text, /has not been reached yet/);

    ({ child: broker } = await start(bin.broker, ['-e', endpoint, ...freshStateDir()], /listening on/));
    ({ child: demo } = await start(bin.demo, ['--broker', endpoint], /serving/));
    await waitFor(() => facade.notifications.some((note) => note.method === 'notifications/tools/list_changed'),
      { what: 'notifications/tools/list_changed' });
    await waitFor(async () => (await facade.request('tools/list')).result.tools.some((tool) => tool.name === 'echo'),
      { what: 'echo listed' });
    const later = await facade.request('tools/call', { name: 'echo', arguments: { message: 'later' } });
    assert.equal(later.result.content[0].text, 'later');
  } finally {
    await facade.close();
    await stop(demo);
    await stop(broker);
  }
});

test('a call that waits long sends progress when the client asked for it', async () => {
  const { child: broker, endpoint } = await startBroker();
  const { child: demo } = await start(bin.demo, ['--broker', endpoint], /serving/);
  const facade = rawFacade(['--broker', endpoint, '--keepalive-ms', '200']);
  try {
    await facade.initialize();
    await waitFor(async () => (await facade.request('tools/list')).result.tools.length > 0, { what: 'tools' });
    const answer = await facade.request('tools/call', { name: 'sleep_ms', arguments: { ms: 1500 },
      _meta: { progressToken: 'wait-1' } });
    assert.equal(answer.result.isError, false);
    const progress = facade.notifications.filter((note) => note.method === 'notifications/progress'
      && note.params.progressToken === 'wait-1');
    assert.ok(progress.length >= 2, `${progress.length} progress notifications`);
    const values = progress.map((note) => note.params.progress);
    assert.deepEqual(values, [...values].sort((a, b) => a - b), 'progress only grows');
    assert.equal(new Set(values).size, values.length, 'and never repeats');
    //  No progressToken, no progress
    const before = facade.notifications.length;
    await facade.request('tools/call', { name: 'sleep_ms', arguments: { ms: 600 } });
    assert.equal(facade.notifications.slice(before).filter((note) => note.method === 'notifications/progress').length, 0);
  } finally {
    await facade.close();
    await stop(demo);
    await stop(broker);
  }
});
