package mux_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

// TestServerKeepHTTP: with Config.KeepHTTP, Server leaves an HTTP client
// to its caller: the error matches wire.ErrHTTPRequest, its
// *wire.NotWarrenError holds the bytes read, and the connection is neither
// answered nor closed.
func TestServerKeepHTTP(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		for _, req := range []string{
			"GET /Counter.Get HTTP/1.1\r\nHost: x\r\n\r\n",
			"POST /Counter/Inc HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"name\":\"a\"}",
		} {
			cc, sc := k.pair(t)
			cfg := newServer(t, nil).config(wire.Settings{})
			cfg.KeepHTTP = true
			go io.WriteString(cc, req)
			errc := make(chan error, 1)
			go func() {
				errc <- func() error {
					defer sc.Close()
					s, err := mux.Server(sc, cfg)
					if s != nil {
						s.Close()
						return errors.New("Server made a session for an HTTP client")
					}
					var nw *wire.NotWarrenError
					if !errors.Is(err, wire.ErrHTTPRequest) || !errors.As(err, &nw) {
						return fmt.Errorf("Server error = %v, want one matching ErrHTTPRequest", err)
					}
					if len(nw.Prefix) == 0 || !strings.HasPrefix(req, string(nw.Prefix)) {
						return fmt.Errorf("Prefix %q is not the start of %q", nw.Prefix, req)
					}
					// The rest of the request is still there, and the
					// connection still open: the caller answers.
					sc.SetDeadline(time.Time{})
					rest := make([]byte, len(req)-len(nw.Prefix))
					if _, err := io.ReadFull(sc, rest); err != nil || string(nw.Prefix)+string(rest) != req {
						return fmt.Errorf("read the rest: %q, %v", rest, err)
					}
					_, err = io.WriteString(sc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
					return err
				}()
			}()
			resp := readAllClosed(t, cc)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(resp), "\r\n\r\nok") {
				t.Fatalf("response %q", resp)
			}
		}
	})
}
