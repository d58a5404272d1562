//go:build linux

package rpc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/wsframe"
	"github.com/warrenipc/warren/mux"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
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
// it also has an activeConn: a fed mux.Session (see mux.NewFed), a
// serverConn registered in Server.conns (so Stats, Shutdown and Close treat
// it like any other session), and, while the loop holds the start of a
// frame, a pooled buffer for it. The loop reads into one shared buffer;
// only bytes of an incomplete frame are copied out, into a buffer sized as
// the frame's bytes arrive (never past HeaderSize+MaxFrameSize). Calls run
// on the server's workers. A session with no call in progress, nothing to
// write and no partial frame hibernates after hibernateAfter: its state goes
// back into the record and everything else is dropped. The next byte from
// the peer rebuilds it.

const (
	tick           = 50 * time.Millisecond  // how often the active connections are checked
	hibernateAfter = 250 * time.Millisecond // quiet time before a session hibernates
	acceptBatch    = 64                     // connections accepted per round
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
	flFresh uint8 = 1 << iota // no session yet: NewFed starts from the peer's settings
	flCred                    // uid, gid and pid were read from the kernel
	flIPv4                    // ip holds an IPv4 address (in its first 4 bytes)
	flWS                      // a WebSocket connection: warren bytes travel in binary messages
	flWSMsg                   // WebSocket, hibernating within a fragmented message
)

// loopConn is the record of one connection, kept for its whole life in the
// loop's table. Only the loop goroutine touches it.
type loopConn struct {
	act   *activeConn    // non-nil while the connection is active
	set   *wire.Settings // the peer's settings (interned); nil before the preface
	lim   *peerLimiter   // non-nil once admitted under the connection limits
	fed   mux.FedState   // the session's state while it hibernates
	fd    int32
	uid   int32
	gid   int32
	pid   int32
	last  uint32 // loop clock (ms) when the last byte arrived
	port  uint16 // tcp
	state uint8
	flags uint8
	ip    [16]byte // tcp
}

// activeConn is what an active connection has besides its record.
type activeConn struct {
	conn    *fedConn
	sess    *mux.Session // nil until the connection needs one
	sc      *serverConn  // with sess
	pend    *pool.Buf    // the start of a frame (or of the preface) read so far
	plen    int
	since   time.Time // when the handshake or the frame in pend began
	lastIO  time.Time // when the last byte arrived
	closeAt time.Time // a refused connection: when to close it
	refuse  string    // why the connection is refused, if it is
	code    status.Code
	idx     int     // in evLoop.active
	ws      *wsConn // WebSocket connections: the frame decoder
}

// connTable maps file descriptors to records. Pages are allocated as
// descriptors reach them (the kernel hands out the lowest free one) and
// dropped when their last record is freed; records never move while in
// use, so pointers to them stay valid.
type connTable struct {
	pages []*[1 << pageShift]loopConn
	used  []int32 // records in use per page
}

// get returns the record for fd, a descriptor just accepted, counting it in
// use.
func (t *connTable) get(fd int) *loopConn {
	p := fd >> pageShift
	for len(t.pages) <= p {
		t.pages = append(t.pages, nil)
		t.used = append(t.used, 0)
	}
	if t.pages[p] == nil {
		t.pages[p] = new([1 << pageShift]loopConn)
	}
	t.used[p]++
	return &t.pages[p][fd&(1<<pageShift-1)]
}

// free clears fd's record and drops its page if no record of it is in use.
func (t *connTable) free(fd int) {
	p := fd >> pageShift
	t.pages[p][fd&(1<<pageShift-1)] = loopConn{}
	if t.used[p]--; t.used[p] == 0 {
		t.pages[p] = nil
	}
}

func (t *connTable) lookup(fd int) *loopConn {
	p := fd >> pageShift
	if fd < 0 || p >= len(t.pages) || t.pages[p] == nil {
		return nil
	}
	return &t.pages[p][fd&(1<<pageShift-1)]
}

// each calls fn for every record in use.
func (t *connTable) each(fn func(*loopConn)) {
	for _, pg := range t.pages {
		if pg == nil {
			continue
		}
		for i := range pg {
			if pg[i].state != stFree {
				fn(&pg[i])
			}
		}
	}
}

