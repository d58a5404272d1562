package frameio

import (
	"bytes"
	"strings"
	"testing"

	"github.com/warrenipc/warren/wire"
)

func splitFrames(t *testing.T, b []byte) (hs []wire.Header, ps [][]byte) {
	t.Helper()
	for len(b) > 0 {
		rest, h, p, ok, err := wire.ParseFrame(b, 1<<30)
		if err != nil || !ok {
			t.Fatalf("wire.ParseFrame: ok=%v err=%v", ok, err)
		}
		hs, ps, b = append(hs, h), append(ps, p), rest
	}
	return hs, ps
}

func TestChunker(t *testing.T) {
	var c Chunker
	if !c.Done() {
		t.Fatal("zero Chunker not done")
	}
	if b, n := c.AppendNext([]byte("x"), 100); n != -1 || string(b) != "x" {
		t.Fatal("zero Chunker produced a frame")
	}
	msg := []byte(strings.Repeat("abcdefghij", 30))
	c.Reset(5, wire.TypeData, wire.FlagEnd, msg)
	if c.Done() || c.Remaining() != 300 {
		t.Fatal("Reset did not start a message")
	}
	// Too little credit for the first chunk: nothing happens.
	for _, max := range []uint32{0, 4} {
		if b, n := c.AppendNext(nil, max); n != -1 || b != nil {
			t.Fatalf("max %d: %d %x", max, n, b)
		}
	}
	// Uneven credit, as flow control grants it.
	var out []byte
	credits := []uint32{5, 0, 1, 17, 64, 3, 1000}
	total := 0
	for i := 0; !c.Done(); i++ {
		max := credits[i%len(credits)]
		var n int
		before := c.Remaining()
		out, n = c.AppendNext(out, max)
		if max == 0 {
			if n != -1 {
				t.Fatalf("max 0 on a continuation: %d", n)
			}
			continue
		}
		if n < 0 || uint32(n) > max || c.Remaining() >= before {
			t.Fatalf("max %d: n=%d remaining %d -> %d", max, n, before, c.Remaining())
		}
		total += n
	}
	if total != 300+4 {
		t.Fatalf("credit used %d, want 304", total)
	}
	var a wire.Assembler
	hs, ps := splitFrames(t, out)
	for i, h := range hs {
		m, done, err := a.Add(h, ps[i])
		if err != nil || done != (i == len(hs)-1) {
			t.Fatalf("frame %d: %v %v", i, done, err)
		}
		if done && !bytes.Equal(m, msg) {
			t.Fatalf("reassembled %q", m)
		}
	}
	if hs[len(hs)-1].Flags != wire.FlagEnd {
		t.Fatal("last frame lacks wire.FlagEnd")
	}
	// The same max for every frame gives AppendMessage's frames.
	c.Reset(5, wire.TypeData, wire.FlagEnd, msg)
	var same []byte
	for !c.Done() {
		same, _ = c.AppendNext(same, 64)
	}
	if !bytes.Equal(same, wire.AppendMessage(nil, 5, wire.TypeData, wire.FlagEnd, msg, 64)) {
		t.Fatal("Chunker and wire.AppendMessage disagree")
	}
}
