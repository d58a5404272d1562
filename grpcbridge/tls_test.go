package grpcbridge_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// TestConnectTLS calls over a tls:// listener: gRPC over HTTP/2 negotiated
// with ALPN, and Connect over HTTP/1.1.
func TestConnectTLS(t *testing.T) {
	srvConf, cliConf := testutil.TLSConfigs(t)
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New()})
	rpc.Handle(srv, "Str.Echo", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return req, nil
	})
	l, err := transport.Listen("tls://127.0.0.1:0", &transport.ListenConfig{TLS: srvConf})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()
	base := "https://" + l.Addr().String()
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: cliConf.Clone(), ForceAttemptHTTP2: h2}
		hc := &http.Client{Transport: tr}
		var opts []connect.ClientOption
		if h2 {
			opts = append(opts, connect.WithGRPC())
		}
		r, err := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, base+"/Str/Echo", opts...).
			CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("tls")))
		if err != nil || r.Msg.Value != "tls" {
			t.Fatalf("h2=%v: %v %v", h2, r, err)
		}
		resp, err := hc.Get(base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
			t.Fatalf("h2=%v: HTTP/%d", h2, resp.ProtoMajor)
		}
		tr.CloseIdleConnections()
	}
}
