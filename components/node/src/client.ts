//  The client: one DEALER on a broker's FRONT, many calls and queries in
//  flight at once, matched by callId (calls) and id (queries). Every call
//  resolves exactly once, by its result, a cancel, its own deadline or the
//  broker falling silent (Client liveness); nothing here ever hangs. When to
//  PING, when the broker is gone or restarted and which broker comes next
//  is the link's (link.ts, the client profile); the socket is the client's.
//  What goes to the next broker is the client's own rules (PROTOCOL.md,
//  Client liveness): a call that cannot have run, or one to a tool that is
//  read-only or idempotent by the last LIST, until every broker has had it;
//  and a call answered UNKNOWN_TOOL when it is all the client awaits.
import { Dealer } from 'zeromq';
import { CurveKeys, CurveOptions, Handshake, loadCurve } from './curve.js';
import { Link } from './link.js';
import {
  Body, CallResult, DEFAULT_CALL_TIMEOUT_MS, DshError, MAX_MESSAGE_BYTES,
  Outbox, brokerList, errorResult, frames, fromBroker, nextId, parse,
} from './wire.js';

//  How long past its deadline a call waits for the broker's TIMEOUT before
//  the client answers it TIMEOUT itself (PROTOCOL.md, Execution semantics:
//  the C SDK's dsh_client_call_send margin), and how long a query waits.
const CALL_MARGIN_MS = 5000;
const QUERY_TIMEOUT_MS = 5000;
//  With several brokers: how old the list of tools whose calls may be sent
//  again can get before a call asks for it afresh
const TOOLS_MAX_AGE_MS = 30000;

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
  //  W3C trace context for the call (PROTOCOL.md, Trace context), sent as
  //  meta.traceparent and meta.tracestate: the broker's span for the call
  //  becomes a child of it. The one that comes back: resultTrace(result).
  traceparent?: string;
  tracestate?: string;
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
  name: string;
  body: Body;
  resolve: (result: CallResult) => void;
  deadline: NodeJS.Timeout;
  onProgress?: (progress: Progress) => void;
  cancelled: boolean;
  tried: Set<string>;         //  the brokers that have had it
  detach?: () => void;
}

interface PendingQuery {
  command: string;
  body: Body;
  resolve: (body: Body) => void;
  reject: (error: Error) => void;
  deadline: NodeJS.Timeout;
  tried: Set<string>;         //  the brokers that have had it
  //  A CONTROL, and a PINS that is not a list or show, change state: sent
  //  again, one could apply twice (Client liveness)
  decides: boolean;
}

export class Client {
  readonly endpoints: string[];
  private readonly link: Link;
  private socket?: Dealer;
  private outbox!: Outbox;
  private handshake!: Handshake;
  private readonly curve?: CurveKeys;
  private readonly calls = new Map<string, PendingCall>();
  private readonly queries = new Map<string, PendingQuery>();
  //  Kept at DOWN or RESTARTED for the connection that follows
  private resendCalls: string[] = [];
  private resendQueries: string[] = [];
  private watch?: NodeJS.Timeout;
  private closed = false;
  //  With several brokers: the tools whose calls may be sent again (their
  //  entries in the last LIST say readOnlyHint or idempotentHint), when
  //  they were last asked for (0: never), the client's own LISTs awaited,
  //  and whether the next connection asks at once (after a failover)
  private retrySafe = new Set<string>();
  private toolsAskedAt = 0;
  private readonly ownLists = new Set<string>();
  private toolsDue = false;

  constructor(broker?: string | string[], private readonly options: ClientOptions = {}) {
    this.endpoints = brokerList(broker);
    this.curve = loadCurve(options);
    this.link = new Link('client', this.endpoints);
    this.link.start(Date.now());
    this.react();
  }

