package main

import (
	"bytes"
	_ "embed"
	"net/http"
	"time"
)

// The counter page, served by warren serve at GET / (for browsers) on every
// listener: page/index.html, and page/app.js, the TypeScript client bundled
// with clients/ts/page/app.ts by `npm run bundle` in clients/ts (CI checks
// that rebuilding it gives these bytes).

//go:embed page/index.html
var pageHTML []byte

//go:embed page/app.js
var pageJS []byte

// pageHandler serves the page's files; other paths get 404.
type pageHandler struct{}

func (pageHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	var ctype string
	switch r.URL.Path {
	case "/", "/index.html":
		body, ctype = pageHTML, "text/html; charset=utf-8"
	case "/app.js":
		body, ctype = pageJS, "text/javascript; charset=utf-8"
	default:
		http.Error(w, "404 page not found: the page is at / and methods are called with POST /Service.Method", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}
