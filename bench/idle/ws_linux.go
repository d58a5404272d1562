//go:build linux

package idle

import (
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/wire"
)

// The client side of a WebSocket connection, on a bare socket as for the
// other networks: the opening handshake, one binary message each way, and
// nothing kept but the descriptor.

// wsKey is the Sec-WebSocket-Key of every opening handshake. RFC 6455 asks
// for a random nonce, which a server has no way to check; a fixed one
// spares the client the work.
const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

// wsAcceptKey is the Sec-WebSocket-Accept the server must answer wsKey with.
var wsAcceptKey = func() string {
	h := sha1.Sum([]byte(wsKey + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}()

// wsMask masks the client's frames (RFC 6455, 5.3: a client masks every
// frame; the key's value is the client's choice).
var wsMask = [4]byte{0x5a, 0x17, 0xc3, 0x8e}

// wsClientMessage is the client's first message: the warren preface in one
// masked binary frame. The servers other than warren echo it.
var wsClientMessage = wsClientFrame(2, clientPreface)

// wsClientFrame returns a masked frame with opcode op and payload p (at most
// 125 bytes).
func wsClientFrame(op byte, p []byte) []byte {
	if len(p) > 125 {
		panic("idle: WebSocket payload too long")
	}
	b := []byte{0x80 | op, 0x80 | byte(len(p))}
	b = append(b, wsMask[:]...)
	for i, c := range p {
		b = append(b, c^wsMask[i&3])
	}
	return b
}

// wsRequest returns the opening handshake request for the server at host.
func wsRequest(host string) []byte {
	return []byte("GET " + WSPath + " HTTP/1.1\r\n" +
		"Host: " + host + "\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + wsKey + "\r\n" +
		"Sec-WebSocket-Version: 13\r\n\r\n")
}

// connectWS connects a bare socket to the WebSocket server at host and
// sends the opening handshake request; finishWS completes the connection.
func connectWS(sa unix.Sockaddr, family int, host string) (int, error) {
	return connectSend(sa, family, wsRequest(host))
}

// finishWS reads the server's answer to the opening handshake request
// (101 Switching Protocols, with the right Sec-WebSocket-Accept), sends
// wsClientMessage, and reads the server's messages up to either the
// echo of it (echo) or warren's preface.
func finishWS(fd int, echo bool) error {
	var buf [4096]byte
	n := 0
	read := func() error {
		if n == len(buf) {
			return errors.New("websocket: the server's answer is too long")
		}
		for {
			k, err := unix.Read(fd, buf[n:])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return os.NewSyscallError("read", err)
			}
			if k == 0 {
				return io.ErrUnexpectedEOF
			}
			n += k
			return nil
		}
	}
	end := -1
	for end < 0 {
		if err := read(); err != nil {
			return fmt.Errorf("websocket handshake: %w", err)
		}
		end = bytes.Index(buf[:n], []byte("\r\n\r\n"))
	}
	if err := checkWSResponse(buf[:end]); err != nil {
		return err
	}
	n = copy(buf[:], buf[end+4:n])
	if err := writeAll(fd, wsClientMessage); err != nil {
		return os.NewSyscallError("write", err)
	}
	var payload []byte // the binary messages' payloads, as a stream
	for {
		for {
			op, p, rest, ok, err := parseWSFrame(buf[:n])
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			switch op {
			case 0, 1, 2: // continuation, text, binary
				payload = append(payload, p...)
			case 8:
				return fmt.Errorf("websocket: the server closed the connection (close frame % x)", p)
			}
			n = copy(buf[:], rest)
		}
		if echo && len(payload) >= len(clientPreface) {
			if !bytes.Equal(payload, clientPreface) {
				return fmt.Errorf("websocket: the server echoed % x, not % x", payload, clientPreface)
			}
			return nil
		}
		if !echo {
			_, _, ok, err := wire.ParsePreface(payload)
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
		if err := read(); err != nil {
			return fmt.Errorf("websocket: %w", err)
		}
	}
}

// checkWSResponse checks the head of the server's answer to the opening
// handshake request (without its final blank line).
func checkWSResponse(head []byte) error {
	lines := bytes.Split(head, []byte("\r\n"))
	if !bytes.HasPrefix(lines[0], []byte("HTTP/1.1 101 ")) {
		return fmt.Errorf("websocket handshake: the server answered %q", lines[0])
	}
	for _, l := range lines[1:] {
		name, value, ok := bytes.Cut(l, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Sec-WebSocket-Accept")) {
			if string(bytes.TrimSpace(value)) != wsAcceptKey {
				return fmt.Errorf("websocket handshake: Sec-WebSocket-Accept %q, want %q", value, wsAcceptKey)
			}
			return nil
		}
	}
	return errors.New("websocket handshake: no Sec-WebSocket-Accept in the server's answer")
}

// parseWSFrame parses the server frame at the start of b: its opcode, its
// payload and the bytes after it; ok is false if b holds less than a frame.
func parseWSFrame(b []byte) (op byte, payload, rest []byte, ok bool, err error) {
	if len(b) < 2 {
		return 0, nil, b, false, nil
	}
	if b[1]&0x80 != 0 {
		return 0, nil, b, false, errors.New("websocket: masked frame from the server")
	}
	op = b[0] & 0x0f
	size, h := uint64(b[1]&0x7f), 2
	switch size {
	case 126:
		if len(b) < 4 {
			return 0, nil, b, false, nil
		}
		size, h = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return 0, nil, b, false, nil
		}
		size, h = binary.BigEndian.Uint64(b[2:]), 10
	}
	if size > 2048 {
		return 0, nil, b, false, fmt.Errorf("websocket: a %d-byte frame from the server", size)
	}
	if uint64(len(b)-h) < size {
		return 0, nil, b, false, nil
	}
	end := h + int(size)
	return op, b[h:end], b[end:], true, nil
}
