// What the TypeScript client does as the Go client does (issue 30, "Three
// clients that behave as one"): a unary call that ends without a reply,
// deadlines that cover the whole call, reconnection, the default address.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { connect, defaultAddress, DEFAULT_ADDRESS } from "../dist/node.js";
import * as w from "../dist/wire.js";
import { fakeServer, rejectsWith } from "./fake.mjs";
import { goBuild, startProcess, startServer, tempDir } from "./helpers.mjs";

const H = w.FrameType;

describe("a unary call that ends without a reply", () => {
  test("fails with internal and Go's message", async () => {
    const srv = await fakeServer(async (peer) => {
      for (;;) {
        const f = await peer.next((f) => f.type === H.Headers);
        if (!f) return;
        peer.frame(f.stream, H.Trailers, w.FLAG_END);
      }
    });
    try {
      const c = await connect(srv.addr);
      await rejectsWith(c.call("T.M", {}), "internal", /^T\.M: no reply message$/);
      await rejectsWith(c.clientStream("T.S").closeAndReceive(), "internal", /^T\.S: no reply message$/);
      await c.close();
    } finally {
      await srv.close();
    }
  });
});

describe("the deadline covers the whole call", () => {
  /** A server announcing preface that never answers. */
  const silent = (preface) => fakeServer(async (peer) => void (await peer.next(() => false)), { preface });

  test("waiting for a stream slot", async () => {
    const srv = await silent(w.encodePreface({ maxStreams: 1 }));
    try {
      const c = await connect(srv.addr);
      const hold = c.call("T.Hold", {});
      hold.catch(() => {});
      await new Promise((r) => setTimeout(r, 50));
      for (const call of [() => c.call("T.M", {}, { timeoutMs: 200 }), () => c.stream("T.S", {}, { timeoutMs: 200 })[Symbol.asyncIterator]().next()]) {
        const t0 = Date.now();
        await rejectsWith(call(), "deadline_exceeded");
        const took = Date.now() - t0;
        assert.ok(took >= 150 && took < 2000, `took ${took} ms`);
      }
      // Aborting a call waiting for a slot ends it at once.
      const ac = new AbortController();
      const p = c.call("T.M", {}, { signal: ac.signal });
      ac.abort();
      await rejectsWith(p, "canceled");
      await c.close();
      await rejectsWith(hold, "canceled");
    } finally {
      await srv.close();
    }
  });

  test("waiting for flow-control credit", async () => {
    const srv = await silent(w.encodePreface({ initialWindow: 1024 }));
    try {
      const c = await connect(srv.addr);
      const t0 = Date.now();
      await rejectsWith(c.call("T.M", new Uint8Array(100_000), { timeoutMs: 200 }), "deadline_exceeded");
      assert.ok(Date.now() - t0 < 2000);
      await c.close();
    } finally {
      await srv.close();
    }
  });
});

describe("reconnection", () => {
  test("after the server restarts, the next call dials again, with backoff", async () => {
    const addr = `unix://${join(tempDir(), "restart.sock")}`;
    let srv = await startServer(addr);
    try {
      const c = await connect(addr);
      assert.equal(await c.call("Test.Echo", 1), 1);
      const pending = c.call("Test.Sleep", { ms: 30000 });
      pending.catch(() => {}); // checked below
      const it = c.stream("Test.Count", { n: 1000, delay_ms: 20 })[Symbol.asyncIterator]();
      assert.deepEqual((await it.next()).value, { i: 0 });
      await srv.kill("SIGKILL");
      // Calls in flight fail with unavailable.
      await rejectsWith(pending, "unavailable");
      await rejectsWith(it.next(), "unavailable");
      // No server: the next call dials and fails; the one after it, within
      // the backoff, fails at once with the same error.
      let first;
      await assert.rejects(c.call("Test.Echo", 1), (e) => ((first = e), e.code === "unavailable"));
      const t0 = Date.now();
      await assert.rejects(c.call("Test.Echo", 1), (e) => e.code === "unavailable" && e.message === first.message);
      assert.ok(Date.now() - t0 < 40);
      srv = await startServer(addr);
      await new Promise((r) => setTimeout(r, 200)); // past the first backoff (50 ms)
      assert.equal(await c.call("Test.Echo", 2), 2);
      const got = [];
      for await (const m of c.stream("Test.Count", { n: 2 })) got.push(m.i);
      assert.deepEqual(got, [0, 1]);
      assert.ok((await c.ping()) >= 0);
      await c.close();
      // close is final: no more dialing.
      await rejectsWith(c.call("Test.Echo", 1), "canceled");
    } finally {
      await srv.kill();
    }
  });
});

describe("the default address", () => {
  test("defaultAddress follows XDG_RUNTIME_DIR, else TMPDIR or /tmp", () => {
    const saved = { x: process.env.XDG_RUNTIME_DIR, t: process.env.TMPDIR };
    const uid = process.geteuid();
    try {
      process.env.XDG_RUNTIME_DIR = "/run/user/7";
      assert.equal(defaultAddress(), "unix:///run/user/7/warren/warren.sock");
      process.env.XDG_RUNTIME_DIR = "relative";
      process.env.TMPDIR = "/var/tmp/";
      assert.equal(defaultAddress(), `unix:///var/tmp/warren-${uid}/warren.sock`);
      delete process.env.XDG_RUNTIME_DIR;
      delete process.env.TMPDIR;
      assert.equal(defaultAddress(), `unix:///tmp/warren-${uid}/warren.sock`);
    } finally {
      for (const [k, v] of [
        ["XDG_RUNTIME_DIR", saved.x],
        ["TMPDIR", saved.t],
      ]) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  test('connect("default") reaches warren serve started without --addr', async () => {
    const xdg = tempDir();
    const saved = process.env.XDG_RUNTIME_DIR;
    const warren = goBuild("./cmd/warren", "warren");
    const srv = await startProcess(warren, ["serve"], /^listening on (\S+)/m, { ...process.env, XDG_RUNTIME_DIR: xdg });
    process.env.XDG_RUNTIME_DIR = xdg;
    try {
      assert.equal(srv.addr, `unix://${xdg}/warren/warren.sock`);
      const c = await connect(DEFAULT_ADDRESS);
      assert.deepEqual(await c.call("Counter.Set", { name: "d", value: 3 }), { name: "d", value: "3" });
      await c.close();
      // Nothing there: unavailable.
      const empty = tempDir();
      mkdirSync(join(empty, "warren"), { mode: 0o700 });
      process.env.XDG_RUNTIME_DIR = empty;
      await rejectsWith(connect("default"), "unavailable");
    } finally {
      if (saved === undefined) delete process.env.XDG_RUNTIME_DIR;
      else process.env.XDG_RUNTIME_DIR = saved;
      await srv.kill();
    }
  });
});
