package frameio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/warrenipc/warren/wire"

	"github.com/warrenipc/warren/internal/testutil"
)

type testFrame struct {
	h wire.Header
	p string
}

func sampleFrames() []testFrame {
	return []testFrame{
		{wire.Header{Stream: 1, Type: wire.TypeHeaders}, "\x02/m\x00\x00"},
		{wire.Header{Stream: 1, Type: wire.TypeData, Flags: wire.FlagEnd}, "hello"},
		{wire.Header{Type: wire.TypePing}, "12345678"},
		{wire.Header{Stream: 1, Type: wire.TypeData}, strings.Repeat("x", 3000)},
		{wire.Header{Stream: 3, Type: wire.TypeCancel}, ""},
		{wire.Header{Type: wire.TypeWindow}, "\x00\x00\x10\x00"},
	}
}

func encodeFrames(fs []testFrame) []byte {
	var b []byte
	for _, f := range fs {
		b = wire.AppendFrame(b, f.h.Stream, f.h.Type, f.h.Flags, []byte(f.p))
	}
	return b
}

func readAll(t *testing.T, r *Reader, want []testFrame) {
	t.Helper()
	for i, f := range want {
		h, p, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		f.h.Length = uint32(len(f.p))
		if h != f.h || string(p) != f.p {
			t.Fatalf("frame %d: %v %.20q, want %v %.20q", i, h, p, f.h, f.p)
		}
	}
	if h, p, err := r.Next(); err != io.EOF {
		t.Fatalf("after the frames: %v %q %v, want io.EOF", h, p, err)
	}
}

func TestReader(t *testing.T) {
	fs := sampleFrames()
	b := encodeFrames(fs)
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+err": iotest.DataErrReader,
	} {
		t.Run(name, func(t *testing.T) {
			readAll(t, NewReader(wrap(bytes.NewReader(b)), wire.DefaultMaxFrameSize), fs)
		})
	}
}

func TestReaderSmallBufferCompacts(t *testing.T) {
	// Many frames that straddle the 4 KiB buffer's end.
	var fs []testFrame
	for i := range 200 {
		fs = append(fs, testFrame{wire.Header{Stream: 1, Type: wire.TypeData}, strings.Repeat(string(rune('a'+i%26)), 1+i*37%1500)})
	}
	r := NewReader(iotest.HalfReader(bytes.NewReader(encodeFrames(fs))), 2000)
	if len(r.buf) != minBufferSize {
		t.Fatalf("buffer %d, want %d", len(r.buf), minBufferSize)
	}
	readAll(t, r, fs)
	if len(r.buf) != minBufferSize {
		t.Fatalf("buffer grew to %d", len(r.buf))
	}
}

func TestReaderGrows(t *testing.T) {
	big := strings.Repeat("b", 300<<10)
	fs := []testFrame{
		{wire.Header{Stream: 1, Type: wire.TypeData}, "small"},
		{wire.Header{Stream: 1, Type: wire.TypeData}, big},
		{wire.Header{Stream: 1, Type: wire.TypeData}, big[:100<<10]},
		{wire.Header{Stream: 1, Type: wire.TypeData}, "small"},
	}
	r := NewReader(bytes.NewReader(encodeFrames(fs)), 1<<20)
	if len(r.buf) != DefaultBufferSize {
		t.Fatalf("initial buffer %d", len(r.buf))
	}
	readAll(t, r, fs)
	if len(r.buf) < wire.HeaderSize+len(big) || len(r.buf) > wire.HeaderSize+1<<20 {
		t.Fatalf("buffer %d after a %d-byte frame", len(r.buf), len(big))
	}
	// A run of small frames shrinks the buffer back.
	var burst []testFrame
	burst = append(burst, fs[1])
	for range shrinkAfter + 1 {
		burst = append(burst, fs[0])
	}
	r = NewReader(bytes.NewReader(encodeFrames(burst)), 1<<20)
	readAll(t, r, burst)
	if len(r.buf) != DefaultBufferSize {
		t.Fatalf("buffer %d after a run of small frames", len(r.buf))
	}
	// Growth never goes past the largest frame allowed.
	r = NewReader(bytes.NewReader(encodeFrames(fs[1:2])), uint32(len(big)))
	readAll(t, r, fs[1:2])
	if len(r.buf) != wire.HeaderSize+len(big) {
		t.Fatalf("buffer %d, want %d", len(r.buf), wire.HeaderSize+len(big))
	}
}

