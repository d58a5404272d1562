// Package otelwarren records OpenTelemetry spans and metrics for warren
// calls, on servers and clients, following the semantic conventions for RPC
// (semconv v1.26): spans named "Service/Method" with rpc.system ("warren",
// or "connect_rpc", "grpc", "grpc_web" for calls that came over HTTP),
// rpc.service, rpc.method, the status code, server.address and
// network.transport; the histograms rpc.{server,client}.duration (ms) and
// rpc.{server,client}.{request,response}.size (bytes).
//
// The W3C trace context (traceparent, tracestate) and baggage travel in the
// call's metadata, which the HTTP protocols carry as headers: a server
// continues the trace of a client that sent them, whatever the client.
//
// It is a module of its own so that the core module does not depend on
// OpenTelemetry.
package otelwarren

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/warrenipc/warren/internal/callhook"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// scope is the instrumentation scope's name.
const scope = "github.com/warrenipc/warren/otelwarren"

// Option configures the interceptors.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider records spans with tp instead of the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider records metrics with mp instead of the global provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagators reads and writes the trace context with p instead of the
// global propagators (otel.SetTextMapPropagator), which propagate nothing
// until set: propagation.TraceContext{} and propagation.Baggage{} are the
// W3C ones.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// instruments are the tracer and histograms of one side (server or client).
type instruments struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	kind     trace.SpanKind
	duration metric.Float64Histogram
	reqSize  metric.Int64Histogram
	respSize metric.Int64Histogram
	shapes   sync.Map // shapeKey -> *shape
	nshapes  atomic.Int64
}

func newInstruments(side string, kind trace.SpanKind, opts []Option) *instruments {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	m := c.mp.Meter(scope, metric.WithSchemaURL(semconv.SchemaURL))
	in := &instruments{
		tracer: c.tp.Tracer(scope, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   c.prop,
		kind:   kind,
	}
	// Errors come only from invalid names; the no-op instruments stand in.
	in.duration, _ = m.Float64Histogram("rpc."+side+".duration", metric.WithUnit("ms"),
		metric.WithDescription("Duration of RPCs."))
	in.reqSize, _ = m.Int64Histogram("rpc."+side+".request.size", metric.WithUnit("By"),
		metric.WithDescription("Size of RPC request messages (uncompressed)."))
	in.respSize, _ = m.Int64Histogram("rpc."+side+".response.size", metric.WithUnit("By"),
		metric.WithDescription("Size of RPC response messages (uncompressed)."))
	return in
}

// ServerInterceptors returns the interceptors that trace and measure every
// call a server runs, unary and streaming; put them first in
// ServerOptions.Interceptors and StreamInterceptors (Server does).
func ServerInterceptors(opts ...Option) (rpc.UnaryServerInterceptor, rpc.StreamServerInterceptor) {
	in := newInstruments("server", trace.SpanKindServer, opts)
	unary := func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
		ctx, span, sh, start := in.startServer(ctx, info.Method)
		defer in.endPanic(ctx, span, sh, start)
		resp, err := next(ctx, req)
		in.end(ctx, span, sh, start, err, req, resp)
		return resp, err
	}
	stream := func(ctx context.Context, info *rpc.CallInfo, next func(ctx context.Context) error) error {
		ctx, span, sh, start := in.startServer(ctx, info.Method)
		defer in.endPanic(ctx, span, sh, start)
		err := next(ctx)
		in.end(ctx, span, sh, start, err, nil, nil)
		return err
	}
	return unary, stream
}

// Server puts the server interceptors first in o's interceptors and
// returns o (a new ServerOptions if o is nil).
func Server(o *rpc.ServerOptions, opts ...Option) *rpc.ServerOptions {
	if o == nil {
		o = new(rpc.ServerOptions)
	}
	u, s := ServerInterceptors(opts...)
	o.Interceptors = append([]rpc.UnaryServerInterceptor{u}, o.Interceptors...)
	o.StreamInterceptors = append([]rpc.StreamServerInterceptor{s}, o.StreamInterceptors...)
	return o
}

