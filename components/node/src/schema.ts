//  Typed tool definitions, as in the original dsh-tools: the author-facing
//  SchemaSpec, its JSON Schema conversion, and validation of the model's
//  arguments before the handler runs. The violation texts are the C SDK's
//  (components/sdk/dsh_tooldef.c), so a Node tool and a C tool answer the
//  same bad arguments with the same INVALID_ARGS text.
import type { ContentBlock, CallResult } from './wire.js';
import type { ToolExecution } from './component.js';

//  `integer` is dsh's addition (the C SDK has it); the rest are the original's.
export type SchemaType = 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array';

export interface SchemaProp {
  type: SchemaType;
  required?: boolean;
  description?: string;
  enum?: readonly unknown[];
  default?: unknown;
  properties?: SchemaSpec;
  items?: SchemaProp;
}

export type SchemaSpec = { readonly [key: string]: SchemaProp };

type InferType<P extends SchemaProp> =
  P extends { enum: readonly (infer E)[] } ? E :
  P['type'] extends 'string' ? string :
  P['type'] extends 'number' | 'integer' ? number :
  P['type'] extends 'boolean' ? boolean :
  P['type'] extends 'object' ? (P extends { properties: infer S extends SchemaSpec } ? InferArgs<S> : Record<string, unknown>) :
  P['type'] extends 'array' ? (P extends { items: infer I extends SchemaProp } ? InferType<I>[] : unknown[]) :
  unknown;

type RequiredKeys<S extends SchemaSpec> = { [K in keyof S]: S[K] extends { required: true } ? K : never }[keyof S];
type OptionalKeys<S extends SchemaSpec> = Exclude<keyof S, RequiredKeys<S>>;
type Simplify<T> = { [K in keyof T]: T[K] } & {};

//  The arguments a spec describes: required keys present, others optional.
export type InferArgs<S extends SchemaSpec> = Simplify<
  { [K in RequiredKeys<S>]: InferType<S[K]> } & { [K in OptionalKeys<S>]?: InferType<S[K]> }>;

export interface JsonSchema {
  type: string;
  [key: string]: unknown;
}

//  A tool's schema, as the registry lists it (MCP's Tool shape, with
//  dsh's `parameters` for `inputSchema`).
export interface ToolSchema {
  name: string;
  description?: string;
  parameters: JsonSchema | Record<string, unknown>;
  strict?: boolean;
  title?: string;
  annotations?: { readOnlyHint?: boolean; destructiveHint?: boolean; idempotentHint?: boolean; openWorldHint?: boolean };
  concurrencySafe?: boolean;
  [key: string]: unknown;
}

export interface ToolDefinition extends ToolSchema {
  execute(args: any, exec: ToolExecution): Promise<ContentBlock[] | Partial<CallResult>>;
}

export class ToolArgsError extends Error {
  readonly code = 'INVALID_ARGS';
  constructor(readonly violations: string[]) {
    super(`invalid arguments: ${violations.join('; ')}`);
    this.name = 'ToolArgsError';
  }
}

function propToJsonSchema(prop: SchemaProp): JsonSchema {
  const schema: JsonSchema = { type: prop.type };
  if (prop.description)
    schema.description = prop.description;
  if (prop.enum !== undefined)
    schema.enum = [...prop.enum];
  if (prop.default !== undefined)
    schema.default = prop.default;
  if (prop.type === 'object' && prop.properties)
    Object.assign(schema, specToObject(prop.properties));
  if (prop.type === 'array' && prop.items)
    schema.items = propToJsonSchema(prop.items);
  return schema;
}

function specToObject(spec: SchemaSpec): { properties: Record<string, JsonSchema>; required?: string[] } {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const [key, prop] of Object.entries(spec)) {
    properties[key] = propToJsonSchema(prop);
    if (prop.required)
      required.push(key);
  }
  return required.length > 0 ? { properties, required } : { properties };
}

//  The JSON Schema of a spec: {type: "object", properties, required?}.
export function schemaSpecToJsonSchema(spec: SchemaSpec): JsonSchema {
  return { type: 'object', ...specToObject(spec) };
}

const PHRASE: Record<SchemaType, string> = {
  string: 'a string', number: 'a number', integer: 'an integer', boolean: 'a boolean', object: 'an object',
  array: 'an array',
};

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function typeMatches(type: SchemaType, value: unknown): boolean {
  switch (type) {
    case 'string': return typeof value === 'string';
    case 'number': return typeof value === 'number';
    case 'integer': return typeof value === 'number' && Number.isInteger(value);
    case 'boolean': return typeof value === 'boolean';
    case 'object': return isObject(value);
    case 'array': return Array.isArray(value);
  }
}

function equal(left: unknown, right: unknown): boolean {
  if (left === right)
    return true;
  if (typeof left !== 'object' || typeof right !== 'object' || left === null || right === null)
    return false;
  if (Array.isArray(left) !== Array.isArray(right))
    return false;
  const leftKeys = Object.keys(left);
  const rightKeys = Object.keys(right);
  return leftKeys.length === rightKeys.length
    && leftKeys.every((key) => equal((left as Record<string, unknown>)[key], (right as Record<string, unknown>)[key]));
}

function checkValue(prop: SchemaProp, value: unknown, path: string, violations: string[]): void {
  if (!typeMatches(prop.type, value)) {
    violations.push(`"${path}" must be ${PHRASE[prop.type]}`);
    return;
  }
  if (prop.enum !== undefined && !prop.enum.some((member) => equal(member, value))) {
    violations.push(`"${path}" must be one of ${JSON.stringify(prop.enum)}`);
    return;
  }
  if (prop.type === 'object' && prop.properties)
    checkProperties(prop.properties, value as Record<string, unknown>, path, violations);
  else if (prop.type === 'array' && prop.items)
    (value as unknown[]).forEach((item, index) => checkValue(prop.items!, item, `${path}[${index}]`, violations));
}

function checkProperties(spec: SchemaSpec, map: Record<string, unknown>, prefix: string | null,
  violations: string[]): void {
  for (const [key, prop] of Object.entries(spec)) {
    const path = prefix === null ? key : `${prefix}.${key}`;
    if (Object.prototype.hasOwnProperty.call(map, key))
      checkValue(prop, map[key], path, violations);
    else if (prop.required)
      violations.push(`missing required property "${path}"`);
  }
}

//  The violations of args against spec, in declaration order; empty when
//  valid. Extra keys are allowed and no default is applied.
export function validateArgs(spec: SchemaSpec, args: unknown): string[] {
  const violations: string[] = [];
  if (!isObject(args))
    violations.push('"arguments" must be an object');
  else
    checkProperties(spec, args, null, violations);
  return violations;
}

export interface TypedToolDefinition<S extends SchemaSpec> extends Omit<ToolSchema, 'parameters'> {
  name: string;
  parameters: S;
  execute(args: InferArgs<S>, exec: ToolExecution): Promise<ContentBlock[] | Partial<CallResult>>;
}

//  A tool from a typed definition: its parameters become JSON Schema, and
//  its execute validates the arguments first (ToolArgsError on a mismatch).
export function defineTool<const S extends SchemaSpec>(definition: TypedToolDefinition<S>): ToolDefinition {
  const { parameters: spec, execute, ...rest } = definition;
  return {
    ...rest,
    name: definition.name,
    parameters: schemaSpecToJsonSchema(spec),
    async execute(args: unknown, exec: ToolExecution) {
      const violations = validateArgs(spec, args);
      if (violations.length > 0)
        throw new ToolArgsError(violations);
      return execute(args as InferArgs<S>, exec);
    },
  };
}
