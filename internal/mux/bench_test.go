package mux_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// benchServerConfig answers each call with its request message, inline on
// the reader goroutine: OnRequest runs the handler with RunInline.
func benchServerConfig() *mux.Config {
	ctx := context.Background()
	handler := func(st *mux.Stream) {
		b, err := st.Recv(ctx)
		if err != nil {
			st.Refuse(codeInternal, "no request")
			return
		}
		st.Finish(ctx, mux.Reply{Msg: b.B, HasMsg: true, Code: codeOK})
		pool.Put(b)
	}
	return &mux.Config{
		OnStream:  func(*mux.Stream, *wire.CallHeader) {},
		OnRequest: func(st *mux.Stream) { st.RunInline(handler) },
	}
}

// benchCall makes one unary-style call: Open with the request and
// half-close, Recv the reply, Recv the end, Release.
func benchCall(ctx context.Context, c *mux.Session, msg []byte) error {
	st, err := c.Open(ctx, mux.Call{Method: "Bench.Echo", Msg: msg, End: true})
	if err != nil {
		return err
	}
	defer st.Release()
	b, err := st.Recv(ctx)
	if err != nil {
		return err
	}
	n := len(b.B)
	pool.Put(b)
	if n != len(msg) {
		return fmt.Errorf("reply of %d bytes, want %d", n, len(msg))
	}
	if _, err := st.Recv(ctx); err != io.EOF {
		return fmt.Errorf("after the reply: %v, want io.EOF", err)
	}
	return nil
}

var benchSizes = []int{128, 1 << 10, 16 << 10, 100 << 10}

// BenchmarkUnary measures sequential calls over a Unix socket pair, client
// and server in this process; allocs/op counts both sides.
func BenchmarkUnary(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			c, _ := newPair(b, connKind{"unix", socketPair}, nil, benchServerConfig())
			ctx := context.Background()
			msg := make([]byte, size)
			for range 100 { // warm the pools
				if err := benchCall(ctx, c, msg); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(2 * size))
			b.ReportAllocs()
			for b.Loop() {
				if err := benchCall(ctx, c, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnaryParallel measures 16 concurrent callers on one session.
func BenchmarkUnaryParallel(b *testing.B) {
	for _, size := range benchSizes[:2] {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			c, _ := newPair(b, connKind{"unix", socketPair}, nil, benchServerConfig())
			ctx := context.Background()
			msg := make([]byte, size)
			b.SetBytes(int64(2 * size))
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := benchCall(ctx, c, msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkStream measures one-way streaming throughput of 1 MiB messages.
func BenchmarkStream(b *testing.B) {
	const size = 1 << 20
	ctx := context.Background()
	cfg := &mux.Config{OnStream: func(st *mux.Stream, _ *wire.CallHeader) {
		go func() {
			for {
				m, err := st.Recv(ctx)
				if err != nil {
					if err == io.EOF {
						st.Finish(ctx, mux.Reply{Code: codeOK})
					}
					return
				}
				pool.Put(m)
			}
		}()
	}}
	c, _ := newPair(b, connKind{"unix", socketPair}, nil, cfg)
	st, err := c.Open(ctx, mux.Call{Method: "Bench.Sink"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Release()
	msg := make([]byte, size)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		if err := st.Send(ctx, msg, false); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Send(ctx, nil, true); err != nil {
		b.Fatal(err)
	}
	if _, err := collect(ctx, st); err != nil {
		b.Fatal(err)
	}
}
