// The typed client (createClient over protoc-gen-es output, gen/): the
// counter service of `warren serve`, and the test schema's Everything
// service of the Go test server, every stream kind and every field kind at
// its extremes, round-tripping exactly in protobuf binary.
import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { create, createRegistry, equals, fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf";
import { anyPack, file_google_protobuf_wrappers, StringValueSchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { connect, StatusError } from "../dist/node.js";
import { createClient } from "../dist/protobuf.js";
import { Counter, EntrySchema, GetRequestSchema } from "../gen/counter_pb.js";
import { AllSchema, Everything, InnerSchema, Kind } from "../gen/warren/test/v1/everything_pb.js";
import { goBuild, startProcess, startServer, tempDir } from "./helpers.mjs";

const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;
const U64_MAX = (1n << 64n) - 1n;

describe("counter service through generated code (warren serve)", () => {
  let serve, c, counter;
  before(async () => {
    const addr = `unix://${join(tempDir(), "serve.sock")}`;
    serve = await startProcess(goBuild("./cmd/warren", "warren"), ["serve", "--addr", addr], /^listening on (\S+)/m);
    c = await connect(serve.addr);
    counter = createClient(Counter, c);
  });
  after(async () => {
    await c?.close();
    await serve?.kill();
  });

  test("methods are named as in the schema, in lower camel case", () => {
    assert.deepEqual(Object.keys(counter).sort(), ["get", "inc", "list", "set", "watch"]);
  });

  test("unary calls return the reply message; int64 is an exact bigint", async () => {
    const set = await counter.set({ name: "big", value: I64_MAX - 1n });
    assert.ok(equals(EntrySchema, set, create(EntrySchema, { name: "big", value: I64_MAX - 1n })));
    const inc = await counter.inc({ name: "big" });
    assert.equal(inc.$typeName, "warren.counter.v1.Entry");
    assert.equal(inc.value, I64_MAX);
    assert.equal((await counter.get(create(GetRequestSchema, { name: "big" }))).value, I64_MAX); // a message, or its init object
    await assert.rejects(counter.inc({ name: "big" }), (e) => e instanceof StatusError && e.code === "out_of_range");
    await assert.rejects(counter.get({ name: "none" }), (e) => e instanceof StatusError && e.code === "not_found");
    const list = await counter.list({});
    assert.ok(list.counters.some((e) => e.name === "big" && e.value === I64_MAX));
  });

  test("a server stream is an AsyncIterable of reply messages", async () => {
    await counter.set({ name: "w", value: 1n });
    const seen = [];
    for await (const e of counter.watch({ name: "w" })) {
      seen.push(e.value);
      if (seen.length === 1) await counter.inc({ name: "w", by: -3n });
      else break;
    }
    assert.deepEqual(seen, [1n, -2n]);
  });

  test("messages travel as protobuf binary (codec 2)", async () => {
    // The server tells the codec apart: JSON would give int64 as a string.
    const viaJSON = await c.call("warren.counter.v1.Counter.Get", { name: "w" });
    assert.equal(viaJSON.value, "-2");
    assert.equal((await counter.get({ name: "w" })).value, -2n);
  });
});

/** A message with every field of All at an extreme. */
function extremes() {
  const allBytes = Uint8Array.from({ length: 256 }, (_, i) => i);
  const inner = create(InnerSchema, { label: "outer", n: I64_MIN, children: [{ label: "child", n: I64_MAX, children: [{ label: "" }] }] });
  return create(AllSchema, {
    int32s: -2147483648,
    int64s: I64_MIN,
    uint32s: 4294967295,
    uint64s: U64_MAX,
    sint32s: -2147483648,
    sint64s: I64_MIN,
    fixed32s: 4294967295,
    fixed64s: U64_MAX,
    sfixed32s: 2147483647,
    sfixed64s: I64_MAX,
    floats: -3.4028234663852886e38,
    doubles: 5e-324,
    bools: true,
    strings: "héllo \u0000 😀 \uffff",
    bytes: allBytes,
    kind: Kind.MINUS,
    inner,
    int64List: [I64_MIN, 0n, I64_MAX],
    doubleList: [Infinity, -Infinity, -0, 1.7976931348623157e308],
    stringList: ["", "a", "\u{10ffff}"],
    bytesList: [new Uint8Array(0), allBytes],
    kindList: [Kind.UNSPECIFIED, Kind.ONE, Kind.TWO, Kind.MINUS],
    innerList: [inner, create(InnerSchema)],
    stringToInt64: { "": I64_MIN, max: I64_MAX },
    int32ToString: { [-2147483648]: "min", 0: "", 2147483647: "max" },
    uint64ToInner: { [U64_MAX.toString()]: inner, 0: create(InnerSchema, { label: "zero" }) },
    boolToBytes: { true: allBytes, false: new Uint8Array(0) },
    choice: { case: "choiceInt64", value: I64_MIN },
    optInt32: 0,
    optString: "",
    optBool: false,
    optKind: Kind.UNSPECIFIED,
    timestamp: { seconds: 253402300799n, nanos: 999999999 },
    duration: { seconds: -315576000000n, nanos: -999999999 },
    struct: { s: "x", n: -1.5, b: false, z: null, l: [1, "two", { three: [] }], o: {} },
    value: { kind: { case: "numberValue", value: 1e300 } },
    listValue: { values: [{ kind: { case: "stringValue", value: "v" } }, { kind: { case: "nullValue", value: 0 } }] },
    any: anyPack(StringValueSchema, create(StringValueSchema, { value: "packed" })),
    int64Wrapper: I64_MIN,
    uint64Wrapper: U64_MAX,
    stringWrapper: "",
    bytesWrapper: allBytes,
    boolWrapper: false,
    doubleWrapper: -0,
  });
}

/** Messages that differ in the oneof's case, the zero message included. */
function samples() {
  const a = extremes();
  return [
    a,
    create(AllSchema),
    create(AllSchema, { choice: { case: "choiceString", value: "s" }, timestamp: timestampFromDate(new Date(0)) }),
    create(AllSchema, { choice: { case: "choiceInner", value: create(InnerSchema, { label: "in" }) } }),
    create(AllSchema, { choice: { case: "choiceKind", value: Kind.MINUS }, optInt32: -1 }),
  ];
}

function assertSame(got, want) {
  assert.equal(got.$typeName, "warren.test.v1.All");
  assert.ok(equals(AllSchema, got, want), `round trip differs:\n got ${toBinary(AllSchema, got)}\nwant ${toBinary(AllSchema, want)}`);
  // Presence of the optional fields and of the oneof.
  for (const k of ["optInt32", "optString", "optBool", "optKind", "int64Wrapper", "stringWrapper", "boolWrapper", "doubleWrapper"]) {
    assert.equal(got[k], want[k], k);
  }
  assert.equal(Object.is(got.doubleWrapper, -0), Object.is(want.doubleWrapper, -0), "doubleWrapper -0");
  assert.deepEqual(got.doubleList.map((x) => Object.is(x, -0)), want.doubleList.map((x) => Object.is(x, -0)), "doubleList -0");
}

describe("Everything through generated code (clients/testserver)", () => {
  let srv, c, ev;
  before(async () => {
    srv = await startServer(`unix://${join(tempDir(), "everything.sock")}`);
    c = await connect(srv.addr);
    ev = createClient(Everything, c);
  });
  after(async () => {
    await c?.close();
    await srv?.kill();
  });

  test("unary Echo: every field kind round-trips exactly", async () => {
    for (const m of samples()) assertSame(await ev.echo(m), m);
  });

  test("Echo by name with JSON (the protobuf JSON mapping) round-trips too", async () => {
    const registry = createRegistry(file_google_protobuf_wrappers); // for the Any
    for (const m of samples()) {
      // JSON.stringify writes -0 as 0: JavaScript's JSON has no negative zero.
      m.doubleList = m.doubleList.map((x) => x + 0);
      if (m.doubleWrapper !== undefined) m.doubleWrapper += 0;
      const reply = await c.call("warren.test.v1.Everything.Echo", toJson(AllSchema, m, { registry }));
      // A float field comes back as its shortest float32 text, which
      // fromJson keeps as a double: the binary form rounds it to float32.
      const got = fromBinary(AllSchema, toBinary(AllSchema, fromJson(AllSchema, reply, { registry })));
      assertSame(got, m);
    }
  });

  test("server stream Repeat", async () => {
    const m = extremes();
    const got = [];
    for await (const r of ev.repeat({ message: m, count: 3 })) got.push(r);
    assert.equal(got.length, 3);
    got.forEach((r, i) => assertSame(r, create(AllSchema, { ...m, int32s: i })));
  });

  test("client stream Collect", async () => {
    const ms = samples();
    const cs = ev.collect();
    for (const m of ms) await cs.send(m);
    const list = await cs.closeAndReceive();
    assert.equal(list.messages.length, ms.length);
    list.messages.forEach((r, i) => assertSame(r, ms[i]));
  });

  test("bidi stream Mirror", async () => {
    const ms = samples();
    const bidi = ev.mirror();
    for (const m of ms) {
      await bidi.send(m);
      assertSame(await bidi.receive(), m);
    }
    await bidi.closeSend();
    assert.equal(await bidi.receive(), undefined);
  });
});
