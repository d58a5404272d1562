//go:build linux

package nbiopeer

import (
	"testing"
	"time"

	"github.com/warrenipc/warren/bench/idle"
)

// TestMeasure measures nbio once, small: its server child (this test
// binary re-executed) upgrades 200 connections and echoes their messages,
// and counts them.
func TestMeasure(t *testing.T) {
	if !idle.Supported("nbio", "eventloop", "ws") || idle.Supported("nbio", "goroutine", "ws") {
		t.Fatal("nbio is not registered as it should be")
	}
	r, err := idle.MeasureSystem("nbio", "eventloop", "ws", 200, 300*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.RSS == 0 || r.BaseRSS == 0 || r.Conns != 200 || r.System != "nbio" {
		t.Fatalf("%+v", r)
	}
	t.Logf("nbio eventloop ws: %.0f B/conn, %d goroutines (200 connections: mostly fixed costs)", r.ServerBytesPerConn, r.Goroutines)
}
