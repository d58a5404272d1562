package systems

import (
	"context"
	"errors"
	"io"
	"net"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"storj.io/drpc"
	"storj.io/drpc/drpcconn"
	"storj.io/drpc/drpcmanager"
	"storj.io/drpc/drpcmux"
	"storj.io/drpc/drpcserver"
	"storj.io/drpc/drpcwire"
)

// DRPC is storj's drpc with a hand-written drpc.Description (what
// protoc-gen-go-drpc generates) and a protobuf encoding. A drpc connection
// carries one call at a time, so concurrent callers each get their own
// connection (OneCallPerConn), the pool drpc's documentation suggests.
type DRPC struct{}

func (DRPC) Name() string         { return "drpc" }
func (DRPC) OneCallPerConn() bool { return true }

// drpcProto is the encoding protoc-gen-go-drpc generates for Go protobuf
// messages, MarshalAppend included (drpc uses it to reuse its buffer).
type drpcProto struct{}

func (drpcProto) Marshal(m drpc.Message) ([]byte, error) { return proto.Marshal(m.(proto.Message)) }
func (drpcProto) MarshalAppend(b []byte, m drpc.Message) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(b, m.(proto.Message))
}
func (drpcProto) Unmarshal(b []byte, m drpc.Message) error {
	return proto.Unmarshal(b, m.(proto.Message))
}

// drpcDesc describes two methods. drpcmux reads their shapes from the
// method values by reflection: (srv, ctx, in) (out, error) is unary,
// (srv, stream) error takes a stream.
type drpcDesc struct{}

func (drpcDesc) NumMethods() int { return 2 }

func (drpcDesc) Method(n int) (string, drpc.Encoding, drpc.Receiver, any, bool) {
	switch n {
	case 0:
		return "/bench.Bench/Echo", drpcProto{},
			func(_ any, ctx context.Context, in1, _ any) (drpc.Message, error) {
				return in1.(*wrapperspb.BytesValue), nil
			},
			func(any, context.Context, *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error) { return nil, nil },
			true
	case 1:
		return "/bench.Bench/Stream", drpcProto{},
			func(_ any, ctx context.Context, in1, _ any) (drpc.Message, error) {
				return nil, drpcEcho(in1.(drpc.Stream))
			},
			func(any, drpc.Stream) error { return nil },
			true
	}
	return "", nil, nil, nil, false
}

func drpcEcho(st drpc.Stream) error {
	for {
		m := new(wrapperspb.BytesValue)
		err := st.MsgRecv(m, drpcProto{})
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.MsgSend(m, drpcProto{}); err != nil {
			return err
		}
	}
}

func (DRPC) Serve(network, address string) (net.Addr, func(), error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, nil, err
	}
	m := drpcmux.New()
	if err := m.Register(struct{}{}, drpcDesc{}); err != nil {
		l.Close()
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Serve closes the listener when ctx ends and waits for its
	// connections.
	srv := drpcserver.NewWithOptions(m, drpcserver.Options{Manager: drpcLarge})
	go func() { defer close(done); srv.Serve(ctx, l) }()
	return l.Addr(), func() { cancel(); <-done }, nil
}

func (DRPC) Dial(ctx context.Context, network, address string) (Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return drpcConn{drpcconn.NewWithOptions(nc, drpcconn.Options{Manager: drpcLarge})}, nil
}

// drpcLarge raises drpc's message limit (4 MiB by default).
var drpcLarge = drpcmanager.Options{Reader: drpcwire.ReaderOptions{MaximumBufferSize: LargeLimit}}

type drpcConn struct{ c *drpcconn.Conn }

func (d drpcConn) Caller() Caller { return &drpcCaller{c: d.c} }

// drpcCaller reuses its request and reply messages.
type drpcCaller struct {
	c       *drpcconn.Conn
	in, out wrapperspb.BytesValue
}

func (d *drpcCaller) Echo(ctx context.Context, req []byte) ([]byte, error) {
	d.in.Value = req
	if err := d.c.Invoke(ctx, "/bench.Bench/Echo", drpcProto{}, &d.in, &d.out); err != nil {
		return nil, err
	}
	return d.out.Value, nil
}

func (d drpcConn) Close() error { return d.c.Close() }

func (d drpcConn) EchoStream(ctx context.Context) (Stream, error) {
	st, err := d.c.NewStream(ctx, "/bench.Bench/Stream", drpcProto{})
	if err != nil {
		return nil, err
	}
	return drpcClientStream{st}, nil
}

type drpcClientStream struct{ st drpc.Stream }

func (s drpcClientStream) Send(msg []byte) error {
	return s.st.MsgSend(&wrapperspb.BytesValue{Value: msg}, drpcProto{})
}

func (s drpcClientStream) Recv() ([]byte, error) {
	m := new(wrapperspb.BytesValue)
	if err := s.st.MsgRecv(m, drpcProto{}); err != nil {
		return nil, err
	}
	return m.Value, nil
}

func (s drpcClientStream) Close() error {
	defer s.st.Close()
	if err := s.st.CloseSend(); err != nil {
		return err
	}
	return drain(s.Recv)
}
