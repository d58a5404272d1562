package mux

import (
	"encoding/binary"
	"time"

	"github.com/warrenipc/warren/wire"
)

// HEADERS and TRAILERS are never chunked: their payload must fit in one
// frame of the peer's MaxFrameSize, or the peer closes the connection and
// every call on it fails. A sender checks before it writes and fails just
// the call. Each check first adds up a bound cheaply and encodes the payload
// only when the bound does not fit.

// fitFrame returns a *wire.FrameTooLargeError unless n payload bytes fit in
// a frame of the peer's.
func (s *Session) fitFrame(n int) error {
	if uint64(n) > uint64(s.peer.MaxFrameSize) {
		return &wire.FrameTooLargeError{Size: uint32(min(uint64(n), 1<<32-1)), Limit: s.peer.MaxFrameSize}
	}
	return nil
}

// fitCallHeader checks the payload of a call's HEADERS frame.
func (s *Session) fitCallHeader(method string, codec uint8, timeout time.Duration, md []string) error {
	if 2*binary.MaxVarintLen64+1+len(method)+metadataSize(md) <= int(s.peer.MaxFrameSize) {
		return nil
	}
	return s.fitFrame(len(wire.AppendCallHeader(nil, method, codec, timeout, md)))
}

// fitReply checks the reply metadata and the trailers of a reply.
func (s *Session) fitReply(header []string, code uint32, msg string, details [][]byte, trailer []string) error {
	if err := s.fitFrame(metadataSize(header)); err != nil {
		return err
	}
	n := 3*binary.MaxVarintLen64 + len(msg) + metadataSize(trailer)
	for _, d := range details {
		n += binary.MaxVarintLen64 + len(d)
	}
	if n <= int(s.peer.MaxFrameSize) {
		return nil
	}
	return s.fitFrame(len(wire.AppendTrailer(nil, code, msg, details, trailer)))
}

// metadataSize returns the size of the metadata block holding md.
func metadataSize(md []string) int {
	if len(md) == 0 {
		return 0
	}
	var buf [binary.MaxVarintLen64]byte
	n := len(binary.AppendUvarint(buf[:0], uint64(len(md)/2)))
	for _, s := range md {
		n += len(binary.AppendUvarint(buf[:0], uint64(len(s)))) + len(s)
	}
	return n
}
