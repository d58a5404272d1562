package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// requireCN returns a policy that allows peers whose verified certificate is
// named cn.
func requireCN(cn string) peer.Policy {
	return peer.PolicyFunc(func(p *peer.Peer) error {
		if p.TLS == nil || len(p.TLS.VerifiedChains) == 0 {
			return errors.New("no verified certificate")
		}
		if got := p.TLS.VerifiedChains[0][0].Subject.CommonName; got != cn {
			return fmt.Errorf("certificate %q is not %q", got, cn)
		}
		return nil
	})
}

// TestTLSPolicyBeforeData checks that a server connection refuses to move
// data until the handshake has completed and the policy has allowed the
// peer, even when the server writes first without calling Handshake.
func TestTLSPolicyBeforeData(t *testing.T) {
	p := getPKI(t)
	var log syncBuffer
	l := listen(t, "tls://127.0.0.1:0", &transport.ListenConfig{
		TLS:    p.serverConfig(),
		Policy: requireCN("client"),
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	writeErr := make(chan error, 1)
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			writeErr <- err
			return
		}
		_, err = c.Write([]byte("secret"))
		c.Close()
		writeErr <- err
	}()

	// The intruder's certificate is valid, so its handshake succeeds; the
	// policy refuses it.
	c := dial(t, l.Endpoint().String(), &transport.DialConfig{TLS: p.clientConfig(p.intruder)})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if got, _ := io.ReadAll(c); len(got) != 0 {
		t.Errorf("the refused client read %q", got)
	}

	err := <-writeErr
	if !errors.Is(err, peer.ErrDenied) {
		t.Fatalf("server Write: %v, want ErrDenied", err)
	}
	if !strings.Contains(err.Error(), `certificate "intruder" is not "client"`) {
		t.Errorf("error %q does not give the policy's reason", err)
	}
	if got := l.Stats(); got != (transport.Stats{Accepted: 1, Rejected: 1}) {
		t.Errorf("Stats = %+v, want 1 accepted and 1 rejected", got)
	}
	if !strings.Contains(log.String(), "peer rejected") || !strings.Contains(log.String(), "cn=intruder") {
		t.Errorf("log %q", log.String())
	}
}

func TestTLSAcceptNotStalled(t *testing.T) {
	p := getPKI(t)
	l := listen(t, "tls://127.0.0.1:0", &transport.ListenConfig{TLS: p.serverConfig()})
	silent, err := net.Dial("tcp", l.Endpoint().Address)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The silent client sends nothing, yet Accept returns it at once.
	stalled, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()

	// A well-behaved client is served meanwhile.
	report := make(chan served, 1)
	serveEcho(t, l, report)
	c := dial(t, l.Endpoint().String(), &transport.DialConfig{TLS: p.clientConfig(p.client)})
	echo(t, c, "not stalled")
	if s := receive(t, report); s.err != nil {
		t.Fatal(s.err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := stalled.Handshake(ctx); err == nil {
		t.Fatal("the silent client's handshake succeeded")
	}
	if got := l.Stats(); got != (transport.Stats{Accepted: 2}) {
		t.Errorf("Stats = %+v, want 2 accepted", got)
	}
}

func TestTLSHandshakeTimeout(t *testing.T) {
	l := listen(t, "tls://127.0.0.1:0", &transport.ListenConfig{
		TLS:              getPKI(t).serverConfig(),
		HandshakeTimeout: 10 * time.Millisecond,
	})
	silent, err := net.Dial("tcp", l.Endpoint().Address)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c, err := l.AcceptConn()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Read runs the handshake, bounded by HandshakeTimeout.
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read: %v, want a handshake timeout", err)
	}
	if err2 := c.Handshake(context.Background()); err2 != err {
		t.Errorf("Handshake after a failed handshake: %v, want %v", err2, err)
	}
	if _, err2 := c.Write([]byte("x")); err2 != err {
		t.Errorf("Write after a failed handshake: %v, want %v", err2, err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after a failed handshake: %v", err)
	}
}

func TestTLSClientWithoutCertificate(t *testing.T) {
	p := getPKI(t)
	l := listen(t, "tls://127.0.0.1:0", &transport.ListenConfig{TLS: p.serverConfig()})
	report := make(chan served, 1)
	serveEcho(t, l, report)
	conf := p.clientConfig(p.client)
	conf.Certificates = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := transport.Dial(ctx, l.Endpoint().String(), &transport.DialConfig{TLS: conf}); err == nil {
		// With TLS 1.3 the client finishes first; the server's refusal
		// arrives on the first read.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == nil {
			t.Fatal("a client without a certificate was served")
		}
	}
	if s := receive(t, report); s.err == nil || errors.Is(s.err, peer.ErrDenied) {
		t.Errorf("server handshake: %v, want a TLS error", s.err)
	}
	if got := l.Stats().Rejected; got != 0 {
		t.Errorf("Rejected = %d: a failed handshake is not a policy refusal", got)
	}
}

func TestTLSServerPolicy(t *testing.T) {
	p := getPKI(t)
	l := listen(t, "tls://127.0.0.1:0", &transport.ListenConfig{TLS: p.serverConfig()})
	serveEcho(t, l, nil)
	addr := l.Endpoint().String()

	c := dial(t, addr, &transport.DialConfig{TLS: p.clientConfig(p.client), ServerPolicy: requireCN("server")})
	echo(t, c, "verified")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := transport.Dial(ctx, addr, &transport.DialConfig{TLS: p.clientConfig(p.client), ServerPolicy: requireCN("other")})
	if !errors.Is(err, peer.ErrDenied) {
		t.Fatalf("Dial with a ServerPolicy the server fails: %v, want ErrDenied", err)
	}
	if !strings.Contains(err.Error(), "warren: dial "+addr) {
		t.Errorf("error %q does not name the address", err)
	}
}
