package mux

import "github.com/warrenipc/warren/wire"

// Large payloads in place on a fed session: the caller of Feed reads the
// rest of a large DATA frame from the socket straight into the message's
// buffer, as the reader goroutine of a session does (Session.directDst),
// instead of through its own buffer and a copy.

// FeedInto is for b, the incomplete frame at the end of what Feed handled
// (b[n:] after Feed returned n), when its header is complete. If the
// frame's payload is to be read in place, it returns the frame's header and
// dst, the memory the payload goes to, with its first k bytes already
// copied from b: the caller reads the remaining len(dst)-k bytes into
// dst[k:] and then calls FeedFrame. If dst is nil and need is positive, the
// frame should be looked at again once b holds need bytes (the length
// prefix of a chunked message); with need 0 the frame is buffered as usual.
// It must be called from the goroutine that calls Feed.
func (s *Session) FeedInto(b []byte) (h wire.Header, dst []byte, k, need int) {
	if s.closing.Load() || len(b) < wire.HeaderSize {
		return h, nil, 0, 0
	}
	h, _ = wire.ParseHeader(b)
	if h.Check(s.local.MaxFrameSize) != nil || len(b) >= wire.HeaderSize+int(h.Length) {
		return h, nil, 0, 0 // Feed reports it, or the frame is complete
	}
	head := b[wire.HeaderSize:]
	dst, skip := s.directDst(h, head)
	if dst == nil {
		if skip > len(head) {
			return h, nil, 0, wire.HeaderSize + skip
		}
		return h, nil, 0, 0
	}
	return h, dst, copy(dst, head[skip:]), 0
}

// FeedFrame handles the frame whose header FeedInto returned, once its
// payload was read into the dst it returned. On error the session is
// closed, as with Feed.
func (s *Session) FeedFrame(h wire.Header, dst []byte) error {
	if s.closing.Load() {
		return s.endedErr() // dst, lent (asmDirect), is left to the collector
	}
	s.w.cork()
	err := s.handle(h, dst)
	if err != nil {
		s.w.uncork()
		s.w.settle()
		s.closeWith(err)
		return err
	}
	s.w.uncork()
	if s.closing.Load() {
		return s.endedErr()
	}
	return nil
}

// Large payloads written in place on a fed session: a goroutine other than
// the event loop's writes a large DATA payload from its own memory, as
// writeDirect does in goroutine mode, instead of copying it into the
// writer's buffer. The payload is queued after the buffered frames
// (fedWriter.ext); if the socket does not take it all, the rest waits for
// the loop's Writable, which writes it from the caller's memory while the
// caller waits.

// writeFedDirect is writeDirect for a fed writer. It reports false, having
// done nothing, when the writer is held (the event loop is feeding the
// session or running its calls inline, maybe this very one): the loop must
// never wait, so the payload is then copied (appendFed).
func (w *writer) writeFedDirect(st *Stream, hdr, payload, tail []byte) (bool, error) {
	w.mu.Lock()
	if w.corked {
		w.mu.Unlock()
		return false, nil
	}
	if err := w.claimLocked(st); err != nil {
		return true, err
	}
	if tail != nil {
		st.s.removeEnding(st)
	}
	// Nothing is being written (the claim): the buffered frames and hdr go
	// first, then the payload, then tail and what others append meanwhile.
	w.takeBuf()
	b := w.fedRoom(w.buf, len(hdr))
	w.fw.pend, w.fw.pendH = append(b, hdr...), w.fw.bufH
	w.buf, w.fw.bufH = nil, nil
	w.fw.ext = payload
	if tail != nil {
		w.takeBuf()
		w.buf = append(w.fedRoom(w.buf, len(tail)), tail...)
	}
	w.flushing = false // for flushFedLocked, which claims it again
	w.flushFedLocked()
	w.mu.Lock()
	for w.fw.ext != nil || w.fw.extOut {
		if w.err != nil && (!w.flushing || w.fw.waitOut) {
			// No write is under way, and none will be: forget the
			// payload before its memory goes back to the caller.
			if w.fw.extOut {
				w.fw.pend, w.fw.extOut = nil, false
			}
			w.fw.ext = nil
			break
		}
		w.cond.Wait()
	}
	err := w.err
	w.mu.Unlock()
	return true, err
}
