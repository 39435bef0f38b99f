//  What the monitor's tests share: a broker on a port of our choosing (so
//  that it can be restarted at the same endpoint), dsh-monitor, and reading
//  its HTTP and event stream. Process plumbing is tests/mcp's.
import path from 'node:path';
import { start, stop, freePort, freshStateDir, buildDir, bin } from '../mcp/helpers.mjs';

export { start, stop, freePort, buildDir, bin };
export const monitorBin = path.join(buildDir, 'components/monitor/dsh-monitor');

//  Its store (audit trail, pins) is in a directory of its own unless extra
//  names one: the default one keeps the pins of every earlier run.
//  env: variables of its own (its tracer's, OTEL_*).
export async function startBroker(port, extra = [], env = {}) {
  if (!extra.includes('--state-dir'))
    extra = [...freshStateDir(), ...extra];
  const endpoint = `tcp://127.0.0.1:${port}`;
  const { child } = await start(bin.broker, ['-e', endpoint, ...extra], /listening on tcp:/, { env });
  return { child, endpoint };
}

export async function brokerPort() {
  return freePort(4);
}

export async function startDemo(endpoint, id, extra = []) {
  const { child } = await start(bin.demo, ['--broker', endpoint, '--id', id, ...extra], /serving/);
  return child;
}

export async function startMonitor(endpoint, extra = []) {
  const { child, match } = await start(monitorBin, ['--broker', endpoint, '--http', '127.0.0.1:0', '--poll-ms', '200',
    ...extra], /dsh-monitor: serving (http:\/\/\S+)/);
  return { child, url: match[1].replace(/\/$/, '') };
}

//  Reads Server-Sent Events from url; next(name, test) resolves with the
//  data of the first event of that name (JSON-parsed) that passes test,
//  among those not yet taken.
//  A 503 (every stream taken) is tried again for a while: streams whose
//  clients went away are noticed at their next writes.
export async function openEvents(url, headers = {}, { retryMs = 10000 } = {}) {
  const giveUp = Date.now() + retryMs;
  let controller, response;
  for (;;) {
    controller = new AbortController();
    response = await fetch(url + '/api/events', { headers, signal: controller.signal });
    if (response.status !== 503 || Date.now() > giveUp) break;
    await response.text();
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (response.status !== 200) throw new Error(`/api/events answered ${response.status}`);
  const events = [];
  const waiters = [];
  const deliver = () => {
    for (let index = 0; index < waiters.length; index++) {
      const waiter = waiters[index];
      const found = events.findIndex((event) => event.name === waiter.name && waiter.test(event.data));
      if (found >= 0) {
        const [event] = events.splice(found, 1);
        waiters.splice(index--, 1);
        clearTimeout(waiter.timer);
        waiter.resolve(event.data);
      }
    }
  };
  (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of response.body) {
        buffer += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const name = (block.match(/^event: (.*)$/m) || [])[1];
          const data = (block.match(/^data: (.*)$/m) || [])[1];
          if (name && data !== undefined) events.push({ name, data: JSON.parse(data) });
        }
        deliver();
      }
    } catch { /* aborted */ }
  })();
  return {
    next(name, test = () => true, timeoutMs = 15000) {
      return new Promise((resolve, reject) => {
        const waiter = { name, test, resolve };
        waiter.timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          reject(new Error(`no "${name}" event in time`));
        }, timeoutMs);
        waiters.push(waiter);
        deliver();
      });
    },
    close() { controller.abort(); },
  };
}

export async function getJson(url, headers = {}) {
  const response = await fetch(url, { headers });
  if (response.status !== 200) throw new Error(`${url} answered ${response.status}`);
  return response.json();
}
