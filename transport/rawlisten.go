package transport

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/warrenipc/warren/peer"
)

// SyscallConn returns the listening socket of a unix:// or tcp:// Listener,
// for an event loop that accepts connections on it itself (rpc's event-loop
// mode) and keeps only their file descriptors. Other schemes (tls://, whose
// connections need a TLS handshake, and WebSocket) return an error.
//
// A caller that accepts on the socket must not call Accept as well. The
// listener's policy does not apply to the connections it accepts so (rpc's
// event loop applies it itself). Closing the Listener still closes the
// socket (and removes its file).
func (l *Listener) SyscallConn() (syscall.RawConn, error) {
	if l.addr.Scheme != SchemeUnix && l.addr.Scheme != SchemeTCP {
		return nil, fmt.Errorf("warren: %s listeners have no raw socket to accept on", l.addr.Scheme)
	}
	sc, ok := l.ln.(syscall.Conn)
	if !ok {
		return nil, errors.New("warren: the listener has no raw socket")
	}
	return sc.SyscallConn()
}

// admitPeer applies the policy of l, a *Listener, to p, the peer of a
// connection accepted on the socket from SyscallConn (see
// transportinternal.AdmitPeer).
func admitPeer(ln net.Listener, p *peer.Peer) error {
	l, ok := ln.(*Listener)
	if !ok {
		return errors.New("warren: not a transport listener")
	}
	if err := peer.Authorize(l.policy, p); err != nil {
		l.reject(p, err)
		return err
	}
	l.accepted.Add(1)
	return nil
}
