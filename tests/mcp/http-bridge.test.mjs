//  dsh-mcp-bridge --url: a remote MCP server over Streamable HTTP. The
//  reference server (server-everything in its streamableHttp mode) sits
//  behind a small recording proxy, so the tests see what the bridge sent;
//  tiny HTTP servers stand in for a server that wants a bearer token, one
//  that answers garbage and one whose answer is too large.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { execFile } from 'node:child_process';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ListToolsRequestSchema, CallToolRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { bin, start, startBroker, stop, dshTools, dshCall, facadeClient, waitFor, assertBridged, freePort } from './helpers.mjs';

const everythingMain = path.join(path.dirname(bin.everything), '../@modelcontextprotocol/server-everything/dist/index.js');

let broker, serverPort, server, proxy, bridge, direct, facade;
const seen = [];               //  every request the proxy passed on: {method, headers, body}


function listen(handler) {
  return new Promise((resolve) => {
    const httpServer = http.createServer(handler);
    httpServer.listen(0, '127.0.0.1', () => resolve(httpServer));
  });
}

function urlOf(httpServer) {
  return `http://127.0.0.1:${httpServer.address().port}/mcp`;
}

async function startEverything() {
  const { child } = await start(process.execPath, [everythingMain, 'streamableHttp'], /listening on port/,
    { env: { PORT: String(serverPort) } });
  return child;
}

//  Passes every request on to server-everything and records it; when the
//  server is down the client's connection is dropped, as a gateway would.
function startProxy() {
  return listen((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method, headers: req.headers, body: body.toString() });
      const upstream = http.request({ host: '127.0.0.1', port: serverPort, path: req.url, method: req.method,
        headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
        answer.on('error', () => res.destroy());
        answer.on('aborted', () => res.destroy());
      });
      upstream.on('error', () => res.destroy());
      res.on('close', () => upstream.destroy());
      upstream.end(body);
    });
  });
}

function startHttpBridge(url, extra = [], ready = /serving \d+ tools/) {
  return start(bin.bridge, ['--broker', broker.endpoint, '-v', '--url', url, ...extra], ready)
    .then(({ child }) => child);
}

//  "serving" is printed when the bridge has handed its tools over; the
//  broker lists them a moment later.
function toolListed(name) {
  return waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name === name),
    { what: `${name} in the broker` });
}

function count(child, pattern) {
  return (child.log.match(pattern) || []).length;
}

before(async () => {
  broker = await startBroker();
  serverPort = await freePort();
  server = await startEverything();
  proxy = await startProxy();
  bridge = await startHttpBridge(urlOf(proxy), ['--name', 'everything']);
  await waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name === 'echo'),
    { what: 'the bridged tools' });
  direct = new Client({ name: 'dsh-tests', version: '0.1.0' });
  await direct.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${serverPort}/mcp`)));
  facade = await facadeClient(broker.endpoint);
});

after(async () => {
  await facade?.close();
  await direct?.close();
  await stop(bridge);
  await stop(server);
  proxy?.close();
  await stop(broker?.child);
});

test('the remote server\'s tools are in the broker, with their schemas', async () => {
  await assertBridged(direct, broker.endpoint);
});

test('the bridge speaks Streamable HTTP as the spec asks', async () => {
  const posts = seen.filter((request) => request.method === 'POST');
  const initialize = posts.find((request) => JSON.parse(request.body).method === 'initialize');
  assert.ok(initialize);
  assert.match(initialize.headers.accept, /application\/json/);
  assert.match(initialize.headers.accept, /text\/event-stream/);
  assert.match(initialize.headers['content-type'], /^application\/json/);
  assert.equal(initialize.headers['mcp-session-id'], undefined);
  const later = posts.filter((request) => request !== initialize);
  assert.ok(later.length >= 2);
  const session = later[0].headers['mcp-session-id'];
  assert.ok(session, 'requests after initialize carry the session id');
  for (const request of later) {
    assert.equal(request.headers['mcp-session-id'], session);
    assert.equal(request.headers['mcp-protocol-version'], '2025-06-18');
  }
  await waitFor(() => seen.some((request) => request.method === 'GET' &&
    /text\/event-stream/.test(request.headers.accept) && request.headers['mcp-session-id'] === session),
  { what: 'the GET event stream' });
});

//  The fields dsh carries: content, structuredContent, isError.
function comparable(result) {
  return { content: result.content, structuredContent: result.structuredContent, isError: result.isError ?? false };
}

for (const [name, args] of [
  ['echo', { message: 'ünïcødé ✓ "quoted" \\ and\nnewline' }],
  ['get-sum', { a: 1.5, b: -7 }],
  ['get-tiny-image', {}],
  ['get-structured-content', { location: 'Chicago' }],
]) {
  test(`${name} through the bridge is what the SDK's own HTTP client gets`, async () => {
    const want = await direct.callTool({ name, arguments: args });
    const got = await facade.callTool({ name, arguments: args });
    assert.equal(JSON.stringify(comparable(got)), JSON.stringify(comparable(want)));
  });
}

