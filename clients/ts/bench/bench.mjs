// Calls per second from Node to the Go test server over one unix socket:
// 1 KiB echo, 16 concurrent calls. warren's client (one connection,
// multiplexed) against @connectrpc/connect-node calling the same server's
// Connect HTTP endpoint on the same socket (HTTP/1.1: one connection per
// call in flight, kept alive). Same process, same run, interleaved rounds.
//
//   npm run bench [-- --seconds 3 --rounds 3 --concurrency 16 --size 1024]
//
// With --codecs it compares the codecs instead, by name with JSON against
// the typed client (createClient over gen/) with protobuf binary: `warren
// serve`'s Counter.Set with a name of --size bytes (at most 256, the limit
// of a counter name), and the test server's warren.test.v1.Everything.Echo
// with a message of mixed fields (1,019 bytes in protobuf binary, 2,053 in
// JSON) and with one string of --size bytes. --only NAME runs the cases
// whose name contains NAME (for a profile: node --cpu-prof bench/bench.mjs).
// Each case reports the client's CPU time per call (process.cpuUsage).
import * as http from "node:http";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { create, createFileRegistry, toJson } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, StringValueSchema, file_google_protobuf_wrappers } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { connect, raw } from "../dist/node.js";
import { createClient as createTypedClient } from "../dist/protobuf.js";
import { Counter } from "../gen/counter_pb.js";
import { AllSchema, Everything, Kind } from "../gen/warren/test/v1/everything_pb.js";
import { goBuild, startProcess, startServer, tempDir } from "../test/helpers.mjs";

const { values: o } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "3" },
    concurrency: { type: "string", default: "16" },
    size: { type: "string", default: "1024" },
    json: { type: "boolean", default: false },
    codecs: { type: "boolean", default: false },
    only: { type: "string", default: "" },
  },
});
const seconds = Number(o.seconds);
const conc = Number(o.concurrency);
const size = Number(o.size);

// A service Test with Echo(StringValue) returns (StringValue), for Connect:
// the JSON form of a StringValue is a bare string, which Test.Echo returns as is.
const reg = createFileRegistry(
  create(FileDescriptorProtoSchema, {
    name: "bench.proto",
    syntax: "proto3",
    dependency: ["google/protobuf/wrappers.proto"],
    service: [{ name: "Test", method: [{ name: "Echo", inputType: ".google.protobuf.StringValue", outputType: ".google.protobuf.StringValue" }] }],
  }),
  (name) => (name === "google/protobuf/wrappers.proto" ? file_google_protobuf_wrappers : undefined),
);
const TestService = reg.getService("Test");

async function run(name, call) {
  // Warm up, then count completed calls for the duration.
  const warm = Date.now() + 300;
  await Promise.all(Array.from({ length: conc }, async () => {
    while (Date.now() < warm) await call();
  }));
  let n = 0;
  const lat = [];
  const end = performance.now() + seconds * 1000;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: conc }, async () => {
    while (performance.now() < end) {
      const s = performance.now();
      await call();
      if ((n & 15) === 0) lat.push(performance.now() - s);
      n++;
    }
  }));
  const dt = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  return { name, calls: n, rate: n / dt, p50ms: lat[Math.floor(lat.length / 2)], p99ms: lat[Math.floor(lat.length * 0.99)], cpuUs: (cpu.user + cpu.system) / n };
}

const dir = tempDir();
const srv = await startServer(`unix://${join(dir, "bench.sock")}`);
const sockPath = srv.addr.replace(/^unix:\/\//, "");
const text = "x".repeat(size);
const bytes = new Uint8Array(size).fill(120);

const client = await connect(srv.addr);
const agent = new http.Agent({ keepAlive: true, maxSockets: conc });
const transport = createConnectTransport({ baseUrl: "http://warren", httpVersion: "1.1", useBinaryFormat: false, nodeOptions: { socketPath: sockPath, agent } });
const connectClient = createClient(TestService, transport);

// Sanity: every contender echoes the payload.
if ((await client.call("Test.Echo", text)) !== text) throw new Error("warren Test.Echo");
if ((await client.call("Test.EchoRaw", bytes, { codec: raw })).length !== size) throw new Error("warren Test.EchoRaw");
if ((await connectClient.echo({ value: text })).value !== text) throw new Error("connect Test.Echo");

// The floor under any HTTP/1.1 client: node:http itself, no Connect library.
const jsonBody = JSON.stringify(text);
function plainHTTP() {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { socketPath: sockPath, path: "/Test.Echo", method: "POST", agent, headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(jsonBody) } },
      (res) => {
        const parts = [];
        res.on("data", (d) => parts.push(d));
        res.on("end", () => (JSON.parse(Buffer.concat(parts).toString()) === text ? resolve() : reject(new Error("bad echo"))));
      },
    );
    req.on("error", reject);
    req.end(jsonBody);
  });
}

