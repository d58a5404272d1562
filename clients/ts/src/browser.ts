// The browser build: ws:// and wss:// over the platform's WebSocket. No
// dependencies.

import { connectWith, type Client, type ConnectOptions, type Dialer } from "./client.js";
import { StatusError } from "./status.js";
import { dialWebSocket, wsProtocols, type WebSocketConstructor } from "./websocket.js";

export * from "./exports.js";

/**
 * Connects to a warren server over WebSocket: "ws://host:port/path" or
 * "wss://host:port/path" (in a page, the path of the server's HTTP bridge,
 * such as "ws://127.0.0.1:7000/").
 */
export function connect(addr: string, opts: ConnectOptions = {}): Promise<Client> {
  return connectWith(dialBrowser, addr, opts);
}

const dialBrowser: Dialer = async (addr, opts) => {
  if (!/^wss?:\/\//.test(addr)) {
    throw new StatusError("invalid_argument", `browsers reach warren over WebSocket: want ws://host:port/ or wss://host:port/, not ${JSON.stringify(addr)}`);
  }
  const WS = (globalThis as any).WebSocket as WebSocketConstructor | undefined;
  if (!WS) throw new StatusError("unimplemented", "this platform has no WebSocket");
  return dialWebSocket(WS, addr, wsProtocols(opts.token), undefined, opts.signal, opts.token);
};
