package harness

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// rrScript is the iceoryx2 request-response peer (PyPI iceoryx2, Python
// bindings): a server and a client process, 128-byte round trips.
//
//go:embed iceoryx2/rr.py
var rrScript []byte

// iceoryxCases are seqrtt's peer rows: iceoryx2's request-response round
// trip at 128 bytes, polling and event-driven, run as python3 processes
// when python3 can import iceoryx2 (and warren is among the systems).
func (e *Env) iceoryxCases() []Case {
	if !e.has("warren") || exec.Command("python3", "-c", "import iceoryx2").Run() != nil {
		return nil
	}
	var cs []Case
	for _, mode := range []string{"poll", "event"} {
		row := e.row("seqrtt", "iceoryx2-"+mode, "shm")
		calls := min(e.P.SeqCalls, e.P.UnaryCalls) // -calls bounds them
		row.PayloadBytes, row.Concurrency, row.Calls, row.Conns = 128, 1, calls, 1
		row.Note = "Python bindings (PyPI iceoryx2), server and client processes; " + map[string]string{
			"poll": "both spin on receive", "event": "each sleeps on an event listener the other notifies"}[mode]
		cs = append(cs, Case{Row: row, Run: func(ctx context.Context) (Sample, error) {
			return iceoryxRun(ctx, mode, calls)
		}})
	}
	return cs
}

// iceoryxRun starts the server, waits for it, and runs the client's calls.
func iceoryxRun(ctx context.Context, mode string, calls int) (Sample, error) {
	dir, err := os.MkdirTemp("", "warren-iox")
	if err != nil {
		return Sample{}, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "rr.py")
	if err := os.WriteFile(script, rrScript, 0o600); err != nil {
		return Sample{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("warren-bench-%d-%s", os.Getpid(), mode)
	srv := exec.CommandContext(ctx, "python3", script, "server", mode, name)
	out, err := srv.StdoutPipe()
	if err != nil {
		return Sample{}, err
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		return Sample{}, err
	}
	defer func() { // SIGINT: iceoryx2 removes the files of the node it drops
		srv.Process.Signal(os.Interrupt)
		t := time.AfterFunc(5*time.Second, func() { srv.Process.Kill() })
		srv.Wait()
		t.Stop()
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		return Sample{}, fmt.Errorf("iceoryx2 server: %q, %v", line, err)
	}
	cli := exec.CommandContext(ctx, "python3", script, "client", mode, name, strconv.Itoa(calls))
	cli.Stderr = os.Stderr
	b, err := cli.Output()
	if err != nil {
		return Sample{}, fmt.Errorf("iceoryx2 client: %w", err)
	}
	var res struct {
		RTT []int64 `json:"rtt_ns"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return Sample{}, fmt.Errorf("iceoryx2 client: %w", err)
	}
	s := Sample{Calls: len(res.RTT), Lat: make([]time.Duration, len(res.RTT))}
	for i, ns := range res.RTT {
		s.Lat[i] = time.Duration(ns)
		s.Elapsed += time.Duration(ns)
	}
	return s, nil
}
