package wire

import (
	"errors"
	"fmt"
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
