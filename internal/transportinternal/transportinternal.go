// Package transportinternal gives warren's event loop what it needs of
// package transport beyond transport's API: the listening socket and the
// opening handshake of ws:// listeners, the connection under an upgraded
// WebSocket, and a listener's policy for the connections accepted on its
// raw socket. Package transport sets the functions at init, so they are
// set in every program that can hold a transport.Listener or Conn.
//
// (The session reaches a transport connection's WriteBuffers and
// ReadsResume through rawio.View.)
package transportinternal

import (
	"context"
	"net"
	"syscall"

	"github.com/warrenipc/warren/peer"
)

var (
	// WSSocket returns the listening socket of a ws:// (not wss://)
	// transport.Listener. SyscallConn refuses WebSocket listeners: their
	// connections need the opening handshake first.
	WSSocket func(l net.Listener) (syscall.RawConn, error)

	// WSHandshake runs the server side of a ws:// listener's opening
	// handshake on conn, a connection accepted from its WSSocket, bounded
	// by ctx and the listener's HandshakeTimeout, and returns the bytes
	// that arrived after the request. On error the caller closes conn.
	WSHandshake func(ctx context.Context, l net.Listener, conn net.Conn) (buffered []byte, err error)

	// WSDetach returns, for a connection from transport.UpgradeWebSocket
	// on which no I/O has happened, the connection it runs on and the
	// bytes that arrived after the request; the WebSocket connection must
	// not be used afterwards, and the caller owns the returned one. ok is
	// false for other connections.
	WSDetach func(c net.Conn) (raw net.Conn, buffered []byte, ok bool)

	// AdmitPeer applies a transport.Listener's policy to p, the peer of a
	// connection accepted on the listener's socket (SyscallConn or
	// WSSocket), as Accept does: a refused peer is logged and counted in
	// the listener's Stats, and the caller closes its connection; an
	// allowed one is counted as accepted. p.LocalAddr should be the
	// listener's Addr for socket files (the kernel reports the private
	// name the socket was bound under).
	AdmitPeer func(l net.Listener, p *peer.Peer) error
)
