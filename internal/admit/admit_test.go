package admit_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

func newCore(lim admit.Limits, policy peer.Policy) *admit.Core {
	if lim.MaxConns == 0 {
		lim.MaxConns = math.MaxInt
	}
	if lim.MaxConnsPerUID == 0 {
		lim.MaxConnsPerUID = math.MaxInt
	}
	if lim.MaxConnsPerPID == 0 {
		lim.MaxConnsPerPID = math.MaxInt
	}
	if lim.CallRate == 0 {
		lim.CallRate, lim.CallBurst = float64(rate.Inf), 1
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	k := admit.New(lim, policy, func() *slog.Logger { return logger })
	return k
}

func unixPeer(uid, pid int) *peer.Peer {
	return &peer.Peer{Network: "unix", HasCred: true, UID: uid, PID: pid, RemoteAddr: &net.UnixAddr{Net: "unix"}}
}

func tcpPeer(ip string) *peer.Peer {
	return &peer.Peer{Network: "tcp", RemoteAddr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}
}

// shedLog is an Engine that records what it is asked to shed.
type shedLog struct {
	mu   sync.Mutex
	shed []*admit.Conn
}

func (s *shedLog) engine(k *admit.Core) *admit.Engine {
	return k.NewEngine(func(c *admit.Conn, _ int32) {
		s.mu.Lock()
		s.shed = append(s.shed, c)
		s.mu.Unlock()
	})
}

// TestLimits: MaxConns, per uid and per pid refuse with the messages
// clients match, and Release makes room again.
func TestLimits(t *testing.T) {
	k := newCore(admit.Limits{MaxConns: 4, MaxConnsPerUID: 3, MaxConnsPerPID: 2}, nil)
	defer k.Close()
	eng := (&shedLog{}).engine(k)
	conns := make([]admit.Conn, 5)
	admitOK := func(c *admit.Conn, p *peer.Peer) {
		t.Helper()
		if why, code := k.Admit(c, p, eng); why != "" || code != status.OK {
			t.Fatalf("refused: %s (%v)", why, code)
		}
	}
	refused := func(c *admit.Conn, p *peer.Peer, want string) {
		t.Helper()
		why, code := k.Admit(c, p, eng)
		if why != want || code != status.ResourceExhausted {
			t.Fatalf("got %q (%v), want %q (ResourceExhausted)", why, code, want)
		}
	}
	admitOK(&conns[0], unixPeer(1000, 7))
	admitOK(&conns[1], unixPeer(1000, 7))
	conns[0].Touch()
	conns[1].Touch()
	refused(&conns[2], unixPeer(1000, 7), "too many connections from pid 7 of uid 1000 (limit 2 per process)")
	admitOK(&conns[2], unixPeer(1000, 8))
	conns[2].Touch()
	refused(&conns[3], unixPeer(1000, 9), "too many connections from uid 1000 (limit 3)")
	admitOK(&conns[3], tcpPeer("127.0.0.1"))
	refused(&conns[4], tcpPeer("127.0.0.1"), "too many connections (limit 4)")
	if n := k.Conns(); n != 4 {
		t.Fatalf("%d conns, want 4", n)
	}
	k.Release(&conns[1])
	k.Release(&conns[1]) // twice: nothing more
	admitOK(&conns[4], unixPeer(1000, 9))
	if n, r := k.Conns(), k.Rejected(); n != 4 || r != 3 {
		t.Fatalf("%d conns, %d rejected; want 4, 3", n, r)
	}
	for i := range conns {
		k.Release(&conns[i])
	}
	if n := k.Conns(); n != 0 {
		t.Fatalf("%d conns after releasing all, want 0", n)
	}
}

// TestShed: at a limit, the connection of the user idle for longest in its
// busiest process is shed (uncounted at once, its engine asked to end it);
// one busy (with calls, or awake), or active recently, is not.
func TestShed(t *testing.T) {
	k := newCore(admit.Limits{MaxConnsPerUID: 4}, nil)
	defer k.Close()
	var log shedLog
	eng := log.engine(k)
	conns := make([]admit.Conn, 5)
	old := admit.Now() - 2*uint32(admit.ShedIdleAfter/time.Millisecond)
	for i, pid := range []int{1, 2, 2, 3} {
		if why, _ := k.Admit(&conns[i], unixPeer(5, pid), eng); why != "" {
			t.Fatal(why)
		}
		conns[i].SetActive(old + uint32(i))
	}
	conns[1].SetActive(admit.Busy) // a call in progress
	conns[3].SetActive(admit.Busy) // an engine's awake connection
	if why, _ := k.Admit(&conns[4], unixPeer(5, 4), eng); why != "" {
		t.Fatalf("not admitted by shedding: %s", why)
	}
	if len(log.shed) != 1 || log.shed[0] != &conns[2] {
		t.Fatalf("shed %v, want conns[2] (idle, in the process with the most)", log.shed)
	}
	if !k.WasShed(&conns[2]) || k.Shed() != 1 || k.Conns() != 4 {
		t.Fatalf("WasShed %v, Shed %d, Conns %d; want true, 1, 4", k.WasShed(&conns[2]), k.Shed(), k.Conns())
	}
	k.Release(&conns[2]) // the engine ending it: already uncounted
	if k.Conns() != 4 {
		t.Fatalf("Conns %d after releasing a shed connection, want 4", k.Conns())
	}
	conns[0].Touch()
	conns[4].Touch()
	var c admit.Conn
	if why, _ := k.Admit(&c, unixPeer(5, 9), eng); why != "too many connections from uid 5 (limit 4)" {
		t.Fatalf("with no idle connection: %q", why)
	}
}

// TestPolicyAndDrain: the policy refuses with PermissionDenied and its
// message, a drain with Unavailable and ShuttingDown.
func TestPolicyAndDrain(t *testing.T) {
	deny := peer.PolicyFunc(func(p *peer.Peer) error {
		if p.UID == 6 {
			return fmt.Errorf("%w: not you", peer.ErrDenied)
		}
		return nil
	})
	k := newCore(admit.Limits{}, deny)
	defer k.Close()
	eng := (&shedLog{}).engine(k)
	var c admit.Conn
	if why, code := k.Admit(&c, unixPeer(6, 1), eng); code != status.PermissionDenied || !strings.Contains(why, "not you") {
		t.Fatalf("%q %v", why, code)
	}
	k.Drain()
	if why, code := k.Admit(&c, unixPeer(7, 1), eng); code != status.Unavailable || why != admit.ShuttingDown {
		t.Fatalf("%q %v", why, code)
	}
	if k.Conns() != 0 || k.Rejected() != 2 {
		t.Fatalf("Conns %d, Rejected %d; want 0, 2", k.Conns(), k.Rejected())
	}
}

// TestRateLimiterShared: the connections of one peer share its limiter,
// which goes when the last is released.
func TestRateLimiterShared(t *testing.T) {
	k := newCore(admit.Limits{CallRate: 1, CallBurst: 2}, nil)
	defer k.Close()
	eng := (&shedLog{}).engine(k)
	var a, b, c admit.Conn
	k.Admit(&a, tcpPeer("10.0.0.1"), eng)
	k.Admit(&b, tcpPeer("10.0.0.1"), eng)
	k.Admit(&c, tcpPeer("10.0.0.2"), eng)
	if a.Limiter() != b.Limiter() || a.Limiter() == c.Limiter() {
		t.Fatal("limiters not shared by peer")
	}
	if !a.Limiter().Allow() || !b.Limiter().Allow() || a.Limiter().Allow() {
		t.Fatal("the burst of 2 is not shared")
	}
	k.Release(&a)
	k.Release(&b)
	var d admit.Conn
	k.Admit(&d, tcpPeer("10.0.0.1"), eng)
	if !d.Limiter().Allow() {
		t.Fatal("a new limiter after the last release")
	}
}

// TestHandshakeCap: a peer has at most MaxHandshakesPerPeer connections in
// their handshake.
func TestHandshakeCap(t *testing.T) {
	k := newCore(admit.Limits{}, nil)
	defer k.Close()
	p := tcpPeer("10.0.0.3")
	key := admit.PeerKey(p)
	var first *admit.Handshake
	for i := range admit.MaxHandshakesPerPeer {
		h := k.StartHandshake(key, p, func(*admit.Handshake) { t.Error("a connection without a pid evicted") })
		if h == nil {
			t.Fatalf("handshake %d refused", i)
		}
		if first == nil {
			first = h
		}
	}
	if k.StartHandshake(key, p, nil) != nil || k.Rejected() != 1 {
		t.Fatal("a handshake over the cap admitted")
	}
	if k.StartHandshake(admit.PeerKey(tcpPeer("10.0.0.4")), p, nil) == nil {
		t.Fatal("another peer refused")
	}
	k.EndHandshake(first)
	k.EndHandshake(first) // a second end is a no-op
	if k.StartHandshake(key, p, nil) == nil {
		t.Fatal("refused after one ended")
	}
	if k.StartHandshake(key, p, nil) != nil {
		t.Fatal("a second end freed a second slot")
	}
}

// TestHandshakeFair: when a uid's handshake cap is full, a connection of
// another process of the uid evicts the oldest of the process holding the
// most; one of that process is refused.
func TestHandshakeFair(t *testing.T) {
	k := newCore(admit.Limits{}, nil)
	defer k.Close()
	proc := func(pid int) *peer.Peer {
		return &peer.Peer{Network: "unix", HasCred: true, UID: 1000, PID: pid}
	}
	hog, key := proc(10), admit.PeerKey(proc(10))
	evicted := make([]int, admit.MaxHandshakesPerPeer)
	var hs []*admit.Handshake
	for i := range admit.MaxHandshakesPerPeer - 2 {
		hs = append(hs, k.StartHandshake(key, hog, func(*admit.Handshake) { evicted[i]++ }))
	}
	small := k.StartHandshake(key, proc(11), func(*admit.Handshake) { t.Error("the smaller process evicted") })
	small2 := k.StartHandshake(key, proc(11), func(*admit.Handshake) { t.Error("the smaller process evicted") })
	if slices.Contains(hs, nil) || small == nil || small2 == nil {
		t.Fatal("a handshake under the cap refused")
	}
	if k.StartHandshake(key, hog, nil) != nil {
		t.Fatal("the hogging process admitted over the cap")
	}
	for i := range 3 {
		if k.StartHandshake(key, proc(20+i), func(*admit.Handshake) { t.Error("a newcomer evicted") }) == nil {
			t.Fatalf("newcomer %d refused", i)
		}
		if evicted[i] != 1 || evicted[i+1] != 0 {
			t.Fatalf("after newcomer %d: evictions %v, want the hog's oldest", i, evicted[:4])
		}
	}
	k.EndHandshake(hs[0]) // evicted already: frees nothing
	if k.StartHandshake(key, hog, nil) != nil {
		t.Fatal("an evicted connection's end freed a slot")
	}
	k.EndHandshake(small)
	if k.StartHandshake(key, hog, func(*admit.Handshake) {}) == nil {
		t.Fatal("refused after one ended")
	}
	if k.Rejected() != 2 {
		t.Fatalf("rejected %d, want 2", k.Rejected())
	}
}

// TestRefuse: a refused connection gets the server's preface and a GOAWAY
// with the reason, its write side shut, and is closed after RefuseLinger,
// or at once by Close.
func TestRefuse(t *testing.T) {
	k := newCore(admit.Limits{}, nil)
	a, b := net.Pipe()
	defer b.Close()
	go k.Refuse(a, "ip 10.0.0.5", wire.Settings{}, "why", status.PermissionDenied)
	want := wire.AppendPreface(nil, wire.Settings{}.WithDefaults())
	want = wire.AppendFrame(want, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 0, uint32(status.PermissionDenied), "why"))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(b, buf); err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("read %q, %v; want %q", buf, err, want)
	}
	time.Sleep(10 * time.Millisecond)
	k.Close()
	b.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := b.Read(buf); err != io.EOF {
		t.Fatalf("after Close: %v, want EOF", err)
	}
	time.Sleep(admit.RefuseLinger + 50*time.Millisecond) // the linger timer finds it closed
}

