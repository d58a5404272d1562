package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
)

// The descriptor flood: a server at a low RLIMIT_NOFILE, in a process of
// its own (the limit is the whole process's), while another process
// connects and closes in a loop, refused by the server's policy.
const (
	floodSockEnv  = "WARREN_TEST_FLOOD_SOCK"
	floodLoopEnv  = "WARREN_TEST_FLOOD_LOOP"
	floodAllowEnv = "WARREN_TEST_FLOOD_ALLOW"
	floodNoFile   = 128
)

// TestFDFlood: a refused peer connecting and closing as fast as it can,
// with the server at RLIMIT_NOFILE 128, does not keep a normal call from
// being served, and accept errors are logged a few times, not per error.
func TestFDFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods for seconds")
	}
	for _, loop := range []bool{false, true} {
		name := "goroutine"
		if loop {
			name = "eventloop"
		}
		t.Run(name, func(t *testing.T) { testFDFlood(t, loop) })
	}
}

func testFDFlood(t *testing.T, loop bool) {
	sock := filepath.Join(t.TempDir(), "f.sock")
	srv := exec.Command(os.Args[0], "-test.run=^TestFDFloodServer$", "-test.count=1")
	srv.Env = append(os.Environ(), floodSockEnv+"="+sock, floodLoopEnv+"="+strconv.FormatBool(loop),
		floodAllowEnv+"="+strconv.Itoa(os.Getpid()))
	stdin, _ := srv.StdinPipe()
	stdout, _ := srv.StdoutPipe()
	var logBuf strings.Builder
	var logMu sync.Mutex
	srv.Stderr = writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logBuf.Write(p)
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	defer stdin.Close()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("server: %q", lines.Text())
	}

	flood := exec.Command(os.Args[0], "-test.run=^TestFDFloodPeer$", "-test.count=1")
	flood.Env = append(os.Environ(), floodSockEnv+"="+sock)
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	floodDone := make(chan error, 1)
	go func() { floodDone <- flood.Wait() }()

	var calls, failed int
	var firstErr error
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		calls++
		if err := floodCall(sock); err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if err := <-floodDone; err != nil {
		t.Fatalf("flood: %v", err)
	}
	stdin.Close()
	var report string
	if lines.Scan() {
		report = lines.Text()
	}
	srv.Wait()
	logMu.Lock()
	log := logBuf.String()
	logMu.Unlock()
	acceptLines := strings.Count(log, "accept error")
	t.Logf("%d of %d calls failed (%v); server: %s; %d accept-error lines", failed, calls, firstErr, report, acceptLines)
	if failed > 0 {
		t.Errorf("%d of %d normal calls failed during the flood: %v", failed, calls, firstErr)
	}
	if acceptLines > 3 {
		t.Errorf("%d accept-error lines in 4 s:\n%s", acceptLines, log)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// floodCall dials the server and makes one call, within 2 s.
func floodCall(sock string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Dial("unix://"+sock, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	var out []byte
	return c.Invoke(ctx, "T.Echo", []byte("x"), &out)
}

// TestFDFloodServer is the server process of TestFDFlood.
func TestFDFloodServer(t *testing.T) {
	sock := os.Getenv(floodSockEnv)
	if sock == "" || os.Getenv(floodAllowEnv) == "" {
		t.Skip("run by TestFDFlood")
	}
	allow, _ := strconv.Atoi(os.Getenv(floodAllowEnv))
	lim := syscall.Rlimit{Cur: floodNoFile, Max: floodNoFile}
	var old syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old)
	lim.Max = old.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(&ServerOptions{
		EventLoop: os.Getenv(floodLoopEnv) == "true",
		Logger:    slogTo(os.Stderr),
		Policy: peer.PolicyFunc(func(p *peer.Peer) error {
			if p.PID != allow {
				return errors.New("not the test")
			}
			return nil
		}),
	})
	HandleRaw(srv, "T.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	go srv.Serve(l)
	fmt.Println("ready")
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
				peak.Store(max(peak.Load(), int64(len(ents))))
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	bufio.NewReader(os.Stdin).ReadString('\n') // until the test closes stdin
	close(stop)
	fmt.Printf("peak descriptors %d of %d\n", peak.Load(), floodNoFile)
	srv.Close()
}

// TestFDFloodPeer is the refused peer of TestFDFlood: it connects and
// closes for 3 s.
func TestFDFloodPeer(t *testing.T) {
	sock := os.Getenv(floodSockEnv)
	if sock == "" || os.Getenv(floodAllowEnv) != "" {
		t.Skip("run by TestFDFlood")
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
				if err != nil {
					continue
				}
				if syscall.Connect(fd, &syscall.SockaddrUnix{Name: sock}) == nil {
					n.Add(1)
				}
				syscall.Close(fd)
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "%d connections\n", n.Load())
}
