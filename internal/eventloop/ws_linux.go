//go:build linux

package eventloop

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/transportinternal"
	"github.com/warrenipc/warren/internal/wsframe"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// WebSocket connections on the event loop. On a ws:// listener the loop
// reads the opening handshake's request itself and answers it with the
// listener's checks (wsHandshake, upgrade). An upgrade through the HTTP
// bridge runs on the bridge's goroutine; then the connection's descriptor
// is duplicated, the net.Conn closed (it leaves the runtime poller) and the
// descriptor handed to the loop with the bytes read past the handshake
// (HandoffConn.Adopt, submit). Either way the loop takes it (adopt) like a
// connection it accepted, with the flWS flag. From then on the loop reads
// the socket into its buffer and an evloop.Framing (wsframe.Decoder) turns
// what it read into warren bytes, in place, keeping at most a frame header
// or a control frame (wsframe.MaxHold bytes) until more arrives; replies
// (pong, close) go out through the fedConn, between data frames. A write of
// the session is one binary frame: the fedConn writes its header with the
// start of the payload and keeps, across EAGAIN, how much of the frame is
// left. An idle WebSocket connection is its record, like any other, with
// one bit (flWSMsg) for a fragmented message under way.

// wsDrainTimeout bounds how long the loop waits for a peer that broke the
// protocol to close the connection after the close frame telling it why,
// as the goroutine mode does.
var wsDrainTimeout = 5 * time.Second

// WSCutFrames counts the WebSocket frames a full socket cut, in the
// process (for the tests).
var WSCutFrames atomic.Uint64

// wsConn is the WebSocket state of an active connection.
type wsConn struct {
	fr    evloop.Framing
	hold  [wsframe.MaxHold]byte // the start of a frame header or control frame
	nhold uint8
	drain bool  // the connection failed: discard input until the peer closes
	err   error // why it failed
}

// partial reports whether a is in the middle of a frame: a warren frame or,
// on WebSocket, a WebSocket frame.
func (l *evLoop) partial(a *activeConn) bool {
	if a.plen > 0 || a.d.dst != nil {
		return true
	}
	if w := a.ws; w != nil {
		_, idle := w.fr.Idle()
		return w.nhold > 0 || !idle
	}
	return false
}

// connOf returns rec's fedConn, making it (and, on WebSocket, the decoder)
// if the connection has none.
func (l *evLoop) connOf(rec *loopConn, p *peer.Peer) *fedConn {
	a := rec.act
	if a.conn != nil && !a.conn.isClosed() {
		return a.conn
	}
	c := &fedConn{l: l, fd: rec.fd(), local: p.LocalAddr, remote: p.RemoteAddr}
	if rec.flags&flWS != 0 {
		if a.ws == nil {
			a.ws = &wsConn{fr: wsframe.NewDecoder(rec.flags&flWSMsg != 0)}
		}
		c.fr = a.ws.fr
	}
	a.conn = c
	return c
}

// adoption is a WebSocket connection handed to the loop after its opening
// handshake.
type adoption struct {
	fd   int
	data []byte // bytes read past the handshake
	p    *peer.Peer
}

// wsHandshake starts the opening handshake of rec, a connection accepted
// on a ws:// listener: the loop reads the request (flWSUp) into the
// record's pend buffer until its end, then answers it (upgrade), all
// without a goroutine or a net.Conn, so that a burst of handshakes leaves
// nothing behind. The record is in use (nconns), counted among its peer's
// connections in their handshake and bounded by the handshake timeout
// meanwhile, but the connection is checked against the policy and the
// limits only once the handshake is done, as in goroutine mode, where
// ServeConn admits a connection after its handshake.
func (l *evLoop) wsHandshake(rec *loopConn, p *peer.Peer) {
	if !l.startHandshake(rec, p) {
		fd := rec.fd()
		l.table.free(fd)
		unix.Close(fd)
		return
	}
	rec.flags |= flWS | flWSUp
	l.nconns++
	l.addActive(rec, &activeConn{since: l.now, lastIO: l.now})
	if err := l.p.Add(rec.fd(), evloop.In|evloop.RdHup); err != nil {
		l.finalize(rec, err)
	}
}

// wsMaxRequest bounds the opening handshake's request the loop reads: one
// byte over the listener's own bound, so that it answers 431.
const wsMaxRequest = 16<<10 + 1

