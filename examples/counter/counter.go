// Package counter is warren's demonstration service: a store of named
// integer counters that can be set, read, incremented, listed and watched.
// It is what `warren serve` serves and what `warren demo` drives, over
// warren RPC and over HTTP on the same socket.
//
// The service is defined in counter.proto as warren.counter.v1.Counter;
// its methods answer to that full name (as Connect and gRPC clients call
// them) and to the short names below. JSON follows the protobuf JSON
// mapping: int64 values are strings ("value":"7"; numbers are accepted
// too), fields at their zero value are left out, and an unknown field is
// discarded (an InvalidArgument error naming it on a server with
// rpc.ServerOptions.RejectUnknownFields).
//
//	Counter.Set   {"name","value"} -> {"name","value"}
//	Counter.Get   {"name"}         -> {"name","value"}   NotFound if unknown
//	Counter.Inc   {"name","by"}    -> {"name","value"}   by defaults to 1; an unknown name starts at 0
//	Counter.List  {}               -> {"counters":[{"name","value"},...]} sorted by name
//	Counter.Watch {"name"}         => {"name","value"}   a server stream: the current value, then every change
//
// A missing name, or one over MaxName (256) bytes, is InvalidArgument; an
// increment past the range of int64 is OutOfRange. Every method is safe for any number of concurrent callers.
//
// A watch never ends by itself: before rpc.Server.Shutdown, whose wait for
// the calls in progress would otherwise last until its deadline, call
// Store.Shutdown, which ends every watch with Unavailable.
package counter

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
)

// The messages (SetRequest, GetRequest, IncRequest, ListRequest,
// WatchRequest, Entry, ListReply) are generated from counter.proto into
// counter.pb.go, and CounterClient, CounterServer and
// RegisterCounterServer into counter_warren.pb.go; see generate.go.

// maxWatchBacklog bounds the changes queued for one slow watcher; past it
// the watcher skips to the latest value (a watcher sees every change it can
// keep up with, and always the latest value).
const maxWatchBacklog = 64

// Store holds the counters. The zero value is not usable; call New.
type Store struct {
	mu       sync.Mutex
	values   map[string]int64
	watchers map[string]map[*watcher]struct{}
	done     chan struct{} // closed by Shutdown
	shutOnce sync.Once
}

type watcher struct {
	ch chan int64
}

// New returns an empty store.
func New() *Store {
	return &Store{
		values:   map[string]int64{},
		watchers: map[string]map[*watcher]struct{}{},
		done:     make(chan struct{}),
	}
}

// errShutdown ends the watches of a store that is shutting down.
var errShutdown = status.New(status.Unavailable, "server is shutting down")

// Shutdown ends every Watch in progress, and every later one at once, with
// Unavailable ("server is shutting down"). Set, Get, Inc and List keep
// working. Call it before rpc.Server.Shutdown so that watches do not hold
// up the graceful shutdown. It is idempotent.
func (s *Store) Shutdown() {
	s.shutOnce.Do(func() { close(s.done) })
}

// Register registers the Counter methods on srv, under their short names
// (Counter.Set) and their full names (warren.counter.v1.Counter.Set), with
// RegisterCounterServer (generated into counter_warren.pb.go).
func (s *Store) Register(srv *rpc.Server) { RegisterCounterServer(srv, service{s}) }

// service is the CounterServer of a Store: it checks requests and maps them
// onto the Store's methods.
type service struct{ s *Store }

func (v service) Set(ctx context.Context, req *SetRequest) (*Entry, error) {
	if err := checkName(req.Name); err != nil {
		return nil, err
	}
	return v.s.Set(req.Name, req.Value), nil
}

func (v service) Get(ctx context.Context, req *GetRequest) (*Entry, error) {
	if err := checkName(req.Name); err != nil {
		return nil, err
	}
	return v.s.Get(req.Name)
}

