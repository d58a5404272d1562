package rpc

import (
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/warrenipc/warren/internal/httpbody"
)

// boundBridgeBody gives the body of a request the bridge serves the
// deadline of a Connect unary body (httpbody.Deadline) when the request is one
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
	if rc.SetReadDeadline(time.Now().Add(httpbody.Deadline())) == nil {
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
