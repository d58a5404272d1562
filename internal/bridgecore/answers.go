package bridgecore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/warrenipc/warren/internal/statusmsg"
	"github.com/warrenipc/warren/status"
)

// NoBridge answers, in its own protocol, a request that only the bridge
// serves (gRPC, gRPC-Web, Connect streaming, Connect GET) on a server
// without one.
func NoBridge(w http.ResponseWriter, r *http.Request) {
	const turnOn = "turn it on with rpc.ServerOptions{Bridge: grpcbridge.New()}"
	ct := r.Header.Get("Content-Type")
	if IsGRPC(ct) {
		WriteProtocolError(w, r, 0, status.New(status.Unimplemented, "this server does not serve gRPC or gRPC-Web: "+turnOn))
		return
	}
	if enc, ok := ParseContentType(ct); ok && enc.Stream {
		WriteProtocolError(w, r, 0, status.New(status.Unimplemented, "this server does not serve Connect streaming: "+turnOn))
		return
	}
	// Connect GET.
	w.Header()["Allow"] = HdrAllowPost
	WriteUnaryError(w, http.StatusMethodNotAllowed, status.Errorf(status.Unimplemented,
		"GET %s: this server does not serve Connect GET: %s; or call it with POST", r.URL.Path, turnOn), nil, nil)
}

// WriteProtocolError answers a request with se in the request's protocol:
// a gRPC or gRPC-Web request gets a trailers-only reply (HTTP 200, the
// status in grpc-status and grpc-message), a Connect streaming request an
// end-of-stream message carrying the error, any other request Connect's
// unary JSON error with HTTP status httpStatus (0: the status for se's
// code).
func WriteProtocolError(w http.ResponseWriter, r *http.Request, httpStatus int, se *status.Error) {
	ct := r.Header.Get("Content-Type")
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	if IsGRPC(ct) {
		h := w.Header()
		h["Content-Type"] = []string{mt}
		h["Grpc-Status"] = []string{strconv.Itoa(int(se.Code))}
		h["Grpc-Message"] = []string{grpcPercentEncode(statusmsg.Bound(se.Message))}
		w.WriteHeader(http.StatusOK)
		return
	}
	if enc, ok := ParseContentType(ct); ok && enc.Stream {
		end, _ := json.Marshal(struct {
			Error *ConnectError `json:"error"`
		}{NewConnectError(se)})
		body := binary.BigEndian.AppendUint32([]byte{2}, uint32(len(end)))
		h := w.Header()
		h["Content-Type"] = []string{mt}
		h["Content-Length"] = ContentLength(len(body) + len(end))
		w.WriteHeader(http.StatusOK)
		w.Write(append(body, end...))
		return
	}
	WriteUnaryError(w, httpStatus, se, nil, nil)
}

// UnsupportedType answers 415 to a request whose Content-Type no protocol
// served takes.
func UnsupportedType(w http.ResponseWriter, ct string, bridged bool) {
	accept, msg := "application/json, application/proto", "use application/json or application/proto"
	if bridged {
		accept += ", application/connect+json, application/connect+proto, application/grpc, application/grpc-web"
		msg += ", or application/connect+json or application/connect+proto for streaming methods"
	} else {
		msg += " (gRPC, gRPC-Web and Connect streaming need rpc.ServerOptions{Bridge: grpcbridge.New()})"
	}
	w.Header()["Accept-Post"] = []string{accept}
	WritePlainError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Type %q: %s", ct, msg))
}

// grpcPercentEncode encodes a grpc-message value: bytes outside printable
// ASCII, and '%', as %XX.
func grpcPercentEncode(s string) string {
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		if c < ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
