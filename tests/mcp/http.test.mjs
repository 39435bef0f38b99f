//  dsh-mcp --http seen by the official SDK's Streamable HTTP client, and
//  by plain fetch for what the SDK never sends (no token, bad JSON).
//
//  dsh-mcp must print, on stderr, once it listens:
//      dsh-mcp: serving MCP over HTTP at http://HOST:PORT/mcp
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { bin, start, startBroker, stop, runInspector, waitFor } from './helpers.mjs';

const served = /serving MCP over HTTP at (http:\/\/\S+\/mcp)/;
const token = 'a-long-random-token-for-the-tests';

let broker, demo, facade, url, secured, securedUrl, scratch;

//  dsh-mcp with stdin kept open: an HTTP server must not depend on it.
function startFacade(args, stdin = 'pipe') {
  const child = spawn(bin.facade, args, { stdio: [stdin, 'pipe', 'pipe'] });
  child.log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`dsh-mcp did not serve HTTP:\n${child.log}`)), 20000);
    const onData = (data) => {
      child.log += data;
      const match = child.log.match(served);
      if (match) {
        clearTimeout(timer);
        resolve({ child, url: match[1] });
      }
    };
    child.stderr.on('data', onData);
    child.on('exit', (code) => reject(new Error(`dsh-mcp exited with ${code}:\n${child.log}`)));
  });
}

async function connect(target, headers = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
  const client = new Client({ name: 'dsh-tests', version: '0.1.0' });
  await client.connect(transport);
  return { client, transport };
}

function post(target, body, headers = {}) {
  return fetch(target, { method: 'POST', body,
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers } });
}

before(async () => {
  broker = await startBroker();
  ({ child: demo } = await start(bin.demo, ['--broker', broker.endpoint], /serving/));
  ({ child: facade, url } = await startFacade(['--broker', broker.endpoint, '--http', '127.0.0.1:0']));
  scratch = mkdtempSync(path.join(os.tmpdir(), 'dsh-http-'));
  writeFileSync(path.join(scratch, 'token'), `${token}\n`, { mode: 0o600 });
  ({ child: secured, url: securedUrl } = await startFacade(['--broker', broker.endpoint, '--http', '127.0.0.1:0',
    '--http-token-file', path.join(scratch, 'token')]));
});

after(async () => {
  await stop(secured);
  await stop(facade);
  await stop(demo);
  await stop(broker?.child);
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

test('the SDK client lists and calls tools over Streamable HTTP', async () => {
  const { client, transport } = await connect(url);
  try {
    assert.match(transport.sessionId, /^[\x21-\x7e]+$/);
    await waitFor(async () => (await client.listTools()).tools.some((tool) => tool.name === 'echo'),
      { what: 'the demo tools' });
    const result = await client.callTool({ name: 'echo', arguments: { message: 'over http' } });
    assert.deepEqual(result.content, [{ type: 'text', text: 'over http' }]);
  } finally {
    await client.close();
  }
});

test('progress arrives on the stream of the call it is about', async () => {
  const { client } = await connect(url);
  try {
    const steps = [];
    const result = await client.callTool({ name: 'count', arguments: { to: 5, step_ms: 20 } }, undefined,
      { onprogress: (progress) => steps.push(progress.progress) });
    assert.equal(result.isError, false);
    assert.ok(steps.length > 0, 'no progress notification reached the client');
  } finally {
    await client.close();
  }
});

test('the MCP inspector CLI lists and calls over Streamable HTTP', async () => {
  const list = await runInspector([url, '--transport', 'http', '--method', 'tools/list'], {});
  assert.equal(list.code, 0, list.stderr);
  assert.ok(JSON.parse(list.stdout).tools.some((tool) => tool.name === 'echo'));
  const call = await runInspector([url, '--transport', 'http', '--method', 'tools/call', '--tool-name', 'echo',
    '--tool-arg', 'message=inspected over http'], {});
  assert.equal(call.code, 0, call.stderr);
  assert.deepEqual(JSON.parse(call.stdout).content, [{ type: 'text', text: 'inspected over http' }]);
});

test('two clients get two sessions, and list_changed reaches each GET stream', async () => {
  const first = await connect(url);
  const second = await connect(url);
  try {
    assert.notEqual(first.transport.sessionId, second.transport.sessionId);
    let changed = [0, 0];
    first.client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed[0]++; });
    second.client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed[1]++; });
    //  The GET streams open after initialized; a request after it is answered
    //  once the session is fully up
    await first.client.listTools();
    await second.client.listTools();
    const { child: other } = await start(bin.demo, ['--broker', broker.endpoint, '--prefix', 'h_'], /serving/);
    try {
      await waitFor(() => changed[0] > 0 && changed[1] > 0, { what: 'list_changed on both sessions' });
    } finally {
      await stop(other);
    }
  } finally {
    await first.client.close();
    await second.client.close();
  }
});

test('DELETE ends a session: its id is then unknown (404)', async () => {
  const { client, transport } = await connect(url);
  const session = transport.sessionId;
  await transport.terminateSession();
  await client.close();
  const response = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    { 'mcp-session-id': session });
  assert.equal(response.status, 404);
});

test('bad JSON is -32700 with a null id; a request without a session is 400', async () => {
  const garbage = await post(url, '{"jsonrpc":"2.0","id":1,');
  assert.equal(garbage.status, 400);
  const body = await garbage.json();
  assert.equal(body.id, null);
  assert.equal(body.error.code, -32700);
  const orphan = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
  assert.equal(orphan.status, 400);
});

test('a foreign Origin is refused (DNS rebinding)', async () => {
  const response = await post(url, JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {} }),
    { origin: 'http://evil.example' });
  assert.equal(response.status, 403);
});

test('with --http-token-file every request needs the bearer token', async () => {
  const refused = await post(securedUrl, JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }));
  assert.equal(refused.status, 401);
  assert.match(refused.headers.get('www-authenticate'), /^Bearer/);
  await assert.rejects(connect(securedUrl, { authorization: 'Bearer wrong' }));
  const { client } = await connect(securedUrl, { authorization: `Bearer ${token}` });
  try {
    await waitFor(async () => (await client.listTools()).tools.some((tool) => tool.name === 'echo'),
      { what: 'the demo tools behind the token' });
  } finally {
    await client.close();
  }
});

test('with --http, stdin at end of file ends only the stdio session', async () => {
  const { child, url: daemonUrl } = await startFacade(['--broker', broker.endpoint, '--http', '127.0.0.1:0'],
    'ignore');
  try {
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(child.exitCode, null, 'still running');
    const { client } = await connect(daemonUrl);
    const result = await client.callTool({ name: 'echo', arguments: { message: 'daemon' } });
    assert.equal(result.content[0].text, 'daemon');
    await client.close();
  } finally {
    await stop(child);
  }
});

test('beyond loopback without a token, dsh-mcp refuses to start', async () => {
  const child = spawn(bin.facade, ['--broker', broker.endpoint, '--http', '0.0.0.0:0'],
    { stdio: ['pipe', 'pipe', 'pipe'] });
  let log = '';
  child.stderr.on('data', (data) => { log += data; });
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); resolve('hung'); }, 10000);
    child.on('exit', (exitCode) => { clearTimeout(timer); resolve(exitCode); });
  });
  assert.notEqual(code, 0);
  assert.notEqual(code, 'hung', 'dsh-mcp served 0.0.0.0 without a token');
  assert.match(log, /token/);
});
