package rpc

import (
	"context"
	"sync"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/status"
)

// Shutdown (graceful) and Close (immediate).

// Shutdown stops accepting connections, tells every connected client to go
// away, waits for the calls in progress to finish and their replies to be
// sent, and then closes every connection. If ctx ends first, Shutdown closes
// everything at once and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	sessions := s.beginClose()
	for _, sess := range sessions {
		sess.GoAway(status.Unavailable, "server is shutting down")
	}
	lingered := s.linger(ctx, sessions)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var err error
	for s.calls.Load() > 0 || s.replying.Load() > 0 { // calls first: see serverCall.replyHTTP
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-tick.C:
			continue
		}
		break
	}
	if err == nil {
		select {
		case <-lingered:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil {
		d, hasDeadline := ctx.Deadline()
		for _, sess := range s.sessions() {
			if hasDeadline {
				sess.Conn().SetWriteDeadline(d) // a peer that stops reading cannot hold Shutdown
			}
			sess.Flush()
		}
	}
	s.closeAll()
	return err
}

// drainLinger bounds how long Shutdown waits for a peer to acknowledge
// the PING that follows its GOAWAY.
const drainLinger = time.Second

// linger sends each session a PING after its GOAWAY and returns a channel
// closed once every peer has acknowledged it, has closed its connection, or
// drainLinger has passed. A peer processes frames in order, so by its
// acknowledgement the server has read every call the peer opened before it
// saw the GOAWAY, and refused those above the GOAWAY's last stream id:
// closing after that leaves no call unread and unanswered (an unread call
// would also make the kernel reset the connection).
func (s *Server) linger(ctx context.Context, sessions []*mux.Session) <-chan struct{} {
	done := make(chan struct{})
	ctx, cancel := context.WithTimeout(ctx, drainLinger)
	var wg sync.WaitGroup
	for _, sess := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess.Ping(ctx)
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(done)
	}()
	return done
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
