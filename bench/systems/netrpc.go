package systems

import (
	"context"
	"net"
	"net/rpc"
)

// NetRPC is the standard library's net/rpc with its default gob codec: a
// type with an Echo method taking and returning []byte. One client
// connection carries every caller (net/rpc multiplexes). net/rpc has no
// contexts: a call is abandoned by closing the connection.
type NetRPC struct{}

func (NetRPC) Name() string         { return "netrpc" }
func (NetRPC) OneCallPerConn() bool { return false }

// NetRPCEcho is the net/rpc service; it is exported because net/rpc only
// registers exported types' methods.
type NetRPCEcho struct{}

// Echo replies with the request.
func (NetRPCEcho) Echo(req []byte, reply *[]byte) error {
	*reply = req
	return nil
}

func (NetRPC) Serve(network, address string) (net.Addr, func(), error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, nil, err
	}
	srv := rpc.NewServer()
	if err := srv.RegisterName("Bench", NetRPCEcho{}); err != nil {
		l.Close()
		return nil, nil, err
	}
	// net/rpc's Accept loop cannot be stopped with its connections, so the
	// loop is ours: it tracks connections to close them on stop.
	stop := serveConns(l, func(c net.Conn) { srv.ServeConn(c) })
	return l.Addr(), stop, nil
}

func (NetRPC) Dial(ctx context.Context, network, address string) (Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return netrpcConn{rpc.NewClient(nc)}, nil
}

type netrpcConn struct{ c *rpc.Client }

func (n netrpcConn) Caller() Caller { return &netrpcCaller{c: n.c} }

// netrpcCaller passes pointers to its fields (gob sends a *[]byte as a
// []byte); gob decodes the reply into out's capacity.
type netrpcCaller struct {
	c        *rpc.Client
	req, out []byte
}

func (n *netrpcCaller) Echo(_ context.Context, req []byte) ([]byte, error) {
	n.req = req
	err := n.c.Call("Bench.Echo", &n.req, &n.out)
	return n.out, err
}

func (n netrpcConn) Close() error { return n.c.Close() }
