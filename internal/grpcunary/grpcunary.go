// Package grpcunary is a minimal gRPC client for unary calls over HTTP/2
// without TLS (h2c, prior knowledge), on net/http: the core module has no
// gRPC client (grpc-go lives in the nested modules), and the tests that put
// HAProxy and nginx in front of warren speak gRPC to them with it.
//
// It does what a gRPC client does for one unary call and nothing more:
// length-prefixed protobuf messages, grpc-timeout from the context's
// deadline, grpc-status and grpc-message from the trailers (or from the
// headers of a trailers-only answer), and the gRPC mapping of HTTP statuses
// for an answer without grpc-status (a load balancer's 502 or 503 is
// Unavailable). net/http's HTTP/2 transport retries by itself a request the
// server refused unprocessed (REFUSED_STREAM, or above a GOAWAY's last
// stream id).
package grpcunary

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/warrenipc/warren/status"
)

// maxReply bounds the reply read, in bytes (warren's default message limit).
const maxReply = 4 << 20

// Client calls one h2c address.
type Client struct {
	base   string
	header http.Header
	hc     *http.Client
}

// New returns a client of host:port that sends header (for example
// Authorization) with every call.
func New(hostport string, header http.Header) *Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &Client{
		base:   "http://" + hostport,
		header: header,
		hc:     &http.Client{Transport: &http.Transport{Protocols: p, MaxIdleConnsPerHost: 4}},
	}
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Call calls method ("/package.Service/Method") with req and decodes the
// reply into resp. A failed call is a *status.Error.
func (c *Client) Call(ctx context.Context, method string, req, resp proto.Message) error {
	msg, err := proto.Marshal(req)
	if err != nil {
		return status.Errorf(status.Internal, "encoding the request: %v", err)
	}
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+method, bytes.NewReader(body))
	if err != nil {
		return status.Errorf(status.InvalidArgument, "%v", err)
	}
	for k, v := range c.header {
		r.Header[k] = v
	}
	r.Header.Set("Content-Type", "application/grpc+proto")
	r.Header.Set("TE", "trailers")
	if d, ok := ctx.Deadline(); ok {
		ms := max(time.Until(d).Milliseconds(), 1)
		r.Header.Set("Grpc-Timeout", strconv.FormatInt(ms, 10)+"m")
	}
	res, err := c.hc.Do(r)
	if err != nil {
		if ctx.Err() != nil {
			return ctxError(ctx, err)
		}
		return &status.Error{Code: status.Unavailable, Message: err.Error(), Cause: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxReply+6))
	if err != nil {
		if ctx.Err() != nil {
			return ctxError(ctx, err)
		}
		return &status.Error{Code: status.Unavailable, Message: "reading the reply: " + err.Error(), Cause: err}
	}
	if st := callStatus(res); st != nil {
		return st
	}
	return decodeReply(data, resp)
}

// decodeReply decodes a reply body that must hold exactly one uncompressed
// length-prefixed message.
func decodeReply(data []byte, resp proto.Message) error {
	if len(data) < 5 || data[0] != 0 || uint64(binary.BigEndian.Uint32(data[1:5])) != uint64(len(data)-5) {
		return status.Errorf(status.Internal, "the reply is not one uncompressed gRPC message (%d bytes)", len(data))
	}
	if err := proto.Unmarshal(data[5:], resp); err != nil {
		return status.Errorf(status.Internal, "decoding the reply: %v", err)
	}
	return nil
}

// callStatus returns the call's error from grpc-status (trailers, or the
// headers of a trailers-only answer), nil for OK.
func callStatus(res *http.Response) *status.Error {
	code, msg := res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
	if code == "" {
		code, msg = res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
	}
	if code == "" {
		return status.Errorf(httpCode(res.StatusCode), "no grpc-status; HTTP %s", res.Status)
	}
	n, err := strconv.ParseUint(code, 10, 32)
	if err != nil || n > 16 {
		return status.Errorf(status.Internal, "invalid grpc-status %q", code)
	}
	if n == 0 {
		return nil
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return status.New(status.Code(n), msg)
}

// httpCode maps an HTTP status without grpc-status to a gRPC code, as
// gRPC's "HTTP to gRPC status code mapping" does.
func httpCode(h int) status.Code {
	switch h {
	case http.StatusBadRequest:
		return status.Internal
	case http.StatusUnauthorized:
		return status.Unauthenticated
	case http.StatusForbidden:
		return status.PermissionDenied
	case http.StatusNotFound:
		return status.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return status.Unavailable
	}
	return status.Unknown
}

// ctxError is the error of a call whose context ended.
func ctxError(ctx context.Context, err error) *status.Error {
	code := status.DeadlineExceeded
	if errors.Is(ctx.Err(), context.Canceled) {
		code = status.Canceled
	}
	return &status.Error{Code: code, Message: err.Error(), Cause: ctx.Err()}
}