test('progress comes back over the SSE stream', async () => {
  const progress = [];
  const result = await facade.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 4 } },
    undefined, { onprogress: (update) => progress.push(update) });
  assert.equal(result.isError, false);
  assert.ok(progress.length >= 1, 'progress notifications arrived');
  assert.equal(progress.at(-1).total, 4);
});

test('a cancelled call reaches the server as notifications/cancelled', async () => {
  const controller = new AbortController();
  const call = facade.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 10, steps: 10 } },
    undefined, { signal: controller.signal, onprogress: () => controller.abort('test cancel') });
  await assert.rejects(call);
  await waitFor(() => seen.some((request) => request.method === 'POST' &&
    JSON.parse(request.body).method === 'notifications/cancelled'), { what: 'notifications/cancelled' });
  const echo = await dshCall(broker.endpoint, 'echo', { message: 'after the cancel' });
  assert.equal(echo.content[0].text, 'Echo: after the cancel');
});

test('a killed server fails the calls in flight with TOOL_GONE, and is bridged again when it is back', async () => {
  const sessions = count(bridge, /started a session/g);
  const calls = count(bridge, /tools\/call trigger-long-running-operation/g);
  const inFlight = dshCall(broker.endpoint, 'trigger-long-running-operation', { duration: 20, steps: 20 });
  await waitFor(() => count(bridge, /tools\/call trigger-long-running-operation/g) > calls,
    { what: 'the call to reach the bridge' });
  server.kill('SIGKILL');
  const result = await inFlight;
  assert.equal(result.error?.code, 'TOOL_GONE');
  await waitFor(() => count(bridge, /started a session/g) > sessions, { what: 'a new session attempt' });
  server = await startEverything();
  await waitFor(async () => (await dshTools(broker.endpoint)).some((tool) => tool.name === 'echo'),
    { what: 'the tools to come back', timeoutMs: 30000 });
  const echo = await dshCall(broker.endpoint, 'echo', { message: 'again' });
  assert.equal(echo.content[0].text, 'Echo: again');
  assert.equal(bridge.exitCode, null);
});

//  A server that wants a bearer token, built on the SDK, one session per
//  request (its stateless mode); every request's headers are recorded.
async function startTokenServer(token) {
  const requests = [];
  const httpServer = await listen(async (req, res) => {
    requests.push(req.headers);
    if (req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' });
      res.end(JSON.stringify({ error: 'unauthorized' }));
      return;
    }
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const mcp = new Server({ name: 'token-server', version: '1.0.0' }, { capabilities: { tools: {} } });
    mcp.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [{ name: 'whoami',
      inputSchema: { type: 'object', properties: { greeting: { type: 'string' } } } }] }));
    mcp.setRequestHandler(CallToolRequestSchema, async (request) => ({
      content: [{ type: 'text', text: `${request.params.arguments.greeting}, ${req.headers['x-caller'] ?? 'nobody'}` }],
    }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => { transport.close(); mcp.close(); });
    await mcp.connect(transport);
    await transport.handleRequest(req, res);
  });
  return { httpServer, requests };
}

