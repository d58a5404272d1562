//go:build linux

package idle

import (
	"testing"
	"time"
)

// TestMeasure runs each measurement once, small: the child starts (this
// test binary re-executed), the connections are opened and counted, and
// the figures come out.
func TestMeasure(t *testing.T) {
	workerIdle = 0 // no need to wait for the workers to exit here
	for _, mode := range []string{"eventloop", "goroutine", "bare"} {
		for _, network := range Networks {
			r, err := Measure(mode, network, 50, 300*time.Millisecond, mode != "bare")
			if err != nil {
				t.Fatalf("%s %s: %v", mode, network, err)
			}
			if r.RSS == 0 || r.BaseRSS == 0 || r.Conns != 50 {
				t.Fatalf("%s %s: %+v", mode, network, r)
			}
			t.Logf("%s %s: %.0f B/conn (50 connections: mostly fixed costs)", mode, network, r.ServerBytesPerConn)
		}
	}
	rate, err := AcceptRate("eventloop", 500, 2, 16)
	if err != nil || rate <= 0 {
		t.Fatalf("AcceptRate = %v, %v", rate, err)
	}
}
