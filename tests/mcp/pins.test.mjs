//  A bridged MCP server changes a tool's description at run time, the rug
//  pull of issue 26: the server (fixtures/drifting-server.mjs) sends
//  notifications/tools/list_changed, dsh-mcp-bridge lists its tools again
//  and re-announces them, and the broker (pins policy tofu, its default)
//  holds the changed tool quarantined: LIST marks it with both digests, a
//  tool.changed event with a readable diff reaches the watchers, a call is
//  refused QUARANTINED, and no agent is shown it (dsh-mcp's tools/list,
//  with and without --agent; `dsh schemas`). `dsh pins accept` releases it
//  and the call works, answered by the new definition.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { bin, start, startBroker, stop, dsh, dshTools, dshCall, rawFacade, waitFor } from './helpers.mjs';
import { REVIEWED, DRIFTED } from './fixtures/drifting-server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixture = path.join(here, 'fixtures/drifting-server.mjs');
const HEX64 = /^[0-9a-f]{64}$/;

let broker, bridge, watch, facade, agentFacade;
let pinned;                     //  echo's digest before the change

//  The whole lines `dsh watch` printed so far, parsed.
const notices = () => watch.log.split('\n').slice(0, -1).filter((line) => line.startsWith('{'))
  .map((line) => JSON.parse(line));
const entryOf = async (name) => (await dshTools(broker.endpoint)).find((tool) => tool.name === name);
const listed = async (raw) => (await raw.request('tools/list')).result.tools.map((tool) => tool.name);

before(async () => {
  broker = await startBroker();
  ({ child: bridge } = await start(bin.bridge, ['--broker', broker.endpoint, '--name', 'drifting', '-v',
    '--', process.execPath, fixture], /serving \d+ tools/));
  await waitFor(async () => (await entryOf('echo')) && (await entryOf('steady')), { what: 'the bridged tools' });
  ({ child: watch } = await start(bin.cli, ['--broker', broker.endpoint, 'watch'], /"kind":\s*"snapshot"/));
  facade = rawFacade(['--broker', broker.endpoint]);
  await facade.initialize();
  agentFacade = rawFacade(['--broker', broker.endpoint, '--agent', 'tester']);
  await agentFacade.initialize();
});

after(async () => {
  await facade?.close();
  await agentFacade?.close();
  await stop(watch);
  await stop(bridge);
  await stop(broker?.child);
});

test('before the change: pinned on first sight, listed and callable', async () => {
  const entry = await entryOf('echo');
  assert.equal(entry.description, REVIEWED);
  assert.equal(entry.quarantined, undefined);
  const pins = JSON.parse((await dsh(broker.endpoint, 'pins', 'list', '--json')).stdout);
  const pin = pins.pins.find((item) => item.name === 'echo');
  assert.equal(pins.policy, 'tofu');
  assert.equal(pin.state, 'pinned');
  assert.match(pin.digest, HEX64);
  pinned = pin.digest;
  assert.deepEqual(await listed(facade), ['echo', 'steady']);
  const echo = await dshCall(broker.endpoint, 'echo', { message: 'hi' });
  assert.equal(echo.isError, false);
  assert.equal(echo.content[0].text, 'v1: hi');
});

