package main

import (
	"bufio"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/bench/report"
)

// The test binary stands in for the compare binary: run with
// COMPARE_TEST_MAIN set, or as a server child (which the harness starts
// with os.Executable, this binary), it is the program itself.
func TestMain(m *testing.M) {
	if os.Getenv("COMPARE_TEST_MAIN") != "" || len(os.Args) > 1 && os.Args[1] == childFlag {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func compare(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "COMPARE_TEST_MAIN=1", "TMPDIR="+t.TempDir())
	return cmd
}

// TestCompare runs a small comparison with servers in child processes and
// checks the output, the JSON and the SVG.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	jsonFile, svgFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	cmd := compare(t, "-quick", "-reps", "1", "-calls", "200", "-only", "warren,netrpc", "-scenarios", "unary,seqrtt", "-json", jsonFile, "-svg", svgFile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr.String())
	}
	for _, want := range []string{"## unary", "## seqrtt", "warren/netrpc", "| unix | 1 KiB | warren | 16 |"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(stderr.String(), "[1/") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
	var f report.File
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	// warren, warren-shm and netrpc in unary (2 payloads) and seqrtt, and
	// iceoryx2's two seqrtt rows where python3 has it.
	var rows, peers int
	for _, r := range f.Rows {
		if strings.HasPrefix(r.System, "iceoryx2-") {
			peers++
			if r.RPS <= 0 || r.P50US <= 0 {
				t.Errorf("row %+v", r)
			}
			continue
		}
		rows++
		if r.Mode != "separate" || r.RPS <= 0 || r.AllocsPerCall == nil {
			t.Errorf("row %+v", r)
		}
	}
	if rows != 3*2+3 || (peers != 0 && peers != 2) || f.Machine.Cores == 0 || f.Machine.Modules["google.golang.org/grpc"] == "" {
		t.Errorf("JSON: %d rows and %d of iceoryx2, machine %+v", rows, peers, f.Machine)
	}
	b, err = os.ReadFile(svgFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil || strings.Count(string(b), `class="series"`) != 3 {
		t.Errorf("SVG: %v\n%s", err, b)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-only", "corba"}, {"-scenarios", "nope"}, {"extra"}} {
		cmd := compare(t, args...)
		if out, err := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("%q: %v\n%s", args, err, out)
		}
	}
}

// TestInterrupt sends SIGINT during a run: compare must stop its server
// children, remove its sockets and exit with status 130.
func TestInterrupt(t *testing.T) {
	cmd := compare(t, "-only", "warren", "-scenarios", "unary", "-calls", "100000000")
	tmp := strings.TrimPrefix(cmd.Env[len(cmd.Env)-1], "TMPDIR=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the first measurement is under way, then interrupt.
	sc := bufio.NewScanner(stderr)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) { // lines end in \r or \n
		if i := strings.IndexAny(string(data), "\r\n"); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() && !strings.Contains(sc.Text(), "unary warren") {
	}
	time.Sleep(500 * time.Millisecond)
	if entries, _ := os.ReadDir(tmp); len(entries) != 1 {
		t.Errorf("want one socket directory in %s during the run, have %v", tmp, entries)
	}
	cmd.Process.Signal(os.Interrupt)
	go func() {
		for sc.Scan() {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("compare did not stop within 20 s of SIGINT")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("exit: %v", err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("left behind in %s: %v", tmp, entries)
	}
	// No process is still serving from that directory.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), tmp) {
			pid := strings.Split(p, "/")[2]
			t.Errorf("process %s still running: %q", pid, b)
			if n := atoi(pid); n > 0 {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
