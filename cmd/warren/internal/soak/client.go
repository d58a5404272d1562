package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
)

// Report is what a client process prints when it ends.
type Report struct {
	Started    int64            `json:"started"`    // calls begun
	Outcomes   map[string]int64 `json:"outcomes"`   // calls ended, by "ok" or status code
	Wrong      int64            `json:"wrong"`      // replies that did not match their request
	Lost       int64            `json:"lost"`       // calls or stream messages that never arrived
	Duplicated int64            `json:"duplicated"` // outcomes or stream messages seen twice
	Latencies  []int64          `json:"latencies"`  // a sample of unary call latencies (ns)
}

// tally accounts for a client's calls: each call gets exactly one outcome.
type tally struct {
	started, wrong, lost, dup atomic.Int64
	mu                        sync.Mutex
	outcomes                  map[string]int64
	lat                       []int64
	seen                      int64
	rng                       *rand.Rand
}

// call is one call in flight.
type call struct {
	t     *tally
	ended atomic.Bool
}

func (t *tally) begin() *call {
	t.started.Add(1)
	return &call{t: t}
}

// end records c's outcome: err nil (the reply was checked) or its status.
func (c *call) end(err error, lat time.Duration) {
	if !c.ended.CompareAndSwap(false, true) {
		c.t.dup.Add(1)
		return
	}
	key := "ok"
	if err != nil {
		key = status.CodeOf(err).String()
	}
	t := c.t
	t.mu.Lock()
	t.outcomes[key]++
	if err == nil && lat > 0 {
		// Reservoir sample of 20,000 latencies.
		t.seen++
		if len(t.lat) < 20000 {
			t.lat = append(t.lat, int64(lat))
		} else if j := t.rng.Int64N(t.seen); j < int64(len(t.lat)) {
			t.lat[j] = int64(lat)
		}
	}
	t.mu.Unlock()
}

var errWrong = errors.New("wrong reply")

// runClient makes calls to addr with the given number of workers until
// SIGTERM (or duration), then waits for its calls and prints a Report.
func runClient(args []string, stdout io.Writer) error {
	if len(args) != 3 {
		return errors.New("usage: soak-client ADDR WORKERS SEED")
	}
	addr := args[0]
	workers, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	c, err := rpc.Dial(addr, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	t := &tally{outcomes: map[string]int64{}, rng: rand.New(rand.NewPCG(seed, 1))}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)+2))
			for tag := uint64(w) << 40; ctx.Err() == nil; tag++ {
				step(addr, c, t, rng, tag)
			}
		}()
	}
	<-ctx.Done()
	// Every call started must end: wait for them, for at most 30 s.
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "soak-client: calls still running 30 s after the end")
	}
	t.mu.Lock()
	r := Report{Started: t.started.Load(), Outcomes: t.outcomes, Wrong: t.wrong.Load(), Duplicated: t.dup.Load(), Latencies: t.lat}
	var ended int64
	for _, n := range t.outcomes {
		ended += n
	}
	r.Lost = t.lost.Load() + r.Started - ended
	t.mu.Unlock()
	return json.NewEncoder(stdout).Encode(r)
}

// step makes one call of a randomly chosen kind. Every call passes the
// calls' own context (with a deadline or a cancel, sometimes), not the
// client's: a call begun always runs to its outcome.
func step(addr string, c *rpc.Client, t *tally, rng *rand.Rand, tag uint64) {
	switch n := rng.IntN(100); {
	case n < 40:
		unary(c, t, rng)
	case n < 50:
		sleep(c, t, rng, tag, true)
	case n < 58:
		sleep(c, t, rng, tag, false)
	case n < 68:
		serverStream(c, t, rng, tag, false)
	case n < 72:
		serverStream(c, t, rng, tag, true)
	case n < 80:
		clientStream(c, t, rng, tag)
	case n < 90:
		bidi(c, t, rng, tag)
	case n < 99:
		fail(c, t, tag)
	default:
		burst(addr, t, tag)
	}
}

func unary(c *rpc.Client, t *tally, rng *rand.Rand) {
	req := make([]byte, 1+rng.IntN(4096))
	for i := range req {
		req[i] = byte(rng.Uint32())
	}
	k := t.begin()
	start := time.Now()
	var out []byte
	err := c.Invoke(context.Background(), "Soak.Echo", req, &out)
	if err == nil && !bytes.Equal(out, req) {
		t.wrong.Add(1)
		err = errWrong
	}
	k.end(err, time.Since(start))
}

// sleep calls Soak.Sleep with a deadline (withDeadline) or a cancel that
// may come before the reply.
func sleep(c *rpc.Client, t *tally, rng *rand.Rand, tag uint64, withDeadline bool) {
	ms := rng.IntN(40)
	ctx, cancel := context.WithCancel(context.Background())
	if withDeadline {
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(5+rng.IntN(50))*time.Millisecond)
	} else {
		time.AfterFunc(time.Duration(rng.IntN(30))*time.Millisecond, cancel)
	}
	defer cancel()
	k := t.begin()
	out, err := rpc.Call[SleepReq, SleepReq](ctx, c, "Soak.Sleep", &SleepReq{MS: ms, Tag: tag})
	if err == nil && out.Tag != tag {
		t.wrong.Add(1)
		err = errWrong
	}
	k.end(err, 0)
}

