//go:build linux

package eventloop

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/wsframe"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Timeouts and shutdown: the periodic checks of active and idle
// connections, GOAWAY, and closing every connection.

// sweep checks the active connections for timeouts and hibernation.
func (l *evLoop) sweep() {
	l.lastSweep = l.now
	for i := 0; i < len(l.active); {
		rec := l.active[i]
		l.check(rec)
		if i < len(l.active) && l.active[i] == rec {
			i++
		}
	}
}

var (
	errHandshakeTimeout = errors.New("warren: handshake timed out")
	errReadTimeout      = errors.New("warren: read timed out in the middle of a frame")
	errIdleTimeout      = errors.New("warren: idle timeout")
	errStuck            = errors.New("warren: the peer has not read its output; closing")
)

func (l *evLoop) check(rec *loopConn) {
	a := rec.act
	if a.ws != nil && a.ws.drain {
		if !l.now.Before(a.closeAt) {
			l.finalize(rec, a.ws.err)
		}
		return
	}
	if a.refuse != "" && rec.state == stHandshake && a.closeAt.IsZero() && rec.flags&flWS == 0 && l.now.Sub(a.since) >= refusePeekWait {
		l.refuseNow(rec) // a refused peer silent for refusePeekWait
		return
	}
	var err error
	switch {
	case a.conn != nil && a.conn.isClosed():
		err = net.ErrClosed // the session closed it
	case rec.state == stHandshake && l.now.Sub(a.since) >= l.hsTimeout:
		err = errHandshakeTimeout
	case !a.closeAt.IsZero() && !l.now.Before(a.closeAt):
		err = mux.ErrClosed // refused, and told so
	case l.partial(a) && l.readTimeout > 0 && l.now.Sub(a.since) >= l.readTimeout:
		err = errReadTimeout
	case a.conn != nil && a.conn.writeTimedOut(l.now) && a.sess.WriteBacklog() > 0:
		err = os.ErrDeadlineExceeded
	case a.conn != nil && a.conn.stuck(l.now):
		err = errStuck
	}
	if err != nil {
		l.finalize(rec, err)
		return
	}
	if rec.state == stHandshake || !a.closeAt.IsZero() || l.partial(a) || l.now.Sub(a.lastIO) < HibernateAfter {
		return
	}
	switch {
	case l.closing:
		if l.quiet(rec) {
			if a.sess == nil {
				l.goAway(rec, status.Unavailable, "server is shutting down")
			}
			l.finalize(rec, mux.ErrClosed)
		}
	case l.idleTimeout > 0 && l.now.Sub(a.lastIO) >= l.idleTimeout && l.quiet(rec):
		if a.sess != nil {
			a.sess.GoAway(status.OK, "idle timeout")
		} else {
			l.goAway(rec, status.OK, "idle timeout")
		}
		l.finalize(rec, errIdleTimeout)
	default:
		l.hibernate(rec)
	}
}

// sweepIdle closes the hibernating connections idle for longer than
// IdleTimeout.
func (l *evLoop) sweepIdle() {
	l.lastIdle = l.now
	limit := uint32(l.idleTimeout / time.Millisecond)
	now := l.clock()
	l.table.each(func(rec *loopConn) {
		if rec.act == nil && rec.state == stOpen && now-rec.last >= limit {
			l.goAway(rec, status.OK, "idle timeout")
			l.finalize(rec, errIdleTimeout)
		}
	})
}

// goAway writes a GOAWAY frame to a connection without a session, if the
// socket takes it at once.
func (l *evLoop) goAway(rec *loopConn, code status.Code, msg string) {
	if rec.state != stOpen {
		return
	}
	last := rec.fed.lastPeerID
	if rec.flags&flGoAway != 0 {
		last = min(last, rec.fed.goAwayLast)
	}
	var pbuf, buf [128]byte
	b := wire.AppendFrame(buf[:0], 0, wire.TypeGoAway, 0, wire.AppendGoAway(pbuf[:0], last, uint32(code), msg))
	if rec.flags&flWS != 0 {
		var fb [160]byte
		f := wsframe.AppendHeader(fb[:0], len(b))
		f = append(f, b...)
		b = wsframe.AppendClose(f, wsframe.CloseNormal)
	}
	syscall.Write(rec.fd(), b)
}

// beginClosing runs once the server begins closing (Shutdown or Close):
// the loop stops accepting, and connections without a session (idle ones)
// get one, which the server registers and tells to go away: a call that
// crosses the GOAWAY is read and refused, not reset by closing the socket
// under it. Sessions had their GOAWAY from Shutdown, or get it when they
// wake up; they are closed once they are quiet (or by closeAll).
func (l *evLoop) beginClosing() {
	l.closing = true
	defer l.opts.Counters.Open.Add(-1)
	if l.lfd >= 0 {
		if !l.acceptOff {
			l.p.Del(l.lfd)
		}
		unix.Close(l.lfd)
		l.lfd, l.acceptOff = -1, false
	}
	l.table.each(func(rec *loopConn) {
		switch {
		case rec.state == stOpen && (rec.act == nil || rec.act.sess == nil && rec.act.refuse == ""):
			l.activate(rec) // registered while closing: sends the GOAWAY
		case rec.act == nil || rec.state == stOpen && rec.act.sess == nil:
			l.goAway(rec, status.Unavailable, "server is shutting down")
			l.finalize(rec, mux.ErrClosed)
		}
	})
}

// closeAll closes every connection at once.
func (l *evLoop) closeAll() {
	l.table.each(func(rec *loopConn) { l.finalize(rec, mux.ErrClosed) })
}
