package rpc

import (
	"log/slog"
	"time"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/mux"
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
	}, s.opts.Policy, func() *slog.Logger { return s.logger })
	s.goEng = admit.NewEngine(s.shedConn)
}

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

// handshakeDone ends sc's count among the connections in their handshake.
func (sc *serverConn) handshakeDone() {
	if sc.handshake != nil {
		sc.handshake()
	}
}
