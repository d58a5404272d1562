package mux

import (
	"context"
	"errors"
	"io"
	"net"

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
	s.ensureReader()
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.waiters.Add(-1)
	return err
}

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
		s.closeWith(readError(err))
		return false
	}
	if err := s.handle(h, p); err != nil {
		s.closeWith(err)
		return false
	}
	return true
}

// readError turns a frame reader error into the session's error.
func readError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return &ConnError{Err: err}
	}
	var fe *wire.FrameError
	var fl *wire.FrameTooLargeError
	if errors.As(err, &fe) || errors.As(err, &fl) {
		return &ProtocolError{Reason: err.Error()}
	}
	return &ConnError{Err: err}
}

// ready reports whether Recv would return without waiting.
func (st *Stream) ready() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.head < len(st.queue) || st.recvEnd && st.asm == nil || st.rerr != nil
}
