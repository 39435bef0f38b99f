//  The one thing the README example needs from cordis, its Context with the
//  registry under the `tools` key, so tsc can check the example as written.
declare module 'cordis' {
  import type { ToolRegistry } from '@dsh/tools'
  export interface Context {
    tools: ToolRegistry
  }
}
