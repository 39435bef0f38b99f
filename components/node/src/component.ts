//  A component: serves tools to one or more brokers (Component lifecycle).
//  For each broker it discovers the endpoints on FRONT, claims its id on
//  WORK, announces on PUB when asked (SYNC), heartbeats, and starts over when
//  the broker falls silent (a restart, a move): when to say HELLO and
//  HEARTBEAT and when the broker is gone is each session's link (link.ts,
//  the component profile); the sockets are the session's. Calls run
//  concurrently up to a limit, with progress and cancellation; each is
//  answered exactly once on the WORK connection it came on.
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { EventEmitter } from 'node:events';
import { Dealer, Publisher } from 'zeromq';
import { CurveKeys, CurveOptions, Handshake, loadCurve } from './curve.js';
import { Link } from './link.js';
import {
  Body, CallResult, ContentBlock, MAX_MESSAGE_BYTES, Outbox, PROTOCOL,
  WORK_FROM_BROKER, announceBodies, brokerList, errorResult, frames, nextId, pack, parse, resolveEndpoint,
} from './wire.js';
import type { ToolEntry } from './client.js';
import { TraceContext, inToolSpan, loadOtel, metaTrace } from './trace.js';

const QUEUE_LIMIT = 1024;

//  What a handler is given besides the arguments: the original's
//  ToolExecution, with the call's meta, its trace context (the broker's
//  span for the dispatch to this component: meta.traceparent and
//  meta.tracestate, read) and a progress reporter.
export interface ToolExecution {
  callId: string;
  name: string;
  arguments: unknown;
  agent?: string;
  signal?: AbortSignal;
  meta?: Record<string, unknown>;
  trace?: TraceContext;
  progress?: (progress: number, total?: number, message?: string) => void;
}

//  A handler returns content blocks (the original's shape) or a whole
//  result ({content, structuredContent?, isError?}); a throw is an error
//  result (TOOL_FAILED, or the error's own `code`).
export type ToolHandler = (args: any, exec: ToolExecution) =>
  Promise<ContentBlock[] | Partial<CallResult>> | ContentBlock[] | Partial<CallResult>;

export interface ComponentOptions extends CurveOptions {
  broker?: string | string[];
  id?: string;
  concurrency?: number;
  //  Where a refusal is told the moment it comes (default: a line on
  //  stderr), so that a refused registration is never silent, awaited or not
  log?: (line: string) => void;
}

//  What a broker refused: a tool (a name held with another schema, an entry
//  over a limit), the component id, or (handshake) this party's keys.
export interface ComponentRefusal {
  broker: string;
  tool?: string;
  component?: string;
  reason?: string;
  handshake?: boolean;
}

interface Job {
  link: Session;
  token: Uint8Array;
  body: Body;
  abort: AbortController;
}

export class Component extends EventEmitter {
  readonly id: string;
  readonly concurrency: number;
  readonly curve?: CurveKeys;
  private generation = Date.now();
  private readonly tools = new Map<string, { entry: ToolEntry; handler: ToolHandler }>();
  private readonly links: Session[];
  private readonly running = new Map<string, Job>();
  private readonly waiting: Job[] = [];
  private readonly log: (line: string) => void;
  private readonly told = new Set<string>();
  private stopped = false;
  private announcePending = false;

