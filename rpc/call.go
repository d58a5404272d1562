package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/callhook"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

type callKey struct{}

// Call states. An admitted call holds a slot under the concurrency limits
// until it has run, or until it is abandoned before it could start (a cancel
// or a lost connection before the request arrived); exactly one of the two
// releases the slot. A call that ran releases it when the end of its reply
// is queued for writing (endCall), before the caller can see the reply and
// send its next call, or, if no reply was queued, when it returns.
const (
	callIdle int32 = iota
	callAdmitted
	callStarted
	callReleased
)

// serverCall is everything the server keeps for one call, allocated once
// when the stream opens. It is also the handler's context: the deadline is
// checked lazily and a timer is started only if the handler asks for Done.
type serverCall struct {
	st        mux.Stream
	conn      *serverConn
	h         *handler
	codec     codec.Codec
	deadline  time.Time    // zero: none
	md        []byte       // request metadata block, copied
	state     atomic.Int32 // callIdle, callAdmitted, callStarted or callReleased
	connFreed atomic.Bool  // off its connection's count of calls (connDone)
	// For a call that came over HTTP: the request's context, which ends
	// when the client goes away or the server closes (nil for warren
	// calls), and the stream adapter of a streaming call.
	parent context.Context
	hs     bridgecore.Stream
	proto  callhook.Protocol // the protocol it came in

	mu         sync.Mutex // protects following
	done       chan struct{}
	err        error
	timer      *time.Timer
	stopParent func() bool // stops the watch on parent started by Done

	mdMu       sync.Mutex // protects following
	header     Metadata
	trailer    Metadata
	headerSent bool // a streaming call sent its reply headers

	fx *callFiles // files of the request or reply, if any (files.go)
}

var _ context.Context = (*serverCall)(nil)

func (c *serverCall) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }

func (c *serverCall) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else {
			if !c.deadline.IsZero() {
				c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(context.DeadlineExceeded) })
			}
			if c.parent != nil {
				c.stopParent = context.AfterFunc(c.parent, func() { c.cancel(context.Canceled) })
			}
		}
	}
	return c.done
}

func (c *serverCall) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		c.cancel(context.DeadlineExceeded)
		return c.Err()
	}
	if c.parent != nil && c.parent.Err() != nil {
		c.cancel(context.Canceled)
		return c.Err()
	}
	return nil
}

func (c *serverCall) Value(key any) any {
	switch key.(type) {
	case callKey:
		return c
	case callhook.ProtocolKey:
		return c.proto
	}
	return c.conn.ctx.Value(key)
}

func (c *serverCall) String() string { return "warren call " + c.h.name }

// abandon cancels the call and, if it never started, releases its slot. A
// call that started stops counting against MaxCallsPerConn at once, so that
// a caller keeping within MaxStreams is not refused for calls it cancelled
// (PROTOCOL.md, Streams); it counts against MaxCalls until it ends.
func (c *serverCall) abandon() {
	c.cancel(context.Canceled)
	if c.state.CompareAndSwap(callAdmitted, callReleased) {
		c.callDone()
	} else if c.state.Load() == callStarted {
		c.connDone()
	}
}

// callDone releases the call's slot under the limits.
func (c *serverCall) callDone() {
	c.connDone()
	c.conn.srv.calls.Add(-1)
}

// connDone takes the call off its connection's count, once.
func (c *serverCall) connDone() {
	if c.connFreed.CompareAndSwap(false, true) {
		c.conn.addCalls(-1)
	}
}

// canceled reports whether cancel has run.
func (c *serverCall) canceled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// cancel ends the context with err (the first error wins).
func (c *serverCall) cancel(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		if c.done != nil {
			close(c.done)
		}
		if c.timer != nil {
			c.timer.Stop()
		}
		if c.stopParent != nil {
			c.stopParent()
		}
	}
	c.mu.Unlock()
}

// release releases the slot of a call that started, once: see the call
// states.
func (c *serverCall) release() {
	if c.state.CompareAndSwap(callStarted, callReleased) {
		c.callDone()
	}
}

