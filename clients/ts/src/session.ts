// A client session over one connection (PROTOCOL.md): the preface, then
// streams multiplexed over frames, with chunking, flow control both ways,
// PING and GOAWAY. It works over any byte stream (a Transport): a socket in
// Node, a WebSocket in browsers.

import { StatusError, codeName, type Code } from "./status.js";
import {
  DEFAULT_SETTINGS,
  EMPTY,
  FLAG_ACK,
  FLAG_END,
  FLAG_MORE,
  FrameType,
  HEADER_SIZE,
  WireError,
  checkHeader,
  decodeCallHeader,
  decodeGoAway,
  decodeMetadata,
  decodePreface,
  decodeTrailer,
  decodeWindow,
  encodeCallHeader,
  encodeGoAway,
  encodePreface,
  encodeTrailer,
  putHeader,
  putU32,
  readU32,
  typeName,
  type Metadata,
  type Settings,
} from "./wire.js";

import { ByteQueue } from "./input.js";
import { Stream, tooLarge, type OpenGate, type SessionOptions, type Transport } from "./stream.js";

export { Stream, tooLarge, type OpenGate, type SessionOptions, type Transport };

const enum State {
  Handshake,
  Open,
  Closed,
}

/** Settings this client announces unless told otherwise. */
const CLIENT_DEFAULTS = { maxFrameSize: 512 << 10, initialWindow: 2 << 20 };

/**
 * A Session is the client side of one warren connection. It is created
 * over a transport that has just connected; ready resolves once the
 * server's preface arrived.
 */
export class Session {
  readonly local: Settings;
  remote: Settings = { ...DEFAULT_SETTINGS };
  readonly ready: Promise<void>;
  private state = State.Handshake;
  private readyResolve!: () => void;
  private readyReject!: (e: Error) => void;
  private handshakeTimer: ReturnType<typeof setTimeout> | undefined;

  private streams = new Map<number, Stream>();
  private nextId = 1;
  private lastPeerId = 0; // highest server-opened stream id seen
  private openWaiters: (() => void)[] = [];

  // flow control
  private connSend = 0; // connection send window
  private connRecv = 0; // bytes the server may send on the connection
  private connUnacked = 0;
  private blocked: Stream[] = []; // streams waiting for credit

  // input
  private readonly input = new ByteQueue();
  private hdr: { length: number; stream: number; type: number; flags: number } | null = null;

  // output
  private out: Uint8Array[] = [];
  private flushScheduled = false;

  private pings = new Map<string, () => void>();
  private pingSeq = 0;
  private goAway: { lastStream: number; code: number; message: string } | null = null;
  private closeErr: StatusError | null = null;
  private closedResolve!: () => void;
  /** Resolves when the connection has ended. */
  readonly closed: Promise<void>;

  constructor(
    readonly transport: Transport,
    opts: SessionOptions = {},
  ) {
    this.local = {
      maxFrameSize: opts.maxFrameSize ?? CLIENT_DEFAULTS.maxFrameSize,
      maxMessageSize: opts.maxMessageSize ?? DEFAULT_SETTINGS.maxMessageSize,
      initialWindow: opts.initialWindow ?? CLIENT_DEFAULTS.initialWindow,
      maxStreams: opts.maxStreams ?? DEFAULT_SETTINGS.maxStreams,
    };
    this.connRecv = 16 * this.local.initialWindow;
    this.ready = new Promise((res, rej) => {
      this.readyResolve = res;
      this.readyReject = rej;
    });
    this.ready.catch(() => {});
    this.closed = new Promise((r) => (this.closedResolve = r));
    transport.onData = (b) => this.onData(b);
    transport.onClose = (err) => this.onTransportClose(err);
    this.handshakeTimer = setTimeout(
      () => this.fail(new StatusError("unavailable", "no warren preface from the server within the handshake timeout")),
      opts.handshakeTimeoutMs ?? 10_000,
    );
    transport.write([encodePreface(this.local)]);
  }

  /** Whether the connection has ended. */
  get ended(): boolean {
    return this.state === State.Closed;
  }

  /** Whether new calls may start. */
  get usable(): boolean {
    return this.state === State.Open && this.goAway === null && !this.leaving;
  }

  private leaving = false;

  /** Takes no new calls and closes once the calls in flight have ended. */
  closeWhenIdle(): void {
    this.leaving = true;
    if (this.streams.size === 0) this.close();
  }

  // ---- output ----

