//  Following a broker: one broker-session state machine (PROTOCOL.md, Client
//  liveness), the same table as the C SDK's dsh_link and Python's dsh.link.
//  It decides which broker to use (round robin over a list), when to say
//  HELLO and PING, when the broker's silence means it is gone and when its
//  instance id says it restarted. It is pure: no socket, no clock. Every
//  input takes `now` (ms); after each input the owner takes the events it
//  made (events()), in order, does what they say with its own sockets, and
//  calls tick() again by the time tick returned. test/link.test.mjs runs
//  every case of tests/conformance/link_cases.json on it.
import { DEFAULT_HEARTBEAT_MS, DEFAULT_LIVENESS } from './wire.js';

//  client: no HELLO, watches only while it awaits something; component
//  (a HEARTBEAT is its PING): HELLO until WELCOME, then a PING every
//  heartbeat; watcher: as a component, but silence counts in HELLO too.
export type LinkProfile = 'client' | 'component' | 'watcher';
export type LinkState = 'connecting' | 'hello' | 'live';
export type LinkEventType = 'CONNECT' | 'SEND_HELLO' | 'SEND_PING' | 'UP' | 'DOWN' | 'RESTARTED';

//  endpoint: CONNECT's broker to use; DOWN's and RESTARTED's broker left.
export interface LinkEvent {
  type: LinkEventType;
  endpoint: string;
  reached?: boolean;          //  DOWN: a connection to it was seen
  silenceMs?: number;         //  DOWN: how long it had been silent
  instance?: string;          //  RESTARTED: the new id
  was?: string;               //  RESTARTED: the old one
}

//  How often a HELLO is sent again until WELCOME comes.
export const HELLO_RETRY_MS = 1000;

const NO_EVENTS: readonly LinkEvent[] = Object.freeze([]);

function positive(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value > 0;
}

export class Link {
  readonly brokers: string[];
  endpoint?: string;
  state?: LinkState;
  heartbeatMs = DEFAULT_HEARTBEAT_MS;
  liveness = DEFAULT_LIVENESS;
  reached = false;            //  a connection or a message seen on this connection
  instance?: string;          //  the first instance id on this connection
  //  Silence counts from this: the later of the connect, the connection
  //  seen, the last message and the start of a watch
  private heardAt = 0;
  private pingedAt = 0;       //  client: when it last sent PING, or 0
  private pingDue = 0;        //  component, watcher: the next PING
  private helloDue = 0;       //  in HELLO: the next HELLO
  private watching: boolean;
  private asked = false;      //  client: a PING went on this connection
  private queue: LinkEvent[] = [];

  constructor(readonly profile: LinkProfile, brokers: string[]) {
    if (brokers.length === 0)
      throw new TypeError('a link needs a broker');
    this.brokers = [...brokers];
    this.watching = profile !== 'client';
  }

  //  The events made since the last call, oldest first.
  events(): readonly LinkEvent[] {
    if (this.queue.length === 0)
      return NO_EVENTS;       //  the usual case, on every message: no array made
    const events = this.queue;
    this.queue = [];
    return events;
  }

  private emit(type: LinkEventType, fields: Partial<LinkEvent> = {}): void {
    this.queue.push({ type, endpoint: this.endpoint!, ...fields });
  }

  private setDefaults(heartbeatMs?: number, liveness?: number): void {
    if (positive(heartbeatMs))
      this.heartbeatMs = heartbeatMs;
    if (positive(liveness))
      this.liveness = liveness;
  }

  //  Connects (afresh) to endpoint: a new connection knows nothing yet. The
  //  broker's heartbeat and liveness stay those last known.
  private connect(now: number, endpoint: string): void {
    this.endpoint = endpoint;
    this.heardAt = now;
    this.pingedAt = 0;
    this.reached = false;
    this.instance = undefined;
    this.emit('CONNECT');
    if (this.profile === 'client')
      this.state = 'connecting';
    else {
      this.state = 'hello';
      this.helloDue = now + HELLO_RETRY_MS;
      this.emit('SEND_HELLO');
    }
  }

  //  The next broker in the list, round and round; the same one if alone.
  private connectNext(now: number): void {
    const index = this.endpoint === undefined ? -1 : this.brokers.indexOf(this.endpoint);
    this.connect(now, this.brokers[(index + 1) % this.brokers.length]);
    if (this.profile === 'client') {
      //  A client moves while it awaits something: it learns the new
      //  broker's heartbeat at once
      this.asked = true;
      this.emit('SEND_PING');
    }
  }

  //  Starts with the first broker: CONNECT (and SEND_HELLO but for a client).
  start(now: number): void {
    this.asked = false;
    this.connect(now, this.brokers[0]);
  }

