package wire

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

var benchSizes = []int{16, 1 << 10, 64 << 10}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("size=%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("size=%dKiB", n>>10)
	}
	return fmt.Sprintf("size=%dB", n)
}

func BenchmarkAppendFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			p := make([]byte, n)
			buf := make([]byte, 0, HeaderSize+n)
			b.ReportAllocs()
			b.SetBytes(int64(HeaderSize + n))
			for b.Loop() {
				buf = AppendFrame(buf[:0], 1, TypeData, FlagEnd, p)
			}
		})
	}
}

func BenchmarkParseFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			frame := AppendFrame(nil, 1, TypeData, FlagEnd, make([]byte, n))
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if _, _, _, ok, err := ParseFrame(frame, DefaultMaxFrameSize); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

var benchMD = []string{"trace-id", "4bf92f3577b34da6a3ce929d0e0e4736", "tenant", "acme"}

func BenchmarkCallHeader(b *testing.B) {
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, 256)
		b.ReportAllocs()
		b.SetBytes(int64(len(AppendCallHeader(nil, "Counter.Inc", 1, time.Second, benchMD))))
		for b.Loop() {
			buf = AppendCallHeader(buf[:0], "Counter.Inc", 1, time.Second, benchMD)
		}
	})
	b.Run("parse", func(b *testing.B) {
		p := AppendCallHeader(nil, "Counter.Inc", 1, time.Second, benchMD)
		b.ReportAllocs()
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			h, err := ParseCallHeader(p)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			RangeMetadata(h.Metadata, func(k, v []byte) bool { n += len(k) + len(v); return true })
		}
	})
}

func BenchmarkTrailer(b *testing.B) {
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, 256)
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendTrailer(buf[:0], 5, "counter not found", nil, benchMD)
		}
	})
	b.Run("parse", func(b *testing.B) {
		p := AppendTrailer(nil, 5, "counter not found", nil, benchMD)
		b.ReportAllocs()
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			if _, err := ParseTrailer(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAssembler reassembles a 1 MiB message sent in 64 KiB frames.
func BenchmarkAssembler(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20} {
		b.Run(sizeName(n), func(b *testing.B) {
			msg := bytes.Repeat([]byte("x"), n)
			frames := AppendMessage(nil, 1, TypeData, FlagEnd, msg, DefaultMaxFrameSize)
			var hs []Header
			var ps [][]byte
			for rest := frames; len(rest) > 0; {
				var h Header
				var p []byte
				rest, h, p, _, _ = ParseFrame(rest, DefaultMaxFrameSize)
				hs, ps = append(hs, h), append(ps, p)
			}
			var a Assembler
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				for i, h := range hs {
					if _, _, err := a.Add(h, ps[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func BenchmarkAppendMessage(b *testing.B) {
	msg := make([]byte, 1<<20)
	buf := make([]byte, 0, 2<<20)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		buf = AppendMessage(buf[:0], 1, TypeData, FlagEnd, msg, DefaultMaxFrameSize)
	}
}

func BenchmarkWriter(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			w := NewWriter(io.Discard, 0)
			p := make([]byte, n)
			b.ReportAllocs()
			b.SetBytes(int64(HeaderSize + n))
			for b.Loop() {
				w.WriteFrame(1, TypeData, 0, p)
			}
			w.Flush()
		})
	}
}

func BenchmarkReader(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			frame := AppendFrame(nil, 1, TypeData, 0, make([]byte, n))
			r := NewReader(&repeatReader{b: bytes.Repeat(frame, 8)}, DefaultMaxFrameSize)
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

// unixPair returns both ends of a connected Unix domain socket.
func unixPair(b *testing.B) (client, server net.Conn) {
	b.Helper()
	l, err := net.Listen("unix", filepath.Join(b.TempDir(), "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err = net.Dial("unix", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		b.Fatal("accept failed")
	}
	return client, server
}

// echo serves frames back until the connection ends.
func echo(c net.Conn, done chan<- struct{}) {
	defer close(done)
	r := NewReader(c, DefaultMaxFrameSize)
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
		b.Run(sizeName(n), func(b *testing.B) {
			client, server := unixPair(b)
			done := make(chan struct{})
			go echo(server, done)
			defer func() {
				client.Close()
				<-done
				server.Close()
			}()
			r := NewReader(client, DefaultMaxFrameSize)
			w := NewWriter(client, 0)
			p := make([]byte, n)
			b.ReportAllocs()
			b.SetBytes(int64(2 * (HeaderSize + n)))
			for b.Loop() {
				if err := w.WriteFrame(1, TypeData, FlagEnd, p); err != nil {
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
		b.Run(sizeName(n), func(b *testing.B) {
			client, server := unixPair(b)
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, HeaderSize+n)
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
			buf := make([]byte, HeaderSize+n)
			b.ReportAllocs()
			b.SetBytes(int64(2 * (HeaderSize + n)))
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
	client, server := unixPair(b)
	got := make(chan int)
	go func() {
		defer close(got)
		r := NewReader(server, DefaultMaxFrameSize)
		var a Assembler
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
		if err := w.WriteMessage(1, TypeData, 0, msg, DefaultMaxFrameSize); err != nil {
			b.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		<-got
	}
}
