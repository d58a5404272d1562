package stream

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/wire"
)

// Where the memory of a message comes from, which decides who may keep it.
const (
	fromFrame  = iota // a single frame: aliases the frame reader's buffer
	fromCaller        // the dst given to ReadBytes
	fromStream        // s.rbuf, kept by the Stream
	fromNew           // allocated for this message; nobody else has it
	fromDrop          // (as a request) drop the message: Close is draining
)

// partial is a chunked message being received. The rules are those of
// wire.Assembler (PROTOCOL.md, "Messages and chunking"); the difference is
// that the chunks go straight into the buffer the message is returned in,
// the caller's own for ReadBytes, rather than through a buffer of the
// Stream, which saves a copy of every large message.
type partial struct {
	buf     []byte // len(buf) == total; nil while dropping
	n       int64  // bytes received
	total   int64  // declared length (up to 4 GiB while dropping)
	from    int    // where buf comes from
	active  bool
	discard bool // over the limit, or being drained: drop the chunks
}

// Read receives the next message and decodes it into v (a pointer) with the
// stream's codec. It returns io.EOF once the peer has ended the stream
// (CloseWrite or Close) and every message sent before has been read.
//
// With the JSON codec, numbers decoded into interface values (any,
// map[string]any, ...) are json.Number, so they keep every digit; a
// json.RawMessage field keeps its part of the message for later decoding.
//
// A message that does not decode gives a *CodecError; one larger than this
// side's MaxMessageSize gives a *wire.MessageTooLargeError (the message is
// skipped without being buffered). Both leave the stream usable. A
// connection that fails, or ends without the peer's end-of-stream marker,
// gives a *ConnError; a peer that breaks the protocol, an error wrapping a
// *wire.FrameError or *wire.FrameTooLargeError; and Read returns the same
// error from then on. After Close, Read returns ErrClosed.
func (s *Stream) Read(v any) error {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	msg, from, err := s.readLocked(s.rbuf[:0], fromStream)
	if err != nil {
		return err
	}
	if s.codec == codec.JSON {
		err = decodeJSON(&s.jr, msg, v, s.strict)
	} else {
		err = s.codec.Unmarshal(msg, v)
	}
	if from == fromNew && cap(msg) <= keepBuffer {
		s.rbuf = msg[:0] // keep the larger buffer for the next message
	}
	if err != nil {
		return newDecodeError(s.codec.Name(), err, s.strict)
	}
	return nil
}

// ReadBytes receives the next message, unchanged, and returns it in dst's
// memory (as append(dst[:0], msg...) would), so that a caller passing the
// previous result back in reads without allocating once the buffer is large
// enough. The result belongs to the caller. On error it returns dst[:0] and
// the errors of Read (but no *CodecError).
func (s *Stream) ReadBytes(dst []byte) ([]byte, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	msg, from, err := s.readLocked(dst[:0], fromCaller)
	switch {
	case err != nil:
		p := &s.part
		switch {
		case !p.active || p.from != fromCaller:
		case s.closing.Load():
			p.buf, p.discard = nil, true // Close drops the rest
		default:
			// A timeout in the middle of a message: dst goes back to the
			// caller, so what arrived of the message moves out of it.
			buf := make([]byte, p.total)
			copy(buf, p.buf[:p.n])
			p.buf, p.from = buf, fromNew
		}
		return dst[:0], err
	case from == fromCaller || from == fromNew:
		return msg, nil // assembled in dst, or in memory only the caller will have
	}
	return append(dst[:0], msg...), nil
}

// readLocked returns the next message and where its memory comes from. A
// chunked message is assembled in dst if it is large enough; from says what
// dst is.
func (s *Stream) readLocked(dst []byte, from int) ([]byte, int, error) {
	if s.closing.Load() {
		return nil, 0, ErrClosed
	}
	msg, from, err := s.nextLocked(dst, from)
	if err != nil && s.closing.Load() {
		return nil, 0, ErrClosed // Close interrupted the read
	}
	return msg, from, err
}

