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
