// The Node build: unix://, tcp:// and tls:// over node:net and node:tls,
// ws:// and wss:// over the ws package (an optional peer dependency) where
// it is installed, else the global WebSocket (Node 22 and later).

import { lookup } from "node:dns/promises";
import { lstat } from "node:fs/promises";
import * as net from "node:net";
import { dirname, isAbsolute, join, resolve } from "node:path";
import * as tls from "node:tls";
import { connectWith, setTracing, type Client, type ConnectOptions, type Dialer } from "./client.js";
import { loadTracing, traceMetadata } from "./otel.js";
import type { Transport } from "./session.js";
import { StatusError } from "./status.js";
import { dialWebSocket, wsProtocols, type WebSocketConstructor } from "./websocket.js";

export * from "./exports.js";

setTracing(traceMetadata);

/**
 * Connects to a warren server: "unix:///run/app.sock", "unix:rel/path",
 * "unix:@abstract", "tcp://host:port", "tls://host:port",
 * "ws://host:port/path", "wss://host:port/path", or "default": the
 * address `warren serve` listens on without --addr (see defaultAddress),
 * where the server must run as this user. Several servers: addresses
 * separated by commas, or "dns:///host:port", a name resolved to tcp://
 * addresses (tls:// with the tls option, the certificate checked against
 * host), resolved again every 30 s and after a connection fails; calls go
 * round robin and a call never processed is retried (see Client).
 */
export async function connect(addr: string, opts: ConnectOptions = {}): Promise<Client> {
  await loadTracing();
  return connectWith(dialNode, addr, opts, lookupAll);
}

async function lookupAll(host: string): Promise<string[]> {
  return (await lookup(host, { all: true })).map((a) => a.address);
}

/** The address keyword of the per-user default socket (see defaultAddress). */
export const DEFAULT_ADDRESS = "default";

/**
 * The per-user default address, where `warren serve` listens without
 * --addr: unix://$XDG_RUNTIME_DIR/warren/warren.sock when XDG_RUNTIME_DIR
 * is an absolute path, else unix://TMP/warren-UID/warren.sock, TMP being
 * $TMPDIR or /tmp and UID the effective uid.
 */
export function defaultAddress(): string {
  const x = process.env.XDG_RUNTIME_DIR ?? "";
  const dir = x !== "" && isAbsolute(x) ? join(x, "warren") : join(resolve(process.env.TMPDIR || "/tmp"), `warren-${process.geteuid?.() ?? 0}`);
  return "unix://" + join(dir, "warren.sock");
}

/**
 * The server at the default address must run as this user. Node cannot
 * read a unix socket's peer credentials, so the socket file and its
 * directory must belong to this user, the directory writable by no one
 * else: only this user (or root) can then have bound that socket.
 */
async function checkOwnSocket(path: string): Promise<void> {
  const me = process.geteuid?.();
  if (me === undefined) return;
  for (const [p, what] of [
    [dirname(path), "directory"],
    [path, "socket file"],
  ] as const) {
    let st;
    try {
      st = await lstat(p);
    } catch (e) {
      throw new StatusError("unavailable", `cannot connect to the default address unix://${path}: ${(e as Error).message}`, [], [], { cause: e });
    }
    if (st.uid !== me) throw new StatusError("permission_denied", `the ${what} ${p} belongs to uid ${st.uid}, not to this user (uid ${me})`);
    if (what === "directory" && (st.mode & 0o022) !== 0) {
      throw new StatusError("permission_denied", `the directory ${p} is writable by others (mode ${(st.mode & 0o777).toString(8)})`);
    }
  }
}

