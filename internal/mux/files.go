package mux

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/wire"
)

// Descriptors with frames, and shared messages (sealed memfds), on unix
// sockets whose both sides announced MaxFiles. See PROTOCOL.md,
// "Descriptors and shared messages".

// DefaultMaxShared is the default bound on the bytes of shared messages a
// session holds mapped at once (Config.MaxShared).
const DefaultMaxShared = 1 << 30

// DefaultSharedMin is the default Config.SharedMin: the size from which
// copying a message into a new sealed memfd measured faster than sending
// it through the socket (bench scenario large, calls/s against the
// socket's: 0.8x at 16 MiB, 1.2x at 32 MiB, 1.9x at 64 MiB). A new memfd's
// pages cost more to allocate than a copy through the socket on this
// 2-core VM (1.4 µs per 4 KiB page, shmem without huge pages).
const DefaultSharedMin = 32 << 20

// minShared is the smallest SharedMin: below, messages are written in
// place anyway (directMin) and a memfd costs more than the copy.
const minShared = directMin

// fileState is a session's state for descriptors.
type fileState struct {
	q         *shm.Queue // the descriptors received, when this side receives them
	share     bool       // both sides announced descriptors: whole shared buffers go shared
	sharedMin int        // messages of at least this size go shared too; 0: never
	maxShared int64
	held      shm.Held // bytes of shared messages mapped, in whole pages
	maxHeld   int64    // descriptors messages may hold until released
	heldFDs   shm.Held // descriptors held by received messages not yet released
}

// pageRound is n rounded up to whole pages: what a mapping takes.
func pageRound(n uint64) int64 { return int64((n + 4095) &^ 4095) }

// wrapFiles makes the session receive descriptors if its settings
// announce MaxFiles and conn is a unix socket; otherwise it announces
// none. Called before the preface is sent.
func (s *Session) wrapFiles(conn net.Conn) {
	if s.local.MaxFiles == 0 {
		return
	}
	per := int(s.local.MaxFiles)
	c := shm.Wrap(conn, per, filesBound(per))
	if c == nil {
		s.local.MaxFiles = 0
		return
	}
	s.conn = c
	s.setFiles(c.Queue)
}

// filesBound is how many descriptors a connection whose frames carry at
// most per may hold: received and not yet named by a frame, or held by
// messages not yet released.
func filesBound(per int) int { return max(4*per, 64) }

// NewFileQueue returns the queue of descriptors for a connection whose
// frames carry at most per (Config.FedFiles).
func NewFileQueue(per int) *shm.Queue { return shm.NewQueue(per, filesBound(per)) }

// setFiles makes the session take the descriptors its frames name from q.
func (s *Session) setFiles(q *shm.Queue) {
	s.fs.q = q
	s.fs.held.Total, s.fs.heldFDs.Total = &shm.SharedHeld, &shm.FilesHeld
	s.fs.maxHeld = int64(filesBound(int(s.local.MaxFiles)))
	s.fs.maxShared = s.cfg.MaxShared
	if s.fs.maxShared <= 0 {
		s.fs.maxShared = DefaultMaxShared
	}
}

// startFiles decides, once the peer's settings are known, whether
// messages can go shared, and from what size they do.
func (s *Session) startFiles() {
	if s.fs.q != nil && s.peer.MaxFiles > 0 {
		s.fs.share = true
		switch {
		case s.cfg.SharedMin == 0:
			s.fs.sharedMin = DefaultSharedMin
		case s.cfg.SharedMin > 0:
			s.fs.sharedMin = max(s.cfg.SharedMin, minShared)
		}
	}
}

// CanSendFiles reports whether descriptors can be sent on this session:
// a unix socket whose both sides announced MaxFiles; n is the most one
// message may carry.
func (s *Session) CanSendFiles() (n int, ok bool) {
	if s.fs.q == nil || s.peer.MaxFiles == 0 {
		return 0, false
	}
	return int(s.peer.MaxFiles), true
}

