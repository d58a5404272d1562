// Several servers behind one client: an address list or a dns:/// name,
// one connection per server (an Endpoint), redialed with backoff.

import type { Session } from "./session.js";
import { StatusError } from "./status.js";

/** Starts a target resolved with DNS: dns:///host:port. */
export const DNS_PREFIX = "dns:///";
/** Bounds the addresses of a list or of a name's resolution (as the Go client). */
export const MAX_ADDRS = 64;
/** A dns:/// name is resolved again this often, and after a connection fails. */
export const RESOLVE_EVERY_MS = 30_000;

/** The delay between connection attempts after failures (as the Go client): doubled from the first up to the second. */
const MIN_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 5000;

/** What a client dials: addresses, or a name to resolve. */
export type Target = { addrs: string[] } | { host: string; port: number };

/**
 * Reads a target: one warren address, several separated by commas, or
 * dns:///host:port. check validates one address (throws).
 */
export function parseTarget(s: string, check: (addr: string) => void): Target {
  if (s.startsWith(DNS_PREFIX)) {
    const m = /^(?:\[([^\]]+)\]|([^:\]]+)):(\d+)$/.exec(s.slice(DNS_PREFIX.length));
    const port = m ? Number(m[3]) : 0;
    if (!m || port < 1 || port > 65535) throw new StatusError("invalid_argument", `address ${JSON.stringify(s)}: a dns target is dns:///HOST:PORT, PORT from 1 to 65535`);
    return { host: m[1] ?? m[2], port };
  }
  const parts = s.split(",");
  if (parts.length > 1 && parts.length > MAX_ADDRS) throw new StatusError("invalid_argument", `${parts.length} addresses, more than ${MAX_ADDRS}`);
  if (parts.length > 1 && s.startsWith("unix:") && !parts.slice(1).some((p) => /^\s*[a-z]+:/.test(p))) {
    return { addrs: [s] }; // a socket path with a comma in it
  }
  const addrs: string[] = [];
  parts.forEach((p, i) => {
    p = p.trim();
    if (p === "") throw new StatusError("invalid_argument", `address list ${JSON.stringify(s)}: entry ${i + 1} is empty`);
    if (p.startsWith(DNS_PREFIX)) throw new StatusError("invalid_argument", `address list ${JSON.stringify(s)}: a dns target stands alone`);
    if (parts.length > 1) {
      try {
        check(p);
      } catch (e) {
        throw new StatusError("invalid_argument", `address list, entry ${i + 1}: ${(e as Error).message}`, [], [], { cause: e });
      }
    }
    if (!addrs.includes(p)) addrs.push(p);
  });
  return { addrs };
}

/**
 * One server of a client: its current connection, dialed again after it is
 * lost or the server leaves (GOAWAY), with backoff after failures;
 * connections left for a new one finish their calls.
 */
export class Endpoint {
  current: Session | null = null;
  private readonly draining = new Set<Session>();
  private dialing: Promise<void> | null = null;
  private backoffMs = 0;
  private retryAt = 0;
  private lastErr: StatusError | null = null;
  /** No longer among a name's addresses: no new calls. */
  removed = false;

  constructor(
    readonly addr: string,
    private readonly open: (first: boolean) => Promise<Session>,
  ) {}

  get usable(): boolean {
    return this.current !== null && this.current.usable && !this.removed;
  }

  backingOff(now: number): boolean {
    return this.lastErr !== null && now < this.retryAt;
  }

  /** Waits for a dial in progress, if any. */
  async settled(): Promise<void> {
    if (this.dialing) await this.dialing;
  }

  /**
   * The session for a new call: the current one, or a new connection. An
   * error of connecting is marked notProcessed: the call was never sent.
   */
  async connection(closing: () => boolean, first = false): Promise<Session> {
    for (;;) {
      const s = this.current;
      if (s && (s.usable || closing())) return s;
      if (this.removed || closing()) throw new StatusError("unavailable", "the client was closed", [], [], { notProcessed: true });
      if (this.dialing) {
        await this.dialing;
        continue;
      }
      if (this.lastErr && Date.now() < this.retryAt) {
        throw new StatusError(this.lastErr.code, this.lastErr.message, [], [], { cause: this.lastErr, notProcessed: true });
      }
      let done!: () => void;
      this.dialing = new Promise((r) => (done = r));
      try {
        const ns = await this.open(first);
        this.backoffMs = 0;
        this.lastErr = null;
        for (const d of this.draining) if (d.ended) this.draining.delete(d);
        if (s && !s.ended) this.draining.add(s);
        this.current = ns;
        if (closing()) ns.close();
      } catch (e) {
        const err = e instanceof StatusError ? e : new StatusError("unavailable", String(e), [], [], { cause: e });
        err.notProcessed = true;
        this.backoffMs = Math.min(Math.max(2 * this.backoffMs, MIN_BACKOFF_MS), MAX_BACKOFF_MS);
        this.retryAt = Date.now() + this.backoffMs;
        this.lastErr = err;
        throw err;
      } finally {
        this.dialing = null;
        done();
      }
    }
  }

  /** Every session of this server, current and draining; forgets them. */
  sessions(): Session[] {
    const all = [...this.draining];
    if (this.current) all.push(this.current);
    this.draining.clear();
    return all;
  }
}

/** A dns:/// target, resolved again when due (see RESOLVE_EVERY_MS). */
export class Resolver {
  at = 0;
  stale = false;
  private running: Promise<string[]> | null = null;

  constructor(
    readonly host: string,
    readonly port: number,
    private readonly lookup: (host: string) => Promise<string[]>,
    private readonly scheme: string,
  ) {}

  due(now: number): boolean {
    return this.stale || now - this.at >= RESOLVE_EVERY_MS;
  }

  /** The addresses, sorted, at most MAX_ADDRS, with the scheme. */
  resolve(): Promise<string[]> {
    this.running ??= (async () => {
      try {
        const ips = [...new Set(await this.lookup(this.host))].sort().slice(0, MAX_ADDRS);
        if (ips.length === 0) throw new Error("no addresses");
        return ips.map((ip) => `${this.scheme}://${ip.includes(":") ? `[${ip}]` : ip}:${this.port}`);
      } catch (e) {
        throw new StatusError("unavailable", `resolving ${this.host}: ${(e as Error).message}`, [], [], { cause: e, notProcessed: true });
      } finally {
        this.at = Date.now();
        this.stale = false;
        this.running = null;
      }
    })();
    return this.running;
  }
}
