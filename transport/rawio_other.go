//go:build !linux

package transport

import "net"

// rawIO is used on Linux only (see rawio_linux.go).
type rawIO struct{ net.Conn }

func newRawIO(net.Conn) *rawIO { return nil }
