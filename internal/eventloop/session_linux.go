//go:build linux

package eventloop

import (
	"bytes"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Session lifecycle: a connection becomes active, hibernates, is handed off
// to a goroutine, or ends.

// activate gives rec a session, waking it up if it hibernates. It returns
// false if the connection had to be closed.
func (l *evLoop) activate(rec *loopConn) bool {
	a := rec.act
	if a == nil {
		a = &activeConn{since: l.now, lastIO: l.now}
		l.addActive(rec, a)
	}
	if a.sess != nil {
		return true
	}
	p := l.peerOf(rec, nil)
	c := l.connOf(rec, p)
	cfg := mux.Config{
		Settings:         l.answered(rec, *rec.set),
		HandshakeTimeout: l.hsTimeout,
	}
	se := l.core.NewSession(c, p, &rec.adm, &cfg)
	cfg.OnRequest = l.onRequest
	l.filesConfig(rec, &cfg)
	if a.refuse != "" {
		refuse := a.refuse
		cfg.OnStream = func(st *mux.Stream, _ *wire.CallHeader) { st.Refuse(status.ResourceExhausted, refuse) }
	}
	var st *mux.FedState
	if rec.flags&flFresh == 0 {
		fs := rec.fedState()
		st = &fs
	}
	sess, err := mux.NewFed(c, &cfg, *rec.set, st)
	if err != nil {
		l.finalize(rec, err)
		return false
	}
	rec.flags &^= flFresh
	a.conn, a.sess, a.se = c, sess, se
	if a.refuse != "" {
		return true // not admitted: not registered
	}
	rec.adm.SetActive(admit.Busy) // awake: not shed
	closing := se.Register(sess)
	l.opts.Counters.Wakes.Add(1)
	if closing {
		sess.GoAway(status.Unavailable, "server is shutting down")
	}
	return true
}

// hibernate drops rec's session if it is quiet, keeping its state in the
// record.
func (l *evLoop) hibernate(rec *loopConn) {
	a := rec.act
	if l.partial(a) || a.refuse != "" || a.conn != nil && a.conn.controlPending() || filesWaiting(a) {
		return
	}
	if a.sess != nil {
		calls, running, last := a.se.Work()
		if calls != 0 || running != 0 {
			return
		}
		st, ok := a.sess.Hibernate()
		if !ok {
			return
		}
		a.conn.retire()
		rec.keepFed(st)
		rec.adm.SetActive(last) // the last call: shed after ShedIdleAfter
		a.se.Unregister()
		l.opts.Counters.Hibernations.Add(1)
	}
	if a.conn != nil {
		a.conn.retire()
	}
	if a.ws != nil {
		rec.flags &^= flWSMsg
		if inMsg, _ := a.ws.fr.Idle(); inMsg {
			rec.flags |= flWSMsg
		}
	}
	l.removeActive(rec)
}

// quiet reports whether rec has nothing in flight: no call, no stream, no
// byte to write, no partial frame.
func (l *evLoop) quiet(rec *loopConn) bool {
	a := rec.act
	if a == nil {
		return true
	}
	if l.partial(a) || a.conn != nil && a.conn.controlPending() {
		return false
	}
	if a.sess == nil {
		return true
	}
	calls, _, _ := a.se.Work()
	return calls == 0 && a.sess.NumStreams() == 0 && a.sess.WriteBacklog() == 0
}

// finalize closes rec's connection: its session ends with err, its
// admission is released and its descriptor closed.
func (l *evLoop) finalize(rec *loopConn, err error) {
	fd := rec.fd()
	if a := rec.act; a != nil {
		if a.sess != nil {
			if err == mux.ErrClosed {
				a.sess.Close()
			} else {
				a.sess.FeedError(err)
			}
		}
		if a.conn != nil {
			a.conn.retire() // no write reaches fd from now on
		}
		if a.pend != nil {
			pool.Put(a.pend)
			a.pend, a.plen = nil, 0
		}
		l.removeActive(rec)
		if a.refuse != "" {
			l.refusing--
		}
		if a.se != nil && a.refuse == "" {
			a.se.Unregister()
		}
	}
	l.endHandshake(rec)
	l.adm.Release(&rec.adm)
	l.table.free(fd) // before the descriptor can be reused
	unix.Close(fd)
	l.nconns--
}

// handoff gives a connection whose peer sent an HTTP request to the
// goroutine mode (Core.ServeConn, which serves it on the HTTP bridge), with
// the bytes read so far.
func (l *evLoop) handoff(rec *loopConn, data []byte) {
	fd := rec.fd()
	l.p.Del(fd)
	p := l.peerOf(rec, nil)
	prefix := bytes.Clone(data)
	if a := rec.act; a != nil {
		if a.pend != nil {
			pool.Put(a.pend)
		}
		l.removeActive(rec)
		if a.refuse != "" {
			l.refusing--
		}
	}
	l.endHandshake(rec)
	l.adm.Release(&rec.adm) // ServeConn admits it again
	l.table.free(fd)
	l.nconns--
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f) // a duplicate, in the runtime's poller
	f.Close()
	if err != nil {
		return
	}
	hc := &HandoffConn{Conn: c, prefix: prefix, peer: p, adopt: l.submit}
	l.core.Go(func() { l.core.ServeConn(hc) })
}

// updatePause stops reading from a connection whose peer does not read
// what it is sent, once more is waiting than flow control can explain (the
// connection window plus a margin, so only control frames such as PING
// replies could be behind it) or more PING replies than goroutine mode
// queues, and resumes once the backlog is written. A connection paused for
// mux.StuckAfter is closed (check).
func (l *evLoop) updatePause(rec *loopConn) {
	a := rec.act
	if a == nil || a.sess == nil || a.conn == nil {
		return
	}
	limit := int(16*int64(rec.set.InitialWindow) + 1<<20)
	a.conn.setPaused(a.sess.WriteBacklog() >= limit || a.sess.PingsOver())
}
