// Package drain sends a server's sessions a GOAWAY and then a PING, and
// tells when every peer has read all it sent before the GOAWAY.
package drain

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

// Linger bounds how long a Drain waits for a peer to acknowledge the
// PING that follows its GOAWAY.
const Linger = time.Second

// Drain sends sessions a GOAWAY and then a PING, and tells when every peer
// has acknowledged its PING (or closed, or Linger passed). A peer
// handles frames in order, so by its acknowledgement every stream it opened
// before it saw the GOAWAY has been read, and those above the GOAWAY's last
// stream id refused: the connection can be closed with no call left unread
// and unanswered. The zero Drain is ready; its methods are called from one
// goroutine.
type Drain struct {
	sent  map[*mux.Session]bool
	pings atomic.Int32 // PINGs not yet acknowledged
}

// GoAway sends each session not sent one yet a GOAWAY with code and msg
// (nothing if the session sent one already), then a PING it waits for in
// the background, until ctx ends or at most Linger.
func (d *Drain) GoAway(ctx context.Context, sessions []*mux.Session, code wire.Code, msg string) {
	if d.sent == nil {
		d.sent = map[*mux.Session]bool{}
	}
	for _, s := range sessions {
		if d.sent[s] {
			continue
		}
		d.sent[s] = true
		s.GoAway(code, msg)
		d.pings.Add(1)
		go func() {
			defer d.pings.Add(-1)
			ctx, cancel := context.WithTimeout(ctx, Linger)
			defer cancel()
			s.Ping(ctx)
		}()
	}
}

// Sent reports whether s was sent its GOAWAY by d.
func (d *Drain) Sent(s *mux.Session) bool { return d.sent[s] }

// Acked reports whether every PING sent has been acknowledged (or given up).
func (d *Drain) Acked() bool { return d.pings.Load() == 0 }
