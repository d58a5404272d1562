// Package tracing tests trace propagation end to end: a Python or
// TypeScript client calls Go server A, which calls Go server B; the
// backend (tracestore: the OpenTelemetry Collector's OTLP receiver with an
// in-memory store and Jaeger's query API) must hold one trace with their
// spans, parent to child.
package tracing
