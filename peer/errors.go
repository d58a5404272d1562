package peer

import (
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrDenied matches every error by which a Policy refuses a peer,
	// including [*DeniedError].
	ErrDenied = errors.New("warren: peer not authorized")
	// ErrNoCred is returned by [ReadCred] for a connection that is not a Unix
	// domain socket, or on a platform that does not report peer credentials.
	ErrNoCred = errors.New("warren: peer credentials not available")
)

// DeniedError reports that a Policy refused a peer. It matches [ErrDenied].
type DeniedError struct {
	Peer   *Peer  // the peer that was refused; may be nil
	Reason string // why, in words; may be empty
	// Err is the policy's own error when it was not a DeniedError (see
	// [Authorize]); nil otherwise.
	Err error
}

func (e *DeniedError) Error() string {
	msg := fmt.Sprintf("warren: peer not authorized (%s)", e.Peer)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap returns ErrDenied and the policy's own error, if any.
func (e *DeniedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrDenied}
	}
	return []error{ErrDenied, e.Err}
}

func deny(p *Peer, format string, args ...any) error {
	return &DeniedError{Peer: p, Reason: fmt.Sprintf(format, args...)}
}
