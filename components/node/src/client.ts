//  The client: one DEALER on a broker's FRONT, many calls and queries in
//  flight at once, matched by callId (calls) and id (queries). Every call
//  resolves exactly once, by its result, a cancel, its own deadline or the
//  broker falling silent (Client liveness); nothing here ever hangs.
import { Dealer } from 'zeromq';
import { CurveKeys, CurveOptions, Handshake, loadCurve } from './curve.js';
import {
  Body, CallResult, DEFAULT_CALL_TIMEOUT_MS, DEFAULT_HEARTBEAT_MS, DEFAULT_LIVENESS, DshError, MAX_MESSAGE_BYTES,
  Outbox, brokerList, errorResult, frames, fromBroker, nextId, parse,
} from './wire.js';

//  How long past its deadline a call waits for the broker's TIMEOUT before
//  it makes its own (the C SDK's margin), and how long a query waits.
const CALL_MARGIN_MS = 2000;
const QUERY_TIMEOUT_MS = 5000;

export interface Progress {
  callId: string;
  progress: number;
  total?: number;
  message?: string;
}

export interface CallOptions {
  timeoutMs?: number;
  agent?: string;
  meta?: Record<string, unknown>;
  signal?: AbortSignal;
  onProgress?: (progress: Progress) => void;
  callId?: string;
}

export interface ToolEntry {
  name: string;
  description?: string;
  parameters: Record<string, unknown>;
  title?: string;
  annotations?: Record<string, boolean>;
  //  The broker's marks on a tool whose definition is not the pinned one
  //  (PROTOCOL.md, Pins): its calls are refused QUARANTINED until an admin
  //  accepts it (`dsh pins accept NAME`)
  quarantined?: boolean;
  digest?: string;
  pinnedDigest?: string;
  quarantineReason?: string;
  [key: string]: unknown;
}

//  True if the broker holds entry quarantined: it is listed (LIST, a
//  watcher's view) for operators, but no agent may be shown it.
export function isQuarantined(entry: ToolEntry | undefined): boolean {
  return entry?.quarantined === true;
}

export interface ClientOptions extends CurveOptions {
  agent?: string;
  timeoutMs?: number;
}

interface PendingCall {
  body: Body;
  resolve: (result: CallResult) => void;
  deadline: NodeJS.Timeout;
  onProgress?: (progress: Progress) => void;
  cancelled: boolean;
  //  Taken by zeromq onto a live connection: it may have run
  sent: boolean;
  detach?: () => void;
}

interface PendingQuery {
  command: string;
  body: Body;
  resolve: (body: Body) => void;
  reject: (error: Error) => void;
  deadline: NodeJS.Timeout;
}

export class Client {
  readonly endpoints: string[];
  private index = 0;
  private socket!: Dealer;
  private outbox!: Outbox;
  private handshake!: Handshake;
  private readonly curve?: CurveKeys;
  private reached = false;
  private heardAt = Date.now();
  private pingedAt = 0;
  private heartbeatMs = DEFAULT_HEARTBEAT_MS;
  private liveness = DEFAULT_LIVENESS;
  private readonly calls = new Map<string, PendingCall>();
  private readonly queries = new Map<string, PendingQuery>();
  private watch?: NodeJS.Timeout;
  private closed = false;

  constructor(broker?: string | string[], private readonly options: ClientOptions = {}) {
    this.endpoints = brokerList(broker);
    this.curve = loadCurve(options);
    this.open();
  }

  //  The front endpoint in use now.
  get endpoint(): string {
    return this.endpoints[this.index];
  }

