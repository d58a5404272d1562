package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// tlsClientText is the part of the client commands' help about TLS.
const tlsClientText = `
ADDR may list several addresses, separated by commas, or be
dns:///HOST:PORT (tcp, or tls with the flags below): calls take the
servers in turn.
For tls:// and wss:// addresses, --ca names the CA certificates that verify
the server (default: the system's), --server-name the name its certificate
must be valid for (default: the address's host), and --cert and --key the
client certificate for a server that requires one (warren serve
--client-ca). TLS 1.3 at least, unless --tls-min 1.2.`

// tlsFlags are the certificate flags of serve and of the client commands.
type tlsFlags struct {
	cmd        string
	cert, key  string
	ca         string // the CA that verifies the other side
	minVersion string
	// serve only
	clientCA string
	allowSAN stringList
	allowCN  stringList
	// clients only
	serverName string
}

// stringList is a repeatable flag of strings, also comma-separated.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

func (f *tlsFlags) add(fs *flag.FlagSet, server bool) {
	f.cmd = fs.Name()
	fs.StringVar(&f.cert, "cert", "", "PEM certificate (chain) to present, for tls:// and wss:// addresses (with --key)")
	fs.StringVar(&f.key, "key", "", "PEM private key of --cert")
	if server {
		fs.StringVar(&f.clientCA, "client-ca", "", "require client certificates signed by the CA certificates in this PEM file (mutual TLS)")
		fs.Var(&f.allowSAN, "allow-san", "with --client-ca, allow only clients whose certificate has this DNS or URI subject alternative name, such as web.example.org or spiffe://example.org/web (repeatable)")
		fs.Var(&f.allowCN, "allow-cn", "with --client-ca, allow only clients whose certificate has this subject common name (repeatable; with --allow-san, either may match)")
	} else {
		fs.StringVar(&f.ca, "ca", "", "verify the server's certificate with the CA certificates in this PEM file instead of the system's")
		fs.StringVar(&f.serverName, "server-name", "", "the name the server's certificate must be valid for (default: the address's host)")
	}
	fs.StringVar(&f.minVersion, "tls-min", "1.3", "lowest TLS version to accept: 1.2 or 1.3")
}

// set reports whether any certificate flag was given.
func (f *tlsFlags) set() bool {
	return f.cert != "" || f.key != "" || f.ca != "" || f.clientCA != "" ||
		len(f.allowSAN) > 0 || len(f.allowCN) > 0 || f.serverName != "" || f.minVersion != "1.3"
}

func (f *tlsFlags) usage(msg string) error { return &usageError{cmd: f.cmd, msg: msg} }

func (f *tlsFlags) version() (uint16, error) {
	switch f.minVersion {
	case "1.3":
		return tls.VersionTLS13, nil
	case "1.2":
		return tls.VersionTLS12, nil
	}
	return 0, f.usage(fmt.Sprintf("invalid --tls-min %q: give 1.2 or 1.3", f.minVersion))
}

func isTLS(a transport.Addr) bool {
	return a.Scheme == transport.SchemeTLS || a.Scheme == transport.SchemeWSS
}

// keyPair loads --cert and --key.
func (f *tlsFlags) keyPair() ([]tls.Certificate, error) {
	if f.cert == "" && f.key == "" {
		return nil, nil
	}
	if f.cert == "" || f.key == "" {
		return nil, f.usage("--cert and --key go together: give both")
	}
	c, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("loading --cert %s and --key %s: %w", f.cert, f.key, err)
	}
	return []tls.Certificate{c}, nil
}

// loadPool reads the CA certificates of a PEM file.
func loadPool(flagName, path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --%s: %w", flagName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--%s %s holds no PEM certificate", flagName, path)
	}
	return pool, nil
}

// serverTLS returns the listener's TLS configuration and the policy on
// client certificates for address a (nil, nil for addresses without TLS),
// and a line that says who may call.
func (f *tlsFlags) serverTLS(a transport.Addr) (*tls.Config, peer.Policy, string, error) {
	if !isTLS(a) {
		if f.set() {
			return nil, nil, "", f.usage(fmt.Sprintf("--cert, --key, --client-ca, --allow-san, --allow-cn and --tls-min are for tls:// and wss:// addresses, not %s://", a.Scheme))
		}
		return nil, nil, "", nil
	}
	min, err := f.version()
	if err != nil {
		return nil, nil, "", err
	}
	if f.cert == "" || f.key == "" {
		return nil, nil, "", f.usage(fmt.Sprintf("a %s:// address needs --cert and --key (for development certificates: warren certs DIR)", a.Scheme))
	}
	certs, err := f.keyPair()
	if err != nil {
		return nil, nil, "", err
	}
	conf := &tls.Config{Certificates: certs, MinVersion: min}
	if f.clientCA == "" {
		if len(f.allowSAN) > 0 || len(f.allowCN) > 0 {
			return nil, nil, "", f.usage("--allow-san and --allow-cn need --client-ca: without client certificates there is no name to check")
		}
		return conf, nil, "WARNING: no client certificates (--client-ca): anyone who can reach the port can call", nil
	}
	if conf.ClientCAs, err = loadPool("client-ca", f.clientCA); err != nil {
		return nil, nil, "", err
	}
	conf.ClientAuth = tls.RequireAndVerifyClientCert
	var pols []peer.Policy
	var words []string
	var dns, uris []string
	for _, s := range f.allowSAN {
		if strings.Contains(s, ":") {
			uris = append(uris, s)
		} else {
			dns = append(dns, s)
		}
	}
	if len(dns) > 0 {
		pols = append(pols, peer.AllowDNSNames(dns...))
		words = append(words, "DNS name "+strings.Join(dns, ", "))
	}
	if len(uris) > 0 {
		pols = append(pols, peer.AllowURIs(uris...))
		words = append(words, "URI "+strings.Join(uris, ", "))
	}
	if len(f.allowCN) > 0 {
		pols = append(pols, peer.AllowCommonNames(f.allowCN...))
		words = append(words, "common name "+strings.Join(f.allowCN, ", "))
	}
	text := "callers allowed: certificates signed by " + f.clientCA
	if len(pols) == 0 {
		return conf, nil, text, nil
	}
	return conf, peer.AnyOf(pols...), text + " with " + strings.Join(words, ", or "), nil
}

