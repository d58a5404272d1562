package rpc

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"net/http"
	"sync"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/callhook"
	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// Unary calls in the Connect protocol, over HTTP/1.1 and HTTP/2, with or
// without a Bridge: POST /Service/Method (or /Service.Method), the request
// message as the body (identity or gzip, Content-Encoding), the reply as
// the body of a 200, gzipped from bridgecore.CompressMinBytes when the
// client accepts gzip (Accept-Encoding), an error as Connect's JSON error
// with the HTTP status for its code. Connect-Timeout-Ms is read as the
// protocol says: 1 to 10 digits; 0 is a deadline already passed.

// call serves a unary call of hd in the Connect protocol, its request
// encoded as enc. body, if set, is the request message instead of the
// request's body.
func (h *httpConn) call(w http.ResponseWriter, r *http.Request, hd *handler, enc bridgecore.Encoding, body []byte) {
	s := h.srv
	fail := func(se *status.Error) { bridgecore.WriteUnaryError(w, 0, se, nil, nil) }
	if isClosed(s.closed) && r.ProtoMajor == 1 {
		w.Header()["Connection"] = bridgecore.HdrClose // served, as in Admit, then closed
	}
	if v := r.Header["Connect-Protocol-Version"]; len(v) > 0 && v[0] != "1" {
		fail(status.Errorf(status.InvalidArgument, "Connect-Protocol-Version %q is not supported (want 1)", v[0]))
		return
	}
	gz := false
	if ce := r.Header.Get("Content-Encoding"); !bridgecore.Identity(ce) {
		if !equalFold(ce, "gzip") {
			w.Header()["Accept-Encoding"] = bridgecore.HdrGzip
			fail(status.Errorf(status.Unimplemented, "unknown compression %q: supported encodings are gzip", ce))
			return
		}
		gz = true
	}
	timeout, hasTimeout, err := bridgecore.ParseTimeout(r.Header["Connect-Timeout-Ms"])
	if err != nil {
		fail(status.Errorf(status.InvalidArgument, "Connect-Timeout-Ms: %v", err))
		return
	}
	if hd.kind != kindUnary {
		bridgecore.WriteUnaryError(w, http.StatusUnsupportedMediaType, status.Errorf(status.InvalidArgument,
			"%s is a %s method: call it with Content-Type application/connect+json or application/connect+proto and enveloped messages", hd.name, hd.kind), nil, nil)
		return
	}
	if hasTimeout && timeout == 0 {
		fail(status.New(status.DeadlineExceeded, "the deadline (Connect-Timeout-Ms: 0) has passed"))
		return
	}
	cd, code, msg := h.sc.admit(hd, enc.Codec)
	if code != status.OK {
		fail(status.New(code, msg))
		return
	}
	c := &serverCall{conn: h.sc, h: hd, codec: cd, parent: r.Context(), proto: callhook.Connect}
	if hasTimeout {
		c.deadline = time.Now().Add(timeout)
	}
	c.md = appendRequestMetadata(r.Header)
	c.state.Store(callStarted)
	h.unary(w, r, c, enc, body, gz)
}

// maxMessage is the largest request message the server accepts.
func (s *Server) maxMessage() uint32 { return s.opts.Settings.WithDefaults().MaxMessageSize }

// unary runs an admitted unary call and writes its reply. gz: the request
// body is gzipped.
func (h *httpConn) unary(w http.ResponseWriter, r *http.Request, c *serverCall, enc bridgecore.Encoding, body []byte, gz bool) {
	s := h.srv
	var in *pool.Buf
	req := body
	var se *status.Error
	unread := false // the body was not read whole
	if req == nil {
		var held int64
		in, held, se = httpbody.Read(w, r, s.maxMessage())
		defer httpbody.Release(held) // after pool.Put(in) below
		unread = se != nil
		if se == nil && gz {
			var plain *pool.Buf
			plain, se = httpbody.Gunzip(in.B, s.maxMessage())
			pool.Put(in)
			in = plain
		}
		if in != nil {
			req = in.B
		}
		if len(req) == 0 && enc.Codec == codec.IDJSON {
			req = bridgecore.EmptyJSON // an empty body is an empty message, as in protobuf
		}
	}
	var out []byte
	var scratch *pool.Buf
	if se == nil {
		scratch = pool.Get(512)
		var herr error
		out, herr = c.invoke(req, scratch.B[:0])
		se = status.FromError(herr)
	}
	c.mdMu.Lock()
	header, trailer := c.header.pairs(), c.trailer.pairs()
	c.mdMu.Unlock()
	// The call stops counting before its reply can reach the client, as
	// a warren call does (mux.Config.OnEnd), so that a client that calls
	// again the moment it has the reply, on this connection or another,
	// is not refused within the limits.
	c.replyHTTP()
	defer c.repliedHTTP() // even if writing panicked
	hdr := w.Header()
	if r.ProtoMajor == 1 && (unread || isClosed(s.closed)) {
		// The body was left unread, or the server is shutting down: no
		// keep-alive.
		hdr["Connection"] = bridgecore.HdrClose
	}
	if se != nil {
		bridgecore.WriteUnaryError(w, 0, se, header, trailer)
	} else {
		bridgecore.SetMetadataHeaders(hdr, header, "")
		bridgecore.SetMetadataHeaders(hdr, trailer, "Trailer-")
		hdr["Content-Type"] = enc.ContentType()
		var zb *bytes.Buffer
		if len(out) >= bridgecore.CompressMinBytes && (gz || bridgecore.AcceptsGzip(r.Header.Get("Accept-Encoding"))) {
			if zb = gzipReply(out); zb != nil {
				out = zb.Bytes()
				hdr["Content-Encoding"] = bridgecore.HdrGzip
			}
		}
		hdr["Content-Length"] = bridgecore.ContentLength(len(out))
		w.WriteHeader(http.StatusOK)
		w.Write(out)
		if zb != nil {
			zipBufs.Put(zb)
		}
	}
	w.(http.Flusher).Flush()
	c.cancel(context.Canceled)
	pool.Put(in) // after the reply: a raw reply may alias the request
	pool.Put(scratch)
}

var (
	zipWriters = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression); return w }}
	zipBufs    = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// gzipReply returns out gzipped, in a buffer of zipBufs; nil if it did
// not compress.
func gzipReply(out []byte) *bytes.Buffer {
	zw := zipWriters.Get().(*gzip.Writer)
	defer zipWriters.Put(zw)
	b := zipBufs.Get().(*bytes.Buffer)
	b.Reset()
	zw.Reset(b)
	if _, err := zw.Write(out); err != nil || zw.Close() != nil {
		zipBufs.Put(b)
		return nil
	}
	return b
}

func equalFold(a, b string) bool { return len(a) == len(b) && bytes.EqualFold([]byte(a), []byte(b)) }

// appendRequestMetadata returns the metadata block of a request's headers,
// keys in lower case (as warren metadata is by convention); nil for none.
func appendRequestMetadata(h http.Header) []byte {
	n, size := 0, 0
	for k, vs := range h {
		if bridgecore.Forwarded(k) {
			for _, v := range vs {
				n++
				size += 2*binary.MaxVarintLen32 + len(k) + len(v)
			}
		}
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, binary.MaxVarintLen32+size)
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		if !bridgecore.Forwarded(k) {
			continue
		}
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(k)))
			for i := range len(k) {
				c := k[i]
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				b = append(b, c)
			}
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}