  //  Calls a tool; resolves with its one result (errors are results too).
  call(name: string, args: unknown = {}, options: CallOptions = {}): Promise<CallResult> {
    const callId = options.callId ?? nextId('call');
    const timeoutMs = options.timeoutMs ?? this.options.timeoutMs;
    const agent = options.agent ?? this.options.agent;
    if (this.closed)
      return Promise.resolve(errorResult(callId, 'BROKER_GONE', 'Error: the client is closed'));
    if (options.signal?.aborted)
      return Promise.resolve(errorResult(callId, 'CANCELLED', 'Error: the call was cancelled'));
    //  What the broker could only answer with an ERROR that names no call
    //  (so the call would wait out its deadline) is answered here at once
    if (callId.length === 0 || Buffer.byteLength(callId) > 256 || callId.includes('\0'))
      return Promise.resolve(errorResult(callId, 'BAD_REQUEST', 'field "callId" must be 1-256 bytes without NUL'));
    const body: Body = { callId, name, arguments: args, agent, meta: options.meta, timeoutMs };
    let message: Uint8Array[];
    try {
      message = frames('CALL', body);
    } catch (error) {
      return Promise.resolve(errorResult(callId, 'BAD_REQUEST',
        `the call cannot be sent as msgpack: ${(error as Error).message}`));
    }
    return new Promise((resolve) => {
      const waitMs = (timeoutMs && timeoutMs > 0 ? timeoutMs : DEFAULT_CALL_TIMEOUT_MS) + CALL_MARGIN_MS;
      const call: PendingCall = {
        body, resolve, onProgress: options.onProgress, cancelled: false, sent: false,
        deadline: setTimeout(() => this.expire(callId), waitMs),
      };
      if (options.signal) {
        const signal = options.signal;
        const onAbort = () => this.cancel(callId);
        signal.addEventListener('abort', onAbort, { once: true });
        call.detach = () => signal.removeEventListener('abort', onAbort);
      }
      this.awaiting();
      this.calls.set(callId, call);
      this.send(callId, message);
    });
  }

  private send(callId: string, message: Uint8Array[]): void {
    const call = this.calls.get(callId);
    if (call)
      call.sent = false;
    this.outbox.send(message, () => this.calls.has(callId), () => {
      const open = this.calls.get(callId);
      if (open)
        open.sent = true;
    });
  }

  //  Cancels a call in flight: it resolves CANCELLED, whichever of its
  //  result and the broker's answer to the cancel comes first.
  cancel(callId: string): void {
    const call = this.calls.get(callId);
    if (!call || call.cancelled)
      return;
    call.cancelled = true;
    this.outbox.send(frames('CANCEL', { callId }));
  }

  //  Every tool entry, in registration order (LIST), quarantined ones too,
  //  with their marks (isQuarantined): leave those out of a prompt.
  async tools(): Promise<ToolEntry[]> {
    const reply = await this.request('LIST', {});
    return Array.isArray(reply.tools) ? reply.tools as ToolEntry[] : [];
  }

  //  One tool and its providers (GET), or undefined if no one serves it.
  async get(name: string): Promise<{ tool: ToolEntry; providers: string[] } | undefined> {
    try {
      const reply = await this.request('GET', { name });
      return { tool: reply.tool as ToolEntry, providers: (reply.providers ?? []) as string[] };
    } catch (error) {
      if (error instanceof DshError && error.code === 'UNKNOWN_TOOL')
        return undefined;
      throw error;
    }
  }

  //  Any FRONT request (HELLO, PING, SNAPSHOT, STATS, CHAIN, CONTROL...):
  //  resolves with the reply body, rejects with a DshError on ERROR, on
  //  silence (BROKER_GONE) or after timeoutMs (TIMEOUT).
  request(command: string, body: Body, timeoutMs = QUERY_TIMEOUT_MS): Promise<Body> {
    if (this.closed)
      return Promise.reject(new DshError('BROKER_GONE', 'the client is closed'));
    const id = nextId('q');
    const request = { ...body, id };
    return new Promise((resolve, reject) => {
      this.awaiting();
      this.queries.set(id, {
        command, body: request, resolve, reject,
        deadline: setTimeout(() => this.fail(id, new DshError('TIMEOUT',
          `no ${command} reply from the broker at ${this.endpoint} in ${timeoutMs} ms`)), timeoutMs),
      });
      this.outbox.send(frames(command, request));
    });
  }

