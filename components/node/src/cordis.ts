//  The original's form: a cordis service under the `tools` key, so code
//  written for dsh-tools runs with only its import changed.
//
//    ctx.plugin(DshTools, { broker: 'tcp://127.0.0.1:7570' })
//    ctx.inject(['tools'], (ctx) => { ctx.tools.register(defineTool({...})) })
//
//  Underneath is one ToolRegistry (registry.ts): register() serves from
//  this process, get() and schemas() are the swarm's live view, execute()
//  goes to the broker. What cordis adds: a registration is an effect of the
//  calling fiber (disposed with the plugin that made it); `tools/execute` is
//  a cordis waterfall (ctx.on('tools/execute', (exec, next) => ...)) and
//  `tools/change` a cordis event; the swarm's schemas go into the app's
//  system-prompt assembly (ctx.systemPrompt.tools()) whenever the app has
//  that service. Built against cordis 4 (fibers, Service.init).
import { Context, Service } from 'cordis';
import {
  ToolRegistry, ToolRegistryOptions, ExecuteRequest, ExecuteOptions, ToolExecutionResult, ToolsChange, Disposer,
} from './registry.js';
import { ToolDefinition, ToolSchema } from './schema.js';
import { ToolHandler } from './component.js';
import { errorResult, nextId } from './wire.js';

//  One call as it flows through the `tools/execute` waterfall.
export type PendingExecution = ExecuteRequest & { callId: string };

declare module 'cordis' {
  interface Context {
    tools: DshTools;
  }

  interface Events {
    //  Around every ctx.tools.execute() of this process (waterfall): call
    //  next() to go on, or return a result without calling it to veto.
    'tools/execute'(this: DshTools, exec: PendingExecution,
      next: () => Promise<ToolExecutionResult>): Promise<ToolExecutionResult> | ToolExecutionResult;
    //  A tool of the swarm was registered, updated or unregistered, its pin
    //  changed (tool.changed, tool.accepted, tool.rejected, tool.forgotten),
    //  or the view was replaced whole (kind 'snapshot') (emit).
    'tools/change'(this: DshTools, change: ToolsChange): void;
  }
}

//  What the registry needs of the app's system-prompt service: tools()
//  takes a provider evaluated at each assembly, and returns its disposer.
interface SystemPromptTools {
  tools(provider: (context?: unknown) => unknown): unknown;
}

export namespace DshTools {
  export interface Config extends ToolRegistryOptions {
    //  How long Service.init waits for the view's first snapshot (default
    //  10 s); until then plugins that inject 'tools' wait
    readyTimeoutMs?: number;
  }
}

export class DshTools extends Service {
  readonly registry: ToolRegistry;
  private closed = false;

  constructor(ctx: Context, private readonly config: DshTools.Config = {}) {
    super(ctx, 'tools');
    this.registry = new ToolRegistry(config);
    //  The broker's change events, as cordis events of this service
    ctx.effect(() => this.registry.on('tools/change', (change) => {
      this.ctx.emit(this, 'tools/change', change);
    }), 'tools/change');
    //  The swarm's schemas in the prompt, while the app has a systemPrompt
    ctx.inject(['systemPrompt'], (inner) => {
      (inner.get('systemPrompt') as SystemPromptTools).tools(() => this.promptSchemas());
    });
    //  Disposed: this process's tools are withdrawn, the sockets closed
    ctx.effect(() => () => {
      this.closed = true;
      return this.registry.close();
    }, 'tools.close()');
  }

  //  Plugins that inject 'tools' start once the view has its snapshot.
  async [Service.init](): Promise<void> {
    await this.registry.ready(this.config.readyTimeoutMs);
  }

  //  Registers a tool served by this process, as an effect of the calling
  //  fiber: withdrawn when that plugin is disposed, or by the disposer.
  //  A name this process already serves throws at once, as in the original.
  register(definition: ToolDefinition): Disposer;
  register(tool: ToolSchema, handler: ToolHandler): Disposer;
  register(tool: ToolSchema | ToolDefinition, handler?: ToolHandler): Disposer {
    let inner!: Disposer;
    const effect = this.ctx.effect(() => {
      inner = handler ? this.registry.register(tool, handler) : this.registry.register(tool as ToolDefinition);
      //  After close() the tool is gone with the component already
      return () => this.closed ? undefined : inner();
    }, `tools.register(${JSON.stringify(tool.name)})`);
    const dispose = (() => {
      void effect();
      return this.closed ? Promise.resolve() : inner();
    }) as Disposer;
    Object.defineProperty(dispose, 'ready', { get: () => inner.ready });
    return dispose;
  }

  //  The tool as the swarm's view has it; its execute calls through the
  //  broker (not through the waterfall, as the original's get()).
  get(name: string): ToolDefinition | undefined {
    return this.registry.get(name);
  }

  //  Every tool of the swarm, in registration order, but the quarantined.
  schemas(): ToolSchema[] {
    return this.registry.schemas();
  }

  //  One call through cordis's `tools/execute` waterfall, then the broker
  //  (its chain applies); resolves with its one result, never rejects.
  execute(exec: ExecuteRequest): Promise<ToolExecutionResult>;
  execute(name: string, args?: unknown, options?: ExecuteOptions): Promise<ToolExecutionResult>;
  async execute(first: ExecuteRequest | string, args?: unknown, options: ExecuteOptions = {}): Promise<ToolExecutionResult> {
    const request: ExecuteRequest = typeof first === 'string' ? { name: first, arguments: args, ...options } : first;
    //  The caller's object itself when it has a callId, as in the original
    const exec = (request.callId !== undefined ? request : { ...request, callId: nextId('call') }) as PendingExecution;
    try {
      const result = await this.ctx.waterfall(this, 'tools/execute', exec, () => this.registry.execute(exec));
      if (!result || !Array.isArray(result.content))
        return errorResult(exec.callId, 'MIDDLEWARE_FAILED', 'Error: a tools/execute listener returned no result');
      return result;
    } catch (error) {
      const code = typeof (error as { code?: unknown })?.code === 'string' ? (error as { code: string }).code
        : 'MIDDLEWARE_FAILED';
      return errorResult(exec.callId, code, `Error: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  //  Resolves once the view has its first snapshot (Service.init awaits it).
  ready(timeoutMs?: number): Promise<void> {
    return this.registry.ready(timeoutMs);
  }

  //  The model-facing fields only, as the original fed the assembly; the
  //  array also answers `.schemas`, the shape later system-prompt services
  //  take from a provider ({schemas}).
  private promptSchemas(): ToolSchema[] {
    const schemas = this.schemas().map(({ name, description, parameters, strict }) => ({
      name, description, parameters: structuredClone(parameters), ...(strict !== undefined ? { strict } : {}),
    }) as ToolSchema);
    return Object.defineProperty(schemas, 'schemas', { value: schemas });
  }
}
