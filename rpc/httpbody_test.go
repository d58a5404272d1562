package rpc

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/transport"
)

type echoMsg struct {
	S string `json:"s"`
}

// startBodyServer serves T.Echo (JSON) on a socket file until the test
// ends and returns the socket's path.
func startBodyServer(t *testing.T) string {
	t.Helper()
	return startBodyServerOpts(t, &ServerOptions{})
}

// startBodyServerOpts is startBodyServer with the server's options.
func startBodyServerOpts(t *testing.T, opts *ServerOptions) string {
	t.Helper()
	var logs strings.Builder
	opts.Logger = newTestLogger(&logs, new(sync.Mutex))
	srv := NewServer(opts)
	Handle(srv, "T.Echo", func(ctx context.Context, req *echoMsg) (*echoMsg, error) { return req, nil })
	path := filepath.Join(t.TempDir(), "h.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return path
}

// exchange sends req on a new connection and returns all the server
// writes until it closes the connection (or 5 s pass).
func exchange(t *testing.T, path, req string) string {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(req))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

// TestHTTPBodyBounds: a declared Content-Length is not allocated before
// its bytes arrive; a body that trickles in is cut off; a request with both
// Content-Length and Transfer-Encoding is refused with 400 and the
// connection closed, so the request smuggled behind it is never served; a
// malformed chunk size is 400.
func TestHTTPBodyBounds(t *testing.T) {
	path := startBodyServer(t)

	t.Run("declared length", func(t *testing.T) {
		const conns = 50
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var held []net.Conn
		for range conns {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /T.Echo HTTP/1.1\r\nHost: warren\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"s\":\"", 4<<20-1)
			held = append(held, c)
		}
		time.Sleep(300 * time.Millisecond) // let the server read what came
		runtime.ReadMemStats(&after)
		grew := int64(after.HeapInuse) - int64(before.HeapInuse)
		t.Logf("%d requests declaring 4 MiB: heap grew %d KiB", conns, grew>>10)
		if grew > 32<<20 {
			t.Fatalf("%d requests declaring 4 MiB grew the heap by %d MiB (bound 32 MiB)", conns, grew>>20)
		}
		for _, c := range held {
			c.Close()
		}
	})

	t.Run("slow body", func(t *testing.T) {
		httpbody.ReadTimeoutNS.Store(int64(300 * time.Millisecond))
		defer httpbody.ReadTimeoutNS.Store(0)
		start := time.Now()
		got := exchange(t, path, "POST /T.Echo HTTP/1.1\r\nHost: warren\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		if took := time.Since(start); took > 3*time.Second || !strings.Contains(got, "deadline_exceeded") {
			t.Fatalf("a stalled body: after %v got %q, want deadline_exceeded within 3 s", took, got)
		}
	})

	t.Run("slow bridged body", func(t *testing.T) {
		// gRPC and gRPC-Web bodies get the same deadline, over HTTP/1.1
		// as over HTTP/2.
		bridged := startBodyServerOpts(t, &ServerOptions{Bridge: grpcbridge.New()})
		httpbody.ReadTimeoutNS.Store(int64(300 * time.Millisecond))
		defer httpbody.ReadTimeoutNS.Store(0)
		for _, ct := range []string{"application/grpc", "application/grpc-web+proto", "application/grpc-web-text"} {
			start := time.Now()
			got := exchange(t, bridged, "POST /T.Echo HTTP/1.1\r\nHost: warren\r\nContent-Type: "+ct+"\r\nContent-Length: 100\r\n\r\nA")
			if took := time.Since(start); took > 3*time.Second {
				t.Fatalf("%s: a stalled body: after %v got %q, want an answer and the connection closed within 3 s", ct, took, got)
			}
		}
	})

	t.Run("content-length and transfer-encoding", func(t *testing.T) {
		smuggled := "POST /T.Echo HTTP/1.1\r\nHost: warren\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"s\":\"two\"}"
		got := exchange(t, path, "POST /T.Echo HTTP/1.1\r\nHost: warren\r\nContent-Type: application/json\r\n"+
			"Content-Length: 15\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n{\"s\":\"one\"}\r\n0\r\n\r\n"+smuggled)
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || strings.Count(got, "HTTP/1.1") != 1 || strings.Contains(got, "two") || strings.Contains(got, "one") {
			t.Fatalf("CL+TE request answered %q, want one 400 and the connection closed", got)
		}
	})

	t.Run("malformed chunk size", func(t *testing.T) {
		got := exchange(t, path, "POST /T.Echo HTTP/1.1\r\nHost: warren\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") {
			t.Fatalf("malformed chunk size answered %q, want 400", got)
		}
	})
}
