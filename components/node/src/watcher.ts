//  The watcher: a live, gap-free view of a broker's tool set by the Clone
//  procedure (PROTOCOL.md, Watchers). It resynchronises on a gap or an
//  epoch change in the events, when its SUB connects again, when PING shows
//  another broker instance, and when the broker is silent (then it follows
//  the next broker in its list). When to say HELLO and PING, which broker,
//  and when it is gone or restarted is the link's (link.ts, the watcher
//  profile); the sockets and the view are the watcher's.
import { EventEmitter } from 'node:events';
import { Dealer, Subscriber } from 'zeromq';
import { CurveKeys, CurveOptions, Handshake, loadCurve } from './curve.js';
import { Link } from './link.js';
import {
  Body, DshError, MAX_MESSAGE_BYTES, Outbox, brokerList, frames, fromBroker,
  nextId, parse, resolveEndpoint, unpack,
} from './wire.js';
import type { ToolEntry } from './client.js';

//  After a SUB connection, the wait for the subscription to reach the PUB
//  before the snapshot is asked for (as the reference watcher does)
const SUBSCRIBE_SETTLE_MS = 200;
//  A SNAPSHOT with no reply is sent again, with the same id, after this,
//  doubling, at most the second (PROTOCOL.md, SNAPSHOT: a broker serves
//  snapshots in turn, and a watcher does not ask anew while one waits)
const SNAPSHOT_RETRY_MS = 2000;
const SNAPSHOT_RETRY_MAX_MS = 16000;

//  A change event as the broker publishes it. Every kind comes through,
//  also those that change no entry: component.*, and the pins' tool.changed
//  {digest, pinnedDigest?, reason, diff}, tool.accepted and tool.rejected
//  {digest, by}, tool.forgotten {by} (a quarantined tool's entry itself
//  changes by tool.updated, with its marks). Each counts its seq.
export interface ChangeEvent {
  kind: string;
  seq: number;
  epoch: number;
  component?: string;
  name?: string;
  tool?: ToolEntry;
  tools?: string[];
  reason?: string;
  digest?: string;
  pinnedDigest?: string;
  diff?: string;
  by?: string;
}

export interface SnapshotNotice {
  kind: 'snapshot';
  seq: number;
  epoch: number;
  broker: string;
  resync: boolean;
}

//  A broker refused the handshake: which, and why in the C SDK's words
//  ("cannot talk to broker at X: the broker refused this party's key...").
export interface Refusal {
  broker: string;
  reason: string;
}

//  Events: 'change' (ChangeEvent, after it is applied), 'snapshot'
//  (SnapshotNotice, after the view was replaced), 'refused' (Refusal: the
//  broker refused the keys; the watcher goes on trying, the next broker
//  of its list first).
export class Watcher extends EventEmitter {
  readonly endpoints: string[];
  private readonly link: Link;
  private readonly view = new Map<string, ToolEntry>();
  seq = 0;
  epoch = 0;
  resyncs = 0;
  private snapshots = 0;
  private front?: Dealer;
  private frontOut?: Outbox;
  private frontHandshake?: Handshake;
  private sub?: Subscriber;
  private brokerId = '';
  private helloId = '';
  private snapshotId = '';
  private syncing = true;
  private queued: ChangeEvent[] = [];
  private welcome?: Body;
  private pingTimer?: NodeJS.Timeout;
  private settleTimer?: NodeJS.Timeout;
  private snapshotTimer?: NodeJS.Timeout;
  private started?: Promise<void>;
  private closed = false;
  private readonly curve?: CurveKeys;

  constructor(broker?: string | string[], options: CurveOptions = {}) {
    super();
    this.endpoints = brokerList(broker);
    this.curve = loadCurve(options);
    this.link = new Link('watcher', this.endpoints);
  }

  //  Starts following; resolves once the first snapshot is in (rejects
  //  after timeoutMs without one, or at once with a DshError BROKER_GONE
  //  when its only broker refuses the keys, and keeps trying). With
  //  timeoutMs 0 it waits for the snapshot however long it takes.
  start(timeoutMs = 10000): Promise<void> {
    if (!this.started) {
      this.started = new Promise((resolve) => this.once('snapshot', () => resolve()));
      this.link.start(Date.now());
      this.react();
      this.pingTimer = setInterval(() => this.tick(), 100);
    }
    if (timeoutMs <= 0 || this.synced)
      return this.started;
    let onRefused!: (refusal: Refusal) => void;
    const refused = new Promise<never>((_, reject) => {
      onRefused = (refusal) => {
        if (this.endpoints.length === 1)
          reject(new DshError('BROKER_GONE', refusal.reason));
      };
      this.on('refused', onRefused);
      //  A refusal told before this wait began, and still holding
      if (this.frontHandshake?.failure)
        onRefused({ broker: this.endpoint, reason: this.refusal(this.frontHandshake.failure) });
    });
    return withTimeout(Promise.race([this.started, refused]), timeoutMs, 'no snapshot from the broker')
      .finally(() => this.off('refused', onRefused));
  }