// loopListener is what the loop knows of its listener.
type loopListener struct {
	tl    *transport.Listener // nil for a plain net listener
	ws    bool                // a ws:// listener: every connection opens with a WebSocket handshake
	unix  bool
	netw  string   // peer.Peer.Network: "unix" or "tcp"
	local net.Addr // unix: the listener's address (the path of a socket file)
}

// loopListenerOf returns the listening socket of l, if the loop can serve it.
func loopListenerOf(l net.Listener) (*loopListener, syscall.RawConn) {
	ls := &loopListener{}
	var rc syscall.RawConn
	var err error
	switch tl := l.(type) {
	case *transport.Listener:
		if rc, err = tl.SyscallConn(); err != nil {
			if tl.Endpoint().Scheme != transport.SchemeWS || wsframe.ListenerSocket == nil {
				return nil, nil
			}
			if rc, err = wsframe.ListenerSocket(tl); err != nil {
				return nil, nil
			}
			ls.ws = true
		}
		ls.tl, ls.netw = tl, tl.Endpoint().Scheme
		ls.unix = ls.netw == transport.SchemeUnix
	case *net.UnixListener:
		if tl.Addr().Network() != "unix" {
			return nil, nil // unixpacket
		}
		if rc, err = tl.SyscallConn(); err != nil {
			return nil, nil
		}
		ls.netw, ls.unix = "unix", true
	case *net.TCPListener:
		if rc, err = tl.SyscallConn(); err != nil {
			return nil, nil
		}
		ls.netw = "tcp"
	default:
		return nil, nil
	}
	if ls.unix {
		ls.local = l.Addr()
	}
	return ls, rc
}

// serveEventLoop serves l from an event loop on the calling goroutine until
// the server closes. handled is false when the loop cannot serve l (Serve
// then uses the goroutine mode).
func (s *Server) serveEventLoop(l net.Listener) (handled bool, err error) {
	ls, rc := loopListenerOf(l)
	if rc == nil {
		return false, nil
	}
	local := s.opts.Settings.WithDefaults()
	if local.Validate() != nil {
		return false, nil // every connection fails its handshake: as the goroutine mode does
	}
	// The loop accepts on its own descriptor of the listening socket, so
	// that the listener's Close (by Shutdown, or by the user) cannot make
	// it accept on a closed or reused descriptor.
	lfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { lfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return false, nil
	}
	if err := unix.SetNonblock(lfd, true); err != nil {
		unix.Close(lfd)
		return false, nil
	}
	p, err := evloop.NewPoller(maxEvents)
	if err != nil {
		unix.Close(lfd)
		s.logger.Warn("warren: event loop unavailable; serving a goroutine per connection", "err", err)
		return false, nil
	}
	if err := p.Add(lfd, evloop.In); err != nil {
		p.Close()
		unix.Close(lfd)
		return false, nil
	}
	lp := &evLoop{
		srv: s, ls: ls, p: p, lfd: lfd,
		rbuf:        make([]byte, readBufSize),
		local:       local,
		preface:     wire.AppendPreface(nil, local),
		settings:    map[wire.Settings]*wire.Settings{},
		start:       time.Now(),
		readTimeout: s.readTimeout(),
		idleTimeout: s.opts.IdleTimeout,
		hsTimeout:   s.handshakeTimeout(),
		stop:        make(chan struct{}),
		lrc:         rc,
		lost:        make(chan struct{}),
	}
	s.ev.loops.Add(1)
	loopsStarted.Add(1)
	// The loop runs on its own goroutine so that Serve can return when the
	// listener is closed (as it does in goroutine mode) while the loop
	// goes on serving the connections it has.
	done := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.ev.loops.Add(-1)
		done <- lp.run()
	}()
	select {
	case err := <-done:
		return true, err
	case <-lp.lost:
		return true, fmt.Errorf("warren: accept: %w", net.ErrClosed)
	}
}

