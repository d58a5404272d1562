package otelwarren_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/otelwarren"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// env is a server and a client, both instrumented, recording into one
// span recorder and one meter each.
type env struct {
	spans      *tracetest.SpanRecorder
	srvM, cliM *sdkmetric.ManualReader
	addr, path string
	client     *rpc.Client
	srv        *rpc.Server
	sawBaggage chan string
}

var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{spans: tracetest.NewSpanRecorder(), srvM: sdkmetric.NewManualReader(), cliM: sdkmetric.NewManualReader(),
		sawBaggage: make(chan string, 16)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	opts := func(r *sdkmetric.ManualReader) []otelwarren.Option {
		return []otelwarren.Option{otelwarren.WithTracerProvider(tp),
			otelwarren.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))),
			otelwarren.WithPropagators(w3c)}
	}
	e.srv = rpc.NewServer(otelwarren.Server(&rpc.ServerOptions{Bridge: grpcbridge.New(), Logger: slog.New(slog.DiscardHandler)}, opts(e.srvM)...))
	store := counter.New()
	t.Cleanup(store.Shutdown)
	methods := counter.File_counter_proto.Services().ByName("Counter").Methods()
	rpc.Handle(e.srv, "Counter.Set", func(ctx context.Context, req *counter.SetRequest) (*counter.Entry, error) {
		e.sawBaggage <- baggage.FromContext(ctx).Member("tenant").Value()
		if req.Name == "" {
			return nil, status.New(status.NotFound, "no name")
		}
		if req.Name == "crash" {
			return nil, status.New(status.Internal, "crashed")
		}
		if req.Name == "panic" {
			panic("the test handler panics")
		}
		return &counter.Entry{Name: req.Name, Value: req.Value}, nil
	}, rpc.WithSchema(methods.ByName("Set")))
	rpc.HandleServerStream(e.srv, "Counter.Watch", func(ctx context.Context, req *counter.WatchRequest, st *rpc.Stream[counter.WatchRequest, counter.Entry]) error {
		for i := range 3 {
			if err := st.Send(&counter.Entry{Name: req.Name, Value: int64(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	rpc.HandleClientStream(e.srv, "Counter.Sum", func(ctx context.Context, st *rpc.Stream[counter.Entry, counter.Entry]) (*counter.Entry, error) {
		sum := &counter.Entry{}
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return sum, nil
			}
			if err != nil {
				return nil, err
			}
			sum.Value += m.Value
		}
	})
	rpc.HandleBidiStream(e.srv, "Counter.Echo", func(ctx context.Context, st *rpc.Stream[counter.Entry, counter.Entry]) error {
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return status.New(status.Aborted, "echo ends")
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	})
	dir := t.TempDir()
	e.path = filepath.Join(dir, "s.sock")
	e.addr = "unix://" + e.path
	l, err := transport.Listen(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	go e.srv.Serve(l)
	t.Cleanup(func() { e.srv.Close() })
	e.client, err = otelwarren.Dial(e.addr, nil, opts(e.cliM)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.client.Close() })
	return e
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// pair returns the client and server spans of the last call, checking that
// the server's is the client's child.
func (e *env) pair(t *testing.T, name string) (cli, srv sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range e.spans.Ended() {
		if s.Name() != name {
			continue
		}
		switch s.SpanKind() {
		case trace.SpanKindClient:
			cli = s
		case trace.SpanKindServer:
			srv = s
		}
	}
	if cli == nil || srv == nil {
		t.Fatalf("%s: client span %v, server span %v; spans: %v", name, cli != nil, srv != nil, len(e.spans.Ended()))
	}
	if srv.Parent().SpanID() != cli.SpanContext().SpanID() || srv.SpanContext().TraceID() != cli.SpanContext().TraceID() {
		t.Errorf("%s: server span's parent %v, want the client span %v", name, srv.Parent(), cli.SpanContext())
	}
	return cli, srv
}

func TestUnary(t *testing.T) {
	e := newEnv(t)
	parentCtx, parent := sdktrace.NewTracerProvider().Tracer("t").Start(context.Background(), "parent")
	m, _ := baggage.NewMember("tenant", "acme")
	b, _ := baggage.New(m)
	ctx := baggage.ContextWithBaggage(parentCtx, b)
	req := &counter.SetRequest{Name: "a", Value: 1 << 40}
	got, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, e.client, "Counter.Set", req)
	parent.End()
	if err != nil || got.Value != 1<<40 {
		t.Fatalf("Set = %v, %v", got, err)
	}
	if v := <-e.sawBaggage; v != "acme" {
		t.Errorf("the handler saw baggage tenant=%q, want acme", v)
	}
	cli, srv := e.pair(t, "Counter/Set")
	if cli.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("client span's parent %v, want the caller's span", cli.Parent())
	}
	for _, s := range []sdktrace.ReadOnlySpan{cli, srv} {
		a := attrs(s)
		for k, want := range map[attribute.Key]string{"rpc.system": "warren", "rpc.service": "Counter", "rpc.method": "Set",
			"network.transport": "unix", "server.address": e.path} {
			if got := a[k].AsString(); got != want {
				t.Errorf("%v span: %s = %q, want %q", s.SpanKind(), k, got, want)
			}
		}
		if c, ok := a["rpc.grpc.status_code"]; !ok || c.AsInt64() != 0 {
			t.Errorf("%v span: rpc.grpc.status_code %v (set %v), want 0", s.SpanKind(), c.AsInt64(), ok)
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("%v span: status %v", s.SpanKind(), s.Status())
		}
	}
	for _, r := range []*sdkmetric.ManualReader{e.srvM, e.cliM} {
		side := "server"
		if r == e.cliM {
			side = "client"
		}
		h := histograms(t, r)
		if n := h["rpc."+side+".duration"].count; n != 1 {
			t.Errorf("rpc.%s.duration: %d calls, want 1", side, n)
		}
		if s := h["rpc."+side+".request.size"]; s.count != 1 || s.sum != 10 { // proto: 1+1+1 name, 1+6 value
			t.Errorf("rpc.%s.request.size: %+v, want one of 10 bytes", side, s)
		}
		if s := h["rpc."+side+".response.size"]; s.count != 1 || s.sum != 10 {
			t.Errorf("rpc.%s.response.size: %+v, want one of 10 bytes", side, s)
		}
	}
}

func TestUnaryErrors(t *testing.T) {
	e := newEnv(t)
	// NotFound is the caller's doing: an error for the client, not for
	// the server. Internal is an error for both.
	want := map[int64]map[trace.SpanKind]codes.Code{
		int64(status.NotFound): {trace.SpanKindClient: codes.Error, trace.SpanKindServer: codes.Unset},
		int64(status.Internal): {trace.SpanKindClient: codes.Error, trace.SpanKindServer: codes.Error},
	}
	for name, code := range map[string]status.Code{"": status.NotFound, "crash": status.Internal, "panic": status.Internal} {
		_, err := rpc.Call[counter.SetRequest, counter.Entry](context.Background(), e.client, "Counter.Set", &counter.SetRequest{Name: name})
		if status.CodeOf(err) != code {
			t.Fatalf("Set(%q) = %v, want %v", name, err, code)
		}
		<-e.sawBaggage
	}
	seen := 0
	for _, s := range e.spans.Ended() {
		code := attrs(s)["rpc.grpc.status_code"].AsInt64()
		w, ok := want[code][s.SpanKind()]
		if !ok {
			t.Errorf("%v span with rpc.grpc.status_code %d", s.SpanKind(), code)
			continue
		}
		seen++
		if s.Status().Code != w {
			t.Errorf("%v span of code %d: status %v, want %v", s.SpanKind(), code, s.Status().Code, w)
		}
	}
	if seen != 6 {
		t.Errorf("%d spans, want 6", seen)
	}
	if n := histograms(t, e.srvM)["rpc.server.response.size"].count; n != 0 {
		t.Errorf("rpc.server.response.size recorded %d failed calls", n)
	}
}

func TestStreams(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ws, err := rpc.NewStream[counter.WatchRequest, counter.Entry](ctx, e.client, "Counter.Watch")
	if err != nil {
		t.Fatal(err)
	}
	ws.Send(&counter.WatchRequest{Name: "w"})
	ws.CloseSend()
	n := 0
	for {
		if _, err = ws.Recv(); err != nil {
			break
		}
		n++
	}
	if err != io.EOF || n != 3 {
		t.Fatalf("Watch: %d messages, then %v", n, err)
	}
	e.pair(t, "Counter/Watch")

	cs, err := rpc.NewStream[counter.Entry, counter.Entry](ctx, e.client, "Counter.Sum")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		cs.Send(&counter.Entry{Value: int64(i)})
	}
	if sum, err := cs.CloseAndRecv(); err != nil || sum.Value != 6 {
		t.Fatalf("Sum = %v, %v", sum, err)
	}
	e.pair(t, "Counter/Sum")

	bs, err := rpc.NewStream[counter.Entry, counter.Entry](ctx, e.client, "Counter.Echo")
	if err != nil {
		t.Fatal(err)
	}
	bs.Send(&counter.Entry{Value: 7})
	if m, err := bs.Recv(); err != nil || m.Value != 7 {
		t.Fatalf("Echo = %v, %v", m, err)
	}
	bs.CloseSend()
	if _, err := bs.Recv(); status.CodeOf(err) != status.Aborted {
		t.Fatalf("Echo's end: %v, want Aborted", err)
	}
	cli, srv := e.pair(t, "Counter/Echo")
	for _, s := range []sdktrace.ReadOnlySpan{cli, srv} {
		if c := attrs(s)["rpc.grpc.status_code"].AsInt64(); c != int64(status.Aborted) {
			t.Errorf("Echo's %v span: code %d, want Aborted", s.SpanKind(), c)
		}
	}

	// A stream closed by the client ends its span as cancelled.
	ws, err = rpc.NewStream[counter.WatchRequest, counter.Entry](ctx, e.client, "Counter.Watch")
	if err != nil {
		t.Fatal(err)
	}
	before := len(e.spans.Ended())
	ws.Close()
	ended := e.spans.Ended()
	if len(ended) != before+1 || attrs(ended[len(ended)-1])["rpc.grpc.status_code"].AsInt64() != int64(status.Canceled) {
		t.Errorf("Close: %d spans ended (want 1), the last %v", len(ended)-before, attrs(ended[len(ended)-1]))
	}
	if n := histograms(t, e.cliM)["rpc.client.duration"].count; n != 4 {
		t.Errorf("rpc.client.duration: %d calls, want 4", n)
	}
}

// TestHTTP: a call over HTTP continues the trace whose context came in its
// headers, and is named for its protocol.
func TestHTTP(t *testing.T) {
	e := newEnv(t)
	tp := sdktrace.NewTracerProvider()
	hc := rpc.HTTPClient(e.addr, nil)
	defer hc.CloseIdleConnections()
	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", e.path)
	}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	for _, tc := range []struct {
		system string
		opts   []connect.ClientOption
	}{
		{"connect_rpc", nil},
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc_web", []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		ctx, span := tp.Tracer("t").Start(context.Background(), tc.system)
		hdr := http.Header{}
		w3c.Inject(ctx, propagation.HeaderCarrier(hdr))
		cl := connect.NewClient[counter.SetRequest, counter.Entry](&http.Client{Transport: tr},
			"http://warren/warren.counter.v1.Counter/Set", tc.opts...)
		req := connect.NewRequest(&counter.SetRequest{Name: "h", Value: 1})
		for k, v := range hdr {
			req.Header()[k] = v
		}
		if _, err := cl.CallUnary(ctx, req); err != nil {
			t.Fatalf("%s: %v", tc.system, err)
		}
		span.End()
		<-e.sawBaggage
		var srv sdktrace.ReadOnlySpan
		for _, s := range e.spans.Ended() {
			if s.SpanContext().TraceID() == span.SpanContext().TraceID() {
				srv = s
			}
		}
		if srv == nil {
			t.Fatalf("%s: no server span in the caller's trace", tc.system)
		}
		if srv.Parent().SpanID() != span.SpanContext().SpanID() || !srv.Parent().IsRemote() {
			t.Errorf("%s: server span's parent %v, want the caller's span", tc.system, srv.Parent())
		}
		a := attrs(srv)
		if a["rpc.system"].AsString() != tc.system || a["rpc.service"].AsString() != "Counter" || a["network.transport"].AsString() != "unix" {
			t.Errorf("%s: server span attributes %v", tc.system, a)
		}
	}
}

