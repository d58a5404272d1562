package main

import (
	"context"

	"github.com/warrenipc/warren/rpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// registerProto adds the methods that take Protocol Buffers messages:
//
//	Test.EchoProto  google.protobuf.BytesValue -> the same value (proto codec)
func registerProto(srv *rpc.Server) {
	rpc.Handle(srv, "Test.EchoProto", func(ctx context.Context, req *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) {
		return req, nil
	})
}
