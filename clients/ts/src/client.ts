// The client API: connect, Client.call, Client.stream, client and
// bidirectional streams, codecs. Shared by the Node and browser builds;
// each supplies the dialer (node.ts, browser.ts).

import { Endpoint, parseTarget, Resolver } from "./balance.js";
import { parseJSON, stringifyJSON } from "./json.js";
import { Session, type SessionOptions, type Stream, type Transport } from "./session.js";
import { StatusError } from "./status.js";
import { fromUtf8, utf8, type Metadata } from "./wire.js";

/**
 * A Codec encodes the messages of a call: codec id 0 (raw bytes), 1 (JSON)
 * or 2 (Protocol Buffers) on the wire.
 */
export interface Codec<I = unknown, O = unknown> {
  readonly id: number;
  readonly name: string;
  encode(msg: I): Uint8Array;
  decode(b: Uint8Array): O;
}

/**
 * JSON, the default codec. Integers beyond 2^53 in replies come back as
 * bigint, and bigint values in requests are sent as JSON integers: int64
 * and uint64 fields keep every digit.
 */
export const json: Codec<unknown, unknown> = {
  id: 1,
  name: "json",
  encode: (msg) => utf8(stringifyJSON(msg)),
  decode: (b) => (b.length === 0 ? undefined : parseJSON(fromUtf8(b))),
};

/** Raw bytes, unchanged: the codec of Uint8Array requests. */
export const raw: Codec<Uint8Array, Uint8Array> = {
  id: 0,
  name: "raw",
  encode: (msg) => {
    if (!(msg instanceof Uint8Array)) throw new TypeError("the raw codec sends Uint8Array messages");
    return msg;
  },
  decode: (b) => b,
};

/** Call metadata: a record (a key may have several values) or a list of pairs. */
export type MetadataInit = Record<string, string | string[]> | [string, string][];

export interface CallOptions<I = unknown, O = unknown> {
  /** Aborting it cancels the call (CANCEL is sent; the connection stays up). */
  signal?: AbortSignal;
  /** Deadline, in milliseconds from now; the server is told it too. */
  timeoutMs?: number;
  /** Request metadata. */
  metadata?: MetadataInit;
  /** The codec: JSON by default, raw for a Uint8Array request. */
  codec?: Codec<I, O>;
  /** Called with the reply metadata (the server's HEADERS). */
  onHeader?: (md: Metadata) => void;
  /** Called with the trailing metadata when the call ends (also on error). */
  onTrailer?: (md: Metadata) => void;
}

export interface ConnectOptions extends SessionOptions {
  /**
   * A token for servers that require one (warren serve on a network
   * address): sent as "authorization: Bearer TOKEN" metadata on every call
   * and, over WebSocket, as the subprotocol "warren.bearer.TOKEN".
   */
  token?: string;
  /** Metadata sent on every call, before each call's own. */
  metadata?: MetadataInit;
  /** Aborts connecting. */
  signal?: AbortSignal;
  /** Node only: options for tls:// and wss:// (ca, cert, key, servername, rejectUnauthorized...). */
  tls?: Record<string, unknown>;
}

/** The trace context to send with each call (otel.ts), set by the Node build. */
let tracing: (() => Metadata) | undefined;

/** @internal */
export function setTracing(f: () => Metadata): void {
  tracing = f;
}

/** Opens a transport to an address. */
export type Dialer = (addr: string, opts: ConnectOptions) => Promise<Transport>;

function toPairs(md: MetadataInit | undefined): Metadata {
  if (!md) return [];
  if (Array.isArray(md)) return md;
  const out: Metadata = [];
  for (const [k, v] of Object.entries(md)) {
    if (Array.isArray(v)) for (const x of v) out.push([k, x]);
    else out.push([k, v]);
  }
  return out;
}

function pickCodec<I, O>(req: unknown, c: Codec<I, O> | undefined): Codec<I, O> {
  if (c) return c;
  return (req instanceof Uint8Array ? raw : json) as unknown as Codec<I, O>;
}

/**
 * Dials addr and returns a Client once a server's preface arrived: one
 * address, several separated by commas, or dns:///host:port resolved with
 * lookup (Node only) to tcp:// addresses (tls:// with the tls option, the
 * certificate checked against host).
 */