  constructor(options: ComponentOptions = {}) {
    super();
    this.id = options.id ?? `node-${hostname().replace(/[^\x21-\x7e]/g, '_')}-${process.pid}`;
    if (!/^[\x21-\x7e]{1,128}$/.test(this.id))
      throw new TypeError(`component id "${this.id}" must be 1-128 printable ASCII characters, no space`);
    this.concurrency = options.concurrency ?? 16;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > 65536)
      throw new TypeError('concurrency must be an integer from 1 to 65536');
    this.curve = loadCurve(options);
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.links = brokerList(options.broker).map((front) => new Session(this, front));
    //  The OpenTelemetry API, if the application has it, is loaded now, so
    //  that the first call does not wait for it
    void loadOtel();
  }

  //  Adds or replaces a tool; the brokers hear of it once the code that
  //  made the change has run (see changed).
  set(entry: ToolEntry, handler: ToolHandler): void {
    this.tools.set(entry.name, { entry, handler });
    this.changed();
  }

  delete(name: string): boolean {
    const had = this.tools.delete(name);
    if (had)
      this.changed();
    return had;
  }

  has(name: string): boolean {
    return this.tools.has(name);
  }

  get size(): number {
    return this.tools.size;
  }

  //  A broker refused something: logged at once (each refusal once until the
  //  tool set changes; a broker repeats it on every announce), then emitted
  //  as 'refused'.
  refused(refusal: ComponentRefusal): void {
    const key = JSON.stringify([refusal.broker, refusal.tool, refusal.component, refusal.reason, refusal.handshake]);
    if (!this.told.has(key) && this.told.size < 1000) {
      this.told.add(key);
      const reason = refusal.reason ?? 'refused';
      if (refusal.handshake)
        this.log(`${this.id}: ${reason}`);
      else if (refusal.tool !== undefined || refusal.component === undefined)
        this.log(`${this.id}: the broker at ${refusal.broker} refused tool ${refusal.tool ?? '(unnamed)'}: ${reason}`);
      else
        this.log(`${this.id}: the broker at ${refusal.broker} refused component id ${refusal.component}: ${reason} `
          + '(waiting until it is free)');
    }
    this.emit('refused', refusal);
  }

  //  Connects to every broker (idempotent).
  start(): void {
    for (const link of this.links)
      link.start();
  }

  //  WITHDRAW to every broker, then close (lingering up to a second so the
  //  WITHDRAW gets out). Calls still running are abandoned.
  async stop(): Promise<void> {
    if (this.stopped)
      return;
    this.stopped = true;
    for (const job of this.running.values())
      job.abort.abort();
    await Promise.all(this.links.map((link) => link.stop()));
  }

  //  Why a broker refuses this component's keys now, if one does.
  handshakeFailure(): string | undefined {
    return this.links.map((link) => link.handshakeFailure).find((failure) => failure !== undefined);
  }

  //  A tool too large for any ANNOUNCE to a broker: told once, as refusals
  //  are, since the broker never sees it to refuse it.
  tooLarge(broker: string, entry: unknown, size: number, maxMessageBytes: number): void {
    const name = String((entry as { name?: unknown })?.name);
    const key = JSON.stringify([broker, name, 'too large']);
    if (!this.told.has(key) && this.told.size < 1000) {
      this.told.add(key);
      this.log(`${this.id}: tool ${name} is ${size} bytes, more than an ANNOUNCE to the broker at ${broker} can `
        + `carry (its messages are at most ${maxMessageBytes} bytes): it is not announced there`);
    }
  }

  presence(command: string): Body {
    const body: Body = { component: this.id, generation: this.generation };
    if (command === 'ANNOUNCE') {
      body.concurrency = this.concurrency;
      //  What an operator is shown of us (PROTOCOL.md, ANNOUNCE)
      const host = hostname().replace(/[\x00-\x1f\x7f]/g, '?');
      if (host && Buffer.byteLength(host) <= 255) body.host = host;
      body.pid = process.pid;
      body.version = `dsh-node/0.1.0 node/${process.versions.node}`;
      body.uptimeMs = Math.floor(process.uptime() * 1000);
      body.tools = [...this.tools.values()].map(({ entry }) => entry);
    }
    return body;
  }

  //  Every change made in one run of the event loop (a loop of
  //  registrations, and the promise jobs it queued) goes in one ANNOUNCE,
  //  sent from setImmediate: a new generation, HELLO on WORK, ANNOUNCE.
  //  No later change can put it off, so it cannot be starved.
  private changed(): void {
    this.told.clear();
    if (this.announcePending)
      return;
    this.announcePending = true;
    setImmediate(() => {
      this.announcePending = false;
      if (this.stopped)
        return;
      this.generation = Math.max(this.generation + 1, Date.now());
      for (const link of this.links)
        link.reannounce();
    });
  }

  //  A CALL from link: run now, queue, or refuse OVERLOADED.
  accept(link: Session, token: Uint8Array, body: Body): void {
    const job: Job = { link, token, body, abort: new AbortController() };
    if (this.running.size < this.concurrency)
      void this.run(job);
    else if (this.waiting.length < QUEUE_LIMIT)
      this.waiting.push(job);
    else
      link.result(token, errorResult(String(body.callId ?? ''), 'OVERLOADED',
        `Error: component "${this.id}" is overloaded`));
  }

  //  CANCEL: abort a running handler, skip a waiting one. Keyed by token and
  //  link: tokens are each broker's own.
  cancel(link: Session, token: Uint8Array): void {
    const key = jobKey(link, token);
    const job = this.running.get(key);
    if (job) {
      job.abort.abort();
      return;
    }
    const index = this.waiting.findIndex((waiting) => jobKey(waiting.link, waiting.token) === key);
    if (index >= 0)
      this.waiting.splice(index, 1);
  }

  private async run(job: Job): Promise<void> {
    const key = jobKey(job.link, job.token);
    this.running.set(key, job);
    const callId = typeof job.body.callId === 'string' ? job.body.callId : '';
    const result = await this.execute(job, callId);
    this.running.delete(key);
    //  A cancelled call's result would be dropped by the broker anyway
    if (!job.abort.signal.aborted)
      job.link.result(job.token, result);
    const next = this.waiting.shift();
    if (next)
      void this.run(next);
  }

  private async execute(job: Job, callId: string): Promise<CallResult> {
    const name = typeof job.body.name === 'string' ? job.body.name : '';
    const tool = this.tools.get(name);
    if (!tool)
      return errorResult(callId, 'UNKNOWN_TOOL', `Error: unknown tool "${name}"`);
    const meta = isMap(job.body.meta) ? job.body.meta as Record<string, unknown> : undefined;
    const exec: ToolExecution = {
      callId, name,
      arguments: job.body.arguments,
      agent: typeof job.body.agent === 'string' ? job.body.agent : undefined,
      signal: job.abort.signal,
      meta,
      trace: metaTrace(meta),
      progress: (progress, total, message) => {
        if (!job.abort.signal.aborted && Number.isFinite(progress))
          job.link.send(frames('PROGRESS', { callId, progress, total, message }, job.token));
      },
    };
    //  In an execute_tool span when the application has OpenTelemetry (trace.ts)
    return inToolSpan(exec, async () => {
      try {
        const value = await tool.handler(job.body.arguments, exec);
        return toResult(callId, value);
      } catch (error) {
        const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code : 'TOOL_FAILED';
        const message = error instanceof Error && error.message ? error.message : 'handler failed';
        return errorResult(callId, /^[A-Z_]+$/.test(code) ? code : 'TOOL_FAILED', `Error: ${message}`);
      }
    });
  }
}

