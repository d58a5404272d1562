package mux

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/warrenipc/warren/wire"
)

// A client session has no permanent reader goroutine. Reading is a role,
// held by at most one goroutine at a time (readTok):
//
//   - A caller waiting in Recv with a context that cannot be canceled takes
//     the role itself if it is free and reads until its own stream has
//     something; if others are waiting then, a background reader takes
//     over. A lone caller thus reads its own reply, as a plain blocking read
//     would, with no goroutine switch.
//   - So does a lone caller (no one else waiting) whose context can end, on
//     a connection whose reads can be interrupted and resumed (unix, tcp):
//     if its context ends, a past read deadline stops its read
//     (readInterruptible).
//   - Any other waiter (a cancelable Recv, a sender waiting for credit, a
//     ping) makes sure the role is held, starting a background reader
//     goroutine if no one holds it. That goroutine reads while anyone waits,
//     and exits when no one does.
//
// Every waiter registers in waiters before it checks the role, and whoever
// gives the role up checks waiters after, so a waiter is never left without
// a reader.

// waitRead blocks until st has something to receive, ch is signalled, or ctx
// ends. While it waits, it is counted in s.waiters.
func (s *Session) waitRead(ctx context.Context, st *Stream, ch chan struct{}) error {
	s.waiters.Add(1)
	if ctx.Done() == nil && s.readTok.CompareAndSwap(false, true) {
		for !st.ready() && s.readOne() {
		}
		// Stop counting as a waiter before giving the role up, so that a
		// background reader starts only for others.
		s.waiters.Add(-1)
		s.releaseRead()
		return nil
	}
	if s.interruptible && s.waiters.Load() == 1 && s.readTok.CompareAndSwap(false, true) {
		err := s.readInterruptible(ctx, st)
		s.waiters.Add(-1)
		s.releaseRead()
		return err
	}
	s.ensureReader()
	var err error
	if s.watching(ctx) {
		// ctx's end signals every open stream (watching): a plain
		// receive is enough, and cheaper than a select with ctx.Done(),
		// whose channel every caller sharing ctx would lock twice.
		if err = ctx.Err(); err == nil {
			<-ch
			err = ctx.Err()
		}
	} else {
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	s.waiters.Add(-1)
	return err
}

// ctxWatch is the registration of a context whose end wakes every stream
// of a client session (see watching).
type ctxWatch struct {
	s    *Session
	done <-chan struct{} // the context's Done channel, which identifies it
	stop func() bool
}

// watching reports whether ctx is the session's watched context: its end
// signals every open stream, so that a Recv with it can wait on its
// stream's channel alone. The first context that two waits in a row use,
// as when callers share a long-lived context, becomes the watched one,
// until it ends or the session does: one registration for many calls.
// Other contexts are not watched; per-call contexts would cost a
// registration each. Contexts are told apart by their Done channels
// (contexts that share one end together), which, unlike the contexts
// themselves, can always be compared.
func (s *Session) watching(ctx context.Context) bool {
	done := ctx.Done()
	if done == nil {
		return false
	}
	if w := s.ctxw.Load(); w != nil {
		return w.done == done
	}
	if ctx.Err() != nil {
		return false // ended: the caller returns at once anyway
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.ctxw.Load() != nil {
		return false
	}
	if s.lastDone != done {
		s.lastDone = done
		return false
	}
	s.lastDone = nil
	w := &ctxWatch{s: s, done: done}
	w.stop = context.AfterFunc(ctx, w.fire)
	s.ctxw.Store(w)
	return true
}

// fire runs when the watched context ends: it stops watching it and
// signals every open stream, so that their receivers see it ended.
// Receivers with other contexts wake for nothing and wait again.
func (w *ctxWatch) fire() {
	s := w.s
	s.mu.Lock()
	s.ctxw.CompareAndSwap(w, nil)
	var all []*Stream
	s.streams.each(func(_ uint32, st *Stream) { all = append(all, st) })
	s.mu.Unlock()
	for _, st := range all {
		st.mu.Lock()
		st.signalLocked()
		st.mu.Unlock()
	}
}

// unwatch drops the watched context's registration, when the session
// ends.
func (s *Session) unwatch() {
	s.mu.Lock()
	w := s.ctxw.Swap(nil)
	s.lastDone = nil
	s.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

// readInterruptible is the lone caller's read with a context that can end:
// the caller reads its own reply as with a context that cannot; if ctx ends
// meanwhile, a past read deadline interrupts the blocked read. The Reader
// keeps the frame it was reading, whether its bytes were going through the
// buffer or straight into a message, and the deadline is cleared before the
// role is given up, so the next reader continues that frame.
//
// The function that sets the deadline stays registered with ctx
// (context.AfterFunc) from one call to the next while callers pass the same
// context, as a loop of calls typically does, so that such calls allocate
// nothing for it.
func (s *Session) readInterruptible(ctx context.Context, st *Stream) error {
	in := &s.intr
	in.mu.Lock()
	if done := ctx.Done(); in.done != done {
		if in.stop != nil {
			in.stop()
		}
		if in.fn == nil {
			in.fn = s.interrupt
		}
		in.done, in.stop = done, context.AfterFunc(ctx, in.fn)
	}
	in.active = true
	in.mu.Unlock()
	// interrupt runs only once per context: if ctx ended before active
	// was set, it has run already and set no deadline.
	err := ctx.Err()
	for err == nil && !st.ready() && s.Err() == nil {
		h, p, rerr := s.r.NextInto(s.direct)
		if rerr == nil {
			s.lendDone()
			if herr := s.handle(h, p); herr != nil {
				s.closeWith(herr)
			}
			continue
		}
		if !s.readErr(rerr) {
			break
		}
		err = ctx.Err() // nil if the deadline was left by an earlier context, or by unlend
	}
	in.mu.Lock()
	in.active = false
	in.mu.Unlock()
	in.clear(s.conn)
	return err
}

// interruptState is the state of readInterruptible, kept in the session.
// Only the goroutine holding the reader role reads on s.conn, but interrupt
// runs on whichever goroutine ends the context.
type interruptState struct {
	fn     func() // s.interrupt, made once
	mu     sync.Mutex
	done   <-chan struct{} // the Done channel of the context interrupt is registered with
	stop   func() bool     // undoes that registration
	active bool            // a readInterruptible is reading
	fired  bool            // interrupt set a read deadline
}

// interrupt makes a blocked readInterruptible return: it runs when the
// context it is registered with ends.
func (s *Session) interrupt() {
	in := &s.intr
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.active {
		in.fired = true
		s.conn.SetReadDeadline(aLongTimeAgo)
	}
}

// interruptNow makes a blocked read on conn return at once, whoever reads:
// the reader clears the deadline when it sees it (Session.readErr).
func (in *interruptState) interruptNow(conn net.Conn) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.fired = true
	conn.SetReadDeadline(aLongTimeAgo)
}

// clear removes a read deadline interrupt or interruptNow set, and reports
// whether there was one.
func (in *interruptState) clear(conn net.Conn) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.fired {
		return false
	}
	in.fired = false
	conn.SetReadDeadline(time.Time{})
	return true
}

// unregister drops interrupt's registration with a context, when the
// session ends, so that a long-lived context does not keep it.
func (in *interruptState) unregister() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stop != nil {
		in.stop()
		in.done, in.stop = nil, nil
	}
}

