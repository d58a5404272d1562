package main

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	counter "github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

// BenchmarkDemoHTTP is the demo's http row on one caller: Counter.Inc over
// HTTP (Connect, JSON) with the demo's client, server in this process, so
// allocs/op are client and server together, as the demo counts them:
//
//	go test ./cmd/warren -run '^$' -bench DemoHTTP -benchmem
func BenchmarkDemoHTTP(b *testing.B) {
	path := filepath.Join(b.TempDir(), "d.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	srv := rpc.NewServer(nil)
	store := counter.New()
	store.Register(srv)
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { store.Shutdown(); srv.Close(); <-done }()
	d := &demo{http: rpc.HTTPClient("unix://"+path, nil)}
	defer d.http.CloseIdleConnections()
	ctx := context.Background()
	if _, err := httpCall(ctx, d.http, "Counter.Set", []byte(`{"name":"demo"}`)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := d.httpInc(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
