package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCheckMessageSize(t *testing.T) {
	for _, tt := range []struct {
		n     int
		limit uint32
		ok    bool
	}{
		{0, 1, true}, {10, 10, true}, {11, 10, false}, {-1, 10, false},
		{DefaultMaxMessageSize, 0, true}, {DefaultMaxMessageSize + 1, 0, false},
		{1 << 40, 0xffffffff, false},
	} {
		err := CheckMessageSize(tt.n, tt.limit)
		if (err == nil) != tt.ok {
			t.Errorf("CheckMessageSize(%d, %d) = %v", tt.n, tt.limit, err)
		}
		var e *MessageTooLargeError
		if err != nil && (!errors.As(err, &e) || e.Size != int64(tt.n) || e.Limit < int64(tt.limit)) {
			t.Errorf("CheckMessageSize(%d, %d): %#v", tt.n, tt.limit, err)
		}
	}
}

// splitFrames parses b into frames; it fails the test on anything left over.
func splitFrames(t *testing.T, b []byte) (hs []Header, ps [][]byte) {
	t.Helper()
	for len(b) > 0 {
		rest, h, p, ok, err := ParseFrame(b, 1<<30)
		if err != nil || !ok {
			t.Fatalf("ParseFrame: ok=%v err=%v", ok, err)
		}
		hs, ps, b = append(hs, h), append(ps, p), rest
	}
	return hs, ps
}

func TestAppendMessage(t *testing.T) {
	msg := []byte(strings.Repeat("0123456789", 10)) // 100 bytes
	for _, max := range []uint32{5, 6, 7, 16, 99, 100, 101, 1 << 20} {
		b := AppendMessage([]byte("x"), 3, TypeData, FlagEnd|FlagMore|FlagAck, msg, max)
		hs, ps := splitFrames(t, b[1:])
		if max >= 100 {
			if len(hs) != 1 || hs[0].Flags != FlagEnd|FlagAck || !bytes.Equal(ps[0], msg) {
				t.Fatalf("max %d: %v", max, hs)
			}
			continue
		}
		var got []byte
		for i, h := range hs {
			if h.Stream != 3 || h.Type != TypeData || h.Length > max {
				t.Fatalf("max %d frame %d: %v", max, i, h)
			}
			last := i == len(hs)-1
			want := FlagMore | FlagAck
			if last {
				want = FlagEnd | FlagAck
			}
			if h.Flags != want {
				t.Fatalf("max %d frame %d: flags %#x, want %#x", max, i, h.Flags, want)
			}
			p := ps[i]
			if i == 0 {
				if binary.BigEndian.Uint32(p) != 100 || h.Length != max {
					t.Fatalf("max %d: first frame %v %x", max, h, p)
				}
				p = p[4:]
			} else if !last && h.Length != max {
				t.Fatalf("max %d frame %d: not full (%d)", max, i, h.Length)
			}
			got = append(got, p...)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("max %d: reassembled %q", max, got)
		}
	}
	// An empty message is one empty frame.
	hs, ps := splitFrames(t, AppendMessage(nil, 1, TypeData, FlagEnd, nil, 1024))
	if len(hs) != 1 || len(ps[0]) != 0 || hs[0].Flags != FlagEnd {
		t.Fatalf("empty message: %v", hs)
	}
}

func TestAppendMessageTooSmallPanics(t *testing.T) {
	for _, max := range []uint32{0, 1, 4} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("max %d: no panic", max)
				}
			}()
			AppendMessage(nil, 1, TypeData, 0, make([]byte, 10), max)
		}()
	}
	// A message that fits needs no room for the prefix.
	if b := AppendMessage(nil, 1, TypeData, 0, []byte("ab"), 2); len(b) != HeaderSize+2 {
		t.Fatalf("%x", b)
	}
}

func TestAssemblerSingleFrame(t *testing.T) {
	var a Assembler
	p := []byte("hello")
	msg, done, err := a.Add(Header{Length: 5, Stream: 1, Type: TypeData}, p)
	if err != nil || !done || &msg[0] != &p[0] {
		t.Fatalf("%q %v %v (must alias the payload)", msg, done, err)
	}
	if msg, done, err := a.Add(Header{Stream: 1, Type: TypeData, Flags: FlagEnd}, nil); err != nil || !done || len(msg) != 0 {
		t.Fatalf("empty: %q %v %v", msg, done, err)
	}
	a.Limit = 4
	_, done, err = a.Add(Header{Length: 5, Stream: 1, Type: TypeData}, p)
	var mtl *MessageTooLargeError
	if !errors.As(err, &mtl) || done || mtl.Size != 5 || mtl.Limit != 4 || a.InProgress() {
		t.Fatalf("over Limit: %v", err)
	}
}

