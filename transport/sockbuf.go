package transport

import "net"

// unixSendBuffer is the send buffer size (SO_SNDBUF) that Dial and Accept
// ask for on unix-socket connections. A unix stream socket has no receive
// buffer of its own: the sender's buffer bounds what is in flight, and the
// kernel's default (208 KiB on Linux) is less than one large frame, so a
// writer of large messages would block, and wake the reader, several times
// per frame. The buffer is a bound, not an allocation: an idle connection
// holds no memory for it. The kernel doubles the value and caps it at
// net.core.wmem_max. TCP connections keep the kernel's automatic sizing.
const unixSendBuffer = 1 << 20

// tuneUnix sizes the send buffer of a unix-socket connection. A failure
// leaves the kernel's default, which is correct, only slower.
func tuneUnix(c net.Conn) {
	if u, ok := c.(*net.UnixConn); ok {
		_ = u.SetWriteBuffer(unixSendBuffer)
	}
}
