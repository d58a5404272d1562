// The caller's OpenTelemetry context (traceparent, tracestate, baggage) in
// call metadata, when the program has @opentelemetry/api (an optional peer
// dependency). The Node build loads it on connect, by a name held in a
// variable so that bundlers leave it out; without it nothing is sent.

import type { Metadata } from "./wire.js";

interface Api {
  context: { active(): unknown };
  propagation: { inject(ctx: unknown, carrier: Record<string, string>): void };
}

let api: Api | null | undefined; // undefined: not tried yet
let loading: Promise<void> | undefined;
const spec = "@opentelemetry/api";

/** Imports @opentelemetry/api once, if the program has it. */
export function loadTracing(): Promise<void> {
  loading ??= import(spec).then(
    (m: Partial<Api> & { default?: Api }) => {
      api = m.propagation ? (m as Api) : (m.default ?? null);
    },
    () => {
      api = null;
    },
  );
  return loading;
}

/** The active context as metadata pairs, as the global propagator writes them. */
export function traceMetadata(): Metadata {
  if (!api) return [];
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.context.active(), carrier);
  return Object.entries(carrier);
}
