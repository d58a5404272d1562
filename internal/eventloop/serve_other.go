//go:build !linux

package eventloop

import "net"

// Serve reports that the event loop is not available: the server uses the
// goroutine mode.
func Serve(Core, net.Listener, *Options) (handled bool, err error) { return false, nil }