export async function connectWith(dial: Dialer, addr: string, opts: ConnectOptions = {}, lookup?: (host: string) => Promise<string[]>): Promise<Client> {
  const target = parseTarget(addr, (a) => {
    if (a !== "default" && !/^[a-z]+:/.test(a)) throw new Error(`${JSON.stringify(a)} has no scheme (unix:, tcp://, tls://, ws://, wss://)`);
  });
  let dialOpts = opts;
  let resolver: Resolver | undefined;
  let addrs: string[];
  if ("host" in target) {
    if (!lookup) throw new StatusError("invalid_argument", `${addr}: dns:/// names are resolved in Node only`);
    resolver = new Resolver(target.host, target.port, lookup, opts.tls ? "tls" : "tcp");
    if (opts.tls) dialOpts = { ...opts, tls: { servername: target.host, ...opts.tls } };
    addrs = await resolver.resolve();
  } else {
    addrs = target.addrs;
  }
  // Dialing again after a lost connection: without connect's signal, which
  // bounds the first connection only.
  const make = (a: string) => new Endpoint(a, (first) => openSession(dial, a, first ? dialOpts : { ...dialOpts, signal: undefined }));
  const eps = addrs.map(make);
  // Every server is dialed; connecting fails only when none answers.
  const got = await Promise.allSettled(eps.map((ep) => ep.connection(() => false, true)));
  const up = got.findIndex((r) => r.status === "fulfilled");
  if (up < 0) throw (got[0] as PromiseRejectedResult).reason;
  return new Client(eps, opts, up, resolver, make);
}

async function openSession(dial: Dialer, addr: string, opts: ConnectOptions): Promise<Session> {
  if (opts.signal?.aborted) throw abortError(opts.signal);
  const t = await dial(addr, opts);
  const s = new Session(t, opts);
  const onAbort = () => s.fail(abortError(opts.signal!));
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    await s.ready;
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
  return s;
}

function abortError(signal: AbortSignal): StatusError {
  const r = signal.reason;
  if (r instanceof StatusError) return r;
  if (r && typeof r === "object" && (r as Error).name === "TimeoutError") {
    return new StatusError("deadline_exceeded", (r as Error).message, [], [], { cause: r });
  }
  return new StatusError("canceled", r instanceof Error ? r.message : r !== undefined ? String(r) : "canceled", [], [], { cause: r });
}

/**
 * A Client calls one warren server, or several. Any number of calls may
 * run at once on a server's connection; they share its flow control. When
 * the connection is lost, the calls in flight fail with unavailable and
 * the next call dials again; after a failed attempt, calls fail at once
 * with its error until a backoff (50 ms, doubling up to 5 s) has passed. A
 * connection the server is leaving (GOAWAY) finishes its calls while new
 * calls go to a new one.
 *
 * With several servers (an address list or a dns:/// name), calls go
 * round robin over those whose connection is up and not draining; a unary
 * call that failed as never processed (StatusError.notProcessed) is sent
 * again, on another server when there is one, within its deadline.
 */
export class Client {
  private readonly base: Metadata;
  private eps: Endpoint[];
  private last: Endpoint;
  private rr = 0;
  private closing = false;
  private refreshing: Promise<void> | null = null;

  /** @internal */
  constructor(
    eps: Endpoint[],
    opts: ConnectOptions,
    first = 0,
    private readonly resolver?: Resolver,
    private readonly make?: (addr: string) => Endpoint,
  ) {
    this.eps = eps;
    this.last = eps[first];
    this.rr = (first + 1) % eps.length;
    this.base = toPairs(opts.metadata);
    if (opts.token) this.base.push(["authorization", `Bearer ${opts.token}`]);
  }

  /** @internal The session of the last call's server. */
  get session(): Session {
    return (this.last.current ?? this.eps.find((ep) => ep.current)?.current)!;
  }

  /** The servers' addresses (a dns:/// name's, as last resolved). */
  get addresses(): string[] {
    return this.eps.map((ep) => ep.addr);
  }

