package rpc

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/warrenipc/warren/transport"
)

// BenchmarkUnaryListener compares a server given an ordinary
// *net.UnixListener with one given transport.Listen's listener, the client
// (rpc.Dial) being the same: both should read and write with raw system
// calls (internal/rawio).
//
//	go test ./rpc -run '^$' -bench UnaryListener -count 6
func BenchmarkUnaryListener(b *testing.B) {
	for _, kind := range []string{"net", "transport"} {
		for _, size := range []int{1 << 10, 100 << 10} {
			b.Run("listener="+kind+"/"+sizeName(size), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "bench.sock")
				var l net.Listener
				var err error
				if kind == "net" {
					l, err = net.Listen("unix", path)
				} else {
					l, err = transport.Listen("unix://"+path, nil)
				}
				if err != nil {
					b.Fatal(err)
				}
				srv := benchServer()
				done := make(chan struct{})
				go func() { srv.Serve(l); close(done) }()
				b.Cleanup(func() { srv.Close(); <-done })
				c, err := Dial("unix://"+path, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				req := make([]byte, size)
				var out []byte
				ctx := context.Background()
				if err := c.Invoke(ctx, "Bench.Echo", &req, &out); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := c.Invoke(ctx, "Bench.Echo", &req, &out); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
