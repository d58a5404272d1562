package transport_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log"
	"os"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// A client that dials a server by address, pins its identity by name and
// by SPIFFE ID, and presents its own certificate (files as written by
// `warren certs`).
func ExampleDial_pinned() {
	ca, err := os.ReadFile("certs/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair("certs/client.pem", "certs/client-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	conn, err := transport.Dial(context.Background(), "tls://10.0.0.5:7443", &transport.DialConfig{
		TLS: &tls.Config{
			RootCAs:      roots,
			Certificates: []tls.Certificate{cert},
			ServerName:   "warren.example.org", // the certificate must be valid for this name
		},
		ServerPolicy: peer.AllowURIs("spiffe://example.org/warren"),
	})
	if err != nil {
		log.Fatal(err) // matches peer.ErrDenied if the server's certificate lacks the URI
	}
	defer conn.Close()
	log.Println("connected to", conn.Peer())
}

// A server that requires client certificates signed by its CA and lets in
// only two identities.
func ExampleListen_mutualTLS() {
	cert, err := tls.LoadX509KeyPair("certs/server.pem", "certs/server-key.pem")
	if err != nil {
		log.Fatal(err)
	}
	ca, err := os.ReadFile("certs/ca.pem")
	if err != nil {
		log.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(ca)
	l, err := transport.Listen("tls://0.0.0.0:7443", &transport.ListenConfig{
		TLS: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    clients,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS13,
		},
		Policy: peer.AnyOf(peer.AllowURIs("spiffe://example.org/web"), peer.AllowCommonNames("ops")),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}
