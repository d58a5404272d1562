package frameio

import (
	"bytes"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/warrenipc/warren/wire"
)

// TestReaderInPlaceTimeoutResumes interrupts a payload being read in place
// with a timeout at every point: the next call returns the same frame, in
// the memory into gave the first time (into is not asked again), and the
// frames after it follow.
func TestReaderInPlaceTimeoutResumes(t *testing.T) {
	fs := []testFrame{
		{wire.Header{Stream: 1, Type: wire.TypeData, Flags: wire.FlagMore}, strings.Repeat("a", 3000)},
		{wire.Header{Stream: 3, Type: wire.TypeData}, "after"},
	}
	b := encodeFrames(fs)
	for cut := 1; cut < wire.HeaderSize+3000; cut += 97 {
		r := NewReader(iotest.TimeoutReader(bytes.NewReader(b[:cut])), wire.DefaultMaxFrameSize)
		var dst []byte
		asked := 0
		into := func(h wire.Header, head []byte) ([]byte, int) {
			if h.Length < 1000 {
				return nil, 0
			}
			asked++
			dst = make([]byte, h.Length)
			return dst, 0
		}
		if _, _, err := r.NextInto(into); err != iotest.ErrTimeout {
			t.Fatalf("cut at %d: %v, want the timeout", cut, err)
		}
		r.rd = bytes.NewReader(b[cut:])
		h, p, err := r.NextInto(into)
		if err != nil || h.Stream != 1 || string(p) != fs[0].p {
			t.Fatalf("cut at %d: resumed frame %v %.20q %v", cut, h, p, err)
		}
		if asked > 1 || (asked == 1 && &p[0] != &dst[0]) {
			t.Fatalf("cut at %d: into asked %d times, payload in place %v", cut, asked, asked == 1 && &p[0] == &dst[0])
		}
		h, p, err = r.NextInto(into)
		if err != nil || h.Stream != 3 || string(p) != "after" {
			t.Fatalf("cut at %d: next frame %v %q %v", cut, h, p, err)
		}
	}
}

// TestReaderRedirect moves a payload interrupted while it was read in place
// to other memory, at every cut: the bytes read before the cut are copied
// there, the rest is read there, the first memory is not written after
// Redirect, and the frame comes out whole.
func TestReaderRedirect(t *testing.T) {
	want := strings.Repeat("0123456789", 300)
	b := encodeFrames([]testFrame{{wire.Header{Stream: 1, Type: wire.TypeData}, want}, {wire.Header{Stream: 3, Type: wire.TypeData}, "after"}})
	for cut := 1; cut < wire.HeaderSize+len(want); cut += 89 {
		r := NewReader(iotest.TimeoutReader(bytes.NewReader(b[:cut])), wire.DefaultMaxFrameSize)
		var first []byte
		into := func(h wire.Header, head []byte) ([]byte, int) {
			if h.Length < 1000 {
				return nil, 0
			}
			first = make([]byte, h.Length)
			return first, 0
		}
		if _, _, err := r.NextInto(into); err != iotest.ErrTimeout {
			t.Fatalf("cut at %d: %v, want the timeout", cut, err)
		}
		moved := make([]byte, len(want))
		pending := first != nil && cut < wire.HeaderSize+len(want)
		if got := r.Redirect(moved); got != pending || (got && r.Pending() != len(want)) {
			t.Fatalf("cut at %d: Redirect = %v with %d pending, want %v", cut, got, r.Pending(), pending)
		}
		var snapshot []byte
		if first != nil {
			snapshot = append([]byte(nil), first...)
		}
		r.rd = bytes.NewReader(b[cut:])
		h, p, err := r.NextInto(into)
		if err != nil || h.Stream != 1 || string(p) != want {
			t.Fatalf("cut at %d: resumed frame %v %.20q %v", cut, h, p, err)
		}
		if pending && &p[0] != &moved[0] {
			t.Fatalf("cut at %d: payload not in the memory redirected to", cut)
		}
		if pending && !bytes.Equal(first, snapshot) {
			t.Fatalf("cut at %d: the first memory was written after Redirect", cut)
		}
		if h, p, err := r.NextInto(into); err != nil || h.Stream != 3 || string(p) != "after" {
			t.Fatalf("cut at %d: next frame %v %q %v", cut, h, p, err)
		}
	}
	if r := NewReader(bytes.NewReader(nil), wire.DefaultMaxFrameSize); r.Redirect(make([]byte, 5)) {
		t.Fatal("Redirect with nothing pending reported a payload")
	}
}
