package admit

import (
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/peer"
)

// Transport classes of connections, for the metrics: a fixed set.
const (
	trUnix uint8 = iota
	trTCP
	trTLS
	trWS
	trWSS
	trOther
	numTransports
)

var transportNames = [numTransports]string{"unix", "tcp", "tls", "ws", "wss", "other"}

func transportOf(p *peer.Peer) uint8 {
	for i, n := range transportNames[:trOther] {
		if p.Network == n {
			return uint8(i)
		}
	}
	return trOther
}

// Collect adds the connections counted to s: by transport and engine, and
// by peer uid.
func (k *Core) Collect(s *metrics.Snapshot) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var n [2][numTransports]int
	for _, e := range k.engines {
		if e == nil {
			continue
		}
		i := 0
		if e.Loop {
			i = 1
		}
		for t, c := range e.conns {
			n[i][t] += c
		}
	}
	for i, engine := range [2]string{"goroutine", "eventloop"} {
		for t, c := range n[i] {
			if c > 0 {
				s.Conns = append(s.Conns, metrics.ConnCount{Transport: transportNames[t], Engine: engine, N: int64(c)})
			}
		}
	}
	for uid, list := range k.byUID {
		s.ConnsByUID = append(s.ConnsByUID, metrics.UIDCount{UID: uint32(uid), N: len(list)})
	}
}

// ShedPending counts a pending connection that an engine out of
// descriptors accepted with its reserve descriptor and closed.
func (k *Core) ShedPending() { k.lim.Metrics.Shed(metrics.ShedDescriptors) }