// evLoop is one event loop.
type evLoop struct {
	srv      *Server
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

	start, now  time.Time
	readTimeout time.Duration // 0: none
	idleTimeout time.Duration // 0: none
	hsTimeout   time.Duration
	lastSweep   time.Time
	lastIdle    time.Time

	acceptOff     bool // the listening socket is out of the poller after an accept error
	acceptResume  time.Time
	acceptBackoff time.Duration

	closing bool // the server began closing: no more accepts, idle connections go
	stop    chan struct{}

	lrc  syscall.RawConn // the listener's socket, to notice its Close
	lost chan struct{}   // closed when the listener was closed (not by the server)
	gone bool            // lost is closed

	amu      sync.Mutex // protects adopts and adoptOff
	adopts   []adoption // WebSocket connections handed (back) to the loop
	adoptOff bool       // the loop has ended
}

func (l *evLoop) run() error {
	s := l.srv
	s.wg.Add(1)
	go func() { // wakes the loop when the server begins closing and when it closes
		defer s.wg.Done()
		select {
		case <-s.closed:
			l.p.Wake()
		case <-l.stop:
			return
		}
		select {
		case <-s.ctx.Done():
			l.p.Wake()
		case <-l.stop:
		}
	}()
	defer func() {
		close(l.stop)
		l.endAdoptions()
		l.closeAll()
		if l.lfd >= 0 {
			unix.Close(l.lfd)
		}
		l.p.Close()
	}()
	l.now = time.Now()
	l.lastSweep, l.lastIdle = l.now, l.now
	for {
		evs, _, err := l.p.Wait(l.waitTime())
		if err != nil {
			s.logger.Error("warren: event loop failed", "err", err)
			return fmt.Errorf("warren: event loop: %w", err)
		}
		l.now = time.Now()
		for _, ev := range evs {
			if fd := int(ev.Fd); fd == l.lfd {
				l.accept()
			} else {
				l.event(fd, ev.Events)
			}
		}
		l.takeAdoptions()
		if !l.closing {
			select {
			case <-s.closed:
				l.beginClosing()
			default:
			}
		}
		if s.ctx.Err() != nil {
			return ErrServerClosed // Close, or the end of Shutdown: closeAll runs above
		}
		if l.now.Sub(l.lastSweep) >= tick {
			l.sweep()
			if l.checkListener() && l.nconns == 0 {
				return nil // Serve has returned; nothing is left to serve
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
	case <-l.srv.closed:
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
		bound(tick)
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
	return min(max(l.idleTimeout/4, tick), time.Second)
}

// clock returns the loop's time in milliseconds since it started.
func (l *evLoop) clock() uint32 { return uint32(l.now.Sub(l.start) / time.Millisecond) }

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
		if tl.AdmitPeer(p) != nil { // logged and counted by the listener
			l.table.free(fd)
			unix.Close(fd)
			return
		}
	}
	if l.ls.ws {
		l.wsHandshake(fd, p)
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

func (rec *loopConn) ipAddr() net.IP {
	if rec.flags&flIPv4 != 0 {
		return net.IPv4(rec.ip[0], rec.ip[1], rec.ip[2], rec.ip[3])
	}
	return net.IP(bytes.Clone(rec.ip[:]))
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
		return "server is shutting down"
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

// read reads once from rec's socket and handles what arrived.
func (l *evLoop) read(rec *loopConn) {
	if rec.flags&flWS != 0 {
		l.readWS(rec, nil)
		return
	}
	fd := int(rec.fd)
	a := rec.act
	var data []byte
	fromPend := a != nil && a.plen > 0
	var n int
	var err error
	if fromPend {
		l.growPend(rec, a)
		n, err = syscall.Read(fd, a.pend.B[a.plen:])
	} else {
		n, err = syscall.Read(fd, l.rbuf)
	}
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil:
		l.finalize(rec, os.NewSyscallError("read", err))
		return
	case n == 0:
		if fromPend {
			l.finalize(rec, io.ErrUnexpectedEOF)
		} else {
			l.finalize(rec, io.EOF)
		}
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
	}
	l.keep(a, data, done, fromPend)
	l.updatePause(rec)
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
	var k int
	if c := rec.act.conn; c != nil && c.fr != nil {
		k, err = c.Write(l.preface)
	} else {
		k, err = syscall.Write(int(rec.fd), l.preface)
	}
	if err != nil || k != len(l.preface) {
		l.finalize(rec, fmt.Errorf("warren: sending preface: %v", err))
		return 0, false
	}
	rec.set = l.intern(set)
	rec.state = stOpen
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

// activate gives rec a session, waking it up if it hibernates. It returns
// false if the connection had to be closed.
func (l *evLoop) activate(rec *loopConn) bool {
	s := l.srv
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
	sc := &serverConn{srv: s, conn: c, peer: p, uid: -1}
	if p.HasCred {
		sc.uid = p.UID
	}
	sc.ctx = peer.NewContext(s.ctx, p)
	cfg := mux.Config{
		Settings:         s.opts.Settings,
		HandshakeTimeout: s.handshakeTimeout(),
		NewStream:        newServerStream,
		OnStream:         sc.onStream,
		OnRequest:        sc.onRequestWorker,
		OnReset:          resetServerCall,
		OnEnd:            endCall,
	}
	if a.refuse != "" {
		refuse := a.refuse
		cfg.OnStream = func(st *mux.Stream, _ *wire.CallHeader) { st.Refuse(status.ResourceExhausted, refuse) }
	}
	st := &rec.fed
	if rec.flags&flFresh != 0 {
		st = nil
	}
	sess, err := mux.NewFed(c, &cfg, *rec.set, st)
	if err != nil {
		l.finalize(rec, err)
		return false
	}
	rec.flags &^= flFresh
	a.conn, a.sess, a.sc = c, sess, sc
	sc.sess = sess
	if a.refuse != "" {
		return true // not admitted: not in s.conns
	}
	sc.lim, sc.key = rec.lim, l.limiterKey(rec, p)
	s.mu.Lock()
	closing := s.closing
	s.conns[sc] = struct{}{}
	s.ev.light--
	s.ev.peak = max(s.ev.peak, len(s.conns))
	s.mu.Unlock()
	s.ev.wakes.Add(1)
	if closing {
		sess.GoAway(status.Unavailable, "server is shutting down")
	}
	return true
}

// hibernate drops rec's session if it is quiet, keeping its state in the
// record.
func (l *evLoop) hibernate(rec *loopConn) {
	s := l.srv
	a := rec.act
	if l.partial(a) || a.refuse != "" || a.conn != nil && a.conn.controlPending() {
		return
	}
	if a.sess != nil {
		if a.sc.calls.Load() != 0 || a.sc.running.Load() != 0 {
			return // (calls first: a call counts in running before it leaves calls)
		}
		st, ok := a.sess.Hibernate()
		if !ok {
			return
		}
		a.conn.retire()
		rec.fed = st
		s.mu.Lock()
		delete(s.conns, a.sc)
		s.ev.light++
		if n := len(s.conns); s.ev.peak >= 4096 && n < s.ev.peak/8 {
			// Most sessions hibernated after a burst: give back the room
			// the map grew to.
			m := make(map[*serverConn]struct{}, n)
			for sc := range s.conns {
				m[sc] = struct{}{}
			}
			s.conns, s.ev.peak = m, n
		}
		s.mu.Unlock()
		s.ev.hibernations.Add(1)
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
	return a.sess == nil || a.sc.calls.Load() == 0 && a.sess.NumStreams() == 0 && a.sess.WriteBacklog() == 0
}

// finalize closes rec's connection: its session ends with err, its
// admission is released and its descriptor closed.
func (l *evLoop) finalize(rec *loopConn, err error) {
	fd := int(rec.fd)
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
		switch {
		case a.sc != nil && a.refuse == "":
			l.srv.removeConn(a.sc)
			rec.lim = nil
		case rec.lim != nil:
			l.release(rec)
		}
	} else if rec.lim != nil {
		l.release(rec)
	}
	l.table.free(fd) // before the descriptor can be reused
	unix.Close(fd)
	l.nconns--
}

// handoff gives a connection whose peer sent an HTTP request to the
// goroutine mode (ServeConn, which serves it on the HTTP bridge), with the
// bytes read so far.
func (l *evLoop) handoff(rec *loopConn, data []byte) {
	s := l.srv
	fd := int(rec.fd)
	l.p.Del(fd)
	p := l.peerOf(rec, nil)
	prefix := bytes.Clone(data)
	if a := rec.act; a != nil {
		if a.pend != nil {
			pool.Put(a.pend)
		}
		l.removeActive(rec)
	}
	if rec.lim != nil {
		l.release(rec) // ServeConn admits it again
	}
	l.table.free(fd)
	l.nconns--
	f := os.NewFile(uintptr(fd), "")
	c, err := net.FileConn(f) // a duplicate, in the runtime's poller
	f.Close()
	if err != nil {
		return
	}
	hc := &handoffConn{Conn: c, prefix: prefix, peer: p, adopt: l.submit}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.ServeConn(hc)
	}()
}

// updatePause stops reading from a connection whose peer does not read
// what it is sent, once more is waiting than flow control can explain (the
// connection window plus a margin, so only control frames such as PING
// replies could be behind it), and resumes once the backlog is written.
func (l *evLoop) updatePause(rec *loopConn) {
	a := rec.act
	if a == nil || a.sess == nil || a.conn == nil {
		return
	}
	limit := int(16*int64(rec.set.InitialWindow) + 1<<20)
	a.conn.setPaused(a.sess.WriteBacklog() >= limit)
}

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
)

func (l *evLoop) check(rec *loopConn) {
	a := rec.act
	if a.ws != nil && a.ws.drain {
		if !l.now.Before(a.closeAt) {
			l.finalize(rec, a.ws.err)
		}
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
	}
	if err != nil {
		l.finalize(rec, err)
		return
	}
	if rec.state == stHandshake || !a.closeAt.IsZero() || l.partial(a) || l.now.Sub(a.lastIO) < hibernateAfter {
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
	last := rec.fed.LastPeerID
	if rec.fed.GoAwaySent {
		last = min(last, rec.fed.GoAwayLast)
	}
	var buf [128]byte
	b := wire.AppendHeader(buf[:0], wire.Header{Type: wire.TypeGoAway})
	b = wire.AppendGoAway(b, last, uint32(code), msg)
	wire.PutHeader(b, wire.Header{Length: uint32(len(b) - wire.HeaderSize), Type: wire.TypeGoAway})
	if rec.flags&flWS != 0 {
		var fb [160]byte
		f := wsframe.AppendHeader(fb[:0], len(b))
		f = append(f, b...)
		b = wsframe.AppendClose(f, wsframe.CloseNormal)
	}
	syscall.Write(int(rec.fd), b)
}

// beginClosing runs once the server begins closing (Shutdown or Close):
// the loop stops accepting, and connections without a session (idle ones)
// are told to go away and closed. Sessions had their GOAWAY from Shutdown,
// or get it when they wake up; they are closed once they are quiet (or by
// closeAll).
func (l *evLoop) beginClosing() {
	l.closing = true
	if l.lfd >= 0 {
		if !l.acceptOff {
			l.p.Del(l.lfd)
		}
		unix.Close(l.lfd)
		l.lfd, l.acceptOff = -1, false
	}
	l.table.each(func(rec *loopConn) {
		if rec.act == nil || rec.state == stOpen && rec.act.sess == nil {
			l.goAway(rec, status.Unavailable, "server is shutting down")
			l.finalize(rec, mux.ErrClosed)
		}
	})
}

// closeAll closes every connection at once.
func (l *evLoop) closeAll() {
	l.table.each(func(rec *loopConn) { l.finalize(rec, mux.ErrClosed) })
}

// fedConn is the mux.FedConn of an active connection: non-blocking writes
// to the raw descriptor. Its lock orders writes with the loop closing the
// descriptor, so that a write never reaches a descriptor number the kernel
// has given to a newer connection. Only the loop closes the descriptor;
// Close (from a session) shuts the socket down, and the loop, which sees the
// hang-up, finishes.
type fedConn struct {
	l             *evLoop
	fd            int
	local, remote net.Addr
	wdl           atomic.Int64 // write deadline (UnixNano); 0 for none

	mu     sync.Mutex // protects following
	closed bool       // no more writes: closed by the session, or retired by the loop
	out    bool       // registered for EPOLLOUT
	paused bool       // not registered for EPOLLIN

	// WebSocket connections only: each Write is one binary frame.
	fr       evloop.Framing
	hdr      [16]byte // the header of the frame being written
	hoff     uint8    // hdr[hoff:hlen] is still to write
	hlen     uint8
	left     int    // payload bytes of the frame being written still to write
	ctl      []byte // control frames (pong, close) waiting for the socket or the end of a frame
	wsClosed bool   // a close frame was sent or queued: no data frame may follow
}

var _ mux.FedConn = (*fedConn)(nil)

func (c *fedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.fr != nil {
		return c.writeWSLocked(b)
	}
	n := 0
	for n < len(b) {
		k, err := syscall.Write(c.fd, b[n:])
		if k > 0 {
			n += k
		}
		switch err {
		case nil:
		case unix.EINTR:
		case unix.EAGAIN:
			return n, mux.ErrWouldBlock
		default:
			return n, c.writeError(err)
		}
	}
	return n, nil
}

func (c *fedConn) events() uint32 {
	ev := uint32(evloop.RdHup)
	if !c.paused {
		ev |= evloop.In
	}
	if c.out {
		ev |= evloop.Out
	}
	return ev
}

// WaitWritable registers the socket for EPOLLOUT; the loop then calls the
// session's Writable.
func (c *fedConn) WaitWritable() {
	c.mu.Lock()
	if !c.closed && !c.out {
		c.out = true
		c.l.p.Mod(c.fd, c.events())
	}
	c.mu.Unlock()
}

// writableEvent unregisters EPOLLOUT after the loop saw it, and reports
// whether it was asked for.
func (c *fedConn) writableEvent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.out || c.closed {
		return false
	}
	c.out = false
	if c.fr != nil && len(c.ctl) > 0 && c.atBoundary() && c.flushControlLocked() == mux.ErrWouldBlock {
		c.out = true
	}
	c.l.p.Mod(c.fd, c.events())
	return true
}

func (c *fedConn) setPaused(p bool) {
	c.mu.Lock()
	if !c.closed && c.paused != p {
		c.paused = p
		c.l.p.Mod(c.fd, c.events())
	}
	c.mu.Unlock()
}

// retire ends the fedConn's use of the descriptor (the session hibernated
// or the loop is closing it). The descriptor goes back to reading only.
func (c *fedConn) retire() {
	c.mu.Lock()
	if !c.closed && (c.out || c.paused) {
		c.out, c.paused = false, false
		c.l.p.Mod(c.fd, c.events())
	}
	c.closed = true
	c.mu.Unlock()
}

func (c *fedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close shuts the socket down; the loop sees the hang-up and closes it.
func (c *fedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.fr != nil {
		// End the WebSocket connection with a close frame, if it can go
		// out now, and let the peer read what was sent before it.
		if !c.wsClosed && c.atBoundary() && len(c.ctl) == 0 {
			var b [4]byte
			syscall.Write(c.fd, c.fr.AppendClose(b[:0], wsframe.CloseNormal))
		}
		c.wsClosed = true
		unix.Shutdown(c.fd, unix.SHUT_WR)
	} else {
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	c.l.p.Wake()
	return nil
}

func (c *fedConn) writeTimedOut(now time.Time) bool {
	d := c.wdl.Load()
	return d != 0 && now.UnixNano() >= d
}

func (c *fedConn) Read([]byte) (int, error) {
	return 0, errors.New("warren: the event loop reads this connection")
}
func (c *fedConn) LocalAddr() net.Addr             { return c.local }
func (c *fedConn) RemoteAddr() net.Addr            { return c.remote }
func (c *fedConn) SetReadDeadline(time.Time) error { return nil }
func (c *fedConn) SetDeadline(t time.Time) error   { return c.SetWriteDeadline(t) }
func (c *fedConn) SetWriteDeadline(t time.Time) error {
	var d int64
	if !t.IsZero() {
		d = t.UnixNano()
	}
	c.wdl.Store(d)
	return nil
}
