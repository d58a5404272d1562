// The client's side of one call (a stream of a Session), and the types a
// session is built from.

import type { Session } from "./session.js";
import { StatusError } from "./status.js";
import { EMPTY, FLAG_END, FrameType, type Metadata } from "./wire.js";

/** A reliable, ordered byte stream, as a session needs it. */
export interface Transport {
  /** Writes the chunks, in order (one socket write where possible). */
  write(chunks: Uint8Array[]): void;
  /** Ends the connection after what was written. */
  close(): void;
  /** Set by the session: bytes that arrived. */
  onData: (b: Uint8Array) => void;
  /** Set by the session: the connection ended (err if abnormally). */
  onClose: (err?: Error) => void;
}

/** A call being opened: its cancellation ends the wait for a stream slot. */
export interface OpenGate {
  readonly early: StatusError | null;
  wakeOpen: (() => void) | null;
}

/** Options of a session (and of connect). */
export interface SessionOptions {
  /** Largest message this client accepts; default 4 MiB (max 1 GiB). */
  maxMessageSize?: number;
  /** Largest frame payload this client accepts; default 512 KiB. */
  maxFrameSize?: number;
  /** Initial flow-control window of each stream; default 2 MiB. */
  initialWindow?: number;
  /** Streams the server may open at once; default 1024 (this client refuses them all). */
  maxStreams?: number;
  /** How long to wait for the server's preface; default 10 s. */
  handshakeTimeoutMs?: number;
}

/** A stream's received message or end. */
type Incoming = { msg: Uint8Array; cost: number };

/** One call: a client-opened stream. */
export class Stream {
  readonly id: number;
  /** Reply metadata (HEADERS from the server), once it arrived. */
  header: Metadata | null = null;
  /** Trailing metadata, once the call ended. */
  trailer: Metadata | null = null;
  /** The call's end: null for OK, else the error. Undefined while open. */
  result: StatusError | null | undefined = undefined;

  // receive side
  queue: Incoming[] = [];
  private waiters: (() => void)[] = [];
  recvEnded = false; // the server's direction ended (TRAILERS or DATA|END)
  partial: Uint8Array | null = null; // a chunked message being reassembled
  filled = 0;
  partialCost = 0;
  recvWindow: number; // bytes the server may still send before our credit
  unacked = 0; // consumed, not yet credited

  // send side
  sendWindow: number;
  sendEnded = false;
  pending: { msg: Uint8Array; off: number; end: boolean; first: boolean; resolve: () => void; reject: (e: Error) => void }[] = [];

  constructor(
    readonly session: Session,
    id: number,
  ) {
    this.id = id;
    this.recvWindow = session.local.initialWindow;
    this.sendWindow = session.remote.initialWindow;
  }

  /** Resolves when something arrived or the stream ended. */
  wait(): Promise<void> {
    if (this.queue.length > 0 || this.result !== undefined) return Promise.resolve();
    return new Promise((r) => this.waiters.push(r));
  }

  wake(): void {
    const ws = this.waiters;
    if (ws.length === 0) return;
    this.waiters = [];
    for (const w of ws) w();
  }

  /**
   * Takes the next message, crediting its bytes to the server: null at
   * the end of the server's messages (check result).
   */
  take(): Uint8Array | null {
    const m = this.queue.shift();
    if (!m) return null;
    this.session.consumed(this, m.cost);
    return m.msg;
  }

  /** Sends a message; resolves once it is all handed to the transport. */
  send(msg: Uint8Array, end: boolean): Promise<void> {
    return this.session.sendMessage(this, msg, end);
  }

  /** Half-closes the client's direction. */
  closeSend(): void {
    if (this.sendEnded || this.result !== undefined) return;
    if (this.pending.length > 0) {
      const last = this.pending[this.pending.length - 1];
      last.end = true;
      this.sendEnded = true;
      return;
    }
    this.sendEnded = true;
    this.session.frame(this.id, FrameType.Trailers, FLAG_END, EMPTY);
  }

  /** Abandons the call: CANCEL to the server, the call fails with err. */
  cancel(err: StatusError): void {
    if (this.result !== undefined) return;
    this.session.frame(this.id, FrameType.Cancel, 0, EMPTY);
    this.session.endStream(this, err);
  }
}

export function tooLarge(size: number, max: number): StatusError {
  return new StatusError("resource_exhausted", `message of ${size} bytes is over the server's MaxMessageSize ${max}`);
}
