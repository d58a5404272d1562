package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var certsHelp = help{
	usage: "warren certs [--host NAME]... [--client-name NAME] [--client-uri URI] [--days N] [--force] DIR",
	text: `
Write development certificates for TLS with client certificates into DIR
(created with mode 0700 if missing): a new CA (ca.pem), a server
certificate valid for the --host names and addresses (server.pem,
server-key.pem) and a client certificate (client.pem, client-key.pem), all
signed by the CA. Keys are ECDSA P-256, written with mode 0600; the CA's
own key is not kept, so nothing more can be signed with it. Existing files
are left alone unless --force.

The client certificate's common name is --client-name; it also carries
--client-name as a DNS name and --client-uri, if given, as a URI subject
alternative name, for 'warren serve --allow-cn', '--allow-san'.

These are for development and tests: for production, use certificates from
your own CA.`,
	examples: `  warren certs ./certs
  warren serve --addr tls://127.0.0.1:7443 --cert certs/server.pem --key certs/server-key.pem --client-ca certs/ca.pem &
  warren call --ca certs/ca.pem --cert certs/client.pem --key certs/client-key.pem tls://127.0.0.1:7443 Counter.Inc '{"name":"a"}'
  warren certs --host warren.example.org --host 10.0.0.5 --client-name web --client-uri spiffe://example.org/web ./certs`,
}

func cmdCerts(e *env, args []string) error {
	fset := newFlagSet("certs")
	var hosts stringList
	fset.Var(&hosts, "host", "a DNS name or IP address the server certificate is valid for (repeatable; default localhost and 127.0.0.1)")
	clientName := fset.String("client-name", "client", "the client certificate's common name and DNS name")
	clientURI := fset.String("client-uri", "", "a URI subject alternative name for the client certificate, such as spiffe://example.org/web")
	days := fset.Int("days", 365, "validity of the certificates, in days")
	force := fset.Bool("force", false, "overwrite existing files")
	pos, err := parseArgs(e, fset, certsHelp, args, 1, 1)
	if err != nil {
		return err
	}
	if len(hosts) == 0 {
		hosts = stringList{"localhost", "127.0.0.1"}
	}
	if *days < 1 || *days > 3650 {
		return &usageError{cmd: "certs", msg: "--days must be between 1 and 3650"}
	}
	var uri *url.URL
	if *clientURI != "" {
		if uri, err = url.Parse(*clientURI); err != nil || uri.Scheme == "" {
			return &usageError{cmd: "certs", msg: fmt.Sprintf("--client-uri %q is not an absolute URI such as spiffe://example.org/web", *clientURI)}
		}
	}
	dir := pos[0]
	files := []string{"ca.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem"}
	if !*force {
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				return fmt.Errorf("%s already exists: remove it, choose another directory, or pass --force", filepath.Join(dir, f))
			}
		}
	}
	set, err := newCertSet(hosts, *clientName, uri, time.Duration(*days)*24*time.Hour)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	out := map[string]struct {
		b    []byte
		mode fs.FileMode
	}{
		"ca.pem":         {set.ca, 0o644},
		"server.pem":     {set.serverCert, 0o644},
		"server-key.pem": {set.serverKey, 0o600},
		"client.pem":     {set.clientCert, 0o644},
		"client-key.pem": {set.clientKey, 0o600},
	}
	for _, f := range files {
		if err := writeFileMode(filepath.Join(dir, f), out[f].b, out[f].mode); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "wrote %s: ca.pem, server.pem and server-key.pem (for %s), client.pem and client-key.pem (cn %s), valid %d days\n",
		dir, strings.Join(hosts, ", "), *clientName, *days)
	return nil
}

// writeFileMode writes b to path, created with mode (whatever the umask)
// or truncated.
func writeFileMode(path string, b []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// certSet is a CA and a server and a client certificate it signed, in PEM.
type certSet struct {
	ca                    []byte
	serverCert, serverKey []byte
	clientCert, clientKey []byte
}

func newCertSet(hosts []string, clientName string, clientURI *url.URL, validity time.Duration) (*certSet, error) {
	notBefore := time.Now().Add(-time.Hour) // some clock skew
	notAfter := notBefore.Add(validity)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "warren development CA", Organization: []string{"warren certs"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, caCert, err := sign(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	set := &certSet{ca: pemBlock("CERTIFICATE", caDER)}

	leaf := func(cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP, uris []*url.URL) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			NotBefore:   notBefore,
			NotAfter:    notAfter,
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames:    dns,
			IPAddresses: ips,
			URIs:        uris,
		}
		der, _, err := sign(tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kb), nil
	}
	var dns []string
	var ips []net.IP
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	if set.serverCert, set.serverKey, err = leaf(hosts[0], x509.ExtKeyUsageServerAuth, dns, ips, nil); err != nil {
		return nil, err
	}
	var uris []*url.URL
	if clientURI != nil {
		uris = []*url.URL{clientURI}
	}
	var clientDNS []string
	if clientName != "" {
		clientDNS = []string{clientName}
	}
	if set.clientCert, set.clientKey, err = leaf(clientName, x509.ExtKeyUsageClientAuth, clientDNS, nil, uris); err != nil {
		return nil, err
	}
	return set, nil
}

// sign creates a certificate with a random serial number and returns it in
// DER and parsed.
func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating a certificate: %w", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, errors.Join(errors.New("parsing the new certificate"), err)
	}
	return der, c, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
