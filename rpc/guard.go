package rpc

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/warrenipc/warren/internal/refusallog"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Bounds on what peers that are not (yet) served can hold. They are per
// peer key: a uid for unix peers, an IP address for TCP peers.
const (
	// maxHandshakesPerPeer bounds the connections of one peer that have
	// not completed the warren handshake (or sent an HTTP request): a
	// client that connects and says nothing holds a descriptor until the
	// handshake timeout, and no more than this many at once.
	maxHandshakesPerPeer = 256
	// maxRefusingPerPeer and maxRefusing bound the refused connections
	// still open while their refusal is delivered (refuseLinger); beyond
	// them a refused connection gets the same write and is closed at once.
	maxRefusingPerPeer = 64
	maxRefusing        = 256
	// refuseLinger is how long a refused connection stays open, its write
	// side shut, so that the client can send its preface and read the
	// reason; nothing is read from it.
	refuseLinger = 500 * time.Millisecond
	// shedIdleAfter is how long a connection must have been without calls
	// before it is shed to make room for a new one (see addConn).
	shedIdleAfter = time.Second
)

// guard holds the server's counts of connections not (yet) served, and the
// refusal log.
type guard struct {
	refusals *refusallog.Log

	mu          sync.Mutex // protects following
	handshaking map[string]int
	refusing    map[string]int
	lingering   map[net.Conn]struct{}
	closed      bool
}

// peerKey names the peer whose connections count together.
func peerKey(p *peer.Peer) string {
	switch {
	case p.HasCred:
		return "uid " + strconv.Itoa(p.UID)
	case p.RemoteAddr != nil:
		if ta, ok := p.RemoteAddr.(*net.TCPAddr); ok {
			return "ip " + ta.IP.String()
		}
		return "addr " + p.RemoteAddr.String()
	}
	return "unknown"
}

func (s *Server) initGuard() {
	s.guard.refusals = refusallog.New(func() *slog.Logger { return s.logger }, "warren: connection refused", 0)
}

// startHandshake counts a connection of key in its handshake, or reports
// that key has too many.
func (g *guard) startHandshake(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handshaking[key] >= maxHandshakesPerPeer {
		return false
	}
	if g.handshaking == nil {
		g.handshaking = map[string]int{}
	}
	g.handshaking[key]++
	return true
}

func (g *guard) endHandshake(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handshaking[key]--; g.handshaking[key] <= 0 {
		delete(g.handshaking, key)
	}
}

// logRefusal logs a refused connection, as a summary once its peer is
// refused repeatedly.
func (s *Server) logRefusal(p *peer.Peer, key, reason string) {
	s.guard.refusals.Refused(key, func() []any {
		return []any{"peer", p.String(), "reason", reason}
	})
}

// refuseConn answers a connection the policy or a limit refused without
// reading a byte from it: the server's preface and a GOAWAY carrying the
// reason (PermissionDenied for the policy, ResourceExhausted for a limit),
// in one write that does not wait for room; then it shuts the write side
// and closes the connection after refuseLinger, so that a warren client
// reports the reason. Any other client sees the connection close. Past
// maxRefusingPerPeer or maxRefusing, it closes the connection right after
// the write.
func (s *Server) refuseConn(sc *serverConn, conn net.Conn, key, reason string) {
	g := &s.guard
	g.mu.Lock()
	total := len(g.lingering)
	ok := !g.closed && g.refusing[key] < maxRefusingPerPeer && total < maxRefusing
	if ok {
		if g.refusing == nil {
			g.refusing = map[string]int{}
			g.lingering = map[net.Conn]struct{}{}
		}
		g.refusing[key]++
		g.lingering[conn] = struct{}{}
	}
	g.mu.Unlock()
	code := status.ResourceExhausted
	switch {
	case peer.Authorize(s.opts.Policy, sc.peer) != nil:
		code = status.PermissionDenied
	case reason == shuttingDown:
		code = status.Unavailable // a drain, not a limit: the client may retry elsewhere
	}
	b := wire.AppendPreface(make([]byte, 0, 128+len(reason)), s.opts.Settings.WithDefaults())
	b = wire.AppendFrame(b, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 0, uint32(code), reason))
	conn.SetWriteDeadline(time.Now().Add(refuseLinger))
	conn.Write(b)
	if !ok {
		conn.Close()
		return
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	time.AfterFunc(refuseLinger, func() {
		g.mu.Lock()
		_, open := g.lingering[conn]
		delete(g.lingering, conn)
		if g.refusing[key]--; g.refusing[key] <= 0 {
			delete(g.refusing, key)
		}
		g.mu.Unlock()
		if open {
			conn.Close()
		}
	})
}

// closeGuard closes the refused connections still open and flushes the
// refusal log.
func (s *Server) closeGuard() {
	g := &s.guard
	g.mu.Lock()
	g.closed = true
	conns := g.lingering
	g.lingering = nil
	g.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	g.refusals.Close()
}

// connsOverLimit reports whether sc may not be added under the per-uid and
// per-pid limits, after shedding one idle connection if that makes room.
// s.mu is held.
func (s *Server) connsOverLimit(sc *serverConn) string {
	if sc.uid < 0 {
		return ""
	}
	pid := sc.peer.PID
	uidFull := s.perUID[sc.uid] >= s.opts.MaxConnsPerUID
	pidFull := pid > 0 && s.perPID[pid] >= s.opts.MaxConnsPerPID
	if !uidFull && !pidFull {
		return ""
	}
	if s.shedIdleLocked(sc.uid, pid, pidFull) {
		return ""
	}
	if uidFull {
		return fmt.Sprintf("too many connections from uid %d (limit %d)", sc.uid, s.opts.MaxConnsPerUID)
	}
	return fmt.Sprintf("too many connections from pid %d of uid %d (limit %d per process)", pid, sc.uid, s.opts.MaxConnsPerPID)
}

// shedIdleLocked closes one connection of uid (of pid, if onlyPID) that
// has had no call for shedIdleAfter, choosing in the process with the most
// connections and then the longest idle, and reports whether it found one.
// The connection is uncounted at once, told GOAWAY (Unavailable: a client
// reconnects when it next calls) and closed shortly after. s.mu is held.
func (s *Server) shedIdleLocked(uid, pid int, onlyPID bool) bool {
	cutoff := time.Now().Add(-shedIdleAfter).UnixNano()
	var victim *serverConn
	for c := range s.conns {
		if c.uid != uid || onlyPID && c.peer.PID != pid ||
			c.calls.Load() != 0 || c.running.Load() != 0 || c.active.Load() > cutoff {
			continue
		}
		if victim == nil || s.perPID[c.peer.PID] > s.perPID[victim.peer.PID] ||
			s.perPID[c.peer.PID] == s.perPID[victim.peer.PID] && c.active.Load() < victim.active.Load() {
			victim = c
		}
	}
	if victim == nil {
		return false
	}
	s.removeConnLocked(victim)
	s.shed.Add(1)
	s.wg.Add(1)
	go func() { // GoAway may wait for the writer: not under s.mu
		defer s.wg.Done()
		if sess := victim.sess; sess != nil {
			sess.GoAway(status.Unavailable, "idle connection closed to make room for another of the same user")
			time.Sleep(100 * time.Millisecond)
			sess.Close()
		} else {
			victim.conn.Close()
		}
	}()
	return true
}

// touch records activity on sc, for shedIdleLocked.
func (sc *serverConn) touch() { sc.active.Store(time.Now().UnixNano()) }

// handshakeDone ends sc's count among the connections in their handshake.
func (sc *serverConn) handshakeDone() {
	if sc.handshake != nil {
		sc.handshake()
	}
}
