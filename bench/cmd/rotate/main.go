// Command rotate measures what cold buffers cost a bare unix-socket echo
// of large messages: the raw echo of the stream scenario (one goroutine on
// the server reading a message and writing it back; on the client one
// goroutine sending while another receives), but both ends read each
// message into the next of N buffers in turn instead of into one. With one
// buffer the memory a message is copied into is still in the caches from
// the message before; with more, it is not. Warren's buffer pool hands out
// the buffer returned last for this reason (BENCHMARKS.md, "Hot buffers").
//
//	cd bench && go run ./cmd/rotate [-buffers 1,2,4,16] [-size 1048576] [-messages 3000] [-rounds 3]
//
// Each measurement runs the server in a child process, as the other
// scenarios do; rounds alternate the buffer counts, and the table gives
// each count's median and range of MB/s (messages echoed, each counted
// once).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/warrenipc/warren/bench/stats"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rotate:", err)
		os.Exit(1)
	}
}

func run() error {
	serve := flag.String("serve", "", "")
	bufList := flag.String("buffers", "1,2,4,16", "comma-separated numbers of buffers each end cycles through")
	size := flag.Int("size", 1<<20, "message size in bytes")
	messages := flag.Int("messages", 3000, "messages echoed per measurement")
	rounds := flag.Int("rounds", 3, "measurements of each buffer count, interleaved")
	flag.Parse()
	if *size <= 0 || *messages <= 0 || *rounds <= 0 {
		return errors.New("-size, -messages and -rounds must be positive")
	}
	var counts []int
	for f := range strings.SplitSeq(*bufList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-buffers: %q is not a positive number", f)
		}
		counts = append(counts, n)
	}
	if *serve != "" {
		n, _ := strconv.Atoi(flag.Arg(0))
		return echoServer(*serve, *size, n)
	}
	dir, err := os.MkdirTemp("", "rotate")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rates := make(map[int][]float64)
	for r := range *rounds {
		for _, n := range counts {
			mbs, err := measure(filepath.Join(dir, fmt.Sprintf("s%d-%d", r, n)), n, *size, *messages)
			if err != nil {
				return err
			}
			rates[n] = append(rates[n], mbs)
		}
	}
	fmt.Printf("| buffers | MB/s, median [min-max] of %d | vs %d |\n|---|---|---|\n", *rounds, counts[0])
	first := stats.Of(rates[counts[0]]).Median
	for _, n := range counts {
		sp := stats.Of(rates[n])
		fmt.Printf("| %d | %.0f [%.0f-%.0f] | %.2fx |\n", n, sp.Median, sp.Min, sp.Max, sp.Median/first)
	}
	return nil
}

// measure starts an echo server child on path cycling through n buffers,
// echoes messages of size bytes through it with n buffers on this side,
// and returns MB/s.
func measure(path string, n, size, messages int) (float64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self, "-serve", path, "-size", strconv.Itoa(size), strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = net.Dial("unix", path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("server on %s: %w", path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer c.Close()
	msg := make([]byte, size)
	bufs := makeBufs(n, size)
	sent := make(chan error, 1)
	t0 := time.Now()
	go func() {
		for range messages {
			if _, err := c.Write(msg); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for i := range messages {
		if _, err := io.ReadFull(c, bufs[i%n]); err != nil {
			return 0, fmt.Errorf("receive: %w", err)
		}
	}
	el := time.Since(t0)
	if err := <-sent; err != nil {
		return 0, fmt.Errorf("send: %w", err)
	}
	return float64(messages) * float64(size) / el.Seconds() / 1e6, nil
}

// echoServer serves one connection on path: it reads each message of size
// bytes into the next of n buffers and writes it back.
func echoServer(path string, size, n int) error {
	if n < 1 {
		return errors.New("serve: buffer count missing")
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := l.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	bufs := makeBufs(n, size)
	for i := 0; ; i++ {
		b := bufs[i%n]
		if _, err := io.ReadFull(c, b); err != nil {
			return nil // the client is done
		}
		if _, err := c.Write(b); err != nil {
			return nil
		}
	}
}

func makeBufs(n, size int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	return bufs
}
