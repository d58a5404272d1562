//go:build linux

package rpc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/internal/transportinternal"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
)

// Accept and admission: the peer's identity, the server's policy and
// limits, and the bookkeeping of active connections.

func (l *evLoop) accept() {
	s := l.srv
	for range acceptBatch {
		fd, sa, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			switch err {
			case unix.EAGAIN:
				return
			case unix.EINTR, unix.ECONNABORTED, unix.EPROTO:
				continue
			}
			// Out of descriptors or memory. The socket stays readable, so
			// leave it out of the poller for a while rather than spin.
			l.acceptBackoff = min(max(2*l.acceptBackoff, 5*time.Millisecond), time.Second)
			s.logger.Warn("warren: accept error; retrying", "err", os.NewSyscallError("accept4", err), "delay", l.acceptBackoff)
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
	*rec = loopConn{fd: int32(fd), uid: -1, gid: -1, state: stHandshake}
	if l.ls.unix {
		if cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			rec.uid, rec.gid, rec.pid = int32(cred.Uid), int32(cred.Gid), cred.Pid
			rec.flags |= flCred
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
		l.wsHandshake(rec)
		return
	}
	l.open(rec, p)
}

// open applies the server's policy and connection limits to a new
// connection (counted in nconns from now on) and registers it with the
// poller. It reports whether the connection is still open.
func (l *evLoop) open(rec *loopConn, p *peer.Peer) bool {
	s := l.srv
	fd := int(rec.fd)
	l.nconns++
	a := &activeConn{since: l.now, lastIO: l.now}
	l.addActive(rec, a)
	if rec.flags&flWS != 0 {
		l.connOf(rec, p)
	}
	if err := peer.Authorize(s.opts.Policy, p); err != nil {
		a.refuse, a.code = err.Error(), status.PermissionDenied
		s.logRefusal(p, peerKey(p), a.refuse)
	} else if a.refuse = l.admitConn(rec, p); a.refuse != "" {
		a.code = status.ResourceExhausted
		if a.refuse == shuttingDown {
			a.code = status.Unavailable
		}
		s.logRefusal(p, peerKey(p), a.refuse)
	}
	if a.refuse != "" {
		s.rejected.Add(1)
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
	fd := int(rec.fd)
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
			p.HasCred, p.UID, p.GID, p.PID = true, int(rec.uid), int(rec.gid), int(rec.pid)
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

// limiterKey is the key of rec's rate limiter, as addConn computes it.
func (l *evLoop) limiterKey(rec *loopConn, p *peer.Peer) string {
	switch {
	case rec.uid >= 0:
		return "uid:" + strconv.Itoa(int(rec.uid))
	case !l.ls.unix:
		return "ip:" + rec.ipAddr().String()
	}
	if p == nil {
		p = l.peerOf(rec, nil)
	}
	return "addr:" + fmt.Sprint(p.RemoteAddr)
}

// admitConn is addConn for a connection of the loop: the same checks, the
// same counters, but the connection is counted in s.ev.light instead of
// having a serverConn in s.conns.
func (l *evLoop) admitConn(rec *loopConn, p *peer.Peer) string {
	s := l.srv
	s.mu.Lock()
	defer s.mu.Unlock()
	uid := int(rec.uid)
	switch {
	case s.closing:
		return shuttingDown
	case len(s.conns)+s.ev.light >= s.opts.MaxConns:
		return fmt.Sprintf("too many connections (limit %d)", s.opts.MaxConns)
	case uid >= 0 && s.perUID[uid] >= s.opts.MaxConnsPerUID:
		return fmt.Sprintf("too many connections from uid %d (limit %d)", uid, s.opts.MaxConnsPerUID)
	}
	if s.conns == nil {
		s.conns = map[*serverConn]struct{}{}
		s.perUID = map[int]int{}
		s.limiters = map[string]*peerLimiter{}
	}
	s.ev.light++
	if uid >= 0 {
		s.perUID[uid]++
	}
	key := l.limiterKey(rec, p)
	pl := s.limiters[key]
	if pl == nil {
		pl = &peerLimiter{lim: rate.NewLimiter(rate.Limit(s.opts.CallRate), s.opts.CallBurst)}
		s.limiters[key] = pl
	}
	pl.refs++
	rec.lim = pl
	return ""
}

// release undoes admitConn for a connection counted in s.ev.light.
func (l *evLoop) release(rec *loopConn) {
	s := l.srv
	key := l.limiterKey(rec, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ev.light--
	if uid := int(rec.uid); uid >= 0 {
		if s.perUID[uid]--; s.perUID[uid] <= 0 {
			delete(s.perUID, uid)
		}
	}
	if rec.lim.refs--; rec.lim.refs == 0 && s.limiters[key] == rec.lim {
		delete(s.limiters, key)
	}
	rec.lim = nil
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
