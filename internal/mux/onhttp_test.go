package mux_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

// TestServerOnHTTP hands an HTTP client to Config.OnHTTP: the connection it
// gets reads as the whole request (the bytes the preface reader consumed
// are replayed), has no handshake deadline left, and stays open until
// OnHTTP is done with it.
func TestServerOnHTTP(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		for _, req := range []string{
			"GET /Counter.Get HTTP/1.1\r\nHost: x\r\n\r\n",
			"POST /Counter/Inc HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"name\":\"a\"}",
		} {
			cc, sc := k.pair(t)
			cfg := newServer(t, nil).config(wire.Settings{})
			cfg.HandshakeTimeout = 50 * time.Millisecond
			got := make(chan string, 1)
			cfg.OnHTTP = func(conn net.Conn) {
				defer conn.Close()
				time.Sleep(100 * time.Millisecond) // past the handshake timeout: no deadline is left
				r, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				body, _ := io.ReadAll(r.Body)
				got <- r.Method + " " + r.URL.Path + " " + string(body)
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}
			errc := make(chan error, 1)
			go func() {
				s, err := mux.Server(sc, cfg)
				if s != nil {
					s.Close()
				}
				errc <- err
			}()
			go io.WriteString(cc, req)
			resp := readAllClosed(t, cc)
			if err := <-errc; !errors.Is(err, wire.ErrHTTPRequest) {
				t.Fatalf("Server error = %v, want one matching ErrHTTPRequest", err)
			}
			method, rest, _ := strings.Cut(req, " ")
			path, _, _ := strings.Cut(rest, " ")
			_, body, _ := strings.Cut(req, "\r\n\r\n")
			if g := <-got; g != method+" "+path+" "+body {
				t.Fatalf("OnHTTP read %q", g)
			}
			if !strings.HasSuffix(string(resp), "\r\n\r\nok") {
				t.Fatalf("response %q", resp)
			}
		}
	})
}
