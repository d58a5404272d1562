// Every call kind against the Go test server over unix, tcp and ws, and
// the behaviours that need a real server: cancel, deadlines, 64 MiB
// messages, 1,000 concurrent calls, a server killed mid-call.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { connect, StatusError, raw } from "../dist/node.js";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { startServer, tempDir } from "./helpers.mjs";

const MiB = 1 << 20;

async function rejectsWith(p, code, re) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof StatusError, `want a StatusError, got ${e?.stack ?? e}`);
    assert.equal(e.code, code, e.message);
    if (re) assert.match(e.message, re);
    return true;
  });
}

async function waitPending(c, want) {
  for (let i = 0; i < 100; i++) {
    const { pending } = await c.call("Test.Pending", {});
    if (pending === want) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`Test.Pending never reached ${want}`);
}

const transports = {
  unix: () => `unix://${join(tempDir(), "t.sock")}`,
  tcp: () => "tcp://127.0.0.1:0",
  ws: () => "ws://127.0.0.1:0/",
};

for (const [name, listen] of Object.entries(transports)) {
  describe(`over ${name}`, () => {
    let srv, c;
    before(async () => {
      srv = await startServer(listen());
      c = await connect(srv.addr, { maxMessageSize: 80 * MiB });
    });
    after(async () => {
      await c?.close();
      await srv?.kill();
    });

    test("unary JSON", async () => {
      assert.deepEqual(await c.call("Test.Echo", { a: [1, "x", null, true] }), { a: [1, "x", null, true] });
      // The counter speaks the protobuf JSON mapping: int64 values come back
      // as strings, a zero value is left out, requests may use either form,
      // and unknown fields are discarded.
      assert.deepEqual(await c.call("Counter.Set", { name: `n-${name}`, value: 41 }), { name: `n-${name}`, value: "41" });
      assert.deepEqual(await c.call("Counter.Inc", { name: `n-${name}` }), { name: `n-${name}`, value: "42" });
      assert.deepEqual(await c.call("Counter.Inc", { name: `n-${name}`, by: "-42" }), { name: `n-${name}` });
      assert.deepEqual(await c.call("Counter.Set", { name: `n-${name}`, value: 1, bye: 3 }), { name: `n-${name}`, value: "1" });
      assert.deepEqual(await c.call("Counter.Get", { name: `n-${name}` }), { name: `n-${name}`, value: "1" });
    });

    test("int64 beyond 2^53 keeps every digit", async () => {
      const v = 9007199254740993n; // 2^53 + 1: not a float64
      // bigint in a request goes out as a JSON integer, every digit.
      assert.deepEqual(await c.call("Counter.Set", { name: `big-${name}`, value: v }), { name: `big-${name}`, value: String(v) });
      assert.deepEqual(await c.call("Counter.Inc", { name: `big-${name}` }), { name: `big-${name}`, value: String(v + 1n) });
      const min = -(2n ** 63n);
      assert.deepEqual(await c.call("Counter.Set", { name: `min-${name}`, value: String(min) }), { name: `min-${name}`, value: String(min) });
      // A JSON integer beyond 2^53 in a reply comes back as a bigint.
      const max = 2n ** 63n - 1n;
      assert.deepEqual(await c.call("Test.Echo", { v, max, min, small: 7 }), { v, max, min, small: 7 });
    });

    test("raw bytes", async () => {
      const b = new Uint8Array(3000).map((_, i) => i * 7);
      const r = await c.call("Test.EchoRaw", b);
      assert.ok(r instanceof Uint8Array);
      assert.deepEqual(Buffer.from(r), Buffer.from(b));
      assert.equal((await c.call("Test.EchoRaw", new Uint8Array(0))).length, 0);
    });


    test("server stream", async () => {
      const got = [];
      for await (const m of c.stream("Test.Count", { n: 50 })) got.push(m.i);
      assert.deepEqual(got, [...Array(50).keys()]);
    });

    test("leaving a server stream early cancels it", async () => {
      for await (const m of c.stream("Test.Count", { n: 1000, delay_ms: 5 })) {
        if (m.i === 2) break;
      }
      assert.deepEqual(await c.call("Test.Echo", 1), 1);
    });

    test("client stream", async () => {
      const s = c.clientStream("Test.Sum");
      for (let i = 1; i <= 100; i++) await s.send({ n: i });
      assert.deepEqual(await s.closeAndReceive(), { sum: 5050, count: 100 });
    });

    test("bidirectional stream", async () => {
      const s = c.bidiStream("Test.Chat");
      for (let i = 0; i < 10; i++) {
        await s.send({ i });
        assert.deepEqual(await s.receive(), { i });
      }
      await s.closeSend();
      assert.equal(await s.receive(), undefined);
    });

    test("status errors: code, message, details", async () => {
      await assert.rejects(c.call("Test.Fail", { code: "not_found", message: "no such thing", details: ["d1", "d2"] }), (e) => {
        assert.ok(e instanceof StatusError);
        assert.equal(e.code, "not_found");
        assert.equal(e.message, "no such thing");
        assert.deepEqual(e.details.map((d) => Buffer.from(d).toString()), ["d1", "d2"]);
        return true;
      });
      await rejectsWith(c.call("No.Such", {}), "unimplemented");
      await rejectsWith(c.call("Counter.Get", { name: "never-set" }), "not_found");
    });

    test("metadata both ways", async () => {
      let header, trailer;
      const r = await c.call("Test.Metadata", {}, { metadata: { "x-a": "1", "x-b": ["2", "3"] }, onHeader: (h) => (header = h), onTrailer: (t) => (trailer = t) });
      assert.deepEqual(r.metadata["x-a"], ["1"]);
      assert.deepEqual(r.metadata["x-b"], ["2", "3"]);
      assert.deepEqual(header, [["x-header", "h"]]);
      assert.deepEqual(trailer, [["x-trailer", "t"]]);
    });

    test("cancel with an AbortSignal: CANCEL reaches the server, the connection stays up", async () => {
      const ac = new AbortController();
      const p = c.call("Test.Sleep", { ms: 60000 }, { signal: ac.signal });
      await waitPending(c, 1);
      ac.abort();
      await rejectsWith(p, "canceled");
      await waitPending(c, 0);
      assert.equal(await c.call("Test.Echo", "still up"), "still up");
      const pre = AbortSignal.abort();
      await rejectsWith(c.call("Test.Echo", 1, { signal: pre }), "canceled");
    });

    test("deadlines", async () => {
      const t0 = Date.now();
      await rejectsWith(c.call("Test.Sleep", { ms: 60000 }, { timeoutMs: 100 }), "deadline_exceeded");
      assert.ok(Date.now() - t0 < 2000);
      await waitPending(c, 0);
      assert.deepEqual(await c.call("Test.Sleep", { ms: 10 }, { timeoutMs: 5000 }), { slept: 10 });
      await rejectsWith(c.call("Test.Sleep", { ms: 60000 }, { signal: AbortSignal.timeout(100) }), "deadline_exceeded");
    });

    test("1,000 concurrent calls on one connection, exact results", async () => {
      const calls = [];
      for (let i = 0; i < 1000; i++) calls.push(c.call("Test.Echo", { i, s: "x".repeat(i % 97) }));
      const got = await Promise.all(calls);
      got.forEach((r, i) => assert.deepEqual(r, { i, s: "x".repeat(i % 97) }));
    });

    test("ping", async () => {
      const ms = await c.ping();
      assert.ok(ms >= 0 && ms < 1000);
    });
  });
}

