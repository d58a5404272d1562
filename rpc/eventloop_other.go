//go:build !linux

package rpc

import "net"

// serveEventLoop reports that the event loop is not available: Serve uses
// the goroutine mode.
func (s *Server) serveEventLoop(net.Listener) (handled bool, err error) { return false, nil }
