// Package acceptshed keeps an accept loop working when the process is out
// of descriptors. A Shedder holds one descriptor in reserve: when accept
// fails with EMFILE or ENFILE, the reserve is closed, one pending
// connection accepted and closed at once, and the reserve opened again, so
// that the backlog drains instead of filling while the loop backs off. Its
// Log writes accept errors at most once per interval, with the count of
// those left out.
package acceptshed

import (
	"errors"
	"log/slog"
	"sync"
	"syscall"
	"time"
)

// Interval is the least time between two accept-error lines.
const Interval = 5 * time.Second

// Shedder is a listener's reserve descriptor and accept-error log. Its
// methods are safe for concurrent use.
type Shedder struct {
	mu       sync.Mutex
	fd       int // the reserve; -1 when none is held
	closed   bool
	last     time.Time // of the last line logged
	left     int       // errors not logged since then
	shed     uint64
	interval time.Duration
}

// New returns a Shedder holding a reserve descriptor (if one can be had).
func New() *Shedder {
	s := &Shedder{fd: -1, interval: Interval}
	s.fd = openReserve()
	return s
}

// OutOfDescriptors reports whether err is EMFILE or ENFILE.
func OutOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// Shed frees the reserve, runs acceptClose (which accepts one pending
// connection, if any, and closes it) and takes the reserve again. It
// reports false, doing nothing, when no reserve is held.
func (s *Shedder) Shed(acceptClose func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		if !s.closed {
			s.fd = openReserve() // one may have been freed since
		}
		return false
	}
	closeReserve(s.fd)
	acceptClose()
	s.shed++
	s.fd = openReserve()
	return true
}

// Sheds reports how many times Shed ran.
func (s *Shedder) Sheds() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shed
}

// Log writes an accept error to logger, unless one was written in the
// last Interval: then it is counted, and the next line says how many
// were left out.
func (s *Shedder) Log(logger *slog.Logger, err error, delay time.Duration) {
	s.mu.Lock()
	now := time.Now()
	if !s.last.IsZero() && now.Sub(s.last) < s.interval {
		s.left++
		s.mu.Unlock()
		return
	}
	left := s.left
	s.last, s.left = now, 0
	shed := s.shed
	s.mu.Unlock()
	logger.Warn("warren: accept error; retrying", "err", err, "delay", delay, "more", left, "shed", shed)
}

// Close closes the reserve.
func (s *Shedder) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.fd >= 0 {
		closeReserve(s.fd)
		s.fd = -1
	}
}

// ShedListener is Shed for l, if l has a SyscallConn (net.TCPListener,
// net.UnixListener, transport.Listener): one pending connection is taken
// from the listening socket without waiting, and closed.
func (s *Shedder) ShedListener(l any) bool {
	sc, ok := l.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return s.Shed(func() { rc.Control(func(fd uintptr) { AcceptClose(int(fd)) }) })
}
