// Package watchdog is the process's watchdog for handlers run inline: on
// a connection's reader goroutine (internal/mux) or on the event loop
// (rpc). One goroutine ticks every Period while anything is watched and
// calls each watched item's Watch, which takes its reader or loop over
// from a handler that has run since the previous tick.
//
// It is not a runtime timer per watched item, as it once was. A pending
// runtime timer a millisecond away makes every wait of the runtime's
// network poller a timed one, and a lone caller's server waits there once
// per call: on a virtual machine, arming and cancelling the kernel timer of
// each wait added about 4µs to a 17µs round trip. On Linux the ticks come
// from a timerfd that the poller watches like a socket (watchdog_linux.go),
// so its waits stay untimed; elsewhere from time.Sleep.
package watchdog

import (
	"sync"
	"time"
)

// Period is the least time between two ticks.
const Period = time.Millisecond

// Watched is what the watchdog looks at.
type Watched interface {
	// Watch is called at every tick while the item is watched, on the
	// watchdog's goroutine; it returns false to stop being watched.
	Watch() bool
}

// Add watches x from the next tick on. The caller makes sure it adds x
// once until x's Watch returns false (with a flag of its own).
func Add(x Watched) { dog.add(x) }

// Idle reports whether nothing is watched and the ticking goroutine has
// ended.
func Idle() bool {
	dog.mu.Lock()
	defer dog.mu.Unlock()
	return !dog.running && len(dog.items) == 0
}

// tickSource spaces the watchdog's ticks.
type tickSource interface {
	wait() // returns Period after it is called, or later
}

// dog is the process's watchdog.
var dog watcher

type watcher struct {
	mu      sync.Mutex // protects following
	items   []Watched  // in the order they were added
	running bool       // the ticking goroutine runs
	src     tickSource // made on first use
	batch   []Watched  // the ticking goroutine's copy of items
}

// add watches x from the next tick on. The ticking goroutine runs while
// anything is watched.
func (w *watcher) add(x Watched) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.items = append(w.items, x)
	if w.running {
		return
	}
	if w.src == nil {
		w.src = newTickSource()
	}
	w.running = true
	go w.run()
}

// run ticks: at each tick it calls Watch on every watched item, and stops
// watching those whose Watch returned false. Ticks are at least Period
// apart, however late one is handled, so that a run is never taken over
// sooner. It returns once nothing is left.
func (w *watcher) run() {
	for {
		w.src.wait()
		w.mu.Lock()
		w.batch = append(w.batch[:0], w.items...)
		w.mu.Unlock()
		kept := 0
		for _, x := range w.batch {
			if x.Watch() {
				w.batch[kept] = x
				kept++
			}
		}
		w.mu.Lock()
		// Items added during the tick follow those it watched.
		n := copy(w.items, w.batch[:kept])
		n += copy(w.items[n:], w.items[len(w.batch):])
		clear(w.items[n:])
		w.items = w.items[:n]
		clear(w.batch)
		if n == 0 {
			w.running = false
			if cap(w.items) > 64 {
				w.items, w.batch = nil, nil // drop what a burst grew
			}
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// sleepTicks is the tickSource of time.Sleep.
type sleepTicks struct{}

func (sleepTicks) wait() { time.Sleep(Period) }