function jobKey(link: Session, token: Uint8Array): string {
  return `${link.serial}:${Buffer.from(token).toString('hex')}`;
}

function isMap(value: unknown): boolean {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof Uint8Array);
}

function toResult(callId: string, value: unknown): CallResult {
  if (Array.isArray(value))
    return { callId, content: value as ContentBlock[], isError: false };
  if (isMap(value)) {
    const result = value as Partial<CallResult>;
    return { ...result, callId, content: result.content ?? [], isError: result.isError === true };
  }
  if (value === undefined)
    return { callId, content: [], isError: false };
  return { callId, content: [{ type: 'text', text: String(value) }], isError: false };
}

let linkSerial = 0;

//  One broker's connections: FRONT for discovery, PUB for presence, WORK for
//  calls, made anew at each CONNECT of its link.
export class Session {
  readonly serial = ++linkSerial;
  private readonly link: Link;
  private front?: Dealer;
  private frontOut?: Outbox;
  private pub?: Publisher;
  private pubOut?: Outbox;
  private work?: Dealer;
  private workOut?: Outbox;
  private frontHandshake?: Handshake;
  private workHandshake?: Handshake;
  private helloId = '';
  private welcome?: Body;
  private toldProtocol = false;
  private timer?: NodeJS.Timeout;
  private maxMessageBytes = MAX_MESSAGE_BYTES;
  private workHandshakes = 0;
  private running = false;
  private stopping = false;

  constructor(private readonly owner: Component, readonly frontEndpoint: string) {
    this.link = new Link('component', [frontEndpoint]);
  }

  start(): void {
    if (this.running || this.stopping)
      return;
    this.running = true;
    this.link.start(Date.now());
    this.react();
    this.schedule();
  }

