//go:build linux

package eventloop

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/acceptshed"
	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/transportinternal"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
)

// Accept and admission: the peer's identity, the server's policy and
// limits, and the bookkeeping of active connections.

func (l *evLoop) accept() {
	for range acceptBatch {
		fd, sa, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			switch err {
			case unix.EAGAIN:
				return
			case unix.EINTR, unix.ECONNABORTED, unix.EPROTO:
				continue
			}
			if acceptshed.OutOfDescriptors(err) && l.reserve.Shed(func() { acceptshed.AcceptClose(l.lfd) }) {
				// A pending connection was taken with the reserve
				// descriptor and closed: the backlog drains.
				l.adm.ShedPending()
				l.reserve.Log(l.core.Logger(), os.NewSyscallError("accept4", err), 0)
				continue
			}
			// Out of descriptors or memory. The socket stays readable, so
			// leave it out of the poller for a while rather than spin.
			l.acceptBackoff = min(max(2*l.acceptBackoff, 5*time.Millisecond), time.Second)
			l.reserve.Log(l.core.Logger(), os.NewSyscallError("accept4", err), l.acceptBackoff)
			if l.p.Del(l.lfd) == nil {
				l.acceptOff = true
				l.acceptResume = l.now.Add(l.acceptBackoff)
			}
			return
		}
		l.acceptBackoff = 0
		l.admit(fd, sa)
	}
}

// admit sets up a newly accepted connection: its identity, the listener's
// and the server's policies, and the connection limits, exactly as
// ServeConn applies them. A refused peer still gets the handshake, then a
// GOAWAY saying why, as in the goroutine mode.
func (l *evLoop) admit(fd int, sa unix.Sockaddr) {
	rec := l.table.get(fd)
	*rec = loopConn{state: stHandshake}
	rec.adm.ID, rec.adm.UID = int32(fd), -1
	if l.ls.unix {
		if cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			rec.setCred(int32(cred.Uid), int32(cred.Gid), cred.Pid)
		}
	} else {
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			copy(rec.ip[:], a.Addr[:])
			rec.port = uint16(a.Port)
			rec.flags |= flIPv4
		case *unix.SockaddrInet6:
			copy(rec.ip[:], a.Addr[:])
			rec.port = uint16(a.Port)
		}
		// As the net package does for accepted connections.
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15)
	}
	p := l.peerOf(rec, sa)
	if tl := l.ls.tl; tl != nil {
		if transportinternal.AdmitPeer(tl, p) != nil { // logged and counted by the listener
			l.table.free(fd)
			unix.Close(fd)
			return
		}
	}
	if l.ls.ws {
		l.wsHandshake(rec, p)
		return
	}
	l.open(rec, p)
}

// maxRefusing bounds a loop's refused connections held open to be told
// why; past it a refused connection is closed at once, so that refused
// peers connecting in a loop cannot take the process's descriptors.
const maxRefusing = 64

// open applies the server's policy and connection limits to a new
// connection (counted in nconns from now on) through the admission core,
// and registers it with the poller. It reports whether the connection is
// still open.
func (l *evLoop) open(rec *loopConn, p *peer.Peer) bool {
	fd := rec.fd()
	if !l.startHandshake(rec, p) {
		l.table.free(fd)
		unix.Close(fd)
		return false
	}
	l.nconns++
	a := &activeConn{since: l.now, lastIO: l.now}
	l.addActive(rec, a)
	if rec.flags&flWS != 0 {
		l.connOf(rec, p)
	}
	rec.adm.SetActive(admit.Busy) // awake: not shed
	a.refuse, a.code = l.adm.Admit(&rec.adm, p, l.eng)
	if a.refuse != "" {
		if l.refusing++; l.refusing > maxRefusing {
			l.finalize(rec, mux.ErrClosed) // past the cap: closed at once
			return false
		}
	}
	if err := l.p.Add(fd, evloop.In|evloop.RdHup); err != nil {
		l.finalize(rec, err)
		return false
	}
	return true
}

// peerOf returns the identity of rec's peer; sa is its address, or nil to
// ask the kernel.
func (l *evLoop) peerOf(rec *loopConn, sa unix.Sockaddr) *peer.Peer {
	fd := rec.fd()
	p := &peer.Peer{Network: l.ls.netw}
	if l.ls.unix {
		p.LocalAddr = l.ls.local
		if sa == nil {
			sa, _ = unix.Getpeername(fd)
		}
		name := ""
		if su, ok := sa.(*unix.SockaddrUnix); ok {
			name = su.Name
		}
		p.RemoteAddr = &net.UnixAddr{Name: name, Net: "unix"}
		if rec.flags&flCred != 0 {
			p.HasCred, p.UID, p.GID, p.PID = true, int(rec.adm.UID), int(rec.gid()), int(rec.adm.PID)
		}
		return p
	}
	p.RemoteAddr = &net.TCPAddr{IP: rec.ipAddr(), Port: int(rec.port)}
	if la, err := unix.Getsockname(fd); err == nil {
		switch a := la.(type) {
		case *unix.SockaddrInet4:
			p.LocalAddr = &net.TCPAddr{IP: net.IP(bytes.Clone(a.Addr[:])), Port: a.Port}
		case *unix.SockaddrInet6:
			p.LocalAddr = &net.TCPAddr{IP: net.IP(bytes.Clone(a.Addr[:])), Port: a.Port}
		}
	}
	return p
}

