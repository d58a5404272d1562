package drain

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// NoticeWait bounds how long an HTTP drain waits for the streams that tell
// their peer of the drain (a health Watch sending NOT_SERVING) before it
// sends the GOAWAYs.
const NoticeWait = time.Second

// HTTP drains a server's HTTP connections in order: the streams that tell
// their peer of the drain (Notice) send it first; then every HTTP/2
// connection is sent its GOAWAY (http.Server.Shutdown: streams up to its
// last stream id run to completion, those above it are never processed,
// which clients retry) and every HTTP/1.1 connection closes once idle;
// once each GOAWAY has been written, GoneAway is closed, and the server's
// own long-lived streams end. The zero HTTP is ready.
type HTTP struct {
	mu       sync.Mutex
	conns    map[*Tap]struct{}
	pending  int           // Notice streams that have yet to send
	noticed  chan struct{} // signalled when pending drops
	goneAway chan struct{}
	started  bool
}

func (h *HTTP) initLocked() {
	if h.conns == nil {
		h.conns = map[*Tap]struct{}{}
		h.noticed = make(chan struct{}, 1)
		h.goneAway = make(chan struct{})
	}
}

// Track returns conn wrapped in a Tap, counted among the connections to
// drain until Untrack. The caller sets the Tap's Server before serving.
func (h *HTTP) Track(conn net.Conn) *Tap {
	t := &Tap{Conn: conn, goAway: make(chan struct{})}
	h.mu.Lock()
	h.initLocked()
	h.conns[t] = struct{}{}
	h.mu.Unlock()
	return t
}

// Untrack forgets t, whose connection has ended.
func (h *HTTP) Untrack(t *Tap) {
	h.mu.Lock()
	delete(h.conns, t)
	h.mu.Unlock()
}

// Notice registers a stream that must tell its peer of the drain before
// the GOAWAY; it calls the returned func once it has, or has ended.
func (h *HTTP) Notice() (sent func()) {
	h.mu.Lock()
	h.initLocked()
	h.pending++
	h.mu.Unlock()
	return sync.OnceFunc(func() {
		h.mu.Lock()
		h.pending--
		h.mu.Unlock()
		select {
		case h.noticed <- struct{}{}:
		default:
		}
	})
}

// GoneAway returns a channel closed once every HTTP/2 connection has been
// written its GOAWAY.
func (h *HTTP) GoneAway() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.initLocked()
	return h.goneAway
}

// GoAway drains the connections: it waits for the Notice streams (at most
// NoticeWait), shuts each connection's server down on a goroutine counted
// in wg (ending with ctx or the connection), waits for each GOAWAY to be
// written (at most NoticeWait), and closes GoneAway.
func (h *HTTP) GoAway(ctx context.Context, wg *sync.WaitGroup) {
	h.mu.Lock()
	h.initLocked()
	if h.started {
		h.mu.Unlock()
		return
	}
	h.started = true
	h.mu.Unlock()
	timer := time.NewTimer(NoticeWait)
	defer timer.Stop()
	for {
		h.mu.Lock()
		n := h.pending
		h.mu.Unlock()
		if n <= 0 {
			break
		}
		select {
		case <-h.noticed:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	h.mu.Lock()
	taps := make([]*Tap, 0, len(h.conns))
	for t := range h.conns {
		taps = append(taps, t)
	}
	h.mu.Unlock()
	for _, t := range taps {
		if t.Server == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Server.Shutdown(ctx)
		}()
	}
	timer.Reset(NoticeWait)
	for _, t := range taps {
		if t.Server == nil || !t.isH2() {
			continue
		}
		select {
		case <-t.goAway:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
	close(h.goneAway)
}

// Close waits, at most Linger or until ctx ends, for the connections to
// end, the server reading all their peers send meanwhile, so that none is
// then closed with the peer's bytes unread, which would reset it: an
// HTTP/2 client closes its connection once its streams have ended after
// the GOAWAY (or the server closes it 1 s later), and an HTTP/1.1
// connection, idle once the calls are done, is half-closed here for its
// client to close.
func (h *HTTP) Close(ctx context.Context) {
	h.mu.Lock()
	for t := range h.conns {
		if !t.isH2() {
			t.CloseWrite()
		}
	}
	h.mu.Unlock()
	timer := time.NewTimer(Linger)
	defer timer.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		h.mu.Lock()
		n := len(h.conns)
		h.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-tick.C:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		return
	}
}

// Tap is a server's HTTP connection that watches what the server writes
// for an HTTP/2 GOAWAY frame.
type Tap struct {
	net.Conn
	Server *http.Server // the connection's server, set before serving

	started atomic.Bool // the first read was seen
	h2      atomic.Bool // it began with the HTTP/2 client preface
	mu      sync.Mutex  // for the fields below (HTTP/2 only)
	hdr     [9]byte
	nhdr    int // bytes of hdr filled
	skip    int // payload bytes of the current frame still to come
	goAway  chan struct{}
	gone    bool
}

func (t *Tap) isH2() bool { return t.h2.Load() }

// Read reads from the connection and notes whether it speaks HTTP/2.
func (t *Tap) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	if n > 0 && !t.started.Load() {
		t.h2.Store(string(b[:min(n, 4)]) == "PRI ")
		t.started.Store(true)
	}
	return n, err
}

// Write writes b and, on HTTP/2, scans what was written for frame headers.
func (t *Tap) Write(b []byte) (int, error) {
	n, err := t.Conn.Write(b)
	if t.h2.Load() {
		t.mu.Lock()
		t.scan(b[:n])
		t.mu.Unlock()
	}
	return n, err
}

// scan follows the frames in p, a piece of what the server wrote. t.mu is
// held.
func (t *Tap) scan(p []byte) {
	for !t.gone && len(p) > 0 {
		if t.skip > 0 {
			k := min(t.skip, len(p))
			t.skip -= k
			p = p[k:]
			continue
		}
		k := copy(t.hdr[t.nhdr:], p)
		t.nhdr += k
		p = p[k:]
		if t.nhdr < len(t.hdr) {
			return
		}
		t.nhdr = 0
		t.skip = int(t.hdr[0])<<16 | int(t.hdr[1])<<8 | int(t.hdr[2])
		if t.hdr[3] == 0x7 { // GOAWAY
			t.gone = true
			close(t.goAway)
		}
	}
}

// NetConn returns the underlying connection.
func (t *Tap) NetConn() net.Conn { return t.Conn }

// CloseWrite closes the write side, if the underlying connection can.
func (t *Tap) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
