package wire

import (
	"bytes"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReaderInPlaceTimeoutResumes interrupts a payload being read in place
// with a timeout at every point: the next call returns the same frame, in
// the memory into gave the first time (into is not asked again), and the
// frames after it follow.
func TestReaderInPlaceTimeoutResumes(t *testing.T) {
	fs := []testFrame{
		{Header{Stream: 1, Type: TypeData, Flags: FlagMore}, strings.Repeat("a", 3000)},
		{Header{Stream: 3, Type: TypeData}, "after"},
	}
	b := encodeFrames(fs)
	for cut := 1; cut < HeaderSize+3000; cut += 97 {
		r := NewReader(iotest.TimeoutReader(bytes.NewReader(b[:cut])), DefaultMaxFrameSize)
		var dst []byte
		asked := 0
		into := func(h Header, head []byte) ([]byte, int) {
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
