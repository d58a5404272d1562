package drain_test

import (
	"context"
	"testing"

	"github.com/warrenipc/warren/internal/drain"
	"github.com/warrenipc/warren/internal/mux"
)

// TestEmpty: a drain of no sessions is acknowledged at once and has sent
// nothing. Draining live sessions is tested through rpc's Shutdown
// (TestShutdownUnderLoad, TestShutdownAnswersCrossingCalls).
func TestEmpty(t *testing.T) {
	var d drain.Drain
	d.GoAway(context.Background(), nil, 14, "bye")
	if !d.Acked() {
		t.Fatal("a drain of no sessions is not acknowledged")
	}
	if d.Sent((*mux.Session)(nil)) {
		t.Fatal("Sent reports a session never given a GOAWAY")
	}
}
