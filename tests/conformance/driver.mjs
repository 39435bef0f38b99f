#!/usr/bin/env node
//  The Node conformance driver: `driver.mjs ENDPOINT[,ENDPOINT...]` reads
//  JSON requests, one a line, on stdin and answers each with one JSON line
//  on stdout, through @dsh/tools' Client and Watcher (components/node, built
//  with `npm ci && npm run build` there). Requests may be pipelined;
//  answers carry the request's id and may come in any order.
import readline from 'node:readline';

let Client;
let Watcher;
try {
  ({ Client, Watcher } = await import('../../components/node/dist/index.js'));
} catch (error) {
  process.stderr.write(`driver.mjs: @dsh/tools is not built (cd components/node && npm ci && npm run build): ${error.message}\n`);
  process.exit(2);
}

const endpoint = process.argv[2];
if (!endpoint) {
  process.stderr.write('usage: driver.mjs ENDPOINT[,ENDPOINT...]\n');
  process.exit(2);
}
const client = new Client(endpoint);
let watcher;
let watching;

function answer(object) {
  process.stdout.write(`${JSON.stringify(object)}\n`);
}

//  The fields every language's results are compared on, and the result as
//  the library gave it (wire), which the harness checks against the
//  protocol's definition and drops before comparing.
function outcome(id, result, progress) {
  return {
    id,
    isError: result.isError === true,
    code: result.error?.code ?? null,
    text: (result.content ?? []).filter((block) => block.type === 'text').map((block) => block.text).join('\n'),
    structured: result.structuredContent ?? null,
    progress,
    wire: { result },
  };
}

async function call(request, signal) {
  let progress = 0;
  const result = await client.call(request.name, request.arguments ?? {}, {
    timeoutMs: request.timeoutMs, agent: request.agent, signal, onProgress: () => { progress += 1; },
  });
  return outcome(request.id, result, progress);
}

async function bench(request) {
  const inflight = request.inflight ?? 64;
  const until = Date.now() + (request.seconds ?? 3) * 1000;
  let calls = 0;
  let errors = 0;
  const started = process.hrtime.bigint();
  const worker = async () => {
    while (Date.now() < until) {
      const result = await client.call(request.name, request.arguments ?? {});
      calls += 1;
      if (result.isError)
        errors += 1;
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { id: request.id, calls, errors, callsPerS: Math.round((calls / seconds) * 10) / 10 };
}

const ops = {
  async tools(request) {
    const entries = await client.tools();
    return { id: request.id, tools: entries.map((tool) => tool.name).sort(), wire: { tools: entries } };
  },
  call: (request) => call(request),
  async cancel(request) {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), request.afterMs ?? 0);
    return call(request, controller.signal);
  },
  async watch(request) {
    if (!watcher) {
      watcher = new Watcher(endpoint);
      watching = watcher.start(0);
    }
    try {
      await Promise.race([watching, new Promise((_, reject) => setTimeout(() => reject(new Error('no snapshot in 10 s')), 10000))]);
      return { id: request.id, ok: true };
    } catch (error) {
      return { id: request.id, ok: false, error: error.message };
    }
  },
  async watched(request) {
    const view = watcher ? watcher.tools() : [];
    const tools = view.map((tool) => tool.name).sort();
    return { id: request.id, tools, resyncs: watcher?.resyncs ?? 0, epoch: watcher?.epoch ?? 0, wire: { view } };
  },
  bench,
};

const open = new Set();
const lines = readline.createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (!line.trim())
    return;
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    answer({ id: null, error: `not JSON: ${error.message}` });
    return;
  }
  const op = ops[request.op];
  const work = op
    ? Promise.resolve().then(() => op(request)).catch((error) => ({ id: request.id, error: String(error.message ?? error) }))
    : Promise.resolve({ id: request.id, error: `unknown op "${request.op}"` });
  //  What the library received goes with the answer only when asked for
  const pending = work.then((reply) => {
    if (request.wire !== true)
      delete reply.wire;
    answer(reply);
  });
  open.add(pending);
  pending.finally(() => open.delete(pending));
});
lines.on('close', async () => {
  await Promise.allSettled([...open]);
  client.close();
  watcher?.close();
  process.exit(0);
});
