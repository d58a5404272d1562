package grpcbridge_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

// TestHTTP2Drain shuts a server down while HTTP/2 clients call it, in gRPC
// (through the bridge) and in Connect (unary calls rpc serves itself),
// with a health Watch open on the same connection. On the wire the Watch's
// NOT_SERVING comes before the GOAWAY, and its end (Unavailable) after it;
// every Counter.Inc call either completed (the handler ran and the client
// got its reply) or was never processed (the client got an error and the
// handler did not run), never both and never neither; no connection is
// reset. WARREN_DRAIN_ROUNDS sets the shutdowns per protocol (default 10).
func TestHTTP2Drain(t *testing.T) {
	rounds := 10
	if v := os.Getenv("WARREN_DRAIN_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		rounds = n
	}
	for _, protocol := range []string{"grpc", "connect"} {
		t.Run(protocol, func(t *testing.T) {
			var ok, failed int
			var longest time.Duration
			for range rounds {
				o, f, d := drainRound(t, protocol)
				ok, failed, longest = ok+o, failed+f, max(longest, d)
			}
			t.Logf("%s over HTTP/2, %d shutdowns under load: %d calls completed, %d refused as never processed; the longest Shutdown %v", protocol, rounds, ok, failed, longest.Round(time.Millisecond))
		})
	}
}

func drainRound(t *testing.T, protocol string) (ok, failed int, took time.Duration) {
	var processed atomic.Int64
	count := func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
		out, err := next(ctx, req)
		if err == nil && strings.HasSuffix(info.Method, "Inc") {
			processed.Add(1)
		}
		return out, err
	}
	e := startHTTP(t, &rpc.ServerOptions{Interceptors: []rpc.UnaryServerInterceptor{count}}, nil)
	tap := &frameLog{}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", e.path)
		if err != nil {
			return nil, err
		}
		return &tapConn{Conn: c, log: tap}, nil
	}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: tr}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	events := grpchealth.NewClient(hc, "http://w", connect.WithGRPC()).Watch(ctx, &grpchealth.CheckRequest{})
	if ev := <-events; ev.Err != nil || ev.Response.Status != grpchealth.StatusServing {
		t.Fatalf("first: %+v", ev)
	}
	var opts []connect.ClientOption
	if protocol == "grpc" {
		opts = append(opts, connect.WithGRPC())
	}
	inc := connect.NewClient[counter.IncRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Inc", opts...)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	var started atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				started.Add(1)
				_, err := inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{Name: "n"}))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ok++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	for started.Load() < 64 {
		time.Sleep(time.Millisecond)
	}
	shutCtx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	shut := make(chan error, 1)
	begin := time.Now()
	go func() {
		err := e.srv.Shutdown(shutCtx)
		took = time.Since(begin)
		shut <- err
	}()
	if ev := <-events; ev.Err != nil || ev.Response.Status != grpchealth.StatusNotServing {
		t.Fatalf("once the drain starts: %+v", ev)
	}
	ev := <-events
	if connect.CodeOf(ev.Err) != connect.CodeUnavailable {
		t.Fatalf("the watch ended with %+v, want Unavailable", ev)
	}
	for range events {
	}
	wg.Wait()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v (a call held it to its deadline?)", err)
	}
	failed = len(errs)
	if got := int(processed.Load()); got != ok {
		t.Fatalf("%d calls completed for the clients, %d processed by the server: a call both failed and ran (errors %v)", ok, got, errs)
	}
	for _, err := range errs {
		if connect.CodeOf(err) != connect.CodeUnavailable || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "reset") {
			t.Fatalf("a call failed with %v, want Unavailable (never processed), no reset", err)
		}
	}
	if err := tap.check(); err != nil {
		t.Fatal(err)
	}
	return ok, failed, took
}

// frameLog records, in order, the HTTP/2 frames a client read: what
// matters here is where the GOAWAY falls among the health Watch's
// messages.
type frameLog struct {
	mu       sync.Mutex
	events   []string
	readErrs []error
}

func (l *frameLog) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.readErrs {
		if errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("a connection was reset: %v", err)
		}
	}
	notServing, goAway := -1, -1
	for i, ev := range l.events {
		switch {
		case ev == "NOT_SERVING" && notServing < 0:
			notServing = i
		case ev == "GOAWAY" && goAway < 0:
			goAway = i
		}
	}
	if notServing < 0 || goAway < 0 || notServing > goAway {
		return fmt.Errorf("frames read %v: want NOT_SERVING before the GOAWAY", l.events)
	}
	return nil
}

// tapConn parses the HTTP/2 frames the server sends (after its own
// connection preface, there is none: the server starts with SETTINGS).
type tapConn struct {
	net.Conn
	log  *frameLog
	hdr  []byte
	body []byte
	left int
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.scan(b[:n])
	if err != nil && err != io.EOF {
		c.log.mu.Lock()
		c.log.readErrs = append(c.log.readErrs, err)
		c.log.mu.Unlock()
	}
	return n, err
}

func (c *tapConn) scan(p []byte) {
	for len(p) > 0 {
		if c.left > 0 || len(c.hdr) == 9 {
			k := min(c.left, len(p))
			c.body = append(c.body, p[:k]...)
			c.left -= k
			p = p[k:]
			if c.left == 0 {
				c.frame()
			}
			continue
		}
		k := min(9-len(c.hdr), len(p))
		c.hdr = append(c.hdr, p[:k]...)
		p = p[k:]
		if len(c.hdr) == 9 {
			c.left = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
			if c.left == 0 {
				c.frame()
			}
		}
	}
}

// frame notes a complete frame: a GOAWAY, or a DATA frame holding a
// health status (a gRPC message, gzipped or not, of 2 bytes: field 1 =
// 1 for SERVING, 2 for NOT_SERVING).
func (c *tapConn) frame() {
	var ev string
	switch c.hdr[3] {
	case 0x7:
		ev = "GOAWAY"
	case 0x0:
		if len(c.body) < 5 || int(binary.BigEndian.Uint32(c.body[1:5])) != len(c.body)-5 {
			break
		}
		msg := c.body[5:]
		if c.body[0] == 1 {
			if zr, err := gzip.NewReader(bytes.NewReader(msg)); err == nil {
				msg, _ = io.ReadAll(io.LimitReader(zr, 64))
			}
		}
		if len(msg) == 2 && msg[0] == 0x08 {
			ev = map[byte]string{1: "SERVING", 2: "NOT_SERVING"}[msg[1]]
		}
	}
	if ev != "" {
		c.log.mu.Lock()
		c.log.events = append(c.log.events, ev)
		c.log.mu.Unlock()
	}
	c.hdr, c.body, c.left = c.hdr[:0], c.body[:0], 0
}