  //  The link's clock: a tick now, and a timer for when it next needs one.
  private schedule(): void {
    clearTimeout(this.timer);
    if (this.stopping)
      return;
    const due = this.link.tick(Date.now());
    this.react();
    if (due !== null)
      this.timer = setTimeout(() => this.schedule(), Math.max(due - Date.now(), 0));
  }

  //  Does what the link's events say, in order.
  private react(): void {
    for (const event of this.link.events()) {
      switch (event.type) {
        case 'CONNECT':
          this.discover();
          break;
        case 'SEND_HELLO':
          this.frontOut?.send(frames('HELLO', { id: this.helloId, component: this.owner.id }));
          break;
        case 'UP':
          this.attach(this.welcome!);
          break;
        case 'SEND_PING':
          this.publish('HEARTBEAT');
          break;
        default:
          break;
      }
    }
  }

  //  A fresh FRONT connection (the old one may lead to a host that is
  //  gone), read for the WELCOME to the HELLOs the link asks for.
  private discover(): void {
    this.close();
    const front = new Dealer({ linger: 0, maxMessageSize: MAX_MESSAGE_BYTES, ...this.owner.curve });
    this.front = front;
    this.frontOut = new Outbox(front);
    this.frontHandshake = this.watchHandshakes(front);
    front.connect(this.frontEndpoint);
    this.helloId = nextId('hello');
    this.toldProtocol = false;
    void (async () => {
      try {
        for await (const message of front) {
          const incoming = parse(message, () => false);
          if (incoming?.command === 'WELCOME' && incoming.body.id === this.helloId && front === this.front) {
            this.welcomed(incoming.body);
            if (this.work)
              return;
          }
        }
      } catch {
        //  closed while discovering
      }
    })();
  }

  //  A WELCOME to our HELLO: the link's, if it speaks dsh/1.
  private welcomed(welcome: Body): void {
    if (welcome.protocol !== 1) {
      //  Told once per connection; the link goes on saying HELLO
      if (!this.toldProtocol)
        this.owner.emit('error', new Error(`the broker at ${this.frontEndpoint} speaks protocol ${String(welcome.protocol)}, not 1`));
      this.toldProtocol = true;
      return;
    }
    //  An untrusted body (as the C SDK checks it): one that names no
    //  endpoints cannot be acted on; the link goes on saying HELLO
    const heartbeatMs = welcome.heartbeatMs;
    if (typeof welcome.announce !== 'string' || typeof welcome.work !== 'string' || typeof heartbeatMs !== 'number'
      || !Number.isInteger(heartbeatMs) || heartbeatMs <= 0 || heartbeatMs > 3600000)
      return;
    this.welcome = welcome;
    this.link.welcome(Date.now(), typeof welcome.broker === 'string' ? welcome.broker : undefined,
      welcome.heartbeatMs as number | undefined, welcome.liveness as number | undefined);
    this.react();
    this.schedule();
  }

  //  UP: connect PUB and WORK, claim the id; the FRONT is needed no more.
  private attach(welcome: Body): void {
    const heartbeatMs = this.link.heartbeatMs;
    const liveness = this.link.liveness;
    const maxMessageBytes = Number(welcome.maxMessageBytes);
    this.maxMessageBytes = Number.isInteger(maxMessageBytes) && maxMessageBytes > 0 && maxMessageBytes <= 2 ** 31 - 1
      ? maxMessageBytes : MAX_MESSAGE_BYTES;
    if (this.front && !this.front.closed)
      this.front.close();
    this.front = this.frontOut = this.frontHandshake = undefined;
    const zmtp = {
      linger: 1000,
      maxMessageSize: this.maxMessageBytes,
      //  No ZMTP heartbeats: HEARTBEAT and the broker's answers on WORK
      //  are the liveness (PROTOCOL.md, Liveness: connections)
      tcpKeepalive: 1,
      tcpKeepaliveIdle: Math.max(Math.floor(heartbeatMs * liveness / 1000), 1),
      tcpKeepaliveInterval: Math.max(Math.floor(heartbeatMs / 1000), 1),
      tcpKeepaliveCount: liveness,
      connectTimeout: heartbeatMs,
      reconnectMaxInterval: heartbeatMs,
      ...this.owner.curve,
    };
    const pub = new Publisher(zmtp);
    pub.connect(resolveEndpoint(String(welcome.announce), this.frontEndpoint));
    const work = new Dealer({ ...zmtp, routingId: `${this.owner.id} ${randomUUID()}` });
    this.pub = pub;
    this.pubOut = new Outbox(pub);
    this.work = work;
    this.workOut = new Outbox(work);
    this.workHandshakes = 0;
    //  A WORK connection made again (the link was cut) says HELLO again
    work.events.on('handshake', () => {
      this.workHandshakes += 1;
      if (this.workHandshakes > 1 && work === this.work)
        this.hello();
    });
    this.workHandshake = this.watchHandshakes(work);
    work.connect(resolveEndpoint(String(welcome.work), this.frontEndpoint));
    this.hello();
    void this.receive(work);
  }

