package mux

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/wire"
)

// Bounds on what a peer that stops reading can make a session queue. The
// reader goroutine stops reading from a peer whose unwritten output is over
// them, as the event loop does, and the session is closed (with a GOAWAY,
// if it can still be written) when the output stays stuck for
// stuckTimeout.
const (
	// maxUnwritten bounds the bytes queued for writing beyond which a
	// server session stops reading. Replies of calls wait for room at
	// highWater; this bounds what the reader itself queues without
	// waiting: PING replies, refusals, window updates.
	maxUnwritten = 4 * highWater
	// maxPingReplies bounds the PING replies queued and not yet written.
	maxPingReplies = 64
)

// stuckTimeout is how long a session waits for a peer that does not read
// its output before closing it.
const stuckTimeout = 10 * time.Second

// stuckTimeoutNS, if set, replaces stuckTimeout (tests).
var stuckTimeoutNS atomic.Int64

// SetStuckTimeout replaces stuckTimeout until the returned func (tests).
func SetStuckTimeout(d time.Duration) (restore func()) {
	old := stuckTimeoutNS.Swap(int64(d))
	return func() { stuckTimeoutNS.Store(old) }
}

// StuckAfter is how long a peer may leave its output unread (both engines).
func StuckAfter() time.Duration {
	if v := stuckTimeoutNS.Load(); v > 0 {
		return time.Duration(v)
	}
	return stuckTimeout
}

// overLocked reports whether the unwritten output is over the bounds. w.mu
// is held.
func (w *writer) overLocked() bool {
	return len(w.buf)+w.inflight > maxUnwritten || w.pingsBuf+w.pingsInflight > maxPingReplies
}

// over reports whether the unwritten output is over the bounds.
func (w *writer) over() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fed == nil && w.err == nil && w.overLocked()
}

// waitWritten waits until the unwritten output is back within the bounds,
// writing it (on a goroutine, as unlockAsync does) if no one is, even if the
// writer is corked. It reports false if the output is still over the bounds
// after stuckTimeout.
func (w *writer) waitWritten() bool {
	w.mu.Lock()
	w.corked = false
	if !w.flushing && len(w.buf) > 0 && w.err == nil {
		w.flushing = true
		w.asyncClaim = true
		w.async.Add(1)
		go w.asyncFn()
	}
	expired := false
	t := time.AfterFunc(StuckAfter(), func() {
		w.mu.Lock()
		expired = true
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	for w.err == nil && !expired && w.overLocked() {
		w.cond.Wait()
	}
	ok := w.err != nil || !w.overLocked()
	w.mu.Unlock()
	t.Stop()
	return ok
}

// PingsOver reports whether more PING replies are unwritten than allowed.
func (s *Session) PingsOver() bool {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.pingsBuf+s.w.pingsInflight > maxPingReplies
}

// answerPing queues the reply to a PING, counted against maxPingReplies.
func (s *Session) answerPing(p []byte) {
	b, _ := s.w.lockNoWait()
	b = wire.AppendFrame(b, 0, wire.TypePing, wire.FlagAck, p)
	s.w.pingsBuf++
	s.w.unlockAsync(b)
}

// throttle, called by a server's reader before each frame, stops reading
// while the peer has more unwritten output than the bounds allow, and
// closes the session if that lasts stuckTimeout. It reports whether the
// session may go on.
func (s *Session) throttle() bool {
	if !s.w.over() {
		return true
	}
	if s.w.waitWritten() {
		return true
	}
	s.closeWith(&wire.ProtocolError{Reason: fmt.Sprintf("the peer has not read its output for %v; closing", StuckAfter())})
	return false
}
