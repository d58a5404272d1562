// Command testserver is the Go server that the Python and TypeScript
// clients' integration tests run against. It serves the counter service and
// a Test service made to exercise every call kind, error and limit, on one
// address given with -addr, and prints "listening on ADDR" (the address
// actually bound, so tcp://127.0.0.1:0 reports its port) once it accepts
// connections. It exits on SIGINT, SIGTERM or when its standard input
// closes (-stdin), so that a test runner that dies takes it along. On
// SIGTERM it shuts down gracefully (-grace bounds the wait for calls in
// flight) and exits 0. -deny refuses every peer by policy.
//
//	go run ./clients/testserver -addr unix:///tmp/t.sock
//	go run ./clients/testserver -addr tls://127.0.0.1:0 -cert c.pem -key k.pem
//
// Test methods (JSON unless noted):
//
//	Test.Echo      any JSON value -> the same value
//	Test.EchoRaw   any bytes -> the same bytes (raw codec only)
//	Test.EchoProto google.protobuf.BytesValue -> the same value (proto codec; proto.go)
//	Test.Fail      {"code":"not_found","message":"m","details":["..."]} -> that status error
//	Test.Sleep     {"ms":N} -> {"slept":N}, or the call's deadline or cancellation
//	Test.Metadata  {} -> {"metadata":{...}}: the request metadata; sets header "x-header" and trailer "x-trailer"
//	Test.Count     {"n":N,"delay_ms":D} => {"i":0} ... {"i":N-1} (server stream)
//	Test.Sum       {"n":K}... -> {"sum":S,"count":C} (client stream)
//	Test.Chat      {...}... => each message back (bidirectional stream)
//	Test.Big       {"size":N} -> N bytes, byte i = i mod 251 (a []byte: base64 in JSON, as is with the raw codec)
//	Test.Pending   {} -> {"pending":N}: calls of Test.Sleep in progress
//	Test.Record    any bytes (a call id) -> the same bytes (raw codec); with -record FILE,
//	               the times each id ran are written to FILE as JSON when the server exits
//
// and warren.test.v1.Everything (testdata/proto/warren/test/v1), served
// through generated code: see everything.go.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// maxBig bounds Test.Big and the message size the server accepts: 64 MiB
// messages are part of the clients' suites.
const maxBig = 64 << 20

func main() {
	addr := flag.String("addr", "tcp://127.0.0.1:0", "address to serve")
	cert := flag.String("cert", "", "TLS certificate (PEM) for tls:// and wss://")
	key := flag.String("key", "", "TLS key (PEM) for tls:// and wss://")
	stdin := flag.Bool("stdin", false, "exit when standard input closes")
	flag.StringVar(&recordFile, "record", "", "write the times each Test.Record id ran to this file (JSON) at exit")
	flag.DurationVar(&grace, "grace", 2*time.Second, "how long a shutdown waits for calls in flight")
	flag.BoolVar(&denyAll, "deny", false, "refuse every peer by policy (tests of how refused clients read it)")
	flag.Parse()
	if err := run(*addr, *cert, *key, *stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}

func run(addr, cert, key string, stdin bool) error {
	cfg := &transport.ListenConfig{}
	var policy peer.Policy
	if denyAll {
		// The server's policy, not the listener's: a refused peer is
		// answered in its own protocol.
		cfg.Policy = peer.AllowAll()
		policy = peer.PolicyFunc(func(p *peer.Peer) error {
			return fmt.Errorf("uid %d is refused: this test server runs with -deny", p.UID)
		})
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return err
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{kp}}
	}
	l, err := transport.Listen(addr, cfg)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(&rpc.ServerOptions{
		Policy:   policy,
		Settings: wire.Settings{MaxMessageSize: maxBig + 1<<20},
		// The clients' suites open 1,000 concurrent calls on one connection.
		MaxCallsPerConn: 4096,
		Bridge:          grpcbridge.New(),
	})
	store := counter.New()
	store.Register(srv)
	register(srv)
	registerProto(srv)
	registerEverything(srv)

	// Signals are caught before "listening on" is printed: a test may send
	// SIGTERM as soon as it has read it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	fmt.Printf("listening on %s\n", bound(addr, l))
	eof := make(chan struct{})
	if stdin {
		go func() { io.Copy(io.Discard, bufio.NewReader(os.Stdin)); close(eof) }()
	}
	select {
	case <-sig:
	case <-eof:
	case err := <-done:
		return err
	}
	store.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "testserver: shutdown:", err)
	}
	<-done
	if recordFile != "" {
		b, jerr := json.Marshal(record.snapshot())
		if jerr == nil {
			jerr = os.WriteFile(recordFile, b, 0o600)
		}
		if jerr != nil {
			return jerr
		}
	}
	return nil
}

var (
	denyAll    bool
	recordFile string
	grace      time.Duration
	record     = &ranCounts{m: map[string]int{}}
)

