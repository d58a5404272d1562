// Several servers behind one client (issue 33) and shutdown under load
// (issue 29), against clients/testserver processes.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { connect, raw, StatusError } from "../dist/node.js";
import { startServer, tempDir } from "./helpers.mjs";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** Starts a test server recording Test.Record ids; ran() stops it (SIGTERM) and reads them. */
async function recordingServer(dir, name, addr = `unix://${join(dir, name + ".sock")}`) {
  const file = join(dir, name + ".json");
  const srv = await startServer(addr, ["-record", file, "-grace", "5s"]);
  let code;
  srv.proc.once("exit", (c) => (code = c));
  srv.ran = async () => {
    await srv.kill("SIGTERM");
    assert.equal(code ?? srv.proc.exitCode, 0, srv.stderr());
    const m = JSON.parse(readFileSync(file, "utf8"));
    unlinkSync(file);
    return m;
  };
  return srv;
}

const record = (c, id, opts = {}) => c.call("Test.Record", enc.encode(id), { codec: raw, timeoutMs: 10_000, ...opts });

describe("several servers", () => {
  test("an address list: round robin over one connection per server", async () => {
    const dir = tempDir();
    const srvs = await Promise.all(["a", "b", "c"].map((n) => recordingServer(dir, n)));
    const c = await connect(srvs.map((s) => s.addr).join(","));
    assert.deepEqual(c.addresses, srvs.map((s) => s.addr));
    for (let i = 0; i < 30; i++) assert.equal(dec.decode(await record(c, `rr-${i}`)), `rr-${i}`);
    await c.close();
    const counts = await Promise.all(srvs.map(async (s) => Object.keys(await s.ran()).length));
    assert.deepEqual(counts, [10, 10, 10]);
  });

  test("a server that leaves (GOAWAY) gets no new calls; no call fails, none runs twice", async () => {
    const dir = tempDir();
    const srvs = await Promise.all(["a", "b", "c"].map((n) => recordingServer(dir, n)));
    const c = await connect(srvs.map((s) => s.addr).join(","));
    let n = 0;
    let stop = false;
    const ok = [];
    const callers = Array.from({ length: 8 }, async (_, w) => {
      while (!stop) {
        const id = `w${w}-${n++}`;
        await record(c, id); // throws on any failure
        ok.push(id);
      }
    });
    await new Promise((r) => setTimeout(r, 100));
    const ranB = await srvs[1].ran(); // SIGTERM: GOAWAY, drain, exit
    const before = ok.length;
    await new Promise((r) => setTimeout(r, 200));
    stop = true;
    await Promise.all(callers);
    assert.ok(ok.length > before, "calls went on after the server left");
    await c.close();
    const ranA = await srvs[0].ran();
    const ranC = await srvs[2].ran();
    const all = [ranA, ranB, ranC];
    for (const id of ok) {
      const times = all.reduce((t, m) => t + (m[id] ?? 0), 0);
      assert.equal(times, 1, `call ${id} ran ${times} times`);
    }
    assert.equal(Object.keys(ranA).length + Object.keys(ranB).length + Object.keys(ranC).length, ok.length);
  });

  test("dns:///host:port resolves to tcp:// addresses", async () => {
    const dir = tempDir();
    const srv = await recordingServer(dir, "dns", "tcp://127.0.0.1:0");
    const port = srv.addr.split(":").pop();
    const c = await connect(`dns:///localhost:${port}`);
    assert.ok(c.addresses.includes(`tcp://127.0.0.1:${port}`), c.addresses.join(","));
    assert.equal(dec.decode(await record(c, "dns-1")), "dns-1");
    await c.close();
    assert.deepEqual(await srv.ran(), { "dns-1": 1 });
  });

  test("bad targets are refused with what to write", async () => {
    await assert.rejects(connect("dns:///nohost"), /dns:\/\/\/HOST:PORT/);
    await assert.rejects(connect("tcp://127.0.0.1:1,,tcp://127.0.0.1:2"), /entry 2 is empty/);
    await assert.rejects(connect("tcp://127.0.0.1:1,dns:///a:1"), /stands alone/);
  });
});

// The Go version is rpc's TestShutdownUnderLoad. 30 rounds unless
// WARREN_DRAIN_ROUNDS says otherwise (with the Python suite's and Go's, CI
// makes at least 100 across the three clients).
const ROUNDS = Number(process.env.WARREN_DRAIN_ROUNDS || 30);
const CALLERS = 8;

describe("shutdown under load", () => {
  test(`SIGTERM with calls in flight, ${ROUNDS} rounds: each call completed or refused as never processed; no reset`, async () => {
    const dir = tempDir();
    let completed = 0;
    let refused = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const srv = await recordingServer(dir, `drain-${round}`);
      const c = await connect(srv.addr);
      const outcomes = [];
      let first = 0;
      let allStarted;
      const started = new Promise((r) => (allStarted = r));
      const callers = Array.from({ length: CALLERS }, async (_, w) => {
        for (let seq = 0; ; seq++) {
          const id = `${round}-${w}-${seq}`;
          let err = null;
          try {
            const got = dec.decode(await record(c, id));
            if (got !== id) err = new Error(`reply ${got} to ${id}`);
          } catch (e) {
            err = e;
          }
          outcomes.push([id, err]);
          if (seq === 0 && ++first === CALLERS) allStarted();
          if (err) return; // the server is gone
        }
      });
      await started;
      await new Promise((r) => setTimeout(r, Math.random() * 3));
      const ran = await srv.ran();
      await Promise.all(callers);
      await c.close();
      for (const [id, err] of outcomes) {
        const times = ran[id] ?? 0;
        assert.ok(times <= 1, `round ${round}: call ${id} ran ${times} times`);
        if (!err) {
          assert.equal(times, 1, `round ${round}: call ${id} completed but never ran`);
          completed++;
          continue;
        }
        assert.equal(times, 0, `round ${round}: call ${id} ran, but its caller was told ${err}`);
        assert.ok(err instanceof StatusError && err.code === "unavailable" && err.notProcessed, `round ${round}: call ${id} failed as it may have run: ${err}`);
        assert.doesNotMatch(err.message, /reset/i);
        refused++;
      }
    }
    console.log(`# ${ROUNDS} rounds: ${completed} calls completed, ${refused} refused as never processed`);
    assert.ok(completed > 0);
    assert.equal(refused, ROUNDS * CALLERS);
  });
});