  /** Resolves when the connection of the last call's server has ended (the next call dials again, unless the client was closed). */
  get closed(): Promise<void> {
    return this.session.closed;
  }

  /** The server's settings (its limits), from its preface. */
  get serverSettings() {
    return { ...this.session.remote };
  }

  /** @internal The next server, round robin: one whose connection is up, else one not backing off, else the next. */
  pick(avoid?: Endpoint): Endpoint {
    if (this.resolver && !this.refreshing && this.resolver.due(Date.now())) {
      this.refreshing = this.refresh().finally(() => (this.refreshing = null));
    }
    const eps = this.eps;
    const n = eps.length;
    const now = Date.now();
    let fallback = -1;
    for (let i = 0; i < n; i++) {
      const k = (this.rr + i) % n;
      const ep = eps[k];
      if (ep === avoid && n > 1) continue;
      if (ep.usable) {
        this.rr = (k + 1) % n;
        return (this.last = ep);
      }
      if (fallback < 0 && !ep.backingOff(now)) fallback = k;
    }
    if (fallback < 0) {
      fallback = this.rr % n;
      if (eps[fallback] === avoid && n > 1) fallback = (fallback + 1) % n;
    }
    this.rr = (fallback + 1) % n;
    return (this.last = eps[fallback]);
  }

  /** Resolves a dns:/// name again; endpoints follow its addresses. */
  private async refresh(): Promise<void> {
    let addrs: string[];
    try {
      addrs = await this.resolver!.resolve();
    } catch {
      return; // keep the servers we know
    }
    if (this.closing) return;
    const keep = this.eps.filter((ep) => addrs.includes(ep.addr));
    const gone = this.eps.filter((ep) => !addrs.includes(ep.addr));
    const added = addrs.filter((a) => !keep.some((ep) => ep.addr === a)).map((a) => this.make!(a));
    if (keep.length + added.length === 0) return;
    this.eps = [...keep, ...added];
    for (const ep of gone) {
      ep.removed = true;
      // Their calls in flight finish; no new ones go there.
      for (const s of ep.sessions()) s.closeWhenIdle();
    }
  }

  /** @internal A session of ep for a new call: its current one, or a new connection. */
  async connection(ep: Endpoint): Promise<Session> {
    try {
      return await ep.connection(() => this.closing);
    } catch (e) {
      if (this.resolver) this.resolver.stale = true;
      throw e;
    }
  }

  /**
   * Calls a unary method and returns its reply. The request is JSON by
   * default (raw bytes for a Uint8Array). A failed call throws a
   * StatusError; one that ends without a reply throws internal, as in Go.
   */
  async call<I = unknown, O = any>(method: string, req: I, opts: CallOptions<I, O> = {}): Promise<O> {
    const codec = pickCodec(req, opts.codec);
    const msg = codec.encode(req);
    const start = Date.now();
    let tries = Math.max(2, this.eps.length);
    let avoid: Endpoint | undefined;
    for (;;) {
      let o = opts;
      if (opts.timeoutMs !== undefined && opts.timeoutMs > 0 && avoid) {
        const left = opts.timeoutMs - (Date.now() - start);
        if (left <= 0) throw new StatusError("deadline_exceeded", `${method}: deadline of ${opts.timeoutMs} ms exceeded`);
        o = { ...opts, timeoutMs: left };
      }
      const c = new Call<I, O>(this, method, o, codec, msg, avoid);
      try {
        await c.opened;
        const reply = await c.next();
        const extra = await c.next();
        if (extra !== END) {
          c.cancel(new StatusError("internal", `${method}: more than one reply message`));
          await c.next();
        }
        if (reply === END) throw noReply(method);
        return reply;
      } catch (e) {
        if (!(e instanceof StatusError) || !e.notProcessed || --tries <= 0 || this.closing || opts.signal?.aborted) throw e;
        avoid = c.ep;
      }
    }
  }

  /**
   * Calls a server-streaming method: the replies, as an async iterable.
   * Leaving the loop early cancels the call.
   */
  stream<I = unknown, O = any>(method: string, req: I, opts: CallOptions<I, O> = {}): ServerStream<O> {
    const codec = pickCodec(req, opts.codec);
    return new Call<I, O>(this, method, opts, codec, codec.encode(req));
  }

