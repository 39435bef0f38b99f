//  The dsh/1 wire format (schemas/PROTOCOL.md): frames, msgpack bodies,
//  endpoint rules and the error result shape. Everything above this file
//  speaks in plain objects; nothing below it knows about tools.
import { Decoder, Encoder } from '@msgpack/msgpack';
//  Names, limits, defaults, error names and who sends what come from
//  dsh/1's one definition (schemas/dsh_protocol.json, generated into protocol.ts)
import {
  BROKERS_MAX, DEFAULT_ENDPOINT, ERROR_NAMES, FRONT_FROM_BROKER, PROTOCOL, UNKNOWN_ERROR_NAME,
} from './protocol.js';

export {
  DEFAULT_CALL_TIMEOUT_MS, DEFAULT_HEARTBEAT_MS, DEFAULT_LIVENESS, MAX_MESSAGE_BYTES, PROTOCOL, WORK_FROM_BROKER,
} from './protocol.js';
export const DEFAULT_BROKER = DEFAULT_ENDPOINT;

//  The decoder keeps its own stack (no recursion to exhaust) and a body that
//  fails to decode is dropped, so untrusted input costs at most its frame,
//  which ZMQ_MAXMSGSIZE bounds. Integers above 2^53 lose precision as JS
//  numbers; no dsh field needs more (an epoch is microseconds since 1970).
const encoder = new Encoder({ ignoreUndefined: true });

//  One strict decode (PROTOCOL.md, Bodies): a map that repeats a key is
//  refused whole. A map becomes an object, so two keys are one when they
//  make one property name: the same str, 1 and 1.0, 1 and "1", and also
//  what only this decoder merges (an overlong UTF-8 "A" and "A", two
//  integers past 2^53 that round to one number). The decoder counts every
//  key it reads; a decoded tree whose maps hold fewer properties lost one.
//  Keys that are not str or number (bin, ext, nil, booleans, arrays, maps)
//  make no property name and are refused outright.
let keysRead = 0;
const decoder = new Decoder({
  mapKeyConverter: (key: unknown): string | number => {
    if (typeof key !== 'string' && typeof key !== 'number')
      throw new TypeError('a map key that is not a str or a number');
    keysRead += 1;
    return key;
  },
});

//  The properties of every map in a decoded tree, walked with a stack of
//  its own (a body nests as deep as its frame allows).
function propertiesIn(root: unknown): number {
  let properties = 0;
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    //  Maps are the plain objects; bin, ext and timestamps are leaves
    const items = Array.isArray(value) ? value
      : value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype
        ? Object.values(value) : [];
    if (!Array.isArray(value))
      properties += items.length;
    for (const item of items)
      if (item !== null && typeof item === 'object')
        stack.push(item);
  }
  return properties;
}

export type Body = Record<string, unknown>;

export function pack(body: unknown): Uint8Array {
  return encoder.encode(body);
}

//  The body of a frame, or null if it is not one msgpack map, or a map
//  anywhere in it repeats a key.
export function unpack(frame: Uint8Array): Body | null {
  keysRead = 0;
  let value: unknown;
  try {
    value = decoder.decode(frame);
  } catch {
    return null;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value) || value instanceof Uint8Array)
    return null;
  return propertiesIn(value) === keysRead ? value as Body : null;
}

//  An ANNOUNCE's body stays this far under the broker's maxMessageBytes:
//  room for what the transport adds to a frame (the C SDK's margin).
export const ANNOUNCE_MARGIN = 256;
const LARGEST_ARRAY_HEADER = 5;

function containerHeader(count: number, fix: number, sixteen: number, thirtyTwo: number): Uint8Array {
  if (count < 16)
    return Uint8Array.of(fix | count);
  const header = Buffer.alloc(count < 0x10000 ? 3 : 5);
  header[0] = count < 0x10000 ? sixteen : thirtyTwo;
  if (count < 0x10000)
    header.writeUInt16BE(count, 1);
  else
    header.writeUInt32BE(count, 1);
  return header;
}

//  An ANNOUNCE body: head's fields, part and parts if given, and the
//  already packed entries as tools.
function announceBody(head: Body, packed: Uint8Array[], part?: number, parts?: number): Uint8Array {
  const fields: Body = parts === undefined ? { ...head } : { ...head, part, parts };
  const chunks: Uint8Array[] = [containerHeader(Object.keys(fields).length + 1, 0x80, 0xde, 0xdf)];
  for (const [key, value] of Object.entries(fields))
    chunks.push(pack(key), pack(value));
  chunks.push(pack('tools'), containerHeader(packed.length, 0x90, 0xdc, 0xdd), ...packed);
  return Buffer.concat(chunks);
}

