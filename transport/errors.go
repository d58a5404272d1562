package transport

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Sentinel errors.
var (
	// ErrAddrInUse is returned by Listen when a server is accepting
	// connections on the socket file already there.
	ErrAddrInUse = errors.New("warren: address in use by a running server")
	// ErrNotSocket is returned by Listen when something other than a socket
	// (a regular file, a directory, a symbolic link...) is at the path. It is
	// left untouched.
	ErrNotSocket = errors.New("warren: path exists and is not a socket")
	// ErrUnsafeDir is matched by the error Listen returns for a socket
	// file's directory that others may write to without the sticky bit.
	ErrUnsafeDir = errors.New("warren: directory writable by others without the sticky bit")
	// ErrUnsupported is returned for a feature this platform lacks, such as
	// Unix domain socket files on Windows. It matches errors.ErrUnsupported.
	ErrUnsupported = fmt.Errorf("warren: not supported on this platform: %w", errors.ErrUnsupported)
)

// forms lists the address forms ParseAddr accepts.
const forms = "unix:///absolute/path, unix:relative/path, unix:@name (Linux abstract namespace), tcp://host:port, tls://host:port, ws://host:port/path, wss://host:port/path, systemd: or systemd:NAME (a socket passed by systemd, to listen on)"

// AddrError reports an address ParseAddr does not accept.
type AddrError struct {
	Addr   string // the address as given
	Reason string // what is wrong with it
}

func (e *AddrError) Error() string {
	return fmt.Sprintf("warren: bad address %q: %s; accepted forms are %s", e.Addr, e.Reason, forms)
}

// PathTooLongError reports a Unix domain socket path that does not fit in
// the kernel's socket address (sun_path).
type PathTooLongError struct {
	Path  string
	Len   int // the path's length in bytes
	Limit int // the size of sun_path, including the terminating NUL
}

func (e *PathTooLongError) Error() string {
	return fmt.Sprintf("warren: unix socket path %q is %d bytes, but this platform's sun_path holds %d bytes including the terminating NUL, so at most %d: use a shorter path, or a relative one from a nearby working directory",
		e.Path, e.Len, e.Limit, e.Limit-1)
}

// SocketFileError reports a socket file that fails a DialConfig check
// (RequireOwner or RequireModes) before anything is sent to it.
type SocketFileError struct {
	Path  string
	Check string // "owner" or "mode"
	Want  string // what was required, e.g. "uid 0, any gid" or "one of 0600, 0660"
	Got   string // what the file has, e.g. "uid 1000, gid 1000" or "0666"
}

func (e *SocketFileError) Error() string {
	return fmt.Sprintf("warren: socket file %s has %s %s, want %s", e.Path, e.Check, e.Got, e.Want)
}

// opError names the operation and address of an error from Listen or Dial.
// Its message carries the "warren:" prefix once, even when the wrapped error
// has it too.
type opError struct {
	op   string // "listen" or "dial"
	addr string
	err  error
}

func (e *opError) Error() string {
	return "warren: " + e.op + " " + e.addr + ": " + strings.TrimPrefix(e.err.Error(), "warren: ")
}

func (e *opError) Unwrap() error { return e.err }

// fileMode formats permission bits the way chmod takes them.
func fileMode(m os.FileMode) string { return fmt.Sprintf("%#o", uint32(m.Perm())) }
