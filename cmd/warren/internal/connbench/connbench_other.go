//go:build !linux

package connbench

import (
	"errors"
	"io"
)

func mainOS([]string, io.Writer, io.Writer) error {
	return errors.New("warren bench conns runs on Linux only (it uses epoll, /proc and raw unix sockets)")
}
