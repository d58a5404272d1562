//go:build !unix

package transport

import (
	"io/fs"
	"net"
)

// socketFile is a socket file that Listen created. Socket files are not
// supported on this platform.
type socketFile struct{ technique string }

func listenFile(string, fs.FileMode, *Owner) (*net.UnixListener, *socketFile, error) {
	return nil, nil, ErrUnsupported
}

func (*socketFile) remove() error { return nil }

func fileOwner(fs.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }

func describe(fi fs.FileInfo) string { return "a file of mode " + fi.Mode().String() }
