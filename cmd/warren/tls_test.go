package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certsIn runs `warren certs` with args into a new directory and returns it.
func certsIn(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	r := runCmd(t, nil, "", append(append([]string{"certs"}, args...), dir)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "wrote "+dir) {
		t.Fatalf("warren certs: %s", r)
	}
	return dir
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCerts(t *testing.T) {
	dir := certsIn(t, "--client-uri", "spiffe://example.org/web", "--client-name", "web")
	for name, mode := range map[string]os.FileMode{
		"ca.pem": 0o644, "server.pem": 0o644, "server-key.pem": 0o600, "client.pem": 0o644, "client-key.pem": 0o600,
	} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	srv := readCert(t, filepath.Join(dir, "server.pem"))
	for _, host := range []string{"localhost", "127.0.0.1"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.org"}); err == nil {
		t.Error("server certificate valid for example.org")
	}
	cli := readCert(t, filepath.Join(dir, "client.pem"))
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if cli.Subject.CommonName != "web" || len(cli.URIs) != 1 || cli.URIs[0].String() != "spiffe://example.org/web" {
		t.Errorf("client certificate: cn %q, URIs %v", cli.Subject.CommonName, cli.URIs)
	}
	for _, c := range []*x509.Certificate{ca, srv, cli} {
		k, ok := c.PublicKey.(*ecdsa.PublicKey)
		if !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", c.Subject.CommonName, c.PublicKey)
		}
		if d := time.Until(c.NotAfter); d < 360*24*time.Hour || d > 370*24*time.Hour {
			t.Errorf("%s: valid for %v more", c.Subject.CommonName, d)
		}
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")); err != nil {
		t.Error(err)
	}

	// Existing files are left alone, unless --force.
	r := runCmd(t, nil, "", "certs", dir)
	wantFail(t, "certs over existing files", r, 1, "already exists", "--force")
	if r2 := runCmd(t, nil, "", "certs", "--force", "--host", "warren.example.org", dir); r2.code != 0 {
		t.Fatalf("certs --force: %s", r2)
	}
	if got := readCert(t, filepath.Join(dir, "server.pem")).DNSNames; len(got) != 1 || got[0] != "warren.example.org" {
		t.Fatalf("server names after --host: %v", got)
	}
}

// tlsClient returns the certificate flags of a client of dir's server.
func tlsClient(dir string) []string {
	return []string{"--ca", filepath.Join(dir, "ca.pem"), "--cert", filepath.Join(dir, "client.pem"), "--key", filepath.Join(dir, "client-key.pem")}
}

func tlsServer(dir string) []string {
	return []string{"--cert", filepath.Join(dir, "server.pem"), "--key", filepath.Join(dir, "server-key.pem"), "--client-ca", filepath.Join(dir, "ca.pem")}
}