test('--bearer-token-file and --header reach the server', async () => {
  const { httpServer, requests } = await startTokenServer('s3cret-token');
  const tokenFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dsh-httpc-')), 'token');
  fs.writeFileSync(tokenFile, '  s3cret-token\n');
  let authorized, refused;
  try {
    authorized = await startHttpBridge(urlOf(httpServer), ['--name', 'tokened', '--prefix', 'tokened__',
      '--bearer-token-file', tokenFile, '--header', 'X-Caller: the bridge']);
    await toolListed('tokened__whoami');
    const answer = await dshCall(broker.endpoint, 'tokened__whoami', { greeting: 'hello' });
    assert.equal(answer.content[0].text, 'hello, the bridge');
    assert.ok(requests.every((headers) => headers.authorization === 'Bearer s3cret-token'));
    //  Without the token: refused, logged, retried, never served
    refused = await startHttpBridge(urlOf(httpServer), ['--name', 'untokened', '--prefix', 'untokened__'],
      /HTTP 401/);
    await waitFor(() => count(refused, /restarting in/g) >= 2, { what: 'the refused bridge to back off' });
    assert.ok(!(await dshTools(broker.endpoint)).some((tool) => tool.name === 'untokened__whoami'));
    assert.equal(refused.exitCode, null);
  } finally {
    await stop(authorized);
    await stop(refused);
    httpServer.close();
    httpServer.closeAllConnections();
  }
});

//  A hand-made server that closes a call's SSE stream after one progress
//  event (id "e1", retry 200 ms) and gives the answer only on the GET that
//  resumes after it, as a 2025-11-25 server that makes its clients poll.
async function startPollingServer() {
  const gets = [];
  let callId;
  const httpServer = await listen((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const json = (status, body) => {
        res.writeHead(status, { 'content-type': 'application/json', 'mcp-session-id': 'polling-session' });
        res.end(JSON.stringify(body));
      };
      if (req.method === 'GET') {
        gets.push(req.headers);
        if (req.headers['last-event-id'] !== 'e1') return res.writeHead(405).end();
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(`id: e2\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: callId,
          result: { content: [{ type: 'text', text: 'resumed' }] } })}\n\n`);
        return;
      }
      if (req.method !== 'POST') return res.writeHead(405).end();
      const message = JSON.parse(Buffer.concat(chunks).toString());
      if (message.id === undefined) return res.writeHead(202).end();
      if (message.method === 'initialize') {
        return json(200, { jsonrpc: '2.0', id: message.id, result: { protocolVersion: '2025-06-18',
          capabilities: { tools: {} }, serverInfo: { name: 'polling', version: '1.0.0' } } });
      }
      if (message.method === 'tools/list') {
        return json(200, { jsonrpc: '2.0', id: message.id, result: { tools: [{ name: 'slow',
          inputSchema: { type: 'object' } }] } });
      }
      if (message.method === 'tools/call') {
        callId = message.id;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        //  A long comment first: the retry line is read where that line's
        //  digits still lie past its end (a parser that reads past the line
        //  waits 2000000... ms, capped at a minute, instead of 200)
        res.end(`: ${'0'.repeat(64)}\nid: e1\nretry: 200\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress',
          params: { progressToken: message.params._meta.progressToken, progress: 1, total: 2 } })}\n\n`);
        return;
      }
      json(200, { jsonrpc: '2.0', id: message.id, result: {} });
    });
  });
  return { httpServer, gets };
}