// ErrNoFiles is returned for descriptors that cannot be sent: the
// connection is not a unix socket, or a side did not announce MaxFiles,
// or the message carries more than the peer accepts.
var ErrNoFiles = fmt.Errorf("warren: descriptors cannot be sent on this connection: %w", errors.ErrUnsupported)

// SendFiles sends msg as one message with the descriptors fds attached
// (the peer gets its own copies; the caller keeps fds). It fails at once,
// sending nothing, if descriptors cannot be sent (ErrNoFiles) or msg
// does not fit one frame.
func (st *Stream) SendFiles(ctx context.Context, msg []byte, fds []int, end bool) error {
	s := st.s
	n, ok := s.CanSendFiles()
	if !ok || len(fds) > n || len(fds) == 0 {
		return fmt.Errorf("%w (%d descriptors, the peer accepts %d)", ErrNoFiles, len(fds), n)
	}
	blk := shm.Block{Count: len(fds), Kind: shm.KindFiles}
	if len(msg)+2 > int(s.frameSize) {
		return fmt.Errorf("warren: a message with descriptors is one frame: %d bytes, at most %d", len(msg), int(s.frameSize)-2)
	}
	return st.sendFiles(ctx, blk, msg, fds, end, nil)
}

// sendShared sends msg in a sealed memfd: its own if it is a whole
// shared message received (sent on unchanged) or a whole shared buffer
// (shm.NewBuffer, sealed by its first send), else a new one it is copied
// into.
// ok is false, and nothing is sent, if msg goes through the socket: it is
// not a whole shared view or buffer and is under the session's SharedMin.
func (st *Stream) sendShared(ctx context.Context, msg []byte, end bool, tail []byte) (ok bool, err error) {
	s := st.s
	if !s.fs.share {
		return false, nil
	}
	fd, ok := shm.Sendable(msg)
	if !ok {
		if s.fs.sharedMin == 0 || len(msg) < s.fs.sharedMin {
			return false, nil
		}
		if fd, err = shm.NewSealed(msg); err != nil {
			return true, err
		}
	}
	fds := []int{fd}
	defer shm.CloseAll(fds)
	return true, st.sendFiles(ctx, shm.Block{Count: 1, Kind: shm.KindShared, Length: uint64(len(msg))}, nil, fds, end, tail)
}

func (st *Stream) sendFiles(ctx context.Context, blk shm.Block, msg []byte, fds []int, end bool, tail []byte) error {
	s := st.s
	flags := wire.FlagFiles
	if end {
		flags |= wire.FlagEnd
	}
	payload := shm.AppendBlock(make([]byte, 0, 10+len(msg)), blk)
	payload = append(payload, msg...)
	if err := st.acquire(ctx, len(payload), end); err != nil {
		return err
	}
	frame := wire.AppendFrame(make([]byte, 0, wire.HeaderSize+len(payload)), st.ID(), wire.TypeData, flags, payload)
	if err := s.w.writeFiles(st, frame, tail, fds); err != nil {
		s.returnConnCredit(len(payload))
		return err
	}
	return nil
}

// writeFiles writes what is buffered, then frame and tail, in one sendmsg
// that carries fds: the descriptors arrive with the bytes up to the
// frame's first byte, never after it.
func (w *writer) writeFiles(st *Stream, frame, tail []byte, fds []int) error {
	if w.fed != nil {
		return w.writeFedFiles(st, frame, tail, fds)
	}
	fc, ok := w.conn.(interface {
		WriteFiles(b []byte, fds []int) (int, error)
	}) // an *shm.Conn, or the rings over one
	if !ok {
		return ErrNoFiles
	}
	w.mu.Lock()
	if err := w.claimLocked(st); err != nil {
		return err
	}
	if tail != nil {
		st.s.removeEnding(st)
	}
	out := append(append(w.buf, frame...), tail...)
	w.buf = w.spare[:0]
	w.inflight, w.pingsInflight, w.pingsBuf = len(out), w.pingsBuf, 0
	w.mu.Unlock()
	_, err := fc.WriteFiles(out, fds)
	w.mu.Lock()
	return w.wroteLocked(out, err)
}

