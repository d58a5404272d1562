package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// countFDs returns the descriptors this process has open.
func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// countMemfdMaps returns the memfd mappings of this process.
func countMemfdMaps(t testing.TB) int { return countMaps(t, "/memfd:warren") }

// countMaps counts the mappings of this process whose line has name.
func countMaps(t testing.TB, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), name)
}

// sharedPair serves a raw echo on a unix socket with descriptors and
// shared messages on both sides, and returns a client.
func sharedPair(t testing.TB, srvOpts ServerOptions, cliOpts ClientOptions) *Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srvOpts.CallRate = -1
	srv := NewServer(&srvOpts)
	HandleRaw(srv, "T.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	HandleRaw(srv, "T.Sum", func(ctx context.Context, req []byte) ([]byte, error) {
		var s byte
		for _, b := range req {
			s += b
		}
		return []byte{s}, nil
	})
	HandleRaw(srv, "T.Mapped", func(ctx context.Context, req []byte) ([]byte, error) {
		return []byte{byte(countMemfdMaps(t))}, nil // the request's mapping, if it came shared
	})
	HandleRaw(srv, "T.Addr", func(ctx context.Context, req []byte) ([]byte, error) {
		return binary.LittleEndian.AppendUint64(nil, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(req))))), nil
	})
	HandleRaw(srv, "T.Block", func(ctx context.Context, req []byte) ([]byte, error) {
		<-ctx.Done() // holds its request (and what came with it) until canceled
		return nil, ctx.Err()
	})
	c := serveAndDial(t, srv, l, "unix://"+path, &cliOpts)
	return c
}

func filesSettings() wire.Settings {
	return wire.Settings{MaxFiles: 16, MaxMessageSize: 128 << 20}
}

func TestSharedEcho(t *testing.T) { testSharedEcho(t, false) }

