package peer

import (
	"fmt"
	"net"
	"syscall"
)

// cred holds the credentials the kernel records for the other end of a Unix
// domain socket: for a client, those of the process that connected; for a
// server, those of the process that called listen.
type cred struct {
	UID int
	GID int // the primary group
	PID int // 0 when the platform does not report it
}

// ReadCred reads the kernel's credentials for the other end of c, which
// must be a Unix domain socket (or wrap one and have a NetConn method, as
// *tls.Conn does), into p: it sets p.HasCred, UID, GID (the primary group)
// and PID (0 when the platform does not report it), and leaves p unchanged
// on error. For a client, they are those of the process that connected; for
// a server, those of the process that called listen. It reads no data and
// works on either side of the connection.
//
// It uses SO_PEERCRED on Linux and LOCAL_PEERCRED with LOCAL_PEERPID on
// macOS. Elsewhere, and for connections that are not Unix domain sockets, it
// returns an error that matches [ErrNoCred].
func ReadCred(c net.Conn, p *Peer) error {
	cr, err := readConnCred(c)
	if err == nil {
		p.HasCred, p.UID, p.GID, p.PID = true, cr.UID, cr.GID, cr.PID
	}
	return err
}

func readConnCred(c net.Conn) (cred, error) {
	for c != nil {
		if sc, ok := c.(syscall.Conn); ok && isUnix(c) {
			raw, err := sc.SyscallConn()
			if err != nil {
				return cred{}, fmt.Errorf("warren: read peer credentials: %w", err)
			}
			var cr cred
			var credErr error
			if err := raw.Control(func(fd uintptr) { cr, credErr = readCred(int(fd)) }); err != nil {
				return cred{}, fmt.Errorf("warren: read peer credentials: %w", err)
			}
			switch {
			case credErr == ErrNoCred:
				return cred{}, ErrNoCred
			case credErr != nil:
				return cred{}, fmt.Errorf("warren: read peer credentials: %w", credErr)
			}
			return cr, nil
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	return cred{}, ErrNoCred
}

func isUnix(c net.Conn) bool {
	if _, ok := c.(*net.UnixConn); ok {
		return true
	}
	a := c.LocalAddr()
	return a != nil && (a.Network() == "unix" || a.Network() == "unixpacket")
}
