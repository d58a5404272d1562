// The shared wire vectors (testdata/vectors.json), both ways: every valid
// vector decodes to its fields and (unless noncanonical) re-encodes to the
// same bytes; every invalid one fails with its error class.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as w from "../dist/wire.js";
import { repoRoot } from "./helpers.mjs";

const vectors = JSON.parse(readFileSync(join(repoRoot, "testdata", "vectors.json"), "utf8"));
const md = (m) => (m === null ? null : m.map(([k, v]) => [k, v]));

function decode(v, b) {
  switch (v.kind) {
    case "frame": {
      const f = w.decodeFrame(b);
      if (f.size !== b.length) throw new Error("trailing bytes");
      return f;
    }
    case "preface":
      return w.decodePreface(b);
    case "callheader":
      return w.decodeCallHeader(b);
    case "trailer":
      return w.decodeTrailer(b);
    case "metadata":
      return w.decodeMetadata(b);
    case "window":
      return w.decodeWindow(b);
    case "goaway":
      return w.decodeGoAway(b);
    case "message":
      return w.decodeMessage(b);
  }
  throw new Error("unknown kind " + v.kind);
}

function check(v, b, d) {
  const f = v.fields;
  switch (v.kind) {
    case "frame":
      assert.deepEqual([d.length, d.stream, d.type, d.flags, w.hex(d.payload)], [f.length, f.stream, f.type_id, f.flags, f.payload]);
      assert.equal(w.typeName(d.type), f.type);
      if (!v.noncanonical) assert.equal(w.hex(w.encodeFrame(d.stream, d.type, d.flags, d.payload)), v.hex);
      break;
    case "preface": {
      const s = d.settings;
      assert.deepEqual([s.maxFrameSize, s.maxMessageSize, s.initialWindow, s.maxStreams, d.size], [f.max_frame_size, f.max_message_size, f.initial_window, f.max_streams, f.size]);
      assert.equal(f.version, 1);
      if (!v.noncanonical) assert.equal(w.hex(w.encodePreface(s)), v.hex);
      break;
    }
    case "callheader":
      assert.deepEqual([d.method, d.codec, d.timeoutUs, d.metadata], [f.method, f.codec, f.timeout_us, md(f.metadata)]);
      if (!v.noncanonical) assert.equal(w.hex(w.encodeCallHeader(d.method, d.codec, d.timeoutUs, d.metadata)), v.hex);
      break;
    case "trailer":
      assert.deepEqual(
        [d.code, d.message, d.details && d.details.map(w.hex), d.metadata],
        [f.code, f.message, f.details, md(f.metadata)],
      );
      if (!v.noncanonical) assert.equal(w.hex(w.encodeTrailer(d)), v.hex);
      break;
    case "metadata":
      assert.deepEqual(d, md(f.metadata));
      if (!v.noncanonical) assert.equal(w.hex(w.encodeMetadata(d ?? [])), v.hex);
      break;
    case "window":
      assert.equal(d, f.increment);
      assert.equal(w.hex(w.encodeWindow(d)), v.hex);
      break;
    case "goaway":
      assert.deepEqual([d.lastStream, d.code, d.message], [f.last_stream, f.code, f.message]);
      assert.equal(w.hex(w.encodeGoAway(d)), v.hex);
      break;
    case "message":
      assert.deepEqual([d.stream, d.flags, d.frames, w.hex(d.message)], [f.stream, f.flags, f.frames, f.message]);
      assert.equal(w.hex(w.encodeMessage(d.stream, d.message, f.max_frame, (d.flags & w.FLAG_END) !== 0)), v.hex);
      break;
  }
}

test("vectors.json has vectors of every kind", () => {
  const kinds = new Set(vectors.map((v) => v.kind));
  for (const k of ["frame", "preface", "callheader", "trailer", "metadata", "window", "goaway", "message"]) assert.ok(kinds.has(k), k);
});

for (const v of vectors) {
  test(`${v.kind}: ${v.name}`, () => {
    const b = w.fromHex(v.hex);
    if (v.error) {
      assert.throws(() => decode(v, b), (e) => {
        assert.ok(e instanceof w.WireError, `want a WireError, got ${e}`);
        assert.equal(e.kind, v.error);
        return true;
      });
      return;
    }
    check(v, b, decode(v, b));
  });
}
