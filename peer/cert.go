package peer

import (
	"crypto/x509"
	"slices"
	"strings"
)

// Certificate-identity policies. They look at the leaf of the peer's first
// verified chain (TLS.VerifiedChains[0][0]): a certificate that was
// presented but not verified against a CA, as with tls.RequireAnyClientCert,
// never counts. Peers without a verified certificate (unix, tcp, ws, or TLS
// without client certificates) are denied. Names are compared exactly
// (DNS names without regard to case); combine them with AnyOf and AllOf,
// and with the credential policies for servers that listen on both.

// AllowDNSNames returns a Policy that allows peers whose verified
// certificate has one of names among its DNS subject alternative names.
func AllowDNSNames(names ...string) Policy {
	want := make([]string, len(names))
	for i, n := range names {
		want[i] = strings.ToLower(n)
	}
	return certNames{what: "DNS name", want: want, names: func(c *x509.Certificate) []string {
		got := make([]string, len(c.DNSNames))
		for i, n := range c.DNSNames {
			got[i] = strings.ToLower(n)
		}
		return got
	}}
}

// AllowURIs returns a Policy that allows peers whose verified certificate
// has one of uris among its URI subject alternative names, such as the
// SPIFFE ID spiffe://example.org/ns/prod/sa/billing.
func AllowURIs(uris ...string) Policy {
	return certNames{what: "URI", want: slices.Clone(uris), names: func(c *x509.Certificate) []string {
		got := make([]string, len(c.URIs))
		for i, u := range c.URIs {
			got[i] = u.String()
		}
		return got
	}}
}

// AllowCommonNames returns a Policy that allows peers whose verified
// certificate's subject common name is one of names. Prefer subject
// alternative names (AllowDNSNames, AllowURIs) where the certificates
// carry them.
func AllowCommonNames(names ...string) Policy {
	return certNames{what: "common name", want: slices.Clone(names), names: func(c *x509.Certificate) []string {
		if c.Subject.CommonName == "" {
			return nil
		}
		return []string{c.Subject.CommonName}
	}}
}

type certNames struct {
	what  string // for messages: "DNS name"
	want  []string
	names func(*x509.Certificate) []string
}

func (s certNames) Authorize(p *Peer) error {
	leaf := verifiedLeaf(p)
	if leaf == nil {
		return deny(p, "no verified certificate (the %s policy needs TLS with certificates verified against a CA)", s.what)
	}
	got := s.names(leaf)
	for _, n := range got {
		if slices.Contains(s.want, n) {
			return nil
		}
	}
	have := "none"
	if len(got) > 0 {
		have = strings.Join(got, ", ")
	}
	return deny(p, "certificate %ss (%s) not among the allowed %ss %v", s.what, have, s.what, s.want)
}

// verifiedLeaf returns the peer's certificate from its first verified chain,
// or nil if the peer has none: not TLS, before the handshake, or a
// certificate that was not verified.
func verifiedLeaf(p *Peer) *x509.Certificate {
	if p == nil || p.TLS == nil || len(p.TLS.VerifiedChains) == 0 || len(p.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return p.TLS.VerifiedChains[0][0]
}
