package balance

import (
	"context"
	"errors"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Verdict is what a failed attempt allows.
type Verdict int

const (
	// Final: the error goes to the caller.
	Final Verdict = iota
	// NotProcessed: the server did not and will not run the call (PROTOCOL.md,
	// Retry rule), which may be sent again anywhere.
	NotProcessed
	// MayHaveRun: the connection was lost after the call was sent; only a
	// method free of side effects is sent again.
	MayHaveRun
)

// MaxAttempts bounds the attempts of one call.
const MaxAttempts = 6

// maxWait bounds the wait before one retry.
const maxWait = time.Second

var errGone = errors.New("warren: server no longer resolved")

// Drained reports a stream or connection the server stopped taking because
// it is shutting down or closing an idle connection (GOAWAY code 14 or 0),
// not because it refused this client.
func Drained(err error) bool {
	var ga *wire.GoAwayError
	return errors.As(err, &ga) && (ga.Code == status.OK || ga.Code == status.Unavailable)
}

// ConnLost reports the loss of the connection.
func ConnLost(err error) bool {
	var ce *wire.ConnError
	return errors.As(err, &ce)
}

// Retry carries one call from attempt to attempt.
type Retry struct {
	Pool   *Pool
	Method string
	last   *Endpoint
	n      int  // failed attempts
	pure   bool // an attempt may have run: retry only a method free of side effects
}

// Session picks a server for the next attempt (another than the last, if
// there is one) and returns its connection. After an attempt that may have
// run, it asks that server, through fetch, whether r.Method is free of side
// effects, and gives up with v Final and an error for which NotPure is
// true if it is not or cannot tell.
func (r *Retry) Session(ctx context.Context, fetch func(context.Context, *mux.Session) (map[string]bool, error)) (*Endpoint, *mux.Session, Verdict, error) {
	e, err := r.Pool.Pick(ctx, r.last)
	if err != nil {
		return nil, nil, Final, err
	}
	r.last = e
	s, err := e.Session(ctx)
	if err != nil {
		v := r.sessionVerdict(err)
		if _, known := r.Pool.knownPure(r.Method); r.pure && !known {
			v = Final // no server to ask whether it may run again: no outage waited out for that
		}
		return nil, nil, v, err
	}
	if r.pure && fetch != nil {
		if ok, _ := e.isPure(ctx, s, r.Method, fetch); !ok {
			return nil, nil, Final, errNotPure
		}
	}
	return e, s, Final, nil
}

var errNotPure = errors.New("warren: the call may have run and its method is not marked free of side effects")

// NotPure reports the error of Session for a method that may have run and
// is not to be retried; the caller returns the attempt's own error.
func NotPure(err error) bool { return err == errNotPure }

// sessionVerdict classifies a failure to get a connection: the call was not
// sent. It is retried when another server may take it, or when this one was
// reached before (a restart); a client that never reached any server fails
// at once, as does one refused by a policy or a limit.
func (r *Retry) sessionVerdict(err error) Verdict {
	switch {
	case errors.Is(err, errGone), Drained(err):
		return NotProcessed
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Final
	}
	var ga *wire.GoAwayError
	if errors.As(err, &ga) {
		return Final
	}
	if r.Pool.Connected() || r.n+1 < len(r.Pool.Endpoints()) {
		return NotProcessed
	}
	return Final
}

// isPure reports whether the server of s marks method free of side
// effects, from a list fetched once per connection.
func (e *Endpoint) isPure(ctx context.Context, s *mux.Session, method string, fetch func(context.Context, *mux.Session) (map[string]bool, error)) (bool, error) {
	e.mu.Lock()
	known, pure := e.pureOf == s, e.pure
	e.mu.Unlock()
	if !known {
		var err error
		if pure, err = fetch(ctx, s); err != nil {
			return false, err
		}
		e.mu.Lock()
		e.pureOf, e.pure = s, pure
		e.mu.Unlock()
		e.p.mu.Lock()
		e.p.pure = pure
		e.p.mu.Unlock()
	}
	return pure[method], nil
}

// Next reports whether to make another attempt after one that failed as v
// (after one that may have run, not if the servers last said that r.Method
// has side effects), after waiting: nothing before the first retry, then
// the client's minimum backoff, doubling up to its maximum backoff or 1 s.
// It gives up after MaxAttempts attempts, when ctx ends (*err then says
// so), or when the wait would outlast ctx's deadline (*err, the attempt's,
// then says that no time was left).
func (r *Retry) Next(ctx context.Context, v Verdict, err *error) bool {
	if v == Final || ctx.Err() != nil {
		return false
	}
	if pure, known := r.Pool.knownPure(r.Method); v == MayHaveRun && known && !pure {
		return false // as the servers last said
	}
	r.n++
	if r.n >= MaxAttempts {
		return false
	}
	if v == MayHaveRun {
		r.pure = true
	}
	var wait time.Duration
	if r.n > 1 {
		wait = min(r.Pool.cfg.MinBackoff<<(r.n-2), r.Pool.cfg.MaxBackoff, maxWait)
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= wait {
		if se, ok := (*err).(*status.Error); ok {
			*err = &status.Error{Code: se.Code, Message: se.Message + " (no time left to retry before the deadline)", Details: se.Details, Cause: se.Cause}
		}
		return false
	}
	if wait == 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		code := status.Canceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = status.DeadlineExceeded
		}
		*err = &status.Error{Code: code, Message: ctx.Err().Error() + " while waiting to retry: " + (*err).Error(), Cause: *err}
		return false
	}
}

// knownPure reports whether method is free of side effects as the last list
// fetched from one of p's servers says, and whether there was one.
func (p *Pool) knownPure(method string) (pure, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pure[method], p.pure != nil
}
