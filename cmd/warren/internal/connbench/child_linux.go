package connbench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// child is a child process the orchestrator started and talks to: commands
// on its stdin, one reply line each on its stdout.
type child struct {
	name  string
	cmd   *exec.Cmd
	stdin *os.File    // our end of its stdin; closing it tells it to exit
	lines chan string // its stdout, line by line; closed at EOF
	done  chan struct{}
	err   error       // cmd.Wait's result, once done is closed
	quit  atomic.Bool // we are stopping it: its exit is expected
}

// startChild starts exe with args in a process group of its own (so that
// Ctrl-C at a terminal reaches only the orchestrator, which stops the
// children in order) and with SIGTERM as its parent-death signal; it also
// exits when its stdin closes (see childMain). died is called if it exits
// before stopChildren.
func startChild(name, exe string, args, env []string, stderr io.Writer, died func(error)) (*child, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: fmt.Sprintf("%s (pid %d)", name, cmd.Process.Pid), cmd: cmd, stdin: inW,
		lines: make(chan string, 1), done: make(chan struct{})}
	go func() {
		defer close(c.lines)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.done)
		if !c.quit.Load() {
			died(fmt.Errorf("%s exited unexpectedly: %v", c.name, c.err))
		}
	}()
	return c, nil
}

// reply waits for the child's next line. "ok ..." gives the fields after
// ok; "err ..." and anything else an error.
func (c *child) reply(ctx context.Context) ([]string, error) {
	select {
	case line, ok := <-c.lines:
		if !ok {
			<-c.done
			return nil, fmt.Errorf("%s exited: %v", c.name, c.err)
		}
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "ok" || f[0] == "ready") {
			return f[1:], nil
		}
		return nil, fmt.Errorf("%s: %s", c.name, strings.TrimPrefix(line, "err "))
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// call sends a command and waits for its reply.
func (c *child) call(ctx context.Context, cmd string) ([]string, error) {
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return nil, fmt.Errorf("%s: sending %q: %w", c.name, cmd, err)
	}
	return c.reply(ctx)
}

// stopChildren closes the children's stdin, which makes them exit; those
// still running after grace are killed (their process group, which only
// they are in). It returns when all have exited.
func stopChildren(cs []*child, grace time.Duration) {
	for _, c := range cs {
		c.quit.Store(true)
		c.stdin.Close()
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
wait:
	for _, c := range cs {
		select {
		case <-c.done:
		case <-deadline.C:
			break wait
		}
	}
	for _, c := range cs {
		select {
		case <-c.done:
		default:
			syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	for _, c := range cs {
		<-c.done
		for range c.lines { // the reader ends at EOF
		}
	}
}

// linePrefixer writes whole lines to w, each prefixed; the children's
// stderr goes through one each, so their lines do not interleave.
type linePrefixer struct {
	mu     *sync.Mutex // shared by every prefixer on w
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.mu.Lock()
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.mu.Unlock()
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 4096 { // a very long line: pass it on in parts
		p.mu.Lock()
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf)
		p.mu.Unlock()
		p.buf = p.buf[:0]
	}
	return len(b), nil
}
