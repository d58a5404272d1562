package systems

import (
	"context"
	"io"
	"net"

	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TTRPC is containerd's ttrpc with a service registered by hand
// (RegisterService, what protoc-gen-go-ttrpc generates) and protobuf
// BytesValue messages. One client connection carries every caller, as
// ttrpc multiplexes calls.
type TTRPC struct{}

func (TTRPC) Name() string         { return "ttrpc" }
func (TTRPC) OneCallPerConn() bool { return false }

var ttrpcDesc = &ttrpc.ServiceDesc{
	Methods: map[string]ttrpc.Method{
		"Echo": func(ctx context.Context, unmarshal func(any) error) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := unmarshal(in); err != nil {
				return nil, err
			}
			return in, nil
		},
	},
	Streams: map[string]ttrpc.Stream{
		"Stream": {
			StreamingClient: true,
			StreamingServer: true,
			Handler: func(ctx context.Context, st ttrpc.StreamServer) (any, error) {
				for {
					m := new(wrapperspb.BytesValue)
					err := st.RecvMsg(m)
					if err == io.EOF {
						return nil, nil
					}
					if err != nil {
						return nil, err
					}
					if err := st.SendMsg(m); err != nil {
						return nil, err
					}
				}
			},
		},
	},
}

func (TTRPC) Serve(network, address string) (net.Addr, func(), error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, nil, err
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	srv.RegisterService("bench.Bench", ttrpcDesc)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(context.Background(), l) }()
	return l.Addr(), func() { srv.Close(); <-done }, nil
}

func (TTRPC) Dial(ctx context.Context, network, address string) (Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return ttrpcConn{ttrpc.NewClient(nc)}, nil
}

type ttrpcConn struct{ c *ttrpc.Client }

func (t ttrpcConn) Caller() Caller { return &ttrpcCaller{c: t.c} }

// ttrpcCaller reuses its request and reply messages.
type ttrpcCaller struct {
	c       *ttrpc.Client
	in, out wrapperspb.BytesValue
}

func (t *ttrpcCaller) Echo(ctx context.Context, req []byte) ([]byte, error) {
	t.in.Value = req
	if err := t.c.Call(ctx, "bench.Bench", "Echo", &t.in, &t.out); err != nil {
		return nil, err
	}
	return t.out.Value, nil
}

func (t ttrpcConn) Close() error { return t.c.Close() }

func (t ttrpcConn) EchoStream(ctx context.Context) (Stream, error) {
	st, err := t.c.NewStream(ctx, &ttrpc.StreamDesc{StreamingClient: true, StreamingServer: true}, "bench.Bench", "Stream", nil)
	if err != nil {
		return nil, err
	}
	return ttrpcStream{st}, nil
}

type ttrpcStream struct{ st ttrpc.ClientStream }

func (s ttrpcStream) Send(msg []byte) error {
	return s.st.SendMsg(&wrapperspb.BytesValue{Value: msg})
}

func (s ttrpcStream) Recv() ([]byte, error) {
	m := new(wrapperspb.BytesValue)
	if err := s.st.RecvMsg(m); err != nil {
		return nil, err
	}
	return m.Value, nil
}

func (s ttrpcStream) Close() error {
	if err := s.st.CloseSend(); err != nil {
		return err
	}
	return drain(s.Recv)
}
