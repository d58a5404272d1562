package rawio

import (
	"io"
	"net"
	"testing"
)

// TestWrap: Wrap gives unix and tcp connections raw I/O (except under the
// race detector), keeps the connection reachable through NetConn, and
// leaves other connections alone.
func TestWrap(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		a, b := rawPair(t, network)
		w := Wrap(b)
		rc, ok := w.(*Conn)
		if ok == RaceEnabled {
			t.Fatalf("%s: Wrap returned a %T (race detector: %v)", network, w, RaceEnabled)
		}
		if ok {
			if rc.NetConn() != b || !rc.ReadsResume() {
				t.Fatalf("%s: NetConn %v, ReadsResume %v", network, rc.NetConn(), rc.ReadsResume())
			}
		}
		if _, err := a.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(w, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("%s: read %q, %v", network, buf, err)
		}
		if ok {
			v := net.Buffers{[]byte("po"), []byte("ng")}
			if n, err := rc.WriteBuffers(&v); n != 4 || err != nil {
				t.Fatalf("%s: WriteBuffers %d, %v", network, n, err)
			}
			if _, err := io.ReadFull(a, buf); err != nil || string(buf) != "pong" {
				t.Fatalf("%s: peer read %q, %v", network, buf, err)
			}
			if err := rc.CloseWrite(); err != nil {
				t.Fatalf("%s: CloseWrite: %v", network, err)
			}
			if n, err := a.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("%s: after CloseWrite the peer read %d, %v", network, n, err)
			}
		}
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if Wrap(p1) != p1 {
		t.Fatal("Wrap changed a net.Pipe connection")
	}
}
