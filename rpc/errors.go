package rpc

import (
	"errors"
	"fmt"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/status"
)

// ConnError is the cause (see status.Error.Cause) of a call that failed
// because its connection failed or was closed by the peer: every call
// pending on the connection fails with it at once. It is worth retrying:
// the Client dials again for the next call.
type ConnError struct {
	Err error // the underlying read or write error
}

func (e *ConnError) Error() string { return fmt.Sprintf("warren: connection lost: %v", e.Err) }
func (e *ConnError) Unwrap() error { return e.Err }

// GoAwayError is the cause of a call that the server did not take because it
// refused the connection (Code PermissionDenied for its policy,
// ResourceExhausted for a limit) or is shutting down (Unavailable or OK).
type GoAwayError struct {
	Code    status.Code
	Message string
}

func (e *GoAwayError) Error() string {
	if e.Message == "" {
		return mux.ErrGoAway.Error()
	}
	return mux.ErrGoAway.Error() + ": " + e.Message
}

// publicCause returns err, or for the session's own error types the
// exported error of this package that says the same.
func publicCause(err error) error {
	var ga *mux.GoAwayError
	var ce *mux.ConnError
	switch {
	case errors.As(err, &ga):
		return &GoAwayError{Code: ga.Code, Message: ga.Message}
	case errors.As(err, &ce):
		return &ConnError{Err: ce.Err}
	}
	return err
}
