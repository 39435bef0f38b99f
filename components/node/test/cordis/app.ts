//  The app side of a cordis program on @dsh/tools, type-checked against the
//  real `cordis` package (tsconfig.json here: cordis 4's published types
//  need moduleResolution "bundler"). cordis.test.mjs runs these plugins.
import { Context, Service } from 'cordis'
import { DshTools, defineTool, type ToolSchema } from '@dsh/tools'

declare module 'cordis' {
  interface Context {
    systemPrompt: SystemPrompt
  }
}

//  A system-prompt service as an app of the original has one: tool
//  providers registered by tools(), disposed with the calling fiber, and
//  evaluated at each assembly.
export class SystemPrompt extends Service {
  private providers: Array<() => ToolSchema[] | { schemas: ToolSchema[] }> = []

  constructor(ctx: Context) {
    super(ctx, 'systemPrompt')
  }

  tools(provider: () => ToolSchema[] | { schemas: ToolSchema[] }): () => void {
    const dispose = this.ctx.effect(() => {
      this.providers.push(provider)
      return () => { this.providers = this.providers.filter((other) => other !== provider) }
    }, 'systemPrompt.tools()')
    return () => void dispose()
  }

  assemble(): { tools: ToolSchema[] } {
    return {
      tools: this.providers.flatMap((provider) => {
        const result = provider()
        return Array.isArray(result) ? result : result.schemas
      }),
    }
  }
}

//  The permission pattern on cordis's own waterfall: vetoes one tool, and
//  records the onion around every call.
export function permission(ctx: Context, config: { deny: string, order: string[] }) {
  ctx.on('tools/execute', async (exec, next) => {
    config.order.push('first:before')
    const result = await next()
    config.order.push('first:after')
    return result
  })
  ctx.on('tools/execute', (exec, next) => {
    config.order.push('second:before')
    if (exec.name === config.deny)
      return { callId: exec.callId, content: [{ type: 'text', text: 'Denied by policy.' }], isError: true }
    return next()
  })
}

//  A tool plugin: its registration lives as long as the plugin. (cordis 4
//  lets a plugin use only the services it injects.)
export const adder = {
  inject: ['tools'],
  apply: addTool,
}

function addTool(ctx: Context) {
  ctx.tools.register(defineTool({
    name: 'node_add',
    description: 'Add two numbers.',
    annotations: { readOnlyHint: true },
    parameters: {
      a: { type: 'number', required: true },
      b: { type: 'number', required: true },
    },
    async execute(args) {
      return [{ type: 'text', text: String(args.a + args.b) }]
    },
  }))
}

//  The app: the registry as a service on the broker.
export function app(broker: string) {
  const root = new Context()
  const fiber = root.plugin(DshTools, { broker })
  return { root, fiber }
}
