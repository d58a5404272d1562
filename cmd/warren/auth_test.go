package main

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// serveTCP starts `warren serve` on a free loopback port and returns it
// with the page URL it printed.
func serveTCP(t *testing.T, args ...string) (*server, string) {
	t.Helper()
	s := startServe(t, nil, append([]string{"--addr", "tcp://127.0.0.1:0"}, args...)...)
	l := s.line()
	u, ok := strings.CutPrefix(l, "open ")
	if !ok {
		t.Fatalf("serve printed %q, want \"open URL\"", l)
	}
	return s, u
}

func TestServeToken(t *testing.T) {
	s, u := serveTCP(t)
	token, ok := strings.CutPrefix(u, "http://"+strings.TrimPrefix(s.addr, "tcp://")+"/?token=")
	if !ok || len(token) != 43 {
		t.Fatalf("URL %q: want http://ADDR/?token= and 43 characters", u)
	}
	r := runCmd(t, nil, "", "call", s.addr, "Counter.Set", `{"name":"a","value":1}`)
	wantFail(t, "call without a token", r, 1, "error: unauthenticated:", "--token")
	wantFail(t, "call with a wrong token", runCmd(t, nil, "", "call", "--token", "x", s.addr, "Counter.Get", `{"name":"a"}`), 1, "unauthenticated")
	r = runCmd(t, nil, "", "call", "--token", token, s.addr, "Counter.Set", `{"name":"a","value":1}`)
	if r.code != 0 {
		t.Fatalf("call --token: %s", r)
	}
	r = runCmd(t, cmdEnv(t, "WARREN_TOKEN="+token), "", "list", s.addr)
	if r.code != 0 || !strings.Contains(r.stdout, "Counter.Inc") {
		t.Fatalf("list with WARREN_TOKEN: %s", r)
	}
	if r := runCmd(t, cmdEnv(t, "WARREN_TOKEN="+token), "", "ping", "-n", "3", s.addr); r.code != 0 {
		t.Fatalf("ping with WARREN_TOKEN: %s", r)
	}

	// The page: refused without the token, served with it.
	get := func(url string, header ...string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := strings.Replace(s.addr, "tcp://", "http://", 1)
	if st, _ := get(base+"/", "Accept", "text/html"); st != 401 {
		t.Errorf("page without a token: %d, want 401", st)
	}
	if st, _ := get(u, "Accept", "text/html"); st != 303 {
		t.Errorf("page with ?token: %d, want 303 to set the cookie", st)
	}
	st, body := get(base+"/", "Accept", "text/html", "Authorization", "Bearer "+token)
	if st != 200 || !strings.Contains(body, `<script type="module" src="/app.js">`) {
		t.Errorf("page with the token: %d %.80q", st, body)
	}
	if st, body := get(base+"/app.js", "Authorization", "Bearer "+token); st != 200 || len(body) < 1000 {
		t.Errorf("app.js: %d, %d bytes", st, len(body))
	}
	if st, body := get(base+"/", "Authorization", "Bearer "+token); st != 200 || !strings.Contains(body, `"methods"`) {
		t.Errorf("GET / without Accept: text/html: %d %.80q, want the method list", st, body)
	}
}

func TestServeTokenFlags(t *testing.T) {
	s, u := serveTCP(t, "--token", "chosen-token")
	if !strings.HasSuffix(u, "/?token=chosen-token") {
		t.Fatalf("URL %q", u)
	}
	if r := runCmd(t, nil, "", "call", "--token", "chosen-token", s.addr, "Counter.List"); r.code != 0 {
		t.Fatalf("call with --token: %s", r)
	}

	s, u = serveTCP(t, "--no-auth")
	if strings.Contains(u, "token") {
		t.Fatalf("--no-auth printed %q", u)
	}
	s.waitStderr("WARNING: --no-auth")
	if r := runCmd(t, nil, "", "call", s.addr, "Counter.List"); r.code != 0 {
		t.Fatalf("call with --no-auth: %s", r)
	}

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--addr", "tcp://0.0.0.0:0", "--no-auth"}, "loopback addresses only"},
		{[]string{"--addr", "tcp://127.0.0.1:0", "--no-auth", "--token", "x"}, "exclude each other"},
	} {
		wantFail(t, strings.Join(tc.args, " "), runCmd(t, nil, "", append([]string{"serve"}, tc.args...)...), 2, tc.msg)
	}
}

func TestPageOverUnixSocket(t *testing.T) {
	curl := requireTool(t, "curl")
	s := serveTemp(t)
	out, err := exec.Command(curl, "-sS", "--max-time", "20", "--unix-socket", s.path, "-H", "Accept: text/html", "http://warren/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "<title>warren") {
		t.Fatalf("the page through the unix socket: %v %.200q", err, out)
	}
}
