// A fake server in Node that speaks (or breaks) the protocol, for what the
// Go server never does: hostile frames, GOAWAY at chosen points, PING,
// server-opened streams, tiny windows, protobuf echo.
import { unlinkSync } from "node:fs";
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { StringValueSchema } from "@bufbuild/protobuf/wkt";
import { connect } from "../dist/node.js";
import { protobuf } from "../dist/protobuf.js";
import * as w from "../dist/wire.js";
import { fakeServer, rejectsWith } from "./fake.mjs";

const H = w.FrameType;

/** Serves unary calls by echoing each request's DATA (one frame) with OK. */
function echo(peer) {
  (async () => {
    for (;;) {
      const f = await peer.next((f) => f.type === H.Data);
      if (!f) return;
      peer.write(w.encodeMessage(f.stream, f.payload, 65536, false));
      peer.frame(f.stream, H.Trailers, w.FLAG_END);
    }
  })();
}


/** A call that the fake server answers with the given bytes; the connection must then be dropped. */
async function connectionError(bytes, re) {
  let peerRef;
  const srv = await fakeServer(async (peer) => {
    peerRef = peer;
    const h = await peer.next((f) => f.type === H.Data);
    peer.write(typeof bytes === "function" ? bytes(h.stream) : bytes);
  });
  try {
    const c = await connect(srv.addr);
    await rejectsWith(c.call("T.M", {}), "internal", re);
    await c.closed;
    // The client sent GOAWAY (Internal) before closing.
    const g = await peerRef.next((f) => f.type === H.GoAway);
    assert.ok(g, "GOAWAY before close");
    assert.equal(w.decodeGoAway(g.payload).code, 13);
  } finally {
    await srv.close();
  }
}

/** Reads two calls, sends GOAWAY with the first's id as last stream id (then runs then()), and answers the first. */
async function goAwayAfterTwo(peer, then = () => {}) {
  const a = await peer.next((f) => f.type === H.Data);
  await peer.next((f) => f.type === H.Data);
  peer.frame(0, H.GoAway, 0, w.encodeGoAway({ lastStream: a.stream, code: 0, message: "restarting" }));
  then();
  setTimeout(() => {
    peer.frame(a.stream, H.Data, 0, a.payload);
    peer.frame(a.stream, H.Trailers, w.FLAG_END);
  }, 50);
}

describe("hostile server frames are connection errors", () => {
  const u32 = (n) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255];
  test("a frame over the client's MaxFrameSize", () => connectionError((id) => Uint8Array.from([...u32(600 << 10), ...u32(id), H.Data, 0]), /MaxFrameSize/));
  test("an unknown frame type", () => connectionError((id) => w.encodeFrame(id, 9, 0), /unknown frame type/));
  test("PING on a stream", () => connectionError((id) => w.encodeFrame(id, H.Ping, 0, new Uint8Array(8)), /PING frame on stream/));
  test("WINDOW of 0", () => connectionError(() => w.encodeFrame(0, H.Window, 0, new Uint8Array(4)), /increment/));
  test("a frame on a stream the client never opened", () => connectionError(() => w.encodeFrame(99, H.Data, 0, new Uint8Array(1)), /never opened/));
  test("chunk past the declared length", () =>
    connectionError((id) => w.concat([w.encodeFrame(id, H.Data, w.FLAG_MORE, Uint8Array.from([0, 0, 0, 6, 1, 2, 3, 4])), w.encodeFrame(id, H.Data, 0, Uint8Array.from([5, 6, 7]))]), /past the declared/));
  test("TRAILERS in the middle of a chunked message", () =>
    connectionError((id) => w.concat([w.encodeFrame(id, H.Data, w.FLAG_MORE, Uint8Array.from([0, 0, 0, 9, 1, 2, 3, 4])), w.encodeFrame(id, H.Trailers, w.FLAG_END)]), /middle of a chunked/));
  test("a malformed trailer", () => connectionError((id) => w.encodeFrame(id, H.Trailers, w.FLAG_END, Uint8Array.from([0x80])), /truncated uvarint/));
});

describe("flow-control violations", () => {
  test("DATA beyond a stream's window is a connection error", async () => {
    const srv = await fakeServer(async (peer) => {
      const h = await peer.next((f) => f.type === H.Data);
      // Five whole messages of 512 KiB: 2.5 MiB against a window of 2 MiB
      // that the client, which reads none of them, never credits.
      for (let i = 0; i < 5; i++) peer.frame(h.stream, H.Data, 0, new Uint8Array(512 * 1024));
    });
    try {
      const c = await connect(srv.addr);
      const it = c.stream("T.Watch", new Uint8Array(0))[Symbol.asyncIterator]();
      const first = await it.next();
      assert.equal(first.value.length, 512 * 1024);
      await c.closed;
      await rejectsWith(it.next(), "internal", /flow-control window/);
    } finally {
      await srv.close();
    }
  });
});

