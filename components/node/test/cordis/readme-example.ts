//  components/node/README.md's cordis example (The cordis service), as
//  written there: `npm run build:test` type-checks it against the real
//  cordis (it is compiled, not run; cordis.test.mjs runs the same steps).
import { Context } from 'cordis'
import { DshTools, defineTool } from '@dsh/tools'   // was '@deepseek-ai/dsh-tools'

const app = new Context()
app.plugin(DshTools, { broker: 'tcp://127.0.0.1:7570' })      // options: those of ToolRegistry
app.inject(['tools'], (ctx) => {                               // starts once the view has its snapshot
  ctx.tools.register(defineTool({ name: 'add', annotations: { readOnlyHint: true },
    parameters: { a: { type: 'number', required: true }, b: { type: 'number', required: true } },
    async execute(args) { return [{ type: 'text', text: `${args.a + args.b}` }] } }))
})                                                             // withdrawn when this plugin is disposed
app.on('tools/execute', (exec, next) => exec.name === 'rm' ? { callId: exec.callId,
  content: [{ type: 'text', text: 'Denied by policy.' }], isError: true } : next())
app.on('tools/change', (change) => console.log(change.kind))   // tool.registered, ...
const result = await app.tools.execute({ callId: 'c1', name: 'echo', arguments: { message: 'hi' } })
