//go:build linux

package eventloop

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// Frame buffering: reading a connection's bytes, keeping an incomplete
// frame, and the handshake of a new connection.

// read reads once from rec's socket and handles what arrived.
func (l *evLoop) read(rec *loopConn) {
	if rec.flags&flWS != 0 {
		l.readWS(rec, nil)
		return
	}
	a := rec.act
	if a != nil && a.refuse != "" && rec.state == stHandshake {
		l.readRefused(rec, a)
		return
	}
	if a != nil && a.d.dst != nil {
		l.readDirect(rec, a)
		return
	}
	var data []byte
	fromPend := a != nil && a.plen > 0
	var n int
	var err error
	switch {
	case fromPend:
		l.growPend(rec, a)
		end := len(a.pend.B)
		if a.d.want > a.plen {
			end = min(end, a.d.want) // just what FeedInto asked for
		}
		n, err = l.readSock(rec, a.pend.B[a.plen:end])
	case a != nil && a.d.run > 0:
		a.d.run--
		n, err = l.readSock(rec, l.rbuf[:wire.HeaderSize]) // after a payload read in place
	default:
		n, err = l.readSock(rec, l.rbuf)
	}
	eof := io.EOF
	if fromPend {
		eof = io.ErrUnexpectedEOF
	}
	if !l.readOK(rec, n, err, eof) {
		return
	}
	if fromPend {
		a.plen += n
		data = a.pend.B[:a.plen]
	} else {
		data = l.rbuf[:n]
	}
	rec.last = l.clock()
	if a == nil { // a hibernating connection wakes up
		if !l.activate(rec) {
			return
		}
		a = rec.act
	}
	a.lastIO = l.now
	l.handle(rec, a, data, fromPend)
}

// handle handles warren bytes that arrived: data, which is a.pend's bytes
// when fromPend.
func (l *evLoop) handle(rec *loopConn, a *activeConn, data []byte, fromPend bool) {
	done := 0
	if rec.state == stHandshake {
		k, ok := l.handshake(rec, data)
		if rec.act != a {
			return // closed, or handed off
		}
		if !ok {
			l.keep(a, data, 0, fromPend)
			return
		}
		done = k
	}
	if done < len(data) {
		if a.sess == nil && !l.activate(rec) {
			return
		}
		k, err := a.sess.Feed(data[done:])
		if err != nil {
			l.finalize(rec, err)
			return
		}
		done += k
		a.d.want = 0
		if rec.flags&flWS == 0 && len(data)-done >= wire.HeaderSize && l.startDirect(rec, a, data[done:]) {
			done = len(data)
		}
	}
	l.keep(a, data, done, fromPend)
	l.updatePause(rec)
	if a.d.dst != nil && rec.act == a {
		l.readDirect(rec, a) // the payload is likely there already
	}
}

// need returns how many bytes the frame (or preface) starting b needs.
func (l *evLoop) need(rec *loopConn, b []byte) int {
	if rec.state == stHandshake {
		return wire.MaxPrefaceSize
	}
	if h, ok := wire.ParseHeader(b); ok {
		return wire.HeaderSize + int(h.Length) // Feed checked it against MaxFrameSize
	}
	return wire.HeaderSize
}

// growPend makes room in a.pend for more of its frame: the buffer doubles
// as the frame's bytes arrive, so a peer cannot make the loop allocate for a
// frame it does not send.
func (l *evLoop) growPend(rec *loopConn, a *activeConn) {
	if a.plen < len(a.pend.B) {
		return
	}
	need := l.need(rec, a.pend.B[:a.plen])
	size := min(2*len(a.pend.B), max(need, a.plen+1))
	nb := pool.Get(size)
	nb.B = nb.B[:cap(nb.B)]
	copy(nb.B, a.pend.B[:a.plen])
	pool.Put(a.pend)
	a.pend = nb
}

// keep holds on to data[done:], the start of a frame, until more arrives.
func (l *evLoop) keep(a *activeConn, data []byte, done int, fromPend bool) {
	rest := len(data) - done
	switch {
	case rest == 0:
		if a.pend != nil {
			pool.Put(a.pend)
			a.pend, a.plen = nil, 0
		}
	case fromPend:
		if done > 0 {
			copy(a.pend.B, data[done:])
			a.plen = rest
			a.since = l.now
		}
	default:
		a.pend = pool.Get(max(rest, 512))
		a.pend.B = a.pend.B[:cap(a.pend.B)]
		a.plen = copy(a.pend.B, data[done:])
		if a.sess != nil || done > 0 {
			a.since = l.now // a frame began (the handshake keeps its start)
		}
	}
}

// handshake reads the client's preface from data and answers it. It returns
// the preface's size and true once it is complete.
func (l *evLoop) handshake(rec *loopConn, data []byte) (int, bool) {
	set, n, ok, err := wire.ParsePreface(data)
	if err != nil {
		var nw *wire.NotWarrenError
		if errors.As(err, &nw) && nw.HTTP && rec.flags&flWS == 0 {
			l.handoff(rec, data)
		} else {
			l.finalize(rec, err) // not warren: closed without a word
		}
		return 0, false
	}
	if !ok {
		return 0, false
	}
	// The socket is new and its buffer empty: a preface always fits.
	preface := l.prefaceFor(rec, set)
	var k int
	if c := rec.act.conn; c != nil && c.fr != nil {
		k, err = c.Write(preface)
	} else {
		k, err = syscall.Write(rec.fd(), preface)
	}
	if err != nil || k != len(preface) {
		l.finalize(rec, fmt.Errorf("warren: sending preface: %v", err))
		return 0, false
	}
	rec.set = l.intern(set)
	rec.state = stOpen
	l.endHandshake(rec)
	rec.flags |= flFresh
	a := rec.act
	switch {
	case a.refuse != "":
		if !l.activate(rec) {
			return 0, false
		}
		a.sess.GoAway(a.code, a.refuse)
		a.closeAt = l.now.Add(100 * time.Millisecond)
	case l.closing:
		if !l.activate(rec) { // sends the GOAWAY
			return 0, false
		}
	}
	return n, true
}

// prefaceFor returns the preface that answers a client's settings: large
// frames and window for a client that asked for them, as goroutine mode
// answers (mux.ServerSettings), so that large messages move in as few
// frames, reads and credit grants in both modes. The connection's session
// is given the same settings (activate).
func (l *evLoop) prefaceFor(rec *loopConn, peer wire.Settings) []byte {
	set := l.answered(rec, peer)
	switch set {
	case l.local:
		return l.preface
	case l.wide:
		return l.widePreface
	}
	l.wide, l.widePreface = set, wire.AppendPreface(nil, set)
	return l.widePreface
}

// answered returns the settings the loop answers a client's with: those of
// its preface (prefaceFor), and of the connection's session.
func (l *evLoop) answered(rec *loopConn, peer wire.Settings) wire.Settings {
	set := mux.ServerSettings(l.opts.Settings, peer)
	set.MaxFiles = l.local.MaxFiles // loopMaxFiles: plain unix listeners only
	if rec.flags&flWS != 0 {
		set.MaxFiles = 0 // WebSocket connections take no descriptors
	}
	return set
}

func (l *evLoop) intern(set wire.Settings) *wire.Settings {
	if p := l.settings[set]; p != nil {
		return p
	}
	p := &set
	if len(l.settings) < maxInterned {
		l.settings[set] = p
	}
	return p
}
