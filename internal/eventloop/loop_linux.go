//go:build linux

package eventloop

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/acceptshed"
	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/wire"
)

// The event loop. One goroutine (the one that called Serve) owns an epoll
// instance, the listening socket and, for every connection, a compact record
// (loopConn) in a table indexed by file descriptor. Connections are raw
// descriptors accepted with accept4: no net.Conn, no runtime poller entry,
// no goroutine. epoll is level-triggered: the loop reads each ready socket
// once per round (fair, and nothing is lost if it does not drain a socket),
// and asks for EPOLLOUT only while a write is waiting. Reads and writes use
// package syscall, as the net package does, so that the race detector sees
// the same happens-before edges through the kernel as in goroutine mode.
//
// A connection is in one of two shapes. Idle, it is only its record (about
// 100 bytes): the peer's identity and settings, its admission (limiter), the
// stream ids and flow-control windows of its session (mux.FedState). Active,
// it also has an activeConn: a fed mux.Session (see mux.NewFed), the
// server's side of it (Session, registered with the server so that Stats,
// Shutdown and Close treat it like any other session), and, while the loop holds the start of a
// frame, a pooled buffer for it. The loop reads into one shared buffer;
// only bytes of an incomplete frame are copied out, into a buffer sized as
// the frame's bytes arrive (never past HeaderSize+MaxFrameSize). Small unary
// calls run on the loop (inline_linux.go), others on the server's workers. A session with no call in progress, nothing to
// write and no partial frame hibernates after HibernateAfter: its state goes
// back into the record and everything else is dropped. The next byte from
// the peer rebuilds it.

const (
	// Tick is how often the active connections are checked.
	Tick = 50 * time.Millisecond
	// HibernateAfter is the quiet time before a session hibernates.
	HibernateAfter = 250 * time.Millisecond
	acceptBatch    = 64 // connections accepted per round
	maxEvents      = 256
	readBufSize    = 64 << 10
	pageShift      = 9 // 512 records per table page
	maxInterned    = 1024
)

// Record states.
const (
	stFree      uint8 = iota
	stHandshake       // waiting for the client's preface
	stOpen
)

// Record flags.
const (
	flFresh  uint8 = 1 << iota // no session yet: NewFed starts from the peer's settings
	flCred                     // uid, gid and pid were read from the kernel
	flIPv4                     // ip holds an IPv4 address (in its first 4 bytes)
	flWS                       // a WebSocket connection: warren bytes travel in binary messages
	flWSMsg                    // WebSocket, hibernating within a fragmented message
	flWSUp                     // WebSocket, in the opening handshake (the loop reads the request)
	flHS                       // counted among its peer's connections in their handshake
	flGoAway                   // fed.goAwayLast holds the last stream id of a GOAWAY sent
)

// evLoop is one event loop.
type evLoop struct {
	core     Core
	opts     Options
	adm      *admit.Core     // core's
	ctx      context.Context // core's: ends when the server closes
	closed   <-chan struct{} // core's Closing
	ls       *loopListener
	p        *evloop.Poller
	lfd      int // the loop's descriptor of the listening socket; -1 once closed
	table    connTable
	active   []*loopConn // records with an activeConn
	nconns   int         // records in use
	rbuf     []byte
	local    wire.Settings
	preface  []byte
	settings map[wire.Settings]*wire.Settings // interned peer settings
	files    loopFiles                        // descriptors (files_linux.go)

	// The preface answering clients that asked for large frames
	// (prefaceFor), and its settings.
	widePreface []byte
	wide        wire.Settings

	start, now  time.Time
	readTimeout time.Duration // 0: none
	idleTimeout time.Duration // 0: none
	hsTimeout   time.Duration
	lastSweep   time.Time
	lastIdle    time.Time

	acceptOff     bool // the listening socket is out of the poller after an accept error
	acceptResume  time.Time
	acceptBackoff time.Duration
	reserve       *acceptshed.Shedder // the reserve descriptor and the accept-error log
	refusing      int                 // refused connections open, at most maxRefusing

	closing bool // the server began closing: no more accepts, idle connections go
	stop    chan struct{}

	lrc  syscall.RawConn // the listener's socket, to notice its Close
	lost chan struct{}   // closed when the listener was closed (not by the server)
	gone bool            // lost is closed

	inline loopInline // calls run on the loop (inline_linux.go)
	done   chan error // the loop's result

	eng      *admit.Engine              // sheds the loop's connections (shedConn)
	amu      sync.Mutex                 // protects adopts, sheds and adoptOff
	adopts   []adoption                 // WebSocket connections handed (back) to the loop
	sheds    []shedReq                  // connections the admission core shed or evicted
	hs       map[int32]*admit.Handshake // by descriptor, while flHS; the loop's own
	adoptOff bool                       // the loop has ended
}

// launch starts the loop on a new goroutine; its result goes to l.done.
func (l *evLoop) launch() {
	l.core.Go(func() { // wakes the loop when the server begins closing and when it closes
		select {
		case <-l.closed:
			l.p.Wake()
		case <-l.stop:
			return
		}
		select {
		case <-l.ctx.Done():
			l.p.Wake()
		case <-l.stop:
		}
	})
	l.now = time.Now()
	l.lastSweep, l.lastIdle = l.now, l.now
	l.core.Go(func() { l.own(false) })
}