func testSharedEcho(t *testing.T, loop bool) {
	fds, maps := countFDs(t), countMemfdMaps(t)
	c := sharedPair(t,
		ServerOptions{EventLoop: loop, Settings: filesSettings(), SharedThreshold: 64 << 10},
		ClientOptions{Settings: filesSettings(), SharedThreshold: 64 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []int{1 << 10, 64 << 10, 1 << 20, 16 << 20} {
		req := checkEcho(t, ctx, c, n)
		var mapped []byte
		if err := c.Invoke(ctx, "T.Mapped", &req, &mapped); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if shared := n >= 64<<10; (mapped[0] > 0) != shared {
			t.Fatalf("%d bytes: %d memfd mappings in the handler, shared %v", n, mapped[0], shared)
		}
	}
	c.Close()
	checkNoLeak(t, fds, maps, 2+loopFDs(loop, 1)) // the listener and its Serve's poller may stay
}

// checkEcho sends n bytes to T.Echo and checks the reply; it returns
// what it sent.
func checkEcho(t testing.TB, ctx context.Context, c *Client, n int) []byte {
	t.Helper()
	req := bytes.Repeat([]byte{byte(n), 1, 2, 3, 5, 8, 13}, n/7+1)[:n]
	var out []byte
	if err := c.Invoke(ctx, "T.Echo", &req, &out); err != nil {
		t.Fatalf("%d bytes: %v", n, err)
	}
	if !bytes.Equal(out, req) {
		t.Fatalf("%d bytes: echo differs", n)
	}
	return req
}

// checkNoLeak waits until no more than slack descriptors beyond fds, and
// no memfd mapping beyond maps, are open: a handler releases its request
// after its reply is sent.
func checkNoLeak(t *testing.T, fds, maps, slack int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for countMemfdMaps(t) != maps || countFDs(t) > fds+slack {
		if time.Now().After(deadline) {
			t.Fatalf("leak: %d memfd mappings (%d before), %d descriptors (%d before)", countMemfdMaps(t), maps, countFDs(t), fds)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkLarge is unary echo of large payloads, 4 callers, through the
// socket without descriptors (copy) and with them announced (files), in
// new sealed memfds (shared), and from buffers of NewSharedBuffer
// (buffer).
//
//	go test ./rpc -run '^$' -bench Large -benchtime 20x
func BenchmarkLarge(b *testing.B) {
	for _, n := range []int{1 << 20, 16 << 20} {
		for _, mode := range []string{"copy", "files", "shared", "buffer"} {
			b.Run(fmt.Sprintf("%s/%dMiB", mode, n>>20), func(b *testing.B) {
				so := ServerOptions{Settings: wire.Settings{MaxMessageSize: 128 << 20}, SharedThreshold: -1}
				co := ClientOptions{Settings: so.Settings, SharedThreshold: -1}
				if mode != "copy" {
					so.Settings, co.Settings = filesSettings(), filesSettings()
				}
				if mode == "shared" {
					so.SharedThreshold, co.SharedThreshold = 256<<10, 256<<10
				}
				c := sharedPair(b, so, co)
				ctx := context.Background()
				b.SetBytes(int64(n))
				b.SetParallelism(2) // 4 callers on GOMAXPROCS 2
				b.RunParallel(func(pb *testing.PB) {
					req := make([]byte, n)
					if mode == "buffer" {
						buf, release, err := c.NewSharedBuffer(n)
						if err != nil {
							b.Error(err)
							return
						}
						defer release()
						req = buf
					}
					var out []byte
					for pb.Next() {
						if err := c.Invoke(ctx, "T.Echo", &req, &out); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// TestSharedStream: stream messages over the threshold travel shared both
// ways, and nothing stays mapped or open.
func TestSharedStream(t *testing.T) { testSharedStream(t, false) }

func testSharedStream(t *testing.T, loop bool) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	opts := ServerOptions{EventLoop: loop, Settings: filesSettings(), SharedThreshold: 64 << 10}
	srv := NewServer(&opts)
	HandleBidiStream(srv, "T.Stream", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		return eachMsg(st, func(m []byte) error { return st.Send(&m) })
	})
	go srv.Serve(l)
	defer srv.Close()
	fds, maps := countFDs(t), countMemfdMaps(t)
	c, err := Dial("unix://"+path, &ClientOptions{Settings: filesSettings(), SharedThreshold: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := NewStream[[]byte, []byte](ctx, c, "T.Stream", WithCodec(codec.Raw))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range []int{100, 1 << 20, 3 << 20, 64 << 10} {
		msg := bytes.Repeat([]byte{byte(i + 1)}, n)
		if err := cs.Send(&msg); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := cs.RecvMsg(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d of %d bytes differs", i, n)
		}
	}
	// A shared buffer on a stream: sent twice, as its memfd.
	buf, release, err := c.NewSharedBuffer(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	buf[1<<20] = 9
	for range 2 {
		if err := cs.Send(&buf); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := cs.RecvMsg(&got); err != nil || !bytes.Equal(got, buf) {
			t.Fatalf("shared buffer on a stream: %v", err)
		}
	}
	release()
	cs.CloseSend()
	var m []byte
	if err := cs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	cs.Close()
	c.Close()
	checkNoLeak(t, fds, maps, 1+loopFDs(loop, 1))
}

// TestSharedBuffer: a buffer of NewSharedBuffer, filled in place, travels
// as its memfd (the handler sees it mapped) even under SharedThreshold,
// is sealed (read-only) by its first send, can be sent again, and its
// echo comes back through its own mapping; over a connection without
// descriptors it is copied. Nothing stays open or mapped after release.
func TestSharedBuffer(t *testing.T) { testSharedBuffer(t, false) }

func testSharedBuffer(t *testing.T, loop bool) {
	fds, maps := countFDs(t), countMemfdMaps(t)
	c := sharedPair(t,
		ServerOptions{EventLoop: loop, Settings: filesSettings(), SharedThreshold: -1},
		ClientOptions{Settings: filesSettings(), SharedThreshold: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 4 << 20
	buf, release, err := c.NewSharedBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	want := bytes.Clone(buf)
	for range 3 {
		// In one process the handler views the memfd through the
		// client's own mapping of it.
		var addr []byte
		if err := c.Invoke(ctx, "T.Addr", &buf, &addr); err != nil {
			t.Fatal(err)
		}
		if uintptr(binary.LittleEndian.Uint64(addr)) != uintptr(unsafe.Pointer(&buf[0])) {
			t.Fatal("the handler's request is not the buffer: it was copied")
		}
		var out []byte
		if err := c.Invoke(ctx, "T.Echo", &buf, &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, want) {
			t.Fatal("echo differs")
		}
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "/memfd:warren") && !strings.Contains(l, " r--s ") {
			t.Fatalf("the buffer is not read-only after its send: %s", l)
		}
	}
	release()
	release()
	// A client without descriptors copies it.
	plain := sharedPair(t, ServerOptions{EventLoop: loop, Settings: filesSettings()}, ClientOptions{})
	buf2, release2, err := plain.NewSharedBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	buf2[0] = 42
	var out []byte
	if err := plain.Invoke(ctx, "T.Echo", &buf2, &out); err != nil || len(out) != 1<<20 || out[0] != 42 {
		t.Fatalf("copied buffer: %v", err)
	}
	release2()
	if _, _, err := c.NewSharedBuffer(-1); status.CodeOf(err) != status.InvalidArgument {
		t.Fatalf("buffer of -1 bytes: %v", err)
	}
	c.Close()
	plain.Close()
	checkNoLeak(t, fds, maps, 4+loopFDs(loop, 2))
}

// TestSharedDefaultThreshold: with SharedThreshold 0, messages go shared
// from 32 MiB; with a negative one, never.
func TestSharedDefaultThreshold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, th := range []int{0, -1} {
		c := sharedPair(t, ServerOptions{Settings: filesSettings(), SharedThreshold: th}, ClientOptions{Settings: filesSettings(), SharedThreshold: th})
		for _, n := range []int{32<<20 - 1, 32 << 20} {
			req := make([]byte, n)
			var mapped []byte
			if err := c.Invoke(ctx, "T.Mapped", &req, &mapped); err != nil {
				t.Fatal(err)
			}
			if want := th == 0 && n >= 32<<20; (mapped[0] > 0) != want {
				t.Errorf("threshold %d, %d bytes: %d memfd mappings in the handler, want shared %v", th, n, mapped[0], want)
			}
		}
		c.Close()
	}
}
