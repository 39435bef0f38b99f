//  @dsh/tools: dsh from Node. The original ToolRegistry API over a broker
//  (registry.ts), typed definitions (schema.ts), and the protocol's three
//  roles on their own: Client, Watcher, Component, with CURVE (curve.ts).
export { ToolRegistry } from './registry.js';
export type {
  ToolRegistryOptions, ExecuteRequest, ExecuteOptions, ToolExecutionResult, ToolsChange, ExecuteListener, Disposer,
} from './registry.js';
export { defineTool, validateArgs, schemaSpecToJsonSchema, ToolArgsError } from './schema.js';
export type {
  SchemaSpec, SchemaProp, SchemaType, InferArgs, JsonSchema, ToolSchema, ToolDefinition, TypedToolDefinition,
} from './schema.js';
export { Client, isQuarantined } from './client.js';
export type { CallOptions, ClientOptions, Progress, ToolEntry } from './client.js';
export { Watcher } from './watcher.js';
export type { ChangeEvent, Refusal, SnapshotNotice } from './watcher.js';
export { Component } from './component.js';
export type { ComponentOptions, ComponentRefusal, ToolExecution, ToolHandler } from './component.js';
export { loadCurve } from './curve.js';
export type { CurveKeys, CurveOptions } from './curve.js';
export { DshTools, DshTools as default } from './cordis.js';
export type { PendingExecution } from './cordis.js';
export { DshError, errorResult, retryAfterMs } from './wire.js';
export { parseTraceparent, resultTrace } from './trace.js';
export type { TraceContext } from './trace.js';
export type { CallResult, ContentBlock, ErrorInfo } from './wire.js';