test('a call whose stream closes early is resumed with Last-Event-ID', async () => {
  const { httpServer, gets } = await startPollingServer();
  let child;
  try {
    child = await startHttpBridge(urlOf(httpServer), ['--name', 'polling', '--prefix', 'polling__']);
    await toolListed('polling__slow');
    //  The server asked for 200 ms: 10 s is a bound no resumption that
    //  honours it comes near
    const answer = await dshCall(broker.endpoint, 'polling__slow', {}, ['--timeout-ms', '10000']);
    assert.equal(answer.content?.[0]?.text, 'resumed', JSON.stringify(answer));
    assert.ok(gets.some((headers) => headers['last-event-id'] === 'e1' &&
      headers['mcp-session-id'] === 'polling-session'));
  } finally {
    await stop(child);
    httpServer.close();
    httpServer.closeAllConnections();
  }
});

//  A hand-made server that uses the framing a client must take: pretty
//  JSON, a batch array with a notification before the answer, and a call
//  answered on an SSE stream with CRLF line ends, a comment, an event of
//  another type, data over two lines, all sent a few bytes at a time.
test('every framing the transport allows reaches the bridge as whole messages', async () => {
  const tricky = 'a } " ] [ { tricky\nstring \\';
  const httpServer = await listen((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', async () => {
      if (req.method !== 'POST') return res.writeHead(405).end();
      const message = JSON.parse(Buffer.concat(chunks).toString());
      if (message.id === undefined) return res.writeHead(202).end();
      const pretty = (body) => {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'mcp-session-id': 'framed' });
        res.end(JSON.stringify(body, null, 2));
      };
      const answer = (result) => ({ jsonrpc: '2.0', id: message.id, result });
      if (message.method === 'initialize') {
        return pretty(answer({ protocolVersion: '2025-06-18', capabilities: { tools: {} },
          serverInfo: { name: 'framed', version: '1.0.0' } }));
      }
      if (message.method === 'tools/list') {
        return pretty([{ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'hi' } },
          answer({ tools: [{ name: 'tricky', inputSchema: { type: 'object' } }] })]);
      }
      if (message.method !== 'tools/call') return pretty(answer({}));
      const text = JSON.stringify(answer({ content: [{ type: 'text', text: tricky }] }));
      const cut = text.indexOf('"result"');
      const stream = ': keep-alive\r\n\r\nevent: other\r\ndata: not a message\r\n\r\n' +
        `event: message\r\ndata: ${text.slice(0, cut)}\r\ndata: ${text.slice(cut)}\r\n\r\n`;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (let at = 0; at < stream.length; at += 7) {
        res.write(stream.slice(at, at + 7));
        await new Promise((resolve) => setImmediate(resolve));
      }
      res.end();
    });
  });
  let child;
  try {
    child = await startHttpBridge(urlOf(httpServer), ['--name', 'framed', '--prefix', 'framed__']);
    await toolListed('framed__tricky');
    const result = await dshCall(broker.endpoint, 'framed__tricky', {});
    assert.deepEqual(result.content, [{ type: 'text', text: tricky }]);
    assert.doesNotMatch(child.log, /ignoring a line/);
  } finally {
    await stop(child);
    httpServer.close();
    httpServer.closeAllConnections();
  }
});

test('a server that forgets the session (HTTP 400 to a ping) gets a new one', async () => {
  let sessions = 0;
  const httpServer = await listen((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      if (req.method !== 'POST') return res.writeHead(405).end();
      const message = JSON.parse(Buffer.concat(chunks).toString());
      if (message.id === undefined) return res.writeHead(202).end();
      const answer = (result) => {
        res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': `session-${sessions}` });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }));
      };
      if (message.method === 'initialize') {
        sessions++;
        return answer({ protocolVersion: '2025-06-18', capabilities: { tools: {} },
          serverInfo: { name: 'forgetful', version: '1.0.0' } });
      }
      if (message.method === 'tools/list') return answer({ tools: [{ name: 'noop', inputSchema: { type: 'object' } }] });
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'No valid session ID' } }));
    });
  });
  let child;
  try {
    //  Its first ping ends each session, maybe before the ready line
    child = await startHttpBridge(urlOf(httpServer), ['--name', 'forgetful', '--prefix', 'forgetful__',
      '--ping-ms', '200'], /started a session/);
    await waitFor(() => sessions >= 3, { what: 'new sessions' });
    assert.match(child.log, /HTTP 400 to a ping/);
    assert.match(child.log, /session ended/);
    assert.equal(child.exitCode, null);
  } finally {
    await stop(child);
    httpServer.close();
    httpServer.closeAllConnections();
  }
});