describe("large messages", () => {
  let srv, c;
  before(async () => {
    srv = await startServer(`unix://${join(tempDir(), "big.sock")}`);
    c = await connect(srv.addr, { maxMessageSize: 80 * MiB });
  });
  after(async () => {
    await c?.close();
    await srv?.kill();
  });

  test("a 64 MiB message each way", async () => {
    const b = new Uint8Array(64 * MiB);
    for (let i = 0; i < b.length; i += 4096) b[i] = (i >> 12) & 0xff;
    b[b.length - 1] = 0x5a;
    const r = await c.call("Test.EchoRaw", b, { codec: raw });
    assert.equal(r.length, b.length);
    assert.ok(Buffer.from(r).equals(Buffer.from(b)));
  });

  test("small calls keep going while a large one is in flight", async () => {
    const big = c.call("Test.EchoRaw", new Uint8Array(32 * MiB));
    const small = await Promise.all([...Array(20).keys()].map((i) => c.call("Test.Echo", i)));
    assert.deepEqual(small, [...Array(20).keys()]);
    assert.equal((await big).length, 32 * MiB);
  });

  test("a reply over the client's limit fails that call only", async () => {
    const small = await connect(srv.addr, { maxMessageSize: 1 * MiB });
    try {
      // The server checks the client's MaxMessageSize before it replies.
      await rejectsWith(small.call("Test.EchoRaw", new Uint8Array(2 * MiB)), "resource_exhausted");
      assert.equal(await small.call("Test.Echo", "ok"), "ok");
    } finally {
      await small.close();
    }
  });

  test("a request over the server's limit fails locally", async () => {
    const lim = c.serverSettings.maxMessageSize;
    await rejectsWith(c.call("Test.EchoRaw", new Uint8Array(lim + 1)), "resource_exhausted", /MaxMessageSize/);
    assert.equal(await c.call("Test.Echo", "ok"), "ok");
  });
});

