package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/warrenipc/warren/cmd/warren/internal/connbench"
	"github.com/warrenipc/warren/cmd/warren/internal/soak"
)

var benchHelp = help{
	usage: "warren bench [compare flags] | warren bench conns [--total N] ... | warren bench soak [--duration D] ...",
	text: `
Run the comparison benchmarks: warren against gRPC-Go, ttrpc, drpc, net/rpc
and raw sockets, in the bench module of the warren source tree (bench/, a
separate Go module). bench looks for the source tree from the working
directory and from where this warren binary was built, and runs
'go run ./cmd/compare' in its bench directory with the remaining arguments
(use "--" before a flag meant for compare, such as -h). Without the source
tree it says how to get it.

'warren bench conns' is the many-connections run: it holds --total idle
connections (1,000,000 if memory allows) over unix sockets, or over tcp or
WebSocket on the loopback (--network tcp|ws), in shards of server and client
processes of at most 19,000 connections each (the per-process open-file
limit), makes one call on every connection per round, and reports memory
per connection, connect rate and round time ('warren bench conns -h').

'warren bench soak --duration D' runs a server and client processes making
a random mix of calls, streams, cancels and deadlines while clients are
killed with SIGKILL, accounts for every call, and ends with "lost N
duplicated N" ('warren bench soak -h'; RELIABILITY.md).`,
	examples: `  warren bench
  warren bench -- -h
  warren bench conns --total 100000
  warren bench conns --network ws --total 100000
  warren bench soak --duration 60s`,
}

const benchModule = "github.com/warrenipc/warren/bench"

func cmdBench(e *env, args []string) error {
	if len(args) > 0 && connbench.IsCommand(args[0]) { // bench conns, and its children
		return connbench.Main(args, e.stdout, e.stderr)
	}
	if len(args) > 0 && soak.IsCommand(args[0]) { // bench soak, and its children
		return soak.Main(args, e.stdout, e.stderr)
	}
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			printHelp(e.stdout, newFlagSet("bench"), benchHelp)
			return nil
		case "--":
			args = args[1:]
		}
	}
	dir, why := findBench()
	if dir == "" {
		return fmt.Errorf("%s.\nTo run the benchmarks, get the warren source and run the comparison there:\n"+
			"  git clone https://github.com/warrenipc/warren\n"+
			"  cd warren/bench && go run ./cmd/compare\n"+
			"or run 'warren bench' from inside the source tree", why)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("found the benchmarks in %s, but the go command is not on PATH: install Go, then run:\n  cd %s && go run ./cmd/compare", dir, dir)
	}
	cmdline := append([]string{"run", "./cmd/compare"}, args...)
	fmt.Fprintf(e.stderr, "warren bench: in %s: go %s\n", dir, strings.Join(cmdline, " "))
	cmd := exec.Command(goBin, cmdline...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	// Ctrl-C reaches the benchmark (same process group); wait for it to
	// finish rather than die first.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting go run ./cmd/compare in %s: %w", dir, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				cmd.Process.Signal(sig)
			}
			continue
		case err = <-done:
		}
		break
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code > 0 {
			return exitStatus(code)
		}
		return exitStatus(exitError)
	}
	return err
}

// findBench returns the bench module's directory, or "" and why not.
// It looks in the working directory and its parents, then in the source
// tree this binary was built from and its executable's directory and their
// parents.
func findBench() (dir, why string) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file)) // not with -trimpath
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	why = "the warren source tree (with bench/cmd/compare) was not found in the working directory, the directory this warren was built in, or their parents"
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			b := filepath.Join(d, "bench")
			if isBenchModule(b) {
				if fi, err := os.Stat(filepath.Join(b, "cmd", "compare")); err == nil && fi.IsDir() {
					return b, ""
				}
				why = fmt.Sprintf("the bench module at %s has no cmd/compare (is the checkout complete and up to date?)", b)
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", why
}

// isBenchModule reports whether dir holds the bench module's go.mod.
func isBenchModule(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == benchModule
		}
	}
	return false
}
