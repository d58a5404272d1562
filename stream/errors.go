package stream

import (
	"errors"
	"net"
	"strings"

	"github.com/warrenipc/warren/wire"
)

// Sentinel errors.
var (
	// ErrClosed is returned by every method of a Stream after Close has
	// been called, and by a Read or Write that Close interrupted.
	ErrClosed = errors.New("warren: stream closed")
	// ErrWriteClosed is returned by Write and WriteBytes after CloseWrite.
	ErrWriteClosed = errors.New("warren: stream: write after CloseWrite")
	// ErrNotStream is returned (wrapped) by New when the peer speaks the
	// warren protocol but is not a plain message stream: typically an RPC
	// client or server, which opens a multiplexed session.
	ErrNotStream = errors.New("warren: peer is not a plain message stream")
	// ErrCloseTimeout is returned by Close when the peer did not end its
	// side of the stream within Options.CloseTimeout. The connection is
	// closed anyway. It implements net.Error with Timeout() == true.
	ErrCloseTimeout error = closeTimeoutError{}
)

type closeTimeoutError struct{}

func (closeTimeoutError) Error() string {
	return "warren: stream: close: the peer did not end the stream in time"
}
func (closeTimeoutError) Timeout() bool   { return true }
func (closeTimeoutError) Temporary() bool { return true }

// ConnError reports that the connection under a Stream failed, or ended
// without the peer's end-of-stream marker (then Err is io.ErrUnexpectedEOF).
// After a ConnError from a read or a write, that direction of the stream is
// dead and every later call returns the same error, except for a timeout
// from a read deadline set on the connection: Timeout() reports it, and a
// later Read picks up where the timed-out one stopped. It is
// wire.ConnError, which package rpc reports too; Op is "read", "write" or
// "close".
type ConnError = wire.ConnError

// CodecError reports a message that could not be encoded (Write, before
// anything is sent) or decoded (Read, after the whole message arrived). The
// stream itself is not affected: the next Read or Write proceeds.
type CodecError struct {
	// Op is "encode" or "decode".
	Op string
	// Codec is the name of the codec ("json", "proto", "raw").
	Codec string
	// Field, in a decode error of strict mode
	// (Options.DisallowUnknownFields), names the field that the target
	// type does not have.
	Field string
	// Err is the codec's error.
	Err error
}

func (e *CodecError) Error() string {
	return "warren: stream: " + e.Op + " " + e.Codec + " message: " + trimPrefix(e.Err)
}

// Unwrap returns e.Err.
func (e *CodecError) Unwrap() error { return e.Err }

// opError names the step that failed and wraps its cause, such as a
// *wire.MessageTooLargeError or a *wire.FrameError, without repeating the
// "warren: " prefix of the cause's text.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return "warren: stream: " + e.op + ": " + trimPrefix(e.err) }
func (e *opError) Unwrap() error { return e.err }

func trimPrefix(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.TrimPrefix(err.Error(), "warren: ")
}

// isTimeout reports whether err is a timeout from a connection deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