func TestReaderBadHeader(t *testing.T) {
	// The bad header is reported before its payload is read: the reader
	// holds only the header.
	b := wire.AppendHeader(nil, wire.Header{Length: 5000, Stream: 1, Type: wire.TypeData})
	r := NewReader(&testutil.ChunkReader{T: t, Chunks: []string{string(b)}}, 4096)
	for range 2 {
		h, p, err := r.Next()
		var e *wire.FrameTooLargeError
		if !errors.As(err, &e) || h.Length != 5000 || p != nil {
			t.Fatalf("%v %v %v", h, p, err)
		}
	}
	b = wire.AppendFrame(nil, 1, wire.TypeData, 0, []byte("ok"))
	b = wire.AppendHeader(b, wire.Header{Stream: 0, Type: wire.TypeData})
	r = NewReader(bytes.NewReader(b), 4096)
	if _, p, err := r.Next(); err != nil || string(p) != "ok" {
		t.Fatal(p, err)
	}
	var fe *wire.FrameError
	if _, _, err := r.Next(); !errors.As(err, &fe) {
		t.Fatal(err)
	}
}

func TestReaderEOF(t *testing.T) {
	b := encodeFrames(sampleFrames()[:2])
	r := NewReader(bytes.NewReader(nil), 1024)
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
	for _, cut := range []int{1, wire.HeaderSize - 1, wire.HeaderSize, wire.HeaderSize + 2, len(b) - 1} {
		r := NewReader(bytes.NewReader(b[:cut]), 1024)
		var err error
		for err == nil {
			_, _, err = r.Next()
		}
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v", cut, err)
		}
	}
	boom := errors.New("boom")
	r = NewReader(io.MultiReader(bytes.NewReader(b), iotest.ErrReader(boom)), 1024)
	r.Next()
	r.Next()
	if _, _, err := r.Next(); err != boom {
		t.Fatalf("read error: %v", err)
	}
	r = NewReader(testutil.EmptyReader{}, 1024)
	if _, _, err := r.Next(); err != io.ErrNoProgress {
		t.Fatalf("no progress: %v", err)
	}
	r = NewReader(negReader{}, 1024)
	if _, _, err := r.Next(); err == nil {
		t.Fatal("negative count accepted")
	}
}

type negReader struct{}

func (negReader) Read([]byte) (int, error) { return -1, nil }

// TestReaderTimeoutResumes checks that a read error (a deadline, say) in the
// middle of a frame leaves the Reader able to continue.
func TestReaderTimeoutResumes(t *testing.T) {
	b := encodeFrames(sampleFrames())
	r := NewReader(iotest.TimeoutReader(bytes.NewReader(b[:7])), wire.DefaultMaxFrameSize)
	if _, _, err := r.Next(); err != iotest.ErrTimeout {
		t.Fatalf("%v", err)
	}
	if r.Buffered() != 7 {
		t.Fatalf("buffered %d", r.Buffered())
	}
	r.rd = bytes.NewReader(b[7:])
	readAll(t, r, sampleFrames())
}

func TestReaderBufferedAndReset(t *testing.T) {
	b := encodeFrames(sampleFrames())
	r := NewReader(bytes.NewReader(b), wire.DefaultMaxFrameSize)
	if r.Buffered() != 0 {
		t.Fatal("buffered before reading")
	}
	h, _, _ := r.Next()
	if r.Buffered() != len(b)-wire.HeaderSize-int(h.Length) {
		t.Fatalf("Buffered %d", r.Buffered())
	}
	r.Reset(bytes.NewReader(b))
	if r.Buffered() != 0 {
		t.Fatal("Reset kept bytes")
	}
	readAll(t, r, sampleFrames())
}

