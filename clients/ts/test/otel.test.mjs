// The caller's OpenTelemetry context travels in call metadata when the
// program has @opentelemetry/api; without it the client works as before.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { context, propagation, trace } from "@opentelemetry/api";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { connect } from "../dist/node.js";
import { pkgDir, startServer, tempDir } from "./helpers.mjs";

let srv, c;
const provider = new NodeTracerProvider();
before(async () => {
  provider.register(); // AsyncLocalStorage contexts, W3C trace context and baggage
  srv = await startServer(`unix://${join(tempDir(), "otel.sock")}`);
  c = await connect(srv.addr);
});
after(async () => {
  await c?.close();
  await srv?.kill();
  await provider.shutdown();
  trace.disable();
  context.disable();
  propagation.disable();
});

const traceparent = (span) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`;

test("the active span and baggage go with a call", async () => {
  const tracer = trace.getTracer("test");
  await tracer.startActiveSpan("call", async (span) => {
    const bag = propagation.createBaggage({ tenant: { value: "acme" } });
    await context.with(propagation.setBaggage(context.active(), bag), async () => {
      const { metadata } = await c.call("Test.Metadata", {}, { metadata: { k: "v" } });
      assert.deepEqual(metadata, { k: ["v"], traceparent: [traceparent(span)], baggage: ["tenant=acme"] });
      // A traceparent the caller gives is kept.
      const mine = `00-${"1".repeat(32)}-${"2".repeat(16)}-01`;
      const r = await c.call("Test.Metadata", {}, { metadata: [["traceparent", mine]] });
      assert.deepEqual(r.metadata.traceparent, [mine]);
    });
    span.end();
  });
  // Outside any span, nothing is added.
  assert.deepEqual((await c.call("Test.Metadata", {})).metadata, {});
});

test("a program without @opentelemetry/api works as before", () => {
  // A child process in which the package cannot be found.
  const hooks = `export async function resolve(s, ctx, next) {
    if (s === "@opentelemetry/api") throw Object.assign(new Error("not installed"), { code: "ERR_MODULE_NOT_FOUND" });
    return next(s, ctx);
  }`;
  const script = `
    import { register } from "node:module";
    register("data:text/javascript," + encodeURIComponent(${JSON.stringify(hooks)}));
    const { connect } = await import(${JSON.stringify(join(pkgDir, "dist", "node.js"))});
    const c = await connect(${JSON.stringify(srv.addr)});
    const r = await c.call("Test.Metadata", {}, { metadata: { k: "v" } });
    await c.close();
    const missing = await import("@opentelemetry/api").then(() => false, () => true);
    console.log(JSON.stringify({ md: r.metadata, missing }));`;
  const out = execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.deepEqual(JSON.parse(out), { md: { k: ["v"] }, missing: true });
});