// readUpgrade reads the opening handshake's request of rec and, once it has
// the whole head, answers it.
func (l *evLoop) readUpgrade(rec *loopConn) {
	a := rec.act
	if a.pend == nil {
		a.pend = pool.Get(2048)
		a.pend.B = a.pend.B[:cap(a.pend.B)]
	} else if a.plen == len(a.pend.B) {
		nb := pool.Get(min(2*len(a.pend.B), wsMaxRequest))
		nb.B = nb.B[:cap(nb.B)]
		copy(nb.B, a.pend.B[:a.plen])
		pool.Put(a.pend)
		a.pend = nb
	}
	n, err := syscall.Read(rec.fd(), a.pend.B[a.plen:min(len(a.pend.B), wsMaxRequest)])
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil:
		l.finalize(rec, os.NewSyscallError("read", err))
		return
	case n == 0:
		l.adm.Reject()
		l.finalize(rec, io.ErrUnexpectedEOF)
		return
	}
	from := max(0, a.plen-3)
	a.plen += n
	// A warren preface (a tcp:// client) has no end of head: the
	// handshake answers it at once with what the address speaks.
	preface := a.plen >= len(wire.Magic) && string(a.pend.B[:len(wire.Magic)]) == wire.Magic
	if !preface && !bytes.Contains(a.pend.B[from:a.plen], []byte("\r\n\r\n")) && a.plen < wsMaxRequest {
		return
	}
	l.upgrade(rec)
}

// upgrade answers the opening handshake whose request is in rec's pend
// buffer, with the listener's own checks, and serves the connection on
// success.
func (l *evLoop) upgrade(rec *loopConn) {
	a, fd := rec.act, rec.fd()
	p := l.peerOf(rec, nil)
	c := &upgradeConn{fd: fd, in: a.pend.B[:a.plen], local: p.LocalAddr, remote: p.RemoteAddr}
	data, err := transportinternal.WSHandshake(l.ctx, l.ls.tl, c)
	if err != nil {
		l.adm.Reject()
		l.finalize(rec, err)
		return
	}
	pool.Put(a.pend)
	a.pend, a.plen = nil, 0
	l.endHandshake(rec) // adopt counts it again
	l.removeActive(rec)
	l.p.Del(fd)
	l.table.free(fd)
	l.nconns--
	l.adopt(adoption{fd: fd, data: data, p: p})
}

// upgradeConn is the net.Conn the listener's opening handshake runs on in
// the loop: it reads the request the loop has read, and writes the answer
// straight to the socket (a fresh socket's buffer holds it, or the
// handshake fails). Deadlines do not apply: nothing blocks.
type upgradeConn struct {
	fd            int
	in            []byte
	local, remote net.Addr
}

func (c *upgradeConn) Read(b []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(b, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *upgradeConn) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := syscall.Write(c.fd, b[n:])
		if k > 0 {
			n += k
		}
		switch err {
		case nil, unix.EINTR:
		default:
			return n, &net.OpError{Op: "write", Net: "tcp", Source: c.local, Addr: c.remote, Err: os.NewSyscallError("write", err)}
		}
	}
	return n, nil
}

func (c *upgradeConn) CloseWrite() error               { return unix.Shutdown(c.fd, unix.SHUT_WR) }
func (c *upgradeConn) Close() error                    { return nil } // the loop closes fd
func (c *upgradeConn) LocalAddr() net.Addr             { return c.local }
func (c *upgradeConn) RemoteAddr() net.Addr            { return c.remote }
func (c *upgradeConn) SetDeadline(time.Time) error     { return nil }
func (c *upgradeConn) SetReadDeadline(time.Time) error { return nil }
func (c *upgradeConn) SetWriteDeadline(time.Time) error {
	return nil
}

// submit hands c, a WebSocket connection whose opening handshake is done,
// to the loop, with data, the bytes read past the handshake. It takes a
// duplicate of c's descriptor and closes c. It reports whether the loop
// took the connection; if not, the connection is closed.
func (l *evLoop) submit(c net.Conn, data []byte, p *peer.Peer) bool {
	fd := -1
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(f uintptr) {
				if d, err := unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0); err == nil {
					fd = d
				}
			})
		}
	}
	c.Close()
	if fd < 0 {
		return false
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	if l.adoptOff {
		unix.Close(fd)
		return false
	}
	l.adopts = append(l.adopts, adoption{fd: fd, data: data, p: p})
	l.p.Wake()
	return true
}

// takeAdoptions adopts the connections submitted since the last round.
func (l *evLoop) takeAdoptions() {
	l.amu.Lock()
	q := l.adopts
	l.adopts = nil
	l.amu.Unlock()
	for _, a := range q {
		l.adopt(a)
	}
}