// TestEngines: a connection is shed by the engine that admitted it, also
// once another engine took a removed one's slot.
func TestEngines(t *testing.T) {
	k := newCore(admit.Limits{MaxConnsPerUID: 1}, nil)
	defer k.Close()
	var logA, logB, logC shedLog
	a := logA.engine(k)
	b := logB.engine(k)
	var ca, cb admit.Conn
	old := admit.Now() - 2*uint32(admit.ShedIdleAfter/time.Millisecond)
	ca.SetActive(old)
	if why, _ := k.Admit(&ca, unixPeer(1, 1), a); why != "" {
		t.Fatal(why)
	}
	k.Release(&ca)
	k.RemoveEngine(a)
	c := logC.engine(k) // a's slot
	cb.SetActive(old)
	if why, _ := k.Admit(&cb, unixPeer(1, 1), b); why != "" {
		t.Fatal(why)
	}
	var cc admit.Conn
	if why, _ := k.Admit(&cc, unixPeer(1, 2), c); why != "" {
		t.Fatalf("not admitted by shedding: %s", why)
	}
	if len(logA.shed) != 0 || len(logC.shed) != 0 || len(logB.shed) != 1 || logB.shed[0] != &cb {
		t.Fatalf("shed by a %v, b %v, c %v; want only cb by b", logA.shed, logB.shed, logC.shed)
	}
}