// ranCounts counts the times each Test.Record id ran, for the shutdown
// tests: a call that completed ran once, one refused as never processed
// did not run.
type ranCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (r *ranCounts) add(id string) {
	r.mu.Lock()
	r.m[id]++
	r.mu.Unlock()
}

func (r *ranCounts) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.m)
}

type failRequest struct {
	Code    string   `json:"code"`
	Message string   `json:"message"`
	Details []string `json:"details"`
}

type sleepRequest struct {
	MS int `json:"ms"`
}

type countRequest struct {
	N       int `json:"n"`
	DelayMS int `json:"delay_ms"`
}

type sumReply struct {
	Sum   int64 `json:"sum"`
	Count int   `json:"count"`
}

func register(srv *rpc.Server) {
	var pending atomic.Int64

	rpc.Handle(srv, "Test.Echo", func(ctx context.Context, req *json.RawMessage) (*json.RawMessage, error) {
		return req, nil
	})
	rpc.HandleRaw(srv, "Test.EchoRaw", func(ctx context.Context, req []byte) ([]byte, error) {
		return req, nil
	})
	rpc.HandleRaw(srv, "Test.Record", func(ctx context.Context, req []byte) ([]byte, error) {
		if len(req) > 64 {
			return nil, status.Errorf(status.InvalidArgument, "an id of %d bytes is over 64", len(req))
		}
		record.add(string(req))
		return req, nil
	})
	rpc.Handle(srv, "Test.Fail", func(ctx context.Context, req *failRequest) (*struct{}, error) {
		code, ok := status.ParseCode(req.Code)
		if !ok {
			return nil, status.Errorf(status.InvalidArgument, "unknown code %q", req.Code)
		}
		e := status.New(code, req.Message)
		for _, d := range req.Details {
			e.Details = append(e.Details, []byte(d))
		}
		return nil, e
	})
	rpc.Handle(srv, "Test.Sleep", func(ctx context.Context, req *sleepRequest) (*map[string]int, error) {
		pending.Add(1)
		defer pending.Add(-1)
		t := time.NewTimer(time.Duration(req.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return &map[string]int{"slept": req.MS}, nil
		case <-ctx.Done():
			return nil, status.FromError(ctx.Err())
		}
	})
	rpc.Handle(srv, "Test.Pending", func(ctx context.Context, _ *struct{}) (*map[string]int64, error) {
		return &map[string]int64{"pending": pending.Load()}, nil
	})
	rpc.Handle(srv, "Test.Metadata", func(ctx context.Context, _ *struct{}) (*map[string]rpc.Metadata, error) {
		rpc.SetHeader(ctx, rpc.Metadata{"x-header": {"h"}})
		rpc.SetTrailer(ctx, rpc.Metadata{"x-trailer": {"t"}})
		md := rpc.IncomingMetadata(ctx)
		if md == nil {
			md = rpc.Metadata{}
		}
		return &map[string]rpc.Metadata{"metadata": md}, nil
	})
	rpc.Handle(srv, "Test.Big", func(ctx context.Context, req *struct {
		Size int `json:"size"`
	}) (*[]byte, error) {
		if req.Size < 0 || req.Size > maxBig {
			return nil, status.Errorf(status.InvalidArgument, "size %d is outside 0..%d", req.Size, maxBig)
		}
		b := make([]byte, req.Size)
		for i := range b {
			b[i] = byte(i % 251)
		}
		return &b, nil
	})
	rpc.HandleServerStream(srv, "Test.Count", func(ctx context.Context, req *countRequest, s *rpc.Stream[countRequest, map[string]int]) error {
		for i := 0; i < req.N; i++ {
			if req.DelayMS > 0 {
				select {
				case <-time.After(time.Duration(req.DelayMS) * time.Millisecond):
				case <-ctx.Done():
					return status.FromError(ctx.Err())
				}
			}
			if err := s.Send(&map[string]int{"i": i}); err != nil {
				return err
			}
		}
		return nil
	})
	rpc.HandleClientStream(srv, "Test.Sum", func(ctx context.Context, s *rpc.Stream[map[string]int64, sumReply]) (*sumReply, error) {
		var r sumReply
		for {
			m, err := s.Recv()
			if err == io.EOF {
				return &r, nil
			}
			if err != nil {
				return nil, err
			}
			r.Sum += (*m)["n"]
			r.Count++
		}
	})
	rpc.HandleBidiStream(srv, "Test.Chat", func(ctx context.Context, s *rpc.Stream[json.RawMessage, json.RawMessage]) error {
		return mirror(s)
	})
}

// bound is the warren address the listener is bound to: addr itself for
// unix sockets, and addr with the real port for the network ones.
func bound(addr string, l *transport.Listener) string {
	a, err := transport.ParseAddr(addr)
	if err != nil || a.Scheme == transport.SchemeUnix {
		return addr
	}
	return a.Scheme + "://" + l.Addr().String() + a.Path
}