  //  Closes the socket; open calls resolve BROKER_GONE, queries reject.
  close(): void {
    if (this.closed)
      return;
    this.closed = true;
    this.drop('the client was closed');
    clearInterval(this.watch);
    this.socket.close();
  }

  //  A new connection to the current endpoint.
  private open(): void {
    //  immediate: messages wait in the Outbox, not in libzmq, until a
    //  connection is up, so a call answered by its own deadline meanwhile is
    //  never sent (Outbox's live) and cannot run later
    const socket = new Dealer({
      immediate: true,
      linger: 0,
      maxMessageSize: MAX_MESSAGE_BYTES,
      heartbeatInterval: this.heartbeatMs,
      heartbeatTimeout: this.heartbeatMs * this.liveness,
      reconnectMaxInterval: this.heartbeatMs,
      ...this.curve,
    });
    this.socket = socket;
    this.outbox = new Outbox(socket);
    this.handshake = new Handshake(socket, this.curve !== undefined);
    this.reached = false;
    //  The broker's silence counts from when the connection comes up, not
    //  from the send: on a lossy link the handshakes alone may take longer
    //  than the liveness window
    socket.events.on('handshake', () => {
      if (socket === this.socket && !this.reached) {
        this.reached = true;
        this.heardAt = Date.now();
      }
    });
    socket.connect(this.endpoint);
    void this.receive(socket);
  }

  private async receive(socket: Dealer): Promise<void> {
    try {
      for await (const message of socket) {
        if (socket !== this.socket)
          break;
        const incoming = parse(message, () => false);
        if (!incoming || !fromBroker(incoming.command, incoming.body))
          continue;
        this.heardAt = Date.now();
        this.reached = true;
        this.dispatch(incoming.command, incoming.body);
      }
    } catch {
      //  The socket was closed: its calls were settled by whoever closed it
    }
  }

  private dispatch(command: string, body: Body): void {
    if (command === 'RESULT' || command === 'PROGRESS') {
      const callId = typeof body.callId === 'string' ? body.callId : '';
      const call = this.calls.get(callId);
      if (!call)
        return;
      if (command === 'PROGRESS') {
        if (call.onProgress && typeof body.progress === 'number')
          call.onProgress(body as unknown as Progress);
        return;
      }
      this.settle(callId, call.cancelled
        ? errorResult(callId, 'CANCELLED', 'Error: the call was cancelled')
        : body as unknown as CallResult);
      return;
    }
    if (command === 'PONG') {
      if (typeof body.heartbeatMs === 'number' && body.heartbeatMs > 0)
        this.heartbeatMs = body.heartbeatMs;
      if (typeof body.liveness === 'number' && body.liveness > 0)
        this.liveness = body.liveness;
    }
    const id = typeof body.id === 'string' ? body.id : undefined;
    const query = id !== undefined ? this.queries.get(id) : undefined;
    if (!query)
      return;
    if (command === 'ERROR')
      this.fail(id!, new DshError(String(body.code ?? 'BAD_REQUEST'), String(body.message ?? 'error')));
    else {
      this.queries.delete(id!);
      clearTimeout(query.deadline);
      query.resolve(body);
    }
  }

  private settle(callId: string, result: CallResult): void {
    const call = this.calls.get(callId);
    if (!call)
      return;
    this.calls.delete(callId);
    clearTimeout(call.deadline);
    call.detach?.();
    call.resolve(result);
  }

  //  A call's own deadline passed with no answer. If no connection was ever
  //  made, its CALL still waits to be sent (in zeromq's blocked send, where
  //  it cannot be taken back): a new socket drops it, so it never runs
  //  later, and takes the calls and queries still open.
  private expire(callId: string): void {
    this.settle(callId, errorResult(callId, 'TIMEOUT', 'Error: no reply from the broker in time'));
    if (this.reached || this.closed)
      return;
    this.socket.close();
    this.open();
    for (const [callId, call] of this.calls)
      this.send(callId, frames('CALL', call.body));
    for (const query of this.queries.values())
      this.outbox.send(frames(query.command, query.body));
  }