// onFiles handles a DATA frame flagged wire.FlagFiles: it takes the
// descriptors the frame names, checks them, and queues the message. A
// frame the connection could not have carried, or naming more
// descriptors than announced or than arrived, is a connection error
// (closing the connection closes every descriptor not taken); a shared
// message that is not a sealed memfd of its size, or over a limit, is a
// stream error.
func (s *Session) onFiles(h wire.Header, p []byte) error {
	if s.fs.q == nil {
		return &wire.ProtocolError{Reason: "DATA with descriptors on a connection that did not announce MaxFiles"}
	}
	if h.Flags&wire.FlagMore != 0 {
		return &wire.ProtocolError{Reason: "DATA with descriptors and FlagMore"}
	}
	blk, rest, err := shm.ParseBlock(p)
	if err != nil {
		return &wire.ProtocolError{Reason: err.Error()}
	}
	if blk.Count > int(s.local.MaxFiles) {
		return &wire.ProtocolError{Reason: fmt.Sprintf("%d descriptors in a frame, MaxFiles is %d", blk.Count, s.local.MaxFiles)}
	}
	fds, err := s.fs.q.Take(blk.Count)
	if err != nil {
		return &wire.ProtocolError{Reason: err.Error()}
	}
	n := int64(h.Length)
	if s.connRecvWin.Add(-n) < 0 {
		shm.CloseAll(fds)
		return &wire.ProtocolError{Reason: "connection flow-control window exceeded"}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		shm.CloseAll(fds)
		s.grantConn(n)
		return nil
	}
	// Every message with descriptors (a shared one keeps its memfd open
	// with its mapping) counts until released, so that a peer cannot make
	// this side hold descriptors without bound.
	if held := s.fs.heldFDs.Add(int64(len(fds))); held > s.fs.maxHeld {
		s.fs.heldFDs.Add(-int64(len(fds)))
		shm.CloseAll(fds)
		s.grantConn(n)
		st.tooLarge(&wire.MessageTooLargeError{Size: held, Limit: s.fs.maxHeld})
		return nil
	}
	var b *pool.Buf
	switch blk.Kind {
	case shm.KindShared:
		b, err = s.mapShared(fds[0], blk.Length, s.client) // on success the view owns fds[0]
		if err != nil {
			shm.CloseAll(fds)
			s.fs.heldFDs.Add(-1)
			s.grantConn(n)
			st.reject(err)
			return nil
		}
	default:
		if uint32(len(rest)) > s.local.MaxMessageSize {
			shm.CloseAll(fds)
			s.fs.heldFDs.Add(-int64(len(fds)))
			s.grantConn(n)
			st.tooLarge(&wire.MessageTooLargeError{Size: int64(len(rest)), Limit: int64(s.local.MaxMessageSize)})
			return nil
		}
		m := pool.Borrow(append([]byte(nil), rest...))
		b = &m
		b.Files = fds
		k := int64(len(fds))
		b.Free = func(b *pool.Buf) {
			closeFiles(b)
			s.fs.heldFDs.Add(-k)
		}
	}
	return st.onWhole(h, b)
}

func closeFiles(b *pool.Buf) {
	shm.CloseAll(b.Files)
	b.Files = nil
}

