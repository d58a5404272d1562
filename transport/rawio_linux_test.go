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
		l, err := Listen(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			ch <- c
		}()
		c, err := Dial(context.Background(), l.Addr().Network()+"://"+l.Addr().String(), nil)
		if err != nil {
			l.Close()
			t.Fatal(err)
		}
		s := <-ch
		if s == nil {
			t.Fatal("accept failed")
		}
		if got := s.(*Conn).rio != nil; got == rawio.RaceEnabled {
			t.Errorf("%s: accepted connection uses raw I/O: %v", addr, got)
		}
		if got := c.rio != nil; got == rawio.RaceEnabled {
			t.Errorf("%s: dialed connection uses raw I/O: %v", addr, got)
		}
		echoOnce(t, c, s)
		c.Close()
		s.Close()
		l.Close()
	}
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
