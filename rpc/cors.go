package rpc

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/warrenipc/warren/internal/bridgecore"

	"time"
)

// CORSOptions lets pages from other origins call a server's methods over
// HTTP (Connect, gRPC-Web) from a browser, following the CORS rules that
// Connect documents: preflight requests (OPTIONS) from an allowed origin
// are answered with the methods (POST, GET), the protocols' headers and any
// metadata header the page asks for; replies to an allowed origin expose
// every header (reply metadata, grpc-status, ...). Requests from other
// origins get no CORS headers, and those that change state are refused
// (as without CORS).
type CORSOptions struct {
	// AllowedOrigins lists the origins allowed, as browsers send them
	// (scheme://host[:port], for example "https://app.example.com"); "*"
	// allows every origin.
	AllowedOrigins []string
	// MaxAge is how long a browser may cache a preflight answer; 0 means
	// 2 hours.
	MaxAge time.Duration
}

var (
	corsMethods = []string{"POST, GET"}
	corsExpose  = []string{"*"}
)

// allows reports whether origin is allowed.
func (o *CORSOptions) allows(origin string) bool {
	return origin != "" && (slices.Contains(o.AllowedOrigins, "*") || slices.Contains(o.AllowedOrigins, origin))
}

// serveCORS adds the CORS headers for a request from an allowed origin and
// answers a preflight request, reporting whether it did.
func (s *Server) serveCORS(w http.ResponseWriter, r *http.Request) bool {
	o := s.opts.CORS
	origin := r.Header.Get("Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	h := w.Header()
	h.Add("Vary", "Origin")
	if !o.allows(origin) {
		if preflight {
			bridgecore.WritePlainError(w, http.StatusForbidden, "origin "+strconv.Quote(origin)+" is not allowed")
			return true
		}
		return false
	}
	h["Access-Control-Allow-Origin"] = []string{origin}
	if !preflight {
		h["Access-Control-Expose-Headers"] = corsExpose
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h["Access-Control-Allow-Methods"] = corsMethods
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		// Metadata is any header: allow what the page asks for.
		h["Access-Control-Allow-Headers"] = []string{req}
	}
	maxAge := o.MaxAge
	if maxAge <= 0 {
		maxAge = 2 * time.Hour
	}
	h["Access-Control-Max-Age"] = []string{strconv.Itoa(int(maxAge / time.Second))}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// crossOriginCheck refuses state-changing requests a browser sends on
// behalf of a page from an origin CORSOptions does not allow.
func (s *Server) crossOriginCheck(r *http.Request) error {
	if o := s.opts.CORS; o != nil && o.allows(r.Header.Get("Origin")) {
		return nil
	}
	return crossOrigin.Check(r)
}
