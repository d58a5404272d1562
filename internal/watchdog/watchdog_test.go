package watchdog_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/watchdog"
)

// counter is watched for want ticks.
type counter struct {
	want  int32
	ticks atomic.Int32
	last  atomic.Int64
}

func (c *counter) Watch() bool {
	c.last.Store(time.Now().UnixNano())
	return c.ticks.Add(1) < c.want
}

// TestTicks: every watched item is looked at once a tick, ticks at least
// Period apart, until its Watch returns false; then the goroutine ends.
func TestTicks(t *testing.T) {
	items := []*counter{{want: 1}, {want: 3}, {want: 10}}
	start := time.Now()
	for _, c := range items {
		watchdog.Add(c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !watchdog.Idle() {
		if time.Now().After(deadline) {
			t.Fatal("the watchdog still runs")
		}
		time.Sleep(time.Millisecond)
	}
	for i, c := range items {
		if n := c.ticks.Load(); n != c.want {
			t.Fatalf("item %d: %d ticks, want %d", i, n, c.want)
		}
	}
	if el := time.Duration(items[2].last.Load() - start.UnixNano()); el < 10*watchdog.Period {
		t.Fatalf("10 ticks in %v, want at least %v", el, 10*watchdog.Period)
	}
}
