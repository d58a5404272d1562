package connbench

import "io"

// Commands Main answers to: the benchmark, and its hidden child processes.
const (
	cmdConns  = "conns"
	cmdServer = "conns-server"
	cmdClient = "conns-client"
)

// IsCommand reports whether name is a command Main runs: "conns", or one of
// the hidden child commands the benchmark starts ("conns-server",
// "conns-client"). A command line dispatches `<name> args...` to Main.
func IsCommand(name string) bool {
	return name == cmdConns || name == cmdServer || name == cmdClient
}

// Main runs args[0] (see IsCommand) with the rest of args as its flags:
//
//	conns [--total N] [--per-shard N] [--mode eventloop|goroutine] ...
//
// The benchmark re-executes the running binary as `<binary> bench
// conns-server ...` and `<binary> bench conns-client ...`, so the command
// that calls Main for `bench conns` must also call it for those. Main
// returns when the run ends; it prints its report to stdout and progress to
// stderr.
func Main(args []string, stdout, stderr io.Writer) error {
	return mainOS(args, stdout, stderr)
}
