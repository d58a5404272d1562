// Package testutil holds helpers shared by the tests and benchmarks of
// several packages.
// It imports no warren package, so that any package's tests may use it.
package testutil

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// ChunkReader returns its Chunks one Read at a time and fails the test if
// read past them (unless Err is set, which it then returns), so tests can
// prove a reader stops early.
type ChunkReader struct {
	T      testing.TB
	Chunks []string
	Err    error // returned after the chunks; nil fails the test
}

func (r *ChunkReader) Read(p []byte) (int, error) {
	if len(r.Chunks) == 0 {
		if r.Err == nil {
			r.T.Fatal("read past the bytes the test provided")
		}
		return 0, r.Err
	}
	n := copy(p, r.Chunks[0])
	r.Chunks[0] = r.Chunks[0][n:]
	if r.Chunks[0] == "" {
		r.Chunks = r.Chunks[1:]
	}
	return n, nil
}

// EmptyReader returns 0, nil from every Read: a reader that makes no
// progress.
type EmptyReader struct{}

func (EmptyReader) Read([]byte) (int, error) { return 0, nil }

// UnixPair returns both ends of a connected Unix domain socket in a
// temporary directory, closed when the test ends.
func UnixPair(tb testing.TB) (client, server net.Conn) {
	tb.Helper()
	l, err := net.Listen("unix", filepath.Join(tb.TempDir(), "s"))
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err = net.Dial("unix", l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close() })
	server = <-accepted
	if server == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { server.Close() })
	return client, server
}

// WaitFor polls cond until it holds, failing the test after 5 seconds.
func WaitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not met in 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var testTLS struct {
	once           sync.Once
	server, client *tls.Config
	err            error
}

// TLSConfigs returns a server configuration with a self-signed certificate
// for 127.0.0.1 and localhost, and a client configuration that trusts it.
// The certificate is made once per test binary.
func TLSConfigs(tb testing.TB) (server, client *tls.Config) {
	tb.Helper()
	testTLS.once.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			testTLS.err = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: "warren-test"},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:              []string{"localhost"},
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			testTLS.err = err
			return
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			testTLS.err = err
			return
		}
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		testTLS.server = &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
			MinVersion:   tls.VersionTLS12,
		}
		testTLS.client = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	})
	if testTLS.err != nil {
		tb.Fatal(testTLS.err)
	}
	return testTLS.server, testTLS.client
}

// SizeName names a sub-benchmark by a size: "size=16B", "size=64KiB",
// "size=1MiB".
func SizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("size=%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("size=%dKiB", n>>10)
	}
	return fmt.Sprintf("size=%dB", n)
}

// SyncBuffer is a bytes.Buffer for writes from several goroutines, such
// as a logger's.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
