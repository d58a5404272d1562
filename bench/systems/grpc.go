package systems

import (
	"context"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// GRPC is gRPC-Go with a hand-written service description (what protoc-gen-
// go-grpc would generate) and protobuf BytesValue messages through gRPC's
// default proto codec. The client dials the socket with a custom dialer
// (the "passthrough" resolver hands the address to it untouched) and runs
// every caller on one ClientConn, which multiplexes calls over HTTP/2 as
// gRPC's performance guide recommends. Window sizes stay at their defaults,
// which keeps gRPC's BDP-based window tuning on.
type GRPC struct{}

func (GRPC) Name() string         { return "grpc" }
func (GRPC) OneCallPerConn() bool { return false }

var grpcDesc = grpc.ServiceDesc{
	ServiceName: "bench.Bench",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return in, nil // echo: the request message is the reply
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(srv any, st grpc.ServerStream) error {
			for {
				m := new(wrapperspb.BytesValue)
				err := st.RecvMsg(m)
				if err == io.EOF { // the client closed its side
					return nil
				}
				if err != nil {
					return err
				}
				if err := st.SendMsg(m); err != nil {
					return err
				}
			}
		},
	}},
}

func (GRPC) Serve(network, address string) (net.Addr, func(), error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(LargeLimit), grpc.MaxSendMsgSize(LargeLimit))
	srv.RegisterService(&grpcDesc, struct{}{})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	return l.Addr(), func() { srv.Stop(); <-done }, nil
}

func (GRPC) Dial(ctx context.Context, network, address string) (Conn, error) {
	cc, err := grpc.NewClient("passthrough:///"+address,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(LargeLimit), grpc.MaxCallSendMsgSize(LargeLimit)),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		}))
	if err != nil {
		return nil, err
	}
	cc.Connect()
	return grpcConn{cc}, nil
}

type grpcConn struct{ cc *grpc.ClientConn }

func (g grpcConn) Caller() Caller { return &grpcCaller{cc: g.cc} }

// grpcCaller reuses its request and reply messages (unmarshaling resets
// the reply).
type grpcCaller struct {
	cc      *grpc.ClientConn
	in, out wrapperspb.BytesValue
}

func (g *grpcCaller) Echo(ctx context.Context, req []byte) ([]byte, error) {
	g.in.Value = req
	if err := g.cc.Invoke(ctx, "/bench.Bench/Echo", &g.in, &g.out); err != nil {
		return nil, err
	}
	return g.out.Value, nil
}

func (g grpcConn) Close() error { return g.cc.Close() }

func (g grpcConn) EchoStream(ctx context.Context) (Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := g.cc.NewStream(ctx, &grpcDesc.Streams[0], "/bench.Bench/Stream")
	if err != nil {
		cancel()
		return nil, err
	}
	return &grpcStream{st: st, cancel: cancel}, nil
}

type grpcStream struct {
	st     grpc.ClientStream
	cancel context.CancelFunc
}

func (s *grpcStream) Send(msg []byte) error {
	return s.st.SendMsg(&wrapperspb.BytesValue{Value: msg})
}

func (s *grpcStream) Recv() ([]byte, error) {
	m := new(wrapperspb.BytesValue)
	if err := s.st.RecvMsg(m); err != nil {
		return nil, err
	}
	return m.Value, nil
}

func (s *grpcStream) Close() error {
	defer s.cancel()
	if err := s.st.CloseSend(); err != nil {
		return err
	}
	return drain(s.Recv)
}
