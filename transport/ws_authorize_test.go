package transport_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/warrenipc/warren/transport"
)

// TestWebSocketAuthorize: a handshake that WebSocketOptions.Authorize
// refuses is answered 401 with its reason; one it allows goes through.
func TestWebSocketAuthorize(t *testing.T) {
	opts := &transport.WebSocketOptions{Authorize: func(r *http.Request) error {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			return errors.New("no token")
		}
		return nil
	}}
	l, err := transport.Listen("ws://127.0.0.1:0/ws", &transport.ListenConfig{WebSocket: opts})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if hs, ok := c.(interface{ Handshake(context.Context) error }); ok && hs.Handshake(context.Background()) != nil {
					return
				}
				c.Write([]byte("ok"))
			}()
		}
	}()
	addr := "ws://" + l.Addr().String() + "/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	_, err = transport.Dial(ctx, addr, nil)
	var he *transport.WebSocketHandshakeError
	if !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Fatalf("dial without the token: %v, want a handshake error with status 401", err)
	}

	c, err := transport.Dial(ctx, addr, &transport.DialConfig{WebSocketHeader: http.Header{"Authorization": {"Bearer s3cret"}}})
	if err != nil {
		t.Fatalf("dial with the token: %v", err)
	}
	defer c.Close()
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "ok" {
		t.Fatalf("read %q, %v", b, err)
	}
}
