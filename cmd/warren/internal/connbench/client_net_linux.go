package connbench

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/transport"
)

// Networks the benchmark runs over.
const (
	netUnix = "unix"
	netTCP  = "tcp"
	netWS   = "ws"
)

// target is where a tiny client connects: a socket file (unix), or an IPv4
// address and port (tcp, ws), from source addresses from src on if it is
// valid: connection i from src + i/perSource.
type target struct {
	network string
	path    string         // unix: the socket file
	addr    netip.AddrPort // tcp, ws
	src     netip.Addr     // tcp, ws: the first source address to bind, if valid
	wsPath  string         // ws: the HTTP path
}

// parseTarget parses a warren address (unix, tcp or ws, with an IPv4
// address) and the source address to connect from ("" for none).
func parseTarget(addr, src string) (target, error) {
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return target{}, err
	}
	t := target{network: a.Scheme}
	switch a.Scheme {
	case transport.SchemeUnix:
		t.path = a.Address
		return t, nil
	case transport.SchemeTCP, transport.SchemeWS:
	default:
		return target{}, fmt.Errorf("%s: the benchmark speaks unix, tcp and ws", addr)
	}
	if t.addr, err = netip.ParseAddrPort(a.Address); err != nil || !t.addr.Addr().Is4() {
		return target{}, fmt.Errorf("%s: want an IPv4 address and a port", addr)
	}
	t.wsPath = a.Path
	if src != "" {
		if t.src, err = netip.ParseAddr(src); err != nil || !t.src.Is4() {
			return target{}, fmt.Errorf("source address %q: want an IPv4 address", src)
		}
	}
	return t, nil
}

// perSource is how many connections a client makes from one source
// address to its server. connect() tries the ephemeral ports of one parity
// first (it leaves the others to bind()): half the default range
// (32768-60999), 14,116 ports. Past that, every connect scans all of them
// before it tries the other half, and connecting slows down a
// hundredfold.
const perSource = 12000

// nthAddr returns a + n.
func nthAddr(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])+uint32(n))
	return netip.AddrFrom4(b)
}

// connect opens blocking connection i to t. A tcp or ws connection binds
// its source address (src + i/perSource) first with
// IP_BIND_ADDRESS_NO_PORT, so that the kernel picks the source port at
// connect time, for this destination only: each (source address,
// destination) pair has the whole ephemeral port range.
func (t target) connect(i int) (int, error) {
	var sa unix.Sockaddr
	domain := unix.AF_UNIX
	if t.network == netUnix {
		sa = &unix.SockaddrUnix{Name: t.path}
	} else {
		domain = unix.AF_INET
		sa = &unix.SockaddrInet4{Addr: t.addr.Addr().As4(), Port: int(t.addr.Port())}
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if domain == unix.AF_INET {
		err = os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1))
		if err == nil && t.src.IsValid() {
			err = os.NewSyscallError("setsockopt", unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1))
			if err == nil {
				err = os.NewSyscallError("bind", unix.Bind(fd, &unix.SockaddrInet4{Addr: nthAddr(t.src, i/perSource).As4()}))
			}
		}
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	for {
		// Blocking: waits while the server's backlog is full. (No timeout
		// yet, so an interrupted connect restarts by itself.)
		if err = unix.Connect(fd, sa); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("connect", err)
	}
	return fd, nil
}

// wsKey returns the Sec-WebSocket-Key of connection i: 16 bytes made of the
// client's seed and i, so that it need not be kept until the response.
func (c *tinyClient) wsKey(i int) string {
	var k [16]byte
	binary.BigEndian.PutUint64(k[:], c.seed)
	binary.BigEndian.PutUint64(k[8:], uint64(i))
	return base64.StdEncoding.EncodeToString(k[:])
}

// wsAccept is the Sec-WebSocket-Accept a server answers key with (RFC 6455).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// appendUpgrade appends the opening handshake's request to b.
func appendUpgrade(b []byte, t target, key string) []byte {
	return fmt.Appendf(b, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		t.wsPath, t.addr, key)
}

// maxResponse bounds the handshake response the client reads.
const maxResponse = 4096

