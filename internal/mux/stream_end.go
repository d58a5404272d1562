package mux

import (
	"context"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// The end of a stream: failure, cancellation, trailers, Release.

// tooLarge abandons a stream whose incoming message is over the limit: the
// local side sees err, and the peer a ResourceExhausted status (server role)
// or a CANCEL (client role). A server's OnReset is told too: the work
// behind the stream may be waiting for that message, and the stream leaves
// the session here, so nothing else would tell it. It is told after the
// stream has failed, so that a Recv reports err rather than the end of its
// context.
func (st *Stream) tooLarge(err *wire.MessageTooLargeError) {
	st.drop(err)
	if s := st.s; !s.client && s.cfg.OnReset != nil {
		s.cfg.OnReset(st, err)
	}
	st.s.remove(st)
	if st.s.client {
		st.s.writeFrame(st.ID(), wire.TypeCancel, 0, nil)
	} else {
		st.s.refuse(st.ID(), codeResourceExhausted, err.Error())
	}
}

// fail ends the stream with err (the first error wins) and wakes its
// receiver and sender. Messages already received stay deliverable, ahead of
// the error.
func (st *Stream) fail(err error) {
	st.mu.Lock()
	st.failLocked(err)
	st.mu.Unlock()
	st.wakeSenders()
}

// failLocked is fail's part under st.mu: the error, and the receiver's
// wake-up. The caller wakes the senders after unlocking (wakeSenders).
func (st *Stream) failLocked(err error) {
	if st.rerr == nil {
		st.rerr = err
	}
	st.signalLocked()
}

// wakeSenders wakes the goroutines that may wait to send on st, which has
// just failed: a sender waiting for credit, writers waiting for buffer
// space.
func (st *Stream) wakeSenders() {
	st.wakeSender()
	if w := &st.s.w; w.waiting.Load() > 0 {
		w.wake()
	}
}

// drop fails the stream with err and frees what it holds: queued messages
// and a partly assembled one, returning their connection credit.
func (st *Stream) drop(err error) {
	st.mu.Lock()
	st.failLocked(err)
	credit := st.freeLocked()
	st.mu.Unlock()
	st.wakeSenders()
	st.s.grantConn(credit)
}

// freeLocked gives back the messages st holds and returns their
// flow-control credit.
func (st *Stream) freeLocked() int64 {
	var credit int64
	for i := st.head; i < len(st.queue); i++ {
		pool.Put(st.queue[i].b)
		credit += int64(st.queue[i].credit)
		st.queue[i] = queued{}
	}
	st.queue = st.queue[:0]
	st.head = 0
	if st.asm != nil {
		if !st.asmDirect {
			pool.Put(st.asm)
		}
		st.asm = nil
		st.releaseAsmLocked()
	}
	credit += st.held
	st.held = 0
	return credit
}

// Header returns the reply metadata block the server sent, if any (client
// role). It is valid until Release.
func (st *Stream) Header() ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.header, st.hasHeader
}

// Trailer returns the trailer payload (client role) once Recv has returned
// io.EOF. It is valid until Release.
func (st *Stream) Trailer() ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.trailer, st.hasTrailer
}

// Cancel abandons the stream: the peer is sent a CANCEL frame and the stream
// fails locally with context.Canceled. The session stays up.
func (st *Stream) Cancel() {
	st.mu.Lock()
	done := st.rerr != nil || st.hasTrailer
	st.mu.Unlock()
	st.drop(context.Canceled)
	st.s.remove(st)
	if !done {
		st.s.writeFrame(st.ID(), wire.TypeCancel, 0, nil)
	}
}

// CloseSend half-closes the client's send side without a message: the
// server reads the end of the request stream. It is a no-op if the send side
// is already closed.
func (st *Stream) CloseSend() error {
	s := st.s
	s.flowMu.Lock()
	if st.sendDone {
		s.flowMu.Unlock()
		return nil
	}
	st.sendDone = true
	s.flowMu.Unlock()
	b, err := s.w.lockFor(st)
	if err == nil {
		b = wire.AppendFrame(b, st.ID(), wire.TypeTrailers, wire.FlagEnd, nil)
	}
	if uerr := s.w.unlock(b); err == nil {
		err = uerr
	}
	return err
}

// SendHeader sends reply metadata (server role) ahead of the first message.
func (st *Stream) SendHeader(md []string) error {
	s := st.s
	if err := st.err(); err != nil {
		return err
	}
	if err := s.fitFrame(metadataSize(md)); err != nil {
		return err
	}
	b, err := s.w.lockFor(st)
	if err == nil {
		b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeHeaders})
		start := len(b)
		b = wire.AppendMetadata(b, md)
		setLength(b, start)
	}
	if uerr := s.w.unlock(b); err == nil {
		err = uerr
	}
	return err
}

// Close ends a client stream without returning it to the pool: use it
// instead of Release when other goroutines (a context watcher) may still
// refer to the stream. A stream not yet finished is canceled.
func (st *Stream) Close() {
	st.Cancel()
	st.unlend()
}

