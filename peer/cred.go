package peer

import (
	"fmt"
	"net"
	"syscall"
)

// Cred holds the credentials the kernel records for the other end of a Unix
// domain socket: for a client, those of the process that connected; for a
// server, those of the process that called listen.
type Cred struct {
	UID int
	GID int // the primary group
	PID int // 0 when the platform does not report it
}

// ReadCred returns the kernel's credentials for the other end of c, which
// must be a Unix domain socket (or wrap one and have a NetConn method, as
// *tls.Conn does). It reads no data and works on either side of the
// connection.
//
// It uses SO_PEERCRED on Linux and LOCAL_PEERCRED with LOCAL_PEERPID on
// macOS. Elsewhere, and for connections that are not Unix domain sockets, it
// returns an error that matches [ErrNoCred].
func ReadCred(c net.Conn) (Cred, error) {
	for c != nil {
		if sc, ok := c.(syscall.Conn); ok && isUnix(c) {
			raw, err := sc.SyscallConn()
			if err != nil {
				return Cred{}, fmt.Errorf("warren: read peer credentials: %w", err)
			}
			var cred Cred
			var credErr error
			if err := raw.Control(func(fd uintptr) { cred, credErr = readCred(int(fd)) }); err != nil {
				return Cred{}, fmt.Errorf("warren: read peer credentials: %w", err)
			}
			switch {
			case credErr == ErrNoCred:
				return Cred{}, ErrNoCred
			case credErr != nil:
				return Cred{}, fmt.Errorf("warren: read peer credentials: %w", credErr)
			}
			return cred, nil
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	return Cred{}, ErrNoCred
}

func isUnix(c net.Conn) bool {
	if _, ok := c.(*net.UnixConn); ok {
		return true
	}
	a := c.LocalAddr()
	return a != nil && (a.Network() == "unix" || a.Network() == "unixpacket")
}
