package tokenauth

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestInRequest(t *testing.T) {
	const tok = "s3cret"
	for _, tc := range []struct {
		name   string
		header map[string]string
		ws     bool
		want   bool
	}{
		{"none", nil, false, false},
		{"bearer", map[string]string{"Authorization": "Bearer s3cret"}, false, true},
		{"bearer lower case", map[string]string{"Authorization": "bearer  s3cret "}, false, true},
		{"wrong bearer", map[string]string{"Authorization": "Bearer s3cre"}, false, false},
		{"basic", map[string]string{"Authorization": "Basic s3cret"}, false, false},
		{"cookie", map[string]string{"Cookie": "warren-token-7000=s3cret"}, false, true},
		{"cookie of another port", map[string]string{"Cookie": "warren-token-7001=s3cret"}, false, false},
		{"subprotocol", map[string]string{"Sec-WebSocket-Protocol": "warren, warren.bearer.s3cret"}, true, true},
		{"subprotocol without upgrade", map[string]string{"Sec-WebSocket-Protocol": "warren.bearer.s3cret"}, false, false},
	} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:7000/", nil)
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if got := InRequest(r, tok, tc.ws); got != tc.want {
			t.Errorf("%s: InRequest = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWantsHTML(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	if WantsHTML(r) {
		t.Error("no Accept: WantsHTML")
	}
	r.Header.Set("Accept", "text/html,application/xhtml+xml")
	if !WantsHTML(r) {
		t.Error("a browser's Accept: not WantsHTML")
	}
}

func FuzzBearer(f *testing.F) {
	f.Add("Bearer tok", "tok")
	f.Add("bearer", "")
	f.Fuzz(func(t *testing.T, v, tok string) {
		got := Bearer(v, tok)
		want := len(v) > 7 && strings.EqualFold(v[:7], "bearer ") && tok != "" && strings.TrimSpace(v[7:]) == tok
		if got != want {
			t.Fatalf("Bearer(%q, %q) = %v, want %v", v, tok, got, want)
		}
	})
}