func TestReaderAllocs(t *testing.T) {
	frame := wire.AppendFrame(nil, 1, wire.TypeData, 0, make([]byte, 1024))
	src := &repeatReader{b: bytes.Repeat(frame, 10)}
	r := NewReader(src, wire.DefaultMaxFrameSize)
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// repeatReader returns b over and over.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

// recorder records each Write call.
type recorder struct {
	writes [][]byte
	err    error
	short  bool
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.writes = append(w.writes, bytes.Clone(p))
	if w.short {
		return len(p) - 1, nil
	}
	return len(p), nil
}

func (w *recorder) all() []byte { return bytes.Join(w.writes, nil) }

func TestWriter(t *testing.T) {
	fs := sampleFrames()
	var rec recorder
	w := NewWriter(&rec, 0)
	if cap(w.buf) != DefaultBufferSize {
		t.Fatalf("default size %d", cap(w.buf))
	}
	for _, f := range fs {
		if err := w.WriteFrame(f.h.Stream, f.h.Type, f.h.Flags, []byte(f.p)); err != nil {
			t.Fatal(err)
		}
	}
	want := encodeFrames(fs)
	if len(rec.writes) != 0 || w.Buffered() != len(want) {
		t.Fatalf("wrote before Flush: %d writes, %d buffered", len(rec.writes), w.Buffered())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(rec.writes) != 1 || !bytes.Equal(rec.all(), want) || w.Buffered() != 0 {
		t.Fatalf("%d writes", len(rec.writes))
	}
	if err := w.Flush(); err != nil || len(rec.writes) != 1 {
		t.Fatal("empty Flush wrote")
	}
}

func TestWriterFullAndLarge(t *testing.T) {
	var rec recorder
	w := NewWriter(&rec, 100) // raised to 4 KiB
	if cap(w.buf) != minBufferSize {
		t.Fatalf("size %d", cap(w.buf))
	}
	small := bytes.Repeat([]byte{1}, 1200)
	large := bytes.Repeat([]byte{2}, 3000)
	huge := bytes.Repeat([]byte{3}, 10000)
	var want []byte
	write := func(p []byte) {
		t.Helper()
		if err := w.WriteFrame(1, wire.TypeData, 0, p); err != nil {
			t.Fatal(err)
		}
		want = wire.AppendFrame(want, 1, wire.TypeData, 0, p)
	}
	write(small)
	write(small)
	write(small)
	write(small) // does not fit: flushes the first three
	if len(rec.writes) != 1 || len(rec.writes[0]) != 3*(wire.HeaderSize+1200) {
		t.Fatalf("writes %d", len(rec.writes))
	}
	write(large) // large: buffer, header and payload go out together
	if len(rec.writes) != 3 || !bytes.Equal(rec.writes[2], large) || w.Buffered() != 0 {
		t.Fatalf("large: %d writes, %d buffered", len(rec.writes), w.Buffered())
	}
	write(huge)
	if len(rec.writes) != 5 || !bytes.Equal(rec.writes[4], huge) {
		t.Fatal("huge payload was copied")
	}
	// A large payload when not even its header fits in the buffer.
	write(small)
	write(small)
	write(small)
	write(make([]byte, 4096-3*(wire.HeaderSize+1200)-wire.HeaderSize))
	if w.Buffered() != 4096 {
		t.Fatalf("buffered %d", w.Buffered())
	}
	write(large)
	if len(rec.writes) != 8 || len(rec.writes[5]) != 4096 || len(rec.writes[6]) != wire.HeaderSize {
		t.Fatalf("%d writes", len(rec.writes))
	}
	write(small)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.all(), want) {
		t.Fatal("bytes written differ")
	}
}

func TestWriterVectored(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(c2)
		got <- b
	}()
	w := NewWriter(c1, 4096)
	msg := bytes.Repeat([]byte("vector"), 5000)
	w.WriteFrame(1, wire.TypeHeaders, 0, []byte("h"))
	if err := w.WriteMessage(1, wire.TypeData, wire.FlagEnd, msg, 16384); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	want := wire.AppendFrame(nil, 1, wire.TypeHeaders, 0, []byte("h"))
	want = wire.AppendMessage(want, 1, wire.TypeData, wire.FlagEnd, msg, 16384)
	if !bytes.Equal(<-got, want) {
		t.Fatal("bytes differ")
	}
}

