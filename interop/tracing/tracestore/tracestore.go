// Package tracestore is the tracing backend of the tracing test: the
// OpenTelemetry Collector's OTLP receiver (OTLP/HTTP) feeding an in-memory
// store, queried as Jaeger's query service is: GET /api/traces?service=NAME
// answers, in Jaeger's JSON, every trace with a span of that service.
package tracestore

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// Span is a stored span, in the shape of Jaeger's JSON.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []Ref  `json:"references"`
	ProcessID     string `json:"processID"`
	Tags          []Tag  `json:"tags"`
}

// Ref is a span's parent.
type Ref struct {
	RefType string `json:"refType"` // CHILD_OF
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// Tag is an attribute (Jaeger's values are strings, numbers or booleans).
type Tag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Process is the service that recorded a span.
type Process struct {
	ServiceName string `json:"serviceName"`
}

// Trace is one trace as /api/traces returns it.
type Trace struct {
	TraceID   string             `json:"traceID"`
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"`
}

// Store holds the spans received.
type Store struct {
	rcv receiver.Traces

	mu     sync.Mutex
	traces map[string]*Trace
	order  []string
}

// Start receives OTLP/HTTP at otlpAddr (host:port) until Shutdown.
func Start(ctx context.Context, otlpAddr string) (*Store, error) {
	s := &Store{traces: map[string]*Trace{}}
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig()
	conf := confmap.NewFromStringMap(map[string]any{"protocols": map[string]any{"http": map[string]any{"endpoint": otlpAddr}}})
	if err := conf.Unmarshal(cfg); err != nil {
		return nil, err
	}
	next, err := consumer.NewTraces(s.consume)
	if err != nil {
		return nil, err
	}
	if s.rcv, err = f.CreateTraces(ctx, receivertest.NewNopSettings(f.Type()), cfg, next); err != nil {
		return nil, err
	}
	if err := s.rcv.Start(ctx, componenttest.NewNopHost()); err != nil {
		return nil, err
	}
	return s, nil
}

// Shutdown stops the receiver.
func (s *Store) Shutdown(ctx context.Context) error { return s.rcv.Shutdown(ctx) }

func (s *Store) consume(_ context.Context, td ptrace.Traces) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range td.ResourceSpans().All() {
		svc, _ := rs.Resource().Attributes().Get("service.name")
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				tid := sp.TraceID().String()
				t := s.traces[tid]
				if t == nil {
					t = &Trace{TraceID: tid, Processes: map[string]Process{}}
					s.traces[tid] = t
					s.order = append(s.order, tid)
				}
				pid := "p-" + svc.AsString()
				t.Processes[pid] = Process{ServiceName: svc.AsString()}
				span := Span{TraceID: tid, SpanID: sp.SpanID().String(), OperationName: sp.Name(),
					ProcessID: pid, References: []Ref{}, Tags: []Tag{{Key: "span.kind", Type: "string", Value: spanKind(sp.Kind())}}}
				if p := sp.ParentSpanID(); !p.IsEmpty() {
					span.References = append(span.References, Ref{RefType: "CHILD_OF", TraceID: tid, SpanID: p.String()})
				}
				for k, v := range sp.Attributes().All() {
					span.Tags = append(span.Tags, Tag{Key: k, Type: "string", Value: v.AsString()})
				}
				t.Spans = append(t.Spans, span)
			}
		}
	}
	return nil
}

func spanKind(k ptrace.SpanKind) string {
	switch k {
	case ptrace.SpanKindServer:
		return "server"
	case ptrace.SpanKindClient:
		return "client"
	}
	return "internal"
}

// ServeHTTP answers GET /api/traces?service=NAME.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/traces" {
		http.NotFound(w, r)
		return
	}
	svc := r.URL.Query().Get("service")
	s.mu.Lock()
	out := []Trace{}
	for _, id := range s.order {
		t := s.traces[id]
		for _, sp := range t.Spans {
			if t.Processes[sp.ProcessID].ServiceName == svc {
				out = append(out, Trace{TraceID: t.TraceID, Spans: append([]Span(nil), t.Spans...), Processes: t.Processes})
				break
			}
		}
	}
	body, err := json.Marshal(map[string]any{"data": out})
	s.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}
