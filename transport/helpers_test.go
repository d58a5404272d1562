package transport_test

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
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// testPKI is a certificate authority with certificates it issued.
type testPKI struct {
	pool     *x509.CertPool
	server   tls.Certificate // CN "server", for 127.0.0.1 and localhost
	client   tls.Certificate // CN "client"
	intruder tls.Certificate // CN "intruder", also valid
}

var (
	pkiOnce sync.Once
	pki     *testPKI
	pkiErr  error
)

// getPKI returns the test PKI, made once per test binary.
func getPKI(t *testing.T) *testPKI {
	t.Helper()
	pkiOnce.Do(func() { pki, pkiErr = newPKI() })
	if pkiErr != nil {
		t.Fatal(pkiErr)
	}
	return pki
}

func newPKI() (*testPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "warren test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
	}
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	if p.server, err = issue(2, "server", x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if p.client, err = issue(3, "client", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if p.intruder, err = issue(4, "intruder", x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *testPKI) serverConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{p.server},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

func (p *testPKI) clientConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{cert}}
}

// served is what serveEcho reports for each accepted connection.
type served struct {
	peer *peer.Peer // after the handshake
	err  error      // the handshake's error
}

// serveEcho accepts connections on l and echoes each one back until the
// client closes it. It reports each connection, after its handshake, on
// report if report is not nil (without blocking). Cleanup closes l and every
// connection and waits for the goroutines.
func serveEcho(t *testing.T, l *transport.Listener, report chan<- served) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // protects conns
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.AcceptConn()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				err := c.Handshake(context.Background())
				if report != nil {
					select {
					case report <- served{peer: c.Peer(), err: err}:
					default:
					}
				}
				if err == nil {
					io.Copy(c, c)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// receive waits for a report from serveEcho.
func receive(t *testing.T, ch <-chan served) served {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the server reported no connection")
		return served{}
	}
}

// dial dials addr and closes the connection at cleanup.
func dial(t *testing.T, addr string, cfg *transport.DialConfig) *transport.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := transport.Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listen listens on addr and closes the listener at cleanup.
func listen(t *testing.T, addr string, cfg *transport.ListenConfig) *transport.Listener {
	t.Helper()
	l, err := transport.Listen(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// echo writes msg to c and checks that it comes back.
func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("echo = %q, want %q", got, msg)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for log output.
type syncBuffer struct {
	mu  sync.Mutex // protects buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
