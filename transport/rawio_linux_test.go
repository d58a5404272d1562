package transport

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"

	"github.com/warrenipc/warren/internal/rawio"
)

// TestConnUsesRawIO: unix and tcp connections from Dial and Accept read and
// write with raw system calls, except under the race detector.
func TestConnUsesRawIO(t *testing.T) {
	for _, addr := range []string{"unix://" + filepath.Join(t.TempDir(), "s"), "tcp://127.0.0.1:0"} {
		c, s := dialAccepted(t, addr)
		if got := s.(*Conn).rio != nil; got == rawio.RaceEnabled {
			t.Errorf("%s: accepted connection uses raw I/O: %v", addr, got)
		}
		if got := c.rio != nil; got == rawio.RaceEnabled {
			t.Errorf("%s: dialed connection uses raw I/O: %v", addr, got)
		}
		echoOnce(t, c, s)
	}
}

// dialAccepted listens on addr and returns a Conn dialed to it and the
// one the listener accepted. The test's cleanup closes them.
func dialAccepted(t *testing.T, addr string) (c *Conn, s net.Conn) {
	l, err := Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	c, err = Dial(context.Background(), l.Addr().Network()+"://"+l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if s = <-ch; s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

func echoOnce(t *testing.T, c, s net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

// TestConnView: the session reaches a unix or tcp Conn's WriteBuffers and
// ReadsResume through rawio.View, which, with the raw write, allocates
// nothing.
func TestConnView(t *testing.T) {
	for _, addr := range []string{"unix://" + filepath.Join(t.TempDir(), "s"), "tcp://127.0.0.1:0"} {
		c, s := dialAccepted(t, addr)
		x, ok := rawio.View(c).(rawio.Ext)
		if !ok || !x.ReadsResume() {
			t.Fatalf("%s: View(%T) = %T, ReadsResume %v", addr, c, x, ok && x.ReadsResume())
		}
		buf, pi, ng := make([]byte, 4), []byte("pi"), []byte("ng")
		var bufs [2][]byte
		var v net.Buffers
		write := func() {
			bufs = [2][]byte{pi, ng}
			v = bufs[:]
			if n, err := rawio.View(c).(rawio.Ext).WriteBuffers(&v); n != 4 || err != nil {
				t.Fatalf("%s: WriteBuffers = %d, %v", addr, n, err)
			}
			if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("%s: read %q, %v", addr, buf, err)
			}
		}
		write()
		if !rawio.RaceEnabled {
			if n := testing.AllocsPerRun(100, write); n != 0 {
				t.Errorf("%s: View and WriteBuffers allocate %v times", addr, n)
			}
		}
		if v := rawio.View(s); v == s {
			t.Errorf("%s: View of an accepted Conn is the Conn itself", addr)
		}
	}
}
