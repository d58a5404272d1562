package grpcbridge_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
)

// TestMessageBounds checks that a status message repeating 64 KiB of
// request data reaches every client cut to 1 KiB with a marker (warren
// TRAILERS, grpc-message, Connect's JSON error), and that a counter name
// over 256 bytes is invalid_argument with a short message.
func TestMessageBounds(t *testing.T) {
	long := strings.Repeat("n", 64<<10)
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Echo.Fail", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return nil, status.Errorf(status.NotFound, "no %q", req.Value)
		})
	})
	short := func(msg string) bool { return len(msg) <= 1024 }
	c := e.setCounter(t, "a", 1)
	_, err := rpc.Call[wrapperspb.StringValue, wrapperspb.StringValue](t.Context(), c, "Echo.Fail", wrapperspb.String(long))
	var se *status.Error
	if !errors.As(err, &se) || se.Code != status.NotFound || !short(se.Message) || !strings.HasSuffix(se.Message, "... (truncated)") {
		t.Fatalf("warren: %v bytes, %v", len(err.Error()), status.CodeOf(err))
	}
	_, err = rpc.Call[counter.GetRequest, counter.Entry](t.Context(), c, "Counter.Get", &counter.GetRequest{Name: long})
	if !errors.As(err, &se) || se.Code != status.InvalidArgument || len(se.Message) > 100 {
		t.Fatalf("warren: Get of a 64 KiB name: %v", err)
	}
	forEachProtoCase(t, e.path, func(t *testing.T, pc protoCase, hc *http.Client, ctx context.Context) {
		_, err := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, "http://w/Echo/Fail", pc.options()...).
			CallUnary(ctx, connect.NewRequest(wrapperspb.String(long)))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || !short(ce.Message()) || !strings.HasSuffix(ce.Message(), "... (truncated)") {
			t.Fatalf("%d bytes, %v", len(err.Error()), connect.CodeOf(err))
		}
		_, err = connect.NewClient[counter.GetRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Get", pc.options()...).
			CallUnary(ctx, connect.NewRequest(&counter.GetRequest{Name: long}))
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || len(ce.Message()) > 100 {
			t.Fatalf("Get of a 64 KiB name: %v", err)
		}
	})
}

// TestGzipInflateLimit sends a 64 KiB gzip body that inflates to 64 MiB in
// each protocol: it is refused with resource_exhausted once it passes the
// 4 MiB message limit, without inflating the rest to measure it.
func TestGzipInflateLimit(t *testing.T) {
	var zb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zb, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 64 {
		zw.Write(zero)
	}
	zw.Close()
	e := startHTTP(t, nil, nil)
	for _, tc := range []struct {
		name, path, ct, encHeader string
		h2, envelope              bool
	}{
		{"connect unary", "/Counter.Get", "application/proto", "Content-Encoding", false, false},
		{"grpc", "/Counter.Get", "application/grpc", "Grpc-Encoding", true, true},
		{"grpc-web", "/Counter.Get", "application/grpc-web+proto", "Grpc-Encoding", false, true},
		{"connect streaming", "/Counter.Watch", "application/connect+proto", "Connect-Content-Encoding", true, true},
	} {
		body := zb.Bytes()
		if tc.envelope {
			body = append(binary.BigEndian.AppendUint32([]byte{1}, uint32(len(body))), body...)
		}
		req, _ := http.NewRequest("POST", "http://w"+tc.path, bytes.NewReader(body))
		req.Header.Set("Content-Type", tc.ct)
		req.Header.Set(tc.encHeader, "gzip")
		hc := protoCase{http2: tc.h2}.httpClient(e.path)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		got := string(b) + resp.Header.Get("Grpc-Status") + " " + resp.Header.Get("Grpc-Message") + resp.Trailer.Get("Grpc-Status") + " " + resp.Trailer.Get("Grpc-Message")
		if !strings.Contains(got, "resource_exhausted") && !strings.Contains(got, "8 ") || strings.Contains(got, "67108864") {
			t.Errorf("%s: %d %q, want resource_exhausted before inflating the whole body", tc.name, resp.StatusCode, got)
		}
	}
}