// endAdoptions refuses further submissions and closes those not taken.
func (l *evLoop) endAdoptions() {
	l.amu.Lock()
	defer l.amu.Unlock()
	l.adoptOff = true
	for _, a := range l.adopts {
		unix.Close(a.fd)
	}
	l.adopts, l.sheds = nil, nil
}

// adopt serves a WebSocket connection whose opening handshake is done: the
// warren handshake follows, in binary messages.
func (l *evLoop) adopt(ad adoption) {
	fd, p := ad.fd, ad.p
	rec := l.table.get(fd)
	*rec = loopConn{state: stHandshake, flags: flWS}
	rec.adm.ID, rec.adm.UID = int32(fd), -1
	if p.HasCred {
		rec.setCred(int32(p.UID), int32(p.GID), int32(p.PID))
	} else if ta, ok := p.RemoteAddr.(*net.TCPAddr); ok {
		if ip4 := ta.IP.To4(); ip4 != nil {
			copy(rec.ip[:], ip4)
			rec.flags |= flIPv4
		} else {
			copy(rec.ip[:], ta.IP.To16())
		}
		rec.port = uint16(ta.Port)
	}
	if !l.open(rec, p) {
		return
	}
	for data := ad.data; len(data) > 0 && rec.state != stFree && rec.act != nil; {
		data = data[l.readWS(rec, data):]
	}
}

// readWS reads once from the socket of rec, a WebSocket connection, or
// takes in (bytes read before the loop had the connection) instead, and
// handles what arrived. It returns how many bytes of in it took.
func (l *evLoop) readWS(rec *loopConn, in []byte) int {
	if rec.flags&flWSUp != 0 {
		l.readUpgrade(rec)
		return 0
	}
	fd := rec.fd()
	a := rec.act
	buf := l.rbuf
	k := 0
	if a != nil && a.ws != nil {
		if a.ws.drain {
			if in != nil {
				return len(in)
			}
			n, err := syscall.Read(fd, buf)
			if err == unix.EAGAIN || err == unix.EINTR {
				return 0
			}
			if err != nil || n == 0 {
				l.finalize(rec, a.ws.err)
			}
			return 0
		}
		k = copy(buf, a.ws.hold[:a.ws.nhold])
	}
	var n int
	if in != nil {
		n = copy(buf[k:], in)
	} else {
		var err error
		n, err = syscall.Read(fd, buf[k:])
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return 0
		case err != nil:
			l.finalize(rec, os.NewSyscallError("read", err))
			return 0
		case n == 0:
			reason := "connection closed without a close frame"
			if a != nil && l.partial(a) {
				reason = "connection closed in the middle of a frame"
			}
			l.finalize(rec, &transport.WebSocketError{Code: wsframe.CloseAbnormal, Reason: reason, Err: io.ErrUnexpectedEOF})
			return 0
		}
	}
	rec.last = l.clock()
	if a == nil { // a hibernating connection wakes up
		if !l.activate(rec) {
			return n
		}
		a = rec.act
	}
	a.lastIO = l.now
	wasPartial := l.partial(a)
	w := a.ws
	src := buf[:k+n]
	out := src[:0] // decoded in place
	used := 0
	var err error
	for {
		var m int
		var reply []byte
		out, m, reply, err = w.fr.Decode(out, src[used:])
		used += m
		if reply != nil {
			a.conn.control(reply, err != nil)
		}
		if err != nil || reply == nil {
			break
		}
	}
	if err == nil {
		w.nhold = uint8(copy(w.hold[:], src[used:]))
	}
	if len(out) > 0 {
		if a.plen > 0 {
			l.appendPend(a, out)
			l.handle(rec, a, a.pend.B[:a.plen], true)
		} else {
			l.handle(rec, a, out, false)
		}
		if rec.act != a {
			return n // closed
		}
	}
	if err != nil {
		l.wsEnd(rec, a, err)
		return n
	}
	if !wasPartial && a.plen == 0 && rec.state != stHandshake && l.partial(a) {
		a.since = l.now // a WebSocket frame began (the handshake keeps its start)
	}
	return n
}

// appendPend appends b to the start of a warren frame held in a.pend.
func (l *evLoop) appendPend(a *activeConn, b []byte) {
	if need := a.plen + len(b); need > len(a.pend.B) {
		nb := pool.Get(max(need, 2*len(a.pend.B)))
		nb.B = nb.B[:cap(nb.B)]
		copy(nb.B, a.pend.B[:a.plen])
		pool.Put(a.pend)
		a.pend = nb
	}
	a.plen += copy(a.pend.B[a.plen:], b)
}

