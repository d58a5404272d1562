//go:build !unix

package acceptshed

func openReserve() int    { return -1 }
func closeReserve(fd int) {}

// AcceptClose does nothing on this platform.
func AcceptClose(lfd int) {}