// clientTLS adds the client's TLS configuration for addr to cfg.
func (f *tlsFlags) clientTLS(addr string, cfg *transport.DialConfig) (*transport.DialConfig, error) {
	a, err := targetAddr(addr, f.set())
	if err != nil {
		return nil, err
	}
	if !isTLS(a) {
		if f.set() {
			return nil, f.usage(fmt.Sprintf("--cert, --key, --ca, --server-name and --tls-min are for tls:// and wss:// addresses, not %s://", a.Scheme))
		}
		return cfg, nil
	}
	min, err := f.version()
	if err != nil {
		return nil, err
	}
	certs, err := f.keyPair()
	if err != nil {
		return nil, err
	}
	conf := &tls.Config{Certificates: certs, MinVersion: min, ServerName: f.serverName}
	if f.ca != "" {
		if conf.RootCAs, err = loadPool("ca", f.ca); err != nil {
			return nil, err
		}
	}
	if cfg == nil {
		cfg = &transport.DialConfig{}
	}
	cfg.TLS = conf
	return cfg, nil
}

// clientHint returns the certificate flags of a client of this server,
// for serve's "try" line.
func (f *tlsFlags) clientHint() string {
	switch {
	case f.cert == "":
		return ""
	case f.clientCA != "":
		return "--ca CA.pem --cert CLIENT.pem --key CLIENT-KEY.pem "
	}
	return "--ca CA.pem "
}

// explainTLSCall explains the failure of a call to a tls:// or wss://
// address that concerns TLS or the server's certificate policy, or returns
// nil.
func explainTLSCall(addr string, err error) *callError {
	a, perr := transport.ParseAddr(addr)
	if perr != nil || !isTLS(a) {
		return nil
	}
	se := status.FromError(err)
	var ga *rpc.GoAwayError
	switch {
	// Refused by the server's policy: its GOAWAY says why (the server
	// reads nothing from a refused peer, so no call is answered first).
	case se.Code == status.PermissionDenied && errors.As(err, &ga):
		return &callError{status.PermissionDenied, fmt.Sprintf(
			"the server at %s does not allow your client certificate: ask whoever runs it to allow its name (warren serve --allow-san, --allow-cn); the server said: %s", addr, trimWarren(ga0(ga, se.Message)))}
	case se.Code == status.Unavailable || errors.Is(err, peer.ErrDenied):
		if msg := explainTLS(addr, err); msg != "" {
			return &callError{status.Unavailable, msg}
		}
	}
	return nil
}

// explainTLS says what to do about a failed TLS handshake, or returns ""
// if err is not one. where is the address as the user wrote it.
func explainTLS(where string, err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
	)
	s := err.Error()
	detail := strings.ReplaceAll(status.FromError(err).Message, "warren: ", "")
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("the server at %s presented a certificate not signed by a CA you trust: pass its CA with --ca (%s)", where, detail)
	case errors.As(err, &hostname):
		return fmt.Sprintf("the server at %s presented a certificate for other names (%s): connect by one of its names, or pin the expected one with --server-name", where, detail)
	case errors.As(err, &invalid):
		return fmt.Sprintf("the server at %s presented an invalid certificate (%s)", where, detail)
	case errors.As(err, &verify):
		return fmt.Sprintf("cannot verify the certificate of the server at %s (%s)", where, detail)
	case strings.Contains(s, "tls: certificate required"):
		return fmt.Sprintf("the server at %s requires a client certificate: pass --cert and --key (%s)", where, detail)
	case strings.Contains(s, "tls: unknown certificate authority"), strings.Contains(s, "tls: bad certificate"):
		return fmt.Sprintf("the server at %s refused your client certificate: it is not signed by the CA the server trusts (its --client-ca) (%s)", where, detail)
	case strings.Contains(s, "tls: protocol version not supported"), strings.Contains(s, "tls: no supported versions"):
		return fmt.Sprintf("the server at %s and this client have no TLS version in common: see --tls-min (%s)", where, detail)
	case strings.Contains(s, "first record does not look like a TLS handshake"):
		return fmt.Sprintf("the server at %s does not speak TLS: use a tcp:// or ws:// address for it", where)
	case errors.As(err, &alert), strings.Contains(s, "tls: "):
		return fmt.Sprintf("TLS with the server at %s failed: %s", where, detail)
	}
	return ""
}
