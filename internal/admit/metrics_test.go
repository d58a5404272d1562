package admit_test

import (
	"testing"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/peer"
)

// TestMetrics: connections are counted by transport, engine and uid while
// admitted; refusals by their reason.
func TestMetrics(t *testing.T) {
	reg := metrics.New()
	k := newCore(admit.Limits{MaxConnsPerUID: 2, Metrics: reg}, nil)
	defer k.Close()
	goEng := (&shedLog{}).engine(k)
	loopEng := (&shedLog{}).engine(k)
	loopEng.Loop = true
	reg.SetCollect(k.Collect)
	conns := make([]admit.Conn, 5)
	for i, a := range []struct {
		p   *peer.Peer
		eng *admit.Engine
	}{{unixPeer(7, 70), goEng}, {unixPeer(7, 71), loopEng}, {tcpPeer("127.0.0.1"), loopEng}, {&peer.Peer{Network: "wss"}, goEng}} {
		if why, _ := k.Admit(&conns[i], a.p, a.eng); why != "" {
			t.Fatal(why)
		}
	}
	if why, _ := k.Admit(&conns[4], unixPeer(7, 72), goEng); why == "" {
		t.Fatal("third connection of uid 7 admitted")
	}
	k.Reject()
	k.ShedPending()
	s := reg.Snapshot()
	want := map[[2]string]int64{{"unix", "goroutine"}: 1, {"wss", "goroutine"}: 1, {"unix", "eventloop"}: 1, {"tcp", "eventloop"}: 1}
	if len(s.Conns) != len(want) {
		t.Fatalf("conns %+v", s.Conns)
	}
	for _, c := range s.Conns {
		if want[[2]string{c.Transport, c.Engine}] != c.N {
			t.Fatalf("conns %+v", s.Conns)
		}
	}
	if len(s.ConnsByUID) != 1 || s.ConnsByUID[0] != (metrics.UIDCount{UID: 7, N: 2}) {
		t.Fatalf("by uid %+v", s.ConnsByUID)
	}
	if s.ConnsRefused[metrics.ConnMaxConnsPerUID].N != 1 || s.ConnsRefused[metrics.ConnHandshakeFailed].N != 1 || s.Shed[metrics.ShedDescriptors].N != 1 {
		t.Fatalf("refused %+v shed %+v", s.ConnsRefused, s.Shed)
	}
	for i := range 4 {
		k.Release(&conns[i])
	}
	if s := reg.Snapshot(); len(s.Conns) != 0 || len(s.ConnsByUID) != 0 {
		t.Fatalf("after release: %+v %+v", s.Conns, s.ConnsByUID)
	}
}
