package balance

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// ErrClosed is returned on a closed pool.
var ErrClosed = errors.New("warren: client closed")

// GoAwayError is wire.GoAwayError.
type GoAwayError = wire.GoAwayError

// Balancer names.
const (
	RoundRobin       = "round_robin"
	LeastOutstanding = "least_outstanding"
)

// Config configures a Pool.
type Config struct {
	Dial   *transport.DialConfig
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	Mux    *mux.Config
	// WaitForReady makes Session wait out a backoff instead of failing.
	WaitForReady           bool
	MinBackoff, MaxBackoff time.Duration
	// LeastOutstanding picks the server with the fewest calls in flight;
	// otherwise servers take turns.
	LeastOutstanding bool
	// Scheme is that of resolved addresses: tcp, or tls when Dial has a
	// TLS configuration.
	Scheme string
	// Refresh is how often a DNS name is resolved again; 0 means 30 s.
	Refresh time.Duration
}

// Pool is the servers of one target and their connections.
type Pool struct {
	cfg       Config
	t         Target
	rr        atomic.Uint32
	eps       atomic.Pointer[[]*Endpoint]
	connected atomic.Bool // some endpoint connected once

	mu         sync.Mutex // protects following
	closed     bool
	resolving  chan struct{} // closed when the resolution in progress ends
	resolvedAt time.Time
	stale      bool // a connection was lost: resolve again
	resolveErr error
	gone       []*Endpoint     // dropped by a resolution, closed by Close
	pure       map[string]bool // the methods free of side effects, as last fetched

	ctx    context.Context // ends at Close, for background resolutions
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a pool for t. It does not connect.
func New(t Target, cfg Config) *Pool {
	if cfg.Scheme == "" {
		cfg.Scheme = transport.SchemeTCP
		if cfg.Dial != nil && cfg.Dial.TLS != nil {
			cfg.Scheme = transport.SchemeTLS
		}
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = 30 * time.Second
	}
	p := &Pool{cfg: cfg, t: t}
	p.rr.Store(rand.Uint32()) // clients of one list start on different servers
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if t.Host == "" {
		eps := make([]*Endpoint, len(t.Addrs))
		for i, a := range t.Addrs {
			eps[i] = newEndpoint(p, a, "")
		}
		p.eps.Store(&eps)
	}
	return p
}

// Connected reports whether some server was reached once.
func (p *Pool) Connected() bool { return p.connected.Load() }

// Endpoints returns the current servers.
func (p *Pool) Endpoints() []*Endpoint {
	if eps := p.eps.Load(); eps != nil {
		return *eps
	}
	return nil
}

// Pick chooses the server of a new call: one connected or free to connect
// before one draining or waiting out a backoff; among equals, the next in
// turn or the one with the fewest calls in flight. avoid, the server of
// the previous attempt, comes last.
func (p *Pool) Pick(ctx context.Context, avoid *Endpoint) (*Endpoint, error) {
	eps, err := p.endpoints(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var best *Endpoint
	bestRank, bestCalls := 0, int64(0)
	n := len(eps)
	start := int(p.rr.Add(1)-1) % n
	for i := range n {
		e := eps[(start+i)%n]
		r := e.rank(now)
		if e == avoid {
			r += 2
		}
		c := e.calls.Load()
		if best == nil || r < bestRank || (r == bestRank && p.cfg.LeastOutstanding && c < bestCalls) {
			best, bestRank, bestCalls = e, r, c
		}
	}
	return best, nil
}

// endpoints returns the servers, resolving the name first if it never was,
// and in the background when it is due again.
func (p *Pool) endpoints(ctx context.Context) ([]*Endpoint, error) {
	if p.t.Host == "" {
		return *p.eps.Load(), nil
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		eps := p.eps.Load()
		// Resolved again when due, or after a failure, at most once a second.
		since := time.Since(p.resolvedAt)
		due := since >= p.cfg.Refresh || (p.stale && since >= time.Second)
		if eps != nil {
			if due && p.resolving == nil {
				p.startResolve()
			}
			p.mu.Unlock()
			return *eps, nil
		}
		if p.resolving == nil {
			if !due && p.resolveErr != nil {
				err := p.resolveErr
				p.mu.Unlock()
				return nil, err
			}
			p.startResolve()
		}
		ch := p.resolving
		p.mu.Unlock()
		select {
		case <-ch:
			p.mu.Lock()
			ok, err := p.eps.Load() != nil, p.resolveErr
			p.mu.Unlock()
			if !ok {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// startResolve resolves the name on a goroutine of the pool. p.mu is held.
func (p *Pool) startResolve() {
	ch := make(chan struct{})
	p.resolving = ch
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		addrs, err := p.t.resolve(ctx, p.cfg.Scheme)
		cancel()
		p.mu.Lock()
		p.resolving = nil
		close(ch)
		p.resolvedAt = time.Now()
		p.resolveErr = err
		p.stale = err != nil
		if err != nil || p.closed {
			p.mu.Unlock()
			return
		}
		old := map[string]*Endpoint{}
		if eps := p.eps.Load(); eps != nil {
			for _, e := range *eps {
				old[e.Addr] = e
			}
		}
		eps := make([]*Endpoint, 0, len(addrs))
		for _, a := range addrs {
			if e := old[a]; e != nil {
				eps = append(eps, e)
				delete(old, a)
			} else {
				eps = append(eps, newEndpoint(p, a, p.t.Host))
			}
		}
		p.eps.Store(&eps)
		for _, e := range old {
			p.gone = append(p.gone, e)
		}
		p.mu.Unlock()
		// Servers no longer resolved take no new calls and close once idle.
		for _, e := range old {
			e.mu.Lock()
			e.removed = true
			e.mu.Unlock()
			if e.calls.Load() == 0 {
				e.close()
			}
		}
	}()
}

// lost notes a failed or lost connection: a name is resolved again.
func (p *Pool) lost() {
	if p.t.Host == "" {
		return
	}
	p.mu.Lock()
	p.stale = true
	p.mu.Unlock()
}

// Close closes every connection and waits for the pool's goroutines.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	gone := p.gone
	p.gone = nil
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, e := range append(p.Endpoints(), gone...) {
		e.close()
	}
}
