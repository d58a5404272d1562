// The WebSocket transport: the warren byte stream in binary messages
// (PROTOCOL.md, "WebSocket"). It takes any WHATWG-style WebSocket
// constructor: the browser's, Node's global one (Node 22+), or the ws
// package's.

import type { Transport } from "./session.js";
import { StatusError } from "./status.js";
import { concat } from "./wire.js";

/** The part of the WebSocket API the transport uses. */
export interface WebSocketLike {
  binaryType: string;
  readonly protocol: string;
  readyState: number;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: any) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string; wasClean?: boolean }) => void) | null;
  onerror: ((ev: any) => void) | null;
}

export type WebSocketConstructor = new (url: string, protocols?: string[], ...rest: any[]) => WebSocketLike;

/** The subprotocol that carries a token (browsers cannot set headers on a WebSocket). */
export const TOKEN_PROTOCOL_PREFIX = "warren.bearer.";

/** Subprotocols to offer: "warren", and the token if there is one. */
export function wsProtocols(token: string | undefined): string[] {
  return token ? ["warren", TOKEN_PROTOCOL_PREFIX + token] : [];
}

/**
 * Opens a WebSocket and returns it as a Transport once it is open. A
 * handshake refused for its token (HTTP 401, which a browser's WebSocket
 * does not show) fails with unauthenticated, "token refused".
 */
export async function dialWebSocket(WS: WebSocketConstructor, url: string, protocols: string[], extra?: unknown, signal?: AbortSignal, token?: string): Promise<Transport> {
  try {
    return await openWebSocket(WS, url, protocols, extra, signal);
  } catch (e) {
    if (!(e instanceof StatusError) || e.code !== "unavailable" || signal?.aborted) throw e;
    let why = await refusal(url, token);
    if (why === null && /\b401\b/.test(String((e.cause as Error | undefined)?.message))) why = "";
    if (why === null) throw e;
    throw new StatusError("unauthenticated", `token refused by ${redact(url)}${why ? ": " + why : ""}`, [], [], { cause: e });
  }
}

/**
 * Why the server refuses the token, after a failed handshake: it answers
 * any HTTP request on the URL with 401 and its reason when the token (sent
 * as a header, or the browser's cookie) is missing or wrong. null when it
 * does not (or cannot be asked: another origin, no fetch).
 */
async function refusal(url: string, token: string | undefined): Promise<string | null> {
  const f = (globalThis as any).fetch as typeof fetch | undefined;
  if (!f) return null;
  try {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (token) headers.Authorization = `Bearer ${token}`;
    const r = await f(url.replace(/^ws/, "http"), { method: "POST", headers, body: "{}", credentials: "same-origin", signal: AbortSignal.timeout(3000) });
    if (r.status !== 401) return null;
    const body = (await r.json().catch(() => null)) as { message?: unknown } | null;
    return typeof body?.message === "string" ? body.message : "";
  } catch {
    return null;
  }
}

function openWebSocket(WS: WebSocketConstructor, url: string, protocols: string[], extra?: unknown, signal?: AbortSignal): Promise<Transport> {
  return new Promise((resolve, reject) => {
    const ws = extra === undefined ? new WS(url, protocols) : new WS(url, protocols, extra);
    ws.binaryType = "arraybuffer";
    let open = false;
    const t: Transport = {
      write(chunks) {
        if (ws.readyState === 1) ws.send(concat(chunks));
      },
      close() {
        if (ws.readyState <= 1) ws.close(1000);
      },
      onData: () => {},
      onClose: () => {},
    };
    const onAbort = () => {
      ws.close(1000);
      reject(new StatusError("canceled", "connecting was canceled"));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    ws.onopen = () => {
      open = true;
      signal?.removeEventListener("abort", onAbort);
      resolve(t);
    };
    ws.onmessage = (ev) => {
      const d = ev.data;
      if (d instanceof ArrayBuffer) t.onData(new Uint8Array(d));
      else if (ArrayBuffer.isView(d)) t.onData(new Uint8Array(d.buffer, d.byteOffset, d.byteLength));
      else {
        // Text messages are not part of the protocol.
        ws.close(1003, "text messages are not used");
        t.onClose(new Error("the server sent a text message"));
      }
    };
    let failure: unknown;
    ws.onerror = (ev) => (failure = ev?.error ?? ev); // the ws package says "Unexpected server response: 401"
    ws.onclose = (ev) => {
      signal?.removeEventListener("abort", onAbort);
      if (!open) {
        reject(new StatusError("unavailable", `cannot open WebSocket ${redact(url)}: ${ev.reason || "connection refused or handshake failed"} (close code ${ev.code})`, [], [], { cause: failure }));
        return;
      }
      const normal = ev.code === 1000 || ev.code === 1001 || ev.code === 1005;
      t.onClose(normal ? undefined : new Error(`WebSocket closed with code ${ev.code}${ev.reason ? ": " + ev.reason : ""}`));
    };
  });
}

/** A URL without its query (which may hold a token). */
export function redact(url: string): string {
  return url.replace(/\?.*$/, "");
}
