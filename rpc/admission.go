package rpc

import (
	"log/slog"
	"net"
	"time"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
)

// Admission: every engine admits its connections through the server's
// admit.Core (s.adm), which holds the policy, the connection limits, idle
// shedding, the handshake and refusal caps, the rate limiters and the
// drain. This file is the goroutine mode's side of it; the event loop's is
// in internal/eventloop (admit_linux.go).

func (s *Server) initAdmission() {
	s.adm = admit.New(admit.Limits{
		MaxConns:       s.opts.MaxConns,
		MaxConnsPerUID: s.opts.MaxConnsPerUID,
		MaxConnsPerPID: s.opts.MaxConnsPerPID,
		CallRate:       s.opts.CallRate,
		CallBurst:      s.opts.CallBurst,
		Metrics:        s.met,
	}, s.opts.Policy, func() *slog.Logger { return s.logger })
	s.goEng = s.adm.NewEngine(s.shedConn)
	s.met.SetCollect(func(x *metrics.Snapshot) {
		s.adm.Collect(x)
		s.ev.Collect(x)
		x.Files, x.SharedBytes = mux.FilesHeld.Load(), mux.SharedHeld.Load()
	})
}

// refuseAtAccept refuses, as ServeConn would, a plain unix or TCP
// connection whose peer p the policy refuses, from the accepting goroutine:
// at most maxRefusingAtAccept such peers at once are answered in their own
// protocol (refuseConn, which may wait RefusePeekWait for their first
// bytes, on a goroutine of its own); the others get the warren refusal at
// once (admit.Core.Refuse, within its caps), so that a flood of refused
// peers holds few goroutines and descriptors.
func (s *Server) refuseAtAccept(conn net.Conn, p *peer.Peer) bool {
	if p.Network != "unix" && p.Network != "tcp" || p.TLS != nil {
		return false
	}
	err := s.adm.Authorize(p)
	if err == nil {
		return false
	}
	key, reason := admit.PeerKey(p), err.Error()
	s.adm.Refused(p, key, reason)
	if s.refusing.Add(1) > maxRefusingAtAccept {
		s.refusing.Add(-1)
		s.adm.Refuse(conn, key, s.opts.Settings, reason, status.PermissionDenied)
		return true
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.refusing.Add(-1)
		s.refuseConn(conn, key, reason, status.PermissionDenied)
	}()
	return true
}

// maxRefusingAtAccept bounds the refused peers answered in their protocol.
const maxRefusingAtAccept = 16

// shedConn sheds c, a connection served by a goroutine that the admission
// core has uncounted to make room for another: it is told GOAWAY
// (Unavailable: a client reconnects when it next calls) and closed shortly
// after.
func (s *Server) shedConn(c *admit.Conn, _ int32) {
	s.wg.Add(1)
	go func() { // not under the lock Admit may be called with
		defer s.wg.Done()
		s.mu.Lock()
		sc := s.conns[c]
		var sess *mux.Session
		if sc != nil {
			sess = sc.sess
		}
		s.mu.Unlock()
		switch {
		case sess != nil:
			sess.GoAway(status.Unavailable, admit.ShedMessage)
			time.Sleep(100 * time.Millisecond)
			sess.Close()
		case sc != nil:
			sc.conn.Close()
		}
	}()
}

// addCalls adds d to sc's calls, returning their new count.
func (sc *serverConn) addCalls(d int32) int32 { return int32(sc.work.Add(int64(d))) }

// addRunning adds d to sc's handlers running.
func (sc *serverConn) addRunning(d int64) { sc.work.Add(d * admit.RunningOne) }

// handshakeDone ends sc's count among the connections in their handshake.
func (sc *serverConn) handshakeDone() {
	if sc.handshake != nil {
		sc.handshake()
	}
}
