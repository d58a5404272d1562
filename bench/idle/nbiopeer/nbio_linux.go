//go:build linux

package nbiopeer

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"

	"github.com/warrenipc/warren/bench/idle"
)

func init() {
	// nbio's engine accepts a connection in one goroutine and hands it to a
	// poller goroutine through epoll, which the race detector does not
	// see: every run reports the poller's first reads of the connection.
	idle.RegisterPeer("nbio", idle.Peer{Serve: serve, RacePrefix: "github.com/lesismal/nbio"})
}

// serve is the system "nbio": github.com/lesismal/nbio's HTTP engine
// (its own epoll pollers, non-blocking mode) serving WebSocket at idle.WSPath
// with its upgrader, which echoes every message; all its settings are the
// defaults (among them a read deadline of 120 s on an idle connection, its
// keepalive, and a pool of goroutines that run the handlers).
func serve(in io.Reader, out io.Writer) error {
	logging.Output = os.Stderr // not stdout, which answers the parent
	logging.SetLevel(logging.LevelError)
	var count atomic.Int64
	u := websocket.NewUpgrader()
	u.OnOpen(func(*websocket.Conn) { count.Add(1) })
	u.OnClose(func(*websocket.Conn, error) { count.Add(-1) })
	u.OnMessage(func(c *websocket.Conn, mt websocket.MessageType, data []byte) {
		if err := c.WriteMessage(mt, data); err != nil {
			c.Close()
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc(idle.WSPath, func(w http.ResponseWriter, r *http.Request) {
		u.Upgrade(w, r, nil) // it answers the request itself when it fails
	})
	addrs := make(chan net.Addr, 1)
	engine := nbhttp.NewEngine(nbhttp.Config{
		Network: "tcp",
		Addrs:   []string{"127.0.0.1:0"},
		Handler: mux,
		Listen: func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err == nil {
				addrs <- ln.Addr()
			}
			return ln, err
		},
	})
	if err := engine.Start(); err != nil {
		return err
	}
	defer engine.Stop()
	fmt.Fprintf(out, "ready %s\n", <-addrs)
	return idle.AnswerStats(in, out, count.Load)
}
