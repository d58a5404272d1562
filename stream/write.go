package stream

import (
	"github.com/warrenipc/warren/wire"
)

// Write encodes v with the stream's codec and sends it as one message. It
// returns a *CodecError if v does not encode, a *wire.MessageTooLargeError if
// the encoding is larger than the peer accepts (nothing is sent in either
// case), ErrWriteClosed after CloseWrite, ErrClosed after Close, and a
// *ConnError when the connection fails. When Write returns nil the message
// has been handed to the connection.
func (s *Stream) Write(v any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return err
	}
	b, err := s.codec.Append(s.wbuf[:0], v)
	if err != nil {
		return &CodecError{Op: "encode", Codec: s.codec.Name(), Err: err}
	}
	err = s.sendLocked(b)
	if cap(b) <= keepBuffer {
		s.wbuf = b[:0]
	} else {
		s.wbuf = nil
	}
	return err
}

// WriteBytes sends msg, unchanged, as one message, with the errors of Write
// (but no encoding). It does not keep msg after it returns. Sending a message
// allocates nothing.
func (s *Stream) WriteBytes(msg []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.writableLocked(); err != nil {
		return err
	}
	return s.sendLocked(msg)
}

// writableLocked returns the error a write would get before sending
// anything.
func (s *Stream) writableLocked() error {
	switch {
	case s.closing.Load():
		return ErrClosed
	case s.werr != nil:
		return s.werr
	case s.wended:
		return ErrWriteClosed
	}
	return nil
}

// sendLocked sends msg as DATA frames and flushes them.
func (s *Stream) sendLocked(msg []byte) error {
	if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
		return &opError{"write", err}
	}
	err := s.w.WriteMessage(streamID, wire.TypeData, 0, msg, s.peer.MaxFrameSize)
	if err == nil {
		err = s.w.Flush()
	}
	return s.writeFailedLocked(err)
}

// writeFailedLocked records a failed write; err may be nil.
func (s *Stream) writeFailedLocked(err error) error {
	if err == nil {
		return nil
	}
	s.werr = &ConnError{Op: "write", Err: err}
	if s.closing.Load() {
		return ErrClosed // Close interrupted the write
	}
	return s.werr
}

// CloseWrite ends the write side: it sends the end-of-stream marker, after
// which the peer reads io.EOF once it has read every message sent before.
// Reading goes on until the peer ends its side too. Further writes fail with
// ErrWriteClosed; calling CloseWrite again does nothing.
func (s *Stream) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closing.Load() {
		return ErrClosed
	}
	return s.endLocked()
}

// endLocked sends the end-of-stream marker unless it was sent already.
func (s *Stream) endLocked() error {
	if s.werr != nil {
		return s.werr
	}
	if s.wended {
		return nil
	}
	s.wended = true
	err := s.w.WriteFrame(streamID, wire.TypeTrailers, wire.FlagEnd, nil)
	if err == nil {
		err = s.w.Flush()
	}
	if err != nil {
		s.werr = &ConnError{Op: "write", Err: err}
		return s.werr
	}
	return nil
}
