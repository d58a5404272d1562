package rpc

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
)

// streamFilesServer serves F.Stream: for each message, it reads the files
// received so far (Files) and sends back their contents, with an open
// file of the path in the message if it is not empty (ReplyFiles). F.Drop
// takes no file: they are closed when it returns.
func streamFilesServer(t *testing.T, network string) *Client {
	t.Helper()
	l, addr := listenFor(t, network)
	srv := NewServer(&ServerOptions{Settings: filesSettings(), CallRate: -1, EventLoop: network == "unix-loop"})
	HandleBidiStream(srv, "F.Stream", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		return eachMsg(st, func(m []byte) error {
			var out []byte
			for _, f := range Files(ctx) {
				b, err := io.ReadAll(f)
				f.Close()
				if err != nil {
					return err
				}
				out = append(out, b...)
			}
			if len(m) > 0 {
				f, err := os.Open(string(m))
				if err != nil {
					return err
				}
				err = ReplyFiles(ctx, f)
				f.Close()
				if err != nil {
					return err
				}
			}
			return st.Send(&out)
		})
	})
	HandleBidiStream(srv, "F.Drop", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		return eachMsg(st, func([]byte) error { return nil })
	})
	c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings()})
	return c
}

// TestFilesOnStreams: files go with a stream's first message (WithFiles)
// and with a handler's next Send (ReplyFiles); ReceiveFiles collects those
// of every reply; a handler's Files has those received so far. Nothing
// stays open.
func TestFilesOnStreams(t *testing.T) { testFilesOnStreams(t, "unix") }

func testFilesOnStreams(t *testing.T, network string) {
	c := streamFilesServer(t, network)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	f1, _ := os.Open(tempFile(t, "first "))
	var got []*os.File
	cs, err := NewStream[[]byte, []byte](ctx, c, "F.Stream", WithCodec(codec.Raw), WithFiles(f1), ReceiveFiles(&got))
	if err != nil {
		t.Fatal(err)
	}
	p2, p3 := tempFile(t, "two"), tempFile(t, "three")
	for i, step := range []struct{ send, want string }{{p2, "first "}, {"", ""}, {p3, ""}} {
		msg := []byte(step.send)
		if err := cs.Send(&msg); err != nil {
			t.Fatal(err)
		}
		f1.Close() // sent with the first message
		var out []byte
		if err := cs.RecvMsg(&out); err != nil {
			t.Fatal(err)
		}
		if string(out) != step.want {
			t.Fatalf("message %d: %q, want %q", i, out, step.want)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var m []byte
	if err := cs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	cs.Close()
	if len(got) != 2 {
		t.Fatalf("%d files received, want 2", len(got))
	}
	for i, want := range []string{"two", "three"} {
		b, err := io.ReadAll(got[i])
		got[i].Close()
		if err != nil || string(b) != want {
			t.Fatalf("file %d: %q %v, want %q", i, b, err, want)
		}
	}
	// Files a handler does not take are closed when it returns.
	f4, _ := os.Open(tempFile(t, "dropped"))
	cs, err = NewStream[[]byte, []byte](ctx, c, "F.Drop", WithCodec(codec.Raw), WithFiles(f4, f4))
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("x")
	if err := cs.Send(&msg); err != nil {
		t.Fatal(err)
	}
	f4.Close()
	cs.CloseSend()
	if err := cs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	cs.Close()
	deadline := time.Now().Add(5 * time.Second)
	for countFDs(t) > before {
		if time.Now().After(deadline) {
			t.Fatalf("descriptors: %d before, %d after", before, countFDs(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFilesOnStreamRefused: on tcp, a stream's first Send with files
// fails at once with a cause matching errors.ErrUnsupported, and the
// stream stays usable without them.
func TestFilesOnStreamRefused(t *testing.T) {
	c := streamFilesServer(t, "tcp")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, _ := os.Open(tempFile(t, "x"))
	defer f.Close()
	cs, err := NewStream[[]byte, []byte](ctx, c, "F.Stream", WithCodec(codec.Raw), WithFiles(f))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	msg := []byte{}
	if err := cs.Send(&msg); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("files on tcp: %v, want ErrUnsupported", err)
	}
	if err := cs.Send(&msg); err != nil {
		t.Fatalf("send after the refused one: %v", err)
	}
	var out []byte
	if err := cs.RecvMsg(&out); err != nil || len(out) != 0 {
		t.Fatalf("reply: %q %v", out, err)
	}
}

// TestFilesOnStreamTwoGoroutines: a handler that receives on one goroutine
// (files arriving) while it sends on another. Run with -race.
func TestFilesOnStreamTwoGoroutines(t *testing.T) {
	l, addr := listenFor(t, "unix")
	srv := NewServer(&ServerOptions{Settings: filesSettings(), CallRate: -1})
	HandleBidiStream(srv, "F.Two", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		got := make(chan int, 1)
		go func() {
			n := 0
			eachMsg(st, func([]byte) error {
				for _, f := range Files(ctx) {
					f.Close()
					n++
				}
				return nil
			})
			got <- n
		}()
		for range 50 {
			msg := []byte("tick")
			if err := st.Send(&msg); err != nil {
				return err
			}
		}
		n := []byte{byte(<-got)}
		return st.Send(&n)
	})
	c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, _ := os.Open(tempFile(t, "x"))
	defer f.Close()
	cs, err := NewStream[[]byte, []byte](ctx, c, "F.Two", WithCodec(codec.Raw), WithFiles(f, f, f))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	msg := []byte("m")
	if err := cs.Send(&msg); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	var last, m []byte
	for {
		if err := cs.RecvMsg(&m); err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		last = append(last[:0], m...)
	}
	if len(last) != 1 || last[0] != 3 {
		t.Fatalf("the handler took %v files, want 3", last)
	}
}
