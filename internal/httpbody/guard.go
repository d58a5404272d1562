package httpbody

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Guard is the connection the HTTP bridge reads requests from. It
// follows the framing of the requests as they pass and refuses, with a 400
// and the end of the connection, one that has both Content-Length and
// Transfer-Encoding (RFC 9112, section 6.1): net/http would take the
// chunked framing and serve what follows as another request, which a proxy
// in front that took the Content-Length would not have seen. After a
// request with Transfer-Encoding, or an upgrade, it stops looking: the
// bridge closes the connection after a chunked request, and an upgraded
// connection is no longer HTTP.
type Guard struct {
	net.Conn
	state   int   // guardHeaders, guardBody or guardOff
	skip    int64 // body bytes still to pass, in guardBody
	hdr     []byte
	refused atomic.Bool
}

const (
	guardHeaders = iota
	guardBody
	guardOff
	maxGuardHeader = 1 << 20 // past it, net/http refuses the headers itself
)

func (g *Guard) Read(b []byte) (int, error) {
	if g.refused.Load() {
		return 0, io.EOF
	}
	n, err := g.Conn.Read(b)
	if g.state == guardOff || n == 0 {
		return n, err
	}
	if !g.scan(b[:n]) {
		g.refused.Store(true)
		msg := `{"code":"invalid_argument","message":"a request with both Content-Length and Transfer-Encoding is refused (RFC 9112, section 6.1)"}`
		g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(g.Conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "+
			strconv.Itoa(len(msg))+"\r\n\r\n"+msg)
		return 0, io.EOF
	}
	return n, err
}

// scan follows the framing through p; it reports false for a request to
// refuse.
func (g *Guard) scan(p []byte) bool {
	for len(p) > 0 && g.state != guardOff {
		if g.state == guardBody {
			k := int(min(g.skip, int64(len(p))))
			g.skip -= int64(k)
			p = p[k:]
			if g.skip == 0 {
				g.state = guardHeaders
			}
			continue
		}
		start := len(g.hdr)
		g.hdr = append(g.hdr, p...)
		end := bytes.Index(g.hdr, crlfcrlf)
		if end < 0 {
			if len(g.hdr) > maxGuardHeader {
				g.state, g.hdr = guardOff, nil
			}
			return true
		}
		end += 4
		used := end - start // of p
		block := g.hdr[:end]
		cl, te, up := int64(-1), false, false
		for rest := block; len(rest) > 0; {
			line := rest
			if i := bytes.Index(rest, crlf); i >= 0 {
				line, rest = rest[:i], rest[i+2:]
			} else {
				rest = nil
			}
			name, value, ok := bytes.Cut(line, colon)
			if !ok {
				continue
			}
			name = bytes.TrimSpace(name)
			switch {
			case bytes.EqualFold(name, hdrContentLength):
				cl = parseContentLength(bytes.TrimSpace(value))
			case bytes.EqualFold(name, hdrTransferEncoding):
				te = true
			case bytes.EqualFold(name, hdrUpgrade):
				up = true
			}
		}
		g.hdr = g.hdr[:0]
		switch {
		case te && cl >= 0:
			return false
		case te || up:
			g.state, g.hdr = guardOff, nil
		case cl > 0:
			g.state, g.skip = guardBody, cl
		}
		p = p[used:]
	}
	return true
}

var (
	crlf                = []byte("\r\n")
	crlfcrlf            = []byte("\r\n\r\n")
	colon               = []byte(":")
	hdrContentLength    = []byte("content-length")
	hdrTransferEncoding = []byte("transfer-encoding")
	hdrUpgrade          = []byte("upgrade")
)

// parseContentLength reads a Content-Length value: 0 for one that is not
// a number (net/http refuses it).
func parseContentLength(v []byte) int64 {
	if len(v) == 0 || len(v) > 18 {
		return 0
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// NetConn returns the underlying connection.
func (g *Guard) NetConn() net.Conn { return g.Conn }

// Write writes to the connection, unless a request was refused: net/http's
// own answer to the request cut short is dropped.
func (g *Guard) Write(b []byte) (int, error) {
	if g.refused.Load() {
		return len(b), nil
	}
	return g.Conn.Write(b)
}

// CloseWrite closes the write side, which net/http uses to end a response
// cleanly, if the underlying connection can.
func (g *Guard) CloseWrite() error {
	if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
