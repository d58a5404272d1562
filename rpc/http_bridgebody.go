package rpc

import (
	"net/http"
	"strings"

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
	httpbody.SetDeadline(w, r)
}