// ClientInterceptors returns the interceptors that trace and measure every
// call of a client of addr (the address given to rpc.Dial), unary and
// streaming, and send the trace context with it. A client stream's span
// ends when Recv returns the end of the call or Close is called.
func ClientInterceptors(addr string, opts ...Option) (rpc.UnaryClientInterceptor, rpc.StreamClientInterceptor) {
	in := newInstruments("client", trace.SpanKindClient, opts)
	base := clientAttrs(addr)
	unary := func(ctx context.Context, method string, req, resp any, next rpc.UnaryInvoker, copts ...rpc.CallOption) error {
		ctx, span, sh, start := in.start(ctx, shapeKey{method: method, system: "warren"}, base)
		err := next(ctx, method, req, resp, in.inject(ctx, copts)...)
		in.end(ctx, span, sh, start, err, req, resp)
		return err
	}
	stream := func(ctx context.Context, method string, copts []rpc.CallOption, open func(ctx context.Context, opts ...rpc.CallOption) error) error {
		ctx, span, sh, start := in.start(ctx, shapeKey{method: method, system: "warren"}, base)
		var ended atomic.Bool
		end := func(err error) {
			if !ended.Swap(true) {
				in.end(ctx, span, sh, start, err, nil, nil)
			}
		}
		copts = append(in.inject(ctx, copts), callhook.StreamEnd(end).(rpc.CallOption))
		err := open(ctx, copts...)
		if err != nil {
			end(err)
		}
		return err
	}
	return unary, stream
}

// Dial is rpc.Dial with the client interceptors first in o's interceptors
// (o is not modified).
func Dial(addr string, o *rpc.ClientOptions, opts ...Option) (*rpc.Client, error) {
	var co rpc.ClientOptions
	if o != nil {
		co = *o
	}
	u, s := ClientInterceptors(addr, opts...)
	co.Interceptors = append([]rpc.UnaryClientInterceptor{u}, co.Interceptors...)
	co.StreamInterceptors = append([]rpc.StreamClientInterceptor{s}, co.StreamInterceptors...)
	return rpc.Dial(addr, &co)
}

// startServer continues the caller's trace, if it sent one, and starts the
// server's span.
func (in *instruments) startServer(ctx context.Context, method string) (context.Context, trace.Span, *shape, time.Time) {
	ctx = in.prop.Extract(ctx, carrier(rpc.IncomingMetadata(ctx)))
	k := shapeKey{method: method, system: "warren"}
	if p, ok := ctx.Value(callhook.ProtocolKey{}).(callhook.Protocol); ok {
		k.system = p.System()
	}
	if p, ok := peer.FromContext(ctx); ok {
		k.network = p.Network
		if p.LocalAddr != nil {
			k.local = p.LocalAddr.String()
		}
	}
	return in.start(ctx, k, nil)
}

// start starts a call's span. base are the network attributes of a
// client (nil on a server: they come from k).
func (in *instruments) start(ctx context.Context, k shapeKey, base []attribute.KeyValue) (context.Context, trace.Span, *shape, time.Time) {
	sh := in.shape(k, base)
	ctx, span := in.tracer.Start(ctx, sh.name, sh.startOpts...)
	return ctx, span, sh, time.Now()
}

// shapeKey identifies the calls that share their attributes.
type shapeKey struct {
	method, system string
	network, local string // a server's end of the connection
}

// shape is what the calls of one shapeKey share: the span's name and
// attributes, and the metrics' attribute sets by status code.
type shape struct {
	name      string
	attrs     []attribute.KeyValue
	startOpts []trace.SpanStartOption
	connect   bool // rpc.system is connect_rpc
	byCode    [status.Unauthenticated + 1]atomic.Pointer[metric.MeasurementOption]
}

// maxShapes bounds the shapes kept; calls of others build theirs each time.
const maxShapes = 4096

func (in *instruments) shape(k shapeKey, base []attribute.KeyValue) *shape {
	if sh, ok := in.shapes.Load(k); ok {
		return sh.(*shape)
	}
	service, name := k.method, k.method
	if i := strings.LastIndexByte(k.method, '.'); i >= 0 {
		service, name = k.method[:i], k.method[i+1:]
	}
	if base == nil && k.network != "" {
		base = netAttrs(k.network, k.local)
	}
	sh := &shape{name: service + "/" + name, connect: k.system == "connect_rpc"}
	sh.attrs = append([]attribute.KeyValue{semconv.RPCSystemKey.String(k.system), semconv.RPCService(service), semconv.RPCMethod(name)}, base...)
	sh.startOpts = []trace.SpanStartOption{trace.WithSpanKind(in.kind), trace.WithAttributes(sh.attrs...)}
	if in.nshapes.Add(1) <= maxShapes {
		v, _ := in.shapes.LoadOrStore(k, sh)
		return v.(*shape)
	}
	return sh
}

// codeAttr is the status code attribute, nil for a Connect call's success
// (the convention names only errors).
func (sh *shape) codeAttr(code status.Code) (attribute.KeyValue, bool) {
	if sh.connect {
		return attribute.String("rpc.connect_rpc.error_code", code.String()), code != status.OK
	}
	return semconv.RPCGRPCStatusCodeKey.Int(int(code)), true
}

