package wire

import (
	"encoding/binary"
	"math"
)

// Chunking. A message that does not fit in one frame is sent as frames of
// one type on one stream; every frame but the last has FlagMore. The payload
// of the first frame starts with the 4-byte big-endian total message length
// (counted in that frame's Length), so the receiver can check the size and
// allocate once before the rest arrives. A message that fits in one frame is
// sent as is, without FlagMore and without the prefix.

// lengthPrefix is the size of the total length that starts a chunked message.
const lengthPrefix = 4

// CheckMessageSize returns a *MessageTooLargeError when a message of n bytes
// is larger than limit, the peer's MaxMessageSize. A sender calls it before
// writing anything. A zero limit means DefaultMaxMessageSize.
func CheckMessageSize(n int, limit uint32) error {
	if limit == 0 {
		limit = DefaultMaxMessageSize
	}
	if n < 0 || uint64(n) > uint64(limit) {
		return &MessageTooLargeError{Size: int64(n), Limit: int64(limit)}
	}
	return nil
}

// AppendMessage appends msg to b as frames of type typ on stream, each with a
// payload of at most maxFrame bytes (the peer's MaxFrameSize): one frame
// when len(msg) <= maxFrame, otherwise a chunked message. FlagMore in flags
// is ignored; FlagEnd, if set, goes on the last frame only; other flags go on
// every frame.
//
// It panics if msg needs chunking and maxFrame is below 5, or if len(msg)
// does not fit in 32 bits; check the size with CheckMessageSize first.
func AppendMessage(b []byte, stream uint32, typ Type, flags Flags, msg []byte, maxFrame uint32) []byte {
	flags &^= FlagMore
	if uint64(len(msg)) > math.MaxUint32 {
		panic("wire: message larger than 4 GiB")
	}
	if uint64(len(msg)) <= uint64(maxFrame) {
		return AppendFrame(b, stream, typ, flags, msg)
	}
	if maxFrame <= lengthPrefix {
		panic("wire: AppendMessage: maxFrame too small to chunk a message")
	}
	more := flags&^FlagEnd | FlagMore
	n := maxFrame - lengthPrefix
	b = AppendHeader(b, Header{Length: maxFrame, Stream: stream, Type: typ, Flags: more})
	b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
	b = append(b, msg[:n]...)
	for rest := msg[n:]; len(rest) > 0; {
		k, f := len(rest), flags
		if uint64(k) > uint64(maxFrame) {
			k, f = int(maxFrame), more
		}
		b = AppendFrame(b, stream, typ, f, rest[:k])
		rest = rest[k:]
	}
	return b
}

// Assembler puts messages back together from their DATA frames on one
// stream. Its zero value is ready to use. It is not safe for concurrent use.
type Assembler struct {
	// Limit is the largest message accepted, normally this side's
	// MaxMessageSize; 0 means DefaultMaxMessageSize.
	Limit uint32

	buf     []byte // holds a chunked message; reused while large enough
	n       int    // bytes of buf received so far
	total   int    // declared length of the message in progress
	stream  uint32 // stream and type of the message in progress
	typ     Type
	active  bool // a chunked message is in progress
	discard bool // the message in progress was too large: drop its frames
}

// Add feeds the next frame of a message: its header and payload. It returns
// done == true and the message when the last frame arrives.
//
// A message that came in one frame is returned as payload itself, without a
// copy. A chunked message is copied into a buffer allocated once, at the
// declared size, after checking that size against Limit; the buffer is reused
// for later messages while large enough. Either way msg is valid until the
// next call to Add, Reset or Release: copy it to keep it.
//
// A message over Limit gives a *MessageTooLargeError, before anything is
// allocated for it. The Assembler then drops the rest of that message's
// frames (Add returns nothing for them), so the stream stays in step and the
// caller may cancel just that stream. Inconsistent frames give a
// *FrameError and drop the partial message: FlagEnd with FlagMore, a first
// frame too short for the length prefix, a declared length no larger than
// the first chunk, an empty continuation frame, more bytes than declared, a
// last frame short of the declared length, or a frame of another stream or
// type in the middle of a message. A partial message is never delivered.
func (a *Assembler) Add(h Header, payload []byte) (msg []byte, done bool, err error) {
	if h.Flags&(FlagMore|FlagEnd) == FlagMore|FlagEnd {
		a.Reset()
		return nil, false, &FrameError{Header: h, Reason: "FlagEnd on a frame with FlagMore"}
	}
	if !a.active {
		if h.Flags&FlagMore == 0 {
			if uint64(len(payload)) > uint64(a.limit()) {
				return nil, false, &MessageTooLargeError{Size: int64(len(payload)), Limit: int64(a.limit())}
			}
			return payload, true, nil
		}
		return nil, false, a.start(h, payload)
	}
	if h.Stream != a.stream || h.Type != a.typ {
		a.Reset()
		return nil, false, &FrameError{Header: h, Reason: "frame interrupts a chunked message"}
	}
	if len(payload) == 0 && h.Flags&FlagMore != 0 {
		a.Reset()
		return nil, false, &FrameError{Header: h, Reason: "empty continuation frame"}
	}
	if len(payload) > a.total-a.n {
		a.Reset()
		return nil, false, &FrameError{Header: h, Reason: "chunked message longer than its declared length"}
	}
	if !a.discard {
		copy(a.buf[a.n:], payload)
	}
	a.n += len(payload)
	if h.Flags&FlagMore != 0 {
		if a.n == a.total {
			a.Reset()
			return nil, false, &FrameError{Header: h, Reason: "FlagMore on the frame that completes a chunked message"}
		}
		return nil, false, nil
	}
	if a.n != a.total {
		a.Reset()
		return nil, false, &FrameError{Header: h, Reason: "last frame ends short of the declared message length"}
	}
	total, discard := a.total, a.discard
	a.Reset()
	if discard {
		return nil, false, nil
	}
	return a.buf[:total:total], true, nil
}

// start begins a chunked message with its first frame.
func (a *Assembler) start(h Header, payload []byte) error {
	if len(payload) < lengthPrefix {
		return &FrameError{Header: h, Reason: "first frame of a chunked message shorter than its length prefix"}
	}
	total := binary.BigEndian.Uint32(payload)
	chunk := payload[lengthPrefix:]
	if uint64(total) <= uint64(len(chunk)) {
		return &FrameError{Header: h, Reason: "declared message length not larger than the first chunk"}
	}
	a.active, a.stream, a.typ = true, h.Stream, h.Type
	a.total, a.n = int(total), len(chunk)
	if total > a.limit() {
		a.discard = true
		return &MessageTooLargeError{Size: int64(total), Limit: int64(a.limit())}
	}
	if cap(a.buf) < int(total) {
		a.buf = nil // let the old buffer go before allocating the new one
		a.buf = make([]byte, total)
	}
	a.buf = a.buf[:total]
	copy(a.buf, chunk)
	return nil
}

func (a *Assembler) limit() uint32 {
	if a.Limit == 0 {
		return DefaultMaxMessageSize
	}
	return a.Limit
}

// InProgress reports whether a chunked message has started and not ended,
// including one being dropped after a *MessageTooLargeError.
func (a *Assembler) InProgress() bool { return a.active }

// Reset drops the message in progress, if any. The buffer is kept.
func (a *Assembler) Reset() {
	a.n, a.total, a.stream, a.typ, a.active, a.discard = 0, 0, 0, 0, false, false
}

// Release is Reset that also lets the buffer go, for a stream that received
// a large message and then went quiet.
func (a *Assembler) Release() {
	a.Reset()
	a.buf = nil
}