// aLongTimeAgo is a read deadline in the past: it makes a blocked read
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// HoldReader keeps a reader going on a client session until the matching
// ReleaseReader, for a long-lived stream whose messages must be read (and
// whose peer must not block writing them) even while no one waits in Recv.
func (s *Session) HoldReader() {
	s.waiters.Add(1)
	s.ensureReader()
}

// ReleaseReader undoes one HoldReader.
func (s *Session) ReleaseReader() { s.waiters.Add(-1) }

// ensureReader starts a background reader if no goroutine holds the role.
func (s *Session) ensureReader() {
	if s.readTok.CompareAndSwap(false, true) {
		// Add under s.mu, after checking that the session is up: Close
		// waits for readers once closeWith has set s.err under s.mu, so
		// no reader is added to a WaitGroup being waited for.
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			s.readTok.Store(false)
			return
		}
		s.readers.Add(1)
		s.mu.Unlock()
		go s.backgroundRead()
	}
}

func (s *Session) backgroundRead() {
	defer s.readers.Done()
	for {
		if s.waiters.Load() == 0 {
			s.readTok.Store(false)
			if s.waiters.Load() == 0 || !s.readTok.CompareAndSwap(false, true) {
				return
			}
		}
		if !s.readOne() {
			s.readTok.Store(false)
			return
		}
	}
}

// releaseRead gives up the reader role. If anyone is still waiting, a
// background reader takes over: handing the role to one particular waiter
// could pick one that is about to return with its data and strand the rest.
func (s *Session) releaseRead() {
	s.readTok.Store(false)
	if s.waiters.Load() > 0 {
		s.ensureReader()
	}
}

// readOne reads and handles one frame. It returns false once the session
// has ended.
func (s *Session) readOne() bool {
	if s.Err() != nil {
		return false
	}
	h, p, err := s.r.NextInto(s.direct)
	if err != nil {
		return s.readErr(err)
	}
	s.lendDone()
	if err := s.handle(h, p); err != nil {
		s.closeWith(err)
		return false
	}
	return true
}

// readError turns a frame reader error into the session's error.
func readError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return &wire.ConnError{Err: err}
	}
	var fe *wire.FrameError
	var fl *wire.FrameTooLargeError
	if errors.As(err, &fe) || errors.As(err, &fl) {
		return &wire.ProtocolError{Reason: err.Error()}
	}
	return &wire.ConnError{Err: err}
}

// ready reports whether Recv would return without waiting.
func (st *Stream) ready() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.head < len(st.queue) || st.recvEnd && st.asm == nil || st.rerr != nil
}
