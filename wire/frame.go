package wire

import (
	"encoding/binary"
	"fmt"
)

// HeaderSize is the size in bytes of every frame header.
//
//	0                   4                   8    9    10
//	+-------------------+-------------------+----+----+
//	| payload length    | stream id         |type|flag|
//	+-------------------+-------------------+----+----+
//
// Integers are big-endian. The length counts only the payload that follows
// the header.
const HeaderSize = 10

// Type is a frame type.
type Type uint8

// Frame types. The payload of each is specified in PROTOCOL.md.
const (
	TypeHeaders  Type = 0x1 // call header (client) or reply metadata (server)
	TypeData     Type = 0x2 // message bytes, possibly chunked with FlagMore
	TypeTrailers Type = 0x3 // final status of a stream (server to client)
	TypeCancel   Type = 0x4 // abandon a stream; the connection stays up
	TypeWindow   Type = 0x5 // flow-control credit: 4-byte increment
	TypePing     Type = 0x6 // 8 opaque bytes, echoed back with FlagAck
	TypeGoAway   Type = 0x7 // graceful shutdown: no new streams
)

func (t Type) String() string {
	switch t {
	case TypeHeaders:
		return "HEADERS"
	case TypeData:
		return "DATA"
	case TypeTrailers:
		return "TRAILERS"
	case TypeCancel:
		return "CANCEL"
	case TypeWindow:
		return "WINDOW"
	case TypePing:
		return "PING"
	case TypeGoAway:
		return "GOAWAY"
	}
	return fmt.Sprintf("Type(0x%02x)", uint8(t))
}

// Valid reports whether t is a frame type this version of the protocol knows.
func (t Type) valid() bool { return t >= TypeHeaders && t <= TypeGoAway }

// Flags is the flag byte of a frame header.
type Flags uint8

// Frame flags. Bits not listed are reserved: senders set them to zero and
// receivers ignore them.
const (
	// FlagMore marks a DATA frame whose message continues in the next DATA
	// frame of the same stream. The first frame of such a chunked message
	// starts with the 4-byte total message length. HEADERS and TRAILERS are
	// never chunked.
	FlagMore Flags = 0x01
	// FlagEnd marks the last frame the sender will send on the stream
	// (half-close).
	FlagEnd Flags = 0x02
	// FlagAck marks a PING reply.
	FlagAck Flags = 0x04
	// FlagFiles marks a DATA frame sent with descriptors (SCM_RIGHTS, on
	// a unix socket, to a peer that announced MaxFiles): its payload starts
	// with a descriptor block naming them (PROTOCOL.md, "Descriptors and
	// shared messages"). Such a frame holds a whole message.
	FlagFiles Flags = 0x08
)

// Header is a decoded frame header.
type Header struct {
	Length uint32 // payload length in bytes
	Stream uint32 // 0 for connection frames; odd from the client, even from the server
	Type   Type
	Flags  Flags
}

func (h Header) String() string {
	return fmt.Sprintf("%v stream=%d len=%d flags=%#02x", h.Type, h.Stream, h.Length, uint8(h.Flags))
}

// AppendHeader appends the encoding of h to b.
func AppendHeader(b []byte, h Header) []byte {
	return append(b,
		byte(h.Length>>24), byte(h.Length>>16), byte(h.Length>>8), byte(h.Length),
		byte(h.Stream>>24), byte(h.Stream>>16), byte(h.Stream>>8), byte(h.Stream),
		byte(h.Type), byte(h.Flags))
}

// putHeader writes h into b[:HeaderSize]. It panics if b is shorter.
func putHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	binary.BigEndian.PutUint32(b, h.Length)
	binary.BigEndian.PutUint32(b[4:], h.Stream)
	b[8] = byte(h.Type)
	b[9] = byte(h.Flags)
}

// AppendFrame appends a frame of type typ carrying payload to b. The header's
// Length is set from len(payload).
func AppendFrame(b []byte, stream uint32, typ Type, flags Flags, payload []byte) []byte {
	b = AppendHeader(b, Header{Length: uint32(len(payload)), Stream: stream, Type: typ, Flags: flags})
	return append(b, payload...)
}

// ParseHeader decodes a frame header from the start of b. ok is false when b
// holds fewer than HeaderSize bytes: that means "need more bytes", not an
// error. ParseHeader does not validate the header; see Header.Check.
func ParseHeader(b []byte) (h Header, ok bool) {
	if len(b) < HeaderSize {
		return Header{}, false
	}
	return Header{
		Length: binary.BigEndian.Uint32(b),
		Stream: binary.BigEndian.Uint32(b[4:]),
		Type:   Type(b[8]),
		Flags:  Flags(b[9]),
	}, true
}

// Check validates h against the largest frame payload the receiver accepts.
// It returns a *FrameError for an unknown type, a connection-level frame type
// on a stream (or the reverse), a payload of the wrong size for PING or
// WINDOW, or FlagMore on HEADERS or TRAILERS (only DATA is chunked), and a
// *FrameTooLargeError for a payload over maxPayload.
func (h Header) Check(maxPayload uint32) error {
	if h.Length > maxPayload {
		return &FrameTooLargeError{Size: h.Length, Limit: maxPayload}
	}
	switch h.Type {
	case TypeHeaders, TypeData, TypeTrailers, TypeCancel:
		if h.Stream == 0 {
			return &FrameError{Header: h, Reason: "stream frame on stream 0"}
		}
		if h.Flags&FlagMore != 0 && (h.Type == TypeHeaders || h.Type == TypeTrailers) {
			return &FrameError{Header: h, Reason: "FlagMore on HEADERS or TRAILERS (only DATA is chunked)"}
		}
	case TypePing, TypeGoAway:
		if h.Stream != 0 {
			return &FrameError{Header: h, Reason: "connection frame on a stream"}
		}
		if h.Type == TypePing && h.Length != 8 {
			return &FrameError{Header: h, Reason: "PING payload must be 8 bytes"}
		}
	case TypeWindow:
		if h.Length != 4 {
			return &FrameError{Header: h, Reason: "WINDOW payload must be 4 bytes"}
		}
	default:
		return &FrameError{Header: h, Reason: "unknown frame type"}
	}
	return nil
}

// ParseFrame decodes one whole frame from the start of b. ok is false when b
// does not yet hold the whole frame ("need more bytes"). On success payload
// aliases b and rest is what follows the frame. A header that fails Check is
// reported as err before its payload is waited for.
func ParseFrame(b []byte, maxPayload uint32) (rest []byte, h Header, payload []byte, ok bool, err error) {
	h, ok = ParseHeader(b)
	if !ok {
		return b, h, nil, false, nil
	}
	if err := h.Check(maxPayload); err != nil {
		return b, h, nil, false, err
	}
	if uint64(len(b)-HeaderSize) < uint64(h.Length) {
		return b, h, nil, false, nil
	}
	end := HeaderSize + int(h.Length)
	return b[end:], h, b[HeaderSize:end:end], true, nil
}
