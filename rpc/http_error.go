package rpc

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/status"
)

// writeUnaryError writes se as Connect's JSON error, with HTTP status
// httpStatus, or the status for se's code if 0. header and trailer are
// reply metadata pairs.
func writeUnaryError(w http.ResponseWriter, httpStatus int, se *status.Error, header, trailer []string) {
	if httpStatus == 0 {
		httpStatus = connectHTTPStatus(se.Code)
	}
	data, _ := json.Marshal(newConnectError(se))
	h := w.Header()
	setMetadataHeaders(h, header, "")
	setMetadataHeaders(h, trailer, "Trailer-")
	h["Content-Type"] = ctJSON
	h["Content-Length"] = contentLength(len(data))
	w.WriteHeader(httpStatus)
	w.Write(data)
}

// connectHTTPStatus returns the HTTP status with which the Connect protocol
// reports code in a unary call: 200 for OK, 400 for InvalidArgument,
// 404 for NotFound, and so on.
func connectHTTPStatus(code status.Code) int {
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

// connectError is the Connect protocol's error: the JSON body of a failed
// unary call and the "error" of an end-stream message.
type connectError struct {
	Code    string          `json:"code"`
	Message string          `json:"message,omitempty"`
	Details []connectDetail `json:"details,omitempty"`
}

// connectDetail is an error detail as Connect carries it: a protobuf Any,
// its type name and base64 value. A warren detail is opaque bytes, JSON by
// convention: one that is an encoded google.protobuf.Any goes as that Any,
// one that is JSON as a google.protobuf.Value (and as is in "debug", for
// people), any other as a google.protobuf.BytesValue.
type connectDetail struct {
	Type  string          `json:"type"`
	Value string          `json:"value"`
	Debug json.RawMessage `json:"debug,omitempty"`
}

func newConnectError(se *status.Error) *connectError {
	ce := &connectError{Code: se.Code.String(), Message: se.Message}
	if se.Code > status.Unauthenticated {
		ce.Code = status.Unknown.String()
	}
	for _, d := range se.Details {
		ce.Details = append(ce.Details, newConnectDetail(d))
	}
	return ce
}

func newConnectDetail(d []byte) connectDetail {
	if a, ok := connectDetailOf(d).(*anypb.Any); ok {
		_, name, _ := strings.Cut(a.TypeUrl, "/")
		return connectDetail{Type: name, Value: base64.RawStdEncoding.EncodeToString(a.Value)}
	}
	if json.Valid(d) {
		var v structpb.Value
		if protojson.Unmarshal(d, &v) == nil {
			if b, err := proto.Marshal(&v); err == nil {
				return connectDetail{Type: "google.protobuf.Value", Value: base64.RawStdEncoding.EncodeToString(b), Debug: d}
			}
		}
	}
	b, _ := proto.Marshal(wrapperspb.Bytes(d))
	return connectDetail{Type: "google.protobuf.BytesValue", Value: base64.RawStdEncoding.EncodeToString(b)}
}
