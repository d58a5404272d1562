package peer_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/warrenipc/warren/peer"
)

func TestPolicies(t *testing.T) {
	me := os.Geteuid()
	user := func(uid, gid int) *peer.Peer {
		return &peer.Peer{Network: "unix", HasCred: true, UID: uid, GID: gid, PID: 42}
	}
	noCred := &peer.Peer{Network: "tcp"}
	errCustom := errors.New("custom refusal")
	custom := peer.PolicyFunc(func(p *peer.Peer) error {
		if p.PID == 42 {
			return errCustom
		}
		return nil
	})

	tests := []struct {
		name   string
		pol    peer.Policy
		p      *peer.Peer
		allow  bool
		reason string // substring of the refusal, if any
	}{
		{"AllowAll unix", peer.AllowAll(), user(1, 1), true, ""},
		{"AllowAll no cred", peer.AllowAll(), noCred, true, ""},
		{"AllowAll nil peer", peer.AllowAll(), nil, true, ""},

		{"SameUser me", peer.SameUser(), user(me, 12345), true, ""},
		{"SameUser other", peer.SameUser(), user(me+1, 0), false, fmt.Sprintf("uid %d is not this process's uid %d", me+1, me)},
		{"SameUser no cred", peer.SameUser(), noCred, false, "no kernel credentials"},
		{"SameUser nil peer", peer.SameUser(), nil, false, "no kernel credentials"},

		{"AllowUIDs in", peer.AllowUIDs(7, 8), user(8, 0), true, ""},
		{"AllowUIDs out", peer.AllowUIDs(7, 8), user(9, 7), false, "uid 9 is not in the allowed uids [7 8]"},
		{"AllowUIDs none", peer.AllowUIDs(), user(0, 0), false, "uid 0"},
		{"AllowUIDs no cred", peer.AllowUIDs(0), noCred, false, "no kernel credentials"},

		{"AllowGIDs in", peer.AllowGIDs(100), user(1, 100), true, ""},
		{"AllowGIDs out", peer.AllowGIDs(100), user(100, 1), false, "gid 1 is not in the allowed gids [100]"},
		{"AllowGIDs no cred", peer.AllowGIDs(0), noCred, false, "no kernel credentials"},

		{"AnyOf empty", peer.AnyOf(), user(me, 0), false, "no policies"},
		{"AnyOf first", peer.AnyOf(peer.AllowUIDs(1), peer.AllowUIDs(2)), user(1, 0), true, ""},
		{"AnyOf second", peer.AnyOf(peer.AllowUIDs(1), peer.AllowUIDs(2)), user(2, 0), true, ""},
		{"AnyOf none", peer.AnyOf(peer.AllowUIDs(1), peer.AllowGIDs(2)), user(3, 3), false,
			"no policy allowed the peer: uid 3 is not in the allowed uids [1]; gid 3 is not in the allowed gids [2]"},
		{"AnyOf custom error", peer.AnyOf(peer.AllowUIDs(1), custom), user(3, 3), false, "custom refusal"},
		{"AnyOf single", peer.AnyOf(peer.AllowUIDs(1)), user(3, 3), false, "uid 3 is not in the allowed uids [1]"},

		{"AllOf empty", peer.AllOf(), user(3, 3), true, ""},
		{"AllOf all", peer.AllOf(peer.AllowUIDs(3), peer.AllowGIDs(4)), user(3, 4), true, ""},
		{"AllOf first fails", peer.AllOf(peer.AllowUIDs(1), peer.AllowGIDs(2)), user(3, 3), false, "uid 3 is not in the allowed uids [1]"},
		{"AllOf second fails", peer.AllOf(peer.AllowUIDs(3), peer.AllowGIDs(2)), user(3, 3), false, "gid 3"},
		{"AllOf custom", peer.AllOf(peer.AllowUIDs(3), custom), user(3, 3), false, "custom refusal"},

		{"nested", peer.AnyOf(peer.SameUser(), peer.AllOf(peer.AllowUIDs(65534), peer.AllowGIDs(65534))), user(65534, 65534), true, ""},
		{"nested denied", peer.AnyOf(peer.SameUser(), peer.AllOf(peer.AllowUIDs(65534), peer.AllowGIDs(65534))), user(65534, 0), false, "gid 0"},

		{"PolicyFunc allows", custom, &peer.Peer{Network: "unix", HasCred: true, UID: 1, GID: 1}, true, ""},
		{"PolicyFunc refuses", custom, user(1, 1), false, "custom refusal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := peer.Authorize(tt.pol, tt.p)
			if tt.allow {
				if err != nil {
					t.Fatalf("Authorize: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Authorize allowed the peer")
			}
			if !errors.Is(err, peer.ErrDenied) {
				t.Errorf("error %v does not match ErrDenied", err)
			}
			var d *peer.DeniedError
			if !errors.As(err, &d) {
				t.Fatalf("error %T is not a *DeniedError", err)
			}
			if d.Peer != tt.p {
				t.Errorf("DeniedError.Peer = %v, want %v", d.Peer, tt.p)
			}
			if !strings.Contains(err.Error(), tt.reason) {
				t.Errorf("error %q does not contain %q", err, tt.reason)
			}
		})
	}
}

func TestAuthorizeWrapsPlainErrors(t *testing.T) {
	plain := errors.New("not on a weekday")
	p := &peer.Peer{Network: "unix", HasCred: true, UID: 65534, GID: 65534, PID: 99}
	err := peer.Authorize(peer.PolicyFunc(func(*peer.Peer) error { return plain }), p)
	if !errors.Is(err, peer.ErrDenied) || !errors.Is(err, plain) {
		t.Fatalf("Authorize = %v; want an error matching ErrDenied and the policy's error", err)
	}
	want := "warren: peer not authorized (unix uid=65534 gid=65534 pid=99): not on a weekday"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	if err := peer.Authorize(nil, p); err != nil {
		t.Errorf("Authorize(nil policy) = %v, want nil", err)
	}
}

func TestDeniedErrorMessage(t *testing.T) {
	err := peer.AllowUIDs(0).Authorize(&peer.Peer{Network: "unix", HasCred: true, UID: 65534, GID: 65534, PID: 4242})
	for _, want := range []string{"warren: peer not authorized", "uid=65534", "pid=4242"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not contain %q", err, want)
		}
	}
	if errors.Is(err, peer.ErrNoCred) {
		t.Error("DeniedError matches ErrNoCred")
	}
	if got := (&peer.DeniedError{}).Error(); got != "warren: peer not authorized (unknown peer)" {
		t.Errorf("empty DeniedError: %q", got)
	}
}

func TestNilPolicyPanics(t *testing.T) {
	for name, f := range map[string]func(...peer.Policy) peer.Policy{"AnyOf": peer.AnyOf, "AllOf": peer.AllOf} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil {
					t.Error("no panic for a nil policy")
				}
			}()
			f(peer.AllowAll(), nil)
		})
	}
}

func TestAllowUIDsCopiesItsArgument(t *testing.T) {
	uids := []int{1}
	pol := peer.AllowUIDs(uids...)
	uids[0] = 2
	if err := pol.Authorize(&peer.Peer{HasCred: true, UID: 1}); err != nil {
		t.Fatal(err)
	}
}
