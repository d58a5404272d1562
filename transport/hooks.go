package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/internal/transportinternal"
)

// What the session (internal/mux) and rpc's event loop need of Conns and
// Listeners beyond the API reaches them through internal packages, set
// here.
func init() {
	rawio.SetTransportView(connView)
	transportinternal.WSSocket = wsListenerSocket
	transportinternal.WSHandshake = loopHandshake
	transportinternal.WSDetach = detachWS
	transportinternal.AdmitPeer = admitPeer
}

// connExt is the view of a Conn that implements rawio.Ext. It is one
// pointer, so making it a net.Conn allocates nothing.
type connExt struct{ *Conn }

var _ rawio.Ext = connExt{}

// connView returns c's connExt if c is a *Conn, and c otherwise.
func connView(c net.Conn) net.Conn {
	if tc, ok := c.(*Conn); ok {
		return connExt{tc}
	}
	return c
}

// WriteBuffers writes the buffers in order, with one writev system call
// where the connection allows it (unix and tcp), so that a large payload can
// follow a frame header without being copied next to it first. On ws and
// wss the buffers go out as one binary message.
func (x connExt) WriteBuffers(v *net.Buffers) (int64, error) {
	c := x.Conn
	if c.needsHandshake() && !c.handshakeOK.Load() {
		if err := c.Handshake(context.Background()); err != nil {
			return 0, err
		}
	}
	if c.ws != nil {
		return c.ws.writeBuffers(v)
	}
	var n int64
	var err error
	if c.rio != nil && c.io == c.raw {
		n, err = c.rio.WriteBuffers(v)
	} else {
		n, err = v.WriteTo(c.io)
	}
	if err != nil && c.local != nil {
		c.fixAddr(err)
	}
	return n, err
}

// ReadsResume reports whether a Read that a past read deadline interrupts
// leaves the byte stream intact: true for unix and tcp, false for tls, ws
// and wss, whose reads can stop inside a record or frame.
func (x connExt) ReadsResume() bool { return x.io == x.raw }

// loopHandshake runs a ws (not wss) Listener's opening handshake on conn,
// a connection accepted from the Listener's socket by other means.
func loopHandshake(ctx context.Context, ln net.Listener, conn net.Conn) ([]byte, error) {
	l, ok := ln.(*Listener)
	if !ok || l.ws == nil || l.tlsConfig != nil {
		return nil, errors.New("warren: not a ws listener")
	}
	if l.handshakeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.handshakeTimeout)
		defer cancel()
	}
	c := newWSConn(conn, false)
	if err := c.accept(ctx, l.ws); err != nil {
		if errors.Is(err, errWarrenPreface) {
			(&Conn{srv: l}).answerWrongTransport(conn, "WebSocket")
		}
		return nil, err
	}
	return c.rb.buffered0(), nil
}

// detachWS returns the connection under a server *Conn from
// UpgradeWebSocket (one a Listener did not accept), and the bytes it has
// buffered.
func detachWS(nc net.Conn) (net.Conn, []byte, bool) {
	c, ok := nc.(*Conn)
	if !ok || c.ws == nil || c.tls != nil || c.srv != nil || c.ws.client || !c.ws.ready.Load() {
		return nil, nil, false
	}
	c.ws.readMu.Lock()
	defer c.ws.readMu.Unlock()
	return c.raw, c.ws.rb.buffered0(), true
}

// buffered0 returns a copy of the bytes buffered and not consumed.
func (b *wsReadBuf) buffered0() []byte {
	if b.w == b.r {
		return nil
	}
	return bytes.Clone(b.buf[b.r:b.w])
}

// wsListenerSocket returns the listening socket of a ws (not wss)
// Listener, as SyscallConn does for unix and tcp ones.
func wsListenerSocket(ln net.Listener) (syscall.RawConn, error) {
	l, ok := ln.(*Listener)
	if !ok || l.ws == nil || l.tlsConfig != nil {
		return nil, errors.New("warren: not a ws listener")
	}
	sc, ok := l.ln.(syscall.Conn)
	if !ok {
		return nil, errors.New("warren: the listener has no raw socket")
	}
	return sc.SyscallConn()
}