const dialNode: Dialer = async (addr, opts) => {
  if (addr === DEFAULT_ADDRESS) {
    addr = defaultAddress();
    await checkOwnSocket(addr.slice("unix://".length));
  }
  const m = /^([a-z]+):(.*)$/.exec(addr);
  if (!m) throw new StatusError("invalid_argument", `bad address ${JSON.stringify(addr)}: want unix:///path, tcp://host:port, tls://host:port or ws://host:port/`);
  const [, scheme, rest] = m;
  switch (scheme) {
    case "unix": {
      let path = rest.startsWith("//") ? rest.slice(2) : rest;
      if (path === "") throw new StatusError("invalid_argument", `bad address ${JSON.stringify(addr)}: no socket path`);
      if (path.startsWith("@")) {
        // Linux's abstract namespace. Node 20 connects with the whole
        // sockaddr_un (the name padded with NUL bytes), which is another name.
        path = "\0" + path.slice(1);
        return dialSocket(addr, () => net.connect({ path }), opts.signal).catch((e) => {
          if (Number(process.versions.node.split(".")[0]) >= 22 || !/ECONNREFUSED/.test(String(e?.message))) throw e;
          throw new StatusError("unavailable", `${e.message} (Node ${process.versions.node} pads abstract socket names with NUL bytes, nodejs/node#49656: use a socket file path)`, [], [], { cause: e });
        });
      }
      return dialSocket(addr, () => net.connect({ path }), opts.signal);
    }
    case "tcp":
    case "tls": {
      const u = hostPort(addr, rest);
      if (scheme === "tcp") return dialSocket(addr, () => net.connect({ host: u.host, port: u.port, noDelay: true }), opts.signal);
      return dialSocket(addr, () => tls.connect({ host: u.host, port: u.port, servername: net.isIP(u.host) ? undefined : u.host, ...(opts.tls ?? {}) }), opts.signal, "secureConnect");
    }
    case "ws":
    case "wss": {
      const WS = await webSocketClass();
      const global = WS === (globalThis as any).WebSocket;
      if (global && opts.tls) throw new StatusError("unimplemented", "the tls option over wss:// needs the ws package (npm install ws): the global WebSocket takes no TLS options");
      const extra = global ? undefined : { perMessageDeflate: false, maxPayload: 0, ...(opts.tls ?? {}) };
      return dialWebSocket(WS, addr, wsProtocols(opts.token), extra, opts.signal, opts.token);
    }
  }
  throw new StatusError("invalid_argument", `unsupported address scheme ${JSON.stringify(scheme)} in ${JSON.stringify(addr)}`);
};

function hostPort(addr: string, rest: string): { host: string; port: number } {
  const u = new URL("x:" + rest);
  const port = Number(u.port);
  if (!u.hostname || !port) throw new StatusError("invalid_argument", `bad address ${JSON.stringify(addr)}: want host:port`);
  return { host: u.hostname.replace(/^\[|\]$/g, ""), port };
}

/**
 * The ws package where it is installed (it takes the tls options, and
 * exists on every Node), else the global WebSocket (Node 22 and later).
 */
async function webSocketClass(): Promise<WebSocketConstructor> {
  try {
    const mod: any = await import("ws");
    const WS = mod.WebSocket ?? mod.default;
    if (typeof WS === "function") return WS;
  } catch {
    // not installed
  }
  const g = (globalThis as any).WebSocket;
  if (typeof g === "function") return g;
  throw new StatusError("unimplemented", "ws:// needs a WebSocket: this Node has no global WebSocket; install the ws package (npm install ws) or use Node 22 or later");
}

/** Connects a socket and wraps it as a Transport. */
function dialSocket(addr: string, open: () => net.Socket, signal?: AbortSignal, ready = "connect"): Promise<Transport> {
  return new Promise((resolve, reject) => {
    const sock = open();
    let err: Error | undefined;
    let connected = false;
    const t: Transport = {
      write(chunks) {
        if (sock.destroyed) return;
        if (chunks.length === 1) {
          sock.write(chunks[0]);
          return;
        }
        sock.cork();
        for (const c of chunks) sock.write(c);
        sock.uncork();
      },
      close() {
        if (sock.destroyed) return;
        sock.end();
        setTimeout(() => sock.destroy(), 2000).unref();
      },
      onData: () => {},
      onClose: () => {},
    };
    const onAbort = () => sock.destroy(new Error("connecting was canceled"));
    signal?.addEventListener("abort", onAbort, { once: true });
    sock.once(ready, () => {
      connected = true;
      signal?.removeEventListener("abort", onAbort);
      resolve(t);
    });
    // Plain Uint8Arrays, as in browsers (a Buffer is a subclass).
    sock.on("data", (b: Buffer) => t.onData(new Uint8Array(b.buffer, b.byteOffset, b.byteLength)));
    sock.on("error", (e) => (err = e));
    sock.on("close", () => {
      signal?.removeEventListener("abort", onAbort);
      if (!connected) {
        const code = signal?.aborted ? "canceled" : "unavailable";
        reject(new StatusError(code, `cannot connect to ${addr}: ${err?.message ?? "connection closed"}`, [], [], { cause: err }));
        return;
      }
      t.onClose(err);
    });
  });
}
