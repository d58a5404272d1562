package rpc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// TestMetadataOverFrameSize sends metadata too large for one frame of the
// receiver's MaxFrameSize (HEADERS and TRAILERS are never chunked), both
// ways. The sender fails just that call with ResourceExhausted; before, it
// sent the frame and the receiver closed the connection, failing every
// call on it.
func TestMetadataOverFrameSize(t *testing.T) {
	big := strings.Repeat("x", 2000)
	srv := newBadServer(&ServerOptions{Settings: wire.Settings{MaxFrameSize: 1024}})
	HandleRaw(srv, "Bad.BigHeader", func(ctx context.Context, req []byte) ([]byte, error) {
		SetHeader(ctx, Metadata{"h": {big}})
		return req, nil
	})
	HandleRaw(srv, "Bad.BigTrailer", func(ctx context.Context, req []byte) ([]byte, error) {
		SetTrailer(ctx, Metadata{"t": {big}})
		return req, nil
	})
	e := startBad(t, srv)

	// check makes the call, with a call holding on the same connection that
	// must outlive it.
	check := func(t *testing.T, c *Client, call func() error) {
		holdCtx, cancel := context.WithCancel(context.Background())
		held := make(chan error, 1)
		go func() {
			var out []byte
			held <- c.Invoke(holdCtx, "Bad.Hold", []byte("x"), &out)
		}()
		waitCalls(t, e.srv, 1)
		err := call()
		t.Logf("%v", err)
		var ft *wire.FrameTooLargeError
		if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "1024") {
			t.Errorf("err = %v, want ResourceExhausted naming the limit", err)
		}
		if errors.As(err, &ft) && ft.Limit != 1024 {
			t.Errorf("limit %d", ft.Limit)
		}
		select {
		case err := <-held:
			t.Fatalf("the call holding on the same connection ended: %v", err)
		default:
		}
		cancel()
		if err := <-held; status.CodeOf(err) != status.Canceled {
			t.Errorf("held call: %v, want Canceled", err)
		}
		checkServing(t, c, "after metadata over the frame size")
		waitCalls(t, e.srv, 0)
	}

	t.Run("request", func(t *testing.T) {
		c := e.client(t, nil)
		check(t, c, func() error {
			var out []byte
			return c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out, WithMetadata(Metadata{"k": {big}}))
		})
	})
	for _, m := range []string{"Bad.BigHeader", "Bad.BigTrailer"} {
		t.Run(m, func(t *testing.T) {
			c := e.client(t, &ClientOptions{Settings: wire.Settings{MaxFrameSize: 1024}})
			check(t, c, func() error {
				var out []byte
				return c.Invoke(context.Background(), m, []byte("x"), &out)
			})
		})
	}
}
