package frameio

import (
	"encoding/binary"
	"math"

	"github.com/warrenipc/warren/wire"
)

// lengthPrefix is the size of the total length that starts a chunked
// message (see wire.AppendMessage).
const lengthPrefix = 4

// Chunker splits one message into frames one at a time, so that a writer can
// send frames of other streams in between and size each frame by the
// flow-control credit it has. Its zero value is done; Reset starts a message.
// Frames built from the same message with the same max are those of
// AppendMessage.
type Chunker struct {
	msg     []byte // what is left to send
	total   uint32
	stream  uint32
	typ     wire.Type
	flags   wire.Flags
	started bool // the first frame has been produced
	pending bool // frames remain to be produced
}

// Reset starts splitting msg, which must stay unchanged until Done. It
// panics if len(msg) does not fit in 32 bits.
func (c *Chunker) Reset(stream uint32, typ wire.Type, flags wire.Flags, msg []byte) {
	if uint64(len(msg)) > math.MaxUint32 {
		panic("wire: message larger than 4 GiB")
	}
	*c = Chunker{msg: msg, total: uint32(len(msg)), stream: stream, typ: typ, flags: flags &^ wire.FlagMore, pending: true}
}

// Done reports whether every frame of the message has been produced.
func (c *Chunker) Done() bool { return !c.pending }

// Remaining returns the number of message bytes not yet produced.
func (c *Chunker) Remaining() int { return len(c.msg) }

// next returns the header of the next frame of at most max payload bytes,
// whether it starts with the length prefix, and the part of the message it
// carries; ok is false when max is too small to make progress.
func (c *Chunker) next(max uint32) (h wire.Header, prefix bool, chunk []byte, ok bool) {
	if c.Done() {
		return wire.Header{}, false, nil, false
	}
	h = wire.Header{Stream: c.stream, Type: c.typ}
	if !c.started {
		if uint64(len(c.msg)) <= uint64(max) {
			h.Length, h.Flags = uint32(len(c.msg)), c.flags
			return h, false, c.msg, true
		}
		if max <= lengthPrefix {
			return wire.Header{}, false, nil, false
		}
		n := max - lengthPrefix
		h.Length, h.Flags = max, c.flags&^wire.FlagEnd|wire.FlagMore
		return h, true, c.msg[:n], true
	}
	if max == 0 {
		return wire.Header{}, false, nil, false
	}
	n := uint32(min(uint64(len(c.msg)), uint64(max)))
	h.Length = n
	if int(n) == len(c.msg) {
		h.Flags = c.flags
	} else {
		h.Flags = c.flags&^wire.FlagEnd | wire.FlagMore
	}
	return h, false, c.msg[:n], true
}

// advance records that the frame returned by next was sent.
func (c *Chunker) advance(chunk []byte) {
	c.started = true
	c.msg = c.msg[len(chunk):]
	if len(c.msg) == 0 {
		c.pending = false
	}
}

// AppendNext appends the next frame, with a payload of at most max bytes, to
// b and returns its payload length n, which is what the frame costs in
// flow-control credit. When max is too small to make progress (0, or below 5
// for the first frame of a message that must be chunked) it returns b
// unchanged and n = -1. An empty message is one frame with an empty payload.
func (c *Chunker) AppendNext(b []byte, max uint32) ([]byte, int) {
	h, prefix, chunk, ok := c.next(max)
	if !ok {
		return b, -1
	}
	b = wire.AppendHeader(b, h)
	if prefix {
		b = binary.BigEndian.AppendUint32(b, c.total)
	}
	b = append(b, chunk...)
	c.advance(chunk)
	return b, int(h.Length)
}
