package shm

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mapsOf returns the lines of /proc/self/maps of memfds named warren.
func mapsOf(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "/memfd:warren") {
			out = append(out, l)
		}
	}
	return out
}

// TestBufferSealedOnSend: a buffer is writable, its first send seals it
// and leaves it mapped read-only at the same address; a copy of its
// memfd received while it is mapped is viewed through the same mapping;
// the last release unmaps it and closes its memfd.
func TestBufferSealedOnSend(t *testing.T) {
	fds, maps := fdCount(t), len(mapsOf(t))
	const n = 1 << 20
	b, err := NewBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = byte(i)
	}
	if got := mapsOf(t); len(got) != maps+1 || !strings.Contains(got[len(got)-1], " rw-s ") {
		t.Fatalf("buffer mapping: %q", got)
	}
	fd, ok := Sendable(b)
	if !ok {
		t.Fatal("a whole buffer is not sendable")
	}
	if got := mapsOf(t); len(got) != maps+1 || !strings.Contains(got[len(got)-1], " r--s ") {
		t.Fatalf("mapping after the send: %q", got)
	}
	if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || seals&Seals != Seals {
		t.Fatalf("seals %#x %v", seals, err)
	}
	if _, ok := Sendable(b[1:]); ok {
		t.Fatal("a part of a buffer is sendable")
	}
	if b[n-1] != byte((n-1)%256) {
		t.Fatal("contents changed by sealing")
	}
	// The memfd comes back (an echo): the same mapping, no new one.
	v, err := Open(fd, n, false)
	if err != nil {
		t.Fatal(err)
	}
	if &v[0] != &b[0] || len(mapsOf(t)) != maps+1 {
		t.Fatalf("echo of a mapped buffer mapped again")
	}
	fd2, ok := Sendable(b) // sent again: no copy, no new seal
	if !ok {
		t.Fatal("a sealed buffer is not sendable again")
	}
	unix.Close(fd2)
	if !Release(b) {
		t.Fatal("release of the buffer")
	}
	if v[n-1] != byte((n-1)%256) { // the view keeps the mapping
		t.Fatal("view changed")
	}
	if !Release(v) || Release(v) {
		t.Fatal("release of the view, or a second one")
	}
	if got := fdCount(t); got != fds || len(mapsOf(t)) != maps {
		t.Fatalf("left open: %d descriptors (%d before), maps %q", got, fds, mapsOf(t))
	}
	if _, err := NewBuffer(0); err == nil {
		t.Fatal("buffer of 0 bytes")
	}
}

// TestOpenUnsealedBufferRefused: the memfd of a buffer not yet sealed,
// received (a sender that did not seal), is refused, never viewed.
func TestOpenUnsealedBufferRefused(t *testing.T) {
	b, err := NewBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer Release(b)
	regMu.Lock()
	fd, _ := Dup(byAddr[addrOf(b)].fd)
	regMu.Unlock()
	defer unix.Close(fd)
	if _, err := Open(fd, 4096, false); err == nil {
		t.Fatal("unsealed buffer viewed")
	}
}