  private reach(now: number): void {
    this.reached = true;
    this.heardAt = now;
    if (this.state === 'connecting') {
      this.state = 'live';
      this.emit('UP');
    }
  }

  //  The owner saw the connection come up (the ZMTP handshake).
  connected(now: number): void {
    if (!this.reached)
      this.reach(now);
  }

  //  Anything at all came from the broker.
  heard(now: number): void {
    if (this.reached)
      this.heardAt = now;
    else
      this.reach(now);
  }

  //  A WELCOME came (the owner found it usable).
  welcome(now: number, instance?: string, heartbeatMs?: number, liveness?: number): void {
    this.heard(now);
    if (this.state !== 'hello')
      return;                 //  a client's, or an answer to a HELLO sent again
    this.setDefaults(heartbeatMs, liveness);
    this.instance = instance;
    this.state = 'live';
    this.pingDue = now + this.heartbeatMs;
    this.emit('UP');
  }

  //  A PONG came. An instance other than the first on this connection
  //  means the broker restarted.
  pong(now: number, instance?: string, heartbeatMs?: number, liveness?: number): void {
    this.heard(now);
    if (this.state === 'hello')
      return;                 //  the WELCOME to come names the instance
    this.setDefaults(heartbeatMs, liveness);
    if (typeof instance !== 'string')
      return;
    if (this.instance === undefined) {
      this.instance = instance;
      return;
    }
    if (instance === this.instance)
      return;
    this.emit('RESTARTED', { instance, was: this.instance });
    if (this.profile === 'client')
      //  The calls open at the instance that went get no answer: as for a
      //  broker gone, the client starts afresh at the next broker
      this.connectNext(now);
    else {
      //  Its endpoints may have moved: ask again, on this connection
      this.instance = undefined;
      this.state = 'hello';
      this.helloDue = now + HELLO_RETRY_MS;
      this.emit('SEND_HELLO');
    }
  }

  //  A client awaits something (on) or nothing (off). Other profiles
  //  always watch.
  watch(now: number, on: boolean): void {
    if (this.profile !== 'client')
      return;
    if (on && !this.watching) {
      this.heardAt = now;
      this.pingedAt = 0;
    }
    this.watching = on;
    //  The broker's heartbeat and liveness come in its PONG: asked once, so
    //  the first silence is judged by its window, not the default
    if (on && !this.asked) {
      this.asked = true;
      this.emit('SEND_PING');
    }
  }

  //  Leaves the broker for the next one without a DOWN (a client's
  //  UNKNOWN_TOOL, a refused handshake): CONNECT, SEND_PING or SEND_HELLO.
  move(now: number): void {
    this.connectNext(now);
  }

  //  How much silence the state allows, or 0 for any.
  private silenceLimit(): number {
    if (this.state === 'live')
      return this.heartbeatMs * this.liveness;
    if (this.state === 'connecting')
      //  A broker never reached holds none of the client's calls: with
      //  another to go to it is left after a heartbeat (the connect
      //  timeout); alone it is waited for, there being nowhere else
      return this.brokers.length > 1 ? this.heartbeatMs : 0;
    return this.profile === 'watcher' ? this.heartbeatMs * this.liveness : 0;
  }

  private pingDueAt(): number | undefined {
    if (this.profile === 'client')
      //  Any message counts: a busy broker is never pinged
      return Math.max(this.pingedAt, this.heardAt) + this.heartbeatMs;
    return this.state === 'live' ? this.pingDue : undefined;
  }

  //  Applies the clock: HELLO or PING when due, DOWN when silent too long.
  //  Returns when it next needs a tick, null for not until an input.
  tick(now: number): number | null {
    if (this.endpoint === undefined || !this.watching)
      return null;
    let limit = this.silenceLimit();
    if (limit && now - this.heardAt > limit) {
      this.emit('DOWN', { reached: this.reached, silenceMs: now - this.heardAt });
      this.connectNext(now);
      limit = this.silenceLimit();
    }
    if (this.state === 'hello' && now >= this.helloDue) {
      this.emit('SEND_HELLO');
      //  On the beat, not from now
      while (this.helloDue <= now)
        this.helloDue += HELLO_RETRY_MS;
    }
    const pingDue = this.pingDueAt();
    if (pingDue !== undefined && now >= pingDue) {
      this.emit('SEND_PING');
      this.pingedAt = now;
      if (this.profile !== 'client')
        while (this.pingDue <= now)
          this.pingDue += this.heartbeatMs;
    }
    const due = [this.pingDueAt(), this.state === 'hello' ? this.helloDue : undefined,
      limit ? this.heardAt + limit + 1 : undefined].filter((value): value is number => value !== undefined);
    return due.length > 0 ? Math.min(...due) : null;
  }
}
