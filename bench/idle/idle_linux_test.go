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
	// WebSocket: warren in both modes and gobwas-epoll (nbio's test is in
	// package nbiopeer), 200 connections each, every one upgraded and its
	// message answered.
	for _, system := range Systems {
		for _, mode := range []string{"goroutine", "eventloop"} {
			if !Supported(system, mode, "ws") {
				continue
			}
			r, err := MeasureSystem(system, mode, "ws", 200, 300*time.Millisecond, false)
			if err != nil {
				t.Fatalf("%s %s ws: %v", system, mode, err)
			}
			if r.RSS == 0 || r.BaseRSS == 0 || r.Conns != 200 || r.System != system {
				t.Fatalf("%s %s ws: %+v", system, mode, r)
			}
			t.Logf("%s %s ws: %.0f B/conn, %d goroutines (200 connections: mostly fixed costs)", system, mode, r.ServerBytesPerConn, r.Goroutines)
		}
	}
	for _, bad := range [][3]string{{"gobwas-epoll", "goroutine", "ws"}, {"gobwas-epoll", "eventloop", "tcp"}, {"warren", "bare", "ws"}, {"nbio", "eventloop", "ws"}} {
		if _, err := MeasureSystem(bad[0], bad[1], bad[2], 10, 0, false); err == nil {
			t.Errorf("MeasureSystem%q did not fail", bad)
		}
	}
	rate, err := AcceptRate("eventloop", 500, 2, 16)
	if err != nil || rate <= 0 {
		t.Fatalf("AcceptRate = %v, %v", rate, err)
	}
}
