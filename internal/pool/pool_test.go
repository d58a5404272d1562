package pool

import (
	"testing"

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

func BenchmarkGetPut(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Put(Get(1024))
	}
}
