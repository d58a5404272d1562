package main

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

// incTally counts the Counter.Inc calls the store applied, whatever the
// protocol they came in (warren, Connect, gRPC): serve logs the figures as
// it exits ("counter increments applied"), so that a test or an operator
// can add up what a fleet of servers applied and compare it with what
// callers saw succeed.
type incTally struct {
	calls atomic.Int64 // Inc calls that returned a value
	sum   atomic.Int64 // the sum of their "by" (1 when absent)
}

// interceptor counts each Counter.Inc that returned no error: the store
// applies an increment exactly when Inc returns a value.
func (t *incTally) interceptor(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	if r, ok := req.(*counter.IncRequest); ok && err == nil {
		by := int64(1)
		if r.By != nil {
			by = *r.By
		}
		t.calls.Add(1)
		t.sum.Add(by)
	}
	return resp, err
}

// log writes the final record.
func (t *incTally) log(l *slog.Logger) {
	l.Info("counter increments applied", "calls", t.calls.Load(), "sum", t.sum.Load())
}
