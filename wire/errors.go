package wire

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// Sentinel errors.
var (
	// ErrNotWarren is returned when a peer's first bytes are not the warren
	// preface.
	ErrNotWarren = errors.New("warren: peer does not speak the warren protocol")
	// ErrHTTPRequest is returned (wrapped with ErrNotWarren) when a peer's
	// first bytes are an HTTP/1.x request line.
	ErrHTTPRequest = errors.New("warren: peer sent an HTTP request")
	// ErrVersion is returned when the peer speaks a protocol version this
	// implementation does not.
	ErrVersion = errors.New("warren: unsupported protocol version")
	// ErrBadPreface is returned when a preface starts with the warren magic
	// and version but is malformed.
	ErrBadPreface = errors.New("warren: malformed preface")
)

// NotWarrenError reports that a peer's first bytes are not the warren
// preface. It matches ErrNotWarren with errors.Is, and also ErrHTTPRequest
// when the bytes are the start of an HTTP/1.x request.
type NotWarrenError struct {
	// HTTP reports whether the bytes start an HTTP/1.x request.
	HTTP bool
	// Prefix holds the first bytes the peer sent (at most 6). From
	// ReadPreface they are exactly the bytes consumed from the connection, so
	// a listener can replay them to an HTTP server.
	Prefix []byte
}

func (e *NotWarrenError) Error() string {
	if e.HTTP {
		return fmt.Sprintf("%v: it sent an HTTP request (%q)", ErrNotWarren, e.Prefix)
	}
	return fmt.Sprintf("%v (first bytes %q)", ErrNotWarren, e.Prefix)
}

// Unwrap returns ErrNotWarren, and ErrHTTPRequest when e.HTTP is set.
func (e *NotWarrenError) Unwrap() []error {
	if e.HTTP {
		return []error{ErrNotWarren, ErrHTTPRequest}
	}
	return []error{ErrNotWarren}
}

// SettingError reports a setting outside its allowed range, either in the
// Settings given to Validate or in a peer's preface.
type SettingError struct {
	Setting  string // field name, such as "MaxFrameSize"
	Value    uint32
	Min, Max uint32 // the allowed range, inclusive
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("warren: setting %s = %d is out of range [%d, %d]", e.Setting, e.Value, e.Min, e.Max)
}

// PayloadError reports a frame payload that does not decode. Like a
// FrameError it breaks the protocol: the peer is not a correct implementation.
type PayloadError struct {
	Type   Type // the frame type whose payload failed; 0 for a bare metadata or details block
	Reason string
}

func (e *PayloadError) Error() string {
	if e.Type == 0 {
		return "warren: malformed payload: " + e.Reason
	}
	return fmt.Sprintf("warren: malformed %v payload: %s", e.Type, e.Reason)
}

// FrameError reports a frame header that breaks the protocol. The connection
// that carried it cannot be trusted to stay in sync and must be closed.
type FrameError struct {
	Header Header
	Reason string
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("warren: bad frame (%v): %s", e.Header, e.Reason)
}

// FrameTooLargeError reports a frame whose payload is larger than the
// receiver accepts.
type FrameTooLargeError struct {
	Size  uint32 // the frame's payload length
	Limit uint32 // the largest payload accepted
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("warren: frame payload of %d bytes exceeds the limit of %d bytes", e.Size, e.Limit)
}

// MessageTooLargeError reports a message larger than the limit, found either
// by the sender before it writes anything or by the receiver before it
// allocates for the message.
type MessageTooLargeError struct {
	Size  int64 // the message's size in bytes
	Limit int64 // the largest message accepted
}

func (e *MessageTooLargeError) Error() string {
	return fmt.Sprintf("warren: message of %d bytes exceeds the limit of %d bytes", e.Size, e.Limit)
}

// ConnError reports that a connection failed, or was closed by the peer.
// Packages rpc and stream report it under the names rpc.ConnError and
// stream.ConnError (aliases of this type).
//
// In rpc it is the cause (see status.Error.Cause) of every call pending on
// the connection, which fail with it at once; it is worth retrying: the
// Client dials again for the next call. In stream it ends the direction
// (read or write) that met it, except for a timeout from a read deadline
// set on the connection: Timeout reports it, and a later Read picks up
// where the timed-out one stopped.
type ConnError struct {
	// Op is the stream operation that failed: "read", "write" or "close";
	// empty for an RPC connection.
	Op string
	// Partial reports that a stream's connection failed in the middle of a
	// message. The part of it already received was dropped.
	Partial bool
	// Err is the cause: the read or write error, or io.ErrUnexpectedEOF
	// when a stream's peer closed the connection without ending the stream.
	Err error
}

func (e *ConnError) Error() string {
	if e.Op == "" {
		return fmt.Sprintf("warren: connection lost: %v", e.Err)
	}
	s := "warren: stream: " + e.Op + ": "
	switch {
	case e.Partial:
		s += "connection lost in the middle of a message: "
	case e.Op == "read" && errors.Is(e.Err, io.ErrUnexpectedEOF):
		s += "connection closed without an end-of-stream marker: "
	}
	if e.Err == nil {
		return s + "<nil>"
	}
	return s + strings.TrimPrefix(e.Err.Error(), "warren: ")
}

// Unwrap returns e.Err.
func (e *ConnError) Unwrap() error { return e.Err }

// Timeout reports whether the error is a timeout from a deadline set on the
// connection. With Temporary it makes ConnError a net.Error.
func (e *ConnError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.Err, &t) && t.Timeout()
}

// Temporary reports true for an RPC connection, since a new one may
// succeed, and the same as Timeout for a stream.
func (e *ConnError) Temporary() bool { return e.Op == "" || e.Timeout() }

// GoAwayError is the error of a call or stream that the peer did not take
// because it sent GOAWAY: it refused the connection (Code PermissionDenied
// for its policy, ResourceExhausted for a limit) or is shutting down
// (Unavailable or OK). rpc.GoAwayError is an alias of this type.
type GoAwayError struct {
	Code    Code
	Message string
}

func (e *GoAwayError) Error() string {
	if e.Message == "" {
		return "warren: peer is going away"
	}
	return "warren: peer is going away: " + e.Message
}

// ProtocolError reports a peer that broke the protocol in a way the frame
// and payload decoders do not see (flow control, stream ids, chunking); the
// connection is closed.
type ProtocolError struct {
	Reason string
}

func (e *ProtocolError) Error() string { return "warren: protocol error: " + e.Reason }