// readUpgrade reads the handshake response on fd into c.buf and checks it:
// 101 Switching Protocols, with the Sec-WebSocket-Accept of key. The bytes
// that follow it are frames: it decodes them in place, and returns the
// payload's length (at the start of c.buf) and the state of the frame
// under way.
func (c *tinyClient) readUpgrade(fd int32, key string) (int, wsState, error) {
	var st wsState
	n := 0
	for {
		if end := bytes.Index(c.buf[:n], []byte("\r\n\r\n")); end >= 0 {
			if err := checkUpgrade(string(c.buf[:end]), key); err != nil {
				return 0, st, err
			}
			out, err := st.unframe(c.buf[end+4 : n])
			if err != nil {
				return 0, st, err
			}
			return copy(c.buf, out), st, nil
		}
		if n >= maxResponse {
			return 0, st, fmt.Errorf("no end of the response in its first %d bytes", n)
		}
		k, err := readSome(fd, c.buf[n:maxResponse+256])
		if err != nil {
			return 0, st, err
		}
		n += k
	}
}

// checkUpgrade checks the head of a handshake response (without its final
// empty line).
func checkUpgrade(head, key string) error {
	lines := strings.Split(head, "\r\n")
	if !strings.HasPrefix(lines[0], "HTTP/1.1 101 ") {
		return fmt.Errorf("server answered %q", lines[0])
	}
	want := wsAccept(key)
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Sec-WebSocket-Accept") {
			if strings.TrimSpace(v) != want {
				return fmt.Errorf("Sec-WebSocket-Accept %q, want %q", strings.TrimSpace(v), want)
			}
			return nil
		}
	}
	return errors.New("response without Sec-WebSocket-Accept")
}

// appendMasked appends p to b as one masked binary WebSocket frame, as a
// client sends it (RFC 6455 5.3), with a random mask.
func appendMasked(b, p []byte) []byte {
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x82, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x82, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x82, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var mask [4]byte
	binary.LittleEndian.PutUint32(mask[:], rand.Uint32())
	b = append(b, mask[:]...)
	start := len(b)
	b = append(b, p...)
	for i := range b[start:] {
		b[start+i] ^= mask[i&3]
	}
	return b
}

// wsState is the state of the server's WebSocket frames on one connection
// between reads: the payload left of the frame under way, or the start of
// the next frame's header.
type wsState struct {
	remain uint64
	hdr    [13]byte
	nhdr   uint8
}

// unframe decodes server frames (unmasked, binary or continuation) from b
// in place: it returns their payload, at the start of b, and keeps the
// start of a header that b ends in. Control frames fail: the server sends
// none but a close frame, which ends the connection.
func (st *wsState) unframe(b []byte) ([]byte, error) {
	out := b[:0]
	st.nhdr = 0
	for len(b) > 0 {
		if st.remain > 0 {
			k := int(min(st.remain, uint64(len(b))))
			out = append(out, b[:k]...) // out never passes b: a safe move
			b, st.remain = b[k:], st.remain-uint64(k)
			continue
		}
		if len(b) < 2 {
			break
		}
		hl, n := 2, uint64(b[1]&0x7f)
		switch n {
		case 126:
			hl = 4
		case 127:
			hl = 10
		}
		if len(b) < hl {
			break
		}
		switch n {
		case 126:
			n = uint64(binary.BigEndian.Uint16(b[2:]))
		case 127:
			n = binary.BigEndian.Uint64(b[2:])
		}
		switch op := b[0] & 0x0f; {
		case b[1]&0x80 != 0:
			return nil, errors.New("masked frame from the server")
		case b[0]&0x70 != 0:
			return nil, fmt.Errorf("frame with reserved bits %#x", b[0]&0x70)
		case op == 0x8:
			code := 0
			if n >= 2 && len(b) >= hl+2 {
				code = int(binary.BigEndian.Uint16(b[hl:]))
			}
			return nil, fmt.Errorf("server sent a close frame (code %d)", code)
		case op != 0x2 && op != 0x0:
			return nil, fmt.Errorf("unexpected frame opcode %#x", op)
		}
		b, st.remain = b[hl:], n
	}
	st.nhdr = uint8(copy(st.hdr[:], b))
	return out, nil
}
