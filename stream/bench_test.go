package stream

import (
	"io"
	"strings"
	"testing"

	"github.com/warrenipc/warren/codec"
)

var benchSizes = []struct {
	name string
	size int
}{
	{"1KiB", 1 << 10},
	{"1MiB", 1 << 20},
}

// benchPair returns two Streams over a Unix socket.
func benchPair(b *testing.B) (*Stream, *Stream) {
	return newPair(b, unixPair, nil, nil)
}

// BenchmarkRawOneWay sends raw messages one way over a Unix socket: a writer
// goroutine against the reading benchmark loop.
func BenchmarkRawOneWay(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			a, r := benchPair(b)
			msg := make([]byte, bs.size)
			buf := make([]byte, 0, bs.size)
			done := make(chan error, 1)
			b.SetBytes(int64(bs.size))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for range b.N {
					if err := a.WriteBytes(msg); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				var err error
				if buf, err = r.ReadBytes(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRawEcho sends a raw message and waits for it to come back.
func BenchmarkRawEcho(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			c, srv := benchPair(b)
			echoed := make(chan struct{})
			go func() {
				defer close(echoed)
				buf := make([]byte, 0, bs.size)
				for {
					var err error
					if buf, err = srv.ReadBytes(buf); err != nil {
						return
					}
					if srv.WriteBytes(buf) != nil {
						return
					}
				}
			}()
			msg := make([]byte, bs.size)
			buf := make([]byte, 0, bs.size)
			b.SetBytes(int64(bs.size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := c.WriteBytes(msg); err != nil {
					b.Fatal(err)
				}
				var err error
				if buf, err = c.ReadBytes(buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c.CloseWrite()
			<-echoed
		})
	}
}

// benchRecord encodes to about 1 KiB of JSON.
type benchRecord struct {
	ID      int64             `json:"id"`
	Name    string            `json:"name"`
	Email   string            `json:"email"`
	Active  bool              `json:"active"`
	Score   float64           `json:"score"`
	Tags    []string          `json:"tags"`
	Labels  map[string]string `json:"labels"`
	Comment string            `json:"comment"`
}

func newBenchRecord() benchRecord {
	return benchRecord{
		ID: 1234567, Name: "warren stream", Email: "someone@example.com", Active: true, Score: 98.6,
		Tags:    []string{"alpha", "beta", "gamma", "delta"},
		Labels:  map[string]string{"region": "local", "tier": "gold", "owner": "ops"},
		Comment: strings.Repeat("lorem ipsum dolor sit amet ", 30),
	}
}

// BenchmarkJSON sends a 1 KiB JSON struct one way with Write and Read.
func BenchmarkJSON(b *testing.B) {
	b.Run("1KiB", func(b *testing.B) {
		a, r := benchPair(b)
		rec := newBenchRecord()
		n, err := codecSize(rec)
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		b.SetBytes(int64(n))
		b.ReportAllocs()
		b.ResetTimer()
		go func() {
			for range b.N {
				if err := a.Write(&rec); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for range b.N {
			var got benchRecord
			if err := r.Read(&got); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

func codecSize(v any) (int, error) {
	b, err := codec.JSON.Append(nil, v)
	return len(b), err
}

// BenchmarkBaselineUDS is the reference for BenchmarkRawOneWay: the same
// bytes written and read on a bare Unix socket, without framing.
func BenchmarkBaselineUDS(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			w, r := unixPair(b)
			msg := make([]byte, bs.size)
			buf := make([]byte, bs.size)
			done := make(chan error, 1)
			b.SetBytes(int64(bs.size))
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for range b.N {
					if _, err := w.Write(msg); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				if _, err := io.ReadFull(r, buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
