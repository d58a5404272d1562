package shmring

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWakeOrder is the store-buffering test of the two handshakes that
// wake a side, on a shared mapping. In every round each side stores, then
// loads what the other stores: at least one of them must see the other's
// store, or a side sleeps with the ring ready and is never woken. (Under
// the race detector, plain atomic stores to this mapping failed it in
// about one round in 200 to 2,000.)
func TestWakeOrder(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two threads")
	}
	rounds := 20000
	if testing.Short() {
		rounds = 5000
	}
	newRing := func(t *testing.T) (*Consumer, *Producer) {
		mem, err := unix.Mmap(-1, 0, MapLen(MinSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(mem) })
		return NewConsumer(mem, MinSize, DirClient), NewProducer(mem, MinSize, DirClient)
	}
	// A consumer going to sleep against a producer publishing bytes.
	t.Run("sleep", func(t *testing.T) {
		c, p := newRing(t)
		storeBuffering(t, rounds, func() bool {
			c.SetSleeping(1)
			n, _ := c.Avail()
			return n > 0
		}, func() {
			c.SetSleeping(0)
			c.head++ // the byte published this round
		}, func() bool {
			p.tail++
			p.Publish()
			return p.ConsumerSleeping()
		}, func() {})
	})
	// A producer waiting for room in a full ring against a consumer
	// taking a byte out of it.
	t.Run("room", func(t *testing.T) {
		c, p := newRing(t)
		p.tail = MinSize
		p.Publish()
		var b [1]byte
		storeBuffering(t, rounds, func() bool {
			c.Copy(b[:], 1)
			return c.ProducerWaiting()
		}, func() {}, func() bool {
			p.SetWaiting(1)
			room, err := p.Room()
			if err != nil {
				panic(err)
			}
			return room > 0
		}, func() {
			p.SetWaiting(0)
			p.tail++ // fill the ring again
			p.Publish()
		})
	})
}

// storeBuffering runs rounds of a and b at once, each on its thread, then
// aReset and bReset, and fails for a round in which neither a nor b saw
// the other's store.
func storeBuffering(t *testing.T, rounds int, a func() bool, aReset func(), b func() bool, bReset func()) {
	var at [2]atomic.Int64 // the step each side reached
	step := func(me int, k int64) {
		at[me].Store(k)
		for at[1-me].Load() < k {
		}
	}
	sawA, sawB := make([]bool, rounds), make([]bool, rounds)
	var wg sync.WaitGroup
	wg.Add(2)
	side := func(me int, f func() bool, reset func(), saw []bool) {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := range rounds {
			step(me, int64(3*i+1))
			saw[i] = f()
			step(me, int64(3*i+2))
			reset()
			step(me, int64(3*i+3))
		}
	}
	go side(0, a, aReset, sawA)
	go side(1, b, bReset, sawB)
	wg.Wait()
	missed := 0
	for i := range rounds {
		if !sawA[i] && !sawB[i] {
			missed++
		}
	}
	if missed > 0 {
		t.Fatalf("%d of %d rounds: neither side saw the other's store", missed, rounds)
	}
}
