package mux

import (
	"errors"
	"fmt"
	"net"

	"github.com/warrenipc/warren/status"
)

// Sentinel errors.
var (
	// ErrClosed is returned for operations on a session closed by this side.
	ErrClosed = errors.New("warren: session closed")
	// ErrGoAway is returned when opening a stream on a session whose peer
	// has announced it is going away; open a new session instead.
	ErrGoAway = errors.New("warren: peer is going away")
	// ErrStreamCanceled is returned by a stream's operations after the peer
	// canceled it.
	ErrStreamCanceled = errors.New("warren: stream canceled by peer")
	// ErrTooManyStreams is returned when the peer's MaxStreams limit is
	// reached.
	ErrTooManyStreams = errors.New("warren: too many concurrent streams")
	// ErrStreamEnded is returned when sending on a client stream that the
	// server has already ended with its trailers; Recv tells the outcome.
	ErrStreamEnded = errors.New("warren: stream ended by the server")
	// ErrStreamClosed is returned when sending on a stream after its send
	// side was closed.
	ErrStreamClosed = errors.New("warren: send on closed stream")
)

// GoAwayError is the error of a stream the peer did not process because it
// is going away, and of opening a stream after that. It matches ErrGoAway.
type GoAwayError struct {
	Code    status.Code // the code the peer gave; Unavailable or OK when draining
	Message string
}

func (e *GoAwayError) Error() string {
	if e.Message == "" {
		return ErrGoAway.Error()
	}
	return ErrGoAway.Error() + ": " + e.Message
}

// Is makes errors.Is(err, ErrGoAway) true.
func (e *GoAwayError) Is(target error) bool { return target == ErrGoAway }

// ConnError reports that a session's connection failed or was closed by the
// peer. Every stream pending on the session fails with it at once.
type ConnError struct {
	Err error // the underlying read or write error
}

func (e *ConnError) Error() string { return fmt.Sprintf("warren: connection lost: %v", e.Err) }
func (e *ConnError) Unwrap() error { return e.Err }

// Temporary and Timeout make ConnError a net.Error; a lost connection is
// worth retrying on a new session.
func (e *ConnError) Timeout() bool { return false }

var _ net.Error = (*ConnError)(nil)

// Temporary reports true: a new connection may succeed.
func (e *ConnError) Temporary() bool { return true }

// ProtocolError reports a peer that broke the protocol; the session is closed.
type ProtocolError struct {
	Reason string
}

func (e *ProtocolError) Error() string { return "warren: protocol error: " + e.Reason }
