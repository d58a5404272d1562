package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warrenipc/warren/bench/systems"
)

// A server child is this program re-executed (Config.Child) to serve one
// system. It talks to its parent over stdin and stdout, one line each way:
//
//	child:  ready unix=<path> tcp=<host:port>
//	parent: mem
//	child:  mem <mallocs> <total-alloc> <heap-inuse> <stack-inuse> <goroutines>
//
// (the first two cumulative, from runtime.MemStats; the others, for
// scenarios that measure memory held, such as idle connections, as of now)
// and it stops its servers (removing the socket file) and exits when its
// stdin ends, which also happens when the parent dies however it dies.

// ServeChild is the child's side: it serves system on a unix socket in dir
// and on a TCP loopback port, and answers the parent until in ends.
func ServeChild(system, dir string, in io.Reader, out io.Writer) error {
	// Ctrl-C reaches the whole process group; the parent decides when the
	// children stop (by closing their stdin), after its last call.
	signal.Ignore(os.Interrupt)
	sys, err := systems.ByName(system)
	if err != nil {
		return err
	}
	srv, err := serve(sys, dir)
	if err != nil {
		return err
	}
	defer srv.stop()
	fmt.Fprintf(out, "ready unix=%s tcp=%s\n", srv.addrs["unix"], srv.addrs["tcp"])
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "mem":
			m := readMem()
			fmt.Fprintf(out, "mem %d %d %d %d %d\n", m.Mallocs, m.TotalAlloc, m.HeapInuse, m.StackInuse, m.Goroutines)
		default:
			return fmt.Errorf("server child: unknown command %q", sc.Text())
		}
	}
	return sc.Err()
}

// server is one system's echo server, in this process or in a child.
type server struct {
	addrs map[string]string // network ("unix", "tcp") -> address
	stop  func()

	// A child's pipes; nil in process.
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// serve starts sys on a unix socket in dir and on a TCP loopback port, in
// this process.
func serve(sys systems.System, dir string) (*server, error) {
	ua, ustop, err := sys.Serve("unix", filepath.Join(dir, sys.Name()+".sock"))
	if err != nil {
		return nil, err
	}
	ta, tstop, err := sys.Serve("tcp", "127.0.0.1:0")
	if err != nil {
		ustop()
		return nil, err
	}
	return &server{
		addrs: map[string]string{"unix": ua.String(), "tcp": ta.String()},
		stop:  func() { ustop(); tstop() },
	}, nil
}

// startChild starts a server child for sys and waits for it to be ready.
func startChild(cmd *exec.Cmd) (*server, error) {
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, in: in, out: bufio.NewReader(outPipe), addrs: map[string]string{}}
	s.stop = s.stopChild
	line, err := s.readLine()
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("server child did not start: %w", err)
	}
	for _, f := range strings.Fields(strings.TrimPrefix(line, "ready ")) {
		if k, v, ok := strings.Cut(f, "="); ok {
			s.addrs[k] = v
		}
	}
	if !strings.HasPrefix(line, "ready ") || s.addrs["unix"] == "" || s.addrs["tcp"] == "" {
		s.stop()
		return nil, fmt.Errorf("server child said %q", line)
	}
	return s, nil
}

// readLine reads one line from the child, giving up after 30 s so that a
// stuck child cannot hang the run.
func (s *server) readLine() (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := s.out.ReadString('\n')
		ch <- result{strings.TrimSuffix(l, "\n"), err}
	}()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill() // ends the read above too
		return "", errors.New("server child did not answer in 30 s")
	}
}

// memStats is a process's memory as the "mem" command reports it.
type memStats struct {
	Mallocs, TotalAlloc   uint64 // cumulative
	HeapInuse, StackInuse uint64 // now
	Goroutines            uint64
}

func readMem() memStats {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memStats{ms.Mallocs, ms.TotalAlloc, ms.HeapInuse, ms.StackInuse, uint64(runtime.NumGoroutine())}
}

// mem returns the child's memory statistics; ok is false for a server in
// this process, whose memory the caller reads itself (readMem).
func (s *server) mem() (m memStats, ok bool, err error) {
	if s.cmd == nil {
		return m, false, nil
	}
	if _, err := io.WriteString(s.in, "mem\n"); err != nil {
		return m, false, fmt.Errorf("server child: %w", err)
	}
	line, err := s.readLine()
	if err != nil {
		return m, false, fmt.Errorf("server child: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "mem" {
		return m, false, fmt.Errorf("server child said %q to mem", line)
	}
	var errs []error
	for i, p := range []*uint64{&m.Mallocs, &m.TotalAlloc, &m.HeapInuse, &m.StackInuse, &m.Goroutines} {
		var err error
		*p, err = strconv.ParseUint(f[i+1], 10, 64)
		errs = append(errs, err)
	}
	return m, true, errors.Join(errs...)
}

// stopChild closes the child's stdin, which makes it stop its servers and
// exit, and kills it if it has not exited after 5 s.
func (s *server) stopChild() {
	s.in.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// servers starts each system's server on first use and stops them all.
type servers struct {
	dir       string
	inProcess bool
	child     func(system, dir string) *exec.Cmd

	mu     sync.Mutex
	m      map[string]*server
	closed bool
}

func (ss *servers) get(ctx context.Context, sys systems.System) (*server, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil, errors.New("servers closed")
	}
	if s := ss.m[sys.Name()]; s != nil {
		return s, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var s *server
	var err error
	if ss.inProcess {
		s, err = serve(sys, ss.dir)
	} else {
		s, err = startChild(ss.child(sys.Name(), ss.dir))
	}
	if err != nil {
		return nil, fmt.Errorf("starting the %s server: %w", sys.Name(), err)
	}
	if ss.m == nil {
		ss.m = map[string]*server{}
	}
	ss.m[sys.Name()] = s
	return s, nil
}

// close stops every server; it may be called more than once.
func (ss *servers) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	var wg sync.WaitGroup
	for _, s := range ss.m {
		wg.Go(s.stop)
	}
	wg.Wait()
	ss.m = nil
}