// own runs the loop on the calling goroutine (one of Core.Go) until it
// ends, or until another goroutine takes it over (see takeover); resumed
// is set for the goroutine that took it over. The one that ends it closes
// everything and reports the result on l.done.
func (l *evLoop) own(resumed bool) {
	if resumed {
		l.now = time.Now()
		if !l.runRest() {
			return // taken over again
		}
	}
	taken, err := l.loop(resumed)
	if taken {
		return
	}
	close(l.stop)
	l.endAdoptions()
	l.closeAll()
	l.adm.RemoveEngine(l.eng) // its connections are released
	if l.lfd >= 0 {
		unix.Close(l.lfd)
	}
	l.reserve.Close()
	l.p.Close()
	if !l.closing {
		l.opts.Counters.Open.Add(-1)
	}
	l.opts.Counters.Loops.Add(-1)
	l.done <- err
}

// loop is the loop's body. It returns taken when another goroutine took the
// loop over while a call ran inline; resumed skips the first wait.
func (l *evLoop) loop(resumed bool) (taken bool, err error) {
	for {
		if !resumed {
			evs, _, err := l.p.Wait(l.waitTime())
			if err != nil {
				l.core.Logger().Error("warren: event loop failed", "err", err)
				return false, fmt.Errorf("warren: event loop: %w", err)
			}
			l.now = time.Now()
			for _, ev := range evs {
				if fd := int(ev.Fd); fd == l.lfd {
					l.accept()
				} else {
					l.event(fd, ev.Events)
				}
				if len(l.inline.ready) > 0 && !l.runReady() {
					return true, nil
				}
			}
		}
		resumed = false
		l.takeAdoptions()
		l.shed()
		if len(l.inline.ready) > 0 && !l.runReady() {
			return true, nil
		}
		if !l.closing {
			select {
			case <-l.closed:
				l.beginClosing()
			default:
			}
		}
		if l.ctx.Err() != nil {
			return false, ErrServerClosed // Close, or the end of Shutdown: closeAll runs above
		}
		if l.now.Sub(l.lastSweep) >= Tick {
			l.sweep()
			if l.checkListener() && l.nconns == 0 {
				return false, nil // Serve has returned; nothing is left to serve
			}
		}
		if l.idleTimeout > 0 && l.now.Sub(l.lastIdle) >= l.idleSweepEvery() {
			l.sweepIdle()
		}
		if l.acceptOff && !l.closing && !l.now.Before(l.acceptResume) {
			if l.p.Add(l.lfd, evloop.In) == nil {
				l.acceptOff = false
			}
		}
	}
}

// checkListener notices that the listener was closed by its owner (not by
// the server): the loop stops accepting and Serve returns, as in goroutine
// mode, while the connections already accepted are served on. It reports
// whether the listener is gone.
func (l *evLoop) checkListener() bool {
	if l.gone || l.closing {
		return l.gone
	}
	if l.lrc.Control(func(uintptr) {}) == nil {
		return false
	}
	select {
	case <-l.closed:
		return false // closed by the server: the next round begins closing
	default:
	}
	if !l.acceptOff {
		l.p.Del(l.lfd)
	}
	unix.Close(l.lfd)
	l.lfd, l.acceptOff = -1, false
	l.gone = true
	close(l.lost)
	return true
}

// waitTime returns how long the next Wait may block, in milliseconds.
func (l *evLoop) waitTime() int {
	ms := -1
	bound := func(d time.Duration) {
		m := int(max(d, time.Millisecond) / time.Millisecond)
		if ms < 0 || m < ms {
			ms = m
		}
	}
	if len(l.active) > 0 || l.closing || l.gone {
		bound(Tick)
	}
	if !l.closing && !l.gone {
		bound(time.Second) // to notice the listener's Close
	}
	if l.idleTimeout > 0 && l.nconns > 0 {
		bound(l.idleSweepEvery())
	}
	if l.acceptOff {
		bound(time.Until(l.acceptResume))
	}
	return ms
}

func (l *evLoop) idleSweepEvery() time.Duration {
	return min(max(l.idleTimeout/4, Tick), time.Second)
}

// clock returns the loop's time in milliseconds since it started.
func (l *evLoop) clock() uint32 { return uint32(l.now.Sub(l.start) / time.Millisecond) }

// event handles what epoll reported for fd.
func (l *evLoop) event(fd int, ev uint32) {
	rec := l.table.lookup(fd)
	if rec == nil || rec.state == stFree {
		return
	}
	if ev&evloop.Out != 0 {
		if a := rec.act; a != nil && a.conn != nil && a.conn.writableEvent() && a.sess != nil {
			a.sess.Writable()
			l.updatePause(rec)
		}
	}
	if ev&(evloop.In|evloop.Hup|evloop.Err|evloop.RdHup) != 0 {
		l.read(rec)
	}
}
