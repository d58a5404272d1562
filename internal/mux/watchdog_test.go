package mux

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/watchdog"
)

// TestWatchdog: the process's watchdog takes over from a run that lasts
// several ticks, on each of many sessions that come and go from many
// goroutines; once no session runs inline, it watches none and its
// goroutine ends (the package's leak check sees that it does).
func TestWatchdog(t *testing.T) {
	// Sessions that ended: takeover bumps the reader generation, then
	// starts no reader for them.
	sessions := make([]*Session, 8)
	for i := range sessions {
		sessions[i] = &Session{err: errors.New("ended")}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, s := range sessions[1:] {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s.guarded(func() {})
				time.Sleep(50 * time.Microsecond)
			}
		})
	}
	// A run that lasts is taken over, never sooner than takeoverDelay
	// after it began, however loaded the machine.
	s := sessions[0]
	for range 3 {
		start := time.Now()
		var took time.Duration
		replaced := s.guarded(func() {
			for s.readerState.Load()&1 != 0 && time.Since(start) < 10*time.Second {
				time.Sleep(100 * time.Microsecond)
			}
			took = time.Since(start)
		})
		if !replaced {
			t.Fatalf("a run of %v was not taken over", took)
		}
		if took < takeoverDelay {
			t.Fatalf("a run was taken over after %v, before takeoverDelay (%v)", took, takeoverDelay)
		}
	}
	close(stop)
	wg.Wait()

	deadline := time.Now().Add(5 * time.Second)
	for !watchdog.Idle() {
		if time.Now().After(deadline) {
			t.Fatal("the watchdog still runs or watches sessions after they stopped running inline")
		}
		time.Sleep(time.Millisecond)
	}
	for i, s := range sessions {
		if s.watchArmed.Load() {
			t.Fatalf("session %d is still marked watched", i)
		}
	}
}