describe("fake server", () => {
  test("not warren: an HTTP reply instead of a preface", async () => {
    const srv = await fakeServer(() => {}, { preface: Buffer.from("HTTP/1.1 400 Bad Request\r\n\r\n") });
    try {
      await rejectsWith(connect(srv.addr), "unavailable", /not a warren peer/);
    } finally {
      await srv.close();
    }
  });

  test("a preface with a setting out of range", async () => {
    const srv = await fakeServer(() => {}, { preface: w.fromHex("f057524e0101000100000100") });
    try {
      await rejectsWith(connect(srv.addr), "unavailable", /maxFrameSize/);
    } finally {
      await srv.close();
    }
  });

  test("no preface: the handshake timeout", async () => {
    const srv = await fakeServer(() => {}, { skipPreface: true });
    try {
      const t0 = Date.now();
      await rejectsWith(connect(srv.addr, { handshakeTimeoutMs: 200 }), "unavailable", /handshake timeout/);
      assert.ok(Date.now() - t0 < 2000);
    } finally {
      await srv.close();
    }
  });

  test("a reply over the client's MaxMessageSize: CANCEL, resource_exhausted, the connection stays", async () => {
    let canceled;
    const srv = await fakeServer(async (peer) => {
      const h = await peer.next((f) => f.type === H.Data);
      peer.frame(h.stream, H.Data, w.FLAG_MORE, Uint8Array.from([0, 0x20, 0, 0, 1, 2, 3])); // 2 MiB declared
      canceled = await peer.next((f) => f.type === H.Cancel);
      echo(peer);
    });
    try {
      const c = await connect(srv.addr, { maxMessageSize: 1 << 20 });
      await rejectsWith(c.call("T.M", {}), "resource_exhausted", /MaxMessageSize/);
      assert.equal(await c.call("T.M", "again"), "again");
      assert.ok(canceled);
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("PING from the server is answered with ACK and the same bytes", async () => {
    let ack;
    const srv = await fakeServer(async (peer) => {
      peer.frame(0, H.Ping, 0, Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]));
      ack = await peer.next((f) => f.type === H.Ping);
      echo(peer);
    });
    try {
      const c = await connect(srv.addr);
      assert.equal(await c.call("T.M", 1), 1);
      assert.equal(ack.flags, w.FLAG_ACK);
      assert.equal(w.hex(ack.payload), "0102030405060708");
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("GOAWAY: streams above last stream id are not processed and are retried on a new connection, those below finish", async () => {
    let conns = 0;
    const srv = await fakeServer(async (peer) => {
      if (++conns > 1) return echo(peer);
      await goAwayAfterTwo(peer);
    });
    try {
      const c = await connect(srv.addr);
      const firstConn = c.closed;
      const first = c.call("T.M", "first");
      const second = c.call("T.M", "second");
      // Refused above the GOAWAY's last stream id, never processed: sent
      // again on a new connection, as in Go.
      assert.equal(await second, "second");
      assert.equal(await c.call("T.M", "third"), "third");
      assert.equal(conns, 2);
      assert.equal(await first, "first");
      await firstConn;
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("a stream opened by the server is refused with unimplemented (invalid_argument if its header does not decode)", async () => {
    let t, bad;
    const srv = await fakeServer(async (peer) => {
      peer.frame(2, H.Headers, 0, w.encodeCallHeader("Client.Method", 1, 0));
      t = await peer.next((f) => f.type === H.Trailers && f.stream === 2);
      peer.frame(4, H.Headers, 0, Uint8Array.from([0, 0, 0]));
      bad = await peer.next((f) => f.type === H.Trailers && f.stream === 4);
      echo(peer);
    });
    try {
      const c = await connect(srv.addr);
      assert.equal(await c.call("T.M", "x"), "x");
      assert.equal(w.decodeTrailer(t.payload).code, 12);
      assert.equal(w.decodeTrailer(bad.payload).code, 3);
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("flow control: the client waits for credit and sends in chunks within the window", async () => {
    const got = [];
    const srv = await fakeServer(
      async (peer) => {
        let total = 0;
        let id = 0;
        for (;;) {
          const f = await peer.next((f) => f.type === H.Data || f.type === H.Headers);
          if (f.type === H.Headers) continue;
          id = f.stream;
          got.push(f);
          total += f.length;
          assert.ok(f.length <= 2048, `frame of ${f.length} bytes over the 2 KiB window`);
          if (!(f.flags & w.FLAG_MORE)) break;
          // Credit as consumed.
          peer.frame(id, H.Window, 0, w.encodeWindow(f.length));
          peer.frame(0, H.Window, 0, w.encodeWindow(f.length));
        }
        peer.frame(id, H.Data, 0, Uint8Array.from([0x22, 0x6f, 0x6b, 0x22])); // "ok"
        peer.frame(id, H.Trailers, w.FLAG_END);
      },
      { preface: w.encodePreface({ initialWindow: 2048, maxFrameSize: 1024 }) },
    );
    try {
      const c = await connect(srv.addr);
      const msg = new Uint8Array(100_000).fill(7);
      assert.equal(await c.call("T.M", msg, { codec: { id: 0, name: "raw", encode: (x) => x, decode: (b) => JSON.parse(new TextDecoder().decode(b)) } }), "ok");
      const m = w.decodeMessage(w.concat(got.map((f) => w.encodeFrame(f.stream, f.type, f.flags, f.payload))), 1024);
      assert.equal(m.message.length, 100_000);
      assert.ok(got.length > 50);
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("flow control: the client credits what it consumes, and chunks of a message as they arrive", async () => {
    let windows = 0;
    const srv = await fakeServer(async (peer) => {
      const h = await peer.next((f) => f.type === H.Data);
      const max = peer.clientSettings.maxFrameSize;
      const iw = peer.clientSettings.initialWindow;
      // A message of 4 windows: it can only arrive if chunks are credited as they come.
      const msg = new Uint8Array(4 * iw).fill(1);
      let off = 0;
      let credit = iw;
      const first = Math.min(max, credit);
      peer.frame(h.stream, H.Data, w.FLAG_MORE, w.concat([Uint8Array.from([(msg.length >>> 24) & 255, (msg.length >>> 16) & 255, (msg.length >>> 8) & 255, msg.length & 255]), msg.subarray(0, first - 4)]));
      off = first - 4;
      credit -= first;
      while (off < msg.length) {
        while (credit < 1) {
          const f = await peer.next((f) => f.type === H.Window && f.stream === h.stream);
          credit += w.decodeWindow(f.payload);
          windows++;
        }
        const n = Math.min(max, credit, msg.length - off);
        peer.frame(h.stream, H.Data, off + n < msg.length ? w.FLAG_MORE : 0, msg.subarray(off, off + n));
        off += n;
        credit -= n;
      }
      peer.frame(h.stream, H.Trailers, w.FLAG_END);
    });
    try {
      const c = await connect(srv.addr, { maxMessageSize: 64 << 20 });
      const r = await c.call("T.M", new Uint8Array(1));
      assert.equal(r.length, 4 * c.session.local.initialWindow);
      assert.ok(windows >= 3);
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("protobuf messages with @bufbuild/protobuf types (codec 2 on the wire)", async () => {
    let codecSeen;
    const srv = await fakeServer(async (peer) => {
      const hf = await peer.next((f) => f.type === H.Headers);
      codecSeen = w.decodeCallHeader(hf.payload).codec;
      echo(peer);
    });
    try {
      const c = await connect(srv.addr);
      const codec = protobuf(StringValueSchema, StringValueSchema);
      const r = await c.call("T.M", create(StringValueSchema, { value: "héllo" }), { codec });
      assert.equal(r.value, "héllo");
      assert.equal(codecSeen, 2);
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("GOAWAY: a stream above last stream id fails notProcessed when it cannot be sent again", async () => {
    const srv = await fakeServer(async (peer) => {
      await goAwayAfterTwo(peer, () => unlinkSync(srv.addr.slice("unix://".length))); // no new connections
    });
    try {
      const c = await connect(srv.addr);
      const first = c.call("T.M", "first");
      const second = c.call("T.M", "second").catch((e) => e);
      const e = await second;
      assert.equal(e.code, "unavailable");
      assert.equal(e.notProcessed, true, String(e));
      assert.equal(await first, "first");
      await c.close();
    } finally {
      await srv.close();
    }
  });

  test("the connection dropped mid-call: unavailable", async () => {
    const srv = await fakeServer(async (peer) => {
      await peer.next((f) => f.type === H.Data);
      peer.frame(1, H.Data, w.FLAG_MORE, Uint8Array.from([0, 0, 0, 9, 1]));
      setTimeout(() => peer.sock.destroy(), 20);
    });
    try {
      const c = await connect(srv.addr);
      await rejectsWith(c.call("T.M", {}), "unavailable", /lost/);
    } finally {
      await srv.close();
    }
  });
});