// peerKey returns admit.PeerKey of rec's peer.
func (l *evLoop) peerKey(rec *loopConn) string {
	switch {
	case rec.flags&flCred != 0:
		return "uid " + strconv.Itoa(int(rec.adm.UID))
	case !l.ls.unix:
		return "ip " + rec.ipAddr().String()
	}
	return admit.PeerKey(l.peerOf(rec, nil))
}

// endHandshake ends rec's count among its peer's connections in their
// handshake.
func (l *evLoop) endHandshake(rec *loopConn) {
	if rec.flags&flHS != 0 {
		rec.flags &^= flHS
		fd := int32(rec.fd())
		l.adm.EndHandshake(l.hs[fd])
		delete(l.hs, fd)
	}
}

// startHandshake counts rec among its peer's connections in their
// handshake (flHS), or reports that it is refused. A connection evicted to
// make room for another process's is closed in the loop's next round.
func (l *evLoop) startHandshake(rec *loopConn, p *peer.Peer) bool {
	fd := int32(rec.fd())
	h := l.adm.StartHandshake(l.peerKey(rec), p, func(h *admit.Handshake) {
		l.amu.Lock()
		defer l.amu.Unlock()
		if !l.adoptOff {
			l.sheds = append(l.sheds, shedReq{fd: fd, hs: h})
			l.p.Wake()
		}
	})
	if h == nil {
		return false
	}
	if l.hs == nil {
		l.hs = map[int32]*admit.Handshake{}
	}
	l.hs[fd] = h
	rec.flags |= flHS
	return true
}

// shedConn is the loop's admit.Engine shed: c, the admission of the
// connection whose descriptor is id, was uncounted to make room for
// another. The loop tells it GOAWAY and closes it (shed) in its next
// round.
func (l *evLoop) shedConn(c *admit.Conn, id int32) {
	l.amu.Lock()
	defer l.amu.Unlock()
	if !l.adoptOff {
		l.sheds = append(l.sheds, shedReq{c: c, fd: id})
		l.p.Wake()
	}
}

// shedReq is a connection to shed.
type shedReq struct {
	c  *admit.Conn
	fd int32
	hs *admit.Handshake // set for a connection evicted in its handshake
}

// shed ends the connections shed since the last round, if they are still
// those the admission core shed: a session is told GOAWAY and closed
// 100 ms later (as in goroutine mode), a hibernating connection is told
// and closed at once.
func (l *evLoop) shed() {
	l.amu.Lock()
	q := l.sheds
	l.sheds = nil
	l.amu.Unlock()
	for _, r := range q {
		rec := l.table.lookup(int(r.fd))
		if r.hs != nil {
			if rec != nil && rec.state != stFree && rec.flags&flHS != 0 && l.hs[r.fd] == r.hs {
				l.finalize(rec, mux.ErrClosed) // evicted in its handshake
			}
			continue
		}
		if rec == nil || rec.state == stFree || &rec.adm != r.c || !l.adm.WasShed(r.c) {
			continue // ended, or its descriptor serves another connection
		}
		if a := rec.act; a != nil && a.sess != nil {
			a.sess.GoAway(status.Unavailable, admit.ShedMessage)
			if a.closeAt.IsZero() {
				a.closeAt = l.now.Add(100 * time.Millisecond)
			}
			continue
		}
		l.goAway(rec, status.Unavailable, admit.ShedMessage)
		l.finalize(rec, mux.ErrClosed)
	}
}

func (l *evLoop) addActive(rec *loopConn, a *activeConn) {
	rec.act = a
	a.idx = len(l.active)
	l.active = append(l.active, rec)
}

func (l *evLoop) removeActive(rec *loopConn) {
	a := rec.act
	closeFiles(a)
	last := l.active[len(l.active)-1]
	l.active[a.idx] = last
	last.act.idx = a.idx
	l.active[len(l.active)-1] = nil
	l.active = l.active[:len(l.active)-1]
	rec.act = nil
	if len(l.active) == 0 && cap(l.active) > 256 {
		l.active = nil // drop what a burst grew
	}
}
