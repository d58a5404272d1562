package grpcbridge

import (
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// gRPC-Web text: the gRPC-Web protocol with the body in base64
// (application/grpc-web-text, for clients that cannot read binary
// responses), which connect-go does not speak. The request is presented to
// connect-go's gRPC-Web handler as binary gRPC-Web, its body decoded as it
// is read (webTextReader), and the response is encoded as it is written
// (webTextWriter): every flush ends a base64 chunk, with its padding, so
// that each message reaches the client whole, as the gRPC-Web
// specification (PROTOCOL-WEB.md) asks of servers. Request bodies may
// likewise be padded chunks one after another.

const (
	ctGRPCWeb     = "application/grpc-web"
	ctGRPCWebText = "application/grpc-web-text"
)

// webText reports whether ct, a request's Content-Type, is gRPC-Web text,
// and returns the binary gRPC-Web type it stands for.
func webText(ct string) (string, bool) {
	rest, ok := cutPrefixFold(ct, ctGRPCWebText)
	if !ok || (rest != "" && rest[0] != '+' && rest[0] != ';') {
		return "", false
	}
	return ctGRPCWeb + rest, true
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

// serveWebText rewrites a gRPC-Web text request as binary gRPC-Web,
// serves it with next and encodes the response.
func serveWebText(w http.ResponseWriter, r *http.Request, binaryType string, next func(http.ResponseWriter, *http.Request)) {
	r.Header["Content-Type"] = []string{binaryType}
	r.Header.Del("Content-Length")
	r.ContentLength = -1
	r.Body = &webTextReader{r: r.Body, c: r.Body}
	tw := &webTextWriter{w: w}
	next(tw, r)
	tw.finish()
}

// errWebText is the error of a request body that is not base64.
var errWebText = connect.NewError(connect.CodeInvalidArgument, errors.New("the application/grpc-web-text body is not base64"))

// webTextReader decodes a base64 body made of padded chunks one after
// another (each a whole number of 4-character groups); line breaks are
// ignored.
type webTextReader struct {
	r   io.Reader
	c   io.Closer
	in  [512]byte
	grp [4]byte
	ng  int    // characters in grp
	out []byte // decoded, not yet read
	dec [384]byte
	err error
}

func (t *webTextReader) Read(p []byte) (int, error) {
	for len(t.out) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		n, err := t.r.Read(t.in[:])
		if derr := t.decode(t.in[:n]); derr != nil {
			t.err = derr
		} else if err == io.EOF && t.ng != 0 {
			t.err = errWebText
		} else if err != nil {
			t.err = err
		}
	}
	n := copy(p, t.out)
	t.out = t.out[n:]
	return n, nil
}

// decode decodes the groups completed by in into t.out.
func (t *webTextReader) decode(in []byte) error {
	out := t.dec[:0]
	for _, c := range in {
		if c == '\r' || c == '\n' {
			continue
		}
		t.grp[t.ng] = c
		t.ng++
		if t.ng < 4 {
			continue
		}
		t.ng = 0
		var b [3]byte
		n, err := base64.StdEncoding.Decode(b[:], t.grp[:])
		if err != nil {
			return errWebText
		}
		out = append(out, b[:n]...)
	}
	t.out = out
	return nil
}

func (t *webTextReader) Close() error { return t.c.Close() }

// webTextWriter encodes a gRPC-Web response in base64: whole 3-byte
// groups as they are written, the rest, padded, at each flush and at the
// end.
type webTextWriter struct {
	w           http.ResponseWriter
	wroteHeader bool
	pend        [2]byte
	np          int
	buf         [1024]byte
}

func (t *webTextWriter) Header() http.Header { return t.w.Header() }

func (t *webTextWriter) WriteHeader(code int) {
	if t.wroteHeader {
		return
	}
	t.wroteHeader = true
	h := t.w.Header()
	if rest, ok := cutPrefixFold(h.Get("Content-Type"), ctGRPCWeb); ok {
		h["Content-Type"] = []string{ctGRPCWebText + rest}
	}
	h.Del("Content-Length")
	t.w.WriteHeader(code)
}

func (t *webTextWriter) Write(p []byte) (int, error) {
	if !t.wroteHeader {
		t.WriteHeader(http.StatusOK)
	}
	n := len(p)
	for len(p) > 0 {
		// Up to len(buf)/4*3 bytes a round, pending ones first.
		var src [768]byte
		k := copy(src[:], t.pend[:t.np])
		m := copy(src[k:], p)
		p = p[m:]
		k += m
		whole := k / 3 * 3
		enc := t.buf[:base64.StdEncoding.EncodedLen(whole)]
		base64.StdEncoding.Encode(enc, src[:whole])
		t.np = copy(t.pend[:], src[whole:k])
		if _, err := t.w.Write(enc); err != nil {
			return n - len(p), err
		}
	}
	return n, nil
}

// flushPending writes the pending bytes, padded.
func (t *webTextWriter) flushPending() {
	if t.np == 0 {
		return
	}
	enc := t.buf[:4]
	base64.StdEncoding.Encode(enc, t.pend[:t.np])
	t.np = 0
	t.w.Write(enc)
}

func (t *webTextWriter) Flush() {
	if !t.wroteHeader {
		t.WriteHeader(http.StatusOK)
	}
	t.flushPending()
	if f, ok := t.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the connection's writer.
func (t *webTextWriter) Unwrap() http.ResponseWriter { return t.w }

func (t *webTextWriter) finish() {
	if t.wroteHeader {
		t.flushPending()
	}
}
