//go:build linux

package eventloop

import (
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/watchdog"
)

// Calls on the loop. A unary call whose request is small runs on the loop
// goroutine itself, as goroutine mode runs it on the connection's reader:
// no hand-over to a worker, and its reply is written from the loop when the
// socket takes it (the fed session's writer queues the rest for EPOLLOUT).
//
// Feed only collects the calls whose requests it completed (onRequest);
// they run after the connection's bytes are handled (runReady), with the
// session's writes held so that the replies to requests read together
// leave in one write. A round of the loop runs calls inline for at most
// InlineBudget since its Wait returned; the calls after that go to workers.
//
// A handler that blocks or runs long must not hold up the loop's other
// connections: the process's watchdog (internal/watchdog, shared with the
// goroutine mode's readers) looks at the loop every watchdog.Period while
// calls run inline, and if it finds the same call running at two ticks in
// a row it takes the loop over: a new goroutine becomes the loop, runs the rest of the round's
// calls and goes on serving, while the old one finishes its call like a
// worker and exits. The loop's state needs no lock for this: the goroutine
// that runs the loop changes only at a takeover, which happens-after the
// old one published its position (inline.state) and before the new one
// starts, and the old one touches no loop state after its call returns.

const (
	// InlineBudget is how long calls may hold the loop per round.
	InlineBudget = time.Millisecond
	// heldFlush is how many bytes of held replies are written at once: the
	// fed writer's pooled buffers hold 16 KiB, and replies appended past
	// that would grow a new one for each round.
	heldFlush = 12 << 10
)

// loopInline is the event loop's state for running calls inline.
type loopInline struct {
	ready []*mux.Stream  // calls to run this round, in order
	held  []*mux.Session // sessions whose writes are held while they run
	next  int            // ready[next:] have not run yet

	// state is the loop's generation (bumped by each takeover) shifted
	// left by one, with the low bit set while a call runs inline.
	state       atomic.Uint64
	runs        atomic.Uint64 // calls run inline so far
	armed       atomic.Bool   // the watchdog watches the loop
	watchedRuns uint64        // watch's own: runs at its previous tick
	watchedBusy bool          // watch's own: a call ran inline at its previous tick
}

// onRequest is mux.Config.OnRequest for the loop's sessions: a call whose
// request is in. The calls the core leaves to the loop (small unary
// requests, unless NoInline) wait for runReady (on the loop, after Feed
// returns); the core hands others to a worker at once.
func (l *evLoop) onRequest(st *mux.Stream) {
	if l.core.OnRequest(st) {
		l.inline.ready = append(l.inline.ready, st)
	}
}

// runReady runs the calls onRequest collected. It reports false if another
// goroutine took the loop over meanwhile: the calling goroutine must then
// leave the loop at once.
func (l *evLoop) runReady() bool {
	in := &l.inline
	for _, st := range in.ready {
		if s := st.Session(); len(in.held) == 0 || in.held[len(in.held)-1] != s {
			s.Hold()
			in.held = append(in.held, s)
		}
	}
	in.next = 0
	return l.runRest()
}

// runRest runs ready[next:], then writes what the sessions held back.
func (l *evLoop) runRest() bool {
	in := &l.inline
	for in.next < len(in.ready) {
		st := in.ready[in.next]
		in.ready[in.next] = nil
		in.next++
		if time.Since(l.now) >= InlineBudget {
			l.core.Dispatch(st) // the round's budget is spent
			continue
		}
		if !l.runInline(st) {
			return false
		}
		if s := st.Session(); s.WriteBacklog() >= heldFlush {
			s.Release() // write what the replies filled, and hold on
			s.Hold()
		}
	}
	for i, s := range in.held {
		s.Release()
		in.held[i] = nil
	}
	in.ready, in.held = in.ready[:0], in.held[:0]
	if cap(in.ready) > 1024 {
		in.ready = nil // drop what a burst grew
	}
	return true
}

// runInline runs st's call on the loop goroutine under the watch. It
// reports false if the loop was taken over while it ran.
func (l *evLoop) runInline(st *mux.Stream) bool {
	in := &l.inline
	g := in.state.Load() &^ 1
	in.runs.Add(1) // before the bit: see watch
	in.state.Store(g | 1)
	if !in.armed.Load() && in.armed.CompareAndSwap(false, true) {
		watchdog.Add((*watchedLoop)(l))
	}
	l.core.Run(st)
	return in.state.CompareAndSwap(g|1, g)
}

// watchedLoop is an evLoop as the watchdog sees it.
type watchedLoop evLoop

func (w *watchedLoop) Watch() bool { return (*evLoop)(w).watch() }

// watch runs at each tick of the watchdog: it takes the loop over if the
// call running inline now is the one that ran at the previous tick. It
// reports whether the loop is still to be watched: while calls run. (As
// mux's watch for goroutine mode.)
func (l *evLoop) watch() bool {
	in := &l.inline
	busy := in.state.Load()&1 != 0
	runs := in.runs.Load()
	if busy && in.watchedBusy && runs == in.watchedRuns {
		l.takeover()
		busy = false
	}
	if runs != in.watchedRuns || busy {
		in.watchedRuns, in.watchedBusy = runs, busy
		return true
	}
	in.watchedBusy = false
	in.armed.Store(false)
	// A call that began just before the store above saw the loop watched
	// and did not add it: look again.
	return in.state.Load()&1 != 0 && in.armed.CompareAndSwap(false, true)
}

// takeover starts a new goroutine to run the loop if a call still runs
// inline on the current one.
func (l *evLoop) takeover() {
	in := &l.inline
	cur := in.state.Load()
	if cur&1 == 0 || !in.state.CompareAndSwap(cur, (cur&^1)+2) {
		return // the call finished meanwhile
	}
	l.opts.Counters.Takeovers.Add(1)
	l.core.Go(func() { l.own(true) }) // the old goroutine still counts: the server's group is not empty
}
