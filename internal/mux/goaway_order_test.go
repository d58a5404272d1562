package mux_test

import (
	"context"

	"testing"

	"github.com/warrenipc/warren/internal/mux"

	"github.com/warrenipc/warren/wire"
)

// TestGoAwayBeforeItsRefusals: a server sending GOAWAY while calls arrive
// refuses the calls above its last stream id as shutting down, and those
// refusals never reach the wire ahead of the GOAWAY, where the peer would
// take "shutting down" for the reason instead of the GOAWAY's own.
func TestGoAwayBeforeItsRefusals(t *testing.T) {
	for round := range 100 {
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, _ callInfo) {
			st.Refuse(codeResourceExhausted, "refused by the handler")
		})
		raw, srv := rawClient(t, connKinds[1], ts.config(wire.Settings{}), wire.Settings{})
		var calls [][]byte
		for id := uint32(1); id < 80; id += 2 {
			calls = append(calls, headersFrame(id, wire.FlagEnd, "Svc.M"))
		}
		wrote := make(chan error, 1)
		go func() { wrote <- raw.write(calls...) }()
		if err := srv.GoAway(codeResourceExhausted, "too many connections"); err != nil {
			t.Fatal(err)
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		sawGoAway := false
		for answered := 0; answered < len(calls) || !sawGoAway; {
			f, ok := raw.next()
			if !ok {
				t.Fatalf("round %d: connection ended after %d answers (GOAWAY seen: %v)", round, answered, sawGoAway)
			}
			switch f.Type {
			case wire.TypeGoAway:
				sawGoAway = true
			case wire.TypeTrailers:
				answered++
				tr, err := wire.ParseTrailer(f.P)
				if err != nil {
					t.Fatal(err)
				}
				if string(tr.Message) == "server is shutting down" && !sawGoAway {
					t.Fatalf("round %d: stream %d refused as shutting down before the GOAWAY", round, f.Stream)
				}
			}
		}
		raw.close()
		srv.Close()
	}
}
