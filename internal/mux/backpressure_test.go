package mux

import (
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/wire"
)

// TestPeerNotReadingBounded: a peer that sends PINGs and never reads the
// replies (4 Mi PINGs: 72 MiB of replies) makes a server session queue a
// bounded amount (the session stops reading from it), and the session is
// closed once the peer has stayed stuck for stuckTimeout. Before the
// bounds, the replies were queued without limit: the server's heap grew by
// the full 72 MiB and more.
func TestPeerNotReadingBounded(t *testing.T) {
	const stuck = 500 * time.Millisecond
	stuckTimeoutNS.Store(int64(stuck))
	defer stuckTimeoutNS.Store(0)
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := [2]net.Conn{}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		defer c.Close()
	}
	cc, sc := conns[0], conns[1]
	type result struct {
		s   *Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := Server(sc, &Config{OnStream: func(st *Stream, _ *wire.CallHeader) {}})
		done <- result{s, err}
	}()
	if _, err := cc.Write(wire.AppendPreface(nil, wire.Settings{}.WithDefaults())); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadPreface(cc); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	sess := r.s
	defer sess.Close()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var chunk []byte
	for i := range 1 << 8 {
		chunk = wire.AppendFrame(chunk, 0, wire.TypePing, 0, []byte{0, 0, 0, 0, 0, 0, byte(i >> 8), byte(i)})
	}
	// Write 4 Mi PINGs, or until the server stops reading (the write
	// deadline) or closes the connection.
	cc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	sent := 0
	for sent < 1<<22 {
		if _, err := cc.Write(chunk); err != nil {
			break
		}
		sent += 1 << 8
	}
	var peak runtime.MemStats
	runtime.ReadMemStats(&peak)
	grew := int64(peak.HeapInuse) - int64(before.HeapInuse)
	t.Logf("sent %d PINGs; server heap grew %d KiB", sent, grew>>10)
	if grew > 16<<20 {
		t.Fatalf("the heap grew by %d MiB for a peer that does not read (bound 16 MiB)", grew>>20)
	}
	select {
	case <-sess.Done():
	case <-time.After(stuck + 5*time.Second):
		t.Fatalf("session still open %v after the peer stopped reading", stuck+5*time.Second)
	}
}
