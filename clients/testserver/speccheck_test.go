package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// serverEnv, set in the environment of this test binary, makes it run the
// test server (main) instead of the tests.
const serverEnv = "WARREN_TESTSERVER_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestSpecCheck runs testdata/speccheck.py, a client written from
// PROTOCOL.md alone, against this server: the test vectors, calls of every
// kind, a message larger than the flow-control window each way, and the
// server's graceful shutdown on SIGTERM.
func TestSpecCheck(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatalf("python3 is required (WARREN_REQUIRE_TOOLS is set): %v", err)
		}
		t.Skip("python3 not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	sock := filepath.Join(t.TempDir(), "s.sock")
	srv := exec.CommandContext(ctx, os.Args[0], "-addr", "unix://"+sock)
	srv.Env = append(os.Environ(), serverEnv+"=1")
	srv.Stderr = os.Stderr
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "listening on ") {
				close(ready)
				break
			}
		}
		for sc.Scan() { // keep draining until the server exits
		}
		exited <- srv.Wait()
	}()
	defer func() {
		srv.Process.Kill()
		<-exited
	}()
	select {
	case <-ready:
	case err := <-exited:
		exited <- err
		t.Fatalf("the test server exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the test server did not start listening in 30 s")
	}

	const script, vectors = "../../testdata/speccheck.py", "../../testdata/vectors.json"
	for _, f := range []string{script, vectors} {
		if _, err := os.ReadFile(f); err != nil { // read here too, so that go test's cache sees a change
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, python, script, "--vectors", vectors, "--server-pid", strconv.Itoa(srv.Process.Pid), sock)
	outb, err := cmd.CombinedOutput()
	t.Logf("speccheck.py:\n%s", outb)
	if err != nil {
		t.Fatalf("speccheck.py: %v", err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the server did not exit cleanly after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not exit within 10 s of SIGTERM")
	}
}
