//go:build linux

package idle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// childEnv, in a process's environment, makes it a server child: its value
// is "SYSTEM MODE NETWORK DIR".
const childEnv = "WARREN_IDLE_CHILD"

func init() {
	if spec := os.Getenv(childEnv); spec != "" {
		if f := strings.Fields(spec); len(f) > 0 && !builtin(f[0]) {
			return // a peer's: RegisterPeer, from the peer's package, serves it
		}
		serveChildAndExit(spec)
	}
}

func serveChildAndExit(spec string) {
	if err := serveChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "idle server child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// builtin reports whether system is served by this package itself.
func builtin(system string) bool { return system == "warren" || system == "gobwas-epoll" }

// Peer is a WebSocket server measured next to warren, over ws in mode
// eventloop, that lives in a package of its own (so that only the programs
// that import it link it: nbio, for one, starts goroutines when it is
// initialized), which registers it with RegisterPeer.
type Peer struct {
	// Serve listens on TCP loopback, upgrades to WebSocket the requests
	// for WSPath, echoes the messages it receives, writes "ready
	// HOST:PORT\n" to out once it listens, and answers the parent's
	// commands with AnswerStats until in ends.
	Serve func(in io.Reader, out io.Writer) error
	// RacePrefix, if set, is the import path of code in which the peer has
	// known race detector reports: in a program built with the race
	// detector, the server child writes its reports to a file and only
	// those that do not have both accesses under RacePrefix are passed on
	// to stderr.
	RacePrefix string
}

var peers = map[string]Peer{}

// RegisterPeer makes the WebSocket server p measurable as system name. It
// is for the init function of p's package: in a server child for name,
// it serves p and exits.
func RegisterPeer(name string, p Peer) {
	if builtin(name) || peers[name].Serve != nil {
		panic("idle: system " + name + " registered twice")
	}
	peers[name] = p
	Systems = append(Systems, name)
	if spec := os.Getenv(childEnv); spec != "" {
		if f := strings.Fields(spec); len(f) > 0 && f[0] == name {
			serveChildAndExit(spec)
		}
	}
}

// RaiseFileLimit raises this process's soft limit on open files to the hard
// limit and returns the new soft limit.
func RaiseFileLimit() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return 0, err
		}
	}
	return rl.Cur, nil
}

