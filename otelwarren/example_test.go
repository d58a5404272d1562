package otelwarren_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/warrenipc/warren/otelwarren"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// A server and a client that trace every call; the server's span continues
// the client's trace. A program would export the spans (OTLP, say) and set
// the global providers instead of passing them.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	opts := []otelwarren.Option{otelwarren.WithTracerProvider(tp),
		otelwarren.WithPropagators(propagation.TraceContext{})}

	srv := rpc.NewServer(otelwarren.Server(&rpc.ServerOptions{}, opts...))
	rpc.HandleRaw(srv, "Echo.Say", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	dir, _ := os.MkdirTemp("", "warren-example")
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "echo.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	client, err := otelwarren.Dial(addr, nil, opts...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	var reply []byte
	if err := client.Invoke(context.Background(), "Echo.Say", []byte("hi"), &reply); err != nil {
		log.Fatal(err)
	}
	for _, s := range spans.Ended() {
		fmt.Println(s.SpanKind(), s.Name(), s.SpanContext().TraceID() == spans.Ended()[0].SpanContext().TraceID())
	}
	// Output:
	// server Echo/Say true
	// client Echo/Say true
}
