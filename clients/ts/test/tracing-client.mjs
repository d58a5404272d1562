// The TypeScript client of interop/tracing's test: calls Chain.Hop at ADDR
// within a span of its own, exporting to the OTLP/HTTP ENDPOINT, and prints
// the trace id. Usage: node tracing-client.mjs ADDR ENDPOINT
import { trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { connect } from "../dist/node.js";

const [addr, endpoint] = process.argv.slice(2);
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "ts-client" }),
  spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${endpoint}/v1/traces` }))],
});
provider.register();
const c = await connect(addr);
await trace.getTracer("tracing-test").startActiveSpan("ts-call", async (span) => {
  const reply = await c.call("Chain.Hop", {});
  if (JSON.stringify(reply) !== JSON.stringify({ path: "a,b" })) throw new Error(`reply ${JSON.stringify(reply)}`);
  span.end();
  console.log(span.spanContext().traceId);
});
await c.close();
await provider.shutdown();