  /** Queues a frame for the next flush. */
  frame(stream: number, type: number, flags: number, payload: Uint8Array): void {
    const b = new Uint8Array(HEADER_SIZE + payload.length);
    putHeader(b, 0, payload.length, stream, type, flags);
    b.set(payload, HEADER_SIZE);
    this.push(b);
  }

  /** Queues bytes (whole frames) for the next flush. */
  push(b: Uint8Array): void {
    if (this.state === State.Closed) return;
    this.out.push(b);
    this.schedule();
  }

  private schedule(): void {
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.out.length === 0 || this.state === State.Closed) return;
    const out = this.out;
    this.out = [];
    this.transport.write(out);
  }

  // ---- streams ----

  /**
   * Opens a stream with its call header; END on it if the caller sends no
   * messages. Waits while the server's MaxStreams streams are open.
   */
  async open(method: string, codec: number, timeoutMs: number | undefined, md: Metadata | undefined, first?: Uint8Array, gate?: OpenGate): Promise<Stream> {
    if (this.usable && this.streams.size >= this.remote.maxStreams) await this.waitSlot(gate);
    this.checkUsable();
    const timeoutUs = timeoutMs && timeoutMs > 0 ? Math.ceil(timeoutMs * 1000) : 0;
    const h = encodeCallHeader(method, codec, timeoutUs, md);
    if (h.length > this.remote.maxFrameSize) {
      throw new StatusError("resource_exhausted", `the call header of ${h.length} bytes is over the server's MaxFrameSize ${this.remote.maxFrameSize}`);
    }
    if (first && first.length > this.remote.maxMessageSize) {
      throw tooLarge(first.length, this.remote.maxMessageSize);
    }
    const s = new Stream(this, this.nextId);
    this.nextId += 2;
    this.streams.set(s.id, s);
    if (first && first.length <= this.chunkMax() && first.length <= this.connSend && first.length <= s.sendWindow) {
      // The common unary call: HEADERS and DATA|END in one buffer.
      const b = new Uint8Array(2 * HEADER_SIZE + h.length + first.length);
      putHeader(b, 0, h.length, s.id, FrameType.Headers, 0);
      b.set(h, HEADER_SIZE);
      const p = HEADER_SIZE + h.length;
      putHeader(b, p, first.length, s.id, FrameType.Data, FLAG_END);
      b.set(first, p + HEADER_SIZE);
      this.connSend -= first.length;
      s.sendWindow -= first.length;
      s.sendEnded = true;
      this.push(b);
      return s;
    }
    this.frame(s.id, FrameType.Headers, 0, h);
    if (first) {
      void s.send(first, true).catch(() => {});
    }
    return s;
  }

  /** Waits while the server's MaxStreams streams are open, or until gate's call is canceled. */
  private async waitSlot(gate: OpenGate | undefined): Promise<void> {
    while (this.usable && this.streams.size >= this.remote.maxStreams) {
      if (gate?.early) break;
      await new Promise<void>((r) => {
        this.openWaiters.push(r);
        if (gate) {
          gate.wakeOpen = () => {
            const i = this.openWaiters.indexOf(r);
            if (i >= 0) this.openWaiters.splice(i, 1);
            r();
          };
        }
      });
      if (gate) gate.wakeOpen = null;
    }
    if (gate?.early) {
      // A slot handed to this call passes on to the next.
      if (this.streams.size < this.remote.maxStreams) this.openWaiters.shift()?.();
      throw gate.early;
    }
  }

  private checkUsable(): void {
    if (this.closeErr) throw this.closeErr;
    if (this.state !== State.Open) throw new StatusError("unavailable", "the connection is closed");
    if (this.goAway) throw new StatusError("unavailable", `the server is going away${this.goAway.message ? ": " + this.goAway.message : ""}`, [], [], { notProcessed: true });
  }

  /** The largest DATA payload to send: the server's MaxFrameSize, and half its window. */
  private chunkMax(): number {
    return Math.min(this.remote.maxFrameSize, Math.max(1024, Math.floor(this.remote.initialWindow / 2)));
  }

  sendMessage(s: Stream, msg: Uint8Array, end: boolean): Promise<void> {
    if (s.result !== undefined) return Promise.reject(s.result ?? new StatusError("failed_precondition", "the call has ended"));
    if (s.sendEnded) return Promise.reject(new StatusError("failed_precondition", "the call's sending side is closed"));
    if (msg.length > this.remote.maxMessageSize) {
      const e = tooLarge(msg.length, this.remote.maxMessageSize);
      return Promise.reject(e);
    }
    if (end) s.sendEnded = true;
    return new Promise((resolve, reject) => {
      s.pending.push({ msg, off: 0, end, first: true, resolve, reject });
      if (s.pending.length === 1) this.pump(s);
    });
  }

  /** Sends what s's windows allow of its pending messages; true when all went. */
  private pump(s: Stream): boolean {
    const max = this.chunkMax();
    while (s.pending.length > 0) {
      const p = s.pending[0];
      const rest = p.msg.length - p.off;
      if (p.first && p.msg.length <= max) {
        // Whole message in one frame, once both windows hold it.
        const cost = p.msg.length;
        if (cost > this.connSend || cost > s.sendWindow) return this.block(s);
        const b = new Uint8Array(HEADER_SIZE + cost);
        putHeader(b, 0, cost, s.id, FrameType.Data, p.end ? FLAG_END : 0);
        b.set(p.msg, HEADER_SIZE);
        this.connSend -= cost;
        s.sendWindow -= cost;
        this.push(b);
      } else {
        const credit = Math.min(this.connSend, s.sendWindow, max);
        if (p.first) {
          if (credit < 5) return this.block(s);
          const n = credit - 4;
          const b = new Uint8Array(HEADER_SIZE + credit);
          putHeader(b, 0, credit, s.id, FrameType.Data, FLAG_MORE);
          putU32(b, HEADER_SIZE, p.msg.length);
          b.set(p.msg.subarray(0, n), HEADER_SIZE + 4);
          p.off = n;
          p.first = false;
          this.connSend -= credit;
          s.sendWindow -= credit;
          this.push(b);
          continue;
        }
        if (credit < 1) return this.block(s);
        const n = Math.min(credit, rest);
        const last = n === rest;
        const b = new Uint8Array(HEADER_SIZE + n);
        putHeader(b, 0, n, s.id, FrameType.Data, last ? (p.end ? FLAG_END : 0) : FLAG_MORE);
        b.set(p.msg.subarray(p.off, p.off + n), HEADER_SIZE);
        p.off += n;
        this.connSend -= n;
        s.sendWindow -= n;
        this.push(b);
        if (!last) continue;
      }
      s.pending.shift();
      p.resolve();
    }
    return true;
  }

  private block(s: Stream): boolean {
    if (!this.blocked.includes(s)) this.blocked.push(s);
    return false;
  }

  private unblock(): void {
    const list = this.blocked;
    this.blocked = [];
    for (const s of list) {
      if (s.result === undefined) this.pump(s);
    }
  }

  /** Credits consumed bytes of a stream, batching WINDOW frames. */
  consumed(s: Stream, cost: number): void {
    if (cost === 0) return;
    if (s.result === undefined && !s.recvEnded) {
      s.unacked += cost;
      if (s.unacked >= this.local.initialWindow / 2) {
        s.recvWindow += s.unacked;
        this.window(s.id, s.unacked);
        s.unacked = 0;
      }
    }
    this.connConsumed(cost);
  }

  private connConsumed(cost: number): void {
    if (cost === 0) return;
    this.connUnacked += cost;
    if (this.connUnacked >= 8 * this.local.initialWindow) {
      this.connRecv += this.connUnacked;
      this.window(0, this.connUnacked);
      this.connUnacked = 0;
    }
  }

  private window(stream: number, inc: number): void {
    const b = new Uint8Array(HEADER_SIZE + 4);
    putHeader(b, 0, 4, stream, FrameType.Window, 0);
    putU32(b, HEADER_SIZE, inc);
    this.push(b);
  }

  /** Ends a stream: err null for OK. Unconsumed bytes go back to the connection. */
  endStream(s: Stream, err: StatusError | null): void {
    if (s.result !== undefined) return;
    s.result = err;
    this.streams.delete(s.id);
    let held = s.partialCost;
    for (const m of s.queue) held += m.cost;
    if (err) {
      // Messages not taken are dropped: credit them now.
      s.queue.length = 0;
      this.connConsumed(held);
    }
    s.partial = null;
    for (const p of s.pending) p.reject(err ?? new StatusError("failed_precondition", "the call has ended"));
    s.pending.length = 0;
    s.wake();
    const w = this.openWaiters.shift();
    if (w) w();
    if (this.goAway && this.streams.size === 0) this.shutdown();
    else if (this.leaving && this.streams.size === 0) queueMicrotask(() => this.close());
  }

  // ---- ping ----

  /** Sends a PING and resolves with the round-trip time in milliseconds. */
  ping(signal?: AbortSignal): Promise<number> {
    this.checkUsable();
    const payload = new Uint8Array(8);
    const seq = ++this.pingSeq;
    putU32(payload, 4, seq);
    const key = String(seq);
    const t0 = performance.now();
    return new Promise<number>((resolve, reject) => {
      const onAbort = () => {
        this.pings.delete(key);
        reject(new StatusError("canceled", "ping canceled"));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pings.set(key, () => {
        signal?.removeEventListener("abort", onAbort);
        resolve(performance.now() - t0);
      });
      this.closed.then(() => {
        if (this.pings.delete(key)) reject(this.closeErr ?? new StatusError("unavailable", "the connection closed"));
      });
      this.frame(0, FrameType.Ping, 0, payload);
    });
  }

  // ---- closing ----

  /** Closes the connection: open calls fail with canceled. */
  close(): void {
    if (this.state === State.Closed) return;
    const err = new StatusError("canceled", "the client closed the connection");
    if (this.state === State.Open) {
      this.frame(0, FrameType.GoAway, 0, encodeGoAway({ lastStream: this.lastPeerId, code: 0, message: "" }));
    }
    for (const s of [...this.streams.values()]) this.endStream(s, err);
    this.closeErr = err;
    this.flush();
    this.shutdown();
  }

  private shutdown(): void {
    if (this.state === State.Closed) return;
    this.flush();
    this.state = State.Closed;
    clearTimeout(this.handshakeTimer);
    this.transport.close();
    this.readyReject(this.closeErr ?? new StatusError("unavailable", "the connection closed"));
    for (const w of this.openWaiters.splice(0)) w();
    this.closedResolve();
  }

  /** A connection error: every open call fails with err. */
  fail(err: StatusError, sendGoAway = false): void {
    if (this.state === State.Closed) return;
    if (sendGoAway && this.state === State.Open) {
      this.frame(0, FrameType.GoAway, 0, encodeGoAway({ lastStream: this.lastPeerId, code: 13, message: err.message.slice(0, 200) }));
    }
    this.closeErr ??= err;
    for (const s of [...this.streams.values()]) this.endStream(s, err);
    this.shutdown();
  }

  private onTransportClose(err?: Error): void {
    if (this.state === State.Closed) return;
    const msg =
      this.state === State.Handshake
        ? "the connection closed before the server's preface"
        : "the connection to the server was lost";
    this.fail(new StatusError("unavailable", err ? `${msg}: ${err.message}` : msg, [], [], { cause: err }));
  }

  // ---- input ----

  private onData(b: Uint8Array): void {
    if (this.state === State.Closed || b.length === 0) return;
    this.input.push(b);
    try {
      if (this.state === State.Handshake && !this.readPreface()) return;
      this.readFrames();
    } catch (e) {
      if (e instanceof WireError) {
        this.fail(new StatusError("internal", `protocol error from the server: ${e.message.replace(/^warren: /, "")}`, [], [], { cause: e }), true);
      } else if (e instanceof StatusError) {
        this.fail(e, true);
      } else {
        this.fail(new StatusError("internal", String(e), [], [], { cause: e }));
      }
    }
  }

  private readPreface(): boolean {
    let r;
    try {
      r = decodePreface(this.input.peekAll());
    } catch (e) {
      if (e instanceof WireError && e.kind === "incomplete") return false;
      if (e instanceof WireError) {
        this.fail(new StatusError("unavailable", `the server did not answer with a warren preface: ${e.message.replace(/^warren: /, "")}`, [], [], { cause: e }));
        return false;
      }
      throw e;
    }
    this.input.take(r.size);
    this.remote = r.settings;
    this.connSend = 16 * this.remote.initialWindow;
    this.state = State.Open;
    clearTimeout(this.handshakeTimer);
    this.readyResolve();
    return true;
  }

  private readFrames(): void {
    while (this.state === State.Open) {
      if (this.hdr === null) {
        if (this.input.avail < HEADER_SIZE) return;
        const h = this.input.take(HEADER_SIZE);
        const hdr = { length: readU32(h, 0), stream: readU32(h, 4), type: h[8], flags: h[9] };
        checkHeader(hdr, this.local.maxFrameSize);
        this.hdr = hdr;
      }
      if (this.input.avail < this.hdr.length) return;
      const hdr = this.hdr;
      this.hdr = null;
      const payload = hdr.length === 0 ? EMPTY : this.input.take(hdr.length);
      this.dispatch(hdr.stream, hdr.type, hdr.flags, payload);
    }
  }

  private dispatch(id: number, type: number, flags: number, payload: Uint8Array): void {
    switch (type) {
      case FrameType.Ping:
        if (flags & FLAG_ACK) {
          const key = String(readU32(payload, 4));
          const f = this.pings.get(key);
          if (f && readU32(payload, 0) === 0) {
            this.pings.delete(key);
            f();
          }
        } else {
          // Answered ahead of queued data.
          const b = new Uint8Array(HEADER_SIZE + 8);
          putHeader(b, 0, 8, 0, FrameType.Ping, FLAG_ACK);
          b.set(payload, HEADER_SIZE);
          this.out.unshift(b);
          this.schedule();
        }
        return;
      case FrameType.GoAway:
        this.onGoAway(payload);
        return;
      case FrameType.Window: {
        const inc = decodeWindow(payload);
        if (id === 0) {
          this.connSend += inc;
          if (this.connSend > 16 * this.remote.initialWindow) throw new WireError("bad_frame", "the server granted connection credit beyond its initial window");
          this.unblock();
          return;
        }
        const s = this.streams.get(id);
        if (!s) return;
        s.sendWindow += inc;
        if (s.sendWindow > this.remote.initialWindow) throw new WireError("bad_frame", `the server granted stream ${id} credit beyond its initial window`);
        if (s.pending.length > 0) {
          const i = this.blocked.indexOf(s);
          if (i >= 0) this.blocked.splice(i, 1);
          this.pump(s);
        }
        return;
      }
    }
    // Stream frames (HEADERS, DATA, TRAILERS, CANCEL).
    if (id % 2 === 0) {
      this.serverStream(id, type, payload);
      return;
    }
    const s = this.streams.get(id);
    if (!s) {
      if (id >= this.nextId) throw new WireError("bad_frame", `${typeName(type)} frame on stream ${id}, which this client never opened`);
      // A stream already ended: ignore, but credit DATA to the connection.
      if (type === FrameType.Data) this.dataOnClosed(payload.length);
      return;
    }
    switch (type) {
      case FrameType.Headers:
        if (s.recvEnded || s.header !== null || s.queue.length > 0 || s.partial) {
          throw new WireError("bad_frame", `HEADERS on stream ${id} after its reply began`);
        }
        s.header = decodeMetadata(payload) ?? [];
        if (flags & FLAG_END) this.recvEnd(s);
        return;
      case FrameType.Data:
        this.onDataFrame(s, flags, payload);
        return;
      case FrameType.Trailers: {
        if (s.partial) throw new WireError("bad_frame", `TRAILERS on stream ${id} in the middle of a chunked message`);
        const t = decodeTrailer(payload);
        s.trailer = t.metadata ?? [];
        s.recvEnded = true;
        if (t.code === 0) this.endStream(s, null);
        else {
          // 14 above a drain's last stream id: refused unread.
          const g = this.goAway;
          const notProcessed = t.code === 14 && g !== null && (g.code === 0 || g.code === 14) && id > g.lastStream;
          this.endStream(s, new StatusError(codeName(t.code), t.message, t.details ?? [], t.metadata ?? [], { notProcessed }));
        }
        return;
      }
      case FrameType.Cancel:
        this.endStream(s, new StatusError("canceled", "the server canceled the call"));
        return;
    }
  }

  private dataOnClosed(n: number): void {
    this.connRecv -= n;
    if (this.connRecv < 0) throw new WireError("bad_frame", "the server sent more than the connection's flow-control window");
    this.connConsumed(n);
  }

  private onDataFrame(s: Stream, flags: number, payload: Uint8Array): void {
    if (s.recvEnded) throw new WireError("bad_frame", `DATA on stream ${s.id} after its END`);
    const cost = payload.length;
    this.connRecv -= cost;
    s.recvWindow -= cost;
    if (this.connRecv < 0) throw new WireError("bad_frame", "the server sent more than the connection's flow-control window");
    if (s.recvWindow < 0) throw new WireError("bad_frame", `the server sent more than stream ${s.id}'s flow-control window`);
    const more = (flags & FLAG_MORE) !== 0;
    if (more && flags & FLAG_END) throw new WireError("bad_frame", "DATA with both END and MORE");
    if (s.partial === null) {
      if (!more) {
        // A whole message in one frame: copy it out of the input buffers
        // only if it is a part of a larger chunk (so it does not hold the
        // chunk alive).
        if (payload.length > this.local.maxMessageSize) return this.overLimit(s, payload.length, cost);
        const msg = payload.byteOffset === 0 && payload.buffer.byteLength === payload.length ? payload : payload.slice();
        s.queue.push({ msg, cost });
      } else {
        if (payload.length < 4) throw new WireError("bad_frame", "the first chunk of a message is shorter than its length prefix");
        const total = readU32(payload, 0);
        if (total <= payload.length - 4) throw new WireError("bad_frame", `declared message length ${total} is not above its first chunk`);
        if (total > this.local.maxMessageSize) return this.overLimit(s, total, cost);
        s.partial = new Uint8Array(total);
        s.partial.set(payload.subarray(4));
        s.filled = payload.length - 4;
        // Pieces of a message being reassembled are credited as they
        // arrive: the buffer is allocated for the whole message already,
        // and a message larger than the window could not arrive otherwise.
        this.creditPartial(s, cost);
        return;
      }
    } else {
      if (payload.length === 0) throw new WireError("bad_frame", "an empty continuation frame");
      if (s.filled + payload.length > s.partial.length) throw new WireError("bad_frame", "chunks go past the declared message length");
      s.partial.set(payload, s.filled);
      s.filled += payload.length;
      if (s.filled === s.partial.length) {
        if (more) throw new WireError("bad_frame", "MORE on the frame that completes a message");
        s.queue.push({ msg: s.partial, cost });
        s.partial = null;
      } else {
        if (!more) throw new WireError("bad_frame", "the last chunk falls short of the declared message length");
        this.creditPartial(s, cost);
        return;
      }
    }
    if (flags & FLAG_END) this.recvEnd(s);
    s.wake();
  }

  private creditPartial(s: Stream, cost: number): void {
    s.unacked += cost;
    if (s.unacked >= this.local.initialWindow / 2) {
      s.recvWindow += s.unacked;
      this.window(s.id, s.unacked);
      s.unacked = 0;
    }
    this.connConsumed(cost);
  }

  /** A message over our MaxMessageSize: CANCEL, the call fails, the connection stays. */
  private overLimit(s: Stream, size: number, cost: number): void {
    this.connConsumed(cost);
    s.cancel(new StatusError("resource_exhausted", `the server's reply of ${size} bytes is over this client's MaxMessageSize ${this.local.maxMessageSize} (see the maxMessageSize option)`));
  }

  /** The server's direction ended without TRAILERS (DATA|END or HEADERS|END): OK. */
  private recvEnd(s: Stream): void {
    s.recvEnded = true;
    this.endStream(s, null); // messages still queued are taken before the end
  }

  private serverStream(id: number, type: number, payload: Uint8Array): void {
    if (type === FrameType.Headers) {
      if (id <= this.lastPeerId) throw new WireError("bad_frame", `the server opened stream ${id}, not above its last stream ${this.lastPeerId}`);
      this.lastPeerId = id;
      // This client serves no methods: refuse the call (3 if its header does not decode).
      let refusal = { code: 12, message: "this client serves no methods" };
      try {
        decodeCallHeader(payload);
      } catch (e) {
        if (!(e instanceof WireError)) throw e;
        refusal = { code: 3, message: "malformed call header" };
      }
      this.frame(id, FrameType.Trailers, FLAG_END, encodeTrailer(refusal));
      return;
    }
    if (id > this.lastPeerId) throw new WireError("bad_frame", `${typeName(type)} frame on stream ${id}, which the server never opened`);
    if (type === FrameType.Data) this.dataOnClosed(payload.length);
  }

  private onGoAway(payload: Uint8Array): void {
    const g = decodeGoAway(payload);
    if (this.goAway && g.lastStream > this.goAway.lastStream) g.lastStream = this.goAway.lastStream;
    this.goAway = g;
    const why = g.code === 0 ? "the server is going away" : `the server is closing the connection (${codeName(g.code)})`;
    const err = new StatusError("unavailable", `${why}${g.message ? ": " + g.message : ""}; the call was not processed and may be retried`, [], [], { notProcessed: g.code === 0 || g.code === 14 });
    for (const s of [...this.streams.values()]) {
      if (s.id > g.lastStream) this.endStream(s, err);
    }
    for (const w of this.openWaiters.splice(0)) w();
    if (this.streams.size === 0) this.shutdown();
  }
}

export type { Code };