//  A bridge to url that logs what matches logged and keeps backing off.
async function assertBacksOff(url, logged) {
  const child = await startHttpBridge(url, ['--name', 'bad'], logged);
  try {
    await waitFor(() => count(child, /restarting in/g) >= 3, { what: 'the bridge to back off', timeoutMs: 20000 });
    assert.equal(child.exitCode, null, 'the bridge keeps running');
    assert.doesNotMatch(child.log, /serving \d+ tools/);
  } finally {
    await stop(child);
  }
}

test('a URL that refuses connections: logged, backed off, still running', async () => {
  const port = await freePort();
  await assertBacksOff(`http://127.0.0.1:${port}/mcp`, /Couldn't connect/);
});

test('a server answering garbage: logged, backed off, still running', async () => {
  const httpServer = await listen((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('this is { not "json');
  });
  try {
    await assertBacksOff(urlOf(httpServer), /not JSON-RPC/);
  } finally {
    httpServer.close();
    httpServer.closeAllConnections();
  }
});

test('a server answering HTML: logged, backed off, still running', async () => {
  const httpServer = await listen((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<html>a login page</html>');
  });
  try {
    await assertBacksOff(urlOf(httpServer), /without a JSON or event-stream answer/);
  } finally {
    httpServer.close();
    httpServer.closeAllConnections();
  }
});

test('an answer over 64 MiB, as JSON or as one SSE event: dropped, logged, backed off', async () => {
  const mib = Buffer.alloc(1024 * 1024, 'a');
  for (const sse of [false, true]) {
    const httpServer = await listen((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : 'application/json' });
      res.write(sse ? 'data: {"jsonrpc":"2.0","id":1,"result":{"x":"' : '{"jsonrpc":"2.0","id":1,"result":{"x":"');
      let sent = 0;
      const more = () => {
        while (sent < 65) {
          sent++;
          if (!res.write(mib)) {
            res.once('drain', more);
            return;
          }
        }
        res.end(sse ? '"}}\n\n' : '"}}');
      };
      res.on('error', () => {});
      more();
    });
    try {
      await assertBacksOff(urlOf(httpServer), sse ? /dropped an event larger than/ : /an answer larger than/);
    } finally {
      httpServer.close();
      httpServer.closeAllConnections();
    }
  }
});

test('bad options are refused', async () => {
  const url = 'http://127.0.0.1:1/mcp';
  for (const [args, message] of [
    [['--url', 'ftp://example.com/'], /needs an http or https URL/],
    [['--url', 'not a url'], /needs an http or https URL/],
    [['--url', url, '--', 'cat'], /not both/],
    [['--header', 'X: y', '--', 'cat'], /need --url/],
    [['--url', url, '--header', 'no colon'], /NAME: VALUE/],
    [['--url', url, '--header', 'X: a\r\nY: b'], /NAME: VALUE/],
    [['--url', url, '--bearer-token-file', '/nonexistent/token'], /not a readable file/],
  ]) {
    const { code, stderr } = await new Promise((resolve) => execFile(bin.bridge, args,
      (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stderr })));
    assert.equal(code, 2, args.join(' '));
    assert.match(stderr, message);
  }
});

test('a stopped bridge ends its session with DELETE', async () => {
  const session = seen.filter((request) => request.method === 'POST').at(-1).headers['mcp-session-id'];
  assert.ok(session);
  await stop(bridge);
  assert.ok(seen.some((request) => request.method === 'DELETE' && request.headers['mcp-session-id'] === session));
});
