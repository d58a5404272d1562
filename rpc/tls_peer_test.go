package rpc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// issueClientCert returns a client certificate signed by ca (key caKey)
// with common name cn and URI SAN uri.
func issueClientCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, cn, uri string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(uri)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSClientCertificateInHandler: with client certificates required,
// the handler's peer holds the verified chain, and a server policy by URI
// SAN refuses other clients of the same CA with PermissionDenied.
func TestTLSClientCertificateInHandler(t *testing.T) {
	srvConf, cliConf := testutil.TLSConfigs(t)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(10),
		Subject:               pkix.Name{CommonName: "client CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	sc := srvConf.Clone()
	sc.ClientCAs, sc.ClientAuth, sc.MinVersion = pool, tls.RequireAndVerifyClientCert, tls.VersionTLS13

	l, err := transport.Listen("tls://127.0.0.1:0", &transport.ListenConfig{TLS: sc})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(&ServerOptions{Policy: peer.AllowURIs("spiffe://example.org/alice"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	HandleRaw(srv, "Who.Am", func(ctx context.Context, _ []byte) ([]byte, error) {
		p, _ := peer.FromContext(ctx)
		if p.TLS == nil || len(p.TLS.VerifiedChains) == 0 || len(p.TLS.VerifiedChains[0]) != 2 || !p.TLS.VerifiedChains[0][1].Equal(ca) {
			return nil, status.New(status.Internal, "no verified chain up to the client CA in the handler's peer")
		}
		leaf := p.TLS.VerifiedChains[0][0]
		return []byte(leaf.Subject.CommonName + " " + leaf.URIs[0].String()), nil
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-served
	}()

	call := func(cert tls.Certificate) (string, error) {
		cc := cliConf.Clone()
		cc.Certificates = []tls.Certificate{cert}
		c, err := Dial(l.Endpoint().String(), &ClientOptions{Dial: &transport.DialConfig{TLS: cc}})
		if err != nil {
			return "", err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var resp []byte
		err = c.Invoke(ctx, "Who.Am", []byte{}, &resp)
		return string(resp), err
	}
	got, err := call(issueClientCert(t, ca, caKey, 11, "alice", "spiffe://example.org/alice"))
	if err != nil || got != "alice spiffe://example.org/alice" {
		t.Fatalf("alice: %q, %v", got, err)
	}
	bob := issueClientCert(t, ca, caKey, 12, "bob", "spiffe://example.org/bob")
	_, err = call(bob)
	if status.CodeOf(err) != status.PermissionDenied || !strings.Contains(err.Error(), "spiffe://example.org/bob") {
		t.Fatalf("bob: %v; want permission_denied naming his URI", err)
	}

	// Over HTTP/2 (ALPN h2), a gRPC request gets grpc-status 7 naming him.
	cc := cliConf.Clone()
	cc.Certificates = []tls.Certificate{bob}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cc, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "https://"+l.Addr().String()+"/Who/Am", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("bob over HTTP/2: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.Header.Get("Grpc-Status") != "7" || !strings.Contains(resp.Header.Get("Grpc-Message"), "spiffe://example.org/bob") {
		t.Fatalf("bob over HTTP/2: %s %d %v; want grpc-status 7 naming his URI", resp.Proto, resp.StatusCode, resp.Header)
	}
}
