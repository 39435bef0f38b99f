//  The original dsh-tools `ToolRegistry` API, backed by a dsh broker:
//  register() serves the tool from this process as a component, get() and
//  schemas() read a watcher's live view, execute() calls through the broker
//  (its chain applies; an AbortSignal cancels), and tools/change fires on
//  the broker's change events. A `tools/execute` listener wraps calls made
//  through this registry, in this process, before they reach the broker.
import { Client, Progress, isQuarantined } from './client.js';
import { Component, ToolExecution, ToolHandler } from './component.js';
import { Watcher, ChangeEvent, SnapshotNotice } from './watcher.js';
import { ToolDefinition, ToolSchema } from './schema.js';
import { CallResult, ContentBlock, brokerList, errorResult, nextId, pack, retryAfterMs } from './wire.js';

export interface ToolRegistryOptions {
  //  Front endpoint(s): "tcp://h:p", "a,b" or a list; default $DSH_BROKER,
  //  else tcp://127.0.0.1:7570
  broker?: string | string[];
  //  The component id register() serves under (default node-HOST-PID)
  component?: string;
  //  How many registered handlers run at once (default 16)
  concurrency?: number;
  //  The agent id execute() calls as, unless a call names one
  agent?: string;
  //  execute()'s deadline unless a call gives one (default: the broker's)
  timeoutMs?: number;
  //  CURVE: this party's certificate (`dsh keygen` writes FILE and
  //  FILE_secret) and the broker's public one; default $DSH_CERT and
  //  $DSH_BROKER_CERT. Every socket of the registry uses them.
  cert?: string;
  brokerCert?: string;
  //  The certificate register()'s tools are served with, when it is not
  //  cert: a broker takes calls only from an agent key and tools only from
  //  a component key, so a registry that does both needs both
  componentCert?: string;
}

//  The original's execution and result shapes; callId may be left out here.
export interface ExecuteRequest {
  callId?: string;
  name: string;
  arguments?: unknown;
  agent?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
  onProgress?: (progress: Progress) => void;
}

export type ToolExecutionResult = CallResult;

export interface ExecuteOptions {
  signal?: AbortSignal;
  agent?: string;
  timeoutMs?: number;
  callId?: string;
  onProgress?: (progress: Progress) => void;
}

//  What tools/change listeners get: the broker's change event, or a
//  snapshot notice when the view was replaced whole (first sync, a gap, a
//  broker restart).
export type ToolsChange = ChangeEvent | SnapshotNotice;

export type ExecuteListener = (exec: ExecuteRequest & { callId: string },
  next: () => Promise<ToolExecutionResult>) => Promise<ToolExecutionResult> | ToolExecutionResult;

//  A disposer: withdraws the tool; resolves once the broker no longer lists
//  it from this process. `ready` resolves once the broker serves the tool
//  from this process and the registry's view has it, and rejects if the
//  broker refused it.
export interface Disposer {
  (): Promise<void>;
  readonly ready: Promise<void>;
}

const READY_TIMEOUT_MS = 10000;
const POLL_MS = 50;

export class ToolRegistry {
  readonly client: Client;
  readonly watcher: Watcher;
  readonly component: Component;
  private componentStarted = false;
  private readonly changeListeners = new Set<(change: ToolsChange) => void>();
  private readonly executeListeners: ExecuteListener[] = [];
  private readonly refusals = new Map<string, string>();

  constructor(private readonly options: ToolRegistryOptions = {}) {
    const broker = brokerList(options.broker);
    const curve = { cert: options.cert, brokerCert: options.brokerCert };
    this.client = new Client(broker, { agent: options.agent, timeoutMs: options.timeoutMs, ...curve });
    this.watcher = new Watcher(broker, curve);
    this.component = new Component({
      broker, id: options.component, concurrency: options.concurrency, ...curve,
      cert: options.componentCert ?? options.cert,
    });
    //  A refused handshake is not kept: it holds only while it lasts
    //  (handshakeFailure), and the next connection may be let in
    this.component.on('refused', (refusal: { tool?: string; reason?: string; handshake?: boolean }) => {
      if (!refusal.handshake)
        this.refusals.set(refusal.tool ?? '', String(refusal.reason ?? 'refused by the broker'));
    });
    this.component.on('error', () => undefined);
    this.watcher.on('change', (event: ChangeEvent) => {
      if (event.kind.startsWith('tool.'))
        this.emitChange(event);
    });
    this.watcher.on('snapshot', (notice: SnapshotNotice) => this.emitChange(notice));
  }

