package rpc

import "github.com/warrenipc/warren/wire"

// ConnError is the cause (see status.Error.Cause) of a call that failed
// because its connection failed or was closed by the peer: every call
// pending on the connection fails with it at once. It is worth retrying:
// the Client dials again for the next call. It is wire.ConnError, which
// package stream reports too.
type ConnError = wire.ConnError

// GoAwayError is the cause of a call that the server did not take because it
// refused the connection (Code PermissionDenied for its policy,
// ResourceExhausted for a limit) or is shutting down (Unavailable or OK). It
// is wire.GoAwayError.
type GoAwayError = wire.GoAwayError
