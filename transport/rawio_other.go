//go:build !linux

package transport

import "net"

// rawIO is used on Linux only (see rawio_linux.go): elsewhere newRawIO
// returns nil, and Conn never calls these.
type rawIO struct{}

func newRawIO(net.Conn) *rawIO { return nil }

func (*rawIO) Read([]byte) (int, error)                 { panic("transport: no raw I/O here") }
func (*rawIO) Write([]byte) (int, error)                { panic("transport: no raw I/O here") }
func (*rawIO) WriteBuffers(*net.Buffers) (int64, error) { panic("transport: no raw I/O here") }
