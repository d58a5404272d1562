package mux

import "testing"

// TestFedChunk: a fed write carries the descriptors of the first waiting
// frame if it reaches that frame's first byte, and ends before the next
// frame with descriptors; a write that does not reach it carries none.
func TestFedChunk(t *testing.T) {
	var w writer
	w.fw.sent = 100
	w.fw.files = []fedFiles{{off: 110, fds: []int{-1}}, {off: 130, fds: []int{-2}}, {off: 200, fds: []int{-3}}}
	out := make([]byte, 50) // stream bytes 100 to 149

	got, fds := w.fedChunk(out[:5]) // 100 to 104: short of the frame at 110
	if len(got) != 5 || fds != nil {
		t.Fatalf("short chunk: %d bytes, descriptors %v", len(got), fds)
	}
	got, fds = w.fedChunk(out)
	if len(got) != 30 || len(fds) != 1 || fds[0] != -1 {
		t.Fatalf("first frame: %d bytes (want 30: up to the next frame), descriptors %v", len(got), fds)
	}
	w.fedWrote(10, fds) // a partial write: the descriptors went with its first byte
	if w.fw.sent != 110 || len(w.fw.files) != 2 || w.fw.files[0].off != 130 {
		t.Fatalf("after the write: sent %d, %d waiting", w.fw.sent, len(w.fw.files))
	}
	got, fds = w.fedChunk(out[10:])
	if len(got) != 40 || len(fds) != 1 || fds[0] != -2 {
		t.Fatalf("second frame: %d bytes, descriptors %v", len(got), fds)
	}
	w.fedWrote(len(got), fds)
	got, fds = w.fedChunk(make([]byte, 60)) // 150 to 209
	if len(got) != 60 || len(fds) != 1 || fds[0] != -3 {
		t.Fatalf("third frame: %d bytes, descriptors %v", len(got), fds)
	}
	w.fedWrote(len(got), fds)
	if w.fw.files != nil || w.fw.sent != 210 {
		t.Fatalf("at the end: sent %d, %d waiting", w.fw.sent, len(w.fw.files))
	}
}