func TestServeTLS(t *testing.T) {
	dir := certsIn(t)
	other := certsIn(t)
	s := startServe(t, nil, append([]string{"--addr", "tls://127.0.0.1:0"}, tlsServer(dir)...)...)
	s.waitStderr("callers allowed: certificates signed by")
	cli := tlsClient(dir)
	run := func(args ...string) result { return runCmd(t, nil, "", args...) }
	callTLS := func(flags []string, method, req string) result {
		return run(append(append([]string{"call"}, flags...), s.addr, method, req)...)
	}

	if r := callTLS(cli, "Counter.Set", `{"name":"a","value":1}`); r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"a","value":"1"}` {
		t.Fatalf("call with a client certificate: %s", r)
	}
	if r := run(append(append([]string{"list"}, cli...), s.addr)...); r.code != 0 || !strings.Contains(r.stdout, "Counter.Watch") {
		t.Fatalf("list: %s", r)
	}
	if r := run(append(append([]string{"ping", "-n", "5"}, cli...), s.addr)...); r.code != 0 || !strings.HasPrefix(r.stdout, "5 pings to") {
		t.Fatalf("ping: %s", r)
	}
	w := startCmd(t, nil, nil, append(append([]string{"call"}, cli...), s.addr, "Counter.Watch", `{"name":"a"}`)...)
	wantOut(t, "watched", w.line(), `{"name":"a","value":"1"}`)
	callTLS(cli, "Counter.Inc", `{"name":"a"}`)
	wantOut(t, "watched", w.line(), `{"name":"a","value":"2"}`)
	w.signal(os.Interrupt)
	w.wait()

	ca := filepath.Join(dir, "ca.pem")
	wantFail(t, "no client certificate", callTLS([]string{"--ca", ca}, "Counter.Get", `{"name":"a"}`), 1,
		"error: unavailable: the server at "+s.addr+" requires a client certificate: pass --cert and --key")
	wantFail(t, "client certificate of another CA",
		callTLS([]string{"--ca", ca, "--cert", filepath.Join(other, "client.pem"), "--key", filepath.Join(other, "client-key.pem")}, "Counter.Get", `{"name":"a"}`), 1,
		"refused your client certificate: it is not signed by the CA the server trusts")
	wantFail(t, "server of another CA", callTLS(tlsClient(other), "Counter.Get", `{"name":"a"}`), 1,
		"presented a certificate not signed by a CA you trust: pass its CA with --ca")
	wantFail(t, "server name pinned", callTLS(append(cli, "--server-name", "warren.example.org"), "Counter.Get", `{"name":"a"}`), 1,
		"presented a certificate for other names", "not warren.example.org")
	if r := callTLS(append(cli, "--server-name", "localhost"), "Counter.Get", `{"name":"a"}`); r.code != 0 {
		t.Fatalf("--server-name localhost: %s", r)
	}
	wantFail(t, "cert without key", callTLS([]string{"--cert", "x.pem"}, "Counter.Get", `{}`), 2, "--cert and --key go together")

	// TLS 1.3 at least: a TLS 1.2 client is refused during the handshake.
	host := strings.TrimPrefix(s.addr, "tls://")
	conn, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Fatal("a TLS 1.2 handshake succeeded")
	}
}

func TestServeTLSNames(t *testing.T) {
	dir := certsIn(t, "--client-name", "web", "--client-uri", "spiffe://example.org/web")
	for _, tc := range []struct {
		allow []string
		ok    bool
	}{
		{[]string{"--allow-cn", "web"}, true},
		{[]string{"--allow-san", "web"}, true},
		{[]string{"--allow-san", "spiffe://example.org/web"}, true},
		{[]string{"--allow-cn", "db", "--allow-san", "spiffe://example.org/web"}, true},
		{[]string{"--allow-cn", "db", "--allow-san", "spiffe://example.org/db,db.example.org"}, false},
	} {
		s := startServe(t, nil, append(append([]string{"--addr", "tls://127.0.0.1:0"}, tlsServer(dir)...), tc.allow...)...)
		r := runCmd(t, nil, "", append(append([]string{"call"}, tlsClient(dir)...), s.addr, "Counter.List")...)
		if tc.ok && r.code != 0 {
			t.Errorf("%v: %s", tc.allow, r)
		}
		if !tc.ok {
			wantFail(t, strings.Join(tc.allow, " "), r, 1, "error: permission_denied: the server at "+s.addr+" does not allow your client certificate",
				"certificate common names (web) not among the allowed common names [db]")
		}
		s.signal(os.Interrupt)
		s.wait()
	}
	r := runCmd(t, nil, "", "serve", "--addr", "tls://127.0.0.1:0", "--cert", filepath.Join(dir, "server.pem"), "--key", filepath.Join(dir, "server-key.pem"), "--allow-cn", "web")
	wantFail(t, "--allow-cn without --client-ca", r, 2, "--allow-san and --allow-cn need --client-ca")
}

// TestServeWS: ws:// needs no certificate but a token; wss:// takes the
// same flags as tls://, and with --client-ca no token.
func TestServeWS(t *testing.T) {
	s := startServe(t, nil, "--addr", "ws://127.0.0.1:0/warren", "--token", "ws-token")
	s.waitStderr("callers must send the token")
	r := runCmd(t, nil, "", "call", "--token", "ws-token", s.addr, "Counter.Set", `{"name":"a","value":3}`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"a","value":"3"}` {
		t.Fatalf("call over ws: %s", r)
	}
	r = runCmd(t, nil, "", "call", s.addr, "Counter.Get", `{"name":"a"}`)
	wantFail(t, "ws without the token", r, 1, "requires a token")

	dir := certsIn(t)
	s2 := startServe(t, nil, append([]string{"--addr", "wss://127.0.0.1:0/warren"}, tlsServer(dir)...)...)
	r = runCmd(t, nil, "", append(append([]string{"call"}, tlsClient(dir)...), s2.addr, "Counter.Set", `{"name":"a","value":4}`)...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"a","value":"4"}` {
		t.Fatalf("call over wss: %s", r)
	}
	_, port, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(s2.addr, "wss://"), "/warren"))
	r = runCmd(t, nil, "", "call", "--ca", filepath.Join(dir, "ca.pem"), "wss://localhost:"+port+"/warren", "Counter.Get", `{"name":"a"}`)
	wantFail(t, "wss without a client certificate", r, 1, "requires a client certificate")
}