func TestWriterErrors(t *testing.T) {
	boom := errors.New("boom")
	rec := &recorder{err: boom}
	w := NewWriter(rec, 4096)
	if err := w.WriteFrame(1, wire.TypeData, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != boom {
		t.Fatal(err)
	}
	// Sticky.
	rec.err = nil
	if err := w.WriteFrame(1, wire.TypeData, 0, []byte("x")); err != boom {
		t.Fatal(err)
	}
	if err := w.Flush(); err != boom {
		t.Fatal(err)
	}
	if n, err := w.WriteChunk(&Chunker{}, 10); err != boom || n != 0 {
		t.Fatal(n, err)
	}
	if err := w.WriteMessage(1, wire.TypeData, 0, []byte("x"), 1024); err != boom {
		t.Fatal(err)
	}
	w.Reset(rec)
	if err := w.WriteFrame(1, wire.TypeData, 0, []byte("x")); err != nil || w.Flush() != nil {
		t.Fatal("Reset kept the error")
	}
	// Short writes.
	rec.short = true
	w.WriteFrame(1, wire.TypeData, 0, []byte("x"))
	if err := w.Flush(); err != io.ErrShortWrite {
		t.Fatal(err)
	}
	w.Reset(rec)
	if err := w.WriteFrame(1, wire.TypeData, 0, make([]byte, 5000)); err != io.ErrShortWrite {
		t.Fatal(err)
	}
	// Errors while making room.
	rec.short, rec.err = false, nil
	w.Reset(rec)
	w.WriteFrame(1, wire.TypeData, 0, make([]byte, 3000))
	rec.err = boom
	if err := w.WriteFrame(1, wire.TypeData, 0, make([]byte, 1500)); err != boom {
		t.Fatal("small path:", err)
	}
	rec.err = nil
	w.Reset(rec)
	w.WriteFrame(1, wire.TypeData, 0, make([]byte, 4080))
	rec.err = boom
	if err := w.WriteFrame(1, wire.TypeData, 0, make([]byte, 3000)); err != boom {
		t.Fatal("large path:", err)
	}
	// An error mid-message stops it.
	rec.err = nil
	w.Reset(rec)
	rec.err = boom
	if err := w.WriteMessage(1, wire.TypeData, 0, make([]byte, 20000), 4096); err != boom {
		t.Fatal(err)
	}
}

func TestWriterChunkAndMessage(t *testing.T) {
	var rec recorder
	w := NewWriter(&rec, 4096)
	msg := bytes.Repeat([]byte("0123456789"), 2000)
	if err := w.WriteMessage(7, wire.TypeData, wire.FlagEnd, msg, 5000); err != nil {
		t.Fatal(err)
	}
	var c Chunker
	c.Reset(9, wire.TypeData, 0, msg[:100])
	if n, err := w.WriteChunk(&c, 4); n != -1 || err != nil {
		t.Fatal(n, err)
	}
	for _, max := range []uint32{50, 1, 1000} {
		if n, err := w.WriteChunk(&c, max); err != nil || n <= 0 || uint32(n) > max {
			t.Fatal(n, err)
		}
	}
	if !c.Done() {
		t.Fatal("not done")
	}
	w.Flush()
	want := wire.AppendMessage(nil, 7, wire.TypeData, wire.FlagEnd, msg, 5000)
	c.Reset(9, wire.TypeData, 0, msg[:100])
	for _, max := range []uint32{50, 1, 1000} {
		want, _ = c.AppendNext(want, max)
	}
	if !bytes.Equal(rec.all(), want) {
		t.Fatal("WriteMessage/WriteChunk differ from AppendMessage/AppendNext")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a tiny maxFrame")
		}
	}()
	w.WriteMessage(1, wire.TypeData, 0, msg, 4)
}

