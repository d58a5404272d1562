package wire

import (
	"bytes"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/testutil"
)

var benchSizes = []int{16, 1 << 10, 64 << 10}

func BenchmarkAppendFrame(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(testutil.SizeName(n), func(b *testing.B) {
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
		b.Run(testutil.SizeName(n), func(b *testing.B) {
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
		b.Run(testutil.SizeName(n), func(b *testing.B) {
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