// serverStream reads Soak.Count's messages, checking their order; a slow
// reader sleeps between them.
func serverStream(c *rpc.Client, t *tally, rng *rand.Rand, tag uint64, slow bool) {
	n := 1 + rng.IntN(50)
	var data []byte
	if slow {
		data = make([]byte, 16<<10)
	}
	k := t.begin()
	cs, err := rpc.NewStream[Msg, Msg](context.Background(), c, "Soak.Count")
	if err != nil {
		k.end(err, 0)
		return
	}
	defer cs.Close()
	if err := cs.Send(&Msg{Tag: tag, N: n, Data: data}); err != nil {
		k.end(drainErr(cs, err), 0)
		return
	}
	cs.CloseSend()
	got := 0
	for {
		m, err := cs.Recv()
		if errors.Is(err, io.EOF) {
			if got < n {
				t.lost.Add(int64(n - got))
			}
			k.end(nil, 0)
			return
		}
		if err != nil {
			k.end(err, 0)
			return
		}
		switch {
		case m.Tag != tag:
			t.wrong.Add(1)
		case m.I < got:
			t.dup.Add(1)
		case m.I > got:
			t.lost.Add(int64(m.I - got))
			got = m.I + 1
		default:
			got++
		}
		if slow {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

func clientStream(c *rpc.Client, t *tally, rng *rand.Rand, tag uint64) {
	n := rng.IntN(30)
	k := t.begin()
	cs, err := rpc.NewStream[Msg, Sum](context.Background(), c, "Soak.Sum")
	if err != nil {
		k.end(err, 0)
		return
	}
	defer cs.Close()
	want := 0
	for i := range n {
		if err := cs.Send(&Msg{Tag: tag, I: i}); err != nil {
			k.end(drainErr(cs, err), 0)
			return
		}
		want += i
	}
	sum, err := cs.CloseAndRecv()
	if err == nil && (sum.Count != n || sum.Total != want || n > 0 && sum.Tag != tag) {
		t.wrong.Add(1)
		err = errWrong
	}
	k.end(err, 0)
}

func bidi(c *rpc.Client, t *tally, rng *rand.Rand, tag uint64) {
	n := 1 + rng.IntN(20)
	k := t.begin()
	cs, err := rpc.NewStream[Msg, Msg](context.Background(), c, "Soak.Chat")
	if err != nil {
		k.end(err, 0)
		return
	}
	defer cs.Close()
	for i := range n {
		if err := cs.Send(&Msg{Tag: tag, I: i}); err != nil {
			k.end(drainErr(cs, err), 0)
			return
		}
		m, err := cs.Recv()
		if err != nil {
			k.end(err, 0)
			return
		}
		if m.Tag != tag || m.I != i {
			t.wrong.Add(1)
			k.end(errWrong, 0)
			return
		}
	}
	cs.CloseSend()
	_, err = cs.Recv()
	if errors.Is(err, io.EOF) {
		err = nil
	}
	k.end(err, 0)
}

// drainErr is the error that ends a stream whose Send failed: the
// stream's status, if it has one.
func drainErr[Req, Resp any](cs *rpc.ClientStream[Req, Resp], err error) error {
	if _, rerr := cs.Recv(); rerr != nil && !errors.Is(rerr, io.EOF) {
		return rerr
	}
	return err
}

func fail(c *rpc.Client, t *tally, tag uint64) {
	k := t.begin()
	_, err := rpc.Call[SleepReq, SleepReq](context.Background(), c, "Soak.Fail", &SleepReq{Tag: tag})
	if err == nil || status.CodeOf(err) != status.FailedPrecondition {
		t.wrong.Add(1)
		err = errWrong
	}
	k.end(err, 0)
}

// burst opens more connections than the server's per-process limit
// (maxConnsPerPID, counting the client's own) and makes a call on each:
// those over it are refused with ResourceExhausted, or an idle connection
// of the process is shed to make room.
func burst(addr string, t *tally, tag uint64) {
	var wg sync.WaitGroup
	for i := range maxConnsPerPID + 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := t.begin()
			c, err := rpc.Dial(addr, nil)
			if err != nil {
				k.end(err, 0)
				return
			}
			defer c.Close()
			want := tag + uint64(i)<<20
			out, err := rpc.Call[SleepReq, SleepReq](context.Background(), c, "Soak.Sleep", &SleepReq{MS: 20, Tag: want})
			if err == nil && out.Tag != want {
				t.wrong.Add(1)
				err = errWrong
			}
			k.end(err, 0)
		}()
	}
	wg.Wait()
}
