package rpc

import (
	"context"
	"log/slog"
	"net"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/eventloop"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/peer"
)

// Event-loop mode (ServerOptions.EventLoop) serves the connections of a
// listener from an epoll loop (package internal/eventloop, Linux) instead
// of a goroutine per connection. This file is the server's side of it:
// loopCore, the eventloop.Core the loops reach the server through, and
// loopSession, the eventloop.Session of one connection. See
// ARCHITECTURE.md, "Event loop".

// serveEventLoop serves l from an event loop until the server closes.
// handled is false when the loop cannot serve l: Serve then uses the
// goroutine mode.
func (s *Server) serveEventLoop(l net.Listener) (handled bool, err error) {
	handled, err = eventloop.Serve((*loopCore)(s), l, &eventloop.Options{
		Settings:         s.opts.Settings,
		HandshakeTimeout: s.handshakeTimeout(),
		ReadTimeout:      eventloop.ReadTimeout(s.opts.ReadTimeout),
		IdleTimeout:      s.opts.IdleTimeout,
		SharedMin:        s.opts.SharedThreshold,
		MaxShared:        s.opts.MaxSharedBytes,
		Counters:         &s.ev,
	})
	if err == eventloop.ErrServerClosed {
		err = ErrServerClosed
	}
	return handled, err
}

// adoptWebSocket hands conn, a WebSocket connection that the HTTP bridge
// just upgraded (transport.UpgradeWebSocket, before any I/O on it), to the
// event loop that handed the bridge sc's connection, if there is one; sc
// is uncounted, since the loop counts the connection again. It reports
// whether conn was taken (and is no longer the caller's).
func (s *Server) adoptWebSocket(sc *serverConn, conn net.Conn) bool {
	hc, ok := sc.conn.(*eventloop.HandoffConn)
	return ok && hc.Adopt(conn, func() { s.removeConn(sc) })
}

// loopCore is a Server as its event loops see it.
type loopCore Server

var _ eventloop.Core = (*loopCore)(nil)

func (k *loopCore) Admission() *admit.Core        { return k.adm }
func (k *loopCore) Logger() *slog.Logger          { return k.logger }
func (k *loopCore) Closing() <-chan struct{}      { return k.closed }
func (k *loopCore) Context() context.Context      { return k.ctx }
func (k *loopCore) ServeConn(c net.Conn)          { (*Server)(k).ServeConn(c) }
func (k *loopCore) OnRequest(st *mux.Stream) bool { return (*Server)(k).startCall(st) }
func (k *loopCore) Run(st *mux.Stream)            { runCall(st) }
func (k *loopCore) Dispatch(st *mux.Stream)       { (*Server)(k).dispatch(st.Owner.(*serverCall)) }

func (k *loopCore) Go(fn func()) {
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		fn()
	}()
}

func (k *loopCore) NewSession(c net.Conn, p *peer.Peer, adm *admit.Conn, cfg *mux.Config) eventloop.Session {
	s := (*Server)(k)
	sc := &serverConn{srv: s, conn: c, peer: p, adm: adm}
	sc.work.Started()
	sc.ctx = peer.NewContext(s.ctx, p)
	sc.callConfig(cfg)
	return (*loopSession)(sc)
}

// loopSession is a serverConn as an event loop sees it. Its admission is
// in the loop's record of the connection, which outlives the session.
type loopSession serverConn

func (ls *loopSession) Work() (calls, running int32, last uint32) {
	w := ls.work.Load()
	return int32(w), int32(w >> 32), ls.work.Last()
}

func (ls *loopSession) Register(sess *mux.Session) (closing bool) {
	sc := (*serverConn)(ls)
	s := sc.srv
	sc.lim = sc.adm.Limiter()
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.sess = sess
	if s.conns == nil {
		s.conns = map[*admit.Conn]*serverConn{}
	}
	s.conns[sc.adm] = sc
	s.loopPeak = max(s.loopPeak, len(s.conns))
	return s.closing
}

func (ls *loopSession) Unregister() {
	s := ls.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, ls.adm)
	if n := len(s.conns); s.loopPeak >= 4096 && n < s.loopPeak/8 {
		// Most sessions hibernated after a burst: give back the room the
		// map grew to.
		m := make(map[*admit.Conn]*serverConn, n)
		for k, sc := range s.conns {
			m[k] = sc
		}
		s.conns, s.loopPeak = m, n
	}
}
