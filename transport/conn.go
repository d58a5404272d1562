package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/wire"
)

// Conn is a connection from Listen or Dial that knows its peer. It
// implements net.Conn. For tls and wss, no byte of application data moves
// before the handshake has completed and the policy has allowed the peer;
// for ws and wss on the server side, before the WebSocket opening handshake
// has completed: Read and Write call Handshake first.
//
// For ws and wss, Read and Write carry the byte stream in binary WebSocket
// messages (see the package documentation).
type Conn struct {
	raw              net.Conn    // the accepted or dialed connection
	tls              *tls.Conn   // non-nil for tls and wss
	ws               *wsConn     // non-nil for ws and wss
	wsAccept         *wsAccept   // the server's WebSocket handshake, until it has run
	io               net.Conn    // ws if set, else tls if set, else raw: all I/O goes here
	rio              *rawio.IO   // raw unix and tcp connections: Read and Write of raw (see internal/rawio)
	local            net.Addr    // overrides io.LocalAddr when set
	remote           net.Addr    // overrides io.RemoteAddr when set
	peer             *peer.Peer  // the other end
	srv              *Listener   // the Listener that accepted the Conn; nil if dialed
	policy           peer.Policy // applied to a tls peer after the handshake
	handshakeTimeout time.Duration

	handshakeOK atomic.Bool // the handshake completed and the policy allowed the peer
	closedByHS  atomic.Bool // Handshake failed and closed the connection

	hsMu   sync.Mutex // protects hsDone and hsErr; held for the whole handshake
	hsDone bool
	hsErr  error
}

var _ net.Conn = (*Conn)(nil)

// Peer describes the other end of the connection: the client, on a
// connection from Accept, or the server, on one from Dial. For tls, its TLS
// field is set by Handshake: read it after Handshake returns.
func (c *Conn) Peer() *peer.Peer { return c.peer }

// Handshake completes the TLS handshake, if it has not run yet, records the
// connection state in Peer().TLS and applies the policy; then, on the server
// side of ws and wss, it reads the client's WebSocket opening handshake and
// answers it (see ListenConfig.WebSocket). A failed handshake or a refused
// peer closes the connection, and every later call returns the same error,
// which matches peer.ErrDenied for a refused peer and is a
// *WebSocketHandshakeError for a refused WebSocket request. For other
// networks Handshake does nothing and returns nil.
//
// On the server side the handshake is also bounded by
// ListenConfig.HandshakeTimeout.
func (c *Conn) Handshake(ctx context.Context) error {
	if !c.needsHandshake() || c.handshakeOK.Load() {
		return nil
	}
	c.hsMu.Lock()
	defer c.hsMu.Unlock()
	if c.hsDone {
		return c.hsErr
	}
	if c.handshakeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.handshakeTimeout)
		defer cancel()
	}
	err := c.handshake(ctx)
	c.hsDone, c.hsErr = true, err
	if err != nil {
		c.closedByHS.Store(true)
		c.raw.Close()
		return err
	}
	c.handshakeOK.Store(true)
	return nil
}

// handshake runs the handshakes Handshake describes. The caller holds hsMu.
func (c *Conn) handshake(ctx context.Context) error {
	if c.tls != nil {
		if err := c.tls.HandshakeContext(ctx); err != nil {
			var rh tls.RecordHeaderError
			if c.srv != nil && errors.As(err, &rh) && rh.Conn != nil && strings.HasPrefix(string(rh.RecordHeader[:]), wire.Magic) {
				c.answerWrongTransport(rh.Conn, "TLS")
			}
			return fmt.Errorf("warren: tls handshake: %w", err)
		}
		st := c.tls.ConnectionState()
		c.peer.TLS = &st
		if err := peer.Authorize(c.policy, c.peer); err != nil {
			if c.srv != nil {
				c.srv.reject(c.peer, err)
			}
			return err
		}
	}
	if c.wsAccept != nil {
		err := c.ws.accept(ctx, c.wsAccept)
		if errors.Is(err, errWarrenPreface) {
			c.answerWrongTransport(c.ws.conn, "WebSocket")
		}
		return err
	}
	return nil
}

