package rpc

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/transportinternal"
	"github.com/warrenipc/warren/peer"
)

// Event-loop mode (ServerOptions.EventLoop) serves the connections of a unix
// or tcp listener from one epoll loop per Serve call instead of a goroutine
// per connection. The Linux implementation is in eventloop_linux.go; on other
// platforms, and for listeners the loop cannot handle, Serve falls back to
// the goroutine mode. See ARCHITECTURE.md, "Event loop".

// evServer is a Server's event-loop state.
type evServer struct {
	// peak is the most entries Server.conns had since it was last
	// rebuilt: a map never gives back the room it grew to, so once most
	// sessions have hibernated it is copied into a smaller one. Protected
	// by Server.mu.
	peak int

	loops        atomic.Int32  // event loops running
	hibernations atomic.Uint64 // sessions that went idle and were dropped
	wakes        atomic.Uint64 // sessions rebuilt for a connection that sent something
	takeovers    atomic.Uint64 // loops taken over from a call that ran too long inline
}

// loopsStarted counts the event loops started, so that the tests can tell
// that one served them.
var loopsStarted atomic.Uint64

// defaultReadTimeout is ServerOptions.ReadTimeout's default.
const defaultReadTimeout = 30 * time.Second

func (s *Server) readTimeout() time.Duration {
	switch {
	case s.opts.ReadTimeout == 0:
		return defaultReadTimeout
	case s.opts.ReadTimeout < 0:
		return 0
	}
	return s.opts.ReadTimeout
}

func newServerStream() *mux.Stream {
	c := new(serverCall)
	c.st.Owner = c
	return &c.st
}

func resetServerCall(st *mux.Stream, _ error) { st.Owner.(*serverCall).abandon() }

// handoffConn is a connection the event loop hands to the goroutine mode (an
// HTTP request on a warren socket): it replays the bytes the loop has read,
// and carries the peer the loop identified.
type handoffConn struct {
	net.Conn
	prefix []byte
	peer   *peer.Peer
	// adopt hands a WebSocket connection upgraded on the bridge back to
	// the loop: the net.Conn (which it closes), the bytes read past the
	// opening handshake and the peer. It reports whether the loop took it.
	adopt func(net.Conn, []byte, *peer.Peer) bool
}

// adoptWebSocket hands conn, a WebSocket connection that the HTTP bridge
// just upgraded (transport.UpgradeWebSocket, before any I/O on it), to the
// event loop that handed the bridge sc's connection, if there is one; sc
// is uncounted, since the loop counts the connection again. It reports
// whether conn was taken (and is no longer the caller's).
func (s *Server) adoptWebSocket(sc *serverConn, conn net.Conn) bool {
	hc, ok := sc.conn.(*handoffConn)
	if !ok || hc.adopt == nil {
		return false
	}
	_, buffered, ok := transportinternal.WSDetach(conn)
	if !ok {
		return false
	}
	// Bytes the bridge had not read yet follow those it buffered.
	buffered = append(buffered, hc.prefix...)
	hc.prefix = nil
	s.removeConn(sc)
	hc.adopt(hc.Conn, buffered, hc.peer)
	return true
}

func (c *handoffConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// Peer returns the peer the event loop identified.
func (c *handoffConn) Peer() *peer.Peer { return c.peer }

// NetConn returns the underlying connection.
func (c *handoffConn) NetConn() net.Conn { return c.Conn }

// CloseWrite closes the write side, which net/http uses to end a response.
func (c *handoffConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