func (v service) Inc(ctx context.Context, req *IncRequest) (*Entry, error) {
	if err := checkName(req.Name); err != nil {
		return nil, err
	}
	by := int64(1)
	if req.By != nil {
		by = *req.By
	}
	return v.s.Inc(req.Name, by)
}

func (v service) List(ctx context.Context, req *ListRequest) (*ListReply, error) {
	return &ListReply{Counters: v.s.List()}, nil
}

func (v service) Watch(ctx context.Context, req *WatchRequest, st *rpc.Stream[WatchRequest, Entry]) error {
	if err := checkName(req.Name); err != nil {
		return err
	}
	return v.s.Watch(ctx, req.Name, st.Send)
}

// MaxName is the longest counter name, in bytes.
const MaxName = 256

var errNoName = status.New(status.InvalidArgument, `missing "name"`)

// checkName refuses a missing name and one over MaxName bytes.
func checkName(name string) error {
	switch {
	case name == "":
		return errNoName
	case len(name) > MaxName:
		return status.Errorf(status.InvalidArgument, "a counter name of %d bytes is over the limit of %d", len(name), MaxName)
	}
	return nil
}

func notFound(name string) error {
	return status.Errorf(status.NotFound, "no counter named %q (create it with Counter.Set)", name)
}

// Set sets name to value and returns the counter.
func (s *Store) Set(name string, value int64) *Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[name] = value
	s.notifyLocked(name, value)
	return &Entry{Name: name, Value: value}
}

// Get returns the counter, or a NotFound error.
func (s *Store) Get(name string) (*Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[name]
	if !ok {
		return nil, notFound(name)
	}
	return &Entry{Name: name, Value: v}, nil
}

// Inc adds by to the counter and returns it; a counter that does not exist
// is created at 0 first. It is an OutOfRange error, and the counter is left
// as it was, if the sum would overflow an int64.
func (s *Store) Inc(name string, by int64) (*Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.values[name]
	if by > 0 && v > math.MaxInt64-by || by < 0 && v < math.MinInt64-by {
		return nil, status.Errorf(status.OutOfRange, "counter %q is %d: adding %d would overflow an int64", name, v, by)
	}
	v += by
	s.values[name] = v
	s.notifyLocked(name, v)
	return &Entry{Name: name, Value: v}, nil
}

// List returns every counter sorted by name.
func (s *Store) List() []*Entry {
	s.mu.Lock()
	out := make([]*Entry, 0, len(s.values))
	for k, v := range s.values {
		out = append(out, &Entry{Name: k, Value: v})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Watch calls send with the counter's current value (if it exists) and then
// with each new value, until ctx ends (it then returns ctx's error), send
// fails (it returns that error) or the store shuts down (it returns an
// Unavailable error).
func (s *Store) Watch(ctx context.Context, name string, send func(*Entry) error) error {
	select {
	case <-s.done:
		return errShutdown
	default:
	}
	w := &watcher{ch: make(chan int64, maxWatchBacklog)}
	s.mu.Lock()
	cur, exists := s.values[name]
	set := s.watchers[name]
	if set == nil {
		set = map[*watcher]struct{}{}
		s.watchers[name] = set
	}
	set[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(set, w)
		if len(set) == 0 {
			delete(s.watchers, name) // set is s.watchers[name]: sets are removed only when empty
		}
		s.mu.Unlock()
	}()
	if exists {
		if err := send(&Entry{Name: name, Value: cur}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errShutdown
		case v := <-w.ch:
			if err := send(&Entry{Name: name, Value: v}); err != nil {
				return err
			}
		}
	}
}

// notifyLocked queues v for every watcher of name. A watcher whose queue
// is full loses its oldest queued value, never the latest.
func (s *Store) notifyLocked(name string, v int64) {
	for w := range s.watchers[name] {
		for {
			select {
			case w.ch <- v:
			default:
				select {
				case <-w.ch: // drop the oldest and retry
				default:
				}
				continue
			}
			break
		}
	}
}
