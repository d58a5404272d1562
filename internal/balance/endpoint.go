package balance

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// Endpoint is one server of a Pool: its address and its connection, opened
// on first use and reopened with backoff after a failure.
type Endpoint struct {
	Addr  string
	p     *Pool
	dial  *transport.DialConfig
	calls atomic.Int64                // calls in flight
	cur   atomic.Pointer[mux.Session] // sess, read without mu by calls

	mu       sync.Mutex // protects following
	sess     *mux.Session
	dialing  chan struct{} // closed when the attempt in progress ends
	lastErr  error         // error of the last failed attempt
	retryAt  time.Time     // no new attempt before this
	backoff  time.Duration
	closed   bool
	removed  bool           // no longer resolved: closed once idle
	sessions []*mux.Session // every session opened, closed by close
	pureOf   *mux.Session   // the session pure was read from
	pure     map[string]bool
}

func newEndpoint(p *Pool, addr, serverName string) *Endpoint {
	e := &Endpoint{Addr: addr, p: p, dial: p.cfg.Dial}
	if serverName != "" && e.dial != nil && e.dial.TLS != nil && e.dial.TLS.ServerName == "" {
		// A resolved address is an IP: the certificate names the host.
		d := *e.dial
		d.TLS = d.TLS.Clone()
		d.TLS.ServerName = serverName
		e.dial = &d
	} else if serverName != "" && e.dial == nil && p.cfg.Scheme == transport.SchemeTLS {
		e.dial = &transport.DialConfig{TLS: &tls.Config{ServerName: serverName}}
	}
	return e
}

// Calls returns the number of calls in flight on e.
func (e *Endpoint) Calls() int64 { return e.calls.Load() }

// Begin and End bracket a call made on e.
func (e *Endpoint) Begin() { e.calls.Add(1) }

func (e *Endpoint) End() {
	if e.calls.Add(-1) == 0 {
		e.mu.Lock()
		idle := e.removed
		e.mu.Unlock()
		if idle {
			e.close()
		}
	}
}

// live returns e's session if it can take new calls.
func live(s *mux.Session) bool {
	if s == nil || s.Err() != nil {
		return false
	}
	_, _, away := s.GoAwayReason()
	return !away
}

// rank orders endpoints for a new call: 0 connected or free to connect,
// 1 draining or waiting out a backoff.
func (e *Endpoint) rank(now time.Time) int {
	s := e.cur.Load()
	if live(s) {
		return 0
	}
	if s != nil {
		if code, _, away := s.GoAwayReason(); away && code == status.Unavailable {
			return 1
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dialing == nil && now.Before(e.retryAt) {
		return 1
	}
	return 0
}

// Session returns a live session, connecting if needed.
func (e *Endpoint) Session(ctx context.Context) (*mux.Session, error) {
	if s := e.cur.Load(); live(s) {
		return s, nil
	}
	for {
		e.mu.Lock()
		if e.closed || e.removed {
			e.mu.Unlock()
			if e.removed {
				return nil, errGone
			}
			return nil, ErrClosed
		}
		if s := e.sess; s != nil {
			if live(s) {
				e.mu.Unlock()
				return s, nil
			}
			e.sess = nil
			e.cur.Store(nil)
			e.p.lost()
			if code, msg, away := s.GoAwayReason(); away && code == status.Unavailable {
				// The server is shutting down: it refuses new connections
				// until it is gone, so wait before trying it again.
				e.failed(&GoAwayError{Code: code, Message: msg})
			}
		}
		if ch := e.dialing; ch != nil {
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if wait := time.Until(e.retryAt); wait > 0 {
			err := e.lastErr
			e.mu.Unlock()
			if !e.p.cfg.WaitForReady {
				return nil, &status.Error{Code: status.Unavailable, Message: err.Error(), Cause: err}
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		e.dialing = ch
		e.mu.Unlock()

		s, err := e.connect(ctx)

		e.mu.Lock()
		e.dialing = nil
		close(ch)
		if err == nil {
			e.backoff = 0
			e.sessions = append(e.sessions, s)
			e.sess = s
			e.prune()
			closed := e.closed
			if !closed {
				e.cur.Store(s)
				e.p.connected.Store(true)
			}
			e.mu.Unlock()
			if closed {
				s.Close()
				return nil, ErrClosed
			}
			return s, nil
		}
		if ctx.Err() != nil {
			// This caller gave up; that says nothing about the server.
			e.mu.Unlock()
			return nil, ctx.Err()
		}
		e.failed(err)
		e.mu.Unlock()
		e.p.lost()
		if !e.p.cfg.WaitForReady {
			return nil, &status.Error{Code: status.Unavailable, Message: err.Error(), Cause: err}
		}
	}
}

// failed starts or lengthens e's backoff after err. e.mu is held.
func (e *Endpoint) failed(err error) {
	e.backoff = min(max(2*e.backoff, e.p.cfg.MinBackoff), e.p.cfg.MaxBackoff)
	e.retryAt = time.Now().Add(e.backoff)
	e.lastErr = err
}

// prune forgets sessions that have ended. e.mu is held.
func (e *Endpoint) prune() {
	live := e.sessions[:0]
	for _, s := range e.sessions {
		if s.Err() == nil {
			live = append(live, s)
		} else {
			s.Close()
		}
	}
	clear(e.sessions[len(live):])
	e.sessions = live
}

func (e *Endpoint) connect(ctx context.Context) (*mux.Session, error) {
	var conn net.Conn
	var err error
	if e.p.cfg.Dialer != nil {
		conn, err = e.p.cfg.Dialer(ctx, e.Addr)
	} else {
		var tc *transport.Conn
		tc, err = transport.Dial(ctx, e.Addr, e.dial)
		if tc != nil {
			conn = tc
		}
	}
	if err != nil {
		return nil, err
	}
	// The handshake honours ctx too: a server that accepts and never
	// answers must not hold a call past its deadline. Closing the
	// connection ends the preface exchange whatever deadline mux set.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	s, err := mux.Client(conn, e.p.cfg.Mux)
	if !stop() {
		if s != nil {
			s.Close()
		}
		return nil, ctx.Err()
	}
	return s, err
}

// close closes e's connections and waits for an attempt in progress.
func (e *Endpoint) close() {
	e.mu.Lock()
	e.closed = true
	sessions := e.sessions
	e.sessions = nil
	e.sess = nil
	e.cur.Store(nil)
	dialing := e.dialing
	e.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	if dialing != nil {
		<-dialing
		e.mu.Lock()
		sessions = e.sessions
		e.sessions = nil
		e.mu.Unlock()
		for _, s := range sessions {
			s.Close()
		}
	}
}

// Current returns e's session, nil if none (for tests).
func (e *Endpoint) Current() *mux.Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sess
}