// answerWrongTransport answers a warren client that sent its preface in
// the clear to a listener that speaks TLS or WebSocket (what): warren's
// preface and a GOAWAY saying what the address speaks and how to dial it,
// which the client reports at once instead of waiting for a preface.
func (c *Conn) answerWrongTransport(conn net.Conn, what string) {
	msg := "this address speaks " + what
	if c.srv != nil {
		msg += ": dial " + c.srv.Endpoint().String()
	}
	b := wire.AppendPreface(nil, wire.Settings{})
	b = wire.AppendFrame(b, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 0, uint32(codeFailedPrecondition), msg))
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write(b)
}

// codeFailedPrecondition is the status code of answerWrongTransport's
// GOAWAY.
const codeFailedPrecondition wire.Code = 9

// needsHandshake reports whether Read and Write must wait for Handshake.
func (c *Conn) needsHandshake() bool { return c.tls != nil || c.wsAccept != nil }

// Read reads data from the connection, after the handshake for tls, wss and
// a server's ws.
func (c *Conn) Read(b []byte) (int, error) {
	if c.needsHandshake() && !c.handshakeOK.Load() {
		if err := c.Handshake(context.Background()); err != nil {
			return 0, err
		}
	}
	var n int
	var err error
	if c.rio != nil && c.io == c.raw {
		n, err = c.rio.Read(b)
	} else {
		n, err = c.io.Read(b)
	}
	if err != nil && c.local != nil {
		c.fixAddr(err)
	}
	return n, err
}

// Write writes data to the connection, after the handshake for tls, wss and
// a server's ws. On ws and wss it sends b as one binary message.
func (c *Conn) Write(b []byte) (int, error) {
	if c.needsHandshake() && !c.handshakeOK.Load() {
		if err := c.Handshake(context.Background()); err != nil {
			return 0, err
		}
	}
	var n int
	var err error
	if c.rio != nil && c.io == c.raw {
		n, err = c.rio.Write(b)
	} else {
		n, err = c.io.Write(b)
	}
	if err != nil && c.local != nil {
		c.fixAddr(err)
	}
	return n, err
}

// fixAddr puts the socket file's path in place of the private name the
// server's socket was bound under (see the package documentation) in a
// *net.OpError that the net package has just returned.
func (c *Conn) fixAddr(err error) {
	if oe, ok := err.(*net.OpError); ok && oe.Source != nil {
		oe.Source = c.local
	}
}

// CloseWrite shuts down the writing side of the connection, so that the
// peer reads io.EOF, if the underlying connection supports it (Unix, TCP,
// and TLS after the handshake). On ws and wss it sends a close frame (code
// 1000); the peer may go on sending until it answers with its own, which
// ends the close handshake and the connection.
func (c *Conn) CloseWrite() error {
	cw, ok := c.io.(interface{ CloseWrite() error })
	if !ok {
		return fmt.Errorf("warren: %T does not support CloseWrite", c.io)
	}
	if c.needsHandshake() && !c.handshakeOK.Load() {
		if err := c.Handshake(context.Background()); err != nil {
			return err
		}
	}
	return cw.CloseWrite()
}

// Close closes the connection. After a failed handshake, which has closed
// it already, Close returns nil. On ws and wss it first runs the WebSocket
// close handshake: it sends a close frame (code 1000) and waits for the
// peer's, reading and dropping any data that comes before it, for at most 5
// seconds.
func (c *Conn) Close() error {
	err := c.io.Close()
	if c.closedByHS.Load() {
		return nil
	}
	return err
}

// LocalAddr returns this end's address.
func (c *Conn) LocalAddr() net.Addr {
	if c.local != nil {
		return c.local
	}
	return c.io.LocalAddr()
}

// RemoteAddr returns the other end's address.
func (c *Conn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.io.RemoteAddr()
}

// SetDeadline sets the read and write deadlines, as net.Conn does.
func (c *Conn) SetDeadline(t time.Time) error { return c.io.SetDeadline(t) }

// SetReadDeadline sets the read deadline, as net.Conn does.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.io.SetReadDeadline(t) }

// SetWriteDeadline sets the write deadline, as net.Conn does.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.io.SetWriteDeadline(t) }

// NetConn returns the underlying connection, such as a *net.UnixConn, for
// operations Conn does not offer. Reading or writing it directly bypasses
// TLS, WebSocket framing and, before the handshake, the policy.
func (c *Conn) NetConn() net.Conn { return c.raw }
