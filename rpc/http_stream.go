package rpc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// Connect's envelope: flags (1 byte), length (4 bytes, big endian), message.
const (
	envelopeCompressed = 0x01
	envelopeEndStream  = 0x02
	envelopeSize       = 5
)

// httpStream carries a streaming call over HTTP in Connect's streaming
// protocol, in place of the mux stream of a warren call (see
// serverCall.recv, send, sendHeader and endStream). The request body is a
// sequence of enveloped messages; the response is enveloped messages ended
// by an end-stream message holding the status and the trailers.
type httpStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	body  io.Reader
	ctx   context.Context // the request's
	kind  Kind
	ctype []string
	limit uint32

	// Recv side: used by the goroutine that receives.
	rdone bool // the body has ended, or failed
	rhdr  [envelopeSize]byte

	mu      sync.Mutex // protects following: the response
	started bool       // the response header was written
	ended   bool       // the end-stream message was written
	werr    error      // first write error
	whdr    [envelopeSize]byte
}

func newHTTPStream(w http.ResponseWriter, r *http.Request, kind Kind, enc httpEncoding, limit uint32) *httpStream {
	hs := &httpStream{w: w, rc: http.NewResponseController(w), body: r.Body, ctx: r.Context(), kind: kind, ctype: enc.contentType(), limit: limit}
	if kind != KindServerStream {
		// Client and bidi streams may read requests after the first reply
		// (or the error that ends the call) has gone out.
		hs.rc.EnableFullDuplex()
	}
	return hs
}

// recv returns the next request message, or io.EOF after the last. A
// server-streaming call takes exactly one: recv also reads to the end of
// the body, which lets net/http notice a client that goes away.
func (hs *httpStream) recv() (*pool.Buf, error) {
	if hs.rdone {
		return nil, io.EOF
	}
	buf, err := hs.readEnvelope()
	if err != nil {
		hs.rdone = true
		return nil, err
	}
	if hs.kind == KindServerStream {
		hs.rdone = true
		n, err := io.ReadFull(hs.body, hs.rhdr[:1])
		if n > 0 {
			pool.Put(buf)
			return nil, status.New(status.InvalidArgument, "a server-streaming call takes one request message")
		}
		if err != io.EOF {
			pool.Put(buf)
			return nil, hs.readError(err)
		}
	}
	return buf, nil
}

func (hs *httpStream) readEnvelope() (*pool.Buf, error) {
	if _, err := io.ReadFull(hs.body, hs.rhdr[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, hs.readError(err)
	}
	flags, n := hs.rhdr[0], binary.BigEndian.Uint32(hs.rhdr[1:])
	switch {
	case flags&envelopeCompressed != 0:
		return nil, status.New(status.InvalidArgument, "compressed request message, but no compression was negotiated")
	case flags&envelopeEndStream != 0:
		return nil, status.New(status.InvalidArgument, "end-stream message from the client")
	case n > hs.limit:
		return nil, status.Errorf(status.ResourceExhausted, "request message of %d bytes is over the limit of %d", n, hs.limit)
	}
	buf := pool.Get(int(n))
	if _, err := io.ReadFull(hs.body, buf.B); err != nil {
		pool.Put(buf)
		return nil, hs.readError(err)
	}
	return buf, nil
}

func (hs *httpStream) readError(err error) error {
	if hs.ctx.Err() != nil {
		return &status.Error{Code: status.Canceled, Message: "the client went away", Cause: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &status.Error{Code: status.InvalidArgument, Message: "request body ends inside a message", Cause: err}
	}
	return &status.Error{Code: status.Unavailable, Message: "reading the request: " + err.Error(), Cause: err}
}

// send writes one enveloped message and flushes it to the client.
func (hs *httpStream) send(data []byte) error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.ended {
		return status.New(status.FailedPrecondition, "send after the call ended")
	}
	if hs.werr != nil {
		return hs.werr
	}
	hs.startLocked(nil)
	hs.whdr[0] = 0
	binary.BigEndian.PutUint32(hs.whdr[1:], uint32(len(data)))
	return hs.writeLocked(hs.whdr[:], data)
}

// sendHeader sends the reply headers ahead of the first message.
func (hs *httpStream) sendHeader(md []string) error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.started || hs.werr != nil {
		return hs.werr
	}
	hs.startLocked(md)
	return hs.writeLocked(nil, nil)
}

