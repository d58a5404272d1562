package mux

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// Stream is one call on a session: an ordered, flow-controlled sequence of
// messages in each direction, ended by the server's trailers.
type Stream struct {
	s   *Session
	idv atomic.Uint32 // the stream id; 0 while a pooled client stream is free

	// Owner is free for the layer above, typically its per-call state.
	Owner any

	mu         sync.Mutex // protects following
	qbuf       [2]queued
	queue      []queued // complete messages not yet received; queue[head:] are live
	head       int
	asm        *pool.Buf // chunked message being assembled
	asmN       int       // bytes of asm filled so far
	asmTotal   int       // the message's declared size; asm grows to it (see startAsmLocked)
	asmRes     int64     // bytes of the session's assembly budget asm holds
	asmDirect  bool      // the reader may be reading into asm (Session.directDst): drop must not pool it
	recvEnd    bool      // the peer half-closed
	hasHeader  bool
	hasTrailer bool
	requested  bool          // OnRequest was called (reader goroutine only)
	lend       *lendState    // RecvInto's offer; made on first use, kept while the stream is pooled
	rerr       error         // terminal error; set once
	header     []byte        // reply metadata block (client)
	trailer    []byte        // trailer payload (client)
	notify     chan struct{} // wakes a blocked Recv; created on first need
	recvWin    int64         // credit the peer may still use on this stream
	unacked    int64         // bytes consumed but not yet granted back
	held       int64         // credit for chunks withheld while messages wait in the queue

	// protected by s.flowMu
	sendWin  int64
	wnotify  chan struct{} // wakes a sender waiting for credit
	sendDone bool          // FlagEnd was sent

	hasWnotify atomic.Bool // wnotify is set: wakeSender reads it only then
}

type queued struct {
	b      *pool.Buf
	credit int32 // flow-control credit returned when b is received
}

// init readies a client stream for a call with stream id id: sent bytes
// of its credit are used by the message that goes with the call header,
// and done records that the call half-closes with it. The send state is
// set under s.flowMu, as a WINDOW frame from the peer (even one for a
// stream it has not seen yet) changes it.
func (st *Stream) init(s *Session, id uint32, sent int64, done bool) {
	if st.s == nil {
		st.s = s // pooled client streams keep their session
	}
	st.mu.Lock()
	st.idv.Store(id)
	st.queue = st.qbuf[:0]
	st.recvWin = int64(s.local.InitialWindow)
	st.mu.Unlock()
	s.flowMu.Lock()
	st.sendWin = int64(s.peer.InitialWindow) - sent
	st.sendDone = done
	s.flowMu.Unlock()
}

// initFresh is init for a new stream that no other goroutine can see yet
// (the peer opened it): it needs no locks.
func (st *Stream) initFresh(s *Session, id uint32) {
	st.s = s
	st.idv.Store(id)
	st.queue = st.qbuf[:0]
	st.recvWin = int64(s.local.InitialWindow)
	st.sendWin = int64(s.peer.InitialWindow)
}

// ID returns the stream's id.
func (st *Stream) ID() uint32 { return st.idv.Load() }

// Session returns the stream's session.
func (st *Stream) Session() *Session { return st.s }

// Call is what Open sends to open a stream.
type Call struct {
	Method   string
	Codec    uint8
	Timeout  time.Duration // 0: no deadline
	Metadata []string      // key, value, key, value...
	Msg      []byte        // the first message, or nil for none yet
	End      bool          // half-close the send side after Msg
	// Recv, if not nil, is offered for the first message received, as
	// RecvInto offers memory, but before the call is sent: a reply that
	// comes back while a large request is still being written can then be
	// read into it too.
	Recv []byte
}

// Open opens a stream for a call (client role). It sends the call header and,
// if c.Msg is not nil, the first message, together in one write when they
// fit. The stream must be released with Release when the caller is done
// with it.
func (s *Session) Open(ctx context.Context, c Call) (*Stream, error) {
	method, codec, timeout, md, msg, end, recv := c.Method, c.Codec, c.Timeout, c.Metadata, c.Msg, c.End, c.Recv
	if msg != nil {
		if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
			return nil, err
		}
	}
	if err := s.fitCallHeader(method, codec, timeout, md); err != nil {
		return nil, err
	}
	// A small message goes with the call header, in the same write; a
	// large one is written in place by Send (writer.writeDirect), and the
	// call header, left in the writer's buffer, goes in the same write.
	large := msg != nil && (uint32(len(msg)) > s.frameSize || len(msg) >= directMin)
	inline := msg != nil && !large && s.tryConnCredit(len(msg))
	var sent int64 // credit used by the message that goes with the call header
	if inline {
		sent = int64(len(msg))
	}
	done := end && (msg == nil || inline) // the call header's write half-closes
	b, err := s.w.lock()
	var st *Stream
	if err == nil {
		st, err = s.registerLocked(sent, done)
	}
	if err != nil {
		s.w.unlock(b)
		if inline {
			s.returnConnCredit(len(msg))
		}
		return nil, err
	}
	if recv != nil {
		// Before the call is sent, so before any reply can come.
		st.RecvInto(recv)
	}
	var flags wire.Flags
	if end && msg == nil {
		flags = wire.FlagEnd
	}
	b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeHeaders, Flags: flags})
	start := len(b)
	b = wire.AppendCallHeader(b, method, codec, timeout, md)
	setLength(b, start)
	if inline {
		flags = 0
		if end {
			flags = wire.FlagEnd
		}
		b = wire.AppendFrame(b, st.ID(), wire.TypeData, flags, msg)
	}
	if large {
		s.w.unlockLater(b)
	} else if err := s.w.unlock(b); err != nil {
		st.Release()
		return nil, err
	}
	if msg != nil && !inline {
		if err := st.Send(ctx, msg, end); err != nil {
			st.Cancel()
			s.w.kick() // the call header, if it is still buffered
			st.Release()
			return nil, err
		}
	}
	return st, nil
}

// registerLocked takes a stream from the session's pool of client streams
// (or makes one), readies it (init, with sent and done) with the next
// stream id and records it, in one locked section. The writer lock is
// held, so stream ids reach the wire in increasing order. Streams are
// pooled per session, so a stale reference to a released stream still
// points at the right session, and its id tells it apart.
func (s *Session) registerLocked(sent int64, done bool) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return nil, s.err
	case s.goAwayRecv:
		return nil, &wire.GoAwayError{Code: s.goAwayCode, Message: s.goAwayMsg}
	case uint32(s.streams.count()) >= s.peer.MaxStreams:
		return nil, ErrTooManyStreams
	}
	var st *Stream
	if n := len(s.free); n > 0 {
		st = s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
	} else {
		st = &Stream{s: s}
	}
	st.init(s, s.nextID, sent, done)
	s.nextID += 2
	s.streams.addLocked(st.ID(), st)
	s.w.open.Add(1)
	return st, nil
}

func (st *Stream) err() error {
	st.mu.Lock()
	err := st.rerr
	if err == nil && st.hasTrailer {
		err = ErrStreamEnded
	}
	st.mu.Unlock()
	return err
}