  //  The front endpoint in use now.
  get endpoint(): string {
    return this.link.endpoint ?? this.endpoints[0];
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
    const meta = options.traceparent === undefined && options.tracestate === undefined ? options.meta
      : { ...options.meta, traceparent: options.traceparent, tracestate: options.tracestate };
    const body: Body = { callId, name, arguments: args, agent, meta, timeoutMs };
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
        name, body, resolve, onProgress: options.onProgress, cancelled: false, tried: new Set([this.endpoint]),
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
      //  Which calls may go again to another broker (Client liveness)
      this.askTools(false);
    });
  }

  private send(callId: string, message: Uint8Array[]): void {
    this.outbox.send(message, () => this.calls.has(callId));
  }

  //  With several brokers, asks (again, if force or its copy is old) which
  //  tools a failed-over call may be sent again for: a LIST of the client's
  //  own, answered in dispatch.
  private askTools(force: boolean): void {
    const now = Date.now();
    if (this.endpoints.length < 2 || (!force && this.toolsAskedAt && now - this.toolsAskedAt <= TOOLS_MAX_AGE_MS))
      return;
    const id = nextId('tools');
    this.ownLists.add(id);
    this.toolsAskedAt = now;
    this.outbox.send(frames('LIST', { id }));
  }

  //  A LIST's answer: a repeat is harmless for a read-only tool, and for one
  //  that says it is idempotent.
  private learnTools(tools: unknown[]): void {
    this.retrySafe = new Set();
    for (const entry of tools) {
      const tool = entry as ToolEntry;
      const annotations = tool?.annotations;
      if (typeof tool?.name === 'string' && annotations !== null && typeof annotations === 'object'
        && (annotations.readOnlyHint === true || annotations.idempotentHint === true))
        this.retrySafe.add(tool.name);
    }
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
        command, body: request, resolve, reject, tried: new Set([this.endpoint]),
        decides: command === 'CONTROL'
          || (command === 'PINS' && typeof body.op === 'string' && body.op !== 'list' && body.op !== 'show'),
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
    this.socket?.close();
  }

  //  Does what the link's events say, in order.
  private react(): void {
    for (const event of this.link.events()) {
      switch (event.type) {
        case 'CONNECT':
          this.connect(event.endpoint);
          break;
        case 'SEND_PING':
          this.outbox.send(frames('PING', { id: nextId('ping') }));
          break;
        case 'DOWN':
          this.failOver(event.endpoint, `went silent (no answer for ${event.silenceMs} ms)`, event.reached === true);
          break;
        case 'RESTARTED':
          this.failOver(event.endpoint, 'restarted', true);
          break;
        default:
          break;
      }
    }
  }

  //  CONNECT: a new socket to endpoint, and what was kept for it.
  private connect(endpoint: string): void {
    this.socket?.close();
    this.open(endpoint);
    const calls = this.resendCalls;
    const queries = this.resendQueries;
    this.resendCalls = [];
    this.resendQueries = [];
    //  The old broker's answers to the client's own LISTs will never come
    this.ownLists.clear();
    for (const callId of calls) {
      const call = this.calls.get(callId);
      if (call) {
        call.tried.add(endpoint);
        this.send(callId, frames('CALL', call.body));
      }
    }
    for (const id of queries) {
      const query = this.queries.get(id);
      if (query) {
        query.tried.add(endpoint);
        this.outbox.send(frames(query.command, query.body));
      }
    }
    //  After a failover the next broker is asked at once which tools may go again
    if (this.toolsDue) {
      this.toolsDue = false;
      this.askTools(true);
    }
  }

  //  A new connection to endpoint (the link's, or the same one again).
  private open(endpoint: string): void {
    //  immediate: messages wait in the Outbox, not in libzmq, until a
    //  connection is up, so a call answered by its own deadline meanwhile is
    //  never sent (Outbox's live) and cannot run later
    const socket = new Dealer({
      immediate: true,
      linger: 0,
      maxMessageSize: MAX_MESSAGE_BYTES,
      heartbeatInterval: this.link.heartbeatMs,
      heartbeatTimeout: this.link.heartbeatMs * this.link.liveness,
      reconnectMaxInterval: this.link.heartbeatMs,
      ...this.curve,
    });
    this.socket = socket;
    this.outbox = new Outbox(socket);
    this.handshake = new Handshake(socket, this.curve !== undefined);
    //  The broker's silence counts from when the connection comes up, not
    //  from the send: on a lossy link the handshakes alone may take longer
    //  than the liveness window
    socket.events.on('handshake', () => {
      if (socket === this.socket) {
        this.link.connected(Date.now());
        this.react();
      }
    });
    socket.connect(endpoint);
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
        this.link.heard(Date.now());
        this.dispatch(incoming.command, incoming.body);
        this.react();
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
      if (!call.cancelled && this.passOver(callId, call, body))
        return;
      this.settle(callId, call.cancelled
        ? errorResult(callId, 'CANCELLED', 'Error: the call was cancelled')
        : body as unknown as CallResult);
      return;
    }
    if (command === 'PONG')
      this.link.pong(Date.now(), typeof body.broker === 'string' ? body.broker : undefined,
        body.heartbeatMs as number | undefined, body.liveness as number | undefined);
    const id = typeof body.id === 'string' ? body.id : undefined;
    if (id !== undefined && this.ownLists.delete(id)) {
      if (command === 'TOOLS' && Array.isArray(body.tools))
        this.learnTools(body.tools);
      return;
    }
    const query = id !== undefined ? this.queries.get(id) : undefined;
    if (!query)
      return;
    if (command === 'TOOLS' && Array.isArray(body.tools)) {
      this.learnTools(body.tools);
      this.toolsAskedAt = Date.now();
    }
    if (command === 'ERROR')
      this.fail(id!, new DshError(String(body.code ?? 'BAD_REQUEST'), String(body.message ?? 'error')));
    else {
      this.queries.delete(id!);
      clearTimeout(query.deadline);
      query.resolve(body);
    }
  }

  //  UNKNOWN_TOOL from one of several brokers, for the only thing this
  //  client awaits: its view may lack what another's has (it restarted, or
  //  lost the component for a while), and nothing ran, so the call goes to
  //  the next broker that has not had it (a move without DOWN). With
  //  anything else in flight the answer is delivered: moving would drop it.
  //  True if the call went on.
  private passOver(callId: string, call: PendingCall, body: Body): boolean {
    const error = body.error as { code?: unknown } | undefined;
    if (error?.code !== 'UNKNOWN_TOOL' || this.endpoints.length < 2 || this.calls.size !== 1
      || this.queries.size !== 0 || call.tried.size >= this.endpoints.length)
      return false;
    this.resendCalls.push(callId);
    this.toolsDue = true;
    this.link.move(Date.now());
    this.react();
    return true;
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
    this.settle(callId, errorResult(callId, 'TIMEOUT', 'Error: no answer from the broker by the call\'s deadline'));
    if (this.link.reached || this.closed)
      return;
    this.socket?.close();
    this.open(this.endpoint);
    for (const [callId, call] of this.calls)
      this.send(callId, frames('CALL', call.body));
    for (const query of this.queries.values())
      this.outbox.send(frames(query.command, query.body));
    if (this.ownLists.size > 0) {
      this.ownLists.clear();
      this.askTools(true);
    }
  }

  private fail(id: string, error: Error): void {
    const query = this.queries.get(id);
    if (!query)
      return;
    this.queries.delete(id);
    clearTimeout(query.deadline);
    query.reject(error);
  }

  //  Something is awaited: the link watches the broker (silence counts from
  //  now if nothing was), and the liveness watch runs while anything is.
  private awaiting(): void {
    this.link.watch(Date.now(), true);
    this.react();
    if (!this.watch)
      this.watch = setInterval(() => this.check(), 100);
  }

  //  Client liveness: the link's clock, while anything is awaited.
  private check(): void {
    if (this.calls.size + this.queries.size === 0) {
      this.link.watch(Date.now(), false);
      clearInterval(this.watch);
      this.watch = undefined;
      return;
    }
    if (this.handshake.failure) {
      this.refused(this.handshake.failure);
      return;
    }
    this.link.tick(Date.now());
    this.react();
  }

  //  The broker refused the handshake (the keys): no reply can come. With
  //  other brokers this one is passed over; alone, whatever awaits it is
  //  answered now instead of at its deadline, and the socket is made anew,
  //  so a CALL zeromq still holds for a connection never runs later.
  private refused(failure: string): void {
    if (this.endpoints.length > 1) {
      this.failOver(this.endpoint, `refused this client: ${failure}`, this.link.reached);
      this.link.move(Date.now());
      this.react();
      return;
    }
    const reason = `cannot talk to broker at ${this.endpoint}: ${failure}`;
    for (const [callId, call] of [...this.calls])
      this.settle(callId, errorResult(callId, call.cancelled ? 'CANCELLED' : 'BROKER_GONE', `Error: ${reason}`));
    for (const id of [...this.queries.keys()])
      this.fail(id, new DshError('BROKER_GONE', reason));
    this.socket?.close();
    this.open(this.endpoint);
  }

  //  The broker at endpoint fell silent, restarted or refused us (why says):
  //  each call is kept for the next connection, until every broker has had
  //  it, when it cannot have run (the broker was never reached) or its tool
  //  is read-only or idempotent by the last LIST; other calls are answered
  //  BROKER_GONE (or CANCELLED). Queries are kept until every broker has had
  //  them, but one that decides (a CONTROL, a PINS accept, reject or forget),
  //  which may have applied at a broker reached, is answered BROKER_GONE.
  //  The next connection asks for LIST at once.
  private failOver(endpoint: string, why: string, reached: boolean): void {
    const text = `Error: the broker at ${endpoint} ${why} with the call in flight`;
    const count = this.endpoints.length;
    for (const [callId, call] of [...this.calls]) {
      if (call.cancelled)
        this.settle(callId, errorResult(callId, 'CANCELLED', 'Error: the call was cancelled'));
      else if (call.tried.size < count && (!reached || this.retrySafe.has(call.name)))
        this.resendCalls.push(callId);
      else
        this.settle(callId, errorResult(callId, 'BROKER_GONE', text));
    }
    this.toolsDue = count > 1;
    for (const [id, query] of [...this.queries]) {
      if (query.decides && reached)
        this.fail(id, new DshError('BROKER_GONE', `Error: the broker at ${endpoint} was lost with the ${query.command} `
          + 'in flight; it may or may not have been applied'));
      else if (query.tried.size < this.endpoints.length)
        this.resendQueries.push(id);
      else
        this.fail(id, new DshError('BROKER_GONE', `the broker at ${endpoint} ${why}`));
    }
  }

  private drop(reason: string): void {
    for (const callId of [...this.calls.keys()])
      this.settle(callId, errorResult(callId, 'BROKER_GONE', `Error: ${reason}`));
    for (const id of [...this.queries.keys()])
      this.fail(id, new DshError('BROKER_GONE', reason));
  }
}
