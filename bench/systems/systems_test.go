package systems

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed)})
	r.Read(b)
	return b
}

// TestEcho is the smoke test: every system serves and echoes a few calls of
// several sizes, from concurrent callers, over a unix socket and TCP, and
// its stream echoes a few messages; stopping the server removes the socket
// file.
func TestEcho(t *testing.T) {
	for _, sys := range All() {
		for _, network := range []string{"unix", "tcp"} {
			t.Run(sys.Name()+"/"+network, func(t *testing.T) {
				testEcho(t, sys, network)
			})
		}
	}
}

func testEcho(t *testing.T, sys System, network string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	address := "127.0.0.1:0"
	if network == "unix" {
		address = filepath.Join(t.TempDir(), "s.sock")
	}
	addr, stop, err := sys.Serve(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stop()
		if network == "unix" {
			if _, err := os.Stat(address); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket file left behind after stop: %v", err)
			}
		}
	}()
	// A raw connection has one message size; the others take them all.
	sizes := []int{1024, 100 << 10, 1_024_000}
	if sys.Name() == "raw" {
		sizes = []int{128}
	}
	callers := 4
	if sys.OneCallPerConn() {
		callers = 1
	}
	c, err := sys.Dial(ctx, network, addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			cl := c.Caller()
			for _, n := range sizes {
				req := payload(n, uint64(i))
				for range 3 {
					buf, err := cl.Echo(ctx, req)
					if err != nil {
						t.Errorf("echo of %d bytes: %v", n, err)
						return
					}
					if !bytes.Equal(buf, req) {
						t.Errorf("echo of %d bytes came back as %d bytes, different", n, len(buf))
						return
					}
				}
			}
		})
	}
	wg.Wait()

	sc, err := sys.Dial(ctx, network, addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	streamer, ok := sc.(Streamer)
	if !ok {
		return
	}
	st, err := streamer.EchoStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		msg := payload(1<<20, uint64(i))
		if err := st.Send(msg); err != nil {
			t.Fatal(err)
		}
		got, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("stream message %d came back different (%d bytes)", i, len(got))
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestByName(t *testing.T) {
	for _, n := range Names() {
		if s, err := ByName(n); err != nil || s.Name() != n {
			t.Errorf("ByName(%q) = %v, %v", n, s, err)
		}
	}
	if _, err := ByName("corba"); err == nil {
		t.Error("ByName of an unknown system did not fail")
	}
}