// replyHTTP releases the slot of an HTTP call whose reply is about to be
// written; repliedHTTP follows once it is. Shutdown, which waits for the
// calls and then closes the connections, waits for those replies too
// (Server.replying): replying is raised before the call stops counting,
// and Shutdown reads calls first, so it never misses both.
func (c *serverCall) replyHTTP() {
	c.conn.srv.replying.Add(1)
	c.release()
}

func (c *serverCall) repliedHTTP() { c.conn.srv.replying.Add(-1) }

// endCall is mux.Config.OnEnd: the end of a call's reply is queued for
// writing, so the call stops counting against the limits.
func endCall(st *mux.Stream) {
	if c, ok := st.Owner.(*serverCall); ok {
		c.release()
	}
}

// begin starts an admitted call, unless it was abandoned before it could
// start (its slot is then released already). A call that began must end.
func (c *serverCall) begin() bool {
	// Running first: abandon may take a started call off its connection's
	// count at once, and a connection with neither is idle.
	c.conn.addRunning(1)
	if !c.state.CompareAndSwap(callAdmitted, callStarted) {
		c.conn.addRunning(-1)
		return false
	}
	return true
}

// end ends a call that began, once its handler returned and its reply's
// end was queued or given up: its context ends, its slot is released if
// endCall did not already, and it stops counting as running (after its
// stream was dropped).
func (c *serverCall) end() {
	c.cancel(context.Canceled)
	c.release()
	c.conn.addRunning(-1)
}

// run executes the call on a worker goroutine and sends its reply.
func (c *serverCall) run() {
	if !c.begin() {
		return
	}
	defer c.end()

	req, err := c.st.Recv(c)
	if err != nil {
		if err == io.EOF {
			c.finish(nil, status.New(status.InvalidArgument, "call without a request message"))
		}
		return // canceled or connection lost: no one to answer
	}
	if req.Files != nil {
		c.fx = &callFiles{req: req}
	}
	scratch := pool.Get(512)
	out, herr := c.invoke(req.B, scratch.B[:0])
	if herr != nil {
		c.finish(nil, status.FromError(herr))
	} else {
		c.finish(out, nil)
	}
	pool.Put(req)     // after finish: a raw reply may alias the request
	pool.Put(scratch) // finish copied the reply out of it
	if c.fx != nil {
		closeFDs(c.fx.reply)
		c.fx = nil
	}
}

// invoke calls the handler, turning a panic into an Internal error.
func (c *serverCall) invoke(req, dst []byte) (out []byte, err error) {
	t := c.h.met.Start()
	defer func() {
		if r := recover(); r != nil {
			c.conn.srv.logPanic(c.h.name, r, debug.Stack())
			out, err = dst, status.Errorf(status.Internal, "handler for %s panicked", c.h.name)
		}
		c.h.met.End(t, err, len(req), len(out))
	}()
	return c.h.unary(c, c.codec, req, dst)
}

func (c *serverCall) finish(msg []byte, se *status.Error) {
	c.mdMu.Lock()
	header, trailer := c.header.pairs(), c.trailer.pairs()
	c.mdMu.Unlock()
	if header == nil && c.header != nil {
		header = []string{}
	}
	var err error
	if se == nil {
		r := mux.Reply{Header: header, Msg: msg, HasMsg: true, Code: status.OK, Trailer: trailer}
		if c.fx != nil {
			r.Files = c.fx.reply
		}
		err = c.st.Finish(c, r)
	} else {
		err = c.st.Finish(c, mux.Reply{Header: header, Code: se.Code, Message: se.Message, Details: se.Details, Trailer: trailer})
	}
	if err != nil && isTooLarge(err) {
		// The reply could not be sent (typically over the peer's message
		// limit): tell the caller rather than leave it waiting.
		c.st.Refuse(status.ResourceExhausted, fmt.Sprintf("reply not sent: %v", err))
	}
}

func isTooLarge(err error) bool {
	var tl *wire.MessageTooLargeError
	return errors.As(err, &tl)
}
