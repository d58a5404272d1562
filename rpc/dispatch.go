package rpc

import (
	"fmt"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Calls on a server connection: admission (limits, rate), dispatch to
// inline execution or a worker goroutine.

// admit applies the checks every call passes before it runs, whether it
// came as a warren stream or as an HTTP request: the method exists (hd is
// its handler, nil for an unknown method), its policy allows the peer, the
// codec exists, and the call fits under the concurrency limits and the
// peer's rate limit. It never blocks. An admitted call holds a slot under
// the limits until its callDone. A refused one gets the code and message
// to refuse it with; for an unknown method the message is left to the
// caller, which has the name.
func (sc *serverConn) admit(hd *handler, codecID uint8) (codec.Codec, status.Code, string) {
	s := sc.srv
	if hd == nil {
		s.callRefused(nil, metrics.CallUnknownMethod, 0)
		return nil, status.Unimplemented, ""
	}
	if err := peer.Authorize(hd.policy, sc.peer); err != nil {
		s.callRefused(hd, metrics.CallMethodPolicy, status.PermissionDenied)
		s.adm.CallRefused(sc.peer, err.Error())
		return nil, status.PermissionDenied, err.Error()
	}
	cd, err := codec.ByID(codecID)
	if err != nil {
		s.callRefused(hd, metrics.CallBadCodec, status.InvalidArgument)
		return nil, status.InvalidArgument, err.Error()
	}
	if codecID == codec.IDJSON && s.opts.RejectUnknownFields {
		cd = strictJSON{cd}
	}
	if int64(sc.addCalls(1)) > int64(s.opts.MaxCallsPerConn) {
		sc.addCalls(-1)
		return s.limitHit(sc, hd, metrics.CallMaxCallsPerConn, fmt.Sprintf("too many concurrent calls on this connection (limit %d)", s.opts.MaxCallsPerConn))
	}
	if s.calls.Add(1) > int64(s.opts.MaxCalls) {
		s.calls.Add(-1)
		sc.addCalls(-1)
		return s.limitHit(sc, hd, metrics.CallMaxCalls, fmt.Sprintf("too many concurrent calls on this server (limit %d)", s.opts.MaxCalls))
	}
	if s.opts.CallRate != float64(rate.Inf) && !sc.lim.Allow() {
		s.calls.Add(-1)
		sc.addCalls(-1)
		return s.limitHit(sc, hd, metrics.CallRate, fmt.Sprintf("call rate limit exceeded (%g calls/s)", s.opts.CallRate))
	}
	s.callsTotal.Add(1)
	return cd, status.OK, ""
}

// strictJSON is codec.JSON refusing unknown fields of protobuf messages
// (ServerOptions.RejectUnknownFields).
type strictJSON struct{ codec.Codec }

func (s strictJSON) Unmarshal(data []byte, v any) error {
	if m, ok := v.(proto.Message); ok {
		return protojson.Unmarshal(data, m) // an unknown field is an error naming it
	}
	return s.Codec.Unmarshal(data, v)
}

// limitHit counts and logs a call refused by a limit, and returns admit's
// refusal.
func (s *Server) limitHit(sc *serverConn, hd *handler, why metrics.CallReason, msg string) (codec.Codec, status.Code, string) {
	s.callRefused(hd, why, status.ResourceExhausted)
	s.adm.CallRefused(sc.peer, msg)
	return nil, status.ResourceExhausted, msg
}

// onStream admits a call on the session's reader goroutine and hands it to
// a worker. Refusals are answered at once: nothing queues.
func (sc *serverConn) onStream(st *mux.Stream, h *wire.CallHeader) {
	s := sc.srv
	c := st.Owner.(*serverCall)
	sc.work.Started()
	hd := (*s.handlers.Load())[string(h.Method)]
	cd, code, msg := sc.admit(hd, h.Codec)
	if code != status.OK {
		if hd == nil {
			msg = fmt.Sprintf("unknown method %q", h.Method)
			if a := s.opts.Auth; a != nil && !a.allowMetadata(sc, h.Metadata) {
				// Without the token, a caller does not learn which
				// methods exist.
				code, msg = errNoToken.Code, errNoToken.Message
			} else if err := validMethod(string(h.Method)); err != nil { // malformed, not unknown
				code, msg = status.InvalidArgument, fmt.Sprintf("malformed call header: method name %q is not of the form Service.Method", h.Method)
			}
		}
		st.Refuse(code, msg)
		sc.work.Refused() // a refused call is activity too
		return
	}
	c.conn, c.h, c.codec = sc, hd, cd
	if h.Timeout > 0 {
		c.deadline = time.Now().Add(h.Timeout)
	}
	if len(h.Metadata) > 0 {
		c.md = append([]byte(nil), h.Metadata...)
	}
	c.state.Store(callAdmitted)
	if c.canceled() {
		// A reset (the connection failing, on another goroutine) reached
		// the call before it was admitted, and abandon found nothing to
		// release: release the slot now, or no one will.
		c.abandon()
		return
	}
	if hd.kind != kindUnary {
		s.dispatch(c) // streams are long-lived: never on the reader goroutine
	}
}

// callConfig sets the mux.Config callbacks that make sc's calls, in every
// engine: NewStream, OnStream, OnReset and OnEnd.
func (sc *serverConn) callConfig(cfg *mux.Config) {
	cfg.NewStream = newServerStream
	cfg.OnStream = sc.onStream
	cfg.OnReset = resetServerCall
	cfg.OnEnd = endCall
}

func newServerStream() *mux.Stream {
	c := new(serverCall)
	c.st.Owner = c
	return &c.st
}

func resetServerCall(st *mux.Stream, _ error) { st.Owner.(*serverCall).abandon() }

// onRequest starts an admitted call once its request message is in. It runs
// inline on the reader goroutine: no goroutine switch, and the replies to
// requests read together leave in one write. A call that runs long hands
// reading to a new goroutine (see mux.Stream.RunInline), so it delays the
// others on its connection by about a millisecond at most. Large
// requests go to a worker goroutine.
func (sc *serverConn) onRequest(st *mux.Stream) {
	if sc.srv.startCall(st) {
		st.RunInline(runCall)
	}
}

// startCall is called once the request of st's call is in (OnRequest, in
// every engine). It reports whether the call is to run inline: an admitted
// unary call with a small request, unless NoInline. It hands other
// admitted unary calls to a worker; streams started at OnStream.
func (s *Server) startCall(st *mux.Stream) (inline bool) {
	c := st.Owner.(*serverCall)
	if c.state.Load() != callAdmitted || c.h.kind != kindUnary {
		return false
	}
	if !s.opts.NoInline && st.PendingSize() <= inlineMax {
		return true
	}
	s.dispatch(c)
	return false
}

// inlineMax is the largest request run inline: larger ones are dominated by
// copying anyway, and their replies may have to wait for flow-control credit
// that only the reader goroutine can receive.
const inlineMax = 16 << 10

func runCall(st *mux.Stream) { st.Owner.(*serverCall).run() }

// dispatch hands c to an idle worker, or starts one. The number of workers is
// bounded by MaxCalls, since every call was admitted under it, plus the
// calls whose slot is free but whose reply is still being written (at most
// one per connection: the one holding its writer).
func (s *Server) dispatch(c *serverCall) {
	select {
	case s.work <- c:
	default:
		s.wg.Add(1)
		go s.worker(c)
	}
}

const workerIdle = 10 * time.Second

func (s *Server) worker(c *serverCall) {
	defer s.wg.Done()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		if c.h.kind == kindUnary {
			c.run()
		} else {
			c.runStream()
		}
		t.Reset(workerIdle)
		select {
		case c = <-s.work:
		case <-t.C:
			return
		case <-s.closed:
			return
		}
	}
}

// callRefused counts a call refused before it ran, for why, under its
// method (hd, nil if unknown) with code.
func (s *Server) callRefused(hd *handler, why metrics.CallReason, code status.Code) {
	s.refused.Add(1)
	s.met.CallRefused(why)
	if hd != nil {
		hd.met.Refused(code)
	}
}

func (s *Server) logPanic(method string, r any, stack []byte) {
	s.panics.Add(1)
	s.logger.Error("warren: handler panicked", "method", method, "panic", fmt.Sprint(r), "stack", string(stack))
}