// wsEnd ends a WebSocket connection after the decoder's error: the peer's
// close frame (answered already) or a protocol error (the close frame
// saying why is out: the peer gets time to read it and close).
func (l *evLoop) wsEnd(rec *loopConn, a *activeConn, err error) {
	var fe *wsframe.Error
	if !errors.As(err, &fe) {
		l.finalize(rec, err) // io.EOF: a normal close
		return
	}
	err = &transport.WebSocketError{Code: fe.Code, Reason: fe.Reason, Remote: fe.Remote}
	if fe.Remote {
		l.finalize(rec, err)
		return
	}
	unix.Shutdown(rec.fd(), unix.SHUT_WR)
	a.ws.drain, a.ws.err = true, err
	a.closeAt = l.now.Add(wsDrainTimeout)
	if a.conn != nil {
		a.conn.setPaused(false) // read until the peer closes
	}
	if a.sess != nil {
		a.sess.FeedError(err)
	}
}

// writeWSLocked writes b as one binary frame, or continues the frame a
// write that would have blocked began: hdr[hoff:hlen] and left bytes of
// payload, which start b, are still to write. c.mu is held.
func (c *fedConn) writeWSLocked(b []byte) (int, error) {
	n := 0
	for {
		if c.atBoundary() {
			if len(c.ctl) > 0 {
				if err := c.flushControlLocked(); err != nil {
					return n, err
				}
			}
			if n == len(b) {
				return n, nil
			}
			if c.wsClosed {
				return n, net.ErrClosed
			}
			h := c.fr.AppendHeader(c.hdr[:0], len(b)-n)
			c.hoff, c.hlen, c.left = 0, uint8(len(h)), len(b)-n
		}
		var k int
		var err error
		if c.hoff < c.hlen {
			// The header goes out with the start of the payload.
			var buf [2048]byte
			x := copy(buf[:], c.hdr[c.hoff:c.hlen])
			p := copy(buf[x:], b[n:n+min(c.left, len(b)-n)])
			k, err = syscall.Write(c.fd, buf[:x+p])
			if k > 0 {
				hk := min(k, x)
				c.hoff += uint8(hk)
				n += k - hk
				c.left -= k - hk
			}
		} else {
			p := min(c.left, len(b)-n)
			if p == 0 {
				return n, nil // the rest of the frame comes with the next Write
			}
			k, err = syscall.Write(c.fd, b[n:n+p])
			if k > 0 {
				n += k
				c.left -= k
			}
		}
		switch err {
		case nil, unix.EINTR:
		case unix.EAGAIN:
			if !c.atBoundary() {
				WSCutFrames.Add(1)
			}
			return n, mux.ErrWouldBlock
		default:
			return n, c.writeError(err)
		}
	}
}

// atBoundary reports whether no data frame is partly written. c.mu is held.
func (c *fedConn) atBoundary() bool { return c.hoff == c.hlen && c.left == 0 }

// flushControlLocked writes the control frames waiting in c.ctl. c.mu is
// held and no data frame is partly written.
func (c *fedConn) flushControlLocked() error {
	for len(c.ctl) > 0 {
		k, err := syscall.Write(c.fd, c.ctl)
		if k > 0 {
			c.ctl = c.ctl[k:]
		}
		switch err {
		case nil, unix.EINTR:
		case unix.EAGAIN:
			return mux.ErrWouldBlock
		default:
			c.ctl = nil
			return c.writeError(err)
		}
	}
	c.ctl = nil
	return nil
}

// control sends a control frame the decoder asked for (a pong, a close
// frame, which is the last frame sent) as soon as no data frame is partly
// written; the loop calls it.
func (c *fedConn) control(b []byte, isClose bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wsClosed || c.closed && !isClose {
		return
	}
	if isClose {
		c.wsClosed = true
	}
	if len(c.ctl) > 0 || !c.atBoundary() {
		c.ctl = append(c.ctl, b...)
		return
	}
	k, err := syscall.Write(c.fd, b)
	if err == unix.EAGAIN || err == unix.EINTR || err == nil && k < len(b) {
		c.ctl = append(c.ctl, b[max(k, 0):]...)
		if !c.closed && !c.out {
			c.out = true
			c.l.p.Mod(c.fd, c.events())
		}
	}
}

// controlPending reports whether control frames wait to be written.
func (c *fedConn) controlPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ctl) > 0
}

func (c *fedConn) writeError(err error) error {
	return &net.OpError{Op: "write", Net: c.l.ls.netw, Source: c.local, Addr: c.remote, Err: os.NewSyscallError("write", err)}
}
