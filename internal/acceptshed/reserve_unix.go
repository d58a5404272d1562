//go:build unix

package acceptshed

import "syscall"

func openReserve() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

func closeReserve(fd int) { syscall.Close(fd) }

// AcceptClose accepts one pending connection on the non-blocking
// listening socket lfd, if there is one, and closes it.
func AcceptClose(lfd int) {
	if fd, _, err := syscall.Accept(lfd); err == nil {
		syscall.Close(fd)
	}
}
