package pool

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGetSizes(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 1 << 20, 1<<24 + 1} {
		b := Get(n)
		if len(b.B) != n {
			t.Fatalf("Get(%d): len %d", n, len(b.B))
		}
		if n <= 1<<maxShift && cap(b.B)&(cap(b.B)-1) != 0 {
			t.Fatalf("Get(%d): cap %d is not a power of two", n, cap(b.B))
		}
		Put(b)
	}
	Put(nil)
	Put(&Buf{B: make([]byte, 1000)}) // odd capacity is dropped, not pooled
	lent := Borrow(make([]byte, 2048))
	Put(&lent) // not the pool's: never handed out again
	for range 100 {
		if b := Get(2048); &b.B[0] == &lent.B[0] {
			t.Fatal("Get returned borrowed memory given to Put")
		}
	}
	if b := Get(1000); cap(b.B) != 1024 {
		t.Fatalf("Get(1000) cap = %d, want 1024", cap(b.B))
	}
}

// noGC turns the garbage collector off for the test, so that the stacks are
// not emptied under it.
func noGC(t *testing.T) {
	old := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// hotLen returns how many buffers the stack of n-byte buffers holds.
func hotLen(n int) int {
	h := hotFor(class(n))
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func TestHotNewestFirst(t *testing.T) {
	noGC(t)
	// A collection from before noGC may still empty the stacks meanwhile:
	// the check is repeated until one runs without.
	for range 100 {
		if checkNewestFirst(t) {
			return
		}
	}
	t.Fatal("the stacks were emptied during every try")
}

// checkNewestFirst returns false if a drain interfered.
func checkNewestFirst(t *testing.T) bool {
	const n = 1 << 20
	drainHot()
	gen := drains.Load()
	bufs := make([]*Buf, hotDepth+2)
	for i := range bufs {
		bufs[i] = &Buf{B: make([]byte, n)}
	}
	for _, b := range bufs {
		Put(b)
	}
	got := hotLen(n)
	var order []int // which Put each Get returned
	for range hotDepth {
		b := Get(n - 1)
		if len(b.B) != n-1 || cap(b.B) != n {
			t.Fatalf("Get(%d): len %d cap %d", n-1, len(b.B), cap(b.B))
		}
		order = append(order, slices.Index(bufs, b))
	}
	small := &Buf{B: make([]byte, 1<<(hotShift-1))}
	Put(small) // smaller classes have no stack
	var held int
	for i := range hot {
		held += hotLen(1 << (i + hotShift))
	}
	if drains.Load() != gen {
		return false
	}
	if got != hotDepth {
		t.Fatalf("stack holds %d buffers after %d Puts, want %d", got, len(bufs), hotDepth)
	}
	// The newest come back first; the two oldest went to the sync.Pool.
	var want []int
	for i := len(bufs) - 1; len(want) < hotDepth; i-- {
		want = append(want, i)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("Gets after Puts of buffers 0-%d returned buffers %v, want %v", len(bufs)-1, order, want)
	}
	if held != 0 {
		t.Fatalf("stacks hold %d buffers after the Gets, want 0", held)
	}
	return true
}

// TestEveryClass gets and puts buffers of every pooled class, the largest
// included, and one over the largest (not pooled).
func TestEveryClass(t *testing.T) {
	for shift := minShift; shift <= maxShift+1; shift++ {
		n := 1 << shift
		b := Get(n)
		if len(b.B) != n {
			t.Fatalf("Get(%d): len %d", n, len(b.B))
		}
		Put(b)
		Put(&Buf{B: make([]byte, n)})
	}
}

func TestHotDrainedAfterGC(t *testing.T) {
	const n = 256 << 10
	Put(Get(n))
	Put(&Buf{B: make([]byte, n)})
	if hotLen(n) == 0 {
		t.Skip("a collection emptied the stack already") // rare: GC between Put and here
	}
	deadline := time.Now().Add(10 * time.Second)
	for hotLen(n) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("stack still holds %d buffers after collections", hotLen(n))
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	// It keeps watching: a later collection empties it again.
	Put(&Buf{B: make([]byte, n)})
	for hotLen(n) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("stack not emptied by a second round of collections")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentGetPut checks that no buffer is handed to two holders at
// once: each goroutine marks what it holds and checks the mark is intact.
func TestConcurrentGetPut(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				n := []int{1024, 64 << 10, 1 << 20}[i%3]
				b := Get(n)
				mark := byte(g + 1)
				b.B[0], b.B[n-1] = mark, mark
				runtime.Gosched()
				if b.B[0] != mark || b.B[n-1] != mark {
					t.Errorf("buffer of %d bytes changed while held", n)
					return
				}
				Put(b)
			}
		})
	}
	wg.Wait()
}

func BenchmarkGetPut(b *testing.B) {
	for _, n := range []int{1024, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Put(Get(n))
			}
		})
	}
}
