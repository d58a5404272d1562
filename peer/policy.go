package peer

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// A Policy decides whether a peer may use a connection. Authorize returns
// nil to allow the peer and an error, normally a [*DeniedError], to refuse
// it. Policies must be safe for concurrent use.
type Policy interface {
	Authorize(p *Peer) error
}

// PolicyFunc adapts a function to a Policy.
type PolicyFunc func(p *Peer) error

// Authorize calls f(p).
func (f PolicyFunc) Authorize(p *Peer) error { return f(p) }

// Authorize runs pol on p and returns nil or an error that matches
// [ErrDenied]: an error that does not is wrapped in a [*DeniedError] whose
// Err field holds it. A nil pol allows every peer.
func Authorize(pol Policy, p *Peer) error {
	if pol == nil {
		return nil
	}
	err := pol.Authorize(p)
	if err == nil || errors.Is(err, ErrDenied) {
		return err
	}
	return &DeniedError{Peer: p, Reason: err.Error(), Err: err}
}

// AllowAll returns a Policy that allows every peer.
func AllowAll() Policy { return allowAll{} }

type allowAll struct{}

func (allowAll) Authorize(*Peer) error { return nil }

// SameUser returns a Policy that allows peers whose kernel-reported uid is
// this process's effective uid, read when SameUser is called. Peers without
// kernel credentials are denied.
func SameUser() Policy { return sameUser{uid: os.Geteuid()} }

type sameUser struct{ uid int }

func (s sameUser) Authorize(p *Peer) error {
	if err := needCred(p); err != nil {
		return err
	}
	if p.UID != s.uid {
		return deny(p, "uid %d is not this process's uid %d", p.UID, s.uid)
	}
	return nil
}

// AllowUIDs returns a Policy that allows peers whose kernel-reported uid is
// one of uids. Peers without kernel credentials are denied.
func AllowUIDs(uids ...int) Policy { return idSet{what: "uid", ids: slices.Clone(uids)} }

// AllowGIDs returns a Policy that allows peers whose kernel-reported primary
// gid is one of gids. Supplementary groups are not considered: the kernel
// does not report them for a socket peer on every platform. Peers without
// kernel credentials are denied.
func AllowGIDs(gids ...int) Policy { return idSet{what: "gid", ids: slices.Clone(gids)} }

type idSet struct {
	what string // "uid" or "gid"
	ids  []int
}

func (s idSet) Authorize(p *Peer) error {
	if err := needCred(p); err != nil {
		return err
	}
	id := p.UID
	if s.what == "gid" {
		id = p.GID
	}
	if !slices.Contains(s.ids, id) {
		return deny(p, "%s %d is not in the allowed %ss %v", s.what, id, s.what, s.ids)
	}
	return nil
}

func needCred(p *Peer) error {
	if p == nil || !p.HasCred {
		return deny(p, "no kernel credentials")
	}
	return nil
}

// AnyOf returns a Policy that allows a peer if at least one of ps allows it.
// With no policies it denies every peer. It panics if a policy is nil.
func AnyOf(ps ...Policy) Policy { return anyOf(checkPolicies("AnyOf", ps)) }

type anyOf []Policy

func (a anyOf) Authorize(p *Peer) error {
	if len(a) == 0 {
		return deny(p, "AnyOf has no policies")
	}
	var reasons []string
	for _, pol := range a {
		err := pol.Authorize(p)
		if err == nil {
			return nil
		}
		if len(a) == 1 {
			return err
		}
		var d *DeniedError
		if errors.As(err, &d) && d.Reason != "" {
			reasons = append(reasons, d.Reason)
		} else {
			reasons = append(reasons, err.Error())
		}
	}
	return deny(p, "no policy allowed the peer: %s", strings.Join(reasons, "; "))
}

// AllOf returns a Policy that allows a peer only if every one of ps allows
// it, and otherwise returns the first refusal. With no policies it allows
// every peer. It panics if a policy is nil.
func AllOf(ps ...Policy) Policy { return allOf(checkPolicies("AllOf", ps)) }

type allOf []Policy

func (a allOf) Authorize(p *Peer) error {
	for _, pol := range a {
		if err := pol.Authorize(p); err != nil {
			return err
		}
	}
	return nil
}

func checkPolicies(fn string, ps []Policy) []Policy {
	for i, p := range ps {
		if p == nil {
			panic(fmt.Sprintf("peer: %s: policy %d is nil", fn, i))
		}
	}
	return slices.Clone(ps)
}