// Release returns a client stream to the session's pool. The caller must not
// use st afterwards.
func (st *Stream) Release() {
	if st.ID() == 0 {
		return // released already
	}
	s := st.s
	// Out of the table first, so that the reader finds it no more; one
	// that found it just before sees its id change below.
	s.remove(st)
	// Then, in one locked section, what drop, unlend and a reset would
	// each do: free what it holds, withdraw the offer of the caller's
	// memory, and clear it for reuse. (No one else receives on it: the
	// caller is done with it.)
	st.mu.Lock()
	credit := st.freeLocked()
	st.withdrawLocked()
	st.idv.Store(0)
	st.Owner = nil
	st.rerr, st.recvEnd = nil, false
	st.header, st.hasHeader = st.header[:0], false
	st.trailer, st.hasTrailer = st.trailer[:0], false
	st.unacked, st.recvWin = 0, 0
	st.requested = false
	if st.notify != nil {
		select {
		case <-st.notify:
		default:
		}
	}
	st.mu.Unlock()
	s.grantConn(credit)
	// The reader may be reading a payload into the caller's memory: wait
	// until it has stopped (see unlend).
	if s.lent.Load() == st {
		st.waitLent()
	}
	// No one sends on st now (the caller is done with it), so no sender
	// waits for credit: the flow state is cleared for the next call, and a
	// wake-up left by this one is drained.
	s.flowMu.Lock()
	st.sendDone = false
	st.sendWin = 0
	if st.wnotify != nil {
		select {
		case <-st.wnotify:
		default:
		}
	}
	s.flowMu.Unlock()
	if w := &s.w; w.waiting.Load() > 0 {
		w.wake() // a writer of st waiting for buffer space stops
	}
	s.freeClientStream(st)
}

// maxFreeStreams bounds a session's pool of client streams.
const maxFreeStreams = 256

// freeClientStream gives a released client stream back to the session's
// pool, from which registerLocked takes it.
func (s *Session) freeClientStream(st *Stream) {
	s.mu.Lock()
	if len(s.free) < maxFreeStreams {
		s.free = append(s.free, st)
	}
	s.mu.Unlock()
}

// Reply is how Finish ends a stream.
type Reply struct {
	Header  []string // reply metadata, or nil
	Msg     []byte   // the last message, if HasMsg
	HasMsg  bool
	Code    wire.Code
	Message string
	Details [][]byte
	Trailer []string // trailer metadata
	Files   []int    // descriptors sent with Msg (see Stream.SendFiles); the caller keeps them
}

// Finish ends a stream the peer opened (server role): it sends the reply
// metadata (if r.Header is not nil), the message (if r.HasMsg), and the
// trailers with the status, in one write when they fit. The stream is then
// closed. Reply metadata or trailers too large for a frame of the peer's are
// not sent: the stream is refused with ResourceExhausted instead, and Finish
// returns a *wire.FrameTooLargeError.
func (st *Stream) Finish(ctx context.Context, r Reply) error {
	if r.Files != nil {
		return st.finishFiles(ctx, r)
	}
	header, msg, hasMsg, code, message, details, trailer := r.Header, r.Msg, r.HasMsg, r.Code, r.Message, r.Details, r.Trailer
	s := st.s
	if err := s.fitReply(header, uint32(code), message, details, trailer); err != nil {
		st.Refuse(codeResourceExhausted, "reply not sent: "+err.Error())
		return err
	}
	if hasMsg && (uint32(len(msg)) > s.frameSize || len(msg) >= directMin) {
		defer st.finished()
		if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
			return err
		}
		return st.finishLarge(ctx, header, msg, code, message, details, trailer)
	}
	removed := false
	defer func() {
		st.drop(ErrStreamClosed)
		if !removed {
			s.remove(st)
		}
	}()
	if hasMsg {
		if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
			return err
		}
	}
	var err error
	if hasMsg {
		err = st.acquire(ctx, len(msg), false) // it looks at st's error first
		if err != nil {
			return err
		}
	} else {
		err = st.err()
	}
	var b []byte
	if err == nil {
		b, err = s.w.lockFor(st)
		if err != nil {
			s.w.unlock(b)
		}
	}
	if err != nil {
		if hasMsg {
			s.returnConnCredit(len(msg)) // never sent
		}
		return err
	}
	if header != nil {
		b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeHeaders})
		start := len(b)
		b = wire.AppendMetadata(b, header)
		setLength(b, start)
	}
	if hasMsg {
		b = wire.AppendFrame(b, st.ID(), wire.TypeData, 0, msg)
	}
	b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeTrailers, Flags: wire.FlagEnd})
	start := len(b)
	b = wire.AppendTrailer(b, uint32(code), message, details, trailer)
	setLength(b, start)
	// The stream stops counting against MaxStreams before the peer can
	// see it end and open the next one.
	s.removeEnding(st)
	removed = true
	return s.w.unlock(b)
}

// finishLarge is Finish for a message written in place (see
// writer.writeDirect): the reply metadata first, then the message with the
// trailers in the write of its last frame.
func (st *Stream) finishLarge(ctx context.Context, header []string, msg []byte, code wire.Code, message string, details [][]byte, trailer []string) error {
	if header != nil {
		if err := st.SendHeader(header); err != nil {
			return err
		}
	}
	tb := pool.Get(512)
	t := wire.AppendHeader(tb.B[:0], wire.Header{Stream: st.ID(), Type: wire.TypeTrailers, Flags: wire.FlagEnd})
	start := len(t)
	t = wire.AppendTrailer(t, uint32(code), message, details, trailer)
	setLength(t, start)
	err := st.send(ctx, msg, false, t) // t is written or copied when it returns
	pool.Put(tb)
	return err
}

func (st *Stream) finished() {
	st.drop(ErrStreamClosed)
	st.s.remove(st)
}

// Refuse ends a stream the peer opened with a non-OK status and no reply,
// without waiting for buffer space: it is safe on the reader goroutine.
func (st *Stream) Refuse(code wire.Code, msg string) {
	st.s.remove(st)
	st.s.refuse(st.ID(), code, msg)
	st.finished()
}
