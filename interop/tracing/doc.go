// Package tracing tests trace propagation end to end: a Python or
// TypeScript client calls Go server A, which calls Go server B; the
// backend must hold one trace with their spans, parent to child, found
// through Jaeger's query API (GET /api/traces?service=NAME).
//
// The backend is tracestore: the OpenTelemetry Collector's OTLP receiver
// with an in-memory store and that query API. Jaeger itself (v1.76.0,
// cmd/jaeger) took 500 CPU-seconds to build cold on the 2-core machine
// (21.5 minutes there, shared), against 131 for this test binary with
// tracestore; WARREN_TRACING_JAEGER=/path/to/jaeger runs the same test
// against a Jaeger binary (default configuration: OTLP/HTTP on 4318, the
// query service on 16686).
package tracing
