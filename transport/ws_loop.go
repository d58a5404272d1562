package transport

import (
	"bytes"
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/warrenipc/warren/internal/wsframe"
)

// An event-loop server (package rpc) serves WebSocket connections itself
// once the opening handshake is done, which runs here as usual. Listener
// and Conn implement wsframe.LoopListener and wsframe.Detacher for it
// through the embedded wsLoop and wsDetach, whose methods are not part of
// the documented API.

// wsLoop makes a Listener a wsframe.LoopListener.
type wsLoop struct{ l *Listener }

var _ wsframe.LoopListener = (*Listener)(nil)

// LoopSocket returns the listening socket of a ws (not wss) Listener.
func (w wsLoop) LoopSocket() (syscall.RawConn, error) { return wsListenerSocket(w.l) }

// LoopHandshake runs a ws Listener's opening handshake on conn.
func (w wsLoop) LoopHandshake(ctx context.Context, conn net.Conn) ([]byte, error) {
	return loopHandshake(ctx, w.l, conn)
}

// wsDetach makes a Conn a wsframe.Detacher.
type wsDetach struct{ c *Conn }

var _ wsframe.Detacher = (*Conn)(nil)

// LoopDetach returns the connection under a server Conn from
// UpgradeWebSocket, and the bytes it has buffered.
func (w wsDetach) LoopDetach() (net.Conn, []byte, bool) {
	if w.c == nil {
		return nil, nil, false
	}
	return detachWS(w.c)
}

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
		return nil, err
	}
	return c.rb.buffered0(), nil
}

// detachWS returns the connection under a server *Conn from
// UpgradeWebSocket, and the bytes it has buffered.
func detachWS(nc net.Conn) (net.Conn, []byte, bool) {
	c, ok := nc.(*Conn)
	if !ok || c.ws == nil || c.tls != nil || c.ws.client || !c.ws.ready.Load() {
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