// mapShared checks and maps a shared message, within MaxMessageSize and
// the session's bound on mapped bytes. A memfd this process has mapped
// already (the echo of a shared buffer it sent) is viewed through that
// mapping. A client populates a new mapping (MAP_POPULATE): its reply is
// copied out at once, and that measured faster than faulting the pages
// in. A server does not: its handler may never touch the message (one
// sent on unchanged). The memfd stays open with the mapping so that the
// message can be sent on as it is.
func (s *Session) mapShared(fd int, length uint64, populate bool) (*pool.Buf, error) {
	if length > uint64(s.local.MaxMessageSize) {
		return nil, &wire.MessageTooLargeError{Size: int64(length), Limit: int64(s.local.MaxMessageSize)}
	}
	size := pageRound(length)
	if held := s.fs.held.Add(size); held > s.fs.maxShared {
		s.fs.held.Add(-size)
		return nil, &wire.MessageTooLargeError{Size: held, Limit: s.fs.maxShared}
	}
	m, err := shm.Open(fd, length, populate)
	if err != nil {
		s.fs.held.Add(-size)
		return nil, err
	}
	b := pool.Borrow(m)
	b.Free = func(b *pool.Buf) { // m, not b.B: whatever b holds now, m is what was mapped
		shm.Release(m)
		s.fs.held.Add(-size)
		s.fs.heldFDs.Add(-1)
		b.B = nil
	}
	return &b, nil
}

// reject ends the stream for a message the session refused: the server
// answers with a status, the client cancels.
func (st *Stream) reject(err error) {
	if tl, ok := err.(*wire.MessageTooLargeError); ok {
		st.tooLarge(tl)
		return
	}
	st.drop(err)
	s := st.s
	if !s.client && s.cfg.OnReset != nil {
		s.cfg.OnReset(st, err)
	}
	s.remove(st)
	if s.client {
		s.writeFrame(st.ID(), wire.TypeCancel, 0, nil)
	} else {
		s.refuse(st.ID(), codeInvalidArgument, err.Error())
	}
}

// onWhole queues b, a whole message that came with descriptors; b is
// released if the stream cannot take it.
func (st *Stream) onWhole(h wire.Header, b *pool.Buf) error {
	s := st.s
	n := int64(h.Length)
	st.mu.Lock()
	if st.ID() != h.Stream || st.rerr != nil {
		st.mu.Unlock()
		pool.Put(b)
		s.grantConn(n)
		return nil
	}
	var perr string
	switch st.recvWin -= n; {
	case st.recvEnd:
		perr = fmt.Sprintf("DATA after end of stream %d", h.Stream)
	case st.recvWin < 0:
		perr = fmt.Sprintf("stream %d flow-control window exceeded", h.Stream)
	case st.asm != nil:
		perr = "DATA with descriptors inside a chunked message"
	}
	if perr != "" {
		st.mu.Unlock()
		pool.Put(b)
		return &wire.ProtocolError{Reason: perr}
	}
	if b.Files == nil {
		if o := st.takeOfferLocked(len(b.B)); o != nil {
			copy(o.B, b.B) // a caller's memory (RecvInto): the mapping goes at once
			pool.Put(b)
			b = o
		}
	}
	st.queue = append(st.queue, queued{b, int32(n)})
	if h.Flags&wire.FlagEnd != 0 {
		st.recvEnd = true
	}
	st.signalLocked()
	ready := !st.requested
	st.mu.Unlock()
	if ready && s.cfg.OnRequest != nil {
		st.requested = true
		s.cfg.OnRequest(st)
	}
	return nil
}

// finishFiles is Finish for a reply with descriptors: the reply metadata,
// the message with its descriptors, then the trailers. Descriptors that
// cannot be sent end the call with FailedPrecondition.
func (st *Stream) finishFiles(ctx context.Context, r Reply) error {
	if r.Header != nil {
		if err := st.SendHeader(r.Header); err != nil {
			st.finished()
			return err
		}
	}
	if err := st.SendFiles(ctx, r.Msg, r.Files, false); err != nil {
		st.Refuse(codeFailedPrecondition, "reply not sent: "+err.Error())
		return err
	}
	return st.Finish(ctx, Reply{Code: r.Code, Message: r.Message, Details: r.Details, Trailer: r.Trailer})
}
