// Package console serves a server's console page (rpc.ServerOptions.Console)
// under Prefix on the HTTP bridge: the methods with their kinds and message
// shapes, a form that calls a unary method with JSON, a panel that follows a
// server stream, and live figures from internal/metrics (calls per second
// and latency per method, connections by transport and by peer uid,
// refusals and sheds).
//
// The page (assets/) is static and embedded; it reads everything through
// requests the server checks like any other (Host, origin, token): the
// method list is a call of Warren.Methods, a unary call a Connect POST, a
// server stream a POST to Prefix+"stream" answered as JSON lines, and the
// figures a GET of Prefix+"figures". The page's script inserts what it
// receives as text, never as HTML.
package console

import (
	"bytes"
	"embed"
	"net/http"
	"strings"
	"time"

	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/metrics"
)

// Prefix is the path under which the console is served.
const Prefix = "/console/"

//go:embed assets
var assets embed.FS

// Handler serves the console of one server.
type Handler struct {
	srv     bridgecore.Server
	figures *sampler
}

// New returns the console of srv; snapshot reads its metrics.
func New(srv bridgecore.Server, snapshot func() metrics.Snapshot) *Handler {
	return &Handler{srv: srv, figures: newSampler(snapshot)}
}

// Match reports whether path is the console's.
func Match(path string) bool {
	return strings.HasPrefix(path, Prefix) || path == strings.TrimSuffix(Prefix, "/")
}

// Serve answers a request for a path Match accepts, on connection c,
// already authorized.
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, c bridgecore.Conn) {
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if r.URL.Path+"/" == Prefix {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	switch {
	case name == "stream" && r.Method == http.MethodPost:
		h.serveStream(w, r, c)
		return
	case name == "figures" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		h.serveFigures(w, r)
		return
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header()["Allow"] = []string{"GET, HEAD"}
		bridgecore.WritePlainError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": the console's files are read with GET")
		return
	}
	file, ctype := "", ""
	switch name {
	case "", "index.html":
		file, ctype = "index.html", "text/html; charset=utf-8"
	case "console.js":
		file, ctype = "console.js", "text/javascript; charset=utf-8"
	case "console.css":
		file, ctype = "console.css", "text/css; charset=utf-8"
	default:
		bridgecore.WritePlainError(w, http.StatusNotFound, "404 page not found: the console is at "+Prefix)
		return
	}
	body, err := assets.ReadFile("assets/" + file)
	if err != nil {
		panic(err) // embedded
	}
	securityHeaders(w.Header(), ctype)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// securityHeaders sets the headers of every console answer: no caching
// across versions, no sniffing, no framing, and a policy that lets the page
// run only its own script and reach only its own origin.
func securityHeaders(h http.Header, ctype string) {
	h.Set("Content-Type", ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
}