// end writes the end-stream message: the status and the trailers.
func (hs *httpStream) end(header []string, code status.Code, msg string, details [][]byte, trailer []string) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.ended {
		return
	}
	hs.ended = true
	if hs.werr != nil {
		return
	}
	hs.startLocked(header)
	var se *status.Error
	if code != status.OK {
		se = &status.Error{Code: code, Message: msg, Details: details}
	}
	data := endStreamMessage(se, trailer)
	hs.whdr[0] = envelopeEndStream
	binary.BigEndian.PutUint32(hs.whdr[1:], uint32(len(data)))
	hs.writeLocked(hs.whdr[:], data)
}

// startLocked writes the response header, with md as headers, once.
func (hs *httpStream) startLocked(md []string) {
	if hs.started {
		return
	}
	hs.started = true
	h := hs.w.Header()
	setMetadataHeaders(h, md, "")
	h["Content-Type"] = hs.ctype
	hs.w.WriteHeader(http.StatusOK)
}

func (hs *httpStream) writeLocked(prefix, data []byte) error {
	var err error
	if len(prefix) > 0 {
		_, err = hs.w.Write(prefix)
	}
	if err == nil && len(data) > 0 {
		_, err = hs.w.Write(data)
	}
	if err == nil {
		err = hs.rc.Flush()
	}
	if err != nil {
		if hs.ctx.Err() != nil {
			hs.werr = &status.Error{Code: status.Canceled, Message: "the client went away", Cause: err}
		} else {
			hs.werr = &status.Error{Code: status.Unavailable, Message: "writing the reply: " + err.Error(), Cause: err}
		}
	}
	return hs.werr
}

// writeStreamError answers a streaming request that cannot start with an
// end-stream message holding se: in Connect's streaming protocol an error
// is carried in the body, with HTTP status 200.
func writeStreamError(w http.ResponseWriter, enc httpEncoding, se *status.Error) {
	data := endStreamMessage(se, nil)
	h := w.Header()
	h["Content-Type"] = enc.contentType()
	h["Content-Length"] = []string{strconv.Itoa(envelopeSize + len(data))}
	w.WriteHeader(http.StatusOK)
	var hdr [envelopeSize]byte
	hdr[0] = envelopeEndStream
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	w.Write(append(hdr[:], data...))
}

// writeUnaryError writes se as Connect's JSON error, with HTTP status
// httpStatus, or the status for se's code if 0. header and trailer are
// reply metadata pairs.
func writeUnaryError(w http.ResponseWriter, httpStatus int, se *status.Error, header, trailer []string) {
	if httpStatus == 0 {
		httpStatus = HTTPStatus(se.Code)
	}
	data, _ := json.Marshal(newConnectError(se))
	h := w.Header()
	setMetadataHeaders(h, header, "")
	setMetadataHeaders(h, trailer, "Trailer-")
	h["Content-Type"] = ctJSON
	h["Content-Length"] = []string{strconv.Itoa(len(data))}
	w.WriteHeader(httpStatus)
	w.Write(data)
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

// endStreamMessage encodes Connect's end-stream message: the error, if
// any, and the trailers as "metadata".
func endStreamMessage(se *status.Error, trailer []string) []byte {
	var m struct {
		Error    *connectError       `json:"error,omitempty"`
		Metadata map[string][]string `json:"metadata,omitempty"`
	}
	if se != nil {
		m.Error = newConnectError(se)
	}
	for i := 0; i+1 < len(trailer); i += 2 {
		if m.Metadata == nil {
			m.Metadata = map[string][]string{}
		}
		m.Metadata[trailer[i]] = append(m.Metadata[trailer[i]], trailer[i+1])
	}
	data, _ := json.Marshal(&m)
	return data
}
