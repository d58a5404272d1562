package bridgecore

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/internal/statusmsg"
	"github.com/warrenipc/warren/status"
)

// WriteUnaryError writes se as the Connect protocol's JSON error, with HTTP
// status httpStatus, or the status for se's code if 0. header and trailer
// are reply metadata pairs.
func WriteUnaryError(w http.ResponseWriter, httpStatus int, se *status.Error, header, trailer []string) {
	if httpStatus == 0 {
		httpStatus = HTTPStatus(se.Code)
	}
	data, _ := json.Marshal(NewConnectError(se))
	h := w.Header()
	SetMetadataHeaders(h, header, "")
	SetMetadataHeaders(h, trailer, "Trailer-")
	h["Content-Type"] = CTJSON
	h["Content-Length"] = ContentLength(len(data))
	w.WriteHeader(httpStatus)
	w.Write(data)
}

// WritePlainError answers a request that is not a call in any of the
// protocols (a method other than POST or GET, a content type none of them
// uses) with a plain-text body: clients then map the HTTP status to a code
// (415 and 405 to unknown), as they do for any HTTP server.
func WritePlainError(w http.ResponseWriter, httpStatus int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(httpStatus)
	io.WriteString(w, msg+"\n")
}

// HTTPStatus returns the HTTP status with which the Connect protocol
// reports code in a unary call: 200 for OK, 400 for InvalidArgument,
// 404 for NotFound, and so on.
func HTTPStatus(code status.Code) int {
	switch code {
	case status.OK:
		return 200
	case status.Canceled:
		return 499
	case status.InvalidArgument, status.FailedPrecondition, status.OutOfRange:
		return 400
	case status.DeadlineExceeded:
		return 504
	case status.NotFound:
		return 404
	case status.AlreadyExists, status.Aborted:
		return 409
	case status.PermissionDenied:
		return 403
	case status.ResourceExhausted:
		return 429
	case status.Unimplemented:
		return 501
	case status.Unavailable:
		return 503
	case status.Unauthenticated:
		return 401
	}
	return 500 // Unknown, Internal, DataLoss and codes without a name
}

// ConnectError is the Connect protocol's error: the JSON body of a failed
// unary call and the "error" of an end-stream message.
type ConnectError struct {
	Code    string          `json:"code"`
	Message string          `json:"message,omitempty"`
	Details []connectDetail `json:"details,omitempty"`
}

// connectDetail is an error detail as Connect carries it: a protobuf Any,
// its type name and base64 value. A warren detail is opaque bytes, JSON by
// convention: see DetailAny; one that is JSON also goes as is in "debug",
// for people.
type connectDetail struct {
	Type  string          `json:"type"`
	Value string          `json:"value"`
	Debug json.RawMessage `json:"debug,omitempty"`
}

// NewConnectError returns se as the Connect protocol's error.
func NewConnectError(se *status.Error) *ConnectError {
	ce := &ConnectError{Code: se.Code.String(), Message: statusmsg.Bound(se.Message)}
	if se.Code > status.Unauthenticated {
		ce.Code = status.Unknown.String()
	}
	for _, d := range se.Details {
		ce.Details = append(ce.Details, newConnectDetail(d))
	}
	return ce
}

func newConnectDetail(d []byte) connectDetail {
	m := DetailAny(d)
	if a, ok := m.(*anypb.Any); ok {
		_, name, _ := strings.Cut(a.TypeUrl, "/")
		return connectDetail{Type: name, Value: base64.RawStdEncoding.EncodeToString(a.Value)}
	}
	b, _ := proto.Marshal(m)
	if _, ok := m.(*structpb.Value); ok {
		return connectDetail{Type: "google.protobuf.Value", Value: base64.RawStdEncoding.EncodeToString(b), Debug: d}
	}
	return connectDetail{Type: "google.protobuf.BytesValue", Value: base64.RawStdEncoding.EncodeToString(b)}
}

// DetailAny returns a warren error detail as a protobuf message to carry
// in an Any: a detail that is an encoded google.protobuf.Any as itself, one
// that is JSON as a google.protobuf.Value, any other as a
// google.protobuf.BytesValue.
func DetailAny(d []byte) proto.Message {
	if len(d) > 0 && d[0] == 0x0a { // field 1 (type_url), length-delimited
		var a anypb.Any
		if proto.Unmarshal(d, &a) == nil && strings.Contains(a.TypeUrl, "/") {
			return &a
		}
	}
	var v structpb.Value
	if json.Valid(d) && protojson.Unmarshal(d, &v) == nil {
		return &v
	}
	return wrapperspb.Bytes(d)
}