test('the changed description is quarantined: marked, announced, refused, shown to no agent', async () => {
  const pid = Number([...bridge.log.matchAll(/\(pid (\d+)\)/g)].at(-1)[1]);
  const notesBefore = facade.notifications.length;
  process.kill(pid, 'SIGUSR1');
  const entry = await waitFor(async () => {
    const found = await entryOf('echo');
    return found?.quarantined === true && found;
  }, { what: 'echo to be quarantined' });

  //  LIST: the offered definition, with both digests and the reason
  assert.match(entry.digest, HEX64);
  assert.equal(entry.pinnedDigest, pinned);
  assert.notEqual(entry.digest, entry.pinnedDigest);
  assert.equal(entry.quarantineReason, 'definition changed since it was pinned');
  assert.equal((await entryOf('steady')).quarantined, undefined);

  //  The event, with the two digests and a diff a person can read
  const changed = await waitFor(() => notices().find((notice) => notice.kind === 'tool.changed'),
    { what: 'the tool.changed event' });
  assert.equal(changed.name, 'echo');
  assert.equal(changed.digest, entry.digest);
  assert.equal(changed.pinnedDigest, pinned);
  assert.ok(changed.diff.includes(`- description: ${JSON.stringify(REVIEWED)}`), changed.diff);
  assert.ok(changed.diff.includes(`+ description: ${JSON.stringify(DRIFTED)}`), changed.diff);

  //  A call: refused, saying what changed and how to release it
  const call = await dshCall(broker.endpoint, 'echo', { message: 'hi' });
  assert.equal(call.isError, true);
  assert.deepEqual(call.error, { name: 'QuarantinedToolError', code: 'QUARANTINED' });
  assert.match(call.content[0].text, /quarantined/);
  assert.match(call.content[0].text, /dsh pins accept echo/);
  const steady = await dshCall(broker.endpoint, 'steady', {});
  assert.equal(steady.content[0].text, 'v2: steady');

  //  dsh-mcp: told the list changed, lists it no more, and answers a call
  //  with the broker's refusal as a tool error
  await waitFor(() => facade.notifications.slice(notesBefore)
    .some((note) => note.method === 'notifications/tools/list_changed'), { what: 'list_changed' });
  assert.deepEqual(await listed(facade), ['steady']);
  assert.deepEqual(await listed(agentFacade), ['steady']);
  const mcpCall = await facade.request('tools/call', { name: 'echo', arguments: { message: 'hi' } });
  assert.equal(mcpCall.error, undefined);
  assert.equal(mcpCall.result.isError, true);
  assert.match(mcpCall.result.content[0].text, /quarantined/);

  //  Renderings for a model: gone from every format, with and without --agent
  for (const format of ['json', 'openai', 'anthropic', 'mcp', 'markdown']) {
    const { code, stdout } = await dsh(broker.endpoint, 'schemas', '--format', format);
    assert.equal(code, 0);
    assert.ok(!stdout.includes('"echo"') && !stdout.includes('### echo') && !stdout.includes(DRIFTED), format);
    assert.ok(stdout.includes('steady'), format);
  }
  const forAgent = JSON.parse((await dsh(broker.endpoint, 'schemas', '--agent', 'tester')).stdout);
  assert.deepEqual(forAgent.map((tool) => tool.name), ['steady']);
});

test('dsh pins accept releases it: listed again, and the call works with the new description', async () => {
  const accepted = await dsh(broker.endpoint, 'pins', 'accept', 'echo');
  assert.equal(accepted.code, 0, accepted.stderr);
  const entry = await waitFor(async () => {
    const found = await entryOf('echo');
    return found && found.quarantined === undefined && found;
  }, { what: 'echo to be released' });
  assert.equal(entry.description, DRIFTED);
  assert.equal(entry.digest, undefined);
  const echo = await dshCall(broker.endpoint, 'echo', { message: 'hi' });
  assert.equal(echo.isError, false);
  assert.equal(echo.content[0].text, 'v2: hi');
  await waitFor(async () => (await listed(facade)).includes('echo'), { what: 'echo in tools/list again' });
  const tool = (await facade.request('tools/list')).result.tools.find((item) => item.name === 'echo');
  assert.equal(tool.description, DRIFTED);
  assert.deepEqual(await listed(agentFacade), ['echo', 'steady']);
  const pins = JSON.parse((await dsh(broker.endpoint, 'pins', 'list', '--json')).stdout);
  const pin = pins.pins.find((item) => item.name === 'echo');
  assert.equal(pin.state, 'pinned');
  assert.notEqual(pin.digest, pinned);

  //  The watcher heard tool.accepted, then the plain entry by tool.updated,
  //  every seq in a row: one snapshot, no resync
  await waitFor(() => notices().some((notice) => notice.kind === 'tool.accepted'), { what: 'tool.accepted' });
  const seen = notices();
  const acceptedAt = seen.findIndex((notice) => notice.kind === 'tool.accepted');
  assert.equal(seen[acceptedAt].name, 'echo');
  assert.equal(seen[acceptedAt].digest, pin.digest);
  await waitFor(() => notices().slice(acceptedAt).some((notice) => notice.kind === 'tool.updated' &&
    notice.name === 'echo' && notice.tool.quarantined === undefined), { what: 'tool.updated after the accept' });
  const all = notices();
  assert.equal(all.filter((notice) => notice.kind === 'snapshot').length, 1);
  const events = all.filter((notice) => notice.kind !== 'snapshot');
  assert.equal(events[0].seq, all[0].seq + 1);
  for (let index = 1; index < events.length; index++)
    assert.equal(events[index].seq, events[index - 1].seq + 1, JSON.stringify(events.map((e) => [e.seq, e.kind])));
});
