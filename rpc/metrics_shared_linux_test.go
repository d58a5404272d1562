package rpc

import (
	"context"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/shm"
)

// TestMetricsHeld: a shared request held by its call counts in the
// process's descriptors and shared bytes in flight (the metrics' files
// and shared_bytes gauges) until the call ends.
func TestMetricsHeld(t *testing.T) {
	c := sharedPair(t, ServerOptions{Settings: filesSettings(), SharedThreshold: 64 << 10, Metrics: true},
		ClientOptions{Settings: filesSettings(), SharedThreshold: 64 << 10})
	files0, bytes0 := shm.FilesHeld.Load(), shm.SharedHeld.Load()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, out := make([]byte, 1<<20), []byte(nil)
		done <- c.Invoke(ctx, "T.Block", &req, &out)
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: files %d, bytes %d (before the call %d, %d)", what, shm.FilesHeld.Load(), shm.SharedHeld.Load(), files0, bytes0)
			}
		}
	}
	waitFor("while held", func() bool {
		return shm.FilesHeld.Load() >= files0+1 && shm.SharedHeld.Load() >= bytes0+1<<20
	})
	cancel()
	<-done
	waitFor("after the call", func() bool {
		return shm.FilesHeld.Load() == files0 && shm.SharedHeld.Load() == bytes0
	})
}
