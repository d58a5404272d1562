package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// lineCounter counts log lines.
type lineCounter struct {
	mu    sync.Mutex
	lines int
	text  strings.Builder
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines += strings.Count(string(p), "\n")
	if c.text.Len() < 4096 {
		c.text.Write(p)
	}
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines
}

// TestRefusedPeersCheap checks what a refused peer costs: a peer refused
// in a loop produces one log line (and summaries, per interval), not one
// per attempt; a refused peer that sends nothing gets the refusal at once
// and is closed within refuseLinger, not held for the handshake timeout;
// and one peer holds at most maxHandshakesPerPeer connections that have
// not completed a handshake.
func TestRefusedPeersCheap(t *testing.T) {
	var logged lineCounter
	deny := peer.PolicyFunc(func(p *peer.Peer) error { return fmt.Errorf("%w: not you", peer.ErrDenied) })
	e := startBad(t, newBadServer(&ServerOptions{Policy: deny, Logger: slogTo(&logged)}))
	for range 2000 {
		c, err := net.Dial("unix", e.path)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	eventually(t, func() bool { return e.srv.Stats().ConnsRejected == 2000 })
	if n := logged.count(); n > 2 {
		t.Fatalf("2000 refusals of one peer logged %d lines, want at most 2:\n%s", n, logged.text.String())
	}

	// Refused peers that send nothing are answered and closed at once.
	conns := dialSilent(t, e.path, 100)
	deadline := time.Now().Add(3 * time.Second)
	for i, c := range conns {
		c.SetReadDeadline(deadline)
		got, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("refused silent connection %d: %v after %q (still open after 3 s?)", i, err, got)
		}
		if _, n, ok, _ := wire.ParsePreface(got); !ok || !strings.Contains(string(got[n:]), "not you") {
			t.Fatalf("refused silent connection %d got %q, want a preface and a GOAWAY naming the reason", i, got)
		}
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(err.Error(), "reset")
}

// TestUnauthenticatedCap: one peer holding silent connections (no
// preface) holds at most maxHandshakesPerPeer of them; the rest are closed
// at once, and a client that speaks is still served.
func TestUnauthenticatedCap(t *testing.T) {
	e := startBad(t, newBadServer(&ServerOptions{HandshakeTimeout: 30 * time.Second}))
	const n = maxHandshakesPerPeer + 100
	conns := dialSilent(t, e.path, n)
	closed := 0
	time.Sleep(200 * time.Millisecond) // let the server accept them all
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		var b [64]byte
		for {
			_, err := c.Read(b[:])
			if err == nil {
				continue
			}
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed++
			}
			break
		}
	}
	if closed < n-maxHandshakesPerPeer {
		t.Fatalf("%d of %d silent connections closed, want at least %d (the cap is %d)", closed, n, n-maxHandshakesPerPeer, maxHandshakesPerPeer)
	}
	for _, c := range conns {
		c.Close()
	}
	// The server is free for a client that speaks.
	eventually(t, func() bool {
		c, err := Dial(e.addr, nil)
		if err != nil {
			return false
		}
		defer c.Close()
		var out []byte
		return c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out) == nil
	})
}

// helperAddrEnv names the server a helper process calls (see
// TestHelperProcessCall).
const helperAddrEnv = "WARREN_TEST_HELPER_ADDR"

// TestHelperProcessCall is not a test: run by callFromOtherProcess, it
// makes one call to the server in $WARREN_TEST_HELPER_ADDR from another
// process of the same user.
func TestHelperProcessCall(t *testing.T) {
	addr := os.Getenv(helperAddrEnv)
	if addr == "" {
		t.Skip("helper process only")
	}
	c, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []byte
	if err := c.Invoke(ctx, "Bad.Echo", []byte("x"), &out); err != nil {
		t.Fatalf("call from another process: %v", err)
	}
}

func callFromOtherProcess(t *testing.T, addr string) error {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessCall$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperAddrEnv+"="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// TestFairnessWithinUID checks that one process of a user cannot lock out
// the user's other processes: it gets at most MaxConnsPerPID connections,
// and once its user's connections are at MaxConnsPerUID, an idle one is
// shed to admit another process's.
func TestFairnessWithinUID(t *testing.T) {
	t.Run("per process", func(t *testing.T) {
		e := startBad(t, newBadServer(&ServerOptions{MaxConnsPerUID: 40, MaxConnsPerPID: 16}))
		var admitted int
		for range 60 {
			c := e.client(t, nil)
			if _, err := c.Ping(context.Background()); err == nil {
				admitted++
			} else if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "per process") {
				t.Fatalf("hog connection: %v, want ResourceExhausted per process", err)
			}
		}
		if admitted > 16 {
			t.Fatalf("one process holds %d connections, limit 16 per process", admitted)
		}
		if err := callFromOtherProcess(t, e.addr); err != nil {
			t.Fatalf("another process of the same user was locked out: %v", err)
		}
	})
	t.Run("shed idle", func(t *testing.T) {
		e := startBad(t, newBadServer(&ServerOptions{MaxConnsPerUID: 8, MaxConnsPerPID: 8}))
		for range 8 {
			c := e.client(t, nil)
			if _, err := c.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(shedIdleAfter + 100*time.Millisecond)
		if err := callFromOtherProcess(t, e.addr); err != nil {
			t.Fatalf("with the user's connections idle at the limit, another process was refused: %v", err)
		}
		if st := e.srv.Stats(); st.ConnsShed != 1 {
			t.Fatalf("stats %+v, want 1 connection shed", st)
		}
	})
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dialSilent opens n connections to the socket at path that send nothing,
// closed when the test ends.
func dialSilent(t *testing.T, path string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}
