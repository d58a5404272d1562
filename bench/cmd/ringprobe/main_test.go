package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The test binary stands in for ringprobe when RINGPROBE_MAIN is set.
func TestMain(m *testing.M) {
	if os.Getenv("RINGPROBE_MAIN") != "" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func probe(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RINGPROBE_MAIN=1")
	return cmd
}

// TestProbe serves and calls in two processes, over the socket and over
// the rings, and stops the server with SIGINT.
func TestProbe(t *testing.T) {
	for _, mode := range []string{"socket", "ring"} {
		addr := "unix://" + filepath.Join(t.TempDir(), "p.sock")
		srv := probe("server", addr, mode)
		out, err := srv.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
			srv.Process.Kill()
			srv.Wait()
			t.Fatalf("server: %q, %v", line, err)
		}
		got, err := probe("client", addr, mode, "400", "4", "128").Output()
		srv.Process.Signal(os.Interrupt)
		if werr := srv.Wait(); werr != nil {
			t.Errorf("server exit: %v", werr)
		}
		if err != nil || !strings.HasPrefix(string(got), mode+": 400 calls, 4 callers, 128 B: ") {
			t.Fatalf("client: %q, %v", got, err)
		}
	}
	if r := probe("client", "unix:///nonexistent", "ring", "1", "1", "x"); r.Run() == nil {
		t.Error("a bad number accepted")
	}
}
