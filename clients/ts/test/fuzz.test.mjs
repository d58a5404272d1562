// Fuzzing with a fixed seed (reproducible; FUZZ_SEED and FUZZ_N to vary):
// every decoder and the JSON parser take random and mutated input and
// either decode it or throw their typed error, and a session fed random
// server bytes fails its calls with a StatusError, never anything else.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as w from "../dist/wire.js";
import { parseJSON } from "../dist/json.js";
import { Session } from "../dist/session.js";
import { StatusError } from "../dist/node.js";
import { repoRoot } from "./helpers.mjs";

const N = Number(process.env.FUZZ_N ?? 20000);
let seed = Number(process.env.FUZZ_SEED ?? 0x5eed);
function rnd() {
  // xorshift32
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 2 ** 32;
}
const int = (n) => Math.floor(rnd() * n);

const seeds = JSON.parse(readFileSync(join(repoRoot, "testdata", "vectors.json"), "utf8")).map((v) => w.fromHex(v.hex));

function mutate(b) {
  const out = Array.from(b);
  const k = 1 + int(4);
  for (let i = 0; i < k; i++) {
    switch (int(4)) {
      case 0:
        if (out.length) out[int(out.length)] = int(256);
        break;
      case 1:
        out.splice(int(out.length + 1), 0, int(256));
        break;
      case 2:
        if (out.length) out.splice(int(out.length), 1);
        break;
      case 3:
        out.length = int(out.length + 1);
        break;
    }
  }
  return Uint8Array.from(out);
}

function input() {
  if (rnd() < 0.3) return Uint8Array.from({ length: int(40) }, () => int(256));
  return mutate(seeds[int(seeds.length)]);
}

const decoders = {
  frame: (b) => w.decodeFrame(b),
  preface: (b) => w.decodePreface(b),
  callheader: (b) => w.decodeCallHeader(b),
  trailer: (b) => w.decodeTrailer(b),
  metadata: (b) => w.decodeMetadata(b),
  window: (b) => w.decodeWindow(b),
  goaway: (b) => w.decodeGoAway(b),
  message: (b) => w.decodeMessage(b),
};

for (const [name, decode] of Object.entries(decoders)) {
  test(`fuzz ${name}: decodes or throws a WireError`, () => {
    for (let i = 0; i < N / 8; i++) {
      const b = input();
      try {
        decode(b);
      } catch (e) {
        if (!(e instanceof w.WireError)) assert.fail(`${name}(${w.hex(b)}) threw ${e?.stack ?? e}`);
      }
    }
  });
}

test("fuzz: valid call headers and trailers round-trip", () => {
  for (let i = 0; i < N / 8; i++) {
    const md = Array.from({ length: int(4) }, () => [String.fromCharCode(97 + int(26)).repeat(int(5)), "v".repeat(int(300))]);
    const method = "S.M" + "x".repeat(int(200));
    const timeout = int(2 ** 31);
    const h = w.decodeCallHeader(w.encodeCallHeader(method, int(3), timeout, md));
    assert.deepEqual([h.method, h.timeoutUs, h.metadata ?? []], [method, timeout, md]);
    const t = { code: int(17), message: "m".repeat(int(200)), details: Array.from({ length: int(3) }, () => new Uint8Array(int(5))), metadata: md };
    const d = w.decodeTrailer(w.encodeTrailer(t));
    assert.deepEqual([d.code, d.message, d.details ?? [], d.metadata ?? []], [t.code, t.message, t.details, t.metadata]);
  }
});

test("fuzz parseJSON: same as JSON.parse, or a SyntaxError", () => {
  const texts = ['{"a":12345678901234567,"b":[1,2.5,"x\\"y",null,true]}', "[9007199254740993,-9223372036854775808]", '"s"', "123456789012345678901234567890"];
  for (let i = 0; i < N / 4; i++) {
    const t = texts[int(texts.length)];
    const chars = Array.from(t);
    for (let k = 0; k < 1 + int(3); k++) {
      const p = int(chars.length + 1);
      if (rnd() < 0.5) chars.splice(p, 1);
      else chars.splice(p, 0, '0123456789{}[]",:.eE-ntf'[int(25)]);
    }
    const s = chars.join("");
    let want;
    try {
      want = JSON.parse(s);
    } catch {
      assert.throws(() => parseJSON(s), SyntaxError, s);
      continue;
    }
    const got = parseJSON(s);
    // Equal to JSON.parse except that large integers are exact bigints.
    assert.equal(JSON.stringify(got, (_k, v) => (typeof v === "bigint" ? Number(v) : v)), JSON.stringify(want), s);
  }
});

test("fuzz session: random server bytes fail calls with a StatusError", async () => {
  for (let i = 0; i < 300; i++) {
    const t = { write() {}, close() {}, onData: () => {}, onClose: () => {} };
    const s = new Session(t, { handshakeTimeoutMs: 1000 });
    t.onData(w.encodePreface({}));
    await s.ready;
    const st = await s.open("T.M", 1, 0, undefined, Uint8Array.of(0x7b, 0x7d));
    // Frames of random kinds for stream 1, some valid, then random bytes.
    const parts = [];
    for (let k = 0; k < 1 + int(6); k++) {
      const b = rnd() < 0.7 ? w.encodeFrame(rnd() < 0.8 ? 1 : int(6), 1 + int(7), int(8), input()) : input();
      parts.push(b);
    }
    const all = w.concat(parts);
    // Deliver in random pieces.
    for (let off = 0; off < all.length; ) {
      const n = 1 + int(all.length - off);
      t.onData(all.subarray(off, off + n));
      off += n;
    }
    t.onClose();
    await st.wait();
    while (st.take() !== null) {}
    assert.ok(st.result === null || st.result instanceof StatusError, `result ${st.result}`);
  }
});
