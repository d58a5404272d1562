package rpc_test

import (
	"net/http"
	"testing"

	"github.com/warrenipc/warren/rpc"
)

// TestCORS: preflight requests from an allowed origin are answered per the
// CORS rules, calls from it pass and expose their headers, and other
// origins are refused as without CORS.
func TestCORS(t *testing.T) {
	const page = "https://app.example"
	e := startHTTP(t, &rpc.ServerOptions{CORS: &rpc.CORSOptions{AllowedOrigins: []string{page}}}, nil)
	r := e.do(t, "OPTIONS", "/warren.counter.v1.Counter/Set", "", nil,
		"Origin", page, "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type,connect-protocol-version,x-trace")
	h := r.header
	if r.status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != page ||
		h.Get("Access-Control-Allow-Methods") != "POST, GET" ||
		h.Get("Access-Control-Allow-Headers") != "content-type,connect-protocol-version,x-trace" ||
		h.Get("Access-Control-Max-Age") != "7200" {
		t.Fatalf("preflight: %v", r)
	}
	r = e.do(t, "OPTIONS", "/Counter/Set", "", nil, "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	if r.status != http.StatusForbidden || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin: %v", r)
	}
	r = e.post(t, "/Counter.Set", `{"name":"c","value":"2"}`, "Origin", page, "Sec-Fetch-Site", "cross-site")
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != page || r.header.Get("Access-Control-Expose-Headers") != "*" {
		t.Fatalf("call from the allowed origin: %v", r)
	}
	wantError(t, e.post(t, "/Counter.Set", `{"name":"c"}`, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), 403, "permission_denied")

	// Off by default: a preflight is a method the server does not serve.
	e = startHTTP(t, nil, nil)
	r = e.do(t, "OPTIONS", "/Counter/Set", "", nil, "Origin", page, "Access-Control-Request-Method", "POST")
	if r.status != http.StatusMethodNotAllowed || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight without CORS: %v", r)
	}
}
