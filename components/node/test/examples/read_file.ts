//  The original dsh-tools README's defineTool example, as written there
//  apart from the import line ('@deepseek-ai/dsh-tools' -> '@dsh/tools').
//  readme.test.mjs compiles it with tsc (the typed args are checked) and
//  runs it with ctx.tools a ToolRegistry on a real broker.
import { readFile } from 'node:fs/promises'
import type { Context } from 'cordis'
import { defineTool } from '@dsh/tools'

declare const ctx: Context

ctx.tools.register(defineTool({
  name: 'read_file',
  description: 'Read a file from disk.',
  parameters: {
    path: { type: 'string', required: true, description: 'Absolute file path' },
    offset: { type: 'number' },
    limit: { type: 'number' },
  },
  async execute(args, exec) {
    // args is typed: { path: string; offset?: number; limit?: number }
    const text = await readFile(args.path, 'utf8')
    return [{ type: 'text', text }]
  },
}))