// serveChild serves system (a warren server, or another WebSocket server)
// in mode on network, and answers the parent's commands, one line each way:
//
//	child:  ready ADDRESS
//	parent: rss
//	child:  rss RSS HEAPINUSE STACKINUSE GOROUTINES CONNS
//
// (resident bytes from /proc/self/statm after runtime.GC and
// debug.FreeOSMemory; heap and stack in use from runtime.MemStats; the
// server's open connections). It stops when its input ends.
func serveChild(spec string, in io.Reader, out io.Writer) error {
	f := strings.Fields(spec)
	if len(f) != 4 || !Supported(f[0], f[1], f[2]) {
		return fmt.Errorf("bad %s %q", childEnv, spec)
	}
	system, mode, network, dir := f[0], f[1], f[2], f[3]
	if _, err := RaiseFileLimit(); err != nil {
		return err
	}
	switch {
	case peers[system].Serve != nil:
		return peers[system].Serve(in, out)
	case system == "gobwas-epoll":
		return serveGobwasEpoll(in, out)
	case mode == "bare":
		return serveBare(network, dir, in, out)
	}
	// WARREN_IDLE_PROFILE=PREFIX writes the child's CPU profile to
	// PREFIX.cpu and its heap profile (when the most connections were open)
	// to PREFIX.heap, for go tool pprof.
	prof := os.Getenv("WARREN_IDLE_PROFILE")
	if prof != "" {
		runtime.MemProfileRate = 64
		f, err := os.Create(prof + ".cpu")
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	srv := rpc.NewServer(&rpc.ServerOptions{
		EventLoop:      mode == "eventloop",
		MaxConns:       -1,
		MaxConnsPerUID: -1,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	rpc.HandleRaw(srv, "Idle.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	addr := "tcp://127.0.0.1:0"
	switch network {
	case "unix":
		addr = "unix://" + filepath.Join(dir, "idle.sock")
	case "ws":
		addr = "ws://127.0.0.1:0" + WSPath
	}
	l, err := transport.Listen(addr, nil)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	fmt.Fprintf(out, "ready %s\n", l.Addr())
	sc := bufio.NewScanner(in)
	maxConns := 0 // the heap profile is written with the most connections open
	for sc.Scan() {
		switch sc.Text() {
		case "rss":
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(out, "rss %d %d %d %d %d\n", residentBytes(), ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine(), srv.Stats().Conns)
			if conns := srv.Stats().Conns; prof != "" && conns >= maxConns {
				maxConns = conns
				if f, err := os.Create(prof + ".heap"); err == nil {
					pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		default:
			return fmt.Errorf("unknown command %q", sc.Text())
		}
	}
	srv.Close()
	<-done
	return sc.Err()
}

// residentBytes reads this process's resident set size.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// AnswerStats answers the parent's "rss" commands for a server child other
// than warren's, with conns as the server's open connections, until in ends.
func AnswerStats(in io.Reader, out io.Writer, conns func() int64) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "rss" {
			return fmt.Errorf("unknown command %q", sc.Text())
		}
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(out, "rss %d %d %d %d %d\n", residentBytes(), ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine(), conns())
	}
	return sc.Err()
}

// child is a running server child.
type child struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	dir     string
	addr    string
	network string
	echo    bool // the server echoes messages (a system other than warren)
	// system, and racePrefix: its Peer.RacePrefix
	system, racePrefix string
}

// childStats is the child's answer to "rss".
type childStats struct {
	RSS, HeapInuse, StackInuse uint64
	Goroutines, Conns          int
}

func startChild(system, mode, network string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "widle")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+system+" "+mode+" "+network+" "+dir)
	racePrefix := peers[system].RacePrefix
	if raceEnabled && racePrefix != "" {
		// See checkRaceLogs.
		cmd.Env = append(cmd.Env, "GORACE=log_path="+filepath.Join(dir, "race"))
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(outp), dir: dir, network: network, echo: system != "warren",
		system: system, racePrefix: racePrefix}
	line, err := c.readLine()
	if err != nil || !strings.HasPrefix(line, "ready ") {
		c.stop()
		return nil, fmt.Errorf("server child did not start: %q %v", line, err)
	}
	c.addr = strings.TrimPrefix(line, "ready ")
	return c, nil
}

func (c *child) readLine() (string, error) {
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.out.ReadString('\n')
		ch <- result{strings.TrimSuffix(s, "\n"), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(60 * time.Second):
		c.cmd.Process.Kill()
		return "", errors.New("server child did not answer in 60 s")
	}
}

func (c *child) stats() (childStats, error) {
	var s childStats
	if _, err := io.WriteString(c.in, "rss\n"); err != nil {
		return s, err
	}
	line, err := c.readLine()
	if err != nil {
		return s, err
	}
	f := strings.Fields(line)
	if len(f) != 6 || f[0] != "rss" {
		return s, fmt.Errorf("server child said %q", line)
	}
	var errs [5]error
	s.RSS, errs[0] = strconv.ParseUint(f[1], 10, 64)
	s.HeapInuse, errs[1] = strconv.ParseUint(f[2], 10, 64)
	s.StackInuse, errs[2] = strconv.ParseUint(f[3], 10, 64)
	s.Goroutines, errs[3] = strconv.Atoi(f[4])
	s.Conns, errs[4] = strconv.Atoi(f[5])
	return s, errors.Join(errs[:]...)
}

// waitConns waits until the child has n connections open.
func (c *child) waitConns(n int) (childStats, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := c.stats()
		if err != nil || s.Conns == n {
			return s, err
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("server has %d connections, want %d", s.Conns, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *child) stop() {
	c.in.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	if c.racePrefix != "" {
		checkRaceLogs(c.dir, c.system, c.racePrefix)
	}
	os.RemoveAll(c.dir)
}

// sockaddr returns the address to connect to and its address family.
func (c *child) sockaddr() (unix.Sockaddr, int, error) {
	if strings.HasPrefix(c.addr, "/") {
		return &unix.SockaddrUnix{Name: c.addr}, unix.AF_UNIX, nil
	}
	ap, err := net.ResolveTCPAddr("tcp", c.addr)
	if err != nil {
		return nil, 0, err
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	return sa, unix.AF_INET, nil
}

var clientPreface = wire.AppendPreface(nil, wire.Settings{})

// connectRaw connects a bare socket and sends the warren preface.
func connectRaw(sa unix.Sockaddr, family int) (int, error) {
	return connectSend(sa, family, clientPreface)
}

// connectSend connects a bare (blocking) socket, with 30-second timeouts
// on its reads and writes, and sends first.
func connectSend(sa unix.Sockaddr, family int, first []byte) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	fail := func(op string, err error) (int, error) {
		unix.Close(fd)
		return -1, os.NewSyscallError(op, err)
	}
	tv := unix.NsecToTimeval(int64(30 * time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	for {
		err = unix.Connect(fd, sa)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fail("connect", err)
	}
	if err := writeAll(fd, first); err != nil {
		return fail("write", err)
	}
	return fd, nil
}

// writeAll writes b to the blocking socket fd.
func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		k, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[k:]
	}
	return nil
}

// readPreface reads the server's preface from fd.
func readPreface(fd int) error {
	var buf [wire.MaxPrefaceSize]byte
	n := 0
	for {
		k, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("read", err)
		}
		if k == 0 {
			return io.ErrUnexpectedEOF
		}
		n += k
		_, _, ok, perr := wire.ParsePreface(buf[:n])
		if perr != nil {
			return perr
		}
		if ok {
			return nil
		}
	}
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// openConns opens n raw connections to c with parallel dialers, each
// connecting batch sockets (and sending their prefaces) before it reads the
// server's prefaces, so that the server, not the round trip, sets the pace.
// Over WebSocket, a connection sends its opening handshake request first,
// and then, once the server has answered it, its preface (for warren) or a
// message of the same bytes (for the others, which echo it) in one binary
// message, and reads the server's preface or the echo.
func (c *child) openConns(n, parallel, batch int) ([]int, time.Duration, error) {
	connect, finish := connectRaw, readPreface
	if c.network == "ws" {
		connect = func(sa unix.Sockaddr, family int) (int, error) { return connectWS(sa, family, c.addr) }
		finish = func(fd int) error { return finishWS(fd, c.echo) }
	}
	if _, _, err := c.sockaddr(); err != nil {
		return nil, 0, err
	}
	fds := make([]int, n)
	var mu sync.Mutex
	var first error
	next := 0
	start := time.Now()
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			sa, family, _ := c.sockaddr() // one each: connect writes into it
			for {
				mu.Lock()
				i := next
				k := min(batch, n-i)
				next += k
				stop := k <= 0 || first != nil
				mu.Unlock()
				if stop {
					return
				}
				var err error
				for j := i; j < i+k && err == nil; j++ {
					fds[j], err = connect(sa, family)
				}
				for j := i; j < i+k && err == nil; j++ {
					if err = finish(fds[j]); err != nil {
						err = fmt.Errorf("connection %d: %w", j, err)
					}
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if first != nil {
		var open []int
		for _, fd := range fds {
			if fd > 0 {
				open = append(open, fd)
			}
		}
		closeAll(open)
		return nil, el, first
	}
	return fds, el, nil
}

// socketCaches are the slab caches a connection's objects live in: the
// sockets, their inodes, dentries and files, epoll's entries and socket
// buffers (and the caches SLUB merged them with). Other caches (and
// kmalloc) are left out: they move with whatever else runs on the machine.
var socketCaches = []string{"UNIX", "TCP", "tcp", "sock_inode", "filp", "dentry", "eventpoll", "skbuff", "request_sock"}

func socketCache(name string) bool {
	for _, p := range socketCaches {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// mergedSocketCaches returns the names under which /proc/slabinfo may list
// socket objects: SLUB merges caches of the same object size, and lists a
// merged cache under one of its names (on this machine, unix sockets are
// counted as "signal_cache").
func mergedSocketCaches() map[string]bool {
	names := map[string]bool{}
	ents, err := os.ReadDir("/sys/kernel/slab")
	if err != nil {
		return names
	}
	targets := map[string]bool{}
	link := map[string]string{}
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join("/sys/kernel/slab", e.Name()))
		if err != nil {
			continue
		}
		link[e.Name()] = t
		if socketCache(e.Name()) {
			targets[t] = true
		}
	}
	for name, t := range link {
		if targets[t] {
			names[name] = true
		}
	}
	return names
}

// slabBytes returns the kernel's slab memory by socket-related cache:
// active objects times object size, from /proc/slabinfo (which needs root),
// or nil.
func slabBytes() map[string]int64 {
	merged := mergedSocketCaches()
	f, err := os.Open("/proc/slabinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	m := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 || strings.HasPrefix(fl[0], "#") || fl[0] == "slabinfo" {
			continue
		}
		active, err1 := strconv.ParseInt(fl[1], 10, 64)
		size, err2 := strconv.ParseInt(fl[3], 10, 64)
		if err1 == nil && err2 == nil && (socketCache(fl[0]) || merged[fl[0]]) {
			m[fl[0]] += active * size
		}
	}
	return m
}

// Result is one idle-memory measurement.
type Result struct {
	System        string // warren, or another WebSocket server (see Systems)
	Mode, Network string
	Conns         int
	// ServerBytesPerConn is the server process's resident memory with the
	// connections open, less what it had with none, per connection, both
	// read after runtime.GC and debug.FreeOSMemory.
	ServerBytesPerConn float64
	// HeapBytesPerConn is the same for the Go heap in use, and
	// StackBytesPerConn for goroutine stacks.
	HeapBytesPerConn, StackBytesPerConn float64
	// KernelBytesPerConn is the growth of the kernel's socket-related slab
	// objects (/proc/slabinfo: active objects times their size, in the
	// caches of socketCaches) per connection: both ends (the client's
	// socket too) and the server's poller entries. It is system-wide, so
	// other activity on the machine adds some noise; 0 when /proc/slabinfo
	// cannot be read.
	KernelBytesPerConn float64
	// TopKernel lists the slab caches that grew most, with their bytes per
	// connection.
	TopKernel  []string
	Goroutines int // the server's goroutines with the connections open
	BaseRSS    uint64
	RSS        uint64
}

// callRequest is a unary call to Idle.Echo on stream 1: HEADERS, then
// DATA|END with 8 bytes.
var callRequest = func() []byte {
	b := wire.AppendFrame(nil, 1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Idle.Echo", 0, 0, nil))
	return wire.AppendFrame(b, 1, wire.TypeData, wire.FlagEnd, []byte("12345678"))
}()

// callDepth is how many calls callAll keeps in flight;
// WARREN_IDLE_CALL_DEPTH changes it.
var callDepth = 1000

func init() {
	if d, err := strconv.Atoi(os.Getenv("WARREN_IDLE_CALL_DEPTH")); err == nil {
		callDepth = d
	}
}

// callAll makes one call on every connection, callDepth at a time: it
// sends requests, then reads each reply up to its TRAILERS|END.
func callAll(fds []int) error {
	for len(fds) > 0 {
		k := min(len(fds), max(callDepth, 1))
		if err := callBatch(fds[:k]); err != nil {
			return err
		}
		fds = fds[k:]
	}
	return nil
}

func callBatch(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.Write(fd, callRequest); err != nil {
			return os.NewSyscallError("write", err)
		}
	}
	buf := make([]byte, 4096)
	for _, fd := range fds {
		n := 0
	read:
		for {
			k, err := unix.Read(fd, buf[n:])
			if err == unix.EINTR {
				continue
			}
			if err != nil || k == 0 {
				return fmt.Errorf("reading a reply: %v", err)
			}
			n += k
			for {
				rest, h, _, ok, err := wire.ParseFrame(buf[:n], 1<<20)
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				n = copy(buf, rest)
				if h.Type == wire.TypeTrailers {
					break read
				}
			}
		}
	}
	return nil
}

// workerIdle is how long the server's idle call workers live (rpc's
// workerIdle, 10 s), and a margin.
var workerIdle = 11 * time.Second

// Measure starts a warren server child in mode on network, opens n idle
// connections to it, waits settle, and measures. With call, every
// connection first makes one unary call, and the measurement waits for the
// server's idle workers to exit: what a connection keeps once it has been
// used and gone idle again.
func Measure(mode, network string, n int, settle time.Duration, call bool) (Result, error) {
	return MeasureSystem("warren", mode, network, n, settle, call)
}

// MeasureSystem is Measure for system (see Systems and Supported). The
// connections of network "ws" make no calls: call is for warren over unix
// and tcp.
func MeasureSystem(system, mode, network string, n int, settle time.Duration, call bool) (Result, error) {
	r := Result{System: system, Mode: mode, Network: network, Conns: n}
	if !Supported(system, mode, network) {
		return r, fmt.Errorf("idle: %s cannot be measured in mode %s over %s", system, mode, network)
	}
	if call && (system != "warren" || network == "ws") {
		return r, fmt.Errorf("idle: calls are measured for warren over unix and tcp only, not %s over %s", system, network)
	}
	c, err := startChild(system, mode, network)
	if err != nil {
		return r, err
	}
	defer c.stop()
	// Warm up: the code paths of accepting and serving a connection are
	// paged in, and the goroutines' stacks and the loop's slices grow to
	// what n connections need (the connection table gives its pages back
	// when its connections close, so they are counted below).
	fds, _, err := c.openConns(min(n, 1000), 1, 1)
	if err != nil {
		return r, err
	}
	closeAll(fds)
	if _, err := c.waitConns(0); err != nil {
		return r, err
	}
	time.Sleep(settle)
	base, err := c.stats()
	if err != nil {
		return r, err
	}
	fds, _, err = c.openConns(n, 1, 1)
	if err != nil {
		return r, err
	}
	if _, err := c.waitConns(n); err != nil {
		closeAll(fds)
		return r, err
	}
	if call {
		if err := callAll(fds); err != nil {
			closeAll(fds)
			return r, err
		}
		settle = max(settle, workerIdle)
	}
	time.Sleep(settle)
	st, err := c.stats()
	if err != nil {
		closeAll(fds)
		return r, err
	}
	// The kernel's share is what closing the connections gives back (the
	// slab state before they were opened still holds sockets of the
	// warm-up on their way out).
	slab1 := slabBytes()
	closeAll(fds)
	if _, err := c.waitConns(0); err != nil {
		return r, err
	}
	time.Sleep(settle)
	slab0 := slabBytes()
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / float64(n) }
	r.BaseRSS, r.RSS, r.Goroutines = base.RSS, st.RSS, st.Goroutines
	r.ServerBytesPerConn = per(base.RSS, st.RSS)
	r.HeapBytesPerConn = per(base.HeapInuse, st.HeapInuse)
	r.StackBytesPerConn = per(base.StackInuse, st.StackInuse)
	if slab0 != nil && slab1 != nil {
		type delta struct {
			name string
			d    int64
		}
		var total int64
		var ds []delta
		for k, v := range slab1 {
			d := v - slab0[k]
			total += d
			if d > 0 {
				ds = append(ds, delta{k, d})
			}
		}
		for k, v := range slab0 {
			if _, ok := slab1[k]; !ok {
				total -= v
			}
		}
		r.KernelBytesPerConn = float64(total) / float64(n)
		sort.Slice(ds, func(i, j int) bool { return ds[i].d > ds[j].d })
		for _, d := range ds[:min(len(ds), 6)] {
			r.TopKernel = append(r.TopKernel, fmt.Sprintf("%s %.0f", d.name, float64(d.d)/float64(n)))
		}
	}
	return r, nil
}

// AcceptRate starts a server child in mode on a unix socket and opens n
// connections to it from parallel dialers, each connecting batch sockets
// and sending their prefaces, then reading the server's; it returns
// connections per second.
func AcceptRate(mode string, n, parallel, batch int) (float64, error) {
	c, err := startChild("warren", mode, "unix")
	if err != nil {
		return 0, err
	}
	defer c.stop()
	fds, _, err := c.openConns(min(n, 500), parallel, batch) // warm up
	if err != nil {
		return 0, err
	}
	closeAll(fds)
	if _, err := c.waitConns(0); err != nil {
		return 0, err
	}
	fds, el, err := c.openConns(n, parallel, batch)
	if err != nil {
		return 0, err
	}
	closeAll(fds)
	return float64(n) / el.Seconds(), nil
}