func TestWriterAllocs(t *testing.T) {
	w := NewWriter(io.Discard, 0)
	p := make([]byte, 1024)
	big := make([]byte, 1<<20)
	if n := testing.AllocsPerRun(100, func() {
		w.WriteFrame(1, wire.TypeData, 0, p)
		w.WriteMessage(1, wire.TypeData, wire.FlagEnd, big, wire.DefaultMaxFrameSize)
		w.Flush()
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// TestPipeRoundTrip runs a Writer and a Reader against each other over
// net.Pipe, which has no buffering.
func TestPipeRoundTrip(t *testing.T) {
	c1, c2 := net.Pipe()
	fs := sampleFrames()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c1.Close()
		w := NewWriter(c1, 0)
		for range 50 {
			for _, f := range fs {
				if err := w.WriteFrame(f.h.Stream, f.h.Type, f.h.Flags, []byte(f.p)); err != nil {
					t.Error(err)
					return
				}
			}
			if err := w.Flush(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	r := NewReader(c2, wire.DefaultMaxFrameSize)
	var all []testFrame
	for range 50 {
		all = append(all, fs...)
	}
	readAll(t, r, all)
	c2.Close()
	wg.Wait()
}

// TestReaderNextInto reads large DATA payloads in place, mixed with frames
// that go through the buffer, over readers that return few bytes at a time.
func TestReaderNextInto(t *testing.T) {
	big := func(c byte, n int) string { return strings.Repeat(string(c), n) }
	fs := []testFrame{
		{wire.Header{Stream: 1, Type: wire.TypeData, Flags: wire.FlagMore}, big('a', 40000)},
		{wire.Header{Stream: 1, Type: wire.TypeData, Flags: wire.FlagMore}, big('b', 65536)},
		{wire.Header{Type: wire.TypePing}, "12345678"},
		{wire.Header{Stream: 1, Type: wire.TypeData}, big('c', 20000)},
		{wire.Header{Stream: 3, Type: wire.TypeData}, "small"},
		{wire.Header{Stream: 1, Type: wire.TypeData}, big('d', 30000)},
	}
	b := encodeFrames(fs)
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+err": iotest.DataErrReader,
	} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(wrap(bytes.NewReader(b)), wire.DefaultMaxFrameSize)
			var inPlace int
			for i, f := range fs {
				var dst []byte
				h, p, err := r.NextInto(func(h wire.Header, head []byte) ([]byte, int) {
					if h.Type != wire.TypeData || h.Length < 1000 {
						return nil, 0
					}
					dst = make([]byte, h.Length)
					return dst, 0
				})
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				f.h.Length = uint32(len(f.p))
				if h != f.h || string(p) != f.p {
					t.Fatalf("frame %d: %v %.20q, want %v %.20q", i, h, p, f.h, f.p)
				}
				if dst != nil && len(p) > 0 && &p[0] == &dst[0] {
					inPlace++
				}
			}
			if _, _, err := r.Next(); err != io.EOF {
				t.Fatalf("after the frames: %v, want io.EOF", err)
			}
			// A frame that arrived whole in the buffer is returned from
			// there; the second one (64 KiB) cannot have.
			if inPlace < 1 {
				t.Fatalf("no payload read in place")
			}
		})
	}
	// A connection that ends inside an in-place payload.
	r := NewReader(bytes.NewReader(b[:wire.HeaderSize+100]), wire.DefaultMaxFrameSize)
	_, _, err := r.NextInto(func(h wire.Header, _ []byte) ([]byte, int) { return make([]byte, h.Length), 0 })
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated in-place payload: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestReaderNextIntoPeek reads chunked messages as a session does: the
// first frame's length prefix is peeked at, skipped, and the rest of every
// frame read in place into one message buffer, whether the frames arrive
// whole, a byte at a time, or after a read that stopped at a header.
func TestReaderNextIntoPeek(t *testing.T) {
	msg := make([]byte, 300000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	var b []byte
	b = wire.AppendFrame(b, 0, wire.TypePing, 0, []byte("12345678"))
	b = wire.AppendMessage(b, 1, wire.TypeData, 0, msg, 100000)   // 4 frames, the first with the prefix
	b = wire.AppendMessage(b, 3, wire.TypeData, 0, msg[:5], 1024) // small: through the buffer
	b = wire.AppendMessage(b, 1, wire.TypeData, 0, msg[:70000], 1<<20)
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+err": iotest.DataErrReader,
	} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(wrap(bytes.NewReader(b)), 1<<20)
			var asm []byte // the message being assembled in place
			var n int
			var got [][]byte
			var peeks int
			into := func(h wire.Header, head []byte) ([]byte, int) {
				if h.Type != wire.TypeData || h.Length < 1000 {
					return nil, 0
				}
				if asm != nil {
					return asm[n : n+int(h.Length)], 0
				}
				if h.Flags&wire.FlagMore == 0 {
					asm, n = make([]byte, h.Length), 0
					return asm, 0
				}
				if len(head) < 4 {
					peeks++
					return nil, 4
				}
				asm, n = make([]byte, binary.BigEndian.Uint32(head)), 0
				return asm[:h.Length-4], 4
			}
			for {
				h, p, err := r.NextInto(into)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Type != wire.TypeData {
					continue
				}
				switch {
				case asm != nil && len(p) > 0 && &p[0] == &asm[n]:
					n += len(p)
				case asm != nil && h.Length >= 1000:
					t.Fatalf("%v: payload not read in place", h)
				case asm != nil: // small: through the buffer
					n += copy(asm[n:], p)
				case h.Flags&wire.FlagMore == 0:
					got = append(got, append([]byte(nil), p...))
					continue
				default: // a first frame that arrived whole
					asm = make([]byte, binary.BigEndian.Uint32(p))
					n = copy(asm, p[4:])
				}
				if h.Flags&wire.FlagMore == 0 {
					if n != len(asm) {
						t.Fatalf("message of %d bytes ends at %d", len(asm), n)
					}
					got = append(got, asm)
					asm = nil
				}
			}
			if len(got) != 3 || !bytes.Equal(got[0], msg) || !bytes.Equal(got[1], msg[:5]) || !bytes.Equal(got[2], msg[:70000]) {
				t.Fatalf("got %d messages, want the 3 sent", len(got))
			}
			if name == "one byte" && peeks == 0 {
				t.Fatal("the length prefix was never peeked at")
			}
		})
	}
}