  //  A registry whose view has its first snapshot.
  static async connect(options: ToolRegistryOptions = {}): Promise<ToolRegistry> {
    const registry = new ToolRegistry(options);
    try {
      await registry.ready();
    } catch (error) {
      await registry.close();
      throw error;
    }
    return registry;
  }

  //  Starts the view (once) and resolves when it has its first snapshot;
  //  rejects after timeoutMs, or when the broker refuses the keys.
  ready(timeoutMs = READY_TIMEOUT_MS): Promise<void> {
    return this.watcher.start(timeoutMs);
  }

  //  Registers a tool served by this process: a definition with execute (the
  //  original's form), or a schema and a handler. A name this registry
  //  already serves is refused at once, as in the original.
  register(definition: ToolDefinition): Disposer;
  register(tool: ToolSchema, handler: ToolHandler): Disposer;
  register(tool: ToolSchema | ToolDefinition, handler?: ToolHandler): Disposer {
    const run = handler ?? (tool as ToolDefinition).execute?.bind(tool);
    if (typeof run !== 'function')
      throw new TypeError(`tool "${tool.name}" has no execute function`);
    if (typeof tool.name !== 'string' || !/^[A-Za-z0-9_.-]{1,128}$/.test(tool.name))
      throw new TypeError(`tool name "${String(tool.name)}" must be 1-128 characters of [A-Za-z0-9_.-]`);
    if (this.component.has(tool.name))
      throw new Error(`tool "${tool.name}" is already registered`);
    const { execute: _execute, ...entry } = tool as ToolDefinition;
    if (!entry.parameters || (entry.parameters as { type?: unknown }).type !== 'object')
      throw new TypeError(`tool "${tool.name}": parameters must be a JSON Schema with type "object"`);
    try {
      pack(entry);
    } catch (error) {
      throw new TypeError(`tool "${tool.name}" cannot be sent as msgpack: ${(error as Error).message}`);
    }
    this.refusals.delete(tool.name);
    this.component.set(entry as ToolSchema & { parameters: Record<string, unknown> }, run);
    if (!this.componentStarted) {
      this.componentStarted = true;
      this.component.start();
    }
    void this.watcher.start(0);

    let disposed: Promise<void> | undefined;
    let ready: Promise<void> | undefined;
    const dispose = (() => {
      disposed ??= this.component.delete(tool.name) ? this.until(tool.name, false) : Promise.resolve();
      return disposed;
    }) as Disposer;
    //  Made when first asked for, so a refusal nobody awaits is no unhandled
    //  rejection
    Object.defineProperty(dispose, 'ready', { get: () => (ready ??= this.until(tool.name, true)) });
    return dispose;
  }

  //  The tool as the registry sees it now; its execute calls through the
  //  broker and resolves with the content (rejects on an error result).
  get(name: string): ToolDefinition | undefined {
    const entry = this.watcher.get(name);
    if (!entry)
      return undefined;
    return {
      ...entry,
      execute: async (args: unknown, exec?: Partial<ToolExecution>): Promise<ContentBlock[]> => {
        const result = await this.execute({ name, arguments: args, signal: exec?.signal, agent: exec?.agent });
        if (result.isError) {
          //  A result's text starts "Error: "; an Error says that itself
          const text = result.content.map((block) => block.type === 'text' ? block.text : '').join('\n')
            .replace(/^Error: /, '');
          const retry = retryAfterMs(result);
          throw Object.assign(new Error(text), { code: result.error?.code, result },
            retry === undefined ? {} : { retryAfterMs: retry });
        }
        return result.content;
      },
    } as ToolDefinition;
  }

  //  Every tool's schema, in registration order: what a model may be
  //  shown, so never a tool the broker holds quarantined (its definition is
  //  not the pinned one; it comes back when an admin accepts it).
  schemas(): ToolSchema[] {
    return this.watcher.tools().filter((entry) => !isQuarantined(entry)) as ToolSchema[];
  }