// feed appends msg with AppendMessage and feeds its frames to a, returning
// the message delivered.
func feed(t *testing.T, a *Assembler, msg []byte, max uint32) []byte {
	t.Helper()
	hs, ps := splitFrames(t, AppendMessage(nil, 1, TypeData, 0, msg, max))
	for i, h := range hs {
		m, done, err := a.Add(h, ps[i])
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if done != (i == len(hs)-1) {
			t.Fatalf("frame %d of %d: done=%v", i, len(hs), done)
		}
		if i < len(hs)-1 && !a.InProgress() {
			t.Fatalf("frame %d: not in progress", i)
		}
		if done {
			return m
		}
	}
	return nil
}

func TestAssemblerChunked(t *testing.T) {
	var a Assembler
	big := bytes.Repeat([]byte("0123456789abcdef"), 1000)
	m := feed(t, &a, big, 1024)
	if !bytes.Equal(m, big) || a.InProgress() || cap(m) != len(m) {
		t.Fatal("reassembled message differs")
	}
	first := &m[0]
	// A smaller message reuses the buffer without allocating.
	small := big[:5000]
	frames := AppendMessage(nil, 1, TypeData, 0, small, 1024)
	hs, ps := splitFrames(t, frames)
	allocs := testing.AllocsPerRun(20, func() {
		for i, h := range hs {
			m, _, _ = a.Add(h, ps[i])
		}
	})
	if allocs != 0 || !bytes.Equal(m, small) || &m[0] != first {
		t.Fatalf("reuse: %v allocs, same buffer %v", allocs, &m[0] == first)
	}
	// A larger one allocates a new buffer of exactly the declared size.
	bigger := append(big, big...)
	if m := feed(t, &a, bigger, 4096); !bytes.Equal(m, bigger) || cap(a.buf) != len(bigger) {
		t.Fatalf("bigger: cap %d", cap(a.buf))
	}
	a.Release()
	if a.buf != nil {
		t.Fatal("Release kept the buffer")
	}
	if m := feed(t, &a, small, 1024); !bytes.Equal(m, small) {
		t.Fatal("after Release")
	}
}

func TestAssemblerTooLargeDiscards(t *testing.T) {
	a := Assembler{Limit: 100}
	hs, ps := splitFrames(t, AppendMessage(nil, 1, TypeData, FlagEnd, make([]byte, 101), 20))
	_, done, err := a.Add(hs[0], ps[0])
	var mtl *MessageTooLargeError
	if !errors.As(err, &mtl) || done || mtl.Size != 101 || mtl.Limit != 100 {
		t.Fatalf("first frame: %v", err)
	}
	if a.buf != nil {
		t.Fatal("allocated for a message over the limit")
	}
	for i := 1; i < len(hs); i++ {
		m, done, err := a.Add(hs[i], ps[i])
		if m != nil || done || err != nil {
			t.Fatalf("discarded frame %d: %q %v %v", i, m, done, err)
		}
		if a.InProgress() != (i < len(hs)-1) {
			t.Fatalf("frame %d: InProgress %v", i, a.InProgress())
		}
	}
	// The stream is in step: the next message arrives whole.
	msg := bytes.Repeat([]byte{9}, 100)
	if m := feed(t, &a, msg, 20); !bytes.Equal(m, msg) {
		t.Fatal("message after a discarded one")
	}
	// Discarding still checks that the frames add up.
	a.Add(hs[0], ps[0])
	if _, _, err := a.Add(hs[1], append(ps[1], make([]byte, 100)...)); err == nil {
		t.Fatal("discarding accepted more bytes than declared")
	}
}

