package main

import (
	"context"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/warrenipc/warren/rpc"
	testv1 "github.com/warrenipc/warren/testdata/proto/warren/test/v1"
)

// everything serves warren.test.v1.Everything (testdata/proto) through the
// code generated from its schema: every value sent comes back unchanged.
//
//	Everything.Echo    All -> the same All
//	Everything.Repeat  {message, count} => count copies (at least one), int32s = index
//	Everything.Collect All... -> {messages: [...]} in order
//	Everything.Mirror  All... => each message back as it arrives
type everything struct{}

func registerEverything(srv *rpc.Server) { testv1.RegisterEverythingServer(srv, everything{}) }

func (everything) Echo(ctx context.Context, req *testv1.All) (*testv1.All, error) { return req, nil }

func (everything) Repeat(ctx context.Context, req *testv1.RepeatRequest, s *rpc.Stream[testv1.RepeatRequest, testv1.All]) error {
	// Copies are decoded from the request's encoding: proto.Clone drops a
	// -0.0 in a double field without presence (it merges nonzero values only).
	b, err := proto.Marshal(req.Message)
	if err != nil {
		return err
	}
	n := max(req.Count, 1)
	for i := range n {
		m := &testv1.All{}
		if err := proto.Unmarshal(b, m); err != nil {
			return err
		}
		m.Int32S = int32(i)
		if err := s.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (everything) Collect(ctx context.Context, s *rpc.Stream[testv1.All, testv1.AllList]) (*testv1.AllList, error) {
	out := &testv1.AllList{}
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out.Messages = append(out.Messages, m)
	}
}

func (everything) Mirror(ctx context.Context, s *rpc.Stream[testv1.All, testv1.All]) error {
	return mirror(s)
}

// mirror sends each message received back, until the client ends its side.
func mirror[T any](s *rpc.Stream[T, T]) error {
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(m); err != nil {
			return err
		}
	}
}
