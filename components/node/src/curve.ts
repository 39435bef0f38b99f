//  CURVE for a party that connects to a broker (PROTOCOL.md, Security
//  considerations): its own certificate and the broker's public one, as
//  `dsh keygen` writes them (czmq zcert files in ZPL: the public file at
//  PATH, the one with the secret key at PATH_secret), applied to every
//  socket before it connects. And the watch on a socket's handshakes that
//  says why a broker does not answer when it is the keys (ZeroMQ itself
//  gives a refused party no reply at all), in the C SDK's words
//  (components/sdk/dsh_curve.c).
import { existsSync, readFileSync } from 'node:fs';
import { Stream, type Socket } from 'zeromq';

export interface CurveOptions {
  //  This party's certificate (PATH, with PATH_secret beside it); default
  //  $DSH_CERT
  cert?: string;
  //  The broker's public certificate; default $DSH_BROKER_CERT
  brokerCert?: string;
}

//  The socket options that make a socket a CURVE client of the broker.
export interface CurveKeys {
  curvePublicKey: string;
  curveSecretKey: string;
  curveServerKey: string;
}

const Z85_KEY = /^[0-9a-zA-Z.\-:+=^!/*?&<>()[\]{}@%$#]{40}$/;
const NO_SECRET = '0000000000000000000000000000000000000000';

//  The keys from options or the environment; undefined when neither
//  certificate is named (CURVE off); throws an Error saying which file is
//  wrong, or which one is missing.
export function loadCurve(options: CurveOptions = {}): CurveKeys | undefined {
  const cert = options.cert || process.env.DSH_CERT || undefined;
  const brokerCert = options.brokerCert || process.env.DSH_BROKER_CERT || undefined;
  if (!cert && !brokerCert)
    return undefined;
  if (!cert || !brokerCert)
    throw new Error(`CURVE needs both keys: ${cert ? "the broker's public certificate (brokerCert or $DSH_BROKER_CERT)"
      : "this party's certificate (cert or $DSH_CERT)"}`);
  const server = load(brokerCert);
  const own = load(cert);
  if (!own.secret)
    throw new Error(own.unreadable ? `${cert}: cannot read its secret key ${cert}_secret (${own.unreadable})`
      : `${cert}: no secret key (want ${cert}_secret beside it)`);
  return { curvePublicKey: own.public, curveSecretKey: own.secret, curveServerKey: server.public };
}

//  As czmq's zcert_load: PATH_secret (both keys) if it can be read, else
//  PATH (the public key only); unreadable says why PATH_secret could not be.
function load(path: string): { public: string; secret?: string; unreadable?: string } {
  if (!existsSync(path))
    throw new Error(`${path}: no such certificate`);
  let text: string | undefined;
  let unreadable: string | undefined;
  try {
    text = readFileSync(`${path}_secret`, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT')
      unreadable = (error as Error).message;
  }
  try {
    text ??= readFileSync(path, 'utf8');
  } catch (error) {
    throw new Error(`${path}: cannot read it (${(error as Error).message})`);
  }
  const keys = curveSection(text);
  const publicKey = keys?.['public-key'] ?? '';
  if (!Z85_KEY.test(publicKey))
    throw new Error(`${path}: not a CURVE certificate (want the files \`dsh keygen\` writes)`);
  const secret = keys?.['secret-key'] ?? '';
  return { public: publicKey, secret: Z85_KEY.test(secret) && secret !== NO_SECRET ? secret : undefined, unreadable };
}

//  The name = value pairs of a ZPL file's top-level `curve` section
//  (ZeroMQ RFC 4: four spaces of indent per level, # comments, values
//  quoted or bare), or undefined if the file does not read as ZPL.
function curveSection(text: string): Record<string, string> | undefined {
  const pairs: Record<string, string> = {};
  let section = '';
  for (const line of text.split(/\r?\n/)) {
    if (/^\s*(#.*)?$/.test(line))
      continue;
    const match = /^((?: {4})*)([^\s=#]+)\s*(?:=\s*(?:"([^"]*)"|'([^']*)'|([^\s#]*)))?\s*(#.*)?$/.exec(line);
    if (!match)
      return undefined;
    const depth = match[1].length / 4;
    if (depth === 0)
      section = match[2];
    else if (depth === 1 && section === 'curve')
      pairs[match[2]] = match[3] ?? match[4] ?? match[5] ?? '';
  }
  return pairs;
}

//  The greeting probe's timings: how often one may start, how long one may take
const PROBE_INTERVAL_MS = 1000;
const PROBE_DEADLINE_MS = 2000;
//  ZMTP 3's greeting (RFC 23) up to its major version: what makes a ZMTP 3
//  peer send the rest of its own, the mechanism at offset 12, 20 bytes
//  null-padded
const OPENING = Buffer.from([0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3]);
const MECHANISM_AT = 12;
const MECHANISM_END = 32;

//  The mechanism a ZMTP peer at endpoint (tcp://) names in its greeting,
//  read on a connection of its own (a Stream socket: raw TCP through
//  ZeroMQ) that sends only the opening of one, so the peer never has this
//  side's mechanism and cannot close first; undefined if it names none
//  (not ZMTP 3, closed, or no answer within the deadline, or abort()ed).
async function probeMechanism(endpoint: string, abort?: { close?: () => void }): Promise<string | undefined> {
  //  One connection: a probe whose connection fails or closes is done
  const probe = new Stream({ linger: 0, reconnectInterval: -1, ipv6: endpoint.startsWith('tcp://[') });
  const end = () => {
    if (!probe.closed)
      probe.close();
  };
  if (abort)
    abort.close = end;
  const deadline = setTimeout(end, PROBE_DEADLINE_MS);
  try {
    probe.connect(endpoint);
    let peer: Buffer | undefined;
    let greeting = Buffer.alloc(0);
    for await (const [id, data] of probe) {
      if (data.length === 0) {
        if (peer)
          return undefined;     //  the peer closed the connection
        //  Connected (the Stream's notice): the opening, no more
        peer = id;
        await probe.send([id, OPENING]);
        continue;
      }
      greeting = Buffer.concat([greeting, data]);
      //  Not ZMTP 3 (no signature, or an older version): no mechanism named
      if (greeting[0] !== 0xff || (greeting.length >= 10 && !(greeting[9] & 0x01))
        || (greeting.length > 10 && greeting[10] < 3))
        return undefined;
      if (greeting.length >= MECHANISM_END)
        return greeting.subarray(MECHANISM_AT, MECHANISM_END).toString('latin1').replace(/\0+$/, '');
    }
    return undefined;
  } catch {
    return undefined;
  } finally {
    clearTimeout(deadline);
    end();
  }
}

//  Follows a socket's handshakes: failure is why the last one failed
//  (undefined once one succeeds), successes how many succeeded. onFailure
//  hears each new reason (libzmq retries, and fails the same way, every
//  reconnect interval).
export class Handshake {
  failure?: string;
  successes = 0;
  closed = 0;                 //  handshakes the broker's side closed with no detail
  //  The greeting probe: at most one in flight, at most one started a second
  private probe?: { close?: () => void };
  private probeDue?: string;
  private probeStarted = -Infinity;
  private probeTimer?: NodeJS.Timeout;
  private ended = false;

  constructor(socket: Socket, private readonly curveOn: boolean, private readonly onFailure?: (failure: string) => void) {
    socket.events.on('handshake', () => {
      this.failure = undefined;
      this.successes += 1;
      this.probeDue = undefined;
      this.probe?.close?.();
    });
    socket.events.on('handshake:error:auth', (event) => this.fail(
      `the broker refused this party's key (ZAP status ${event.error.status}): it is not in the broker's allow-list`));
    socket.events.on('handshake:error:protocol', (event) => {
      if (event.error.code === 'ERR_ZMTP_MECHANISM_MISMATCH')
        this.mismatch();
      else
        this.fail("the handshake with the broker failed (protocol error; is brokerCert the broker's key?)");
    });
    //  The connection closed or timed out in the handshake: what a
    //  starting, stopped or restarting broker does too, so no verdict (as
    //  the C SDK): counted, and ZeroMQ tries again. A mechanism mismatch
    //  may show as one too, when the broker closed before its greeting
    //  named its mechanism (libzmq's EPIPE): the probe tells, on TCP
    socket.events.on('handshake:error:other', (event) => {
      this.closed += 1;
      if (event.address?.startsWith('tcp://')) {
        this.probeDue = event.address;
        this.startProbe();
      }
    });
    socket.events.on('end', () => {
      this.ended = true;
      clearTimeout(this.probeTimer);
      this.probe?.close?.();
    });
  }

  private fail(failure: string): void {
    const fresh = failure !== this.failure;
    this.failure = failure;
    if (fresh)
      this.onFailure?.(failure);
  }

  private mismatch(): void {
    this.fail(this.curveOn ? 'the broker does not speak CURVE, and this party does (drop cert and $DSH_CERT)'
      : 'the broker requires CURVE: give cert and brokerCert (or $DSH_CERT and $DSH_BROKER_CERT)');
  }

  private startProbe(): void {
    if (this.probe || this.probeTimer || !this.probeDue || this.failure || this.ended)
      return;
    const wait = this.probeStarted + PROBE_INTERVAL_MS - Date.now();
    if (wait > 0) {
      this.probeTimer = setTimeout(() => {
        this.probeTimer = undefined;
        this.startProbe();
      }, wait);
      this.probeTimer.unref();
      return;
    }
    const endpoint = this.probeDue;
    this.probeDue = undefined;
    this.probeStarted = Date.now();
    const probe: { close?: () => void } = {};
    this.probe = probe;
    void probeMechanism(endpoint, probe).then((mechanism) => {
      this.probe = undefined;
      if (this.ended)
        return;
      if (mechanism !== undefined && mechanism !== (this.curveOn ? 'CURVE' : 'NULL'))
        this.mismatch();
      this.startProbe();
    });
  }
}
