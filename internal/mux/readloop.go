package mux

import (
	"encoding/binary"
	"fmt"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// The reading goroutine: frames in, routed to their streams; flow-control
// credit for the connection.

func (s *Session) readLoop() {
	defer s.readers.Done()
	corked := !s.client // a reader taking over may find the writer corked
	defer func() {
		if corked {
			s.w.uncork()
		}
	}()
	for {
		// A server stops reading from a peer that does not read its output
		// (backpressure.go).
		if !s.client && !s.throttle() {
			return
		}
		// A server corks its writer while whole frames are buffered, so the
		// replies to requests that arrived together leave in one write.
		if !s.client {
			if more := s.r.HasFrame(); more != corked {
				corked = more
				if more {
					s.w.cork()
				} else if s.guarded(s.w.uncork) {
					return // another goroutine took over reading while this one wrote
				}
			}
		}
		h, p, err := s.r.NextInto(s.direct)
		if err != nil {
			s.closeWith(readError(err))
			return
		}
		gen := s.readerState.Load() >> 1
		if err := s.handle(h, p); err != nil {
			s.closeWith(err)
			return
		}
		if s.readerState.Load()>>1 != gen {
			return // another goroutine took over reading while a request ran inline
		}
	}
}

func (s *Session) handle(h wire.Header, p []byte) error {
	switch h.Type {
	case wire.TypeData:
		return s.onData(h, p)
	case wire.TypeHeaders:
		if s.client {
			if h.Stream%2 == 0 {
				return s.onServerOpen(h, p)
			}
			return s.onReplyHeaders(h, p)
		}
		return s.onOpen(h, p)
	case wire.TypeTrailers:
		return s.onTrailers(h, p)
	case wire.TypeCancel:
		if st := s.lookup(h.Stream); st != nil {
			// The work behind the stream learns first, so that a Recv
			// failing below finds its context already done.
			if !s.client && s.cfg.OnReset != nil {
				s.cfg.OnReset(st, ErrStreamCanceled)
			}
			st.drop(ErrStreamCanceled)
			s.remove(st)
		}
	case wire.TypeWindow:
		incr, err := wire.ParseWindow(p)
		if err != nil {
			return &wire.ProtocolError{Reason: err.Error()}
		}
		s.onWindow(h.Stream, incr)
	case wire.TypePing:
		if h.Flags&wire.FlagAck != 0 {
			seq := binary.BigEndian.Uint64(p)
			s.mu.Lock()
			ch := s.pings[seq]
			delete(s.pings, seq)
			s.mu.Unlock()
			if ch != nil {
				close(ch)
			}
			return nil
		}
		s.answerPing(p)
	case wire.TypeGoAway:
		last, code, msg, err := wire.ParseGoAway(p)
		if err != nil {
			return &wire.ProtocolError{Reason: err.Error()}
		}
		s.mu.Lock()
		s.goAwayRecv = true
		s.goAwayFlag.Store(true)
		s.goAwayLast = last
		s.goAwayCode = wire.Code(code)
		s.goAwayMsg = string(msg)
		var refused []*Stream
		s.streams.each(func(id uint32, st *Stream) {
			if id > last && id%2 == s.nextID%2 && s.streams.removeLocked(id, st) {
				refused = append(refused, st)
				if s.client {
					s.w.open.Add(-1)
				}
			}
		})
		s.mu.Unlock()
		gerr := &wire.GoAwayError{Code: wire.Code(code), Message: string(msg)}
		for _, st := range refused {
			st.fail(gerr)
		}
	}
	return nil
}

// lookup returns the open stream with the given id, or nil. Most take no
// lock (see streamTable). As with any lookup, the stream may end just
// after: callers check its id again under its lock.
func (s *Session) lookup(id uint32) *Stream {
	if st := s.streams.fast(id); st != nil {
		return st
	}
	s.mu.Lock()
	st := s.streams.getLocked(id)
	s.mu.Unlock()
	return st
}

// removeEnding is remove for a stream whose last frames are being queued
// for writing, with the writer locked: see Config.OnEnd.
func (s *Session) removeEnding(st *Stream) {
	s.remove(st)
	if s.cfg.OnEnd != nil {
		s.cfg.OnEnd(st)
	}
}

func (s *Session) remove(st *Stream) {
	removed := s.streams.removeFast(st.ID(), st)
	if !removed {
		s.mu.Lock()
		removed = s.streams.removeLocked(st.ID(), st)
		s.mu.Unlock()
	}
	if removed && s.client {
		s.w.open.Add(-1)
	}
}

// onOpen handles a client's HEADERS frame opening a stream.
func (s *Session) onOpen(h wire.Header, p []byte) error {
	if h.Stream%2 != 1 {
		return &wire.ProtocolError{Reason: fmt.Sprintf("client opened even stream %d", h.Stream)}
	}
	var perr error
	s.callHeader, perr = wire.ParseCallHeader(p)
	// The stream is made before the checks, so that one locked section
	// checks and records it; a refused one is garbage.
	var st *Stream
	if perr == nil && uint32(s.streams.count()) < s.local.MaxStreams { // (rechecked below)
		if s.cfg.NewStream != nil {
			st = s.cfg.NewStream()
		} else {
			st = new(Stream)
		}
		st.initFresh(s, h.Stream)
		if h.Flags&wire.FlagEnd != 0 {
			st.recvEnd = true
		}
	}
	s.mu.Lock()
	if h.Stream <= s.lastPeerID {
		s.mu.Unlock()
		return &wire.ProtocolError{Reason: fmt.Sprintf("stream id %d not above %d", h.Stream, s.lastPeerID)}
	}
	s.lastPeerID = h.Stream
	refuse := ""
	code := codeUnavailable
	switch {
	case s.goAwaySent:
		refuse = "server is shutting down"
	case uint32(s.streams.count()) >= s.local.MaxStreams || st == nil && perr == nil:
		refuse, code = fmt.Sprintf("too many concurrent streams (limit %d)", s.local.MaxStreams), codeResourceExhausted
	case perr != nil:
		refuse, code = "malformed call header: "+perr.Error(), codeInvalidArgument
	}
	if refuse == "" && !s.streams.addLocked(h.Stream, st) {
		s.mu.Unlock()
		return nil // closed meanwhile
	}
	s.mu.Unlock()
	if refuse != "" {
		s.refuse(h.Stream, code, refuse)
		return nil
	}
	s.cfg.OnStream(st, &s.callHeader)
	s.callHeader = wire.CallHeader{}
	if st.recvEnd && s.cfg.OnRequest != nil {
		st.requested = true // half-closed without a message
		s.cfg.OnRequest(st)
	}
	return nil
}

// onServerOpen answers a server's HEADERS opening a stream (an even id): a
// client serves no methods, so it refuses the call as a server refuses a
// method it does not serve, with 12 (3 for a call header that does not
// decode). Later frames of the stream are ignored as those of any closed
// stream.
func (s *Session) onServerOpen(h wire.Header, p []byte) error {
	s.mu.Lock()
	if h.Stream <= s.lastRefusedID {
		s.mu.Unlock()
		return &wire.ProtocolError{Reason: fmt.Sprintf("stream id %d not above %d", h.Stream, s.lastRefusedID)}
	}
	s.lastRefusedID = h.Stream
	s.mu.Unlock()
	code, msg := codeUnimplemented, "this client serves no methods"
	if _, err := wire.ParseCallHeader(p); err != nil {
		code, msg = codeInvalidArgument, "malformed call header: "+err.Error()
	}
	s.refuse(h.Stream, code, msg)
	return nil
}

// refuse ends a stream the peer opened without processing it.
func (s *Session) refuse(id uint32, code wire.Code, msg string) {
	b, _ := s.w.lockNoWait()
	b = wire.AppendHeader(b, wire.Header{Stream: id, Type: wire.TypeTrailers, Flags: wire.FlagEnd})
	start := len(b)
	b = wire.AppendTrailer(b, uint32(code), msg, nil, nil)
	setLength(b, start)
	s.w.unlockAsync(b)
}

func (s *Session) onReplyHeaders(h wire.Header, p []byte) error {
	if err := wire.RangeMetadata(p, func(k, v []byte) bool { return true }); err != nil {
		return &wire.ProtocolError{Reason: "malformed reply metadata: " + err.Error()}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	if st.ID() == h.Stream {
		st.header = append(st.header[:0], p...)
		st.hasHeader = true
	}
	st.mu.Unlock()
	return nil
}

func (s *Session) onTrailers(h wire.Header, p []byte) error {
	if s.client {
		if _, err := wire.ParseTrailer(p); err != nil {
			return &wire.ProtocolError{Reason: "malformed trailers: " + err.Error()}
		}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	if st.ID() != h.Stream {
		st.mu.Unlock()
		return nil
	}
	if st.asm != nil {
		st.mu.Unlock()
		return &wire.ProtocolError{Reason: "trailers in the middle of a chunked message"}
	}
	if !s.client {
		// A caller's TRAILERS|END half-closes its side without a message.
		st.recvEnd = true
		st.signalLocked()
		st.mu.Unlock()
		if !st.requested && s.cfg.OnRequest != nil {
			st.requested = true
			s.cfg.OnRequest(st)
		}
		return nil
	}
	st.trailer = append(st.trailer[:0], p...)
	st.hasTrailer = true
	st.recvEnd = true
	st.signalLocked()
	st.mu.Unlock()
	st.wakeSender() // the call is over: a sender waiting for credit stops
	return nil
}

func (s *Session) onData(h wire.Header, p []byte) error {
	if h.Flags&wire.FlagFiles != 0 {
		return s.onFiles(h, p)
	}
	n := int64(h.Length) // p may lack a length prefix the reader skipped (directDst)
	if s.connRecvWin.Add(-n) < 0 {
		return &wire.ProtocolError{Reason: "connection flow-control window exceeded"}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		s.grantConn(n) // a stream that ended meanwhile (a cancel crossed it)
		return nil
	}
	return st.onData(h, p)
}

// directDst gives the reader the memory a large DATA frame's payload goes
// to, so that the payload is read from the connection straight into place
// (see frameio.Into); onData then finds it there. A frame that continues a
// chunked message goes into the message's buffer; one that starts a
// message (a whole message, or the first frame of a chunked one, whose
// length prefix is peeked at first) gets the message's buffer from the pool
// here, after the same checks onData makes, and becomes the stream's
// message in progress. The stream is marked (asmDirect) so that a
// concurrent drop does not give the buffer back to the pool while it is
// being read into.
func (s *Session) directDst(h wire.Header, head []byte) ([]byte, int) {
	if h.Type != wire.TypeData || h.Length < directMin || h.Flags&wire.FlagFiles != 0 {
		return nil, 0
	}
	st := s.lookup(h.Stream)
	if st == nil {
		return nil, 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ID() != h.Stream || st.rerr != nil || st.recvEnd {
		return nil, 0
	}
	if st.asm != nil {
		need := st.asmN + int(h.Length)
		if need > st.asmTotal {
			return nil, 0 // onData reports it
		}
		st.growAsmLocked(need)
		st.asmDirect = true
		st.lentLocked()
		return st.asm.B[st.asmN:need], 0
	}
	if h.Flags&wire.FlagMore == 0 {
		if h.Length > s.local.MaxMessageSize {
			return nil, 0
		}
		if !st.borrowLocked(int(h.Length)) {
			st.asm = pool.Get(int(h.Length))
		}
		st.asmN, st.asmTotal, st.asmDirect = 0, int(h.Length), true
		st.lentLocked()
		return st.asm.B, 0
	}
	if len(head) < 4 {
		return nil, 4 // the length prefix first
	}
	total := binary.BigEndian.Uint32(head)
	if total <= h.Length-4 || total > s.local.MaxMessageSize {
		return nil, 0 // onData reports it
	}
	st.startAsmLocked(int(total), int(h.Length-4))
	st.asmDirect = true
	st.lentLocked()
	return st.asm.B[:h.Length-4], 4
}

// asmBudget bounds the memory of chunked messages being assembled that a
// session takes at their declared sizes: its connection window, what the
// peer may have in flight.
func (s *Session) asmBudget() int64 { return int64(s.local.InitialWindow) * connWindowFactor }

// grantConn returns n bytes of connection credit to the peer, batching
// WINDOW frames until half the window is owed.
func (s *Session) grantConn(n int64) {
	if n == 0 {
		return
	}
	owed := s.connUnacked.Add(n)
	if owed < int64(s.local.InitialWindow)*connWindowFactor/2 {
		return
	}
	if !s.connUnacked.CompareAndSwap(owed, 0) {
		return // another goroutine is granting
	}
	s.connRecvWin.Add(owed)
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(owed))
	s.writeFrame(0, wire.TypeWindow, 0, p[:])
}

func (s *Session) onWindow(id uint32, incr uint32) {
	if id == 0 {
		s.flowMu.Lock()
		s.connSendWin += int64(incr)
		waiters := s.flowWaiters
		s.flowWaiters = nil
		s.flowMu.Unlock()
		for _, st := range waiters {
			st.wakeSender()
		}
		return
	}
	st := s.lookup(id)
	if st == nil {
		return
	}
	s.flowMu.Lock()
	if st.ID() == id {
		st.sendWin += int64(incr)
	}
	s.flowMu.Unlock()
	st.wakeSender()
}
