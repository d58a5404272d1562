package tracing

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/warrenipc/warren/interop/tracing/tracestore"
	"github.com/warrenipc/warren/otelwarren"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// chain is the tracing backend and two Go servers: A's Chain.Hop calls B's.
type chain struct {
	endpoint string // OTLP/HTTP, http://host:port
	query    string // the query API's base URL
	addrA    string
}

func startChain(t *testing.T) *chain {
	t.Helper()
	c := &chain{}
	if jaeger := os.Getenv("WARREN_TRACING_JAEGER"); jaeger != "" {
		c.endpoint, c.query = startJaeger(t, jaeger)
	} else {
		c.endpoint, c.query = startStore(t)
	}

	dir := t.TempDir()
	addrB := "unix://" + filepath.Join(dir, "b.sock")
	c.addrA = "unix://" + filepath.Join(dir, "a.sock")
	optsB := c.provider(t, "warren-b")
	srvB := rpc.NewServer(otelwarren.Server(nil, optsB...))
	rpc.Handle(srvB, "Chain.Hop", func(ctx context.Context, _ *struct{}) (*map[string]string, error) {
		return &map[string]string{"path": "b"}, nil
	})
	serve(t, srvB, addrB)

	optsA := c.provider(t, "warren-a")
	toB, err := otelwarren.Dial(addrB, nil, optsA...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { toB.Close() })
	srvA := rpc.NewServer(otelwarren.Server(nil, optsA...))
	rpc.Handle(srvA, "Chain.Hop", func(ctx context.Context, _ *struct{}) (*map[string]string, error) {
		r, err := rpc.Call[struct{}, map[string]string](ctx, toB, "Chain.Hop", &struct{}{})
		if err != nil {
			return nil, err
		}
		return &map[string]string{"path": "a," + (*r)["path"]}, nil
	})
	serve(t, srvA, c.addrA)
	return c
}

// startStore starts tracestore: the Collector's OTLP receiver.
func startStore(t *testing.T) (endpoint, query string) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	otlpAddr := l.Addr().String()
	l.Close()
	store, err := tracestore.Start(ctx, otlpAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Shutdown(ctx) })
	q := httptest.NewServer(store)
	t.Cleanup(q.Close)
	return "http://" + otlpAddr, q.URL
}

// startJaeger starts a Jaeger v2 binary with its default configuration
// (in-memory storage, OTLP/HTTP on 4318, the query service on 16686).
func startJaeger(t *testing.T, bin string) (endpoint, query string) {
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	query = "http://127.0.0.1:16686"
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("jaeger's query service did not come up")
		}
	}
	return "http://127.0.0.1:4318", query
}

// provider is the options of a service that exports its spans to the
// backend as they end.
func (c *chain) provider(t *testing.T, service string) []otelwarren.Option {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(c.endpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return []otelwarren.Option{otelwarren.WithTracerProvider(tp),
		otelwarren.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))}
}

func serve(t *testing.T, srv *rpc.Server, addr string) {
	t.Helper()
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// check finds the client's trace through the query API and checks its
// spans: the client's, then A's server span, A's client span and B's
// server span, each the child of the one before.
func (c *chain) check(t *testing.T, clientService, traceID string) {
	t.Helper()
	var tr *tracestore.Trace
	for deadline := time.Now().Add(10 * time.Second); tr == nil || len(tr.Spans) < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no trace %s of 4 spans for service %s (got %+v)", traceID, clientService, tr)
		}
		tr = c.query1(t, clientService, traceID)
	}
	byID := map[string]tracestore.Span{}
	for _, s := range tr.Spans {
		byID[s.SpanID] = s
	}
	var leaf *tracestore.Span
	for i, s := range tr.Spans {
		if tr.Processes[s.ProcessID].ServiceName == "warren-b" {
			leaf = &tr.Spans[i]
		}
	}
	if leaf == nil {
		t.Fatalf("trace %s has no span of warren-b: %+v", traceID, tr)
	}
	// Walk from B's span up to the root.
	var chain []string
	for s, ok := *leaf, true; ok; {
		chain = append(chain, tr.Processes[s.ProcessID].ServiceName+" "+kind(s)+" "+s.OperationName)
		if len(s.References) == 0 {
			break
		}
		s, ok = byID[s.References[0].SpanID]
		if !ok {
			t.Fatalf("span %s's parent is not in the trace", chain[len(chain)-1])
		}
	}
	want := []string{"warren-b server Chain/Hop", "warren-a client Chain/Hop", "warren-a server Chain/Hop",
		clientService + " internal " + strings.TrimSuffix(clientService, "-client") + "-call"}
	if strings.Join(chain, " < ") != strings.Join(want, " < ") {
		t.Errorf("from B up to the root:\n got %q\nwant %q", chain, want)
	}
	t.Logf("trace %s: %s", traceID, strings.Join(chain, " < "))
}

// query1 asks the query API for service's traces and returns the one of id.
func (c *chain) query1(t *testing.T, service, id string) *tracestore.Trace {
	resp, err := http.Get(c.query + "/api/traces?service=" + service)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Data []tracestore.Trace }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for i := range body.Data {
		if body.Data[i].TraceID == id {
			return &body.Data[i]
		}
	}
	return nil
}

func kind(s tracestore.Span) string {
	for _, tag := range s.Tags {
		if tag.Key == "span.kind" {
			return fmt.Sprint(tag.Value)
		}
	}
	return "internal" // Jaeger leaves the tag out for internal spans
}

// need returns the value of an environment variable a client needs; without
// it the test is skipped, except in CI.
func need(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set", name)
		}
		t.Skipf("%s is not set (.ci/run sets it)", name)
	}
	return v
}

func runClient(t *testing.T, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %v: %v\n%s", name, args, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// TestPythonClient: a Python client's span, A's and B's, in one trace.
func TestPythonClient(t *testing.T) {
	python := need(t, "WARREN_TRACING_PYTHON")
	c := startChain(t)
	id := runClient(t, python, "client.py", c.addrA, c.endpoint)
	c.check(t, "python-client", id)
}

// TestTypeScriptClient: the same with the TypeScript client on Node.
func TestTypeScriptClient(t *testing.T) {
	script := filepath.Join("..", "..", "clients", "ts", "test", "tracing-client.mjs")
	if _, err := os.Stat(filepath.Join("..", "..", "clients", "ts", "node_modules", "@opentelemetry", "sdk-trace-node")); err != nil {
		need(t, "WARREN_TRACING_TS") // .ci/run installs clients/ts's dev dependencies
	}
	c := startChain(t)
	id := runClient(t, "node", script, c.addrA, c.endpoint)
	c.check(t, "ts-client", id)
}
