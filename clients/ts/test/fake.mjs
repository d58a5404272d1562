// A fake server in Node that speaks (or breaks) the protocol, for the
// tests of what the Go server never does.
import assert from "node:assert/strict";
import * as net from "node:net";
import { join } from "node:path";
import { StatusError } from "../dist/node.js";
import * as w from "../dist/wire.js";
import { tempDir } from "./helpers.mjs";

/**
 * Starts a fake server. onConn(peer) runs per connection after the
 * prefaces; peer.frames() yields the client's frames; peer.write(bytes).
 */
export async function fakeServer(onConn, { preface = w.encodePreface({}), skipPreface = false } = {}) {
  const path = join(tempDir(), "fake.sock");
  const conns = new Set();
  const srv = net.createServer((sock) => {
    conns.add(sock);
    sock.on("error", () => {});
    let buf = Buffer.alloc(0);
    let clientSettings = null;
    const queue = [];
    let wake = null;
    let ended = false;
    sock.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      if (!clientSettings) {
        try {
          const p = w.decodePreface(buf);
          clientSettings = p.settings;
          buf = buf.subarray(p.size);
          if (!skipPreface) sock.write(preface);
          Promise.resolve(onConn(peer)).catch((e) => console.error("fake server:", e));
        } catch (e) {
          if (e.kind === "incomplete") return;
          throw e;
        }
      }
      for (;;) {
        if (buf.length < 10) break;
        const len = buf.readUInt32BE(0);
        if (buf.length < 10 + len) break;
        queue.push({ length: len, stream: buf.readUInt32BE(4), type: buf[8], flags: buf[9], payload: Buffer.from(buf.subarray(10, 10 + len)) });
        buf = buf.subarray(10 + len);
      }
      if (wake) wake();
    });
    sock.on("close", () => {
      ended = true;
      if (wake) wake();
    });
    const peer = {
      sock,
      get clientSettings() {
        return clientSettings;
      },
      write: (b) => sock.write(b),
      frame: (stream, type, flags, payload = new Uint8Array(0)) => sock.write(w.encodeFrame(stream, type, flags, payload)),
      async next(pred = () => true) {
        for (;;) {
          const i = queue.findIndex(pred);
          if (i >= 0) return queue.splice(i, 1)[0];
          if (ended) return null;
          await new Promise((r) => (wake = r));
          wake = null;
        }
      },
      get closed() {
        return ended;
      },
    };
  });
  await new Promise((r) => srv.listen(path, r));
  return {
    addr: `unix://${path}`,
    close: () => {
      for (const c of conns) c.destroy();
      return new Promise((r) => srv.close(r));
    },
  };
}

/** Asserts that p rejects with a StatusError of code (and a message matching re). */
export async function rejectsWith(p, code, re) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof StatusError, `want a StatusError, got ${e?.stack ?? e}`);
    assert.equal(e.code, code, e.message);
    if (re) assert.match(e.message, re);
    return true;
  });
}
