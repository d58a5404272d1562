// Command warren serves and calls warren services.
//
//	warren serve [--addr ADDR] [--mode 0600] [--allow-uid N]... [--allow-gid N]... [--token T | --no-auth] [--event-loop]
//	warren serve --addr tls://HOST:PORT --cert F --key F [--client-ca F [--allow-san NAME]... [--allow-cn NAME]...]
//	warren call [--token T] [--ca F] [--cert F --key F] [--server-name NAME] ADDR METHOD [JSON]
//	warren list [--token T] [--json] ADDR
//	warren ping [--token T] [-n N] ADDR
//	warren certs [--host NAME]... DIR
//	warren demo [-calls N] [-duration D]
//	warren bench [compare flags]
//	warren version (or warren --version)
//
// serve runs the counter service (package counter) over warren RPC and HTTP
// on one address, with a live page for browsers at GET / (on a network
// address, behind a token it prints in the page's URL); call, list and ping talk to any warren server; demo starts
// the counter service on a private socket, drives it over RPC, a Watch
// stream and HTTP and reports; bench runs the comparison benchmarks of the
// bench module.
//
// ADDR is a warren address (unix:///abs/path, unix:rel/path, unix:@name,
// tcp://host:port, tls://host:port, ws:// and wss://host:port/path; for serve
// also systemd: and systemd:NAME, a socket passed by systemd) or "default": $XDG_RUNTIME_DIR/warren/warren.sock, or
// $TMPDIR/warren-UID/warren.sock without XDG_RUNTIME_DIR.
//
// Every command takes -h (or --help). Errors go to stderr as "error: ..."
// (with the status code for a failed call, as in "error: not_found: ...");
// the exit status is 1 for errors and 2 for usage mistakes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// env is what a command reads and writes.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

var commands []command

func init() {
	// In init: the commands' help refers to the list.
	commands = []command{
		{"serve", "serve the counter service over RPC and HTTP on one address", cmdServe},
		{"call", "call a method with a JSON request and print the reply", cmdCall},
		{"list", "list a server's methods and their message shapes", cmdList},
		{"ping", "measure round trips to a server", cmdPing},
		{"certs", "write development certificates for TLS with client certificates", cmdCerts},
		{"demo", "serve the counter service on a private socket, drive it and report", cmdDemo},
		{"bench", "run the comparison benchmarks (bench/cmd/compare)", cmdBench},
		{"version", "print the version of warren and of the Go toolchain", cmdVersion},
	}
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: warren <command> [flags] [arguments]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-7s %s\n", c.name, c.summary)
	}
	b.WriteString(`
ADDR is unix:///abs/path, unix:rel/path, unix:@name, tcp://host:port,
tls://host:port, ws://host:port/path, wss://host:port/path, or "default"
(the address 'warren serve' uses without --addr); 'warren serve' also takes
systemd: or systemd:NAME, a socket passed by systemd socket activation.

examples:
  warren serve &
  warren call default Counter.Set '{"name":"a","value":1}'
  warren demo

run 'warren <command> -h' for the flags and examples of a command`)
	return b.String()
}

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in the command line: exit status 2.
type usageError struct {
	cmd string // "" for the top level
	msg string
}

func (e *usageError) Error() string { return e.msg }

// exitStatus ends the process with a status and nothing more to print
// (the command has said what it had to).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage())
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			// "warren help serve" is "warren serve -h".
			return run([]string{args[1], "-h"}, stdin, stdout, stderr)
		}
		fmt.Fprintln(stdout, usage())
		return exitOK
	case "-version", "--version":
		return report(e, "version", cmdVersion(e, args[1:]))
	}
	for _, c := range commands {
		if c.name == name {
			return report(e, c.name, c.run(e, args[1:]))
		}
	}
	fmt.Fprintf(stderr, "error: unknown command %q\n\n%s\n", name, usage())
	return exitUsage
}

// report prints err, if any, and returns the exit status.
func report(e *env, cmd string, err error) int {
	var ue *usageError
	var es exitStatus
	var ce *callError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &es):
		return int(es)
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "error: %s\nrun 'warren %s -h' for usage\n", ue.msg, cmd)
		return exitUsage
	case errors.As(err, &ce):
		fmt.Fprintf(e.stderr, "error: %s: %s\n", ce.code, ce.msg)
		return exitError
	}
	fmt.Fprintf(e.stderr, "error: %s\n", strings.TrimPrefix(err.Error(), "warren: "))
	return exitError
}

// help describes a command for its -h.
type help struct {
	usage    string // "warren call ADDR METHOD [JSON]"
	text     string // what it does
	examples string // indented example lines
}

// newFlagSet returns a FlagSet that reports nothing itself: parseFlags
// turns its errors into usage errors and -h into the command's help.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// errHelp is returned by parseFlags after printing the help.
var errHelp = exitStatus(exitOK)

// parseFlags parses args with fs, allowing flags after the positional
// arguments too ("warren call ADDR M '{}' -timeout 1s"); "--" ends the
// flags. It returns the positional arguments. On -h it prints the help to
// stdout and returns errHelp.
func parseFlags(e *env, fs *flag.FlagSet, h help, args []string) ([]string, error) {
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			printHelp(e.stdout, fs, h)
			return nil, errHelp
		}
		if err != nil {
			return nil, &usageError{cmd: fs.Name(), msg: err.Error() + "\nusage: " + h.usage}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func printHelp(w io.Writer, fs *flag.FlagSet, h help) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", h.usage, strings.TrimSpace(h.text))
	var flags strings.Builder
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nflags (-flag and --flag both work):\n%s", flags.String())
	}
	fmt.Fprintf(w, "\nexamples:\n%s\n", strings.TrimRight(h.examples, "\n"))
}

// wantArgs checks the number of positional arguments.
// parseArgs parses a command's flags and checks that between lo and hi
// positional arguments remain, which it returns.
func parseArgs(e *env, fs *flag.FlagSet, h help, args []string, lo, hi int) ([]string, error) {
	pos, err := parseFlags(e, fs, h, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs(fs, h, pos, lo, hi); err != nil {
		return nil, err
	}
	return pos, nil
}

func wantArgs(fs *flag.FlagSet, h help, pos []string, lo, hi int) error {
	switch {
	case len(pos) < lo:
		return &usageError{cmd: fs.Name(), msg: "missing arguments\nusage: " + h.usage}
	case len(pos) > hi:
		return &usageError{cmd: fs.Name(), msg: fmt.Sprintf("unexpected argument %q\nusage: %s", pos[hi], h.usage)}
	}
	return nil
}
