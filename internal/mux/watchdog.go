package mux

import (
	"sync"
	"time"
)

// The takeover watchdog: one ticker for the whole process, which watches
// the sessions that run requests inline (see guarded) every takeoverDelay.
//
// It is not a runtime timer per session, as it once was. A pending runtime
// timer a millisecond away makes every wait of the runtime's network poller
// a timed one, and a lone caller's server waits there once per call: on a
// virtual machine, arming and cancelling the kernel timer of each wait
// added about 4µs to a 17µs round trip. On Linux the ticks come from a
// timerfd that the poller watches like a socket (watchdog_linux.go), so its
// waits stay untimed; elsewhere from time.Sleep.

// tickSource spaces the watchdog's ticks.
type tickSource interface {
	wait() // returns takeoverDelay after it is called, or later
}

// watchdog is the process's takeover watchdog.
var watchdog watcher

type watcher struct {
	mu       sync.Mutex // protects following
	sessions []*Session // sessions whose watchArmed is set, in the order they were armed
	running  bool       // the ticking goroutine runs
	src      tickSource // made on first use
	batch    []*Session // the ticking goroutine's copy of sessions
}

// add watches s from the next tick on: s has just set watchArmed. The
// ticking goroutine runs while any session is watched.
func (w *watcher) add(s *Session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sessions = append(w.sessions, s)
	if w.running {
		return
	}
	if w.src == nil {
		w.src = newTickSource()
	}
	w.running = true
	go w.run()
}

// run ticks: at each tick it calls watch on every watched session, and
// stops watching those that went quiet (watch cleared watchArmed). Ticks
// are at least takeoverDelay apart, however late one is handled, so that a
// run is never taken over sooner. It returns once no session is left.
func (w *watcher) run() {
	for {
		w.src.wait()
		w.mu.Lock()
		w.batch = append(w.batch[:0], w.sessions...)
		w.mu.Unlock()
		kept := 0
		for _, s := range w.batch {
			if s.watch() {
				w.batch[kept] = s
				kept++
			}
		}
		w.mu.Lock()
		// Sessions added during the tick follow those it watched.
		n := copy(w.sessions, w.batch[:kept])
		n += copy(w.sessions[n:], w.sessions[len(w.batch):])
		clear(w.sessions[n:])
		w.sessions = w.sessions[:n]
		clear(w.batch)
		if n == 0 {
			w.running = false
			if cap(w.sessions) > 64 {
				w.sessions, w.batch = nil, nil // drop what a burst grew
			}
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// sleepTicks is the tickSource of time.Sleep.
type sleepTicks struct{}

func (sleepTicks) wait() { time.Sleep(takeoverDelay) }