  //  Executes one call through this process's tools/execute listeners and
  //  then the broker; resolves with its one result.
  execute(exec: ExecuteRequest): Promise<ToolExecutionResult>;
  execute(name: string, args?: unknown, options?: ExecuteOptions): Promise<ToolExecutionResult>;
  execute(first: ExecuteRequest | string, args?: unknown, options: ExecuteOptions = {}): Promise<ToolExecutionResult> {
    const request: ExecuteRequest = typeof first === 'string' ? { name: first, arguments: args, ...options } : first;
    const exec = { ...request, callId: request.callId ?? nextId('call') };
    const dispatch = (index: number): Promise<ToolExecutionResult> => {
      if (index === this.executeListeners.length)
        return this.client.call(exec.name, exec.arguments ?? {}, {
          callId: exec.callId, agent: exec.agent, signal: exec.signal, timeoutMs: exec.timeoutMs,
          onProgress: exec.onProgress,
        });
      let nextCalled: Promise<ToolExecutionResult> | undefined;
      const next = () => (nextCalled ??= dispatch(index + 1));
      return Promise.resolve()
        .then(() => this.executeListeners[index](exec, next))
        .catch((error: unknown) => {
          const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code
            : 'MIDDLEWARE_FAILED';
          return errorResult(exec.callId, code, `Error: ${error instanceof Error ? error.message : String(error)}`);
        });
    };
    return dispatch(0);
  }

  //  Listens for 'tools/change' (every tool change and resync) or
  //  'tools/execute' (a waterfall listener, in registration order; prepend
  //  puts it first). Returns a function that removes the listener.
  on(event: 'tools/change', listener: (change: ToolsChange) => void): () => void;
  on(event: 'tools/execute', listener: ExecuteListener, options?: { prepend?: boolean }): () => void;
  on(event: string, listener: (...args: any[]) => any, options: { prepend?: boolean } = {}): () => void {
    if (event === 'tools/change') {
      this.changeListeners.add(listener);
      void this.watcher.start(0);
      return () => { this.changeListeners.delete(listener); };
    }
    if (event === 'tools/execute') {
      if (options.prepend)
        this.executeListeners.unshift(listener as ExecuteListener);
      else
        this.executeListeners.push(listener as ExecuteListener);
      return () => {
        const index = this.executeListeners.indexOf(listener as ExecuteListener);
        if (index >= 0)
          this.executeListeners.splice(index, 1);
      };
    }
    throw new TypeError(`unknown event "${event}": ToolRegistry has tools/change and tools/execute`);
  }

  //  Withdraws this process's tools and closes every connection.
  async close(): Promise<void> {
    await this.component.stop();
    this.watcher.close();
    this.client.close();
  }

  private emitChange(change: ToolsChange): void {
    for (const listener of [...this.changeListeners]) {
      try {
        listener(change);
      } catch {
        //  A listener's failure is its own; the others still hear
      }
    }
  }

  //  Polls the broker until it does (present) or does not serve name from
  //  this component, and the view agrees; present also fails on a refusal.
  private async until(name: string, present: boolean): Promise<void> {
    const started = Date.now();
    for (;;) {
      const refusal = this.refusals.get(name) ?? this.refusals.get('') ?? this.component.handshakeFailure();
      if (present && refusal !== undefined)
        throw new Error(refusal);
      if (present && !this.component.has(name))
        throw new Error(`tool "${name}" was disposed before the broker served it`);
      try {
        const found = await this.client.get(name);
        const ours = found?.providers.includes(this.component.id) ?? false;
        //  The view agrees: it has a tool we serve, and has lost one that
        //  nobody serves any more
        const viewHas = this.watcher.get(name) !== undefined;
        if (ours === present && (present ? viewHas : found !== undefined || !viewHas))
          return;
      } catch {
        //  The broker may be restarting: ask again until the time is up
      }
      if (Date.now() - started > READY_TIMEOUT_MS) {
        if (present)
          throw new Error(`the broker did not list tool "${name}" from component "${this.component.id}" in ${READY_TIMEOUT_MS} ms`);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }
}
