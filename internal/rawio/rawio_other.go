//go:build !linux

package rawio

import "net"

// IO is used on Linux only (see rawio_linux.go): elsewhere New
// returns nil, and Conn never calls these.
type IO struct{}

func New(net.Conn) *IO { return nil }

func (*IO) Read([]byte) (int, error)                 { panic("rawio: no raw I/O here") }
func (*IO) Write([]byte) (int, error)                { panic("rawio: no raw I/O here") }
func (*IO) WriteBuffers(*net.Buffers) (int64, error) { panic("rawio: no raw I/O here") }