// metricOpt is the metrics' attribute set for a call that ended with code.
func (sh *shape) metricOpt(code status.Code) metric.MeasurementOption {
	var slot *atomic.Pointer[metric.MeasurementOption]
	if int(code) < len(sh.byCode) {
		slot = &sh.byCode[code]
		if o := slot.Load(); o != nil {
			return *o
		}
	}
	attrs := sh.attrs
	if a, ok := sh.codeAttr(code); ok {
		attrs = append(attrs[:len(attrs):len(attrs)], a)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	if slot != nil {
		slot.Store(&o)
	}
	return o
}

// end ends a call's span with its status and records its metrics; req and
// resp are its messages, nil for a stream.
func (in *instruments) end(ctx context.Context, span trace.Span, sh *shape, start time.Time, err error, req, resp any) {
	elapsed := float64(time.Since(start)) / float64(time.Millisecond)
	code := status.OK
	if err != nil && !errors.Is(err, io.EOF) { // io.EOF: a client stream's success
		code = status.CodeOf(err)
	}
	if span.IsRecording() {
		if a, ok := sh.codeAttr(code); ok {
			span.SetAttributes(a)
		}
		if code != status.OK && (in.kind == trace.SpanKindClient || serverFault(code)) {
			span.SetStatus(codes.Error, status.FromError(err).Message)
		}
	}
	span.End()
	set := sh.metricOpt(code)
	in.duration.Record(ctx, elapsed, set)
	if n, ok := size(req); ok {
		in.reqSize.Record(ctx, int64(n), set)
	}
	if n, ok := size(resp); ok && code == status.OK {
		in.respSize.Record(ctx, int64(n), set)
	}
}

// endPanic ends the span of a handler that panicked as Internal (as the
// server answers), and panics on.
func (in *instruments) endPanic(ctx context.Context, span trace.Span, sh *shape, start time.Time) {
	if r := recover(); r != nil {
		in.end(ctx, span, sh, start, status.New(status.Internal, "the handler panicked"), nil, nil)
		panic(r)
	}
}

// serverFault reports the codes that mark a server's span as failed (as
// for gRPC): the others are the caller's doing.
func serverFault(c status.Code) bool {
	switch c {
	case status.Unknown, status.DeadlineExceeded, status.Unimplemented, status.Internal, status.Unavailable, status.DataLoss:
		return true
	}
	return false
}

// inject adds the trace context of ctx to a call's options, as metadata.
func (in *instruments) inject(ctx context.Context, opts []rpc.CallOption) []rpc.CallOption {
	md := rpc.Metadata{}
	in.prop.Inject(ctx, carrier(md))
	if len(md) == 0 {
		return opts
	}
	return append(opts[:len(opts):len(opts)], rpc.WithMetadata(md))
}

// size is a message's size as encoded, when it is cheap to know: raw bytes
// and protobuf messages.
func size(m any) (int, bool) {
	switch m := m.(type) {
	case nil:
		return 0, false
	case []byte:
		return len(m), true
	case *[]byte:
		return len(*m), true
	case proto.Message:
		return proto.Size(m), true
	}
	return 0, false
}

// clientAttrs are the network attributes of a client of addr.
func clientAttrs(addr string) []attribute.KeyValue {
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return nil
	}
	if a.Scheme == transport.SchemeUnix {
		return []attribute.KeyValue{semconv.NetworkTransportUnix, semconv.ServerAddress(a.Address)}
	}
	return hostPort(a.Address)
}

// netAttrs are the network attributes of a server's end of a connection.
func netAttrs(network, local string) []attribute.KeyValue {
	if network == "unix" {
		attrs := []attribute.KeyValue{semconv.NetworkTransportUnix}
		if local != "" {
			attrs = append(attrs, semconv.ServerAddress(local))
		}
		return attrs
	}
	if local == "" {
		return []attribute.KeyValue{semconv.NetworkTransportTCP}
	}
	return hostPort(local)
}

func hostPort(hp string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return []attribute.KeyValue{semconv.NetworkTransportTCP, semconv.ServerAddress(hp)}
	}
	attrs := []attribute.KeyValue{semconv.NetworkTransportTCP, semconv.ServerAddress(host)}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	return attrs
}

// carrier is call metadata as a propagation.TextMapCarrier. Keys are
// lower case, as the HTTP bridge gives headers.
type carrier rpc.Metadata

func (c carrier) Get(key string) string { return rpc.Metadata(c).Get(strings.ToLower(key)) }

func (c carrier) Set(key, value string) { rpc.Metadata(c).Set(strings.ToLower(key), value) }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
