package peer_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/warrenipc/warren/peer"
)

// tlsPeer returns a TLS peer whose verified leaf is cert; verified false
// puts it among the presented certificates only.
func tlsPeer(cert *x509.Certificate, verified bool) *peer.Peer {
	st := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	if verified {
		st.VerifiedChains = [][]*x509.Certificate{{cert}}
	}
	return &peer.Peer{Network: "tls", TLS: st}
}

func TestCertPolicies(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://example.org/ns/prod/sa/billing")
	cert := &x509.Certificate{
		Subject:  pkix.Name{CommonName: "billing"},
		DNSNames: []string{"Billing.Example.org", "billing"},
		URIs:     []*url.URL{spiffe},
	}
	bare := &x509.Certificate{}
	tests := []struct {
		name   string
		pol    peer.Policy
		p      *peer.Peer
		allow  bool
		reason string
	}{
		{"dns in", peer.AllowDNSNames("billing.example.org"), tlsPeer(cert, true), true, ""},
		{"dns out", peer.AllowDNSNames("web.example.org"), tlsPeer(cert, true), false,
			"certificate DNS names (billing.example.org, billing) not among the allowed DNS names [web.example.org]"},
		{"dns unverified", peer.AllowDNSNames("billing"), tlsPeer(cert, false), false, "no verified certificate"},
		{"dns not tls", peer.AllowDNSNames("billing"), &peer.Peer{Network: "tcp"}, false, "no verified certificate"},
		{"dns nil peer", peer.AllowDNSNames("billing"), nil, false, "no verified certificate"},
		{"dns none", peer.AllowDNSNames("billing"), tlsPeer(bare, true), false, "DNS names (none)"},
		{"uri in", peer.AllowURIs("spiffe://example.org/ns/prod/sa/billing"), tlsPeer(cert, true), true, ""},
		{"uri prefix is not a match", peer.AllowURIs("spiffe://example.org/ns/prod"), tlsPeer(cert, true), false,
			"certificate URIs (spiffe://example.org/ns/prod/sa/billing) not among the allowed URIs"},
		{"cn in", peer.AllowCommonNames("billing"), tlsPeer(cert, true), true, ""},
		{"cn is case-sensitive", peer.AllowCommonNames("Billing"), tlsPeer(cert, true), false, "common names (billing)"},
		{"cn empty", peer.AllowCommonNames(""), tlsPeer(bare, true), false, "common names (none)"},
		{"AnyOf cn or uri", peer.AnyOf(peer.AllowCommonNames("web"), peer.AllowURIs(spiffe.String())), tlsPeer(cert, true), true, ""},
		{"AllOf cn and dns", peer.AllOf(peer.AllowCommonNames("billing"), peer.AllowDNSNames("web")), tlsPeer(cert, true), false, "[web]"},
		{"AnyOf uid or cn", peer.AnyOf(peer.AllowUIDs(0), peer.AllowCommonNames("billing")), tlsPeer(cert, true), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := peer.Authorize(tt.pol, tt.p)
			if (err == nil) != tt.allow {
				t.Fatalf("allowed = %t, want %t (err %v)", err == nil, tt.allow, err)
			}
			if err != nil && !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("error %q lacks %q", err, tt.reason)
			}
		})
	}
}

func TestVerifiedLeaf(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "x"}}
	if peer.VerifiedLeaf(tlsPeer(cert, true)) != cert {
		t.Fatal("VerifiedLeaf of a verified peer is not its leaf")
	}
	if peer.VerifiedLeaf(tlsPeer(cert, false)) != nil {
		t.Fatal("VerifiedLeaf returned an unverified certificate")
	}
	if peer.VerifiedLeaf(&peer.Peer{Network: "tls", TLS: &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{}}}}) != nil {
		t.Fatal("VerifiedLeaf of an empty chain is not nil")
	}
}