type hist struct {
	count uint64
	sum   float64
}

// histograms collects r's histograms by name, all attributes summed.
func histograms(t *testing.T, r *sdkmetric.ManualReader) map[string]hist {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]hist{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var h hist
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					h.count += p.Count
					h.sum += p.Sum
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					h.count += p.Count
					h.sum += float64(p.Sum)
				}
			}
			out[m.Name] = h
		}
	}
	return out
}

// TestTCP: the network attributes of a call over tcp, on both sides.
func TestTCP(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	opts := []otelwarren.Option{otelwarren.WithTracerProvider(tp), otelwarren.WithPropagators(w3c)}
	srv := rpc.NewServer(otelwarren.Server(&rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler)}, opts...))
	rpc.HandleRaw(srv, "Echo.Say", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	c, err := otelwarren.Dial("tcp://"+l.Addr().String(), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reply []byte
	if err := c.Invoke(context.Background(), "Echo.Say", []byte("hi"), &reply); err != nil {
		t.Fatal(err)
	}
	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want 2", len(ended))
	}
	for _, s := range ended {
		a := attrs(s)
		if a["network.transport"].AsString() != "tcp" || a["server.address"].AsString() != "127.0.0.1" ||
			strconv.FormatInt(a["server.port"].AsInt64(), 10) != port {
			t.Errorf("%v span: %v, want tcp to 127.0.0.1:%s", s.SpanKind(), a, port)
		}
	}
}