  //  The tool entries, in registration order, quarantined ones too (with
  //  their marks).
  tools(): ToolEntry[] {
    return [...this.view.values()];
  }

  get(name: string): ToolEntry | undefined {
    return this.view.get(name);
  }

  //  Whether the first snapshot is in.
  get synced(): boolean {
    return this.snapshots > 0;
  }

  get endpoint(): string {
    return this.link.endpoint ?? this.endpoints[0];
  }

  close(): void {
    this.closed = true;
    clearInterval(this.pingTimer);
    clearTimeout(this.snapshotTimer);
    this.closeSockets();
  }

  private closeSockets(): void {
    this.closeSub();
    if (this.front && !this.front.closed)
      this.front.close();
    this.front = this.frontOut = this.frontHandshake = undefined;
  }

  //  The SUB goes, and the view's session with it: step 1 follows.
  private closeSub(): void {
    clearTimeout(this.settleTimer);
    clearTimeout(this.snapshotTimer);
    this.snapshotId = '';
    if (this.sub && !this.sub.closed)
      this.sub.close();
    this.sub = undefined;
    this.brokerId = '';
    this.syncing = true;
    this.queued = [];
  }

  //  Does what the link's events say, in order.
  private react(): void {
    for (const event of this.link.events()) {
      switch (event.type) {
        case 'CONNECT':
          this.discover();
          break;
        case 'SEND_HELLO':
          this.frontOut?.send(frames('HELLO', { id: this.helloId }));
          break;
        case 'SEND_PING':
          this.frontOut?.send(frames('PING', { id: nextId('ping') }));
          break;
        case 'UP':
          this.attach(this.welcome!);
          break;
        case 'RESTARTED':
          //  Step 1 again, HELLO with a new id: the events endpoint may have moved
          this.closeSub();
          this.helloId = nextId('hello');
          break;
        default:
          break;
      }
    }
  }

  //  Step 1 (CONNECT): a new FRONT, to say HELLO on until WELCOME.
  private discover(): void {
    this.closeSockets();
    if (this.closed)
      return;
    const front = new Dealer({ linger: 0, maxMessageSize: MAX_MESSAGE_BYTES, ...this.curve });
    this.front = front;
    this.frontOut = new Outbox(front);
    this.frontHandshake = new Handshake(front, this.curve !== undefined, (reason) => this.refusedBy(front, reason));
    front.connect(this.endpoint);
    this.helloId = nextId('hello');
    void this.receiveFront(front);
  }

  private async receiveFront(front: Dealer): Promise<void> {
    try {
      for await (const message of front) {
        if (front !== this.front)
          return;
        const incoming = parse(message, () => false);
        if (!incoming || !fromBroker(incoming.command, incoming.body))
          continue;
        const now = Date.now();
        this.link.heard(now);
        const { command, body } = incoming;
        if (command === 'WELCOME' && body.id === this.helloId && !this.brokerId && body.protocol === 1
          && typeof body.events === 'string') {
          this.welcome = body;
          this.link.welcome(now, typeof body.broker === 'string' ? body.broker : undefined,
            body.heartbeatMs as number | undefined, body.liveness as number | undefined);
        } else if (command === 'PONG')
          this.link.pong(now, typeof body.broker === 'string' ? body.broker : undefined,
            body.heartbeatMs as number | undefined, body.liveness as number | undefined);
        else if (command === 'SNAPSHOT' && this.snapshotId !== '' && body.id === this.snapshotId)
          this.takeSnapshot(body);
        this.react();
      }
    } catch {
      //  closed
    }
  }

  private attach(welcome: Body): void {
    this.brokerId = String(welcome.broker);
    const heartbeatMs = this.link.heartbeatMs;
    const liveness = this.link.liveness;
    const sub = new Subscriber({
      linger: 0,
      maxMessageSize: Number(welcome.maxMessageBytes) || MAX_MESSAGE_BYTES,
      //  No ZMTP heartbeats: PING and PONG on FRONT are the liveness
      tcpKeepalive: 1,
      tcpKeepaliveIdle: Math.max(Math.floor(heartbeatMs * liveness / 1000), 1),
      tcpKeepaliveInterval: Math.max(Math.floor(heartbeatMs / 1000), 1),
      tcpKeepaliveCount: liveness,
      reconnectMaxInterval: heartbeatMs,
      ...this.curve,
    });
    this.sub = sub;
    sub.subscribe();
    //  Steps 2 and 5: every connection of the SUB, the first included, is
    //  followed by a snapshot once the subscription has reached the PUB
    sub.events.on('handshake', () => {
      if (sub !== this.sub)
        return;
      this.syncing = true;
      this.queued = [];
      clearTimeout(this.settleTimer);
      this.settleTimer = setTimeout(() => this.askSnapshot(), SUBSCRIBE_SETTLE_MS);
    });
    sub.connect(resolveEndpoint(String(welcome.events), this.endpoint));
    void this.receiveEvents(sub);
  }

