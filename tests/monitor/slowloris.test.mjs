//  Slow clients against both HTTP servers (dsh-monitor and dsh-mcp --http,
//  both on components/http/dsh_http.c), as real processes: 300 connections
//  from 127.0.0.2 trickle a request's headers a byte a second, and open
//  again when closed, while a client on 127.0.0.1 makes its requests. Every
//  one of those must be answered, no trickling connection may outlive the
//  header deadline by much, and most are refused at once by the
//  per-address limit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { start, stop, startBroker, brokerPort, startMonitor, bin } from './helpers.mjs';

const TRICKLERS = 300;
const SLOW_FROM = '127.0.0.2';

let broker;

before(async () => {
  broker = await startBroker(await brokerPort());
});

after(async () => {
  await stop(broker?.child);
});

//  Trickles a request's headers to port from SLOW_FROM, a byte every
//  second, opening again a second after the server closes; until stop().
//  lifetimes: how long each connection the server closed had lived, in ms.
function trickle(port, count) {
  const lifetimes = [];
  const sockets = new Set();
  let stopped = false;
  const open = () => {
    if (stopped) return;
    const opened = Date.now();
    const socket = net.connect({ host: '127.0.0.1', port, localAddress: SLOW_FROM });
    sockets.add(socket);
    let timer = null;
    socket.on('connect', () => {
      socket.write('GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
      timer = setInterval(() => socket.write('a'), 1000);
    });
    socket.on('data', () => {});
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      sockets.delete(socket);
      if (stopped) return;
      lifetimes.push(Date.now() - opened);
      setTimeout(open, 1000);
    });
  };
  for (let index = 0; index < count; index++) open();
  return {
    lifetimes,
    open: () => sockets.size,
    stop() {
      stopped = true;
      for (const socket of sockets) socket.destroy();
    },
  };
}

//  request() every intervalMs for durationMs while the tricklers run;
//  resolves with each attempt's outcome (a status, or the error).
async function legitimate(request, durationMs, intervalMs) {
  const outcomes = [];
  const until = Date.now() + durationMs;
  while (Date.now() < until) {
    const began = Date.now();
    try {
      outcomes.push(await request(AbortSignal.timeout(4000)));
    } catch (error) {
      outcomes.push(String(error));
    }
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, intervalMs - (Date.now() - began))));
  }
  return outcomes;
}

async function underAttack(port, request, { durationMs, deadlineMs }) {
  const attack = trickle(port, TRICKLERS);
  try {
    //  Let the connections pile up first
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const outcomes = await legitimate(request, durationMs, 1500);
    assert.deepEqual(outcomes, outcomes.map(() => 200), 'every legitimate request is answered');
    assert.ok(outcomes.length >= 4, `${outcomes.length} requests made`);
    //  Refused at once (the per-address limit), or closed at the deadline
    const lifetimes = attack.lifetimes;
    assert.ok(lifetimes.length > TRICKLERS / 2, `${lifetimes.length} trickling connections closed`);
    const longest = Math.max(...lifetimes);
    assert.ok(longest < deadlineMs + 3000, `a trickling connection lived ${longest} ms`);
    assert.ok(lifetimes.some((ms) => ms >= deadlineMs - 500),
      'some trickling connections were served until their header deadline');
  } finally {
    attack.stop();
  }
}

test('dsh-monitor answers its client while 300 connections trickle headers', async () => {
  const monitor = await startMonitor(broker.endpoint, ['--http-header-ms', '3000', '--http-per-address', '64']);
  try {
    const port = Number(new URL(monitor.url).port);
    await underAttack(port, async (signal) => {
      const response = await fetch(monitor.url + '/api/stats', { signal });
      await response.text();
      return response.status;
    }, { durationMs: 7000, deadlineMs: 3000 });
  } finally {
    await stop(monitor.child);
  }
  assert.equal(monitor.child.exitCode, 0, monitor.child.log);
});

test('dsh-mcp --http answers its client while 300 connections trickle headers', async () => {
  //  The defaults: 72 connections from one address, headers within 10 s
  const { child, match } = await start(bin.facade, ['--broker', broker.endpoint, '--http', '127.0.0.1:0'],
    /serving MCP over HTTP at (http:\/\/\S+\/mcp)/);
  const url = match[1];
  try {
    const port = Number(new URL(url).port);
    let id = 0;
    await underAttack(port, async (signal) => {
      const response = await fetch(url, { method: 'POST', signal,
        headers: { 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'slowloris-test', version: '1' } } }) });
      await response.text();
      return response.status;
    }, { durationMs: 11500, deadlineMs: 10000 });
  } finally {
    await stop(child);
  }
});
