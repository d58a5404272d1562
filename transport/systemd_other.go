//go:build !unix

package transport

import (
	"errors"
	"net"
)

func listenSystemd(Addr) (net.Listener, Addr, error) {
	return nil, Addr{}, errors.New("systemd socket activation needs a unix system")
}
