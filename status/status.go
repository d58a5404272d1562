// Package status defines the outcome of a warren call: a code numbered like
// gRPC's codes, a message, and optional details.
package status

import (
	"context"
	"errors"
	"fmt"

	"github.com/warrenipc/warren/wire"
)

// Code is a status code, numbered as gRPC's codes. It is the code type of
// the wire protocol, so that a code read off the wire needs no conversion;
// its String method returns the name in snake case, as the Connect protocol
// spells it ("not_found").
type Code = wire.Code

// The status codes.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

// ParseCode returns the code named s (as Code.String spells it).
func ParseCode(s string) (Code, bool) {
	for c := OK; c <= Unauthenticated; c++ {
		if c.String() == s {
			return c, true
		}
	}
	return Unknown, false
}

// Error is a non-OK status carried as a Go error.
type Error struct {
	Code    Code
	Message string
	// Details are opaque payloads (JSON by convention) that travel with the
	// status.
	Details [][]byte
	// Cause is the local error behind the status, if any. It is not sent
	// to the peer.
	Cause error
}

// Unwrap returns the local cause.
func (e *Error) Unwrap() error { return e.Cause }

func (e *Error) Error() string {
	if e.Message == "" {
		return "warren: " + e.Code.String()
	}
	return "warren: " + e.Code.String() + ": " + e.Message
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, status.New(status.NotFound, "")) matches any NotFound.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// New returns an error with the code and message.
func New(code Code, msg string) *Error { return &Error{Code: code, Message: msg} }

// Errorf returns an error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FromError converts any error into a status. nil becomes nil; an *Error in
// err's chain is returned as is; context cancellation and deadline errors
// become Canceled and DeadlineExceeded; anything else becomes Unknown with
// err's text.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: DeadlineExceeded, Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Code: Canceled, Message: err.Error()}
	}
	return &Error{Code: Unknown, Message: err.Error()}
}

// CodeOf returns the code of err: OK for nil, otherwise FromError(err).Code.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	return FromError(err).Code
}