let cases = [
  ["warren JSON Test.Echo", () => client.call("Test.Echo", text)],
  ["warren raw Test.EchoRaw", () => client.call("Test.EchoRaw", bytes, { codec: raw })],
  ["connect-node JSON Test.Echo (HTTP/1.1)", () => connectClient.echo({ value: text })],
  ["node:http JSON POST /Test.Echo (reference)", plainHTTP],
];
let serve, serveClient;
if (o.codecs) {
  serve = await startProcess(goBuild("./cmd/warren", "warren"), ["serve", "--addr", `unix://${join(dir, "serve.sock")}`], /^listening on (\S+)/m);
  serveClient = await connect(serve.addr);
  const counter = createTypedClient(Counter, serveClient);
  // Counter names are bounded at 256 bytes.
  const name = "x".repeat(Math.min(size, 256));
  const jsonReq = { name, value: 1 };
  const protoReq = { name, value: 1n };
  if ((await counter.set(protoReq)).name !== name || (await serveClient.call("Counter.Set", jsonReq)).name !== name) throw new Error("Counter.Set");
  const everything = createTypedClient(Everything, client);
  const all = create(AllSchema, {
    int32s: 123456, int64s: -1234567890123456789n, uint64s: 18446744073709551000n, doubles: 3.141592653589793, strings: "a mixed message", kind: Kind.TWO, bools: true,
    int64List: Array.from({ length: 32 }, (_, i) => BigInt(i) * 987654321987654n),
    doubleList: Array.from({ length: 32 }, (_, i) => i / 7),
    stringList: Array.from({ length: 8 }, (_, i) => `item-${i}-abcdefghij`),
    innerList: Array.from({ length: 8 }, (_, i) => ({ label: `inner ${i}`, n: BigInt(i) << 40n })),
    stringToInt64: Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`key${i}`, BigInt(i) * 1000000000000n])),
    timestamp: { seconds: 1700000000n, nanos: 123456789 },
  });
  const allJSON = toJson(AllSchema, all);
  if ((await everything.echo(all)).int64s !== all.int64s) throw new Error("Everything.Echo");
  const str = create(AllSchema, { strings: text });
  const strJSON = toJson(AllSchema, str);
  if ((await everything.echo(str)).strings !== text) throw new Error("Everything.Echo string");
  cases = [
    ["warren JSON Counter.Set by name", () => serveClient.call("Counter.Set", jsonReq)],
    ["warren protobuf Counter.Set, typed client", () => counter.set(protoReq)],
    ["warren JSON Everything.Echo by name", () => client.call("warren.test.v1.Everything.Echo", allJSON)],
    ["warren protobuf Everything.Echo, typed client", () => everything.echo(all)],
    ["warren JSON Everything.Echo string by name", () => client.call("warren.test.v1.Everything.Echo", strJSON)],
    ["warren protobuf Everything.Echo string, typed", () => everything.echo(str)],
  ];
}
if (o.only) cases = cases.filter(([n]) => n.includes(o.only));
const results = new Map(cases.map(([n]) => [n, []]));
for (let r = 0; r < Number(o.rounds); r++) {
  for (const [name, call] of cases) results.get(name).push(await run(name, call));
}
await client.close();
await serveClient?.close();
agent.destroy();
await srv.kill();
await serve?.kill();

const best = (name) => results.get(name).reduce((a, b) => (b.rate > a.rate ? b : a));
const medianOf = (name, k) => {
  const rs = results.get(name).map((r) => r[k]).sort((a, b) => a - b);
  return rs[Math.floor(rs.length / 2)];
};
const median = (name) => {
  const rs = results.get(name).map((r) => r.rate).sort((a, b) => a - b);
  return rs[Math.floor(rs.length / 2)];
};
const summary = cases.map(([name]) => ({ name, median_calls_per_s: Math.round(median(name)), p50_ms: +best(name).p50ms.toFixed(3), p99_ms: +best(name).p99ms.toFixed(3), client_cpu_us_per_call: +medianOf(name, "cpuUs").toFixed(1) }));
const ratios = o.codecs
  ? {
      protobuf_over_json_counter_set: ["warren protobuf Counter.Set, typed client", "warren JSON Counter.Set by name"],
      protobuf_over_json_everything_echo: ["warren protobuf Everything.Echo, typed client", "warren JSON Everything.Echo by name"],
      protobuf_over_json_string_echo: ["warren protobuf Everything.Echo string, typed", "warren JSON Everything.Echo string by name"],
    }
  : { warren_json_over_connect: ["warren JSON Test.Echo", "connect-node JSON Test.Echo (HTTP/1.1)"] };
const out = { node: process.version, size, concurrency: conc, seconds, rounds: Number(o.rounds), results: summary };
for (const [k, [a, b]] of Object.entries(ratios)) if (results.has(a) && results.has(b)) out[k] = +(median(a) / median(b)).toFixed(2);
if (o.json) console.log(JSON.stringify(out, null, 2));
else {
  console.log(`Node ${process.version}, unix socket, ${size} B ${o.codecs ? "messages" : "echo"}, ${conc} concurrent calls, median of ${o.rounds} rounds of ${seconds} s`);
  for (const r of summary) console.log(`  ${r.name.padEnd(46)} ${String(r.median_calls_per_s).padStart(8)} calls/s   p50 ${r.p50_ms} ms  p99 ${r.p99_ms} ms  client CPU ${r.client_cpu_us_per_call} µs/call`);
  for (const [k, [a, b]] of Object.entries(ratios)) if (k in out) console.log(`  ${a} / ${b}: ${out[k].toFixed(2)}x`);
}