func TestAssemblerErrors(t *testing.T) {
	first := func(total uint32, chunk string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, total), chunk...)
	}
	more := Header{Stream: 1, Type: TypeData, Flags: FlagMore}
	last := Header{Stream: 1, Type: TypeData}
	type step struct {
		h Header
		p []byte
	}
	tests := []struct {
		name   string
		steps  []step // all but the last must succeed without a message
		reason string
	}{
		{"first frame too short", []step{{more, []byte{0, 0, 1}}}, "first frame of a chunked message shorter than its length prefix"},
		{"end with more on the first frame", []step{{Header{Stream: 1, Type: TypeData, Flags: FlagMore | FlagEnd}, first(6, "abcd")}}, "FlagEnd on a frame with FlagMore"},
		{"end with more mid message", []step{{more, first(9, "abcd")}, {Header{Stream: 1, Type: TypeData, Flags: FlagMore | FlagEnd}, []byte("ef")}}, "FlagEnd on a frame with FlagMore"},
		{"declared equals first chunk", []step{{more, first(4, "abcd")}}, "declared message length not larger than the first chunk"},
		{"declared below first chunk", []step{{more, first(1, "abcd")}}, "declared message length not larger than the first chunk"},
		{"declared zero", []step{{more, first(0, "")}}, "declared message length not larger than the first chunk"},
		{"other stream", []step{{more, first(6, "abcd")}, {Header{Stream: 3, Type: TypeData}, []byte("ef")}}, "frame interrupts a chunked message"},
		{"other type", []step{{more, first(6, "abcd")}, {Header{Stream: 1, Type: TypeHeaders}, []byte("ef")}}, "frame interrupts a chunked message"},
		{"empty continuation", []step{{more, first(6, "abcd")}, {more, nil}}, "empty continuation frame"},
		{"too many bytes", []step{{more, first(6, "abcd")}, {last, []byte("efg")}}, "chunked message longer than its declared length"},
		{"too many bytes mid", []step{{more, first(9, "abcd")}, {more, []byte("efg")}, {more, []byte("hij")}}, "chunked message longer than its declared length"},
		{"more on completing frame", []step{{more, first(6, "abcd")}, {more, []byte("ef")}}, "FlagMore on the frame that completes a chunked message"},
		{"short last frame", []step{{more, first(7, "abcd")}, {last, []byte("ef")}}, "last frame ends short of the declared message length"},
		{"empty last frame", []step{{more, first(7, "abcd")}, {last, nil}}, "last frame ends short of the declared message length"},
	}
	for _, tt := range tests {
		var a Assembler
		var err error
		for i, s := range tt.steps {
			var done bool
			_, done, err = a.Add(s.h, s.p)
			if i < len(tt.steps)-1 && (err != nil || done) {
				t.Fatalf("%s: step %d: %v %v", tt.name, i, done, err)
			}
		}
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Reason != tt.reason {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.reason)
		}
		if a.InProgress() {
			t.Errorf("%s: still in progress after an error", tt.name)
		}
	}
}

func TestAssemblerReset(t *testing.T) {
	var a Assembler
	hs, ps := splitFrames(t, AppendMessage(nil, 1, TypeData, 0, make([]byte, 50), 20))
	a.Add(hs[0], ps[0])
	a.Add(hs[1], ps[1])
	if !a.InProgress() {
		t.Fatal("not in progress")
	}
	a.Reset()
	if a.InProgress() {
		t.Fatal("in progress after Reset")
	}
	// The last frame alone is a single-frame message again, not the end of
	// the dropped one.
	if m, done, err := a.Add(hs[2], ps[2]); err != nil || !done || len(m) != len(ps[2]) {
		t.Fatalf("%d %v %v", len(m), done, err)
	}
}

func TestAssemblerDefaultLimit(t *testing.T) {
	var a Assembler
	p := binary.BigEndian.AppendUint32(nil, DefaultMaxMessageSize+1)
	p = append(p, 1)
	if _, _, err := a.Add(Header{Stream: 1, Type: TypeData, Flags: FlagMore}, p); err == nil {
		t.Fatal("default limit not applied")
	}
	a.Reset()
	p = binary.BigEndian.AppendUint32(p[:0], DefaultMaxMessageSize)
	p = append(p, 1)
	if _, _, err := a.Add(Header{Stream: 1, Type: TypeData, Flags: FlagMore}, p); err != nil || len(a.buf) != DefaultMaxMessageSize {
		t.Fatal(err)
	}
}

func TestAssemblerRandomRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var a Assembler
	for range 300 {
		msg := make([]byte, r.IntN(5000))
		for i := range msg {
			msg[i] = byte(r.Uint32())
		}
		max := uint32(5 + r.IntN(3000))
		if got := feed(t, &a, msg, max); !bytes.Equal(got, msg) {
			t.Fatalf("len %d max %d: differs", len(msg), max)
		}
	}
}
