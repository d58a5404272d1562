package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/warrenipc/warren/status"
)

// filesPair serves F.Read (reads the request's file), F.Open (replies with
// an open file of the path in the request) and F.Ignore (takes nothing)
// on a unix socket with descriptors on both sides.
func filesPair(t *testing.T, network string) (*Client, *atomic.Int32) {
	t.Helper()
	l, addr := listenFor(t, network)
	calls := new(atomic.Int32)
	srv := NewServer(&ServerOptions{Settings: filesSettings(), CallRate: -1, EventLoop: network == "unix-loop"})
	HandleRaw(srv, "F.Read", func(ctx context.Context, req []byte) ([]byte, error) {
		calls.Add(1)
		var out []byte
		for _, f := range Files(ctx) {
			b, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
		return out, nil
	})
	HandleRaw(srv, "F.Open", func(ctx context.Context, req []byte) ([]byte, error) {
		calls.Add(1)
		f, err := os.Open(string(req))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return []byte("here"), ReplyFiles(ctx, f)
	})
	HandleRaw(srv, "F.Ignore", func(ctx context.Context, req []byte) ([]byte, error) {
		calls.Add(1)
		return req, nil
	})
	c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings()})
	return c, calls
}

// listenFor listens on a unix socket ("unix", "unix-loop") or on tcp, and
// returns the listener and the address to dial.
func listenFor(t *testing.T, network string) (net.Listener, string) {
	t.Helper()
	if network == "unix" || network == "unix-loop" {
		path := filepath.Join(t.TempDir(), "f.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		return l, "unix://" + path
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l, "tcp://" + l.Addr().String()
}

// serveAndDial serves srv on l and dials addr; both close with the test.
func serveAndDial(t testing.TB, srv *Server, l net.Listener, addr string, opts *ClientOptions) *Client {
	t.Helper()
	go srv.Serve(l)
	c, err := Dial(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return c
}

// eachMsg calls each with every message of st until the caller closes its
// side.
func eachMsg(st *Stream[[]byte, []byte], each func(m []byte) error) error {
	var m []byte
	for {
		if err := st.RecvMsg(&m); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := each(m); err != nil {
			return err
		}
	}
}

func tempFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFilesRequestAndReply(t *testing.T) { testFilesRequestAndReply(t, "unix") }

func testFilesRequestAndReply(t *testing.T, network string) {
	c, _ := filesPair(t, network)
	ctx := context.Background()
	var out []byte
	in := []byte("x")
	if err := c.Invoke(ctx, "F.Ignore", &in, &out); err != nil { // connect
		t.Fatal(err)
	}
	before := countFDs(t)
	p1, p2 := tempFile(t, "hello "), tempFile(t, "world")
	f1, _ := os.Open(p1)
	f2, _ := os.Open(p2)
	if err := c.Invoke(ctx, "F.Read", &in, &out, WithFiles(f1, f2)); err != nil {
		t.Fatal(err)
	}
	f1.Close()
	f2.Close()
	if string(out) != "hello world" {
		t.Fatalf("F.Read: %q", out)
	}
	// Files the handler does not take are closed.
	f1, _ = os.Open(p1)
	if err := c.Invoke(ctx, "F.Ignore", &in, &out, WithFiles(f1)); err != nil {
		t.Fatal(err)
	}
	f1.Close()
	// A reply with a file.
	var got []*os.File
	path := []byte(p2)
	if err := c.Invoke(ctx, "F.Open", &path, &out, ReceiveFiles(&got)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(out) != "here" {
		t.Fatalf("F.Open: %q, %d files", out, len(got))
	}
	b, err := io.ReadAll(got[0])
	got[0].Close()
	if err != nil || string(b) != "world" {
		t.Fatalf("reply file: %q %v", b, err)
	}
	// A reply file nobody asked for is closed.
	if err := c.Invoke(ctx, "F.Open", &path, &out); err != nil {
		t.Fatal(err)
	}
	checkNoLeak(t, before, 0, 0)
}

func TestFilesRefusedAtOnce(t *testing.T) {
	c, calls := filesPair(t, "tcp")
	ctx := context.Background()
	f, _ := os.Open(tempFile(t, "x"))
	defer f.Close()
	var out []byte
	in := []byte("x")
	err := c.Invoke(ctx, "F.Read", &in, &out, WithFiles(f))
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("files over tcp: %v, want errors.ErrUnsupported", err)
	}
	// A reply with files over tcp: the handler's ReplyFiles fails.
	path := []byte(f.Name())
	var se *status.Error
	if err := c.Invoke(ctx, "F.Open", &path, &out); !errors.As(err, &se) || se.Code != status.FailedPrecondition {
		t.Fatalf("reply files over tcp: %v", err)
	}
	if n := calls.Load(); n != 1 { // F.Open only: nothing of F.Read was sent
		t.Fatalf("%d calls reached the server", n)
	}

	cu, calls := filesPair(t, "unix")
	many := make([]*os.File, 17) // over MaxFiles (16)
	for i := range many {
		many[i] = f
	}
	if err := cu.Invoke(ctx, "F.Read", &in, &out, WithFiles(many...)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("17 files: %v, want errors.ErrUnsupported", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d calls reached the server", n)
	}
}