//  The ANNOUNCE bodies of a tool set (PROTOCOL.md, The announce channel):
//  one, head's fields and every entry, when it fits in maxMessageBytes (less
//  ANNOUNCE_MARGIN); else the fewest parts that each fit, the entries in
//  order, each with part and parts. An entry too large for a message of its
//  own is left out (the broker could not take it), and tooLarge is told.
export function announceBodies(head: Body, entries: unknown[], maxMessageBytes: number,
  tooLarge?: (entry: unknown, size: number) => void): Uint8Array[] {
  const limit = maxMessageBytes - ANNOUNCE_MARGIN;
  const packed = entries.map((entry) => pack(entry));
  const entryBytes = packed.reduce((sum, data) => sum + data.length, 0);
  if (announceBody(head, []).length - 1 + LARGEST_ARRAY_HEADER + entryBytes <= limit)
    return [announceBody(head, packed)];
  const room = limit - (announceBody(head, [], 2 ** 32 - 1, 2 ** 32 - 1).length - 1 + LARGEST_ARRAY_HEADER);
  const slices: Uint8Array[][] = [];
  let used = 0;
  packed.forEach((data, index) => {
    if (data.length > room) {
      tooLarge?.(entries[index], data.length);
      return;
    }
    //  Each slice as long as a message takes: no fewer parts can hold the
    //  entries in order
    if (slices.length === 0 || used + data.length > room) {
      slices.push([]);
      used = 0;
    }
    slices[slices.length - 1].push(data);
    used += data.length;
  });
  if (slices.length <= 1)
    return [announceBody(head, slices[0] ?? [])];
  return slices.map((slice, part) => announceBody(head, slice, part, slices.length));
}

//  A ROUTER/DEALER message as a DEALER sends it: "" "DSH1" COMMAND [token] body.
const EMPTY = new Uint8Array(0);
const PROTOCOL_FRAME = Buffer.from(PROTOCOL);
const commandFrames = new Map<string, Uint8Array>();

export function frames(command: string, body: unknown, token?: Uint8Array): Uint8Array[] {
  let commandFrame = commandFrames.get(command);
  if (!commandFrame)
    commandFrames.set(command, commandFrame = Buffer.from(command));
  const head = [EMPTY, PROTOCOL_FRAME, commandFrame];
  return token ? [...head, token, pack(body)] : [...head, pack(body)];
}

export interface Incoming {
  command: string;
  token?: Uint8Array;
  body: Body;
}

//  Parses what a DEALER receives; null for anything that is not dsh/1
//  (dropped, as the spec says receivers do).
export function parse(message: Uint8Array[], withToken: (command: string) => boolean): Incoming | null {
  if (message.length < 4 || message[0].length !== 0 || !PROTOCOL_FRAME.equals(message[1]))
    return null;
  const command = Buffer.from(message[2]).toString();
  if (withToken(command)) {
    if (message.length !== 5 || message[3].length !== 8)
      return null;
    const body = unpack(message[4]);
    return body ? { command, token: message[3], body } : null;
  }
  if (message.length !== 4)
    return null;
  const body = unpack(message[3]);
  return body ? { command, body } : null;
}

//  Whether a FRONT message is one a broker sends. A DEALER reconnecting to
//  a dead broker's port in the ephemeral range can be connected to itself
//  by TCP simultaneous open, and then reads its own requests back: those
//  must count neither as replies nor as signs of the broker's life. The
//  definition lists what a broker sends on FRONT and, for each reply named
//  as a request (SNAPSHOT, CHAIN, STATS, CONTROL, AUDIT, PINS), its marker:
//  the field such a reply always carries and the request never does.
export function fromBroker(command: string, body: Body): boolean {
  const marker = FRONT_FROM_BROKER.get(command);
  return marker !== undefined && (marker === null || marker in body);
}

//  A list of front endpoints: "a,b", an array, $DSH_BROKER, or the default.
export function brokerList(broker?: string | string[]): string[] {
  const given = broker ?? process.env.DSH_BROKER ?? DEFAULT_BROKER;
  const list = (Array.isArray(given) ? given : given.split(','))
    .map((entry) => entry.trim()).filter((entry) => entry.length > 0);
  if (list.length === 0 || list.length > BROKERS_MAX)
    throw new TypeError(`a broker list needs 1 to ${BROKERS_MAX} endpoints, not ${list.length}`);
  return list;
}

