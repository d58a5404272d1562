package mux

import (
	"bytes"
	"testing"

	"github.com/warrenipc/warren/internal/pool"
)

// TestFedRoom: a fed writer's buffer that must take a large message moves
// to a pooled buffer holding it, which its handle gives back to the pool
// once written, instead of growing by append (an allocation per message).
func TestFedRoom(t *testing.T) {
	var w writer
	w.fw.bufH = pool.Get(fedBufSize)
	b := append(w.fw.bufH.B[:0], "pending frames"...)
	if got := w.fedRoom(b, 10); &got[0] != &b[0] {
		t.Fatal("a buffer with room was replaced")
	}
	const n = 1 << 20
	got := w.fedRoom(b, n)
	if cap(got)-len(got) < n {
		t.Fatalf("room for %d bytes, want %d", cap(got)-len(got), n)
	}
	if !bytes.Equal(got, []byte("pending frames")) {
		t.Fatalf("buffered bytes %q lost", got)
	}
	if &w.fw.bufH.B[:1][0] != &got[:1][0] {
		t.Fatal("the grown buffer is not the writer's pooled one")
	}
	if got = append(got, make([]byte, n)...); &got[0] != &w.fw.bufH.B[:1][0] {
		t.Fatal("appending the message moved the buffer")
	}
}
