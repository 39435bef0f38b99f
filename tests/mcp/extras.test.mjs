//  Resources, prompts, completion, logging, roots and task-required tools
//  of a bridged server-everything, reached by an SDK client through
//  dsh-mcp (issue 13, "Resources and prompts", bug 4).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LoggingMessageNotificationSchema, ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { startBroker, startBridge, stop, dshTools, dshCall, directClient, facadeClient, waitFor } from './helpers.mjs';

let broker, bridge, client, direct, workspace;

before(async () => {
  workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'dsh extras '));
  broker = await startBroker();
  bridge = await startBridge(broker.endpoint, ['--prefix', 'ev__', '--root', workspace]);
  await waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name.startsWith('mcp-gateway.')),
    { what: 'the gateway tool' });
  client = await facadeClient(broker.endpoint);
  direct = await directClient();
});

after(async () => {
  await client?.close();
  await direct?.close();
  await stop(bridge);
  await stop(broker?.child);
  fs.rmSync(workspace, { recursive: true, force: true });
});

test('dsh-mcp offers resources, prompts, completions and logging', () => {
  const capabilities = client.getServerCapabilities();
  assert.deepEqual(capabilities.resources, { listChanged: true });
  assert.deepEqual(capabilities.prompts, { listChanged: true });
  assert.ok(capabilities.completions);
  assert.ok(capabilities.logging);
});

test('the gateway is in the registry with the catalog, and not an MCP tool', async () => {
  const gateway = (await dshTools(broker.endpoint)).find((tool) => tool.name === 'mcp-gateway.mcp-everything');
  assert.ok(gateway, 'the gateway entry');
  assert.equal(gateway.mcpGateway.prefix, 'ev__');
  assert.equal(gateway.mcpGateway.resources.length, 7);
  assert.equal(gateway.mcpGateway.prompts.length, 4);
  const { tools } = await client.listTools();
  assert.ok(tools.some((tool) => tool.name === 'ev__echo'));
  assert.ok(!tools.some((tool) => tool.name.startsWith('mcp-gateway.')));
});

test('resources: list, read text, templates, read a blob', async () => {
  const { resources } = await client.listResources();
  const expected = (await direct.listResources()).resources;
  assert.equal(resources.length, 7);
  assert.deepEqual(resources, expected);
  const text = await client.readResource({ uri: resources[0].uri });
  assert.deepEqual(text, await direct.readResource({ uri: resources[0].uri }));
  assert.ok(text.contents[0].text.length > 0);

  const { resourceTemplates } = await client.listResourceTemplates();
  assert.deepEqual(resourceTemplates, (await direct.listResourceTemplates()).resourceTemplates);
  const blobTemplate = resourceTemplates.find((template) => template.uriTemplate.includes('/blob/'));
  const uri = blobTemplate.uriTemplate.replace('{resourceId}', '3');
  const blob = await client.readResource({ uri });
  assert.equal(blob.contents[0].uri, uri);
  assert.match(Buffer.from(blob.contents[0].blob, 'base64').toString(), /^Resource 3: This is a base64 blob/);
});

test('a resource no server has is the server\'s own error', async () => {
  const uri = 'demo://resource/static/document/no-such.md';
  const theirs = await direct.readResource({ uri }).catch((error) => error);
  const ours = await client.readResource({ uri }).catch((error) => error);
  assert.ok(theirs instanceof Error && ours instanceof Error);
  assert.equal(ours.code, theirs.code);
  assert.equal(ours.message, theirs.message);
});

test('prompts: list, get with arguments', async () => {
  const { prompts } = await client.listPrompts();
  const theirs = (await direct.listPrompts()).prompts;
  assert.deepEqual(prompts.map((prompt) => prompt.name).sort(),
    theirs.map((prompt) => 'ev__' + prompt.name).sort());
  const got = await client.getPrompt({ name: 'ev__args-prompt', arguments: { city: 'Lyon', state: 'Rhône' } });
  assert.deepEqual(got, await direct.getPrompt({ name: 'args-prompt', arguments: { city: 'Lyon', state: 'Rhône' } }));
  assert.match(got.messages[0].content.text, /Lyon/);
});

test('completion of a prompt argument', async () => {
  const completed = await client.complete({ ref: { type: 'ref/prompt', name: 'ev__completable-prompt' },
    argument: { name: 'department', value: 'Eng' } });
  assert.deepEqual(completed.completion.values, ['Engineering']);
  const next = await client.complete({ ref: { type: 'ref/prompt', name: 'ev__completable-prompt' },
    argument: { name: 'name', value: '' }, context: { arguments: { department: 'Sales' } } });
  assert.deepEqual(next.completion.values, ['David', 'Eve', 'Frank']);
});

test('logging/setLevel reaches the server, and its log messages reach the client', async () => {
  const messages = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => { messages.push(notification.params); });
  assert.deepEqual(await client.setLoggingLevel('debug'), {});
  await waitFor(() => /-> logging\/setLevel/.test(bridge.log), { what: 'the bridge forwarding setLevel' });
  //  What the server logged before (roots, at its start) comes first
  await waitFor(() => messages.some((message) => /Roots updated/.test(message.data)), { what: 'the roots log message' });
  const before = messages.length;
  await client.callTool({ name: 'ev__toggle-simulated-logging', arguments: {} });
  await waitFor(() => messages.slice(before).some((message) => /message/i.test(message.data)),
    { what: 'a simulated log message' });
  await client.callTool({ name: 'ev__toggle-simulated-logging', arguments: {} });
  assert.ok(messages.every((message) => typeof message.level === 'string'));
});

test('a new resource on the server is resources/list_changed for the client', async () => {
  let changed = 0;
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => { changed++; });
  const data = 'data:text/plain;base64,' + Buffer.from('hello from dsh\n'.repeat(20)).toString('base64');
  const result = await client.callTool({ name: 'ev__gzip-file-as-resource',
    arguments: { name: 'hello.txt.gz', data, outputType: 'resourceLink' } });
  assert.ok(!result.isError, JSON.stringify(result));
  await waitFor(() => changed > 0, { what: 'notifications/resources/list_changed' });
  const uri = 'demo://resource/session/hello.txt.gz';
  await waitFor(async () => (await client.listResources()).resources.some((resource) => resource.uri === uri),
    { what: 'the new resource in resources/list' });
  const read = await client.readResource({ uri });
  assert.ok(read.contents[0].blob.length > 0);
});

test('roots/list is answered with the workspace, and the roots tool is served', async () => {
  const tools = await dshTools(broker.endpoint);
  assert.ok(tools.some((tool) => tool.name === 'ev__get-roots-list'));
  const result = await dshCall(broker.endpoint, 'ev__get-roots-list');
  const text = result.content[0].text;
  const uri = 'file://' + fs.realpathSync(workspace).split('/').map(encodeURIComponent).join('/');
  assert.ok(text.includes(uri), `${uri} in ${text}`);
  assert.match(bridge.log, /Roots updated: 1 root\(s\) received from client/);
});

test('a tool with taskSupport "required" is called as a task (bug 4)', async () => {
  const { tools } = await direct.listTools();
  assert.equal(tools.find((tool) => tool.name === 'simulate-research-query')?.execution?.taskSupport, 'required');
  const result = await client.callTool({ name: 'ev__simulate-research-query', arguments: { topic: 'tides' } });
  assert.ok(!result.isError, JSON.stringify(result));
  assert.match(result.content[0].text, /Research Report: tides/);
  assert.match(bridge.log, /runs as task/);
});
