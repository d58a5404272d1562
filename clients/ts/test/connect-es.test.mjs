// connect-es (@connectrpc/connect-node), unchanged, against warren's HTTP
// bridge (issue 29): refusals and failures read as Connect/gRPC statuses
// with warren's message, in the Connect, gRPC and gRPC-Web protocols.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import { join } from "node:path";
import { clone, create, createFileRegistry } from "@bufbuild/protobuf";
import { FieldDescriptorProtoSchema, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { Counter, file_counter } from "../gen/counter_pb.js";
import { goBuild, startProcess, startServer, tempDir } from "./helpers.mjs";

const TOKEN = "t".repeat(43);
const procs = [];
after(() => Promise.all(procs.map((p) => p.kill())));

const transports = {
  connect: (o) => createConnectTransport({ httpVersion: "1.1", ...o }),
  "connect JSON": (o) => createConnectTransport({ httpVersion: "1.1", useBinaryFormat: false, ...o }),
  grpc: (o) => createGrpcTransport({ ...o }),
  "grpc-web": (o) => createGrpcWebTransport({ httpVersion: "1.1", ...o }),
};

/** Options reaching a unix socket: HTTP/1.1 by socketPath, HTTP/2 by createConnection. */
function unixOptions(kind, path) {
  return kind === "grpc" ? { baseUrl: "http://warren", nodeOptions: { createConnection: () => net.connect(path) } } : { baseUrl: "http://warren", nodeOptions: { socketPath: path } };
}

async function expectCode(p, code, re) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof ConnectError, String(e));
    assert.equal(e.code, code, `${Code[e.code]}: ${e.rawMessage}`);
    if (re) assert.match(e.rawMessage, re);
    return true;
  });
}

test("a peer refused by policy reads PermissionDenied with the reason", async () => {
  const path = join(tempDir(), "deny.sock");
  procs.push(await startServer(`unix://${path}`, ["-deny"]));
  for (const [kind, make] of Object.entries(transports)) {
    // The server tells HTTP from warren by what a refused peer sends
    // within 100 ms (RELIABILITY.md); a client slower than that on a
    // loaded machine is answered as a warren peer: a new transport again.
    let p;
    for (let attempt = 0; attempt < 3; attempt++) {
      p = createClient(Counter, make(unixOptions(kind, path))).get({ name: "a" }, { timeoutMs: 10_000 });
      const e = await p.catch((e) => e);
      if (!(e instanceof ConnectError) || e.code !== Code.Unavailable) break;
    }
    await expectCode(p, Code.PermissionDenied, /runs with -deny/);
  }
});

test("a missing or stale token reads Unauthenticated with warren's message (Connect, gRPC, gRPC-Web)", async () => {
  const srv = await startProcess(goBuild("./cmd/warren", "warren"), ["serve", "--addr", "tcp://127.0.0.1:0", "--token", TOKEN], /^listening on (\S+)/m);
  procs.push(srv);
  const baseUrl = srv.addr.replace(/^tcp:/, "http:");
  for (const [kind, make] of Object.entries(transports)) {
    for (const headers of [{}, { authorization: "Bearer stale" }]) {
      const c = createClient(Counter, make({ baseUrl }));
      await expectCode(c.get({ name: "a" }, { headers, timeoutMs: 10_000 }), Code.Unauthenticated, /requires a token/);
    }
    const c = createClient(Counter, make({ baseUrl }));
    const e = await c.set({ name: kind, value: 7n }, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(e.value, 7n, kind);
  }
});

test("JSON with a field the server does not know is accepted (a client from a newer schema)", async () => {
  const path = join(tempDir(), "json.sock");
  procs.push(await startServer(`unix://${path}`));
  // counter.proto with SetRequest.note added.
  const newer = clone(FileDescriptorProtoSchema, file_counter.proto);
  newer.messageType.find((m) => m.name === "SetRequest").field.push(create(FieldDescriptorProtoSchema, { name: "note", number: 3, type: 9, label: 1, jsonName: "note" }));
  const Newer = createFileRegistry(newer, () => undefined).getService("warren.counter.v1.Counter");
  for (const kind of ["connect JSON", "connect"]) {
    const c = createClient(Newer, transports[kind](unixOptions(kind, path)));
    const e = await c.set({ name: "newer", value: 5n, note: "added later" });
    assert.equal(e.value, 5n, kind);
  }
});

test("a 64 KiB counter name: InvalidArgument or NotFound with a bounded message", async () => {
  const path = join(tempDir(), "long.sock");
  procs.push(await startServer(`unix://${path}`));
  for (const [kind, make] of Object.entries(transports)) {
    const c = createClient(Counter, make(unixOptions(kind, path)));
    await assert.rejects(c.get({ name: "x".repeat(65536) }), (e) => {
      assert.ok(e instanceof ConnectError, String(e));
      assert.ok(e.code === Code.InvalidArgument || e.code === Code.NotFound, `${kind}: ${Code[e.code]}`);
      assert.ok(e.rawMessage.length <= 1100, `${kind}: a message of ${e.rawMessage.length} bytes`);
      return true;
    });
  }
});

test("health Watch: SERVING, then NOT_SERVING when the drain starts", async () => {
  const path = join(tempDir(), "health.sock");
  const srv = await startServer(`unix://${path}`, ["-grace", "3s"]);
  procs.push(srv);
  const file = create(FileDescriptorProtoSchema, {
    name: "health.proto",
    package: "grpc.health.v1",
    syntax: "proto3",
    messageType: [
      { name: "HealthCheckRequest", field: [{ name: "service", number: 1, type: 9, label: 1, jsonName: "service" }] },
      { name: "HealthCheckResponse", field: [{ name: "status", number: 1, type: 14, label: 1, typeName: ".grpc.health.v1.HealthCheckResponse.ServingStatus", jsonName: "status" }], enumType: [{ name: "ServingStatus", value: [{ name: "UNKNOWN", number: 0 }, { name: "SERVING", number: 1 }, { name: "NOT_SERVING", number: 2 }, { name: "SERVICE_UNKNOWN", number: 3 }] }] },
    ],
    service: [{ name: "Health", method: [{ name: "Watch", inputType: ".grpc.health.v1.HealthCheckRequest", outputType: ".grpc.health.v1.HealthCheckResponse", serverStreaming: true }] }],
  });
  const Health = createFileRegistry(file, () => undefined).getService("grpc.health.v1.Health");
  const c = createClient(Health, transports.grpc(unixOptions("grpc", path)));
  const seen = [];
  try {
    for await (const r of c.watch({ service: "" }, { timeoutMs: 10_000 })) {
      seen.push(r.status);
      if (seen.length === 1) setTimeout(() => srv.proc.kill("SIGTERM"), 100);
      if (seen.length === 2) break;
    }
  } catch (e) {
    if (seen.length < 2) throw e;
  }
  assert.deepEqual(seen, [1, 2]);
});
