package testutil

import (
	"errors"
	"io"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestChunkReader(t *testing.T) {
	boom := errors.New("boom")
	r := &ChunkReader{T: t, Chunks: []string{"ab", "c"}, Err: boom}
	b, err := io.ReadAll(io.LimitReader(r, 3))
	if string(b) != "abc" || err != nil {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := r.Read(make([]byte, 1)); err != boom {
		t.Fatalf("after the chunks: %v", err)
	}
}

func TestUnixPair(t *testing.T) {
	c, s := UnixPair(t)
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(s, b); err != nil || string(b) != "hi" {
		t.Fatalf("%q %v", b, err)
	}
	n := 0
	WaitFor(t, func() bool { n++; return n == 3 })
}

func TestTLSConfigs(t *testing.T) {
	srv, cli := TLSConfigs(t)
	if len(srv.Certificates) != 1 || cli.RootCAs == nil {
		t.Fatal("incomplete configurations")
	}
	if srv2, _ := TLSConfigs(t); srv2 != srv {
		t.Fatal("the certificate was made twice")
	}
}
