package rpc

import (
	"context"
	"time"

	"github.com/warrenipc/warren/internal/drain"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/status"
)

// Shutdown (graceful) and Close (immediate).

// Shutdown stops accepting connections, tells every connected client to go
// away, waits for the calls in progress to finish and their replies to be
// sent, and then closes every connection. If ctx ends first, Shutdown closes
// everything at once and returns ctx's error.
//
// Each session gets a GOAWAY and then a PING (drain.Drain); a connection is
// closed only once its peer has acknowledged the PING, closed, or
// drain.Linger has passed, so that no call the peer sent before it saw
// the GOAWAY is left unread and unanswered.
func (s *Server) Shutdown(ctx context.Context) error {
	start := time.Now()
	const why = "server is shutting down"
	var dr drain.Drain
	dr.GoAway(ctx, s.beginClose(), status.Unavailable, why)
	s.http2.GoAway(s.ctx, &s.wg) // health NOT_SERVING first, then HTTP/2 GOAWAYs
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var err error
	for {
		// Sessions that finished their handshake after beginClose, and
		// warren connections still in it, drain too.
		late, handshaking := s.undrained(&dr)
		handshaking = handshaking || s.ev.Open.Load() > 0   // a loop has yet to register its idle sessions
		dr.GoAway(ctx, late, status.Unavailable, why)       // (their own GOAWAY is out already)
		busy := s.calls.Load() > 0 || s.replying.Load() > 0 // calls first: see serverCall.replyHTTP
		if !busy && dr.Acked() && (!handshaking || time.Since(start) > drain.Linger) {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick.C:
			continue
		}
		break
	}
	if err == nil {
		d, hasDeadline := ctx.Deadline()
		for _, sess := range s.sessions() {
			if hasDeadline {
				sess.Conn().SetWriteDeadline(d) // a peer that stops reading cannot hold Shutdown
			}
			sess.Flush()
		}
		s.http2.Close(ctx) // their peers close first: no reset
	}
	s.closeAll()
	return err
}

// undrained returns the sessions not yet in dr, and whether a connection
// that may speak warren is still in its handshake.
func (s *Server) undrained(dr *drain.Drain) (late []*mux.Session, handshaking bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.conns {
		switch {
		case sc.sess != nil && !dr.Sent(sc.sess):
			late = append(late, sc.sess)
		case sc.sess == nil && !sc.notWarren.Load():
			handshaking = true
		}
	}
	return late, handshaking
}

func (s *Server) sessions() []*mux.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessionsLocked()
}

// sessionsLocked returns the sessions past their handshake. s.mu is held.
func (s *Server) sessionsLocked() []*mux.Session {
	var out []*mux.Session
	for _, sc := range s.conns {
		if sc.sess != nil {
			out = append(out, sc.sess)
		}
	}
	return out
}

// Close closes every listener and connection at once. Calls in progress are
// canceled. Close waits for every goroutine the server started.
func (s *Server) Close() error {
	s.beginClose()
	s.closeAll()
	return nil
}

// beginClose stops the listeners and returns the open sessions.
func (s *Server) beginClose() []*mux.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing = true
		s.adm.Drain()
		close(s.closed)
	}
	for l := range s.listeners {
		(*l).Close()
	}
	return s.sessionsLocked()
}

func (s *Server) closeAll() {
	s.cancel()
	s.adm.Close()
	for {
		s.mu.Lock()
		var sessions []*mux.Session
		n := len(s.conns)
		for _, sc := range s.conns {
			if sc.sess != nil {
				sessions = append(sessions, sc.sess)
			} else {
				sc.conn.Close() // still in its handshake
			}
		}
		s.mu.Unlock()
		for _, sess := range sessions {
			sess.Close()
		}
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.wg.Wait()
}
