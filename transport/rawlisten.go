package transport

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/warrenipc/warren/peer"
)

// SyscallConn returns the listening socket of a unix:// or tcp:// Listener,
// for an event loop that accepts connections on it itself (rpc's event-loop
// mode) and keeps only their file descriptors. Other schemes (tls://, whose
// connections need a TLS handshake, and WebSocket) return an error.
//
// A caller that accepts on the socket must not call Accept as well, and must
// pass the peer of every connection it accepts to AdmitPeer, so that the
// listener's policy applies as it does in Accept. Closing the Listener
// still closes the socket (and removes its file).
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

// AdmitPeer applies the listener's policy to p, the peer of a connection
// accepted on the socket from SyscallConn, as Accept does: a refused peer is
// logged and counted in Stats, and the caller closes its connection; an
// allowed one is counted as accepted. p.LocalAddr should be the Listener's
// Addr for socket files (the kernel reports the private name the socket was
// bound under).
func (l *Listener) AdmitPeer(p *peer.Peer) error {
	if err := peer.Authorize(l.policy, p); err != nil {
		l.reject(p, err)
		return err
	}
	l.accepted.Add(1)
	return nil
}
