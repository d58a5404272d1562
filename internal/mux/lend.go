package mux

import (
	"errors"
	"os"

	"github.com/warrenipc/warren/internal/pool"
)

// A client caller may lend the memory its reply is to end up in
// (Stream.RecvInto), so that a large reply is read from the connection
// straight into it instead of into a pooled buffer and then copied. The
// reader goroutine then writes into memory the caller owns, so a caller
// that gives up (its context ends) must not return while such a read is in
// progress: Release interrupts the read with a past read deadline, the
// reader moves the rest of the payload to memory of its own
// (frameio.Reader.Redirect), and Release returns once it has. Reading in
// place is done only on connections whose reads can be interrupted and
// resumed. A small reply is copied into the lent memory from the read
// buffer, under the stream's lock, which Release takes too: that needs no
// interruption, so it is done on any connection, and saves the copy out of
// a pooled buffer.

// RecvInto offers b's memory for the next message (client role): a message
// that fits in cap(b) goes into b instead of a pooled buffer. A large one
// (16 KiB or more) is read from the connection straight into b; a smaller
// one is copied there from the read buffer. Recv then returns a Buf whose
// B is b[:size]; that Buf belongs to the stream and is valid until Release
// (the bytes are b's, which the caller keeps), and pool.Put ignores it. The
// offer holds for one message, and a stream holds at most one message in
// lent memory: once one has come that way, later offers are not used. The
// stream may write into b until Release or Close returns, so the caller
// must not use b before then, except through what Recv returned. A reply
// may arrive before RecvInto is called (a background reader can read while
// a large request is being sent); Open (Call.Recv) makes the offer before the call
// is sent. On a connection whose reads cannot be interrupted and resumed
// (TLS, WebSocket), no message is read in place, but a small one is still
// copied into b.
func (st *Stream) RecvInto(b []byte) {
	if cap(b) == 0 {
		return
	}
	st.mu.Lock()
	if st.lend == nil {
		st.lend = new(lendState)
	}
	st.lend.offer = b[:cap(b)]
	st.mu.Unlock()
}

// lendState is a client stream's RecvInto offer.
type lendState struct {
	offer []byte   // memory offered for the next message
	buf   pool.Buf // the caller's memory holding a message (Borrow): asm or queued
}

// borrowLocked makes the lent memory, if it can hold n bytes, the message
// in progress, which may then be read in place; it holds none of the
// session's assembly budget. The offer is used up. Only a connection whose
// reads can be interrupted reads into lent memory: see unlend.
func (st *Stream) borrowLocked(n int) bool {
	if !st.s.interruptible {
		return false
	}
	b := st.takeOfferLocked(n)
	if b == nil {
		return false
	}
	st.asm, st.asmRes = b, 0
	return true
}

// takeOfferLocked returns the lent memory as a Buf of n bytes, if it can
// hold them and holds no message yet; the offer is used up.
func (st *Stream) takeOfferLocked(n int) *pool.Buf {
	l := st.lend
	if l == nil || l.buf.B != nil || cap(l.offer) < n {
		return nil
	}
	l.buf = pool.Borrow(l.offer[:n])
	l.offer = nil
	return &l.buf
}

// lentLocked records that the reader is about to read into asm, if asm is
// the caller's memory.
func (st *Stream) lentLocked() {
	if st.lend != nil && st.asm == &st.lend.buf {
		st.s.lent.Store(st)
	}
}

// unlend withdraws RecvInto's offer, and waits until the reader no longer
// reads into the caller's memory: it interrupts a read in progress, which
// the reader then moves elsewhere (readErr).
func (st *Stream) unlend() {
	s := st.s
	st.mu.Lock()
	st.withdrawLocked()
	st.mu.Unlock()
	if s.lent.Load() != st {
		return
	}
	st.waitLent()
}

// withdrawLocked withdraws RecvInto's offer, and the lent memory holding a
// message, if any.
func (st *Stream) withdrawLocked() {
	if l := st.lend; l != nil {
		l.offer, l.buf = nil, pool.Buf{}
	}
}

// waitLent interrupts the reader's read into st's lent memory and waits
// until it has stopped.
func (st *Stream) waitLent() {
	s := st.s
	s.intr.interruptNow(s.conn)
	s.lendMu.Lock()
	for s.lent.Load() == st {
		s.lendCond.Wait()
	}
	s.lendMu.Unlock()
}

// lendDone records that the reader no longer reads into lent memory.
func (s *Session) lendDone() {
	if s.lent.Load() == nil {
		return
	}
	s.lendMu.Lock()
	s.lent.Store(nil)
	s.lendCond.Broadcast()
	s.lendMu.Unlock()
}

// readErr handles an error from reading a frame on a client session. A
// read that a past read deadline interrupted (interrupt, or unlend) can go
// on: readErr clears the deadline and returns true, after moving a payload
// that was being read into a caller's memory to memory of its own, so that
// the caller may go; the payload still reaches its stream, which copies it
// if it still wants it. Any other error ends the session.
func (s *Session) readErr(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) && s.intr.clear(s.conn) {
		if s.lent.Load() != nil {
			if n := s.r.Pending(); n > 0 {
				s.r.Redirect(make([]byte, n))
			}
			s.lendDone()
		}
		return true
	}
	s.closeWith(readError(err))
	s.lendDone()
	return false
}