  /** Opens a client-streaming call: send messages, then closeAndReceive. */
  clientStream<I = unknown, O = any>(method: string, opts: CallOptions<I, O> = {}): ClientStream<I, O> {
    return new Call<I, O>(this, method, opts, opts.codec ?? (json as Codec<I, O>));
  }

  /** Opens a bidirectional stream: send and iterate at once. */
  bidiStream<I = unknown, O = any>(method: string, opts: CallOptions<I, O> = {}): BidiStream<I, O> {
    return new Call<I, O>(this, method, opts, opts.codec ?? (json as Codec<I, O>));
  }

  /** Measures a round trip with a PING; resolves with milliseconds. */
  async ping(opts: { signal?: AbortSignal } = {}): Promise<number> {
    const s = await this.connection(this.pick());
    return s.ping(opts.signal);
  }

  /** Closes the connections; calls still open fail with canceled, later calls too. */
  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.eps.map((ep) => ep.settled()));
    const all = this.eps.flatMap((ep) => ep.sessions());
    for (const s of all) s.close();
    await Promise.all(all.map((s) => s.closed));
  }

  /** @internal */
  metadata(md: MetadataInit | undefined): Metadata | undefined {
    let own = toPairs(md);
    const trace = tracing?.();
    if (trace?.length) own = [...own, ...trace.filter(([k]) => !own.some(([o]) => o === k))];
    if (this.base.length === 0) return own.length ? own : undefined;
    return own.length ? [...this.base, ...own] : this.base;
  }
}

/** The error of a call that ended without its one reply (Go's message). */
function noReply(method: string): StatusError {
  return new StatusError("internal", `${method}: no reply message`);
}

/** The end of the server's messages. */
const END: unique symbol = Symbol("end");

/** The replies of a server-streaming call. */
export interface ServerStream<O> extends AsyncIterable<O> {
  /** The reply metadata, once it arrived. */
  readonly header: Metadata | null;
  /** The trailing metadata, once the call ended. */
  readonly trailer: Metadata | null;
  /** Cancels the call. */
  cancel(reason?: unknown): void;
}

/** A client-streaming call. */
export interface ClientStream<I, O> {
  /** Sends a message; resolves once it is on its way (flow control permitting). */
  send(msg: I): Promise<void>;
  /** Ends the requests and returns the reply. */
  closeAndReceive(): Promise<O>;
  cancel(reason?: unknown): void;
  readonly header: Metadata | null;
  readonly trailer: Metadata | null;
}

/** A bidirectional-streaming call. */
export interface BidiStream<I, O> extends AsyncIterable<O> {
  send(msg: I): Promise<void>;
  /** Ends the requests (half-close); replies keep coming. */
  closeSend(): Promise<void>;
  /** The next reply, or undefined at the end. */
  receive(): Promise<O | undefined>;
  cancel(reason?: unknown): void;
  readonly header: Metadata | null;
  readonly trailer: Metadata | null;
}

/** One call of any kind. */
class Call<I, O> implements ServerStream<O>, ClientStream<I, O>, BidiStream<I, O> {
  readonly opened: Promise<Stream>;
  private stream: Stream | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private onAbort: (() => void) | undefined;
  private earlyErr: StatusError | null = null;
  /** @internal Set while the opening waits: called by a cancel before the stream opened. */
  wakeOpen: (() => void) | null = null;
  private headerSeen = false;
  private finished = false;

  /** @internal The server this call went to. */
  readonly ep: Endpoint | undefined;

