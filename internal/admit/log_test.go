package admit_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
)

// records returns the JSON records written to buf.
func records(t *testing.T, buf *testutil.SyncBuffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestLogRecords: a refusal, a shed, a drain and a call refused by a limit
// are one record each, with the peer's uid, pid, address and the reason as
// attributes of their own.
func TestLogRecords(t *testing.T) {
	var buf testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	deny := peer.PolicyFunc(func(p *peer.Peer) error {
		if p.UID == 6 {
			return fmt.Errorf("%w: not you", peer.ErrDenied)
		}
		return nil
	})
	k := admit.New(admit.Limits{MaxConns: math.MaxInt, MaxConnsPerUID: 1, MaxConnsPerPID: math.MaxInt, CallRate: float64(rate.Inf), CallBurst: 1},
		deny, func() *slog.Logger { return logger })
	defer k.Close()
	eng := (&shedLog{}).engine(k)

	var refused, first, second admit.Conn
	k.Admit(&refused, unixPeer(6, 60), eng)
	k.Admit(&refused, unixPeer(6, 61), eng) // counted into a summary
	k.Admit(&first, unixPeer(7, 70), eng)
	first.SetActive(admit.Now() - 2*uint32(admit.ShedIdleAfter/time.Millisecond))
	k.Admit(&second, unixPeer(7, 71), eng) // sheds first
	k.CallRefused(&peer.Peer{Network: "tcp", RemoteAddr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5}}, "call rate limit exceeded")
	k.Drain()

	want := []map[string]any{
		{"msg": "warren: connection refused", "peer": "uid 6", "uid": 6.0, "pid": 60.0, "network": "unix", "reason": "not you"},
		{"msg": "warren: idle connection shed", "peer": "uid 7", "uid": 7.0, "pid": 71.0},
		{"msg": "warren: call refused", "peer": "ip 192.0.2.1", "address": "192.0.2.1:5", "reason": "call rate limit exceeded"},
		{"msg": "warren: draining", "connections": 1.0, "reason": admit.ShuttingDown},
	}
	recs := records(t, &buf)
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(recs), len(want), recs)
	}
	for i, w := range want {
		for k, v := range w {
			if got := recs[i][k]; fmt.Sprint(got) != fmt.Sprint(v) && !(k == "reason" && strings.Contains(fmt.Sprint(got), fmt.Sprint(v))) {
				t.Errorf("record %d: %s = %v, want %v (%v)", i, k, got, v, recs[i])
			}
		}
	}
}
