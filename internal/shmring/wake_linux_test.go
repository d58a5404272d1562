package shmring

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestWakeups plays sequential round trips, with pauses of varied length
// between some of them, so that the readers go to sleep at many points of
// a write: a wake-up that is lost shows as a round trip that never ends
// (see TestWakeOrder for the handshake itself).
func TestWakeups(t *testing.T) {
	rounds := 5000
	if testing.Short() {
		rounds = 1000
	}
	c, s := ringPair(t, MinSize)
	var done atomic.Int64
	go func() {
		b := make([]byte, 128)
		for {
			if _, err := s.Read(b); err != nil {
				return
			}
			if _, err := s.Write(b); err != nil {
				return
			}
		}
	}()
	stuck := make(chan string, 1)
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		last := int64(-1)
		for {
			select {
			case <-finished:
				return
			case <-tick.C:
			}
			n := done.Load()
			if n == last {
				stuck <- fmt.Sprintf("no round trip for 2 s after %d: %s", n, state(c, s))
				return
			}
			last = n
		}
	}()
	b := make([]byte, 128)
	errs := make(chan error, 1)
	go func() {
		for i := 0; i < rounds; i++ {
			if i%7 == 3 {
				time.Sleep(time.Duration(i%5) * 20 * time.Microsecond)
			}
			if _, err := c.Write(b); err != nil {
				errs <- err
				return
			}
			if _, err := c.Read(b); err != nil {
				errs <- err
				return
			}
			done.Add(1)
		}
		errs <- nil
	}()
	select {
	case err := <-errs:
		if err != nil {
			t.Fatal(err)
		}
	case msg := <-stuck:
		t.Fatal(msg)
	}
}

func state(c, s *Conn) string {
	f := func(x *Conn) string {
		return fmt.Sprintf("in{head %d tail %d sleeping %d} out{tail %d head %d waiting %d}",
			x.in.head, *x.in.h.u64(offTail), *x.in.h.u32(offSleeping), x.out.tail, *x.out.h.u64(offHead), *x.out.h.u32(offWaiting))
	}
	return "client " + f(c) + "; server " + f(s)
}