  //  A handshake the broker refuses (the keys) is told as 'refused'
  //  ({broker, reason, handshake: true}); the link goes on trying.
  private watchHandshakes(socket: Dealer): Handshake {
    return new Handshake(socket, this.owner.curve !== undefined, (failure) => {
      if (socket === this.front || socket === this.work)
        this.owner.refused({ broker: this.frontEndpoint, reason: this.refusal(failure), handshake: true });
    });
  }

  private refusal(failure: string): string {
    return `cannot talk to broker at ${this.frontEndpoint}: ${failure}`;
  }

  //  Why the broker refuses this link's handshake now (discovery's, then
  //  WORK's), if it does.
  get handshakeFailure(): string | undefined {
    const failure = (this.work ? this.workHandshake : this.frontHandshake)?.failure;
    return failure === undefined ? undefined : this.refusal(failure);
  }

  private hello(): void {
    this.send(frames('HELLO', { component: this.owner.id, generation: this.owner.presence('HELLO').generation }));
  }

  //  HEARTBEAT, WITHDRAW, or the tool set: in one ANNOUNCE if it fits in the
  //  broker's messages, else in parts, back to back (PROTOCOL.md, The
  //  announce channel).
  private publish(command: string): void {
    if (!this.pub || this.pub.closed)
      return;
    const { tools, ...head } = this.owner.presence(command);
    const bodies = command !== 'ANNOUNCE' ? [pack(head)]
      : announceBodies(head, tools as unknown[], this.maxMessageBytes,
        (entry, size) => this.owner.tooLarge(this.frontEndpoint, entry, size, this.maxMessageBytes));
    for (const body of bodies)
      this.pubOut?.send([Buffer.from(PROTOCOL), Buffer.from(command), body]);
  }

  //  The tool set changed: HELLO with the new generation, then ANNOUNCE
  //  (an ANNOUNCE that overtakes the HELLO is dropped; the SYNC repeats it).
  reannounce(): void {
    if (!this.work)
      return;
    this.hello();
    this.publish('ANNOUNCE');
  }

  private async receive(work: Dealer): Promise<void> {
    try {
      for await (const message of work) {
        if (work !== this.work)
          return;
        const incoming = parse(message, (command) => command === 'CALL' || command === 'CANCEL');
        if (!incoming || !WORK_FROM_BROKER.has(incoming.command))
          continue;
        this.link.heard(Date.now());
        switch (incoming.command) {
          case 'SYNC':
            this.publish('ANNOUNCE');
            break;
          case 'CALL':
            this.owner.accept(this, incoming.token!, incoming.body);
            break;
          case 'CANCEL':
            this.owner.cancel(this, incoming.token!);
            break;
          case 'REFUSED':
            this.owner.refused({ ...(incoming.body as Omit<ComponentRefusal, 'broker'>), broker: this.frontEndpoint });
            break;
          default:
            break;
        }
      }
    } catch {
      //  closed
    }
  }

  send(message: Uint8Array[]): void {
    this.workOut?.send(message);
  }

  result(token: Uint8Array, result: CallResult): void {
    this.send(frames('RESULT', result, token));
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.pub && !this.pub.closed) {
      this.publish('WITHDRAW');
      //  PUB has no flush: give the WITHDRAW a moment to leave before close
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    this.close();
  }

  private close(): void {
    if (this.stopping)
      clearTimeout(this.timer);
    for (const socket of [this.front, this.pub, this.work])
      if (socket && !socket.closed)
        socket.close();
    this.front = this.pub = this.work = this.workOut = this.pubOut = this.frontHandshake = this.workHandshake = undefined;
  }
}
