package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// callError is a failed call as the user sees it, printed as
// "error: CODE: message".
type callError struct {
	code status.Code
	msg  string
}

func (e *callError) Error() string { return e.code.String() + ": " + e.msg }

// explain turns the error of a call to addr (as the user wrote it) into a
// status code and a message that says what to do about it. The rpc client
// reports every connection failure as Unavailable with the dial or
// handshake error as its message; the causes are told apart here.
func explain(addr string, err error) *callError {
	if ce := explainTLSCall(addr, err); ce != nil {
		return ce
	}
	se := status.FromError(err)
	code, msg := se.Code, trimWarren(se.Message)
	uid := os.Geteuid()
	var (
		ga      *rpc.GoAwayError
		addrErr *transport.AddrError
		tooLong *transport.PathTooLongError
		fileErr *transport.SocketFileError
	)
	where := addr
	if addr == defaultKeyword {
		if a, err := defaultAddr(); err == nil {
			where = "the default address " + a
		}
	}
	switch {
	case errors.As(err, &addrErr):
		msg := trimWarren(addrErr.Error())
		if s := suggestAddr(addrErr.Addr); s != "" {
			msg = strings.Replace(msg, "; accepted forms", "; did you mean "+s+"? The accepted forms", 1)
		}
		return &callError{status.InvalidArgument, msg}
	case errors.As(err, &tooLong):
		return &callError{status.InvalidArgument, trimWarren(tooLong.Error())}
	case errors.As(err, &fileErr):
		return &callError{status.PermissionDenied, trimWarren(fileErr.Error())}
	case errors.Is(err, errServerUID):
		return &callError{status.PermissionDenied, fmt.Sprintf("refusing the server: %s", msg)}
	case errors.Is(err, peer.ErrDenied):
		// Our own check of the server (the default address requires the
		// server to run as this user).
		return &callError{status.PermissionDenied, fmt.Sprintf(
			"the server at %s does not run as you (uid %d), so it is not trusted with the default address: %s; give its address explicitly if you trust it", where, uid, msg)}
	case se.Code == status.PermissionDenied && errors.As(err, &ga):
		// Refused by the server's connection policy.
		return &callError{status.PermissionDenied, fmt.Sprintf(
			"permission denied by the server's policy for uid %d: ask whoever runs the server to allow you (warren serve --allow-uid %d); the server said: %s", uid, uid, trimWarren(ga0(ga, se.Message)))}
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return &callError{status.Unavailable, fmt.Sprintf("no server at %s: is `warren serve` running?", where)}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &callError{status.PermissionDenied, fmt.Sprintf(
			"cannot connect to %s: the socket file's mode (or its directory's) does not let uid %d in: the server must be started with a mode that lets you connect (warren serve --mode 0666 --allow-uid %d), in a directory you can reach", where, uid, uid)}
	case errors.Is(err, wire.ErrNotWarren), errors.Is(err, wire.ErrBadPreface):
		return &callError{status.Unavailable, fmt.Sprintf("%s is not a warren server (%s)", where, msg)}
	case errors.Is(err, wire.ErrVersion):
		return &callError{status.Unavailable, fmt.Sprintf("the server at %s speaks another version of the warren protocol (%s): use a warren command of the same version", where, msg)}
	case se.Code == status.Unavailable && !isConnLost(err) &&
		(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)):
		// The connection was closed during the handshake (not a lost
		// session): a listener
		// whose policy refuses us closes it without a word.
		return &callError{status.Unavailable, fmt.Sprintf(
			"the server at %s closed the connection during the handshake: its policy probably refuses uid %d (ask whoever runs it to allow you), or it is not a warren server", where, uid)}
	case errors.Is(err, context.DeadlineExceeded), se.Code == status.DeadlineExceeded:
		return &callError{status.DeadlineExceeded, fmt.Sprintf("no reply from %s in time (%s): raise -timeout, or check that the server is not stuck", where, msg)}
	case se.Code == status.Unavailable && isConnLost(err):
		return &callError{status.Unavailable, fmt.Sprintf("lost the connection to %s (%s): did the server stop?", where, msg)}
	case se.Code == status.Unimplemented:
		return &callError{code, msg + fmt.Sprintf(" (run `warren list %s` to see the methods)", addr)}
	}
	return &callError{code, msg}
}

// refusedConn reports an error that concerns the connection rather than a
// call: unreachable, refused by the server's policy or limits.
func refusedConn(err error) bool {
	var ga *rpc.GoAwayError
	switch status.CodeOf(err) {
	case status.Unavailable:
		return true
	}
	return errors.As(err, &ga) || errors.Is(err, peer.ErrDenied)
}

func ga0(ga *rpc.GoAwayError, fallback string) string {
	if ga != nil && ga.Message != "" {
		return ga.Message
	}
	return fallback
}

func isConnLost(err error) bool {
	var ce *rpc.ConnError
	return errors.As(err, &ce)
}

func trimWarren(s string) string { return strings.TrimPrefix(s, "warren: ") }
