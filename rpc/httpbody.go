package rpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// httpBodyBudget bounds the request body bytes the HTTP bridge holds at
// once, over all connections; a body that would go over it is refused with
// ResourceExhausted. Bodies are read into buffers that grow as the data
// arrives, so a declared Content-Length costs nothing until it is sent.
const httpBodyBudget = 64 << 20

// bodyReadTimeout bounds the time to read a request body once its headers
// are in: a client sending a byte a second is cut off.
const bodyReadTimeout = 10 * time.Second

// bodyReadTimeoutNS, if set, replaces bodyReadTimeout (tests).
var bodyReadTimeoutNS atomic.Int64

func bodyDeadline() time.Duration {
	if v := bodyReadTimeoutNS.Load(); v > 0 {
		return time.Duration(v)
	}
	return bodyReadTimeout
}

// boundBridgeBody gives the body of a request the bridge serves the
// deadline of a Connect unary body (bodyDeadline) when the request is one
// message (a unary or server-streaming method, or a name no method has):
// a gRPC or gRPC-Web body that trickles in is cut off as a Connect one is.
// The deadline is lifted once the body is read whole. Client and bidi
// streams, and reflection (a bidi stream), are bounded by the call's own
// deadline instead.
func (s *Server) boundBridgeBody(w http.ResponseWriter, r *http.Request) {
	if hd, _ := s.lookupPath(r.URL.Path); hd != nil && hd.kind != kindUnary && hd.kind != kindServerStream ||
		hd == nil && strings.HasPrefix(r.URL.Path, "/grpc.reflection.") {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(bodyDeadline())) == nil {
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	}
}

// deadlineBody is a request body read under a deadline that is lifted at
// its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if err == io.EOF && !d.done {
		d.done = true
		d.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// bodyBytes counts the body bytes held by the readers of all servers.
var bodyBytes atomic.Int64

// readBodyBudgeted reads r's body (at most limit bytes) into a pooled
// buffer that grows as data arrives, within httpBodyBudget, and within
// bodyReadTimeout. held is the budget the buffer takes: give it back with
// bodyBytes.Add(-held) once the buffer is no longer used (it is 0 on
// error).
func readBodyBudgeted(w http.ResponseWriter, r *http.Request, limit uint32) (buf *pool.Buf, held int64, se *status.Error) {
	if r.ContentLength > int64(limit) {
		return nil, 0, status.Errorf(status.ResourceExhausted, "request body of %d bytes is over the limit of %d", r.ContentLength, limit)
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyDeadline()))
	buf, held, se = readBody(r, limit)
	if se == nil {
		rc.SetReadDeadline(time.Time{})
	} else {
		// The connection closes after the reply: let net/http read
		// nothing more of the body (it would wait for it).
		rc.SetReadDeadline(time.Now())
	}
	return buf, held, se
}

// growBudget raises what a body holds of httpBodyBudget to n bytes, if
// the budget allows.
func growBudget(held *int64, n int) bool {
	add := int64(n) - *held
	if bodyBytes.Add(add) > httpBodyBudget {
		bodyBytes.Add(-add)
		return false
	}
	*held = int64(n)
	return true
}

func bodyBudgetError() *status.Error {
	return status.New(status.ResourceExhausted, "the server is reading too many request bodies; try again")
}

func readBody(r *http.Request, limit uint32) (*pool.Buf, int64, *status.Error) {
	var held int64
	fail := func(buf *pool.Buf, se *status.Error) (*pool.Buf, int64, *status.Error) {
		pool.Put(buf)
		bodyBytes.Add(-held)
		return nil, 0, se
	}
	want := int(limit) + 1 // unknown length: read one past the limit to see it
	if r.ContentLength >= 0 {
		want = int(r.ContentLength)
	}
	size := min(want, 4<<10)
	if !growBudget(&held, size) {
		return nil, 0, bodyBudgetError()
	}
	buf := pool.Get(size)
	n := 0
	for {
		if n == len(buf.B) {
			if n >= want {
				break
			}
			bigger := min(2*n, want)
			if !growBudget(&held, bigger) {
				return fail(buf, bodyBudgetError())
			}
			b := pool.Get(bigger)
			copy(b.B, buf.B[:n])
			pool.Put(buf)
			buf = b
		}
		k, err := r.Body.Read(buf.B[n:])
		n += k
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(buf, bodyReadError(r, err))
		}
	}
	if r.ContentLength >= 0 && n < want {
		return fail(buf, &status.Error{Code: status.InvalidArgument, Message: "request body ended early"})
	}
	if n > int(limit) {
		return fail(buf, status.Errorf(status.ResourceExhausted, "request body of more than %d bytes is over the limit of %d", limit, limit))
	}
	buf.B = buf.B[:n]
	r.Body.Close()
	return buf, held, nil
}

// bodyReadError turns an error reading a request body into a status:
// malformed chunked encoding is the client's error (400), a body that
// does not arrive in time is DeadlineExceeded.
func bodyReadError(r *http.Request, err error) *status.Error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return &status.Error{Code: status.DeadlineExceeded, Message: "the request body did not arrive within " + bodyDeadline().String(), Cause: err}
	case strings.Contains(err.Error(), "chunk"):
		return &status.Error{Code: status.InvalidArgument, Message: "malformed chunked request body: " + err.Error(), Cause: err}
	}
	return bodyError(r, err)
}

// smuggleGuard is the connection the HTTP bridge reads requests from. It
// follows the framing of the requests as they pass and refuses, with a 400
// and the end of the connection, one that has both Content-Length and
// Transfer-Encoding (RFC 9112, section 6.1): net/http would take the
// chunked framing and serve what follows as another request, which a proxy
// in front that took the Content-Length would not have seen. After a
// request with Transfer-Encoding, or an upgrade, it stops looking: the
// bridge closes the connection after a chunked request, and an upgraded
// connection is no longer HTTP.
type smuggleGuard struct {
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

func (g *smuggleGuard) Read(b []byte) (int, error) {
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
func (g *smuggleGuard) scan(p []byte) bool {
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
func (g *smuggleGuard) NetConn() net.Conn { return g.Conn }

// Write writes to the connection, unless a request was refused: net/http's
// own answer to the request cut short is dropped.
func (g *smuggleGuard) Write(b []byte) (int, error) {
	if g.refused.Load() {
		return len(b), nil
	}
	return g.Conn.Write(b)
}

// CloseWrite closes the write side, which net/http uses to end a response
// cleanly, if the underlying connection can.
func (g *smuggleGuard) CloseWrite() error {
	if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
