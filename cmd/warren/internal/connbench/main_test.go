//go:build linux

package connbench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// childEnv marks a run of the test binary as one of the benchmark's child
// processes (as `warren bench conns-server ...` would be).
const childEnv = "WARREN_CONNBENCH_CHILD"

// dieEnv makes a server child exit at its second "count" command: a shard
// that dies in the middle of a run.
const dieEnv = "WARREN_CONNBENCH_DIE"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childProcess())
	}
	goleak.VerifyTestMain(m)
}

func childProcess() int {
	args := os.Args[1:]
	if os.Getenv(dieEnv) == "1" && len(args) > 0 && args[0] == cmdServer {
		// Stand between stdin and the server: die on the second count.
		r, w, err := os.Pipe()
		if err != nil {
			panic(err)
		}
		in := os.Stdin
		os.Stdin = r
		go func() {
			sc := bufio.NewScanner(in)
			counts := 0
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "count") {
					if counts++; counts == 2 {
						os.Exit(7)
					}
				}
				io.WriteString(w, sc.Text()+"\n")
			}
			w.Close()
		}()
	}
	if err := Main(args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}
