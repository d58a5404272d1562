package peer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/warrenipc/warren/peer"
)

// A policy that lets in uid 1000 and the "nobody" account (65534), and how it
// answers for a few peers.
func ExampleAnyOf() {
	pol := peer.AnyOf(peer.AllowUIDs(1000), peer.AllowUIDs(65534))

	for _, p := range []*peer.Peer{
		{Network: "unix", HasCred: true, UID: 65534, GID: 65534, PID: 4242},
		{Network: "unix", HasCred: true, UID: 33, GID: 33, PID: 77},
		{Network: "tcp"},
	} {
		err := pol.Authorize(p)
		fmt.Printf("%s: allowed=%t denied=%t\n", p, err == nil, errors.Is(err, peer.ErrDenied))
	}
	// Output:
	// unix uid=65534 gid=65534 pid=4242: allowed=true denied=false
	// unix uid=33 gid=33 pid=77: allowed=false denied=true
	// tcp: allowed=false denied=true
}

// A custom policy: only processes in the "admin" group (gid 4) may connect,
// and never pid 1.
func ExamplePolicyFunc() {
	pol := peer.AllOf(
		peer.AllowGIDs(4),
		peer.PolicyFunc(func(p *peer.Peer) error {
			if p.PID == 1 {
				return errors.New("init may not connect")
			}
			return nil
		}),
	)
	err := peer.Authorize(pol, &peer.Peer{Network: "unix", HasCred: true, UID: 0, GID: 4, PID: 1})
	fmt.Println(err)
	// Output:
	// warren: peer not authorized (unix uid=0 gid=4 pid=1): init may not connect
}

// A handler reads the identity of the caller from its context.
func ExampleFromContext() {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Network: "unix", HasCred: true, UID: 1000, GID: 1000, PID: 4242})

	if p, ok := peer.FromContext(ctx); ok {
		fmt.Println("called by", p)
	}
	// Output:
	// called by unix uid=1000 gid=1000 pid=4242
}

// A TLS server that lets in clients whose verified certificates carry one of
// two SPIFFE IDs, or the DNS name ops.example.org; the rest are refused.
func ExampleAllowURIs() {
	pol := peer.AnyOf(
		peer.AllowURIs("spiffe://example.org/billing", "spiffe://example.org/web"),
		peer.AllowDNSNames("ops.example.org"),
	)
	// p would be the *peer.Peer of a connection, after its TLS handshake.
	p := &peer.Peer{Network: "tls"} // no certificate
	fmt.Println(peer.Authorize(pol, p) == nil)
	// Output:
	// false
}