describe("connections", () => {
  test("unix:@name (abstract socket)", async () => {
    const name = `warren-ts-${process.pid}-${Date.now()}`;
    const srv = await startServer(`unix:@${name}`);
    try {
      if (Number(process.versions.node.split(".")[0]) < 22) {
        // Node 20's libuv pads abstract names with NUL bytes to the full
        // sockaddr_un: the client says so instead of a bare ECONNREFUSED.
        await rejectsWith(connect(`unix:@${name}`), "unavailable", /pads abstract socket names/);
        return;
      }
      const c = await connect(`unix:@${name}`);
      assert.equal(await c.call("Test.Echo", "abstract"), "abstract");
      await c.close();
    } finally {
      await srv.kill();
    }
  });

  test("WebSocket through the HTTP bridge of a tcp listener", async () => {
    const srv = await startServer("tcp://127.0.0.1:0");
    try {
      const c = await connect(srv.addr.replace("tcp://", "ws://") + "/");
      assert.equal(await c.call("Test.Echo", "bridge"), "bridge");
      await c.close();
    } finally {
      await srv.kill();
    }
  });

  test("server killed mid-call: calls fail with unavailable at once", async () => {
    const srv = await startServer("tcp://127.0.0.1:0");
    const c = await connect(srv.addr);
    const p = c.call("Test.Sleep", { ms: 60000 });
    const st = c.stream("Test.Count", { n: 1000000, delay_ms: 1 });
    const it = st[Symbol.asyncIterator]();
    await it.next();
    await waitPending(c, 1);
    const t0 = Date.now();
    srv.proc.kill("SIGKILL");
    await rejectsWith(p, "unavailable");
    await assert.rejects(async () => {
      for (;;) {
        const r = await it.next();
        if (r.done) break;
      }
    }, (e) => e.code === "unavailable");
    assert.ok(Date.now() - t0 < 2000);
    await rejectsWith(c.call("Test.Echo", 1), "unavailable");
    await c.closed;
  });

  test("tls:// and wss:// with the server's certificate as the CA", async () => {
    // A self-signed certificate for 127.0.0.1, made by Go's own generator.
    const dir = tempDir();
    const goroot = execFileSync("go", ["env", "GOROOT"]).toString().trim();
    execFileSync("go", ["run", join(goroot, "src", "crypto", "tls", "generate_cert.go"), "--host", "127.0.0.1", "--duration", "1h"], { cwd: dir, stdio: "ignore" });
    const cert = join(dir, "cert.pem");
    const ca = readFileSync(cert);
    for (const scheme of ["tls", "wss"]) {
      const srv = await startServer(`${scheme}://127.0.0.1:0${scheme === "wss" ? "/" : ""}`, ["-cert", cert, "-key", join(dir, "key.pem")]);
      try {
        const c = await connect(srv.addr, { tls: { ca } });
        assert.equal(await c.call("Test.Echo", scheme), scheme);
        const got = [];
        for await (const m of c.stream("Test.Count", { n: 3 })) got.push(m.i);
        assert.deepEqual(got, [0, 1, 2]);
        await c.close();
        // Without the CA, the certificate is refused.
        await rejectsWith(connect(srv.addr), "unavailable");
      } finally {
        await srv.kill();
      }
    }
  });

  test("nothing listening: unavailable", async () => {
    await rejectsWith(connect(`unix://${join(tempDir(), "none.sock")}`), "unavailable", /cannot connect/);
    await rejectsWith(connect("tcp://127.0.0.1:1"), "unavailable");
  });

  test("closing the client fails its open calls with canceled", async () => {
    const srv = await startServer("tcp://127.0.0.1:0");
    try {
      const c = await connect(srv.addr);
      const p = c.call("Test.Sleep", { ms: 60000 });
      await waitPending(c, 1);
      await c.close();
      await rejectsWith(p, "canceled");
      await rejectsWith(c.call("Test.Echo", 1), "canceled");
    } finally {
      await srv.kill();
    }
  });

  test("a graceful server shutdown lets calls finish", async () => {
    const srv = await startServer("tcp://127.0.0.1:0");
    const c = await connect(srv.addr);
    const p = c.call("Test.Sleep", { ms: 300 });
    await waitPending(c, 1);
    const killed = srv.kill("SIGTERM");
    assert.deepEqual(await p, { slept: 300 });
    await killed;
    await c.closed;
    await rejectsWith(c.call("Test.Echo", 1), "unavailable");
  });
});

describe("resources", () => {
  test("a canceled stream leaves no timer behind", async () => {
    const srv = await startServer("tcp://127.0.0.1:0");
    try {
      const c = await connect(srv.addr);
      for await (const m of c.stream("Test.Count", { n: 100, delay_ms: 1 }, { timeoutMs: 600000 })) {
        if (m.i === 1) break;
      }
      // A leaked 10-minute timer would keep this count above the baseline.
      const timers = process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
      await c.close();
      assert.ok(timers <= 1, `${timers} timers active`);
    } finally {
      await srv.kill();
    }
  });
});

describe("concurrent readers", () => {
  test("two receive() calls at once on a bidirectional stream both get a message", async () => {
    const srv = await startServer("tcp://127.0.0.1:0");
    try {
      const c = await connect(srv.addr);
      const s = c.bidiStream("Test.Chat");
      const a = s.receive();
      const b = s.receive();
      await s.send({ n: 1 });
      await s.send({ n: 2 });
      const got = (await Promise.all([a, b])).map((m) => m.n).sort();
      assert.deepEqual(got, [1, 2]);
      await s.closeSend();
      assert.equal(await s.receive(), undefined);
      await c.close();
    } finally {
      await srv.kill();
    }
  });
});
