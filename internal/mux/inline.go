package mux

import "github.com/warrenipc/warren/internal/watchdog"

// Running a handler inline on the reading goroutine, with a watchdog
// that hands reading to a new goroutine if the handler blocks.

// takeoverDelay is how long a request may run inline on the reader goroutine
// before another goroutine takes over reading the connection.
const takeoverDelay = watchdog.Period

// RunInline runs fn(st) on the calling goroutine, which must be the
// session's reader goroutine inside Config.OnRequest. Running a short
// request where its bytes were read saves two goroutine switches; if fn runs
// longer than a short delay, a new goroutine takes over reading the
// connection so other streams are not held up, and the current one leaves
// the reader loop when fn returns.
func (st *Stream) RunInline(fn func(*Stream)) {
	st.s.guarded(func() { fn(st) }) // the reader loop sees a takeover itself
}

// guarded runs fn, which may block writing, on the reader goroutine under
// the same takeover rule as RunInline. It reports whether another goroutine
// took over reading meanwhile, in which case the caller must stop reading.
//
// Arming a timer for every request would cost more than the goroutine
// switches inline running saves (resetting a timer can wake the runtime's
// network poller). Instead the process's watchdog (internal/watchdog) looks at
// the session every takeoverDelay while it runs requests inline, and stops
// after a quiet tick.
func (s *Session) guarded(fn func()) (replaced bool) {
	g := s.readerState.Load() &^ 1
	s.inlineRuns.Add(1) // before the bit: see watch
	s.readerState.Store(g | 1)
	if !s.watchArmed.Load() && s.watchArmed.CompareAndSwap(false, true) {
		watchdog.Add((*watchedSession)(s))
	}
	fn()
	return !s.readerState.CompareAndSwap(g|1, g) // false: taken over
}

// watchedSession is a Session as the watchdog sees it.
type watchedSession Session

func (w *watchedSession) Watch() bool { return (*Session)(w).watch() }

// watch runs at each tick of the watchdog: it starts a new reader
// goroutine if the request running inline now is the one that ran at the
// previous tick, a takeoverDelay ago or more (inlineRuns counts the runs, so
// no clock is read per request). It reports whether the session is still
// to be watched: while it is busy.
func (s *Session) watch() bool {
	// The bit first, then the count, which guarded raises before it sets
	// the bit: a count read with a bit belongs to that run or a later one,
	// so a run that has just begun is not taken for the one seen at the
	// previous tick.
	inline := s.readerState.Load()&1 != 0
	runs := s.inlineRuns.Load()
	if inline && s.watchedInline && runs == s.watchedRuns {
		s.takeover()
		inline = false // the new reader's runs count from here
	}
	if runs != s.watchedRuns || inline {
		s.watchedRuns, s.watchedInline = runs, inline
		return true
	}
	s.watchedInline = false
	s.watchArmed.Store(false)
	// A run that began just before the store above saw the session watched
	// and did not add it: look again.
	return s.readerState.Load()&1 != 0 && s.watchArmed.CompareAndSwap(false, true)
}

// takeover starts a new reader goroutine if a request is still running
// inline.
func (s *Session) takeover() {
	cur := s.readerState.Load()
	if cur&1 == 0 || !s.readerState.CompareAndSwap(cur, (cur&^1)+2) {
		return // the inline request finished meanwhile
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.readers.Add(1)
	go s.readLoop()
}
