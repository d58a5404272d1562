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
// once the opening handshake is done, which runs here as usual: these hooks
// give it the handshake of a ws Listener and the bytes a connection has
// buffered, without more exported API.
func init() {
	wsframe.ServerHandshake = loopHandshake
	wsframe.Detach = detachWS
	wsframe.ListenerSocket = wsListenerSocket
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