//  The wildcard host rule: an advertised tcp://*:p (0.0.0.0, ::, [::]) is
//  reached on the host the front was reached on.
export function resolveEndpoint(advertised: string, front: string): string {
  const match = /^tcp:\/\/(.*):(\d+|\*)$/.exec(advertised);
  if (!match || !['*', '0.0.0.0', '::', '[::]'].includes(match[1]))
    return advertised;
  const frontHost = /^tcp:\/\/(.*):[^:]*$/.exec(front);
  return frontHost ? `tcp://${frontHost[1]}:${match[2]}` : advertised;
}

//  MCP content blocks and dsh's result, as the wire carries them.
export type ContentBlock =
  | { type: 'text'; text: string; [key: string]: unknown }
  | { type: 'image' | 'audio'; data: string; mimeType: string; [key: string]: unknown }
  | { type: 'resource_link'; uri: string; name: string; [key: string]: unknown }
  | { type: 'resource'; resource: { uri: string; text?: string; blob?: string; mimeType?: string }; [key: string]: unknown };

export interface ErrorInfo {
  name: string;
  code: string;
  //  RATE_LIMITED: the ms until the limit that refused the call admits one
  //  again (absent when a cap on calls in flight refused it)
  retryAfterMs?: number;
  [key: string]: unknown;
}

export interface CallResult {
  callId: string;
  content: ContentBlock[];
  isError: boolean;
  error?: ErrorInfo;
  structuredContent?: unknown;
  [key: string]: unknown;
}

//  An error result as dsh makes them: one text block, error {name, code}.
export function errorResult(callId: string, code: string, text: string): CallResult {
  return {
    callId,
    content: [{ type: 'text', text }],
    isError: true,
    error: { name: ERROR_NAMES[code] ?? UNKNOWN_ERROR_NAME, code },
  };
}

//  A failed query (LIST, GET, ...): code as in Error codes, or TIMEOUT and
//  BROKER_GONE made by this library.
//  A call's failure as an Error is fromResult's: RATE_LIMITED with its
//  retryAfterMs, if the result carried one.
export class DshError extends Error {
  readonly code: string;
  readonly retryAfterMs?: number;
  constructor(code: string, message: string, retryAfterMs?: number) {
    super(message);
    this.name = ERROR_NAMES[code] ?? 'DshError';
    this.code = code;
    if (retryAfterMs !== undefined)
      this.retryAfterMs = retryAfterMs;
  }

  //  The error of a failed result: its code (TOOL_FAILED without one), its
  //  text without the "Error: " prefix, error.retryAfterMs when it is a uint.
  static fromResult(result: CallResult): DshError {
    const text = result.content.map((block) => block.type === 'text' ? block.text : '').join('\n')
      .replace(/^Error: /, '');
    return new DshError(result.error?.code ?? 'TOOL_FAILED', text, retryAfterMs(result));
  }
}

//  error.retryAfterMs of a result, if it is a whole number of ms.
export function retryAfterMs(result: CallResult): number | undefined {
  const value = result.error?.retryAfterMs;
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

//  Sends on one socket in order. zeromq 6 allows one blocked send at a time
//  (a DEALER blocks while it has no connection), so sends queue here instead
//  of failing with EBUSY; a send on a closed socket is dropped, as a lost
//  message would be.
//  A message may come with live(): it is sent only if that still holds when
//  its turn comes (a call that timed out while the broker was unreachable
//  must not run when it comes back).
export class Outbox {
  private queue: { message: Uint8Array[]; live?: () => boolean; sent?: () => void }[] = [];
  private sending = false;
  constructor(private readonly socket: { send(message: Uint8Array[]): Promise<void>; closed: boolean }) {}

  //  sent() runs once zeromq has taken the message (with `immediate`, onto
  //  a connection that is up).
  send(message: Uint8Array[], live?: () => boolean, sent?: () => void): void {
    this.queue.push({ message, live, sent });
    if (!this.sending)
      void this.drain();
  }

  private async drain(): Promise<void> {
    this.sending = true;
    while (this.queue.length > 0 && !this.socket.closed) {
      const { message, live, sent } = this.queue.shift()!;
      if (live && !live())
        continue;
      try {
        await this.socket.send(message);
        sent?.();
      } catch {
        break;
      }
    }
    this.queue = [];
    this.sending = false;
  }
}

//  Ids of calls and requests: a random prefix per process, then a counter.
const prefix = Math.random().toString(36).slice(2, 10);
let counter = 0;
export function nextId(kind: string): string {
  counter += 1;
  return `${kind}-${prefix}-${counter}`;
}