// nextLocked reads frames until a message is complete. A message that came
// in one frame aliases the frame reader's buffer and is valid until the
// next read.
func (s *Stream) nextLocked(dst []byte, from int) ([]byte, int, error) {
	if s.rerr != nil {
		return nil, 0, s.rerr
	}
	p := &s.part
	if from == fromDrop && p.active {
		p.buf, p.discard = nil, true
	}
	for {
		h, payload, err := s.r.Next()
		if err != nil {
			return nil, 0, s.readFailedLocked(err)
		}
		if h.Stream != streamID || (h.Type != wire.TypeData && h.Type != wire.TypeTrailers) {
			return nil, 0, s.brokenLocked(h, "a plain message stream carries only DATA and TRAILERS frames on stream 1")
		}
		more, end := h.Flags&wire.FlagMore != 0, h.Flags&wire.FlagEnd != 0
		switch {
		case h.Type == wire.TypeTrailers && !end:
			return nil, 0, s.brokenLocked(h, "TRAILERS without END")
		case h.Type == wire.TypeTrailers && p.active:
			return nil, 0, s.brokenLocked(h, "end of stream in the middle of a chunked message")
		case h.Type == wire.TypeTrailers:
			s.rerr = io.EOF
			return nil, 0, io.EOF
		case more && end:
			return nil, 0, s.brokenLocked(h, "FlagEnd on a frame with FlagMore")
		}
		if end {
			s.rerr = io.EOF // returned by the next read, after this message
		}

		if !p.active && !more { // a message in one frame
			switch {
			case uint64(len(payload)) <= uint64(s.local.MaxMessageSize):
				return payload, fromFrame, nil
			case from != fromDrop:
				return nil, 0, s.tooLarge(int64(len(payload)))
			case end:
				return nil, 0, io.EOF
			}
			continue
		}

		if !p.active { // the first frame of a chunked message
			if len(payload) < 4 {
				return nil, 0, s.brokenLocked(h, "first frame of a chunked message shorter than its length prefix")
			}
			total := binary.BigEndian.Uint32(payload)
			chunk := payload[4:]
			if uint64(total) <= uint64(len(chunk)) {
				return nil, 0, s.brokenLocked(h, "declared message length not larger than the first chunk")
			}
			*p = partial{n: int64(len(chunk)), total: int64(total), active: true}
			switch {
			case from == fromDrop:
				p.discard = true
				continue
			case total > s.local.MaxMessageSize: // before allocating anything
				p.discard = true
				return nil, 0, s.tooLarge(int64(total))
			case cap(dst) >= int(total):
				p.buf, p.from = dst[:total], from
			default:
				p.buf, p.from = make([]byte, total), fromNew
			}
			copy(p.buf, chunk)
			continue
		}

		// A following frame.
		switch {
		case more && len(payload) == 0:
			return nil, 0, s.brokenLocked(h, "empty continuation frame")
		case int64(len(payload)) > p.total-p.n:
			return nil, 0, s.brokenLocked(h, "chunked message longer than its declared length")
		case more && int64(len(payload)) == p.total-p.n:
			return nil, 0, s.brokenLocked(h, "FlagMore on the frame that completes a chunked message")
		case !more && int64(len(payload)) < p.total-p.n:
			return nil, 0, s.brokenLocked(h, "last frame ends short of the declared message length")
		}
		if !p.discard {
			copy(p.buf[p.n:], payload)
		}
		p.n += int64(len(payload))
		if more {
			continue
		}
		msg, msgFrom, discard := p.buf, p.from, p.discard
		*p = partial{}
		if !discard {
			return msg, msgFrom, nil
		}
		if end { // the end of a message that was dropped
			return nil, 0, io.EOF
		}
	}
}

// tooLarge reports a message over this side's limit, which is skipped.
func (s *Stream) tooLarge(size int64) error {
	return &opError{"read", &wire.MessageTooLargeError{Size: size, Limit: int64(s.local.MaxMessageSize)}}
}

// brokenLocked records a frame that breaks the protocol.
func (s *Stream) brokenLocked(h wire.Header, reason string) error {
	s.part = partial{}
	s.rerr = &opError{"read", &wire.FrameError{Header: h, Reason: reason}}
	return s.rerr
}

// readFailedLocked turns an error of the frame reader into the error of
// the read, and records it unless it is a timeout.
func (s *Stream) readFailedLocked(err error) error {
	var fe *wire.FrameError
	var tl *wire.FrameTooLargeError
	switch {
	case errors.As(err, &fe) || errors.As(err, &tl):
		s.rerr = &opError{"read", err}
	case isTimeout(err):
		// The frame reader and the partial message keep their place: a
		// later read resumes.
		return &ConnError{Op: "read", Err: err}
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		s.rerr = &ConnError{Op: "read", Partial: err == io.ErrUnexpectedEOF || s.part.active, Err: io.ErrUnexpectedEOF}
	default:
		s.rerr = &ConnError{Op: "read", Partial: s.part.active || s.r.Buffered() > 0, Err: err}
	}
	s.part = partial{}
	return s.rerr
}

// drainLocked reads and drops messages until the peer's end-of-stream
// marker.
func (s *Stream) drainLocked() error {
	for {
		_, _, err := s.nextLocked(nil, fromDrop)
		var ce *ConnError
		switch {
		case err == nil:
		case err == io.EOF:
			return nil
		case isTimeout(err):
			return ErrCloseTimeout
		case errors.As(err, &ce) && !ce.Partial && ce.Err == io.ErrUnexpectedEOF:
			return nil // the peer closed the connection at a message boundary
		case errors.As(err, &ce):
			return &ConnError{Op: "close", Partial: ce.Partial, Err: ce.Err}
		default:
			return err
		}
	}
}
