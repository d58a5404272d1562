package grpcbridge_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

// TestTokenRefusedPerProtocol checks that a request without the token is
// refused in its own protocol, so that each client shows Unauthenticated
// with the server's message: gRPC and gRPC-Web as a trailers-only reply,
// Connect streaming as an end-of-stream error, Connect unary as a 401.
func TestTokenRefusedPerProtocol(t *testing.T) {
	e := startHTTP(t, &rpc.ServerOptions{Auth: &rpc.TokenAuth{Token: "s3cret-token-for-tests-only-0123456789", Unix: true}}, nil)
	forEachProtoCase(t, e.path, func(t *testing.T, pc protoCase, hc *http.Client, ctx context.Context) {
		check := func(what string, err error) {
			t.Helper()
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || !strings.Contains(ce.Message(), "requires a token") {
				t.Errorf("%s: %v, want unauthenticated with the server's message", what, err)
			}
		}
		set := connect.NewClient[counter.SetRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Set", pc.options()...)
		_, err := set.CallUnary(ctx, connect.NewRequest(&counter.SetRequest{Name: "a", Value: 1}))
		check("unary", err)
		watch := connect.NewClient[counter.WatchRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Watch", pc.options()...)
		ws, err := watch.CallServerStream(ctx, connect.NewRequest(&counter.WatchRequest{Name: "a"}))
		if err == nil {
			for ws.Receive() {
			}
			err = ws.Err()
			ws.Close()
		}
		check("server stream", err)
	})
}