  constructor(
    client: Client,
    readonly method: string,
    private readonly opts: CallOptions<I, O>,
    private readonly codec: Codec<I, O>,
    first?: Uint8Array,
    avoid?: Endpoint,
  ) {
    const signal = opts.signal;
    if (signal?.aborted) {
      this.opened = Promise.reject(abortError(signal));
    } else {
      // The deadline and cancellation cover the opening too: waiting for
      // a connection, or for a stream slot.
      const ep = (this.ep = client.pick(avoid));
      const open = (sess: Session, timeoutMs: number | undefined) => sess.open(method, codec.id, timeoutMs, client.metadata(opts.metadata), first, this);
      let p: Promise<Stream>;
      if (ep.usable) {
        p = open(ep.current!, opts.timeoutMs);
      } else {
        const start = Date.now();
        p = this.untilCanceled(client.connection(ep)).then((sess) => {
          const t = opts.timeoutMs;
          return open(sess, t !== undefined && t > 0 ? Math.max(t - (Date.now() - start), 1) : t);
        });
      }
      this.opened = p
        .then((s) => {
          this.stream = s;
          if (this.earlyErr) s.cancel(this.earlyErr);
          return s;
        });
      if (opts.timeoutMs !== undefined && opts.timeoutMs > 0) {
        this.timer = setTimeout(() => this.cancel(new StatusError("deadline_exceeded", `${method}: deadline of ${opts.timeoutMs} ms exceeded`)), opts.timeoutMs);
      }
      if (signal) {
        this.onAbort = () => this.cancel(abortError(signal));
        signal.addEventListener("abort", this.onAbort, { once: true });
      }
    }
    this.opened.catch(() => this.cleanup());
  }

  /** @internal The cancellation of a call not yet opened. */
  get early(): StatusError | null {
    return this.earlyErr;
  }

  /** p, or this call's cancellation if that comes first. */
  private untilCanceled<T>(p: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.wakeOpen = () => reject(this.earlyErr);
      p.then(
        (v) => {
          this.wakeOpen = null;
          resolve(v);
        },
        (e) => {
          this.wakeOpen = null;
          reject(e);
        },
      );
    });
  }

  get header(): Metadata | null {
    return this.stream?.header ?? null;
  }

  get trailer(): Metadata | null {
    return this.stream?.trailer ?? null;
  }

  cancel(reason?: unknown): void {
    const err =
      reason instanceof StatusError
        ? reason
        : new StatusError("canceled", reason instanceof Error ? reason.message : reason !== undefined ? String(reason) : `${this.method}: canceled`, [], [], { cause: reason });
    if (this.stream) this.stream.cancel(err);
    else {
      this.earlyErr ??= err;
      this.wakeOpen?.();
    }
    this.cleanup(); // the deadline timer and the abort listener
  }

  private cleanup(): void {
    clearTimeout(this.timer);
    if (this.onAbort) this.opts.signal?.removeEventListener("abort", this.onAbort);
    this.onAbort = undefined;
  }

  async send(msg: I): Promise<void> {
    const s = await this.opened;
    await s.send(this.codec.encode(msg), false);
  }

  async closeSend(): Promise<void> {
    const s = await this.opened;
    s.closeSend();
  }

  /** The next reply, or undefined at the end; throws the call's error. */
  async receive(): Promise<O | undefined> {
    const m = await this.next();
    return m === END ? undefined : m;
  }

  /** The next message (decoded), END at the end; throws the call's error. */
  async next(): Promise<O | typeof END> {
    const s = await this.opened;
    for (;;) {
      if (!this.headerSeen && s.header !== null) {
        this.headerSeen = true;
        this.opts.onHeader?.(s.header);
      }
      const m = s.take();
      if (m !== null) return this.codec.decode(m);
      if (s.result !== undefined) {
        this.finish(s);
        if (s.result) throw s.result;
        return END;
      }
      await s.wait();
    }
  }

  private finish(s: Stream): void {
    if (this.finished) return;
    this.finished = true;
    this.cleanup();
    this.opts.onTrailer?.(s.trailer ?? []);
  }

  async closeAndReceive(): Promise<O> {
    await this.closeSend();
    const reply = await this.next();
    const extra = await this.next();
    if (extra !== END) throw new StatusError("internal", `${this.method}: more than one reply message`);
    if (reply === END) throw noReply(this.method);
    return reply;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<O> {
    let done = false;
    try {
      for (;;) {
        const m = await this.next();
        if (m === END) {
          done = true;
          return;
        }
        yield m;
      }
    } finally {
      if (!done) this.cancel(new StatusError("canceled", `${this.method}: the caller stopped reading`));
    }
  }
}

