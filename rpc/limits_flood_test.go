package rpc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/wire"
)

// limPingFlood: a peer that sends PINGs as fast as it can and never reads
// the replies is bounded on both engines: the server stops reading it once
// its unwritten output is over the bound, and closes it once that output
// has been stuck for the stuck timeout (shortened here), so the flood costs
// a bounded amount of memory and ends.
func limPingFlood(t *testing.T, start func(*ServerOptions) *limEnv, loop bool) {
	const stuck = 500 * time.Millisecond
	defer mux.SetStuckTimeout(stuck)()
	e := start(nil)
	conn, err := net.Dial(e.network, e.address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(wire.AppendPreface(nil, wire.Settings{})); err != nil {
		t.Fatal(err)
	}
	var pings []byte
	for range 4096 {
		pings = wire.AppendFrame(pings, 0, wire.TypePing, 0, make([]byte, 8))
	}
	rss0, peak := rssBytes(t), int64(0)
	begin := time.Now()
	var sent int64
	var werr error
	for time.Since(begin) < 20*time.Second {
		conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := conn.Write(pings)
		sent += int64(n)
		peak = max(peak, rssBytes(t)-rss0)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			werr = err
			break
		}
	}
	took := time.Since(begin)
	if werr == nil {
		t.Fatalf("a PING flood that never reads was still open after %v (%d bytes sent, RSS +%d MiB)", took, sent, peak>>20)
	}
	t.Logf("PING flood (event loop %v): closed after %v (%v); %d KiB of PINGs sent, RSS +%d KiB at peak", loop, took.Round(time.Millisecond), werr, sent>>10, peak>>10)
	if took > stuck+3*time.Second {
		t.Errorf("closed after %v, want about the stuck timeout (%v)", took, stuck)
	}
	// The race detector's shadow memory multiplies what the heap costs;
	// .ci/run also runs this test without it, where the bound is 24 MiB.
	bound := int64(24 << 20)
	if rawio.RaceEnabled {
		bound *= 4
	}
	if peak > bound {
		t.Errorf("RSS grew by %d MiB during the flood, want a bounded queue (at most %d MiB)", peak>>20, bound>>20)
	}
}

// rssBytes returns the process's resident set size.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// limRefusedFlood: a refused peer that sends its preface and then PINGs as
// fast as it can is read no further than its first bytes on both engines:
// it gets the server's preface and a GOAWAY with the reason, no PING
// reply, and the connection closes within admit.RefuseLinger (0.5 s).
func limRefusedFlood(t *testing.T, start func(*ServerOptions) *limEnv, loop bool) {
	deny := peer.PolicyFunc(func(p *peer.Peer) error { return fmt.Errorf("%w: not you", peer.ErrDenied) })
	e := start(&ServerOptions{Policy: deny})
	conn, err := net.Dial(e.network, e.address)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan []byte, 1)
	go func() {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(conn)
		got <- b
	}()
	flood := wire.AppendPreface(nil, wire.Settings{})
	for range 4096 {
		flood = wire.AppendFrame(flood, 0, wire.TypePing, 0, make([]byte, 8))
	}
	begin := time.Now()
	var sent int64
	for time.Since(begin) < 5*time.Second {
		conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := conn.Write(flood)
		sent += int64(n)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		flood = flood[:copy(flood, flood[len(wire.AppendPreface(nil, wire.Settings{})):])]
	}
	b := <-got
	took := time.Since(begin)
	_, n, ok, _ := wire.ParsePreface(b)
	if !ok {
		t.Fatalf("refused flood got %q, want the server's preface", b)
	}
	r := frameio.NewReader(bytes.NewReader(b[n:]), wire.DefaultMaxFrameSize)
	var frames []string
	for {
		h, p, err := r.Next()
		if err != nil {
			break
		}
		frames = append(frames, h.Type.String())
		if h.Type == wire.TypePing {
			t.Fatalf("a refused peer's PING was answered (frames %v)", frames)
		}
		if h.Type == wire.TypeGoAway && !strings.Contains(string(p), "not you") {
			t.Fatalf("GOAWAY %q, want the reason", p)
		}
	}
	if len(frames) != 1 || frames[0] != "GOAWAY" {
		t.Fatalf("refused flood got frames %v, want one GOAWAY", frames)
	}
	t.Logf("refused PING flood (event loop %v): preface and GOAWAY, no PING reply, closed after %v; %d KiB sent", loop, took.Round(time.Millisecond), sent>>10)
	if took > 2*time.Second {
		t.Errorf("closed after %v, want within admit.RefuseLinger (0.5 s)", took)
	}
}

// limHog3000: one process that opens 3,000 unix connections, half of them
// sending their preface and half silent, is held to the per-process limit
// (MaxConnsPerPID, 256 by default) and the handshake cap
// (admit.MaxHandshakesPerPeer, 256) on both engines: the server keeps at
// most their sum of those descriptors, and a call from another process of
// the user succeeds within 3 s.
func limHog3000(t *testing.T, start func(*ServerOptions) *limEnv, loop bool) {
	e := start(nil)
	perPID := e.srv.opts.MaxConnsPerPID
	fds0 := procFDs(t)
	const n = 3000
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	preface := wire.AppendPreface(nil, wire.Settings{})
	for i := range n {
		c, err := net.Dial(e.network, e.address)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write(preface)
		}
	}
	var held int
	eventually(t, func() bool {
		held = procFDs(t) - fds0 - n
		return held <= perPID+admit.MaxHandshakesPerPeer+8
	})
	begin := time.Now()
	if err := callFromOtherProcess(t, e.addr); err != nil {
		t.Fatalf("a call from another process with 3,000 connections of one process open: %v", err)
	}
	took := time.Since(begin)
	if took > 3*time.Second {
		t.Fatalf("the call from another process took %v, want at most 3 s", took)
	}
	t.Logf("3,000 connections of one process (event loop %v): the server holds %d descriptors for them (limits %d per process + %d in their handshake); another process's call served in %v", loop, held, perPID, admit.MaxHandshakesPerPeer, took.Round(time.Millisecond))
}

// procFDs returns the process's open descriptors (Linux).
func procFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
