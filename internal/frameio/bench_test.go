package frameio

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/wire"
)

var benchSizes = []int{16, 1 << 10, 64 << 10}

func BenchmarkWriter(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(testutil.SizeName(n), func(b *testing.B) {
			w := NewWriter(io.Discard, 0)
			p := make([]byte, n)
			b.ReportAllocs()
			b.SetBytes(int64(wire.HeaderSize + n))
			for b.Loop() {
				w.WriteFrame(1, wire.TypeData, 0, p)
			}
			w.Flush()
		})
	}
}

func BenchmarkReader(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(testutil.SizeName(n), func(b *testing.B) {
			frame := wire.AppendFrame(nil, 1, wire.TypeData, 0, make([]byte, n))
			r := NewReader(&repeatReader{b: bytes.Repeat(frame, 8)}, wire.DefaultMaxFrameSize)
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, _, err := r.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// echo serves frames back until the connection ends.
func echo(c net.Conn, done chan<- struct{}) {
	defer close(done)
	r := NewReader(c, wire.DefaultMaxFrameSize)
	w := NewWriter(c, 0)
	for {
		h, p, err := r.Next()
		if err != nil {
			return
		}
		if err := w.WriteFrame(h.Stream, h.Type, h.Flags, p); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// BenchmarkUnixRoundTrip sends a frame over a Unix socket and waits for the
// echo: one sequential round trip per iteration.
func BenchmarkUnixRoundTrip(b *testing.B) {
	for _, n := range []int{128, 1 << 10, 64 << 10} {
		b.Run(testutil.SizeName(n), func(b *testing.B) {
			client, server := testutil.UnixPair(b)
			done := make(chan struct{})
			go echo(server, done)
			defer func() {
				client.Close()
				<-done
				server.Close()
			}()
			r := NewReader(client, wire.DefaultMaxFrameSize)
			w := NewWriter(client, 0)
			p := make([]byte, n)
			b.ReportAllocs()
			b.SetBytes(int64(2 * (wire.HeaderSize + n)))
			for b.Loop() {
				if err := w.WriteFrame(1, wire.TypeData, wire.FlagEnd, p); err != nil {
					b.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
				if _, got, err := r.Next(); err != nil || len(got) != n {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnixRawPingPong is the floor for BenchmarkUnixRoundTrip: the same
// bytes echoed with bare Read and Write calls.
func BenchmarkUnixRawPingPong(b *testing.B) {
	for _, n := range []int{128, 1 << 10, 64 << 10} {
		b.Run(testutil.SizeName(n), func(b *testing.B) {
			client, server := testutil.UnixPair(b)
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, wire.HeaderSize+n)
				for {
					if _, err := io.ReadFull(server, buf); err != nil {
						return
					}
					if _, err := server.Write(buf); err != nil {
						return
					}
				}
			}()
			defer func() {
				client.Close()
				<-done
				server.Close()
			}()
			buf := make([]byte, wire.HeaderSize+n)
			b.ReportAllocs()
			b.SetBytes(int64(2 * (wire.HeaderSize + n)))
			for b.Loop() {
				if _, err := client.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(client, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnixStream streams 1 MiB messages one way over a Unix socket,
// chunked in 64 KiB frames and reassembled at the other end.
func BenchmarkUnixStream(b *testing.B) {
	const n = 1 << 20
	client, server := testutil.UnixPair(b)
	got := make(chan int)
	go func() {
		defer close(got)
		r := NewReader(server, wire.DefaultMaxFrameSize)
		var a wire.Assembler
		for {
			h, p, err := r.Next()
			if err != nil {
				return
			}
			if _, done, err := a.Add(h, p); err != nil {
				return
			} else if done {
				got <- 1
			}
		}
	}()
	defer func() {
		client.Close()
		for range got {
		}
		server.Close()
	}()
	w := NewWriter(client, 0)
	msg := make([]byte, n)
	b.ReportAllocs()
	b.SetBytes(n)
	for b.Loop() {
		if err := w.WriteMessage(1, wire.TypeData, 0, msg, wire.DefaultMaxFrameSize); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		<-got
	}
}
