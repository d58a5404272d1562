// Package eventloop is the server's event-loop engine
// (rpc.ServerOptions.EventLoop): on Linux, one epoll loop per Serve call
// serves the connections of a unix, tcp or ws:// listener, and WebSocket
// connections the HTTP bridge upgraded, instead of a goroutine per
// connection. An idle connection is only its record in the loop's table;
// a session (mux.NewFed) exists only while it is active.
//
// The loop reaches the server through Core, which package rpc implements
// (rpc/eventloop.go): admission (admit.Core), the server's side of each
// session (Session, and the mux.Config callbacks that make calls), running
// calls inline or on workers, the hand-off of HTTP connections to the
// goroutine mode (HandoffConn), and shutdown. On other platforms Serve
// reports that it cannot serve, and the server uses the goroutine mode.
// See ARCHITECTURE.md, "Event loop".
package eventloop

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/transportinternal"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/wire"
)

// Core is the server a loop serves.
type Core interface {
	// Admission admits, counts and releases every connection the loop
	// accepts or adopts.
	Admission() *admit.Core
	// Logger receives the loop's errors.
	Logger() *slog.Logger
	// Go runs fn on a new goroutine that the server's Close waits for.
	Go(fn func())
	// Closing is closed when the server begins closing (Shutdown or
	// Close): the loop stops accepting and closes its idle connections.
	Closing() <-chan struct{}
	// Context ends when the server closes: the loop closes every
	// connection and Serve returns ErrServerClosed.
	Context() context.Context
	// NewSession returns the server's side of a session on c, the
	// connection of peer p whose admission is adm, and sets cfg's
	// NewStream, OnStream, OnReset and OnEnd, which start and end its
	// calls.
	NewSession(c net.Conn, p *peer.Peer, adm *admit.Conn, cfg *mux.Config) Session
	// OnRequest is called once the request of st's call is in. It
	// reports whether the call is to run on the loop (Run); if not, the
	// core has handed it to a worker, or it is not a call to start.
	OnRequest(st *mux.Stream) (inline bool)
	// Run runs st's call, which OnRequest left to the loop, on the
	// calling goroutine.
	Run(st *mux.Stream)
	// Dispatch runs st's call, which OnRequest left to the loop, on a
	// worker goroutine.
	Dispatch(st *mux.Stream)
	// ServeConn serves c, a connection the loop handed off (*HandoffConn:
	// its peer sent an HTTP request), in goroutine mode, and returns when
	// it ends.
	ServeConn(c net.Conn)
}

// Session is the server's side of an active connection's session.
type Session interface {
	// Work returns the session's calls (admitted and not ended), their
	// handlers still running, and the stamp (admit.Now) of its last call:
	// the loop hibernates a session only when it has no calls and no
	// handlers running.
	Work() (calls, running int32, last uint32)
	// Register makes sess, the session of an admitted connection, one of
	// the server's (Stats, Shutdown and Close see it), and reports
	// whether the server is closing.
	Register(sess *mux.Session) (closing bool)
	// Unregister undoes Register: the session hibernated or ended.
	Unregister()
}

// Options configure a loop.
type Options struct {
	// Settings are the server's (before WithDefaults).
	Settings wire.Settings
	// HandshakeTimeout bounds a new connection's handshake; it must be
	// positive.
	HandshakeTimeout time.Duration
	// ReadTimeout bounds how long a frame may take to arrive once its
	// first byte has; 0: no bound.
	ReadTimeout time.Duration
	// IdleTimeout closes a connection without calls that has sent nothing
	// for this long; 0: never.
	IdleTimeout time.Duration
	// SharedMin and MaxShared are mux.Config's.
	SharedMin int
	MaxShared int64
	// Counters, shared by the loops of one server, count what they do.
	Counters *Counters
}

// Counters count what a server's loops do.
type Counters struct {
	Loops        atomic.Int32  // loops running
	Open         atomic.Int32  // loops running that have not begun closing
	Hibernations atomic.Uint64 // sessions that went idle and were dropped
	Wakes        atomic.Uint64 // sessions built for a connection that sent something
	Takeovers    atomic.Uint64 // loops taken over from a call that ran too long inline
}

// Started counts the loops started in the process, so that the tests can
// tell that one served them.
var Started atomic.Uint64

// ErrServerClosed is Serve's error once the server closed (Core.Context
// ended).
var ErrServerClosed = errors.New("warren: server closed")

// HandoffConn is a connection the loop hands to the goroutine mode
// (Core.ServeConn) because its peer sent an HTTP request: it replays the
// bytes the loop has read, and carries the peer the loop identified.
type HandoffConn struct {
	net.Conn
	prefix []byte
	peer   *peer.Peer
	// adopt hands a WebSocket connection upgraded on the bridge back to
	// the loop: the net.Conn (which it closes), the bytes read past the
	// opening handshake and the peer. It reports whether the loop took it.
	adopt func(net.Conn, []byte, *peer.Peer) bool
}

// Adopt hands conn, a WebSocket connection that the HTTP bridge just
// upgraded on c (transport.UpgradeWebSocket, before any I/O on it), to the
// loop that handed c off. release runs first, once conn is detached: c is
// to be uncounted, since the loop counts the connection again. It reports
// whether conn was taken (and is no longer the caller's).
func (c *HandoffConn) Adopt(conn net.Conn, release func()) bool {
	if c.adopt == nil {
		return false
	}
	_, buffered, ok := transportinternal.WSDetach(conn)
	if !ok {
		return false
	}
	// Bytes the bridge had not read yet follow those it buffered.
	buffered = append(buffered, c.prefix...)
	c.prefix = nil
	release()
	c.adopt(c.Conn, buffered, c.peer)
	return true
}

func (c *HandoffConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// Peer returns the peer the loop identified.
func (c *HandoffConn) Peer() *peer.Peer { return c.peer }

// NetConn returns the underlying connection.
func (c *HandoffConn) NetConn() net.Conn { return c.Conn }

// CloseWrite closes the write side, which net/http uses to end a response.
func (c *HandoffConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Collect sets s.Loop from c.
func (c *Counters) Collect(s *metrics.Snapshot) {
	s.Loop = metrics.LoopStats{
		Loops: int64(c.Loops.Load()), Hibernations: c.Hibernations.Load(),
		Wakes: c.Wakes.Load(), Takeovers: c.Takeovers.Load(),
	}
}
