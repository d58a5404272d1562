package mux

import (
	"errors"
	"io"
	"net"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// A fed session is a server session without a reader goroutine: an event
// loop owns the socket, reads it when the kernel says it is readable, and
// hands the bytes to Feed, which handles the whole frames among them. Writes
// never block: the connection's Write writes what the socket takes and
// reports ErrWouldBlock for the rest, which stays buffered until the loop
// calls Writable. The writer's buffers are taken from a pool when a frame is
// appended and given back as soon as everything is written, so a quiet fed
// session holds no buffer. A session with nothing in flight can Hibernate:
// it ends without closing the connection, and returns the few values (a
// FedState) from which NewFed continues it when the peer sends again.

// ErrWouldBlock is the error a FedConn's Write returns when the socket
// cannot take more bytes without blocking.
var ErrWouldBlock = errors.New("warren: write would block")

// ErrHibernated is the error of operations on a session that hibernated.
var ErrHibernated = errors.New("warren: session hibernated")

// FedConn is the connection of a fed session (see NewFed). Its Write must
// not block: it writes what the socket takes at once and, if that is less
// than len(b), returns the count with ErrWouldBlock (or another error).
// WaitWritable asks the event loop to call Session.Writable once the socket
// can take more bytes; it may be called from any goroutine. Close must not
// block either; the event loop learns of it and releases the socket.
type FedConn interface {
	net.Conn
	WaitWritable()
}

// FedState is what a fed session keeps across hibernation (see
// Session.Hibernate): the stream ids, the go-away state and the
// connection-level flow-control windows. Per-stream state is not kept: a
// session hibernates only with no stream open.
type FedState struct {
	LastPeerID  uint32 // highest stream id the peer opened
	GoAwayLast  uint32 // the last stream id announced in a GOAWAY, if GoAwaySent
	GoAwaySent  bool
	ConnSendWin int64 // connection credit the peer granted and this side has not used
	ConnRecvWin int64 // connection credit the peer may still use
	ConnUnacked int64 // bytes consumed but not yet granted back to the peer
}

// fedBufSize is the size of a fed writer's pooled buffers.
const fedBufSize = 16 << 10

// fedWriter is the writer state of a fed session.
type fedWriter struct {
	bufH    *pool.Buf  // the pooled buffer behind writer.buf; nil when buf is nil
	pend    []byte     // bytes taken out of buf and not yet all written
	pendH   *pool.Buf  // the pooled buffer behind pend
	waitOut bool       // a write would have blocked: Writable continues it
	sent    int64      // bytes written (fedfiles.go)
	files   []fedFiles // descriptors waiting for their frame's write (fedfiles.go)
	ext     []byte     // a caller's payload to write after pend (writeFedDirect)
	extOut  bool       // pend is a caller's payload (ext), not pooled memory
}

// NewFed starts a fed server session on conn, whose client preface (with
// settings peer) has already been read and answered by the caller, with
// cfg.Settings (with the defaults, and MaxFiles 0). st, if
// not nil, is the state a hibernated session returned; nil starts a new
// connection. The session has no goroutine: the caller feeds it what it reads
// (Feed), tells it when a blocked write may go on (Writable), and reports the
// end of the input (FeedError). The Config's callbacks run on the goroutine
// that calls Feed; OnRequest must not run the request there (RunInline is
// not available on a fed session): the caller may run it after Feed
// returns, with the writes held (Hold). On error conn is closed.
func NewFed(conn FedConn, cfg *Config, peer wire.Settings, st *FedState) (*Session, error) {
	s, err := newSession(conn, false, cfg)
	if err != nil {
		return nil, err
	}
	if err := peer.Validate(); err != nil {
		conn.Close()
		return nil, err
	}
	s.peer = peer
	s.startFedFiles(cfg.FedFiles)
	s.frameSize = min(peer.MaxFrameSize, peer.InitialWindow/2)
	if st != nil {
		s.lastPeerID = st.LastPeerID
		s.goAwaySent, s.sentLast = st.GoAwaySent, st.GoAwayLast
		s.connSendWin = st.ConnSendWin
		s.connRecvWin.Store(st.ConnRecvWin)
		s.connUnacked.Store(st.ConnUnacked)
	} else {
		s.connSendWin = int64(peer.InitialWindow) * connWindowFactor
		s.connRecvWin.Store(int64(s.local.InitialWindow) * connWindowFactor)
	}
	s.w.conn = conn
	s.w.fed = conn
	s.w.cond.L = &s.w.mu
	s.w.onErr = func(err error) {
		if !s.closing.Load() {
			s.closeWith(err)
		}
	}
	s.done = make(chan struct{})
	return s, nil
}

// Feed handles the whole frames at the start of b and returns how many bytes
// they took; the rest is the beginning of a frame, to be fed again with what
// follows. A frame header is checked as soon as it is complete, before its
// payload arrives. b is not retained. Feed must be called from one goroutine
// at a time. After an error (a protocol error, or a session that has ended)
// the session is closed.
func (s *Session) Feed(b []byte) (int, error) {
	if s.closing.Load() {
		return 0, s.endedErr()
	}
	// Hold the replies to the frames of one read back, so that they leave
	// together when Feed returns. On a protocol error the writer is
	// uncorked first, so that the GOAWAY telling the peer why goes out.
	s.w.cork()
	n := 0
	for {
		rest, h, p, ok, err := wire.ParseFrame(b[n:], s.local.MaxFrameSize)
		if err != nil {
			err = readError(err)
			s.w.uncork()
			s.w.settle()
			s.closeWith(err)
			return n, err
		}
		if !ok {
			s.w.uncork()
			return n, nil
		}
		if err := s.handle(h, p); err != nil {
			s.w.uncork()
			s.w.settle()
			s.closeWith(err)
			return n, err
		}
		n = len(b) - len(rest)
		if s.closing.Load() {
			s.w.uncork()
			return n, s.endedErr()
		}
	}
}

func (s *Session) endedErr() error {
	if err := s.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// FeedError ends a fed session because its input ended or failed: err is
// io.EOF when the peer closed the connection, io.ErrUnexpectedEOF when it
// closed it in the middle of a frame, or the read error. Every open stream
// fails with a *wire.ConnError.
func (s *Session) FeedError(err error) {
	if err == nil {
		err = io.EOF
	}
	s.closeWith(readError(err))
}

// Writable continues writing after the connection's Write reported
// ErrWouldBlock. The event loop calls it when the socket is writable again;
// it never blocks.
func (s *Session) Writable() {
	w := &s.w
	w.mu.Lock()
	if !w.fw.waitOut {
		w.mu.Unlock()
		return
	}
	w.fw.waitOut = false
	w.flushing = false
	w.flushFedLocked()
}

// WriteBacklog returns how many bytes the session has buffered for writing.
func (s *Session) WriteBacklog() int {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return len(s.w.buf) + len(s.w.fw.pend) + len(s.w.fw.ext)
}

// Hibernate ends a fed session that has nothing in flight, without closing
// its connection, and returns what NewFed needs to continue it. It fails,
// leaving the session as it was, if a stream is open, bytes wait to be
// written or a ping is unanswered, or if the session has ended. After a
// successful Hibernate every operation on the session fails with
// ErrHibernated and the session no longer refers to pooled memory; the
// caller owns the connection again.
func (s *Session) Hibernate() (FedState, bool) {
	w := &s.w
	if w.fed == nil {
		return FedState{}, false
	}
	w.mu.Lock()
	if w.err != nil || w.flushing || len(w.buf) > 0 || len(w.fw.pend) > 0 {
		w.mu.Unlock()
		return FedState{}, false
	}
	s.mu.Lock()
	if s.err != nil || s.streams.count() > 0 || len(s.pings) > 0 || s.closing.Load() {
		s.mu.Unlock()
		w.mu.Unlock()
		return FedState{}, false
	}
	s.flowMu.Lock()
	st := FedState{
		LastPeerID:  s.lastPeerID,
		GoAwayLast:  s.sentLast,
		GoAwaySent:  s.goAwaySent,
		ConnSendWin: s.connSendWin,
		ConnRecvWin: s.connRecvWin.Load(),
		ConnUnacked: s.connUnacked.Load(),
	}
	s.flowMu.Unlock()
	s.err = ErrHibernated
	s.ended.Store(true)
	s.streams.closeLocked()
	s.mu.Unlock()
	w.err = ErrHibernated
	w.releaseFedBufs()
	w.cond.Broadcast()
	w.mu.Unlock()
	ok := false
	s.closeOnce.Do(func() {
		// The session ends here, but its connection stays open: a later
		// closeWith is a no-op.
		ok = true
		s.closing.Store(true)
		close(s.done)
	})
	return st, ok
}

// settle waits until no other goroutine is inside a (non-blocking) write,
// so that the GOAWAY a protocol error sends is written by closeWith itself
// rather than left to a writer that finds the connection closed.
func (w *writer) settle() {
	w.mu.Lock()
	for w.err == nil && w.flushing && !w.fw.waitOut {
		w.cond.Wait()
	}
	w.mu.Unlock()
}

// takeBuf gives a fed writer a pooled buffer to append to. w.mu is held.
func (w *writer) takeBuf() {
	if w.buf == nil && w.fed != nil && w.err == nil {
		w.fw.bufH = pool.Get(fedBufSize)
		w.buf = w.fw.bufH.B[:0]
	}
}

// releaseFedBufs gives the buffers back to the pool, dropping what they
// hold. w.mu is held.
func (w *writer) releaseFedBufs() {
	w.dropFedFiles()
	w.releasePend()
	if w.fw.bufH != nil {
		pool.Put(w.fw.bufH)
		w.fw.bufH = nil
	}
	w.buf = nil
	w.spare = nil
}

func (w *writer) releasePend() {
	if w.fw.pendH != nil {
		pool.Put(w.fw.pendH)
		w.fw.pendH = nil
	}
	w.fw.pend = nil
	if w.fw.extOut {
		w.fw.extOut = false
		w.cond.Broadcast() // the caller of writeFedDirect may go
	}
}

// flushFedLocked is flushLocked for a fed writer: it writes without blocking
// and, when the socket is full, leaves the rest for Writable (flushing stays
// set meanwhile, so writers past highWater wait). Buffers go back to the
// pool once empty. w.mu is held on entry and released on return.
func (w *writer) flushFedLocked() error {
	if w.flushing {
		// Another goroutine is writing, or the loop will continue on
		// Writable; either takes what was just appended.
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.flushing = true
	var werr error
	for w.err == nil {
		if len(w.fw.pend) == 0 {
			w.releasePend()
			w.pingsInflight = 0 // written
			if w.fw.ext != nil {
				w.fw.pend, w.fw.ext, w.fw.extOut = w.fw.ext, nil, true
				continue
			}
			if len(w.buf) == 0 || w.corked && len(w.buf) < highWater {
				break
			}
			w.fw.pend, w.fw.pendH = w.buf, w.fw.bufH
			w.buf, w.fw.bufH, w.pingsInflight, w.pingsBuf = nil, nil, w.pingsInflight+w.pingsBuf, 0
			w.cond.Broadcast() // room for writers waiting at highWater
		}
		out, fds := w.fedChunk(w.fw.pend)
		w.mu.Unlock()
		n, err := w.fedWrite(out, fds)
		w.mu.Lock()
		if n > 0 {
			w.fw.pend = w.fw.pend[n:]
			w.fedWrote(n, fds)
		}
		if errors.Is(err, ErrWouldBlock) && w.err == nil {
			w.fw.waitOut = true
			w.cond.Broadcast() // for settle
			w.mu.Unlock()
			w.fed.WaitWritable()
			return nil
		}
		if err == nil && n < len(out) {
			err = io.ErrShortWrite
		}
		if err != nil && w.err == nil {
			w.err = &wire.ConnError{Err: err}
			werr = w.err
		}
	}
	w.flushing = false
	if w.err != nil {
		w.releaseFedBufs()
	} else if len(w.buf) == 0 && w.fw.bufH != nil {
		pool.Put(w.fw.bufH)
		w.fw.bufH, w.buf = nil, nil
	}
	w.cond.Broadcast()
	err := w.err
	w.mu.Unlock()
	if werr != nil && w.onErr != nil {
		w.onErr(werr)
	}
	return err
}

// appendFed is writeDirect for a fed writer: the payload is copied into the
// buffer, since a write that would block cannot keep the caller's memory.
func (w *writer) appendFed(hdr, payload []byte) error {
	b, err := w.lock()
	if err == nil {
		b = w.fedRoom(b, len(hdr)+len(payload))
		b = append(append(b, hdr...), payload...)
	}
	if uerr := w.unlock(b); err == nil {
		err = uerr
	}
	return err
}

// fedRoom returns b, a fed writer's buffer (w.mu held), with room for n more
// bytes: if it has too little, a larger pooled buffer holding the same
// bytes, which goes back to the pool once written. Growing it by append
// would allocate for every large message.
func (w *writer) fedRoom(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := pool.Get(len(b) + n)
	nb.B = append(nb.B[:0], b...)
	pool.Put(w.fw.bufH) // b is copied; no one else holds it
	w.fw.bufH = nb
	return nb.B
}

// Hold holds back a fed session's writes until Release, so that the replies
// of calls the caller runs one after another leave in one write. Feed holds
// them itself while it runs; Hold is for after it returned.
func (s *Session) Hold() { s.w.cork() }

// Release ends Hold: what was held back is written, without blocking.
func (s *Session) Release() { s.w.uncork() }