  private fail(id: string, error: Error): void {
    const query = this.queries.get(id);
    if (!query)
      return;
    this.queries.delete(id);
    clearTimeout(query.deadline);
    query.reject(error);
  }

  //  Something is awaited: silence counts from now if nothing was, and the
  //  liveness watch runs while anything is.
  private awaiting(): void {
    if (this.calls.size + this.queries.size === 0)
      this.heardAt = Date.now();
    if (!this.watch)
      this.watch = setInterval(() => this.check(), 100);
  }

  //  Client liveness: PING after heartbeatMs of silence, gone after
  //  heartbeatMs × liveness.
  private check(): void {
    if (this.calls.size + this.queries.size === 0) {
      clearInterval(this.watch);
      this.watch = undefined;
      return;
    }
    if (this.handshake.failure) {
      this.refused(this.handshake.failure);
      return;
    }
    const now = Date.now();
    const silence = now - this.heardAt;
    const others = this.endpoints.length > 1;
    if (silence >= this.heartbeatMs && now - this.pingedAt >= this.heartbeatMs) {
      this.pingedAt = now;
      this.outbox.send(frames('PING', { id: nextId('ping') }));
    }
    //  A broker never reached holds none of our calls: the only one is
    //  waited for until the calls' own deadlines; with others, one
    //  heartbeat (the connect timeout) is enough to move on
    if (!this.reached && !(others && silence >= this.heartbeatMs))
      return;
    if (silence >= this.heartbeatMs * this.liveness || (!this.reached && others))
      this.gone(`went silent (no answer for ${silence} ms)`);
  }

  //  The broker refused the handshake (the keys): no reply can come. With
  //  other brokers this one is passed over; alone, whatever awaits it is
  //  answered now instead of at its deadline, and the socket is made anew,
  //  so a CALL zeromq still holds for a connection never runs later.
  private refused(failure: string): void {
    if (this.endpoints.length > 1) {
      this.gone(`refused this client: ${failure}`);
      return;
    }
    const reason = `cannot talk to broker at ${this.endpoint}: ${failure}`;
    for (const [callId, call] of [...this.calls])
      this.settle(callId, errorResult(callId, call.cancelled ? 'CANCELLED' : 'BROKER_GONE', `Error: ${reason}`));
    for (const id of [...this.queries.keys()])
      this.fail(id, new DshError('BROKER_GONE', reason));
    this.socket.close();
    this.open();
  }

  //  The broker fell silent (or refused us, why says): calls that cannot
  //  have run (never taken onto a connection) and queries go to the next
  //  broker (or wait for this one, if it is the only one); other calls are
  //  answered BROKER_GONE (or CANCELLED).
  private gone(why: string): void {
    const old = this.endpoint;
    const others = this.endpoints.length > 1;
    const text = `Error: the broker at ${old} ${why} with the call in flight`;
    const resend: string[] = [];
    for (const [callId, call] of [...this.calls]) {
      if (call.cancelled)
        this.settle(callId, errorResult(callId, 'CANCELLED', 'Error: the call was cancelled'));
      else if (!call.sent)
        resend.push(callId);
      else
        this.settle(callId, errorResult(callId, 'BROKER_GONE', text));
    }
    const queries: Uint8Array[][] = [];
    for (const [id, query] of [...this.queries]) {
      if (others)
        queries.push(frames(query.command, query.body));
      else
        this.fail(id, new DshError('BROKER_GONE', `the broker at ${old} ${why}`));
    }
    this.socket.close();
    this.index = (this.index + 1) % this.endpoints.length;
    this.open();
    this.heardAt = Date.now();
    for (const callId of resend)
      this.send(callId, frames('CALL', this.calls.get(callId)!.body));
    for (const message of queries)
      this.outbox.send(message);
  }

  private drop(reason: string): void {
    for (const callId of [...this.calls.keys()])
      this.settle(callId, errorResult(callId, 'BROKER_GONE', `Error: ${reason}`));
    for (const id of [...this.queries.keys()])
      this.fail(id, new DshError('BROKER_GONE', reason));
  }
}
