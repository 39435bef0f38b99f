//  CURVE for a party that connects to a broker (PROTOCOL.md, Security
//  considerations): its own certificate and the broker's public one, as
//  `dsh keygen` writes them (czmq zcert files in ZPL: the public file at
//  PATH, the one with the secret key at PATH_secret), applied to every
//  socket before it connects. And the watch on a socket's handshakes that
//  says why a broker does not answer when it is the keys (ZeroMQ itself
//  gives a refused party no reply at all), in the C SDK's words
//  (components/sdk/dsh_curve.c).
import { existsSync, readFileSync } from 'node:fs';
import type { Socket } from 'zeromq';

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

//  Follows a socket's handshakes: failure is why the last one failed
//  (undefined once one succeeds), successes how many succeeded. onFailure
//  hears each new reason (libzmq retries, and fails the same way, every
//  reconnect interval).
export class Handshake {
  failure?: string;
  successes = 0;
  closed = 0;                 //  handshakes the broker's side closed with no detail

  constructor(socket: Socket, private readonly curveOn: boolean, onFailure?: (failure: string) => void) {
    const fail = (failure: string) => {
      const fresh = failure !== this.failure;
      this.failure = failure;
      if (fresh)
        onFailure?.(failure);
    };
    socket.events.on('handshake', () => {
      this.failure = undefined;
      this.successes += 1;
    });
    socket.events.on('handshake:error:auth', (event) => fail(
      `the broker refused this party's key (ZAP status ${event.error.status}): it is not in the broker's allow-list`));
    socket.events.on('handshake:error:protocol', (event) => fail(event.error.code === 'ERR_ZMTP_MECHANISM_MISMATCH'
      ? (this.curveOn ? 'the broker does not speak CURVE, and this party does (drop cert and $DSH_CERT)'
        : 'the broker requires CURVE: give cert and brokerCert (or $DSH_CERT and $DSH_BROKER_CERT)')
      : "the handshake with the broker failed (protocol error; is brokerCert the broker's key?)"));
    //  The connection closed or timed out in the handshake: what a
    //  starting, stopped or restarting broker does too, so no verdict (as
    //  the C SDK): counted, and ZeroMQ tries again. A mechanism mismatch
    //  shows as its own event
    socket.events.on('handshake:error:other', () => {
      this.closed += 1;
    });
  }
}
