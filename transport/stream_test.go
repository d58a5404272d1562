package transport_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// TestRawStream uses an authenticated Unix socket as a plain
// io.ReadWriteCloser: a large payload goes through the echo server and back.
func TestRawStream(t *testing.T) {
	skipUnlessCred(t)
	addr := "unix://" + filepath.Join(t.TempDir(), "raw.sock")
	l := listen(t, addr, &transport.ListenConfig{Policy: peer.SameUser()})
	serveEcho(t, l, nil)

	c := dial(t, addr, &transport.DialConfig{ServerPolicy: peer.SameUser()})
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var rwc io.ReadWriteCloser = c

	payload := bytes.Repeat([]byte("warren raw stream "), 64<<10) // about 1 MiB
	written := make(chan error, 1)
	go func() {
		_, err := rwc.Write(payload)
		if err == nil {
			err = c.CloseWrite()
		}
		written <- err
	}()
	got, err := io.ReadAll(rwc)
	if werr := <-written; werr != nil {
		t.Fatalf("write: %v", werr)
	}
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echoed %d bytes, want the %d sent", len(got), len(payload))
	}
	if err := rwc.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSocat drives the echo server with socat, a client that knows nothing
// of warren.
func TestSocat(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix socket files on windows")
	}
	socat, err := exec.LookPath("socat")
	if err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") == "1" {
			t.Fatal("socat is not on PATH and WARREN_REQUIRE_TOOLS=1")
		}
		t.Skip("socat is not on PATH")
	}
	path := filepath.Join(t.TempDir(), "socat.sock")
	l := listen(t, "unix://"+path, nil)
	report := make(chan served, 1)
	serveEcho(t, l, report)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// -t5: after its input ends, wait up to 5s for the server to close.
	cmd := exec.CommandContext(ctx, socat, "-t5", "-", "UNIX-CONNECT:"+path)
	const msg = "hello from socat\n"
	cmd.Stdin = bytes.NewBufferString(msg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("socat: %v\n%s", err, out)
	}
	if string(out) != msg {
		t.Errorf("socat received %q, want %q", out, msg)
	}
	s := receive(t, report)
	if runtime.GOOS == "linux" && (!s.peer.HasCred || s.peer.PID == os.Getpid() || s.peer.PID == 0) {
		t.Errorf("server saw %v, want socat's credentials", s.peer)
	}
}