  //  The broker at the front refused the keys: say so, and with other
  //  brokers in the list go to the next one.
  private refusedBy(front: Dealer, reason: string): void {
    if (front !== this.front)
      return;
    const broker = this.endpoint;
    if (this.endpoints.length > 1) {
      this.link.move(Date.now());
      this.react();
    }
    this.emit('refused', { broker, reason: this.refusal(reason, broker) });
  }

  private refusal(failure: string, broker = this.endpoint): string {
    return `cannot talk to broker at ${broker}: ${failure}`;
  }

  private askSnapshot(): void {
    this.syncing = true;
    this.snapshotId = nextId('snapshot');
    this.sendSnapshot(SNAPSHOT_RETRY_MS);
  }

  //  Sends the SNAPSHOT awaited, and again, with the same id, if no reply
  //  comes within waitMs: whichever reply comes first is taken.
  private sendSnapshot(waitMs: number): void {
    clearTimeout(this.snapshotTimer);
    const id = this.snapshotId;
    this.frontOut?.send(frames('SNAPSHOT', { id }));
    this.snapshotTimer = setTimeout(() => {
      if (!this.closed && this.snapshotId === id)
        this.sendSnapshot(Math.min(waitMs * 2, SNAPSHOT_RETRY_MAX_MS));
    }, waitMs);
  }

  private async receiveEvents(sub: Subscriber): Promise<void> {
    try {
      for await (const message of sub) {
        if (sub !== this.sub)
          return;
        if (message.length !== 2)
          continue;
        const body = unpack(message[1]);
        if (!body || typeof body.seq !== 'number' || typeof body.kind !== 'string')
          continue;
        const event = body as unknown as ChangeEvent;
        if (this.syncing)
          this.queued.push(event);
        else
          this.step(event);
      }
    } catch {
      //  closed
    }
  }

  //  Step 3: the snapshot replaces the view; queued events after it apply.
  private takeSnapshot(body: Body): void {
    //  A later reply to the same request (it was sent again) is not taken twice
    clearTimeout(this.snapshotTimer);
    this.snapshotId = '';
    this.view.clear();
    for (const item of Array.isArray(body.tools) ? body.tools : []) {
      const tool = (item as { tool?: ToolEntry }).tool;
      if (tool && typeof tool.name === 'string')
        this.view.set(tool.name, tool);
    }
    this.seq = Number(body.seq) || 0;
    this.epoch = Number(body.epoch) || 0;
    this.syncing = false;
    this.snapshots += 1;
    const resync = this.snapshots > 1;
    if (resync)
      this.resyncs += 1;
    const queued = this.queued;
    this.queued = [];
    this.emit('snapshot', { kind: 'snapshot', seq: this.seq, epoch: this.epoch, broker: this.endpoint, resync });
    for (const event of queued) {
      if (this.syncing)
        this.queued.push(event);
      else if (event.seq > this.seq || event.epoch !== this.epoch)
        this.step(event);
    }
  }

  //  Step 4: apply in order, or resync on a gap or a new epoch.
  private step(event: ChangeEvent): void {
    if (event.epoch !== this.epoch || event.seq > this.seq + 1) {
      this.queued = [];
      this.askSnapshot();
      return;
    }
    if (event.seq <= this.seq)
      return;
    this.seq = event.seq;
    if (event.name && (event.kind === 'tool.registered' || event.kind === 'tool.updated') && event.tool) {
      if (event.kind === 'tool.registered')
        this.view.delete(event.name);
      this.view.set(event.name, event.tool);
    } else if (event.name && event.kind === 'tool.unregistered')
      this.view.delete(event.name);
    this.emit('change', event);
  }

  //  Steps 1, 6 and 7: the link's clock (HELLO, PING, silence).
  private tick(): void {
    if (this.closed)
      return;
    this.link.tick(Date.now());
    this.react();
  }
}

export function withTimeout<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const timeout = new Promise<never>((_, reject) => {
    //  unref: a wait nobody needs any more (the registry was closed) must
    //  not keep the process alive
    timer = setTimeout(() => reject(new Error(`${what} in ${timeoutMs} ms`)), timeoutMs).unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
