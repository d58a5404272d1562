package otelwarren_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/warrenipc/warren/otelwarren"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// BenchmarkUnary: one caller, 1 KiB raw unary calls over a unix socket,
// client and server in this process; "off" without the interceptors,
// "traced" with every call sampled (spans batched to an exporter that drops
// them; metrics into the SDK's aggregation), "unsampled" with the
// interceptors but the sampler saying no.
//
//	go test ./ -run '^$' -bench Unary -benchmem -count 5
func BenchmarkUnary(b *testing.B) {
	for _, mode := range []string{"off", "traced", "unsampled"} {
		b.Run(mode, func(b *testing.B) {
			var so *rpc.ServerOptions
			var co *rpc.ClientOptions
			addr := "unix://" + filepath.Join(b.TempDir(), "b.sock")
			if mode != "off" {
				sampler := sdktrace.AlwaysSample()
				if mode == "unsampled" {
					sampler = sdktrace.NeverSample()
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sampler)),
					sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer tp.Shutdown(context.Background())
				opts := []otelwarren.Option{otelwarren.WithTracerProvider(tp), otelwarren.WithMeterProvider(mp),
					otelwarren.WithPropagators(propagation.TraceContext{})}
				so = otelwarren.Server(nil, opts...)
				u, s := otelwarren.ClientInterceptors(addr, opts...)
				co = &rpc.ClientOptions{Interceptors: []rpc.UnaryClientInterceptor{u}, StreamInterceptors: []rpc.StreamClientInterceptor{s}}
			}
			if so == nil {
				so = new(rpc.ServerOptions)
			}
			so.Logger = slog.New(slog.DiscardHandler) // no line of its own amid the results
			srv := rpc.NewServer(so)
			rpc.HandleRaw(srv, "Bench.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
			l, err := transport.Listen(addr, nil)
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(l)
			defer srv.Close()
			c, err := rpc.Dial(addr, co)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			req, reply := make([]byte, 1024), make([]byte, 0, 1024)
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(len(req)))
			b.ResetTimer()
			for range b.N {
				if err := c.Invoke(ctx, "Bench.Echo", req, &reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
