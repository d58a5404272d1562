package mux

import (
	"errors"

	"github.com/warrenipc/warren/wire"
)

// Sentinel errors. A session's connection errors are wire's: a
// *wire.ConnError for a connection that failed, a *wire.GoAwayError for a
// stream the peer did not take, a *wire.ProtocolError for a peer that broke
// the protocol.
var (
	// ErrClosed is returned for operations on a session closed by this side.
	ErrClosed = errors.New("warren: session closed")
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

// The wire codes the session itself sends (PROTOCOL.md, "Status codes").
const (
	codeInvalidArgument    wire.Code = 3
	codeResourceExhausted  wire.Code = 8
	codeFailedPrecondition wire.Code = 9
	codeUnimplemented      wire.Code = 12
	codeInternal           wire.Code = 13
	codeUnavailable        wire.Code = 14
)