// TestReaderNextIntoAfterSmallFrames reads replies as a client sees them
// under load: large DATA frames, each followed by small frames (trailers,
// credit). Over a connection that returns as much as is asked, every large
// payload after the first must reach Into with none of it read into the
// buffer, so that none of it is copied; after a run of small frames the
// Reader fills its buffer again.
func TestReaderNextIntoAfterSmallFrames(t *testing.T) {
	var b []byte
	for i := range 5 {
		b = wire.AppendFrame(b, uint32(2*i+1), wire.TypeData, 0, bytes.Repeat([]byte{byte(i)}, 40000))
		b = wire.AppendFrame(b, uint32(2*i+1), wire.TypeTrailers, wire.FlagEnd, []byte("trailer"))
		b = wire.AppendFrame(b, 0, wire.TypeWindow, 0, []byte{0, 1, 0, 0})
	}
	for range directRun + 1 {
		b = wire.AppendFrame(b, 0, wire.TypePing, 0, []byte("12345678"))
	}
	b = wire.AppendFrame(b, 1, wire.TypeData, 0, bytes.Repeat([]byte{9}, 100000))
	r := NewReader(bytes.NewReader(b), 1<<20)
	var heads []int
	for {
		_, _, err := r.NextInto(func(h wire.Header, head []byte) ([]byte, int) {
			if h.Type != wire.TypeData {
				return nil, 0
			}
			heads = append(heads, len(head))
			return make([]byte, h.Length), 0
		})
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The first frame arrives whole in the first read and the second in
	// part; the last comes after more small frames than directRun.
	if len(heads) != 5 || heads[0] == 0 || !slices.Equal(heads[1:4], []int{0, 0, 0}) || heads[4] == 0 {
		t.Fatalf("payload bytes buffered before each large frame read in place: %v, want [>0 0 0 0 >0]", heads)
	}
}
