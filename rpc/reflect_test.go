package rpc_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
)

// TestReflectionAndHealth lists the services through gRPC server
// reflection (v1 and v1alpha), fetches the counter's schema, and checks
// health, in each protocol over HTTP/2 with prior knowledge, and health
// over HTTP/1.1 too.
func TestReflectionAndHealth(t *testing.T) {
	e := startHTTP(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pc := range []protoCase{{protocol: "grpc", http2: true}, {protocol: "connect", http2: true}, {protocol: "grpcweb", http2: true}, {protocol: "connect"}} {
		hc := pc.httpClient(e.path)
		defer hc.CloseIdleConnections()
		for _, alpha := range []bool{false, true} {
			if !pc.http2 {
				break // reflection is a bidi stream: HTTP/2 only
			}
			var rhc connect.HTTPClient = hc
			if alpha {
				// v1alpha has the same messages under another name.
				rhc = toV1Alpha{hc}
			}
			rc := grpcreflect.NewClient(rhc, "http://w", pc.options()...)
			st := rc.NewStream(ctx)
			names, err := st.ListServices()
			if err != nil || fmt.Sprint(names) != "[grpc.health.v1.Health warren.counter.v1.Counter]" {
				t.Fatalf("%v alpha=%v: services %v %v", pc, alpha, names, err)
			}
			files, err := st.FileContainingSymbol("warren.counter.v1.Counter")
			if err != nil || len(files) == 0 || files[0].GetPackage() != "warren.counter.v1" || len(files[0].GetService()[0].GetMethod()) != 5 {
				t.Fatalf("%v: schema %v %v", pc, files, err)
			}
			if _, err := st.FileContainingSymbol("warren.counter.v1.Nope"); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("%v: unknown symbol: %v", pc, err)
			}
			if _, err := st.Close(); err != nil {
				t.Fatal(err)
			}
		}
		health := grpchealth.NewClient(hc, "http://w", pc.options()...)
		for _, svc := range []string{"", "warren.counter.v1.Counter"} {
			r, err := health.Check(ctx, &grpchealth.CheckRequest{Service: svc})
			if err != nil || r.Status != grpchealth.StatusServing {
				t.Fatalf("%v: health of %q: %v %v", pc, svc, r, err)
			}
		}
		if _, err := health.Check(ctx, &grpchealth.CheckRequest{Service: "nope.Nope"}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%v: health of an unknown service: %v", pc, err)
		}
	}
	e.srv.Shutdown(ctx)
}

// toV1Alpha sends reflection requests to the v1alpha service.
type toV1Alpha struct{ hc *http.Client }

func (c toV1Alpha) Do(r *http.Request) (*http.Response, error) {
	r.URL.Path = strings.Replace(r.URL.Path, "grpc.reflection.v1.", "grpc.reflection.v1alpha.", 1)
	return c.hc.Do(r)
}
